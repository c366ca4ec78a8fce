/* weir CPU kernels: rotary position embedding, in place.
 *
 * x is [n_tokens][n_heads * head_dim]; for tokens [t0, t1) the first rot_dim values of each
 * head are rotated by angle positions[t] * freq_scale * freq_base^(-2i/rot_dim) for pair i:
 * NORM rotates adjacent pairs (x[2i], x[2i+1]), NEOX rotates (x[i], x[i + rot_dim/2]).
 * Values past rot_dim are left alone. rot_dim must be even and <= head_dim (the caller checks).
 * Angles are computed in double: positions reach tens of thousands of radians, where a float
 * angle would lose the low bits. Thread-safe over disjoint token ranges. */
#ifndef WEIR_KERNELS_CPU_ROPE_H
#define WEIR_KERNELS_CPU_ROPE_H

#include <stdint.h>

/* Same numbering as weir_rope_style in weir/device.h. */
#define WEIR_KROPE_NORM 0
#define WEIR_KROPE_NEOX 2

void weir_rope_rows(float *x, const int32_t *positions, int64_t t0, int64_t t1, int32_t n_heads,
                    int32_t head_dim, int32_t rot_dim, float freq_base, float freq_scale,
                    int style);

#endif
