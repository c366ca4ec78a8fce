/* Host arrays of one forward pass (see runtime.h, "Batches"). */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cache.h"
#include "runtime/runtime.h"

int weir_step_batch_init(weir_step_batch *b, int32_t max_tokens, int32_t max_seqs,
                         int32_t max_rows, int32_t max_stride) {
  memset(b, 0, sizeof *b);
  if (max_tokens <= 0 || max_seqs <= 0 || max_rows < 0 || max_stride <= 0) return WEIR_E_INVAL;
  const size_t T = (size_t)max_tokens, S = (size_t)max_seqs, I = sizeof(int32_t);
  b->tokens = malloc(T * I);
  b->positions = malloc(T * I);
  b->slots = malloc(T * I);
  b->query_start_loc = malloc((S + 1) * I);
  b->context_lens = malloc(S * I);
  b->block_tables = malloc(S * (size_t)max_stride * I);
  b->logit_rows = malloc((max_rows > 0 ? (size_t)max_rows : 1) * I);
  if (!b->tokens || !b->positions || !b->slots || !b->query_start_loc || !b->context_lens ||
      !b->block_tables || !b->logit_rows) {
    weir_step_batch_free(b);
    return WEIR_E_NOMEM;
  }
  b->max_tokens = max_tokens;
  b->max_seqs = max_seqs;
  b->max_rows = max_rows;
  b->max_stride = max_stride;
  weir_step_batch_reset(b, max_stride);
  return WEIR_OK;
}

void weir_step_batch_free(weir_step_batch *b) {
  if (!b) return;
  free(b->tokens);
  free(b->positions);
  free(b->slots);
  free(b->query_start_loc);
  free(b->context_lens);
  free(b->block_tables);
  free(b->logit_rows);
  memset(b, 0, sizeof *b);
}

void weir_step_batch_reset(weir_step_batch *b, int32_t stride) {
  b->num_tokens = b->num_seqs = b->num_rows = 0;
  b->stride = stride > 0 && stride <= b->max_stride ? stride : b->max_stride;
  if (b->query_start_loc) b->query_start_loc[0] = 0;
}

int weir_step_batch_add(weir_step_batch *b, const weir_kv_cache *kv, const weir_kv_seq *seq,
                        const int32_t *tokens, int32_t start, int32_t n) {
  int32_t nb = 0;
  const int32_t *table = weir_kv_seq_block_table(seq, &nb);
  if (n < 0 || (n > 0 && !tokens) || b->num_seqs >= b->max_seqs ||
      n > b->max_tokens - b->num_tokens || nb > b->stride)
    return WEIR_E_RANGE;
  const int32_t at = b->num_tokens, s = b->num_seqs;
  int rc = weir_kv_seq_slots(kv, seq, start, n, b->slots + at);
  if (rc != WEIR_OK) return rc;
  memcpy(b->tokens + at, tokens, sizeof(int32_t) * (size_t)n);
  for (int32_t i = 0; i < n; i++) b->positions[at + i] = start + i;
  int32_t *dst = b->block_tables + (size_t)s * (size_t)b->stride;
  memcpy(dst, table, sizeof(int32_t) * (size_t)nb);
  memset(dst + nb, 0, sizeof(int32_t) * (size_t)(b->stride - nb));
  b->context_lens[s] = start + n;
  b->num_tokens = at + n;
  b->num_seqs = s + 1;
  b->query_start_loc[s + 1] = b->num_tokens;
  return WEIR_OK;
}

int weir_step_batch_add_rows(weir_step_batch *b, int32_t first, int32_t n) {
  if (first < 0 || n < 0 || first > b->num_tokens - n || n > b->max_rows - b->num_rows)
    return WEIR_E_RANGE;
  for (int32_t i = 0; i < n; i++) b->logit_rows[b->num_rows++] = first + i;
  return WEIR_OK;
}

weir_llama_batch weir_step_batch_view(const weir_step_batch *b) {
  return (weir_llama_batch){.num_tokens = b->num_tokens,
                            .tokens = b->tokens,
                            .positions = b->positions,
                            .num_seqs = b->num_seqs,
                            .query_start_loc = b->query_start_loc,
                            .context_lens = b->context_lens,
                            .block_tables = b->block_tables,
                            .max_blocks_per_seq = b->stride,
                            .slot_mapping = b->slots,
                            .num_logit_rows = b->num_rows,
                            .logit_rows = b->logit_rows};
}
