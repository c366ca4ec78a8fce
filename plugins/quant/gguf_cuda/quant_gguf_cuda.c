/* The gguf quantization scheme on CUDA (weir_quant_gguf_cuda.so): a GGUF file's weights run
 * on the GPU in the blocks the file stores, no re-quantization. Native block types: Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS (exact: the device
 * holds the file's bytes; Q3_K's and Q6_K's are rearranged at load into 16-byte aligned
 * planes, the same bytes, so their kernels use wide loads). F32/F16/BF16 tensors are held in f16 (exact for F16).
 *   matmul, fewer than gemm_min_tokens tokens: the activations are quantized once to int8
 *       blocks of 32 (scale and sum), then one warp per output row decodes the blocks in
 *       registers and takes dp4a dot products with 8 tokens at a time
 *       (kernels/cuda/quant_gguf.cu);
 *   matmul, gemm_min_tokens or more: the weight is dequantized to f16 into a workspace and
 *       cuBLAS runs the GEMM on tensor cores (f32 accumulation);
 *   embed: rows dequantized to f32.
 * See docs/cuda.md. Not thread-safe: one instance is driven by one thread at a time. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "weir/quant.h"
#include "weir_cuda_gguf.h"
#include "weir_cuda_quant.h"

#define F16_GEMV_MAX_TOKENS 8

static const weir_option_desc k_options[] = {
    {.key = "gemm_min_tokens", .type = WEIR_OPT_INT, .def_int = 64, .min = 0, .max = 1 << 20,
     .help = "CUDA: batches of at least this many tokens dequantize the weight to f16 and run "
             "cuBLAS; smaller ones use the int8 dp4a kernels on the blocks (0: always dp4a)"},
};

typedef struct gguf_cuda {
  weir_cuda_qctx q;
  int64_t gemm_min_tokens; /* the quantized activations live in q.act */
} gguf_cuda;

typedef struct gguf_weight {
  int32_t dtype;    /* the source type: a native block type, or F16 for plain sources */
  void *w;          /* device: rows of blocks (row_bytes apart), or f16 [rows][cols] */
  size_t row_bytes;
  int64_t rows, cols;
  size_t bytes;
} gguf_weight;

static int native(int32_t dtype) { return weir_cuda_gguf_block_elems(dtype) != 0; }

static void g_fini(void *self) {
  gguf_cuda *g = self;
  if (!g) return;
  const weir_host *h = g->q.host;
  weir_cuda_qctx_fini(&g->q);
  h->free(h->ctx, g);
}

static int g_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  gguf_cuda *g = host->alloc(host->ctx, sizeof *g, 0);
  if (!g) return WEIR_E_NOMEM;
  memset(g, 0, sizeof *g);
  int rc = weir_cuda_qctx_init(&g->q, host, "gguf (cuda)");
  if (rc != WEIR_OK) {
    host->free(host->ctx, g);
    return rc;
  }
  int64_t gemm_min = 64;
  rc = weir_option_int(host, "gemm_min_tokens", &gemm_min); /* by name (ABI 1.5) */
  if (rc != WEIR_OK) {
    weir_cuda_qctx_fini(&g->q);
    host->free(host->ctx, g);
    return rc;
  }
  g->gemm_min_tokens = gemm_min;
  *self = g;
  return WEIR_OK;
}

static void g_release(void *self, void *weight) {
  gguf_cuda *g = self;
  gguf_weight *w = weight;
  if (!w) return;
  if (w->w) g->q.host->device_free(g->q.host->ctx, w->w);
  g->q.host->free(g->q.host->ctx, w);
}

/* Byte offsets of the f16 scale fields in one block of a native type. */
static int scale_fields(int32_t t, int off[2]) {
  switch (t) {
  case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q5_0: case WEIR_DTYPE_IQ4_NL:
  case WEIR_DTYPE_IQ4_XS:
    off[0] = 0;
    return 1;
  case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_1: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
    off[0] = 0, off[1] = 2;
    return 2;
  case WEIR_DTYPE_Q2_K: off[0] = 80, off[1] = 82; return 2;
  case WEIR_DTYPE_Q3_K: off[0] = 108; return 1;
  case WEIR_DTYPE_Q6_K: off[0] = 208; return 1;
  default: return 0;
  }
}

/* The first block (row, block) whose f16 scale is Inf or NaN, or -1: such a tensor would give
 * silently wrong (non-finite) outputs, so it is refused at load. */
static int64_t first_bad_block(const weir_tensor *src, int64_t rows, int64_t nblk, size_t bb,
                               size_t stride) {
  int off[2];
  const int nf = scale_fields((int32_t)src->dtype, off);
  const uint8_t *p = src->data;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < nblk; b++) {
      const uint8_t *blk = p + (size_t)r * stride + (size_t)b * bb;
      for (int f = 0; f < nf; f++)
        if ((blk[off[f] + 1] & 0x7c) == 0x7c) return r * nblk + b;
    }
  return -1;
}

static int g_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  gguf_cuda *g = self;
  weir_cuda_qctx *q = &g->q;
  const weir_tensor *src = args->src;
  const char *name = args->name ? args->name : "?";
  const int32_t t = (int32_t)src->dtype;
  const int plain = t == WEIR_DTYPE_F32 || t == WEIR_DTYPE_F16 || t == WEIR_DTYPE_BF16;
  if (!native(t) && !plain) {
    WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR,
                   "%s: tensor '%s' has type %s, which it does not run (it runs f32, f16, bf16, "
                   "q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)",
                   q->name, name, weir_dtype_name(src->dtype));
    return WEIR_E_NOTSUP;
  }
  const int64_t cols = src->ne[0], rows = src->ndim >= 2 ? src->ne[1] : 1;
  const size_t row_bytes = weir_dtype_row_bytes(src->dtype, cols);
  if (src->ndim < 1 || src->ndim > 2 || cols <= 0 || rows <= 0 || row_bytes == 0) {
    WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR,
                   "%s: tensor '%s' (%s): shape %lld x %lld does not fit the type (rows must "
                   "hold whole blocks of %lld)", q->name, name, weir_dtype_name(src->dtype),
                   (long long)rows, (long long)cols,
                   (long long)weir_dtype_block_elems(src->dtype));
    return WEIR_E_NOTSUP;
  }
  const size_t stride = src->ndim >= 2 && src->nb[1] ? src->nb[1] : row_bytes;
  if (stride < row_bytes) {
    WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: tensor '%s': row stride %zu < row bytes %zu",
                   q->name, name, stride, row_bytes);
    return WEIR_E_INVAL;
  }
  if (native(t)) {
    const int64_t be = weir_dtype_block_elems(src->dtype);
    const int64_t bad = first_bad_block(src, rows, cols / be, weir_dtype_block_bytes(src->dtype),
                                        stride);
    if (bad >= 0) {
      WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR,
                     "%s: tensor '%s' (%s): block %lld (row %lld) has a non-finite scale",
                     q->name, name, weir_dtype_name(src->dtype), (long long)bad,
                     (long long)(bad / (cols / be)));
      return WEIR_E_INVAL;
    }
  }
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  gguf_weight *w = q->host->alloc(q->host->ctx, sizeof *w, 0);
  if (!w) return WEIR_E_NOMEM;
  memset(w, 0, sizeof *w);
  w->rows = rows;
  w->cols = cols;
  int rc;
  const size_t rrb = weir_cuda_gguf_repacked_row_bytes(t, cols);
  if (native(t) && rrb) {
    /* Load-time repack (Q3_K, Q6_K): 16-byte aligned planes the kernels read with wide loads,
     * rewritten on the host from the file's rows (weir_cuda_gguf.h). */
    w->dtype = weir_cuda_gguf_repacked_type(t);
    w->row_bytes = rrb;
    w->bytes = rrb * (size_t)rows;
    void *staged = malloc(w->bytes);
    if (!staged) {
      rc = WEIR_E_NOMEM;
      goto fail;
    }
    if (weir_cuda_gguf_repack(t, staged, rrb, src->data, stride, rows, cols) != 0) {
      free(staged);
      WEIR_CUDA_QLOG(q, WEIR_LOG_ERROR, "%s: tensor %s: cannot repack %s rows", q->name, name,
                     weir_dtype_name(src->dtype));
      rc = WEIR_E_INVAL;
      goto fail;
    }
    if ((rc = q->host->device_alloc(q->host->ctx, w->bytes, &w->w)) != WEIR_OK) {
      free(staged);
      goto fail;
    }
    e = cudaMemcpyAsync(w->w, staged, w->bytes, cudaMemcpyHostToDevice, q->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(q->stream);
    free(staged);
    if (e != cudaSuccess) {
      rc = weir_cuda_qfail(q, e, name);
      goto fail;
    }
  } else if (native(t)) {
    /* The file's blocks, rows packed back to back. */
    w->dtype = t;
    w->row_bytes = row_bytes;
    w->bytes = row_bytes * (size_t)rows;
    if ((rc = q->host->device_alloc(q->host->ctx, w->bytes, &w->w)) != WEIR_OK) goto fail;
    if ((e = cudaMemcpy2DAsync(w->w, row_bytes, src->data, stride, row_bytes, (size_t)rows,
                               cudaMemcpyHostToDevice, q->stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(q->stream)) != cudaSuccess) {
      rc = weir_cuda_qfail(q, e, name);
      goto fail;
    }
  } else {
    /* Plain sources in f16 (the fp16 scheme's conversion, on the device). */
    w->dtype = WEIR_DTYPE_F16;
    w->row_bytes = (size_t)cols * 2;
    w->bytes = w->row_bytes * (size_t)rows;
    if ((rc = q->host->device_alloc(q->host->ctx, w->bytes, &w->w)) != WEIR_OK ||
        (rc = weir_cuda_qstage_pack(q, src, rows, cols, stride, name, w->w, NULL, 0)) != WEIR_OK)
      goto fail;
  }
  *weight = w;
  return WEIR_OK;
fail:
  g_release(g, w);
  return rc;
}

static size_t g_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weight ? ((const gguf_weight *)weight)->bytes : 0;
}

/* x quantized once (int8 blocks of 32 with scale and sum), then one dp4a launch per weight:
 * the block-type weights of a matmul or of a 1.7 group, all of w[0]->cols columns. */
static int dp4a_matmuls(gguf_cuda *g, const gguf_weight *const *w, int n, const float *x,
                        float *const *y, int64_t n_tokens) {
  weir_cuda_qctx *q = &g->q;
  const int64_t cols = w[0]->cols;
  int rc = weir_cuda_scratch_reserve(q->host, &q->act, weir_cuda_gguf_act_bytes(n_tokens, cols));
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_gguf_quantize_act(q->stream, x, q->act.p, n_tokens, cols);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "quantize activations");
  for (int i = 0; i < n; i++) {
    e = weir_cuda_gguf_matmul(q->stream, w[i]->dtype, w[i]->w, w[i]->row_bytes, q->act.p, y[i],
                              cols, w[i]->rows, n_tokens);
    if (e != cudaSuccess) return weir_cuda_qfail(q, e, "matmul");
  }
  return WEIR_OK;
}

static int g_matmul(void *self, const void *weight, const float *x, float *y, int64_t n) {
  gguf_cuda *g = self;
  weir_cuda_qctx *q = &g->q;
  const gguf_weight *w = weight;
  if (n <= 0) return WEIR_OK;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  int rc;
  if (w->dtype == WEIR_DTYPE_F16) {
    if (n <= F16_GEMV_MAX_TOKENS) {
      e = weir_cuda_gemv_f16(q->stream, w->w, x, y, w->cols, w->rows, (int32_t)n);
      return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(q, e, "gemv_f16");
    }
    return weir_cuda_qgemm(q, w->w, x, y, n, w->cols, w->rows);
  }
  if (g->gemm_min_tokens > 0 && n >= g->gemm_min_tokens) {
    if ((rc = weir_cuda_scratch_reserve(q->host, &q->wh, (size_t)w->rows * (size_t)w->cols * 2)) !=
        WEIR_OK)
      return rc;
    e = weir_cuda_gguf_dequant_f16(q->stream, w->dtype, q->wh.p, w->w, w->row_bytes, w->rows,
                                   w->cols);
    if (e != cudaSuccess) return weir_cuda_qfail(q, e, "dequant");
    return weir_cuda_qgemm(q, q->wh.p, x, y, n, w->cols, w->rows);
  }
  return dp4a_matmuls(g, &w, 1, x, &y, n);
}

/* ABI 1.7: the weights of a group (q/k/v, gate/up; types may differ, as in Q4_K_M) share one
 * quantized copy of x, then run one dp4a launch each. Batches for cuBLAS, f16-held weights and
 * weights of different widths go back to one matmul each (NOTSUP). */
static int g_matmul_group(void *self, const void *const *weights, int n, const float *x,
                          float *const *ys, int64_t n_tokens) {
  gguf_cuda *g = self;
  if (n < 1 || n > WEIR_QUANT_GROUP_MAX) return WEIR_E_NOTSUP;
  if (n_tokens <= 0) return WEIR_OK;
  if (g->gemm_min_tokens > 0 && n_tokens >= g->gemm_min_tokens) return WEIR_E_NOTSUP;
  const gguf_weight *w[WEIR_QUANT_GROUP_MAX];
  for (int i = 0; i < n; i++) {
    w[i] = weights[i];
    if (!w[i] || w[i]->dtype == WEIR_DTYPE_F16 || w[i]->cols != w[0]->cols)
      return WEIR_E_NOTSUP;
  }
  cudaError_t e = weir_cuda_use_device(g->q.device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(&g->q, e, "cudaSetDevice");
  return dp4a_matmuls(g, w, n, x, ys, n_tokens);
}

static int g_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  gguf_cuda *g = self;
  weir_cuda_qctx *q = &g->q;
  const gguf_weight *w = weight;
  int rc = weir_cuda_qcheck_ids(q, w->rows);
  if (rc != WEIR_OK) return rc;
  cudaError_t e = weir_cuda_use_device(q->device_id);
  if (e != cudaSuccess) return weir_cuda_qfail(q, e, "cudaSetDevice");
  if (w->dtype == WEIR_DTYPE_F16)
    e = weir_cuda_embed_f16(q->stream, w->w, ids, out, n, w->rows, w->cols, q->bad_id_dev);
  else
    e = weir_cuda_gguf_embed(q->stream, w->dtype, w->w, w->row_bytes, ids, out, n, w->rows,
                             w->cols, q->bad_id_dev);
  return e == cudaSuccess ? WEIR_OK : weir_cuda_qfail(q, e, "embed");
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = g_pack,
    .release = g_release,
    .weight_bytes = g_weight_bytes,
    .matmul = g_matmul,
    .embed = g_embed,
    .matmul_group = g_matmul_group,
};

/* Every GGUF weight type the SDK reads (weir/quant.h): the 1.2 types and those of 1.5. */
#define GGUF_CUDA_DTYPES (WEIR_DEQUANTIZE_DTYPES | WEIR_DEQUANTIZE_KQUANT_DTYPES)

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "gguf",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "GGUF weight blocks as stored (Q4_0..Q8_0, K-quants, IQ4) on NVIDIA GPUs: "
                   "int8 dp4a GEMV on the blocks, dequant + cuBLAS for large batches",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = GGUF_CUDA_DTYPES,
    .options = k_options,
    .num_options = 1,
    .init = g_init,
    .fini = g_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
