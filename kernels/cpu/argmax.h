/* weir CPU kernels: the greedy pick of one row of f32 logits, and the softmax probability of
 * what it picks (the CPU device's argmax_rows, ABI 1.8: the engine's greedy verification and
 * the draft model's greedy drafts with their confidence).
 *
 * The rule is the engine's greedy rule, exactly, at every ISA level of cpu_isa.h: the index of
 * the largest value, the FIRST such index when several compare equal (a strict > scan; -0 and
 * +0 are equal), NaN never wins, and a row with no value above -inf has no pick. The vector
 * levels find the row's largest value ignoring NaN, then its first index: the same index a
 * strict > scan keeps.
 *
 * Pure, thread-safe, no allocation. */
#ifndef WEIR_KERNELS_CPU_ARGMAX_H
#define WEIR_KERNELS_CPU_ARGMAX_H

#include <stdint.h>

/* The pick of x[0..n): its index, or -1 when n <= 0 or no x[i] is above -inf (all -inf or
 * NaN). When prob is not NULL, *prob = 1 / sum_i exp(x[i] - x[pick]) with the shared vector
 * exp (vec_exp.h), summed in the level's order: it may differ from a scalar libm sum by float
 * rounding. *prob is 0 for a row without a pick, and 0 when the sum is not a number above 0
 * (a NaN anywhere in the row, or +inf as the largest value: inf - inf). x may be unaligned. */
int64_t weir_argmax_f32(const float *x, int64_t n, float *prob);

#endif
