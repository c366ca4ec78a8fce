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

typedef struct weir_service {
  const struct weir_tokenizer *tok;
  const struct weir_chat_renderer *chat;
  struct weir_constraint_cache *gcache;
  int32_t vocab_size;     /* token ids are in [0, vocab_size) */
  int32_t context_length; /* tokens of prompt plus output */
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

#endif
