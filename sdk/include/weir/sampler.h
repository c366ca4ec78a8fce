/* weir SDK: samplers.
 *
 * A sampler turns one row of logits per sequence into the next token, applying in this
 * order: token suppression, repetition / presence / frequency penalties, then (unless
 * temperature is 0, which is greedy) temperature, top-k, top-p and min-p, then a draw from the
 * per-sequence random state. Draws depend only on a sequence's own state, never on which
 * other sequences share the batch, so a seeded request is reproducible.
 * Thread-safety as for device plugins. Since 1.0. */
#ifndef WEIR_SAMPLER_H
#define WEIR_SAMPLER_H

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEIR_MAX_LOGPROBS 20

typedef struct weir_sampling_params {
  uint32_t struct_size;      /* 1.0 */
  float temperature;         /* 0: greedy (argmax, ties to the lowest id). 1.0 */
  int32_t top_k;             /* <= 0: off. 1.0 */
  float top_p;               /* 1: off. 1.0 */
  float min_p;               /* 0: off. 1.0 */
  float repetition_penalty;  /* 1: off; divides positive / multiplies negative logits of
                                tokens seen in prompt or output. 1.0 */
  float presence_penalty;    /* 0: off; subtracted once per token present in output. 1.0 */
  float frequency_penalty;   /* 0: off; subtracted per occurrence in output. 1.0 */
  /* -1: no logprobs; 0: the chosen token's; k in 1..WEIR_MAX_LOGPROBS: also the top k. 1.0 */
  int32_t num_logprobs;
} weir_sampling_params;

/* One sequence's row. Everything is host memory, borrowed for the call, except rng_state,
 * which the sampler advances in place. */
typedef struct weir_sampling_row {
  const weir_sampling_params *params; /* 1.0 */
  uint64_t *rng_state;                /* [4] xoshiro256** state, seeded by core. 1.0 */
  const int32_t *prompt_tokens;       /* 1.0 */
  int32_t num_prompt_tokens;          /* 1.0 */
  const int32_t *output_tokens;       /* tokens generated so far. 1.0 */
  int32_t num_output_tokens;          /* 1.0 */
  const int32_t *suppress_tokens;     /* never sampled (e.g. EOS before min_tokens). 1.0 */
  int32_t num_suppress_tokens;        /* 1.0 */
} weir_sampling_row;

/* One row's result, host memory. logprob is log-softmax of the logits after suppression and
 * penalties, before temperature and truncation (the model's own distribution). */
typedef struct weir_sample_result {
  int32_t token;                              /* 1.0 */
  float logprob;                              /* of `token`. 1.0 */
  int32_t num_top;                            /* entries filled below. 1.0 */
  int32_t top_tokens[WEIR_MAX_LOGPROBS];      /* most likely first. 1.0 */
  float top_logprobs[WEIR_MAX_LOGPROBS];      /* 1.0 */
} weir_sample_result;

typedef struct weir_sampler_ops {
  uint32_t struct_size; /* 1.0 */

  /* Samples one token per row. logits is device f32 [num_rows][vocab] and may be
   * overwritten. out is host [num_rows]. Mandatory, 1.0. */
  int (*sample)(void *self, const weir_sampling_row *rows, int32_t num_rows, float *logits,
                int32_t vocab, weir_sample_result *out);

  /* Writes to probs (host [num_rows][vocab]) the distribution sample() draws from, after
   * every transformation (greedy: one-hot). Used by speculative verification. Optional,
   * 1.0. */
  int (*probs)(void *self, const weir_sampling_row *rows, int32_t num_rows, float *logits,
               int32_t vocab, float *probs);
} weir_sampler_ops;

/* Whether one row is well formed for a sampler call: params present; temperature a number
 * >= 0; num_logprobs at most WEIR_MAX_LOGPROBS; repetition_penalty 1 or > 0; every count
 * above 0 backed by its array; and, when need_rng (a sample() call, which draws for rows with
 * temperature > 0), an rng_state. A sampler answers WEIR_E_INVAL for a batch with a row that
 * fails. The one check every shipped sampler uses; pure, thread-safe. Since 1.1. */
static inline int weir_sampling_row_valid(const weir_sampling_row *r, int need_rng) {
  const weir_sampling_params *p = r->params;
  if (!p) return 0;
  if (!(p->temperature >= 0.0f)) return 0; /* also NaN */
  if (need_rng && p->temperature > 0.0f && !r->rng_state) return 0;
  if (p->num_logprobs > WEIR_MAX_LOGPROBS) return 0;
  if (p->repetition_penalty != 1.0f && !(p->repetition_penalty > 0.0f)) return 0;
  if ((r->num_prompt_tokens > 0 && !r->prompt_tokens) ||
      (r->num_output_tokens > 0 && !r->output_tokens) ||
      (r->num_suppress_tokens > 0 && !r->suppress_tokens))
    return 0;
  return 1;
}

#ifdef __cplusplus
}
#endif
#endif
