#include "model/llama.h"

#include "model/llama_pack.h"
#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/loader.h"
#include "util/log.h"
#include "util/progress.h"
#include "weir/attention.h"
#include "weir/device.h"
#include "weir/numeric.h"
#include "weir/quant.h"

/* Decode batch sizes a step graph is recorded for, up to step_graph_max_batch: a step of S
 * sequences runs as the next size's graph. Powers of two, with the halves between them from
 * 16 on, keep the padding under a third of a step beyond 16 sequences. */
static const int32_t k_graph_sizes[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
                                        384, 512, 768, 1024};
#define MAX_GRAPH_SIZES ((int)(sizeof k_graph_sizes / sizeof k_graph_sizes[0]) + 1)

enum { GRAPH_NONE = 0, GRAPH_WARM, GRAPH_READY, GRAPH_BROKEN };

typedef struct llama_layer {
  float *attn_norm, *ffn_norm;       /* device f32 [dim] */
  float *bq, *bk, *bv;               /* device f32 biases (qwen2) or NULL */
  float *q_norm, *k_norm;            /* device f32 [head_dim] (qwen3, gemma3) or NULL */
  float *post_attn_norm, *post_ffn_norm; /* device f32 [dim] (gemma) or NULL */
  weir_attn_layer_params ap;         /* window, soft-cap, scale (forward_layer) */
  int slides;                        /* a sliding-window layer (its own RoPE base) */
  void *wq, *wk, *wv, *wo;           /* quant plugin handles */
  void *w_gate, *w_up, *w_down;
} llama_layer;

struct weir_llama {
  weir_llama_hparams hp;
  weir_llama_opts opts;
  const weir_device_ops *dev;
  void *dev_self;
  const weir_quant_ops *quant;
  void *quant_self;
  const weir_plugin *quant_plugin; /* for the message of a failed pack (set_error) */
  const weir_attention_ops *attn;
  void *attn_self;
  const weir_attn_shape *shape; /* the pool's, for kv_group */
  weir_kv_pool *kv;
  int32_t kv_group;

  void *tok_embd;   /* quant handle */
  void *output;     /* quant handle; == tok_embd when tied */
  void *head;       /* quant handle of output's first head_vocab rows, or NULL (opts.head_vocab) */
  int32_t head_vocab; /* the width of a row of logits: n_vocab, or opts.head_vocab */
  float *out_norm;  /* device f32 [dim] */
  llama_layer *layers;
  size_t weight_bytes;

  int32_t max_blocks_per_seq; /* the pool's block-table stride */

  /* Model families. RoPE by a frequency table (rope_freqs device op) when the file scales
   * frequencies beyond linear: one table for global layers, one for sliding ones. */
  float *inv_freq, *inv_freq_swa; /* device f32 [n_rot / 2], or NULL: plain rope */
  float rope_mscale;
  int layer_params;               /* some layer needs forward_layer (window or soft-cap) */

  /* Activations, device f32, sized for max_num_tokens rows. */
  float *x, *h, *q, *k, *v, *o, *gate, *up, *sel, *logits;
  /* Step metadata on the device. */
  int32_t *d_tokens, *d_positions, *d_qsl, *d_ctx, *d_block_tables, *d_slots, *d_rows;

  /* Calibration tap (weir_llama_set_tap), or NULL. */
  weir_llama_tap_fn tap;
  void *tap_user;

  /* Step graphs: the padded batch sizes, each shape's state, and host arrays that hold a
   * batch padded to one of them (block tables at the pool's full stride, so that every
   * pointer and size a recorded step uses is the same at replay). */
  int num_graph_sizes;
  int32_t graph_size[MAX_GRAPH_SIZES];
  int32_t graph_max_rows;   /* tokens per sequence a graph covers (opts.step_graph_max_rows) */
  int32_t graph_max_tokens; /* tokens of the largest padded step (the padding arrays' size) */
  int graph_emulate;        /* weir_llama_set_graph_emulation */
  int graph_dev;            /* the device records graphs (graphs_setup without emulate) */
  /* per shape: batch size index, tokens per sequence - 1, rows mode (see graph_shape) */
  uint8_t graph_state[MAX_GRAPH_SIZES * WEIR_LLAMA_GRAPH_MAX_ROWS * 2];
  uint64_t graph_key_base;
  unsigned attn_abi_minor, quant_abi_minor; /* what the plugins were built against */
  int32_t *pad; /* one allocation: tokens, positions, qsl, ctx, slots, rows, block tables */
  int hidden_only; /* this step stops at the final norm (weir_llama_forward_hidden) */
  weir_llama_graph_stats graph_stats;
};

#define TAP(layer, site, x, rows, dim) \
  do { if (m->tap) m->tap(m->tap_user, (layer), (site), (x), (rows), (dim)); } while (0)

#define TRY(expr)              \
  do {                         \
    rc = (expr);               \
    if (rc != WEIR_OK) goto out; \
  } while (0)

static int dev_alloc(weir_llama *m, size_t bytes, void **p) {
  *p = NULL;
  return m->dev->alloc(m->dev_self, bytes ? bytes : 1, p);
}

static void dev_free(weir_llama *m, void *p) {
  if (p) m->dev->free(m->dev_self, p);
}

/* Uploads a small F32/F16/BF16 vector (norm weight or bias) as f32 on the device. */
static int upload_vector(weir_llama *m, const weir_gguf *g, const char *name, int64_t n,
                         float **out, char *err, size_t errlen) {
  int rc = weir__model_upload_f32(m->dev, m->dev_self, g, name, 0, n, 1, out, err, errlen);
  if (rc == WEIR_OK) m->weight_bytes += sizeof(float) * (size_t)n;
  return rc;
}

/* Packs rows [row0, row0 + rows) of a weight (all of it: rows < 0) as a matrix of its own:
 * a fused weight (phi3's attn_qkv, ffn_up) is packed as one matrix per slice. */
static int pack_rows(weir_llama *m, const weir_gguf *g, const char *name, int64_t row0,
                     int64_t rows, void **out, char *err, size_t errlen) {
  int rc = weir__model_pack_rows(m->quant, m->quant_self, g, name, 0, row0, rows, out, err,
                                 errlen);
  if (rc != WEIR_OK) {
    weir_plugin_append_error(m->quant_plugin, err, errlen);
    return rc;
  }
  m->weight_bytes += m->quant->weight_bytes(m->quant_self, *out);
  return WEIR_OK;
}

static int pack_weight(weir_llama *m, const weir_gguf *g, const char *name, void **out,
                       char *err, size_t errlen) {
  return pack_rows(m, g, name, 0, -1, out, err, errlen);
}

/* Packs the weights of one input site of block `layer` (suffixes of blk.N.) through
 * weir_llama_pack_group, with that site's samples when the options carry some. */
static int pack_site(weir_llama *m, const weir_gguf *g, int layer, weir_llama_site site,
                     const char *const *suffixes, int n, void **out, char *err, size_t errlen) {
  int64_t ns = 0;
  const float *samples =
      m->opts.samples ? m->opts.samples(m->opts.samples_user, layer, site, &ns) : NULL;
  int rc = weir_llama_pack_group(m->quant, m->quant_self, g, &m->hp, layer, site, suffixes, n,
                                 samples, ns, out, err, errlen);
  if (rc != WEIR_OK) weir_plugin_append_error(m->quant_plugin, err, errlen);
  for (int i = 0; rc == WEIR_OK && i < n; i++)
    m->weight_bytes += m->quant->weight_bytes(m->quant_self, out[i]);
  return rc;
}

/* Packs rows ids[0..n) of a weight, in that order, as a matrix of its own (copied into one
 * buffer first: the quant plugin packs from contiguous rows). */
static int pack_gather(weir_llama *m, const weir_gguf *g, const char *name, const int32_t *ids,
                       int32_t n, void **out, char *err, size_t errlen) {
  const weir_gguf_tensor *t = weir_gguf_find_tensor(g, name);
  if (!t || t->t.ndim != 2) {
    snprintf(err, errlen, "%s: tensor %s is missing or not a matrix", weir_gguf_path(g), name);
    return WEIR_E_FORMAT;
  }
  const size_t rb = t->t.nb[1];
  uint8_t *rows = malloc(rb * (size_t)n);
  if (!rows) return WEIR_E_NOMEM;
  for (int32_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->t.ne[1]) {
      snprintf(err, errlen, "%s: head row %d of %s is out of range", weir_gguf_path(g),
               (int)ids[i], name);
      free(rows);
      return WEIR_E_RANGE;
    }
    memcpy(rows + rb * (size_t)i, (const uint8_t *)t->t.data + rb * (size_t)ids[i], rb);
  }
  weir_tensor view = t->t;
  view.data = rows;
  view.ne[1] = n;
  for (int d = 2; d < WEIR_MAX_DIMS; d++) view.nb[d] = view.nb[1] * (size_t)n;
  weir_quant_pack_args args = {.struct_size = sizeof args, .src = &view, .name = name};
  int rc = m->quant->pack(m->quant_self, &args, out);
  free(rows);
  if (rc != WEIR_OK) {
    snprintf(err, errlen, "%s: the quant plugin could not pack %d gathered rows of %s: %s",
             weir_gguf_path(g), (int)n, name, weir_strerror(rc));
    return rc;
  }
  m->weight_bytes += m->quant->weight_bytes(m->quant_self, *out);
  return WEIR_OK;
}

static int load_layer(weir_llama *m, const weir_gguf *g, int l, char *err, size_t errlen) {
  llama_layer *L = &m->layers[l];
  const weir_llama_hparams *hp = &m->hp;
  char nm[96];
  int rc;
  const int64_t dim = hp->n_embd, kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
  const int64_t qd = (int64_t)hp->n_head * hp->head_dim;
#define BLK(suffix) weir_gguf_blk_name(nm, sizeof nm, l, suffix)
  TRY(upload_vector(m, g, BLK("attn_norm.weight"), dim, &L->attn_norm, err, errlen));
  TRY(upload_vector(m, g, BLK("ffn_norm.weight"), dim, &L->ffn_norm, err, errlen));
  if (hp->has_qkv_bias) {
    TRY(upload_vector(m, g, BLK("attn_q.bias"), qd, &L->bq, err, errlen));
    TRY(upload_vector(m, g, BLK("attn_k.bias"), kv_dim, &L->bk, err, errlen));
    TRY(upload_vector(m, g, BLK("attn_v.bias"), kv_dim, &L->bv, err, errlen));
  }
  if (hp->has_qk_norm) {
    TRY(upload_vector(m, g, BLK("attn_q_norm.weight"), hp->head_dim, &L->q_norm, err, errlen));
    TRY(upload_vector(m, g, BLK("attn_k_norm.weight"), hp->head_dim, &L->k_norm, err, errlen));
  }
  if (hp->has_post_norms) {
    TRY(upload_vector(m, g, BLK("post_attention_norm.weight"), dim, &L->post_attn_norm, err,
                      errlen));
    TRY(upload_vector(m, g, BLK("post_ffw_norm.weight"), dim, &L->post_ffn_norm, err, errlen));
  }
  L->slides = weir_llama_layer_slides(hp, l);
  L->ap = (weir_attn_layer_params){.struct_size = sizeof L->ap,
                                   .window = L->slides ? hp->n_swa : 0,
                                   .softcap = hp->attn_softcap,
                                   .scale = hp->attn_scale};
  if (L->ap.window > 0 || L->ap.softcap > 0.0f) m->layer_params = 1;
  /* Weights that read the same input are packed together (an activation-aware scheme gives
   * them one input scale), each with the calibration samples of its input when there are. */
  const char *qkv[3] = {"attn_q.weight", "attn_k.weight", "attn_v.weight"};
  const char *gate_up[2] = {"ffn_gate.weight", "ffn_up.weight"};
  void *out_qkv[3] = {0}, *out_gu[2] = {0};
  if (hp->fused_qkv) {
    TRY(pack_rows(m, g, BLK("attn_qkv.weight"), 0, qd, &L->wq, err, errlen));
    TRY(pack_rows(m, g, BLK("attn_qkv.weight"), qd, kv_dim, &L->wk, err, errlen));
    TRY(pack_rows(m, g, BLK("attn_qkv.weight"), qd + kv_dim, kv_dim, &L->wv, err, errlen));
  } else {
    TRY(pack_site(m, g, l, WEIR_LLAMA_SITE_ATTN_IN, qkv, 3, out_qkv, err, errlen));
    L->wq = out_qkv[0];
    L->wk = out_qkv[1];
    L->wv = out_qkv[2];
  }
  const char *o[1] = {"attn_output.weight"};
  TRY(pack_site(m, g, l, WEIR_LLAMA_SITE_ATTN_OUT, o, 1, &L->wo, err, errlen));
  if (hp->fused_gate_up) {
    TRY(pack_rows(m, g, BLK("ffn_up.weight"), 0, hp->n_ff, &L->w_gate, err, errlen));
    TRY(pack_rows(m, g, BLK("ffn_up.weight"), hp->n_ff, hp->n_ff, &L->w_up, err, errlen));
  } else {
    TRY(pack_site(m, g, l, WEIR_LLAMA_SITE_FFN_IN, gate_up, 2, out_gu, err, errlen));
    L->w_gate = out_gu[0];
    L->w_up = out_gu[1];
  }
  const char *down[1] = {"ffn_down.weight"};
  TRY(pack_site(m, g, l, WEIR_LLAMA_SITE_FFN_MID, down, 1, &L->w_down, err, errlen));
#undef BLK
out:
  return rc;
}

static int alloc_buffers(weir_llama *m) {
  const size_t T = (size_t)m->opts.max_num_tokens, R = (size_t)m->opts.max_logit_rows;
  const size_t S = (size_t)m->opts.max_num_seqs;
  const size_t dim = (size_t)m->hp.n_embd, qd = (size_t)m->hp.n_head * (size_t)m->hp.head_dim;
  const size_t kvd = (size_t)m->hp.n_head_kv * (size_t)m->hp.head_dim, ff = (size_t)m->hp.n_ff;
  int rc;
  TRY(dev_alloc(m, T * dim * 4, (void **)&m->x));
  TRY(dev_alloc(m, T * (dim > qd ? dim : qd) * 4, (void **)&m->h));
  TRY(dev_alloc(m, T * qd * 4, (void **)&m->q));
  TRY(dev_alloc(m, T * kvd * 4, (void **)&m->k));
  TRY(dev_alloc(m, T * kvd * 4, (void **)&m->v));
  TRY(dev_alloc(m, T * qd * 4, (void **)&m->o));
  TRY(dev_alloc(m, T * ff * 4, (void **)&m->gate));
  TRY(dev_alloc(m, T * ff * 4, (void **)&m->up));
  TRY(dev_alloc(m, R * dim * 4, (void **)&m->sel));
  TRY(dev_alloc(m, R * (size_t)m->hp.n_vocab * 4, (void **)&m->logits));
  TRY(dev_alloc(m, T * 4, (void **)&m->d_tokens));
  TRY(dev_alloc(m, T * 4, (void **)&m->d_positions));
  TRY(dev_alloc(m, (S + 1) * 4, (void **)&m->d_qsl));
  TRY(dev_alloc(m, S * 4, (void **)&m->d_ctx));
  TRY(dev_alloc(m, S * (size_t)m->max_blocks_per_seq * 4, (void **)&m->d_block_tables));
  TRY(dev_alloc(m, T * 4, (void **)&m->d_slots));
  TRY(dev_alloc(m, R * 4, (void **)&m->d_rows));
out:
  return rc;
}

/* Decides the step-graph shapes and allocates the padding arrays; graphs stay off when the
 * options or the device plugin say so (emulate: whatever the device, for
 * weir_llama_set_graph_emulation, which answers NOTSUP where graphs are off by option). */
static int graphs_setup(weir_llama *m, int emulate) {
  const weir_device_ops *d = m->dev;
  int32_t g = m->opts.step_graph_max_batch;
  if (g <= 0) return emulate ? WEIR_E_NOTSUP : WEIR_OK;
  if (!emulate && (!WEIR_HAS_FIELD(d, weir_device_ops, graph_reset) || !d->graph_begin ||
                   !d->graph_end || !d->graph_launch || !d->graph_reset))
    return WEIR_OK;
  /* A replay reuses the recorded pointers: only plugins that promise (ABI 1.4) to keep the
   * device memory of their step operations until fini may take part. */
  if (m->attn_abi_minor < 4 || m->quant_abi_minor < 4) {
    weir_log(WEIR_LOG_INFO, "model",
             "step graphs off: the attention or quant plugin predates ABI 1.4 (built for "
             "1.%u / 1.%u)", m->attn_abi_minor, m->quant_abi_minor);
    return emulate ? WEIR_E_NOTSUP : WEIR_OK;
  }
  if (g > m->opts.max_num_seqs) g = m->opts.max_num_seqs;
  if (g > m->opts.max_num_tokens) g = m->opts.max_num_tokens;
  if (g > m->opts.max_logit_rows) g = m->opts.max_logit_rows;
  int32_t r = m->opts.step_graph_max_rows;
  if (r < 1) r = 1;
  if (r > WEIR_LLAMA_GRAPH_MAX_ROWS) r = WEIR_LLAMA_GRAPH_MAX_ROWS;
  int64_t tmax = (int64_t)g * r;
  if (tmax > m->opts.max_num_tokens) tmax = m->opts.max_num_tokens;
  /* tokens, positions, slots, rows (a padded step has at most one row per token), then
   * query_start_loc, context lengths and block tables */
  const size_t n = 4 * (size_t)tmax + 2 * (size_t)g + 1 + (size_t)g * (size_t)m->max_blocks_per_seq;
  int32_t *pad = calloc(n, sizeof(int32_t));
  if (!pad) return WEIR_E_NOMEM;
  m->pad = pad;
  m->graph_max_rows = r;
  m->graph_max_tokens = (int32_t)tmax;
  m->num_graph_sizes = 0;
  for (int i = 0; i < MAX_GRAPH_SIZES - 1 && k_graph_sizes[i] < g; i++)
    m->graph_size[m->num_graph_sizes++] = k_graph_sizes[i];
  m->graph_size[m->num_graph_sizes++] = g;
  /* Keys are per model: a draft model shares the device and records its own graphs. */
  static uint64_t next_base;
  m->graph_key_base = __atomic_add_fetch(&next_base, (uint64_t)1 << 32, __ATOMIC_RELAXED);
  m->graph_dev = !emulate;
  return WEIR_OK;
}

int weir_llama_set_graph_emulation(weir_llama *m, int on) {
  if (!on) {
    m->graph_emulate = 0;
    return WEIR_OK;
  }
  if (!m->num_graph_sizes) {
    int rc = graphs_setup(m, 1);
    if (rc != WEIR_OK) return rc;
  }
  m->graph_emulate = 1;
  return WEIR_OK;
}

void weir_llama_attn_shape(const weir_llama_hparams *hp, weir_attn_shape *out) {
  *out = (weir_attn_shape){.struct_size = sizeof *out,
                           .n_layers = hp->n_layer,
                           .n_heads = hp->n_head,
                           .n_kv_heads = hp->n_head_kv,
                           .head_dim = hp->head_dim,
                           .scale = hp->attn_scale > 0.0f ? hp->attn_scale
                                                          : 1.0f / sqrtf((float)hp->head_dim)};
}

/* The angle per position of RoPE pair i (i < n_rot / 2) for a global (swa 0) or sliding
 * layer, with every frequency scaling of the file folded in, and the factor the rotated values
 * are multiplied by. Sources: linear scaling divides positions by rope.scaling.factor; Llama
 * 3.1's rope_freqs and Phi-3's LongRoPE factors divide pair i's frequency by factor[i]
 * (Meta's llama3 reference apply_scaling; HF transformers Phi3 LongRoPE); YaRN blends the
 * interpolated and the original frequency by a ramp over the dimensions between the
 * correction dims of beta_fast and beta_slow, and scales by 0.1 ln(factor) + 1 (Peng et al.,
 * "YaRN", 2023, and HF transformers _compute_yarn_parameters). In double; stored as f32. */
void weir_llama_rope_table(const weir_llama_hparams *hp, int swa, const float *factors,
                           float *inv_freq, float *mscale) {
  const int half = hp->n_rot / 2;
  const double base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base;
  const double fscale = (swa && hp->rope_scale_global_only) || !(hp->rope_scale > 0.0f)
                            ? 1.0
                            : 1.0 / hp->rope_scale;
  const int yarn = hp->rope_yarn && hp->yarn_ext_factor > 0.0f && fscale < 1.0;
  double low = 0, high = 0;
  if (yarn) {
    const double nd = hp->n_rot, octx = hp->n_ctx_orig, lb = 2.0 * log(base);
    low = floor(nd * log(octx / (hp->yarn_beta_fast * 2.0 * 3.14159265358979323846)) / lb);
    high = ceil(nd * log(octx / (hp->yarn_beta_slow * 2.0 * 3.14159265358979323846)) / lb);
    if (low < 0) low = 0;
    if (high > nd - 1) high = nd - 1;
  }
  for (int i = 0; i < half; i++) {
    double extrap = pow(base, -2.0 * i / hp->n_rot);
    if (factors) extrap /= factors[i];
    double interp = fscale * extrap, f = interp;
    if (yarn) {
      double y = ((double)i - low) / (high - low > 0.001 ? high - low : 0.001);
      double mix = (1.0 - (y < 0 ? 0 : y > 1 ? 1 : y)) * hp->yarn_ext_factor;
      f = interp * (1.0 - mix) + extrap * mix;
    }
    inv_freq[i] = (float)f;
  }
  double ms = hp->rope_attn_factor > 0.0f ? hp->rope_attn_factor : 1.0;
  if (yarn) ms *= 1.0 + 0.1 * log(1.0 / fscale);
  *mscale = (float)ms;
}

/* Whether the layers' RoPE needs the frequency table (rope_freqs op) rather than plain rope. */
static int rope_needs_table(const weir_llama_hparams *hp) {
  return hp->has_rope_freqs || hp->has_longrope || hp->rope_yarn ||
         (hp->rope_attn_factor > 0.0f && hp->rope_attn_factor != 1.0f);
}

/* Uploads the RoPE frequency tables (global, and sliding when the model has such layers). */
static int setup_rope(weir_llama *m, const weir_gguf *g, char *err, size_t errlen) {
  const weir_llama_hparams *hp = &m->hp;
  m->rope_mscale = 1.0f;
  if (!rope_needs_table(hp)) return WEIR_OK;
  const int half = hp->n_rot / 2;
  float factors[WEIR_MAX_ROT / 2], table[WEIR_MAX_ROT / 2];
  const float *fp = NULL;
  const char *fname = NULL;
  if (hp->has_rope_freqs) fname = "rope_freqs.weight";
  /* LongRoPE: the long factors serve contexts beyond the original one (HF Phi-3 picks them
   * per sequence length; weir per model, by its longest sequence). */
  if (hp->has_longrope)
    fname = weir_llama_max_model_len(hp, m->opts.max_model_len) > hp->n_ctx_orig
                ? "rope_factors_long.weight"
                : "rope_factors_short.weight";
  if (fname) {
    const weir_gguf_tensor *t = weir_gguf_find_tensor(g, fname);
    if (!t || t->nelements != half ||
        weir_dequantize_row(t->t.dtype, t->t.data, factors, half) != WEIR_OK) {
      snprintf(err, errlen, "%s: tensor %s must hold %d factors", weir_gguf_path(g), fname, half);
      return WEIR_E_FORMAT;
    }
    for (int i = 0; i < half; i++)
      if (!(factors[i] > 0.0f) || factors[i] > 1e30f) {
        snprintf(err, errlen, "%s: %s[%d] = %g is not a positive factor", weir_gguf_path(g),
                 fname, i, (double)factors[i]);
        return WEIR_E_FORMAT;
      }
    fp = factors;
  }
  int rc;
  for (int swa = 0; swa < 2; swa++) {
    if (swa && hp->n_swa <= 0) break;
    float ms;
    weir_llama_rope_table(hp, swa, fp, table, &ms);
    if (!swa) m->rope_mscale = ms;
    float **dst = swa ? &m->inv_freq_swa : &m->inv_freq;
    if ((rc = dev_alloc(m, sizeof(float) * (size_t)half, (void **)dst)) != WEIR_OK ||
        (rc = m->dev->copy_h2d(m->dev_self, *dst, table, sizeof(float) * (size_t)half)) !=
            WEIR_OK ||
        (rc = m->dev->synchronize(m->dev_self)) != WEIR_OK) {
      snprintf(err, errlen, "uploading the RoPE frequency table: %s", weir_strerror(rc));
      return rc;
    }
  }
  return WEIR_OK;
}

/* Refuses, naming the plugin and what is missing, a model whose graph needs an operation
 * (ABI 1.5) the loaded plugins do not implement. */
static int check_plugin_ops(weir_llama *m, const weir_plugin_set *plugins, char *err,
                            size_t errlen) {
  const weir_llama_hparams *hp = &m->hp;
  const weir_device_ops *d = m->dev;
  struct {
    int needed, present;
    const char *op, *why;
  } need[] = {
      {rope_needs_table(hp), d->rope_freqs != NULL, "rope_freqs",
       "its RoPE frequency scaling (rope_freqs, LongRoPE or yarn)"},
      {hp->ffn_gelu, d->geglu != NULL, "geglu", "its GELU-gated feed-forward"},
      {hp->embd_scale != 1.0f, d->scale != NULL, "scale", "its embedding scaling"},
      {hp->final_softcap > 0.0f, d->softcap != NULL, "softcap", "its final logit soft-cap"},
  };
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (need[i].needed && !need[i].present) {
      snprintf(err, errlen, "the %s model needs the device operation %s (ABI 1.5) for %s; "
               "device plugin '%s' (built for ABI 1.%u) does not implement it", hp->arch_name,
               need[i].op, need[i].why, plugins->device->desc->name,
               (unsigned)plugins->device->desc->abi_minor);
      return WEIR_E_NOTSUP;
    }
  if (m->layer_params && !m->attn->forward_layer) {
    snprintf(err, errlen, "the %s model needs %s%s%s in attention; attention plugin '%s' "
             "(built for ABI 1.%u) does not implement forward_layer (ABI 1.5)", hp->arch_name,
             hp->n_swa > 0 ? "a sliding window" : "",
             hp->n_swa > 0 && hp->attn_softcap > 0.0f ? " and " : "",
             hp->attn_softcap > 0.0f ? "logit soft-capping" : "", plugins->attention->desc->name,
             m->attn_abi_minor);
    return WEIR_E_NOTSUP;
  }
  return WEIR_OK;
}

int32_t weir_llama_kv_window(const weir_llama_hparams *hp) {
  if (hp->n_swa <= 0) return 0;
  for (int l = 0; l < hp->n_layer; l++)
    if (!weir_llama_layer_slides(hp, l)) return 0;
  return hp->n_swa;
}

int32_t weir_llama_max_model_len(const weir_llama_hparams *hp, int32_t requested) {
  return requested > 0 ? requested : hp->n_ctx_train;
}

int weir_llama_create(const weir_gguf *g, const weir_plugin_set *plugins,
                      const weir_llama_opts *opts, weir_kv_pool *kv, int32_t kv_group,
                      weir_llama **out, char *err, size_t errlen) {
  int rc;
  *out = NULL;
  weir_llama *m = calloc(1, sizeof *m);
  if (!m) return WEIR_E_NOMEM;
  m->opts = *opts;
  m->dev = plugins->device->ops;
  m->dev_self = plugins->device->self;
  m->quant = plugins->quant->ops;
  m->quant_self = plugins->quant->self;
  m->quant_plugin = plugins->quant;
  m->attn = plugins->attention->ops;
  m->attn_self = plugins->attention->self;
  m->attn_abi_minor = plugins->attention->desc->abi_minor;
  m->quant_abi_minor = plugins->quant->desc->abi_minor;

  TRY(weir_gguf_llama_hparams(g, &m->hp, err, errlen));
  TRY(weir_gguf_llama_check(g, &m->hp, err, errlen));
  if (opts->max_num_tokens <= 0 || opts->max_num_seqs <= 0 || opts->max_logit_rows <= 0) {
    snprintf(err, errlen, "invalid model options (max tokens %d, seqs %d, rows %d)",
             opts->max_num_tokens, opts->max_num_seqs, opts->max_logit_rows);
    rc = WEIR_E_INVAL;
    goto out;
  }
  m->kv = kv;
  m->kv_group = kv_group;
  m->shape = weir_kv_pool_shape(kv, kv_group);
  weir_attn_shape want;
  weir_llama_attn_shape(&m->hp, &want);
  if (!m->shape || m->shape->n_layers != want.n_layers || m->shape->n_heads != want.n_heads ||
      m->shape->n_kv_heads != want.n_kv_heads || m->shape->head_dim != want.head_dim) {
    snprintf(err, errlen, "KV cache group %d does not have this model's attention shape "
             "(%d layers, %d heads, %d KV heads, head_dim %d)", (int)kv_group, m->hp.n_layer,
             m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim);
    rc = WEIR_E_INVAL;
    goto out;
  }
  m->max_blocks_per_seq = weir_kv_pool_geometry(kv)->max_blocks_per_seq;

  TRY(pack_weight(m, g, "token_embd.weight", &m->tok_embd, err, errlen));
  int64_t n_out = 0;
  const float *out_samples =
      m->opts.samples ? m->opts.samples(m->opts.samples_user, -1, WEIR_LLAMA_SITE_OUTPUT, &n_out)
                      : NULL;
  if (m->hp.has_output) {
    const char *out_name[1] = {"output.weight"};
    TRY(pack_site(m, g, -1, WEIR_LLAMA_SITE_OUTPUT, out_name, 1, &m->output, err, errlen));
  } else if (weir_llama_untie_output(g, &m->hp, out_samples, n_out)) {
    /* A tied output projection with calibration samples: packed a second time, calibrated
     * on the final norm's output. The embedding lookup keeps the uncalibrated copy: its
     * "activations" are one-hot rows, for which rounding each weight to nearest is best. */
    const char *out_name[1] = {"token_embd.weight"};
    TRY(pack_site(m, g, -1, WEIR_LLAMA_SITE_OUTPUT, out_name, 1, &m->output, err, errlen));
  } else m->output = m->tok_embd;
  m->head_vocab = m->hp.n_vocab;
  if (m->opts.head_vocab > 0 && m->opts.head_vocab < m->hp.n_vocab) {
    /* Rows of the output projection as a matrix of their own: a step's LM head then reads
     * only those. */
    const char *name = m->hp.has_output ? "output.weight" : "token_embd.weight";
    if (m->opts.head_ids)
      TRY(pack_gather(m, g, name, m->opts.head_ids, m->opts.head_vocab, &m->head, err, errlen));
    else TRY(pack_rows(m, g, name, 0, m->opts.head_vocab, &m->head, err, errlen));
    m->head_vocab = m->opts.head_vocab;
  }
  TRY(upload_vector(m, g, "output_norm.weight", m->hp.n_embd, &m->out_norm, err, errlen));
  m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
  if (!m->layers) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  if (opts->progress) weir_progress_update(opts->progress, 1);
  if ((m->hp.fused_qkv || m->hp.fused_gate_up) && m->opts.samples) {
    snprintf(err, errlen, "%s: calibrating a model with fused weights (%s) is not supported",
             weir_gguf_path(g), m->hp.arch_name);
    rc = WEIR_E_NOTSUP;
    goto out;
  }
  for (int l = 0; l < m->hp.n_layer; l++) {
    TRY(load_layer(m, g, l, err, errlen));
    if (opts->progress) weir_progress_update(opts->progress, (uint64_t)l + 2);
  }
  TRY(check_plugin_ops(m, plugins, err, errlen));
  TRY(setup_rope(m, g, err, errlen));

  rc = alloc_buffers(m);
  if (rc != WEIR_OK) {
    snprintf(err, errlen, "allocating activation buffers for %d tokens: %s",
             opts->max_num_tokens, weir_strerror(rc));
    goto out;
  }
  if ((rc = graphs_setup(m, 0)) != WEIR_OK) {
    snprintf(err, errlen, "allocating step-graph buffers: %s", weir_strerror(rc));
    goto out;
  }

  *out = m;
  return WEIR_OK;

out:
  weir_llama_destroy(m);
  return rc;
}

void weir_llama_destroy(weir_llama *m) {
  if (!m) return;
  /* The recorded graphs point into this model's buffers. Dropping them drops another model's
   * on the same device too; that one records its graphs again (graph_launch: NOTFOUND). */
  if (m->graph_stats.recorded) m->dev->graph_reset(m->dev_self);
  free(m->pad);
  if (m->layers) {
    for (int l = 0; l < m->hp.n_layer; l++) {
      llama_layer *L = &m->layers[l];
      void *w[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
      for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (w[i]) m->quant->release(m->quant_self, w[i]);
      dev_free(m, L->attn_norm);
      dev_free(m, L->ffn_norm);
      dev_free(m, L->bq);
      dev_free(m, L->bk);
      dev_free(m, L->bv);
      dev_free(m, L->q_norm);
      dev_free(m, L->k_norm);
      dev_free(m, L->post_attn_norm);
      dev_free(m, L->post_ffn_norm);
    }
    free(m->layers);
  }
  if (m->output && m->output != m->tok_embd) m->quant->release(m->quant_self, m->output);
  if (m->head) m->quant->release(m->quant_self, m->head);
  if (m->tok_embd) m->quant->release(m->quant_self, m->tok_embd);
  void *bufs[] = {m->inv_freq, m->inv_freq_swa, m->out_norm, m->x, m->h, m->q, m->k, m->v,
                  m->o, m->gate, m->up,
                  m->sel, m->logits, m->d_tokens, m->d_positions, m->d_qsl, m->d_ctx,
                  m->d_block_tables, m->d_slots, m->d_rows};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dev_free(m, bufs[i]);
  free(m);
}

const weir_llama_hparams *weir_llama_hparams_get(const weir_llama *m) { return &m->hp; }
size_t weir_llama_weight_bytes(const weir_llama *m) { return m->weight_bytes; }

static int upload(weir_llama *m, void *dst, const void *src, size_t bytes) {
  return bytes ? m->dev->copy_h2d(m->dev_self, dst, src, bytes) : WEIR_OK;
}

/* Copies a step's inputs into the fixed device buffers. */
static int upload_batch(weir_llama *m, const weir_llama_batch *b) {
  const size_t T = (size_t)b->num_tokens, S = (size_t)b->num_seqs;
  int rc;
  TRY(upload(m, m->d_tokens, b->tokens, T * 4));
  TRY(upload(m, m->d_positions, b->positions, T * 4));
  TRY(upload(m, m->d_qsl, b->query_start_loc, (S + 1) * 4));
  TRY(upload(m, m->d_ctx, b->context_lens, S * 4));
  /* Block tables are copied densely at this step's row stride. */
  TRY(upload(m, m->d_block_tables, b->block_tables, S * (size_t)b->max_blocks_per_seq * 4));
  TRY(upload(m, m->d_slots, b->slot_mapping, T * 4));
  TRY(upload(m, m->d_rows, b->logit_rows, (size_t)b->num_logit_rows * 4));
out:
  return rc;
}

/* Issues the step's operations on inputs already uploaded. plan_ctx > 0 stands in for the
 * batch's longest context in the attention plan: a recorded step passes the longest context
 * the pool holds, so its split of the KV range serves every later context length. */
static int compute(weir_llama *m, const weir_llama_batch *b, int32_t plan_ctx) {
  const int64_t T = b->num_tokens, R = b->num_logit_rows, S = b->num_seqs;
  const weir_device_ops *d = m->dev;
  void *ds = m->dev_self;
  const weir_llama_hparams *hp = &m->hp;
  const int64_t dim = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
  const int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
  const float freq_scale = hp->rope_scale > 0 ? 1.0f / hp->rope_scale : 1.0f;
  int rc;

  int32_t max_q = 0, max_ctx = 0;
  for (int64_t s = 0; s < S; s++) {
    int32_t ql = b->query_start_loc[s + 1] - b->query_start_loc[s];
    if (ql > max_q) max_q = ql;
    if (b->context_lens[s] > max_ctx) max_ctx = b->context_lens[s];
  }
  if (plan_ctx > max_ctx) max_ctx = plan_ctx;
  weir_attn_batch ab = {.struct_size = sizeof ab,
                        .num_seqs = (int32_t)S,
                        .num_tokens = (int32_t)T,
                        .query_start_loc = m->d_qsl,
                        .context_lens = m->d_ctx,
                        .block_tables = m->d_block_tables,
                        .max_blocks_per_seq = b->max_blocks_per_seq,
                        .slot_mapping = m->d_slots,
                        .max_query_len = max_q,
                        .max_context_len = max_ctx,
                        .query_start_loc_host = b->query_start_loc,
                        .context_lens_host = b->context_lens,
                        .block_tables_host = b->block_tables,
                        .slot_mapping_host = b->slot_mapping};

  TRY(m->quant->embed(m->quant_self, m->tok_embd, m->d_tokens, m->x, T));
  if (hp->embd_scale != 1.0f) TRY(d->scale(ds, m->x, hp->embd_scale, T * dim));
  /* ABI 1.7: a residual add and the RMSNorm after it in one op (one launch, one pass over
   * the residual) where the device has it; each layer's last add then also computes the next
   * layer's attention norm (attn_normed). */
  const int fused_norm = WEIR_HAS_FIELD(d, weir_device_ops, add_rms_norm) && d->add_rms_norm;
  /* ABI 1.7: RoPE fused into the attention plugin's KV write and query load (forward_rope),
   * which saves the two rope launches of every layer; only with RoPE (n_rot > 0). */
  const int fused_rope = m->attn_abi_minor >= 7 && hp->n_rot > 0 &&
                         WEIR_HAS_FIELD(m->attn, weir_attention_ops, forward_rope) &&
                         m->attn->forward_rope;
  int attn_normed = 0;
  for (int l = 0; l < hp->n_layer; l++) {
    const llama_layer *L = &m->layers[l];
    if (!attn_normed) TRY(d->rms_norm(ds, m->h, m->x, L->attn_norm, T, dim, hp->rms_eps));
    attn_normed = 0;
    TAP(l, WEIR_LLAMA_SITE_ATTN_IN, m->h, T, dim);
    { /* q, k, v read one input: one grouped matmul (ABI 1.7) when the plugin has it */
      const void *wqkv[3] = {L->wq, L->wk, L->wv};
      float *yqkv[3] = {m->q, m->k, m->v};
      TRY(weir_llama_matmul_group(m->quant, m->quant_self, wqkv, 3, m->h, yqkv, T));
    }
    if (L->bq) {
      TRY(d->add_bias(ds, m->q, L->bq, T, qd));
      TRY(d->add_bias(ds, m->k, L->bk, T, kvd));
      TRY(d->add_bias(ds, m->v, L->bv, T, kvd));
    }
    if (L->q_norm) { /* per-head RMSNorm of Q and K (qwen3, gemma3): rows of head_dim */
      TRY(d->rms_norm(ds, m->q, m->q, L->q_norm, T * hp->n_head, hp->head_dim, hp->rms_eps));
      TRY(d->rms_norm(ds, m->k, m->k, L->k_norm, T * hp->n_head_kv, hp->head_dim, hp->rms_eps));
    }
    const float *inv_freq = L->slides ? m->inv_freq_swa : m->inv_freq;
    weir_kv_view kv;
    TRY(weir_kv_pool_view(m->kv, m->kv_group, l, &kv));
    if (fused_rope) {
      /* ABI 1.7: the attention plugin rotates K as it stores it and Q as it reads it. */
      const weir_attn_rope rope = {
          .struct_size = sizeof rope,
          .positions = m->d_positions,
          .positions_host = b->positions,
          .rot_dim = hp->n_rot,
          .style = (int32_t)hp->rope_style,
          .freq_base = L->slides ? hp->rope_freq_base_swa : hp->rope_freq_base,
          .freq_scale = L->slides && hp->rope_scale_global_only ? 1.0f : freq_scale,
          .inv_freq = inv_freq,
          .mscale = m->rope_mscale};
      TRY(m->attn->forward_rope(m->attn_self, m->shape, &L->ap, &rope, &ab, &kv, m->q, m->k,
                                m->v, m->o));
    } else {
      if (inv_freq) {
        TRY(d->rope_freqs(ds, m->q, m->d_positions, T, hp->n_head, hp->head_dim, hp->n_rot,
                          inv_freq, m->rope_mscale, hp->rope_style));
        TRY(d->rope_freqs(ds, m->k, m->d_positions, T, hp->n_head_kv, hp->head_dim, hp->n_rot,
                          inv_freq, m->rope_mscale, hp->rope_style));
      } else {
        const float base = L->slides ? hp->rope_freq_base_swa : hp->rope_freq_base;
        const float fs = L->slides && hp->rope_scale_global_only ? 1.0f : freq_scale;
        TRY(d->rope(ds, m->q, m->d_positions, T, hp->n_head, hp->head_dim, hp->n_rot, base, fs,
                    hp->rope_style));
        TRY(d->rope(ds, m->k, m->d_positions, T, hp->n_head_kv, hp->head_dim, hp->n_rot, base,
                    fs, hp->rope_style));
      }
      if (m->layer_params)
        TRY(m->attn->forward_layer(m->attn_self, m->shape, &L->ap, &ab, &kv, m->q, m->k, m->v,
                                   m->o));
      else
        TRY(m->attn->forward(m->attn_self, m->shape, &ab, &kv, m->q, m->k, m->v, m->o));
    }
    TAP(l, WEIR_LLAMA_SITE_ATTN_OUT, m->o, T, qd);
    TRY(m->quant->matmul(m->quant_self, L->wo, m->o, m->h, T));
    if (L->post_attn_norm) TRY(d->rms_norm(ds, m->h, m->h, L->post_attn_norm, T, dim, hp->rms_eps));
    if (fused_norm) {
      TRY(d->add_rms_norm(ds, m->h, m->x, m->h, L->ffn_norm, T, dim, hp->rms_eps));
    } else {
      TRY(d->add(ds, m->x, m->x, m->h, T * dim));
      TRY(d->rms_norm(ds, m->h, m->x, L->ffn_norm, T, dim, hp->rms_eps));
    }
    TAP(l, WEIR_LLAMA_SITE_FFN_IN, m->h, T, dim);
    { /* gate and up likewise */
      const void *wgu[2] = {L->w_gate, L->w_up};
      float *ygu[2] = {m->gate, m->up};
      TRY(weir_llama_matmul_group(m->quant, m->quant_self, wgu, 2, m->h, ygu, T));
    }
    if (hp->ffn_gelu) TRY(d->geglu(ds, m->gate, m->gate, m->up, T * ff));
    else TRY(d->swiglu(ds, m->gate, m->gate, m->up, T * ff));
    TAP(l, WEIR_LLAMA_SITE_FFN_MID, m->gate, T, ff);
    TRY(m->quant->matmul(m->quant_self, L->w_down, m->gate, m->h, T));
    if (L->post_ffn_norm) TRY(d->rms_norm(ds, m->h, m->h, L->post_ffn_norm, T, dim, hp->rms_eps));
    if (fused_norm && l + 1 < hp->n_layer) {
      TRY(d->add_rms_norm(ds, m->h, m->x, m->h, m->layers[l + 1].attn_norm, T, dim,
                          hp->rms_eps));
      attn_normed = 1;
    } else {
      TRY(d->add(ds, m->x, m->x, m->h, T * dim));
    }
  }
  if (R > 0) {
    TRY(d->get_rows(ds, m->sel, m->x, m->d_rows, R, dim));
    TRY(d->rms_norm(ds, m->sel, m->sel, m->out_norm, R, dim, hp->rms_eps));
    if (m->hidden_only) goto out;
    TAP(-1, WEIR_LLAMA_SITE_OUTPUT, m->sel, R, dim);
    TRY(m->quant->matmul(m->quant_self, m->head ? m->head : m->output, m->sel, m->logits, R));
    if (hp->final_softcap > 0.0f)
      TRY(d->softcap(ds, m->logits, hp->final_softcap, R * (int64_t)m->head_vocab));
  }
out:
  return rc;
}


/* Whether step b runs padded to a step graph's shape, and which (see weir_llama_graph_shape_of).
 * A step qualifies when its sequences each have 1..graph_max_rows tokens in order: each is
 * padded to the longest (r tokens), the step to the next recorded batch size, and its logit
 * rows to one per sequence or, beyond that, one per token. */
static int graph_shape(const weir_llama *m, const weir_llama_batch *b,
                       weir_llama_graph_shape *sh) {
  const int32_t S = b->num_seqs, T = b->num_tokens, R = b->num_logit_rows;
  if (!m->num_graph_sizes || (!m->graph_dev && !m->graph_emulate) || m->tap || m->hidden_only ||
      S <= 0 ||
      S > m->graph_size[m->num_graph_sizes - 1] || b->query_start_loc[0] != 0 ||
      b->query_start_loc[S] != T)
    return 0;
  int32_t r = 0;
  for (int32_t s = 0; s < S; s++) {
    const int32_t q = b->query_start_loc[s + 1] - b->query_start_loc[s];
    if (q < 1 || q > m->graph_max_rows || b->context_lens[s] < q) return 0;
    if (q > r) r = q;
  }
  int i = 0;
  while (m->graph_size[i] < S) i++;
  const int32_t n = m->graph_size[i], Tp = n * r, Rp = R <= n ? n : Tp;
  if (Tp > m->graph_max_tokens || Rp > m->opts.max_logit_rows) return 0;
  for (int32_t j = 0; j < R; j++)
    if (b->logit_rows[j] < 0 || b->logit_rows[j] >= T) return 0;
  /* A padding token extends its sequence's context: it must stay within the block table. */
  const int64_t limit = (int64_t)m->max_blocks_per_seq * m->shape->block_size;
  for (int32_t s = 0; s < S; s++) {
    const int32_t q = b->query_start_loc[s + 1] - b->query_start_loc[s];
    if ((int64_t)b->context_lens[s] + (r - q) > limit) return 0;
  }
  const uint64_t idx = ((uint64_t)i * WEIR_LLAMA_GRAPH_MAX_ROWS + (uint64_t)(r - 1)) * 2u +
                       (Rp != n ? 1u : 0u);
  *sh = (weir_llama_graph_shape){
      .seqs = n, .rows_per_seq = r, .logit_rows = Rp, .key = m->graph_key_base + idx};
  return 1;
}

int weir_llama_graph_shape_of(const weir_llama *m, const weir_llama_batch *b,
                              weir_llama_graph_shape *out) {
  return graph_shape(m, b, out);
}

/* b padded to shape sh in m->pad. Sequence s takes tokens [s * r, s * r + r): its own, then
 * copies of its last token at the next positions with slot -1 (no KV write) and its context
 * extended by as many, so that its real tokens see exactly the keys they see unpadded (a
 * query row sees the keys up to context - query length + its index) and the padding tokens
 * read keys that exist in the table (block 0 past the sequence's own blocks); their rows are
 * thrown away. A padding sequence has tokens 0 at positions 0.., context r over block 0. The
 * logit rows come first in the caller's order, mapped to the padded token indices, then
 * rows of token 0: so the logits the caller reads are where it expects them. */
static weir_llama_batch pad_batch(weir_llama *m, const weir_llama_batch *b,
                                  const weir_llama_graph_shape *sh) {
  const int32_t S = b->num_seqs, W = m->max_blocks_per_seq, bs = m->shape->block_size;
  const int32_t n = sh->seqs, r = sh->rows_per_seq, Tp = n * r, Rp = sh->logit_rows;
  int32_t *tok = m->pad, *pos = tok + Tp, *slots = pos + Tp, *rows = slots + Tp;
  int32_t *qsl = rows + Tp, *ctx = qsl + n + 1, *bt = ctx + n;
  for (int32_t s = 0; s < S; s++) {
    const int32_t src = b->query_start_loc[s], q = b->query_start_loc[s + 1] - src, dst = s * r;
    memcpy(tok + dst, b->tokens + src, sizeof(int32_t) * (size_t)q);
    memcpy(pos + dst, b->positions + src, sizeof(int32_t) * (size_t)q);
    memcpy(slots + dst, b->slot_mapping + src, sizeof(int32_t) * (size_t)q);
    for (int32_t j = q; j < r; j++) {
      tok[dst + j] = tok[dst + q - 1];
      pos[dst + j] = pos[dst + q - 1] + (j - q + 1);
      slots[dst + j] = -1;
    }
    ctx[s] = b->context_lens[s] + (r - q);
    int32_t *row = bt + (size_t)s * W;
    const int32_t have = (b->context_lens[s] + bs - 1) / bs, need = (ctx[s] + bs - 1) / bs;
    memcpy(row, b->block_tables + (size_t)s * b->max_blocks_per_seq,
           sizeof(int32_t) * (size_t)b->max_blocks_per_seq);
    for (int32_t e = have; e < need; e++) row[e] = 0;
  }
  for (int32_t s = S; s < n; s++) {
    for (int32_t j = 0; j < r; j++) {
      tok[s * r + j] = 0;
      pos[s * r + j] = j;
      slots[s * r + j] = -1;
    }
    ctx[s] = r;
    memset(bt + (size_t)s * W, 0, sizeof(int32_t) * (size_t)W);
  }
  for (int32_t s = 0; s <= n; s++) qsl[s] = s * r;
  for (int32_t j = 0; j < b->num_logit_rows; j++) {
    const int32_t t = b->logit_rows[j];
    int32_t lo = 0, hi = S - 1; /* the sequence holding token t: qsl[lo] <= t < qsl[lo + 1] */
    while (lo < hi) {
      const int32_t mid = (lo + hi + 1) / 2;
      if (b->query_start_loc[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    rows[j] = lo * r + (t - b->query_start_loc[lo]);
  }
  for (int32_t j = b->num_logit_rows; j < Rp; j++) rows[j] = 0;
  return (weir_llama_batch){.num_tokens = Tp,
                            .tokens = tok,
                            .positions = pos,
                            .num_seqs = n,
                            .query_start_loc = qsl,
                            .context_lens = ctx,
                            .block_tables = bt,
                            .max_blocks_per_seq = W,
                            .slot_mapping = slots,
                            .num_logit_rows = Rp,
                            .logit_rows = rows};
}

/* Runs a padded step (inputs uploaded) from its shape's graph: the first step of a shape runs
 * as plain launches (plugins size their workspaces), the second records the graph and
 * launches it, later ones only launch. A shape whose recording fails runs without a graph
 * from then on. Emulated (weir_llama_set_graph_emulation), every step runs as plain launches. */
static int graph_step(weir_llama *m, const weir_llama_graph_shape *sh, const weir_llama_batch *pb) {
  const weir_device_ops *d = m->dev;
  void *ds = m->dev_self;
  const uint64_t key = sh->key;
  uint8_t *state = &m->graph_state[key - m->graph_key_base];
  const int32_t plan_ctx = m->max_blocks_per_seq * m->shape->block_size;
  int rc;
  if (m->graph_emulate) return compute(m, pb, plan_ctx);
  switch (*state) {
  case GRAPH_READY:
    rc = d->graph_launch(ds, key);
    if (rc != WEIR_E_NOTFOUND) break;
    /* The device dropped its graphs (another model's destroy): record this one again. */
    *state = GRAPH_WARM;
    /* fall through */
  case GRAPH_WARM: {
    rc = d->graph_begin(ds, key);
    if (rc == WEIR_OK) {
      int crc = compute(m, pb, plan_ctx);
      rc = d->graph_end(ds, key);
      if (rc == WEIR_OK) rc = crc;
    }
    if (rc == WEIR_OK) {
      *state = GRAPH_READY;
      m->graph_stats.recorded++;
      rc = d->graph_launch(ds, key);
      break;
    }
    weir_log(WEIR_LOG_WARN, "model",
             "recording the step of %d sequences of %d tokens as a graph failed (%s): that "
             "shape runs without one", (int)sh->seqs, (int)sh->rows_per_seq, weir_strerror(rc));
    *state = GRAPH_BROKEN;
    return compute(m, pb, plan_ctx);
  }
  case GRAPH_NONE:
    *state = GRAPH_WARM;
    return compute(m, pb, plan_ctx);
  default:
    return compute(m, pb, plan_ctx);
  }
  if (rc == WEIR_OK) {
    m->graph_stats.replayed++;
    if (sh->rows_per_seq > 1) m->graph_stats.multi_row++;
  }
  return rc;
}

int weir_llama_forward(weir_llama *m, const weir_llama_batch *b, float **logits) {
  const int64_t T = b->num_tokens, R = b->num_logit_rows, S = b->num_seqs;
  if (T <= 0 || T > m->opts.max_num_tokens || S <= 0 || S > m->opts.max_num_seqs || R < 0 ||
      R > m->opts.max_logit_rows || b->max_blocks_per_seq > m->max_blocks_per_seq)
    return WEIR_E_RANGE;
  int rc;
  weir_llama_graph_shape sh;
  if (!graph_shape(m, b, &sh)) {
    TRY(upload_batch(m, b));
    TRY(compute(m, b, 0));
  } else {
    const weir_llama_batch pb = pad_batch(m, b, &sh);
    TRY(upload_batch(m, &pb));
    TRY(graph_step(m, &sh, &pb));
    m->graph_stats.padded += (uint64_t)(sh.seqs - S);
    m->graph_stats.padded_tokens += (uint64_t)(pb.num_tokens - T);
  }
  *logits = m->logits;
out:
  return rc;
}

int32_t weir_llama_logits_width(const weir_llama *m) { return m->head_vocab; }

int weir_llama_forward_hidden(weir_llama *m, const weir_llama_batch *b, float *hidden) {
  const int64_t T = b->num_tokens, R = b->num_logit_rows, S = b->num_seqs;
  if (T <= 0 || T > m->opts.max_num_tokens || S <= 0 || S > m->opts.max_num_seqs || R <= 0 ||
      R > m->opts.max_logit_rows || b->max_blocks_per_seq > m->max_blocks_per_seq)
    return WEIR_E_RANGE;
  int rc;
  /* Never from a step graph: a recorded step ends with the LM head. */
  TRY(upload_batch(m, b));
  m->hidden_only = 1;
  rc = compute(m, b, 0);
  m->hidden_only = 0;
  if (rc != WEIR_OK) goto out;
  TRY(m->dev->synchronize(m->dev_self));
  TRY(m->dev->copy_d2h(m->dev_self, hidden, m->sel, (size_t)R * (size_t)m->hp.n_embd * 4));
out:
  return rc;
}

void weir_llama_graph_stats_get(const weir_llama *m, weir_llama_graph_stats *out) {
  *out = m->graph_stats;
}

void weir_llama_set_tap(weir_llama *m, weir_llama_tap_fn fn, void *user) {
  m->tap = fn;
  m->tap_user = user;
}
