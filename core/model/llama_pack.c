/* Grouped packing of the Llama graph's linear weights (see llama_pack.h). */
#include "model/llama_pack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int weir_llama_untie_output(const weir_gguf *g, const weir_llama_hparams *hp,
                            const float *samples, int64_t n) {
  if (hp->has_output || !samples || n <= 0) return 0;
  const weir_gguf_tensor *t = weir_gguf_find_tensor(g, "token_embd.weight");
  return t && (t->t.dtype == WEIR_DTYPE_F32 || t->t.dtype == WEIR_DTYPE_F16 ||
               t->t.dtype == WEIR_DTYPE_BF16);
}

int weir_llama_is_linear_weight(const char *name) {
  static const char *const k_suffixes[] = {".attn_q.weight", ".attn_k.weight", ".attn_v.weight",
                                           ".attn_output.weight", ".ffn_gate.weight",
                                           ".ffn_up.weight", ".ffn_down.weight"};
  if (!strcmp(name, "output.weight")) return 1;
  if (strncmp(name, "blk.", 4) != 0) return 0;
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof k_suffixes / sizeof k_suffixes[0]; i++) {
    size_t m = strlen(k_suffixes[i]);
    if (n > m && !strcmp(name + n - m, k_suffixes[i])) return 1;
  }
  return 0;
}

int32_t *weir_llama_o_classes(const weir_llama_hparams *hp) {
  if (hp->n_head_kv <= 0 || hp->n_head == hp->n_head_kv) return NULL;
  const int64_t hd = hp->head_dim, n = (int64_t)hp->n_head * hd;
  const int group = hp->n_head / hp->n_head_kv;
  int32_t *cls = malloc(sizeof(int32_t) * (size_t)n);
  if (!cls) return NULL;
  for (int64_t c = 0; c < n; c++) cls[c] = (int32_t)((c / hd) / group * hd + c % hd);
  return cls;
}

int weir_llama_pack_group(const weir_quant_ops *q, void *qself, const weir_gguf *g,
                          const weir_llama_hparams *hp, int layer, weir_llama_site site,
                          const char *const *suffixes, int n, const float *samples,
                          int64_t num_samples, void **out, char *err, size_t errlen) {
  enum { MAX_GROUP = 4 };
  char names[MAX_GROUP][96];
  weir_quant_pack_args args[MAX_GROUP];
  const weir_quant_pack_args *pargs[MAX_GROUP];
  void *w[MAX_GROUP] = {0};
  int rc = WEIR_OK;
  if (n < 1 || n > MAX_GROUP) return WEIR_E_INVAL;
  int32_t *cls = site == WEIR_LLAMA_SITE_ATTN_OUT && samples ? weir_llama_o_classes(hp) : NULL;
  for (int i = 0; i < n; i++) {
    if (layer >= 0) weir_gguf_blk_name(names[i], sizeof names[i], layer, suffixes[i]);
    else snprintf(names[i], sizeof names[i], "%s", suffixes[i]);
    const weir_gguf_tensor *t = weir_gguf_find_tensor(g, names[i]);
    if (!t) {
      weir_set_err(err, errlen, "%s: tensor %s is missing", weir_gguf_path(g), names[i]);
      rc = WEIR_E_NOTFOUND;
      goto out;
    }
    args[i] = (weir_quant_pack_args){.struct_size = sizeof args[i], .src = &t->t,
                                     .name = names[i], .act_samples = samples,
                                     .num_samples = samples ? num_samples : 0,
                                     .channel_class = cls, .layer = layer,
                                     .num_layers = hp->n_layer};
    /* attn_output's and ffn_down's scales are folded into f16-scaled rows on export, the
     * others' into norm gains: exact only for powers of two. */
    args[i].flags = WEIR_QUANT_PACK_SCALE_POW2;
    pargs[i] = &args[i];
  }
  int failed_at = 0;
  if (WEIR_QUANT_HAS_OP(q, pack_group)) {
    rc = q->pack_group(qself, pargs, n, w);
  } else {
    for (int i = 0; i < n && rc == WEIR_OK; i++) {
      rc = q->pack(qself, pargs[i], &w[i]);
      failed_at = i;
    }
    if (rc != WEIR_OK)
      for (int i = 0; i < n; i++)
        if (w[i]) q->release(qself, w[i]);
  }
  if (rc != WEIR_OK) {
    const weir_tensor *t = args[failed_at].src;
    weir_set_err(err, errlen, "%s: the quant plugin could not pack %s%s (%s, %lld x %lld): %s",
                  weir_gguf_path(g), names[0], n > 1 ? " and the weights sharing its input" : "",
                  weir_dtype_name(t->dtype), (long long)t->ne[1], (long long)t->ne[0],
                  weir_strerror(rc));
    goto out;
  }
  for (int i = 0; i < n; i++) out[i] = w[i];
out:
  free(cls);
  return rc;
}

int weir_llama_matmul_group(const weir_quant_ops *q, void *qself, const void *const *w, int n,
                            const float *x, float *const *ys, int64_t n_tokens) {
  if (n > 1 && n <= WEIR_QUANT_GROUP_MAX && WEIR_QUANT_HAS_OP(q, matmul_group)) {
    int rc = q->matmul_group(qself, w, n, x, ys, n_tokens);
    if (rc != WEIR_E_NOTSUP) return rc;
  }
  for (int i = 0; i < n; i++) {
    int rc = q->matmul(qself, w[i], x, ys[i], n_tokens);
    if (rc != WEIR_OK) return rc;
  }
  return WEIR_OK;
}
