/* Micro-benchmark (not a test) of the GGUF block kernels (kernels/cpu/matmul_kq.h) on one
 * thread: GEMV (one token) and GEMM (n tokens) over a rows x cols weight of random blocks,
 * as read bandwidth (GB/s of weight bytes) and tokens * rows per second.
 * Prints the CPU time as well (CLOCK_THREAD_CPUTIME_ID), which a loaded machine distorts less.
 * Usage: bench_gguf TYPE ROWS COLS TOKENS [SECONDS]   (TYPE: q4_K, q6_K, q8_0, ..., and q8_0x16,
 *        q4_Kx16 for those types in WEIR_KQ_X16) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "matmul_kq.h"
#include "weir/numeric.h"

static double clock_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of this thread: on a machine shared with other work it counts only the time the
 * kernel ran, so variants compare fairly while the wall-clock rate follows the load. */
static double cpu_now(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: bench_gguf TYPE ROWS COLS TOKENS [SECONDS]\n");
    return 2;
  }
  weir_dtype t = WEIR_DTYPE_COUNT_;
  /* q8_0x16, q4_Kx16: the layout the plugin uses for them under AVX-512 VNNI (WEIR_KQ_X16) */
  char name[32];
  snprintf(name, sizeof name, "%s", argv[1]);
  size_t nl = strlen(name);
  int x16 = nl > 3 && !strcmp(name + nl - 3, "x16");
  if (x16) name[nl - 3] = 0;
  for (int i = 0; i < 64; i++)
    if (weir_kq_supported((weir_dtype)i) && !strcmp(weir_dtype_name((weir_dtype)i), name))
      t = (weir_dtype)i;
  if (t == WEIR_DTYPE_COUNT_) {
    fprintf(stderr, "unknown type %s\n", argv[1]);
    return 2;
  }
  int64_t rows = atoll(argv[2]), cols = atoll(argv[3]), n = atoll(argv[4]);
  double secs = argc > 5 ? atof(argv[5]) : 2.0;
  size_t rb = weir_dtype_row_bytes(t, cols), bytes = rb * (size_t)rows;
  uint8_t *w = aligned_alloc(64, (bytes + 64 + 63) / 64 * 64);
  srand(1);
  for (size_t i = 0; i < bytes + 64; i++) w[i] = (uint8_t)rand();
  /* finite scales: every f16 field a small value (0x2000 ~ 0.0078) */
  size_t bb = weir_dtype_block_bytes(t);
  for (size_t b = 0; b < bytes / bb; b++)
    for (size_t o = 0; o + 1 < bb; o += 2)
      if (o < 4 || o + 2 == bb || o + 4 == bb) w[b * bb + o + 1] = 0x20;
  float *x = malloc(sizeof(float) * (size_t)(n * cols)), *y = malloc(sizeof(float) * (size_t)(n * rows));
  for (int64_t i = 0; i < n * cols; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
  void *buf = aligned_alloc(64, (weir_kq_act_bytes(cols, n) + 63) / 64 * 64);
  weir_kq_act act;
  weir_kq_act_init(&act, buf, cols, n);
  if (x16 && !weir_kq_x16_fits(t, cols)) {
    fprintf(stderr, "%s has no x16 layout for %lld columns\n", name, (long long)cols);
    return 2;
  }
  if (x16) {
    uint8_t *tmp = malloc(rb);
    for (int64_t r = 0; r < rows; r++) {
      memcpy(tmp, w + (size_t)r * rb, rb);
      weir_kq_x16_pack_row(t, tmp, w + (size_t)r * rb, cols);
    }
    free(tmp);
  }
  weir_kq_matmul_args a = {.type = t, .layout = x16 ? WEIR_KQ_X16 : WEIR_KQ_FILE, .w = w, .row_bytes = rb, .rows = rows, .cols = cols,
                           .act = act, .n_tokens = n, .y = y};
  int iters = 0;
  double t0 = now(), c0 = cpu_now(), tq = 0;
  do {
    double q0 = now();
    for (int64_t k = 0; k < n; k++) {
      if (x16) weir_kq_quantize_act_x16(t, x + k * cols, cols, &act, k);
      else weir_kq_quantize_act(t, x + k * cols, cols, &act, k);
    }
    tq += now() - q0;
    weir_kq_matmul_rows(&a, 0, rows);
    iters++;
  } while (now() - t0 < secs);
  double dt = (now() - t0) / iters, ct = (cpu_now() - c0) / iters;
  printf("%s %lldx%lld, %lld tokens, %s: %.3f ms/call (act %.3f ms), %.2f GB/s of weights, "
         "%.1f tokens/s, %.2f GMAC/s; CPU time %.3f ms/call, %.2f GMAC per CPU-second\n", argv[1], (long long)rows, (long long)cols, (long long)n,
         weir_kq_isa_name(), dt * 1e3, tq / iters * 1e3, (double)bytes / dt / 1e9, n / dt,
         (double)rows * cols * n / dt / 1e9, ct * 1e3, (double)rows * cols * n / ct / 1e9);
  free(w);
  free(x);
  free(y);
  free(buf);
  return 0;
}
