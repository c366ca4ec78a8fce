/* weir CPU kernels: gated activations for the FFN, at every ISA level (cpu_isa.h) on the
 * shared vector exp (vec_exp.h).
 *   weir_swiglu: out[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up;
 *   weir_geglu:  out[i] = gelu_tanh(gate[i]) * up[i], GELU's tanh form computed as
 *                gate * sigmoid(2 sqrt(2/pi) (gate + 0.044715 gate^3)), the same function with
 *                exp in place of tanh (glibc's tanhf is several times slower; its error against
 *                a double-precision GELU is that of the tanhf form, docs/perf/model-families.md).
 * For i < n; out may equal gate or up. No finite gate gives NaN (large |gate| saturates to
 * gate or -0). Within a few ulp of the same formula with libm expf (tests/kernels).
 * Thread-safe over disjoint ranges. */
#ifndef WEIR_KERNELS_CPU_SWIGLU_H
#define WEIR_KERNELS_CPU_SWIGLU_H

#include <stdint.h>

void weir_swiglu(float *out, const float *gate, const float *up, int64_t n);
void weir_geglu(float *out, const float *gate, const float *up, int64_t n);

#endif
