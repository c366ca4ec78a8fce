/* weir SDK: speculative drafters.
 *
 * A drafter proposes up to k next tokens for each sequence; the engine scores them with the
 * target model in one step and accepts by the rejection-sampling rule, so the output
 * distribution is the target's whatever the drafter proposes. Thread-safety as for device
 * plugins. Since 1.0. */
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
} weir_drafter_ops;

#ifdef __cplusplus
}
#endif
#endif
