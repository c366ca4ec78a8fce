/* The calibration pass and grouped packing (see calib.h). */
#include "model/calib.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "kv/kv_pool.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/log.h"
#include "weir/device.h"

#define LOG_COMPONENT "calib"
/* Tokens per forward pass of the calibration model. */
#define CALIB_WINDOW 512
/* Fewer tokens than this cannot say much about a layer's activations. */
#define CALIB_MIN_TOKENS 16

struct weir_calib {
  int n_layer;
  int64_t dims[WEIR_LLAMA_NUM_SITES];
  int64_t cap;       /* tokens each array holds */
  int64_t n[WEIR_LLAMA_NUM_SITES]; /* per site kind: tokens recorded so far (same per layer) */
  float **data;      /* [n_layer * 4 + 1]: the four block sites per layer, then the output */
  int64_t *count;    /* per array: rows recorded */
  int64_t tokens;
  double seconds;
  /* During the pass. */
  const weir_device_ops *dev;
  void *dev_self;
  int failed;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int slot(const weir_calib *c, int layer, weir_llama_site site) {
  if (site == WEIR_LLAMA_SITE_OUTPUT) return c->n_layer * 4;
  if (layer < 0 || layer >= c->n_layer || site < 0 || site > WEIR_LLAMA_SITE_FFN_MID) return -1;
  return layer * 4 + (int)site;
}

const float *weir_calib_samples(void *user, int layer, weir_llama_site site, int64_t *n) {
  const weir_calib *c = user;
  *n = 0;
  if (!c) return NULL;
  int s = slot(c, layer, site);
  if (s < 0 || !c->data[s] || c->count[s] == 0) return NULL;
  *n = c->count[s];
  return c->data[s];
}

int64_t weir_calib_num_tokens(const weir_calib *c) { return c ? c->tokens : 0; }
double weir_calib_seconds(const weir_calib *c) { return c ? c->seconds : 0; }

void weir_calib_free(weir_calib *c) {
  if (!c) return;
  if (c->data)
    for (int i = 0; i < c->n_layer * 4 + 1; i++) free(c->data[i]);
  free(c->data);
  free(c->count);
  free(c);
}

/* Copies the rows the model hands over into the site's array (device memory: copy_d2h). */
static void tap(void *user, int layer, weir_llama_site site, const float *x, int64_t rows,
                int64_t dim) {
  weir_calib *c = user;
  int s = slot(c, layer, site);
  if (s < 0 || c->failed) return;
  if (dim != c->dims[site]) {
    c->failed = WEIR_E_INVAL;
    return;
  }
  int64_t take = c->cap - c->count[s];
  if (rows < take) take = rows;
  if (take <= 0) return;
  int rc = c->dev->copy_d2h(c->dev_self, c->data[s] + c->count[s] * dim, x,
                            sizeof(float) * (size_t)(take * dim));
  if (rc != WEIR_OK) c->failed = rc;
  c->count[s] += take;
}

#ifndef WEIR_DATA_REL_DIR
#define WEIR_DATA_REL_DIR "../share/weir"
#endif

/* The generic text weir ships (share/weir/calibration.txt), found beside the binary as the
 * plugins are: <dir of the binary>/../share/weir, in the build tree as in the install tree. */
static void shipped_text_path(char *buf, size_t len) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
  if (!slash) {
    snprintf(buf, len, "%s/calibration.txt", WEIR_DATA_REL_DIR);
    return;
  }
  *slash = 0;
  char path[PATH_MAX + 64], real[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s/calibration.txt", exe, WEIR_DATA_REL_DIR);
  snprintf(buf, len, "%s", realpath(path, real) ? real : path); /* no "bin/.." in messages */
}

const char *weir_calib_text_path(const weir_config *cfg, char *buf, size_t len) {
  if (cfg->calibration_text && cfg->calibration_text[0]) {
    snprintf(buf, len, "%s", cfg->calibration_text);
    return buf;
  }
  /* The held-out split of the model's own training text, when it lies beside the model
   * (the trained demo pair's), else the generic text weir ships. */
  char *copy = strdup(cfg->model_path ? cfg->model_path : ".");
  if (copy) {
    snprintf(buf, len, "%s/heldout.txt", dirname(copy));
    free(copy);
    if (access(buf, R_OK) == 0) return buf;
  }
  shipped_text_path(buf, len);
  return buf;
}

/* The calibration plugins: CPU device with the same thread count, cpu_paged with an f32 KV
 * cache, fp16 keeping F32 weights in f32 (F16/BF16 sources are exact in it), no drafter;
 * the plugin directories of the serving config. */
static int load_calib_plugins(const weir_config *cfg, weir_plugin_set *ps, char *err,
                              size_t errlen) {
  weir_config c2;
  weir_config_defaults(&c2);
  c2.threads = cfg->threads;
  c2.kv_dtype = WEIR_DTYPE_F32;
  char **dirs = c2.plugin_dirs;
  int ndirs = c2.num_plugin_dirs;
  c2.plugin_dirs = cfg->plugin_dirs; /* borrowed, put back before the free */
  c2.num_plugin_dirs = cfg->num_plugin_dirs;
  int rc = weir_plugin_set_load_ex(&c2, NULL, ps, err, errlen);
  c2.plugin_dirs = dirs;
  c2.num_plugin_dirs = ndirs;
  weir_config_free(&c2);
  return rc;
}

int weir_calib_run(const weir_config *cfg, const weir_gguf *g, const weir_tokenizer *tok,
                   const char *text_path, int64_t max_tokens, weir_calib **out, char *err,
                   size_t errlen) {
  *out = NULL;
  int rc;
  size_t text_len = 0;
  int32_t *ids = NULL;
  size_t n_ids = 0;
  weir_calib *c = NULL;
  weir_llama *model = NULL;
  weir_kv_pool *pool = NULL;
  weir_plugin_set ps;
  memset(&ps, 0, sizeof ps);
  int32_t *pos = NULL, *rows = NULL, *bt = NULL, *toks = NULL;
  const double t0 = now_s();

  char *text = weir_read_file(text_path, &text_len);
  if (!text) {
    weir_set_err(err, errlen, "calibration text %s: %s (set quant.calibration_text = FILE, "
                  "or turn calibration off: quant.calibration = false)",
                  text_path, strerror(errno ? errno : EIO));
    return WEIR_E_IO;
  }
  rc = weir_tokenizer_encode(tok, text, text_len, 0, &ids, &n_ids);
  free(text);
  if (rc != WEIR_OK) {
    weir_set_err(err, errlen, "calibration text %s: cannot tokenize it: %s", text_path,
                  weir_strerror(rc));
    return rc;
  }
  if ((int64_t)n_ids < CALIB_MIN_TOKENS) {
    weir_set_err(err, errlen, "calibration text %s holds %zu tokens; at least %d are needed",
                  text_path, n_ids, CALIB_MIN_TOKENS);
    free(ids);
    return WEIR_E_INVAL;
  }

  weir_llama_hparams hp;
  if ((rc = weir_gguf_llama_hparams(g, &hp, err, errlen)) != WEIR_OK) goto out;
  const int32_t bos = weir_tokenizer_bos(tok);
  int32_t window = hp.n_ctx_train < CALIB_WINDOW ? hp.n_ctx_train : CALIB_WINDOW;
  if (window < 2) window = 2;
  /* Tokens the pass will run: windows of the text, each led by BOS when there is one. */
  const int64_t per_window = window - (bos >= 0 ? 1 : 0);
  int64_t total = 0;
  for (size_t off = 0; off < n_ids && total < max_tokens; off += (size_t)per_window) {
    int64_t n = (int64_t)(n_ids - off) < per_window ? (int64_t)(n_ids - off) : per_window;
    total += n + (bos >= 0 ? 1 : 0);
  }
  if (total > max_tokens) total = max_tokens;

  c = calloc(1, sizeof *c);
  if (!c) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  c->n_layer = hp.n_layer;
  c->dims[WEIR_LLAMA_SITE_ATTN_IN] = hp.n_embd;
  c->dims[WEIR_LLAMA_SITE_ATTN_OUT] = (int64_t)hp.n_head * hp.head_dim;
  c->dims[WEIR_LLAMA_SITE_FFN_IN] = hp.n_embd;
  c->dims[WEIR_LLAMA_SITE_FFN_MID] = hp.n_ff;
  c->dims[WEIR_LLAMA_SITE_OUTPUT] = hp.n_embd;
  c->cap = total;
  c->data = calloc((size_t)hp.n_layer * 4 + 1, sizeof(float *));
  c->count = calloc((size_t)hp.n_layer * 4 + 1, sizeof(int64_t));
  if (!c->data || !c->count) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  size_t bytes = 0;
  for (int i = 0; i < hp.n_layer * 4 + 1; i++) {
    int64_t dim = i == hp.n_layer * 4 ? c->dims[WEIR_LLAMA_SITE_OUTPUT] : c->dims[i % 4];
    size_t sz = sizeof(float) * (size_t)total * (size_t)dim;
    c->data[i] = malloc(sz);
    bytes += sz;
    if (!c->data[i]) {
      weir_set_err(err, errlen, "calibration: no memory for %lld tokens of samples (%zu MiB so "
                    "far); lower awq_int4's calibration_samples", (long long)total, bytes >> 20);
      rc = WEIR_E_NOMEM;
      goto out;
    }
  }

  if ((rc = load_calib_plugins(cfg, &ps, err, errlen)) != WEIR_OK) goto out;
  c->dev = ps.device->ops;
  c->dev_self = ps.device->self;
  const int32_t nblocks = (window + 15) / 16;
  weir_attn_shape shape;
  weir_llama_attn_shape(&hp, &shape);
  weir_kv_pool_params kp = {.block_size = 16, .kv_dtype = WEIR_DTYPE_F32, .num_blocks = nblocks,
                            .max_model_len = window, .groups = &shape, .num_groups = 1};
  if ((rc = weir_kv_pool_create(&kp, ps.device, ps.attention, &pool, err, errlen)) != WEIR_OK)
    goto out;
  weir_llama_opts mo = {.max_num_tokens = window, .max_num_seqs = 1, .max_logit_rows = window};
  if ((rc = weir_llama_create(g, &ps, &mo, pool, 0, &model, err, errlen)) != WEIR_OK) goto out;
  weir_llama_set_tap(model, tap, c);
  pos = malloc(sizeof(int32_t) * (size_t)window);
  rows = malloc(sizeof(int32_t) * (size_t)window);
  toks = malloc(sizeof(int32_t) * (size_t)window);
  bt = malloc(sizeof(int32_t) * (size_t)nblocks);
  if (!pos || !rows || !toks || !bt) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  for (int32_t i = 0; i < window; i++) pos[i] = rows[i] = i;
  for (int32_t i = 0; i < nblocks; i++) bt[i] = i;
  weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "calibration: %lld tokens of %s (%zu in the text), "
           "windows of %d, %zu MiB of samples", (long long)total, text_path, n_ids, window,
           bytes >> 20);
  size_t off = 0;
  int64_t done = 0, windows = 0;
  double last_note = now_s();
  while (done < total && off < n_ids) {
    int32_t T = 0;
    if (bos >= 0) toks[T++] = bos;
    while (T < window && off < n_ids && done + T < total) toks[T++] = ids[off++];
    int32_t qsl[2] = {0, T}, ctx[1] = {T};
    weir_llama_batch b = {.num_tokens = T, .tokens = toks, .positions = pos, .num_seqs = 1,
                          .query_start_loc = qsl, .context_lens = ctx, .block_tables = bt,
                          .max_blocks_per_seq = nblocks, .slot_mapping = pos,
                          .num_logit_rows = T, .logit_rows = rows};
    float *logits = NULL;
    rc = weir_llama_forward(model, &b, &logits);
    if (rc == WEIR_OK && c->failed) rc = c->failed;
    if (rc != WEIR_OK) {
      weir_set_err(err, errlen, "calibration: the forward pass failed: %s", weir_strerror(rc));
      goto out;
    }
    done += T;
    windows++;
    if (now_s() - last_note > 2.0 || done >= total) {
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "calibration: %lld/%lld tokens (%lld windows, "
               "%.1f s)", (long long)done, (long long)total, (long long)windows, now_s() - t0);
      last_note = now_s();
    }
  }
  c->tokens = done;
  c->seconds = now_s() - t0;
  rc = WEIR_OK;
out:
  weir_llama_destroy(model);
  weir_kv_pool_destroy(pool);
  weir_plugin_set_unload(&ps);
  free(ids);
  free(pos);
  free(rows);
  free(toks);
  free(bt);
  if (rc != WEIR_OK) {
    weir_calib_free(c);
    return rc;
  }
  c->dev = NULL;
  c->dev_self = NULL;
  *out = c;
  return WEIR_OK;
}

int weir_calib_untie_output(const weir_gguf *g, const weir_llama_hparams *hp,
                            const float *samples, int64_t n) {
  if (hp->has_output || !samples || n <= 0) return 0;
  const weir_gguf_tensor *t = weir_gguf_find_tensor(g, "token_embd.weight");
  return t && (t->t.dtype == WEIR_DTYPE_F32 || t->t.dtype == WEIR_DTYPE_F16 ||
               t->t.dtype == WEIR_DTYPE_BF16);
}

int weir_calib_is_linear_weight(const char *name) {
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

int weir_calib_prepare(const weir_config *cfg, const weir_gguf *g, const weir_tokenizer *tok,
                       const weir_plugin_set *plugins, weir_calib **out, char *err,
                       size_t errlen) {
  *out = NULL;
  const weir_quant_ops *q = plugins->quant->ops;
  if (!WEIR_QUANT_HAS_OP(q, calibration_samples)) return WEIR_OK;
  /* Ask for every source type among the linear weights. */
  int64_t want = 0;
  uint64_t asked = 0;
  for (int64_t i = 0; i < weir_gguf_tensor_count(g); i++) {
    const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
    if (!weir_calib_is_linear_weight(t->name) || (asked & WEIR_DTYPE_BIT(t->t.dtype))) continue;
    asked |= WEIR_DTYPE_BIT(t->t.dtype);
    int64_t n = q->calibration_samples(plugins->quant->self, t->t.dtype);
    if (n > want) want = n;
  }
  if (want <= 0) return WEIR_OK;
  char path[4096];
  weir_calib_text_path(cfg, path, sizeof path);
  size_t pl = strlen(path);
  if (cfg->calibration_text && cfg->calibration_text[0])
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "calibration text: %s (quant.calibration_text)", path);
  else if (pl >= 12 && !strcmp(path + pl - 12, "/heldout.txt"))
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "calibration text: %s (heldout.txt beside the model; "
             "quant.calibration_text is not set)", path);
  else
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "calibration text: %s, the generic text weir ships "
             "(quant.calibration_text is not set and no heldout.txt lies beside the model; set "
             "it to text like what the model will serve for a better calibration)", path);
  int rc = weir_calib_run(cfg, g, tok, path, want, out, err, errlen);
  if (rc == WEIR_OK)
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "calibration: %lld tokens in %.1f s",
             (long long)(*out)->tokens, (*out)->seconds);
  return rc;
}

int weir_calib_llama_create(const weir_config *cfg, const weir_gguf *g, const weir_tokenizer *tok,
                            const weir_plugin_set *plugins, const weir_llama_opts *opts,
                            weir_kv_pool *kv, int32_t kv_group, weir_llama **out, char *err,
                            size_t errlen) {
  weir_calib *calib = NULL;
  *out = NULL;
  int rc = weir_calib_prepare(cfg, g, tok, plugins, &calib, err, errlen);
  if (rc != WEIR_OK) return rc;
  weir_llama_opts o = *opts;
  o.samples = calib ? weir_calib_samples : NULL;
  o.samples_user = calib;
  rc = weir_llama_create(g, plugins, &o, kv, kv_group, out, err, errlen);
  weir_calib_free(calib);
  return rc;
}

int32_t *weir_calib_o_classes(const weir_llama_hparams *hp) {
  if (hp->n_head_kv <= 0 || hp->n_head == hp->n_head_kv) return NULL;
  const int64_t hd = hp->head_dim, n = (int64_t)hp->n_head * hd;
  const int group = hp->n_head / hp->n_head_kv;
  int32_t *cls = malloc(sizeof(int32_t) * (size_t)n);
  if (!cls) return NULL;
  for (int64_t c = 0; c < n; c++) cls[c] = (int32_t)((c / hd) / group * hd + c % hd);
  return cls;
}

int weir_calib_pack_group(const weir_quant_ops *q, void *qself, const weir_gguf *g,
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
  int32_t *cls = site == WEIR_LLAMA_SITE_ATTN_OUT && samples ? weir_calib_o_classes(hp) : NULL;
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
