/* A minimal weir host for the CUDA suites; see cuda_host.h. */
#include "cuda_host.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <CUnit/Basic.h>

#include "wt_options.h"

#ifndef WEIR_CUDA_PLUGIN_DIR
#error "WEIR_CUDA_PLUGIN_DIR must name the build tree's plugin folder"
#endif

typedef struct ch_ctx {
  char name[64];
  char last_error[2400];
} ch_ctx;

ch_plugin ch_dev;

static void h_log(void *ctx, weir_log_level level, const char *fmt, ...) {
  ch_ctx *c = ctx;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (level >= WEIR_LOG_WARN) snprintf(c->last_error, sizeof c->last_error, "%s", line);
  if (getenv("WEIR_TEST_VERBOSE") || level >= WEIR_LOG_WARN)
    fprintf(stderr, "[%s] %s\n", c->name, line);
}

/* ABI 1.5: the reason a call fails, kept as the plugin's last error. */
static void h_set_error(void *ctx, const char *fmt, ...) {
  ch_ctx *c = ctx;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
  va_end(ap);
}

static void *h_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  if (align < 16) align = 16;
  void *p = NULL;
  return posix_memalign(&p, align, size ? size : 1) == 0 ? p : NULL;
}

static void h_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

static int h_device_alloc(void *ctx, size_t size, void **ptr) {
  (void)ctx;
  return CH_DEV->alloc(ch_dev.self, size, ptr);
}

static void h_device_free(void *ctx, void *ptr) {
  (void)ctx;
  CH_DEV->free(ch_dev.self, ptr);
}

static void h_parallel_for(void *ctx, int64_t n, int64_t grain, weir_parallel_fn fn, void *arg) {
  (void)ctx;
  (void)grain;
  if (n > 0) fn(arg, 0, n, 0);
}

static int h_num_threads(void *ctx) {
  (void)ctx;
  return 1;
}

static int h_metric_register(void *ctx, const weir_metric_desc *desc, weir_metric **out) {
  (void)ctx;
  (void)desc;
  static int dummy;
  *out = (weir_metric *)&dummy;
  return WEIR_OK;
}

static void h_metric_record(void *ctx, weir_metric *m, double v) {
  (void)ctx;
  (void)m;
  (void)v;
}

/* As core does: forward to the device plugin's native_handle when it has one. */
static void *h_device_handle(void *ctx, const char *name) {
  (void)ctx;
  const weir_device_ops *ops = CH_DEV;
  if (!ch_dev.self || !ops || ops->struct_size < offsetof(weir_device_ops, native_handle) +
                                                    sizeof(void *) || !ops->native_handle)
    return NULL;
  return ops->native_handle(ch_dev.self, name);
}

/* Where the plugins are: $WEIR_CUDA_PLUGIN_DIR, else the build tree's layout relative to this
 * executable (tests/bin/../../lib/weir/plugins, so a build tree copied elsewhere still works),
 * else the folder CMake compiled in. */
const char *ch_plugin_dir(void) {
  static char dir[1100];
  const char *e = getenv("WEIR_CUDA_PLUGIN_DIR");
  if (e && *e) return e;
  char exe[1024];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      snprintf(dir, sizeof dir, "%s/../../lib/weir/plugins", exe);
      if (access(dir, R_OK) == 0) return dir;
    }
  }
  return WEIR_CUDA_PLUGIN_DIR;
}

static int load(ch_plugin *p, const char *file, int is_device) {
  memset(p, 0, sizeof *p);
  char path[2200];
  snprintf(path, sizeof path, "%s/%s", ch_plugin_dir(), file);
  p->ctx = calloc(1, sizeof *p->ctx);
  if (!p->ctx) return WEIR_E_NOMEM;
  snprintf(p->ctx->name, sizeof p->ctx->name, "%s", file);
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) {
    snprintf(p->ctx->last_error, sizeof p->ctx->last_error, "dlopen %s: %s", path, dlerror());
    return WEIR_E_NOTFOUND;
  }
  weir_plugin_entry_fn entry = (weir_plugin_entry_fn)dlsym(p->dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  if (!entry) {
    snprintf(p->ctx->last_error, sizeof p->ctx->last_error, "%s: no entry symbol", path);
    return WEIR_E_ABI;
  }
  p->desc = entry();
  p->ops = p->desc->ops;
  weir_host *h = &p->host;
  h->struct_size = sizeof *h;
  h->abi_minor = WEIR_ABI_MINOR;
  h->ctx = p->ctx;
  h->log = h_log;
  h->alloc = h_alloc;
  h->free = h_free;
  h->device_alloc = is_device ? NULL : h_device_alloc;
  h->device_free = is_device ? NULL : h_device_free;
  h->parallel_for = h_parallel_for;
  h->num_threads = h_num_threads;
  h->metric_register = h_metric_register;
  h->metric_record = h_metric_record;
  h->device_handle = is_device ? NULL : h_device_handle;
  h->option = wt_options_option; /* by key, from the options below (wt_options.h) */
  h->set_error = h_set_error;

  /* Default options, as the host resolves them when the TOML table sets none. */
  weir_option_value *opts = calloc((size_t)p->desc->num_options + 1, sizeof *opts);
  if (!opts) return WEIR_E_NOMEM;
  for (int i = 0; i < p->desc->num_options; i++) {
    const weir_option_desc *o = &p->desc->options[i];
    opts[i].i = o->def_int;
    opts[i].f = o->def_float;
    opts[i].s = o->def_string ? o->def_string : "";
    opts[i].b = o->def_bool;
  }
  weir_plugin_args args = {.struct_size = sizeof args,
                           .device = WEIR_DEVICE_CUDA,
                           .options = opts,
                           .num_options = p->desc->num_options};
  wt_options_use(p->desc, opts);
  int rc = p->desc->init(h, &args, &p->self);
  /* The options must outlive the instance; a test process keeps them to the end. */
  return rc;
}

int ch_device_open(char *why, size_t why_len) {
  int rc = load(&ch_dev, "weir_device_cuda.so", 1);
  if (rc != WEIR_OK) {
    snprintf(why, why_len, "%s", ch_dev.ctx ? ch_dev.ctx->last_error : "out of memory");
    ch_dev.self = NULL;
  }
  return rc;
}

int ch_plugin_open(ch_plugin *p, const char *file) { return load(p, file, 0); }

void ch_plugin_close(ch_plugin *p) {
  if (p->self) p->desc->fini(p->self);
  p->self = NULL;
}

void ch_device_close(void) {
  if (ch_dev.self) ch_dev.desc->fini(ch_dev.self);
  ch_dev.self = NULL;
}

const char *ch_last_error(const ch_plugin *p) { return p->ctx ? p->ctx->last_error : ""; }

static void die(const char *what, int rc) {
  fprintf(stderr, "fatal: %s: %s (%s)\n", what, weir_strerror(rc), ch_last_error(&ch_dev));
  exit(1);
}

void *ch_dalloc(size_t bytes) {
  void *p = NULL;
  int rc = CH_DEV->alloc(ch_dev.self, bytes, &p);
  if (rc != WEIR_OK) die("device alloc", rc);
  return p;
}

void ch_dfree(void *p) { CH_DEV->free(ch_dev.self, p); }

void ch_h2d(void *dst, const void *src, size_t n) {
  int rc = CH_DEV->copy_h2d(ch_dev.self, dst, src, n);
  if (rc == WEIR_OK) rc = CH_DEV->synchronize(ch_dev.self);
  if (rc != WEIR_OK) die("copy_h2d", rc);
}

void ch_d2h(void *dst, const void *src, size_t n) {
  int rc = CH_DEV->copy_d2h(ch_dev.self, dst, src, n);
  if (rc != WEIR_OK) die("copy_d2h", rc);
}

void ch_poison(void *dst, size_t n) {
  int rc = CH_DEV->memset(ch_dev.self, dst, 0xFF, n);
  if (rc != WEIR_OK) die("memset", rc);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

void ch_seed(uint64_t s) { rng_state = s ? s : 1; }

void ch_seed_from_env(uint64_t def) {
  const char *e = getenv("WEIR_TEST_SEED");
  uint64_t s = e && *e ? strtoull(e, NULL, 0) : def;
  printf("seed %llu (set WEIR_TEST_SEED to change)\n", (unsigned long long)s);
  ch_seed(s);
}

uint32_t ch_rand_u32(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  rng_state = x;
  return (uint32_t)(x >> 32);
}

float ch_uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((ch_rand_u32() >> 8) * (1.0 / 16777216.0));
}

void ch_fill_uniform(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = ch_uniform(lo, hi);
}

uint16_t ch_f32_to_f16(float x) {
  _Float16 h = (_Float16)x;
  uint16_t u;
  memcpy(&u, &h, 2);
  return u;
}

float ch_f16_to_f32(uint16_t u) {
  _Float16 h;
  memcpy(&h, &u, 2);
  return (float)h;
}

double ch_rel_err(const float *a, const double *ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    double d = (double)a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return sqrt(num);
  return sqrt(num / den);
}

int ch_compare_logits(const float *a, const float *b, int64_t rows, int64_t vocab,
                      ch_logits_report *out) {
  double num = 0, den = 0, mx = 0;
  int64_t agree = 0;
  int bad = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *ra = a + r * vocab, *rb = b + r * vocab;
    int64_t ia = 0, ib = 0;
    for (int64_t i = 0; i < vocab; i++) {
      if (!isfinite(ra[i])) bad = 1;
      double d = (double)ra[i] - rb[i];
      num += d * d;
      den += (double)rb[i] * rb[i];
      if (fabs(d) > mx) mx = fabs(d);
      if (ra[i] > ra[ia]) ia = i;
      if (rb[i] > rb[ib]) ib = i;
    }
    agree += ia == ib;
  }
  out->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
  out->max_abs = mx;
  out->top1_agree = rows > 0 ? (double)agree / (double)rows : 1.0;
  return bad;
}

double ch_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ch_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double ch_copy_bandwidth(void) {
  const size_t n = (size_t)1 << 30;
  void *a = ch_dalloc(n), *b = ch_dalloc(n);
  CH_CHECK(CH_DEV->memset(ch_dev.self, a, 0x3C, n));
  for (int i = 0; i < 2; i++) CH_CHECK(CH_DEV->copy_d2d(ch_dev.self, b, a, n));
  CH_CHECK(CH_DEV->synchronize(ch_dev.self));
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = ch_now();
    for (int i = 0; i < 10; i++)
      CH_CHECK(CH_DEV->copy_d2d(ch_dev.self, i % 2 ? a : b, i % 2 ? b : a, n));
    CH_CHECK(CH_DEV->synchronize(ch_dev.self));
    double dt = ch_now() - t0;
    if (dt < best) best = dt;
  }
  ch_dfree(a);
  ch_dfree(b);
  return 2.0 * (double)n * 10 / best; /* read + write */
}

void ch_device_open_or_skip(void) {
  char why[512] = "";
  int rc = ch_device_open(why, sizeof why);
  if (rc == WEIR_OK) return;
  if (rc == WEIR_E_DEVICE) {
    printf("no CUDA device: skipping (%s)\n", why);
    exit(CH_SKIP);
  }
  fprintf(stderr, "the CUDA device plugin failed to load: %s: %s\n", weir_strerror(rc), why);
  exit(1);
}

int ch_run_suite(const char *suite, const ch_test *tests) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite(suite, NULL, NULL);
  if (!s) return 1;
  for (const ch_test *t = tests; t->name; t++)
    if (!CU_add_test(s, t->name, t->fn)) return 1;
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  CU_cleanup_registry();
  return failed ? 1 : 0;
}
