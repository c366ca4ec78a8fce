/* Micro-benchmark of quant/awq_int4 next to quant/int8 (not a test): both plugins are
 * dlopen'ed from the build's plugin directory and run on the same random source matrices, the
 * 1.1B Llama linear shapes (out x in). For each variant and 1 and 2 threads it prints:
 *   GEMV (1 token): microseconds per call and GB/s of packed weights streamed (matrices are
 *     packed in enough copies to exceed the last-level cache, used in turn);
 *   GEMM (512 tokens): GFLOP/s (2 * out * in * 512 per call);
 * with one thread, times are the thread's CPU time (robust to a loaded machine), with two they
 * are wall-clock time; then the whole-model decode estimate from the GEMV times.
 *
 * usage: bench_awq [seconds per figure, default 0.3] [plugin dir] [MiB of copies, def. 192] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weir/weir.h"
#include "wt_bench.h"
#include "wt_pool.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

#define GEMM_TOKENS 512
static size_t STREAM_BYTES = (size_t)192 << 20;

typedef struct variant {
  const char *label, *plugin;
  weir_dtype src;
  int64_t group; /* -1: the plugin's default */
} variant;

static const variant k_variants[] = {
    {"int8 q8_0-src g32", "int8", WEIR_DTYPE_Q8_0, 32},
    {"awq_int4 f16-src g128", "awq_int4", WEIR_DTYPE_F16, 128},
    {"awq_int4 f16-src g32", "awq_int4", WEIR_DTYPE_F16, 32},
    {"awq_int4 q4_0-src", "awq_int4", WEIR_DTYPE_Q4_0, 32},
    {"awq_int4 q4_1-src", "awq_int4", WEIR_DTYPE_Q4_1, 32},
};
#define NVAR (int)(sizeof k_variants / sizeof k_variants[0])

/* Random source bytes of a dtype: f16 values in about [-0.06, 0.06]; block types with such
 * scales and random quants. */
static void fill_source(weir_dtype t, uint8_t *dst, int64_t n) {
  if (t == WEIR_DTYPE_F16) {
    uint16_t *s = (uint16_t *)dst;
    for (int64_t i = 0; i < n; i++)
      s[i] = (uint16_t)((rnd() & 0x83ff) | ((uint16_t)(6 + rnd() % 5) << 10));
    return;
  }
  size_t bb = weir_dtype_block_bytes(t);
  for (int64_t b = 0; b < n / 32; b++) {
    uint8_t *blk = dst + b * bb;
    for (size_t i = 0; i < bb; i++) blk[i] = (uint8_t)rnd();
    uint16_t d = (uint16_t)(0x1c00 | (rnd() & 0x3ff)); /* ~2^-8 */
    uint16_t m = (uint16_t)(0xa400 | (rnd() & 0x3ff)); /* ~ -2^-6 */
    memcpy(blk, &d, 2);
    if (t == WEIR_DTYPE_Q4_1) memcpy(blk + 2, &m, 2);
  }
}

static double g_gemv_us[NVAR][2][WT_NSHAPES];

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 0.3;
  const char *dir = argc > 2 ? argv[2] : WEIR_BENCH_PLUGIN_DIR;
  if (secs <= 0) secs = 0.3;
  if (argc > 3) STREAM_BYTES = (size_t)atol(argv[3]) << 20;
  const char *isa = getenv("WEIR_CPU_ISA");
  printf("bench_awq: GEMV streams >= %zu MiB of copies, GEMM %d tokens, %.2f s per figure, "
         "WEIR_CPU_ISA=%s\n", STREAM_BYTES >> 20, GEMM_TOKENS, secs, isa ? isa : "(unset)");
  int64_t max_elems = 0;
  for (int s = 0; s < WT_NSHAPES; s++)
    if (wt_shapes_1b1[s].rows * wt_shapes_1b1[s].cols > max_elems)
      max_elems = wt_shapes_1b1[s].rows * wt_shapes_1b1[s].cols;
  uint8_t *src = malloc(2 * (size_t)max_elems);
  float *x = malloc(sizeof(float) * GEMM_TOKENS * 5632);
  float *y = malloc(sizeof(float) * GEMM_TOKENS * 32000);
  if (!src || !x || !y) return 1;
  for (int64_t i = 0; i < GEMM_TOKENS * 5632; i++)
    x[i] = (float)((double)(rnd() >> 11) * 0x1.0p-52 - 1.0);

  for (int th = 1; th <= 2; th++) {
    wt_pool *pool = wt_pool_create(th);
    weir_host host = wt_pool_host(pool);
    for (int vi = 0; vi < NVAR; vi++) {
      const variant *v = &k_variants[vi];
      wt_bench_plugin p;
      memset(&p, 0, sizeof p);
      if (wt_bench_load(&p, dir, v->plugin, v->group, &host) != 0) return 1;
      for (int s = 0; s < WT_NSHAPES; s++) {
        const wt_shape *sh = &wt_shapes_1b1[s];
        fill_source(v->src, src, sh->rows * sh->cols);
        weir_tensor t = {.data = src, .dtype = v->src, .ndim = 2, .ne = {sh->cols, sh->rows, 1, 1},
                         .nb = {0, weir_dtype_row_bytes(v->src, sh->cols), 0, 0}};
        weir_quant_pack_args pa = {.struct_size = sizeof pa, .src = &t, .name = sh->what};
        void *w0 = NULL;
        if (p.ops->pack(p.self, &pa, &w0) != WEIR_OK) return 1;
        size_t wb = p.ops->weight_bytes(p.self, w0);
        int copies = (int)((STREAM_BYTES + wb - 1) / wb);
        if (copies < 1) copies = 1;
        void **ws = calloc((size_t)copies, sizeof(void *));
        ws[0] = w0;
        for (int c = 1; c < copies; c++)
          if (p.ops->pack(p.self, &pa, &ws[c]) != WEIR_OK) return 1;
        for (int c = 0; c < copies; c++) p.ops->matmul(p.self, ws[c], x, y, 1);
        long calls = 0;
        double t0 = wt_now(), c0 = wt_cpu_now(), el;
        do {
          for (int c = 0; c < copies; c++) p.ops->matmul(p.self, ws[c], x, y, 1);
          calls += copies;
          el = wt_now() - t0;
        } while (el < secs);
        double us = el / calls * 1e6, cpu_us = (wt_cpu_now() - c0) / calls * 1e6;
        if (th == 1) us = cpu_us;
        g_gemv_us[vi][th - 1][s] = us;
        p.ops->matmul(p.self, ws[0], x, y, 16);
        long gcalls = 0;
        double g0 = th == 1 ? wt_cpu_now() : wt_now(), gel;
        do {
          p.ops->matmul(p.self, ws[gcalls % copies], x, y, GEMM_TOKENS);
          gcalls++;
          gel = (th == 1 ? wt_cpu_now() : wt_now()) - g0;
        } while (gel < secs);
        double gflops = 2.0 * sh->rows * sh->cols * GEMM_TOKENS * gcalls / gel * 1e-9;
        printf("%-22s threads %d  %-22s %6.2f MiB  GEMV %8.1f us %6.2f GB/s | GEMM512 %7.1f "
               "GFLOP/s\n", v->label, th, sh->what, wb / 1048576.0, us,
               wb / (us * 1e-6) * 1e-9, gflops);
        fflush(stdout);
        for (int c = 0; c < copies; c++) p.ops->release(p.self, ws[c]);
        free(ws);
      }
      wt_bench_unload(&p);
    }
    wt_pool_destroy(pool);
  }
  printf("\nwhole-model decode estimate (%d layers x q,k,v,o,gate,up,down + output; linears "
         "only):\n", WT_LAYERS_1B1);
  for (int th = 1; th <= 2; th++)
    for (int vi = 0; vi < NVAR; vi++) {
      double tot = 0;
      for (int s = 0; s < WT_NSHAPES; s++)
        tot += g_gemv_us[vi][th - 1][s] *
               (wt_shapes_1b1[s].per_layer ? (double)WT_LAYERS_1B1 * wt_shapes_1b1[s].per_layer : 1.0);
      printf("  threads %d  %-22s %.1f ms/token (%.2f tokens/s)\n", th, k_variants[vi].label,
             tot * 1e-3, 1e6 / tot);
    }
  free(src);
  free(x);
  free(y);
  return 0;
}
