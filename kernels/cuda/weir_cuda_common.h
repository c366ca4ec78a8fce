/* Small helpers every weir CUDA plugin uses: mapping CUDA errors to weir statuses and making
 * the instance's device current on the calling thread. Plain C, header-only. */
#ifndef WEIR_CUDA_COMMON_H
#define WEIR_CUDA_COMMON_H

#include <cuda_runtime_api.h>
#include <string.h>

#include "weir/plugin.h"
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

/* A device scratch buffer that grows on demand and never frees a smaller one before fini: a
 * recorded step graph (docs/cuda.md, "Step graphs") keeps the pointer it was recorded with,
 * so memory one replays into must stay valid, and the engine records graphs after plugins
 * have sized their scratch but cannot see later growth. Growth is by half again at least, so
 * the kept buffers add up to at most twice the largest. Not thread-safe (one per instance,
 * driven by the engine thread). */
#define WEIR_CUDA_SCRATCH_KEEP 48
typedef struct weir_cuda_scratch {
  void *p;
  size_t size;
  void *old[WEIR_CUDA_SCRATCH_KEEP];
  int num_old;
} weir_cuda_scratch;

/* Makes s->p at least `need` bytes (from host->device_alloc); a status when that fails, with
 * the old buffer kept. */
static inline int weir_cuda_scratch_reserve(const weir_host *h, weir_cuda_scratch *s,
                                            size_t need) {
  if (need <= s->size) return WEIR_OK;
  if (s->p && s->num_old == WEIR_CUDA_SCRATCH_KEEP) return WEIR_E_NOSPACE; /* 1.5^48 x: never */
  size_t want = s->size + s->size / 2;
  if (want < need) want = need;
  void *nb = NULL;
  int rc = h->device_alloc(h->ctx, want, &nb);
  if (rc != WEIR_OK) return rc;
  if (s->p) s->old[s->num_old++] = s->p;
  s->p = nb;
  s->size = want;
  return WEIR_OK;
}

static inline void weir_cuda_scratch_free(const weir_host *h, weir_cuda_scratch *s) {
  for (int i = 0; i < s->num_old; i++) h->device_free(h->ctx, s->old[i]);
  if (s->p) h->device_free(h->ctx, s->p);
  memset(s, 0, sizeof *s);
}

#endif
