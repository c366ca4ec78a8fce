/* The shared paged KV cache: host-side bookkeeping of the block pool.
 *
 * Core owns the pool's bookkeeping; the attention plugin owns the bytes (sdk weir/kv.h). The
 * server creates the bookkeeping as part of a weir_kv_pool (kv_pool.h), which also owns the
 * geometry and the device memory; tests create it alone. This file never touches device
 * memory: it hands out block ids, keeps per-sequence block
 * tables, reference counts, copy-on-write and the prefix cache, and tells the engine which
 * blocks to copy. A token at position p of a sequence lives in slot
 * block_table[p / block_size] * block_size + p % block_size.
 *
 * Block states. Every block is in exactly one state:
 *   used   ref > 0 (held by one or more sequences, or pinned as a pending copy source);
 *   cached ref == 0 but registered in the prefix cache: it sits on the LRU list, is reused
 *          by a prefix hit ("revived") or evicted when the free list is empty;
 *   free   ref == 0, not registered: on the free list.
 * used + cached + free == num_blocks always. Allocatable blocks = free + cached.
 *
 * Prefix cache. A FULL block (block_size tokens) is identified by a 64-bit hash chained over
 * its parent block's hash and its own token ids, so equal tokens under different prefixes
 * get different hashes. The manager keeps each registered block's token ids and parent hash
 * and compares them on every hit, so a hash collision can never return wrong KV.
 *
 * Errors. Every fallible call is all-or-nothing: when it returns an error nothing changed.
 * Running out of blocks is WEIR_E_NOSPACE, a host allocation failure WEIR_E_NOMEM.
 *
 * Threading. Not thread-safe: one owner (the engine thread) makes every call.
 *
 * Design notes: docs/kv-cache.md. */
#ifndef WEIR_KV_CACHE_H
#define WEIR_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "weir/status.h"

typedef struct weir_kv_cache weir_kv_cache;
typedef struct weir_kv_seq weir_kv_seq;

typedef struct weir_kv_cache_params {
  int32_t num_blocks;  /* > 0 */
  int32_t block_size;  /* tokens per block, > 0 (the pool passes its geometry's) */
  int prefix_caching;  /* nonzero: register full blocks and reuse them across sequences */
  /* > 0: every layer of every model in the pool attends over a sliding window of this many
   * tokens, so a token at position p is never read by a query at position >= p + window.
   * weir_kv_seq_append then releases, before it allocates, the blocks of the sequence that
   * lie wholly before the window of the first token it appends: a long sequence holds about
   * window / block_size + 1 blocks plus those of the tokens appended. Their table entries
   * become -1 (attention plugins skip them, weir_attn_layer_params). 0: never. */
  int32_t sliding_window;
} weir_kv_cache_params;

/* One copy-on-write order: copy block src to block dst in every layer (attention
 * copy_blocks) BEFORE the forward pass of the step that reported it. */
typedef struct weir_kv_copy {
  int32_t src;
  int32_t dst;
} weir_kv_copy;

typedef struct weir_kv_stats {
  int32_t num_blocks;
  int32_t block_size;
  int32_t used_blocks;   /* ref > 0 */
  int32_t cached_blocks; /* ref == 0, registered, evictable */
  int32_t free_blocks;   /* ref == 0, unregistered */
  int32_t num_seqs;      /* live sequences */
  uint64_t prefix_queries_tokens; /* tokens passed to weir_kv_seq_match_prefix */
  uint64_t prefix_hits_tokens;    /* of which served from the cache */
  uint64_t evictions;             /* cached blocks evicted to satisfy an allocation */
  uint64_t cow_copies;            /* copy-on-write orders issued */
} weir_kv_stats;

/* ---- The pool -------------------------------------------------------------------------- */

/* Creates an empty pool (all blocks free). WEIR_E_INVAL on a bad parameter, WEIR_E_NOMEM.
 * *out is freed with weir_kv_cache_destroy. */
int weir_kv_cache_create(const weir_kv_cache_params *p, weir_kv_cache **out);
/* Frees the pool and every sequence still alive in it (their pointers become invalid). */
void weir_kv_cache_destroy(weir_kv_cache *kv);

int32_t weir_kv_cache_block_size(const weir_kv_cache *kv);
int32_t weir_kv_cache_num_blocks(const weir_kv_cache *kv);
/* Blocks an allocation may take right now: free + cached. */
int32_t weir_kv_cache_num_allocatable(const weir_kv_cache *kv);
void weir_kv_cache_stats(const weir_kv_cache *kv, weir_kv_stats *out);

/* Drops the temporary references that keep the source block of every copy reported since
 * the last call alive. Call once the copies have been executed (the scheduler does it at the
 * start of each step). Until then a copy source cannot be freed and reused as the
 * destination of another copy in the same batch, so copies may run in any order or in
 * parallel. */
void weir_kv_cache_copies_done(weir_kv_cache *kv);

/* Walks every structure and checks the invariants (state counts add up, no block both free
 * and referenced, refcounts equal the table references plus pins, LRU and hash table
 * consistent). Returns WEIR_OK or WEIR_E_INTERNAL (writing a reason into why when not NULL).
 * O(num_blocks + total table length): for tests and debug builds. */
int weir_kv_cache_check(const weir_kv_cache *kv, char *why, size_t whylen);

/* The most blocks a sequence of `tokens` tokens holds at once, appended one at a time:
 * ceil(tokens / block_size), or with a sliding window at most the window's blocks plus two.
 * The scheduler's test of whether a sequence can ever fit the pool. */
int64_t weir_kv_cache_blocks_needed(const weir_kv_cache *kv, int64_t tokens);

/* ---- Sequences ------------------------------------------------------------------------- */

/* Creates an empty sequence (length 0, no blocks). WEIR_E_NOMEM. Owned by the pool: free it
 * with weir_kv_seq_free (or it dies with weir_kv_cache_destroy). */
int weir_kv_seq_create(weir_kv_cache *kv, weir_kv_seq **out);

/* Creates a sequence sharing every block of parent (refcount + 1 each), with the same
 * length. Writing into the shared partially-filled last block later triggers copy-on-write
 * in weir_kv_seq_append. WEIR_E_NOMEM. */
int weir_kv_seq_fork(weir_kv_cache *kv, const weir_kv_seq *parent, weir_kv_seq **out);

/* Releases every block (refcount - 1; a block reaching 0 goes to the LRU when registered,
 * else to the free list; the sequence's last block is released first so it is evicted
 * before its prefix) and frees the sequence. NULL is ignored. */
void weir_kv_seq_free(weir_kv_cache *kv, weir_kv_seq *seq);

/* Tokens whose slots the sequence holds (its KV length). */
int32_t weir_kv_seq_len(const weir_kv_seq *seq);
/* The block table: *num_blocks entries, valid until the next call that changes this
 * sequence. Never NULL when *num_blocks > 0. With a sliding window the leading entries of
 * released blocks are -1 (weir_kv_seq_released). */
const int32_t *weir_kv_seq_block_table(const weir_kv_seq *seq, int32_t *num_blocks);
/* Slot of position pos (0 <= pos < len), or -1 when out of range or released. */
int32_t weir_kv_seq_slot(const weir_kv_cache *kv, const weir_kv_seq *seq, int32_t pos);
/* Leading blocks of the sequence released because they slid out of the window. */
int32_t weir_kv_seq_released(const weir_kv_seq *seq);
/* Releases the blocks of seq lying wholly before position pos (their table entries become
 * -1; a registered one stays in the prefix cache). The caller promises no query will read
 * a position below pos again. Returns the number released. weir_kv_seq_append calls it by
 * itself when the pool has a sliding window. */
int32_t weir_kv_seq_release_before(weir_kv_cache *kv, weir_kv_seq *seq, int32_t pos);
/* The slots of positions [start, start + n) into slots[0..n): the slot mapping of a batch.
 * The cache alone computes slots (the scheduler, the engine's draft passes, calibration and
 * `weir perplexity` all ask it). WEIR_E_INVAL for a bad argument, WEIR_E_RANGE when the
 * positions reach past the sequence's length or into a block released by a sliding window. */
int weir_kv_seq_slots(const weir_kv_cache *kv, const weir_kv_seq *seq, int32_t start,
                      int32_t n, int32_t *slots);

/* Prefix-cache lookup for an EMPTY sequence about to be prefilled with tokens[0..n): takes
 * references on the longest chain of cached full blocks matching the tokens, never covering
 * the last token (so at least one token is computed and yields logits), and sets the
 * sequence's length to the tokens found, a multiple of block_size. Revives cached blocks.
 * *num_cached receives that length (0 on a miss or when prefix caching is off). Counts n
 * queried and *num_cached hit tokens. WEIR_E_INVAL when seq is not empty, WEIR_E_NOMEM. */
int weir_kv_seq_match_prefix(weir_kv_cache *kv, weir_kv_seq *seq, const int32_t *tokens,
                             int32_t n, int32_t *num_cached);

/* Tokens that weir_kv_seq_append could add to seq right now without evicting a referenced
 * block (room in its last block plus every allocatable block, plus the blocks the append
 * would release out of a sliding window, less a block for copy-on-write when the last block
 * is shared). */
int64_t weir_kv_seq_append_capacity(const weir_kv_cache *kv, const weir_kv_seq *seq);

/* Grows seq by n >= 1 tokens at positions [len, len + n): allocates the blocks they need
 * (evicting LRU cached blocks when the free list is empty) and, when the first new token
 * falls into a partially-filled last block that is shared (ref > 1), replaces that block by
 * a private copy. slots (may be NULL) receives the n slots. copy (may be NULL only when the
 * caller knows no copy can arise) receives at most one copy order and *num_copies (may be
 * NULL likewise) its count, 0 or 1; the engine must execute it before the forward.
 * All-or-nothing: WEIR_E_NOSPACE when the blocks do not suffice, WEIR_E_NOMEM; on error
 * nothing changed. */
int weir_kv_seq_append(weir_kv_cache *kv, weir_kv_seq *seq, int32_t n, int32_t *slots,
                       weir_kv_copy *copy, int32_t *num_copies);

/* Shrinks seq to new_len <= len tokens (rolling back rejected speculative tokens, undoing a
 * failed step): releases the blocks past the new end. (With a sliding window, new_len should
 * not reach into the released blocks: those positions have no KV any more.) A registered block that becomes the
 * partial last block is made private before it is written again (unregistered when only
 * this sequence holds it, copied otherwise), so cached content never changes. new_len
 * greater than len is ignored. */
void weir_kv_seq_truncate(weir_kv_cache *kv, weir_kv_seq *seq, int32_t new_len);

/* Registers in the prefix cache every full block of seq lying within the first
 * min(n, len) tokens that is not registered yet. tokens[0..n) are the sequence's token ids
 * from position 0, and the caller promises their KV has been computed (the forward that
 * wrote them succeeded). A block whose hash is already registered by another block is left
 * unregistered (the cache keeps one copy). No-op when prefix caching is off. WEIR_E_INVAL
 * when n < 0. */
int weir_kv_seq_register(weir_kv_cache *kv, weir_kv_seq *seq, const int32_t *tokens,
                         int32_t n);

/* The chained hash of one full block (exposed for tests and tools): parent is the previous
 * block's hash, or WEIR_KV_ROOT_HASH for the first block of a sequence. */
#define WEIR_KV_ROOT_HASH UINT64_C(0x6a09e667f3bcc909)
uint64_t weir_kv_block_hash(uint64_t parent, const int32_t *tokens, int32_t n);

#endif
