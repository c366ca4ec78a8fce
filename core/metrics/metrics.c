#include "metrics/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double weir_metrics_latency_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                               0.1,   0.15,   0.2,   0.3,  0.5,   0.75, 1.0,
                                               2.5,   5.0,    10.0,  20.0, 60.0};
const int weir_metrics_num_latency_buckets =
    (int)(sizeof weir_metrics_latency_buckets / sizeof weir_metrics_latency_buckets[0]);

struct weir_metric {
  weir_metrics *owner;
  char *name;
  char *help;
  char *labels;
  weir_metric_type type;
  double value;      /* counter or gauge */
  double *buckets;   /* histogram upper bounds */
  unsigned long long *counts; /* per bucket, not cumulative */
  int num_buckets;
  double sum;
  unsigned long long count;
  struct weir_metric *next;
};

struct weir_metrics {
  pthread_mutex_t lock;
  weir_metric *head, *tail;
};

int weir_metrics_create(weir_metrics **out) {
  weir_metrics *m = calloc(1, sizeof *m);
  if (!m) return WEIR_E_NOMEM;
  pthread_mutex_init(&m->lock, NULL);
  *out = m;
  return WEIR_OK;
}

static weir_metrics *g_process;
static pthread_once_t g_process_once = PTHREAD_ONCE_INIT;

static void process_create(void) {
  if (weir_metrics_create(&g_process) != WEIR_OK) g_process = NULL;
}

weir_metrics *weir_metrics_process(void) {
  pthread_once(&g_process_once, process_create);
  return g_process;
}

static void metric_free(weir_metric *x) {
  free(x->name);
  free(x->help);
  free(x->labels);
  free(x->buckets);
  free(x->counts);
  free(x);
}

void weir_metrics_destroy(weir_metrics *m) {
  if (!m) return;
  for (weir_metric *x = m->head, *n; x; x = n) {
    n = x->next;
    metric_free(x);
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static int valid_name(const char *s) {
  if (!s || !*s) return 0;
  for (const char *p = s; *p; p++) {
    int ok = (*p >= 'a' && *p <= 'z') || *p == '_' || (p != s && *p >= '0' && *p <= '9') ||
             (*p >= 'A' && *p <= 'Z') || *p == ':';
    if (!ok) return 0;
  }
  return 1;
}

static int same(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int weir_metrics_register(weir_metrics *m, const char *name, const char *help,
                          weir_metric_type type, const double *buckets, int num_buckets,
                          const char *labels, weir_metric **out) {
  if (!m || !valid_name(name) || !out) return WEIR_E_INVAL;
  if (type != WEIR_METRIC_COUNTER && type != WEIR_METRIC_GAUGE && type != WEIR_METRIC_HISTOGRAM)
    return WEIR_E_INVAL;
  if (labels && !*labels) labels = NULL;
  /* One family has one type and one help text: a second label set of an existing name
   * must agree on the type (Prometheus rejects a family with mixed types). */
  pthread_mutex_lock(&m->lock);
  for (weir_metric *x = m->head; x; x = x->next) {
    if (strcmp(x->name, name)) continue;
    if (x->type != type) {
      pthread_mutex_unlock(&m->lock);
      return WEIR_E_EXISTS;
    }
    if (same(x->labels, labels)) {
      pthread_mutex_unlock(&m->lock);
      *out = x;
      return WEIR_OK;
    }
  }
  pthread_mutex_unlock(&m->lock);

  int rc = WEIR_E_NOMEM;
  weir_metric *x = calloc(1, sizeof *x);
  if (!x) return rc;
  x->owner = m;
  x->type = type;
  x->name = strdup(name);
  x->help = strdup(help ? help : "");
  x->labels = labels ? strdup(labels) : NULL;
  if (!x->name || !x->help || (labels && !x->labels)) goto fail_metric;
  if (type == WEIR_METRIC_HISTOGRAM) {
    if (!buckets || num_buckets <= 0) {
      buckets = weir_metrics_latency_buckets;
      num_buckets = weir_metrics_num_latency_buckets;
    }
    for (int i = 1; i < num_buckets; i++)
      if (!(buckets[i] > buckets[i - 1])) {
        rc = WEIR_E_INVAL;
        goto fail_metric;
      }
    x->buckets = malloc(sizeof(double) * (size_t)num_buckets);
    x->counts = calloc((size_t)num_buckets + 1, sizeof(unsigned long long));
    if (!x->buckets || !x->counts) goto fail_metric;
    memcpy(x->buckets, buckets, sizeof(double) * (size_t)num_buckets);
    x->num_buckets = num_buckets;
  }
  pthread_mutex_lock(&m->lock);
  if (m->tail) m->tail->next = x;
  else m->head = x;
  m->tail = x;
  pthread_mutex_unlock(&m->lock);
  *out = x;
  return WEIR_OK;

fail_metric:
  metric_free(x);
  return rc;
}

void weir_metric_record(weir_metric *x, double v) {
  if (!x) return;
  pthread_mutex_lock(&x->owner->lock);
  switch (x->type) {
  case WEIR_METRIC_COUNTER:
    if (v > 0) x->value += v;
    break;
  case WEIR_METRIC_GAUGE: x->value = v; break;
  case WEIR_METRIC_HISTOGRAM: {
    int i = 0;
    while (i < x->num_buckets && v > x->buckets[i]) i++;
    x->counts[i]++;
    x->sum += v;
    x->count++;
    break;
  }
  }
  pthread_mutex_unlock(&x->owner->lock);
}

void weir_metric_add(weir_metric *x, double v) {
  if (!x || x->type == WEIR_METRIC_HISTOGRAM) return;
  pthread_mutex_lock(&x->owner->lock);
  if (x->type == WEIR_METRIC_GAUGE || v > 0) x->value += v;
  pthread_mutex_unlock(&x->owner->lock);
}

double weir_metric_value(const weir_metric *x) {
  if (!x) return 0;
  pthread_mutex_lock(&x->owner->lock);
  double v = x->type == WEIR_METRIC_HISTOGRAM ? (double)x->count : x->value;
  pthread_mutex_unlock(&x->owner->lock);
  return v;
}

/* A growable string for rendering. */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if (b->p && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
}

static void fmt_double(char *buf, size_t n, double v) {
  if (isinf(v)) snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
  else snprintf(buf, n, "%.9g", v);
}

static void render_one(sbuf *b, const weir_metric *x) {
  char v[64];
  const char *lb = x->labels ? x->labels : "";
  if (x->type != WEIR_METRIC_HISTOGRAM) {
    fmt_double(v, sizeof v, x->value);
    if (*lb) sb_printf(b, "weir_%s{%s} %s\n", x->name, lb, v);
    else sb_printf(b, "weir_%s %s\n", x->name, v);
    return;
  }
  unsigned long long cum = 0;
  for (int i = 0; i <= x->num_buckets; i++) {
    cum += x->counts[i];
    if (i < x->num_buckets) fmt_double(v, sizeof v, x->buckets[i]);
    else snprintf(v, sizeof v, "+Inf");
    sb_printf(b, "weir_%s_bucket{%s%sle=\"%s\"} %llu\n", x->name, lb, *lb ? "," : "", v, cum);
  }
  fmt_double(v, sizeof v, x->sum);
  if (*lb) {
    sb_printf(b, "weir_%s_sum{%s} %s\nweir_%s_count{%s} %llu\n", x->name, lb, v, x->name, lb,
              x->count);
  } else {
    sb_printf(b, "weir_%s_sum %s\nweir_%s_count %llu\n", x->name, v, x->name, x->count);
  }
}

int weir_metrics_render(weir_metrics *m, char **out, size_t *len) {
  if (!m || !out) return WEIR_E_INVAL;
  sbuf b = {0};
  sb_printf(&b, "%s", "");
  pthread_mutex_lock(&m->lock);
  /* The exposition format wants every sample of a family in one group under a single HELP
   * and TYPE. Label sets of one family may have been registered interleaved with other
   * families (a plugin registering per-instance series late), so each family is emitted
   * whole at the position of its first registration. */
  for (weir_metric *x = m->head; x; x = x->next) {
    int seen = 0;
    for (weir_metric *y = m->head; y != x; y = y->next)
      if (!strcmp(y->name, x->name)) {
        seen = 1;
        break;
      }
    if (seen) continue;
    static const char *types[] = {"", "counter", "gauge", "histogram"};
    /* HELP text escapes backslash and newline, as the format requires. */
    sb_printf(&b, "# HELP weir_%s ", x->name);
    for (const char *h = x->help; *h; h++) {
      if (*h == '\\') sb_printf(&b, "\\\\");
      else if (*h == '\n') sb_printf(&b, "\\n");
      else sb_printf(&b, "%c", *h);
    }
    sb_printf(&b, "\n# TYPE weir_%s %s\n", x->name, types[x->type]);
    for (weir_metric *z = x; z; z = z->next)
      if (!strcmp(z->name, x->name)) render_one(&b, z);
  }
  pthread_mutex_unlock(&m->lock);
  if (b.oom) {
    free(b.p);
    return WEIR_E_NOMEM;
  }
  *out = b.p;
  if (len) *len = b.len;
  return WEIR_OK;
}
