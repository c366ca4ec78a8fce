/* weir_tokenizer_from_gguf: fills a weir_tokenizer_spec from a GGUF file's standard
 * tokenizer.ggml.* keys (see tokenizer.h). The spec borrows the file's strings; the
 * tokenizer copies them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "util/err.h"
#include "model/tokenizer.h"
#include "weir/status.h"


/* An optional token id: absent leaves *id as it is; a value outside the vocabulary or of a
 * non-integer type is an error. */
static int get_id(const weir_gguf *g, const char *key, int32_t n, int32_t *id, char *err,
                  size_t errlen) {
  int64_t v;
  const weir_gguf_kv *kv = weir_gguf_find_key(g, key);
  if (!kv) return 0;
  if (weir_gguf_kv_i64(kv, &v) != 0) {
    weir_set_err(err, errlen, "%s: %s must be an integer, not %s", weir_gguf_path(g), key,
            weir_gguf_type_name(kv->type));
    return WEIR_E_FORMAT;
  }
  if (v < -1 || v >= n) {
    weir_set_err(err, errlen, "%s: %s = %lld is outside the vocabulary of %d tokens",
            weir_gguf_path(g), key, (long long)v, (int)n);
    return WEIR_E_FORMAT;
  }
  *id = (int32_t)v;
  return 0;
}

static int get_flag(const weir_gguf *g, const char *key, int *flag, char *err, size_t errlen) {
  const weir_gguf_kv *kv = weir_gguf_find_key(g, key);
  if (!kv) return 0;
  if (weir_gguf_kv_bool(kv, flag) != 0) {
    weir_set_err(err, errlen, "%s: %s must be a bool, not %s", weir_gguf_path(g), key,
            weir_gguf_type_name(kv->type));
    return WEIR_E_FORMAT;
  }
  return 0;
}

/* A string array of exactly `want` elements (want < 0: any length >= 1). */
static int get_str_arr(const weir_gguf *g, const char *key, int64_t want, weir_gguf_arr *a,
                       char *err, size_t errlen) {
  int rc = weir_gguf_get_arr(g, key, a);
  if (rc == WEIR_E_NOTFOUND) {
    weir_set_err(err, errlen, "%s: required key %s is missing", weir_gguf_path(g), key);
    return rc;
  }
  if (rc != 0 || a->elem_type != WEIR_GGUF_STRING) {
    weir_set_err(err, errlen, "%s: %s must be an array of strings", weir_gguf_path(g), key);
    return WEIR_E_FORMAT;
  }
  if ((want >= 0 && (int64_t)a->n != want) || (want < 0 && a->n == 0) || a->n > INT32_MAX) {
    weir_set_err(err, errlen, "%s: %s has %llu elements%s", weir_gguf_path(g), key,
            (unsigned long long)a->n, want >= 0 ? ", not one per token" : "");
    return WEIR_E_FORMAT;
  }
  return 0;
}

int weir_tokenizer_from_gguf(const struct weir_gguf *g, weir_tokenizer **out, char *err,
                             size_t errlen) {
  int rc;
  weir_tok_str *tokens = NULL, *merges = NULL;
  float *scores = NULL;
  int32_t *types = NULL;
  weir_tokenizer_spec spec;
  if (out) *out = NULL;
  if (!g || !out) return WEIR_E_INVAL;
  const char *path = weir_gguf_path(g);

  weir_gguf_str model;
  rc = weir_gguf_get_str(g, "tokenizer.ggml.model", &model);
  if (rc == WEIR_E_NOTFOUND) {
    weir_set_err(err, errlen, "%s: required key tokenizer.ggml.model is missing", path);
    return rc;
  }
  if (rc != 0) {
    weir_set_err(err, errlen, "%s: tokenizer.ggml.model must be a string", path);
    return WEIR_E_FORMAT;
  }
  if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) {
    weir_tokenizer_spec_init(&spec, WEIR_TOKENIZER_LLAMA);
    spec.add_bos = 1;
  } else if (model.len == 4 && memcmp(model.ptr, "bert", 4) == 0) {
    weir_tokenizer_spec_init(&spec, WEIR_TOKENIZER_BERT);
  } else if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) {
    weir_tokenizer_spec_init(&spec, WEIR_TOKENIZER_GPT2);
  } else {
    weir_set_err(err, errlen, "%s: tokenizer.ggml.model \"%.*s\" is not supported (llama, gpt2, bert)",
            path, (int)(model.len > 64 ? 64 : model.len), model.ptr);
    return WEIR_E_NOTSUP;
  }

  /* The split before merging. Unknown names fall back to GPT-2's split: tokens stay valid
   * and decode exactly, only some boundaries may differ from the model's own tokenizer. */
  weir_gguf_str pre;
  if (spec.type == WEIR_TOKENIZER_GPT2 && weir_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == 0) {
    static const struct {
      const char *name;
      weir_pretokenizer pre;
    } k_pre[] = {{"llama3", WEIR_PRE_LLAMA3}, {"llama-bpe", WEIR_PRE_LLAMA3},
                 {"llama-v3", WEIR_PRE_LLAMA3}, {"smaug-bpe", WEIR_PRE_LLAMA3},
                 {"qwen2", WEIR_PRE_QWEN2}};
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
      if (pre.len == strlen(k_pre[i].name) && memcmp(pre.ptr, k_pre[i].name, pre.len) == 0)
        spec.pre = k_pre[i].pre;
  }

  weir_gguf_arr toks;
  if ((rc = get_str_arr(g, "tokenizer.ggml.tokens", -1, &toks, err, errlen))) return rc;
  int32_t n = (int32_t)toks.n;
  rc = WEIR_E_NOMEM;
  tokens = malloc((size_t)n * sizeof *tokens);
  types = malloc((size_t)n * sizeof *types);
  if (!tokens || !types) goto fail;
  for (int32_t i = 0; i < n; i++) {
    weir_gguf_str s;
    weir_gguf_arr_str(&toks, (uint64_t)i, &s); /* in bounds after open */
    tokens[i].ptr = s.ptr;
    tokens[i].len = (size_t)s.len;
  }

  weir_gguf_arr a;
  rc = weir_gguf_get_arr(g, "tokenizer.ggml.scores", &a);
  if (rc == 0) {
    if (a.n != (uint64_t)n || a.elem_type == WEIR_GGUF_STRING || a.elem_type == WEIR_GGUF_ARRAY) {
      weir_set_err(err, errlen, "%s: tokenizer.ggml.scores must be %d numbers", path, (int)n);
      rc = WEIR_E_FORMAT;
      goto fail;
    }
    rc = WEIR_E_NOMEM;
    scores = malloc((size_t)n * sizeof *scores);
    if (!scores) goto fail;
    for (int32_t i = 0; i < n; i++) weir_gguf_arr_f32(&a, (uint64_t)i, &scores[i]);
  } else if (rc != WEIR_E_NOTFOUND) {
    weir_set_err(err, errlen, "%s: tokenizer.ggml.scores must be an array", path);
    rc = WEIR_E_FORMAT;
    goto fail;
  } else if (spec.type == WEIR_TOKENIZER_LLAMA) {
    weir_set_err(err, errlen, "%s: required key tokenizer.ggml.scores is missing (a llama "
            "tokenizer merges by score)", path);
    rc = WEIR_E_NOTFOUND;
    goto fail;
  }

  rc = weir_gguf_get_arr(g, "tokenizer.ggml.token_type", &a);
  if (rc == 0) {
    if (a.n != (uint64_t)n || a.elem_type == WEIR_GGUF_STRING || a.elem_type == WEIR_GGUF_ARRAY ||
        a.elem_type == WEIR_GGUF_F32 || a.elem_type == WEIR_GGUF_F64) {
      weir_set_err(err, errlen, "%s: tokenizer.ggml.token_type must be %d integers", path, (int)n);
      rc = WEIR_E_FORMAT;
      goto fail;
    }
    for (int32_t i = 0; i < n; i++) {
      int64_t v = 0;
      weir_gguf_arr_i64(&a, (uint64_t)i, &v);
      if (v < WEIR_TOKEN_NORMAL || v > WEIR_TOKEN_BYTE) {
        weir_set_err(err, errlen, "%s: tokenizer.ggml.token_type[%d] = %lld is not a token type "
                "(1..6)", path, (int)i, (long long)v);
        rc = WEIR_E_FORMAT;
        goto fail;
      }
      types[i] = (int32_t)v;
    }
  } else if (rc == WEIR_E_NOTFOUND) {
    for (int32_t i = 0; i < n; i++) types[i] = WEIR_TOKEN_NORMAL;
  } else {
    weir_set_err(err, errlen, "%s: tokenizer.ggml.token_type must be an array", path);
    rc = WEIR_E_FORMAT;
    goto fail;
  }

  if (spec.type == WEIR_TOKENIZER_GPT2) {
    weir_gguf_arr m;
    if ((rc = get_str_arr(g, "tokenizer.ggml.merges", -1, &m, err, errlen))) goto fail;
    rc = WEIR_E_NOMEM;
    merges = malloc((size_t)m.n * sizeof *merges);
    if (!merges) goto fail;
    for (uint64_t i = 0; i < m.n; i++) {
      weir_gguf_str s;
      weir_gguf_arr_str(&m, i, &s);
      merges[i].ptr = s.ptr;
      merges[i].len = (size_t)s.len;
    }
    spec.n_merges = (int32_t)m.n;
    spec.merges = merges;
  }

  if ((rc = get_id(g, "tokenizer.ggml.bos_token_id", n, &spec.bos_id, err, errlen)) ||
      (rc = get_id(g, "tokenizer.ggml.eos_token_id", n, &spec.eos_id, err, errlen)) ||
      (rc = get_id(g, "tokenizer.ggml.unknown_token_id", n, &spec.unk_id, err, errlen)) ||
      (rc = get_id(g, "tokenizer.ggml.padding_token_id", n, &spec.pad_id, err, errlen)) ||
      (rc = get_flag(g, "tokenizer.ggml.add_bos_token", &spec.add_bos, err, errlen)) ||
      (rc = get_flag(g, "tokenizer.ggml.add_eos_token", &spec.add_eos, err, errlen)) ||
      (rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix, err, errlen)))
    goto fail;
  if (spec.type == WEIR_TOKENIZER_BERT) {
    /* WordPiece (GGUF's "bert"): [CLS] text [SEP] whenever special tokens are added, as the
     * published BERT models are fed; [CLS] is the bos token, [SEP] the separator (the key's
     * spelling is GGUF's), with BERT's uncased vocabulary positions as defaults. */
    int32_t sep = -1;
    if ((rc = get_id(g, "tokenizer.ggml.seperator_token_id", n, &sep, err, errlen))) goto fail;
    if (spec.bos_id < 0 && n > 101) spec.bos_id = 101;
    if (sep < 0 && n > 102) sep = 102;
    if (spec.unk_id < 0 && n > 100) spec.unk_id = 100;
    spec.eos_id = sep;
    spec.add_bos = spec.add_eos = 1;
  }
  /* A file that asks for BOS but names none: follow the request only when possible. */
  if (spec.add_bos && spec.bos_id < 0) spec.add_bos = 0;
  if (spec.add_eos && spec.eos_id < 0) spec.add_eos = 0;

  spec.n_tokens = n;
  spec.tokens = tokens;
  spec.scores = scores;
  spec.token_types = types;
  char sub[200] = "";
  rc = weir_tokenizer_create(&spec, out, sub, sizeof sub);
  if (rc) weir_set_err(err, errlen, "%s: tokenizer: %s", path, sub);

fail:
  free(tokens);
  free(merges);
  free(scores);
  free(types);
  return rc;
}
