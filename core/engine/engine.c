/* The engine's life cycle and queues: creation (the runtime assembly, the scheduler, the
 * step scratch), the engine thread's loop over its queues (submissions, aborts, pause and
 * resume, deadlines), the public API, and shutdown. A step itself is engine_step.c;
 * speculation engine_spec.c; a request on the engine thread engine_req.c (engine_internal.h).
 * See engine.h for the threading contract. */
#include "engine/engine.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "engine/engine_internal.h"
#include "metrics/metrics.h"
#include "template/chat_template.h"
#include "util/err.h"
#include "util/log.h"
#include "util/progress.h"
#include "weir/rng.h"

/* ---- The engine thread: its queues ------------------------------------------------------- */

static void admit(weir_engine *e, engine_req *r) {
  weir_sched_seq_params p = {.id = r->id,
                             .prompt = r->prompt,
                             .num_prompt = r->num_prompt,
                             .priority = r->priority,
                             .max_tokens = r->max_tokens,
                             .prompt_logits = r->plp != NULL,
                             .user = r};
  weir__engine_live_add(e, r);
  int rc = weir_sched_add(e->sched, &p, &r->seq);
  if (rc != WEIR_OK) {
    r->seq = NULL;
    weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc,
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

/* Whether a step could do anything: paused requests alone give the thread nothing to do
 * but watch their deadlines. */
static int has_work(const weir_engine *e) {
  return weir_sched_num_running(e->sched) + weir_sched_num_waiting(e->sched) > 0;
}

static void apply_flow(weir_engine *e, const struct weir__engine_flow_op *ops, int32_t n) {
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
           !e->embed_head && !(e->live && has_work(e))) {
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
    struct weir__engine_flow_op flow[256];
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
      if (r) weir__engine_req_finish_flush(e, r, WEIR_FINISH_ABORT);
    }
    /* Embeddings between steps: never during one (engine_embed.c). */
    weir__engine_embed_run(e, stopping);
    if (stopping) {
      while (e->live) weir__engine_req_finish_flush(e, e->live, WEIR_FINISH_ABORT);
      weir__engine_publish_stats(e);
      break;
    }
    const double t = weir__engine_now();
    for (engine_req *r = e->live, *next; r; r = next) {
      next = r->live_next;
      if (r->deadline > 0 && t > r->deadline)
        weir__engine_req_finish_flush(e, r, WEIR_FINISH_TIMEOUT);
    }
    if (e->live && has_work(e)) weir__engine_run_step(e);
    weir__engine_publish_stats(e);
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
  r->stop.include_stop = q->include_stop_str != 0;
  if (q->constraint && weir_matcher_create(q->constraint, &r->matcher) != WEIR_OK) goto fail_req;
  weir_detok_init(&r->detok, e->tok,
                  WEIR_DECODE_KEEP_PREFIX_SPACE | (q->keep_special ? 0 : WEIR_DECODE_SKIP_SPECIAL));
  uint64_t seed = q->has_seed ? q->seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)r;
  weir_rng_seed(r->rng, seed);
  r->t_arrival = weir__engine_now();
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
  weir__engine_req_free(r);
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
    struct weir__engine_flow_op *nf = realloc(e->flow, sizeof *nf * (size_t)cap);
    if (!nf) {
      pthread_mutex_unlock(&e->lock);
      weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "out of memory queueing %s of %llu",
               resume ? "resume" : "pause", (unsigned long long)id);
      return;
    }
    e->flow = nf;
    e->cap_flow = cap;
  }
  e->flow[e->num_flow++] = (struct weir__engine_flow_op){id, resume};
  pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->lock);
}

void weir_engine_pause(weir_engine *e, uint64_t id) { queue_flow(e, id, 0); }
void weir_engine_resume(weir_engine *e, uint64_t id) { queue_flow(e, id, 1); }

/* The tokenizer calls are the service handle's (service.h), which HTTP uses directly; these
 * stay for the engine's other callers. */
int weir_engine_tokenize(weir_engine *e, const char *text, size_t len, int add_special,
                         int32_t **ids, int32_t *n) {
  return weir_service_tokenize(&e->service, text, len, add_special, ids, n);
}

int weir_engine_detokenize(weir_engine *e, const int32_t *ids, int32_t n, char **text,
                           size_t *len) {
  return weir_service_detokenize(&e->service, ids, n, text, len);
}

int weir_engine_detokenize_offsets(weir_engine *e, const int32_t *ids, int32_t n,
                                   int skip_special, size_t *offsets) {
  return weir_service_detokenize_offsets(&e->service, ids, n, skip_special, offsets);
}

int weir_engine_token_text(weir_engine *e, int32_t id, char **text, size_t *len) {
  return weir_service_token_text(&e->service, id, text, len);
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

const weir_service *weir_engine_service(const weir_engine *e) { return &e->service; }

int weir_engine_constraint(weir_engine *e, const weir_constraint_spec *spec,
                           weir_constraint **out, char *err, size_t errlen) {
  *out = NULL;
  if (!e || !spec) return WEIR_E_INVAL;
  return weir_constraint_cache_get(e->gcache, spec, out, err, errlen);
}

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
  } else if (weir_gguf_get_str(e->rt.gguf[0], "general.name", &gname) == WEIR_OK && gname.len > 0 &&
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
    if (id >= 0 && !weir__engine_is_in(e->eog_ids, e->num_eog, id) &&
        weir_tokenizer_token_type(e->tok, id) == WEIR_TOKEN_CONTROL)
      e->eog_ids[e->num_eog++] = id;
  }
  return WEIR_OK;
}

/* Frees the device buffers of the draft's greedy picks (device_argmax_init). */
static void device_argmax_free(weir_engine *e) {
  const weir_plugin *dev = e->rt.plugins.device;
  if (dev) {
    const weir_device_ops *ops = dev->ops;
    ops->free(dev->self, e->dev_pick);
    ops->free(dev->self, e->dev_prob);
    ops->free(dev->self, e->dev_head);
  }
  e->dev_pick = NULL;
  e->dev_prob = NULL;
  e->dev_head = NULL;
  e->dargmax = 0;
}

/* Greedy picks by the device plugin (argmax_rows, ABI 1.8) for the draft's greedy drafts and
 * greedy verification, on any device with the op: where the logits are device memory (CUDA)
 * it saves copying the rows back; on the CPU device its vectorised pick replaces the host's
 * scalar scan and libm exp (the picks come back with a memcpy of a few ints). The buffers of
 * n picks, and the draft head's ids copied there. An optimisation: a device without the op,
 * or without room, leaves the host picking (dargmax 0). */
static void device_argmax_init(weir_engine *e, size_t S) {
  const weir_plugin *dev = e->rt.plugins.device;
  const weir_device_ops *ops = dev ? dev->ops : NULL;
  if (!ops || !WEIR_HAS_FIELD(ops, weir_device_ops, argmax_rows) || !ops->argmax_rows ||
      e->spec_host_argmax)
    return;
  int rc = ops->alloc(dev->self, S * sizeof(int32_t), (void **)&e->dev_pick);
  if (rc == WEIR_OK) rc = ops->alloc(dev->self, S * sizeof(float), (void **)&e->dev_prob);
  if (rc == WEIR_OK && e->dhead && e->dwidth > 0) {
    rc = ops->alloc(dev->self, (size_t)e->dwidth * sizeof(int32_t), (void **)&e->dev_head);
    if (rc == WEIR_OK)
      rc = ops->copy_h2d(dev->self, e->dev_head, e->dhead, (size_t)e->dwidth * sizeof(int32_t));
    if (rc == WEIR_OK) rc = ops->synchronize(dev->self);
  }
  if (rc == WEIR_OK) {
    e->dargmax = 1;
    return;
  }
  weir_log(WEIR_LOG_WARN, LOG_COMPONENT,
           "draft model: greedy drafts picked on the host (the device's picks: %s)",
           weir_strerror(rc));
  device_argmax_free(e);
}

static int alloc_scratch(weir_engine *e) {
  const size_t S = (size_t)e->max_seqs_step, R = (size_t)e->max_rows;
  e->bt_stride = weir_kv_pool_geometry(e->pool)->max_blocks_per_seq;
  /* The target's batch arrays (the scheduler fills them), and the draft's: a step's tokens in
   * pass 0, one logits row per sequence. */
  if (weir_step_batch_init(&e->tb, e->max_tokens_step, e->max_seqs_step, e->max_rows,
                           e->bt_stride) != WEIR_OK)
    return WEIR_E_NOMEM;
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
    /* a verified item's rows, or a draft pass's rows (at most max_seqs_step, each no wider
     * than the vocabulary) */
    const size_t rows = (size_t)(e->spec_k + 1) > S ? (size_t)(e->spec_k + 1) : S;
    e->hlog_floats = e->logits_host ? 0 : rows * (size_t)e->vocab;
    if (e->hlog_floats && !(e->hlog = malloc(e->hlog_floats * sizeof(float))))
      return WEIR_E_NOMEM;
  }
  if (e->draft) {
    e->qbuf = malloc((size_t)e->spec_k * S * (size_t)e->vocab * sizeof(float));
    const int rc = weir_step_batch_init(&e->db, e->max_tokens_step, e->max_seqs_step,
                                        e->max_seqs_step, e->bt_stride);
    e->d_item = malloc(S * 4);
    e->d_tok = malloc(S * 4);
    e->d_conf = malloc(S * sizeof(float));
    if (rc != WEIR_OK || !e->qbuf || !e->d_item || !e->d_tok || !e->d_conf) return WEIR_E_NOMEM;
    /* A draft LM head over some of the vocabulary (drafter.head_vocab) gives narrower rows; a
     * row sampled from a distribution is widened to the vocabulary first. */
    e->dwidth = weir_llama_logits_width(e->draft);
    if (e->dwidth < e->vocab && !(e->dlrow = malloc((size_t)e->vocab * sizeof(float))))
      return WEIR_E_NOMEM;
    for (int32_t v = 0; e->dlrow && v < e->vocab; v++) e->dlrow[v] = -INFINITY;
  }
  if (e->drafter) {
    /* picks of a draft pass (S rows) or of a verified item (spec_k + 1 rows) */
    const size_t picks = S > (size_t)e->spec_k + 1 ? S : (size_t)e->spec_k + 1;
    if (!(e->d_pick = malloc(picks * 4))) return WEIR_E_NOMEM;
    device_argmax_init(e, picks);
  }
  if (!e->rows || !e->results || !e->row_req || !e->suppress)
    return WEIR_E_NOMEM;
  return WEIR_OK;
}

static void engine_free(weir_engine *e) {
  weir__engine_embed_free(e);
  weir_sched_destroy(e->sched);
  device_argmax_free(e); /* device memory: before the plugins go */
  weir_runtime_close(&e->rt); /* models, pool, plugins, GGUF files, tokenizer */
  if (e->own_metrics) weir_metrics_destroy(e->metrics);
  for (int32_t i = 0; i < e->num_model_names; i++) free(e->model_names[i]);
  free(e->model_names);
  weir_chat_renderer_free(e->chat);
  free(e->eog_ids);
  weir_step_batch_free(&e->tb);
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
  free(e->dlrow);
  free(e->hlog);
  free(e->d_tok);
  free(e->d_conf);
  free(e->d_pick);
  free(e->dhead);
  weir_step_batch_free(&e->db);
  free(e->d_item);
  free(e->aborts);
  free(e->flow);
  pthread_mutex_destroy(&e->lock);
  pthread_cond_destroy(&e->wake);
  pthread_cond_destroy(&e->embed_done);
  free(e);
}


int weir_engine_create(const weir_config *cfg, weir_engine **out) {
  return weir_engine_create_opts(cfg, NULL, out);
}

int weir_engine_create_ex(const weir_config *cfg, weir_metrics *metrics, weir_engine **out) {
  weir_engine_opts o = {.metrics = metrics};
  return weir_engine_create_opts(cfg, &o, out);
}

/* Drafts per step: the configuration's num_speculative_tokens, or where it is 0 the
 * drafter's own default (ABI 1.8), else 4. */
static int32_t spec_tokens(const weir_plugin_set *ps, const weir_config *cfg) {
  if (cfg->num_speculative_tokens > 0) return cfg->num_speculative_tokens;
  const weir_drafter_ops *d = ps->drafter ? ps->drafter->ops : NULL;
  if (d && WEIR_HAS_FIELD(d, weir_drafter_ops, num_tokens_default) &&
      d->num_tokens_default > 0)
    return d->num_tokens_default < 64 ? d->num_tokens_default : 64; /* the config's range */
  return 4;
}

/* The plugins' sampler and the drafter, if any (spec_k: its drafts per step). */
static int setup_sampling(weir_engine *e, const weir_config *cfg, char *err, size_t errlen) {
  const weir_plugin_set *ps = &e->rt.plugins;
  e->sampler = ps->sampler->ops;
  e->sampler_self = ps->sampler->self;
  weir_sampler_call_init(&e->scall, ps->sampler, ps->device);
  if (!ps->drafter) return WEIR_OK;
  if (!e->sampler->probs) {
    snprintf(err, errlen, "speculative decoding needs a sampler with probs(); sampler \"%s\" "
             "has none", ps->sampler->desc->name);
    return WEIR_E_NOTSUP;
  }
  e->drafter = ps->drafter->ops;
  e->drafter_self = ps->drafter->self;
  e->spec_k = spec_tokens(ps, cfg);
  e->spec_min_conf = cfg->spec_min_confidence;
  weir_spec_policy_init(&e->spec, e->spec_k, cfg->spec_adaptive);
  return WEIR_OK;
}

/* A step's limits: tokens, sequences, logits rows. */
static int set_step_limits(weir_engine *e, const weir_config *cfg, char *err, size_t errlen) {
  /* The configuration owns these defaults (weir_config_defaults) and their ranges. */
  if (cfg->max_num_seqs <= 0 || cfg->max_num_batched_tokens <= 0) {
    snprintf(err, errlen, "scheduler.max_num_seqs (%d) and max_num_batched_tokens (%d) "
             "must be positive", cfg->max_num_seqs, cfg->max_num_batched_tokens);
    return WEIR_E_INVAL;
  }
  e->max_seqs_step = cfg->max_num_seqs;
  e->max_tokens_step = cfg->max_num_batched_tokens;
  if (e->max_tokens_step < e->max_seqs_step) e->max_tokens_step = e->max_seqs_step;
  /* spec_k (setup_sampling); without a drafter the same count as with one (embedding
   * chunks are sized by max_rows too). */
  const int32_t k = e->spec_k ? e->spec_k : spec_tokens(&e->rt.plugins, cfg);
  e->max_rows = e->max_seqs_step * (1 + k);
  /* Rows for prompt logprobs come on top: a prompt is scored this many tokens per step. */
  e->max_prompt_rows = WEIR_ENGINE_PROMPT_LOGIT_ROWS < e->max_tokens_step
                           ? WEIR_ENGINE_PROMPT_LOGIT_ROWS
                           : e->max_tokens_step;
  e->max_rows += e->max_prompt_rows;
  if (e->max_rows > e->max_tokens_step) e->max_rows = e->max_tokens_step;
  return WEIR_OK;
}

/* What the model file says against what was asked. A max_model_len beyond the context the
 * model was trained on (its GGUF context_length, which already counts any RoPE scaling the
 * file declares) is refused unless allowed explicitly: positions the model never saw in
 * training make it degrade quietly (vLLM refuses the same way). And llama.cpp's -ngl N can
 * only be honoured for 0 or every layer: weir runs the whole model on one device. */
static int check_model_fit(const weir_llama_hparams *hp, const weir_config *cfg, char *err,
                           size_t errlen) {
  if (cfg->max_model_len > hp->n_ctx_train && hp->n_ctx_train > 0 &&
      !cfg->allow_long_max_model_len) {
    weir_set_err(err, errlen,
                 "max_model_len %d is beyond the %d tokens %s was trained on (its "
                 "context_length; %s): the model has never seen such positions and degrades "
                 "there. Give --max-model-len %d or less, or --allow-long-max-model-len "
                 "(model.allow_long_max_model_len = true) to serve it anyway",
                 (int)cfg->max_model_len, (int)hp->n_ctx_train, cfg->model_path,
                 hp->rope_scale > 1.0f || hp->rope_yarn || hp->has_longrope
                     ? "the RoPE scaling the file declares is counted in it"
                     : "the file declares no RoPE scaling to extend it",
                 (int)hp->n_ctx_train);
    return WEIR_E_RANGE;
  }
  if (cfg->n_gpu_layers > 0 && cfg->n_gpu_layers < hp->n_layer) {
    weir_set_err(err, errlen,
                 "-ngl %d: weir runs all %d layers of %s on one device and does not split a "
                 "model between GPU and CPU; -ngl %d or more (or --device cuda) puts every "
                 "layer on the GPU, -ngl 0 (or --device cpu) none",
                 (int)cfg->n_gpu_layers, (int)hp->n_layer, cfg->model_path, (int)hp->n_layer);
    return WEIR_E_NOTSUP;
  }
  return WEIR_OK;
}

/* The models and the KV pool they share (the runtime assembly, after the plugins): the pool
 * first, from the models' attention shapes, since it owns the geometry (block size, block
 * count, table stride) that the models and the scheduler then take from it; the target
 * calibrated first when its quant scheme is activation-aware; the draft model a drafter names
 * (ABI 1.3 model_path) in the pool's group 1. */
/* The token ids of a draft LM head of n rows (drafter.head_vocab), in column order: the end
 * token, then every token that decodes to one character (SentencePiece lists its single
 * characters last, and they are among the most frequent), then the other normal tokens in id
 * order (BPE and SentencePiece number merged pieces by merge rank, the frequent first), then
 * whatever is left. A draft made from this head is still verified exactly: its q is 0 off
 * the head. NULL when out of memory; the caller frees it. */
static int32_t *draft_head_ids(const weir_tokenizer *tok, int32_t vocab, int32_t n) {
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
  uint8_t *taken = calloc((size_t)vocab, 1);
  if (!ids || !taken) {
    free(ids);
    free(taken);
    return NULL;
  }
  int32_t c = 0;
  const int32_t eos = weir_tokenizer_eos(tok);
  if (eos >= 0 && eos < vocab && c < n) {
    ids[c++] = eos;
    taken[eos] = 1;
  }
  for (int pass = 0; pass < 3 && c < n; pass++)
    for (int32_t id = 0; id < vocab && c < n; id++) {
      if (taken[id]) continue;
      const int type = weir_tokenizer_token_type(tok, id);
      const int normal = type == WEIR_TOKEN_NORMAL || type == WEIR_TOKEN_USER_DEFINED;
      weir_tok_str b = {0};
      int one_char = 0;
      if (pass == 0 && normal && weir_tokenizer_token_bytes(tok, id, &b) == WEIR_OK && b.len) {
        const unsigned char c0 = (unsigned char)b.ptr[0];
        const size_t want = c0 < 0x80 ? 1 : c0 >= 0xF0 ? 4 : c0 >= 0xE0 ? 3 : c0 >= 0xC0 ? 2 : 0;
        one_char = want == b.len;
      }
      if ((pass == 0 && one_char) || (pass == 1 && normal) || pass == 2) {
        ids[c++] = id;
        taken[id] = 1;
      }
    }
  free(taken);
  return ids;
}

static int load_models(weir_engine *e, const weir_config *cfg, weir_progress *progress,
                       char *err, size_t errlen) {
  weir_runtime *rt = &e->rt;
  const weir_llama_hparams *hp = &rt->hp[0];
  e->logits_host = rt->plugins.device && rt->plugins.device->desc->devices == WEIR_DEVICE_CPU;
  e->spec_row_cost = e->logits_host ? WEIR_SPEC_ROW_COST : WEIR_SPEC_ROW_COST_GPU;
  const char *draft_path = e->drafter && e->drafter->model_path
                               ? e->drafter->model_path(e->drafter_self) : NULL;
  int rc = check_model_fit(hp, cfg, err, errlen);
  if (rc != WEIR_OK) return rc;
  rc = draft_path ? weir_runtime_open_draft(rt, draft_path, err, errlen) : WEIR_OK;
  const weir_runtime_pool_opts po = {
      .max_model_len = weir_llama_max_model_len(hp, cfg->max_model_len),
      .prefix_caching = cfg->prefix_caching};
  if (rc == WEIR_OK) rc = weir_runtime_create_pool(rt, cfg, &po, err, errlen);
  if (rc != WEIR_OK) return rc;
  e->pool = rt->pool;
  e->kv = weir_kv_pool_cache(e->pool);
  e->ctx_len = weir_kv_pool_geometry(e->pool)->max_model_len;
  weir_llama_opts mo = {.max_num_tokens = e->max_tokens_step,
                        .max_num_seqs = e->max_seqs_step,
                        .max_logit_rows = e->max_rows,
                        .progress = progress,
                        .step_graph_max_batch = cfg->step_graph_max_batch,
                        .max_model_len = e->ctx_len,
                        /* verification steps: k + 1 tokens per drafting sequence */
                        .step_graph_max_rows = e->spec_k + 1};
  char what[96];
  snprintf(what, sizeof what, "loading %s", e->model_name);
  weir_progress_begin(progress, what, (uint64_t)hp->n_layer + 1, "layers", 0);
  rc = weir_runtime_load_model(rt, 0, cfg, &mo, 1, err, errlen);
  weir_progress_end(progress, rc == WEIR_OK);
  if (rc != WEIR_OK) return rc;
  e->model = rt->model[0];
  if (!draft_path) return WEIR_OK;
  /* The draft's pass 0 carries at most the target's tokens; later passes one per item. */
  weir_llama_opts dmo = {.max_num_tokens = e->max_tokens_step,
                         .max_num_seqs = e->max_seqs_step,
                         .max_logit_rows = e->max_seqs_step,
                         .step_graph_max_batch = cfg->step_graph_max_batch,
                         .max_model_len = e->ctx_len,
                         /* pass 0 feeds the last draft and the token after it */
                         .step_graph_max_rows = 2};
  /* drafter.head_vocab: -1 (the default) a quarter of the vocabulary, at least 1,024 ids;
   * 0 the whole vocabulary. */
  const int32_t dvocab = rt->hp[1].n_vocab;
  int32_t head = cfg->spec_head_vocab;
  if (head < 0) head = dvocab / 4 < 1024 ? 1024 : dvocab / 4;
  /* A sampled draft row is widened to the vocabulary on the host before the sampler reads
   * it, and a device sampler reads device memory: the narrow head is a CPU-device lever. */
  if (head > 0 && head < dvocab && !e->logits_host) {
    if (cfg->spec_head_vocab > 0)
      weir_log(WEIR_LOG_WARN, LOG_COMPONENT,
               "drafter.head_vocab = %d applies on the cpu device only: the draft's LM head "
               "covers the whole vocabulary here", (int)cfg->spec_head_vocab);
    head = 0;
  }
  if (head > 0 && head < dvocab) {
    if (!(e->dhead = draft_head_ids(rt->tok, dvocab, head))) return WEIR_E_NOMEM;
    dmo.head_vocab = head;
    dmo.head_ids = e->dhead;
  }
  rc = weir_runtime_load_model(rt, 1, cfg, &dmo, 0, err, errlen);
  if (rc != WEIR_OK) return rc;
  e->draft = rt->model[1];
  weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
           "draft model %s: %d layers, dim %d; drafts %d tokens per sequence and step",
           draft_path, rt->hp[1].n_layer, rt->hp[1].n_embd, e->spec_k);
  return WEIR_OK;
}

/* model.chat_template_file (vLLM's --chat-template FILE): a Jinja template replacing the
 * GGUF's. It must parse: an operator who names a file means that template, so a fallback to a
 * built-in would serve another prompt format without a word. */
static int chat_template_from_file(weir_engine *e, const weir_config *cfg, const char *bos,
                                   const char *eos, char *err, size_t errlen) {
  const char *path = cfg->chat_template_file;
  FILE *f = fopen(path, "rb");
  if (!f) {
    weir_set_err(err, errlen, "chat template %s: %s", path, strerror(errno));
    return WEIR_E_IO;
  }
  enum { MAX_TEMPLATE = 1 << 20 };
  char *text = malloc(MAX_TEMPLATE + 1);
  size_t n = text ? fread(text, 1, MAX_TEMPLATE + 1, f) : 0;
  int rc = WEIR_OK;
  fclose(f);
  if (!text) return WEIR_E_NOMEM;
  if (n > MAX_TEMPLATE) {
    weir_set_err(err, errlen, "chat template %s: larger than %d bytes", path, MAX_TEMPLATE);
    rc = WEIR_E_RANGE;
    goto free_text;
  }
  rc = weir_chat_renderer_create(text, n, NULL, bos, eos, &e->chat, err, errlen);
  if (rc != WEIR_OK) goto free_text;
  if (strcmp(weir_chat_renderer_name(e->chat), "jinja") != 0) {
    weir_set_err(err, errlen, "chat template %s does not parse: %s", path,
                 weir_chat_renderer_note(e->chat));
    weir_chat_renderer_free(e->chat);
    e->chat = NULL;
    rc = WEIR_E_FORMAT;
    goto free_text;
  }
  weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "chat template from %s (not the model's own)", path);
free_text:
  free(text);
  return rc;
}

/* The chat template: a configured built-in, else the model's own Jinja template, else the
 * built-in detected from it (ChatML when none matches). A note on the choice is logged. */
static int load_chat_template(weir_engine *e, const weir_config *cfg, char *err,
                              size_t errlen) {
  weir_tok_str bos = {"", 0}, eos = {"", 0};
  int32_t b = weir_tokenizer_bos(e->tok), s = weir_tokenizer_eos(e->tok);
  if (b >= 0) weir_tokenizer_token_text(e->tok, b, &bos);
  if (s >= 0) weir_tokenizer_token_text(e->tok, s, &eos);
  char *bos_s = strndup(bos.ptr, bos.len), *eos_s = strndup(eos.ptr, eos.len);
  int rc = !bos_s || !eos_s      ? WEIR_E_NOMEM
           : cfg->chat_template_file ? chat_template_from_file(e, cfg, bos_s, eos_s, err, errlen)
                                 : weir_chat_renderer_from_gguf(e->rt.gguf[0], cfg->chat_template,
                                                                bos_s, eos_s, &e->chat, err,
                                                                errlen);
  free(bos_s);
  free(eos_s);
  if (rc != WEIR_OK) return rc;
  if (weir_chat_renderer_note(e->chat)[0])
    weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "%s: %s", cfg->model_path,
             weir_chat_renderer_note(e->chat));
  else if (err[0])
    weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "%s: %s", cfg->model_path, err);
  err[0] = '\0';
  return WEIR_OK;
}

/* The scheduler over the pool's bookkeeping, the end-of-generation tokens, the step scratch
 * and the structured-output index of the vocabulary. */
static int setup_steps(weir_engine *e, const weir_config *cfg, char *err, size_t errlen) {
  weir_sched_config sc = {.max_num_seqs = e->max_seqs_step,
                          .max_num_batched_tokens = e->max_tokens_step,
                          .watermark_blocks = -1,
                          .max_prompt_logits = e->max_prompt_rows};
  int rc = weir_sched_policy_parse(cfg->policy, &sc.policy);
  if (rc != WEIR_OK) {
    snprintf(err, errlen, "scheduler.policy: \"%s\" is not one of fcfs, priority", cfg->policy);
    return rc;
  }
  if ((rc = weir_sched_create(&sc, e->kv, &e->sched)) != WEIR_OK ||
      (rc = collect_eog(e)) != WEIR_OK || (rc = alloc_scratch(e)) != WEIR_OK)
    return rc;
  /* Structured output: the vocabulary's byte strings once; up to 64 compiled constraints
   * (and their token classes, 256 MiB in all) kept by text. */
  e->mask_threads = cfg->threads; /* 0: one per core */
  /* On a CPU device with one thread the engine thread does all of a step's work, so the
   * speculation policy times steps by that thread's CPU time: what each length costs, which
   * preemption on a busy machine would otherwise blur into noise the policy chases. */
  e->spec_cpu_clock = cfg->threads == 1 && e->logits_host; /* (a CPU device) */
  rc = weir_grammar_vocab_from_tokenizer(e->tok, e->eog_ids, e->num_eog, &e->gvocab);
  if (rc == WEIR_OK)
    rc = weir_constraint_cache_create(e->gvocab, 64, (size_t)256 << 20, &e->gcache);
  if (rc != WEIR_OK)
    snprintf(err, errlen, "could not index the vocabulary for structured output");
  return rc;
}

/* WEIR_SPEC_FORCE_K's hook: the length the environment asked for, at every step. */
static int32_t env_force_k(void *user, uint64_t step) {
  (void)step;
  return (int32_t)(intptr_t)user;
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
  if (opts) {
    e->spec_force_k = opts->spec_force_k;
    e->spec_on_step = opts->spec_on_step;
    e->spec_on_drafts = opts->spec_on_drafts;
    e->spec_user = opts->spec_user;
    e->spec_eager_catch_up = opts->spec_eager_catch_up;
    e->spec_host_argmax = opts->spec_host_argmax;
  }
  /* A developer's switch, not configuration: WEIR_SPEC_FORCE_K=k holds every step's
   * speculation length at k (capped by drafter.num_speculative_tokens) whatever the policy
   * says, so a profile can measure, e.g., what a draft model costs on steps that draft
   * nothing (k = 0; scripts/bench-draft-idle.sh). A test's own hook wins. */
  const char *force_env = getenv("WEIR_SPEC_FORCE_K");
  if (!e->spec_force_k && force_env && force_env[0]) {
    char *end = NULL;
    const long k = strtol(force_env, &end, 10);
    if (end && *end == 0 && k >= 0 && k <= 64) {
      e->spec_force_k = env_force_k;
      e->spec_user = (void *)(intptr_t)k;
    }
  }
  /* A developer's switch, not configuration: the step profile costs nothing when off. */
  const char *prof_env = getenv("WEIR_STEP_PROFILE");
  e->prof_on = prof_env && prof_env[0] && strcmp(prof_env, "0") != 0;
  /* A developer's switch: every run of the speculation policy logged as it ends. */
  const char *trace_env = getenv("WEIR_SPEC_TRACE");
  e->spec_trace = trace_env && trace_env[0] && strcmp(trace_env, "0") != 0;
  /* A developer's switch: every step's wall and CPU time and contents, one line each, for
   * the tails a mean profile hides. A path that cannot be opened is logged and ignored. */
  const char *step_env = getenv("WEIR_STEP_TRACE");
  if (step_env && step_env[0]) {
    e->step_trace = fopen(step_env, "w");
    if (!e->step_trace)
      weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "WEIR_STEP_TRACE: cannot open %s: %s", step_env,
               strerror(errno));
    else
      fprintf(e->step_trace, "# start_s wall_us cpu_us seqs tokens prefill_tokens k drafts "
                             "tokens_out preempted max_context propose_sched_us draft_us forward_us "
                             "sample_us\n");
  }
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->wake, NULL);
  pthread_cond_init(&e->embed_done, NULL);
  atomic_init(&e->next_id, 1);
  if (metrics) {
    e->metrics = metrics;
  } else {
    rc = weir_metrics_create(&e->metrics);
    if (rc != WEIR_OK) goto fail;
    e->own_metrics = 1;
  }
  rc = weir__engine_metrics_init(e->metrics, &e->em);
  if (rc != WEIR_OK) goto fail;

  /* The model's file first: it names the model, and every metric of a replica says which
   * model it serves (docs/metrics.md), plugin metrics included. */
  if ((rc = weir_runtime_open(&e->rt, cfg->model_path, err, sizeof err)) != WEIR_OK) goto fail;
  e->tok = e->rt.tok;
  if ((rc = resolve_model_names(e, cfg)) != WEIR_OK ||
      (rc = weir_metrics_set_label(e->metrics, "model_name", e->model_name)) != WEIR_OK)
    goto fail;
  rc = weir_runtime_load_plugins(&e->rt, cfg, e->metrics, err, sizeof err);
  if (rc != WEIR_OK) {
    char why[768];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, sizeof err, "could not load the plugins the configuration names: %s", why);
    goto fail;
  }
  /* The speculation metrics count positions up to the drafter's length, known once it is
   * loaded (without a drafter: what the configuration would give, for a stable scrape). */
  if ((rc = setup_sampling(e, cfg, err, sizeof err)) != WEIR_OK ||
      (rc = weir__engine_metrics_spec_init(e->metrics, &e->em,
                                           e->spec_k ? e->spec_k
                                                     : spec_tokens(&e->rt.plugins, cfg))) !=
          WEIR_OK ||
      (rc = set_step_limits(e, cfg, err, sizeof err)) != WEIR_OK ||
      (rc = load_models(e, cfg, progress, err, sizeof err)) != WEIR_OK)
    goto fail;
  const weir_llama_hparams *hp = &e->rt.hp[0];
  e->vocab = hp->n_vocab;
  if (weir_tokenizer_n_tokens(e->tok) > e->vocab) {
    snprintf(err, sizeof err, "%s: the tokenizer has %d tokens but the model only %d rows",
             cfg->model_path, weir_tokenizer_n_tokens(e->tok), e->vocab);
    rc = WEIR_E_FORMAT;
    goto fail;
  }
  if ((rc = setup_steps(e, cfg, err, sizeof err)) != WEIR_OK ||
      (rc = load_chat_template(e, cfg, err, sizeof err)) != WEIR_OK)
    goto fail;

  e->service = (weir_service){.tok = e->tok, .chat = e->chat, .gcache = e->gcache,
                              .vocab_size = e->vocab, .context_length = e->ctx_len};
  if ((rc = weir__engine_embed_setup(e, cfg, err, sizeof err)) != WEIR_OK) goto fail;
  e->max_waiting = cfg->max_waiting;
  e->default_timeout_ms = cfg->request_timeout_ms;
  weir_kv_stats ks;
  weir_kv_cache_stats(e->kv, &ks);
  e->stats.kv_blocks_total = ks.num_blocks;
  weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
           "model %s: %s, %d layers, dim %d, %d heads (%d KV), vocab %d, context %d; weights "
           "%.1f MiB; KV cache %d blocks of %d tokens (%.1f MiB, %s)",
           e->model_name, hp->arch_name, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv,
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
  /* Named, so that tools (top -H, perf, scripts/hostile-load.py) tell it from the loop and
   * the work pools. */
  pthread_setname_np(e->thread, "weir-engine");
  *out = e;
  return WEIR_OK;

fail:
  if (err[0]) weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "%s", err);
  else weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "engine start failed: %s", weir_strerror(rc));
  engine_free(e);
  return rc;
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
  weir__engine_spec_log(e);
  weir__engine_prof_log(e);
  if (e->step_trace) fclose(e->step_trace);
  /* Requests submitted after the thread saw `stopping` never reached it. */
  for (engine_req *r = e->incoming_head, *n; r; r = n) {
    n = r->next;
    weir_gen_event ev = {.request_id = r->id, .finish = WEIR_FINISH_ABORT, .text = ""};
    ev.prompt_tokens = r->num_prompt;
    weir__engine_metrics_finished(&e->em, WEIR_FINISH_ABORT, r->num_prompt, 0, &ev.timing);
    r->cb(r->user, &ev);
    weir__engine_req_free(r);
  }
  engine_free(e);
}

