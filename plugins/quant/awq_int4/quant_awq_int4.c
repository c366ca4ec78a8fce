/* awq_int4: activation-aware 4-bit weights with int8 activations on the CPU.
 *
 * pack() stores a weight as unsigned 4-bit values with an f16 scale d and offset m per group
 * of `group_size` input columns (w = d q + m) in the layout of kernels/cpu/matmul_q4.h, plus,
 * when calibration samples came with it, a per-input-channel scale s: the weights stored are
 * those of W diag(s), and matmul multiplies the activations by 1/s before quantizing them.
 *   - F32, F16 and BF16 sources are quantized at load by round-to-nearest, after the AWQ
 *     search (awq_search.c) chose s when samples are given, and optionally a clipping ratio
 *     per row and group chosen on the samples.
 *   - Q4_0 and Q4_1 sources are carried over exactly: their 32-element blocks become groups of
 *     32 (or of group_size when every run of blocks in a group shares d and m), Q4_0 as a
 *     symmetric weight (m = -8 d, nothing stored).
 *   - Q8_0 sources (the output layer of most 4-bit files) are carried over exactly as int8
 *     weights and run on the int8 kernels (kernels/cpu/matmul_q8.h).
 * pack_group() shares one s among weights that multiply the same input, export_weight()
 * writes a packed weight as Q4_1 blocks for `weir quantize`. See docs/quant-awq.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "awq_int4.h"
#include "convert.h"
#include "dequant.h"

typedef struct awq_weight {
  weir_cpu_qweight base; /* rows, cols, and the packed bytes (data) */
  weir_q4_layout l;   /* 4-bit weights; for int8 ones only rows and cols are set */
  int is_q8;          /* 1: an exact Q8_0 carry-over: data = [rows][kp8] q + 128 (stored
                         order of matmul_q8.h), then [rows][kp8 / 32] f32 d + pad */
  int64_t kp8;
  float *scale;     /* [cols] s, or NULL */
  float *inv_scale; /* [cols] 1 / s, or NULL */
} awq_weight;

/* The packed bytes. */
#define WDATA(w) ((uint8_t *)(w)->base.data)

#define LOG(p, lvl, ...) \
  do { if ((p)->base.host->log) (p)->base.host->log((p)->base.host->ctx, (lvl), __VA_ARGS__); } while (0)
/* Says why the call fails (host->set_error) and evaluates to rc. */
#define FAIL(p, rc, ...) weir_cpu_quant_fail(&(p)->base, (rc), __VA_ARGS__)

static int awq_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  awq_plugin *p = calloc(1, sizeof *p);
  if (!p) return WEIR_E_NOMEM;
  int rc = awq_plugin_set(p, host);
  if (rc != WEIR_OK) goto free_p;
  if (p->group != 32 && p->group != 64 && p->group != 128) {
    rc = FAIL(p, WEIR_E_INVAL, "group_size must be 32, 64 or 128, not %lld",
              (long long)p->group);
    goto free_p;
  }
  LOG(p, WEIR_LOG_INFO, "awq_int4: group_size %lld, calibration %s%s, kernels %s",
      (long long)p->group, p->calibration ? "on" : "off (RTN)",
      !p->calibration ? "" : p->gptq ? " with error-compensating rounding"
                           : p->clip ? " with clipping search" : "",
      weir_q8_isa_name(weir_q8_isa_current()));
  *self = p;
  return WEIR_OK;
free_p:
  free(p);
  return rc;
}

static void awq_fini(void *self) { free(self); }

/* Block-quantized sources are carried over exactly: nothing to calibrate. */
static int64_t awq_calibration_samples(void *self, weir_dtype src_dtype) {
  awq_plugin *p = self;
  if (src_dtype != WEIR_DTYPE_F32 && src_dtype != WEIR_DTYPE_F16 && src_dtype != WEIR_DTYPE_BF16)
    return 0;
  return p->calibration ? p->calib_samples : 0;
}

/* ---- packing ------------------------------------------------------------------------------ */

static size_t src_stride(const weir_tensor *t) {
  size_t rb = weir_dtype_row_bytes(t->dtype, t->ne[0]);
  return t->ndim >= 2 && t->nb[1] ? t->nb[1] : rb;
}

static int is_q4(weir_dtype t) { return t == WEIR_DTYPE_Q4_0 || t == WEIR_DTYPE_Q4_1; }
/* Sources quantized here (the others are carried over as they are). */
static int is_float(weir_dtype t) {
  return t == WEIR_DTYPE_F32 || t == WEIR_DTYPE_F16 || t == WEIR_DTYPE_BF16;
}

/* Checks one source and returns its shape; logs and returns a status when unusable. */
static int check_source(awq_plugin *p, const weir_quant_pack_args *a, int64_t *rows,
                        int64_t *cols) {
  size_t stride;
  return weir_cpu_weight_source(&p->base, a, rows, cols, &stride);
}

/* For a Q4_0/Q4_1 source: 1 when every run of group/32 blocks in each row has the same d (and
 * m), so the weight keeps the configured group size; else the blocks' own 32 is used. */
static int q4_runs_share(const weir_tensor *t, int64_t rows, int64_t cols, int64_t group) {
  if (group == 32) return 1;
  const size_t bb = weir_dtype_block_bytes(t->dtype), sb = t->dtype == WEIR_DTYPE_Q4_1 ? 4 : 2;
  const int64_t nblk = cols / 32, per = group / 32;
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *row = (const uint8_t *)t->data + (size_t)r * src_stride(t);
    for (int64_t b = 0; b < nblk; b++)
      if (b % per && memcmp(row + b * bb, row + (b - b % per) * bb, sb) != 0) return 0;
  }
  return 1;
}

typedef struct pack_job {
  const awq_plugin *p;
  const weir_tensor *t;
  size_t stride;
  awq_weight *w;
  const float *s;   /* [cols] or NULL */
  const float *xc;  /* [nc][cols] clipping samples divided by s, or NULL */
  int64_t nc;
  const float *gt;  /* error-compensation factor (awq_gptq_factor), or NULL */
  int failed;       /* WEIR_OK or a status */
} pack_job;

static void set_failed(pack_job *j, int rc) {
  int expect = WEIR_OK;
  __atomic_compare_exchange_n(&j->failed, &expect, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* One Q4_0 / Q4_1 row, exactly: nibbles as they are, d (and m) of each group's first block. */
static void pack_q4_row(const pack_job *j, int64_t r, uint8_t *q, uint16_t *d, uint16_t *m) {
  const weir_q4_layout *l = &j->w->l;
  const uint8_t *row = (const uint8_t *)j->t->data + (size_t)r * j->stride;
  const int q41 = j->t->dtype == WEIR_DTYPE_Q4_1;
  const size_t bb = weir_dtype_block_bytes(j->t->dtype);
  for (int64_t b = 0; b < l->cols / 32; b++) {
    const uint8_t *blk = row + b * bb, *qs = blk + (q41 ? 4 : 2);
    for (int i = 0; i < 16; i++) {
      q[b * 32 + i] = qs[i] & 15;
      q[b * 32 + 16 + i] = qs[i] >> 4;
    }
    if (b % (l->group / 32) == 0) {
      d[b * 32 / l->group] = (uint16_t)(blk[0] | blk[1] << 8);
      if (q41) m[b * 32 / l->group] = (uint16_t)(blk[2] | blk[3] << 8);
    }
  }
}

static void pack_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  pack_job *j = arg;
  const weir_q4_layout *l = &j->w->l;
  const int64_t cols = l->cols, ngr = (cols + l->group - 1) / l->group;
  uint8_t *q = malloc((size_t)(cols * AWQ_ROWS));
  uint16_t *d = calloc((size_t)(l->ng * AWQ_ROWS), sizeof(uint16_t));
  uint16_t *m = calloc((size_t)(l->ng * AWQ_ROWS), sizeof(uint16_t));
  if (!q || !d || !m) {
    set_failed(j, WEIR_E_NOMEM);
    goto out;
  }
  if (is_q4(j->t->dtype)) {
    for (int64_t r = begin; r < end; r++) {
      pack_q4_row(j, r, q, d, m);
      weir_q4_store_row(l, WDATA(j->w), r, q, d, m);
    }
    goto out;
  }
  const awq_src src = {.t = j->t, .stride = j->stride, .cols = cols, .group = l->group,
                       .s = j->s, .xc = j->xc, .nc = j->nc, .gt = j->gt};
  for (int64_t r = begin; r < end; r += AWQ_ROWS) {
    const int64_t nr = end - r < AWQ_ROWS ? end - r : AWQ_ROWS;
    int rc = awq_quantize_rows(&src, r, nr, q, d, m);
    if (rc != WEIR_OK) set_failed(j, rc);
    if (rc == WEIR_E_NOMEM || rc == WEIR_E_NOTSUP) break;
    for (int64_t i = 0; i < nr; i++)
      weir_q4_store_row(l, WDATA(j->w), r + i, q + i * cols, d + i * ngr, m + i * ngr);
  }
out:
  free(q);
  free(d);
  free(m);
}

/* A Q8_0 source as int8 weights in the int8 kernels' format: q copied (stored biased and
 * interleaved), d widened to f32 (exact). */
static int pack_q8(awq_plugin *p, const weir_tensor *t, int64_t rows, int64_t cols,
                   awq_weight *w) {
  w->is_q8 = 1;
  w->l.rows = rows;
  w->l.cols = cols;
  w->kp8 = weir_q8_padded_cols(cols, 32);
  const int64_t nb = w->kp8 / 32;
  const size_t qbytes = weir_cpu_q8_qbytes(rows, w->kp8);
  w->base.bytes = weir_cpu_q8_bytes(rows, w->kp8, nb);
  w->base.data = weir_cpu_weight_alloc(p->base.host, w->base.bytes, &w->base.from_device);
  if (!w->base.data) return WEIR_E_NOMEM;
  float *d = (float *)(void *)(WDATA(w) + qbytes);
  const size_t stride = src_stride(t);
  for (int64_t r = 0; r < rows; r++)
    weir_cpu_q8_from_q8_0_row((const uint8_t *)t->data + (size_t)r * stride, cols, w->kp8,
                              WDATA(w) + (size_t)r * (size_t)w->kp8, d + r * nb);
  memset(d + rows * nb, 0, WEIR_Q8_SCALE_PAD * sizeof(float));
  return WEIR_OK;
}

static weir_cpu_q8_mat q8_mat(const awq_weight *w) {
  return (weir_cpu_q8_mat){
      .q = WDATA(w),
      .d = (const float *)(const void *)(WDATA(w) + weir_cpu_q8_qbytes(w->l.rows, w->kp8)),
      .rows = w->l.rows, .cols = w->l.cols, .kp = w->kp8, .group = 32};
}

static void weight_free(awq_plugin *p, awq_weight *w) {
  if (!w) return;
  p->base.host->free(p->base.host->ctx, w->scale);
  p->base.host->free(p->base.host->ctx, w->inv_scale);
  weir_cpu_quant_release(&p->base, w);
}

/* Packs one weight; s (cols floats, copied) may be NULL. xc: clipping samples or NULL; gt:
 * error-compensation factor or NULL. */
static int pack_one(awq_plugin *p, const weir_quant_pack_args *a, const float *s,
                    const float *xc, int64_t nc, const float *gt, awq_weight **out) {
  const weir_host *h = p->base.host;
  const weir_tensor *t = a->src;
  const char *name = a->name ? a->name : "?";
  int64_t rows, cols;
  int rc = check_source(p, a, &rows, &cols);
  if (rc != WEIR_OK) return rc;
  int64_t group = p->group;
  if (is_q4(t->dtype) && !q4_runs_share(t, rows, cols, group)) group = 32;
  awq_weight *w = h->alloc(h->ctx, sizeof *w, 0);
  if (!w) return FAIL(p, WEIR_E_NOMEM, "out of memory packing %s", name);
  memset(w, 0, sizeof *w);
  w->base.rows = rows;
  w->base.cols = cols;
  if (t->dtype == WEIR_DTYPE_Q8_0) {
    rc = pack_q8(p, t, rows, cols, w);
    if (rc != WEIR_OK) goto fail;
    *out = w;
    return WEIR_OK;
  }
  if (weir_q4_layout_init(&w->l, rows, cols, group, t->dtype == WEIR_DTYPE_Q4_0) != 0) {
    h->free(h->ctx, w);
    return FAIL(p, WEIR_E_NOTSUP, "tensor %s (%lld x %lld) has no 4-bit layout with groups of "
                "%lld", name, (long long)rows, (long long)cols, (long long)group);
  }
  w->base.bytes = w->l.bytes;
  w->base.data = weir_cpu_weight_alloc(h, w->base.bytes, &w->base.from_device);
  if (!w->base.data) {
    rc = WEIR_E_NOMEM;
    goto fail;
  }
  /* Padding rows of the last quad, its alignment bytes and the tail read past the end hold
   * zeros; every real row's bytes are written by store_row. */
  memset(WDATA(w) + (size_t)(w->l.nq - 1) * w->l.quad_bytes, 0, w->l.quad_bytes + WEIR_Q4_TAIL_PAD);
  if (s) {
    w->scale = h->alloc(h->ctx, sizeof(float) * (size_t)cols, 0);
    w->inv_scale = h->alloc(h->ctx, sizeof(float) * (size_t)cols, 0);
    if (!w->scale || !w->inv_scale) {
      rc = WEIR_E_NOMEM;
      goto fail;
    }
    for (int64_t k = 0; k < cols; k++) {
      w->scale[k] = s[k];
      w->inv_scale[k] = 1.0f / s[k];
    }
  }
  pack_job j = {.p = p, .t = t, .stride = src_stride(t), .w = w, .s = s, .xc = xc, .nc = nc,
                .gt = is_float(t->dtype) ? gt : NULL};
  int64_t work = rows * cols * (j.gt ? cols : xc ? nc * (AWQ_CLIP_STEPS + 1) : 1);
  weir_cpu_quant_for_pack(&p->base, rows, xc || j.gt ? AWQ_ROWS : 16, work, pack_chunk, &j);
  if (j.failed != WEIR_OK) {
    rc = j.failed;
    if (rc == WEIR_E_RANGE)
      FAIL(p, 0, "tensor %s holds Inf/NaN or values beyond the f16 range "
          "of the 4-bit scales", name);
    goto fail;
  }
  *out = w;
  return WEIR_OK;
fail:
  if (rc == WEIR_E_NOMEM) FAIL(p, rc, "out of memory packing %s (%lld x %lld)", name,
                               (long long)rows, (long long)cols);
  weight_free(p, w);
  return rc;
}

static int awq_pack_group(void *self, const weir_quant_pack_args *const *args, int n,
                          void **weights) {
  awq_plugin *p = self;
  if (!args || !weights || n < 1) return WEIR_E_INVAL;
  awq_weight *out[8] = {0};
  if (n > 8) return WEIR_E_INVAL;
  int64_t rows, cols = 0;
  int floats = 1, rc;
  for (int i = 0; i < n; i++) {
    int64_t c;
    if (!args[i]) return WEIR_E_INVAL;
    if ((rc = check_source(p, args[i], &rows, &c)) != WEIR_OK) return rc;
    if (i && c != cols) {
      FAIL(p, 0, "%s and %s share an input but have %lld and %lld inputs",
          args[0]->name ? args[0]->name : "?", args[i]->name ? args[i]->name : "?",
          (long long)cols, (long long)c);
      return WEIR_E_INVAL;
    }
    cols = c;
    if (!is_float(args[i]->src->dtype)) floats = 0;
  }
  const weir_quant_pack_args *a0 = args[0];
  const int awq = p->calibration && floats && a0->act_samples && a0->num_samples > 0;
  awq_prep pp = {0};
  if (awq) {
    rc = awq_prepare(p, args, n, cols, &pp);
    char names[256];
    size_t off = 0;
    names[0] = 0;
    for (int i = 0; i < n && off < sizeof names; i++)
      off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
                              args[i]->name ? args[i]->name : "?");
    if (rc != WEIR_OK) {
      FAIL(p, 0, "%s: calibration failed: %s", names,
          rc == WEIR_E_NOMEM ? "out of memory"
          : rc == WEIR_E_RANGE ? "the samples are not finite (the error-compensation factor "
                                 "cannot be made)"
                               : "bad samples or channel classes");
      return rc;
    }
    char where[40] = "";
    if (WEIR_QUANT_ARGS_HAS(a0, num_layers) && a0->num_layers > 0 && a0->layer >= 0)
      snprintf(where, sizeof where, " (block %d of %d)", a0->layer + 1, a0->num_layers);
    LOG(p, WEIR_LOG_INFO, "awq_int4: %s%s: alpha %.2f, output error %.3g of RTN's "
        "(%lld rows x %lld samples)", names, where, pp.res.alpha,
        pp.res.err_rtn > 0 ? pp.res.err_best / pp.res.err_rtn : 1.0, (long long)pp.res.rows,
        (long long)pp.res.samples);
    if (pp.gptq_skipped)
      LOG(p, WEIR_LOG_WARN, "awq_int4: %s: %lld inputs, more than the %d error compensation "
          "takes: rounded to nearest", names, (long long)cols, AWQ_GPTQ_MAX_COLS);
  } else if (p->calibration && a0->act_samples && !floats) {
    LOG(p, WEIR_LOG_INFO, "awq_int4: %s: block-quantized source carried over as is (no scale "
        "search)",
        a0->name ? a0->name : "?");
  }
  rc = WEIR_OK;
  for (int i = 0; i < n && rc == WEIR_OK; i++)
    rc = pack_one(p, args[i], pp.s, pp.xc, pp.nc, pp.gt, &out[i]);
  if (rc != WEIR_OK) {
    for (int i = 0; i < n; i++) weight_free(p, out[i]);
    goto out;
  }
  for (int i = 0; i < n; i++) weights[i] = out[i];
out:
  awq_prep_free(&pp);
  return rc;
}

static int awq_pack(void *self, const weir_quant_pack_args *args, void **weight) {
  if (!weight) return WEIR_E_INVAL;
  return awq_pack_group(self, &args, 1, weight);
}

static void awq_release(void *self, void *weight) { weight_free(self, weight); }

static size_t awq_weight_bytes(void *self, const void *weight) {
  (void)self;
  return weir_cpu_quant_weight_bytes(weight);
}

/* ---- matmul -------------------------------------------------------------------------------- */

typedef struct act_job {
  const awq_weight *w;
  const float *x;
  int8_t *xq;
  float *xd, *xdp, *xsg, *tmp;
} act_job;

static void act_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  act_job *j = arg;
  const weir_q4_layout *l = &j->w->l;
  const int64_t kp = l->kp, nl = kp / WEIR_Q4_CHUNK * WEIR_Q4_LANES;
  for (int64_t t = begin; t < end; t++)
    weir_q4_act_prep(j->x + t * l->cols, j->w->inv_scale, l->cols, kp, l->group,
                     j->xq + t * kp, j->xd + t * (kp / 32), j->xdp + t * nl,
                     j->xsg + t * l->ngp, j->tmp + (int64_t)thread * l->cols);
}

/* Activations of up to this many bytes live on the stack (decode of the 1.1B shape needs
 * about 32 KiB for the FFN's down projection). */
#define STACK_ACT_BYTES 49152

static int awq_matmul(void *self, const void *weight, const float *x, float *y, int64_t n_tokens) {
  awq_plugin *p = self;
  const awq_weight *w = weight;
  if (n_tokens == 0) return WEIR_OK;
  if (!w || !x || !y || n_tokens < 0) return WEIR_E_INVAL;
  if (w->is_q8) { /* a Q8_0 carry-over: the int8 plugin's path */
    weir_cpu_q8_mat m = q8_mat(w);
    return weir_cpu_q8_matmul(&p->base, &m, x, y, n_tokens);
  }
  const weir_q4_layout *l = &w->l;
  const int64_t kp = l->kp, nl = kp / WEIR_Q4_CHUNK * WEIR_Q4_LANES;
  const int threads = weir_cpu_host_threads(p->base.host);
  const size_t nt = (size_t)n_tokens;
  const size_t qb = (nt * (size_t)kp + 63) & ~(size_t)63;
  const size_t nf = nt * (size_t)(kp / 32) + nt * (size_t)nl + nt * (size_t)l->ngp +
                    (w->inv_scale ? (size_t)threads * (size_t)l->cols : 0);
  const size_t need = qb + nf * sizeof(float);
  _Alignas(64) uint8_t stack_buf[STACK_ACT_BYTES];
  void *heap;
  uint8_t *buf = weir_cpu_scratch(stack_buf, sizeof stack_buf, need, &heap);
  if (!buf) return WEIR_E_NOMEM;
  float *f = (float *)(void *)(buf + qb);
  act_job aj = {.w = w, .x = x, .xq = (int8_t *)buf, .xd = f};
  aj.xdp = aj.xd + nt * (size_t)(kp / 32);
  aj.xsg = aj.xdp + nt * (size_t)nl;
  aj.tmp = aj.xsg + nt * (size_t)l->ngp;
  weir_cpu_quant_for_tokens(&p->base, n_tokens, kp, act_chunk, &aj);
  weir_q4_matmul_args a = {.l = l, .w = WDATA(w), .xq = aj.xq, .xdp = aj.xdp, .xsg = aj.xsg,
                           .n_tokens = n_tokens, .y = y};
  weir_cpu_quant_for_units(&p->base, l->nq, 2, l->rows * kp * n_tokens, 1, 2,
                           weir_q4_matmul_chunk, &a);
  free(heap);
  return WEIR_OK;
}

static int awq_embed(void *self, const void *weight, const int32_t *ids, float *out, int64_t n) {
  (void)self;
  const awq_weight *w = weight;
  int rc = weir_cpu_quant_embed_check(weight, ids, out, n);
  if (rc != WEIR_OK || n == 0) return rc;
  for (int64_t i = 0; i < n; i++) {
    float *o = out + i * w->l.cols;
    if (w->is_q8) {
      weir_cpu_q8_mat m = q8_mat(w);
      weir_cpu_q8_dequant_row(&m, ids[i], o);
      continue;
    }
    weir_q4_dequant_row(&w->l, WDATA(w), ids[i], o);
    if (w->inv_scale)
      for (int64_t k = 0; k < w->l.cols; k++) o[k] *= w->inv_scale[k];
  }
  return WEIR_OK;
}

/* ---- export -------------------------------------------------------------------------------- */

static int awq_export(void *self, const void *weight, weir_quant_export *ex) {
  awq_plugin *p = self;
  const awq_weight *w = weight;
  if (!w || !ex || !ex->data) return WEIR_E_INVAL;
  const weir_q4_layout *l = &w->l;
  if (ex->dtype != WEIR_DTYPE_Q4_1) return WEIR_E_NOTSUP;
  if (w->is_q8) {
    FAIL(p, 0, "an int8 weight (a Q8_0 source kept as it is) has no "
        "Q4_1 form; write the source tensor instead");
    return WEIR_E_NOTSUP;
  }
  const size_t rb = weir_dtype_row_bytes(WEIR_DTYPE_Q4_1, l->cols);
  if (rb == 0) return WEIR_E_NOTSUP;
  if (ex->bytes < rb * (size_t)l->rows) return WEIR_E_RANGE;
  uint8_t *q = malloc((size_t)l->cols);
  uint16_t *d = malloc(sizeof(uint16_t) * (size_t)l->ng), *m = malloc(sizeof(uint16_t) * (size_t)l->ng);
  int rc = WEIR_OK;
  if (!q || !d || !m) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  for (int64_t r = 0; r < l->rows; r++) {
    weir_q4_load_row(l, WDATA(w), r, q, d, m);
    uint8_t *row = (uint8_t *)ex->data + (size_t)r * rb;
    for (int64_t b = 0; b < l->cols / 32; b++) {
      const int64_t g = b * 32 / l->group;
      /* A Q4_0 source's m = -8 d is exact in f16 unless it overflows. */
      if (l->sym && weir_f16_to_f32(m[g]) != -8.0f * weir_f16_to_f32(d[g])) {
        FAIL(p, 0, "row %lld: -8 d of a Q4_0 block does not fit f16",
            (long long)r);
        rc = WEIR_E_RANGE;
        goto out;
      }
      uint8_t *blk = row + b * 20;
      blk[0] = (uint8_t)d[g];
      blk[1] = (uint8_t)(d[g] >> 8);
      blk[2] = (uint8_t)m[g];
      blk[3] = (uint8_t)(m[g] >> 8);
      for (int i = 0; i < 16; i++)
        blk[4 + i] = (uint8_t)(q[b * 32 + i] | q[b * 32 + 16 + i] << 4);
    }
  }
  if (ex->in_scale)
    for (int64_t k = 0; k < l->cols; k++) ex->in_scale[k] = w->scale ? w->scale[k] : 1.0f;
out:
  free(q);
  free(d);
  free(m);
  return rc;
}

static const weir_quant_ops k_ops = {
    .struct_size = sizeof(weir_quant_ops),
    .pack = awq_pack,
    .release = awq_release,
    .weight_bytes = awq_weight_bytes,
    .matmul = awq_matmul,
    .embed = awq_embed,
    .calibration_samples = awq_calibration_samples,
    .pack_group = awq_pack_group,
    .export_weight = awq_export,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_QUANT,
    .name = "awq_int4",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "activation-aware 4-bit weights (groups of 32-128, f16 scale and offset); "
                   "int8 activations, AVX2/AVX-512/VNNI kernels",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = WEIR_DEQUANTIZE_DTYPES,
    .options = awq_options,
    .num_options = AWQ_NUM_OPTIONS,
    .init = awq_init,
    .fini = awq_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
