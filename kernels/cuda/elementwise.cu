// Elementwise operations of the transformer graph (weir_device_ops), f32 in and out.
// All of these are memory-bound: each reads its inputs once and writes its output once.
#include <cuda_runtime.h>
#include <math.h>

#include "weir_cuda_device.cuh"
#include "weir_cuda_kernels.h"

namespace {

constexpr int kNormThreads = 256;

using weir_cuda::grid_for;
using weir_cuda::warp_max;
using weir_cuda::warp_sum;

// Sum over the block; every thread gets the result. `red` holds one float per warp.
__device__ __forceinline__ float block_sum(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  v = lane < nw ? red[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads(); // red may be reused by the caller
  return v;
}

// One block per row; float4 accesses when the row is 16-byte aligned (dim % 4 == 0).
template <bool kVec>
__global__ void rms_norm_kernel(float *__restrict__ out, const float *__restrict__ x,
                                const float *__restrict__ w, int64_t dim, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float *xr = x + row * dim;
  float *orow = out + row * dim;
  float ss = 0.0f;
  if (kVec) {
    const float4 *x4 = reinterpret_cast<const float4 *>(xr);
    for (int64_t i = threadIdx.x; i < dim / 4; i += blockDim.x) {
      float4 a = x4[i];
      ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
  }
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / (float)dim + eps);
  if (kVec) {
    const float4 *x4 = reinterpret_cast<const float4 *>(xr);
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
    float4 *o4 = reinterpret_cast<float4 *>(orow);
    for (int64_t i = threadIdx.x; i < dim / 4; i += blockDim.x) {
      float4 a = x4[i], g = w4[i];
      o4[i] = make_float4(a.x * inv * g.x, a.y * inv * g.y, a.z * inv * g.z, a.w * inv * g.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
  }
}

// residual += x, then out = rms_norm(residual), in one launch: the second pass re-reads the
// sums this same thread wrote (an L1/L2 hit), saving the separate add kernel's full pass.
// out and x carry no __restrict__: the device op lets out equal x (each element is read in the
// first pass and written in the second by the same thread, after the block's reduction).
__global__ void add_rms_norm_kernel(float *out, float *__restrict__ res,
                                    const float *x, const float *__restrict__ w,
                                    int64_t dim, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  float *rr = res + row * dim;
  const float *xr = x + row * dim;
  float *orow = out + row * dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float s = rr[i] + xr[i];
    rr[i] = s;
    ss += s * s;
  }
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / (float)dim + eps);
  // Each thread re-reads only the elements it wrote itself: no barrier needed.
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = rr[i] * inv * w[i];
}

// Greedy picks (ABI 1.8 argmax_rows), one block per row. Each thread scans its strided share
// in increasing index order keeping the first of its largest (strict >, so NaN and -inf never
// win); the tree reduction then keeps the larger value, or the lower index of equal ones:
// exactly the host's rule, whatever the thread count. Shared arrays rather than warp
// shuffles: the reduction carries a (value, index) pair.
constexpr int kArgmaxThreads = 256;
__global__ void argmax_rows_kernel(int32_t *__restrict__ out, float *__restrict__ prob,
                                   const float *__restrict__ x, int64_t n,
                                   const int32_t *__restrict__ ids, int32_t fallback) {
  __shared__ float sv[kArgmaxThreads];
  __shared__ int32_t si[kArgmaxThreads];
  const int t = threadIdx.x;
  const float *xr = x + (int64_t)blockIdx.x * n;
  float bv = -INFINITY;
  int32_t bi = -1;
  for (int64_t i = t; i < n; i += blockDim.x) {
    const float v = xr[i];
    if (v > bv) {
      bv = v;
      bi = (int32_t)i;
    }
  }
  sv[t] = bv;
  si[t] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) {
      const float ov = sv[t + s];
      const int32_t oi = si[t + s];
      if (oi >= 0 && (ov > sv[t] || (ov == sv[t] && oi < si[t]))) {
        sv[t] = ov;
        si[t] = oi;
      }
    }
    __syncthreads();
  }
  const int32_t best = si[0];
  const float m = sv[0];
  if (prob) {
    float sum = 0.0f;
    if (best >= 0)
      for (int64_t i = t; i < n; i += blockDim.x) sum += expf(xr[i] - m);
    __syncthreads(); // every thread has read sv[0] before it is reused
    sv[t] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (t < s) sv[t] += sv[t + s];
      __syncthreads();
    }
    if (t == 0) prob[blockIdx.x] = best >= 0 && sv[0] > 0.0f ? 1.0f / sv[0] : 0.0f;
  }
  if (t == 0) out[blockIdx.x] = best < 0 ? fallback : ids ? ids[best] : best;
}

// One thread per rotated pair. Angles are computed in f32 from an exact integer position;
// sincosf (not the fast intrinsic) keeps large positions accurate.
__global__ void rope_kernel(float *__restrict__ x, const int32_t *__restrict__ pos,
                            int64_t n_tokens, int32_t n_heads, int32_t head_dim,
                            int32_t rot_dim, float log2_base, float freq_scale, int neox) {
  const int32_t half = rot_dim / 2;
  const int64_t total = n_tokens * n_heads * (int64_t)half;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int32_t i = (int32_t)(idx % half);
    const int64_t th = idx / half; // token * n_heads + head
    const int64_t t = th / n_heads;
    float *hp = x + th * head_dim;
    const float theta =
        (float)pos[t] * freq_scale * exp2f(-2.0f * (float)i / (float)rot_dim * log2_base);
    float s, c;
    sincosf(theta, &s, &c);
    const int32_t a = neox ? i : 2 * i;
    const int32_t b = neox ? i + half : 2 * i + 1;
    const float x0 = hp[a], x1 = hp[b];
    hp[a] = x0 * c - x1 * s;
    hp[b] = x0 * s + x1 * c;
  }
}

// RoPE with a frequency per pair (ABI 1.5 rope_freqs): angle pos * inv_freq[i], rotated
// values times mscale.
__global__ void rope_freqs_kernel(float *__restrict__ x, const int32_t *__restrict__ pos,
                                  int64_t n_tokens, int32_t n_heads, int32_t head_dim,
                                  int32_t rot_dim, const float *__restrict__ inv_freq,
                                  float mscale, int neox) {
  const int32_t half = rot_dim / 2;
  const int64_t total = n_tokens * n_heads * (int64_t)half;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int32_t i = (int32_t)(idx % half);
    const int64_t th = idx / half;
    const int64_t t = th / n_heads;
    float *hp = x + th * head_dim;
    float s, c;
    sincosf((float)pos[t] * inv_freq[i], &s, &c);
    c *= mscale;
    s *= mscale;
    const int32_t a = neox ? i : 2 * i;
    const int32_t b = neox ? i + half : 2 * i + 1;
    const float x0 = hp[a], x1 = hp[b];
    hp[a] = x0 * c - x1 * s;
    hp[b] = x0 * s + x1 * c;
  }
}

// GELU (tanh form) gating, as Gemma's FFN: out = gelu(gate) * up.
__global__ void geglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * up[i];
  }
}

// ---- Encoders (ABI 1.6: layer_norm, gelu, attention_full) ------------------------------

// LayerNorm, one block per row: the mean, then the variance around it, then the affine map.
__global__ void layer_norm_kernel(float *__restrict__ out, const float *__restrict__ x,
                                  const float *__restrict__ w, const float *__restrict__ b,
                                  int64_t dim, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float *xr = x + row * dim;
  float *orow = out + row * dim;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, red) / (float)dim;
  float v = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = xr[i] - mean;
    v += d * d;
  }
  const float inv = rsqrtf(block_sum(v, red) / (float)dim + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float y = (xr[i] - mean) * inv * w[i];
    orow[i] = b ? y + b[i] : y;
  }
}

// Exact GELU (erf form, BERT's).
__global__ void gelu_kernel(float *out, const float *x, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

constexpr int kAttnFullMaxHeadDim = 256;

// Bidirectional attention, one warp per (query token, head): each lane runs an online softmax
// over keys lane, lane + 32, ... (its running max, sum and weighted values), then the lanes
// merge their partial results rescaled to the common max.
__global__ void attention_full_kernel(float *__restrict__ out, const float *__restrict__ q,
                                      const float *__restrict__ k, const float *__restrict__ v,
                                      int64_t n, int32_t n_heads, int32_t n_kv_heads,
                                      int32_t head_dim, float scale) {
  const int64_t i = blockIdx.x / n_heads;
  const int32_t h = (int32_t)(blockIdx.x % n_heads);
  const int32_t g = h / (n_heads / n_kv_heads);
  const int lane = threadIdx.x;
  const int64_t qs = (int64_t)n_heads * head_dim, ks = (int64_t)n_kv_heads * head_dim;
  const float *qi = q + i * qs + (int64_t)h * head_dim;
  float acc[kAttnFullMaxHeadDim];
  for (int32_t d = 0; d < head_dim; d++) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = lane; j < n; j += 32) {
    const float *kj = k + j * ks + (int64_t)g * head_dim;
    const float *vj = v + j * ks + (int64_t)g * head_dim;
    float sc = 0.0f;
    for (int32_t d = 0; d < head_dim; d++) sc += qi[d] * kj[d];
    sc *= scale;
    const float mn = fmaxf(m, sc);
    const float corr = expf(m - mn), p = expf(sc - mn);
    l = l * corr + p;
    for (int32_t d = 0; d < head_dim; d++) acc[d] = acc[d] * corr + p * vj[d];
    m = mn;
  }
  const float mt = warp_max(m);
  const float f = l > 0.0f ? expf(m - mt) : 0.0f;
  const float lt = warp_sum(l * f);
  float *o = out + i * qs + (int64_t)h * head_dim;
  for (int32_t d = 0; d < head_dim; d++) {
    const float a = warp_sum(acc[d] * f);
    if (lane == 0) o[d] = a / lt;
  }
}

__global__ void scale_kernel(float *x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

__global__ void softcap_kernel(float *x, float cap, float inv_cap, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = cap * tanhf(x[i] * inv_cap);
}

__global__ void swiglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void add_kernel(float *out, const float *a, const float *b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void add_bias_kernel(float *x, const float *bias, int64_t rows, int64_t dim) {
  const int64_t n = rows * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] += bias[i % dim];
}

__global__ void get_rows_kernel(float *__restrict__ out, const float *__restrict__ x,
                                const int32_t *__restrict__ rows, int64_t dim) {
  const int64_t r = rows[blockIdx.x];
  const float *src = x + r * dim;
  float *dst = out + (int64_t)blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// Grid for a grid-stride loop over n items: enough blocks to fill any current GPU, capped so
// that huge n does not launch millions of blocks.
} // namespace

extern "C" cudaError_t weir_cuda_rms_norm(cudaStream_t stream, float *out, const float *x,
                                          const float *weight, int64_t rows, int64_t dim,
                                          float eps) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const bool vec = dim % 4 == 0 && ((uintptr_t)out | (uintptr_t)x | (uintptr_t)weight) % 16 == 0;
  if (vec)
    WEIR_LAUNCH(rms_norm_kernel<true>, (unsigned)rows, kNormThreads, 0, stream)(out, x, weight, dim, eps);
  else
    WEIR_LAUNCH(rms_norm_kernel<false>, (unsigned)rows, kNormThreads, 0, stream)(out, x, weight, dim, eps);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_add_rms_norm(cudaStream_t stream, float *out, float *residual,
                                              const float *x, const float *weight, int64_t rows,
                                              int64_t dim, float eps) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  WEIR_LAUNCH(add_rms_norm_kernel, (unsigned)rows, kNormThreads, 0, stream)(out, residual, x, weight, dim,
                                                                   eps);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_argmax_rows(cudaStream_t stream, int32_t *out, float *prob,
                                             const float *x, int64_t rows, int64_t n,
                                             const int32_t *ids, int32_t fallback) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || n <= 0 || rows > 0x7fffffff || n > 0x7fffffff || !out || !x)
    return cudaErrorInvalidValue;
  WEIR_LAUNCH(argmax_rows_kernel, (unsigned)rows, kArgmaxThreads, 0, stream)(out, prob, x, n,
                                                                             ids, fallback);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_rope(cudaStream_t stream, float *x, const int32_t *positions,
                                      int64_t n_tokens, int32_t n_heads, int32_t head_dim,
                                      int32_t rot_dim, float freq_base, float freq_scale,
                                      int style) {
  if (rot_dim <= 0 || rot_dim > head_dim || rot_dim % 2 != 0 || freq_base <= 0.0f)
    return cudaErrorInvalidValue;
  if (style != 0 && style != 2) return cudaErrorInvalidValue;
  const int64_t total = n_tokens * n_heads * (int64_t)(rot_dim / 2);
  if (total <= 0) return cudaSuccess;
  WEIR_LAUNCH(rope_kernel, grid_for(total, 256), 256, 0, stream)(x, positions, n_tokens, n_heads,
                                                        head_dim, rot_dim, log2f(freq_base),
                                                        freq_scale, style == 2);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_rope_freqs(cudaStream_t stream, float *x,
                                            const int32_t *positions, int64_t n_tokens,
                                            int32_t n_heads, int32_t head_dim, int32_t rot_dim,
                                            const float *inv_freq, float mscale, int style) {
  if (rot_dim <= 0 || rot_dim > head_dim || rot_dim % 2 != 0 || !inv_freq)
    return cudaErrorInvalidValue;
  if (style != 0 && style != 2) return cudaErrorInvalidValue;
  const int64_t total = n_tokens * n_heads * (int64_t)(rot_dim / 2);
  if (total <= 0) return cudaSuccess;
  WEIR_LAUNCH(rope_freqs_kernel, grid_for(total, 256), 256, 0, stream)(
      x, positions, n_tokens, n_heads, head_dim, rot_dim, inv_freq, mscale, style == 2);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_geglu(cudaStream_t stream, float *out, const float *gate,
                                       const float *up, int64_t n) {
  if (n <= 0) return cudaSuccess;
  WEIR_LAUNCH(geglu_kernel, grid_for(n, 256), 256, 0, stream)(out, gate, up, n);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_layer_norm(cudaStream_t stream, float *out, const float *x,
                                            const float *weight, const float *bias,
                                            int64_t rows, int64_t dim, float eps) {
  if (rows <= 0) return cudaSuccess;
  if (dim <= 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  WEIR_LAUNCH(layer_norm_kernel, (unsigned)rows, kNormThreads, 0, stream)(out, x, weight, bias,
                                                                          dim, eps);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gelu(cudaStream_t stream, float *out, const float *x,
                                      int64_t n) {
  if (n <= 0) return cudaSuccess;
  WEIR_LAUNCH(gelu_kernel, grid_for(n, 256), 256, 0, stream)(out, x, n);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_attention_full(cudaStream_t stream, float *out, const float *q,
                                                const float *k, const float *v,
                                                int64_t n_tokens, int32_t n_heads,
                                                int32_t n_kv_heads, int32_t head_dim,
                                                float scale) {
  if (n_tokens <= 0) return cudaSuccess;
  if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || head_dim <= 0 ||
      head_dim > kAttnFullMaxHeadDim || n_tokens * n_heads > 0x7fffffff)
    return cudaErrorInvalidValue;
  WEIR_LAUNCH(attention_full_kernel, (unsigned)(n_tokens * n_heads), 32, 0, stream)(
      out, q, k, v, n_tokens, n_heads, n_kv_heads, head_dim, scale);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_scale(cudaStream_t stream, float *x, float s, int64_t n) {
  if (n <= 0) return cudaSuccess;
  WEIR_LAUNCH(scale_kernel, grid_for(n, 256), 256, 0, stream)(x, s, n);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_softcap(cudaStream_t stream, float *x, float cap, int64_t n) {
  if (!(cap > 0.0f)) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  WEIR_LAUNCH(softcap_kernel, grid_for(n, 256), 256, 0, stream)(x, cap, 1.0f / cap, n);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_swiglu(cudaStream_t stream, float *out, const float *gate,
                                        const float *up, int64_t n) {
  if (n <= 0) return cudaSuccess;
  WEIR_LAUNCH(swiglu_kernel, grid_for(n, 256), 256, 0, stream)(out, gate, up, n);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_add(cudaStream_t stream, float *out, const float *a,
                                     const float *b, int64_t n) {
  if (n <= 0) return cudaSuccess;
  WEIR_LAUNCH(add_kernel, grid_for(n, 256), 256, 0, stream)(out, a, b, n);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_add_bias(cudaStream_t stream, float *x, const float *bias,
                                          int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  WEIR_LAUNCH(add_bias_kernel, grid_for(rows * dim, 256), 256, 0, stream)(x, bias, rows, dim);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_get_rows(cudaStream_t stream, float *out, const float *x,
                                          const int32_t *rows, int64_t n, int64_t dim) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  WEIR_LAUNCH(get_rows_kernel, (unsigned)n, 256, 0, stream)(out, x, rows, dim);
  return cudaGetLastError();
}
