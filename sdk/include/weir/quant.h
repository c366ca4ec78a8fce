/* weir SDK: quantization schemes (fp16, int8, awq_int4, ...).
 *
 * A scheme packs a model's linear weights from their GGUF source (any dtype it declares in
 * desc->dtypes) into its own device format, then multiplies activations by them and looks up
 * embedding rows. A packed weight is an opaque pointer owned by the plugin until release().
 * Thread-safety as for device plugins. Since 1.0.
 *
 * Since 1.1, activation-aware schemes (awq_int4) get three optional calls: the host asks
 * calibration_samples() whether to run a calibration pass, hands weights that multiply the same
 * input to pack_group() so they can share one input-channel scale, and `weir quantize` reads a
 * packed weight back with export_weight() to write it into a GGUF file. A 1.0 plugin has none
 * of them (its ops struct is shorter: the host checks struct_size) and keeps working; a 1.0
 * host never calls them, and a 1.1 plugin must check args->struct_size before reading the
 * 1.1 fields of weir_quant_pack_args. Since 1.7 an optional matmul_group() multiplies one
 * input by several weights in one call (the host falls back to one matmul() each). See
 * docs/plugin-guide.md. */
#ifndef WEIR_QUANT_H
#define WEIR_QUANT_H

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GGUF source types numeric.h's weir_dequantize_row read at 1.2, as a
 * weir_plugin_desc.dtypes mask: what a quant plugin that packs through it accepts. Frozen at
 * its 1.2 value (see WEIR_DEQUANTIZE_KQUANT_DTYPES for the types added in 1.5). Since 1.2. */
#define WEIR_DEQUANTIZE_DTYPES                                                                \
  (WEIR_DTYPE_BIT(WEIR_DTYPE_F32) | WEIR_DTYPE_BIT(WEIR_DTYPE_F16) |                          \
   WEIR_DTYPE_BIT(WEIR_DTYPE_BF16) | WEIR_DTYPE_BIT(WEIR_DTYPE_Q8_0) |                        \
   WEIR_DTYPE_BIT(WEIR_DTYPE_Q4_0) | WEIR_DTYPE_BIT(WEIR_DTYPE_Q4_1))

/* The GGUF source types weir_dequantize_row reads since 1.5: Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL,
 * IQ4_XS. Kept apart from WEIR_DEQUANTIZE_DTYPES on purpose: that mask is compiled into
 * plugins whose pack paths (SIMD row converters, CUDA device converters) know only the 1.2
 * types, and widening it would make them claim types they then fail to pack. A plugin ORs
 * this in once its pack path reads these types (through weir_dequantize_row or natively),
 * and says in its docs whether the load is exact (f16/f32 targets: exact up to the f16
 * rounding of each product d * sc * q) or lossy (a re-quantization). Since 1.5. */
#define WEIR_DEQUANTIZE_KQUANT_DTYPES                                                         \
  (WEIR_DTYPE_BIT(WEIR_DTYPE_Q5_0) | WEIR_DTYPE_BIT(WEIR_DTYPE_Q5_1) |                        \
   WEIR_DTYPE_BIT(WEIR_DTYPE_Q2_K) | WEIR_DTYPE_BIT(WEIR_DTYPE_Q3_K) |                        \
   WEIR_DTYPE_BIT(WEIR_DTYPE_Q4_K) | WEIR_DTYPE_BIT(WEIR_DTYPE_Q5_K) |                        \
   WEIR_DTYPE_BIT(WEIR_DTYPE_Q6_K) | WEIR_DTYPE_BIT(WEIR_DTYPE_IQ4_NL) |                      \
   WEIR_DTYPE_BIT(WEIR_DTYPE_IQ4_XS))

/* What pack() receives. Borrowed for the call. */
typedef struct weir_quant_pack_args {
  uint32_t struct_size;   /* 1.0 */
  /* The source: ne = {in_features, out_features}, in host memory (usually the mmapped GGUF
   * file), any dtype listed in the plugin's desc->dtypes. 1.0 */
  const weir_tensor *src;
  const char *name;       /* the GGUF tensor name, for messages. 1.0 */
  /* Calibration, for activation-aware schemes; all NULL/0 when none was run. Samples of the
   * activations that multiply this weight: [num_samples][in_features] f32, host. 1.0 */
  const float *act_samples;
  int64_t num_samples;

  /* ---- Since 1.1 (read only when struct_size covers them) ---- */
  /* Input channels whose activation scales must be equal, or NULL for none: [in_features]
   * class ids in [0, in_features). The host sets it where an exported model folds the scale
   * into a tensor with fewer channels: attn_output under grouped-query attention, where the
   * query heads that share a KV head read the same attn_v output channel. 1.1 */
  const int32_t *channel_class;
  /* Where this weight sits in the model, for progress messages: its block (layer) and the
   * number of blocks, or -1 / 0 when unknown. 1.1 */
  int32_t layer;
  int32_t num_layers;
  /* WEIR_QUANT_PACK_* bits. 1.1 */
  uint32_t flags;
} weir_quant_pack_args;

/* pack args flags (1.1). SCALE_POW2: an input scale must be a power of two. The host sets it
 * where an exported model folds the scale into what produces the input: the rows of the
 * weight before (attn_v for attn_output, ffn_up for ffn_down), whose blocks keep f16 scales,
 * and (hosts of 1.3) the norm gains before q/k/v, gate/up and the output layer. Dividing
 * by a power of two is exact, so the exported model computes what the packed one does. */
#define WEIR_QUANT_PACK_SCALE_POW2 1u

/* What export_weight() fills. The caller owns every buffer. Since 1.1. */
typedef struct weir_quant_export {
  uint32_t struct_size; /* 1.1 */
  /* In: the GGUF type wanted (a scheme documents which it writes; awq_int4: Q4_1). 1.1 */
  weir_dtype dtype;
  /* In: host memory for out_features rows of weir_dtype_row_bytes(dtype, in_features) bytes,
   * and its size. 1.1 */
  void *data;
  size_t bytes;
  /* Out, optional (NULL: not wanted): [in_features] factors s. The exported weight equals
   * the packed one only for inputs divided by s channel-wise, so the caller folds 1/s into
   * whatever produces the input (a norm's gain, the rows of the previous projection). All 1
   * for a weight packed without a scale. 1.1 */
  float *in_scale;
} weir_quant_export;

typedef struct weir_quant_ops {
  uint32_t struct_size; /* 1.0 */

  /* Packs a weight for the device; on success *weight is the plugin's handle. Fails with
   * WEIR_E_NOTSUP for a source dtype or shape it cannot take. Mandatory, 1.0. */
  int (*pack)(void *self, const weir_quant_pack_args *args, void **weight);
  /* Frees a packed weight; accepts NULL. Mandatory, 1.0. */
  void (*release)(void *self, void *weight);
  /* Bytes the packed weight occupies on the device. Mandatory, 1.0. */
  size_t (*weight_bytes)(void *self, const void *weight);

  /* y[t] = W x[t] for t < n_tokens: x is [n_tokens][in_features] f32, y is
   * [n_tokens][out_features] f32, both device memory, not aliasing. Mandatory, 1.0. */
  int (*matmul)(void *self, const void *weight, const float *x, float *y, int64_t n_tokens);

  /* out[t] = row ids[t] of W as f32 ([n][in_features]): embedding lookup. ids is device
   * int32; an id outside [0, out_features) is WEIR_E_RANGE. Mandatory, 1.0. */
  int (*embed)(void *self, const void *weight, const int32_t *ids, float *out, int64_t n);

  /* ---- Since 1.1: optional (NULL = not implemented; check struct_size first) ---- */

  /* The number of activation samples (token vectors) per linear layer this instance can use
   * from a calibration pass when it packs weights of source type src_dtype; 0 when it wants
   * none (calibration turned off, or a source it carries over as it is). The host asks for
   * the types of the model's linear weights, runs the pass only when an answer is > 0, and
   * may hand fewer samples (a short text). Optional, 1.1. */
  int64_t (*calibration_samples)(void *self, weir_dtype src_dtype);

  /* Packs n >= 1 weights that multiply the same input (q, k, v; gate, up): args[i] describes
   * weight i, and all share act_samples, num_samples and channel_class. On success weights[i]
   * holds each handle; on failure none is packed (weights[] untouched) and the status is
   * returned. Without it the host calls pack() once per weight. Optional, 1.1. */
  int (*pack_group)(void *self, const weir_quant_pack_args *const *args, int n,
                    void **weights);

  /* Writes a packed weight back as a GGUF tensor of out->dtype into out->data (and the input
   * scale into out->in_scale), for `weir quantize`. WEIR_E_NOTSUP for a dtype the scheme does
   * not write, WEIR_E_RANGE when out->bytes is too small or a value does not fit the type.
   * Reads device memory: call it with no matmul in flight on the weight. Optional, 1.1. */
  int (*export_weight)(void *self, const void *weight, weir_quant_export *out);

  /* ---- Since 1.7: optional (NULL = not implemented; check struct_size first) ---- */

  /* ys[i] = W_i x for i < n (1 <= n <= WEIR_QUANT_GROUP_MAX): n weights this instance packed,
   * all with the same in_features, times the same x [n_tokens][in_features] f32; ys[i] is
   * [n_tokens][out_features of W_i] f32. All device memory; no y aliases x or another y.
   * The result is what n matmul() calls give (within the plugin's own rounding: a scheme
   * that quantizes its activations quantizes them once here, as matmul does each time), but
   * the plugin may read x once, quantize it once and run every weight in one launch: the
   * host groups q/k/v and gate/up this way. WEIR_E_NOTSUP, without logging, for a group it
   * does not take as one (different in_features, mixed types, too many tokens...): the host
   * then calls matmul() once per weight. Weights and pointers are borrowed for the call.
   * Optional, 1.7. */
  int (*matmul_group)(void *self, const void *const *weights, int n, const float *x,
                      float *const *ys, int64_t n_tokens);
} weir_quant_ops;

/* The most weights one matmul_group() call takes (q, k, v: 3; gate, up: 2). Since 1.7. */
#define WEIR_QUANT_GROUP_MAX 4

/* 1 when `ops` (of struct_size ops->struct_size) has the 1.1 member `field` non-NULL. */
#define WEIR_QUANT_HAS_OP(ops, field)                                                      \
  ((ops)->struct_size >= offsetof(weir_quant_ops, field) + sizeof((ops)->field) &&          \
   (ops)->field != NULL)
/* 1 when pack args `a` carry the 1.1 member `field`. */
#define WEIR_QUANT_ARGS_HAS(a, field) \
  ((a)->struct_size >= offsetof(weir_quant_pack_args, field) + sizeof((a)->field))

#ifdef __cplusplus
}
#endif
#endif
