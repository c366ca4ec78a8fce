/* fp16: weights in half precision on the CPU.
 *
 * pack() turns a GGUF source of F16, BF16, Q8_0, Q4_0 or Q4_1 into f16 (dequantizing block
 * formats); an F32 source stays f32 unless the option keep_f32 is false (norm-sized and
 * small tensors are often f32 on purpose). The matrix is stored in 16-row panels
 * (kernels/cpu/matmul_panel.h): matmul is then a sum of outer products with no reduction
 * across lanes, and one token's output is bit-identical whatever the batch it runs in, so a
 * speculative step's verification rows give exactly the logits of plain decode steps.
 * matmul runs over the host's parallel_for, split by panels. */
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "dequant.h"
#include "matmul_panel.h"
#include "quant_common.h"
#include "weir/quant.h"

typedef struct fp16_plugin {
  weir_cpu_quant base;
  int keep_f32;
} fp16_plugin;

/* A packed weight: base.data holds the panel16 layout of [rows][cols] in `dtype`, the padding
 * rows of the last panel zero. */
typedef struct fp16_weight {
  weir_cpu_qweight base;
  weir_dtype dtype; /* F16 or F32 */
} fp16_weight;

static const weir_option_desc k_options[] = {
    {.key = "keep_f32",
     .type = WEIR_OPT_BOOL,
     .help = "keep F32 source tensors in f32 (false: convert them to f16 too)",
     .def_bool = 1},
};

static int fp_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  int keep_f32;
  int rc = weir_option_bool(host, "keep_f32", &keep_f32);
  if (rc != WEIR_OK) return rc;
  fp16_plugin *p = calloc(1, sizeof(*p));
  if (!p) return WEIR_E_NOMEM;
  weir_cpu_quant_init(&p->base, host, "fp16");
  p->keep_f32 = keep_f32;
  *self = p;
  return WEIR_OK;
}

static void fp_fini(void *self) { free(self); }

/* ---- packing: the skeleton's pack (quant_common.h) with this layout and row converter ---- */

static int fp_layout(const weir_cpu_quant *q, weir_cpu_qweight *wb, const weir_tensor *src) {
  const fp16_plugin *p = (const fp16_plugin *)q;
  fp16_weight *w = (fp16_weight *)wb;
  w->dtype = src->dtype == WEIR_DTYPE_F32 && p->keep_f32 ? WEIR_DTYPE_F32 : WEIR_DTYPE_F16;
  wb->bytes = (size_t)weir_panel_elems(wb->rows, wb->cols) * (w->dtype == WEIR_DTYPE_F32 ? 4 : 2);
  return WEIR_OK;
}

/* The last panel is written lane by lane by the rows it holds: its padding lanes stay zero
 * (zero weights, so the kernels may compute a whole panel). */
static void fp_prepare(weir_cpu_qweight *wb) {
  const fp16_weight *w = (const fp16_weight *)wb;
  size_t esz = w->dtype == WEIR_DTYPE_F32 ? 4 : 2;
  size_t panel = (size_t)WEIR_PANEL_ROWS * (size_t)wb->cols * esz;
  memset((uint8_t *)wb->data + wb->bytes - panel, 0, panel);
}

static int fp_rows(const weir_cpu_quant *q, weir_cpu_qweight *wb, const uint8_t *src,
                   size_t stride, weir_dtype dtype, int64_t begin, int64_t end) {
  (void)q;
  const fp16_weight *w = (const fp16_weight *)wb;
  const int64_t cols = wb->cols;
  const int f32 = w->dtype == WEIR_DTYPE_F32;
  /* A row is converted whole, then spread over its panel's lane. */
  void *row = malloc((size_t)cols * (f32 ? 4 : 2));
  if (!row) return WEIR_E_NOMEM;
  int rc = WEIR_OK;
  for (int64_t r = begin; r < end && rc == WEIR_OK; r++) {
    const uint8_t *s = src + (size_t)r * stride;
    if (f32 ? weir_dequant_row_f32(dtype, s, row, cols) : weir_dequant_row_f16(dtype, s, row, cols)) {
      rc = WEIR_E_INTERNAL; /* the source check admitted a type the dequantizer lacks */
      break;
    }
    const int64_t base = weir_panel_index(r, 0, cols);
    if (f32)
      for (int64_t k = 0; k < cols; k++)
        ((float *)wb->data)[base + k * WEIR_PANEL_ROWS] = ((const float *)row)[k];
    else
      for (int64_t k = 0; k < cols; k++)
        ((uint16_t *)wb->data)[base + k * WEIR_PANEL_ROWS] = ((const uint16_t *)row)[k];
  }
  free(row);
  return rc;
}

/* A grain of one panel: each chunk writes whole panels (no two threads share a cache line of
 * one but at the chunk edges). */
static const weir_cpu_pack_spec k_pack = {.weight_size = sizeof(fp16_weight),
                                          .grain = WEIR_PANEL_ROWS, .layout = fp_layout,
                                          .prepare = fp_prepare, .rows = fp_rows};

static int fp_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  return weir_cpu_quant_pack(self, &k_pack, args, weight);
}

static void fp_release(void *self, void *weight) { weir_cpu_quant_release(self, weight); }

static size_t fp_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weir_cpu_quant_weight_bytes(weight);
}

static int fp_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  const fp16_weight *w = weight;
  if (n_tokens == 0) return WEIR_OK;
  if (!w || !x || !y || n_tokens < 0) return WEIR_E_INVAL;
  weir_matmul_panel_args a = {.w = w->base.data, .w_dtype = w->dtype, .rows = w->base.rows,
                              .cols = w->base.cols, .x = x, .y = y, .n_tokens = n_tokens};
  /* Units of one panel; pairs keep the GEMM's two-panel tiles whole. */
  weir_cpu_quant_for_units(self, weir_panel_count(w->base.rows), 2,
                           w->base.rows * w->base.cols * n_tokens, 2, 2, weir_matmul_panel_chunk,
                           &a);
  return WEIR_OK;
}

static int fp_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  (void)self;
  const fp16_weight *w = weight;
  int rc = weir_cpu_quant_embed_check(weight, ids, out, n);
  if (rc != WEIR_OK || n == 0) return rc;
  const int64_t cols = w->base.cols;
  /* A row is one lane of its panel: every 16th element from the row's first. */
  for (int64_t i = 0; i < n; i++) {
    const int64_t base = weir_panel_index(ids[i], 0, cols);
    float *o = out + i * cols;
    if (w->dtype == WEIR_DTYPE_F16) {
      const uint16_t *src = (const uint16_t *)w->base.data + base;
      for (int64_t k = 0; k < cols; k++) o[k] = weir_f16_to_f32(src[k * WEIR_PANEL_ROWS]);
    } else {
      const float *src = (const float *)w->base.data + base;
      for (int64_t k = 0; k < cols; k++) o[k] = src[k * WEIR_PANEL_ROWS];
    }
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
    .description = "f16 weights (f32 kept as-is) in 16-row panels, F16C/AVX-512 outer-product GEMV and GEMM",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = fp_init,
    .fini = fp_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
