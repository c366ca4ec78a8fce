/* One runtime assembly: what it takes to run a model. The plugin set, one or two models from
 * GGUF files (a target, and optionally a draft sharing its tokenizer), the paged KV pool they
 * share (one group each), and the host arrays of the batches they run. The engine, the
 * calibration pass (runtime/calib.h) and `weir perplexity` all assemble through it, in this
 * order:
 *
 *   weir_runtime_open(rt, path)           the target's GGUF, hyperparameters and tokenizer
 *   (or weir_runtime_borrow(rt, g, tok)   the same, borrowed from a caller that opened them)
 *   weir_runtime_load_plugins(rt, cfg)    device, attention, quant, sampler, drafter
 *   weir_runtime_open_draft(rt, path)     optional: a draft model (same tokenizer)
 *   weir_runtime_create_pool(rt, cfg, p)  the KV pool, a group per model opened; the block size
 *                                         is the config's (cache.block_size, whose default is
 *                                         WEIR_KV_DEFAULT_BLOCK_SIZE), never a literal
 *   weir_runtime_load_model(rt, i, ...)   model i (0 target, 1 draft), calibrated first when
 *                                         asked and the quant scheme is activation-aware
 *   ... weir_llama_forward over batches built with weir_step_batch ...
 *   weir_runtime_close(rt)                everything, in reverse order
 *
 * The steps are separate because their callers interleave their own work between them (the
 * engine names the model and labels its metrics before the plugins load; the draft's path
 * comes from the drafter plugin; `weir perplexity` sizes its pool from the text).
 *
 * Batches. A weir_step_batch holds the host arrays of one forward pass (token ids, positions,
 * slot mapping, query start locations, context lengths, block tables, logit rows), sized once.
 * A sequence is appended with its KV sequence: the block table and the slot of every new token
 * come from the KV cache (kv_cache.h, weir_kv_seq_slots), which alone knows the formula.
 *
 * Errors: negative weir_status codes with one line in err. Ownership: the runtime owns what it
 * opened, loaded or created (not what weir_runtime_borrow lent it). Threading: one thread
 * assembles and closes a runtime; its models are then driven by one thread at a time. */
#ifndef WEIR_RUNTIME_RUNTIME_H
#define WEIR_RUNTIME_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "kv/kv_pool.h"
#include "model/llama.h"
#include "plugin/loader.h"

struct weir_config;
struct weir_metrics;
struct weir_tokenizer;

/* Models one runtime runs: a target and its draft. */
#define WEIR_RUNTIME_MAX_MODELS 2

typedef struct weir_runtime {
  weir_plugin_set plugins;  /* after weir_runtime_load_plugins */
  int32_t num_models;       /* GGUF files opened: 1, or 2 with a draft */
  const weir_gguf *gguf[WEIR_RUNTIME_MAX_MODELS];
  weir_llama_hparams hp[WEIR_RUNTIME_MAX_MODELS]; /* read and checked at open */
  struct weir_tokenizer *tok; /* the target's; a draft's is checked equal and not kept */
  weir_kv_pool *pool;       /* after weir_runtime_create_pool */
  weir_llama *model[WEIR_RUNTIME_MAX_MODELS]; /* model i keeps its KV in pool group i */
  int draft_vocab_differs;  /* weir_runtime_open_draft refused the draft's vocabulary */
  /* Private. */
  int borrowed;             /* gguf[0] and tok belong to the caller */
  int plugins_loaded;
} weir_runtime;

/* Opens the target model at path: maps the GGUF, reads and checks its hyperparameters (a
 * family weir runs), and builds its tokenizer. rt is zeroed first. On failure everything is
 * freed (weir_runtime_close is still harmless). */
int weir_runtime_open(weir_runtime *rt, const char *path, char *err, size_t errlen);
/* The same over a GGUF and tokenizer the caller opened and keeps (they must outlive rt). */
int weir_runtime_borrow(weir_runtime *rt, const weir_gguf *g, const struct weir_tokenizer *tok,
                        char *err, size_t errlen);

/* Loads, checks and initialises the plugins cfg names (weir_plugin_set_load_ex); plugin
 * metrics go to metrics (NULL: the process registry). */
int weir_runtime_load_plugins(weir_runtime *rt, const struct weir_config *cfg,
                              struct weir_metrics *metrics, char *err, size_t errlen);

/* Opens a draft model (model 1) and checks that it can draft for the target: a family weir
 * runs, with the target's vocabulary token for token and the same tokenizer model.
 * WEIR_E_INVAL with draft_vocab_differs set when the vocabularies differ (err names the first
 * differing token and says "a draft must share the target's tokenizer"); the GGUF reader's
 * status when the file cannot be read or is not a model weir runs. Call after weir_runtime_open and before weir_runtime_create_pool. */
int weir_runtime_open_draft(weir_runtime *rt, const char *path, char *err, size_t errlen);

/* How the pool is sized; the block size and KV dtype are the config's. */
typedef struct weir_runtime_pool_opts {
  int32_t max_model_len; /* the longest sequence (weir_llama_max_model_len) */
  /* > 0: exactly enough blocks for this many sequences of max_model_len tokens (a fixed
   * batch of windows: calibration, perplexity); 0: the config's cache.num_blocks or
   * cache.memory_bytes (serving). */
  int32_t full_seqs;
  int prefix_caching;
} weir_runtime_pool_opts;

/* Creates the KV pool with one group per opened model, on the loaded device and attention
 * plugins (weir_kv_pool_create's statuses). */
int weir_runtime_create_pool(weir_runtime *rt, const struct weir_config *cfg,
                             const weir_runtime_pool_opts *p, char *err, size_t errlen);

/* Loads model i (0 the target, 1 the draft) through the plugins, its KV in pool group i. With
 * calibrate, and a quant scheme that asks for activation samples, the calibration pass runs
 * first (runtime/calib.h; over cfg's calibration text). opts->samples must be NULL. */
int weir_runtime_load_model(weir_runtime *rt, int32_t i, const struct weir_config *cfg,
                            const weir_llama_opts *opts, int calibrate, char *err,
                            size_t errlen);

/* Frees the models, the pool, the plugins, and what weir_runtime_open opened, in that order;
 * leaves rt zeroed. A zeroed runtime is ignored. */
void weir_runtime_close(weir_runtime *rt);

/* ---- Batches ----------------------------------------------------------------------------- */

/* The host arrays of one forward pass. The arrays are owned (weir_step_batch_init); the
 * counts say what the current batch holds. Code that fills the arrays itself (the engine's
 * scheduler) sets the counts and stride, then takes weir_step_batch_view. */
typedef struct weir_step_batch {
  int32_t max_tokens, max_seqs, max_rows, max_stride; /* capacities */
  int32_t *tokens, *positions, *slots;   /* [max_tokens] */
  int32_t *query_start_loc;              /* [max_seqs + 1] */
  int32_t *context_lens;                 /* [max_seqs] */
  int32_t *block_tables;                 /* [max_seqs][stride] */
  int32_t *logit_rows;                   /* [max_rows] */
  int32_t num_tokens, num_seqs, num_rows;
  int32_t stride;                        /* block-table entries per sequence, <= max_stride */
} weir_step_batch;

/* Allocates the arrays for up to max_tokens tokens of max_seqs sequences, max_rows logit rows
 * (0: none) and block tables of max_stride entries. WEIR_E_INVAL, WEIR_E_NOMEM (nothing kept). */
int weir_step_batch_init(weir_step_batch *b, int32_t max_tokens, int32_t max_seqs,
                         int32_t max_rows, int32_t max_stride);
void weir_step_batch_free(weir_step_batch *b);
/* Empties the batch; its block tables will have `stride` entries (<= max_stride). */
void weir_step_batch_reset(weir_step_batch *b, int32_t stride);
/* Appends a sequence whose KV is seq (of kv): tokens[0..n) at positions [start, start + n),
 * which seq already holds (weir_kv_seq_append); its context is start + n, its block table and
 * slots the cache's. WEIR_E_RANGE when the batch is full, the table is longer than the stride
 * or the positions are past the sequence; nothing is added then. */
int weir_step_batch_add(weir_step_batch *b, const weir_kv_cache *kv, const weir_kv_seq *seq,
                        const int32_t *tokens, int32_t start, int32_t n);
/* Asks for the logits of the batch's tokens [first, first + n). WEIR_E_RANGE when they are not
 * in the batch or the rows are full. */
int weir_step_batch_add_rows(weir_step_batch *b, int32_t first, int32_t n);
/* The batch as weir_llama_forward takes it (pointing into b). */
weir_llama_batch weir_step_batch_view(const weir_step_batch *b);

#endif
