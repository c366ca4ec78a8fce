/* The constraint cache: compiled constraints (and compile errors) by canonical text, least
 * recently used evicted when the entries or their memory (which grows as token classes are
 * computed) exceed the bounds. Compilation runs outside the lock, so a slow schema never
 * blocks lookups of others; two threads missing on the same text at once both compile it and
 * the second result is dropped. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "grammar/internal.h"
#include "weir/status.h"

typedef struct entry {
  char *key;
  size_t key_len;
  weir_constraint *c; /* NULL for a cached error */
  int status;
  char *err;
  uint64_t last_use;    /* the cache's tick: the order of use */
  uint64_t last_use_ns; /* CLOCK_MONOTONIC: the age of the last use (expiry) */
} entry;

struct weir_constraint_cache {
  pthread_mutex_t mu;
  weir_grammar_vocab *v;
  entry *e;
  int32_t n, max;
  size_t max_bytes;
  uint64_t tick, hits, misses;
};

int weir_constraint_cache_create(weir_grammar_vocab *v, int32_t max_entries, size_t max_bytes,
                                 weir_constraint_cache **out) {
  *out = NULL;
  if (max_entries < 1) return WEIR_E_INVAL;
  weir_constraint_cache *c = calloc(1, sizeof *c);
  if (!c) return WEIR_E_NOMEM;
  c->e = calloc((size_t)max_entries, sizeof *c->e);
  if (!c->e || pthread_mutex_init(&c->mu, NULL)) {
    free(c->e);
    free(c);
    return WEIR_E_NOMEM;
  }
  c->max = max_entries;
  c->max_bytes = max_bytes;
  c->v = weir_grammar_vocab_retain(v);
  *out = c;
  return 0;
}

static void entry_clear(entry *e) {
  free(e->key);
  free(e->err);
  weir_constraint_release(e->c);
  memset(e, 0, sizeof *e);
}

void weir_constraint_cache_free(weir_constraint_cache *c) {
  if (!c) return;
  for (int32_t i = 0; i < c->n; i++) entry_clear(&c->e[i]);
  free(c->e);
  pthread_mutex_destroy(&c->mu);
  weir_grammar_vocab_release(c->v);
  free(c);
}

/* kind, options, then the text: JSON texts re-serialized compactly (key order kept, since it
 * decides the order of the output's properties). */
static char *make_key(const weir_constraint_spec *spec, size_t *len) {
  char head[32];
  const int hn = snprintf(head, sizeof head, "%d:%d:%d:", (int)spec->kind, spec->strict ? 1 : 0,
                          spec->whitespace);
  char *canon = NULL;
  const char *text = spec->text ? spec->text : "";
  size_t tlen = spec->text ? spec->len : 0;
  if (spec->kind == WEIR_CONSTRAINT_JSON_SCHEMA || spec->kind == WEIR_CONSTRAINT_CHOICE) {
    cJSON *j = cJSON_ParseWithLength(text, tlen);
    if (j) {
      canon = cJSON_PrintUnformatted(j);
      cJSON_Delete(j);
      if (canon) {
        text = canon;
        tlen = strlen(canon);
      }
    }
  } else if (spec->kind == WEIR_CONSTRAINT_JSON_OBJECT) {
    tlen = 0;
  }
  char *key = malloc((size_t)hn + tlen + 1);
  if (key) {
    memcpy(key, head, (size_t)hn);
    memcpy(key + hn, text, tlen);
    key[hn + tlen] = 0;
    *len = (size_t)hn + tlen;
  }
  if (canon) cJSON_free(canon);
  return key;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t entry_bytes(const entry *e) {
  return e->key_len + (e->c ? weir_constraint_memory(e->c) : 0);
}

static int32_t find(weir_constraint_cache *c, const char *key, size_t len) {
  for (int32_t i = 0; i < c->n; i++)
    if (c->e[i].key_len == len && !memcmp(c->e[i].key, key, len)) return i;
  return -1;
}

/* Returns the entry's result to the caller (under the lock). */
static int hand_out(const entry *e, weir_constraint **out, char *err, size_t errlen) {
  if (e->c) {
    *out = weir_constraint_retain(e->c);
    return 0;
  }
  snprintf(err, errlen, "%s", e->err ? e->err : "invalid constraint");
  return e->status;
}

int weir_constraint_cache_get(weir_constraint_cache *c, const weir_constraint_spec *spec,
                              weir_constraint **out, char *err, size_t errlen) {
  *out = NULL;
  if (err && errlen) err[0] = 0;
  size_t len = 0;
  char *key = make_key(spec, &len);
  if (!key) return WEIR_E_NOMEM;
  pthread_mutex_lock(&c->mu);
  int32_t i = find(c, key, len);
  if (i >= 0) {
    c->hits++;
    c->e[i].last_use = ++c->tick;
    c->e[i].last_use_ns = now_ns();
    const int rc = hand_out(&c->e[i], out, err, errlen);
    pthread_mutex_unlock(&c->mu);
    free(key);
    return rc;
  }
  c->misses++;
  pthread_mutex_unlock(&c->mu);

  weir_grammar *g = NULL;
  weir_constraint *made = NULL;
  char msg[512] = "";
  int rc = weir_grammar_compile(spec, &g, msg, sizeof msg);
  if (rc == 0) {
    rc = weir_constraint_create(g, c->v, &made);
    weir_grammar_release(g);
  }
  if (rc == WEIR_E_NOMEM) { /* not a property of the text: do not cache */
    free(key);
    snprintf(err, errlen, "out of memory compiling the constraint");
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  i = find(c, key, len); /* another thread may have compiled it meanwhile */
  if (i < 0) {
    if (c->n == c->max) { /* evict the least recently used */
      int32_t lru = 0;
      for (int32_t k = 1; k < c->n; k++)
        if (c->e[k].last_use < c->e[lru].last_use) lru = k;
      entry_clear(&c->e[lru]);
      c->e[lru] = c->e[--c->n];
    }
    entry *e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    e->key = key;
    e->key_len = len;
    e->c = made;
    e->status = rc;
    if (rc) e->err = strdup(msg);
    key = NULL;
    made = NULL;
    i = c->n++;
  }
  c->e[i].last_use = ++c->tick;
  c->e[i].last_use_ns = now_ns();
  rc = hand_out(&c->e[i], out, err, errlen);
  /* Over the memory bound: evict the least recently used others (their holders keep them). */
  if (c->max_bytes) {
    for (;;) {
      size_t total = 0;
      int32_t lru = -1;
      for (int32_t k = 0; k < c->n; k++) {
        total += entry_bytes(&c->e[k]);
        if (k != i && (lru < 0 || c->e[k].last_use < c->e[lru].last_use)) lru = k;
      }
      if (total <= c->max_bytes || lru < 0) break;
      entry_clear(&c->e[lru]);
      c->e[lru] = c->e[--c->n];
      if (i == c->n) i = lru; /* the returned entry moved into the hole */
    }
  }
  pthread_mutex_unlock(&c->mu);
  weir_constraint_release(made);
  free(key);
  return rc;
}

int32_t weir_constraint_cache_expire(weir_constraint_cache *c, uint64_t max_idle_ns,
                                    size_t *freed_bytes) {
  if (freed_bytes) *freed_bytes = 0;
  if (!c) return 0;
  const uint64_t now = now_ns();
  int32_t n = 0;
  pthread_mutex_lock(&c->mu);
  for (int32_t k = 0; k < c->n;) {
    if (now - c->e[k].last_use_ns >= max_idle_ns) {
      if (freed_bytes) *freed_bytes += entry_bytes(&c->e[k]);
      entry_clear(&c->e[k]);
      c->e[k] = c->e[--c->n];
      n++;
    } else {
      k++;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return n;
}

void weir_constraint_cache_stats(weir_constraint_cache *c, uint64_t *hits, uint64_t *misses,
                                 int32_t *entries) {
  pthread_mutex_lock(&c->mu);
  if (hits) *hits = c->hits;
  if (misses) *misses = c->misses;
  if (entries) *entries = c->n;
  pthread_mutex_unlock(&c->mu);
}
