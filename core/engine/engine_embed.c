/* Embeddings on the engine thread (issue 33): the service's embedding call
 * (service.h, weir_service_embed*) queues a job here and blocks; the engine thread runs the
 * queued jobs between two steps, so an embedding's forward passes never overlap generation's
 * and the plugins keep their one-thread contract.
 *
 * The served model as the source: the input runs as a prefill-only sequence of its own in
 * the shared KV pool, in chunks of at most a step's tokens (and, for mean pooling, a step's
 * rows), through weir_llama_forward_hidden; the hidden states after the final norm are
 * pooled on the host in double precision; the sequence is freed (nothing registered in the
 * prefix cache) before the next step. A dedicated embedding model (model/bert.h) runs the
 * whole input in one pass of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "model/bert.h"
#include "util/log.h"

struct weir__engine_embed_job {
  const int32_t *ids;
  int32_t n;
  float *out;
  char *err;
  size_t errlen;
  int rc;
  int done;
  struct weir__engine_embed_job *next;
};

/* The served model over one input: pooled into out[dim] (not normalised). */
static int embed_llama(weir_engine *e, const int32_t *ids, int32_t n, float *out, char *err,
                       size_t errlen) {
  const int32_t dim = e->rt.hp[0].n_embd;
  const int mean = e->embed_pooling == WEIR__EMBED_MEAN;
  /* Mean pooling reads every token's row; last and cls one row of one chunk. */
  int32_t chunk = e->max_tokens_step;
  if (mean && chunk > e->max_rows) chunk = e->max_rows;
  if (weir_kv_cache_blocks_needed(e->kv, n) > weir_kv_cache_num_blocks(e->kv)) {
    snprintf(err, errlen, "an input of %d tokens does not fit in the KV cache (%d blocks)",
             (int)n, (int)weir_kv_cache_num_blocks(e->kv));
    return WEIR_E_RANGE;
  }
  double *acc = calloc((size_t)dim, sizeof *acc);
  weir_kv_seq *seq = NULL;
  int rc = acc ? weir_kv_seq_create(e->kv, &seq) : WEIR_E_NOMEM;
  if (rc != WEIR_OK) goto out_acc;
  for (int32_t start = 0; start < n; start += chunk) {
    const int32_t c = n - start < chunk ? n - start : chunk;
    rc = weir_kv_seq_append(e->kv, seq, c, NULL, NULL, NULL);
    if (rc == WEIR_E_NOSPACE) {
      snprintf(err, errlen, "the KV cache has no room for this input right now; retry later");
      rc = WEIR_E_BUSY;
    }
    if (rc != WEIR_OK) goto out_seq;
    weir_step_batch_reset(&e->eb, e->bt_stride);
    rc = weir_step_batch_add(&e->eb, e->kv, seq, ids + start, start, c);
    if (rc != WEIR_OK) goto out_seq;
    int32_t first = -1, rows = 0;
    if (mean) first = 0, rows = c;
    else if (e->embed_pooling == WEIR__EMBED_CLS && start == 0) first = 0, rows = 1;
    else if (e->embed_pooling == WEIR__EMBED_LAST && start + c == n) first = c - 1, rows = 1;
    if (rows == 0) {
      /* A chunk whose rows nobody reads still writes the K/V later chunks attend to: ask
       * for one row and throw it away. */
      first = c - 1;
      rows = 1;
    }
    if ((rc = weir_step_batch_add_rows(&e->eb, first, rows)) != WEIR_OK) goto out_seq;
    const weir_llama_batch view = weir_step_batch_view(&e->eb);
    rc = weir_llama_forward_hidden(e->model, &view, e->embed_rows);
    if (rc != WEIR_OK) {
      snprintf(err, errlen, "the model's forward pass failed: %s", weir_strerror(rc));
      goto out_seq;
    }
    const int wanted = mean || (e->embed_pooling == WEIR__EMBED_CLS && start == 0) ||
                       (e->embed_pooling == WEIR__EMBED_LAST && start + c == n);
    if (!wanted) continue;
    for (int32_t r = 0; r < rows; r++)
      for (int32_t i = 0; i < dim; i++) acc[i] += e->embed_rows[(size_t)r * dim + i];
  }
  for (int32_t i = 0; i < dim; i++) out[i] = (float)(mean ? acc[i] / n : acc[i]);
out_seq:
  weir_kv_seq_free(e->kv, seq);
out_acc:
  free(acc);
  return rc;
}

static int run_job(weir_engine *e, struct weir__engine_embed_job *j) {
  const double t0 = weir__engine_now();
  const int rc = e->embed_model
                     ? weir_bert_embed(e->embed_model, j->ids, j->n, j->out, j->err, j->errlen)
                     : embed_llama(e, j->ids, j->n, j->out, j->err, j->errlen);
  weir_metric_add(e->em.embed_seconds, weir__engine_now() - t0);
  if (rc == WEIR_OK) {
    weir_metric_add(e->em.embed_inputs, 1);
    weir_metric_add(e->em.embed_tokens, j->n);
  }
  return rc;
}

/* The caller's side (weir_service_embedder.run): queue, wake the engine, wait. */
static int embed_submit(void *ctx, const int32_t *ids, int32_t n, float *out, char *err,
                        size_t errlen) {
  weir_engine *e = ctx;
  struct weir__engine_embed_job j = {.ids = ids, .n = n, .out = out, .err = err,
                                     .errlen = errlen, .rc = WEIR_OK};
  if (errlen) err[0] = '\0';
  pthread_mutex_lock(&e->lock);
  if (e->stopping) {
    pthread_mutex_unlock(&e->lock);
    snprintf(err, errlen, "the server is shutting down");
    return WEIR_E_CANCELED;
  }
  if (e->embed_tail) e->embed_tail->next = &j;
  else e->embed_head = &j;
  e->embed_tail = &j;
  pthread_cond_signal(&e->wake);
  while (!j.done) pthread_cond_wait(&e->embed_done, &e->lock);
  pthread_mutex_unlock(&e->lock);
  if (j.rc != WEIR_OK && errlen && !err[0])
    snprintf(err, errlen, "embedding failed: %s", weir_strerror(j.rc));
  return j.rc;
}

void weir__engine_embed_run(weir_engine *e, int stopping) {
  pthread_mutex_lock(&e->lock);
  struct weir__engine_embed_job *j = e->embed_head;
  e->embed_head = e->embed_tail = NULL;
  pthread_mutex_unlock(&e->lock);
  if (!j) return;
  /* Run outside the lock: submitters only append, and each job's result is published under
   * the lock below. */
  for (struct weir__engine_embed_job *k = j; k; k = k->next) {
    if (stopping) {
      snprintf(k->err, k->errlen, "the server is shutting down");
      k->rc = WEIR_E_CANCELED;
    } else {
      k->rc = run_job(e, k);
    }
  }
  pthread_mutex_lock(&e->lock);
  while (j) {
    struct weir__engine_embed_job *next = j->next;
    j->done = 1; /* j lives on its caller's stack: not touched after this */
    j = next;
  }
  pthread_cond_broadcast(&e->embed_done);
  pthread_mutex_unlock(&e->lock);
}

int weir__engine_embed_setup(weir_engine *e, const weir_config *cfg, char *err, size_t errlen) {
  const char *p = cfg->embedding_pooling ? cfg->embedding_pooling : "auto";
  e->embed_pooling = !strcmp(p, "last") ? WEIR__EMBED_LAST
                     : !strcmp(p, "cls") ? WEIR__EMBED_CLS : WEIR__EMBED_MEAN;
  weir_service_embedder *em = &e->service.embed;
  em->run = embed_submit;
  em->ctx = e;
  em->pooling = p;
  em->max_inputs = cfg->embedding_max_inputs > 0 ? cfg->embedding_max_inputs : 2048;
  if (cfg->embedding_model && cfg->embedding_model[0]) {
    int rc = weir_bert_load(cfg->embedding_model, &e->rt.plugins, p, &e->embed_model, err,
                            errlen);
    if (rc != WEIR_OK) return rc;
    em->tok = weir_bert_tokenizer(e->embed_model);
    em->model_name = weir_bert_name(e->embed_model);
    em->dim = weir_bert_dim(e->embed_model);
    em->vocab_size = weir_bert_vocab(e->embed_model);
    em->context_length = weir_bert_context(e->embed_model);
    em->pooling = weir_bert_pooling(e->embed_model);
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
             "embedding model %s (%s): dim %d, context %d, %s pooling", cfg->embedding_model,
             weir_bert_arch(e->embed_model), (int)em->dim, (int)em->context_length,
             em->pooling);
    return WEIR_OK;
  }
  if (!strcmp(p, "auto")) em->pooling = "mean";
  const int32_t dim = e->rt.hp[0].n_embd;
  if (weir_step_batch_init(&e->eb, e->max_tokens_step, 1, e->max_rows, e->bt_stride) != WEIR_OK)
    return WEIR_E_NOMEM;
  e->embed_rows = malloc((size_t)e->max_rows * (size_t)dim * sizeof(float));
  if (!e->embed_rows) return WEIR_E_NOMEM;
  em->tok = e->tok;
  em->model_name = e->model_name;
  em->dim = dim;
  em->vocab_size = e->vocab;
  em->context_length = e->ctx_len;
  return WEIR_OK;
}

void weir__engine_embed_free(weir_engine *e) {
  weir_step_batch_free(&e->eb);
  free(e->embed_rows);
  e->embed_rows = NULL;
  weir_bert_destroy(e->embed_model);
  e->embed_model = NULL;
}
