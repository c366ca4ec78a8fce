/* quant/awq_int4: shared between the plugin's files (not an SDK header). */
#ifndef WEIR_PLUGIN_AWQ_INT4_H
#define WEIR_PLUGIN_AWQ_INT4_H

#include <stdint.h>

#include "matmul_q4.h"
#include "weir/quant.h"

typedef struct awq_plugin {
  const weir_host *host;
  int64_t group;          /* 32, 64 or 128 */
  int calibration;        /* 0: round-to-nearest only (no calibration pass is asked for) */
  int64_t calib_samples;  /* what calibration_samples() answers */
  int64_t search_samples; /* samples the alpha search multiplies (a subset) */
  int64_t search_rows;    /* output rows the alpha search evaluates per group of weights */
  int clip;               /* 1: search a clipping ratio per row and group */
  int64_t clip_samples;   /* samples the clipping search multiplies */
} awq_plugin;

/* The grid of the scale exponent: alpha = i / AWQ_GRID, i = 0..AWQ_GRID (step 0.05). */
#define AWQ_GRID 20
/* Clipping ratios tried: 1 - i / AWQ_CLIP_GRID for i = 0..AWQ_CLIP_STEPS (1 down to 0.5). */
#define AWQ_CLIP_GRID 20
#define AWQ_CLIP_STEPS 10

/* Outcome of the scale search, for messages and tests. */
typedef struct awq_search_result {
  double alpha;      /* the chosen exponent */
  double err_best;   /* sum of squared output errors on the evaluated rows and samples */
  double err_rtn;    /* the same with alpha = 0 (s = 1: plain round-to-nearest) */
  int64_t rows, samples;
} awq_search_result;

/* Searches the per-input-channel scale s = mean|x|^alpha (normalised so that
 * sqrt(max(s) * min(s)) = 1; rounded to powers of two with WEIR_QUANT_PACK_SCALE_POW2) for the n weights of args (same in_features, float sources),
 * minimising the squared output error of the group-quantized W diag(s) diag(1/s) against W
 * on the calibration samples of args[0]. Writes s [in_features]. Returns a status. */
int awq_search_scale(const awq_plugin *p, const weir_quant_pack_args *const *args, int n,
                     float *s, awq_search_result *res);

/* A float source (F32, F16, BF16, or Q8_0 dequantized) to quantize row by row. */
typedef struct awq_src {
  const weir_tensor *t;
  size_t stride;      /* bytes from row to row */
  int64_t cols, group;
  const float *s;     /* [cols] input scale the rows are multiplied by, or NULL */
  /* Clipping search samples (already divided by s), or NULL: per group g0 (a multiple of
   * group), [nc][n] floats at xc + g0 * nc, n = the group's width. */
  const float *xc;
  int64_t nc;
} awq_src;

/* Rows per awq_quantize_rows call at most: their clipping errors share one GEMM per group and
 * ratio. */
#define AWQ_ROWS 64

/* Quantizes rows [r0, r0 + nr) (nr <= AWQ_ROWS) of src times s, by round-to-nearest per group
 * (weir_q4_quantize_group), or with the clipping ratio among 1, 0.95, ..., 0.5 whose output
 * error on the samples is smallest: natural-order q [nr][cols], f16 d and m [nr][ngr] with
 * ngr = ceil(cols / group). Returns WEIR_OK, WEIR_E_NOMEM, WEIR_E_NOTSUP (a source type it
 * cannot read) or WEIR_E_RANGE (Inf/NaN or beyond the f16 range; those groups get NaN
 * scales). Thread-safe. */
int awq_quantize_rows(const awq_src *src, int64_t r0, int64_t nr, uint8_t *q, uint16_t *d,
                      uint16_t *m);

#endif
