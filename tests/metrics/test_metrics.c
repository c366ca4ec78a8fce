/* The Prometheus registry: registration rules, recording semantics and the text format. */
#include <pthread.h>
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

int main(void) {
  static const wt_test tests[] = {
      {"family_grouping", test_family_grouping},
      {"register_rules", test_register_rules},
      {"values", test_values},
      {"default_buckets_and_help_escape", test_default_buckets_and_help_escape},
      {"process_registry", test_process_registry},
      {NULL, NULL},
  };
  return wt_run_suite("metrics", tests);
}
