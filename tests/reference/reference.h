/* A deliberately plain double-precision reference of the Llama-family forward pass (llama,
 * mistral, qwen2, qwen3, gemma2, gemma3, phi3; the source of every formula is cited in
 * reference.c), for checking the engine's logits. It shares no kernel with the engine: its dequantization
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), embedding, RMSNorm, RoPE (NORM and NEOX), grouped-query
 * causal attention over the whole sequence (no KV cache), SwiGLU, optional QKV bias and tied
 * or separate output are written here from the definitions. It uses core only to read the
 * GGUF file. Slow by design: every forward pass dequantizes every weight once.
 *
 * Ownership: weir_ref_model_load returns a model that owns the open GGUF file; free it with
 * weir_ref_model_free. Not thread-safe per model. */
#ifndef WEIR_REFERENCE_H
#define WEIR_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weir_ref_model weir_ref_model;

/* Opens the file and checks it holds a complete llama/mistral/qwen2 graph. Returns 0 or a
 * negative weir_status; the reason is printed to stderr. */
int weir_ref_model_load(const char *gguf_path, weir_ref_model **out);
void weir_ref_model_free(weir_ref_model *m);
const weir_llama_hparams *weir_ref_model_hparams(const weir_ref_model *m);

/* Runs tokens[0..n) at positions 0..n-1 and writes logits[n][n_vocab] (row i: the logits
 * after token i). WEIR_E_INVAL for n < 1 or a token outside the vocabulary, WEIR_E_NOMEM. */
int weir_ref_forward(weir_ref_model *m, const int32_t *tokens, int n, double *logits);
/* The same for a model that serves sequences of up to max_len tokens (0: the file's context
 * length), which picks Phi-3's LongRoPE factor set. */
int weir_ref_forward_len(weir_ref_model *m, const int32_t *tokens, int n, int max_len,
                         double *logits);

/* The same pass up to the final norm: hidden[n][n_embd] receives the output-normed hidden
 * state of every token (the LM head's input), what an embedding pools (issue 33). */
int weir_ref_forward_hidden(weir_ref_model *m, const int32_t *tokens, int n, double *hidden);

/* The encoder embedding models (bert_ref.c): the vector of ids[0..n) from the bert or
 * nomic-bert GGUF at path, pooled (0 mean, 1 first token, 2 last token) and L2-normalised,
 * into out[n_embd]. 0 or a negative weir_status. */
int weir_ref_bert_embed(const char *path, const int32_t *ids, int n, int pooling, double *out);

/* The building blocks, exposed for their own tests. */
/* Converts n elements (a multiple of the block size) of a GGUF tensor type into doubles;
 * WEIR_E_NOTSUP for another type. */
int weir_ref_dequant(int dtype, const void *src, double *dst, int64_t n);
/* y = x / sqrt(mean(x^2) + eps) * w (w may be NULL: all ones). */
void weir_ref_rmsnorm(const double *x, const double *w, int n, double eps, double *y);
/* Rotates the first n_rot dims of one head vector in place for position pos.
 * style 0 (NORM) pairs (2i, 2i+1); style 2 (NEOX) pairs (i, i + n_rot/2). The angle of pair i
 * is (pos / scale) * base^(-2i/n_rot). */
void weir_ref_rope(double *x, int n_rot, int pos, double base, double scale, int style);

#ifdef __cplusplus
}
#endif
#endif
