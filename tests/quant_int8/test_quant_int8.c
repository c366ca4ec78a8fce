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
 *   - end to end: `weir mkmodel --type q8_0` then `weir generate --quant int8`.
 * Inputs are random (seed printed; WT_SEED=... reruns one). */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "wt_rand.h"
#include "wt_isa.h"
#include "weir/weir.h"
#include "wt_pool.h"

static wt_pool *g_pool;
static weir_host g_host;
static const char *g_isa = "native";
static char g_last_info[512];


#define CHECK_LE(err, tol, what)                                                              \
  do {                                                                                        \
    double e_ = (err), t_ = (tol);                                                            \
    int ok_ = e_ <= t_;                                                                       \
    if (!ok_)                                                                                 \
      fprintf(stderr, "\n  %s:%d [%s isa=%s seed=%llu] error %.9g > tol %.9g\n", __FILE__,    \
              __LINE__, what, g_isa, (unsigned long long)wt_seed, e_, t_);                     \
    CU_ASSERT(ok_);                                                                           \
    if (!ok_) goto fail;                                                                      \
  } while (0)

/* Logs from the plugin: keep the last INFO line (the kernel path), print warnings. */
static void test_log(void *ctx, weir_log_level level, const char *fmt, ...) {
  (void)ctx;
  va_list ap;
  va_start(ap, fmt);
  if (level == WEIR_LOG_INFO) {
    vsnprintf(g_last_info, sizeof g_last_info, fmt, ap);
  } else if (level >= WEIR_LOG_WARN) {
    fprintf(stderr, "[plugin] ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
  }
  va_end(ap);
}

/* ---- loading ------------------------------------------------------------------------------- */

typedef struct loaded {
  void *dl;
  const weir_plugin_desc *desc;
  void *self;
} loaded;

static int plugin_load(loaded *l, const char *name, const char *isa, int64_t group, int *rc_out) {
  memset(l, 0, sizeof(*l));
  if (isa) setenv("WEIR_CPU_ISA", isa, 1);
  else unsetenv("WEIR_CPU_ISA");
  g_isa = isa ? isa : "native";
  char path[1024];
  snprintf(path, sizeof path, "%s/weir_quant_%s.so", WT_PLUGIN_DIR, name);
  l->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!l->dl) {
    fprintf(stderr, "\n  dlopen %s: %s\n", path, dlerror());
    CU_FAIL("dlopen");
    return -1;
  }
  weir_plugin_entry_fn entry = (weir_plugin_entry_fn)dlsym(l->dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  CU_ASSERT_PTR_NOT_NULL(entry);
  if (!entry) return -1;
  l->desc = entry();
  const weir_plugin_desc *d = l->desc;
  CU_ASSERT_EQUAL(d->abi_major, WEIR_ABI_MAJOR);
  CU_ASSERT_STRING_EQUAL(d->build_signature, WEIR_BUILD_SIGNATURE);
  CU_ASSERT_STRING_EQUAL(d->name, name);
  CU_ASSERT_EQUAL(d->kind, WEIR_PLUGIN_QUANT);
  CU_ASSERT(d->devices & WEIR_DEVICE_CPU);
  weir_option_value opts[4];
  memset(opts, 0, sizeof opts);
  for (int i = 0; i < d->num_options && i < 4; i++) {
    opts[i].i = d->options[i].def_int;
    opts[i].b = d->options[i].def_bool;
    opts[i].s = d->options[i].def_string ? d->options[i].def_string : "";
  }
  if (group >= 0 && d->num_options >= 1) {
    opts[0].i = group;
    opts[0].is_set = 1;
  }
  weir_plugin_args args = {.struct_size = sizeof args, .device = WEIR_DEVICE_CPU,
                           .options = opts, .num_options = d->num_options};
  g_last_info[0] = 0;
  int rc = d->init(&g_host, &args, &l->self);
  if (rc_out) {
    *rc_out = rc;
    return rc == WEIR_OK ? 0 : -1;
  }
  CU_ASSERT_EQUAL(rc, WEIR_OK);
  return rc == WEIR_OK ? 0 : -1;
}

static void plugin_unload(loaded *l) {
  if (l->desc && l->self) l->desc->fini(l->self);
  if (l->dl) dlclose(l->dl);
  memset(l, 0, sizeof(*l));
}

/* Kernel paths: WEIR_CPU_ISA value and what the plugin must report. */
static const char *const k_isas[] = {"scalar", "avx2", "avx512", "avx512vnni"};


/* ---- sources ------------------------------------------------------------------------------- */

/* The activation quantization the docs specify (per 32 columns: d = max|x| / 127 in f32,
 * q = round-to-nearest-even(x * (1 / d)) clamped to +-127), written out here. */
static void quantize_act(const float *x, int64_t n, double *xdeq, double *step) {
  for (int64_t b0 = 0; b0 < n; b0 += 32) {
    int64_t e = b0 + 32 < n ? b0 + 32 : n;
    float amax = 0;
    for (int64_t k = b0; k < e; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
    float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
    for (int64_t k = b0; k < e; k++) {
      float v = nearbyintf(x[k] * inv);
      v = v > 127 ? 127 : v < -127 ? -127 : v;
      xdeq[k] = (double)v * d;
      step[k] = (double)amax / 127.0;
    }
  }
}

/* ---- one shape ----------------------------------------------------------------------------- */

static void check_shape(loaded *l, weir_dtype t, int64_t rows, int64_t cols, int64_t group) {
  const weir_quant_ops *ops = l->desc->ops;
  double *ref = malloc(sizeof(double) * rows * cols);
  double *wstep = malloc(sizeof(double) * rows * cols);
  float *wd = malloc(sizeof(float) * rows * cols);
  void *src = wt_quant_source(t, rows, cols, ref);
  void *w = NULL;
  float *x = NULL, *y = NULL;
  double *xdeq = NULL, *xstep = NULL;
  int32_t *ids = malloc(sizeof(int32_t) * rows);
  char what[96];
  snprintf(what, sizeof what, "%s %lldx%lld group %lld", weir_dtype_name(t), (long long)rows,
           (long long)cols, (long long)group);
  weir_tensor tt = {.data = src, .dtype = t, .ndim = 2, .ne = {cols, rows, 1, 1},
                    .nb = {0, weir_dtype_row_bytes(t, cols), 0, 0}};
  weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &tt, .name = "test.weight"};
  int rc = ops->pack(l->self, &pa, &w);
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
        wstep[r * cols + k] = amax / 127;
        if (t == WEIR_DTYPE_Q8_0 && group == 32) {
          /* exact carry-over: q * d, rounded to f32 once */
          CHECK_LE(fabs((double)row[k] - (double)(float)want), 0, what);
        } else {
          CHECK_LE(fabs((double)row[k] - want), 0.5 * amax / 127 * (1 + 1e-5) + 1e-6 * amax, what);
        }
      }
    }
  }
  /* Put wd back in row order. */
  {
    float *tmp = malloc(sizeof(float) * rows * cols);
    for (int64_t r = 0; r < rows; r++)
      memcpy(tmp + r * cols, wd + (rows - 1 - r) * cols, sizeof(float) * cols);
    free(wd);
    wd = tmp;
  }

  static const int64_t toks[] = {1, 2, 7, 64};
  x = malloc(sizeof(float) * 64 * cols);
  y = malloc(sizeof(float) * 64 * rows);
  xdeq = malloc(sizeof(double) * 64 * cols);
  xstep = malloc(sizeof(double) * 64 * cols);
  for (int64_t i = 0; i < 64 * cols; i++) x[i] = wt_frand(-1, 1) * ((wt_rnd() & 31) == 0 ? 10.0f : 1.0f);
  for (int64_t tk = 0; tk < 64; tk++)
    quantize_act(x + tk * cols, cols, xdeq + tk * cols, xstep + tk * cols);
  for (size_t ti = 0; ti < 4; ti++) {
    int64_t n = toks[ti];
    for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
    CU_ASSERT_EQUAL(ops->matmul(l->self, w, x, y, n), WEIR_OK);
    for (int64_t tk = 0; tk < n; tk++)
      for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + tk * cols;
        const double *xq = xdeq + tk * cols, *xs = xstep + tk * cols;
        const float *wr = wd + r * cols;
        const double *orig = ref + r * cols, *ws = wstep + r * cols;
        double s_tight = 0, mag = 0, s_deq = 0, s_orig = 0, b_act = 0, b_w = 0;
        for (int64_t k = 0; k < cols; k++) {
          s_tight += (double)wr[k] * xq[k];
          mag += fabs((double)wr[k] * xq[k]);
          s_deq += (double)wr[k] * xr[k];
          s_orig += orig[k] * xr[k];
          b_act += 0.5 * xs[k] * fabs((double)wr[k]) * (1 + 1e-5);
          b_w += 0.5 * ws[k] * fabs((double)xr[k]) * (1 + 1e-5);
        }
        double got = y[tk * rows + r];
        CHECK_LE(fabs(got - s_tight), 3e-6 * mag + 1e-7, what);
        CHECK_LE(fabs(got - s_deq), b_act + 3e-6 * mag + 1e-7, what);
        CHECK_LE(fabs(got - s_orig), b_act + b_w + 3e-6 * mag + 1e-6, what);
      }
  }
  /* embed: range checks */
  int32_t bad[3] = {0, (int32_t)rows, 0};
  CU_ASSERT_EQUAL(ops->embed(l->self, w, bad, y, 3), WEIR_E_RANGE);
  bad[1] = -1;
  CU_ASSERT_EQUAL(ops->embed(l->self, w, bad, y, 3), WEIR_E_RANGE);
fail:
  if (w) ops->release(l->self, w);
  free(ref);
  free(wstep);
  free(wd);
  free(src);
  free(x);
  free(y);
  free(xdeq);
  free(xstep);
  free(ids);
}

static const weir_dtype k_all[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16,
                                   WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1};

static void isa_case(int lvl) {
  loaded l;
  const char *isa = k_isas[lvl];
  if (plugin_load(&l, "int8", isa, -1, NULL) != 0) goto fail;
  /* the plugin reports the path it runs, which must be the one asked for */
  char want[64];
  snprintf(want, sizeof want, "kernels %s", isa);
  WT_ASSERT_STR_CONTAINS(g_last_info, want);
  WT_ASSERT_STR_CONTAINS(g_last_info, "group_size 32");
  for (int i = 0; i < 6; i++) {
    CU_ASSERT(l.desc->dtypes & WEIR_DTYPE_BIT(k_all[i]));
    check_shape(&l, k_all[i], 37, 96, 32);
    check_shape(&l, k_all[i], 6, 320, 32);
  }
  check_shape(&l, WEIR_DTYPE_F16, 13, 45, 32);
  check_shape(&l, WEIR_DTYPE_F32, 9, 7, 32);
  check_shape(&l, WEIR_DTYPE_BF16, 5, 129, 32);
  check_shape(&l, WEIR_DTYPE_Q8_0, 301, 256, 32); /* large enough to be threaded */
  /* long rows: 64 tokens span two token blocks of the GEMM, and the activations are
   * quantized on the pool */
  check_shape(&l, WEIR_DTYPE_F16, 9, 4000, 32);
  plugin_unload(&l);
  static const int64_t groups[] = {0, 64, 128};
  for (int gi = 0; gi < 3; gi++) {
    if (plugin_load(&l, "int8", isa, groups[gi], NULL) != 0) goto fail;
    check_shape(&l, WEIR_DTYPE_F32, 29, 150, groups[gi]);
    check_shape(&l, WEIR_DTYPE_Q8_0, 11, 384, groups[gi]); /* requantized, not carried */
    check_shape(&l, WEIR_DTYPE_F16, 70, 256, groups[gi]);
    plugin_unload(&l);
  }
fail:
  plugin_unload(&l);
}

static void test_paths(void) {
  int ran = 0;
  for (int lvl = 0; lvl < 4; lvl++)
    if (wt_isa_available(lvl)) {
      isa_case(lvl);
      ran++;
    }
  CU_ASSERT(ran >= 1);
}

static void test_refusals(void) {
  loaded l;
  int rc = 0;
  /* group sizes the kernels do not take */
  static const int64_t bad_groups[] = {16, 48, 96, 100};
  for (int i = 0; i < 4; i++) {
    CU_ASSERT_NOT_EQUAL(plugin_load(&l, "int8", NULL, bad_groups[i], &rc), 0);
    CU_ASSERT_EQUAL(rc, WEIR_E_INVAL);
    plugin_unload(&l);
  }
  if (plugin_load(&l, "int8", NULL, -1, NULL) != 0) goto fail;
  const weir_quant_ops *ops = l.desc->ops;
  int32_t dummy[64] = {0};
  weir_tensor tt = {.data = dummy, .dtype = WEIR_DTYPE_I32, .ndim = 2, .ne = {8, 8, 1, 1}};
  weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &tt, .name = "bad"};
  void *w = NULL;
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  tt.dtype = WEIR_DTYPE_Q8_0;
  tt.ne[0] = 45; /* not a whole number of blocks */
  CU_ASSERT_EQUAL(ops->pack(l.self, &pa, &w), WEIR_E_NOTSUP);
  tt.dtype = WEIR_DTYPE_F32;
  tt.ndim = 3;
  tt.ne[0] = 4;
  tt.ne[2] = 2;
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
  plugin_unload(&l);
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
  char *gen2[] = {WT_WEIR, "generate", "--model", model, "--set", "quant.scheme=\"int8\"",
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
  wt_rand_init();
  fprintf(stderr, "quant_int8: seed %llu (rerun with WT_SEED=%llu)\n",
          (unsigned long long)wt_seed, (unsigned long long)wt_seed);
  g_pool = wt_pool_create(3);
  g_host = wt_pool_host(g_pool);
  g_host.log = test_log;
  static const wt_test tests[] = {{"paths", test_paths},
                                  {"refusals", test_refusals},
                                  {"end_to_end", test_end_to_end},
                                  {NULL, NULL}};
  int rc = wt_run_suite("quant_int8", tests);
  wt_pool_destroy(g_pool);
  unsetenv("WEIR_CPU_ISA");
  return rc;
}
