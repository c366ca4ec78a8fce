/* A persistent CPU thread pool behind the plugins' host->parallel_for.
 *
 * parallel_for runs many times per decode step (every matmul, norm and attention call), so a
 * call must cost little: workers stay alive, spin briefly on a sequence number after each
 * job (a back-to-back call finds them awake), then sleep on a futex; a call allocates
 * nothing; the calling thread takes chunks too (it is thread 0).
 *
 * Thread-safety: weir_threadpool_parallel_for may be called from several threads; calls are
 * serialised (one job at a time). It is not reentrant: fn must not call it again. create and
 * destroy are not thread-safe against concurrent use. */
#ifndef WEIR_UTIL_THREADPOOL_H
#define WEIR_UTIL_THREADPOOL_H

#include <stdint.h>

#include "weir/plugin.h" /* weir_parallel_fn */

typedef struct weir_threadpool weir_threadpool;

/* Creates a pool of num_threads threads in all, the caller included (num_threads - 1
 * workers); 0 means one per online CPU. Returns WEIR_E_NOMEM, WEIR_E_INVAL (negative count)
 * or WEIR_E_INTERNAL (a thread could not start). */
int weir_threadpool_create(int num_threads, weir_threadpool **out);
/* Stops and joins the workers; accepts NULL. No call may be running. */
void weir_threadpool_destroy(weir_threadpool *p);
/* Threads a job may use (>= 1), the caller included. */
int weir_threadpool_size(const weir_threadpool *p);

/* Runs fn(arg, begin, end, thread) over [0, n) in chunks of at least `grain` items (grain
 * <= 0 means 1) and returns when every chunk is done. Each item is covered exactly once;
 * `thread` is in [0, size) and no two chunks with the same `thread` run at once, so fn may
 * use per-thread scratch indexed by it. With n <= grain or one thread, fn runs once on the
 * caller. p may be NULL: then everything runs on the caller. */
void weir_threadpool_parallel_for(weir_threadpool *p, int64_t n, int64_t grain,
                                  weir_parallel_fn fn, void *arg);

#endif
