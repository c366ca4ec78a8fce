/* weir CPU kernels: SwiGLU. out[i] = silu(gate[i]) * up[i] = gate/(1+exp(-gate)) * up for
 * i < n. out may equal gate or up. Thread-safe over disjoint ranges. */
#ifndef WEIR_KERNELS_CPU_SWIGLU_H
#define WEIR_KERNELS_CPU_SWIGLU_H

#include <stdint.h>

void weir_swiglu(float *out, const float *gate, const float *up, int64_t n);

#endif
