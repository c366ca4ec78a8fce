/* int8: symmetric int8 weights with f32 scales on the CPU.
 *
 * pack() turns a GGUF source of F32, F16, BF16, Q8_0, Q4_0 or Q4_1 into int8 rows padded to
 * a multiple of 256 columns (stored biased and interleaved for the kernels) with one f32
 * scale per group of `group_size` columns (0 = one per output channel), by round-to-nearest:
 * d = max|w| / 127, q = round(w / d). A Q8_0 source
 * packed with group_size 32 keeps its q and d exactly (its blocks are our groups).
 * matmul quantizes the activations per token and 32-column block once per call, then runs
 * the int8 kernels (kernels/cpu/matmul_q8.h) over the host's parallel_for, split by output
 * rows; matmul_group (ABI 1.7) quantizes them once for q/k/v or gate/up. See
 * docs/quant-int8.md. */
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "dequant.h"
#include "matmul_q8.h"
#include "quant_common.h"
#include "weir/quant.h"

typedef struct int8_plugin {
  weir_cpu_quant base;
  int64_t group_size; /* 0, 32, 64 or 128 */
} int8_plugin;

/* A packed weight: one allocation (base.data) holding q [rows][kp] (stored as q + 128, see
 * matmul_q8.h) then d [rows][ng] f32 and WEIR_Q8_SCALE_PAD spare floats. */
typedef struct int8_weight {
  weir_cpu_qweight base;
  int64_t kp, group, ng;
  uint8_t *q;
  float *d;
} int8_weight;

static const weir_option_desc k_options[] = {
    {.key = "group_size",
     .type = WEIR_OPT_INT,
     .help = "input columns per weight scale: 32, 64 or 128; 0 = one scale per output row",
     .def_int = 32,
     .min = 0,
     .max = 128},
};

static int q8_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  int64_t g;
  int rc = weir_option_int(host, "group_size", &g);
  if (rc != WEIR_OK) return rc;
  int8_plugin *p = calloc(1, sizeof(*p));
  if (!p) return WEIR_E_NOMEM;
  weir_cpu_quant_init(&p->base, host, "int8");
  if (g != 0 && g != 32 && g != 64 && g != 128) {
    rc = weir_cpu_quant_fail(&p->base, WEIR_E_INVAL, "group_size must be 0, 32, 64 or 128, not "
                             "%lld", (long long)g);
    free(p);
    return rc;
  }
  p->group_size = g;
  if (host->log)
    host->log(host->ctx, WEIR_LOG_INFO, "int8: group_size %lld, kernels %s", (long long)g,
              weir_q8_isa_name(weir_q8_isa_current()));
  *self = p;
  return WEIR_OK;
}

static void q8_fini(void *self) { free(self); }

static weir_cpu_q8_mat q8_mat(const int8_weight *w) {
  return (weir_cpu_q8_mat){.q = w->q, .d = w->d, .rows = w->base.rows, .cols = w->base.cols,
                           .kp = w->kp, .group = w->group};
}

/* ---- packing: the skeleton's pack (quant_common.h) with this layout and row converter ---- */

static int q8_layout(const weir_cpu_quant *q, weir_cpu_qweight *wb, const weir_tensor *src) {
  (void)src;
  const int8_plugin *p = (const int8_plugin *)q;
  int8_weight *w = (int8_weight *)wb;
  w->kp = weir_q8_padded_cols(wb->cols, p->group_size);
  w->group = p->group_size ? p->group_size : w->kp;
  w->ng = w->kp / w->group;
  wb->bytes = weir_cpu_q8_bytes(wb->rows, w->kp, w->ng);
  return WEIR_OK;
}

static void q8_prepare(weir_cpu_qweight *wb) {
  int8_weight *w = (int8_weight *)wb;
  w->q = wb->data;
  w->d = (float *)(void *)((uint8_t *)wb->data + weir_cpu_q8_qbytes(wb->rows, w->kp));
  memset(w->d + wb->rows * w->ng, 0, WEIR_Q8_SCALE_PAD * sizeof(float));
}

static int q8_rows(const weir_cpu_quant *q, weir_cpu_qweight *wb, const uint8_t *src,
                   size_t stride, weir_dtype dtype, int64_t begin, int64_t end) {
  (void)q;
  int8_weight *w = (int8_weight *)wb;
  const int64_t cols = wb->cols;
  /* Q8_0 blocks are exactly our 32-column groups: q and d carried over. */
  if (dtype == WEIR_DTYPE_Q8_0 && w->group == 32) {
    for (int64_t r = begin; r < end; r++)
      weir_cpu_q8_from_q8_0_row(src + (size_t)r * stride, cols, w->kp, w->q + r * w->kp,
                                w->d + r * w->ng);
    return WEIR_OK;
  }
  float *row = malloc((size_t)cols * sizeof(float));
  int8_t *nat = malloc((size_t)w->kp);
  int rc = row && nat ? WEIR_OK : WEIR_E_NOMEM;
  for (int64_t r = begin; r < end && rc == WEIR_OK; r++) {
    if (weir_dequant_row_f32(dtype, src + (size_t)r * stride, row, cols)) {
      rc = WEIR_E_INTERNAL; /* the source check admitted a type the dequantizer lacks */
      break;
    }
    weir_q8_quantize(row, cols, w->kp, w->group, nat, w->d + r * w->ng);
    weir_q8_interleave(nat, w->q + r * w->kp, w->kp, 0x80);
  }
  free(nat);
  free(row);
  return rc;
}

static const weir_cpu_pack_spec k_pack = {.weight_size = sizeof(int8_weight), .grain = 16,
                                          .layout = q8_layout, .prepare = q8_prepare,
                                          .rows = q8_rows};

static int q8_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  return weir_cpu_quant_pack(self, &k_pack, args, weight);
}

static void q8_release(void *self, void *weight) { weir_cpu_quant_release(self, weight); }

static size_t q8_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weir_cpu_quant_weight_bytes(weight);
}

static int q8_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  const int8_weight *w = weight;
  if (n_tokens == 0) return WEIR_OK;
  if (!w || !x || !y || n_tokens < 0) return WEIR_E_INVAL;
  weir_cpu_q8_mat m = q8_mat(w);
  return weir_cpu_q8_matmul(self, &m, x, y, n_tokens);
}

/* ABI 1.7: q/k/v or gate/up on one quantization of x. */
static int q8_matmul_group(void *self, const void *const *weights, int n, const float *x,
                           float *const *ys, int64_t n_tokens) {
  if (n < 1 || n > WEIR_QUANT_GROUP_MAX) return WEIR_E_NOTSUP;
  if (n_tokens == 0) return WEIR_OK;
  if (!x || n_tokens < 0) return WEIR_E_INVAL;
  weir_cpu_q8_mat m[WEIR_QUANT_GROUP_MAX];
  const weir_cpu_q8_mat *mp[WEIR_QUANT_GROUP_MAX];
  for (int i = 0; i < n; i++) {
    if (!weights[i] || !ys[i]) return WEIR_E_INVAL;
    m[i] = q8_mat(weights[i]);
    mp[i] = &m[i];
  }
  return weir_cpu_q8_matmul_group(self, mp, n, x, ys, n_tokens);
}

static int q8_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  (void)self;
  const int8_weight *w = weight;
  int rc = weir_cpu_quant_embed_check(weight, ids, out, n);
  if (rc != WEIR_OK || n == 0) return rc;
  weir_cpu_q8_mat m = q8_mat(w);
  for (int64_t i = 0; i < n; i++) weir_cpu_q8_dequant_row(&m, ids[i], out + i * w->base.cols);
  return WEIR_OK;
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = q8_pack,
    .release = q8_release,
    .weight_bytes = q8_weight_bytes,
    .matmul = q8_matmul,
    .matmul_group = q8_matmul_group,
    .embed = q8_embed,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "int8",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "symmetric int8 weights, f32 scales per group; int8 activations, "
                   "AVX2/AVX-512/VNNI kernels",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = q8_init,
    .fini = q8_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
