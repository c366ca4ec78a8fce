/* The reference forward pass on hand-checkable models: its building blocks against their
 * definitions, and whole one-layer models whose weights make the answer computable by hand
 * (zeroed blocks, identity projections, uniform attention, a single token). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/quantize_row.h"
#include "format/gguf_write.h"
#include "reference.h"
#include "testutil.h"
#include "weir/status.h"

static char *g_dir;
static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* uniform in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

#define ASSERT_CLOSE(a, b, tol)                                                          \
  do {                                                                                   \
    double a_ = (a), b_ = (b);                                                           \
    if (!(fabs(a_ - b_) <= (tol))) {                                                     \
      fprintf(stderr, "\n  %s:%d: %s = %.12g, expected %.12g\n", __FILE__, __LINE__, #a, \
              a_, b_);                                                                   \
      CU_FAIL("not close");                                                              \
    }                                                                                    \
  } while (0)

/* ---- building blocks ---- */

static void test_rope(void) {
  double x[8], y[8];
  for (int i = 0; i < 8; i++) x[i] = y[i] = urand();
  weir_ref_rope(y, 8, 0, 10000, 1, WEIR_ROPE_NORM); /* position 0: identity */
  for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(y[i], x[i]);
  weir_ref_rope(y, 8, 0, 10000, 1, WEIR_ROPE_NEOX);
  for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(y[i], x[i]);

  /* The first pair turns by exactly pos radians; NORM pairs neighbours, NEOX halves. */
  double a[4] = {1, 0, 0, 0}, b[4] = {1, 0, 0, 0};
  weir_ref_rope(a, 4, 1, 10000, 1, WEIR_ROPE_NORM);
  ASSERT_CLOSE(a[0], cos(1.0), 1e-15);
  ASSERT_CLOSE(a[1], sin(1.0), 1e-15);
  ASSERT_CLOSE(a[2], 0, 0);
  weir_ref_rope(b, 4, 1, 10000, 1, WEIR_ROPE_NEOX);
  ASSERT_CLOSE(b[0], cos(1.0), 1e-15);
  ASSERT_CLOSE(b[1], 0, 0);
  ASSERT_CLOSE(b[2], sin(1.0), 1e-15);
  /* Second pair: angle pos * base^(-2/4) = 3 / 100 for base 10000 at position 3; linear
   * scaling 2 halves it. */
  double c[4] = {0, 0, 1, 0};
  weir_ref_rope(c, 4, 3, 10000, 2, WEIR_ROPE_NORM);
  ASSERT_CLOSE(c[2], cos(0.015), 1e-15);
  ASSERT_CLOSE(c[3], sin(0.015), 1e-15);

  /* Rotations keep the norm, and q.k depends only on the distance between positions. */
  for (int style = 0; style <= 2; style += 2) {
    double q[16], k[16], q2[16], k2[16];
    for (int i = 0; i < 16; i++) q[i] = q2[i] = urand(), k[i] = k2[i] = urand();
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 16; i++) n0 += q[i] * q[i];
    weir_ref_rope(q, 16, 7, 10000, 1, style);
    weir_ref_rope(k, 16, 3, 10000, 1, style);
    weir_ref_rope(q2, 16, 27, 10000, 1, style);
    weir_ref_rope(k2, 16, 23, 10000, 1, style);
    double d1 = 0, d2 = 0;
    for (int i = 0; i < 16; i++) n1 += q[i] * q[i], d1 += q[i] * k[i], d2 += q2[i] * k2[i];
    ASSERT_CLOSE(n1, n0, 1e-12);
    ASSERT_CLOSE(d1, d2, 1e-12);
  }
  /* Partial rotation leaves dims past n_rot alone. */
  double z[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  weir_ref_rope(z, 4, 5, 10000, 1, WEIR_ROPE_NORM);
  CU_ASSERT(z[4] == 5 && z[5] == 6 && z[6] == 7 && z[7] == 8);
}

static void test_rmsnorm(void) {
  double x[64], y[64], w[64];
  for (int i = 0; i < 64; i++) x[i] = urand() * 10, w[i] = 2.0;
  weir_ref_rmsnorm(x, NULL, 64, 0, y);
  double ss = 0;
  for (int i = 0; i < 64; i++) ss += y[i] * y[i];
  ASSERT_CLOSE(sqrt(ss / 64), 1.0, 1e-12); /* unit RMS */
  ASSERT_CLOSE(y[0] / x[0], y[9] / x[9], 1e-12); /* one common scale */
  weir_ref_rmsnorm(x, w, 64, 0, y);
  ss = 0;
  for (int i = 0; i < 64; i++) ss += y[i] * y[i];
  ASSERT_CLOSE(sqrt(ss / 64), 2.0, 1e-12);
}

/* The reference's dequantization agrees with core's independent one on random blocks. */
static void test_dequant_matches_core(void) {
  float src[512], core[512];
  double ref[512];
  uint8_t q[512 * 4];
  const weir_dtype types[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16,
                              WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1,
                              WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    for (int i = 0; i < 512; i++) src[i] = (float)(urand() * (1 + i % 7));
    WT_ASSERT_INT_EQ(weir_quantize_row(types[t], src, q, 512), 0);
    WT_ASSERT_INT_EQ(weir_dequantize_row(types[t], q, core, 512), 0);
    WT_ASSERT_INT_EQ(weir_ref_dequant(types[t], q, ref, 512), 0);
    int bad = 0;
    for (int i = 0; i < 512; i++)
      if (fabs(ref[i] - core[i]) > 1e-6 * (1 + fabs(ref[i]))) bad++;
    if (bad) fprintf(stderr, "\n  %s: %d values differ\n", weir_dtype_name(types[t]), bad);
    WT_ASSERT_INT_EQ(bad, 0);
  }
  /* Every half-float bit pattern. */
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    uint16_t v = (uint16_t)h;
    double r;
    weir_ref_dequant(WEIR_DTYPE_F16, &v, &r, 1);
    float c = weir_f16_to_f32(v);
    if (!(r == (double)c || (isnan(r) && isnan(c)))) bad++;
  }
  WT_ASSERT_INT_EQ(bad, 0);
  /* K-quant blocks of random bytes, every bit pattern of the packed scales, mins and high
   * bits the quantizer may never write, with finite f16 scales (0x3c00 = 1.0 give or take the
   * low byte): the reference, written from the layout, reads them as core does. */
  const weir_dtype kq[] = {WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K};
  const int kbytes[] = {144, 176, 210}, dpos[] = {0, 0, 208};
  for (int t = 0; t < 3; t++) {
    bad = 0;
    for (int rep = 0; rep < 50; rep++) {
      for (int i = 0; i < 2 * kbytes[t]; i++) q[i] = (uint8_t)(urand() * 128 + 128);
      for (int b = 0; b < 2; b++) {
        uint8_t *blk = q + kbytes[t] * b + dpos[t];
        blk[1] = (uint8_t)(0x30 + (blk[1] & 0x0f)); /* d (and Q4_K/Q5_K's dmin) finite */
        if (t < 2) blk[3] = (uint8_t)(0x30 + (blk[3] & 0x0f));
      }
      WT_ASSERT_INT_EQ(weir_dequantize_row(kq[t], q, core, 512), 0);
      WT_ASSERT_INT_EQ(weir_ref_dequant(kq[t], q, ref, 512), 0);
      for (int i = 0; i < 512; i++)
        if (fabs(ref[i] - core[i]) > 1e-6 * (1 + fabs(ref[i]))) bad++;
    }
    if (bad) fprintf(stderr, "\n  random %s: %d values differ\n", weir_dtype_name(kq[t]), bad);
    WT_ASSERT_INT_EQ(bad, 0);
  }
  WT_ASSERT_INT_EQ(weir_ref_dequant(WEIR_DTYPE_Q4_K, q, ref, 128), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_ref_dequant(WEIR_DTYPE_Q2_K, q, ref, 256), WEIR_E_NOTSUP);
}

/* ---- hand-made models ---- */

typedef struct spec {
  const char *arch;
  int E, H, HKV, F, V;
  int tied;
  weir_dtype wtype; /* type of the matrices */
  /* Weights, F32 row-major [out][in]; NULL means zeros (ones for norms). */
  float *emb, *out, *onorm, *anorm, *fnorm, *wq, *wk, *wv, *wo, *wg, *wu, *wd, *bq, *bk, *bv;
} spec;

static float *filled(size_t n, double scale) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)(urand() * scale);
  return p;
}

static float *identity(int rows, int cols) {
  float *p = calloc((size_t)rows * (size_t)cols, sizeof *p);
  for (int i = 0; i < rows && i < cols; i++) p[(size_t)i * (size_t)cols + (size_t)i] = 1;
  return p;
}

static char *write_spec(const spec *s, const char *fname) {
  weir_gguf_writer *w;
  char key[96];
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  weir_gguf_add_str(w, "general.architecture", s->arch);
#define K(x) (snprintf(key, sizeof key, "%s.%s", s->arch, x), key)
  weir_gguf_add_u32(w, K("context_length"), 64);
  weir_gguf_add_u32(w, K("embedding_length"), (uint32_t)s->E);
  weir_gguf_add_u32(w, K("block_count"), 1);
  weir_gguf_add_u32(w, K("feed_forward_length"), (uint32_t)s->F);
  weir_gguf_add_u32(w, K("attention.head_count"), (uint32_t)s->H);
  weir_gguf_add_u32(w, K("attention.head_count_kv"), (uint32_t)s->HKV);
  weir_gguf_add_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f);
#undef K
  int KV = s->HKV * (s->E / s->H);
  /* Every tensor's bytes are kept until the file is written. */
  void *keep[32];
  int nkeep = 0;
  struct {
    const char *name;
    float *data;
    int in, out; /* out 0: a vector */
    int ones;
  } t[] = {
      {"token_embd.weight", s->emb, s->E, s->V, 0},
      {"output_norm.weight", s->onorm, s->E, 0, 1},
      {"output.weight", s->out, s->E, s->V, 0},
      {"blk.0.attn_norm.weight", s->anorm, s->E, 0, 1},
      {"blk.0.attn_q.weight", s->wq, s->E, s->E, 0},
      {"blk.0.attn_k.weight", s->wk, s->E, KV, 0},
      {"blk.0.attn_v.weight", s->wv, s->E, KV, 0},
      {"blk.0.attn_q.bias", s->bq, s->E, 0, 0},
      {"blk.0.attn_k.bias", s->bk, KV, 0, 0},
      {"blk.0.attn_v.bias", s->bv, KV, 0, 0},
      {"blk.0.attn_output.weight", s->wo, s->E, s->E, 0},
      {"blk.0.ffn_norm.weight", s->fnorm, s->E, 0, 1},
      {"blk.0.ffn_gate.weight", s->wg, s->E, s->F, 0},
      {"blk.0.ffn_up.weight", s->wu, s->E, s->F, 0},
      {"blk.0.ffn_down.weight", s->wd, s->F, s->E, 0},
  };
  int qwen = strcmp(s->arch, "qwen2") == 0;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    if (s->tied && !strcmp(t[i].name, "output.weight")) continue;
    if (!qwen && strstr(t[i].name, ".bias")) continue;
    size_t n = (size_t)t[i].in * (size_t)(t[i].out ? t[i].out : 1);
    float *f = malloc(n * sizeof *f);
    for (size_t k = 0; k < n; k++) f[k] = t[i].data ? t[i].data[k] : t[i].ones ? 1.0f : 0.0f;
    weir_dtype dt = t[i].out && strcmp(t[i].name, "token_embd.weight") ? s->wtype
                                                                         : WEIR_DTYPE_F32;
    uint8_t *bytes = malloc(n * 4);
    CU_ASSERT_EQUAL_FATAL(weir_quantize_row(dt, f, bytes, (int64_t)n), 0);
    free(f);
    keep[nkeep++] = bytes;
    int64_t ne[2] = {t[i].in, t[i].out};
    CU_ASSERT_FATAL(weir_gguf_add_tensor(w, t[i].name, dt, t[i].out ? 2 : 1, ne, bytes) >= 0);
  }
  char *path = wt_strf("%s/%s", g_dir, fname);
  char err[256];
  CU_ASSERT_EQUAL_FATAL(weir_gguf_write_file(w, path, err, sizeof err), 0);
  weir_gguf_writer_free(w);
  for (int i = 0; i < nkeep; i++) free(keep[i]);
  return path;
}

static double *run(const char *path, const int32_t *toks, int n, int *vocab) {
  weir_ref_model *m = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_ref_model_load(path, &m), 0);
  int V = weir_ref_model_hparams(m)->n_vocab;
  double *lg = malloc((size_t)n * (size_t)V * sizeof *lg);
  WT_ASSERT_INT_EQ(weir_ref_forward(m, toks, n, lg), 0);
  if (vocab) *vocab = V;
  weir_ref_model_free(m);
  return lg;
}

/* The files store epsilon as f32, so the expectation uses the same value. */
static void rmsnorm_f(const double *x, int n, double *y) {
  weir_ref_rmsnorm(x, NULL, n, (double)1e-5f, y);
}

/* All sublayers zeroed: logits = Wout . (rmsnorm(embedding) * output_norm). */
static void test_empty_layers(void) {
  spec s = {"llama", 32, 4, 2, 48, 20, 0, WEIR_DTYPE_F32};
  s.emb = filled(32 * 20, 1);
  s.out = filled(32 * 20, 1);
  s.onorm = filled(32, 1);
  s.wq = filled(32 * 32, 1);
  s.wk = filled(32 * 16, 1);
  s.wv = filled(32 * 16, 1);
  s.wg = filled(32 * 48, 1);
  s.wu = filled(32 * 48, 1); /* wo and wd zero: nothing reaches the residual stream */
  char *path = write_spec(&s, "empty.gguf");
  int32_t toks[3] = {5, 19, 0};
  double *lg = run(path, toks, 3, NULL);
  for (int t = 0; t < 3; t++) {
    double x[32], y[32];
    for (int i = 0; i < 32; i++) x[i] = s.emb[toks[t] * 32 + i];
    rmsnorm_f(x, 32, y);
    for (int v = 0; v < 20; v++) {
      double want = 0;
      for (int i = 0; i < 32; i++) want += (double)s.out[v * 32 + i] * y[i] * s.onorm[i];
      ASSERT_CLOSE(lg[t * 20 + v], want, 1e-12);
    }
  }
  free(lg);
  free(path);
  free(s.emb), free(s.out), free(s.onorm), free(s.wq), free(s.wk), free(s.wv), free(s.wg),
      free(s.wu);
}

/* One token: attention over itself returns its own v projection whatever q and k are, and
 * grouped heads read their shared KV head. With Wo = I, no FFN and output = I:
 * logits = rmsnorm(x0 + expand(Wv . rmsnorm(x0) * attn_norm)). */
static void test_single_token_is_v_projection(void) {
  enum { E = 32, H = 4, HKV = 2, D = 8, KV = HKV * D };
  spec s = {"llama", E, H, HKV, 32, E, 0, WEIR_DTYPE_F32};
  s.emb = filled(E * E, 1);
  s.out = identity(E, E);
  s.anorm = filled(E, 1);
  s.wq = filled(E * E, 3);
  s.wk = filled(E * KV, 3);
  s.wv = filled(E * KV, 1);
  s.wo = identity(E, E);
  char *path = write_spec(&s, "single.gguf");
  for (int32_t tok = 0; tok < E; tok += 7) {
    double *lg = run(path, &tok, 1, NULL);
    double x0[E], h[E], v[KV], x1[E], want[E];
    for (int i = 0; i < E; i++) x0[i] = s.emb[tok * E + i];
    rmsnorm_f(x0, E, h);
    for (int i = 0; i < E; i++) h[i] *= s.anorm[i];
    for (int r = 0; r < KV; r++) {
      v[r] = 0;
      for (int c = 0; c < E; c++) v[r] += (double)s.wv[r * E + c] * h[c];
    }
    for (int hd = 0; hd < H; hd++)
      for (int i = 0; i < D; i++) x1[hd * D + i] = x0[hd * D + i] + v[(hd / (H / HKV)) * D + i];
    rmsnorm_f(x1, E, want);
    for (int i = 0; i < E; i++) ASSERT_CLOSE(lg[i], want[i], 1e-12);
    free(lg);
  }
  free(path);
  free(s.emb), free(s.out), free(s.anorm), free(s.wq), free(s.wk), free(s.wv), free(s.wo);
}

/* Wq = 0 makes every score 0, so position t averages v over positions 0..t (the causal
 * mask): with Wv = Wo = I, x1[t] = x0[t] + mean_{s<=t} rmsnorm(x0[s]). */
static void test_uniform_causal_attention(void) {
  enum { E = 16, N = 5 };
  spec s = {"mistral", E, 2, 2, 32, E, 0, WEIR_DTYPE_F32};
  s.emb = filled(E * E, 2);
  s.out = identity(E, E);
  s.wk = filled(E * E, 1);
  s.wv = identity(E, E);
  s.wo = identity(E, E);
  char *path = write_spec(&s, "uniform.gguf");
  int32_t toks[N] = {3, 3, 9, 0, 15};
  double *lg = run(path, toks, N, NULL);
  double h[N][E];
  for (int t = 0; t < N; t++) {
    double x0[E];
    for (int i = 0; i < E; i++) x0[i] = s.emb[toks[t] * E + i];
    rmsnorm_f(x0, E, h[t]);
    double x1[E], want[E];
    for (int i = 0; i < E; i++) {
      double mean = 0;
      for (int u = 0; u <= t; u++) mean += h[u][i];
      x1[i] = x0[i] + mean / (t + 1);
    }
    rmsnorm_f(x1, E, want);
    for (int i = 0; i < E; i++) ASSERT_CLOSE(lg[t * E + i], want[i], 1e-12);
  }
  free(lg);
  free(path);
  free(s.emb), free(s.out), free(s.wk), free(s.wv), free(s.wo);
}

/* Qwen2's biases: with all projections zero, v = bias for every token, so the attention
 * output is the bias whatever the weights; with Wo = I, x1 = x0 + expand(bv). */
static void test_qkv_bias(void) {
  enum { E = 16, H = 4, HKV = 2, D = 4, KV = HKV * D };
  spec s = {"qwen2", E, H, HKV, 32, E, 0, WEIR_DTYPE_F32};
  s.emb = filled(E * E, 1);
  s.out = identity(E, E);
  s.bq = filled(E, 1);
  s.bk = filled(KV, 1);
  s.bv = filled(KV, 1);
  s.wo = identity(E, E);
  char *path = write_spec(&s, "bias.gguf");
  int32_t toks[3] = {1, 2, 3};
  double *lg = run(path, toks, 3, NULL);
  for (int t = 0; t < 3; t++) {
    double x1[E], want[E];
    for (int hd = 0; hd < H; hd++)
      for (int i = 0; i < D; i++)
        x1[hd * D + i] =
            (double)s.emb[toks[t] * E + hd * D + i] + s.bv[(hd / (H / HKV)) * D + i];
    rmsnorm_f(x1, E, want);
    for (int i = 0; i < E; i++) ASSERT_CLOSE(lg[t * E + i], want[i], 1e-12);
  }
  free(lg);
  free(path);
  free(s.emb), free(s.out), free(s.bq), free(s.bk), free(s.bv), free(s.wo);
}

static spec random_spec(const char *arch, weir_dtype wt) {
  spec s = {arch, 64, 4, 2, 96, 50, 0, wt};
  s.emb = filled(64 * 50, 1);
  s.out = filled(64 * 50, 0.3);
  s.onorm = filled(64, 1);
  s.anorm = filled(64, 1);
  s.fnorm = filled(64, 1);
  s.wq = filled(64 * 64, 0.4);
  s.wk = filled(64 * 32, 0.4);
  s.wv = filled(64 * 32, 0.3);
  s.wo = filled(64 * 64, 0.2);
  s.wg = filled(64 * 96, 0.2);
  s.wu = filled(64 * 96, 0.2);
  s.wd = filled(96 * 64, 0.2);
  return s;
}

static void free_spec(spec *s) {
  float **all[] = {&s->emb, &s->out, &s->onorm, &s->anorm, &s->fnorm, &s->wq, &s->wk, &s->wv,
                   &s->wo,  &s->wg,  &s->wu,    &s->wd,    &s->bq,    &s->bk, &s->bv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    free(*all[i]);
    *all[i] = NULL;
  }
}

/* Causality: a row of logits depends only on the tokens up to it, so a prefix run gives
 * the same rows and changing a later token leaves earlier rows alone. */
static void test_causal_and_prefix(void) {
  spec s = random_spec("llama", WEIR_DTYPE_F32);
  char *path = write_spec(&s, "random.gguf");
  int32_t a[6] = {1, 7, 7, 30, 2, 49}, b[6] = {1, 7, 7, 30, 2, 11};
  int V;
  double *la = run(path, a, 6, &V), *lb = run(path, b, 6, NULL), *lp = run(path, a, 3, NULL);
  for (int i = 0; i < 5 * V; i++) CU_ASSERT_EQUAL(la[i], lb[i]);
  for (int i = 0; i < 3 * V; i++) CU_ASSERT_EQUAL(la[i], lp[i]);
  double diff = 0, ss = 0;
  for (int i = 5 * V; i < 6 * V; i++) diff += fabs(la[i] - lb[i]);
  for (int i = 0; i < 6 * V; i++) ss += la[i] * la[i];
  CU_ASSERT(diff > 1e-6);
  /* Positions matter: the same token at positions 1 and 2 yields different logits. */
  double pd = 0;
  for (int i = 0; i < V; i++) pd += fabs(la[V + i] - la[2 * V + i]);
  CU_ASSERT(pd > 1e-6);
  CU_ASSERT(sqrt(ss / (6 * V)) > 0.05); /* not degenerate */
  free(la), free(lb), free(lp);
  free(path);
  free_spec(&s);
}

/* RoPE at position 0 is the identity, so NORM (llama) and NEOX (qwen2) agree on the first
 * token and differ afterwards; tied output equals an explicit copy of the embedding. */
static void test_rope_style_and_tied(void) {
  spec s = random_spec("llama", WEIR_DTYPE_F32);
  char *pl = write_spec(&s, "norm.gguf");
  s.arch = "qwen2"; /* zero biases: the same function but for the rotation */
  char *pq = write_spec(&s, "neox.gguf");
  int32_t toks[3] = {4, 8, 15};
  int V;
  double *ll = run(pl, toks, 3, &V), *lq = run(pq, toks, 3, NULL);
  for (int i = 0; i < V; i++) ASSERT_CLOSE(ll[i], lq[i], 1e-12);
  double d = 0;
  for (int i = V; i < 3 * V; i++) d += fabs(ll[i] - lq[i]);
  CU_ASSERT(d > 1e-6);
  free(ll), free(lq);

  s.arch = "llama";
  float *copy = malloc(64 * 50 * sizeof *copy);
  memcpy(copy, s.emb, 64 * 50 * sizeof *copy);
  free(s.out);
  s.out = copy;
  char *pc = write_spec(&s, "copy.gguf");
  s.tied = 1;
  char *pt = write_spec(&s, "tied.gguf");
  double *lc = run(pc, toks, 3, NULL), *lt = run(pt, toks, 3, NULL);
  for (int i = 0; i < 3 * V; i++) CU_ASSERT_EQUAL(lc[i], lt[i]);
  free(lc), free(lt);
  free(pl), free(pq), free(pc), free(pt);
  free_spec(&s);
}

/* Quantized weights: the reference on a Q8_0 / Q4_0 / Q4_1 / F16 / BF16 file equals the
 * reference on an F32 file holding core's dequantization of the same bytes. */
static void test_quantized_files(void) {
  const weir_dtype types[] = {WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1, WEIR_DTYPE_F16,
                              WEIR_DTYPE_BF16};
  int32_t toks[4] = {0, 3, 49, 3};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    spec s = random_spec("llama", types[t]);
    char *pq = write_spec(&s, "quant.gguf");
    /* Replace every matrix by its quantize-dequantize image, stored as F32. */
    float **mats[] = {&s.out, &s.wq, &s.wk, &s.wv, &s.wo, &s.wg, &s.wu, &s.wd};
    size_t sizes[] = {64 * 50, 64 * 64, 64 * 32, 64 * 32, 64 * 64, 64 * 96, 64 * 96, 96 * 64};
    uint8_t *tmp = malloc(96 * 64 * 4);
    for (size_t m = 0; m < 8; m++) {
      weir_quantize_row(types[t], *mats[m], tmp, (int64_t)sizes[m]);
      weir_dequantize_row(types[t], tmp, *mats[m], (int64_t)sizes[m]);
    }
    free(tmp);
    s.wtype = WEIR_DTYPE_F32;
    char *pf = write_spec(&s, "deq.gguf");
    int V;
    double *lq = run(pq, toks, 4, &V), *lf = run(pf, toks, 4, NULL);
    double worst = 0;
    for (int i = 0; i < 4 * V; i++) worst = fmax(worst, fabs(lq[i] - lf[i]));
    if (worst > 1e-9) fprintf(stderr, "\n  %s: worst %g\n", weir_dtype_name(types[t]), worst);
    CU_ASSERT(worst <= 1e-9);
    free(lq), free(lf), free(pq), free(pf);
    free_spec(&s);
  }
}

static void test_errors(void) {
  spec s = random_spec("llama", WEIR_DTYPE_F32);
  char *path = write_spec(&s, "err.gguf");
  weir_ref_model *m;
  CU_ASSERT_EQUAL_FATAL(weir_ref_model_load(path, &m), 0);
  double lg[50];
  int32_t bad = 50, neg = -1;
  WT_ASSERT_INT_EQ(weir_ref_forward(m, &bad, 1, lg), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_ref_forward(m, &neg, 1, lg), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_ref_forward(m, &neg, 0, lg), WEIR_E_INVAL);
  weir_ref_model_free(m);
  char *missing = wt_strf("%s/none.gguf", g_dir);
  m = NULL;
  CU_ASSERT(weir_ref_model_load(missing, &m) == WEIR_E_NOTFOUND);
  CU_ASSERT_PTR_NULL(m);
  free(missing);
  free(path);
  free_spec(&s);
}

int main(void) {
  g_dir = wt_mkdtemp();
  static const wt_test tests[] = {
      {"rope", test_rope},
      {"rmsnorm", test_rmsnorm},
      {"dequant_matches_core", test_dequant_matches_core},
      {"empty_layers", test_empty_layers},
      {"single_token_is_v_projection", test_single_token_is_v_projection},
      {"uniform_causal_attention", test_uniform_causal_attention},
      {"qkv_bias", test_qkv_bias},
      {"causal_and_prefix", test_causal_and_prefix},
      {"rope_style_and_tied", test_rope_style_and_tied},
      {"quantized_files", test_quantized_files},
      {"errors", test_errors},
      {NULL, NULL}};
  int rc = wt_run_suite("reference", tests);
  wt_rmtree(g_dir);
  free(g_dir);
  return rc;
}
