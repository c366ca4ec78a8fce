/* Run-time choice of the SIMD level (see cpu_isa.h). */
#include "cpu_isa.h"

#include <stdatomic.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

/* -1 until first use; then the chosen level. Relaxed atomics suffice: every thread computes
 * the same value on first use. */
static _Atomic int g_isa = -1;

#if WEIR_X86
/* F16C from CPUID leaf 1 (ECX bit 29): older clang has no "f16c" for __builtin_cpu_supports. */
static int has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

int weir_cpu_isa_supported(weir_cpu_isa_level level) {
  switch (level) {
  case WEIR_CPU_ISA_SCALAR: return 1;
#if WEIR_X86
  case WEIR_CPU_ISA_AVX2:
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  case WEIR_CPU_ISA_AVX512:
    __builtin_cpu_init();
    return weir_cpu_isa_supported(WEIR_CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
#endif
  default: return 0;
  }
}

static int isa_detect(void) {
  int best = WEIR_CPU_ISA_SCALAR;
  for (int l = WEIR_CPU_ISA_AVX2; l < WEIR_CPU_ISA_COUNT_; l++)
    if (weir_cpu_isa_supported((weir_cpu_isa_level)l)) best = l;
  const char *env = getenv("WEIR_CPU_ISA");
  if (env && *env) {
    int want = best;
    if (strcmp(env, "scalar") == 0) want = WEIR_CPU_ISA_SCALAR;
    else if (strcmp(env, "avx2") == 0) want = WEIR_CPU_ISA_AVX2;
    else if (strcmp(env, "avx512") == 0) want = WEIR_CPU_ISA_AVX512;
    if (want < best) best = want;
  }
  return best;
}

weir_cpu_isa_level weir_cpu_isa(void) {
  int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
  if (v < 0) {
    v = isa_detect();
    atomic_store_explicit(&g_isa, v, memory_order_relaxed);
  }
  return (weir_cpu_isa_level)v;
}

int weir_cpu_isa_set(weir_cpu_isa_level level) {
  if (level < 0 || level >= WEIR_CPU_ISA_COUNT_ || !weir_cpu_isa_supported(level)) return -1;
  atomic_store_explicit(&g_isa, (int)level, memory_order_relaxed);
  return 0;
}

const char *weir_cpu_isa_name(weir_cpu_isa_level level) {
  switch (level) {
  case WEIR_CPU_ISA_SCALAR: return "scalar";
  case WEIR_CPU_ISA_AVX2: return "avx2";
  case WEIR_CPU_ISA_AVX512: return "avx512";
  default: return "?";
  }
}
