/* Paged attention core with online softmax (see attention.h). */
#include "attention.h"

#include <math.h>
#include <string.h>

#include "convert.h"
#include "cpu_isa.h"
#include "vec_exp.h"

#if WEIR_X86
#include <immintrin.h>
#endif

/* Per (query row, block) the work is three small kernels: scores against the block's keys
 * (vectorised across keys, reading K transposed so one vector holds 8 or 16 scores), the
 * exponentials (the shared vector exp of vec_exp.h), and the weighted sum of V rows into
 * the accumulator. */
typedef struct vec_ops {
  /* s[j] = q . K[j] for j < n, with kt = K transposed ([hd][ldk]) */
  void (*scores)(const float *q, const float *kt, int32_t ldk, int32_t hd, int32_t n, float *s);
  /* s[j] = exp(s[j] - m) for j < n; returns the sum */
  float (*exp_sum)(float *s, int32_t n, float m);
  /* acc[d] += sum_j p[j] * v[j * ldv + d] for d < hd */
  void (*pv)(float *acc, const float *p, const float *v, int32_t ldv, int32_t n, int32_t hd);
  void (*scal)(float *y, float alpha, int32_t n); /* y *= alpha */
  /* The same for 4 rows at once sharing the K / V loads (NULL: use the 1-row kernels);
   * q, s, p, acc are 4 rows with strides ldq, lds, lds, lda. */
  void (*scores4)(const float *q, size_t ldq, const float *kt, int32_t ldk, int32_t hd,
                  int32_t n, float *s, size_t lds);
  void (*pv4)(float *acc, size_t lda, const float *p, size_t lds, const float *v, int32_t ldv,
              int32_t n, int32_t hd);
  float (*max)(const float *s, int32_t n); /* the largest of s[0..n), n >= 1 */
} vec_ops;

static void scores_scalar(const float *q, const float *kt, int32_t ldk, int32_t hd, int32_t n,
                          float *s) {
  for (int32_t j = 0; j < n; j++) s[j] = 0.0f;
  for (int32_t d = 0; d < hd; d++) {
    const float qd = q[d], *row = kt + (size_t)d * ldk;
    for (int32_t j = 0; j < n; j++) s[j] += qd * row[j];
  }
}
static float exp_sum_scalar(float *s, int32_t n, float m) {
  float sum = 0.0f;
  for (int32_t j = 0; j < n; j++) {
    s[j] = weir__exp_portable(s[j] - m);
    sum += s[j];
  }
  return sum;
}
static void pv_scalar(float *acc, const float *p, const float *v, int32_t ldv, int32_t n,
                      int32_t hd) {
  for (int32_t j = 0; j < n; j++) {
    const float pj = p[j], *row = v + (size_t)j * ldv;
    for (int32_t d = 0; d < hd; d++) acc[d] += pj * row[d];
  }
}
static void scores4_scalar(const float *q, size_t ldq, const float *kt, int32_t ldk, int32_t hd,
                           int32_t n, float *s, size_t lds) {
  for (int r = 0; r < 4; r++)
    for (int32_t j = 0; j < n; j++) s[r * lds + j] = 0.0f;
  for (int32_t d = 0; d < hd; d++) {
    const float *row = kt + (size_t)d * ldk;
    for (int r = 0; r < 4; r++) {
      const float qd = q[r * ldq + d];
      float *sr = s + r * lds;
      for (int32_t j = 0; j < n; j++) sr[j] += qd * row[j];
    }
  }
}
static void pv4_scalar(float *acc, size_t lda, const float *p, size_t lds, const float *v,
                       int32_t ldv, int32_t n, int32_t hd) {
  for (int32_t j = 0; j < n; j++) {
    const float *row = v + (size_t)j * ldv;
    for (int r = 0; r < 4; r++) {
      const float pj = p[r * lds + j];
      float *ar = acc + r * lda;
      for (int32_t d = 0; d < hd; d++) ar[d] += pj * row[d];
    }
  }
}
static float max_scalar(const float *s, int32_t n) {
  float m = s[0];
  for (int32_t j = 1; j < n; j++) m = s[j] > m ? s[j] : m;
  return m;
}
static void scal_scalar(float *y, float alpha, int32_t n) {
  for (int32_t i = 0; i < n; i++) y[i] *= alpha;
}

#if WEIR_X86
WEIR_TARGET_AVX2 static void scores_avx2(const float *q, const float *kt, int32_t ldk,
                                         int32_t hd, int32_t n, float *s) {
  int32_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d++) {
      __m256 qd = _mm256_set1_ps(q[d]);
      a0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + (size_t)d * ldk + j), a0);
      a1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + (size_t)d * ldk + j + 8), a1);
    }
    _mm256_storeu_ps(s + j, a0);
    _mm256_storeu_ps(s + j + 8, a1);
  }
  /* ldk is padded to 16, so reading 8 past a short tail stays inside the row */
  for (; j < n; j += 8) {
    __m256 a0 = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d++)
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(q[d]), _mm256_loadu_ps(kt + (size_t)d * ldk + j), a0);
    float tmp[8];
    _mm256_storeu_ps(tmp, a0);
    for (int32_t t = 0; t < 8 && j + t < n; t++) s[j + t] = tmp[t];
  }
}
WEIR_TARGET_AVX2 static float exp_sum_avx2(float *s, int32_t n, float m) {
  __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 e = weir__exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  float tot = 0.0f, tmp[8];
  _mm256_storeu_ps(tmp, sum);
  for (int t = 0; t < 8; t++) tot += tmp[t];
  if (j < n) {
    float in[8] = {0};
    for (int32_t t = 0; j + t < n; t++) in[t] = s[j + t];
    _mm256_storeu_ps(tmp, weir__exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(in), mv)));
    for (int32_t t = 0; j + t < n; t++) {
      s[j + t] = tmp[t];
      tot += tmp[t];
    }
  }
  return tot;
}
WEIR_TARGET_AVX2 static void pv_avx2(float *acc, const float *p, const float *v, int32_t ldv,
                                     int32_t n, int32_t hd) {
  int32_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8);
    for (int32_t j = 0; j < n; j++) {
      __m256 pj = _mm256_set1_ps(p[j]);
      a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + (size_t)j * ldv + d), a0);
      a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + (size_t)j * ldv + d + 8), a1);
    }
    _mm256_storeu_ps(acc + d, a0);
    _mm256_storeu_ps(acc + d + 8, a1);
  }
  for (; d + 8 <= hd; d += 8) {
    __m256 a0 = _mm256_loadu_ps(acc + d);
    for (int32_t j = 0; j < n; j++)
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + (size_t)j * ldv + d), a0);
    _mm256_storeu_ps(acc + d, a0);
  }
  for (; d < hd; d++)
    for (int32_t j = 0; j < n; j++) acc[d] += p[j] * v[(size_t)j * ldv + d];
}
WEIR_TARGET_AVX2 static void scal_avx2(float *y, float alpha, int32_t n) {
  __m256 av = _mm256_set1_ps(alpha);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] *= alpha;
}

WEIR_TARGET_AVX2 static float max_avx2(const float *s, int32_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
  float tmp[8], r = -INFINITY;
  _mm256_storeu_ps(tmp, m);
  for (int t = 0; t < 8; t++) r = tmp[t] > r ? tmp[t] : r;
  for (; j < n; j++) r = s[j] > r ? s[j] : r;
  return r;
}

static inline __mmask16 tail16(int32_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

WEIR_TARGET_AVX512 static float max_avx512(const float *s, int32_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int32_t j = 0; j < n; j += 16)
    m = _mm512_mask_max_ps(m, tail16(n - j), m, _mm512_maskz_loadu_ps(tail16(n - j), s + j));
  return _mm512_reduce_max_ps(m);
}

WEIR_TARGET_AVX512 static void scores_avx512(const float *q, const float *kt, int32_t ldk,
                                             int32_t hd, int32_t n, float *s) {
  for (int32_t j = 0; j < n; j += 16) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int32_t d = 0;
    /* ldk is a multiple of 16: full-width loads stay inside the padded row */
    for (; d + 2 <= hd; d += 2) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(kt + (size_t)d * ldk + j), a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]),
                           _mm512_loadu_ps(kt + (size_t)(d + 1) * ldk + j), a1);
    }
    if (d < hd)
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(kt + (size_t)d * ldk + j), a0);
    _mm512_mask_storeu_ps(s + j, tail16(n - j), _mm512_add_ps(a0, a1));
  }
}
WEIR_TARGET_AVX512 static float exp_sum_avx512(float *s, int32_t n, float m) {
  __m512 mv = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
  for (int32_t j = 0; j < n; j += 16) {
    __mmask16 k = tail16(n - j);
    __m512 e = weir__exp_nonpos_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv));
    _mm512_mask_storeu_ps(s + j, k, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
  }
  return _mm512_reduce_add_ps(sum);
}
WEIR_TARGET_AVX512 static void pv_avx512(float *acc, const float *p, const float *v, int32_t ldv,
                                         int32_t n, int32_t hd) {
  int32_t d = 0;
  for (; d + 32 <= hd; d += 32) {
    __m512 a0 = _mm512_loadu_ps(acc + d), a1 = _mm512_loadu_ps(acc + d + 16);
    for (int32_t j = 0; j < n; j++) {
      __m512 pj = _mm512_set1_ps(p[j]);
      a0 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v + (size_t)j * ldv + d), a0);
      a1 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v + (size_t)j * ldv + d + 16), a1);
    }
    _mm512_storeu_ps(acc + d, a0);
    _mm512_storeu_ps(acc + d + 16, a1);
  }
  for (; d < hd; d += 16) {
    __mmask16 k = tail16(hd - d);
    __m512 a0 = _mm512_maskz_loadu_ps(k, acc + d);
    for (int32_t j = 0; j < n; j++)
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_maskz_loadu_ps(k, v + (size_t)j * ldv + d), a0);
    _mm512_mask_storeu_ps(acc + d, k, a0);
  }
}
WEIR_TARGET_AVX512 static void scal_avx512(float *y, float alpha, int32_t n) {
  __m512 av = _mm512_set1_ps(alpha);
  for (int32_t i = 0; i < n; i += 16) {
    __mmask16 k = tail16(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(k, y + i)));
  }
}
/* 4 rows x 16 keys, two accumulators per row: 8 independent FMA chains per key vector. */
WEIR_TARGET_AVX512 static void scores4_avx512(const float *q, size_t ldq, const float *kt,
                                              int32_t ldk, int32_t hd, int32_t n, float *s,
                                              size_t lds) {
  for (int32_t j = 0; j < n; j += 16) {
    __m512 a[4][2];
    for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();
    int32_t d = 0;
    for (; d + 2 <= hd; d += 2) {
      __m512 k0 = _mm512_loadu_ps(kt + (size_t)d * ldk + j);
      __m512 k1 = _mm512_loadu_ps(kt + (size_t)(d + 1) * ldk + j);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {
        a[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d]), k0, a[r][0]);
        a[r][1] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d + 1]), k1, a[r][1]);
      }
    }
    if (d < hd) {
      __m512 k0 = _mm512_loadu_ps(kt + (size_t)d * ldk + j);
      for (int r = 0; r < 4; r++) a[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d]), k0, a[r][0]);
    }
    for (int r = 0; r < 4; r++)
      _mm512_mask_storeu_ps(s + r * lds + j, tail16(n - j), _mm512_add_ps(a[r][0], a[r][1]));
  }
}

/* 4 rows x 32 dims of the accumulator in 8 registers; each V vector is loaded once. Full
 * 32-wide slices use plain loads (masked loads in a hot loop are slow on some cores). */
WEIR_TARGET_AVX512 static void pv4_avx512(float *acc, size_t lda, const float *p, size_t lds,
                                          const float *v, int32_t ldv, int32_t n, int32_t hd) {
  int32_t d = 0;
  for (; d + 32 <= hd; d += 32) {
    __m512 a[4][2];
    for (int r = 0; r < 4; r++) {
      a[r][0] = _mm512_loadu_ps(acc + r * lda + d);
      a[r][1] = _mm512_loadu_ps(acc + r * lda + d + 16);
    }
    for (int32_t j = 0; j < n; j++) {
      __m512 v0 = _mm512_loadu_ps(v + (size_t)j * ldv + d);
      __m512 v1 = _mm512_loadu_ps(v + (size_t)j * ldv + d + 16);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {
        __m512 pj = _mm512_set1_ps(p[r * lds + j]);
        a[r][0] = _mm512_fmadd_ps(pj, v0, a[r][0]);
        a[r][1] = _mm512_fmadd_ps(pj, v1, a[r][1]);
      }
    }
    for (int r = 0; r < 4; r++) {
      _mm512_storeu_ps(acc + r * lda + d, a[r][0]);
      _mm512_storeu_ps(acc + r * lda + d + 16, a[r][1]);
    }
  }
  for (; d < hd; d += 16) {
    __mmask16 k0 = tail16(hd - d);
    __m512 a[4];
    for (int r = 0; r < 4; r++) a[r] = _mm512_maskz_loadu_ps(k0, acc + r * lda + d);
    for (int32_t j = 0; j < n; j++) {
      __m512 v0 = _mm512_maskz_loadu_ps(k0, v + (size_t)j * ldv + d);
      for (int r = 0; r < 4; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * lds + j]), v0, a[r]);
    }
    for (int r = 0; r < 4; r++) _mm512_mask_storeu_ps(acc + r * lda + d, k0, a[r]);
  }
}

/* AVX2: 4 rows x 8 keys per pass. */
WEIR_TARGET_AVX2 static void scores4_avx2(const float *q, size_t ldq, const float *kt,
                                          int32_t ldk, int32_t hd, int32_t n, float *s,
                                          size_t lds) {
  for (int32_t j = 0; j < n; j += 8) {
    __m256 a[4][2];
    for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
    int32_t d = 0;
    for (; d + 2 <= hd; d += 2) {
      __m256 k0 = _mm256_loadu_ps(kt + (size_t)d * ldk + j);
      __m256 k1 = _mm256_loadu_ps(kt + (size_t)(d + 1) * ldk + j);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {
        a[r][0] = _mm256_fmadd_ps(_mm256_set1_ps(q[r * ldq + d]), k0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(_mm256_set1_ps(q[r * ldq + d + 1]), k1, a[r][1]);
      }
    }
    if (d < hd) {
      __m256 k0 = _mm256_loadu_ps(kt + (size_t)d * ldk + j);
      for (int r = 0; r < 4; r++) a[r][0] = _mm256_fmadd_ps(_mm256_set1_ps(q[r * ldq + d]), k0, a[r][0]);
    }
    for (int r = 0; r < 4; r++) {
      float tmp[8];
      _mm256_storeu_ps(tmp, _mm256_add_ps(a[r][0], a[r][1]));
      for (int32_t t = 0; t < 8 && j + t < n; t++) s[r * lds + j + t] = tmp[t];
    }
  }
}

WEIR_TARGET_AVX2 static void pv4_avx2(float *acc, size_t lda, const float *p, size_t lds,
                                      const float *v, int32_t ldv, int32_t n, int32_t hd) {
  int32_t d = 0;
  for (; d + 16 <= hd; d += 16) {
    __m256 a[4][2];
    for (int r = 0; r < 4; r++) {
      a[r][0] = _mm256_loadu_ps(acc + r * lda + d);
      a[r][1] = _mm256_loadu_ps(acc + r * lda + d + 8);
    }
    for (int32_t j = 0; j < n; j++) {
      __m256 v0 = _mm256_loadu_ps(v + (size_t)j * ldv + d);
      __m256 v1 = _mm256_loadu_ps(v + (size_t)j * ldv + d + 8);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {
        __m256 pj = _mm256_set1_ps(p[r * lds + j]);
        a[r][0] = _mm256_fmadd_ps(pj, v0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(pj, v1, a[r][1]);
      }
    }
    for (int r = 0; r < 4; r++) {
      _mm256_storeu_ps(acc + r * lda + d, a[r][0]);
      _mm256_storeu_ps(acc + r * lda + d + 8, a[r][1]);
    }
  }
  if (d < hd)
    for (int r = 0; r < 4; r++) pv_avx2(acc + r * lda + d, p + r * lds, v + d, ldv, n, hd - d);
}
#endif

#if WEIR_X86
/* K rows of a block (f16, `stride` bytes apart) transposed into kt[d][o] (row stride ldk)
 * 16 tokens x 16 dimensions at a time: 16 row loads, a 16x16 transpose in registers (unpack,
 * shuffle within 128-bit lanes, then across lanes) and 16 row stores, where the scalar scatter
 * costs one store per value. Rows past ntok up to the next 16 are written as zeros (kt's
 * padding must stay finite). Needs hd % 16 == 0 and ldk >= ntok rounded up to 16. */
WEIR_TARGET_AVX512 static void kt_f16_avx512(const uint8_t *k0, size_t stride, int32_t ntok,
                                             int32_t hd, float *kt, size_t ldk) {
  for (int32_t o0 = 0; o0 < ntok; o0 += 16) {
    const int32_t n = ntok - o0 < 16 ? ntok - o0 : 16;
    for (int32_t d0 = 0; d0 < hd; d0 += 16) {
      __m512 r[16], t[16];
      for (int i = 0; i < 16; i++)
        r[i] = i < n ? _mm512_cvtph_ps(_mm256_loadu_si256(
                           (const __m256i *)(k0 + (size_t)(o0 + i) * stride + 2 * (size_t)d0)))
                     : _mm512_setzero_ps();
      for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      /* r[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j */
      for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
      }
      for (int j = 0; j < 4; j++) {
        __m512 s0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44);
        __m512 s1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
        __m512 s2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
        __m512 s3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
        float *col = kt + (size_t)d0 * ldk + o0;
        _mm512_storeu_ps(col + (size_t)j * ldk, _mm512_shuffle_f32x4(s0, s2, 0x88));
        _mm512_storeu_ps(col + (size_t)(4 + j) * ldk, _mm512_shuffle_f32x4(s0, s2, 0xDD));
        _mm512_storeu_ps(col + (size_t)(8 + j) * ldk, _mm512_shuffle_f32x4(s1, s3, 0x88));
        _mm512_storeu_ps(col + (size_t)(12 + j) * ldk, _mm512_shuffle_f32x4(s1, s3, 0xDD));
      }
    }
  }
}
#endif

static vec_ops pick_ops(void) {
  switch (weir_cpu_isa()) {
#if WEIR_X86
  case WEIR_CPU_ISA_AVX512:
    return (vec_ops){scores_avx512, exp_sum_avx512, pv_avx512, scal_avx512, scores4_avx512,
                     pv4_avx512, max_avx512};
  case WEIR_CPU_ISA_AVX2:
    return (vec_ops){scores_avx2, exp_sum_avx2, pv_avx2, scal_avx2, scores4_avx2, pv4_avx2,
                     max_avx2};
#endif
  default:
    return (vec_ops){scores_scalar, exp_sum_scalar, pv_scalar, scal_scalar, scores4_scalar,
                     pv4_scalar, max_scalar};
  }
}

/* Keys per tile: the online softmax takes its running max, rescales and sums once per tile,
 * not once per cache block, so a tile spans several blocks (kv_tile_blocks of them). Tiles
 * start at multiples of the tile's length in the sequence's positions, whatever the query
 * range, so a query's arithmetic (which keys share a tile, in what order) does not depend on
 * the other queries of its task: a row decoded alone and the same row in a verification step
 * give bit-identical results. A block size that is not a multiple of 16 keeps tiles of one
 * block (the 16-column K transposes would spill into the next block's columns). */
#define TILE_KEYS 128
static int32_t kv_tile_blocks(int32_t block_size) {
  if (block_size % 16 != 0 || block_size >= TILE_KEYS) return 1;
  return TILE_KEYS / block_size;
}

/* Scratch layout, each region rounded up to 16 floats so rows stay 64-byte aligned when the
 * scratch is: kt [head_dim][tp] (a tile's K transposed), vf [tile][hd16]; qs, acc
 * [rows][hd16]; m, l [rows]; s [4][tp] (scores of up to 4 rows); tp = tile keys rounded up
 * to 16. */
static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

size_t weir_attn_cpu_scratch_floats(int32_t q_len, int32_t n_group, int32_t head_dim,
                                    int32_t block_size) {
  size_t rows = (size_t)q_len * (size_t)n_group, hd = up16((size_t)head_dim);
  size_t tile = (size_t)kv_tile_blocks(block_size) * (size_t)block_size, tp = up16(tile);
  return (size_t)head_dim * tp + tile * hd + 2 * rows * hd + 2 * up16(rows) + 4 * tp;
}

/* One cache block's K (transposed into kt's columns from col) and V (rows of vf from col,
 * unless the cache is f32, read in place) as f32. kt's row stride is ldk. */
static void load_block(const weir_attn_cpu_args *a, const uint8_t *blk, int32_t ntok,
                       float *kt, size_t ldk, float *vf, size_t hdp, float *tmp, size_t tmp_len) {
  const int32_t hd = a->head_dim;
  int k_done = 0;
#if WEIR_X86
  if (a->kv_f16 && !a->kv_i8 && hd % 16 == 0 && weir_cpu_isa() == WEIR_CPU_ISA_AVX512) {
    kt_f16_avx512(blk + a->k_offset, a->token_stride, ntok, hd, kt, ldk);
    k_done = 1;
  }
#endif
  for (int32_t o = 0; o < ntok && !k_done; o++) {
    const uint8_t *kp = blk + a->k_offset + o * a->token_stride;
    const float *krow = (const float *)kp;
    if (a->kv_i8) {
      const int8_t *kq = (const int8_t *)kp;
      float ks;
      memcpy(&ks, blk + a->k_scale_offset + (size_t)o * sizeof(float), sizeof ks);
      for (int32_t d = 0; d < hd; d++) kt[(size_t)d * ldk + o] = (float)kq[d] * ks;
    } else if (a->kv_f16) {
      /* tmp holds tmp_len floats; convert K in pieces that fit */
      for (int32_t d0 = 0; d0 < hd; d0 += (int32_t)tmp_len) {
        int32_t len = hd - d0 < (int32_t)tmp_len ? hd - d0 : (int32_t)tmp_len;
        weir_f16_to_f32_row((const uint16_t *)kp + d0, tmp, len);
        for (int32_t d = 0; d < len; d++) kt[(size_t)(d0 + d) * ldk + o] = tmp[d];
      }
    } else {
      for (int32_t d = 0; d < hd; d++) kt[(size_t)d * ldk + o] = krow[d];
    }
  }
  if (a->kv_i8) {
    for (int32_t o = 0; o < ntok; o++) {
      const int8_t *vq = (const int8_t *)(blk + a->v_offset + o * a->token_stride);
      float vs;
      memcpy(&vs, blk + a->v_scale_offset + (size_t)o * sizeof(float), sizeof vs);
      float *dst = vf + o * hdp;
      for (int32_t d = 0; d < hd; d++) dst[d] = (float)vq[d] * vs;
    }
  } else if (a->kv_f16) {
    if ((size_t)hd == hdp && a->token_stride == (size_t)hd * 2) {
      /* the block's V rows are contiguous and vf's rows unpadded: one conversion */
      weir_f16_to_f32_row((const uint16_t *)(blk + a->v_offset), vf, (int64_t)ntok * hd);
    } else {
      for (int32_t o = 0; o < ntok; o++)
        weir_f16_to_f32_row((const uint16_t *)(blk + a->v_offset + o * a->token_stride),
                            vf + o * hdp, hd);
    }
  }
}

void weir_attn_cpu_run(const weir_attn_cpu_args *a) {
  const vec_ops ops = pick_ops();
  const int32_t hd = a->head_dim, bs = a->block_size;
  const int32_t tile_blocks = kv_tile_blocks(bs), tile = tile_blocks * bs;
  const size_t hdp = up16((size_t)hd), tp = up16((size_t)tile);
  const int32_t rows = a->q_len * a->n_group;
  float *kt = a->scratch;
  float *vf = kt + (size_t)hd * tp;
  float *qs = vf + (size_t)tile * hdp;
  float *acc = qs + (size_t)rows * hdp;
  float *mrow = acc + (size_t)rows * hdp;
  float *lrow = mrow + up16((size_t)rows);
  float *s = lrow + up16((size_t)rows);
  const int v_in_place = !a->kv_f16 && !a->kv_i8;

  /* The scale is folded into q once instead of into every score. */
  for (int32_t i = 0; i < a->q_len; i++)
    for (int32_t g = 0; g < a->n_group; g++) {
      float *dst = qs + (size_t)(i * a->n_group + g) * hdp;
      const float *src = a->q + i * a->q_stride + (int64_t)g * hd;
      for (int32_t d = 0; d < hd; d++) dst[d] = src[d] * a->scale;
    }
  for (int32_t r = 0; r < rows; r++) {
    mrow[r] = -INFINITY;
    lrow[r] = 0.0f;
    memset(acc + (size_t)r * hdp, 0, (size_t)hd * sizeof(float));
  }
  /* Padding columns of kt (and the columns of blocks a window skips) are read by full-width
   * loads; keep them finite. */
  memset(kt, 0, (size_t)hd * tp * sizeof(float));

  const int32_t last_pos = a->first_pos + a->q_len - 1;
  const int32_t n_blocks = last_pos / bs + 1;
  /* A sliding window: query i sees positions from lo_pos(i) = first_pos + i - window + 1 on,
   * so blocks wholly before the first query's window are skipped, never read. */
  const int32_t win = a->window > 0 ? a->window : 0;
  const int32_t first_lo = win && a->first_pos - win + 1 > 0 ? a->first_pos - win + 1 : 0;
  const int32_t first_block = first_lo / bs;
  const float cap = a->softcap > 0.0f ? a->softcap : 0.0f, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
  for (int32_t tb = first_block / tile_blocks * tile_blocks; tb < n_blocks; tb += tile_blocks) {
    const int32_t tok0 = tb * bs;
    const int32_t tend = tb + tile_blocks < n_blocks ? tb + tile_blocks : n_blocks;
    const int32_t ntok = last_pos + 1 - tok0 < tile ? last_pos + 1 - tok0 : tile;
    /* K transposed into kt, V as f32 rows (read in place when the cache is f32, whose
     * blocks are not adjacent: then a tile is walked block by block below). */
    for (int32_t b = tb > first_block ? tb : first_block; b < tend; b++) {
      const uint8_t *blk = a->kv_base + (size_t)a->block_table[b] * a->block_bytes;
      const int32_t col = (b - tb) * bs;
      const int32_t nb = ntok - col < bs ? ntok - col : bs;
      load_block(a, blk, nb, kt + col, tp, vf + (size_t)col * hdp, hdp, s, tp);
    }
    /* Queries before this tile's first position see none of it. */
    int32_t i_first = tok0 - a->first_pos > 0 ? tok0 - a->first_pos : 0;
    for (int32_t i = i_first; i < a->q_len; i++) {
      const int32_t pos = a->first_pos + i;
      const int32_t nvalid = pos - tok0 + 1 < ntok ? pos - tok0 + 1 : ntok;
      /* Keys [lo, nvalid) of this tile are in the query's window. */
      const int32_t lo = win && pos - win + 1 - tok0 > 0 ? pos - win + 1 - tok0 : 0;
      if (lo >= nvalid) continue;
      const int32_t nk = nvalid - lo;
      const float *ktw = kt + lo;
      for (int32_t g = 0; g < a->n_group;) {
        /* Four heads of the group at once when the ISA has the 4-row kernels: they see
         * the same keys (same query position), so K and V loads are shared. */
        const int32_t r0 = i * a->n_group + g;
        const int nr = ops.scores4 && a->n_group - g >= 4 ? 4 : 1;
        if (nr == 4)
          ops.scores4(qs + (size_t)r0 * hdp, hdp, ktw, (int32_t)tp, hd, nk, s, tp);
        else
          ops.scores(qs + (size_t)r0 * hdp, ktw, (int32_t)tp, hd, nk, s);
        for (int k = 0; k < nr; k++) {
          const int32_t r = r0 + k;
          float *sr = s + (size_t)k * tp;
          if (cap > 0.0f)
            for (int32_t o = 0; o < nk; o++) sr[o] = cap * tanhf(sr[o] * inv_cap);
          const float bm = ops.max(sr, nk);
          if (bm > mrow[r]) {
            /* New running max: rescale what was accumulated under the old one. */
            if (mrow[r] != -INFINITY) {
              float f = weir__exp_portable(mrow[r] - bm);
              ops.scal(acc + (size_t)r * hdp, f, hd);
              lrow[r] *= f;
            }
            mrow[r] = bm;
          }
          lrow[r] += ops.exp_sum(sr, nk, mrow[r]);
        }
        /* The weighted V rows, block by block where V is read in place. */
        for (int32_t c0 = lo; c0 < nvalid;) {
          const float *vw;
          int32_t vstride, c1;
          if (v_in_place) {
            const int32_t b = tb + c0 / bs;
            c1 = (c0 / bs + 1) * bs < nvalid ? (c0 / bs + 1) * bs : nvalid;
            vstride = (int32_t)(a->token_stride / sizeof(float));
            vw = (const float *)(a->kv_base + (size_t)a->block_table[b] * a->block_bytes +
                                 a->v_offset) +
                 (size_t)(c0 % bs) * (size_t)vstride;
          } else {
            c1 = nvalid;
            vstride = (int32_t)hdp;
            vw = vf + (size_t)c0 * hdp;
          }
          if (nr == 4)
            ops.pv4(acc + (size_t)r0 * hdp, hdp, s + (c0 - lo), tp, vw, vstride, c1 - c0, hd);
          else
            ops.pv(acc + (size_t)r0 * hdp, s + (c0 - lo), vw, vstride, c1 - c0, hd);
          c0 = c1;
        }
        g += nr;
      }
    }
  }

  for (int32_t i = 0; i < a->q_len; i++)
    for (int32_t g = 0; g < a->n_group; g++) {
      const int32_t r = i * a->n_group + g;
      float *dst = a->out + i * a->q_stride + (int64_t)g * hd;
      const float *ar = acc + (size_t)r * hdp;
      float inv = lrow[r] > 0.0f ? 1.0f / lrow[r] : 0.0f;
      for (int32_t d = 0; d < hd; d++) dst[d] = ar[d] * inv;
    }
}
