/* The OpenAI-compatible API on top of the transport: routing, authentication, parameter
 * validation, turning a request into engine requests (one per prompt and choice), and
 * turning engine events into OpenAI's response and stream-chunk objects. Loop thread only.
 * docs/http-api.md describes the behaviour; keep the two in step. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "http/api.h"
#include "util/log.h"
#include "weir/status.h"

#define MAX_N 16
#define MAX_CHOICES 256
#define MAX_STOP 16
#define MAX_PATH 160 /* longest JSON path named in an error's `param` */

/* Whether `name` is one of the names this server answers to: the served model name or one of
 * its aliases (server.served_model_name as a list; the engine owns the list). */
static int serves_model(const weir__http_server *s, const char *name) {
  for (int32_t i = 0; i < s->info.num_model_names; i++)
    if (!strcmp(name, s->info.model_names[i])) return 1;
  return !strcmp(name, s->model_name);
}

/* ---- jobs ------------------------------------------------------------------------------- */

typedef struct api_choice {
  weir__engine_user u; /* first: the engine callback's user pointer */
  weir__api_job *job;
  int index;           /* OpenAI's choice index: prompt_index * n + j */
  int prompt_index;
  uint64_t engine_id;
  int submitted, finished;
  weir_finish_reason finish;
  int status;
  char *error;
  weir_buf text;       /* non-streaming: the whole completion */
  cJSON *lp_tokens;     /* non-streaming logprobs, built as events arrive */
  cJSON *lp_values, *lp_top, *lp_offsets;
  size_t lp_offset;     /* bytes of token text so far, for text_offset */
  int32_t prompt_tokens, cached_tokens, completion_tokens, num_preemptions;
  uint64_t first_ns, last_ns;
  double *itl_ms;
  int num_itl, cap_itl;
  int sent_first;       /* streaming: the first chunk (role / echo) is out */
} api_choice;

struct weir__api_job {
  weir__http_server *s;
  weir__http_req *r;    /* NULL once answered or once the client is gone */
  weir__api_job *prev, *next;
  int chat;
  int stream, include_usage;
  int logprobs;         /* completions: -1 or 0..20; chat: -1 or top_logprobs */
  int echo;
  char id[48];
  int64_t created;
  int num_prompts, n;
  int num_choices, num_finished;
  api_choice *choices;
  char **echo_text;     /* [num_prompts] with echo */
  size_t *echo_len;     /* their lengths (a detokenized prompt may hold NUL) */
  uint64_t arrival_ns;
  int client_gone;
  int paused;           /* its connection is backed up: generation paused */
};

typedef struct api_error {
  int status;
  const char *type;
  const char *code;
  char param[MAX_PATH];
  char message[512];
} api_error;

static int fail(api_error *e, int status, const char *param, const char *code,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(api_error *e, int status, const char *param, const char *code,
                const char *fmt, ...) {
  e->status = status;
  e->type = status == 401   ? "authentication_error"
            : status == 429 ? "rate_limit_error"
            : status >= 500 ? "server_error"
                            : "invalid_request_error";
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  /* A cut name must not end in half a character. */
  weir_utf8_trim(e->param);
  weir_utf8_trim(e->message);
  return -1;
}

static void respond_api_error(weir__http_req *r, const api_error *e) {
  weir__http_respond_error(r, e->status, e->type, e->param[0] ? e->param : NULL, e->code, "%s",
                           e->message);
}

static void respond_json(weir__http_req *r, int status, cJSON *root) {
  char *body = root ? cJSON_PrintUnformatted(root) : NULL;
  if (!body) {
    weir__http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return;
  }
  weir__http_respond(r, status, "application/json", body, strlen(body), NULL);
  free(body);
}

static uint64_t g_rng;
static void make_id(char *out, size_t cap, const char *prefix) {
  if (!g_rng) g_rng = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ uv_hrtime();
  char hex[33];
  for (int i = 0; i < 2; i++) {
    /* splitmix64: ids only need to be unique, not secret. */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    snprintf(hex + 16 * i, sizeof hex - 16 * (size_t)i, "%016llx", (unsigned long long)z);
  }
  snprintf(out, cap, "%s-%s", prefix, hex);
}

static void choice_release(api_choice *ch) {
  weir_buf_free(&ch->text);
  cJSON_Delete(ch->lp_tokens);
  cJSON_Delete(ch->lp_values);
  cJSON_Delete(ch->lp_top);
  cJSON_Delete(ch->lp_offsets);
  free(ch->error);
  free(ch->itl_ms);
  free(ch->u.spare);
}

static void job_free(weir__api_job *job) {
  weir__http_server *s = job->s;
  if (job->r) job->r->job = NULL;
  for (int i = 0; i < job->num_choices; i++) choice_release(&job->choices[i]);
  free(job->choices);
  if (job->echo_text)
    for (int i = 0; i < job->num_prompts; i++) free(job->echo_text[i]);
  free(job->echo_text);
  free(job->echo_len);
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

int weir__api_metrics_register(weir__http_server *s) {
  weir_metrics *m = s->metrics;
  weir__http_metrics *x = &s->m;
  int rc = WEIR_OK;
  struct {
    const char *name, *help;
    weir_metric_type type;
    weir_metric **out;
  } defs[] = {
      {"time_to_first_token_seconds", "Time from request arrival to its first token.",
       WEIR_METRIC_HISTOGRAM, &x->ttft},
      {"inter_token_latency_seconds", "Time between consecutive output tokens of a request.",
       WEIR_METRIC_HISTOGRAM, &x->itl},
      {"time_per_output_token_seconds",
       "Per request: (end-to-end time - time to first token) / (output tokens - 1).",
       WEIR_METRIC_HISTOGRAM, &x->tpot},
      {"e2e_request_latency_seconds", "Time from request arrival to its last token.",
       WEIR_METRIC_HISTOGRAM, &x->e2e},
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
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0] && rc == WEIR_OK; i++)
    rc = weir_metrics_register(m, defs[i].name, defs[i].help, defs[i].type, NULL, 0, NULL,
                               defs[i].out);
  static const char *reasons[] = {NULL, "stop", "length", "abort", "error", "timeout"};
  for (int i = 1; i < 6 && rc == WEIR_OK; i++) {
    char labels[48];
    snprintf(labels, sizeof labels, "finished_reason=\"%s\"", reasons[i]);
    rc = weir_metrics_register(m, "request_success_total", "Finished requests, by reason.",
                               WEIR_METRIC_COUNTER, NULL, 0, labels, &x->success[i]);
  }
  return rc;
}

/* Counters mirrored from the engine's own totals: add what grew since the last scrape. */
static void counter_sync(weir_metric *m, double total) {
  double d = total - weir_metric_value(m);
  if (d > 0) weir_metric_record(m, d);
}

static void scrape_engine(weir__http_server *s) {
  if (!s->engine) return;
  weir_engine_stats st;
  memset(&st, 0, sizeof st);
  weir_engine_stats_get(s->engine, &st);
  weir_metric_record(s->m.running, st.num_running);
  weir_metric_record(s->m.waiting, st.num_waiting);
  weir_metric_record(s->m.paused, st.num_paused);
  weir_metric_record(s->m.kv_usage, st.kv_blocks_total > 0
                                        ? (double)st.kv_blocks_used / st.kv_blocks_total
                                        : 0.0);
  counter_sync(s->m.preemptions, (double)st.num_preemptions);
  counter_sync(s->m.prefix_queries, (double)st.prefix_queries_tokens);
  counter_sync(s->m.prefix_hits, (double)st.prefix_hits_tokens);
  counter_sync(s->m.spec_draft, (double)st.spec_draft_tokens);
  counter_sync(s->m.spec_accepted, (double)st.spec_accepted_tokens);
}

/* ---- small JSON helpers ----------------------------------------------------------------- */

static int json_is_int(const cJSON *v, double lo, double hi) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  return d == floor(d) && d >= lo && d <= hi;
}

/* A JSON string for a token piece: the text when it is valid UTF-8, otherwise OpenAI's
 * "bytes:\xNN" spelling (a byte-fallback token holding part of a character). */
static char *token_display(weir__http_server *s, int32_t id, size_t *raw_len, char **raw) {
  char *t = NULL;
  size_t n = 0;
  if (weir_engine_token_text(s->engine, id, &t, &n) != WEIR_OK || !t) {
    free(t);
    t = strdup("");
    n = 0;
    if (!t) return NULL;
  }
  if (raw_len) *raw_len = n;
  if (weir_utf8_valid(t, n) && strlen(t) == n) {
    if (raw) *raw = NULL;
    return t;
  }
  char *out = malloc(6 + 4 * n + 1);
  if (!out) {
    free(t);
    return NULL;
  }
  strcpy(out, "bytes:");
  for (size_t i = 0; i < n; i++) sprintf(out + 6 + 4 * i, "\\x%02x", (unsigned char)t[i]);
  if (raw) *raw = t;
  else free(t);
  return out;
}

/* A JSON string for text that may hold any byte: cJSON's strings end at NUL, and a model can
 * produce one (a byte-fallback token). The text is escaped here, NUL as \u0000, invalid
 * UTF-8 as U+FFFD, and handed to cJSON as a raw value. NULL when out of memory. */
static cJSON *json_text(const char *s, size_t n) {
  weir_buf u = {0}, o = {0};
  weir_buf_append_utf8(&u, s ? s : "", s ? n : 0);
  weir_buf_append(&o, "\"", 1);
  size_t run = 0; /* bytes copied as they are, pending */
  for (size_t i = 0; i < u.len; i++) {
    unsigned char c = (unsigned char)u.p[i];
    const char *esc = NULL;
    char hex[8];
    if (c == '"') esc = "\\\"";
    else if (c == '\\') esc = "\\\\";
    else if (c == '\n') esc = "\\n";
    else if (c == '\r') esc = "\\r";
    else if (c == '\t') esc = "\\t";
    else if (c < 0x20) esc = (snprintf(hex, sizeof hex, "\\u%04x", c), hex);
    if (!esc) {
      run++;
      continue;
    }
    weir_buf_append(&o, u.p + i - run, run);
    run = 0;
    weir_buf_append(&o, esc, strlen(esc));
  }
  weir_buf_append(&o, u.p ? u.p + u.len - run : "", run);
  weir_buf_append(&o, "\"", 1);
  cJSON *item = u.oom || o.oom ? NULL : cJSON_CreateRaw(o.p);
  weir_buf_free(&u);
  weir_buf_free(&o);
  return item;
}

static cJSON *bytes_array(const char *t, size_t n) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; a && i < n; i++)
    cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)t[i]));
  return a;
}

/* ---- logprobs --------------------------------------------------------------------------- */

/* Completions: appends one token's entries to the four parallel arrays. */
static void completion_lp_append(weir__http_server *s, int k, const weir_sample_result *res,
                                 cJSON *tokens, cJSON *values, cJSON *top, cJSON *offsets,
                                 size_t *offset) {
  size_t n = 0;
  char *raw = NULL;
  char *disp = token_display(s, res->token, &n, &raw);
  cJSON_AddItemToArray(tokens, cJSON_CreateString(disp ? disp : ""));
  cJSON_AddItemToArray(values, cJSON_CreateNumber(res->logprob));
  cJSON *d = cJSON_CreateObject();
  /* The top k, plus the sampled token when it is not among them (OpenAI's rule). */
  for (int i = 0; d && i < res->num_top && i < k; i++) {
    char *td = token_display(s, res->top_tokens[i], NULL, NULL);
    if (td && !cJSON_GetObjectItemCaseSensitive(d, td))
      cJSON_AddNumberToObject(d, td, res->top_logprobs[i]);
    free(td);
  }
  if (d && disp && !cJSON_GetObjectItemCaseSensitive(d, disp))
    cJSON_AddNumberToObject(d, disp, res->logprob);
  cJSON_AddItemToArray(top, d);
  cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)*offset));
  *offset += n;
  free(disp);
  free(raw);
}

static cJSON *chat_lp_entry(weir__http_server *s, int32_t id, float lp) {
  size_t n = 0;
  char *raw = NULL;
  char *disp = token_display(s, id, &n, &raw);
  cJSON *o = cJSON_CreateObject();
  if (o) {
    cJSON_AddStringToObject(o, "token", disp ? disp : "");
    cJSON_AddNumberToObject(o, "logprob", lp);
    const char *b = raw ? raw : disp;
    cJSON_AddItemToObject(o, "bytes", bytes_array(b ? b : "", b ? n : 0));
  }
  free(disp);
  free(raw);
  return o;
}

static cJSON *chat_lp_content(weir__http_server *s, int k, const weir_sample_result *res,
                              int count) {
  cJSON *content = cJSON_CreateArray();
  for (int t = 0; content && t < count; t++) {
    cJSON *e = chat_lp_entry(s, res[t].token, res[t].logprob);
    if (!e) continue;
    cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
    for (int i = 0; top && i < res[t].num_top && i < k; i++)
      cJSON_AddItemToArray(top, chat_lp_entry(s, res[t].top_tokens[i], res[t].top_logprobs[i]));
    cJSON_AddItemToArray(content, e);
  }
  return content;
}

/* ---- responses -------------------------------------------------------------------------- */

static const char *finish_name(weir_finish_reason f) {
  switch (f) {
  case WEIR_FINISH_STOP: return "stop";
  case WEIR_FINISH_LENGTH: return "length";
  case WEIR_FINISH_ABORT: return "abort";
  case WEIR_FINISH_ERROR: return "error";
  case WEIR_FINISH_TIMEOUT: return "timeout";
  default: return NULL;
  }
}

static cJSON *usage_json(const weir__api_job *job) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (int p = 0; p < job->num_prompts; p++) {
    const api_choice *first = &job->choices[p * job->n];
    prompt += first->prompt_tokens;
    cached += first->cached_tokens;
  }
  for (int i = 0; i < job->num_choices; i++) completion += job->choices[i].completion_tokens;
  cJSON *u = cJSON_CreateObject();
  if (!u) return NULL;
  cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
  cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
  cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
  cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
  if (d) cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
  return u;
}

static cJSON *chunk_base(const weir__api_job *job) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "id", job->id);
  cJSON_AddStringToObject(o, "object", job->chat ? "chat.completion.chunk" : "text_completion");
  cJSON_AddNumberToObject(o, "created", (double)job->created);
  cJSON_AddStringToObject(o, "model", job->s->model_name);
  return o;
}

static void sse_send(weir__http_req *r, cJSON *o) {
  char *js = o && r ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!js) return;
  weir_buf b = {0};
  weir_buf_append(&b, "data: ", 6);
  weir_buf_append(&b, js, strlen(js));
  weir_buf_append(&b, "\n\n", 2);
  free(js);
  if (!b.oom) weir__http_stream_write(r, b.p, b.len);
  weir_buf_free(&b);
}

/* One streamed chunk for one choice. text may be NULL; lp is NULL or a logprobs value. */
static void stream_choice_chunk(weir__api_job *job, api_choice *ch, const char *text,
                                size_t text_len, cJSON *lp, const char *finish, int role) {
  cJSON *o = chunk_base(job);
  cJSON *choices = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
  cJSON *c = cJSON_CreateObject();
  if (!choices || !c) {
    cJSON_Delete(c);
    cJSON_Delete(lp);
    cJSON_Delete(o);
    return;
  }
  cJSON_AddItemToArray(choices, c);
  cJSON_AddNumberToObject(c, "index", ch->index);
  if (job->chat) {
    cJSON *delta = cJSON_AddObjectToObject(c, "delta");
    if (role) cJSON_AddStringToObject(delta, "role", "assistant");
    if (role || text_len) cJSON_AddItemToObject(delta, "content", json_text(text, text_len));
  } else {
    cJSON_AddItemToObject(c, "text", json_text(text, text_len));
  }
  if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
  else cJSON_AddNullToObject(c, "logprobs");
  if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
  else cJSON_AddNullToObject(c, "finish_reason");
  if (job->include_usage) cJSON_AddNullToObject(o, "usage");
  sse_send(job->r, o);
}

static void stream_finish(weir__api_job *job) {
  weir__http_req *r = job->r;
  const api_choice *err = NULL;
  for (int i = 0; i < job->num_choices; i++)
    if (job->choices[i].finish == WEIR_FINISH_ERROR) err = &job->choices[i];
  if (err) {
    cJSON *o = cJSON_CreateObject();
    cJSON *e = o ? cJSON_AddObjectToObject(o, "error") : NULL;
    if (e) {
      cJSON_AddStringToObject(e, "message", err->error ? err->error : weir_strerror(err->status));
      cJSON_AddStringToObject(e, "type", "server_error");
      cJSON_AddNullToObject(e, "param");
      cJSON_AddNullToObject(e, "code");
    }
    sse_send(r, o);
  }
  if (job->include_usage) {
    cJSON *o = chunk_base(job);
    if (o) {
      cJSON_AddArrayToObject(o, "choices");
      cJSON_AddItemToObject(o, "usage", usage_json(job));
    }
    sse_send(r, o);
  }
  static const char done[] = "data: [DONE]\n\n";
  weir__http_stream_write(r, done, sizeof done - 1);
  weir__http_stream_end(r);
}

static void respond_full(weir__api_job *job) {
  weir__http_req *r = job->r;
  for (int i = 0; i < job->num_choices; i++) {
    const api_choice *ch = &job->choices[i];
    if (ch->finish == WEIR_FINISH_ERROR) {
      weir__http_respond_error(r, 500, "server_error", NULL, NULL, "generation failed: %s",
                               ch->error ? ch->error : weir_strerror(ch->status));
      return;
    }
    if (ch->finish == WEIR_FINISH_ABORT) {
      weir__http_respond_error(r, 503, "server_error", NULL, NULL,
                               "the request was aborted because the server is shutting down");
      return;
    }
  }
  cJSON *o = cJSON_CreateObject();
  if (!o) {
    weir__http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return;
  }
  cJSON_AddStringToObject(o, "id", job->id);
  cJSON_AddStringToObject(o, "object", job->chat ? "chat.completion" : "text_completion");
  cJSON_AddNumberToObject(o, "created", (double)job->created);
  cJSON_AddStringToObject(o, "model", job->s->model_name);
  cJSON *choices = cJSON_AddArrayToObject(o, "choices");
  for (int i = 0; choices && i < job->num_choices; i++) {
    api_choice *ch = &job->choices[i];
    cJSON *c = cJSON_CreateObject();
    if (!c) break;
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", ch->index);
    weir_buf text = {0};
    if (job->echo)
      weir_buf_append(&text, job->echo_text[ch->prompt_index], job->echo_len[ch->prompt_index]);
    weir_buf_append(&text, ch->text.p ? ch->text.p : "", ch->text.len);
    if (job->chat) {
      cJSON *msg = cJSON_AddObjectToObject(c, "message");
      cJSON_AddStringToObject(msg, "role", "assistant");
      cJSON_AddItemToObject(msg, "content", json_text(text.p, text.len));
    } else {
      cJSON_AddItemToObject(c, "text", json_text(text.p, text.len));
    }
    weir_buf_free(&text);
    if (job->logprobs >= 0 && ch->lp_tokens) {
      cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
      if (job->chat) {
        cJSON_AddItemToObject(lp, "content", ch->lp_tokens);
        cJSON_AddNullToObject(lp, "refusal");
        ch->lp_tokens = NULL;
      } else {
        cJSON_AddItemToObject(lp, "tokens", ch->lp_tokens);
        cJSON_AddItemToObject(lp, "token_logprobs", ch->lp_values);
        cJSON_AddItemToObject(lp, "top_logprobs", ch->lp_top);
        cJSON_AddItemToObject(lp, "text_offset", ch->lp_offsets);
        ch->lp_tokens = ch->lp_values = ch->lp_top = ch->lp_offsets = NULL;
      }
    } else {
      cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", finish_name(ch->finish));
  }
  cJSON_AddItemToObject(o, "usage", usage_json(job));
  respond_json(r, 200, o);
  cJSON_Delete(o);
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
  if (ev->finish == WEIR_FINISH_ERROR) {
    ch->status = ev->status;
    if (ev->error) ch->error = strdup(ev->error);
  }
  double e2e = (double)(qe->time_ns - job->arrival_ns) / 1e9;
  double ttft = ch->first_ns ? (double)(ch->first_ns - job->arrival_ns) / 1e9 : -1;
  if ((int)ev->finish >= 1 && (int)ev->finish <= 5) weir_metric_record(s->m.success[ev->finish], 1);
  weir_metric_record(s->m.e2e, e2e);
  if (ev->timing.queue_s > 0) weir_metric_record(s->m.queue, ev->timing.queue_s);
  if (ev->timing.prefill_s > 0) weir_metric_record(s->m.prefill, ev->timing.prefill_s);
  if (ev->timing.decode_s > 0) weir_metric_record(s->m.decode, ev->timing.decode_s);
  if (ttft >= 0 && ch->completion_tokens > 1)
    weir_metric_record(s->m.tpot, (e2e - ttft) / (ch->completion_tokens - 1));
  weir_metric_add(s->m.prompt_tokens, ch->prompt_tokens);
  weir_metric_add(s->m.generation_tokens, ch->completion_tokens);

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
                     job->id, ch->index, job->chat ? "chat" : "completions", ch->prompt_tokens,
                     ch->cached_tokens, ch->completion_tokens, ttft >= 0 ? ttft * 1e3 : 0.0,
                     mean, p95, e2e * 1e3, tps, ch->num_preemptions,
                     finish_name(ev->finish) ? finish_name(ev->finish) : "none",
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

static void on_event(weir__http_server *s, weir__queued_event *qe) {
  api_choice *ch = (api_choice *)qe->user;
  weir__api_job *job = ch->job;
  const weir_gen_event *ev = &qe->ev;
  ch->prompt_tokens = ev->prompt_tokens;
  ch->cached_tokens = ev->cached_tokens;
  if (ev->completion_tokens > ch->completion_tokens) ch->completion_tokens = ev->completion_tokens;
  ch->num_preemptions = ev->num_preemptions;
  if (ev->num_tokens > 0) record_token_timing(job, ch, qe->time_ns, ev->num_tokens);
  const char *finish = ev->finish != WEIR_FINISH_NONE ? finish_name(ev->finish) : NULL;

  if (job->r && job->stream) {
    cJSON *lp = NULL;
    if (job->logprobs >= 0 && ev->logprobs && ev->num_tokens > 0) {
      if (job->chat) {
        lp = cJSON_CreateObject();
        if (lp) {
          cJSON_AddItemToObject(lp, "content",
                                chat_lp_content(s, job->logprobs, ev->logprobs, ev->num_tokens));
          cJSON_AddNullToObject(lp, "refusal");
        }
      } else {
        lp = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(lp, "tokens");
        cJSON *b = cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON *c = cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON *d = cJSON_AddArrayToObject(lp, "text_offset");
        for (int i = 0; a && b && c && d && i < ev->num_tokens; i++)
          completion_lp_append(s, job->logprobs, &ev->logprobs[i], a, b, c, d, &ch->lp_offset);
      }
    }
    int has_text = ev->text_len > 0;
    if (has_text || lp || finish) {
      /* An error ends the stream with an error event instead of a finish_reason. */
      const char *fr = ev->finish == WEIR_FINISH_ERROR ? NULL : finish;
      if (has_text || lp || fr)
        stream_choice_chunk(job, ch, ev->text, ev->text_len, lp, fr, 0);
    }
  } else if (job->r) {
    weir_buf_append(&ch->text, ev->text, ev->text_len);
    if (job->logprobs >= 0 && ev->logprobs && ev->num_tokens > 0) {
      if (job->chat) {
        if (!ch->lp_tokens) ch->lp_tokens = cJSON_CreateArray();
        cJSON *part = chat_lp_content(s, job->logprobs, ev->logprobs, ev->num_tokens);
        cJSON *it = part ? part->child : NULL;
        while (it && ch->lp_tokens) {
          cJSON *n = it->next;
          cJSON_AddItemToArray(ch->lp_tokens, cJSON_DetachItemViaPointer(part, it));
          it = n;
        }
        cJSON_Delete(part);
      } else {
        if (!ch->lp_tokens) {
          ch->lp_tokens = cJSON_CreateArray();
          ch->lp_values = cJSON_CreateArray();
          ch->lp_top = cJSON_CreateArray();
          ch->lp_offsets = cJSON_CreateArray();
        }
        for (int i = 0; ch->lp_offsets && i < ev->num_tokens; i++)
          completion_lp_append(s, job->logprobs, &ev->logprobs[i], ch->lp_tokens,
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
  if (job->r) {
    weir__http_req *r = job->r;
    r->job = NULL;
    if (job->stream) stream_finish(job);
    else respond_full(job);
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
  size_t err_len = ev->error ? strlen(ev->error) + 1 : 0;
  size_t size = sizeof(weir__queued_event) + nlp * sizeof(weir_sample_result) +
                ntok * sizeof(int32_t) + text_len + 1 + err_len;
  weir__queued_event *qe = malloc(size);
  if (!qe) {
    /* Losing a non-final event only loses text; a final one must arrive, so it takes the
     * spare preallocated at submit, without text. */
    weir__engine_user *u = user;
    weir_log(WEIR_LOG_ERROR, "http", "out of memory queueing an engine event");
    if (ev->finish == WEIR_FINISH_NONE || !u->spare) return;
    qe = u->spare;
    u->spare = NULL;
    text_len = ntok = nlp = err_len = 0;
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
  pthread_mutex_lock(&s->ev_lock);
  if (s->ev_tail) s->ev_tail->next = qe;
  else s->ev_head = qe;
  s->ev_tail = qe;
  pthread_mutex_unlock(&s->ev_lock);
  uv_async_send(&s->async);
}

/* The engine's callback carries only `user`: a weir__engine_user. */
static void engine_cb(void *user, const weir_gen_event *ev) {
  on_engine_event(((weir__engine_user *)user)->srv, user, ev);
}

void weir__api_on_async(uv_async_t *a) {
  weir__http_server *s = a->data;
  pthread_mutex_lock(&s->ev_lock);
  weir__queued_event *qe = s->ev_head;
  s->ev_head = s->ev_tail = NULL;
  pthread_mutex_unlock(&s->ev_lock);
  while (qe) {
    weir__queued_event *n = qe->next;
    on_event(s, qe);
    qe = n;
  }
}

/* ---- parameters ------------------------------------------------------------------------- */

typedef struct params {
  const cJSON *prompt, *messages;
  const char *model;
  int max_tokens;          /* 0: not given */
  double temperature, top_p, min_p, presence, frequency, repetition;
  int top_k, n, best_of;
  const char *stop[MAX_STOP];
  int num_stop;
  int32_t stop_ids[WEIR_MAX_STOP_TOKEN_IDS];
  int num_stop_ids;
  int32_t bias_tokens[WEIR_MAX_LOGIT_BIAS]; /* logit_bias, in the request's key order */
  float bias_values[WEIR_MAX_LOGIT_BIAS];
  int num_bias;
  int has_seed;
  uint64_t seed;
  int logprobs;            /* -1 unless asked */
  int chat_logprobs, top_logprobs;
  int echo, ignore_eos, min_tokens, stream, include_usage, has_stream_options, priority;
} params;

/* Parameters OpenAI defines that weir does not implement: named in their own message. */
static const char *const k_unsupported[] = {
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls",
    "response_format", "suffix", "best_of", "audio", "modalities", "prediction",
    "store", "metadata", "service_tier", "reasoning_effort", "web_search_options", NULL};

static int unsupported(api_error *e, const char *name) {
  for (int i = 0; k_unsupported[i]; i++)
    if (!strcmp(k_unsupported[i], name))
      return fail(e, 400, name, "unsupported_parameter",
                  "Unsupported parameter: '%s' is not supported by this server.", name);
  return fail(e, 400, name, "unknown_parameter", "Unrecognized request argument supplied: %s",
              name);
}

static int want_number(api_error *e, const cJSON *v, const char *name, double lo, double hi,
                       int lo_open, double *out) {
  if (!cJSON_IsNumber(v))
    return fail(e, 400, name, "invalid_type", "'%s' must be a number", name);
  double d = v->valuedouble;
  if (!isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo))
    return fail(e, 400, name, "invalid_value", "'%s' must be %s %g and <= %g, got %g", name,
                lo_open ? ">" : ">=", lo, hi, d);
  *out = d;
  return 0;
}

static int want_int(api_error *e, const cJSON *v, const char *name, double lo, double hi,
                    int *out) {
  if (!json_is_int(v, -9.0e15, 9.0e15))
    return fail(e, 400, name, "invalid_type", "'%s' must be an integer", name);
  if (v->valuedouble < lo || v->valuedouble > hi)
    return fail(e, 400, name, "invalid_value", "'%s' must be between %.0f and %.0f, got %.0f",
                name, lo, hi, v->valuedouble);
  *out = (int)v->valuedouble;
  return 0;
}

static int want_bool(api_error *e, const cJSON *v, const char *name, int *out) {
  if (!cJSON_IsBool(v))
    return fail(e, 400, name, "invalid_type", "'%s' must be a boolean", name);
  *out = cJSON_IsTrue(v);
  return 0;
}

static int parse_params(weir__http_server *s, const cJSON *root, int chat, params *p,
                        api_error *e) {
  memset(p, 0, sizeof *p);
  p->temperature = 1.0;
  p->top_p = 1.0;
  p->repetition = 1.0;
  p->top_k = -1;
  p->n = 1;
  p->logprobs = -1;
  int have_best_of = 0, have_top_logprobs = 0, have_max_tokens = 0, have_max_completion = 0;
  int max_completion_tokens = 0;
  const double vocab = s->info.vocab_size > 0 ? s->info.vocab_size : 1;
  for (const cJSON *it = root->child; it; it = it->next) {
    const char *k = it->string ? it->string : "";
    if (cJSON_IsNull(it)) continue; /* null means "not given", as OpenAI's API treats it */
    if (!strcmp(k, "model")) {
      if (!cJSON_IsString(it))
        return fail(e, 400, k, "invalid_type", "'model' must be a string");
      p->model = it->valuestring;
    } else if (!chat && !strcmp(k, "prompt")) {
      p->prompt = it;
    } else if (chat && !strcmp(k, "messages")) {
      p->messages = it;
    } else if (!strcmp(k, "max_tokens")) {
      if (want_int(e, it, k, 1, 1e9, &p->max_tokens)) return -1;
      have_max_tokens = 1;
    } else if (chat && !strcmp(k, "max_completion_tokens")) {
      if (want_int(e, it, k, 1, 1e9, &max_completion_tokens)) return -1;
      have_max_completion = 1;
    } else if (!strcmp(k, "temperature")) {
      if (want_number(e, it, k, 0, 2, 0, &p->temperature)) return -1;
    } else if (!strcmp(k, "top_p")) {
      if (want_number(e, it, k, 0, 1, 1, &p->top_p)) return -1;
    } else if (!strcmp(k, "min_p")) {
      if (want_number(e, it, k, 0, 1, 0, &p->min_p)) return -1;
    } else if (!strcmp(k, "top_k")) {
      if (want_int(e, it, k, -1, 1e9, &p->top_k)) return -1;
    } else if (!strcmp(k, "n")) {
      if (want_int(e, it, k, 1, MAX_N, &p->n)) return -1;
    } else if (!chat && !strcmp(k, "best_of")) {
      if (want_int(e, it, k, 1, MAX_N, &p->best_of)) return -1;
      have_best_of = 1;
    } else if (!strcmp(k, "presence_penalty")) {
      if (want_number(e, it, k, -2, 2, 0, &p->presence)) return -1;
    } else if (!strcmp(k, "frequency_penalty")) {
      if (want_number(e, it, k, -2, 2, 0, &p->frequency)) return -1;
    } else if (!strcmp(k, "repetition_penalty")) {
      if (want_number(e, it, k, 0, 10, 1, &p->repetition)) return -1;
    } else if (!strcmp(k, "seed")) {
      if (!json_is_int(it, -9007199254740991.0, 9007199254740991.0))
        return fail(e, 400, k, "invalid_type", "'seed' must be an integer");
      p->has_seed = 1;
      p->seed = (uint64_t)(int64_t)it->valuedouble;
    } else if (!strcmp(k, "stop")) {
      if (cJSON_IsString(it)) {
        if (!*it->valuestring)
          return fail(e, 400, k, "invalid_value", "'stop' strings must not be empty");
        if (p->num_stop == MAX_STOP)
          return fail(e, 400, k, "invalid_value", "'stop' allows at most %d strings", MAX_STOP);
        p->stop[p->num_stop++] = it->valuestring;
      } else if (cJSON_IsArray(it)) {
        for (const cJSON *x = it->child; x; x = x->next) {
          if (!cJSON_IsString(x))
            return fail(e, 400, k, "invalid_type", "'stop' must be a string or a list of strings");
          if (!*x->valuestring)
            return fail(e, 400, k, "invalid_value", "'stop' strings must not be empty");
          if (p->num_stop == MAX_STOP)
            return fail(e, 400, k, "invalid_value", "'stop' allows at most %d strings", MAX_STOP);
          p->stop[p->num_stop++] = x->valuestring;
        }
      } else {
        return fail(e, 400, k, "invalid_type", "'stop' must be a string or a list of strings");
      }
    } else if (!strcmp(k, "stop_token_ids")) {
      if (!cJSON_IsArray(it))
        return fail(e, 400, k, "invalid_type", "'stop_token_ids' must be a list of token ids");
      for (const cJSON *x = it->child; x; x = x->next) {
        if (!json_is_int(x, 0, vocab - 1))
          return fail(e, 400, k, "invalid_value",
                      "'stop_token_ids' entries must be token ids in [0, %d)",
                      s->info.vocab_size);
        if (p->num_stop_ids == WEIR_MAX_STOP_TOKEN_IDS)
          return fail(e, 400, k, "invalid_value", "'stop_token_ids' allows at most %d ids",
                      WEIR_MAX_STOP_TOKEN_IDS);
        p->stop_ids[p->num_stop_ids++] = (int32_t)x->valuedouble;
      }
    } else if (!strcmp(k, "logprobs")) {
      if (chat) {
        if (want_bool(e, it, k, &p->chat_logprobs)) return -1;
      } else {
        if (cJSON_IsBool(it))
          return fail(e, 400, k, "invalid_type",
                      "'logprobs' must be an integer from 0 to %d for completions",
                      WEIR_MAX_LOGPROBS);
        if (want_int(e, it, k, 0, WEIR_MAX_LOGPROBS, &p->logprobs)) return -1;
      }
    } else if (chat && !strcmp(k, "top_logprobs")) {
      if (want_int(e, it, k, 0, WEIR_MAX_LOGPROBS, &p->top_logprobs)) return -1;
      have_top_logprobs = 1;
    } else if (!chat && !strcmp(k, "echo")) {
      if (want_bool(e, it, k, &p->echo)) return -1;
    } else if (!strcmp(k, "ignore_eos")) {
      if (want_bool(e, it, k, &p->ignore_eos)) return -1;
    } else if (!strcmp(k, "min_tokens")) {
      if (want_int(e, it, k, 0, 1e9, &p->min_tokens)) return -1;
    } else if (!strcmp(k, "stream")) {
      if (want_bool(e, it, k, &p->stream)) return -1;
    } else if (!strcmp(k, "stream_options")) {
      if (!cJSON_IsObject(it))
        return fail(e, 400, k, "invalid_type", "'stream_options' must be an object");
      p->has_stream_options = 1;
      for (const cJSON *x = it->child; x; x = x->next) {
        if (!strcmp(x->string, "include_usage")) {
          if (!cJSON_IsNull(x) && want_bool(e, x, "stream_options.include_usage",
                                            &p->include_usage))
            return -1;
        } else {
          char name[96];
          snprintf(name, sizeof name, "stream_options.%s", x->string);
          return unsupported(e, name);
        }
      }
    } else if (!strcmp(k, "user")) {
      if (!cJSON_IsString(it)) return fail(e, 400, k, "invalid_type", "'user' must be a string");
    } else if (!strcmp(k, "priority")) {
      if (want_int(e, it, k, -1e6, 1e6, &p->priority)) return -1;
    } else if (!strcmp(k, "best_of") && chat) {
      return unsupported(e, k);
    } else if (!strcmp(k, "suffix") && cJSON_IsString(it) && !*it->valuestring) {
      /* An empty suffix asks for nothing. */
    } else if (!strcmp(k, "logit_bias")) {
      if (!cJSON_IsObject(it))
        return fail(e, 400, k, "invalid_type",
                    "'logit_bias' must be an object mapping token ids to numbers");
      for (const cJSON *b = it->child; b; b = b->next) {
        if (p->num_bias == WEIR_MAX_LOGIT_BIAS)
          return fail(e, 400, k, "invalid_value", "'logit_bias' allows at most %d entries",
                      WEIR_MAX_LOGIT_BIAS);
        const char *key = b->string;
        size_t kl = strlen(key);
        long id = -1;
        if (kl > 0 && kl <= 10 && strspn(key, "0123456789") == kl) id = strtol(key, NULL, 10);
        if (id < 0 || id >= s->info.vocab_size)
          return fail(e, 400, k, "invalid_value",
                      "'logit_bias' keys must be token ids in [0, %d), got '%.40s'",
                      (int)s->info.vocab_size, key);
        if (!cJSON_IsNumber(b) || !(b->valuedouble >= -100.0 && b->valuedouble <= 100.0))
          return fail(e, 400, k, "invalid_value",
                      "'logit_bias' values must be numbers in [-100, 100] (token %ld)", id);
        p->bias_tokens[p->num_bias] = (int32_t)id;
        p->bias_values[p->num_bias++] = (float)b->valuedouble;
      }
    } else if (chat && !strcmp(k, "response_format") && cJSON_IsObject(it) &&
               cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "type")) &&
               !strcmp(cJSON_GetObjectItemCaseSensitive(it, "type")->valuestring, "text") &&
               cJSON_GetArraySize(it) == 1) {
      /* Plain text is what weir produces. */
    } else if (chat && !strcmp(k, "tools") && cJSON_IsArray(it) && !it->child) {
      /* No tools offered. */
    } else if (chat && !strcmp(k, "tool_choice") && cJSON_IsString(it) &&
               !strcmp(it->valuestring, "none")) {
      /* The model may not call tools: the only behaviour weir has. */
    } else {
      return unsupported(e, k);
    }
  }
  if (!chat && !p->prompt)
    return fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
  if (chat && !p->messages)
    return fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
  if (have_max_completion) {
    if (have_max_tokens && p->max_tokens != max_completion_tokens)
      return fail(e, 400, "max_completion_tokens", "invalid_value",
                  "'max_tokens' and 'max_completion_tokens' disagree");
    p->max_tokens = max_completion_tokens;
  }
  if (have_best_of && p->best_of != p->n)
    return fail(e, 400, "best_of", "unsupported_parameter",
                "Unsupported parameter: 'best_of' must equal 'n' (%d); this server does not "
                "rank extra candidates", p->n);
  if (p->max_tokens > 0 && p->min_tokens > p->max_tokens)
    return fail(e, 400, "min_tokens", "invalid_value",
                "'min_tokens' (%d) must not exceed 'max_tokens' (%d)", p->min_tokens,
                p->max_tokens);
  if (p->has_stream_options && !p->stream)
    return fail(e, 400, "stream_options", "invalid_value",
                "'stream_options' is only allowed when 'stream' is true");
  if (chat) {
    if (have_top_logprobs && !p->chat_logprobs)
      return fail(e, 400, "top_logprobs", "invalid_value",
                  "'top_logprobs' requires 'logprobs' to be true");
    p->logprobs = p->chat_logprobs ? p->top_logprobs : -1;
  }
  if (p->echo && p->logprobs >= 0)
    return fail(e, 400, "echo", "unsupported_parameter",
                "Unsupported parameter: 'echo' together with 'logprobs' (prompt logprobs are "
                "not computed by this server)");
  if (p->model && !serves_model(s, p->model))
    return fail(e, 404, "model", "model_not_found", "The model `%s` does not exist.", p->model);
  return 0;
}

/* ---- prompts ---------------------------------------------------------------------------- */

typedef struct prompt_list {
  int32_t **ids;
  int32_t *lens;
  int count;
} prompt_list;

static void prompts_free(prompt_list *pl) {
  for (int i = 0; i < pl->count; i++) free(pl->ids[i]);
  free(pl->ids);
  free(pl->lens);
  memset(pl, 0, sizeof *pl);
}

static int prompts_add(prompt_list *pl, int32_t *ids, int32_t n, api_error *e) {
  int32_t **a = realloc(pl->ids, sizeof *a * (size_t)(pl->count + 1));
  if (a) pl->ids = a;
  int32_t *l = a ? realloc(pl->lens, sizeof *l * (size_t)(pl->count + 1)) : NULL;
  if (l) pl->lens = l;
  if (!a || !l) {
    free(ids);
    return fail(e, 500, NULL, NULL, "out of memory");
  }
  pl->ids[pl->count] = ids;
  pl->lens[pl->count] = n;
  pl->count++;
  return 0;
}

static int tokenize_into(weir__http_server *s, const char *text, size_t len, int add_special,
                         prompt_list *pl, api_error *e) {
  int32_t *ids = NULL, n = 0;
  int rc = weir_engine_tokenize(s->engine, text, len, add_special, &ids, &n);
  if (rc != WEIR_OK) {
    free(ids);
    return fail(e, 500, NULL, NULL, "tokenization failed: %s", weir_strerror(rc));
  }
  return prompts_add(pl, ids, n, e);
}

static int ids_from_array(weir__http_server *s, const cJSON *arr, const char *param,
                          prompt_list *pl, api_error *e) {
  int n = cJSON_GetArraySize(arr);
  int32_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
  if (!ids) return fail(e, 500, NULL, NULL, "out of memory");
  int i = 0;
  for (const cJSON *x = arr->child; x; x = x->next, i++) {
    if (!json_is_int(x, 0, s->info.vocab_size - 1)) {
      free(ids);
      return fail(e, 400, param, "invalid_value",
                  "'%s' token ids must be integers in [0, %d)", param, s->info.vocab_size);
    }
    ids[i] = (int32_t)x->valuedouble;
  }
  return prompts_add(pl, ids, n, e);
}

static int completion_prompts(weir__http_server *s, const cJSON *prompt, prompt_list *pl,
                              api_error *e) {
  static const char shape[] = "'prompt' must be a string, a list of strings, a list of token "
                              "ids or a list of lists of token ids";
  if (cJSON_IsString(prompt))
    return tokenize_into(s, prompt->valuestring, strlen(prompt->valuestring), 1, pl, e);
  if (!cJSON_IsArray(prompt)) return fail(e, 400, "prompt", "invalid_type", "%s", shape);
  const cJSON *first = prompt->child;
  if (!first) return fail(e, 400, "prompt", "invalid_value", "'prompt' must not be empty");
  if (cJSON_IsNumber(first)) return ids_from_array(s, prompt, "prompt", pl, e);
  for (const cJSON *x = prompt->child; x; x = x->next) {
    if (cJSON_IsString(first) && cJSON_IsString(x)) {
      if (tokenize_into(s, x->valuestring, strlen(x->valuestring), 1, pl, e)) return -1;
    } else if (cJSON_IsArray(first) && cJSON_IsArray(x)) {
      if (!x->child) return fail(e, 400, "prompt", "invalid_value", "a prompt must not be empty");
      if (ids_from_array(s, x, "prompt", pl, e)) return -1;
    } else {
      return fail(e, 400, "prompt", "invalid_type", "%s", shape);
    }
  }
  return 0;
}

/* The text of one message's content: a string, or the concatenation of its text parts. */
static int message_content(const cJSON *c, int idx, const char *role, weir_buf *out,
                           api_error *e) {
  char param[64];
  snprintf(param, sizeof param, "messages[%d].content", idx);
  if (!c || cJSON_IsNull(c)) {
    if (!strcmp(role, "assistant")) return 0;
    return fail(e, 400, param, "missing_required_parameter", "'%s' is required", param);
  }
  if (cJSON_IsString(c)) {
    weir_buf_append(out, c->valuestring, strlen(c->valuestring));
    return 0;
  }
  if (!cJSON_IsArray(c))
    return fail(e, 400, param, "invalid_type", "'%s' must be a string or a list of parts", param);
  int j = 0, first = 1;
  for (const cJSON *part = c->child; part; part = part->next, j++) {
    char pp[96];
    snprintf(pp, sizeof pp, "messages[%d].content[%d]", idx, j);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsObject(part) || !cJSON_IsString(type))
      return fail(e, 400, pp, "invalid_type", "'%s' must be an object with a 'type'", pp);
    if (strcmp(type->valuestring, "text"))
      return fail(e, 400, pp, "unsupported_parameter",
                  "Unsupported content part type '%s' in '%s': only 'text' is supported",
                  type->valuestring, pp);
    if (!cJSON_IsString(text))
      return fail(e, 400, pp, "invalid_type", "'%s.text' must be a string", pp);
    for (const cJSON *k = part->child; k; k = k->next)
      if (strcmp(k->string, "type") && strcmp(k->string, "text"))
        return fail(e, 400, pp, "unknown_parameter", "Unrecognized key '%s' in '%s'", k->string,
                    pp);
    if (!first) weir_buf_append(out, "\n", 1);
    weir_buf_append(out, text->valuestring, strlen(text->valuestring));
    first = 0;
  }
  return 0;
}

static int chat_prompt(weir__http_server *s, const cJSON *messages, prompt_list *pl,
                       api_error *e) {
  if (!cJSON_IsArray(messages))
    return fail(e, 400, "messages", "invalid_type", "'messages' must be a list of messages");
  int n = cJSON_GetArraySize(messages);
  if (n == 0) return fail(e, 400, "messages", "invalid_value", "'messages' must not be empty");
  int rc = -1;
  weir_chat_message *msgs = calloc((size_t)n, sizeof *msgs);
  weir_buf *texts = calloc((size_t)n, sizeof *texts);
  char *rendered = NULL;
  if (!msgs || !texts) {
    fail(e, 500, NULL, NULL, "out of memory");
    goto free_msgs;
  }
  int i = 0;
  for (const cJSON *m = messages->child; m; m = m->next, i++) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m)) {
      fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
      goto free_msgs;
    }
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    for (const cJSON *k = m->child; k; k = k->next)
      if (strcmp(k->string, "role") && strcmp(k->string, "content")) {
        char pk[128];
        snprintf(pk, sizeof pk, "messages[%d].%s", i, k->string);
        unsupported(e, pk);
        goto free_msgs;
      }
    if (!cJSON_IsString(role)) {
      fail(e, 400, param, "invalid_type", "'%s.role' must be a string", param);
      goto free_msgs;
    }
    const char *r = role->valuestring;
    if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
      fail(e, 400, param, "invalid_value",
           "'%s.role' must be one of system, developer, user, assistant; got '%s'", param,
           role->valuestring);
      goto free_msgs;
    }
    if (message_content(cJSON_GetObjectItemCaseSensitive(m, "content"), i, r, &texts[i], e))
      goto free_msgs;
    weir_buf_append(&texts[i], "", 0);
    if (texts[i].oom) {
      fail(e, 500, NULL, NULL, "out of memory");
      goto free_msgs;
    }
    msgs[i].role = r;
    msgs[i].content = texts[i].p ? texts[i].p : "";
  }
  int r = weir_engine_render_chat(s->engine, msgs, n, 1, &rendered);
  if (r != WEIR_OK) {
    fail(e, r == WEIR_E_INVAL ? 400 : 500, "messages", NULL,
         "the chat template could not render these messages: %s", weir_strerror(r));
    goto free_msgs;
  }
  /* The rendered text holds special tokens (<|im_start|> ...) that only tokenizing with
   * add_special parses, and that also adds the tokenizer's BOS when its metadata asks for one.
   * A template that writes the BOS itself would then get two: its textual BOS is dropped and
   * the tokenizer's stands in for it. */
  size_t blen = s->bos_text ? strlen(s->bos_text) : 0;
  size_t skip = blen && !strncmp(rendered, s->bos_text, blen) ? blen : 0;
  rc = tokenize_into(s, rendered + skip, strlen(rendered) - skip, 1, pl, e);
  if (rc == 0 && skip) {
    int last = pl->count - 1;
    int32_t *ids = pl->ids[last], len = pl->lens[last];
    if (len == 0 || ids[0] != s->info.bos_id) {
      int32_t *grown = realloc(ids, sizeof *ids * (size_t)(len + 1));
      if (!grown) {
        rc = fail(e, 500, NULL, NULL, "out of memory");
        goto free_msgs;
      }
      memmove(grown + 1, grown, sizeof *grown * (size_t)len);
      grown[0] = s->info.bos_id;
      pl->ids[last] = grown;
      pl->lens[last] = len + 1;
    }
  }
free_msgs:
  free(rendered);
  if (texts)
    for (int k = 0; k < n; k++) weir_buf_free(&texts[k]);
  free(texts);
  free(msgs);
  return rc;
}

/* ---- request bodies --------------------------------------------------------------------- */

/* A JSON path being built while walking a document: "messages[2].content". Segments that do
 * not fit are dropped, and the path says so with "...". */
typedef struct json_path {
  char s[MAX_PATH];
  size_t len;
} json_path;

static size_t path_push_key(json_path *p, const char *key, size_t klen) {
  size_t old = p->len;
  size_t need = (old ? 1 : 0) + klen;
  if (old + need + 4 >= sizeof p->s) {
    if (old + 4 < sizeof p->s && (old < 3 || strcmp(p->s + old - 3, "..."))) {
      memcpy(p->s + old, "...", 4);
      p->len = old + 3;
    }
    return old;
  }
  if (old) p->s[p->len++] = '.';
  memcpy(p->s + p->len, key, klen);
  p->len += klen;
  p->s[p->len] = '\0';
  return old;
}

static size_t path_push_index(json_path *p, long idx) {
  size_t old = p->len;
  char seg[32];
  int n = snprintf(seg, sizeof seg, "[%ld]", idx);
  if (old + (size_t)n + 4 >= sizeof p->s) return path_push_key(p, "", 0);
  memcpy(p->s + old, seg, (size_t)n + 1);
  p->len += (size_t)n;
  return old;
}

static void path_pop(json_path *p, size_t old) {
  p->len = old;
  p->s[old] = '\0';
}

/* Finds a string holding a NUL character (the escape \u0000 or a raw 0 byte) in a JSON text
 * that already parsed, and names where it is: cJSON hands strings out NUL-terminated, so
 * such a string would be silently cut. The scan is escape-aware: in "\\u0000" the backslash
 * is escaped and no NUL follows. Returns 1 and fills *where (the value's path, or the key
 * itself when the NUL is in a key) when one is found. */
static int find_nul_string(const char *js, size_t n, json_path *where) {
  if (!memchr(js, '\0', n) && !memmem(js, n, "\\u0000", 6)) return 0;
  /* Containers are tracked to name the path: for each level its kind, the index of the
   * current element (arrays) and where the current key's text starts (objects). */
  typedef struct level {
    char kind;        /* '{' or '[' */
    long index;
    size_t key_at, key_len;
    size_t path_len;  /* where.len before this level's segment */
  } level;
  size_t cap = 64, depth = 0;
  level *st = malloc(cap * sizeof *st);
  if (!st) return 0;
  int expect_key = 0, found = 0;
  where->len = 0;
  where->s[0] = '\0';
  for (size_t i = 0; i < n && !found; i++) {
    char ch = js[i];
    if (ch == '{' || ch == '[') {
      if (depth == cap) {
        level *g = realloc(st, 2 * cap * sizeof *st);
        if (!g) break;
        st = g;
        cap *= 2;
      }
      st[depth] = (level){ch, 0, 0, 0, where->len};
      depth++;
      expect_key = ch == '{';
    } else if (ch == '}' || ch == ']') {
      if (depth) depth--;
      expect_key = 0;
    } else if (ch == ',') {
      if (depth && st[depth - 1].kind == '[') st[depth - 1].index++;
      expect_key = depth && st[depth - 1].kind == '{';
    } else if (ch == ':') {
      expect_key = 0;
    } else if (ch == '"') {
      size_t start = ++i;
      int nul = 0;
      for (; i < n && js[i] != '"'; i++) {
        if (js[i] == '\0') nul = 1;
        if (js[i] == '\\' && i + 1 < n) {
          if (i + 5 < n && !memcmp(js + i + 1, "u0000", 5)) nul = 1;
          i++; /* the escaped character, whatever it is */
        }
      }
      int is_key = expect_key;
      if (is_key) {
        st[depth - 1].key_at = start;
        st[depth - 1].key_len = i - start;
      }
      if (nul) {
        /* The path of the enclosing containers, then this key or element. */
        path_pop(where, 0);
        for (size_t d = 0; d < depth; d++) {
          if (st[d].kind == '[') {
            path_push_index(where, st[d].index);
          } else if (d + 1 < depth || !is_key) {
            path_push_key(where, js + st[d].key_at, st[d].key_len);
          }
        }
        if (is_key) {
          /* The key itself, its NUL written as the escape it was sent as. */
          size_t kl = i - start;
          char key[64];
          size_t o = 0;
          for (size_t k = 0; k < kl && o + 7 < sizeof key; k++) {
            if (js[start + k] == '\0') {
              memcpy(key + o, "\\u0000", 6);
              o += 6;
            } else {
              key[o++] = js[start + k];
            }
          }
          /* Cut on a character boundary, not inside one. */
          key[o] = '\0';
          weir_utf8_trim(key);
          path_push_key(where, key, strlen(key));
        }
        found = 1;
      }
    }
  }
  free(st);
  return found;
}

static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds a key that occurs twice in one object anywhere under `node`; fills *where with its
 * path. cJSON keeps every duplicate, so the code reading the request would otherwise see
 * one of them, or all of them one after the other. Returns 1 when found, -1 out of memory. */
static int find_duplicate_key(const cJSON *node, json_path *where) {
  if (cJSON_IsObject(node)) {
    int n = 0;
    for (const cJSON *c = node->child; c; c = c->next) n++;
    if (n > 1) {
      const char *small[16];
      const char **keys = n <= 16 ? small : malloc(sizeof *keys * (size_t)n);
      if (!keys) return -1;
      int k = 0;
      for (const cJSON *c = node->child; c; c = c->next) keys[k++] = c->string ? c->string : "";
      qsort(keys, (size_t)n, sizeof *keys, cmp_key);
      const char *dup = NULL;
      for (int i = 1; i < n && !dup; i++)
        if (!strcmp(keys[i - 1], keys[i])) dup = keys[i];
      if (keys != small) free(keys);
      if (dup) {
        path_push_key(where, dup, strlen(dup));
        return 1;
      }
    }
    for (const cJSON *c = node->child; c; c = c->next) {
      size_t old = path_push_key(where, c->string ? c->string : "", c->string ? strlen(c->string) : 0);
      int rc = find_duplicate_key(c, where);
      if (rc) return rc;
      path_pop(where, old);
    }
  } else if (cJSON_IsArray(node)) {
    long i = 0;
    for (const cJSON *c = node->child; c; c = c->next, i++) {
      if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
      size_t old = path_push_index(where, i);
      int rc = find_duplicate_key(c, where);
      if (rc) return rc;
      path_pop(where, old);
    }
  }
  return 0;
}

/* Parses a request body that must be one JSON object. Invalid UTF-8 in it is replaced by
 * U+FFFD first (so that no invalid byte reaches a prompt, a stop string, an echo or an
 * error message); then a string holding NUL and a duplicated key are refused with 400
 * naming where they are. */
static cJSON *parse_body_object(weir__http_req *r, api_error *e) {
  if (r->body.len && !weir_utf8_valid(r->body.p, r->body.len)) {
    weir_buf fixed = {0};
    if (weir_buf_append_utf8(&fixed, r->body.p, r->body.len), fixed.oom) {
      weir_buf_free(&fixed);
      fail(e, 500, NULL, NULL, "out of memory");
      return NULL;
    }
    weir_buf_free(&r->body);
    r->body = fixed;
  }
  const char *body = r->body.p ? r->body.p : "";
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, r->body.len, &end, 0);
  if (!root) {
    fail(e, 400, NULL, "invalid_json", "The request body is not valid JSON");
    return NULL;
  }
  while (end && end < body + r->body.len && isspace((unsigned char)*end)) end++;
  if (end != body + r->body.len) {
    fail(e, 400, NULL, "invalid_json", "The request body has data after the JSON value");
    goto fail;
  }
  if (!cJSON_IsObject(root)) {
    fail(e, 400, NULL, "invalid_json", "The request body must be a JSON object");
    goto fail;
  }
  json_path where;
  if (find_nul_string(body, r->body.len, &where)) {
    fail(e, 400, where.s, "invalid_value",
         "'%s' holds a NUL character (\\u0000), which this server does not accept", where.s);
    goto fail;
  }
  where.len = 0;
  where.s[0] = '\0';
  int dup = find_duplicate_key(root, &where);
  if (dup < 0) {
    fail(e, 500, NULL, NULL, "out of memory");
    goto fail;
  }
  if (dup) {
    fail(e, 400, where.s, "invalid_value", "Duplicate key '%s' in the request body", where.s);
    goto fail;
  }
  return root;
fail:
  cJSON_Delete(root);
  return NULL;
}

/* ---- generation ------------------------------------------------------------------------- */

static int submit_error(int rc, api_error *e) {
  switch (rc) {
  case WEIR_E_BUSY:
    return fail(e, 429, NULL, "rate_limit_exceeded",
                "The server is overloaded: too many requests are waiting. Retry later.");
  case WEIR_E_RANGE:
    return fail(e, 400, "max_tokens", "context_length_exceeded",
                "The prompt plus max_tokens does not fit the model's context length");
  case WEIR_E_INVAL:
    return fail(e, 400, NULL, "invalid_value", "The engine refused the request parameters");
  default: return fail(e, 500, NULL, NULL, "could not queue the request: %s", weir_strerror(rc));
  }
}

static void handle_generate(weir__http_req *r, int chat) {
  weir__http_server *s = r->srv;
  api_error e = {0};
  params p;
  prompt_list pl = {0};
  weir__api_job *job = NULL;
  cJSON *root = parse_body_object(r, &e);
  if (!root) goto fail_request;
  if (parse_params(s, root, chat, &p, &e)) goto fail_request;
  if (chat ? chat_prompt(s, p.messages, &pl, &e) : completion_prompts(s, p.prompt, &pl, &e))
    goto fail_request;
  if (pl.count * p.n > MAX_CHOICES) {
    fail(&e, 400, "n", "invalid_value", "%d prompts x n=%d exceeds %d choices per request",
         pl.count, p.n, MAX_CHOICES);
    goto fail_request;
  }
  const int32_t ctx = s->info.context_length;
  const char *pparam = chat ? "messages" : "prompt";
  int32_t limit = s->cfg->max_tokens_limit > 0 ? s->cfg->max_tokens_limit : ctx;
  if (p.max_tokens > limit) {
    fail(&e, 400, chat ? "max_completion_tokens" : "max_tokens", "invalid_value",
         "max_tokens is %d but this server allows at most %d", p.max_tokens, limit);
    goto fail_request;
  }
  int32_t max_len = 0;
  for (int i = 0; i < pl.count; i++) {
    if (pl.lens[i] == 0) {
      fail(&e, 400, pparam, "invalid_value", "The prompt is empty (0 tokens)");
      goto fail_request;
    }
    if (pl.lens[i] > max_len) max_len = pl.lens[i];
  }
  if (max_len >= ctx) {
    fail(&e, 400, pparam, "context_length_exceeded",
         "This model's maximum context length is %d tokens. However, your %s is %d tokens, "
         "which leaves no room for the completion.",
         ctx, chat ? "messages result in a prompt that" : "prompt", max_len);
    goto fail_request;
  }
  if (p.max_tokens > 0 && max_len + p.max_tokens > ctx) {
    fail(&e, 400, pparam, "context_length_exceeded",
         "This model's maximum context length is %d tokens. However, you requested %d tokens "
         "(%d in the %s, %d for the completion). Please reduce the length of the %s or the "
         "completion.",
         ctx, max_len + p.max_tokens, max_len, pparam, p.max_tokens, pparam);
    goto fail_request;
  }

  job = calloc(1, sizeof *job);
  if (!job) {
    fail(&e, 500, NULL, NULL, "out of memory");
    goto fail_request;
  }
  job->s = s;
  job->chat = chat;
  job->stream = p.stream;
  job->include_usage = p.include_usage;
  job->logprobs = p.logprobs;
  job->echo = p.echo;
  job->created = (int64_t)time(NULL);
  job->num_prompts = pl.count;
  job->n = p.n;
  job->num_choices = pl.count * p.n;
  job->arrival_ns = r->arrival_ns;
  make_id(job->id, sizeof job->id, chat ? "chatcmpl" : "cmpl");
  job->choices = calloc((size_t)job->num_choices, sizeof *job->choices);
  if (!job->choices) {
    free(job);
    job = NULL;
    fail(&e, 500, NULL, NULL, "out of memory");
    goto fail_request;
  }
  s->num_jobs++;
  job->next = s->jobs;
  if (s->jobs) s->jobs->prev = job;
  s->jobs = job;
  if (job->echo) {
    /* Text prompts echo exactly what was sent (no BOS); token prompts echo their text. */
    job->echo_text = calloc((size_t)pl.count, sizeof(char *));
    job->echo_len = calloc((size_t)pl.count, sizeof(size_t));
    const cJSON *item = cJSON_IsArray(p.prompt) ? p.prompt->child : p.prompt;
    for (int i = 0; job->echo_text && job->echo_len && i < pl.count; i++) {
      size_t len = 0;
      if (cJSON_IsString(item)) {
        job->echo_text[i] = strdup(item->valuestring);
        len = job->echo_text[i] ? strlen(job->echo_text[i]) : 0;
        item = item->next;
      } else if (weir_engine_detokenize(s->engine, pl.ids[i], pl.lens[i], &job->echo_text[i],
                                        &len) != WEIR_OK) {
        job->echo_text[i] = NULL;
      }
      job->echo_len[i] = len;
      if (!job->echo_text[i]) {
        fail(&e, 500, NULL, NULL, "could not produce the prompt text for echo");
        goto fail_job;
      }
    }
    if (!job->echo_text || !job->echo_len) {
      fail(&e, 500, NULL, NULL, "out of memory");
      goto fail_job;
    }
  }

  weir_gen_request g;
  memset(&g, 0, sizeof g);
  g.sampling.struct_size = sizeof g.sampling;
  g.sampling.temperature = (float)p.temperature;
  g.sampling.top_k = p.top_k <= 0 ? 0 : p.top_k;
  g.sampling.top_p = (float)p.top_p;
  g.sampling.min_p = (float)p.min_p;
  g.sampling.repetition_penalty = (float)p.repetition;
  g.sampling.presence_penalty = (float)p.presence;
  g.sampling.frequency_penalty = (float)p.frequency;
  g.sampling.num_logprobs = p.logprobs;
  g.sampling.logit_bias_tokens = p.num_bias ? p.bias_tokens : NULL;
  g.sampling.logit_bias_values = p.num_bias ? p.bias_values : NULL;
  g.sampling.num_logit_bias = p.num_bias;
  g.min_tokens = p.min_tokens;
  g.ignore_eos = p.ignore_eos;
  g.stop_token_ids = p.stop_ids;
  g.num_stop_token_ids = p.num_stop_ids;
  g.stop = p.stop;
  g.num_stop = p.num_stop;
  g.priority = p.priority;
  g.timeout_ms = 0;
  g.has_seed = p.has_seed;
  for (int pi = 0; pi < pl.count; pi++) {
    for (int j = 0; j < p.n; j++) {
      api_choice *ch = &job->choices[pi * p.n + j];
      ch->u.srv = s;
      ch->u.spare = malloc(sizeof(weir__queued_event) + 1);
      ch->job = job;
      ch->index = pi * p.n + j;
      ch->prompt_index = pi;
      if (!ch->u.spare) {
        fail(&e, 500, NULL, NULL, "out of memory");
        goto fail_job;
      }
      g.prompt = pl.ids[pi];
      g.num_prompt = pl.lens[pi];
      int32_t room = ctx - pl.lens[pi];
      int32_t mt = p.max_tokens > 0 ? p.max_tokens
                                    : (chat ? s->cfg->default_max_tokens : 16);
      if (mt <= 0) mt = 16;
      if (mt > limit) mt = limit;
      if (mt > room) mt = room;
      g.max_tokens = mt;
      /* n choices of one seeded request differ from each other yet stay reproducible. */
      g.seed = p.seed + (uint64_t)j;
      int rc = weir_engine_submit(s->engine, &g, engine_cb, ch, &ch->engine_id);
      if (rc != WEIR_OK) {
        submit_error(rc, &e);
        goto fail_job;
      }
      ch->submitted = 1;
    }
  }
  cJSON_Delete(root);
  prompts_free(&pl);
  job->r = r;
  r->job = job;
  if (job->stream) {
    weir__http_stream_start(r, "text/event-stream");
    for (int i = 0; i < job->num_choices; i++) {
      api_choice *ch = &job->choices[i];
      if (chat) {
        stream_choice_chunk(job, ch, NULL, 0, NULL, NULL, 1);
      } else if (job->echo) {
        size_t n = job->echo_len[ch->prompt_index];
        if (n) stream_choice_chunk(job, ch, job->echo_text[ch->prompt_index], n, NULL, NULL, 0);
      }
    }
  }
  return;

fail_job:
  /* Choices already queued are aborted; the job is freed when their final events arrive. */
  respond_api_error(r, &e);
  cJSON_Delete(root);
  prompts_free(&pl);
  {
    int pending = 0;
    for (int i = 0; i < job->num_choices; i++) {
      api_choice *ch = &job->choices[i];
      if (!ch->submitted) {
        ch->finished = 1;
        job->num_finished++;
      } else {
        pending = 1;
      }
    }
    client_gone(job);
    job->client_gone = 0;
    if (!pending) job_free(job);
  }
  return;
fail_request:
  respond_api_error(r, &e);
  cJSON_Delete(root);
  prompts_free(&pl);
}

/* ---- other endpoints -------------------------------------------------------------------- */

static void handle_tokenize(weir__http_req *r) {
  weir__http_server *s = r->srv;
  api_error e = {0};
  int32_t *ids = NULL, n = 0;
  cJSON *out = NULL;
  cJSON *root = parse_body_object(r, &e);
  if (!root) goto fail_request;
  const cJSON *text = NULL;
  int add_special = 1;
  for (const cJSON *it = root->child; it; it = it->next) {
    if (!strcmp(it->string, "prompt") || !strcmp(it->string, "text")) {
      if (!cJSON_IsString(it)) {
        fail(&e, 400, it->string, "invalid_type", "'%s' must be a string", it->string);
        goto fail_request;
      }
      text = it;
    } else if (!strcmp(it->string, "add_special_tokens")) {
      if (want_bool(&e, it, it->string, &add_special)) goto fail_request;
    } else if (!strcmp(it->string, "model")) {
      if (!cJSON_IsString(it) || !serves_model(s, it->valuestring)) {
        fail(&e, 404, "model", "model_not_found", "The model `%s` does not exist.",
             cJSON_IsString(it) ? it->valuestring : "?");
        goto fail_request;
      }
    } else {
      unsupported(&e, it->string);
      goto fail_request;
    }
  }
  if (!text) {
    fail(&e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    goto fail_request;
  }
  int rc = weir_engine_tokenize(s->engine, text->valuestring, strlen(text->valuestring),
                                add_special, &ids, &n);
  if (rc != WEIR_OK) {
    fail(&e, 500, NULL, NULL, "tokenization failed: %s", weir_strerror(rc));
    goto fail_request;
  }
  out = cJSON_CreateObject();
  cJSON *arr = out ? cJSON_AddArrayToObject(out, "tokens") : NULL;
  for (int32_t i = 0; arr && i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
  if (out) {
    cJSON_AddNumberToObject(out, "count", n);
    cJSON_AddNumberToObject(out, "max_model_len", s->info.context_length);
  }
  respond_json(r, 200, out);
  goto free_all;
fail_request:
  respond_api_error(r, &e);
free_all:
  cJSON_Delete(out);
  cJSON_Delete(root);
  free(ids);
}

static void handle_detokenize(weir__http_req *r) {
  weir__http_server *s = r->srv;
  api_error e = {0};
  prompt_list pl = {0};
  char *text = NULL;
  size_t len = 0;
  cJSON *out = NULL;
  cJSON *root = parse_body_object(r, &e);
  if (!root) goto fail_request;
  const cJSON *tokens = NULL;
  for (const cJSON *it = root->child; it; it = it->next) {
    if (!strcmp(it->string, "tokens")) {
      tokens = it;
    } else if (!strcmp(it->string, "model")) {
      if (!cJSON_IsString(it) || !serves_model(s, it->valuestring)) {
        fail(&e, 404, "model", "model_not_found", "The model `%s` does not exist.",
             cJSON_IsString(it) ? it->valuestring : "?");
        goto fail_request;
      }
    } else {
      unsupported(&e, it->string);
      goto fail_request;
    }
  }
  if (!tokens) {
    fail(&e, 400, "tokens", "missing_required_parameter", "'tokens' is required");
    goto fail_request;
  }
  if (!cJSON_IsArray(tokens)) {
    fail(&e, 400, "tokens", "invalid_type", "'tokens' must be a list of token ids");
    goto fail_request;
  }
  if (ids_from_array(s, tokens, "tokens", &pl, &e)) goto fail_request;
  int rc = weir_engine_detokenize(s->engine, pl.ids[0], pl.lens[0], &text, &len);
  if (rc != WEIR_OK) {
    fail(&e, 500, NULL, NULL, "detokenization failed: %s", weir_strerror(rc));
    goto fail_request;
  }
  out = cJSON_CreateObject();
  if (out) cJSON_AddItemToObject(out, "prompt", json_text(text, len));
  respond_json(r, 200, out);
  goto free_all;
fail_request:
  respond_api_error(r, &e);
free_all:
  cJSON_Delete(out);
  cJSON_Delete(root);
  prompts_free(&pl);
  free(text);
}

static cJSON *model_object(weir__http_server *s) {
  cJSON *m = cJSON_CreateObject();
  if (!m) return NULL;
  cJSON_AddStringToObject(m, "id", s->model_name);
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
    if (d) cJSON_AddItemToArray(d, model_object(r->srv));
  }
  respond_json(r, 200, o);
  cJSON_Delete(o);
}

static void handle_model(weir__http_req *r, const char *id) {
  if (!serves_model(r->srv, id)) {
    weir__http_respond_error(r, 404, "invalid_request_error", "model", "model_not_found",
                             "The model `%s` does not exist.", id);
    return;
  }
  cJSON *o = model_object(r->srv);
  respond_json(r, 200, o);
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
  scrape_engine(r->srv);
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

enum { R_HEALTH, R_METRICS, R_VERSION, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_TOKENIZE,
       R_DETOKENIZE };

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
    {"/tokenize", HTTP_POST, R_TOKENIZE, 0},
    {"/detokenize", HTTP_POST, R_DETOKENIZE, 0},
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
  if (!path_known) {
    weir__http_respond_error(r, 404, "invalid_request_error", NULL, "not_found",
                             "Invalid URL (%s %s)", llhttp_method_name(r->method), path);
    return;
  }
  if (route->method != method) {
    char allow[64];
    snprintf(allow, sizeof allow, "Allow: %s\r\n", route->method == HTTP_GET ? "GET, HEAD" : "POST");
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
  case R_COMPLETIONS: handle_generate(r, 0); break;
  case R_CHAT: handle_generate(r, 1); break;
  case R_TOKENIZE: handle_tokenize(r); break;
  case R_DETOKENIZE: handle_detokenize(r); break;
  default: weir__http_respond_error(r, 500, "server_error", NULL, NULL, "no handler"); break;
  }
}

const weir__http_handlers weir__api_handlers = {
    .dispatch = dispatch, .client_gone = client_gone, .set_paused = set_paused};
