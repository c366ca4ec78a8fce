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

#include <type_traits>

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
  // The tiled layout (weir_cuda_q4t_repack): nib holds the tiles and d the scale records
  // (d[4] then m[4] per tile and group); m is unused and sym says the weight is symmetric.
  bool tiled, sym;
};

constexpr int kTR = WEIR_CUDA_Q4T_ROWS; // rows per tile of the tiled layout

__device__ __forceinline__ void scales(const q4_ref &w, int64_t r, int64_t k, float *d, float *m) {
  if (w.tiled) {
    const __half *rec = w.d + ((r / kTR) * w.ng + k / w.group) * (2 * kTR);
    *d = __half2float(rec[r % kTR]);
    *m = w.sym ? -8.0f * *d : __half2float(rec[kTR + r % kTR]);
    return;
  }
  const int64_t g = r * w.ng + k / w.group;
  *d = __half2float(w.d[g]);
  *m = w.m ? __half2float(w.m[g]) : -8.0f * *d;
}

// Row r's 16-byte block of columns [b * 32, b * 32 + 32) in either layout.
__device__ __forceinline__ const unsigned char *block_of(const q4_ref &w, int64_t r, int64_t b) {
  if (w.tiled) return w.nib + (((r / kTR) * (w.kp / 32) + b) * kTR + r % kTR) * 16;
  return w.nib + r * (w.kp / 2) + b * 16;
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

// The dp4a GEMV on the tiled layout (weir_cuda_q4t_repack): one warp per tile of kTR = 4
// rows, one lane per 32-column block. The lane's four rows' blocks are one 64-byte run (four
// 16-byte loads; the warp streams 2 KiB contiguous per step) and their scales one 16-byte
// record, so each activation block it loads (two int4 per token) and its sum(xq) serve four
// rows instead of one: a quarter of the activation traffic from L1/L2 of the row-per-warp
// kernel above, which is what limits that kernel as the token count grows. Unpacking is two
// logic ops per 8 nibbles (the GGUF order puts columns 0-15 in the low nibbles, 16-31 in the
// high ones, matching the activation bytes). Per row, each lane adds the same terms in the
// same order as gemv_q4_dp4a_kernel, so the outputs are equal bit for bit.
struct Q4TSet {
  const unsigned char *tiles[WEIR_CUDA_Q4_MAX_SET];
  const __half *sc[WEIR_CUDA_Q4_MAX_SET];
  float *y[WEIR_CUDA_Q4_MAX_SET];
  int64_t rows[WEIR_CUDA_Q4_MAX_SET];
  int64_t end[WEIR_CUDA_Q4_MAX_SET]; // in tiles, cumulative
  int sym[WEIR_CUDA_Q4_MAX_SET];
  int n;
};

template <int NT>
__global__ void __launch_bounds__(kWarps4 * 32)
    gemv_q4t_dp4a_kernel(Q4TSet set, const signed char *__restrict__ xq,
                         const float *__restrict__ xd, int64_t kp, int group, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t gt = (int64_t)blockIdx.x * kWarps4 + (threadIdx.x >> 5);
  if (gt >= set.end[set.n - 1]) return;
  int64_t tile = gt, rows = set.rows[0];
  const unsigned char *tiles = set.tiles[0];
  const __half *sc = set.sc[0];
  float *y = set.y[0];
  int sym = set.sym[0];
#pragma unroll
  for (int i = 1; i < WEIR_CUDA_Q4_MAX_SET; ++i)
    if (i < set.n && gt >= set.end[i - 1]) {
      tile = gt - set.end[i - 1];
      rows = set.rows[i];
      tiles = set.tiles[i];
      sc = set.sc[i];
      y = set.y[i];
      sym = set.sym[i];
    }
  const int64_t t0 = (int64_t)blockIdx.y * NT;
  const int nt = (int)(n - t0 < NT ? n - t0 : NT);
  const int64_t nb = kp / 32, ng = (kp + group - 1) / group;
  const uint4 *tp = reinterpret_cast<const uint4 *>(tiles + tile * nb * (kTR * 16));
  const uint4 *sp = reinterpret_cast<const uint4 *>(sc + tile * ng * (2 * kTR));
  float acc[NT][kTR];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int r = 0; r < kTR; ++r) acc[t][r] = 0.0f;
  for (int64_t i = lane; i < nb; i += 32) {
    int lo[kTR][4], hi[kTR][4];
#pragma unroll
    for (int r = 0; r < kTR; ++r) {
      const uint4 raw = __ldg(tp + i * kTR + r);
      const unsigned wv[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        lo[r][j] = (int)(wv[j] & 0x0f0f0f0fu);
        hi[r][j] = (int)((wv[j] >> 4) & 0x0f0f0f0fu);
      }
    }
    const uint4 srec = __ldg(sp + i * 32 / group);
    const unsigned sw[4] = {srec.x, srec.y, srec.z, srec.w}; // d0 d1 | d2 d3 | m0 m1 | m2 m3
    float d[kTR], m[kTR];
#pragma unroll
    for (int r = 0; r < kTR; ++r) {
      d[r] = __half2float(__ushort_as_half((unsigned short)(sw[r / 2] >> (16 * (r % 2)))));
      m[r] = sym ? -8.0f * d[r]
                 : __half2float(__ushort_as_half((unsigned short)(sw[2 + r / 2] >> (16 * (r % 2)))));
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < nt) {
        const int64_t tk = t0 + t;
        const int4 *xp = reinterpret_cast<const int4 *>(xq + tk * kp + i * 32);
        const int4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
        const int xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
        int sx = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          sx = dp4a(0x01010101, xa[j], sx);
          sx = dp4a(0x01010101, xb[j], sx);
        }
        const float xs = __ldg(xd + tk * nb + i);
#pragma unroll
        for (int r = 0; r < kTR; ++r) {
          int s = 0;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            s = dp4a(lo[r][j], xa[j], s);
            s = dp4a(hi[r][j], xb[j], s);
          }
          acc[t][r] += xs * (d[r] * (float)s + m[r] * (float)sx);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int r = 0; r < kTR; ++r) {
      const float v = warp_sum(acc[t][r]);
      const int64_t o = tile * kTR + r;
      if (lane == 0 && t < nt && o < rows) y[(t0 + t) * rows + o] = v;
    }
}

__device__ __forceinline__ float value(const q4_ref &w, int64_t r, int64_t c) {
  float d, m;
  scales(w, r, c, &d, &m);
  const unsigned char *blk = block_of(w, r, c / 32);
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
  w->tiled = false;
  w->sym = m == nullptr;
  return true;
}

// make_ref for the tiled layout: tiles 16-byte aligned, scale records 16-byte aligned.
bool make_tiled_ref(q4_ref *w, const void *tiles, const void *sc, int sym, const float *inv_s,
                    int64_t rows, int64_t cols, int64_t kp, int32_t group) {
  if (!tiles || !sc || (uintptr_t)tiles % 16 != 0 || (uintptr_t)sc % 16 != 0 ||
      !make_ref(w, tiles, sc, nullptr, inv_s, rows, cols, kp, group))
    return false;
  w->tiled = true;
  w->sym = sym != 0;
  return true;
}

// The dp4a launchers' shared tail: the grid limits (tiles of up to 16 tokens on grid.y,
// `units` warps' worth of rows or tiles on grid.x), the per-block scales in `act`
// (weir_cuda_q8_act_bytes' layout: at the next 256 bytes after the n x kp int8 values), and
// f called with the tile width n needs (1, 2, 4, 8 or 16) as a compile-time constant.
template <typename F>
cudaError_t with_act_tile(const void *act, int64_t n, int64_t kp, int64_t units, F &&f) {
  if ((n + 15) / 16 > 65535 || (units + kWarps4 - 1) / kWarps4 > 0x7fffffff)
    return cudaErrorInvalidValue;
  const signed char *xq = static_cast<const signed char *>(act);
  const float *xd =
      reinterpret_cast<const float *>(xq + ((size_t)n * (size_t)kp + 255) / 256 * 256);
  if (n == 1) f(std::integral_constant<int, 1>(), xq, xd);
  else if (n == 2) f(std::integral_constant<int, 2>(), xq, xd);
  else if (n <= 4) f(std::integral_constant<int, 4>(), xq, xd);
  else if (n <= 8) f(std::integral_constant<int, 8>(), xq, xd);
  else f(std::integral_constant<int, 16>(), xq, xd);
  return cudaGetLastError();
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

template <int NT>
void launch_q4t(cudaStream_t s, const Q4TSet &set, const signed char *xq, const float *xd,
                int64_t kp, int group, int64_t n) {
  const int64_t total = set.end[set.n - 1];
  const dim3 grid((unsigned)((total + kWarps4 - 1) / kWarps4), (unsigned)((n + NT - 1) / NT));
  WEIR_LAUNCH(gemv_q4t_dp4a_kernel<NT>, grid, kWarps4 * 32, 0, s)(set, xq, xd, kp, group, n);
}

} // namespace

extern "C" int weir_cuda_q4t_bytes(int64_t rows, int64_t kp, int32_t group, size_t *tile_bytes,
                                   size_t *scale_bytes) {
  if (rows <= 0 || kp <= 0 || kp % 32 != 0 || (group != 32 && group != 64 && group != 128))
    return -1;
  const int64_t tiles = (rows + kTR - 1) / kTR, ng = (kp + group - 1) / group;
  if (tile_bytes) *tile_bytes = (size_t)tiles * (size_t)(kp / 32) * kTR * 16;
  if (scale_bytes) *scale_bytes = (size_t)tiles * (size_t)ng * 2 * kTR * 2;
  return 0;
}

extern "C" int weir_cuda_q4t_repack(void *tiles, void *scales, const void *nib, const void *d,
                                    const void *m, int64_t rows, int64_t kp, int32_t group) {
  size_t tb = 0, sb = 0;
  if (!tiles || !scales || !nib || !d || weir_cuda_q4t_bytes(rows, kp, group, &tb, &sb) != 0)
    return -1;
  // Padding rows of the last tile stay zero: the kernels compute them and drop the result.
  memset(tiles, 0, tb);
  memset(scales, 0, sb);
  const int64_t nb = kp / 32, ng = (kp + group - 1) / group;
  const unsigned char *src = static_cast<const unsigned char *>(nib);
  const uint16_t *ds = static_cast<const uint16_t *>(d), *ms = static_cast<const uint16_t *>(m);
  unsigned char *tp = static_cast<unsigned char *>(tiles);
  uint16_t *sp = static_cast<uint16_t *>(scales);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r / kTR, rr = r % kTR;
    for (int64_t b = 0; b < nb; ++b)
      memcpy(tp + ((t * nb + b) * kTR + rr) * 16, src + r * (kp / 2) + b * 16, 16);
    for (int64_t g = 0; g < ng; ++g) {
      uint16_t *rec = sp + (t * ng + g) * (2 * kTR);
      rec[rr] = ds[r * ng + g];
      rec[kTR + rr] = ms ? ms[r * ng + g] : 0;
    }
  }
  return 0;
}

extern "C" cudaError_t weir_cuda_gemv_q4t_dp4a_set(cudaStream_t stream, int32_t n_weights,
                                                   const void *const *tiles,
                                                   const void *const *scales, const int *sym,
                                                   const int64_t *rows, float *const *y,
                                                   const void *act, int64_t cols, int64_t kp,
                                                   int32_t group, int64_t n_tokens) {
  q4_ref w;
  if (n_weights < 1 || n_weights > WEIR_CUDA_Q4_MAX_SET || n_tokens < 0 || !tiles || !scales ||
      !sym || !rows || !y || (reinterpret_cast<uintptr_t>(act) & 255))
    return cudaErrorInvalidValue;
  Q4TSet set;
  memset(&set, 0, sizeof set);
  set.n = n_weights;
  int64_t total = 0;
  for (int i = 0; i < n_weights; ++i) {
    if (!y[i] || !make_tiled_ref(&w, tiles[i], scales[i], sym[i], nullptr, rows[i], cols, kp,
                                 group))
      return cudaErrorInvalidValue;
    set.tiles[i] = static_cast<const unsigned char *>(tiles[i]);
    set.sc[i] = static_cast<const __half *>(scales[i]);
    set.y[i] = y[i];
    set.rows[i] = rows[i];
    set.sym[i] = sym[i] != 0;
    total += (rows[i] + kTR - 1) / kTR;
    set.end[i] = total;
  }
  if (n_tokens == 0) return cudaSuccess;
  return with_act_tile(act, n_tokens, kp, total, [&](auto nt, const signed char *xq,
                                                     const float *xd) {
    launch_q4t<decltype(nt)::value>(stream, set, xq, xd, kp, group, n_tokens);
  });
}

extern "C" cudaError_t weir_cuda_dequant_q4t_f16(cudaStream_t stream, void *dst, const void *tiles,
                                                 const void *scales, int sym, const float *inv_s,
                                                 int64_t rows, int64_t cols, int64_t kp,
                                                 int32_t group) {
  q4_ref w;
  if (!make_tiled_ref(&w, tiles, scales, sym, inv_s, rows, cols, kp, group))
    return cudaErrorInvalidValue;
  WEIR_LAUNCH(dequant_q4_f16_kernel, grid_for(rows * cols, 256), 256, 0, stream)(
      static_cast<__half *>(dst), w);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_embed_q4t(cudaStream_t stream, const void *tiles,
                                           const void *scales, int sym, const float *inv_s,
                                           const int32_t *ids, float *out, int64_t n,
                                           int64_t rows, int64_t cols, int64_t kp, int32_t group,
                                           int *bad_flag) {
  q4_ref w;
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffff || !make_tiled_ref(&w, tiles, scales, sym, inv_s, rows, cols, kp, group))
    return cudaErrorInvalidValue;
  WEIR_LAUNCH(embed_q4_kernel, (unsigned)n, 256, 0, stream)(w, ids, out, bad_flag);
  return cudaGetLastError();
}

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
  return with_act_tile(act, n_tokens, kp, total, [&](auto nt, const signed char *xq,
                                                     const float *xd) {
    launch_dp4a4<decltype(nt)::value>(stream, w, set, xq, xd, n_tokens);
  });
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
