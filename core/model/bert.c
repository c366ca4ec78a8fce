/* Encoder embedding models: bert and nomic-bert (bert.h). The graph is core's; every
 * computation runs in the plugins. The formulas follow the published architectures (BERT:
 * Devlin et al. 2018, post-LayerNorm blocks with a GELU feed-forward; nomic-bert: Nussbaum et
 * al. 2024, rotary positions and SwiGLU); the tensor names and metadata keys are GGUF's. */
#include "model/bert.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "model/llama_pack.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#include "plugin/loader.h"
#include "weir/device.h"
#include "weir/numeric.h"
#include "weir/quant.h"

typedef struct bert_layer {
  void *wq, *wk, *wv, *wo, *w_up, *w_gate, *w_down; /* quant handles (w_gate: nomic) */
  float *bq, *bk, *bv, *bo, *b_up, *b_down;         /* device f32, bert only */
  float *attn_norm_w, *attn_norm_b, *out_norm_w, *out_norm_b;
} bert_layer;

struct weir_bert {
  weir_gguf *gguf;
  weir_tokenizer *tok;
  char *name;
  char arch[16];
  int nomic;
  int pooling; /* 0 mean, 1 cls, 2 last */
  int32_t n_vocab, n_ctx, n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim;
  float eps, rope_base;

  const weir_device_ops *dev;
  void *dev_self;
  const weir_quant_ops *quant;
  void *quant_self;

  void *tok_embd, *pos_embd; /* quant handles (pos_embd: bert) */
  float *type0;              /* token type 0's row, device f32 [n_embd] */
  float *emb_norm_w, *emb_norm_b;
  bert_layer *layers;

  /* Activations, device f32, for n_ctx rows; the token ids and positions of a pass. */
  float *x, *h, *q, *k, *v, *o, *up, *gate;
  int32_t *d_tokens, *d_positions;
  float *host_rows; /* [n_ctx][n_embd]: the last hidden states read back for pooling */
};

#define TRY(expr)                \
  do {                           \
    rc = (expr);                 \
    if (rc != WEIR_OK) goto out; \
  } while (0)

static int dev_alloc(weir_bert *m, size_t bytes, void **p) {
  *p = NULL;
  return m->dev->alloc(m->dev_self, bytes ? bytes : 1, p);
}

static void dev_free(weir_bert *m, void *p) {
  if (p) m->dev->free(m->dev_self, p);
}

/* n f32 values, from element `first` of a F32/F16/BF16 tensor, onto the device. */
static int upload_vec(weir_bert *m, const char *name, int64_t first, int64_t n, float **out,
                      char *err, size_t errlen) {
  return weir__model_upload_f32(m->dev, m->dev_self, m->gguf, name, first, n, 0, out, err,
                                errlen);
}

/* Packs rows [row0, row0 + rows) of a 2-D weight (all of it: rows < 0) through the quant
 * plugin, checking its input width. */
static int pack(weir_bert *m, const char *name, int64_t in, int64_t row0, int64_t rows,
                void **out, char *err, size_t errlen) {
  return weir__model_pack_rows(m->quant, m->quant_self, m->gguf, name, in, row0, rows, out, err,
                               errlen);
}

/* The output width of a 2-D tensor, or -1. */
static int64_t rows_of(const weir_bert *m, const char *name) {
  const weir_gguf_tensor *t = weir_gguf_find_tensor(m->gguf, name);
  return t && t->t.ndim == 2 ? t->t.ne[1] : -1;
}

static int get_u32(const weir_bert *m, const char *key, int required, int32_t *out, char *err,
                   size_t errlen) {
  char full[96];
  snprintf(full, sizeof full, "%s.%s", m->arch, key);
  uint32_t v;
  int rc = weir_gguf_get_u32(m->gguf, full, &v);
  if (rc == WEIR_E_NOTFOUND && !required) return WEIR_OK;
  if (rc != WEIR_OK || v == 0 || v > (1u << 24)) {
    snprintf(err, errlen, "%s: %s %s", weir_gguf_path(m->gguf), full,
             rc == WEIR_E_NOTFOUND ? "is missing" : "is not a positive integer below 2^24");
    return rc == WEIR_OK ? WEIR_E_FORMAT : rc;
  }
  *out = (int32_t)v;
  return WEIR_OK;
}

/* Hyperparameters, and the keys weir cannot honour refused. */
static int read_hparams(weir_bert *m, const char *pooling, char *err, size_t errlen) {
  const char *path = weir_gguf_path(m->gguf);
  int rc;
  TRY(get_u32(m, "context_length", 1, &m->n_ctx, err, errlen));
  TRY(get_u32(m, "embedding_length", 1, &m->n_embd, err, errlen));
  TRY(get_u32(m, "feed_forward_length", 1, &m->n_ff, err, errlen));
  TRY(get_u32(m, "block_count", 1, &m->n_layer, err, errlen));
  TRY(get_u32(m, "attention.head_count", 1, &m->n_head, err, errlen));
  m->n_head_kv = m->n_head;
  TRY(get_u32(m, "attention.head_count_kv", 0, &m->n_head_kv, err, errlen));
  if (m->n_embd % m->n_head != 0 || m->n_head % m->n_head_kv != 0) {
    snprintf(err, errlen, "%s: %d heads (%d KV) do not divide the width %d", path, m->n_head,
             m->n_head_kv, m->n_embd);
    rc = WEIR_E_FORMAT;
    goto out;
  }
  m->head_dim = m->n_embd / m->n_head;
  char key[96];
  snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", m->arch);
  if (weir_gguf_get_f32(m->gguf, key, &m->eps) != WEIR_OK || !(m->eps > 0)) {
    snprintf(err, errlen, "%s: %s is missing or not positive", path, key);
    rc = WEIR_E_FORMAT;
    goto out;
  }
  int causal = 0;
  snprintf(key, sizeof key, "%s.attention.causal", m->arch);
  if (weir_gguf_get_bool(m->gguf, key, &causal) == WEIR_OK && causal) {
    snprintf(err, errlen, "%s: %s is true; weir runs bert models bidirectionally only", path,
             key);
    rc = WEIR_E_NOTSUP;
    goto out;
  }
  m->rope_base = 10000.0f;
  snprintf(key, sizeof key, "%s.rope.freq_base", m->arch);
  (void)weir_gguf_get_f32(m->gguf, key, &m->rope_base);
  snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
  weir_gguf_str st;
  if (weir_gguf_get_str(m->gguf, key, &st) == WEIR_OK &&
      !(st.len == 4 && !memcmp(st.ptr, "none", 4))) {
    snprintf(err, errlen, "%s: %s is set; weir runs embedding models without RoPE scaling",
             path, key);
    rc = WEIR_E_NOTSUP;
    goto out;
  }
  /* Pooling: the configuration's, or the file's (GGUF numbers 1 mean, 2 cls, 3 last). */
  uint32_t pt = 1;
  snprintf(key, sizeof key, "%s.pooling_type", m->arch);
  (void)weir_gguf_get_u32(m->gguf, key, &pt);
  if (!strcmp(pooling, "mean")) pt = 1;
  else if (!strcmp(pooling, "cls")) pt = 2;
  else if (!strcmp(pooling, "last")) pt = 3;
  if (pt < 1 || pt > 3) {
    snprintf(err, errlen, "%s: %s is %u (none or rank); set embedding.pooling to mean, cls or "
             "last", path, key, pt);
    rc = WEIR_E_NOTSUP;
    goto out;
  }
  m->pooling = (int)pt - 1;
out:
  return rc;
}

static int check_device(weir_bert *m, const weir_plugin *dp, char *err, size_t errlen) {
  const weir_device_ops *d = m->dev;
  const struct {
    int present;
    const char *name;
  } need[] = {
      {WEIR_HAS_FIELD(d, weir_device_ops, layer_norm) && d->layer_norm != NULL, "layer_norm"},
      {WEIR_HAS_FIELD(d, weir_device_ops, attention_full) && d->attention_full != NULL, "attention_full"},
      {m->nomic || (WEIR_HAS_FIELD(d, weir_device_ops, gelu) && d->gelu != NULL), "gelu"},
  };
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!need[i].present) {
      snprintf(err, errlen, "the %s embedding model needs the device op %s (ABI 1.6); device "
               "plugin '%s' (built for ABI 1.%u) does not implement it", m->arch, need[i].name,
               dp->desc->name, (unsigned)dp->desc->abi_minor);
      return WEIR_E_NOTSUP;
    }
  return WEIR_OK;
}

static int load_layer(weir_bert *m, int l, char *err, size_t errlen) {
  bert_layer *L = &m->layers[l];
  const int64_t E = m->n_embd, KV = (int64_t)m->n_head_kv * m->head_dim, F = m->n_ff;
  char n[96];
  int rc;
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), n)
  if (m->nomic) {
    if (rows_of(m, NAME("attn_qkv.weight")) != E + 2 * KV) {
      snprintf(err, errlen, "%s: %s must have %lld rows", weir_gguf_path(m->gguf), n,
               (long long)(E + 2 * KV));
      rc = WEIR_E_FORMAT;
      goto out;
    }
    TRY(pack(m, NAME("attn_qkv.weight"), E, 0, E, &L->wq, err, errlen));
    TRY(pack(m, NAME("attn_qkv.weight"), E, E, KV, &L->wk, err, errlen));
    TRY(pack(m, NAME("attn_qkv.weight"), E, E + KV, KV, &L->wv, err, errlen));
    TRY(pack(m, NAME("ffn_gate.weight"), E, -1, -1, &L->w_gate, err, errlen));
  } else {
    TRY(pack(m, NAME("attn_q.weight"), E, -1, -1, &L->wq, err, errlen));
    TRY(pack(m, NAME("attn_k.weight"), E, -1, -1, &L->wk, err, errlen));
    TRY(pack(m, NAME("attn_v.weight"), E, -1, -1, &L->wv, err, errlen));
    TRY(upload_vec(m, NAME("attn_q.bias"), 0, E, &L->bq, err, errlen));
    TRY(upload_vec(m, NAME("attn_k.bias"), 0, KV, &L->bk, err, errlen));
    TRY(upload_vec(m, NAME("attn_v.bias"), 0, KV, &L->bv, err, errlen));
    TRY(upload_vec(m, NAME("attn_output.bias"), 0, E, &L->bo, err, errlen));
    TRY(upload_vec(m, NAME("ffn_up.bias"), 0, F, &L->b_up, err, errlen));
    TRY(upload_vec(m, NAME("ffn_down.bias"), 0, E, &L->b_down, err, errlen));
  }
  if (rows_of(m, NAME("attn_q.weight")) >= 0 && m->nomic) {
    snprintf(err, errlen, "%s: a nomic-bert file with separate Q/K/V", weir_gguf_path(m->gguf));
    rc = WEIR_E_FORMAT;
    goto out;
  }
  TRY(pack(m, NAME("attn_output.weight"), E, -1, -1, &L->wo, err, errlen));
  TRY(pack(m, NAME("ffn_up.weight"), E, -1, -1, &L->w_up, err, errlen));
  TRY(pack(m, NAME("ffn_down.weight"), F, -1, -1, &L->w_down, err, errlen));
  if (rows_of(m, NAME("ffn_up.weight")) != F || rows_of(m, NAME("ffn_down.weight")) != E ||
      rows_of(m, NAME("attn_output.weight")) != E ||
      (!m->nomic && (rows_of(m, NAME("attn_q.weight")) != E ||
                     rows_of(m, NAME("attn_k.weight")) != KV ||
                     rows_of(m, NAME("attn_v.weight")) != KV)) ||
      (m->nomic && rows_of(m, NAME("ffn_gate.weight")) != F)) {
    snprintf(err, errlen, "%s: block %d's projections do not have the widths the metadata says",
             weir_gguf_path(m->gguf), l);
    rc = WEIR_E_FORMAT;
    goto out;
  }
  TRY(upload_vec(m, NAME("attn_output_norm.weight"), 0, E, &L->attn_norm_w, err, errlen));
  TRY(upload_vec(m, NAME("attn_output_norm.bias"), 0, E, &L->attn_norm_b, err, errlen));
  TRY(upload_vec(m, NAME("layer_output_norm.weight"), 0, E, &L->out_norm_w, err, errlen));
  TRY(upload_vec(m, NAME("layer_output_norm.bias"), 0, E, &L->out_norm_b, err, errlen));
#undef NAME
out:
  return rc;
}

static int alloc_buffers(weir_bert *m) {
  const size_t T = (size_t)m->n_ctx, E = (size_t)m->n_embd, F = (size_t)m->n_ff;
  const size_t KV = (size_t)m->n_head_kv * (size_t)m->head_dim;
  int rc;
  TRY(dev_alloc(m, T * E * 4, (void **)&m->x));
  TRY(dev_alloc(m, T * E * 4, (void **)&m->h));
  TRY(dev_alloc(m, T * E * 4, (void **)&m->q));
  TRY(dev_alloc(m, T * KV * 4, (void **)&m->k));
  TRY(dev_alloc(m, T * KV * 4, (void **)&m->v));
  TRY(dev_alloc(m, T * E * 4, (void **)&m->o));
  TRY(dev_alloc(m, T * F * 4, (void **)&m->up));
  if (m->nomic) TRY(dev_alloc(m, T * F * 4, (void **)&m->gate));
  TRY(dev_alloc(m, T * 4, (void **)&m->d_tokens));
  TRY(dev_alloc(m, T * 4, (void **)&m->d_positions));
  int32_t *pos = malloc(T * 4);
  if (!(m->host_rows = malloc(T * E * 4)) || !pos) {
    free(pos);
    return WEIR_E_NOMEM;
  }
  for (size_t i = 0; i < T; i++) pos[i] = (int32_t)i;
  rc = m->dev->copy_h2d(m->dev_self, m->d_positions, pos, T * 4);
  if (rc == WEIR_OK) rc = m->dev->synchronize(m->dev_self);
  free(pos);
out:
  return rc;
}

int weir_bert_load(const char *path, const weir_plugin_set *plugins, const char *pooling,
                   weir_bert **out, char *err, size_t errlen) {
  int rc;
  *out = NULL;
  weir_bert *m = calloc(1, sizeof *m);
  if (!m) return WEIR_E_NOMEM;
  m->dev = plugins->device->ops;
  m->dev_self = plugins->device->self;
  m->quant = plugins->quant->ops;
  m->quant_self = plugins->quant->self;
  TRY(weir_gguf_open(path, &m->gguf, err, errlen));
  weir_gguf_str a;
  if (weir_gguf_get_str(m->gguf, "general.architecture", &a) != WEIR_OK ||
      !((a.len == 4 && !memcmp(a.ptr, "bert", 4)) ||
        (a.len == 10 && !memcmp(a.ptr, "nomic-bert", 10)))) {
    snprintf(err, errlen, "%s: general.architecture is \"%.*s\"; an embedding model must be "
             "bert or nomic-bert", path, (int)(a.len < 32 ? a.len : 32), a.ptr ? a.ptr : "");
    rc = WEIR_E_NOTSUP;
    goto out;
  }
  memcpy(m->arch, a.ptr, (size_t)a.len);
  m->nomic = a.len == 10;
  TRY(check_device(m, plugins->device, err, errlen));
  TRY(read_hparams(m, pooling ? pooling : "auto", err, errlen));
  weir_gguf_str gname;
  if (weir_gguf_get_str(m->gguf, "general.name", &gname) == WEIR_OK && gname.len > 0 &&
      !memchr(gname.ptr, 0, (size_t)gname.len)) {
    m->name = strndup(gname.ptr, (size_t)gname.len);
  } else {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    m->name = strndup(base, dot && dot != base ? (size_t)(dot - base) : strlen(base));
  }
  if (!m->name) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  TRY(weir_tokenizer_from_gguf(m->gguf, &m->tok, err, errlen));
  if (weir_tokenizer_get_type(m->tok) != WEIR_TOKENIZER_BERT) {
    snprintf(err, errlen, "%s: an embedding model needs a WordPiece tokenizer "
             "(tokenizer.ggml.model \"bert\")", path);
    rc = WEIR_E_NOTSUP;
    goto out;
  }
  const int64_t E = m->n_embd;
  m->n_vocab = (int32_t)rows_of(m, "token_embd.weight");
  if (m->n_vocab < weir_tokenizer_n_tokens(m->tok)) {
    snprintf(err, errlen, "%s: token_embd.weight has %d rows for %d tokens", path, m->n_vocab,
             weir_tokenizer_n_tokens(m->tok));
    rc = WEIR_E_FORMAT;
    goto out;
  }
  TRY(pack(m, "token_embd.weight", E, -1, -1, &m->tok_embd, err, errlen));
  if (!m->nomic) {
    if (rows_of(m, "position_embd.weight") < m->n_ctx) {
      snprintf(err, errlen, "%s: position_embd.weight must have context_length (%d) rows",
               path, m->n_ctx);
      rc = WEIR_E_FORMAT;
      goto out;
    }
    TRY(pack(m, "position_embd.weight", E, 0, m->n_ctx, &m->pos_embd, err, errlen));
  }
  /* Every input is one segment: token type 0 ("sentence A"). */
  TRY(upload_vec(m, "token_types.weight", 0, E, &m->type0, err, errlen));
  TRY(upload_vec(m, "token_embd_norm.weight", 0, E, &m->emb_norm_w, err, errlen));
  TRY(upload_vec(m, "token_embd_norm.bias", 0, E, &m->emb_norm_b, err, errlen));
  if (!(m->layers = calloc((size_t)m->n_layer, sizeof *m->layers))) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  for (int l = 0; l < m->n_layer; l++) TRY(load_layer(m, l, err, errlen));
  TRY(alloc_buffers(m));
  *out = m;
  return WEIR_OK;
out:
  weir_bert_destroy(m);
  return rc;
}

void weir_bert_destroy(weir_bert *m) {
  if (!m) return;
  const weir_quant_ops *qo = m->quant;
  for (int l = 0; m->layers && l < m->n_layer; l++) {
    bert_layer *L = &m->layers[l];
    void *w[] = {L->wq, L->wk, L->wv, L->wo, L->w_up, L->w_gate, L->w_down};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
      if (w[i]) qo->release(m->quant_self, w[i]);
    float *v[] = {L->bq, L->bk, L->bv, L->bo, L->b_up, L->b_down, L->attn_norm_w,
                  L->attn_norm_b, L->out_norm_w, L->out_norm_b};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) dev_free(m, v[i]);
  }
  free(m->layers);
  if (m->tok_embd) qo->release(m->quant_self, m->tok_embd);
  if (m->pos_embd) qo->release(m->quant_self, m->pos_embd);
  float *bufs[] = {m->type0, m->emb_norm_w, m->emb_norm_b, m->x, m->h, m->q, m->k, m->v, m->o,
                   m->up, m->gate};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(m, bufs[i]);
  dev_free(m, m->d_tokens);
  dev_free(m, m->d_positions);
  free(m->host_rows);
  weir_tokenizer_free(m->tok);
  weir_gguf_close(m->gguf);
  free(m->name);
  free(m);
}

/* The pass over T tokens (uploaded): m->x holds the last hidden states. */
static int forward(weir_bert *m, int64_t T) {
  const weir_device_ops *d = m->dev;
  void *ds = m->dev_self;
  const weir_quant_ops *qo = m->quant;
  void *qs = m->quant_self;
  const int64_t E = m->n_embd, KV = (int64_t)m->n_head_kv * m->head_dim, F = m->n_ff;
  const float scale = 1.0f / sqrtf((float)m->head_dim);
  int rc;
  TRY(qo->embed(qs, m->tok_embd, m->d_tokens, m->x, T));
  TRY(d->add_bias(ds, m->x, m->type0, T, E));
  if (!m->nomic) {
    TRY(qo->embed(qs, m->pos_embd, m->d_positions, m->h, T));
    TRY(d->add(ds, m->x, m->x, m->h, T * E));
  }
  TRY(d->layer_norm(ds, m->x, m->x, m->emb_norm_w, m->emb_norm_b, T, E, m->eps));
  for (int l = 0; l < m->n_layer; l++) {
    const bert_layer *L = &m->layers[l];
    { /* q, k, v read one input: one grouped matmul (ABI 1.7) when the plugin has it */
      const void *wqkv[3] = {L->wq, L->wk, L->wv};
      float *yqkv[3] = {m->q, m->k, m->v};
      TRY(weir_llama_matmul_group(qo, qs, wqkv, 3, m->x, yqkv, T));
    }
    if (m->nomic) {
      TRY(d->rope(ds, m->q, m->d_positions, T, m->n_head, m->head_dim, m->head_dim,
                  m->rope_base, 1.0f, WEIR_ROPE_NEOX));
      TRY(d->rope(ds, m->k, m->d_positions, T, m->n_head_kv, m->head_dim, m->head_dim,
                  m->rope_base, 1.0f, WEIR_ROPE_NEOX));
    } else {
      TRY(d->add_bias(ds, m->q, L->bq, T, E));
      TRY(d->add_bias(ds, m->k, L->bk, T, KV));
      TRY(d->add_bias(ds, m->v, L->bv, T, KV));
    }
    TRY(d->attention_full(ds, m->o, m->q, m->k, m->v, T, m->n_head, m->n_head_kv, m->head_dim,
                          scale));
    TRY(qo->matmul(qs, L->wo, m->o, m->h, T));
    if (L->bo) TRY(d->add_bias(ds, m->h, L->bo, T, E));
    TRY(d->add(ds, m->x, m->x, m->h, T * E));
    TRY(d->layer_norm(ds, m->x, m->x, L->attn_norm_w, L->attn_norm_b, T, E, m->eps));
    TRY(qo->matmul(qs, L->w_up, m->x, m->up, T));
    if (m->nomic) {
      TRY(qo->matmul(qs, L->w_gate, m->x, m->gate, T));
      TRY(d->swiglu(ds, m->up, m->gate, m->up, T * F));
    } else {
      TRY(d->add_bias(ds, m->up, L->b_up, T, F));
      TRY(d->gelu(ds, m->up, m->up, T * F));
    }
    TRY(qo->matmul(qs, L->w_down, m->up, m->h, T));
    if (L->b_down) TRY(d->add_bias(ds, m->h, L->b_down, T, E));
    TRY(d->add(ds, m->x, m->x, m->h, T * E));
    TRY(d->layer_norm(ds, m->x, m->x, L->out_norm_w, L->out_norm_b, T, E, m->eps));
  }
out:
  return rc;
}

int weir_bert_embed(weir_bert *m, const int32_t *ids, int32_t n, float *out, char *err,
                    size_t errlen) {
  if (n < 1 || n > m->n_ctx) {
    snprintf(err, errlen, "an input of %d tokens (the embedding model takes 1 to %d)", (int)n,
             (int)m->n_ctx);
    return WEIR_E_RANGE;
  }
  for (int32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->n_vocab) {
      snprintf(err, errlen, "token id %d is outside the vocabulary [0, %d)", (int)ids[i],
               (int)m->n_vocab);
      return WEIR_E_RANGE;
    }
  const int64_t E = m->n_embd;
  int rc;
  TRY(m->dev->copy_h2d(m->dev_self, m->d_tokens, ids, sizeof(int32_t) * (size_t)n));
  TRY(forward(m, n));
  /* Pooling reads the rows on the host, in double, like the served model's (engine_embed.c). */
  const int64_t r0 = m->pooling == 2 ? n - 1 : 0, rows = m->pooling == 0 ? n : 1;
  TRY(m->dev->copy_d2h(m->dev_self, m->host_rows, m->x + r0 * E,
                       sizeof(float) * (size_t)(rows * E)));
  for (int64_t i = 0; i < E; i++) {
    double s = 0;
    for (int64_t r = 0; r < rows; r++) s += m->host_rows[r * E + i];
    out[i] = (float)(s / (double)rows);
  }
out:
  if (rc != WEIR_OK && errlen && !err[0])
    snprintf(err, errlen, "the embedding model's forward pass failed: %s", weir_strerror(rc));
  return rc;
}

const weir_tokenizer *weir_bert_tokenizer(const weir_bert *m) { return m->tok; }
const char *weir_bert_name(const weir_bert *m) { return m->name; }
const char *weir_bert_pooling(const weir_bert *m) {
  static const char *const names[] = {"mean", "cls", "last"};
  return names[m->pooling];
}
const char *weir_bert_arch(const weir_bert *m) { return m->arch; }
int32_t weir_bert_dim(const weir_bert *m) { return m->n_embd; }
int32_t weir_bert_vocab(const weir_bert *m) { return m->n_vocab; }
int32_t weir_bert_context(const weir_bert *m) { return m->n_ctx; }
