/* Host services: what a plugin may ask of the server, per instance. Memory is accounted to
 * the instance (so a leak shows at unload), log lines carry the plugin's name, metrics get a
 * plugin="<name>" label, and parallel_for runs on the shared CPU pool. */
#include "plugin/host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define HOST(ctx) ((weir__plugin_host *)(ctx))
#define DELETED ((void *)1)

static void h_log(void *ctx, weir_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weir_logv(level, HOST(ctx)->component, fmt, ap);
  va_end(ap);
}

/* Each block carries a header just below the aligned pointer: the malloc'd base and the
 * size, so free can account it without a table. */
typedef struct block_hdr {
  void *base;
  size_t size;
} block_hdr;

static void *h_alloc(void *ctx, size_t size, size_t align) {
  if (align == 0) align = 16;
  if (align & (align - 1)) return NULL;
  if (align < sizeof(block_hdr)) align = sizeof(block_hdr);
  if (size > SIZE_MAX - align - sizeof(block_hdr)) return NULL;
  char *base = malloc(size + align + sizeof(block_hdr));
  if (!base) return NULL;
  uintptr_t p = ((uintptr_t)base + sizeof(block_hdr) + align - 1) & ~(uintptr_t)(align - 1);
  block_hdr *h = (block_hdr *)p - 1;
  h->base = base;
  h->size = size;
  atomic_fetch_add(&HOST(ctx)->host_bytes, (int64_t)size);
  return (void *)p;
}

static void h_free(void *ctx, void *ptr) {
  if (!ptr) return;
  block_hdr *h = (block_hdr *)ptr - 1;
  atomic_fetch_sub(&HOST(ctx)->host_bytes, (int64_t)h->size);
  free(h->base);
}

/* ---- device memory: an open-addressing table of live allocations -------------------------- */

static size_t ptr_hash(void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static int tab_insert(weir__plugin_host *h, void *ptr, size_t size);

static int tab_grow(weir__plugin_host *h) {
  size_t ncap = h->dev_cap ? h->dev_cap * 2 : 64;
  weir__dev_alloc *old = h->dev_tab;
  size_t ocap = h->dev_cap;
  weir__dev_alloc *t = calloc(ncap, sizeof *t);
  if (!t) return WEIR_E_NOMEM;
  h->dev_tab = t;
  h->dev_cap = ncap;
  h->dev_used = 0;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].ptr && old[i].ptr != DELETED) tab_insert(h, old[i].ptr, old[i].size);
  free(old);
  return WEIR_OK;
}

static int tab_insert(weir__plugin_host *h, void *ptr, size_t size) {
  if ((h->dev_used + 1) * 2 > h->dev_cap && tab_grow(h) != WEIR_OK) return WEIR_E_NOMEM;
  size_t i = ptr_hash(ptr, h->dev_cap);
  while (h->dev_tab[i].ptr && h->dev_tab[i].ptr != DELETED) i = (i + 1) & (h->dev_cap - 1);
  if (!h->dev_tab[i].ptr) h->dev_used++;
  h->dev_tab[i].ptr = ptr;
  h->dev_tab[i].size = size;
  return WEIR_OK;
}

static int tab_remove(weir__plugin_host *h, void *ptr, size_t *size) {
  if (!h->dev_cap) return -1;
  size_t i = ptr_hash(ptr, h->dev_cap);
  while (h->dev_tab[i].ptr) {
    if (h->dev_tab[i].ptr == ptr) {
      *size = h->dev_tab[i].size;
      h->dev_tab[i].ptr = DELETED;
      return 0;
    }
    i = (i + 1) & (h->dev_cap - 1);
  }
  return -1;
}

static const weir_device_ops *dev_ops(const weir__plugin_host *h) {
  return h->device ? (const weir_device_ops *)h->device->ops : NULL;
}

static int h_device_alloc(void *ctx, size_t size, void **ptr) {
  weir__plugin_host *h = HOST(ctx);
  const weir_device_ops *ops = dev_ops(h);
  if (!ops) return WEIR_E_NOTSUP;
  void *p = NULL;
  int rc = ops->alloc(h->device->self, size, &p);
  if (rc != WEIR_OK) return rc;
  pthread_mutex_lock(&h->dev_lock);
  rc = tab_insert(h, p, size);
  pthread_mutex_unlock(&h->dev_lock);
  if (rc != WEIR_OK) {
    ops->free(h->device->self, p);
    return rc;
  }
  atomic_fetch_add(&h->device_bytes, (int64_t)size);
  *ptr = p;
  return WEIR_OK;
}

static void h_device_free(void *ctx, void *ptr) {
  weir__plugin_host *h = HOST(ctx);
  const weir_device_ops *ops = dev_ops(h);
  if (!ptr || !ops) return;
  size_t size = 0;
  pthread_mutex_lock(&h->dev_lock);
  int found = tab_remove(h, ptr, &size) == 0;
  pthread_mutex_unlock(&h->dev_lock);
  if (!found) {
    weir_log(WEIR_LOG_ERROR, h->component,
             "device_free of %p, which device_alloc did not return (ignored)", ptr);
    return;
  }
  atomic_fetch_sub(&h->device_bytes, (int64_t)size);
  ops->free(h->device->self, ptr);
}

static void h_parallel_for(void *ctx, int64_t n, int64_t grain, weir_parallel_fn fn,
                           void *arg) {
  weir_threadpool_parallel_for(HOST(ctx)->pool, n, grain, fn, arg);
}

static int h_num_threads(void *ctx) { return weir_threadpool_size(HOST(ctx)->pool); }

static int h_metric_register(void *ctx, const weir_metric_desc *d, weir_metric **out) {
  weir__plugin_host *h = HOST(ctx);
  if (!d || !d->name || !out) return WEIR_E_INVAL;
  weir_metrics *m = h->metrics ? h->metrics : weir_metrics_process();
  if (!m) return WEIR_E_NOMEM;
  char labels[96];
  snprintf(labels, sizeof labels, "plugin=\"%s\"", h->name);
  return weir_metrics_register(m, d->name, d->help ? d->help : "", d->type, d->buckets,
                               d->num_buckets, labels, out);
}

static void h_metric_record(void *ctx, weir_metric *m, double v) {
  (void)ctx;
  if (m) weir_metric_record(m, v);
}

static void *h_device_handle(void *ctx, const char *name) {
  const weir__plugin_host *h = HOST(ctx);
  const weir_device_ops *ops = dev_ops(h);
  if (!ops || !name) return NULL;
  if (ops->struct_size < offsetof(weir_device_ops, native_handle) + sizeof ops->native_handle ||
      !ops->native_handle)
    return NULL;
  return ops->native_handle(h->device->self, name);
}

weir__plugin_host *weir__plugin_host_create(const char *name, weir_plugin_kind kind,
                                            weir_metrics *metrics, const weir_plugin *device,
                                            weir_threadpool *pool) {
  weir__plugin_host *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  if (pthread_mutex_init(&h->dev_lock, NULL) != 0) {
    free(h);
    return NULL;
  }
  snprintf(h->name, sizeof h->name, "%s", name);
  snprintf(h->component, sizeof h->component, "plugin:%s", name);
  h->metrics = metrics;
  h->device = kind == WEIR_PLUGIN_DEVICE ? NULL : device;
  h->pool = pool;
  weir_host *t = &h->host;
  t->struct_size = sizeof *t;
  t->abi_minor = WEIR_ABI_MINOR;
  t->ctx = h;
  t->log = h_log;
  t->alloc = h_alloc;
  t->free = h_free;
  /* A device plugin is the allocator; it gets no device_alloc of its own. */
  t->device_alloc = h->device ? h_device_alloc : NULL;
  t->device_free = h->device ? h_device_free : NULL;
  t->parallel_for = h_parallel_for;
  t->num_threads = h_num_threads;
  t->metric_register = h_metric_register;
  t->metric_record = h_metric_record;
  t->device_handle = h_device_handle;
  return h;
}

void weir__plugin_host_destroy(weir__plugin_host *h) {
  if (!h) return;
  pthread_mutex_destroy(&h->dev_lock);
  free(h->dev_tab);
  free(h);
}
