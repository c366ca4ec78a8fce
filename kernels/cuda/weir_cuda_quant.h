/* Glue the CUDA quant plugins share (fp16, int8 and awq_int4 on CUDA): the instance's
 * stream, cuBLAS handle and host-mapped error flag, grow-only device workspaces, and the
 * prefill GEMM (dequantized f16 weights times f16 activations on tensor cores, f32 output).
 * Plain C, header-only; every function returns a weir status and logs through the host.
 * Not thread-safe: one instance is driven by one thread at a time, as every plugin. */
#ifndef WEIR_CUDA_QUANT_H
#define WEIR_CUDA_QUANT_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "weir/plugin.h"
#include "weir/quant.h"
#include "weir_cuda_common.h"
#include "weir_cuda_kernels.h"

typedef struct weir_cuda_qctx {
  const weir_host *host;
  const char *name;     /* for messages: "int8 (cuda)" */
  cudaStream_t stream;
  int device_id;
  cublasHandle_t cublas;
  int own_cublas;
  weir_cuda_scratch wh; /* f16 dequantized weight for the GEMM */
  weir_cuda_scratch xh; /* f16 activations for the GEMM */
  weir_cuda_scratch act; /* int8-quantized activations for the dp4a GEMVs */
  int *bad_id;          /* host-mapped flag the embed kernels raise for an id out of range */
  int *bad_id_dev;
} weir_cuda_qctx;

#define WEIR_CUDA_QLOG(q, lvl, ...) (q)->host->log((q)->host->ctx, (lvl), __VA_ARGS__)

static inline int weir_cuda_qfail(weir_cuda_qctx *q, cudaError_t e, const char *what) {
  WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: %s failed: %s", q->name, what, cudaGetErrorString(e));
  return weir_cuda_status(e);
}

static inline void weir_cuda_qctx_fini(weir_cuda_qctx *q) {
  if (q->own_cublas && q->cublas) cublasDestroy(q->cublas);
  if (q->host) {
    weir_cuda_scratch_free(q->host, &q->wh);
    weir_cuda_scratch_free(q->host, &q->xh);
    weir_cuda_scratch_free(q->host, &q->act);
  }
  if (q->bad_id) cudaFreeHost(q->bad_id);
  memset(q, 0, sizeof *q);
}

/* Takes the device's stream, id and cuBLAS handle from the host (creating a handle when the
 * host offers none) and the mapped flag. On failure logs, releases what it took. */
static inline int weir_cuda_qctx_init(weir_cuda_qctx *q, const weir_host *host, const char *name) {
  memset(q, 0, sizeof *q);
  q->host = host;
  q->name = name;
  if (!host->device_alloc) {
    WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: the host offers no device allocator", name);
    return WEIR_E_NOTSUP;
  }
  if (host->device_handle) {
    q->stream = (cudaStream_t)host->device_handle(host->ctx, "cuda.stream");
    const int *dev = (const int *)host->device_handle(host->ctx, "cuda.device");
    if (dev) q->device_id = *dev;
    q->cublas = (cublasHandle_t)host->device_handle(host->ctx, "cublas");
  }
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) {
    weir_cuda_qfail(q, e, "cudaSetDevice");
    return WEIR_E_DEVICE;
  }
  if (!q->cublas) {
    if (cublasCreate(&q->cublas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(q->cublas, q->stream) != CUBLAS_STATUS_SUCCESS) {
      WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: cannot create a cuBLAS handle", name);
      q->cublas = NULL;
      return WEIR_E_DEVICE;
    }
    q->own_cublas = 1;
  }
  if ((e = cudaHostAlloc((void **)&q->bad_id, sizeof(int), cudaHostAllocMapped)) != cudaSuccess ||
      (e = cudaHostGetDevicePointer((void **)&q->bad_id_dev, q->bad_id, 0)) != cudaSuccess) {
    int rc = weir_cuda_qfail(q, e, "mapped host flag");
    weir_cuda_qctx_fini(q);
    return rc;
  }
  *q->bad_id = 0;
  return WEIR_OK;
}

/* For the schemes whose instance is a bare weir_cuda_qctx: a new one from host->alloc,
 * initialised (NULL and a status on failure, nothing held), and the plugin fini to free it. */
static inline int weir_cuda_qctx_new(const weir_host *host, const char *name, weir_cuda_qctx **out) {
  *out = NULL;
  weir_cuda_qctx *q = (weir_cuda_qctx *)host->alloc(host->ctx, sizeof *q, 0);
  if (!q) return WEIR_E_NOMEM;
  int rc = weir_cuda_qctx_init(q, host, name);
  if (rc != WEIR_OK) {
    host->free(host->ctx, q);
    return rc;
  }
  *out = q;
  return WEIR_OK;
}

static inline void weir_cuda_qctx_delete(void *self) {
  weir_cuda_qctx *q = (weir_cuda_qctx *)self;
  if (!q) return;
  const weir_host *h = q->host;
  weir_cuda_qctx_fini(q);
  h->free(h->ctx, q);
}

/* A 1-D or 2-D source tensor of a type the device packing kernels read (F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1): its shape and the byte stride between its rows. Logs and returns
 * WEIR_E_NOTSUP for anything else. */
static inline int weir_cuda_qsource(weir_cuda_qctx *q, const weir_tensor *src, const char *name,
                                    int64_t *rows, int64_t *cols, size_t *stride) {
  switch (src->dtype) {
  case WEIR_DTYPE_F32: case WEIR_DTYPE_F16: case WEIR_DTYPE_BF16:
  case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: break;
  default:
    WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: %s: source type %s is not supported", q->name,
                   name, weir_dtype_name(src->dtype));
    return WEIR_E_NOTSUP;
  }
  *cols = src->ne[0];
  *rows = src->ndim >= 2 ? src->ne[1] : 1;
  const size_t row_bytes = weir_dtype_row_bytes(src->dtype, *cols);
  if (*cols <= 0 || *rows <= 0 || row_bytes == 0 || src->ndim > 2) {
    WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: %s: shape %lld x %lld does not fit type %s", q->name,
                   name, (long long)*rows, (long long)*cols, weir_dtype_name(src->dtype));
    return WEIR_E_NOTSUP;
  }
  *stride = src->ndim >= 2 && src->nb[1] ? src->nb[1] : row_bytes;
  return WEIR_OK;
}

/* The pack step the f16 and int8 schemes (and gguf's plain sources) share: the raw source
 * rows (rows x stride bytes of src->data, host) go to a staging buffer on the device and one
 * kernel converts them there (a 1B-parameter Q4_0 model would take seconds to dequantize on
 * one CPU core): to f16 [rows][cols] at dst when d8 is NULL, else to int8 [rows][kp] at dst
 * with f32 scales [rows][kp / 32] at d8 (weir_cuda_pack_q8). Packing happens at load, so it
 * waits for the stream: the source's lifetime stays simple and a failure is reported at the
 * tensor that caused it (logged, naming it). The staging buffer is freed either way. */
static inline int weir_cuda_qstage_pack(weir_cuda_qctx *q, const weir_tensor *src, int64_t rows,
                                        int64_t cols, size_t stride, const char *name, void *dst,
                                        float *d8, int64_t kp) {
  void *tmp = NULL;
  int rc = q->host->device_alloc(q->host->ctx, stride * (size_t)rows, &tmp);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = cudaMemcpyAsync(tmp, src->data, stride * (size_t)rows, cudaMemcpyHostToDevice,
                                  q->stream);
  if (e == cudaSuccess)
    e = d8 ? weir_cuda_pack_q8(q->stream, dst, d8, tmp, (int32_t)src->dtype, rows, cols, kp,
                               stride)
           : weir_cuda_pack_f16(q->stream, dst, tmp, (int32_t)src->dtype, rows, cols, stride);
  if (e == cudaSuccess) e = cudaStreamSynchronize(q->stream);
  if (e != cudaSuccess) rc = weir_cuda_qfail(q, e, name);
  q->host->device_free(q->host->ctx, tmp);
  return rc;
}

/* An earlier embed saw an id out of range: the kernels zero-fill and raise a flag the host
 * cannot see without waiting, so the next embed reports it. */
static inline int weir_cuda_qcheck_ids(weir_cuda_qctx *q, int64_t rows) {
  if (!*(volatile int *)q->bad_id) return WEIR_OK;
  *(volatile int *)q->bad_id = 0;
  WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: an earlier embed saw a token id outside [0, %lld)",
                 q->name, (long long)rows);
  return WEIR_E_RANGE;
}

/* y [n][out] f32 = x [n][in] f32 times W^T, with W f16 [out][in] on the device (q->wh.p for the
 * schemes that dequantize into it): x goes to f16 and cuBLAS runs the GEMM on tensor cores
 * with f32 accumulation. */
static inline int weir_cuda_qgemm(weir_cuda_qctx *q, const void *w16, const float *x, float *y,
                                  int64_t n, int64_t in, int64_t out) {
  if (n > 0x7fffffff || in > 0x7fffffff || out > 0x7fffffff) return WEIR_E_RANGE;
  int rc = weir_cuda_scratch_reserve(q->host, &q->xh, (size_t)n * (size_t)in * 2);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_f32_to_f16(q->stream, q->xh.p, x, n * in);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "f32_to_f16");
  /* Row-major Y[n][out] = X[n][in] W[out][in]^T is, column-major, Y(out x n) = W^T X. */
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t s = cublasGemmEx(q->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in,
                                  &alpha, w16, CUDA_R_16F, (int)in, q->xh.p, CUDA_R_16F, (int)in,
                                  &beta, y, CUDA_R_32F, (int)out, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: cublasGemmEx (%lld x %lld x %lld) failed: status %d",
                   q->name, (long long)out, (long long)n, (long long)in, (int)s);
    return WEIR_E_DEVICE;
  }
  return WEIR_OK;
}

#endif
