/* Scalar conversions between f32 and the GGUF tensor types weir reads: half floats and the
 * Q8_0 / Q4_0 / Q4_1 block formats (layouts in sdk/include/weir/tensor.h). Used by mkmodel to
 * write files and by core code that needs a weight row as f32 (e.g. the embedding lookup).
 * Plain C, no SIMD: not for hot loops. All functions are pure and thread-safe. */
#ifndef WEIR_MODEL_DEQUANT_H
#define WEIR_MODEL_DEQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "weir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

uint16_t weir_model_f32_to_f16(float f);   /* round to nearest even; overflow to inf */
float weir_model_f16_to_f32(uint16_t h);
uint16_t weir_model_f32_to_bf16(float f);  /* round to nearest even; NaN stays NaN */
float weir_model_bf16_to_f32(uint16_t h);

/* Converts n values (n a multiple of the block size for block types) from f32 into dtype
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1) at dst, which holds weir_dtype_row_bytes(dtype, n)
 * bytes. Returns 0, or WEIR_E_NOTSUP / WEIR_E_INVAL. */
int weir_quantize_row(weir_dtype dtype, const float *src, void *dst, int64_t n);
/* Converts n values of dtype at src into f32 (same dtypes and rules). */
int weir_dequantize_row(weir_dtype dtype, const void *src, float *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
