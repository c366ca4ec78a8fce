/* core/util: the growable text buffer (appends, printf past the spare room, the sticky
 * allocation failure, take) and the progress facility (what it logs when stderr is not a
 * terminal, its rate limit, the fraction other threads read, silence above info). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "testutil.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/workpool.h"
#include "weir/status.h"

#include <stdatomic.h>
#include <time.h>

/* weir_read_file: an empty file, one larger than its read chunk with a NUL inside, a missing
 * one. */
static void test_read_file(void) {
  char path[] = "/tmp/weir-read-XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT_FATAL(fd >= 0);
  size_t len = 99;
  char *s = weir_read_file(path, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  WT_ASSERT_INT_EQ(len, 0);
  CU_ASSERT_STRING_EQUAL(s, "");
  free(s);
  enum { N = 200000 };
  char *data = malloc(N);
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);
  for (size_t i = 0; i < N; i++) data[i] = (char)(i * 7 + 1);
  data[70000] = 0;
  CU_ASSERT_FATAL(write(fd, data, N) == N);
  close(fd);
  s = weir_read_file(path, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  WT_ASSERT_INT_EQ(len, N);
  CU_ASSERT(!memcmp(s, data, N));
  CU_ASSERT(s[N] == 0);
  free(s);
  free(data);
  unlink(path);
  CU_ASSERT_PTR_NULL(weir_read_file(path, &len));
}

static void test_buf(void) {
  weir_buf b = {0};
  weir_buf_puts(&b, "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);
  CU_ASSERT_STRING_EQUAL(b.p, "");
  weir_buf_puts(&b, "abc");
  weir_buf_putc(&b, '-');
  weir_buf_append(&b, "xyz\0q", 5); /* binary-safe */
  WT_ASSERT_INT_EQ(b.len, 9);
  /* Longer than any spare room: formatted in a second pass. */
  char big[5000];
  memset(big, 'k', sizeof big - 1);
  big[sizeof big - 1] = 0;
  weir_buf_printf(&b, "[%s|%d]", big, 42);
  WT_ASSERT_INT_EQ(b.len, 9 + 1 + 4999 + 4);
  CU_ASSERT(!memcmp(b.p + b.len - 4, "|42]", 4));
  CU_ASSERT(b.p[b.len] == 0);
  size_t len = 0;
  char *s = weir_buf_take(&b, &len);
  WT_ASSERT_INT_EQ(len, 9 + 1 + 4999 + 4);
  CU_ASSERT(b.p == NULL && b.len == 0);
  free(s);
  /* After a failure every append is ignored and take gives NULL. */
  weir_buf_puts(&b, "ok");
  b.oom = 1;
  weir_buf_puts(&b, "lost");
  WT_ASSERT_INT_EQ(b.len, 2);
  CU_ASSERT_PTR_NULL(weir_buf_take(&b, &len));
  WT_ASSERT_INT_EQ(len, 0);
  /* An impossible size fails cleanly instead of wrapping. */
  weir_buf_puts(&b, "x");
  weir_buf_append(&b, "", (size_t)-1 / 2);
  CU_ASSERT(b.oom);
  weir_buf_free(&b);
  CU_ASSERT(!b.oom && !b.p);
}

static char *g_text;
static size_t g_len;

static char *capture(void (*fn)(void)) {
  g_text = NULL;
  FILE *f = open_memstream(&g_text, &g_len);
  weir_log_configure(WEIR_LOG_INFO, WEIR_LOG_TEXT, f);
  fn();
  weir_log_configure(WEIR_LOG_INFO, WEIR_LOG_TEXT, NULL);
  fclose(f);
  return strdup(g_text ? g_text : "");
}

static weir_progress g_p;

static void run_task(void) {
  weir_progress_begin(&g_p, "loading demo", 40, "layers", 0.05);
  for (int i = 1; i <= 40; i++) {
    weir_progress_update(&g_p, (uint64_t)i);
    usleep(5000);
    if (i == 20) CU_ASSERT_DOUBLE_EQUAL(weir_progress_fraction(&g_p), 0.5, 1e-12);
  }
  weir_progress_end(&g_p, 1);
}

static void failing_task(void) {
  weir_progress_begin(&g_p, "quantizing", 10, "tensors", 0);
  weir_progress_update(&g_p, 3);
  weir_progress_end(&g_p, 0);
}

static void test_progress_log(void) {
  CU_ASSERT_DOUBLE_EQUAL(weir_progress_fraction(&g_p), -1, 0); /* idle */
  char *out = capture(run_task);
  WT_ASSERT_STR_CONTAINS(out, "loading demo: started (40 layers)");
  WT_ASSERT_STR_CONTAINS(out, "loading demo: done after");
  WT_ASSERT_STR_CONTAINS(out, "(40/40 layers)");
  /* 40 updates over >= 200 ms at one log line per 50 ms: some, not one per update. */
  int lines = 0;
  for (const char *p = strstr(out, "% ("); p; p = strstr(p + 1, "% (")) lines++;
  CU_ASSERT(lines >= 1 && lines < 20);
  CU_ASSERT(!weir_progress_active(&g_p));
  CU_ASSERT_DOUBLE_EQUAL(weir_progress_fraction(&g_p), -1, 0);
  free(out);
  free(g_text);
  out = capture(failing_task);
  WT_ASSERT_STR_CONTAINS(out, "quantizing: failed after");
  WT_ASSERT_STR_CONTAINS(out, "(3/10 tensors)");
  free(out);
  free(g_text);
}


static void test_progress_quiet(void) {
  /* Above info nothing is shown, but the fraction is still kept for readers. */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  weir_log_configure(WEIR_LOG_WARN, WEIR_LOG_TEXT, f);
  weir_progress_begin(&g_p, "silent", 4, "steps", 0);
  weir_progress_update(&g_p, 9); /* clamped */
  CU_ASSERT_DOUBLE_EQUAL(weir_progress_fraction(&g_p), 1.0, 0);
  weir_progress_end(&g_p, 1);
  weir_log_configure(WEIR_LOG_INFO, WEIR_LOG_TEXT, NULL);
  fclose(f);
  WT_ASSERT_INT_EQ(len, 0);
  free(text);
}

/* Another thread sees the fraction move while the owner works. */
static void *reader(void *arg) {
  double *max_seen = arg;
  for (int i = 0; i < 2000 && *max_seen < 1.0; i++) {
    double f = weir_progress_fraction(&g_p);
    if (f > *max_seen) *max_seen = f;
    usleep(200);
  }
  return NULL;
}

static void test_progress_threads(void) {
  double max_seen = -1;
  weir_log_configure(WEIR_LOG_ERROR, WEIR_LOG_TEXT, NULL);
  weir_progress_begin(&g_p, "shared", 100, "steps", 0);
  pthread_t t;
  pthread_create(&t, NULL, reader, &max_seen);
  for (int i = 1; i <= 100; i++) {
    weir_progress_update(&g_p, (uint64_t)i);
    usleep(1000);
  }
  pthread_join(t, NULL);
  weir_progress_end(&g_p, 1);
  weir_log_configure(WEIR_LOG_INFO, WEIR_LOG_TEXT, NULL);
  CU_ASSERT(max_seen > 0.1);
}


/* ---- the fair work pool (util/workpool.h) ---- */

static double wp_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

typedef struct wp_job {
  int sleep_ms;
  double started;
  int cancelled;
  atomic_int *done;
} wp_job;

static void wp_run(void *arg, int cancelled) {
  wp_job *j = arg;
  j->started = wp_now_ms();
  j->cancelled = cancelled;
  if (!cancelled) usleep((useconds_t)j->sleep_ms * 1000);
  atomic_fetch_add(j->done, 1);
}

static void test_workpool_fair(void) {
  weir_workpool *p;
  WT_ASSERT_INT_EQ(weir_workpool_create("wp-test", 2, 1, 0, &p), WEIR_OK);
  atomic_int done = 0;
  /* client 1 queues four 150 ms jobs (one runs at a time: per_client 1) */
  wp_job a[4], b = {.sleep_ms = 1, .done = &done};
  for (int i = 0; i < 4; i++) {
    a[i] = (wp_job){.sleep_ms = 150, .done = &done};
    WT_ASSERT_INT_EQ(weir_workpool_submit(p, 1, wp_run, &a[i]), WEIR_OK);
  }
  int running = -1, queued = -1;
  for (int k = 0; k < 2000; k++) {
    weir_workpool_counts(p, &running, &queued);
    if (running == 1) break;
    usleep(1000);
  }
  CU_ASSERT_EQUAL(running, 1);
  CU_ASSERT_EQUAL(queued, 3);
  /* client 2's cheap job starts at once beside them, not after them */
  double t0 = wp_now_ms();
  WT_ASSERT_INT_EQ(weir_workpool_submit(p, 2, wp_run, &b), WEIR_OK);
  while (atomic_load(&done) < 5) usleep(1000);
  CU_ASSERT(b.started - t0 < 140.0); /* before client 1's running job could end */
  CU_ASSERT(b.started < a[1].started);
  /* client 1's jobs ran one after another, in order */
  for (int i = 1; i < 4; i++) CU_ASSERT(a[i].started >= a[i - 1].started + 140.0);
  weir_workpool_destroy(p);
}

/* The class a pool's threads run in, seen from inside a job. */
typedef struct {
  int policy, nice;
  atomic_int *done;
} wp_prio_job;

static void wp_prio_run(void *arg, int cancelled) {
  wp_prio_job *j = arg;
  if (!cancelled) {
    j->policy = sched_getscheduler(0);
    errno = 0;
    j->nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
  }
  atomic_fetch_add(j->done, 1);
}

/* Light work runs at the loop's priority, heavy work at SCHED_IDLE (issue 28), and nice +19
 * stays the default. */
static void test_workpool_priority(void) {
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)); /* ctest may nice us */
  const struct {
    weir_workpool_priority prio;
    int policy, nice;
  } cases[] = {{WEIR_WORKPOOL_NORMAL, SCHED_OTHER, own},
               {WEIR_WORKPOOL_BELOW, SCHED_OTHER, own + 10 > 19 ? 19 : own + 10},
               {WEIR_WORKPOOL_IDLE, SCHED_IDLE, -100},
               {(weir_workpool_priority)-1, SCHED_OTHER, 19}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    weir_workpool *p;
    WT_ASSERT_INT_EQ(weir_workpool_create("wp-prio", 1, 1, 0, &p), WEIR_OK);
    if ((int)cases[i].prio >= 0) weir_workpool_set_priority(p, cases[i].prio);
    atomic_int done = 0;
    wp_prio_job j = {.policy = -1, .nice = -100, .done = &done};
    WT_ASSERT_INT_EQ(weir_workpool_submit(p, 1, wp_prio_run, &j), WEIR_OK);
    while (atomic_load(&done) < 1) usleep(1000);
    WT_ASSERT_INT_EQ(j.policy, cases[i].policy);
    if (cases[i].nice != -100) WT_ASSERT_INT_EQ(j.nice, cases[i].nice);
    weir_workpool_destroy(p);
  }
  /* the caller's own priority is untouched */
  WT_ASSERT_INT_EQ(sched_getscheduler(0), SCHED_OTHER);
}

static void test_workpool_bounds(void) {
  weir_workpool *p;
  WT_ASSERT_INT_EQ(weir_workpool_create("wp-test", 1, 1, 3, &p), WEIR_OK);
  atomic_int done = 0;
  wp_job j[6];
  int ok = 0, busy = 0;
  for (int i = 0; i < 6; i++) {
    j[i] = (wp_job){.sleep_ms = 200, .done = &done};
    int rc = weir_workpool_submit(p, 7, wp_run, &j[i]);
    if (rc == WEIR_OK) ok++;
    else if (rc == WEIR_E_BUSY) busy++;
    for (int k = 0; i == 0 && k < 2000; k++) { /* the first starts before the next is queued */
      int running = 0;
      weir_workpool_counts(p, &running, NULL);
      if (running == 1) break;
      usleep(1000);
    }
  }
  /* one running and three waiting; the other two refused */
  CU_ASSERT_EQUAL(ok, 4);
  CU_ASSERT_EQUAL(busy, 2);
  /* destroy waits for the running one and cancels the waiting ones: every accepted job's
   * function runs exactly once */
  weir_workpool_destroy(p);
  CU_ASSERT_EQUAL(atomic_load(&done), 4);
  int cancelled = 0;
  for (int i = 0; i < 4; i++) cancelled += j[i].cancelled;
  CU_ASSERT_EQUAL(cancelled, 3);
  CU_ASSERT_EQUAL(weir_workpool_key("abc", 3), weir_workpool_key("abc", 3));
  CU_ASSERT(weir_workpool_key("abc", 3) != weir_workpool_key("abd", 3));
}

int main(void) {
  static const wt_test tests[] = {{"buf", test_buf},
                                  {"workpool: a client's queue does not hold back another's", test_workpool_fair},
                                  {"workpool: bounded queue, cancel on destroy", test_workpool_bounds},
                                  {"workpool: threads run at the pool's priority", test_workpool_priority},
                                  {"read_file", test_read_file},
                                  {"progress logs begin, periodic lines, end", test_progress_log},
                                  {"progress is silent above info", test_progress_quiet},
                                  {"progress is readable from another thread", test_progress_threads},
                                  {NULL, NULL}};
  return wt_run_suite("util", tests);
}
