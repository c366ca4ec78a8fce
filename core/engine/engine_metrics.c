#include "engine/engine_metrics.h"

#include <stdio.h>
#include <string.h>

#include "weir/status.h"

/* The API's finish_reason strings, which are also the reason label of the request counters:
 * defined here so that the metrics need nothing from the rest of the engine. */
const char *weir_finish_reason_name(weir_finish_reason r) {
  switch (r) {
  case WEIR_FINISH_NONE: return "none";
  case WEIR_FINISH_STOP: return "stop";
  case WEIR_FINISH_LENGTH: return "length";
  case WEIR_FINISH_ABORT: return "abort";
  case WEIR_FINISH_ERROR: return "error";
  case WEIR_FINISH_TIMEOUT: return "timeout";
  }
  return "?";
}

int weir__engine_metrics_init(weir_metrics *m, weir__engine_metrics *x) {
  memset(x, 0, sizeof *x);
  const struct {
    const char *name, *help;
    weir_metric_type type;
    weir_metric **out;
  } defs[] = {
      {"request_queue_time_seconds", "Time a request waited before it was first scheduled.",
       WEIR_METRIC_HISTOGRAM, &x->queue},
      {"request_prefill_time_seconds", "Time from first scheduling to the first token.",
       WEIR_METRIC_HISTOGRAM, &x->prefill},
      {"request_decode_time_seconds", "Time from the first token to the last.",
       WEIR_METRIC_HISTOGRAM, &x->decode},
      {"prompt_tokens_total", "Prompt tokens of finished requests.", WEIR_METRIC_COUNTER,
       &x->prompt_tokens},
      {"generation_tokens_total", "Generated tokens of finished requests.",
       WEIR_METRIC_COUNTER, &x->generation_tokens},
      {"num_preemptions_total", "Sequences preempted because KV blocks ran out.",
       WEIR_METRIC_COUNTER, &x->preemptions},
      {"step_graph_replays_total",
       "Model steps (target and draft) replayed from a recorded step graph.",
       WEIR_METRIC_COUNTER, &x->graph_steps},
      {"step_graph_padding_total",
       "Padding sequences computed to fit decode steps to a recorded graph's batch size.",
       WEIR_METRIC_COUNTER, &x->graph_padding},
      {"prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
       WEIR_METRIC_COUNTER, &x->prefix_queries},
      {"prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
       WEIR_METRIC_COUNTER, &x->prefix_hits},
      {"spec_decode_num_draft_tokens_total",
       "Speculative tokens proposed by the drafter and verified.", WEIR_METRIC_COUNTER,
       &x->spec_draft},
      {"spec_decode_num_accepted_tokens_total", "Speculative tokens accepted.",
       WEIR_METRIC_COUNTER, &x->spec_accepted},
      {"num_requests_running", "Requests in the running batch.", WEIR_METRIC_GAUGE,
       &x->running},
      {"num_requests_waiting", "Requests waiting to be scheduled.", WEIR_METRIC_GAUGE,
       &x->waiting},
      {"num_requests_paused",
       "Requests paused because their client is not reading (they keep their KV blocks).",
       WEIR_METRIC_GAUGE, &x->paused},
      {"kv_cache_usage_perc", "Fraction (0..1) of KV-cache blocks used by running requests.",
       WEIR_METRIC_GAUGE, &x->kv_usage},
      {"embedding_inputs_total", "Inputs embedded (/v1/embeddings and the response cache).",
       WEIR_METRIC_COUNTER, &x->embed_inputs},
      {"embedding_tokens_total", "Tokens of the inputs embedded.", WEIR_METRIC_COUNTER,
       &x->embed_tokens},
      {"embedding_seconds_total",
       "Seconds the engine thread spent embedding, between generation steps.",
       WEIR_METRIC_COUNTER, &x->embed_seconds},
  };
  int rc = WEIR_OK;
  for (size_t i = 0; i < sizeof defs / sizeof defs[0] && rc == WEIR_OK; i++)
    rc = weir_metrics_register(m, defs[i].name, defs[i].help, defs[i].type, NULL, 0, NULL,
                               defs[i].out);
  for (int i = WEIR_FINISH_STOP; i <= WEIR_FINISH_TIMEOUT && rc == WEIR_OK; i++) {
    char labels[48];
    snprintf(labels, sizeof labels, "finished_reason=\"%s\"",
             weir_finish_reason_name((weir_finish_reason)i));
    rc = weir_metrics_register(m, "request_success_total", "Finished requests, by reason.",
                               WEIR_METRIC_COUNTER, NULL, 0, labels, &x->success[i]);
  }
  return rc;
}

int weir__engine_metrics_spec_init(weir_metrics *m, weir__engine_metrics *x,
                                   int32_t positions) {
  static const double drafts_buckets[] = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  int rc = weir_metrics_register(
      m, "spec_decode_draft_tokens_per_step", "Draft tokens verified per engine step.",
      WEIR_METRIC_HISTOGRAM, drafts_buckets, (int)(sizeof drafts_buckets / sizeof *drafts_buckets),
      NULL, &x->spec_step_drafts);
  if (rc == WEIR_OK)
    rc = weir_metrics_register(m, "spec_decode_draft_seconds_total",
                               "Seconds the engine spent drafting (drafter or draft model).",
                               WEIR_METRIC_COUNTER, NULL, 0, NULL, &x->spec_seconds);
  if (rc == WEIR_OK)
    rc = weir_metrics_register(m, "spec_decode_length",
                               "Drafts per sequence the speculation policy chose for the last "
                               "step (0: none).",
                               WEIR_METRIC_GAUGE, NULL, 0, NULL, &x->spec_len);
  if (rc == WEIR_OK)
    rc = weir_metrics_register(m, "spec_decode_draft_passes_total",
                               "Forward passes of the draft model (0 with another drafter).",
                               WEIR_METRIC_COUNTER, NULL, 0, NULL, &x->spec_draft_passes);
  if (rc == WEIR_OK)
    rc = weir_metrics_register(m, "spec_decode_draft_model_tokens_total",
                               "Tokens the draft model's forward passes computed (its catch-up "
                               "over the target's tokens and the drafts fed back).",
                               WEIR_METRIC_COUNTER, NULL, 0, NULL, &x->spec_draft_model_tokens);
  if (positions > 64) positions = 64;
  x->spec_positions = 0;
  for (int32_t j = 0; j < positions && rc == WEIR_OK; j++) {
    char labels[32];
    snprintf(labels, sizeof labels, "position=\"%d\"", j + 1);
    rc = weir_metrics_register(m, "spec_decode_num_draft_tokens_per_pos_total",
                               "Draft tokens verified, by position in the draft (1 = first).",
                               WEIR_METRIC_COUNTER, NULL, 0, labels, &x->spec_pos_draft[j]);
    if (rc == WEIR_OK)
      rc = weir_metrics_register(m, "spec_decode_num_accepted_tokens_per_pos_total",
                                 "Draft tokens accepted, by position in the draft.",
                                 WEIR_METRIC_COUNTER, NULL, 0, labels, &x->spec_pos_accepted[j]);
    if (rc == WEIR_OK) x->spec_positions = j + 1;
  }
  return rc;
}

int weir_engine_register_metrics(weir_metrics *m) {
  weir__engine_metrics tmp;
  return weir__engine_metrics_init(m, &tmp);
}

void weir__engine_metrics_finished(const weir__engine_metrics *em, weir_finish_reason why,
                                   int32_t prompt_tokens, int32_t output_tokens,
                                   const weir_gen_timing *t) {
  if (!em->prompt_tokens) return; /* not registered */
  if (why >= WEIR_FINISH_STOP && why <= WEIR_FINISH_TIMEOUT)
    weir_metric_add(em->success[why], 1);
  weir_metric_add(em->prompt_tokens, prompt_tokens);
  weir_metric_add(em->generation_tokens, output_tokens);
  if (t->queue_s > 0) weir_metric_record(em->queue, t->queue_s);
  if (t->prefill_s > 0) weir_metric_record(em->prefill, t->prefill_s);
  if (t->decode_s > 0) weir_metric_record(em->decode, t->decode_s);
}

static void grow(weir_metric *m, uint64_t now, uint64_t before) {
  if (now > before) weir_metric_add(m, (double)(now - before));
}

void weir__engine_metrics_publish(weir__engine_metrics *em, const weir_engine_stats *st) {
  if (!em->prompt_tokens) return;
  weir_metric_record(em->running, st->num_running);
  weir_metric_record(em->waiting, st->num_waiting);
  weir_metric_record(em->paused, st->num_paused);
  weir_metric_record(em->kv_usage, st->kv_blocks_total > 0
                                       ? (double)st->kv_blocks_used / st->kv_blocks_total
                                       : 0.0);
  grow(em->preemptions, st->num_preemptions, em->last.num_preemptions);
  grow(em->prefix_queries, st->prefix_queries_tokens, em->last.prefix_queries_tokens);
  grow(em->prefix_hits, st->prefix_hits_tokens, em->last.prefix_hits_tokens);
  grow(em->spec_draft, st->spec_draft_tokens, em->last.spec_draft_tokens);
  grow(em->spec_accepted, st->spec_accepted_tokens, em->last.spec_accepted_tokens);
  grow(em->spec_draft_passes, st->spec_draft_passes, em->last.spec_draft_passes);
  grow(em->spec_draft_model_tokens, st->spec_draft_model_tokens,
       em->last.spec_draft_model_tokens);
  grow(em->graph_steps, st->graph_steps, em->last.graph_steps);
  grow(em->graph_padding, st->graph_padding, em->last.graph_padding);
  em->last = *st;
}
