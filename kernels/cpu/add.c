/* Elementwise add and bias (see add.h); plain loops the compiler vectorises. */
#include "add.h"

void weir_add(float *out, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void weir_add_bias_rows(float *x, const float *bias, int64_t r0, int64_t r1, int64_t dim) {
  for (int64_t r = r0; r < r1; r++) {
    float *row = x + r * dim;
    for (int64_t j = 0; j < dim; j++) row[j] += bias[j];
  }
}
