/* Which of the CPU kernels' SIMD levels this machine runs, for suites that test every level
 * a plugin can take (WEIR_CPU_ISA): 0 scalar, 1 AVX2, 2 AVX-512, 3 AVX-512 + VNNI. The kernels'
 * own detection (cpu_isa.c) decides levels 0..2, so the suites and the plugins agree. */
#ifndef WT_ISA_H
#define WT_ISA_H
#include "cpu_isa.h"

static inline int wt_isa_available(int level) {
  if (level <= 2) return weir_cpu_isa_supported((weir_cpu_isa_level)level);
#if defined(__x86_64__)
  __builtin_cpu_init();
  return weir_cpu_isa_supported(WEIR_CPU_ISA_AVX512) && __builtin_cpu_supports("avx512vnni");
#else
  return 0;
#endif
}
#endif
