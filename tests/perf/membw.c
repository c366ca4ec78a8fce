/* Memory read bandwidth, the roofline of batch-1 decode: a matrix-vector product streams
 * every weight byte once per token. Reads a buffer much larger than the caches with 1..N
 * threads and prints GB/s (best of several passes). Usage: weir_membw [MiB] [threads] */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
  const uint64_t *p;
  size_t n;
  uint64_t sum;
} job;

/* The widest loads this CPU has, several independent accumulators: the read bandwidth a
 * well-written GEMV can reach, not the speed of a scalar loop. */
__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint64_t *p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 8)));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 16)));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 24)));
  }
  a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  uint64_t out[8];
  _mm512_storeu_si512((void *)out, a0);
  uint64_t s = 0;
  for (int k = 0; k < 8; k++) s += out[k];
  for (; i < n; i++) s += p[i];
  return s;
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  uint64_t out[4];
  _mm256_storeu_si256((__m256i *)out, a0);
  uint64_t s = out[0] + out[1] + out[2] + out[3];
  for (; i < n; i++) s += p[i];
  return s;
}

static uint64_t sum_scalar(const uint64_t *p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; i++) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

static uint64_t (*g_sum)(const uint64_t *, size_t) = sum_scalar;

static void *reader(void *arg) {
  job *j = arg;
  j->sum = g_sum(j->p, j->n);
  return NULL;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 1024;
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  if (threads < 1 || threads > 256 || mib < 16) {
    fprintf(stderr, "usage: weir_membw [MiB >= 16] [threads 1..256]\n");
    return 2;
  }
  const char *isa = "scalar";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    g_sum = sum_avx512;
    isa = "avx512";
  } else if (__builtin_cpu_supports("avx2")) {
    g_sum = sum_avx2;
    isa = "avx2";
  }
  size_t n = mib * 1024 * 1024 / sizeof(uint64_t);
  uint64_t *buf = aligned_alloc(64, n * sizeof(uint64_t));
  if (!buf) {
    fprintf(stderr, "weir_membw: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  for (size_t i = 0; i < n; i++) buf[i] = i;
  double best = 0;
  uint64_t check = 0;
  for (int pass = 0; pass < 5; pass++) {
    pthread_t th[256];
    job jobs[256];
    size_t per = n / (size_t)threads / 64 * 64; /* keep each slice 64-byte aligned */
    double t0 = now();
    for (int t = 0; t < threads; t++) {
      jobs[t] = (job){.p = buf + (size_t)t * per, .n = per};
      pthread_create(&th[t], NULL, reader, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) {
      pthread_join(th[t], NULL);
      check += jobs[t].sum;
    }
    double gbs = (double)(per * (size_t)threads * sizeof(uint64_t)) / (now() - t0) / 1e9;
    if (gbs > best) best = gbs;
  }
  printf("read bandwidth: %.2f GB/s (%zu MiB, %d threads, %s loads, best of 5; checksum %llu)\n",
         best, mib, threads, isa, (unsigned long long)(check & 0xffff));
  free(buf);
  return 0;
}
