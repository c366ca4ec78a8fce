/* Internals of `weir mkmodel`: the tokenizer generator and the chat templates. */
#ifndef WEIR_TOOLS_MKMODEL_H
#define WEIR_TOOLS_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

extern const char weir__mkmodel_corpus[];

/* Token types as GGUF's tokenizer.ggml.token_type stores them. */
enum {
  WEIR__TOK_NORMAL = 1,
  WEIR__TOK_UNKNOWN = 2,
  WEIR__TOK_CONTROL = 3,
  WEIR__TOK_USER_DEFINED = 4,
  WEIR__TOK_BYTE = 6
};

typedef struct weir__vocab {
  int32_t n;        /* tokens */
  char **tokens;    /* NUL-terminated (no token holds a NUL byte) */
  float *scores;    /* llama: -rank for pieces, 0 for special and byte tokens; gpt2: 0 */
  int32_t *types;
  int32_t n_merges; /* gpt2 only: "left right" strings, in rank order */
  char **merges;
  int32_t bos, eos, unk, pad; /* -1: none */
  int add_bos;
} weir__vocab;

/* Builds a vocabulary of exactly n_vocab tokens. style: "llama" (SentencePiece with byte
 * fallback) or "gpt2" (byte-level BPE). specials (control tokens a chat template needs) go
 * last; eos_special names the one that becomes eos (NULL: the style's own end token) and
 * bos_special likewise. Deterministic. Returns 0 or a negative status with err set. */
int weir__vocab_build(const char *style, const char *const *specials, int n_specials,
                      const char *bos_special, const char *eos_special, int32_t n_vocab,
                      weir__vocab *out, char *err, size_t errlen);
void weir__vocab_free(weir__vocab *v);

/* A chat template family: its Jinja text, its control tokens and the bos/eos it implies. */
typedef struct weir__chat_template {
  const char *name;
  const char *jinja;
  const char *specials[6]; /* NULL-terminated */
  const char *bos;         /* NULL: the tokenizer's own */
  const char *eos;         /* NULL: the tokenizer's own */
  /* Those of specials that are text, not control: user-defined tokens (GGUF type 4), always
   * matched whole in text and kept when decoding (Qwen3's <think>). NULL-terminated. */
  const char *texts[3];
} weir__chat_template;

/* NULL when the name is unknown; "none" gives a template with jinja NULL. */
const weir__chat_template *weir__chat_template_find(const char *name);

#endif
