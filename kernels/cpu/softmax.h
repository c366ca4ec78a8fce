/* weir CPU kernels: softmax and log-sum-exp over one row of f32.
 *
 * weir_softmax: x[i] = exp(x[i] - max) / sum, in place; returns log(sum(exp(x))) of the
 * input (the log-partition, -inf when every x is -inf, in which case x is left all zero).
 * -inf entries become exactly 0. The sum is accumulated in double. Thread-safe. */
#ifndef WEIR_KERNELS_CPU_SOFTMAX_H
#define WEIR_KERNELS_CPU_SOFTMAX_H

#include <stdint.h>

double weir_softmax(float *x, int64_t n);
/* log(sum(exp(x[i]))) without changing x; -inf when n == 0 or every x is -inf. */
double weir_logsumexp(const float *x, int64_t n);

#endif
