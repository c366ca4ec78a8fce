/* /v1/responses, OpenAI's Responses API in its basic form (docs/http-api.md): a request is
 * translated into the chat request it means and run by the chat path (templates, tools,
 * constraints, limits are the chat endpoint's); the reply is rendered as a Response object,
 * or streamed as the response.* events the official clients read. One output per request
 * (the API has no `n`). Stored state, earlier responses and built-in tools are refused with a
 * 400 naming them. Loop thread only. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/api_internal.h"
#include "util/buf.h"

/* ---- the request ------------------------------------------------------------------------- */

/* Joins a message's content: a string, or parts of type input_text / output_text. */
static int item_text(const cJSON *c, const char *param, weir_buf *out, api_error *e) {
  if (cJSON_IsString(c)) {
    weir_buf_puts(out, c->valuestring);
    return 0;
  }
  if (!cJSON_IsArray(c))
    return weir__api_fail(e, 400, param, "invalid_type",
                          "'%s' must be a string or a list of input_text parts", param);
  int j = 0;
  for (const cJSON *part = c->child; part; part = part->next, j++) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsString(type) || (strcmp(type->valuestring, "input_text") &&
                                  strcmp(type->valuestring, "output_text")))
      return weir__api_fail(e, 400, param, "unsupported_parameter",
                            "'%s[%d]': only input_text and output_text parts are supported",
                            param, j);
    if (!cJSON_IsString(text))
      return weir__api_fail(e, 400, param, "invalid_type", "'%s[%d].text' must be a string",
                            param, j);
    if (j) weir_buf_putc(out, '\n');
    weir_buf_puts(out, text->valuestring);
  }
  return 0;
}

static cJSON *chat_message(cJSON *messages, const char *role, const char *content) {
  cJSON *m = cJSON_CreateObject();
  if (!m) return NULL;
  cJSON_AddItemToArray(messages, m);
  cJSON_AddStringToObject(m, "role", role);
  if (content) cJSON_AddStringToObject(m, "content", content);
  return m;
}

/* `input` as chat messages appended to `messages`. */
static int input_messages(const cJSON *input, cJSON *messages, api_error *e) {
  if (cJSON_IsString(input))
    return chat_message(messages, "user", input->valuestring) ? 0
           : weir__api_fail(e, 500, NULL, NULL, "out of memory");
  if (!cJSON_IsArray(input) || !input->child)
    return weir__api_fail(e, 400, "input", "invalid_type",
                          "'input' must be a string or a non-empty list of items");
  cJSON *calls = NULL; /* the open assistant turn's tool_calls: consecutive calls join it */
  int i = 0;
  for (const cJSON *it = input->child; it; it = it->next, i++) {
    char param[64];
    snprintf(param, sizeof param, "input[%d]", i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    if (!cJSON_IsObject(it) || (type && !cJSON_IsString(type)))
      return weir__api_fail(e, 400, param, "invalid_type", "'%s' must be an item object", param);
    const char *t = type ? type->valuestring : "message";
    if (!strcmp(t, "message")) {
      if (!cJSON_IsString(role) ||
          (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "system") &&
           strcmp(role->valuestring, "developer") && strcmp(role->valuestring, "assistant")))
        return weir__api_fail(e, 400, param, "invalid_value",
                              "'%s.role' must be user, system, developer or assistant", param);
      char cp[80];
      snprintf(cp, sizeof cp, "%s.content", param);
      weir_buf text = {0};
      int rc = item_text(cJSON_GetObjectItemCaseSensitive(it, "content"), cp, &text, e);
      if (rc == 0 && !chat_message(messages, role->valuestring, text.p ? text.p : ""))
        rc = weir__api_fail(e, 500, NULL, NULL, "out of memory");
      weir_buf_free(&text);
      if (rc) return rc;
      calls = NULL;
    } else if (!strcmp(t, "function_call")) {
      const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
      const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
      if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return weir__api_fail(e, 400, param, "invalid_value",
                              "'%s' (a function_call) needs string call_id, name and arguments",
                              param);
      if (!calls) {
        cJSON *m = chat_message(messages, "assistant", "");
        calls = m ? cJSON_AddArrayToObject(m, "tool_calls") : NULL;
        if (!calls) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
      }
      cJSON *c = cJSON_CreateObject(), *fn = NULL;
      if (c) {
        cJSON_AddItemToArray(calls, c);
        cJSON_AddStringToObject(c, "id", id->valuestring);
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
      }
      if (!fn || !cJSON_AddStringToObject(fn, "name", name->valuestring) ||
          !cJSON_AddStringToObject(fn, "arguments", args->valuestring))
        return weir__api_fail(e, 500, NULL, NULL, "out of memory");
    } else if (!strcmp(t, "function_call_output")) {
      const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
      const cJSON *out = cJSON_GetObjectItemCaseSensitive(it, "output");
      if (!cJSON_IsString(id) || !cJSON_IsString(out))
        return weir__api_fail(e, 400, param, "invalid_value",
                              "'%s' (a function_call_output) needs string call_id and output",
                              param);
      cJSON *m = chat_message(messages, "tool", out->valuestring);
      if (!m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring))
        return weir__api_fail(e, 500, NULL, NULL, "out of memory");
      calls = NULL;
    } else {
      char tp[80];
      snprintf(tp, sizeof tp, "%s.type", param);
      /* Clients that assume stored responses (the Vercel AI SDK by default) send earlier
       * output back by id; weir keeps no state, so say how to send the item itself. */
      if (!strcmp(t, "item_reference"))
        return weir__api_fail(e, 400, tp, "unsupported_parameter",
                              "'%s' is an item_reference: weir stores no responses, so send "
                              "the item itself (the Vercel AI SDK does with "
                              "providerOptions.openai.store = false)", param);
      return weir__api_fail(e, 400, tp, "unsupported_parameter",
                            "Unsupported input item type '%s' in '%s': message, function_call "
                            "and function_call_output are supported", t, tp);
    }
  }
  return 0;
}

/* Responses' flat function tools as chat tools. */
static int chat_tools(const cJSON *tools, cJSON *chat, api_error *e) {
  if (!cJSON_IsArray(tools))
    return weir__api_fail(e, 400, "tools", "invalid_type", "'tools' must be a list of tools");
  cJSON *out = cJSON_AddArrayToObject(chat, "tools");
  int i = 0;
  for (const cJSON *t = tools->child; t; t = t->next, i++) {
    char param[64];
    snprintf(param, sizeof param, "tools[%d]", i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type))
      return weir__api_fail(e, 400, param, "invalid_type", "'%s' must be a tool object", param);
    if (strcmp(type->valuestring, "function"))
      return weir__api_fail(e, 400, param, "unsupported_parameter",
                            "Built-in tools ('%s' in '%s') are not supported; only function "
                            "tools are", type->valuestring, param);
    cJSON *wrap = cJSON_CreateObject(), *fn = cJSON_Duplicate(t, 1);
    if (!out || !wrap || !fn) {
      cJSON_Delete(wrap);
      cJSON_Delete(fn);
      return weir__api_fail(e, 500, NULL, NULL, "out of memory");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(fn, "type");
    cJSON_AddItemToArray(out, wrap);
    cJSON_AddStringToObject(wrap, "type", "function");
    cJSON_AddItemToObject(wrap, "function", fn);
  }
  return 0;
}

static int chat_tool_choice(const cJSON *c, cJSON *chat, api_error *e) {
  if (cJSON_IsString(c)) {
    cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(c, 0));
    return 0;
  }
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
  if (!cJSON_IsObject(c) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
      !cJSON_IsString(name))
    return weir__api_fail(e, 400, "tool_choice", "invalid_value",
                          "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": "
                          "\"function\", \"name\": ...}");
  cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
  cJSON *fn = o ? cJSON_AddObjectToObject(o, "function") : NULL;
  if (!fn) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  cJSON_AddStringToObject(o, "type", "function");
  cJSON_AddStringToObject(fn, "name", name->valuestring);
  return 0;
}

/* text.format as a chat response_format. */
static int chat_format(const cJSON *text, cJSON *chat, api_error *e) {
  const cJSON *fmt = cJSON_IsObject(text) ? cJSON_GetObjectItemCaseSensitive(text, "format")
                                          : NULL;
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
  if (!cJSON_IsObject(text) || (fmt && !cJSON_IsString(type)))
    return weir__api_fail(e, 400, "text", "invalid_type",
                          "'text' must be {\"format\": {\"type\": ...}}");
  for (const cJSON *k = text->child; k; k = k->next)
    if (strcmp(k->string, "format")) {
      char p[64];
      snprintf(p, sizeof p, "text.%s", k->string);
      return weir__api_unsupported(e, p);
    }
  if (!fmt || !strcmp(type->valuestring, "text")) return 0;
  cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
  if (!rf) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  if (!strcmp(type->valuestring, "json_object")) {
    cJSON_AddStringToObject(rf, "type", "json_object");
    return 0;
  }
  if (strcmp(type->valuestring, "json_schema"))
    return weir__api_fail(e, 400, "text.format.type", "invalid_value",
                          "'text.format.type' must be text, json_object or json_schema");
  cJSON_AddStringToObject(rf, "type", "json_schema");
  cJSON *js = cJSON_Duplicate(fmt, 1);
  if (!js) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  cJSON_DeleteItemFromObjectCaseSensitive(js, "type");
  cJSON_AddItemToObject(rf, "json_schema", js);
  return 0;
}

/* Parameters that name the Responses API's stored state or features weir does not have. */
static int refused(const cJSON *v) {
  const char *k = v->string;
  if (!strcmp(k, "store")) return cJSON_IsTrue(v);
  if (!strcmp(k, "truncation")) return !cJSON_IsString(v) || strcmp(v->valuestring, "disabled");
  if (!strcmp(k, "include") || !strcmp(k, "metadata")) return cJSON_GetArraySize(v) > 0;
  if (!strcmp(k, "background")) return !cJSON_IsFalse(v);
  return !strcmp(k, "previous_response_id") || !strcmp(k, "conversation") ||
         !strcmp(k, "reasoning") || !strcmp(k, "prompt") || !strcmp(k, "service_tier") ||
         !strcmp(k, "max_tool_calls") || !strcmp(k, "top_logprobs") ||
         !strcmp(k, "prompt_cache_key") || !strcmp(k, "safety_identifier");
}

cJSON *weir__api_responses_to_chat(const cJSON *body, cJSON **echo, api_error *e) {
  cJSON *chat = cJSON_CreateObject();
  cJSON *messages = chat ? cJSON_AddArrayToObject(chat, "messages") : NULL;
  *echo = cJSON_CreateObject();
  const cJSON *input = NULL, *instructions = NULL;
  if (!messages || !*echo) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    goto fail;
  }
  for (const cJSON *it = body->child; it; it = it->next) {
    const char *k = it->string;
    if (cJSON_IsNull(it)) continue;
    if (!strcmp(k, "input")) {
      input = it;
    } else if (!strcmp(k, "instructions")) {
      if (!cJSON_IsString(it)) {
        weir__api_fail(e, 400, k, "invalid_type", "'instructions' must be a string");
        goto fail;
      }
      instructions = it;
      cJSON_AddItemToObject(*echo, k, cJSON_Duplicate(it, 0));
    } else if (!strcmp(k, "max_output_tokens")) {
      cJSON_AddItemToObject(chat, "max_tokens", cJSON_Duplicate(it, 0));
      cJSON_AddItemToObject(*echo, k, cJSON_Duplicate(it, 0));
    } else if (!strcmp(k, "model") || !strcmp(k, "temperature") || !strcmp(k, "top_p") ||
               !strcmp(k, "stream") || !strcmp(k, "parallel_tool_calls") ||
               !strcmp(k, "user") || !strcmp(k, "cache")) {
      cJSON_AddItemToObject(chat, k, cJSON_Duplicate(it, 1));
      if (strcmp(k, "stream") && strcmp(k, "user") && strcmp(k, "model") && strcmp(k, "cache"))
        cJSON_AddItemToObject(*echo, k, cJSON_Duplicate(it, 0));
    } else if (!strcmp(k, "tools")) {
      if (chat_tools(it, chat, e)) goto fail;
      cJSON_AddItemToObject(*echo, k, cJSON_Duplicate(it, 1));
    } else if (!strcmp(k, "tool_choice")) {
      if (chat_tool_choice(it, chat, e)) goto fail;
      cJSON_AddItemToObject(*echo, k, cJSON_Duplicate(it, 1));
    } else if (!strcmp(k, "text")) {
      if (chat_format(it, chat, e)) goto fail;
      cJSON_AddItemToObject(*echo, k, cJSON_Duplicate(it, 1));
    } else if (!strcmp(k, "store") || !strcmp(k, "truncation") || !strcmp(k, "include") ||
               !strcmp(k, "metadata") || !strcmp(k, "background") || refused(it)) {
      if (refused(it)) {
        weir__api_fail(e, 400, k, "unsupported_parameter",
                       "Unsupported parameter: '%s' is not supported by this server (it keeps "
                       "no stored responses, conversations or built-in tools)", k);
        goto fail;
      }
    } else {
      weir__api_fail(e, 400, k, "unknown_parameter",
                     "Unrecognized request argument supplied: %s", k);
      goto fail;
    }
  }
  if (!input) {
    weir__api_fail(e, 400, "input", "missing_required_parameter", "'input' is required");
    goto fail;
  }
  if (instructions && !chat_message(messages, "system", instructions->valuestring)) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    goto fail;
  }
  if (input_messages(input, messages, e)) goto fail;
  return chat;
fail:
  cJSON_Delete(chat);
  cJSON_Delete(*echo);
  *echo = NULL;
  return NULL;
}

/* ---- the reply ------------------------------------------------------------------------- */

static void item_id(char *out, size_t cap, const char *prefix) {
  weir__api_make_id(out, cap, prefix);
  out[strlen(prefix)] = '_';
}

/* The Response object without output and usage: what the request set, echoed. */
static cJSON *response_base(const weir__api_job *job, const char *status) {
  cJSON *o = cJSON_Duplicate(job->resp_echo, 1);
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "id", job->id);
  cJSON_AddStringToObject(o, "object", "response");
  cJSON_AddNumberToObject(o, "created_at", (double)job->created);
  cJSON_AddStringToObject(o, "status", status);
  cJSON_AddNullToObject(o, "error");
  cJSON_AddStringToObject(o, "model", job->s->model_name);
  cJSON_AddNullToObject(o, "previous_response_id");
  cJSON_AddFalseToObject(o, "store");
  static const char *const defaults[] = {"instructions", "max_output_tokens"};
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
    if (!cJSON_GetObjectItemCaseSensitive(o, defaults[i])) cJSON_AddNullToObject(o, defaults[i]);
  if (!cJSON_GetObjectItemCaseSensitive(o, "tools")) cJSON_AddArrayToObject(o, "tools");
  if (!cJSON_GetObjectItemCaseSensitive(o, "tool_choice"))
    cJSON_AddStringToObject(o, "tool_choice", "auto");
  if (!cJSON_GetObjectItemCaseSensitive(o, "parallel_tool_calls"))
    cJSON_AddTrueToObject(o, "parallel_tool_calls");
  cJSON_AddStringToObject(o, "truncation", "disabled");
  cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddArrayToObject(o, "output");
  return o;
}

/* A message cut by max_output_tokens is itself incomplete, as its response is. */
static const char *item_status(const api_choice *ch) {
  return ch->finish == WEIR_FINISH_LENGTH ? "incomplete" : "completed";
}

/* Completes a Response: status, incomplete_details, usage. */
static void response_finish(const weir__api_job *job, cJSON *o) {
  const api_choice *ch = &job->choices[0];
  const int cut = ch->finish == WEIR_FINISH_LENGTH;
  cJSON_ReplaceItemInObjectCaseSensitive(o, "status",
                                         cJSON_CreateString(cut ? "incomplete" : "completed"));
  if (cut) {
    cJSON *d = cJSON_AddObjectToObject(o, "incomplete_details");
    if (d) cJSON_AddStringToObject(d, "reason", "max_output_tokens");
  } else {
    cJSON_AddNullToObject(o, "incomplete_details");
  }
  cJSON *u = cJSON_AddObjectToObject(o, "usage");
  if (!u) return;
  cJSON_AddNumberToObject(u, "input_tokens", ch->prompt_tokens);
  cJSON *d = cJSON_AddObjectToObject(u, "input_tokens_details");
  if (d) cJSON_AddNumberToObject(d, "cached_tokens", ch->cached_tokens);
  cJSON_AddNumberToObject(u, "output_tokens", ch->completion_tokens);
  d = cJSON_AddObjectToObject(u, "output_tokens_details");
  if (d) cJSON_AddNumberToObject(d, "reasoning_tokens", 0);
  cJSON_AddNumberToObject(u, "total_tokens", ch->prompt_tokens + ch->completion_tokens);
}

static cJSON *message_item(const char *id, const char *status, const char *text, size_t len,
                           int with_part) {
  cJSON *m = cJSON_CreateObject();
  if (!m) return NULL;
  cJSON_AddStringToObject(m, "type", "message");
  cJSON_AddStringToObject(m, "id", id);
  cJSON_AddStringToObject(m, "status", status);
  cJSON_AddStringToObject(m, "role", "assistant");
  cJSON *content = cJSON_AddArrayToObject(m, "content");
  if (with_part && content) {
    cJSON *part = cJSON_CreateObject();
    if (part) {
      cJSON_AddItemToArray(content, part);
      cJSON_AddStringToObject(part, "type", "output_text");
      cJSON_AddItemToObject(part, "text", weir__api_json_text(text, len));
      cJSON_AddArrayToObject(part, "annotations");
    }
  }
  return m;
}

static cJSON *call_item(const weir_tool_call *c, const char *status, int with_args) {
  char id[48], call_id[48];
  item_id(id, sizeof id, "fc");
  item_id(call_id, sizeof call_id, "call");
  call_id[5 + 24] = '\0';
  cJSON *f = cJSON_CreateObject();
  if (!f) return NULL;
  cJSON_AddStringToObject(f, "type", "function_call");
  cJSON_AddStringToObject(f, "id", id);
  cJSON_AddStringToObject(f, "call_id", call_id);
  cJSON_AddItemToObject(f, "name", weir__api_json_text(c->name, strlen(c->name)));
  cJSON_AddItemToObject(f, "arguments", with_args ? weir__api_json_text(c->arguments,
                                                                       strlen(c->arguments))
                                                  : cJSON_CreateString(""));
  cJSON_AddStringToObject(f, "status", status);
  return f;
}

void weir__api_resp_respond_full(weir__api_job *job) {
  weir__http_req *r = job->r;
  api_choice *ch = &job->choices[0];
  if (ch->finish == WEIR_FINISH_ERROR || ch->finish == WEIR_FINISH_ABORT) {
    weir__http_respond_error(r, ch->finish == WEIR_FINISH_ABORT ? 503 : 500, "server_error",
                             NULL, NULL, "generation failed: %s",
                             ch->error ? ch->error : weir_strerror(ch->status));
    return;
  }
  weir_tool_output reply;
  cJSON *o = response_base(job, "completed");
  if (!o || weir__api_read_calls(job, ch, &reply) != 0) {
    cJSON_Delete(o);
    weir__http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return;
  }
  cJSON *output = cJSON_GetObjectItemCaseSensitive(o, "output");
  char mid[48];
  item_id(mid, sizeof mid, "msg");
  /* A reply of calls alone has no message item. */
  if (reply.num_calls == 0 || reply.content[0])
    cJSON_AddItemToArray(output, message_item(mid, item_status(ch), reply.content,
                                              strlen(reply.content), 1));
  for (int i = 0; i < reply.num_calls; i++)
    cJSON_AddItemToArray(output, call_item(&reply.calls[i], "completed", 1));
  weir_tool_output_free(&reply);
  response_finish(job, o);
  weir__api_respond_json(r, 200, o);
  cJSON_Delete(o);
}

/* ---- streaming ------------------------------------------------------------------------- */

static void send_event(weir__api_job *job, const char *type, cJSON *o) {
  if (!o) return;
  cJSON_AddStringToObject(o, "type", type);
  cJSON_AddNumberToObject(o, "sequence_number", job->resp_seq++);
  char *js = job->r ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!js) return;
  weir_buf b = {0};
  weir_buf_printf(&b, "event: %s\ndata: %s\n\n", type, js);
  free(js);
  if (!b.oom) weir__http_stream_write(job->r, b.p, b.len);
  weir_buf_free(&b);
}

/* An event carrying one object under `key`. */
static void send_with(weir__api_job *job, const char *type, const char *key, cJSON *v) {
  cJSON *o = cJSON_CreateObject();
  if (o && v) cJSON_AddItemToObject(o, key, v);
  else cJSON_Delete(v);
  send_event(job, type, o);
}

static cJSON *at(const weir__api_job *job, int output_index, int with_content) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "item_id", job->resp_msg_id);
  cJSON_AddNumberToObject(o, "output_index", output_index);
  if (with_content) cJSON_AddNumberToObject(o, "content_index", 0);
  return o;
}

void weir__api_resp_stream_start(weir__api_job *job) {
  send_with(job, "response.created", "response", response_base(job, "in_progress"));
  send_with(job, "response.in_progress", "response", response_base(job, "in_progress"));
}

/* Opens the message item (output 0) and its text part. */
static void open_message(weir__api_job *job) {
  if (!job->resp_msg_id[0]) {
    item_id(job->resp_msg_id, sizeof job->resp_msg_id, "msg");
    cJSON *a = cJSON_CreateObject();
    if (a) {
      cJSON_AddNumberToObject(a, "output_index", 0);
      cJSON_AddItemToObject(a, "item", message_item(job->resp_msg_id, "in_progress", NULL, 0, 0));
    }
    send_event(job, "response.output_item.added", a);
    cJSON *p = at(job, 0, 1), *part = cJSON_CreateObject();
    if (part) {
      cJSON_AddStringToObject(part, "type", "output_text");
      cJSON_AddStringToObject(part, "text", "");
      cJSON_AddArrayToObject(part, "annotations");
    }
    if (p && part) cJSON_AddItemToObject(p, "part", part);
    else cJSON_Delete(part);
    send_event(job, "response.content_part.added", p);
  }
}

/* Text for the message item: opens it on the first text. */
static void stream_text(weir__api_job *job, const char *text, size_t len) {
  if (!len) return;
  open_message(job);
  cJSON *d = at(job, 0, 1);
  if (d) cJSON_AddItemToObject(d, "delta", weir__api_json_text(text, len));
  send_event(job, "response.output_text.delta", d);
}

void weir__api_resp_stream_event(weir__api_job *job, api_choice *ch, const weir_gen_event *ev) {
  weir_buf_append(&ch->text, ev->text, ev->text_len);
  size_t safe = ch->text.len;
  if (job->tool_mode == WEIR_TOOLS_AUTO && ch->text.p) {
    int in_call = 0;
    safe = weir_tool_stream_safe(ch->text.p, ch->text.len, ch->content_sent, &in_call);
  } else if (job->tool_mode != WEIR_TOOLS_OFF) {
    safe = 0; /* a forced call is held whole */
  }
  if (safe > ch->content_sent) {
    stream_text(job, ch->text.p + ch->content_sent, safe - ch->content_sent);
    ch->content_sent = safe;
  }
}

void weir__api_resp_stream_finish(weir__api_job *job) {
  api_choice *ch = &job->choices[0];
  if (ch->finish == WEIR_FINISH_ERROR || ch->finish == WEIR_FINISH_ABORT) {
    cJSON *o = response_base(job, "failed");
    cJSON *err = cJSON_CreateObject();
    if (o && err) {
      cJSON_AddStringToObject(err, "code", "server_error");
      cJSON_AddStringToObject(err, "message",
                              ch->error ? ch->error : weir_strerror(ch->status));
      cJSON_ReplaceItemInObjectCaseSensitive(o, "error", err);
    } else {
      cJSON_Delete(err);
    }
    send_with(job, "response.failed", "response", o);
    weir__http_stream_end(job->r);
    return;
  }
  weir_tool_output reply;
  if (weir__api_read_calls(job, ch, &reply) != 0) memset(&reply, 0, sizeof reply);
  cJSON *final = response_base(job, "completed");
  cJSON *output = final ? cJSON_GetObjectItemCaseSensitive(final, "output") : NULL;
  /* Without calls, whatever was held back is text after all. */
  if (reply.num_calls == 0 && ch->text.len > ch->content_sent &&
      job->tool_mode != WEIR_TOOLS_REQUIRED && job->tool_mode != WEIR_TOOLS_NAMED) {
    stream_text(job, ch->text.p + ch->content_sent, ch->text.len - ch->content_sent);
    ch->content_sent = ch->text.len;
  }
  /* A reply without calls is a message, even an empty one. */
  if (reply.num_calls == 0) open_message(job);
  int index = 0;
  if (job->resp_msg_id[0]) {
    const char *text = ch->text.p ? ch->text.p : "";
    cJSON *d = at(job, 0, 1);
    if (d) cJSON_AddItemToObject(d, "text", weir__api_json_text(text, ch->content_sent));
    send_event(job, "response.output_text.done", d);
    cJSON *item = message_item(job->resp_msg_id, item_status(ch), text, ch->content_sent, 1);
    cJSON *p = at(job, 0, 1);
    cJSON *parts = item ? cJSON_GetObjectItemCaseSensitive(item, "content") : NULL;
    if (p && parts && parts->child) cJSON_AddItemToObject(p, "part",
                                                          cJSON_Duplicate(parts->child, 1));
    send_event(job, "response.content_part.done", p);
    cJSON *done = cJSON_CreateObject();
    if (done && item) {
      cJSON_AddNumberToObject(done, "output_index", 0);
      cJSON_AddItemToObject(done, "item", cJSON_Duplicate(item, 1));
    }
    send_event(job, "response.output_item.done", done);
    if (output && item) cJSON_AddItemToArray(output, item);
    else cJSON_Delete(item);
    index = 1;
  }
  for (int i = 0; i < reply.num_calls; i++, index++) {
    cJSON *item = call_item(&reply.calls[i], "in_progress", 0);
    const char *fid = item ? cJSON_GetObjectItemCaseSensitive(item, "id")->valuestring : "";
    cJSON *a = cJSON_CreateObject();
    if (a) {
      cJSON_AddNumberToObject(a, "output_index", index);
      cJSON_AddItemToObject(a, "item", cJSON_Duplicate(item, 1));
    }
    send_event(job, "response.output_item.added", a);
    const char *args = reply.calls[i].arguments;
    cJSON *d = cJSON_CreateObject();
    if (d) {
      cJSON_AddStringToObject(d, "item_id", fid);
      cJSON_AddNumberToObject(d, "output_index", index);
      cJSON_AddItemToObject(d, "delta", weir__api_json_text(args, strlen(args)));
    }
    send_event(job, "response.function_call_arguments.delta", d);
    d = cJSON_CreateObject();
    if (d) {
      cJSON_AddStringToObject(d, "item_id", fid);
      cJSON_AddNumberToObject(d, "output_index", index);
      cJSON_AddItemToObject(d, "arguments", weir__api_json_text(args, strlen(args)));
    }
    send_event(job, "response.function_call_arguments.done", d);
    if (item) {
      cJSON_ReplaceItemInObjectCaseSensitive(item, "arguments",
                                             weir__api_json_text(args, strlen(args)));
      cJSON_ReplaceItemInObjectCaseSensitive(item, "status", cJSON_CreateString("completed"));
    }
    cJSON *done = cJSON_CreateObject();
    if (done && item) {
      cJSON_AddNumberToObject(done, "output_index", index);
      cJSON_AddItemToObject(done, "item", cJSON_Duplicate(item, 1));
    }
    send_event(job, "response.output_item.done", done);
    if (output && item) cJSON_AddItemToArray(output, item);
    else cJSON_Delete(item);
  }
  weir_tool_output_free(&reply);
  if (final) response_finish(job, final);
  send_with(job, ch->finish == WEIR_FINISH_LENGTH ? "response.incomplete" : "response.completed",
            "response", final);
  weir__http_stream_end(job->r);
}
