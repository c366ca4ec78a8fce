/* weir CPU kernels for encoders (ABI 1.6 device ops: embedding models such as bert):
 * LayerNorm, exact GELU, and bidirectional attention within one sequence. Thread-safe over
 * disjoint ranges. */
#ifndef WEIR_KERNELS_CPU_ENCODER_H
#define WEIR_KERNELS_CPU_ENCODER_H

#include <stdint.h>

/* Rows [r0, r1) of x ([rows][dim]) LayerNormed into out: (x - mean) / sqrt(var + eps) * w
 * + b (b may be NULL). Mean and variance are accumulated in double. out may equal x. */
void weir_layer_norm_rows(float *out, const float *x, const float *w, const float *b,
                          int64_t r0, int64_t r1, int64_t dim, float eps);
/* out[i] = 0.5 x (1 + erf(x / sqrt(2))); out may equal x. */
void weir_gelu_erf(float *out, const float *x, int64_t n);
/* Attention of query tokens [i0, i1) of head h over all n tokens, unmasked (see
 * weir_device_ops.attention_full); scores is scratch of n floats. */
void weir_attention_full_rows(float *out, const float *q, const float *k, const float *v,
                              int64_t n, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                              float scale, int32_t h, int64_t i0, int64_t i1, float *scores);

#endif
