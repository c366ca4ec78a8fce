/* GGUF block types, read in place (see matmul_kq.h). The bit layouts come from the format's
 * definitions (weir/tensor.h); the decoders are written from them. */
#include "matmul_kq.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "matmul_kq_amx.h"
#include "matmul_kq_internal.h"
#include "weir/numeric.h"

#if WEIR_X86
#include <immintrin.h>
#endif

/* The IQ4 codebook (IQ4_NL, IQ4_XS): nibble -> value. */
static const int8_t k_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};

int weir_kq_supported(weir_dtype t) {
  switch (t) {
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_0: case WEIR_DTYPE_Q5_1:
  case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_IQ4_NL: case WEIR_DTYPE_Q2_K: case WEIR_DTYPE_Q3_K:
  case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K: case WEIR_DTYPE_Q6_K: case WEIR_DTYPE_IQ4_XS:
    return 1;
  default:
    return 0;
  }
}

uint64_t weir_kq_dtypes(void) {
  uint64_t m = 0;
  for (int t = 0; t < 63; t++)
    if (weir_kq_supported((weir_dtype)t)) m |= WEIR_DTYPE_BIT(t);
  return m;
}

int weir_kq_act_block(weir_dtype t) { return weir_dtype_block_elems(t) == 32 ? 32 : 256; }

/* Types whose u = value + 128 (signed weights): the AVX2 path multiplies the signed values
 * instead (maddubs would saturate on u up to 255), and their mw = -128 sw cancels. */
static int signed128(weir_dtype t) {
  return t == WEIR_DTYPE_Q8_0 || t == WEIR_DTYPE_IQ4_NL || t == WEIR_DTYPE_IQ4_XS;
}

static inline uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Q3_K: signed 6-bit scale of sub-block i (0..15) from the 12 packed bytes. */
static inline int q3_scale(const uint8_t *s, int i) {
  int low = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
  int high = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return (low | (high << 4)) - 32;
}

/* Blocks of 32 in tile `tile` of a row of nb 32-blocks. */
static inline int tile_blocks(int64_t nb, int64_t tile) {
  int64_t n = nb - tile * 8;
  return n >= 8 ? 8 : (int)n;
}

/* The per-16-column (sw, mw) of a tile; H2F converts f16 bits. Blocks past nblk (a row's last
 * tile of 32-blocks) get 0. */
#define KQ_DEFINE_TILE_SCALES(NAME, ATTR, H2F)                                               \
  static ATTR void NAME(weir_dtype type, const uint8_t *row, int64_t tile, int nblk,         \
                        float *sw, float *mw) {                                              \
    size_t bb = weir_dtype_block_bytes(type);                                                \
    if (weir_dtype_block_elems(type) == 32) {                                                \
      for (int b = 0; b < 8; b++) {                                                          \
        float s = 0, m = 0;                                                                  \
        if (b < nblk) {                                                                      \
          const uint8_t *p = row + (size_t)(tile * 8 + b) * bb;                              \
          s = H2F(weir__kq_rd16(p));                                                                  \
          switch (type) {                                                                    \
          case WEIR_DTYPE_Q4_0: m = -8.0f * s; break;                                        \
          case WEIR_DTYPE_Q5_0: m = -16.0f * s; break;                                       \
          case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_1: m = H2F(weir__kq_rd16(p + 2)); break;           \
          default: m = -128.0f * s; break; /* Q8_0, IQ4_NL */                                \
          }                                                                                  \
        }                                                                                    \
        sw[2 * b] = sw[2 * b + 1] = s;                                                       \
        mw[2 * b] = mw[2 * b + 1] = m;                                                       \
      }                                                                                      \
      return;                                                                                \
    }                                                                                        \
    const uint8_t *p = row + (size_t)tile * bb;                                              \
    switch (type) {                                                                          \
    case WEIR_DTYPE_Q2_K: {                                                                  \
      float d = H2F(weir__kq_rd16(p + 80)), dmin = H2F(weir__kq_rd16(p + 82));                                 \
      for (int i = 0; i < 16; i++) {                                                         \
        sw[i] = d * (float)(p[i] & 0xF);                                                     \
        mw[i] = -dmin * (float)(p[i] >> 4);                                                  \
      }                                                                                      \
      break;                                                                                 \
    }                                                                                        \
    case WEIR_DTYPE_Q3_K: {                                                                  \
      float d = H2F(weir__kq_rd16(p + 108));                                                          \
      for (int i = 0; i < 16; i++) {                                                         \
        sw[i] = d * (float)q3_scale(p + 96, i);                                              \
        mw[i] = -4.0f * sw[i];                                                               \
      }                                                                                      \
      break;                                                                                 \
    }                                                                                        \
    case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K: {                                            \
      float d = H2F(weir__kq_rd16(p)), dmin = H2F(weir__kq_rd16(p + 2));                                       \
      for (int j = 0; j < 8; j++) {                                                          \
        int sc, m;                                                                           \
        weir__kq_k4_scale_min(p + 4, j, &sc, &m);                                                     \
        sw[2 * j] = sw[2 * j + 1] = d * (float)sc;                                           \
        mw[2 * j] = mw[2 * j + 1] = -dmin * (float)m;                                        \
      }                                                                                      \
      break;                                                                                 \
    }                                                                                        \
    case WEIR_DTYPE_Q6_K: {                                                                  \
      float d = H2F(weir__kq_rd16(p + 208));                                                          \
      for (int i = 0; i < 16; i++) {                                                         \
        sw[i] = d * (float)(int8_t)p[192 + i];                                               \
        mw[i] = -32.0f * sw[i];                                                              \
      }                                                                                      \
      break;                                                                                 \
    }                                                                                        \
    case WEIR_DTYPE_IQ4_XS: {                                                                \
      float d = H2F(weir__kq_rd16(p));                                                                \
      uint16_t sh = weir__kq_rd16(p + 2);                                                             \
      for (int ib = 0; ib < 8; ib++) {                                                       \
        int ls = ((p[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);  \
        float dl = d * (float)(ls - 32);                                                     \
        sw[2 * ib] = sw[2 * ib + 1] = dl;                                                    \
        mw[2 * ib] = mw[2 * ib + 1] = -128.0f * dl;                                          \
      }                                                                                      \
      break;                                                                                 \
    }                                                                                        \
    default:                                                                                 \
      memset(sw, 0, 16 * sizeof(float));                                                     \
      memset(mw, 0, 16 * sizeof(float));                                                     \
      break;                                                                                 \
    }                                                                                        \
  }

KQ_DEFINE_TILE_SCALES(tile_scales_c, , weir_f16_to_f32)

/* The 256 bytes u of a tile in natural column order (zeros past nblk blocks). */
static void tile_u_c(weir_dtype type, const uint8_t *row, int64_t tile, int nblk, uint8_t *u) {
  size_t bb = weir_dtype_block_bytes(type);
  if (weir_dtype_block_elems(type) == 32) {
    memset(u, 0, WEIR_KQ_TILE);
    for (int b = 0; b < nblk; b++) {
      const uint8_t *p = row + (size_t)(tile * 8 + b) * bb;
      uint8_t *o = u + 32 * b;
      switch (type) {
      case WEIR_DTYPE_Q4_0:
      case WEIR_DTYPE_Q4_1: {
        const uint8_t *qs = p + (type == WEIR_DTYPE_Q4_0 ? 2 : 4);
        for (int j = 0; j < 16; j++) {
          o[j] = qs[j] & 0xF;
          o[j + 16] = qs[j] >> 4;
        }
        break;
      }
      case WEIR_DTYPE_Q5_0:
      case WEIR_DTYPE_Q5_1: {
        const uint8_t *h = p + (type == WEIR_DTYPE_Q5_0 ? 2 : 4);
        uint32_t qh = rd32(h);
        const uint8_t *qs = h + 4;
        for (int j = 0; j < 16; j++) {
          o[j] = (uint8_t)((qs[j] & 0xF) | (((qh >> j) & 1) << 4));
          o[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        break;
      }
      case WEIR_DTYPE_Q8_0:
        for (int j = 0; j < 32; j++) o[j] = (uint8_t)(p[2 + j] ^ 0x80);
        break;
      case WEIR_DTYPE_IQ4_NL:
        for (int j = 0; j < 16; j++) {
          o[j] = (uint8_t)(k_iq4[p[2 + j] & 0xF] + 128);
          o[j + 16] = (uint8_t)(k_iq4[p[2 + j] >> 4] + 128);
        }
        break;
      default:
        break;
      }
    }
    return;
  }
  const uint8_t *p = row + (size_t)tile * bb;
  switch (type) {
  case WEIR_DTYPE_Q2_K: {
    const uint8_t *qs = p + 16;
    for (int n = 0; n < 2; n++)
      for (int s = 0; s < 4; s++)
        for (int l = 0; l < 32; l++) u[128 * n + 32 * s + l] = (qs[32 * n + l] >> (2 * s)) & 3;
    break;
  }
  case WEIR_DTYPE_Q3_K: {
    const uint8_t *hm = p, *qs = p + 32;
    for (int n = 0; n < 2; n++)
      for (int s = 0; s < 4; s++)
        for (int l = 0; l < 32; l++)
          u[128 * n + 32 * s + l] = (uint8_t)(((qs[32 * n + l] >> (2 * s)) & 3) |
                                              (((hm[l] >> (4 * n + s)) & 1) << 2));
    break;
  }
  case WEIR_DTYPE_Q4_K:
  case WEIR_DTYPE_Q5_K: {
    const uint8_t *qh = p + 16, *qs = p + (type == WEIR_DTYPE_Q4_K ? 16 : 48);
    for (int j = 0; j < 4; j++)
      for (int l = 0; l < 32; l++) {
        u[64 * j + l] = qs[32 * j + l] & 0xF;
        u[64 * j + 32 + l] = qs[32 * j + l] >> 4;
      }
    if (type == WEIR_DTYPE_Q5_K)
      for (int s = 0; s < 8; s++)
        for (int l = 0; l < 32; l++) u[32 * s + l] |= (uint8_t)(((qh[l] >> s) & 1) << 4);
    break;
  }
  case WEIR_DTYPE_Q6_K:
    for (int n = 0; n < 2; n++) {
      const uint8_t *ql = p + 64 * n, *qh = p + 128 + 32 * n;
      uint8_t *o = u + 128 * n;
      for (int l = 0; l < 32; l++) {
        o[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
        o[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
        o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    break;
  case WEIR_DTYPE_IQ4_XS: {
    const uint8_t *qs = p + 8;
    for (int ib = 0; ib < 8; ib++)
      for (int j = 0; j < 16; j++) {
        u[32 * ib + j] = (uint8_t)(k_iq4[qs[16 * ib + j] & 0xF] + 128);
        u[32 * ib + 16 + j] = (uint8_t)(k_iq4[qs[16 * ib + j] >> 4] + 128);
      }
    break;
  }
  default:
    memset(u, 0, WEIR_KQ_TILE);
    break;
  }
}

int weir_kq_dequant_row(weir_dtype type, const void *row, int64_t cols, float *out) {
  if (!weir_kq_supported(type)) return -1;
  int64_t be = weir_dtype_block_elems(type), nb = cols / be;
  uint8_t u[WEIR_KQ_TILE];
  float sw[16], mw[16];
  for (int64_t t = 0; t < weir_kq_tiles(cols); t++) {
    int nblk = be == 32 ? tile_blocks(nb, t) : 8;
    tile_u_c(type, row, t, nblk, u);
    tile_scales_c(type, row, t, nblk, sw, mw);
    for (int k = 0; k < WEIR_KQ_TILE && t * WEIR_KQ_TILE + k < cols; k++)
      out[t * WEIR_KQ_TILE + k] = fmaf(sw[k / 16], (float)u[k], mw[k / 16]);
  }
  return 0;
}

/* ---- activations ---------------------------------------------------------------------- */

size_t weir_kq_act_bytes(int64_t cols, int64_t n_tokens) {
  size_t tiles = (size_t)weir_kq_tiles(cols), n = (size_t)n_tokens;
  size_t qb = (n * tiles * WEIR_KQ_TILE + 63) & ~(size_t)63;
  size_t fb = (n * tiles * 16 * sizeof(float) + 63) & ~(size_t)63;
  return qb + 2 * fb;
}

void weir_kq_act_init(weir_kq_act *a, void *buf, int64_t cols, int64_t n_tokens) {
  size_t tiles = (size_t)weir_kq_tiles(cols), n = (size_t)n_tokens;
  size_t qb = (n * tiles * WEIR_KQ_TILE + 63) & ~(size_t)63;
  size_t fb = (n * tiles * 16 * sizeof(float) + 63) & ~(size_t)63;
  a->tiles = (int64_t)tiles;
  a->q = buf;
  a->d16 = (float *)((uint8_t *)buf + qb);
  a->s16 = (float *)((uint8_t *)buf + qb + fb);
}

static void act_block_c(const float *x, int n, int blk, int8_t *q, float *d16, float *s16) {
  float amax = 0;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    float v = fabsf(x[i]);
    if (!(v <= 3.4e38f)) bad = 1;
    if (v > amax) amax = v;
  }
  float d = 0, id = 0;
  if (bad) {
    d = NAN;
  } else if (amax > 0) {
    id = 127.0f / amax;
    d = amax / 127.0f;
  }
  for (int i = 0; i < blk; i++) {
    int v = 0;
    if (i < n && id != 0) {
      v = (int)lrintf(x[i] * id);
      v = v > 127 ? 127 : v < -127 ? -127 : v;
    }
    q[i] = (int8_t)v;
  }
  for (int g = 0; g < blk / 16; g++) {
    int s = 0;
    for (int i = 0; i < 16; i++) s += q[16 * g + i];
    d16[g] = d;
    s16[g] = d * (float)s;
  }
}

#if WEIR_X86
/* One block of 32 or 256 columns, all present (n == blk). */
WEIR_TARGET_AVX512 static void act_block_avx512(const float *x, int blk, int8_t *q, float *d16,
                                                float *s16) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int i = 0; i < blk; i += 16) {
    __m512 v = _mm512_and_ps(_mm512_loadu_ps(x + i), absmask);
    bad |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(3.4e38f), _CMP_NLE_UQ);
    vmax = _mm512_max_ps(vmax, v);
  }
  float amax = _mm512_reduce_max_ps(vmax);
  float d = 0, id = 0;
  if (bad) {
    d = NAN;
  } else if (amax > 0) {
    id = 127.0f / amax;
    d = amax / 127.0f;
  }
  const __m512 vid = _mm512_set1_ps(id);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int i = 0; i < blk; i += 16) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vid));
    v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
    _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(v));
    d16[i / 16] = d;
    s16[i / 16] = d * (float)_mm512_reduce_add_epi32(v);
  }
}
#endif

void weir_kq_quantize_act(weir_dtype type, const float *x, int64_t cols, const weir_kq_act *a,
                          int64_t t) {
  const int blk = weir_kq_act_block(type);
  const int64_t kp = a->tiles * WEIR_KQ_TILE;
  int8_t *q = a->q + t * kp;
  float *d16 = a->d16 + t * a->tiles * 16, *s16 = a->s16 + t * a->tiles * 16;
#if WEIR_X86
  int simd = weir_cpu_isa() >= WEIR_CPU_ISA_AVX512;
#endif
  for (int64_t k0 = 0; k0 < kp; k0 += blk) {
    int64_t n = cols - k0;
    n = n < 0 ? 0 : n > blk ? blk : n;
#if WEIR_X86
    if (simd && n == blk) {
      act_block_avx512(x + k0, blk, q + k0, d16 + k0 / 16, s16 + k0 / 16);
      continue;
    }
#endif
    act_block_c(x + k0, (int)n, blk, q + k0, d16 + k0 / 16, s16 + k0 / 16);
  }
}

/* ---- WEIR_KQ_X16 (see matmul_kq.h) ---------------------------------------------------------- */

/* Where a group's values start (its columns and bytes: matmul_kq_internal.h). */
static size_t x16_head(weir_dtype t) { return t == WEIR_DTYPE_Q6_K ? 18 : 32; }

int weir_kq_x16_fits(weir_dtype t, int64_t cols) {
  return (t == WEIR_DTYPE_Q8_0 || t == WEIR_DTYPE_Q4_K || t == WEIR_DTYPE_Q5_K ||
          t == WEIR_DTYPE_Q6_K) &&
         cols > 0 && cols % weir__kq_x16_cols(t) == 0;
}

/* The value u of lane l, column 4c + i of a group at p. */
static inline int x16_u(weir_dtype t, const uint8_t *p, int c, int l, int i) {
  const uint8_t *v = p + x16_head(t);
  const int o = 4 * l + i;
  switch (t) {
  case WEIR_DTYPE_Q8_0: return v[64 * c + o];
  case WEIR_DTYPE_Q4_K: return (v[64 * (c & 3) + o] >> (4 * (c >> 2))) & 0xF;
  case WEIR_DTYPE_Q5_K:
    return ((v[64 * (c & 3) + o] >> (4 * (c >> 2))) & 0xF) | (((v[256 + 8 * c + o / 8] >> (o % 8)) & 1) << 4);
  default: /* Q6_K */
    return ((v[64 * (c & 1) + o] >> (4 * (c >> 1))) & 0xF) | (((v[128 + o] >> (2 * c)) & 3) << 4);
  }
}

void weir_kq_x16_pack_row(weir_dtype t, const uint8_t *src, uint8_t *dst, int64_t cols) {
  const int gc = weir__kq_x16_cols(t), bw = gc / 16;
  const size_t gb = weir__kq_x16_bytes(t), h = x16_head(t);
  uint8_t u[512];
  for (int64_t g = 0; g < cols / gc; g++) {
    const uint8_t *s = src + g * gb;
    uint8_t *d = dst + g * gb;
    memset(d, 0, gb);
    if (t == WEIR_DTYPE_Q8_0) {
      for (int l = 0; l < 16; l++) {
        memcpy(d + 2 * l, s + 34 * l, 2);
        for (int j = 0; j < 32; j++) u[32 * l + j] = (uint8_t)(s[34 * l + 2 + j] ^ 0x80);
      }
    } else if (t == WEIR_DTYPE_Q6_K) {
      memcpy(d, s + 192, 16);
      memcpy(d + 16, s + 208, 2);
      tile_u_c(t, s, 0, 8, u);
    } else {
      const size_t sbb = weir_dtype_block_bytes(t);
      for (int sb = 0; sb < 2; sb++) {
        memcpy(d + 16 * sb, s + sbb * sb, 16); /* d, dmin, the 12 scale bytes */
        tile_u_c(t, s, sb, 8, u + 256 * sb);
      }
    }
    uint8_t *v = d + h;
    for (int c = 0; c < bw / 4; c++)
      for (int l = 0; l < 16; l++)
        for (int i = 0; i < 4; i++) {
          const int o = 4 * l + i, x = u[bw * l + 4 * c + i];
          switch (t) {
          case WEIR_DTYPE_Q8_0: v[64 * c + o] = (uint8_t)x; break;
          case WEIR_DTYPE_Q4_K: v[64 * (c & 3) + o] |= (uint8_t)(x << (4 * (c >> 2))); break;
          case WEIR_DTYPE_Q5_K:
            v[64 * (c & 3) + o] |= (uint8_t)((x & 0xF) << (4 * (c >> 2)));
            v[256 + 8 * c + o / 8] |= (uint8_t)((x >> 4) << (o % 8));
            break;
          default:
            v[64 * (c & 1) + o] |= (uint8_t)((x & 0xF) << (4 * (c >> 1)));
            v[128 + o] |= (uint8_t)((x >> 4) << (2 * c));
            break;
          }
        }
  }
}

void weir__kq_x16_scales(weir_dtype t, const uint8_t *p, float *sw, float *mw) {
  if (t == WEIR_DTYPE_Q8_0) {
    for (int l = 0; l < 16; l++) {
      sw[l] = weir_f16_to_f32(weir__kq_rd16(p + 2 * l));
      mw[l] = -128.0f * sw[l];
    }
    return;
  }
  if (t == WEIR_DTYPE_Q6_K) {
    float d = weir_f16_to_f32(weir__kq_rd16(p + 16));
    for (int l = 0; l < 16; l++) {
      sw[l] = d * (float)(int8_t)p[l];
      mw[l] = -32.0f * sw[l];
    }
    return;
  }
  for (int sb = 0; sb < 2; sb++) {
    const uint8_t *h = p + 16 * sb;
    float d = weir_f16_to_f32(weir__kq_rd16(h)), dmin = weir_f16_to_f32(weir__kq_rd16(h + 2));
    for (int j = 0; j < 8; j++) {
      int sc, m;
      weir__kq_k4_scale_min(h + 4, j, &sc, &m);
      sw[8 * sb + j] = d * (float)sc;
      mw[8 * sb + j] = -dmin * (float)m;
    }
  }
}

void weir_kq_x16_dequant_row(weir_dtype t, const uint8_t *row, int64_t cols, float *out) {
  const int gc = weir__kq_x16_cols(t), bw = gc / 16;
  for (int64_t g = 0; g < cols / gc; g++) {
    const uint8_t *p = row + g * weir__kq_x16_bytes(t);
    float sw[16], mw[16];
    weir__kq_x16_scales(t, p, sw, mw);
    for (int l = 0; l < 16; l++)
      for (int c = 0; c < bw / 4; c++)
        for (int i = 0; i < 4; i++)
          out[gc * g + bw * l + 4 * c + i] = fmaf(sw[l], (float)x16_u(t, p, c, l, i), mw[l]);
  }
}

/* Quantizes each group with the type's rule (weir_kq_quantize_act), then moves each lane's q
 * into the weights' order. */
void weir_kq_quantize_act_x16(weir_dtype type, const float *x, int64_t cols,
                              const weir_kq_act *a, int64_t t) {
  const int gc = weir__kq_x16_cols(type), bw = gc / 16;
  const int64_t kp = a->tiles * WEIR_KQ_TILE;
  _Alignas(64) int8_t nq[512];
  _Alignas(64) float nd[32], ns[32];
  weir_kq_act one = {.tiles = gc / WEIR_KQ_TILE, .q = nq, .d16 = nd, .s16 = ns};
  for (int64_t g = 0; g < cols / gc; g++) {
    weir_kq_quantize_act(type, x + gc * g, gc, &one, 0);
    int8_t *q = a->q + t * kp + gc * g;
    float *xd = a->d16 + (t * a->tiles + g * (gc / WEIR_KQ_TILE)) * 16;
    float *xs = a->s16 + (t * a->tiles + g * (gc / WEIR_KQ_TILE)) * 16;
    for (int l = 0; l < 16; l++) {
      int32_t sum = 0;
      for (int c = 0; c < bw / 4; c++)
        for (int i = 0; i < 4; i++) {
          int8_t v = nq[bw * l + 4 * c + i];
          q[64 * c + 4 * l + i] = v;
          sum += v;
        }
      xd[l] = nd[bw * l / 16];
      if (type == WEIR_DTYPE_Q8_0) {
        int32_t neg = -128 * sum;
        memcpy(xs + l, &neg, 4);
      } else {
        xs[l] = xd[l] * (float)sum;
      }
    }
  }
}

static void x16_rows_c(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  const weir_dtype ty = a->type;
  const int gc = weir__kq_x16_cols(ty), bw = gc / 16, q8 = ty == WEIR_DTYPE_Q8_0;
  const int64_t tiles = a->act.tiles, kp = tiles * WEIR_KQ_TILE, groups = a->cols / gc;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = a->w + (size_t)r * a->row_bytes;
    for (int64_t t = 0; t < a->n_tokens; t++) {
      float acc = 0;
      for (int64_t g = 0; g < groups; g++) {
        const uint8_t *p = row + g * weir__kq_x16_bytes(ty);
        const int8_t *xq = a->act.q + t * kp + gc * g;
        const int64_t o = (t * tiles + g * (gc / WEIR_KQ_TILE)) * 16;
        const float *xd = a->act.d16 + o, *xs = a->act.s16 + o;
        float sw[16], mw[16];
        weir__kq_x16_scales(ty, p, sw, mw);
        for (int l = 0; l < 16; l++) {
          int32_t s = 0;
          if (q8) memcpy(&s, xs + l, 4);
          for (int c = 0; c < bw / 4; c++)
            for (int i = 0; i < 4; i++) s += x16_u(ty, p, c, l, i) * xq[64 * c + 4 * l + i];
          acc += sw[l] * xd[l] * (float)s;
          if (!q8) acc += mw[l] * xs[l];
        }
      }
      a->y[t * a->rows + r] = acc;
    }
  }
}

/* ---- scalar ----------------------------------------------------------------------------- */

static void rows_c(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  const int64_t tiles = a->act.tiles, kp = tiles * WEIR_KQ_TILE;
  const int64_t nb = a->cols / weir_dtype_block_elems(a->type);
  const int is32 = weir_dtype_block_elems(a->type) == 32;
  uint8_t u[WEIR_KQ_TILE];
  float sw[16], mw[16];
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = a->w + (size_t)r * a->row_bytes;
    for (int64_t t = 0; t < a->n_tokens; t++) a->y[t * a->rows + r] = 0;
    for (int64_t tile = 0; tile < tiles; tile++) {
      int nblk = is32 ? tile_blocks(nb, tile) : 8;
      tile_u_c(a->type, row, tile, nblk, u);
      tile_scales_c(a->type, row, tile, nblk, sw, mw);
      for (int64_t t = 0; t < a->n_tokens; t++) {
        const int8_t *xq = a->act.q + t * kp + tile * WEIR_KQ_TILE;
        const float *xd = a->act.d16 + (t * tiles + tile) * 16;
        const float *xs = a->act.s16 + (t * tiles + tile) * 16;
        float acc = 0;
        for (int g = 0; g < 16; g++) {
          int32_t s = 0;
          for (int i = 0; i < 16; i++) s += (int32_t)u[16 * g + i] * xq[16 * g + i];
          acc += sw[g] * xd[g] * (float)s + mw[g] * xs[g];
        }
        a->y[t * a->rows + r] += acc;
      }
    }
  }
}

#if WEIR_X86
/* ---- AVX2: scalar decode, int8 dot with maddubs ----------------------------------------- */

KQ_DEFINE_TILE_SCALES(tile_scales_f16c, WEIR_TARGET_AVX2, _cvtsh_ss)

WEIR_TARGET_AVX2 static void rows_avx2(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  const int64_t tiles = a->act.tiles, kp = tiles * WEIR_KQ_TILE;
  const int64_t nb = a->cols / weir_dtype_block_elems(a->type);
  const int is32 = weir_dtype_block_elems(a->type) == 32, sgn = signed128(a->type);
  const __m256i ones = _mm256_set1_epi16(1), x80 = _mm256_set1_epi8((char)0x80);
  _Alignas(32) uint8_t u[WEIR_KQ_TILE];
  _Alignas(32) float sw[16], mw[16], swx[16];
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = a->w + (size_t)r * a->row_bytes;
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += 8) {
      int64_t tb = a->n_tokens - t0 < 8 ? a->n_tokens - t0 : 8;
      __m256 acc[8];
      for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
      for (int64_t tile = 0; tile < tiles; tile++) {
        int nblk = is32 ? tile_blocks(nb, tile) : 8;
        tile_u_c(a->type, row, tile, nblk, u);
        tile_scales_f16c(a->type, row, tile, nblk, sw, mw);
        for (int64_t tt = 0; tt < tb; tt++) {
          int64_t t = t0 + tt;
          const int8_t *xq = a->act.q + t * kp + tile * WEIR_KQ_TILE;
          const float *xd = a->act.d16 + (t * tiles + tile) * 16;
          const float *xs = a->act.s16 + (t * tiles + tile) * 16;
          __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(sw), _mm256_loadu_ps(xd));
          __m256 s1 = _mm256_mul_ps(_mm256_loadu_ps(sw + 8), _mm256_loadu_ps(xd + 8));
          _mm256_store_ps(swx, s0);
          _mm256_store_ps(swx + 8, s1);
          __m256 ac = acc[tt];
          if (!sgn) {
            ac = _mm256_fmadd_ps(_mm256_loadu_ps(mw), _mm256_loadu_ps(xs), ac);
            ac = _mm256_fmadd_ps(_mm256_loadu_ps(mw + 8), _mm256_loadu_ps(xs + 8), ac);
          }
          for (int k = 0; k < 8; k++) {
            __m256i uv = _mm256_load_si256((const __m256i *)(u + 32 * k));
            __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 32 * k));
            __m256i p;
            if (sgn) {
              __m256i w = _mm256_xor_si256(uv, x80); /* u - 128 as int8 */
              p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
            } else {
              p = _mm256_maddubs_epi16(uv, xv);
            }
            __m256i i32 = _mm256_madd_epi16(p, ones);
            __m256 ls = _mm256_set_m128(_mm_set1_ps(swx[2 * k + 1]), _mm_set1_ps(swx[2 * k]));
            ac = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), ls, ac);
          }
          acc[tt] = ac;
        }
      }
      for (int64_t tt = 0; tt < tb; tt++) {
        __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[tt]), _mm256_extractf128_ps(acc[tt], 1));
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        v = _mm_add_ss(v, _mm_movehdup_ps(v));
        a->y[(t0 + tt) * a->rows + r] = _mm_cvtss_f32(v);
      }
    }
  }
}

/* ---- AVX-512 VNNI: decode in registers ---------------------------------------------------- */

KQ_DEFINE_TILE_SCALES(tile_scales_vnni, WEIR_TARGET_VNNI WEIR_ALWAYS_INLINE, _cvtsh_ss)

/* 16-bit shift counts: `a` in the low 256 bits, `b` in the high 256 bits. */
#define KQ_SH2(a, b) _mm512_inserti64x4(_mm512_set1_epi16(a), _mm256_set1_epi16(b), 1)
/* Bytes: `a` in the low 256 bits, `b` in the high. */
#define KQ_B2(a, b) _mm512_inserti64x4(_mm512_set1_epi8((char)(a)), _mm256_set1_epi8((char)(b)), 1)

/* 32 bytes at p in both halves. */
WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE __m512i kq_bcast32(const uint8_t *p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}
/* 16 bytes at p and 16 at q as [p, p, q, q], then low nibbles in lanes 0, 2 and high nibbles
 * in lanes 1, 3: two blocks' 32 nibbles each in natural order. */
WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE __m512i kq_nib2(const uint8_t *p, const uint8_t *q,
                                                           __m512i sh0404, __m512i m0f) {
  __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
  __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
  __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  return _mm512_and_si512(_mm512_srlv_epi16(v, sh0404), m0f);
}

/* Decodes full tile `tile` of a row into u[4] (natural order); 32-block types need 8 blocks. */
WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void tile_u_vnni(weir_dtype type, const uint8_t *row,
                                                            int64_t tile, __m512i *u) {
  const __m512i m0f = _mm512_set1_epi8(0x0F), m03 = _mm512_set1_epi8(0x03);
  const size_t bb = weir_dtype_block_bytes(type);
  if (weir_dtype_block_elems(type) == 32) {
    const uint8_t *p = row + (size_t)tile * 8 * bb;
    const __m512i sh0404 = _mm512_set_epi16(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0,
                                            4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int c = 0; c < 4; c++) {
      const uint8_t *pa = p + (size_t)(2 * c) * bb, *pb = pa + bb;
      switch (type) {
      case WEIR_DTYPE_Q4_0: u[c] = kq_nib2(pa + 2, pb + 2, sh0404, m0f); break;
      case WEIR_DTYPE_Q4_1: u[c] = kq_nib2(pa + 4, pb + 4, sh0404, m0f); break;
      case WEIR_DTYPE_Q5_0:
      case WEIR_DTYPE_Q5_1: {
        size_t o = type == WEIR_DTYPE_Q5_0 ? 2 : 4;
        __m512i v = kq_nib2(pa + o + 4, pb + o + 4, sh0404, m0f);
        __mmask64 k = (__mmask64)rd32(pa + o) | ((__mmask64)rd32(pb + o) << 32);
        u[c] = _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(16));
        break;
      }
      case WEIR_DTYPE_Q8_0: {
        __m512i v = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(pa + 2))),
            _mm256_loadu_si256((const __m256i *)(pb + 2)), 1);
        u[c] = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
        break;
      }
      case WEIR_DTYPE_IQ4_NL: {
        const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(
            1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153, (char)166,
            (char)181, (char)197, (char)217, (char)241));
        u[c] = _mm512_shuffle_epi8(tbl, kq_nib2(pa + 2, pb + 2, sh0404, m0f));
        break;
      }
      default: u[c] = _mm512_setzero_si512(); break;
      }
    }
    return;
  }
  const uint8_t *p = row + (size_t)tile * bb;
  switch (type) {
  case WEIR_DTYPE_Q4_K:
  case WEIR_DTYPE_Q5_K: {
    const uint8_t *qs = p + (type == WEIR_DTYPE_Q4_K ? 16 : 48);
    const __m512i sh04 = KQ_SH2(0, 4);
    for (int c = 0; c < 4; c++)
      u[c] = _mm512_and_si512(_mm512_srlv_epi16(kq_bcast32(qs + 32 * c), sh04), m0f);
    if (type == WEIR_DTYPE_Q5_K) {
      const __m512i qh = kq_bcast32(p + 16), v16 = _mm512_set1_epi8(16);
      u[0] = _mm512_mask_add_epi8(u[0], _mm512_test_epi8_mask(qh, KQ_B2(1, 2)), u[0], v16);
      u[1] = _mm512_mask_add_epi8(u[1], _mm512_test_epi8_mask(qh, KQ_B2(4, 8)), u[1], v16);
      u[2] = _mm512_mask_add_epi8(u[2], _mm512_test_epi8_mask(qh, KQ_B2(16, 32)), u[2], v16);
      u[3] = _mm512_mask_add_epi8(u[3], _mm512_test_epi8_mask(qh, KQ_B2(64, 128)), u[3], v16);
    }
    break;
  }
  case WEIR_DTYPE_Q6_K:
    for (int n = 0; n < 2; n++) {
      __m512i v = _mm512_loadu_si512(p + 64 * n);
      __m512i qh = kq_bcast32(p + 128 + 32 * n);
      __m512i lo = _mm512_and_si512(v, m0f);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
      __m512i h0 = _mm512_and_si512(_mm512_srlv_epi16(qh, KQ_SH2(0, 2)), m03);
      __m512i h1 = _mm512_and_si512(_mm512_srlv_epi16(qh, KQ_SH2(4, 6)), m03);
      u[2 * n] = _mm512_or_si512(lo, _mm512_slli_epi16(h0, 4));
      u[2 * n + 1] = _mm512_or_si512(hi, _mm512_slli_epi16(h1, 4));
    }
    break;
  case WEIR_DTYPE_Q2_K:
  case WEIR_DTYPE_Q3_K: {
    const uint8_t *qs = p + (type == WEIR_DTYPE_Q2_K ? 16 : 32);
    for (int n = 0; n < 2; n++) {
      __m512i g = kq_bcast32(qs + 32 * n);
      u[2 * n] = _mm512_and_si512(_mm512_srlv_epi16(g, KQ_SH2(0, 2)), m03);
      u[2 * n + 1] = _mm512_and_si512(_mm512_srlv_epi16(g, KQ_SH2(4, 6)), m03);
    }
    if (type == WEIR_DTYPE_Q3_K) {
      const __m512i hm = kq_bcast32(p), v4 = _mm512_set1_epi8(4);
      u[0] = _mm512_mask_add_epi8(u[0], _mm512_test_epi8_mask(hm, KQ_B2(1, 2)), u[0], v4);
      u[1] = _mm512_mask_add_epi8(u[1], _mm512_test_epi8_mask(hm, KQ_B2(4, 8)), u[1], v4);
      u[2] = _mm512_mask_add_epi8(u[2], _mm512_test_epi8_mask(hm, KQ_B2(16, 32)), u[2], v4);
      u[3] = _mm512_mask_add_epi8(u[3], _mm512_test_epi8_mask(hm, KQ_B2(64, 128)), u[3], v4);
    }
    break;
  }
  case WEIR_DTYPE_IQ4_XS: {
    const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(
        1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153, (char)166,
        (char)181, (char)197, (char)217, (char)241));
    const __m512i sh0404 = _mm512_set_epi16(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0,
                                            4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
    const uint8_t *qs = p + 8;
    for (int c = 0; c < 4; c++)
      u[c] = _mm512_shuffle_epi8(tbl, kq_nib2(qs + 32 * c, qs + 32 * c + 16, sh0404, m0f));
    break;
  }
  default:
    for (int c = 0; c < 4; c++) u[c] = _mm512_setzero_si512();
    break;
  }
}

/* The (sw, mw) of full tile `tile` as vectors, computed in registers from the packed fields
 * (the same values as tile_scales_c: every product is the one f32 multiplication). */
WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void tile_scales_simd(weir_dtype type,
                                                                 const uint8_t *row,
                                                                 int64_t tile, __m512 *sw,
                                                                 __m512 *mw) {
  const size_t bb = weir_dtype_block_bytes(type);
  if (weir_dtype_block_elems(type) == 32) {
    const uint8_t *p = row + (size_t)tile * 8 * bb;
    _Alignas(16) uint16_t dh[8], mh[8];
    for (int b = 0; b < 8; b++) dh[b] = weir__kq_rd16(p + (size_t)b * bb);
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    __m512 d = _mm512_permutexvar_ps(
        dup, _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)dh))));
    *sw = d;
    switch (type) {
    case WEIR_DTYPE_Q4_0: *mw = _mm512_mul_ps(d, _mm512_set1_ps(-8.0f)); break;
    case WEIR_DTYPE_Q5_0: *mw = _mm512_mul_ps(d, _mm512_set1_ps(-16.0f)); break;
    case WEIR_DTYPE_Q4_1:
    case WEIR_DTYPE_Q5_1:
      for (int b = 0; b < 8; b++) mh[b] = weir__kq_rd16(p + (size_t)b * bb + 2);
      *mw = _mm512_permutexvar_ps(
          dup, _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)mh))));
      break;
    default: *mw = _mm512_mul_ps(d, _mm512_set1_ps(-128.0f)); break;
    }
    return;
  }
  const uint8_t *p = row + (size_t)tile * bb;
  switch (type) {
  case WEIR_DTYPE_Q4_K:
  case WEIR_DTYPE_Q5_K: {
    uint32_t w0 = rd32(p + 4), w1 = rd32(p + 8), w2 = rd32(p + 12);
    uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    __m128i sc = _mm_cvtsi64_si128((long long)((uint64_t)sc_lo | (uint64_t)sc_hi << 32));
    __m128i mn = _mm_cvtsi64_si128((long long)((uint64_t)m_lo | (uint64_t)m_hi << 32));
    sc = _mm_unpacklo_epi8(sc, sc);
    mn = _mm_unpacklo_epi8(mn, mn);
    *sw = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(weir__kq_rd16(p))),
                        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
    *mw = _mm512_mul_ps(_mm512_set1_ps(-_cvtsh_ss(weir__kq_rd16(p + 2))),
                        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)));
    break;
  }
  case WEIR_DTYPE_Q6_K:
    *sw = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(weir__kq_rd16(p + 208))),
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                            _mm_loadu_si128((const __m128i *)(p + 192)))));
    *mw = _mm512_mul_ps(*sw, _mm512_set1_ps(-32.0f));
    break;
  case WEIR_DTYPE_Q2_K: {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
    *sw = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(weir__kq_rd16(p + 80))),
                        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)));
    *mw = _mm512_mul_ps(_mm512_set1_ps(-_cvtsh_ss(weir__kq_rd16(p + 82))),
                        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)));
    break;
  }
  case WEIR_DTYPE_Q3_K: {
    uint32_t a0 = rd32(p + 96), a1 = rd32(p + 100), t = rd32(p + 104);
    const uint32_t k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    __m128i v = _mm_setr_epi32((int)((a0 & k4) | ((t & k2) << 4)),
                               (int)((a1 & k4) | (((t >> 2) & k2) << 4)),
                               (int)(((a0 >> 4) & k4) | (((t >> 4) & k2) << 4)),
                               (int)(((a1 >> 4) & k4) | (((t >> 6) & k2) << 4)));
    v = _mm_sub_epi8(v, _mm_set1_epi8(32));
    *sw = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(weir__kq_rd16(p + 108))),
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
    *mw = _mm512_mul_ps(*sw, _mm512_set1_ps(-4.0f));
    break;
  }
  default: {
    _Alignas(64) float a[16], b[16];
    tile_scales_vnni(type, row, tile, 8, a, b);
    *sw = _mm512_load_ps(a);
    *mw = _mm512_load_ps(b);
    break;
  }
  }
}

/* The K-types' integer path: per 16 columns an integer scale sc (d * sc = sw) in 16 int16
 * lanes, the super-block scale d and the offset term mw. Their u stay below 64, so
 * vpmaddubsw cannot saturate and vpdpwssd applies sc while it accumulates in int32 (at most
 * 256 * 127 * 63 * 127 in magnitude). */
static int kq_int_path(weir_dtype t) {
  return t == WEIR_DTYPE_Q2_K || t == WEIR_DTYPE_Q3_K || t == WEIR_DTYPE_Q4_K ||
         t == WEIR_DTYPE_Q5_K || t == WEIR_DTYPE_Q6_K;
}

WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void tile_kscales(weir_dtype type, const uint8_t *row,
                                                             int64_t tile, __m512i *sc16,
                                                             float *d, __m512 *mw) {
  const uint8_t *p = row + (size_t)tile * weir_dtype_block_bytes(type);
  __m256i s16;
  switch (type) {
  case WEIR_DTYPE_Q4_K:
  case WEIR_DTYPE_Q5_K: {
    uint32_t w0 = rd32(p + 4), w1 = rd32(p + 8), w2 = rd32(p + 12);
    uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
    __m128i sc = _mm_cvtsi64_si128((long long)((uint64_t)sc_lo | (uint64_t)sc_hi << 32));
    __m128i mn = _mm_cvtsi64_si128((long long)((uint64_t)m_lo | (uint64_t)m_hi << 32));
    s16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc, sc));
    *d = _cvtsh_ss(weir__kq_rd16(p));
    *mw = _mm512_mul_ps(_mm512_set1_ps(-_cvtsh_ss(weir__kq_rd16(p + 2))),
                        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(mn, mn))));
    break;
  }
  case WEIR_DTYPE_Q6_K:
    s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192)));
    *d = _cvtsh_ss(weir__kq_rd16(p + 208));
    *mw = _mm512_mul_ps(_mm512_set1_ps(-32.0f * *d),
                        _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(s16)));
    break;
  case WEIR_DTYPE_Q2_K: {
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    s16 = _mm256_cvtepu8_epi16(_mm_and_si128(b, _mm_set1_epi8(0x0F)));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
    *d = _cvtsh_ss(weir__kq_rd16(p + 80));
    *mw = _mm512_mul_ps(_mm512_set1_ps(-_cvtsh_ss(weir__kq_rd16(p + 82))),
                        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)));
    break;
  }
  default: { /* Q3_K */
    uint32_t a0 = rd32(p + 96), a1 = rd32(p + 100), t = rd32(p + 104);
    const uint32_t k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    __m128i v = _mm_setr_epi32((int)((a0 & k4) | ((t & k2) << 4)),
                               (int)((a1 & k4) | (((t >> 2) & k2) << 4)),
                               (int)(((a0 >> 4) & k4) | (((t >> 4) & k2) << 4)),
                               (int)(((a1 >> 4) & k4) | (((t >> 6) & k2) << 4)));
    s16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(v, _mm_set1_epi8(32)));
    *d = _cvtsh_ss(weir__kq_rd16(p + 108));
    *mw = _mm512_mul_ps(_mm512_set1_ps(-4.0f * *d),
                        _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(s16)));
    break;
  }
  }
  /* int16 lane k of chunk c holds columns 64c + 2k, 2k + 1: group 4c + k / 8 */
  const __m512i z = _mm512_castsi256_si512(s16);
  for (int c = 0; c < 4; c++) {
    const __m512i idx = _mm512_add_epi16(
        _mm512_set1_epi16((short)(4 * c)),
        _mm512_srli_epi16(_mm512_setr_epi32(0x00010000, 0x00030002, 0x00050004, 0x00070006,
                                            0x00090008, 0x000b000a, 0x000d000c, 0x000f000e,
                                            0x00110010, 0x00130012, 0x00150014, 0x00170016,
                                            0x00190018, 0x001b001a, 0x001d001c, 0x001f001e),
                          3));
    sc16[c] = _mm512_permutexvar_epi16(idx, z);
  }
}

/* NT tokens from t0 against rows [r0, r1): every tile decoded once per row and token block. */
WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void vnni_block(const weir_kq_matmul_args *a,
                                                           weir_dtype type, int64_t r0,
                                                           int64_t r1, int64_t t0, const int NT) {
  const int64_t tiles = a->act.tiles, kp = tiles * WEIR_KQ_TILE;
  const int is32 = weir_dtype_block_elems(type) == 32;
  const int64_t nb = a->cols / weir_dtype_block_elems(type);
  const int64_t full = is32 ? nb / 8 : tiles;
  __m512i idx[4];
  for (int c = 0; c < 4; c++)
    idx[c] = _mm512_add_epi32(_mm512_set1_epi32(4 * c),
                              _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  _Alignas(64) float sw[16], mw[16];
  _Alignas(64) uint8_t ub[WEIR_KQ_TILE];
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = a->w + (size_t)r * a->row_bytes;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int tt = 0; tt < NT; tt++) acc[tt] = _mm512_setzero_ps();
    if (kq_int_path(type)) {
      for (int64_t tile = 0; tile < tiles; tile++) {
        __m512i u[4], sc[4];
        float dw;
        __m512 vmw;
        tile_u_vnni(type, row, tile, u);
        tile_kscales(type, row, tile, sc, &dw, &vmw);
#pragma GCC unroll 16
        for (int tt = 0; tt < NT; tt++) {
          const int64_t t = t0 + tt;
          const int8_t *xq = a->act.q + t * kp + tile * WEIR_KQ_TILE;
          const int64_t o = (t * tiles + tile) * 16;
          __m512i ai = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int c = 0; c < 4; c++)
            ai = _mm512_dpwssd_epi32(
                ai, _mm512_maddubs_epi16(u[c], _mm512_loadu_si512(xq + 64 * c)), sc[c]);
          __m512 ac = _mm512_fmadd_ps(vmw, _mm512_loadu_ps(a->act.s16 + o), acc[tt]);
          acc[tt] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai),
                                    _mm512_set1_ps(dw * a->act.d16[o]), ac);
        }
      }
#pragma GCC unroll 16
      for (int tt = 0; tt < NT; tt++)
        a->y[(t0 + tt) * a->rows + r] = _mm512_reduce_add_ps(acc[tt]);
      continue;
    }
    for (int64_t tile = 0; tile < tiles; tile++) {
      __m512i u[4];
      __m512 vsw, vmw;
      if (tile < full) {
        tile_u_vnni(type, row, tile, u);
        tile_scales_simd(type, row, tile, &vsw, &vmw);
      } else {
        int nblk = is32 ? tile_blocks(nb, tile) : 8;
        tile_u_c(type, row, tile, nblk, ub);
        tile_scales_vnni(type, row, tile, nblk, sw, mw);
        for (int c = 0; c < 4; c++) u[c] = _mm512_load_si512(ub + 64 * c);
        vsw = _mm512_load_ps(sw);
        vmw = _mm512_load_ps(mw);
      }
#pragma GCC unroll 8
      for (int tt = 0; tt < NT; tt++) {
        const int64_t t = t0 + tt;
        const int8_t *xq = a->act.q + t * kp + tile * WEIR_KQ_TILE;
        const int64_t o = (t * tiles + tile) * 16;
        __m512 swx = _mm512_mul_ps(vsw, _mm512_loadu_ps(a->act.d16 + o));
        __m512 ac = _mm512_fmadd_ps(vmw, _mm512_loadu_ps(a->act.s16 + o), acc[tt]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
          __m512i i32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[c],
                                            _mm512_loadu_si512(xq + 64 * c));
          ac = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i32), _mm512_permutexvar_ps(idx[c], swx), ac);
        }
        acc[tt] = ac;
      }
    }
#pragma GCC unroll 8
    for (int tt = 0; tt < NT; tt++) a->y[(t0 + tt) * a->rows + r] = _mm512_reduce_add_ps(acc[tt]);
  }
}

WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void vnni_rows_type(const weir_kq_matmul_args *a,
                                                               weir_dtype type, int64_t r0,
                                                               int64_t r1) {
  const int64_t T = a->n_tokens;
  if (T == 1) {
    vnni_block(a, type, r0, r1, 0, 1);
    return;
  }
  /* Row blocks of about 96 KiB of weights stay in L2 while every token block passes. */
  int64_t rb = (int64_t)(96 * 1024 / (a->row_bytes ? a->row_bytes : 1));
  if (rb < 4) rb = 4;
  for (int64_t rs = r0; rs < r1; rs += rb) {
    int64_t re = rs + rb < r1 ? rs + rb : r1;
    int64_t t = 0;
    /* The K-types' tile decode (unpacking, scale permutes) is a third of the work at 8 tokens
     * per decode; 16 tokens (16 accumulators, 8 decoded registers) halve that share. The
     * 32-block path keeps 8: its per-token work dominates and more accumulators spill. */
    if (kq_int_path(type))
      for (; t + 16 <= T; t += 16) vnni_block(a, type, rs, re, t, 16);
    for (; t + 8 <= T; t += 8) vnni_block(a, type, rs, re, t, 8);
    if (t + 4 <= T) {
      vnni_block(a, type, rs, re, t, 4);
      t += 4;
    }
    if (t + 2 <= T) {
      vnni_block(a, type, rs, re, t, 2);
      t += 2;
    }
    if (t < T) vnni_block(a, type, rs, re, t, 1);
  }
}

/* WEIR_KQ_X16: NT tokens from t0 against rows [r0, r1). Per group and token: 8 (Q6_K 4)
 * vpdpbusd, one conversion, one scaling, and but for Q8_0 one FMA of the mins. */
WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void x16_block(const weir_kq_matmul_args *a,
                                                          weir_dtype type, int64_t r0,
                                                          int64_t r1, int64_t t0, const int NT) {
  const int gc = weir__kq_x16_cols(type), nch = gc / 64;
  const int64_t tiles = a->act.tiles, kp = tiles * WEIR_KQ_TILE, groups = a->cols / gc;
  const size_t gb = weir__kq_x16_bytes(type);
  const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = a->w + (size_t)r * a->row_bytes;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int tt = 0; tt < NT; tt++) acc[tt] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
      const uint8_t *p = row + g * gb;
      __m512 sw, mw = _mm512_setzero_ps();
      __m512i w[8];
      if (type == WEIR_DTYPE_Q8_0) {
        sw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) w[c] = _mm512_loadu_si512(p + 32 + 64 * c);
      } else if (type == WEIR_DTYPE_Q6_K) {
        sw = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(weir__kq_rd16(p + 16))),
                           _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                               _mm_loadu_si128((const __m128i *)p))));
        mw = _mm512_mul_ps(sw, _mm512_set1_ps(-32.0f));
        const __m512i v0 = _mm512_loadu_si512(p + 18), v1 = _mm512_loadu_si512(p + 82);
        const __m512i hb = _mm512_loadu_si512(p + 146);
        w[0] = _mm512_or_si512(_mm512_and_si512(v0, m0f),
                               _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
        w[1] = _mm512_or_si512(_mm512_and_si512(v1, m0f),
                               _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
        w[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v0, 4), m0f),
                               _mm512_and_si512(hb, m30));
        w[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v1, 4), m0f),
                               _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
      } else {
        /* Q4_K, Q5_K: both heads' 8 scales and mins as bytes (k4_scale_min, 4 at a time) */
        uint64_t scb[2], mnb[2];
        float dd[2], dm[2];
        for (int sb = 0; sb < 2; sb++) {
          const uint8_t *h = p + 16 * sb;
          uint32_t w0 = rd32(h + 4), w1 = rd32(h + 8), w2 = rd32(h + 12);
          uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
          uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
          scb[sb] = (uint64_t)(w0 & 0x3f3f3f3fu) | (uint64_t)sc_hi << 32;
          mnb[sb] = (uint64_t)(w1 & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
          dd[sb] = _cvtsh_ss(weir__kq_rd16(h));
          dm[sb] = -_cvtsh_ss(weir__kq_rd16(h + 2));
        }
        const __mmask16 hi8 = 0xFF00;
        __m512 vd = _mm512_mask_blend_ps(hi8, _mm512_set1_ps(dd[0]), _mm512_set1_ps(dd[1]));
        __m512 vm = _mm512_mask_blend_ps(hi8, _mm512_set1_ps(dm[0]), _mm512_set1_ps(dm[1]));
        sw = _mm512_mul_ps(vd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                   _mm_set_epi64x((long long)scb[1], (long long)scb[0]))));
        mw = _mm512_mul_ps(vm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                   _mm_set_epi64x((long long)mnb[1], (long long)mnb[0]))));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
          __m512i v = _mm512_loadu_si512(p + 32 + 64 * c);
          w[c] = _mm512_and_si512(v, m0f);
          w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
        }
        if (type == WEIR_DTYPE_Q5_K) {
          const __m512i v16 = _mm512_set1_epi8(16);
#pragma GCC unroll 8
          for (int c = 0; c < 8; c++) {
            uint64_t mb;
            memcpy(&mb, p + 288 + 8 * c, 8);
            w[c] = _mm512_mask_add_epi8(w[c], _cvtu64_mask64(mb), w[c], v16);
          }
        }
      }
#pragma GCC unroll 16
      for (int tt = 0; tt < NT; tt++) {
        const int64_t t = t0 + tt, o = (t * tiles + g * (gc / WEIR_KQ_TILE)) * 16;
        const int8_t *xq = a->act.q + t * kp + gc * g;
        /* two chains: a lone token would otherwise wait on dependent vpdpbusd */
        __m512i i0 = type == WEIR_DTYPE_Q8_0 ? _mm512_loadu_si512(a->act.s16 + o)
                                             : _mm512_setzero_si512();
        __m512i i1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < nch; c += 2) {
          i0 = _mm512_dpbusd_epi32(i0, w[c], _mm512_loadu_si512(xq + 64 * c));
          i1 = _mm512_dpbusd_epi32(i1, w[c + 1], _mm512_loadu_si512(xq + 64 * c + 64));
        }
        __m512 ac = acc[tt];
        if (type != WEIR_DTYPE_Q8_0) ac = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a->act.s16 + o), ac);
        acc[tt] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)),
                                  _mm512_mul_ps(sw, _mm512_loadu_ps(a->act.d16 + o)), ac);
      }
    }
#pragma GCC unroll 16
    for (int tt = 0; tt < NT; tt++) a->y[(t0 + tt) * a->rows + r] = _mm512_reduce_add_ps(acc[tt]);
  }
}

WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void x16_rows_type(const weir_kq_matmul_args *a,
                                                              weir_dtype type, int64_t r0,
                                                              int64_t r1) {
  const int64_t T = a->n_tokens;
  if (T == 1) {
    x16_block(a, type, r0, r1, 0, 1);
    return;
  }
  int64_t rb = (int64_t)(96 * 1024 / (a->row_bytes ? a->row_bytes : 1));
  if (rb < 4) rb = 4;
  for (int64_t rs = r0; rs < r1; rs += rb) {
    int64_t re = rs + rb < r1 ? rs + rb : r1;
    int64_t t = 0;
    for (; t + 16 <= T; t += 16) x16_block(a, type, rs, re, t, 16);
    if (t + 8 <= T) {
      x16_block(a, type, rs, re, t, 8);
      t += 8;
    }
    if (t + 4 <= T) {
      x16_block(a, type, rs, re, t, 4);
      t += 4;
    }
    if (t + 2 <= T) {
      x16_block(a, type, rs, re, t, 2);
      t += 2;
    }
    if (t < T) x16_block(a, type, rs, re, t, 1);
  }
}

WEIR_TARGET_VNNI static void x16_q8_0(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  x16_rows_type(a, WEIR_DTYPE_Q8_0, r0, r1);
}
WEIR_TARGET_VNNI static void x16_q4_k(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  x16_rows_type(a, WEIR_DTYPE_Q4_K, r0, r1);
}
WEIR_TARGET_VNNI static void x16_q5_k(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  x16_rows_type(a, WEIR_DTYPE_Q5_K, r0, r1);
}
WEIR_TARGET_VNNI static void x16_q6_k(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  x16_rows_type(a, WEIR_DTYPE_Q6_K, r0, r1);
}

#define KQ_VNNI_FN(T, NAME)                                                                  \
  WEIR_TARGET_VNNI static void NAME(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) { \
    vnni_rows_type(a, T, r0, r1);                                                            \
  }
KQ_VNNI_FN(WEIR_DTYPE_Q4_0, vnni_q4_0)
KQ_VNNI_FN(WEIR_DTYPE_Q4_1, vnni_q4_1)
KQ_VNNI_FN(WEIR_DTYPE_Q5_0, vnni_q5_0)
KQ_VNNI_FN(WEIR_DTYPE_Q5_1, vnni_q5_1)
KQ_VNNI_FN(WEIR_DTYPE_Q8_0, vnni_q8_0)
KQ_VNNI_FN(WEIR_DTYPE_IQ4_NL, vnni_iq4_nl)
KQ_VNNI_FN(WEIR_DTYPE_Q2_K, vnni_q2_k)
KQ_VNNI_FN(WEIR_DTYPE_Q3_K, vnni_q3_k)
KQ_VNNI_FN(WEIR_DTYPE_Q4_K, vnni_q4_k)
KQ_VNNI_FN(WEIR_DTYPE_Q5_K, vnni_q5_k)
KQ_VNNI_FN(WEIR_DTYPE_Q6_K, vnni_q6_k)
KQ_VNNI_FN(WEIR_DTYPE_IQ4_XS, vnni_iq4_xs)

static void rows_vnni(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  switch (a->type) {
  case WEIR_DTYPE_Q4_0: vnni_q4_0(a, r0, r1); break;
  case WEIR_DTYPE_Q4_1: vnni_q4_1(a, r0, r1); break;
  case WEIR_DTYPE_Q5_0: vnni_q5_0(a, r0, r1); break;
  case WEIR_DTYPE_Q5_1: vnni_q5_1(a, r0, r1); break;
  case WEIR_DTYPE_Q8_0: vnni_q8_0(a, r0, r1); break;
  case WEIR_DTYPE_IQ4_NL: vnni_iq4_nl(a, r0, r1); break;
  case WEIR_DTYPE_Q2_K: vnni_q2_k(a, r0, r1); break;
  case WEIR_DTYPE_Q3_K: vnni_q3_k(a, r0, r1); break;
  case WEIR_DTYPE_Q4_K: vnni_q4_k(a, r0, r1); break;
  case WEIR_DTYPE_Q5_K: vnni_q5_k(a, r0, r1); break;
  case WEIR_DTYPE_Q6_K: vnni_q6_k(a, r0, r1); break;
  case WEIR_DTYPE_IQ4_XS: vnni_iq4_xs(a, r0, r1); break;
  default: break;
  }
}

static int has_vnni(void) {
  static int v = -1;
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
  }
  return v;
}
#endif

typedef enum kq_path { KQ_SCALAR, KQ_AVX2, KQ_VNNI } kq_path;

static kq_path kq_current(void) {
#if WEIR_X86
  weir_cpu_isa_level l = weir_cpu_isa();
  if (l >= WEIR_CPU_ISA_AVX512 && has_vnni()) return KQ_VNNI;
  if (l >= WEIR_CPU_ISA_AVX2) return KQ_AVX2;
#endif
  return KQ_SCALAR;
}

const char *weir_kq_isa_name(void) {
  switch (kq_current()) {
  case KQ_VNNI: return "avx512vnni";
  case KQ_AVX2: return "avx2";
  default: return "scalar";
  }
}

int weir_kq_x16_preferred(void) { return kq_current() == KQ_VNNI; }

/* -1 until first use, then 0/1. Relaxed atomics: every thread computes the same default. */
static _Atomic int g_amx = -1;

static int amx_on(void) {
  int v = atomic_load_explicit(&g_amx, memory_order_relaxed);
  if (v < 0) {
    const char *env = getenv("WEIR_CPU_ISA");
    v = weir_kq_amx_available() && !(env && *env && strcmp(env, "amx") != 0);
    atomic_store_explicit(&g_amx, v, memory_order_relaxed);
  }
  return v;
}

int weir_kq_amx_enabled(void) { return kq_current() == KQ_VNNI && amx_on(); }

int weir_kq_amx_set(int on) {
  if (on && !weir_kq_amx_available()) return -1;
  atomic_store_explicit(&g_amx, on ? 1 : 0, memory_order_relaxed);
  return 0;
}

void weir_kq_matmul_rows(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  if (!weir_kq_supported(a->type) || r0 >= r1 || a->n_tokens <= 0) return;
  if (a->layout == WEIR_KQ_X16) {
    if (!weir_kq_x16_fits(a->type, a->cols)) return;
#if WEIR_X86
    if (kq_current() == KQ_VNNI) {
      if (a->n_tokens >= WEIR_KQ_AMX_MIN_TOKENS && amx_on() && weir_kq_amx_rows(a, r0, r1) == 0)
        return;
      switch (a->type) {
      case WEIR_DTYPE_Q8_0: x16_q8_0(a, r0, r1); break;
      case WEIR_DTYPE_Q4_K: x16_q4_k(a, r0, r1); break;
      case WEIR_DTYPE_Q5_K: x16_q5_k(a, r0, r1); break;
      default: x16_q6_k(a, r0, r1); break;
      }
      return;
    }
#endif
    x16_rows_c(a, r0, r1);
    return;
  }
  switch (kq_current()) {
#if WEIR_X86
  case KQ_VNNI: rows_vnni(a, r0, r1); return;
  case KQ_AVX2: rows_avx2(a, r0, r1); return;
#endif
  default: rows_c(a, r0, r1); return;
  }
}

void weir_kq_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  weir_kq_matmul_rows(arg, begin, end);
}
