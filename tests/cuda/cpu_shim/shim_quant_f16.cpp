// kernels/cuda/quant_f16.cu compiled for the CPU shim (its launchers keep their C names).
#include "cuda_shim.h"

#include "quant_f16.cu"
