/* kernels/cuda/quant_gguf.cu: native GGUF weight blocks on the GPU (quant/gguf on cuda).
 *
 * Weights: rows of GGUF blocks exactly as the file stores them (dtype Q4_0 2, Q4_1 3, Q5_0 6,
 * Q5_1 7, Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, IQ4_NL 20, IQ4_XS 23), row r at
 * w + r * row_bytes in device memory; row_bytes at least the row's block bytes, cols a
 * multiple of the type's block (32, or 256 for the K-quants and IQ4_XS). w and row_bytes are
 * multiples of 16 for Q4_K and Q5_K (their blocks are 144 and 176 bytes), of 4 for Q4_1,
 * Q5_1, Q2_K and IQ4_XS, of 2 for the rest: rows of whole blocks back to back from a 16-byte
 * aligned allocation always are.
 * Activations: a matmul first quantizes x [n_tokens][cols] f32 into `act` (device, 256-byte
 * aligned, weir_cuda_gguf_act_bytes): int8 [n_tokens][cols], then per 32 values f32 {d, d *
 * sum(q)} with x ~ q d (d = max|x| / 127; a block holding Inf/NaN gets d = NaN).
 * Every launcher enqueues on `stream` and returns cudaErrorInvalidValue, launching nothing,
 * for a type or shape it does not take. Not thread-safe beyond CUDA's stream rules. */
#ifndef WEIR_CUDA_GGUF_H
#define WEIR_CUDA_GGUF_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Load-time repacks (docs/cuda.md, "not yet run on a GPU"): a type whose blocks allow only
 * narrow loads is rewritten once, on the host, into a layout of 16-byte aligned planes that
 * the kernels read with 16-byte loads; the kernels then take the repacked type's number. A
 * row of nsb super-blocks becomes quants [nsb][Q], scales [nsb][S], f16 d [nsb], padded with
 * zeros to a multiple of 16 bytes; w and row_bytes multiples of 16:
 *   WEIR_CUDA_GGUF_Q6_K_R: Q6_K (210-byte blocks, 2-byte aligned): Q = 192 (ql[128] then
 *   qh[64]), S = 16 (int8 scales);
 *   WEIR_CUDA_GGUF_Q3_K_R: Q3_K (110-byte blocks, 2-byte aligned): Q = 96 (hmask[32] then
 *   qs[64]), S = 12 (the packed 6-bit scales). */
#define WEIR_CUDA_GGUF_Q3_K_R 0x10B
#define WEIR_CUDA_GGUF_Q6_K_R 0x10E
/* The type a weight of `dtype` is repacked to (dtype itself when it is read as stored). */
int32_t weir_cuda_gguf_repacked_type(int32_t dtype);
/* Bytes of one repacked row of cols columns of `dtype`; 0 when dtype is not repacked or cols
 * is not whole blocks. */
size_t weir_cuda_gguf_repacked_row_bytes(int32_t dtype, int64_t cols);
/* Host memory to host memory: rows x cols of `dtype` at src (src_row_bytes apart) into the
 * repacked layout at dst (dst_row_bytes apart: at least weir_cuda_gguf_repacked_row_bytes,
 * a multiple of 16). Returns 0, or -1 (nothing written) for a type that is not repacked, a
 * bad shape or stride, or a NULL buffer. Thread-safe (touches only its arguments). */
int weir_cuda_gguf_repack(int32_t dtype, void *dst, size_t dst_row_bytes, const void *src,
                          size_t src_row_bytes, int64_t rows, int64_t cols);
/* Elements and bytes per block of a type these kernels read natively (a repacked type's
 * bytes per block are its planes' share, the source's); 0 for any other. */
int64_t weir_cuda_gguf_block_elems(int32_t dtype);
size_t weir_cuda_gguf_block_bytes(int32_t dtype);
/* Bytes of the quantized activations of n_tokens x cols (cols a multiple of 32). */
size_t weir_cuda_gguf_act_bytes(int64_t n_tokens, int64_t cols);
/* act = x quantized as above. */
cudaError_t weir_cuda_gguf_quantize_act(cudaStream_t stream, const float *x, void *act,
                                        int64_t n_tokens, int64_t cols);
/* y[t][o] = sum_c W[o][c] xq[t][c] for t < n_tokens, from `act` as quantize_act left it: one
 * warp per output row, dp4a products, the weights read once per 16 tokens. */
cudaError_t weir_cuda_gguf_matmul(cudaStream_t stream, int32_t dtype, const void *w,
                                  size_t row_bytes, const void *act, float *y, int64_t cols,
                                  int64_t rows, int64_t n_tokens);
/* dst = W as f16 [rows][cols] (saturated to +-65504), for cuBLAS. */
cudaError_t weir_cuda_gguf_dequant_f16(cudaStream_t stream, int32_t dtype, void *dst,
                                       const void *w, size_t row_bytes, int64_t rows,
                                       int64_t cols);
/* out[t] = row ids[t] of W as f32 [n][cols]; an id outside [0, rows) zero-fills its row and
 * sets *bad_flag (host-mapped or device int) to 1. */
cudaError_t weir_cuda_gguf_embed(cudaStream_t stream, int32_t dtype, const void *w,
                                 size_t row_bytes, const int32_t *ids, float *out, int64_t n,
                                 int64_t rows, int64_t cols, int *bad_flag);

#ifdef __cplusplus
}
#endif
#endif
