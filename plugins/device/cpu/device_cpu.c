/* The CPU device plugin: memory is host memory (64-byte aligned), copies are memcpy, the
 * instance's operations run synchronously on the calling thread plus the host's
 * parallel_for pool, so synchronize has nothing to wait for. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "add.h"
#include "argmax.h"
#include "cpu_isa.h"
#include "encoder.h"
#include "get_rows.h"
#include "parallel.h"
#include "rms_norm.h"
#include "families.h"
#include "rope.h"
#include "swiglu.h"
#include "weir/device.h"

typedef struct device_cpu {
  const weir_host *host;
  int64_t parallel_min;
  /* rope / rope_freqs: the step's cos/sin, computed by the first call of a step (layer 0's
   * q) and read by the rest (kernels/cpu/rope.h). One thread drives an instance at a time. */
  weir_rope_cache rope_cache;
} device_cpu;

static const weir_option_desc k_options[] = {
    {.key = "parallel_min",
     .type = WEIR_OPT_INT,
     .help = "elements below which an elementwise op runs on one thread (the CPU quant "
             "plugins scale it for their matmul and pack)",
     .def_int = WEIR_CPU_PARALLEL_MIN,
     .min = 1,
     .max = 1e12},
};

static int cpu_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  device_cpu *d = calloc(1, sizeof(*d));
  if (!d) return WEIR_E_NOMEM;
  (void)args;
  d->host = host;
  int rc = weir_option_int(host, "parallel_min", &d->parallel_min);
  if (rc != WEIR_OK) {
    free(d);
    return rc;
  }
  *self = d;
  return WEIR_OK;
}

static void cpu_fini(void *self) {
  device_cpu *d = self;
  if (!d) return;
  weir_rope_cache_free(&d->rope_cache);
  free(d);
}

static int threads_of(const device_cpu *d) {
  if (!d->host || !d->host->num_threads) return 1;
  int n = d->host->num_threads(d->host->ctx);
  return n < 1 ? 1 : n;
}

/* Runs fn over [0, n) items of `work_per_item` elements each, in parallel when the total is
 * large enough to pay for it. */
static void run_par(device_cpu *d, int64_t n, int64_t work_per_item, weir_parallel_fn fn,
                    void *arg) {
  if (n <= 0) return;
  int threads = threads_of(d);
  if (threads <= 1 || !d->host->parallel_for || n * work_per_item < d->parallel_min || n < 2) {
    fn(arg, 0, n, 0);
    return;
  }
  int64_t grain = d->parallel_min / (work_per_item > 0 ? work_per_item : 1);
  if (grain < 1) grain = 1;
  int64_t even = (n + threads - 1) / threads;
  if (grain > even) grain = even;
  d->host->parallel_for(d->host->ctx, n, grain, fn, arg);
}

/* Reads MemTotal / MemAvailable (kB) from /proc/meminfo; zeros when unreadable. */
static void read_meminfo(uint64_t *total, uint64_t *avail) {
  *total = *avail = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    unsigned long long kb;
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = (uint64_t)kb * 1024;
    else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = (uint64_t)kb * 1024;
  }
  fclose(f);
}

static int cpu_info(void *self, weir_device_info *out) {
  device_cpu *d = self;
  if (!out) return WEIR_E_INVAL;
  weir_device_info info = {0};
  info.struct_size = sizeof info;
  const char *isa = "scalar";
  switch (weir_cpu_isa()) {
  case WEIR_CPU_ISA_AVX512: isa = "AVX-512"; break;
  case WEIR_CPU_ISA_AVX2: isa = "AVX2"; break;
  default: break;
  }
  int threads = threads_of(d);
  snprintf(info.name, sizeof info.name, "cpu (%s, %d thread%s)", isa, threads,
           threads == 1 ? "" : "s");
  read_meminfo(&info.total_memory, &info.free_memory);
  /* Copy no more than the caller's struct holds (it may be an older, shorter one). */
  size_t n = out->struct_size && out->struct_size < sizeof info ? out->struct_size : sizeof info;
  memcpy(out, &info, n);
  out->struct_size = (uint32_t)n;
  return WEIR_OK;
}

/* Allocations at least this big (weights, the KV pool) are 2 MiB aligned and asked to be
 * backed by transparent huge pages: streaming gigabytes of weights per decode step through
 * 4 KiB pages costs a TLB miss every page. Only the whole huge pages inside the allocation are
 * advised: a huge page faulted in for the last partial one would make its unused rest
 * resident (a 6.2 MiB FFN matrix would hold 8 MiB; 120 MiB over a 1.1B Q4_K_M model). */
#define HUGE_ALLOC_MIN ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

static int cpu_alloc(void *self, size_t size, void **ptr) {
  (void)self;
  if (!ptr) return WEIR_E_INVAL;
  void *p = NULL;
  size_t align = size >= HUGE_ALLOC_MIN ? HUGE_PAGE : 64;
  /* Rounded up to whole cache lines so SIMD tails never straddle into a neighbour. */
  size_t sz = (size + 63) & ~(size_t)63;
  if (sz < size) return WEIR_E_NOMEM;
  if (posix_memalign(&p, align, sz ? sz : 64) != 0) return WEIR_E_NOMEM;
#ifdef MADV_HUGEPAGE
  /* Advisory: where THP is off this fails harmlessly. */
  if (align == HUGE_PAGE) (void)madvise(p, sz & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
  *ptr = p;
  return WEIR_OK;
}

static void cpu_free(void *self, void *ptr) {
  (void)self;
  free(ptr);
}

static int cpu_copy(void *self, void *dst, const void *src, size_t size) {
  (void)self;
  if (size == 0) return WEIR_OK;
  if (!dst || !src) return WEIR_E_INVAL;
  memmove(dst, src, size);
  return WEIR_OK;
}

static int cpu_memset(void *self, void *dst, int value, size_t size) {
  (void)self;
  if (size == 0) return WEIR_OK;
  if (!dst) return WEIR_E_INVAL;
  memset(dst, value, size);
  return WEIR_OK;
}

static int cpu_synchronize(void *self) {
  (void)self;
  return WEIR_OK;
}

/* ---- elementwise ops: each packs its arguments and splits over rows or elements -------- */

typedef struct ew_args {
  float *out;
  float *res; /* add_rms_norm's residual, updated in place */
  const float *a, *b, *c;
  const int32_t *idx;
  int64_t dim;
  float eps;
  int32_t n_heads, head_dim, rot_dim;
  float base, scale;
  int style;
  int failed;
  weir_rope_slot *slot; /* rope: the step's table, or NULL for the direct kernels */
  int fill;             /* rope: compute the table's rows first */
} ew_args;


static void rms_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_rms_norm_rows(x->out, x->a, x->b, b, e, x->dim, x->eps);
}

static int cpu_rms_norm(void *self, float *out, const float *x, const float *weight,
                        int64_t rows, int64_t dim, float eps) {
  if (rows < 0 || dim <= 0 || !out || !x || !weight) return rows == 0 ? WEIR_OK : WEIR_E_INVAL;
  ew_args a = {.out = out, .a = x, .b = weight, .dim = dim, .eps = eps};
  run_par(self, rows, dim, rms_chunk, &a);
  return WEIR_OK;
}

static void rope_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  if (x->slot) {
    if (x->fill) weir_rope_slot_fill(x->slot, b, e);
    weir_rope_apply(x->out, x->slot, b, e, x->n_heads, x->head_dim, x->style);
  } else {
    weir_rope_rows(x->out, x->idx, b, e, x->n_heads, x->head_dim, x->rot_dim, x->base,
                   x->scale, x->style);
  }
}

/* Runs a rope over its tokens with the step's table when it can have one. */
static void rope_run(device_cpu *d, ew_args *a, int64_t n_tokens, const weir_rope_params *p,
                     weir_parallel_fn fn) {
  a->slot = weir_rope_cache_get(&d->rope_cache, a->idx, n_tokens, p, &a->fill);
  /* Cos/sin per pair cost about as much as rotating a few heads: weigh tokens by that when
   * they are computed here. */
  const int trig = !a->slot || a->fill;
  int64_t per_token = (int64_t)a->n_heads * a->rot_dim + (trig ? 8 * a->rot_dim : 0);
  run_par(d, n_tokens, per_token, fn, a);
  if (a->slot && a->fill) weir_rope_slot_done(a->slot);
}

static int cpu_rope(void *self, float *x, const int32_t *positions, int64_t n_tokens,
                    int32_t n_heads, int32_t head_dim, int32_t rot_dim, float freq_base,
                    float freq_scale, weir_rope_style style) {
  if (n_tokens == 0) return WEIR_OK;
  if (n_tokens < 0 || !x || !positions || n_heads <= 0 || head_dim <= 0 || rot_dim < 0 ||
      rot_dim > head_dim || rot_dim % 2 != 0 ||
      (style != WEIR_ROPE_NORM && style != WEIR_ROPE_NEOX))
    return WEIR_E_INVAL;
  ew_args a = {.out = x, .idx = positions, .n_heads = n_heads, .head_dim = head_dim,
               .rot_dim = rot_dim, .base = freq_base, .scale = freq_scale, .style = (int)style};
  const weir_rope_params p = {.rot_dim = rot_dim, .freq_base = freq_base,
                              .freq_scale = freq_scale};
  rope_run(self, &a, n_tokens, &p, rope_chunk);
  return WEIR_OK;
}

static void swiglu_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_swiglu(x->out + b, x->a + b, x->b + b, e - b);
}

static int cpu_swiglu(void *self, float *out, const float *gate, const float *up, int64_t n) {
  if (n == 0) return WEIR_OK;
  if (n < 0 || !out || !gate || !up) return WEIR_E_INVAL;
  ew_args a = {.out = out, .a = gate, .b = up};
  /* expf makes an element a few times dearer than an add. */
  run_par(self, n, 4, swiglu_chunk, &a);
  return WEIR_OK;
}

static void add_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_add(x->out + b, x->a + b, x->b + b, e - b);
}

static int cpu_add(void *self, float *out, const float *a, const float *b, int64_t n) {
  if (n == 0) return WEIR_OK;
  if (n < 0 || !out || !a || !b) return WEIR_E_INVAL;
  ew_args x = {.out = out, .a = a, .b = b};
  run_par(self, n, 1, add_chunk, &x);
  return WEIR_OK;
}

/* ABI 1.7: residual add + RMSNorm row by row, so each row is normalised while its sums are
 * still in cache. The same add and rms_norm kernels as the separate ops, so the values are
 * bit-identical to add followed by rms_norm. */
static void add_rms_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  float *res = x->res;
  for (int64_t r = b; r < e; r++) {
    weir_add(res + r * x->dim, res + r * x->dim, x->a + r * x->dim, x->dim);
    weir_rms_norm_rows(x->out, res, x->b, r, r + 1, x->dim, x->eps);
  }
}

static int cpu_add_rms_norm(void *self, float *out, float *residual, const float *x,
                            const float *weight, int64_t rows, int64_t dim, float eps) {
  if (rows == 0) return WEIR_OK;
  if (rows < 0 || dim <= 0 || !out || !residual || !x || !weight) return WEIR_E_INVAL;
  ew_args a = {.out = out, .a = x, .b = weight, .res = residual, .dim = dim, .eps = eps};
  run_par(self, rows, 2 * dim, add_rms_chunk, &a);
  return WEIR_OK;
}

/* ABI 1.8: greedy picks, the engine's rule (kernels/cpu/argmax.h: strict >, so the first of
 * equal largest values wins and NaN or -inf never does), vectorised with the top probability
 * on the shared vector exp. The engine picks its greedy verification rows and the draft
 * model's greedy drafts with it on this device too (docs/engine.md, *Greedy picks*), and it
 * is the reference the CUDA kernel is checked against (tests/cuda/cpu_shim/test_ops_shim.cpp).
 * One thread: a step has a few rows of a few thousand floats (about a microsecond each). */
static int cpu_argmax_rows(void *self, int32_t *out, float *prob, const float *x, int64_t rows,
                           int64_t n, const int32_t *ids, int32_t fallback) {
  (void)self;
  if (rows < 0 || n <= 0 || !out || !x) return WEIR_E_INVAL;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t bi = weir_argmax_f32(x + r * n, n, prob ? prob + r : NULL);
    out[r] = bi < 0 ? fallback : ids ? ids[bi] : (int32_t)bi;
  }
  return WEIR_OK;
}

static void bias_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_add_bias_rows(x->out, x->a, b, e, x->dim);
}

static int cpu_add_bias(void *self, float *x, const float *bias, int64_t rows, int64_t dim) {
  if (rows == 0 || dim == 0) return WEIR_OK;
  if (rows < 0 || dim < 0 || !x || !bias) return WEIR_E_INVAL;
  ew_args a = {.out = x, .a = bias, .dim = dim};
  run_par(self, rows, dim, bias_chunk, &a);
  return WEIR_OK;
}

static void rows_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  if (weir_get_rows(x->out, x->a, x->idx, b, e, x->dim, INT64_MAX) != 0)
    __atomic_store_n(&x->failed, 1, __ATOMIC_RELAXED);
}

static int cpu_get_rows(void *self, float *out, const float *x, const int32_t *rows, int64_t n,
                        int64_t dim) {
  if (n == 0 || dim == 0) return WEIR_OK;
  if (n < 0 || dim < 0 || !out || !x || !rows) return WEIR_E_INVAL;
  ew_args a = {.out = out, .a = x, .idx = rows, .dim = dim};
  run_par(self, n, dim, rows_chunk, &a);
  return a.failed ? WEIR_E_RANGE : WEIR_OK;
}

/* ---- ABI 1.5: the model families' operations ---- */

static void rope_freqs_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  if (x->slot) {
    if (x->fill) weir_rope_slot_fill(x->slot, b, e);
    weir_rope_apply(x->out, x->slot, b, e, x->n_heads, x->head_dim, x->style);
  } else {
    weir_rope_rows_freqs(x->out, x->idx, b, e, x->n_heads, x->head_dim, x->rot_dim, x->b,
                         x->scale, x->style);
  }
}

static int cpu_rope_freqs(void *self, float *x, const int32_t *positions, int64_t n_tokens,
                          int32_t n_heads, int32_t head_dim, int32_t rot_dim,
                          const float *inv_freq, float mscale, weir_rope_style style) {
  if (n_tokens == 0) return WEIR_OK;
  if (n_tokens < 0 || !x || !positions || !inv_freq || n_heads <= 0 || head_dim <= 0 ||
      rot_dim < 0 || rot_dim > head_dim || rot_dim % 2 != 0 ||
      (style != WEIR_ROPE_NORM && style != WEIR_ROPE_NEOX))
    return WEIR_E_INVAL;
  ew_args a = {.out = x, .idx = positions, .b = inv_freq, .n_heads = n_heads,
               .head_dim = head_dim, .rot_dim = rot_dim, .scale = mscale, .style = (int)style};
  const weir_rope_params p = {.rot_dim = rot_dim, .inv_freq = inv_freq, .mscale = mscale};
  rope_run(self, &a, n_tokens, &p, rope_freqs_chunk);
  return WEIR_OK;
}

static void geglu_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_geglu(x->out + b, x->a + b, x->b + b, e - b);
}

static int cpu_geglu(void *self, float *out, const float *gate, const float *up, int64_t n) {
  if (n == 0) return WEIR_OK;
  if (n < 0 || !out || !gate || !up) return WEIR_E_INVAL;
  ew_args a = {.out = out, .a = gate, .b = up};
  run_par(self, n, 4, geglu_chunk, &a);
  return WEIR_OK;
}

static void scale_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_scale(x->out + b, x->scale, e - b);
}

static int cpu_scale(void *self, float *x, float s, int64_t n) {
  if (n == 0) return WEIR_OK;
  if (n < 0 || !x) return WEIR_E_INVAL;
  ew_args a = {.out = x, .scale = s};
  run_par(self, n, 1, scale_chunk, &a);
  return WEIR_OK;
}

static void softcap_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_softcap(x->out + b, x->scale, e - b);
}

static int cpu_softcap(void *self, float *x, float cap, int64_t n) {
  if (n == 0) return WEIR_OK;
  if (n < 0 || !x || !(cap > 0.0f)) return WEIR_E_INVAL;
  ew_args a = {.out = x, .scale = cap};
  run_par(self, n, 4, softcap_chunk, &a);
  return WEIR_OK;
}

/* ---- Encoders (ABI 1.6) ---- */

static void layer_norm_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_layer_norm_rows(x->out, x->a, x->b, x->c, b, e, x->dim, x->eps);
}

static int cpu_layer_norm(void *self, float *out, const float *x, const float *weight,
                          const float *bias, int64_t rows, int64_t dim, float eps) {
  if (rows == 0) return WEIR_OK;
  if (rows < 0 || dim <= 0 || !out || !x || !weight) return WEIR_E_INVAL;
  ew_args a = {.out = out, .a = x, .b = weight, .c = bias, .dim = dim, .eps = eps};
  run_par(self, rows, dim, layer_norm_chunk, &a);
  return WEIR_OK;
}

static void gelu_chunk(void *arg, int64_t b, int64_t e, int t) {
  (void)t;
  ew_args *x = arg;
  weir_gelu_erf(x->out + b, x->a + b, e - b);
}

static int cpu_gelu(void *self, float *out, const float *x, int64_t n) {
  if (n == 0) return WEIR_OK;
  if (n < 0 || !out || !x) return WEIR_E_INVAL;
  ew_args a = {.out = out, .a = x};
  run_par(self, n, 4, gelu_chunk, &a);
  return WEIR_OK;
}

typedef struct attn_full_args {
  float *out, *scores; /* scores: [threads][n] */
  const float *q, *k, *v;
  int64_t n;
  int32_t n_heads, n_kv_heads, head_dim;
  float scale;
} attn_full_args;

/* Items are (head, query token) pairs, head-major. */
static void attn_full_chunk(void *arg, int64_t b, int64_t e, int t) {
  attn_full_args *x = arg;
  for (int64_t it = b; it < e; it++) {
    const int32_t h = (int32_t)(it / x->n);
    const int64_t i = it % x->n;
    weir_attention_full_rows(x->out, x->q, x->k, x->v, x->n, x->n_heads, x->n_kv_heads,
                             x->head_dim, x->scale, h, i, i + 1, x->scores + (int64_t)t * x->n);
  }
}

static int cpu_attention_full(void *self, float *out, const float *q, const float *k,
                              const float *v, int64_t n_tokens, int32_t n_heads,
                              int32_t n_kv_heads, int32_t head_dim, float scale) {
  if (n_tokens == 0) return WEIR_OK;
  if (n_tokens < 0 || !out || !q || !k || !v || n_heads <= 0 || n_kv_heads <= 0 ||
      head_dim <= 0 || n_heads % n_kv_heads != 0)
    return WEIR_E_INVAL;
  const int threads = threads_of(self);
  attn_full_args a = {.out = out, .q = q, .k = k, .v = v, .n = n_tokens, .n_heads = n_heads,
                      .n_kv_heads = n_kv_heads, .head_dim = head_dim, .scale = scale};
  a.scores = malloc(sizeof(float) * (size_t)n_tokens * (size_t)threads);
  if (!a.scores) return WEIR_E_NOMEM;
  run_par(self, n_tokens * n_heads, n_tokens * head_dim * 2, attn_full_chunk, &a);
  free(a.scores);
  return WEIR_OK;
}

/* "cpu.parallel_min" (const int64_t *): the one threshold the other CPU plugins of this
 * device read through host->device_handle (kernels/cpu/parallel.h). */
static void *cpu_native_handle(void *self, const char *name) {
  device_cpu *d = self;
  return name && !strcmp(name, WEIR_CPU_PARALLEL_MIN_HANDLE) ? &d->parallel_min : NULL;
}

static const weir_device_ops k_ops = {
    .struct_size = sizeof(weir_device_ops),
    .info = cpu_info,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .memset = cpu_memset,
    .synchronize = cpu_synchronize,
    .rms_norm = cpu_rms_norm,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .add_bias = cpu_add_bias,
    .get_rows = cpu_get_rows,
    .native_handle = cpu_native_handle,
    .rope_freqs = cpu_rope_freqs,
    .geglu = cpu_geglu,
    .scale = cpu_scale,
    .layer_norm = cpu_layer_norm,
    .gelu = cpu_gelu,
    .attention_full = cpu_attention_full,
    .softcap = cpu_softcap,
    .add_rms_norm = cpu_add_rms_norm,
    .argmax_rows = cpu_argmax_rows,
};

/* The device it provides, by name (ABI 1.5; the host reads these instead of the 1.0 `devices` bit). */
static const char *const k_device_names[] = {"cpu", NULL};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_DEVICE,
    .name = "cpu",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "host CPU: aligned host memory, SIMD elementwise ops (scalar/AVX2/AVX-512)",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = WEIR_DTYPE_BIT(WEIR_DTYPE_F32),
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = cpu_init,
    .fini = cpu_fini,
    .ops = &k_ops,
    .device_names = k_device_names,
};

WEIR_PLUGIN_EXPORT(k_desc)
