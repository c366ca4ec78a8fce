/* weir SDK: the paged KV cache as plugins see it.
 *
 * Core owns the block pool and the block tables; the attention plugin owns the meaning of
 * the bytes. The pool is one allocation on the device. For each layer of a model it holds
 * num_blocks blocks of block_bytes (the size the attention plugin asked for through
 * block_bytes()); a model's layers follow each other, so block b of layer l starts at
 * layer0.base + (l * num_blocks + b) * block_bytes, where layer0 is the view of the model's
 * first layer. (Several models, e.g. a target and a draft, may keep KV in one pool: each has
 * its own layer-0 base and shape; block ids and slots are shared.) A token's slot is
 * block * block_size + offset_in_block. Since 1.0. */
#ifndef WEIR_KV_H
#define WEIR_KV_H

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens per KV block unless the configuration says otherwise (cache.block_size): the one
 * definition of the default, shared by the host's configuration and its KV cache. Since 1.1. */
#define WEIR_KV_DEFAULT_BLOCK_SIZE 16

/* The attention geometry of a model, fixed for the life of an instance binding. */
typedef struct weir_attn_shape {
  uint32_t struct_size; /* 1.0 */
  int32_t n_layers;     /* 1.0 */
  int32_t n_heads;      /* query heads. 1.0 */
  int32_t n_kv_heads;   /* KV heads; n_heads % n_kv_heads == 0 (grouped-query). 1.0 */
  int32_t head_dim;     /* 1.0 */
  int32_t block_size;   /* tokens per KV block (WEIR_KV_DEFAULT_BLOCK_SIZE unless configured). 1.0 */
  weir_dtype kv_dtype;  /* f32, f16, bf16, i8 or fp8, as the config asks. 1.0 */
  float scale;          /* softmax scale, normally 1/sqrt(head_dim). 1.0 */
} weir_attn_shape;

/* One layer's window of the pool. Borrowed for the call. */
typedef struct weir_kv_view {
  void *base;          /* first byte of this layer's blocks (device memory). 1.0 */
  size_t block_bytes;  /* bytes of one block of one layer. 1.0 */
  int32_t num_blocks;  /* blocks in the pool. 1.0 */
} weir_kv_view;

/* A step's ragged batch: num_seqs sequences, each contributing q_len >= 1 new tokens, all
 * new tokens flattened in sequence order. For sequence s the new tokens are rows
 * [query_start_loc[s], query_start_loc[s+1]) and sit at positions
 * [context_lens[s] - q_len, context_lens[s]); they attend causally to every earlier token of
 * the sequence (the cached prefix plus the new tokens before them). Prefill, chunked prefill,
 * decode and speculative verification are all this one shape.
 * Device pointers live in the device's memory; *_host pointers are host copies of the same
 * values for planning. Everything is borrowed for the duration of the call. */
typedef struct weir_attn_batch {
  uint32_t struct_size;            /* 1.0 */
  int32_t num_seqs;                /* 1.0 */
  int32_t num_tokens;              /* total new tokens. 1.0 */
  const int32_t *query_start_loc;  /* device [num_seqs + 1]. 1.0 */
  const int32_t *context_lens;     /* device [num_seqs]: tokens in context incl. new. 1.0 */
  const int32_t *block_tables;     /* device [num_seqs][max_blocks_per_seq]. 1.0 */
  int32_t max_blocks_per_seq;      /* row stride of block_tables. 1.0 */
  const int32_t *slot_mapping;     /* device [num_tokens]: where token i's K and V go. 1.0 */
  int32_t max_query_len;           /* 1.0 */
  int32_t max_context_len;         /* 1.0 */
  const int32_t *query_start_loc_host; /* host copy. 1.0 */
  const int32_t *context_lens_host;    /* host copy. 1.0 */
  const int32_t *block_tables_host;    /* host copy. 1.0 */
  const int32_t *slot_mapping_host;    /* host copy. 1.0 */
} weir_attn_batch;

#ifdef __cplusplus
}
#endif
#endif
