/* What the CPU and CUDA awq_int4 plugins share besides the search itself: the option table,
 * the settings it resolves to, and the preparation of a group of weights (scale search, then
 * the clipping samples or the error-compensation factor). See docs/quant-awq.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "awq_int4.h"

const weir_option_desc awq_options[] = {
    {.key = "group_size", .type = WEIR_OPT_INT, .def_int = 128, .min = 32,
     .max = 128,
     .help = "input columns per 4-bit scale and offset: 32, 64 or 128 (Q4_0/Q4_1 "
             "sources keep their blocks of 32 unless whole groups share them)"},
    {.key = "calibration", .type = WEIR_OPT_BOOL, .def_bool = 1,
     .help = "ask for a calibration pass and search activation-aware scales "
             "(false: plain round-to-nearest, the RTN baseline)"},
    {.key = "calibration_samples", .type = WEIR_OPT_INT, .def_int = 512,
     .min = 8, .max = 1 << 20,
     .help = "activation samples (tokens) per layer to ask for"},
    {.key = "search_samples", .type = WEIR_OPT_INT, .def_int = 128,
     .min = 1, .max = 1 << 20,
     .help = "samples the scale search evaluates (evenly spaced subset)"},
    {.key = "search_rows", .type = WEIR_OPT_INT, .def_int = 1024, .min = 1,
     .max = 1 << 30,
     .help = "output rows the scale search evaluates per group of weights"},
    {.key = "clip_search", .type = WEIR_OPT_BOOL, .def_bool = 1,
     .help = "with calibration and gptq = false: also search a clipping ratio "
             "(1 to 0.5) per row and group"},
    {.key = "clip_samples", .type = WEIR_OPT_INT, .def_int = 32, .min = 1,
     .max = 1 << 20,
     .help = "samples the clipping search evaluates"},
    {.key = "gptq", .type = WEIR_OPT_BOOL, .def_bool = 1,
     .help = "with calibration: round with error compensation on the samples "
             "(GPTQ) after the scale search, instead of to nearest"},
    {.key = "gptq_damp", .type = WEIR_OPT_FLOAT, .def_float = 0.01,
     .min = 0.0, .max = 10.0,
     .help = "damping of the error compensation, a fraction of the samples' "
             "mean squared activation"},
};

_Static_assert(sizeof awq_options / sizeof awq_options[0] == AWQ_NUM_OPTIONS,
               "AWQ_NUM_OPTIONS must count awq_options");

/* Where each option lands in awq_plugin: read by key, so the table above may be reordered
 * freely. */
static const weir_option_bind k_binds[] = {
    WEIR_OPTION_BIND_INT(awq_plugin, group, "group_size"),
    WEIR_OPTION_BIND_BOOL(awq_plugin, calibration, "calibration"),
    WEIR_OPTION_BIND_INT(awq_plugin, calib_samples, "calibration_samples"),
    WEIR_OPTION_BIND_INT(awq_plugin, search_samples, "search_samples"),
    WEIR_OPTION_BIND_INT(awq_plugin, search_rows, "search_rows"),
    WEIR_OPTION_BIND_BOOL(awq_plugin, clip, "clip_search"),
    WEIR_OPTION_BIND_INT(awq_plugin, clip_samples, "clip_samples"),
    WEIR_OPTION_BIND_BOOL(awq_plugin, gptq, "gptq"),
    WEIR_OPTION_BIND_FLOAT(awq_plugin, gptq_damp, "gptq_damp"),
};

int awq_plugin_set(awq_plugin *p, const weir_host *host) {
  memset(p, 0, sizeof *p);
  weir_cpu_quant_init(&p->base, host, "awq_int4");
  return weir_options_read(host, k_binds, (int)(sizeof k_binds / sizeof k_binds[0]), p);
}

void awq_prep_free(awq_prep *pp) {
  free(pp->s);
  free(pp->xc);
  free(pp->gt);
  memset(pp, 0, sizeof *pp);
}

int awq_prepare(const awq_plugin *p, const weir_quant_pack_args *const *args, int n,
                int64_t cols, awq_prep *pp) {
  const weir_quant_pack_args *a0 = args[0];
  memset(pp, 0, sizeof *pp);
  int rc = WEIR_E_NOMEM;
  pp->s = malloc(sizeof(float) * (size_t)cols);
  if (!pp->s) goto fail;
  if ((rc = awq_search_scale(p, args, n, pp->s, &pp->res)) != WEIR_OK) goto fail;
  if (p->gptq) {
    rc = awq_gptq_factor(p, a0->act_samples, a0->num_samples, cols, pp->s, p->gptq_damp,
                         &pp->gt);
    if (rc == WEIR_E_NOTSUP) pp->gptq_skipped = 1;
    else if (rc != WEIR_OK) goto fail;
  } else if (p->clip) {
    const int64_t nc = a0->num_samples < p->clip_samples ? a0->num_samples : p->clip_samples;
    rc = WEIR_E_NOMEM;
    pp->xc = malloc(sizeof(float) * (size_t)(nc * cols));
    if (!pp->xc) goto fail;
    pp->nc = nc;
    /* Per group, [nc][n] contiguous (the GEMM's activations): group gi at gi * nc * group. */
    for (int64_t t = 0; t < nc; t++) {
      const float *x = a0->act_samples + (t * a0->num_samples / nc) * cols;
      for (int64_t g0 = 0; g0 < cols; g0 += p->group) {
        const int64_t gn = cols - g0 < p->group ? cols - g0 : p->group;
        for (int64_t k = 0; k < gn; k++) pp->xc[g0 * nc + t * gn + k] = x[g0 + k] / pp->s[g0 + k];
      }
    }
  }
  return WEIR_OK;
fail:
  awq_prep_free(pp);
  return rc;
}
