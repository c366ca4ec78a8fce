/* weir SDK: attention plugins (paged, paged, ...).
 *
 * An attention plugin writes each new token's K and V into its slot of the paged pool and
 * computes causal scaled-dot-product attention of the new queries over each sequence's whole
 * context, with grouped-query heads (query head h reads KV head h / (n_heads / n_kv_heads)).
 * It alone knows the layout of a block's bytes. Thread-safety as for device plugins. 1.0.
 *
 * Since 1.5 a layer may carry its own attention parameters (weir_attn_layer_params): a
 * sliding window, a logit soft-cap and a score scale, which Gemma, Mistral-style and other
 * families set per layer. A plugin that implements forward_layer serves them; the host
 * refuses to run a model whose layers need them with a plugin that does not (forward_layer
 * NULL, or a plugin built against ABI < 1.5), naming the plugin and the parameter. */
#ifndef WEIR_ATTENTION_H
#define WEIR_ATTENTION_H

#include "weir/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The attention parameters of one layer, fixed for the life of a model. Zero in every field
 * after struct_size means plain causal attention with shape->scale (what forward does).
 * Since 1.5. */
typedef struct weir_attn_layer_params {
  uint32_t struct_size; /* 1.5 */
  /* > 0: sliding window. The query at position p sees only the keys at positions j with
   * p - window < j <= p (the `window` newest positions, its own included), as Mistral and
   * Gemma define it. 0: the whole causal context. 1.5 */
  int32_t window;
  /* > 0: logit soft-capping. Each scaled score s becomes softcap * tanh(s / softcap) before
   * the softmax (Gemma 2). 0: none. 1.5 */
  float softcap;
  /* > 0: this layer's score scale, in place of shape->scale. 0: shape->scale. 1.5 */
  float scale;
} weir_attn_layer_params;

/* RoPE for forward_rope: what the device's rope (inv_freq NULL) or rope_freqs op would apply
 * to q and k, for the plugin to apply itself. Borrowed for the call. Since 1.7. */
typedef struct weir_attn_rope {
  uint32_t struct_size;          /* 1.7 */
  const int32_t *positions;      /* device int32 [num_tokens]: each new token's position. 1.7 */
  const int32_t *positions_host; /* host copy of the same, or NULL. 1.7 */
  int32_t rot_dim;               /* values rotated per head: even, 0 < rot_dim <= head_dim. 1.7 */
  int32_t style;                 /* weir_rope_style (weir/device.h): 0 pairs, 2 halves. 1.7 */
  /* inv_freq NULL: pair i turns by pos * freq_scale * freq_base^(-2i/rot_dim) (device rope).
   * 1.7 */
  float freq_base, freq_scale;
  /* Device f32 [rot_dim / 2], or NULL: pair i turns by pos * inv_freq[i] and the rotated
   * values are multiplied by mscale (device rope_freqs). 1.7 */
  const float *inv_freq;
  float mscale;
} weir_attn_rope;

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

  /* forward with this layer's parameters (lp, borrowed for the call; lp->struct_size tells
   * which fields the host filled, fields beyond it count as zero). With a window the plugin
   * reads no block of a sequence that lies wholly before the window of the sequence's first
   * new query: the host may have freed such blocks and reused them, and their block-table
   * entries are then stale (any value). WEIR_E_INVAL for a negative window or soft-cap.
   * NULL: not implemented (the host runs only models that need none of it). Optional, 1.5. */
  int (*forward_layer)(void *self, const weir_attn_shape *shape,
                       const weir_attn_layer_params *lp, const weir_attn_batch *batch,
                       const weir_kv_view *kv, const float *q, const float *k, const float *v,
                       float *out);

  /* forward_layer with RoPE fused in: q and k arrive NOT rotated, and the plugin rotates k as
   * it writes it into the cache and q as it reads it (as rope->inv_freq says, see
   * weir_attn_rope), so the host issues no rope launches for the layer. q and k are not
   * modified. The results are those of the device's rope / rope_freqs on q and k followed by
   * forward_layer, up to rounding. WEIR_E_INVAL for a rope the plugin cannot apply (odd or
   * out-of-range rot_dim, unknown style, no positions). NULL: not implemented (the host
   * rotates with the device's ops and calls forward_layer / forward). Optional, 1.7. */
  int (*forward_rope)(void *self, const weir_attn_shape *shape,
                      const weir_attn_layer_params *lp, const weir_attn_rope *rope,
                      const weir_attn_batch *batch, const weir_kv_view *kv, const float *q,
                      const float *k, const float *v, float *out);
} weir_attention_ops;

#ifdef __cplusplus
}
#endif
#endif
