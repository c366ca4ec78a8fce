/* The engine's own metrics (docs/metrics.md): request outcomes and token counts, the times a
 * request spends queued, in prefill and in decode, the batch and KV-cache gauges, and the
 * preemption, prefix-cache and speculation counters. The engine records them where the facts
 * arise; the HTTP layer records only what a client observes (TTFT, ITL, TPOT, end-to-end
 * latency, responses by status). Internal to core/engine. */
#ifndef WEIR_ENGINE_METRICS_H
#define WEIR_ENGINE_METRICS_H

#include <stdint.h>

#include "engine/engine.h"
#include "metrics/metrics.h"

typedef struct weir__engine_metrics {
  weir_metric *prompt_tokens, *generation_tokens;
  weir_metric *success[6]; /* by weir_finish_reason (index 0 unused) */
  weir_metric *queue, *prefill, *decode;
  weir_metric *preemptions, *prefix_queries, *prefix_hits, *spec_draft, *spec_accepted;
  weir_metric *running, *waiting, *paused, *kv_usage;
  weir_metric *graph_steps, *graph_padding;
  /* Embeddings (engine_embed.c): inputs embedded, their tokens, engine seconds spent. */
  weir_metric *embed_inputs, *embed_tokens, *embed_seconds;
  /* Speculation: drafted and accepted tokens by position (1-based, [0, spec_positions)),
   * drafts per step, seconds spent drafting, the length the policy chose last. */
  weir_metric *spec_pos_draft[64], *spec_pos_accepted[64];
  int32_t spec_positions;
  weir_metric *spec_step_drafts, *spec_seconds, *spec_len;
  weir_metric *spec_draft_passes, *spec_draft_model_tokens; /* draft model only */
  /* The engine's totals when last published: counters grow by the difference. */
  weir_engine_stats last;
} weir__engine_metrics;

/* Registers (or finds, when already registered) every family in m and fills out.
 * WEIR_E_NOMEM. */
int weir__engine_metrics_init(weir_metrics *m, weir__engine_metrics *out);
/* The speculation families, with a series per draft position 1..positions (at most 64).
 * WEIR_E_NOMEM. */
int weir__engine_metrics_spec_init(weir_metrics *m, weir__engine_metrics *out,
                                   int32_t positions);
/* A request ended (engine thread): its outcome, its tokens and its times. */
void weir__engine_metrics_finished(const weir__engine_metrics *em, weir_finish_reason why,
                                   int32_t prompt_tokens, int32_t output_tokens,
                                   const weir_gen_timing *t);
/* The gauges and counters from the engine's totals (engine thread, after a step). */
void weir__engine_metrics_publish(weir__engine_metrics *em, const weir_engine_stats *st);

#endif
