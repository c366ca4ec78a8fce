/* weir SDK: samplers.
 *
 * A sampler turns one row of logits per sequence into the next token, applying in this
 * order: logit bias (1.1), token suppression and the allowed-token mask (1.1), repetition /
 * presence / frequency penalties, then (unless temperature is 0, which is greedy)
 * temperature, top-k, top-p and min-p, then a draw from the per-sequence random state. Draws
 * depend only on a sequence's own state, never on which other sequences share the batch, so a
 * seeded request is reproducible. Thread-safety as for device plugins. Since 1.0.
 *
 * Constraints (since 1.1). Structured output (JSON Schema, regex, grammar) reaches a sampler
 * as weir_sampling_params.allowed, a bitmask of the tokens the row may produce, and OpenAI's
 * logit_bias as weir_sampling_params.logit_bias_*. Both live in weir_sampling_params rather
 * than weir_sampling_row because a row is an array element without a struct_size: growing it
 * would change the stride a 1.0 sampler indexes the array with, while params is reached
 * through a pointer and begins with its struct_size. A sampler that applies them itself says
 * so in weir_sampler_ops.caps; for one that does not (every 1.0 sampler), the host applies
 * them to the logits before the call and hands the sampler rows without them, so a constraint
 * holds whichever sampler is configured (docs/plugin-guide.md, "Samplers: masks and logit
 * bias"). */
#ifndef WEIR_SAMPLER_H
#define WEIR_SAMPLER_H

#include <math.h>

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEIR_MAX_LOGPROBS 20

/* Words of an allowed-token mask for a vocabulary of `vocab` tokens. Since 1.1. */
#define WEIR_MASK_WORDS(vocab) (((size_t)(vocab) + 31u) / 32u)

/* 1 when token t is set in an allowed-token mask: bit (t % 32) of word t / 32. Since 1.1. */
static inline int weir_mask_test(const uint32_t *mask, int32_t t) {
  return (int)((mask[(uint32_t)t >> 5] >> ((uint32_t)t & 31u)) & 1u);
}

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

  /* ---- Since 1.1: read only when struct_size covers the field (WEIR_SAMPLING_HAS). A host
   * hands these to a sampler only when its weir_sampler_ops.caps declares them. ---- */

  /* OpenAI's logit_bias: before anything else, logit[logit_bias_tokens[i]] +=
   * logit_bias_values[i] for i < num_logit_bias (an id outside [0, vocab) is ignored; an id
   * listed twice gets both). The reported logprobs include the bias. Host memory, borrowed
   * for the call; both NULL when num_logit_bias is 0. 1.1 */
  const int32_t *logit_bias_tokens;
  const float *logit_bias_values;
  int32_t num_logit_bias;
  /* The tokens this row may produce (a structured-output constraint): a host bitmask of
   * WEIR_MASK_WORDS(vocab) words (weir_mask_test). A token whose bit is 0 is treated exactly
   * like a suppressed one: its logit becomes -inf, so it is never drawn, has probability 0 in
   * probs() and logprob -inf. NULL: every token. Borrowed for the call. The engine gives each
   * constrained row its own params with its own mask, and never a mask with no bit set. 1.1 */
  const uint32_t *allowed;
} weir_sampling_params;

/* 1 when params `p` (a weir_sampling_params *) is large enough to hold `field`
 * (WEIR_HAS_FIELD for this struct). Since 1.1. */
#define WEIR_SAMPLING_HAS(p, field) WEIR_HAS_FIELD(p, weir_sampling_params, field)

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

/* One row's result, host memory. logprob is log-softmax of the logits after logit bias,
 * suppression, the allowed mask and penalties, before temperature and truncation (the model's
 * own distribution as the request shaped it). The top list holds only tokens that can be
 * produced (finite logprob), so it may be shorter than asked when a mask allows few. */
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

  /* WEIR_SAMPLER_CAP_* bits: the 1.1 parameters this sampler applies itself, in sample() and
   * probs() alike. The host reads caps only when struct_size covers it (a 1.0 sampler has
   * none). For a capability the sampler lacks, the host applies that parameter to the logits
   * before the call (bias added, disallowed tokens set to -inf) and passes params without it,
   * so declaring a capability is an optimisation and a promise, never a requirement.
   * Rebuilding a 1.0 sampler against 1.1 headers leaves caps 0: it keeps working, and the
   * host keeps applying constraints for it. 1.1 */
  uint64_t caps;

  /* Prompt logprobs (OpenAI's `echo` with `logprobs`): for each row i, out[i].token =
   * tokens[i], out[i].logprob = the log-softmax of logits row i at tokens[i], and the
   * num_top (0..WEIR_MAX_LOGPROBS) most likely tokens with theirs, most likely first, ties to
   * the lower id: the model's own distribution, with no bias, penalty, mask or temperature.
   * weir_sampler_score_row is the reference. logits is device f32 [num_rows][vocab], read
   * only; tokens and out are host [num_rows]. WEIR_E_INVAL for a token outside [0, vocab) or
   * num_top out of range. Optional: when NULL the host copies the rows to host memory and
   * applies weir_sampler_score_row itself. 1.2 */
  int (*score)(void *self, const float *logits, int32_t num_rows, int32_t vocab,
               const int32_t *tokens, int32_t num_top, weir_sample_result *out);
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
  if (WEIR_SAMPLING_HAS(p, num_logit_bias) &&
      (p->num_logit_bias < 0 ||
       (p->num_logit_bias > 0 && (!p->logit_bias_tokens || !p->logit_bias_values))))
    return 0;
  return 1;
}

/* The num_top best entries of x[0, vocab) (at most WEIR_MAX_LOGPROBS), most likely first,
 * ties to the lower id, as log-probabilities x[i] - lse. -inf and NaN entries are never
 * listed, so fewer may come back; returns how many. Pure, thread-safe. Since 1.2. */
static inline int32_t weir_sampler_top_logprobs(const float *x, int32_t vocab, int32_t num_top,
                                                double lse, int32_t *ids, float *lps) {
  int32_t have = 0;
  if (num_top > WEIR_MAX_LOGPROBS) num_top = WEIR_MAX_LOGPROBS;
  for (int32_t i = 0; num_top > 0 && i < vocab; i++) {
    const float v = x[i];
    if (!(v > -INFINITY)) continue;
    /* Strictly better than the last kept entry (a later id never wins a tie). */
    if (have == num_top && !(v > x[ids[have - 1]])) continue;
    int32_t j = have < num_top ? have++ : num_top - 1;
    while (j > 0 && v > x[ids[j - 1]]) {
      ids[j] = ids[j - 1];
      j--;
    }
    ids[j] = i;
  }
  for (int32_t i = 0; i < have; i++) lps[i] = (float)((double)x[ids[i]] - lse);
  return have;
}

/* weir_sampler_ops.score for one row of host logits: the reference the host falls back to.
 * The log-partition is accumulated in double. WEIR_E_INVAL for a token outside [0, vocab) or
 * num_top outside 0..WEIR_MAX_LOGPROBS. Pure, thread-safe. Since 1.2. */
static inline int weir_sampler_score_row(const float *row, int32_t vocab, int32_t token,
                                         int32_t num_top, weir_sample_result *out) {
  if (token < 0 || token >= vocab || num_top < 0 || num_top > WEIR_MAX_LOGPROBS)
    return WEIR_E_INVAL;
  float mx = -INFINITY;
  for (int32_t i = 0; i < vocab; i++)
    if (row[i] > mx) mx = row[i];
  double sum = 0.0;
  if (mx > -INFINITY)
    for (int32_t i = 0; i < vocab; i++) sum += exp((double)row[i] - (double)mx);
  const double lse = mx > -INFINITY ? (double)mx + log(sum) : (double)-INFINITY;
  out->token = token;
  out->logprob = (float)((double)row[token] - lse);
  out->num_top = weir_sampler_top_logprobs(row, vocab, num_top, lse, out->top_tokens,
                                           out->top_logprobs);
  return WEIR_OK;
}

/* weir_sampler_ops.caps bits. Since 1.1. */
#define WEIR_SAMPLER_CAP_ALLOWED 0x1ull    /* honours weir_sampling_params.allowed */
#define WEIR_SAMPLER_CAP_LOGIT_BIAS 0x2ull /* honours weir_sampling_params.logit_bias_* */

#ifdef __cplusplus
}
#endif
#endif
