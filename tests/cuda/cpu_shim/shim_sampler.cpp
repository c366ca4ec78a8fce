// kernels/cuda/sampler.cu compiled for the CPU shim (its launchers keep their C names; the
// segmented radix sort becomes a stable sort).
#define WEIR_CUDA_SHIM
#define WEIR_SAMPLER_THREADS 64 // a thread per CUDA thread: keep blocks small
#include "cuda_shim.h"

#include "sampler.cu"
