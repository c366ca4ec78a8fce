// kernels/cuda/quant_gguf.cu compiled for the CPU shim (its launchers keep their C names).
#include "cuda_shim.h"

#include "quant_gguf.cu"
