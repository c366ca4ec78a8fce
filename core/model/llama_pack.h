/* Packing the Llama graph's linear weights through the quant plugin, grouped by the input
 * they read: the weights that multiply the same activations (q, k and v; gate and up) are
 * packed together so that an activation-aware scheme gives them one input scale, each group
 * with the activation samples of its input when a calibration pass made some
 * (runtime/calib.h). Used by the model's load (llama.c) and by `weir quantize`, which writes
 * the packed weights to a file. Pure functions of their arguments; thread-safe. */
#ifndef WEIR_MODEL_LLAMA_PACK_H
#define WEIR_MODEL_LLAMA_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "model/llama.h"
#include "weir/quant.h"

/* Packs the n weights named by `suffixes` (blk.<layer>.<suffix>, or the plain name when layer
 * is -1) that all read the input of `site`, with its samples (may be NULL): through the 1.1
 * pack_group when the plugin has it, else one pack() each. For attn_output under grouped-query
 * attention it adds the channel classes (query heads sharing a KV head share a scale). On
 * success out[i] holds each handle; on failure none is kept and err says why. */
int weir_llama_pack_group(const weir_quant_ops *q, void *qself, const weir_gguf *g,
                          const weir_llama_hparams *hp, int layer, weir_llama_site site,
                          const char *const *suffixes, int n, const float *samples,
                          int64_t num_samples, void **out, char *err, size_t errlen);

/* ys[i] = W_i x for the n weights that read the same input x [n_tokens][in] (q, k, v; gate,
 * up): one 1.7 matmul_group() call when the plugin has it and takes the group, else (NULL,
 * an older plugin, or WEIR_E_NOTSUP) one matmul() per weight. Returns the plugin's status.
 * Device pointers, borrowed; called from the engine thread like the ops it calls. */
int weir_llama_matmul_group(const weir_quant_ops *q, void *qself, const void *const *w, int n,
                            const float *x, float *const *ys, int64_t n_tokens);

/* 1 when the output projection of g is tied to token_embd.weight (no output.weight), that
 * tensor is a float type (F32, F16, BF16: one a quant scheme calibrates) and the pass left
 * output-layer samples (n > 0): the loader and `weir quantize` then pack the output layer as
 * its own, calibrated copy. */
int weir_llama_untie_output(const weir_gguf *g, const weir_llama_hparams *hp,
                            const float *samples, int64_t n);

/* 1 for the tensor names of the graph's linear layers that take calibration samples:
 * blk.N.attn_{q,k,v,output}.weight, blk.N.ffn_{gate,up,down}.weight, output.weight. */
int weir_llama_is_linear_weight(const char *name);

/* attn_output's input channel classes for hp ([n_head * head_dim], malloc'd), or NULL when
 * every channel is its own class (no GQA) or out of memory. */
int32_t *weir_llama_o_classes(const weir_llama_hparams *hp);

#endif
