/* weir CPU kernels: the one exp(x) for f32 that every CPU kernel needing exp shares
 * (attention's online softmax, SwiGLU, GeGLU), at each ISA level of cpu_isa.h: portable C
 * (the scalar level; the compiler vectorises it for its baseline), AVX2 + FMA and AVX-512.
 *
 * Method (the classic Cephes expf reduction and polynomial): n = round(x / ln2), r = x - n ln2
 * with ln2 split in two (Cody-Waite) so r is exact to float precision, |r| <= ln2/2;
 * e^r = 1 + r + r^2 P(r) with P Cephes' degree-5 minimax polynomial, evaluated by Horner's rule
 * down to the constant (7 FMAs); the result is e^r * 2^n. Error against the correctly rounded
 * exp: at most 2 ulp over the whole float range (tests/kernels asserts the bound over a dense
 * sweep at every level; measured 0.86 ulp with FMA, 1.15 without).
 *
 * Range: every float input is valid. x is first clamped to [-105, 89] (NaN passes through the
 * clamps: the min/max below keep their second operand, x, when it is NaN), then 2^n is applied
 * as two factors 2^(n/2) 2^(n - n/2) (or with scalef), each a normal float, so that
 *   x > ln(FLT_MAX) ~ 88.72 (and +inf) gives +inf,  x < ~-103.97 (and -inf) gives +0,
 *   the subnormal results in between are rounded once,  NaN gives NaN.
 * So silu(g) = g / (1 + exp(-g)) is g for large positive g and -0 for large negative g,
 * never NaN for finite g.
 *
 * Header-only: the functions are static and always inlined into the SIMD kernel that calls
 * them (they must be compiled with that kernel's target attribute). Pure, thread-safe. */
#ifndef WEIR_KERNELS_CPU_VEC_EXP_H
#define WEIR_KERNELS_CPU_VEC_EXP_H

#include <stdint.h>
#include <string.h>

#include "cpu_isa.h"

#if WEIR_X86
#include <immintrin.h>
#endif

#define WEIR__EXP_LO (-105.0f) /* exp(-105) ~ 2.5e-46 rounds to +0 */
#define WEIR__EXP_HI 89.0f     /* exp(89) overflows to +inf */
#define WEIR__EXP_LOG2E 1.44269504088896341f
#define WEIR__EXP_C1 0.693359375f     /* ln2, high part: exact in 10 bits */
#define WEIR__EXP_C2 (-2.12194440e-4f) /* ln2 - C1 */
#define WEIR__EXP_P0 1.9875691500e-4f
#define WEIR__EXP_P1 1.3981999507e-3f
#define WEIR__EXP_P2 8.3334519073e-3f
#define WEIR__EXP_P3 4.1665795894e-2f
#define WEIR__EXP_P4 1.6666665459e-1f
#define WEIR__EXP_P5 5.0000001201e-1f

static inline float weir__bits_f32(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* Portable: no libm call and no branch on x, so a loop of it vectorises. n is rounded with
 * the 1.5 * 2^23 trick (round-to-nearest-even of the FPU; |x / ln2| < 2^22 after the clamp). */
static WEIR_ALWAYS_INLINE float weir__exp_portable(float x) {
  x = x < WEIR__EXP_LO ? WEIR__EXP_LO : x; /* NaN compares false and stays */
  x = x > WEIR__EXP_HI ? WEIR__EXP_HI : x;
  const float magic = 12582912.0f;
  float t = x * WEIR__EXP_LOG2E + magic;
  float n = t - magic;
  uint32_t tb, mb;
  memcpy(&tb, &t, sizeof tb);
  memcpy(&mb, &magic, sizeof mb);
  int32_t ni = (int32_t)(tb - mb); /* n as an integer: t's mantissa holds it */
  float r = x - n * WEIR__EXP_C1;
  r = r - n * WEIR__EXP_C2;
  float p = WEIR__EXP_P0;
  p = p * r + WEIR__EXP_P1;
  p = p * r + WEIR__EXP_P2;
  p = p * r + WEIR__EXP_P3;
  p = p * r + WEIR__EXP_P4;
  p = p * r + WEIR__EXP_P5;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t n1 = ni / 2, n2 = ni - n1; /* |n| <= 152: both halves give normal floats */
  return p * weir__bits_f32((uint32_t)(n1 + 127) << 23) * weir__bits_f32((uint32_t)(n2 + 127) << 23);
}

#if WEIR_X86
/* The kernels proper take x already clamped to [WEIR__EXP_LO, WEIR__EXP_HI] (or NaN). */
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE __m256 weir__exp_avx2_in_range(__m256 x) {
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(WEIR__EXP_LOG2E)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(WEIR__EXP_C1), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(WEIR__EXP_C2), r);
  __m256 p = _mm256_set1_ps(WEIR__EXP_P0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(WEIR__EXP_P1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(WEIR__EXP_P2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(WEIR__EXP_P3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(WEIR__EXP_P4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(WEIR__EXP_P5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE __m256 weir__exp_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(WEIR__EXP_LO), x);
  return weir__exp_avx2_in_range(_mm256_min_ps(_mm256_set1_ps(WEIR__EXP_HI), x));
}
/* For x <= 0 or NaN only (softmax's scores minus their max): one clamp fewer on the
 * dependency chain of a 16-key block. */
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE __m256 weir__exp_nonpos_avx2(__m256 x) {
  return weir__exp_avx2_in_range(_mm256_max_ps(_mm256_set1_ps(WEIR__EXP_LO), x));
}

/* scalef applies 2^n with one rounding and saturates to inf / 0 by itself. */
WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m512 weir__exp_avx512_in_range(__m512 x) {
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(WEIR__EXP_LOG2E)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(WEIR__EXP_C1), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(WEIR__EXP_C2), r);
  __m512 p = _mm512_set1_ps(WEIR__EXP_P0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(WEIR__EXP_P1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(WEIR__EXP_P2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(WEIR__EXP_P3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(WEIR__EXP_P4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(WEIR__EXP_P5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m512 weir__exp_avx512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(WEIR__EXP_LO), x);
  return weir__exp_avx512_in_range(_mm512_min_ps(_mm512_set1_ps(WEIR__EXP_HI), x));
}
WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m512 weir__exp_nonpos_avx512(__m512 x) {
  return weir__exp_avx512_in_range(_mm512_max_ps(_mm512_set1_ps(WEIR__EXP_LO), x));
}
#endif

#endif
