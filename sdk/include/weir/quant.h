/* weir SDK: quantization schemes (fp16, int8, awq_int4, ...).
 *
 * A scheme packs a model's linear weights from their GGUF source (any dtype it declares in
 * desc->dtypes) into its own device format, then multiplies activations by them and looks up
 * embedding rows. A packed weight is an opaque pointer owned by the plugin until release().
 * Thread-safety as for device plugins. Since 1.0. */
#ifndef WEIR_QUANT_H
#define WEIR_QUANT_H

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

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
} weir_quant_pack_args;

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
} weir_quant_ops;

#ifdef __cplusplus
}
#endif
#endif
