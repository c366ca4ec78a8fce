/* The int8 and awq_int4 quant plugins on CUDA against their CPU counterparts (dlopen'ed with a
 * plain host): for every source type the device holds the values the CPU plugin holds
 * (compared through embed; awq_int4 with calibration samples, so with AWQ scales from the same
 * search), the dp4a GEMV path (1-16 tokens) against the CPU plugin's matmul, which quantizes
 * the activations by the same rule, int8's 1.7 matmul_group, the cuBLAS path (more tokens,
 * f16 operands) within f16 rounding, and the errors. Skips (77)
 * without a GPU. */
#include <CUnit/Basic.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"
#include "wt_options.h"

static ch_plugin g_gpu;
#define GQ ((const weir_quant_ops *)g_gpu.ops)

typedef struct cpu_plugin {
  void *dl;
  const weir_plugin_desc *desc;
  const weir_quant_ops *ops;
  void *self;
} cpu_plugin;

static void h_log(void *ctx, weir_log_level lvl, const char *fmt, ...) {
  (void)ctx;
  if (lvl < WEIR_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}
static void *h_alloc(void *ctx, size_t n, size_t align) {
  (void)ctx;
  void *p = NULL;
  return posix_memalign(&p, align < 64 ? 64 : align, n ? n : 1) == 0 ? p : NULL;
}
static void h_free(void *ctx, void *p) {
  (void)ctx;
  free(p);
}
static weir_host g_cpu_host = {.struct_size = sizeof(weir_host), .abi_minor = WEIR_ABI_MINOR,
                               .log = h_log, .alloc = h_alloc, .free = h_free,
                               .option = wt_options_option,
                               .set_error = wt_options_set_error};

static int cpu_open(cpu_plugin *c, const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", ch_plugin_dir(), file);
  c->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!c->dl) return -1;
  weir_plugin_entry_fn e = (weir_plugin_entry_fn)dlsym(c->dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  c->desc = e();
  c->ops = c->desc->ops;
  weir_option_value ov[16];
  memset(ov, 0, sizeof ov);
  for (int i = 0; i < c->desc->num_options && i < 16; i++) {
    ov[i].i = c->desc->options[i].def_int;
    ov[i].f = c->desc->options[i].def_float;
    ov[i].b = c->desc->options[i].def_bool;
    ov[i].s = "";
    if (!strcmp(c->desc->options[i].key, "group_size") && !strcmp(c->desc->name, "int8"))
      ov[i].i = 32; /* the CUDA int8 scheme's groups */
  }
  weir_plugin_args a = {.struct_size = sizeof a, .device = WEIR_DEVICE_CPU, .options = ov,
                        .num_options = c->desc->num_options};
  wt_options_use(c->desc, ov);
  return c->desc->init(&g_cpu_host, &a, &c->self);
}

static void cpu_close(cpu_plugin *c) {
  if (c->self) c->desc->fini(c->self);
  if (c->dl) dlclose(c->dl);
  memset(c, 0, sizeof *c);
}

/* Random source bytes of `type`. */
static unsigned char *source(weir_dtype type, int64_t in, int64_t out) {
  const size_t rb = weir_dtype_row_bytes(type, in);
  unsigned char *buf = calloc((size_t)out, rb);
  for (int64_t r = 0; r < out; r++) {
    unsigned char *row = buf + (size_t)r * rb;
    if (type == WEIR_DTYPE_F32 || type == WEIR_DTYPE_F16 || type == WEIR_DTYPE_BF16) {
      for (int64_t i = 0; i < in; i++) {
        float v = ch_uniform(-1, 1) * (i % 31 == 0 ? 5.0f : 1.0f);
        if (type == WEIR_DTYPE_F32) memcpy(row + 4 * i, &v, 4);
        else {
          uint16_t u = type == WEIR_DTYPE_F16 ? ch_f32_to_f16(v) : weir_f32_to_bf16(v);
          memcpy(row + 2 * i, &u, 2);
        }
      }
      continue;
    }
    const size_t bb = weir_dtype_block_bytes(type);
    for (int64_t b = 0; b < in / 32; b++) {
      unsigned char *blk = row + b * bb;
      for (size_t i = 0; i < bb; i++) blk[i] = (unsigned char)ch_rand_u32();
      uint16_t d = ch_f32_to_f16(ch_uniform(0.002f, 0.05f)), m = ch_f32_to_f16(ch_uniform(-0.4f, 0.1f));
      memcpy(blk, &d, 2);
      if (type == WEIR_DTYPE_Q4_1) memcpy(blk + 2, &m, 2);
    }
  }
  return buf;
}

/* Packs the same source on both plugins (with samples when given) and compares. */
static void compare(const cpu_plugin *cpu, weir_dtype type, int64_t in, int64_t out,
                    const float *samples, int64_t ns) {
  unsigned char *src = source(type, in, out);
  weir_tensor t = {.data = src, .dtype = type, .ndim = 2, .ne = {in, out, 1, 1},
                   .nb = {0, weir_dtype_row_bytes(type, in), 0, 0}};
  weir_quant_pack_args a = {.struct_size = sizeof a, .src = &t, .name = "w",
                            .act_samples = samples, .num_samples = ns, .layer = -1};
  void *wc = NULL, *wg = NULL;
  int rc = cpu->ops->pack(cpu->self, &a, &wc);
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  rc = GQ->pack(g_gpu.self, &a, &wg);
  if (rc != WEIR_OK) fprintf(stderr, "\n  pack: %s (%s)\n", weir_strerror(rc), ch_last_error(&g_gpu));
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  /* the values, through embed */
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)out);
  for (int64_t r = 0; r < out; r++) ids[r] = (int32_t)r;
  float *wcpu = malloc(sizeof(float) * (size_t)(in * out)), *wgpu = malloc(sizeof(float) * (size_t)(in * out));
  cpu->ops->embed(cpu->self, wc, ids, wcpu, out);
  int32_t *dids = ch_dalloc(sizeof(int32_t) * (size_t)out);
  float *dw = ch_dalloc(sizeof(float) * (size_t)(in * out));
  ch_h2d(dids, ids, sizeof(int32_t) * (size_t)out);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, wg, dids, dw, out), WEIR_OK);
  ch_d2h(wgpu, dw, sizeof(float) * (size_t)(in * out));
  double *ref = malloc(sizeof(double) * (size_t)(in * out > 77 * out ? in * out : 77 * out));
  for (int64_t i = 0; i < in * out; i++) ref[i] = wcpu[i];
  double e = ch_rel_err(wgpu, ref, (size_t)(in * out));
  printf("\n  %s %s %lldx%lld%s: values rel err %.3g", g_gpu.desc->name, weir_dtype_name(type),
         (long long)out, (long long)in, samples ? " (AWQ)" : "", e);
  CU_ASSERT(e < 1e-6);
  /* GEMV and GEMM against double products of the CPU plugin's values */
  /* Both schemes quantize the activations for their dp4a GEMVs (1-16 tokens) by the CPU
   * plugins' rule (awq_int4 after the inverse scale), so there the reference is the CPU
   * plugin's own matmul (float sum order only) */
  const int q8act = 1;
  const int64_t gemv_max = 16;
  static const int64_t toks[] = {1, 3, 8, 16, 77};
  float *x = malloc(sizeof(float) * (size_t)(77 * in)), *y = malloc(sizeof(float) * (size_t)(77 * out));
  float *dx = ch_dalloc(sizeof(float) * (size_t)(77 * in)), *dy = ch_dalloc(sizeof(float) * (size_t)(77 * out));
  ch_fill_uniform(x, (size_t)(77 * in), -1, 1);
  ch_h2d(dx, x, sizeof(float) * (size_t)(77 * in));
  for (int ti = 0; ti < 5; ti++) {
    const int64_t n = toks[ti];
    const int f16 = n > gemv_max; /* cuBLAS path: both operands in f16 */
    for (int64_t tk = 0; tk < n; tk++)
      for (int64_t r = 0; r < out; r++) {
        double s = 0;
        for (int64_t k = 0; k < in; k++) {
          float wv = wcpu[r * in + k], xv = x[tk * in + k];
          if (f16) {
            wv = ch_f16_to_f32(ch_f32_to_f16(wv));
            xv = ch_f16_to_f32(ch_f32_to_f16(xv));
          }
          s += (double)wv * xv;
        }
        ref[tk * out + r] = s;
      }
    if (q8act && !f16) {
      CU_ASSERT_EQUAL(cpu->ops->matmul(cpu->self, wc, x, y, n), WEIR_OK);
      for (int64_t i = 0; i < n * out; i++) ref[i] = y[i];
    }
    ch_poison(dy, sizeof(float) * (size_t)(n * out));
    CU_ASSERT_EQUAL(GQ->matmul(g_gpu.self, wg, dx, dy, n), WEIR_OK);
    ch_d2h(y, dy, sizeof(float) * (size_t)(n * out));
    e = ch_rel_err(y, ref, (size_t)(n * out));
    printf("\n    matmul %lld tokens: rel err %.3g", (long long)n, e);
    CU_ASSERT(e < (f16 ? 1e-3 : 1e-5));
  }
  cpu->ops->release(cpu->self, wc);
  GQ->release(g_gpu.self, wg);
  ch_dfree(dids);
  ch_dfree(dw);
  ch_dfree(dx);
  ch_dfree(dy);
  free(ids);
  free(wcpu);
  free(wgpu);
  free(ref);
  free(x);
  free(y);
  free(src);
}

/* ABI 1.7 matmul_group: q/k/v-like weights of different heights (and types) on one input, at
 * 1, 5, 16 tokens, each output against the CPU plugin's matmul of that weight (the dp4a path
 * quantizes the activations by the CPU rule: 1e-5); a batch for cuBLAS (17 tokens) and
 * weights of different widths are NOTSUP (the host then runs separate matmuls), untouched. */
static void group_case(const cpu_plugin *cpu) {
  if (!WEIR_QUANT_HAS_OP(GQ, matmul_group)) {
    printf("\n  %s: no matmul_group", g_gpu.desc->name);
    return;
  }
  const int64_t in = 768, outs[3] = {96, 32, 40};
  const weir_dtype types[3] = {WEIR_DTYPE_Q8_0, WEIR_DTYPE_F16, WEIR_DTYPE_F32};
  void *wc[3], *wg[3];
  unsigned char *src[3];
  float *dy[3];
  for (int i = 0; i < 3; i++) {
    src[i] = source(types[i], in, outs[i]);
    weir_tensor t = {.data = src[i], .dtype = types[i], .ndim = 2, .ne = {in, outs[i], 1, 1},
                     .nb = {0, weir_dtype_row_bytes(types[i], in), 0, 0}};
    weir_quant_pack_args a = {.struct_size = sizeof a, .src = &t, .name = "g", .layer = -1};
    CU_ASSERT_EQUAL_FATAL(cpu->ops->pack(cpu->self, &a, &wc[i]), WEIR_OK);
    CU_ASSERT_EQUAL_FATAL(GQ->pack(g_gpu.self, &a, &wg[i]), WEIR_OK);
    dy[i] = ch_dalloc(sizeof(float) * (size_t)(17 * outs[i]));
  }
  float *x = malloc(sizeof(float) * (size_t)(17 * in)), *y = malloc(sizeof(float) * 17 * 96),
        *yc = malloc(sizeof(float) * 17 * 96);
  double *ref = malloc(sizeof(double) * 17 * 96);
  float *dx = ch_dalloc(sizeof(float) * (size_t)(17 * in));
  ch_fill_uniform(x, (size_t)(17 * in), -1, 1);
  ch_h2d(dx, x, sizeof(float) * (size_t)(17 * in));
  static const int64_t toks[] = {1, 5, 16};
  for (int ti = 0; ti < 3; ti++) {
    const int64_t n = toks[ti];
    for (int i = 0; i < 3; i++) ch_poison(dy[i], sizeof(float) * (size_t)(n * outs[i]));
    CU_ASSERT_EQUAL(GQ->matmul_group(g_gpu.self, (const void *const *)wg, 3, dx, dy, n), WEIR_OK);
    for (int i = 0; i < 3; i++) {
      CU_ASSERT_EQUAL(cpu->ops->matmul(cpu->self, wc[i], x, yc, n), WEIR_OK);
      for (int64_t k = 0; k < n * outs[i]; k++) ref[k] = yc[k];
      ch_d2h(y, dy[i], sizeof(float) * (size_t)(n * outs[i]));
      const double e = ch_rel_err(y, ref, (size_t)(n * outs[i]));
      printf("\n    matmul_group weight %d (%s, %lld rows), %lld tokens: rel err %.3g", i,
             weir_dtype_name(types[i]), (long long)outs[i], (long long)n, e);
      CU_ASSERT(e < 1e-5);
    }
  }
  CU_ASSERT_EQUAL(GQ->matmul_group(g_gpu.self, (const void *const *)wg, 3, dx, dy, 17),
                  WEIR_E_NOTSUP);
  for (int i = 0; i < 3; i++) {
    cpu->ops->release(cpu->self, wc[i]);
    GQ->release(g_gpu.self, wg[i]);
    ch_dfree(dy[i]);
    free(src[i]);
  }
  ch_dfree(dx);
  free(x);
  free(y);
  free(yc);
  free(ref);
}

/* awq_int4's matmul_group: q/k/v packed as one group (with calibration samples: one AWQ
 * scale) run in one launch and give exactly what separate matmuls give (one quantization of
 * x with the shared inverse scale either way), at 1, 7, 16 tokens; weights of two different
 * pack groups are NOTSUP. */
static void group_case_awq(void) {
  CU_ASSERT_FATAL(WEIR_QUANT_HAS_OP(GQ, matmul_group));
  const int64_t in = 512, outs[3] = {128, 32, 32}, ns = 32;
  float *smp = malloc(sizeof(float) * (size_t)(in * ns));
  for (int64_t i = 0; i < in * ns; i++) smp[i] = ch_uniform(-1, 1) * (i % 13 == 2 ? 25.0f : 1.0f);
  unsigned char *src[3];
  weir_tensor t[3];
  weir_quant_pack_args a[3];
  const weir_quant_pack_args *ap[3];
  for (int i = 0; i < 3; i++) {
    src[i] = source(WEIR_DTYPE_F16, in, outs[i]);
    t[i] = (weir_tensor){.data = src[i], .dtype = WEIR_DTYPE_F16, .ndim = 2,
                         .ne = {in, outs[i], 1, 1}, .nb = {0, (size_t)in * 2, 0, 0}};
    a[i] = (weir_quant_pack_args){.struct_size = sizeof a[i], .src = &t[i], .name = "qkv",
                                  .act_samples = smp, .num_samples = ns, .layer = -1};
    ap[i] = &a[i];
  }
  void *wg[3] = {NULL, NULL, NULL}, *other = NULL;
  CU_ASSERT_EQUAL_FATAL(GQ->pack_group(g_gpu.self, ap, 3, wg), WEIR_OK);
  CU_ASSERT_EQUAL_FATAL(GQ->pack(g_gpu.self, &a[1], &other), WEIR_OK);
  float *dx = ch_dalloc(sizeof(float) * (size_t)(16 * in)), *dy[3], *dz[3];
  float *x = malloc(sizeof(float) * (size_t)(16 * in));
  ch_fill_uniform(x, (size_t)(16 * in), -1, 1);
  ch_h2d(dx, x, sizeof(float) * (size_t)(16 * in));
  for (int i = 0; i < 3; i++) {
    dy[i] = ch_dalloc(sizeof(float) * (size_t)(16 * outs[i]));
    dz[i] = ch_dalloc(sizeof(float) * (size_t)(16 * outs[i]));
  }
  float *hy = malloc(sizeof(float) * 16 * 128), *hz = malloc(sizeof(float) * 16 * 128);
  static const int64_t toks[] = {1, 7, 16};
  for (int ti = 0; ti < 3; ti++) {
    const int64_t n = toks[ti];
    for (int i = 0; i < 3; i++) {
      ch_poison(dy[i], sizeof(float) * (size_t)(n * outs[i]));
      CU_ASSERT_EQUAL(GQ->matmul(g_gpu.self, wg[i], dx, dz[i], n), WEIR_OK);
    }
    CU_ASSERT_EQUAL(GQ->matmul_group(g_gpu.self, (const void *const *)wg, 3, dx, dy, n), WEIR_OK);
    for (int i = 0; i < 3; i++) {
      ch_d2h(hy, dy[i], sizeof(float) * (size_t)(n * outs[i]));
      ch_d2h(hz, dz[i], sizeof(float) * (size_t)(n * outs[i]));
      const int same = !memcmp(hy, hz, sizeof(float) * (size_t)(n * outs[i]));
      printf("\n    awq matmul_group weight %d, %lld tokens: %s", i, (long long)n,
             same ? "= matmul, bit for bit" : "DIFFERS from matmul");
      CU_ASSERT(same);
    }
  }
  void *mixed[2] = {wg[0], other};
  CU_ASSERT_EQUAL(GQ->matmul_group(g_gpu.self, (const void *const *)mixed, 2, dx, dy, 1),
                  WEIR_E_NOTSUP);
  GQ->release(g_gpu.self, other);
  for (int i = 0; i < 3; i++) {
    GQ->release(g_gpu.self, wg[i]);
    ch_dfree(dy[i]);
    ch_dfree(dz[i]);
    free(src[i]);
  }
  ch_dfree(dx);
  free(x);
  free(hy);
  free(hz);
  free(smp);
}

static const weir_dtype k_types[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16,
                                     WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1};

static void run_plugin(const char *gpu_file, const char *cpu_file, int awq) {
  cpu_plugin cpu;
  memset(&cpu, 0, sizeof cpu);
  int rc = ch_plugin_open(&g_gpu, gpu_file);
  if (rc != WEIR_OK) fprintf(stderr, "\n  %s: %s (%s)\n", gpu_file, weir_strerror(rc), ch_last_error(&g_gpu));
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  CU_ASSERT_EQUAL_FATAL(cpu_open(&cpu, cpu_file), WEIR_OK);
  for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
    compare(&cpu, k_types[i], 512, 72, NULL, 0);
  compare(&cpu, WEIR_DTYPE_F16, 2048, 256, NULL, 0);
  if (!awq) group_case(&cpu);
  else group_case_awq();
  if (awq) {
    const int64_t in = 512, ns = 40;
    float *s = malloc(sizeof(float) * (size_t)(in * ns));
    for (int64_t i = 0; i < in * ns; i++) s[i] = ch_uniform(-1, 1) * (i % 13 == 2 ? 25.0f : 1.0f);
    compare(&cpu, WEIR_DTYPE_F16, in, 72, s, ns);
    compare(&cpu, WEIR_DTYPE_BF16, in, 40, s, ns);
    free(s);
  }
  /* errors: a type it does not take; an id outside the table (reported by the next embed) */
  int32_t dummy[64] = {0};
  weir_tensor t = {.data = dummy, .dtype = WEIR_DTYPE_I32, .ndim = 2, .ne = {8, 8, 1, 1}};
  weir_quant_pack_args a = {.struct_size = sizeof a, .src = &t, .name = "bad"};
  void *w = NULL;
  CU_ASSERT_EQUAL(GQ->pack(g_gpu.self, &a, &w), WEIR_E_NOTSUP);
  unsigned char *src = source(WEIR_DTYPE_F32, 64, 10);
  weir_tensor t2 = {.data = src, .dtype = WEIR_DTYPE_F32, .ndim = 2, .ne = {64, 10, 1, 1},
                    .nb = {4, 256, 0, 0}};
  a.src = &t2;
  CU_ASSERT_EQUAL_FATAL(GQ->pack(g_gpu.self, &a, &w), WEIR_OK);
  int32_t ids[2] = {3, 10};
  int32_t *dids = ch_dalloc(sizeof ids);
  float *dout = ch_dalloc(2 * 64 * 4);
  ch_h2d(dids, ids, sizeof ids);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, w, dids, dout, 2), WEIR_OK);
  CU_ASSERT_EQUAL(CH_DEV->synchronize(ch_dev.self), WEIR_OK);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, w, dids, dout, 1), WEIR_E_RANGE);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, w, dids, dout, 1), WEIR_OK);
  GQ->release(g_gpu.self, w);
  ch_dfree(dids);
  ch_dfree(dout);
  free(src);
  cpu_close(&cpu);
  ch_plugin_close(&g_gpu);
}

static void test_int8(void) { run_plugin("weir_quant_int8_cuda.so", "weir_quant_int8.so", 0); }
static void test_awq_int4(void) {
  run_plugin("weir_quant_awq_int4_cuda.so", "weir_quant_awq_int4.so", 1);
}

int main(void) {
  ch_device_open_or_skip();
  ch_seed_from_env(0x5eed1144u);
  static const ch_test tests[] = {
      {"int8 on CUDA = the CPU int8 plugin", test_int8},
      {"awq_int4 on CUDA = the CPU awq_int4 plugin", test_awq_int4},
      {NULL, NULL},
  };
  int rc = ch_run_suite("cuda_quant_int", tests);
  ch_device_close();
  return rc;
}
