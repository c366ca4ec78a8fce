/* llama-server's native API, for the local UIs and scripts written against it:
 * POST /completion (a request translated into the /v1/completions request it means, run by
 * that path, answered in llama-server's shapes: one JSON object, or SSE events
 * `data: {"content": ..., "stop": false}` ending with one carrying `"stop": true` and the
 * totals) and GET /props (the server's defaults and the model). docs/http-api.md, "Migrating
 * from vLLM / llama-server", lists what is honoured and what is refused. Loop thread only,
 * except weir__api_llama_to_completions (thread-safe: the prep pool runs it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
#include "weir/status.h"

/* llama-server's sampling defaults, used for what a /completion request leaves out (the same
 * request then samples as it did there) and shown by /props. */
static const struct {
  const char *name;
  double value;
} k_defaults[] = {{"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.95}, {"min_p", 0.05}};

/* Sampler settings weir has no counterpart for: accepted at the value that turns them off
 * (UIs send every setting, most at that value), refused at any other. */
static const struct {
  const char *name;
  double neutral;
  const char *why;
} k_neutral[] = {
    {"typical_p", 1, "locally typical sampling"},
    {"tfs_z", 1, "tail-free sampling"},
    {"mirostat", 0, "mirostat sampling"},
    {"mirostat_tau", -1, NULL}, /* only read with mirostat on: any number accepted */
    {"mirostat_eta", -1, NULL},
    {"dynatemp_range", 0, "dynamic temperature"},
    {"dynatemp_exponent", -1, NULL},
    {"xtc_probability", 0, "XTC sampling"},
    {"xtc_threshold", -1, NULL},
    {"dry_multiplier", 0, "DRY repetition penalty"},
    {"dry_base", -1, NULL},
    {"dry_allowed_length", -1, NULL},
    {"dry_penalty_last_n", -1, NULL},
    {"top_n_sigma", -1, NULL}, /* <= 0 is off: checked below */
    {"n_probs", 0, "token probabilities (use /v1/completions with 'logprobs')"},
    {"min_keep", 0, "min_keep"},
    {"n_keep", 0, "context shifting (n_keep)"},
    {"n_discard", 0, "context shifting (n_discard)"},
    {"id_slot", -1, "choosing a slot (weir schedules every request itself)"},
};

/* Flags llama-server accepts that change nothing weir sends: accepted as false, refused as
 * true. */
static const struct {
  const char *name, *why;
} k_false_flags[] = {
    {"timings_per_token", "timings in every streamed event"},
    {"return_tokens", "token ids in the response"},
    {"post_sampling_probs", "probabilities after sampling"},
};

static int copy_into(cJSON *out, const char *name, const cJSON *v, api_error *e) {
  cJSON *d = cJSON_Duplicate(v, 1);
  if (!d || !cJSON_AddItemToObject(out, name, d)) {
    cJSON_Delete(d);
    return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  }
  return 0;
}

static int want_number(const cJSON *v, const char *name, api_error *e) {
  if (cJSON_IsNumber(v)) return 0;
  return weir__api_fail(e, 400, name, "invalid_type", "'%s' must be a number", name);
}

/* llama-server's logit_bias: [[token id, bias], ...] or {"token id": bias}, a bias of false
 * banning the token; into the OpenAI object /v1/completions checks (ids in the vocabulary,
 * biases in [-100, 100], at most WEIR_MAX_LOGIT_BIAS entries). Token texts (llama-server
 * tokenizes them) are refused: send ids (/tokenize gives them). */
static int llama_logit_bias(const cJSON *v, cJSON *out, api_error *e) {
  static const char shape[] = "'logit_bias' must be [[token id, bias], ...] or {\"token id\": "
                              "bias}, a bias being a number or false (ban); token texts are not "
                              "supported, send ids (POST /tokenize gives them)";
  cJSON *o = cJSON_CreateObject();
  if (!o) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  int n = 0;
  for (const cJSON *x = cJSON_IsArray(v) || cJSON_IsObject(v) ? v->child : NULL; x; x = x->next) {
    const cJSON *id = x, *bias = x;
    char key[32];
    if (cJSON_IsArray(v)) {
      id = cJSON_GetArrayItem(x, 0);
      bias = cJSON_GetArrayItem(x, 1);
      if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 2 || !cJSON_IsNumber(id) ||
          id->valuedouble < 0 || id->valuedouble > 2e9 || id->valuedouble != floor(id->valuedouble))
        goto bad;
      snprintf(key, sizeof key, "%.0f", id->valuedouble);
    } else {
      snprintf(key, sizeof key, "%.31s", x->string);
    }
    if (!cJSON_IsNumber(bias) && !cJSON_IsFalse(bias)) goto bad;
    if (++n > WEIR_MAX_LOGIT_BIAS) {
      cJSON_Delete(o);
      return weir__api_fail(e, 400, "logit_bias", "invalid_value",
                            "'logit_bias' allows at most %d entries", WEIR_MAX_LOGIT_BIAS);
    }
    /* A repeated id: the last one counts, as in llama-server. */
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    if (!cJSON_AddNumberToObject(o, key, cJSON_IsFalse(bias) ? -100.0 : bias->valuedouble)) {
      cJSON_Delete(o);
      return weir__api_fail(e, 500, NULL, NULL, "out of memory");
    }
  }
  if (!cJSON_IsArray(v) && !cJSON_IsObject(v)) goto bad;
  if (!cJSON_AddItemToObject(out, "logit_bias", o)) {
    cJSON_Delete(o);
    return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  }
  return 0;
bad:
  cJSON_Delete(o);
  return weir__api_fail(e, 400, "logit_bias", "invalid_value", "%s", shape);
}

cJSON *weir__api_llama_to_completions(const cJSON *body, cJSON **settings, int64_t *n_predict,
                                      api_error *e) {
  cJSON *out = cJSON_CreateObject();
  cJSON *set = cJSON_CreateObject();
  *settings = NULL;
  *n_predict = -1; /* llama-server's default: until the context is full */
  int penalties = 0, window = 0;
  if (!out || !set) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    goto fail;
  }
  for (const cJSON *it = body->child; it; it = it->next) {
    const char *k = it->string;
    if (cJSON_IsNull(it)) continue;
    if (!strcmp(k, "prompt")) {
      /* One prompt: a string, or token ids. llama-server's lists of several prompts (and of
       * strings mixed with ids) answer with a list of results; here each is its own
       * request. */
      int ok = cJSON_IsString(it);
      if (cJSON_IsArray(it)) {
        ok = it->child != NULL;
        for (const cJSON *x = it->child; x; x = x->next) ok &= cJSON_IsNumber(x);
      }
      if (!ok) {
        weir__api_fail(e, 400, "prompt", "invalid_value",
                       "'prompt' must be a string or a non-empty list of token ids (one prompt "
                       "per /completion request; send several prompts as several requests, or "
                       "to /v1/completions)");
        goto fail;
      }
      if (copy_into(out, "prompt", it, e)) goto fail;
    } else if (!strcmp(k, "n_predict")) {
      double d = it->valuedouble;
      if (!cJSON_IsNumber(it) || !isfinite(d) || d != floor(d)) {
        weir__api_fail(e, 400, k, "invalid_type", "'n_predict' must be an integer");
        goto fail;
      }
      if (d == 0 || d < -2) {
        weir__api_fail(e, 400, k, "invalid_value",
                       "'n_predict' must be -1 (until the context is full) or a positive "
                       "number of tokens, got %g%s", d,
                       d == 0 ? " (evaluating a prompt without generating is not supported)"
                              : "");
        goto fail;
      }
      *n_predict = d < 0 ? -1 : d > 1e15 ? (int64_t)1e15 : (int64_t)d;
    } else if (!strcmp(k, "grammar")) {
      if (!cJSON_IsString(it)) {
        weir__api_fail(e, 400, k, "invalid_type", "'grammar' must be a GBNF grammar (a string)");
        goto fail;
      }
      /* "" is llama-server's "no grammar". */
      if (it->valuestring[0] && copy_into(out, "guided_grammar", it, e)) goto fail;
    } else if (!strcmp(k, "json_schema")) {
      if (!cJSON_IsObject(it) && !cJSON_IsBool(it)) {
        weir__api_fail(e, 400, k, "invalid_type", "'json_schema' must be a JSON Schema object");
        goto fail;
      }
      /* {} is llama-server's "no schema"; any other schema constrains the output. */
      if ((!cJSON_IsObject(it) || it->child) && copy_into(out, "guided_json", it, e)) goto fail;
    } else if (!strcmp(k, "cache_prompt")) {
      /* weir reuses every cached prefix of every request: true is what it does, and false
       * changes only the speed (the output is the same either way). */
      int b;
      if (weir__api_want_bool(e, it, k, &b)) goto fail;
    } else if (!strcmp(k, "repeat_penalty")) {
      if (want_number(it, k, e)) goto fail;
      if (it->valuedouble <= 0 || it->valuedouble > 10) {
        weir__api_fail(e, 400, k, "invalid_value", "'repeat_penalty' must be > 0 and <= 10");
        goto fail;
      }
      penalties |= it->valuedouble != 1;
      if (copy_into(out, "repetition_penalty", it, e)) goto fail;
    } else if (!strcmp(k, "repeat_last_n")) {
      if (want_number(it, k, e)) goto fail;
      window = it->valuedouble != -1;
    } else if (!strcmp(k, "seed")) {
      if (want_number(it, k, e)) goto fail;
      /* -1: a random seed, as when none is given. */
      if (it->valuedouble != -1 && copy_into(out, "seed", it, e)) goto fail;
    } else if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
      if (want_number(it, k, e)) goto fail;
      penalties |= it->valuedouble != 0;
      if (copy_into(out, k, it, e)) goto fail;
    } else if (!strcmp(k, "logit_bias")) {
      if (llama_logit_bias(it, out, e)) goto fail;
    } else if (!strcmp(k, "stream") || !strcmp(k, "temperature") || !strcmp(k, "top_k") ||
               !strcmp(k, "top_p") || !strcmp(k, "min_p") || !strcmp(k, "stop") ||
               !strcmp(k, "ignore_eos") || !strcmp(k, "model")) {
      /* The same meaning on /v1/completions, which checks them. */
      if (copy_into(out, k, it, e)) goto fail;
    } else {
      int handled = 0;
      for (size_t i = 0; !handled && i < sizeof k_neutral / sizeof k_neutral[0]; i++) {
        if (strcmp(k, k_neutral[i].name)) continue;
        handled = 1;
        if (want_number(it, k, e)) goto fail;
        int off = k_neutral[i].why == NULL ||
                  (!strcmp(k, "id_slot") ? it->valuedouble < 0 : it->valuedouble == k_neutral[i].neutral);
        if (!strcmp(k, "top_n_sigma")) off = it->valuedouble <= 0;
        if (!off) {
          weir__api_fail(e, 400, k, "unsupported_parameter",
                         "Unsupported parameter: '%s' = %g asks for %s, which this server "
                         "does not implement (send %g, or leave it out)",
                         k, it->valuedouble,
                         k_neutral[i].why ? k_neutral[i].why : "a sampler",
                         k_neutral[i].neutral);
          goto fail;
        }
      }
      for (size_t i = 0; !handled && i < sizeof k_false_flags / sizeof k_false_flags[0]; i++) {
        if (strcmp(k, k_false_flags[i].name)) continue;
        handled = 1;
        int b;
        if (weir__api_want_bool(e, it, k, &b)) goto fail;
        if (b) {
          weir__api_fail(e, 400, k, "unsupported_parameter",
                         "Unsupported parameter: '%s' (%s) is not supported by this server",
                         k, k_false_flags[i].why);
          goto fail;
        }
      }
      if (!handled) {
        weir__api_unsupported(e, k);
        goto fail;
      }
    }
  }
  if (!cJSON_GetObjectItemCaseSensitive(out, "prompt")) {
    weir__api_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    goto fail;
  }
  if (cJSON_GetObjectItemCaseSensitive(out, "guided_grammar") &&
      cJSON_GetObjectItemCaseSensitive(out, "guided_json")) {
    weir__api_fail(e, 400, "json_schema", "invalid_value",
                   "'grammar' and 'json_schema' both constrain the output; give one");
    goto fail;
  }
  /* weir's penalties count every token seen; a window is only harmless while no penalty is
   * on. */
  if (penalties && window) {
    weir__api_fail(e, 400, "repeat_last_n", "unsupported_parameter",
                   "Unsupported parameter: 'repeat_last_n': this server's penalties count every "
                   "token of the request; send -1 (the whole context)");
    goto fail;
  }
  for (size_t i = 0; i < sizeof k_defaults / sizeof k_defaults[0]; i++)
    if (!cJSON_GetObjectItemCaseSensitive(out, k_defaults[i].name) &&
        !cJSON_AddNumberToObject(out, k_defaults[i].name, k_defaults[i].value)) {
      weir__api_fail(e, 500, NULL, NULL, "out of memory");
      goto fail;
    }
  /* The settings a /completion response reports (generation_settings). */
  static const char *const shown[] = {"temperature", "top_k", "top_p", "min_p",
                                      "presence_penalty", "frequency_penalty",
                                      "repetition_penalty", "seed", "stop", "ignore_eos",
                                      "stream"};
  cJSON_AddNumberToObject(set, "n_predict", (double)*n_predict);
  for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(out, shown[i]);
    const char *name = !strcmp(shown[i], "repetition_penalty") ? "repeat_penalty" : shown[i];
    if (v && copy_into(set, name, v, e)) goto fail;
  }
  *settings = set;
  return out;
fail:
  cJSON_Delete(out);
  cJSON_Delete(set);
  return NULL;
}

/* ---- responses -------------------------------------------------------------------------- */

/* llama-server's stop_type: "eos" (an end-of-generation or stop token), "word" (a stop
 * string), "limit" (n_predict or the context), "none" (ended otherwise). */
static const char *stop_type(const api_choice *ch) {
  switch (ch->finish) {
  case WEIR_FINISH_STOP: return ch->stop_word ? "word" : "eos";
  case WEIR_FINISH_LENGTH: return "limit";
  default: return "none";
  }
}

/* The totals every final object carries. */
static void add_totals(weir__api_job *job, cJSON *o, const api_choice *ch) {
  cJSON_AddNumberToObject(o, "index", 0);
  cJSON_AddNumberToObject(o, "id_slot", -1);
  cJSON_AddStringToObject(o, "model", job->s->model_name);
  cJSON_AddNumberToObject(o, "tokens_predicted", ch->completion_tokens);
  cJSON_AddNumberToObject(o, "tokens_evaluated", ch->prompt_tokens);
  cJSON_AddNumberToObject(o, "tokens_cached", ch->cached_tokens);
  cJSON_AddBoolToObject(o, "truncated", 0);
  cJSON_AddStringToObject(o, "stop_type", stop_type(ch));
  cJSON_AddStringToObject(o, "stopping_word", ch->stop_word ? ch->stop_word : "");
  /* weir's own reason too, for what llama-server has no word for (abort, timeout). */
  const char *f = weir__api_finish_name(ch->finish);
  cJSON_AddStringToObject(o, "finish_reason", f ? f : "stop");
  if (job->llama_settings)
    cJSON_AddItemToObject(o, "generation_settings", cJSON_Duplicate(job->llama_settings, 1));
  cJSON *t = cJSON_AddObjectToObject(o, "timings");
  if (t) {
    const double prompt_ms =
        ch->first_ns > job->arrival_ns ? (double)(ch->first_ns - job->arrival_ns) / 1e6 : 0;
    const double gen_ms =
        ch->last_ns > ch->first_ns ? (double)(ch->last_ns - ch->first_ns) / 1e6 : 0;
    const int n = ch->completion_tokens;
    const int prompt_n = ch->prompt_tokens - ch->cached_tokens;
    cJSON_AddNumberToObject(t, "prompt_n", prompt_n);
    cJSON_AddNumberToObject(t, "prompt_ms", prompt_ms);
    cJSON_AddNumberToObject(t, "prompt_per_second",
                            prompt_ms > 0 ? prompt_n / (prompt_ms / 1e3) : 0);
    cJSON_AddNumberToObject(t, "predicted_n", n);
    cJSON_AddNumberToObject(t, "predicted_ms", gen_ms);
    cJSON_AddNumberToObject(t, "predicted_per_second",
                            gen_ms > 0 && n > 1 ? (n - 1) / (gen_ms / 1e3) : 0);
  }
}

static void sse_object(weir__http_req *r, cJSON *o) {
  char *js = o && r ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!js) return;
  weir_buf b = {0};
  weir_buf_printf(&b, "data: %s\n\n", js);
  free(js);
  if (!b.oom) weir__http_stream_write(r, b.p, b.len);
  weir_buf_free(&b);
}

void weir__api_llama_stream_event(weir__api_job *job, api_choice *ch, const weir_gen_event *ev) {
  /* The final event's text goes out with the final object (weir__api_llama_finish). */
  if (ev->finish != WEIR_FINISH_NONE) {
    weir_buf_append(&ch->text, ev->text, ev->text_len);
    return;
  }
  if (!ev->text_len && !ev->num_tokens) return;
  cJSON *o = cJSON_CreateObject();
  if (!o) return;
  cJSON_AddNumberToObject(o, "index", 0);
  cJSON_AddItemToObject(o, "content", weir__api_json_text(ev->text, ev->text_len));
  cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
  for (int i = 0; toks && i < ev->num_tokens; i++)
    cJSON_AddItemToArray(toks, cJSON_CreateNumber(ev->tokens[i]));
  cJSON_AddBoolToObject(o, "stop", 0);
  cJSON_AddNumberToObject(o, "id_slot", -1);
  cJSON_AddNumberToObject(o, "tokens_predicted", ev->completion_tokens);
  cJSON_AddNumberToObject(o, "tokens_evaluated", ev->prompt_tokens);
  sse_object(job->r, o);
}

void weir__api_llama_finish(weir__api_job *job) {
  weir__http_req *r = job->r;
  api_choice *ch = &job->choices[0];
  if (ch->finish == WEIR_FINISH_ERROR || (!job->stream && ch->finish == WEIR_FINISH_ABORT)) {
    const char *msg = ch->finish == WEIR_FINISH_ABORT
                          ? "the request was aborted because the server is shutting down"
                          : ch->error ? ch->error : weir_strerror(ch->status);
    if (!job->stream) {
      weir__http_respond_error(r, ch->finish == WEIR_FINISH_ABORT ? 503 : 500, "server_error",
                               NULL, NULL, "generation failed: %s", msg);
      return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *err = o ? cJSON_AddObjectToObject(o, "error") : NULL;
    if (err) {
      cJSON_AddNumberToObject(err, "code", 500);
      cJSON_AddStringToObject(err, "message", msg);
      cJSON_AddStringToObject(err, "type", "server_error");
    }
    sse_object(r, o);
    weir__http_stream_end(r);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  if (!o) {
    if (job->stream) weir__http_stream_end(r);
    else weir__http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return;
  }
  /* Streaming: the text not yet sent (the final event's); whole: all of it. */
  cJSON_AddItemToObject(o, "content", weir__api_json_text(ch->text.p ? ch->text.p : "",
                                                          ch->text.len));
  cJSON_AddItemToObject(o, "tokens", cJSON_CreateArray());
  cJSON_AddBoolToObject(o, "stop", 1);
  add_totals(job, o, ch);
  if (job->stream) {
    sse_object(r, o);
    weir__http_stream_end(r);
  } else {
    cJSON_AddBoolToObject(o, "has_new_line",
                          ch->text.p && memchr(ch->text.p, '\n', ch->text.len) != NULL);
    weir__api_respond_json(r, 200, o);
    cJSON_Delete(o);
  }
}

/* ---- GET /props ------------------------------------------------------------------------- */

void weir__api_llama_props(weir__http_req *r) {
  weir__http_server *s = r->srv;
  cJSON *o = cJSON_CreateObject();
  cJSON *dgs = o ? cJSON_AddObjectToObject(o, "default_generation_settings") : NULL;
  cJSON *gparams = dgs ? cJSON_AddObjectToObject(dgs, "params") : NULL;
  if (!gparams) {
    cJSON_Delete(o);
    weir__http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return;
  }
  cJSON_AddNumberToObject(dgs, "id", 0);
  cJSON_AddNumberToObject(dgs, "id_task", -1);
  cJSON_AddNumberToObject(dgs, "n_ctx", s->info.context_length);
  cJSON_AddBoolToObject(dgs, "speculative", s->cfg->drafter.name && s->cfg->drafter.name[0]);
  cJSON_AddBoolToObject(dgs, "is_processing", s->num_jobs > 0);
  cJSON_AddNumberToObject(gparams, "n_predict", -1);
  cJSON_AddNumberToObject(gparams, "seed", -1);
  for (size_t i = 0; i < sizeof k_defaults / sizeof k_defaults[0]; i++)
    cJSON_AddNumberToObject(gparams, k_defaults[i].name, k_defaults[i].value);
  cJSON_AddNumberToObject(gparams, "repeat_penalty", 1.0);
  cJSON_AddNumberToObject(gparams, "repeat_last_n", -1);
  cJSON_AddNumberToObject(gparams, "presence_penalty", 0.0);
  cJSON_AddNumberToObject(gparams, "frequency_penalty", 0.0);
  for (size_t i = 0; i < sizeof k_neutral / sizeof k_neutral[0]; i++)
    if (k_neutral[i].why) cJSON_AddNumberToObject(gparams, k_neutral[i].name, k_neutral[i].neutral);
  cJSON_AddItemToObject(gparams, "stop", cJSON_CreateArray());
  cJSON_AddBoolToObject(gparams, "ignore_eos", 0);
  cJSON_AddBoolToObject(gparams, "stream", 0);
  cJSON_AddBoolToObject(gparams, "cache_prompt", 1);
  cJSON_AddStringToObject(gparams, "grammar", "");
  cJSON_AddNumberToObject(o, "total_slots", s->cfg->max_num_seqs);
  cJSON_AddStringToObject(o, "model_path", s->cfg->model_path ? s->cfg->model_path : "");
  cJSON_AddStringToObject(o, "model_alias", s->model_name);
  cJSON_AddStringToObject(o, "chat_template", weir_chat_renderer_source(s->svc->chat));
  cJSON_AddStringToObject(o, "chat_template_name",
                          s->info.chat_template_name ? s->info.chat_template_name : "");
  const struct {
    const char *key;
    int32_t id;
  } toks[] = {{"bos_token", s->info.bos_id}, {"eos_token", s->info.eos_id}};
  for (size_t i = 0; i < 2; i++) {
    char *t = NULL;
    size_t n = 0;
    if (toks[i].id < 0 || weir_service_token_text(s->svc, toks[i].id, &t, &n) != WEIR_OK) n = 0;
    cJSON_AddItemToObject(o, toks[i].key, weir__api_json_text(t ? t : "", n));
    free(t);
  }
  cJSON_AddStringToObject(o, "build_info", "weir " WEIR_VERSION);
  cJSON *mods = cJSON_AddObjectToObject(o, "modalities");
  if (mods) {
    cJSON_AddBoolToObject(mods, "vision", 0);
    cJSON_AddBoolToObject(mods, "audio", 0);
  }
  weir__api_respond_json(r, 200, o);
  cJSON_Delete(o);
}
