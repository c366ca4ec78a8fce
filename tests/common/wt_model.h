/* A model loaded through the real loader and KV pool, for the suites that drive the model graph
 * (core/model/llama.c) directly: what such a suite opens and the one way to close it.
 * Header-only. */
#ifndef WEIR_TESTS_WT_MODEL_H
#define WEIR_TESTS_WT_MODEL_H

#include "config/config.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "format/gguf.h"
#include "model/llama.h"
#include "plugin/loader.h"

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

#endif
