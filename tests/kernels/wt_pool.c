/* Test thread pool (see wt_pool.h): workers wait on a generation counter, then claim
 * chunks from a shared atomic cursor. */
#include "wt_pool.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

struct wt_pool {
  int n;
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  uint64_t gen;
  int busy, quit;
  /* the current job */
  int64_t total, chunk, next;
  weir_parallel_fn fn;
  void *arg;
};

typedef struct worker_arg {
  wt_pool *p;
  int id;
} worker_arg;

static void run_chunks(wt_pool *p, int id) {
  for (;;) {
    int64_t b = __atomic_fetch_add(&p->next, p->chunk, __ATOMIC_RELAXED);
    if (b >= p->total) break;
    int64_t e = b + p->chunk < p->total ? b + p->chunk : p->total;
    p->fn(p->arg, b, e, id);
  }
}

static void *worker(void *v) {
  worker_arg *wa = v;
  wt_pool *p = wa->p;
  int id = wa->id;
  free(wa);
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->quit && p->gen == seen) pthread_cond_wait(&p->cv_work, &p->mu);
    if (p->quit) break;
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, id);
    pthread_mutex_lock(&p->mu);
    if (--p->busy == 0) pthread_cond_signal(&p->cv_done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

wt_pool *wt_pool_create(int num_threads) {
  wt_pool *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->n = num_threads < 1 ? 1 : num_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  p->th = calloc((size_t)p->n, sizeof(pthread_t));
  for (int i = 1; i < p->n; i++) {
    worker_arg *wa = malloc(sizeof(*wa));
    wa->p = p;
    wa->id = i;
    pthread_create(&p->th[i], NULL, worker, wa);
  }
  return p;
}

void wt_pool_destroy(wt_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv_work);
  pthread_cond_destroy(&p->cv_done);
  free(p->th);
  free(p);
}

int wt_pool_threads(const wt_pool *p) { return p->n; }

void wt_pool_parallel_for(wt_pool *p, int64_t n, int64_t grain, weir_parallel_fn fn, void *arg) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunk = (n + (int64_t)p->n * 4 - 1) / ((int64_t)p->n * 4);
  if (chunk < grain) chunk = grain;
  if (p->n == 1 || chunk >= n) {
    fn(arg, 0, n, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->total = n;
  p->chunk = chunk;
  p->next = 0;
  p->fn = fn;
  p->arg = arg;
  p->busy = p->n - 1;
  p->gen++;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->busy > 0) pthread_cond_wait(&p->cv_done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

static void h_log(void *ctx, weir_log_level level, const char *fmt, ...) {
  (void)ctx;
  if (level < WEIR_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[plugin] ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void *h_alloc(void *ctx, size_t size, size_t align) {
  (void)ctx;
  void *ptr = NULL;
  if (align < sizeof(void *)) align = 16;
  if (posix_memalign(&ptr, align, size ? size : 1) != 0) return NULL;
  return ptr;
}

static void h_free(void *ctx, void *ptr) {
  (void)ctx;
  free(ptr);
}

static int h_dev_alloc(void *ctx, size_t size, void **ptr) {
  void *q = h_alloc(ctx, size, 64);
  if (!q) return WEIR_E_NOMEM;
  *ptr = q;
  return WEIR_OK;
}

static void h_pfor(void *ctx, int64_t n, int64_t grain, weir_parallel_fn fn, void *arg) {
  wt_pool_parallel_for(ctx, n, grain, fn, arg);
}

static int h_threads(void *ctx) { return wt_pool_threads(ctx); }

weir_host wt_pool_host(wt_pool *p) {
  weir_host h = {0};
  h.struct_size = sizeof h;
  h.abi_minor = WEIR_ABI_MINOR;
  h.ctx = p;
  h.log = h_log;
  h.alloc = h_alloc;
  h.free = h_free;
  h.device_alloc = h_dev_alloc;
  h.device_free = h_free;
  h.parallel_for = h_pfor;
  h.num_threads = h_threads;
  return h;
}
