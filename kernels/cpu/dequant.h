/* weir CPU kernels: dequantization of GGUF block formats.
 *
 * A row of n elements (n a multiple of 32) of Q8_0, Q4_0 or Q4_1 is n/32 blocks laid out as
 * in GGUF (see weir/tensor.h): Q8_0 = f16 d, 32 x int8 q, x = q*d; Q4_0 = f16 d, 16 bytes
 * whose low nibbles are elements 0..15 and high nibbles 16..31, x = (q-8)*d; Q4_1 = f16 d,
 * f16 m, nibbles as Q4_0, x = q*d + m. Blocks are read byte-wise, so `src` needs no
 * alignment. Pure functions, thread-safe. */
#ifndef WEIR_KERNELS_CPU_DEQUANT_H
#define WEIR_KERNELS_CPU_DEQUANT_H

#include <stdint.h>

#include "weir/tensor.h"

/* Dequantizes one row of n elements of `dtype` (Q8_0, Q4_0, Q4_1, and for convenience F32,
 * F16 and BF16) into f32. Returns 0, or -1 for another dtype or an n that is not a multiple
 * of the dtype's block. */
int weir_dequant_row_f32(weir_dtype dtype, const void *src, float *dst, int64_t n);
/* The same, converting the result to f16 (rounded to nearest even). */
int weir_dequant_row_f16(weir_dtype dtype, const void *src, uint16_t *dst, int64_t n);

#endif
