/* Row gather (see get_rows.h). */
#include "get_rows.h"

#include <string.h>

int weir_get_rows(float *out, const float *x, const int32_t *rows, int64_t i0, int64_t i1,
                  int64_t dim, int64_t n_src_rows) {
  for (int64_t i = i0; i < i1; i++) {
    if (rows[i] < 0 || rows[i] >= n_src_rows) return -1;
    memcpy(out + i * dim, x + (int64_t)rows[i] * dim, (size_t)dim * sizeof(float));
  }
  return 0;
}
