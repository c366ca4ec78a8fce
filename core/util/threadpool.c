/* The thread pool: one job, published as a claim word (chunk count and next chunk), a
 * sequence number that announces it, and a count of finished chunks. Workers spin on the
 * sequence number for a short while after each job and then sleep on it with a futex, so that
 * a decode step's stream of small jobs never pays a wake-up, while an idle server burns no
 * CPU.
 *
 * The caller waits for the job's chunks, not for the workers: a worker that has not yet run
 * (asleep, or waiting for a CPU) when the job is posted claims nothing, and the caller and the
 * workers that are running take every chunk. Waiting for every worker to check in, as this
 * pool once did, made each job as late as the least lucky worker; on a machine with as many
 * busy threads as cores that was a whole scheduler slice several times a decode step (issue
 * 28, docs/reliability.md). */
#include "util/threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "weir/status.h"

/* Spin iterations before sleeping: a few tens of microseconds of pause instructions, more
 * than the gap between two kernels of one decode step. Then the thread sleeps on a futex.
 * There is no sched_yield step: a yield hands the core to whichever runnable thread the
 * scheduler finds eligible, and under EEVDF that can be a SCHED_IDLE heavy-pool thread or a
 * nice-19 process, which then keeps the core until its slice ends (a tick: 4 ms at HZ=250)
 * while this thread, runnable and not woken, waits (measured: perf sched_switch on the
 * engine's threads under 8 clients posting 1 MB bodies, issue 28). A sleeper, once woken,
 * preempts SCHED_IDLE work at once. */
#define WEIR_TP_SPIN 2000

typedef struct worker {
  struct weir_threadpool *pool;
  pthread_t tid;
  int index; /* 1.. (0 is the caller) */
} worker;

struct weir_threadpool {
  int size;              /* threads in all, caller included */
  worker *workers;       /* size - 1 */
  pthread_mutex_t call;  /* serialises parallel_for callers */

  /* The job, written by the caller while no chunk can be claimed (the claim word is spent),
   * before it publishes the claim word; read by a thread only after it claimed a chunk, so
   * never while it is written (the job cannot end before that chunk is done). */
  weir_parallel_fn fn;
  void *arg;
  int64_t n, chunk;
  /* The claim word: chunks in the job (high 32 bits) and the next unclaimed one (low 32).
   * Spent (next == count) between jobs. A thread claims with a compare-and-swap, so a late
   * thread can only ever claim a chunk of the job that is current at that moment. */
  _Atomic uint64_t claim;

  _Atomic uint32_t seq;       /* futex word: bumped once per job (and at shutdown) */
  _Atomic int sleepers;       /* workers inside futex_wait on seq */
  _Atomic uint32_t done;      /* futex word: chunks of this job finished */
  _Atomic int caller_waiting; /* the caller sleeps on `done` */
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

/* The wait both sides use: spin WEIR_TP_SPIN times, then say it is time to sleep on the
 * futex (and start counting again for the next wake-up). */
static inline int time_to_sleep(int *spins) {
  if (++*spins < WEIR_TP_SPIN) {
    cpu_relax();
    return 0;
  }
  *spins = 0;
  return 1;
}

/* Claims and runs chunks of the current job until none are left to claim. */
static void run_chunks(struct weir_threadpool *p, int thread) {
  uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
  for (;;) {
    const uint32_t count = (uint32_t)(c >> 32), i = (uint32_t)c;
    if (i >= count) return;
    if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue; /* c now holds the current word */
    const int64_t b = (int64_t)i * p->chunk;
    const int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
    p->fn(p->arg, b, e, thread);
    /* The last chunk's finisher wakes a sleeping caller. Sequentially consistent, like the
     * caller's store of caller_waiting and load of done: one of the two sees the other. */
    if (atomic_fetch_add(&p->done, 1) + 1 == count && atomic_load(&p->caller_waiting))
      futex_wake((void *)&p->done);
    c = atomic_load_explicit(&p->claim, memory_order_acquire);
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
    /* Possibly a later job than the one that woke us, or one already spent: either way this
     * claims only chunks of the job current at each claim. */
    run_chunks(p, w->index);
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
  /* The count must fit the claim word's 32 bits (size * 4 does for any real pool). */
  if ((n + chunk - 1) / chunk > (int64_t)UINT32_MAX) chunk = (n + UINT32_MAX - 1) / UINT32_MAX;
  const uint32_t count = (uint32_t)((n + chunk - 1) / chunk);
  p->fn = fn;
  p->arg = arg;
  p->n = n;
  p->chunk = chunk;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  /* Publishes the job: the fields above are written before a claim can succeed. */
  atomic_store_explicit(&p->claim, (uint64_t)count << 32, memory_order_release);
  atomic_fetch_add(&p->seq, 1); /* announces it (seq_cst) */
  if (atomic_load(&p->sleepers) > 0) futex_wake((void *)&p->seq);
  run_chunks(p, 0);
  int spins = 0;
  for (;;) {
    uint32_t d = atomic_load_explicit(&p->done, memory_order_acquire);
    if (d == count) break;
    if (!time_to_sleep(&spins)) continue;
    atomic_store(&p->caller_waiting, 1);
    d = atomic_load(&p->done);
    if (d != count) futex_wait(&p->done, d);
    atomic_store(&p->caller_waiting, 0);
  }
  pthread_mutex_unlock(&p->call);
}
