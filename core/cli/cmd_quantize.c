/* weir quantize: calibrate and quantize a model once, and save it as a standard GGUF file.
 *
 * The model's linear weights (and the token embedding) are packed by the quant scheme's
 * plugin exactly as `weir serve` would pack them, with a calibration pass when the scheme asks
 * for one, then read back with the plugin's export_weight (SDK 1.1) as Q4_1 blocks. The
 * per-input-channel scale s of an activation-aware scheme cannot be stored in a GGUF, so it is
 * folded into whatever produces the weight's input (docs/quant-awq.md, "Export"):
 *   attn_q/k/v  -> attn_norm gain / s         ffn_gate/up -> ffn_norm gain / s
 *   attn_output -> rows of attn_v (and its bias) / s, one s per KV channel (the plugin was
 *                  given channel classes so the query heads sharing a KV head share it)
 *   ffn_down    -> rows of ffn_up / s         output      -> output_norm gain / s
 * Q8_0 weights (the output layer of most 4-bit files) are kept as Q8_0, as awq_int4 keeps them
 * (their f16 scales take power-of-two folds exactly). Norms are written as F32; every other
 * tensor and every metadata key is copied as it is,
 * plus general.file_type = 3 (mostly Q4_1) and weir.quantize.* keys. The file is written to
 * OUT.tmp and renamed.
 *
 * Inputs: any file weir reads. Matrices in a block type the scheme's plugin does not take
 * (the K-quants, Q5_0/Q5_1 and IQ4 types of SDK 1.5 for awq_int4) are first dequantized to
 * F16 into OUT.src.tmp (weir_dequantize_row; exact up to one f16 rounding per weight), which
 * then stands in for the input and is removed at the end. Output: Q4_1 only (--type q4_1):
 * the scheme exports groups with an f16 scale and min each, which the K-quants' 4- to 6-bit
 * sub-block scales cannot hold, so another --type is refused rather than rounded twice. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli/cli.h"
#include "config/config.h"
#include "model/calib.h"
#include "format/quantize_row.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
#include "util/log.h"

#define ERRLEN 1024

static void usage(FILE *f) {
  fprintf(f,
          "usage: weir quantize --model IN.gguf --out OUT.gguf [--scheme awq_int4]\n"
          "                     [--calibration FILE] [--type q4_1] [config overrides]\n"
          "Packs the model with the quant scheme (calibrating it when the scheme asks for it)\n"
          "and writes a standard GGUF with Q4_1 weights, the activation scales folded into\n"
          "the preceding norms and projections; llama.cpp and other GGUF tools load it, and\n"
          "awq_int4 loads it without loss.\n"
          "  --scheme NAME       the quant scheme (default awq_int4; needs export_weight)\n"
          "  --calibration FILE  the calibration text (quant.calibration_text; default\n"
          "                      heldout.txt beside the model)\n"
          "  --out FILE          the output file\n"
          "  --type q4_1         the output weight type; q4_1 is the only one (the scheme's\n"
          "                      per-group f16 scale and min do not fit the K-quants)\n"
          "Inputs may hold any weight type weir reads; matrices the scheme does not take\n"
          "(q2_K..q6_K, q5_0, q5_1, iq4_nl, iq4_xs) are widened to f16 first, in OUT.src.tmp.\n"
          "Config overrides as for `weir serve`: --threads N, --plugin-dir DIR,\n"
          "--set quant.group_size=32, --set quant.calibration=false, ...\n");
}

typedef struct qz {
  const weir_gguf *g;
  weir_llama_hparams hp;
  const weir_quant_ops *q;
  void *qs;
  weir_calib *calib;
  char *err;
} qz;

/* A Q4_1 tensor made by the plugin, with the input scale it was packed with; or a Q8_0
 * source the plugin keeps as it is (copied, scale 1). */
typedef struct q4_out {
  uint8_t *data;
  size_t bytes;
  weir_dtype dtype; /* Q4_1 or Q8_0 */
  int64_t rows, cols;
  float *scale; /* [cols] */
} q4_out;

static void q4_free(q4_out *o) {
  free(o->data);
  free(o->scale);
  memset(o, 0, sizeof *o);
}

/* Packs the weights of one input site and exports each as Q4_1 (see calib.h for suffixes). */
static int export_site(qz *z, int layer, weir_llama_site site, const char *const *suffixes,
                       int n, int with_samples, q4_out *out) {
  void *w[4] = {0};
  int64_t ns = 0;
  const float *samples = with_samples ? weir_calib_samples(z->calib, layer, site, &ns) : NULL;
  int rc = weir_calib_pack_group(z->q, z->qs, z->g, &z->hp, layer, site, suffixes, n, samples,
                                 ns, w, z->err, ERRLEN);
  if (rc != WEIR_OK) return rc;
  for (int i = 0; i < n && rc == WEIR_OK; i++) {
    char name[96];
    if (layer >= 0) weir_gguf_blk_name(name, sizeof name, layer, suffixes[i]);
    else snprintf(name, sizeof name, "%s", suffixes[i]);
    const weir_gguf_tensor *t = weir_gguf_find_tensor(z->g, name);
    q4_out *o = &out[i];
    o->cols = t->t.ne[0];
    o->rows = t->t.ndim >= 2 ? t->t.ne[1] : 1;
    o->dtype = t->t.dtype == WEIR_DTYPE_Q8_0 ? WEIR_DTYPE_Q8_0 : WEIR_DTYPE_Q4_1;
    size_t rb = weir_dtype_row_bytes(o->dtype, o->cols);
    if (rb == 0) {
      snprintf(z->err, ERRLEN, "%s: %s has %lld columns; Q4_1 needs a multiple of 32",
               weir_gguf_path(z->g), name, (long long)o->cols);
      rc = WEIR_E_NOTSUP;
      break;
    }
    o->bytes = rb * (size_t)o->rows;
    o->data = malloc(o->bytes);
    o->scale = malloc(sizeof(float) * (size_t)o->cols);
    if (!o->data || !o->scale) {
      rc = WEIR_E_NOMEM;
      snprintf(z->err, ERRLEN, "out of memory exporting %s", name);
      break;
    }
    if (o->dtype == WEIR_DTYPE_Q8_0) { /* kept as it is by the scheme: the source bytes */
      for (size_t r = 0; r < (size_t)o->rows; r++)
        memcpy(o->data + r * rb, (const uint8_t *)t->t.data + r * t->t.nb[1], rb);
      for (int64_t k = 0; k < o->cols; k++) o->scale[k] = 1.0f;
      continue;
    }
    weir_quant_export ex = {.struct_size = sizeof ex, .dtype = WEIR_DTYPE_Q4_1, .data = o->data,
                            .bytes = o->bytes, .in_scale = o->scale};
    rc = z->q->export_weight(z->qs, w[i], &ex);
    if (rc != WEIR_OK)
      snprintf(z->err, ERRLEN, "the quant plugin could not export %s as q4_1: %s", name,
               weir_strerror(rc));
  }
  for (int i = 0; i < n; i++) z->q->release(z->qs, w[i]);
  if (rc != WEIR_OK)
    for (int i = 0; i < n; i++) q4_free(&out[i]);
  return rc;
}

/* A norm or bias vector as f32. */
static int load_vec(qz *z, const char *name, int64_t n, float **out) {
  const weir_gguf_tensor *t = weir_gguf_find_tensor(z->g, name);
  if (!t || t->nelements != n) {
    snprintf(z->err, ERRLEN, "%s: tensor %s is missing or has the wrong size",
             weir_gguf_path(z->g), name);
    return WEIR_E_FORMAT;
  }
  float *v = malloc(sizeof(float) * (size_t)n);
  if (!v) return WEIR_E_NOMEM;
  if (weir_dequantize_row(t->t.dtype, t->t.data, v, n) != WEIR_OK) {
    snprintf(z->err, ERRLEN, "%s: %s has dtype %s; norms and biases must be f32, f16 or bf16",
             weir_gguf_path(z->g), name, weir_dtype_name(t->t.dtype));
    free(v);
    return WEIR_E_NOTSUP;
  }
  *out = v;
  return WEIR_OK;
}

/* Divides every value of row r by div[r]: the f16 d (and m) of its Q4_1 / Q8_0 blocks are
 * rescaled, the quantized values stay. The plugin makes these divisors powers of two
 * (WEIR_QUANT_PACK_SCALE_POW2), so this is exact unless a value leaves the f16 range. */
static int fold_rows(qz *z, q4_out *o, const float *div, const char *what) {
  size_t rb = o->bytes / (size_t)o->rows;
  const size_t bb = o->dtype == WEIR_DTYPE_Q4_1 ? 20 : 34;
  const int nh = o->dtype == WEIR_DTYPE_Q4_1 ? 2 : 1;
  for (int64_t r = 0; r < o->rows; r++) {
    if (div[r] == 1.0f) continue;
    for (int64_t b = 0; b < o->cols / 32; b++) {
      uint8_t *blk = o->data + (size_t)r * rb + (size_t)b * bb;
      for (int k = 0; k < nh; k++) {
        uint16_t h = (uint16_t)(blk[2 * k] | blk[2 * k + 1] << 8);
        float v = weir_f16_to_f32(h) / div[r];
        if (!isfinite(v) || fabsf(v) > 65504.0f) {
          snprintf(z->err, ERRLEN, "folding the scales into %s: row %lld leaves the f16 range",
                   what, (long long)r);
          return WEIR_E_RANGE;
        }
        h = weir_f32_to_f16(v);
        blk[2 * k] = (uint8_t)h;
        blk[2 * k + 1] = (uint8_t)(h >> 8);
      }
    }
  }
  return WEIR_OK;
}

/* ---- the output file ---------------------------------------------------------------------- */

typedef enum { T_RAW, T_Q4, T_F32 } tkind;

typedef struct planned {
  const weir_gguf_tensor *src;
  tkind kind;
  const char *name; /* the name written: src->name, or output.weight for a tied model's
                       calibrated output projection (whose source is token_embd.weight) */
} planned;

static size_t kv_value_len(const weir_gguf_kv *kv) {
  switch (kv->type) {
  case WEIR_GGUF_U8: case WEIR_GGUF_I8: case WEIR_GGUF_BOOL: return 1;
  case WEIR_GGUF_U16: case WEIR_GGUF_I16: return 2;
  case WEIR_GGUF_U32: case WEIR_GGUF_I32: case WEIR_GGUF_F32: return 4;
  case WEIR_GGUF_U64: case WEIR_GGUF_I64: case WEIR_GGUF_F64: return 8;
  case WEIR_GGUF_STRING: {
    uint64_t n;
    memcpy(&n, kv->value, 8);
    return 8 + (size_t)n;
  }
  case WEIR_GGUF_ARRAY: return (size_t)(kv->arr.end - kv->value);
  default: return 0;
  }
}

static int is_our_key(const char *k) {
  return !strcmp(k, "general.file_type") || !strcmp(k, "general.alignment") ||
         !strncmp(k, "weir.quantize.", 14);
}

static tkind kind_of(const char *name) {
  if (weir_calib_is_linear_weight(name) || !strcmp(name, "token_embd.weight")) return T_Q4;
  size_t n = strlen(name);
  static const char *const f32s[] = {"attn_norm.weight", "ffn_norm.weight", "attn_v.bias"};
  if (!strcmp(name, "output_norm.weight")) return T_F32;
  for (size_t i = 0; i < 3; i++) {
    size_t m = strlen(f32s[i]);
    if (!strncmp(name, "blk.", 4) && n > m && !strcmp(name + n - m, f32s[i])) return T_F32;
  }
  return T_RAW;
}

/* The block a tensor belongs to, or -1. */
static int block_of(const char *name, int n_layer) {
  if (strncmp(name, "blk.", 4) != 0) return -1;
  char *end = NULL;
  long l = strtol(name + 4, &end, 10);
  if (end == name + 4 || *end != '.' || l < 0 || l >= n_layer) return -1;
  return (int)l;
}

static int put(weir_gguf_writer *w, const void *p, size_t n, qz *z) {
  int rc = weir_gguf_writer_put(w, p, n);
  if (rc != WEIR_OK) snprintf(z->err, ERRLEN, "writing the output: %s", weir_strerror(rc));
  return rc;
}

/* The tensors of one block, computed and held until written. */
typedef struct block_out {
  q4_out w[7];  /* q, k, v, o, gate, up, down */
  float *attn_norm, *ffn_norm, *bv;
} block_out;

static const char *const k_lin[7] = {"attn_q.weight", "attn_k.weight", "attn_v.weight",
                                      "attn_output.weight", "ffn_gate.weight", "ffn_up.weight",
                                      "ffn_down.weight"};

static void block_free(block_out *b) {
  for (int i = 0; i < 7; i++) q4_free(&b->w[i]);
  free(b->attn_norm);
  free(b->ffn_norm);
  free(b->bv);
  memset(b, 0, sizeof *b);
}

static int make_block(qz *z, int l, block_out *b) {
  const int64_t dim = z->hp.n_embd, kvd = (int64_t)z->hp.n_head_kv * z->hp.head_dim;
  char nm[96];
  int rc;
  if ((rc = export_site(z, l, WEIR_LLAMA_SITE_ATTN_IN, k_lin, 3, 1, &b->w[0])) ||
      (rc = export_site(z, l, WEIR_LLAMA_SITE_ATTN_OUT, k_lin + 3, 1, 1, &b->w[3])) ||
      (rc = export_site(z, l, WEIR_LLAMA_SITE_FFN_IN, k_lin + 4, 2, 1, &b->w[4])) ||
      (rc = export_site(z, l, WEIR_LLAMA_SITE_FFN_MID, k_lin + 6, 1, 1, &b->w[6])))
    return rc;
  if ((rc = load_vec(z, weir_gguf_blk_name(nm, sizeof nm, l, "attn_norm.weight"), dim,
                     &b->attn_norm)) ||
      (rc = load_vec(z, weir_gguf_blk_name(nm, sizeof nm, l, "ffn_norm.weight"), dim,
                     &b->ffn_norm)))
    return rc;
  if (z->hp.has_qkv_bias &&
      (rc = load_vec(z, weir_gguf_blk_name(nm, sizeof nm, l, "attn_v.bias"), kvd, &b->bv)))
    return rc;
  /* q, k and v were packed with one scale: it goes into attn_norm; gate/up's into ffn_norm. */
  for (int64_t k = 0; k < dim; k++) {
    b->attn_norm[k] /= b->w[0].scale[k];
    b->ffn_norm[k] /= b->w[4].scale[k];
  }
  /* attn_output's scale into the rows of attn_v: v row r feeds every o input channel whose
   * class is r (all of them have the same scale); its first such channel is that of the
   * first query head of KV head r / head_dim. */
  const int64_t hd = z->hp.head_dim, group = z->hp.n_head / z->hp.n_head_kv;
  float *div = malloc(sizeof(float) * (size_t)(kvd > z->hp.n_ff ? kvd : z->hp.n_ff));
  if (!div) return WEIR_E_NOMEM;
  for (int64_t r = 0; r < kvd; r++) div[r] = b->w[3].scale[(r / hd) * group * hd + r % hd];
  rc = fold_rows(z, &b->w[2], div, "attn_v");
  if (rc == WEIR_OK && b->bv)
    for (int64_t r = 0; r < kvd; r++) b->bv[r] /= div[r];
  /* ffn_down's scale into the rows of ffn_up (silu(gate) * up / s = silu(gate) * (up / s)). */
  if (rc == WEIR_OK) rc = fold_rows(z, &b->w[5], b->w[6].scale, "ffn_up");
  free(div);
  return rc;
}

/* Writes one tensor: converted from what was computed, or the source bytes. */
static int write_tensor(qz *z, weir_gguf_writer *w, const planned *p, const block_out *b,
                        const q4_out *embd, const q4_out *output, const float *out_norm) {
  const char *name = p->name;
  if (p->kind == T_RAW) return put(w, p->src->t.data, (size_t)p->src->nbytes, z);
  if (!strcmp(name, "token_embd.weight")) return put(w, embd->data, embd->bytes, z);
  if (!strcmp(name, "output.weight")) return put(w, output->data, output->bytes, z);
  if (!strcmp(name, "output_norm.weight"))
    return put(w, out_norm, sizeof(float) * (size_t)z->hp.n_embd, z);
  for (int i = 0; i < 7; i++) {
    size_t n = strlen(name), m = strlen(k_lin[i]);
    if (n > m && !strcmp(name + n - m, k_lin[i])) return put(w, b->w[i].data, b->w[i].bytes, z);
  }
  size_t n = strlen(name);
  if (n > 16 && !strcmp(name + n - 16, "attn_norm.weight"))
    return put(w, b->attn_norm, sizeof(float) * (size_t)z->hp.n_embd, z);
  if (n > 15 && !strcmp(name + n - 15, "ffn_norm.weight"))
    return put(w, b->ffn_norm, sizeof(float) * (size_t)z->hp.n_embd, z);
  if (n > 11 && !strcmp(name + n - 11, "attn_v.bias"))
    return put(w, b->bv, sizeof(float) * (size_t)p->src->nelements, z);
  snprintf(z->err, ERRLEN, "internal: no data for %s", name);
  return WEIR_E_INVAL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- inputs the scheme does not take ------------------------------------------------------ */

/* Whether tensor t must be widened for a plugin that takes the dtypes in mask: a matrix in a
 * block type weir_dequantize_row reads but the plugin does not. */
static int needs_widening(const weir_gguf_tensor *t, uint64_t mask) {
  return t->t.ndim >= 2 && weir_dtype_block_elems(t->t.dtype) > 1 &&
         !(mask & WEIR_DTYPE_BIT(t->t.dtype)) &&
         (WEIR_DEQUANTIZE_KQUANT_DTYPES & WEIR_DTYPE_BIT(t->t.dtype));
}

/* Writes a copy of g to path with every tensor needs_widening() selects as F16 (dequantized
 * row by row), everything else byte for byte. *n_widened counts the tensors converted. */
static int write_widened(const weir_gguf *g, uint64_t mask, const char *path, int64_t *n_widened,
                         char *err) {
  weir_gguf_writer *w = NULL;
  float *row = NULL;
  uint16_t *half = NULL;
  int rc = weir_gguf_writer_new(&w);
  if (rc) goto fail;
  if (weir_gguf_find_key(g, "general.alignment") &&
      (rc = weir_gguf_writer_set_alignment(w, weir_gguf_alignment(g))))
    goto fail;
  for (int64_t i = 0; i < weir_gguf_kv_count(g); i++) {
    const weir_gguf_kv *kv = weir_gguf_kv_at(g, i);
    if (!strcmp(kv->key, "general.alignment")) continue;
    if ((rc = weir_gguf_add_raw(w, kv->key, (uint32_t)kv->type, kv->value, kv_value_len(kv))))
      goto fail;
  }
  int64_t widest = 0;
  *n_widened = 0;
  for (int64_t i = 0; i < weir_gguf_tensor_count(g); i++) {
    const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
    int wide = needs_widening(t, mask);
    if (wide && t->t.ne[0] > widest) widest = t->t.ne[0];
    *n_widened += wide;
    if ((rc = weir_gguf_add_tensor(w, t->name, wide ? WEIR_DTYPE_F16 : t->t.dtype, t->t.ndim,
                                   t->t.ne, NULL)) < 0)
      goto fail;
    rc = WEIR_OK;
  }
  row = malloc(sizeof *row * (size_t)(widest > 0 ? widest : 1));
  half = malloc(sizeof *half * (size_t)(widest > 0 ? widest : 1));
  if (!row || !half) {
    rc = WEIR_E_NOMEM;
    goto fail;
  }
  if ((rc = weir_gguf_writer_begin(w, path, err, ERRLEN))) goto fail_quiet;
  for (int64_t i = 0; i < weir_gguf_tensor_count(g) && rc == WEIR_OK; i++) {
    const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
    if (!needs_widening(t, mask)) {
      rc = weir_gguf_writer_put(w, t->t.data, (size_t)t->nbytes);
      continue;
    }
    const int64_t cols = t->t.ne[0], rows = t->nelements / cols;
    for (int64_t r = 0; r < rows && rc == WEIR_OK; r++) {
      rc = weir_dequantize_row(t->t.dtype, (const uint8_t *)t->t.data + (size_t)r * t->t.nb[1],
                               row, cols);
      for (int64_t k = 0; k < cols && rc == WEIR_OK; k++) half[k] = weir_f32_to_f16(row[k]);
      if (rc == WEIR_OK) rc = weir_gguf_writer_put(w, half, sizeof *half * (size_t)cols);
    }
  }
  if (rc == WEIR_OK) rc = weir_gguf_writer_end(w, err, ERRLEN);
  else snprintf(err, ERRLEN, "writing %s: %s", path, weir_strerror(rc));
  if (rc != WEIR_OK) remove(path);
  goto out;
fail:
  snprintf(err, ERRLEN, "widening %s to f16: %s", weir_gguf_path(g), weir_strerror(rc));
fail_quiet:
out:
  free(row);
  free(half);
  weir_gguf_writer_free(w);
  return rc;
}

static int quantize(const weir_config *cfg, const char *out_path, qz *z) {
  int rc;
  weir_gguf *g = NULL;
  weir_tokenizer *tok = NULL;
  weir_plugin_set ps;
  memset(&ps, 0, sizeof ps);
  weir_gguf_writer *w = NULL;
  planned *plan = NULL;
  q4_out embd = {0}, output = {0};
  float *out_norm = NULL;
  block_out blk = {0};
  char *tmp = NULL, *src_tmp = NULL;
  const double t0 = now_s();

  if ((rc = weir_gguf_open(cfg->model_path, &g, z->err, ERRLEN))) goto out;
  z->g = g;
  if ((rc = weir_gguf_llama_hparams(g, &z->hp, z->err, ERRLEN)) ||
      (rc = weir_gguf_llama_check(g, &z->hp, z->err, ERRLEN)))
    goto out;
  if ((rc = weir_plugin_set_load_ex(cfg, NULL, &ps, z->err, ERRLEN))) goto out;
  z->q = ps.quant->ops;
  z->qs = ps.quant->self;
  if (!WEIR_QUANT_HAS_OP(z->q, export_weight)) {
    snprintf(z->err, ERRLEN, "quant scheme %s cannot write its weights to a file (it has no "
             "export_weight, SDK 1.1); use --scheme awq_int4", ps.quant->desc->name);
    rc = WEIR_E_NOTSUP;
    goto out;
  }
  /* Matrices the scheme does not take are widened to f16 first; the copy replaces the input
   * (before the tokenizer, which keeps views into the file). */
  int widen = 0;
  for (int64_t i = 0; i < weir_gguf_tensor_count(g) && !widen; i++)
    widen = needs_widening(weir_gguf_tensor_at(g, i), ps.quant->desc->dtypes);
  if (widen) {
    size_t ol = strlen(out_path) + 9;
    if (!(src_tmp = malloc(ol))) goto nomem;
    snprintf(src_tmp, ol, "%s.src.tmp", out_path);
    int64_t nw = 0;
    if ((rc = write_widened(g, ps.quant->desc->dtypes, src_tmp, &nw, z->err))) {
      free(src_tmp);
      src_tmp = NULL;
      goto out;
    }
    fprintf(stderr, "weir quantize: %lld matrices of %s are in types %s does not take; "
            "dequantized to f16 first (%s)\n", (long long)nw, cfg->model_path,
            ps.quant->desc->name, src_tmp);
    weir_gguf_close(g);
    g = NULL;
    z->g = NULL;
    if ((rc = weir_gguf_open(src_tmp, &g, z->err, ERRLEN))) goto out;
    z->g = g;
  }
  if ((rc = weir_tokenizer_from_gguf(g, &tok, z->err, ERRLEN))) goto out;
  if ((rc = weir_calib_prepare(cfg, g, tok, &ps, &z->calib, z->err, ERRLEN))) goto out;

  /* Token embedding, output projection and its norm first: the norm needs the output's
   * scale, and they are written before the blocks. */
  const char *embd_name[1] = {"token_embd.weight"}, *out_name[1] = {"output.weight"};
  if ((rc = export_site(z, -1, WEIR_LLAMA_SITE_OUTPUT, embd_name, 1, 0, &embd)) ||
      (rc = load_vec(z, "output_norm.weight", z->hp.n_embd, &out_norm)))
    goto out;
  /* A tied output projection is calibrated as its own tensor when there are samples (as at
   * load, llama.c): the file gets an output.weight and is no longer tied. */
  int64_t n_out = 0;
  const float *out_samples =
      z->calib ? weir_calib_samples(z->calib, -1, WEIR_LLAMA_SITE_OUTPUT, &n_out) : NULL;
  const int untie = weir_calib_untie_output(g, &z->hp, out_samples, n_out);
  if (z->hp.has_output || untie) {
    if ((rc = export_site(z, -1, WEIR_LLAMA_SITE_OUTPUT, untie ? embd_name : out_name, 1, 1,
                          &output)))
      goto out;
    for (int64_t k = 0; k < z->hp.n_embd; k++) out_norm[k] /= output.scale[k];
  }

  /* Metadata: everything but the keys this command sets. */
  if ((rc = weir_gguf_writer_new(&w))) goto nomem;
  if (weir_gguf_find_key(g, "general.alignment") &&
      (rc = weir_gguf_writer_set_alignment(w, weir_gguf_alignment(g))))
    goto out;
  for (int64_t i = 0; i < weir_gguf_kv_count(g); i++) {
    const weir_gguf_kv *kv = weir_gguf_kv_at(g, i);
    if (is_our_key(kv->key)) continue;
    if ((rc = weir_gguf_add_raw(w, kv->key, (uint32_t)kv->type, kv->value, kv_value_len(kv))))
      goto out;
  }
  char text[4096];
  const char *scheme = ps.quant->desc->name;
  if ((rc = weir_gguf_add_u32(w, "general.file_type", 3)) || /* LLAMA_FTYPE_MOSTLY_Q4_1 */
      (rc = weir_gguf_add_str(w, "weir.quantize.scheme", scheme)) ||
      (rc = weir_gguf_add_str(w, "weir.quantize.calibration_text",
                              z->calib ? weir_calib_text_path(cfg, text, sizeof text) : "")) ||
      (rc = weir_gguf_add_u32(w, "weir.quantize.calibration_tokens",
                              (uint32_t)weir_calib_num_tokens(z->calib))))
    goto out;

  /* Tensors: the ones outside the blocks in file order, then block by block (each block is
   * computed whole before its tensors are written, in file order). */
  const int64_t nt = weir_gguf_tensor_count(g);
  plan = calloc((size_t)nt + 1, sizeof *plan);
  if (!plan) goto nomem;
  int64_t np = 0;
  for (int64_t i = 0; i < nt; i++) {
    const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
    if (block_of(t->name, z->hp.n_layer) >= 0) continue;
    plan[np++] = (planned){t, kind_of(t->name), t->name};
    if (untie && !strcmp(t->name, "token_embd.weight"))
      plan[np++] = (planned){t, T_Q4, "output.weight"};
  }
  int64_t *first = calloc((size_t)z->hp.n_layer + 1, sizeof(int64_t));
  if (!first) goto nomem;
  for (int l = 0; l < z->hp.n_layer; l++) {
    first[l] = np;
    for (int64_t i = 0; i < nt; i++) {
      const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
      if (block_of(t->name, z->hp.n_layer) == l)
        plan[np++] = (planned){t, kind_of(t->name), t->name};
    }
  }
  first[z->hp.n_layer] = np;
  for (int64_t i = 0; i < np; i++) {
    const weir_gguf_tensor *t = plan[i].src;
    weir_dtype dt = plan[i].kind == T_Q4 && t->t.dtype != WEIR_DTYPE_Q8_0 ? WEIR_DTYPE_Q4_1
                    : plan[i].kind == T_F32 ? WEIR_DTYPE_F32 : t->t.dtype;
    if ((rc = weir_gguf_add_tensor(w, plan[i].name, dt, t->t.ndim, t->t.ne, NULL)) < 0) {
      snprintf(z->err, ERRLEN, "declaring %s in the output: %s", plan[i].name,
               weir_strerror(rc));
      free(first);
      goto out;
    }
  }
  rc = WEIR_OK;

  size_t plen = strlen(out_path) + 5;
  tmp = malloc(plen);
  if (!tmp) {
    free(first);
    goto nomem;
  }
  snprintf(tmp, plen, "%s.tmp", out_path);
  if ((rc = weir_gguf_writer_begin(w, tmp, z->err, ERRLEN))) {
    free(first);
    goto out;
  }
  for (int64_t i = 0; i < first[0] && rc == WEIR_OK; i++)
    rc = write_tensor(z, w, &plan[i], &blk, &embd, &output, out_norm);
  for (int l = 0; l < z->hp.n_layer && rc == WEIR_OK; l++) {
    if ((rc = make_block(z, l, &blk))) break;
    for (int64_t i = first[l]; i < first[l + 1] && rc == WEIR_OK; i++)
      rc = write_tensor(z, w, &plan[i], &blk, &embd, &output, out_norm);
    block_free(&blk);
  }
  free(first);
  if (rc == WEIR_OK) rc = weir_gguf_writer_end(w, z->err, ERRLEN);
  if (rc == WEIR_OK && rename(tmp, out_path) != 0) {
    snprintf(z->err, ERRLEN, "cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
    rc = WEIR_E_IO;
  }
  if (rc != WEIR_OK) {
    weir_gguf_writer_free(w);
    w = NULL;
    remove(tmp);
    goto out;
  }
  fprintf(stderr, "weir quantize: wrote %s (%s, %lld tensors) in %.1f s%s\n", out_path, scheme,
          (long long)np, now_s() - t0, z->calib ? "" : " (no calibration)");
  if (z->calib)
    fprintf(stderr, "weir quantize: calibration: %lld tokens, %.1f s\n",
            (long long)weir_calib_num_tokens(z->calib), weir_calib_seconds(z->calib));
  goto out;
nomem:
  rc = WEIR_E_NOMEM;
  snprintf(z->err, ERRLEN, "out of memory");
out:
  block_free(&blk);
  q4_free(&embd);
  q4_free(&output);
  free(out_norm);
  free(plan);
  free(tmp);
  weir_gguf_writer_free(w);
  weir_calib_free(z->calib);
  z->calib = NULL;
  weir_plugin_set_unload(&ps);
  weir_tokenizer_free(tok);
  weir_gguf_close(g);
  if (src_tmp) remove(src_tmp);
  free(src_tmp);
  return rc;
}

int weir__cmd_quantize(int argc, char **argv) {
  weir_config cfg;
  weir_config_defaults(&cfg);
  char err[ERRLEN] = "";
  int ret = 2;
  const char *out = NULL;
  int model_given = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--model") || !strncmp(argv[i], "--model=", 8)) model_given = 1;
  /* awq_int4 unless told otherwise; the flags below can change it. */
  if (weir_config_set(&cfg, "quant.scheme", "awq_int4", err, sizeof err) != WEIR_OK) goto bad;
  if (weir_config_from_args(&argc, argv, &cfg, err, sizeof err) != 0) goto bad;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      ret = 0;
      goto done;
    }
    if ((!strcmp(a, "--out") || !strcmp(a, "--scheme") || !strcmp(a, "--calibration") ||
         !strcmp(a, "--type")) &&
        !v) {
      fprintf(stderr, "weir quantize: %s needs a value\n", a);
      goto done;
    }
    if (!strcmp(a, "--out")) {
      out = v;
      i++;
    } else if (!strcmp(a, "--scheme")) {
      if (weir_config_set(&cfg, "quant.scheme", v, err, sizeof err) != WEIR_OK) goto bad;
      i++;
    } else if (!strcmp(a, "--type")) {
      /* The export is Q4_1 (f16 d and m per group); a K-quant would round it a second time. */
      if (strcasecmp(v, "q4_1") != 0) {
        fprintf(stderr, "weir quantize: --type %s: the scheme exports groups with an f16 scale "
                "and min each, written as q4_1; q2_K..q6_K keep 4- to 6-bit sub-block scales "
                "that cannot hold them, and the other types would round the weights a second "
                "time, so q4_1 is the only output type (K-quant files: llama-quantize, or "
                "`weir mkmodel --type` for random weights)\n", v);
        goto done;
      }
      i++;
    } else if (!strcmp(a, "--calibration")) {
      if (weir_config_set(&cfg, "quant.calibration_text", v, err, sizeof err) != WEIR_OK)
        goto bad;
      i++;
    } else {
      fprintf(stderr, "weir quantize: unknown option '%s'\n\n", a);
      usage(stderr);
      goto done;
    }
  }
  if (!model_given || !out) {
    fprintf(stderr, "weir quantize: --model and --out are required\n\n");
    usage(stderr);
    goto done;
  }
  /* The plugins run here, on the CPU. */
  if (weir_config_set(&cfg, "device.name", "cpu", err, sizeof err) != WEIR_OK) goto bad;
  weir_log_configure(cfg.log_level, cfg.log_format, NULL);
  qz z = {.err = err};
  ret = quantize(&cfg, out, &z) == WEIR_OK ? 0 : 1;
  if (ret) fprintf(stderr, "weir quantize: %s\n", err);
  goto done;
bad:
  fprintf(stderr, "weir quantize: %s\n", err);
done:
  weir_config_free(&cfg);
  return ret;
}
