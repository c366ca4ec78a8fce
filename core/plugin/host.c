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

static const char *opt_type_word(weir_option_type t) {
  switch (t) {
  case WEIR_OPT_BOOL: return "bool";
  case WEIR_OPT_INT: return "int";
  case WEIR_OPT_FLOAT: return "float";
  case WEIR_OPT_STRING: return "string";
  default: return "unknown type";
  }
}

static void h_set_error(void *ctx, const char *fmt, ...) {
  weir__plugin_host *h = HOST(ctx);
  char msg[sizeof h->error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt ? fmt : "", ap);
  va_end(ap);
  weir_log(WEIR_LOG_DEBUG, h->component, "error set: %s", msg);
  pthread_mutex_lock(&h->err_lock);
  memcpy(h->error, msg, sizeof msg);
  h->has_error = 1;
  pthread_mutex_unlock(&h->err_lock);
}

/* A lookup that cannot succeed is the plugin author's mistake, so it is logged as an error
 * and becomes the instance's error message: init then fails with it, naming the key. */
static int option_fail(weir__plugin_host *h, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int option_fail(weir__plugin_host *h, int rc, const char *fmt, ...) {
  char msg[sizeof h->error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  weir_log(WEIR_LOG_ERROR, h->component, "%s", msg);
  h_set_error(h, "%s", msg);
  return rc;
}

static int h_option(void *ctx, const char *key, weir_option_type type, weir_option_value *out) {
  weir__plugin_host *h = HOST(ctx);
  if (!key || !out)
    return option_fail(h, WEIR_E_INVAL, "plugin '%s' read an option with a NULL %s; fix: pass "
                       "the key and a value to fill", h->name, key ? "value pointer" : "key");
  for (int i = 0; i < h->num_opts; i++) {
    const weir_option_desc *o = &h->opt_desc[i];
    if (!o->key || strcmp(o->key, key) != 0) continue;
    if (o->type != type)
      return option_fail(h, WEIR_E_INVAL, "plugin '%s' read option '%s' as %s, but declares it "
                         "as %s; fix: read it with the declared type", h->name, key,
                         opt_type_word(type), opt_type_word(o->type));
    *out = h->opt_vals[i];
    return WEIR_OK;
  }
  char keys[384];
  size_t off = 0;
  keys[0] = 0;
  for (int i = 0; i < h->num_opts && off < sizeof keys; i++)
    off += (size_t)snprintf(keys + off, sizeof keys - off, "%s%s", i ? ", " : "",
                            h->opt_desc[i].key ? h->opt_desc[i].key : "?");
  return option_fail(h, WEIR_E_NOTFOUND, "plugin '%s' read option '%s', which it does not "
                     "declare (it declares %s%s); fix: add it to weir_plugin_desc.options or "
                     "correct the key", h->name, key, h->num_opts ? "" : "none",
                     h->num_opts ? keys : "");
}

void weir__plugin_host_set_options(weir__plugin_host *h, const weir_option_desc *desc,
                                   const weir_option_value *vals, int n) {
  h->opt_desc = desc;
  h->opt_vals = vals;
  h->num_opts = desc && vals && n > 0 ? n : 0;
}

int weir__plugin_host_take_error(weir__plugin_host *h, char *buf, size_t len) {
  if (!h) return 0;
  pthread_mutex_lock(&h->err_lock);
  int had = h->has_error;
  if (had && buf && len) snprintf(buf, len, "%s", h->error);
  h->has_error = 0;
  h->error[0] = 0;
  pthread_mutex_unlock(&h->err_lock);
  return had;
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
  if (pthread_mutex_init(&h->err_lock, NULL) != 0) {
    pthread_mutex_destroy(&h->dev_lock);
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
  t->option = h_option;
  t->set_error = h_set_error;
  return h;
}

void weir__plugin_host_destroy(weir__plugin_host *h) {
  if (!h) return;
  pthread_mutex_destroy(&h->dev_lock);
  pthread_mutex_destroy(&h->err_lock);
  free(h->dev_tab);
  free(h);
}
