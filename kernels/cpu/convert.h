/* weir CPU kernels: conversions between f32 and the 16-bit float formats.
 *
 * f16 is IEEE binary16; bf16 is the upper half of an IEEE binary32. f32 -> 16-bit rounds to
 * nearest, ties to even; NaN stays NaN, overflow becomes infinity, f16 subnormals are exact.
 * The row functions use F16C / AVX-512 when weir_cpu_isa() allows. Pure functions,
 * thread-safe; src and dst must not overlap. */
#ifndef WEIR_KERNELS_CPU_CONVERT_H
#define WEIR_KERNELS_CPU_CONVERT_H

#include <stdint.h>
#include <string.h>

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

static inline float weir_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t weir_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* The 65536-entry f16 -> f32 table the scalar paths use (built on first call, thread-safe). */
const float *weir_f16_table(void);

void weir_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void weir_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
void weir_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void weir_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);

#endif
