/* The engine thread: admits requests, runs scheduler steps through the model, samples, and
 * turns tokens into events. See engine.h for the threading contract. */
#include "engine/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "engine/scheduler.h"
#include "engine/stop.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "engine/engine_metrics.h"
#include "engine/service.h"
#include "engine/spec_policy.h"
#include "grammar/grammar.h"
#include "metrics/metrics.h"
#include "model/calib.h"
#include "template/chat_template.h"
#include "format/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
#include "plugin/sampling.h"
#include "util/log.h"
#include "util/progress.h"
#include "weir/drafter.h"
#include "weir/rng.h"
#include "weir/sampler.h"

#define LOG_COMPONENT "engine"

typedef struct engine_req {
  uint64_t id;
  weir_gen_event_cb cb;
  void *user;
  weir_sampling_params sampling;
  uint64_t rng[4]; /* weir/rng.h: the sampler's and verification's draws */
  int32_t max_tokens, min_tokens;
  int ignore_eos;
  int32_t *stop_ids;
  int32_t num_stop_ids;
  int32_t *bias_tokens; /* the request's logit bias, owned copies (sampling points at them) */
  float *bias_values;
  int32_t priority;
  int32_t *prompt;
  int32_t num_prompt;
  weir_stop_matcher stop;
  weir_detok detok;
  weir_matcher *matcher; /* structured output: the constraint's state, or NULL */
  /* Prompt logprobs: entry p scores prompt token p + 1, filled as the prefill chunks run and
   * delivered with the first output token; NULL when not asked. */
  weir_sample_result *plp;
  int plp_sent;
  weir_sched_seq *seq;
  int32_t dslot; /* this step's draft-model slot (engine.c, run_draft), or -1 */
  int32_t dkv;   /* leading positions whose draft-model KV is written (run_draft) */
  int catch_up;  /* this step: would draft but its catch-up did not fit (reserve_drafts) */
  double acceptance; /* moving average of this request's checked drafts (spec_policy.h) */
  int no_spec;   /* weir_gen_request.no_speculation */
  int32_t num_output;
  double t_arrival, t_sched, t_first, deadline;
  struct engine_req *next; /* incoming queue / live list link */
  struct engine_req *live_prev, *live_next;
} engine_req;

struct weir_engine {
  /* Immutable after create. */
  weir_plugin_set plugins;
  weir_gguf *gguf;
  weir_tokenizer *tok;
  weir_llama *model;
  weir_kv_pool *pool;
  weir_kv_cache *kv; /* the pool's bookkeeping */
  weir_sched *sched;
  weir_metrics *metrics;
  int own_metrics;
  weir__engine_metrics em; /* engine thread records; registered at create */
  weir_chat_renderer *chat;
  char *model_name;   /* == model_names[0] */
  char **model_names; /* the served name, then the configured aliases */
  int32_t num_model_names;
  int32_t vocab, ctx_len, max_waiting;
  int64_t default_timeout_ms;
  int32_t *eog_ids; /* tokens that end generation: EOS and end-of-turn markers */
  int32_t num_eog;
  const weir_sampler_ops *sampler;
  void *sampler_self;
  /* Every sampler call goes through here: the host applies the 1.1 parameters (masks, logit
   * bias) a sampler does not declare in its caps (plugin/sampling.h). Engine thread. */
  weir_sampler_call scall;
  const weir_drafter_ops *drafter; /* NULL: no speculative decoding */
  void *drafter_self;
  /* Structured output: the vocabulary as byte strings and the compiled constraints by text
   * (thread-safe; weir_engine_constraint), and per step the masks of constrained rows. */
  weir_grammar_vocab *gvocab;
  weir_constraint_cache *gcache;
  weir_service service; /* HTTP's handle on the above (service.h); filled at load */
  uint32_t *masks;                 /* [mask rows][mask_words], mask rows = max(max_seqs_step,
                                    * spec_k + 1): a step's constrained rows, or the rows of
                                    * one verified item */
  size_t mask_words;
  weir_sampling_params *row_params; /* [mask rows]: a constrained row's params + its mask */
  weir_matcher **cms;              /* [max_seqs_step] scratch */
  /* The masks of a step's constrained rows are computed in parallel on this pool (made at
   * the first step with two or more; device.threads threads, the engine thread included),
   * while the device plugin's own threads are idle between forward passes. */
  weir_threadpool *mask_pool;
  int mask_threads;
  int32_t spec_k;                  /* drafts per sequence and step */
  int32_t kv_block_size;           /* the pool's tokens per block */
  int spec_break_residual;         /* weir_engine_opts: tests only */
  weir_spec_policy spec;           /* which speculation length pays (spec_policy.h) */
  int32_t step_n, step_k;          /* this step's decode sequences and chosen length */
  int64_t step_tokens;             /* output tokens this step delivered */
  int64_t step_drafts;             /* drafts this step verified */

  /* Step scratch (engine thread only). */
  int32_t max_tokens_step, max_seqs_step, max_rows, bt_stride;
  int32_t max_prompt_rows;         /* of max_rows: for prompt logprobs */
  int32_t *a_ids, *a_pos, *a_slots, *a_qsl, *a_ctx, *a_bt, *a_rows;
  weir_sampling_row *rows;
  weir_sample_result *results;
  engine_req **row_req;
  int32_t *suppress;
  weir_draft_seq *dseqs;           /* [max_seqs_step] */
  engine_req **dreqs;
  int32_t *dtokens, *dcounts;      /* [max_seqs_step][spec_k], [max_seqs_step] */
  float *probs;                    /* [spec_k + 1][vocab]: verification distributions */
  uint64_t spec_drafted, spec_accepted;
  /* Draft model (a drafter with model_path, ABI 1.3): run here over KV group 1 of the pool,
   * through the same plugins as the target. NULL without one. */
  weir_gguf *dgguf;
  weir_llama *draft;
  /* A step's draft distributions: q of drafted position j for draft slot ds at
   * qbuf[(j * max_seqs_step + ds) * vocab]. */
  float *qbuf;
  int32_t *d_ids, *d_pos, *d_slots, *d_qsl, *d_ctx, *d_bt, *d_rows, *d_item;

  /* Shared with other threads, under lock. */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  engine_req *incoming_head, *incoming_tail;
  int32_t num_incoming;
  uint64_t *aborts;
  int32_t num_aborts, cap_aborts;
  struct flow_op {
    uint64_t id;
    int resume;
  } *flow;                         /* weir_engine_pause / _resume, in call order */
  int32_t num_flow, cap_flow;
  int stopping;
  weir_engine_stats stats;

  engine_req *live; /* engine thread only: every admitted request */
  atomic_uint_fast64_t next_id;
  pthread_t thread;
  int thread_started;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

/* ---- Request lifetime (engine thread) ---------------------------------------------------- */

static void req_free(engine_req *r) {
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

static void live_add(weir_engine *e, engine_req *r) {
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

static void fill_usage(const engine_req *r, weir_gen_event *ev) {
  ev->request_id = r->id;
  ev->prompt_tokens = r->num_prompt;
  ev->cached_tokens = r->seq ? r->seq->num_cached_prompt : 0;
  ev->completion_tokens = r->num_output;
  ev->num_preemptions = r->seq ? r->seq->num_preemptions : 0;
}

static void publish_stats(weir_engine *e);

/* Delivers the final event and releases everything the request holds (its KV blocks
 * included, in this same step). The stats are published before the event, so whoever sees
 * the request end also sees its blocks freed. */
static void req_finish(weir_engine *e, engine_req *r, weir_finish_reason why, int status,
                       const char *error, const char *tail, size_t tail_len) {
  double t = now_s();
  weir_gen_event ev = {0};
  fill_usage(r, &ev);
  ev.text = tail ? tail : "";
  ev.text_len = tail ? tail_len : 0;
  ev.finish = why;
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
  publish_stats(e);
  weir__engine_metrics_finished(&e->em, why, r->num_prompt, r->num_output, &ev.timing);
  r->cb(r->user, &ev);
  req_free(r);
}

/* Ends a request whose text may still hold a stop-string prefix: releases it first. */
static void req_finish_flush(weir_engine *e, engine_req *r, weir_finish_reason why) {
  const char *t1, *t2;
  size_t n1, n2;
  weir_detok_flush(&r->detok, &t1, &n1);
  const char *emit;
  size_t emit_len;
  int stopped = weir_stop_feed(&r->stop, t1, n1, &emit, &emit_len);
  if (stopped == 1) {
    req_finish(e, r, WEIR_FINISH_STOP, 0, NULL, emit, emit_len);
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
  req_finish(e, r, why, 0, NULL, all ? all : "", all ? n : 0);
  free(all ? all : buf);
}

static int is_in(const int32_t *ids, int32_t n, int32_t tok) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] == tok) return 1;
  return 0;
}

/* Handles one sampled token: emits its text and decides whether the request ends. Returns 1
 * when the request was finished (and freed). */
static int req_on_token(weir_engine *e, engine_req *r, const weir_sample_result *res) {
  const int32_t tok = res->token;
  const double t = now_s();
  if (r->t_first == 0) r->t_first = t;
  r->num_output++;
  e->step_tokens++;
  const int can_stop = r->num_output > r->min_tokens;
  if (can_stop && ((!r->ignore_eos && is_in(e->eog_ids, e->num_eog, tok)) ||
                   is_in(r->stop_ids, r->num_stop_ids, tok))) {
    req_finish_flush(e, r, WEIR_FINISH_STOP);
    return 1;
  }
  const char *piece;
  size_t piece_len;
  int rc = weir_detok_feed(&r->detok, tok, &piece, &piece_len);
  if (rc != WEIR_OK) {
    req_finish(e, r, WEIR_FINISH_ERROR, rc, "detokenization failed", NULL, 0);
    return 1;
  }
  const char *emit;
  size_t emit_len;
  int stopped = weir_stop_feed(&r->stop, piece, piece_len, &emit, &emit_len);
  if (stopped < 0) {
    req_finish(e, r, WEIR_FINISH_ERROR, stopped, "out of memory", NULL, 0);
    return 1;
  }
  weir_gen_event ev = {0};
  fill_usage(r, &ev);
  ev.tokens = &res->token;
  ev.num_tokens = 1;
  ev.logprobs = r->sampling.num_logprobs >= 0 ? res : NULL;
  if (stopped == 1) {
    /* The token that completed a stop string ends the request; its text before the stop
     * string goes out with the final event. */
    req_finish(e, r, WEIR_FINISH_STOP, 0, NULL, emit, emit_len);
    return 1;
  }
  ev.text = emit;
  ev.text_len = emit_len;
  const int at_length = r->num_output >= r->max_tokens ||
                        (r->seq && r->seq->num_tokens + 1 > e->ctx_len);
  if (at_length) {
    /* Deliver this token's event, then the final one with the held-back tail. */
    r->cb(r->user, &ev);
    req_finish_flush(e, r, WEIR_FINISH_LENGTH);
    return 1;
  }
  r->cb(r->user, &ev);
  return 0;
}

/* ---- The step ---------------------------------------------------------------------------- */

static void publish_stats(weir_engine *e) {
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

static void admit(weir_engine *e, engine_req *r) {
  weir_sched_seq_params p = {.id = r->id,
                             .prompt = r->prompt,
                             .num_prompt = r->num_prompt,
                             .priority = r->priority,
                             .max_tokens = r->max_tokens,
                             .prompt_logits = r->plp != NULL,
                             .user = r};
  live_add(e, r);
  int rc = weir_sched_add(e->sched, &p, &r->seq);
  if (rc != WEIR_OK) {
    r->seq = NULL;
    req_finish(e, r, WEIR_FINISH_ERROR, rc,
               rc == WEIR_E_NOSPACE ? "the prompt does not fit in the KV cache"
                                    : "could not queue the request",
               NULL, 0);
  }
}

static engine_req *find_live(weir_engine *e, uint64_t id) {
  for (engine_req *r = e->live; r; r = r->live_next)
    if (r->id == id) return r;
  return NULL;
}

static void fail_step(weir_engine *e, weir_sched_out *out, int rc) {
  weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "step failed: %s; ending its %d requests",
           weir_strerror(rc), out->num_items);
  weir_sched_undo_step(e->sched, out);
  for (int32_t i = 0; i < out->num_items; i++) {
    engine_req *r = out->items[i].seq->user;
    req_finish(e, r, WEIR_FINISH_ERROR, rc, "the model step failed", NULL, 0);
  }
}

/* Draws an index from non-negative weights; `fallback` when they sum to zero. */
static int32_t draw_from(const float *w, int32_t n, double u, int32_t fallback) {
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
static int32_t *suppress_row(weir_engine *e, int32_t k) {
  return e->suppress + (size_t)k * (size_t)(e->num_eog + WEIR_MAX_STOP_TOKEN_IDS);
}

/* The sampling row of request r as if `extra` more output tokens (accepted drafts) had been
 * appended; `sup` receives the tokens to suppress (EOS and stop ids before min_tokens). */
static weir_sampling_row make_row(weir_engine *e, engine_req *r, int32_t extra, int32_t *sup) {
  const weir_sched_seq *s = r->seq;
  int32_t nsup = 0;
  /* ignore_eos under a constraint: no end token while the constraint can still continue, so
   * the output goes on to max_tokens or to where the constraint forces its end (issue 28;
   * without this the constraint's own EOS ended it). */
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

/* Samples rows [0, nrows) of e->rows from `logits` (consecutive rows), records each token and
 * emits its event. */
static void sample_segment(weir_engine *e, float *logits, int32_t nrows) {
  if (nrows == 0) return;
  /* Constrained rows sample under their matcher's mask: the masks of all of them at once,
   * then each row's params copied with `allowed` pointing at its mask. */
  int32_t nc = 0;
  for (int32_t k = 0; k < nrows; k++)
    if (e->row_req[k]->matcher) e->cms[nc++] = e->row_req[k]->matcher;
  int rc = WEIR_OK;
  if (nc > 0) {
    if (nc > 1 && !e->mask_pool && e->mask_threads != 1 &&
        weir_threadpool_create(e->mask_threads, &e->mask_pool) != WEIR_OK)
      e->mask_threads = 1; /* no pool: the masks are computed here, one after another */
    rc = weir_matchers_fill_masks(e->cms, nc, e->masks, e->mask_words, e->mask_pool);
    for (int32_t k = 0, c = 0; rc == WEIR_OK && k < nrows; k++) {
      if (!e->row_req[k]->matcher) continue;
      e->row_params[c] = e->row_req[k]->sampling;
      e->row_params[c].allowed = e->masks + (size_t)c * e->mask_words;
      e->rows[k].params = &e->row_params[c++];
    }
  }
  if (rc == WEIR_OK)
    rc = weir_sampler_call_sample(&e->scall, e->rows, nrows, logits, e->vocab, e->results);
  for (int32_t k = 0; k < nrows; k++) {
    engine_req *r = e->row_req[k];
    const int32_t tok = e->results[k].token;
    if (rc == WEIR_OK && r->matcher && weir_matcher_accept_token(r->matcher, tok) != WEIR_OK) {
      /* Only a sampler that ignores `allowed` gets here. */
      req_finish(e, r, WEIR_FINISH_ERROR, WEIR_E_INTERNAL,
                 "the sampler produced a token the output constraint does not allow", NULL, 0);
      continue;
    }
    if (rc == WEIR_OK) rc = weir_sched_commit(e->sched, r->seq, 0, &e->results[k].token, 1);
    if (rc != WEIR_OK) {
      req_finish(e, r, WEIR_FINISH_ERROR, rc, "sampling failed", NULL, 0);
      continue;
    }
    /* A constrained output ends when its grammar is complete and nothing can extend it, or
     * when the constraint accepted an end-of-sequence token. */
    const int done = r->matcher && (weir_matcher_is_ended(r->matcher) ||
                                    (weir_matcher_is_complete(r->matcher) &&
                                     !weir_matcher_can_continue(r->matcher)));
    if (!req_on_token(e, r, &e->results[k]) && done) req_finish_flush(e, r, WEIR_FINISH_STOP);
  }
}

/* Prompt logprobs of one item's prompt rows (weir_sched_item.num_prompt_logits), into its
 * request's plp; the chunk that scores the last prompt token delivers them all in one event,
 * once (a chunk recomputed after a preemption scores the same positions again, with the same
 * result). Returns 1 when the request ended (scoring failed), else 0. */
static int score_prompt(weir_engine *e, const weir_sched_item *it, const float *logits) {
  engine_req *r = it->seq->user;
  if (!r->plp) return 0;
  const int32_t top = r->sampling.num_logprobs > 0 ? r->sampling.num_logprobs : 0;
  int rc = weir_sampler_call_score(&e->scall, logits, it->num_prompt_logits, e->vocab,
                                   it->seq->tokens + it->start + 1, top, r->plp + it->start);
  if (rc != WEIR_OK) {
    req_finish(e, r, WEIR_FINISH_ERROR, rc, "scoring the prompt failed", NULL, 0);
    return 1;
  }
  if (!r->plp_sent && it->start + it->num_prompt_logits == r->num_prompt - 1) {
    weir_gen_event ev = {0};
    fill_usage(r, &ev);
    ev.text = "";
    ev.prompt_logprobs = r->plp;
    ev.num_prompt_logprobs = r->num_prompt - 1;
    r->plp_sent = 1;
    r->cb(r->user, &ev);
  }
  return 0;
}

/* Speculative verification of one item: the target distributions p of its 1 + n rows, then
 * the rejection rule. Draft j, drawn from the drafter's distribution q (one-hot for a
 * deterministic drafter such as ngram; the draft model's for a draft model), is accepted with
 * probability min(1, p(x) / q(x)); at the first rejection the token is drawn from the
 * normalised residual max(0, p - q); when every draft is accepted a bonus token is drawn from
 * the last row. The output distribution is the target's whatever q is, and greedy output is
 * identical to decoding without drafts. */
/* The draft model's distribution of request r's drafted position j in this step, or NULL
 * (a deterministic drafter: q is one-hot on the draft). */
static const float *draft_q(const weir_engine *e, const engine_req *r, int32_t j) {
  if (!e->draft || r->dslot < 0) return NULL;
  return e->qbuf + ((size_t)j * (size_t)e->max_seqs_step + (size_t)r->dslot) * (size_t)e->vocab;
}

static void verify_item(weir_engine *e, const weir_sched_item *it, float *logits) {
  weir_sched_seq *s = it->seq;
  engine_req *r = s->user;
  const int32_t nd = it->num_drafts, nr = nd + 1;
  int32_t *toks = e->dtokens; /* scratch: accepted drafts then the drawn token */
  memcpy(toks, s->tokens + it->start + 1, sizeof(int32_t) * (size_t)nd);
  for (int32_t j = 0; j < nr; j++)
    e->rows[j] = make_row(e, r, j, suppress_row(e, j));
  int rc = WEIR_OK;
  if (r->matcher) {
    /* Row j samples under the constraint as it stands after drafts 0..j-1 (all allowed:
     * propose_drafts kept only those); the matcher is then put back. */
    int32_t stepped = 0;
    for (int32_t j = 0; j < nr && rc == WEIR_OK; j++) {
      uint32_t *mask = e->masks + (size_t)j * e->mask_words;
      rc = weir_matcher_fill_mask(r->matcher, mask);
      e->row_params[j] = r->sampling;
      e->row_params[j].allowed = mask;
      e->rows[j].params = &e->row_params[j];
      if (rc == WEIR_OK && j < nd) {
        rc = weir_matcher_accept_token(r->matcher, toks[j]);
        if (rc == WEIR_OK) stepped++;
      }
    }
    if (stepped > 0) weir_matcher_rollback(r->matcher, stepped);
    if (rc != WEIR_OK) {
      req_finish(e, r, WEIR_FINISH_ERROR, rc, "the output constraint failed", NULL, 0);
      return;
    }
  }
  rc = weir_sampler_call_probs(&e->scall, e->rows, nr, logits, e->vocab, e->probs);
  if (rc != WEIR_OK) {
    req_finish(e, r, WEIR_FINISH_ERROR, rc, "sampling failed", NULL, 0);
    return;
  }
  int32_t accepted = 0, token = -1;
  for (int32_t j = 0; j < nd; j++) {
    float *row = e->probs + (size_t)j * (size_t)e->vocab;
    const float *q = draft_q(e, r, j);
    const int32_t x = toks[j];
    const double qx = q ? (double)q[x] : 1.0;
    if (qx > 0 && weir_rng_uniform(r->rng) * qx < (double)row[x]) {
      accepted++;
      continue;
    }
    if (q && !e->spec_break_residual) {
      for (int32_t v = 0; v < e->vocab; v++) row[v] = row[v] > q[v] ? row[v] - q[v] : 0.0f;
    } else if (!q) {
      row[x] = 0;
    }
    token = draw_from(row, e->vocab, weir_rng_uniform(r->rng), x);
    break;
  }
  if (token < 0)
    token =
        draw_from(e->probs + (size_t)nd * (size_t)e->vocab, e->vocab, weir_rng_uniform(r->rng), 0);
  e->spec_drafted += (uint64_t)nd;
  e->spec_accepted += (uint64_t)accepted;
  e->step_drafts += nd;
  for (int32_t j = 0; j < nd && j < e->em.spec_positions; j++) {
    weir_metric_add(e->em.spec_pos_draft[j], 1);
    if (j < accepted) weir_metric_add(e->em.spec_pos_accepted[j], 1);
  }
  r->acceptance = weir_spec_acceptance_update(r->acceptance, nd, accepted);
  toks[accepted] = token;
  int done = 0;
  if (r->matcher) {
    for (int32_t j = 0; j <= accepted && rc == WEIR_OK; j++)
      rc = weir_matcher_accept_token(r->matcher, toks[j]);
    if (rc != WEIR_OK) {
      req_finish(e, r, WEIR_FINISH_ERROR, WEIR_E_INTERNAL,
                 "a verified token is not allowed by the output constraint", NULL, 0);
      return;
    }
    done = weir_matcher_is_ended(r->matcher) ||
           (weir_matcher_is_complete(r->matcher) && !weir_matcher_can_continue(r->matcher));
  }
  rc = weir_sched_commit(e->sched, s, accepted, &token, 1);
  if (rc != WEIR_OK) {
    req_finish(e, r, WEIR_FINISH_ERROR, rc, "could not record the tokens", NULL, 0);
    return;
  }
  /* The draft's KV past the rejected drafts is rolled back with the target's. */
  if (r->dkv > s->num_computed) r->dkv = s->num_computed;
  for (int32_t j = 0; j <= accepted; j++) {
    weir_sample_result res = {.token = toks[j]};
    if (req_on_token(e, r, &res)) return;
  }
  if (done) req_finish_flush(e, r, WEIR_FINISH_STOP);
}

/* The drafts a step may add to request r: within max_tokens and the context, as the step
 * yields accepted drafts + 1 tokens. */
static int32_t draft_room(const weir_engine *e, const engine_req *r, int32_t want) {
  int32_t room = r->max_tokens - r->num_output - 1;
  int32_t ctx_room = e->ctx_len - r->seq->num_tokens - 1;
  if (ctx_room < room) room = ctx_room;
  return want < room ? want : room;
}

/* Whether request r decodes this step with room for drafts (not scoring logprobs, not
 * opted out). */
static int can_draft(const engine_req *r) {
  const weir_sched_seq *s = r->seq;
  return s && s->state == WEIR_SEQ_RUNNING && s->num_drafts == 0 &&
         s->num_computed == s->num_tokens - 1 && r->sampling.num_logprobs < 0 && !r->no_spec;
}

/* The speculation length of this step (spec_policy.h), from the sequences in decode. */
static int32_t choose_k(weir_engine *e) {
  int32_t n = 0;
  for (engine_req *r = e->live; r; r = r->live_next)
    if (r->seq && r->seq->state == WEIR_SEQ_RUNNING && r->seq->num_computed >= r->seq->num_prompt)
      n++;
  e->step_n = n;
  e->step_k = n > 0 ? weir_spec_choose(&e->spec, n) : 0;
  return e->step_k;
}

/* With a draft model: every decode sequence gets spec_k placeholder drafts, so that the step
 * schedules (and the KV manager allocates) their positions; run_draft then writes the draft
 * model's tokens over them before the target runs. Constrained requests are not drafted for
 * (their drafts would need a mask per drafted position). */
static void reserve_drafts(weir_engine *e, int32_t k) {
  /* The draft's pass 0 catches each drafting sequence up from its KV's end: at most a
   * step's tokens in all (the rest catch up without drafting, run_draft). */
  int64_t budget = e->max_tokens_step;
  for (engine_req *r = e->live; r; r = r->live_next) {
    r->catch_up = 0;
    if (!can_draft(r) || r->matcher) continue;
    const int64_t catch_up = (int64_t)r->seq->num_computed - r->dkv + 1;
    if (catch_up > budget) {
      r->catch_up = 1; /* run_draft advances it with what room is left */
      continue;
    }
    int32_t nd = draft_room(e, r, weir_spec_seq_len(k, r->acceptance));
    if (nd <= 0) continue;
    budget -= catch_up;
    if (nd <= 0) continue;
    for (int32_t j = 0; j < nd; j++) e->dtokens[j] = r->seq->tokens[r->seq->num_tokens - 1];
    weir_sched_add_drafts(e->sched, r->seq, e->dtokens, nd);
  }
}

/* Asks the drafter for up to spec_k tokens for every running sequence in decode. */
static void propose_drafts(weir_engine *e) {
  const int32_t k = choose_k(e);
  if (k <= 0) return;
  if (e->draft) {
    reserve_drafts(e, k);
    return;
  }
  int32_t n = 0;
  for (engine_req *r = e->live; r && n < e->max_seqs_step; r = r->live_next) {
    weir_sched_seq *s = r->seq;
    if (!can_draft(r)) continue;
    e->dseqs[n] =
        (weir_draft_seq){.seq_id = r->id, .tokens = s->tokens, .num_tokens = s->num_tokens};
    e->dreqs[n++] = r;
  }
  if (n == 0) return;
  int rc = e->drafter->propose(e->drafter_self, e->dseqs, n, e->spec_k, e->dtokens, e->dcounts,
                               NULL);
  if (rc != WEIR_OK) return; /* drafts are an optimisation: decode without them */
  for (int32_t i = 0; i < n; i++) {
    engine_req *r = e->dreqs[i];
    int32_t nd = draft_room(e, r, e->dcounts[i]);
    const int32_t want = weir_spec_seq_len(k, r->acceptance);
    if (want < nd) nd = want;
    if (r->matcher && nd > 0) {
      /* Only drafts the constraint allows: the longest allowed prefix, the matcher left as
       * it was. */
      const int32_t *d = e->dtokens + (size_t)i * (size_t)e->spec_k;
      int32_t ok = 0;
      while (ok < nd && weir_matcher_accept_token(r->matcher, d[ok]) == WEIR_OK) ok++;
      if (ok > 0) weir_matcher_rollback(r->matcher, ok);
      nd = ok;
    }
    if (nd > 0)
      weir_sched_add_drafts(e->sched, r->seq, e->dtokens + (size_t)i * (size_t)e->spec_k, nd);
  }
}

/* The draft model's part of a step, between the batch's arrays and the target's forward.
 *
 * Pass 0 runs the draft model over every item's tokens but the placeholder drafts, at the
 * target's own positions and slots (KV group 1 of the same blocks): so the draft's KV always
 * covers exactly what the target's does, and prefix-cache hits, copies and preemption treat
 * both alike. Its logits at the last real token of each item with placeholders give q for
 * the first draft; pass j feeds draft j of those items (one token each, at the placeholder's
 * slot) for draft j + 1, and a last pass feeds the last drafts (no logits), so that the
 * draft's KV covers every position the target computes. Every draft is drawn with the request's generator from q, which is
 * the request's own sampling distribution (the sampler's probs) over the draft's logits, and
 * is written over its placeholder in the batch and the sequence. Anything failing leaves the
 * placeholders (or earlier drafts) in place, verified as deterministic drafts, which is still
 * exact: drafts only ever change speed. */
/* The draft model's batch over the d_* arrays: nt tokens of ns sequences, nl logit rows. */
static weir_llama_batch draft_batch(const weir_engine *e, const weir_sched_out *out,
                                    int32_t nt, int32_t ns, int32_t nl) {
  return (weir_llama_batch){.num_tokens = nt,
                            .tokens = e->d_ids,
                            .positions = e->d_pos,
                            .num_seqs = ns,
                            .query_start_loc = e->d_qsl,
                            .context_lens = e->d_ctx,
                            .block_tables = e->d_bt,
                            .max_blocks_per_seq = out->max_blocks_per_seq,
                            .slot_mapping = e->d_slots,
                            .num_logit_rows = nl,
                            .logit_rows = e->d_rows};
}

static void run_draft(weir_engine *e, const weir_sched_out *out) {
  const int32_t S = e->max_seqs_step, V = e->vocab, bs = e->kv_block_size;
  const size_t bts = (size_t)out->max_blocks_per_seq;
  int32_t nt = 0, ns = 0, nds = 0;
  int64_t room = e->max_tokens_step;
  e->d_qsl[0] = 0;
  /* Pass 0: the drafting items (then the rest catching up, as room allows), each from the
   * end of its draft KV through its last real token. Drafting items come first so that a
   * logits row k is draft slot k. */
  for (int pass = 0; pass < 2; pass++)
    for (int32_t i = 0; i < out->num_items; i++) {
      const weir_sched_item *it = &out->items[i];
      engine_req *r = it->seq->user;
      if (pass == 0) r->dslot = -1;
      const int drafting = it->num_drafts > 0;
      /* Only decode items that draft or wait to (a prefill chunk's draft KV, and that of a
       * sequence not drafting, is caught up once it drafts). */
      const int wanted = pass == 0 ? drafting : !drafting && r->catch_up;
      if (!wanted || it->start < it->seq->num_prompt || it->num_new_tokens - it->num_drafts != 1)
        continue;
      if (r->dkv > it->start) r->dkv = it->start;
      int32_t from = r->dkv, to = it->start + 1; /* positions [from, to) */
      if (to - from > room) {
        if (drafting) { /* reserve_drafts budgeted this: only a failure gets here */
          r->dkv = from;
          continue;
        }
        to = from + (int32_t)room;
      }
      if (to <= from) continue;
      const int32_t *table = e->a_bt + (size_t)i * bts;
      for (int32_t p = from; p < to; p++, nt++) {
        e->d_ids[nt] = it->seq->tokens[p];
        e->d_pos[nt] = p;
        e->d_slots[nt] = table[p / bs] * bs + p % bs;
      }
      room -= to - from;
      memcpy(e->d_bt + (size_t)ns * bts, table, sizeof(int32_t) * bts);
      e->d_ctx[ns] = to;
      e->d_qsl[++ns] = nt;
      r->dkv = to;
      if (drafting) {
        e->d_rows[nds] = nt - 1;
        e->d_item[nds++] = i;
      }
    }
  if (ns == 0) return;
  weir_llama_batch b = draft_batch(e, out, nt, ns, nds);
  for (int32_t j = 0;; j++) {
    float *logits = NULL;
    int rc = weir_llama_forward(e->draft, &b, &logits);
    if (rc == WEIR_OK && b.num_logit_rows > 0) {
      for (int32_t k = 0; k < b.num_logit_rows; k++)
        e->rows[k] = make_row(e, out->items[e->d_item[k]].seq->user, j, suppress_row(e, k));
      rc = weir_sampler_call_probs(&e->scall, e->rows, b.num_logit_rows, logits, V,
                                   e->qbuf + (size_t)j * (size_t)S * (size_t)V);
    }
    if (rc != WEIR_OK) {
      weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "draft model: %s; this step verifies what it has",
               weir_strerror(rc));
      /* Whatever this forward wrote is unknown: those sequences catch up from scratch. */
      for (int32_t i = 0; i < out->num_items; i++) {
        engine_req *r = out->items[i].seq->user;
        r->dslot = -1;
        r->dkv = 0;
      }
      return;
    }
    if (b.num_logit_rows == 0) return; /* the last pass only fed the last drafts */
    /* Row k of this pass belongs to draft slot dslot >= k (later passes carry fewer items, in
     * the same order): move each row to its slot, last first, so none is overwritten. */
    float *qj = e->qbuf + (size_t)j * (size_t)S * (size_t)V;
    for (int32_t k = b.num_logit_rows - 1; k >= 0; k--) {
      engine_req *r = out->items[e->d_item[k]].seq->user;
      if (j == 0) r->dslot = k;
      if (r->dslot != k)
        memcpy(qj + (size_t)r->dslot * (size_t)V, qj + (size_t)k * (size_t)V,
               sizeof(float) * (size_t)V);
    }
    /* Draw draft j + 1 of every item with logits in this pass. Pass j + 1 feeds each of them
     * to the draft, the last draft included (without logits): the draft's KV then covers
     * every position the target computes, so when all drafts are accepted the next step
     * finds the draft's KV complete. */
    int32_t m = 0, nl = 0;
    for (int32_t k = 0; k < b.num_logit_rows; k++) {
      const int32_t i = e->d_item[k];
      const weir_sched_item *it = &out->items[i];
      engine_req *r = it->seq->user;
      const float *q = qj + (size_t)r->dslot * (size_t)V;
      const int32_t at = e->a_qsl[i] + 1 + j;
      const int32_t tok = draw_from(q, V, weir_rng_uniform(r->rng), e->a_ids[at]);
      e->a_ids[at] = tok;
      it->seq->tokens[it->start + 1 + j] = tok;
      e->d_ids[m] = tok;
      e->d_pos[m] = e->a_pos[at];
      e->d_slots[m] = e->a_slots[at];
      e->d_ctx[m] = e->a_pos[at] + 1;
      e->d_qsl[m + 1] = m + 1;
      memcpy(e->d_bt + (size_t)m * bts, e->a_bt + (size_t)i * bts, sizeof(int32_t) * bts);
      r->dkv = e->a_pos[at] + 1; /* written by the next pass (or reset if it fails) */
      if (j + 1 < it->num_drafts) {
        e->d_item[nl] = i; /* nl <= k: entries still to be read are not overwritten */
        e->d_rows[nl++] = m;
      }
      m++;
    }
    b = draft_batch(e, out, m, m, nl);
  }
}

/* Runs one scheduler step. Returns 1 when work was done, 0 when idle. */
static int run_step(weir_engine *e) {
  weir_sched_out out;
  memset(&out, 0, sizeof out);
  const double t_step = now_s();
  e->step_tokens = e->step_drafts = 0;
  e->step_n = e->step_k = 0;
  if (e->drafter) {
    propose_drafts(e);
    if (!e->draft) weir_metric_add(e->em.spec_seconds, now_s() - t_step);
  }
  int rc = weir_sched_step(e->sched, &out);
  /* A preempted sequence's blocks are gone, its draft KV with them. */
  for (int32_t i = 0; i < out.num_preempted; i++)
    ((engine_req *)out.preempted[i]->user)->dkv = 0;
  /* Sequences the scheduler failed are finished there and still owe their final event,
   * whether or not the step as a whole succeeded. */
  for (int32_t i = 0; i < out.num_failed; i++) {
    engine_req *r = out.failed[i]->user;
    req_finish(e, r, WEIR_FINISH_ERROR, WEIR_E_NOSPACE,
               "the request does not fit in the KV cache", NULL, 0);
  }
  if (rc != WEIR_OK) {
    weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "scheduler: %s", weir_strerror(rc));
    return 0;
  }
  if (out.num_items == 0) return out.num_failed > 0;

  rc = weir_kv_pool_copy(e->pool, out.copies, out.num_copies);
  if (rc != WEIR_OK) {
    fail_step(e, &out, rc);
    return 1;
  }

  weir_sched_batch_arrays a = {.input_ids = e->a_ids,
                               .positions = e->a_pos,
                               .slot_mapping = e->a_slots,
                               .query_start_loc = e->a_qsl,
                               .context_lens = e->a_ctx,
                               .block_tables = e->a_bt,
                               .block_table_stride = out.max_blocks_per_seq,
                               .logits_rows = e->a_rows};
  rc = weir_sched_fill_batch(e->sched, &out, &a);
  if (rc != WEIR_OK) {
    fail_step(e, &out, rc);
    return 1;
  }
  const double t = now_s();
  for (int32_t i = 0; i < out.num_items; i++) {
    engine_req *r = out.items[i].seq->user;
    if (r->t_sched == 0) r->t_sched = t;
  }
  if (e->draft) {
    const double t_draft = now_s();
    run_draft(e, &out);
    weir_metric_add(e->em.spec_seconds, now_s() - t_draft);
  }
  weir_llama_batch b = {.num_tokens = out.num_tokens,
                        .tokens = e->a_ids,
                        .positions = e->a_pos,
                        .num_seqs = out.num_items,
                        .query_start_loc = e->a_qsl,
                        .context_lens = e->a_ctx,
                        .block_tables = e->a_bt,
                        .max_blocks_per_seq = out.max_blocks_per_seq,
                        .slot_mapping = e->a_slots,
                        .num_logit_rows = out.num_logits,
                        .logit_rows = e->a_rows};
  float *logits = NULL;
  rc = weir_llama_forward(e->model, &b, &logits);
  if (rc != WEIR_OK) {
    fail_step(e, &out, rc);
    return 1;
  }

  /* Logits rows come in item order, num_logits per item. Items without drafts are sampled
   * together, a run of consecutive ones per sampler call; items with drafts are verified one
   * by one. */
  int32_t row = 0, seg_start = 0, nrows = 0;
  for (int32_t i = 0; i < out.num_items; i++) {
    const weir_sched_item *it = &out.items[i];
    if (it->num_logits == 0) continue;
    engine_req *r = it->seq->user;
    if (it->num_prompt_logits > 0) {
      /* Prompt rows first; the final chunk's last row then starts a new segment. */
      sample_segment(e, logits + (size_t)seg_start * (size_t)e->vocab, nrows);
      nrows = 0;
      const int ended = score_prompt(e, it, logits + (size_t)row * (size_t)e->vocab);
      row += it->num_prompt_logits;
      if (ended) row += it->num_logits - it->num_prompt_logits;
      if (ended || it->num_logits == it->num_prompt_logits) continue;
    }
    if (it->num_drafts == 0) {
      if (nrows == 0) seg_start = row;
      e->rows[nrows] = make_row(e, r, 0, suppress_row(e, nrows));
      e->row_req[nrows++] = r;
      row += 1;
      continue;
    }
    sample_segment(e, logits + (size_t)seg_start * (size_t)e->vocab, nrows);
    nrows = 0;
    verify_item(e, it, logits + (size_t)row * (size_t)e->vocab);
    row += it->num_logits;
  }
  sample_segment(e, logits + (size_t)seg_start * (size_t)e->vocab, nrows);
  /* What this speculation length achieved, on steps of decode alone (a prefill's cost would
   * count against whichever length ran beside it). */
  if (e->drafter) {
    weir_metric_record(e->em.spec_step_drafts, (double)e->step_drafts);
    weir_metric_record(e->em.spec_len, (double)e->step_k);
  }
  if (e->drafter && out.num_items == e->step_n) {
    int pure = 1;
    for (int32_t i = 0; i < out.num_items && pure; i++) {
      const weir_sched_item *it = &out.items[i];
      pure = it->num_new_tokens - it->num_drafts == 1 && it->num_prompt_logits == 0;
    }
    if (pure) weir_spec_observe(&e->spec, e->step_n, e->step_k, e->step_tokens, now_s() - t_step);
  }
  return 1;
}

/* Whether a step could do anything: paused requests alone give the thread nothing to do
 * but watch their deadlines. */
static int has_work(const weir_engine *e) {
  return weir_sched_num_running(e->sched) + weir_sched_num_waiting(e->sched) > 0;
}

static void apply_flow(weir_engine *e, const struct flow_op *ops, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    engine_req *r = find_live(e, ops[i].id);
    if (!r || !r->seq) continue;
    int rc = ops[i].resume ? weir_sched_resume(e->sched, r->seq)
                           : weir_sched_pause(e->sched, r->seq);
    if (rc != WEIR_OK && rc != WEIR_E_INVAL)
      weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "could not %s request %llu: %s",
               ops[i].resume ? "resume" : "pause", (unsigned long long)ops[i].id,
               weir_strerror(rc));
  }
}

static void *engine_main(void *arg) {
  weir_engine *e = arg;
  for (;;) {
    pthread_mutex_lock(&e->lock);
    while (!e->stopping && !e->incoming_head && e->num_aborts == 0 && e->num_flow == 0 &&
           !(e->live && has_work(e))) {
      if (!e->live) {
        pthread_cond_wait(&e->wake, &e->lock);
        continue;
      }
      /* Only paused requests: wake up now and then for their deadlines. */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 100 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&e->wake, &e->lock, &ts);
      break;
    }
    engine_req *in = e->incoming_head;
    e->incoming_head = e->incoming_tail = NULL;
    e->num_incoming = 0;
    int32_t naborts = e->num_aborts;
    uint64_t abort_ids[256];
    if (naborts > 256) naborts = 256;
    if (naborts > 0) {
      memcpy(abort_ids, e->aborts, sizeof(uint64_t) * (size_t)naborts);
      memmove(e->aborts, e->aborts + naborts,
              sizeof(uint64_t) * (size_t)(e->num_aborts - naborts));
      e->num_aborts -= naborts;
    }
    struct flow_op flow[256];
    int32_t nflow = e->num_flow < 256 ? e->num_flow : 256;
    if (nflow > 0) {
      memcpy(flow, e->flow, sizeof *flow * (size_t)nflow);
      memmove(e->flow, e->flow + nflow, sizeof *flow * (size_t)(e->num_flow - nflow));
      e->num_flow -= nflow;
    }
    int stopping = e->stopping;
    pthread_mutex_unlock(&e->lock);

    while (in) {
      engine_req *next = in->next;
      admit(e, in);
      in = next;
    }
    apply_flow(e, flow, nflow);
    for (int32_t i = 0; i < naborts; i++) {
      engine_req *r = find_live(e, abort_ids[i]);
      if (r) req_finish_flush(e, r, WEIR_FINISH_ABORT);
    }
    if (stopping) {
      while (e->live) req_finish_flush(e, e->live, WEIR_FINISH_ABORT);
      publish_stats(e);
      break;
    }
    const double t = now_s();
    for (engine_req *r = e->live, *next; r; r = next) {
      next = r->live_next;
      if (r->deadline > 0 && t > r->deadline) req_finish_flush(e, r, WEIR_FINISH_TIMEOUT);
    }
    if (e->live && has_work(e)) run_step(e);
    publish_stats(e);
  }
  return NULL;
}

/* ---- Public API -------------------------------------------------------------------------- */

int weir_engine_submit(weir_engine *e, const weir_gen_request *q, weir_gen_event_cb cb,
                       void *user, uint64_t *id) {
  if (!e || !q || !cb || q->num_prompt <= 0 || !q->prompt || q->max_tokens <= 0 ||
      q->num_stop_token_ids < 0 || q->num_stop < 0 || q->min_tokens < 0)
    return WEIR_E_INVAL;
  if (q->num_stop_token_ids > WEIR_MAX_STOP_TOKEN_IDS) return WEIR_E_RANGE;
  for (int32_t i = 0; i < q->num_prompt; i++)
    if (q->prompt[i] < 0 || q->prompt[i] >= e->vocab) return WEIR_E_INVAL;
  if ((int64_t)q->num_prompt + q->max_tokens > e->ctx_len) return WEIR_E_RANGE;
  const weir_sampling_params *sp = &q->sampling;
  if (!(sp->temperature >= 0) || !(sp->top_p > 0 && sp->top_p <= 1) || !(sp->min_p >= 0) ||
      !(sp->min_p <= 1) || !(sp->repetition_penalty > 0) || sp->num_logprobs > WEIR_MAX_LOGPROBS)
    return WEIR_E_INVAL;
  const int32_t nbias = WEIR_SAMPLING_HAS(sp, num_logit_bias) ? sp->num_logit_bias : 0;
  if (nbias < 0 || (nbias > 0 && (!sp->logit_bias_tokens || !sp->logit_bias_values)))
    return WEIR_E_INVAL;
  if (nbias > WEIR_MAX_LOGIT_BIAS) return WEIR_E_RANGE;
  for (int32_t i = 0; i < nbias; i++)
    if (sp->logit_bias_tokens[i] < 0 || sp->logit_bias_tokens[i] >= e->vocab ||
        !(sp->logit_bias_values[i] >= -100.0f && sp->logit_bias_values[i] <= 100.0f))
      return WEIR_E_INVAL;

  engine_req *r = calloc(1, sizeof *r);
  if (!r) return WEIR_E_NOMEM;
  int rc = WEIR_E_NOMEM;
  r->cb = cb;
  r->user = user;
  /* The caller's struct may be older (smaller): only what it holds is copied, the rest stays
   * zero; its arrays are the caller's, so the request keeps its own copies. */
  memcpy(&r->sampling, sp,
         sp->struct_size && sp->struct_size < sizeof r->sampling ? sp->struct_size
                                                                 : sizeof r->sampling);
  r->sampling.struct_size = sizeof r->sampling;
  r->sampling.logit_bias_tokens = NULL;
  r->sampling.logit_bias_values = NULL;
  r->sampling.num_logit_bias = 0;
  r->sampling.allowed = NULL; /* per-step masks are the engine's own (structured output) */
  r->max_tokens = q->max_tokens;
  r->min_tokens = q->min_tokens;
  r->ignore_eos = q->ignore_eos;
  r->priority = q->priority;
  r->no_spec = q->no_speculation;
  /* A prior for the acceptance of a request's drafts until its own are checked. */
  r->acceptance = 0.7;
  r->num_prompt = q->num_prompt;
  r->prompt = malloc(sizeof(int32_t) * (size_t)q->num_prompt);
  if (!r->prompt) goto fail_req;
  memcpy(r->prompt, q->prompt, sizeof(int32_t) * (size_t)q->num_prompt);
  if (q->prompt_logprobs && q->num_prompt > 1 &&
      !(r->plp = calloc((size_t)q->num_prompt - 1, sizeof *r->plp)))
    goto fail_req;
  if (q->num_stop_token_ids > 0) {
    r->stop_ids = malloc(sizeof(int32_t) * (size_t)q->num_stop_token_ids);
    if (!r->stop_ids) goto fail_req;
    memcpy(r->stop_ids, q->stop_token_ids, sizeof(int32_t) * (size_t)q->num_stop_token_ids);
    r->num_stop_ids = q->num_stop_token_ids;
  }
  if (nbias > 0) {
    r->bias_tokens = malloc(sizeof(int32_t) * (size_t)nbias);
    r->bias_values = malloc(sizeof(float) * (size_t)nbias);
    if (!r->bias_tokens || !r->bias_values) goto fail_req;
    memcpy(r->bias_tokens, sp->logit_bias_tokens, sizeof(int32_t) * (size_t)nbias);
    memcpy(r->bias_values, sp->logit_bias_values, sizeof(float) * (size_t)nbias);
    r->sampling.logit_bias_tokens = r->bias_tokens;
    r->sampling.logit_bias_values = r->bias_values;
    r->sampling.num_logit_bias = nbias;
  }
  if (weir_stop_init(&r->stop, q->stop, q->num_stop) != WEIR_OK) goto fail_req;
  if (q->constraint && weir_matcher_create(q->constraint, &r->matcher) != WEIR_OK) goto fail_req;
  weir_detok_init(&r->detok, e->tok, WEIR_DECODE_KEEP_PREFIX_SPACE | WEIR_DECODE_SKIP_SPECIAL);
  uint64_t seed = q->has_seed ? q->seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)r;
  weir_rng_seed(r->rng, seed);
  r->t_arrival = now_s();
  int64_t timeout = q->timeout_ms > 0 ? q->timeout_ms : e->default_timeout_ms;
  r->deadline = timeout > 0 ? r->t_arrival + (double)timeout / 1000.0 : 0;

  pthread_mutex_lock(&e->lock);
  if (e->stopping) {
    pthread_mutex_unlock(&e->lock);
    rc = WEIR_E_CANCELED;
    goto fail_req;
  }
  /* stats.num_waiting counts the scheduler's queue as of the last step plus every request
   * submitted since (incremented below), so it bounds the whole backlog. */
  if (e->max_waiting > 0 && e->stats.num_waiting >= e->max_waiting) {
    pthread_mutex_unlock(&e->lock);
    rc = WEIR_E_BUSY;
    goto fail_req;
  }
  r->id = atomic_fetch_add(&e->next_id, 1);
  if (e->incoming_tail) e->incoming_tail->next = r;
  else e->incoming_head = r;
  e->incoming_tail = r;
  e->num_incoming++;
  e->stats.num_waiting++;
  if (e->em.waiting) weir_metric_record(e->em.waiting, e->stats.num_waiting);
  if (id) *id = r->id;
  pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->lock);
  return WEIR_OK;

fail_req:
  req_free(r);
  return rc;
}

void weir_engine_abort(weir_engine *e, uint64_t id) {
  pthread_mutex_lock(&e->lock);
  if (e->num_aborts == e->cap_aborts) {
    int32_t cap = e->cap_aborts ? e->cap_aborts * 2 : 64;
    uint64_t *na = realloc(e->aborts, sizeof(uint64_t) * (size_t)cap);
    if (!na) {
      pthread_mutex_unlock(&e->lock);
      weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "out of memory queueing abort of %llu",
               (unsigned long long)id);
      return;
    }
    e->aborts = na;
    e->cap_aborts = cap;
  }
  e->aborts[e->num_aborts++] = id;
  pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->lock);
}

static void queue_flow(weir_engine *e, uint64_t id, int resume) {
  pthread_mutex_lock(&e->lock);
  if (e->num_flow == e->cap_flow) {
    int32_t cap = e->cap_flow ? e->cap_flow * 2 : 64;
    struct flow_op *nf = realloc(e->flow, sizeof *nf * (size_t)cap);
    if (!nf) {
      pthread_mutex_unlock(&e->lock);
      weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "out of memory queueing %s of %llu",
               resume ? "resume" : "pause", (unsigned long long)id);
      return;
    }
    e->flow = nf;
    e->cap_flow = cap;
  }
  e->flow[e->num_flow++] = (struct flow_op){id, resume};
  pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->lock);
}

void weir_engine_pause(weir_engine *e, uint64_t id) { queue_flow(e, id, 0); }
void weir_engine_resume(weir_engine *e, uint64_t id) { queue_flow(e, id, 1); }

int weir_engine_tokenize(weir_engine *e, const char *text, size_t len, int add_special,
                         int32_t **ids, int32_t *n) {
  size_t count = 0;
  int flags = add_special ? (WEIR_ENCODE_ADD_SPECIAL | WEIR_ENCODE_PARSE_SPECIAL) : 0;
  int rc = weir_tokenizer_encode(e->tok, text, len, flags, ids, &count);
  if (rc == WEIR_OK) *n = (int32_t)count;
  return rc;
}

int weir_engine_detokenize(weir_engine *e, const int32_t *ids, int32_t n, char **text,
                           size_t *len) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= e->vocab) return WEIR_E_RANGE;
  return weir_tokenizer_decode(e->tok, ids, (size_t)n, 0, text, len);
}

int weir_engine_detokenize_offsets(weir_engine *e, const int32_t *ids, int32_t n,
                                   int skip_special, size_t *offsets) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= e->vocab) return WEIR_E_RANGE;
  weir_detok d;
  weir_detok_init(&d, e->tok, skip_special ? WEIR_DECODE_SKIP_SPECIAL : 0);
  size_t at = 0;
  int rc = WEIR_OK;
  for (int32_t i = 0; i < n && rc == WEIR_OK; i++) {
    const char *piece;
    size_t len = 0;
    offsets[i] = at;
    rc = weir_detok_feed(&d, ids[i], &piece, &len);
    at += len;
  }
  weir_detok_free(&d);
  return rc;
}

int weir_engine_token_text(weir_engine *e, int32_t id, char **text, size_t *len) {
  return weir_tokenizer_decode(e->tok, &id, 1, WEIR_DECODE_KEEP_PREFIX_SPACE, text, len);
}

int weir_engine_render_chat(weir_engine *e, const weir_chat_message *msgs, int32_t n,
                            int add_generation_prompt, char **out) {
  weir_chat_request req = {
      .msgs = msgs, .n_msgs = n, .add_generation_prompt = add_generation_prompt};
  return weir_chat_renderer_render(e->chat, &req, out, NULL, 0);
}

int weir_engine_render_chat_ex(weir_engine *e, const weir_chat_request *req, char **out,
                               char *err, size_t errlen) {
  return weir_chat_renderer_render(e->chat, req, out, err, errlen);
}

void weir_engine_info_get(weir_engine *e, weir_engine_info *out) {
  out->model_name = e->model_name;
  out->model_names = (const char *const *)e->model_names;
  out->num_model_names = e->num_model_names;
  out->vocab_size = e->vocab;
  out->context_length = e->ctx_len;
  out->bos_id = weir_tokenizer_bos(e->tok);
  out->eos_id = weir_tokenizer_eos(e->tok);
  out->chat_template_name = weir_chat_renderer_name(e->chat);
}

int weir_engine_constraint(weir_engine *e, const weir_constraint_spec *spec,
                           weir_constraint **out, char *err, size_t errlen) {
  *out = NULL;
  if (!e || !spec) return WEIR_E_INVAL;
  return weir_constraint_cache_get(e->gcache, spec, out, err, errlen);
}

const weir_service *weir_engine_service(const weir_engine *e) { return &e->service; }

void weir_engine_stats_get(weir_engine *e, weir_engine_stats *out) {
  pthread_mutex_lock(&e->lock);
  *out = e->stats;
  pthread_mutex_unlock(&e->lock);
}

weir_metrics *weir_engine_metrics(weir_engine *e) { return e->metrics; }

/* ---- Creation ---------------------------------------------------------------------------- */

/* The served name: server.served_model_name, else the file's general.name, else the file
 * name without its extension; then the configured aliases. */
static int resolve_model_names(weir_engine *e, const weir_config *cfg) {
  const int32_t n = 1 + cfg->num_served_model_aliases;
  e->model_names = calloc((size_t)n, sizeof *e->model_names);
  if (!e->model_names) return WEIR_E_NOMEM;
  weir_gguf_str gname = {0};
  if (cfg->served_model_name && cfg->served_model_name[0]) {
    e->model_names[0] = strdup(cfg->served_model_name);
  } else if (weir_gguf_get_str(e->gguf, "general.name", &gname) == WEIR_OK && gname.len > 0 &&
             !memchr(gname.ptr, 0, (size_t)gname.len)) {
    e->model_names[0] = strndup(gname.ptr, (size_t)gname.len);
  } else {
    const char *path = cfg->model_path;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    e->model_names[0] = strndup(base, dot && dot != base ? (size_t)(dot - base) : strlen(base));
  }
  e->num_model_names = 1;
  if (!e->model_names[0]) return WEIR_E_NOMEM;
  for (int32_t i = 1; i < n; i++) {
    if (!(e->model_names[i] = strdup(cfg->served_model_aliases[i - 1]))) return WEIR_E_NOMEM;
    e->num_model_names = i + 1;
  }
  e->model_name = e->model_names[0];
  return WEIR_OK;
}

/* End-of-generation tokens: EOS plus the end-of-turn markers chat formats use. */
static int collect_eog(weir_engine *e) {
  static const char *markers[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>",
                                  "<|endoftext|>", "</s>"};
  e->eog_ids = malloc(sizeof(int32_t) * 8);
  if (!e->eog_ids) return WEIR_E_NOMEM;
  int32_t eos = weir_tokenizer_eos(e->tok);
  if (eos >= 0) e->eog_ids[e->num_eog++] = eos;
  for (size_t i = 0; i < sizeof markers / sizeof markers[0]; i++) {
    int32_t id = weir_tokenizer_find(e->tok, markers[i], strlen(markers[i]));
    if (id >= 0 && !is_in(e->eog_ids, e->num_eog, id) &&
        weir_tokenizer_token_type(e->tok, id) == WEIR_TOKEN_CONTROL)
      e->eog_ids[e->num_eog++] = id;
  }
  return WEIR_OK;
}

/* One step's batch arrays for T tokens of S sequences (the target's, and the draft's). Returns
 * whether every one was allocated (the caller frees what was, on both paths). */
static int alloc_batch(size_t T, size_t S, size_t bt_stride, int32_t **ids, int32_t **pos,
                       int32_t **slots, int32_t **qsl, int32_t **ctx, int32_t **bt) {
  *ids = malloc(T * 4);
  *pos = malloc(T * 4);
  *slots = malloc(T * 4);
  *qsl = malloc((S + 1) * 4);
  *ctx = malloc(S * 4);
  *bt = malloc(S * bt_stride * 4);
  return *ids && *pos && *slots && *qsl && *ctx && *bt;
}

static int alloc_scratch(weir_engine *e) {
  const size_t T = (size_t)e->max_tokens_step, S = (size_t)e->max_seqs_step;
  const size_t R = (size_t)e->max_rows;
  e->bt_stride = weir_kv_pool_geometry(e->pool)->max_blocks_per_seq;
  if (!alloc_batch(T, S, (size_t)e->bt_stride, &e->a_ids, &e->a_pos, &e->a_slots, &e->a_qsl,
                   &e->a_ctx, &e->a_bt))
    return WEIR_E_NOMEM;
  e->a_rows = malloc(R * 4);
  e->rows = calloc(R, sizeof *e->rows);
  e->results = calloc(R, sizeof *e->results);
  e->row_req = calloc(R, sizeof *e->row_req);
  e->suppress = malloc(R * (size_t)(e->num_eog + WEIR_MAX_STOP_TOKEN_IDS) * 4);
  e->mask_words = WEIR_MASK_WORDS(e->vocab);
  /* Mask rows: one per constrained sequence of a step, or one per row of a verified item. */
  const size_t MR = S > (size_t)e->spec_k + 1 ? S : (size_t)e->spec_k + 1;
  e->masks = malloc(MR * e->mask_words * 4);
  e->row_params = calloc(MR, sizeof *e->row_params);
  e->cms = calloc(S, sizeof *e->cms);
  if (!e->masks || !e->row_params || !e->cms) return WEIR_E_NOMEM;
  if (e->drafter) {
    e->dseqs = calloc(S, sizeof *e->dseqs);
    e->dreqs = calloc(S, sizeof *e->dreqs);
    e->dtokens = malloc(S * (size_t)e->spec_k * 4 + 4);
    e->dcounts = calloc(S, 4);
    e->probs = malloc((size_t)(e->spec_k + 1) * (size_t)e->vocab * sizeof(float));
    if (!e->dseqs || !e->dreqs || !e->dtokens || !e->dcounts || !e->probs) return WEIR_E_NOMEM;
  }
  if (e->draft) {
    e->qbuf = malloc((size_t)e->spec_k * S * (size_t)e->vocab * sizeof(float));
    const int ok = alloc_batch(T, S, (size_t)e->bt_stride, &e->d_ids, &e->d_pos, &e->d_slots,
                               &e->d_qsl, &e->d_ctx, &e->d_bt);
    e->d_rows = malloc(S * 4);
    e->d_item = malloc(S * 4);
    if (!ok || !e->qbuf || !e->d_rows || !e->d_item)
      return WEIR_E_NOMEM;
  }
  if (!e->a_rows || !e->rows || !e->results || !e->row_req || !e->suppress)
    return WEIR_E_NOMEM;
  return WEIR_OK;
}

static void engine_free(weir_engine *e) {
  weir_sched_destroy(e->sched);
  weir_llama_destroy(e->model);
  weir_llama_destroy(e->draft);
  weir_gguf_close(e->dgguf);
  weir_kv_pool_destroy(e->pool);
  weir_plugin_set_unload(&e->plugins);
  weir_tokenizer_free(e->tok);
  weir_gguf_close(e->gguf);
  if (e->own_metrics) weir_metrics_destroy(e->metrics);
  for (int32_t i = 0; i < e->num_model_names; i++) free(e->model_names[i]);
  free(e->model_names);
  weir_chat_renderer_free(e->chat);
  free(e->eog_ids);
  free(e->a_ids);
  free(e->a_pos);
  free(e->a_slots);
  free(e->a_qsl);
  free(e->a_ctx);
  free(e->a_bt);
  free(e->a_rows);
  free(e->rows);
  free(e->results);
  free(e->row_req);
  free(e->suppress);
  weir_sampler_call_free(&e->scall);
  free(e->masks);
  free(e->row_params);
  free(e->cms);
  weir_threadpool_destroy(e->mask_pool);
  weir_constraint_cache_free(e->gcache);
  weir_grammar_vocab_release(e->gvocab);
  free(e->dseqs);
  free(e->dreqs);
  free(e->dtokens);
  free(e->dcounts);
  free(e->probs);
  free(e->qbuf);
  free(e->d_ids);
  free(e->d_pos);
  free(e->d_slots);
  free(e->d_qsl);
  free(e->d_ctx);
  free(e->d_bt);
  free(e->d_rows);
  free(e->d_item);
  free(e->aborts);
  free(e->flow);
  pthread_mutex_destroy(&e->lock);
  pthread_cond_destroy(&e->wake);
  free(e);
}

/* Opens the draft model a drafter names (ABI 1.3 model_path) and checks it can draft for the
 * target: a Llama-family GGUF with the target's vocabulary, token for token. */
static int open_draft(weir_engine *e, const char *path, const weir_llama_hparams *thp,
                      weir_llama_hparams *dhp, char *err, size_t errlen) {
  int rc = weir_gguf_open(path, &e->dgguf, err, errlen);
  if (rc == WEIR_OK) rc = weir_gguf_llama_hparams(e->dgguf, dhp, err, errlen);
  if (rc == WEIR_OK) rc = weir_gguf_llama_check(e->dgguf, dhp, err, errlen);
  if (rc != WEIR_OK) {
    char why[768];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, errlen, "draft model %s: %s", path, why);
    return rc;
  }
  weir_tokenizer *dt = NULL;
  rc = weir_tokenizer_from_gguf(e->dgguf, &dt, err, errlen);
  if (rc != WEIR_OK) return rc;
  const int32_t tn = weir_tokenizer_n_tokens(e->tok), dn = weir_tokenizer_n_tokens(dt);
  if (dhp->n_vocab != thp->n_vocab || tn != dn) {
    snprintf(err, errlen, "draft model %s has a vocabulary of %d tokens (%d logit rows); the "
             "target has %d (%d): a draft must share the target's tokenizer", path, dn,
             dhp->n_vocab, tn, thp->n_vocab);
    rc = WEIR_E_INVAL;
  }
  for (int32_t id = 0; rc == WEIR_OK && id < tn; id++) {
    weir_tok_str a, b;
    if (weir_tokenizer_token_text(e->tok, id, &a) != WEIR_OK ||
        weir_tokenizer_token_text(dt, id, &b) != WEIR_OK || a.len != b.len ||
        memcmp(a.ptr, b.ptr, a.len) != 0) {
      weir_tok_str ta = {0}, tb = {0};
      weir_tokenizer_token_text(e->tok, id, &ta);
      weir_tokenizer_token_text(dt, id, &tb);
      snprintf(err, errlen, "draft model %s: token %d is \"%.*s\" in the draft but \"%.*s\" "
               "in the target: a draft must share the target's tokenizer", path, id,
               (int)(tb.len > 64 ? 64 : tb.len), tb.ptr ? tb.ptr : "",
               (int)(ta.len > 64 ? 64 : ta.len), ta.ptr ? ta.ptr : "");
      rc = WEIR_E_INVAL;
    }
  }
  if (rc == WEIR_OK && weir_tokenizer_get_type(dt) != weir_tokenizer_get_type(e->tok)) {
    snprintf(err, errlen, "draft model %s: its tokenizer model differs from the target's", path);
    rc = WEIR_E_INVAL;
  }
  weir_tokenizer_free(dt);
  return rc;
}

int weir_engine_create(const weir_config *cfg, weir_engine **out) {
  return weir_engine_create_opts(cfg, NULL, out);
}

int weir_engine_create_ex(const weir_config *cfg, weir_metrics *metrics, weir_engine **out) {
  weir_engine_opts o = {.metrics = metrics};
  return weir_engine_create_opts(cfg, &o, out);
}

int weir_engine_create_opts(const weir_config *cfg, const weir_engine_opts *opts,
                            weir_engine **out) {
  char err[1024] = "";
  int rc;
  weir_metrics *metrics = opts ? opts->metrics : NULL;
  weir_progress own_progress = {0};
  weir_progress *progress = opts && opts->load_progress ? opts->load_progress : &own_progress;
  *out = NULL;
  weir_engine *e = calloc(1, sizeof *e);
  if (!e) return WEIR_E_NOMEM;
  e->spec_break_residual = opts ? opts->spec_break_residual : 0;
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->wake, NULL);
  atomic_init(&e->next_id, 1);
  if (metrics) {
    e->metrics = metrics;
  } else {
    rc = weir_metrics_create(&e->metrics);
    if (rc != WEIR_OK) goto fail;
    e->own_metrics = 1;
  }
  rc = weir__engine_metrics_init(e->metrics, &e->em);
  if (rc == WEIR_OK)
    rc = weir__engine_metrics_spec_init(e->metrics, &e->em, cfg->num_speculative_tokens);
  if (rc != WEIR_OK) goto fail;

  rc = weir_gguf_open(cfg->model_path, &e->gguf, err, sizeof err);
  if (rc != WEIR_OK) goto fail;
  rc = resolve_model_names(e, cfg);
  if (rc != WEIR_OK) goto fail;
  /* Every metric of a replica says which model it serves (docs/metrics.md). */
  rc = weir_metrics_set_label(e->metrics, "model_name", e->model_name);
  if (rc != WEIR_OK) goto fail;
  rc = weir_tokenizer_from_gguf(e->gguf, &e->tok, err, sizeof err);
  if (rc != WEIR_OK) goto fail;
  rc = weir_plugin_set_load(cfg, e->metrics, &e->plugins);
  if (rc != WEIR_OK) {
    snprintf(err, sizeof err, "could not load the plugins the configuration names (see above)");
    goto fail;
  }
  e->sampler = e->plugins.sampler->ops;
  e->sampler_self = e->plugins.sampler->self;
  weir_sampler_call_init(&e->scall, e->plugins.sampler, e->plugins.device);
  if (e->plugins.drafter && cfg->num_speculative_tokens > 0) {
    if (!e->sampler->probs) {
      snprintf(err, sizeof err, "speculative decoding needs a sampler with probs(); sampler "
               "\"%s\" has none", e->plugins.sampler->desc->name);
      rc = WEIR_E_NOTSUP;
      goto fail;
    }
    e->drafter = e->plugins.drafter->ops;
    e->drafter_self = e->plugins.drafter->self;
    e->spec_k = cfg->num_speculative_tokens;
    weir_spec_policy_init(&e->spec, e->spec_k, cfg->spec_adaptive);
  }

  /* The configuration owns these defaults (weir_config_defaults) and their ranges. */
  if (cfg->max_num_seqs <= 0 || cfg->max_num_batched_tokens <= 0) {
    snprintf(err, sizeof err, "scheduler.max_num_seqs (%d) and max_num_batched_tokens (%d) "
             "must be positive", cfg->max_num_seqs, cfg->max_num_batched_tokens);
    rc = WEIR_E_INVAL;
    goto fail;
  }
  e->max_seqs_step = cfg->max_num_seqs;
  e->max_tokens_step = cfg->max_num_batched_tokens;
  if (e->max_tokens_step < e->max_seqs_step) e->max_tokens_step = e->max_seqs_step;
  e->max_rows =
      e->max_seqs_step * (1 + (cfg->num_speculative_tokens > 0 ? cfg->num_speculative_tokens : 0));
  /* Rows for prompt logprobs come on top: a prompt is scored this many tokens per step. */
  e->max_prompt_rows = WEIR_ENGINE_PROMPT_LOGIT_ROWS < e->max_tokens_step
                           ? WEIR_ENGINE_PROMPT_LOGIT_ROWS
                           : e->max_tokens_step;
  e->max_rows += e->max_prompt_rows;
  if (e->max_rows > e->max_tokens_step) e->max_rows = e->max_tokens_step;
  /* The KV pool first, from the model's attention shape: it owns the geometry (block size,
   * block count, table stride) that the model and the scheduler then take from it. */
  weir_llama_hparams hp;
  rc = weir_gguf_llama_hparams(e->gguf, &hp, err, sizeof err);
  if (rc == WEIR_OK) rc = weir_gguf_llama_check(e->gguf, &hp, err, sizeof err);
  if (rc != WEIR_OK) goto fail;
  weir_attn_shape shapes[2];
  weir_llama_hparams dhp;
  weir_llama_attn_shape(&hp, &shapes[0]);
  const char *draft_path = e->drafter && e->drafter->model_path
                               ? e->drafter->model_path(e->drafter_self) : NULL;
  if (draft_path) {
    rc = open_draft(e, draft_path, &hp, &dhp, err, sizeof err);
    if (rc != WEIR_OK) goto fail;
    weir_llama_attn_shape(&dhp, &shapes[1]);
  }
  weir_kv_pool_params kp = {.block_size = cfg->block_size,
                            .kv_dtype = cfg->kv_dtype,
                            .num_blocks = cfg->num_blocks,
                            .memory_bytes = cfg->memory_bytes,
                            .max_model_len = weir_llama_max_model_len(&hp, cfg->max_model_len),
                            .prefix_caching = cfg->prefix_caching,
                            .groups = shapes,
                            .num_groups = draft_path ? 2 : 1};
  rc = weir_kv_pool_create(&kp, e->plugins.device, e->plugins.attention, &e->pool, err,
                           sizeof err);
  if (rc != WEIR_OK) goto fail;
  e->kv = weir_kv_pool_cache(e->pool);
  e->kv_block_size = weir_kv_pool_geometry(e->pool)->block_size;
  e->ctx_len = weir_kv_pool_geometry(e->pool)->max_model_len;
  weir_llama_opts mo = {.max_num_tokens = e->max_tokens_step,
                        .max_num_seqs = e->max_seqs_step,
                        .max_logit_rows = e->max_rows,
                        .progress = progress,
                        .step_graph_max_batch = cfg->step_graph_max_batch};
  char what[96];
  snprintf(what, sizeof what, "loading %s", e->model_name);
  weir_progress_begin(progress, what, (uint64_t)hp.n_layer + 1, "layers", 0);
  /* (with a calibration pass first when the quant scheme is activation-aware) */
  rc = weir_calib_llama_create(cfg, e->gguf, e->tok, &e->plugins, &mo, e->pool, 0, &e->model,
                               err, sizeof err);
  weir_progress_end(progress, rc == WEIR_OK);
  if (rc != WEIR_OK) goto fail;
  if (draft_path) {
    /* The draft's pass 0 carries at most the target's tokens; later passes one per item. */
    weir_llama_opts dmo = {.max_num_tokens = e->max_tokens_step,
                           .max_num_seqs = e->max_seqs_step,
                           .max_logit_rows = e->max_seqs_step,
                           .step_graph_max_batch = cfg->step_graph_max_batch};
    rc = weir_llama_create(e->dgguf, &e->plugins, &dmo, e->pool, 1, &e->draft, err, sizeof err);
    if (rc != WEIR_OK) goto fail;
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
             "draft model %s: %d layers, dim %d; drafts %d tokens per sequence and step",
             draft_path, dhp.n_layer, dhp.n_embd, e->spec_k);
  }
  e->vocab = hp.n_vocab;
  if (weir_tokenizer_n_tokens(e->tok) > e->vocab) {
    snprintf(err, sizeof err, "%s: the tokenizer has %d tokens but the model only %d rows",
             cfg->model_path, weir_tokenizer_n_tokens(e->tok), e->vocab);
    rc = WEIR_E_FORMAT;
    goto fail;
  }

  weir_sched_config sc = {.max_num_seqs = e->max_seqs_step,
                          .max_num_batched_tokens = e->max_tokens_step,
                          .watermark_blocks = -1,
                          .max_prompt_logits = e->max_prompt_rows};
  rc = weir_sched_policy_parse(cfg->policy, &sc.policy);
  if (rc != WEIR_OK) {
    snprintf(err, sizeof err, "scheduler.policy: \"%s\" is not one of fcfs, priority", cfg->policy);
    goto fail;
  }
  rc = weir_sched_create(&sc, e->kv, &e->sched);
  if (rc != WEIR_OK) goto fail;

  rc = collect_eog(e);
  if (rc != WEIR_OK) goto fail;
  rc = alloc_scratch(e);
  if (rc != WEIR_OK) goto fail;
  /* Structured output: the vocabulary's byte strings once; up to 64 compiled constraints
   * (and their token classes, 256 MiB in all) kept by text. */
  e->mask_threads = cfg->threads; /* 0: one per core */
  rc = weir_grammar_vocab_from_tokenizer(e->tok, e->eog_ids, e->num_eog, &e->gvocab);
  if (rc == WEIR_OK)
    rc = weir_constraint_cache_create(e->gvocab, 64, (size_t)256 << 20, &e->gcache);
  if (rc != WEIR_OK) {
    snprintf(err, sizeof err, "could not index the vocabulary for structured output");
    goto fail;
  }

  /* The chat template: a configured built-in, else the model's own Jinja template, else
   * the built-in detected from it (ChatML when none matches). */
  {
    weir_tok_str bos = {"", 0}, eos = {"", 0};
    int32_t b = weir_tokenizer_bos(e->tok), s = weir_tokenizer_eos(e->tok);
    if (b >= 0) weir_tokenizer_token_text(e->tok, b, &bos);
    if (s >= 0) weir_tokenizer_token_text(e->tok, s, &eos);
    char *bos_s = strndup(bos.ptr, bos.len), *eos_s = strndup(eos.ptr, eos.len);
    rc = bos_s && eos_s ? weir_chat_renderer_from_gguf(e->gguf, cfg->chat_template, bos_s, eos_s,
                                                       &e->chat, err, sizeof err)
                        : WEIR_E_NOMEM;
    free(bos_s);
    free(eos_s);
    if (rc != WEIR_OK) goto fail;
    if (weir_chat_renderer_note(e->chat)[0])
      weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "%s: %s", cfg->model_path,
               weir_chat_renderer_note(e->chat));
    else if (err[0])
      weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "%s: %s", cfg->model_path, err);
    err[0] = '\0';
  }

  e->service = (weir_service){.tok = e->tok, .chat = e->chat, .gcache = e->gcache,
                              .vocab_size = e->vocab, .context_length = e->ctx_len};
  e->max_waiting = cfg->max_waiting;
  e->default_timeout_ms = cfg->request_timeout_ms;
  weir_kv_stats ks;
  weir_kv_cache_stats(e->kv, &ks);
  e->stats.kv_blocks_total = ks.num_blocks;
  weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
           "model %s: %s, %d layers, dim %d, %d heads (%d KV), vocab %d, context %d; weights "
           "%.1f MiB; KV cache %d blocks of %d tokens (%.1f MiB, %s)",
           e->model_name, hp.arch_name, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv,
           e->vocab, e->ctx_len, (double)weir_llama_weight_bytes(e->model) / 1048576.0,
           ks.num_blocks, ks.block_size,
           (double)weir_kv_pool_geometry(e->pool)->bytes / 1048576.0,
           weir_dtype_name(cfg->kv_dtype));

  if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
    rc = WEIR_E_INTERNAL;
    snprintf(err, sizeof err, "could not start the engine thread: %s", strerror(errno));
    goto fail;
  }
  e->thread_started = 1;
  *out = e;
  return WEIR_OK;

fail:
  if (err[0]) weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "%s", err);
  else weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "engine start failed: %s", weir_strerror(rc));
  engine_free(e);
  return rc;
}

/* What the speculation policy measured, one line per batch-size bucket it saw: the
 * operator's view of where drafting pays on this machine. */
static void log_spec_policy(const weir_engine *e) {
  if (!e->drafter || !e->spec.adaptive) return;
  for (int b = 0; b < WEIR_SPEC_BUCKETS; b++) {
    char line[512];
    size_t off = 0;
    for (int32_t i = 0; i < e->spec.num_arms && off < sizeof line; i++) {
      const weir_spec_arm *a = &e->spec.arms[b][i];
      if (a->trials)
        off += (size_t)snprintf(line + off, sizeof line - off, " k=%d %.0f tok/s (%u steps);",
                                a->k, a->tps, a->trials);
    }
    if (off)
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "speculation, %d-%d sequences:%s", 1 << b,
               (2 << b) - 1, line);
  }
}

void weir_engine_destroy(weir_engine *e) {
  if (!e) return;
  if (e->thread_started) {
    pthread_mutex_lock(&e->lock);
    e->stopping = 1;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
  }
  log_spec_policy(e);
  /* Requests submitted after the thread saw `stopping` never reached it. */
  for (engine_req *r = e->incoming_head, *n; r; r = n) {
    n = r->next;
    weir_gen_event ev = {.request_id = r->id, .finish = WEIR_FINISH_ABORT, .text = ""};
    ev.prompt_tokens = r->num_prompt;
    weir__engine_metrics_finished(&e->em, WEIR_FINISH_ABORT, r->num_prompt, 0, &ev.timing);
    r->cb(r->user, &ev);
    req_free(r);
  }
  engine_free(e);
}
