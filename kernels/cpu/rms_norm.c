/* RMSNorm (see rms_norm.h). */
#include "rms_norm.h"

#include <math.h>

void weir_rms_norm_rows(float *out, const float *x, const float *weight, int64_t r0, int64_t r1,
                        int64_t dim, float eps) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + r * dim;
    float *o = out + r * dim;
    /* Four float partial sums vectorise; they are folded into a double per 1024 values so
     * the rounding error does not grow with dim. */
    double ss = 0.0;
    for (int64_t k0 = 0; k0 < dim; k0 += 1024) {
      int64_t k1 = k0 + 1024 < dim ? k0 + 1024 : dim;
      float s[8] = {0};
      int64_t k = k0;
      for (; k + 8 <= k1; k += 8)
        for (int j = 0; j < 8; j++) s[j] += xr[k + j] * xr[k + j];
      for (; k < k1; k++) s[0] += xr[k] * xr[k];
      for (int j = 0; j < 8; j++) ss += s[j];
    }
    float inv = (float)(1.0 / sqrt(ss / (double)(dim > 0 ? dim : 1) + (double)eps));
    for (int64_t k = 0; k < dim; k++) o[k] = xr[k] * inv * weight[k];
  }
}
