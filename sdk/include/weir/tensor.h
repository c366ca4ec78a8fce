/* weir SDK: element types and tensor views. Since ABI 1.0. */
#ifndef WEIR_TENSOR_H
#define WEIR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. The quantized values match GGUF's ggml_type numbering so that a GGUF tensor
 * type converts without a table; weir-only types start at 64. Never renumbered. */
typedef enum weir_dtype {
  WEIR_DTYPE_F32 = 0,
  WEIR_DTYPE_F16 = 1,
  WEIR_DTYPE_Q4_0 = 2,   /* blocks of 32: f16 scale d, 16 bytes of nibbles; x = (q - 8) * d */
  WEIR_DTYPE_Q4_1 = 3,   /* blocks of 32: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m */
  WEIR_DTYPE_Q8_0 = 8,   /* blocks of 32: f16 scale d, 32 int8; x = q * d */
  WEIR_DTYPE_I8 = 24,
  WEIR_DTYPE_I16 = 25,
  WEIR_DTYPE_I32 = 26,
  WEIR_DTYPE_I64 = 27,
  WEIR_DTYPE_F64 = 28,
  WEIR_DTYPE_BF16 = 30,
  WEIR_DTYPE_FP8_E4M3 = 64, /* weir-only: KV caches */
  WEIR_DTYPE_COUNT_ = 65,
} weir_dtype;

/* Bit for a dtype in a 64-bit capability mask (FP8_E4M3 maps to bit 63). */
#define WEIR_DTYPE_BIT(t) ((uint64_t)1 << ((t) >= 63 ? 63 : (t)))

/* Devices, as a bit mask in plugin capabilities. */
typedef enum weir_device_kind {
  WEIR_DEVICE_CPU = 1u << 0,
  WEIR_DEVICE_CUDA = 1u << 1,
} weir_device_kind;

#define WEIR_MAX_DIMS 4

/* A view of a tensor in some device's memory. ne[0] is the innermost, contiguous dimension
 * (GGUF's convention): a matrix of `rows` rows of `cols` values has ne = {cols, rows}.
 * nb[i] is the stride of dimension i in bytes. For block-quantized dtypes ne[0] counts
 * elements and nb[1] is the byte size of one row.
 * Ownership: a view never owns `data`; whoever allocated the memory frees it.
 * Versions: the struct has no struct_size because it is embedded in other structs and arrays;
 * its layout is frozen at 1.0 and never grows. */
typedef struct weir_tensor {
  void *data;                /* 1.0 */
  weir_dtype dtype;          /* 1.0 */
  int32_t ndim;              /* 1.0 */
  int64_t ne[WEIR_MAX_DIMS]; /* 1.0 */
  size_t nb[WEIR_MAX_DIMS];  /* 1.0 */
} weir_tensor;

/* Elements per quantization block of a dtype (1 for plain types). */
static inline int64_t weir_dtype_block_elems(weir_dtype t) {
  switch (t) {
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q8_0: return 32;
  default: return 1;
  }
}

/* Bytes per quantization block (per element for plain types); 0 for an unknown dtype. */
static inline size_t weir_dtype_block_bytes(weir_dtype t) {
  switch (t) {
  case WEIR_DTYPE_F32: case WEIR_DTYPE_I32: return 4;
  case WEIR_DTYPE_F16: case WEIR_DTYPE_BF16: case WEIR_DTYPE_I16: return 2;
  case WEIR_DTYPE_I8: case WEIR_DTYPE_FP8_E4M3: return 1;
  case WEIR_DTYPE_I64: case WEIR_DTYPE_F64: return 8;
  case WEIR_DTYPE_Q4_0: return 18;
  case WEIR_DTYPE_Q4_1: return 20;
  case WEIR_DTYPE_Q8_0: return 34;
  default: return 0;
  }
}

/* Bytes of one row of n elements; 0 if n is not a multiple of the dtype's block. */
static inline size_t weir_dtype_row_bytes(weir_dtype t, int64_t n) {
  int64_t be = weir_dtype_block_elems(t);
  if (n < 0 || n % be != 0) return 0;
  return (size_t)(n / be) * weir_dtype_block_bytes(t);
}

/* Short lower-case name ("f32", "q8_0", ...); "?" for an unknown dtype. */
static inline const char *weir_dtype_name(weir_dtype t) {
  switch (t) {
  case WEIR_DTYPE_F32: return "f32";
  case WEIR_DTYPE_F16: return "f16";
  case WEIR_DTYPE_BF16: return "bf16";
  case WEIR_DTYPE_Q4_0: return "q4_0";
  case WEIR_DTYPE_Q4_1: return "q4_1";
  case WEIR_DTYPE_Q8_0: return "q8_0";
  case WEIR_DTYPE_I8: return "i8";
  case WEIR_DTYPE_I16: return "i16";
  case WEIR_DTYPE_I32: return "i32";
  case WEIR_DTYPE_I64: return "i64";
  case WEIR_DTYPE_F64: return "f64";
  case WEIR_DTYPE_FP8_E4M3: return "fp8";
  default: return "?";
  }
}

#ifdef __cplusplus
}
#endif
#endif
