/* weir SDK: attention plugins (cpu_paged, cuda_paged, ...).
 *
 * An attention plugin writes each new token's K and V into its slot of the paged pool and
 * computes causal scaled-dot-product attention of the new queries over each sequence's whole
 * context, with grouped-query heads (query head h reads KV head h / (n_heads / n_kv_heads)).
 * It alone knows the layout of a block's bytes. Thread-safety as for device plugins. 1.0. */
#ifndef WEIR_ATTENTION_H
#define WEIR_ATTENTION_H

#include "weir/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weir_attention_ops {
  uint32_t struct_size; /* 1.0 */

  /* Bytes one block needs for one layer (K and V of block_size tokens, all KV heads) with
   * shape->kv_dtype; 0 when the dtype or head_dim is unsupported. Mandatory, 1.0. */
  size_t (*block_bytes)(void *self, const weir_attn_shape *shape);

  /* For one layer: stores k and v ([num_tokens][n_kv_heads * head_dim], f32, RoPE applied)
   * at batch->slot_mapping, then writes out ([num_tokens][n_heads * head_dim], f32) =
   * softmax(q k^T * scale + causal mask) v over each sequence's context. q, k, v, out are
   * device f32 arrays; out does not alias q, k or v. Mandatory, 1.0. */
  int (*forward)(void *self, const weir_attn_shape *shape, const weir_attn_batch *batch,
                 const weir_kv_view *kv, const float *q, const float *k, const float *v,
                 float *out);

  /* Copies block `src` to block `dst` in every layer (copy-on-write). NULL means the host
   * copies block_bytes per layer with the device's copy_d2d. Optional, 1.0. */
  int (*copy_blocks)(void *self, const weir_attn_shape *shape, const weir_kv_view *layer0,
                     const int32_t *src, const int32_t *dst, int32_t n);
} weir_attention_ops;

#ifdef __cplusplus
}
#endif
#endif
