/* quant/int8, loaded with dlopen from the build's plugin directory and driven with a minimal
 * host table (parallel_for on three pthreads, tests/kernels/wt_pool.c). For every source
 * dtype, odd shapes and every group size, on every kernel path this CPU runs (the plugin is
 * reloaded with WEIR_CPU_ISA set, and the path it logs is checked):
 *   - weights: embed() returns the dequantized packed rows; each is within half a
 *     quantization step (max|w| / 127 / 2 per group, computed here in double) of the source
 *     value, and a Q8_0 source with group 32 comes back exactly (q * d);
 *   - matmul (1, 2, 7, 64 tokens) against three double-precision references: the dequantized
 *     weights times activations quantized here the way the docs specify (tight), times the
 *     original activations (bound: half an activation step per 32-column block), and the
 *     original weights times the original activations (both bounds);
 *   - refusals, weight_bytes, embed range checks;
 *   - matmul_group (ABI 1.7) equal to separate matmuls bit for bit, NOTSUP for mixed widths;
 *   - end to end: `weir mkmodel --type q8_0` then `weir generate --quant int8`.
 * Inputs are random (seed printed; WT_SEED=... reruns one). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "wt_rand.h"
#include "wt_isa.h"
#include "wt_plugin.h"
#include "weir/weir.h"
#include "wt_pool.h"

static weir_host g_host;

/* ---- loading ------------------------------------------------------------------------------- */

/* Loads quant/int8 for isa (NULL: native) with group_size `group` when >= 0, else its default.
 * rc_out as for wt_plugin_init. */
static int int8_load(wt_plugin *l, const char *isa, int64_t group, int *rc_out) {
  if (wt_plugin_open(l, "quant", "int8", isa) != 0) return -1;
  weir_option_value opts[16];
  wt_plugin_defaults(l->desc, opts, 16);
  weir_option_value *g = wt_plugin_option(l->desc, opts, "group_size");
  CU_ASSERT_PTR_NOT_NULL(g);
  if (group >= 0 && g) {
    g->i = group;
    g->is_set = 1;
  }
  return wt_plugin_init(l, &g_host, opts, rc_out);
}

/* Kernel paths: WEIR_CPU_ISA value and what the plugin must report. */
static const char *const k_isas[] = {"scalar", "avx2", "avx512", "avx512vnni"};

/* ---- one shape ----------------------------------------------------------------------------- */

static void check_shape(wt_plugin *l, weir_dtype t, int64_t rows, int64_t cols, int64_t group) {
  const weir_quant_ops *ops = l->desc->ops;
  double *ref = malloc(sizeof(double) * rows * cols);
  double *wq = malloc(sizeof(double) * rows * cols);     /* embed's values, in row order */
  double *wbound = malloc(sizeof(double) * rows * cols); /* half a weight step */
  float *wd = malloc(sizeof(float) * rows * cols);
  void *src = wt_quant_source(t, rows, cols, ref);
  void *w = NULL;
  int32_t *ids = malloc(sizeof(int32_t) * rows);
  char what[96];
  snprintf(what, sizeof what, "%s %lldx%lld group %lld", weir_dtype_name(t), (long long)rows,
           (long long)cols, (long long)group);
  int rc = wt_quant_pack(ops, l->self, t, src, rows, cols, &w);
  CU_ASSERT_EQUAL(rc, WEIR_OK);
  if (rc != WEIR_OK) goto fail;

  /* Size: padded int8 rows (64-byte rounded block), one f32 per group, 8 spare floats. */
  int64_t align = 256;
  int64_t kp = (cols + align - 1) / align * align;
  int64_t g = group ? group : kp;
  size_t qbytes = ((size_t)(rows * kp) + 63) / 64 * 64;
  WT_ASSERT_INT_EQ(ops->weight_bytes(l->self, w), qbytes + (size_t)(rows * (kp / g) + 8) * 4);

  /* Dequantized weights through embed, in a shuffled order. */
  for (int64_t r = 0; r < rows; r++) ids[r] = (int32_t)(rows - 1 - r);
  CU_ASSERT_EQUAL(ops->embed(l->self, w, ids, wd, rows), WEIR_OK);
  for (int64_t r = 0; r < rows; r++) {
    float *row = wd + (rows - 1 - r) * cols; /* row r */
    for (int64_t g0 = 0; g0 < cols; g0 += g) {
      int64_t e = g0 + g < cols ? g0 + g : cols;
      double amax = 0;
      for (int64_t k = g0; k < e; k++) amax = fmax(amax, fabs(ref[r * cols + k]));
      for (int64_t k = g0; k < e; k++) {
        double want = ref[r * cols + k];
        wq[r * cols + k] = row[k];
        wbound[r * cols + k] = 0.5 * (amax / 127) * (1 + 1e-5);
        if (t == WEIR_DTYPE_Q8_0 && group == 32) {
          /* exact carry-over: q * d, rounded to f32 once */
          WT_CHECK_LE(fabs((double)row[k] - (double)(float)want), 0, what);
        } else {
          WT_CHECK_LE(fabs((double)row[k] - want), 0.5 * amax / 127 * (1 + 1e-5) + 1e-6 * amax,
                      what);
        }
      }
    }
  }

  static const int64_t toks[] = {1, 2, 7, 64};
  if (!wt_check_quant_matmul_at(ops, l->self, w, rows, cols, toks, 4, wq, ref, wbound, NULL, 3e-6,
                                what,
                                __FILE__, __LINE__))
    goto fail;
  /* embed: range checks */
  wt_check_quant_embed_range(ops, l->self, w, rows, wd);
fail:
  if (w) ops->release(l->self, w);
  free(ref);
  free(wq);
  free(wbound);
  free(wd);
  free(src);
  free(ids);
}

static void isa_case(int lvl) {
  wt_plugin l;
  const char *isa = k_isas[lvl];
  if (int8_load(&l, isa, -1, NULL) != 0) goto fail;
  wt_check_kernel_path(isa);
  WT_ASSERT_STR_CONTAINS(wt_last_info, "group_size 32");
  wt_quant_sweep(&l, check_shape, 32);
  check_shape(&l, WEIR_DTYPE_Q8_0, 301, 256, 32); /* large enough to be threaded */
  /* long rows: 64 tokens span two token blocks of the GEMM, and the activations are
   * quantized on the pool */
  check_shape(&l, WEIR_DTYPE_F16, 9, 4000, 32);
  wt_plugin_unload(&l);
  static const int64_t groups[] = {0, 64, 128};
  for (int gi = 0; gi < 3; gi++) {
    if (int8_load(&l, isa, groups[gi], NULL) != 0) goto fail;
    check_shape(&l, WEIR_DTYPE_F32, 29, 150, groups[gi]);
    check_shape(&l, WEIR_DTYPE_Q8_0, 11, 384, groups[gi]); /* requantized, not carried */
    check_shape(&l, WEIR_DTYPE_F16, 70, 256, groups[gi]);
    wt_plugin_unload(&l);
  }
fail:
  wt_plugin_unload(&l);
}

static void test_paths(void) { wt_for_each_isa(4, isa_case); }

static void test_refusals(void) {
  wt_plugin l;
  int rc = 0;
  /* group sizes the kernels do not take */
  static const int64_t bad_groups[] = {16, 48, 96, 100};
  for (int i = 0; i < 4; i++) {
    CU_ASSERT_NOT_EQUAL(int8_load(&l, NULL, bad_groups[i], &rc), 0);
    CU_ASSERT_EQUAL(rc, WEIR_E_INVAL);
    wt_plugin_unload(&l);
  }
  if (int8_load(&l, NULL, -1, NULL) != 0) goto fail;
  const weir_quant_ops *ops = l.desc->ops;
  wt_check_quant_refuses_sources(ops, l.self);
  /* and a 3-d weight */
  float dummy[64] = {0};
  weir_tensor tt = {.data = dummy, .dtype = WEIR_DTYPE_F32, .ndim = 3, .ne = {4, 8, 2, 1}};
  weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &tt, .name = "bad"};
  void *w = NULL;
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  CU_ASSERT_PTR_NULL(w);
  ops->release(l.self, NULL);
  CU_ASSERT_EQUAL(ops->matmul(l.self, NULL, NULL, NULL, 0), WEIR_OK);
  float xx[8] = {0}, yy[8];
  CU_ASSERT_EQUAL(ops->matmul(l.self, NULL, xx, yy, 1), WEIR_E_INVAL);
  /* Non-finite activations give NaN outputs (never a wrong finite number); tiny and zero
   * weights quantize to zero rows. */
  {
    float wsrc[3 * 64];
    for (int i = 0; i < 64; i++) {
      wsrc[i] = 0.5f - (float)i / 64;
      wsrc[64 + i] = 1e-39f * (float)(i + 1); /* subnormal: 1/d would overflow */
      wsrc[128 + i] = 0.0f;
    }
    weir_tensor wt = {.data = wsrc, .dtype = WEIR_DTYPE_F32, .ndim = 2, .ne = {64, 3, 1, 1}};
    weir_quant_pack_args wpa = {.struct_size = sizeof wpa, .src = &wt, .name = "odd"};
    CU_ASSERT_EQUAL(ops->pack(l.self, &wpa, &w), WEIR_OK);
    float xin[64], yout[3], emb[64];
    for (int i = 0; i < 64; i++) xin[i] = 1.0f;
    int32_t id = 1;
    CU_ASSERT_EQUAL(ops->embed(l.self, w, &id, emb, 1), WEIR_OK);
    for (int i = 0; i < 64; i++) CU_ASSERT(fabsf(emb[i]) <= 1e-37f);
    CU_ASSERT_EQUAL(ops->matmul(l.self, w, xin, yout, 1), WEIR_OK);
    CU_ASSERT(fabsf(yout[0] - 0.5f) < 0.02f); /* sum(0.5 - i/64) = 32 - 31.5 */
    CU_ASSERT(yout[1] == 0.0f && yout[2] == 0.0f);
    xin[5] = INFINITY;
    CU_ASSERT_EQUAL(ops->matmul(l.self, w, xin, yout, 1), WEIR_OK);
    CU_ASSERT(isnan(yout[0]) && isnan(yout[2]));
    xin[5] = NAN;
    CU_ASSERT_EQUAL(ops->matmul(l.self, w, xin, yout, 1), WEIR_OK);
    CU_ASSERT(isnan(yout[0]));
    ops->release(l.self, w);
    w = NULL;
  }
fail:
  wt_plugin_unload(&l);
}

/* ABI 1.7 matmul_group: three F32 weights of 40, 9 and 13 rows x 160 (a partial 256-column
 * chunk) and of every group size, on one input, give bit for bit what three matmul calls give
 * (the activations quantized once instead of three times, the same kernels), at 1, 3 and 17
 * tokens; a weight of another width in the group is NOTSUP (the host then runs separate
 * matmuls). */
static void test_group(void) {
  static const int64_t groups[] = {0, 32, 128};
  for (int gi = 0; gi < 3; gi++) {
    wt_plugin l;
    if (int8_load(&l, NULL, groups[gi], NULL) != 0) {
      CU_FAIL("int8 did not load");
      return;
    }
    const weir_quant_ops *ops = l.desc->ops;
    CU_ASSERT_FATAL(WEIR_QUANT_HAS_OP(ops, matmul_group));
    const int64_t cols = 160, rows[4] = {40, 9, 13, 5};
    void *w[4];
    float *src[4];
    for (int i = 0; i < 4; i++) {
      const int64_t c = i == 3 ? 96 : cols; /* the fourth: another width */
      src[i] = malloc(sizeof(float) * (size_t)(rows[i] * c));
      for (int64_t k = 0; k < rows[i] * c; k++) src[i][k] = wt_frand(-1, 1);
      weir_tensor t = {.data = src[i], .dtype = WEIR_DTYPE_F32, .ndim = 2, .ne = {c, rows[i], 1, 1}};
      weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &t, .name = "g"};
      CU_ASSERT_EQUAL_FATAL(ops->pack(l.self, &pa, &w[i]), WEIR_OK);
    }
    static const int64_t toks[] = {1, 3, 17};
    for (int ti = 0; ti < 3; ti++) {
      const int64_t n = toks[ti];
      float *x = malloc(sizeof(float) * (size_t)(n * cols));
      for (int64_t k = 0; k < n * cols; k++) x[k] = wt_frand(-2, 2);
      float *yg[3], *ys[3];
      for (int i = 0; i < 3; i++) {
        yg[i] = malloc(sizeof(float) * (size_t)(n * rows[i]));
        ys[i] = malloc(sizeof(float) * (size_t)(n * rows[i]));
        memset(yg[i], 0xff, sizeof(float) * (size_t)(n * rows[i])); /* NaN until written */
        CU_ASSERT_EQUAL(ops->matmul(l.self, w[i], x, ys[i], n), WEIR_OK);
      }
      CU_ASSERT_EQUAL(ops->matmul_group(l.self, (const void *const *)w, 3, x, yg, n), WEIR_OK);
      for (int i = 0; i < 3; i++) {
        CU_ASSERT(memcmp(yg[i], ys[i], sizeof(float) * (size_t)(n * rows[i])) == 0);
        free(yg[i]);
        free(ys[i]);
      }
      free(x);
    }
    float x1[160] = {0}, y1[64];
    float *y4[4] = {y1, y1, y1, y1};
    CU_ASSERT_EQUAL(ops->matmul_group(l.self, (const void *const *)w, 4, x1, y4, 1),
                    WEIR_E_NOTSUP);
    for (int i = 0; i < 4; i++) {
      ops->release(l.self, w[i]);
      free(src[i]);
    }
    wt_plugin_unload(&l);
  }
}

/* A tiny Q8_0 model through the real binary. */
static void test_end_to_end(void) {
  char *dir = wt_mkdtemp();
  char *model = wt_strf("%s/tiny-q8.gguf", dir);
  char *out = NULL;
  char *mk[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--type", "q8_0", "--out", model, NULL};
  int rc = wt_run(mk, &out, 60000);
  WT_ASSERT_INT_EQ(rc, 0);
  free(out);
  out = NULL;
  char *gen[] = {WT_WEIR, "generate", "--model", model, "--quant", "int8", "--threads", "2",
                 "--prompt", "hi", "-n", "8", "--ignore-eos",
                 "--set", "cache.memory_bytes=16777216", NULL};
  rc = wt_run(gen, &out, 60000);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "generated: 8 tokens");
  WT_ASSERT_STR_CONTAINS(out, "[plugin:int8]");
  free(out);
  out = NULL;
  /* an option through the config key, too */
  char *gen2[] = {WT_WEIR, "generate", "--model", model, "--set", "quant.name=\"int8\"",
                  "--set", "quant.group_size=0", "--prompt", "hi", "-n", "8", "--ignore-eos",
                  "--set", "cache.memory_bytes=16777216", NULL};
  rc = wt_run(gen2, &out, 60000);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "generated: 8 tokens");
  WT_ASSERT_STR_CONTAINS(out, "group_size 0");
  free(out);
  wt_rmtree(dir);
  free(model);
  free(dir);
}

int main(void) {
  static const wt_test tests[] = {{"paths", test_paths},
                                  {"refusals", test_refusals},
                                  {"matmul_group", test_group},
                                  {"end_to_end", test_end_to_end},
                                  {NULL, NULL}};
  return wt_plugin_main("quant_int8", tests, &g_host, 1);
}
