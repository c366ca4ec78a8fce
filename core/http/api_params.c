/* Request bodies into engine requests: JSON checks (syntax, duplicate keys, NUL characters),
 * every parameter's type and range, prompts into token ids, and the limits and defaults of a
 * generation request (max_tokens has its one owner here). Loop thread only, except
 * weir__api_gen_compile (libuv's worker threads).
 * docs/http-api.md lists the parameters; keep the two in step. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
#include "util/utf8.h"
#include "weir/status.h"

/* Makes s (NUL-terminated, in a buffer of `size` bytes) valid UTF-8: what a message echoes
 * from a request (a key, a value) may hold any bytes, and every byte a response carries must
 * be valid UTF-8. Invalid bytes become U+FFFD, cut to the buffer on a character boundary. */
static void clean_utf8(char *s, size_t size) {
  const size_t n = strlen(s);
  if (weir_utf8_valid(s, n)) return;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  if (weir_utf8_sanitize((const unsigned char *)s, n, 1, &buf, &len, &cap, NULL) == 0) {
    snprintf(s, size, "%.*s", (int)len, buf);
  } else {
    for (size_t i = 0; i < n; i++) /* out of memory: ASCII is valid anywhere */
      if ((unsigned char)s[i] >= 0x80) s[i] = '?';
  }
  free(buf);
}

int weir__api_fail(api_error *e, int status, const char *param, const char *code,
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
  /* Echoed request bytes are made valid; a cut name must not end in half a character. */
  clean_utf8(e->param, sizeof e->param);
  clean_utf8(e->message, sizeof e->message);
  weir_utf8_trim(e->param);
  weir_utf8_trim(e->message);
  return -1;
}

/* ---- small JSON helpers ----------------------------------------------------------------- */

static int json_is_int(const cJSON *v, double lo, double hi) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  return d == floor(d) && d >= lo && d <= hi;
}

/* ---- parameters ------------------------------------------------------------------------- */


/* Parameters OpenAI defines that weir does not implement: named in their own message. */
static const char *const k_unsupported[] = {
    "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
    "suffix", "best_of", "audio", "modalities", "prediction",
    "store", "metadata", "service_tier", "reasoning_effort", "web_search_options", NULL};

/* weir's own `cache` object (docs/response-cache.md): {"mode": "off" | "exact" |
 * "semantic", "ttl": seconds}. */
static int parse_cache(api_error *e, const cJSON *it, params *p) {
  if (!cJSON_IsObject(it))
    return weir__api_fail(e, 400, "cache", "invalid_type", "'cache' must be an object");
  for (const cJSON *x = it->child; x; x = x->next) {
    if (!strcmp(x->string, "mode")) {
      static const char *const modes[] = {"off", "exact", "semantic"};
      p->cache_mode = -1;
      for (int i = 0; i < 3 && cJSON_IsString(x); i++)
        if (!strcmp(x->valuestring, modes[i])) p->cache_mode = i;
      if (p->cache_mode < 0)
        return weir__api_fail(e, 400, "cache.mode", "invalid_value",
                              "'cache.mode' must be one of off, exact, semantic");
    } else if (!strcmp(x->string, "ttl")) {
      if (!json_is_int(x, 1, 366.0 * 86400))
        return weir__api_fail(e, 400, "cache.ttl", "invalid_value",
                              "'cache.ttl' must be an integer number of seconds in [1, 31622400]");
      p->cache_ttl_s = (int64_t)x->valuedouble;
    } else {
      char name[96];
      snprintf(name, sizeof name, "cache.%s", x->string);
      return weir__api_fail(e, 400, name, "unknown_parameter",
                            "Unrecognized request argument supplied: %s", name);
    }
  }
  return 0;
}

int weir__api_unsupported(api_error *e, const char *name) {
  for (int i = 0; k_unsupported[i]; i++)
    if (!strcmp(k_unsupported[i], name))
      return weir__api_fail(e, 400, name, "unsupported_parameter",
                            "Unsupported parameter: '%s' is not supported by this server.", name);
  return weir__api_fail(e, 400, name, "unknown_parameter",
                        "Unrecognized request argument supplied: %s", name);
}

static int want_number(api_error *e, const cJSON *v, const char *name, double lo, double hi,
                       int lo_open, double *out) {
  if (!cJSON_IsNumber(v))
    return weir__api_fail(e, 400, name, "invalid_type", "'%s' must be a number", name);
  double d = v->valuedouble;
  if (!isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo))
    return weir__api_fail(e, 400, name, "invalid_value", "'%s' must be %s %g and <= %g, got %g",
                          name, lo_open ? ">" : ">=", lo, hi, d);
  *out = d;
  return 0;
}

static int want_int(api_error *e, const cJSON *v, const char *name, double lo, double hi,
                    int *out) {
  if (!json_is_int(v, -9.0e15, 9.0e15))
    return weir__api_fail(e, 400, name, "invalid_type", "'%s' must be an integer", name);
  if (v->valuedouble < lo || v->valuedouble > hi)
    return weir__api_fail(e, 400, name, "invalid_value",
                          "'%s' must be between %.0f and %.0f, got %.0f", name, lo, hi,
                          v->valuedouble);
  *out = (int)v->valuedouble;
  return 0;
}

int weir__api_want_bool(api_error *e, const cJSON *v, const char *name, int *out) {
  if (!cJSON_IsBool(v))
    return weir__api_fail(e, 400, name, "invalid_type", "'%s' must be a boolean", name);
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
  p->cache_mode = -1;
  p->logprobs = -1;
  int have_best_of = 0, have_top_logprobs = 0, have_max_tokens = 0, have_max_completion = 0;
  int max_completion_tokens = 0;
  const double vocab = s->info.vocab_size > 0 ? s->info.vocab_size : 1;
  for (const cJSON *it = root->child; it; it = it->next) {
    const char *k = it->string ? it->string : "";
    if (cJSON_IsNull(it)) continue; /* null means "not given", as OpenAI's API treats it */
    if (!strcmp(k, "response_format")) {
      p->response_format = it;
    } else if (!strcmp(k, "guided_json")) {
      p->guided_json = it;
    } else if (!strcmp(k, "guided_regex")) {
      p->guided_regex = it;
    } else if (!strcmp(k, "guided_choice")) {
      p->guided_choice = it;
    } else if (!strcmp(k, "guided_grammar")) {
      p->guided_grammar = it;
    } else if (!strcmp(k, "model")) {
      if (!cJSON_IsString(it))
        return weir__api_fail(e, 400, k, "invalid_type", "'model' must be a string");
      p->model = it->valuestring;
    } else if (!chat && !strcmp(k, "prompt")) {
      p->prompt = it;
    } else if (chat && !strcmp(k, "messages")) {
      p->messages = it;
    } else if (chat && !strcmp(k, "chat_template_kwargs")) {
      /* Extra template variables (Qwen3's enable_thinking), as vLLM and llama.cpp take them. */
      if (!cJSON_IsObject(it))
        return weir__api_fail(e, 400, k, "invalid_type", "'%s' must be an object", k);
      p->template_kwargs = it;
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
        return weir__api_fail(e, 400, k, "invalid_type", "'seed' must be an integer");
      p->has_seed = 1;
      p->seed = (uint64_t)(int64_t)it->valuedouble;
    } else if (!strcmp(k, "stop")) {
      if (cJSON_IsString(it)) {
        if (!*it->valuestring)
          return weir__api_fail(e, 400, k, "invalid_value", "'stop' strings must not be empty");
        if (p->num_stop == MAX_STOP)
          return weir__api_fail(e, 400, k, "invalid_value", "'stop' allows at most %d strings",
                                MAX_STOP);
        p->stop[p->num_stop++] = it->valuestring;
      } else if (cJSON_IsArray(it)) {
        for (const cJSON *x = it->child; x; x = x->next) {
          if (!cJSON_IsString(x))
            return weir__api_fail(e, 400, k, "invalid_type",
                                  "'stop' must be a string or a list of strings");
          if (!*x->valuestring)
            return weir__api_fail(e, 400, k, "invalid_value", "'stop' strings must not be empty");
          if (p->num_stop == MAX_STOP)
            return weir__api_fail(e, 400, k, "invalid_value", "'stop' allows at most %d strings",
                                  MAX_STOP);
          p->stop[p->num_stop++] = x->valuestring;
        }
      } else {
        return weir__api_fail(e, 400, k, "invalid_type",
                              "'stop' must be a string or a list of strings");
      }
    } else if (!strcmp(k, "stop_token_ids")) {
      if (!cJSON_IsArray(it))
        return weir__api_fail(e, 400, k, "invalid_type",
                              "'stop_token_ids' must be a list of token ids");
      for (const cJSON *x = it->child; x; x = x->next) {
        if (!json_is_int(x, 0, vocab - 1))
          return weir__api_fail(e, 400, k, "invalid_value",
                                "'stop_token_ids' entries must be token ids in [0, %d)",
                      s->info.vocab_size);
        if (p->num_stop_ids == WEIR_MAX_STOP_TOKEN_IDS)
          return weir__api_fail(e, 400, k, "invalid_value",
                                "'stop_token_ids' allows at most %d ids", WEIR_MAX_STOP_TOKEN_IDS);
        p->stop_ids[p->num_stop_ids++] = (int32_t)x->valuedouble;
      }
    } else if (!strcmp(k, "logprobs")) {
      if (chat) {
        if (weir__api_want_bool(e, it, k, &p->chat_logprobs)) return -1;
      } else {
        if (cJSON_IsBool(it))
          return weir__api_fail(e, 400, k, "invalid_type",
                                "'logprobs' must be an integer from 0 to %d for completions",
                                WEIR_MAX_LOGPROBS);
        if (want_int(e, it, k, 0, WEIR_MAX_LOGPROBS, &p->logprobs)) return -1;
      }
    } else if (chat && !strcmp(k, "top_logprobs")) {
      if (want_int(e, it, k, 0, WEIR_MAX_LOGPROBS, &p->top_logprobs)) return -1;
      have_top_logprobs = 1;
    } else if (!chat && !strcmp(k, "echo")) {
      if (weir__api_want_bool(e, it, k, &p->echo)) return -1;
    } else if (!strcmp(k, "ignore_eos")) {
      if (weir__api_want_bool(e, it, k, &p->ignore_eos)) return -1;
    } else if (!strcmp(k, "speculative")) {
      int on = 1;
      if (weir__api_want_bool(e, it, k, &on)) return -1;
      p->no_speculation = !on;
    } else if (!strcmp(k, "min_tokens")) {
      if (want_int(e, it, k, 0, 1e9, &p->min_tokens)) return -1;
    } else if (!strcmp(k, "stream")) {
      if (weir__api_want_bool(e, it, k, &p->stream)) return -1;
    } else if (!strcmp(k, "stream_options")) {
      if (!cJSON_IsObject(it))
        return weir__api_fail(e, 400, k, "invalid_type", "'stream_options' must be an object");
      p->has_stream_options = 1;
      for (const cJSON *x = it->child; x; x = x->next) {
        if (!strcmp(x->string, "include_usage")) {
          if (!cJSON_IsNull(x) && weir__api_want_bool(e, x, "stream_options.include_usage",
                                            &p->include_usage))
            return -1;
        } else {
          char name[96];
          snprintf(name, sizeof name, "stream_options.%s", x->string);
          return weir__api_unsupported(e, name);
        }
      }
    } else if (!strcmp(k, "user")) {
      if (!cJSON_IsString(it))
        return weir__api_fail(e, 400, k, "invalid_type", "'user' must be a string");
      p->user = it->valuestring;
    } else if (!strcmp(k, "cache")) {
      if (parse_cache(e, it, p)) return -1;
    } else if (!strcmp(k, "priority")) {
      if (want_int(e, it, k, -1e6, 1e6, &p->priority)) return -1;
    } else if (!strcmp(k, "best_of") && chat) {
      return weir__api_unsupported(e, k);
    } else if (!strcmp(k, "suffix") && cJSON_IsString(it) && !*it->valuestring) {
      /* An empty suffix asks for nothing. */
    } else if (!strcmp(k, "logit_bias")) {
      if (!cJSON_IsObject(it))
        return weir__api_fail(e, 400, k, "invalid_type",
                              "'logit_bias' must be an object mapping token ids to numbers");
      for (const cJSON *b = it->child; b; b = b->next) {
        if (p->num_bias == WEIR_MAX_LOGIT_BIAS)
          return weir__api_fail(e, 400, k, "invalid_value",
                                "'logit_bias' allows at most %d entries", WEIR_MAX_LOGIT_BIAS);
        const char *key = b->string;
        size_t kl = strlen(key);
        long id = -1;
        if (kl > 0 && kl <= 10 && strspn(key, "0123456789") == kl) id = strtol(key, NULL, 10);
        if (id < 0 || id >= s->info.vocab_size)
          return weir__api_fail(e, 400, k, "invalid_value",
                                "'logit_bias' keys must be token ids in [0, %d), got '%.40s'",
                      (int)s->info.vocab_size, key);
        if (!cJSON_IsNumber(b) || !(b->valuedouble >= -100.0 && b->valuedouble <= 100.0))
          return weir__api_fail(e, 400, k, "invalid_value",
                      "'logit_bias' values must be numbers in [-100, 100] (token %ld)", id);
        p->bias_tokens[p->num_bias] = (int32_t)id;
        p->bias_values[p->num_bias++] = (float)b->valuedouble;
      }
    } else if (chat && !strcmp(k, "tools")) {
      p->tools = it;
    } else if (chat && !strcmp(k, "tool_choice")) {
      p->tool_choice = it;
    } else if (chat && !strcmp(k, "parallel_tool_calls")) {
      if (weir__api_want_bool(e, it, k, &p->parallel_tool_calls)) return -1;
      p->has_parallel_tool_calls = 1;
    } else {
      return weir__api_unsupported(e, k);
    }
  }
  if (!chat && !p->prompt)
    return weir__api_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
  if (chat && !p->messages)
    return weir__api_fail(e, 400, "messages", "missing_required_parameter",
                          "'messages' is required");
  if (have_max_completion) {
    if (have_max_tokens && p->max_tokens != max_completion_tokens)
      return weir__api_fail(e, 400, "max_completion_tokens", "invalid_value",
                            "'max_tokens' and 'max_completion_tokens' disagree");
    p->max_tokens = max_completion_tokens;
  }
  if (have_best_of && p->best_of != p->n)
    return weir__api_fail(e, 400, "best_of", "unsupported_parameter",
                "Unsupported parameter: 'best_of' must equal 'n' (%d); this server does not "
                          "rank extra candidates", p->n);
  if (p->max_tokens > 0 && p->min_tokens > p->max_tokens)
    return weir__api_fail(e, 400, "min_tokens", "invalid_value",
                          "'min_tokens' (%d) must not exceed 'max_tokens' (%d)", p->min_tokens,
                          p->max_tokens);
  if (p->has_stream_options && !p->stream)
    return weir__api_fail(e, 400, "stream_options", "invalid_value",
                          "'stream_options' is only allowed when 'stream' is true");
  if (chat) {
    if (have_top_logprobs && !p->chat_logprobs)
      return weir__api_fail(e, 400, "top_logprobs", "invalid_value",
                            "'top_logprobs' requires 'logprobs' to be true");
    p->logprobs = p->chat_logprobs ? p->top_logprobs : -1;
  }
  if (p->model && !weir__api_serves_model(s, p->model))
    return weir__api_fail(e, 404, "model", "model_not_found", "The model `%s` does not exist.",
                          p->model);
  return 0;
}

/* ---- prompts ---------------------------------------------------------------------------- */


void weir__api_prompts_free(prompt_list *pl) {
  for (int i = 0; i < pl->count; i++) free(pl->ids[i]);
  free(pl->ids);
  free(pl->lens);
  free(pl->max_tokens);
  memset(pl, 0, sizeof *pl);
}

static int prompts_add(prompt_list *pl, int32_t *ids, int32_t n, api_error *e) {
  int32_t **a = realloc(pl->ids, sizeof *a * (size_t)(pl->count + 1));
  if (a) pl->ids = a;
  int32_t *l = a ? realloc(pl->lens, sizeof *l * (size_t)(pl->count + 1)) : NULL;
  if (l) pl->lens = l;
  if (!a || !l) {
    free(ids);
    return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  }
  pl->ids[pl->count] = ids;
  pl->lens[pl->count] = n;
  pl->count++;
  return 0;
}

static int tokenize_into(weir__http_server *s, const char *text, size_t len, int add_special,
                         prompt_list *pl, api_error *e) {
  int32_t *ids = NULL, n = 0;
  int rc = weir_service_tokenize(s->svc, text, len, add_special, &ids, &n);
  if (rc != WEIR_OK) {
    free(ids);
    return weir__api_fail(e, 500, NULL, NULL, "tokenization failed: %s", weir_strerror(rc));
  }
  return prompts_add(pl, ids, n, e);
}

int weir__api_ids_from_array(weir__http_server *s, const cJSON *arr, const char *param,
                          prompt_list *pl, api_error *e) {
  int n = cJSON_GetArraySize(arr);
  int32_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
  if (!ids) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  int i = 0;
  for (const cJSON *x = arr->child; x; x = x->next, i++) {
    if (!json_is_int(x, 0, s->info.vocab_size - 1)) {
      free(ids);
      return weir__api_fail(e, 400, param, "invalid_value",
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
  if (!cJSON_IsArray(prompt)) return weir__api_fail(e, 400, "prompt", "invalid_type", "%s", shape);
  const cJSON *first = prompt->child;
  if (!first)
    return weir__api_fail(e, 400, "prompt", "invalid_value", "'prompt' must not be empty");
  if (cJSON_IsNumber(first)) return weir__api_ids_from_array(s, prompt, "prompt", pl, e);
  for (const cJSON *x = prompt->child; x; x = x->next) {
    if (cJSON_IsString(first) && cJSON_IsString(x)) {
      if (tokenize_into(s, x->valuestring, strlen(x->valuestring), 1, pl, e)) return -1;
    } else if (cJSON_IsArray(first) && cJSON_IsArray(x)) {
      if (!x->child)
        return weir__api_fail(e, 400, "prompt", "invalid_value", "a prompt must not be empty");
      if (weir__api_ids_from_array(s, x, "prompt", pl, e)) return -1;
    } else {
      return weir__api_fail(e, 400, "prompt", "invalid_type", "%s", shape);
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
    return weir__api_fail(e, 400, param, "missing_required_parameter", "'%s' is required", param);
  }
  if (cJSON_IsString(c)) {
    weir_buf_append(out, c->valuestring, strlen(c->valuestring));
    return 0;
  }
  if (!cJSON_IsArray(c))
    return weir__api_fail(e, 400, param, "invalid_type", "'%s' must be a string or a list of parts",
                          param);
  int j = 0, first = 1;
  for (const cJSON *part = c->child; part; part = part->next, j++) {
    char pp[96];
    snprintf(pp, sizeof pp, "messages[%d].content[%d]", idx, j);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsObject(part) || !cJSON_IsString(type))
      return weir__api_fail(e, 400, pp, "invalid_type", "'%s' must be an object with a 'type'", pp);
    if (strcmp(type->valuestring, "text"))
      return weir__api_fail(e, 400, pp, "unsupported_parameter",
                            "Unsupported content part type '%s' in '%s': only 'text' is supported",
                            type->valuestring, pp);
    if (!cJSON_IsString(text))
      return weir__api_fail(e, 400, pp, "invalid_type", "'%s.text' must be a string", pp);
    for (const cJSON *k = part->child; k; k = k->next)
      if (strcmp(k->string, "type") && strcmp(k->string, "text"))
        return weir__api_fail(e, 400, pp, "unknown_parameter", "Unrecognized key '%s' in '%s'",
                              k->string, pp);
    if (!first) weir_buf_append(out, "\n", 1);
    weir_buf_append(out, text->valuestring, strlen(text->valuestring));
    first = 0;
  }
  return 0;
}

static int chat_prompt(weir__http_server *s, const cJSON *messages, const cJSON *kwargs,
                       const api_tools *tools, prompt_list *pl, api_error *e) {
  if (!cJSON_IsArray(messages))
    return weir__api_fail(e, 400, "messages", "invalid_type",
                          "'messages' must be a list of messages");
  int n = cJSON_GetArraySize(messages);
  if (n == 0)
    return weir__api_fail(e, 400, "messages", "invalid_value", "'messages' must not be empty");
  int rc = -1;
  cJSON *msgs = cJSON_CreateArray();
  weir_buf text = {0};
  char *rendered = NULL;
  if (!msgs) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    goto free_msgs;
  }
  int i = 0;
  for (const cJSON *m = messages->child; m; m = m->next, i++) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m)) {
      weir__api_fail(e, 400, param, "invalid_type", "'%s' must be an object", param);
      goto free_msgs;
    }
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    for (const cJSON *k = m->child; k; k = k->next)
      if (strcmp(k->string, "role") && strcmp(k->string, "content") &&
          strcmp(k->string, "name") && strcmp(k->string, "tool_calls") &&
          strcmp(k->string, "tool_call_id")) {
        char pk[128];
        snprintf(pk, sizeof pk, "messages[%d].%s", i, k->string);
        weir__api_unsupported(e, pk);
        goto free_msgs;
      }
    if (!cJSON_IsString(role)) {
      weir__api_fail(e, 400, param, "invalid_type", "'%s.role' must be a string", param);
      goto free_msgs;
    }
    const char *r = role->valuestring;
    if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
        strcmp(r, "tool")) {
      weir__api_fail(e, 400, param, "invalid_value",
                     "'%s.role' must be one of system, developer, user, assistant, tool; got "
                     "'%s'", param, role->valuestring);
      goto free_msgs;
    }
    weir_buf_free(&text);
    if (message_content(cJSON_GetObjectItemCaseSensitive(m, "content"), i, r, &text, e))
      goto free_msgs;
    weir_buf_append(&text, "", 0);
    if (text.oom) {
      weir__api_fail(e, 500, NULL, NULL, "out of memory");
      goto free_msgs;
    }
    cJSON *msg = weir__api_tools_message(m, i, r, text.p, e);
    if (!msg) goto free_msgs;
    cJSON_AddItemToArray(msgs, msg);
  }
  /* The model's template sees the request's messages (normalized) and tools, as Hugging
   * Face's apply_chat_template gives them; a failure is the template's own message. */
  weir_chat_request req = {.messages = msgs, .tools = tools->tools, .kwargs = kwargs,
                           .add_generation_prompt = 1};
  char why[512] = "";
  int r = weir_service_render_chat(s->svc, &req, &rendered, why, sizeof why);
  if (r != WEIR_OK) {
    weir__api_fail(e, r == WEIR_E_INVAL ? 400 : 500, "messages", NULL,
                   "the chat template could not render these messages: %s",
                   why[0] ? why : weir_strerror(r));
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
        rc = weir__api_fail(e, 500, NULL, NULL, "out of memory");
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
  weir_buf_free(&text);
  cJSON_Delete(msgs);
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
      size_t old =
          path_push_key(where, c->string ? c->string : "", c->string ? strlen(c->string) : 0);
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
cJSON *weir__api_parse_body(weir_buf *rb, api_error *e) {
  if (rb->len && !weir_utf8_valid(rb->p, rb->len)) {
    weir_buf fixed = {0};
    if (weir_buf_append_utf8(&fixed, rb->p, rb->len), fixed.oom) {
      weir_buf_free(&fixed);
      weir__api_fail(e, 500, NULL, NULL, "out of memory");
      return NULL;
    }
    weir_buf_free(rb);
    *rb = fixed;
  }
  const char *body = rb->p ? rb->p : "";
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, rb->len, &end, 0);
  if (!root) {
    weir__api_fail(e, 400, NULL, "invalid_json", "The request body is not valid JSON");
    return NULL;
  }
  while (end && end < body + rb->len && isspace((unsigned char)*end)) end++;
  if (end != body + rb->len) {
    weir__api_fail(e, 400, NULL, "invalid_json", "The request body has data after the JSON value");
    goto fail;
  }
  if (!cJSON_IsObject(root)) {
    weir__api_fail(e, 400, NULL, "invalid_json", "The request body must be a JSON object");
    goto fail;
  }
  json_path where;
  if (find_nul_string(body, rb->len, &where)) {
    weir__api_fail(e, 400, where.s, "invalid_value",
         "'%s' holds a NUL character (\\u0000), which this server does not accept", where.s);
    goto fail;
  }
  where.len = 0;
  where.s[0] = '\0';
  int dup = find_duplicate_key(root, &where);
  if (dup < 0) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    goto fail;
  }
  if (dup) {
    weir__api_fail(e, 400, where.s, "invalid_value", "Duplicate key '%s' in the request body",
                   where.s);
    goto fail;
  }
  return root;
fail:
  cJSON_Delete(root);
  return NULL;
}


/* ---- generation requests ---------------------------------------------------------------- */

/* The structured-output constraint a request asks for: OpenAI's response_format, or one of
 * vLLM's guided_json, guided_regex, guided_choice and guided_grammar. spec->kind stays 0 when
 * there is none (response_format "text"). *owned is text this function printed (the caller
 * frees it); *param names the parameter, for errors. 0, or -1 with e filled. */
static int constraint_spec(const params *p, weir_constraint_spec *spec, char **owned,
                           const char **param, api_error *e) {
  memset(spec, 0, sizeof *spec);
  spec->whitespace = 0; /* compact JSON: a small model cannot spend its tokens on blank space */
  *owned = NULL;
  const struct {
    const char *name;
    const cJSON *v;
  } given[] = {{"response_format", p->response_format}, {"guided_json", p->guided_json},
               {"guided_regex", p->guided_regex},       {"guided_choice", p->guided_choice},
               {"guided_grammar", p->guided_grammar}};
  const cJSON *v = NULL;
  for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
    if (!given[i].v) continue;
    if (v)
      return weir__api_fail(e, 400, given[i].name, "invalid_value",
                            "'%s' and '%s' both constrain the output; give one", *param,
                            given[i].name);
    v = given[i].v;
    *param = given[i].name;
  }
  if (!v) return 0;
  const cJSON *text = v; /* a string, or JSON printed below */
  if (v == p->response_format) {
    const cJSON *type = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
    if (!cJSON_IsString(type))
      return weir__api_fail(e, 400, "response_format.type", "invalid_type",
                            "'response_format' must be an object with a string 'type'");
    if (!strcmp(type->valuestring, "text")) return 0;
    if (!strcmp(type->valuestring, "json_object")) {
      spec->kind = WEIR_CONSTRAINT_JSON_OBJECT;
      return 0;
    }
    if (strcmp(type->valuestring, "json_schema"))
      return weir__api_fail(e, 400, "response_format.type", "invalid_value",
                            "'response_format.type' must be 'text', 'json_object' or "
                            "'json_schema', got '%s'", type->valuestring);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
    const cJSON *schema = cJSON_IsObject(js) ? cJSON_GetObjectItemCaseSensitive(js, "schema")
                                             : NULL;
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
      return weir__api_fail(e, 400, "response_format.json_schema.schema", "invalid_type",
                            "'response_format' of type 'json_schema' needs "
                            "'json_schema.schema', a JSON Schema object");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
      return weir__api_fail(e, 400, "response_format.json_schema.strict", "invalid_type",
                            "'strict' must be a boolean");
    spec->kind = WEIR_CONSTRAINT_JSON_SCHEMA;
    spec->strict = cJSON_IsTrue(strict);
    text = schema;
  } else if (v == p->guided_json) {
    if (!cJSON_IsObject(v) && !cJSON_IsString(v) && !cJSON_IsBool(v))
      return weir__api_fail(e, 400, *param, "invalid_type",
                            "'guided_json' must be a JSON Schema (an object or its text)");
    spec->kind = WEIR_CONSTRAINT_JSON_SCHEMA;
  } else if (v == p->guided_choice) {
    int n = 0;
    for (const cJSON *c = cJSON_IsArray(v) ? v->child : NULL; c; c = c->next, n++)
      if (!cJSON_IsString(c))
        return weir__api_fail(e, 400, *param, "invalid_type",
                              "'guided_choice' must be a list of strings");
    if (!cJSON_IsArray(v) || n == 0)
      return weir__api_fail(e, 400, *param, "invalid_value",
                            "'guided_choice' must be a non-empty list of strings");
    spec->kind = WEIR_CONSTRAINT_CHOICE;
  } else {
    if (!cJSON_IsString(v))
      return weir__api_fail(e, 400, *param, "invalid_type", "'%s' must be a string", *param);
    spec->kind = v == p->guided_regex ? WEIR_CONSTRAINT_REGEX : WEIR_CONSTRAINT_GRAMMAR;
  }
  if (cJSON_IsString(text)) {
    spec->text = text->valuestring;
    spec->len = strlen(text->valuestring);
    return 0;
  }
  *owned = cJSON_PrintUnformatted(text);
  if (!*owned) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  spec->text = *owned;
  spec->len = strlen(*owned);
  return 0;
}

int weir__api_parse_generation_root(weir__http_server *s, cJSON *root, int chat, api_gen *out,
                                    api_error *e) {
  memset(out, 0, sizeof *out);
  params *p = &out->p;
  prompt_list *pl = &out->pl;
  out->root = root;
  if (parse_params(s, out->root, chat, p, e)) goto fail;
  if (chat && weir__api_tools_check(p, &out->tools, e)) goto fail;
  if (chat ? chat_prompt(s, p->messages, p->template_kwargs, &out->tools, pl, e)
           : completion_prompts(s, p->prompt, pl, e))
    goto fail;
  if (pl->count * p->n > MAX_CHOICES) {
    weir__api_fail(e, 400, "n", "invalid_value",
                   "%d prompts x n=%d exceeds %d choices per request", pl->count, p->n,
                   MAX_CHOICES);
    goto fail;
  }
  /* Each choice waits in the scheduler's queue as its own request: more choices than the
   * queue holds can never be queued, however idle the server is. That is the request's
   * fault (400), not a load to retry (429). */
  if (s->cfg->max_waiting > 0 && pl->count * p->n > s->cfg->max_waiting) {
    weir__api_fail(e, 400, "n", "invalid_value",
                   "%d prompt(s) x n=%d = %d choices can never be queued: this server queues at "
                   "most %d requests (scheduler.max_waiting)",
                   pl->count, p->n, pl->count * p->n, s->cfg->max_waiting);
    goto fail;
  }
  const int32_t ctx = s->info.context_length;
  const char *pparam = chat ? "messages" : "prompt";
  const int32_t limit = s->cfg->max_tokens_limit > 0 ? s->cfg->max_tokens_limit : ctx;
  if (p->max_tokens > limit) {
    weir__api_fail(e, 400, chat ? "max_completion_tokens" : "max_tokens", "invalid_value",
                   "max_tokens is %d but this server allows at most %d", p->max_tokens, limit);
    goto fail;
  }
  int32_t max_len = 0;
  for (int i = 0; i < pl->count; i++) {
    if (pl->lens[i] == 0) {
      weir__api_fail(e, 400, pparam, "invalid_value", "The prompt is empty (0 tokens)");
      goto fail;
    }
    if (pl->lens[i] > max_len) max_len = pl->lens[i];
  }
  if (max_len >= ctx) {
    weir__api_fail(e, 400, pparam, "context_length_exceeded",
                   "This model's maximum context length is %d tokens. However, your %s is %d "
                   "tokens, which leaves no room for the completion.",
                   ctx, chat ? "messages result in a prompt that" : "prompt", max_len);
    goto fail;
  }
  if (p->max_tokens > 0 && max_len + p->max_tokens > ctx) {
    weir__api_fail(e, 400, pparam, "context_length_exceeded",
                   "This model's maximum context length is %d tokens. However, you requested "
                   "%d tokens (%d in the %s, %d for the completion). Please reduce the length "
                   "of the %s or the completion.",
                   ctx, max_len + p->max_tokens, max_len, pparam, p->max_tokens, pparam);
    goto fail;
  }
  /* Each prompt's budget: the request's max_tokens (checked above), or the endpoint's default
   * cut to the server's limit and to what the context leaves after that prompt. */
  pl->max_tokens = calloc((size_t)pl->count, sizeof *pl->max_tokens);
  if (!pl->max_tokens) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    goto fail;
  }
  for (int i = 0; i < pl->count; i++) {
    int32_t mt = p->max_tokens > 0 ? p->max_tokens
                 : chat            ? s->cfg->default_max_tokens
                                   : WEIR_API_COMPLETIONS_MAX_TOKENS;
    if (mt > limit) mt = limit;
    if (mt > ctx - pl->lens[i]) mt = ctx - pl->lens[i];
    pl->max_tokens[i] = mt;
  }

  /* The constraint is only described here; weir__api_gen_compile compiles it (off the loop:
   * a large schema can take a good part of a second). */
  if (constraint_spec(p, &out->spec, &out->spec_text, &out->spec_param, e)) goto fail;
  if (out->tools.mode == WEIR_TOOLS_REQUIRED || out->tools.mode == WEIR_TOOLS_NAMED) {
    /* A forced call is a JSON Schema constraint on the whole reply (api_tools.c). */
    if (out->spec.kind) {
      weir__api_fail(e, 400, "tool_choice", "invalid_value",
                     "'tool_choice' forcing a call and '%s' both constrain the output; give "
                     "one", out->spec_param);
      goto fail;
    }
    out->spec_text = weir__api_tools_schema(&out->tools);
    if (!out->spec_text) {
      weir__api_fail(e, 500, NULL, NULL, "out of memory");
      goto fail;
    }
    out->spec.kind = WEIR_CONSTRAINT_JSON_SCHEMA;
    out->spec.text = out->spec_text;
    out->spec.len = strlen(out->spec_text);
    out->spec_param = "tool_choice";
  }
  weir_gen_request *g = &out->g;
  g->sampling.struct_size = sizeof g->sampling;
  g->sampling.temperature = (float)p->temperature;
  g->sampling.top_k = p->top_k <= 0 ? 0 : p->top_k;
  g->sampling.top_p = (float)p->top_p;
  g->sampling.min_p = (float)p->min_p;
  g->sampling.repetition_penalty = (float)p->repetition;
  g->sampling.presence_penalty = (float)p->presence;
  g->sampling.frequency_penalty = (float)p->frequency;
  g->sampling.num_logprobs = p->logprobs;
  /* echo with logprobs reports the prompt's logprobs too (OpenAI's legacy completions). */
  g->prompt_logprobs = p->echo && p->logprobs >= 0;
  g->sampling.logit_bias_tokens = p->num_bias ? p->bias_tokens : NULL;
  g->sampling.logit_bias_values = p->num_bias ? p->bias_values : NULL;
  g->sampling.num_logit_bias = p->num_bias;
  g->min_tokens = p->min_tokens;
  g->ignore_eos = p->ignore_eos;
  g->no_speculation = p->no_speculation;
  g->stop_token_ids = p->stop_ids;
  g->num_stop_token_ids = p->num_stop_ids;
  g->stop = p->stop;
  g->num_stop = p->num_stop;
  g->priority = p->priority;
  g->timeout_ms = 0;
  g->has_seed = p->has_seed;
  return 0;
fail:
  weir__api_gen_free(out);
  return -1;
}

void weir__api_gen_choice(api_gen *a, int pi, int j) {
  a->g.prompt = a->pl.ids[pi];
  a->g.num_prompt = a->pl.lens[pi];
  a->g.max_tokens = a->pl.max_tokens[pi];
  /* n choices of one seeded request differ from each other yet stay reproducible. */
  a->g.seed = a->p.seed + (uint64_t)j;
}

void weir__api_gen_compile(const weir_service *svc, api_gen *a) {
  a->compile_rc = weir_service_constraint(svc, &a->spec, &a->constraint, a->compile_why,
                                         sizeof a->compile_why);
  a->g.constraint = a->constraint;
}

int weir__api_gen_compiled(const api_gen *a, api_error *e) {
  if (a->compile_rc == WEIR_OK) return 0;
  if (a->compile_rc == WEIR_E_INVAL)
    return weir__api_fail(e, 400, a->spec_param, "invalid_value", "Invalid '%s': %s",
                          a->spec_param,
                          a->compile_why[0] ? a->compile_why : "the constraint cannot be compiled");
  return weir__api_fail(e, 500, NULL, NULL, "could not compile '%s': %s", a->spec_param,
                        weir_strerror(a->compile_rc));
}

void weir__api_gen_free(api_gen *a) {
  weir_constraint_release(a->constraint);
  a->constraint = NULL;
  free(a->spec_text);
  a->spec_text = NULL;
  cJSON_Delete(a->root);
  a->root = NULL;
  weir__api_prompts_free(&a->pl);
}
