/* The Prometheus registry: registration rules, recording semantics and the text format. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"
#include "testutil.h"

static char *render(weir_metrics *m) {
  char *out = NULL;
  size_t len = 0;
  WT_ASSERT_INT_EQ(weir_metrics_render(m, &out, &len), WEIR_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(out);
  WT_ASSERT_INT_EQ(strlen(out), len);
  return out;
}

static int count_occurrences(const char *h, const char *n) {
  int c = 0;
  for (const char *p = strstr(h, n); p; p = strstr(p + 1, n)) c++;
  return c;
}

/* Samples of one family registered interleaved with another family must come out as one
 * contiguous group under a single HELP/TYPE pair. */
static void test_family_grouping(void) {
  weir_metrics *m = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_create(&m), WEIR_OK);
  weir_metric *a1, *b, *a2, *a3;
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "req_total", "Requests", WEIR_METRIC_COUNTER, NULL,
                                         0, "code=\"200\"", &a1), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "running", "Running", WEIR_METRIC_GAUGE, NULL, 0,
                                         NULL, &b), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "req_total", "Requests", WEIR_METRIC_COUNTER, NULL,
                                         0, "code=\"404\"", &a2), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "req_total", "Requests", WEIR_METRIC_COUNTER, NULL,
                                         0, "code=\"500\"", &a3), WEIR_OK);
  weir_metric_record(a1, 3);
  weir_metric_record(a2, 1);
  weir_metric_record(b, 7);
  char *out = render(m);
  WT_ASSERT_INT_EQ(count_occurrences(out, "# TYPE weir_req_total counter"), 1);
  WT_ASSERT_INT_EQ(count_occurrences(out, "# HELP weir_req_total Requests"), 1);
  const char *expect = "# HELP weir_req_total Requests\n# TYPE weir_req_total counter\n"
                       "weir_req_total{code=\"200\"} 3\nweir_req_total{code=\"404\"} 1\n"
                       "weir_req_total{code=\"500\"} 0\n"
                       "# HELP weir_running Running\n# TYPE weir_running gauge\n"
                       "weir_running 7\n";
  if (strcmp(out, expect)) fprintf(stderr, "\ngot:\n%s\nexpected:\n%s\n", out, expect);
  CU_ASSERT_STRING_EQUAL(out, expect);
  free(out);
  weir_metrics_destroy(m);
}

static void test_register_rules(void) {
  weir_metrics *m = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_create(&m), WEIR_OK);
  weir_metric *x = NULL, *y = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "x_total", "h", WEIR_METRIC_COUNTER, NULL, 0, NULL,
                                         &x), WEIR_OK);
  /* Same name and labels: the same metric. */
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "x_total", "h", WEIR_METRIC_COUNTER, NULL, 0, "",
                                         &y), WEIR_OK);
  CU_ASSERT_PTR_EQUAL(x, y);
  /* Same family, another type: refused, whatever the labels. */
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "x_total", "h", WEIR_METRIC_GAUGE, NULL, 0, NULL,
                                         &y), WEIR_E_EXISTS);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "x_total", "h", WEIR_METRIC_GAUGE, NULL, 0,
                                         "a=\"b\"", &y), WEIR_E_EXISTS);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "bad name", "h", WEIR_METRIC_GAUGE, NULL, 0, NULL,
                                         &y), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "9lives", "h", WEIR_METRIC_GAUGE, NULL, 0, NULL,
                                         &y), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "t", "h", (weir_metric_type)9, NULL, 0, NULL, &y),
                   WEIR_E_INVAL);
  double bad[] = {1.0, 0.5};
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "hh", "h", WEIR_METRIC_HISTOGRAM, bad, 2, NULL, &y),
                   WEIR_E_INVAL);
  weir_metrics_destroy(m);
}

static void test_values(void) {
  weir_metrics *m = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_create(&m), WEIR_OK);
  weir_metric *c, *g, *h;
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "c_total", "c", WEIR_METRIC_COUNTER, NULL, 0, NULL,
                                         &c), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "g", "g", WEIR_METRIC_GAUGE, NULL, 0, NULL, &g),
                   WEIR_OK);
  double buckets[] = {0.1, 1.0};
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "h_seconds", "h", WEIR_METRIC_HISTOGRAM, buckets, 2,
                                         "k=\"v\"", &h), WEIR_OK);
  weir_metric_record(c, 2);
  weir_metric_record(c, -5); /* counters never go down */
  weir_metric_add(c, 1.5);
  CU_ASSERT_DOUBLE_EQUAL(weir_metric_value(c), 3.5, 1e-12);
  weir_metric_record(g, 4);
  weir_metric_add(g, -6);
  CU_ASSERT_DOUBLE_EQUAL(weir_metric_value(g), -2, 1e-12);
  weir_metric_record(h, 0.05);
  weir_metric_record(h, 0.1); /* upper bounds are inclusive */
  weir_metric_record(h, 0.5);
  weir_metric_record(h, 30);
  CU_ASSERT_DOUBLE_EQUAL(weir_metric_value(h), 4, 1e-12);
  char *out = render(m);
  WT_ASSERT_STR_CONTAINS(out, "weir_c_total 3.5\n");
  WT_ASSERT_STR_CONTAINS(out, "weir_g -2\n");
  free(out);
  /* Every digit a double needs to read back: a timestamp keeps its fraction. */
  weir_metric_record(g, 1795476746.25);
  out = render(m);
  WT_ASSERT_STR_CONTAINS(out, "weir_g 1795476746.25\n");
  WT_ASSERT_STR_CONTAINS(out, "weir_h_seconds_bucket{k=\"v\",le=\"0.1\"} 2\n");
  WT_ASSERT_STR_CONTAINS(out, "weir_h_seconds_bucket{k=\"v\",le=\"1\"} 3\n");
  WT_ASSERT_STR_CONTAINS(out, "weir_h_seconds_bucket{k=\"v\",le=\"+Inf\"} 4\n");
  WT_ASSERT_STR_CONTAINS(out, "weir_h_seconds_sum{k=\"v\"} 30.65\n");
  WT_ASSERT_STR_CONTAINS(out, "weir_h_seconds_count{k=\"v\"} 4\n");
  WT_ASSERT_STR_CONTAINS(out, "# TYPE weir_h_seconds histogram\n");
  free(out);
  weir_metrics_destroy(m);
}

static void test_default_buckets_and_help_escape(void) {
  weir_metrics *m = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_create(&m), WEIR_OK);
  weir_metric *h;
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "lat_seconds", "a\\b\nc", WEIR_METRIC_HISTOGRAM,
                                         NULL, 0, NULL, &h), WEIR_OK);
  weir_metric_record(h, 0.0005);
  char *out = render(m);
  WT_ASSERT_STR_CONTAINS(out, "# HELP weir_lat_seconds a\\\\b\\nc\n");
  WT_ASSERT_STR_CONTAINS(out, "weir_lat_seconds_bucket{le=\"0.001\"} 1\n");
  WT_ASSERT_INT_EQ(count_occurrences(out, "weir_lat_seconds_bucket{"),
                   weir_metrics_num_latency_buckets + 1);
  CU_ASSERT_DOUBLE_EQUAL(weir_metrics_latency_buckets[0], 0.001, 1e-12);
  free(out);
  weir_metrics_destroy(m);
}

static void *get_process(void *arg) {
  *(weir_metrics **)arg = weir_metrics_process();
  return NULL;
}

/* The process-wide registry is one object whichever thread asks first, and usable. */
static void test_process_registry(void) {
  enum { N = 8 };
  pthread_t th[N];
  weir_metrics *got[N];
  for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, get_process, &got[i]);
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got[0]);
  for (int i = 1; i < N; i++) CU_ASSERT_PTR_EQUAL(got[i], got[0]);
  CU_ASSERT_PTR_EQUAL(weir_metrics_process(), got[0]);
  weir_metric *c = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_register(got[0], "proc_total", "p", WEIR_METRIC_COUNTER, NULL,
                                         0, NULL, &c), WEIR_OK);
  weir_metric_add(c, 2);
  char *out = render(got[0]);
  WT_ASSERT_STR_CONTAINS(out, "weir_proc_total 2\n");
  free(out);
}

/* Registry labels go on every sample (counters, gauges, each histogram line), first, escaped. */
static void test_registry_labels(void) {
  weir_metrics *m = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_create(&m), WEIR_OK);
  weir_metric *c, *g, *h;
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "req_total", "R", WEIR_METRIC_COUNTER, NULL, 0,
                                         "code=\"200\"", &c), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "up", "U", WEIR_METRIC_GAUGE, NULL, 0, NULL, &g),
                   WEIR_OK);
  double bk[] = {1};
  WT_ASSERT_INT_EQ(weir_metrics_register(m, "lat_seconds", "L", WEIR_METRIC_HISTOGRAM, bk, 1,
                                         NULL, &h), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_metrics_set_label(m, "model_name", "first"), WEIR_OK);
  /* A second call replaces the value; an odd value is escaped. */
  WT_ASSERT_INT_EQ(weir_metrics_set_label(m, "model_name", "a\"b\\c\nd"), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_metrics_set_label(m, "bad-key", "x"), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_metrics_set_label(m, "__reserved", "x"), WEIR_E_INVAL);
  weir_metric_record(c, 2);
  weir_metric_record(g, 1);
  weir_metric_record(h, 0.5);
  char *out = render(m);
  const char *expect =
      "# HELP weir_req_total R\n# TYPE weir_req_total counter\n"
      "weir_req_total{model_name=\"a\\\"b\\\\c\\nd\",code=\"200\"} 2\n"
      "# HELP weir_up U\n# TYPE weir_up gauge\n"
      "weir_up{model_name=\"a\\\"b\\\\c\\nd\"} 1\n"
      "# HELP weir_lat_seconds L\n# TYPE weir_lat_seconds histogram\n"
      "weir_lat_seconds_bucket{model_name=\"a\\\"b\\\\c\\nd\",le=\"1\"} 1\n"
      "weir_lat_seconds_bucket{model_name=\"a\\\"b\\\\c\\nd\",le=\"+Inf\"} 1\n"
      "weir_lat_seconds_sum{model_name=\"a\\\"b\\\\c\\nd\"} 0.5\n"
      "weir_lat_seconds_count{model_name=\"a\\\"b\\\\c\\nd\"} 1\n";
  if (strcmp(out, expect)) fprintf(stderr, "\ngot:\n%s\nexpected:\n%s\n", out, expect);
  CU_ASSERT_STRING_EQUAL(out, expect);
  free(out);
  for (int i = 1; i < WEIR_METRICS_MAX_LABELS; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d", i);
    WT_ASSERT_INT_EQ(weir_metrics_set_label(m, key, "v"), WEIR_OK);
  }
  WT_ASSERT_INT_EQ(weir_metrics_set_label(m, "one_too_many", "v"), WEIR_E_NOSPACE);
  weir_metrics_destroy(m);
}

/* Reads one sample's value from a rendered page; -1 when absent. */
static double sample(const char *page, const char *line_start) {
  const char *p = page;
  size_t n = strlen(line_start);
  while ((p = strstr(p, line_start))) {
    if ((p == page || p[-1] == '\n') && (p[n] == ' ' || p[n] == '{')) {
      const char *sp = strchr(p, ' ');
      return sp ? strtod(sp + 1, NULL) : -1;
    }
    p += n;
  }
  return -1;
}

/* The process_* families read /proc: plausible values that move the right way. */
static void test_process_collector(void) {
  weir_metrics *m = NULL;
  WT_ASSERT_INT_EQ(weir_metrics_create(&m), WEIR_OK);
  char *out = render(m);
  CU_ASSERT(strstr(out, "process_") == NULL); /* off unless enabled */
  free(out);
  weir_metrics_enable_process(m);
  WT_ASSERT_INT_EQ(weir_metrics_set_label(m, "model_name", "tiny"), WEIR_OK);
  out = render(m);
  CU_ASSERT(strstr(out, "# TYPE process_cpu_seconds_total counter\n") != NULL);
  CU_ASSERT(strstr(out, "process_open_fds{model_name=\"tiny\"} ") != NULL);
  double cpu0 = sample(out, "process_cpu_seconds_total");
  double rss = sample(out, "process_resident_memory_bytes");
  double vsz = sample(out, "process_virtual_memory_bytes");
  double fds = sample(out, "process_open_fds");
  double maxfds = sample(out, "process_max_fds");
  double start = sample(out, "process_start_time_seconds");
  free(out);
  CU_ASSERT(cpu0 >= 0);
  CU_ASSERT(rss > 1 << 20 && vsz >= rss);
  CU_ASSERT(fds >= 3 && (maxfds < 0 || fds <= maxfds));
  time_t now = time(NULL);
  /* To the second (btime is whole seconds): a value rounded to fewer digits would miss. */
  CU_ASSERT(start > (double)now - 3600 && start <= (double)now + 1);
  /* Two more descriptors open: the count follows. Burn CPU: the seconds grow. */
  FILE *f1 = fopen("/dev/null", "r"), *f2 = fopen("/dev/null", "r");
  volatile double acc = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  do {
    for (int i = 0; i < 100000; i++) acc += i * 1e-9;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  } while ((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 < 0.05);
  (void)acc;
  out = render(m);
  WT_ASSERT_INT_EQ(sample(out, "process_open_fds"), fds + 2);
  CU_ASSERT(sample(out, "process_cpu_seconds_total") > cpu0);
  free(out);
  fclose(f1);
  fclose(f2);
  weir_metrics_destroy(m);
}

/* The process registry says which build it is. */
static void test_build_info(void) {
  weir_metrics *p = weir_metrics_process();
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  char *out = render(p);
  char want[128];
  snprintf(want, sizeof want, "weir_build_info{version=\"%s\",abi_version=\"%d.%d\"} 1\n",
           WEIR_VERSION, WEIR_ABI_MAJOR, WEIR_ABI_MINOR);
  WT_ASSERT_STR_CONTAINS(out, want);
  WT_ASSERT_STR_CONTAINS(out, "process_resident_memory_bytes ");
  free(out);
}

int main(void) {
  static const wt_test tests[] = {
      {"family_grouping", test_family_grouping},
      {"register_rules", test_register_rules},
      {"values", test_values},
      {"default_buckets_and_help_escape", test_default_buckets_and_help_escape},
      {"process_registry", test_process_registry},
      {"registry_labels", test_registry_labels},
      {"process_collector", test_process_collector},
      {"build_info", test_build_info},
      {NULL, NULL},
  };
  return wt_run_suite("metrics", tests);
}
