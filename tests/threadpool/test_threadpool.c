/* The CPU thread pool: every item covered exactly once, thread ids in range and never used
 * by two chunks at once, grain respected, the caller participating, many back-to-back calls
 * (the decode-step pattern), sleeping workers woken, concurrent callers serialised, and a
 * worker that cannot run holding no job. */
#include <dirent.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "util/threadpool.h"

typedef struct cover {
  _Atomic int *hits;
  _Atomic int busy[64]; /* per thread id: 1 while a chunk of that id runs */
  _Atomic int bad_thread, overlap, small_chunk;
  _Atomic int threads_seen[64];
  int64_t n, grain;
  int size;
} cover;

static void cover_fn(void *arg, int64_t b, int64_t e, int thread) {
  cover *c = arg;
  if (thread < 0 || thread >= c->size) {
    atomic_store(&c->bad_thread, 1);
    return;
  }
  if (atomic_exchange(&c->busy[thread], 1)) atomic_store(&c->overlap, 1);
  atomic_store(&c->threads_seen[thread], 1);
  if (e - b < c->grain && e != c->n) atomic_store(&c->small_chunk, 1);
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
  /* A little work so that several threads overlap. */
  volatile double x = 0;
  for (int64_t i = b; i < e; i++) x += (double)i * 0.5;
  (void)x;
  atomic_store(&c->busy[thread], 0);
}

static void check_cover(weir_threadpool *p, int64_t n, int64_t grain) {
  cover *c = calloc(1, sizeof *c);
  c->hits = calloc((size_t)n + 1, sizeof *c->hits);
  c->n = n;
  c->grain = grain <= 0 ? 1 : grain;
  c->size = weir_threadpool_size(p);
  weir_threadpool_parallel_for(p, n, grain, cover_fn, c);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i++)
    if (atomic_load(&c->hits[i]) != 1) wrong++;
  WT_ASSERT_INT_EQ(wrong, 0);
  WT_ASSERT_INT_EQ(atomic_load(&c->bad_thread), 0);
  WT_ASSERT_INT_EQ(atomic_load(&c->overlap), 0);
  WT_ASSERT_INT_EQ(atomic_load(&c->small_chunk), 0);
  free(c->hits);
  free(c);
}

static void test_cover_sizes(void) {
  weir_threadpool *p = NULL;
  WT_ASSERT_INT_EQ(weir_threadpool_create(3, &p), 0);
  WT_ASSERT_INT_EQ(weir_threadpool_size(p), 3);
  int64_t sizes[] = {1, 2, 3, 7, 64, 1000, 4097, 100000};
  int64_t grains[] = {0, 1, 3, 16, 5000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) check_cover(p, sizes[i], grains[g]);
  weir_threadpool_destroy(p);
}

static void test_null_and_single(void) {
  check_cover(NULL, 1000, 1); /* NULL pool: inline on the caller */
  weir_threadpool *p = NULL;
  WT_ASSERT_INT_EQ(weir_threadpool_create(1, &p), 0);
  WT_ASSERT_INT_EQ(weir_threadpool_size(p), 1);
  check_cover(p, 1000, 1);
  weir_threadpool_destroy(p);
  WT_ASSERT_INT_EQ(weir_threadpool_create(-1, &p), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_threadpool_create(0, &p), 0); /* 0 = one per CPU */
  WT_ASSERT_INT_EQ(weir_threadpool_size(p), (int)sysconf(_SC_NPROCESSORS_ONLN));
  weir_threadpool_destroy(p);
}

/* Workers really run chunks: with chunks that wait until a second thread shows up, a pool of
 * two must finish (the caller alone would see only thread 0). */
typedef struct meet {
  _Atomic int seen[8];
} meet;
static void meet_fn(void *arg, int64_t b, int64_t e, int thread) {
  (void)b; (void)e;
  meet *m = arg;
  atomic_store(&m->seen[thread], 1);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int others = 0;
    for (int i = 0; i < 8; i++) others += i != thread && atomic_load(&m->seen[i]);
    if (others) break;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec > 5) break;
  }
}
static void test_workers_participate(void) {
  weir_threadpool *p = NULL;
  WT_ASSERT_INT_EQ(weir_threadpool_create(2, &p), 0);
  meet m;
  memset(&m, 0, sizeof m);
  weir_threadpool_parallel_for(p, 2, 1, meet_fn, &m);
  WT_ASSERT_INT_EQ(atomic_load(&m.seen[0]), 1);
  WT_ASSERT_INT_EQ(atomic_load(&m.seen[1]), 1);
  weir_threadpool_destroy(p);
}

typedef struct sum {
  _Atomic int64_t total;
} sum;
static void sum_fn(void *arg, int64_t b, int64_t e, int thread) {
  (void)thread;
  int64_t s = 0;
  for (int64_t i = b; i < e; i++) s += i;
  atomic_fetch_add(&((sum *)arg)->total, s);
}

/* The decode-step pattern: many small calls in a row, then a pause long enough for the
 * workers to fall asleep, then more calls: each must see every item. */
static void test_many_calls_and_sleep(void) {
  weir_threadpool *p = NULL;
  WT_ASSERT_INT_EQ(weir_threadpool_create(3, &p), 0);
  int64_t bad = 0;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 3000; i++) {
      sum s = {0};
      int64_t n = 1 + (i % 97);
      weir_threadpool_parallel_for(p, n, 1, sum_fn, &s);
      if (atomic_load(&s.total) != n * (n - 1) / 2) bad++;
    }
    usleep(20000); /* workers go to sleep on the futex */
  }
  WT_ASSERT_INT_EQ(bad, 0);
  weir_threadpool_destroy(p);
}

typedef struct caller_arg {
  weir_threadpool *p;
  int64_t bad;
} caller_arg;
static void *caller_main(void *a) {
  caller_arg *c = a;
  for (int i = 0; i < 500; i++) {
    sum s = {0};
    weir_threadpool_parallel_for(c->p, 1000, 10, sum_fn, &s);
    if (atomic_load(&s.total) != 1000 * 999 / 2) c->bad++;
  }
  return NULL;
}
static void test_concurrent_callers(void) {
  weir_threadpool *p = NULL;
  WT_ASSERT_INT_EQ(weir_threadpool_create(3, &p), 0);
  pthread_t t[3];
  caller_arg a[3];
  for (int i = 0; i < 3; i++) {
    a[i].p = p;
    a[i].bad = 0;
    pthread_create(&t[i], NULL, caller_main, &a[i]);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    WT_ASSERT_INT_EQ(a[i].bad, 0);
  }
  weir_threadpool_destroy(p);
}

/* A worker that cannot run (here: parked in a signal handler, as if it waited for a CPU
 * behind other threads) must not hold a job it has not started: the caller and the workers
 * that run take every chunk, and the parked worker, once it runs again, finds nothing to do
 * and does no harm to the next job. Before, the caller waited for every worker to check in
 * (issue 28: a whole scheduler slice, several times a decode step). */
static sem_t park_entered, park_release;
static void park_handler(int sig) {
  (void)sig;
  sem_post(&park_entered);
  while (sem_wait(&park_release) != 0) {
  }
}

typedef struct late_call {
  weir_threadpool *p;
  sum s;
  _Atomic int finished;
} late_call;
static void *late_caller(void *a) {
  late_call *c = a;
  weir_threadpool_parallel_for(c->p, 1000, 1, sum_fn, &c->s);
  atomic_store(&c->finished, 1);
  return NULL;
}

static void test_parked_worker_holds_nothing(void) {
  weir_threadpool *p = NULL;
  WT_ASSERT_INT_EQ(weir_threadpool_create(3, &p), 0);
  check_cover(p, 4097, 1); /* the workers have run */
  WT_ASSERT_INT_EQ(sem_init(&park_entered, 0, 0), 0);
  WT_ASSERT_INT_EQ(sem_init(&park_release, 0, 0), 0);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = park_handler;
  sigemptyset(&sa.sa_mask);
  WT_ASSERT_INT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  /* Park one worker: find a thread named weir-cpu. */
  pid_t victim = 0;
  DIR *d = opendir("/proc/self/task");
  CU_ASSERT_FATAL(d != NULL);
  struct dirent *de;
  while (!victim && (de = readdir(d)) != NULL) {
    char path[300], comm[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f) && strncmp(comm, "weir-cpu", 8) == 0) victim = atoi(de->d_name);
    fclose(f);
  }
  closedir(d);
  CU_ASSERT_FATAL(victim > 0);
  WT_ASSERT_INT_EQ((int)syscall(SYS_tgkill, getpid(), victim, SIGUSR1), 0);
  while (sem_wait(&park_entered) != 0) {
  }
  /* With one worker parked, jobs still finish, every item once (the caller runs in a thread
   * of its own so that a hang is a failed assertion, not a stuck suite). */
  late_call c;
  memset(&c, 0, sizeof c);
  c.p = p;
  pthread_t t;
  WT_ASSERT_INT_EQ(pthread_create(&t, NULL, late_caller, &c), 0);
  for (int i = 0; i < 500 && !atomic_load(&c.finished); i++) usleep(10000);
  const int finished = atomic_load(&c.finished);
  sem_post(&park_release); /* let it go either way, so the thread can be joined */
  pthread_join(t, NULL);
  WT_ASSERT_INT_EQ(finished, 1);
  CU_ASSERT_FATAL(finished == 1); /* the rest would hang */
  WT_ASSERT_INT_EQ(atomic_load(&c.s.total), 1000 * 999 / 2);
  for (int i = 0; i < 200; i++) {
    int64_t n = 1 + (i % 97) * 31;
    check_cover(p, n, 1);
  }
  /* Park it again and keep it parked across many jobs, released in the middle of them. */
  WT_ASSERT_INT_EQ((int)syscall(SYS_tgkill, getpid(), victim, SIGUSR1), 0);
  while (sem_wait(&park_entered) != 0) {
  }
  int64_t bad = 0;
  for (int i = 0; i < 2000; i++) {
    if (i == 1000) sem_post(&park_release);
    sum s = {0};
    int64_t n = 1 + (i % 97);
    weir_threadpool_parallel_for(p, n, 1, sum_fn, &s);
    if (atomic_load(&s.total) != n * (n - 1) / 2) bad++;
  }
  WT_ASSERT_INT_EQ(bad, 0);
  sigaction(SIGUSR1, &old, NULL);
  weir_threadpool_destroy(p);
  sem_destroy(&park_entered);
  sem_destroy(&park_release);
}

int main(void) {
  static const wt_test tests[] = {
      {"every item once, grain kept, thread ids exclusive", test_cover_sizes},
      {"NULL pool, one thread, bad and default sizes", test_null_and_single},
      {"workers take chunks", test_workers_participate},
      {"many small calls, then sleep and wake", test_many_calls_and_sleep},
      {"concurrent callers are serialised", test_concurrent_callers},
      {"a worker that cannot run holds no job", test_parked_worker_holds_nothing},
      {NULL, NULL}};
  return wt_run_suite("threadpool", tests);
}
