/* Double-precision reference forward pass of the Llama family. Written for clarity, not
 * speed: every value is a double, every loop is the textbook one. */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/status.h"

struct weir_ref_model {
  weir_gguf *gguf;
  weir_llama_hparams hp;
};

/* ---- dequantization, from the format definitions ---- */

static double half_to_double(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 0) v = ldexp((double)man, -24);               /* zero and subnormals */
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = ldexp(1.0 + (double)man / 1024.0, exp - 15);
  return sign ? -v : v;
}

static double bf16_to_double(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return (double)f;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

int weir_ref_dequant(int dtype, const void *src, double *dst, int64_t n) {
  const uint8_t *p = src;
  switch (dtype) {
  case WEIR_DTYPE_F32:
    for (int64_t i = 0; i < n; i++) {
      float f;
      memcpy(&f, p + 4 * i, 4);
      dst[i] = f;
    }
    return 0;
  case WEIR_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) dst[i] = half_to_double(le16(p + 2 * i));
    return 0;
  case WEIR_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_double(le16(p + 2 * i));
    return 0;
  case WEIR_DTYPE_Q8_0: /* 32 values: f16 scale, 32 signed bytes */
    if (n % 32) return WEIR_E_INVAL;
    for (int64_t b = 0; b < n / 32; b++) {
      const uint8_t *blk = p + 34 * b;
      double d = half_to_double(le16(blk));
      for (int i = 0; i < 32; i++) dst[32 * b + i] = d * (double)(int8_t)blk[2 + i];
    }
    return 0;
  case WEIR_DTYPE_Q4_0: /* f16 scale, 16 bytes: low nibbles are values 0..15, high 16..31 */
    if (n % 32) return WEIR_E_INVAL;
    for (int64_t b = 0; b < n / 32; b++) {
      const uint8_t *blk = p + 18 * b;
      double d = half_to_double(le16(blk));
      for (int i = 0; i < 16; i++) {
        dst[32 * b + i] = d * (double)((blk[2 + i] & 0x0f) - 8);
        dst[32 * b + 16 + i] = d * (double)((blk[2 + i] >> 4) - 8);
      }
    }
    return 0;
  case WEIR_DTYPE_Q4_1: /* f16 scale, f16 minimum, 16 bytes of nibbles */
    if (n % 32) return WEIR_E_INVAL;
    for (int64_t b = 0; b < n / 32; b++) {
      const uint8_t *blk = p + 20 * b;
      double d = half_to_double(le16(blk)), m = half_to_double(le16(blk + 2));
      for (int i = 0; i < 16; i++) {
        dst[32 * b + i] = d * (double)(blk[4 + i] & 0x0f) + m;
        dst[32 * b + 16 + i] = d * (double)(blk[4 + i] >> 4) + m;
      }
    }
    return 0;
  case WEIR_DTYPE_Q4_K: /* 256 values: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, */
  case WEIR_DTYPE_Q5_K: /* (Q5_K: 32 bytes of fifth bits,) 128 bytes of nibbles */
  {
    /* 8 sub-blocks of 32: value = d * sc[s] * q - dmin * m[s]. Sub-block s's 6-bit scale and
     * min: for s < 4 the low 6 bits of bytes s and s + 4; for s >= 4 a nibble of byte s + 4
     * (low for the scale, high for the min) under the top 2 bits of byte s - 4 (scale) or s
     * (min). Nibbles: 32-byte group g holds sub-block 2g in its low nibbles, 2g + 1 in its
     * high ones; Q5_K's fifth bit of value i of sub-block s is bit s of qh[i]. (The K-quant
     * block layout, GGUF spec and docs/models.md, Block types.) */
    const int five = dtype == WEIR_DTYPE_Q5_K, bsz = five ? 176 : 144;
    if (n % 256) return WEIR_E_INVAL;
    for (int64_t b = 0; b < n / 256; b++) {
      const uint8_t *blk = p + (int64_t)bsz * b, *sc = blk + 4, *qh = blk + 16;
      const uint8_t *qs = blk + (five ? 48 : 16);
      double d = half_to_double(le16(blk)), dmin = half_to_double(le16(blk + 2));
      for (int s = 0; s < 8; s++) {
        int scale, min;
        if (s < 4) {
          scale = sc[s] & 63;
          min = sc[s + 4] & 63;
        } else {
          scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
          min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
        }
        for (int i = 0; i < 32; i++) {
          int q = s & 1 ? qs[32 * (s / 2) + i] >> 4 : qs[32 * (s / 2) + i] & 15;
          if (five && (qh[i] >> s & 1)) q += 16;
          dst[256 * b + 32 * s + i] = d * scale * q - dmin * min;
        }
      }
    }
    return 0;
  }
  case WEIR_DTYPE_Q6_K: /* 256 values: 128 bytes of low nibbles, 64 of high 2-bit pairs, */
  {                     /* 16 int8 scales, f16 d */
    /* 16 sub-blocks of 16: value = d * sc[s] * (q - 32), q 6 bits. Each half of 128 values
     * has 64 bytes ql and 32 bytes qh: value i of the half (0..127), with l = i % 32 and
     * k = i / 32, takes the low nibble of ql[l + 32 (k & 1)] for k < 2 and the high one for
     * k >= 2, and bits 2k, 2k + 1 of qh[l] as its top two. (GGUF spec, Q6_K.) */
    if (n % 256) return WEIR_E_INVAL;
    for (int64_t b = 0; b < n / 256; b++) {
      const uint8_t *blk = p + 210 * b;
      const int8_t *sc = (const int8_t *)(blk + 192);
      double d = half_to_double(le16(blk + 208));
      for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        for (int i = 0; i < 128; i++) {
          int l = i % 32, k = i / 32;
          int lo = k < 2 ? ql[l + 32 * (k & 1)] & 15 : ql[l + 32 * (k & 1)] >> 4;
          int q = lo | (qh[l] >> (2 * k) & 3) << 4;
          int idx = 128 * h + i;
          dst[256 * b + idx] = d * sc[idx / 16] * (q - 32);
        }
      }
    }
    return 0;
  }
  default:
    return WEIR_E_NOTSUP;
  }
}

/* ---- building blocks ---- */

void weir_ref_rmsnorm(const double *x, const double *w, int n, double eps, double *y) {
  double ss = 0;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  double inv = 1.0 / sqrt(ss / n + eps);
  for (int i = 0; i < n; i++) y[i] = x[i] * inv * (w ? w[i] : 1.0);
}

void weir_ref_rope(double *x, int n_rot, int pos, double base, double scale, int style) {
  int half = n_rot / 2;
  for (int i = 0; i < half; i++) {
    double theta = ((double)pos / scale) * pow(base, -2.0 * i / n_rot);
    double c = cos(theta), s = sin(theta);
    int a = style == WEIR_ROPE_NEOX ? i : 2 * i;
    int b = style == WEIR_ROPE_NEOX ? i + half : 2 * i + 1;
    double x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

static double silu(double x) { return x / (1.0 + exp(-x)); }

/* Y[t][r] = sum_c W[r][c] * X[t][c] for all n tokens: a weight of ne = {in, out} read row by
 * row (each row dequantized once), X is n x in, Y is n x out. */
static int matmul(const weir_gguf_tensor *w, const double *x, int n, double *y) {
  int64_t in = w->t.ne[0], out = w->t.ne[1];
  double *row = malloc((size_t)in * sizeof *row);
  if (!row) return WEIR_E_NOMEM;
  for (int64_t r = 0; r < out; r++) {
    int rc = weir_ref_dequant(w->t.dtype, (const uint8_t *)w->t.data + w->t.nb[1] * (size_t)r,
                              row, in);
    if (rc) {
      free(row);
      return rc;
    }
    for (int t = 0; t < n; t++) {
      double acc = 0;
      for (int64_t c = 0; c < in; c++) acc += row[c] * x[(size_t)t * (size_t)in + (size_t)c];
      y[(size_t)t * (size_t)out + (size_t)r] = acc;
    }
  }
  free(row);
  return 0;
}

static int vec(const weir_gguf_tensor *t, double *out) {
  return weir_ref_dequant(t->t.dtype, t->t.data, out, t->t.ne[0]);
}

static const weir_gguf_tensor *blk(const weir_ref_model *m, int l, const char *suffix) {
  char name[96];
  return weir_gguf_find_tensor(m->gguf, weir_gguf_blk_name(name, sizeof name, l, suffix));
}

int weir_ref_model_load(const char *gguf_path, weir_ref_model **out) {
  char err[512];
  int rc;
  weir_ref_model *m = calloc(1, sizeof *m);
  if (!m) return WEIR_E_NOMEM;
  rc = weir_gguf_open(gguf_path, &m->gguf, err, sizeof err);
  if (rc == 0) rc = weir_gguf_llama_hparams(m->gguf, &m->hp, err, sizeof err);
  if (rc == 0) rc = weir_gguf_llama_check(m->gguf, &m->hp, err, sizeof err);
  if (rc) {
    fprintf(stderr, "reference: %s\n", err);
    weir_ref_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

void weir_ref_model_free(weir_ref_model *m) {
  if (!m) return;
  weir_gguf_close(m->gguf);
  free(m);
}

const weir_llama_hparams *weir_ref_model_hparams(const weir_ref_model *m) { return &m->hp; }

/* ---- the model families ----
 * Each formula's source:
 *  - Llama / Mistral: Touvron et al. 2023 and Meta's llama reference model.py (RMSNorm,
 *    RoPE on adjacent pairs, SwiGLU). Llama 3.1's rope_freqs: Meta's llama3 apply_scaling
 *    divides the frequency of pair i by a factor (the GGUF stores the factors).
 *  - Qwen2 / Qwen3: HF transformers modeling_qwen2.py / modeling_qwen3.py (rotate_half RoPE
 *    = NEOX pairs; Qwen3Attention applies q_norm / k_norm, RMSNorms over head_dim, per head
 *    before RoPE).
 *  - Gemma 2: HF transformers modeling_gemma2.py: embeddings times sqrt(hidden_size);
 *    Gemma2RMSNorm is x * (1 + w) (llama.cpp's converter stores 1 + w in the GGUF, so the
 *    file's weight multiplies directly); post_attention_layernorm and
 *    post_feedforward_layernorm on the sublayer outputs before the residual add; MLP
 *    down(gelu_pytorch_tanh(gate) * up); scores scaled by query_pre_attn_scalar^-0.5 then
 *    soft-capped: tanh(s / cap) * cap with attn_logit_softcapping; final logits soft-capped
 *    by final_logit_softcapping; sliding window on even layers (layer_idx % 2 == 0), a key
 *    j visible to query i when i - j < sliding_window.
 *  - Gemma 3: HF transformers modeling_gemma3.py: as Gemma 2 plus q_norm / k_norm, no
 *    soft-caps, layer l sliding unless (l + 1) % 6 == 0, sliding layers' RoPE with
 *    rope_local_base_freq (10000) and no scaling.
 *  - Phi-3: HF transformers modeling_phi3.py: qkv_proj rows are q, k, v; gate_up_proj rows
 *    are gate then up, out = down(silu(gate) * up); LongRoPE divides pair i's frequency by
 *    long_factor[i] (sequences past original_max_position_embeddings) or short_factor[i] and
 *    scales cos and sin by the attention factor.
 *  - YaRN: Peng et al. 2023 and HF modeling_rope_utils._compute_yarn_parameters: correction
 *    dims d(b) = n_rot ln(L_orig / (2 pi b)) / (2 ln base) for beta_fast and beta_slow, a
 *    linear ramp between them, inv_freq = interp (1 - mix) + extrap mix with mix = (1 -
 *    ramp) ext_factor, cos and sin times 0.1 ln(factor) + 1. */

/* Whether layer l slides, from the architecture's published layer pattern. */
static int ref_layer_slides(const weir_llama_hparams *hp, int l) {
  if (hp->n_swa <= 0) return 0;
  if (hp->arch == WEIR_ARCH_GEMMA2) return l % 2 == 0;
  if (hp->arch == WEIR_ARCH_GEMMA3) return (l + 1) % 6 != 0;
  return 1;
}

/* The angle per position of pair i, and the rotation's magnitude factor. */
static void ref_rope_freqs(const weir_ref_model *m, int swa, int max_len, double *inv,
                           double *mscale) {
  const weir_llama_hparams *hp = &m->hp;
  const int half = hp->n_rot / 2;
  double base = hp->rope_freq_base, factor = hp->rope_scale > 0 ? hp->rope_scale : 1.0;
  if (swa && hp->arch == WEIR_ARCH_GEMMA3) {
    base = hp->rope_freq_base_swa;
    factor = 1.0;
  }
  double fac[WEIR_MAX_ROT / 2];
  for (int i = 0; i < half; i++) fac[i] = 1.0;
  const weir_gguf_tensor *t = weir_gguf_find_tensor(m->gguf, "rope_freqs.weight");
  if (!t && (weir_gguf_find_tensor(m->gguf, "rope_factors_long.weight")))
    t = weir_gguf_find_tensor(m->gguf, max_len > hp->n_ctx_orig ? "rope_factors_long.weight"
                                                                : "rope_factors_short.weight");
  if (t) weir_ref_dequant(t->t.dtype, t->t.data, fac, half);
  double low = 0, high = 0;
  const int yarn = hp->rope_yarn && factor > 1.0 && hp->yarn_ext_factor > 0;
  if (yarn) {
    const double pi = 3.14159265358979323846;
    low = floor(hp->n_rot * log(hp->n_ctx_orig / (hp->yarn_beta_fast * 2 * pi)) /
                (2 * log(base)));
    high = ceil(hp->n_rot * log(hp->n_ctx_orig / (hp->yarn_beta_slow * 2 * pi)) /
                (2 * log(base)));
    low = low < 0 ? 0 : low;
    high = high > hp->n_rot - 1 ? hp->n_rot - 1 : high;
  }
  for (int i = 0; i < half; i++) {
    double extrap = 1.0 / (pow(base, 2.0 * i / hp->n_rot) * fac[i]);
    double interp = extrap / factor;
    if (yarn) {
      double ramp = ((double)i - low) / fmax(high - low, 0.001);
      ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
      double mix = (1 - ramp) * hp->yarn_ext_factor;
      inv[i] = interp * (1 - mix) + extrap * mix;
    } else {
      inv[i] = interp;
    }
  }
  *mscale = hp->rope_attn_factor > 0 ? hp->rope_attn_factor : 1.0;
  if (yarn) *mscale *= 0.1 * log(factor) + 1.0;
}

static void ref_rope_inv(double *x, int n_rot, int pos, const double *inv, double mscale,
                         int style) {
  int half = n_rot / 2;
  for (int i = 0; i < half; i++) {
    double theta = pos * inv[i], c = cos(theta) * mscale, s = sin(theta) * mscale;
    int a = style == WEIR_ROPE_NEOX ? i : 2 * i;
    int b = style == WEIR_ROPE_NEOX ? i + half : 2 * i + 1;
    double x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

static double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* Rows [row0, row0 + out) of weight w, applied to n inputs. */
static int matmul_rows(const weir_gguf_tensor *w, int64_t row0, int64_t out, const double *x,
                       int n, double *y) {
  weir_gguf_tensor v = *w;
  v.t.data = (uint8_t *)w->t.data + w->t.nb[1] * (size_t)row0;
  v.t.ne[1] = out;
  return matmul(&v, x, n, y);
}

int weir_ref_forward(weir_ref_model *m, const int32_t *tokens, int n, double *logits) {
  return weir_ref_forward_len(m, tokens, n, 0, logits);
}

static int forward(weir_ref_model *m, const int32_t *tokens, int n, int max_len,
                   double *logits, double *hidden);

int weir_ref_forward_len(weir_ref_model *m, const int32_t *tokens, int n, int max_len,
                         double *logits) {
  return forward(m, tokens, n, max_len, logits, NULL);
}

int weir_ref_forward_hidden(weir_ref_model *m, const int32_t *tokens, int n, double *hidden) {
  return forward(m, tokens, n, 0, NULL, hidden);
}

/* The forward pass; logits and hidden (the output-normed states) may each be NULL. */
static int forward(weir_ref_model *m, const int32_t *tokens, int n, int max_len,
                   double *logits, double *hidden) {
  const weir_llama_hparams *hp = &m->hp;
  const int E = hp->n_embd, H = hp->n_head, HKV = hp->n_head_kv, D = hp->head_dim;
  const int QD = H * D, KV = HKV * D, F = hp->n_ff, V = hp->n_vocab;
  const size_t N = (size_t)n;
  const int gemma = hp->arch == WEIR_ARCH_GEMMA2 || hp->arch == WEIR_ARCH_GEMMA3;
  int rc = 0;
  if (n < 1) return WEIR_E_INVAL;
  if (max_len <= 0) max_len = hp->n_ctx_train;
  for (int t = 0; t < n; t++)
    if (tokens[t] < 0 || tokens[t] >= V) return WEIR_E_INVAL;

  const int W = E > QD ? E : QD;
  double *x = calloc(N * (size_t)E, sizeof(double));     /* the residual stream */
  double *h = calloc(N * (size_t)W, sizeof(double));     /* normed input of a sublayer */
  double *q = calloc(N * (size_t)QD, sizeof(double));
  double *k = calloc(N * (size_t)KV, sizeof(double));
  double *v = calloc(N * (size_t)KV, sizeof(double));
  double *att = calloc(N * (size_t)QD, sizeof(double));
  double *o = calloc(N * (size_t)E, sizeof(double));
  double *g = calloc(N * (size_t)F, sizeof(double));
  double *u = calloc(N * (size_t)F, sizeof(double));
  double *w = calloc((size_t)(W > KV ? W : KV), sizeof(double)); /* a norm weight or bias */
  double *w2 = calloc((size_t)D, sizeof(double));
  double *p = calloc(N, sizeof(double));                          /* attention weights */
  double inv[2][WEIR_MAX_ROT / 2], msc[2];
  if (!x || !h || !q || !k || !v || !att || !o || !g || !u || !w || !w2 || !p) {
    rc = WEIR_E_NOMEM;
    goto free_buffers;
  }
  ref_rope_freqs(m, 0, max_len, inv[0], &msc[0]);
  ref_rope_freqs(m, 1, max_len, inv[1], &msc[1]);

  /* Embedding: row tokens[t] of token_embd (ne = {E, V}); Gemma scales it by sqrt(E). */
  const weir_gguf_tensor *emb = weir_gguf_find_tensor(m->gguf, "token_embd.weight");
  for (int t = 0; t < n; t++)
    if ((rc = weir_ref_dequant(emb->t.dtype,
                               (const uint8_t *)emb->t.data + emb->t.nb[1] * (size_t)tokens[t],
                               x + (size_t)t * E, E)))
      goto free_buffers;
  if (gemma)
    for (size_t i = 0; i < N * (size_t)E; i++) x[i] *= sqrt((double)E);

  const double scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0 / sqrt((double)D);
  for (int l = 0; l < hp->n_layer; l++) {
    const int swa = ref_layer_slides(hp, l);
    /* Attention block. */
    if ((rc = vec(blk(m, l, "attn_norm.weight"), w))) goto free_buffers;
    for (int t = 0; t < n; t++)
      weir_ref_rmsnorm(x + (size_t)t * E, w, E, hp->rms_eps, h + (size_t)t * E);
    const weir_gguf_tensor *qkv = blk(m, l, "attn_qkv.weight");
    if (qkv) {
      if ((rc = matmul_rows(qkv, 0, QD, h, n, q)) || (rc = matmul_rows(qkv, QD, KV, h, n, k)) ||
          (rc = matmul_rows(qkv, QD + KV, KV, h, n, v)))
        goto free_buffers;
    } else if ((rc = matmul(blk(m, l, "attn_q.weight"), h, n, q)) ||
               (rc = matmul(blk(m, l, "attn_k.weight"), h, n, k)) ||
               (rc = matmul(blk(m, l, "attn_v.weight"), h, n, v)))
      goto free_buffers;
    const weir_gguf_tensor *bq = blk(m, l, "attn_q.bias"), *bk = blk(m, l, "attn_k.bias"),
                           *bv = blk(m, l, "attn_v.bias");
    if (bq) {
      if ((rc = vec(bq, w))) goto free_buffers;
      for (int t = 0; t < n; t++) for (int i = 0; i < QD; i++) q[(size_t)t * QD + i] += w[i];
    }
    if (bk) {
      if ((rc = vec(bk, w))) goto free_buffers;
      for (int t = 0; t < n; t++) for (int i = 0; i < KV; i++) k[(size_t)t * KV + i] += w[i];
    }
    if (bv) {
      if ((rc = vec(bv, w))) goto free_buffers;
      for (int t = 0; t < n; t++) for (int i = 0; i < KV; i++) v[(size_t)t * KV + i] += w[i];
    }
    const weir_gguf_tensor *qn = blk(m, l, "attn_q_norm.weight"),
                           *kn = blk(m, l, "attn_k_norm.weight");
    if (qn && kn) {
      if ((rc = vec(qn, w)) || (rc = vec(kn, w2))) goto free_buffers;
      for (int t = 0; t < n; t++) {
        for (int hd = 0; hd < H; hd++) {
          double *r = q + (size_t)t * QD + (size_t)hd * D;
          weir_ref_rmsnorm(r, w, D, hp->rms_eps, r);
        }
        for (int hd = 0; hd < HKV; hd++) {
          double *r = k + (size_t)t * KV + (size_t)hd * D;
          weir_ref_rmsnorm(r, w2, D, hp->rms_eps, r);
        }
      }
    }
    for (int t = 0; t < n; t++) {
      for (int hd = 0; hd < H; hd++)
        ref_rope_inv(q + (size_t)t * QD + (size_t)hd * D, hp->n_rot, t, inv[swa], msc[swa],
                     hp->rope_style);
      for (int hd = 0; hd < HKV; hd++)
        ref_rope_inv(k + (size_t)t * KV + (size_t)hd * D, hp->n_rot, t, inv[swa], msc[swa],
                     hp->rope_style);
    }
    /* Causal softmax attention; query head hd reads KV head hd / (H / HKV); a sliding layer
     * sees keys s with t - s < window; scores soft-capped when the model says so. */
    for (int t = 0; t < n; t++) {
      const int s0 = swa && t - hp->n_swa + 1 > 0 ? t - hp->n_swa + 1 : 0;
      for (int hd = 0; hd < H; hd++) {
        int kh = hd / (H / HKV);
        const double *qv = q + (size_t)t * QD + (size_t)hd * D;
        double mx = -INFINITY, sum = 0;
        for (int s = s0; s <= t; s++) {
          const double *kv = k + (size_t)s * KV + (size_t)kh * D;
          double dot = 0;
          for (int i = 0; i < D; i++) dot += qv[i] * kv[i];
          p[s] = dot * scale;
          if (hp->attn_softcap > 0) p[s] = tanh(p[s] / hp->attn_softcap) * hp->attn_softcap;
          if (p[s] > mx) mx = p[s];
        }
        for (int s = s0; s <= t; s++) sum += (p[s] = exp(p[s] - mx));
        double *out = att + (size_t)t * QD + (size_t)hd * D;
        for (int i = 0; i < D; i++) out[i] = 0;
        for (int s = s0; s <= t; s++) {
          const double *vv = v + (size_t)s * KV + (size_t)kh * D;
          for (int i = 0; i < D; i++) out[i] += p[s] / sum * vv[i];
        }
      }
    }
    if ((rc = matmul(blk(m, l, "attn_output.weight"), att, n, o))) goto free_buffers;
    const weir_gguf_tensor *pan = blk(m, l, "post_attention_norm.weight");
    if (pan) {
      if ((rc = vec(pan, w))) goto free_buffers;
      for (int t = 0; t < n; t++)
        weir_ref_rmsnorm(o + (size_t)t * E, w, E, hp->rms_eps, o + (size_t)t * E);
    }
    for (size_t i = 0; i < N * (size_t)E; i++) x[i] += o[i];

    /* Feed-forward block: down(act(gate(h)) * up(h)). */
    if ((rc = vec(blk(m, l, "ffn_norm.weight"), w))) goto free_buffers;
    for (int t = 0; t < n; t++)
      weir_ref_rmsnorm(x + (size_t)t * E, w, E, hp->rms_eps, h + (size_t)t * E);
    const weir_gguf_tensor *gate = blk(m, l, "ffn_gate.weight");
    if (!gate) { /* phi3: ffn_up holds gate rows then up rows */
      const weir_gguf_tensor *gu = blk(m, l, "ffn_up.weight");
      if ((rc = matmul_rows(gu, 0, F, h, n, g)) || (rc = matmul_rows(gu, F, F, h, n, u)))
        goto free_buffers;
    } else if ((rc = matmul(gate, h, n, g)) || (rc = matmul(blk(m, l, "ffn_up.weight"), h, n, u)))
      goto free_buffers;
    for (size_t i = 0; i < N * (size_t)F; i++) g[i] = (gemma ? gelu_tanh(g[i]) : silu(g[i])) * u[i];
    if ((rc = matmul(blk(m, l, "ffn_down.weight"), g, n, o))) goto free_buffers;
    const weir_gguf_tensor *pfn = blk(m, l, "post_ffw_norm.weight");
    if (pfn) {
      if ((rc = vec(pfn, w))) goto free_buffers;
      for (int t = 0; t < n; t++)
        weir_ref_rmsnorm(o + (size_t)t * E, w, E, hp->rms_eps, o + (size_t)t * E);
    }
    for (size_t i = 0; i < N * (size_t)E; i++) x[i] += o[i];
  }

  if ((rc = vec(weir_gguf_find_tensor(m->gguf, "output_norm.weight"), w))) goto free_buffers;
  for (int t = 0; t < n; t++)
    weir_ref_rmsnorm(x + (size_t)t * E, w, E, hp->rms_eps, h + (size_t)t * E);
  if (hidden) memcpy(hidden, h, N * (size_t)E * sizeof(double));
  const weir_gguf_tensor *out = hp->has_output ? weir_gguf_find_tensor(m->gguf, "output.weight")
                                               : emb;
  if (logits) rc = matmul(out, h, n, logits);
  if (logits && rc == 0 && hp->final_softcap > 0)
    for (size_t i = 0; i < N * (size_t)V; i++)
      logits[i] = tanh(logits[i] / hp->final_softcap) * hp->final_softcap;

free_buffers:
  free(x);
  free(h);
  free(q);
  free(k);
  free(v);
  free(att);
  free(o);
  free(g);
  free(u);
  free(w);
  free(w2);
  free(p);
  return rc;
}
