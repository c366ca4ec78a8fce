/* GGUF v3 writer: metadata of every type, tensors, alignment; whole-file or streamed.
 *
 * Usage: weir_gguf_writer_new, add metadata and tensor declarations (in file order), then
 * either weir_gguf_write_file (every tensor given its data) or the streamed form
 * weir_gguf_writer_begin, weir_gguf_writer_put (the tensors' bytes, in declaration order, in
 * chunks of any size; padding between tensors is inserted automatically),
 * weir_gguf_writer_end. Tensors get offsets in declaration order, each aligned.
 *
 * Ownership: keys, names and metadata values are copied when added; tensor data passed to
 * weir_gguf_add_tensor is borrowed until weir_gguf_write_file returns.
 * Errors: WEIR_E_INVAL (bad argument: bad alignment, a dtype with a row not a multiple of its
 * block, non-positive dims), WEIR_E_EXISTS (duplicate key or tensor name), WEIR_E_NOMEM,
 * WEIR_E_IO (with err naming the file). Not thread-safe: one writer per thread. */
#ifndef WEIR_FORMAT_GGUF_WRITE_H
#define WEIR_FORMAT_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weir_gguf_writer weir_gguf_writer;

int weir_gguf_writer_new(weir_gguf_writer **out);
/* Frees the writer; closes (and keeps) a half-written file. NULL is a no-op. */
void weir_gguf_writer_free(weir_gguf_writer *w);

/* Sets the data alignment (a power of two) and records it as general.alignment (u32).
 * Call before weir_gguf_writer_begin; without it the alignment is 32 and no key is written. */
int weir_gguf_writer_set_alignment(weir_gguf_writer *w, uint32_t alignment);

int weir_gguf_add_u8(weir_gguf_writer *w, const char *key, uint8_t v);
int weir_gguf_add_i8(weir_gguf_writer *w, const char *key, int8_t v);
int weir_gguf_add_u16(weir_gguf_writer *w, const char *key, uint16_t v);
int weir_gguf_add_i16(weir_gguf_writer *w, const char *key, int16_t v);
int weir_gguf_add_u32(weir_gguf_writer *w, const char *key, uint32_t v);
int weir_gguf_add_i32(weir_gguf_writer *w, const char *key, int32_t v);
int weir_gguf_add_u64(weir_gguf_writer *w, const char *key, uint64_t v);
int weir_gguf_add_i64(weir_gguf_writer *w, const char *key, int64_t v);
int weir_gguf_add_f32(weir_gguf_writer *w, const char *key, float v);
int weir_gguf_add_f64(weir_gguf_writer *w, const char *key, double v);
int weir_gguf_add_bool(weir_gguf_writer *w, const char *key, int v);
int weir_gguf_add_str(weir_gguf_writer *w, const char *key, const char *v);
int weir_gguf_add_strn(weir_gguf_writer *w, const char *key, const char *v, size_t len);
/* An array of n scalars of elem_type (u8..f64 or bool), packed in host order at `elems`. */
int weir_gguf_add_arr(weir_gguf_writer *w, const char *key, weir_gguf_type elem_type,
                      const void *elems, uint64_t n);
/* An array of n strings; lens may be NULL (then each is NUL-terminated). */
int weir_gguf_add_arr_str(weir_gguf_writer *w, const char *key, const char *const *strs,
                          const size_t *lens, uint64_t n);
/* A value of `type` whose encoding (everything after the type tag) the caller built, e.g.
 * nested arrays. The bytes are not checked. */
int weir_gguf_add_raw(weir_gguf_writer *w, const char *key, uint32_t type, const void *value,
                      size_t len);

/* Declares a tensor: ne[0] innermost (a linear weight out x in has ne = {in, out}).
 * `data` (nbytes = weir_gguf_tensor_bytes) is borrowed, or NULL for a streamed tensor.
 * Returns the tensor's index (>= 0) or a negative status. */
int weir_gguf_add_tensor(weir_gguf_writer *w, const char *name, weir_dtype dtype, int ndim,
                         const int64_t *ne, const void *data);

/* Writes the whole file; every tensor must have data. */
int weir_gguf_write_file(weir_gguf_writer *w, const char *path, char *err, size_t errlen);

/* Streamed writing. */
int weir_gguf_writer_begin(weir_gguf_writer *w, const char *path, char *err, size_t errlen);
int weir_gguf_writer_put(weir_gguf_writer *w, const void *bytes, size_t len);
/* Flushes and closes; WEIR_E_INVAL when fewer or more tensor bytes were put than declared. */
int weir_gguf_writer_end(weir_gguf_writer *w, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
