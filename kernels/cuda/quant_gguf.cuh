// Decoding the native GGUF weight blocks on the device, one 32-element chunk at a time, for
// kernels/cuda/quant_gguf.cu (and, through it, the CPU shim in tests/cuda/cpu_shim).
//
// Every supported type is read as chunks of 32 consecutive elements of a row (a whole block
// for the 32-element types; sub-block c = 0..7 of a 256-element super-block for the K-quants
// and IQ4_XS). decode() turns a chunk into
//   v[8]:        32 small integers packed as int8x4 (element j in byte j % 4 of v[j / 4]),
//   a[2], b[2]:  per half of 16 elements, so that  w_j = a[j / 16] * v_j + b[j / 16]
// exactly as the format defines the value (offsets such as Q4_0's -8 or Q6_K's -32 are folded
// into b, so every v fits a signed byte and dp4a can take it). kHalves says whether the two
// halves can differ (Q2_K, Q3_K and Q6_K scale sub-blocks of 16); when false a[0] == a[1] and
// b[0] == b[1] and the dot product uses the activation block's precomputed sum.
//
// Layouts (byte offsets in a block; f16 fields little-endian) are GGUF's, as documented in
// sdk/include/weir/tensor.h; the code below was written from the format description. Blocks
// are only 2-byte aligned in general (Q6_K is 210 bytes, Q3_K 110, Q4_0 18), so words are read
// as two 16-bit loads; a warp reads consecutive chunks, so its loads cover a contiguous span of
// the row (coalesced in 32-byte sectors).
#ifndef WEIR_QUANT_GGUF_CUH
#define WEIR_QUANT_GGUF_CUH

#include "weir_cuda_device.cuh"
#include "weir_cuda_gguf.h"

namespace weir_cuda {
namespace gguf {

// GGUF type numbers (sdk/include/weir/tensor.h).
enum {
  kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11, kQ4_K = 12,
  kQ5_K = 13, kQ6_K = 14, kIQ4_NL = 20, kIQ4_XS = 23,
  // Repacked at load (weir_cuda_gguf_repack): Q3_K and Q6_K in 16-byte aligned planes per row.
  kQ3_K_R = WEIR_CUDA_GGUF_Q3_K_R, kQ6_K_R = WEIR_CUDA_GGUF_Q6_K_R
};

// The IQ4_NL / IQ4_XS codebook (GGUF's fixed non-linear 4-bit values).
__device__ const signed char kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

// The CPU shim defines WEIR_GGUF_CHECK_ALIGN to prove that every wide load is aligned (x86
// would not fault on a misaligned one; a GPU does).
#ifndef WEIR_GGUF_CHECK_ALIGN
#define WEIR_GGUF_CHECK_ALIGN(p, a) ((void)0)
#endif

__device__ __forceinline__ unsigned ld16(const unsigned char *p) {
  WEIR_GGUF_CHECK_ALIGN(p, 2);
  return *reinterpret_cast<const unsigned short *>(p);
}
// 4 bytes at a 2-byte aligned address.
__device__ __forceinline__ unsigned ld32(const unsigned char *p) {
  return ld16(p) | (ld16(p + 2) << 16);
}

// The alignment every block of a B-byte type keeps when rows of whole blocks lie back to back
// from a 16-byte aligned base (the launchers check the base and the row stride): 16 for Q4_K
// and Q5_K, 4 for Q4_1, Q5_1, Q2_K and IQ4_XS, 2 for the rest. Wider loads where it allows.
template <int B> constexpr int block_align() { return B % 16 == 0 ? 16 : B % 4 == 0 ? 4 : 2; }

// A word at p, which is 4-byte aligned when B % 4 == 0 (else 2-byte aligned).
template <int B> __device__ __forceinline__ unsigned ldw(const unsigned char *p) {
  if (B % 4 == 0) {
    WEIR_GGUF_CHECK_ALIGN(p, 4);
    return *reinterpret_cast<const unsigned *>(p);
  }
  return ld32(p);
}

// 32 bytes at p as 8 words: two 16-byte loads when B % 16 == 0 (p then 16-byte aligned).
template <int B> __device__ __forceinline__ void ld8w(const unsigned char *p, unsigned u[8]) {
  if (B % 16 == 0) {
    WEIR_GGUF_CHECK_ALIGN(p, 16);
    const uint4 a = *reinterpret_cast<const uint4 *>(p);
    const uint4 b = *reinterpret_cast<const uint4 *>(p + 16);
    u[0] = a.x, u[1] = a.y, u[2] = a.z, u[3] = a.w, u[4] = b.x, u[5] = b.y, u[6] = b.z, u[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) u[i] = ldw<B>(p + 4 * i);
  }
}

// Signed int8x4 dot product plus c: dp4a on sm_61+, the same sum elsewhere (the CPU shim).
__device__ __forceinline__ int dot4(int a, int b, int c) { return weir_cuda::dp4a(a, b, c); }

// Bits 0..3 of `bits` moved to bit 4 of bytes 0..3 (the fifth bit of four Q5 elements).
__device__ __forceinline__ unsigned spread4_to_bit4(unsigned bits) {
  return ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
}

// Four codebook values for the four nibbles of `n` (one per byte, each < 16).
__device__ __forceinline__ int iq4_lookup4(unsigned n) {
  unsigned r = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    r |= (unsigned)(unsigned char)kIq4Values[(n >> (8 * k)) & 15u] << (8 * k);
  return (int)r;
}

// K-quant 6-bit scale and min of sub-block j (Q4_K, Q5_K: 12 packed bytes at s).
__device__ __forceinline__ void scale_min_k4(const unsigned char *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <int T> struct Block;

// Q8_0: f16 d, 32 int8. w = d q.
template <> struct Block<kQ8_0> {
  static constexpr int kElems = 32, kBytes = 34;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int, int v[8], float a[2], float o[2]) {
    a[0] = a[1] = ld_half(b);
    o[0] = o[1] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = (int)ld32(b + 2 + 4 * i);
  }
};

// Q4_0: f16 d, 16 bytes of nibbles (element j < 16 low nibble of byte j, j >= 16 high nibble of
// byte j - 16). w = d (q - 8).
template <> struct Block<kQ4_0> {
  static constexpr int kElems = 32, kBytes = 18;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int, int v[8], float a[2], float o[2]) {
    const float d = ld_half(b);
    a[0] = a[1] = d;
    o[0] = o[1] = -8.0f * d;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned q = ld32(b + 2 + 4 * i);
      v[i] = (int)(q & 0x0F0F0F0Fu);
      v[4 + i] = (int)((q >> 4) & 0x0F0F0F0Fu);
    }
  }
};

// Q4_1: f16 d, f16 m, nibbles as Q4_0. w = d q + m.
template <> struct Block<kQ4_1> {
  static constexpr int kElems = 32, kBytes = 20;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int, int v[8], float a[2], float o[2]) {
    a[0] = a[1] = ld_half(b);
    o[0] = o[1] = ld_half(b + 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned q = ldw<kBytes>(b + 4 + 4 * i);
      v[i] = (int)(q & 0x0F0F0F0Fu);
      v[4 + i] = (int)((q >> 4) & 0x0F0F0F0Fu);
    }
  }
};

// The nibbles and fifth bits of a Q5 block: qh bit j is element j's bit 4.
template <int B>
__device__ __forceinline__ void q5_values(const unsigned char *qh_p, const unsigned char *qs,
                                          int v[8]) {
  const unsigned qh = ldw<B>(qh_p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned q = ldw<B>(qs + 4 * i);
    v[i] = (int)((q & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (4 * i)) & 15u));
    v[4 + i] = (int)(((q >> 4) & 0x0F0F0F0Fu) | spread4_to_bit4((qh >> (16 + 4 * i)) & 15u));
  }
}

// Q5_0: f16 d, 4 bytes qh, 16 bytes of nibbles. w = d (q - 16).
template <> struct Block<kQ5_0> {
  static constexpr int kElems = 32, kBytes = 22;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int, int v[8], float a[2], float o[2]) {
    const float d = ld_half(b);
    a[0] = a[1] = d;
    o[0] = o[1] = -16.0f * d;
    q5_values<kBytes>(b + 2, b + 6, v);
  }
};

// Q5_1: f16 d, f16 m, 4 bytes qh, 16 bytes of nibbles. w = d q + m.
template <> struct Block<kQ5_1> {
  static constexpr int kElems = 32, kBytes = 24;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int, int v[8], float a[2], float o[2]) {
    a[0] = a[1] = ld_half(b);
    o[0] = o[1] = ld_half(b + 2);
    q5_values<kBytes>(b + 4, b + 8, v);
  }
};

// IQ4_NL: f16 d, nibbles as Q4_0 indexing the codebook. w = d kvalues[q].
template <> struct Block<kIQ4_NL> {
  static constexpr int kElems = 32, kBytes = 18;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int, int v[8], float a[2], float o[2]) {
    a[0] = a[1] = ld_half(b);
    o[0] = o[1] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned q = ld32(b + 2 + 4 * i);
      v[i] = iq4_lookup4(q & 0x0F0F0F0Fu);
      v[4 + i] = iq4_lookup4((q >> 4) & 0x0F0F0F0Fu);
    }
  }
};

// Q2_K (84 bytes): scales[16] @0 (low nibble scale, high nibble min, per 16 elements),
// qs[64] @16, f16 d @80, f16 dmin @82. Element e = 128 n + 32 j + l (l < 32) is bits 2j..2j+1
// of qs[32 n + l]. w = d sc q - dmin m.
template <> struct Block<kQ2_K> {
  static constexpr int kElems = 256, kBytes = 84;
  static constexpr bool kHalves = true;
  __device__ static void decode(const unsigned char *b, int c, int v[8], float a[2], float o[2]) {
    const float d = ld_half(b + 80), dmin = ld_half(b + 82);
    const unsigned char *qs = b + 16 + 32 * (c >> 2);
    const int shift = 2 * (c & 3);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = (int)((ldw<kBytes>(qs + 4 * i) >> shift) & 0x03030303u);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int s = b[2 * c + h];
      a[h] = d * (float)(s & 15);
      o[h] = -dmin * (float)(s >> 4);
    }
  }
};

// Q3_K (110 bytes): hmask[32] @0, qs[64] @32, scales[12] @96 (16 6-bit scales, minus 32),
// f16 d @108. Element e = 128 n + 32 j + l: low bits 2j..2j+1 of qs[32 n + l], high bit = bit
// (4 n + j) of hmask[l]; q = low - (high ? 0 : 4). w = d (sc - 32) q.
template <> struct Block<kQ3_K> {
  static constexpr int kElems = 256, kBytes = 110;
  static constexpr bool kHalves = true;
  __device__ static void decode(const unsigned char *b, int c, int v[8], float a[2], float o[2]) {
    const float d = ld_half(b + 108);
    const unsigned char *qs = b + 32 + 32 * (c >> 2);
    const int shift = 2 * (c & 3);
    // low + 4 high in [0, 7]; the -4 goes into o.
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = (int)(((ld32(qs + 4 * i) >> shift) & 0x03030303u) |
                   (((ld32(b + 4 * i) >> c) & 0x01010101u) << 2));
    const unsigned char *sc = b + 96;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = 2 * c + h;
      const int lo = k < 8 ? (sc[k] & 15) : (sc[k - 8] >> 4);
      const int hi = (sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
      a[h] = d * (float)((lo | (hi << 4)) - 32);
      o[h] = -4.0f * a[h];
    }
  }
};

// Q4_K (144 bytes): f16 d @0, f16 dmin @2, scales[12] @4 (8 6-bit scales and mins), qs[128]
// @16. Sub-block c: nibble (c odd: high) of qs[32 (c / 2) + l]. w = d sc q - dmin m.
template <> struct Block<kQ4_K> {
  static constexpr int kElems = 256, kBytes = 144;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int c, int v[8], float a[2], float o[2]) {
    int sc, m;
    scale_min_k4(b + 4, c, &sc, &m);
    a[0] = a[1] = ld_half(b) * (float)sc;
    o[0] = o[1] = -ld_half(b + 2) * (float)m;
    const int shift = 4 * (c & 1);
    unsigned u[8];
    ld8w<kBytes>(b + 16 + 32 * (c >> 1), u);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = (int)((u[i] >> shift) & 0x0F0F0F0Fu);
  }
};

// Q5_K (176 bytes): as Q4_K with qh[32] @16 (bit c of qh[l] is element 32 c + l's bit 4) and
// qs[128] @48.
template <> struct Block<kQ5_K> {
  static constexpr int kElems = 256, kBytes = 176;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int c, int v[8], float a[2], float o[2]) {
    int sc, m;
    scale_min_k4(b + 4, c, &sc, &m);
    a[0] = a[1] = ld_half(b) * (float)sc;
    o[0] = o[1] = -ld_half(b + 2) * (float)m;
    const int shift = 4 * (c & 1);
    unsigned u[8], h[8];
    ld8w<kBytes>(b + 48 + 32 * (c >> 1), u);
    ld8w<kBytes>(b + 16, h);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = (int)(((u[i] >> shift) & 0x0F0F0F0Fu) | (((h[i] >> c) & 0x01010101u) << 4));
  }
};

// Q6_K (210 bytes): ql[128] @0, qh[64] @128, int8 scales[16] @192, f16 d @208. Element
// e = 128 n + 32 k + l: low nibble (k >= 2: high nibble) of ql[64 n + 32 (k & 1) + l], bits
// 2k..2k+1 of qh[32 n + l] on top; scale of its 16 = scales[8 n + 2 k + l / 16].
// w = d sc (q - 32).
template <> struct Block<kQ6_K> {
  static constexpr int kElems = 256, kBytes = 210;
  static constexpr bool kHalves = true;
  __device__ static void decode(const unsigned char *b, int c, int v[8], float a[2], float o[2]) {
    const int n = c >> 2, k = c & 3;
    const unsigned char *ql = b + 64 * n + 32 * (k & 1);
    const unsigned char *qh = b + 128 + 32 * n;
    const int lshift = 4 * (k >> 1), hshift = 2 * k;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = (int)(((ld32(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu) |
                   (((ld32(qh + 4 * i) >> hshift) & 0x03030303u) << 4));
    const float d = ld_half(b + 208);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      a[h] = d * (float)(signed char)b[192 + 8 * n + 2 * k + h];
      o[h] = -32.0f * a[h];
    }
  }
};

// IQ4_XS (136 bytes): f16 d @0, u16 scales_h @2, scales_l[4] @4, qs[128] @8. Sub-block c:
// 6-bit scale = nibble (c odd: high) of scales_l[c / 2] | bits 2c..2c+1 of scales_h << 4,
// minus 32; its 16 bytes of nibbles at qs[16 c] as IQ4_NL. w = d (ls - 32) kvalues[q].
template <> struct Block<kIQ4_XS> {
  static constexpr int kElems = 256, kBytes = 136;
  static constexpr bool kHalves = false;
  __device__ static void decode(const unsigned char *b, int c, int v[8], float a[2], float o[2]) {
    const int ls = ((b[4 + (c >> 1)] >> (4 * (c & 1))) & 15) | (((ld16(b + 2) >> (2 * c)) & 3) << 4);
    a[0] = a[1] = ld_half(b) * (float)(ls - 32);
    o[0] = o[1] = 0.0f;
    const unsigned char *qs = b + 8 + 16 * c;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned q = ldw<kBytes>(qs + 4 * i);
      v[i] = iq4_lookup4(q & 0x0F0F0F0Fu);
      v[4 + i] = iq4_lookup4((q >> 4) & 0x0F0F0F0Fu);
    }
  }
};

// Q6_K repacked into planes (kQ6_K_R, weir_cuda_gguf.h): a row of nsb super-blocks holds
// quants [nsb][192] (each super-block's ql[128] then qh[64]), then int8 scales [nsb][16],
// then f16 d [nsb], from a 16-byte aligned row start. A chunk's 32 ql bytes and 32 qh bytes
// are then four 16-byte loads (Q6_K's 210-byte blocks allow only 2-byte loads: 16 of them),
// and the bytes read are the same 210 per super-block. Same values as Block<kQ6_K>.
template <> struct Block<kQ6_K_R> {
  static constexpr int kElems = 256, kBytes = 210;
  static constexpr bool kHalves = true;
  __device__ static void decode_row(const unsigned char *row, int64_t nsb, int64_t sb, int c,
                                    int v[8], float a[2], float o[2]) {
    const int n = c >> 2, k = c & 3;
    const unsigned char *q = row + sb * 192;
    unsigned l[8], h[8];
    ld8w<16>(q + 64 * n + 32 * (k & 1), l);
    ld8w<16>(q + 128 + 32 * n, h);
    const int lshift = 4 * (k >> 1), hshift = 2 * k;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = (int)(((l[i] >> lshift) & 0x0F0F0F0Fu) | (((h[i] >> hshift) & 0x03030303u) << 4));
    const float d = ld_half(row + nsb * 208 + sb * 2);
    const unsigned char *sc = row + nsb * 192 + sb * 16;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      a[hh] = d * (float)(signed char)sc[8 * n + 2 * k + hh];
      o[hh] = -32.0f * a[hh];
    }
  }
};

// Q3_K repacked into planes (kQ3_K_R): quants [nsb][96] (each super-block's hmask[32] then
// qs[64]), then the 12 packed scale bytes [nsb][12], then f16 d [nsb]. A chunk's 32 hmask and
// 32 qs bytes are four 16-byte loads (Q3_K's 110-byte blocks allow only 16-bit ones). Same
// values as Block<kQ3_K>.
template <> struct Block<kQ3_K_R> {
  static constexpr int kElems = 256, kBytes = 110;
  static constexpr bool kHalves = true;
  __device__ static void decode_row(const unsigned char *row, int64_t nsb, int64_t sb, int c,
                                    int v[8], float a[2], float o[2]) {
    const unsigned char *q = row + sb * 96;
    unsigned hm[8], qs[8];
    ld8w<16>(q, hm);
    ld8w<16>(q + 32 + 32 * (c >> 2), qs);
    const int shift = 2 * (c & 3);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = (int)(((qs[i] >> shift) & 0x03030303u) | (((hm[i] >> c) & 0x01010101u) << 2));
    const float d = ld_half(row + nsb * 108 + sb * 2);
    const unsigned char *sc = row + nsb * 96 + sb * 12;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int k = 2 * c + h;
      const int lo = k < 8 ? (sc[k] & 15) : (sc[k - 8] >> 4);
      const int hi = (sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
      a[h] = d * (float)((lo | (hi << 4)) - 32);
      o[h] = -4.0f * a[h];
    }
  }
};

// Chunk `ci` (32 elements) of a row of nch chunks of type T.
template <int T>
__device__ __forceinline__ void decode_chunk(const unsigned char *row, int64_t nch, int64_t ci,
                                             int v[8], float a[2], float o[2]) {
  constexpr int per = Block<T>::kElems / 32;
  (void)nch;
  Block<T>::decode(row + (ci / per) * Block<T>::kBytes, (int)(ci % per), v, a, o);
}
template <>
__device__ __forceinline__ void decode_chunk<kQ6_K_R>(const unsigned char *row, int64_t nch,
                                                      int64_t ci, int v[8], float a[2],
                                                      float o[2]) {
  Block<kQ6_K_R>::decode_row(row, nch / 8, ci / 8, (int)(ci % 8), v, a, o);
}
template <>
__device__ __forceinline__ void decode_chunk<kQ3_K_R>(const unsigned char *row, int64_t nch,
                                                      int64_t ci, int v[8], float a[2],
                                                      float o[2]) {
  Block<kQ3_K_R>::decode_row(row, nch / 8, ci / 8, (int)(ci % 8), v, a, o);
}

} // namespace gguf
} // namespace weir_cuda

#endif
