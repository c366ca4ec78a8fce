/* The Llama-family transformer graph (llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3)
 * over a ragged batch.
 *
 * The graph is core's; every computation in it goes through plugins: the quant plugin packs
 * and multiplies the linear weights and looks up embeddings, the device plugin runs the
 * elementwise operations and owns memory, the attention plugin writes K/V into the shared
 * paged pool and attends. weir_llama owns the packed weights and the activation buffers sized
 * for the largest step. The KV pool is not the model's: it is built by core/kv (kv_pool.h)
 * and the model only asks it for its layers' views.
 *
 * Thread-safety: one weir_llama is driven by one thread (the engine thread). */
#ifndef WEIR_MODEL_LLAMA_H
#define WEIR_MODEL_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "kv/kv_pool.h"
#include "format/gguf.h"
#include "weir/kv.h"

struct weir_plugin_set;
typedef struct weir_llama weir_llama;

/* Where a linear layer's input comes from (calibration taps and samples). */
typedef enum weir_llama_site {
  WEIR_LLAMA_SITE_ATTN_IN = 0,  /* attn_norm(x): the input of attn_q, attn_k, attn_v */
  WEIR_LLAMA_SITE_ATTN_OUT = 1, /* the attention output: the input of attn_output */
  WEIR_LLAMA_SITE_FFN_IN = 2,   /* ffn_norm(x): the input of ffn_gate, ffn_up */
  WEIR_LLAMA_SITE_FFN_MID = 3,  /* silu(gate) * up: the input of ffn_down */
  WEIR_LLAMA_SITE_OUTPUT = 4,   /* output_norm of the logit rows: the input of output */
  WEIR_LLAMA_NUM_SITES = 5,
} weir_llama_site;

/* Activation samples an activation-aware quant scheme packs with: [*n][dim] host f32 for
 * the input of `site` in block `layer` (-1 for WEIR_LLAMA_SITE_OUTPUT), borrowed until
 * weir_llama_create returns, or NULL (*n = 0) when there are none. */
typedef const float *(*weir_llama_samples_fn)(void *user, int layer, weir_llama_site site,
                                              int64_t *n);
/* Called during weir_llama_forward with the input of every linear layer before it is
 * multiplied: x is device memory [rows][dim] f32, valid only during the call. */
typedef void (*weir_llama_tap_fn)(void *user, int layer, weir_llama_site site, const float *x,
                                  int64_t rows, int64_t dim);
struct weir_progress;

typedef struct weir_llama_opts {
  int32_t max_num_tokens;     /* most new tokens in one step (max_num_batched_tokens) */
  int32_t max_num_seqs;       /* most sequences in one step */
  int32_t max_logit_rows;     /* most rows of logits in one step */
  /* Optional: a task the caller began with n_layer + 1 units; creation reports 1 when the
   * embeddings are packed and one more per layer. */
  struct weir_progress *progress;
  /* Optional: calibration samples for the quant plugin (core/runtime/calib.h), or NULL. */
  weir_llama_samples_fn samples;
  void *samples_user;
  /* Step graphs (docs/cuda.md): decode steps of up to this many sequences are padded up to
   * the next recorded batch size and replayed from a graph the device recorded, when the
   * device plugin records graphs. 0 = every step runs as plain launches. */
  int32_t step_graph_max_batch;
  /* The longest sequence the model will serve (model.max_model_len), 0 = the file's context
   * length: picks Phi-3's LongRoPE factor set (long beyond the original context). */
  int32_t max_model_len;
  /* Step graphs also cover steps whose sequences each have up to this many query tokens
   * (speculative verification: k + 1; a draft model's catch-up: 2), each sequence padded to
   * the step's longest. 0 or 1 = one-token decode steps only. At most
   * WEIR_LLAMA_GRAPH_MAX_ROWS. */
  int32_t step_graph_max_rows;
  /* 0, or fewer than the vocabulary's tokens: the LM head computes the logits of
   * head_vocab token ids only, head_ids[c] for column c (or ids [0, head_vocab) when head_ids
   * is NULL), and each row of logits is head_vocab wide (weir_llama_logits_width). For a
   * draft model (drafter.head_vocab): a small model's LM head is a large part of the bytes a
   * decode step reads. head_ids (host, each in [0, n_vocab)) is read during create only. */
  int32_t head_vocab;
  const int32_t *head_ids;
} weir_llama_opts;

#define WEIR_LLAMA_GRAPH_MAX_ROWS 16

/* The attention shape of a model with these hyperparameters (n_layers, heads, head_dim,
 * scale), for the KV pool to size its blocks: block_size and kv_dtype are the pool's. */
void weir_llama_attn_shape(const weir_llama_hparams *hp, weir_attn_shape *out);
/* The RoPE angle per position of each pair i < n_rot / 2 (inv_freq) of a global (swa 0) or
 * sliding-window layer, with the file's frequency scaling folded in (linear, yarn; factors:
 * rope_freqs or LongRoPE factors [n_rot / 2], or NULL), and the factor the rotated values are
 * multiplied by (mscale). For tests and the rope_freqs device op. */
void weir_llama_rope_table(const weir_llama_hparams *hp, int swa, const float *factors,
                           float *inv_freq, float *mscale);
/* The window the KV pool may free blocks behind for this model (weir_kv_pool_params.
 * sliding_window): hp->n_swa when every layer slides, else 0 (a global layer reads the whole
 * context). */
int32_t weir_llama_kv_window(const weir_llama_hparams *hp);
/* The longest sequence the model serves: `requested` when > 0 (model.max_model_len), else
 * the file's context length. */
int32_t weir_llama_max_model_len(const weir_llama_hparams *hp, int32_t requested);

/* One step's batch, host arrays borrowed for the call. Sequence s's new tokens are
 * tokens[query_start_loc[s] .. query_start_loc[s+1]) at positions[...] (see weir_attn_batch
 * for the rest). logit_rows lists the token indices whose logits are wanted, in order. */
typedef struct weir_llama_batch {
  int32_t num_tokens;
  const int32_t *tokens;
  const int32_t *positions;
  int32_t num_seqs;
  const int32_t *query_start_loc; /* [num_seqs + 1] */
  const int32_t *context_lens;    /* [num_seqs] */
  const int32_t *block_tables;    /* [num_seqs][max_blocks_per_seq] */
  int32_t max_blocks_per_seq;
  const int32_t *slot_mapping;    /* [num_tokens] */
  int32_t num_logit_rows;
  const int32_t *logit_rows;      /* [num_logit_rows] */
} weir_llama_batch;

/* Loads the model from an opened GGUF through the given plugins, keeping its KV in group
 * kv_group of `kv` (borrowed: it must outlive the model), whose shape must be this model's
 * (weir_llama_attn_shape). The GGUF must outlive the model only during this call (weights
 * are packed into plugin memory). On failure writes why into err and returns a status,
 * having freed everything. */
int weir_llama_create(const weir_gguf *g, const struct weir_plugin_set *plugins,
                      const weir_llama_opts *opts, weir_kv_pool *kv, int32_t kv_group,
                      weir_llama **out, char *err, size_t errlen);
void weir_llama_destroy(weir_llama *m);

const weir_llama_hparams *weir_llama_hparams_get(const weir_llama *m);
/* Bytes of device memory the packed weights and norms take. */
size_t weir_llama_weight_bytes(const weir_llama *m);

/* Runs one step. On success *logits is a device array [num_logit_rows][n_vocab] f32 owned by
 * the model, valid until the next forward (a sampler may overwrite it). */
int weir_llama_forward(weir_llama *m, const weir_llama_batch *b, float **logits);
/* The width of a row of the logits weir_llama_forward returns: n_vocab, or the options'
 * head_vocab when that is smaller. */
int32_t weir_llama_logits_width(const weir_llama *m);

/* Runs one step like weir_llama_forward but stops at the final norm: on success the host
 * array hidden (the caller's, [num_logit_rows][n_embd] f32) holds the output-normed hidden
 * states of the rows logit_rows lists, the input the LM head would take. The K/V of the batch's tokens are written like any step's. Never replayed
 * from a step graph. WEIR_E_RANGE for a batch beyond the model's sizes or without rows.
 * Embeddings from the served model (/v1/embeddings, engine.c) run through here. */
int weir_llama_forward_hidden(weir_llama *m, const weir_llama_batch *b, float *hidden);

/* Step graphs recorded and steps replayed from them since creation. */
typedef struct weir_llama_graph_stats {
  uint64_t recorded;  /* graphs recorded (one per padded batch size, again after a reset) */
  uint64_t replayed;  /* steps that ran as one graph launch */
  uint64_t padded;    /* padding sequences padded decode steps computed and threw away */
  uint64_t padded_tokens; /* padding tokens in all (padding sequences' and within sequences) */
  uint64_t multi_row; /* replayed steps of more than one token per sequence (verification) */
} weir_llama_graph_stats;
void weir_llama_graph_stats_get(const weir_llama *m, weir_llama_graph_stats *out);

/* The shape a step is padded to when it runs from a step graph: seqs sequences of
 * rows_per_seq tokens each, logit_rows rows of logits (seqs, or every token). */
typedef struct weir_llama_graph_shape {
  int32_t seqs, rows_per_seq, logit_rows;
  uint64_t key; /* the device graph key (unique per model and shape) */
} weir_llama_graph_shape;
/* 1 and *out filled when step b would run from a step graph (or, emulated, padded), else 0:
 * graphs off, a tap installed, more tokens per sequence than step_graph_max_rows, a padded
 * shape beyond the model's limits, or padding that would reach past a sequence's longest
 * context. */
int weir_llama_graph_shape_of(const weir_llama *m, const weir_llama_batch *b,
                              weir_llama_graph_shape *out);
/* For tests on a device without graph operations: on = 1 makes every step that a graph
 * would serve run padded to its graph's shape as plain launches (the padding, row mapping
 * and KV writes of a replayed step, without the device's graph calls); 0 turns that off.
 * Returns WEIR_E_NOTSUP when step_graph_max_batch is 0 or a plugin predates ABI 1.4,
 * WEIR_E_NOMEM when the padding arrays cannot be allocated. */
int weir_llama_set_graph_emulation(weir_llama *m, int on);

/* Installs (or with fn NULL removes) the calibration tap, see weir_llama_tap_fn. While a
 * tap is installed no step runs from a graph (the tap reads activations between launches). */
void weir_llama_set_tap(weir_llama *m, weir_llama_tap_fn fn, void *user);

#endif
