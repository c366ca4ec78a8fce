/* cache/memory: the embedded response cache (docs/response-cache.md).
 *
 * A hash table of entries bounded by bytes (max_bytes counts keys, values and the per-entry
 * bookkeeping), least recently used first out when a new entry needs room, each entry
 * expiring at its own deadline (checked when it is read, and expired entries are the first
 * evicted as the LRU walk meets them). One mutex guards everything: a call does a hash, a
 * memcmp and a copy, so contention stays short next to the work a hit saves.
 *
 * Thread-safe. Memory comes from malloc (values are many and short-lived; the bound is
 * enforced by the plugin's own count, reported as the cache_bytes gauge). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weir/cache.h"

typedef struct entry {
  struct entry *hnext;          /* bucket chain */
  struct entry *prev, *next;    /* LRU list: head = most recent */
  uint64_t hash;
  int64_t expires_ms;
  size_t key_len, len;
  char *key;                    /* key_len bytes, then the value, in the same allocation */
} entry;

#define ENTRY_OVERHEAD (sizeof(entry) + 16)

typedef struct mem_cache {
  const weir_host *host;
  pthread_mutex_t lock;
  entry **buckets;
  size_t num_buckets;           /* a power of two */
  entry *head, *tail;
  int64_t max_bytes, bytes, entries;
  weir_metric *m_entries, *m_bytes, *m_evictions, *m_expired;
} mem_cache;

static const weir_option_desc k_options[] = {
    {.key = "max_bytes", .type = WEIR_OPT_INT, .def_int = 256ll << 20, .min = 4096,
     .max = (double)(1ll << 42), .help = "bytes of keys and values kept at most (LRU beyond)"},
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The keys are already SHA-256 digests (in hex) made by the host, so a fast hash spreads
 * them well: eight bytes a step, not byte-wise FNV-1a (a dependent multiply per byte of a
 * ~200-byte key, on every lookup; the front index probes on every exact hit). */
static uint64_t hash_key(const char *k, size_t n) {
  uint64_t h = 1469598103934665603ull ^ n;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, k, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 32;
    k += 8;
    n -= 8;
  }
  uint64_t w = 0;
  memcpy(&w, k, n);
  h = (h ^ w) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 32);
}

static size_t entry_bytes(const entry *e) { return ENTRY_OVERHEAD + e->key_len + e->len; }

static void lru_unlink(mem_cache *c, entry *e) {
  if (e->prev) e->prev->next = e->next;
  else c->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else c->tail = e->prev;
  e->prev = e->next = NULL;
}

static void lru_front(mem_cache *c, entry *e) {
  e->prev = NULL;
  e->next = c->head;
  if (c->head) c->head->prev = e;
  c->head = e;
  if (!c->tail) c->tail = e;
}

static entry **slot_of(mem_cache *c, uint64_t h, const char *key, size_t key_len) {
  entry **pp = &c->buckets[h & (c->num_buckets - 1)];
  while (*pp && !((*pp)->hash == h && (*pp)->key_len == key_len &&
                  !memcmp((*pp)->key, key, key_len)))
    pp = &(*pp)->hnext;
  return pp;
}

/* Unlinks e from its bucket and the LRU list and frees it. Under the lock. */
static void remove_entry(mem_cache *c, entry *e) {
  entry **pp = slot_of(c, e->hash, e->key, e->key_len);
  if (*pp == e) *pp = e->hnext;
  lru_unlink(c, e);
  c->bytes -= (int64_t)entry_bytes(e);
  c->entries--;
  free(e);
}

static void record_sizes(mem_cache *c) {
  c->host->metric_record(c->host->ctx, c->m_entries, (double)c->entries);
  c->host->metric_record(c->host->ctx, c->m_bytes, (double)c->bytes);
}

static void grow(mem_cache *c) {
  if ((size_t)c->entries < c->num_buckets) return;
  size_t n = c->num_buckets * 2;
  entry **b = calloc(n, sizeof *b);
  if (!b) return; /* longer chains, still correct */
  for (size_t i = 0; i < c->num_buckets; i++) {
    entry *e = c->buckets[i];
    while (e) {
      entry *nx = e->hnext;
      e->hnext = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
      e = nx;
    }
  }
  free(c->buckets);
  c->buckets = b;
  c->num_buckets = n;
}

static int mem_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  int64_t max_bytes;
  int rc = weir_option_int(host, "max_bytes", &max_bytes);
  if (rc != WEIR_OK) return rc;
  mem_cache *c = calloc(1, sizeof *c);
  if (!c) return WEIR_E_NOMEM;
  c->host = host;
  c->max_bytes = max_bytes;
  c->num_buckets = 1024;
  if (!(c->buckets = calloc(c->num_buckets, sizeof *c->buckets))) goto free_c;
  if (pthread_mutex_init(&c->lock, NULL)) goto free_buckets;
  const struct {
    weir_metric_desc d;
    weir_metric **out;
  } defs[] = {
      {{"cache_entries", "Response-cache entries held.", WEIR_METRIC_GAUGE, NULL, 0},
       &c->m_entries},
      {{"cache_bytes", "Bytes of response-cache entries held (keys, values, bookkeeping).",
        WEIR_METRIC_GAUGE, NULL, 0}, &c->m_bytes},
      {{"cache_evictions_total", "Response-cache entries evicted to make room (LRU).",
        WEIR_METRIC_COUNTER, NULL, 0}, &c->m_evictions},
      {{"cache_expired_total", "Response-cache entries dropped because their TTL passed.",
        WEIR_METRIC_COUNTER, NULL, 0}, &c->m_expired},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
    if ((rc = host->metric_register(host->ctx, &defs[i].d, defs[i].out)) != WEIR_OK)
      goto destroy_lock;
  *self = c;
  return WEIR_OK;

destroy_lock:
  pthread_mutex_destroy(&c->lock);
free_buckets:
  free(c->buckets);
free_c:
  free(c);
  return rc != WEIR_OK ? rc : WEIR_E_NOMEM;
}

static void mem_fini(void *self) {
  mem_cache *c = self;
  entry *e = c->head;
  while (e) {
    entry *n = e->next;
    free(e);
    e = n;
  }
  free(c->buckets);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static int mem_get(void *self, const char *key, size_t key_len, weir_cache_sink_fn sink,
                   void *arg) {
  mem_cache *c = self;
  uint64_t h = hash_key(key, key_len);
  int rc = WEIR_E_NOTFOUND;
  pthread_mutex_lock(&c->lock);
  entry *e = *slot_of(c, h, key, key_len);
  if (e && e->expires_ms <= now_ms()) {
    remove_entry(c, e);
    c->host->metric_record(c->host->ctx, c->m_expired, 1);
    record_sizes(c);
    e = NULL;
  }
  if (e) {
    lru_unlink(c, e);
    lru_front(c, e);
    /* The sink copies under the lock: the entry cannot be evicted while it reads. */
    sink(arg, e->key + e->key_len, e->len);
    rc = WEIR_OK;
  }
  pthread_mutex_unlock(&c->lock);
  return rc;
}

static int mem_put(void *self, const char *key, size_t key_len, const void *value, size_t len,
                   int64_t ttl_ms) {
  mem_cache *c = self;
  if (ttl_ms <= 0) return WEIR_E_INVAL;
  const size_t need = ENTRY_OVERHEAD + key_len + len;
  if ((int64_t)need > c->max_bytes) return WEIR_E_RANGE;
  entry *n = malloc(sizeof *n + key_len + len);
  if (!n) return WEIR_E_NOMEM;
  memset(n, 0, sizeof *n);
  n->key = (char *)(n + 1);
  memcpy(n->key, key, key_len);
  memcpy(n->key + key_len, value, len);
  n->key_len = key_len;
  n->len = len;
  n->hash = hash_key(key, key_len);
  const int64_t now = now_ms();
  n->expires_ms = now + ttl_ms;
  int64_t evicted = 0, expired = 0;
  pthread_mutex_lock(&c->lock);
  entry *old = *slot_of(c, n->hash, key, key_len);
  if (old) remove_entry(c, old);
  while (c->bytes + (int64_t)need > c->max_bytes && c->tail) {
    if (c->tail->expires_ms <= now) expired++;
    else evicted++;
    remove_entry(c, c->tail);
  }
  entry **pp = slot_of(c, n->hash, key, key_len);
  *pp = n;
  lru_front(c, n);
  c->bytes += (int64_t)need;
  c->entries++;
  grow(c);
  if (evicted) c->host->metric_record(c->host->ctx, c->m_evictions, (double)evicted);
  if (expired) c->host->metric_record(c->host->ctx, c->m_expired, (double)expired);
  record_sizes(c);
  pthread_mutex_unlock(&c->lock);
  return WEIR_OK;
}

static int mem_clear(void *self, const char *prefix, size_t prefix_len, int64_t *removed) {
  mem_cache *c = self;
  int64_t n = 0;
  pthread_mutex_lock(&c->lock);
  entry *e = c->head;
  while (e) {
    entry *nx = e->next;
    if (e->key_len >= prefix_len && !memcmp(e->key, prefix, prefix_len)) {
      remove_entry(c, e);
      n++;
    }
    e = nx;
  }
  record_sizes(c);
  pthread_mutex_unlock(&c->lock);
  if (removed) *removed = n;
  return WEIR_OK;
}

static const weir_cache_ops k_ops = {
    .struct_size = sizeof(weir_cache_ops), .get = mem_get, .put = mem_put, .clear = mem_clear,
    .flags = WEIR_CACHE_NONBLOCKING};

static const char *const k_any_device[] = {"*", NULL};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_CACHE,
    .name = "memory",
    .version = WEIR_PLUGIN_VERSION,
    .description = "in-process response cache: bounded by bytes, LRU and TTL",
    .devices = WEIR_DEVICE_CPU,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = mem_init,
    .fini = mem_fini,
    .ops = &k_ops,
    .device_names = k_any_device,
};

WEIR_PLUGIN_EXPORT(k_desc)
