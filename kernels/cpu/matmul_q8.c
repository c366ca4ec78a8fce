/* int8 x int8 linear layers (see matmul_q8.h). */
#include "matmul_q8.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"

#if WEIR_X86
#include <immintrin.h>
#define TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Bytes of quantized activations a token block may occupy: stays in L2 while the rows of a
 * thread's chunk stream past it. */
#define XQ_BLOCK_BYTES (192 * 1024)

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
  if (cols <= 0 || group < 0 || group % WEIR_Q8_BLOCK) return 0;
  int64_t align = group > WEIR_Q8_ROW_ALIGN ? group : WEIR_Q8_ROW_ALIGN;
  if (align % WEIR_Q8_ROW_ALIGN) return 0;
  return (cols + align - 1) / align * align;
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

/* ---- scalar ------------------------------------------------------------------------------ */

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
      for (int64_t b = 0; b < nb; b++) {
        int32_t is = 0;
        for (int k = 0; k < WEIR_Q8_BLOCK; k++)
          is += ((int32_t)w[b * WEIR_Q8_BLOCK + k] - 128) * x[b * WEIR_Q8_BLOCK + k];
        s += (float)is * (wd[b / bpg] * xd[b]);
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
  int64_t tb = XQ_BLOCK_BYTES / kp;
  tb = tb / nt * nt;
  return tb < nt ? nt : tb;
}

#if WEIR_X86
/* ---- AVX2: 32 columns (one block) per step, maddubs with the sign trick ------------------- */

WEIR_TARGET_AVX2 static ALWAYS_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#define NT_AVX2 2
WEIR_TARGET_AVX2 static ALWAYS_INLINE void tile_avx2(const weir_q8_matmul_args *a, int64_t r,
                                                     int64_t t, const int nr, const int nt) {
  const int64_t kp = a->kp, nb = kp / WEIR_Q8_BLOCK, ng = kp / a->group;
  const int gs = group_shift(a);
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  __m256 acc[4][NT_AVX2];
  for (int i = 0; i < nr; i++)
    for (int j = 0; j < nt; j++) acc[i][j] = _mm256_setzero_ps();
  const int pf = r + 4 + nr <= a->rows;
  for (int64_t b = 0; b < nb; b++) {
    __m256i xv[NT_AVX2];
    __m256 xd[NT_AVX2];
    const int64_t g = b >> gs;
    for (int j = 0; j < nt; j++) {
      xv[j] = _mm256_loadu_si256((const __m256i *)(a->xq + (t + j) * kp + b * WEIR_Q8_BLOCK));
      xd[j] = _mm256_broadcast_ss(a->xd + (t + j) * nb + b);
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) {
      /* stored as q + 128: flip the top bit back to the signed value */
      __m256i w = _mm256_xor_si256(
          _mm256_loadu_si256((const __m256i *)(a->wq + (r + i) * kp + b * WEIR_Q8_BLOCK)), flip);
      __m256i aw = _mm256_sign_epi8(w, w);
      __m256 wd = _mm256_broadcast_ss(a->wd + (r + i) * ng + g);
      /* the next 4-row group, as on the AVX-512 paths */
      if (pf && (b & 1) == 0)
        _mm_prefetch((const char *)(a->wq + (r + i + 4) * kp + (b + 2) * WEIR_Q8_BLOCK), _MM_HINT_T0);
#pragma GCC unroll 2
      for (int j = 0; j < nt; j++) {
        __m256i sx = _mm256_sign_epi8(xv[j], w);
        __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wd, xd[j]), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < nr; i++)
    for (int j = 0; j < nt; j++) a->y[(t + j) * a->rows + r + i] = hsum8(acc[i][j]);
}

WEIR_TARGET_AVX2 static void tile_avx2_any(const weir_q8_matmul_args *a, int64_t r, int64_t t,
                                           int nr, int nt) {
  if (nr == 4) {
    if (nt == 1) tile_avx2(a, r, t, 4, 1);
    else tile_avx2(a, r, t, 4, 2);
  } else {
    if (nt == 1) tile_avx2(a, r, t, 1, 1);
    else tile_avx2(a, r, t, 1, 2);
  }
}

/* ---- AVX-512: 64 columns (two blocks) per step, 8 blocks per scale chunk -----------------
 * Per chunk of 8 blocks, the 8 scale products wd * xd of a (row, token) pair are one ymm
 * (wd loaded at the chunk's first group and spread over the blocks with a permute); each
 * 64-column step expands two of them to [s0 x 8, s1 x 8] with one permute.
 * VNNI: vpdpbusd takes the stored weights (q + 128, unsigned) times the signed activations;
 * the accumulator starts at -128 * (sum of the 4 activations of each lane), so it ends at
 * sum(q * x) with one instruction per row and token. Without VNNI: the sign trick. */

#define NT_AVX512 2
#define TILE512_BODY(VNNI)                                                                     \
  const int64_t kp = a->kp, nb = kp / WEIR_Q8_BLOCK, ng = kp / a->group;                       \
  const int gs = group_shift(a);                                                               \
  const __m512i zero = _mm512_setzero_si512();                                                 \
  const __m512i flip = _mm512_set1_epi8((char)0x80);                                           \
  const __m256i gidx = _mm256_srlv_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),            \
                                         _mm256_set1_epi32(gs > 31 ? 31 : gs));                \
  const __m512i lane_hi = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);  \
  __m512 acc[4][NT_AVX512];                                                                    \
  for (int i = 0; i < nr; i++)                                                                 \
    for (int j = 0; j < nt; j++) acc[i][j] = _mm512_setzero_ps();                              \
  /* Short int8 rows give the hardware prefetcher little to learn from: fetch the next 4-row \
   * group's bytes while this one is computed. */                                              \
  const int pf = r + 4 + nr <= a->rows;                                                        \
  for (int64_t b = 0; b < nb; b += 8) {                                                        \
    const int steps = nb - b >= 8 ? 4 : (int)(nb - b) / 2;                                     \
    __m256 sp[4][NT_AVX512];                                                                   \
    _Pragma("GCC unroll 4") for (int i = 0; i < nr; i++) {                                     \
      __m256 wd8 = _mm256_permutevar8x32_ps(                                                   \
          _mm256_loadu_ps(a->wd + (r + i) * ng + (b >> gs)), gidx);                            \
      _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++)                                     \
        sp[i][j] = _mm256_mul_ps(wd8, _mm256_loadu_ps(a->xd + (t + j) * nb + b));              \
    }                                                                                          \
    for (int m = 0; m < steps; m++) {                                                          \
      const int64_t col = (b + 2 * m) * WEIR_Q8_BLOCK;                                         \
      const __m512i idx = _mm512_add_epi32(lane_hi, _mm512_set1_epi32(2 * m));                 \
      __m512i xv[NT_AVX512], xc[NT_AVX512];                                                    \
      _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                   \
        xv[j] = _mm512_loadu_si512((const void *)(a->xq + (t + j) * kp + col));                \
        if (VNNI) xc[j] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, xv[j]));      \
      }                                                                                        \
      _Pragma("GCC unroll 4") for (int i = 0; i < nr; i++) {                                   \
        __m512i wu = _mm512_loadu_si512((const void *)(a->wq + (r + i) * kp + col));           \
        if (pf) _mm_prefetch((const char *)(a->wq + (r + i + 4) * kp + col + 64), _MM_HINT_T0); \
        __m512i w = zero, aw = zero;                                                           \
        __mmask64 neg = 0;                                                                     \
        if (!VNNI) {                                                                           \
          w = _mm512_xor_si512(wu, flip);                                                      \
          aw = _mm512_abs_epi8(w);                                                             \
          neg = _mm512_movepi8_mask(w);                                                        \
        }                                                                                      \
        _Pragma("GCC unroll 2") for (int j = 0; j < nt; j++) {                                 \
          __m512i s;                                                                           \
          if (VNNI) {                                                                          \
            s = _mm512_dpbusd_epi32(xc[j], wu, xv[j]);                                         \
          } else {                                                                             \
            __m512i sx = _mm512_mask_sub_epi8(xv[j], neg, zero, xv[j]);                        \
            s = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), _mm512_set1_epi16(1));         \
          }                                                                                    \
          __m512 sc = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(sp[i][j]));            \
          acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[i][j]);                   \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  for (int i = 0; i < nr; i++)                                                                 \
    for (int j = 0; j < nt; j++) a->y[(t + j) * a->rows + r + i] = _mm512_reduce_add_ps(acc[i][j]);

WEIR_TARGET_AVX512 static ALWAYS_INLINE void tile_avx512(const weir_q8_matmul_args *a, int64_t r,
                                                         int64_t t, const int nr, const int nt) {
  TILE512_BODY(0)
}

TARGET_VNNI static ALWAYS_INLINE void tile_vnni(const weir_q8_matmul_args *a, int64_t r,
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
TARGET_VNNI static void tile_vnni_any(const weir_q8_matmul_args *a, int64_t r, int64_t t, int nr,
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
