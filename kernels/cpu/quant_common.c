#include "quant_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "matmul_q8.h"

void weir_cpu_quant_init(weir_cpu_quant *q, const weir_host *host, const char *scheme) {
  q->host = host;
  q->scheme = scheme;
  q->parallel_min = weir_cpu_parallel_min(host);
}

int weir_cpu_quant_fail(const weir_cpu_quant *q, int rc, const char *fmt, ...) {
  const weir_host *h = q->host;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (h && WEIR_HAS_FIELD(h, weir_host, set_error) && h->set_error)
    h->set_error(h->ctx, "%s: %s", q->scheme, msg);
  else if (h && h->log)
    h->log(h->ctx, WEIR_LOG_ERROR, "%s: %s", q->scheme, msg);
  return rc;
}

void *weir_cpu_weight_alloc(const weir_host *h, size_t bytes, int *from_device) {
  void *data = NULL;
  if (h->device_alloc) {
    *from_device = 1;
    if (h->device_alloc(h->ctx, bytes, &data) != WEIR_OK) data = NULL;
    return data;
  }
  *from_device = 0;
  size_t sz = (bytes + 63) & ~(size_t)63;
  if (posix_memalign(&data, 64, sz ? sz : 64) != 0) data = NULL;
  return data;
}

void weir_cpu_weight_free(const weir_host *h, void *data, int from_device) {
  if (!data) return;
  if (from_device) h->device_free(h->ctx, data);
  else free(data);
}

int weir_cpu_weight_source(const weir_cpu_quant *q, const weir_quant_pack_args *args,
                           int64_t *rows, int64_t *cols, size_t *stride) {
  const weir_tensor *t = args ? args->src : NULL;
  const char *name = args && args->name ? args->name : "?";
  if (!t || !t->data) return WEIR_E_INVAL;
  switch (t->dtype) {
  case WEIR_DTYPE_F32: case WEIR_DTYPE_F16: case WEIR_DTYPE_BF16: case WEIR_DTYPE_Q8_0:
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: break;
  default:
    return weir_cpu_quant_fail(q, WEIR_E_NOTSUP, "tensor %s has unsupported dtype %s (reads "
                               "f32, f16, bf16, q8_0, q4_0 and q4_1)", name,
                               weir_dtype_name(t->dtype));
  }
  if (t->ndim < 1 || t->ndim > WEIR_MAX_DIMS) return WEIR_E_INVAL;
  for (int d = 2; d < t->ndim; d++)
    if (t->ne[d] != 1)
      return weir_cpu_quant_fail(q, WEIR_E_NOTSUP, "tensor %s is not a matrix (%d dims)", name,
                                 t->ndim);
  *cols = t->ne[0];
  *rows = t->ndim >= 2 ? t->ne[1] : 1;
  const size_t rb = weir_dtype_row_bytes(t->dtype, *cols);
  if (*cols <= 0 || *rows <= 0 || rb == 0 || *cols > ((int64_t)1 << 40) / *rows)
    return weir_cpu_quant_fail(q, WEIR_E_NOTSUP, "tensor %s has a bad shape for %s (%lld x "
                               "%lld)", name, weir_dtype_name(t->dtype), (long long)*rows,
                               (long long)*cols);
  *stride = t->ndim >= 2 && t->nb[1] ? t->nb[1] : rb;
  return *stride < rb ? WEIR_E_INVAL : WEIR_OK;
}

/* ---- pack skeleton ------------------------------------------------------------------------- */

typedef struct pack_job {
  const weir_cpu_quant *q;
  const weir_cpu_pack_spec *spec;
  weir_cpu_qweight *w;
  const uint8_t *src;
  size_t stride;
  weir_dtype dtype;
  int failed; /* WEIR_OK or the first failing chunk's status */
} pack_job;

static void pack_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  pack_job *j = arg;
  int rc = j->spec->rows(j->q, j->w, j->src, j->stride, j->dtype, begin, end);
  int expect = WEIR_OK;
  if (rc != WEIR_OK)
    __atomic_compare_exchange_n(&j->failed, &expect, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

int weir_cpu_quant_pack(const weir_cpu_quant *q, const weir_cpu_pack_spec *spec,
                        const weir_quant_pack_args *args, void **weight) {
  const weir_host *h = q->host;
  if (!args || !args->src || !weight || !args->src->data) return WEIR_E_INVAL;
  const weir_tensor *t = args->src;
  const char *name = args->name ? args->name : "?";
  int64_t rows, cols;
  size_t stride;
  int rc = weir_cpu_weight_source(q, args, &rows, &cols, &stride);
  if (rc != WEIR_OK) return rc;
  weir_cpu_qweight *w = h->alloc(h->ctx, spec->weight_size, 0);
  if (!w) return weir_cpu_quant_fail(q, WEIR_E_NOMEM, "out of memory packing %s", name);
  memset(w, 0, spec->weight_size);
  w->rows = rows;
  w->cols = cols;
  if ((rc = spec->layout(q, w, t)) != WEIR_OK) goto free_weight;
  w->data = weir_cpu_weight_alloc(h, w->bytes, &w->from_device);
  if (!w->data) {
    rc = weir_cpu_quant_fail(q, WEIR_E_NOMEM, "out of memory for the %zu bytes of %s (%lld x "
                             "%lld)", w->bytes, name, (long long)rows, (long long)cols);
    goto free_weight;
  }
  if (spec->prepare) spec->prepare(w);
  pack_job job = {.q = q, .spec = spec, .w = w, .src = t->data, .stride = stride,
                  .dtype = t->dtype, .failed = WEIR_OK};
  weir_cpu_quant_for_pack(q, rows, spec->grain, rows * cols, pack_chunk, &job);
  if ((rc = job.failed) != WEIR_OK) {
    if (rc == WEIR_E_NOMEM) weir_cpu_quant_fail(q, rc, "out of memory packing %s", name);
    else weir_cpu_quant_fail(q, rc, "cannot convert %s from %s: %s", name,
                             weir_dtype_name(t->dtype), weir_strerror(rc));
    goto free_data;
  }
  *weight = w;
  return WEIR_OK;
free_data:
  weir_cpu_weight_free(h, w->data, w->from_device);
free_weight:
  h->free(h->ctx, w);
  return rc;
}

void weir_cpu_quant_release(const weir_cpu_quant *q, void *weight) {
  weir_cpu_qweight *w = weight;
  if (!w) return;
  weir_cpu_weight_free(q->host, w->data, w->from_device);
  q->host->free(q->host->ctx, w);
}

size_t weir_cpu_quant_weight_bytes(const void *weight) {
  const weir_cpu_qweight *w = weight;
  return w ? w->bytes : 0;
}

int weir_cpu_quant_embed_check(const weir_cpu_qweight *w, const int32_t *ids, const float *out,
                               int64_t n) {
  if (n == 0) return WEIR_OK;
  if (!w || !ids || !out || n < 0) return WEIR_E_INVAL;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= w->rows) return WEIR_E_RANGE;
  return WEIR_OK;
}

/* ---- splitting work ------------------------------------------------------------------------ */

void weir_cpu_quant_for_pack(const weir_cpu_quant *q, int64_t rows, int64_t grain, int64_t work,
                             weir_parallel_fn fn, void *arg) {
  if (weir_cpu_host_threads(q->host) > 1 &&
      work >= q->parallel_min * WEIR_CPU_QUANT_PACK_FACTOR)
    q->host->parallel_for(q->host->ctx, rows, grain, fn, arg);
  else
    fn(arg, 0, rows, 0);
}

void weir_cpu_quant_for_tokens(const weir_cpu_quant *q, int64_t n_tokens, int64_t cols,
                               weir_parallel_fn fn, void *arg) {
  const int threads = weir_cpu_host_threads(q->host);
  if (threads > 1 && n_tokens >= 2 * threads &&
      n_tokens * cols >= q->parallel_min * WEIR_CPU_QUANT_MATMUL_FACTOR)
    q->host->parallel_for(q->host->ctx, n_tokens, 1, fn, arg);
  else
    fn(arg, 0, n_tokens, 0);
}

void weir_cpu_quant_for_units(const weir_cpu_quant *q, int64_t units, int64_t min_units,
                              int64_t work, int64_t align, int64_t min_grain,
                              weir_parallel_fn fn, void *arg) {
  const int threads = weir_cpu_host_threads(q->host);
  if (threads <= 1 || units < min_units ||
      work < q->parallel_min * WEIR_CPU_QUANT_MATMUL_FACTOR) {
    fn(arg, 0, units, 0);
    return;
  }
  int64_t grain = (units / ((int64_t)threads * 4) + align - 1) / align * align;
  if (grain < min_grain) grain = min_grain;
  q->host->parallel_for(q->host->ctx, units, grain, fn, arg);
}

uint8_t *weir_cpu_scratch(uint8_t *stack, size_t stack_bytes, size_t need, void **heap) {
  *heap = NULL;
  if (need <= stack_bytes) return stack;
  if (posix_memalign(heap, 64, need) != 0) {
    *heap = NULL;
    return NULL;
  }
  return *heap;
}

/* ---- the int8 weight path ------------------------------------------------------------------ */

size_t weir_cpu_q8_qbytes(int64_t rows, int64_t kp) {
  return ((size_t)rows * (size_t)kp + 63) & ~(size_t)63;
}

size_t weir_cpu_q8_bytes(int64_t rows, int64_t kp, int64_t ng) {
  return weir_cpu_q8_qbytes(rows, kp) +
         ((size_t)rows * (size_t)ng + WEIR_Q8_SCALE_PAD) * sizeof(float);
}

void weir_cpu_q8_from_q8_0_row(const uint8_t *src, int64_t cols, int64_t kp, uint8_t *q,
                               float *d) {
  const int64_t nblk = cols / 32, ng = kp / 32;
  int8_t nat[WEIR_Q8_ROW_ALIGN];
  for (int64_t c = 0; c < kp; c += WEIR_Q8_ROW_ALIGN) {
    memset(nat, 0, sizeof nat);
    for (int64_t b = c / 32; b < (c + WEIR_Q8_ROW_ALIGN) / 32 && b < nblk; b++)
      memcpy(nat + (b * 32 - c), src + b * 34 + 2, 32);
    weir_q8_interleave(nat, q + c, WEIR_Q8_ROW_ALIGN, 0x80);
  }
  for (int64_t b = 0; b < ng; b++)
    d[b] = b < nblk ? weir_f16_to_f32((uint16_t)(src[b * 34] | src[b * 34 + 1] << 8)) : 0.0f;
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

int weir_cpu_q8_matmul(const weir_cpu_quant *q, const weir_cpu_q8_mat *m, const float *x,
                       float *y, int64_t n_tokens) {
  return weir_cpu_q8_matmul_group(q, &m, 1, x, &y, n_tokens);
}

int weir_cpu_q8_matmul_group(const weir_cpu_quant *q, const weir_cpu_q8_mat *const *m, int n,
                             const float *x, float *const *y, int64_t n_tokens) {
  const int64_t kp = m[0]->kp, nb = kp / WEIR_Q8_BLOCK;
  for (int i = 1; i < n; i++)
    if (m[i]->kp != kp || m[i]->cols != m[0]->cols) return WEIR_E_NOTSUP;
  const size_t qb = weir_cpu_q8_qbytes(n_tokens, kp);
  const size_t need = weir_cpu_q8_bytes(n_tokens, kp, nb);
  _Alignas(64) uint8_t stack_buf[STACK_ACT_BYTES];
  void *heap;
  uint8_t *buf = weir_cpu_scratch(stack_buf, sizeof stack_buf, need, &heap);
  if (!buf) return WEIR_E_NOMEM;
  memset(buf + need - WEIR_Q8_SCALE_PAD * sizeof(float), 0, WEIR_Q8_SCALE_PAD * sizeof(float));
  act_job aj = {.x = x, .cols = m[0]->cols, .kp = kp, .xq = (int8_t *)buf,
                .xd = (float *)(void *)(buf + qb)};
  weir_cpu_quant_for_tokens(q, n_tokens, kp, act_chunk, &aj);
  for (int i = 0; i < n; i++) { /* the activations quantized once serve every weight */
    weir_q8_matmul_args a = {.wq = m[i]->q, .wd = m[i]->d, .rows = m[i]->rows, .kp = kp,
                             .group = m[i]->group, .xq = aj.xq, .xd = aj.xd,
                             .n_tokens = n_tokens, .y = y[i]};
    /* Multiples of 4 rows keep the kernel's 4-row tiles whole. */
    weir_cpu_quant_for_units(q, m[i]->rows, 8, m[i]->rows * kp * n_tokens, 4, 16,
                             weir_q8_matmul_chunk, &a);
  }
  free(heap);
  return WEIR_OK;
}

void weir_cpu_q8_dequant_row(const weir_cpu_q8_mat *m, int64_t r, float *out) {
  const uint8_t *q = m->q + r * m->kp;
  const float *d = m->d + r * (m->kp / m->group);
  for (int64_t k = 0; k < m->cols; k++) {
    int64_t c = k / WEIR_Q8_ROW_ALIGN * WEIR_Q8_ROW_ALIGN;
    out[k] = (float)(q[c + weir_q8_stored_pos((int)(k - c))] - 128) * d[k / m->group];
  }
}
