/* RMSNorm (see rms_norm.h): one loop body the compiler vectorises, compiled for the
 * baseline and for AVX2 + FMA (cpu_isa.h), which the AVX-512 level uses as well. */
#include "rms_norm.h"

#include <math.h>

#include "cpu_isa.h"

static WEIR_ALWAYS_INLINE void rms_body(float *out, const float *x, const float *weight,
                                        int64_t r0, int64_t r1, int64_t dim, float eps) {
  for (int64_t r = r0; r < r1; r++) {
    const float *xr = x + r * dim;
    float *o = out + r * dim;
    /* Eight float partial sums vectorise; they are folded into a double per 1024 values so
     * the rounding error does not grow with dim. (With FMA the squares are fused into the
     * sums: the levels differ by that rounding.) */
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

static void rms_scalar(float *out, const float *x, const float *weight, int64_t r0, int64_t r1,
                       int64_t dim, float eps) {
  rms_body(out, x, weight, r0, r1, dim, eps);
}
#if WEIR_X86
/* The AVX-512 level runs this too: compiled for AVX-512, GCC turns the eight partial sums
 * into permutes of 16-lane vectors and the row took twice as long (dim 256). */
WEIR_TARGET_AVX2 static void rms_avx2(float *out, const float *x, const float *weight,
                                      int64_t r0, int64_t r1, int64_t dim, float eps) {
  rms_body(out, x, weight, r0, r1, dim, eps);
}
#endif

void weir_rms_norm_rows(float *out, const float *x, const float *weight, int64_t r0, int64_t r1,
                        int64_t dim, float eps) {
#if WEIR_X86
  switch (weir_cpu_isa()) {
  case WEIR_CPU_ISA_AVX512:
  case WEIR_CPU_ISA_AVX2: rms_avx2(out, x, weight, r0, r1, dim, eps); return;
  default: break;
  }
#endif
  rms_scalar(out, x, weight, r0, r1, dim, eps);
}
