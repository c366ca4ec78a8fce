// The prologue of a shim suite that includes a kernel file with dynamic shared memory
// (attention.cu): cuda_shim.h with the extern __shared__ array mapped to `sm` below, which the
// running block owns until it returns. Include once per test binary, before the kernel file.
#ifndef WEIR_TESTS_SHIM_SMEM_H
#define WEIR_TESTS_SHIM_SMEM_H

#define WEIR_SHIM_EXTERN_SHARED
#include "cuda_shim.h"

namespace {
alignas(16) float sm[1 << 18]; // the running block's dynamic shared memory (1 MiB)
}
// Publishes sm's address so that the optimizer cannot assume the barrier call leaves it
// untouched (other threads write it between barriers).
void *volatile shim_smem_escape = sm;

#endif
