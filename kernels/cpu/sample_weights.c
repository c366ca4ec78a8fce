/* The weights of a temperature draw (see sample_weights.h), at each ISA level.
 *
 * Two passes over the row: the largest z (NaN ignored: max_ps keeps its second operand, the
 * accumulator, when the first is NaN; -inf never raises it), then the weights block by block,
 * each block's sum kept in two double accumulators. z - zmax is <= 0 for every entry that
 * counts, so the exp variant for non-positive inputs applies (-inf gives 0); NaN entries are
 * zeroed by an ordered compare of x with itself. Tails past the vector width use the portable
 * exp, the scalar level's. */
#include "sample_weights.h"

#include <math.h>

#include "cpu_isa.h"
#include "vec_exp.h"

/* The index of the last entry that is neither -inf nor NaN; -1 when none. */
static int64_t last_drawable(const float *x, int64_t n) {
  for (int64_t i = n - 1; i >= 0; i--)
    if (x[i] > -INFINITY) return i;
  return -1;
}

/* One weight by the scalar rule (the scalar level, and every level's tail). */
static inline float weight1(float x, float inv_t, float zmax) {
  const float z = x * inv_t; /* rounded before the subtraction, as the vector levels do */
  return x == x ? weir__exp_portable(z - zmax) : 0.0f;
}

static float zmax_scalar(const float *x, int64_t n, float inv_t) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    const float z = x[i] * inv_t;
    if (z > m) m = z;
  }
  return m;
}

static void weights_scalar(const float *x, int64_t n, float inv_t, float zmax, float *w,
                           double *bsum) {
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += WEIR_SAMPLE_BLOCK, bi++) {
    const int64_t end = n - b0 < WEIR_SAMPLE_BLOCK ? n : b0 + WEIR_SAMPLE_BLOCK;
    double s = 0.0;
    for (int64_t i = b0; i < end; i++) {
      w[i] = weight1(x[i], inv_t, zmax);
      s += (double)w[i];
    }
    bsum[bi] = s;
  }
}

#if WEIR_X86
WEIR_TARGET_AVX2 static float zmax_avx2(const float *x, int64_t n, float inv_t) {
  const __m256 vt = _mm256_set1_ps(inv_t), ninf = _mm256_set1_ps(-INFINITY);
  __m256 m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vt), m0);
    m1 = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vt), m1);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vt), m0);
  const __m256 v = _mm256_max_ps(m0, m1);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float m = _mm_cvtss_f32(h);
  for (; i < n; i++) {
    const float z = x[i] * inv_t;
    if (z > m) m = z;
  }
  return m;
}

WEIR_TARGET_AVX2 static void weights_avx2(const float *x, int64_t n, float inv_t, float zmax,
                                          float *w, double *bsum) {
  const __m256 vt = _mm256_set1_ps(inv_t), vm = _mm256_set1_ps(zmax);
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += WEIR_SAMPLE_BLOCK, bi++) {
    const int64_t end = n - b0 < WEIR_SAMPLE_BLOCK ? n : b0 + WEIR_SAMPLE_BLOCK;
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = b0;
    for (; i + 8 <= end; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
      __m256 e = weir__exp_nonpos_avx2(_mm256_sub_ps(_mm256_mul_ps(xv, vt), vm));
      e = _mm256_and_ps(e, _mm256_cmp_ps(xv, xv, _CMP_ORD_Q));
      _mm256_storeu_ps(w + i, e);
      s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
      s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < end; i++) {
      w[i] = weight1(x[i], inv_t, zmax);
      s += (double)w[i];
    }
    bsum[bi] = s;
  }
}

WEIR_TARGET_AVX512 static float zmax_avx512(const float *x, int64_t n, float inv_t) {
  const __m512 vt = _mm512_set1_ps(inv_t), ninf = _mm512_set1_ps(-INFINITY);
  __m512 m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vt), m0);
    m1 = _mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i + 16), vt), m1);
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vt), m0);
  /* the tail as -inf past n (a masked load reads nothing past x[n - 1]) */
  const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1u);
  if (tail) m1 = _mm512_max_ps(_mm512_mul_ps(_mm512_mask_loadu_ps(ninf, tail, x + i), vt), m1);
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

WEIR_TARGET_AVX512 static void weights_avx512(const float *x, int64_t n, float inv_t, float zmax,
                                              float *w, double *bsum) {
  const __m512 vt = _mm512_set1_ps(inv_t), vm = _mm512_set1_ps(zmax);
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += WEIR_SAMPLE_BLOCK, bi++) {
    const int64_t end = n - b0 < WEIR_SAMPLE_BLOCK ? n : b0 + WEIR_SAMPLE_BLOCK;
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int64_t i = b0;
    for (; i < end; i += 16) {
      const __mmask16 k =
          end - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (end - i)) - 1u);
      const __m512 xv = _mm512_maskz_loadu_ps(k, x + i);
      /* lanes past the block and NaN entries: 0 */
      const __mmask16 ok = _mm512_mask_cmp_ps_mask(k, xv, xv, _CMP_ORD_Q);
      const __m512 z = _mm512_sub_ps(_mm512_mul_ps(xv, vt), vm);
      const __m512 e = _mm512_maskz_mov_ps(ok, weir__exp_nonpos_avx512(z));
      _mm512_mask_storeu_ps(w + i, k, e);
      s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
      s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                 _mm512_castps_pd(e), 1))));
    }
    bsum[bi] = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  }
}
#endif

int64_t weir_sample_weights(const float *x, int64_t n, float inv_t, float *w, double *bsum,
                            float *zmax) {
  *zmax = -INFINITY;
  if (n <= 0) return -1;
  const int isa = weir_cpu_isa();
  float m;
#if WEIR_X86
  if (isa == WEIR_CPU_ISA_AVX512) m = zmax_avx512(x, n, inv_t);
  else if (isa == WEIR_CPU_ISA_AVX2) m = zmax_avx2(x, n, inv_t);
  else m = zmax_scalar(x, n, inv_t);
#else
  (void)isa;
  m = zmax_scalar(x, n, inv_t);
#endif
  *zmax = m;
  const int64_t last = last_drawable(x, n);
  if (!(m > -INFINITY) || !(m < INFINITY)) {
    /* nothing drawable (all 0), or an entry of +inf (the caller's other rule) */
    for (int64_t i = 0; i < n; i++) w[i] = 0.0f;
    for (int64_t b = 0; b < weir_sample_blocks(n); b++) bsum[b] = 0.0;
    return last;
  }
#if WEIR_X86
  if (isa == WEIR_CPU_ISA_AVX512) weights_avx512(x, n, inv_t, m, w, bsum);
  else if (isa == WEIR_CPU_ISA_AVX2) weights_avx2(x, n, inv_t, m, w, bsum);
  else weights_scalar(x, n, inv_t, m, w, bsum);
#else
  weights_scalar(x, n, inv_t, m, w, bsum);
#endif
  return last;
}

int64_t weir_sample_pick(const float *w, const double *bsum, int64_t n, double target) {
  const int64_t nb = weir_sample_blocks(n);
  double prefix = 0.0;
  for (int64_t b = 0; b < nb; b++) {
    if (prefix + bsum[b] > target) {
      const int64_t lo = b * WEIR_SAMPLE_BLOCK;
      const int64_t hi = n - lo < WEIR_SAMPLE_BLOCK ? n : lo + WEIR_SAMPLE_BLOCK;
      double cum = prefix;
      int64_t last = -1;
      for (int64_t i = lo; i < hi; i++) {
        if (w[i] > 0.0f) last = i;
        cum += (double)w[i];
        if (cum > target) return i;
      }
      return last; /* bsum[b] > 0: some weight of the block is */
    }
    prefix += bsum[b];
  }
  return -1;
}
