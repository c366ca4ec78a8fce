/* Softmax and log-sum-exp (see softmax.h). */
#include "softmax.h"

#include <math.h>

static float row_max(const float *x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (x[i] > m) m = x[i];
  return m;
}

double weir_logsumexp(const float *x, int64_t n) {
  float m = row_max(x, n);
  if (m == -INFINITY) return -INFINITY;
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += (double)expf(x[i] - m);
  return (double)m + log(s);
}

double weir_softmax(float *x, int64_t n) {
  float m = row_max(x, n);
  if (m == -INFINITY) {
    for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
    return -INFINITY;
  }
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    float e = expf(x[i] - m);
    x[i] = e;
    s += (double)e;
  }
  float inv = (float)(1.0 / s);
  for (int64_t i = 0; i < n; i++) x[i] *= inv;
  return (double)m + log(s);
}
