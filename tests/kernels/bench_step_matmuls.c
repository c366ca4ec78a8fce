/* Micro-benchmark of the 43 matmuls of one decode step of the trained target
 * (models/kjv-target.gguf: dim 256, 6 layers, 8 heads of 32, 2 KV heads, FFN 768, vocab 4096,
 * tied output; f16 weights), at 1 to 8 tokens: what a speculative verification step of k
 * drafts pays in matmuls against a one-row step (docs/perf/speculative.md). The step's
 * weights (10.6 MiB, more than L2) are laid out one after another and cycled as the model
 * does; the best of 200 steps, in thread CPU time (a shared machine's preemption does not
 * count). Not a test: build/tests/bin/bench_step_matmuls. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "matmul.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct shape {
  int64_t rows, cols;
} shape;

int main(void) {
  /* Per layer: q, k, v, o, gate, up, down; then the output projection. */
  static const shape k_layer[7] = {{256, 256}, {64, 256}, {64, 256}, {256, 256},
                                   {768, 256}, {768, 256}, {256, 768}};
  const int layers = 6;
  const shape out = {4096, 256};
  size_t total = (size_t)(out.rows * out.cols);
  for (int l = 0; l < layers; l++)
    for (int i = 0; i < 7; i++) total += (size_t)(k_layer[i].rows * k_layer[i].cols);
  uint16_t *w = aligned_alloc(64, (total * 2 + 63) / 64 * 64);
  float *x = malloc(sizeof(float) * 8 * 768), *y = malloc(sizeof(float) * 8 * 4096);
  if (!w || !x || !y) return 1;
  /* Small f16 values of varied mantissa, both signs. */
  for (size_t i = 0; i < total; i++)
    w[i] = (uint16_t)(0x2c00 + ((i * 2654435761u) >> 7) % 0x1000 + ((i & 1) << 15));
  for (int i = 0; i < 8 * 768; i++) x[i] = (float)(i % 97) * 0.01f - 0.4f;
  printf("weir bench_step_matmuls: the trained target's 43 matmuls of a step, f16 weights\n");
  double one = 0;
  for (int n = 1; n <= 8; n++) {
    double best = 1e30;
    for (int it = 0; it < 200; it++) {
      const double t0 = cpu_now();
      size_t off = 0;
      for (int l = 0; l < layers; l++)
        for (int i = 0; i < 7; i++) {
          weir_matmul_args a = {.w = w + off, .w_dtype = WEIR_DTYPE_F16, .rows = k_layer[i].rows,
                                .cols = k_layer[i].cols, .x = x, .y = y, .n_tokens = n};
          weir_matmul_rows(&a, 0, a.rows);
          off += (size_t)(k_layer[i].rows * k_layer[i].cols);
        }
      weir_matmul_args a = {.w = w + off, .w_dtype = WEIR_DTYPE_F16, .rows = out.rows,
                            .cols = out.cols, .x = x, .y = y, .n_tokens = n};
      weir_matmul_rows(&a, 0, a.rows);
      const double dt = cpu_now() - t0;
      if (dt < best) best = dt;
    }
    if (n == 1) one = best;
    printf("%d tokens: %7.1f us  (%.2fx one token)\n", n, best * 1e6, best / one);
  }
  free(w);
  free(x);
  free(y);
  return 0;
}
