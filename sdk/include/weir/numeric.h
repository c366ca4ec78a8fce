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

/* The 16 values of the IQ4_NL / IQ4_XS codebook, indexed by a nibble (GGUF's table). Since 1.5. */
static const int8_t weir_iq4_kvalues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

/* Scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block, from its 12 packed bytes:
 * sub-blocks 0..3 keep their 6-bit scale and min in the low 6 bits of bytes j and j + 4;
 * sub-blocks 4..7 keep their low 4 bits in the nibbles of byte j + 4 (scale low, min high)
 * and their top 2 bits in the top 2 bits of bytes j - 4 (scale) and j (min). Since 1.5. */
static inline void weir_k4_scale_min(int j, const uint8_t *s, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* Signed scale of sub-block i (0..15) of a Q3_K super-block, from its 12 packed bytes: the
 * low 4 bits are the low (i < 8) or high (i >= 8) nibble of byte i % 8, the top 2 bits are
 * bits 2 * (i / 4) .. +1 of byte 8 + i % 4; the 6-bit value is stored plus 32. Since 1.5. */
static inline int weir_k3_scale(int i, const uint8_t *s) {
  int lo = i < 8 ? s[i] & 0x0f : s[i - 8] >> 4;
  int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return (lo | hi << 4) - 32;
}

/* Converts n elements of dtype at src into f32 at dst ([n]); n must be a multiple of the
 * dtype's block (weir_dtype_block_elems). Since 1.1 for F32, F16, BF16, Q8_0, Q4_0, Q4_1;
 * since 1.5 for Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS. Per block (layouts in weir/tensor.h,
 * byte offsets below; d, dmin, m are f16 widened exactly to f32; every product is f32):
 *   Q8_0   x = q * d.
 *   Q4_0   x = (q - 8) * d; byte i of the 16 holds element i (low nibble) and i + 16 (high).
 *   Q4_1   x = q * d + m; nibbles as Q4_0.
 *   Q5_0   x = (q - 16) * d; q = nibble (as Q4_0) | bit e of the little-endian u32 qh << 4.
 *   Q5_1   x = q * d + m; q as Q5_0.
 *   Q2_K   sub-block s = e / 16 has sc = scales[s] & 15, mn = scales[s] >> 4;
 *          x = (d * sc) * q - (dmin * mn), q = (qs[32 h + l] >> 2 j) & 3 where e = 128 h +
 *          32 j + l (l < 32).
 *   Q3_K   x = (d * sc) * (q - 4 * !hbit), sc = weir_k3_scale(e / 16), q as Q2_K's,
 *          hbit = bit 4 h + j of hmask[l].
 *   Q4_K   sub-block s = e / 32, (sc, mn) = weir_k4_scale_min(s);
 *          x = (d * sc) * q - (dmin * mn), q the low (s even) or high (s odd) nibble of
 *          qs[32 (s / 2) + e % 32].
 *   Q5_K   as Q4_K with q |= (bit s of qh[e % 32]) << 4.
 *   Q6_K   x = (d * scales[e / 16]) * (q - 32); with e = 128 h + 32 j + l (l < 32), q's low
 *          4 bits are the low (j < 2) or high (j >= 2) nibble of ql[64 h + 32 (j & 1) + l],
 *          its top 2 bits bits 2 j .. +1 of qh[32 h + l].
 *   IQ4_NL x = d * kvalues[q], nibbles as Q4_0.
 *   IQ4_XS sub-block s = e / 32: ls = (nibble s & 1 of scales_l[s / 2]) | (bits 2 s .. +1 of
 *          scales_h) << 4; x = (d * (ls - 32)) * kvalues[q], q the low (e % 32 < 16) or
 *          high nibble of qs[16 s + e % 16].
 * NaN or infinite scales give NaN or infinite values: callers that must refuse them check
 * with weir_quant_scales_finite. Returns WEIR_OK, WEIR_E_INVAL for a negative n or one that
 * is not a block multiple, WEIR_E_NOTSUP for another dtype (Q8_K, the integer types). */
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
  case WEIR_DTYPE_Q5_0:
  case WEIR_DTYPE_Q5_1: {
    const int has_m = dtype == WEIR_DTYPE_Q5_1;
    const size_t bb = has_m ? 24 : 22, qh_at = has_m ? 4 : 2;
    for (int64_t b = 0; b < n / 32; b++, p += bb, dst += 32) {
      float d = weir_f16_to_f32(weir_numeric_rd16_(p));
      float m = has_m ? weir_f16_to_f32(weir_numeric_rd16_(p + 2)) : 0.0f;
      uint32_t qh = (uint32_t)p[qh_at] | (uint32_t)p[qh_at + 1] << 8 |
                    (uint32_t)p[qh_at + 2] << 16 | (uint32_t)p[qh_at + 3] << 24;
      const uint8_t *qs = p + qh_at + 4;
      for (int i = 0; i < 16; i++) {
        int q0 = (qs[i] & 0x0f) | (int)((qh >> i) & 1u) << 4;
        int q1 = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1u) << 4;
        if (has_m) {
          dst[i] = (float)q0 * d + m;
          dst[i + 16] = (float)q1 * d + m;
        } else {
          dst[i] = (float)(q0 - 16) * d;
          dst[i + 16] = (float)(q1 - 16) * d;
        }
      }
    }
    return WEIR_OK;
  }
  case WEIR_DTYPE_IQ4_NL:
    for (int64_t b = 0; b < n / 32; b++, p += 18, dst += 32) {
      float d = weir_f16_to_f32(weir_numeric_rd16_(p));
      for (int i = 0; i < 16; i++) {
        dst[i] = d * (float)weir_iq4_kvalues[p[2 + i] & 0x0f];
        dst[i + 16] = d * (float)weir_iq4_kvalues[p[2 + i] >> 4];
      }
    }
    return WEIR_OK;
  case WEIR_DTYPE_Q2_K:
    for (int64_t b = 0; b < n / WEIR_QK_K; b++, p += sizeof(weir_block_q2_K), dst += WEIR_QK_K) {
      const uint8_t *sc = p, *qs = p + 16;
      float d = weir_f16_to_f32(weir_numeric_rd16_(p + 80));
      float dmin = weir_f16_to_f32(weir_numeric_rd16_(p + 82));
      for (int e = 0; e < WEIR_QK_K; e++) {
        int h = e >> 7, j = (e >> 5) & 3, l = e & 31, s = e >> 4;
        int q = (qs[32 * h + l] >> (2 * j)) & 3;
        dst[e] = d * (float)(sc[s] & 0x0f) * (float)q - dmin * (float)(sc[s] >> 4);
      }
    }
    return WEIR_OK;
  case WEIR_DTYPE_Q3_K:
    for (int64_t b = 0; b < n / WEIR_QK_K; b++, p += sizeof(weir_block_q3_K), dst += WEIR_QK_K) {
      const uint8_t *hm = p, *qs = p + 32, *sc = p + 96;
      float d = weir_f16_to_f32(weir_numeric_rd16_(p + 108));
      for (int e = 0; e < WEIR_QK_K; e++) {
        int h = e >> 7, j = (e >> 5) & 3, l = e & 31;
        int q = ((qs[32 * h + l] >> (2 * j)) & 3) - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4);
        dst[e] = d * (float)weir_k3_scale(e >> 4, sc) * (float)q;
      }
    }
    return WEIR_OK;
  case WEIR_DTYPE_Q4_K:
  case WEIR_DTYPE_Q5_K: {
    const int five = dtype == WEIR_DTYPE_Q5_K;
    const size_t bb = five ? sizeof(weir_block_q5_K) : sizeof(weir_block_q4_K);
    for (int64_t b = 0; b < n / WEIR_QK_K; b++, p += bb, dst += WEIR_QK_K) {
      float d = weir_f16_to_f32(weir_numeric_rd16_(p));
      float dmin = weir_f16_to_f32(weir_numeric_rd16_(p + 2));
      const uint8_t *scales = p + 4, *qh = p + 16, *qs = p + (five ? 48 : 16);
      for (int s = 0; s < 8; s++) {
        int sc, mn;
        weir_k4_scale_min(s, scales, &sc, &mn);
        float ds = d * (float)sc, ms = dmin * (float)mn;
        for (int l = 0; l < 32; l++) {
          int q = (qs[32 * (s >> 1) + l] >> (4 * (s & 1))) & 0x0f;
          if (five) q |= ((qh[l] >> s) & 1) << 4;
          dst[32 * s + l] = ds * (float)q - ms;
        }
      }
    }
    return WEIR_OK;
  }
  case WEIR_DTYPE_Q6_K:
    for (int64_t b = 0; b < n / WEIR_QK_K; b++, p += sizeof(weir_block_q6_K), dst += WEIR_QK_K) {
      const uint8_t *ql = p, *qh = p + 128;
      const int8_t *sc = (const int8_t *)(p + 192);
      float d = weir_f16_to_f32(weir_numeric_rd16_(p + 208));
      for (int e = 0; e < WEIR_QK_K; e++) {
        int h = e >> 7, j = (e >> 5) & 3, l = e & 31;
        int lo = (ql[64 * h + 32 * (j & 1) + l] >> (4 * (j >> 1))) & 0x0f;
        int hi = (qh[32 * h + l] >> (2 * j)) & 3;
        dst[e] = d * (float)sc[e >> 4] * (float)((lo | hi << 4) - 32);
      }
    }
    return WEIR_OK;
  case WEIR_DTYPE_IQ4_XS:
    for (int64_t b = 0; b < n / WEIR_QK_K; b++, p += sizeof(weir_block_iq4_xs), dst += WEIR_QK_K) {
      float d = weir_f16_to_f32(weir_numeric_rd16_(p));
      uint16_t sh = weir_numeric_rd16_(p + 2);
      const uint8_t *sl = p + 4, *qs = p + 8;
      for (int s = 0; s < 8; s++) {
        int ls = ((sl[s >> 1] >> (4 * (s & 1))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4;
        float dl = d * (float)(ls - 32);
        for (int i = 0; i < 16; i++) {
          dst[32 * s + i] = dl * (float)weir_iq4_kvalues[qs[16 * s + i] & 0x0f];
          dst[32 * s + i + 16] = dl * (float)weir_iq4_kvalues[qs[16 * s + i] >> 4];
        }
      }
    }
    return WEIR_OK;
  default:
    return WEIR_E_NOTSUP;
  }
}

/* Whether the nblocks blocks of dtype at src have finite f16 scales (d, and dmin or m where
 * the type has one): returns -1 when all do, else the index of the first block that does not.
 * Plain (non-block) types and types without f16 scales return -1. Reads 2-4 bytes per block:
 * cheap next to dequantizing, so a loader can refuse a file before its weights become NaN.
 * Since 1.5. */
static inline int64_t weir_quant_scales_finite(weir_dtype dtype, const void *src,
                                               int64_t nblocks) {
  size_t bb = weir_dtype_block_bytes(dtype), at0, at1 = (size_t)-1;
  switch (dtype) {
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_Q5_0: case WEIR_DTYPE_IQ4_NL:
  case WEIR_DTYPE_IQ4_XS:
    at0 = 0;
    break;
  case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_1: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
    at0 = 0;
    at1 = 2;
    break;
  case WEIR_DTYPE_Q2_K: at0 = 80; at1 = 82; break;
  case WEIR_DTYPE_Q3_K: at0 = 108; break;
  case WEIR_DTYPE_Q6_K: at0 = 208; break;
  default: return -1;
  }
  const uint8_t *p = (const uint8_t *)src;
  for (int64_t b = 0; b < nblocks; b++, p += bb) {
    /* An f16 is NaN or infinite when its exponent bits are all ones. */
    if ((weir_numeric_rd16_(p + at0) & 0x7c00u) == 0x7c00u) return b;
    if (at1 != (size_t)-1 && (weir_numeric_rd16_(p + at1) & 0x7c00u) == 0x7c00u) return b;
  }
  return -1;
}

#ifdef __cplusplus
}
#endif
#endif
