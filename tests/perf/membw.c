/* Memory read bandwidth, the roofline of batch-1 decode: a matrix-vector product streams
 * every weight byte once per token. Reads a buffer much larger than the caches with 1..N
 * threads and prints GB/s (best of several passes). Usage: weir_membw [MiB] [threads] */
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

static void *reader(void *arg) {
  job *j = arg;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= j->n; i += 4) {
    s0 += j->p[i];
    s1 += j->p[i + 1];
    s2 += j->p[i + 2];
    s3 += j->p[i + 3];
  }
  j->sum = s0 + s1 + s2 + s3;
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
    size_t per = n / (size_t)threads;
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
  printf("read bandwidth: %.2f GB/s (%zu MiB, %d threads, best of 5; checksum %llu)\n", best,
         mib, threads, (unsigned long long)(check & 0xffff));
  free(buf);
  return 0;
}
