/* weir CUDA kernels: C-callable launchers shared by the CUDA plugins.
 *
 * Every launcher enqueues work on `stream` and returns at once with the launch status
 * (cudaSuccess or the error cudaGetLastError reports for that launch); errors raised while a
 * kernel runs surface at the next synchronizing call. Pointers are device memory unless a
 * parameter's name ends in _host. Nothing here allocates; workspaces are passed in and their
 * sizes come from the matching *_workspace_bytes function. Launchers are thread-safe as long
 * as two threads do not share a stream. This header is plain C so that plugins written in C
 * include it; the kernels live in the .cu files beside it. */
#ifndef WEIR_CUDA_KERNELS_H
#define WEIR_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise.cu: the device plugin's graph operations --------------------------------
 * Semantics are those of weir_device_ops in weir/device.h. */

cudaError_t weir_cuda_rms_norm(cudaStream_t stream, float *out, const float *x,
                               const float *weight, int64_t rows, int64_t dim, float eps);
/* Fused residual add and RMSNorm: residual[r] += x[r]; out[r] = rms_norm(residual[r]).
 * One pass over the row instead of two. out may not alias residual or x. */
cudaError_t weir_cuda_add_rms_norm(cudaStream_t stream, float *out, float *residual,
                                   const float *x, const float *weight, int64_t rows,
                                   int64_t dim, float eps);
/* Greedy picks, one block per row (weir_device_ops.argmax_rows, ABI 1.8): out[r] = the
 * lowest index of row r's largest value (ids[index] when ids is not NULL), fallback when none
 * is above -inf; prob (may be NULL) = 1 / sum exp(x - max). */
cudaError_t weir_cuda_argmax_rows(cudaStream_t stream, int32_t *out, float *prob,
                                  const float *x, int64_t rows, int64_t n, const int32_t *ids,
                                  int32_t fallback);
/* style: 0 = adjacent pairs (llama), 2 = halves (neox), as weir_rope_style. */
cudaError_t weir_cuda_rope(cudaStream_t stream, float *x, const int32_t *positions,
                           int64_t n_tokens, int32_t n_heads, int32_t head_dim, int32_t rot_dim,
                           float freq_base, float freq_scale, int style);
cudaError_t weir_cuda_swiglu(cudaStream_t stream, float *out, const float *gate,
                             const float *up, int64_t n);
/* ABI 1.5 model-family operations (weir_device_ops rope_freqs, geglu, scale, softcap). */
cudaError_t weir_cuda_rope_freqs(cudaStream_t stream, float *x, const int32_t *positions,
                                 int64_t n_tokens, int32_t n_heads, int32_t head_dim,
                                 int32_t rot_dim, const float *inv_freq, float mscale, int style);
cudaError_t weir_cuda_geglu(cudaStream_t stream, float *out, const float *gate,
                            const float *up, int64_t n);
cudaError_t weir_cuda_scale(cudaStream_t stream, float *x, float s, int64_t n);
cudaError_t weir_cuda_softcap(cudaStream_t stream, float *x, float cap, int64_t n);
/* ABI 1.6 encoder operations (weir_device_ops layer_norm, gelu, attention_full; bias may be
 * NULL; attention_full takes head_dim <= 256). */
cudaError_t weir_cuda_layer_norm(cudaStream_t stream, float *out, const float *x,
                                 const float *weight, const float *bias, int64_t rows,
                                 int64_t dim, float eps);
cudaError_t weir_cuda_gelu(cudaStream_t stream, float *out, const float *x, int64_t n);
cudaError_t weir_cuda_attention_full(cudaStream_t stream, float *out, const float *q,
                                     const float *k, const float *v, int64_t n_tokens,
                                     int32_t n_heads, int32_t n_kv_heads, int32_t head_dim,
                                     float scale);
cudaError_t weir_cuda_add(cudaStream_t stream, float *out, const float *a, const float *b,
                          int64_t n);
cudaError_t weir_cuda_add_bias(cudaStream_t stream, float *x, const float *bias, int64_t rows,
                               int64_t dim);
cudaError_t weir_cuda_get_rows(cudaStream_t stream, float *out, const float *x,
                               const int32_t *rows, int64_t n, int64_t dim);

/* ---- attention.cu: paged attention ---------------------------------------------------------
 * KV block layout (one block of one layer), element type kv_dtype (f32, f16 or bf16):
 *   K: [n_kv_heads][block_size][head_dim], then V: [n_kv_heads][block_size][head_dim].
 * So the K (or V) rows one KV head keeps in one block are contiguous (block_size * head_dim
 * elements), and a block of a layer is 2 * n_kv_heads * block_size * head_dim elements.
 * kv_dtype uses weir_dtype numbering (0 f32, 1 f16, 30 bf16). */

typedef struct weir_cuda_attn_params {
  int32_t n_heads, n_kv_heads, head_dim, block_size;
  int32_t kv_dtype;
  float scale;
  int32_t num_seqs, num_tokens, max_query_len, max_context_len;
  const int32_t *query_start_loc; /* [num_seqs + 1] */
  const int32_t *context_lens;    /* [num_seqs] */
  const int32_t *block_tables;    /* [num_seqs][max_blocks_per_seq] */
  int32_t max_blocks_per_seq;
  const int32_t *slot_mapping;    /* [num_tokens]; a negative slot is skipped */
  void *kv_base;                  /* this layer's first block */
  size_t block_bytes;
  int32_t num_blocks;
  /* A layer's parameters (SDK weir_attn_layer_params): window > 0 lets the query at
   * position p see keys at positions > p - window only, and no block wholly before the
   * window of a tile's first query is read; softcap > 0 maps each scaled score s to
   * softcap * tanh(s / softcap). 0 = off. */
  int32_t window;
  float softcap;
  /* RoPE fused into the KV write and the query load (SDK forward_rope, ABI 1.7): rope_dim > 0
   * rotates the first rope_dim values of each K head before it is stored and of each Q head
   * as it is loaded, token t by positions[t], exactly as elementwise.cu's rope kernels do
   * (rope_inv_freq NULL: angle pos * rope_freq_scale * 2^(-2i/rope_dim * rope_log2_base);
   * else pos * rope_inv_freq[i], rotated values times rope_mscale). rope_neox: 0 adjacent
   * pairs, 1 halves. rope_dim 0: q and k arrive rotated. */
  const int32_t *positions;
  int32_t rope_dim, rope_neox;
  float rope_log2_base, rope_freq_scale;
  const float *rope_inv_freq;
  float rope_mscale;
} weir_cuda_attn_params;

/* Bytes of one block of one layer; 0 for an unsupported dtype or shape. */
size_t weir_cuda_attn_block_bytes(int32_t n_kv_heads, int32_t head_dim, int32_t block_size,
                                  int32_t kv_dtype);
/* Stores k, v ([num_tokens][n_kv_heads * head_dim] f32) at slot_mapping. */
cudaError_t weir_cuda_kv_write(cudaStream_t stream, const weir_cuda_attn_params *p,
                               const float *k, const float *v);

/* A launch plan: chooses rows per CTA and the KV split for a batch. num_sms is the device's
 * multiprocessor count, max_smem its opt-in shared memory per block. Returns cudaSuccess or
 * cudaErrorInvalidValue when the shape cannot be served (head_dim > 256, too many query heads
 * per KV head for shared memory). */
typedef struct weir_cuda_attn_plan {
  int32_t rows_per_cta;    /* query rows (token x head) one CTA computes */
  int32_t tokens_per_cta;  /* rows_per_cta / group size */
  int32_t tiles_per_seq;   /* ceil(max_query_len / tokens_per_cta) */
  int32_t num_splits;      /* KV partitions per (tile, kv head); 1 = no reduction */
  size_t smem_bytes;       /* dynamic shared memory of the kernel */
  size_t workspace_bytes;  /* device workspace for the splits' partials (0 when 1 split) */
  size_t counter_bytes;    /* device int counters, one per (tile, kv head) (0 when 1 split) */
} weir_cuda_attn_plan;

cudaError_t weir_cuda_attn_plan_make(const weir_cuda_attn_params *p, int num_sms,
                                     size_t max_smem, weir_cuda_attn_plan *plan);
/* out = causal attention of q over the paged cache (which already holds this step's K and
 * V). q, out: [num_tokens][n_heads * head_dim] f32. workspace: plan->workspace_bytes.
 * counters: plan->counter_bytes of device ints that must be zero before the first call (a
 * buffer the caller zeroed once when it allocated it): the split CTAs count themselves there
 * so that the last one combines the partials in the same launch, and it resets its counter,
 * so they are zero again after every launch. One launch, no host sync: graph-capturable. */
cudaError_t weir_cuda_attention(cudaStream_t stream, const weir_cuda_attn_params *p,
                                const weir_cuda_attn_plan *plan, const float *q, float *out,
                                void *workspace, int *counters);
/* For every layer l < n_layers and pair i < n: copies block src[i] onto block dst[i].
 * src, dst: device int32 [n]. layer0: the pool's first byte; layer stride is
 * num_blocks * block_bytes. */
cudaError_t weir_cuda_copy_blocks(cudaStream_t stream, void *layer0, size_t block_bytes,
                                  int32_t num_blocks, int32_t n_layers, const int32_t *src,
                                  const int32_t *dst, int32_t n);

/* ---- quant_f16.cu: half-precision weights ------------------------------------------------- */

/* Converts n_rows rows of `cols` source elements (GGUF layout: src_dtype F32 0, F16 1, BF16 30,
 * Q8_0 8, Q4_0 2, Q4_1 3; row stride src_row_bytes) to f16 rows of `cols` (dst, contiguous). */
cudaError_t weir_cuda_pack_f16(cudaStream_t stream, void *dst, const void *src, int32_t src_dtype,
                               int64_t n_rows, int64_t cols, size_t src_row_bytes);
/* dst[i] = (half)src[i]. */
cudaError_t weir_cuda_f32_to_f16(cudaStream_t stream, void *dst, const float *src, int64_t n);
/* y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens <= 8: W is f16 [out][in] (rows 16-byte
 * aligned when in % 8 == 0), x, y f32. Streams W once for all tokens (2 or 4 rows per warp,
 * 16 chunk loads in flight per lane). cudaErrorInvalidValue for n_tokens outside 1..8. */
cudaError_t weir_cuda_gemv_f16(cudaStream_t stream, const void *w, const float *x, float *y,
                               int64_t in, int64_t out, int32_t n_tokens);
/* The same product by the first kernel (one warp per row): the baseline bench_cuda_layouts
 * measures weir_cuda_gemv_f16 against in the same run. Same contract. */
cudaError_t weir_cuda_gemv_f16_rows(cudaStream_t stream, const void *w, const float *x,
                                    float *y, int64_t in, int64_t out, int32_t n_tokens);
/* out[t] = (f32) W[ids[t]] for t < n; an id outside [0, rows) zero-fills its row and sets
 * *bad_flag (host-mapped or device int) to 1. */
cudaError_t weir_cuda_embed_f16(cudaStream_t stream, const void *w, const int32_t *ids,
                                float *out, int64_t n, int64_t rows, int64_t cols,
                                int *bad_flag);

/* ---- quant_int8.cu: int8 weights (quant/int8; Q8_0 tensors under quant/awq_int4) ----------
 * q: int8 [rows][kp], kp = cols rounded up to 32 (padding columns hold 0), 16-byte aligned;
 * d: f32 [rows][kp / 32]; w[r][c] = q[r][c] * d[r][c / 32]. */

/* Packs n_rows rows of `cols` source elements (src_dtype as for weir_cuda_pack_f16, rows
 * src_row_bytes apart, device memory): Q8_0 blocks are copied exactly, other sources get
 * d = max|x| / 127 and q = round(x / d) per 32 columns (a group holding Inf/NaN: q = 0,
 * d = NaN). */
cudaError_t weir_cuda_pack_q8(cudaStream_t stream, void *q, float *d, const void *src,
                              int32_t src_dtype, int64_t rows, int64_t cols, int64_t kp,
                              size_t src_row_bytes);
/* y[t][o] = sum_c W[o][c] x[t][c] for t < n_tokens <= 8 (x: [n_tokens][cols] f32). Streams
 * W once, dequantizing in registers; products in f32. */
cudaError_t weir_cuda_gemv_q8(cudaStream_t stream, const void *q, const float *d, const float *x,
                              float *y, int64_t cols, int64_t kp, int64_t rows, int32_t n_tokens);
/* The dp4a path. Activations are quantized once per input, by the CPU int8 plugin's rule
 * (d = max|x| / 127 per 32 columns, q = round(x / d); an Inf/NaN block gets q = 0, d = NaN;
 * x times inv_s column-wise first when inv_s is not NULL: awq_int4's inverse AWQ scale),
 * into `act` (device, 256-byte aligned, weir_cuda_q8_act_bytes(n_tokens, kp) bytes): int8
 * [n_tokens][kp], zero past cols, then f32 [n_tokens][kp / 32] at the next 256 bytes. Then
 * y_i[t][o] = sum_c W_i[o][c] xq[t][c] for up to WEIR_CUDA_Q8_MAX_SET weights W_i of the same
 * kp (q[i], d[i], rows[i], y[i] [n_tokens][rows[i]]) in one launch: one warp per output row,
 * all tokens of a tile of up to 16 in registers, so a batch of 16 reads the weights once. */
#define WEIR_CUDA_Q8_MAX_SET 4
size_t weir_cuda_q8_act_bytes(int64_t n_tokens, int64_t kp);
cudaError_t weir_cuda_q8_quantize_act(cudaStream_t stream, const float *x, const float *inv_s,
                                      void *act, int64_t n_tokens, int64_t cols, int64_t kp);
cudaError_t weir_cuda_gemv_q8_dp4a(cudaStream_t stream, int32_t n_weights, const void *const *q,
                                   const float *const *d, const int64_t *rows, float *const *y,
                                   const void *act, int64_t kp, int64_t n_tokens);
/* dst = W as f16 [rows][cols] (each q d rounded once, saturated), for cuBLAS. */
cudaError_t weir_cuda_dequant_q8_f16(cudaStream_t stream, void *dst, const void *q,
                                     const float *d, int64_t rows, int64_t cols, int64_t kp);
/* out[t] = W[ids[t]] as f32; an id outside [0, rows) zero-fills and sets *bad_flag. */
cudaError_t weir_cuda_embed_q8(cudaStream_t stream, const void *q, const float *d,
                               const int32_t *ids, float *out, int64_t n, int64_t rows,
                               int64_t cols, int64_t kp, int *bad_flag);

/* ---- quant_int4.cu: 4-bit weights (quant/awq_int4) ------------------------------------------
 * nib: [rows][kp / 2] bytes, kp = cols rounded up to 32, in 16-byte blocks of 32 columns in
 * GGUF Q4 order (byte j: column j in the low nibble, column 16 + j in the high one), 16-byte
 * aligned; d, m: f16 [rows][ceil(kp / group)] (group 32, 64 or 128); w = d q + m, or with
 * m NULL w = d (q - 8). inv_s: NULL, or f32 [cols] multiplying the input column-wise (the
 * inverse AWQ scale): y = W (x * inv_s). */
cudaError_t weir_cuda_gemv_q4(cudaStream_t stream, const void *nib, const void *d, const void *m,
                              const float *inv_s, const float *x, float *y, int64_t cols,
                              int64_t kp, int64_t rows, int32_t group, int32_t n_tokens);
/* The dp4a GEMV on activations weir_cuda_q8_quantize_act left in `act` (with this weight's
 * inv_s, kp columns): y[t][o] = sum over blocks of xd (d sum(q xq) + m sum(xq)) for t <
 * n_tokens; one warp per output row, a lane per 32-column block (one 16-byte load), all tokens
 * of a tile of up to 16 in registers, so a batch of 16 reads the weight bytes of a batch of 1.
 * The CPU awq_int4 plugin computes the same sums. */
cudaError_t weir_cuda_gemv_q4_dp4a(cudaStream_t stream, const void *nib, const void *d,
                                   const void *m, const void *act, float *y, int64_t cols,
                                   int64_t kp, int64_t rows, int32_t group, int64_t n_tokens);
/* The same for up to WEIR_CUDA_Q4_MAX_SET weights of the same cols, kp, group and inverse
 * scale (the one `act` was quantized with) in one launch: nib[i], d[i], m[i] (NULL:
 * symmetric), rows[i], y[i] [n_tokens][rows[i]]. */
#define WEIR_CUDA_Q4_MAX_SET 4
cudaError_t weir_cuda_gemv_q4_dp4a_set(cudaStream_t stream, int32_t n_weights,
                                       const void *const *nib, const void *const *d,
                                       const void *const *m, const int64_t *rows,
                                       float *const *y, const void *act, int64_t cols,
                                       int64_t kp, int32_t group, int64_t n_tokens);
/* dst = W diag(inv_s) as f16 [rows][cols], for cuBLAS. */
cudaError_t weir_cuda_dequant_q4_f16(cudaStream_t stream, void *dst, const void *nib,
                                     const void *d, const void *m, const float *inv_s,
                                     int64_t rows, int64_t cols, int64_t kp, int32_t group);
/* out[t] = row ids[t] of W diag(inv_s) as f32; an id outside [0, rows) zero-fills and sets
 * *bad_flag. */
cudaError_t weir_cuda_embed_q4(cudaStream_t stream, const void *nib, const void *d, const void *m,
                               const float *inv_s, const int32_t *ids, float *out, int64_t n,
                               int64_t rows, int64_t cols, int64_t kp, int32_t group,
                               int *bad_flag);

/* The tiled layout ("Marlin-style" load-time repack) the CUDA awq_int4 plugin keeps its
 * weights in: rows in tiles of WEIR_CUDA_Q4T_ROWS; tiles [ceil(rows / 4)][kp / 32][4][16]:
 * for tile T and 32-column block b, the four rows' 16-byte blocks (GGUF Q4 order, as above)
 * side by side, so the lane that streams block b issues four 16-byte loads of one 64-byte run
 * and a warp reads 2 KiB contiguous; scales [ceil(rows / 4)][ng][8] f16: the four rows' d then
 * their m for one group, one 16-byte record (m 0 when symmetric: the kernels use -8 d). The
 * rows past `rows` in the last tile are zero. */
#define WEIR_CUDA_Q4T_ROWS 4
/* The two buffers' sizes for rows x kp (kp a multiple of 32, group 32, 64 or 128); 0 or -1
 * for a bad shape. Host only. */
int weir_cuda_q4t_bytes(int64_t rows, int64_t kp, int32_t group, size_t *tile_bytes,
                        size_t *scale_bytes);
/* Host memory to host memory: tiles and scales (sized by weir_cuda_q4t_bytes, the caller's)
 * from the row layout above (nib, d, m; m NULL = symmetric). Returns 0, or -1 for a bad shape
 * or a NULL buffer (nothing written then). Host only, thread-safe (touches only its args). */
int weir_cuda_q4t_repack(void *tiles, void *scales, const void *nib, const void *d,
                         const void *m, int64_t rows, int64_t kp, int32_t group);
/* weir_cuda_gemv_q4_dp4a_set on tiled weights: one warp per tile of 4 rows, so every
 * activation block loaded serves four rows. tiles[i] and scales[i] 16-byte aligned, sym[i]
 * non-zero for a symmetric weight; y[i] [n_tokens][rows[i]] (rows past rows[i] are never
 * written). Equal bit for bit to weir_cuda_gemv_q4_dp4a_set on the row layout. */
cudaError_t weir_cuda_gemv_q4t_dp4a_set(cudaStream_t stream, int32_t n_weights,
                                        const void *const *tiles, const void *const *scales,
                                        const int *sym, const int64_t *rows, float *const *y,
                                        const void *act, int64_t cols, int64_t kp, int32_t group,
                                        int64_t n_tokens);
/* weir_cuda_dequant_q4_f16 and weir_cuda_embed_q4 on tiled weights. */
cudaError_t weir_cuda_dequant_q4t_f16(cudaStream_t stream, void *dst, const void *tiles,
                                      const void *scales, int sym, const float *inv_s,
                                      int64_t rows, int64_t cols, int64_t kp, int32_t group);
cudaError_t weir_cuda_embed_q4t(cudaStream_t stream, const void *tiles, const void *scales,
                                int sym, const float *inv_s, const int32_t *ids, float *out,
                                int64_t n, int64_t rows, int64_t cols, int64_t kp, int32_t group,
                                int *bad_flag);

/* ---- sampler.cu: the default sampler on the device -----------------------------------------
 * Semantics are plugins/sampler/default's (see docs/cuda.md for the one ordering difference).
 * The host fills one weir_cuda_sample_params per row and one weir_cuda_penalty entry per
 * distinct (row, token) that suppression or a penalty touches. */

#define WEIR_CUDA_PEN_SUPPRESS 1
#define WEIR_CUDA_PEN_REPEAT 2
#define WEIR_CUDA_PEN_BIAS 4 /* add `bias` first (logit_bias) */

typedef struct weir_cuda_penalty {
  int32_t row, token, flags, count; /* count: occurrences in the output (0: none applied) */
  float bias;                       /* the summed logit bias of the token (PEN_BIAS) */
} weir_cuda_penalty;

typedef struct weir_cuda_sample_params {
  float inv_temp;    /* 1 / temperature (unused when greedy) */
  float top_p, min_p;
  float repetition_penalty, presence_penalty, frequency_penalty;
  int32_t top_k;
  int32_t num_logprobs; /* -1, 0, 1..20 */
  int32_t greedy;
  int32_t sorted;    /* candidates come sorted (top-k or top-p active) */
  int32_t mask_row;  /* the row's allowed-token mask in the masks array, or -1 for none */
  double u;          /* the row's uniform draw in [0, 1) */
} weir_cuda_sample_params;

typedef struct weir_cuda_sample_result {
  int32_t token;
  float logprob;
  int32_t num_top;
  int32_t drew;      /* 1 when the row consumed its random number */
  int32_t top_tokens[20];
  float top_logprobs[20];
} weir_cuda_sample_result;

/* Applies suppression and penalties in place on logits ([rows][vocab]). */
cudaError_t weir_cuda_sample_penalties(cudaStream_t stream, float *logits, int32_t vocab,
                                       const weir_cuda_sample_params *params,
                                       const weir_cuda_penalty *pen, int32_t num_pen);
/* Sets to -inf every logit of a row whose bit is clear in its allowed-token mask: masks is
 * device uint32 [number of masked rows][ceil(vocab / 32)], row r's mask at params[r].mask_row
 * (rows with mask_row < 0 are left alone). */
cudaError_t weir_cuda_sample_mask(cudaStream_t stream, float *logits, int32_t num_rows,
                                  int32_t vocab, const weir_cuda_sample_params *params,
                                  const uint32_t *masks);
/* Device workspace the sort needs for num_rows x vocab (keys, ids, CUB's temporary storage). */
size_t weir_cuda_sample_workspace_bytes(int32_t num_rows, int32_t vocab);
/* Sorts each row whose params.sorted is set (scaled logits, descending, ties to the lower id)
 * and samples every row. offsets: device int32 [2 * num_rows] scratch. probs: NULL, or device
 * [num_rows][vocab] to receive the final distribution instead of drawing. */
cudaError_t weir_cuda_sample(cudaStream_t stream, const float *logits, int32_t num_rows,
                             int32_t vocab, const weir_cuda_sample_params *params,
                             int32_t any_sorted, void *workspace, size_t workspace_bytes,
                             int32_t *offsets, weir_cuda_sample_result *results, float *probs);

#ifdef __cplusplus
}
#endif
#endif
