/* Chat templates: the renderer that turns a conversation into a prompt.
 *
 * A weir_chat_renderer runs the model's own Jinja chat template (the GGUF's
 * tokenizer.chat_template, and its named alternates tokenizer.chat_template.<name> such as
 * tool_use) with weir's Jinja engine (jinja.h), the way Hugging Face transformers'
 * apply_chat_template does. The built-in renderers below remain the fallback for a GGUF
 * without a template (or with one the engine cannot parse), and an explicit override
 * (model.chat_template = "chatml" ...). docs/chat-templates.md describes both.
 *
 * Errors: 0 or a negative weir_status. Thread-safety: a renderer is immutable once created
 * and may render from any number of threads at once; the other functions are pure. */
#ifndef WEIR_TEMPLATE_CHAT_TEMPLATE_H
#define WEIR_TEMPLATE_CHAT_TEMPLATE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;
struct weir_gguf;

/* One message of a plain conversation: role "system", "user", "assistant" (and, for a
 * Jinja template, whatever role it accepts) with text content. Borrowed strings. */
typedef struct weir_chat_message {
  const char *role;
  const char *content;
} weir_chat_message;

typedef enum weir_chat_template_id {
  WEIR_CHAT_CHATML = 0,  /* <|im_start|>role\n...<|im_end|>\n (Qwen, many fine-tunes) */
  WEIR_CHAT_LLAMA2 = 1,  /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
  WEIR_CHAT_LLAMA3 = 2,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
  WEIR_CHAT_MISTRAL = 3, /* <s>[INST] ... [/INST]...</s> */
  WEIR_CHAT_ZEPHYR = 4,  /* <|role|>\n...</s>\n */
  WEIR_CHAT_GEMMA = 5,   /* <start_of_turn>user|model\n...<end_of_turn>\n */
  WEIR_CHAT_PHI3 = 6,    /* <|role|>\n...<|end|>\n */
  WEIR_CHAT_TEMPLATE_COUNT_ = 7,
} weir_chat_template_id;

/* ---- the built-in renderers ---- */

/* Recognises the family of a Jinja chat template by its distinctive markers. 0 and *out set;
 * WEIR_E_NOTFOUND when jinja is NULL or matches no family (*out untouched). */
int weir_chat_template_detect(const char *jinja, weir_chat_template_id *out);

/* "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3" (the config's
 * model.chat_template values). 0 and *out set, WEIR_E_NOTFOUND for another name. */
int weir_chat_template_by_name(const char *name, weir_chat_template_id *out);

/* The name of a template ("chatml", ...); "?" for an invalid id. Static string. */
const char *weir_chat_template_name(weir_chat_template_id id);

/* Renders n messages (roles "system", "user", "assistant"), ending with the assistant's
 * turn opener when add_generation_prompt. bos/eos are the tokenizer's BOS/EOS texts as the
 * template writes them ("" = the model has none; NULL = the family's usual text). On success
 * *out is a malloc'd NUL-terminated string the caller frees.
 * WEIR_E_INVAL for an unknown role, a NULL content, no messages or an ordering the family
 * cannot express (llama2, mistral, gemma: an optional first system message, then user and
 * assistant alternating from user); err (may be NULL) gets the reason. WEIR_E_NOMEM. */
int weir_chat_render_ex(weir_chat_template_id id, const weir_chat_message *msgs, int n,
                        int add_generation_prompt, const char *bos, const char *eos,
                        char **out, char *err, size_t errlen);

/* weir_chat_render_ex without the error message. */
int weir_chat_render(weir_chat_template_id id, const weir_chat_message *msgs, int n,
                     int add_generation_prompt, const char *bos, const char *eos, char **out);

/* ---- the renderer ---- */

typedef struct weir_chat_renderer weir_chat_renderer;

/* What to render. Either a plain conversation (msgs, n_msgs) or, when `messages` is
 * non-NULL, an OpenAI-style messages array handed to the template as it is (tool_calls,
 * the tool role, tool_call_id, name, content parts...). All borrowed for the call.
 *   tools:    the request's tools array (NULL: the template sees tools = None)
 *   kwargs:   an object whose members become extra template variables (chat_template_kwargs:
 *             enable_thinking, ...), set after the standard ones
 *   template_name: a named alternate (tokenizer.chat_template.<name>); NULL picks "tool_use"
 *             when tools are given and the model has it, else the default template
 * The template sees: messages, tools, documents (None), add_generation_prompt, bos_token,
 * eos_token, then the kwargs. */
typedef struct weir_chat_request {
  const weir_chat_message *msgs;
  int n_msgs;
  const struct cJSON *messages;
  const struct cJSON *tools;
  const struct cJSON *kwargs;
  const char *template_name;
  int add_generation_prompt;
} weir_chat_request;

/* A renderer for a model. `jinja` (len bytes; NULL: none) is its chat template; `override`
 * names a built-in renderer to use instead (NULL, "" or "auto": none); bos and eos are the
 * tokenizer's BOS and EOS texts ("" when it has none). Without an override a template that
 * parses is run as Jinja; one that does not parse, or none, falls back to the built-in
 * family detected from its text (ChatML when none matches); weir_chat_renderer_note then
 * says why, for the log.
 * WEIR_E_NOTFOUND for an unknown override (err says so), WEIR_E_NOMEM. */
int weir_chat_renderer_create(const char *jinja, size_t len, const char *override,
                              const char *bos, const char *eos, weir_chat_renderer **out,
                              char *err, size_t errlen);
/* The same from a GGUF: tokenizer.chat_template and every tokenizer.chat_template.<name>
 * (an alternate that does not parse is skipped; err then names it, and 0 is returned). */
int weir_chat_renderer_from_gguf(const struct weir_gguf *g, const char *override,
                                 const char *bos, const char *eos, weir_chat_renderer **out,
                                 char *err, size_t errlen);
/* Adds a named alternate template. WEIR_E_FORMAT (err: line and reason) when it does not
 * parse; WEIR_E_INVAL on a renderer that uses a built-in. */
int weir_chat_renderer_add_named(weir_chat_renderer *r, const char *name, const char *jinja,
                                 size_t len, char *err, size_t errlen);
void weir_chat_renderer_free(weir_chat_renderer *r);

/* Replaces the Jinja limits renders run under (the defaults of weir_jinja_limits_default;
 * `now` fixes strftime_now's clock for reproducible prompts). Call before sharing r. */
struct weir_jinja_limits;
void weir_chat_renderer_set_limits(weir_chat_renderer *r, const struct weir_jinja_limits *lim);

/* "jinja" when the model's template runs, else the built-in's name ("chatml" ...). */
const char *weir_chat_renderer_name(const weir_chat_renderer *r);
/* Why a template was not used ("" when it is used or there was none to use). */
const char *weir_chat_renderer_note(const weir_chat_renderer *r);
/* The Jinja text the renderer runs (llama-server's /props shows it); "" for a built-in.
 * Owned by the renderer. */
const char *weir_chat_renderer_source(const weir_chat_renderer *r);
/* 1 when a named alternate exists. */
int weir_chat_renderer_has(const weir_chat_renderer *r, const char *name);

/* Renders req. On success *out is a malloc'd NUL-terminated prompt the caller frees.
 * WEIR_E_INVAL when the conversation cannot be rendered: for a Jinja template err holds the
 * template's own message (its raise_exception text, verbatim) or what went wrong and on
 * which template line (an undefined value, a type error, a budget exceeded); for a built-in
 * the reason (an unknown role, tools it cannot express...). WEIR_E_NOMEM. */
int weir_chat_renderer_render(const weir_chat_renderer *r, const weir_chat_request *req,
                              char **out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
