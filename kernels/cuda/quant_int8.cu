// int8 weights on the GPU (quant/int8 and Q8_0 tensors under quant/awq_int4): packing GGUF
// sources to int8 with an f32 scale per 32 columns, the small-batch GEMVs (f32 activations,
// dequantizing in registers; and the dp4a one on activations quantized once per input, for
// up to WEIR_CUDA_Q8_MAX_SET weights per launch), dequantization to f16 for the cuBLAS path,
// and the embedding gather.
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

// ---- dp4a GEMV: int8 activations, 1..16 tokens in registers, several weights per launch ----

// Activations for the dp4a GEMVs, one warp per 32-column block: xq int8 [n][kp] (zero past
// cols) and xd f32 [n][kp / 32] of x (times inv_s column-wise when given: awq_int4's inverse
// scale, as the CPU awq_int4 plugin applies it before quantizing), by the CPU int8 plugin's rule (kernels/cpu/matmul_q8.c)
// operation for operation: d = max|x| / 127, inv = 1 / d (0 when d = 0 or 1 / d overflows),
// q = round-to-nearest-even(x inv) clamped to +-127; a block holding Inf/NaN gets q = 0 and
// d = NaN, so only that token's outputs turn NaN.
__global__ void __launch_bounds__(kWarps * 32)
    quantize_act_q8_kernel(const float *__restrict__ x, const float *__restrict__ inv_s,
                           signed char *__restrict__ xq, float *__restrict__ xd, int64_t n,
                           int64_t cols, int64_t kp) {
  const int lane = threadIdx.x & 31;
  const int64_t ng = kp / 32;
  const int64_t g = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (g >= n * ng) return;
  const int64_t t = g / ng, c = (g % ng) * 32 + lane;
  float v = c < cols ? x[t * cols + c] : 0.0f;
  if (inv_s && c < cols) v *= inv_s[c];
  const float a = fabsf(v);
  const float bad = warp_max(a <= 3.4e38f ? 0.0f : 1.0f);
  const float amax = warp_max(a <= 3.4e38f ? a : 0.0f);
  float dd = amax / 127.0f;
  float inv = dd > 0.0f ? 1.0f / dd : 0.0f;
  if (!(inv <= 3.4e38f)) {
    inv = 0.0f;
    dd = 0.0f;
  }
  float qv = fminf(fmaxf(rintf(v * inv), -127.0f), 127.0f);
  if (bad > 0.0f) {
    qv = 0.0f;
    dd = nanf("");
  }
  xq[t * kp + c] = (signed char)(int)qv;
  if (lane == 0) xd[g] = dd;
}

// Up to kMaxSet weights that multiply the same input (q/k/v, gate/up) in one launch: their
// rows are numbered one after the other (end[i] = rows of weights 0..i), so one grid covers
// them all and the activations are read from one quantized copy.
struct Q8Set {
  const signed char *q[WEIR_CUDA_Q8_MAX_SET];
  const float *d[WEIR_CUDA_Q8_MAX_SET];
  float *y[WEIR_CUDA_Q8_MAX_SET];
  int64_t end[WEIR_CUDA_Q8_MAX_SET];
  int n;
};

// y[t0 + t][o] for t < min(NT, n - t0), t0 = blockIdx.y * NT: one warp per output row; a lane
// takes 16 columns (one uint4) at a time, two pieces in flight, so the warp streams the row
// once, coalesced (512 contiguous bytes per load instruction), and each piece meets the NT
// tokens' activations (int4 loads, L1/L2-resident) in four dp4a each. The integer sum of a
// piece is scaled by d_w d_x of its 32-column block, so batch NT reads the weight bytes of
// batch 1.
template <int NT>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_q8_dp4a_kernel(Q8Set set, const signed char *__restrict__ xq,
                        const float *__restrict__ xd, int64_t kp, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t go = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (go >= set.end[set.n - 1]) return;
  // Which weight this row belongs to (constant indices only: the set stays in param space).
  const signed char *q = set.q[0];
  const float *d = set.d[0];
  float *y = set.y[0];
  int64_t o = go, rows = set.end[0];
#pragma unroll
  for (int i = 1; i < WEIR_CUDA_Q8_MAX_SET; ++i)
    if (i < set.n && go >= set.end[i - 1]) {
      q = set.q[i];
      d = set.d[i];
      y = set.y[i];
      o = go - set.end[i - 1];
      rows = set.end[i] - set.end[i - 1];
    }
  const int64_t t0 = (int64_t)blockIdx.y * NT;
  const int nt = (int)(n - t0 < NT ? n - t0 : NT);
  const int64_t ng = kp / 32, n16 = kp / 16;
  const uint4 *qr = reinterpret_cast<const uint4 *>(q + o * kp);
  const float *dr = d + o * ng;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t i0 = lane; i0 < n16; i0 += 64) {
    uint4 w[2];
    float dw[2];
    w[0] = __ldg(qr + i0);
    dw[0] = __ldg(dr + (i0 >> 1));
    const bool two = i0 + 32 < n16;
    if (two) {
      w[1] = __ldg(qr + i0 + 32);
      dw[1] = __ldg(dr + ((i0 + 32) >> 1));
    }
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      if (p == 1 && !two) break;
      const int64_t i = i0 + 32 * p;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < nt) {
          const int64_t row = (t0 + t) * kp;
          const int4 xv = __ldg(reinterpret_cast<const int4 *>(xq + row) + i);
          int s = dp4a((int)w[p].x, xv.x, 0);
          s = dp4a((int)w[p].y, xv.y, s);
          s = dp4a((int)w[p].z, xv.z, s);
          s = dp4a((int)w[p].w, xv.w, s);
          acc[t] += dw[p] * __ldg(xd + (t0 + t) * ng + (i >> 1)) * (float)s;
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < nt) y[(t0 + t) * rows + o] = s;
  }
}

template <int NT>
void launch_dp4a(cudaStream_t s, const Q8Set &set, const signed char *xq, const float *xd,
                 int64_t kp, int64_t n) {
  const int64_t total = set.end[set.n - 1];
  const dim3 grid((unsigned)((total + kWarps - 1) / kWarps), (unsigned)((n + NT - 1) / NT));
  WEIR_LAUNCH(gemv_q8_dp4a_kernel<NT>, grid, kWarps * 32, 0, s)(set, xq, xd, kp, n);
}

// The quantized activations' layout in one buffer: xq, then xd at the next 256 bytes.
inline size_t act_q_bytes(int64_t n, int64_t kp) {
  return ((size_t)n * (size_t)kp + 255) / 256 * 256;
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

extern "C" size_t weir_cuda_q8_act_bytes(int64_t n_tokens, int64_t kp) {
  if (n_tokens <= 0 || kp <= 0) return 0;
  return act_q_bytes(n_tokens, kp) + (size_t)n_tokens * (size_t)(kp / 32) * 4;
}

extern "C" cudaError_t weir_cuda_q8_quantize_act(cudaStream_t stream, const float *x,
                                                 const float *inv_s, void *act, int64_t n_tokens,
                                                 int64_t cols, int64_t kp) {
  if (n_tokens < 0 || cols < 0 || kp < cols || kp % 32 != 0 ||
      (reinterpret_cast<uintptr_t>(act) & 255))
    return cudaErrorInvalidValue;
  const int64_t blocks = n_tokens * (kp / 32);
  if (blocks == 0) return cudaSuccess;
  if ((blocks + kWarps - 1) / kWarps > 0x7fffffff) return cudaErrorInvalidValue;
  signed char *xq = static_cast<signed char *>(act);
  float *xd = reinterpret_cast<float *>(xq + act_q_bytes(n_tokens, kp));
  WEIR_LAUNCH(quantize_act_q8_kernel, (unsigned)((blocks + kWarps - 1) / kWarps), kWarps * 32, 0,
              stream)(x, inv_s, xq, xd, n_tokens, cols, kp);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gemv_q8_dp4a(cudaStream_t stream, int32_t n_weights,
                                              const void *const *q, const float *const *d,
                                              const int64_t *rows, float *const *y,
                                              const void *act, int64_t kp, int64_t n_tokens) {
  if (n_weights < 1 || n_weights > WEIR_CUDA_Q8_MAX_SET || n_tokens < 0 || kp <= 0 ||
      kp % 32 != 0 || (reinterpret_cast<uintptr_t>(act) & 255))
    return cudaErrorInvalidValue;
  Q8Set set;
  memset(&set, 0, sizeof set);
  set.n = n_weights;
  int64_t total = 0;
  for (int i = 0; i < n_weights; ++i) {
    if (!q[i] || !d[i] || !y[i] || rows[i] < 0 || (reinterpret_cast<uintptr_t>(q[i]) & 15))
      return cudaErrorInvalidValue;
    set.q[i] = static_cast<const signed char *>(q[i]);
    set.d[i] = d[i];
    set.y[i] = y[i];
    total += rows[i];
    set.end[i] = total;
  }
  if (n_tokens == 0 || total == 0) return cudaSuccess;
  if ((total + kWarps - 1) / kWarps > 0x7fffffff || (n_tokens + 15) / 16 > 65535)
    return cudaErrorInvalidValue;
  const signed char *xq = static_cast<const signed char *>(act);
  const float *xd = reinterpret_cast<const float *>(xq + act_q_bytes(n_tokens, kp));
  // Token tiles: the whole batch in registers up to 16; larger batches run tiles of 16.
  if (n_tokens == 1) launch_dp4a<1>(stream, set, xq, xd, kp, n_tokens);
  else if (n_tokens == 2) launch_dp4a<2>(stream, set, xq, xd, kp, n_tokens);
  else if (n_tokens <= 4) launch_dp4a<4>(stream, set, xq, xd, kp, n_tokens);
  else if (n_tokens <= 8) launch_dp4a<8>(stream, set, xq, xd, kp, n_tokens);
  else if (n_tokens <= 12) launch_dp4a<12>(stream, set, xq, xd, kp, n_tokens);
  else launch_dp4a<16>(stream, set, xq, xd, kp, n_tokens);
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
