/* weir SDK: device plugins (cpu, cuda).
 *
 * A device plugin owns memory, copies and ordering on one device, and runs the transformer
 * graph's elementwise operations. All activations passed between operations are f32 arrays in
 * the device's memory, row-major (a [rows][dim] matrix is `rows` contiguous rows of `dim`).
 * Operations are ordered: each one sees the results of every operation issued before it on
 * the same instance (for CUDA, one stream). Results become visible to the host only after a
 * copy_d2h or synchronize.
 *
 * Thread-safety: one instance is driven by one thread at a time (the engine thread); alloc
 * and free may be called from any thread. Every function returns a weir_status. Since 1.0. */
#ifndef WEIR_DEVICE_H
#define WEIR_DEVICE_H

#include "weir/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weir_rope_style {
  WEIR_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama, mistral */
  WEIR_ROPE_NEOX = 2, /* rotate halves (x[i], x[i + rot_dim/2]): qwen2, gpt-neox */
} weir_rope_style;

typedef struct weir_device_info {
  uint32_t struct_size; /* 1.0 */
  char name[128];       /* e.g. "cpu (AVX2, 16 threads)" or "NVIDIA H100 80GB HBM3". 1.0 */
  uint64_t total_memory; /* bytes; 0 when unknown. 1.0 */
  uint64_t free_memory;  /* bytes; 0 when unknown. 1.0 */
} weir_device_info;

typedef struct weir_device_ops {
  uint32_t struct_size; /* 1.0 */

  /* Memory. alloc returns WEIR_E_NOMEM when the device is full; free accepts NULL. */
  int (*info)(void *self, weir_device_info *out);                      /* mandatory, 1.0 */
  int (*alloc)(void *self, size_t size, void **ptr);                    /* mandatory, 1.0 */
  void (*free)(void *self, void *ptr);                                  /* mandatory, 1.0 */
  /* Copies. copy_h2d may return before the copy finishes when `src` is host memory that
   * stays valid and unchanged until the next synchronize; copy_d2h returns when `dst` holds
   * the data. */
  int (*copy_h2d)(void *self, void *dst, const void *src, size_t size); /* mandatory, 1.0 */
  int (*copy_d2h)(void *self, void *dst, const void *src, size_t size); /* mandatory, 1.0 */
  int (*copy_d2d)(void *self, void *dst, const void *src, size_t size); /* mandatory, 1.0 */
  int (*memset)(void *self, void *dst, int value, size_t size);         /* mandatory, 1.0 */
  int (*synchronize)(void *self);                                       /* mandatory, 1.0 */

  /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for each of `rows` rows of `dim`.
   * out may equal x. Mandatory, 1.0. */
  int (*rms_norm)(void *self, float *out, const float *x, const float *weight, int64_t rows,
                  int64_t dim, float eps);
  /* Rotates in place the first rot_dim values of each head of x ([n_tokens][n_heads *
   * head_dim]) by angle pos * freq_scale * base^(-2i/rot_dim), pos = positions[token]
   * (device int32). Mandatory, 1.0. */
  int (*rope)(void *self, float *x, const int32_t *positions, int64_t n_tokens, int32_t n_heads,
              int32_t head_dim, int32_t rot_dim, float freq_base, float freq_scale,
              weir_rope_style style);
  /* out[i] = silu(gate[i]) * up[i] for i < n. out may equal gate or up. Mandatory, 1.0. */
  int (*swiglu)(void *self, float *out, const float *gate, const float *up, int64_t n);
  /* out[i] = a[i] + b[i]. out may equal a or b. Mandatory, 1.0. */
  int (*add)(void *self, float *out, const float *a, const float *b, int64_t n);
  /* x[r][j] += bias[j] for each of `rows` rows of `dim`. Mandatory, 1.0. */
  int (*add_bias)(void *self, float *x, const float *bias, int64_t rows, int64_t dim);
  /* out[i] = x[rows[i]] for i < n (rows: device int32), each row `dim` floats: picks the
   * hidden states whose logits are wanted. Mandatory, 1.0. */
  int (*get_rows)(void *self, float *out, const float *x, const int32_t *rows, int64_t n,
                  int64_t dim);

  /* ---- Optional, appended (check struct_size and NULL before use) ---------------------- */

  /* A native handle by name, for the host's weir_host.device_handle to forward to:
   * "cuda.stream" (cudaStream_t), "cublas" (cublasHandle_t), "cublaslt" (cublasLtHandle_t),
   * "cuda.device" (int *); the CPU device (since 1.5) "cpu.parallel_min" (const int64_t *:
   * its option parallel_min, the element count below which work stays on one thread, which
   * the CPU quant plugins scale for their own thresholds). NULL when unknown. Owned by the device instance, valid until fini.
   * Thread-safe. Optional, 1.0. */
  void *(*native_handle)(void *self, const char *name);

  /* Step graphs (CUDA graphs). graph_begin starts recording every operation issued on the
   * instance (by any plugin sharing its stream) under `key` (e.g. a decode batch size);
   * graph_end stops and keeps the recorded graph; graph_launch replays it. Between begin and
   * end the caller must not copy to or from the host, synchronize, or allocate, and every
   * pointer and size an operation uses must stay the same at replay (inputs are copied into
   * fixed device buffers before graph_launch). graph_launch returns WEIR_E_NOTFOUND when no
   * graph is kept for `key`; graph_reset drops every kept graph. All four NULL when the
   * device cannot record. Optional, 1.0.
   *
   * The host's engine (since 1.4) records each decode step of up to
   * scheduler.step_graph_max_batch sequences, padded to one of a few batch sizes, once a
   * step of that size has run un-recorded, and replays it from then on (docs/cuda.md). A
   * replay uses every pointer the recording saw, so it does so only when the attention and
   * quant plugins were built against ABI 1.4 or later: such a plugin keeps any device memory
   * its step operations use valid until fini (scratch grows by allocating a larger buffer and
   * keeping the old one, never by freeing it while the instance lives). */
  int (*graph_begin)(void *self, uint64_t key);
  int (*graph_end)(void *self, uint64_t key);
  int (*graph_launch)(void *self, uint64_t key);
  void (*graph_reset)(void *self);

  /* ---- Model families, since 1.5 (optional: NULL = not implemented; the host refuses a
   * model whose graph needs one the plugin lacks, naming it) ------------------------------ */

  /* RoPE with a frequency per pair: rotates in place the first rot_dim values of each head of
   * x ([n_tokens][n_heads * head_dim]) by angle positions[token] * inv_freq[i] for pair i
   * (inv_freq: device f32 [rot_dim / 2]) and multiplies the rotated values by mscale (values
   * past rot_dim are left alone). The host folds every frequency scaling into inv_freq
   * (linear, llama3 rope_freqs, YaRN, LongRoPE) and their attention factor into mscale.
   * Optional, 1.5. */
  int (*rope_freqs)(void *self, float *x, const int32_t *positions, int64_t n_tokens,
                    int32_t n_heads, int32_t head_dim, int32_t rot_dim, const float *inv_freq,
                    float mscale, weir_rope_style style);
  /* out[i] = gelu(gate[i]) * up[i] for i < n, with GELU's tanh form 0.5 x (1 + tanh(
   * sqrt(2/pi) (x + 0.044715 x^3))) (Gemma). out may equal gate or up. Optional, 1.5. */
  int (*geglu)(void *self, float *out, const float *gate, const float *up, int64_t n);
  /* x[i] *= s for i < n. Optional, 1.5. */
  int (*scale)(void *self, float *x, float s, int64_t n);
  /* x[i] = cap * tanh(x[i] / cap) for i < n, cap > 0 (logit soft-capping). Optional, 1.5. */
  int (*softcap)(void *self, float *x, float cap, int64_t n);

  /* ---- Encoders (embedding models: bert, nomic-bert), since 1.6 (optional: NULL = not
   * implemented; the host refuses an embedding model the device cannot run, naming the op)
   * --------------------------------------------------------------------------------------- */

  /* LayerNorm of each of `rows` rows of `dim`: out[r] = (x[r] - mean) / sqrt(var + eps) *
   * weight + bias, with the mean and the (biased) variance of row r. bias may be NULL (no
   * shift). out may equal x. Optional, 1.6. */
  int (*layer_norm)(void *self, float *out, const float *x, const float *weight,
                    const float *bias, int64_t rows, int64_t dim, float eps);
  /* out[i] = gelu(x[i]) = 0.5 x (1 + erf(x / sqrt(2))) for i < n (the exact form, BERT's
   * "gelu"). out may equal x. Optional, 1.6. */
  int (*gelu)(void *self, float *out, const float *x, int64_t n);
  /* Bidirectional (unmasked) attention within one sequence of n_tokens tokens, no KV cache:
   * for each head h and token i, out[i][h] = sum_j softmax_j(scale * q[i][h] . k[j][g]) v[j][g]
   * with g = h / (n_heads / n_kv_heads). q and out are [n_tokens][n_heads * head_dim], k and
   * v [n_tokens][n_kv_heads * head_dim], all device f32; out must not alias q, k or v.
   * Optional, 1.6. */
  int (*attention_full)(void *self, float *out, const float *q, const float *k, const float *v,
                        int64_t n_tokens, int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                        float scale);

  /* ---- Fused elementwise ops, since 1.7 (optional: NULL = not implemented; the host then
   * issues the separate ops it stands for) ------------------------------------------------- */

  /* The residual add fused into the RMSNorm that follows it, for each of `rows` rows of
   * `dim`: residual[r] += x[r], then out[r] = residual[r] / sqrt(mean(residual[r]^2) + eps)
   * * weight. The same values as add(residual, residual, x) followed by rms_norm(out,
   * residual, weight) (up to the device's rounding), in one pass over the rows: one launch
   * and one read of the residual instead of two. out may equal x (the engine passes its
   * sublayer output as both); out must not alias residual. Optional, 1.7. */
  int (*add_rms_norm)(void *self, float *out, float *residual, const float *x,
                      const float *weight, int64_t rows, int64_t dim, float eps);

  /* ---- Greedy picks on the device, since 1.8 (optional: NULL = not implemented; the host
   * then copies the rows to host memory and picks there) ---------------------------------- */

  /* For each of `rows` rows of n floats of x (device f32 [rows][n]): out[r] = the index of
   * the row's largest value, the lowest such index when several are equal (the host's
   * greedy rule), mapped through ids when ids is not NULL (device int32 [n]: out[r] =
   * ids[index]); `fallback` when the row has no value above -inf (NaN never wins). prob, when
   * not NULL, gets the softmax probability of that value, 1 / sum_v exp(x[v] - max) (0 for
   * a fallback row, or when a NaN makes the sum NaN), summed in the device's order. out:
   * device int32 [rows]; prob: device f32 [rows]. Neither may alias x or ids. The engine
   * picks the draft model's greedy drafts with it, so that a pass returns rows ints to the
   * host instead of rows x n floats (docs/engine.md, *Draft models*). WEIR_E_INVAL for
   * rows < 0, n <= 0 or a NULL out or x. Optional, 1.8. */
  int (*argmax_rows)(void *self, int32_t *out, float *prob, const float *x, int64_t rows,
                     int64_t n, const int32_t *ids, int32_t fallback);
} weir_device_ops;

#ifdef __cplusplus
}
#endif
#endif
