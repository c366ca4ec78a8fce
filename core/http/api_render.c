/* Engine output as OpenAI's objects: full responses, SSE chunks, logprobs in the completions
 * and chat shapes, usage, and error bodies. Loop thread only. docs/http-api.md describes the
 * shapes; keep the two in step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
#include "weir/status.h"

void weir__api_respond_error(weir__http_req *r, const api_error *e) {
  weir__http_respond_error(r, e->status, e->type, e->param[0] ? e->param : NULL, e->code, "%s",
                           e->message);
}

void weir__api_respond_json(weir__http_req *r, int status, cJSON *root) {
  char *body = root ? cJSON_PrintUnformatted(root) : NULL;
  if (!body) {
    weir__http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return;
  }
  weir__http_respond(r, status, "application/json", body, strlen(body), NULL);
  free(body);
}

/* A JSON string for a token piece: the text when it is valid UTF-8, otherwise OpenAI's
 * "bytes:\xNN" spelling (a byte-fallback token holding part of a character). */
static char *token_display(weir__http_server *s, int32_t id, size_t *raw_len, char **raw) {
  char *t = NULL;
  size_t n = 0;
  if (weir_service_token_text(s->svc, id, &t, &n) != WEIR_OK || !t) {
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
cJSON *weir__api_json_text(const char *s, size_t n) {
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
void weir__api_completion_lp_append(weir__http_server *s, int k, const weir_sample_result *res,
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

/* echo with logprobs: the prompt's entries, the first token's with null logprob and top (no
 * context to score it in), then one per scored token (plp[0..n), prompt tokens 1..n). Token i
 * begins at text_offsets[i] of the echoed text (text_len bytes; clamped to it). */
void weir__api_completion_prompt_lp(weir__http_server *s, int k, int32_t first,
                                    const weir_sample_result *plp, int32_t n,
                                    const size_t *text_offsets, size_t text_len, cJSON *tokens,
                                    cJSON *values, cJSON *top, cJSON *offsets) {
  char *disp = token_display(s, first, NULL, NULL);
  cJSON_AddItemToArray(tokens, cJSON_CreateString(disp ? disp : ""));
  cJSON_AddItemToArray(values, cJSON_CreateNull());
  cJSON_AddItemToArray(top, cJSON_CreateNull());
  cJSON_AddItemToArray(offsets, cJSON_CreateNumber(0));
  free(disp);
  for (int32_t i = 0; plp && i < n; i++) {
    size_t at = text_offsets[i + 1] < text_len ? text_offsets[i + 1] : text_len;
    weir__api_completion_lp_append(s, k, &plp[i], tokens, values, top, offsets, &at);
  }
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

cJSON *weir__api_chat_lp_content(weir__http_server *s, int k, const weir_sample_result *res,
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

const char *weir__api_finish_name(weir_finish_reason f) {
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
void weir__api_stream_choice_chunk(weir__api_job *job, api_choice *ch, const char *text,
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
    if (role || text_len)
      cJSON_AddItemToObject(delta, "content", weir__api_json_text(text, text_len));
  } else {
    cJSON_AddItemToObject(c, "text", weir__api_json_text(text, text_len));
  }
  if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
  else cJSON_AddNullToObject(c, "logprobs");
  if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
  else cJSON_AddNullToObject(c, "finish_reason");
  if (job->include_usage) cJSON_AddNullToObject(o, "usage");
  sse_send(job->r, o);
}

/* ---- tool calls ------------------------------------------------------------------------- */

int weir__api_read_calls(const weir__api_job *job, const api_choice *ch, weir_tool_output *o) {
  int rc = weir_tool_parse(ch->text.p ? ch->text.p : "", ch->text.len, job->tool_mode,
                            job->tool_named, o);
  if (rc == 0 && !job->parallel_tool_calls && o->num_calls > 1) {
    for (int i = 1; i < o->num_calls; i++) {
      free(o->calls[i].name);
      free(o->calls[i].arguments);
    }
    o->num_calls = 1;
  }
  return rc;
}

/* OpenAI's tool_calls array; with_index for stream deltas. */
static cJSON *tool_calls_json(const weir_tool_output *o, int with_index) {
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; arr && i < o->num_calls; i++) {
    cJSON *c = cJSON_CreateObject();
    if (!c) break;
    cJSON_AddItemToArray(arr, c);
    char id[48];
    weir__api_make_id(id, sizeof id, "call");
    id[4] = '_';
    id[5 + 24] = '\0'; /* call_ and 24 hex digits, the length OpenAI's ids have */
    if (with_index) cJSON_AddNumberToObject(c, "index", i);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(c, "function");
    if (fn) {
      cJSON_AddItemToObject(fn, "name", weir__api_json_text(o->calls[i].name,
                                                           strlen(o->calls[i].name)));
      cJSON_AddItemToObject(fn, "arguments", weir__api_json_text(o->calls[i].arguments,
                                                                strlen(o->calls[i].arguments)));
    }
  }
  return arr;
}

/* finish_reason of a reply that returns calls: "tool_calls" also when the budget (or a stop
 * string) ended it, since every call returned is whole (a call the reply was cut inside is
 * dropped, tool_calls.h); openai-node's runTools and parse() throw on "length", the AI SDK
 * and the Agents SDK run the calls either way. An abort or a timeout is still reported. */
static const char *tool_finish(weir_finish_reason f) {
  return f == WEIR_FINISH_LENGTH || f == WEIR_FINISH_STOP ? "tool_calls"
                                                          : weir__api_finish_name(f);
}

/* A forced call (tool_choice "required" or a named function): the reply is calls only. */
static int forced(const weir__api_job *job) {
  return job->tool_mode == WEIR_TOOLS_REQUIRED || job->tool_mode == WEIR_TOOLS_NAMED;
}

void weir__api_stream_tool_finish(weir__api_job *job, api_choice *ch, weir_finish_reason f) {
  const char *finish = weir__api_finish_name(f);
  weir_tool_output o;
  if (weir__api_read_calls(job, ch, &o) != 0) {
    weir__api_stream_choice_chunk(job, ch, NULL, 0, NULL, finish, 0);
    return;
  }
  if (o.num_calls == 0) {
    /* A forced reply cut before its first call was whole: no call, and its text is not
     * content either (finish_reason says why it ended). */
    size_t held = forced(job) ? 0 : ch->text.len - ch->content_sent;
    weir__api_stream_choice_chunk(job, ch, held ? ch->text.p + ch->content_sent : NULL, held,
                                  NULL, finish, 0);
    ch->content_sent = ch->text.len;
    weir_tool_output_free(&o);
    return;
  }
  cJSON *root = chunk_base(job);
  cJSON *choices = root ? cJSON_AddArrayToObject(root, "choices") : NULL;
  cJSON *c = choices ? cJSON_CreateObject() : NULL;
  if (c) {
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", ch->index);
    cJSON *delta = cJSON_AddObjectToObject(c, "delta");
    if (delta) cJSON_AddItemToObject(delta, "tool_calls", tool_calls_json(&o, 1));
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    if (job->include_usage) cJSON_AddNullToObject(root, "usage");
  }
  sse_send(job->r, root);
  ch->content_sent = ch->text.len;
  weir__api_stream_choice_chunk(job, ch, NULL, 0, NULL, tool_finish(f), 0);
  weir_tool_output_free(&o);
}

void weir__api_stream_finish(weir__api_job *job) {
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

void weir__api_respond_full(weir__api_job *job) {
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
    const char *finish = weir__api_finish_name(ch->finish);
    if (job->chat) {
      cJSON *msg = cJSON_AddObjectToObject(c, "message");
      cJSON_AddStringToObject(msg, "role", "assistant");
      weir_tool_output calls = {0};
      if (job->tool_mode != WEIR_TOOLS_OFF && weir__api_read_calls(job, ch, &calls) == 0 &&
          calls.num_calls > 0) {
        if (calls.content[0])
          cJSON_AddItemToObject(msg, "content",
                                weir__api_json_text(calls.content, strlen(calls.content)));
        else
          cJSON_AddNullToObject(msg, "content");
        cJSON_AddItemToObject(msg, "tool_calls", tool_calls_json(&calls, 0));
        finish = tool_finish(ch->finish);
      } else if (forced(job)) {
        /* Cut before the first call was whole: nothing to run, and the forced list is not
         * content. */
        cJSON_AddNullToObject(msg, "content");
      } else {
        cJSON_AddItemToObject(msg, "content", weir__api_json_text(text.p, text.len));
      }
      weir_tool_output_free(&calls);
    } else {
      cJSON_AddItemToObject(c, "text", weir__api_json_text(text.p, text.len));
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
    cJSON_AddStringToObject(c, "finish_reason", finish);
  }
  cJSON_AddItemToObject(o, "usage", usage_json(job));
  weir__api_respond_json(r, 200, o);
  cJSON_Delete(o);
}

