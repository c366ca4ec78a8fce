/* The calibration pass (see calib.h); the grouped packing it feeds is model/llama_pack.c. */
#include "runtime/calib.h"

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
#include "model/llama_pack.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
#include "runtime/runtime.h"
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

/* The calibration plugins' configuration: CPU device with the same thread count, paged
 * with an f32 KV cache, fp16 keeping F32 weights in f32 (F16/BF16 sources are exact in it), no
 * drafter, the default block size; the plugin directories of the serving config, borrowed
 * (calib_config_free gives them back before the free). */
static void calib_config(const weir_config *cfg, weir_config *c2, char ***dirs, int *ndirs) {
  weir_config_defaults(c2);
  c2->threads = cfg->threads;
  c2->kv_dtype = WEIR_DTYPE_F32;
  *dirs = c2->plugin_dirs;
  *ndirs = c2->num_plugin_dirs;
  c2->plugin_dirs = cfg->plugin_dirs;
  c2->num_plugin_dirs = cfg->num_plugin_dirs;
}

static void calib_config_free(weir_config *c2, char **dirs, int ndirs) {
  c2->plugin_dirs = dirs;
  c2->num_plugin_dirs = ndirs;
  weir_config_free(c2);
}

/* The sample arrays for `total` tokens of a model of shape hp. *bytes receives their size. */
static int calib_new(const weir_llama_hparams *hp, int64_t total, weir_calib **out,
                     size_t *bytes, char *err, size_t errlen) {
  weir_calib *c = calloc(1, sizeof *c);
  *out = c;
  *bytes = 0;
  if (!c) return WEIR_E_NOMEM;
  c->n_layer = hp->n_layer;
  c->dims[WEIR_LLAMA_SITE_ATTN_IN] = hp->n_embd;
  c->dims[WEIR_LLAMA_SITE_ATTN_OUT] = (int64_t)hp->n_head * hp->head_dim;
  c->dims[WEIR_LLAMA_SITE_FFN_IN] = hp->n_embd;
  c->dims[WEIR_LLAMA_SITE_FFN_MID] = hp->n_ff;
  c->dims[WEIR_LLAMA_SITE_OUTPUT] = hp->n_embd;
  c->cap = total;
  c->data = calloc((size_t)hp->n_layer * 4 + 1, sizeof(float *));
  c->count = calloc((size_t)hp->n_layer * 4 + 1, sizeof(int64_t));
  if (!c->data || !c->count) return WEIR_E_NOMEM;
  for (int i = 0; i < hp->n_layer * 4 + 1; i++) {
    int64_t dim = i == hp->n_layer * 4 ? c->dims[WEIR_LLAMA_SITE_OUTPUT] : c->dims[i % 4];
    size_t sz = sizeof(float) * (size_t)total * (size_t)dim;
    c->data[i] = malloc(sz);
    *bytes += sz;
    if (!c->data[i]) {
      weir_set_err(err, errlen, "calibration: no memory for %lld tokens of samples (%zu MiB so "
                    "far); lower awq_int4's calibration_samples", (long long)total, *bytes >> 20);
      return WEIR_E_NOMEM;
    }
  }
  return WEIR_OK;
}

/* Runs the model (whose tap records into c) over the text's windows until `total` tokens:
 * each window a KV sequence of its own, whose blocks and slots the cache hands out. */
static int calib_windows(weir_calib *c, weir_runtime *rt, const int32_t *ids, size_t n_ids,
                         int32_t window, int64_t total, double t0, char *err, size_t errlen) {
  const int32_t bos = weir_tokenizer_bos(rt->tok);
  weir_kv_cache *kv = weir_kv_pool_cache(rt->pool);
  weir_step_batch batch;
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)window);
  int rc = weir_step_batch_init(&batch, window, 1, window,
                                weir_kv_pool_geometry(rt->pool)->max_blocks_per_seq);
  if (rc != WEIR_OK || !toks) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  size_t off = 0;
  int64_t done = 0, windows = 0;
  double last_note = now_s();
  while (done < total && off < n_ids) {
    int32_t T = 0;
    if (bos >= 0) toks[T++] = bos;
    while (T < window && off < n_ids && done + T < total) toks[T++] = ids[off++];
    weir_kv_seq *seq = NULL;
    weir_step_batch_reset(&batch, 0);
    rc = weir_kv_seq_create(kv, &seq);
    if (rc == WEIR_OK) rc = weir_kv_seq_append(kv, seq, T, NULL, NULL, NULL);
    if (rc == WEIR_OK) rc = weir_step_batch_add(&batch, kv, seq, toks, 0, T);
    if (rc == WEIR_OK) rc = weir_step_batch_add_rows(&batch, 0, T);
    float *logits = NULL;
    if (rc == WEIR_OK) {
      const weir_llama_batch b = weir_step_batch_view(&batch);
      rc = weir_llama_forward(rt->model[0], &b, &logits);
    }
    weir_kv_seq_free(kv, seq);
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
out:
  weir_step_batch_free(&batch);
  free(toks);
  return rc;
}

int weir_calib_run(const weir_config *cfg, const weir_gguf *g, const weir_tokenizer *tok,
                   const char *text_path, int64_t max_tokens, weir_calib **out, char *err,
                   size_t errlen) {
  *out = NULL;
  int rc;
  size_t text_len = 0, bytes = 0;
  int32_t *ids = NULL;
  size_t n_ids = 0;
  weir_calib *c = NULL;
  weir_runtime rt;
  memset(&rt, 0, sizeof rt);
  weir_config c2;
  char **own_dirs = NULL;
  int own_ndirs = 0;
  calib_config(cfg, &c2, &own_dirs, &own_ndirs);
  const double t0 = now_s();

  char *text = weir_read_file(text_path, &text_len);
  if (!text) {
    weir_set_err(err, errlen, "calibration text %s: %s (set quant.calibration_text = FILE, "
                  "or turn calibration off: quant.calibration = false)",
                  text_path, strerror(errno ? errno : EIO));
    rc = WEIR_E_IO;
    goto out;
  }
  rc = weir_tokenizer_encode(tok, text, text_len, 0, &ids, &n_ids);
  free(text);
  if (rc != WEIR_OK) {
    weir_set_err(err, errlen, "calibration text %s: cannot tokenize it: %s", text_path,
                  weir_strerror(rc));
    goto out;
  }
  if ((int64_t)n_ids < CALIB_MIN_TOKENS) {
    weir_set_err(err, errlen, "calibration text %s holds %zu tokens; at least %d are needed",
                  text_path, n_ids, CALIB_MIN_TOKENS);
    rc = WEIR_E_INVAL;
    goto out;
  }

  if ((rc = weir_runtime_borrow(&rt, g, tok, err, errlen)) != WEIR_OK) goto out;
  const weir_llama_hparams *hp = &rt.hp[0];
  const int32_t bos = weir_tokenizer_bos(tok);
  int32_t window = hp->n_ctx_train < CALIB_WINDOW ? hp->n_ctx_train : CALIB_WINDOW;
  if (window < 2) window = 2;
  /* Tokens the pass will run: windows of the text, each led by BOS when there is one. */
  const int64_t per_window = window - (bos >= 0 ? 1 : 0);
  int64_t total = 0;
  for (size_t off = 0; off < n_ids && total < max_tokens; off += (size_t)per_window) {
    int64_t n = (int64_t)(n_ids - off) < per_window ? (int64_t)(n_ids - off) : per_window;
    total += n + (bos >= 0 ? 1 : 0);
  }
  if (total > max_tokens) total = max_tokens;
  if ((rc = calib_new(hp, total, &c, &bytes, err, errlen)) != WEIR_OK) goto out;

  /* The runtime: one window's KV (a single sequence), the model without samples. */
  const weir_runtime_pool_opts po = {.max_model_len = window, .full_seqs = 1};
  weir_llama_opts mo = {.max_num_tokens = window, .max_num_seqs = 1, .max_logit_rows = window};
  if ((rc = weir_runtime_load_plugins(&rt, &c2, NULL, err, errlen)) != WEIR_OK ||
      (rc = weir_runtime_create_pool(&rt, &c2, &po, err, errlen)) != WEIR_OK ||
      /* The model itself without samples (weir_runtime_load_model would calibrate): the
       * runtime owns it all the same and closes it. */
      (rc = weir_llama_create(g, &rt.plugins, &mo, rt.pool, 0, &rt.model[0], err, errlen)) !=
          WEIR_OK)
    goto out;
  c->dev = rt.plugins.device->ops;
  c->dev_self = rt.plugins.device->self;
  weir_llama_set_tap(rt.model[0], tap, c);
  weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "calibration: %lld tokens of %s (%zu in the text), "
           "windows of %d, %zu MiB of samples", (long long)total, text_path, n_ids, window,
           bytes >> 20);
  rc = calib_windows(c, &rt, ids, n_ids, window, total, t0, err, errlen);
  c->seconds = now_s() - t0;
out:
  weir_runtime_close(&rt);
  calib_config_free(&c2, own_dirs, own_ndirs);
  free(ids);
  if (rc != WEIR_OK) {
    weir_calib_free(c);
    return rc;
  }
  c->dev = NULL;
  c->dev_self = NULL;
  *out = c;
  return WEIR_OK;
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
    if (!weir_llama_is_linear_weight(t->name) || (asked & WEIR_DTYPE_BIT(t->t.dtype))) continue;
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

