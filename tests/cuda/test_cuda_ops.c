/* The CUDA device plugin: copies, the pool, the elementwise ops against a double-precision CPU
 * reference on fresh random inputs (outputs NaN-poisoned first), step graphs. Skips (77)
 * without a GPU. */
#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"
#include "weir_cuda_kernels.h"

#define D (CH_DEV)
#define S (ch_dev.self)

#define ASSERT_OK(call)                                                                 \
  do {                                                                                  \
    int rc_ = (call);                                                                   \
    if (rc_ != WEIR_OK) fprintf(stderr, "\n  %s:%d: %s = %s (%s)\n", __FILE__, __LINE__, \
                                #call, weir_strerror(rc_), ch_last_error(&ch_dev));     \
    CU_ASSERT_EQUAL_FATAL(rc_, WEIR_OK);                                                \
  } while (0)

#define ASSERT_ERR_BELOW(err, tol, what)                                                      \
  do {                                                                                        \
    double e_ = (err);                                                                        \
    if (!(e_ < (tol))) fprintf(stderr, "\n  %s: relative error %.3g, allowed %.3g\n", (what), \
                               e_, (double)(tol));                                            \
    CU_ASSERT(e_ < (tol));                                                                    \
  } while (0)

static float *upload(const float *h, size_t n) {
  float *d = ch_dalloc(n * sizeof *d);
  ch_h2d(d, h, n * sizeof *d);
  return d;
}

static float *download(const float *d, size_t n) {
  float *h = malloc(n * sizeof *h);
  ch_d2h(h, d, n * sizeof *h);
  return h;
}

static void test_info(void) {
  weir_device_info info;
  memset(&info, 0, sizeof info);
  ASSERT_OK(D->info(S, &info));
  CU_ASSERT(info.total_memory > 0);
  CU_ASSERT(info.free_memory > 0 && info.free_memory <= info.total_memory + (64ull << 30));
  CU_ASSERT(strlen(info.name) > 0);
  printf("\n  device: %s, %.1f GiB\n", info.name, (double)info.total_memory / (1 << 30));
  CU_ASSERT_PTR_NOT_NULL(D->native_handle(S, "cuda.stream"));
  CU_ASSERT_PTR_NOT_NULL(D->native_handle(S, "cublas"));
  CU_ASSERT_PTR_NOT_NULL(D->native_handle(S, "cuda.device"));
  CU_ASSERT_PTR_NULL(D->native_handle(S, "no.such.handle"));
}

static void test_copies(void) {
  const size_t n = (3u << 20) + 123; /* not a multiple of anything */
  unsigned char *h = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n; i++) h[i] = (unsigned char)ch_rand_u32();
  unsigned char *a = ch_dalloc(n), *b = ch_dalloc(n);
  ASSERT_OK(D->copy_h2d(S, a, h, n));
  ASSERT_OK(D->copy_d2d(S, b, a, n));
  ASSERT_OK(D->copy_d2h(S, back, b, n));
  CU_ASSERT(memcmp(h, back, n) == 0);
  ASSERT_OK(D->memset(S, b + 100, 0x5A, 1000));
  ASSERT_OK(D->copy_d2h(S, back, b, n));
  int ok = 1;
  for (size_t i = 0; i < n; i++)
    if (back[i] != ((i >= 100 && i < 1100) ? 0x5A : h[i])) ok = 0;
  CU_ASSERT(ok);
  ch_dfree(a);
  ch_dfree(b);

  /* Many small staged copies from one reused host buffer, more bytes than the staging ring
   * holds: every copy must carry the bytes the buffer held when it was issued. */
  const size_t piece = 48 * 1024, pieces = 600; /* ~28 MiB through a 16 MiB ring */
  unsigned char *big = ch_dalloc(piece * pieces);
  unsigned char *src = malloc(piece);
  for (size_t p = 0; p < pieces; p++) {
    memset(src, (int)(p * 7 + 1), piece);
    ASSERT_OK(D->copy_h2d(S, big + p * piece, src, piece));
  }
  unsigned char *all = malloc(piece * pieces);
  ASSERT_OK(D->copy_d2h(S, all, big, piece * pieces));
  ok = 1;
  for (size_t p = 0; p < pieces && ok; p++)
    for (size_t i = 0; i < piece; i++)
      if (all[p * piece + i] != (unsigned char)(p * 7 + 1)) {
        ok = 0;
        break;
      }
  CU_ASSERT(ok);
  ch_dfree(big);
  free(all);
  free(src);
  free(h);
  free(back);
}

static void test_pool_reuse(void) {
  /* Allocation after a free is served from the pool; distinct live allocations never
   * overlap; alignment is 256 bytes. */
  void *p[64];
  for (int i = 0; i < 64; i++) {
    p[i] = ch_dalloc(1000 + (size_t)i * 4096);
    CU_ASSERT((uintptr_t)p[i] % 256 == 0);
  }
  for (int i = 0; i < 64; i++)
    for (int j = i + 1; j < 64; j++) {
      uintptr_t a = (uintptr_t)p[i], b = (uintptr_t)p[j];
      size_t sa = 1000 + (size_t)i * 4096, sb = 1000 + (size_t)j * 4096;
      CU_ASSERT(a + sa <= b || b + sb <= a);
    }
  for (int i = 0; i < 64; i += 2) ch_dfree(p[i]);
  void *q = ch_dalloc(1000);
  int reused = 0;
  for (int i = 0; i < 64; i += 2) reused |= q == p[i];
  CU_ASSERT(reused);
  ch_dfree(q);
  for (int i = 1; i < 64; i += 2) ch_dfree(p[i]);
}

static void check_rms_norm(int64_t rows, int64_t dim, int in_place) {
  const size_t n = (size_t)(rows * dim);
  float *x = malloc(n * 4), *w = malloc((size_t)dim * 4);
  ch_fill_uniform(x, n, -3.0f, 3.0f);
  ch_fill_uniform(w, (size_t)dim, 0.5f, 1.5f);
  const float eps = 1e-5f;
  double *ref = malloc(n * sizeof *ref);
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / sqrt(ss / (double)dim + eps);
    for (int64_t i = 0; i < dim; i++) ref[r * dim + i] = x[r * dim + i] * inv * w[i];
  }
  float *dx = upload(x, n), *dw = upload(w, (size_t)dim);
  float *dout = in_place ? dx : ch_dalloc(n * 4);
  if (!in_place) ch_poison(dout, n * 4);
  ASSERT_OK(D->rms_norm(S, dout, dx, dw, rows, dim, eps));
  float *out = download(dout, n);
  char what[64];
  snprintf(what, sizeof what, "rms_norm %lldx%lld", (long long)rows, (long long)dim);
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-5, what);
  if (!in_place) ch_dfree(dout);
  ch_dfree(dx);
  ch_dfree(dw);
  free(x);
  free(w);
  free(ref);
  free(out);
}

static void test_rms_norm(void) {
  check_rms_norm(7, 2048, 0);
  check_rms_norm(3, 2050, 0); /* not a multiple of 4: the scalar path */
  check_rms_norm(1, 64, 1);   /* in place */
  check_rms_norm(33, 5120, 0);
}

static void test_add_rms_norm(void) {
  const int64_t rows = 5, dim = 2048;
  const size_t n = (size_t)(rows * dim);
  float *res = malloc(n * 4), *x = malloc(n * 4), *w = malloc((size_t)dim * 4);
  ch_fill_uniform(res, n, -2, 2);
  ch_fill_uniform(x, n, -2, 2);
  ch_fill_uniform(w, (size_t)dim, 0.5f, 1.5f);
  double *ref = malloc(n * sizeof *ref), *ref_sum = malloc(n * sizeof *ref_sum);
  for (int64_t r = 0; r < rows; r++) {
    double ss = 0;
    for (int64_t i = 0; i < dim; i++) {
      double s = (double)res[r * dim + i] + x[r * dim + i];
      ref_sum[r * dim + i] = s;
      ss += s * s;
    }
    double inv = 1.0 / sqrt(ss / (double)dim + 1e-6);
    for (int64_t i = 0; i < dim; i++) ref[r * dim + i] = ref_sum[r * dim + i] * inv * w[i];
  }
  float *dres = upload(res, n), *dx = upload(x, n), *dw = upload(w, (size_t)dim);
  float *dout = ch_dalloc(n * 4);
  ch_poison(dout, n * 4);
  cudaStream_t st = (cudaStream_t)D->native_handle(S, "cuda.stream");
  CU_ASSERT_EQUAL(weir_cuda_add_rms_norm(st, dout, dres, dx, dw, rows, dim, 1e-6f), cudaSuccess);
  float *out = download(dout, n), *sum = download(dres, n);
  ASSERT_ERR_BELOW(ch_rel_err(sum, ref_sum, n), 1e-6, "add_rms_norm residual");
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-5, "add_rms_norm");
  ch_dfree(dres);
  ch_dfree(dx);
  ch_dfree(dw);
  ch_dfree(dout);
  free(res);
  free(x);
  free(w);
  free(ref);
  free(ref_sum);
  free(out);
  free(sum);
}

static void check_rope(weir_rope_style style, int32_t n_heads, int32_t hd, int32_t rot) {
  const int64_t nt = 9;
  const size_t n = (size_t)(nt * n_heads * hd);
  float *x = malloc(n * 4);
  int32_t pos[9];
  for (int i = 0; i < 9; i++) pos[i] = (int32_t)(ch_rand_u32() % 2048);
  ch_fill_uniform(x, n, -1, 1);
  const double base = 10000.0, fs = 0.5;
  double *ref = malloc(n * sizeof *ref);
  for (size_t i = 0; i < n; i++) ref[i] = x[i];
  for (int64_t t = 0; t < nt; t++)
    for (int h = 0; h < n_heads; h++) {
      double *hp = ref + (t * n_heads + h) * hd;
      const float *xp = x + (t * n_heads + h) * hd;
      for (int i = 0; i < rot / 2; i++) {
        double th = pos[t] * fs * pow(base, -2.0 * i / rot);
        int a = style == WEIR_ROPE_NEOX ? i : 2 * i;
        int b = style == WEIR_ROPE_NEOX ? i + rot / 2 : 2 * i + 1;
        hp[a] = xp[a] * cos(th) - xp[b] * sin(th);
        hp[b] = xp[a] * sin(th) + xp[b] * cos(th);
      }
    }
  float *dx = upload(x, n);
  int32_t *dpos = ch_dalloc(sizeof pos);
  ch_h2d(dpos, pos, sizeof pos);
  ASSERT_OK(D->rope(S, dx, dpos, nt, n_heads, hd, rot, (float)base, (float)fs, style));
  float *out = download(dx, n);
  char what[64];
  snprintf(what, sizeof what, "rope style %d rot %d/%d", (int)style, rot, hd);
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-4, what);
  ch_dfree(dx);
  ch_dfree(dpos);
  free(x);
  free(ref);
  free(out);
}

static void test_rope(void) {
  check_rope(WEIR_ROPE_NORM, 4, 64, 64);
  check_rope(WEIR_ROPE_NEOX, 3, 128, 128);
  check_rope(WEIR_ROPE_NORM, 2, 64, 32); /* partial rotation leaves the tail alone */
  check_rope(WEIR_ROPE_NEOX, 2, 80, 40);
  float *dx = ch_dalloc(64 * 4);
  int32_t *dpos = ch_dalloc(4);
  CU_ASSERT_EQUAL(D->rope(S, dx, dpos, 1, 1, 64, 65, 10000, 1, WEIR_ROPE_NORM), WEIR_E_INVAL);
  ch_dfree(dx);
  ch_dfree(dpos);
}

static void test_swiglu_add_bias(void) {
  const int64_t rows = 6, dim = 1000;
  const size_t n = (size_t)(rows * dim);
  float *g = malloc(n * 4), *u = malloc(n * 4), *bias = malloc((size_t)dim * 4);
  ch_fill_uniform(g, n, -6, 6);
  ch_fill_uniform(u, n, -2, 2);
  ch_fill_uniform(bias, (size_t)dim, -1, 1);
  double *ref = malloc(n * sizeof *ref);
  float *dg = upload(g, n), *du = upload(u, n), *db = upload(bias, (size_t)dim);
  float *dout = ch_dalloc(n * 4);

  for (size_t i = 0; i < n; i++) ref[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
  ch_poison(dout, n * 4);
  ASSERT_OK(D->swiglu(S, dout, dg, du, (int64_t)n));
  float *out = download(dout, n);
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-6, "swiglu");
  free(out);

  for (size_t i = 0; i < n; i++) ref[i] = (double)g[i] + u[i];
  ASSERT_OK(D->add(S, dg, dg, du, (int64_t)n)); /* out aliases a */
  out = download(dg, n);
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-7, "add");
  free(out);

  for (size_t i = 0; i < n; i++) ref[i] = (double)u[i] + bias[i % (size_t)dim];
  ASSERT_OK(D->add_bias(S, du, db, rows, dim));
  out = download(du, n);
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-7, "add_bias");
  free(out);

  ch_dfree(dg);
  ch_dfree(du);
  ch_dfree(db);
  ch_dfree(dout);
  free(g);
  free(u);
  free(bias);
  free(ref);
}

/* ABI 1.6 encoder ops: LayerNorm (with and without bias, in place), exact GELU, and
 * bidirectional attention over more keys than a warp has lanes, with grouped heads. */
static void test_encoder_ops(void) {
  const int64_t rows = 5, dim = 768;
  const size_t n = (size_t)(rows * dim);
  float *x = malloc(n * 4), *w = malloc((size_t)dim * 4), *b = malloc((size_t)dim * 4);
  double *ref = malloc(n * sizeof *ref);
  ch_fill_uniform(x, n, -3, 3);
  ch_fill_uniform(w, (size_t)dim, 0.5f, 1.5f);
  ch_fill_uniform(b, (size_t)dim, -1, 1);
  float *dx = upload(x, n), *dw = upload(w, (size_t)dim), *db = upload(b, (size_t)dim);
  float *dout = ch_dalloc(n * 4);
  for (int with_bias = 0; with_bias <= 1; with_bias++) {
    for (int64_t r = 0; r < rows; r++) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < dim; i++) mean += x[r * dim + i];
      mean /= (double)dim;
      for (int64_t i = 0; i < dim; i++) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
      const double inv = 1 / sqrt(var / (double)dim + 1e-12);
      for (int64_t i = 0; i < dim; i++)
        ref[r * dim + i] = (x[r * dim + i] - mean) * inv * w[i] + (with_bias ? b[i] : 0);
    }
    ch_poison(dout, n * 4);
    ASSERT_OK(D->layer_norm(S, dout, dx, dw, with_bias ? db : NULL, rows, dim, 1e-12f));
    float *out = download(dout, n);
    ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-5, "layer_norm");
    free(out);
  }
  for (size_t i = 0; i < n; i++) ref[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
  ASSERT_OK(D->gelu(S, dx, dx, (int64_t)n)); /* in place */
  float *out = download(dx, n);
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, n), 1e-6, "gelu");
  free(out);

  const int nt = 77, nh = 12, nkv = 4, hd = 64;
  const size_t nq = (size_t)nt * nh * hd, nk = (size_t)nt * nkv * hd;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
  double *aref = malloc(nq * sizeof *aref), *sc = malloc((size_t)nt * sizeof *sc);
  ch_fill_uniform(q, nq, -1, 1);
  ch_fill_uniform(k, nk, -1, 1);
  ch_fill_uniform(v, nk, -1, 1);
  for (int h = 0; h < nh; h++)
    for (int i = 0; i < nt; i++) {
      const int g = h / (nh / nkv);
      double mx = -1e300, sum = 0;
      for (int j = 0; j < nt; j++) {
        double d = 0;
        for (int e = 0; e < hd; e++)
          d += (double)q[((size_t)i * nh + h) * hd + e] * k[((size_t)j * nkv + g) * hd + e];
        sc[j] = d * 0.125;
        if (sc[j] > mx) mx = sc[j];
      }
      for (int j = 0; j < nt; j++) sum += (sc[j] = exp(sc[j] - mx));
      for (int e = 0; e < hd; e++) {
        double a = 0;
        for (int j = 0; j < nt; j++) a += sc[j] / sum * v[((size_t)j * nkv + g) * hd + e];
        aref[((size_t)i * nh + h) * hd + e] = a;
      }
    }
  float *dq = upload(q, nq), *dk = upload(k, nk), *dv = upload(v, nk), *dao = ch_dalloc(nq * 4);
  ch_poison(dao, nq * 4);
  ASSERT_OK(D->attention_full(S, dao, dq, dk, dv, nt, nh, nkv, hd, 0.125f));
  out = download(dao, nq);
  ASSERT_ERR_BELOW(ch_rel_err(out, aref, nq), 1e-5, "attention_full");
  free(out);
  CU_ASSERT_NOT_EQUAL(D->attention_full(S, dao, dq, dk, dv, nt, nh, 5, hd, 0.125f), WEIR_OK);
  ch_dfree(dq);
  ch_dfree(dk);
  ch_dfree(dv);
  ch_dfree(dao);
  ch_dfree(dx);
  ch_dfree(dw);
  ch_dfree(db);
  ch_dfree(dout);
  free(q);
  free(k);
  free(v);
  free(aref);
  free(sc);
  free(x);
  free(w);
  free(b);
  free(ref);
}

/* ABI 1.8 argmax_rows through the device plugin, on the GPU: the host's greedy rule (the
 * lowest index of the largest value, from -inf; the fallback when nothing beats -inf), with
 * ties in one thread's share and across threads, an all -inf row, NaN, the head's ids, and
 * the top probability against double precision. */
static void test_argmax_rows(void) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(D->argmax_rows);
  const int64_t rows = 6, n = 4096;
  float *x = malloc((size_t)(rows * n) * 4);
  ch_fill_uniform(x, (size_t)(rows * n), -8, 8);
  x[1 * n + 3000] = x[1 * n + 700] = x[1 * n + 2999] = x[1 * n + 700 + 256] = 9.5f;
  x[2 * n + 5] = x[2 * n + 6] = 12.0f;
  for (int64_t i = 0; i < n; i++) x[3 * n + i] = -INFINITY;
  x[4 * n + 0] = NAN;
  x[4 * n + 100] = 20.0f;
  x[5 * n + n - 1] = 30.0f;
  int32_t *ids = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 13) % 16385);
  float *dx = upload(x, (size_t)(rows * n));
  int32_t *dids = ch_dalloc((size_t)n * 4), *dout = ch_dalloc((size_t)rows * 4);
  float *dprob = ch_dalloc((size_t)rows * 4);
  ch_h2d(dids, ids, (size_t)n * 4);
  for (int with_ids = 0; with_ids < 2; with_ids++) {
    ch_poison(dprob, (size_t)rows * 4);
    ASSERT_OK(D->argmax_rows(S, dout, dprob, dx, rows, n, with_ids ? dids : NULL, 7));
    int32_t out[6];
    float prob[6];
    ch_d2h(out, dout, sizeof out);
    ch_d2h(prob, dprob, sizeof prob);
    for (int64_t r = 0; r < rows; r++) {
      int64_t best = -1;
      float bv = -INFINITY;
      for (int64_t i = 0; i < n; i++)
        if (x[r * n + i] > bv) {
          bv = x[r * n + i];
          best = i;
        }
      const int32_t want = best < 0 ? 7 : with_ids ? ids[best] : (int32_t)best;
      if (out[r] != want)
        fprintf(stderr, "\n  argmax_rows row %lld%s: %d, host %d\n", (long long)r,
                with_ids ? " (ids)" : "", out[r], want);
      CU_ASSERT_EQUAL(out[r], want);
      double sum = 0;
      if (best >= 0)
        for (int64_t i = 0; i < n; i++) sum += exp((double)x[r * n + i] - bv);
      const double p = best >= 0 && sum > 0 ? 1.0 / sum : 0.0; /* NaN row: 0 */
      CU_ASSERT(fabs((double)prob[r] - p) <= 1e-5 * (p > 1 ? p : 1));
    }
  }
  CU_ASSERT_EQUAL(D->argmax_rows(S, dout, NULL, dx, -1, n, NULL, 0), WEIR_E_INVAL);
  ch_dfree(dx);
  ch_dfree(dids);
  ch_dfree(dout);
  ch_dfree(dprob);
  free(x);
  free(ids);
}

static void test_get_rows(void) {
  const int64_t rows = 50, dim = 777, n = 13;
  float *x = malloc((size_t)(rows * dim) * 4);
  ch_fill_uniform(x, (size_t)(rows * dim), -1, 1);
  int32_t ids[13];
  for (int i = 0; i < n; i++) ids[i] = (int32_t)(ch_rand_u32() % rows);
  ids[3] = ids[4]; /* a repeated row */
  double *ref = malloc((size_t)(n * dim) * sizeof *ref);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < dim; j++) ref[i * dim + j] = x[ids[i] * dim + j];
  float *dx = upload(x, (size_t)(rows * dim));
  int32_t *dids = ch_dalloc(sizeof ids);
  ch_h2d(dids, ids, sizeof ids);
  float *dout = ch_dalloc((size_t)(n * dim) * 4);
  ch_poison(dout, (size_t)(n * dim) * 4);
  ASSERT_OK(D->get_rows(S, dout, dx, dids, n, dim));
  float *out = download(dout, (size_t)(n * dim));
  ASSERT_ERR_BELOW(ch_rel_err(out, ref, (size_t)(n * dim)), 1e-9, "get_rows");
  ch_dfree(dx);
  ch_dfree(dids);
  ch_dfree(dout);
  free(x);
  free(ref);
  free(out);
}

static void test_graphs(void) {
  const int64_t n = 4096;
  float *a = malloc(n * 4), *b = malloc(n * 4);
  double *ref = malloc(n * sizeof *ref);
  float *da = ch_dalloc(n * 4), *db = ch_dalloc(n * 4), *dt = ch_dalloc(n * 4),
        *dout = ch_dalloc(n * 4);
  CU_ASSERT_EQUAL(D->graph_launch(S, 7), WEIR_E_NOTFOUND);
  ASSERT_OK(D->graph_begin(S, 7));
  CU_ASSERT_EQUAL(D->copy_h2d(S, da, a, 4), WEIR_E_BUSY); /* forbidden while recording */
  CU_ASSERT_EQUAL(D->synchronize(S), WEIR_E_BUSY);
  ASSERT_OK(D->add(S, dt, da, db, n));
  ASSERT_OK(D->swiglu(S, dout, dt, db, n));
  ASSERT_OK(D->graph_end(S, 7));
  for (int round = 0; round < 3; round++) {
    /* New inputs each round, written into the same buffers the graph reads. */
    ch_fill_uniform(a, (size_t)n, -3, 3);
    ch_fill_uniform(b, (size_t)n, -3, 3);
    ch_h2d(da, a, n * 4);
    ch_h2d(db, b, n * 4);
    ch_poison(dout, n * 4);
    for (int64_t i = 0; i < n; i++) {
      double t = (double)a[i] + b[i];
      ref[i] = t / (1.0 + exp(-t)) * b[i];
    }
    ASSERT_OK(D->graph_launch(S, 7));
    float *out = download(dout, (size_t)n);
    ASSERT_ERR_BELOW(ch_rel_err(out, ref, (size_t)n), 1e-6, "graph replay");
    free(out);
  }
  D->graph_reset(S);
  CU_ASSERT_EQUAL(D->graph_launch(S, 7), WEIR_E_NOTFOUND);
  ch_dfree(da);
  ch_dfree(db);
  ch_dfree(dt);
  ch_dfree(dout);
  free(a);
  free(b);
  free(ref);
}

int main(void) {
  ch_device_open_or_skip();
  ch_seed_from_env(0x5eed0001u);
  static const ch_test tests[] = {
      {"info and handles", test_info},
      {"copies and staging", test_copies},
      {"pool reuse", test_pool_reuse},
      {"rms_norm", test_rms_norm},
      {"add_rms_norm (fused)", test_add_rms_norm},
      {"rope", test_rope},
      {"swiglu, add, add_bias", test_swiglu_add_bias},
      {"get_rows", test_get_rows},
      {"argmax_rows (ABI 1.8)", test_argmax_rows},
      {"encoder ops (ABI 1.6)", test_encoder_ops},
      {"step graphs", test_graphs},
      {NULL, NULL},
  };
  int rc = ch_run_suite("cuda_ops", tests);
  ch_device_close();
  return rc;
}
