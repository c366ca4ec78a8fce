/* Quantization from f32 into the GGUF tensor types weir writes: half floats, the Q8_0 / Q4_0 /
 * Q4_1 / Q5_0 / Q5_1 / IQ4_NL blocks of 32 and the Q2_K..Q6_K / IQ4_XS super-blocks of 256
 * (layouts in sdk/include/weir/tensor.h). Used by mkmodel to write files and by weir quantize.
 * The other direction, and the scalar half-float conversions, are the SDK's (weir/numeric.h),
 * included here. Plain C, no SIMD: not for hot loops. Pure and thread-safe. */
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
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)
 * at dst, which holds weir_dtype_row_bytes(dtype, n) bytes. The types of SDK 1.5 search each
 * group's scale (and min) for the smallest squared error (see quantize_row.c). Returns 0;
 * WEIR_E_NOTSUP for another dtype; WEIR_E_INVAL for a partial block or, for the 1.5 types, a
 * NaN/infinite value or one so large its block scale overflows f16 (dst is then partly
 * written). */
int weir_quantize_row(weir_dtype dtype, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
