/* A model loaded through the real loader and KV pool, for the suites that drive the model graph
 * (core/model/llama.c) directly: making its file with the real `weir mkmodel`, opening it,
 * running a step over the paged cache, comparing logits, and the one way to close it.
 * Header-only (each suite uses some of it). */
#ifndef WEIR_TESTS_WT_MODEL_H
#define WEIR_TESTS_WT_MODEL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "format/gguf.h"
#include "model/llama.h"
#include "plugin/loader.h"
#include "testutil.h"
#include "weir/attention.h"
#include "weir/device.h"
#include "weir/status.h"

typedef struct wt_model {
  weir_config cfg;
  weir_plugin_set plugins;
  weir_gguf *gguf;
  weir_llama *model;
  weir_kv_pool *pool;
  weir_kv_cache *kv; /* the pool's, borrowed */
  int32_t block_size;
  int32_t vocab;
} wt_model;

/* Frees what the suite opened, in reverse order; any member may be NULL / zeroed. */
static inline void wt_model_close(wt_model *f) {
  weir_llama_destroy(f->model);
  weir_kv_pool_destroy(f->pool);
  weir_plugin_set_unload(&f->plugins);
  weir_gguf_close(f->gguf);
  weir_config_free(&f->cfg);
}

/* Makes dir/name.gguf with the real `weir mkmodel ARGS`; returns its path (malloc'd). A failing
 * mkmodel fails the test (fatally), its output printed. */
static inline char *wt_mkmodel(const char *dir, const char *name, const char *args) {
  char *path = wt_strf("%s/%s.gguf", dir, name);
  char *cmd = wt_strf("%s mkmodel %s --out %s", WT_WEIR, args, path);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out = NULL;
  int rc = wt_run(argv, &out, 120000);
  if (rc != 0) fprintf(stderr, "\nmkmodel failed (%d): %s\n%s\n", rc, cmd, out ? out : "");
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  free(out);
  free(cmd);
  return path;
}

typedef struct wt_model_params {
  int32_t block_size;
  weir_dtype kv_dtype;
  int32_t num_blocks;
  int32_t max_model_len;
  int prefix_caching;
  /* Called once the plugins are loaded, before the pool is made from them (a suite may
   * present a plugin differently, e.g. as an older one); NULL: nothing. */
  void (*after_plugins)(wt_model *f);
} wt_model_params;

/* The first half of opening a model: f->cfg, already given defaults and any settings by the
 * caller, gets the test build's plugin directory (owned by the config, so that a later
 * weir_config_free frees it and weir_calib_llama_create can load through it), 2 threads and
 * p's KV dtype; then the plugins load, the file opens, its hyperparameters are read and
 * checked (weir_gguf_llama_check) and the KV pool is made with one group of its attention
 * shape. The caller then creates f->model (weir_llama_create or weir_calib_llama_create) and
 * sets f->vocab. Returns the first failing status with err filled; f is closed by
 * wt_model_close whatever this returns. */
static inline int wt_model_open_pool(wt_model *f, const char *path, const wt_model_params *p,
                                     char *err, size_t errlen) {
  f->cfg.plugin_dirs = calloc(1, sizeof(char *));
  if (!f->cfg.plugin_dirs || !(f->cfg.plugin_dirs[0] = strdup(WT_PLUGIN_DIR))) return WEIR_E_NOMEM;
  f->cfg.num_plugin_dirs = 1;
  f->cfg.kv_dtype = p->kv_dtype;
  f->cfg.threads = 2;
  f->block_size = p->block_size;
  int rc = weir_plugin_set_load(&f->cfg, NULL, &f->plugins);
  if (rc) return rc;
  if (p->after_plugins) p->after_plugins(f);
  if ((rc = weir_gguf_open(path, &f->gguf, err, errlen))) return rc;
  weir_llama_hparams hp;
  if ((rc = weir_gguf_llama_hparams(f->gguf, &hp, err, errlen))) return rc;
  if ((rc = weir_gguf_llama_check(f->gguf, &hp, err, errlen))) return rc;
  weir_attn_shape shape;
  weir_llama_attn_shape(&hp, &shape);
  weir_kv_pool_params kp = {.block_size = p->block_size,
                            .kv_dtype = p->kv_dtype,
                            .num_blocks = p->num_blocks,
                            .max_model_len = p->max_model_len,
                            .prefix_caching = p->prefix_caching,
                            .groups = &shape,
                            .num_groups = 1};
  if ((rc = weir_kv_pool_create(&kp, f->plugins.device, f->plugins.attention, &f->pool, err,
                                errlen)))
    return rc;
  f->kv = weir_kv_pool_cache(f->pool);
  return 0;
}

/* One sequence's part of a step: tokens [start, n_total) of `tokens` are computed, the
 * earlier ones being in its cache already. */
typedef struct wt_seq_run {
  weir_kv_seq *kv;
  const int32_t *tokens;
  int32_t n_total;
  int32_t start;
} wt_seq_run;

/* Runs one forward over ns (at most 8) sequences on f, whose block tables are laid out at the
 * stride of max_model_len, and copies every new token's logits (all rows) to host `out`
 * ([sum of new tokens][vocab]), through the device's copy op. Asserts (fatally) that each
 * step goes through. */
static inline void wt_model_forward(wt_model *f, wt_seq_run *seqs, int ns, int32_t max_model_len,
                                    float *out) {
  CU_ASSERT_FATAL(ns >= 1 && ns <= 8);
  const int32_t vocab = weir_llama_hparams_get(f->model)->n_vocab;
  int32_t T = 0;
  for (int s = 0; s < ns; s++) T += seqs[s].n_total - seqs[s].start;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)T), *pos = malloc(sizeof(int32_t) * (size_t)T);
  int32_t *slots = malloc(sizeof(int32_t) * (size_t)T), *rows = malloc(sizeof(int32_t) * (size_t)T);
  int32_t qsl[9], ctx[8];
  const int32_t stride = (max_model_len + f->block_size - 1) / f->block_size;
  int32_t *bt = calloc((size_t)ns * (size_t)stride, sizeof(int32_t));
  CU_ASSERT_FATAL(ids && pos && slots && rows && bt);
  int32_t t = 0;
  qsl[0] = 0;
  for (int s = 0; s < ns; s++) {
    wt_seq_run *r = &seqs[s];
    int32_t n_new = r->n_total - r->start;
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_len(r->kv), r->start);
    weir_kv_copy cp;
    int32_t ncp = 0;
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_append(f->kv, r->kv, n_new, slots + t, &cp, &ncp), 0);
    CU_ASSERT_EQUAL(ncp, 0);
    for (int32_t i = 0; i < n_new; i++) {
      ids[t + i] = r->tokens[r->start + i];
      pos[t + i] = r->start + i;
      rows[t + i] = t + i;
    }
    int32_t nb = 0;
    const int32_t *table = weir_kv_seq_block_table(r->kv, &nb);
    CU_ASSERT_FATAL(nb <= stride);
    memcpy(bt + (size_t)s * (size_t)stride, table, sizeof(int32_t) * (size_t)nb);
    t += n_new;
    qsl[s + 1] = t;
    ctx[s] = r->n_total;
  }
  weir_llama_batch b = {.num_tokens = T,
                        .tokens = ids,
                        .positions = pos,
                        .num_seqs = ns,
                        .query_start_loc = qsl,
                        .context_lens = ctx,
                        .block_tables = bt,
                        .max_blocks_per_seq = stride,
                        .slot_mapping = slots,
                        .num_logit_rows = T,
                        .logit_rows = rows};
  float *logits = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_llama_forward(f->model, &b, &logits), 0);
  /* CPU device: device memory is host memory; copy through the device op all the same. */
  const weir_device_ops *d = f->plugins.device->ops;
  CU_ASSERT_EQUAL_FATAL(d->copy_d2h(f->plugins.device->self, out, logits,
                                    sizeof(float) * (size_t)T * (size_t)vocab), 0);
  free(ids);
  free(pos);
  free(slots);
  free(rows);
  free(bt);
}

/* Largest |a - b| over the largest |b| (infinite when a NaN appears). */
static inline double wt_rel_err(const float *a, const double *b, size_t n) {
  double md = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
    if (fabs(b[i]) > mb) mb = fabs(b[i]);
  }
  return mb > 0 ? md / mb : md;
}

#endif
