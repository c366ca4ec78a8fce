/* Encoder kernels (encoder.h). Plain C: these run on small embedding models, where the
 * matmuls (the quant plugins') dominate. */
#include "encoder.h"

#include <math.h>

void weir_layer_norm_rows(float *out, const float *x, const float *w, const float *b,
                          int64_t r0, int64_t r1, int64_t dim, float eps) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + r * dim;
    float *o = out + r * dim;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < dim; i++) sum += xr[i];
    const double mean = sum / (double)dim;
    for (int64_t i = 0; i < dim; i++) {
      const double d = xr[i] - mean;
      sq += d * d;
    }
    const double inv = 1.0 / sqrt(sq / (double)dim + (double)eps);
    for (int64_t i = 0; i < dim; i++) {
      const float y = (float)((xr[i] - mean) * inv) * w[i];
      o[i] = b ? y + b[i] : y;
    }
  }
}

void weir_gelu_erf(float *out, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

void weir_attention_full_rows(float *out, const float *q, const float *k, const float *v,
                              int64_t n, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                              float scale, int32_t h, int64_t i0, int64_t i1, float *scores) {
  const int32_t g = h / (n_heads / n_kv_heads);
  const int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
  for (int64_t i = i0; i < i1; i++) {
    const float *qi = q + i * qs + (int64_t)h * head_dim;
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
      const float *kj = k + j * ks + (int64_t)g * head_dim;
      float s = 0;
      for (int32_t d = 0; d < head_dim; d++) s += qi[d] * kj[d];
      scores[j] = s * scale;
      if (scores[j] > mx) mx = scores[j];
    }
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
      scores[j] = expf(scores[j] - mx);
      sum += scores[j];
    }
    const float inv = (float)(1.0 / sum);
    float *o = out + i * qs + (int64_t)h * head_dim;
    for (int32_t d = 0; d < head_dim; d++) o[d] = 0;
    for (int64_t j = 0; j < n; j++) {
      const float p = scores[j] * inv;
      const float *vj = v + j * ks + (int64_t)g * head_dim;
      for (int32_t d = 0; d < head_dim; d++) o[d] += p * vj[d];
    }
  }
}
