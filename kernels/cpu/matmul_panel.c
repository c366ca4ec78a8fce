/* Linear layers over W in 16-row panels: outer-product GEMV and GEMM (see matmul_panel.h). */
#include "matmul_panel.h"

#include <math.h>

#include "convert.h"
#include "cpu_isa.h"

#if WEIR_X86
#include <immintrin.h>
#endif

/* Bytes of x a token block may occupy (it stays in L2 while the panels sweep it). */
#define X_BLOCK_BYTES (256 * 1024)

/* Column slice for many tokens of long rows: a tile's panels' slice and x rows stay in L2.
 * An output's chain continues across slices through y (stored f32, loaded back), so the
 * slicing does not change a single rounding. */
#define K_BLOCK 1024

/* GEMV: bytes ahead in each panel's stream that are fetched into L1 (the weights stream
 * from L3 once a model outgrows L2; a few panels' short streams defeat the prefetcher). */
#define PF_DIST 1024

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- scalar: the same chain per output, with fmaf ----------------------------------------- */

static void panel_scalar(const weir_matmul_panel_args *a, int64_t p0, int64_t p1) {
  const int64_t cols = a->cols;
  const int f16 = a->w_dtype == WEIR_DTYPE_F16;
  const float *tab = f16 ? weir_f16_table() : NULL;
  for (int64_t p = p0; p < p1; p++) {
    const int64_t r0 = p * WEIR_PANEL_ROWS;
    const int lanes = (int)min64(WEIR_PANEL_ROWS, a->rows - r0);
    for (int64_t t = 0; t < a->n_tokens; t++) {
      const float *x = a->x + t * cols;
      float acc[WEIR_PANEL_ROWS] = {0};
      for (int64_t k = 0; k < cols; k++) {
        const int64_t base = (p * cols + k) * WEIR_PANEL_ROWS;
        for (int i = 0; i < lanes; i++) {
          float w = f16 ? tab[((const uint16_t *)a->w)[base + i]] : ((const float *)a->w)[base + i];
          acc[i] = fmaf(w, x[k], acc[i]);
        }
      }
      for (int i = 0; i < lanes; i++) a->y[t * a->rows + r0 + i] = acc[i];
    }
  }
}

#if WEIR_X86
/* ---- AVX-512: a panel is one register ------------------------------------------------------ */

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m512 pld16(const void *w, int64_t i, int f16) {
  if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
  return _mm512_loadu_ps((const float *)w + i);
}

/* NP panels x NT tokens of accumulators (NP * NT <= 24), columns [k0, k1). The panels are
 * p, p + 1, ...; tokens t, t + 1, ... . k0 > 0 continues the chains stored in y. */
WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE void ptile_avx512(const weir_matmul_panel_args *a,
                                                          int64_t p, int64_t t, int64_t k0,
                                                          int64_t k1, int f16, const int np,
                                                          const int nt) {
  const int64_t cols = a->cols, rows = a->rows;
  const int64_t pstride = cols * WEIR_PANEL_ROWS; /* elements from one panel to the next */
  __m512 acc[8][12];
  __mmask16 m[8];
  for (int i = 0; i < np; i++) {
    int64_t left = rows - (p + i) * WEIR_PANEL_ROWS;
    m[i] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
  }
  for (int i = 0; i < np; i++)
    for (int j = 0; j < nt; j++)
      acc[i][j] = k0 == 0 ? _mm512_setzero_ps()
                          : _mm512_maskz_loadu_ps(m[i], a->y + (t + j) * rows + (p + i) * 16);
  const int64_t wbase = p * pstride;
  const float *x = a->x + t * cols;
  /* A GEMV streams np panels side by side, each PF_DIST bytes ahead. */
  const int pf = nt == 1;
  const char *w0 = (const char *)a->w + (size_t)wbase * (f16 ? 2 : 4);
  const size_t pbytes = (size_t)pstride * (f16 ? 2 : 4);
  for (int64_t k = k0; k < k1; k++) {
    if (pf && (k & (f16 ? 1 : 0)) == 0) {
      size_t off = (size_t)k * 16 * (f16 ? 2 : 4) + PF_DIST;
      for (int i = 0; i < np; i++) _mm_prefetch(w0 + i * pbytes + off, _MM_HINT_T0);
    }
    __m512 w[8];
#pragma GCC unroll 8
    for (int i = 0; i < np; i++) w[i] = pld16(a->w, wbase + i * pstride + k * 16, f16);
#pragma GCC unroll 12
    for (int j = 0; j < nt; j++) {
      __m512 xb = _mm512_set1_ps(x[j * cols + k]);
#pragma GCC unroll 8
      for (int i = 0; i < np; i++) acc[i][j] = _mm512_fmadd_ps(w[i], xb, acc[i][j]);
    }
  }
  for (int i = 0; i < np; i++)
    for (int j = 0; j < nt; j++)
      _mm512_mask_storeu_ps(a->y + (t + j) * rows + (p + i) * 16, m[i], acc[i][j]);
}

#define PT_GEMM 12 /* tokens of a GEMM tile (2 panels x 12 tokens: 24 accumulators) */

WEIR_TARGET_AVX512 static void gemm_tile_avx512(const weir_matmul_panel_args *a, int64_t p,
                                                int np, int64_t t, int nt, int64_t k0,
                                                int64_t k1, int f16) {
#define NT_CASES(F16, NP)                                                                          \
  switch (nt) {                                                                                    \
  case 1: ptile_avx512(a, p, t, k0, k1, F16, NP, 1); break;                                        \
  case 2: ptile_avx512(a, p, t, k0, k1, F16, NP, 2); break;                                        \
  case 3: ptile_avx512(a, p, t, k0, k1, F16, NP, 3); break;                                        \
  case 4: ptile_avx512(a, p, t, k0, k1, F16, NP, 4); break;                                        \
  case 5: ptile_avx512(a, p, t, k0, k1, F16, NP, 5); break;                                        \
  case 6: ptile_avx512(a, p, t, k0, k1, F16, NP, 6); break;                                        \
  case 7: ptile_avx512(a, p, t, k0, k1, F16, NP, 7); break;                                        \
  case 8: ptile_avx512(a, p, t, k0, k1, F16, NP, 8); break;                                        \
  case 9: ptile_avx512(a, p, t, k0, k1, F16, NP, 9); break;                                        \
  case 10: ptile_avx512(a, p, t, k0, k1, F16, NP, 10); break;                                      \
  case 11: ptile_avx512(a, p, t, k0, k1, F16, NP, 11); break;                                      \
  default: ptile_avx512(a, p, t, k0, k1, F16, NP, 12); break;                                      \
  }
  if (f16) {
    if (np == 2) NT_CASES(1, 2) else NT_CASES(1, 1)
  } else {
    if (np == 2) NT_CASES(0, 2) else NT_CASES(0, 1)
  }
#undef NT_CASES
}

/* One token: 8 panels at a time (8 independent chains hide the FMA latency), then 4, 2, 1. */
WEIR_TARGET_AVX512 static void gemv_avx512(const weir_matmul_panel_args *a, int64_t p0,
                                           int64_t p1, int f16) {
  const int64_t cols = a->cols;
  int64_t p = p0;
  for (; p + 8 <= p1; p += 8)
    f16 ? ptile_avx512(a, p, 0, 0, cols, 1, 8, 1) : ptile_avx512(a, p, 0, 0, cols, 0, 8, 1);
  for (; p + 4 <= p1; p += 4)
    f16 ? ptile_avx512(a, p, 0, 0, cols, 1, 4, 1) : ptile_avx512(a, p, 0, 0, cols, 0, 4, 1);
  for (; p < p1; p++)
    f16 ? ptile_avx512(a, p, 0, 0, cols, 1, 1, 1) : ptile_avx512(a, p, 0, 0, cols, 0, 1, 1);
}

/* Two or three tokens: 4 panels a tile (8 or 12 chains), then single panels. */
WEIR_TARGET_AVX512 static void gemm_few_avx512(const weir_matmul_panel_args *a, int64_t p0,
                                               int64_t p1, int f16) {
  const int64_t cols = a->cols;
  const int nt = (int)a->n_tokens;
  int64_t p = p0;
  for (; p + 4 <= p1; p += 4) {
    if (f16) nt == 2 ? ptile_avx512(a, p, 0, 0, cols, 1, 4, 2) : ptile_avx512(a, p, 0, 0, cols, 1, 4, 3);
    else nt == 2 ? ptile_avx512(a, p, 0, 0, cols, 0, 4, 2) : ptile_avx512(a, p, 0, 0, cols, 0, 4, 3);
  }
  for (; p < p1; p++) gemm_tile_avx512(a, p, 1, 0, nt, 0, cols, f16);
}

WEIR_TARGET_AVX512 static void panel_avx512(const weir_matmul_panel_args *a, int64_t p0,
                                            int64_t p1) {
  const int f16 = a->w_dtype == WEIR_DTYPE_F16;
  const int64_t n = a->n_tokens, cols = a->cols;
  if (n == 1) {
    gemv_avx512(a, p0, p1, f16);
    return;
  }
  if (n <= 3) {
    gemm_few_avx512(a, p0, p1, f16);
    return;
  }
  /* Column slices where many tokens of long rows would not fit in L2; token blocks whose x
   * slice stays in L2 while every panel pair of the chunk sweeps it (each pair's slice is
   * then reused from L1 by every tile of the block). */
  const int64_t kb = cols <= K_BLOCK || n * cols * 4 <= X_BLOCK_BYTES ? cols : K_BLOCK;
  int64_t tb = X_BLOCK_BYTES / (kb * 4) / PT_GEMM * PT_GEMM;
  if (tb < PT_GEMM) tb = PT_GEMM;
  for (int64_t k0 = 0; k0 < cols; k0 += kb) {
    const int64_t k1 = min64(cols, k0 + kb);
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
      const int64_t t1 = min64(n, t0 + tb);
      for (int64_t p = p0; p < p1; p += 2) {
        const int np = p + 2 <= p1 ? 2 : 1;
        for (int64_t t = t0; t < t1; t += PT_GEMM)
          gemm_tile_avx512(a, p, np, t, (int)min64(PT_GEMM, t1 - t), k0, k1, f16);
      }
    }
  }
}

/* ---- AVX2: a panel is two registers -------------------------------------------------------- */

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE __m256 pld8(const void *w, int64_t i, int f16) {
  if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
  return _mm256_loadu_ps((const float *)w + i);
}

/* NP panels x NT tokens, 2 * NP * NT <= 12 accumulators; the chains as on AVX-512. A partial
 * last panel is computed whole (its padding rows are zero weights) through a stack row. */
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE void ptile_avx2(const weir_matmul_panel_args *a,
                                                      int64_t p, int64_t t, int64_t k0,
                                                      int64_t k1, int f16, const int np,
                                                      const int nt) {
  const int64_t cols = a->cols, rows = a->rows;
  const int64_t pstride = cols * WEIR_PANEL_ROWS;
  __m256 acc[4][6][2];
  for (int i = 0; i < np; i++)
    for (int j = 0; j < nt; j++) {
      if (k0 == 0) {
        acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
      } else {
        float tmp[16] = {0};
        int64_t r0 = (p + i) * 16;
        for (int l = 0; l < 16 && r0 + l < rows; l++) tmp[l] = a->y[(t + j) * rows + r0 + l];
        acc[i][j][0] = _mm256_loadu_ps(tmp);
        acc[i][j][1] = _mm256_loadu_ps(tmp + 8);
      }
    }
  const int64_t wbase = p * pstride;
  const float *x = a->x + t * cols;
  for (int64_t k = k0; k < k1; k++) {
    __m256 w[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < np; i++) {
      w[i][0] = pld8(a->w, wbase + i * pstride + k * 16, f16);
      w[i][1] = pld8(a->w, wbase + i * pstride + k * 16 + 8, f16);
    }
#pragma GCC unroll 6
    for (int j = 0; j < nt; j++) {
      __m256 xb = _mm256_broadcast_ss(x + j * cols + k);
#pragma GCC unroll 4
      for (int i = 0; i < np; i++) {
        acc[i][j][0] = _mm256_fmadd_ps(w[i][0], xb, acc[i][j][0]);
        acc[i][j][1] = _mm256_fmadd_ps(w[i][1], xb, acc[i][j][1]);
      }
    }
  }
  for (int i = 0; i < np; i++)
    for (int j = 0; j < nt; j++) {
      float tmp[16];
      _mm256_storeu_ps(tmp, acc[i][j][0]);
      _mm256_storeu_ps(tmp + 8, acc[i][j][1]);
      int64_t r0 = (p + i) * 16;
      for (int l = 0; l < 16 && r0 + l < rows; l++) a->y[(t + j) * rows + r0 + l] = tmp[l];
    }
}

#define PT_AVX2 6

WEIR_TARGET_AVX2 static void tile_avx2(const weir_matmul_panel_args *a, int64_t p, int64_t t,
                                       int nt, int64_t k0, int64_t k1, int f16) {
#define NT_CASES2(F16)                                                                             \
  switch (nt) {                                                                                    \
  case 1: ptile_avx2(a, p, t, k0, k1, F16, 1, 1); break;                                           \
  case 2: ptile_avx2(a, p, t, k0, k1, F16, 1, 2); break;                                           \
  case 3: ptile_avx2(a, p, t, k0, k1, F16, 1, 3); break;                                           \
  case 4: ptile_avx2(a, p, t, k0, k1, F16, 1, 4); break;                                           \
  case 5: ptile_avx2(a, p, t, k0, k1, F16, 1, 5); break;                                           \
  default: ptile_avx2(a, p, t, k0, k1, F16, 1, 6); break;                                          \
  }
  if (f16) NT_CASES2(1) else NT_CASES2(0)
#undef NT_CASES2
}

WEIR_TARGET_AVX2 static void panel_avx2(const weir_matmul_panel_args *a, int64_t p0, int64_t p1) {
  const int f16 = a->w_dtype == WEIR_DTYPE_F16;
  const int64_t n = a->n_tokens, cols = a->cols;
  if (n == 1) {
    int64_t p = p0;
    for (; p + 4 <= p1; p += 4)
      f16 ? ptile_avx2(a, p, 0, 0, cols, 1, 4, 1) : ptile_avx2(a, p, 0, 0, cols, 0, 4, 1);
    for (; p < p1; p++)
      f16 ? ptile_avx2(a, p, 0, 0, cols, 1, 1, 1) : ptile_avx2(a, p, 0, 0, cols, 0, 1, 1);
    return;
  }
  const int64_t kb = cols <= K_BLOCK || n * cols * 4 <= X_BLOCK_BYTES ? cols : K_BLOCK;
  int64_t tb = X_BLOCK_BYTES / (kb * 4) / PT_AVX2 * PT_AVX2;
  if (tb < PT_AVX2) tb = PT_AVX2;
  for (int64_t k0 = 0; k0 < cols; k0 += kb) {
    const int64_t k1 = min64(cols, k0 + kb);
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
      const int64_t t1 = min64(n, t0 + tb);
      for (int64_t p = p0; p < p1; p++)
        for (int64_t t = t0; t < t1; t += PT_AVX2)
          tile_avx2(a, p, t, (int)min64(PT_AVX2, t1 - t), k0, k1, f16);
    }
  }
}
#endif

void weir_matmul_panel_rows(const weir_matmul_panel_args *a, int64_t panel_begin,
                            int64_t panel_end) {
  if (a->w_dtype != WEIR_DTYPE_F16 && a->w_dtype != WEIR_DTYPE_F32) return;
  if (panel_begin < 0) panel_begin = 0;
  if (panel_end > weir_panel_count(a->rows)) panel_end = weir_panel_count(a->rows);
  if (panel_begin >= panel_end || a->n_tokens <= 0 || a->cols <= 0) return;
  switch (weir_cpu_isa()) {
#if WEIR_X86
  case WEIR_CPU_ISA_AVX512: panel_avx512(a, panel_begin, panel_end); return;
  case WEIR_CPU_ISA_AVX2: panel_avx2(a, panel_begin, panel_end); return;
#endif
  default: panel_scalar(a, panel_begin, panel_end); return;
  }
}

void weir_matmul_panel_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  weir_matmul_panel_rows((const weir_matmul_panel_args *)arg, begin, end);
}
