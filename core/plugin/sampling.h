/* Calling a sampler plugin with the ABI 1.1 sampling parameters (allowed-token masks and
 * logit bias) and the 1.2 prompt scoring, whatever the plugin supports.
 *
 * A sampler declares in weir_sampler_ops.caps which 1.1 parameters it applies itself. For a
 * row that carries a parameter the sampler does not declare (every 1.0 sampler declares
 * none), the host applies it here before the call: the row's logits are brought to the host
 * through the device plugin's copies, biased and masked (a disallowed token gets -inf, which
 * every sampler already treats as "never drawn"), copied back, and the sampler receives a
 * copy of the row whose params no longer carry the parameter, so nothing is applied twice.
 * A constrained request therefore holds with any sampler; a sampler that declares the caps
 * saves the two copies of each constrained row.
 *
 * The engine keeps one weir_sampler_call per sampler instance and calls it from its thread
 * only (not thread-safe). */
#ifndef WEIR_PLUGIN_SAMPLING_H
#define WEIR_PLUGIN_SAMPLING_H

#include <stdint.h>

#include "plugin/loader.h"
#include "weir/sampler.h"

/* The WEIR_SAMPLER_CAP_* bits a loaded sampler declares: 0 for a 1.0 sampler, whose ops are
 * too small to hold the field. */
uint64_t weir_sampler_caps(const weir_plugin *sampler);

typedef struct weir_sampler_call {
  const weir_plugin *sampler; /* borrowed */
  const weir_plugin *device;  /* borrowed; NULL: logits are host memory */
  uint64_t caps;
  /* Scratch for the fallback, grown on demand and kept. */
  weir_sampling_row *rows;
  weir_sampling_params *params;
  int32_t rows_cap;
  float *host_logits;
  size_t host_cap; /* floats */
} weir_sampler_call;

/* Prepares calls to `sampler` whose logits live on `device` (its copy_d2h / copy_h2d move
 * them; NULL when the logits are host memory). Never fails. */
void weir_sampler_call_init(weir_sampler_call *c, const weir_plugin *sampler,
                            const weir_plugin *device);
/* Frees the scratch; accepts a zeroed object. */
void weir_sampler_call_free(weir_sampler_call *c);

/* ops->sample (resp. ops->probs) with the fallback described above. Same arguments, results
 * and errors as the sampler's own call, plus WEIR_E_NOMEM for the scratch, WEIR_E_INVAL for
 * a row whose bias pointers are missing, WEIR_E_NOTSUP for probs on a sampler without it, and
 * the device's status when a copy fails. logits may be modified (as the sampler may). */
int weir_sampler_call_sample(weir_sampler_call *c, const weir_sampling_row *rows,
                             int32_t num_rows, float *logits, int32_t vocab,
                             weir_sample_result *out);
int weir_sampler_call_probs(weir_sampler_call *c, const weir_sampling_row *rows,
                            int32_t num_rows, float *logits, int32_t vocab, float *probs);

/* ops->score (ABI 1.2: prompt logprobs) when the sampler has it, else the same result computed
 * here with weir_sampler_score_row over host copies of the rows (the device plugin's d2h copy
 * when logits live on a device). Same arguments and errors as the op, plus WEIR_E_NOMEM and a
 * failed copy's status. */
int weir_sampler_call_score(weir_sampler_call *c, const float *logits, int32_t num_rows,
                            int32_t vocab, const int32_t *tokens, int32_t num_top,
                            weir_sample_result *out);

#endif
