/* The fp16 quantization scheme on CUDA (weir_quant_fp16_cuda.so): weights are stored in half
 * precision on the GPU whatever their GGUF source type; products accumulate in f32.
 *   1-8 tokens: a hand GEMV that streams W once with 16-byte loads (decode is bound by the
 *               bytes of W, so reading it once per step is the whole game);
 *   more:       activations are converted to f16 and cuBLAS runs the GEMM on tensor cores
 *               with f32 accumulation and f32 output.
 * See docs/cuda.md. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "weir/quant.h"
#include "weir_cuda_quant.h"

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

static int q_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  weir_option_value keep;
  int rc = weir_option_get(host, "keep_f32", WEIR_OPT_BOOL, &keep);
  if (rc != WEIR_OK) return rc;
  weir_cuda_qctx *q;
  rc = weir_cuda_qctx_new(host, "fp16 (cuda)", &q);
  if (rc != WEIR_OK) return rc;
  if (keep.is_set && keep.b)
    WEIR_CUDA_QLOG(q, WEIR_LOG_WARN,
                   "fp16 (cuda): keep_f32 is ignored on CUDA; weights are stored in f16");
  *self = q;
  return WEIR_OK;
}

static int q_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  weir_cuda_qctx *q = self;
  const weir_tensor *src = args->src;
  int64_t in, out;
  size_t stride;
  int rc = weir_cuda_qsource(q, src, args->name ? args->name : "?", &out, &in, &stride);
  if (rc != WEIR_OK) return rc;
  const size_t row_bytes = weir_dtype_row_bytes(src->dtype, in);
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");

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
  rc = weir_cuda_qfail(q, e, args->name ? args->name : "pack");
  if (tmp) q->host->device_free(q->host->ctx, tmp);
free_dev:
  q->host->device_free(q->host->ctx, w->w);
free_w:
  q->host->free(q->host->ctx, w);
  return rc;
}

static void q_release(void *self, void *weight) {
  weir_cuda_qctx *q = self;
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
  weir_cuda_qctx *q = self;
  const f16_weight *w = weight;
  if (n_tokens <= 0) return WEIR_OK;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  if (n_tokens <= GEMV_MAX_TOKENS) {
    e = weir_cuda_gemv_f16(q->stream, w->w, x, y, w->in, w->out, (int32_t)n_tokens);
    return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(q, e, "gemv");
  }
  return weir_cuda_qgemm(q, w->w, x, y, n_tokens, w->in, w->out);
}

/* An id outside the table cannot be seen by the host without waiting for the device, so the
 * kernel zero-fills that row and raises a host-mapped flag; the next embed call (normally the
 * next step's) returns WEIR_E_RANGE. Core validates ids against the vocabulary before they
 * reach the device, so this is a second line of defence. */
static int q_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  weir_cuda_qctx *q = self;
  const f16_weight *w = weight;
  int rc = weir_cuda_qcheck_ids(q, w->out);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  e = weir_cuda_embed_f16(q->stream, w->w, ids, out, n, w->out, w->in, q->bad_id_dev);
  return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(q, e, "embed");
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
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "half-precision weights on NVIDIA GPUs: GEMV for decode, cuBLAS for prefill",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = k_options,
    .num_options = 1,
    .init = q_init,
    .fini = weir_cuda_qctx_delete,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
