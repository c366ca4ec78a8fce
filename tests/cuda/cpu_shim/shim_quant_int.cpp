// kernels/cuda/quant_int8.cu and quant_int4.cu compiled for the CPU shim (their launchers keep
// their C names).
#include "cuda_shim.h"

#include "quant_int8.cu"
#include "quant_int4.cu"
