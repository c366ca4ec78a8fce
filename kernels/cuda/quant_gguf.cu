// Native GGUF weight blocks on the GPU (quant/gguf on cuda): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K..Q6_K, IQ4_NL and IQ4_XS stay in their GGUF blocks on the device. A matmul quantizes its
// activations once to int8 blocks of 32 with an f32 scale and sum (Q8_1-style), then
//   gemv:     one warp per output row walks the row's 32-element chunks (lane i takes chunks
//             i, i + 32, ...: the warp reads a contiguous span of blocks), decodes each chunk
//             to int8 in registers (quant_gguf.cuh) and takes dp4a dot products with up to 16
//             tokens at once, so the weights stream through once per 16 tokens (a batch of 16
//             reads the bytes of a batch of 1). Larger batches run the same kernel over
//             tiles of 16 tokens (grid.y).
//   dequant:  W as f16 for the cuBLAS path of large batches.
//   embed:    rows dequantized to f32.
// Decoding and layouts: quant_gguf.cuh. The C launchers are declared in weir_cuda_gguf.h.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string.h>

#include "quant_gguf.cuh"
#include "weir_cuda_device.cuh"
#include "weir_cuda_gguf.h"

namespace {

using weir_cuda::grid_for;
using weir_cuda::warp_max;
using weir_cuda::warp_sum;
using namespace weir_cuda::gguf;

constexpr int kWarps = 8;

// One warp per block of 32 activations: d = max|x| / 127, q = round(x / d), and d * sum(q)
// for the types with a per-block offset. A block holding Inf or NaN gets d = NaN, so every
// output it touches is NaN rather than silently finite.
__global__ void __launch_bounds__(kWarps * 32)
    quantize_act_kernel(const float *__restrict__ x, signed char *__restrict__ xq,
                        float *__restrict__ xs, int64_t n, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = cols / 32;
  const int64_t g = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (g >= n * nb) return;
  const int64_t i = g * 32 + lane; // == t * cols + (g % nb) * 32 + lane
  const float v = x[i];
  const float av = fabsf(v);
  const float bad = warp_max(av <= 3.4e38f ? 0.0f : 1.0f);
  const float amax = warp_max(av <= 3.4e38f ? av : 0.0f);
  float d = amax / 127.0f;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  float q = fminf(fmaxf(rintf(v * inv), -127.0f), 127.0f);
  if (bad > 0.0f) {
    q = 0.0f;
    d = nanf("");
  }
  xq[i] = (signed char)(int)q;
  const float sum = warp_sum(q);
  if (lane == 0) {
    xs[2 * g] = d;
    xs[2 * g + 1] = d * sum;
  }
}

// y[t0 + t][o] for t < min(NT, n - t0), t0 = blockIdx.y * NT: one warp per output row o.
template <int T, int NT>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const unsigned char *__restrict__ w, size_t row_bytes,
                const signed char *__restrict__ xq, const float *__restrict__ xs,
                float *__restrict__ y, int64_t cols, int64_t rows, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t o = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (o >= rows) return;
  const int64_t t0 = (int64_t)blockIdx.y * NT;
  const int nt = (int)(n - t0 < NT ? n - t0 : NT);
  const unsigned char *row = w + (size_t)o * row_bytes;
  const int64_t nch = cols / 32;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t ci = lane; ci < nch; ci += 32) {
    int v[8];
    float a[2], b[2];
    decode_chunk<T>(row, nch, ci, v, a, b);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < nt) {
        const int64_t xt = (t0 + t) * nch + ci;
        const int4 *xp = reinterpret_cast<const int4 *>(xq + xt * 32);
        const int4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
        const float dx = __ldg(xs + 2 * xt);
        const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        if (Block<T>::kHalves) {
          int s0 = 0, s1 = 0, m0 = 0, m1 = 0;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            s0 = dot4(v[i], xi[i], s0);
            m0 = dot4(0x01010101, xi[i], m0);
            s1 = dot4(v[4 + i], xi[4 + i], s1);
            m1 = dot4(0x01010101, xi[4 + i], m1);
          }
          acc[t] += dx * (a[0] * (float)s0 + a[1] * (float)s1 + b[0] * (float)m0 +
                          b[1] * (float)m1);
        } else {
          int s = 0;
#pragma unroll
          for (int i = 0; i < 8; ++i) s = dot4(v[i], xi[i], s);
          acc[t] += dx * a[0] * (float)s + b[0] * __ldg(xs + 2 * xt + 1);
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

template <int T>
__device__ __forceinline__ float chunk_value(const int v[8], const float a[2], const float b[2],
                                             int j) {
  const int q = (int)(signed char)(v[j >> 2] >> (8 * (j & 3)));
  return a[j >> 4] * (float)q + b[j >> 4];
}

// W as f16 [rows][cols], one thread per 32-element chunk (values saturated to +-65504).
template <int T>
__global__ void dequant_f16_kernel(__half *__restrict__ dst, const unsigned char *__restrict__ w,
                                   size_t row_bytes, int64_t rows, int64_t cols) {
  const int64_t nch = cols / 32, total = rows * nch;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / nch, ci = i % nch;
    int v[8];
    float a[2], b[2];
    decode_chunk<T>(w + (size_t)r * row_bytes, nch, ci, v, a, b);
    __half *o = dst + r * cols + ci * 32;
#pragma unroll 4
    for (int j = 0; j < 32; ++j)
      o[j] = __float2half_rn(fminf(fmaxf(chunk_value<T>(v, a, b, j), -65504.0f), 65504.0f));
  }
}

// out[t] = row ids[t] as f32, one CTA per id; an id outside [0, rows) zero-fills its row and
// raises *bad_flag.
template <int T>
__global__ void embed_kernel(const unsigned char *__restrict__ w, size_t row_bytes,
                             const int32_t *__restrict__ ids, float *__restrict__ out,
                             int64_t rows, int64_t cols, int *bad_flag) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float *o = out + t * cols;
  if (id < 0 || id >= rows) {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) o[i] = 0.0f;
    if (threadIdx.x == 0 && bad_flag) *reinterpret_cast<volatile int *>(bad_flag) = 1;
    return;
  }
  const unsigned char *row = w + (size_t)id * row_bytes;
  for (int64_t ci = threadIdx.x; ci < cols / 32; ci += blockDim.x) {
    int v[8];
    float a[2], b[2];
    decode_chunk<T>(row, cols / 32, ci, v, a, b);
    for (int j = 0; j < 32; ++j) o[ci * 32 + j] = chunk_value<T>(v, a, b, j);
  }
}

template <int T, int NT>
void launch_gemv(cudaStream_t s, const unsigned char *w, size_t row_bytes, const signed char *xq,
                 const float *xs, float *y, int64_t cols, int64_t rows, int64_t n) {
  const dim3 grid((unsigned)((rows + kWarps - 1) / kWarps), (unsigned)((n + NT - 1) / NT));
  WEIR_LAUNCH((gemv_kernel<T, NT>), grid, kWarps * 32, 0, s)(w, row_bytes, xq, xs, y, cols,
                                                             rows, n);
}

template <int T>
void gemv_type(cudaStream_t s, const unsigned char *w, size_t row_bytes, const signed char *xq,
               const float *xs, float *y, int64_t cols, int64_t rows, int64_t n) {
  if (n == 1) launch_gemv<T, 1>(s, w, row_bytes, xq, xs, y, cols, rows, n);
  else if (n == 2) launch_gemv<T, 2>(s, w, row_bytes, xq, xs, y, cols, rows, n);
  else if (n <= 4) launch_gemv<T, 4>(s, w, row_bytes, xq, xs, y, cols, rows, n);
  else if (n <= 8) launch_gemv<T, 8>(s, w, row_bytes, xq, xs, y, cols, rows, n);
  else launch_gemv<T, 16>(s, w, row_bytes, xq, xs, y, cols, rows, n);
}

template <int T>
void dequant_type(cudaStream_t s, void *dst, const unsigned char *w, size_t row_bytes,
                  int64_t rows, int64_t cols) {
  WEIR_LAUNCH(dequant_f16_kernel<T>, grid_for(rows * (cols / 32), 256), 256, 0, s)(
      static_cast<__half *>(dst), w, row_bytes, rows, cols);
}

template <int T>
void embed_type(cudaStream_t s, const unsigned char *w, size_t row_bytes, const int32_t *ids,
                float *out, int64_t n, int64_t rows, int64_t cols, int *bad_flag) {
  WEIR_LAUNCH(embed_kernel<T>, (unsigned)n, 128, 0, s)(w, row_bytes, ids, out, rows, cols,
                                                       bad_flag);
}

#define WEIR_GGUF_DISPATCH(dtype, CALL)                                                       \
  switch (dtype) {                                                                            \
  case kQ4_0: CALL(kQ4_0); break;                                                             \
  case kQ4_1: CALL(kQ4_1); break;                                                             \
  case kQ5_0: CALL(kQ5_0); break;                                                             \
  case kQ5_1: CALL(kQ5_1); break;                                                             \
  case kQ8_0: CALL(kQ8_0); break;                                                             \
  case kQ2_K: CALL(kQ2_K); break;                                                             \
  case kQ3_K: CALL(kQ3_K); break;                                                             \
  case kQ4_K: CALL(kQ4_K); break;                                                             \
  case kQ5_K: CALL(kQ5_K); break;                                                             \
  case kQ6_K: CALL(kQ6_K); break;                                                             \
  case kIQ4_NL: CALL(kIQ4_NL); break;                                                         \
  case kIQ4_XS: CALL(kIQ4_XS); break;                                                         \
  case kQ3_K_R: CALL(kQ3_K_R); break;                                                         \
  case kQ6_K_R: CALL(kQ6_K_R); break;                                                         \
  default: return cudaErrorInvalidValue;                                                      \
  }

// Whether (dtype, cols, row_bytes, w) describe rows this file can read.
bool rows_ok(int32_t dtype, const void *w, size_t row_bytes, int64_t cols) {
  const int64_t be = weir_cuda_gguf_block_elems(dtype);
  const size_t bb = weir_cuda_gguf_block_bytes(dtype);
  if (be == 0 || cols <= 0 || cols % be != 0) return false;
  // The alignment quant_gguf.cuh's wide loads rely on (block_align; planes: 16).
  const bool planes = dtype == kQ3_K_R || dtype == kQ6_K_R;
  const size_t align = planes ? 16 : bb % 16 == 0 ? 16 : bb % 4 == 0 ? 4 : 2;
  if (row_bytes < (size_t)(cols / be) * bb || row_bytes % align != 0) return false;
  return reinterpret_cast<uintptr_t>(w) % align == 0;
}

} // namespace

extern "C" int64_t weir_cuda_gguf_block_elems(int32_t dtype) {
  switch (dtype) {
  case kQ4_0: case kQ4_1: case kQ5_0: case kQ5_1: case kQ8_0: case kIQ4_NL: return 32;
  case kQ2_K: case kQ3_K: case kQ4_K: case kQ5_K: case kQ6_K: case kIQ4_XS: case kQ3_K_R:
  case kQ6_K_R:
    return 256;
  default: return 0;
  }
}

extern "C" size_t weir_cuda_gguf_block_bytes(int32_t dtype) {
  switch (dtype) {
  case kQ4_0: return Block<kQ4_0>::kBytes;
  case kQ4_1: return Block<kQ4_1>::kBytes;
  case kQ5_0: return Block<kQ5_0>::kBytes;
  case kQ5_1: return Block<kQ5_1>::kBytes;
  case kQ8_0: return Block<kQ8_0>::kBytes;
  case kQ2_K: return Block<kQ2_K>::kBytes;
  case kQ3_K: return Block<kQ3_K>::kBytes;
  case kQ4_K: return Block<kQ4_K>::kBytes;
  case kQ5_K: return Block<kQ5_K>::kBytes;
  case kQ6_K: return Block<kQ6_K>::kBytes;
  case kIQ4_NL: return Block<kIQ4_NL>::kBytes;
  case kIQ4_XS: return Block<kIQ4_XS>::kBytes;
  case kQ3_K_R: return Block<kQ3_K_R>::kBytes;
  case kQ6_K_R: return Block<kQ6_K_R>::kBytes;
  default: return 0;
  }
}

namespace {
// A repacked type's planes per super-block: the quant bytes (first in the block), the scale
// bytes (at soff in the block), the f16 d (at doff); qbytes + sbytes + 2 = the block.
struct plane_split {
  size_t qbytes, sbytes, soff, doff;
};
bool split_of(int32_t dtype, plane_split *p) {
  if (dtype == kQ6_K) *p = {192, 16, 192, 208};
  else if (dtype == kQ3_K) *p = {96, 12, 96, 108};
  else return false;
  return true;
}
} // namespace

extern "C" int32_t weir_cuda_gguf_repacked_type(int32_t dtype) {
  return dtype == kQ6_K ? kQ6_K_R : dtype == kQ3_K ? kQ3_K_R : dtype;
}

extern "C" size_t weir_cuda_gguf_repacked_row_bytes(int32_t dtype, int64_t cols) {
  plane_split p;
  if (!split_of(dtype, &p) || cols <= 0 || cols % 256 != 0) return 0;
  return ((size_t)(cols / 256) * (p.qbytes + p.sbytes + 2) + 15) / 16 * 16;
}

extern "C" int weir_cuda_gguf_repack(int32_t dtype, void *dst, size_t dst_row_bytes,
                                     const void *src, size_t src_row_bytes, int64_t rows,
                                     int64_t cols) {
  const size_t need = weir_cuda_gguf_repacked_row_bytes(dtype, cols);
  plane_split p;
  if (need == 0 || !split_of(dtype, &p) || !dst || !src || rows <= 0 || dst_row_bytes < need ||
      dst_row_bytes % 16 != 0)
    return -1;
  const size_t bb = p.qbytes + p.sbytes + 2;
  const int64_t nsb = cols / 256;
  if (src_row_bytes < (size_t)nsb * bb) return -1;
  for (int64_t r = 0; r < rows; ++r) {
    const unsigned char *in = static_cast<const unsigned char *>(src) + (size_t)r * src_row_bytes;
    unsigned char *out = static_cast<unsigned char *>(dst) + (size_t)r * dst_row_bytes;
    memset(out, 0, dst_row_bytes); // the padding at the row's end
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const unsigned char *b = in + sb * bb;
      memcpy(out + sb * p.qbytes, b, p.qbytes);                            // the quants
      memcpy(out + nsb * p.qbytes + sb * p.sbytes, b + p.soff, p.sbytes);  // the scales
      memcpy(out + nsb * (p.qbytes + p.sbytes) + sb * 2, b + p.doff, 2);   // d
    }
  }
  return 0;
}

extern "C" size_t weir_cuda_gguf_act_bytes(int64_t n_tokens, int64_t cols) {
  if (n_tokens <= 0 || cols <= 0) return 0;
  const size_t q = ((size_t)n_tokens * (size_t)cols + 255) / 256 * 256;
  return q + (size_t)n_tokens * (size_t)(cols / 32) * 8;
}

extern "C" cudaError_t weir_cuda_gguf_quantize_act(cudaStream_t stream, const float *x, void *act,
                                                   int64_t n_tokens, int64_t cols) {
  if (n_tokens < 0 || cols < 0 || cols % 32 != 0 || (reinterpret_cast<uintptr_t>(act) & 255))
    return cudaErrorInvalidValue;
  const int64_t blocks = n_tokens * (cols / 32);
  if (blocks == 0) return cudaSuccess;
  signed char *xq = static_cast<signed char *>(act);
  float *xs = reinterpret_cast<float *>(xq + ((size_t)n_tokens * (size_t)cols + 255) / 256 * 256);
  const unsigned grid = (unsigned)((blocks + kWarps - 1) / kWarps);
  if ((blocks + kWarps - 1) / kWarps > 0x7fffffff) return cudaErrorInvalidValue;
  WEIR_LAUNCH(quantize_act_kernel, grid, kWarps * 32, 0, stream)(x, xq, xs, n_tokens, cols);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gguf_matmul(cudaStream_t stream, int32_t dtype, const void *w,
                                             size_t row_bytes, const void *act, float *y,
                                             int64_t cols, int64_t rows, int64_t n_tokens) {
  if (!rows_ok(dtype, w, row_bytes, cols) || n_tokens < 0 || rows < 0 ||
      (reinterpret_cast<uintptr_t>(act) & 255))
    return cudaErrorInvalidValue;
  if (n_tokens == 0 || rows == 0) return cudaSuccess;
  if ((n_tokens + 15) / 16 > 65535 || (rows + kWarps - 1) / kWarps > 0x7fffffff)
    return cudaErrorInvalidValue;
  const unsigned char *wb = static_cast<const unsigned char *>(w);
  const signed char *xq = static_cast<const signed char *>(act);
  const float *xs =
      reinterpret_cast<const float *>(xq + ((size_t)n_tokens * (size_t)cols + 255) / 256 * 256);
#define WEIR_GGUF_GEMV(T) gemv_type<T>(stream, wb, row_bytes, xq, xs, y, cols, rows, n_tokens)
  WEIR_GGUF_DISPATCH(dtype, WEIR_GGUF_GEMV)
#undef WEIR_GGUF_GEMV
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gguf_dequant_f16(cudaStream_t stream, int32_t dtype, void *dst,
                                                  const void *w, size_t row_bytes, int64_t rows,
                                                  int64_t cols) {
  if (!rows_ok(dtype, w, row_bytes, cols) || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const unsigned char *wb = static_cast<const unsigned char *>(w);
#define WEIR_GGUF_DEQ(T) dequant_type<T>(stream, dst, wb, row_bytes, rows, cols)
  WEIR_GGUF_DISPATCH(dtype, WEIR_GGUF_DEQ)
#undef WEIR_GGUF_DEQ
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_gguf_embed(cudaStream_t stream, int32_t dtype, const void *w,
                                            size_t row_bytes, const int32_t *ids, float *out,
                                            int64_t n, int64_t rows, int64_t cols,
                                            int *bad_flag) {
  if (!rows_ok(dtype, w, row_bytes, cols) || n < 0 || n > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const unsigned char *wb = static_cast<const unsigned char *>(w);
#define WEIR_GGUF_EMB(T) embed_type<T>(stream, wb, row_bytes, ids, out, n, rows, cols, bad_flag)
  WEIR_GGUF_DISPATCH(dtype, WEIR_GGUF_EMB)
#undef WEIR_GGUF_EMB
  return cudaGetLastError();
}
