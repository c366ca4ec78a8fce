/* cache/redis: the response cache shared by every replica, in a Redis server
 * (docs/response-cache.md). Entries are plain Redis strings set with a TTL (SET key value PX
 * ttl); Redis's own maxmemory policy bounds and evicts them (allkeys-lru is what a cache
 * wants). Clearing walks the keys with SCAN MATCH prefix* and UNLINKs them, so a clear never
 * blocks Redis the way KEYS would.
 *
 * Threads: a small pool of synchronous hiredis connections under one mutex; each call takes
 * one connection (opening it when none is idle, at most max_connections at once, waiting
 * for one beyond that) and gives it back. Every connect and command is bounded by
 * connect_timeout_ms and timeout_ms. When Redis cannot be reached the plugin fails fast:
 * for retry_ms after a failure every call returns WEIR_E_IO at once, without touching the
 * network, so an outage costs the server one timeout per retry_ms, not one per request.
 *
 * Thread-safe. */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weir/cache.h"

typedef struct redis_cache {
  const weir_host *host;
  const char *addr, *password;
  int64_t port, db, timeout_ms, connect_timeout_ms, retry_ms, max_conns;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  redisContext **idle;
  int num_idle, num_open;
  _Atomic int64_t down_until_ms;
  weir_metric *m_errors;
} redis_cache;

static const weir_option_desc k_options[] = {
    {.key = "host", .type = WEIR_OPT_STRING, .def_string = "127.0.0.1",
     .help = "Redis server address (or a unix socket path beginning with /)"},
    {.key = "port", .type = WEIR_OPT_INT, .def_int = 6379, .min = 1, .max = 65535,
     .help = "Redis server TCP port"},
    {.key = "password", .type = WEIR_OPT_STRING, .def_string = "",
     .help = "AUTH password; empty for none"},
    {.key = "db", .type = WEIR_OPT_INT, .def_int = 0, .min = 0, .max = 1 << 20,
     .help = "database number (SELECT)"},
    {.key = "timeout_ms", .type = WEIR_OPT_INT, .def_int = 200, .min = 1, .max = 60000,
     .help = "longest wait for one command's reply"},
    {.key = "connect_timeout_ms", .type = WEIR_OPT_INT, .def_int = 200, .min = 1,
     .max = 60000, .help = "longest wait to connect"},
    {.key = "retry_ms", .type = WEIR_OPT_INT, .def_int = 1000, .min = 0, .max = 3600000,
     .help = "after a failure, calls fail at once for this long before Redis is tried again"},
    {.key = "max_connections", .type = WEIR_OPT_INT, .def_int = 32, .min = 1, .max = 4096,
     .help = "connections to Redis at most"},
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval tv_ms(int64_t ms) {
  struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
  return tv;
}

/* One failure: counted, logged, and the breaker opened for retry_ms. The idle connections
 * are closed too: after a failure they are most likely to a server that went away, and each
 * would fail once more when Redis is back. */
static void failed(redis_cache *c, const char *what, const redisContext *ctx) {
  c->host->metric_record(c->host->ctx, c->m_errors, 1);
  pthread_mutex_lock(&c->lock);
  int n = c->num_idle;
  redisContext *stale[64];
  int k = 0;
  while (c->num_idle > 0 && k < 64) stale[k++] = c->idle[--c->num_idle];
  c->num_open -= k;
  if (n) pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < k; i++) redisFree(stale[i]);
  int64_t until = now_ms() + c->retry_ms;
  int64_t prev = atomic_exchange(&c->down_until_ms, until);
  /* Log once per outage, not once per call. */
  if (prev < now_ms() - c->retry_ms)
    c->host->log(c->host->ctx, WEIR_LOG_WARN, "redis %s:%lld: %s failed (%s); serving without "
                 "the cache for %lld ms before retrying", c->addr, (long long)c->port, what,
                 ctx && ctx->errstr[0] ? ctx->errstr : "no reply", (long long)c->retry_ms);
}

static redisContext *connect_one(redis_cache *c) {
  redisContext *ctx = c->addr[0] == '/'
                          ? redisConnectUnixWithTimeout(c->addr, tv_ms(c->connect_timeout_ms))
                          : redisConnectWithTimeout(c->addr, (int)c->port,
                                                    tv_ms(c->connect_timeout_ms));
  if (!ctx || ctx->err) goto fail;
  if (redisSetTimeout(ctx, tv_ms(c->timeout_ms)) != REDIS_OK) goto fail;
  if (c->password[0]) {
    redisReply *r = redisCommand(ctx, "AUTH %s", c->password);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    if (!ok) goto fail;
  }
  if (c->db) {
    redisReply *r = redisCommand(ctx, "SELECT %lld", (long long)c->db);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    if (!ok) goto fail;
  }
  return ctx;
fail:
  failed(c, "connect", ctx);
  if (ctx) redisFree(ctx);
  return NULL;
}

/* A connection for one call, or NULL (Redis down: WEIR_E_IO). *fresh (may be NULL): 1 when
 * it was just opened, 0 when it came from the idle list. */
static redisContext *take_ex(redis_cache *c, int *fresh) {
  if (fresh) *fresh = 0;
  if (atomic_load(&c->down_until_ms) > now_ms()) return NULL;
  pthread_mutex_lock(&c->lock);
  while (!c->num_idle && c->num_open >= c->max_conns) pthread_cond_wait(&c->cond, &c->lock);
  if (c->num_idle) {
    redisContext *ctx = c->idle[--c->num_idle];
    pthread_mutex_unlock(&c->lock);
    return ctx;
  }
  if (fresh) *fresh = 1;
  c->num_open++;
  pthread_mutex_unlock(&c->lock);
  redisContext *ctx = connect_one(c);
  if (!ctx) {
    pthread_mutex_lock(&c->lock);
    c->num_open--;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
  }
  return ctx;
}

static redisContext *take(redis_cache *c) { return take_ex(c, NULL); }

/* Gives a connection back; a broken one (ok 0) is closed instead. */
static void give(redis_cache *c, redisContext *ctx, int ok) {
  pthread_mutex_lock(&c->lock);
  if (ok && !ctx->err) {
    c->idle[c->num_idle++] = ctx;
    ctx = NULL;
  } else {
    c->num_open--;
  }
  pthread_cond_signal(&c->cond);
  pthread_mutex_unlock(&c->lock);
  if (ctx) redisFree(ctx);
}

/* One command on a pooled connection. An idle connection may be to a Redis that restarted
 * since it was last used: when the command gets no reply on one, it is closed and the command
 * tried once more on a fresh connection. Returns the reply (the caller frees it and gives
 * *pctx back with give), or NULL with *pctx NULL when Redis cannot be reached (counted,
 * logged, the breaker opened). */
static redisReply *run(redis_cache *c, redisContext **pctx, const char *what, const char *fmt,
                       ...) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int fresh = 0;
    redisContext *ctx = take_ex(c, &fresh);
    if (!ctx) break;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    if (r) {
      *pctx = ctx;
      return r;
    }
    if (fresh || attempt == 1) {
      failed(c, what, ctx);
      give(c, ctx, 0);
      break;
    }
    give(c, ctx, 0);
  }
  *pctx = NULL;
  return NULL;
}

static int redis_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  redis_cache *c = calloc(1, sizeof *c);
  int rc = WEIR_E_NOMEM;
  if (!c) return rc;
  c->host = host;
  if ((rc = weir_option_string(host, "host", &c->addr)) != WEIR_OK ||
      (rc = weir_option_int(host, "port", &c->port)) != WEIR_OK ||
      (rc = weir_option_string(host, "password", &c->password)) != WEIR_OK ||
      (rc = weir_option_int(host, "db", &c->db)) != WEIR_OK ||
      (rc = weir_option_int(host, "timeout_ms", &c->timeout_ms)) != WEIR_OK ||
      (rc = weir_option_int(host, "connect_timeout_ms", &c->connect_timeout_ms)) != WEIR_OK ||
      (rc = weir_option_int(host, "retry_ms", &c->retry_ms)) != WEIR_OK ||
      (rc = weir_option_int(host, "max_connections", &c->max_conns)) != WEIR_OK)
    goto free_c;
  rc = WEIR_E_NOMEM;
  if (!(c->idle = calloc((size_t)c->max_conns, sizeof *c->idle))) goto free_c;
  if (pthread_mutex_init(&c->lock, NULL)) goto free_idle;
  if (pthread_cond_init(&c->cond, NULL)) goto destroy_lock;
  weir_metric_desc d = {"cache_redis_errors_total",
                        "Redis calls that failed (connect, timeout, error reply).",
                        WEIR_METRIC_COUNTER, NULL, 0};
  if ((rc = host->metric_register(host->ctx, &d, &c->m_errors)) != WEIR_OK) goto destroy_cond;
  /* Redis may well be down at start-up: the server starts anyway and serves without the
   * cache until it comes back, so only say so here. */
  redisContext *ctx = take(c);
  if (ctx) give(c, ctx, 1);
  else host->log(host->ctx, WEIR_LOG_WARN, "redis %s:%lld is not reachable yet", c->addr,
                 (long long)c->port);
  *self = c;
  return WEIR_OK;

destroy_cond:
  pthread_cond_destroy(&c->cond);
destroy_lock:
  pthread_mutex_destroy(&c->lock);
free_idle:
  free(c->idle);
free_c:
  free(c);
  return rc;
}

static void redis_fini(void *self) {
  redis_cache *c = self;
  for (int i = 0; i < c->num_idle; i++) redisFree(c->idle[i]);
  free(c->idle);
  pthread_cond_destroy(&c->cond);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static int redis_get(void *self, const char *key, size_t key_len, weir_cache_sink_fn sink,
                     void *arg) {
  redis_cache *c = self;
  redisContext *ctx;
  redisReply *r = run(c, &ctx, "GET", "GET %b", key, key_len);
  if (!r) return WEIR_E_IO;
  int rc;
  if (r->type == REDIS_REPLY_ERROR) {
    failed(c, "GET", ctx);
    rc = WEIR_E_IO;
  } else if (r->type == REDIS_REPLY_STRING) {
    sink(arg, r->str, (size_t)r->len);
    rc = WEIR_OK;
  } else {
    rc = WEIR_E_NOTFOUND;
  }
  give(c, ctx, rc != WEIR_E_IO);
  freeReplyObject(r);
  return rc;
}

static int redis_put(void *self, const char *key, size_t key_len, const void *value, size_t len,
                     int64_t ttl_ms) {
  redis_cache *c = self;
  if (ttl_ms <= 0) return WEIR_E_INVAL;
  redisContext *ctx;
  redisReply *r = run(c, &ctx, "SET", "SET %b %b PX %lld", key, key_len, value, len,
                      (long long)ttl_ms);
  if (!r) return WEIR_E_IO;
  int rc = WEIR_OK;
  if (r->type == REDIS_REPLY_ERROR) {
    failed(c, "SET", ctx);
    rc = WEIR_E_IO;
  }
  give(c, ctx, rc == WEIR_OK);
  freeReplyObject(r);
  return rc;
}

static int redis_clear(void *self, const char *prefix, size_t prefix_len, int64_t *removed) {
  redis_cache *c = self;
  int64_t n = 0;
  if (!prefix_len) {
    prefix = "weir:";
    prefix_len = 5;
  }
  /* The MATCH pattern: the prefix with glob characters escaped, then '*'. */
  char *pat = malloc(2 * prefix_len + 2);
  if (!pat) return WEIR_E_NOMEM;
  size_t pl = 0;
  for (size_t i = 0; i < prefix_len; i++) {
    if (strchr("*?[]\\", prefix[i])) pat[pl++] = '\\';
    pat[pl++] = prefix[i];
  }
  pat[pl++] = '*';
  redisContext *ctx = take(c);
  if (!ctx) {
    free(pat);
    return WEIR_E_IO;
  }
  int rc = WEIR_OK;
  char cursor[32] = "0";
  do {
    redisReply *r = redisCommand(ctx, "SCAN %s MATCH %b COUNT 1000", cursor, pat, pl);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
      failed(c, "SCAN", ctx);
      rc = WEIR_E_IO;
      if (r) freeReplyObject(r);
      break;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    for (size_t i = 0; i < r->element[1]->elements && rc == WEIR_OK; i++) {
      const redisReply *k = r->element[1]->element[i];
      redisReply *d = redisCommand(ctx, "UNLINK %b", k->str, (size_t)k->len);
      if (!d || d->type == REDIS_REPLY_ERROR) {
        failed(c, "UNLINK", ctx);
        rc = WEIR_E_IO;
      } else if (d->type == REDIS_REPLY_INTEGER) {
        n += d->integer;
      }
      if (d) freeReplyObject(d);
    }
    freeReplyObject(r);
  } while (rc == WEIR_OK && strcmp(cursor, "0"));
  give(c, ctx, rc == WEIR_OK);
  free(pat);
  if (removed) *removed = n;
  return rc;
}

static const weir_cache_ops k_ops = {.struct_size = sizeof(weir_cache_ops),
                                     .get = redis_get,
                                     .put = redis_put,
                                     .clear = redis_clear};

static const char *const k_any_device[] = {"*", NULL};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_CACHE,
    .name = "redis",
    .version = WEIR_PLUGIN_VERSION,
    .description = "response cache in a Redis server, shared by every replica (hiredis)",
    .devices = WEIR_DEVICE_CPU,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = redis_init,
    .fini = redis_fini,
    .ops = &k_ops,
    .device_names = k_any_device,
};

WEIR_PLUGIN_EXPORT(k_desc)
