/* The paged KV cache manager: allocation, exhaustion, refcounts, copy-on-write, the prefix
 * cache (hits, misses, chained hashes, LRU eviction, revival) and a randomized run that
 * simulates the device's KV bytes to prove that every sequence always reads back exactly the
 * KV of its own tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "testutil.h"

static weir_kv_cache *mk(int32_t num_blocks, int32_t block_size, int prefix) {
  weir_kv_cache_params p = {.num_blocks = num_blocks, .block_size = block_size,
                            .prefix_caching = prefix};
  weir_kv_cache *kv = NULL;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p, &kv), WEIR_OK);
  return kv;
}

static void assert_ok(const weir_kv_cache *kv) {
  char why[256] = "";
  int rc = weir_kv_cache_check(kv, why, sizeof(why));
  if (rc != WEIR_OK) fprintf(stderr, "\n  invariant broken: %s\n", why);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
}

static weir_kv_stats stats(const weir_kv_cache *kv) {
  weir_kv_stats st;
  weir_kv_cache_stats(kv, &st);
  return st;
}

static weir_kv_seq *seq_new(weir_kv_cache *kv) {
  weir_kv_seq *s = NULL;
  WT_ASSERT_INT_EQ(weir_kv_seq_create(kv, &s), WEIR_OK);
  return s;
}

static int append(weir_kv_cache *kv, weir_kv_seq *s, int32_t n, weir_kv_copy *copy,
                  int32_t *ncopy) {
  weir_kv_copy c;
  int32_t nc = 0;
  int rc = weir_kv_seq_append(kv, s, n, NULL, copy ? copy : &c, ncopy ? ncopy : &nc);
  return rc;
}

static void fill_seq(int32_t *t, int32_t n, int32_t base) {
  for (int32_t i = 0; i < n; i++) t[i] = base + i;
}

/* ---- Basics ---------------------------------------------------------------------------- */

static void test_params(void) {
  weir_kv_cache *kv = NULL;
  weir_kv_cache_params p = {.num_blocks = 0, .block_size = 16};
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p, &kv), WEIR_E_INVAL);
  p.num_blocks = 4;
  p.block_size = 0;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p, &kv), WEIR_E_INVAL);
  CU_ASSERT_PTR_NULL(kv);
  /* 512 MiB for blocks of 32 layers of 64 KiB: 256 blocks. */
  WT_ASSERT_INT_EQ(weir_kv_blocks_from_bytes(512LL << 20, (size_t)32 * (64 << 10), 16), 256);
  WT_ASSERT_INT_EQ(weir_kv_blocks_from_bytes(1000, 300, 16), 3);
  WT_ASSERT_INT_EQ(weir_kv_blocks_from_bytes(0, 100, 16), 0);
  WT_ASSERT_INT_EQ(weir_kv_blocks_from_bytes(1000, 0, 16), 0);
  WT_ASSERT_INT_EQ(weir_kv_blocks_from_bytes(1000, 10, 0), 0);
  /* The one clamp: every slot id must fit an int32_t, so the largest count is the largest
   * the bookkeeping accepts for that block size. */
  WT_ASSERT_INT_EQ(weir_kv_blocks_from_bytes(INT64_MAX, 1, 1), INT32_MAX);
  int64_t most = weir_kv_blocks_from_bytes(INT64_MAX, 1, 16);
  WT_ASSERT_INT_EQ(most, INT32_MAX / 16);
  CU_ASSERT(most * 16 <= INT32_MAX && (most + 1) * 16 > INT32_MAX);
  p.num_blocks = (int32_t)most + 1;
  p.block_size = 16;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p, &kv), WEIR_E_INVAL);
}

static void test_alloc_free_slots(void) {
  weir_kv_cache *kv = mk(10, 16, 0);
  weir_kv_seq *s = seq_new(kv);
  int32_t slots[40];
  int32_t nc = 0;
  weir_kv_copy c;
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, s, 40, slots, &c, &nc), WEIR_OK);
  WT_ASSERT_INT_EQ(nc, 0);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(s), 40);
  int32_t nb = 0;
  const int32_t *bt = weir_kv_seq_block_table(s, &nb);
  WT_ASSERT_INT_EQ(nb, 3);
  for (int32_t p = 0; p < 40; p++) {
    WT_ASSERT_INT_EQ(slots[p], bt[p / 16] * 16 + p % 16);
    WT_ASSERT_INT_EQ(weir_kv_seq_slot(kv, s, p), slots[p]);
  }
  WT_ASSERT_INT_EQ(weir_kv_seq_slot(kv, s, 40), -1);
  WT_ASSERT_INT_EQ(weir_kv_seq_slot(kv, s, -1), -1);
  /* Distinct blocks. */
  CU_ASSERT(bt[0] != bt[1] && bt[1] != bt[2] && bt[0] != bt[2]);
  weir_kv_stats st = stats(kv);
  WT_ASSERT_INT_EQ(st.used_blocks, 3);
  WT_ASSERT_INT_EQ(st.free_blocks, 7);
  WT_ASSERT_INT_EQ(st.cached_blocks, 0);
  WT_ASSERT_INT_EQ(st.num_seqs, 1);
  /* Growing inside the last block takes no block; crossing into a new one takes one. */
  WT_ASSERT_INT_EQ(append(kv, s, 8, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(stats(kv).used_blocks, 3);
  WT_ASSERT_INT_EQ(append(kv, s, 1, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(stats(kv).used_blocks, 4);
  assert_ok(kv);
  /* Truncation gives back the blocks past the new end. */
  weir_kv_seq_truncate(kv, s, 17);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(s), 17);
  WT_ASSERT_INT_EQ(stats(kv).used_blocks, 2);
  weir_kv_seq_truncate(kv, s, 99); /* growing by truncation is ignored */
  WT_ASSERT_INT_EQ(weir_kv_seq_len(s), 17);
  assert_ok(kv);
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, s, 0, NULL, &c, &nc), WEIR_E_INVAL);
  weir_kv_seq_free(kv, s);
  st = stats(kv);
  WT_ASSERT_INT_EQ(st.used_blocks, 0);
  WT_ASSERT_INT_EQ(st.free_blocks, 10);
  WT_ASSERT_INT_EQ(st.num_seqs, 0);
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

static void test_exhaustion_changes_nothing(void) {
  weir_kv_cache *kv = mk(4, 16, 1);
  weir_kv_seq *a = seq_new(kv), *b = seq_new(kv);
  WT_ASSERT_INT_EQ(append(kv, a, 50, NULL, NULL), WEIR_OK); /* 4 blocks */
  WT_ASSERT_INT_EQ(weir_kv_seq_append_capacity(kv, a), 14);
  WT_ASSERT_INT_EQ(weir_kv_seq_append_capacity(kv, b), 0);
  int32_t nb0 = 0;
  const int32_t *t0 = weir_kv_seq_block_table(a, &nb0);
  int32_t before[4];
  memcpy(before, t0, sizeof(before));
  weir_kv_stats st0 = stats(kv);
  WT_ASSERT_INT_EQ(append(kv, a, 15, NULL, NULL), WEIR_E_NOSPACE);
  WT_ASSERT_INT_EQ(append(kv, b, 1, NULL, NULL), WEIR_E_NOSPACE);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(a), 50);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(b), 0);
  int32_t nb1 = 0;
  const int32_t *t1 = weir_kv_seq_block_table(a, &nb1);
  WT_ASSERT_INT_EQ(nb1, 4);
  CU_ASSERT(memcmp(before, t1, sizeof(before)) == 0);
  weir_kv_stats st1 = stats(kv);
  CU_ASSERT(memcmp(&st0, &st1, sizeof(st0)) == 0);
  assert_ok(kv);
  /* Exactly the capacity still fits. */
  WT_ASSERT_INT_EQ(append(kv, a, 14, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(a), 64);
  weir_kv_cache_destroy(kv); /* frees the live sequences too */
}

static void test_fork_cow(void) {
  weir_kv_cache *kv = mk(8, 16, 0);
  weir_kv_seq *p = seq_new(kv), *c = NULL, *c2 = NULL;
  WT_ASSERT_INT_EQ(append(kv, p, 20, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, p, &c), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(c), 20);
  WT_ASSERT_INT_EQ(stats(kv).used_blocks, 2); /* shared, not copied */
  assert_ok(kv);
  int32_t pb[2], nb = 0;
  memcpy(pb, weir_kv_seq_block_table(p, &nb), sizeof(pb));
  /* The shared partial block needs a copy before the child writes into it... */
  WT_ASSERT_INT_EQ(weir_kv_seq_append_capacity(kv, c), 12 + 5 * 16);
  weir_kv_seq_append(kv, c, 1, NULL, NULL, NULL); /* refused: nowhere to report the copy */
  WT_ASSERT_INT_EQ(weir_kv_seq_len(c), 20);
  weir_kv_copy cp = {-1, -1};
  int32_t ncopy = 0, slot = -1;
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, c, 1, &slot, &cp, &ncopy), WEIR_OK);
  WT_ASSERT_INT_EQ(ncopy, 1);
  WT_ASSERT_INT_EQ(cp.src, pb[1]);
  const int32_t *cb = weir_kv_seq_block_table(c, &nb);
  WT_ASSERT_INT_EQ(cb[0], pb[0]); /* the full block stays shared */
  WT_ASSERT_INT_EQ(cb[1], cp.dst);
  CU_ASSERT(cp.dst != pb[1]);
  WT_ASSERT_INT_EQ(slot, cp.dst * 16 + 4);
  WT_ASSERT_INT_EQ(stats(kv).cow_copies, 1);
  assert_ok(kv);
  /* ...while the parent, now the block's only owner, writes in place. */
  ncopy = 7;
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, p, 1, &slot, &cp, &ncopy), WEIR_OK);
  WT_ASSERT_INT_EQ(ncopy, 0);
  WT_ASSERT_INT_EQ(slot, pb[1] * 16 + 4);
  /* The pin keeps the copy source alive even if its owner goes away before the copy. */
  weir_kv_seq_free(kv, p);
  WT_ASSERT_INT_EQ(stats(kv).used_blocks, 3); /* c's two blocks + the pinned source */
  assert_ok(kv);
  weir_kv_cache_copies_done(kv);
  WT_ASSERT_INT_EQ(stats(kv).used_blocks, 2);
  assert_ok(kv);
  /* A fork at a block boundary shares only full blocks: writes go to new blocks. */
  weir_kv_seq_truncate(kv, c, 16);
  WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, c, &c2), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, c2, 3, NULL, &cp, &ncopy), WEIR_OK);
  WT_ASSERT_INT_EQ(ncopy, 0);
  weir_kv_seq_free(kv, c);
  weir_kv_seq_free(kv, c2);
  WT_ASSERT_INT_EQ(stats(kv).free_blocks, 8);
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

static void test_cow_needs_a_block(void) {
  /* Two blocks: the parent holds one partial block, the child shares it; the child can
   * copy into the second block, after which a third writer cannot. */
  weir_kv_cache *kv = mk(2, 4, 0);
  weir_kv_seq *p = seq_new(kv), *c = NULL, *d = NULL;
  WT_ASSERT_INT_EQ(append(kv, p, 2, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, p, &c), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, p, &d), WEIR_OK);
  WT_ASSERT_INT_EQ(append(kv, c, 1, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_append_capacity(kv, d), 0);
  weir_kv_stats st0 = stats(kv);
  WT_ASSERT_INT_EQ(append(kv, d, 1, NULL, NULL), WEIR_E_NOSPACE);
  weir_kv_stats st1 = stats(kv);
  CU_ASSERT(memcmp(&st0, &st1, sizeof(st0)) == 0);
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

static void test_copy_sources_pinned(void) {
  /* a and b share partial block x; c and d share partial block y. a copies away from x, b
   * goes away, then c copies away from y: without the pin, x would be free and become c's
   * destination, and running the two copies in the other order would corrupt a. */
  weir_kv_cache *kv = mk(4, 4, 0);
  weir_kv_seq *a = seq_new(kv), *b = NULL, *c = seq_new(kv), *d = NULL;
  WT_ASSERT_INT_EQ(append(kv, a, 2, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(append(kv, c, 2, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, a, &b), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, c, &d), WEIR_OK);
  weir_kv_copy c1, c2;
  int32_t n1 = 0, n2 = 0;
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, a, 1, NULL, &c1, &n1), WEIR_OK);
  WT_ASSERT_INT_EQ(n1, 1);
  weir_kv_seq_free(kv, b);
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, c, 1, NULL, &c2, &n2), WEIR_OK);
  WT_ASSERT_INT_EQ(n2, 1);
  CU_ASSERT(c2.dst != c1.src);
  CU_ASSERT(c1.dst != c2.src);
  /* The pool is now full: x is held by its pin alone until the copies are done. */
  WT_ASSERT_INT_EQ(weir_kv_cache_num_allocatable(kv), 0);
  weir_kv_cache_copies_done(kv);
  WT_ASSERT_INT_EQ(weir_kv_cache_num_allocatable(kv), 1);
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

/* ---- Prefix cache ---------------------------------------------------------------------- */

static weir_kv_seq *computed_seq(weir_kv_cache *kv, const int32_t *t, int32_t n) {
  weir_kv_seq *s = seq_new(kv);
  WT_ASSERT_INT_EQ(append(kv, s, n, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_register(kv, s, t, n), WEIR_OK);
  return s;
}

static int32_t match(weir_kv_cache *kv, weir_kv_seq **out, const int32_t *t, int32_t n) {
  int32_t cached = -1;
  *out = seq_new(kv);
  WT_ASSERT_INT_EQ(weir_kv_seq_match_prefix(kv, *out, t, n, &cached), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(*out), cached);
  return cached;
}

static void test_prefix_hit_miss_partial(void) {
  weir_kv_cache *kv = mk(16, 16, 1);
  int32_t t[64];
  fill_seq(t, 64, 100);
  weir_kv_seq *a = computed_seq(kv, t, 48);
  int32_t abt[3], nb = 0;
  memcpy(abt, weir_kv_seq_block_table(a, &nb), sizeof(abt));
  weir_kv_seq_free(kv, a);
  weir_kv_stats st = stats(kv);
  WT_ASSERT_INT_EQ(st.cached_blocks, 3);
  WT_ASSERT_INT_EQ(st.used_blocks, 0);
  WT_ASSERT_INT_EQ(st.free_blocks, 13);
  assert_ok(kv);

  /* The same 48 tokens: never the whole prompt, so two blocks (32 tokens). */
  weir_kv_seq *b = NULL;
  WT_ASSERT_INT_EQ(match(kv, &b, t, 48), 32);
  const int32_t *bbt = weir_kv_seq_block_table(b, &nb);
  WT_ASSERT_INT_EQ(nb, 2);
  WT_ASSERT_INT_EQ(bbt[0], abt[0]);
  WT_ASSERT_INT_EQ(bbt[1], abt[1]);
  st = stats(kv);
  WT_ASSERT_INT_EQ(st.used_blocks, 2); /* revived */
  WT_ASSERT_INT_EQ(st.cached_blocks, 1);
  WT_ASSERT_INT_EQ(st.prefix_queries_tokens, 48);
  WT_ASSERT_INT_EQ(st.prefix_hits_tokens, 32);
  assert_ok(kv);

  /* 49 tokens: all three blocks. */
  weir_kv_seq *c = NULL;
  WT_ASSERT_INT_EQ(match(kv, &c, t, 49), 48);
  /* Partial: diverges inside the second block. */
  int32_t u[40];
  memcpy(u, t, sizeof(u));
  u[20] = 7;
  weir_kv_seq *d = NULL;
  WT_ASSERT_INT_EQ(match(kv, &d, u, 40), 16);
  /* Miss: a different first token. */
  u[0] = 1;
  weir_kv_seq *e = NULL;
  WT_ASSERT_INT_EQ(match(kv, &e, u, 40), 0);
  /* Too short for a full block plus one token. */
  weir_kv_seq *f = NULL;
  WT_ASSERT_INT_EQ(match(kv, &f, t, 16), 0);
  st = stats(kv);
  WT_ASSERT_INT_EQ(st.prefix_queries_tokens, 48 + 49 + 40 + 40 + 16);
  WT_ASSERT_INT_EQ(st.prefix_hits_tokens, 32 + 48 + 16);
  /* Matching needs an empty sequence. */
  int32_t cached = 0;
  WT_ASSERT_INT_EQ(weir_kv_seq_match_prefix(kv, c, t, 49, &cached), WEIR_E_INVAL);
  assert_ok(kv);
  /* A matched sequence continues after the cached tokens in a fresh block. */
  int32_t slot = -1, ncopy = 0;
  weir_kv_copy cp;
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, b, 1, &slot, &cp, &ncopy), WEIR_OK);
  WT_ASSERT_INT_EQ(ncopy, 0);
  CU_ASSERT(slot / 16 != abt[0] && slot / 16 != abt[1]);
  weir_kv_cache_destroy(kv);
}

static void test_chain_hash(void) {
  int32_t x[4] = {1, 2, 3, 4}, y[4] = {5, 6, 7, 8}, z[4] = {9, 9, 9, 9};
  uint64_t hx = weir_kv_block_hash(WEIR_KV_ROOT_HASH, x, 4);
  uint64_t hz = weir_kv_block_hash(WEIR_KV_ROOT_HASH, z, 4);
  CU_ASSERT(weir_kv_block_hash(hx, y, 4) != weir_kv_block_hash(hz, y, 4));
  int32_t xr[4] = {4, 3, 2, 1};
  CU_ASSERT(hx != weir_kv_block_hash(WEIR_KV_ROOT_HASH, xr, 4));
  CU_ASSERT(hx == weir_kv_block_hash(WEIR_KV_ROOT_HASH, x, 4));

  /* The same block of tokens under two prefixes is two cache entries. */
  weir_kv_cache *kv = mk(16, 4, 1);
  int32_t xy[9] = {1, 2, 3, 4, 5, 6, 7, 8, 0}, zy[9] = {9, 9, 9, 9, 5, 6, 7, 8, 0};
  weir_kv_seq *a = computed_seq(kv, xy, 8);
  weir_kv_seq *b = NULL;
  WT_ASSERT_INT_EQ(match(kv, &b, zy, 9), 0); /* y alone is not reachable under z */
  WT_ASSERT_INT_EQ(append(kv, b, 8, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_register(kv, b, zy, 8), WEIR_OK);
  weir_kv_seq *c = NULL, *d = NULL;
  WT_ASSERT_INT_EQ(match(kv, &c, zy, 9), 8);
  WT_ASSERT_INT_EQ(match(kv, &d, xy, 9), 8);
  int32_t nb;
  const int32_t *ab = weir_kv_seq_block_table(a, &nb);
  const int32_t *bb = weir_kv_seq_block_table(b, &nb);
  const int32_t *cb = weir_kv_seq_block_table(c, &nb);
  const int32_t *db = weir_kv_seq_block_table(d, &nb);
  WT_ASSERT_INT_EQ(cb[1], bb[1]);
  WT_ASSERT_INT_EQ(db[1], ab[1]);
  CU_ASSERT(ab[1] != bb[1]);
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

static void test_register_dedup_and_disabled(void) {
  weir_kv_cache *kv = mk(8, 4, 1);
  int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  /* Two sequences computed the same tokens independently: the cache keeps one copy. */
  weir_kv_seq *a = computed_seq(kv, t, 8), *b = computed_seq(kv, t, 8);
  weir_kv_seq_free(kv, a);
  weir_kv_seq_free(kv, b);
  weir_kv_stats st = stats(kv);
  WT_ASSERT_INT_EQ(st.cached_blocks, 2);
  WT_ASSERT_INT_EQ(st.free_blocks, 6);
  assert_ok(kv);
  /* Registering tokens past the computed length registers nothing more. */
  weir_kv_seq *c = seq_new(kv);
  WT_ASSERT_INT_EQ(append(kv, c, 3, NULL, NULL), WEIR_OK);
  int32_t u[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  WT_ASSERT_INT_EQ(weir_kv_seq_register(kv, c, u, 8), WEIR_OK);
  weir_kv_seq_free(kv, c);
  WT_ASSERT_INT_EQ(stats(kv).cached_blocks, 2);
  weir_kv_cache_destroy(kv);

  kv = mk(8, 4, 0);
  a = computed_seq(kv, t, 8);
  weir_kv_seq_free(kv, a);
  st = stats(kv);
  WT_ASSERT_INT_EQ(st.cached_blocks, 0);
  WT_ASSERT_INT_EQ(st.free_blocks, 8);
  WT_ASSERT_INT_EQ(match(kv, &b, t, 8), 0);
  WT_ASSERT_INT_EQ(stats(kv).prefix_queries_tokens, 0);
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

static void test_lru_eviction_and_revival(void) {
  /* 6 blocks of 4: A and B each leave two cached blocks, two stay free. */
  weir_kv_cache *kv = mk(6, 4, 1);
  int32_t ta[9] = {1, 1, 1, 1, 2, 2, 2, 2, 0}, tb[9] = {3, 3, 3, 3, 4, 4, 4, 4, 0};
  weir_kv_seq *a = computed_seq(kv, ta, 8), *b = computed_seq(kv, tb, 8);
  weir_kv_seq_free(kv, a); /* LRU: a1 a0 */
  weir_kv_seq_free(kv, b); /* LRU: a1 a0 b1 b0 */
  weir_kv_stats st = stats(kv);
  WT_ASSERT_INT_EQ(st.cached_blocks, 4);
  WT_ASSERT_INT_EQ(st.free_blocks, 2);
  WT_ASSERT_INT_EQ(weir_kv_cache_num_allocatable(kv), 6);
  /* Three blocks: the two free ones first, then the least recently released (a1). */
  weir_kv_seq *d = seq_new(kv);
  WT_ASSERT_INT_EQ(append(kv, d, 12, NULL, NULL), WEIR_OK);
  st = stats(kv);
  WT_ASSERT_INT_EQ(st.evictions, 1);
  WT_ASSERT_INT_EQ(st.cached_blocks, 3);
  WT_ASSERT_INT_EQ(st.free_blocks, 0);
  assert_ok(kv);
  /* A's first block survived (its tail went first); the hit revives it. LRU: b1 b0. */
  weir_kv_seq *a2 = NULL;
  WT_ASSERT_INT_EQ(match(kv, &a2, ta, 9), 4);
  st = stats(kv);
  WT_ASSERT_INT_EQ(st.cached_blocks, 2);
  WT_ASSERT_INT_EQ(st.used_blocks, 4);
  /* The next allocation evicts b1, not b0 and not the revived a0. */
  WT_ASSERT_INT_EQ(append(kv, d, 1, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(stats(kv).evictions, 2);
  weir_kv_seq *b2 = NULL;
  WT_ASSERT_INT_EQ(match(kv, &b2, tb, 9), 4);
  weir_kv_seq_free(kv, a2);
  weir_kv_seq_free(kv, b2);
  assert_ok(kv);
  /* Everything referenced or cached: one more block is an eviction, none left is NOSPACE. */
  st = stats(kv);
  WT_ASSERT_INT_EQ(st.used_blocks + st.cached_blocks + st.free_blocks, 6);
  weir_kv_cache_destroy(kv);
}

static void test_truncate_into_registered_block(void) {
  weir_kv_cache *kv = mk(8, 4, 1);
  int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 0};
  /* Sole owner: the block leaves the cache when rewritten. */
  weir_kv_seq *a = computed_seq(kv, t, 8);
  weir_kv_seq_truncate(kv, a, 6);
  weir_kv_copy cp;
  int32_t ncopy = 9;
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, a, 1, NULL, &cp, &ncopy), WEIR_OK);
  WT_ASSERT_INT_EQ(ncopy, 0);
  weir_kv_seq *b = NULL;
  WT_ASSERT_INT_EQ(match(kv, &b, t, 9), 4); /* only the untouched first block */
  weir_kv_seq_free(kv, a);
  weir_kv_seq_free(kv, b);
  assert_ok(kv);
  /* Shared with a sequence that found it in the cache: the writer gets a copy. */
  a = computed_seq(kv, t, 8);
  WT_ASSERT_INT_EQ(match(kv, &b, t, 9), 8);
  int32_t nb;
  int32_t shared = weir_kv_seq_block_table(a, &nb)[1];
  weir_kv_seq_truncate(kv, a, 6);
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, a, 1, NULL, &cp, &ncopy), WEIR_OK);
  WT_ASSERT_INT_EQ(ncopy, 1);
  WT_ASSERT_INT_EQ(cp.src, shared);
  WT_ASSERT_INT_EQ(weir_kv_seq_block_table(b, &nb)[1], shared);
  weir_kv_cache_copies_done(kv);
  weir_kv_seq *c = NULL;
  WT_ASSERT_INT_EQ(match(kv, &c, t, 9), 8); /* the cached content is intact */
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

/* ---- Randomized -------------------------------------------------------------------------
 * Simulated device: content[slot] holds a fingerprint of the token prefix that produced it.
 * Each step: structural operations, then appends and frees (collecting copy orders), then the copies
 * in REVERSE order (the pins make the order irrelevant), then the writes, then a check that
 * every live sequence reads back its own prefix fingerprints, then registrations. */

#define R_BLOCKS 48
#define R_BS 4
#define R_SEQS 12
#define R_MAXTOK 256

typedef struct rseq {
  weir_kv_seq *kv;
  int32_t tok[R_MAXTOK];
  int32_t ntok; /* known tokens; >= len */
} rseq;

static uint64_t rng_state = 88172645463325252ULL;
static uint32_t rnd(uint32_t n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state % n);
}

/* fp[p] = fingerprint of t[0..p], for p < n. */
static void fingerprints(const int32_t *t, int32_t n, uint64_t *fp) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t i = 0; i < n; i++) fp[i] = h = (h ^ (uint64_t)(uint32_t)t[i]) * 1099511628211ULL;
}

static void extend(rseq *r, int32_t upto) {
  while (r->ntok < upto) r->tok[r->ntok++] = (int32_t)rnd(3); /* small alphabet: many hits */
}

static void test_randomized(void) {
  weir_kv_cache *kv = mk(R_BLOCKS, R_BS, 1);
  static uint64_t content[R_BLOCKS * R_BS];
  rseq seqs[R_SEQS];
  memset(seqs, 0, sizeof(seqs));
  int failures = 0, hits = 0, nospace = 0, copies_seen = 0;
  for (int step = 0; step < 3000 && failures < 5; step++) {
    /* Structural operations. */
    for (int op = 0; op < 3; op++) {
      rseq *r = &seqs[rnd(R_SEQS)];
      uint32_t what = rnd(10);
      if (!r->kv && what < 5) {
        /* A new sequence, often sharing a prefix with a live or dead one. */
        rseq *src = &seqs[rnd(R_SEQS)];
        r->ntok = 0;
        if (src != r && src->ntok > 0) {
          int32_t k = (int32_t)rnd((uint32_t)src->ntok + 1);
          memcpy(r->tok, src->tok, (size_t)k * sizeof(int32_t));
          r->ntok = k;
        }
        extend(r, r->ntok + 1 + (int32_t)rnd(20));
        WT_ASSERT_INT_EQ(weir_kv_seq_create(kv, &r->kv), WEIR_OK);
        int32_t cached = -1;
        WT_ASSERT_INT_EQ(weir_kv_seq_match_prefix(kv, r->kv, r->tok, r->ntok, &cached),
                         WEIR_OK);
        CU_ASSERT(cached % R_BS == 0 && cached < r->ntok);
        if (cached > 0) hits++;
        /* What the cache gave must be this prompt's KV. */
        uint64_t fp[R_MAXTOK];
        fingerprints(r->tok, cached, fp);
        for (int32_t p = 0; p < cached; p++)
          if (content[weir_kv_seq_slot(kv, r->kv, p)] != fp[p]) {
            failures++;
            fprintf(stderr, "\n  step %d: prefix hit returned foreign KV at %d\n", step, p);
            break;
          }
      } else if (r->kv && what < 7) {
        weir_kv_seq_free(kv, r->kv);
        r->kv = NULL;
      } else if (r->kv && what < 8) {
        rseq *dst = NULL;
        for (int i = 0; i < R_SEQS; i++)
          if (!seqs[i].kv) dst = &seqs[i];
        if (dst) {
          WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, r->kv, &dst->kv), WEIR_OK);
          int32_t len = weir_kv_seq_len(r->kv);
          memcpy(dst->tok, r->tok, (size_t)len * sizeof(int32_t));
          dst->ntok = len;
        }
      } else if (r->kv) {
        int32_t len = weir_kv_seq_len(r->kv);
        int32_t nl = (int32_t)rnd((uint32_t)len + 1);
        weir_kv_seq_truncate(kv, r->kv, nl);
        r->ntok = nl; /* rejected tokens: what follows will differ */
      }
    }
    /* Appends; pending writes are (slot, fingerprint). */
    static int32_t wslot[R_SEQS * 16];
    static uint64_t wval[R_SEQS * 16];
    weir_kv_copy copies[R_SEQS];
    int nw = 0, ncp = 0;
    for (int i = 0; i < R_SEQS; i++) {
      rseq *r = &seqs[i];
      if (!r->kv || rnd(3) == 0) continue;
      if (rnd(6) == 0) {
        /* Freed after other sequences' copy orders in the same step: a copy source it
         * shared must survive until the copies have run. */
        weir_kv_seq_free(kv, r->kv);
        r->kv = NULL;
        continue;
      }
      int32_t len = weir_kv_seq_len(r->kv);
      int32_t n = 1 + (int32_t)rnd(8);
      if (len + n >= R_MAXTOK) continue;
      weir_kv_stats st0 = stats(kv);
      int32_t slots[16], nc = 0;
      int rc = weir_kv_seq_append(kv, r->kv, n, slots, &copies[ncp], &nc);
      if (rc == WEIR_E_NOSPACE) {
        nospace++;
        weir_kv_stats st1 = stats(kv);
        CU_ASSERT(memcmp(&st0, &st1, sizeof(st0)) == 0);
        WT_ASSERT_INT_EQ(weir_kv_seq_len(r->kv), len);
        continue;
      }
      WT_ASSERT_INT_EQ(rc, WEIR_OK);
      ncp += nc;
      extend(r, len + n);
      uint64_t fp[R_MAXTOK];
      fingerprints(r->tok, len + n, fp);
      for (int32_t j = 0; j < n; j++) {
        wslot[nw] = slots[j];
        wval[nw++] = fp[len + j];
      }
    }
    copies_seen += ncp;
    /* The orders of one step are independent: no destination is also a source. */
    for (int i = 0; i < ncp; i++)
      for (int j = 0; j < ncp; j++)
        if (copies[i].dst == copies[j].src) {
          failures++;
          fprintf(stderr, "\n  step %d: block %d is a copy source and destination\n", step,
                  copies[i].dst);
        }
    for (int i = ncp - 1; i >= 0; i--)
      memcpy(&content[copies[i].dst * R_BS], &content[copies[i].src * R_BS],
             R_BS * sizeof(uint64_t));
    for (int i = 0; i < nw; i++) content[wslot[i]] = wval[i];
    weir_kv_cache_copies_done(kv);
    /* Every live sequence reads back exactly its own KV. */
    for (int i = 0; i < R_SEQS && failures < 5; i++) {
      rseq *r = &seqs[i];
      if (!r->kv) continue;
      int32_t len = weir_kv_seq_len(r->kv);
      uint64_t fp[R_MAXTOK];
      fingerprints(r->tok, len, fp);
      for (int32_t p = 0; p < len; p++)
        if (content[weir_kv_seq_slot(kv, r->kv, p)] != fp[p]) {
          failures++;
          fprintf(stderr, "\n  step %d: seq %d reads foreign KV at %d\n", step, i, p);
          break;
        }
      if (rnd(2)) WT_ASSERT_INT_EQ(weir_kv_seq_register(kv, r->kv, r->tok, len), WEIR_OK);
    }
    char why[256] = "";
    if (weir_kv_cache_check(kv, why, sizeof(why)) != WEIR_OK) {
      failures++;
      fprintf(stderr, "\n  step %d: %s\n", step, why);
    }
    weir_kv_stats st = stats(kv);
    if (st.used_blocks + st.cached_blocks + st.free_blocks != R_BLOCKS) failures++;
  }
  WT_ASSERT_INT_EQ(failures, 0);
  /* The run exercised what it claims to. */
  CU_ASSERT(hits > 50);
  CU_ASSERT(nospace > 10);
  CU_ASSERT(copies_seen > 10);
  CU_ASSERT(stats(kv).evictions > 10);
  for (int i = 0; i < R_SEQS; i++) weir_kv_seq_free(kv, seqs[i].kv);
  weir_kv_stats st = stats(kv);
  WT_ASSERT_INT_EQ(st.used_blocks, 0);
  WT_ASSERT_INT_EQ(st.cached_blocks + st.free_blocks, R_BLOCKS);
  assert_ok(kv);
  weir_kv_cache_destroy(kv);
}

/* ---- Sliding window -------------------------------------------------------------------- */

/* A pool whose layers all slide over 20 tokens, in 4-token blocks: a 300-token sequence
 * grown one token at a time, then in 16-token chunks, holds at most the window's blocks
 * plus two; the released entries read -1 and their slots -1; the rest keep their slots;
 * registration, fork and free still keep every invariant. */
static void test_sliding_window_frees_blocks(void) {
  enum { W = 20, BS = 4, N = 300 };
  weir_kv_cache_params p = {.num_blocks = 16, .block_size = BS, .prefix_caching = 1,
                            .sliding_window = W};
  weir_kv_cache *kv = NULL;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p, &kv), WEIR_OK);
  /* The scheduler's bound: a whole sequence needs no more than this. */
  WT_ASSERT_INT_EQ(weir_kv_cache_blocks_needed(kv, N), (W + BS - 1) / BS + 2);
  WT_ASSERT_INT_EQ(weir_kv_cache_blocks_needed(kv, 8), 2);
  int32_t toks[N];
  fill_seq(toks, N, 100);
  for (int chunk = 1; chunk <= 16; chunk += 15) {
    weir_kv_seq *s = seq_new(kv);
    int32_t max_used = 0;
    for (int32_t len = 0; len < N; len += chunk) {
      int32_t n = len + chunk <= N ? chunk : N - len;
      WT_ASSERT_INT_EQ(append(kv, s, n, NULL, NULL), WEIR_OK);
      WT_ASSERT_INT_EQ(weir_kv_seq_register(kv, s, toks, len + n), WEIR_OK);
      weir_kv_stats st = stats(kv);
      if (st.used_blocks > max_used) max_used = st.used_blocks;
      /* Everything the first new token (at len) may still read holds a slot. */
      for (int32_t q = len - W + 1 > 0 ? len - W + 1 : 0; q < len + n; q++)
        CU_ASSERT(weir_kv_seq_slot(kv, s, q) >= 0);
      assert_ok(kv);
    }
    printf("\n    chunk %d: at most %d blocks in use for %d tokens (window %d)", chunk, max_used,
           N, W);
    CU_ASSERT(max_used <= (W + chunk + BS - 1) / BS + 1);
    CU_ASSERT(max_used < N / BS);
    int32_t nb = 0;
    const int32_t *t = weir_kv_seq_block_table(s, &nb);
    WT_ASSERT_INT_EQ(nb, N / BS);
    int32_t rel = weir_kv_seq_released(s);
    CU_ASSERT(rel >= (N - W - chunk) / BS - 1);
    for (int32_t i = 0; i < rel; i++) WT_ASSERT_INT_EQ(t[i], -1);
    WT_ASSERT_INT_EQ(weir_kv_seq_slot(kv, s, 0), -1);
    /* a fork shares only the live blocks */
    weir_kv_seq *f = NULL;
    WT_ASSERT_INT_EQ(weir_kv_seq_fork(kv, s, &f), WEIR_OK);
    WT_ASSERT_INT_EQ(weir_kv_seq_released(f), rel);
    assert_ok(kv);
    weir_kv_seq_free(kv, f);
    weir_kv_seq_free(kv, s);
    assert_ok(kv);
    WT_ASSERT_INT_EQ(stats(kv).used_blocks, 0);
  }
  /* Released full blocks stay in the prefix cache: a new sequence with the same tokens finds
   * the chain (its KV is still there until evicted). */
  weir_kv_cache_params p3 = {.num_blocks = 64, .block_size = BS, .prefix_caching = 1,
                             .sliding_window = 8};
  weir_kv_cache *big = NULL;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p3, &big), WEIR_OK);
  weir_kv_seq *s = seq_new(big);
  WT_ASSERT_INT_EQ(append(big, s, 24, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_register(big, s, toks, 24), WEIR_OK);
  WT_ASSERT_INT_EQ(append(big, s, 4, NULL, NULL), WEIR_OK); /* releases blocks 0..3 */
  WT_ASSERT_INT_EQ(weir_kv_seq_released(s), 4);
  WT_ASSERT_INT_EQ(weir_kv_seq_register(big, s, toks, 28), WEIR_OK);
  weir_kv_seq *s2 = seq_new(big);
  int32_t cached = 0;
  WT_ASSERT_INT_EQ(weir_kv_seq_match_prefix(big, s2, toks, 9, &cached), WEIR_OK);
  WT_ASSERT_INT_EQ(cached, 8);
  assert_ok(big);
  weir_kv_seq_free(big, s2);
  weir_kv_seq_free(big, s);
  assert_ok(big);
  weir_kv_cache_destroy(big);
  /* Without a window nothing is released. */
  weir_kv_cache *plain = mk(80, BS, 0);
  s = seq_new(plain);
  for (int32_t len = 0; len < N; len += 16)
    WT_ASSERT_INT_EQ(append(plain, s, 16 < N - len ? 16 : N - len, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_released(s), 0);
  WT_ASSERT_INT_EQ(stats(plain).used_blocks, N / BS);
  weir_kv_cache_destroy(plain);
  /* The append capacity counts the blocks an append would release. */
  weir_kv_cache_params p2 = {.num_blocks = 8, .block_size = BS, .sliding_window = W};
  weir_kv_cache *small = NULL;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p2, &small), WEIR_OK);
  s = seq_new(small);
  WT_ASSERT_INT_EQ(append(small, s, 32, NULL, NULL), WEIR_OK); /* all 8 blocks */
  WT_ASSERT_INT_EQ(weir_kv_cache_num_allocatable(small), 0);
  /* first new token at 32 sees 13..32: blocks 0..2 (tokens 0..11) go back */
  CU_ASSERT(weir_kv_seq_append_capacity(small, s) == 3 * BS);
  WT_ASSERT_INT_EQ(append(small, s, 12, NULL, NULL), WEIR_OK);
  assert_ok(small);
  weir_kv_cache_destroy(small);
  weir_kv_cache_params bad = {.num_blocks = 8, .block_size = BS, .sliding_window = -1};
  weir_kv_cache *none = NULL;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&bad, &none), WEIR_E_INVAL);
  weir_kv_cache_destroy(kv);
}

int main(void) {
  static const wt_test tests[] = {
      {"sliding_window_frees_blocks", test_sliding_window_frees_blocks},
      {"params", test_params},
      {"alloc_free_slots", test_alloc_free_slots},
      {"exhaustion_changes_nothing", test_exhaustion_changes_nothing},
      {"fork_cow", test_fork_cow},
      {"cow_needs_a_block", test_cow_needs_a_block},
      {"copy_sources_pinned", test_copy_sources_pinned},
      {"prefix_hit_miss_partial", test_prefix_hit_miss_partial},
      {"chain_hash", test_chain_hash},
      {"register_dedup_and_disabled", test_register_dedup_and_disabled},
      {"lru_eviction_and_revival", test_lru_eviction_and_revival},
      {"truncate_into_registered_block", test_truncate_into_registered_block},
      {"randomized", test_randomized},
      {NULL, NULL}};
  return wt_run_suite("kv", tests);
}
