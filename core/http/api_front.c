/* The response cache's front index (docs/response-cache.md, "The front index"): a table on
 * the event loop from the exact bytes of a request (endpoint, Authorization header, body) to
 * the recorded answer the full path found or stored for them, so that a byte-identical
 * repeat is answered without the JSON parse, the chat template, the tokenizer, the SHA-256
 * key and the trip to a preparation thread.
 *
 * Correctness rests on two facts: the full path's decision is a function of those bytes and
 * of the server (its model, its configuration), so equal bytes get the same decision; and an
 * entry is only ever made from a request the full path served as an exact hit or stored
 * (deterministic, cache mode on, no Cache-Control directive). Entries compare the whole
 * bytes, not only their hash.
 *
 * Threads: the loop only (no lock). Memory: the table owns its entries (one allocation each,
 * with their bytes and record). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"

#define FRONT_BUCKETS 4096u /* a power of two */

struct weir__front {
  weir__front_entry *bucket[FRONT_BUCKETS];
  weir__front_entry *oldest, *newest; /* insertion order: the oldest goes first when full */
  size_t bytes, max_bytes;
  int64_t count, max_count;
};

weir__front *weir__front_new(size_t max_bytes, int64_t max_count) {
  weir__front *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->max_bytes = max_bytes;
  f->max_count = max_count;
  return f;
}

static void entry_free(weir__front_entry *e) {
  free(e->render);
  free(e->render_id_off);
  free(e->render_created_off);
  free(e->d.tool_named);
  cJSON_Delete(e->d.resp_echo);
  free(e);
}

void weir__front_remove(weir__front *f, weir__front_entry *e) {
  weir__front_entry **pp = &f->bucket[e->hash & (FRONT_BUCKETS - 1)];
  while (*pp && *pp != e) pp = &(*pp)->hnext;
  if (*pp) *pp = e->hnext;
  if (e->older) e->older->newer = e->newer;
  else f->oldest = e->newer;
  if (e->newer) e->newer->older = e->older;
  else f->newest = e->older;
  f->bytes -= e->size;
  f->count--;
  entry_free(e);
}

void weir__front_set_render(weir__front *f, weir__front_entry *e, char *render, size_t len,
                            uint32_t *id_off, uint32_t *created_off, int n, size_t id_len) {
  free(e->render);
  free(e->render_id_off);
  free(e->render_created_off);
  f->bytes -= e->size;
  e->size = e->size - e->render_len - 2 * sizeof(uint32_t) * (size_t)e->render_n + len +
            2 * sizeof(uint32_t) * (size_t)n;
  f->bytes += e->size;
  e->render = render;
  e->render_len = len;
  e->render_id_off = id_off;
  e->render_created_off = created_off;
  e->render_n = n;
  e->render_id_len = id_len;
}

void weir__front_clear(weir__front *f) {
  if (!f) return;
  while (f->oldest) weir__front_remove(f, f->oldest);
}

void weir__front_free(weir__front *f) {
  weir__front_clear(f);
  free(f);
}

int64_t weir__front_count(const weir__front *f) { return f ? f->count : 0; }

/* A 64-bit hash, eight bytes a step (byte-wise FNV-1a over a body of ~700 bytes was a
 * dependent multiply per byte, ~1 us of a hit's ~20), with the lengths mixed in so that
 * (auth, body) pairs never run together. Not a security boundary: a match is always
 * confirmed byte for byte. */
static uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 32);
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, b, 8);
    h = mix(h, w);
    b += 8;
    n -= 8;
  }
  uint64_t w = 0;
  memcpy(&w, b, n); /* the tail, zero-padded: the length is mixed in by the caller */
  return mix(h, w ^ ((uint64_t)n << 56));
}

uint64_t weir__front_hash(int kind, const char *auth, size_t auth_len, const char *body,
                          size_t body_len) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = mix(h, (uint64_t)kind);
  h = mix(h, auth_len);
  h = mix(h, body_len);
  h = hash_bytes(h, auth, auth_len);
  return hash_bytes(h, body, body_len);
}

weir__front_entry *weir__front_find(weir__front *f, uint64_t hash, int kind, const char *auth,
                                    size_t auth_len, const char *body, size_t body_len) {
  for (weir__front_entry *e = f->bucket[hash & (FRONT_BUCKETS - 1)]; e; e = e->hnext)
    if (e->hash == hash && e->kind == kind && e->auth_len == auth_len &&
        e->body_len == body_len && !memcmp(e->auth, auth, auth_len) &&
        !memcmp(e->body, body, body_len))
      return e;
  return NULL;
}

int weir__front_put(weir__front *f, uint64_t hash, int kind, const char *auth, size_t auth_len,
                    const char *body, size_t body_len, const char *key,
                    const weir__front_desc *d, const char *rec, size_t rec_len,
                    uint64_t fresh_until_ns) {
  if (auth_len > WEIR__FRONT_MAX_BODY || body_len > WEIR__FRONT_MAX_BODY ||
      rec_len > WEIR__FRONT_MAX_REC)
    return -1;
  const size_t size = sizeof(weir__front_entry) + auth_len + body_len + rec_len + 3;
  if (size > f->max_bytes) return -1;
  weir__front_entry *old = weir__front_find(f, hash, kind, auth, auth_len, body, body_len);
  /* A refresh of the same answer (Redis: the full path looks again every second and finds
   * the same record) keeps the rendered body: it depends only on the record and on the
   * description, which the same bytes always give. So the next streamed hit is one copy
   * again, not a replay that renders anew. */
  char *render = NULL;
  size_t render_len = 0, render_id_len = 0;
  uint32_t *render_id_off = NULL, *render_created_off = NULL;
  int render_n = 0;
  if (old && old->render && old->rec_len == rec_len && !memcmp(old->rec, rec, rec_len) &&
      !strcmp(old->key, key)) {
    render = old->render;
    render_len = old->render_len;
    render_id_off = old->render_id_off;
    render_created_off = old->render_created_off;
    render_n = old->render_n;
    render_id_len = old->render_id_len;
    old->render = NULL;
    old->render_id_off = old->render_created_off = NULL;
    /* Its bytes leave the table with old (weir__front_set_render charges them again). */
    old->size -= old->render_len + 2 * sizeof(uint32_t) * (size_t)old->render_n;
    f->bytes -= old->render_len + 2 * sizeof(uint32_t) * (size_t)old->render_n;
    old->render_len = 0;
    old->render_n = 0;
  }
  if (old) weir__front_remove(f, old);
  while (f->oldest && (f->bytes + size > f->max_bytes || f->count + 1 > f->max_count))
    weir__front_remove(f, f->oldest);
  weir__front_entry *e = calloc(1, size);
  if (!e) {
    free(render);
    free(render_id_off);
    free(render_created_off);
    return -1;
  }
  e->d = *d;
  e->d.tool_named = NULL;
  e->d.resp_echo = NULL;
  if ((d->tool_named && !(e->d.tool_named = strdup(d->tool_named))) ||
      (d->resp_echo && !(e->d.resp_echo = cJSON_Duplicate(d->resp_echo, 1)))) {
    entry_free(e);
    free(render);
    free(render_id_off);
    free(render_created_off);
    return -1;
  }
  e->hash = hash;
  e->kind = kind;
  e->size = size;
  e->fresh_until_ns = fresh_until_ns;
  snprintf(e->key, sizeof e->key, "%s", key);
  char *p = e->data;
  e->auth = p;
  if (auth_len) memcpy(p, auth, auth_len);
  p += auth_len + 1;
  e->auth_len = auth_len;
  e->body = p;
  if (body_len) memcpy(p, body, body_len);
  p += body_len + 1;
  e->body_len = body_len;
  e->rec = p;
  memcpy(p, rec, rec_len);
  e->rec_len = rec_len;
  weir__front_entry **b = &f->bucket[hash & (FRONT_BUCKETS - 1)];
  e->hnext = *b;
  *b = e;
  e->older = f->newest;
  if (f->newest) f->newest->newer = e;
  else f->oldest = e;
  f->newest = e;
  f->bytes += size;
  f->count++;
  if (render) {
    /* Charged again; what it no longer fits evicts the oldest (never e, the newest). */
    weir__front_set_render(f, e, render, render_len, render_id_off, render_created_off,
                           render_n, render_id_len);
    while (f->oldest != e && f->bytes > f->max_bytes) weir__front_remove(f, f->oldest);
  }
  return 0;
}
