/* The OpenAI-compatible API on top of the transport: routing, authentication, the life of a
 * generation job (one engine request per prompt and choice), engine events queued from the
 * engine thread and handled on the loop, and the endpoints other than generation. Request
 * parsing is api_params.c's, rendering api_render.c's. Loop thread only unless a comment
 * says otherwise. docs/http-api.md describes the behaviour; keep the two in step. */
#include <ctype.h>
#include <malloc.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http/api_internal.h"
#include "util/log.h"
#include "util/utf8.h"
#include "weir/status.h"


/* Whether `name` is one of the names this server answers to: the served model name or one of
 * its aliases (server.served_model_name as a list; the engine owns the list). */
int weir__api_serves_model(const weir__http_server *s, const char *name) {
  for (int32_t i = 0; i < s->info.num_model_names; i++)
    if (!strcmp(name, s->info.model_names[i])) return 1;
  return !strcmp(name, s->model_name);
}

int weir__api_check_model(const weir__http_server *s, const cJSON *model, api_error *e) {
  if (cJSON_IsString(model) && weir__api_serves_model(s, model->valuestring)) return 0;
  return weir__api_fail(e, 404, "model", "model_not_found", "The model `%s` does not exist.",
                        cJSON_IsString(model) ? model->valuestring : "?");
}

/* A key of a tokenize or detokenize body that is not the endpoint's own: `model` is checked,
 * anything else refused as unsupported. 0 or -1 with e filled. */
static int other_key(const weir__http_server *s, const cJSON *it, api_error *e) {
  if (!strcmp(it->string, "model")) return weir__api_check_model(s, it, e);
  return weir__api_unsupported(e, it->string);
}

static uint64_t g_rng;
void weir__api_make_id(char *out, size_t cap, const char *prefix) {
  if (!g_rng) g_rng = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ uv_hrtime();
  static const char digits[] = "0123456789abcdef";
  char hex[33];
  for (int i = 0; i < 2; i++) {
    /* splitmix64: ids only need to be unique, not secret. */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    /* %016llx by hand: every request makes an id, and a cache hit does little else. */
    for (int k = 15; k >= 0; k--, z >>= 4) hex[16 * i + k] = digits[z & 15];
  }
  hex[32] = 0;
  size_t pn = strlen(prefix);
  if (cap && pn + 34 <= cap) {
    memcpy(out, prefix, pn);
    out[pn] = '-';
    memcpy(out + pn + 1, hex, 33);
  } else {
    snprintf(out, cap, "%s-%s", prefix, hex);
  }
}

static void choice_release(api_choice *ch) {
  weir_buf_free(&ch->text);
  weir_buf_free(&ch->rec);
  cJSON_Delete(ch->lp_tokens);
  cJSON_Delete(ch->lp_values);
  cJSON_Delete(ch->lp_top);
  cJSON_Delete(ch->lp_offsets);
  free(ch->error);
  free(ch->itl_ms);
  free(ch->u.spare);
  free(ch->stop_word);
}

static void gen_dispose(weir__http_server *s, api_gen *a);
static void join_release(weir__api_job *leader);
static void follower_unlink(weir__api_job *f);

static void job_free(weir__api_job *job) {
  weir__http_server *s = job->s;
  if (job->leading) join_release(job); /* its followers are answered live */
  if (job->leader) follower_unlink(job);
  if (job->join_a) gen_dispose(s, job->join_a);
  cJSON_Delete(job->join_echo);
  weir_buf_free(&job->front_body);
  free(job->front_auth);
  if (job->r) job->r->job = NULL;
  for (int i = 0; i < job->num_choices; i++) choice_release(&job->choices[i]);
  free(job->choices);
  if (job->echo_text)
    for (int i = 0; i < job->num_prompts; i++) free(job->echo_text[i]);
  free(job->echo_text);
  free(job->echo_len);
  free(job->first_token);
  if (job->prompt_offsets)
    for (int i = 0; i < job->num_prompts; i++) free(job->prompt_offsets[i]);
  free(job->prompt_offsets);
  free(job->tool_named);
  weir__rcache_ctx_free(&job->cache);
  cJSON_Delete(job->resp_echo);
  cJSON_Delete(job->llama_settings);
  if (job->prev) job->prev->next = job->next;
  else s->jobs = job->next;
  if (job->next) job->next->prev = job->prev;
  s->num_jobs--;
  free(job);
  s->job_finished(s);
}

static void client_gone(weir__api_job *job) {
  job->r = NULL;
  job->client_gone = 1;
  if (job->leader) {
    /* A follower holds nothing in the engine: it leaves its leader and is freed now. */
    job_free(job);
    return;
  }
  /* A leader goes on generating while others wait for its answer (the last of them to leave
   * aborts it: follower_unlink). */
  if (job->followers) return;
  for (int i = 0; i < job->num_choices; i++) {
    api_choice *ch = &job->choices[i];
    if (ch->submitted && !ch->finished) weir_engine_abort(job->s->engine, ch->engine_id);
  }
}

static void set_paused(weir__api_job *job, int paused) {
  if (job->paused == paused) return;
  job->paused = paused;
  for (int i = 0; i < job->num_choices; i++) {
    api_choice *ch = &job->choices[i];
    if (!ch->submitted || ch->finished) continue;
    if (paused) weir_engine_pause(job->s->engine, ch->engine_id);
    else weir_engine_resume(job->s->engine, ch->engine_id);
  }
}

void weir__api_abort_all(weir__http_server *s) {
  s->aborted_all = 1;
  for (weir__api_job *j = s->jobs; j; j = j->next)
    for (int i = 0; i < j->num_choices; i++) {
      api_choice *ch = &j->choices[i];
      if (ch->submitted && !ch->finished) weir_engine_abort(s->engine, ch->engine_id);
    }
}

/* ---- metrics ---------------------------------------------------------------------------- */

/* The metrics a client observes; the engine's own families (outcomes, tokens, queue,
 * prefill and decode times, batch, KV cache, speculation) are registered by the engine
 * layer, here already so that they exist while the model loads. */
int weir__api_metrics_register(weir__http_server *s) {
  weir__http_metrics *x = &s->m;
  int rc = weir_engine_register_metrics(s->metrics);
  const struct {
    const char *name, *help;
    weir_metric **out;
  } defs[] = {
      {"time_to_first_token_seconds", "Time from request arrival to its first token.",
       &x->ttft},
      {"inter_token_latency_seconds", "Time between consecutive output tokens of a request.",
       &x->itl},
      {"time_per_output_token_seconds",
       "Per request: (end-to-end time - time to first token) / (output tokens - 1).",
       &x->tpot},
      {"e2e_request_latency_seconds", "Time from request arrival to its last token.",
       &x->e2e},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0] && rc == WEIR_OK; i++)
    rc = weir_metrics_register(s->metrics, defs[i].name, defs[i].help, WEIR_METRIC_HISTOGRAM,
                               NULL, 0, NULL, defs[i].out);
  /* Stalls worth seeing are from about a millisecond (the loop's poll wakes at millisecond
   * granularity, so up to 1 ms is its resolution, not a stall) to seconds. */
  static const double lag_buckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                       0.05,   0.1,   0.25,  0.5,   1,    2.5};
  if (rc == WEIR_OK)
    rc = weir_metrics_register(
        s->metrics, "event_loop_lag_seconds",
        "How late the HTTP event loop ran a timer due every 10 ms: the time the loop could "
        "not react (a slow callback, or the loop thread waiting for a CPU).",
        WEIR_METRIC_HISTOGRAM, lag_buckets, (int)(sizeof lag_buckets / sizeof lag_buckets[0]),
        NULL, &x->loop_lag);
  /* Requests per connection is what keep-alive changes (and what a client without a
   * connection pool costs the server): the connections are counted beside the responses. */
  if (rc == WEIR_OK)
    rc = weir_metrics_register(s->metrics, "http_connections_total",
                               "TCP connections accepted (refused ones included).",
                               WEIR_METRIC_COUNTER, NULL, 0, NULL, &x->conns);
  return rc;
}

/* ---- engine events ---------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void choice_finished(weir__api_job *job, api_choice *ch, const weir__queued_event *qe) {
  weir__http_server *s = job->s;
  const weir_gen_event *ev = &qe->ev;
  ch->finished = 1;
  ch->finish = ev->finish;
  if (ev->stop_string) ch->stop_word = strdup(ev->stop_string);
  if (ev->finish == WEIR_FINISH_ERROR) {
    ch->status = ev->status;
    if (ev->error) ch->error = strdup(ev->error);
  }
  double e2e = (double)(qe->time_ns - job->arrival_ns) / 1e9;
  double ttft = ch->first_ns ? (double)(ch->first_ns - job->arrival_ns) / 1e9 : -1;
  weir_metric_record(s->m.e2e, e2e);
  if (ttft >= 0 && ch->completion_tokens > 1)
    weir_metric_record(s->m.tpot, (e2e - ttft) / (ch->completion_tokens - 1));

  if (s->cfg->log_requests) {
    double mean = 0, p95 = 0;
    if (ch->num_itl > 0) {
      for (int i = 0; i < ch->num_itl; i++) mean += ch->itl_ms[i];
      mean /= ch->num_itl;
      qsort(ch->itl_ms, (size_t)ch->num_itl, sizeof(double), cmp_double);
      int idx = (int)ceil(0.95 * ch->num_itl) - 1;
      p95 = ch->itl_ms[idx < 0 ? 0 : idx];
    }
    double tps = e2e > 0 ? ch->completion_tokens / e2e : 0;
    weir_buf b = {0};
    weir_buf_printf(&b,
                     "{\"event\":\"request\",\"id\":\"%s-%d\",\"endpoint\":\"%s\","
                     "\"prompt_tokens\":%d,\"cached_tokens\":%d,\"generated_tokens\":%d,"
                     "\"ttft_ms\":%.3f,\"itl_mean_ms\":%.3f,\"itl_p95_ms\":%.3f,"
                     "\"e2e_ms\":%.3f,\"tokens_per_s\":%.2f,\"num_preemptions\":%d,"
                     "\"finish_reason\":\"%s\",\"client_disconnected\":%s}",
                     job->id, ch->index, job->responses ? "responses" : job->chat ? "chat" : "completions", ch->prompt_tokens,
                     ch->cached_tokens, ch->completion_tokens, ttft >= 0 ? ttft * 1e3 : 0.0,
                     mean, p95, e2e * 1e3, tps, ch->num_preemptions,
                     weir__api_finish_name(ev->finish) ? weir__api_finish_name(ev->finish) : "none",
                     job->client_gone ? "true" : "false");
    if (!b.oom) weir_log_record(b.p);
    weir_buf_free(&b);
  }
}

static void record_token_timing(weir__api_job *job, api_choice *ch, uint64_t t, int ntok) {
  weir__http_server *s = job->s;
  if (!ch->first_ns) {
    ch->first_ns = t;
    weir_metric_record(s->m.ttft, (double)(t - job->arrival_ns) / 1e9);
    ntok--; /* the first token has no inter-token latency */
  }
  /* Several tokens in one event (speculative decoding) share the gap evenly. */
  if (ntok > 0 && ch->last_ns) {
    double gap = (double)(t - ch->last_ns) / 1e9 / ntok;
    for (int i = 0; i < ntok; i++) {
      weir_metric_record(s->m.itl, gap);
      if (ch->num_itl == ch->cap_itl) {
        int cap = ch->cap_itl ? ch->cap_itl * 2 : 64;
        double *p = realloc(ch->itl_ms, sizeof(double) * (size_t)cap);
        if (!p) break;
        ch->itl_ms = p;
        ch->cap_itl = cap;
      }
      ch->itl_ms[ch->num_itl++] = gap * 1e3;
    }
  }
  ch->last_ns = t;
}

/* The four parallel arrays of a non-streamed completion's logprobs, made on first use. */
static int completion_lp_arrays(api_choice *ch) {
  if (!ch->lp_tokens) {
    ch->lp_tokens = cJSON_CreateArray();
    ch->lp_values = cJSON_CreateArray();
    ch->lp_top = cJSON_CreateArray();
    ch->lp_offsets = cJSON_CreateArray();
  }
  return ch->lp_tokens && ch->lp_values && ch->lp_top && ch->lp_offsets;
}

/* echo with logprobs: the prompt's entries (the first token's logprob is null) precede the
 * output's, and output offsets count from the end of the echoed prompt. Streamed, they go
 * out with the echo in the choice's first chunk. Called once per choice, at its first event:
 * the engine's prompt logprobs event, or (a one-token prompt, an early end) whatever comes. */
static void prompt_logprobs(weir__api_job *job, api_choice *ch, const weir_gen_event *ev) {
  ch->prompt_lp_done = 1;
  const int pi = ch->prompt_index;
  const size_t *offs = job->prompt_offsets[pi];
  const size_t len = job->echo_len[pi];
  if (job->stream) {
    if (!job->r) return;
    cJSON *lp = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(lp, "tokens");
    cJSON *b = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *c = cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON *d = cJSON_AddArrayToObject(lp, "text_offset");
    if (a && b && c && d)
      weir__api_completion_prompt_lp(job->s, job->logprobs, job->first_token[pi],
                                     ev->prompt_logprobs, ev->num_prompt_logprobs, offs, len, a,
                                     b, c, d);
    weir__api_stream_choice_chunk(job, ch, job->echo_text[pi], job->echo_len[pi], lp, NULL, 0);
  } else if (completion_lp_arrays(ch)) {
    weir__api_completion_prompt_lp(job->s, job->logprobs, job->first_token[pi],
                                   ev->prompt_logprobs, ev->num_prompt_logprobs, offs, len,
                                   ch->lp_tokens, ch->lp_values, ch->lp_top, ch->lp_offsets);
  }
  ch->lp_offset = len;
}

/* A streamed chat reply that may call tools: content goes out as long as it cannot be the
 * start of a call (tool_calls.h); the rest is held, and at the end read as calls (sent as
 * tool_calls deltas) or, when it is none, sent as content. A forced call is held whole. */
static void stream_with_tools(weir__api_job *job, api_choice *ch, const weir_gen_event *ev,
                              cJSON *lp, const char *finish) {
  weir_buf_append(&ch->text, ev->text, ev->text_len);
  size_t safe = ch->content_sent;
  if (job->tool_mode == WEIR_TOOLS_AUTO && ch->text.p) {
    int in_call = 0;
    size_t upto = weir_tool_stream_safe(ch->text.p, ch->text.len, ch->content_sent, &in_call);
    if (upto > safe) safe = upto;
  }
  if (safe > ch->content_sent || lp)
    weir__api_stream_choice_chunk(job, ch, ch->text.p ? ch->text.p + ch->content_sent : NULL,
                                  safe - ch->content_sent, lp, NULL, 0);
  ch->content_sent = safe;
  if (finish) weir__api_stream_tool_finish(job, ch, ev->finish);
}

/* A finished job's answer into the response cache, when every choice ended normally (stop or
 * length: an aborted, failed or timed-out answer is not one to repeat). */
static void front_fill(weir__api_job *job, const char *rec, size_t rec_len, int from_store);
static void join_serve(weir__api_job *leader, const char *rec, size_t rec_len);

static void store_answer(weir__api_job *job) {
  const weir_buf *recs[MAX_CHOICES];
  uint32_t counts[MAX_CHOICES];
  if (job->num_choices > MAX_CHOICES) return;
  for (int i = 0; i < job->num_choices; i++) {
    const api_choice *ch = &job->choices[i];
    if ((ch->finish != WEIR_FINISH_STOP && ch->finish != WEIR_FINISH_LENGTH) || ch->rec.oom ||
        !ch->rec_events)
      return;
    recs[i] = &ch->rec;
    counts[i] = ch->rec_events;
  }
  weir_buf v = {0};
  if (weir__rcache_build(&v, recs, counts, job->num_choices) == 0) {
    weir__rcache_store(job->s, &job->cache, &v, job->num_choices);
    front_fill(job, v.p, v.len, 1);
    join_serve(job, v.p, v.len);
  }
  weir_buf_free(&v);
}

static void on_event(weir__http_server *s, weir__queued_event *qe) {
  api_choice *ch = (api_choice *)qe->user;
  weir__api_job *job = ch->job;
  const weir_gen_event *ev = &qe->ev;
  if (job->echo && job->logprobs >= 0 && !ch->prompt_lp_done && ev->finish != WEIR_FINISH_ERROR)
    prompt_logprobs(job, ch, ev);
  ch->prompt_tokens = ev->prompt_tokens;
  ch->cached_tokens = ev->cached_tokens;
  if (ev->completion_tokens > ch->completion_tokens) ch->completion_tokens = ev->completion_tokens;
  ch->num_preemptions = ev->num_preemptions;
  if (ev->num_tokens > 0) record_token_timing(job, ch, qe->time_ns, ev->num_tokens);
  if (job->cache.may_store && ev->finish != WEIR_FINISH_ERROR)
    weir__rcache_record(&ch->rec, &ch->rec_events, ev);
  const char *finish = ev->finish != WEIR_FINISH_NONE ? weir__api_finish_name(ev->finish) : NULL;

  if (job->r && job->stream) {
    cJSON *lp = NULL;
    if (job->logprobs >= 0 && ev->logprobs && ev->num_tokens > 0) {
      if (job->chat) {
        lp = cJSON_CreateObject();
        if (lp) {
          cJSON_AddItemToObject(
              lp, "content",
              weir__api_chat_lp_content(s, job->logprobs, ev->logprobs, ev->num_tokens));
          cJSON_AddNullToObject(lp, "refusal");
        }
      } else {
        lp = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(lp, "tokens");
        cJSON *b = cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON *c = cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON *d = cJSON_AddArrayToObject(lp, "text_offset");
        for (int i = 0; a && b && c && d && i < ev->num_tokens; i++)
          weir__api_completion_lp_append(s, job->logprobs, &ev->logprobs[i], a, b, c, d,
                                         &ch->lp_offset);
      }
    }
    /* An error ends the stream with an error event instead of a finish_reason. */
    const char *fr = ev->finish == WEIR_FINISH_ERROR ? NULL : finish;
    if (job->llama) {
      cJSON_Delete(lp);
      weir__api_llama_stream_event(job, ch, ev);
    } else if (job->responses) {
      cJSON_Delete(lp);
      weir__api_resp_stream_event(job, ch, ev);
    } else if (job->tool_mode != WEIR_TOOLS_OFF) {
      stream_with_tools(job, ch, ev, lp, fr);
    } else if (ev->text_len > 0 || lp || fr) {
      weir__api_stream_choice_chunk(job, ch, ev->text, ev->text_len, lp, fr, 0);
    }
  } else if (job->r) {
    weir_buf_append(&ch->text, ev->text, ev->text_len);
    if (job->logprobs >= 0 && ev->logprobs && ev->num_tokens > 0) {
      if (job->chat) {
        if (!ch->lp_tokens) ch->lp_tokens = cJSON_CreateArray();
        cJSON *part = weir__api_chat_lp_content(s, job->logprobs, ev->logprobs, ev->num_tokens);
        cJSON *it = part ? part->child : NULL;
        while (it && ch->lp_tokens) {
          cJSON *n = it->next;
          cJSON_AddItemToArray(ch->lp_tokens, cJSON_DetachItemViaPointer(part, it));
          it = n;
        }
        cJSON_Delete(part);
      } else {
        const int ok = completion_lp_arrays(ch);
        for (int i = 0; ok && i < ev->num_tokens; i++)
          weir__api_completion_lp_append(s, job->logprobs, &ev->logprobs[i], ch->lp_tokens,
                               ch->lp_values, ch->lp_top, ch->lp_offsets, &ch->lp_offset);
      }
    }
  }

  if (ev->finish != WEIR_FINISH_NONE) {
    choice_finished(job, ch, qe);
    job->num_finished++;
  }
  free(qe);
  if (job->num_finished < job->num_choices) return;
  /* A leader whose client left still answers its followers (its generation was aborted only
   * when it had none; see client_gone). */
  if (job->cache.may_store && (!job->client_gone || job->followers)) store_answer(job);
  if (job->r) {
    weir__http_req *r = job->r;
    r->job = NULL;
    if (job->llama) {
      weir__api_llama_finish(job);
    } else if (job->responses) {
      if (job->stream) weir__api_resp_stream_finish(job);
      else weir__api_resp_respond_full(job);
    } else if (job->stream) {
      weir__api_stream_finish(job);
    } else {
      weir__api_respond_full(job);
    }
    job->r = NULL;
  }
  job_free(job);
}

/* ---- engine events ------------------------------------------------------------------- */

/* Engine thread: copy the event (its memory is borrowed for the call) and wake the loop. */
static void on_engine_event(weir__http_server *s, void *user, const weir_gen_event *ev) {
  size_t text_len = ev->text ? ev->text_len : 0;
  size_t ntok = ev->num_tokens > 0 ? (size_t)ev->num_tokens : 0;
  size_t nlp = ev->logprobs ? ntok : 0;
  size_t nplp = ev->prompt_logprobs && ev->num_prompt_logprobs > 0
                    ? (size_t)ev->num_prompt_logprobs : 0;
  size_t err_len = ev->error ? strlen(ev->error) + 1 : 0;
  size_t stop_len = ev->stop_string ? strlen(ev->stop_string) + 1 : 0;
  size_t size = sizeof(weir__queued_event) + (nlp + nplp) * sizeof(weir_sample_result) +
                ntok * sizeof(int32_t) + text_len + 1 + err_len + stop_len;
  weir__queued_event *qe = malloc(size);
  if (!qe) {
    /* Losing a non-final event only loses text; a final one must arrive, so it takes the
     * spare preallocated at submit, without text. */
    weir__engine_user *u = user;
    weir_log(WEIR_LOG_ERROR, "http", "out of memory queueing an engine event");
    if (ev->finish == WEIR_FINISH_NONE || !u->spare) return;
    qe = u->spare;
    u->spare = NULL;
    text_len = ntok = nlp = nplp = err_len = stop_len = 0;
  }
  qe->next = NULL;
  qe->user = user;
  qe->time_ns = uv_hrtime();
  qe->ev = *ev;
  char *p = (char *)(qe + 1);
  weir_sample_result *lp = (weir_sample_result *)p;
  if (nlp) memcpy(lp, ev->logprobs, nlp * sizeof *lp);
  qe->ev.logprobs = nlp ? lp : NULL;
  p += nlp * sizeof *lp;
  weir_sample_result *plp = (weir_sample_result *)p;
  if (nplp) memcpy(plp, ev->prompt_logprobs, nplp * sizeof *plp);
  qe->ev.prompt_logprobs = nplp ? plp : NULL;
  qe->ev.num_prompt_logprobs = (int32_t)nplp;
  p += nplp * sizeof *plp;
  int32_t *tok = (int32_t *)p;
  if (ntok) memcpy(tok, ev->tokens, ntok * sizeof *tok);
  qe->ev.tokens = tok;
  qe->ev.num_tokens = (int32_t)ntok;
  p += ntok * sizeof *tok;
  if (text_len) memcpy(p, ev->text, text_len);
  p[text_len] = '\0';
  qe->ev.text = p;
  qe->ev.text_len = text_len;
  p += text_len + 1;
  if (err_len) {
    memcpy(p, ev->error, err_len);
    qe->ev.error = p;
  } else {
    qe->ev.error = NULL;
  }
  p += err_len;
  if (stop_len) {
    memcpy(p, ev->stop_string, stop_len);
    qe->ev.stop_string = p;
  } else {
    qe->ev.stop_string = NULL;
  }
  weir__queued_event *old = atomic_load_explicit(&s->ev_stack, memory_order_relaxed);
  do {
    qe->next = old;
  } while (!atomic_compare_exchange_weak_explicit(&s->ev_stack, &old, qe, memory_order_release,
                                                  memory_order_relaxed));
  const uint64_t one = 1;
  ssize_t n = write(s->work_fd, &one, sizeof one); /* see work_post */
  (void)n;
}

/* The engine's callback carries only `user`: a weir__engine_user. */
static void engine_cb(void *user, const weir_gen_event *ev) {
  on_engine_event(((weir__engine_user *)user)->srv, user, ev);
}

static void work_done_all(weir__api_work *w);

/* On the loop: the engine events queued since the last call, in the order they came. */
static void events_drain(weir__http_server *s) {
  weir__queued_event *qe = atomic_exchange_explicit(&s->ev_stack, NULL, memory_order_acquire);
  weir__queued_event *fifo = NULL;
  while (qe) {
    weir__queued_event *next = qe->next;
    qe->next = fifo;
    fifo = qe;
    qe = next;
  }
  while (fifo) {
    weir__queued_event *n = fifo->next;
    on_event(s, fifo);
    fifo = n;
  }
}

/* ---- generation ------------------------------------------------------------------------- */

static int submit_error(int rc, api_error *e) {
  switch (rc) {
  case WEIR_E_BUSY:
    return weir__api_fail(e, 429, NULL, "rate_limit_exceeded",
                          "The server is overloaded: too many requests are waiting. Retry later.");
  case WEIR_E_RANGE:
    return weir__api_fail(e, 400, "max_tokens", "context_length_exceeded",
                          "The prompt plus max_tokens does not fit the model's context length");
  case WEIR_E_INVAL:
    return weir__api_fail(e, 400, NULL, "invalid_value",
                          "The engine refused the request parameters");
  default:
    return weir__api_fail(e, 500, NULL, NULL, "could not queue the request: %s", weir_strerror(rc));
  }
}

static void abandon(weir__api_job *job);

/* Unlinks a job from its request (before answering the request with an error: the answer
 * may free the request) and returns the request. */
static weir__http_req *detach(weir__api_job *job) {
  weir__http_req *r = job->r;
  if (r) r->job = NULL;
  job->r = NULL;
  return r;
}

/* Frees a. A heavy request's (a JSON tree of 60,000 nodes, a 0.9 MB text, a prompt of
 * 200,000 tokens) is freed on the heavy preparation pool, where it was made: freeing it
 * here took the loop milliseconds, and the allocator's lock of the arena that made it. */
static void gen_free_run(void *arg, int cancelled) {
  (void)cancelled; /* freed either way */
  weir__api_gen_free(arg);
  free(arg);
}

static void gen_dispose(weir__http_server *s, api_gen *a) {
  if (!a) return;
  if (a->heavy && s->prep_heavy_pool &&
      weir_workpool_submit(s->prep_heavy_pool, 0, gen_free_run, a) == WEIR_OK)
    return;
  weir__api_gen_free(a);
  free(a);
}

/* A job that failed before its response went out: answers the request with e, frees a, and
 * ends the job (aborting whatever was already queued). */
static void fail_job(weir__api_job *job, api_gen *a, const api_error *e) {
  weir__api_respond_error(detach(job), e);
  gen_dispose(job->s, a);
  abandon(job);
}

/* Queues one engine request per prompt and choice, then starts the stream; takes a (freed
 * here). On a failure the request is answered with the error and what was queued is aborted
 * (the job is freed when their final events arrive). */
static void stream_begin(weir__api_job *job, weir__http_req *r);
static void replay_answer(weir__api_job *job, const char *data, size_t len);

static void submit_choices(weir__api_job *job, api_gen *a) {
  weir__http_server *s = job->s;
  weir__http_req *r = job->r;
  api_error e = {0};
  const int n = a->p.n;
  if (job->cache.hit) {
    /* A hit: the recorded engine events go through the same rendering as live ones. */
    for (int i = 0; i < job->num_choices; i++) {
      api_choice *ch = &job->choices[i];
      ch->u.srv = s;
      ch->job = job;
      ch->index = i;
      ch->prompt_index = i / n;
    }
    gen_dispose(s, a);
    char *data = job->cache.hit; /* owned here: the job is gone after the last event */
    const size_t len = job->cache.hit_len;
    job->cache.hit = NULL;
    if (!strcmp(job->cache.status, "hit-exact")) front_fill(job, data, len, job->joined);
    if (job->stream) weir__http_cork(r);
    stream_begin(job, r);
    replay_answer(job, data, len);
    free(data);
    return;
  }
  for (int pi = 0; pi < a->pl.count; pi++) {
    for (int j = 0; j < n; j++) {
      api_choice *ch = &job->choices[pi * n + j];
      ch->u.srv = s;
      ch->u.spare = malloc(sizeof(weir__queued_event) + 1);
      ch->job = job;
      ch->index = pi * n + j;
      ch->prompt_index = pi;
      if (!ch->u.spare) {
        weir__api_fail(&e, 500, NULL, NULL, "out of memory");
        goto fail_job;
      }
      weir__api_gen_choice(a, pi, j);
      int rc = weir_engine_submit(s->engine, &a->g, engine_cb, ch, &ch->engine_id);
      if (rc != WEIR_OK) {
        submit_error(rc, &e);
        goto fail_job;
      }
      ch->submitted = 1;
    }
  }
  gen_dispose(s, a);
  stream_begin(job, r);
  return;

fail_job:
  fail_job(job, a, &e);
}

/* A streamed reply's head: the SSE headers and the first chunks (chat's role, the echo). */
static void stream_begin(weir__api_job *job, weir__http_req *r) {
  if (job->stream && job->llama) {
    weir__http_stream_start(r, "text/event-stream");
  } else if (job->stream && job->responses) {
    weir__http_stream_start(r, "text/event-stream");
    weir__api_resp_stream_start(job);
  } else if (job->stream) {
    weir__http_stream_start(r, "text/event-stream");
    for (int i = 0; i < job->num_choices; i++) {
      api_choice *ch = &job->choices[i];
      if (job->chat) {
        weir__api_stream_choice_chunk(job, ch, NULL, 0, NULL, NULL, 1);
      } else if (job->echo && job->logprobs < 0) {
        /* With logprobs the echo goes out with the prompt's logprobs (prompt_logprobs). */
        size_t len = job->echo_len[ch->prompt_index];
        if (len)
          weir__api_stream_choice_chunk(job, ch, job->echo_text[ch->prompt_index], len, NULL,
                                        NULL, 0);
      }
    }
  }
}

/* Replays a hit's recorded events, choice by choice, through on_event: the same chunks,
 * usage and finish reasons as the live answer had. The last event frees the job. */
static void replay_answer(weir__api_job *job, const char *data, size_t len) {
  weir__http_server *s = job->s;
  const uint8_t *p = weir__rcache_choices(data), *end = (const uint8_t *)data + len;
  const int num_choices = job->num_choices;
  for (int i = 0; i < num_choices; i++) {
    api_choice *ch = &job->choices[i];
    uint32_t ne = 0;
    weir__rcache_choice(&p, end, &ne); /* checked on the prep pool */
    for (uint32_t k = 0; k < ne; k++) {
      weir_gen_event ev;
      weir__rcache_next_event(&p, end, &ev);
      weir__queued_event *qe = malloc(sizeof *qe + ev.text_len + 1);
      if (!qe) {
        weir_log(WEIR_LOG_ERROR, "http", "out of memory replaying a cached answer");
        api_error e = {0};
        weir__api_fail(&e, 500, NULL, NULL, "out of memory");
        weir__http_req *r = detach(job);
        if (r && r->streaming) weir__http_stream_end(r);
        else if (r) weir__api_respond_error(r, &e);
        abandon(job);
        return;
      }
      char *text = (char *)(qe + 1);
      if (ev.text_len) memcpy(text, ev.text, ev.text_len);
      text[ev.text_len] = '\0';
      qe->next = NULL;
      qe->user = ch;
      qe->time_ns = uv_hrtime();
      qe->ev = ev;
      qe->ev.text = text;
      qe->ev.tokens = NULL;
      on_event(s, qe);
    }
  }
}

/* ---- the front index and joins (docs/response-cache.md) ---------------------------------- */

/* A job's answer (served as an exact hit, or stored) into the front index, under the bytes
 * its request came with. */
static void front_fill(weir__api_job *job, const char *rec, size_t rec_len, int from_store) {
  if (!job->front_ok || !job->s->rcache) return;
  const weir__front_desc d = {.chat = job->chat,
                              .stream = job->stream,
                              .include_usage = job->include_usage,
                              .n = job->n,
                              .num_prompts = job->num_prompts,
                              .responses = job->responses,
                              .tool_mode = job->tool_mode,
                              .parallel_tool_calls = job->parallel_tool_calls,
                              .tool_named = job->tool_named,
                              .resp_echo = job->resp_echo};
  const char *auth = job->front_auth ? job->front_auth : "";
  weir__rcache_front_fill(job->s, job->front_hash, job->front_kind, auth, strlen(auth),
                          job->front_body.p ? job->front_body.p : "", job->front_body.len,
                          &job->cache, &d, rec, rec_len, from_store);
}

/* Keeps the stream the first front hit of an entry wrote (cap: head and chunks) as the
 * entry's rendered body, with the places of the response id and of the "created" time: every
 * later streamed hit of the entry is that body with a new id and time (front_serve_rendered),
 * byte for byte what the replay would write. Kept only when it checks out: the head ends,
 * every chunk carries the id and the time once each, the stream ends with [DONE]. */
#define RENDER_MAX_PATCHES 65536
#define RENDER_MAX_BYTES (1u << 20) /* a rendered stream is ~10x its record: keep it bounded */
static void front_render(weir__http_server *s, weir__front_entry *e, const weir_buf *cap,
                         const char *id, int64_t created) {
  if (cap->oom || !cap->len || e->render || cap->len > UINT32_MAX) return;
  const char *body = memmem(cap->p, cap->len, "\r\n\r\n", 4);
  if (!body) return;
  body += 4;
  const size_t len = cap->len - (size_t)(body - cap->p);
  if (len > RENDER_MAX_BYTES) return;
  char cr[40];
  const int crn = snprintf(cr, sizeof cr, "\"created\":%lld", (long long)created);
  const size_t idn = strlen(id);
  if (crn != 20 || !idn || !memmem(body, len, "data: [DONE]", 12)) return; /* 10 digits */
  int n_id = 0, n_cr = 0;
  for (const char *p = body; (p = memmem(p, len - (size_t)(p - body), id, idn)); p += idn) n_id++;
  for (const char *p = body; (p = memmem(p, len - (size_t)(p - body), cr, (size_t)crn));
       p += crn)
    n_cr++;
  if (n_id == 0 || n_id != n_cr || n_id > RENDER_MAX_PATCHES) return;
  char *render = malloc(len);
  uint32_t *ido = malloc(sizeof *ido * (size_t)n_id), *cro = malloc(sizeof *cro * (size_t)n_id);
  if (!render || !ido || !cro) {
    free(render);
    free(ido);
    free(cro);
    return;
  }
  memcpy(render, body, len);
  int k = 0;
  for (const char *p = body; (p = memmem(p, len - (size_t)(p - body), id, idn)); p += idn)
    ido[k++] = (uint32_t)(p - body);
  k = 0;
  for (const char *p = body; (p = memmem(p, len - (size_t)(p - body), cr, (size_t)crn));
       p += crn)
    cro[k++] = (uint32_t)(p - body) + 10; /* the digits, after "created": */
  weir__rcache_front_render(s, e, render, len, ido, cro, n_id, idn);
}

typedef struct {
  const weir__front_entry *e;
  const char *id, *created;
} render_patch;

/* This answer's id and time into the copy of the rendered body (both fixed-length). */
static void render_patch_apply(void *arg, char *p) {
  const render_patch *rp = arg;
  const weir__front_entry *e = rp->e;
  for (int i = 0; i < e->render_n; i++) {
    memcpy(p + e->render_id_off[i], rp->id, e->render_id_len);
    memcpy(p + e->render_created_off[i], rp->created, 10);
  }
}

/* A streamed front hit from the entry's rendered body: the head, one copy of the body with
 * this answer's id and time patched in, one write (weir__http_stream_whole), straight from
 * the request: no job, no preparation work item. It records the hit's time to first token
 * and end-to-end time (a hit has no gaps between tokens). 0 when the entry has no rendered
 * body or this request cannot take it (not chunked, request log on: the replay writes the
 * log line); the caller replays then. */
static int front_serve_rendered(weir__http_req *r, const weir__front_entry *e) {
  weir__http_server *s = r->srv;
  const weir__front_desc *d = &e->d;
  if (!e->render || !d->stream || d->responses || s->cfg->log_requests || r->http_minor < 1)
    return 0;
  char id[48], created[11];
  weir__api_make_id(id, sizeof id, d->chat ? "chatcmpl" : "cmpl");
  /* The time in ten digits (until 2286), by hand like the id. */
  int64_t now = (int64_t)time(NULL);
  if (strlen(id) != e->render_id_len || now < 1000000000 || now > 9999999999) return 0;
  for (int k = 9; k >= 0; k--, now /= 10) created[k] = (char)('0' + now % 10);
  created[10] = 0;
  r->cache_status = "hit-exact";
  const double t = (double)(uv_hrtime() - r->arrival_ns) / 1e9;
  for (int i = 0; i < d->num_prompts * d->n; i++) {
    weir_metric_record(s->m.ttft, t);
    weir_metric_record(s->m.e2e, t);
  }
  render_patch rp = {e, id, created};
  /* Out of memory: the connection closes, as a replay's short stream would end it. */
  weir__http_stream_whole(r, "text/event-stream", e->render, e->render_len, render_patch_apply,
                          &rp);
  return 1;
}

/* A front hit: the job is made from the entry's description and the recorded answer replayed
 * into it, on the loop, with one write. */
static void front_serve(weir__api_job *job, const weir__front_entry *e) {
  weir__http_server *s = job->s;
  weir__http_req *r = job->r;
  const weir__front_desc *d = &e->d;
  job->chat = d->chat;
  job->stream = d->stream;
  job->include_usage = d->include_usage;
  job->logprobs = -1;
  job->created = (int64_t)time(NULL);
  job->num_prompts = d->num_prompts;
  job->n = d->n;
  weir__api_make_id(job->id, sizeof job->id, d->responses ? "resp" : d->chat ? "chatcmpl" : "cmpl");
  if (d->responses) job->id[4] = '_';
  job->responses = d->responses;
  job->tool_mode = d->tool_mode;
  job->parallel_tool_calls = d->parallel_tool_calls;
  job->num_choices = d->num_prompts * d->n;
  job->cache.status = "hit-exact";
  r->cache_status = job->cache.status;
  if ((d->resp_echo && !(job->resp_echo = cJSON_Duplicate(d->resp_echo, 1))) ||
      (d->tool_named && !(job->tool_named = strdup(d->tool_named))) ||
      !(job->choices = calloc((size_t)job->num_choices, sizeof *job->choices))) {
    api_error err = {0};
    job->num_choices = 0;
    weir__api_fail(&err, 500, NULL, NULL, "out of memory");
    weir__api_respond_error(detach(job), &err);
    abandon(job);
    return;
  }
  for (int i = 0; i < job->num_choices; i++) {
    api_choice *ch = &job->choices[i];
    ch->u.srv = s;
    ch->job = job;
    ch->index = i;
    ch->prompt_index = i / d->n;
  }
  /* A streamed chat or completions hit keeps what it writes as the entry's rendered body. */
  weir_buf cap = {0};
  char id[sizeof job->id];
  const int64_t created = job->created;
  const int render = job->stream && !d->responses && r->http_minor >= 1 && !e->render;
  snprintf(id, sizeof id, "%s", job->id);
  if (render) r->capture = &cap;
  if (job->stream) weir__http_cork(r);
  stream_begin(job, r);
  replay_answer(job, e->rec, e->rec_len); /* ends the job and the stream: r may be gone */
  if (render) front_render(s, (weir__front_entry *)e, &cap, id, created);
  weir_buf_free(&cap);
}

/* The leader in flight with this key, or NULL. */
static weir__api_job *leader_find(weir__http_server *s, const char *key) {
  for (weir__api_job *j = s->leaders; j; j = j->lead_next)
    if (!strcmp(j->cache.key, key)) return j;
  return NULL;
}

static void leader_add(weir__api_job *job) {
  weir__http_server *s = job->s;
  job->leading = 1;
  job->lead_prev = NULL;
  job->lead_next = s->leaders;
  if (s->leaders) s->leaders->lead_prev = job;
  s->leaders = job;
}

static void leader_remove(weir__api_job *job) {
  if (!job->leading) return;
  if (job->lead_prev) job->lead_prev->lead_next = job->lead_next;
  else job->s->leaders = job->lead_next;
  if (job->lead_next) job->lead_next->lead_prev = job->lead_prev;
  job->leading = 0;
  job->lead_prev = job->lead_next = NULL;
}

/* A follower leaves its leader's list (its client left, or it is answered). A leader whose
 * own client is gone stops generating when its last follower leaves. */
static void follower_unlink(weir__api_job *f) {
  weir__api_job *l = f->leader;
  weir__api_job **pp = &l->followers;
  while (*pp && *pp != f) pp = &(*pp)->follow_next;
  if (*pp) *pp = f->follow_next;
  f->leader = NULL;
  f->follow_next = NULL;
  if (!l->followers && l->client_gone) client_gone(l);
}

static void begin_generation(weir__api_job *job, api_gen *a, cJSON *echo, int chat);

/* The leader answered: every follower replays that answer as an exact hit. */
static void join_serve(weir__api_job *leader, const char *rec, size_t rec_len) {
  leader_remove(leader); /* later identical requests find the stored entry */
  while (leader->followers) {
    weir__api_job *f = leader->followers;
    follower_unlink(f);
    api_gen *a = f->join_a;
    cJSON *echo = f->join_echo;
    f->join_a = NULL;
    f->join_echo = NULL;
    char *copy = malloc(rec_len);
    if (copy && weir__rcache_check(rec, rec_len, f->cache.num_choices) == 0) {
      memcpy(copy, rec, rec_len);
      free(f->cache.hit);
      f->cache.hit = copy;
      f->cache.hit_len = rec_len;
      f->cache.status = "hit-exact";
      f->cache.may_store = 0;
      f->joined = 1; /* its answer is the leader's, not yet known to be stored */
      if (f->r) f->r->cache_status = f->cache.status;
      weir__rcache_count_join(f->s);
    } else {
      free(copy); /* answered live instead */
    }
    begin_generation(f, a, echo, f->join_chat);
  }
}

/* The leader ends without an answer to share (an error, an abort, a timeout): each follower
 * is generated itself (the first becomes the new leader, the others join it). */
static void join_release(weir__api_job *leader) {
  leader_remove(leader);
  while (leader->followers) {
    weir__api_job *f = leader->followers;
    follower_unlink(f);
    api_gen *a = f->join_a;
    cJSON *echo = f->join_echo;
    f->join_a = NULL;
    f->join_echo = NULL;
    begin_generation(f, a, echo, f->join_chat);
  }
}

/* Ends a job whose response is already out (or whose client is gone): choices not queued
 * count as finished; queued ones are aborted and the job lives until their final events. */
static void abandon(weir__api_job *job) {
  int pending = 0;
  for (int i = 0; i < job->num_choices; i++) {
    api_choice *ch = &job->choices[i];
    if (!ch->submitted) {
      ch->finished = 1;
      job->num_finished++;
    } else if (!ch->finished) {
      pending = 1;
    }
  }
  client_gone(job);
  job->client_gone = 0;
  if (!pending) job_free(job);
}

/* ---- request preparation off the loop ---------------------------------------------------
 *
 * Everything a request body costs in proportion to its size or its content runs on the work
 * pools, never on the loop (issue 28): the JSON parse, the chat template, tokenizing, and
 * the constraint compile. The loop only takes the body from the request, queues the work
 * and, when it comes back (weir__api_on_work), answers or submits. A job exists from the
 * start so that a client that leaves meanwhile is seen (client_gone sets job->r NULL), and
 * so that a drain waits for the work. */

enum { W_COMPLETIONS, W_CHAT, W_RESPONSES, W_TOKENIZE, W_DETOKENIZE, W_CACHE_CLEAR,
       W_EMBEDDINGS, W_LLAMA };

struct weir__api_work {
  struct weir__api_work *next;
  weir__http_server *s;
  weir__api_job *job;
  uint64_t client;
  int kind;
  weir_buf body;      /* taken from the request */
  size_t body_len;    /* its length, for trim_after_large_work */
  api_gen *a;         /* generation: the parsed request (then compiled) */
  cJSON *resp_echo;   /* /v1/responses: the fields its Response repeats */
  cJSON *llama_settings; /* llama-server /completion: its generation_settings */
  int64_t n_predict;  /* llama-server /completion: its output cap, -1: the context */
  cJSON *reply;       /* tokenize / detokenize / embeddings: the 200's body */
  int failed;
  api_error e;
  char *auth;         /* the request's Authorization header (owned), for the cache's scope */
  int cache_control;  /* its Cache-Control directives */
  api_cache_ctx cache; /* generation: the response cache's decision (moved to the job) */
  int front_ok;        /* the body is kept (not freed after parsing) for the front index */
  uint64_t front_hash;
};

static void work_free(weir__api_work *w) {
  weir_buf_free(&w->body);
  free(w->auth);
  weir__rcache_ctx_free(&w->cache);
  gen_dispose(w->s, w->a);
  cJSON_Delete(w->resp_echo);
  cJSON_Delete(w->llama_settings);
  cJSON_Delete(w->reply);
  free(w);
}

/* Back to the loop: pushed onto work_stack without a lock, then the loop is woken through
 * work_fd (weir__api_on_work). Any thread; never waits for the loop, and the loop never waits
 * for it (http_internal.h). */
static void work_post(weir__api_work *w) {
  weir__http_server *s = w->s;
  weir__api_work *old = atomic_load_explicit(&s->work_stack, memory_order_relaxed);
  do {
    w->next = old;
  } while (!atomic_compare_exchange_weak_explicit(&s->work_stack, &old, w, memory_order_release,
                                                  memory_order_relaxed));
  /* Every post writes (not only the first onto an empty stack): a post preempted before its
   * write would otherwise hold back the wake-up for all the others. The write fails only
   * when the counter is saturated, and then the descriptor is readable anyway. */
  const uint64_t one = 1;
  ssize_t n = write(s->work_fd, &one, sizeof one);
  (void)n;
}

static int tokenize_body(weir__http_server *s, cJSON *root, cJSON **reply, api_error *e);
static int detokenize_body(weir__http_server *s, cJSON *root, cJSON **reply, api_error *e);
static int cache_clear_body(weir__http_server *s, cJSON *root, const char *auth, cJSON **reply,
                            api_error *e);

/* A large body or compile leaves its working memory (JSON trees, token arrays, automata:
 * up to hundreds of MB) freed but held by the allocator. It is given back to the system by
 * the housekeeping (weir__api_housekeep), on a thread of normal priority: malloc_trim holds
 * each arena's lock while it walks the arena, and on a nice-19 pool thread a preemption
 * there would leave the loop and the engine waiting for that lock behind every other
 * runnable thread of the machine. */
#define WEIR__TRIM_MIN_TEXT (64 * 1024)
static atomic_int g_large_inflight;
static atomic_int g_trim_wanted;

static void large_work_begin(size_t text_len) {
  if (text_len >= WEIR__TRIM_MIN_TEXT) atomic_fetch_add(&g_large_inflight, 1);
}

static void trim_after_large_work(size_t text_len) {
  if (text_len < WEIR__TRIM_MIN_TEXT) return;
  atomic_fetch_sub(&g_large_inflight, 1);
  atomic_store(&g_trim_wanted, 1);
}

/* Cached constraints unused this long are evicted: one-off constraints (a different schema
 * per request) must not stay resident for good after their burst (issue 28). */
#define WEIR__CONSTRAINT_IDLE_NS (60ull * 1000000000ull)
#define WEIR__EXPIRE_EVERY_S 10
#define WEIR__TRIM_EVERY_S 5

static void housekeep_run(uv_work_t *w) {
  weir__http_server *s = w->data;
  size_t freed = 0;
  if (s->hk_expire && s->svc)
    (void)weir_service_constraint_expire(s->svc, WEIR__CONSTRAINT_IDLE_NS, &freed);
  if (s->hk_trim || freed >= (size_t)WEIR__TRIM_MIN_TEXT) malloc_trim(0);
}

static void housekeep_done(uv_work_t *w, int status) {
  (void)status;
  weir__http_server *s = w->data;
  s->hk_busy = 0;
}

void weir__api_housekeep(weir__http_server *s, uint64_t now_s) {
  if (s->hk_busy || !s->svc || s->state == WEIR__STOPPING) return;
  /* Trim when the last large piece of work has ended, and at most every few seconds while
   * they keep coming (each trim walks every arena). */
  const int trim = atomic_load(&g_trim_wanted) &&
                   (atomic_load(&g_large_inflight) == 0 ||
                    now_s - s->hk_last_trim_s >= WEIR__TRIM_EVERY_S);
  const int expire = now_s - s->hk_last_expire_s >= WEIR__EXPIRE_EVERY_S;
  if (!trim && !expire) return;
  if (trim) {
    atomic_store(&g_trim_wanted, 0);
    s->hk_last_trim_s = now_s;
  }
  if (expire) s->hk_last_expire_s = now_s;
  s->hk_trim = trim;
  s->hk_expire = expire;
  s->hk_work.data = s;
  if (uv_queue_work(s->loop, &s->hk_work, housekeep_run, housekeep_done) == 0) s->hk_busy = 1;
}

/* Compile pool: the constraint, then back to the loop. */
static void compile_run(void *arg, int cancelled) {
  weir__api_work *w = arg;
  if (!cancelled) {
    large_work_begin(w->a->spec.len);
    weir__api_gen_compile(w->s->svc, w->a);
    trim_after_large_work(w->a->spec.len);
  } else {
    weir__api_fail(&w->e, 503, NULL, NULL, "The server is shutting down");
    w->failed = 1;
  }
  work_post(w);
}

/* llama-server's n_predict: a cap, not a demand. -1 (and a cap beyond what fits) generates
 * until the context is full, or to server.max_tokens_limit. Thread-safe (prep pool). */
static void llama_budget(const weir__http_server *s, api_gen *a, int64_t n_predict) {
  const int32_t ctx = s->info.context_length;
  const int32_t limit = s->cfg->max_tokens_limit > 0 ? s->cfg->max_tokens_limit : ctx;
  for (int i = 0; i < a->pl.count; i++) {
    int64_t mt = n_predict > 0 ? n_predict : limit;
    if (mt > limit) mt = limit;
    if (mt > ctx - a->pl.lens[i]) mt = ctx - a->pl.lens[i];
    a->pl.max_tokens[i] = (int32_t)mt;
  }
}

/* Prep pool: parse, template, tokenize; then the compile pool or back to the loop. */
static void prep_run(void *arg, int cancelled) {
  weir__api_work *w = arg;
  weir__http_server *s = w->s;
  cJSON *root = NULL;
  if (cancelled) {
    weir__api_fail(&w->e, 503, NULL, NULL, "The server is shutting down");
    w->failed = 1;
    work_post(w);
    return;
  }
  large_work_begin(w->body_len);
  /* A body the parser must repair (invalid UTF-8) is not the bytes a front entry would be
   * found by: it never fills one. */
  if (w->front_ok && w->body.len && !weir_utf8_valid(w->body.p, w->body.len)) w->front_ok = 0;
  root = weir__api_parse_body(&w->body, &w->e);
  if (!w->front_ok) weir_buf_free(&w->body);
  if (!root) goto failed;
  switch (w->kind) {
  case W_TOKENIZE:
  case W_DETOKENIZE:
  case W_EMBEDDINGS: {
    /* all take root */
    int rc = w->kind == W_TOKENIZE     ? tokenize_body(s, root, &w->reply, &w->e)
             : w->kind == W_DETOKENIZE ? detokenize_body(s, root, &w->reply, &w->e)
                                       : weir__api_embeddings_body(s, root, &w->reply, &w->e);
    root = NULL;
    if (rc) goto failed;
    break;
  }
  case W_CACHE_CLEAR: {
    int rc = cache_clear_body(s, root, w->auth, &w->reply, &w->e);
    root = NULL;
    if (rc) goto failed;
    break;
  }
  case W_RESPONSES: {
    cJSON *chat = weir__api_responses_to_chat(root, &w->resp_echo, &w->e);
    if (!chat) goto failed;
    cJSON_Delete(root);
    root = chat;
  } /* fall through */
  case W_LLAMA:
    if (w->kind == W_LLAMA) {
      cJSON *cmpl = weir__api_llama_to_completions(root, &w->llama_settings, &w->n_predict,
                                                   &w->e);
      if (!cmpl) goto failed;
      cJSON_Delete(root);
      root = cmpl;
    }
    /* fall through */
  case W_COMPLETIONS:
  case W_CHAT:
    if (!(w->a = malloc(sizeof *w->a))) {
      weir__api_fail(&w->e, 500, NULL, NULL, "out of memory");
      goto failed;
    }
    {
      const int chat = w->kind == W_CHAT || w->kind == W_RESPONSES;
      int rc = weir__api_parse_generation_root(s, root, chat, w->a, &w->e);
      root = NULL; /* w->a owns it, or it was freed */
      if (rc) {
        free(w->a);
        w->a = NULL;
        goto failed;
      }
      w->a->heavy = w->body_len >= WEIR__HEAVY_BYTES;
      if (w->kind == W_LLAMA) llama_budget(s, w->a, w->n_predict);
    }
    /* The response cache, before anything is queued: a hit needs no compile either. */
    weir__rcache_lookup(s, w->a, w->auth, w->cache_control, &w->cache);
    if (w->a->spec.kind && !w->cache.hit) {
      trim_after_large_work(w->body_len);
      w->body_len = 0; /* counted: the paths below must not count it again */
      int rc = weir_workpool_submit(
          w->a->spec.len >= WEIR__HEAVY_BYTES ? s->compile_heavy_pool : s->compile_pool,
          w->client, compile_run, w);
      if (rc == WEIR_OK) return;
      weir__api_fail(&w->e, rc == WEIR_E_BUSY ? 429 : 500, NULL,
                     rc == WEIR_E_BUSY ? "rate_limit_exceeded" : NULL,
                     rc == WEIR_E_BUSY ? "Too many constraints are waiting to compile. Retry "
                                         "later." : "could not start compiling the constraint");
      goto failed;
    }
    break;
  }
  cJSON_Delete(root);
  trim_after_large_work(w->body_len);
  work_post(w);
  return;
failed:
  cJSON_Delete(root);
  trim_after_large_work(w->body_len);
  w->failed = 1;
  work_post(w);
}

static weir__api_job *job_new(weir__http_req *r);
static void start_job(weir__api_job *job, api_gen *a, cJSON *resp_echo, int chat);

/* Queues a request's preparation; the request is answered when it comes back. */
static void queue_work(weir__http_req *r, int kind) {
  weir__http_server *s = r->srv;
  api_error e = {0};
  /* The front index: a byte-identical repeat of a request the cache served or stored is
   * answered here, on the loop (docs/response-cache.md). Only requests without Cache-Control
   * directives use it, and only the OpenAI endpoints. Looked up before anything is
   * allocated: a rendered hit is answered straight from the request. */
  const weir__front_entry *fe = NULL;
  uint64_t front_hash = 0;
  int front_ok = 0;
  if (s->rcache && !r->cache_control && r->body.len <= WEIR__FRONT_MAX_BODY &&
      (kind == W_CHAT || kind == W_COMPLETIONS || kind == W_RESPONSES)) {
    const char *auth = r->authorization.p ? r->authorization.p : "";
    fe = weir__rcache_front_lookup(s, kind, auth, strlen(auth), r->body.p ? r->body.p : "",
                                   r->body.len, &front_hash);
    if (fe && front_serve_rendered(r, fe)) return;
    front_ok = !fe;
  }
  weir__api_work *w = calloc(1, sizeof *w);
  weir__api_job *job = w ? job_new(r) : NULL;
  if (!job) {
    free(w);
    weir__api_fail(&e, 500, NULL, NULL, "out of memory");
    weir__api_respond_error(r, &e);
    return;
  }
  w->s = s;
  w->job = job;
  w->kind = kind;
  w->client = weir__http_client_key(r);
  w->cache_control = r->cache_control;
  if (r->authorization.p && !(w->auth = strdup(r->authorization.p))) {
    weir__api_fail(&e, 500, NULL, NULL, "out of memory");
    weir__api_respond_error(detach(job), &e);
    free(w);
    abandon(job);
    return;
  }
  w->body = r->body; /* taken: the request keeps no copy */
  w->body_len = r->body.len;
  memset(&r->body, 0, sizeof r->body);
  if (fe) {
    work_free(w);
    front_serve(job, fe);
    return;
  }
  w->front_ok = front_ok;
  w->front_hash = front_hash;
  /* Embeddings wait for the engine: on their own pool, never holding a preparation thread;
   * a heavy body (WEIR__HEAVY_BYTES or more) on the heavy preparation pool. */
  weir_workpool *pool = kind == W_EMBEDDINGS ? s->embed_pool
                        : w->body_len >= WEIR__HEAVY_BYTES ? s->prep_heavy_pool
                                                           : s->prep_pool;
  int rc = weir_workpool_submit(pool, w->client, prep_run, w);
  if (rc != WEIR_OK) {
    if (rc == WEIR_E_BUSY)
      weir__api_fail(&e, 429, NULL, "rate_limit_exceeded",
                     "Too many requests are waiting to be prepared. Retry later.");
    else
      weir__api_fail(&e, 500, NULL, NULL, "could not queue the request: %s", weir_strerror(rc));
    weir__api_respond_error(detach(job), &e);
    work_free(w);
    abandon(job);
  }
}

static void work_done(weir__api_work *w);

/* On the loop: the finished work handed back since the last wake-up, in order. */
static void work_done_all(weir__api_work *w) {
  while (w) {
    weir__api_work *n = w->next;
    work_done(w);
    w = n;
  }
}

void weir__api_on_work(weir__http_server *s) {
  uint64_t count;
  ssize_t n = read(s->work_fd, &count, sizeof count); /* resets the counter */
  (void)n;
  weir__api_work *w = atomic_exchange_explicit(&s->work_stack, NULL, memory_order_acquire);
  weir__api_work *fifo = NULL; /* oldest first */
  while (w) {
    weir__api_work *next = w->next;
    w->next = fifo;
    fifo = w;
    w = next;
  }
  work_done_all(fifo);
  events_drain(s);
}

/* On the loop: a request's preparation is back. */
static void work_done(weir__api_work *w) {
  weir__api_job *job = w->job;
  if (!job->r) {
    /* The client left meanwhile (or the server is closing). */
    work_free(w);
    abandon(job);
    return;
  }
  /* This replica's front index forgets everything a clear may have removed. */
  if (w->kind == W_CACHE_CLEAR) weir__rcache_front_clear(job->s);
  api_error e = w->e;
  if (!w->failed && w->a && w->a->spec.kind && !w->cache.hit &&
      weir__api_gen_compiled(w->a, &e))
    w->failed = 1;
  if (w->failed) {
    weir__api_respond_error(detach(job), &e);
    work_free(w);
    abandon(job);
    return;
  }
  if (w->kind == W_TOKENIZE || w->kind == W_DETOKENIZE || w->kind == W_CACHE_CLEAR ||
      w->kind == W_EMBEDDINGS) {
    weir__api_respond_json(detach(job), 200, w->reply);
    work_free(w);
    abandon(job);
    return;
  }
  /* Prepared before the signal: it runs like the requests already running, until the drain
   * deadline aborts what is left. */
  if (job->s->state == WEIR__STOPPING || job->s->state == WEIR__LOADING || job->s->aborted_all) {
    weir__api_fail(&e, 503, NULL, NULL, "The server is shutting down");
    weir__api_respond_error(detach(job), &e);
    work_free(w);
    abandon(job);
    return;
  }
  api_gen *a = w->a;
  cJSON *echo = w->resp_echo;
  const int chat = w->kind == W_CHAT || w->kind == W_RESPONSES;
  if (w->kind == W_LLAMA) {
    job->llama = 1;
    job->llama_settings = w->llama_settings;
    w->llama_settings = NULL;
  }
  w->a = NULL;
  w->resp_echo = NULL;
  job->cache = w->cache; /* moved: the job frees the hit */
  memset(&w->cache, 0, sizeof w->cache);
  job->r->cache_status = job->cache.status;
  if (w->front_ok && job->cache.looked_up) {
    job->front_ok = 1;
    job->front_kind = w->kind;
    job->front_hash = w->front_hash;
    job->front_body = w->body; /* taken */
    memset(&w->body, 0, sizeof w->body);
    job->front_auth = w->auth;
    w->auth = NULL;
  }
  work_free(w);
  begin_generation(job, a, echo, chat);
}

/* A prepared generation request starts: a miss that an identical request in flight will
 * answer joins it (docs/response-cache.md); a miss whose answer will be stored leads. */
static void begin_generation(weir__api_job *job, api_gen *a, cJSON *echo, int chat) {
  weir__http_server *s = job->s;
  api_cache_ctx *c = &job->cache;
  if (s->state == WEIR__STOPPING || s->aborted_all) {
    api_error e = {0};
    weir__api_fail(&e, 503, NULL, NULL, "The server is shutting down");
    cJSON_Delete(echo);
    fail_job(job, a, &e);
    return;
  }
  if (!c->hit && c->looked_up) {
    weir__api_job *l = leader_find(s, c->key);
    if (l && l != job) {
      job->join_a = a;
      job->join_echo = echo;
      job->join_chat = chat;
      job->leader = l;
      job->follow_next = l->followers;
      l->followers = job;
      return;
    }
    if (!l && c->may_store) leader_add(job);
  }
  start_job(job, a, echo, chat);
}

/* A job for a request whose preparation is queued: linked, counted, knowing its request. */
static weir__api_job *job_new(weir__http_req *r) {
  weir__http_server *s = r->srv;
  weir__api_job *job = calloc(1, sizeof *job);
  if (!job) return NULL;
  job->s = s;
  job->arrival_ns = r->arrival_ns;
  s->num_jobs++;
  job->next = s->jobs;
  if (s->jobs) s->jobs->prev = job;
  s->jobs = job;
  /* The request and the job know each other from here on: a client that leaves while the
   * request is prepared is seen (client_gone) and the job freed when the work ends. */
  job->r = r;
  r->job = job;
  return job;
}

/* A prepared generation request starts (resp_echo: a /v1/responses request, taken). */
static void start_job(weir__api_job *job, api_gen *a, cJSON *resp_echo, int chat) {
  weir__http_server *s = job->s;
  api_error e = {0};
  const params *pp = &a->p;
  const prompt_list *pl = &a->pl;
  job->chat = chat;
  job->stream = pp->stream;
  job->include_usage = pp->include_usage;
  job->logprobs = pp->logprobs;
  job->echo = pp->echo;
  job->created = (int64_t)time(NULL);
  job->num_prompts = pl->count;
  job->n = pp->n;
  weir__api_make_id(job->id, sizeof job->id, resp_echo ? "resp" : chat ? "chatcmpl" : "cmpl");
  if (resp_echo) job->id[4] = '_';
  job->responses = resp_echo != NULL;
  job->resp_echo = resp_echo;
  job->tool_mode = a->tools.mode;
  job->parallel_tool_calls = a->tools.parallel;
  if (a->tools.named && !(job->tool_named = strdup(a->tools.named))) {
    weir__api_fail(&e, 500, NULL, NULL, "out of memory");
    goto fail_job;
  }
  job->choices = calloc((size_t)(pl->count * pp->n), sizeof *job->choices);
  if (!job->choices) {
    weir__api_fail(&e, 500, NULL, NULL, "out of memory");
    goto fail_job;
  }
  job->num_choices = pl->count * pp->n;
  if (job->echo) {
    /* Text prompts echo exactly what was sent (no BOS); token prompts echo their text. With
     * logprobs, each prompt token's place in that text too. */
    job->echo_text = calloc((size_t)pl->count, sizeof(char *));
    job->echo_len = calloc((size_t)pl->count, sizeof(size_t));
    if (job->logprobs >= 0) {
      job->first_token = malloc(sizeof(int32_t) * (size_t)pl->count);
      job->prompt_offsets = calloc((size_t)pl->count, sizeof(size_t *));
    }
    if (!job->echo_text || !job->echo_len ||
        (job->logprobs >= 0 && (!job->first_token || !job->prompt_offsets))) {
      weir__api_fail(&e, 500, NULL, NULL, "out of memory");
      goto fail_job;
    }
    const cJSON *item = cJSON_IsArray(pp->prompt) ? pp->prompt->child : pp->prompt;
    for (int i = 0; i < pl->count; i++) {
      size_t len = 0;
      const int from_text = cJSON_IsString(item);
      if (from_text) {
        job->echo_text[i] = strdup(item->valuestring);
        len = job->echo_text[i] ? strlen(job->echo_text[i]) : 0;
        item = item->next;
      } else if (weir_service_detokenize(s->svc, pl->ids[i], pl->lens[i], &job->echo_text[i],
                                         &len) != WEIR_OK) {
        job->echo_text[i] = NULL;
      }
      job->echo_len[i] = len;
      if (!job->echo_text[i]) {
        weir__api_fail(&e, 500, NULL, NULL, "could not produce the prompt text for echo");
        goto fail_job;
      }
      if (job->logprobs < 0) continue;
      job->first_token[i] = pl->ids[i][0];
      job->prompt_offsets[i] = malloc(sizeof(size_t) * (size_t)pl->lens[i]);
      if (!job->prompt_offsets[i] ||
          weir_service_detokenize_offsets(s->svc, pl->ids[i], pl->lens[i], from_text,
                                          job->prompt_offsets[i]) != WEIR_OK) {
        weir__api_fail(&e, 500, NULL, NULL, "could not place the prompt's tokens in its text");
        goto fail_job;
      }
    }
  }
  submit_choices(job, a);
  return;

fail_job:
  fail_job(job, a, &e);
}

/* ---- other endpoints -------------------------------------------------------------------- */

/* /tokenize and /detokenize on a work thread: the body into the 200's JSON (*reply), or -1
 * with e filled. Both take root (deleted here). */
static int tokenize_body(weir__http_server *s, cJSON *root, cJSON **reply, api_error *e) {
  int32_t *ids = NULL, n = 0;
  int ret = -1;
  const cJSON *text = NULL;
  int add_special = 1;
  for (const cJSON *it = root->child; it; it = it->next) {
    if (!strcmp(it->string, "prompt") || !strcmp(it->string, "text")) {
      if (!cJSON_IsString(it)) {
        weir__api_fail(e, 400, it->string, "invalid_type", "'%s' must be a string", it->string);
        goto free_all;
      }
      text = it;
    } else if (!strcmp(it->string, "add_special_tokens")) {
      if (weir__api_want_bool(e, it, it->string, &add_special)) goto free_all;
    } else if (other_key(s, it, e)) {
      goto free_all;
    }
  }
  if (!text) {
    weir__api_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    goto free_all;
  }
  int rc = weir_service_tokenize(s->svc, text->valuestring, strlen(text->valuestring),
                                 add_special, &ids, &n);
  if (rc != WEIR_OK) {
    weir__api_fail(e, 500, NULL, NULL, "tokenization failed: %s", weir_strerror(rc));
    goto free_all;
  }
  cJSON *out = cJSON_CreateObject();
  cJSON *arr = out ? cJSON_AddArrayToObject(out, "tokens") : NULL;
  for (int32_t i = 0; arr && i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
  if (out) {
    cJSON_AddNumberToObject(out, "count", n);
    cJSON_AddNumberToObject(out, "max_model_len", s->info.context_length);
  }
  *reply = out;
  ret = 0;
free_all:
  cJSON_Delete(root);
  free(ids);
  return ret;
}

static int detokenize_body(weir__http_server *s, cJSON *root, cJSON **reply, api_error *e) {
  prompt_list pl = {0};
  char *text = NULL;
  size_t len = 0;
  int ret = -1;
  const cJSON *tokens = NULL;
  for (const cJSON *it = root->child; it; it = it->next) {
    if (!strcmp(it->string, "tokens")) {
      tokens = it;
    } else if (other_key(s, it, e)) {
      goto free_all;
    }
  }
  if (!tokens) {
    weir__api_fail(e, 400, "tokens", "missing_required_parameter", "'tokens' is required");
    goto free_all;
  }
  if (!cJSON_IsArray(tokens)) {
    weir__api_fail(e, 400, "tokens", "invalid_type", "'tokens' must be a list of token ids");
    goto free_all;
  }
  if (weir__api_ids_from_array(s, tokens, "tokens", &pl, e)) goto free_all;
  int rc = weir_service_detokenize(s->svc, pl.ids[0], pl.lens[0], &text, &len);
  if (rc != WEIR_OK) {
    weir__api_fail(e, 500, NULL, NULL, "detokenization failed: %s", weir_strerror(rc));
    goto free_all;
  }
  cJSON *out = cJSON_CreateObject();
  if (out) cJSON_AddItemToObject(out, "prompt", weir__api_json_text(text, len));
  *reply = out;
  ret = 0;
free_all:
  cJSON_Delete(root);
  weir__api_prompts_free(&pl);
  free(text);
  return ret;
}

/* POST /admin/cache/clear on a work thread (docs/response-cache.md): {} clears the caller's
 * own scope (its API key, every user), {"user": U} one user of it, {"api_key": K} (with
 * "user") another key's scope (knowing the key is the permission), {"all": true} every
 * entry. Takes root. */
static int cache_clear_body(weir__http_server *s, cJSON *root, const char *auth, cJSON **reply,
                            api_error *e) {
  int ret = -1, all = 0;
  const char *user = NULL, *key = NULL;
  char prefix[WEIR__RCACHE_KEY_CAP], *other = NULL;
  for (const cJSON *it = root->child; it; it = it->next) {
    if (!strcmp(it->string, "all")) {
      if (weir__api_want_bool(e, it, it->string, &all)) goto free_root;
    } else if (!strcmp(it->string, "user") || !strcmp(it->string, "api_key")) {
      if (!cJSON_IsString(it)) {
        weir__api_fail(e, 400, it->string, "invalid_type", "'%s' must be a string", it->string);
        goto free_root;
      }
      if (!strcmp(it->string, "user")) user = it->valuestring;
      else key = it->valuestring;
    } else {
      weir__api_fail(e, 400, it->string, "unknown_parameter",
                     "Unrecognized request argument supplied: %s", it->string);
      goto free_root;
    }
  }
  if (!s->rcache) {
    weir__api_fail(e, 400, NULL, "cache_disabled",
                   "No response cache is configured ([cache] name is \"off\")");
    goto free_root;
  }
  /* Another key's scope is made as a request presenting that key would make it. */
  if (key) {
    size_t n = strlen(key) + 8;
    if (!(other = malloc(n))) {
      weir__api_fail(e, 500, NULL, NULL, "out of memory");
      goto free_root;
    }
    snprintf(other, n, "Bearer %s", key);
  }
  prefix[0] = '\0';
  if (!all && weir__rcache_scope_prefix(key ? other : auth, user, user != NULL, prefix,
                                        sizeof prefix)) {
    weir__api_fail(e, 500, NULL, NULL, "scope too long");
    goto free_root;
  }
  int64_t removed = 0;
  int rc = weir__rcache_clear(s, prefix, &removed);
  if (rc != WEIR_OK) {
    weir__api_fail(e, 503, NULL, NULL, "The cache backend failed: %s", weir_strerror(rc));
    goto free_root;
  }
  cJSON *out = cJSON_CreateObject();
  if (out) {
    cJSON_AddNumberToObject(out, "cleared", (double)removed);
    cJSON_AddStringToObject(out, "scope", all ? "all" : user ? "user" : "api_key");
  }
  *reply = out;
  ret = 0;
free_root:
  free(other);
  cJSON_Delete(root);
  return ret;
}

/* One entry of /v1/models: `id` is the served name or one of its aliases; `root` is the
 * served name every alias stands for (vLLM lists each of --served-model-name's names). */
static cJSON *model_object(weir__http_server *s, const char *id) {
  cJSON *m = cJSON_CreateObject();
  if (!m) return NULL;
  cJSON_AddStringToObject(m, "id", id);
  cJSON_AddStringToObject(m, "root", s->model_name);
  cJSON_AddStringToObject(m, "object", "model");
  cJSON_AddNumberToObject(m, "created", (double)s->started_unix);
  cJSON_AddStringToObject(m, "owned_by", "weir");
  cJSON_AddNumberToObject(m, "max_model_len", s->info.context_length);
  return m;
}

static void handle_models(weir__http_req *r) {
  cJSON *o = cJSON_CreateObject();
  if (o) {
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    if (d) cJSON_AddItemToArray(d, model_object(r->srv, r->srv->model_name));
    /* The aliases after the served name (model_names[0] is the served name itself). */
    for (int32_t i = 0; d && i < r->srv->info.num_model_names; i++)
      if (strcmp(r->srv->info.model_names[i], r->srv->model_name) != 0)
        cJSON_AddItemToArray(d, model_object(r->srv, r->srv->info.model_names[i]));
  }
  weir__api_respond_json(r, 200, o);
  cJSON_Delete(o);
}

static void handle_model(weir__http_req *r, const char *id) {
  if (!weir__api_serves_model(r->srv, id)) {
    weir__http_respond_error(r, 404, "invalid_request_error", "model", "model_not_found",
                             "The model `%s` does not exist.", id);
    return;
  }
  cJSON *o = model_object(r->srv, id);
  weir__api_respond_json(r, 200, o);
  cJSON_Delete(o);
}

static void handle_health(weir__http_req *r) {
  weir__http_server *s = r->srv;
  const char *st = s->state == WEIR__READY     ? "ok"
                   : s->state == WEIR__LOADING ? "loading"
                                               : "draining";
  char body[64];
  int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", st);
  weir__http_respond(r, s->state == WEIR__READY ? 200 : 503, "application/json", body,
                     (size_t)n, NULL);
}

static void handle_metrics(weir__http_req *r) {
  char *text = NULL;
  size_t len = 0;
  if (weir_metrics_render(r->srv->metrics, &text, &len) != WEIR_OK) {
    weir__http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return;
  }
  weir__http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
  free(text);
}

static void handle_version(weir__http_req *r) {
  static const char body[] = "{\"version\":\"" WEIR_VERSION "\"}";
  weir__http_respond(r, 200, "application/json", body, sizeof body - 1, NULL);
}

/* ---- routing ---------------------------------------------------------------------------- */

enum { R_HEALTH, R_METRICS, R_VERSION, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_RESPONSES,
       R_TOKENIZE, R_DETOKENIZE, R_CACHE_CLEAR, R_EMBEDDINGS, R_LLAMA_COMPLETION, R_PROPS };

static const struct route {
  const char *path;
  int method; /* HTTP_GET or HTTP_POST */
  int id;
  int open;   /* no API key needed, answered in any state */
} k_routes[] = {
    {"/health", HTTP_GET, R_HEALTH, 1},
    {"/metrics", HTTP_GET, R_METRICS, 1},
    {"/version", HTTP_GET, R_VERSION, 0},
    {"/v1/models", HTTP_GET, R_MODELS, 0},
    {"/v1/completions", HTTP_POST, R_COMPLETIONS, 0},
    {"/v1/chat/completions", HTTP_POST, R_CHAT, 0},
    {"/v1/responses", HTTP_POST, R_RESPONSES, 0},
    {"/tokenize", HTTP_POST, R_TOKENIZE, 0},
    {"/detokenize", HTTP_POST, R_DETOKENIZE, 0},
    {"/admin/cache/clear", HTTP_POST, R_CACHE_CLEAR, 0},
    {"/v1/embeddings", HTTP_POST, R_EMBEDDINGS, 0},
    /* llama-server's native API (api_llama.c). */
    {"/completion", HTTP_POST, R_LLAMA_COMPLETION, 0},
    {"/completions", HTTP_POST, R_LLAMA_COMPLETION, 0}, /* llama-server's alias of it */
    {"/props", HTTP_GET, R_PROPS, 0},
};

/* Compares in time independent of where the first difference is. */
static int key_matches(const char *given, size_t glen, const char *key) {
  size_t klen = strlen(key);
  unsigned char diff = (unsigned char)(glen != klen);
  for (size_t i = 0; i < glen; i++) diff |= (unsigned char)(given[i] ^ key[i % (klen ? klen : 1)]);
  return diff == 0;
}

static int authorized(const weir__http_req *r) {
  const char *key = r->srv->api_key;
  if (!key) return 1;
  const char *h = r->authorization.p;
  if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
  h += 7;
  while (*h == ' ') h++;
  size_t n = strlen(h);
  while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
  return key_matches(h, n, key);
}

static int is_json_content_type(const weir__http_req *r) {
  const char *ct = r->content_type.p;
  if (!ct) return 0;
  while (*ct == ' ') ct++;
  static const char want[] = "application/json";
  if (strncasecmp(ct, want, sizeof want - 1)) return 0;
  char next = ct[sizeof want - 1];
  return next == '\0' || next == ';' || next == ' ';
}

static void dispatch(weir__http_req *r) {
  weir__http_server *s = r->srv;
  char path[512];
  weir__http_path(r, path, sizeof path);
  const struct route *route = NULL;
  int path_known = 0;
  const char *model_id = NULL;
  static const char models_prefix[] = "/v1/models/";
  static const struct route model_route = {"/v1/models/{id}", HTTP_GET, R_MODEL, 0};
  for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++)
    if (!strcmp(path, k_routes[i].path)) {
      path_known = 1;
      route = &k_routes[i];
    }
  if (!route && !strncmp(path, models_prefix, sizeof models_prefix - 1) &&
      path[sizeof models_prefix - 1]) {
    path_known = 1;
    route = &model_route;
    model_id = path + sizeof models_prefix - 1;
  }
  int method = r->method == HTTP_HEAD ? HTTP_GET : r->method;
  /* With an API key set, a client without it learns nothing, not even which paths exist or
   * which methods they take: 401 comes before 404 and 405 (the open routes excepted). */
  if ((!path_known || route->method != method) && !(path_known && route->open) &&
      !authorized(r)) {
    weir__http_respond_error(r, 401, "authentication_error", NULL, "invalid_api_key",
                             "Missing or incorrect API key: send 'Authorization: Bearer <key>'");
    return;
  }
  if (!path_known) {
    weir__http_respond_error(r, 404, "invalid_request_error", NULL, "not_found",
                             "Invalid URL (%s %s)", llhttp_method_name(r->method), path);
    return;
  }
  if (route->method != method) {
    char allow[64];
    snprintf(allow, sizeof allow, "Allow: %s\r\n",
             route->method == HTTP_GET ? "GET, HEAD" : "POST");
    char body[256];
    int n = snprintf(body, sizeof body,
                     "{\"error\":{\"message\":\"Method %s is not allowed on %s\","
                     "\"type\":\"invalid_request_error\",\"param\":null,"
                     "\"code\":\"method_not_allowed\"}}",
                     llhttp_method_name(r->method), route->path);
    weir__http_respond(r, 405, "application/json", body, (size_t)n, allow);
    return;
  }
  if (!route->open && !authorized(r)) {
    weir__http_respond_error(r, 401, "authentication_error", NULL, "invalid_api_key",
                             "Missing or incorrect API key: send 'Authorization: Bearer <key>'");
    return;
  }
  if (route->id == R_HEALTH) {
    handle_health(r);
    return;
  }
  if (route->id == R_METRICS) {
    handle_metrics(r);
    return;
  }
  if (route->id == R_VERSION) {
    handle_version(r);
    return;
  }
  if (s->state != WEIR__READY) {
    weir__http_respond_error(r, 503, "server_error", NULL, NULL, "%s",
                             s->state == WEIR__LOADING ? "The model is still loading"
                                                       : "The server is shutting down");
    return;
  }
  if (route->method == HTTP_POST && !is_json_content_type(r)) {
    weir__http_respond_error(r, 415, "invalid_request_error", NULL, "unsupported_media_type",
                             "Content-Type must be application/json, got '%s'",
                             r->content_type.p ? r->content_type.p : "");
    return;
  }
  switch (route->id) {
  case R_MODELS: handle_models(r); break;
  case R_MODEL: handle_model(r, model_id); break;
  case R_COMPLETIONS: queue_work(r, W_COMPLETIONS); break;
  case R_CHAT: queue_work(r, W_CHAT); break;
  case R_RESPONSES: queue_work(r, W_RESPONSES); break;
  case R_TOKENIZE: queue_work(r, W_TOKENIZE); break;
  case R_DETOKENIZE: queue_work(r, W_DETOKENIZE); break;
  case R_CACHE_CLEAR: queue_work(r, W_CACHE_CLEAR); break;
  case R_EMBEDDINGS: queue_work(r, W_EMBEDDINGS); break;
  case R_LLAMA_COMPLETION: queue_work(r, W_LLAMA); break;
  case R_PROPS: weir__api_llama_props(r); break;
  default: weir__http_respond_error(r, 500, "server_error", NULL, NULL, "no handler"); break;
  }
}

const weir__http_handlers weir__api_handlers = {
    .dispatch = dispatch, .client_gone = client_gone, .set_paused = set_paused};

