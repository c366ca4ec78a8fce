/* Dequantization of Q8_0 / Q4_0 / Q4_1 rows (see dequant.h). Runs once per weight at load
 * time, so plain C is enough; the f16 output goes through the SIMD row converter. */
#include "dequant.h"

#include <string.h>

#include "convert.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void dq_q8_0(const uint8_t *b, float *out) {
  float d = weir_f16_to_f32(rd16(b));
  for (int i = 0; i < 32; i++) out[i] = (float)(int8_t)b[2 + i] * d;
}

static void dq_q4_0(const uint8_t *b, float *out) {
  float d = weir_f16_to_f32(rd16(b));
  for (int i = 0; i < 16; i++) {
    out[i] = (float)((int)(b[2 + i] & 0x0f) - 8) * d;
    out[i + 16] = (float)((int)(b[2 + i] >> 4) - 8) * d;
  }
}

static void dq_q4_1(const uint8_t *b, float *out) {
  float d = weir_f16_to_f32(rd16(b));
  float m = weir_f16_to_f32(rd16(b + 2));
  for (int i = 0; i < 16; i++) {
    out[i] = (float)(b[4 + i] & 0x0f) * d + m;
    out[i + 16] = (float)(b[4 + i] >> 4) * d + m;
  }
}

int weir_dequant_row_f32(weir_dtype dtype, const void *src, float *dst, int64_t n) {
  const uint8_t *s = src;
  if (n < 0) return -1;
  switch (dtype) {
  case WEIR_DTYPE_F32: memcpy(dst, src, (size_t)n * 4); return 0;
  case WEIR_DTYPE_F16: weir_f16_to_f32_row(src, dst, n); return 0;
  case WEIR_DTYPE_BF16: weir_bf16_to_f32_row(src, dst, n); return 0;
  case WEIR_DTYPE_Q8_0:
    if (n % 32) return -1;
    for (int64_t b = 0; b < n / 32; b++) dq_q8_0(s + b * 34, dst + b * 32);
    return 0;
  case WEIR_DTYPE_Q4_0:
    if (n % 32) return -1;
    for (int64_t b = 0; b < n / 32; b++) dq_q4_0(s + b * 18, dst + b * 32);
    return 0;
  case WEIR_DTYPE_Q4_1:
    if (n % 32) return -1;
    for (int64_t b = 0; b < n / 32; b++) dq_q4_1(s + b * 20, dst + b * 32);
    return 0;
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
