/* int4 x int8 linear layers (see matmul_q4.h). */
#include "matmul_q4.h"

#include <stdatomic.h>

#include <math.h>
#include <string.h>

#include "convert.h"
#include "cpu_isa.h"

#if WEIR_X86
#include <cpuid.h>
#include <immintrin.h>
#endif

int weir_q4_layout_init(weir_q4_layout *l, int64_t rows, int64_t cols, int64_t group, int sym) {
  memset(l, 0, sizeof *l);
  if (rows <= 0 || cols <= 0 || (group != 32 && group != 64 && group != 128)) return -1;
  if (cols > ((int64_t)1 << 40) / rows) return -1;
  l->rows = rows;
  l->cols = cols;
  l->kp = (cols + WEIR_Q4_CHUNK - 1) / WEIR_Q4_CHUNK * WEIR_Q4_CHUNK;
  l->group = group;
  l->ng = l->kp / group;
  l->ngp = (l->ng + 15) / 16 * 16;
  l->nq = (rows + 3) / 4;
  l->sym = sym ? 1 : 0;
  l->nib_bytes = (size_t)l->kp * 2;
  size_t qb = l->nib_bytes + (size_t)(4 * l->ngp * 2) * (sym ? 1 : 2);
  l->quad_bytes = (qb + 63) & ~(size_t)63;
  l->bytes = (size_t)l->nq * l->quad_bytes + WEIR_Q4_TAIL_PAD;
  return 0;
}

/* ---- quantization of one group ----------------------------------------------------------- */

static int quantize_group(const float *x, int64_t n, int clip, float lo, float hi, uint8_t *q,
                          uint16_t *d, uint16_t *m) {
  float mn = INFINITY, mx = -INFINITY;
  int finite = 1;
  for (int64_t k = 0; k < n; k++) {
    float v = x[k];
    if (!(fabsf(v) <= 3.4e38f)) finite = 0;
    if (clip) v = v < lo ? lo : v > hi ? hi : v;
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  if (n <= 0) mn = mx = 0.0f;
  uint16_t mh = weir_f32_to_f16(mn);
  float mf = weir_f16_to_f32(mh);
  uint16_t dh = weir_f32_to_f16((mx - mf) / 15.0f);
  float df = weir_f16_to_f32(dh);
  if (!finite || !(fabsf(mf) <= 65504.0f) || !(df <= 65504.0f)) {
    memset(q, 0, (size_t)(n > 0 ? n : 0));
    *d = 0x7e00; /* f16 NaN: results show it instead of hiding it */
    *m = 0x7e00;
    return -1;
  }
  if (df < 0.0f) { /* mx < mf after rounding m up: a constant group */
    dh = 0;
    df = 0.0f;
  }
  float inv = df > 0.0f ? 1.0f / df : 0.0f;
  for (int64_t k = 0; k < n; k++) {
    float v = x[k];
    if (clip) v = v < lo ? lo : v > hi ? hi : v;
    /* Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (ties to even) without
     * a libm call; |(v - mf) * inv| stays far below 2^22 here. */
    float r = ((v - mf) * inv + 12582912.0f) - 12582912.0f;
    r = r < 0.0f ? 0.0f : r > 15.0f ? 15.0f : r;
    q[k] = (uint8_t)r;
  }
  *d = dh;
  *m = mh;
  return 0;
}

int weir_q4_quantize_group(const float *x, int64_t n, uint8_t *q, uint16_t *d, uint16_t *m) {
  return quantize_group(x, n, 0, 0.0f, 0.0f, q, d, m);
}

int weir_q4_quantize_group_clip(const float *x, int64_t n, float lo, float hi, uint8_t *q,
                                uint16_t *d, uint16_t *m) {
  return quantize_group(x, n, 1, lo, hi, q, d, m);
}

/* ---- layout ------------------------------------------------------------------------------ */


static inline uint16_t *d_ptr(const weir_q4_layout *l, uint8_t *quad, int i) {
  return (uint16_t *)(void *)(quad + l->nib_bytes) + (int64_t)i * l->ngp;
}
static inline uint16_t *m_ptr(const weir_q4_layout *l, uint8_t *quad, int i) {
  return (uint16_t *)(void *)(quad + l->nib_bytes) + 4 * l->ngp + (int64_t)i * l->ngp;
}

/* Stored positions 64 m + 8 blk + e (e < 8) of a chunk hold natural columns 32 blk + 8 m + e:
 * eight consecutive columns land in eight consecutive bytes of one nibble half, byte
 * 8 blk + 64 (m / 2) + e, the low nibble for even m, the high one for odd m (matmul_q4.h:
 * stored position p sits in byte (p mod 64) + 64 (p / 128), nibble (p / 64) mod 2). */
void weir_q4_store_row(const weir_q4_layout *l, uint8_t *w, int64_t r, const uint8_t *q,
                       const uint16_t *d, const uint16_t *m) {
  uint8_t *quad = w + (size_t)(r / 4) * l->quad_bytes;
  const int i = (int)(r % 4);
  uint8_t nat[WEIR_Q4_CHUNK];
  for (int64_t c = 0; c < l->kp / WEIR_Q4_CHUNK; c++) {
    uint8_t *rb = quad + c * 512 + i * 128;
    const int64_t k0 = c * WEIR_Q4_CHUNK;
    const int64_t n = l->cols - k0 < WEIR_Q4_CHUNK ? l->cols - k0 : WEIR_Q4_CHUNK;
    memcpy(nat, q + k0, (size_t)n);
    memset(nat + n, 0, (size_t)(WEIR_Q4_CHUNK - n));
    for (int blk = 0; blk < 8; blk++)
      for (int h = 0; h < 2; h++) {
        const uint8_t *lo = nat + 32 * blk + 16 * h, *hi = lo + 8; /* m = 2h and 2h + 1 */
        uint8_t *dst = rb + 8 * blk + 64 * h;
        for (int e = 0; e < 8; e++) dst[e] = (uint8_t)((lo[e] & 15) | (hi[e] & 15) << 4);
      }
  }
  int64_t real = (l->cols + l->group - 1) / l->group; /* groups holding real columns */
  uint16_t *dd = d_ptr(l, quad, i);
  for (int64_t g = 0; g < l->ngp; g++) dd[g] = g < real ? d[g] : 0;
  if (!l->sym) {
    uint16_t *mm = m_ptr(l, quad, i);
    for (int64_t g = 0; g < l->ngp; g++) mm[g] = g < real ? m[g] : 0;
  }
}

/* The inverse of store_row's nibble placement for one chunk: natural q[0..256). */
static void chunk_nibbles(const uint8_t *rb, uint8_t *nat) {
  for (int blk = 0; blk < 8; blk++)
    for (int h = 0; h < 2; h++) {
      const uint8_t *src = rb + 8 * blk + 64 * h;
      uint8_t *lo = nat + 32 * blk + 16 * h, *hi = lo + 8;
      for (int e = 0; e < 8; e++) {
        lo[e] = src[e] & 15;
        hi[e] = src[e] >> 4;
      }
    }
}

void weir_q4_load_row(const weir_q4_layout *l, const uint8_t *w, int64_t r, uint8_t *q,
                      uint16_t *d, uint16_t *m) {
  uint8_t *quad = (uint8_t *)w + (size_t)(r / 4) * l->quad_bytes;
  const int i = (int)(r % 4);
  uint8_t nat[WEIR_Q4_CHUNK];
  for (int64_t c = 0; c < l->kp / WEIR_Q4_CHUNK; c++) {
    chunk_nibbles(quad + c * 512 + i * 128, nat);
    const int64_t k0 = c * WEIR_Q4_CHUNK;
    memcpy(q + k0, nat, (size_t)(l->cols - k0 < WEIR_Q4_CHUNK ? l->cols - k0 : WEIR_Q4_CHUNK));
  }
  memcpy(d, d_ptr(l, quad, i), sizeof(uint16_t) * (size_t)l->ng);
  if (l->sym) {
    for (int64_t g = 0; g < l->ng; g++) m[g] = weir_f32_to_f16(-8.0f * weir_f16_to_f32(d[g]));
  } else {
    memcpy(m, m_ptr(l, quad, i), sizeof(uint16_t) * (size_t)l->ng);
  }
}

void weir_q4_dequant_row(const weir_q4_layout *l, const uint8_t *w, int64_t r, float *out) {
  uint8_t *quad = (uint8_t *)w + (size_t)(r / 4) * l->quad_bytes;
  const int i = (int)(r % 4);
  const uint16_t *dd = d_ptr(l, quad, i), *mm = m_ptr(l, quad, i);
  uint8_t nat[WEIR_Q4_CHUNK];
  for (int64_t c = 0; c < l->kp / WEIR_Q4_CHUNK; c++) {
    chunk_nibbles(quad + c * 512 + i * 128, nat);
    const int64_t k0 = c * WEIR_Q4_CHUNK;
    const int64_t n = l->cols - k0 < WEIR_Q4_CHUNK ? l->cols - k0 : WEIR_Q4_CHUNK;
    for (int64_t k = 0; k < n; k++) {
      const int64_t g = (k0 + k) / l->group;
      const float dv = weir_f16_to_f32(dd[g]);
      /* d * q + m in double is exact (11 + 4 bit products, sums of two such terms within 53
       * bits), so the f32 result is the exact value rounded once. */
      out[k0 + k] = l->sym ? (float)((double)dv * (nat[k] - 8))
                           : (float)((double)dv * nat[k] + (double)weir_f16_to_f32(mm[g]));
    }
  }
}

/* ---- activations ------------------------------------------------------------------------- */

size_t weir_q4_act_bytes(int64_t kp, int64_t group) {
  const int64_t ngp = (kp / group + 15) / 16 * 16;
  return (size_t)kp +
         sizeof(float) * (size_t)(kp / 32 + (kp / WEIR_Q4_CHUNK) * WEIR_Q4_LANES + ngp);
}

void weir_q4_act_prep(const float *x, const float *inv_scale, int64_t cols, int64_t kp,
                      int64_t group, int8_t *xq, float *xd, float *xdp, float *xsg,
                      float *tmp) {
  const float *src = x;
  if (inv_scale) {
    for (int64_t k = 0; k < cols; k++) tmp[k] = x[k] * inv_scale[k];
    src = tmp;
  }
  weir_q8_quantize_act(src, cols, kp, xq, xd);
  const int64_t ngp = (kp / group + 15) / 16 * 16, bpg = group / 32;
  for (int64_t g = 0; g < ngp; g++) xsg[g] = 0.0f;
  for (int64_t c = 0; c < kp / WEIR_Q4_CHUNK; c++) {
    const int8_t *xc = xq + c * WEIR_Q4_CHUNK;
    int32_t s[8] = {0}; /* per 32-column block of the chunk */
    for (int p = 0; p < WEIR_Q4_CHUNK; p++) s[((p >> 2) & 15) >> 1] += xc[p];
    for (int l = 0; l < WEIR_Q4_LANES; l++) xdp[c * WEIR_Q4_LANES + l] = xd[c * 8 + l / 2];
    for (int b = 0; b < 8; b++) xsg[(c * 8 + b) / bpg] += xd[c * 8 + b] * (float)s[b];
  }
}

/* ---- scalar -------------------------------------------------------------------------------- */

static void quads_scalar(const weir_q4_matmul_args *a, int64_t q0, int64_t q1) {
  const weir_q4_layout *l = a->l;
  const int64_t kp = l->kp, nch = kp / WEIR_Q4_CHUNK;
  for (int64_t qd = q0; qd < q1; qd++) {
    uint8_t *quad = (uint8_t *)a->w + (size_t)qd * l->quad_bytes;
    for (int i = 0; i < 4 && qd * 4 + i < l->rows; i++) {
      const uint16_t *dd = d_ptr(l, quad, i), *mm = m_ptr(l, quad, i);
      for (int64_t t = 0; t < a->n_tokens; t++) {
        const int8_t *x = a->xq + t * kp;
        const float *xdp = a->xdp + t * nch * WEIR_Q4_LANES, *xsg = a->xsg + t * l->ngp;
        float acc = 0.0f;
        for (int64_t c = 0; c < nch; c++) {
          const uint8_t *nb = quad + c * 512 + i * 128;
          const int8_t *xc = x + c * WEIR_Q4_CHUNK;
          int32_t is[WEIR_Q4_LANES] = {0};
          for (int j = 0; j < 64; j++) {
            int lane = (j >> 2) & 15;
            is[lane] += (nb[j] & 15) * xc[j] + (nb[j] >> 4) * xc[64 + j] +
                        (nb[64 + j] & 15) * xc[128 + j] + (nb[64 + j] >> 4) * xc[192 + j];
          }
          for (int ln = 0; ln < WEIR_Q4_LANES; ln++) {
            int64_t g = (c * WEIR_Q4_CHUNK + (ln / 2) * 32) / l->group;
            acc += (float)is[ln] * (weir_f16_to_f32(dd[g]) * xdp[c * WEIR_Q4_LANES + ln]);
          }
        }
        /* the offsets: sum over groups of m times the group's activation sum */
        for (int64_t g = 0; g < l->ng; g++)
          acc += (l->sym ? -8.0f * weir_f16_to_f32(dd[g]) : weir_f16_to_f32(mm[g])) * xsg[g];
        a->y[t * l->rows + qd * 4 + i] = acc;
      }
    }
  }
}

/* log2(group / 32): a lane's group within a chunk is (lane / 2) >> shift. */
static inline int group_shift(const weir_q4_layout *l) {
  return l->group == 32 ? 0 : l->group == 64 ? 1 : 2;
}

static inline int64_t token_block(int64_t kp, int64_t nt) {
  int64_t tb = WEIR_Q8_ACT_BLOCK_BYTES / kp;
  tb = tb / nt * nt;
  return tb < nt ? nt : tb;
}

#if WEIR_X86
/* Software prefetch of the nibbles, a quad being one linear stream: far ahead into L2, so
 * enough misses are in flight for one core to approach its DRAM bandwidth, and near ahead
 * into L1, so the loads find their lines there. One level alone is slower on the development
 * machine (AMD EPYC, Zen 4), 1-thread decode of the 1.1B shape: 31 tok/s at 2 KiB into L1,
 * 35 at 16 KiB into L1, 32 at 16 KiB into L2; 40 with 32 KiB into L2 and 4 KiB into L1
 * (docs/perf/quant.md). */
#define PF_FAR 32768
#define PF_NEAR 4096

/* The scales at the end of the next quad: the forward prefetch reaches them only after most of
 * that quad's nibbles, so without this every quad would start on demand misses. */
static inline void prefetch_next_tail(const weir_q4_layout *l, const uint8_t *quad) {
  const uint8_t *tail = quad + l->quad_bytes + l->nib_bytes;
  for (size_t off = 0; off < l->quad_bytes - l->nib_bytes; off += 64)
    _mm_prefetch((const char *)(tail + off), _MM_HINT_T0);
}

/* ---- AVX2 ----------------------------------------------------------------------------------
 * Per chunk and row, the 16 lanes are two halves (blocks 0-3 and 4-7). Four vpmaddubsw
 * results of one half add up in int16 without overflow (4 * 2 * 15 * 127 = 15240), so one
 * vpmaddwd per half and chunk turns them into int32 lane sums. The offsets m meet the
 * per-group activation sums once per row, after the chunks. */

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

WEIR_TARGET_AVX2 static void tile_avx2(const weir_q4_matmul_args *a, int64_t qd, int64_t t,
                                       int pf) {
  const weir_q4_layout *l = a->l;
  const int64_t kp = l->kp, nch = kp / WEIR_Q4_CHUNK, ngc = WEIR_Q4_CHUNK / l->group;
  const int gs = group_shift(l);
  const uint8_t *quad = a->w + (size_t)qd * l->quad_bytes;
  const uint16_t *dbase = (const uint16_t *)(const void *)(quad + l->nib_bytes);
  const uint16_t *mbase = dbase + 4 * l->ngp;
  const int8_t *x = a->xq + t * kp;
  const float *xdp = a->xdp + t * nch * WEIR_Q4_LANES, *xsg = a->xsg + t * l->ngp;
  const __m256i mask = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i lane8 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  const __m256i glo = _mm256_srlv_epi32(lane8, _mm256_set1_epi32(gs));
  const __m256i ghi = _mm256_srlv_epi32(_mm256_add_epi32(lane8, _mm256_set1_epi32(4)),
                                        _mm256_set1_epi32(gs));
  __m256 acc[4];
  for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
  if (pf) prefetch_next_tail(l, quad);
  for (int64_t c = 0; c < nch; c++) {
    const int8_t *xc = x + c * WEIR_Q4_CHUNK;
    const __m256i x0 = _mm256_loadu_si256((const __m256i *)xc);
    const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xc + 32));
    const __m256i x2 = _mm256_loadu_si256((const __m256i *)(xc + 64));
    const __m256i x3 = _mm256_loadu_si256((const __m256i *)(xc + 96));
    const __m256i x4 = _mm256_loadu_si256((const __m256i *)(xc + 128));
    const __m256i x5 = _mm256_loadu_si256((const __m256i *)(xc + 160));
    const __m256i x6 = _mm256_loadu_si256((const __m256i *)(xc + 192));
    const __m256i x7 = _mm256_loadu_si256((const __m256i *)(xc + 224));
    const __m256 xdlo = _mm256_loadu_ps(xdp + c * 16), xdhi = _mm256_loadu_ps(xdp + c * 16 + 8);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      const uint8_t *nb = quad + c * 512 + i * 128;
      if (pf) {
        _mm_prefetch((const char *)(nb + PF_FAR), _MM_HINT_T1);
        _mm_prefetch((const char *)(nb + PF_FAR + 64), _MM_HINT_T1);
        _mm_prefetch((const char *)(nb + PF_NEAR), _MM_HINT_T0);
        _mm_prefetch((const char *)(nb + PF_NEAR + 64), _MM_HINT_T0);
      }
      const __m256i v0 = _mm256_loadu_si256((const __m256i *)nb);
      const __m256i v1 = _mm256_loadu_si256((const __m256i *)(nb + 32));
      const __m256i v2 = _mm256_loadu_si256((const __m256i *)(nb + 64));
      const __m256i v3 = _mm256_loadu_si256((const __m256i *)(nb + 96));
      __m256i plo = _mm256_maddubs_epi16(_mm256_and_si256(v0, mask), x0);
      plo = _mm256_add_epi16(plo, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), mask), x2));
      plo = _mm256_add_epi16(plo, _mm256_maddubs_epi16(_mm256_and_si256(v2, mask), x4));
      plo = _mm256_add_epi16(plo, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v2, 4), mask), x6));
      __m256i phi = _mm256_maddubs_epi16(_mm256_and_si256(v1, mask), x1);
      phi = _mm256_add_epi16(phi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), mask), x3));
      phi = _mm256_add_epi16(phi, _mm256_maddubs_epi16(_mm256_and_si256(v3, mask), x5));
      phi = _mm256_add_epi16(phi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v3, 4), mask), x7));
      const __m256 ilo = _mm256_cvtepi32_ps(_mm256_madd_epi16(plo, ones));
      const __m256 ihi = _mm256_cvtepi32_ps(_mm256_madd_epi16(phi, ones));
      const __m256 d8 = _mm256_cvtph_ps(
          _mm_loadu_si128((const __m128i *)(const void *)(dbase + i * l->ngp + c * ngc)));
      const __m256 dlo = _mm256_permutevar8x32_ps(d8, glo), dhi = _mm256_permutevar8x32_ps(d8, ghi);
      acc[i] = _mm256_fmadd_ps(ilo, _mm256_mul_ps(dlo, xdlo), acc[i]);
      acc[i] = _mm256_fmadd_ps(ihi, _mm256_mul_ps(dhi, xdhi), acc[i]);
    }
  }
  const __m256 neg8 = _mm256_set1_ps(-8.0f);
  for (int i = 0; i < 4; i++) {
    const uint16_t *mm = l->sym ? dbase + i * l->ngp : mbase + i * l->ngp;
    for (int64_t g = 0; g < l->ngp; g += 8) {
      __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(mm + g)));
      if (l->sym) mv = _mm256_mul_ps(mv, neg8);
      acc[i] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(xsg + g), acc[i]);
    }
    if (qd * 4 + i < l->rows) a->y[t * l->rows + qd * 4 + i] = hsum8(acc[i]);
  }
}

/* ---- AVX-512 --------------------------------------------------------------------------------
 * A chunk row is two 64-byte loads; each gives the low nibbles (one 64-byte activation step)
 * and the high nibbles (the next step). VNNI: one vpdpbusd per step, row and token. Without
 * it, vpmaddubsw results of the four steps add up in int16 (at most 15240) before one
 * vpmaddwd. Per chunk the 16 int32 lanes are converted once and meet the pair-spread scales
 * in one FMA; the offsets meet the per-group activation sums once per row. */

#define NT_AVX512 2

#define TILE512_BODY(VNNI)                                                                     \
  const weir_q4_layout *l = a->l;                                                              \
  const int64_t kp = l->kp, nch = kp / WEIR_Q4_CHUNK, ngc = WEIR_Q4_CHUNK / l->group;          \
  const int64_t xs_stride = nch * WEIR_Q4_LANES;                                               \
  const int gs = group_shift(l);                                                               \
  const uint8_t *quad = a->w + (size_t)qd * l->quad_bytes;                                     \
  const uint16_t *dbase = (const uint16_t *)(const void *)(quad + l->nib_bytes);               \
  const uint16_t *mbase = dbase + 4 * l->ngp;                                                  \
  const __m512i mask = _mm512_set1_epi8(0x0f);                                                 \
  const __m512i gidx = _mm512_srlv_epi32(                                                      \
      _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), _mm512_set1_epi32(gs)); \
  __m512 acc[4][NT_AVX512];                                                                    \
  for (int i = 0; i < 4; i++)                                                                  \
    for (int j = 0; j < nt; j++) acc[i][j] = _mm512_setzero_ps();                              \
  if (pf) prefetch_next_tail(l, quad);                                                         \
  for (int64_t c = 0; c < nch; c++) {                                                          \
    __m512i is[4][NT_AVX512];                                                                  \
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                                        \
      _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) is[i][j] = _mm512_setzero_si512();  \
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {                                      \
      __m512i xlo[NT_AVX512], xhi[NT_AVX512];                                                  \
      _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                   \
        const int8_t *xc = a->xq + (t + j) * kp + c * WEIR_Q4_CHUNK + h * 128;                 \
        xlo[j] = _mm512_loadu_si512((const void *)xc);                                         \
        xhi[j] = _mm512_loadu_si512((const void *)(xc + 64));                                  \
      }                                                                                        \
      _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                    \
        const uint8_t *nb = quad + c * 512 + i * 128 + h * 64;                                 \
        if (pf) {                                                                              \
          _mm_prefetch((const char *)(nb + PF_FAR), _MM_HINT_T1);                              \
          _mm_prefetch((const char *)(nb + PF_NEAR), _MM_HINT_T0);                             \
        }                                                                                      \
        const __m512i v = _mm512_loadu_si512((const void *)nb);                                \
        const __m512i lo = _mm512_and_si512(v, mask);                                          \
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);                    \
        _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                 \
          if (VNNI) {                                                                          \
            is[i][j] = _mm512_dpbusd_epi32(is[i][j], lo, xlo[j]);                              \
            is[i][j] = _mm512_dpbusd_epi32(is[i][j], hi, xhi[j]);                              \
          } else {                                                                             \
            is[i][j] = _mm512_add_epi16(is[i][j], _mm512_maddubs_epi16(lo, xlo[j]));           \
            is[i][j] = _mm512_add_epi16(is[i][j], _mm512_maddubs_epi16(hi, xhi[j]));           \
          }                                                                                    \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
    const float *xdp = a->xdp + t * xs_stride + c * WEIR_Q4_LANES;                             \
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                      \
      const __m512 d16 = _mm512_permutexvar_ps(                                                \
          gidx, _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(                        \
                    (const __m128i *)(const void *)(dbase + i * l->ngp + c * ngc)))));         \
      _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                   \
        __m512i s32 = is[i][j];                                                                \
        if (!VNNI) s32 = _mm512_madd_epi16(s32, _mm512_set1_epi16(1));                         \
        const __m512 sc = _mm512_mul_ps(d16, _mm512_loadu_ps(xdp + j * xs_stride));            \
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32), sc, acc[i][j]);                   \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  const __m512 neg8 = _mm512_set1_ps(-8.0f);                                                   \
  for (int i = 0; i < 4; i++) {                                                                \
    const uint16_t *mm = l->sym ? dbase + i * l->ngp : mbase + i * l->ngp;                     \
    for (int64_t g = 0; g < l->ngp; g += 16) {                                                 \
      __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(mm + g))); \
      if (l->sym) mv = _mm512_mul_ps(mv, neg8);                                                \
      for (int j = 0; j < nt; j++)                                                             \
        acc[i][j] = _mm512_fmadd_ps(mv, _mm512_loadu_ps(a->xsg + (t + j) * l->ngp + g),         \
                                    acc[i][j]);                                                \
    }                                                                                          \
    if (qd * 4 + i < l->rows)                                                                  \
      for (int j = 0; j < nt; j++)                                                             \
        a->y[(t + j) * l->rows + qd * 4 + i] = _mm512_reduce_add_ps(acc[i][j]);                \
  }

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE void tile_avx512(const weir_q4_matmul_args *a,
                                                         int64_t qd, int64_t t, const int nt,
                                                         int pf) {
  TILE512_BODY(0)
}

WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void tile_vnni(const weir_q4_matmul_args *a, int64_t qd,
                                                int64_t t, const int nt, int pf) {
  TILE512_BODY(1)
}

WEIR_TARGET_AVX512 static void tile_avx512_any(const weir_q4_matmul_args *a, int64_t qd,
                                               int64_t t, int nt, int pf) {
  if (nt == 1) tile_avx512(a, qd, t, 1, pf);
  else tile_avx512(a, qd, t, 2, pf);
}

WEIR_TARGET_VNNI static void tile_vnni_any(const weir_q4_matmul_args *a, int64_t qd, int64_t t,
                                      int nt, int pf) {
  if (nt == 1) tile_vnni(a, qd, t, 1, pf);
  else tile_vnni(a, qd, t, 2, pf);
}

WEIR_TARGET_AVX2 static void tile_avx2_any(const weir_q4_matmul_args *a, int64_t qd, int64_t t,
                                           int nt, int pf) {
  (void)nt;
  tile_avx2(a, qd, t, pf);
}
#endif

typedef void (*tile_fn)(const weir_q4_matmul_args *a, int64_t qd, int64_t t, int nt, int pf);

static void quads_tiled(const weir_q4_matmul_args *a, int64_t q0, int64_t q1, tile_fn tile,
                        int nt_max) {
  const int64_t n = a->n_tokens;
  const int64_t tb = token_block(a->l->kp, nt_max);
  for (int64_t t0 = 0; t0 < n; t0 += tb) {
    int64_t t1 = t0 + tb < n ? t0 + tb : n;
    for (int64_t qd = q0; qd < q1; qd++)
      for (int64_t t = t0; t < t1; t += nt_max) {
        int nt = t1 - t < nt_max ? (int)(t1 - t) : nt_max;
        tile(a, qd, t, nt, t == t0); /* later tiles find the quad in L1 */
      }
  }
}

#if WEIR_X86
/* Whether one-token calls (decode, memory-bound) take the vpmaddubsw body where VNNI exists:
 * on AMD Zen 4 (the development machine) it decodes the 1.1B shape at 46 tok/s on one thread
 * against 42.6 for the vpdpbusd body, which stays the faster one for prompts (111 against 92
 * tok/s). Zen 4 is AMD family 19h with AVX-512 (Zen 3, the same family, has none); other
 * CPUs keep vpdpbusd throughout (not measured here). */
static int decode_prefers_maddubs(void) {
  static _Atomic int v = -1;
  int r = atomic_load_explicit(&v, memory_order_relaxed);
  if (r < 0) {
    unsigned a, b, c, d;
    r = __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541u /* "Auth" */ &&
        d == 0x69746e65u /* "enti" */ && c == 0x444d4163u /* "cAMD" */;
    if (r && __get_cpuid(1, &a, &b, &c, &d)) {
      const unsigned family = ((a >> 8) & 0xf) == 0xf ? 0xf + ((a >> 20) & 0xff) : (a >> 8) & 0xf;
      r = family == 0x19;
    } else {
      r = 0;
    }
    atomic_store_explicit(&v, r, memory_order_relaxed);
  }
  return r;
}
#endif

void weir_q4_matmul_quads(const weir_q4_matmul_args *a, int64_t q_begin, int64_t q_end) {
  if (q_begin < 0) q_begin = 0;
  if (q_end > a->l->nq) q_end = a->l->nq;
  if (q_begin >= q_end || a->n_tokens <= 0) return;
  switch (weir_q8_isa_current()) {
#if WEIR_X86
  case WEIR_Q8_ISA_AVX512_VNNI:
    quads_tiled(a, q_begin, q_end,
                a->n_tokens == 1 && decode_prefers_maddubs() ? tile_avx512_any : tile_vnni_any,
                NT_AVX512);
    return;
  case WEIR_Q8_ISA_AVX512: quads_tiled(a, q_begin, q_end, tile_avx512_any, NT_AVX512); return;
  case WEIR_Q8_ISA_AVX2: quads_tiled(a, q_begin, q_end, tile_avx2_any, 1); return;
#endif
  default: quads_scalar(a, q_begin, q_end); return;
  }
}

void weir_q4_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  weir_q4_matmul_quads((const weir_q4_matmul_args *)arg, begin, end);
}
