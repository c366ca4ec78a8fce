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

#endif
