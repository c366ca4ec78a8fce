/* The service handle: what the HTTP layer needs from a loaded model besides generation:
 * tokenizing, detokenizing, the chat template and constraint compiles, and the model's
 * limits (issue 27 item 3, issue 28). HTTP calls these directly, from its worker threads,
 * instead of going through the engine and back.
 *
 * Ownership: the engine owns the handle and what it points to; it is valid from
 * weir_engine_create until weir_engine_destroy, which must not run while a call is in flight.
 * Thread-safety: read-only after load: every function may be called from any number of
 * threads at once (the tokenizer and the chat renderer are immutable; the constraint cache
 * locks itself). */
#ifndef WEIR_ENGINE_SERVICE_H
#define WEIR_ENGINE_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "template/chat_template.h" /* weir_chat_request */

struct weir_tokenizer;
struct weir_chat_renderer;
struct weir_constraint_cache;
struct weir_constraint;
struct weir_constraint_spec;

/* The embedding source (issue 33): the served model's pooled hidden states, or a dedicated
 * embedding model ([embedding] model) loaded beside it. Filled by the engine at load. */
typedef struct weir_service_embedder {
  /* Runs the source over ids[0..n) (checked by the caller) and writes its pooled,
   * un-normalised vector into out[0..dim). The engine runs it on its own thread between
   * steps, so that it never races generation; the caller blocks until it is done. */
  int (*run)(void *ctx, const int32_t *ids, int32_t n, float *out, char *err, size_t errlen);
  void *ctx;
  const struct weir_tokenizer *tok; /* the source's tokenizer (the served model's, or the
                                       embedding model's own) */
  const char *model_name;           /* what /v1/embeddings reports as `model` */
  const char *pooling;              /* "mean", "last" or "cls" */
  int32_t dim;            /* the vector's length */
  int32_t vocab_size;     /* the source's token ids are in [0, vocab_size) */
  int32_t context_length; /* the most tokens one input may have */
  int32_t max_inputs;     /* the most inputs one /v1/embeddings request may carry */
} weir_service_embedder;

typedef struct weir_service {
  const struct weir_tokenizer *tok;
  const struct weir_chat_renderer *chat;
  struct weir_constraint_cache *gcache;
  int32_t vocab_size;     /* token ids are in [0, vocab_size) */
  int32_t context_length; /* tokens of prompt plus output */
  weir_service_embedder embed; /* Since issue 33. */
} weir_service;

/* Text into token ids (*ids malloc'd). add_special: BOS as the model wants it, and special
 * tokens written in the text are parsed as such. 0, WEIR_E_NOMEM. */
int weir_service_tokenize(const weir_service *sv, const char *text, size_t len, int add_special,
                          int32_t **ids, int32_t *n);
/* Token ids into text (*text malloc'd, NUL-terminated, *len bytes). WEIR_E_RANGE for an id
 * outside the vocabulary. */
int weir_service_detokenize(const weir_service *sv, const int32_t *ids, int32_t n, char **text,
                            size_t *len);
/* Where each of the n tokens' text begins in their detokenized text (offsets[n], caller's). */
int weir_service_detokenize_offsets(const weir_service *sv, const int32_t *ids, int32_t n,
                                    int skip_special, size_t *offsets);
/* One token's piece text (malloc'd). */
int weir_service_token_text(const weir_service *sv, int32_t id, char **text, size_t *len);
/* A chat request rendered with the model's template (*out malloc'd); WEIR_E_INVAL with the
 * template's own message in err. The render is bounded by the Jinja limits. */
int weir_service_render_chat(const weir_service *sv, const weir_chat_request *req, char **out,
                             char *err, size_t errlen);
/* A constraint compiled for this vocabulary, or found in the cache (see
 * weir_engine_constraint, which this is). */
int weir_service_constraint(const weir_service *sv, const struct weir_constraint_spec *spec,
                            struct weir_constraint **out, char *err, size_t errlen);
/* Evicts cached constraints unused for more than max_idle_ns (weir_constraint_cache_expire);
 * returns how many, *freed_bytes (may be NULL) what they held. */
int32_t weir_service_constraint_expire(const weir_service *sv, uint64_t max_idle_ns,
                                       size_t *freed_bytes);

/* ---- Embeddings (issue 33) --------------------------------------------------------------
 * The vector of a text or of token ids from the configured embedding source (sv->embed):
 * the served model's hidden states after its final norm, pooled by [embedding] pooling
 * (mean over the tokens, the last token, or the first), or a dedicated bert / nomic-bert
 * model's. The result is L2-normalised (a zero vector stays zero).
 *
 * Thread-safety: callable from any number of threads at once. Each call BLOCKS until the
 * engine thread has run it between two steps (the forward passes of generation and of
 * embeddings never overlap; the KV blocks an embedding borrows are freed before the next
 * step), so never call it on the event loop. Ownership: out is the caller's, cap floats long;
 * nothing is kept after the call.
 * Errors (with one line in err): WEIR_E_INVAL for an empty input, WEIR_E_RANGE for a token id
 * outside the source's vocabulary or an input longer than sv->embed.context_length tokens,
 * WEIR_E_NOSPACE when cap < sv->embed.dim (*dim still says how many are needed),
 * WEIR_E_BUSY when the KV cache has no room for the input right now (retry later),
 * WEIR_E_CANCELED when the engine is shutting down, WEIR_E_NOTSUP when there is no source,
 * WEIR_E_NOMEM, or a plugin's status. */

/* Text into the embedding source's token ids (*ids malloc'd), with the special tokens the
 * source wants (BOS; [CLS] ... [SEP] for bert). 0, WEIR_E_NOMEM. */
int weir_service_embed_tokenize(const weir_service *sv, const char *text, size_t len,
                                int32_t **ids, int32_t *n);
/* The vector of token ids[0..n) of the source's vocabulary; *dim receives its length. */
int weir_service_embed_tokens(const weir_service *sv, const int32_t *ids, int32_t n, float *out,
                              size_t cap, size_t *dim, char *err, size_t errlen);
/* The vector of len bytes of UTF-8 text (tokenized as weir_service_embed_tokenize does);
 * what the response cache's semantic layer calls. */
int weir_service_embed(const weir_service *sv, const char *text, size_t len, float *out,
                       size_t cap, size_t *dim, char *err, size_t errlen);

#endif
