/* What the CPU plugin suites (cpu_plugins, quant_int8, quant_awq) share: their main, loading
 * a plugin from the build's plugin directory with dlopen and checking its descriptor and
 * declared default options, a host log callback that keeps the last INFO and ERROR lines,
 * tolerance checks that print the ISA and seed of a failing case, and, for the quant plugins,
 * the documented int8 activation quantization and the matmul references built on it.
 *
 * Header-only (every test binary has its own state); needs testutil.h's WT_PLUGIN_DIR, CUnit,
 * and tests/kernels (wt_isa.h, wt_pool.h; link wt_pool.c) on the include path.
 * Memory: a wt_plugin owns its dlopen handle and plugin instance until wt_plugin_unload; every
 * array a helper takes stays the caller's; the log buffers are static. Not thread-safe. */
#ifndef WEIR_TESTS_WT_PLUGIN_H
#define WEIR_TESTS_WT_PLUGIN_H

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "weir/weir.h"
#include "wt_options.h"
#include "wt_isa.h"
#include "wt_pool.h"
#include "wt_rand.h"

/* The ISA the plugin under test was loaded for (printed with a failure). */
static const char *wt_isa_name = "native";
/* The last INFO line (the kernel path a plugin reports), WARN line and ERROR line it logged. */
static char wt_last_info[1024];
static char wt_last_error[1024];
static char wt_last_warn[1024];

/* Host log callback: keeps the last INFO and ERROR lines for the tests to check (the suites
 * provoke many errors on purpose), and prints warnings, which no test expects. */
static inline void wt_plugin_log(void *ctx, weir_log_level level, const char *fmt, ...) {
  (void)ctx;
  va_list ap;
  va_start(ap, fmt);
  if (level == WEIR_LOG_INFO) {
    vsnprintf(wt_last_info, sizeof wt_last_info, fmt, ap);
  } else if (level >= WEIR_LOG_ERROR) {
    vsnprintf(wt_last_error, sizeof wt_last_error, fmt, ap);
  } else if (level == WEIR_LOG_WARN) {
    vsnprintf(wt_last_warn, sizeof wt_last_warn, fmt, ap);
    fprintf(stderr, "[plugin] %s\n", wt_last_warn);
  }
  va_end(ap);
}

/* set_error messages (ABI 1.5) are kept as the last ERROR line too. */
static inline void wt_plugin_error(const char *msg) {
  snprintf(wt_last_error, sizeof wt_last_error, "%s", msg);
}

/* ---- tolerance checks ------------------------------------------------------------------------ */

/* err <= tol, else a CUnit failure at the caller's line with the case, ISA and seed. */
static inline int wt_check_le_at(double err, double tol, const char *what, const char *file,
                                 int line) {
  int ok = err <= tol;
  if (!ok)
    fprintf(stderr, "\n  %s:%d [%s isa=%s seed=%llu] error %.9g > tol %.9g\n", file, line, what,
            wt_isa_name, (unsigned long long)wt_seed, err, tol);
  CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, (unsigned)line, "error <= tol", file, "",
                          CU_FALSE);
  return ok;
}

/* |got - want| <= tol (or both equal, for infinities), reported like wt_check_le_at. */
static inline int wt_check_close_at(double got, double want, double tol, const char *what,
                                    const char *file, int line) {
  int ok = fabs(got - want) <= tol || got == want;
  if (!ok)
    fprintf(stderr, "\n  %s:%d [%s isa=%s seed=%llu] got %.9g want %.9g (tol %.3g)\n", file, line,
            what, wt_isa_name, (unsigned long long)wt_seed, got, want, tol);
  CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, (unsigned)line, "|got - want| <= tol", file,
                          "", CU_FALSE);
  return ok;
}

/* Macros only for the caller's line and the jump to its `fail:` clean-up. */
#define WT_CHECK_LE(err, tol, what)                                                           \
  do {                                                                                        \
    if (!wt_check_le_at((err), (tol), (what), __FILE__, __LINE__)) goto fail;                 \
  } while (0)
#define WT_CHECK_CLOSE(got, want, tol, what)                                                  \
  do {                                                                                        \
    if (!wt_check_close_at((got), (want), (tol), (what), __FILE__, __LINE__)) goto fail;      \
  } while (0)

/* ---- loading --------------------------------------------------------------------------------- */

typedef struct wt_plugin {
  void *dl;                     /* owned: dlclose'd by wt_plugin_unload */
  const weir_plugin_desc *desc; /* the plugin's static descriptor */
  void *self;                   /* owned: the instance, fini'd by wt_plugin_unload */
} wt_plugin;

/* Opens WT_PLUGIN_DIR/weir_<kind>_<name>.so with WEIR_CPU_ISA=isa (NULL: unset, "native")
 * and checks the descriptor: this build's ABI and signature, its name and kind, the entry
 * points, and CPU support. Does not initialise it (wt_plugin_init). 0, or -1 with a failure. */
static inline int wt_plugin_open(wt_plugin *p, const char *kind, const char *name,
                                 const char *isa) {
  memset(p, 0, sizeof(*p));
  if (isa) setenv("WEIR_CPU_ISA", isa, 1);
  else unsetenv("WEIR_CPU_ISA");
  wt_isa_name = isa ? isa : "native";
  char path[1024];
  snprintf(path, sizeof path, "%s/weir_%s_%s.so", WT_PLUGIN_DIR, kind, name);
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) {
    fprintf(stderr, "\n  dlopen %s: %s\n", path, dlerror());
    CU_FAIL("dlopen");
    return -1;
  }
  weir_plugin_entry_fn entry = (weir_plugin_entry_fn)dlsym(p->dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  CU_ASSERT_PTR_NOT_NULL(entry);
  if (!entry) return -1;
  p->desc = entry();
  const weir_plugin_desc *d = p->desc;
  CU_ASSERT_EQUAL(d->abi_major, WEIR_ABI_MAJOR);
  CU_ASSERT_STRING_EQUAL(d->build_signature, WEIR_BUILD_SIGNATURE);
  CU_ASSERT_STRING_EQUAL(d->name, name);
  CU_ASSERT_STRING_EQUAL(weir_plugin_kind_name(d->kind), kind);
  CU_ASSERT(d->init && d->fini && d->ops);
  CU_ASSERT(d->devices & WEIR_DEVICE_CPU);
  return 0;
}

/* Fills opts[0..cap) with the defaults the descriptor declares; the caller's array. */
static inline void wt_plugin_defaults(const weir_plugin_desc *d, weir_option_value *opts,
                                      int cap) {
  memset(opts, 0, sizeof(*opts) * (size_t)cap);
  CU_ASSERT(d->num_options <= cap);
  for (int i = 0; i < d->num_options && i < cap; i++) {
    opts[i].i = d->options[i].def_int;
    opts[i].f = d->options[i].def_float;
    opts[i].s = d->options[i].def_string ? d->options[i].def_string : "";
    opts[i].b = d->options[i].def_bool;
  }
}

/* The option named key in opts (laid out as the descriptor's), or NULL when it has none. */
static inline weir_option_value *wt_plugin_option(const weir_plugin_desc *d,
                                                  weir_option_value *opts, const char *key) {
  for (int i = 0; i < d->num_options; i++)
    if (!strcmp(d->options[i].key, key)) return &opts[i];
  return NULL;
}

/* Initialises an opened plugin on the CPU with opts (NULL: the declared defaults) and clears
 * wt_last_info first, so that what it logs on init can be checked. With rc_out the init status
 * is stored there for the caller to check; without, anything but WEIR_OK is a failure.
 * 0 when it initialised, else -1. */
static inline int wt_plugin_init(wt_plugin *p, const weir_host *host,
                                 const weir_option_value *opts, int *rc_out) {
  const weir_plugin_desc *d = p->desc;
  weir_option_value defaults[16];
  if (!opts) {
    wt_plugin_defaults(d, defaults, 16);
    opts = defaults;
  }
  weir_plugin_args args = {.struct_size = sizeof args, .device = WEIR_DEVICE_CPU,
                           .options = opts, .num_options = d->num_options};
  wt_options_use(d, opts); /* what host->option reads (wt_plugin_main set it) */
  wt_last_info[0] = 0;
  int rc = d->init(host, &args, &p->self);
  if (rc_out) *rc_out = rc;
  else CU_ASSERT_EQUAL(rc, WEIR_OK);
  return rc == WEIR_OK ? 0 : -1;
}

/* wt_plugin_open and wt_plugin_init in one, for a plugin whose options the test does not
 * change. */
static inline int wt_plugin_load(wt_plugin *p, const weir_host *host, const char *kind,
                                 const char *name, const char *isa,
                                 const weir_option_value *opts) {
  if (wt_plugin_open(p, kind, name, isa) != 0) return -1;
  return wt_plugin_init(p, host, opts, NULL);
}

/* Finalises and closes whatever of p was loaded; safe on a zeroed or half-loaded p. */
static inline void wt_plugin_unload(wt_plugin *p) {
  if (p->desc && p->self) p->desc->fini(p->self);
  if (p->dl) dlclose(p->dl);
  memset(p, 0, sizeof(*p));
}

/* Runs case_fn for each of the first `levels` kernel paths (wt_isa.h levels) this CPU has;
 * at least one must run, or the suite tested nothing. */
static inline void wt_for_each_isa(int levels, void (*case_fn)(int level)) {
  int ran = 0;
  for (int lvl = 0; lvl < levels; lvl++)
    if (wt_isa_available(lvl)) {
      case_fn(lvl);
      ran++;
    }
  CU_ASSERT(ran >= 1);
}

/* The plugin suites' main: seeds the generator and prints the seed (for WT_SEED replays),
 * gives *host a parallel_for on three pthreads (and wt_plugin_log when capture_log), runs the
 * tests and frees the pool. The process exit code. */
static inline int wt_plugin_main(const char *suite, const wt_test *tests, weir_host *host,
                                 int capture_log) {
  wt_rand_init();
  fprintf(stderr, "%s: seed %llu (rerun with WT_SEED=%llu)\n", suite,
          (unsigned long long)wt_seed, (unsigned long long)wt_seed);
  wt_pool *pool = wt_pool_create(3);
  *host = wt_pool_host(pool);
  wt_options_host(host);
  if (capture_log) {
    host->log = wt_plugin_log;
    wt_options_error_hook = wt_plugin_error;
  }
  int rc = wt_run_suite(suite, tests);
  wt_pool_destroy(pool);
  unsetenv("WEIR_CPU_ISA");
  return rc;
}

/* The plugin reports the kernel path it runs on init, which must be the one asked for. */
static inline void wt_check_kernel_path(const char *isa) {
  char want[64];
  snprintf(want, sizeof want, "kernels %s", isa);
  WT_ASSERT_STR_CONTAINS(wt_last_info, want);
}

/* ---- the documented int8 activation quantization ----------------------------------------------
 * Per 32 columns: d = max|x| / 127 in f32, q = round-to-nearest-even(x * (1 / d)) clamped to
 * +-127 (docs/quant-int8.md), written out here independently of the kernels. xdeq[k] gets q d,
 * step[k] the block's step max|x| / 127 in double; both are the caller's n-element arrays. */
static inline void wt_quantize_act(const float *x, int64_t n, double *xdeq, double *step) {
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

/* Random activations x[tokens][cols], uniform in [-1, 1) with the odd 10x outlier, as hidden
 * states carry; xdeq and step get their wt_quantize_act quantization row by row. All three are
 * the caller's tokens * cols arrays. */
static inline void wt_quant_acts(float *x, double *xdeq, double *step, int64_t tokens,
                                 int64_t cols) {
  for (int64_t i = 0; i < tokens * cols; i++)
    x[i] = wt_frand(-1, 1) * ((wt_rnd() & 31) == 0 ? 10.0f : 1.0f);
  for (int64_t tk = 0; tk < tokens; tk++)
    wt_quantize_act(x + tk * cols, cols, xdeq + tk * cols, step + tk * cols);
}

/* One output of a quant plugin's matmul, y = w . x over cols columns, and what it is checked
 * against (rows of the caller's arrays): w the packed weights as the plugin holds them, w_src
 * the source weights, w_bound how far each packed weight may be from its source, w_off the
 * zero-point offset of each weight's group (w = d q + w_off; NULL: none); x the raw
 * activations, x_deq and x_step their wt_quantize_act quantization. */
typedef struct wt_quant_dot {
  const double *w, *w_src, *w_bound, *w_off;
  const float *x;
  const double *x_deq, *x_step;
} wt_quant_dot;

/* Checks got against three double-precision references: the packed weights times the
 * activations quantized as documented (tight: rel of the sum of magnitudes; with offsets, the
 * magnitudes of the two terms a kernel sums apart, d q x and w_off x, which can cancel to far
 * less than either), times the raw
 * activations (plus half an activation step per column), and the source weights times the raw
 * activations (plus the weight bounds too). 0 at the first one missed, with a failure at the
 * caller's line. */
static inline int wt_check_quant_dot(double got, wt_quant_dot d, int64_t cols, double rel,
                                     const char *what, const char *file, int line) {
  double s_tight = 0, mag = 0, s_deq = 0, s_orig = 0, b_act = 0, b_w = 0;
  for (int64_t k = 0; k < cols; k++) {
    double off = d.w_off ? d.w_off[k] : 0.0;
    s_tight += d.w[k] * d.x_deq[k];
    mag += fabs((d.w[k] - off) * d.x_deq[k]) + fabs(off * d.x_deq[k]);
    s_deq += d.w[k] * d.x[k];
    s_orig += d.w_src[k] * d.x[k];
    b_act += 0.5 * d.x_step[k] * fabs(d.w[k]) * (1 + 1e-5);
    b_w += d.w_bound[k] * fabs((double)d.x[k]);
  }
  return wt_check_le_at(fabs(got - s_tight), rel * mag + 1e-7, what, file, line) &&
         wt_check_le_at(fabs(got - s_deq), b_act + rel * mag + 1e-7, what, file, line) &&
         wt_check_le_at(fabs(got - s_orig), b_act + b_w + rel * mag + 1e-6, what, file, line);
}

/* Runs ops->matmul on the packed w (rows x cols) for each of the ntoks token counts in toks
 * (each at most 64) over wt_quant_acts activations, and checks every output with
 * wt_check_quant_dot (w_q, w_src, w_bound, w_off: the caller's [rows][cols]; w_off may be
 * NULL). Failures are reported
 * at the caller's line; 0 at the first one. Its own buffers are allocated and freed here. */
static inline int wt_check_quant_matmul_at(const weir_quant_ops *ops, void *self, void *w,
                                           int64_t rows, int64_t cols, const int64_t *toks,
                                           int ntoks, const double *w_q, const double *w_src,
                                           const double *w_bound, const double *w_off,
                                           double rel, const char *what,
                                           const char *file, int line) {
  float *x = malloc(sizeof(float) * 64 * cols), *y = malloc(sizeof(float) * 64 * rows);
  double *xdeq = malloc(sizeof(double) * 64 * cols), *xstep = malloc(sizeof(double) * 64 * cols);
  int ok = 1;
  wt_quant_acts(x, xdeq, xstep, 64, cols);
  for (int ti = 0; ti < ntoks && ok; ti++) {
    int64_t n = toks[ti];
    for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
    int rc = ops->matmul(self, w, x, y, n);
    CU_assertImplementation(rc == WEIR_OK ? CU_TRUE : CU_FALSE, (unsigned)line,
                            "matmul == WEIR_OK", file, "", CU_FALSE);
    for (int64_t tk = 0; tk < n && ok; tk++)
      for (int64_t r = 0; r < rows && ok; r++) {
        wt_quant_dot d = {.w = w_q + r * cols, .w_src = w_src + r * cols,
                          .w_bound = w_bound + r * cols,
                          .w_off = w_off ? w_off + r * cols : NULL, .x = x + tk * cols,
                          .x_deq = xdeq + tk * cols, .x_step = xstep + tk * cols};
        ok = wt_check_quant_dot(y[tk * rows + r], d, cols, rel, what, file, line);
      }
  }
  free(x);
  free(y);
  free(xdeq);
  free(xstep);
  return ok;
}

/* Packs src, a [rows][cols] GGUF tensor of type t (the caller's), as "test.weight" into *w;
 * the plugin's status, asserted WEIR_OK at the caller. */
static inline int wt_quant_pack(const weir_quant_ops *ops, void *self, weir_dtype t, void *src,
                                int64_t rows, int64_t cols, void **w) {
  weir_tensor tt = {.data = src, .dtype = t, .ndim = 2, .ne = {cols, rows, 1, 1},
                    .nb = {0, weir_dtype_row_bytes(t, cols), 0, 0}};
  weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &tt, .name = "test.weight"};
  return ops->pack(self, &pa, w);
}

/* The GGUF source types every CPU quant plugin packs. */
static const weir_dtype wt_quant_dtypes[] = {WEIR_DTYPE_F32,  WEIR_DTYPE_F16,  WEIR_DTYPE_BF16,
                                             WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1};

/* A suite's check of one packed shape: type, rows, cols, group size. */
typedef void (*wt_quant_shape_fn)(wt_plugin *l, weir_dtype t, int64_t rows, int64_t cols,
                                  int64_t group);

/* Asserts l declares every wt_quant_dtypes type and runs check on each at two shapes of whole
 * blocks, then on rows the kernels must finish with a tail (45, 7 and 129 columns). */
static inline void wt_quant_sweep(wt_plugin *l, wt_quant_shape_fn check, int64_t group) {
  for (size_t i = 0; i < sizeof wt_quant_dtypes / sizeof wt_quant_dtypes[0]; i++) {
    CU_ASSERT(l->desc->dtypes & WEIR_DTYPE_BIT(wt_quant_dtypes[i]));
    check(l, wt_quant_dtypes[i], 37, 96, group);
    check(l, wt_quant_dtypes[i], 6, 320, group);
  }
  check(l, WEIR_DTYPE_F16, 13, 45, group);
  check(l, WEIR_DTYPE_F32, 9, 7, group);
  check(l, WEIR_DTYPE_BF16, 5, 129, group);
}

/* embed refuses an id past the last row or below zero with WEIR_E_RANGE; buf: scratch for
 * three rows, which it must not need. */
static inline void wt_check_quant_embed_range(const weir_quant_ops *ops, void *self, void *w,
                                              int64_t rows, float *buf) {
  int32_t bad[3] = {0, (int32_t)rows, 0};
  CU_ASSERT_EQUAL(ops->embed(self, w, bad, buf, 3), WEIR_E_RANGE);
  bad[1] = -1;
  CU_ASSERT_EQUAL(ops->embed(self, w, bad, buf, 3), WEIR_E_RANGE);
}

/* Every quant plugin refuses, with WEIR_E_NOTSUP and nothing packed, a source dtype it has no
 * kernel for (I32) and a block type whose rows are not whole blocks (Q8_0 x 45). */
static inline void wt_check_quant_refuses_sources(const weir_quant_ops *ops, void *self) {
  int32_t dummy[64] = {0};
  weir_tensor tt = {.data = dummy, .dtype = WEIR_DTYPE_I32, .ndim = 2, .ne = {8, 8, 1, 1}};
  weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &tt, .name = "bad"};
  void *w = NULL;
  CU_ASSERT_EQUAL(ops->pack(self, &pa, &w), WEIR_E_NOTSUP);
  tt.dtype = WEIR_DTYPE_Q8_0;
  tt.ne[0] = 45; /* not a whole number of blocks */
  CU_ASSERT_EQUAL(ops->pack(self, &pa, &w), WEIR_E_NOTSUP);
  CU_ASSERT_PTR_NULL(w);
}

#endif
