/* GGUF v3 model files: a read-only, mmap-based reader with strict validation.
 *
 * A weir_gguf is one opened file. Opening maps the whole file read-only, parses the header,
 * every metadata key/value and every tensor info, and checks everything a later reader could
 * trip on: truncation anywhere, counts and string lengths that cannot fit in the file,
 * unknown value or tensor types, duplicate names, dimension overflow, tensor data outside
 * the file or misaligned. After a successful open every view handed out is in bounds, so the
 * accessors below cannot fail on a malformed file; they fail only on a missing key or a type
 * mismatch.
 *
 * Ownership: every pointer returned (names, string views, array views, tensor data) points
 * into the mapping or into the weir_gguf and stays valid until weir_gguf_close(). Strings
 * from the file (weir_gguf_str) are NOT NUL-terminated; key and tensor names are (they are
 * copied at open, and a name holding a NUL byte is rejected).
 * The mapping is PROT_READ: never write through a tensor's data pointer.
 *
 * Errors: functions return 0 or a negative weir_status (sdk/include/weir/status.h):
 * WEIR_E_IO (open/stat/mmap failed), WEIR_E_FORMAT (malformed file), WEIR_E_NOMEM,
 * WEIR_E_NOTFOUND (no such key or tensor), WEIR_E_INVAL (wrong value type, bad argument),
 * WEIR_E_NOTSUP (an architecture or version weir does not handle), WEIR_E_RANGE (a value
 * outside what the target type holds). Where a function takes (err, errlen) it writes one
 * line naming the file and what is wrong there (err may be NULL when errlen is 0).
 *
 * Thread-safety: open/close are not concurrent with other calls on the same handle; every
 * other function is read-only and may be called from any number of threads at once. */
#ifndef WEIR_FORMAT_GGUF_H
#define WEIR_FORMAT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "weir/device.h"
#include "weir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEIR_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define WEIR_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum weir_gguf_type {
  WEIR_GGUF_U8 = 0,
  WEIR_GGUF_I8 = 1,
  WEIR_GGUF_U16 = 2,
  WEIR_GGUF_I16 = 3,
  WEIR_GGUF_U32 = 4,
  WEIR_GGUF_I32 = 5,
  WEIR_GGUF_F32 = 6,
  WEIR_GGUF_BOOL = 7,
  WEIR_GGUF_STRING = 8,
  WEIR_GGUF_ARRAY = 9,
  WEIR_GGUF_U64 = 10,
  WEIR_GGUF_I64 = 11,
  WEIR_GGUF_F64 = 12,
  WEIR_GGUF_TYPE_COUNT_ = 13,
} weir_gguf_type;

/* "u8", "string", "array", ...; "?" for an unknown type. Static string. */
const char *weir_gguf_type_name(weir_gguf_type t);
/* Bytes of one value of a scalar metadata type (1, 2, 4 or 8); 0 for string, array and an
 * unknown type. The reader's and the writer's one table. */
size_t weir_gguf_scalar_size(weir_gguf_type t);

typedef struct weir_gguf weir_gguf;

/* A string in the file: `len` bytes at `ptr`, not NUL-terminated, not checked for UTF-8. */
typedef struct weir_gguf_str {
  const char *ptr;
  uint64_t len;
} weir_gguf_str;

/* An array value: `n` elements of `elem_type` starting at `data` (raw little-endian bytes in
 * the mapping, possibly unaligned: read elements with the weir_gguf_arr_* accessors).
 * Nested arrays are allowed (elem_type WEIR_GGUF_ARRAY). */
typedef struct weir_gguf_arr {
  weir_gguf_type elem_type;
  uint64_t n;
  const uint8_t *data;
  const uint64_t *str_offs; /* private: offsets of string elements from `data`, or NULL */
  const uint8_t *end;       /* private: one past the last byte of the array */
} weir_gguf_arr;

/* One metadata entry. `value` points at the raw value bytes in the mapping (for a scalar the
 * little-endian value, for a string its u64 length prefix, for an array its type tag). */
typedef struct weir_gguf_kv {
  const char *key;  /* NUL-terminated copy */
  weir_gguf_type type;
  const uint8_t *value;
  weir_gguf_arr arr; /* valid when type == WEIR_GGUF_ARRAY */
} weir_gguf_kv;

/* One tensor. `t.data` points into the mapping; `t.dtype` is the GGUF ggml_type number,
 * which equals weir_dtype; ne[] as in the file (ne[0] innermost: a linear weight of
 * out x in has ne = {in, out}); unused dims have ne = 1; nb[] are contiguous strides
 * (nb[0] = block bytes, nb[1] = row bytes). */
typedef struct weir_gguf_tensor {
  const char *name;  /* NUL-terminated copy */
  weir_tensor t;
  uint64_t offset;   /* from the start of the data section */
  uint64_t nbytes;   /* size of the data */
  int64_t nelements;
} weir_gguf_tensor;

/* Opens and validates a GGUF file (version 3; version 2 is accepted too, same layout).
 * On success *out owns the mapping; free with weir_gguf_close. On failure *out is NULL and
 * err names the file and the problem. */
int weir_gguf_open(const char *path, weir_gguf **out, char *err, size_t errlen);

/* The same over a caller-owned buffer (tests, fuzzing): `data` is borrowed and must outlive
 * the handle; `name` is used in error messages (may be NULL). */
int weir_gguf_open_buffer(const void *data, size_t len, const char *name, weir_gguf **out,
                          char *err, size_t errlen);

/* Unmaps and frees. NULL is a no-op. */
void weir_gguf_close(weir_gguf *g);

/* File facts. */
const char *weir_gguf_path(const weir_gguf *g); /* the path given to open (or buffer name) */
uint32_t weir_gguf_version(const weir_gguf *g);
uint32_t weir_gguf_alignment(const weir_gguf *g);   /* general.alignment or 32 */
uint64_t weir_gguf_data_offset(const weir_gguf *g); /* start of the tensor data section */
uint64_t weir_gguf_file_size(const weir_gguf *g);
const void *weir_gguf_base(const weir_gguf *g);     /* start of the mapping */

/* Metadata: count, by index (file order), by name (NULL when absent). */
int64_t weir_gguf_kv_count(const weir_gguf *g);
const weir_gguf_kv *weir_gguf_kv_at(const weir_gguf *g, int64_t i);
const weir_gguf_kv *weir_gguf_find_key(const weir_gguf *g, const char *key);

/* Typed getters by key name. Each returns 0 and sets *out, WEIR_E_NOTFOUND when the key is
 * absent (leaving *out untouched, so callers can preset a default), WEIR_E_INVAL when the
 * stored type does not convert, WEIR_E_RANGE when an integer does not fit.
 *  - integer getters accept any integer type (u8..i64) whose value fits the target;
 *  - weir_gguf_get_f32/f64 accept f32, f64 and integers;
 *  - weir_gguf_get_bool accepts bool (and u8/i8 0/1);
 *  - weir_gguf_get_str accepts only a string;
 *  - weir_gguf_get_arr accepts only an array. */
int weir_gguf_get_u32(const weir_gguf *g, const char *key, uint32_t *out);
int weir_gguf_get_i32(const weir_gguf *g, const char *key, int32_t *out);
int weir_gguf_get_u64(const weir_gguf *g, const char *key, uint64_t *out);
int weir_gguf_get_i64(const weir_gguf *g, const char *key, int64_t *out);
int weir_gguf_get_f32(const weir_gguf *g, const char *key, float *out);
int weir_gguf_get_f64(const weir_gguf *g, const char *key, double *out);
int weir_gguf_get_bool(const weir_gguf *g, const char *key, int *out);
int weir_gguf_get_str(const weir_gguf *g, const char *key, weir_gguf_str *out);
int weir_gguf_get_arr(const weir_gguf *g, const char *key, weir_gguf_arr *out);

/* The same conversions on a weir_gguf_kv already found. */
int weir_gguf_kv_i64(const weir_gguf_kv *kv, int64_t *out);
int weir_gguf_kv_u64(const weir_gguf_kv *kv, uint64_t *out);
int weir_gguf_kv_f64(const weir_gguf_kv *kv, double *out);
int weir_gguf_kv_bool(const weir_gguf_kv *kv, int *out);
int weir_gguf_kv_str(const weir_gguf_kv *kv, weir_gguf_str *out);

/* Array element access; i must be < a->n (WEIR_E_RANGE otherwise). Numeric accessors accept
 * any numeric element type (i64: integers and bool; f64/f32: also floats). String access is
 * O(1) for a top-level string array (offsets are indexed at open) and O(i) inside nested
 * arrays. weir_gguf_arr_arr views element i of an array of arrays. */
int weir_gguf_arr_i64(const weir_gguf_arr *a, uint64_t i, int64_t *out);
int weir_gguf_arr_f64(const weir_gguf_arr *a, uint64_t i, double *out);
int weir_gguf_arr_f32(const weir_gguf_arr *a, uint64_t i, float *out);
int weir_gguf_arr_str(const weir_gguf_arr *a, uint64_t i, weir_gguf_str *out);
int weir_gguf_arr_arr(const weir_gguf_arr *a, uint64_t i, weir_gguf_arr *out);

/* Tensors: count, by index (file order), by name (NULL when absent). */
int64_t weir_gguf_tensor_count(const weir_gguf *g);
const weir_gguf_tensor *weir_gguf_tensor_at(const weir_gguf *g, int64_t i);
const weir_gguf_tensor *weir_gguf_find_tensor(const weir_gguf *g, const char *name);
/* Bytes of a tensor of this dtype and shape (ndim dimensions, ne[0] innermost): the reader's
 * and the writer's one size rule. 0 when the shape is invalid for the dtype (a dimension
 * below 1, a row that is not a block multiple) or the size overflows 64 bits. */
uint64_t weir_gguf_tensor_bytes(weir_dtype dtype, int ndim, const int64_t *ne);

/* ---- The Llama-family architectures (llama, mistral, qwen2) ---- */

typedef enum weir_arch {
  WEIR_ARCH_LLAMA = 0,
  WEIR_ARCH_MISTRAL = 1,
  WEIR_ARCH_QWEN2 = 2,
} weir_arch;

/* RoPE styles: weir_rope_style from the SDK (weir/device.h): WEIR_ROPE_NORM rotates
 * (x[2i], x[2i+1]) (llama, mistral); WEIR_ROPE_NEOX rotates (x[i], x[i + n_rot/2]) (qwen2). */

typedef struct weir_llama_hparams {
  weir_arch arch;
  char arch_name[16];       /* general.architecture: "llama", "mistral", "qwen2" */
  int32_t n_ctx_train;      /* <arch>.context_length */
  int32_t n_embd;           /* <arch>.embedding_length */
  int32_t n_layer;          /* <arch>.block_count */
  int32_t n_ff;             /* <arch>.feed_forward_length */
  int32_t n_head;           /* <arch>.attention.head_count */
  int32_t n_head_kv;        /* <arch>.attention.head_count_kv (default n_head) */
  int32_t head_dim;         /* n_embd / n_head */
  int32_t n_rot;            /* <arch>.rope.dimension_count (default head_dim), even, <= head_dim */
  int32_t n_vocab;          /* tokenizer.ggml.tokens length, else token_embd.weight ne[1] */
  float rope_freq_base;     /* <arch>.rope.freq_base (default 10000) */
  float rope_scale;         /* <arch>.rope.scaling.factor (default 1 = none); positions are
                               divided by it (linear scaling) */
  float rms_eps;            /* <arch>.attention.layer_norm_rms_epsilon (default 1e-5) */
  weir_rope_style rope_style; /* NEOX for qwen2, NORM otherwise */
  int has_output;           /* 1: output.weight exists; 0: tied to token_embd.weight */
  int has_qkv_bias;         /* 1: blk.N.attn_{q,k,v}.bias exist (qwen2) */
} weir_llama_hparams;

/* Reads the hyperparameters of a llama/mistral/qwen2 file. Checks they are consistent
 * (positive, n_embd % n_head == 0, n_head % n_head_kv == 0, n_rot even and <= head_dim).
 * WEIR_E_NOTSUP for another architecture, WEIR_E_NOTFOUND for a missing required key
 * (named in err), WEIR_E_FORMAT for inconsistent values. */
int weir_gguf_llama_hparams(const weir_gguf *g, weir_llama_hparams *out, char *err,
                            size_t errlen);

/* Checks that every tensor the Llama graph needs exists with the expected shape and a
 * dtype weir supports (matrices: F32, F16, BF16 or any block type the reader accepts, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS, mixed freely; norms and biases must be
 * F32, F16 or BF16) with finite scales (weir_gguf_check_scales): token_embd.weight {n_embd, n_vocab}, output_norm.weight {n_embd},
 * output.weight {n_embd, n_vocab} (unless tied), and per layer blk.N.attn_norm.weight
 * {n_embd}, attn_q {n_embd, n_embd}, attn_k/attn_v {n_embd, n_head_kv*head_dim},
 * attn_output {n_embd, n_embd}, ffn_norm {n_embd}, ffn_gate/ffn_up {n_embd, n_ff},
 * ffn_down {n_ff, n_embd}; qwen2 also attn_{q,k,v}.bias. WEIR_E_NOTFOUND for a missing
 * tensor, WEIR_E_FORMAT for a wrong shape or a non-finite scale, WEIR_E_NOTSUP for an
 * unsupported dtype. Reads 2-4 bytes of every block of the matrices (so it touches every
 * page of the weights, which loading reads next anyway). */
int weir_gguf_llama_check(const weir_gguf *g, const weir_llama_hparams *hp, char *err,
                          size_t errlen);

/* Checks that every block of a block-quantized tensor has finite f16 scales (d, and dmin or m
 * where the type has them; weir_quant_scales_finite). 0 for plain types and clean tensors;
 * WEIR_E_FORMAT with a one-line message naming the file, tensor, type, block and row. */
int weir_gguf_check_scales(const weir_gguf *g, const weir_gguf_tensor *t, char *err,
                           size_t errlen);

/* Convenience: the name of the per-layer tensor "blk.<layer>.<suffix>" into buf. */
const char *weir_gguf_blk_name(char *buf, size_t buflen, int layer, const char *suffix);

#ifdef __cplusplus
}
#endif
#endif
