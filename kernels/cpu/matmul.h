/* weir CPU kernels: y[t] = W x[t], the linear layers.
 *
 * W is row-major [rows][cols] (rows = out_features, cols = in_features) in f16 or f32; x is
 * [n_tokens][cols] f32 and y is [n_tokens][rows] f32. For one token the kernel is a GEMV
 * that streams W once with many independent accumulators, converting f16 on the fly; for
 * more tokens it is a register-blocked GEMM (4 rows x up to 6 tokens on AVX-512, 3 on AVX2,
 * a specialised micro-kernel per count) that keeps a group of W rows in cache while it
 * sweeps a block of tokens, so each W element is read from memory once per token block and
 * a small decode batch still reads W once. The GEMM prefetches the W rows two tiles ahead
 * (short rows, as a small model's, defeat the hardware prefetcher), so a few tokens cost
 * little more than one: 5 tokens 1.29x one on the trained 5.6M target
 * (docs/perf/speculative.md).
 *
 * Threading: the work splits over output rows. weir_matmul_chunk has the signature of
 * weir_parallel_fn, so a plugin runs
 *     host->parallel_for(ctx, args.rows, WEIR_MATMUL_GRAIN, weir_matmul_chunk, &args);
 * and every chunk writes only its own rows of y. The kernel reads `args` and W, x; it keeps
 * no state, so any number of calls may run at once. y must not alias W or x. */
#ifndef WEIR_KERNELS_CPU_MATMUL_H
#define WEIR_KERNELS_CPU_MATMUL_H

#include <stdint.h>

#include "weir/tensor.h"

/* A reasonable minimum number of rows per parallel chunk. */
#define WEIR_MATMUL_GRAIN 64

typedef struct weir_matmul_args {
  const void *w;      /* [rows][cols], row stride `cols` elements */
  weir_dtype w_dtype; /* WEIR_DTYPE_F16 or WEIR_DTYPE_F32 */
  int64_t rows;
  int64_t cols;
  const float *x;     /* [n_tokens][cols] */
  float *y;           /* [n_tokens][rows] */
  int64_t n_tokens;
} weir_matmul_args;

/* Computes y[t][r] for every token t and row_begin <= r < row_end. The caller checks that
 * w_dtype is F16 or F32 (another dtype leaves y untouched). */
void weir_matmul_rows(const weir_matmul_args *a, int64_t row_begin, int64_t row_end);

/* weir_parallel_fn adapter: arg is a const weir_matmul_args *, [begin, end) are rows. */
void weir_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread);

#endif
