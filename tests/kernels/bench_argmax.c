/* Micro-benchmark (not a test) of the greedy pick (kernels/cpu/argmax.h) on rows of the
 * trained pair's widths (4,096: the vocabulary, a verification row or a whole-vocabulary draft
 * row; 1,024: the draft's default head), with and without the top probability, at each ISA
 * level this CPU runs, against the engine's former host path in the same run (a strict > scan
 * and a libm expf per logit, compiled here as it was in engine_spec.c). Engine-thread CPU
 * time (CLOCK_THREAD_CPUTIME_ID), the best of 7 windows of `iters` rows each, so the figures
 * hold up on a loaded machine. Usage: build/tests/bin/bench_argmax [iters] (default 20000). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "argmax.h"
#include "cpu_isa.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The engine's former pick: argmax_row then top_prob (engine_spec.c before this kernel). */
static int64_t former_pick(const float *x, int64_t n, float *prob) {
  int64_t best = 0;
  float bv = -INFINITY;
  for (int64_t v = 0; v < n; v++)
    if (x[v] > bv) {
      bv = x[v];
      best = v;
    }
  if (prob) {
    const float m = x[best];
    float sum = 0.0f;
    if (m > -INFINITY)
      for (int64_t v = 0; v < n; v++) sum += expf(x[v] - m);
    *prob = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  return best;
}

enum { ROWS = 64 };

/* ns per row, the best of 7 windows; sink keeps the calls. */
static double time_rows(int former, const float *x, int64_t n, int with_prob, long iters,
                        volatile int64_t *sink) {
  double best = 1e30;
  for (int w = 0; w < 7; w++) {
    const double t0 = cpu_now();
    int64_t acc = 0;
    float p = 0;
    for (long i = 0; i < iters; i++) {
      const float *row = x + (size_t)(i % ROWS) * (size_t)n;
      acc += former ? former_pick(row, n, with_prob ? &p : NULL)
                    : weir_argmax_f32(row, n, with_prob ? &p : NULL);
    }
    const double dt = (cpu_now() - t0) / (double)iters * 1e9;
    *sink += acc + (int64_t)p;
    if (dt < best) best = dt;
  }
  return best;
}

int main(int argc, char **argv) {
  const long iters = argc > 1 ? atol(argv[1]) : 20000;
  if (iters <= 0) {
    fprintf(stderr, "usage: bench_argmax [iters > 0]\n");
    return 2;
  }
  static const int64_t widths[] = {4096, 1024};
  float *x = malloc(sizeof(float) * ROWS * 4096);
  if (!x) return 1;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < (size_t)ROWS * 4096; i++) { /* logits-like: N(0, 3)-ish */
    float u = 0;
    for (int k = 0; k < 4; k++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      u += (float)(s >> 40) / (float)(1 << 24);
    }
    x[i] = (u - 2.0f) * 5.2f;
  }
  volatile int64_t sink = 0;
  printf("# bench_argmax: ns per row (thread CPU time, best of 7 x %ld rows)\n", iters);
  printf("%-8s %-10s %10s %12s\n", "width", "path", "pick", "pick+prob");
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
    const int64_t n = widths[wi];
    weir_cpu_isa_set(WEIR_CPU_ISA_SCALAR);
    printf("%-8lld %-10s %10.1f %12.1f\n", (long long)n, "former", time_rows(1, x, n, 0, iters, &sink),
           time_rows(1, x, n, 1, iters, &sink));
    for (int lvl = 0; lvl < WEIR_CPU_ISA_COUNT_; lvl++) {
      if (weir_cpu_isa_set((weir_cpu_isa_level)lvl) != 0) continue;
      printf("%-8lld %-10s %10.1f %12.1f\n", (long long)n,
             weir_cpu_isa_name((weir_cpu_isa_level)lvl), time_rows(0, x, n, 0, iters, &sink),
             time_rows(0, x, n, 1, iters, &sink));
    }
  }
  free(x);
  return sink == 42 ? 3 : 0;
}
