/* weir CPU kernels for the model families (ABI 1.5 device ops): RoPE with a frequency per
 * pair, GELU gating, scaling and soft-capping. Thread-safe over disjoint ranges. */
#ifndef WEIR_KERNELS_CPU_FAMILIES_H
#define WEIR_KERNELS_CPU_FAMILIES_H

#include <stdint.h>

/* As weir_rope_rows (rope.h), but pair i turns by positions[t] * inv_freq[i] and the rotated
 * values are multiplied by mscale. */
void weir_rope_rows_freqs(float *x, const int32_t *positions, int64_t t0, int64_t t1,
                          int32_t n_heads, int32_t head_dim, int32_t rot_dim,
                          const float *inv_freq, float mscale, int style);
/* weir_geglu (GELU gating) lives with SwiGLU in swiglu.h: one loop serves both. */
/* x[i] *= s. */
void weir_scale(float *x, float s, int64_t n);
/* x[i] = cap * tanh(x[i] / cap). */
void weir_softcap(float *x, float cap, int64_t n);

#endif
