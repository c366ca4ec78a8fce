#include "metrics/metrics.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util/buf.h"

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
  /* Labels added to every sample (weir_metrics_set_label), e.g. model_name. */
  char *label_keys[WEIR_METRICS_MAX_LABELS];
  char *label_values[WEIR_METRICS_MAX_LABELS];
  int num_labels;
  int process; /* render the process_* collector */
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
  if (weir_metrics_create(&g_process) != WEIR_OK) {
    g_process = NULL;
    return;
  }
  weir_metrics_enable_process(g_process);
  weir_metric *info = NULL;
  if (weir_metrics_register(g_process, "build_info",
                            "Always 1; the labels name the build: weir's version and the plugin "
                            "ABI it hosts.",
                            WEIR_METRIC_GAUGE, NULL, 0,
                            "version=\"" WEIR_VERSION "\",abi_version=\"" WEIR_STR(WEIR_ABI_MAJOR)
                            "." WEIR_STR(WEIR_ABI_MINOR) "\"",
                            &info) == WEIR_OK)
    weir_metric_record(info, 1);
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
  for (int i = 0; i < m->num_labels; i++) {
    free(m->label_keys[i]);
    free(m->label_values[i]);
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

static void fmt_double(char *buf, size_t n, double v) {
  if (isinf(v)) snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
  else {
    /* The shortest of 15 or 17 digits that reads back as v: fewer digits would round a
     * timestamp such as process_start_time_seconds to tens of seconds. */
    snprintf(buf, n, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
  }
}

/* ---- registry labels ------------------------------------------------------------------- */

static int valid_label_key(const char *s) {
  if (!s || !*s || !strncmp(s, "__", 2)) return 0;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
          (p != s && *p >= '0' && *p <= '9')))
      return 0;
  return 1;
}

/* A label value as the exposition format writes it: backslash, quote and newline escaped. */
static void put_label_value(weir_buf *b, const char *v) {
  for (; *v; v++) {
    if (*v == '\\') weir_buf_puts(b, "\\\\");
    else if (*v == '"') weir_buf_puts(b, "\\\"");
    else if (*v == '\n') weir_buf_puts(b, "\\n");
    else weir_buf_putc(b, *v);
  }
}

int weir_metrics_set_label(weir_metrics *m, const char *key, const char *value) {
  if (!m || !valid_label_key(key) || !value) return WEIR_E_INVAL;
  pthread_mutex_lock(&m->lock);
  int i = 0;
  while (i < m->num_labels && strcmp(m->label_keys[i], key)) i++;
  int rc = WEIR_E_NOSPACE;
  if (i < WEIR_METRICS_MAX_LABELS) {
    char *k = i < m->num_labels ? m->label_keys[i] : strdup(key), *v = strdup(value);
    if (k && v) {
      if (i < m->num_labels) free(m->label_values[i]);
      else m->num_labels++;
      m->label_keys[i] = k;
      m->label_values[i] = v;
      rc = WEIR_OK;
    } else {
      if (i == m->num_labels) free(k);
      free(v);
      rc = WEIR_E_NOMEM;
    }
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

/* The label set of one sample: the registry's labels, then the metric's own, then `extra`
 * (a histogram's le); "" when all are empty, else "{...}". Called under the lock. */
static void put_labels(weir_buf *b, const weir_metrics *m, const char *own, const char *extra) {
  int any = 0;
  for (int i = 0; i < m->num_labels; i++) {
    weir_buf_puts(b, any++ ? "," : "{");
    weir_buf_printf(b, "%s=\"", m->label_keys[i]);
    put_label_value(b, m->label_values[i]);
    weir_buf_putc(b, '"');
  }
  if (own && *own) {
    weir_buf_puts(b, any++ ? "," : "{");
    weir_buf_puts(b, own);
  }
  if (extra && *extra) {
    weir_buf_puts(b, any++ ? "," : "{");
    weir_buf_puts(b, extra);
  }
  if (any) weir_buf_putc(b, '}');
}

/* ---- rendering ------------------------------------------------------------------------- */

static void render_one(weir_buf *b, const weir_metrics *m, const weir_metric *x) {
  char v[64], le[96];
  if (x->type != WEIR_METRIC_HISTOGRAM) {
    fmt_double(v, sizeof v, x->value);
    weir_buf_printf(b, "weir_%s", x->name);
    put_labels(b, m, x->labels, NULL);
    weir_buf_printf(b, " %s\n", v);
    return;
  }
  unsigned long long cum = 0;
  for (int i = 0; i <= x->num_buckets; i++) {
    cum += x->counts[i];
    if (i < x->num_buckets) fmt_double(v, sizeof v, x->buckets[i]);
    else snprintf(v, sizeof v, "+Inf");
    snprintf(le, sizeof le, "le=\"%s\"", v);
    weir_buf_printf(b, "weir_%s_bucket", x->name);
    put_labels(b, m, x->labels, le);
    weir_buf_printf(b, " %llu\n", cum);
  }
  fmt_double(v, sizeof v, x->sum);
  weir_buf_printf(b, "weir_%s_sum", x->name);
  put_labels(b, m, x->labels, NULL);
  weir_buf_printf(b, " %s\nweir_%s_count", v, x->name);
  put_labels(b, m, x->labels, NULL);
  weir_buf_printf(b, " %llu\n", x->count);
}

static void put_help(weir_buf *b, const char *prefix, const char *name, const char *help,
                     const char *type) {
  /* HELP text escapes backslash and newline, as the format requires. */
  weir_buf_printf(b, "# HELP %s%s ", prefix, name);
  for (const char *h = help; *h; h++) {
    if (*h == '\\') weir_buf_puts(b, "\\\\");
    else if (*h == '\n') weir_buf_puts(b, "\\n");
    else weir_buf_putc(b, *h);
  }
  weir_buf_printf(b, "\n# TYPE %s%s %s\n", prefix, name, type);
}

/* ---- the process collector --------------------------------------------------------------
 * The process_* families every Prometheus client library exports (same names, so existing
 * dashboards and alerts work), read from /proc at scrape time. A value that cannot be read is
 * left out rather than reported as 0. */

static int read_file(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  return n > 0 ? 0 : -1;
}

static void process_sample(weir_buf *b, const weir_metrics *m, const char *name,
                           const char *help, const char *type, double v) {
  char val[64];
  put_help(b, "", name, help, type);
  fmt_double(val, sizeof val, v);
  weir_buf_puts(b, name);
  put_labels(b, m, NULL, NULL);
  weir_buf_printf(b, " %s\n", val);
}

static void render_process(weir_buf *b, const weir_metrics *m) {
  char stat[2048], line[256];
  const double tick = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
  /* /proc/self/stat: the command name (field 2) may hold spaces, so parse after its ')'. */
  if (tick > 0 && read_file("/proc/self/stat", stat, sizeof stat) == 0) {
    const char *r = strrchr(stat, ')');
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
    long long rss = 0;
    /* Fields 3.. after ')': state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime(14) stime(15) cutime cstime priority nice threads itreal
     * starttime(22) vsize(23) rss(24). */
    if (r && sscanf(r + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d "
                           "%*d %*d %*d %*d %llu %llu %lld", &utime, &stime, &start, &vsize,
                    &rss) == 5) {
      process_sample(b, m, "process_cpu_seconds_total",
                     "Total user and system CPU time spent in seconds.", "counter",
                     (double)(utime + stime) / tick);
      process_sample(b, m, "process_resident_memory_bytes", "Resident memory size in bytes.",
                     "gauge", (double)rss * page);
      process_sample(b, m, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                     "gauge", (double)vsize);
      /* Start time: boot time (btime in /proc/stat) plus the ticks since boot. */
      FILE *f = fopen("/proc/stat", "r");
      unsigned long long btime = 0;
      while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "btime %llu", &btime) == 1) break;
      if (f) fclose(f);
      if (btime)
        process_sample(b, m, "process_start_time_seconds",
                       "Start time of the process since unix epoch in seconds.", "gauge",
                       (double)btime + (double)start / tick);
    }
  }
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') n++;
    closedir(d);
    /* The count includes the directory handle just opened to count them. */
    process_sample(b, m, "process_open_fds", "Number of open file descriptors.", "gauge",
                   (double)(n > 0 ? n - 1 : 0));
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    process_sample(b, m, "process_max_fds", "Maximum number of open file descriptors.",
                   "gauge", (double)rl.rlim_cur);
}

void weir_metrics_enable_process(weir_metrics *m) {
  pthread_mutex_lock(&m->lock);
  m->process = 1;
  pthread_mutex_unlock(&m->lock);
}

int weir_metrics_render(weir_metrics *m, char **out, size_t *len) {
  if (!m || !out) return WEIR_E_INVAL;
  weir_buf b = {0};
  weir_buf_puts(&b, "");
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
    put_help(&b, "weir_", x->name, x->help, types[x->type]);
    for (weir_metric *z = x; z; z = z->next)
      if (!strcmp(z->name, x->name)) render_one(&b, m, z);
  }
  if (m->process) render_process(&b, m);
  pthread_mutex_unlock(&m->lock);
  *out = weir_buf_take(&b, len);
  return *out ? WEIR_OK : WEIR_E_NOMEM;
}
