// 4-bit weights on the GPU (quant/awq_int4): the small-batch GEMVs (dp4a on activations
// quantized to int8 by quant_int8.cu, and the older one on f32 activations that dequantizes in
// registers),
// dequantization to f16 for the cuBLAS path, and the embedding gather. Packing happens on the
// host (the AWQ search and the rounding are the CPU plugin's, shared), so nothing here packs.
//
// Layout (weir_cuda_kernels.h): per row, kp / 32 blocks of 16 bytes in GGUF Q4 order (byte j:
// element j in the low nibble, element 16 + j in the high one), so a Q4_0 / Q4_1 block's bytes
// are copied as they are; f16 scale d and offset m per group of `group` columns (w = d q + m;
// with m NULL the weight is symmetric, w = d (q - 8)); an optional f32 input multiplier per
// column (the inverse AWQ scale).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string.h>

#include "weir_cuda_device.cuh"
#include "weir_cuda_kernels.h"

namespace {

using namespace weir_cuda;

constexpr int kWarps4 = 8;

struct q4_ref {
  const unsigned char *nib;
  const __half *d, *m; // m NULL: symmetric
  const float *inv_s;  // NULL: none
  int64_t rows, cols, kp, ng;
  int group;
};

__device__ __forceinline__ void scales(const q4_ref &w, int64_t r, int64_t k, float *d, float *m) {
  const int64_t g = r * w.ng + k / w.group;
  *d = __half2float(w.d[g]);
  *m = w.m ? __half2float(w.m[g]) : -8.0f * *d;
}

__device__ __forceinline__ int nibble(const unsigned char *blk, int j) {
  return j < 16 ? (blk[j] & 15) : (blk[j - 16] >> 4);
}

// One warp per output row, one lane per 32-column block (16 bytes, one uint4 load): the row
// streams through once, coalesced; x is served from L1/L2.
template <int NT>
__global__ void __launch_bounds__(kWarps4 * 32)
    gemv_q4_kernel(q4_ref w, const float *__restrict__ x, float *__restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t o = (int64_t)blockIdx.x * kWarps4 + (threadIdx.x >> 5);
  if (o >= w.rows) return;
  const uint4 *row = reinterpret_cast<const uint4 *>(w.nib + o * (w.kp / 2));
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  const int64_t nb = w.kp / 32;
  for (int64_t i = lane; i < nb; i += 32) {
    const uint4 raw = __ldg(row + i);
    unsigned char b[16];
    memcpy(b, &raw, 16);
    const int64_t k0 = i * 32;
    float d, m;
    scales(w, o, k0, &d, &m);
    const int n = w.cols - k0 < 32 ? (int)(w.cols - k0) : 32;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float *xt = x + t * w.cols + k0;
      float sq = 0.0f, sx = 0.0f;
      if (n == 32 && !w.inv_s) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float a = __ldg(xt + j), c = __ldg(xt + 16 + j);
          sq += (float)(b[j] & 15) * a + (float)(b[j] >> 4) * c;
          sx += a + c;
        }
      } else {
        for (int j = 0; j < n; ++j) {
          const float a = xt[j] * (w.inv_s ? w.inv_s[k0 + j] : 1.0f);
          sq += (float)nibble(b, j) * a;
          sx += a;
        }
      }
      acc[t] += d * sq + m * sx;
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) y[t * w.rows + o] = s;
  }
}

// The dp4a GEMV: y[t0 + t][o] for t < min(NT, n - t0), t0 = blockIdx.y * NT, on int8
// activations (x diag(inv_s) quantized per 32 columns: xq [n][kp], xd [n][kp / 32]). One warp
// per output row, one lane per 32-column block: its 16 bytes split into the low nibbles
// (columns 0-15) and high nibbles (16-31) as four bytes per word, which dp4a multiplies with
// the block's 32 activation bytes (two int4 loads per token, from L1/L2); a second dp4a
// against ones gives sum(xq) for the offset m. The weights stream once per tile of NT tokens.
//
// Up to WEIR_CUDA_Q4_MAX_SET weights of one input (q/k/v, gate/up: same cols, kp, group and
// inverse scale, applied when x was quantized) run in one launch: their rows are numbered one
// after the other (end[i] = rows of weights 0..i) and each warp picks its weight, as the int8
// set kernel does.
struct Q4Set {
  const unsigned char *nib[WEIR_CUDA_Q4_MAX_SET];
  const __half *d[WEIR_CUDA_Q4_MAX_SET], *m[WEIR_CUDA_Q4_MAX_SET];
  float *y[WEIR_CUDA_Q4_MAX_SET];
  int64_t end[WEIR_CUDA_Q4_MAX_SET];
  int n;
};

template <int NT>
__global__ void __launch_bounds__(kWarps4 * 32)
    gemv_q4_dp4a_kernel(q4_ref w, Q4Set set, const signed char *__restrict__ xq,
                        const float *__restrict__ xd, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t go = (int64_t)blockIdx.x * kWarps4 + (threadIdx.x >> 5);
  if (go >= set.end[set.n - 1]) return;
  // This warp's weight (constant indices only: the set stays in param space).
  int64_t o = go;
  float *y = set.y[0];
  w.nib = set.nib[0];
  w.d = set.d[0];
  w.m = set.m[0];
  w.rows = set.end[0];
#pragma unroll
  for (int i = 1; i < WEIR_CUDA_Q4_MAX_SET; ++i)
    if (i < set.n && go >= set.end[i - 1]) {
      o = go - set.end[i - 1];
      y = set.y[i];
      w.nib = set.nib[i];
      w.d = set.d[i];
      w.m = set.m[i];
      w.rows = set.end[i] - set.end[i - 1];
    }
  const int64_t t0 = (int64_t)blockIdx.y * NT;
  const int nt = (int)(n - t0 < NT ? n - t0 : NT);
  const uint4 *row = reinterpret_cast<const uint4 *>(w.nib + o * (w.kp / 2));
  const int64_t nb = w.kp / 32;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t i = lane; i < nb; i += 32) {
    const uint4 raw = __ldg(row + i);
    const unsigned wv[4] = {raw.x, raw.y, raw.z, raw.w};
    int lo[4], hi[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo[j] = (int)(wv[j] & 0x0f0f0f0fu);
      hi[j] = (int)((wv[j] >> 4) & 0x0f0f0f0fu);
    }
    float d, m;
    scales(w, o, i * 32, &d, &m);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < nt) {
        const int64_t tk = t0 + t;
        const int4 *xp = reinterpret_cast<const int4 *>(xq + tk * w.kp + i * 32);
        const int4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
        const int xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
        int s = 0, sx = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s = dp4a(lo[j], xa[j], s);
          s = dp4a(hi[j], xb[j], s);
          sx = dp4a(0x01010101, xa[j], sx);
          sx = dp4a(0x01010101, xb[j], sx);
        }
        acc[t] += __ldg(xd + tk * nb + i) * (d * (float)s + m * (float)sx);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < nt) y[(t0 + t) * w.rows + o] = s;
  }
}

__device__ __forceinline__ float value(const q4_ref &w, int64_t r, int64_t c) {
  float d, m;
  scales(w, r, c, &d, &m);
  const unsigned char *blk = w.nib + r * (w.kp / 2) + (c / 32) * 16;
  const float v = d * (float)nibble(blk, (int)(c % 32)) + m;
  return w.inv_s ? v * w.inv_s[c] : v;
}

// W diag(inv_s) as f16 [rows][cols], for cuBLAS (the activations then need no scaling).
__global__ void dequant_q4_f16_kernel(__half *__restrict__ dst, q4_ref w) {
  const int64_t total = w.rows * w.cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = value(w, i / w.cols, i % w.cols);
    dst[i] = __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f));
  }
}

__global__ void embed_q4_kernel(q4_ref w, const int32_t *__restrict__ ids,
                                float *__restrict__ out, int *bad_flag) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float *o = out + t * w.cols;
  if (id < 0 || id >= w.rows) {
    for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) o[i] = 0.0f;
    if (threadIdx.x == 0 && bad_flag) *reinterpret_cast<volatile int *>(bad_flag) = 1;
    return;
  }
  for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) o[i] = value(w, id, i);
}

bool make_ref(q4_ref *w, const void *nib, const void *d, const void *m, const float *inv_s,
              int64_t rows, int64_t cols, int64_t kp, int32_t group) {
  if ((group != 32 && group != 64 && group != 128) || kp % 32 != 0 || kp < cols || cols <= 0 ||
      rows <= 0)
    return false;
  w->nib = static_cast<const unsigned char *>(nib);
  w->d = static_cast<const __half *>(d);
  w->m = static_cast<const __half *>(m);
  w->inv_s = inv_s;
  w->rows = rows;
  w->cols = cols;
  w->kp = kp;
  w->group = group;
  w->ng = (kp + group - 1) / group;
  return true;
}

template <int NT> void launch_gemv4(cudaStream_t s, const q4_ref &w, const float *x, float *y) {
  const unsigned grid = (unsigned)((w.rows + kWarps4 - 1) / kWarps4);
  WEIR_LAUNCH(gemv_q4_kernel<NT>, grid, kWarps4 * 32, 0, s)(w, x, y);
}

template <int NT>
void launch_dp4a4(cudaStream_t s, const q4_ref &w, const Q4Set &set, const signed char *xq,
                  const float *xd, int64_t n) {
  const int64_t total = set.end[set.n - 1];
  const dim3 grid((unsigned)((total + kWarps4 - 1) / kWarps4), (unsigned)((n + NT - 1) / NT));
  WEIR_LAUNCH(gemv_q4_dp4a_kernel<NT>, grid, kWarps4 * 32, 0, s)(w, set, xq, xd, n);
}

} // namespace

extern "C" cudaError_t weir_cuda_gemv_q4_dp4a_set(cudaStream_t stream, int32_t n_weights,
                                                  const void *const *nib, const void *const *d,
                                                  const void *const *m, const int64_t *rows,
                                                  float *const *y, const void *act, int64_t cols,
                                                  int64_t kp, int32_t group, int64_t n_tokens) {
  q4_ref w;
  if (n_weights < 1 || n_weights > WEIR_CUDA_Q4_MAX_SET || n_tokens < 0 ||
      (reinterpret_cast<uintptr_t>(act) & 255))
    return cudaErrorInvalidValue;
  Q4Set set;
  memset(&set, 0, sizeof set);
  set.n = n_weights;
  int64_t total = 0;
  for (int i = 0; i < n_weights; ++i) {
    // Every weight must be symmetric or not alike (m NULL or not): the kernel reads m per
    // weight, so mixing is fine; shapes are checked by make_ref on each.
    if (!nib[i] || !d[i] || !y[i] || (uintptr_t)nib[i] % 16 != 0 ||
        !make_ref(&w, nib[i], d[i], m[i], nullptr, rows[i], cols, kp, group))
      return cudaErrorInvalidValue;
    set.nib[i] = static_cast<const unsigned char *>(nib[i]);
    set.d[i] = static_cast<const __half *>(d[i]);
    set.m[i] = static_cast<const __half *>(m[i]);
    set.y[i] = y[i];
    total += rows[i];
    set.end[i] = total;
  }
  if (n_tokens == 0) return cudaSuccess;
  if ((n_tokens + 15) / 16 > 65535 || (total + kWarps4 - 1) / kWarps4 > 0x7fffffff)
    return cudaErrorInvalidValue;
  const signed char *xq = static_cast<const signed char *>(act);
  // weir_cuda_q8_act_bytes' layout: the scales at the next 256 bytes after xq.
  const float *xd =
      reinterpret_cast<const float *>(xq + ((size_t)n_tokens * (size_t)kp + 255) / 256 * 256);
  if (n_tokens == 1) launch_dp4a4<1>(stream, w, set, xq, xd, n_tokens);
  else if (n_tokens == 2) launch_dp4a4<2>(stream, w, set, xq, xd, n_tokens);
  else if (n_tokens <= 4) launch_dp4a4<4>(stream, w, set, xq, xd, n_tokens);
  else if (n_tokens <= 8) launch_dp4a4<8>(stream, w, set, xq, xd, n_tokens);
  else launch_dp4a4<16>(stream, w, set, xq, xd, n_tokens);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gemv_q4_dp4a(cudaStream_t stream, const void *nib,
                                              const void *d, const void *m, const void *act,
                                              float *y, int64_t cols, int64_t kp, int64_t rows,
                                              int32_t group, int64_t n_tokens) {
  return weir_cuda_gemv_q4_dp4a_set(stream, 1, &nib, &d, &m, &rows, &y, act, cols, kp, group,
                                    n_tokens);
}

extern "C" cudaError_t weir_cuda_gemv_q4(cudaStream_t stream, const void *nib, const void *d,
                                         const void *m, const float *inv_s, const float *x,
                                         float *y, int64_t cols, int64_t kp, int64_t rows,
                                         int32_t group, int32_t n_tokens) {
  q4_ref w;
  if (n_tokens < 1 || n_tokens > 8 || (uintptr_t)nib % 16 != 0 ||
      !make_ref(&w, nib, d, m, inv_s, rows, cols, kp, group))
    return cudaErrorInvalidValue;
  switch (n_tokens) {
  case 1: launch_gemv4<1>(stream, w, x, y); break;
  case 2: launch_gemv4<2>(stream, w, x, y); break;
  case 3: launch_gemv4<3>(stream, w, x, y); break;
  case 4: launch_gemv4<4>(stream, w, x, y); break;
  case 5: launch_gemv4<5>(stream, w, x, y); break;
  case 6: launch_gemv4<6>(stream, w, x, y); break;
  case 7: launch_gemv4<7>(stream, w, x, y); break;
  default: launch_gemv4<8>(stream, w, x, y); break;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_dequant_q4_f16(cudaStream_t stream, void *dst, const void *nib,
                                                const void *d, const void *m, const float *inv_s,
                                                int64_t rows, int64_t cols, int64_t kp,
                                                int32_t group) {
  q4_ref w;
  if (!make_ref(&w, nib, d, m, inv_s, rows, cols, kp, group)) return cudaErrorInvalidValue;
  WEIR_LAUNCH(dequant_q4_f16_kernel, grid_for(rows * cols, 256), 256, 0, stream)(
      static_cast<__half *>(dst), w);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_embed_q4(cudaStream_t stream, const void *nib, const void *d,
                                          const void *m, const float *inv_s, const int32_t *ids,
                                          float *out, int64_t n, int64_t rows, int64_t cols,
                                          int64_t kp, int32_t group, int *bad_flag) {
  q4_ref w;
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffff || !make_ref(&w, nib, d, m, inv_s, rows, cols, kp, group))
    return cudaErrorInvalidValue;
  WEIR_LAUNCH(embed_q4_kernel, (unsigned)n, 256, 0, stream)(w, ids, out, bad_flag);
  return cudaGetLastError();
}
