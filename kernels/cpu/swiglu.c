/* SwiGLU and GeGLU (see swiglu.h): out = g / (1 + exp(-y)) * up with y = g (SiLU) or
 * y = 2 sqrt(2/pi) (g + 0.044715 g^3) (GELU's tanh form as g * sigmoid(2 u)), one loop for
 * both at each ISA level, on the shared vector exp (vec_exp.h; libm's scalar expf was half
 * the cost of this op). The exp saturates cleanly: a very negative y gives exp = inf and
 * g / inf = -0, a very positive one exp = 0 and g, so no finite gate gives NaN. */
#include "swiglu.h"

#include "cpu_isa.h"
#include "vec_exp.h"

#define GELU_K2 (2.0f * 0.7978845608028654f) /* 2 sqrt(2 / pi) */
#define GELU_C 0.044715f

static WEIR_ALWAYS_INLINE float glu_one(float g, float u, int gelu) {
  float y = gelu ? GELU_K2 * (g + GELU_C * g * g * g) : g;
  return g / (1.0f + weir__exp_portable(-y)) * u;
}

static void glu_scalar(float *out, const float *gate, const float *up, int64_t n, int gelu) {
  if (gelu)
    for (int64_t i = 0; i < n; i++) out[i] = glu_one(gate[i], up[i], 1);
  else
    for (int64_t i = 0; i < n; i++) out[i] = glu_one(gate[i], up[i], 0);
}

#if WEIR_X86
WEIR_TARGET_AVX2 static WEIR_ALWAYS_INLINE __m256 glu8(__m256 g, __m256 u, int gelu) {
  __m256 y = g;
  if (gelu) {
    __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    y = _mm256_mul_ps(_mm256_set1_ps(GELU_K2), _mm256_fmadd_ps(_mm256_set1_ps(GELU_C), g3, g));
  }
  __m256 e = weir__exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), y));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

WEIR_TARGET_AVX2 static void glu_avx2(float *out, const float *gate, const float *up, int64_t n,
                                      int gelu) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
    _mm256_storeu_ps(out + i, gelu ? glu8(g, u, 1) : glu8(g, u, 0));
  }
  if (i < n) { /* the tail through a zero-padded copy: the same arithmetic as the body */
    float g[8] = {0}, u[8] = {0}, o[8];
    for (int64_t t = 0; i + t < n; t++) g[t] = gate[i + t], u[t] = up[i + t];
    _mm256_storeu_ps(o, glu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u), gelu));
    for (int64_t t = 0; i + t < n; t++) out[i + t] = o[t];
  }
}

WEIR_TARGET_AVX512 static WEIR_ALWAYS_INLINE __m512 glu16(__m512 g, __m512 u, int gelu) {
  __m512 y = g;
  if (gelu) {
    __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
    y = _mm512_mul_ps(_mm512_set1_ps(GELU_K2), _mm512_fmadd_ps(_mm512_set1_ps(GELU_C), g3, g));
  }
  __m512 e = weir__exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), y));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

WEIR_TARGET_AVX512 static void glu_avx512(float *out, const float *gate, const float *up,
                                          int64_t n, int gelu) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 g = _mm512_loadu_ps(gate + i), u = _mm512_loadu_ps(up + i);
    _mm512_storeu_ps(out + i, gelu ? glu16(g, u, 1) : glu16(g, u, 0));
  }
  if (i < n) {
    __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
    __m512 g = _mm512_maskz_loadu_ps(k, gate + i), u = _mm512_maskz_loadu_ps(k, up + i);
    _mm512_mask_storeu_ps(out + i, k, glu16(g, u, gelu));
  }
}
#endif

static void glu(float *out, const float *gate, const float *up, int64_t n, int gelu) {
#if WEIR_X86
  switch (weir_cpu_isa()) {
  case WEIR_CPU_ISA_AVX512: glu_avx512(out, gate, up, n, gelu); return;
  case WEIR_CPU_ISA_AVX2: glu_avx2(out, gate, up, n, gelu); return;
  default: break;
  }
#endif
  glu_scalar(out, gate, up, n, gelu);
}

void weir_swiglu(float *out, const float *gate, const float *up, int64_t n) {
  glu(out, gate, up, n, 0);
}

void weir_geglu(float *out, const float *gate, const float *up, int64_t n) {
  glu(out, gate, up, n, 1);
}
