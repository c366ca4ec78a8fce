/* int8: symmetric int8 weights with f32 scales on the CPU.
 *
 * pack() turns a GGUF source of F32, F16, BF16, Q8_0, Q4_0 or Q4_1 into int8 rows padded to
 * a multiple of 256 columns (stored biased and interleaved for the kernels) with one f32
 * scale per group of `group_size` columns (0 = one per output channel), by round-to-nearest:
 * d = max|w| / 127, q = round(w / d). A Q8_0 source
 * packed with group_size 32 keeps its q and d exactly (its blocks are our groups).
 * matmul quantizes the activations per token and 32-column block once per call, then runs
 * the int8 kernels (kernels/cpu/matmul_q8.h) over the host's parallel_for, split by output
 * rows. See docs/quant-int8.md. */
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "weight_mem.h"
#include "dequant.h"
#include "matmul_q8.h"
#include "weir/quant.h"

typedef struct int8_plugin {
  const weir_host *host;
  int64_t group_size; /* 0, 32, 64 or 128 */
} int8_plugin;

/* A packed weight: one allocation holding q [rows][kp] (stored as q + 128, see matmul_q8.h)
 * then d [rows][ng] f32 and WEIR_Q8_SCALE_PAD spare floats. data is from host->device_alloc
 * when the host offers it, else our own 64-byte aligned memory. */
typedef struct int8_weight {
  int64_t rows, cols, kp, group, ng;
  uint8_t *q;
  float *d;
  void *data;
  size_t bytes;
  int from_device_alloc;
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
  int64_t g = 32;
  if (args && args->options && args->num_options >= 1) g = args->options[0].i;
  if (g != 0 && g != 32 && g != 64 && g != 128) {
    if (host && host->log)
      host->log(host->ctx, WEIR_LOG_ERROR, "int8: group_size must be 0, 32, 64 or 128, not %lld",
                (long long)g);
    return WEIR_E_INVAL;
  }
  int8_plugin *p = calloc(1, sizeof(*p));
  if (!p) return WEIR_E_NOMEM;
  p->host = host;
  p->group_size = g;
  if (host->log)
    host->log(host->ctx, WEIR_LOG_INFO, "int8: group_size %lld, kernels %s", (long long)g,
              weir_q8_isa_name(weir_q8_isa_current()));
  *self = p;
  return WEIR_OK;
}

static void q8_fini(void *self) { free(self); }


typedef struct pack_job {
  const uint8_t *src;
  size_t src_row_bytes;
  weir_dtype src_dtype;
  int8_weight *w;
  int failed;
} pack_job;

/* Puts a natural-order int8 row into the kernels' stored order (matmul_q8.h), chunk by
 * chunk through a small buffer, XOR-ing with bias (0x80 for weights, 0 for activations). */
static void interleave_inplace(uint8_t *row, int64_t kp, uint8_t bias) {
  int8_t tmp[WEIR_Q8_ROW_ALIGN];
  for (int64_t c = 0; c < kp; c += WEIR_Q8_ROW_ALIGN) {
    memcpy(tmp, row + c, WEIR_Q8_ROW_ALIGN);
    weir_q8_interleave(tmp, row + c, WEIR_Q8_ROW_ALIGN, bias);
  }
}

/* Q8_0 blocks are exactly our 32-column groups: copy q, widen d (f16 -> f32 is exact). */
static void pack_q8_0_row(const uint8_t *src, int8_weight *w, int64_t r) {
  uint8_t *q = w->q + r * w->kp;
  float *d = w->d + r * w->ng;
  int64_t nblk = w->cols / 32;
  for (int64_t b = 0; b < nblk; b++) {
    const uint8_t *blk = src + b * 34;
    uint16_t h = (uint16_t)(blk[0] | (blk[1] << 8));
    d[b] = weir_f16_to_f32(h);
    memcpy(q + b * 32, blk + 2, 32);
  }
  memset(q + w->cols, 0, (size_t)(w->kp - w->cols));
  interleave_inplace(q, w->kp, 0x80);
  for (int64_t b = nblk; b < w->ng; b++) d[b] = 0.0f;
}

static void pack_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  pack_job *j = arg;
  int8_weight *w = j->w;
  if (j->src_dtype == WEIR_DTYPE_Q8_0 && w->group == 32) {
    for (int64_t r = begin; r < end; r++)
      pack_q8_0_row(j->src + (size_t)r * j->src_row_bytes, w, r);
    return;
  }
  float *row = malloc((size_t)w->cols * sizeof(float));
  if (!row) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t r = begin; r < end; r++) {
    if (weir_dequant_row_f32(j->src_dtype, j->src + (size_t)r * j->src_row_bytes, row, w->cols)) {
      __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
      break;
    }
    uint8_t *q = w->q + r * w->kp;
    weir_q8_quantize(row, w->cols, w->kp, w->group, (int8_t *)q, w->d + r * w->ng);
    interleave_inplace(q, w->kp, 0x80);
  }
  free(row);
}

static void free_data(int8_plugin *p, int8_weight *w) {
  weir_cpu_weight_free(p->host, w->data, w->from_device_alloc);
  w->data = NULL;
}

static int q8_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  int8_plugin *p = self;
  const weir_host *h = p->host;
  int rc = WEIR_OK;
  if (!args || !args->src || !weight || !args->src->data) return WEIR_E_INVAL;
  const weir_tensor *t = args->src;
  int64_t rows, cols;
  size_t src_stride;
  rc = weir_cpu_weight_source(h, "int8", args, &rows, &cols, &src_stride);
  if (rc != WEIR_OK) return rc;

  int8_weight *w = h->alloc(h->ctx, sizeof(*w), 0);
  if (!w) return WEIR_E_NOMEM;
  memset(w, 0, sizeof(*w));
  w->rows = rows;
  w->cols = cols;
  w->kp = weir_q8_padded_cols(cols, p->group_size);
  w->group = p->group_size ? p->group_size : w->kp;
  w->ng = w->kp / w->group;
  size_t qbytes = ((size_t)rows * (size_t)w->kp + 63) & ~(size_t)63;
  w->bytes = qbytes + ((size_t)rows * (size_t)w->ng + WEIR_Q8_SCALE_PAD) * sizeof(float);
  w->data = weir_cpu_weight_alloc(h, w->bytes, &w->from_device_alloc);
  if (!w->data) {
    rc = WEIR_E_NOMEM;
    goto out_weight;
  }
  w->q = w->data;
  w->d = (float *)((uint8_t *)w->data + qbytes);
  memset(w->d + rows * w->ng, 0, WEIR_Q8_SCALE_PAD * sizeof(float));

  pack_job job = {.src = t->data, .src_row_bytes = src_stride, .src_dtype = t->dtype, .w = w};
  weir_cpu_for_rows(h, rows, 16, rows * cols, 1 << 18, pack_chunk, &job);
  if (job.failed) {
    rc = WEIR_E_NOMEM;
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

static void q8_release(void *self, void *weight) {
  int8_plugin *p = self;
  int8_weight *w = weight;
  if (!w) return;
  free_data(p, w);
  p->host->free(p->host->ctx, w);
}

static size_t q8_weight_bytes(void *self, const void *weight) {
  (void)self;
  const int8_weight *w = weight;
  return w ? w->bytes : 0;
}

typedef struct act_job {
  const float *x;
  int64_t cols, kp;
  int8_t *xq;
  float *xd;
} act_job;

static void act_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  act_job *j = arg;
  for (int64_t t = begin; t < end; t++)
    weir_q8_quantize_act(j->x + t * j->cols, j->cols, j->kp, j->xq + t * j->kp,
                         j->xd + t * (j->kp / WEIR_Q8_BLOCK));
}

/* Activations of up to this many bytes are quantized into a stack buffer (decode). */
#define STACK_ACT_BYTES 16384

static int q8_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  int8_plugin *p = self;
  const weir_host *h = p->host;
  const int8_weight *w = weight;
  if (n_tokens == 0) return WEIR_OK;
  if (!w || !x || !y || n_tokens < 0) return WEIR_E_INVAL;
  const int64_t kp = w->kp, nb = kp / WEIR_Q8_BLOCK;
  const size_t qb = ((size_t)n_tokens * (size_t)kp + 63) & ~(size_t)63;
  const size_t need = qb + ((size_t)n_tokens * (size_t)nb + WEIR_Q8_SCALE_PAD) * sizeof(float);
  _Alignas(64) uint8_t stack_buf[STACK_ACT_BYTES];
  void *heap = NULL;
  uint8_t *buf = stack_buf;
  if (need > sizeof stack_buf) {
    if (posix_memalign(&heap, 64, need) != 0) return WEIR_E_NOMEM;
    buf = heap;
  }
  int threads = weir_cpu_host_threads(h);
  memset(buf + need - WEIR_Q8_SCALE_PAD * sizeof(float), 0, WEIR_Q8_SCALE_PAD * sizeof(float));
  act_job aj = {.x = x, .cols = w->cols, .kp = kp, .xq = (int8_t *)buf, .xd = (float *)(buf + qb)};
  if (threads > 1 && n_tokens >= 2 * threads && n_tokens * kp >= (1 << 16))
    h->parallel_for(h->ctx, n_tokens, 1, act_chunk, &aj);
  else
    act_chunk(&aj, 0, n_tokens, 0);

  weir_q8_matmul_args a = {.wq = w->q, .wd = w->d, .rows = w->rows, .kp = kp, .group = w->group,
                           .xq = aj.xq, .xd = aj.xd, .n_tokens = n_tokens, .y = y};
  if (threads <= 1 || w->rows < 8 || w->rows * kp * n_tokens < (1 << 16)) {
    weir_q8_matmul_rows(&a, 0, w->rows);
  } else {
    /* Four chunks per thread balance uneven cores; multiples of 4 rows keep the kernel's
     * 4-row tiles whole. */
    int64_t grain = (w->rows / ((int64_t)threads * 4) + 3) / 4 * 4;
    if (grain < 16) grain = 16;
    h->parallel_for(h->ctx, w->rows, grain, weir_q8_matmul_chunk, &a);
  }
  free(heap);
  return WEIR_OK;
}

static int q8_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  (void)self;
  const int8_weight *w = weight;
  if (n == 0) return WEIR_OK;
  if (!w || !ids || !out || n < 0) return WEIR_E_INVAL;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= w->rows) return WEIR_E_RANGE;
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *q = w->q + (int64_t)ids[i] * w->kp;
    const float *d = w->d + (int64_t)ids[i] * w->ng;
    float *o = out + i * w->cols;
    for (int64_t k = 0; k < w->cols; k++) {
      int64_t c = k / WEIR_Q8_ROW_ALIGN * WEIR_Q8_ROW_ALIGN;
      int stored = q[c + weir_q8_stored_pos((int)(k - c))];
      o[k] = (float)(stored - 128) * d[k / w->group];
    }
  }
  return WEIR_OK;
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = q8_pack,
    .release = q8_release,
    .weight_bytes = q8_weight_bytes,
    .matmul = q8_matmul,
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
