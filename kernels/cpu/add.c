/* Elementwise add and bias (see add.h): plain loops the compiler vectorises, compiled once
 * per ISA level (cpu_isa.h) so that AVX2 / AVX-512 machines get their vector width rather
 * than the baseline's four lanes. An add rounds the same at every width: the levels agree
 * bit for bit. */
#include "add.h"

#include "cpu_isa.h"

static WEIR_ALWAYS_INLINE void add_body(float *out, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void add_scalar(float *out, const float *a, const float *b, int64_t n) {
  add_body(out, a, b, n);
}
#if WEIR_X86
WEIR_TARGET_AVX2 static void add_avx2(float *out, const float *a, const float *b, int64_t n) {
  add_body(out, a, b, n);
}
WEIR_TARGET_AVX512 static void add_avx512(float *out, const float *a, const float *b,
                                          int64_t n) {
  add_body(out, a, b, n);
}
#endif

void weir_add(float *out, const float *a, const float *b, int64_t n) {
#if WEIR_X86
  switch (weir_cpu_isa()) {
  case WEIR_CPU_ISA_AVX512: add_avx512(out, a, b, n); return;
  case WEIR_CPU_ISA_AVX2: add_avx2(out, a, b, n); return;
  default: break;
  }
#endif
  add_scalar(out, a, b, n);
}

void weir_add_bias_rows(float *x, const float *bias, int64_t r0, int64_t r1, int64_t dim) {
  for (int64_t r = r0; r < r1; r++) weir_add(x + r * dim, x + r * dim, bias, dim);
}
