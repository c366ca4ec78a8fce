/* Quantization from f32 into the GGUF tensor types weir writes: half floats and the Q8_0 /
 * Q4_0 / Q4_1 block formats (layouts in sdk/include/weir/tensor.h). Used by mkmodel to write
 * files. The other direction, and the scalar half-float conversions, are the SDK's
 * (weir/numeric.h), included here. Plain C, no SIMD: not for hot loops. Pure and
 * thread-safe. */
#ifndef WEIR_FORMAT_QUANTIZE_ROW_H
#define WEIR_FORMAT_QUANTIZE_ROW_H

#include <stddef.h>
#include <stdint.h>

#include "weir/numeric.h"
#include "weir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Converts n values (n a multiple of the block size for block types) from f32 into dtype
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1) at dst, which holds weir_dtype_row_bytes(dtype, n)
 * bytes. Returns 0, or WEIR_E_NOTSUP / WEIR_E_INVAL. */
int weir_quantize_row(weir_dtype dtype, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
