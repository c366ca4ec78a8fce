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
  WEIR_DTYPE_Q5_0 = 6,   /* blocks of 32: f16 d, 4 bytes of high bits, 16 bytes of nibbles;
                          * x = (q - 16) * d. Since 1.5. */
  WEIR_DTYPE_Q5_1 = 7,   /* blocks of 32: f16 d, f16 m, 4 bytes of high bits, 16 bytes of
                          * nibbles; x = q * d + m. Since 1.5. */
  WEIR_DTYPE_Q8_0 = 8,   /* blocks of 32: f16 scale d, 32 int8; x = q * d */
  /* The K-quants: super-blocks of 256 in sub-blocks of 16 or 32, each sub-block with its own
   * quantized scale (and min). Layouts in the structs below. Since 1.5. */
  WEIR_DTYPE_Q2_K = 10,
  WEIR_DTYPE_Q3_K = 11,
  WEIR_DTYPE_Q4_K = 12,
  WEIR_DTYPE_Q5_K = 13,
  WEIR_DTYPE_Q6_K = 14,
  WEIR_DTYPE_Q8_K = 15,  /* activations only (f32 d, 256 int8, 16 int16 block sums) */
  /* Non-linear 4-bit: a fixed 16-entry codebook indexed by nibbles. Since 1.5. */
  WEIR_DTYPE_IQ4_NL = 20, /* blocks of 32: f16 d, 16 bytes of nibbles; x = d * kvalues[q] */
  WEIR_DTYPE_IQ4_XS = 23, /* super-blocks of 256: f16 d, 6-bit sub-block scales, nibbles */
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

/* Devices, as a bit mask in plugin capabilities (ABI 1.0). The list is closed: since 1.5 a
 * device is known by its name, the name of its device plugin ("cpu", "cuda", "rocm", "sim"),
 * which any .so may bring without a change to weir; plugins declare the device names they
 * run on in weir_plugin_desc.device_names. The bits stay for plugins built before 1.5 (the
 * host reads a plugin's bits only when it declares no names) and for weir_plugin_args.device,
 * which holds the bit of the device's memory (see weir_plugin_desc.device_names). */
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

/* Block layouts of the K-quant and IQ4 types, byte for byte as GGUF stores them (f16 fields
 * as their uint16_t bits). QK_K = 256 elements per super-block. Since 1.5.
 *
 * Q2_K: 16 sub-blocks of 16. scales[i] low nibble = 4-bit scale, high nibble = 4-bit min;
 *   x = d * sc * q - dmin * m, q the 2-bit value (qs: 2 bits each; for each half of 128
 *   elements, 32 bytes whose 4 bit pairs hold elements l, l+32, l+64, l+96).
 * Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (packed in 12 bytes, minus 32);
 *   x = d * sc * (q - 4 * !hbit), q the low 2 bits from qs, hbit from hmask.
 * Q4_K: 8 sub-blocks of 32 with 6-bit scale and min (packed in 12 bytes);
 *   x = d * sc * q - dmin * m, q a nibble.
 * Q5_K: as Q4_K with a fifth bit per element in qh.
 * Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * sc * (q - 32), q 6 bits (ql + qh).
 * IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (4 low bits in scales_l, 2 high bits in
 *   scales_h), minus 32; x = d * (sc - 32) * kvalues[q]. */
#define WEIR_QK_K 256
typedef struct weir_block_q2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
} weir_block_q2_K;
typedef struct weir_block_q3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
} weir_block_q3_K;
typedef struct weir_block_q4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
} weir_block_q4_K;
typedef struct weir_block_q5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
} weir_block_q5_K;
typedef struct weir_block_q6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
} weir_block_q6_K;
typedef struct weir_block_q8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
} weir_block_q8_K;
typedef struct weir_block_iq4_xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
} weir_block_iq4_xs;

/* Elements per quantization block of a dtype (1 for plain types). */
static inline int64_t weir_dtype_block_elems(weir_dtype t) {
  switch (t) {
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q8_0:
  case WEIR_DTYPE_Q5_0: case WEIR_DTYPE_Q5_1: case WEIR_DTYPE_IQ4_NL: return 32;
  case WEIR_DTYPE_Q2_K: case WEIR_DTYPE_Q3_K: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
  case WEIR_DTYPE_Q6_K: case WEIR_DTYPE_Q8_K: case WEIR_DTYPE_IQ4_XS: return WEIR_QK_K;
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
  case WEIR_DTYPE_Q5_0: return 22;
  case WEIR_DTYPE_Q5_1: return 24;
  case WEIR_DTYPE_IQ4_NL: return 18;
  case WEIR_DTYPE_Q2_K: return sizeof(weir_block_q2_K);
  case WEIR_DTYPE_Q3_K: return sizeof(weir_block_q3_K);
  case WEIR_DTYPE_Q4_K: return sizeof(weir_block_q4_K);
  case WEIR_DTYPE_Q5_K: return sizeof(weir_block_q5_K);
  case WEIR_DTYPE_Q6_K: return sizeof(weir_block_q6_K);
  case WEIR_DTYPE_Q8_K: return sizeof(weir_block_q8_K);
  case WEIR_DTYPE_IQ4_XS: return sizeof(weir_block_iq4_xs);
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
  case WEIR_DTYPE_Q5_0: return "q5_0";
  case WEIR_DTYPE_Q5_1: return "q5_1";
  case WEIR_DTYPE_Q2_K: return "q2_K";
  case WEIR_DTYPE_Q3_K: return "q3_K";
  case WEIR_DTYPE_Q4_K: return "q4_K";
  case WEIR_DTYPE_Q5_K: return "q5_K";
  case WEIR_DTYPE_Q6_K: return "q6_K";
  case WEIR_DTYPE_Q8_K: return "q8_K";
  case WEIR_DTYPE_IQ4_NL: return "iq4_nl";
  case WEIR_DTYPE_IQ4_XS: return "iq4_xs";
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
