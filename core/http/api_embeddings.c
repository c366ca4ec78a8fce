/* POST /v1/embeddings (issue 33), OpenAI's format: `input` as a string, an array of strings,
 * an array of token ids or an array of arrays of token ids; `encoding_format` "float" or
 * "base64" (little-endian float32, as OpenAI's clients decode it); `dimensions` only as the
 * model's own size (weir does not shorten vectors: the models it serves are not trained to
 * be truncated). Runs on a prep-pool thread (api.c, W_EMBEDDINGS): every vector is computed
 * by the engine thread between steps through the service (service.h, weir_service_embed_*),
 * so this thread blocks, never the loop. docs/http-api.md describes the behaviour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
#include "weir/status.h"

/* One input as token ids (malloc'd). */
typedef struct emb_input {
  int32_t *ids;
  int32_t n;
} emb_input;

static void inputs_free(emb_input *in, int count) {
  for (int i = 0; in && i < count; i++) free(in[i].ids);
  free(in);
}

/* A JSON array of token ids, checked (integers in the embedding vocabulary, at most the
 * context), into *out. 0 or -1 with e filled; param names the input in messages. */
static int ids_of(const weir_service_embedder *em, const cJSON *arr, const char *param,
                  emb_input *out, api_error *e) {
  const int n = cJSON_GetArraySize(arr);
  if (n == 0)
    return weir__api_fail(e, 400, param, "invalid_value", "'%s' is an empty list of tokens",
                          param);
  if (n > em->context_length)
    return weir__api_fail(e, 400, param, "context_length_exceeded",
                          "'%s' has %d tokens; the embedding model's context is %d tokens",
                          param, n, (int)em->context_length);
  if (!(out->ids = malloc(sizeof(int32_t) * (size_t)n)))
    return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  int i = 0;
  for (const cJSON *t = arr->child; t; t = t->next, i++) {
    const double v = cJSON_IsNumber(t) ? t->valuedouble : -1.0;
    if (!cJSON_IsNumber(t) || v != (double)(int64_t)v)
      return weir__api_fail(e, 400, param, "invalid_type",
                            "'%s' must hold token ids (integers); item %d is not one", param, i);
    if (v < 0 || v >= em->vocab_size)
      return weir__api_fail(e, 400, param, "invalid_value",
                            "token id %.0f in '%s' is outside the vocabulary [0, %d)", v, param,
                            (int)em->vocab_size);
    out->ids[i] = (int32_t)v;
  }
  out->n = n;
  return 0;
}

static int text_of(const weir_service *sv, const cJSON *str, const char *param, emb_input *out,
                   api_error *e) {
  const weir_service_embedder *em = &sv->embed;
  const size_t len = strlen(str->valuestring);
  if (len == 0)
    return weir__api_fail(e, 400, param, "invalid_value",
                          "'%s' is an empty string: there is nothing to embed", param);
  int rc = weir_service_embed_tokenize(sv, str->valuestring, len, &out->ids, &out->n);
  if (rc != WEIR_OK)
    return weir__api_fail(e, 500, NULL, NULL, "tokenization failed: %s", weir_strerror(rc));
  if (out->n > em->context_length)
    return weir__api_fail(e, 400, param, "context_length_exceeded",
                          "'%s' is %d tokens long; the embedding model's context is %d tokens",
                          param, (int)out->n, (int)em->context_length);
  return 0;
}

/* `input` into token lists: *in (count entries) or -1 with e filled. */
static int parse_input(const weir_service *sv, const cJSON *input, emb_input **in, int *count,
                       api_error *e) {
  const weir_service_embedder *em = &sv->embed;
  char param[48];
  *in = NULL;
  *count = 0;
  if (cJSON_IsString(input)) {
    if (!(*in = calloc(1, sizeof **in))) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
    *count = 1;
    return text_of(sv, input, "input", *in, e);
  }
  if (!cJSON_IsArray(input))
    return weir__api_fail(e, 400, "input", "invalid_type",
                          "'input' must be a string, a list of strings, a list of token ids "
                          "or a list of lists of token ids");
  const int n = cJSON_GetArraySize(input);
  if (n == 0) return weir__api_fail(e, 400, "input", "invalid_value", "'input' is an empty list");
  /* A list of numbers is one input of token ids. */
  if (cJSON_IsNumber(input->child)) {
    if (!(*in = calloc(1, sizeof **in))) return weir__api_fail(e, 500, NULL, NULL, "out of memory");
    *count = 1;
    return ids_of(em, input, "input", *in, e);
  }
  if (n > em->max_inputs)
    return weir__api_fail(e, 400, "input", "invalid_value",
                          "'input' holds %d items; at most %d are allowed in one request", n,
                          (int)em->max_inputs);
  if (!(*in = calloc((size_t)n, sizeof **in)))
    return weir__api_fail(e, 500, NULL, NULL, "out of memory");
  *count = n;
  const int strings = cJSON_IsString(input->child);
  int i = 0;
  for (const cJSON *it = input->child; it; it = it->next, i++) {
    snprintf(param, sizeof param, "input[%d]", i);
    if (strings ? !cJSON_IsString(it) : !cJSON_IsArray(it))
      return weir__api_fail(e, 400, param, "invalid_type",
                            "'input' must be all strings or all lists of token ids; %s is not "
                            "a %s", param, strings ? "string" : "list of token ids");
    if (strings ? text_of(sv, it, param, &(*in)[i], e) : ids_of(em, it, param, &(*in)[i], e))
      return -1;
  }
  return 0;
}

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The vector's float32 bytes, little-endian, in standard base64 (malloc'd). */
static char *base64_floats(const float *v, int32_t dim) {
  const size_t n = (size_t)dim * 4;
  unsigned char *b = malloc(n ? n : 1);
  char *out = malloc((n + 2) / 3 * 4 + 1);
  if (!b || !out) {
    free(b);
    free(out);
    return NULL;
  }
  for (int32_t i = 0; i < dim; i++) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; k++) b[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
  }
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t w = (uint32_t)b[i] << 16;
    if (i + 1 < n) w |= (uint32_t)b[i + 1] << 8;
    if (i + 2 < n) w |= b[i + 2];
    out[o++] = k_b64[(w >> 18) & 63];
    out[o++] = k_b64[(w >> 12) & 63];
    out[o++] = i + 1 < n ? k_b64[(w >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? k_b64[w & 63] : '=';
  }
  out[o] = '\0';
  free(b);
  return out;
}

/* The status a failed embedding answers with. */
static int embed_status(int rc) {
  switch (rc) {
  case WEIR_E_INVAL:
  case WEIR_E_RANGE: return 400;
  case WEIR_E_BUSY:
  case WEIR_E_CANCELED:
  case WEIR_E_NOTSUP: return 503;
  default: return 500;
  }
}

int weir__api_embeddings_body(weir__http_server *s, cJSON *root, cJSON **reply, api_error *e) {
  const weir_service *sv = s->svc;
  const weir_service_embedder *em = &sv->embed;
  emb_input *in = NULL;
  int count = 0, ret = -1, b64 = 0;
  float *vec = NULL;
  const cJSON *input = NULL;
  cJSON *out = NULL;
  char err[256] = "";
  if (!em->run) {
    weir__api_fail(e, 503, NULL, NULL, "this server has no embedding source");
    goto free_all;
  }
  for (const cJSON *it = root->child; it; it = it->next) {
    if (!strcmp(it->string, "input")) {
      input = it;
    } else if (!strcmp(it->string, "model")) {
      if (!cJSON_IsString(it) || !(weir__api_serves_model(s, it->valuestring) ||
                                   (em->model_name && !strcmp(it->valuestring, em->model_name)))) {
        weir__api_fail(e, 404, "model", "model_not_found", "The model `%s` does not exist.",
                       cJSON_IsString(it) ? it->valuestring : "?");
        goto free_all;
      }
    } else if (!strcmp(it->string, "encoding_format")) {
      if (!cJSON_IsString(it) ||
          (strcmp(it->valuestring, "float") && strcmp(it->valuestring, "base64"))) {
        weir__api_fail(e, 400, "encoding_format", "invalid_value",
                       "'encoding_format' must be \"float\" or \"base64\"");
        goto free_all;
      }
      b64 = !strcmp(it->valuestring, "base64");
    } else if (!strcmp(it->string, "dimensions")) {
      if (!cJSON_IsNumber(it) || it->valuedouble != (double)em->dim) {
        weir__api_fail(e, 400, "dimensions", "invalid_value",
                       "this model's embeddings have %d dimensions and cannot be shortened: "
                       "'dimensions' may only be %d", (int)em->dim, (int)em->dim);
        goto free_all;
      }
    } else if (!strcmp(it->string, "user")) {
      if (!cJSON_IsString(it)) {
        weir__api_fail(e, 400, "user", "invalid_type", "'user' must be a string");
        goto free_all;
      }
    } else {
      weir__api_unsupported(e, it->string);
      goto free_all;
    }
  }
  if (!input) {
    weir__api_fail(e, 400, "input", "missing_required_parameter", "'input' is required");
    goto free_all;
  }
  if (parse_input(sv, input, &in, &count, e)) goto free_all;
  if (!(vec = malloc(sizeof(float) * (size_t)em->dim)) || !(out = cJSON_CreateObject())) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    goto free_all;
  }
  cJSON_AddStringToObject(out, "object", "list");
  cJSON *data = cJSON_AddArrayToObject(out, "data");
  int64_t tokens = 0;
  for (int i = 0; data && i < count; i++) {
    size_t dim = 0;
    int rc = weir_service_embed_tokens(sv, in[i].ids, in[i].n, vec, (size_t)em->dim, &dim, err,
                                       sizeof err);
    if (rc != WEIR_OK) {
      weir__api_fail(e, embed_status(rc), count > 1 ? "input" : NULL, NULL, "input %d: %s", i,
                     err[0] ? err : weir_strerror(rc));
      goto free_all;
    }
    tokens += in[i].n;
    cJSON *item = cJSON_CreateObject();
    if (!item) {
      weir__api_fail(e, 500, NULL, NULL, "out of memory");
      goto free_all;
    }
    cJSON_AddItemToArray(data, item);
    cJSON_AddStringToObject(item, "object", "embedding");
    cJSON_AddNumberToObject(item, "index", i);
    if (b64) {
      char *text = base64_floats(vec, (int32_t)dim);
      if (!text) {
        weir__api_fail(e, 500, NULL, NULL, "out of memory");
        goto free_all;
      }
      cJSON_AddStringToObject(item, "embedding", text);
      free(text);
    } else {
      cJSON *arr = cJSON_AddArrayToObject(item, "embedding");
      for (size_t k = 0; arr && k < dim; k++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)vec[k]));
    }
  }
  cJSON_AddStringToObject(out, "model", em->model_name ? em->model_name : s->model_name);
  cJSON *usage = cJSON_AddObjectToObject(out, "usage");
  if (usage) {
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)tokens);
  }
  *reply = out;
  out = NULL;
  ret = 0;
free_all:
  cJSON_Delete(out);
  cJSON_Delete(root);
  inputs_free(in, count);
  free(vec);
  return ret;
}
