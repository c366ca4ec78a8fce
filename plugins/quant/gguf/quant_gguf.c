/* gguf: runs a GGUF file's weights in their own block types on the CPU.
 *
 * pack() copies each weight's rows as the file stores them: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * IQ4_NL, Q2_K..Q6_K and IQ4_XS run in place through kernels/cpu/matmul_kq.h; F32 and F16
 * through the float kernels (matmul.h); BF16 is widened to F32 (exact, twice the bytes). So
 * the packed weights take the file's tensor bytes (plus 64 bytes each), and a file that mixes
 * types per tensor (llama-quantize's Q4_K_M) loads as it is. A block scale that is Inf or NaN
 * is refused at load, naming the tensor. Where the AVX-512 VNNI kernels run, Q8_0, Q4_K, Q5_K
 * and Q6_K rows of whole groups (512 columns; Q6_K 256) are stored in WEIR_KQ_X16 instead (the
 * same bytes, reordered).
 * matmul quantizes the activations once per call and token for the weight's type, then splits
 * the rows over the host's parallel_for. embed decodes the rows asked for. See
 * docs/cpu-plugins.md. */
#include <stdlib.h>
#include <string.h>

#include "matmul.h"
#include "matmul_kq.h"
#include "quant_common.h"
#include "weir/numeric.h"
#include "weir/quant.h"

/* The instance: the CPU quant skeleton (kernels/cpu/quant_common.h) and nothing else. */
typedef struct gguf_plugin {
  weir_cpu_quant base;
  int group; /* option `group`: matmul_group runs a group as one split (0: NOTSUP, for A/B) */
} gguf_plugin;

static const weir_option_desc k_options[] = {
    {.key = "group",
     .type = WEIR_OPT_BOOL,
     .help = "run q/k/v and gate/up of one block type as one split on one quantization of "
             "the input (false: one matmul per weight)",
     .def_bool = 1},
};

/* A packed weight: rows x row_bytes of `dtype` (F32 after a BF16 source), begun by the
 * skeleton's header so that its release and byte count serve it. */
typedef struct gguf_weight {
  weir_cpu_qweight base;
  weir_dtype dtype;
  size_t row_bytes;
  weir_kq_layout layout; /* WEIR_KQ_X16: rows rewritten for the VNNI kernels */
} gguf_weight;

/* Every GGUF weight type the SDK reads (weir/quant.h): the 1.2 types and those of 1.5. */
#define GGUF_DTYPES (WEIR_DEQUANTIZE_DTYPES | WEIR_DEQUANTIZE_KQUANT_DTYPES)

static int gg_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  int group = 1;
  int rc = weir_option_bool(host, "group", &group);
  /* a host before 1.5 has no options: the default */
  if (rc != WEIR_OK && rc != WEIR_E_NOTSUP) return rc;
  gguf_plugin *p = calloc(1, sizeof(*p));
  if (!p) return WEIR_E_NOMEM;
  weir_cpu_quant_init(&p->base, host, "gguf");
  p->group = rc == WEIR_OK ? group : 1;
  if (host->log)
    host->log(host->ctx, WEIR_LOG_INFO, "gguf: block kernels %s", weir_kq_isa_name());
  *self = p;
  return WEIR_OK;
}

static void gg_fini(void *self) { free(self); }


/* Offsets of the f16 scale fields in a block of `t` (up to 2; -1 = none). */
static void scale_fields(weir_dtype t, int *a, int *b) {
  *a = -1;
  *b = -1;
  switch (t) {
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q5_0: case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_IQ4_NL:
  case WEIR_DTYPE_IQ4_XS: *a = 0; break;
  case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_1: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
    *a = 0; *b = 2; break;
  case WEIR_DTYPE_Q2_K: *a = 80; *b = 82; break;
  case WEIR_DTYPE_Q3_K: *a = 108; break;
  case WEIR_DTYPE_Q6_K: *a = 208; break;
  default: break;
  }
}

typedef struct copy_job {
  const uint8_t *src;
  size_t src_stride;
  gguf_weight *w;
  weir_dtype src_dtype;
  int x16;       /* write the rows in WEIR_KQ_X16 */
  int bad_scale; /* first row + 1 with an Inf/NaN block scale, 0 if none */
} copy_job;

static void copy_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  copy_job *j = arg;
  gguf_weight *w = j->w;
  int fa, fb;
  scale_fields(j->src_dtype, &fa, &fb);
  size_t bb = weir_dtype_block_bytes(j->src_dtype);
  int64_t nb = w->base.cols / weir_dtype_block_elems(j->src_dtype);
  for (int64_t r = begin; r < end; r++) {
    const uint8_t *s = j->src + (size_t)r * j->src_stride;
    uint8_t *d = (uint8_t *)w->base.data + (size_t)r * w->row_bytes;
    if (j->src_dtype == WEIR_DTYPE_BF16) {
      float *o = (float *)d;
      for (int64_t k = 0; k < w->base.cols; k++) {
        uint16_t h;
        memcpy(&h, s + 2 * k, 2);
        o[k] = weir_bf16_to_f32(h);
      }
      continue;
    }
    if (j->x16) weir_kq_x16_pack_row(j->src_dtype, s, d, w->base.cols);
    else memcpy(d, s, w->row_bytes);
    if (fa < 0) continue;
    for (int64_t b = 0; b < nb; b++) {
      uint16_t h0, h1 = 0;
      memcpy(&h0, s + b * bb + fa, 2);
      if (fb >= 0) memcpy(&h1, s + b * bb + fb, 2);
      if ((h0 & 0x7c00) == 0x7c00 || (h1 & 0x7c00) == 0x7c00) {
        int want = (int)r + 1, cur = __atomic_load_n(&j->bad_scale, __ATOMIC_RELAXED);
        while ((cur == 0 || want < cur) &&
               !__atomic_compare_exchange_n(&j->bad_scale, &cur, want, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
        }
        break;
      }
    }
  }
}

static int gg_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  gguf_plugin *p = self;
  const weir_cpu_quant *q = &p->base;
  const weir_host *h = q->host;
  int rc;
  if (!args || !args->src || !weight || !args->src->data) return WEIR_E_INVAL;
  const weir_tensor *t = args->src;
  const char *name = args->name ? args->name : "?";
  weir_dtype dt = t->dtype;
  if (!(dt == WEIR_DTYPE_F32 || dt == WEIR_DTYPE_F16 || dt == WEIR_DTYPE_BF16 ||
        weir_kq_supported(dt))) {
    return weir_cpu_quant_fail(q, WEIR_E_NOTSUP, "tensor %s has type %s, which this plugin does "
                               "not run (it runs f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                               "q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)", name,
                               weir_dtype_name(dt));
  }
  if (t->ndim < 1 || t->ndim > WEIR_MAX_DIMS) return WEIR_E_INVAL;
  for (int d = 2; d < t->ndim; d++)
    if (t->ne[d] != 1) {
      return weir_cpu_quant_fail(q, WEIR_E_NOTSUP, "tensor %s (%s) is not a matrix", name,
                                 weir_dtype_name(dt));
    }
  int64_t cols = t->ne[0], rows = t->ndim >= 2 ? t->ne[1] : 1;
  size_t rb = weir_dtype_row_bytes(dt, cols);
  if (cols <= 0 || rows <= 0 || rb == 0 || cols > ((int64_t)1 << 40) / rows) {
    return weir_cpu_quant_fail(q, WEIR_E_NOTSUP, "tensor %s (%s) has %lld x %lld values; its rows "
                               "must be whole blocks of the type", name, weir_dtype_name(dt),
                               (long long)rows, (long long)cols);
  }
  size_t stride = t->ndim >= 2 && t->nb[1] ? t->nb[1] : rb;
  if (stride < rb) return WEIR_E_INVAL;

  gguf_weight *w = h->alloc(h->ctx, sizeof(*w), 0);
  if (!w) return WEIR_E_NOMEM;
  memset(w, 0, sizeof(*w));
  w->dtype = dt == WEIR_DTYPE_BF16 ? WEIR_DTYPE_F32 : dt;
  w->base.rows = rows;
  w->base.cols = cols;
  w->row_bytes = dt == WEIR_DTYPE_BF16 ? (size_t)cols * 4 : rb;
  /* 64 spare bytes: the SIMD decoders read whole vectors at a row's last blocks. */
  w->base.bytes = (size_t)rows * w->row_bytes + 64;
  w->base.data = weir_cpu_weight_alloc(h, w->base.bytes, &w->base.from_device);
  if (!w->base.data) {
    rc = weir_cpu_quant_fail(q, WEIR_E_NOMEM, "tensor %s (%s): no memory for %zu bytes", name,
                             weir_dtype_name(dt), w->base.bytes);
    goto out_weight;
  }
  memset((uint8_t *)w->base.data + (size_t)rows * w->row_bytes, 0, 64);
  /* Q8_0, Q4_K, Q5_K and Q6_K rows are rewritten (same bytes, exact) where the VNNI
   * kernels run: their prefill then needs 2 to 2.5x fewer vector instructions (matmul_kq.h). */
  if (weir_kq_x16_fits(dt, cols) && weir_kq_x16_preferred()) w->layout = WEIR_KQ_X16;
  copy_job job = {.src = t->data, .src_stride = stride, .w = w, .src_dtype = dt,
                  .x16 = w->layout == WEIR_KQ_X16};
  weir_cpu_quant_for_pack(q, rows, 64, (int64_t)(rows * w->row_bytes), copy_chunk, &job);
  if (job.bad_scale) {
    rc = weir_cpu_quant_fail(q, WEIR_E_INVAL, "tensor %s (%s) has an Inf or NaN block scale in "
                             "row %lld of %lld; weir refuses weights that would compute NaN",
                             name, weir_dtype_name(dt), (long long)job.bad_scale - 1,
                             (long long)rows);
    goto out_data;
  }
  *weight = w;
  return WEIR_OK;

out_data:
  weir_cpu_weight_free(h, w->base.data, w->base.from_device);
out_weight:
  h->free(h->ctx, w);
  return rc;
}

static void gg_release(void *self, void *weight) {
  weir_cpu_quant_release(&((gguf_plugin *)self)->base, weight);
}

static size_t gg_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weir_cpu_quant_weight_bytes(weight);
}

typedef struct act_job {
  const float *x;
  const gguf_weight *w;
  const weir_kq_act *act;
} act_job;

static void act_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  act_job *j = arg;
  for (int64_t t = begin; t < end; t++) {
    if (j->w->layout == WEIR_KQ_X16)
      weir_kq_quantize_act_x16(j->w->dtype, j->x + t * j->w->base.cols, j->w->base.cols, j->act, t);
    else
      weir_kq_quantize_act(j->w->dtype, j->x + t * j->w->base.cols, j->w->base.cols, j->act, t);
  }
}

/* Activations of up to this many bytes are quantized into a stack buffer (decode). */
#define STACK_ACT_BYTES 32768

/* Quantizes n_tokens rows of x (cols wide) once, by w's type and layout, into *act: in
 * stack_buf (STACK_ACT_BYTES, the caller's frame) when they fit, else in *heap, which the
 * caller frees after the matmul. WEIR_E_NOMEM when the heap buffer cannot be had. */
static int quantize_act(const weir_cpu_quant *q, const gguf_weight *w, const float *x, int64_t cols,
                        int64_t n_tokens, uint8_t *stack_buf, void **heap, weir_kq_act *act) {
  uint8_t *buf =
      weir_cpu_scratch(stack_buf, STACK_ACT_BYTES, weir_kq_act_bytes(cols, n_tokens), heap);
  if (!buf) return WEIR_E_NOMEM;
  weir_kq_act_init(act, buf, cols, n_tokens);
  act_job aj = {.x = x, .w = w, .act = act};
  weir_cpu_quant_for_tokens(q, n_tokens, cols, act_chunk, &aj);
  return WEIR_OK;
}

static int gg_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  const weir_cpu_quant *q = &((gguf_plugin *)self)->base;
  const gguf_weight *w = weight;
  if (n_tokens == 0) return WEIR_OK;
  if (!w || !x || !y || n_tokens < 0) return WEIR_E_INVAL;
  const int64_t rows = w->base.rows, cols = w->base.cols, work = rows * cols * n_tokens;
  if (!weir_kq_supported(w->dtype)) {
    weir_matmul_args a = {.w = w->base.data, .w_dtype = w->dtype, .rows = rows, .cols = cols,
                          .x = x, .y = y, .n_tokens = n_tokens};
    weir_cpu_quant_for_units(q, rows, 1, work, 1, WEIR_MATMUL_GRAIN, weir_matmul_chunk, &a);
    return WEIR_OK;
  }
  _Alignas(64) uint8_t stack_buf[STACK_ACT_BYTES];
  void *heap = NULL;
  weir_kq_act act;
  if (quantize_act(q, w, x, cols, n_tokens, stack_buf, &heap, &act) != WEIR_OK)
    return WEIR_E_NOMEM;
  weir_kq_matmul_args a = {.type = w->dtype, .layout = w->layout, .w = w->base.data,
                           .row_bytes = w->row_bytes,
                           .rows = rows, .cols = cols, .act = act,
                           .n_tokens = n_tokens, .y = y};
  weir_cpu_quant_for_units(q, rows, 8, work, 1, 8, weir_kq_matmul_chunk, &a);
  free(heap);
  return WEIR_OK;
}

/* matmul_group: the group's weights, their rows laid end to end, so that one split over the
 * pool runs them all (one hand-off to the threads instead of one per weight). */
typedef struct group_job {
  weir_kq_matmul_args a[WEIR_QUANT_GROUP_MAX];
  int64_t end[WEIR_QUANT_GROUP_MAX]; /* rows of weights 0..i together */
  int n;
} group_job;

static void group_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const group_job *g = arg;
  int64_t base = 0;
  for (int i = 0; i < g->n && begin < end; i++) {
    const int64_t e = g->end[i];
    if (begin < e) {
      const int64_t stop = end < e ? end : e;
      weir_kq_matmul_rows(&g->a[i], begin - base, stop - base);
      begin = stop;
    }
    base = e;
  }
}

/* ABI 1.7: the weights of one group (q/k/v, gate/up) of the same block type, layout and
 * width: the activations quantized once, every row in one split. The rows' results are what
 * gg_matmul gives (the same kernel on the same activations; a row's result does not depend
 * on where a split cuts). Another mix (Q4_K_M's layers with a Q6_K attn_v) is NOTSUP: the
 * host then calls matmul per weight. */
static int gg_matmul_group(void *self, const void *const *weights, int n, const float *x,
                           float *const *ys, int64_t n_tokens) {
  const weir_cpu_quant *q = &((gguf_plugin *)self)->base;
  if (!((gguf_plugin *)self)->group) return WEIR_E_NOTSUP;
  if (!weights || !ys || n < 1 || n > WEIR_QUANT_GROUP_MAX || n_tokens < 0) return WEIR_E_INVAL;
  for (int i = 0; i < n; i++)
    if (!weights[i] || !ys[i]) return WEIR_E_INVAL;
  if (n_tokens == 0) return WEIR_OK;
  if (!x) return WEIR_E_INVAL;
  const gguf_weight *w0 = weights[0];
  if (!weir_kq_supported(w0->dtype)) return WEIR_E_NOTSUP;
  for (int i = 1; i < n; i++) {
    const gguf_weight *wi = weights[i];
    if (wi->dtype != w0->dtype || wi->layout != w0->layout || wi->base.cols != w0->base.cols)
      return WEIR_E_NOTSUP;
  }
  const int64_t cols = w0->base.cols;
  _Alignas(64) uint8_t stack_buf[STACK_ACT_BYTES];
  void *heap = NULL;
  weir_kq_act act;
  if (quantize_act(q, w0, x, cols, n_tokens, stack_buf, &heap, &act) != WEIR_OK)
    return WEIR_E_NOMEM;
  group_job g = {.n = n};
  int64_t rows = 0;
  for (int i = 0; i < n; i++) {
    const gguf_weight *wi = weights[i];
    g.a[i] = (weir_kq_matmul_args){.type = wi->dtype, .layout = wi->layout, .w = wi->base.data,
                                   .row_bytes = wi->row_bytes, .rows = wi->base.rows,
                                   .cols = cols, .act = act, .n_tokens = n_tokens, .y = ys[i]};
    rows += wi->base.rows;
    g.end[i] = rows;
  }
  weir_cpu_quant_for_units(q, rows, 8, rows * cols * n_tokens, 1, 8, group_chunk, &g);
  free(heap);
  return WEIR_OK;
}

static int gg_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  (void)self;
  const gguf_weight *w = weight;
  int rc = weir_cpu_quant_embed_check(weight, ids, out, n);
  if (rc != WEIR_OK || n == 0) return rc;
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *row = (const uint8_t *)w->base.data + (size_t)ids[i] * w->row_bytes;
    float *o = out + i * w->base.cols;
    if (w->dtype == WEIR_DTYPE_F32) {
      memcpy(o, row, (size_t)w->base.cols * sizeof(float));
    } else if (w->dtype == WEIR_DTYPE_F16) {
      for (int64_t k = 0; k < w->base.cols; k++) {
        uint16_t hb;
        memcpy(&hb, row + 2 * k, 2);
        o[k] = weir_f16_to_f32(hb);
      }
    } else if (w->layout == WEIR_KQ_X16) {
      weir_kq_x16_dequant_row(w->dtype, row, w->base.cols, o);
    } else if (weir_kq_dequant_row(w->dtype, row, w->base.cols, o) != 0) {
      return WEIR_E_NOTSUP;
    }
  }
  return WEIR_OK;
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = gg_pack,
    .release = gg_release,
    .weight_bytes = gg_weight_bytes,
    .matmul = gg_matmul,
    .embed = gg_embed,
    .matmul_group = gg_matmul_group,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "gguf",
    .version = WEIR_PLUGIN_VERSION,
    .description = "the file's own GGUF block types (Q2_K..Q6_K, Q4_0..Q8_0, IQ4), run in place "
                   "with int8 activations; AVX2/AVX-512 VNNI kernels",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = GGUF_DTYPES,
    .init = gg_init,
    .fini = gg_fini,
    .ops = &k_ops,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
};

WEIR_PLUGIN_EXPORT(k_desc)
