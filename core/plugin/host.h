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
} weir__plugin_host;

/* Creates the table for one instance. Returns NULL when out of memory. */
weir__plugin_host *weir__plugin_host_create(const char *name, weir_plugin_kind kind,
                                            weir_metrics *metrics, const weir_plugin *device,
                                            weir_threadpool *pool);
void weir__plugin_host_destroy(weir__plugin_host *h);

#endif
