/* Dequantization of Q8_0 / Q4_0 / Q4_1 rows (see dequant.h): the block formats through the
 * SDK's weir_dequantize_row (weir/numeric.h), half floats through the SIMD row converters.
 * Runs once per weight at load time; the f16 output goes through the SIMD row converter. */
#include "dequant.h"

#include <string.h>

#include "convert.h"

int weir_dequant_row_f32(weir_dtype dtype, const void *src, float *dst, int64_t n) {
  if (n < 0) return -1;
  switch (dtype) {
  case WEIR_DTYPE_F16: weir_f16_to_f32_row(src, dst, n); return 0;
  case WEIR_DTYPE_BF16: weir_bf16_to_f32_row(src, dst, n); return 0;
  case WEIR_DTYPE_F32:
  case WEIR_DTYPE_Q8_0:
  case WEIR_DTYPE_Q4_0:
  case WEIR_DTYPE_Q4_1: return weir_dequantize_row(dtype, src, dst, n) == WEIR_OK ? 0 : -1;
  default: return -1;
  }
}

int weir_dequant_row_f16(weir_dtype dtype, const void *src, uint16_t *dst, int64_t n) {
  if (dtype == WEIR_DTYPE_F16) {
    if (n < 0) return -1;
    memcpy(dst, src, (size_t)n * 2);
    return 0;
  }
  /* Through a small f32 buffer, one 256-element piece at a time. */
  float tmp[256];
  const uint8_t *s = src;
  size_t piece_bytes = weir_dtype_row_bytes(dtype, 256);
  if (n < 0 || (n > 0 && weir_dtype_row_bytes(dtype, n) == 0)) return -1;
  if (dtype != WEIR_DTYPE_F32 && dtype != WEIR_DTYPE_BF16 && dtype != WEIR_DTYPE_Q8_0 &&
      dtype != WEIR_DTYPE_Q4_0 && dtype != WEIR_DTYPE_Q4_1)
    return -1;
  for (int64_t i = 0; i < n; i += 256) {
    int64_t len = n - i < 256 ? n - i : 256;
    int rc = weir_dequant_row_f32(dtype, s + (size_t)(i / 256) * piece_bytes, tmp, len);
    if (rc) return rc;
    weir_f32_to_f16_row(tmp, dst + i, len);
  }
  return 0;
}
