/* quant/awq_int4: shared between the plugin's files (not an SDK header). */
#ifndef WEIR_PLUGIN_AWQ_INT4_H
#define WEIR_PLUGIN_AWQ_INT4_H

#include <stdint.h>

#include "matmul_q4.h"
#include "quant_common.h"
#include "weir/quant.h"

typedef struct awq_plugin {
  weir_cpu_quant base;    /* host, "awq_int4", the device's parallel_min */
  int64_t group;          /* 32, 64 or 128 */
  int calibration;        /* 0: round-to-nearest only (no calibration pass is asked for) */
  int64_t calib_samples;  /* what calibration_samples() answers */
  int64_t search_samples; /* samples the alpha search multiplies (a subset) */
  int64_t search_rows;    /* output rows the alpha search evaluates per group of weights */
  int clip;               /* 1: search a clipping ratio per row and group */
  int64_t clip_samples;   /* samples the clipping search multiplies */
  int gptq;               /* 1: error-compensating rounding (awq_gptq.c) with calibration */
  double gptq_damp;       /* its damping, a fraction of the mean diagonal of H */
} awq_plugin;

/* The options of both plugins (CPU and CUDA): same keys, defaults, ranges. */
#define AWQ_NUM_OPTIONS 9
extern const weir_option_desc awq_options[AWQ_NUM_OPTIONS];

/* Fills p: its base for `host` (scheme "awq_int4"), then every option read by key
 * (weir_options_read). Returns a status: an option the table does not declare fails (the
 * host says which). Does not check group_size: the caller refuses what its kernels cannot
 * run. */
int awq_plugin_set(awq_plugin *p, const weir_host *host);

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

/* What a group of weights reading one input is packed with when calibrating: the input scale
 * s, and the clipping search's samples (xc, nc; gptq off) or the error-compensation factor
 * gt (gptq on), as awq_src takes them. Owned; awq_prep_free frees. */
typedef struct awq_prep {
  float *s, *xc, *gt;
  int64_t nc;
  awq_search_result res;
  int gptq_skipped; /* 1: gptq was on but the input is too wide (AWQ_GPTQ_MAX_COLS) */
} awq_prep;

/* For n float weights with calibration samples (args[0]'s): the scale search, then the gptq
 * factor or the clipping samples per p. Returns a status (awq_search_scale's or
 * awq_gptq_factor's); on failure *pp holds nothing. */
int awq_prepare(const awq_plugin *p, const weir_quant_pack_args *const *args, int n,
                int64_t cols, awq_prep *pp);
void awq_prep_free(awq_prep *pp);

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
  /* The error-compensation factor of awq_gptq_factor, or NULL (round to nearest). When set,
   * it takes the place of the clipping search. */
  const float *gt;
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

/* Row r of src times s into row[cols] as f32. WEIR_E_NOTSUP for a type it cannot read. */
int awq_load_scaled_row(const awq_src *src, int64_t r, float *row);

/* Inputs beyond which a weight is not error-compensated (rounded to nearest after the scale
 * search instead): the factor takes 2 n^2 floats. */
#define AWQ_GPTQ_MAX_COLS 32768

/* The factor of the error-compensating rounding (awq_gptq.c) for weights whose input has the
 * calibration samples x [ns][cols] (divided by s when s is not NULL): H = X^T X + damp *
 * mean(diag H) I is factored, and *gt receives G (cols x cols floats, malloc'd, the caller
 * frees) in the layout awq_gptq_rows reads, for p->group. Returns WEIR_OK, WEIR_E_NOMEM,
 * WEIR_E_INVAL (no samples), WEIR_E_NOTSUP (more than AWQ_GPTQ_MAX_COLS inputs) or
 * WEIR_E_RANGE (H stayed indefinite with 10^4 times the damping: non-finite samples). Uses the host's threads; call it from the host thread. */
int awq_gptq_factor(const awq_plugin *p, const float *x, int64_t ns, int64_t cols,
                    const float *s, double damp, float **gt);

/* Quantizes rows [r0, r0 + nr) of src times s (src->gt set) with error compensation: output
 * as for awq_quantize_rows. Thread-safe (the GEMM inside runs on the calling thread). */
int awq_gptq_rows(const awq_src *src, int64_t r0, int64_t nr, uint8_t *q, uint16_t *d,
                  uint16_t *m);

#endif
