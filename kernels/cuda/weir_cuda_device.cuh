// Device helpers the CUDA kernel files share: the launch macro, GGUF source types and the
// reading of one element of a GGUF source row, and warp reductions. Included by the .cu files
// (and through them by tests/cuda/cpu_shim, which defines WEIR_LAUNCH and the CUDA built-ins
// for the CPU first), so it uses nothing the shim does not provide.
#ifndef WEIR_CUDA_DEVICE_CUH
#define WEIR_CUDA_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// Kernel launches go through this macro so that tests/cuda/cpu_shim can run the kernel files
// on the CPU (it defines WEIR_LAUNCH before including them).
#ifndef WEIR_LAUNCH
#define WEIR_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#endif

namespace weir_cuda {

// GGUF tensor types the packing kernels read (their GGUF numbers).
enum { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };

// A little-endian f16 at any byte address (GGUF blocks are not 2-byte aligned in general).
__device__ __forceinline__ float ld_half(const unsigned char *p) {
  return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

// Element c of a GGUF source row as f32 (0 for a type not listed above).
__device__ __forceinline__ float src_value(const unsigned char *row, int dtype, int64_t c) {
  switch (dtype) {
  case kF32: return reinterpret_cast<const float *>(row)[c];
  case kF16: return __half2float(reinterpret_cast<const __half *>(row)[c]);
  case kBF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(row)[c]);
  case kQ8_0: {
    const unsigned char *b = row + (c / 32) * 34;
    return ld_half(b) * (float)reinterpret_cast<const signed char *>(b + 2)[c % 32];
  }
  case kQ4_0: {
    const unsigned char *b = row + (c / 32) * 18;
    const int j = (int)(c % 32);
    const int qv = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    return (float)(qv - 8) * ld_half(b);
  }
  case kQ4_1: {
    const unsigned char *b = row + (c / 32) * 20;
    const int j = (int)(c % 32);
    const int qv = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
    return (float)qv * ld_half(b) + ld_half(b + 2);
  }
  default: return 0.0f;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Four int8 products added to c (dp4a on sm_61 and later; the same sum in plain C on the shim).
__device__ __forceinline__ int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(a, b, c);
#else
  for (int k = 0; k < 4; ++k)
    c += (int)(signed char)(a >> (8 * k)) * (int)(signed char)(b >> (8 * k));
  return c;
#endif
}

// Blocks for a grid-stride kernel over n elements: enough to cover them, capped at 65536 (the
// kernels loop over the rest).
inline unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return (unsigned)b;
}

} // namespace weir_cuda

#endif
