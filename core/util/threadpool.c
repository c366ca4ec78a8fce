/* The thread pool: one job slot, a sequence number that announces a job, an atomic chunk
 * cursor, and a count of workers yet to finish. Workers spin on the sequence number for a
 * short while after each job and then sleep on it with a futex, so that a decode step's
 * stream of small jobs never pays a wake-up, while an idle server burns no CPU. */
#include "util/threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "weir/status.h"

/* Spin iterations before sleeping: a few microseconds of pause instructions, about the gap
 * between two kernels of one decode step. Kept short, and followed by a few sched_yield
 * rounds, because on an oversubscribed machine (more threads than free cores) a spinning
 * thread steals the core from the very thread it waits for. */
#define WEIR_TP_SPIN 2000
#define WEIR_TP_YIELDS 8

typedef struct worker {
  struct weir_threadpool *pool;
  pthread_t tid;
  int index; /* 1.. (0 is the caller) */
} worker;

struct weir_threadpool {
  int size;              /* threads in all, caller included */
  worker *workers;       /* size - 1 */
  pthread_mutex_t call;  /* serialises parallel_for callers */

  /* The job, written by the caller before it bumps `seq`. */
  weir_parallel_fn fn;
  void *arg;
  int64_t n, chunk;
  _Atomic int64_t next;  /* the next unclaimed item */

  _Atomic uint32_t seq;       /* futex word: bumped once per job (and at shutdown) */
  _Atomic int sleepers;       /* workers inside futex_wait on seq */
  _Atomic int remaining;      /* futex word: workers that have not finished this job */
  _Atomic int caller_waiting; /* the caller sleeps on `remaining` */
  _Atomic int stop;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(void *addr) {
  syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* The wait both sides use: spin WEIR_TP_SPIN times, then yield WEIR_TP_YIELDS times, then
 * say it is time to sleep on the futex (and start counting again for the next wake-up). */
static inline int time_to_sleep(int *spins) {
  if (++*spins < WEIR_TP_SPIN) {
    cpu_relax();
    return 0;
  }
  if (*spins < WEIR_TP_SPIN + WEIR_TP_YIELDS) {
    sched_yield();
    return 0;
  }
  *spins = 0;
  return 1;
}

/* Claims and runs chunks until none are left. */
static void run_chunks(struct weir_threadpool *p, int thread) {
  for (;;) {
    int64_t b = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
    if (b >= p->n) break;
    int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
    p->fn(p->arg, b, e, thread);
  }
}

static void *worker_main(void *a) {
  worker *w = a;
  struct weir_threadpool *p = w->pool;
  uint32_t seen = 0; /* seq starts at 0; a job posted before this thread ran is still seen */
  for (;;) {
    uint32_t s;
    int spins = 0;
    while ((s = atomic_load_explicit(&p->seq, memory_order_acquire)) == seen) {
      if (!time_to_sleep(&spins)) continue;
      /* Announce the sleep before re-checking: the caller bumps seq and then reads
       * sleepers, so one of us sees the other (both accesses are sequentially
       * consistent). */
      atomic_fetch_add(&p->sleepers, 1);
      if (atomic_load(&p->seq) == seen) futex_wait(&p->seq, seen);
      atomic_fetch_sub(&p->sleepers, 1);
    }
    seen = s;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    run_chunks(p, w->index);
    if (atomic_fetch_sub(&p->remaining, 1) == 1 && atomic_load(&p->caller_waiting))
      futex_wake((void *)&p->remaining);
  }
  return NULL;
}

int weir_threadpool_create(int num_threads, weir_threadpool **out) {
  int rc = WEIR_OK;
  if (num_threads < 0) return WEIR_E_INVAL;
  if (num_threads == 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    num_threads = c > 0 ? (int)c : 1;
  }
  struct weir_threadpool *p = calloc(1, sizeof *p);
  if (!p) return WEIR_E_NOMEM;
  p->size = num_threads;
  if (pthread_mutex_init(&p->call, NULL) != 0) {
    rc = WEIR_E_INTERNAL;
    goto free_pool;
  }
  if (num_threads > 1) {
    p->workers = calloc((size_t)num_threads - 1, sizeof *p->workers);
    if (!p->workers) {
      rc = WEIR_E_NOMEM;
      goto free_mutex;
    }
  }
  for (int i = 0; i < num_threads - 1; i++) {
    p->workers[i].pool = p;
    p->workers[i].index = i + 1;
    if (pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]) != 0) {
      /* Start no job: shrink to the workers that exist and tear down normally. */
      p->size = i + 1;
      weir_threadpool_destroy(p);
      return WEIR_E_INTERNAL;
    }
    pthread_setname_np(p->workers[i].tid, "weir-cpu");
  }
  *out = p;
  return WEIR_OK;
free_mutex:
  pthread_mutex_destroy(&p->call);
free_pool:
  free(p);
  return rc;
}

void weir_threadpool_destroy(weir_threadpool *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
  atomic_fetch_add(&p->seq, 1);
  futex_wake((void *)&p->seq);
  for (int i = 0; i < p->size - 1; i++) pthread_join(p->workers[i].tid, NULL);
  free(p->workers);
  pthread_mutex_destroy(&p->call);
  free(p);
}

int weir_threadpool_size(const weir_threadpool *p) { return p ? p->size : 1; }

void weir_threadpool_parallel_for(weir_threadpool *p, int64_t n, int64_t grain,
                                  weir_parallel_fn fn, void *arg) {
  if (n <= 0) return;
  if (grain <= 0) grain = 1;
  if (!p || p->size == 1 || n <= grain) {
    fn(arg, 0, n, 0);
    return;
  }
  pthread_mutex_lock(&p->call);
  /* About four chunks per thread balances uneven chunks without many atomic claims. */
  int64_t chunk = (n + (int64_t)p->size * 4 - 1) / ((int64_t)p->size * 4);
  if (chunk < grain) chunk = grain;
  p->fn = fn;
  p->arg = arg;
  p->n = n;
  p->chunk = chunk;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->remaining, p->size - 1, memory_order_relaxed);
  atomic_fetch_add(&p->seq, 1); /* publishes the job (seq_cst, so also a release) */
  if (atomic_load(&p->sleepers) > 0) futex_wake((void *)&p->seq);
  run_chunks(p, 0);
  int spins = 0;
  for (;;) {
    int r = atomic_load_explicit(&p->remaining, memory_order_acquire);
    if (r == 0) break;
    if (!time_to_sleep(&spins)) continue;
    atomic_store(&p->caller_waiting, 1);
    if (atomic_load(&p->remaining) == r && r != 0) futex_wait((_Atomic uint32_t *)&p->remaining, (uint32_t)r);
    atomic_store(&p->caller_waiting, 0);
  }
  pthread_mutex_unlock(&p->call);
}
