/* The Prometheus metrics registry: counters, gauges and histograms, rendered in the text
 * exposition format (version 0.0.4) at /metrics. Every name gets the weir_ prefix. A registry
 * may carry labels that every sample it renders gets (model_name, for fleets of replicas
 * serving several models), and the process registry also renders the standard process_*
 * families and weir_build_info (docs/metrics.md).
 * Thread-safe: any thread may record; render takes a consistent-enough snapshot (each metric
 * is read under the registry lock). Metrics live until weir_metrics_destroy. */
#ifndef WEIR_METRICS_H
#define WEIR_METRICS_H

#include <stddef.h>

#include "weir/plugin.h" /* weir_metric, weir_metric_type */

typedef struct weir_metrics weir_metrics;

/* Most labels weir_metrics_set_label keeps. */
#define WEIR_METRICS_MAX_LABELS 4

/* Buckets (seconds) for request latencies, from 1 ms to 60 s. */
extern const double weir_metrics_latency_buckets[];
extern const int weir_metrics_num_latency_buckets;

int weir_metrics_create(weir_metrics **out);
void weir_metrics_destroy(weir_metrics *m);

/* Registers a metric. `name` is without the weir_ prefix; `labels` is NULL or a fixed label
 * set in exposition syntax without braces (`plugin="paged"`). Registering the same name
 * and labels twice returns the first metric. buckets: ascending upper bounds (NULL: latency
 * buckets); copied. Returns WEIR_E_INVAL for a bad name, WEIR_E_NOMEM. */
int weir_metrics_register(weir_metrics *m, const char *name, const char *help,
                          weir_metric_type type, const double *buckets, int num_buckets,
                          const char *labels, weir_metric **out);
/* Counter: adds v. Gauge: sets v. Histogram: observes v. */
void weir_metric_record(weir_metric *metric, double v);
/* Gauge or counter: adds v (may be negative for a gauge). */
void weir_metric_add(weir_metric *metric, double v);
/* Current value of a counter or gauge, or the count of a histogram. */
double weir_metric_value(const weir_metric *metric);

/* The process-wide registry, created on first use (thread-safe): the HTTP server renders it
 * at /metrics, and the engine hands it to the plugin loader so that plugin metrics appear
 * there too. Returns NULL only when that first allocation fails. Never destroyed. */
weir_metrics *weir_metrics_process(void);

/* Adds the label key="value" to every sample the registry renders: its metrics, the plugins'
 * and the process_* families; a second call with the same key replaces the value. The value
 * is escaped when rendered. WEIR_E_INVAL for a key that is not a Prometheus label name,
 * WEIR_E_NOSPACE past WEIR_METRICS_MAX_LABELS keys, WEIR_E_NOMEM. */
int weir_metrics_set_label(weir_metrics *m, const char *key, const char *value);

/* Renders, after the registry's own metrics, the process_* families of this process
 * (process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds, process_start_time_seconds), read from /proc at each
 * render. The process registry has it on, with a weir_build_info gauge. */
void weir_metrics_enable_process(weir_metrics *m);

/* Renders every metric; *out is malloc'd (caller frees). */
int weir_metrics_render(weir_metrics *m, char **out, size_t *len);

#endif
