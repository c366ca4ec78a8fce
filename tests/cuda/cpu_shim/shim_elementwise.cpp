// kernels/cuda/elementwise.cu compiled for the CPU shim (its launchers keep their C names).
#include "cuda_shim.h"

#include "elementwise.cu"
