/* A request on the engine thread: its events, its end, its sampling row, and the stats the
 * engine publishes (engine_internal.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "util/log.h"

double weir__engine_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void weir__engine_req_free(engine_req *r) {
  if (!r) return;
  weir_stop_free(&r->stop);
  weir_matcher_free(r->matcher);
  if (r->detok.tok) weir_detok_free(&r->detok);
  free(r->stop_ids);
  free(r->bias_tokens);
  free(r->bias_values);
  free(r->prompt);
  free(r->plp);
  free(r);
}

void weir__engine_live_add(weir_engine *e, engine_req *r) {
  r->live_prev = NULL;
  r->live_next = e->live;
  if (e->live) e->live->live_prev = r;
  e->live = r;
}

static void live_remove(weir_engine *e, engine_req *r) {
  if (r->live_prev) r->live_prev->live_next = r->live_next;
  else e->live = r->live_next;
  if (r->live_next) r->live_next->live_prev = r->live_prev;
  r->live_prev = r->live_next = NULL;
}

void weir__engine_fill_usage(const engine_req *r, weir_gen_event *ev) {
  ev->request_id = r->id;
  ev->prompt_tokens = r->num_prompt;
  ev->cached_tokens = r->seq ? r->seq->num_cached_prompt : 0;
  ev->completion_tokens = r->num_output;
  ev->num_preemptions = r->seq ? r->seq->num_preemptions : 0;
}


/* The stats are published before the event, so whoever sees the request end also sees its
 * blocks freed. */
void weir__engine_req_finish(weir_engine *e, engine_req *r, weir_finish_reason why, int status,
                             const char *error, const char *tail, size_t tail_len) {
  double t = weir__engine_now();
  weir_gen_event ev = {0};
  weir__engine_fill_usage(r, &ev);
  ev.text = tail ? tail : "";
  ev.text_len = tail ? tail_len : 0;
  ev.finish = why;
  if (why == WEIR_FINISH_STOP && r->stop.stopped && r->stop.which >= 0 &&
      r->stop.which < r->stop.num_stops)
    ev.stop_string = r->stop.stops[r->stop.which];
  ev.status = status;
  ev.error = error;
  ev.timing.e2e_s = t - r->t_arrival;
  ev.timing.queue_s = r->t_sched > 0 ? r->t_sched - r->t_arrival : t - r->t_arrival;
  ev.timing.ttft_s = r->t_first > 0 ? r->t_first - r->t_arrival : 0;
  ev.timing.prefill_s = r->t_first > 0 && r->t_sched > 0 ? r->t_first - r->t_sched : 0;
  ev.timing.decode_s = r->t_first > 0 ? t - r->t_first : 0;
  if (r->seq) {
    weir_sched_seq_free(e->sched, r->seq);
    r->seq = NULL;
  }
  live_remove(e, r);
  weir__engine_publish_stats(e);
  weir__engine_metrics_finished(&e->em, why, r->num_prompt, r->num_output, &ev.timing);
  r->cb(r->user, &ev);
  weir__engine_req_free(r);
}

/* Ends a request whose text may still hold a stop-string prefix: releases it first. */
void weir__engine_req_finish_flush(weir_engine *e, engine_req *r, weir_finish_reason why) {
  const char *t1, *t2;
  size_t n1, n2;
  weir_detok_flush(&r->detok, &t1, &n1);
  const char *emit;
  size_t emit_len;
  int stopped = weir_stop_feed(&r->stop, t1, n1, &emit, &emit_len);
  if (stopped == 1) {
    weir__engine_req_finish(e, r, WEIR_FINISH_STOP, 0, NULL, emit, emit_len);
    return;
  }
  /* The text handed out by feed stays valid across flush: copy it first. */
  char *buf = malloc(emit_len + 1);
  if (buf) memcpy(buf, emit, emit_len);
  size_t n = buf ? emit_len : 0;
  weir_stop_flush(&r->stop, &t2, &n2);
  char *all = buf ? realloc(buf, n + n2 + 1) : NULL;
  if (all) {
    memcpy(all + n, t2, n2);
    n += n2;
  }
  weir__engine_req_finish(e, r, why, 0, NULL, all ? all : "", all ? n : 0);
  free(all ? all : buf);
}

int weir__engine_is_in(const int32_t *ids, int32_t n, int32_t tok) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] == tok) return 1;
  return 0;
}

/* Handles one sampled token: emits its text and decides whether the request ends. Returns 1
 * when the request was finished (and freed). */
int weir__engine_req_on_token(weir_engine *e, engine_req *r, const weir_sample_result *res) {
  const int32_t tok = res->token;
  const double t = weir__engine_now();
  if (r->t_first == 0) r->t_first = t;
  r->num_output++;
  e->step_tokens++;
  const int can_stop = r->num_output > r->min_tokens;
  if (can_stop && ((!r->ignore_eos && weir__engine_is_in(e->eog_ids, e->num_eog, tok)) ||
                   weir__engine_is_in(r->stop_ids, r->num_stop_ids, tok))) {
    weir__engine_req_finish_flush(e, r, WEIR_FINISH_STOP);
    return 1;
  }
  const char *piece;
  size_t piece_len;
  int rc = weir_detok_feed(&r->detok, tok, &piece, &piece_len);
  if (rc != WEIR_OK) {
    weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "detokenization failed", NULL, 0);
    return 1;
  }
  const char *emit;
  size_t emit_len;
  int stopped = weir_stop_feed(&r->stop, piece, piece_len, &emit, &emit_len);
  if (stopped < 0) {
    weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, stopped, "out of memory", NULL, 0);
    return 1;
  }
  weir_gen_event ev = {0};
  weir__engine_fill_usage(r, &ev);
  ev.tokens = &res->token;
  ev.num_tokens = 1;
  ev.logprobs = r->sampling.num_logprobs >= 0 ? res : NULL;
  if (stopped == 1) {
    /* The token that completed a stop string ends the request; its text before the stop
     * string goes out with the final event. */
    weir__engine_req_finish(e, r, WEIR_FINISH_STOP, 0, NULL, emit, emit_len);
    return 1;
  }
  ev.text = emit;
  ev.text_len = emit_len;
  const int at_length = r->num_output >= r->max_tokens ||
                        (r->seq && r->seq->num_tokens + 1 > e->ctx_len);
  if (at_length) {
    /* Deliver this token's event, then the final one with the held-back tail. */
    r->cb(r->user, &ev);
    weir__engine_req_finish_flush(e, r, WEIR_FINISH_LENGTH);
    return 1;
  }
  r->cb(r->user, &ev);
  return 0;
}

void weir__engine_publish_stats(weir_engine *e) {
  weir_kv_stats ks;
  weir_sched_stats ss;
  weir_kv_cache_stats(e->kv, &ks);
  weir_sched_stats_get(e->sched, &ss);
  pthread_mutex_lock(&e->lock);
  e->stats.num_running = ss.num_running;
  e->stats.num_waiting = ss.num_waiting + e->num_incoming;
  e->stats.num_paused = ss.num_paused;
  e->stats.kv_blocks_total = ks.num_blocks;
  e->stats.kv_blocks_used = ks.used_blocks;
  e->stats.kv_blocks_cached = ks.cached_blocks;
  e->stats.prefix_queries_tokens = ks.prefix_queries_tokens;
  e->stats.prefix_hits_tokens = ks.prefix_hits_tokens;
  e->stats.num_preemptions = ss.num_preemptions;
  e->stats.num_steps = ss.num_steps;
  e->stats.spec_draft_tokens = e->spec_drafted;
  e->stats.spec_accepted_tokens = e->spec_accepted;
  e->stats.spec_draft_passes = e->spec_draft_passes;
  e->stats.spec_draft_model_tokens = e->spec_draft_model_tokens;
  weir_llama_graph_stats gs = {0};
  if (e->model) weir_llama_graph_stats_get(e->model, &gs);
  e->stats.graph_steps = gs.replayed;
  e->stats.graph_padding = gs.padded;
  if (e->draft) {
    weir_llama_graph_stats_get(e->draft, &gs);
    e->stats.graph_steps += gs.replayed;
    e->stats.graph_padding += gs.padded;
  }
  weir_engine_stats snap = e->stats;
  pthread_mutex_unlock(&e->lock);
  weir__engine_metrics_publish(&e->em, &snap);
}

/* Draws an index from non-negative weights; `fallback` when they sum to zero. */
int32_t weir__engine_draw_from(const float *w, int32_t n, double u, int32_t fallback) {
  double sum = 0;
  for (int32_t i = 0; i < n; i++) sum += w[i];
  if (!(sum > 0)) return fallback;
  double target = u * sum, acc = 0;
  int32_t last = fallback;
  for (int32_t i = 0; i < n; i++) {
    if (w[i] <= 0) continue;
    acc += w[i];
    last = i;
    if (acc > target) return i;
  }
  return last;
}

/* Row k of the suppression scratch: room for every end-of-generation token and the most stop
 * token ids a request may give. */
int32_t *weir__engine_suppress_row(weir_engine *e, int32_t k) {
  return e->suppress + (size_t)k * (size_t)(e->num_eog + WEIR_MAX_STOP_TOKEN_IDS);
}

/* The sampling row of request r as if `extra` more output tokens (accepted drafts) had been
 * appended; `sup` receives the tokens to suppress (EOS and stop ids before min_tokens). */
weir_sampling_row weir__engine_make_row(weir_engine *e, engine_req *r, int32_t extra,
                                        int32_t *sup) {
  const weir_sched_seq *s = r->seq;
  int32_t nsup = 0;
  /* ignore_eos under a constraint: no end token while the constraint can still continue, so
   * the output goes on to max_tokens or to where the constraint forces its end (without this
   * the constraint's own EOS ended it). */
  const int eos_off = r->ignore_eos && r->matcher && weir_matcher_can_continue(r->matcher);
  if (r->num_output + extra < r->min_tokens || eos_off) {
    if (!r->ignore_eos || eos_off)
      for (int32_t k = 0; k < e->num_eog; k++) sup[nsup++] = e->eog_ids[k];
    if (r->num_output + extra < r->min_tokens)
      for (int32_t k = 0; k < r->num_stop_ids; k++) sup[nsup++] = r->stop_ids[k];
  }
  const int32_t num_out = s->num_tokens - s->num_drafts - s->num_prompt + extra;
  return (weir_sampling_row){.params = &r->sampling,
                             .rng_state = r->rng,
                             .prompt_tokens = s->tokens,
                             .num_prompt_tokens = s->num_prompt,
                             .output_tokens = s->tokens + s->num_prompt,
                             .num_output_tokens = num_out,
                             .suppress_tokens = sup,
                             .num_suppress_tokens = nsup};
}

