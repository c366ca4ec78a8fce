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

/* Makes device `id` current on the calling thread: the engine thread that drives a plugin is
 * not the thread that initialised it. cudaGetDevice only reads the runtime's per-thread state,
 * so the common case (already current) costs no driver call. */
static inline cudaError_t weir_cuda_use_device(int id) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == id) return cudaSuccess;
  return cudaSetDevice(id);
}

#endif
