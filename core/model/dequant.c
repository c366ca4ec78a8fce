/* Conversions between f32 and GGUF's half and block formats, written from the format
 * definitions: Q8_0 stores d = max|x|/127 and q = round(x/d); Q4_0 stores d = max/-8 where
 * max is the value of largest magnitude (sign kept) and q = clamp(round(x/d) + 8, 0, 15);
 * Q4_1 stores d = (max-min)/15, m = min and q = round((x-m)/d). */
#include "model/dequant.h"

#include <math.h>
#include <string.h>

#include "weir/status.h"

uint16_t weir_model_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    /* Subnormal half: shift the full mantissa (with its implicit 1) into place. */
    man |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = (uint32_t)e << 10 | man >> 13;
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into the exponent */
  return (uint16_t)(sign | h);
}

float weir_model_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, x;
  if (exp == 0) {
    float v = ldexpf((float)man, -24);
    return sign ? -v : v;
  }
  if (exp == 31) x = sign | 0x7f800000u | man << 13;
  else x = sign | (exp - 15 + 127) << 23 | man << 13;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t weir_model_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float weir_model_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

int weir_quantize_row(weir_dtype dtype, const float *src, void *dst, int64_t n) {
  uint8_t *o = dst;
  if (n < 0 || n % weir_dtype_block_elems(dtype) != 0) return WEIR_E_INVAL;
  switch (dtype) {
  case WEIR_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return 0;
  case WEIR_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) put16(o + 2 * i, weir_model_f32_to_f16(src[i]));
    return 0;
  case WEIR_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) put16(o + 2 * i, weir_model_f32_to_bf16(src[i]));
    return 0;
  case WEIR_DTYPE_Q8_0:
    for (int64_t b = 0; b < n / 32; b++, src += 32, o += 34) {
      float amax = 0;
      for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(src[i]));
      float d = amax / 127.0f, id = d ? 1.0f / d : 0;
      put16(o, weir_model_f32_to_f16(d));
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
      put16(o, weir_model_f32_to_f16(d));
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
      put16(o, weir_model_f32_to_f16(d));
      put16(o + 2, weir_model_f32_to_f16(mn));
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

int weir_dequantize_row(weir_dtype dtype, const void *src, float *dst, int64_t n) {
  const uint8_t *p = src;
  if (n < 0 || n % weir_dtype_block_elems(dtype) != 0) return WEIR_E_INVAL;
  switch (dtype) {
  case WEIR_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return 0;
  case WEIR_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) dst[i] = weir_model_f16_to_f32(get16(p + 2 * i));
    return 0;
  case WEIR_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) dst[i] = weir_model_bf16_to_f32(get16(p + 2 * i));
    return 0;
  case WEIR_DTYPE_Q8_0:
    for (int64_t b = 0; b < n / 32; b++, p += 34, dst += 32) {
      float d = weir_model_f16_to_f32(get16(p));
      for (int i = 0; i < 32; i++) dst[i] = (float)(int8_t)p[2 + i] * d;
    }
    return 0;
  case WEIR_DTYPE_Q4_0:
    for (int64_t b = 0; b < n / 32; b++, p += 18, dst += 32) {
      float d = weir_model_f16_to_f32(get16(p));
      for (int i = 0; i < 16; i++) {
        dst[i] = (float)((p[2 + i] & 15) - 8) * d;
        dst[i + 16] = (float)((p[2 + i] >> 4) - 8) * d;
      }
    }
    return 0;
  case WEIR_DTYPE_Q4_1:
    for (int64_t b = 0; b < n / 32; b++, p += 20, dst += 32) {
      float d = weir_model_f16_to_f32(get16(p)), m = weir_model_f16_to_f32(get16(p + 2));
      for (int i = 0; i < 16; i++) {
        dst[i] = (float)(p[4 + i] & 15) * d + m;
        dst[i + 16] = (float)(p[4 + i] >> 4) * d + m;
      }
    }
    return 0;
  default:
    return WEIR_E_NOTSUP;
  }
}
