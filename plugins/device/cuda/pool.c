/* Best-fit sub-allocator over large chunks; see pool.h. */
#include "pool.h"

#include <stdint.h>
#include <stdlib.h>

#include "weir/status.h"

/* A piece of a chunk, free or handed out, in address order. */
struct weir__pool_seg {
  size_t off, size;
  int free;
  weir__pool_seg *prev, *next;
};

struct weir__pool_chunk {
  char *base;
  size_t size;
  weir__pool_seg *segs;
  weir__pool_chunk *next;
};

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

int weir__pool_init(weir__pool *p, size_t chunk_size, weir__pool_chunk_alloc_fn chunk_alloc,
                    weir__pool_chunk_free_fn chunk_free, void *ctx) {
  if (!p || !chunk_alloc || !chunk_free || chunk_size == 0) return WEIR_E_INVAL;
  p->chunks = NULL;
  p->chunk_size = round_up(chunk_size, WEIR_POOL_ALIGN);
  p->chunk_alloc = chunk_alloc;
  p->chunk_free = chunk_free;
  p->ctx = ctx;
  p->reserved = 0;
  p->in_use = 0;
  if (pthread_mutex_init(&p->mu, NULL) != 0) return WEIR_E_NOMEM;
  return WEIR_OK;
}

/* Caller holds the mutex. */
static int add_chunk(weir__pool *p, size_t size, weir__pool_chunk **out) {
  int rc = WEIR_E_NOMEM;
  weir__pool_chunk *c = calloc(1, sizeof *c);
  if (!c) goto fail;
  c->segs = calloc(1, sizeof *c->segs);
  if (!c->segs) goto free_chunk;
  void *mem = NULL;
  rc = p->chunk_alloc(p->ctx, size, &mem);
  if (rc != WEIR_OK) goto free_seg;
  c->base = mem;
  c->size = size;
  c->segs->off = 0;
  c->segs->size = size;
  c->segs->free = 1;
  c->next = p->chunks;
  p->chunks = c;
  p->reserved += size;
  *out = c;
  return WEIR_OK;
free_seg:
  free(c->segs);
free_chunk:
  free(c);
fail:
  return rc;
}

int weir__pool_reserve(weir__pool *p, size_t size) {
  weir__pool_chunk *c;
  pthread_mutex_lock(&p->mu);
  int rc = add_chunk(p, round_up(size, WEIR_POOL_ALIGN), &c);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int weir__pool_alloc(weir__pool *p, size_t size, void **ptr) {
  if (size == 0 || size > SIZE_MAX / 2) return WEIR_E_INVAL;
  const size_t need = round_up(size, WEIR_POOL_ALIGN);
  int rc = WEIR_OK;
  pthread_mutex_lock(&p->mu);
  weir__pool_seg *best = NULL;
  weir__pool_chunk *best_chunk = NULL;
  for (weir__pool_chunk *c = p->chunks; c; c = c->next)
    for (weir__pool_seg *s = c->segs; s; s = s->next)
      if (s->free && s->size >= need && (!best || s->size < best->size)) {
        best = s;
        best_chunk = c;
      }
  if (!best) {
    /* A request larger than a chunk gets a chunk of its own, rounded to 2 MiB (the driver's
     * large-page granularity) so that its tail stays useful. */
    size_t csize = need > p->chunk_size ? round_up(need, (size_t)2 << 20) : p->chunk_size;
    rc = add_chunk(p, csize, &best_chunk);
    if (rc != WEIR_OK) goto unlock;
    best = best_chunk->segs;
  }
  if (best->size - need >= WEIR_POOL_ALIGN) {
    weir__pool_seg *rest = calloc(1, sizeof *rest);
    if (!rest) {
      rc = WEIR_E_NOMEM;
      goto unlock;
    }
    rest->off = best->off + need;
    rest->size = best->size - need;
    rest->free = 1;
    rest->prev = best;
    rest->next = best->next;
    if (best->next) best->next->prev = rest;
    best->next = rest;
    best->size = need;
  }
  best->free = 0;
  p->in_use += best->size;
  *ptr = best_chunk->base + best->off;
unlock:
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int weir__pool_free(weir__pool *p, void *ptr) {
  if (!ptr) return WEIR_OK;
  int rc = WEIR_E_INVAL;
  pthread_mutex_lock(&p->mu);
  for (weir__pool_chunk *c = p->chunks; c; c = c->next) {
    if ((char *)ptr < c->base || (char *)ptr >= c->base + c->size) continue;
    size_t off = (size_t)((char *)ptr - c->base);
    weir__pool_seg *s = c->segs;
    while (s && s->off != off) s = s->next;
    if (!s || s->free) break; /* not a piece we handed out, or a double free */
    s->free = 1;
    p->in_use -= s->size;
    if (s->next && s->next->free) { /* merge the following free piece */
      weir__pool_seg *n = s->next;
      s->size += n->size;
      s->next = n->next;
      if (n->next) n->next->prev = s;
      free(n);
    }
    if (s->prev && s->prev->free) { /* merge into the preceding free piece */
      weir__pool_seg *q = s->prev;
      q->size += s->size;
      q->next = s->next;
      if (s->next) s->next->prev = q;
      free(s);
    }
    rc = WEIR_OK;
    break;
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void weir__pool_fini(weir__pool *p) {
  weir__pool_chunk *c = p->chunks;
  while (c) {
    weir__pool_chunk *next = c->next;
    weir__pool_seg *s = c->segs;
    while (s) {
      weir__pool_seg *sn = s->next;
      free(s);
      s = sn;
    }
    p->chunk_free(p->ctx, c->base);
    free(c);
    c = next;
  }
  p->chunks = NULL;
  p->reserved = p->in_use = 0;
  pthread_mutex_destroy(&p->mu);
}
