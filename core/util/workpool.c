/* The fair work pool (workpool.h): one mutex guards the client list; threads are detached
 * and counted, started on demand and stopped after WORKPOOL_IDLE_S idle. */
#include "util/workpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "weir/status.h"

#define WORKPOOL_IDLE_S 5

typedef struct wjob {
  struct wjob *next;
  weir_work_fn fn;
  void *arg;
} wjob;

/* A client with jobs waiting or running; freed when it has neither. */
typedef struct wclient {
  uint64_t key;
  int running;
  wjob *head, *tail;
  struct wclient *next;
} wclient;

struct weir_workpool {
  pthread_mutex_t mu;
  /* A job may be runnable, or stopping. A semaphore, not a condition variable: posting one
   * never waits, while pthread_cond_signal can wait for woken waiters to leave their group
   * (measured: the loop asleep in it behind SCHED_IDLE workers that had no CPU yet). */
  sem_t wake;
  pthread_cond_t gone;   /* a thread ended (destroy waits for all) */
  char name[16];
  int max_threads, per_client, max_queued;
  weir_workpool_priority priority;
  int threads, idle, running, queued, stopping;
  wclient *clients;      /* in arrival order */
  wclient *rr;           /* where the next round-robin search starts (NULL: the head) */
};

uint64_t weir_workpool_key(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* The next client (round robin from rr) with a job waiting and room under per_client. */
static wclient *pick(weir_workpool *p) {
  if (!p->clients) return NULL;
  wclient *start = p->rr ? p->rr : p->clients, *c = start;
  do {
    if (c->head && c->running < p->per_client) {
      p->rr = c->next;
      return c;
    }
    c = c->next ? c->next : p->clients;
  } while (c != start);
  return NULL;
}

static int spawn(weir_workpool *p);

/* 1 when some client has a job waiting that could start now. */
static int has_runnable(const weir_workpool *p) {
  for (const wclient *c = p->clients; c; c = c->next)
    if (c->head && c->running < p->per_client) return 1;
  return 0;
}

static void client_drop_if_done(weir_workpool *p, wclient *c) {
  if (c->running || c->head) return;
  wclient **pp = &p->clients;
  while (*pp != c) pp = &(*pp)->next;
  *pp = c->next;
  if (p->rr == c) p->rr = c->next;
  free(c);
}

/* This thread's CPU priority (Linux sets it per thread). Lowering never needs a
 * privilege; a failure leaves the thread at the loop's priority, which is only slower for
 * others, never wrong. */
static void set_priority(weir_workpool_priority prio) {
  if (prio == WEIR_WORKPOOL_IDLE) {
    /* SCHED_IDLE: runs only on CPU time no normal thread of the machine wants, and a waking
     * normal thread preempts it at once (a nice-19 thread may first finish its slice). */
    struct sched_param sp = {0};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) == 0) return;
    prio = WEIR_WORKPOOL_LOW;
  }
  if (prio == WEIR_WORKPOOL_NORMAL) return; /* the creating thread's, inherited */
  const id_t tid = (id_t)syscall(SYS_gettid);
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, tid);
  if (nice == -1 && errno) nice = 0;
  nice = prio == WEIR_WORKPOOL_LOW ? 19 : (nice + 10 > 19 ? 19 : nice + 10);
  (void)setpriority(PRIO_PROCESS, tid, nice);
}

static void *worker(void *arg) {
  weir_workpool *p = arg;
  set_priority(p->priority);
  pthread_mutex_lock(&p->mu);
  for (;;) {
    wclient *c = pick(p);
    while (!c && !p->stopping) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += WORKPOOL_IDLE_S;
      p->idle++;
      pthread_mutex_unlock(&p->mu);
      int rc;
      while ((rc = sem_timedwait(&p->wake, &ts)) != 0 && errno == EINTR) {
      }
      const int timed_out = rc != 0;
      pthread_mutex_lock(&p->mu);
      p->idle--;
      c = pick(p);
      if (!c && timed_out) break;
    }
    if (!c) break;
    wjob *j = c->head;
    c->head = j->next;
    if (!c->head) c->tail = NULL;
    c->running++;
    p->running++;
    p->queued--;
    /* Work-conserving: another job that could start now gets a thread of its own rather
     * than waiting for this one (a job queued behind its client's share finds none idle). */
    if (p->idle == 0 && p->threads < p->max_threads && has_runnable(p)) (void)spawn(p);
    pthread_mutex_unlock(&p->mu);
    j->fn(j->arg, 0);
    free(j);
    pthread_mutex_lock(&p->mu);
    c->running--;
    p->running--;
    client_drop_if_done(p, c);
  }
  p->threads--;
  pthread_cond_broadcast(&p->gone);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int weir_workpool_create(const char *name, int max_threads, int per_client, int max_queued,
                         weir_workpool **out) {
  *out = NULL;
  if (max_threads < 1 || per_client < 1 || max_queued < 0) return WEIR_E_INVAL;
  weir_workpool *p = calloc(1, sizeof *p);
  if (!p) return WEIR_E_NOMEM;
  if (pthread_mutex_init(&p->mu, NULL)) goto free_pool;
  if (sem_init(&p->wake, 0, 0)) goto destroy_mutex;
  if (pthread_cond_init(&p->gone, NULL)) goto destroy_work;
  snprintf(p->name, sizeof p->name, "%s", name ? name : "weir-work");
  p->max_threads = max_threads;
  p->per_client = per_client;
  p->max_queued = max_queued;
  p->priority = WEIR_WORKPOOL_LOW;
  *out = p;
  return WEIR_OK;
destroy_work:
  sem_destroy(&p->wake);
destroy_mutex:
  pthread_mutex_destroy(&p->mu);
free_pool:
  free(p);
  return WEIR_E_NOMEM;
}

/* Starts one more thread; with the lock held. 0 or -1. */
static int spawn(weir_workpool *p) {
  pthread_attr_t at;
  pthread_t t;
  if (pthread_attr_init(&at)) return -1;
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &at, worker, p);
  pthread_attr_destroy(&at);
  if (rc) return -1;
  pthread_setname_np(t, p->name);
  p->threads++;
  return 0;
}

int weir_workpool_submit(weir_workpool *p, uint64_t client, weir_work_fn fn, void *arg) {
  wjob *j = malloc(sizeof *j);
  if (!j) return WEIR_E_NOMEM;
  j->next = NULL;
  j->fn = fn;
  j->arg = arg;
  int rc = WEIR_OK, post = 0;
  pthread_mutex_lock(&p->mu);
  if (p->stopping) {
    rc = WEIR_E_CANCELED;
    goto unlock;
  }
  if (p->max_queued && p->queued >= p->max_queued) {
    rc = WEIR_E_BUSY;
    goto unlock;
  }
  wclient *c = p->clients;
  while (c && c->key != client) c = c->next;
  if (!c) {
    if (!(c = calloc(1, sizeof *c))) {
      rc = WEIR_E_NOMEM;
      goto unlock;
    }
    c->key = client;
    wclient **pp = &p->clients;
    while (*pp) pp = &(*pp)->next;
    *pp = c;
  }
  if (c->tail) c->tail->next = j;
  else c->head = j;
  c->tail = j;
  p->queued++;
  j = NULL; /* queued */
  /* Wake an idle thread; start one when none is idle and this job could run now. */
  if (p->idle > 0) {
    post = 1; /* after the unlock: a woken thread does not wake into our lock */
  } else if (p->threads < p->max_threads && c->running < p->per_client && spawn(p) &&
             p->threads == 0) {
    /* No thread could start and none runs: take the job back. */
    wjob **pp = &c->head, *prev = NULL;
    while ((*pp)->next) {
      prev = *pp;
      pp = &(*pp)->next;
    }
    j = *pp;
    *pp = NULL;
    c->tail = prev;
    p->queued--;
    client_drop_if_done(p, c);
    rc = WEIR_E_INTERNAL;
  }
unlock:
  pthread_mutex_unlock(&p->mu);
  if (post) sem_post(&p->wake);
  free(j);
  return rc;
}

void weir_workpool_set_priority(weir_workpool *p, weir_workpool_priority prio) {
  pthread_mutex_lock(&p->mu);
  p->priority = prio;
  pthread_mutex_unlock(&p->mu);
}

void weir_workpool_counts(weir_workpool *p, int *running, int *queued) {
  pthread_mutex_lock(&p->mu);
  if (running) *running = p->running;
  if (queued) *queued = p->queued;
  pthread_mutex_unlock(&p->mu);
}

void weir_workpool_destroy(weir_workpool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  /* Take the waiting jobs out first: the threads then end once their running job does. */
  wjob *cancel = NULL, **ct = &cancel;
  for (wclient *c = p->clients; c; c = c->next) {
    *ct = c->head;
    while (*ct) ct = &(*ct)->next;
    c->head = c->tail = NULL;
    p->queued = 0;
  }
  for (int i = 0; i < p->threads; i++) sem_post(&p->wake);
  while (p->threads > 0) pthread_cond_wait(&p->gone, &p->mu);
  while (p->clients) {
    wclient *c = p->clients;
    p->clients = c->next;
    free(c);
  }
  pthread_mutex_unlock(&p->mu);
  while (cancel) {
    wjob *n = cancel->next;
    cancel->fn(cancel->arg, 1);
    free(cancel);
    cancel = n;
  }
  pthread_cond_destroy(&p->gone);
  sem_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
