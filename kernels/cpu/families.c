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

void weir_scale(float *x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void weir_softcap(float *x, float cap, int64_t n) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}
