/* Micro-benchmark of quant/int8 next to quant/fp16 (not a test): both plugins are dlopen'ed
 * from the build's plugin directory and run on the same random F16 source matrices, the
 * TinyLlama-1.1B linear shapes (out x in). For each plugin and 1 and 2 threads it prints:
 *   GEMV (1 token): microseconds per call, GB/s of packed weights streamed, and calls/s;
 *     every matrix is packed in enough copies to exceed the last-level cache, used in turn,
 *     so the weights come from memory as in a real decode step;
 *   GEMM (512 tokens): GFLOP/s (2 * out * in * 512 per call);
 * with one thread, times are the thread's CPU time (robust to a loaded machine), with two
 * they are wall-clock time;
 * then a whole-model decode estimate: 22 layers of (q, k, v, o, gate, up, down) plus the
 * output matrix, from the measured GEMV times (tokens/s if the linears were all there is).
 *
 * usage: bench_int8 [seconds per measurement, default 0.3] [plugin dir] [MiB of copies,
 *        default 192; 0 = one copy, cache-hot when it fits] */
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
/* Packed copies of a matrix add up to at least this many bytes (> the 32 MiB L3 here). */
static size_t STREAM_BYTES = (size_t)192 << 20;

/* Results [plugin][threads-1][shape]. */
static double g_gemv_us[2][2][WT_NSHAPES];

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 0.3;
  const char *dir = argc > 2 ? argv[2] : WEIR_BENCH_PLUGIN_DIR;
  if (secs <= 0) secs = 0.3;
  if (argc > 3) STREAM_BYTES = (size_t)atol(argv[3]) << 20;
  static const char *const names[2] = {"fp16", "int8"};
  const char *isa = getenv("WEIR_CPU_ISA");
  printf("bench_int8: F16 source matrices, GEMV streams >= %zu MiB of copies, GEMM %d tokens, "
         "%.2f s per figure, WEIR_CPU_ISA=%s\n",
         STREAM_BYTES >> 20, GEMM_TOKENS, secs, isa ? isa : "(unset)");
  int64_t max_elems = 0;
  for (int s = 0; s < WT_NSHAPES; s++)
    if (wt_shapes_1b1[s].rows * wt_shapes_1b1[s].cols > max_elems)
      max_elems = wt_shapes_1b1[s].rows * wt_shapes_1b1[s].cols;
  uint16_t *src = malloc(sizeof(uint16_t) * max_elems);
  float *x = malloc(sizeof(float) * GEMM_TOKENS * 5632);
  float *y = malloc(sizeof(float) * GEMM_TOKENS * 32000);
  if (!src || !x || !y) return 1;
  /* f16 values in about [-0.06, 0.06]: random mantissa and sign, exponents 2^-9..2^-5 */
  for (int64_t i = 0; i < max_elems; i++)
    src[i] = (uint16_t)((rnd() & 0x83ff) | ((uint16_t)(6 + rnd() % 5) << 10));
  for (int64_t i = 0; i < GEMM_TOKENS * 5632; i++)
    x[i] = (float)((double)(rnd() >> 11) * 0x1.0p-52 - 1.0);

  for (int th = 1; th <= 2; th++) {
    wt_pool *pool = wt_pool_create(th);
    weir_host host = wt_pool_host(pool);
    for (int pi = 0; pi < 2; pi++) {
      wt_bench_plugin p;
      memset(&p, 0, sizeof p);
      if (wt_bench_load(&p, dir, names[pi], -1, &host) != 0) return 1;
      for (int s = 0; s < WT_NSHAPES; s++) {
        const wt_shape *sh = &wt_shapes_1b1[s];
        weir_tensor t = {.data = src, .dtype = WEIR_DTYPE_F16, .ndim = 2,
                         .ne = {sh->cols, sh->rows, 1, 1}, .nb = {2, (size_t)sh->cols * 2, 0, 0}};
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
        /* GEMV */
        for (int c = 0; c < copies; c++) p.ops->matmul(p.self, ws[c], x, y, 1); /* warm-up */
        long calls = 0;
        double t0 = wt_now(), c0 = wt_cpu_now(), el;
        do {
          for (int c = 0; c < copies; c++) p.ops->matmul(p.self, ws[c], x, y, 1);
          calls += copies;
          el = wt_now() - t0;
        } while (el < secs);
        double us = el / calls * 1e6, cpu_us = (wt_cpu_now() - c0) / calls * 1e6;
        /* one thread: the thread's CPU time is the better figure on a loaded machine */
        if (th == 1) us = cpu_us;
        g_gemv_us[pi][th - 1][s] = us;
        /* GEMM */
        p.ops->matmul(p.self, ws[0], x, y, GEMM_TOKENS > 16 ? 16 : GEMM_TOKENS);
        long gcalls = 0;
        double g0 = th == 1 ? wt_cpu_now() : wt_now(), gel;
        do {
          p.ops->matmul(p.self, ws[gcalls % copies], x, y, GEMM_TOKENS);
          gcalls++;
          gel = (th == 1 ? wt_cpu_now() : wt_now()) - g0;
        } while (gel < secs);
        double gflops = 2.0 * sh->rows * sh->cols * GEMM_TOKENS * gcalls / gel * 1e-9;
        printf("%-5s threads %d  %-22s  %6.2f MiB  GEMV %8.1f us  %6.2f GB/s  %8.0f calls/s  |  "
               "GEMM512 %7.1f GFLOP/s\n",
               names[pi], th, sh->what, wb / 1048576.0, us, wb / (us * 1e-6) * 1e-9, 1e6 / us,
               gflops);
        fflush(stdout);
        for (int c = 0; c < copies; c++) p.ops->release(p.self, ws[c]);
        free(ws);
      }
      wt_bench_unload(&p);
    }
    wt_pool_destroy(pool);
  }
  printf("\nwhole-model decode estimate (%d layers x q,k,v,o,gate,up,down + output; "
         "linears only):\n",
         WT_LAYERS_1B1);
  for (int th = 1; th <= 2; th++) {
    double tot[2] = {0, 0};
    for (int pi = 0; pi < 2; pi++)
      for (int s = 0; s < WT_NSHAPES; s++)
        tot[pi] += g_gemv_us[pi][th - 1][s] *
                   (wt_shapes_1b1[s].per_layer ? (double)WT_LAYERS_1B1 * wt_shapes_1b1[s].per_layer : 1.0);
    printf("  threads %d: fp16 %.1f ms/token (%.2f tokens/s), int8 %.1f ms/token (%.2f tokens/s), "
           "int8 speed-up %.2fx\n",
           th, tot[0] * 1e-3, 1e6 / tot[0], tot[1] * 1e-3, 1e6 / tot[1], tot[0] / tot[1]);
  }
  free(src);
  free(x);
  free(y);
  return 0;
}
