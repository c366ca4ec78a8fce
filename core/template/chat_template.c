/* The chat renderer (chat_template.h): the model's own Jinja template run by the engine of
 * jinja.h, and the built-in renderers, each of which writes what its family's reference
 * Jinja template renders (docs/chat-templates.md). */
#include "template/chat_template.h"
#include "format/gguf.h"
#include "template/jinja.h"
#include "util/buf.h"
#include "util/err.h"

#include <cjson/cJSON.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/status.h"

static const char *const k_names[WEIR_CHAT_TEMPLATE_COUNT_] = {
    "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3"};

const char *weir_chat_template_name(weir_chat_template_id id) {
  return (int)id >= 0 && id < WEIR_CHAT_TEMPLATE_COUNT_ ? k_names[id] : "?";
}

int weir_chat_template_by_name(const char *name, weir_chat_template_id *out) {
  if (!name || !out) return WEIR_E_NOTFOUND;
  for (int i = 0; i < WEIR_CHAT_TEMPLATE_COUNT_; i++)
    if (strcmp(name, k_names[i]) == 0) {
      *out = (weir_chat_template_id)i;
      return 0;
    }
  return WEIR_E_NOTFOUND;
}

int weir_chat_template_detect(const char *j, weir_chat_template_id *out) {
  weir_chat_template_id id;
  if (!j || !out) return WEIR_E_NOTFOUND;
  /* Most specific markers first: a Llama-3 or ChatML template never carries the others',
   * Phi-3 shares <|user|> with Zephyr but alone ends turns with <|end|>. */
  if (strstr(j, "<|start_header_id|>")) id = WEIR_CHAT_LLAMA3;
  else if (strstr(j, "<|im_start|>")) id = WEIR_CHAT_CHATML;
  else if (strstr(j, "<start_of_turn>")) id = WEIR_CHAT_GEMMA;
  else if (strstr(j, "<|end|>") && strstr(j, "<|assistant|>")) id = WEIR_CHAT_PHI3;
  else if (strstr(j, "<|user|>") && (strstr(j, "</s>") || strstr(j, "eos_token")))
    id = WEIR_CHAT_ZEPHYR;
  else if (strstr(j, "[INST]") && strstr(j, "<<SYS>>")) id = WEIR_CHAT_LLAMA2;
  else if (strstr(j, "[INST]")) id = WEIR_CHAT_MISTRAL;
  else return WEIR_E_NOTFOUND;
  *out = id;
  return 0;
}

/* ---- output: core/util's growable buffer ---- */

typedef weir_buf sbuf;

static void put_n(sbuf *b, const char *s, size_t n) { weir_buf_append(b, s, n); }
static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

static int is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's trim / Python's strip(), for ASCII whitespace. */
static void put_trimmed(sbuf *b, const char *s) {
  size_t n = strlen(s), i = 0;
  while (i < n && is_ws(s[i])) i++;
  while (n > i && is_ws(s[n - 1])) n--;
  put_n(b, s + i, n - i);
}

/* Appends open + sys + sep + content trimmed as one string: the templates that fold the
 * system prompt into the first user turn trim the joined text, not each part. */
static void put_trimmed_folded(sbuf *b, const char *open, const char *sys, const char *sep,
                               const char *content) {
  sbuf tmp = {0};
  put(&tmp, open);
  put(&tmp, sys);
  put(&tmp, sep);
  put(&tmp, content);
  if (tmp.oom) b->oom = 1;
  else put_trimmed(b, tmp.p);
  free(tmp.p);
}

enum { R_SYSTEM, R_USER, R_ASSISTANT };

/* A leading system message, which the families without a system role fold into the first
 * user turn: returns its content (NULL when there is none) and sets *first to the index of
 * the first message after it. */
static const char *leading_system(const weir_chat_message *m, const int *r, int n, int *first) {
  *first = n > 0 && r[0] == R_SYSTEM;
  return *first ? m[0].content : NULL;
}

/* ---- the families ---- */

/* The families whose every turn is "open, role, header end, content, close": ChatML, Llama 3,
 * Zephyr and Phi-3 differ only in these strings. */
typedef struct turn_style {
  int bos_first;          /* BOS before the first turn */
  const char *open;       /* before the role */
  const char *after_role; /* between the role and the content */
  int trim;               /* contents are trimmed */
  const char *close;      /* after the content; NULL: EOS, then close_after_eos */
  const char *close_after_eos;
  const char *gen_prompt; /* the generation prompt */
  int eos_without_gen;    /* without one, the conversation ends with EOS */
} turn_style;

static const turn_style k_chatml = {0, "<|im_start|>", "\n", 0, "<|im_end|>\n", NULL,
                                    "<|im_start|>assistant\n", 0};
static const turn_style k_llama3 = {1, "<|start_header_id|>", "<|end_header_id|>\n\n", 1,
                                    "<|eot_id|>", NULL,
                                    "<|start_header_id|>assistant<|end_header_id|>\n\n", 0};
static const turn_style k_zephyr = {0, "<|", "|>\n", 0, NULL, "\n", "<|assistant|>\n", 0};
/* Phi-3: like Zephyr with <|end|> closing turns; without a generation prompt the conversation
 * is closed with EOS. */
static const turn_style k_phi3 = {0, "<|", "|>\n", 0, "<|end|>\n", NULL, "<|assistant|>\n", 1};

static void render_turns(sbuf *b, const turn_style *st, const weir_chat_message *m, int n,
                         int gen, const char *bos, const char *eos) {
  if (st->bos_first) put(b, bos);
  for (int i = 0; i < n; i++) {
    put(b, st->open);
    put(b, m[i].role);
    put(b, st->after_role);
    if (st->trim) put_trimmed(b, m[i].content);
    else put(b, m[i].content);
    if (st->close) {
      put(b, st->close);
    } else {
      put(b, eos);
      put(b, st->close_after_eos);
    }
  }
  if (gen) put(b, st->gen_prompt);
  else if (st->eos_without_gen) put(b, eos);
}

/* Llama-2-chat: the system prompt is folded into the first [INST] inside <<SYS>>; every user
 * turn opens with BOS, every assistant reply ends with EOS; contents are stripped. */
static void render_llama2(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                          const char *bos, const char *eos) {
  (void)gen; /* the prompt already ends with [/INST]: nothing to add */
  int first;
  const char *sys = leading_system(m, r, n, &first);
  for (int i = first; i < n; i++) {
    if (r[i] == R_USER) {
      put(b, bos);
      put(b, "[INST] ");
      if (i == first && sys) {
        /* The reference strips the whole "<<SYS>>\n" + system + "\n<</SYS>>\n\n" +
         * content string, which in effect trims only the end of the user content. */
        put_trimmed_folded(b, "<<SYS>>\n", sys, "\n<</SYS>>\n\n", m[i].content);
      } else {
        put_trimmed(b, m[i].content);
      }
      put(b, " [/INST]");
    } else {
      put(b, " ");
      put_trimmed(b, m[i].content);
      put(b, " ");
      put(b, eos);
    }
  }
}

/* Mistral instruct: BOS once, [INST] user [/INST] then the reply and EOS. Mistral has no
 * system role: the system prompt opens the first user turn, followed by a blank line. */
static void render_mistral(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                           const char *bos, const char *eos) {
  (void)gen;
  int first;
  const char *sys = leading_system(m, r, n, &first);
  put(b, bos);
  for (int i = first; i < n; i++) {
    if (r[i] == R_USER) {
      put(b, "[INST] ");
      if (i == first && sys) {
        put(b, sys);
        put(b, "\n\n");
      }
      put(b, m[i].content);
      put(b, " [/INST]");
    } else {
      put(b, m[i].content);
      put(b, eos);
    }
  }
}

/* Gemma: roles user and model; no system role, so the system prompt opens the first user
 * turn followed by a blank line. Contents are trimmed. */
static void render_gemma(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                         const char *bos) {
  int first;
  const char *sys = leading_system(m, r, n, &first);
  put(b, bos);
  for (int i = first; i < n; i++) {
    put(b, r[i] == R_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
    if (i == first && sys) {
      /* Folded first, then trimmed as one content, as the template would trim it. */
      put_trimmed_folded(b, "", sys, "\n\n", m[i].content);
    } else {
      put_trimmed(b, m[i].content);
    }
    put(b, "<end_of_turn>\n");
  }
  if (gen) put(b, "<start_of_turn>model\n");
}

int weir_chat_render_ex(weir_chat_template_id id, const weir_chat_message *msgs, int n,
                        int add_generation_prompt, const char *bos, const char *eos,
                        char **out, char *err, size_t errlen) {
  int rc = WEIR_E_INVAL;
  int *roles = NULL;
  sbuf b = {0};
  if (!out) return WEIR_E_INVAL;
  *out = NULL;
  if ((int)id < 0 || id >= WEIR_CHAT_TEMPLATE_COUNT_) {
    weir_set_err(err, errlen, "unknown chat template %d", (int)id);
    return WEIR_E_INVAL;
  }
  if (n <= 0 || !msgs) {
    weir_set_err(err, errlen, "no messages");
    return WEIR_E_INVAL;
  }
  roles = malloc((size_t)n * sizeof *roles);
  if (!roles) return WEIR_E_NOMEM;
  for (int i = 0; i < n; i++) {
    const char *role = msgs[i].role;
    if (!role) role = "";
    if (strcmp(role, "system") == 0) roles[i] = R_SYSTEM;
    else if (strcmp(role, "user") == 0) roles[i] = R_USER;
    else if (strcmp(role, "assistant") == 0) roles[i] = R_ASSISTANT;
    else {
      weir_set_err(err, errlen, "message %d: unknown role \"%.40s\" (system, user, assistant)", i, role);
      goto done;
    }
    if (!msgs[i].content) {
      weir_set_err(err, errlen, "message %d has no content", i);
      goto done;
    }
  }
  /* Families whose format only expresses [system] user assistant user ...: check it. */
  if (id == WEIR_CHAT_LLAMA2 || id == WEIR_CHAT_MISTRAL || id == WEIR_CHAT_GEMMA) {
    int first = roles[0] == R_SYSTEM;
    if (first && n == 1) {
      weir_set_err(err, errlen, "%s: a system message needs a user message after it",
              k_names[id]);
      goto done;
    }
    for (int i = first; i < n; i++) {
      int want = (i - first) % 2 == 0 ? R_USER : R_ASSISTANT;
      if (roles[i] != want) {
        weir_set_err(err, errlen, "%s: message %d is %s but the conversation must be [system] then "
                "user and assistant alternating, starting with user", k_names[id], i,
                msgs[i].role);
        goto done;
      }
    }
  }
  switch (id) {
  case WEIR_CHAT_CHATML:
    render_turns(&b, &k_chatml, msgs, n, add_generation_prompt, "", "");
    break;
  case WEIR_CHAT_LLAMA2:
    render_llama2(&b, msgs, roles, n, add_generation_prompt, bos ? bos : "<s>", eos ? eos : "</s>");
    break;
  case WEIR_CHAT_LLAMA3:
    render_turns(&b, &k_llama3, msgs, n, add_generation_prompt, bos ? bos : "<|begin_of_text|>",
                 "");
    break;
  case WEIR_CHAT_MISTRAL:
    render_mistral(&b, msgs, roles, n, add_generation_prompt, bos ? bos : "<s>", eos ? eos : "</s>");
    break;
  case WEIR_CHAT_ZEPHYR:
    render_turns(&b, &k_zephyr, msgs, n, add_generation_prompt, "", eos ? eos : "</s>");
    break;
  case WEIR_CHAT_GEMMA:
    render_gemma(&b, msgs, roles, n, add_generation_prompt, bos ? bos : "<bos>");
    break;
  case WEIR_CHAT_PHI3:
    render_turns(&b, &k_phi3, msgs, n, add_generation_prompt, "", eos ? eos : "<|endoftext|>");
    break;
  default:
    break;
  }
  if (!b.p && !b.oom) put(&b, ""); /* an empty rendering is still a string */
  if (b.oom) {
    rc = WEIR_E_NOMEM;
    weir_set_err(err, errlen, "out of memory");
    free(b.p);
    goto done;
  }
  *out = b.p;
  rc = 0;
done:
  free(roles);
  return rc;
}

int weir_chat_render(weir_chat_template_id id, const weir_chat_message *msgs, int n,
                     int add_generation_prompt, const char *bos, const char *eos, char **out) {
  return weir_chat_render_ex(id, msgs, n, add_generation_prompt, bos, eos, out, NULL, 0);
}

/* ---- the renderer ---- */

#define MAX_NAMED 8

struct weir_chat_renderer {
  weir_jinja_template *tpl; /* NULL: a built-in */
  char *source;             /* tpl's Jinja text (NULL with a built-in) */
  weir_chat_template_id builtin;
  char *bos, *eos;
  int n_named;
  char *names[MAX_NAMED];
  weir_jinja_template *named[MAX_NAMED];
  char note[768];
  weir_jinja_limits lim;
};

void weir_chat_renderer_set_limits(weir_chat_renderer *r, const weir_jinja_limits *lim) {
  r->lim = *lim;
}

void weir_chat_renderer_free(weir_chat_renderer *r) {
  if (!r) return;
  weir_jinja_template_free(r->tpl);
  free(r->source);
  for (int i = 0; i < r->n_named; i++) {
    free(r->names[i]);
    weir_jinja_template_free(r->named[i]);
  }
  free(r->bos);
  free(r->eos);
  free(r);
}

int weir_chat_renderer_create(const char *jinja, size_t len, const char *override,
                              const char *bos, const char *eos, weir_chat_renderer **out,
                              char *err, size_t errlen) {
  *out = NULL;
  weir_chat_renderer *r = calloc(1, sizeof *r);
  if (!r) return WEIR_E_NOMEM;
  weir_jinja_limits_default(&r->lim);
  r->bos = strdup(bos ? bos : "");
  r->eos = strdup(eos ? eos : "");
  if (!r->bos || !r->eos) {
    weir_chat_renderer_free(r);
    return WEIR_E_NOMEM;
  }
  if (override && override[0] && strcmp(override, "auto") != 0) {
    if (weir_chat_template_by_name(override, &r->builtin) != 0) {
      weir_set_err(err, errlen, "model.chat_template: unknown template \"%s\"", override);
      weir_chat_renderer_free(r);
      return WEIR_E_NOTFOUND;
    }
    if (jinja) snprintf(r->note, sizeof r->note, "model.chat_template overrides the model's template");
    *out = r;
    return 0;
  }
  if (jinja) {
    weir_jinja_error je;
    int rc = weir_jinja_parse(jinja, len, &r->tpl, &je);
    if (rc == WEIR_E_NOMEM) {
      weir_chat_renderer_free(r);
      return rc;
    }
    if (rc) snprintf(r->note, sizeof r->note, "the model's chat template does not parse (line %d: %s)",
                     je.line, je.msg);
    if (r->tpl && !(r->source = strndup(jinja, len))) {
      weir_chat_renderer_free(r);
      return WEIR_E_NOMEM;
    }
  }
  if (!r->tpl) {
    char *text = jinja ? strndup(jinja, len) : NULL;
    if (jinja && !text) {
      weir_chat_renderer_free(r);
      return WEIR_E_NOMEM;
    }
    if (weir_chat_template_detect(text, &r->builtin) != 0) {
      r->builtin = WEIR_CHAT_CHATML;
      if (!r->note[0]) snprintf(r->note, sizeof r->note, "the model has no chat template");
      size_t nl = strlen(r->note);
      snprintf(r->note + nl, sizeof r->note - nl, "; using the built-in chatml");
    } else if (r->note[0]) {
      size_t nl = strlen(r->note);
      snprintf(r->note + nl, sizeof r->note - nl, "; using the built-in %s",
               weir_chat_template_name(r->builtin));
    }
    free(text);
  }
  *out = r;
  return 0;
}

int weir_chat_renderer_add_named(weir_chat_renderer *r, const char *name, const char *jinja,
                                 size_t len, char *err, size_t errlen) {
  if (!r || !name || !jinja || !r->tpl) return WEIR_E_INVAL;
  if (r->n_named >= MAX_NAMED) {
    weir_set_err(err, errlen, "more than %d named chat templates", MAX_NAMED);
    return WEIR_E_RANGE;
  }
  weir_jinja_error je;
  weir_jinja_template *t;
  int rc = weir_jinja_parse(jinja, len, &t, &je);
  if (rc) {
    weir_set_err(err, errlen, "chat template \"%s\" does not parse (line %d: %s)", name, je.line, je.msg);
    return rc;
  }
  char *nm = strdup(name);
  if (!nm) {
    weir_jinja_template_free(t);
    return WEIR_E_NOMEM;
  }
  r->names[r->n_named] = nm;
  r->named[r->n_named++] = t;
  return 0;
}

int weir_chat_renderer_from_gguf(const weir_gguf *g, const char *override, const char *bos,
                                 const char *eos, weir_chat_renderer **out, char *err,
                                 size_t errlen) {
  weir_gguf_str s = {0};
  int has = weir_gguf_get_str(g, "tokenizer.chat_template", &s) == 0;
  int rc = weir_chat_renderer_create(has ? s.ptr : NULL, has ? (size_t)s.len : 0, override, bos,
                                     eos, out, err, errlen);
  if (rc || !(*out)->tpl) return rc;
  static const char prefix[] = "tokenizer.chat_template.";
  for (int64_t i = 0; i < weir_gguf_kv_count(g); i++) {
    const weir_gguf_kv *kv = weir_gguf_kv_at(g, i);
    weir_gguf_str text;
    if (!kv->key || strncmp(kv->key, prefix, sizeof prefix - 1) != 0 || !kv->key[sizeof prefix - 1] ||
        weir_gguf_kv_str(kv, &text) != 0)
      continue;
    const char *name = kv->key + sizeof prefix - 1;
    rc = weir_chat_renderer_add_named(*out, name, text.ptr, (size_t)text.len, err, errlen);
    if (rc == WEIR_E_NOMEM) {
      weir_chat_renderer_free(*out);
      *out = NULL;
      return rc;
    }
  }
  return 0;
}

const char *weir_chat_renderer_name(const weir_chat_renderer *r) {
  return r->tpl ? "jinja" : weir_chat_template_name(r->builtin);
}

const char *weir_chat_renderer_source(const weir_chat_renderer *r) {
  return r && r->source ? r->source : "";
}

const char *weir_chat_renderer_note(const weir_chat_renderer *r) { return r->note; }

int weir_chat_renderer_has(const weir_chat_renderer *r, const char *name) {
  for (int i = 0; i < r->n_named; i++)
    if (strcmp(r->names[i], name) == 0) return 1;
  return 0;
}

/* The plain messages as a cJSON array (for the Jinja context). */
static cJSON *messages_json(const weir_chat_message *m, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(a, o) || !cJSON_AddStringToObject(o, "role", m[i].role ? m[i].role : "") ||
        !(m[i].content ? cJSON_AddStringToObject(o, "content", m[i].content) : cJSON_AddNullToObject(o, "content"))) {
      cJSON_Delete(a);
      return NULL;
    }
  }
  return a;
}

static int render_jinja(const weir_chat_renderer *r, const weir_chat_request *req, char **out,
                        char *err, size_t errlen) {
  const weir_jinja_template *t = r->tpl;
  const char *want = req->template_name;
  if (!want && req->tools && cJSON_GetArraySize(req->tools) > 0) want = "tool_use";
  for (int i = 0; want && i < r->n_named; i++)
    if (strcmp(r->names[i], want) == 0) t = r->named[i];
  if (req->template_name && t == r->tpl && strcmp(req->template_name, "default") != 0) {
    weir_set_err(err, errlen, "the model has no chat template named \"%s\"", req->template_name);
    return WEIR_E_INVAL;
  }
  weir_jinja_ctx *c = NULL;
  cJSON *own = NULL;
  int rc = weir_jinja_ctx_new(&c);
  if (rc) return rc;
  const cJSON *msgs = req->messages;
  if (!msgs) {
    own = messages_json(req->msgs, req->n_msgs);
    if (!own) {
      rc = WEIR_E_NOMEM;
      goto done;
    }
    msgs = own;
  }
  if ((rc = weir_jinja_ctx_set_cjson(c, "messages", msgs)) ||
      (rc = req->tools ? weir_jinja_ctx_set_cjson(c, "tools", req->tools)
                       : weir_jinja_ctx_set_none(c, "tools")) ||
      (rc = weir_jinja_ctx_set_none(c, "documents")) ||
      (rc = weir_jinja_ctx_set_bool(c, "add_generation_prompt", req->add_generation_prompt)) ||
      (rc = weir_jinja_ctx_set_str(c, "bos_token", r->bos, strlen(r->bos))) ||
      (rc = weir_jinja_ctx_set_str(c, "eos_token", r->eos, strlen(r->eos))) ||
      (rc = req->kwargs ? weir_jinja_ctx_update_cjson(c, req->kwargs) : 0)) {
    if (rc == WEIR_E_INVAL) weir_set_err(err, errlen, "the messages, tools or template arguments are not valid JSON values for the template");
    goto done;
  }
  weir_jinja_error je;
  rc = weir_jinja_render(t, c, &r->lim, out, NULL, &je);
  if (rc && rc != WEIR_E_NOMEM) {
    /* The template's own words when it raised; otherwise what failed and where. Either way
     * it is this request the template refuses: an invalid-argument error (HTTP 400). */
    if (je.raised) weir_set_err(err, errlen, "%s", je.msg);
    else weir_set_err(err, errlen, "chat template error (line %d): %s", je.line, je.msg);
    rc = WEIR_E_INVAL;
  }
done:
  cJSON_Delete(own);
  weir_jinja_ctx_free(c);
  return rc;
}

/* A built-in renders role/content pairs only: other shapes are refused clearly. */
static int render_builtin(const weir_chat_renderer *r, const weir_chat_request *req, char **out,
                          char *err, size_t errlen) {
  const char *name = weir_chat_template_name(r->builtin);
  if (req->tools && cJSON_GetArraySize(req->tools) > 0) {
    weir_set_err(err, errlen, "the built-in %s chat template cannot render tools", name);
    return WEIR_E_INVAL;
  }
  if (!req->messages)
    return weir_chat_render_ex(r->builtin, req->msgs, req->n_msgs, req->add_generation_prompt,
                               r->bos, r->eos, out, err, errlen);
  int n = cJSON_GetArraySize(req->messages);
  weir_chat_message *m = calloc(n > 0 ? (size_t)n : 1, sizeof *m);
  if (!m) return WEIR_E_NOMEM;
  int i = 0, rc;
  for (const cJSON *x = req->messages->child; x && i < n; x = x->next, i++) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(x, "content");
    if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
      weir_set_err(err, errlen, "message %d: the built-in %s chat template needs a role and "
                    "text content", i, name);
      free(m);
      return WEIR_E_INVAL;
    }
    for (const cJSON *k = x->child; k; k = k->next)
      if (strcmp(k->string, "role") && strcmp(k->string, "content")) {
        weir_set_err(err, errlen, "message %d: the built-in %s chat template cannot render "
                      "'%s'", i, name, k->string);
        free(m);
        return WEIR_E_INVAL;
      }
    m[i].role = role->valuestring;
    m[i].content = content->valuestring;
  }
  rc = weir_chat_render_ex(r->builtin, m, n, req->add_generation_prompt, r->bos, r->eos, out,
                           err, errlen);
  free(m);
  return rc;
}

int weir_chat_renderer_render(const weir_chat_renderer *r, const weir_chat_request *req,
                              char **out, char *err, size_t errlen) {
  if (!r || !req || !out) return WEIR_E_INVAL;
  *out = NULL;
  if (req->messages ? !cJSON_IsArray(req->messages) : (req->n_msgs < 0 || (req->n_msgs && !req->msgs))) {
    weir_set_err(err, errlen, "messages must be a list");
    return WEIR_E_INVAL;
  }
  if ((req->tools && !cJSON_IsArray(req->tools) && !cJSON_IsNull(req->tools)) ||
      (req->kwargs && !cJSON_IsObject(req->kwargs))) {
    weir_set_err(err, errlen, "tools must be a list and template arguments an object");
    return WEIR_E_INVAL;
  }
  weir_chat_request q = *req;
  if (q.tools && cJSON_IsNull(q.tools)) q.tools = NULL;
  return r->tpl ? render_jinja(r, &q, out, err, errlen) : render_builtin(r, &q, out, err, errlen);
}
