/* Linear layers: GEMV and register-blocked GEMM over f16 / f32 weights (see matmul.h). */
#include "matmul.h"

#include "convert.h"
#include "cpu_isa.h"

#if WEIR_X86
#include <immintrin.h>
#endif

/* Bytes of x a token block may occupy: small enough to stay in L2 next to the W rows. */
#define X_BLOCK_BYTES (256 * 1024)

/* Bytes of one slice of a block of W rows the GEMM keeps in L2. */
#define W_BLOCK_BYTES (256 * 1024)

/* GEMV: rows this far ahead are prefetched into L2 (enough misses in flight for one core). */
#define PF_ROWS 16

/* Column slice of the GEMM path (a multiple of 16). */
#define K_BLOCK 1024

static int64_t token_block(int64_t cols, int64_t tile) {
  int64_t tb = X_BLOCK_BYTES / (cols * 4 > 0 ? cols * 4 : 4);
  tb = tb / tile * tile;
  return tb < tile ? tile : tb;
}

/* ---- scalar ------------------------------------------------------------------------------
 * Converts W 512 columns at a time into a stack buffer and reuses it for every token. */

#define SC_CHUNK 512

static void rows_scalar(const weir_matmul_args *a, int64_t r0, int64_t r1) {
  float wbuf[SC_CHUNK];
  int f16 = a->w_dtype == WEIR_DTYPE_F16;
  const float *tab = f16 ? weir_f16_table() : NULL;
  for (int64_t r = r0; r < r1; r++) {
    for (int64_t t = 0; t < a->n_tokens; t++) a->y[t * a->rows + r] = 0.0f;
    for (int64_t k0 = 0; k0 < a->cols; k0 += SC_CHUNK) {
      int64_t len = a->cols - k0 < SC_CHUNK ? a->cols - k0 : SC_CHUNK;
      const float *w;
      if (f16) {
        const uint16_t *src = (const uint16_t *)a->w + r * a->cols + k0;
        for (int64_t k = 0; k < len; k++) wbuf[k] = tab[src[k]];
        w = wbuf;
      } else {
        w = (const float *)a->w + r * a->cols + k0;
      }
      for (int64_t t = 0; t < a->n_tokens; t++) {
        const float *x = a->x + t * a->cols + k0;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t k = 0;
        for (; k + 4 <= len; k += 4) {
          s0 += w[k] * x[k];
          s1 += w[k + 1] * x[k + 1];
          s2 += w[k + 2] * x[k + 2];
          s3 += w[k + 3] * x[k + 3];
        }
        for (; k < len; k++) s0 += w[k] * x[k];
        a->y[t * a->rows + r] += (s0 + s1) + (s2 + s3);
      }
    }
  }
}

#if WEIR_X86
/* ---- AVX2 + FMA + F16C -------------------------------------------------------------------- */

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE __m256 ld_w8(const void *w, int64_t i, int f16) {
  if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
  return _mm256_loadu_ps((const float *)w + i);
}

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE float w_at(const void *w, int64_t i, int f16) {
  return f16 ? weir_f16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* One row, one token. */
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE float dot1_avx2(const void *w, int64_t off, const float *x,
                                                      int64_t n, int f16) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    s0 = _mm256_fmadd_ps(ld_w8(w, off + k, f16), _mm256_loadu_ps(x + k), s0);
    s1 = _mm256_fmadd_ps(ld_w8(w, off + k + 8, f16), _mm256_loadu_ps(x + k + 8), s1);
  }
  for (; k + 8 <= n; k += 8) s0 = _mm256_fmadd_ps(ld_w8(w, off + k, f16), _mm256_loadu_ps(x + k), s0);
  float s = hsum8(_mm256_add_ps(s0, s1));
  for (; k < n; k++) s += w_at(w, off + k, f16) * x[k];
  return s;
}

/* GEMV: 4 rows x 1 token, two accumulators per row (8 independent FMA chains). */
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE void gemv4_avx2(const void *w, int64_t r, int64_t cols,
                                                      const float *x, float *y, int f16, int pf) {
  __m256 acc[4][2];
  for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const int64_t row_bytes = cols * (f16 ? 2 : 4);
  const char *far = pf ? (const char *)w + (size_t)(r + PF_ROWS) * (size_t)row_bytes : NULL;
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);
    if (pf && (k * (f16 ? 2 : 4)) % 64 == 0) /* a line of each row PF_ROWS on, per line */
      for (int i = 0; i < 4; i++)
        _mm_prefetch(far + i * row_bytes + k * (f16 ? 2 : 4), _MM_HINT_T1);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      acc[i][0] = _mm256_fmadd_ps(ld_w8(w, (r + i) * cols + k, f16), x0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ld_w8(w, (r + i) * cols + k + 8, f16), x1, acc[i][1]);
    }
  }
  for (; k + 8 <= cols; k += 8) {
    __m256 x0 = _mm256_loadu_ps(x + k);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
      acc[i][0] = _mm256_fmadd_ps(ld_w8(w, (r + i) * cols + k, f16), x0, acc[i][0]);
  }
  for (int i = 0; i < 4; i++) {
    float s = hsum8(_mm256_add_ps(acc[i][0], acc[i][1]));
    for (int64_t kk = k; kk < cols; kk++) s += w_at(w, (r + i) * cols + kk, f16) * x[kk];
    y[i] = s;
  }
}

/* GEMM micro-kernel: 4 rows x 3 tokens = 12 accumulators, W converted once per 3 tokens. */
#define T_AVX2 3
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE void gemm4x3_avx2(const weir_matmul_args *a, int64_t r,
                                                        int64_t t, int64_t k0, int64_t k1,
                                                        int accumulate, int f16, const int nt) {
  const int64_t cols = a->cols;
  const float *x = a->x + t * cols;
  __m256 acc[4][T_AVX2];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < nt; j++) acc[i][j] = _mm256_setzero_ps();
  int64_t k = k0;
  for (; k + 8 <= k1; k += 8) {
    __m256 xv[T_AVX2];
#pragma GCC unroll 3
    for (int j = 0; j < nt; j++) xv[j] = _mm256_loadu_ps(x + j * cols + k);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      __m256 wv = ld_w8(a->w, (r + i) * cols + k, f16);
#pragma GCC unroll 3
      for (int j = 0; j < nt; j++) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < nt; j++) {
      float s = hsum8(acc[i][j]);
      for (int64_t kk = k; kk < k1; kk++)
        s += w_at(a->w, (r + i) * cols + kk, f16) * x[j * cols + kk];
      float *dst = &a->y[(t + j) * a->rows + r + i];
      *dst = accumulate ? *dst + s : s;
    }
}

/* One specialised copy of the micro-kernel per token count. */
WEIR_TARGET_AVX2 static void tile_avx2(const weir_matmul_args *a, int64_t r, int64_t t, int64_t k0,
                                       int64_t k1, int acc, int f16, int nt) {
  if (f16) {
    switch (nt) {
    case 1: gemm4x3_avx2(a, r, t, k0, k1, acc, 1, 1); break;
    case 2: gemm4x3_avx2(a, r, t, k0, k1, acc, 1, 2); break;
    default: gemm4x3_avx2(a, r, t, k0, k1, acc, 1, 3); break;
    }
  } else {
    switch (nt) {
    case 1: gemm4x3_avx2(a, r, t, k0, k1, acc, 0, 1); break;
    case 2: gemm4x3_avx2(a, r, t, k0, k1, acc, 0, 2); break;
    default: gemm4x3_avx2(a, r, t, k0, k1, acc, 0, 3); break;
    }
  }
}

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE void rows_avx2_impl(const weir_matmul_args *a, int64_t r0,
                                                          int64_t r1, int f16) {
  const int64_t n = a->n_tokens, cols = a->cols, rows = a->rows;
  int64_t rg_end = r0 + (r1 - r0) / 4 * 4;
  if (n == 1) {
    float tmp[4];
    for (int64_t r = r0; r < rg_end; r += 4) {
      gemv4_avx2(a->w, r, cols, a->x, tmp, f16, r + PF_ROWS + 4 <= rows);
      for (int i = 0; i < 4; i++) a->y[r + i] = tmp[i];
    }
  } else {
    /* Columns in slices of K_BLOCK so a block of many tokens' x fits in L2; each slice
     * of a 4-row W group is then reused from L1 for every token of the block. A batch of
     * a few tokens (batched decode) is one partial tile: W is still read once. */
    int64_t kb = cols < K_BLOCK || n * cols * 4 <= X_BLOCK_BYTES ? cols : K_BLOCK;
    int64_t tb = token_block(kb, T_AVX2);
    int64_t rb = W_BLOCK_BYTES / (kb * (f16 ? 2 : 4)) / 4 * 4;
    if (rb < 4) rb = 4;
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
      int64_t t1 = t0 + tb < n ? t0 + tb : n;
      for (int64_t k0 = 0; k0 < cols; k0 += kb) {
        int64_t k1 = k0 + kb < cols ? k0 + kb : cols;
        /* A block of rb W rows (<= W_BLOCK_BYTES of this slice) stays in L2 while every
         * token tile sweeps it; each tile's x (a few KiB) stays in L1 across the block. */
        for (int64_t rb0 = r0; rb0 < rg_end; rb0 += rb) {
          int64_t rb1 = rb0 + rb < rg_end ? rb0 + rb : rg_end;
          for (int64_t t = t0; t < t1; t += T_AVX2) {
            int nt = t1 - t < T_AVX2 ? (int)(t1 - t) : T_AVX2;
            for (int64_t r = rb0; r < rb1; r += 4) tile_avx2(a, r, t, k0, k1, k0 > 0, f16, nt);
          }
        }
      }
    }
  }
  for (int64_t r = rg_end; r < r1; r++)
    for (int64_t t = 0; t < n; t++)
      a->y[t * rows + r] = dot1_avx2(a->w, r * cols, a->x + t * cols, cols, f16);
}

WEIR_TARGET_AVX2 static void rows_avx2_f16(const weir_matmul_args *a, int64_t r0, int64_t r1) {
  rows_avx2_impl(a, r0, r1, 1);
}
WEIR_TARGET_AVX2 static void rows_avx2_f32(const weir_matmul_args *a, int64_t r0, int64_t r1) {
  rows_avx2_impl(a, r0, r1, 0);
}

/* ---- AVX-512 ---------------------------------------------------------------------------- */

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m512 ld_w16(const void *w, int64_t i, int f16) {
  if (f16)
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
  return _mm512_loadu_ps((const float *)w + i);
}

/* Loads the first `m` (< 16) lanes, zeroing the rest: the column tail without a scalar loop. */
WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m512 ld_w16_tail(const void *w, int64_t i, int f16,
                                                           __mmask16 m) {
  if (f16)
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i));
  return _mm512_maskz_loadu_ps(m, (const float *)w + i);
}

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE float dot1_avx512(const void *w, int64_t off,
                                                          const float *x, int64_t n, int f16) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    s0 = _mm512_fmadd_ps(ld_w16(w, off + k, f16), _mm512_loadu_ps(x + k), s0);
    s1 = _mm512_fmadd_ps(ld_w16(w, off + k + 16, f16), _mm512_loadu_ps(x + k + 16), s1);
  }
  for (; k + 16 <= n; k += 16)
    s0 = _mm512_fmadd_ps(ld_w16(w, off + k, f16), _mm512_loadu_ps(x + k), s0);
  if (k < n) {
    __mmask16 m = (__mmask16)((1u << (n - k)) - 1u);
    s1 = _mm512_fmadd_ps(ld_w16_tail(w, off + k, f16, m), _mm512_maskz_loadu_ps(m, x + k), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE void gemv4_avx512(const void *w, int64_t r, int64_t cols,
                                                          const float *x, float *y, int f16,
                                                          int pf) {
  __m512 acc[4][2];
  for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const int64_t row_bytes = cols * (f16 ? 2 : 4);
  const char *far = pf ? (const char *)w + (size_t)(r + PF_ROWS) * (size_t)row_bytes : NULL;
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
    __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
    if (pf) /* one 64-byte line of each of the 4 rows PF_ROWS on, per 64 bytes of a row */
      for (int i = 0; i < 4; i++)
        _mm_prefetch(far + i * row_bytes + k * (f16 ? 2 : 4), _MM_HINT_T1);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      acc[i][0] = _mm512_fmadd_ps(ld_w16(w, (r + i) * cols + k, f16), x0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ld_w16(w, (r + i) * cols + k + 16, f16), x1, acc[i][1]);
    }
  }
  for (; k < cols; k += 16) {
    __mmask16 m = cols - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - k)) - 1u);
    __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
      acc[i][0] = _mm512_fmadd_ps(ld_w16_tail(w, (r + i) * cols + k, f16, m), x0, acc[i][0]);
  }
  for (int i = 0; i < 4; i++) y[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
}

/* The sums of a, b, c and d in lanes 0..3: per 128-bit lane the four partial sums side by
 * side (two unpack rounds), then the four lanes added. */
WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m128 hsum4x16(__m512 a, __m512 b, __m512 c,
                                                             __m512 d) {
  __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  __m512 u = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))));
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0x4E));
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0xB1));
  return _mm512_castps512_ps128(u);
}

/* 4 rows x 6 tokens = 24 of the 32 zmm registers as accumulators. */
#define T_AVX512 6
WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE void gemm4x6_avx512(const weir_matmul_args *a, int64_t r,
                                                            int64_t t, int64_t k0, int64_t k1,
                                                            int accumulate, int f16, const int nt) {
  const int64_t cols = a->cols;
  const float *x = a->x + t * cols;
  __m512 acc[4][T_AVX512];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < nt; j++) acc[i][j] = _mm512_setzero_ps();
  int64_t k = k0;
  /* The rows two tiles on are fetched into L2 while this tile computes: a few-token batch
   * is bound by the FMA ports only while W arrives in time (it streams from L3 once the
   * weights outgrow L2, as the GEMV's do). */
  const int pf = r + 12 <= a->rows;
  const size_t row_bytes = (size_t)cols * (f16 ? 2 : 4);
  const char *far = pf ? (const char *)a->w + (size_t)(r + 8) * row_bytes : NULL;
  /* Plain loads in the loop (masked ones are slower on some cores); one masked tail. */
  for (; k + 16 <= k1; k += 16) {
    if (pf && ((k - k0) & 31) == 0)
      for (int i = 0; i < 4; i++)
        _mm_prefetch(far + i * row_bytes + (size_t)k * (f16 ? 2 : 4), _MM_HINT_T1);
    __m512 xv[T_AVX512];
#pragma GCC unroll 6
    for (int j = 0; j < nt; j++) xv[j] = _mm512_loadu_ps(x + j * cols + k);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      __m512 wv = ld_w16(a->w, (r + i) * cols + k, f16);
#pragma GCC unroll 6
      for (int j = 0; j < nt; j++) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (k < k1) {
    __mmask16 m = (__mmask16)((1u << (k1 - k)) - 1u);
    __m512 xv[T_AVX512];
#pragma GCC unroll 6
    for (int j = 0; j < nt; j++) xv[j] = _mm512_maskz_loadu_ps(m, x + j * cols + k);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      __m512 wv = ld_w16_tail(a->w, (r + i) * cols + k, f16, m);
#pragma GCC unroll 6
      for (int j = 0; j < nt; j++) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  /* The 4 rows' sums of each token at once (4 contiguous outputs): a quarter of the shuffles
   * of four separate reductions, which cost a batch of a few tokens a fifth of its time. */
#pragma GCC unroll 6
  for (int j = 0; j < nt; j++) {
    float *dst = &a->y[(t + j) * a->rows + r];
    __m128 v = hsum4x16(acc[0][j], acc[1][j], acc[2][j], acc[3][j]);
    if (accumulate) v = _mm_add_ps(v, _mm_loadu_ps(dst));
    _mm_storeu_ps(dst, v);
  }
}

/* One specialised copy of the micro-kernel per token count. */
WEIR_TARGET_AVX512 static void tile_avx512(const weir_matmul_args *a, int64_t r, int64_t t,
                                           int64_t k0, int64_t k1, int acc, int f16, int nt) {
  if (f16) {
    switch (nt) {
    case 1: gemm4x6_avx512(a, r, t, k0, k1, acc, 1, 1); break;
    case 2: gemm4x6_avx512(a, r, t, k0, k1, acc, 1, 2); break;
    case 3: gemm4x6_avx512(a, r, t, k0, k1, acc, 1, 3); break;
    case 4: gemm4x6_avx512(a, r, t, k0, k1, acc, 1, 4); break;
    case 5: gemm4x6_avx512(a, r, t, k0, k1, acc, 1, 5); break;
    default: gemm4x6_avx512(a, r, t, k0, k1, acc, 1, 6); break;
    }
  } else {
    switch (nt) {
    case 1: gemm4x6_avx512(a, r, t, k0, k1, acc, 0, 1); break;
    case 2: gemm4x6_avx512(a, r, t, k0, k1, acc, 0, 2); break;
    case 3: gemm4x6_avx512(a, r, t, k0, k1, acc, 0, 3); break;
    case 4: gemm4x6_avx512(a, r, t, k0, k1, acc, 0, 4); break;
    case 5: gemm4x6_avx512(a, r, t, k0, k1, acc, 0, 5); break;
    default: gemm4x6_avx512(a, r, t, k0, k1, acc, 0, 6); break;
    }
  }
}

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE void rows_avx512_impl(const weir_matmul_args *a,
                                                              int64_t r0, int64_t r1, int f16) {
  const int64_t n = a->n_tokens, cols = a->cols, rows = a->rows;
  int64_t rg_end = r0 + (r1 - r0) / 4 * 4;
  if (n == 1) {
    float tmp[4];
    for (int64_t r = r0; r < rg_end; r += 4) {
      gemv4_avx512(a->w, r, cols, a->x, tmp, f16, r + PF_ROWS + 4 <= rows);
      for (int i = 0; i < 4; i++) a->y[r + i] = tmp[i];
    }
  } else {
    /* Columns in slices of K_BLOCK so a block of many tokens' x fits in L2; each slice
     * of a 4-row W group is then reused from L1 for every token of the block. A batch of
     * a few tokens (batched decode) is one partial tile: W is still read once. */
    int64_t kb = cols < K_BLOCK || n * cols * 4 <= X_BLOCK_BYTES ? cols : K_BLOCK;
    int64_t tb = token_block(kb, T_AVX512);
    int64_t rb = W_BLOCK_BYTES / (kb * (f16 ? 2 : 4)) / 4 * 4;
    if (rb < 4) rb = 4;
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
      int64_t t1 = t0 + tb < n ? t0 + tb : n;
      for (int64_t k0 = 0; k0 < cols; k0 += kb) {
        int64_t k1 = k0 + kb < cols ? k0 + kb : cols;
        /* A block of rb W rows (<= W_BLOCK_BYTES of this slice) stays in L2 while every
         * token tile sweeps it; each tile's x (a few KiB) stays in L1 across the block. */
        for (int64_t rb0 = r0; rb0 < rg_end; rb0 += rb) {
          int64_t rb1 = rb0 + rb < rg_end ? rb0 + rb : rg_end;
          for (int64_t t = t0; t < t1; t += T_AVX512) {
            int nt = t1 - t < T_AVX512 ? (int)(t1 - t) : T_AVX512;
            for (int64_t r = rb0; r < rb1; r += 4) tile_avx512(a, r, t, k0, k1, k0 > 0, f16, nt);
          }
        }
      }
    }
  }
  for (int64_t r = rg_end; r < r1; r++)
    for (int64_t t = 0; t < n; t++)
      a->y[t * rows + r] = dot1_avx512(a->w, r * cols, a->x + t * cols, cols, f16);
}

WEIR_TARGET_AVX512 static void rows_avx512_f16(const weir_matmul_args *a, int64_t r0,
                                               int64_t r1) {
  rows_avx512_impl(a, r0, r1, 1);
}
WEIR_TARGET_AVX512 static void rows_avx512_f32(const weir_matmul_args *a, int64_t r0,
                                               int64_t r1) {
  rows_avx512_impl(a, r0, r1, 0);
}
#endif

void weir_matmul_rows(const weir_matmul_args *a, int64_t row_begin, int64_t row_end) {
  if (a->w_dtype != WEIR_DTYPE_F16 && a->w_dtype != WEIR_DTYPE_F32) return;
  if (row_begin < 0) row_begin = 0;
  if (row_end > a->rows) row_end = a->rows;
  if (row_begin >= row_end || a->n_tokens <= 0) return;
  int f16 = a->w_dtype == WEIR_DTYPE_F16;
  switch (weir_cpu_isa()) {
#if WEIR_X86
  case WEIR_CPU_ISA_AVX512:
    (f16 ? rows_avx512_f16 : rows_avx512_f32)(a, row_begin, row_end);
    return;
  case WEIR_CPU_ISA_AVX2:
    (f16 ? rows_avx2_f16 : rows_avx2_f32)(a, row_begin, row_end);
    return;
#endif
  default: rows_scalar(a, row_begin, row_end); return;
  }
}

void weir_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  weir_matmul_rows((const weir_matmul_args *)arg, begin, end);
}
