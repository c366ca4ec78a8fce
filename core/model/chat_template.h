/* Chat templates: built-in renderers for the common model families, and detection of the
 * family from a GGUF file's tokenizer.chat_template (a Jinja string weir does not execute).
 * The exact formats are in docs/tokenizers.md.
 *
 * Errors: 0 or a negative weir_status. Thread-safety: every function is pure. */
#ifndef WEIR_MODEL_CHAT_TEMPLATE_H
#define WEIR_MODEL_CHAT_TEMPLATE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
