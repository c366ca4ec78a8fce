/* weir SDK: element conversions. Since 1.1.
 *
 * Scalar conversions between f32 and the 16-bit float formats, and the dequantization of the
 * GGUF block formats weir reads (layouts in weir/tensor.h), written from the format
 * definitions. The host uses them to read norms and biases and to write test models; the
 * shipped quant plugins use them for their scalar paths; a quant plugin that takes GGUF
 * tensors as its source can use them too. Plain C, no SIMD: fine for loading weights, not
 * for a hot loop (kernels/cpu/convert.h has the SIMD row converters built on these).
 *
 * f16 is IEEE binary16; bf16 is the upper half of an IEEE binary32. f32 -> 16-bit rounds to
 * nearest, ties to even; NaN stays a (quiet) NaN, overflow becomes infinity, f16 subnormals
 * are exact. Every function is a pure inline over caller-owned memory: thread-safe, usable
 * from C and C++; source bytes are read with memcpy, so they need no alignment. */
#ifndef WEIR_NUMERIC_H
#define WEIR_NUMERIC_H

#include <stdint.h>
#include <string.h>

#include "weir/status.h"
#include "weir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Since 1.1. */
static inline float weir_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (man << 13); /* inf or NaN */
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    /* Subnormal: normalise the mantissa. */
    uint32_t e = 113u;
    while (!(man & 0x400u)) {
      man <<= 1;
      e--;
    }
    bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Since 1.1. */
static inline uint16_t weir_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or NaN (keep NaN quiet and non-zero) */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
  if (ax < 0x38800000u) {
    /* Result is subnormal or zero: shift the full mantissa into place, round to even. */
    if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
    uint32_t e = ax >> 23;
    uint32_t man = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
  uint32_t q = r >> 13;
  uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

/* Since 1.1. */
static inline float weir_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Since 1.1. */
static inline uint16_t weir_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static inline uint16_t weir_numeric_rd16_(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

/* Converts n elements of dtype at src (F32, F16, BF16, Q8_0, Q4_0, Q4_1; n a multiple of the
 * dtype's block) into f32 at dst ([n]). Q8_0: x = q * d; Q4_0: x = (q - 8) * d, the low
 * nibbles of a block's 16 bytes being elements 0..15 and the high nibbles 16..31; Q4_1:
 * x = q * d + m, nibbles as Q4_0. Returns WEIR_OK, WEIR_E_INVAL for a negative n or one that
 * is not a block multiple, WEIR_E_NOTSUP for another dtype. Since 1.1. */
static inline int weir_dequantize_row(weir_dtype dtype, const void *src, float *dst, int64_t n) {
  const uint8_t *p = (const uint8_t *)src;
  if (n < 0 || n % weir_dtype_block_elems(dtype) != 0) return WEIR_E_INVAL;
  switch (dtype) {
  case WEIR_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return WEIR_OK;
  case WEIR_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) dst[i] = weir_f16_to_f32(weir_numeric_rd16_(p + 2 * i));
    return WEIR_OK;
  case WEIR_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) dst[i] = weir_bf16_to_f32(weir_numeric_rd16_(p + 2 * i));
    return WEIR_OK;
  case WEIR_DTYPE_Q8_0:
    for (int64_t b = 0; b < n / 32; b++, p += 34, dst += 32) {
      float d = weir_f16_to_f32(weir_numeric_rd16_(p));
      for (int i = 0; i < 32; i++) dst[i] = (float)(int8_t)p[2 + i] * d;
    }
    return WEIR_OK;
  case WEIR_DTYPE_Q4_0:
    for (int64_t b = 0; b < n / 32; b++, p += 18, dst += 32) {
      float d = weir_f16_to_f32(weir_numeric_rd16_(p));
      for (int i = 0; i < 16; i++) {
        dst[i] = (float)((int)(p[2 + i] & 0x0f) - 8) * d;
        dst[i + 16] = (float)((int)(p[2 + i] >> 4) - 8) * d;
      }
    }
    return WEIR_OK;
  case WEIR_DTYPE_Q4_1:
    for (int64_t b = 0; b < n / 32; b++, p += 20, dst += 32) {
      float d = weir_f16_to_f32(weir_numeric_rd16_(p));
      float m = weir_f16_to_f32(weir_numeric_rd16_(p + 2));
      for (int i = 0; i < 16; i++) {
        dst[i] = (float)(p[4 + i] & 0x0f) * d + m;
        dst[i + 16] = (float)(p[4 + i] >> 4) * d + m;
      }
    }
    return WEIR_OK;
  default:
    return WEIR_E_NOTSUP;
  }
}

#ifdef __cplusplus
}
#endif
#endif
