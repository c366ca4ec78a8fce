/* The paged KV cache manager: block pool, block tables, copy-on-write and prefix cache.
 * See kv_cache.h for the contract and docs/kv-cache.md for the design. */
#include "kv/kv_cache.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_block {
  int32_t ref;        /* table references + pins */
  int32_t pin;        /* pending copy sources (each also counted in ref) */
  int32_t prev, next; /* LRU links while cached, -1 at the ends */
  int registered;     /* in the hash table; tokens[] and parent_hash are valid */
  uint64_t hash;
  uint64_t parent_hash;
} kv_block;

struct weir_kv_seq {
  int32_t *blocks;    /* block table */
  uint64_t *hashes;   /* chain hash of block i, valid for i < num_hashed */
  int32_t num_blocks;
  int32_t cap;        /* capacity of blocks[] and hashes[] */
  int32_t num_hashed; /* leading full blocks already hashed (and offered for registration) */
  int32_t len;        /* tokens holding slots */
  int32_t num_released; /* leading blocks released out of the sliding window (entries -1) */
  weir_kv_seq *prev, *next; /* the pool's list of live sequences */
};

struct weir_kv_cache {
  int32_t num_blocks;
  int32_t block_size;
  int prefix;
  int32_t window;      /* sliding window of every layer, 0 none */
  kv_block *blocks;
  int32_t *free_stack; /* free blocks; the top is at num_free - 1 */
  int32_t num_free;
  int32_t num_used;
  int32_t num_cached;
  int32_t lru_head, lru_tail; /* head = least recently released, evicted first */
  int32_t *tokens;     /* [num_blocks * block_size] token ids of registered blocks */
  int32_t *ht;         /* open addressing (linear probing) of block ids by hash, -1 empty */
  uint32_t ht_mask;
  int32_t num_registered;
  int32_t *pins;       /* blocks pinned as copy sources since the last copies_done */
  int32_t num_pins, cap_pins;
  weir_kv_seq *seqs;
  int32_t num_seqs;
  uint64_t queries, hits, evictions, cow_copies;
};

/* ---- Hashing ---------------------------------------------------------------------------
 * A block's hash folds the parent's hash and every token through a 64-bit finalizer
 * (MurmurHash3's fmix64 constants), one full avalanche per token, so every bit of the result
 * depends on every token, its position in the block and the whole chain before it. */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= UINT64_C(0xff51afd7ed558ccd);
  x ^= x >> 33;
  x *= UINT64_C(0xc4ceb9fe1a85ec53);
  x ^= x >> 33;
  return x;
}

uint64_t weir_kv_block_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
  uint64_t h = mix64(parent ^ UINT64_C(0x9e3779b97f4a7c15)) ^ (uint64_t)(uint32_t)n;
  for (int32_t i = 0; i < n; i++) {
    uint64_t t = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)i << 32);
    h = mix64(h ^ (t * UINT64_C(0x9e3779b97f4a7c15) + UINT64_C(0x632be59bd9b4e019)));
  }
  return h;
}

/* ---- Hash table ------------------------------------------------------------------------ */

static int32_t ht_find(const weir_kv_cache *kv, uint64_t h) {
  uint32_t i = (uint32_t)mix64(h) & kv->ht_mask;
  for (;;) {
    int32_t b = kv->ht[i];
    if (b < 0) return -1;
    if (kv->blocks[b].hash == h) return b;
    i = (i + 1) & kv->ht_mask;
  }
}

/* The table has room for twice the pool, so an insert always finds an empty slot. */
static void ht_insert(weir_kv_cache *kv, int32_t b) {
  uint32_t i = (uint32_t)mix64(kv->blocks[b].hash) & kv->ht_mask;
  while (kv->ht[i] >= 0) i = (i + 1) & kv->ht_mask;
  kv->ht[i] = b;
  kv->num_registered++;
}

/* Removes block b (which must be present) with backward-shift deletion, so lookups never
 * need tombstones. */
static void ht_remove(weir_kv_cache *kv, int32_t b) {
  uint32_t mask = kv->ht_mask;
  uint32_t i = (uint32_t)mix64(kv->blocks[b].hash) & mask;
  while (kv->ht[i] != b) i = (i + 1) & mask;
  uint32_t hole = i;
  uint32_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    int32_t e = kv->ht[j];
    if (e < 0) break;
    uint32_t home = (uint32_t)mix64(kv->blocks[e].hash) & mask;
    /* e may move into the hole when its home is not cyclically within (hole, j]. */
    int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_range) {
      kv->ht[hole] = e;
      hole = j;
    }
  }
  kv->ht[hole] = -1;
  kv->num_registered--;
}

/* ---- Block states ---------------------------------------------------------------------- */

static void lru_remove(weir_kv_cache *kv, int32_t b) {
  kv_block *blk = &kv->blocks[b];
  if (blk->prev >= 0) kv->blocks[blk->prev].next = blk->next;
  else kv->lru_head = blk->next;
  if (blk->next >= 0) kv->blocks[blk->next].prev = blk->prev;
  else kv->lru_tail = blk->prev;
  blk->prev = blk->next = -1;
  kv->num_cached--;
}

static void lru_push_tail(weir_kv_cache *kv, int32_t b) {
  kv_block *blk = &kv->blocks[b];
  blk->prev = kv->lru_tail;
  blk->next = -1;
  if (kv->lru_tail >= 0) kv->blocks[kv->lru_tail].next = b;
  else kv->lru_head = b;
  kv->lru_tail = b;
  kv->num_cached++;
}

static void unregister_block(weir_kv_cache *kv, int32_t b) {
  ht_remove(kv, b);
  kv->blocks[b].registered = 0;
}

/* Takes a block with ref 1: from the free list, else by evicting the least recently
 * released cached block. The caller has checked that one is available. */
static int32_t block_alloc(weir_kv_cache *kv) {
  int32_t b;
  if (kv->num_free > 0) {
    b = kv->free_stack[--kv->num_free];
  } else {
    b = kv->lru_head;
    lru_remove(kv, b);
    unregister_block(kv, b);
    kv->evictions++;
  }
  kv->blocks[b].ref = 1;
  kv->num_used++;
  return b;
}

static void block_ref(weir_kv_cache *kv, int32_t b) {
  kv_block *blk = &kv->blocks[b];
  if (blk->ref == 0) { /* a cached block revived by a prefix hit */
    lru_remove(kv, b);
    kv->num_used++;
  }
  blk->ref++;
}

static void block_release(weir_kv_cache *kv, int32_t b) {
  kv_block *blk = &kv->blocks[b];
  if (--blk->ref > 0) return;
  kv->num_used--;
  if (blk->registered) lru_push_tail(kv, b);
  else kv->free_stack[kv->num_free++] = b;
}

/* ---- Pool ------------------------------------------------------------------------------ */

int weir_kv_cache_create(const weir_kv_cache_params *p, weir_kv_cache **out) {
  int rc = WEIR_E_NOMEM;
  weir_kv_cache *kv = NULL;
  if (!p || !out || p->num_blocks <= 0 || p->block_size <= 0 || p->sliding_window < 0 ||
      (int64_t)p->num_blocks * p->block_size > INT32_MAX)
    return WEIR_E_INVAL;
  *out = NULL;
  kv = calloc(1, sizeof(*kv));
  if (!kv) goto fail;
  kv->num_blocks = p->num_blocks;
  kv->block_size = p->block_size;
  kv->prefix = p->prefix_caching != 0;
  kv->window = p->sliding_window;
  kv->lru_head = kv->lru_tail = -1;
  kv->blocks = calloc((size_t)p->num_blocks, sizeof(*kv->blocks));
  kv->free_stack = malloc((size_t)p->num_blocks * sizeof(*kv->free_stack));
  if (!kv->blocks || !kv->free_stack) goto fail;
  /* Allocate low block ids first: the stack's top holds block 0. */
  for (int32_t i = 0; i < p->num_blocks; i++) {
    kv->blocks[i].prev = kv->blocks[i].next = -1;
    kv->free_stack[i] = p->num_blocks - 1 - i;
  }
  kv->num_free = p->num_blocks;
  if (kv->prefix) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)p->num_blocks) cap <<= 1;
    kv->ht_mask = (uint32_t)(cap - 1);
    kv->ht = malloc(cap * sizeof(*kv->ht));
    kv->tokens = malloc((size_t)p->num_blocks * (size_t)p->block_size * sizeof(*kv->tokens));
    if (!kv->ht || !kv->tokens) goto fail;
    memset(kv->ht, 0xff, cap * sizeof(*kv->ht));
  }
  *out = kv;
  return WEIR_OK;
fail:
  weir_kv_cache_destroy(kv);
  return rc;
}

static void seq_release_memory(weir_kv_seq *seq) {
  free(seq->blocks);
  free(seq->hashes);
  free(seq);
}

void weir_kv_cache_destroy(weir_kv_cache *kv) {
  if (!kv) return;
  while (kv->seqs) {
    weir_kv_seq *s = kv->seqs;
    kv->seqs = s->next;
    seq_release_memory(s);
  }
  free(kv->pins);
  free(kv->ht);
  free(kv->tokens);
  free(kv->free_stack);
  free(kv->blocks);
  free(kv);
}

int32_t weir_kv_cache_block_size(const weir_kv_cache *kv) { return kv->block_size; }
int32_t weir_kv_cache_num_blocks(const weir_kv_cache *kv) { return kv->num_blocks; }
int32_t weir_kv_cache_num_allocatable(const weir_kv_cache *kv) {
  return kv->num_free + kv->num_cached;
}

void weir_kv_cache_stats(const weir_kv_cache *kv, weir_kv_stats *out) {
  memset(out, 0, sizeof(*out));
  out->num_blocks = kv->num_blocks;
  out->block_size = kv->block_size;
  out->used_blocks = kv->num_used;
  out->cached_blocks = kv->num_cached;
  out->free_blocks = kv->num_free;
  out->num_seqs = kv->num_seqs;
  out->prefix_queries_tokens = kv->queries;
  out->prefix_hits_tokens = kv->hits;
  out->evictions = kv->evictions;
  out->cow_copies = kv->cow_copies;
}

void weir_kv_cache_copies_done(weir_kv_cache *kv) {
  for (int32_t i = 0; i < kv->num_pins; i++) {
    int32_t b = kv->pins[i];
    kv->blocks[b].pin--;
    block_release(kv, b);
  }
  kv->num_pins = 0;
}

static int check_fail(char *why, size_t whylen, const char *fmt, ...) {
  if (why && whylen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return WEIR_E_INTERNAL;
}

int weir_kv_cache_check(const weir_kv_cache *kv, char *why, size_t whylen) {
  int rc = WEIR_OK;
  int32_t nb = kv->num_blocks;
  int32_t *refs = calloc((size_t)nb, sizeof(*refs));
  uint8_t *on_free = calloc((size_t)nb, 1);
  if (!refs || !on_free) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  if (kv->num_used + kv->num_cached + kv->num_free != nb) {
    rc = check_fail(why, whylen, "used %d + cached %d + free %d != total %d", kv->num_used,
                    kv->num_cached, kv->num_free, nb);
    goto out;
  }
  /* Expected references: every table entry plus every pin. */
  int32_t nseqs = 0;
  for (const weir_kv_seq *s = kv->seqs; s; s = s->next) {
    nseqs++;
    int64_t want_blocks = ((int64_t)s->len + kv->block_size - 1) / kv->block_size;
    if (s->num_blocks != want_blocks || s->num_hashed > s->len / kv->block_size ||
        s->num_blocks > s->cap) {
      rc = check_fail(why, whylen, "sequence with len %d has %d blocks, %d hashed", s->len,
                      s->num_blocks, s->num_hashed);
      goto out;
    }
    if (s->num_released < 0 || s->num_released > s->num_blocks) {
      rc = check_fail(why, whylen, "sequence with %d blocks has %d released", s->num_blocks,
                      s->num_released);
      goto out;
    }
    for (int32_t i = 0; i < s->num_blocks; i++) {
      int32_t b = s->blocks[i];
      if ((i < s->num_released) != (b == -1)) {
        rc = check_fail(why, whylen, "block %d of a sequence with %d released is %d", i,
                        s->num_released, b);
        goto out;
      }
      if (b == -1) continue;
      if (b < 0 || b >= nb) {
        rc = check_fail(why, whylen, "block id %d out of range", b);
        goto out;
      }
      refs[b]++;
    }
  }
  if (nseqs != kv->num_seqs) {
    rc = check_fail(why, whylen, "%d sequences listed, %d counted", nseqs, kv->num_seqs);
    goto out;
  }
  for (int32_t i = 0; i < kv->num_pins; i++) refs[kv->pins[i]]++;
  for (int32_t i = 0; i < kv->num_free; i++) {
    int32_t b = kv->free_stack[i];
    if (b < 0 || b >= nb || on_free[b]) {
      rc = check_fail(why, whylen, "free list holds block %d twice or out of range", b);
      goto out;
    }
    on_free[b] = 1;
  }
  int32_t used = 0, cached = 0, freec = 0, registered = 0;
  for (int32_t b = 0; b < nb; b++) {
    const kv_block *blk = &kv->blocks[b];
    if (blk->ref != refs[b]) {
      rc = check_fail(why, whylen, "block %d ref %d but %d references", b, blk->ref, refs[b]);
      goto out;
    }
    if (blk->pin < 0 || blk->pin > blk->ref) {
      rc = check_fail(why, whylen, "block %d pin %d ref %d", b, blk->pin, blk->ref);
      goto out;
    }
    if (blk->ref > 0 && on_free[b]) {
      rc = check_fail(why, whylen, "block %d is both free and referenced", b);
      goto out;
    }
    if (blk->registered) {
      registered++;
      if (!kv->prefix || ht_find(kv, blk->hash) != b) {
        rc = check_fail(why, whylen, "registered block %d not found by its hash", b);
        goto out;
      }
    }
    if (blk->ref > 0) used++;
    else if (blk->registered) cached++;
    else if (on_free[b]) freec++;
    else {
      rc = check_fail(why, whylen, "block %d is unreferenced, unregistered and not free", b);
      goto out;
    }
    if (blk->registered && blk->ref == 0 && on_free[b]) {
      rc = check_fail(why, whylen, "cached block %d is on the free list", b);
      goto out;
    }
  }
  if (used != kv->num_used || cached != kv->num_cached || freec != kv->num_free ||
      registered != kv->num_registered) {
    rc = check_fail(why, whylen, "counts used %d/%d cached %d/%d free %d/%d registered %d/%d",
                    used, kv->num_used, cached, kv->num_cached, freec, kv->num_free,
                    registered, kv->num_registered);
    goto out;
  }
  /* The LRU list holds exactly the cached blocks, linked both ways. */
  int32_t walked = 0, prev = -1;
  for (int32_t b = kv->lru_head; b >= 0; b = kv->blocks[b].next) {
    if (walked > nb || kv->blocks[b].prev != prev || kv->blocks[b].ref != 0 ||
        !kv->blocks[b].registered) {
      rc = check_fail(why, whylen, "LRU list broken at block %d", b);
      goto out;
    }
    prev = b;
    walked++;
  }
  if (walked != kv->num_cached || kv->lru_tail != prev) {
    rc = check_fail(why, whylen, "LRU list has %d blocks, %d cached", walked, kv->num_cached);
    goto out;
  }
  if (kv->prefix) {
    int32_t entries = 0;
    for (uint32_t i = 0; i <= kv->ht_mask; i++)
      if (kv->ht[i] >= 0) {
        entries++;
        if (!kv->blocks[kv->ht[i]].registered) {
          rc = check_fail(why, whylen, "hash table holds unregistered block %d", kv->ht[i]);
          goto out;
        }
      }
    if (entries != kv->num_registered) {
      rc = check_fail(why, whylen, "hash table has %d entries, %d registered", entries,
                      kv->num_registered);
      goto out;
    }
  }
out:
  free(on_free);
  free(refs);
  return rc;
}

/* ---- Sequences ------------------------------------------------------------------------- */

static void seq_link(weir_kv_cache *kv, weir_kv_seq *s) {
  s->prev = NULL;
  s->next = kv->seqs;
  if (kv->seqs) kv->seqs->prev = s;
  kv->seqs = s;
  kv->num_seqs++;
}

static void seq_unlink(weir_kv_cache *kv, weir_kv_seq *s) {
  if (s->prev) s->prev->next = s->next;
  else kv->seqs = s->next;
  if (s->next) s->next->prev = s->prev;
  kv->num_seqs--;
}

/* Makes room for need blocks in the table without changing anything else. */
static int seq_reserve(weir_kv_seq *s, int64_t need) {
  if (need <= s->cap) return WEIR_OK;
  if (need > INT32_MAX) return WEIR_E_NOSPACE;
  int64_t cap = s->cap ? s->cap : 4;
  while (cap < need) cap *= 2;
  if (cap > INT32_MAX) cap = INT32_MAX;
  int32_t *b = realloc(s->blocks, (size_t)cap * sizeof(*b));
  if (!b) return WEIR_E_NOMEM;
  s->blocks = b;
  uint64_t *h = realloc(s->hashes, (size_t)cap * sizeof(*h));
  if (!h) return WEIR_E_NOMEM;
  s->hashes = h;
  s->cap = (int32_t)cap;
  return WEIR_OK;
}

int weir_kv_seq_create(weir_kv_cache *kv, weir_kv_seq **out) {
  if (!kv || !out) return WEIR_E_INVAL;
  weir_kv_seq *s = calloc(1, sizeof(*s));
  if (!s) return WEIR_E_NOMEM;
  seq_link(kv, s);
  *out = s;
  return WEIR_OK;
}

int weir_kv_seq_fork(weir_kv_cache *kv, const weir_kv_seq *parent, weir_kv_seq **out) {
  int rc;
  weir_kv_seq *s = NULL;
  if (!kv || !parent || !out) return WEIR_E_INVAL;
  s = calloc(1, sizeof(*s));
  if (!s) return WEIR_E_NOMEM;
  rc = seq_reserve(s, parent->num_blocks);
  if (rc) goto free_seq;
  if (parent->num_blocks) {
    memcpy(s->blocks, parent->blocks, (size_t)parent->num_blocks * sizeof(*s->blocks));
    memcpy(s->hashes, parent->hashes, (size_t)parent->num_hashed * sizeof(*s->hashes));
  }
  s->num_blocks = parent->num_blocks;
  s->num_hashed = parent->num_hashed;
  s->num_released = parent->num_released;
  s->len = parent->len;
  for (int32_t i = s->num_released; i < s->num_blocks; i++) block_ref(kv, s->blocks[i]);
  seq_link(kv, s);
  *out = s;
  return WEIR_OK;
free_seq:
  seq_release_memory(s);
  return rc;
}

void weir_kv_seq_free(weir_kv_cache *kv, weir_kv_seq *seq) {
  if (!seq) return;
  /* The last block first: it reaches the LRU first and so is evicted before the blocks
   * its hash chain depends on. */
  for (int32_t i = seq->num_blocks - 1; i >= seq->num_released; i--)
    block_release(kv, seq->blocks[i]);
  seq_unlink(kv, seq);
  seq_release_memory(seq);
}

int32_t weir_kv_seq_len(const weir_kv_seq *seq) { return seq->len; }

const int32_t *weir_kv_seq_block_table(const weir_kv_seq *seq, int32_t *num_blocks) {
  if (num_blocks) *num_blocks = seq->num_blocks;
  return seq->blocks;
}

/* The one slot formula: where position pos of a sequence with this block table lives. */
static int32_t slot_of(const int32_t *blocks, int32_t bs, int32_t pos) {
  return blocks[pos / bs] * bs + pos % bs;
}

int32_t weir_kv_seq_slot(const weir_kv_cache *kv, const weir_kv_seq *seq, int32_t pos) {
  if (pos < 0 || pos >= seq->len || pos / kv->block_size < seq->num_released) return -1;
  return slot_of(seq->blocks, kv->block_size, pos);
}

int weir_kv_seq_slots(const weir_kv_cache *kv, const weir_kv_seq *seq, int32_t start,
                      int32_t n, int32_t *slots) {
  if (!kv || !seq || start < 0 || n < 0 || (n > 0 && !slots)) return WEIR_E_INVAL;
  if ((int64_t)start + n > seq->len) return WEIR_E_RANGE;
  /* A position in a block that slid out of the window has no slot any more. */
  if (n > 0 && start / kv->block_size < seq->num_released) return WEIR_E_RANGE;
  for (int32_t i = 0; i < n; i++) slots[i] = slot_of(seq->blocks, kv->block_size, start + i);
  return WEIR_OK;
}

int32_t weir_kv_seq_released(const weir_kv_seq *seq) { return seq->num_released; }

int32_t weir_kv_seq_release_before(weir_kv_cache *kv, weir_kv_seq *seq, int32_t pos) {
  int32_t upto = pos / kv->block_size; /* blocks [0, upto) end at or before pos */
  if (upto > seq->num_blocks) upto = seq->num_blocks;
  int32_t n = 0;
  for (int32_t i = seq->num_released; i < upto; i++, n++) {
    block_release(kv, seq->blocks[i]);
    seq->blocks[i] = -1;
  }
  if (upto > seq->num_released) seq->num_released = upto;
  return n;
}

int weir_kv_seq_match_prefix(weir_kv_cache *kv, weir_kv_seq *seq, const int32_t *tokens,
                             int32_t n, int32_t *num_cached) {
  int rc;
  if (!kv || !seq || n < 0 || (n > 0 && !tokens) || seq->len != 0 || seq->num_blocks != 0)
    return WEIR_E_INVAL;
  if (num_cached) *num_cached = 0;
  if (!kv->prefix || n == 0) return WEIR_OK;
  int32_t bs = kv->block_size;
  /* Never the whole prompt: the last token must be computed to produce logits. */
  int32_t max_blocks = (n - 1) / bs;
  rc = seq_reserve(seq, max_blocks);
  if (rc) return rc;
  uint64_t parent = WEIR_KV_ROOT_HASH;
  int32_t i = 0;
  for (; i < max_blocks; i++) {
    const int32_t *t = tokens + (size_t)i * bs;
    uint64_t h = weir_kv_block_hash(parent, t, bs);
    int32_t b = ht_find(kv, h);
    /* Verify the identity, not just the hash: equal parent chain and equal tokens. */
    if (b < 0 || kv->blocks[b].parent_hash != parent ||
        memcmp(kv->tokens + (size_t)b * bs, t, (size_t)bs * sizeof(*t)) != 0)
      break;
    block_ref(kv, b);
    seq->blocks[i] = b;
    seq->hashes[i] = h;
    parent = h;
  }
  seq->num_blocks = i;
  seq->num_hashed = i;
  seq->len = i * bs;
  kv->queries += (uint64_t)n;
  kv->hits += (uint64_t)seq->len;
  if (num_cached) *num_cached = seq->len;
  return WEIR_OK;
}

/* Whether writing at the sequence's end needs a private copy of its last block first. */
static int last_block_shared(const weir_kv_cache *kv, const weir_kv_seq *s) {
  if (s->len % kv->block_size == 0 || s->num_blocks <= s->num_released) return 0;
  const kv_block *blk = &kv->blocks[s->blocks[s->num_blocks - 1]];
  return blk->ref - blk->pin > 1;
}

/* Blocks of seq an append would release first (they slid out of the window). */
static int32_t releasable(const weir_kv_cache *kv, const weir_kv_seq *seq) {
  if (kv->window <= 0 || seq->len - kv->window + 1 <= 0) return 0;
  int32_t upto = (seq->len - kv->window + 1) / kv->block_size;
  if (upto > seq->num_blocks) upto = seq->num_blocks;
  int32_t n = 0;
  /* Only blocks this sequence alone holds come back to the pool. */
  for (int32_t i = seq->num_released; i < upto; i++)
    if (kv->blocks[seq->blocks[i]].ref == 1) n++;
  return n;
}

int64_t weir_kv_cache_blocks_needed(const weir_kv_cache *kv, int64_t tokens) {
  int64_t n = (tokens + kv->block_size - 1) / kv->block_size;
  if (kv->window > 0) {
    /* the window's blocks (which may straddle one more), plus the one being written */
    int64_t w = (kv->window + kv->block_size - 1) / kv->block_size + 2;
    if (w < n) n = w;
  }
  return n;
}

int64_t weir_kv_seq_append_capacity(const weir_kv_cache *kv, const weir_kv_seq *seq) {
  int64_t bs = kv->block_size;
  int64_t avail = kv->num_free + kv->num_cached + releasable(kv, seq);
  int64_t room = (int64_t)seq->num_blocks * bs - seq->len;
  if (room > 0 && last_block_shared(kv, seq)) {
    /* The partial block must be copied first: the copy costs one block. */
    if (avail == 0) return 0;
    avail--;
  }
  return room + avail * bs;
}

int weir_kv_seq_append(weir_kv_cache *kv, weir_kv_seq *seq, int32_t n, int32_t *slots,
                       weir_kv_copy *copy, int32_t *num_copies) {
  int rc;
  if (!kv || !seq || n <= 0 || (int64_t)seq->len + n > INT32_MAX) return WEIR_E_INVAL;
  int32_t bs = kv->block_size;
  /* A sliding window: the first new token (at len) sees positions from len - window + 1 on;
   * the blocks wholly before that go back to the pool first, so they can serve this very
   * append. (Releasing changes state before a possible NOSPACE below; that is harmless:
   * nothing will read those blocks again, whatever happens to this append.) */
  if (kv->window > 0 && seq->len - kv->window + 1 > 0)
    weir_kv_seq_release_before(kv, seq, seq->len - kv->window + 1);
  int64_t new_len = (int64_t)seq->len + n;
  int64_t want_blocks = (new_len + bs - 1) / bs;
  int64_t new_blocks = want_blocks - seq->num_blocks;
  int cow = last_block_shared(kv, seq);
  if (cow && (!copy || !num_copies)) return WEIR_E_INVAL;
  if (num_copies) *num_copies = 0;
  if (new_blocks + cow > (int64_t)kv->num_free + kv->num_cached) return WEIR_E_NOSPACE;
  /* Every host allocation happens before the first change, so failure changes nothing. */
  rc = seq_reserve(seq, want_blocks);
  if (rc) return rc;
  if (cow && kv->num_pins == kv->cap_pins) {
    int32_t cap = kv->cap_pins ? kv->cap_pins * 2 : 16;
    int32_t *p = realloc(kv->pins, (size_t)cap * sizeof(*p));
    if (!p) return WEIR_E_NOMEM;
    kv->pins = p;
    kv->cap_pins = cap;
  }
  if (seq->len % bs != 0) {
    int32_t last = seq->num_blocks - 1;
    int32_t old = seq->blocks[last];
    if (cow) {
      int32_t dst = block_alloc(kv);
      /* Our reference moves to the copy; a pin keeps the source alive until the copy has
       * run, whatever else this step frees. */
      kv->blocks[old].pin++;
      kv->pins[kv->num_pins++] = old;
      seq->blocks[last] = dst;
      copy->src = old;
      copy->dst = dst;
      *num_copies = 1;
      kv->cow_copies++;
    } else if (kv->blocks[old].registered) {
      /* Ours alone but registered (a truncation made it partial again): the slots about to be
       * written would change cached content, so it leaves the cache instead. */
      unregister_block(kv, old);
    }
  }
  for (int64_t i = seq->num_blocks; i < want_blocks; i++) seq->blocks[i] = block_alloc(kv);
  seq->num_blocks = (int32_t)want_blocks;
  if (slots)
    for (int32_t i = 0; i < n; i++) slots[i] = slot_of(seq->blocks, bs, seq->len + i);
  seq->len = (int32_t)new_len;
  return WEIR_OK;
}

void weir_kv_seq_truncate(weir_kv_cache *kv, weir_kv_seq *seq, int32_t new_len) {
  if (new_len < 0) new_len = 0;
  if (new_len >= seq->len) return;
  int32_t bs = kv->block_size;
  int32_t keep = (new_len + bs - 1) / bs;
  if (keep < seq->num_released) keep = seq->num_released; /* those are gone already */
  for (int32_t i = seq->num_blocks - 1; i >= keep; i--) block_release(kv, seq->blocks[i]);
  seq->num_blocks = keep;
  if (seq->num_hashed > new_len / bs) seq->num_hashed = new_len / bs;
  seq->len = new_len;
}

int weir_kv_seq_register(weir_kv_cache *kv, weir_kv_seq *seq, const int32_t *tokens,
                         int32_t n) {
  if (!kv || !seq || n < 0 || (n > 0 && !tokens)) return WEIR_E_INVAL;
  if (!kv->prefix) return WEIR_OK;
  int32_t bs = kv->block_size;
  int32_t limit = (n < seq->len ? n : seq->len) / bs;
  for (int32_t i = seq->num_hashed; i < limit; i++) {
    uint64_t parent = i ? seq->hashes[i - 1] : WEIR_KV_ROOT_HASH;
    const int32_t *t = tokens + (size_t)i * bs;
    uint64_t h = weir_kv_block_hash(parent, t, bs);
    seq->hashes[i] = h;
    int32_t b = seq->blocks[i];
    if (b < 0) continue; /* released out of the window before it was registered */
    kv_block *blk = &kv->blocks[b];
    /* Already registered (found by a prefix hit or shared by a fork), or another block
     * already holds this content: the cache keeps one copy. */
    if (blk->registered || ht_find(kv, h) >= 0) continue;
    blk->hash = h;
    blk->parent_hash = parent;
    memcpy(kv->tokens + (size_t)b * bs, t, (size_t)bs * sizeof(*t));
    blk->registered = 1;
    ht_insert(kv, b);
  }
  if (limit > seq->num_hashed) seq->num_hashed = limit;
  return WEIR_OK;
}
