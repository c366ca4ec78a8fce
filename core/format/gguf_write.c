/* GGUF writer. Metadata is encoded into one growing buffer as it is added, so writing the
 * header is a single copy; tensor data is streamed after it. */
#include "format/gguf_write.h"
#include "util/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/status.h"

typedef struct wtensor {
  char *name;
  weir_dtype dtype;
  int ndim;
  int64_t ne[WEIR_MAX_DIMS];
  const void *data;
  uint64_t nbytes, offset;
} wtensor;

struct weir_gguf_writer {
  uint8_t *meta;
  size_t meta_len, meta_cap;
  uint64_t n_kv;
  char **keys;
  size_t n_keys_cap;
  wtensor *tensors;
  int64_t n_tensors, cap_tensors;
  uint32_t alignment;
  /* streaming state */
  FILE *f;
  char *path;
  int64_t cur;       /* tensor being streamed */
  uint64_t cur_done; /* bytes of it already put */
  uint64_t pos;      /* bytes written to the file */
  int failed;
};


int weir_gguf_writer_new(weir_gguf_writer **out) {
  if (!out) return WEIR_E_INVAL;
  *out = calloc(1, sizeof **out);
  if (!*out) return WEIR_E_NOMEM;
  (*out)->alignment = WEIR_GGUF_DEFAULT_ALIGNMENT;
  return 0;
}

void weir_gguf_writer_free(weir_gguf_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
  for (int64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
  free(w->keys);
  free(w->tensors);
  free(w->meta);
  free(w->path);
  free(w);
}


static int meta_put(weir_gguf_writer *w, const void *p, size_t n) {
  if (w->meta_len + n > w->meta_cap) {
    size_t cap = w->meta_cap ? w->meta_cap : 4096;
    while (cap < w->meta_len + n) cap *= 2;
    uint8_t *m = realloc(w->meta, cap);
    if (!m) return WEIR_E_NOMEM;
    w->meta = m;
    w->meta_cap = cap;
  }
  memcpy(w->meta + w->meta_len, p, n);
  w->meta_len += n;
  return 0;
}

/* GGUF is little-endian; weir only builds on little-endian hosts, so host order is file
 * order and values are copied as they are. */
static int meta_u32(weir_gguf_writer *w, uint32_t v) { return meta_put(w, &v, 4); }
static int meta_u64(weir_gguf_writer *w, uint64_t v) { return meta_put(w, &v, 8); }
static int meta_str(weir_gguf_writer *w, const char *s, size_t n) {
  int rc = meta_u64(w, n);
  return rc ? rc : meta_put(w, s, n);
}

/* Starts a key/value: checks the name is new, records it and writes key and type. */
static int kv_begin(weir_gguf_writer *w, const char *key, uint32_t type) {
  if (!w || !key || !*key || w->f) return WEIR_E_INVAL;
  for (uint64_t i = 0; i < w->n_kv; i++)
    if (strcmp(w->keys[i], key) == 0) return WEIR_E_EXISTS;
  if (w->n_kv == w->n_keys_cap) {
    size_t cap = w->n_keys_cap ? w->n_keys_cap * 2 : 32;
    char **k = realloc(w->keys, cap * sizeof *k);
    if (!k) return WEIR_E_NOMEM;
    w->keys = k;
    w->n_keys_cap = cap;
  }
  char *copy = strdup(key);
  if (!copy) return WEIR_E_NOMEM;
  int rc = meta_str(w, key, strlen(key));
  if (!rc) rc = meta_u32(w, type);
  if (rc) {
    free(copy);
    return rc;
  }
  w->keys[w->n_kv++] = copy;
  return 0;
}

static int add_scalar(weir_gguf_writer *w, const char *key, uint32_t type, const void *v,
                      size_t n) {
  size_t mark = w ? w->meta_len : 0;
  int rc = kv_begin(w, key, type);
  if (rc) return rc;
  rc = meta_put(w, v, n);
  if (rc) { /* roll back so a failed add leaves the writer as it was */
    w->meta_len = mark;
    free(w->keys[--w->n_kv]);
  }
  return rc;
}

/* One adder per scalar type; each copies the value's bytes after the key and type. */
#define WEIR_GGUF_ADDER(suffix, ctype, tag)                                         \
  int weir_gguf_add_##suffix(weir_gguf_writer *w, const char *key, ctype v) {       \
    return add_scalar(w, key, tag, &v, sizeof v);                                   \
  }
WEIR_GGUF_ADDER(u8, uint8_t, WEIR_GGUF_U8)
WEIR_GGUF_ADDER(i8, int8_t, WEIR_GGUF_I8)
WEIR_GGUF_ADDER(u16, uint16_t, WEIR_GGUF_U16)
WEIR_GGUF_ADDER(i16, int16_t, WEIR_GGUF_I16)
WEIR_GGUF_ADDER(u32, uint32_t, WEIR_GGUF_U32)
WEIR_GGUF_ADDER(i32, int32_t, WEIR_GGUF_I32)
WEIR_GGUF_ADDER(u64, uint64_t, WEIR_GGUF_U64)
WEIR_GGUF_ADDER(i64, int64_t, WEIR_GGUF_I64)
WEIR_GGUF_ADDER(f32, float, WEIR_GGUF_F32)
WEIR_GGUF_ADDER(f64, double, WEIR_GGUF_F64)
#undef WEIR_GGUF_ADDER

int weir_gguf_add_bool(weir_gguf_writer *w, const char *k, int v) {
  uint8_t b = v != 0;
  return add_scalar(w, k, WEIR_GGUF_BOOL, &b, 1);
}

int weir_gguf_add_strn(weir_gguf_writer *w, const char *key, const char *v, size_t len) {
  if (!v && len) return WEIR_E_INVAL;
  size_t mark = w ? w->meta_len : 0;
  int rc = kv_begin(w, key, WEIR_GGUF_STRING);
  if (rc) return rc;
  if ((rc = meta_str(w, v ? v : "", len))) {
    w->meta_len = mark;
    free(w->keys[--w->n_kv]);
  }
  return rc;
}
int weir_gguf_add_str(weir_gguf_writer *w, const char *key, const char *v) {
  if (!v) return WEIR_E_INVAL;
  return weir_gguf_add_strn(w, key, v, strlen(v));
}

int weir_gguf_add_arr(weir_gguf_writer *w, const char *key, weir_gguf_type elem_type,
                      const void *elems, uint64_t n) {
  size_t es = weir_gguf_scalar_size(elem_type);
  if (!es || (!elems && n)) return WEIR_E_INVAL;
  size_t mark = w ? w->meta_len : 0;
  int rc = kv_begin(w, key, WEIR_GGUF_ARRAY);
  if (rc) return rc;
  if (!(rc = meta_u32(w, elem_type)) && !(rc = meta_u64(w, n)) && n)
    rc = meta_put(w, elems, (size_t)n * es);
  if (rc) {
    w->meta_len = mark;
    free(w->keys[--w->n_kv]);
  }
  return rc;
}

int weir_gguf_add_arr_str(weir_gguf_writer *w, const char *key, const char *const *strs,
                          const size_t *lens, uint64_t n) {
  if (!strs && n) return WEIR_E_INVAL;
  for (uint64_t i = 0; i < n; i++)
    if (!strs[i]) return WEIR_E_INVAL;
  size_t mark = w ? w->meta_len : 0;
  int rc = kv_begin(w, key, WEIR_GGUF_ARRAY);
  if (rc) return rc;
  if (!(rc = meta_u32(w, WEIR_GGUF_STRING))) rc = meta_u64(w, n);
  for (uint64_t i = 0; i < n && !rc; i++)
    rc = meta_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
  if (rc) {
    w->meta_len = mark;
    free(w->keys[--w->n_kv]);
  }
  return rc;
}

int weir_gguf_add_raw(weir_gguf_writer *w, const char *key, uint32_t type, const void *value,
                      size_t len) {
  if (!value && len) return WEIR_E_INVAL;
  size_t mark = w ? w->meta_len : 0;
  int rc = kv_begin(w, key, type);
  if (rc) return rc;
  if (len && (rc = meta_put(w, value, len))) {
    w->meta_len = mark;
    free(w->keys[--w->n_kv]);
  }
  return rc;
}

int weir_gguf_writer_set_alignment(weir_gguf_writer *w, uint32_t alignment) {
  if (!w || alignment == 0 || (alignment & (alignment - 1)) || w->f) return WEIR_E_INVAL;
  int rc = weir_gguf_add_u32(w, "general.alignment", alignment);
  if (rc == 0) w->alignment = alignment;
  return rc;
}

int weir_gguf_add_tensor(weir_gguf_writer *w, const char *name, weir_dtype dtype, int ndim,
                         const int64_t *ne, const void *data) {
  if (!w || !name || !*name || w->f) return WEIR_E_INVAL;
  uint64_t nbytes = weir_gguf_tensor_bytes(dtype, ndim, ne);
  if (nbytes == 0) return WEIR_E_INVAL;
  for (int64_t i = 0; i < w->n_tensors; i++)
    if (strcmp(w->tensors[i].name, name) == 0) return WEIR_E_EXISTS;
  if (w->n_tensors == w->cap_tensors) {
    int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
    wtensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
    if (!t) return WEIR_E_NOMEM;
    w->tensors = t;
    w->cap_tensors = cap;
  }
  wtensor *t = &w->tensors[w->n_tensors];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(name))) return WEIR_E_NOMEM;
  t->dtype = dtype;
  t->ndim = ndim;
  for (int d = 0; d < WEIR_MAX_DIMS; d++) t->ne[d] = d < ndim ? ne[d] : 1;
  t->data = data;
  t->nbytes = nbytes;
  return (int)w->n_tensors++;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int fwrite_all(weir_gguf_writer *w, const void *p, size_t n) {
  if (n && fwrite(p, 1, n, w->f) != n) {
    w->failed = 1;
    return WEIR_E_IO;
  }
  w->pos += n;
  return 0;
}

static int write_zeros(weir_gguf_writer *w, uint64_t n) {
  static const uint8_t zeros[256];
  while (n) {
    size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
    int rc = fwrite_all(w, zeros, k);
    if (rc) return rc;
    n -= k;
  }
  return 0;
}

int weir_gguf_writer_begin(weir_gguf_writer *w, const char *path, char *err, size_t errlen) {
  int rc = 0;
  if (!w || !path || w->f) return WEIR_E_INVAL;
  free(w->path);
  if (!(w->path = strdup(path))) return WEIR_E_NOMEM;
  uint64_t off = 0;
  for (int64_t i = 0; i < w->n_tensors; i++) {
    w->tensors[i].offset = off;
    off = align_up(off + w->tensors[i].nbytes, w->alignment);
  }
  w->f = fopen(path, "wb");
  if (!w->f) {
    weir_set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    return WEIR_E_IO;
  }
  setvbuf(w->f, NULL, _IOFBF, 1 << 20);
  w->pos = 0;
  w->failed = 0;
  uint32_t hdr32[2] = {WEIR_GGUF_MAGIC, 3}; /* GGUF v3 */
  uint64_t hdr64[2] = {(uint64_t)w->n_tensors, w->n_kv};
  if ((rc = fwrite_all(w, hdr32, sizeof hdr32)) || (rc = fwrite_all(w, hdr64, sizeof hdr64)) ||
      (rc = fwrite_all(w, w->meta, w->meta_len)))
    goto io_error;
  for (int64_t i = 0; i < w->n_tensors; i++) {
    const wtensor *t = &w->tensors[i];
    uint64_t len = strlen(t->name), ne;
    uint32_t nd = (uint32_t)t->ndim, ty = (uint32_t)t->dtype;
    if ((rc = fwrite_all(w, &len, 8)) || (rc = fwrite_all(w, t->name, len)) ||
        (rc = fwrite_all(w, &nd, 4)))
      goto io_error;
    for (int d = 0; d < t->ndim; d++) {
      ne = (uint64_t)t->ne[d];
      if ((rc = fwrite_all(w, &ne, 8))) goto io_error;
    }
    if ((rc = fwrite_all(w, &ty, 4)) || (rc = fwrite_all(w, &t->offset, 8))) goto io_error;
  }
  if ((rc = write_zeros(w, align_up(w->pos, w->alignment) - w->pos))) goto io_error;
  w->cur = 0;
  w->cur_done = 0;
  return 0;
io_error:
  weir_set_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
  return rc;
}

int weir_gguf_writer_put(weir_gguf_writer *w, const void *bytes, size_t len) {
  const uint8_t *p = bytes;
  if (!w || !w->f || (!bytes && len)) return WEIR_E_INVAL;
  while (len) {
    if (w->cur >= w->n_tensors) return WEIR_E_INVAL; /* more bytes than declared */
    wtensor *t = &w->tensors[w->cur];
    uint64_t room = t->nbytes - w->cur_done;
    size_t k = len < room ? len : (size_t)room;
    int rc = fwrite_all(w, p, k);
    if (rc) return rc;
    p += k;
    len -= k;
    w->cur_done += k;
    if (w->cur_done == t->nbytes) {
      /* Pad to the next tensor's offset; the last tensor is padded too, as ggml does. */
      uint64_t end = align_up(t->offset + t->nbytes, w->alignment);
      if ((rc = write_zeros(w, end - (t->offset + t->nbytes)))) return rc;
      w->cur++;
      w->cur_done = 0;
    }
  }
  return 0;
}

int weir_gguf_writer_end(weir_gguf_writer *w, char *err, size_t errlen) {
  int rc = 0;
  if (!w || !w->f) return WEIR_E_INVAL;
  if (w->cur != w->n_tensors) {
    weir_set_err(err, errlen, "%s: only %lld of %lld tensors were written", w->path,
            (long long)w->cur, (long long)w->n_tensors);
    rc = WEIR_E_INVAL;
  }
  if (fclose(w->f) != 0 || w->failed) {
    if (!rc) weir_set_err(err, errlen, "%s: write failed: %s", w->path, strerror(errno));
    rc = rc ? rc : WEIR_E_IO;
  }
  w->f = NULL;
  return rc;
}

int weir_gguf_write_file(weir_gguf_writer *w, const char *path, char *err, size_t errlen) {
  if (!w) return WEIR_E_INVAL;
  for (int64_t i = 0; i < w->n_tensors; i++)
    if (!w->tensors[i].data) {
      weir_set_err(err, errlen, "%s: tensor '%s' has no data", path, w->tensors[i].name);
      return WEIR_E_INVAL;
    }
  int rc = weir_gguf_writer_begin(w, path, err, errlen);
  for (int64_t i = 0; i < w->n_tensors && !rc; i++)
    rc = weir_gguf_writer_put(w, w->tensors[i].data, (size_t)w->tensors[i].nbytes);
  if (rc && w->f) {
    weir_set_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
    fclose(w->f);
    w->f = NULL;
    return rc;
  }
  return rc ? rc : weir_gguf_writer_end(w, err, errlen);
}
