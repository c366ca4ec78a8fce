/* The int8 quantization scheme on CUDA (weir_quant_int8_cuda.so): symmetric int8 weights with
 * an f32 scale per 32 input columns on the GPU (a Q8_0 source is copied exactly; other
 * sources are quantized on the device by the CPU int8 rule, d = max|w| / 127).
 *   1-16 tokens: the activations are quantized once to int8 per 32 columns (the CPU
 *               plugin's rule), then a dp4a GEMV streams the int8 weights once for all
 *               tokens (decode is bound by the weight bytes); matmul_group (ABI 1.7) runs
 *               q/k/v or gate/up as one launch on one quantized copy of the input;
 *   more:       the weights are dequantized to f16 into a workspace and cuBLAS runs the GEMM
 *               on tensor cores (f32 accumulation).
 * See docs/cuda.md and docs/quant-int8.md. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "weir/quant.h"
#include "weir_cuda_quant.h"

#define GEMV_MAX_TOKENS 16

/* The CPU plugin's option, accepted so that one [quant] table serves both devices. */
static const weir_option_desc k_options[] = {
    {.key = "group_size", .type = WEIR_OPT_INT, .def_int = 32, .min = 0, .max = 128,
     .help = "CPU: columns per scale (0, 32, 64, 128); CUDA always uses 32 (another value logs "
             "a warning)"},
};

typedef struct q8_weight {
  void *q;        /* device int8 [rows][kp] */
  float *d;       /* device f32 [rows][kp / 32] */
  int64_t rows, cols, kp;
  size_t bytes;
} q8_weight;

static int q_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  weir_option_value group;
  int rc = weir_option_get(host, "group_size", WEIR_OPT_INT, &group);
  if (rc != WEIR_OK) return rc;
  weir_cuda_qctx *q;
  rc = weir_cuda_qctx_new(host, "int8 (cuda)", &q);
  if (rc != WEIR_OK) return rc;
  if (group.is_set && group.i != 32)
    WEIR_CUDA_QLOG(q, WEIR_LOG_WARN, "int8 (cuda): group_size %lld is CPU only; CUDA uses 32",
                   (long long)group.i);
  *self = q;
  return WEIR_OK;
}

static void q_release(void *self, void *weight) {
  weir_cuda_qctx *q = self;
  q8_weight *w = weight;
  if (!w) return;
  if (w->q) q->host->device_free(q->host->ctx, w->q);
  if (w->d) q->host->device_free(q->host->ctx, w->d);
  q->host->free(q->host->ctx, w);
}

static int q_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  weir_cuda_qctx *q = self;
  const weir_tensor *src = args->src;
  const char *name = args->name ? args->name : "?";
  int64_t rows, cols;
  size_t stride;
  int rc = weir_cuda_qsource(q, src, name, &rows, &cols, &stride);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  q8_weight *w = q->host->alloc(q->host->ctx, sizeof *w, 0);
  if (!w) return WEIR_E_NOMEM;
  memset(w, 0, sizeof *w);
  w->rows = rows;
  w->cols = cols;
  w->kp = (cols + 31) / 32 * 32;
  const size_t qb = (size_t)rows * (size_t)w->kp, db = (size_t)rows * (size_t)(w->kp / 32) * 4;
  w->bytes = qb + db;
  if ((rc = q->host->device_alloc(q->host->ctx, qb, &w->q)) != WEIR_OK ||
      (rc = q->host->device_alloc(q->host->ctx, db, (void **)&w->d)) != WEIR_OK ||
      (rc = weir_cuda_qstage_pack(q, src, rows, cols, stride, name, w->q, w->d, w->kp)) !=
          WEIR_OK) {
    q_release(q, w);
    return rc;
  }
  *weight = w;
  return WEIR_OK;
}

static size_t q_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weight ? ((const q8_weight *)weight)->bytes : 0;
}

/* The dp4a path for up to GEMV_MAX_TOKENS tokens: x quantized once into the instance's act
 * workspace, then one launch over all n weights (n = 1 for matmul). */
static int q8_dp4a(weir_cuda_qctx *q, const q8_weight *const *w, int n, const float *x,
                   float *const *y, int64_t n_tokens) {
  const int64_t kp = w[0]->kp, cols = w[0]->cols;
  const void *qs[WEIR_CUDA_Q8_MAX_SET];
  const float *ds[WEIR_CUDA_Q8_MAX_SET];
  int64_t rows[WEIR_CUDA_Q8_MAX_SET];
  for (int i = 0; i < n; i++) qs[i] = w[i]->q, ds[i] = w[i]->d, rows[i] = w[i]->rows;
  int rc = weir_cuda_scratch_reserve(q->host, &q->act, weir_cuda_q8_act_bytes(n_tokens, kp));
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_q8_quantize_act(q->stream, x, NULL, q->act.p, n_tokens, cols, kp);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "quantize activations");
  e = weir_cuda_gemv_q8_dp4a(q->stream, n, qs, ds, rows, y, q->act.p, kp, n_tokens);
  return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(q, e, "gemv");
}

static int q_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  weir_cuda_qctx *q = self;
  const q8_weight *w = weight;
  if (n_tokens <= 0) return WEIR_OK;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  if (n_tokens <= GEMV_MAX_TOKENS) return q8_dp4a(q, &w, 1, x, &y, n_tokens);
  int rc = weir_cuda_scratch_reserve(q->host, &q->wh, (size_t)w->rows * (size_t)w->cols * 2);
  if (rc != WEIR_OK) return rc;
  e = weir_cuda_dequant_q8_f16(q->stream, q->wh.p, w->q, w->d, w->rows, w->cols, w->kp);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "dequant");
  return weir_cuda_qgemm(q, q->wh.p, x, y, n_tokens, w->cols, w->rows);
}

/* ABI 1.7: q/k/v or gate/up in one launch on one quantized copy of x. Larger batches (the
 * cuBLAS path) and weights of different widths go back to one matmul each (NOTSUP). */
static int q_matmul_group(void *self, const void *const *weights, int n, const float *x,
                          float *const *ys, int64_t n_tokens) {
  weir_cuda_qctx *q = self;
  if (n < 1 || n > WEIR_CUDA_Q8_MAX_SET || n_tokens > GEMV_MAX_TOKENS) return WEIR_E_NOTSUP;
  if (n_tokens <= 0) return WEIR_OK;
  const q8_weight *w[WEIR_CUDA_Q8_MAX_SET];
  for (int i = 0; i < n; i++) {
    w[i] = weights[i];
    if (!w[i] || w[i]->cols != w[0]->cols) return WEIR_E_NOTSUP;
  }
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  return q8_dp4a(q, w, n, x, ys, n_tokens);
}

static int q_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  weir_cuda_qctx *q = self;
  const q8_weight *w = weight;
  int rc = weir_cuda_qcheck_ids(q, w->rows);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  e = weir_cuda_embed_q8(q->stream, w->q, w->d, ids, out, n, w->rows, w->cols, w->kp,
                         q->bad_id_dev);
  return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(q, e, "embed");
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = q_pack,
    .release = q_release,
    .weight_bytes = q_weight_bytes,
    .matmul = q_matmul,
    .embed = q_embed,
    .matmul_group = q_matmul_group,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "int8",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "int8 weights (f32 scale per 32) on NVIDIA GPUs: GEMV for decode, "
                   "dequant + cuBLAS for prefill",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = k_options,
    .num_options = 1,
    .init = q_init,
    .fini = weir_cuda_qctx_delete,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
