/* The paged KV cache as one object: geometry, device memory and bookkeeping.
 *
 * A weir_kv_pool is built once at start-up from the [cache] configuration, the attention
 * plugin (which says how many bytes one block of one layer takes) and the device plugin
 * (which holds the memory). It owns
 *   - the geometry: tokens per block, bytes per block over every layer of every model that
 *     keeps KV in the pool, the number of blocks (one clamp, weir_kv_blocks_from_bytes), and
 *     the block-table stride (blocks of the longest sequence);
 *   - the memory: one device allocation, handed out as per-layer views (weir_kv_view, the
 *     layout sdk/include/weir/kv.h describes), and the block copies copy-on-write orders;
 *   - the bookkeeping: a weir_kv_cache over the same blocks (kv_cache.h), which the scheduler
 *     drives.
 * The model only asks for views; the scheduler only sees the bookkeeping; the engine runs the
 * copies. Nothing else knows the geometry.
 *
 * Models sharing the pool. The pool holds KV for one or more models ("groups"), e.g. a target
 * and a draft model with a different layer count and head shape. Every block id stands for
 * block_size token positions in every layer of every group, so one block table (and one prefix
 * cache) serves all of them and a block's bytes are the sum of each group's
 * n_layers * block_bytes. Group g's layers are laid out one after the other from the group's
 * own base (each layer a weir_kv_view of num_blocks blocks), groups one after the other, each
 * group aligned to WEIR_KV_POOL_ALIGN bytes. Every group shares block_size and the KV dtype.
 * docs/kv-cache.md discusses the choice.
 *
 * Errors: negative weir_status codes with a one-line reason in err. Threading: the pool is
 * created and destroyed on one thread; views and copies are for the engine thread. */
#ifndef WEIR_KV_POOL_H
#define WEIR_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "kv/kv_cache.h"
#include "weir/kv.h"

struct weir_plugin;

/* Every group of the pool starts at a multiple of this many bytes. */
#define WEIR_KV_POOL_ALIGN 256
/* Most models (groups) one pool holds. */
#define WEIR_KV_POOL_MAX_GROUPS 4

typedef struct weir_kv_pool weir_kv_pool;

typedef struct weir_kv_pool_params {
  int32_t block_size;     /* tokens per block; 0: WEIR_KV_DEFAULT_BLOCK_SIZE (weir/kv.h) */
  weir_dtype kv_dtype;    /* the attention plugin's KV dtype for every group */
  int64_t num_blocks;     /* > 0: exactly this many blocks (subject to the clamp below) */
  int64_t memory_bytes;   /* else: as many blocks as fit in this many bytes */
  int32_t max_model_len;  /* > 0: the longest sequence, which sets the block-table stride */
  int prefix_caching;     /* nonzero: the bookkeeping's prefix cache is on */
  /* > 0: every layer of every group slides over this many tokens, and blocks that slid out
   * of every window are released (weir_kv_cache_params.sliding_window); 0: never. For one
   * model, weir_llama_kv_window gives it. */
  int32_t sliding_window;
  /* The models keeping KV here, [num_groups] (1..WEIR_KV_POOL_MAX_GROUPS): n_layers,
   * n_heads, n_kv_heads, head_dim and scale of each; the pool fills in block_size and
   * kv_dtype. Copied. */
  const weir_attn_shape *groups;
  int32_t num_groups;
} weir_kv_pool_params;

/* The pool's fixed facts. */
typedef struct weir_kv_geometry {
  int32_t block_size;         /* tokens per block */
  int32_t num_blocks;         /* blocks in the pool */
  int32_t max_model_len;      /* longest sequence */
  int32_t max_blocks_per_seq; /* block-table stride: ceil(max_model_len / block_size) */
  size_t bytes_per_block;     /* one block in every layer of every group */
  size_t bytes;               /* the whole allocation */
} weir_kv_geometry;

/* Number of blocks that fit memory_bytes when one block takes bytes_per_block (every layer of
 * every group). The one clamp: the result is at most INT32_MAX / block_size, so that every
 * slot id (block * block_size + offset) fits an int32_t as the attention ABI stores it.
 * Returns 0 when an argument is not positive. */
int64_t weir_kv_blocks_from_bytes(int64_t memory_bytes, size_t bytes_per_block,
                                  int32_t block_size);

/* Sizes the pool (the attention plugin's block_bytes() for each group), allocates it on the
 * device plugin, and creates the bookkeeping over it. device and attention are borrowed and
 * must outlive the pool. WEIR_E_INVAL for a bad parameter, WEIR_E_NOTSUP when the attention
 * plugin does not support the dtype or shape, WEIR_E_RANGE when not one block fits, a
 * device status when the allocation fails, WEIR_E_NOMEM; err says which. */
int weir_kv_pool_create(const weir_kv_pool_params *p, const struct weir_plugin *device,
                        const struct weir_plugin *attention, weir_kv_pool **out, char *err,
                        size_t errlen);
/* Frees the bookkeeping (and every sequence in it) and the device memory. NULL is ignored. */
void weir_kv_pool_destroy(weir_kv_pool *pool);

const weir_kv_geometry *weir_kv_pool_geometry(const weir_kv_pool *pool);
/* The bookkeeping over the pool's blocks, owned by the pool. */
weir_kv_cache *weir_kv_pool_cache(weir_kv_pool *pool);
int32_t weir_kv_pool_num_groups(const weir_kv_pool *pool);
/* Group g's attention shape, with block_size and kv_dtype filled in; NULL when g is out of
 * range. Valid for the pool's life. */
const weir_attn_shape *weir_kv_pool_shape(const weir_kv_pool *pool, int32_t group);
/* Layer `layer` of group g as the attention plugin reads it. WEIR_E_RANGE when g or layer is
 * out of range. */
int weir_kv_pool_view(const weir_kv_pool *pool, int32_t group, int32_t layer,
                      weir_kv_view *out);
/* Runs n copy-on-write orders (kv_cache.h): block src to block dst in every layer of every
 * group, with the attention plugin's copy_blocks when it has one, else the device's
 * copy_d2d. A device or plugin status on failure (some blocks may have been copied). */
int weir_kv_pool_copy(weir_kv_pool *pool, const weir_kv_copy *copies, int32_t n);

#endif
