/* The activation-aware scale search of quant/awq_int4 (see docs/quant-awq.md).
 *
 * For a group of weights that multiply the same input X (samples from the calibration pass),
 * the per-input-channel scale is s = mean|x|^alpha on the grid alpha = 0, 0.05, ..., 1. Each
 * candidate quantizes W diag(s) group-wise (round to nearest, as pack() will), and its output
 * error is || X (Q(W diag(s)) diag(1/s) - W)^T ||^2 over a subset of the samples and evenly
 * spaced output rows of all the weights together. alpha = 0 is s = 1, plain round-to-nearest,
 * so the chosen scale is never worse than RTN on this objective. With
 * WEIR_QUANT_PACK_SCALE_POW2 each candidate's s is rounded to a power of two before it is
 * evaluated (the search is over the scales the host can fold exactly). The error matrix E = Wq - W
 * is computed per row and multiplied by the f32 GEMM of kernels/cpu/matmul.h, on the host's
 * thread pool. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "awq_int4.h"
#include "convert.h"
#include "dequant.h"
#include "matmul.h"

typedef struct search_job {
  const float *w;      /* [R][cols] source rows */
  int64_t R, cols, group;
  const float *s, *inv_s;
  float *e;            /* [R][cols] */
  const float *x;      /* [S][cols] */
  int64_t S;
  float *y;            /* [S][R] */
  double *row_err;     /* [R] */
  int bad;
} search_job;

/* E row = Q(w * s) * (1 / s) - w, groups along the row. Returns -1 on a non-finite group. */
static int error_row(const float *w, int64_t cols, int64_t group, const float *s,
                     const float *inv_s, float *e) {
  float tmp[128];
  uint8_t q[128];
  int bad = 0;
  for (int64_t g0 = 0; g0 < cols; g0 += group) {
    int64_t n = cols - g0 < group ? cols - g0 : group;
    for (int64_t k = 0; k < n; k++) tmp[k] = w[g0 + k] * s[g0 + k];
    uint16_t dh, mh;
    if (weir_q4_quantize_group(tmp, n, q, &dh, &mh) != 0) bad = 1;
    float d = weir_f16_to_f32(dh), m = weir_f16_to_f32(mh);
    for (int64_t k = 0; k < n; k++)
      e[g0 + k] = (d * (float)q[k] + m) * inv_s[g0 + k] - w[g0 + k];
  }
  return bad ? -1 : 0;
}

static void search_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  search_job *j = arg;
  for (int64_t r = begin; r < end; r++)
    if (error_row(j->w + r * j->cols, j->cols, j->group, j->s, j->inv_s, j->e + r * j->cols))
      __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
  weir_matmul_args ma = {.w = j->e, .w_dtype = WEIR_DTYPE_F32, .rows = j->R, .cols = j->cols,
                         .x = j->x, .y = j->y, .n_tokens = j->S};
  weir_matmul_rows(&ma, begin, end);
  /* Per row, summed in row order afterwards: the result does not depend on which thread
   * took which rows, so a quantized model is the same for any thread count. */
  for (int64_t r = begin; r < end; r++) {
    double part = 0.0;
    for (int64_t t = 0; t < j->S; t++) {
      double v = j->y[t * j->R + r];
      part += v * v;
    }
    j->row_err[r] = part;
  }
}

static size_t src_stride(const weir_tensor *t) {
  size_t rb = weir_dtype_row_bytes(t->dtype, t->ne[0]);
  return t->ndim >= 2 && t->nb[1] ? t->nb[1] : rb;
}

int awq_search_scale(const awq_plugin *p, const weir_quant_pack_args *const *args, int n,
                     float *s, awq_search_result *res) {
  const weir_host *h = p->base.host;
  const int64_t cols = args[0]->src->ne[0];
  const float *xall = args[0]->act_samples;
  const int64_t nall = args[0]->num_samples;
  const int32_t *cls = WEIR_QUANT_ARGS_HAS(args[0], channel_class) ? args[0]->channel_class : NULL;
  const int pow2 = WEIR_QUANT_ARGS_HAS(args[0], flags) &&
                   (args[0]->flags & WEIR_QUANT_PACK_SCALE_POW2);
  int rc = WEIR_OK;
  memset(res, 0, sizeof *res);

  int64_t rtot = 0;
  for (int i = 0; i < n; i++) rtot += args[i]->src->ndim >= 2 ? args[i]->src->ne[1] : 1;
  const int64_t R = rtot < p->search_rows ? rtot : p->search_rows;
  const int64_t S = nall < p->search_samples ? nall : p->search_samples;
  const int threads = h->num_threads && h->parallel_for ? h->num_threads(h->ctx) : 1;

  double *xmean = calloc((size_t)cols, sizeof(double));
  double *cls_sum = cls ? calloc((size_t)cols, sizeof(double)) : NULL;
  int64_t *cls_n = cls ? calloc((size_t)cols, sizeof(int64_t)) : NULL;
  float *w = malloc(sizeof(float) * (size_t)(R * cols));
  float *e = malloc(sizeof(float) * (size_t)(R * cols));
  float *x = malloc(sizeof(float) * (size_t)(S * cols));
  float *y = malloc(sizeof(float) * (size_t)(S * R));
  float *inv_s = malloc(sizeof(float) * (size_t)cols);
  float *cand = malloc(sizeof(float) * (size_t)cols);
  double *row_err = calloc((size_t)(R > 0 ? R : 1), sizeof(double));
  if (!xmean || (cls && (!cls_sum || !cls_n)) || !w || !e || !x || !y || !inv_s || !cand ||
      !row_err) {
    rc = WEIR_E_NOMEM;
    goto out;
  }

  /* Mean magnitude per channel over every sample; tied channels share their class's mean. */
  for (int64_t t = 0; t < nall; t++)
    for (int64_t k = 0; k < cols; k++) xmean[k] += fabs((double)xall[t * cols + k]);
  for (int64_t k = 0; k < cols; k++) xmean[k] /= (double)nall;
  if (cls) {
    for (int64_t k = 0; k < cols; k++) {
      if (cls[k] < 0 || cls[k] >= cols) {
        rc = WEIR_E_INVAL;
        goto out;
      }
      cls_sum[cls[k]] += xmean[k];
      cls_n[cls[k]]++;
    }
    for (int64_t k = 0; k < cols; k++) xmean[k] = cls_sum[cls[k]] / (double)cls_n[cls[k]];
  }
  /* Evenly spaced samples and rows. */
  for (int64_t t = 0; t < S; t++)
    memcpy(x + t * cols, xall + (t * nall / S) * cols, sizeof(float) * (size_t)cols);
  for (int64_t r = 0; r < R; r++) {
    int64_t gr = r * rtot / R, i = 0;
    while (gr >= (args[i]->src->ndim >= 2 ? args[i]->src->ne[1] : 1)) {
      gr -= args[i]->src->ndim >= 2 ? args[i]->src->ne[1] : 1;
      i++;
    }
    const weir_tensor *t = args[i]->src;
    if (weir_dequant_row_f32(t->dtype, (const uint8_t *)t->data + (size_t)gr * src_stride(t),
                             w + r * cols, cols) != 0) {
      rc = WEIR_E_NOTSUP;
      goto out;
    }
  }

  double best = INFINITY;
  int best_i = 0;
  int64_t grain = R / ((int64_t)threads * 4);
  if (grain < 8) grain = 8;
  for (int gi = 0; gi <= AWQ_GRID; gi++) {
    const double alpha = (double)gi / AWQ_GRID;
    double smax = 0, smin = INFINITY;
    for (int64_t k = 0; k < cols; k++) {
      double v = pow(xmean[k], alpha);
      if (!(v >= 1e-4)) v = 1e-4; /* dead channels (and NaN) */
      cand[k] = (float)v;
      smax = v > smax ? v : smax;
      smin = v < smin ? v : smin;
    }
    const double norm = 1.0 / sqrt(smax * smin);
    for (int64_t k = 0; k < cols; k++) {
      cand[k] = (float)(cand[k] * norm);
      if (pow2) cand[k] = (float)exp2(nearbyint(log2(cand[k])));
      inv_s[k] = 1.0f / cand[k];
    }
    search_job j = {.w = w, .R = R, .cols = cols, .group = p->group, .s = cand,
                    .inv_s = inv_s, .e = e, .x = x, .S = S, .y = y, .row_err = row_err};
    if (threads > 1) h->parallel_for(h->ctx, R, grain, search_chunk, &j);
    else search_chunk(&j, 0, R, 0);
    double err = 0;
    for (int64_t r = 0; r < R; r++) err += row_err[r];
    if (j.bad || !(err == err)) continue;
    if (gi == 0) res->err_rtn = err;
    if (err < best) {
      best = err;
      best_i = gi;
      memcpy(s, cand, sizeof(float) * (size_t)cols);
    }
  }
  if (best == INFINITY) { /* nothing finite: no scale */
    for (int64_t k = 0; k < cols; k++) s[k] = 1.0f;
    best = 0;
  }
  res->alpha = (double)best_i / AWQ_GRID;
  res->err_best = best;
  res->rows = R;
  res->samples = S;
out:
  free(xmean);
  free(cls_sum);
  free(cls_n);
  free(w);
  free(e);
  free(x);
  free(y);
  free(inv_s);
  free(cand);
  free(row_err);
  return rc;
}

/* ---- row quantization, with the optional clipping search ---------------------------------- */

int awq_load_scaled_row(const awq_src *src, int64_t r, float *row) {
  if (weir_dequant_row_f32(src->t->dtype, (const uint8_t *)src->t->data + (size_t)r * src->stride,
                           row, src->cols) != 0)
    return WEIR_E_NOTSUP;
  if (src->s)
    for (int64_t k = 0; k < src->cols; k++) row[k] *= src->s[k];
  return WEIR_OK;
}

/* With the clipping search: for each group, every ratio's quantization error E (nr x n) meets
 * the group's samples (nc x n) in one GEMM, and each row keeps the ratio with the smallest
 * sum of squared outputs. */
int awq_quantize_rows(const awq_src *src, int64_t r0, int64_t nr, uint8_t *q, uint16_t *d,
                      uint16_t *m) {
  if (src->gt) return awq_gptq_rows(src, r0, nr, q, d, m);
  const int64_t cols = src->cols, group = src->group, nc = src->nc;
  const int64_t ngr = (cols + group - 1) / group;
  int rc = WEIR_OK;
  float *rows = malloc(sizeof(float) * (size_t)(nr * cols));
  float *e = src->xc ? malloc(sizeof(float) * (size_t)(AWQ_ROWS * 128)) : NULL;
  float *y = src->xc ? malloc(sizeof(float) * (size_t)(AWQ_ROWS * nc)) : NULL;
  if (!rows || (src->xc && (!e || !y)) || nr > AWQ_ROWS || group > 128) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  for (int64_t i = 0; i < nr; i++)
    if ((rc = awq_load_scaled_row(src, r0 + i, rows + i * cols)) != WEIR_OK) goto out;
  for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group, gi++) {
    const int64_t n = cols - g0 < group ? cols - g0 : group;
    float lo[AWQ_ROWS], hi[AWQ_ROWS];
    for (int64_t i = 0; i < nr; i++) {
      const float *w = rows + i * cols + g0;
      lo[i] = hi[i] = w[0];
      for (int64_t k = 1; k < n; k++) {
        lo[i] = w[k] < lo[i] ? w[k] : lo[i];
        hi[i] = w[k] > hi[i] ? w[k] : hi[i];
      }
    }
    if (src->xc) {
      float mn[AWQ_ROWS], mx[AWQ_ROWS];
      double best[AWQ_ROWS];
      memcpy(mn, lo, sizeof(float) * (size_t)nr);
      memcpy(mx, hi, sizeof(float) * (size_t)nr);
      for (int64_t i = 0; i < nr; i++) best[i] = INFINITY;
      for (int ri = 0; ri <= AWQ_CLIP_STEPS; ri++) {
        const float ratio = 1.0f - (float)ri / AWQ_CLIP_GRID;
        for (int64_t i = 0; i < nr; i++) {
          const float *w = rows + i * cols + g0;
          const float a = mn[i] < 0 ? mn[i] * ratio : mn[i], b = mx[i] > 0 ? mx[i] * ratio : mx[i];
          uint8_t qq[128];
          uint16_t dh, mh;
          float *ei = e + i * n;
          if (weir_q4_quantize_group_clip(w, n, a, b, qq, &dh, &mh) != 0) {
            for (int64_t k = 0; k < n; k++) ei[k] = NAN;
            continue;
          }
          const float dv = weir_f16_to_f32(dh), mv = weir_f16_to_f32(mh);
          for (int64_t k = 0; k < n; k++) ei[k] = dv * (float)qq[k] + mv - w[k];
        }
        weir_matmul_args ma = {.w = e, .w_dtype = WEIR_DTYPE_F32, .rows = nr, .cols = n,
                               .x = src->xc + g0 * nc, .y = y, .n_tokens = nc};
        weir_matmul_rows(&ma, 0, nr);
        for (int64_t i = 0; i < nr; i++) {
          double err = 0;
          for (int64_t t = 0; t < nc; t++) err += (double)y[t * nr + i] * y[t * nr + i];
          if (err < best[i]) { /* NaN never wins */
            best[i] = err;
            lo[i] = mn[i] < 0 ? mn[i] * ratio : mn[i];
            hi[i] = mx[i] > 0 ? mx[i] * ratio : mx[i];
          }
        }
      }
    }
    for (int64_t i = 0; i < nr; i++) {
      const float *w = rows + i * cols + g0;
      int bad = src->xc ? weir_q4_quantize_group_clip(w, n, lo[i], hi[i], q + i * cols + g0,
                                                      &d[i * ngr + gi], &m[i * ngr + gi])
                        : weir_q4_quantize_group(w, n, q + i * cols + g0, &d[i * ngr + gi],
                                                 &m[i * ngr + gi]);
      if (bad) rc = WEIR_E_RANGE;
    }
  }
out:
  free(rows);
  free(e);
  free(y);
  return rc;
}
