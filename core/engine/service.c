/* The service handle (service.h): thin calls into the tokenizer, the chat renderer and the
 * constraint cache, with the argument checks a caller from the network needs. */
#include "engine/service.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grammar/grammar.h"
#include "model/tokenizer.h"
#include "weir/status.h"

int weir_service_tokenize(const weir_service *sv, const char *text, size_t len, int add_special,
                          int32_t **ids, int32_t *n) {
  size_t count = 0;
  int flags = add_special ? (WEIR_ENCODE_ADD_SPECIAL | WEIR_ENCODE_PARSE_SPECIAL) : 0;
  int rc = weir_tokenizer_encode(sv->tok, text, len, flags, ids, &count);
  if (rc == WEIR_OK) *n = (int32_t)count;
  return rc;
}

static int ids_valid(const weir_service *sv, const int32_t *ids, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= sv->vocab_size) return 0;
  return 1;
}

int weir_service_detokenize(const weir_service *sv, const int32_t *ids, int32_t n, char **text,
                            size_t *len) {
  if (!ids_valid(sv, ids, n)) return WEIR_E_RANGE;
  return weir_tokenizer_decode(sv->tok, ids, (size_t)n, 0, text, len);
}

int weir_service_detokenize_offsets(const weir_service *sv, const int32_t *ids, int32_t n,
                                    int skip_special, size_t *offsets) {
  if (!ids_valid(sv, ids, n)) return WEIR_E_RANGE;
  weir_detok d;
  weir_detok_init(&d, sv->tok, skip_special ? WEIR_DECODE_SKIP_SPECIAL : 0);
  size_t at = 0;
  int rc = WEIR_OK;
  for (int32_t i = 0; i < n && rc == WEIR_OK; i++) {
    const char *piece;
    size_t len = 0;
    offsets[i] = at;
    rc = weir_detok_feed(&d, ids[i], &piece, &len);
    at += len;
  }
  weir_detok_free(&d);
  return rc;
}

int weir_service_token_text(const weir_service *sv, int32_t id, char **text, size_t *len) {
  return weir_tokenizer_decode(sv->tok, &id, 1, WEIR_DECODE_KEEP_PREFIX_SPACE, text, len);
}

int weir_service_render_chat(const weir_service *sv, const weir_chat_request *req, char **out,
                             char *err, size_t errlen) {
  return weir_chat_renderer_render(sv->chat, req, out, err, errlen);
}

int weir_service_constraint(const weir_service *sv, const struct weir_constraint_spec *spec,
                            struct weir_constraint **out, char *err, size_t errlen) {
  *out = NULL;
  if (!sv || !spec) return WEIR_E_INVAL;
  return weir_constraint_cache_get(sv->gcache, spec, out, err, errlen);
}

/* ---- Embeddings ------------------------------------------------------------------------- */

int weir_service_embed_tokenize(const weir_service *sv, const char *text, size_t len,
                                int32_t **ids, int32_t *n) {
  *ids = NULL;
  *n = 0;
  if (!sv->embed.tok) return WEIR_E_NOTSUP;
  size_t count = 0;
  int rc = weir_tokenizer_encode(sv->embed.tok, text, len, WEIR_ENCODE_ADD_SPECIAL, ids, &count);
  if (rc == WEIR_OK) *n = (int32_t)count;
  return rc;
}

int weir_service_embed_tokens(const weir_service *sv, const int32_t *ids, int32_t n, float *out,
                              size_t cap, size_t *dim, char *err, size_t errlen) {
  const weir_service_embedder *em = &sv->embed;
  if (dim) *dim = em->run ? (size_t)em->dim : 0;
  if (!em->run) {
    snprintf(err, errlen, "no embedding source is configured");
    return WEIR_E_NOTSUP;
  }
  if (n <= 0) {
    snprintf(err, errlen, "the input is empty: there is nothing to embed");
    return WEIR_E_INVAL;
  }
  if (n > em->context_length) {
    snprintf(err, errlen, "the input has %d tokens, more than the embedding model's context of "
             "%d", (int)n, (int)em->context_length);
    return WEIR_E_RANGE;
  }
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= em->vocab_size) {
      snprintf(err, errlen, "token id %d is outside the embedding model's vocabulary [0, %d)",
               (int)ids[i], (int)em->vocab_size);
      return WEIR_E_RANGE;
    }
  if (cap < (size_t)em->dim) {
    snprintf(err, errlen, "the output holds %zu floats, the vector %d", cap, (int)em->dim);
    return WEIR_E_NOSPACE;
  }
  int rc = em->run(em->ctx, ids, n, out, err, errlen);
  if (rc != WEIR_OK) return rc;
  double ss = 0;
  for (int32_t i = 0; i < em->dim; i++) ss += (double)out[i] * out[i];
  if (ss > 0) {
    const double inv = 1.0 / sqrt(ss);
    for (int32_t i = 0; i < em->dim; i++) out[i] = (float)(out[i] * inv);
  }
  return WEIR_OK;
}

int weir_service_embed(const weir_service *sv, const char *text, size_t len, float *out,
                       size_t cap, size_t *dim, char *err, size_t errlen) {
  int32_t *ids = NULL, n = 0;
  if (dim) *dim = sv->embed.run ? (size_t)sv->embed.dim : 0;
  if (len == 0) {
    snprintf(err, errlen, "the input is empty: there is nothing to embed");
    return WEIR_E_INVAL;
  }
  int rc = weir_service_embed_tokenize(sv, text, len, &ids, &n);
  if (rc != WEIR_OK) {
    snprintf(err, errlen, "could not tokenize the text: %s", weir_strerror(rc));
    return rc;
  }
  rc = weir_service_embed_tokens(sv, ids, n, out, cap, dim, err, errlen);
  free(ids);
  return rc;
}

int32_t weir_service_constraint_expire(const weir_service *sv, uint64_t max_idle_ns,
                                       size_t *freed_bytes) {
  if (freed_bytes) *freed_bytes = 0;
  if (!sv) return 0;
  return weir_constraint_cache_expire(sv->gcache, max_idle_ns, freed_bytes);
}
