/* Encoder embedding models (issue 33): GGUF architectures `bert` and `nomic-bert`, loaded
 * beside the served model for /v1/embeddings and the response cache's semantic layer.
 *
 * bert: token + position + token-type-0 embeddings, LayerNorm; per layer Q/K/V with biases,
 * bidirectional attention, output projection with bias, residual and LayerNorm, then a GELU
 * feed-forward (up, down, with biases), residual and LayerNorm (post-norm blocks).
 * nomic-bert: the same without position embeddings or biases, with a fused QKV projection,
 * rotary positions (NEOX pairing, `rope.freq_base`) on Q and K, and a SwiGLU feed-forward
 * (silu(gate) * up, then down). Tensor names and metadata keys are GGUF's (docs/models.md).
 *
 * Every computation goes through the plugins the served model uses: the quant plugin packs
 * and multiplies the linear weights and looks up embedding rows, the device plugin runs the
 * norms, activations and attention (ABI 1.6 ops layer_norm, gelu, attention_full; a device
 * without them is refused at load, naming the op). No KV cache: one input runs in one pass.
 *
 * Thread-safety: one weir_bert is driven by one thread at a time (the engine thread, which
 * runs it between generation steps). Ownership: the model owns its GGUF mapping, tokenizer,
 * packed weights and buffers; weir_bert_destroy frees them. */
#ifndef WEIR_MODEL_BERT_H
#define WEIR_MODEL_BERT_H

#include <stddef.h>
#include <stdint.h>

struct weir_plugin_set;
struct weir_tokenizer;
typedef struct weir_bert weir_bert;

/* Opens the GGUF at path, checks it (architecture, every key and tensor, a bidirectional
 * model), builds its WordPiece tokenizer and packs its weights through plugins (borrowed: they
 * must outlive the model). pooling: "mean", "cls", "last", or "auto" for the file's
 * `<arch>.pooling_type` (mean when absent). On failure writes why into err and returns a
 * status (WEIR_E_NOTSUP for a device lacking an op, a causal file or an unsupported pooling;
 * WEIR_E_FORMAT / WEIR_E_NOTFOUND for a malformed file), having freed everything. */
int weir_bert_load(const char *path, const struct weir_plugin_set *plugins, const char *pooling,
                   weir_bert **out, char *err, size_t errlen);
void weir_bert_destroy(weir_bert *m);

/* Runs ids[0..n) (1 <= n <= weir_bert_context, ids in the vocabulary: WEIR_E_RANGE
 * otherwise) and writes the pooled vector, not normalised, into out[0..weir_bert_dim). */
int weir_bert_embed(weir_bert *m, const int32_t *ids, int32_t n, float *out, char *err,
                    size_t errlen);

/* Facts, valid until weir_bert_destroy. */
const struct weir_tokenizer *weir_bert_tokenizer(const weir_bert *m);
const char *weir_bert_name(const weir_bert *m);    /* general.name, else the file's stem */
const char *weir_bert_pooling(const weir_bert *m); /* "mean", "cls" or "last" */
const char *weir_bert_arch(const weir_bert *m);    /* "bert" or "nomic-bert" */
int32_t weir_bert_dim(const weir_bert *m);
int32_t weir_bert_vocab(const weir_bert *m);
int32_t weir_bert_context(const weir_bert *m);

#endif
