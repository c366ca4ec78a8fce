/* weir CPU kernels: residual add and bias. Thread-safe over disjoint ranges.
 * weir_add: out[i] = a[i] + b[i] for i < n; out may equal a or b.
 * weir_add_bias_rows: x[r][j] += bias[j] for rows [r0, r1) of `dim`. */
#ifndef WEIR_KERNELS_CPU_ADD_H
#define WEIR_KERNELS_CPU_ADD_H

#include <stdint.h>

void weir_add(float *out, const float *a, const float *b, int64_t n);
void weir_add_bias_rows(float *x, const float *bias, int64_t r0, int64_t r1, int64_t dim);

#endif
