/* Kernels for the model families (see families.h). */
#include "families.h"

#include <math.h>

#include "rope.h"

#define ROPE_PAIRS 128

void weir_rope_rows_freqs(float *x, const int32_t *positions, int64_t t0, int64_t t1,
                          int32_t n_heads, int32_t head_dim, int32_t rot_dim,
                          const float *inv_freq, float mscale, int style) {
  const int32_t half = rot_dim / 2;
  float cs[ROPE_PAIRS], sn[ROPE_PAIRS];
  for (int64_t t = t0; t < t1; t++) {
    float *row = x + t * (int64_t)n_heads * head_dim;
    const double p = (double)positions[t];
    for (int32_t i0 = 0; i0 < half; i0 += ROPE_PAIRS) {
      int32_t i1 = i0 + ROPE_PAIRS < half ? i0 + ROPE_PAIRS : half;
      /* In double, as rope.c: angles reach thousands of radians. */
      for (int32_t i = i0; i < i1; i++) {
        double theta = p * (double)inv_freq[i];
        cs[i - i0] = (float)(cos(theta) * mscale);
        sn[i - i0] = (float)(sin(theta) * mscale);
      }
      for (int32_t h = 0; h < n_heads; h++) {
        float *v = row + (int64_t)h * head_dim;
        for (int32_t i = i0; i < i1; i++) {
          int32_t a = style == WEIR_KROPE_NEOX ? i : 2 * i;
          int32_t b = style == WEIR_KROPE_NEOX ? i + half : 2 * i + 1;
          float x0 = v[a], x1 = v[b], c = cs[i - i0], s = sn[i - i0];
          v[a] = x0 * c - x1 * s;
          v[b] = x0 * s + x1 * c;
        }
      }
    }
  }
}

/* GELU's tanh form, 0.5 g (1 + tanh(y)), is g * sigmoid(2y): the same function with expf in
 * place of tanhf, which glibc computes several times slower (the gate of a 26-layer,
 * 64-token, ffn-6912 prefill: 0.23 s of CPU with tanhf, 0.04 s this way;
 * docs/perf/model-families.md). Saturates like SwiGLU: a very negative y gives exp = inf and
 * g / inf = -0, a very positive one exp = 0 and g. Its error against a double-precision GELU
 * is that of the tanhf form (5e-7 against 4e-7, |g| < 10). */
void weir_geglu(float *out, const float *gate, const float *up, int64_t n) {
  const float k2 = 2.0f * 0.7978845608028654f; /* 2 sqrt(2 / pi) */
  for (int64_t i = 0; i < n; i++) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-k2 * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void weir_scale(float *x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void weir_softcap(float *x, float cap, int64_t n) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}
