/* weir CPU kernels: row gather. out[i] = x[rows[i]] for i in [i0, i1), rows of `dim` floats.
 * Returns 0, or -1 (having copied the rows before it) when some rows[i] is negative or not
 * below n_src_rows (pass INT64_MAX when the source row count is unknown). out must not
 * overlap x. Thread-safe over disjoint ranges. */
#ifndef WEIR_KERNELS_CPU_GET_ROWS_H
#define WEIR_KERNELS_CPU_GET_ROWS_H

#include <stdint.h>

int weir_get_rows(float *out, const float *x, const int32_t *rows, int64_t i0, int64_t i1,
                  int64_t dim, int64_t n_src_rows);

#endif
