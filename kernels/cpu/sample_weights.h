/* weir CPU kernels: the weights a temperature draw takes over one row of f32 logits (the
 * default sampler plugin's untruncated path: no top-k, top-p or min-p).
 *
 * For inverse temperature inv_t: z[i] = x[i] * inv_t (one f32 multiply), zmax = the largest z
 * over entries that are neither -inf nor NaN, and w[i] = exp(z[i] - zmax) on the shared vector
 * exp (vec_exp.h: within 2 ulp of the correctly rounded value), 0 for -inf and NaN entries.
 * The weights are also summed per block of WEIR_SAMPLE_BLOCK consecutive entries, in double,
 * in the ISA level's order (levels may differ by float rounding, as their exps may).
 *
 * This is the cost of sampling at a temperature: a libm expf per logit took about 11 us a row
 * for a 4,096-token vocabulary and 0.7-0.9 ms for 151,936 on the development CPU. Pure,
 * thread-safe, no allocation. */
#ifndef WEIR_KERNELS_CPU_SAMPLE_WEIGHTS_H
#define WEIR_KERNELS_CPU_SAMPLE_WEIGHTS_H

#include <stdint.h>

#define WEIR_SAMPLE_BLOCK 256

/* Blocks of a row of n: the length bsum needs. */
static inline int64_t weir_sample_blocks(int64_t n) {
  return (n + WEIR_SAMPLE_BLOCK - 1) / WEIR_SAMPLE_BLOCK;
}

/* Fills w[0..n) and bsum[0..weir_sample_blocks(n)) as above for x[0..n) (n >= 1, inv_t > 0 and
 * finite; x, w and bsum the caller's, not overlapping). *zmax gets the largest z: -inf when
 * every entry is -inf or NaN (then every weight is 0), +inf when an entry is +inf (then the
 * weights are not meaningful and the caller needs another rule). Returns the index of the
 * last entry that is neither -inf nor NaN, -1 when there is none. */
int64_t weir_sample_weights(const float *x, int64_t n, float inv_t, float *w, double *bsum,
                            float *zmax);

/* The draw: the first index i in order whose running sum of w (double) exceeds target, found
 * through the block sums (0 <= target < the sum of bsum). Where rounding leaves the block's
 * running sum short of target, the block's last positive weight; where no block's sum reaches
 * target, -1 (the caller's fallback). */
int64_t weir_sample_pick(const float *w, const double *bsum, int64_t n, double target);

#endif
