/* Quantization from f32 into GGUF's half and block formats, written from the format
 * definitions: Q8_0 stores d = max|x|/127 and q = round(x/d); Q4_0 stores d = max/-8 where
 * max is the value of largest magnitude (sign kept) and q = clamp(round(x/d) + 8, 0, 15);
 * Q4_1 stores d = (max-min)/15, m = min and q = round((x-m)/d). */
#include "format/quantize_row.h"

#include <math.h>
#include <string.h>

#include "weir/status.h"

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

int weir_quantize_row(weir_dtype dtype, const float *src, void *dst, int64_t n) {
  uint8_t *o = dst;
  if (n < 0 || n % weir_dtype_block_elems(dtype) != 0) return WEIR_E_INVAL;
  switch (dtype) {
  case WEIR_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return 0;
  case WEIR_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) put16(o + 2 * i, weir_f32_to_f16(src[i]));
    return 0;
  case WEIR_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) put16(o + 2 * i, weir_f32_to_bf16(src[i]));
    return 0;
  case WEIR_DTYPE_Q8_0:
    for (int64_t b = 0; b < n / 32; b++, src += 32, o += 34) {
      float amax = 0;
      for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(src[i]));
      float d = amax / 127.0f, id = d ? 1.0f / d : 0;
      put16(o, weir_f32_to_f16(d));
      for (int i = 0; i < 32; i++) o[2 + i] = (uint8_t)(int8_t)lrintf(src[i] * id);
    }
    return 0;
  case WEIR_DTYPE_Q4_0:
    for (int64_t b = 0; b < n / 32; b++, src += 32, o += 18) {
      float amax = 0, max = 0;
      for (int i = 0; i < 32; i++)
        if (fabsf(src[i]) > amax) {
          amax = fabsf(src[i]);
          max = src[i];
        }
      float d = max / -8.0f, id = d ? 1.0f / d : 0;
      put16(o, weir_f32_to_f16(d));
      for (int i = 0; i < 16; i++) {
        int q0 = (int)lrintf(src[i] * id) + 8, q1 = (int)lrintf(src[i + 16] * id) + 8;
        q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
        q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
        o[2 + i] = (uint8_t)(q0 | q1 << 4);
      }
    }
    return 0;
  case WEIR_DTYPE_Q4_1:
    for (int64_t b = 0; b < n / 32; b++, src += 32, o += 20) {
      float mn = src[0], mx = src[0];
      for (int i = 1; i < 32; i++) {
        mn = fminf(mn, src[i]);
        mx = fmaxf(mx, src[i]);
      }
      float d = (mx - mn) / 15.0f, id = d ? 1.0f / d : 0;
      put16(o, weir_f32_to_f16(d));
      put16(o + 2, weir_f32_to_f16(mn));
      for (int i = 0; i < 16; i++) {
        int q0 = (int)lrintf((src[i] - mn) * id), q1 = (int)lrintf((src[i + 16] - mn) * id);
        q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
        q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
        o[4 + i] = (uint8_t)(q0 | q1 << 4);
      }
    }
    return 0;
  default:
    return WEIR_E_NOTSUP;
  }
}
