// Half-precision weights: packing GGUF sources to f16 on the device, the small-batch GEMV,
// the activation conversion that feeds cuBLAS, and the embedding gather.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string.h>

#include "weir_cuda_device.cuh"
#include "weir_cuda_kernels.h"

namespace {

using namespace weir_cuda;

// f16 saturates at +-65504: a larger source value (possible from f32/bf16) is clamped rather
// than turned into inf, which would poison every dot product it enters.
__device__ __forceinline__ __half to_half_sat(float x) {
  x = fminf(fmaxf(x, -65504.0f), 65504.0f);
  return __float2half_rn(x);
}

__global__ void pack_f16_kernel(__half *__restrict__ dst, const unsigned char *__restrict__ src,
                                int dtype, int64_t n_rows, int64_t cols, size_t row_bytes) {
  const int64_t total = n_rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const unsigned char *row = src + (size_t)r * row_bytes;
    if (dtype == kF16) dst[i] = reinterpret_cast<const __half *>(row)[c]; // exact copy
    else dst[i] = to_half_sat(src_value(row, dtype, c));
  }
}

__global__ void f32_to_f16_kernel(__half *dst, const float *src, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = to_half_sat(src[i]);
}

constexpr int kGemvWarps = 8;

// One warp per output row: lanes stride along the row with 16-byte loads of W (8 halves), so
// W streams through once, coalesced; x (n_tokens rows, small) is served by L1/L2.
template <int NT>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_f16_vec_kernel(const __half *__restrict__ w, const float *__restrict__ x,
                        float *__restrict__ y, int64_t in, int64_t out) {
  const int lane = threadIdx.x & 31;
  const int64_t o = (int64_t)blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (o >= out) return;
  const uint4 *wr = reinterpret_cast<const uint4 *>(w + o * in);
  const int64_t n8 = in / 8;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
#pragma unroll 4
  for (int64_t i = lane; i < n8; i += 32) {
    const uint4 raw = __ldg(wr + i);
    __half2 h2[4]; // copied rather than cast: no type punning (compiles to register moves)
    memcpy(static_cast<void *>(h2), &raw, sizeof raw);
    float wf[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(h2[j]);
      wf[2 * j] = f.x;
      wf[2 * j + 1] = f.y;
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float4 *xv = reinterpret_cast<const float4 *>(x + t * in + i * 8);
      const float4 a = __ldg(xv), b = __ldg(xv + 1);
      acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * out + o] = s;
  }
}

// Any shape: element-wise loads (rows not 16-byte aligned).
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_f16_scalar_kernel(const __half *__restrict__ w, const float *__restrict__ x,
                           float *__restrict__ y, int64_t in, int64_t out, int nt) {
  const int lane = threadIdx.x & 31;
  const int64_t o = (int64_t)blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (o >= out) return;
  const __half *wr = w + o * in;
  for (int t = 0; t < nt; ++t) {
    float acc = 0.0f;
    for (int64_t i = lane; i < in; i += 32) acc += __half2float(wr[i]) * x[t * in + i];
    acc = warp_sum(acc);
    if (lane == 0) y[t * out + o] = acc;
  }
}

__global__ void embed_f16_kernel(const __half *__restrict__ w, const int32_t *__restrict__ ids,
                                 float *__restrict__ out, int64_t rows, int64_t cols,
                                 int *bad_flag) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float *o = out + t * cols;
  if (id < 0 || id >= rows) {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = 0.0f;
    if (threadIdx.x == 0 && bad_flag) *reinterpret_cast<volatile int *>(bad_flag) = 1;
    return;
  }
  const __half *r = w + (int64_t)id * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = __half2float(r[i]);
}

template <int NT>
void launch_gemv_vec(cudaStream_t s, const __half *w, const float *x, float *y, int64_t in,
                     int64_t out) {
  const unsigned grid = (unsigned)((out + kGemvWarps - 1) / kGemvWarps);
  WEIR_LAUNCH(gemv_f16_vec_kernel<NT>, grid, kGemvWarps * 32, 0, s)(w, x, y, in, out);
}

} // namespace

extern "C" cudaError_t weir_cuda_pack_f16(cudaStream_t stream, void *dst, const void *src,
                                          int32_t src_dtype, int64_t n_rows, int64_t cols,
                                          size_t src_row_bytes) {
  switch (src_dtype) {
  case kF32: case kF16: case kBF16: break;
  case kQ8_0: case kQ4_0: case kQ4_1:
    if (cols % 32 != 0) return cudaErrorInvalidValue;
    break;
  default: return cudaErrorInvalidValue;
  }
  const int64_t total = n_rows * cols;
  if (total <= 0) return cudaSuccess;
  WEIR_LAUNCH(pack_f16_kernel, grid_for(total, 256), 256, 0, stream)(
      static_cast<__half *>(dst), static_cast<const unsigned char *>(src), src_dtype, n_rows,
      cols, src_row_bytes);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_f32_to_f16(cudaStream_t stream, void *dst, const float *src,
                                            int64_t n) {
  if (n <= 0) return cudaSuccess;
  WEIR_LAUNCH(f32_to_f16_kernel, grid_for(n, 256), 256, 0, stream)(static_cast<__half *>(dst), src, n);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gemv_f16(cudaStream_t stream, const void *w, const float *x,
                                          float *y, int64_t in, int64_t out, int32_t n_tokens) {
  if (n_tokens < 1 || n_tokens > 8) return cudaErrorInvalidValue;
  if (in <= 0 || out <= 0) return cudaSuccess;
  const __half *wh = static_cast<const __half *>(w);
  const bool vec = in % 8 == 0 && (uintptr_t)w % 16 == 0 && (uintptr_t)x % 16 == 0;
  if (!vec) {
    const unsigned grid = (unsigned)((out + kGemvWarps - 1) / kGemvWarps);
    WEIR_LAUNCH(gemv_f16_scalar_kernel, grid, kGemvWarps * 32, 0, stream)(wh, x, y, in, out, n_tokens);
    return cudaGetLastError();
  }
  switch (n_tokens) {
  case 1: launch_gemv_vec<1>(stream, wh, x, y, in, out); break;
  case 2: launch_gemv_vec<2>(stream, wh, x, y, in, out); break;
  case 3: launch_gemv_vec<3>(stream, wh, x, y, in, out); break;
  case 4: launch_gemv_vec<4>(stream, wh, x, y, in, out); break;
  case 5: launch_gemv_vec<5>(stream, wh, x, y, in, out); break;
  case 6: launch_gemv_vec<6>(stream, wh, x, y, in, out); break;
  case 7: launch_gemv_vec<7>(stream, wh, x, y, in, out); break;
  default: launch_gemv_vec<8>(stream, wh, x, y, in, out); break;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_embed_f16(cudaStream_t stream, const void *w,
                                           const int32_t *ids, float *out, int64_t n,
                                           int64_t rows, int64_t cols, int *bad_flag) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  WEIR_LAUNCH(embed_f16_kernel, (unsigned)n, 256, 0, stream)(static_cast<const __half *>(w), ids, out,
                                                     rows, cols, bad_flag);
  return cudaGetLastError();
}
