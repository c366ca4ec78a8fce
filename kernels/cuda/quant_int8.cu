// int8 weights on the GPU (quant/int8 and Q8_0 tensors under quant/awq_int4): packing GGUF
// sources to int8 with an f32 scale per 32 columns, the small-batch GEMV that dequantizes in
// registers, dequantization to f16 for the cuBLAS path, and the embedding gather.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string.h>

#include "weir_cuda_device.cuh"
#include "weir_cuda_kernels.h"

namespace {

using namespace weir_cuda;

constexpr int kWarps = 8;

// One warp per 32-column group: lane i holds column 32 g + i. Q8_0 blocks are copied exactly;
// other sources get d = max|x| / 127, q = round(x / d) (the CPU int8 rule). A non-finite group
// gets q = 0 and d = NaN.
__global__ void __launch_bounds__(kWarps * 32)
    pack_q8_kernel(signed char *__restrict__ q, float *__restrict__ d,
                   const unsigned char *__restrict__ src, int dtype, int64_t rows, int64_t cols,
                   int64_t kp, size_t row_bytes) {
  const int lane = threadIdx.x & 31;
  const int64_t ng = kp / 32;
  const int64_t gidx = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (gidx >= rows * ng) return;
  const int64_t r = gidx / ng, g = gidx % ng, c = g * 32 + lane;
  const unsigned char *row = src + (size_t)r * row_bytes;
  signed char *qo = q + r * kp + c;
  if (dtype == kQ8_0) {
    const bool in = c < cols;
    *qo = in ? reinterpret_cast<const signed char *>(row + g * 34 + 2)[lane] : 0;
    if (lane == 0) d[r * ng + g] = g * 32 < cols ? ld_half(row + g * 34) : 0.0f;
    return;
  }
  const float x = c < cols ? src_value(row, dtype, c) : 0.0f;
  const float a = fabsf(x);
  const float bad = warp_max(a <= 3.4e38f ? 0.0f : 1.0f); // Inf or NaN in the group
  const float amax = warp_max(a <= 3.4e38f ? a : 0.0f);
  float dd = amax / 127.0f;
  const float inv = dd > 0.0f ? 1.0f / dd : 0.0f;
  float v = rintf(x * inv);
  v = fminf(fmaxf(v, -127.0f), 127.0f);
  if (bad > 0.0f) {
    v = 0.0f;
    dd = nanf("");
  }
  *qo = (signed char)(int)v;
  if (lane == 0) d[r * ng + g] = dd;
}

// One warp per output row; each lane takes 16 columns (one uint4 of int8) at a time, so the
// row streams through once, coalesced. A 16-column piece lies inside one 32-column group.
template <int NT>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_q8_kernel(const signed char *__restrict__ q, const float *__restrict__ d,
                   const float *__restrict__ x, float *__restrict__ y, int64_t cols, int64_t kp,
                   int64_t rows) {
  const int lane = threadIdx.x & 31;
  const int64_t o = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (o >= rows) return;
  const uint4 *qr = reinterpret_cast<const uint4 *>(q + o * kp);
  const float *dr = d + o * (kp / 32);
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  const int64_t n16 = kp / 16;
  for (int64_t i = lane; i < n16; i += 32) {
    const uint4 raw = __ldg(qr + i);
    signed char qs[16];
    memcpy(qs, &raw, 16);
    const float dv = __ldg(dr + (i >> 1));
    const int64_t k0 = i * 16;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float *xt = x + t * cols + k0;
      float s = 0.0f;
      if (k0 + 16 <= cols) {
#pragma unroll
        for (int j = 0; j < 16; ++j) s += (float)qs[j] * __ldg(xt + j);
      } else {
        for (int j = 0; j < 16 && k0 + j < cols; ++j) s += (float)qs[j] * xt[j];
      }
      acc[t] += dv * s;
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * rows + o] = s;
  }
}

// W as f16 [rows][cols] (q * d rounded once), for cuBLAS.
__global__ void dequant_q8_f16_kernel(__half *__restrict__ dst, const signed char *__restrict__ q,
                                      const float *__restrict__ d, int64_t rows, int64_t cols,
                                      int64_t kp) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float v = (float)q[r * kp + c] * d[r * (kp / 32) + c / 32];
    v = fminf(fmaxf(v, -65504.0f), 65504.0f);
    dst[i] = __float2half_rn(v);
  }
}

__global__ void embed_q8_kernel(const signed char *__restrict__ q, const float *__restrict__ d,
                                const int32_t *__restrict__ ids, float *__restrict__ out,
                                int64_t rows, int64_t cols, int64_t kp, int *bad_flag) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float *o = out + t * cols;
  if (id < 0 || id >= rows) {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = 0.0f;
    if (threadIdx.x == 0 && bad_flag) *reinterpret_cast<volatile int *>(bad_flag) = 1;
    return;
  }
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
    o[i] = (float)q[(int64_t)id * kp + i] * d[(int64_t)id * (kp / 32) + i / 32];
}

template <int NT>
void launch_gemv(cudaStream_t s, const signed char *q, const float *d, const float *x, float *y,
                 int64_t cols, int64_t kp, int64_t rows) {
  const unsigned grid = (unsigned)((rows + kWarps - 1) / kWarps);
  WEIR_LAUNCH(gemv_q8_kernel<NT>, grid, kWarps * 32, 0, s)(q, d, x, y, cols, kp, rows);
}

} // namespace

extern "C" cudaError_t weir_cuda_pack_q8(cudaStream_t stream, void *q, float *d, const void *src,
                                         int32_t src_dtype, int64_t rows, int64_t cols,
                                         int64_t kp, size_t src_row_bytes) {
  switch (src_dtype) {
  case kF32: case kF16: case kBF16: break;
  case kQ8_0: case kQ4_0: case kQ4_1:
    if (cols % 32 != 0) return cudaErrorInvalidValue;
    break;
  default: return cudaErrorInvalidValue;
  }
  if (kp % 32 != 0 || kp < cols) return cudaErrorInvalidValue;
  const int64_t groups = rows * (kp / 32);
  if (groups <= 0) return cudaSuccess;
  const unsigned grid = (unsigned)((groups + kWarps - 1) / kWarps);
  WEIR_LAUNCH(pack_q8_kernel, grid, kWarps * 32, 0, stream)(
      static_cast<signed char *>(q), d, static_cast<const unsigned char *>(src), src_dtype, rows,
      cols, kp, src_row_bytes);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gemv_q8(cudaStream_t stream, const void *q, const float *d,
                                         const float *x, float *y, int64_t cols, int64_t kp,
                                         int64_t rows, int32_t n_tokens) {
  if (n_tokens < 1 || n_tokens > 8 || kp % 16 != 0 || (uintptr_t)q % 16 != 0)
    return cudaErrorInvalidValue;
  if (cols <= 0 || rows <= 0) return cudaSuccess;
  const signed char *qq = static_cast<const signed char *>(q);
  switch (n_tokens) {
  case 1: launch_gemv<1>(stream, qq, d, x, y, cols, kp, rows); break;
  case 2: launch_gemv<2>(stream, qq, d, x, y, cols, kp, rows); break;
  case 3: launch_gemv<3>(stream, qq, d, x, y, cols, kp, rows); break;
  case 4: launch_gemv<4>(stream, qq, d, x, y, cols, kp, rows); break;
  case 5: launch_gemv<5>(stream, qq, d, x, y, cols, kp, rows); break;
  case 6: launch_gemv<6>(stream, qq, d, x, y, cols, kp, rows); break;
  case 7: launch_gemv<7>(stream, qq, d, x, y, cols, kp, rows); break;
  default: launch_gemv<8>(stream, qq, d, x, y, cols, kp, rows); break;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_dequant_q8_f16(cudaStream_t stream, void *dst, const void *q,
                                                const float *d, int64_t rows, int64_t cols,
                                                int64_t kp) {
  const int64_t total = rows * cols;
  if (total <= 0) return cudaSuccess;
  WEIR_LAUNCH(dequant_q8_f16_kernel, grid_for(total, 256), 256, 0, stream)(
      static_cast<__half *>(dst), static_cast<const signed char *>(q), d, rows, cols, kp);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_embed_q8(cudaStream_t stream, const void *q, const float *d,
                                          const int32_t *ids, float *out, int64_t n, int64_t rows,
                                          int64_t cols, int64_t kp, int *bad_flag) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  WEIR_LAUNCH(embed_q8_kernel, (unsigned)n, 256, 0, stream)(
      static_cast<const signed char *>(q), d, ids, out, rows, cols, kp, bad_flag);
  return cudaGetLastError();
}
