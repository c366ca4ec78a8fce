/* int8 x int8 linear layers (see matmul_q8.h). */
#include "matmul_q8.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"

#if WEIR_X86
#include <immintrin.h>
#endif

static _Atomic int g_q8_isa = -1;

static int q8_detect(void) {
  weir_cpu_isa_level l = weir_cpu_isa();
  if (l == WEIR_CPU_ISA_AVX2) return WEIR_Q8_ISA_AVX2;
  if (l != WEIR_CPU_ISA_AVX512) return WEIR_Q8_ISA_SCALAR;
#if WEIR_X86
  const char *env = getenv("WEIR_CPU_ISA");
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vnni") && !(env && strcmp(env, "avx512") == 0))
    return WEIR_Q8_ISA_AVX512_VNNI;
#endif
  return WEIR_Q8_ISA_AVX512;
}

weir_q8_isa weir_q8_isa_current(void) {
  int v = atomic_load_explicit(&g_q8_isa, memory_order_relaxed);
  if (v < 0) {
    v = q8_detect();
    atomic_store_explicit(&g_q8_isa, v, memory_order_relaxed);
  }
  return (weir_q8_isa)v;
}

const char *weir_q8_isa_name(weir_q8_isa isa) {
  switch (isa) {
  case WEIR_Q8_ISA_SCALAR: return "scalar";
  case WEIR_Q8_ISA_AVX2: return "avx2";
  case WEIR_Q8_ISA_AVX512: return "avx512";
  case WEIR_Q8_ISA_AVX512_VNNI: return "avx512vnni";
  default: return "?";
  }
}

int64_t weir_q8_padded_cols(int64_t cols, int64_t group) {
  if (cols <= 0 || group < 0 || group % WEIR_Q8_BLOCK || WEIR_Q8_ROW_ALIGN % (group ? group : 32))
    return 0;
  return (cols + WEIR_Q8_ROW_ALIGN - 1) / WEIR_Q8_ROW_ALIGN * WEIR_Q8_ROW_ALIGN;
}

void weir_q8_interleave(const int8_t *natural, uint8_t *stored, int64_t kp, uint8_t bias) {
  /* Columns 8m..8m+7 of block blk are 8 contiguous bytes at 64 m + 8 blk. */
  for (int64_t c = 0; c < kp; c += WEIR_Q8_ROW_ALIGN)
    for (int blk = 0; blk < 8; blk++)
      for (int m = 0; m < 4; m++)
        for (int e = 0; e < 8; e++)
          stored[c + 64 * m + 8 * blk + e] = (uint8_t)natural[c + 32 * blk + 8 * m + e] ^ bias;
}

void weir_q8_quantize(const float *x, int64_t n, int64_t kp, int64_t group, int8_t *q,
                      float *d) {
  for (int64_t g0 = 0, gi = 0; g0 < kp; g0 += group, gi++) {
    int64_t end = g0 + group < n ? g0 + group : n;
    float amax = 0.0f;
    int finite = 1;
    for (int64_t k = g0; k < end; k++) {
      float a = fabsf(x[k]);
      if (!(a <= 3.4e38f)) finite = 0;
      amax = a > amax ? a : amax;
    }
    float dd = amax / 127.0f;
    float inv = dd > 0.0f ? 1.0f / dd : 0.0f;
    if (!(inv <= 3.4e38f)) { /* |x| ~ 1e-36 and below: 1/d overflows; such a group is zero */
      inv = 0.0f;
      dd = 0.0f;
    }
    int64_t k = g0;
    if (!finite) { /* q = 0 (a NaN must not reach the int conversion), d = NaN */
      dd = NAN;
      k = end;
      for (int64_t z = g0; z < end; z++) q[z] = 0;
    }
    /* Adding and subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the nearest
     * integer, ties to even (the default rounding mode), exactly as nearbyintf does, without
     * a library call per element. |x * inv| <= 127 (+ rounding) here. */
    for (; k < end; k++) {
      float v = (x[k] * inv + 12582912.0f) - 12582912.0f;
      v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
      q[k] = (int8_t)v;
    }
    for (; k < g0 + group; k++) q[k] = 0;
    d[gi] = dd;
  }
}

/* ---- activation quantization straight into the stored order ------------------------------
 * Block blk of a 256-column chunk keeps its 32 bytes as four 8-byte pieces at 64 * m + 8 * blk
 * (m = 0..3), see weir_q8_stored_pos. */

static void act_block_scalar(const float *x, int64_t k0, int64_t n, int8_t *chunk, int blk,
                             float *d) {
  int8_t q[WEIR_Q8_BLOCK];
  float xb[WEIR_Q8_BLOCK];
  int64_t len = n - k0 < WEIR_Q8_BLOCK ? (n - k0 > 0 ? n - k0 : 0) : WEIR_Q8_BLOCK;
  for (int64_t i = 0; i < len; i++) xb[i] = x[k0 + i];
  weir_q8_quantize(xb, len, WEIR_Q8_BLOCK, WEIR_Q8_BLOCK, q, d);
  for (int m = 0; m < 4; m++) memcpy(chunk + 64 * m + 8 * blk, q + 8 * m, 8);
}

#if WEIR_X86
/* Scale and inverse for a block maximum: the scalar rule's arithmetic, operation for
 * operation, so the SIMD rows below give the same bytes. */
static inline void act_scale(float amax, float *dd, float *inv) {
  *dd = amax / 127.0f;
  *inv = *dd > 0.0f ? 1.0f / *dd : 0.0f;
  if (!(*inv <= 3.4e38f)) {
    *inv = 0.0f;
    *dd = 0.0f;
  }
}

WEIR_TARGET_AVX2 static void act_row_avx2(const float *x, int64_t n, int64_t kp, int8_t *xq,
                                          float *xd) {
  const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(3.4e38f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t k0 = 0; k0 < kp; k0 += WEIR_Q8_BLOCK) {
    int8_t *chunk = xq + k0 / WEIR_Q8_ROW_ALIGN * WEIR_Q8_ROW_ALIGN;
    int blk = (int)(k0 % WEIR_Q8_ROW_ALIGN / WEIR_Q8_BLOCK);
    float *d = xd + k0 / WEIR_Q8_BLOCK;
    if (k0 + WEIR_Q8_BLOCK > n) {
      act_block_scalar(x, k0, n, chunk, blk, d);
      continue;
    }
    __m256 v[4], a[4];
    int bad = 0;
    for (int i = 0; i < 4; i++) {
      v[i] = _mm256_loadu_ps(x + k0 + 8 * i);
      a[i] = _mm256_andnot_ps(sign, v[i]);
      bad |= _mm256_movemask_ps(_mm256_cmp_ps(a[i], big, _CMP_NLE_UQ));
    }
    if (bad) { /* Inf or NaN: the scalar rule handles it */
      act_block_scalar(x, k0, n, chunk, blk, d);
      continue;
    }
    __m256 m8 = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float dd, inv;
    act_scale(_mm_cvtss_f32(m4), &dd, &inv);
    __m256 vi = _mm256_set1_ps(inv);
    __m256i q[4];
    for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vi));
    __m256i p16 =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    __m256i p8 = _mm256_permutevar8x32_epi32(p16, order); /* columns 0..31 in order */
    __m128i lo = _mm256_castsi256_si128(p8), hi = _mm256_extracti128_si256(p8, 1);
    _mm_storel_epi64((__m128i *)(chunk + 8 * blk), lo);
    _mm_storeh_pd((double *)(void *)(chunk + 64 + 8 * blk), _mm_castsi128_pd(lo));
    _mm_storel_epi64((__m128i *)(chunk + 128 + 8 * blk), hi);
    _mm_storeh_pd((double *)(void *)(chunk + 192 + 8 * blk), _mm_castsi128_pd(hi));
    *d = dd;
  }
}

WEIR_TARGET_AVX512 static void act_row_avx512(const float *x, int64_t n, int64_t kp, int8_t *xq,
                                              float *xd) {
  for (int64_t k0 = 0; k0 < kp; k0 += WEIR_Q8_BLOCK) {
    int8_t *chunk = xq + k0 / WEIR_Q8_ROW_ALIGN * WEIR_Q8_ROW_ALIGN;
    int blk = (int)(k0 % WEIR_Q8_ROW_ALIGN / WEIR_Q8_BLOCK);
    float *d = xd + k0 / WEIR_Q8_BLOCK;
    if (k0 + WEIR_Q8_BLOCK > n) {
      act_block_scalar(x, k0, n, chunk, blk, d);
      continue;
    }
    __m512 v0 = _mm512_loadu_ps(x + k0), v1 = _mm512_loadu_ps(x + k0 + 16);
    __m512 a = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
    /* Inf or NaN anywhere (max_ps may drop a NaN): the scalar rule handles it */
    __mmask16 bad = _mm512_cmp_ps_mask(_mm512_abs_ps(v0), _mm512_set1_ps(3.4e38f), _CMP_NLE_UQ) |
                    _mm512_cmp_ps_mask(_mm512_abs_ps(v1), _mm512_set1_ps(3.4e38f), _CMP_NLE_UQ);
    if (bad) {
      act_block_scalar(x, k0, n, chunk, blk, d);
      continue;
    }
    float dd, inv;
    act_scale(_mm512_reduce_max_ps(a), &dd, &inv);
    /* the same product and round-to-nearest-even as the scalar rule; |x * inv| <= 127 */
    __m512 vi = _mm512_set1_ps(inv);
    __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vi)));
    __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vi)));
    _mm_storel_epi64((__m128i *)(chunk + 8 * blk), q0);
    _mm_storeh_pd((double *)(void *)(chunk + 64 + 8 * blk), _mm_castsi128_pd(q0));
    _mm_storel_epi64((__m128i *)(chunk + 128 + 8 * blk), q1);
    _mm_storeh_pd((double *)(void *)(chunk + 192 + 8 * blk), _mm_castsi128_pd(q1));
    *d = dd;
  }
}
#endif

void weir_q8_quantize_act(const float *x, int64_t n, int64_t kp, int8_t *xq, float *xd) {
#if WEIR_X86
  if (weir_q8_isa_current() >= WEIR_Q8_ISA_AVX512) {
    act_row_avx512(x, n, kp, xq, xd);
    return;
  }
  if (weir_q8_isa_current() == WEIR_Q8_ISA_AVX2) {
    act_row_avx2(x, n, kp, xq, xd);
    return;
  }
#endif
  for (int64_t k0 = 0; k0 < kp; k0 += WEIR_Q8_BLOCK)
    act_block_scalar(x, k0, n, xq + k0 / WEIR_Q8_ROW_ALIGN * WEIR_Q8_ROW_ALIGN,
                     (int)(k0 % WEIR_Q8_ROW_ALIGN / WEIR_Q8_BLOCK), xd + k0 / WEIR_Q8_BLOCK);
}

/* ---- scalar: block sums over the stored (interleaved) order ----------------------------- */

static void rows_scalar(const weir_q8_matmul_args *a, int64_t r0, int64_t r1) {
  const int64_t kp = a->kp, nb = kp / WEIR_Q8_BLOCK, ng = kp / a->group;
  const int64_t bpg = a->group / WEIR_Q8_BLOCK;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *w = a->wq + r * kp;
    const float *wd = a->wd + r * ng;
    for (int64_t t = 0; t < a->n_tokens; t++) {
      const int8_t *x = a->xq + t * kp;
      const float *xd = a->xd + t * nb;
      float s = 0.0f;
      for (int64_t c = 0; c < kp; c += WEIR_Q8_ROW_ALIGN) {
        int32_t is[8] = {0};
        for (int p = 0; p < WEIR_Q8_ROW_ALIGN; p++)
          is[((p >> 2) & 15) >> 1] += ((int32_t)w[c + p] - 128) * x[c + p];
        for (int blk = 0; blk < 8; blk++) {
          int64_t b = c / WEIR_Q8_BLOCK + blk;
          s += (float)is[blk] * (wd[b / bpg] * xd[b]);
        }
      }
      a->y[t * a->rows + r] = s;
    }
  }
}

/* Block b's weight group is b >> group_shift: log2(blocks per group), or 62 for one group per
 * row (any block index then maps to group 0). Avoids an integer division per block. */
static int group_shift(const weir_q8_matmul_args *a) {
  if (a->group >= a->kp) return 62;
  int s = 0;
  while (((int64_t)WEIR_Q8_BLOCK << s) < a->group) s++;
  return s;
}

/* Tokens per block: their activations stay in L2 while a thread's rows stream past. */
static int64_t token_block(int64_t kp, int64_t nt) {
  int64_t tb = WEIR_Q8_ACT_BLOCK_BYTES / kp;
  tb = tb / nt * nt;
  return tb < nt ? nt : tb;
}

#if WEIR_X86
/* ---- AVX2 -------------------------------------------------------------------------------
 * Per 256-column chunk and (row, token): the low 32 bytes of each 64-byte step hold blocks
 * 0-3 (two 4-byte lanes each), the high 32 bytes blocks 4-7; sign trick + maddubs + madd give
 * int32 lanes that add up over the chunk's 4 steps; then one f32 FMA per half with the block
 * scale products spread over their lane pairs. */

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE void tile_avx2(const weir_q8_matmul_args *a, int64_t r,
                                                     int64_t t, const int nr) {
  const int64_t kp = a->kp, nb = kp / WEIR_Q8_BLOCK, ng = kp / a->group;
  const int gs = group_shift(a);
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  const __m256i gidx = _mm256_srlv_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32(gs > 31 ? 31 : gs));
  const __m256i lo_idx = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  const __m256i hi_idx = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
  const int pf = r + 4 + nr <= a->rows;
  const int pf_far = r + 16 + nr <= a->rows;
  const int8_t *x = a->xq + t * kp;
  __m256 acc[4];
  for (int i = 0; i < nr; i++) acc[i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < kp; c += WEIR_Q8_ROW_ALIGN) {
    const int64_t b = c / WEIR_Q8_BLOCK;
    const __m256 xd8 = _mm256_loadu_ps(a->xd + t * nb + b);
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
      const uint8_t *w = a->wq + (r + i) * kp + c;
      if (pf) {
        _mm_prefetch((const char *)(w + 4 * kp), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + 4 * kp + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + 4 * kp + 128), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + 4 * kp + 192), _MM_HINT_T0);
      }
      if (pf_far) {
        _mm_prefetch((const char *)(w + 16 * kp), _MM_HINT_T1);
        _mm_prefetch((const char *)(w + 16 * kp + 64), _MM_HINT_T1);
        _mm_prefetch((const char *)(w + 16 * kp + 128), _MM_HINT_T1);
        _mm_prefetch((const char *)(w + 16 * kp + 192), _MM_HINT_T1);
      }
      __m256i ilo = _mm256_setzero_si256(), ihi = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int m = 0; m < 4; m++) {
        __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + m * 64)), flip);
        __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + m * 64 + 32)), flip);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(x + c + m * 64));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + c + m * 64 + 32));
        __m256i p0 = _mm256_maddubs_epi16(_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(x0, w0));
        __m256i p1 = _mm256_maddubs_epi16(_mm256_sign_epi8(w1, w1), _mm256_sign_epi8(x1, w1));
        ilo = _mm256_add_epi32(ilo, _mm256_madd_epi16(p0, ones));
        ihi = _mm256_add_epi32(ihi, _mm256_madd_epi16(p1, ones));
      }
      __m256 wd8 =
          _mm256_permutevar8x32_ps(_mm256_loadu_ps(a->wd + (r + i) * ng + (b >> gs)), gidx);
      __m256 sp = _mm256_mul_ps(wd8, xd8);
      __m256 splo = _mm256_permutevar8x32_ps(sp, lo_idx);
      __m256 sphi = _mm256_permutevar8x32_ps(sp, hi_idx);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ilo), splo, acc[i]);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ihi), sphi, acc[i]);
    }
  }
  for (int i = 0; i < nr; i++) a->y[t * a->rows + r + i] = hsum8(acc[i]);
}

#define NT_AVX2 1
WEIR_TARGET_AVX2 static void tile_avx2_any(const weir_q8_matmul_args *a, int64_t r, int64_t t,
                                           int nr, int nt) {
  (void)nt;
  if (nr == 4) tile_avx2(a, r, t, 4);
  else tile_avx2(a, r, t, 1);
}

/* ---- AVX-512 ------------------------------------------------------------------------------
 * A 256-column chunk is 4 steps of 64 bytes; lane l of every step belongs to block l / 2, so
 * the int32 lanes of a (row, token) pair add up over the whole chunk, and the chunk ends with
 * one conversion and one FMA against the 8 block scale products spread over lane pairs.
 * VNNI: vpdpbusd takes the stored weights (q + 128, unsigned) times the signed activations;
 * the accumulator starts at -128 * (sum of the activations of each lane), so it ends at
 * sum(q * x): one instruction per row, token and step. Without VNNI: the sign trick. */

#define NT_AVX512 2
#define TILE512_BODY(VNNI)                                                                     \
  const int64_t kp = a->kp, nb = kp / WEIR_Q8_BLOCK, ng = kp / a->group;                       \
  const int gs = group_shift(a);                                                               \
  const __m512i zero = _mm512_setzero_si512();                                                 \
  const __m512i flip = _mm512_set1_epi8((char)0x80);                                           \
  const __m256i gidx = _mm256_srlv_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),            \
                                         _mm256_set1_epi32(gs > 31 ? 31 : gs));                \
  const __m512i pair_idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7); \
  /* Short int8 rows give the hardware prefetcher little to learn from: fetch the next 4-row \
   * group's bytes into L1 while this one is computed, and the group 16 rows on into L2 (enough \
   * misses in flight for one core: 1-thread decode of the 1.1B shape 11.8 -> 17.1 tok/s). */  \
  const int pf = r + 16 + nr <= a->rows;                                                        \
  const int pf_far = r + 16 + nr <= a->rows;                                                   \
  __m512 acc[4][NT_AVX512];                                                                    \
  for (int i = 0; i < nr; i++)                                                                 \
    for (int j = 0; j < nt; j++) acc[i][j] = _mm512_setzero_ps();                              \
  for (int64_t c = 0; c < kp; c += WEIR_Q8_ROW_ALIGN) {                                        \
    const int64_t b = c / WEIR_Q8_BLOCK;                                                       \
    __m512i is[4][NT_AVX512];                                                                  \
    _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                     \
      __m512i init = zero;                                                                     \
      if (VNNI) {                                                                              \
        const int8_t *x = a->xq + (t + j) * kp + c;                                            \
        __m512i cs = zero;                                                                     \
        _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++)                                    \
          cs = _mm512_dpbusd_epi32(cs, flip, _mm512_loadu_si512((const void *)(x + m * 64))); \
        init = _mm512_sub_epi32(zero, cs);                                                     \
      }                                                                                        \
      _Pragma("GCC unroll 4") for (int i = 0; i < nr; i++) is[i][j] = init;                    \
    }                                                                                          \
    _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {                                      \
      __m512i xv[NT_AVX512];                                                                   \
      _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++)                                     \
        xv[j] = _mm512_loadu_si512((const void *)(a->xq + (t + j) * kp + c + m * 64));         \
      _Pragma("GCC unroll 4") for (int i = 0; i < nr; i++) {                                   \
        const uint8_t *wp = a->wq + (r + i) * kp + c + m * 64;                                 \
        __m512i wu = _mm512_loadu_si512((const void *)wp);                                     \
        if (pf) _mm_prefetch((const char *)(wp + 4 * kp), _MM_HINT_T0);                        \
        if (pf_far) _mm_prefetch((const char *)(wp + 16 * kp), _MM_HINT_T1);                   \
        __m512i w = zero, aw = zero;                                                           \
        __mmask64 neg = 0;                                                                     \
        if (!VNNI) {                                                                           \
          w = _mm512_xor_si512(wu, flip);                                                      \
          aw = _mm512_abs_epi8(w);                                                             \
          neg = _mm512_movepi8_mask(w);                                                        \
        }                                                                                      \
        _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                 \
          if (VNNI) {                                                                          \
            is[i][j] = _mm512_dpbusd_epi32(is[i][j], wu, xv[j]);                               \
          } else {                                                                             \
            __m512i sx = _mm512_mask_sub_epi8(xv[j], neg, zero, xv[j]);                        \
            is[i][j] = _mm512_add_epi32(                                                       \
                is[i][j],                                                                      \
                _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), _mm512_set1_epi16(1)));        \
          }                                                                                    \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
    _Pragma("GCC unroll 4") for (int i = 0; i < nr; i++) {                                     \
      __m256 wd8 = _mm256_permutevar8x32_ps(                                                   \
          _mm256_loadu_ps(a->wd + (r + i) * ng + (b >> gs)), gidx);                            \
      _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                   \
        __m256 sp = _mm256_mul_ps(wd8, _mm256_loadu_ps(a->xd + (t + j) * nb + b));             \
        __m512 sc = _mm512_permutexvar_ps(pair_idx, _mm512_castps256_ps512(sp));               \
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[i][j]), sc, acc[i][j]);              \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  for (int i = 0; i < nr; i++)                                                                 \
    for (int j = 0; j < nt; j++) a->y[(t + j) * a->rows + r + i] = _mm512_reduce_add_ps(acc[i][j]);

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE void tile_avx512(const weir_q8_matmul_args *a, int64_t r,
                                                         int64_t t, const int nr, const int nt) {
  TILE512_BODY(0)
}

WEIR_TARGET_VNNI static WEIR_ALWAYS_INLINE void tile_vnni(const weir_q8_matmul_args *a, int64_t r,
                                                int64_t t, const int nr, const int nt) {
  TILE512_BODY(1)
}

#define TILE_SWITCH(fn)                       \
  if (nr == 4) {                              \
    if (nt == 1) fn(a, r, t, 4, 1);           \
    else fn(a, r, t, 4, 2);                   \
  } else {                                    \
    if (nt == 1) fn(a, r, t, 1, 1);           \
    else fn(a, r, t, 1, 2);                   \
  }

WEIR_TARGET_AVX512 static void tile_avx512_any(const weir_q8_matmul_args *a, int64_t r,
                                               int64_t t, int nr, int nt) {
  TILE_SWITCH(tile_avx512)
}
WEIR_TARGET_VNNI static void tile_vnni_any(const weir_q8_matmul_args *a, int64_t r, int64_t t, int nr,
                                      int nt) {
  TILE_SWITCH(tile_vnni)
}
#endif

typedef void (*tile_fn)(const weir_q8_matmul_args *a, int64_t r, int64_t t, int nr, int nt);

/* Rows in groups of 4 (then single rows), tokens in blocks whose activations stay in L2 and
 * tiles of nt_max tokens: each 4-row slice of W is reused from L1 by the whole token block. */
static void rows_tiled(const weir_q8_matmul_args *a, int64_t r0, int64_t r1, tile_fn tile,
                       int nt_max) {
  const int64_t n = a->n_tokens;
  const int64_t tb = token_block(a->kp, nt_max);
  for (int64_t t0 = 0; t0 < n; t0 += tb) {
    int64_t t1 = t0 + tb < n ? t0 + tb : n;
    for (int64_t r = r0; r < r1;) {
      int nr = r1 - r >= 4 ? 4 : 1;
      for (int64_t t = t0; t < t1; t += nt_max) {
        int nt = t1 - t < nt_max ? (int)(t1 - t) : nt_max;
        tile(a, r, t, nr, nt);
      }
      r += nr;
    }
  }
}

void weir_q8_matmul_rows(const weir_q8_matmul_args *a, int64_t row_begin, int64_t row_end) {
  if (row_begin < 0) row_begin = 0;
  if (row_end > a->rows) row_end = a->rows;
  if (row_begin >= row_end || a->n_tokens <= 0 || a->kp <= 0 || a->group <= 0) return;
  switch (weir_q8_isa_current()) {
#if WEIR_X86
  case WEIR_Q8_ISA_AVX512_VNNI: rows_tiled(a, row_begin, row_end, tile_vnni_any, NT_AVX512); return;
  case WEIR_Q8_ISA_AVX512: rows_tiled(a, row_begin, row_end, tile_avx512_any, NT_AVX512); return;
  case WEIR_Q8_ISA_AVX2: rows_tiled(a, row_begin, row_end, tile_avx2_any, NT_AVX2); return;
#endif
  default: rows_scalar(a, row_begin, row_end); return;
  }
}

void weir_q8_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  weir_q8_matmul_rows((const weir_q8_matmul_args *)arg, begin, end);
}
