// The default sampler on the device: penalties, log-softmax and top logprobs, greedy argmax,
// temperature + top-k + top-p + min-p truncation and the draw, one CTA per row. Only the
// per-row results (token, logprobs) go back to the host.
//
// Candidate order. Without top-k and top-p the candidates are visited in id order; with
// either, in descending order of the scaled logit with ties to the lower id (a stable radix
// sort of the row). Weights are expf(z - zmax) in f32, summed in f64, as on the CPU. The draw
// takes the first candidate whose inclusive cumulative weight exceeds u * total. The CPU
// sampler walks its candidates in the same id order without truncation, but in its
// quickselect order after top-k or top-p: there the distributions agree, single draws may not.
#ifndef WEIR_CUDA_SHIM
#include <cub/device/device_segmented_radix_sort.cuh>
#else
#include <algorithm>
#include <vector>
#endif
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

#include "weir_cuda_device.cuh" // WEIR_LAUNCH: the CPU shim runs these kernels too
#include "weir_cuda_kernels.h"

namespace {

// Threads per row (a power of two). The CPU shim builds with fewer to run faster.
#ifndef WEIR_SAMPLER_THREADS
#define WEIR_SAMPLER_THREADS 512
#endif
constexpr int kThreads = WEIR_SAMPLER_THREADS;

struct Cand {
  float v;
  int id; // -1: none
};

// a ranks before b: larger value, then lower id; "none" ranks last.
__device__ __forceinline__ bool before(const Cand &a, const Cand &b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

struct BestOp {
  __device__ __forceinline__ Cand operator()(const Cand &a, const Cand &b) const {
    return before(b, a) ? b : a;
  }
};

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct SumIntOp {
  __device__ __forceinline__ int operator()(int a, int b) const { return a + b; }
};

struct SumDOp {
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};

struct MinIntOp {
  __device__ __forceinline__ int operator()(int a, int b) const { return a < b ? a : b; }
};

struct MaxIntOp {
  __device__ __forceinline__ int operator()(int a, int b) const { return a > b ? a : b; }
};

// Block-wide primitives over shared memory (a tree reduction and a Hillis-Steele scan): a few
// calls per row, so plain code beats a library here, and it runs on the CPU shim too.
struct SampleSmem {
  double d[kThreads];
  float f[kThreads];
  int i[kThreads];
  Cand c[kThreads];
};

// Every thread gets op over all threads' v.
template <typename T, typename Op> __device__ T block_all(T v, Op op, T *buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  const T r = buf[0];
  __syncthreads();
  return r;
}

// Exclusive prefix sum over the threads in order; *total gets the sum of all.
__device__ double block_exclusive_sum(double v, double *buf, double *total) {
  const int t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (int off = 1; off < kThreads; off <<= 1) {
    const double add = t >= off ? buf[t - off] : 0.0;
    __syncthreads();
    buf[t] += add;
    __syncthreads();
  }
  const double excl = t > 0 ? buf[t - 1] : 0.0;
  *total = buf[kThreads - 1];
  __syncthreads();
  return excl;
}

__global__ void penalty_kernel(float *logits, int32_t vocab,
                               const weir_cuda_sample_params *__restrict__ params,
                               const weir_cuda_penalty *__restrict__ pen, int32_t n) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const weir_cuda_penalty e = pen[i];
  if (e.token < 0 || e.token >= vocab) return;
  const weir_cuda_sample_params &p = params[e.row];
  float *x = logits + (size_t)e.row * vocab + e.token;
  float v = *x;
  if (e.flags & WEIR_CUDA_PEN_BIAS) v = __fadd_rn(v, e.bias);
  if (e.flags & WEIR_CUDA_PEN_SUPPRESS) v = -INFINITY;
  if (e.flags & WEIR_CUDA_PEN_REPEAT)
    v = v > 0.0f ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
  if (e.count > 0) // explicit roundings: no fused multiply-add, as on the host
    v = __fsub_rn(v, __fadd_rn(p.presence_penalty, __fmul_rn(p.frequency_penalty, (float)e.count)));
  *x = v;
}

// A clear bit in the row's mask makes the logit -inf. Applied after the penalties, which is
// the CPU's order in effect: a bias, a penalty or a suppression of a masked token ends at -inf
// either way.
__global__ void mask_kernel(float *logits, int32_t vocab,
                            const weir_cuda_sample_params *__restrict__ params,
                            const uint32_t *__restrict__ masks) {
  const int32_t r = blockIdx.y;
  const int32_t m = params[r].mask_row;
  if (m < 0) return;
  const uint32_t *mask = masks + (size_t)m * (size_t)((vocab + 31) / 32);
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x)
    if (!((mask[i >> 5] >> (i & 31)) & 1u)) logits[(size_t)r * vocab + i] = -INFINITY;
}

// Sort keys: the scaled logit, -inf for tokens that can never be drawn (-inf and NaN).
__global__ void sort_keys_kernel(const float *__restrict__ logits, int32_t vocab,
                                 const weir_cuda_sample_params *__restrict__ params,
                                 float *keys, int32_t *ids, int32_t *offsets, int32_t rows) {
  const int32_t r = blockIdx.y;
  const weir_cuda_sample_params &p = params[r];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    offsets[r] = r * vocab;
    offsets[rows + r] = p.sorted ? (r + 1) * vocab : r * vocab;
  }
  if (!p.sorted) return;
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) {
    const float x = logits[(size_t)r * vocab + i];
    keys[(size_t)r * vocab + i] = x > -INFINITY ? __fmul_rn(x, p.inv_temp) : -INFINITY;
    ids[(size_t)r * vocab + i] = i;
  }
}

// The candidate at position j of row r's visiting order.
struct RowView {
  const float *x;      // penalised logits of the row
  const float *skeys;  // sorted scaled logits, or NULL (id order)
  const int32_t *sids;
  float inv_t;
  __device__ __forceinline__ void at(int j, float &z, int &id) const {
    if (skeys) {
      z = skeys[j];
      id = sids[j];
    } else {
      const float v = x[j];
      z = v > -INFINITY ? __fmul_rn(v, inv_t) : -INFINITY;
      id = j;
    }
  }
};

// Smallest position m < len whose inclusive cumulative weight reaches frac * total (strictly
// exceeds it when `strict`), with total the sum of all weights; -1 when none does. Each thread
// sums one contiguous segment, a block scan places the segments, and the one thread whose
// segment holds the crossing walks it.
template <typename W>
__device__ int find_cumulative(const W &weight, int len, double frac, bool strict,
                               double *total_out, SampleSmem &sm) {
  const int seg = (len + kThreads - 1) / kThreads;
  const int b = min(len, (int)threadIdx.x * seg), e = min(len, b + seg);
  double part = 0.0;
  for (int j = b; j < e; ++j) part += weight(j);
  double total;
  const double excl = block_exclusive_sum(part, sm.d, &total);
  const double target = frac * total;
  int found = INT_MAX;
  const bool reach_end = strict ? excl + part > target : excl + part >= target;
  const bool reach_begin = strict ? excl > target : excl >= target;
  if (b < e && reach_end && !reach_begin) {
    double c = excl;
    for (int j = b; j < e; ++j) {
      c += weight(j);
      if (strict ? c > target : c >= target) {
        found = j;
        break;
      }
    }
  }
  found = block_all<int>(found, MinIntOp(), sm.i);
  *total_out = total;
  return found == INT_MAX ? -1 : found;
}

__global__ void __launch_bounds__(kThreads)
    sample_row_kernel(const float *__restrict__ logits, int32_t vocab,
                      const weir_cuda_sample_params *__restrict__ params,
                      const float *__restrict__ skeys, const int32_t *__restrict__ sids,
                      weir_cuda_sample_result *__restrict__ results, float *probs) {
  __shared__ SampleSmem sm;
  const int r = blockIdx.x;
  const weir_cuda_sample_params p = params[r];
  const float *x = logits + (size_t)r * vocab;
  weir_cuda_sample_result *res = results + r;

  // 1. log-softmax of the penalised logits, and the top logprobs.
  double lse = 0.0;
  if (p.num_logprobs >= 0 && !probs) {
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (x[i] == x[i]) mx = fmaxf(mx, x[i]);
    mx = block_all<float>(mx, MaxOp(), sm.f);
    double s = 0.0;
    if (mx > -INFINITY)
      for (int i = threadIdx.x; i < vocab; i += kThreads)
        if (x[i] == x[i]) s += exp((double)x[i] - (double)mx);
    s = block_all<double>(s, SumDOp(), sm.d);
    lse = mx > -INFINITY ? (double)mx + log(s) : -INFINITY;
    Cand prev = {0.0f, -1};
    int have = 0;
    for (int k = 0; k < p.num_logprobs; ++k) {
      Cand best = {0.0f, -1};
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const Cand c = {x[i], i};
        if (!(x[i] > -INFINITY)) continue; // never produced: -inf (suppressed, masked), NaN
        if (prev.id >= 0 && !before(prev, c)) continue; // already listed
        if (before(c, best)) best = c;
      }
      best = block_all<Cand>(best, BestOp(), sm.c);
      if (best.id < 0) break;
      if (threadIdx.x == 0) {
        res->top_tokens[k] = best.id;
        res->top_logprobs[k] = (float)((double)best.v - lse);
      }
      prev = best;
      ++have;
    }
    if (threadIdx.x == 0) res->num_top = have;
  } else if (threadIdx.x == 0) {
    res->num_top = 0;
  }

  int token = 0, drew = 0;
  if (p.greedy) {
    // 2. argmax, ties to the lowest id; NaN never wins.
    Cand best = {0.0f, -1};
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const Cand c = {x[i], i};
      if (x[i] == x[i] && before(c, best)) best = c;
    }
    best = block_all<Cand>(best, BestOp(), sm.c);
    token = best.id >= 0 ? best.id : 0;
    if (probs) {
      for (int i = threadIdx.x; i < vocab; i += kThreads)
        probs[(size_t)r * vocab + i] = i == token ? 1.0f : 0.0f;
      return;
    }
  } else {
    // 3. candidates, truncation, draw.
    RowView view = {x, p.sorted ? skeys + (size_t)r * vocab : nullptr,
                    p.sorted ? sids + (size_t)r * vocab : nullptr, p.inv_temp};
    int n_local = 0;
    float zmax = -INFINITY;
    for (int j = threadIdx.x; j < vocab; j += kThreads) {
      float z;
      int id;
      view.at(j, z, id);
      if (z > -INFINITY) {
        ++n_local;
        zmax = fmaxf(zmax, z);
      }
    }
    const int n = block_all<int>(n_local, SumIntOp(), sm.i);
    zmax = block_all<float>(zmax, MaxOp(), sm.f);
    if (n == 0) { // everything suppressed: the lowest id, no draw
      token = 0;
    } else {
      int kcut = vocab;
      if (p.sorted) {
        const int k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
        kcut = k;
        if (p.top_p < 1.0f) {
          auto w = [&](int j) {
            float z;
            int id;
            view.at(j, z, id);
            return (double)expf(z - zmax);
          };
          double ztot;
          const double frac = p.top_p > 0.0f ? (double)p.top_p : 0.0;
          const int m = find_cumulative(w, k, frac, false, &ztot, sm);
          kcut = m >= 0 ? m + 1 : k;
        }
      }
      const float thr = p.min_p > 0.0f ? zmax + logf(p.min_p) : -INFINITY;
      auto keep = [&](int j, float z) {
        return j < kcut && z > -INFINITY && (p.min_p <= 0.0f || z >= thr || z == zmax);
      };
      auto w = [&](int j) {
        float z;
        int id;
        view.at(j, z, id);
        return keep(j, z) ? (double)expf(z - zmax) : 0.0;
      };
      double total;
      const int pos = find_cumulative(w, vocab, p.u, true, &total, sm);
      if (probs) {
        for (int j = threadIdx.x; j < vocab; j += kThreads) {
          float z;
          int id;
          view.at(j, z, id);
          probs[(size_t)r * vocab + id] = keep(j, z) ? (float)((double)expf(z - zmax) / total) : 0.0f;
        }
        return;
      }
      int at = pos;
      if (at < 0) { // rounding put the target at the very end: the last kept candidate
        int last = -1;
        for (int j = threadIdx.x; j < vocab; j += kThreads) {
          float z;
          int id;
          view.at(j, z, id);
          if (keep(j, z)) last = j;
        }
        at = block_all<int>(last, MaxIntOp(), sm.i);
      }
      float z;
      view.at(at < 0 ? 0 : at, z, token);
      drew = 1;
    }
    if (probs) { // n == 0
      for (int i = threadIdx.x; i < vocab; i += kThreads)
        probs[(size_t)r * vocab + i] = i == token ? 1.0f : 0.0f;
      return;
    }
  }
  if (threadIdx.x == 0) {
    res->token = token;
    res->drew = drew;
    res->logprob = p.num_logprobs >= 0 ? (float)((double)x[token] - lse) : 0.0f;
  }
}

size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

size_t cub_temp_bytes(int32_t rows, int32_t vocab) {
  size_t bytes = 0;
#ifndef WEIR_CUDA_SHIM
  const int items = rows * vocab;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, (const float *)nullptr, (float *)nullptr, (const int32_t *)nullptr,
      (int32_t *)nullptr, items, rows, (const int32_t *)nullptr, (const int32_t *)nullptr);
#endif
  return bytes;
}

// The segmented sort: CUB's stable radix sort on the device; on the CPU shim a stable sort
// of each non-empty segment (the same order: descending, ties keep the lower id first).
cudaError_t sort_rows(void *temp, size_t temp_bytes, const float *keys_in, float *keys_out,
                      const int32_t *ids_in, int32_t *ids_out, int items, int rows,
                      const int32_t *offsets, cudaStream_t stream) {
#ifndef WEIR_CUDA_SHIM
  return cub::DeviceSegmentedRadixSort::SortPairsDescending(
      temp, temp_bytes, keys_in, keys_out, ids_in, ids_out, items, rows, offsets,
      offsets + rows, 0, 32, stream);
#else
  for (int r = 0; r < rows; ++r) {
    const int b = offsets[r], e = offsets[rows + r];
    std::vector<int> order(e - b);
    for (int i = 0; i < e - b; ++i) order[i] = b + i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return keys_in[x] > keys_in[y]; });
    for (int i = 0; i < e - b; ++i) {
      keys_out[b + i] = keys_in[order[i]];
      ids_out[b + i] = ids_in[order[i]];
    }
  }
  return cudaSuccess;
#endif
}

} // namespace

extern "C" cudaError_t weir_cuda_sample_penalties(cudaStream_t stream, float *logits,
                                                  int32_t vocab,
                                                  const weir_cuda_sample_params *params,
                                                  const weir_cuda_penalty *pen, int32_t num_pen) {
  if (num_pen <= 0) return cudaSuccess;
  WEIR_LAUNCH(penalty_kernel, (num_pen + 255) / 256, 256, 0, stream)(logits, vocab, params, pen,
                                                                     num_pen);
  return cudaGetLastError();
}

extern "C" cudaError_t weir_cuda_sample_mask(cudaStream_t stream, float *logits,
                                             int32_t num_rows, int32_t vocab,
                                             const weir_cuda_sample_params *params,
                                             const uint32_t *masks) {
  if (num_rows <= 0 || !masks) return cudaSuccess;
  const unsigned gx = (unsigned)((vocab + 255) / 256 < 64 ? (vocab + 255) / 256 : 64);
  WEIR_LAUNCH(mask_kernel, dim3(gx, (unsigned)num_rows), 256, 0, stream)(logits, vocab, params,
                                                                         masks);
  return cudaGetLastError();
}

extern "C" size_t weir_cuda_sample_workspace_bytes(int32_t num_rows, int32_t vocab) {
  const size_t items = (size_t)num_rows * (size_t)vocab;
  return 4 * align256(items * 4) + align256(cub_temp_bytes(num_rows, vocab));
}

extern "C" cudaError_t weir_cuda_sample(cudaStream_t stream, const float *logits,
                                        int32_t num_rows, int32_t vocab,
                                        const weir_cuda_sample_params *params,
                                        int32_t any_sorted, void *workspace,
                                        size_t workspace_bytes, int32_t *offsets,
                                        weir_cuda_sample_result *results, float *probs) {
  if (num_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || (int64_t)num_rows * vocab > 0x7fffffff) return cudaErrorInvalidValue;
  const size_t items = (size_t)num_rows * (size_t)vocab;
  char *ws = static_cast<char *>(workspace);
  float *keys_in = nullptr, *keys_out = nullptr;
  int32_t *ids_in = nullptr, *ids_out = nullptr;
  if (any_sorted) {
    if (workspace_bytes < weir_cuda_sample_workspace_bytes(num_rows, vocab))
      return cudaErrorInvalidValue;
    keys_in = reinterpret_cast<float *>(ws);
    keys_out = reinterpret_cast<float *>(ws + align256(items * 4));
    ids_in = reinterpret_cast<int32_t *>(ws + 2 * align256(items * 4));
    ids_out = reinterpret_cast<int32_t *>(ws + 3 * align256(items * 4));
    void *temp = ws + 4 * align256(items * 4);
    size_t temp_bytes = workspace_bytes - 4 * align256(items * 4);
    const unsigned gx = (unsigned)((vocab + 255) / 256 < 64 ? (vocab + 255) / 256 : 64);
    WEIR_LAUNCH(sort_keys_kernel, dim3(gx, (unsigned)num_rows), 256, 0, stream)(
        logits, vocab, params, keys_in, ids_in, offsets, num_rows);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    e = sort_rows(temp, temp_bytes, keys_in, keys_out, ids_in, ids_out, (int)items, num_rows,
                  offsets, stream);
    if (e != cudaSuccess) return e;
  }
  WEIR_LAUNCH(sample_row_kernel, (unsigned)num_rows, kThreads, 0, stream)(logits, vocab, params, keys_out,
                                                                 ids_out, results, probs);
  return cudaGetLastError();
}
