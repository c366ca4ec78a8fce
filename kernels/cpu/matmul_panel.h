/* weir CPU kernels: y[t] = W x[t] over W in 16-row panels (the fp16 plugin's layout).
 *
 * Layout ("panel16"): the rows are cut into panels of 16 (the last one padded with zero
 * rows); a panel holds its 16 rows column by column, so element (r, k) of W is at
 *     ((r / 16) * cols + k) * 16 + r % 16
 * in f16 or f32. One load then brings the same column of 16 output rows, and a matmul is a
 * sum of outer products: per column k, 16 rows' weights times x[t][k] broadcast, added into
 * 16 rows' accumulators. Nothing is summed across lanes at the end, which in the row-major
 * kernels (matmul.h) costs a shuffle tree per output, a fifth of a small model's GEMM.
 *
 * Every output is one chain of fused multiply-adds over k = 0, 1, ..., cols - 1, starting
 * from zero, whatever the number of tokens, the ISA level's tiles or the thread split: so
 * one token's result is bit-identical to the same token's in a batch of any size (a
 * verification step's rows are exactly the plain decode steps' logits), on one machine and
 * ISA level. (The scalar level runs the same chain with fmaf.)
 *
 * x is [n_tokens][cols] f32 and y [n_tokens][rows] f32; y must not alias W or x. Threading:
 * weir_matmul_panel_chunk splits over panels (units of 16 rows); any number of calls may run
 * at once (no state). */
#ifndef WEIR_KERNELS_CPU_MATMUL_PANEL_H
#define WEIR_KERNELS_CPU_MATMUL_PANEL_H

#include <stddef.h>
#include <stdint.h>

#include "weir/tensor.h"

#define WEIR_PANEL_ROWS 16

typedef struct weir_matmul_panel_args {
  const void *w;      /* panel16 layout, ceil(rows / 16) panels of 16 x cols */
  weir_dtype w_dtype; /* WEIR_DTYPE_F16 or WEIR_DTYPE_F32 */
  int64_t rows;       /* real rows (y's row count); the padding rows are never written */
  int64_t cols;
  const float *x;     /* [n_tokens][cols] */
  float *y;           /* [n_tokens][rows] */
  int64_t n_tokens;
} weir_matmul_panel_args;

/* Number of panels of a rows x cols weight, and its size in elements (padding included). */
static inline int64_t weir_panel_count(int64_t rows) {
  return (rows + WEIR_PANEL_ROWS - 1) / WEIR_PANEL_ROWS;
}
static inline int64_t weir_panel_elems(int64_t rows, int64_t cols) {
  return weir_panel_count(rows) * WEIR_PANEL_ROWS * cols;
}
/* Index of element (r, k) in the layout. */
static inline int64_t weir_panel_index(int64_t r, int64_t k, int64_t cols) {
  return ((r / WEIR_PANEL_ROWS) * cols + k) * WEIR_PANEL_ROWS + r % WEIR_PANEL_ROWS;
}

/* Computes y[t][r] for every token and the rows of panels [panel_begin, panel_end). The caller
 * checks w_dtype (another dtype leaves y untouched). */
void weir_matmul_panel_rows(const weir_matmul_panel_args *a, int64_t panel_begin,
                            int64_t panel_end);

/* weir_parallel_fn adapter: arg is a const weir_matmul_panel_args *, [begin, end) are panels. */
void weir_matmul_panel_chunk(void *arg, int64_t begin, int64_t end, int thread);

#endif
