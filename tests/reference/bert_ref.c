/* A deliberately plain double-precision reference of the encoder embedding models (issue 33):
 * bert (Devlin et al. 2018: token + position + token-type embeddings, LayerNorm; post-LN
 * blocks of bidirectional multi-head attention with biases and a GELU feed-forward) and
 * nomic-bert (Nussbaum et al. 2024: no position embeddings, fused QKV without biases, rotary
 * positions with halves paired (NEOX), a SwiGLU feed-forward). GELU is the exact erf form.
 * Written from those definitions over the GGUF tensor names; it shares no kernel with the
 * engine and uses core only to read the file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "weir/status.h"

static int row_of(const weir_gguf_tensor *t, int64_t r, double *out) {
  return weir_ref_dequant(t->t.dtype, (const uint8_t *)t->t.data + t->t.nb[1] * (size_t)r, out,
                          t->t.ne[0]);
}

/* y[t][r] = sum_c W[r0 + r][c] x[t][c] (+ b[r]) for rows [r0, r0 + out). */
static int linear(const weir_gguf_tensor *w, const weir_gguf_tensor *b, int64_t r0, int64_t out,
                  const double *x, int n, double *y) {
  if (!w) return WEIR_E_NOTFOUND;
  const int64_t in = w->t.ne[0];
  double *row = malloc(sizeof(double) * (size_t)in), *bias = NULL;
  if (!row) return WEIR_E_NOMEM;
  if (b && (!(bias = malloc(sizeof(double) * (size_t)out)) ||
            weir_ref_dequant(b->t.dtype, b->t.data, bias, out))) {
    free(row);
    free(bias);
    return WEIR_E_FORMAT;
  }
  for (int64_t r = 0; r < out; r++) {
    if (row_of(w, r0 + r, row)) {
      free(row);
      free(bias);
      return WEIR_E_FORMAT;
    }
    for (int t = 0; t < n; t++) {
      double acc = bias ? bias[r] : 0;
      for (int64_t c = 0; c < in; c++) acc += row[c] * x[(size_t)t * (size_t)in + (size_t)c];
      y[(size_t)t * (size_t)out + (size_t)r] = acc;
    }
  }
  free(row);
  free(bias);
  return 0;
}

static void layer_norm(double *x, int n, int dim, const double *w, const double *b,
                       double eps) {
  for (int t = 0; t < n; t++) {
    double *r = x + (size_t)t * dim, mean = 0, var = 0;
    for (int i = 0; i < dim; i++) mean += r[i];
    mean /= dim;
    for (int i = 0; i < dim; i++) var += (r[i] - mean) * (r[i] - mean);
    var /= dim;
    for (int i = 0; i < dim; i++) r[i] = (r[i] - mean) / sqrt(var + eps) * w[i] + b[i];
  }
}

static const weir_gguf_tensor *T(const weir_gguf *g, int l, const char *suffix) {
  char name[96];
  if (l < 0) snprintf(name, sizeof name, "%s", suffix);
  else snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
  return weir_gguf_find_tensor(g, name);
}

static int vec_of(const weir_gguf *g, int l, const char *suffix, double *out) {
  const weir_gguf_tensor *t = T(g, l, suffix);
  return t ? weir_ref_dequant(t->t.dtype, t->t.data, out, t->nelements) : WEIR_E_NOTFOUND;
}

static uint32_t key_u32(const weir_gguf *g, const char *arch, const char *key) {
  char k[96];
  uint32_t v = 0;
  snprintf(k, sizeof k, "%s.%s", arch, key);
  (void)weir_gguf_get_u32(g, k, &v);
  return v;
}

int weir_ref_bert_embed(const char *path, const int32_t *ids, int n, int pooling, double *out) {
  char err[512], arch[16] = "";
  weir_gguf *g = NULL;
  int rc = weir_gguf_open(path, &g, err, sizeof err);
  if (rc) {
    fprintf(stderr, "reference: %s\n", err);
    return rc;
  }
  weir_gguf_str a;
  if (weir_gguf_get_str(g, "general.architecture", &a) || a.len >= sizeof arch) {
    weir_gguf_close(g);
    return WEIR_E_FORMAT;
  }
  memcpy(arch, a.ptr, (size_t)a.len);
  const int nomic = !strcmp(arch, "nomic-bert");
  const int E = (int)key_u32(g, arch, "embedding_length"), F = (int)key_u32(g, arch,
                                                                            "feed_forward_length");
  const int L = (int)key_u32(g, arch, "block_count"), H = (int)key_u32(g, arch,
                                                                       "attention.head_count");
  const int D = E / H;
  char k[96];
  float eps = 1e-12f, base = 10000.0f;
  snprintf(k, sizeof k, "%s.attention.layer_norm_epsilon", arch);
  (void)weir_gguf_get_f32(g, k, &eps);
  snprintf(k, sizeof k, "%s.rope.freq_base", arch);
  (void)weir_gguf_get_f32(g, k, &base);
  const size_t N = (size_t)n;
  double *x = calloc(N * E, sizeof *x), *row = calloc((size_t)E > (size_t)F ? E : F, sizeof *row);
  double *q = calloc(N * E, sizeof *q), *kk = calloc(N * E, sizeof *kk);
  double *v = calloc(N * E, sizeof *v), *att = calloc(N * E, sizeof *att);
  double *o = calloc(N * E, sizeof *o), *up = calloc(N * F, sizeof *up);
  double *gate = calloc(N * F, sizeof *gate), *s = calloc(N, sizeof *s);
  double *w = calloc((size_t)E * 2, sizeof *w), *b = calloc((size_t)E, sizeof *b);
  if (!x || !row || !q || !kk || !v || !att || !o || !up || !gate || !s || !w || !b) {
    rc = WEIR_E_NOMEM;
    goto done;
  }
  /* Embeddings: token + token type 0 (+ position for bert), then LayerNorm. */
  const weir_gguf_tensor *te = T(g, -1, "token_embd.weight"), *pe = T(g, -1, "position_embd.weight");
  if ((rc = vec_of(g, -1, "token_types.weight", w))) goto done; /* row 0 = first E values */
  for (int t = 0; t < n; t++) {
    if ((rc = row_of(te, ids[t], row))) goto done;
    for (int i = 0; i < E; i++) x[(size_t)t * E + i] = row[i] + w[i];
    if (!nomic) {
      if ((rc = row_of(pe, t, row))) goto done;
      for (int i = 0; i < E; i++) x[(size_t)t * E + i] += row[i];
    }
  }
  if ((rc = vec_of(g, -1, "token_embd_norm.weight", w)) ||
      (rc = vec_of(g, -1, "token_embd_norm.bias", b)))
    goto done;
  layer_norm(x, n, E, w, b, eps);
  for (int l = 0; l < L; l++) {
    if (nomic) {
      const weir_gguf_tensor *qkv = T(g, l, "attn_qkv.weight");
      if ((rc = linear(qkv, NULL, 0, E, x, n, q)) || (rc = linear(qkv, NULL, E, E, x, n, kk)) ||
          (rc = linear(qkv, NULL, 2 * E, E, x, n, v)))
        goto done;
      /* Rotary, halves paired: (x[i], x[i + D/2]) turns by pos * base^(-2i/D). */
      for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++)
          for (int i = 0; i < D / 2; i++) {
            const double th = t * pow(base, -2.0 * i / D), c = cos(th), sn = sin(th);
            double *pq = q + (size_t)t * E + (size_t)h * D, *pk = kk + (size_t)t * E + (size_t)h * D;
            double a0 = pq[i], a1 = pq[i + D / 2];
            pq[i] = a0 * c - a1 * sn;
            pq[i + D / 2] = a0 * sn + a1 * c;
            a0 = pk[i], a1 = pk[i + D / 2];
            pk[i] = a0 * c - a1 * sn;
            pk[i + D / 2] = a0 * sn + a1 * c;
          }
    } else if ((rc = linear(T(g, l, "attn_q.weight"), T(g, l, "attn_q.bias"), 0, E, x, n, q)) ||
               (rc = linear(T(g, l, "attn_k.weight"), T(g, l, "attn_k.bias"), 0, E, x, n, kk)) ||
               (rc = linear(T(g, l, "attn_v.weight"), T(g, l, "attn_v.bias"), 0, E, x, n, v))) {
      goto done;
    }
    /* Bidirectional attention: every token sees every token. */
    for (int h = 0; h < H; h++)
      for (int i = 0; i < n; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
          double d = 0;
          for (int c = 0; c < D; c++)
            d += q[(size_t)i * E + (size_t)h * D + c] * kk[(size_t)j * E + (size_t)h * D + c];
          s[j] = d / sqrt((double)D);
          if (s[j] > mx) mx = s[j];
        }
        for (int j = 0; j < n; j++) sum += (s[j] = exp(s[j] - mx));
        for (int c = 0; c < D; c++) {
          double acc = 0;
          for (int j = 0; j < n; j++) acc += s[j] / sum * v[(size_t)j * E + (size_t)h * D + c];
          att[(size_t)i * E + (size_t)h * D + c] = acc;
        }
      }
    if ((rc = linear(T(g, l, "attn_output.weight"), nomic ? NULL : T(g, l, "attn_output.bias"),
                     0, E, att, n, o)))
      goto done;
    for (size_t i = 0; i < N * E; i++) x[i] += o[i];
    if ((rc = vec_of(g, l, "attn_output_norm.weight", w)) ||
        (rc = vec_of(g, l, "attn_output_norm.bias", b)))
      goto done;
    layer_norm(x, n, E, w, b, eps);
    if ((rc = linear(T(g, l, "ffn_up.weight"), nomic ? NULL : T(g, l, "ffn_up.bias"), 0, F, x,
                     n, up)))
      goto done;
    if (nomic) {
      if ((rc = linear(T(g, l, "ffn_gate.weight"), NULL, 0, F, x, n, gate))) goto done;
      for (size_t i = 0; i < N * F; i++) up[i] *= gate[i] / (1.0 + exp(-gate[i]));
    } else {
      for (size_t i = 0; i < N * F; i++) up[i] = 0.5 * up[i] * (1.0 + erf(up[i] / sqrt(2.0)));
    }
    if ((rc = linear(T(g, l, "ffn_down.weight"), nomic ? NULL : T(g, l, "ffn_down.bias"), 0, E,
                     up, n, o)))
      goto done;
    for (size_t i = 0; i < N * E; i++) x[i] += o[i];
    if ((rc = vec_of(g, l, "layer_output_norm.weight", w)) ||
        (rc = vec_of(g, l, "layer_output_norm.bias", b)))
      goto done;
    layer_norm(x, n, E, w, b, eps);
  }
  /* Pooling (0 mean, 1 first token, 2 last token), then L2 normalisation. */
  double ss = 0;
  for (int i = 0; i < E; i++) {
    double acc = 0;
    if (pooling == 0)
      for (int t = 0; t < n; t++) acc += x[(size_t)t * E + i] / n;
    else
      acc = x[(size_t)(pooling == 1 ? 0 : n - 1) * E + i];
    out[i] = acc;
    ss += acc * acc;
  }
  for (int i = 0; i < E; i++) out[i] /= sqrt(ss);
done:
  free(x);
  free(row);
  free(q);
  free(kk);
  free(v);
  free(att);
  free(o);
  free(up);
  free(gate);
  free(s);
  free(w);
  free(b);
  weir_gguf_close(g);
  return rc;
}
