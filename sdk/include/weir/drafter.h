/* weir SDK: speculative drafters.
 *
 * A drafter proposes up to k next tokens for each sequence; the engine scores them with the
 * target model in one step and accepts by the rejection-sampling rule, so the output
 * distribution is the target's whatever the drafter proposes. Thread-safety as for device
 * plugins. Since 1.0; 1.3 added draft models (model_path); 1.8 a default length
 * (num_tokens_default). */
#ifndef WEIR_DRAFTER_H
#define WEIR_DRAFTER_H

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sequence: its whole history (prompt then output), host memory, borrowed. */
typedef struct weir_draft_seq {
  uint64_t seq_id;        /* stable for the life of the sequence. 1.0 */
  const int32_t *tokens;  /* 1.0 */
  int32_t num_tokens;     /* 1.0 */
} weir_draft_seq;

typedef struct weir_drafter_ops {
  uint32_t struct_size; /* 1.0 */

  /* For each sequence s proposes num_drafted[s] <= k tokens into draft_tokens[s * k ...].
   * draft_probs, when not NULL, receives the drafter's probability of each proposed token
   * ([num_seqs][k]); a deterministic drafter writes 1. All arrays host. Mandatory, 1.0. */
  int (*propose)(void *self, const weir_draft_seq *seqs, int32_t num_seqs, int32_t k,
                 int32_t *draft_tokens, int32_t *num_drafted, float *draft_probs);

  /* The sequence has finished; drop any state kept for it. Optional, 1.0. */
  void (*release_seq)(void *self, uint64_t seq_id);

  /* Draft-model drafters. Optional, since 1.3. The path of a GGUF model the host is to run
   * as the drafter (the plugin's own option), or NULL for none; asked once, after init; the
   * string must live until fini. The host loads that model through the same device,
   * attention and quant plugins as the target, refuses it when its tokenizer differs from
   * the target's, keeps its KV in its own group of the shared paged pool (same block ids as
   * the target's, so preemption, prefix caching and aborts cover it), and then drafts for
   * every decode sequence itself, in one batched forward per drafted position: each draft
   * token is drawn from the draft model's distribution under the request's own sampling
   * parameters (the sampler's probs), and the target verifies it against that distribution,
   * so any temperature stays exact. propose is then not called; a host older than 1.3 never
   * asks and calls propose, so such a plugin should propose nothing there. */
  const char *(*model_path)(void *self);

  /* The drafts per step the host asks for when the configuration leaves
   * num_speculative_tokens at 0 ("the drafter's default"): the length at which this drafter
   * pays best where its drafts are accepted (the host's adaptive policy still picks the
   * length per batch size, up to this). 0: the host's own default (4). Optional (0), since
   * 1.8: a drafter whose drafts cost little to make and that is often right for long
   * stretches (prompt lookup: ngram answers 16) gains from a longer cap. */
  int32_t num_tokens_default;
} weir_drafter_ops;

#ifdef __cplusplus
}
#endif
#endif
