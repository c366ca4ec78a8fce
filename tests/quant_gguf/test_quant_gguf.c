/* quant/gguf, loaded with dlopen from the build's plugin directory and driven with a minimal
 * host table (parallel_for on three pthreads). For each block type it runs (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, IQ4_NL, Q2_K..Q6_K, IQ4_XS) and F32/F16/BF16, on every kernel path this CPU has
 * (scalar, AVX2, AVX-512 VNNI; the plugin is reloaded with WEIR_CPU_ISA set and the path it
 * logs is checked), on random blocks (random bits, random finite scales) and edge shapes (one
 * row, a row of one block, a last tile of fewer than eight 32-blocks):
 *   - embed() returns the SDK's scalar dequantization (weir_dequantize_row) of each row;
 *   - matmul (1, 2, 3, 9 and 17 tokens: every token-block tail of the tiled path) against the
 *     dequantized weights times the activations quantized here as matmul_kq.h documents, in
 *     double (tight), and times the raw activations (within half an activation step);
 *   - refusals: a type it does not run, rows that are not whole blocks, an Inf/NaN scale;
 *   - end to end: a model mixing block types through `weir generate` with no quant flag;
 *   - matmul_group (ABI 1.7): bit for bit what separate matmuls give, NOTSUP for a mix;
 *   - Q8_0, Q4_K, Q5_K and Q6_K in WEIR_KQ_X16 (the layout the plugin stores under VNNI), straight through the
 *     kernels on every path: the same rows as the file's layout, the same products.
 * Inputs are random (seed printed; WT_SEED=... reruns one). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul_kq.h"
#include "matmul_kq_amx.h"
#include "testutil.h"
#include "weir/numeric.h"
#include "weir/weir.h"
#include "wt_isa.h"
#include "wt_plugin.h"
#include "wt_pool.h"
#include "wt_rand.h"

static weir_host g_host;

/* 1 when err <= tol, else a failure at this line (and 0). */
#define CHK(err, tol, what) wt_check_le_at((err), (tol), (what), __FILE__, __LINE__)

static const weir_dtype k_block_types[] = {
    WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_1,
    WEIR_DTYPE_Q8_0, WEIR_DTYPE_IQ4_NL, WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q3_K,
    WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_IQ4_XS};
#define NUM_BLOCK_TYPES ((int)(sizeof k_block_types / sizeof k_block_types[0]))

/* Offsets of a block's f16 scale fields (-1: none). */
static void scale_fields(weir_dtype t, int *a, int *b) {
  *a = 0;
  *b = -1;
  switch (t) {
  case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_1: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
    *b = 2; break;
  case WEIR_DTYPE_Q2_K: *a = 80; *b = 82; break;
  case WEIR_DTYPE_Q3_K: *a = 108; break;
  case WEIR_DTYPE_Q6_K: *a = 208; break;
  default: break;
  }
}

static uint16_t rand_scale(void) {
  float v = wt_frand(0.001f, 0.05f) * ((wt_rnd() & 1) ? 1.0f : -1.0f);
  return weir_f32_to_f16(v);
}

/* rows x cols of type t: random bits with random finite f16 scales. Caller frees. */
static uint8_t *rand_blocks(weir_dtype t, int64_t rows, int64_t cols) {
  size_t rb = weir_dtype_row_bytes(t, cols), n = rb * (size_t)rows;
  uint8_t *p = malloc(n);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)wt_rnd();
  if (t == WEIR_DTYPE_F32) {
    for (size_t i = 0; i < n / 4; i++) ((float *)p)[i] = wt_frand(-0.1f, 0.1f);
  } else if (t == WEIR_DTYPE_F16 || t == WEIR_DTYPE_BF16) {
    for (size_t i = 0; i < n / 2; i++) {
      float v = wt_frand(-0.1f, 0.1f);
      uint16_t h = t == WEIR_DTYPE_F16 ? weir_f32_to_f16(v) : weir_f32_to_bf16(v);
      memcpy(p + 2 * i, &h, 2);
    }
  } else {
    int fa, fb;
    scale_fields(t, &fa, &fb);
    size_t bb = weir_dtype_block_bytes(t);
    for (size_t b = 0; b < n / bb; b++) {
      uint16_t h = rand_scale();
      memcpy(p + b * bb + fa, &h, 2);
      if (fb >= 0) {
        h = rand_scale();
        memcpy(p + b * bb + fb, &h, 2);
      }
    }
  }
  return p;
}

/* The activations as matmul_kq.h documents: per block of 256 columns (K-types, IQ4_XS) or
 * 32, d = max|x| / 127, q = round-to-nearest-even(x * (127 / max|x|)) within +-127. */
static void quant_acts(weir_dtype t, const float *x, int64_t cols, double *xdeq, double *step) {
  int64_t blk = weir_dtype_block_elems(t) == 32 ? 32 : 256;
  for (int64_t b0 = 0; b0 < cols; b0 += blk) {
    int64_t e = b0 + blk < cols ? b0 + blk : cols;
    float amax = 0;
    for (int64_t k = b0; k < e; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
    float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int64_t k = b0; k < e; k++) {
      float v = nearbyintf(x[k] * id);
      v = v > 127 ? 127 : v < -127 ? -127 : v;
      xdeq[k] = (double)v * d;
      step[k] = (double)amax / 127.0;
    }
  }
}

static void check_shape(wt_plugin *l, weir_dtype t, int64_t rows, int64_t cols) {
  const weir_quant_ops *ops = l->desc->ops;
  char what[96];
  snprintf(what, sizeof what, "%s %lldx%lld (%s)", weir_dtype_name(t), (long long)rows,
           (long long)cols, wt_isa_name);
  uint8_t *src = rand_blocks(t, rows, cols);
  size_t rb = weir_dtype_row_bytes(t, cols);
  float *ref = malloc(sizeof(float) * rows * cols), *emb = malloc(sizeof(float) * rows * cols);
  int32_t *ids = malloc(sizeof(int32_t) * rows);
  enum { MAXT = 17 };
  float *x = malloc(sizeof(float) * MAXT * cols), *y = malloc(sizeof(float) * MAXT * rows);
  double *xdeq = malloc(sizeof(double) * MAXT * cols), *xstep = malloc(sizeof(double) * MAXT * cols);
  void *w = NULL;
  for (int64_t r = 0; r < rows; r++)
    WT_ASSERT_INT_EQ(weir_dequantize_row(t, src + r * rb, ref + r * cols, cols), WEIR_OK);
  int rc = wt_quant_pack(ops, l->self, t, src, rows, cols, &w);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
  if (rc != WEIR_OK) goto out;
  /* The packed weight is the file's bytes (BF16 widened to F32) plus 64 spare bytes. */
  WT_ASSERT_INT_EQ(ops->weight_bytes(l->self, w),
                   (t == WEIR_DTYPE_BF16 ? (size_t)cols * 4 : rb) * (size_t)rows + 64);

  for (int64_t r = 0; r < rows; r++) ids[r] = (int32_t)(rows - 1 - r);
  WT_ASSERT_INT_EQ(ops->embed(l->self, w, ids, emb, rows), WEIR_OK);
  for (int64_t r = 0; r < rows; r++) {
    const float *got = emb + (rows - 1 - r) * cols, *want = ref + r * cols;
    double amax = 0;
    for (int64_t k = 0; k < cols; k++) amax = fmax(amax, fabs(want[k]));
    for (int64_t k = 0; k < cols; k++)
      if (!CHK(fabs((double)got[k] - want[k]), 1e-6 * amax, what)) goto out;
  }

  for (int64_t i = 0; i < MAXT * cols; i++)
    x[i] = wt_frand(-1, 1) * ((wt_rnd() & 31) == 0 ? 10.0f : 1.0f);
  for (int64_t tk = 0; tk < MAXT; tk++)
    quant_acts(t, x + tk * cols, cols, xdeq + tk * cols, xstep + tk * cols);
  static const int64_t toks[] = {1, 2, 3, 9, 17};
  for (int ti = 0; ti < 5; ti++) {
    int64_t n = toks[ti];
    for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
    WT_ASSERT_INT_EQ(ops->matmul(l->self, w, x, y, n), WEIR_OK);
    for (int64_t tk = 0; tk < n; tk++)
      for (int64_t r = 0; r < rows; r++) {
        const float *wr = ref + r * cols;
        const double *xd = xdeq + tk * cols, *xs = xstep + tk * cols;
        const float *xr = x + tk * cols;
        double tight = 0, mag = 0, raw = 0, bound = 0;
        for (int64_t k = 0; k < cols; k++) {
          tight += wr[k] * xd[k];
          mag += fabs(wr[k] * xd[k]);
          raw += wr[k] * (double)xr[k];
          bound += 0.5 * xs[k] * fabs(wr[k]) * (1 + 1e-5);
        }
        double got = y[tk * rows + r];
        int quant = t != WEIR_DTYPE_F32 && t != WEIR_DTYPE_F16 && t != WEIR_DTYPE_BF16;
        /* Float weights multiply the raw activations (f32 accumulation). */
        if (!quant) {
          if (!CHK(fabs(got - raw), 2e-5 * (mag + 1e-3) + 1e-6, what)) goto out;
          continue;
        }
        if (!CHK(fabs(got - tight), 2e-5 * mag + 1e-6, what) ||
            !CHK(fabs(got - raw), bound + 2e-5 * mag + 1e-6, what))
          goto out;
      }
  }
  wt_check_quant_embed_range(ops, l->self, w, rows, emb);
out:
  if (w) ops->release(l->self, w);
  free(src);
  free(ref);
  free(emb);
  free(ids);
  free(x);
  free(y);
  free(xdeq);
  free(xstep);
}

/* Kernel paths: WEIR_CPU_ISA value, the path the plugin must report, the wt_isa.h level. */
static const struct {
  const char *env, *path;
  int level;
} k_paths[] = {{"scalar", "scalar", 0}, {"avx2", "avx2", 1}, {"avx512vnni", "avx512vnni", 3}};

static void test_paths(void) {
  int ran = 0;
  for (size_t pi = 0; pi < sizeof k_paths / sizeof k_paths[0]; pi++) {
    if (!wt_isa_available(k_paths[pi].level)) continue;
    wt_plugin l;
    if (wt_plugin_load(&l, &g_host, "quant", "gguf", k_paths[pi].env, NULL) != 0) {
      wt_plugin_unload(&l);
      continue;
    }
    wt_check_kernel_path(k_paths[pi].path);
    ran++;
    for (int i = 0; i < NUM_BLOCK_TYPES; i++) {
      weir_dtype t = k_block_types[i];
      CU_ASSERT(l.desc->dtypes & WEIR_DTYPE_BIT(t));
      int64_t be = weir_dtype_block_elems(t);
      check_shape(&l, t, 1, be);     /* one block */
      check_shape(&l, t, 7, 512);    /* two whole tiles */
      check_shape(&l, t, 33, 768);   /* threaded rows */
      if (be == 32) {
        check_shape(&l, t, 5, 96);   /* a tile of three blocks */
        check_shape(&l, t, 3, 288);  /* a whole tile and one block */
      }
    }
    /* long rows: the prefill path's row blocks and the activation pool; Q8_0 of four
     * 512-column groups (WEIR_KQ_X16 under VNNI) */
    check_shape(&l, WEIR_DTYPE_Q8_0, 11, 2048);
    check_shape(&l, WEIR_DTYPE_Q4_K, 11, 1024);
    check_shape(&l, WEIR_DTYPE_Q5_K, 11, 1024);
    check_shape(&l, WEIR_DTYPE_Q4_K, 70, 2816);
    check_shape(&l, WEIR_DTYPE_Q6_K, 9, 5632);
    static const weir_dtype floats[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16};
    for (int i = 0; i < 3; i++) {
      check_shape(&l, floats[i], 37, 96);
      check_shape(&l, floats[i], 6, 320);
    }
    wt_plugin_unload(&l);
  }
  CU_ASSERT(ran >= 1);
}

static void test_refusals(void) {
  wt_plugin l;
  if (wt_plugin_load(&l, &g_host, "quant", "gguf", NULL, NULL) != 0) goto fail;
  const weir_quant_ops *ops = l.desc->ops;
  void *w = NULL;
  uint8_t buf[4096] = {0};
  /* a type it does not run: named in the message */
  weir_tensor tt = {.data = buf, .dtype = WEIR_DTYPE_Q8_K, .ndim = 2, .ne = {256, 1, 1, 1}};
  weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &tt, .name = "blk.0.attn_q.weight"};
  wt_last_error[0] = 0;
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  CU_ASSERT_PTR_NULL(w);
  WT_ASSERT_STR_CONTAINS(wt_last_error, "blk.0.attn_q.weight");
  WT_ASSERT_STR_CONTAINS(wt_last_error, "q8_K");
  WT_ASSERT_STR_CONTAINS(wt_last_error, "q4_K");
  tt.dtype = WEIR_DTYPE_I8;
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  /* rows that are not whole blocks */
  tt.dtype = WEIR_DTYPE_Q4_K;
  tt.ne[0] = 100;
  wt_last_error[0] = 0;
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  WT_ASSERT_STR_CONTAINS(wt_last_error, "whole blocks");
  tt.dtype = WEIR_DTYPE_Q5_0;
  tt.ne[0] = 48;
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  /* a 3-d weight */
  tt.ndim = 3;
  tt.ne[0] = 256;
  tt.ne[2] = 2;
  tt.dtype = WEIR_DTYPE_Q4_K;
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  /* Inf and NaN block scales */
  static const weir_dtype types[] = {WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q5_1,
                                     WEIR_DTYPE_Q2_K};
  static const uint16_t bad[] = {0x7c00, 0x7e00, 0xfc00, 0x7c01};
  for (int i = 0; i < 4; i++) {
    uint8_t *src = rand_blocks(types[i], 3, 512);
    int fa, fb;
    scale_fields(types[i], &fa, &fb);
    size_t off = weir_dtype_row_bytes(types[i], 512) * 2 + weir_dtype_block_bytes(types[i]) +
                 (size_t)(fb >= 0 && (i & 1) ? fb : fa);
    memcpy(src + off, &bad[i], 2);
    wt_last_error[0] = 0;
    CU_ASSERT_EQUAL(wt_quant_pack(ops, l.self, types[i], src, 3, 512, &w), WEIR_E_INVAL);
    CU_ASSERT_PTR_NULL(w);
    WT_ASSERT_STR_CONTAINS(wt_last_error, "test.weight");
    WT_ASSERT_STR_CONTAINS(wt_last_error, "row 2");
    free(src);
  }
  ops->release(l.self, NULL);
  CU_ASSERT_EQUAL(ops->matmul(l.self, NULL, NULL, NULL, 0), WEIR_OK);
  float xx[256] = {0}, yy[8];
  CU_ASSERT_EQUAL(ops->matmul(l.self, NULL, xx, yy, 1), WEIR_E_INVAL);
  /* Non-finite activations give NaN (never a wrong finite number). */
  {
    uint8_t *src = rand_blocks(WEIR_DTYPE_Q4_K, 2, 256);
    CU_ASSERT_EQUAL(wt_quant_pack(ops, l.self, WEIR_DTYPE_Q4_K, src, 2, 256, &w), WEIR_OK);
    for (int i = 0; i < 256; i++) xx[i] = 1.0f;
    xx[17] = INFINITY;
    CU_ASSERT_EQUAL(ops->matmul(l.self, w, xx, yy, 1), WEIR_OK);
    CU_ASSERT(isnan(yy[0]) && isnan(yy[1]));
    xx[17] = NAN;
    CU_ASSERT_EQUAL(ops->matmul(l.self, w, xx, yy, 1), WEIR_OK);
    CU_ASSERT(isnan(yy[0]));
    ops->release(l.self, w);
    free(src);
  }
fail:
  wt_plugin_unload(&l);
}

/* The final "perplexity: X" line of weir perplexity's output, or -1. */
static double ppl_of(const char *out) {
  const char *p = out ? strstr(out, "\nperplexity: ") : NULL;
  double v = -1;
  if (!p || sscanf(p + 13, "%lf", &v) != 1) return -1;
  return v;
}

/* What weir generate printed between its last log line and the "prompt:" figures (cut in
 * place: out is modified), or NULL. */
static const char *generated_text(char *out) {
  char *e = out ? strstr(out, "[engine] model") : NULL;
  char *nl = e ? strchr(e, '\n') : NULL;
  char *end = nl ? strstr(nl, "\nprompt: ") : NULL;
  if (!end) return NULL;
  *end = 0;
  return nl + 1;
}

/* Mixed block types through the real binary: `weir mkmodel --type q4_k_m` (Q4_K with Q6_K
 * output, attn_v and ffn_down) runs with no quant flag (auto picks gguf); a plugin asked for
 * a type it does not run fails with the tensor and its type named; a Q8_0 model scores the
 * same perplexity under gguf as under int8, which carries Q8_0 blocks over exactly too. */
static void test_end_to_end(void) {
  char *dir = wt_mkdtemp();
  char *mixed = wt_strf("%s/mixed.gguf", dir), *q8 = wt_strf("%s/q8.gguf", dir);
  char *out = NULL;
  char *mk[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--dim", "256", "--ffn", "512",
                "--heads", "4", "--kv-heads", "2", "--type", "q4_k_m", "--out", mixed, NULL};
  WT_ASSERT_INT_EQ(wt_run(mk, &out, 60000), 0);
  free(out);
  out = NULL;
  char *gen[] = {WT_WEIR, "generate", "--model", mixed, "--threads", "2", "--prompt", "hi",
                 "-n", "8", "--ignore-eos", "--set", "cache.memory_bytes=16777216",
                 "--set", "log.level=\"info\"", NULL};
  WT_ASSERT_INT_EQ(wt_run(gen, &out, 60000), 0);
  WT_ASSERT_STR_CONTAINS(out, "generated: 8 tokens");
  WT_ASSERT_STR_CONTAINS(out, "[plugin:gguf]");
  free(out);
  out = NULL;
  /* A prefill of 40 tokens on 2 threads through matrices of 512 columns (WEIR_KQ_X16 under
   * VNNI, so the AMX-INT8 GEMM where the CPU has it): the process must run and exit cleanly
   * (the AMX scratch once had a thread-exit destructor that ran after the plugin's dlclose:
   * a segfault at exit), with the same greedy tokens as with AMX off. */
  {
    char *m512 = wt_strf("%s/q4km512.gguf", dir);
    char *mk5[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--dim", "512", "--ffn", "1024",
                   "--heads", "8", "--kv-heads", "2", "--type", "q4_k_m", "--out", m512, NULL};
    WT_ASSERT_INT_EQ(wt_run(mk5, &out, 60000), 0);
    free(out);
    out = NULL;
    char *g5[] = {WT_WEIR, "generate", "--model", m512, "--threads", "2", "--random-prompt", "40",
                  "-n", "8", "--ignore-eos", "--seed", "3", "--set", "cache.memory_bytes=16777216", NULL};
    char *on = NULL, *off = NULL;
    WT_ASSERT_INT_EQ(wt_run(g5, &on, 60000), 0);
    setenv("WEIR_CPU_ISA", "avx512", 1);
    WT_ASSERT_INT_EQ(wt_run(g5, &off, 60000), 0);
    unsetenv("WEIR_CPU_ISA");
    WT_ASSERT_STR_CONTAINS(on, "generated: 8 tokens");
    const char *ton = generated_text(on), *toff = generated_text(off);
    CU_ASSERT(ton && toff && strlen(ton) > 0 && !strcmp(ton, toff));
    free(on);
    free(off);
    free(m512);
  }
  /* the same greedy tokens on the scalar kernels as on the SIMD ones */
  char *gen_s[] = {WT_WEIR, "generate", "--model", mixed, "--prompt", "In the beginning",
                   "-n", "16", "--ignore-eos", "--set", "cache.memory_bytes=16777216", NULL};
  char *a = NULL, *b = NULL;
  WT_ASSERT_INT_EQ(wt_run(gen_s, &a, 60000), 0);
  setenv("WEIR_CPU_ISA", "scalar", 1);
  WT_ASSERT_INT_EQ(wt_run(gen_s, &b, 60000), 0);
  unsetenv("WEIR_CPU_ISA");
  const char *ta = generated_text(a), *tb = generated_text(b);
  CU_ASSERT(ta && tb && strlen(ta) > 0 && !strcmp(ta, tb));
  free(a);
  free(b);
  /* int8 does not run K-quants: a one-line error naming the tensor and its type */
  char *bad[] = {WT_WEIR, "generate", "--model", mixed, "--quant", "int8", "--prompt", "hi",
                 "-n", "2", "--set", "cache.memory_bytes=16777216", NULL};
  CU_ASSERT_NOT_EQUAL(wt_run(bad, &out, 60000), 0);
  WT_ASSERT_STR_CONTAINS(out, "q4_K");
  WT_ASSERT_STR_CONTAINS(out, ".weight");
  free(out);
  out = NULL;

  char *mk8[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--type", "q8_0", "--out", q8, NULL};
  WT_ASSERT_INT_EQ(wt_run(mk8, &out, 60000), 0);
  free(out);
  out = NULL;
  double ppl[2];
  static const char *const schemes[] = {"gguf", "int8"};
  for (int i = 0; i < 2; i++) {
    char *pp[] = {WT_WEIR, "perplexity", "--model", q8, "--quant", (char *)schemes[i],
                  "--ctx", "128", "--file",
                  WEIR_TEST_SOURCE_DIR "/tests/perplexity/fixtures/heldout-sample.txt", NULL};
    WT_ASSERT_INT_EQ(wt_run(pp, &out, 120000), 0);
    ppl[i] = ppl_of(out);
    if (ppl[i] <= 0) fprintf(stderr, "\n  no perplexity in:\n%s\n", out ? out : "");
    free(out);
    out = NULL;
  }
  CU_ASSERT(ppl[0] > 1 && ppl[1] > 1);
  CU_ASSERT(fabs(ppl[0] - ppl[1]) <= 0.005 * ppl[1]);
  fprintf(stderr, "\n  q8_0 perplexity: gguf %.4f, int8 %.4f\n", ppl[0], ppl[1]);
  wt_rmtree(dir);
  free(mixed);
  free(q8);
  free(dir);
}

/* WEIR_KQ_X16 against the file's layout, through the kernels on every path: dequantized
 * rows bit-identical, and every token count's products agree to f32 summation order (the integer block
 * sums are the same numbers; only the f32 additions run in another order). */
static void x16_type(weir_dtype t) {
  enum { ROWS = 13, COLS = 1536, T = 19 };
  CU_ASSERT(weir_kq_x16_fits(t, COLS));
  CU_ASSERT(weir_kq_x16_fits(t, 768) == (t == WEIR_DTYPE_Q6_K));
  const size_t rb = weir_dtype_row_bytes(t, COLS);
  uint8_t *src = rand_blocks(t, ROWS, COLS), *x16 = malloc(rb * ROWS + 64);
  float *x = malloc(sizeof(float) * T * COLS), *want = malloc(sizeof(float) * T * ROWS);
  float *got = malloc(sizeof(float) * T * ROWS), *a = malloc(sizeof(float) * ROWS * COLS);
  float *b = malloc(sizeof(float) * COLS);
  void *abuf = aligned_alloc(64, (weir_kq_act_bytes(COLS, T) + 63) / 64 * 64);
  void *bbuf = aligned_alloc(64, (weir_kq_act_bytes(COLS, T) + 63) / 64 * 64);
  for (int64_t r = 0; r < ROWS; r++) {
    weir_kq_x16_pack_row(t, src + r * rb, x16 + r * rb, COLS);
    /* the kernels' own decoding of the file's layout (sw * u + mw, as embed() gives) */
    CU_ASSERT_EQUAL(weir_kq_dequant_row(t, src + r * rb, COLS, a + r * COLS), 0);
    weir_kq_x16_dequant_row(t, x16 + r * rb, COLS, b);
    CU_ASSERT_EQUAL(memcmp(a + r * COLS, b, sizeof(float) * COLS), 0);
  }
  for (int64_t i = 0; i < T * COLS; i++) x[i] = wt_frand(-1, 1);
  const weir_cpu_isa_level best = weir_cpu_isa();
  for (int level = 0; level <= (int)best; level++) {
    if (weir_cpu_isa_set((weir_cpu_isa_level)level) != 0) continue;
    static const int64_t toks[] = {1, 2, 7, 19};
    for (int ti = 0; ti < 4; ti++) {
      const int64_t n = toks[ti];
      weir_kq_act fa, xa;
      weir_kq_act_init(&fa, abuf, COLS, n);
      weir_kq_act_init(&xa, bbuf, COLS, n);
      for (int64_t k = 0; k < n; k++) {
        weir_kq_quantize_act(t, x + k * COLS, COLS, &fa, k);
        weir_kq_quantize_act_x16(t, x + k * COLS, COLS, &xa, k);
      }
      weir_kq_matmul_args fm = {.type = t, .w = src, .row_bytes = rb, .rows = ROWS,
                                .cols = COLS, .act = fa, .n_tokens = n, .y = want};
      weir_kq_matmul_args xm = fm;
      xm.layout = WEIR_KQ_X16;
      xm.w = x16;
      xm.act = xa;
      xm.y = got;
      for (int64_t i = 0; i < n * ROWS; i++) got[i] = NAN;
      weir_kq_matmul_rows(&fm, 0, ROWS);
      weir_kq_matmul_rows(&xm, 0, ROWS);
      for (int64_t i = 0; i < n * ROWS; i++) {
        /* f32 rounding of sums over COLS products: relative to their magnitudes' sum */
        double mag = 0;
        for (int64_t k = 0; k < COLS; k++)
          mag += fabs((double)a[(i % ROWS) * COLS + k] * x[(i / ROWS) * COLS + k]);
        char what[96];
        snprintf(what, sizeof what, "x16 %s level %d, %lld tokens, out %lld", weir_dtype_name(t), level, (long long)n,
                 (long long)i);
        if (!CHK(fabs((double)got[i] - want[i]), 2e-6 * mag + 1e-6, what)) goto out;
      }
    }
  }
out:
  weir_cpu_isa_set(best);
  free(src);
  free(x16);
  free(x);
  free(want);
  free(got);
  free(a);
  free(b);
  free(abuf);
  free(bbuf);
}

/* The AMX-INT8 GEMM (matmul_kq_amx.c) against the portable C path (level scalar) and the
 * AVX-512 VNNI kernel on the same WEIR_KQ_X16 rows: every token count 1..70 (16-token blocks,
 * partial ones, and the < 16 counts that stay on VNNI), 67 rows (not a multiple of 16; 64-row
 * blocks plus a tail), and a call over rows [3, 62) that must leave the rows outside it
 * untouched. Results agree to f32 summation order (the per-sub-block integer sums are the same
 * numbers, scaled in another order; amx_exact_type checks those integers bit for bit). Skips
 * where the CPU or the OS gives no AMX. */
static void amx_type(weir_dtype t) {
  enum { ROWS = 67, COLS = 1024, T = 70 };
  const size_t rb = weir_dtype_row_bytes(t, COLS);
  uint8_t *src = rand_blocks(t, ROWS, COLS), *x16 = malloc(rb * ROWS + 64);
  float *x = malloc(sizeof(float) * T * COLS), *want = malloc(sizeof(float) * T * ROWS);
  float *vn = malloc(sizeof(float) * T * ROWS), *got = malloc(sizeof(float) * T * ROWS);
  float *a = malloc(sizeof(float) * ROWS * COLS);
  double *mag = malloc(sizeof(double) * T * ROWS);
  void *abuf = aligned_alloc(64, (weir_kq_act_bytes(COLS, T) + 63) / 64 * 64);
  for (int64_t r = 0; r < ROWS; r++) {
    weir_kq_x16_pack_row(t, src + r * rb, x16 + r * rb, COLS);
    weir_kq_x16_dequant_row(t, x16 + r * rb, COLS, a + r * COLS);
  }
  for (int64_t i = 0; i < T * COLS; i++) x[i] = wt_frand(-1, 1);
  for (int64_t k = 0; k < T; k++)
    for (int64_t r = 0; r < ROWS; r++) {
      double m = 0;
      for (int64_t c = 0; c < COLS; c++) m += fabs((double)a[r * COLS + c] * x[k * COLS + c]);
      mag[k * ROWS + r] = m;
    }
  const weir_cpu_isa_level best = weir_cpu_isa();
  for (int64_t n = 1; n <= T; n++) {
    weir_kq_act xa;
    weir_kq_act_init(&xa, abuf, COLS, n);
    for (int64_t k = 0; k < n; k++) weir_kq_quantize_act_x16(t, x + k * COLS, COLS, &xa, k);
    weir_kq_matmul_args m = {.type = t, .layout = WEIR_KQ_X16, .w = x16, .row_bytes = rb,
                             .rows = ROWS, .cols = COLS, .act = xa, .n_tokens = n};
    /* reference: portable C */
    CU_ASSERT_EQUAL_FATAL(weir_cpu_isa_set(WEIR_CPU_ISA_SCALAR), 0);
    m.y = want;
    weir_kq_matmul_rows(&m, 0, ROWS);
    CU_ASSERT_EQUAL_FATAL(weir_cpu_isa_set(WEIR_CPU_ISA_AVX512), 0);
    weir_kq_amx_set(0);
    CU_ASSERT(!weir_kq_amx_enabled());
    m.y = vn;
    weir_kq_matmul_rows(&m, 0, ROWS);
    CU_ASSERT_EQUAL_FATAL(weir_kq_amx_set(1), 0);
    CU_ASSERT(weir_kq_amx_enabled());
    for (int64_t i = 0; i < n * ROWS; i++) got[i] = NAN;
    m.y = got;
    /* two calls as two pool threads would split the rows: one starts mid-16 */
    weir_kq_matmul_rows(&m, 0, 37);
    weir_kq_matmul_rows(&m, 37, ROWS);
    for (int64_t i = 0; i < n * ROWS; i++) {
      char what[112];
      snprintf(what, sizeof what, "amx %s, %lld tokens, out %lld (vs scalar)", weir_dtype_name(t),
               (long long)n, (long long)i);
      if (!CHK(fabs((double)got[i] - want[i]), 2e-6 * mag[i] + 1e-6, what)) goto out;
      snprintf(what, sizeof what, "amx %s, %lld tokens, out %lld (vs vnni)", weir_dtype_name(t),
               (long long)n, (long long)i);
      if (!CHK(fabs((double)got[i] - vn[i]), 2e-6 * mag[i] + 1e-6, what)) goto out;
    }
    /* rows [3, 62) only: the others keep their NaN */
    for (int64_t i = 0; i < n * ROWS; i++) got[i] = NAN;
    weir_kq_matmul_rows(&m, 3, 62);
    for (int64_t i = 0; i < n * ROWS; i++) {
      const int64_t r = i % ROWS;
      if (r < 3 || r >= 62) {
        CU_ASSERT(isnan(got[i]));
      } else if (!CHK(fabs((double)got[i] - want[i]), 2e-6 * mag[i] + 1e-6, "amx rows [3, 62)")) {
        goto out;
      }
    }
  }
out:
  weir_cpu_isa_set(best);
  free(src);
  free(x16);
  free(x);
  free(want);
  free(vn);
  free(got);
  free(a);
  free(mag);
  free(abuf);
}

/* The integer sums themselves: weights whose scales are 1 (K-types: d = 1, dmin = 0; Q6_K
 * also small int8 scales; Q8_0: d = 1) and integer activations whose every scale block holds a
 * 127 (so its scale is exactly 1), small enough that every f32 partial sum is an exact
 * integer. Then every path's result is the exact integer dot product, and AMX, VNNI and the
 * portable C path must agree bit for bit: a wrong integer anywhere shows. */
static void amx_exact_type(weir_dtype t) {
  enum { ROWS = 37, COLS = 1024, T = 33 };
  const size_t rb = weir_dtype_row_bytes(t, COLS), bb = weir_dtype_block_bytes(t);
  const int64_t blocks = (int64_t)(rb / bb), ab = weir_kq_act_block(t);
  uint8_t *src = rand_blocks(t, ROWS, COLS), *x16 = malloc(rb * ROWS + 64);
  const uint16_t one = 0x3C00, zero = 0;
  for (int64_t r = 0; r < ROWS; r++)
    for (int64_t b = 0; b < blocks; b++) {
      uint8_t *p = src + r * rb + b * bb;
      if (t == WEIR_DTYPE_Q8_0) {
        memcpy(p, &one, 2);
      } else if (t == WEIR_DTYPE_Q6_K) {
        for (int i = 0; i < 16; i++) p[192 + i] = (uint8_t)(int8_t)((int)(wt_rnd() % 17) - 8);
        memcpy(p + 208, &one, 2);
      } else {
        memcpy(p, &one, 2);
        memcpy(p + 2, &zero, 2);
      }
    }
  for (int64_t r = 0; r < ROWS; r++) weir_kq_x16_pack_row(t, src + r * rb, x16 + r * rb, COLS);
  float *x = malloc(sizeof(float) * T * COLS);
  for (int64_t i = 0; i < T * COLS; i++)
    x[i] = (i % COLS) % ab == 0 ? 127.0f : (float)((int)(wt_rnd() % 7) - 3);
  float *ys[3];
  for (int k = 0; k < 3; k++) ys[k] = malloc(sizeof(float) * T * ROWS);
  void *abuf = aligned_alloc(64, (weir_kq_act_bytes(COLS, T) + 63) / 64 * 64);
  weir_kq_act xa;
  weir_kq_act_init(&xa, abuf, COLS, T);
  for (int64_t k = 0; k < T; k++) weir_kq_quantize_act_x16(t, x + k * COLS, COLS, &xa, k);
  weir_kq_matmul_args m = {.type = t, .layout = WEIR_KQ_X16, .w = x16, .row_bytes = rb,
                           .rows = ROWS, .cols = COLS, .act = xa, .n_tokens = T};
  const weir_cpu_isa_level best = weir_cpu_isa();
  CU_ASSERT_EQUAL_FATAL(weir_cpu_isa_set(WEIR_CPU_ISA_SCALAR), 0);
  m.y = ys[0];
  weir_kq_matmul_rows(&m, 0, ROWS);
  CU_ASSERT_EQUAL_FATAL(weir_cpu_isa_set(WEIR_CPU_ISA_AVX512), 0);
  weir_kq_amx_set(0);
  m.y = ys[1];
  weir_kq_matmul_rows(&m, 0, ROWS);
  CU_ASSERT_EQUAL_FATAL(weir_kq_amx_set(1), 0);
  m.y = ys[2];
  weir_kq_matmul_rows(&m, 0, ROWS);
  int nonint = 0;
  for (int64_t i = 0; i < T * ROWS; i++) nonint += ys[0][i] != floorf(ys[0][i]);
  CU_ASSERT_EQUAL(nonint, 0); /* the premise: every result is an integer */
  CU_ASSERT_EQUAL(memcmp(ys[0], ys[1], sizeof(float) * T * ROWS), 0);
  CU_ASSERT_EQUAL(memcmp(ys[0], ys[2], sizeof(float) * T * ROWS), 0);
  for (int64_t i = 0; i < T * ROWS; i++)
    if (ys[2][i] != ys[0][i]) {
      fprintf(stderr, "\n  amx exact %s: out %lld amx %.1f scalar %.1f\n", weir_dtype_name(t),
              (long long)i, ys[2][i], ys[0][i]);
      break;
    }
  weir_cpu_isa_set(best);
  for (int k = 0; k < 3; k++) free(ys[k]);
  free(abuf);
  free(x);
  free(src);
  free(x16);
}

static void test_amx(void) {
  if (!weir_kq_amx_available() || !weir_cpu_isa_supported(WEIR_CPU_ISA_AVX512) ||
      !wt_isa_available(3)) {
    fprintf(stderr, "\n  SKIP amx: this CPU or OS gives no AMX-INT8 (amx_int8 + XTILEDATA)\n");
    if (!weir_kq_amx_available()) CU_ASSERT_EQUAL(weir_kq_amx_set(1), -1);
    return;
  }
  const int was = weir_kq_amx_enabled();
  amx_type(WEIR_DTYPE_Q8_0);
  amx_type(WEIR_DTYPE_Q4_K);
  amx_type(WEIR_DTYPE_Q6_K);
  amx_type(WEIR_DTYPE_Q5_K);
  amx_exact_type(WEIR_DTYPE_Q8_0);
  amx_exact_type(WEIR_DTYPE_Q4_K);
  amx_exact_type(WEIR_DTYPE_Q5_K);
  amx_exact_type(WEIR_DTYPE_Q6_K);
  weir_kq_amx_set(was);
}

static void test_x16(void) {
  CU_ASSERT(!weir_kq_x16_fits(WEIR_DTYPE_Q4_0, 1536));
  CU_ASSERT(!weir_kq_x16_fits(WEIR_DTYPE_Q2_K, 1536));
  CU_ASSERT(!weir_kq_x16_fits(WEIR_DTYPE_Q5_K, 768));
  CU_ASSERT(weir_kq_x16_fits(WEIR_DTYPE_Q6_K, 768));
  x16_type(WEIR_DTYPE_Q8_0);
  x16_type(WEIR_DTYPE_Q4_K);
  x16_type(WEIR_DTYPE_Q5_K);
  x16_type(WEIR_DTYPE_Q6_K);
}

/* ABI 1.7 matmul_group on every kernel path: three weights of one block type with 40, 9 and
 * 13 rows (the split over the pool's threads cuts inside and across them) give bit for bit
 * what three matmul calls give, at 1, 3 and 17 tokens; K-types of 1024 columns (WEIR_KQ_X16
 * under VNNI), Q8_0 and Q4_0; float weights (F16) are NOTSUP, as is a weight of another type
 * or width in the group; a NULL weight is INVAL. */
static void group_type(wt_plugin *l, weir_dtype t) {
  const weir_quant_ops *ops = l->desc->ops;
  const int64_t cols = 1024, rows[3] = {40, 9, 13};
  uint8_t *src[3] = {NULL, NULL, NULL};
  void *w[3] = {NULL, NULL, NULL}, *odd = NULL, *narrow = NULL;
  uint8_t *osrc = NULL, *nsrc = NULL;
  for (int i = 0; i < 3; i++) {
    src[i] = rand_blocks(t, rows[i], cols);
    WT_ASSERT_INT_EQ(wt_quant_pack(ops, l->self, t, src[i], rows[i], cols, &w[i]), WEIR_OK);
    if (!w[i]) goto out;
  }
  static const int64_t toks[] = {1, 3, 17};
  for (int ti = 0; ti < 3; ti++) {
    const int64_t n = toks[ti];
    float *x = malloc(sizeof(float) * (size_t)(n * cols)), *yg[3], *ys[3];
    for (int64_t k = 0; k < n * cols; k++) x[k] = wt_frand(-2, 2);
    for (int i = 0; i < 3; i++) {
      yg[i] = malloc(sizeof(float) * (size_t)(n * rows[i]));
      ys[i] = malloc(sizeof(float) * (size_t)(n * rows[i]));
      memset(yg[i], 0xff, sizeof(float) * (size_t)(n * rows[i])); /* NaN until written */
      WT_ASSERT_INT_EQ(ops->matmul(l->self, w[i], x, ys[i], n), WEIR_OK);
    }
    for (int g = 1; g <= 3; g++) { /* groups of 1, 2 and 3 weights */
      if (t == WEIR_DTYPE_F16) { /* float weights: one matmul each (the host's fallback) */
        WT_ASSERT_INT_EQ(ops->matmul_group(l->self, (const void *const *)w, g, x, yg, n),
                         WEIR_E_NOTSUP);
        continue;
      }
      WT_ASSERT_INT_EQ(ops->matmul_group(l->self, (const void *const *)w, g, x, yg, n), WEIR_OK);
      for (int i = 0; i < g; i++)
        if (memcmp(yg[i], ys[i], sizeof(float) * (size_t)(n * rows[i])) != 0) {
          fprintf(stderr, "matmul_group %s (%s): %d weights, %lld tokens: weight %d differs\n",
                  weir_dtype_name(t), wt_isa_name, g, (long long)n, i);
          CU_FAIL("matmul_group differs from matmul");
        }
    }
    for (int i = 0; i < 3; i++) {
      free(yg[i]);
      free(ys[i]);
    }
    free(x);
  }
  /* another type, another width: NOTSUP (the host runs them one by one); NULL: INVAL */
  const weir_dtype other = t == WEIR_DTYPE_Q8_0 ? WEIR_DTYPE_Q4_0 : WEIR_DTYPE_Q8_0;
  osrc = rand_blocks(other, 5, cols);
  nsrc = rand_blocks(t, 5, 512);
  WT_ASSERT_INT_EQ(wt_quant_pack(ops, l->self, other, osrc, 5, cols, &odd), WEIR_OK);
  WT_ASSERT_INT_EQ(wt_quant_pack(ops, l->self, t, nsrc, 5, 512, &narrow), WEIR_OK);
  if (!odd || !narrow) goto out;
  float x1[1024] = {0}, y1[64], *y3[3] = {y1, y1 + 16, y1 + 32};
  const void *mixed[3] = {w[0], odd, w[1]}, *wide[2] = {w[1], narrow}, *none[2] = {w[0], NULL};
  WT_ASSERT_INT_EQ(ops->matmul_group(l->self, mixed, 3, x1, y3, 1), WEIR_E_NOTSUP);
  WT_ASSERT_INT_EQ(ops->matmul_group(l->self, wide, 2, x1, y3, 1), WEIR_E_NOTSUP);
  WT_ASSERT_INT_EQ(ops->matmul_group(l->self, none, 2, x1, y3, 1), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(ops->matmul_group(l->self, (const void *const *)w, 5, x1, y3, 1), WEIR_E_INVAL);
out:
  for (int i = 0; i < 3; i++) {
    if (w[i]) ops->release(l->self, w[i]);
    free(src[i]);
  }
  if (odd) ops->release(l->self, odd);
  if (narrow) ops->release(l->self, narrow);
  free(osrc);
  free(nsrc);
}

static void test_group(void) {
  static const weir_dtype types[] = {WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K,
                                     WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q3_K,
                                     WEIR_DTYPE_F16};
  int ran = 0;
  for (size_t pi = 0; pi < sizeof k_paths / sizeof k_paths[0]; pi++) {
    if (!wt_isa_available(k_paths[pi].level)) continue;
    wt_plugin l;
    if (wt_plugin_load(&l, &g_host, "quant", "gguf", k_paths[pi].env, NULL) != 0) {
      wt_plugin_unload(&l);
      continue;
    }
    wt_check_kernel_path(k_paths[pi].path);
    CU_ASSERT_FATAL(WEIR_QUANT_HAS_OP((const weir_quant_ops *)l.desc->ops, matmul_group));
    ran++;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) group_type(&l, types[i]);
    wt_plugin_unload(&l);
  }
  CU_ASSERT(ran >= 1);
  /* option group = false: NOTSUP for any group (the host runs one matmul per weight) */
  wt_plugin l;
  if (wt_plugin_open(&l, "quant", "gguf", NULL) != 0) goto out;
  weir_option_value opts[4];
  wt_plugin_defaults(l.desc, opts, 4);
  weir_option_value *g = wt_plugin_option(l.desc, opts, "group");
  CU_ASSERT_FATAL(g != NULL);
  CU_ASSERT(g->b == 1); /* on by default */
  g->b = 0;
  if (wt_plugin_init(&l, &g_host, opts, NULL) != 0) goto out;
  const weir_quant_ops *ops = l.desc->ops;
  uint8_t *src = rand_blocks(WEIR_DTYPE_Q4_K, 3, 512);
  void *w = NULL;
  WT_ASSERT_INT_EQ(wt_quant_pack(ops, l.self, WEIR_DTYPE_Q4_K, src, 3, 512, &w), WEIR_OK);
  if (w) {
    float x[512] = {0}, y[6];
    float *ys[2] = {y, y + 3};
    const void *ws[2] = {w, w};
    WT_ASSERT_INT_EQ(ops->matmul_group(l.self, ws, 2, x, ys, 1), WEIR_E_NOTSUP);
    ops->release(l.self, w);
  }
  free(src);
out:
  wt_plugin_unload(&l);
}

int main(void) {
  static const wt_test tests[] = {{"paths", test_paths},
                                  {"matmul_group", test_group},
                                  {"refusals", test_refusals},
                                  {"end_to_end", test_end_to_end},
                                  {"x16", test_x16},
                                  {"amx", test_amx},
                                  {NULL, NULL}};
  return wt_plugin_main("quant_gguf", tests, &g_host, 1);
}
