/* The KV pool: geometry, device memory, views and copies around the bookkeeping of
 * kv_cache.c. See kv_pool.h for the contract and docs/kv-cache.md for the layout. */
#include "kv/kv_pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/loader.h"
#include "util/err.h"
#include "weir/attention.h"
#include "weir/device.h"

typedef struct kv_group {
  weir_attn_shape shape;
  size_t block_bytes; /* one block of one layer */
  size_t offset;      /* of the group's first layer from the pool's base */
} kv_group;

struct weir_kv_pool {
  weir_kv_geometry geo;
  const weir_device_ops *dev;
  void *dev_self;
  const weir_attention_ops *attn;
  void *attn_self;
  kv_group groups[WEIR_KV_POOL_MAX_GROUPS];
  int32_t num_groups;
  void *base;
  weir_kv_cache *cache;
};

/* The one clamp on the number of blocks, whichever way it was asked for: every slot id
 * (block * block_size + offset) must fit the int32_t the attention ABI stores it in. */
static int64_t clamp_blocks(uint64_t n, int32_t block_size) {
  uint64_t max = (uint64_t)(INT32_MAX / block_size);
  return (int64_t)(n > max ? max : n);
}

int64_t weir_kv_blocks_from_bytes(int64_t memory_bytes, size_t bytes_per_block,
                                  int32_t block_size) {
  if (memory_bytes <= 0 || bytes_per_block == 0 || block_size <= 0) return 0;
  return clamp_blocks((uint64_t)memory_bytes / bytes_per_block, block_size);
}

static size_t align_up(size_t n) {
  return (n + WEIR_KV_POOL_ALIGN - 1) / WEIR_KV_POOL_ALIGN * WEIR_KV_POOL_ALIGN;
}

int weir_kv_pool_create(const weir_kv_pool_params *p, const weir_plugin *device,
                        const weir_plugin *attention, weir_kv_pool **out, char *err,
                        size_t errlen) {
  int rc;
  *out = NULL;
  const int32_t bs = p->block_size > 0 ? p->block_size : WEIR_KV_DEFAULT_BLOCK_SIZE;
  if (p->block_size < 0 || p->max_model_len <= 0 || p->num_groups < 1 ||
      p->num_groups > WEIR_KV_POOL_MAX_GROUPS || !p->groups || !device || !attention) {
    weir_set_err(err, errlen, "invalid KV cache parameters (block size %d, max model length "
                  "%d, %d models)", (int)p->block_size, (int)p->max_model_len,
                  (int)p->num_groups);
    return WEIR_E_INVAL;
  }
  weir_kv_pool *pool = calloc(1, sizeof *pool);
  if (!pool) {
    weir_set_err(err, errlen, "out of memory");
    return WEIR_E_NOMEM;
  }
  pool->dev = device->ops;
  pool->dev_self = device->self;
  pool->attn = attention->ops;
  pool->attn_self = attention->self;
  pool->num_groups = p->num_groups;
  pool->geo.block_size = bs;
  pool->geo.max_model_len = p->max_model_len;
  pool->geo.max_blocks_per_seq = (int32_t)(((int64_t)p->max_model_len + bs - 1) / bs);

  size_t per_block = 0;
  for (int32_t g = 0; g < p->num_groups; g++) {
    kv_group *G = &pool->groups[g];
    G->shape = p->groups[g];
    G->shape.struct_size = sizeof G->shape;
    G->shape.block_size = bs;
    G->shape.kv_dtype = p->kv_dtype;
    if (G->shape.n_layers <= 0 || G->shape.n_heads <= 0 || G->shape.n_kv_heads <= 0 ||
        G->shape.head_dim <= 0) {
      weir_set_err(err, errlen, "KV cache model %d: invalid attention shape (%d layers, %d "
                    "heads, %d KV heads, head_dim %d)", (int)g, (int)G->shape.n_layers,
                    (int)G->shape.n_heads, (int)G->shape.n_kv_heads, (int)G->shape.head_dim);
      rc = WEIR_E_INVAL;
      goto fail;
    }
    G->block_bytes = pool->attn->block_bytes(pool->attn_self, &G->shape);
    if (G->block_bytes == 0) {
      weir_set_err(err, errlen, "the attention plugin '%s' does not support KV dtype %s with "
                    "head_dim %d and %d KV heads", attention->desc->name,
                    weir_dtype_name(p->kv_dtype), (int)G->shape.head_dim,
                    (int)G->shape.n_kv_heads);
      rc = WEIR_E_NOTSUP;
      goto fail;
    }
    per_block += G->block_bytes * (size_t)G->shape.n_layers;
  }
  pool->geo.bytes_per_block = per_block;

  int64_t nb = p->num_blocks > 0 ? clamp_blocks((uint64_t)p->num_blocks, bs)
                                 : weir_kv_blocks_from_bytes(p->memory_bytes, per_block, bs);
  if (nb < 1) {
    weir_set_err(err, errlen, "the KV cache holds no block: %lld bytes for blocks of %zu bytes "
                  "(cache.memory_bytes or cache.num_blocks)", (long long)p->memory_bytes,
                  per_block);
    rc = WEIR_E_RANGE;
    goto fail;
  }
  if ((uint64_t)nb > (SIZE_MAX - (size_t)WEIR_KV_POOL_ALIGN * WEIR_KV_POOL_MAX_GROUPS) / per_block) {
    weir_set_err(err, errlen, "the KV cache of %lld blocks of %zu bytes does not fit the "
                  "address space (cache.num_blocks)", (long long)nb, per_block);
    rc = WEIR_E_RANGE;
    goto fail;
  }
  pool->geo.num_blocks = (int32_t)nb;
  size_t offset = 0;
  for (int32_t g = 0; g < p->num_groups; g++) {
    kv_group *G = &pool->groups[g];
    G->offset = offset;
    offset = align_up(offset + G->block_bytes * (size_t)G->shape.n_layers * (size_t)nb);
  }
  pool->geo.bytes = offset;
  rc = pool->dev->alloc(pool->dev_self, offset, &pool->base);
  if (rc != WEIR_OK) {
    pool->base = NULL;
    weir_set_err(err, errlen, "allocating the KV cache (%lld blocks, %zu bytes): %s",
                  (long long)nb, offset, weir_strerror(rc));
    goto fail;
  }
  /* Committed now, not on first use: a page first written mid-service stalls the step that
   * writes it (a huge page's fault can wait on the kernel's compaction: 8-40 ms steps among
   * 1.7 ms ones when a long-lived server first held 16 sampled sequences;
   * docs/perf/speculative.md), and a pool the host cannot hold shows at start, not under
   * load. Zeros also leave no stale bytes for a kernel's padded lanes to read. */
  rc = pool->dev->memset(pool->dev_self, pool->base, 0, offset);
  if (rc != WEIR_OK) {
    weir_set_err(err, errlen, "zeroing the KV cache (%zu bytes): %s", offset, weir_strerror(rc));
    goto fail;
  }
  weir_kv_cache_params kp = {.num_blocks = (int32_t)nb,
                             .block_size = bs,
                             .prefix_caching = p->prefix_caching,
                             .sliding_window = p->sliding_window};
  rc = weir_kv_cache_create(&kp, &pool->cache);
  if (rc != WEIR_OK) {
    weir_set_err(err, errlen, "creating the KV cache bookkeeping: %s", weir_strerror(rc));
    goto fail;
  }
  *out = pool;
  return WEIR_OK;
fail:
  weir_kv_pool_destroy(pool);
  return rc;
}

void weir_kv_pool_destroy(weir_kv_pool *pool) {
  if (!pool) return;
  weir_kv_cache_destroy(pool->cache);
  if (pool->base) pool->dev->free(pool->dev_self, pool->base);
  free(pool);
}

const weir_kv_geometry *weir_kv_pool_geometry(const weir_kv_pool *pool) { return &pool->geo; }
weir_kv_cache *weir_kv_pool_cache(weir_kv_pool *pool) { return pool->cache; }
int32_t weir_kv_pool_num_groups(const weir_kv_pool *pool) { return pool->num_groups; }

const weir_attn_shape *weir_kv_pool_shape(const weir_kv_pool *pool, int32_t group) {
  return group >= 0 && group < pool->num_groups ? &pool->groups[group].shape : NULL;
}

int weir_kv_pool_view(const weir_kv_pool *pool, int32_t group, int32_t layer,
                      weir_kv_view *out) {
  if (group < 0 || group >= pool->num_groups) return WEIR_E_RANGE;
  const kv_group *G = &pool->groups[group];
  if (layer < 0 || layer >= G->shape.n_layers) return WEIR_E_RANGE;
  size_t layer_bytes = G->block_bytes * (size_t)pool->geo.num_blocks;
  *out = (weir_kv_view){.base = (char *)pool->base + G->offset + (size_t)layer * layer_bytes,
                        .block_bytes = G->block_bytes,
                        .num_blocks = pool->geo.num_blocks};
  return WEIR_OK;
}

/* Orders go to the plugin in chunks from a fixed buffer: a step issues few of them. */
#define COPY_CHUNK 64

static int copy_group(weir_kv_pool *pool, const kv_group *G, const int32_t *src,
                      const int32_t *dst, int32_t n) {
  weir_kv_view layer0;
  weir_kv_pool_view(pool, (int32_t)(G - pool->groups), 0, &layer0);
  if (pool->attn->copy_blocks)
    return pool->attn->copy_blocks(pool->attn_self, &G->shape, &layer0, src, dst, n);
  const size_t layer_bytes = G->block_bytes * (size_t)pool->geo.num_blocks;
  for (int32_t l = 0; l < G->shape.n_layers; l++) {
    char *base = (char *)layer0.base + (size_t)l * layer_bytes;
    for (int32_t i = 0; i < n; i++) {
      int rc = pool->dev->copy_d2d(pool->dev_self, base + (size_t)dst[i] * G->block_bytes,
                                   base + (size_t)src[i] * G->block_bytes, G->block_bytes);
      if (rc != WEIR_OK) return rc;
    }
  }
  return WEIR_OK;
}

int weir_kv_pool_copy(weir_kv_pool *pool, const weir_kv_copy *copies, int32_t n) {
  int32_t src[COPY_CHUNK], dst[COPY_CHUNK];
  for (int32_t i = 0; i < n; i += COPY_CHUNK) {
    int32_t m = n - i < COPY_CHUNK ? n - i : COPY_CHUNK;
    for (int32_t j = 0; j < m; j++) {
      if (copies[i + j].src < 0 || copies[i + j].src >= pool->geo.num_blocks ||
          copies[i + j].dst < 0 || copies[i + j].dst >= pool->geo.num_blocks)
        return WEIR_E_RANGE;
      src[j] = copies[i + j].src;
      dst[j] = copies[i + j].dst;
    }
    for (int32_t g = 0; g < pool->num_groups; g++) {
      int rc = copy_group(pool, &pool->groups[g], src, dst, m);
      if (rc != WEIR_OK) return rc;
    }
  }
  return WEIR_OK;
}
