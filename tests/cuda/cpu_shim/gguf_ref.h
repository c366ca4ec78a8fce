// A scalar double-precision reference for the GGUF weight blocks the CUDA gguf kernels read,
// written element by element from the format description (the loops walk each block in the
// order the format documents it, not in the kernels' 32-element chunks), plus random blocks
// with finite f16 scales. Shared by the CPU-shim test and the GPU suite. Header-only, C++;
// every function writes only into what the caller passes.
#ifndef WEIR_TESTS_GGUF_REF_H
#define WEIR_TESTS_GGUF_REF_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "weir/tensor.h"

namespace gguf_ref {

static const int kTypes[] = {WEIR_DTYPE_Q4_0,  WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q5_0,
                             WEIR_DTYPE_Q5_1,  WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q2_K,
                             WEIR_DTYPE_Q3_K,  WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q5_K,
                             WEIR_DTYPE_Q6_K,  WEIR_DTYPE_IQ4_NL, WEIR_DTYPE_IQ4_XS};
static const int kNumTypes = (int)(sizeof kTypes / sizeof kTypes[0]);

static const int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                             1,    13,   25,  38,  53,  69,  89,  113};

// IEEE binary16 bits to double, exactly.
static inline double half_bits(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp((double)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp((double)(m | 1024), e - 25);
  return s ? -v : v;
}
static inline double rdh(const uint8_t *p) { return half_bits((uint16_t)(p[0] | (p[1] << 8))); }

// Nearest binary16 bits of a finite double in the normal range (enough for random scales).
static inline uint16_t to_half_bits(double x) {
  const uint16_t sign = x < 0 ? 0x8000 : 0;
  x = std::fabs(x);
  if (x < 6.2e-5) return sign; // keep clear of subnormals: 0
  int e;
  double f = std::frexp(x, &e); // x = f 2^e, f in [0.5, 1)
  int m = (int)std::lround(f * 2048.0); // 11 significant bits
  if (m == 2048) { m = 1024; ++e; }
  const int be = e - 1 + 15;
  return (uint16_t)(sign | (be << 10) | (m & 1023));
}

// K-quant 6-bit scale and min of sub-block j from the 12 packed bytes.
static inline void scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// One row of `cols` elements of `type` to doubles.
static inline void dequant_row(int type, const uint8_t *p, int64_t cols, double *y) {
  switch (type) {
  case WEIR_DTYPE_Q8_0:
    for (int64_t b = 0; b < cols / 32; ++b, p += 34, y += 32)
      for (int j = 0; j < 32; ++j) y[j] = rdh(p) * (int8_t)p[2 + j];
    return;
  case WEIR_DTYPE_Q4_0:
    for (int64_t b = 0; b < cols / 32; ++b, p += 18, y += 32)
      for (int j = 0; j < 16; ++j) {
        y[j] = rdh(p) * ((p[2 + j] & 15) - 8);
        y[j + 16] = rdh(p) * ((p[2 + j] >> 4) - 8);
      }
    return;
  case WEIR_DTYPE_Q4_1:
    for (int64_t b = 0; b < cols / 32; ++b, p += 20, y += 32)
      for (int j = 0; j < 16; ++j) {
        y[j] = rdh(p) * (p[4 + j] & 15) + rdh(p + 2);
        y[j + 16] = rdh(p) * (p[4 + j] >> 4) + rdh(p + 2);
      }
    return;
  case WEIR_DTYPE_Q5_0:
  case WEIR_DTYPE_Q5_1: {
    const bool one = type == WEIR_DTYPE_Q5_1;
    const int bs = one ? 24 : 22, hoff = one ? 4 : 2;
    for (int64_t b = 0; b < cols / 32; ++b, p += bs, y += 32) {
      uint32_t qh;
      memcpy(&qh, p + hoff, 4);
      const uint8_t *qs = p + hoff + 4;
      for (int j = 0; j < 16; ++j) {
        const int x0 = (qs[j] & 15) | (((qh >> j) & 1) << 4);
        const int x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        if (one) {
          y[j] = rdh(p) * x0 + rdh(p + 2);
          y[j + 16] = rdh(p) * x1 + rdh(p + 2);
        } else {
          y[j] = rdh(p) * (x0 - 16);
          y[j + 16] = rdh(p) * (x1 - 16);
        }
      }
    }
    return;
  }
  case WEIR_DTYPE_IQ4_NL:
    for (int64_t b = 0; b < cols / 32; ++b, p += 18, y += 32)
      for (int j = 0; j < 16; ++j) {
        y[j] = rdh(p) * kIq4[p[2 + j] & 15];
        y[j + 16] = rdh(p) * kIq4[p[2 + j] >> 4];
      }
    return;
  case WEIR_DTYPE_Q2_K:
    for (int64_t b = 0; b < cols / 256; ++b, p += 84) {
      const uint8_t *sc = p, *q = p + 16;
      const double d = rdh(p + 80), dmin = rdh(p + 82);
      int is = 0;
      for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          int s = sc[is++];
          for (int l = 0; l < 16; ++l) *y++ = d * (s & 15) * ((q[l] >> shift) & 3) - dmin * (s >> 4);
          s = sc[is++];
          for (int l = 0; l < 16; ++l)
            *y++ = d * (s & 15) * ((q[l + 16] >> shift) & 3) - dmin * (s >> 4);
          shift += 2;
        }
        q += 32;
      }
    }
    return;
  case WEIR_DTYPE_Q3_K:
    for (int64_t b = 0; b < cols / 256; ++b, p += 110) {
      const uint8_t *hm = p, *q = p + 32;
      const double d = rdh(p + 108);
      // Unpack the 16 6-bit scales through four 32-bit words, as the format packs them.
      uint32_t aux[4];
      memcpy(aux, p + 96, 12);
      const uint32_t k1 = 0x03030303u, k2 = 0x0f0f0f0fu, tmp = aux[2];
      aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
      aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
      aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4);
      aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
      int8_t scales[16];
      memcpy(scales, aux, 16);
      int is = 0;
      uint8_t m = 1;
      for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          double dl = d * (scales[is++] - 32);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
          dl = d * (scales[is++] - 32);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * (((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
          shift += 2;
          m <<= 1;
        }
        q += 32;
      }
    }
    return;
  case WEIR_DTYPE_Q4_K:
  case WEIR_DTYPE_Q5_K: {
    const bool five = type == WEIR_DTYPE_Q5_K;
    const int bs = five ? 176 : 144;
    for (int64_t b = 0; b < cols / 256; ++b, p += bs) {
      const double d = rdh(p), dmin = rdh(p + 2);
      const uint8_t *sc = p + 4, *qh = p + 16, *ql = p + (five ? 48 : 16);
      int is = 0;
      uint8_t u1 = 1, u2 = 2;
      for (int j = 0; j < 256; j += 64) {
        int s, m;
        scale_min_k4(is, sc, &s, &m);
        const double d1 = d * s, m1 = dmin * m;
        scale_min_k4(is + 1, sc, &s, &m);
        const double d2 = d * s, m2 = dmin * m;
        for (int l = 0; l < 32; ++l)
          *y++ = d1 * ((ql[l] & 15) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
          *y++ = d2 * ((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
      }
    }
    return;
  }
  case WEIR_DTYPE_Q6_K:
    for (int64_t b = 0; b < cols / 256; ++b, p += 210) {
      const uint8_t *ql = p, *qh = p + 128;
      const int8_t *sc = (const int8_t *)(p + 192);
      const double d = rdh(p + 208);
      for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[l] = d * sc[is] * q1;
          y[l + 32] = d * sc[is + 2] * q2;
          y[l + 64] = d * sc[is + 4] * q3;
          y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
      }
    }
    return;
  case WEIR_DTYPE_IQ4_XS:
    for (int64_t b = 0; b < cols / 256; ++b, p += 136) {
      const double d = rdh(p);
      const int sh = p[2] | (p[3] << 8);
      const uint8_t *sl = p + 4, *qs = p + 8;
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
        const double dl = d * (ls - 32);
        for (int j = 0; j < 16; ++j) {
          y[j] = dl * kIq4[qs[j] & 15];
          y[j + 16] = dl * kIq4[qs[j] >> 4];
        }
        y += 32;
        qs += 16;
      }
    }
    return;
  default:
    for (int64_t i = 0; i < cols; ++i) y[i] = NAN;
  }
}

// Byte offsets of a block's f16 scale fields (random bytes there could be Inf/NaN).
static inline std::vector<int> half_fields(int type) {
  switch (type) {
  case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q5_0: case WEIR_DTYPE_IQ4_NL:
  case WEIR_DTYPE_IQ4_XS:
    return {0};
  case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_1: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
    return {0, 2};
  case WEIR_DTYPE_Q2_K: return {80, 82};
  case WEIR_DTYPE_Q3_K: return {108};
  case WEIR_DTYPE_Q6_K: return {208};
  default: return {};
  }
}

// `rows` rows of random blocks of `type` (every bit of the quants and packed scales random;
// the f16 scales random finite values, scaled so elements are O(1)), row_bytes apart.
template <typename Rand>
static std::vector<uint8_t> random_rows(int type, int64_t rows, int64_t cols, size_t row_bytes,
                                        Rand &&uni) {
  const int64_t be = weir_dtype_block_elems((weir_dtype)type);
  const size_t bb = weir_dtype_block_bytes((weir_dtype)type);
  std::vector<uint8_t> w((size_t)rows * row_bytes);
  for (auto &c : w) c = (uint8_t)(int)uni(0.0f, 256.0f);
  // A typical magnitude of sc * q per type, so d * sc * q is O(1).
  double mag;
  switch (type) {
  case WEIR_DTYPE_Q8_0: mag = 127; break;
  case WEIR_DTYPE_IQ4_NL: mag = 127; break;
  case WEIR_DTYPE_Q2_K: mag = 45; break;
  case WEIR_DTYPE_Q3_K: mag = 128; break;
  case WEIR_DTYPE_Q4_K: mag = 15 * 63; break;
  case WEIR_DTYPE_Q5_K: mag = 31 * 63; break;
  case WEIR_DTYPE_Q6_K: mag = 32 * 127; break;
  case WEIR_DTYPE_IQ4_XS: mag = 127 * 32; break;
  default: mag = 16; break;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / be; ++b) {
      uint8_t *blk = w.data() + (size_t)r * row_bytes + (size_t)b * bb;
      for (int off : half_fields(type)) {
        const double v = uni(-1.0f, 1.0f) / mag;
        const uint16_t h = to_half_bits(v);
        blk[off] = (uint8_t)(h & 255);
        blk[off + 1] = (uint8_t)(h >> 8);
      }
    }
  return w;
}

} // namespace gguf_ref

#endif
