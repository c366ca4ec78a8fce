/* The runtime assembly (see runtime.h): plugins, models, the shared KV pool. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "format/quant_auto.h"
#include "model/tokenizer.h"
#include "util/err.h"
#include "util/log.h"

int weir_runtime_open(weir_runtime *rt, const char *path, char *err, size_t errlen) {
  memset(rt, 0, sizeof *rt);
  weir_gguf *g = NULL;
  int rc = weir_gguf_open(path, &g, err, errlen);
  if (rc != WEIR_OK) return rc;
  rt->gguf[0] = g;
  rt->num_models = 1;
  rc = weir_gguf_llama_hparams(g, &rt->hp[0], err, errlen);
  if (rc == WEIR_OK) rc = weir_gguf_llama_check(g, &rt->hp[0], err, errlen);
  if (rc == WEIR_OK) rc = weir_tokenizer_from_gguf(g, &rt->tok, err, errlen);
  if (rc != WEIR_OK) weir_runtime_close(rt);
  return rc;
}

int weir_runtime_borrow(weir_runtime *rt, const weir_gguf *g, const weir_tokenizer *tok,
                        char *err, size_t errlen) {
  memset(rt, 0, sizeof *rt);
  rt->borrowed = 1;
  rt->gguf[0] = g;
  rt->tok = (weir_tokenizer *)tok; /* never freed nor changed: the caller's */
  rt->num_models = 1;
  int rc = weir_gguf_llama_hparams(g, &rt->hp[0], err, errlen);
  if (rc == WEIR_OK) rc = weir_gguf_llama_check(g, &rt->hp[0], err, errlen);
  if (rc != WEIR_OK) weir_runtime_close(rt);
  return rc;
}

int weir_runtime_load_plugins(weir_runtime *rt, const weir_config *cfg, weir_metrics *metrics,
                              char *err, size_t errlen) {
  if (rt->plugins_loaded) return WEIR_E_INVAL;
  /* quant.name "auto" picks its plugin from the opened model's weight types
   * (format/quant_auto.h); the copy only borrows cfg's strings for the call. */
  weir_config qc = *cfg;
  if (rt->gguf[0] && !(cfg->quant.path && *cfg->quant.path))
    qc.quant.name = (char *)weir_gguf_quant_resolve(rt->gguf[0], cfg->quant.name);
  int rc = weir_plugin_set_load_ex(&qc, metrics, &rt->plugins, err, errlen);
  if (rc == WEIR_OK) rt->plugins_loaded = 1;
  return rc;
}

/* Whether the draft's tokenizer is the target's, token for token; err names the first
 * difference. */
static int same_vocabulary(const weir_runtime *rt, const weir_tokenizer *dt,
                           const weir_llama_hparams *dhp, const char *path, char *err,
                           size_t errlen) {
  const weir_tokenizer *tt = rt->tok;
  const int32_t tn = weir_tokenizer_n_tokens(tt), dn = weir_tokenizer_n_tokens(dt);
  if (dhp->n_vocab != rt->hp[0].n_vocab || tn != dn) {
    weir_set_err(err, errlen, "draft model %s has a vocabulary of %d tokens (%d logit rows); "
                 "the target has %d (%d): a draft must share the target's tokenizer", path, dn,
                 dhp->n_vocab, tn, rt->hp[0].n_vocab);
    return WEIR_E_INVAL;
  }
  for (int32_t id = 0; id < tn; id++) {
    weir_tok_str a, b;
    if (weir_tokenizer_token_text(tt, id, &a) == WEIR_OK &&
        weir_tokenizer_token_text(dt, id, &b) == WEIR_OK && a.len == b.len &&
        memcmp(a.ptr, b.ptr, a.len) == 0)
      continue;
    weir_tok_str ta = {0}, tb = {0};
    weir_tokenizer_token_text(tt, id, &ta);
    weir_tokenizer_token_text(dt, id, &tb);
    weir_set_err(err, errlen, "draft model %s: token %d is \"%.*s\" in the draft but \"%.*s\" "
                 "in the target: a draft must share the target's tokenizer", path, id,
                 (int)(tb.len > 64 ? 64 : tb.len), tb.ptr ? tb.ptr : "",
                 (int)(ta.len > 64 ? 64 : ta.len), ta.ptr ? ta.ptr : "");
    return WEIR_E_INVAL;
  }
  if (weir_tokenizer_get_type(dt) != weir_tokenizer_get_type(tt)) {
    weir_set_err(err, errlen, "draft model %s: its tokenizer model differs from the target's",
                 path);
    return WEIR_E_INVAL;
  }
  return WEIR_OK;
}

int weir_runtime_open_draft(weir_runtime *rt, const char *path, char *err, size_t errlen) {
  if (rt->num_models != 1 || rt->pool) return WEIR_E_INVAL;
  weir_gguf *g = NULL;
  weir_llama_hparams dhp;
  int rc = weir_gguf_open(path, &g, err, errlen);
  if (rc == WEIR_OK) rc = weir_gguf_llama_hparams(g, &dhp, err, errlen);
  if (rc == WEIR_OK) rc = weir_gguf_llama_check(g, &dhp, err, errlen);
  if (rc != WEIR_OK) {
    char why[768];
    snprintf(why, sizeof why, "%s", err);
    weir_set_err(err, errlen, "draft model %s: %s", path, why);
    weir_gguf_close(g);
    return rc;
  }
  weir_tokenizer *dt = NULL;
  rc = weir_tokenizer_from_gguf(g, &dt, err, errlen);
  if (rc == WEIR_OK && (rc = same_vocabulary(rt, dt, &dhp, path, err, errlen)) != WEIR_OK)
    rt->draft_vocab_differs = 1;
  weir_tokenizer_free(dt);
  if (rc != WEIR_OK) {
    weir_gguf_close(g);
    return rc;
  }
  rt->gguf[1] = g;
  rt->hp[1] = dhp;
  rt->num_models = 2;
  return WEIR_OK;
}

/* cache.gpu_memory_utilization F as vLLM means it: weights plus KV cache take F of the
 * device's total memory, so the cache gets F x total minus the weights (their GGUF bytes,
 * every model the runtime holds). A device that does not know its memory, or a fraction
 * that leaves nothing for the cache, is refused with the numbers. */
static int cache_bytes_from_utilization(weir_runtime *rt, double frac, int64_t *out,
                                        char *err, size_t errlen) {
  const weir_plugin *dev = rt->plugins.device;
  weir_device_info info = {.struct_size = sizeof info};
  const weir_device_ops *ops = dev->ops;
  int rc = ops->info(dev->self, &info);
  if (rc != WEIR_OK || info.total_memory == 0) {
    weir_set_err(err, errlen, "cache.gpu_memory_utilization: device %s does not report its "
                 "memory; size the cache with cache.memory_bytes instead", dev->desc->name);
    return WEIR_E_NOTSUP;
  }
  uint64_t weights = 0;
  for (int32_t i = 0; i < rt->num_models; i++)
    weights += weir_gguf_file_size(rt->gguf[i]) - weir_gguf_data_offset(rt->gguf[i]);
  const double budget = frac * (double)info.total_memory;
  const double MiB = 1024.0 * 1024.0;
  if (budget < (double)weights + MiB) {
    weir_set_err(err, errlen, "cache.gpu_memory_utilization %g: %g x %.0f MiB of %s leaves "
                 "nothing for the KV cache after %.0f MiB of weights; raise it or size the "
                 "cache with cache.memory_bytes", frac, frac, (double)info.total_memory / MiB,
                 info.name, (double)weights / MiB);
    return WEIR_E_RANGE;
  }
  *out = (int64_t)(budget - (double)weights);
  weir_log(WEIR_LOG_INFO, "runtime",
           "KV cache %.0f MiB: gpu_memory_utilization %g of %.0f MiB (%s) minus %.0f MiB of "
           "weights", (double)*out / MiB, frac, (double)info.total_memory / MiB, info.name,
           (double)weights / MiB);
  return WEIR_OK;
}

int weir_runtime_create_pool(weir_runtime *rt, const weir_config *cfg,
                             const weir_runtime_pool_opts *p, char *err, size_t errlen) {
  if (!rt->plugins_loaded || rt->pool || rt->num_models < 1 || p->max_model_len <= 0 ||
      p->full_seqs < 0) {
    weir_set_err(err, errlen, "internal: the KV pool is created once, after the plugins");
    return WEIR_E_INVAL;
  }
  weir_attn_shape shapes[WEIR_RUNTIME_MAX_MODELS];
  for (int32_t i = 0; i < rt->num_models; i++) weir_llama_attn_shape(&rt->hp[i], &shapes[i]);
  weir_kv_pool_params kp = {.block_size = cfg->block_size,
                            .kv_dtype = cfg->kv_dtype,
                            .num_blocks = cfg->num_blocks,
                            .memory_bytes = cfg->memory_bytes,
                            .max_model_len = p->max_model_len,
                            .prefix_caching = p->prefix_caching,
                            /* blocks behind a sliding window are freed (one model only) */
                            .sliding_window =
                                rt->num_models > 1 ? 0 : weir_llama_kv_window(&rt->hp[0]),
                            .groups = shapes,
                            .num_groups = rt->num_models};
  if (p->full_seqs == 0 && cfg->num_blocks == 0 && cfg->gpu_memory_utilization > 0.0) {
    int rc = cache_bytes_from_utilization(rt, cfg->gpu_memory_utilization, &kp.memory_bytes,
                                          err, errlen);
    if (rc != WEIR_OK) return rc;
  }
  if (p->full_seqs > 0) {
    /* The pool's own block size (0: the default), so that the count is exact. */
    const int64_t bs = cfg->block_size > 0 ? cfg->block_size : WEIR_KV_DEFAULT_BLOCK_SIZE;
    kp.num_blocks = (int64_t)p->full_seqs * ((p->max_model_len + bs - 1) / bs);
    kp.memory_bytes = 0;
  }
  return weir_kv_pool_create(&kp, rt->plugins.device, rt->plugins.attention, &rt->pool, err,
                             errlen);
}

void weir_runtime_close(weir_runtime *rt) {
  if (!rt) return;
  for (int32_t i = WEIR_RUNTIME_MAX_MODELS - 1; i >= 0; i--) weir_llama_destroy(rt->model[i]);
  weir_kv_pool_destroy(rt->pool);
  if (rt->plugins_loaded) weir_plugin_set_unload(&rt->plugins);
  weir_gguf_close((weir_gguf *)rt->gguf[1]);
  if (!rt->borrowed) {
    weir_tokenizer_free(rt->tok);
    weir_gguf_close((weir_gguf *)rt->gguf[0]);
  }
  memset(rt, 0, sizeof *rt);
}
