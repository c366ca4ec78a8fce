/* The fp16 quantization scheme on CUDA (weir_quant_fp16_cuda.so): weights are stored in half
 * precision on the GPU whatever their GGUF source type; products accumulate in f32.
 *   1-8 tokens: a hand GEMV that streams W once with 16-byte loads (decode is bound by the
 *               bytes of W, so reading it once per step is the whole game);
 *   more:       activations are converted to f16 and cuBLAS runs the GEMM on tensor cores
 *               with f32 accumulation and f32 output.
 * See docs/cuda.md. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "weir/quant.h"
#include "weir_cuda_common.h"
#include "weir_cuda_kernels.h"

#define GEMV_MAX_TOKENS 8

/* The CPU fp16 scheme's option, accepted so that one [quant] table serves both devices. */
static const weir_option_desc k_options[] = {
    {.key = "keep_f32", .type = WEIR_OPT_BOOL,
     .help = "CPU only; on CUDA every weight is stored in f16 (setting it true logs a warning)",
     .def_bool = 0},
};

typedef struct f16_weight {
  void *w;         /* device f16 [out][in] */
  int64_t in, out;
  size_t bytes;
} f16_weight;

typedef struct cuda_f16 {
  const weir_host *host;
  cudaStream_t stream;
  int device_id;
  cublasHandle_t cublas;
  int own_cublas;  /* created here because the host offered none */
  void *xh;        /* f16 copy of the activations for cuBLAS */
  size_t xh_size;
  int *bad_id;     /* host-mapped flag the embed kernel raises for an out-of-range id */
  int *bad_id_dev;
} cuda_f16;

#define LOG(q, lvl, ...) (q)->host->log((q)->host->ctx, (lvl), __VA_ARGS__)

static int fail(cuda_f16 *q, cudaError_t e, const char *what) {
  LOG(q, WEIR_LOG_ERROR, "fp16 (cuda): %s failed: %s", what, cudaGetErrorString(e));
  return weir_cuda_status(e);
}

static void q_fini(void *self) {
  cuda_f16 *q = self;
  if (!q) return;
  if (q->own_cublas && q->cublas) cublasDestroy(q->cublas);
  if (q->xh) q->host->device_free(q->host->ctx, q->xh);
  if (q->bad_id) cudaFreeHost(q->bad_id);
  q->host->free(q->host->ctx, q);
}

static int q_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  int rc = WEIR_E_NOMEM;
  cuda_f16 *q = host->alloc(host->ctx, sizeof *q, 0);
  if (!q) goto fail;
  memset(q, 0, sizeof *q);
  q->host = host;
  if (args->num_options > 0 && args->options[0].is_set && args->options[0].b)
    LOG(q, WEIR_LOG_WARN, "fp16 (cuda): keep_f32 is ignored on CUDA; weights are stored in f16");
  if (!host->device_alloc) {
    LOG(q, WEIR_LOG_ERROR, "fp16 (cuda): the host offers no device allocator");
    rc = WEIR_E_NOTSUP;
    goto free_q;
  }
  if (host->device_handle) {
    q->stream = (cudaStream_t)host->device_handle(host->ctx, "cuda.stream");
    const int *dev = host->device_handle(host->ctx, "cuda.device");
    if (dev) q->device_id = *dev;
    q->cublas = (cublasHandle_t)host->device_handle(host->ctx, "cublas");
  }
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) {
    fail(q, e, "cudaSetDevice");
    rc = WEIR_E_DEVICE;
    goto free_q;
  }
  if (!q->cublas) {
    if (cublasCreate(&q->cublas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(q->cublas, q->stream) != CUBLAS_STATUS_SUCCESS) {
      LOG(q, WEIR_LOG_ERROR, "fp16 (cuda): cannot create a cuBLAS handle");
      rc = WEIR_E_DEVICE;
      goto free_q;
    }
    q->own_cublas = 1;
  }
  if ((e = cudaHostAlloc((void **)&q->bad_id, sizeof(int), cudaHostAllocMapped)) != cudaSuccess ||
      (e = cudaHostGetDevicePointer((void **)&q->bad_id_dev, q->bad_id, 0)) != cudaSuccess) {
    rc = fail(q, e, "mapped host flag");
    goto free_q;
  }
  *q->bad_id = 0;
  *self = q;
  return WEIR_OK;
free_q:
  q_fini(q);
fail:
  return rc;
}

static int q_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  cuda_f16 *q = self;
  const weir_tensor *src = args->src;
  int rc = WEIR_E_NOTSUP;
  switch (src->dtype) {
  case WEIR_DTYPE_F32: case WEIR_DTYPE_F16: case WEIR_DTYPE_BF16:
  case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: break;
  default:
    LOG(q, WEIR_LOG_ERROR, "fp16 (cuda): %s: source type %s is not supported", args->name,
        weir_dtype_name(src->dtype));
    return WEIR_E_NOTSUP;
  }
  const int64_t in = src->ne[0];
  const int64_t out = src->ndim >= 2 ? src->ne[1] : 1;
  const size_t row_bytes = weir_dtype_row_bytes(src->dtype, in);
  if (in <= 0 || out <= 0 || row_bytes == 0) {
    LOG(q, WEIR_LOG_ERROR, "fp16 (cuda): %s: shape %lld x %lld does not fit type %s",
        args->name, (long long)out, (long long)in, weir_dtype_name(src->dtype));
    return WEIR_E_NOTSUP;
  }
  const size_t stride = src->ndim >= 2 && src->nb[1] ? src->nb[1] : row_bytes;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return fail(q, e, "cudaSetDevice");

  f16_weight *w = q->host->alloc(q->host->ctx, sizeof *w, 0);
  if (!w) return WEIR_E_NOMEM;
  w->in = in;
  w->out = out;
  w->bytes = (size_t)in * (size_t)out * 2;
  w->w = NULL;
  void *tmp = NULL;
  rc = q->host->device_alloc(q->host->ctx, w->bytes, &w->w);
  if (rc != WEIR_OK) goto free_w;
  if (src->dtype == WEIR_DTYPE_F16 && stride == row_bytes) {
    /* Already f16 and contiguous: one copy, no staging. */
    e = cudaMemcpyAsync(w->w, src->data, w->bytes, cudaMemcpyHostToDevice, q->stream);
    if (e != cudaSuccess) goto cuda_fail;
  } else {
    /* The raw source goes to the device and is converted there (a 1B-parameter Q4_0 model
     * would take seconds to dequantize on one CPU core). */
    rc = q->host->device_alloc(q->host->ctx, stride * (size_t)out, &tmp);
    if (rc != WEIR_OK) goto free_dev;
    if ((e = cudaMemcpyAsync(tmp, src->data, stride * (size_t)out, cudaMemcpyHostToDevice,
                             q->stream)) != cudaSuccess ||
        (e = weir_cuda_pack_f16(q->stream, w->w, tmp, (int32_t)src->dtype, out, in, stride)) !=
            cudaSuccess)
      goto cuda_fail;
  }
  /* Packing happens at load time: waiting here keeps the source's lifetime simple and reports
   * a bad kernel at the weight that caused it. */
  if ((e = cudaStreamSynchronize(q->stream)) != cudaSuccess) goto cuda_fail;
  if (tmp) q->host->device_free(q->host->ctx, tmp);
  *weight = w;
  return WEIR_OK;
cuda_fail:
  rc = fail(q, e, args->name ? args->name : "pack");
  if (tmp) q->host->device_free(q->host->ctx, tmp);
free_dev:
  q->host->device_free(q->host->ctx, w->w);
free_w:
  q->host->free(q->host->ctx, w);
  return rc;
}

static void q_release(void *self, void *weight) {
  cuda_f16 *q = self;
  f16_weight *w = weight;
  if (!w) return;
  q->host->device_free(q->host->ctx, w->w);
  q->host->free(q->host->ctx, w);
}

static size_t q_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weight ? ((const f16_weight *)weight)->bytes : 0;
}

static int q_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  cuda_f16 *q = self;
  const f16_weight *w = weight;
  if (n_tokens <= 0) return WEIR_OK;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return fail(q, e, "cudaSetDevice");
  if (n_tokens <= GEMV_MAX_TOKENS) {
    e = weir_cuda_gemv_f16(q->stream, w->w, x, y, w->in, w->out, (int32_t)n_tokens);
    return e == cudaSuccess ? WEIR_OK : fail(q, e, "gemv");
  }
  if (n_tokens > 0x7fffffff || w->in > 0x7fffffff || w->out > 0x7fffffff) return WEIR_E_RANGE;
  const size_t need = (size_t)n_tokens * (size_t)w->in * 2;
  if (need > q->xh_size) {
    void *nb = NULL;
    int rc = q->host->device_alloc(q->host->ctx, need, &nb);
    if (rc != WEIR_OK) return rc;
    if (q->xh) q->host->device_free(q->host->ctx, q->xh);
    q->xh = nb;
    q->xh_size = need;
  }
  if ((e = weir_cuda_f32_to_f16(q->stream, q->xh, x, n_tokens * w->in)) != cudaSuccess)
    return fail(q, e, "f32_to_f16");
  /* Row-major Y[n][out] = X[n][in] W[out][in]^T is, column-major, Y(out x n) = W^T X with W
   * seen as (in x out, ld in) and X as (in x n, ld in). */
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t s =
      cublasGemmEx(q->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->out, (int)n_tokens, (int)w->in,
                   &alpha, w->w, CUDA_R_16F, (int)w->in, q->xh, CUDA_R_16F, (int)w->in, &beta, y,
                   CUDA_R_32F, (int)w->out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    LOG(q, WEIR_LOG_ERROR, "fp16 (cuda): cublasGemmEx (%lld x %lld x %lld) failed: status %d",
        (long long)w->out, (long long)n_tokens, (long long)w->in, (int)s);
    return WEIR_E_DEVICE;
  }
  return WEIR_OK;
}

/* An id outside the table cannot be seen by the host without waiting for the device, so the
 * kernel zero-fills that row and raises a host-mapped flag; the next embed call (normally the
 * next step's) returns WEIR_E_RANGE. Core validates ids against the vocabulary before they
 * reach the device, so this is a second line of defence. */
static int q_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  cuda_f16 *q = self;
  const f16_weight *w = weight;
  if (*(volatile int *)q->bad_id) {
    *(volatile int *)q->bad_id = 0;
    LOG(q, WEIR_LOG_ERROR, "fp16 (cuda): an earlier embed saw a token id outside [0, %lld)",
        (long long)w->out);
    return WEIR_E_RANGE;
  }
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return fail(q, e, "cudaSetDevice");
  e = weir_cuda_embed_f16(q->stream, w->w, ids, out, n, w->out, w->in, q->bad_id_dev);
  return e == cudaSuccess ? WEIR_OK : fail(q, e, "embed");
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = q_pack,
    .release = q_release,
    .weight_bytes = q_weight_bytes,
    .matmul = q_matmul,
    .embed = q_embed,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "fp16",
    .version = "0.1.0",
    .description = "half-precision weights on NVIDIA GPUs: GEMV for decode, cuBLAS for prefill",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = k_options,
    .num_options = 1,
    .init = q_init,
    .fini = q_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
