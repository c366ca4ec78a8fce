/* The awq_int4 quantization scheme on CUDA (weir_quant_awq_int4_cuda.so).
 *
 * Packing is the CPU plugin's, on the host: the same options, the same AWQ scale search,
 * clipping search and error-compensating rounding (plugins/quant/awq_int4/awq_search.c,
 * awq_gptq.c and awq_common.c, compiled in) and the same rounding, so
 * a model quantizes to the same 4-bit values on either device; Q4_0 / Q4_1 blocks are carried
 * over exactly and Q8_0 tensors stay int8 (the int8 scheme's kernels). The nibbles (GGUF
 * block order) and f16 d (and m) per group are staged by row on the host, then repacked there
 * into the tiled layout (weir_cuda_q4t_repack: four rows' blocks side by side, their scales in
 * one 16-byte record) that the GPU keeps, with the inverse scale per input column
 * (kernels/cuda/quant_int4.cu):
 *   1-16 tokens: the activations times 1/s are quantized to int8 per 32 columns (the CPU
 *               plugin's rule), then a dp4a GEMV streams the 4-bit weights once for all
 *               tokens; matmul_group (ABI 1.7) runs the weights of one pack group (one
 *               inverse scale) on one quantization of x in one launch;
 *   more:       W diag(1/s) is dequantized to f16 into a workspace and cuBLAS runs the GEMM.
 * No export_weight: `weir quantize` runs on the CPU. See docs/quant-awq.md. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "awq_int4.h"
#include "convert.h"
#include "weir/quant.h"
#include "weir_cuda_quant.h"

#define GEMV_MAX_TOKENS 16

typedef struct awq_cuda {
  weir_cuda_qctx q;  /* first: the plugin's self */
  awq_plugin p;      /* the search's settings and the host */
  uint64_t groups;   /* pack groups made so far: the source of cweight.scale_group */
} awq_cuda;

typedef struct cweight {
  int is_q8;
  int64_t rows, cols, kp, group;
  void *nib;       /* tiles (weir_cuda_q4t_bytes' tile_bytes) */
  void *d;         /* the tiles' scale records (f16 d[4] m[4] per tile and group) */
  int sym;         /* m = -8 d (Q4_0): the records' m slots are 0 */
  float *inv_s;    /* [cols] or NULL */
  uint64_t scale_group; /* weights of one pack_group share their inverse scale (same id) */
  void *q8;        /* int8 [rows][kp] (Q8_0 carry-over) */
  float *d8;       /* [rows][kp / 32] */
  size_t bytes;
} cweight;

#define HOST(a) ((a)->q.host)

static void a_fini(void *self) {
  awq_cuda *a = self;
  if (!a) return;
  const weir_host *h = HOST(a);
  weir_cuda_qctx_fini(&a->q);
  h->free(h->ctx, a);
}

static int a_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  awq_cuda *a = host->alloc(host->ctx, sizeof *a, 0);
  if (!a) return WEIR_E_NOMEM;
  memset(a, 0, sizeof *a);
  int rc = weir_cuda_qctx_init(&a->q, host, "awq_int4 (cuda)");
  if (rc != WEIR_OK) {
    host->free(host->ctx, a);
    return rc;
  }
  (void)args;
  awq_plugin *p = &a->p;
  if ((rc = awq_plugin_set(p, host)) != WEIR_OK) {
    a_fini(a);
    return rc;
  }
  if (p->group != 32 && p->group != 64 && p->group != 128) {
    host->set_error(host->ctx, "awq_int4 (cuda): group_size must be 32, 64 or 128, not %lld",
                    (long long)p->group);
    a_fini(a);
    return WEIR_E_INVAL;
  }
  WEIR_CUDA_QLOG(&a->q, WEIR_LOG_INFO, "awq_int4 (cuda): group_size %lld, calibration %s",
                 (long long)p->group, p->calibration ? "on" : "off (RTN)");
  *self = a;
  return WEIR_OK;
}

static int is_float(weir_dtype t) {
  return t == WEIR_DTYPE_F32 || t == WEIR_DTYPE_F16 || t == WEIR_DTYPE_BF16;
}

static int64_t a_calibration_samples(void *self, weir_dtype src_dtype) {
  awq_cuda *a = self;
  return is_float(src_dtype) && a->p.calibration ? a->p.calib_samples : 0;
}

static void a_release(void *self, void *weight) {
  awq_cuda *a = self;
  cweight *w = weight;
  if (!w) return;
  const weir_host *h = HOST(a);
  void *bufs[] = {w->nib, w->d, w->inv_s, w->q8, w->d8};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) h->device_free(h->ctx, bufs[i]);
  h->free(h->ctx, w);
}

static size_t stride_of(const weir_tensor *t) {
  size_t rb = weir_dtype_row_bytes(t->dtype, t->ne[0]);
  return t->ndim >= 2 && t->nb[1] ? t->nb[1] : rb;
}

/* Host staging of a 4-bit weight, filled row by row (in parallel) then uploaded. */
typedef struct stage {
  const awq_src *src;   /* float sources */
  const weir_tensor *t; /* Q4 sources */
  int64_t rows, cols, kp, group, ng;
  uint8_t *nib;
  uint16_t *d, *m;
  int failed;
} stage;

static void stage_fail(stage *s, int rc) {
  int expect = WEIR_OK;
  __atomic_compare_exchange_n(&s->failed, &expect, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Natural-order q of one row into GGUF block order. */
static void put_nibbles(const stage *s, int64_t r, const uint8_t *q) {
  uint8_t *row = s->nib + r * (s->kp / 2);
  memset(row, 0, (size_t)(s->kp / 2));
  for (int64_t k = 0; k < s->cols; k++) {
    const int64_t b = k / 32;
    const int j = (int)(k % 32);
    row[b * 16 + (j & 15)] |= (uint8_t)((q[k] & 15) << (j < 16 ? 0 : 4));
  }
}

static void stage_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  stage *s = arg;
  if (s->t) { /* Q4_0 / Q4_1: nibbles as they are; each group's first block's d (and m) */
    const int q41 = s->t->dtype == WEIR_DTYPE_Q4_1;
    const size_t bb = weir_dtype_block_bytes(s->t->dtype), st = stride_of(s->t);
    for (int64_t r = begin; r < end; r++) {
      const uint8_t *src = (const uint8_t *)s->t->data + (size_t)r * st;
      for (int64_t b = 0; b < s->cols / 32; b++) {
        const uint8_t *blk = src + b * bb;
        memcpy(s->nib + r * (s->kp / 2) + b * 16, blk + (q41 ? 4 : 2), 16);
        if (b % (s->group / 32) == 0) {
          s->d[r * s->ng + b * 32 / s->group] = (uint16_t)(blk[0] | blk[1] << 8);
          if (q41) s->m[r * s->ng + b * 32 / s->group] = (uint16_t)(blk[2] | blk[3] << 8);
        }
      }
    }
    return;
  }
  uint8_t *q = malloc((size_t)(s->cols * AWQ_ROWS));
  if (!q) {
    stage_fail(s, WEIR_E_NOMEM);
    return;
  }
  for (int64_t r = begin; r < end; r += AWQ_ROWS) {
    const int64_t nr = end - r < AWQ_ROWS ? end - r : AWQ_ROWS;
    int rc = awq_quantize_rows(s->src, r, nr, q, s->d + r * s->ng, s->m + r * s->ng);
    if (rc != WEIR_OK) {
      stage_fail(s, rc);
      if (rc != WEIR_E_RANGE) break;
    }
    for (int64_t i = 0; i < nr; i++) put_nibbles(s, r + i, q + i * s->cols);
  }
  free(q);
}

/* Every run of group / 32 blocks shares d and m: the configured group holds. */
static int q4_runs_share(const weir_tensor *t, int64_t rows, int64_t cols, int64_t group) {
  const size_t bb = weir_dtype_block_bytes(t->dtype), sb = t->dtype == WEIR_DTYPE_Q4_1 ? 4 : 2;
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *row = (const uint8_t *)t->data + (size_t)r * stride_of(t);
    for (int64_t b = 0; b < cols / 32; b++)
      if (b % (group / 32) && memcmp(row + b * bb, row + (b - b % (group / 32)) * bb, sb) != 0)
        return 0;
  }
  return 1;
}

static int upload(awq_cuda *a, void **dst, const void *src, size_t n) {
  int rc = HOST(a)->device_alloc(HOST(a)->ctx, n ? n : 16, dst);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = cudaMemcpyAsync(*dst, src, n, cudaMemcpyHostToDevice, a->q.stream);
  return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(&a->q, e, "upload");
}

static int pack_one(awq_cuda *a, const weir_quant_pack_args *args, const float *s,
                    const float *xc, int64_t nc, const float *gt, cweight **out) {
  const weir_host *h = HOST(a);
  const weir_tensor *t = args->src;
  const char *name = args->name ? args->name : "?";
  int rc = WEIR_OK;
  switch (t->dtype) {
  case WEIR_DTYPE_F32: case WEIR_DTYPE_F16: case WEIR_DTYPE_BF16: case WEIR_DTYPE_Q8_0:
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: break;
  default:
    WEIR_CUDA_QLOG(&a->q, WEIR_LOG_ERROR, "awq_int4 (cuda): tensor %s has unsupported dtype %s",
                   name, weir_dtype_name(t->dtype));
    return WEIR_E_NOTSUP;
  }
  const int64_t cols = t->ne[0], rows = t->ndim >= 2 ? t->ne[1] : 1;
  if (cols <= 0 || rows <= 0 || weir_dtype_row_bytes(t->dtype, cols) == 0 || t->ndim > 2) {
    WEIR_CUDA_QLOG(&a->q, WEIR_LOG_ERROR, "awq_int4 (cuda): tensor %s has a bad shape for %s",
                   name, weir_dtype_name(t->dtype));
    return WEIR_E_NOTSUP;
  }
  cudaError_t e = weir_cuda_use_device(a->q.device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(&a->q, e, "cudaSetDevice");
  cweight *w = h->alloc(h->ctx, sizeof *w, 0);
  if (!w) return WEIR_E_NOMEM;
  memset(w, 0, sizeof *w);
  w->rows = rows;
  w->cols = cols;
  w->kp = (cols + 31) / 32 * 32;
  uint8_t *nib = NULL;
  uint16_t *d = NULL, *m = NULL;
  void *tiles = NULL, *recs = NULL;
  float *inv = NULL;
  void *tmp = NULL;
  if (t->dtype == WEIR_DTYPE_Q8_0) { /* kept as int8, packed on the device */
    const size_t st = stride_of(t), qb = (size_t)rows * (size_t)w->kp;
    const size_t db = (size_t)rows * (size_t)(w->kp / 32) * 4;
    w->is_q8 = 1;
    w->bytes = qb + db;
    if ((rc = h->device_alloc(h->ctx, qb, &w->q8)) != WEIR_OK ||
        (rc = h->device_alloc(h->ctx, db, (void **)&w->d8)) != WEIR_OK ||
        (rc = upload(a, &tmp, t->data, st * (size_t)rows)) != WEIR_OK)
      goto fail;
    if ((e = weir_cuda_pack_q8(a->q.stream, w->q8, w->d8, tmp, (int32_t)t->dtype, rows, cols,
                               w->kp, st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(a->q.stream)) != cudaSuccess) {
      rc = weir_cuda_qfail(&a->q, e, name);
      goto fail;
    }
    goto done;
  }
  w->group = a->p.group;
  if ((t->dtype == WEIR_DTYPE_Q4_0 || t->dtype == WEIR_DTYPE_Q4_1) &&
      !q4_runs_share(t, rows, cols, w->group))
    w->group = 32;
  const int64_t ng = (w->kp + w->group - 1) / w->group;
  const int sym = t->dtype == WEIR_DTYPE_Q4_0;
  nib = malloc((size_t)(rows * (w->kp / 2)));
  d = calloc((size_t)(rows * ng), sizeof(uint16_t));
  m = sym ? NULL : calloc((size_t)(rows * ng), sizeof(uint16_t));
  if (!nib || !d || (!sym && !m)) {
    rc = WEIR_E_NOMEM;
    goto fail;
  }
  awq_src src = {.t = t, .stride = stride_of(t), .cols = cols, .group = w->group, .s = s,
                 .xc = xc, .nc = nc, .gt = gt};
  stage sg = {.src = is_float(t->dtype) ? &src : NULL,
              .t = is_float(t->dtype) ? NULL : t, .rows = rows, .cols = cols, .kp = w->kp,
              .group = w->group, .ng = ng, .nib = nib, .d = d, .m = m};
  if (!sg.t) memset(nib, 0, (size_t)(rows * (w->kp / 2)));
  if (h->parallel_for && h->num_threads && h->num_threads(h->ctx) > 1)
    h->parallel_for(h->ctx, rows, AWQ_ROWS, stage_chunk, &sg);
  else
    stage_chunk(&sg, 0, rows, 0);
  if (sg.failed != WEIR_OK) {
    rc = sg.failed;
    if (rc == WEIR_E_RANGE)
      WEIR_CUDA_QLOG(&a->q, WEIR_LOG_ERROR, "awq_int4 (cuda): tensor %s holds Inf/NaN or "
                     "values beyond the f16 range of the 4-bit scales", name);
    goto fail;
  }
  /* The load-time repack into the tiled layout the dp4a GEMV streams (docs/cuda.md). */
  size_t tb = 0, sb = 0;
  if (weir_cuda_q4t_bytes(rows, w->kp, (int32_t)w->group, &tb, &sb) != 0) {
    rc = WEIR_E_INVAL;
    goto fail;
  }
  tiles = malloc(tb);
  recs = malloc(sb);
  if (!tiles || !recs) {
    rc = WEIR_E_NOMEM;
    goto fail;
  }
  if (weir_cuda_q4t_repack(tiles, recs, nib, d, m, rows, w->kp, (int32_t)w->group) != 0) {
    rc = WEIR_E_INVAL;
    goto fail;
  }
  w->sym = sym;
  w->bytes = tb + sb;
  if ((rc = upload(a, &w->nib, tiles, tb)) != WEIR_OK ||
      (rc = upload(a, &w->d, recs, sb)) != WEIR_OK)
    goto fail;
  if (s) {
    inv = malloc(sizeof(float) * (size_t)cols);
    if (!inv) {
      rc = WEIR_E_NOMEM;
      goto fail;
    }
    for (int64_t k = 0; k < cols; k++) inv[k] = 1.0f / s[k];
    if ((rc = upload(a, (void **)&w->inv_s, inv, sizeof(float) * (size_t)cols)) != WEIR_OK)
      goto fail;
    w->bytes += sizeof(float) * (size_t)cols;
  }
  if ((e = cudaStreamSynchronize(a->q.stream)) != cudaSuccess) {
    rc = weir_cuda_qfail(&a->q, e, name);
    goto fail;
  }
done:
  if (tmp) h->device_free(h->ctx, tmp);
  free(tiles);
  free(recs);
  free(nib);
  free(d);
  free(m);
  free(inv);
  *out = w;
  return WEIR_OK;
fail:
  cudaStreamSynchronize(a->q.stream);
  if (tmp) h->device_free(h->ctx, tmp);
  free(tiles);
  free(recs);
  free(nib);
  free(d);
  free(m);
  free(inv);
  a_release(a, w);
  return rc;
}

static int a_pack_group(void *self, const weir_quant_pack_args *const *args, int n,
                        void **weights) {
  awq_cuda *a = self;
  if (!args || !weights || n < 1 || n > 8) return WEIR_E_INVAL;
  cweight *out[8] = {0};
  int floats = 1, rc = WEIR_OK;
  const int64_t cols = args[0]->src->ne[0];
  for (int i = 0; i < n; i++) {
    if (!args[i] || !args[i]->src) return WEIR_E_INVAL;
    if (args[i]->src->ne[0] != cols) {
      WEIR_CUDA_QLOG(&a->q, WEIR_LOG_ERROR, "awq_int4 (cuda): %s and %s share an input but have "
                     "different input sizes", args[0]->name, args[i]->name);
      return WEIR_E_INVAL;
    }
    if (!is_float(args[i]->src->dtype)) floats = 0;
  }
  const weir_quant_pack_args *a0 = args[0];
  awq_prep pp = {0};
  if (a->p.calibration && floats && a0->act_samples && a0->num_samples > 0) {
    if ((rc = awq_prepare(&a->p, args, n, cols, &pp)) != WEIR_OK) {
      WEIR_CUDA_QLOG(&a->q, WEIR_LOG_ERROR, "awq_int4 (cuda): %s: calibration failed (%s)",
                     a0->name ? a0->name : "?", weir_strerror(rc));
      return rc;
    }
    WEIR_CUDA_QLOG(&a->q, WEIR_LOG_INFO, "awq_int4 (cuda): %s%s: alpha %.2f, output error %.3g "
                   "of RTN's", a0->name ? a0->name : "?", n > 1 ? " (+ shared)" : "",
                   pp.res.alpha, pp.res.err_rtn > 0 ? pp.res.err_best / pp.res.err_rtn : 1.0);
  }
  for (int i = 0; i < n && rc == WEIR_OK; i++)
    rc = pack_one(a, args[i], pp.s, pp.xc, pp.nc, pp.gt, &out[i]);
  if (rc != WEIR_OK) {
    for (int i = 0; i < n; i++) a_release(a, out[i]);
    goto out;
  }
  /* The weights of this group got one scale (pp.s), so x quantized with one of their
   * inverse scales serves them all: matmul_group checks this id. */
  a->groups++;
  for (int i = 0; i < n; i++) {
    out[i]->scale_group = a->groups;
    weights[i] = out[i];
  }
out:
  awq_prep_free(&pp);
  return rc;
}

static int a_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  if (!weight) return WEIR_E_INVAL;
  return a_pack_group(self, &args, 1, weight);
}

static size_t a_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weight ? ((const cweight *)weight)->bytes : 0;
}

static int a_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  awq_cuda *a = self;
  const cweight *w = weight;
  if (n_tokens <= 0) return WEIR_OK;
  cudaError_t e = weir_cuda_use_device(a->q.device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(&a->q, e, "cudaSetDevice");
  if (n_tokens <= GEMV_MAX_TOKENS) {
    /* x (times 1/s) quantized to int8 per 32 columns as the CPU plugin does, then dp4a */
    int rc = weir_cuda_scratch_reserve(a->q.host, &a->q.act,
                                       weir_cuda_q8_act_bytes(n_tokens, w->kp));
    if (rc != WEIR_OK) return rc;
    e = weir_cuda_q8_quantize_act(a->q.stream, x, w->is_q8 ? NULL : w->inv_s, a->q.act.p,
                                  n_tokens, w->cols, w->kp);
    if (e != cudaSuccess) return weir_cuda_qfail(&a->q, e, "quantize activations");
    if (w->is_q8) {
      const void *qs = w->q8;
      const float *ds = w->d8;
      e = weir_cuda_gemv_q8_dp4a(a->q.stream, 1, &qs, &ds, &w->rows, &y, a->q.act.p, w->kp,
                                 n_tokens);
    } else {
      const void *tp = w->nib, *sp = w->d;
      e = weir_cuda_gemv_q4t_dp4a_set(a->q.stream, 1, &tp, &sp, &w->sym, &w->rows, &y,
                                      a->q.act.p, w->cols, w->kp, (int32_t)w->group, n_tokens);
    }
    return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(&a->q, e, "gemv");
  }
  int rc = weir_cuda_scratch_reserve(a->q.host, &a->q.wh, (size_t)w->rows * (size_t)w->cols * 2);
  if (rc != WEIR_OK) return rc;
  e = w->is_q8 ? weir_cuda_dequant_q8_f16(a->q.stream, a->q.wh.p, w->q8, w->d8, w->rows, w->cols,
                                          w->kp)
               : weir_cuda_dequant_q4t_f16(a->q.stream, a->q.wh.p, w->nib, w->d, w->sym,
                                           w->inv_s, w->rows, w->cols, w->kp,
                                           (int32_t)w->group);
  if (e != cudaSuccess) return weir_cuda_qfail(&a->q, e, "dequant");
  return weir_cuda_qgemm(&a->q, a->q.wh.p, x, y, n_tokens, w->cols, w->rows);
}

/* ABI 1.7: the 4-bit weights of one pack group (q/k/v, gate/up: one inverse scale, the same
 * cols and group size) on one quantization of x, in one dp4a launch. Int8-held (Q8_0)
 * weights, weights of different pack groups or shapes, and cuBLAS-sized batches are NOTSUP
 * (the host then runs one matmul each). */
static int a_matmul_group(void *self, const void *const *weights, int n, const float *x,
                          float *const *ys, int64_t n_tokens) {
  awq_cuda *a = self;
  if (n < 1 || n > WEIR_CUDA_Q4_MAX_SET || n_tokens > GEMV_MAX_TOKENS) return WEIR_E_NOTSUP;
  if (n_tokens <= 0) return WEIR_OK;
  const cweight *w0 = weights[0];
  const void *nib[WEIR_CUDA_Q4_MAX_SET], *d[WEIR_CUDA_Q4_MAX_SET];
  int sym[WEIR_CUDA_Q4_MAX_SET];
  int64_t rows[WEIR_CUDA_Q4_MAX_SET];
  for (int i = 0; i < n; i++) {
    const cweight *w = weights[i];
    if (!w || w->is_q8 || w->cols != w0->cols || w->group != w0->group ||
        w->scale_group != w0->scale_group || (w->inv_s == NULL) != (w0->inv_s == NULL))
      return WEIR_E_NOTSUP;
    nib[i] = w->nib, d[i] = w->d, sym[i] = w->sym, rows[i] = w->rows;
  }
  cudaError_t e = weir_cuda_use_device(a->q.device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(&a->q, e, "cudaSetDevice");
  int rc = weir_cuda_scratch_reserve(a->q.host, &a->q.act,
                                     weir_cuda_q8_act_bytes(n_tokens, w0->kp));
  if (rc != WEIR_OK) return rc;
  e = weir_cuda_q8_quantize_act(a->q.stream, x, w0->inv_s, a->q.act.p, n_tokens, w0->cols,
                                w0->kp);
  if (e != cudaSuccess) return weir_cuda_qfail(&a->q, e, "quantize activations");
  e = weir_cuda_gemv_q4t_dp4a_set(a->q.stream, n, nib, d, sym, rows, ys, a->q.act.p, w0->cols,
                                  w0->kp, (int32_t)w0->group, n_tokens);
  return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(&a->q, e, "gemv");
}

static int a_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  awq_cuda *a = self;
  const cweight *w = weight;
  int rc = weir_cuda_qcheck_ids(&a->q, w->rows);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_use_device(a->q.device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(&a->q, e, "cudaSetDevice");
  e = w->is_q8 ? weir_cuda_embed_q8(a->q.stream, w->q8, w->d8, ids, out, n, w->rows, w->cols,
                                    w->kp, a->q.bad_id_dev)
               : weir_cuda_embed_q4t(a->q.stream, w->nib, w->d, w->sym, w->inv_s, ids, out, n,
                                     w->rows, w->cols, w->kp, (int32_t)w->group,
                                     a->q.bad_id_dev);
  return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(&a->q, e, "embed");
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = a_pack,
    .release = a_release,
    .weight_bytes = a_weight_bytes,
    .matmul = a_matmul,
    .embed = a_embed,
    .matmul_group = a_matmul_group,
    .calibration_samples = a_calibration_samples,
    .pack_group = a_pack_group,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "awq_int4",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "activation-aware 4-bit weights on NVIDIA GPUs: GEMV for decode, dequant + "
                   "cuBLAS for prefill",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = awq_options,
    .num_options = AWQ_NUM_OPTIONS,
    .init = a_init,
    .fini = a_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
