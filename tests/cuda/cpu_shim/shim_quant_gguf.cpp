// kernels/cuda/quant_gguf.cu compiled for the CPU shim (its launchers keep their C names).
// Every wide load checks its alignment here: x86 tolerates a misaligned load, a GPU faults.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda_shim.h"

#define WEIR_GGUF_CHECK_ALIGN(p, a)                                                           \
  do {                                                                                        \
    if (reinterpret_cast<uintptr_t>(p) % (a) != 0) {                                          \
      fprintf(stderr, "misaligned %d-byte load at %p in %s\n", (a), (const void *)(p),         \
              __func__);                                                                      \
      abort();                                                                                \
    }                                                                                         \
  } while (0)

#include "quant_gguf.cu"
