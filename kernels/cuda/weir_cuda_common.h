/* Small helpers every weir CUDA plugin uses: mapping CUDA errors to weir statuses and making
 * the instance's device current on the calling thread. Plain C, header-only. */
#ifndef WEIR_CUDA_COMMON_H
#define WEIR_CUDA_COMMON_H

#include <cuda_runtime_api.h>

#include "weir/status.h"

/* A CUDA error as a weir status: allocation failures are WEIR_E_NOMEM, bad arguments
 * WEIR_E_INVAL, everything else (launch failures, a lost device) WEIR_E_DEVICE. */
static inline int weir_cuda_status(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return WEIR_OK;
  case cudaErrorMemoryAllocation: return WEIR_E_NOMEM;
  case cudaErrorInvalidValue: case cudaErrorInvalidConfiguration: return WEIR_E_INVAL;
  default: return WEIR_E_DEVICE;
  }
}

/* cudaSetDevice on the calling thread unless it already chose `id` through this helper: the
 * engine thread that drives a plugin is not the thread that initialised it. */
static inline cudaError_t weir_cuda_use_device(int id) {
  static __thread int current = -1;
  if (current == id) return cudaSuccess;
  cudaError_t e = cudaSetDevice(id);
  if (e == cudaSuccess) current = id;
  return e;
}

#endif
