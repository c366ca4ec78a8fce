/* weir CPU kernels: the WEIR_KQ_X16 multi-token GEMM on AMX-INT8 (Q8_0, Q4_K, Q5_K, Q6_K).
 *
 * Internal to the kernels: weir_kq_matmul_rows (matmul_kq.c) calls it for WEIR_KQ_X16 rows
 * when the AVX-512 VNNI path is selected, the call has at least WEIR_KQ_AMX_MIN_TOKENS
 * tokens, and weir_kq_amx_enabled() says yes. Results equal the VNNI path's up to the order
 * of the f32 additions (the per-sub-block integer sums are the same numbers).
 *
 * Use requires CPUID AMX-TILE + AMX-INT8 and the kernel's grant of XTILEDATA to the process
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, 18), requested once by weir_kq_amx_available()). Each call
 * loads its own tile configuration on the calling thread and releases it before returning, so
 * pool threads need no setup and hold no tile state between calls.
 *
 * Memory: a per-thread scratch (one 64-row block of decoded weights plus the call's
 * activations rearranged: about 128 x cols + 16 x cols x ceil(n_tokens / 16) bytes), grown on
 * demand and freed when the library is unloaded or the process exits (not at thread exit: a
 * key destructor could outlive a dlclose'd plugin). */
#ifndef WEIR_KERNELS_CPU_MATMUL_KQ_AMX_H
#define WEIR_KERNELS_CPU_MATMUL_KQ_AMX_H

#include <stdint.h>

#include "matmul_kq.h"

#if (defined(__x86_64__) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && \
     defined(__AVX512F__) && defined(__AVX512BW__))
#define WEIR_KQ_AMX_BUILT 1
#else
#define WEIR_KQ_AMX_BUILT 0
#endif

/* Below this many tokens the VNNI kernel runs (it keeps up to 16 tokens in registers). */
#define WEIR_KQ_AMX_MIN_TOKENS 16

/* 1 when this build has the AMX kernel, the CPU has AMX-INT8 and the OS grants XTILEDATA
 * (asks for it on first call). Thread-safe after the first call; the first call may race
 * harmlessly (every caller computes the same answer). */
int weir_kq_amx_available(void);

/* Rows [r0, r1) of a WEIR_KQ_X16 call (a->type one of the four X16 types, weir_kq_x16_fits).
 * Returns 0, or -1 without touching y when the build lacks AMX or the scratch cannot be
 * allocated (the caller then runs another path). The caller checked availability. */
int weir_kq_amx_rows(const weir_kq_matmul_args *a, int64_t r0, int64_t r1);

#endif
