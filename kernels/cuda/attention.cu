// Paged attention over weir's block pool: the KV write (optionally rotating K by RoPE as it
// stores it, with Q rotated as the attention kernel loads it: ABI 1.7 forward_rope), one tiled
// kernel for decode, prefill, chunked prefill and speculative verification with the split-KV
// reduction fused in, and copy_blocks.
//
// One CTA computes a tile of query rows that share one KV head: `tokens_per_cta` consecutive
// new tokens of one sequence times the G query heads of that KV head's group. So each KV block
// is read from device memory once per tile rather than once per query head (GQA-aware), and
// a decode step (one token per sequence) reads each sequence's KV exactly once. The KV blocks
// of the tile's causal range are visited one at a time through shared memory with an online
// softmax in f32 (flash-attention style). When the grid would be too small to fill the GPU
// (few sequences, long contexts), the blocks are partitioned across `num_splits` CTAs; each
// writes its partial result to a workspace and bumps a per-(tile, KV head) counter, and the CTA
// that finds itself last combines the partials in the same launch (no second kernel, so a
// decode step's attention is one launch per layer whatever the split).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "weir_cuda_device.cuh" // WEIR_LAUNCH: the CPU shim runs these kernels too
#include "weir_cuda_kernels.h"

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxBlockSize = 64;
constexpr int kMaxRows = 32; // query rows per CTA (token x head)
constexpr int kPad = 4;      // floats of padding per K/V row in shared memory (bank spread)

enum { kF32 = 0, kF16 = 1, kI8 = 24, kBF16 = 30 };

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

size_t elem_size(int32_t dt) {
  switch (dt) {
  case kF32: return 4;
  case kF16: case kBF16: return 2;
  case kI8: return 1;
  default: return 0;
  }
}

// ---- RoPE, fused (ABI 1.7 forward_rope) --------------------------------------------------------

// Value d of a head row after RoPE at position pos, computed as elementwise.cu's rope kernels
// compute it (same angle formula, sincosf, same products), so the fused path stores what the
// separate rope launch followed by the KV write would. Values past rope_dim are unchanged.
__device__ __forceinline__ float rope_at(const float *row, int d, int pos,
                                         const weir_cuda_attn_params &p) {
  if (d >= p.rope_dim) return row[d];
  const int half = p.rope_dim / 2;
  int i, a, b;
  if (p.rope_neox) {
    i = d < half ? d : d - half;
    a = i;
    b = i + half;
  } else {
    i = d / 2;
    a = 2 * i;
    b = 2 * i + 1;
  }
  float sn, cs;
  if (p.rope_inv_freq) {
    sincosf((float)pos * p.rope_inv_freq[i], &sn, &cs);
    cs *= p.rope_mscale;
    sn *= p.rope_mscale;
  } else {
    const float theta = (float)pos * p.rope_freq_scale *
                        exp2f(-2.0f * (float)i / (float)p.rope_dim * p.rope_log2_base);
    sincosf(theta, &sn, &cs);
  }
  const float x0 = row[a], x1 = row[b];
  return d == a ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
}

// ---- KV write --------------------------------------------------------------------------------

template <typename T>
__global__ void kv_write_kernel(const float *__restrict__ k, const float *__restrict__ v,
                                const int32_t *__restrict__ slots, char *base,
                                size_t block_bytes, int32_t num_blocks, int32_t kvh,
                                int32_t hd, int32_t bs, weir_cuda_attn_params rp) {
  const int32_t tok = blockIdx.x;
  const int32_t slot = slots[tok];
  if (slot < 0) return; // padding token: nothing to store
  const int32_t blk = slot / bs, off = slot % bs;
  if (blk >= num_blocks) return;
  T *kb = reinterpret_cast<T *>(base + (size_t)blk * block_bytes);
  T *vb = kb + (size_t)kvh * bs * hd;
  const int32_t n = kvh * hd;
  const float *kr = k + (size_t)tok * n, *vr = v + (size_t)tok * n;
  const int pos = rp.rope_dim > 0 ? rp.positions[tok] : 0;
  for (int32_t e = threadIdx.x; e < n; e += blockDim.x) {
    const int32_t h = e / hd, d = e % hd;
    const size_t at = ((size_t)h * bs + off) * hd + d;
    kb[at] = from_f<T>(rp.rope_dim > 0 ? rope_at(kr + (size_t)h * hd, d, pos, rp) : kr[e]);
    vb[at] = from_f<T>(vr[e]);
  }
}

// int8 KV (in the CPU plugin's order): K rows, V rows, then one f32 scale per row, K scales
// [kvh][bs] then V scales [kvh][bs]. Symmetric: q = round(x * 127 / max|row|), value = q *
// max|row| / 127, computed in f32 as the CPU plugin does so both caches hold the same bytes.
// One warp per (token, K-or-V, head): lanes find the row's max, then write their values.
__global__ void kv_write_i8_kernel(const float *__restrict__ k, const float *__restrict__ v,
                                   const int32_t *__restrict__ slots, char *base,
                                   size_t block_bytes, int32_t num_blocks, int32_t kvh,
                                   int32_t hd, int32_t bs, weir_cuda_attn_params rp) {
  const int32_t tok = blockIdx.x;
  const int32_t slot = slots[tok];
  if (slot < 0) return;
  const int32_t blk = slot / bs, off = slot % bs;
  if (blk >= num_blocks) return;
  char *b = base + (size_t)blk * block_bytes;
  const size_t data = 2 * (size_t)kvh * bs * hd; // a multiple of 16: hd % 16 == 0
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  for (int job = warp; job < 2 * kvh; job += nwarps) {
    const int isv = job / kvh, h = job % kvh;
    const float *x = (isv ? v : k) + (size_t)tok * kvh * hd + (size_t)h * hd;
    // K rotated here when RoPE is fused (each lane recomputes its values' angles twice:
    // cheaper than staging the row).
    const bool rot = !isv && rp.rope_dim > 0;
    const int pos = rot ? rp.positions[tok] : 0;
    float amax = 0.0f;
    for (int d = lane; d < hd; d += 32)
      amax = fmaxf(amax, fabsf(rot ? rope_at(x, d, pos, rp) : x[d]));
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int8_t *row = reinterpret_cast<int8_t *>(b) + ((size_t)(isv * kvh + h) * bs + off) * hd;
    for (int d = lane; d < hd; d += 32) {
      const float q = (rot ? rope_at(x, d, pos, rp) : x[d]) * inv;
      row[d] = (int8_t)(q < 0.0f ? q - 0.5f : q + 0.5f);
    }
    if (lane == 0)
      reinterpret_cast<float *>(b + data)[(size_t)(isv * kvh + h) * bs + off] = amax / 127.0f;
  }
}

// ---- attention -------------------------------------------------------------------------------

struct SmemLayout {
  int q, acc, k, v, s, m, l, alpha, flag, total; // offsets in floats
};

__host__ __device__ inline SmemLayout smem_layout(int rows, int hd, int bs) {
  SmemLayout L;
  const int kr = hd + kPad;
  L.q = 0;
  L.acc = L.q + rows * hd;
  L.k = L.acc + rows * hd;
  L.v = L.k + bs * kr;
  L.s = L.v + bs * kr;
  L.m = L.s + rows * bs;
  L.l = L.m + rows;
  L.alpha = L.l + rows;
  L.flag = L.alpha + rows; // one int: "this CTA combines the splits" (fused reduction)
  L.total = L.flag + 1;
  return L;
}

// Loads one head's K or V rows of one block (bs * hd contiguous elements of T) into shared
// memory as f32 rows of stride hd + kPad, with 16-byte global loads. Rows from `nvalid` on lie
// beyond the context: they hold whatever the slot held before (possibly NaN bit patterns), so
// they are stored as zeros instead, because a masked score's zero weight times NaN is NaN.
template <typename T>
__device__ __forceinline__ void load_tile(float *dst, const T *__restrict__ src, int hd, int bs,
                                          int nvalid) {
  constexpr int V = 16 / sizeof(T);
  const int nvec = bs * hd / V;
  const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    const int flat = i * V, t = flat / hd, d = flat % hd;
    float *o = dst + t * (hd + kPad) + d;
    if (t >= nvalid) {
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = 0.0f;
      continue;
    }
    const uint4 raw = __ldg(s4 + i);
    T e[V]; // copied rather than cast: no type punning (compiles to register moves)
    memcpy(static_cast<void *>(e), &raw, sizeof raw);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = to_f(e[j]);
  }
}

// load_tile for an int8 cache: 16 values per 16-byte load, each times its row's scale.
__device__ __forceinline__ void load_tile_i8(float *dst, const int8_t *__restrict__ src,
                                             const float *__restrict__ scales, int hd, int bs,
                                             int nvalid) {
  const int nvec = bs * hd / 16;
  const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    const int flat = i * 16, t = flat / hd, d = flat % hd;
    float *o = dst + t * (hd + kPad) + d;
    if (t >= nvalid) {
#pragma unroll
      for (int j = 0; j < 16; ++j) o[j] = 0.0f;
      continue;
    }
    const uint4 raw = __ldg(s4 + i);
    int8_t e[16];
    memcpy(e, &raw, sizeof raw);
    const float sc = scales[t];
#pragma unroll
    for (int j = 0; j < 16; ++j) o[j] = (float)e[j] * sc;
  }
}

// One head's K or V tile of a block into shared memory as f32 (isv: 0 K, 1 V).
template <typename T>
__device__ __forceinline__ void load_kv(float *dst, const char *blk, int isv, int kvh,
                                        int n_kv_heads, int hd, int bs, int nvalid) {
  const size_t head_elems = (size_t)bs * hd;
  load_tile<T>(dst, reinterpret_cast<const T *>(blk) + (size_t)(isv * n_kv_heads + kvh) * head_elems,
               hd, bs, nvalid);
}
template <>
__device__ __forceinline__ void load_kv<int8_t>(float *dst, const char *blk, int isv, int kvh,
                                                int n_kv_heads, int hd, int bs, int nvalid) {
  const size_t head_elems = (size_t)bs * hd, data = 2 * (size_t)n_kv_heads * head_elems;
  const size_t row0 = (size_t)(isv * n_kv_heads + kvh) * bs;
  load_tile_i8(dst, reinterpret_cast<const int8_t *>(blk) + row0 * hd,
               reinterpret_cast<const float *>(blk + data) + row0, hd, bs, nvalid);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(weir_cuda_attn_params p, int tokens_per_cta, int tiles_per_seq,
                     int num_splits, const float *__restrict__ q, float *__restrict__ out,
                     float *__restrict__ ws, int *__restrict__ counters) {
  extern __shared__ float sm[];
  const int hd = p.head_dim, bs = p.block_size, G = p.n_heads / p.n_kv_heads;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int seq = blockIdx.x / tiles_per_seq, tile = blockIdx.x % tiles_per_seq;
  const int q0 = p.query_start_loc[seq];
  const int qlen = p.query_start_loc[seq + 1] - q0;
  const int ctx = p.context_lens[seq];
  const int tok0 = tile * tokens_per_cta;
  if (tok0 >= qlen) return; // this sequence has fewer new tokens than the batch maximum
  const int ntok = min(tokens_per_cta, qlen - tok0);
  const int rows = ntok * G;
  const int rows_cap = tokens_per_cta * G;
  const SmemLayout L = smem_layout(rows_cap, hd, bs);
  float *sq = sm + L.q, *sacc = sm + L.acc, *sk = sm + L.k, *sv = sm + L.v, *ss = sm + L.s;
  float *sm_m = sm + L.m, *sm_l = sm + L.l, *salpha = sm + L.alpha;
  const int kr = hd + kPad;
  const int first_pos = ctx - qlen + tok0; // position of the tile's first new token

  // The tile's keys: [first_key, last_key]; this split takes its share of those blocks. With
  // a sliding window the blocks wholly before the first query's window are never read (the
  // host may have freed them: their block-table entries are stale).
  const int last_key = first_pos + ntok - 1;
  const int nblocks = last_key / bs + 1;
  const int win = p.window > 0 ? p.window : 0;
  const int first_key = win ? max(0, first_pos - win + 1) : 0;
  const int b_first = first_key / bs;
  // The plan sizes num_splits for the longest context it may see (under step graphs: the
  // pool's maximum, e.g. 64 splits), but this tile's real range may be a few blocks. Only
  // `splits` of them take part, by the plan's own rule (one block or more each), computed
  // here from the context on the device, so it holds for a replayed graph too; every CTA of
  // the tile computes the same value. The others exit before reading anything and are not
  // counted: the last-block-done count below goes to `splits`, and the combine reads
  // `splits` partials (on the first H200 run a 16-500-token decode paid ~28 us a layer for
  // 64 splits, most empty, each writing a partial the last CTA then summed).
  int splits = num_splits;
  if (splits > 1) splits = max(1, min(splits, nblocks - b_first));
  if (split >= splits) return;
  const int per = (nblocks - b_first + splits - 1) / splits;
  const int b_begin = b_first + split * per;
  const int b_end = min(nblocks, b_begin + per);

  // Query rows, pre-scaled. Row r is token tok0 + r / G, head kvh * G + r % G.
  const int qstride = p.n_heads * hd;
  for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    const int tok = q0 + tok0 + r / G, head = kvh * G + r % G;
    const float *qrow = q + (size_t)tok * qstride + (size_t)head * hd;
    sq[e] = (p.rope_dim > 0 ? rope_at(qrow, d, p.positions[tok], p) : qrow[d]) * p.scale;
    sacc[e] = 0.0f;
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    sm_m[r] = -INFINITY;
    sm_l[r] = 0.0f;
  }
  const float cap = p.softcap > 0.0f ? p.softcap : 0.0f;
  const float inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
  const int32_t *btab = p.block_tables + (size_t)seq * p.max_blocks_per_seq;
  __syncthreads();

  for (int b = b_begin; b < b_end; ++b) {
    const int phys = btab[b];
    const char *kb = static_cast<const char *>(p.kv_base) + (size_t)phys * p.block_bytes;
    const int nvalid = min(bs, last_key + 1 - b * bs);
    load_kv<T>(sk, kb, 0, kvh, p.n_kv_heads, hd, bs, nvalid);
    load_kv<T>(sv, kb, 1, kvh, p.n_kv_heads, hd, bs, nvalid);
    __syncthreads();

    // Scores, with the causal mask: row r may see keys at positions <= its own.
    for (int e = threadIdx.x; e < rows * bs; e += blockDim.x) {
      const int r = e / bs, t = e % bs;
      const int key = b * bs + t;
      float sc = -INFINITY;
      const int qpos = first_pos + r / G;
      if (key <= qpos && (win == 0 || key > qpos - win)) {
        const float4 *a = reinterpret_cast<const float4 *>(sq + r * hd);
        const float4 *c = reinterpret_cast<const float4 *>(sk + t * kr);
        float acc = 0.0f;
        for (int d = 0; d < hd / 4; ++d) {
          const float4 x = a[d], y = c[d];
          acc += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
        }
        sc = cap > 0.0f ? cap * tanhf(acc * inv_cap) : acc;
      }
      ss[e] = sc;
    }
    __syncthreads();

    // Online softmax bookkeeping, one warp per row: lanes take the row's keys (a thread per
    // row walked all bs keys serially, 64 dependent expf at a block of 64, while the other
    // warps waited at the barrier). The shuffles order every lane's read of the row's old
    // max and sum before lane 0 writes the new ones.
    const int lane = threadIdx.x & 31;
    for (int r = threadIdx.x >> 5; r < rows; r += kThreads / 32) {
      float mx = -INFINITY;
      // bs <= 64: one or two keys per lane (rolled loops: unrolled, they cost a spill).
#pragma unroll 1
      for (int t = lane; t < bs; t += 32) mx = fmaxf(mx, ss[r * bs + t]);
      mx = weir_cuda::warp_max(mx);
      const float m_old = sm_m[r];
      const float m_new = fmaxf(m_old, mx);
      float alpha = 1.0f, sum = 0.0f;
      if (m_new == -INFINITY) { // nothing visible yet in this row
        for (int t = lane; t < bs; t += 32) ss[r * bs + t] = 0.0f;
      } else {
        alpha = expf(m_old - m_new); // 0 when m_old is -inf
#pragma unroll 1
        for (int t = lane; t < bs; t += 32) {
          const float e = expf(ss[r * bs + t] - m_new);
          ss[r * bs + t] = e;
          sum += e;
        }
      }
      sum = weir_cuda::warp_sum(sum);
      if (lane == 0) {
        sm_l[r] = sm_l[r] * alpha + sum;
        sm_m[r] = m_new;
        salpha[r] = alpha;
      }
    }
    __syncthreads();

    for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
      const int r = e / hd, d = e % hd;
      float a = sacc[e] * salpha[r];
      const float *pr = ss + r * bs;
      for (int t = 0; t < bs; ++t) a += pr[t] * sv[t * kr + d];
      sacc[e] = a;
    }
    __syncthreads();
  }

  if (splits == 1) {
    for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
      const int r = e / hd, d = e % hd;
      const int tok = q0 + tok0 + r / G, head = kvh * G + r % G;
      const float l = sm_l[r];
      out[(size_t)tok * qstride + (size_t)head * hd + d] = l > 0.0f ? sacc[e] / l : 0.0f;
    }
  } else {
    // Partial result: unnormalised accumulator plus the row's max and sum.
    const size_t tile_slot = (size_t)blockIdx.x * p.n_kv_heads + kvh;
    const size_t part = (size_t)rows_cap * (hd + 2);
    float *w0 = ws + tile_slot * num_splits * part;
    float *wo = w0 + (size_t)split * part;
    for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) wo[e] = sacc[e];
    float *wm = wo + (size_t)rows_cap * hd;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      wm[r] = sm_m[r];
      wm[rows_cap + r] = sm_l[r];
    }
    // Last-block-done: make this CTA's partial visible device-wide, then count it. The CTA
    // that brings the count to `splits` has every partial visible and combines them; it
    // resets the counter, so the workspace's counters are zero again after every launch (a
    // recorded graph replays with them as it found them).
    __threadfence();
    __syncthreads();
    int *flag = reinterpret_cast<int *>(sm + L.flag);
    if (threadIdx.x == 0) {
      const int done = atomicAdd(counters + tile_slot, 1);
      *flag = done == splits - 1;
    }
    __syncthreads();
    if (!*flag) return;
    __threadfence(); // order the partial reads below after the counter read
    if (threadIdx.x == 0) counters[tile_slot] = 0;
    // out = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s, the partials read past L1 (__ldcg:
    // other CTAs wrote them, and L1 is not coherent across multiprocessors).
    for (int e = threadIdx.x; e < rows * hd; e += blockDim.x) {
      const int r = e / hd;
      float M = -INFINITY;
      for (int s2 = 0; s2 < splits; ++s2)
        M = fmaxf(M, __ldcg(w0 + s2 * part + (size_t)rows_cap * hd + r));
      float num = 0.0f, den = 0.0f;
      for (int s2 = 0; s2 < splits; ++s2) {
        const float *ws_s = w0 + s2 * part;
        const float m = __ldcg(ws_s + (size_t)rows_cap * hd + r);
        if (m == -INFINITY) continue; // this split saw no visible key
        const float wgt = expf(m - M);
        den += wgt * __ldcg(ws_s + (size_t)rows_cap * hd + rows_cap + r);
        num += wgt * __ldcg(ws_s + e);
      }
      const int tok = q0 + tok0 + r / G, head = kvh * G + r % G;
      out[(size_t)tok * qstride + (size_t)head * hd + e % hd] = den > 0.0f ? num / den : 0.0f;
    }
  }
}

__global__ void copy_blocks_kernel(char *layer0, size_t block_bytes, size_t layer_stride,
                                   const int32_t *__restrict__ src,
                                   const int32_t *__restrict__ dst) {
  const int i = blockIdx.x, l = blockIdx.y;
  const char *s = layer0 + (size_t)l * layer_stride + (size_t)src[i] * block_bytes;
  char *d = layer0 + (size_t)l * layer_stride + (size_t)dst[i] * block_bytes;
  if (block_bytes % 16 == 0) {
    const uint4 *s4 = reinterpret_cast<const uint4 *>(s);
    uint4 *d4 = reinterpret_cast<uint4 *>(d);
    for (size_t j = threadIdx.x; j < block_bytes / 16; j += blockDim.x) d4[j] = s4[j];
  } else {
    for (size_t j = threadIdx.x; j < block_bytes; j += blockDim.x) d[j] = s[j];
  }
}

template <typename T>
cudaError_t launch_attention(cudaStream_t stream, const weir_cuda_attn_params *p,
                             const weir_cuda_attn_plan *plan, const float *q, float *out,
                             float *ws, int *counters) {
  const dim3 grid((unsigned)(p->num_seqs * plan->tiles_per_seq), (unsigned)p->n_kv_heads,
                  (unsigned)plan->num_splits);
  if (plan->smem_bytes > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(attention_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)plan->smem_bytes);
    if (e != cudaSuccess) return e;
  }
  WEIR_LAUNCH(attention_kernel<T>, grid, kThreads, plan->smem_bytes, stream)(
      *p, plan->tokens_per_cta, plan->tiles_per_seq, plan->num_splits, q, out, ws, counters);
  return cudaGetLastError();
}

} // namespace

extern "C" size_t weir_cuda_attn_block_bytes(int32_t n_kv_heads, int32_t head_dim,
                                             int32_t block_size, int32_t kv_dtype) {
  const size_t es = elem_size(kv_dtype);
  if (es == 0 || n_kv_heads <= 0 || head_dim <= 0 || head_dim > kMaxHeadDim ||
      block_size <= 0 || block_size > kMaxBlockSize)
    return 0;
  // 16-byte vector loads of K/V rows need head_dim to be a multiple of 16 / element size.
  if (head_dim % (int32_t)(16 / es) != 0) return 0;
  const size_t data = 2 * (size_t)n_kv_heads * (size_t)block_size * (size_t)head_dim * es;
  // int8: one f32 scale per K and V row after the rows
  return kv_dtype == kI8 ? data + 2 * (size_t)n_kv_heads * (size_t)block_size * sizeof(float)
                         : data;
}

extern "C" cudaError_t weir_cuda_kv_write(cudaStream_t stream, const weir_cuda_attn_params *p,
                                          const float *k, const float *v) {
  if (p->num_tokens <= 0) return cudaSuccess;
  if (p->rope_dim < 0 || p->rope_dim % 2 != 0 || p->rope_dim > p->head_dim ||
      (p->rope_dim > 0 && p->positions == NULL))
    return cudaErrorInvalidValue;
  const unsigned grid = (unsigned)p->num_tokens;
  char *base = static_cast<char *>(p->kv_base);
  switch (p->kv_dtype) {
  case kF32:
    WEIR_LAUNCH(kv_write_kernel<float>, grid, kThreads, 0, stream)(k, v, p->slot_mapping, base,
                                                          p->block_bytes, p->num_blocks,
                                                          p->n_kv_heads, p->head_dim,
                                                          p->block_size, *p);
    break;
  case kF16:
    WEIR_LAUNCH(kv_write_kernel<__half>, grid, kThreads, 0, stream)(k, v, p->slot_mapping, base,
                                                           p->block_bytes, p->num_blocks,
                                                           p->n_kv_heads, p->head_dim,
                                                           p->block_size, *p);
    break;
  case kBF16:
    WEIR_LAUNCH(kv_write_kernel<__nv_bfloat16>, grid, kThreads, 0, stream)(
        k, v, p->slot_mapping, base, p->block_bytes, p->num_blocks, p->n_kv_heads, p->head_dim,
        p->block_size, *p);
    break;
  case kI8:
    WEIR_LAUNCH(kv_write_i8_kernel, grid, kThreads, 0, stream)(
        k, v, p->slot_mapping, base, p->block_bytes, p->num_blocks, p->n_kv_heads, p->head_dim,
        p->block_size, *p);
    break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_attn_plan_make(const weir_cuda_attn_params *p, int num_sms,
                                                size_t max_smem, weir_cuda_attn_plan *plan) {
  if (p->n_kv_heads <= 0 || p->n_heads % p->n_kv_heads != 0) return cudaErrorInvalidValue;
  if (weir_cuda_attn_block_bytes(p->n_kv_heads, p->head_dim, p->block_size, p->kv_dtype) == 0)
    return cudaErrorInvalidValue;
  const int G = p->n_heads / p->n_kv_heads;
  const int mql = p->max_query_len > 0 ? p->max_query_len : 1;
  int T = G >= kMaxRows ? 1 : kMaxRows / G;
  if (T > mql) T = mql;
  size_t smem = 0;
  for (;;) {
    smem = (size_t)smem_layout(T * G, p->head_dim, p->block_size).total * sizeof(float);
    if (smem <= max_smem || T == 1) break;
    T /= 2;
  }
  if (smem > max_smem) return cudaErrorInvalidValue;
  plan->rows_per_cta = T * G;
  plan->tokens_per_cta = T;
  plan->tiles_per_seq = (mql + T - 1) / T;
  plan->smem_bytes = smem;
  plan->num_splits = 1;
  const long ctas = (long)p->num_seqs * plan->tiles_per_seq * p->n_kv_heads;
  int max_blocks = (p->max_context_len + p->block_size - 1) / p->block_size;
  // A window bounds the blocks a tile reads, whatever the context.
  if (p->window > 0) {
    const int in_window = (p->window + mql + p->block_size - 2) / p->block_size + 1;
    if (in_window < max_blocks) max_blocks = in_window;
  }
  // Split the KV range only when the grid cannot fill the GPU twice over, down to one block
  // per split. The reduction is fused (the last split combines), so a split costs one
  // partial write and a counter bump rather than a second launch; the minimum was 4 blocks
  // while a separate kernel combined them, then 2, which on the first H200 run (2026-11-28)
  // left a batch-1 decode of the 1.1B shape (4 KV heads) at 4 CTAs for contexts under 64
  // tokens, ~28 us a layer: a CTA's block costs microseconds of latency-bound shared-memory
  // work, far more than a partial. The kernel lowers the split count further on the device
  // to the blocks a tile really has (a graph's plan is made for the pool's maximum).
  // Tune with weir_cuda_attn_bench.
  if (plan->tiles_per_seq == 1 && ctas > 0 && ctas < 2L * num_sms && max_blocks >= 2) {
    long s = (2L * num_sms + ctas - 1) / ctas;
    const long by_len = max_blocks;
    if (s > by_len) s = by_len;
    if (s > 64) s = 64;
    if (s > 1) plan->num_splits = (int32_t)s;
  }
  plan->workspace_bytes =
      plan->num_splits > 1
          ? (size_t)ctas * plan->num_splits * plan->rows_per_cta * (p->head_dim + 2) * sizeof(float)
          : 0;
  plan->counter_bytes = plan->num_splits > 1 ? (size_t)ctas * sizeof(int) : 0;
  return cudaSuccess;
}

extern "C" cudaError_t weir_cuda_attention(cudaStream_t stream, const weir_cuda_attn_params *p,
                                           const weir_cuda_attn_plan *plan, const float *q,
                                           float *out, void *workspace, int *counters) {
  if (p->num_seqs <= 0 || p->num_tokens <= 0) return cudaSuccess;
  if (plan->num_splits > 1 && (workspace == NULL || counters == NULL))
    return cudaErrorInvalidValue;
  if (p->rope_dim < 0 || p->rope_dim % 2 != 0 || p->rope_dim > p->head_dim ||
      (p->rope_dim > 0 && p->positions == NULL))
    return cudaErrorInvalidValue;
  float *ws = static_cast<float *>(workspace);
  switch (p->kv_dtype) {
  case kF32: return launch_attention<float>(stream, p, plan, q, out, ws, counters);
  case kF16: return launch_attention<__half>(stream, p, plan, q, out, ws, counters);
  case kBF16: return launch_attention<__nv_bfloat16>(stream, p, plan, q, out, ws, counters);
  case kI8: return launch_attention<int8_t>(stream, p, plan, q, out, ws, counters);
  default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t weir_cuda_copy_blocks(cudaStream_t stream, void *layer0,
                                             size_t block_bytes, int32_t num_blocks,
                                             int32_t n_layers, const int32_t *src,
                                             const int32_t *dst, int32_t n) {
  if (n <= 0 || n_layers <= 0) return cudaSuccess;
  WEIR_LAUNCH(copy_blocks_kernel, dim3((unsigned)n, (unsigned)n_layers), 256, 0, stream)(
      static_cast<char *>(layer0), block_bytes, (size_t)num_blocks * block_bytes, src, dst);
  return cudaGetLastError();
}
