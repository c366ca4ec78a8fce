/* weir CPU kernels: instruction-set selection.
 *
 * Every kernel with SIMD variants is compiled for each of these levels with GCC target
 * attributes and picks one at run time, so one build runs on any x86-64 (and the scalar path
 * on any other CPU). The level is chosen once from what the CPU supports, lowered by the
 * environment variable WEIR_CPU_ISA=scalar|avx2|avx512 (a level the CPU lacks falls back to
 * the best it has), and can be forced by tests with weir_cpu_isa_set().
 *
 * Thread-safety: weir_cpu_isa() may be called from any thread; weir_cpu_isa_set() must not
 * race with running kernels (tests call it between kernels). */
#ifndef WEIR_KERNELS_CPU_ISA_H
#define WEIR_KERNELS_CPU_ISA_H

typedef enum weir_cpu_isa_level {
  WEIR_CPU_ISA_SCALAR = 0, /* portable C, whatever the compiler's baseline is */
  WEIR_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
  WEIR_CPU_ISA_AVX512 = 2, /* AVX-512 F/BW/DQ/VL + the AVX2 set */
  WEIR_CPU_ISA_COUNT_ = 3,
} weir_cpu_isa_level;

/* The level kernels use now. */
weir_cpu_isa_level weir_cpu_isa(void);
/* 1 when this CPU can run `level`. */
int weir_cpu_isa_supported(weir_cpu_isa_level level);
/* Forces a level the CPU supports and returns 0, or returns -1 and changes nothing. */
int weir_cpu_isa_set(weir_cpu_isa_level level);
/* "scalar", "avx2", "avx512". */
const char *weir_cpu_isa_name(weir_cpu_isa_level level);

/* GCC target strings for the SIMD variants. */
#if defined(__x86_64__) || defined(__i386__)
#define WEIR_X86 1
#define WEIR_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define WEIR_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define WEIR_TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))
#else
#define WEIR_X86 0
#endif

/* For the small helpers of a SIMD kernel, which must inline into their target function. */
#define WEIR_ALWAYS_INLINE inline __attribute__((always_inline))

#endif
