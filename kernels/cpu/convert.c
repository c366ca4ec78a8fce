/* Row conversions f16/bf16 <-> f32 with F16C and AVX-512 variants (see convert.h). */
#include "convert.h"

#include "cpu_isa.h"

#include <pthread.h>

#if WEIR_X86
#include <immintrin.h>
#endif

/* Without F16C a 256 KiB table beats decoding bit fields per element by about 4x. */
static float g_f16_table[65536];
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;

static void f16_table_init(void) {
  for (uint32_t i = 0; i < 65536; i++) g_f16_table[i] = weir_f16_to_f32((uint16_t)i);
}

const float *weir_f16_table(void) {
  pthread_once(&g_f16_once, f16_table_init);
  return g_f16_table;
}

static void f16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n) {
  const float *tab = weir_f16_table();
  for (int64_t i = 0; i < n; i++) dst[i] = tab[src[i]];
}
static void f32_to_f16_scalar(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = weir_f32_to_f16(src[i]);
}

#if WEIR_X86
WEIR_TARGET_AVX2 static void f16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = weir_f16_to_f32(src[i]);
}
WEIR_TARGET_AVX2 static void f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) dst[i] = weir_f32_to_f16(src[i]);
}
WEIR_TARGET_AVX512 static void f16_to_f32_avx512(const uint16_t *src, float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
  f16_to_f32_avx2(src + i, dst + i, n - i);
}
WEIR_TARGET_AVX512 static void f32_to_f16_avx512(const float *src, uint16_t *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  f32_to_f16_avx2(src + i, dst + i, n - i);
}
#endif

void weir_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
  switch (weir_cpu_isa()) {
#if WEIR_X86
  case WEIR_CPU_ISA_AVX512: f16_to_f32_avx512(src, dst, n); return;
  case WEIR_CPU_ISA_AVX2: f16_to_f32_avx2(src, dst, n); return;
#endif
  default: f16_to_f32_scalar(src, dst, n); return;
  }
}

void weir_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n) {
  switch (weir_cpu_isa()) {
#if WEIR_X86
  case WEIR_CPU_ISA_AVX512: f32_to_f16_avx512(src, dst, n); return;
  case WEIR_CPU_ISA_AVX2: f32_to_f16_avx2(src, dst, n); return;
#endif
  default: f32_to_f16_scalar(src, dst, n); return;
  }
}

/* bf16 is a shift (and a rounding add); the compiler vectorises these loops well enough
 * that no hand-written variant pays for itself. */
void weir_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = weir_bf16_to_f32(src[i]);
}

void weir_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = weir_f32_to_bf16(src[i]);
}
