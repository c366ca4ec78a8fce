/* weir CPU kernels: RMSNorm. out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for rows
 * [r0, r1) of `dim` floats. out may equal x. Accumulates the sum of squares in double so a
 * long row keeps full f32 accuracy. Thread-safe; disjoint row ranges may run concurrently. */
#ifndef WEIR_KERNELS_CPU_RMS_NORM_H
#define WEIR_KERNELS_CPU_RMS_NORM_H

#include <stdint.h>

void weir_rms_norm_rows(float *out, const float *x, const float *weight, int64_t r0, int64_t r1,
                        int64_t dim, float eps);

#endif
