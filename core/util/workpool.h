/* A bounded, fair pool for request work that must not run on the event loop: chat
 * templating, tokenizing, constraint compiles (issue 28).
 *
 * Every job belongs to a client (a 64-bit key: a hash of the peer address, or of the API
 * key). A client runs at most `per_client` jobs at once; the others wait in its own FIFO.
 * At most `max_threads` jobs run at once in all; threads start when a job needs one and
 * stop after a few seconds idle. When a thread frees up, the clients with waiting jobs are
 * served round robin, so one client's queue of expensive jobs never holds back another's
 * cheap one beyond the per_client share it may take. Threads run at the pool's CPU
 * priority (weir_workpool_set_priority; nice +19 unless set), below the loop and the
 * engine, so preparing requests does not slow the tokens of those already running.
 *
 * Thread-safety: submit may be called from any thread; create and destroy from one. */
#ifndef WEIR_UTIL_WORKPOOL_H
#define WEIR_UTIL_WORKPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct weir_workpool weir_workpool;

/* Runs on a pool thread (cancelled 0), or on the destroying thread for a job that never
 * started (cancelled 1). It must free or hand on what arg holds either way. */
typedef void (*weir_work_fn)(void *arg, int cancelled);

/* max_threads >= 1, per_client >= 1, max_queued: jobs waiting in all before submit refuses
 * (0: no bound). `name` names the threads (at most 15 characters are shown). WEIR_E_NOMEM,
 * WEIR_E_INVAL. */
int weir_workpool_create(const char *name, int max_threads, int per_client, int max_queued,
                         weir_workpool **out);
/* Queues fn(arg) for `client`. 0, WEIR_E_BUSY (max_queued reached: fn is not called),
 * WEIR_E_NOMEM, WEIR_E_INTERNAL (no thread could start and none is running). */
int weir_workpool_submit(weir_workpool *p, uint64_t client, weir_work_fn fn, void *arg);
/* The CPU priority of the pool's threads, fixed when a thread starts (an unprivileged
 * thread cannot raise its priority again, so a thread never changes class). */
typedef enum {
  WEIR_WORKPOOL_NORMAL = 0, /* the loop's and the engine's (inherited from the creator) */
  WEIR_WORKPOOL_BELOW,      /* 10 nice levels below that (at most nice 19) */
  WEIR_WORKPOOL_LOW,        /* nice +19 (the default) */
  WEIR_WORKPOOL_IDLE,       /* SCHED_IDLE (falls back to nice +19) */
} weir_workpool_priority;
/* Call before the first submit: threads already started keep theirs. */
void weir_workpool_set_priority(weir_workpool *p, weir_workpool_priority prio);
/* Jobs running and jobs waiting now (for metrics and tests). */
void weir_workpool_counts(weir_workpool *p, int *running, int *queued);
/* Cancels the waiting jobs (fn(arg, 1) on this thread), waits for the running ones to end
 * and joins the threads. Accepts NULL. */
void weir_workpool_destroy(weir_workpool *p);

/* FNV-1a of n bytes: the client key of an address or an API key. */
uint64_t weir_workpool_key(const void *p, size_t n);

#endif
