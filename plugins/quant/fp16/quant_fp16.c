/* fp16: weights in half precision on the CPU.
 *
 * pack() turns a GGUF source of F16, BF16, Q8_0, Q4_0 or Q4_1 into a dense row-major f16
 * [out_features][in_features] matrix (dequantizing block formats); an F32 source stays f32
 * unless the option keep_f32 is false (norm-sized and small tensors are often f32 on
 * purpose). matmul runs the kernels' GEMV (one or two tokens) or blocked GEMM over the
 * host's parallel_for, split by output rows. */
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "weight_mem.h"
#include "dequant.h"
#include "matmul.h"
#include "weir/quant.h"

typedef struct fp16_plugin {
  const weir_host *host;
  int keep_f32;
} fp16_plugin;

/* A packed weight. data is device memory: from host->device_alloc when the host offers it
 * (so it is accounted to the device), otherwise our own 64-byte aligned allocation. */
typedef struct fp16_weight {
  int64_t rows, cols;
  weir_dtype dtype; /* F16 or F32 */
  void *data;
  size_t bytes;
  int from_device_alloc;
} fp16_weight;

static const weir_option_desc k_options[] = {
    {.key = "keep_f32",
     .type = WEIR_OPT_BOOL,
     .help = "keep F32 source tensors in f32 (false: convert them to f16 too)",
     .def_bool = 1},
};

static int fp_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  fp16_plugin *p = calloc(1, sizeof(*p));
  if (!p) return WEIR_E_NOMEM;
  p->host = host;
  p->keep_f32 = 1;
  if (args && args->options && args->num_options >= 1) p->keep_f32 = args->options[0].b != 0;
  *self = p;
  return WEIR_OK;
}

static void fp_fini(void *self) { free(self); }


typedef struct pack_job {
  const uint8_t *src;
  size_t src_row_bytes;
  weir_dtype src_dtype;
  fp16_weight *w;
  int failed;
} pack_job;

static void pack_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  pack_job *j = arg;
  for (int64_t r = begin; r < end; r++) {
    const uint8_t *src = j->src + (size_t)r * j->src_row_bytes;
    int rc;
    if (j->w->dtype == WEIR_DTYPE_F32)
      rc = weir_dequant_row_f32(j->src_dtype, src, (float *)j->w->data + r * j->w->cols,
                                j->w->cols);
    else
      rc = weir_dequant_row_f16(j->src_dtype, src, (uint16_t *)j->w->data + r * j->w->cols,
                                j->w->cols);
    if (rc) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
  }
}

static void free_data(fp16_plugin *p, fp16_weight *w) {
  weir_cpu_weight_free(p->host, w->data, w->from_device_alloc);
  w->data = NULL;
}

static int fp_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  fp16_plugin *p = self;
  const weir_host *h = p->host;
  int rc = WEIR_OK;
  if (!args || !args->src || !weight || !args->src->data) return WEIR_E_INVAL;
  const weir_tensor *t = args->src;
  int64_t rows, cols;
  size_t src_stride;
  rc = weir_cpu_weight_source(h, "fp16", args, &rows, &cols, &src_stride);
  if (rc != WEIR_OK) return rc;

  fp16_weight *w = h->alloc(h->ctx, sizeof(*w), 0);
  if (!w) return WEIR_E_NOMEM;
  memset(w, 0, sizeof(*w));
  w->rows = rows;
  w->cols = cols;
  w->dtype = t->dtype == WEIR_DTYPE_F32 && p->keep_f32 ? WEIR_DTYPE_F32 : WEIR_DTYPE_F16;
  w->bytes = (size_t)rows * (size_t)cols * (w->dtype == WEIR_DTYPE_F32 ? 4 : 2);
  w->data = weir_cpu_weight_alloc(h, w->bytes, &w->from_device_alloc);
  if (!w->data) {
    rc = WEIR_E_NOMEM;
    goto out_weight;
  }

  pack_job job = {.src = t->data, .src_row_bytes = src_stride, .src_dtype = t->dtype, .w = w};
  weir_cpu_for_rows(h, rows, 16, rows * cols, 1 << 18, pack_chunk, &job);
  if (job.failed) {
    rc = WEIR_E_INTERNAL;
    goto out_data;
  }
  *weight = w;
  return WEIR_OK;

out_data:
  free_data(p, w);
out_weight:
  h->free(h->ctx, w);
  return rc;
}

static void fp_release(void *self, void *weight) {
  fp16_plugin *p = self;
  fp16_weight *w = weight;
  if (!w) return;
  free_data(p, w);
  p->host->free(p->host->ctx, w);
}

static size_t fp_weight_bytes(void *self, const void *weight) {
  (void)self;
  const fp16_weight *w = weight;
  return w ? w->bytes : 0;
}

static int fp_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  fp16_plugin *p = self;
  const weir_host *h = p->host;
  const fp16_weight *w = weight;
  if (n_tokens == 0) return WEIR_OK;
  if (!w || !x || !y || n_tokens < 0) return WEIR_E_INVAL;
  weir_matmul_args a = {.w = w->data, .w_dtype = w->dtype, .rows = w->rows, .cols = w->cols,
                        .x = x, .y = y, .n_tokens = n_tokens};
  int threads = weir_cpu_host_threads(h);
  if (threads <= 1 || w->rows < 8 || w->rows * w->cols * n_tokens < (1 << 16)) {
    weir_matmul_rows(&a, 0, w->rows);
    return WEIR_OK;
  }
  /* Four chunks per thread balance uneven cores; multiples of 4 rows keep the kernel's
   * 4-row groups whole. */
  int64_t grain = (w->rows / ((int64_t)threads * 4) + 3) / 4 * 4;
  if (grain < 16) grain = 16;
  h->parallel_for(h->ctx, w->rows, grain, weir_matmul_chunk, &a);
  return WEIR_OK;
}

static int fp_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  (void)self;
  const fp16_weight *w = weight;
  if (n == 0) return WEIR_OK;
  if (!w || !ids || !out || n < 0) return WEIR_E_INVAL;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= w->rows) return WEIR_E_RANGE;
  for (int64_t i = 0; i < n; i++) {
    if (w->dtype == WEIR_DTYPE_F16)
      weir_f16_to_f32_row((const uint16_t *)w->data + (int64_t)ids[i] * w->cols, out + i * w->cols,
                          w->cols);
    else
      memcpy(out + i * w->cols, (const float *)w->data + (int64_t)ids[i] * w->cols,
             (size_t)w->cols * sizeof(float));
  }
  return WEIR_OK;
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = fp_pack,
    .release = fp_release,
    .weight_bytes = fp_weight_bytes,
    .matmul = fp_matmul,
    .embed = fp_embed,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "fp16",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "f16 weights (f32 kept as-is), F16C/AVX-512 GEMV and blocked GEMM",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = fp_init,
    .fini = fp_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
