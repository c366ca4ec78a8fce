// Runs weir's CUDA kernels on the CPU, for logic tests on machines without a GPU.
//
// Include this, then a kernel file (e.g. "attention.cu"), into one C++ translation unit
// compiled by the host compiler. Each CUDA thread becomes a host thread; one block runs at a
// time, so a single global buffer serves as the block's dynamic shared memory and
// __syncthreads is a barrier over the block's threads. Supported: what the kernels that use it
// need (thread/block indices, __syncthreads, shared memory, __shfl_xor_sync on floats, __ldg,
// min, launch through WEIR_LAUNCH, atomicAdd on int, __threadfence, __ldcg). Not supported:
// other warp intrinsics and atomics. Blocks run in grid order, or in reverse grid order while
// shim_reverse_blocks is set, so a kernel that must not depend on which block finishes last
// (a last-block-done reduction) can be run both ways. Device
// pointers are host pointers. Slow (a thread per CUDA thread): keep problems small. The file
// that defines the dynamic shared memory array must publish its address through a volatile
// pointer with external linkage (see test_attention_shim.cpp), or the optimizer may keep its
// values in registers across __syncthreads.
#ifndef WEIR_CUDA_SHIM_H
#define WEIR_CUDA_SHIM_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <tuple>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Static __shared__ arrays become function statics (blocks run one at a time, so that is the
// block's memory); a file with `extern __shared__` arrays defines WEIR_SHIM_EXTERN_SHARED.
#ifdef WEIR_SHIM_EXTERN_SHARED
#define __shared__
#else
#define __shared__ static
#endif

// Builtins each CUDA thread sees.
inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
inline pthread_barrier_t shim_barrier;

inline void __syncthreads() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  pthread_barrier_wait(&shim_barrier);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcg(const T *p) { return *p; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline bool shim_reverse_blocks = false;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }

// Warp shuffles: each warp exchanges through a buffer, fenced by a barrier of its 32 threads.
inline std::vector<pthread_barrier_t> shim_warp_barriers;
inline float shim_shfl_buf[1024];
inline void shim_warp_sync() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  pthread_barrier_wait(&shim_warp_barriers[threadIdx.x / 32]);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  (void)mask;
  const unsigned t = threadIdx.x;
  shim_shfl_buf[t] = v;
  shim_warp_sync();
  const float r = shim_shfl_buf[(t & ~31u) | ((t & 31u) ^ (unsigned)lane_mask)];
  shim_warp_sync();
  return r;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// The runtime calls the kernel files make around launches.
#define cudaGetLastError() cudaSuccess
#define cudaFuncSetAttribute(...) cudaSuccess

// Runs grid x block host threads, one block at a time.
struct ShimLaunch {
  dim3 grid, block;
  template <typename K, typename... A> void operator()(K kernel, A... args) const {
    blockDim = block;
    gridDim = grid;
    const unsigned nt = block.x * block.y * block.z;
    const unsigned nblocks = grid.x * grid.y * grid.z;
    for (unsigned bi = 0; bi < nblocks; ++bi) {
          const unsigned lin = shim_reverse_blocks ? nblocks - 1 - bi : bi;
          const unsigned bx = lin % grid.x, by = lin / grid.x % grid.y, bz = lin / (grid.x * grid.y);
          {
          pthread_barrier_init(&shim_barrier, nullptr, nt);
          shim_warp_barriers.resize((nt + 31) / 32);
          for (unsigned w = 0; w < (nt + 31) / 32; ++w)
            pthread_barrier_init(&shim_warp_barriers[w], nullptr, std::min(32u, nt - 32 * w));
          // Small stacks: thread creation cost is mostly mapping the default 8 MiB stack.
          struct Job {
            const ShimLaunch *self;
            unsigned t, bx, by, bz;
            K kernel;
            std::tuple<A...> args;
          };
          std::vector<Job> jobs;
          jobs.reserve(nt);
          for (unsigned t = 0; t < nt; ++t) jobs.push_back(Job{this, t, bx, by, bz, kernel, {args...}});
          std::vector<pthread_t> th(nt);
          pthread_attr_t attr;
          pthread_attr_init(&attr);
          pthread_attr_setstacksize(&attr, 256 * 1024);
          for (unsigned t = 0; t < nt; ++t)
            pthread_create(&th[t], &attr, [](void *arg) -> void * {
              Job *j = static_cast<Job *>(arg);
              const dim3 b = j->self->block;
              threadIdx = dim3(j->t % b.x, (j->t / b.x) % b.y, j->t / (b.x * b.y));
              blockIdx = dim3(j->bx, j->by, j->bz);
              std::apply(j->kernel, j->args);
              return nullptr;
            }, &jobs[t]);
          pthread_attr_destroy(&attr);
          for (unsigned t = 0; t < nt; ++t) pthread_join(th[t], nullptr);
          pthread_barrier_destroy(&shim_barrier);
          for (auto &b : shim_warp_barriers) pthread_barrier_destroy(&b);
          }
        }
  }
};

template <typename K> struct ShimBound {
  ShimLaunch l;
  K k;
  template <typename... A> void operator()(A... args) const { l(k, args...); }
};

template <typename K> ShimBound<K> shim_bind(K k, dim3 grid, dim3 block) {
  return ShimBound<K>{ShimLaunch{grid, block}, k};
}

#define WEIR_LAUNCH(kernel, grid, block, smem, stream) shim_bind(kernel, dim3(grid), dim3(block))

#endif
