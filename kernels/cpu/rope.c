/* RoPE (see rope.h). */
#include "rope.h"

#include <math.h>

/* Pairs handled per stack buffer; longer rot_dim is processed in pieces. */
#define ROPE_PAIRS 128

void weir_rope_rows(float *x, const int32_t *positions, int64_t t0, int64_t t1, int32_t n_heads,
                    int32_t head_dim, int32_t rot_dim, float freq_base, float freq_scale,
                    int style) {
  const int32_t half = rot_dim / 2;
  float cs[ROPE_PAIRS], sn[ROPE_PAIRS];
  for (int64_t t = t0; t < t1; t++) {
    float *row = x + t * (int64_t)n_heads * head_dim;
    double p = (double)positions[t] * (double)freq_scale;
    for (int32_t i0 = 0; i0 < half; i0 += ROPE_PAIRS) {
      int32_t i1 = i0 + ROPE_PAIRS < half ? i0 + ROPE_PAIRS : half;
      for (int32_t i = i0; i < i1; i++) {
        double theta = p * pow((double)freq_base, -2.0 * i / (double)rot_dim);
        cs[i - i0] = (float)cos(theta);
        sn[i - i0] = (float)sin(theta);
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
