/* The greedy pick of a row (see argmax.h), at each ISA level.
 *
 * The vector levels take three passes over the row, which a draft or verification row of a
 * few thousand floats keeps in L1: the largest value with max (4 accumulators, NaN ignored:
 * max_ps returns its second operand, the accumulator, when the first is NaN), the first index
 * equal to it (compare and mask, stopping at the first hit), and, only when asked, the sum of
 * exp(x - max) on the shared vector exp. The exp was the whole cost of the engine's scalar
 * confidence (a libm expf per logit on every greedy draft pass). x - max is <= 0 or NaN, so
 * the exp variant for non-positive inputs applies (a largest value of +inf gives -inf - inf =
 * -inf for the finite ones, exp 0, and NaN for itself, so the sum is NaN and prob 0, as with
 * the scalar rule). Tails (n not a multiple of the vector width) run the scalar rule's steps
 * on the same values, so every level returns the same index. */
#include "argmax.h"

#include <math.h>

#include "cpu_isa.h"
#include "vec_exp.h"

/* 1 / sum when the sum is a number above 0, else 0 (NaN, or no pick). */
static float prob_of(float sum) { return sum > 0.0f ? 1.0f / sum : 0.0f; }

/* The reference: one strict > scan. The exps go through a block of 64, a loop the compiler
 * vectorises for its baseline (this file is built with -fno-trapping-math, so the exp's
 * clamps if-convert; a scalar exp per element was slower than libm's expf), then are summed
 * in index order. */
static int64_t argmax_scalar(const float *x, int64_t n, float *prob) {
  float bv = -INFINITY;
  int64_t bi = -1;
  for (int64_t i = 0; i < n; i++)
    if (x[i] > bv) {
      bv = x[i];
      bi = i;
    }
  if (prob) {
    float sum = 0.0f, e[64];
    for (int64_t i = 0; bi >= 0 && i < n; i += 64) {
      const int64_t len = n - i < 64 ? n - i : 64;
      for (int64_t j = 0; j < len; j++) e[j] = weir__exp_portable(x[i + j] - bv);
      for (int64_t j = 0; j < len; j++) sum += e[j];
    }
    *prob = bi >= 0 ? prob_of(sum) : 0.0f;
  }
  return bi;
}

#if WEIR_X86
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE float hmax_avx2(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

WEIR_TARGET_AVX2 static int64_t argmax_avx2(const float *x, int64_t n, float *prob) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  float m = hmax_avx2(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  for (; i < n; i++)
    if (x[i] > m) m = x[i];
  if (!(m > -INFINITY)) {
    if (prob) *prob = 0.0f;
    return -1;
  }
  const __m256 vm = _mm256_set1_ps(m);
  int64_t bi = -1;
  for (i = 0; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
    if (mask) {
      bi = i + __builtin_ctz((unsigned)mask);
      break;
    }
  }
  for (; bi < 0 && i < n; i++)
    if (x[i] == m) bi = i;
  if (prob) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
      s0 = _mm256_add_ps(s0, weir__exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
      s1 = _mm256_add_ps(s1,
                         weir__exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm)));
    }
    for (; i + 8 <= n; i += 8)
      s0 = _mm256_add_ps(s0, weir__exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
    float sum = hsum_avx2(_mm256_add_ps(s0, s1));
    for (; i < n; i++) sum += weir__exp_portable(x[i] - m);
    *prob = prob_of(sum);
  }
  return bi;
}

WEIR_TARGET_AVX512 static int64_t argmax_avx512(const float *x, int64_t n, float *prob) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
    m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
  /* The tail as -inf in the lanes past n (masked load: nothing past x[n - 1] is read). */
  const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1u);
  if (tail) m1 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail, x + i), m1);
  const float m =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
  if (!(m > -INFINITY)) {
    if (prob) *prob = 0.0f;
    return -1;
  }
  const __m512 vm = _mm512_set1_ps(m);
  int64_t bi = -1;
  for (i = 0; i + 16 <= n; i += 16) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vm, _CMP_EQ_OQ);
    if (eq) {
      bi = i + __builtin_ctz((unsigned)eq);
      break;
    }
  }
  if (bi < 0) { /* then i is the tail's start and the max is there */
    const __mmask16 eq =
        _mm512_mask_cmp_ps_mask(tail, _mm512_mask_loadu_ps(ninf, tail, x + i), vm, _CMP_EQ_OQ);
    bi = eq ? i + __builtin_ctz((unsigned)eq) : -1;
  }
  if (prob) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (i = 0; i + 32 <= n; i += 32) {
      s0 = _mm512_add_ps(s0, weir__exp_nonpos_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)));
      s1 = _mm512_add_ps(
          s1, weir__exp_nonpos_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm)));
    }
    for (; i + 16 <= n; i += 16)
      s0 = _mm512_add_ps(s0, weir__exp_nonpos_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm)));
    /* The tail: -inf past n gives exp 0 (and -inf - inf = -inf when m is +inf). */
    if (tail)
      s1 = _mm512_add_ps(s1, weir__exp_nonpos_avx512(_mm512_sub_ps(
                                 _mm512_mask_loadu_ps(ninf, tail, x + i), vm)));
    *prob = prob_of(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
  }
  return bi;
}
#endif

int64_t weir_argmax_f32(const float *x, int64_t n, float *prob) {
  if (n <= 0 || !x) {
    if (prob) *prob = 0.0f;
    return -1;
  }
#if WEIR_X86
  switch (weir_cpu_isa()) {
  case WEIR_CPU_ISA_AVX512: return argmax_avx512(x, n, prob);
  case WEIR_CPU_ISA_AVX2: return argmax_avx2(x, n, prob);
  default: break;
  }
#endif
  return argmax_scalar(x, n, prob);
}
