/* Micro-benchmark of the 43 matmuls of one step of the trained target
 * (models/kjv-target.gguf: dim 256, 6 layers, 8 heads of 32, 2 KV heads, FFN 768, vocab 4096,
 * tied output; f16 weights), at 1 to 8 tokens and at 9, 17, 48 and 256 (speculative
 * verification steps of 8 and 16 drafts, a prompt): what a step of n rows pays in matmuls
 * against a one-row step (docs/perf/speculative.md), for the row-major kernels (matmul.h)
 * and the 16-row panels the fp16 plugin packs (matmul_panel.h), the two alternated step by
 * step. The step's weights (10.6 MiB, more than L2) are laid out one after another and
 * cycled as the model does; the best of 200 steps, in thread CPU time (a shared machine's
 * preemption does not count). Not a test: build/tests/bin/bench_step_matmuls. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "matmul.h"
#include "matmul_panel.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct shape {
  int64_t rows, cols;
} shape;

#define MAX_TOKENS 256

/* Per layer: q, k, v, o, gate, up, down; then the output projection. */
static const shape k_layer[7] = {{256, 256}, {64, 256}, {64, 256}, {256, 256},
                                 {768, 256}, {768, 256}, {256, 768}};
static const shape k_out = {4096, 256};
enum { LAYERS = 6 };

/* One step's matmuls over weights at w (row-major, or panels when `panel`). */
static double step(const uint16_t *w, const float *x, float *y, int64_t n, int panel) {
  const double t0 = cpu_now();
  size_t off = 0;
  for (int l = 0; l <= LAYERS; l++)
    for (int i = 0; i < (l < LAYERS ? 7 : 1); i++) {
      const shape s = l < LAYERS ? k_layer[i] : k_out;
      if (panel) {
        weir_matmul_panel_args a = {.w = w + off, .w_dtype = WEIR_DTYPE_F16, .rows = s.rows,
                                    .cols = s.cols, .x = x, .y = y, .n_tokens = n};
        weir_matmul_panel_rows(&a, 0, weir_panel_count(s.rows));
      } else {
        weir_matmul_args a = {.w = w + off, .w_dtype = WEIR_DTYPE_F16, .rows = s.rows,
                              .cols = s.cols, .x = x, .y = y, .n_tokens = n};
        weir_matmul_rows(&a, 0, s.rows);
      }
      off += (size_t)weir_panel_elems(s.rows, s.cols); /* >= rows * cols: same offsets both */
    }
  return cpu_now() - t0;
}

int main(void) {
  size_t total = (size_t)weir_panel_elems(k_out.rows, k_out.cols);
  for (int l = 0; l < LAYERS; l++)
    for (int i = 0; i < 7; i++) total += (size_t)weir_panel_elems(k_layer[i].rows, k_layer[i].cols);
  uint16_t *w = aligned_alloc(64, (total * 2 + 63) / 64 * 64);
  float *x = aligned_alloc(64, sizeof(float) * MAX_TOKENS * 768);
  float *y = aligned_alloc(64, sizeof(float) * MAX_TOKENS * 4096);
  if (!w || !x || !y) return 1;
  /* Small f16 values of varied mantissa, both signs (the timing does not depend on where a
   * value sits, so one buffer serves both layouts). */
  for (size_t i = 0; i < total; i++)
    w[i] = (uint16_t)(0x2c00 + ((i * 2654435761u) >> 7) % 0x1000 + ((i & 1) << 15));
  for (int i = 0; i < MAX_TOKENS * 768; i++) x[i] = (float)(i % 97) * 0.01f - 0.4f;
  printf("weir bench_step_matmuls: the trained target's 43 matmuls of a step, f16 weights,\n"
         "best of 200 alternated steps, thread CPU time\n");
  printf("tokens  row-major us (x one)   panels us (x one)   panels speed-up\n");
  static const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 48, 256};
  double one[2] = {0, 0};
  for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
    const int64_t n = ns[c];
    double best[2] = {1e30, 1e30};
    for (int it = 0; it < 200; it++)
      for (int v = 0; v < 2; v++) {
        double dt = step(w, x, y, n, v);
        if (dt < best[v]) best[v] = dt;
      }
    if (n == 1) one[0] = best[0], one[1] = best[1];
    printf("%6lld  %9.1f (%5.2fx)   %9.1f (%5.2fx)   %.2fx\n", (long long)n, best[0] * 1e6,
           best[0] / one[0], best[1] * 1e6, best[1] / one[1], best[0] / best[1]);
  }
  free(w);
  free(x);
  free(y);
  return 0;
}
