/* weir SDK: response caches (plugin kind WEIR_PLUGIN_CACHE). Since 1.6.
 *
 * A cache plugin is a byte store the server keeps finished answers in, so that a repeated
 * request is answered without running the model (docs/response-cache.md). The server owns
 * everything that decides what an answer is: it builds the keys (a hash of the scope and of
 * everything that changes the answer, as text: "weir:v1:<scope>:<hash>"), serializes the
 * recorded answer into the value and decides whether a request may be served or stored. The
 * plugin only stores, finds, expires and evicts bytes. Keys are printable ASCII without
 * spaces, at most 512 bytes; values are opaque bytes.
 *
 * Threads. Every call may come from any of the server's worker threads at once (never from
 * its event loop, so a call may block on the network); a plugin is thread-safe. A call should
 * still come back quickly: a remote store bounds its waits (its own timeouts) and, when its
 * backend is down, fails fast with WEIR_E_IO rather than retrying in the call. The server
 * counts such failures and answers without the cache; it never turns them into an error a
 * client sees.
 *
 * Ownership. Keys and values passed in are borrowed for the call. A value found by get is
 * handed to the caller's sink, borrowed for the sink's call only (the sink copies it). */
#ifndef WEIR_CACHE_H
#define WEIR_CACHE_H

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Receives a value found by get: `data` (len bytes) is borrowed for this call only. Called at
 * most once per get, on the thread that called get, before get returns. */
typedef void (*weir_cache_sink_fn)(void *arg, const void *data, size_t len);

typedef struct weir_cache_ops {
  uint32_t struct_size; /* sizeof(weir_cache_ops) the plugin was built with. Since 1.6. */

  /* Looks `key` up. Returns WEIR_OK after handing the value to sink(arg, ...), or
   * WEIR_E_NOTFOUND when there is none (never stored, expired or evicted), or WEIR_E_IO when
   * the backend cannot be reached (then sink is not called). Mandatory. Since 1.6. */
  int (*get)(void *self, const char *key, size_t key_len, weir_cache_sink_fn sink, void *arg);

  /* Stores `value` under `key`, replacing what was there, for ttl_ms milliseconds (> 0).
   * A store bounded by size may evict other entries to make room (least recently used
   * first) and may refuse a value larger than it holds at all (WEIR_E_RANGE). WEIR_OK,
   * WEIR_E_IO (backend down), WEIR_E_NOMEM. Mandatory. Since 1.6. */
  int (*put)(void *self, const char *key, size_t key_len, const void *value, size_t len,
             int64_t ttl_ms);

  /* Removes every entry whose key begins with `prefix` (prefix_len 0: every entry this
   * server's keys may name, i.e. those beginning "weir:"); *removed (may be NULL) receives
   * how many. WEIR_OK or WEIR_E_IO. Mandatory. Since 1.6. */
  int (*clear)(void *self, const char *prefix, size_t prefix_len, int64_t *removed);

  /* WEIR_CACHE_* bits. Since 1.7 (a plugin built before reads as 0). */
  uint32_t flags;
} weir_cache_ops;

/* The plugin's calls never block on I/O (an in-process store): the server may call get on
 * its event loop, so that a front-index hit (docs/response-cache.md) asks the store whether
 * the entry is still there instead of trusting it for a while. Since 1.7. */
#define WEIR_CACHE_NONBLOCKING 1u

#ifdef __cplusplus
}
#endif
#endif
