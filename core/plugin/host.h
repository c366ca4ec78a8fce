/* The host-services table each plugin instance receives (weir_host), and what backs it.
 * Internal to the loader. */
#ifndef WEIR_PLUGIN_HOST_H
#define WEIR_PLUGIN_HOST_H

#include <pthread.h>
#include <stdatomic.h>

#include "plugin/loader.h"

typedef struct weir__dev_alloc {
  void *ptr;   /* NULL: empty; (void *)1: deleted */
  size_t size;
} weir__dev_alloc;

typedef struct weir__plugin_host {
  weir_host host;          /* handed to init; host.ctx points back here */
  char name[64];
  char component[80];      /* "plugin:<name>" for log lines */
  weir_metrics *metrics;
  const weir_plugin *device; /* backs device_alloc and device_handle; NULL for devices */
  weir_threadpool *pool;
  _Atomic int64_t host_bytes;
  _Atomic int64_t device_bytes;
  /* Device allocations by pointer, so that device_free can account the size. */
  pthread_mutex_t dev_lock;
  weir__dev_alloc *dev_tab;
  size_t dev_cap, dev_used;
  /* What host.option reads: the plugin's declaration and its resolved values (borrowed from
   * the weir_plugin, which outlives this table). */
  const weir_option_desc *opt_desc;
  const weir_option_value *opt_vals;
  int num_opts;
  /* The message of host.set_error, until the host takes it (err_lock guards both). */
  pthread_mutex_t err_lock;
  int has_error;
  char error[512];
} weir__plugin_host;

/* Creates the table for one instance. Returns NULL when out of memory. */
weir__plugin_host *weir__plugin_host_create(const char *name, weir_plugin_kind kind,
                                            weir_metrics *metrics, const weir_plugin *device,
                                            weir_threadpool *pool);
void weir__plugin_host_destroy(weir__plugin_host *h);
/* Lets host.option read the instance's options (both borrowed until destroy). */
void weir__plugin_host_set_options(weir__plugin_host *h, const weir_option_desc *desc,
                                   const weir_option_value *vals, int n);
/* Copies the pending set_error message into buf and clears it: 1 when there was one. */
int weir__plugin_host_take_error(weir__plugin_host *h, char *buf, size_t len);

#endif
