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

// The first GEMV (kept as the baseline bench_cuda_layouts measures the tiled one against, and
// reached through weir_cuda_gemv_f16_rows): one warp per output row, lanes stride along the
// row with 16-byte loads of W (8 halves); x (n_tokens rows, small) is served by L1/L2. On an
// H200 it read at ~35% of copy bandwidth at 1 token and 12% at 8 (2026-11-28): every x load
// serves one row, so at 8 tokens each 16 bytes of W pull 256 bytes of x through L1, and the
// runtime-bounded unroll leaves few W loads in flight.
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

// W is read exactly once per call: a streaming load that does not allocate in L1 leaves L1 to
// x, which every row re-reads. (The CPU shim and nvcc's host pass see a plain load.)
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
#if defined(__CUDA_ARCH__)
  uint4 v;
  // Not volatile: a pure read of memory no kernel writes while it runs, so the compiler may
  // schedule it freely.
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#else
  return __ldg(p);
#endif
}

// acc[t][r] += dot(W[r] chunk, x[t] chunk) for one 8-half chunk of R rows: each x load (two
// float4 per token) serves all R rows.
template <int NT, int R>
__device__ __forceinline__ void f16_chunk_fma(const uint4 (&raw)[R], const float *__restrict__ x,
                                              int64_t in, int64_t c, float (&acc)[NT][R]) {
  float wf[R][8];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    __half2 h2[4]; // copied rather than cast: no type punning (compiles to register moves)
    memcpy(static_cast<void *>(h2), &raw[r], sizeof raw[r]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(h2[j]);
      wf[r][2 * j] = f.x;
      wf[r][2 * j + 1] = f.y;
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float4 *xv = reinterpret_cast<const float4 *>(x + t * in + c * 8);
    const float4 a = __ldg(xv), b = __ldg(xv + 1);
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[t][r] += wf[r][0] * a.x + wf[r][1] * a.y + wf[r][2] * a.z + wf[r][3] * a.w +
                   wf[r][4] * b.x + wf[r][5] * b.y + wf[r][6] * b.z + wf[r][7] * b.w;
  }
}

// One step of the tiled GEMV: U chunks (c = base + 32 u) of R rows, all loads issued before
// any arithmetic. Guard: chunks at or past n8 are skipped (the last, partial step only, so the
// full steps carry no branches around their loads).
template <int NT, int R, int U, bool Guard>
__device__ __forceinline__ void f16_tile_step(const uint4 *const (&wr)[R],
                                              const float *__restrict__ x, int64_t in,
                                              int64_t n8, int64_t base, float (&acc)[NT][R]) {
  uint4 raw[U][R];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = base + 32 * u;
#pragma unroll
    for (int r = 0; r < R; ++r)
      raw[u][r] = !Guard || c < n8 ? ld_stream(wr[r] + c) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = base + 32 * u;
    if (!Guard || c < n8) f16_chunk_fma<NT, R>(raw[u], x, in, c, acc);
  }
}

constexpr int kTileWarps = 4;

// The decode GEMV (issue 34). One pass over W serves all NT tokens from registers:
// - each warp owns R consecutive rows; lanes take 16-byte chunks (8 halves) c = lane + 32 k,
//   so a warp's loads of one row are 512 contiguous bytes (coalesced);
// - all U x R chunk loads of a step are issued before any arithmetic (explicit arrays, not a
//   runtime-bounded `#pragma unroll`), so each lane keeps U x R x 16 bytes in flight: with
//   R x U = 16, 8 KiB per warp, enough to cover DRAM latency with ~8 warps per SM;
// - each x load (L1, 2 x float4 per token per chunk) serves R rows: R = 4 at 5..8 tokens
//   quarters the L1 traffic that capped the row-per-warp kernel;
// - the tail (n8 not a multiple of 32 U) is one guarded step after the unguarded ones;
// - rows past `out` (out % R != 0) re-read the last row and are not stored.
// Small CTAs (4 warps) give out / (4 R) CTAs: 256 for a 2048-row matrix at R = 2.
template <int NT, int R, int U>
__global__ void __launch_bounds__(kTileWarps * 32)
    gemv_f16_tile_kernel(const __half *__restrict__ w, const float *__restrict__ x,
                         float *__restrict__ y, int64_t in, int64_t out) {
  const int lane = threadIdx.x & 31;
  const int64_t o0 = ((int64_t)blockIdx.x * kTileWarps + (threadIdx.x >> 5)) * R;
  if (o0 >= out) return;
  const int64_t n8 = in / 8;
  const uint4 *wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = o0 + r < out ? o0 + r : out - 1;
    wr[r] = reinterpret_cast<const uint4 *>(w + row * in);
  }
  float acc[NT][R];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[t][r] = 0.0f;
  // Full steps while the whole warp's last chunk (lane 31's) is inside the row, so no lane
  // needs a guard; then one guarded step for what is left.
  int64_t base = lane;
  for (; base - lane + 32 * U <= n8; base += 32 * U)
    f16_tile_step<NT, R, U, false>(wr, x, in, n8, base, acc);
  if (base < n8) f16_tile_step<NT, R, U, true>(wr, x, in, n8, base, acc);
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float s = warp_sum(acc[t][r]);
      if (lane == 0 && o0 + r < out) y[t * out + o0 + r] = s;
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

// R rows per warp and U chunks per row in flight, by token count: R x U = 16 keeps 64
// registers of W in flight; more tokens want more rows per x load (L1 traffic per W byte is
// 2 NT / R x 16 bytes), fewer tokens more warps.
template <int NT>
void launch_gemv_tile(cudaStream_t s, const __half *w, const float *x, float *y, int64_t in,
                      int64_t out) {
  constexpr int R = NT <= 4 ? 2 : 4;
  constexpr int U = 16 / R;
  const int64_t rows_per_cta = (int64_t)kTileWarps * R;
  const unsigned grid = (unsigned)((out + rows_per_cta - 1) / rows_per_cta);
  WEIR_LAUNCH((gemv_f16_tile_kernel<NT, R, U>), grid, kTileWarps * 32, 0, s)(w, x, y, in, out);
}

typedef void (*gemv_launcher)(cudaStream_t, const __half *, const float *, float *, int64_t,
                              int64_t);

// The shared checks and the scalar fallback of weir_cuda_gemv_f16 and its _rows baseline.
cudaError_t gemv_f16_dispatch(cudaStream_t stream, const void *w, const float *x, float *y,
                              int64_t in, int64_t out, int32_t n_tokens,
                              const gemv_launcher (&vec)[8]) {
  if (n_tokens < 1 || n_tokens > 8) return cudaErrorInvalidValue;
  if (in <= 0 || out <= 0) return cudaSuccess;
  const __half *wh = static_cast<const __half *>(w);
  const bool aligned = in % 8 == 0 && (uintptr_t)w % 16 == 0 && (uintptr_t)x % 16 == 0;
  if (!aligned) {
    const unsigned grid = (unsigned)((out + kGemvWarps - 1) / kGemvWarps);
    WEIR_LAUNCH(gemv_f16_scalar_kernel, grid, kGemvWarps * 32, 0, stream)(wh, x, y, in, out, n_tokens);
    return cudaGetLastError();
  }
  vec[n_tokens - 1](stream, wh, x, y, in, out);
  return cudaGetLastError();
}

const gemv_launcher k_gemv_tile[8] = {launch_gemv_tile<1>, launch_gemv_tile<2>,
                                      launch_gemv_tile<3>, launch_gemv_tile<4>,
                                      launch_gemv_tile<5>, launch_gemv_tile<6>,
                                      launch_gemv_tile<7>, launch_gemv_tile<8>};
const gemv_launcher k_gemv_rows[8] = {launch_gemv_vec<1>, launch_gemv_vec<2>, launch_gemv_vec<3>,
                                      launch_gemv_vec<4>, launch_gemv_vec<5>, launch_gemv_vec<6>,
                                      launch_gemv_vec<7>, launch_gemv_vec<8>};

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
  return gemv_f16_dispatch(stream, w, x, y, in, out, n_tokens, k_gemv_tile);
}

extern "C" cudaError_t weir_cuda_gemv_f16_rows(cudaStream_t stream, const void *w,
                                               const float *x, float *y, int64_t in,
                                               int64_t out, int32_t n_tokens) {
  return gemv_f16_dispatch(stream, w, x, y, in, out, n_tokens, k_gemv_rows);
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
