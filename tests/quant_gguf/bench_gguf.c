/* Micro-benchmark (not a test) of the GGUF block kernels (kernels/cpu/matmul_kq.h) on one
 * thread: GEMV (one token) and GEMM (n tokens) over a rows x cols weight of random blocks,
 * as read bandwidth (GB/s of weight bytes) and tokens * rows per second.
 * Prints the CPU time as well (CLOCK_THREAD_CPUTIME_ID), which a loaded machine distorts less.
 * Usage: bench_gguf TYPE ROWS COLS TOKENS [SECONDS [THREADS]]   (TYPE: q4_K, q6_K, q8_0, ..., and
 *        q8_0x16, q4_Kx16, q5_Kx16, q6_Kx16 for those types in WEIR_KQ_X16)
 * THREADS (1) splits the rows as the plugin does (the activations quantized once, by the
 * first thread, then every thread its share of the rows; a barrier before and after), so the
 * GB/s of a GEMV at 2 threads can be put next to the copy bandwidth at 2 threads
 * (`weir_membw 1024 2`). The CPU time is then the sum over the threads.
 * KQ_AMX=0|1 in the environment turns the AMX-INT8 GEMM off or on (default: on where the CPU
 * and OS give it; it runs WEIR_KQ_X16 calls of 16 tokens or more); the path printed says which.
 * STREAM_MIB (0): when set, copies of the weight filling at least that many MiB, each call
 * the next: a decode streams the whole model past the caches, and a lone 12 MiB matrix
 * called again and again is read from the last-level cache instead (twice the rate). */
#include <pthread.h>
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

/* The worker threads: each runs rows [r0, r1) of the call between two barriers. */
typedef struct worker {
  pthread_t th;
  const weir_kq_matmul_args *a;
  int64_t r0, r1;
  pthread_barrier_t *bar;
  volatile int *stop;
  double cpu; /* its thread CPU time, written when it ends */
} worker;

static void *worker_main(void *p) {
  worker *w = p;
  double c0 = cpu_now();
  for (;;) {
    pthread_barrier_wait(w->bar);
    if (*w->stop) break;
    weir_kq_matmul_rows(w->a, w->r0, w->r1);
    pthread_barrier_wait(w->bar);
  }
  w->cpu = cpu_now() - c0;
  return NULL;
}

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
  int nth = argc > 6 ? atoi(argv[6]) : 1;
  const double stream_mib = argc > 7 ? atof(argv[7]) : 0;
  if (rows < 1 || cols < 1 || n < 1 || nth < 1 || nth > 64 || nth > rows) {
    fprintf(stderr, "bench_gguf: ROWS, COLS, TOKENS must be positive, THREADS 1..64 and <= ROWS\n");
    return 2;
  }
  if (!(stream_mib >= 0 && stream_mib <= 65536)) {
    fprintf(stderr, "bench_gguf: STREAM_MIB must be 0..65536\n");
    return 2;
  }
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
  for (int64_t i = 0; i < n * cols; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
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
  /* the copies a decode-like stream reads in turn (one: the weight itself) */
  const size_t stride = (bytes + 64 + 63) / 64 * 64;
  size_t copies = 1;
  if (stream_mib > 0) copies = (size_t)(stream_mib * 1048576.0 / (double)stride) + 1;
  uint8_t *ws_all = w;
  if (copies > 1) {
    ws_all = aligned_alloc(64, stride * copies);
    if (!ws_all) {
      fprintf(stderr, "bench_gguf: cannot allocate %zu copies of %zu bytes\n", copies, stride);
      return 1;
    }
    for (size_t c = 0; c < copies; c++) memcpy(ws_all + c * stride, w, bytes + 64);
  }
  /* KQ_AMX=0|1: the AMX-INT8 GEMM off or on (WEIR_KQ_X16, 16 tokens or more) */
  const char *amx_env = getenv("KQ_AMX");
  if (amx_env && weir_kq_amx_set(atoi(amx_env) != 0) != 0) {
    fprintf(stderr, "bench_gguf: KQ_AMX=1 but this CPU or OS gives no AMX-INT8\n");
    return 1;
  }
  const int use_amx = x16 && n >= 16 && weir_kq_amx_enabled();
  weir_kq_matmul_args a = {.type = t, .layout = x16 ? WEIR_KQ_X16 : WEIR_KQ_FILE, .w = w, .row_bytes = rb, .rows = rows, .cols = cols,
                           .act = act, .n_tokens = n, .y = y};
  /* rows split in nth shares; thread 0 (this one) takes the first */
  pthread_barrier_t bar;
  volatile int stop = 0;
  worker ws[64];
  pthread_barrier_init(&bar, NULL, (unsigned)nth);
  for (int i = 1; i < nth; i++) {
    ws[i] = (worker){.a = &a, .r0 = rows * i / nth, .r1 = rows * (i + 1) / nth, .bar = &bar,
                     .stop = &stop};
    if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i])) {
      fprintf(stderr, "bench_gguf: cannot start thread %d\n", i);
      return 1;
    }
  }
  int iters = 0;
  double t0 = now(), c0 = cpu_now(), tq = 0;
  do {
    double q0 = now();
    for (int64_t k = 0; k < n; k++) {
      if (x16) weir_kq_quantize_act_x16(t, x + k * cols, cols, &act, k);
      else weir_kq_quantize_act(t, x + k * cols, cols, &act, k);
    }
    tq += now() - q0;
    a.w = ws_all + (size_t)(iters % (int)copies) * stride;
    if (nth > 1) pthread_barrier_wait(&bar);
    weir_kq_matmul_rows(&a, 0, rows / nth);
    if (nth > 1) pthread_barrier_wait(&bar);
    iters++;
  } while (now() - t0 < secs);
  double dt = (now() - t0) / iters, ct = cpu_now() - c0;
  if (nth > 1) {
    stop = 1;
    pthread_barrier_wait(&bar);
    for (int i = 1; i < nth; i++) {
      pthread_join(ws[i].th, NULL);
      ct += ws[i].cpu;
    }
  }
  pthread_barrier_destroy(&bar);
  ct /= iters;
  printf("%s %lldx%lld, %lld tokens, %d thread%s, %s%s: %.3f ms/call (act %.3f ms), %.2f GB/s of weights, "
         "%.1f tokens/s, %.2f GMAC/s; CPU time %.3f ms/call, %.2f GMAC per CPU-second\n", argv[1], (long long)rows, (long long)cols, (long long)n,
         nth, nth > 1 ? "s" : "", use_amx ? "amx-int8" : weir_kq_isa_name(), copies > 1 ? ", streamed" : "", dt * 1e3, tq / iters * 1e3, (double)bytes / dt / 1e9, n / dt,
         (double)rows * cols * n / dt / 1e9, ct * 1e3, (double)rows * cols * n / ct / 1e9);
  if (ws_all != w) free(ws_all);
  free(w);
  free(x);
  free(y);
  free(buf);
  return 0;
}
