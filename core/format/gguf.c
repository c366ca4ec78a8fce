/* GGUF reader: maps the file, validates every byte range once at open, then hands out views.
 * Layout (little-endian): magic u32, version u32, n_tensors u64, n_kv u64, n_kv key/values
 * (string key, u32 type, value), n_tensors infos (string name, u32 n_dims, u64 ne[n_dims],
 * u32 type, u64 offset), padding to the alignment, then the data section. */
#include "format/gguf.h"
#include "util/err.h"
#include "weir/numeric.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weir/status.h"

/* Nesting deeper than this is refused: no real file nests arrays, and the parser recurses. */
#define GGUF_MAX_ARRAY_DEPTH 8
#define GGUF_MAX_NAME 1024

struct weir_gguf {
  char *path;
  const uint8_t *base;
  uint64_t size;
  int mapped; /* 1: base is our mmap */
  uint32_t version;
  uint32_t alignment;
  uint64_t data_offset;
  int64_t n_kv;
  weir_gguf_kv *kvs;
  int64_t n_tensors;
  weir_gguf_tensor *tensors;
  /* Open-addressing hash tables of indices + 1 (0 = empty), sized a power of two. */
  uint32_t *kv_index;
  uint64_t kv_index_mask;
  uint32_t *tensor_index;
  uint64_t tensor_index_mask;
  uint64_t **str_offs; /* one allocation per top-level string array, freed at close */
  int64_t n_str_offs;
};

typedef struct cursor {
  const uint8_t *base;
  uint64_t pos, size;
  const char *path;
  char *err;
  size_t errlen;
} cursor;


/* Errors from the parser all read "<path>: <what> (at byte N)". */
static int cfail(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cfail(cursor *c, const char *fmt, ...) {
  if (!c->err || c->errlen == 0) return WEIR_E_FORMAT;
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(c->err, c->errlen, "%s: %s (at byte %llu of %llu)", c->path, what,
           (unsigned long long)c->pos, (unsigned long long)c->size);
  return WEIR_E_FORMAT;
}

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, uint64_t n, const char *what) {
  if (remaining(c) < n)
    return cfail(c, "file truncated: %s needs %llu bytes, only %llu left", what,
                 (unsigned long long)n, (unsigned long long)remaining(c));
  return 0;
}

static uint32_t rd_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd_u64(const uint8_t *p) {
  return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32;
}

static int get_u32(cursor *c, uint32_t *v, const char *what) {
  int rc = need(c, 4, what);
  if (rc) return rc;
  *v = rd_u32(c->base + c->pos);
  c->pos += 4;
  return 0;
}
static int get_u64(cursor *c, uint64_t *v, const char *what) {
  int rc = need(c, 8, what);
  if (rc) return rc;
  *v = rd_u64(c->base + c->pos);
  c->pos += 8;
  return 0;
}

/* Reads a length-prefixed string, checking the length against what is left of the file. */
static int get_str(cursor *c, weir_gguf_str *s, const char *what) {
  uint64_t len;
  int rc = get_u64(c, &len, what);
  if (rc) return rc;
  if (len > remaining(c))
    return cfail(c, "%s: string length %llu runs past the end of the file (%llu bytes left)",
                 what, (unsigned long long)len, (unsigned long long)remaining(c));
  s->ptr = (const char *)c->base + c->pos;
  s->len = len;
  c->pos += len;
  return 0;
}

size_t weir_gguf_scalar_size(weir_gguf_type t) {
  switch (t) {
  case WEIR_GGUF_U8: case WEIR_GGUF_I8: case WEIR_GGUF_BOOL: return 1;
  case WEIR_GGUF_U16: case WEIR_GGUF_I16: return 2;
  case WEIR_GGUF_U32: case WEIR_GGUF_I32: case WEIR_GGUF_F32: return 4;
  case WEIR_GGUF_U64: case WEIR_GGUF_I64: case WEIR_GGUF_F64: return 8;
  default: return 0;
  }
}

const char *weir_gguf_type_name(weir_gguf_type t) {
  static const char *const names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  if ((unsigned)t >= WEIR_GGUF_TYPE_COUNT_) return "?";
  return names[t];
}

/* Parses one value of type t at the cursor. For arrays fills *arr; string offsets of a
 * top-level string array are indexed into g->str_offs so element access is O(1). */
static int parse_value(weir_gguf *g, cursor *c, uint32_t t, int depth, weir_gguf_arr *arr,
                       const char *key) {
  size_t sz = weir_gguf_scalar_size((weir_gguf_type)t);
  int rc;
  if (sz) {
    if ((rc = need(c, sz, key))) return rc;
    if (t == WEIR_GGUF_BOOL && c->base[c->pos] > 1)
      return cfail(c, "key '%s': bool value %u is neither 0 nor 1", key, c->base[c->pos]);
    c->pos += sz;
    return 0;
  }
  if (t == WEIR_GGUF_STRING) {
    weir_gguf_str s;
    return get_str(c, &s, key);
  }
  if (t != WEIR_GGUF_ARRAY) return cfail(c, "key '%s': unknown value type %u", key, t);
  if (depth >= GGUF_MAX_ARRAY_DEPTH)
    return cfail(c, "key '%s': arrays nested deeper than %d", key, GGUF_MAX_ARRAY_DEPTH);
  uint32_t et;
  uint64_t n;
  if ((rc = get_u32(c, &et, key))) return rc;
  if ((rc = get_u64(c, &n, key))) return rc;
  if (et >= WEIR_GGUF_TYPE_COUNT_)
    return cfail(c, "key '%s': unknown array element type %u", key, et);
  weir_gguf_arr a = {.elem_type = (weir_gguf_type)et, .n = n, .data = c->base + c->pos};
  size_t esz = weir_gguf_scalar_size((weir_gguf_type)et);
  if (esz) {
    if (n > remaining(c) / esz)
      return cfail(c, "key '%s': array of %llu %s elements does not fit in the file", key,
                   (unsigned long long)n, weir_gguf_type_name((weir_gguf_type)et));
    if (et == WEIR_GGUF_BOOL) {
      for (uint64_t i = 0; i < n; i++)
        if (c->base[c->pos + i] > 1)
          return cfail(c, "key '%s': bool element %llu is neither 0 nor 1", key,
                       (unsigned long long)i);
    }
    c->pos += n * esz;
  } else if (et == WEIR_GGUF_STRING) {
    if (n > remaining(c) / 8)
      return cfail(c, "key '%s': array of %llu strings does not fit in the file", key,
                   (unsigned long long)n);
    uint64_t *offs = NULL;
    if (depth == 0 && n > 0) {
      offs = malloc(n * sizeof *offs);
      if (!offs) return WEIR_E_NOMEM;
      uint64_t **grown = realloc(g->str_offs, (size_t)(g->n_str_offs + 1) * sizeof *grown);
      if (!grown) {
        free(offs);
        return WEIR_E_NOMEM;
      }
      g->str_offs = grown;
      g->str_offs[g->n_str_offs++] = offs;
    }
    for (uint64_t i = 0; i < n; i++) {
      if (offs) offs[i] = (uint64_t)(c->base + c->pos - a.data);
      weir_gguf_str s;
      if ((rc = get_str(c, &s, key))) return rc;
    }
    a.str_offs = offs;
  } else { /* arrays of arrays: each element at least a type and a count */
    if (n > remaining(c) / 12)
      return cfail(c, "key '%s': array of %llu arrays does not fit in the file", key,
                   (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
      weir_gguf_arr sub;
      if ((rc = parse_value(g, c, WEIR_GGUF_ARRAY, depth + 1, &sub, key))) return rc;
    }
  }
  a.end = c->base + c->pos;
  if (arr) *arr = a;
  return 0;
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static uint64_t table_size(int64_t n) {
  uint64_t sz = 16;
  while (sz < (uint64_t)n * 2) sz <<= 1;
  return sz;
}

/* Inserts index i under name; returns the index already holding the name, or -1. */
static int64_t table_insert(uint32_t *tab, uint64_t mask, const char *name, int64_t i,
                            const char *(*name_of)(const weir_gguf *, int64_t),
                            const weir_gguf *g) {
  for (uint64_t h = hash_name(name) & mask;; h = (h + 1) & mask) {
    if (tab[h] == 0) {
      tab[h] = (uint32_t)(i + 1);
      return -1;
    }
    if (strcmp(name_of(g, tab[h] - 1), name) == 0) return tab[h] - 1;
  }
}

static int64_t table_find(const uint32_t *tab, uint64_t mask, const char *name,
                          const char *(*name_of)(const weir_gguf *, int64_t),
                          const weir_gguf *g) {
  if (!tab) return -1;
  for (uint64_t h = hash_name(name) & mask;; h = (h + 1) & mask) {
    if (tab[h] == 0) return -1;
    if (strcmp(name_of(g, tab[h] - 1), name) == 0) return tab[h] - 1;
  }
}

static const char *kv_name(const weir_gguf *g, int64_t i) { return g->kvs[i].key; }
static const char *tensor_name(const weir_gguf *g, int64_t i) { return g->tensors[i].name; }

static int copy_name(cursor *c, weir_gguf_str s, const char *what, char **out) {
  if (s.len == 0) return cfail(c, "%s is empty", what);
  if (s.len > GGUF_MAX_NAME)
    return cfail(c, "%s is %llu bytes long (limit %d)", what, (unsigned long long)s.len,
                 GGUF_MAX_NAME);
  if (memchr(s.ptr, 0, s.len)) return cfail(c, "%s contains a NUL byte", what);
  char *n = malloc(s.len + 1);
  if (!n) return WEIR_E_NOMEM;
  memcpy(n, s.ptr, s.len);
  n[s.len] = 0;
  *out = n;
  return 0;
}

static const char *ggml_type_label(uint32_t t) {
  /* Names of ggml types weir does not read, so the error says what the file holds. */
  switch (t) {
  case 6: return "q5_0"; case 7: return "q5_1"; case 9: return "q8_1";
  case 10: return "q2_K"; case 11: return "q3_K"; case 12: return "q4_K";
  case 13: return "q5_K"; case 14: return "q6_K"; case 15: return "q8_K";
  case 16: return "iq2_xxs"; case 17: return "iq2_xs"; case 18: return "iq3_xxs";
  case 19: return "iq1_s"; case 20: return "iq4_nl"; case 21: return "iq3_s";
  case 22: return "iq2_s"; case 23: return "iq4_xs"; case 29: return "iq1_m";
  default: return "unknown";
  }
}

static bool dtype_readable(uint32_t t) {
  switch (t) {
  case WEIR_DTYPE_F32: case WEIR_DTYPE_F16: case WEIR_DTYPE_BF16: case WEIR_DTYPE_Q4_0:
  case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q8_0: case WEIR_DTYPE_Q5_0: case WEIR_DTYPE_Q5_1:
  case WEIR_DTYPE_Q2_K: case WEIR_DTYPE_Q3_K: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
  case WEIR_DTYPE_Q6_K: case WEIR_DTYPE_IQ4_NL: case WEIR_DTYPE_IQ4_XS: case WEIR_DTYPE_I8:
  case WEIR_DTYPE_I16: case WEIR_DTYPE_I32: case WEIR_DTYPE_I64: case WEIR_DTYPE_F64:
    return true;
  default:
    return false;
  }
}

/* The weight types, for messages that say what weir reads. */
#define WEIR_GGUF_WEIGHT_TYPES                                                                 \
  "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs"

static int cmp_by_offset(const void *a, const void *b) {
  const weir_gguf_tensor *x = *(weir_gguf_tensor *const *)a, *y = *(weir_gguf_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return x < y ? -1 : x > y; /* file order among equals, for a stable message */
}

/* The one place a GGUF tensor's size is computed, for the reader and the writer: the dtype's
 * row bytes (weir/tensor.h) times the rows, overflow-checked so a huge shape cannot wrap to a
 * small size. */
uint64_t weir_gguf_tensor_bytes(weir_dtype dtype, int ndim, const int64_t *ne) {
  if (ndim < 1 || ndim > WEIR_MAX_DIMS || !ne) return 0;
  size_t row = weir_dtype_row_bytes(dtype, ne[0]);
  if (row == 0 || ne[0] <= 0) return 0;
  uint64_t total = row;
  for (int d = 1; d < ndim; d++) {
    if (ne[d] <= 0 || __builtin_mul_overflow(total, (uint64_t)ne[d], &total)) return 0;
  }
  return total;
}

static int parse(weir_gguf *g, char *err, size_t errlen) {
  cursor c = {.base = g->base, .size = g->size, .path = g->path, .err = err, .errlen = errlen};
  uint32_t magic;
  uint64_t n_tensors, n_kv;
  int rc;
  if (g->size < 4) return cfail(&c, "file truncated: %llu bytes is too short for a GGUF header",
                                (unsigned long long)g->size);
  magic = rd_u32(g->base);
  if (magic != WEIR_GGUF_MAGIC)
    return cfail(&c, "bad magic 0x%08x: not a GGUF file (expected \"GGUF\")", magic);
  c.pos = 4;
  if ((rc = get_u32(&c, &g->version, "the version"))) return rc;
  if (g->version != 3 && g->version != 2) {
    c.pos = 4;
    cfail(&c, "unsupported GGUF version %u (weir reads versions 2 and 3)", g->version);
    return g->version == 1 ? WEIR_E_NOTSUP : WEIR_E_FORMAT;
  }
  if ((rc = get_u64(&c, &n_tensors, "the tensor count"))) return rc;
  if ((rc = get_u64(&c, &n_kv, "the metadata count"))) return rc;
  /* A key/value takes at least 13 bytes (length, type, one byte), a tensor info at least 32:
   * a count beyond that cannot be honest and must not drive an allocation. */
  if (n_kv > remaining(&c) / 13) {
    c.pos = 16;
    return cfail(&c, "metadata count %llu cannot fit in the file", (unsigned long long)n_kv);
  }
  if (n_tensors > remaining(&c) / 32 || n_tensors > INT32_MAX) {
    c.pos = 8;
    return cfail(&c, "tensor count %llu cannot fit in the file",
                 (unsigned long long)n_tensors);
  }
  g->n_kv = (int64_t)n_kv;
  g->n_tensors = (int64_t)n_tensors;
  g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
  g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
  g->kv_index_mask = table_size(g->n_kv) - 1;
  g->tensor_index_mask = table_size(g->n_tensors) - 1;
  g->kv_index = calloc(g->kv_index_mask + 1, sizeof *g->kv_index);
  g->tensor_index = calloc(g->tensor_index_mask + 1, sizeof *g->tensor_index);
  if (!g->kvs || !g->tensors || !g->kv_index || !g->tensor_index) return WEIR_E_NOMEM;

  g->alignment = WEIR_GGUF_DEFAULT_ALIGNMENT;
  for (int64_t i = 0; i < g->n_kv; i++) {
    weir_gguf_kv *kv = &g->kvs[i];
    weir_gguf_str key;
    uint32_t t;
    uint64_t key_pos = c.pos;
    if ((rc = get_str(&c, &key, "a metadata key"))) return rc;
    if ((rc = copy_name(&c, key, "a metadata key", (char **)&kv->key))) return rc;
    if ((rc = get_u32(&c, &t, kv->key))) return rc;
    if (t >= WEIR_GGUF_TYPE_COUNT_) {
      c.pos -= 4;
      return cfail(&c, "key '%s': unknown value type %u", kv->key, t);
    }
    kv->type = (weir_gguf_type)t;
    kv->value = c.base + c.pos;
    if ((rc = parse_value(g, &c, t, 0, &kv->arr, kv->key))) return rc;
    int64_t dup = table_insert(g->kv_index, g->kv_index_mask, kv->key, i, kv_name, g);
    if (dup >= 0) {
      c.pos = key_pos;
      return cfail(&c, "duplicate metadata key '%s'", kv->key);
    }
    if (strcmp(kv->key, "general.alignment") == 0) {
      uint64_t a;
      if (weir_gguf_kv_u64(kv, &a) != 0 || a == 0 || (a & (a - 1)) != 0 || a > (1u << 30)) {
        c.pos = key_pos;
        return cfail(&c, "general.alignment must be a power of two integer up to 2^30");
      }
      g->alignment = (uint32_t)a;
    }
  }

  for (int64_t i = 0; i < g->n_tensors; i++) {
    weir_gguf_tensor *ti = &g->tensors[i];
    weir_gguf_str name;
    uint32_t nd, type;
    uint64_t info_pos = c.pos;
    if ((rc = get_str(&c, &name, "a tensor name"))) return rc;
    if ((rc = copy_name(&c, name, "a tensor name", (char **)&ti->name))) return rc;
    if ((rc = get_u32(&c, &nd, ti->name))) return rc;
    if (nd < 1 || nd > WEIR_MAX_DIMS) {
      c.pos -= 4;
      return cfail(&c, "tensor '%s' has %u dimensions (weir reads 1 to %d)", ti->name, nd,
                   WEIR_MAX_DIMS);
    }
    ti->t.ndim = (int32_t)nd;
    int64_t nel = 1;
    for (int d = 0; d < WEIR_MAX_DIMS; d++) ti->t.ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
      uint64_t ne;
      if ((rc = get_u64(&c, &ne, ti->name))) return rc;
      if (ne == 0 || ne > (uint64_t)INT64_MAX) {
        c.pos -= 8;
        return cfail(&c, "tensor '%s': dimension %u is %llu (must be 1 to 2^63-1)", ti->name,
                     d, (unsigned long long)ne);
      }
      if (__builtin_mul_overflow(nel, (int64_t)ne, &nel)) {
        c.pos -= 8;
        return cfail(&c, "tensor '%s': the element count overflows 64 bits", ti->name);
      }
      ti->t.ne[d] = (int64_t)ne;
    }
    ti->nelements = nel;
    if ((rc = get_u32(&c, &type, ti->name))) return rc;
    if (!dtype_readable(type)) {
      c.pos -= 4;
      return cfail(&c, "tensor '%s' has type %u (%s), which weir does not read (weights: "
                       WEIR_GGUF_WEIGHT_TYPES ")", ti->name, type, ggml_type_label(type));
    }
    ti->t.dtype = (weir_dtype)type;
    int64_t be = weir_dtype_block_elems(ti->t.dtype);
    if (ti->t.ne[0] % be != 0) {
      c.pos -= 4;
      return cfail(&c, "tensor '%s': row of %lld elements is not a multiple of the %s block "
                       "of %lld", ti->name, (long long)ti->t.ne[0],
                   weir_dtype_name(ti->t.dtype), (long long)be);
    }
    uint64_t bytes = weir_gguf_tensor_bytes(ti->t.dtype, ti->t.ndim, ti->t.ne);
    if (bytes == 0) {
      c.pos -= 4;
      return cfail(&c, "tensor '%s': the byte size overflows 64 bits", ti->name);
    }
    ti->nbytes = bytes;
    ti->t.nb[0] = weir_dtype_block_bytes(ti->t.dtype);
    ti->t.nb[1] = weir_dtype_row_bytes(ti->t.dtype, ti->t.ne[0]);
    for (int d = 2; d < WEIR_MAX_DIMS; d++)
      ti->t.nb[d] = ti->t.nb[d - 1] * (size_t)ti->t.ne[d - 1];
    if ((rc = get_u64(&c, &ti->offset, ti->name))) return rc;
    if (ti->offset % g->alignment != 0) {
      c.pos -= 8;
      return cfail(&c, "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                   ti->name, (unsigned long long)ti->offset, g->alignment);
    }
    int64_t dup = table_insert(g->tensor_index, g->tensor_index_mask, ti->name, i,
                               tensor_name, g);
    if (dup >= 0) {
      c.pos = info_pos;
      return cfail(&c, "duplicate tensor name '%s'", ti->name);
    }
  }

  uint64_t end_of_infos = c.pos;
  g->data_offset = (end_of_infos + g->alignment - 1) / g->alignment * g->alignment;
  if (g->n_tensors > 0 && g->data_offset > g->size) {
    c.pos = g->size;
    return cfail(&c, "file truncated: the data section would start at byte %llu",
                 (unsigned long long)g->data_offset);
  }
  uint64_t data_size = g->data_offset <= g->size ? g->size - g->data_offset : 0;
  for (int64_t i = 0; i < g->n_tensors; i++) {
    weir_gguf_tensor *ti = &g->tensors[i];
    if (ti->offset > data_size || ti->nbytes > data_size - ti->offset) {
      c.pos = g->size;
      return cfail(&c, "tensor '%s': data [%llu, +%llu) lies beyond the end of the file "
                       "(data section holds %llu bytes): file truncated or offset corrupt",
                   ti->name, (unsigned long long)ti->offset, (unsigned long long)ti->nbytes,
                   (unsigned long long)data_size);
    }
    ti->t.data = (void *)(g->base + g->data_offset + ti->offset);
  }
  /* Overlapping tensors mean a corrupt info table; check neighbours in offset order. */
  if (g->n_tensors > 1) {
    weir_gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return WEIR_E_NOMEM;
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
    for (int64_t i = 1; i < g->n_tensors; i++) {
      if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset) {
        c.pos = g->data_offset + order[i]->offset;
        rc = cfail(&c, "tensors '%s' and '%s' overlap", order[i - 1]->name, order[i]->name);
        free(order);
        return rc;
      }
    }
    free(order);
  }
  return 0;
}

static void free_handle(weir_gguf *g) {
  if (!g) return;
  if (g->kvs)
    for (int64_t i = 0; i < g->n_kv; i++) free((char *)g->kvs[i].key);
  if (g->tensors)
    for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
  for (int64_t i = 0; i < g->n_str_offs; i++) free(g->str_offs[i]);
  free(g->str_offs);
  free(g->kvs);
  free(g->tensors);
  free(g->kv_index);
  free(g->tensor_index);
  if (g->mapped && g->base) munmap((void *)g->base, g->size);
  free(g->path);
  free(g);
}

static int open_common(weir_gguf *g, weir_gguf **out, char *err, size_t errlen) {
  int rc = parse(g, err, errlen);
  if (rc == WEIR_E_NOMEM) weir_set_err(err, errlen, "%s: out of memory while reading", g->path);
  if (rc) {
    free_handle(g);
    return rc;
  }
  *out = g;
  return 0;
}

/* Whether `path` ends with `suffix`, ignoring case. */
static int ends_with(const char *path, const char *suffix) {
  size_t n = strlen(path), m = strlen(suffix);
  return n >= m && !strcasecmp(path + n - m, suffix);
}

/* Whether DIR/name exists. */
static int dir_has(const char *dir, const char *name) {
  char p[4096];
  struct stat st;
  if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, name) >= sizeof p) return 0;
  return stat(p, &st) == 0;
}

#define HOW_TO_GET_GGUF                                                                      \
  "weir reads one GGUF file (weights, tokenizer and chat template together). Convert a "  \
  "Hugging Face model directory with llama.cpp's converter (python convert_hf_to_gguf.py " \
  "MODEL_DIR --outfile model.gguf --outtype f16), or download the model's .gguf release; "  \
  "see docs/models.md"

/* The error for a path that is not a GGUF file: a directory (`is_dir`) or a file whose first
 * `n` bytes `head` do not start with the magic. Names what it looks like (a Hugging Face
 * directory, a safetensors or PyTorch checkpoint) and how to get a GGUF. WEIR_E_FORMAT. */
static int not_gguf(const char *path, const unsigned char *head, size_t n, int is_dir,
                    char *err, size_t errlen) {
  if (is_dir) {
    if (dir_has(path, "config.json") || dir_has(path, "model.safetensors") ||
        dir_has(path, "model.safetensors.index.json"))
      weir_set_err(err, errlen, "%s: a Hugging Face model directory, not a GGUF file. "
                   HOW_TO_GET_GGUF, path);
    else
      weir_set_err(err, errlen, "%s: a directory, not a GGUF file. " HOW_TO_GET_GGUF, path);
    return WEIR_E_FORMAT;
  }
  /* safetensors: a u64 header length, then the JSON header's '{'. */
  if (ends_with(path, ".safetensors") || (n >= 9 && head[8] == '{' && !head[6] && !head[7]))
    weir_set_err(err, errlen, "%s: a safetensors file, not a GGUF file. " HOW_TO_GET_GGUF,
                 path);
  else if (n >= 4 && !memcmp(head, "PK\x03\x04", 4))
    weir_set_err(err, errlen, "%s: a zip archive (a PyTorch checkpoint?), not a GGUF file. "
                 HOW_TO_GET_GGUF, path);
  else
    weir_set_err(err, errlen, "%s: not a GGUF file (it does not start with the magic "
                 "\"GGUF\"). " HOW_TO_GET_GGUF, path);
  return WEIR_E_FORMAT;
}

int weir_gguf_open(const char *path, weir_gguf **out, char *err, size_t errlen) {
  int rc = 0, fd = -1;
  struct stat st;
  weir_gguf *g = NULL;
  if (!out) return WEIR_E_INVAL;
  *out = NULL;
  if (!path) {
    weir_set_err(err, errlen, "no GGUF path given");
    return WEIR_E_INVAL;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == EISDIR) return not_gguf(path, NULL, 0, 1, err, errlen);
  if (fd < 0) {
    weir_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return errno == ENOENT ? WEIR_E_NOTFOUND : WEIR_E_IO;
  }
  if (fstat(fd, &st) != 0) {
    weir_set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    rc = WEIR_E_IO;
    goto close_fd;
  }
  if (S_ISDIR(st.st_mode)) {
    rc = not_gguf(path, NULL, 0, 1, err, errlen);
    goto close_fd;
  }
  if (!S_ISREG(st.st_mode)) {
    weir_set_err(err, errlen, "%s: not a regular file", path);
    rc = WEIR_E_IO;
    goto close_fd;
  }
  /* The magic before the size: a short text file is "not a GGUF file", not a truncated one. */
  unsigned char head[16];
  ssize_t got = pread(fd, head, sizeof head, 0);
  if (got < 0) {
    weir_set_err(err, errlen, "%s: cannot read: %s", path, strerror(errno));
    rc = WEIR_E_IO;
    goto close_fd;
  }
  if (got < 4 || rd_u32(head) != WEIR_GGUF_MAGIC) {
    rc = not_gguf(path, head, (size_t)got, 0, err, errlen);
    goto close_fd;
  }
  g = calloc(1, sizeof *g);
  if (!g || !(g->path = strdup(path))) {
    weir_set_err(err, errlen, "%s: out of memory", path);
    free(g);
    rc = WEIR_E_NOMEM;
    goto close_fd;
  }
  g->size = (uint64_t)st.st_size;
  if (g->size < 24) {
    weir_set_err(err, errlen, "%s: file truncated: %llu bytes is too short for a GGUF header "
            "(24 bytes)", path, (unsigned long long)g->size);
    free_handle(g);
    rc = WEIR_E_FORMAT;
    goto close_fd;
  }
  void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) {
    weir_set_err(err, errlen, "%s: cannot mmap %llu bytes: %s", path, (unsigned long long)g->size,
            strerror(errno));
    free_handle(g);
    rc = WEIR_E_IO;
    goto close_fd;
  }
  g->base = m;
  g->mapped = 1;
  rc = open_common(g, out, err, errlen);
close_fd:
  close(fd);
  return rc;
}

int weir_gguf_open_buffer(const void *data, size_t len, const char *name, weir_gguf **out,
                          char *err, size_t errlen) {
  if (!out) return WEIR_E_INVAL;
  *out = NULL;
  if (!data && len) return WEIR_E_INVAL;
  weir_gguf *g = calloc(1, sizeof *g);
  if (!g || !(g->path = strdup(name ? name : "<buffer>"))) {
    free(g);
    weir_set_err(err, errlen, "out of memory");
    return WEIR_E_NOMEM;
  }
  g->base = data ? data : (const uint8_t *)"";
  g->size = len;
  if (len < 24) {
    weir_set_err(err, errlen, "%s: file truncated: %zu bytes is too short for a GGUF header "
            "(24 bytes)", g->path, len);
    free_handle(g);
    return WEIR_E_FORMAT;
  }
  return open_common(g, out, err, errlen);
}

void weir_gguf_close(weir_gguf *g) { free_handle(g); }

const char *weir_gguf_path(const weir_gguf *g) { return g->path; }
uint32_t weir_gguf_version(const weir_gguf *g) { return g->version; }
uint32_t weir_gguf_alignment(const weir_gguf *g) { return g->alignment; }
uint64_t weir_gguf_data_offset(const weir_gguf *g) { return g->data_offset; }
uint64_t weir_gguf_file_size(const weir_gguf *g) { return g->size; }
const void *weir_gguf_base(const weir_gguf *g) { return g->base; }

int64_t weir_gguf_kv_count(const weir_gguf *g) { return g->n_kv; }
const weir_gguf_kv *weir_gguf_kv_at(const weir_gguf *g, int64_t i) {
  return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL;
}
const weir_gguf_kv *weir_gguf_find_key(const weir_gguf *g, const char *key) {
  if (!g || !key) return NULL;
  int64_t i = table_find(g->kv_index, g->kv_index_mask, key, kv_name, g);
  return i >= 0 ? &g->kvs[i] : NULL;
}

int64_t weir_gguf_tensor_count(const weir_gguf *g) { return g->n_tensors; }
const weir_gguf_tensor *weir_gguf_tensor_at(const weir_gguf *g, int64_t i) {
  return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}
const weir_gguf_tensor *weir_gguf_find_tensor(const weir_gguf *g, const char *name) {
  if (!g || !name) return NULL;
  int64_t i = table_find(g->tensor_index, g->tensor_index_mask, name, tensor_name, g);
  return i >= 0 ? &g->tensors[i] : NULL;
}

/* ---- typed value access ---- */

static float rd_f32(const uint8_t *p) {
  uint32_t u = rd_u32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static double rd_f64(const uint8_t *p) {
  uint64_t u = rd_u64(p);
  double d;
  memcpy(&d, &u, 8);
  return d;
}

/* Reads an integer-typed scalar at p as either a signed or an unsigned 64-bit value;
 * returns 1 when the value is negative (then *s is valid), 0 otherwise (*u valid). */
static int scalar_int(weir_gguf_type t, const uint8_t *p, int64_t *s, uint64_t *u, int *neg) {
  switch (t) {
  case WEIR_GGUF_U8: *u = p[0]; *neg = 0; return 0;
  case WEIR_GGUF_I8: *s = (int8_t)p[0]; break;
  case WEIR_GGUF_U16: *u = (uint16_t)(p[0] | p[1] << 8); *neg = 0; return 0;
  case WEIR_GGUF_I16: *s = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
  case WEIR_GGUF_U32: *u = rd_u32(p); *neg = 0; return 0;
  case WEIR_GGUF_I32: *s = (int32_t)rd_u32(p); break;
  case WEIR_GGUF_U64: *u = rd_u64(p); *neg = 0; return 0;
  case WEIR_GGUF_I64: *s = (int64_t)rd_u64(p); break;
  default: return WEIR_E_INVAL;
  }
  *neg = *s < 0;
  if (!*neg) *u = (uint64_t)*s;
  return 0;
}

static int value_i64(weir_gguf_type t, const uint8_t *p, int64_t *out) {
  int64_t s = 0;
  uint64_t u = 0;
  int neg = 0;
  if (t == WEIR_GGUF_BOOL) {
    *out = p[0];
    return 0;
  }
  if (scalar_int(t, p, &s, &u, &neg)) return WEIR_E_INVAL;
  if (neg) {
    *out = s;
    return 0;
  }
  if (u > (uint64_t)INT64_MAX) return WEIR_E_RANGE;
  *out = (int64_t)u;
  return 0;
}

static int value_f64(weir_gguf_type t, const uint8_t *p, double *out) {
  int64_t v;
  if (t == WEIR_GGUF_F32) *out = rd_f32(p);
  else if (t == WEIR_GGUF_F64) *out = rd_f64(p);
  else if (t == WEIR_GGUF_U64) *out = (double)rd_u64(p);
  else if (value_i64(t, p, &v) == 0 && t != WEIR_GGUF_BOOL) *out = (double)v;
  else return WEIR_E_INVAL;
  return 0;
}

int weir_gguf_kv_i64(const weir_gguf_kv *kv, int64_t *out) {
  if (!kv || kv->type == WEIR_GGUF_BOOL) return WEIR_E_INVAL;
  return value_i64(kv->type, kv->value, out);
}
int weir_gguf_kv_u64(const weir_gguf_kv *kv, uint64_t *out) {
  int64_t s;
  uint64_t u;
  int neg;
  if (!kv || scalar_int(kv->type, kv->value, &s, &u, &neg)) return WEIR_E_INVAL;
  if (neg) return WEIR_E_RANGE;
  *out = u;
  return 0;
}
int weir_gguf_kv_f64(const weir_gguf_kv *kv, double *out) {
  if (!kv) return WEIR_E_INVAL;
  return value_f64(kv->type, kv->value, out);
}
int weir_gguf_kv_bool(const weir_gguf_kv *kv, int *out) {
  if (!kv) return WEIR_E_INVAL;
  if (kv->type == WEIR_GGUF_BOOL || ((kv->type == WEIR_GGUF_U8 || kv->type == WEIR_GGUF_I8) &&
                                     kv->value[0] <= 1)) {
    *out = kv->value[0] != 0;
    return 0;
  }
  return WEIR_E_INVAL;
}
int weir_gguf_kv_str(const weir_gguf_kv *kv, weir_gguf_str *out) {
  if (!kv || kv->type != WEIR_GGUF_STRING) return WEIR_E_INVAL;
  out->len = rd_u64(kv->value);
  out->ptr = (const char *)kv->value + 8;
  return 0;
}

#define FIND_OR_RETURN(g, key, kv)                            \
  const weir_gguf_kv *kv = weir_gguf_find_key((g), (key));    \
  if (!kv) return WEIR_E_NOTFOUND

int weir_gguf_get_i64(const weir_gguf *g, const char *key, int64_t *out) {
  FIND_OR_RETURN(g, key, kv);
  return weir_gguf_kv_i64(kv, out);
}
int weir_gguf_get_u64(const weir_gguf *g, const char *key, uint64_t *out) {
  FIND_OR_RETURN(g, key, kv);
  return weir_gguf_kv_u64(kv, out);
}
int weir_gguf_get_i32(const weir_gguf *g, const char *key, int32_t *out) {
  int64_t v;
  FIND_OR_RETURN(g, key, kv);
  int rc = weir_gguf_kv_i64(kv, &v);
  if (rc) return rc;
  if (v < INT32_MIN || v > INT32_MAX) return WEIR_E_RANGE;
  *out = (int32_t)v;
  return 0;
}
int weir_gguf_get_u32(const weir_gguf *g, const char *key, uint32_t *out) {
  uint64_t v;
  FIND_OR_RETURN(g, key, kv);
  int rc = weir_gguf_kv_u64(kv, &v);
  if (rc) return rc;
  if (v > UINT32_MAX) return WEIR_E_RANGE;
  *out = (uint32_t)v;
  return 0;
}
int weir_gguf_get_f64(const weir_gguf *g, const char *key, double *out) {
  FIND_OR_RETURN(g, key, kv);
  return weir_gguf_kv_f64(kv, out);
}
int weir_gguf_get_f32(const weir_gguf *g, const char *key, float *out) {
  double v;
  FIND_OR_RETURN(g, key, kv);
  int rc = weir_gguf_kv_f64(kv, &v);
  if (rc) return rc;
  *out = (float)v;
  return 0;
}
int weir_gguf_get_bool(const weir_gguf *g, const char *key, int *out) {
  FIND_OR_RETURN(g, key, kv);
  return weir_gguf_kv_bool(kv, out);
}
int weir_gguf_get_str(const weir_gguf *g, const char *key, weir_gguf_str *out) {
  FIND_OR_RETURN(g, key, kv);
  return weir_gguf_kv_str(kv, out);
}
int weir_gguf_get_arr(const weir_gguf *g, const char *key, weir_gguf_arr *out) {
  FIND_OR_RETURN(g, key, kv);
  if (kv->type != WEIR_GGUF_ARRAY) return WEIR_E_INVAL;
  *out = kv->arr;
  return 0;
}

int weir_gguf_arr_i64(const weir_gguf_arr *a, uint64_t i, int64_t *out) {
  size_t sz = weir_gguf_scalar_size(a->elem_type);
  if (i >= a->n) return WEIR_E_RANGE;
  if (!sz || a->elem_type == WEIR_GGUF_F32 || a->elem_type == WEIR_GGUF_F64)
    return WEIR_E_INVAL;
  return value_i64(a->elem_type, a->data + i * sz, out);
}
int weir_gguf_arr_f64(const weir_gguf_arr *a, uint64_t i, double *out) {
  size_t sz = weir_gguf_scalar_size(a->elem_type);
  if (i >= a->n) return WEIR_E_RANGE;
  if (!sz || a->elem_type == WEIR_GGUF_BOOL) return WEIR_E_INVAL;
  return value_f64(a->elem_type, a->data + i * sz, out);
}
int weir_gguf_arr_f32(const weir_gguf_arr *a, uint64_t i, float *out) {
  double v;
  int rc = weir_gguf_arr_f64(a, i, &v);
  if (rc == 0) *out = (float)v;
  return rc;
}

/* Skips one already-validated value of type t at p; returns the byte after it. */
static const uint8_t *skip_value(weir_gguf_type t, const uint8_t *p) {
  size_t sz = weir_gguf_scalar_size((weir_gguf_type)t);
  if (sz) return p + sz;
  if (t == WEIR_GGUF_STRING) return p + 8 + rd_u64(p);
  uint32_t et = rd_u32(p);
  uint64_t n = rd_u64(p + 4);
  p += 12;
  size_t esz = weir_gguf_scalar_size((weir_gguf_type)et);
  if (esz) return p + n * esz;
  for (uint64_t i = 0; i < n; i++) p = skip_value((weir_gguf_type)et, p);
  return p;
}

int weir_gguf_arr_str(const weir_gguf_arr *a, uint64_t i, weir_gguf_str *out) {
  if (a->elem_type != WEIR_GGUF_STRING) return WEIR_E_INVAL;
  if (i >= a->n) return WEIR_E_RANGE;
  const uint8_t *p = a->data;
  if (a->str_offs) p += a->str_offs[i];
  else
    for (uint64_t k = 0; k < i; k++) p = skip_value(WEIR_GGUF_STRING, p);
  out->len = rd_u64(p);
  out->ptr = (const char *)p + 8;
  return 0;
}

int weir_gguf_arr_arr(const weir_gguf_arr *a, uint64_t i, weir_gguf_arr *out) {
  if (a->elem_type != WEIR_GGUF_ARRAY) return WEIR_E_INVAL;
  if (i >= a->n) return WEIR_E_RANGE;
  const uint8_t *p = a->data;
  for (uint64_t k = 0; k < i; k++) p = skip_value(WEIR_GGUF_ARRAY, p);
  out->elem_type = (weir_gguf_type)rd_u32(p);
  out->n = rd_u64(p + 4);
  out->data = p + 12;
  out->str_offs = NULL;
  out->end = skip_value(WEIR_GGUF_ARRAY, p);
  return 0;
}

/* ---- Llama-family hyperparameters ---- */

const char *weir_gguf_blk_name(char *buf, size_t buflen, int layer, const char *suffix) {
  snprintf(buf, buflen, "blk.%d.%s", layer, suffix);
  return buf;
}

static int hp_get_i32(const weir_gguf *g, const char *arch, const char *suffix, int32_t *out,
                      int required, char *err, size_t errlen) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  int rc = weir_gguf_get_i32(g, key, out);
  if (rc == WEIR_E_NOTFOUND && !required) return 0;
  if (rc == WEIR_E_NOTFOUND) {
    weir_set_err(err, errlen, "%s: required key '%s' is missing", g->path, key);
    return rc;
  }
  if (rc) {
    weir_set_err(err, errlen, "%s: key '%s' is not an integer that fits 32 bits", g->path, key);
    return WEIR_E_FORMAT;
  }
  if (*out <= 0) {
    weir_set_err(err, errlen, "%s: key '%s' is %d, must be positive", g->path, key, *out);
    return WEIR_E_FORMAT;
  }
  return 0;
}

static int hp_get_f32(const weir_gguf *g, const char *arch, const char *suffix, float *out,
                      char *err, size_t errlen) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  int rc = weir_gguf_get_f32(g, key, out);
  if (rc == WEIR_E_NOTFOUND) return 0;
  if (rc || !(*out > 0) || *out > 1e30f) {
    weir_set_err(err, errlen, "%s: key '%s' must be a positive number", g->path, key);
    return WEIR_E_FORMAT;
  }
  return 0;
}

int weir_gguf_llama_hparams(const weir_gguf *g, weir_llama_hparams *out, char *err,
                            size_t errlen) {
  weir_gguf_str arch;
  weir_llama_hparams hp;
  int rc;
  if (!g || !out) return WEIR_E_INVAL;
  memset(&hp, 0, sizeof hp);
  rc = weir_gguf_get_str(g, "general.architecture", &arch);
  if (rc) {
    weir_set_err(err, errlen, "%s: key 'general.architecture' is %s", g->path,
            rc == WEIR_E_NOTFOUND ? "missing" : "not a string");
    return rc == WEIR_E_NOTFOUND ? rc : WEIR_E_FORMAT;
  }
  static const struct {
    const char *name;
    weir_arch arch;
  } archs[] = {{"llama", WEIR_ARCH_LLAMA},   {"mistral", WEIR_ARCH_MISTRAL},
               {"qwen2", WEIR_ARCH_QWEN2},   {"qwen3", WEIR_ARCH_QWEN3},
               {"gemma2", WEIR_ARCH_GEMMA2}, {"gemma3", WEIR_ARCH_GEMMA3},
               {"phi3", WEIR_ARCH_PHI3}};
  static const char *const moe[] = {"mixtral", "qwen2moe", "qwen3moe", "deepseek2"};
  size_t ai = 0;
  while (ai < sizeof archs / sizeof archs[0] &&
         !(arch.len == strlen(archs[ai].name) && memcmp(arch.ptr, archs[ai].name, arch.len) == 0))
    ai++;
  if (ai == sizeof archs / sizeof archs[0]) {
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
      if (arch.len == strlen(moe[i]) && memcmp(arch.ptr, moe[i], arch.len) == 0) {
        weir_set_err(err, errlen, "%s: architecture '%s' (mixture of experts) is not supported "
                     "yet", g->path, moe[i]);
        return WEIR_E_NOTSUP;
      }
    weir_set_err(err, errlen, "%s: architecture '%.*s' is not supported (weir runs llama, mistral, "
            "qwen2, qwen3, gemma2, gemma3, phi3)", g->path, (int)(arch.len > 64 ? 64 : arch.len),
            arch.ptr);
    return WEIR_E_NOTSUP;
  }
  hp.arch = archs[ai].arch;
  const int gemma = hp.arch == WEIR_ARCH_GEMMA2 || hp.arch == WEIR_ARCH_GEMMA3;
  memcpy(hp.arch_name, arch.ptr, arch.len);
  const char *a = hp.arch_name;
  if ((rc = hp_get_i32(g, a, "context_length", &hp.n_ctx_train, 1, err, errlen)) ||
      (rc = hp_get_i32(g, a, "embedding_length", &hp.n_embd, 1, err, errlen)) ||
      (rc = hp_get_i32(g, a, "block_count", &hp.n_layer, 1, err, errlen)) ||
      (rc = hp_get_i32(g, a, "feed_forward_length", &hp.n_ff, 1, err, errlen)) ||
      (rc = hp_get_i32(g, a, "attention.head_count", &hp.n_head, 1, err, errlen)))
    return rc;
  hp.n_head_kv = hp.n_head;
  if ((rc = hp_get_i32(g, a, "attention.head_count_kv", &hp.n_head_kv, 0, err, errlen)))
    return rc;
  /* The head size: attention.key_length when the file has it (qwen3 and gemma heads are not
   * n_embd / n_head), else n_embd / n_head. V heads must be as wide as K heads. */
  int32_t key_len = 0, val_len = 0;
  if ((rc = hp_get_i32(g, a, "attention.key_length", &key_len, 0, err, errlen)) ||
      (rc = hp_get_i32(g, a, "attention.value_length", &val_len, 0, err, errlen)))
    return rc;
  if (val_len && val_len != (key_len ? key_len : hp.n_embd / hp.n_head)) {
    weir_set_err(err, errlen, "%s: %s.attention.value_length %d differs from the key length: "
                 "weir does not implement V heads of another width", g->path, a, val_len);
    return WEIR_E_NOTSUP;
  }
  if (!key_len && hp.n_embd % hp.n_head != 0) {
    weir_set_err(err, errlen, "%s: embedding_length %d is not a multiple of head_count %d", g->path,
            hp.n_embd, hp.n_head);
    return WEIR_E_FORMAT;
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    weir_set_err(err, errlen, "%s: head_count %d is not a multiple of head_count_kv %d", g->path,
            hp.n_head, hp.n_head_kv);
    return WEIR_E_FORMAT;
  }
  hp.head_dim = key_len ? key_len : hp.n_embd / hp.n_head;
  if (hp.head_dim > 4096 || (int64_t)hp.head_dim * hp.n_head > (int64_t)1 << 24) {
    weir_set_err(err, errlen, "%s: attention.key_length %d is implausibly large", g->path,
                 hp.head_dim);
    return WEIR_E_FORMAT;
  }
  hp.n_rot = hp.head_dim;
  if ((rc = hp_get_i32(g, a, "rope.dimension_count", &hp.n_rot, 0, err, errlen))) return rc;
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0 || hp.n_rot > WEIR_MAX_ROT) {
    weir_set_err(err, errlen, "%s: rope.dimension_count %d must be even and at most the head "
            "size %d", g->path, hp.n_rot, hp.head_dim);
    return WEIR_E_FORMAT;
  }
  hp.rope_freq_base = 10000.0f;
  hp.rope_scale = 1.0f;
  hp.rms_eps = 1e-5f;
  if ((rc = hp_get_f32(g, a, "rope.freq_base", &hp.rope_freq_base, err, errlen)) ||
      (rc = hp_get_f32(g, a, "rope.scaling.factor", &hp.rope_scale, err, errlen)) ||
      (rc = hp_get_f32(g, a, "attention.layer_norm_rms_epsilon", &hp.rms_eps, err, errlen)))
    return rc;
  /* Linear and YaRN position scaling are implemented (and rope_freqs / LongRoPE factor
   * tensors, below); refusing the others beats running a long-context model with silently
   * wrong positions. */
  weir_gguf_str stype = {"", 0};
  char skey[96];
  snprintf(skey, sizeof skey, "%s.rope.scaling.type", a);
  int has_type = weir_gguf_get_str(g, skey, &stype) == 0;
  int is_none = stype.len == 4 && memcmp(stype.ptr, "none", 4) == 0;
  int is_linear = stype.len == 6 && memcmp(stype.ptr, "linear", 6) == 0;
  int is_yarn = stype.len == 4 && memcmp(stype.ptr, "yarn", 4) == 0;
  if (has_type && !is_none && !is_linear && !is_yarn) {
    weir_set_err(err, errlen, "%s: %s '%.*s' is not supported (weir does linear and yarn)",
            g->path, skey, (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
    return WEIR_E_NOTSUP;
  }
  if (is_none) hp.rope_scale = 1.0f;
  hp.rope_yarn = is_yarn;
  hp.n_ctx_orig = hp.n_ctx_train;
  hp.rope_attn_factor = 1.0f;
  hp.yarn_ext_factor = is_yarn ? 1.0f : 0.0f;
  hp.yarn_beta_fast = 32.0f;
  hp.yarn_beta_slow = 1.0f;
  if ((rc = hp_get_i32(g, a, "rope.scaling.original_context_length", &hp.n_ctx_orig, 0, err,
                       errlen)) ||
      (rc = hp_get_f32(g, a, "rope.scaling.attn_factor", &hp.rope_attn_factor, err, errlen)) ||
      (rc = hp_get_f32(g, a, "rope.scaling.yarn_beta_fast", &hp.yarn_beta_fast, err, errlen)) ||
      (rc = hp_get_f32(g, a, "rope.scaling.yarn_beta_slow", &hp.yarn_beta_slow, err, errlen)))
    return rc;
  snprintf(skey, sizeof skey, "%s.rope.scaling.yarn_ext_factor", a);
  if (weir_gguf_get_f32(g, skey, &hp.yarn_ext_factor) == 0 &&
      !(hp.yarn_ext_factor >= 0.0f && hp.yarn_ext_factor <= 1.0f)) {
    weir_set_err(err, errlen, "%s: %s must lie in [0, 1]", g->path, skey);
    return WEIR_E_FORMAT;
  }
  if (is_yarn && !(hp.rope_scale >= 1.0f)) {
    weir_set_err(err, errlen, "%s: yarn scaling needs rope.scaling.factor >= 1", g->path);
    return WEIR_E_FORMAT;
  }
  /* Keys that change the math in ways weir does not implement: refused by name. */
  static const char *const unimplemented[] = {
      "rope.scaling.yarn_log_multiplier", "attention.max_alibi_bias", "attention.clamp_kqv",
      "attention.layer_norm_epsilon", "logit_scale", "residual_scale", "embedding_scale",
      "attention.sliding_window_pattern", "expert_count", "attention.q_lora_rank"};
  for (size_t i = 0; i < sizeof unimplemented / sizeof unimplemented[0]; i++) {
    snprintf(skey, sizeof skey, "%s.%s", a, unimplemented[i]);
    if (weir_gguf_find_key(g, skey)) {
      weir_set_err(err, errlen, "%s: key '%s' changes the model's math in a way weir does not "
                   "implement", g->path, skey);
      return WEIR_E_NOTSUP;
    }
  }
  if (hp.rms_eps >= 1.0f) {
    weir_set_err(err, errlen, "%s: layer_norm_rms_epsilon %g is implausibly large", g->path,
            (double)hp.rms_eps);
    return WEIR_E_FORMAT;
  }
  hp.rope_style = hp.arch == WEIR_ARCH_LLAMA || hp.arch == WEIR_ARCH_MISTRAL ? WEIR_ROPE_NORM
                                                                            : WEIR_ROPE_NEOX;

  /* The families' own hyperparameters, with the published defaults where a key is optional
   * (docs/models.md). */
  hp.rope_freq_base_swa = hp.rope_freq_base;
  hp.attn_scale = 1.0f / sqrtf((float)hp.head_dim);
  hp.embd_scale = 1.0f;
  if (hp.arch == WEIR_ARCH_GEMMA2) {
    hp.n_swa = 4096;
    hp.swa_period = 2;
    hp.attn_softcap = 50.0f;
    hp.final_softcap = 30.0f;
  } else if (hp.arch == WEIR_ARCH_GEMMA3) {
    hp.swa_period = 6;
    hp.rope_freq_base_swa = 10000.0f;
    hp.rope_scale_global_only = 1;
    hp.has_qk_norm = 1;
  } else if (hp.arch == WEIR_ARCH_QWEN3) {
    hp.has_qk_norm = 1;
  } else if (hp.arch == WEIR_ARCH_PHI3) {
    hp.fused_gate_up = 1;
    hp.fused_qkv = weir_gguf_find_tensor(g, "blk.0.attn_qkv.weight") != NULL;
  }
  if (gemma) {
    hp.has_post_norms = 1;
    hp.ffn_gelu = 1;
    hp.embd_scale = sqrtf((float)hp.n_embd);
    /* The 27B models scale queries by 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim)
     * (query_pre_attn_scalar in their configs); they are told apart by depth. */
    if ((hp.arch == WEIR_ARCH_GEMMA2 && hp.n_layer == 46) ||
        (hp.arch == WEIR_ARCH_GEMMA3 && hp.n_layer == 62))
      hp.attn_scale = 1.0f / sqrtf((float)hp.n_embd / (float)hp.n_head);
  }
  if ((rc = hp_get_i32(g, a, "attention.sliding_window", &hp.n_swa, hp.arch == WEIR_ARCH_GEMMA3,
                       err, errlen)) ||
      (rc = hp_get_f32(g, a, "rope.freq_base_swa", &hp.rope_freq_base_swa, err, errlen)) ||
      (rc = hp_get_f32(g, a, "attention.scale", &hp.attn_scale, err, errlen)) ||
      (rc = hp_get_f32(g, a, "attn_logit_softcapping", &hp.attn_softcap, err, errlen)) ||
      (rc = hp_get_f32(g, a, "final_logit_softcapping", &hp.final_softcap, err, errlen)))
    return rc;
  hp.has_rope_freqs = weir_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
  hp.has_longrope = weir_gguf_find_tensor(g, "rope_factors_long.weight") != NULL ||
                    weir_gguf_find_tensor(g, "rope_factors_short.weight") != NULL;
  if (hp.has_rope_freqs + hp.has_longrope + hp.rope_yarn > 1) {
    weir_set_err(err, errlen, "%s: more than one RoPE frequency scaling (rope_freqs, LongRoPE "
                 "factors, yarn): weir applies one", g->path);
    return WEIR_E_NOTSUP;
  }

  weir_gguf_arr toks;
  const weir_gguf_tensor *emb = weir_gguf_find_tensor(g, "token_embd.weight");
  rc = weir_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
  if (rc == 0 && toks.elem_type == WEIR_GGUF_STRING && toks.n > 0 && toks.n <= INT32_MAX) {
    hp.n_vocab = (int32_t)toks.n;
  } else if (rc != WEIR_E_NOTFOUND) {
    weir_set_err(err, errlen, "%s: tokenizer.ggml.tokens must be a non-empty array of strings",
            g->path);
    return WEIR_E_FORMAT;
  } else if (emb && emb->t.ndim == 2 && emb->t.ne[1] <= INT32_MAX) {
    hp.n_vocab = (int32_t)emb->t.ne[1];
  } else {
    weir_set_err(err, errlen, "%s: cannot tell the vocabulary size: no tokenizer.ggml.tokens and "
            "no 2-D token_embd.weight", g->path);
    return WEIR_E_NOTFOUND;
  }
  hp.has_output = weir_gguf_find_tensor(g, "output.weight") != NULL;
  hp.has_qkv_bias = weir_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
  *out = hp;
  return 0;
}

int weir_gguf_check_scales(const weir_gguf *g, const weir_gguf_tensor *t, char *err,
                           size_t errlen) {
  int64_t be = weir_dtype_block_elems(t->t.dtype);
  if (be <= 1) return 0;
  int64_t nblocks = (int64_t)(t->nbytes / weir_dtype_block_bytes(t->t.dtype));
  int64_t bad = weir_quant_scales_finite(t->t.dtype, t->t.data, nblocks);
  if (bad < 0) return 0;
  int64_t per_row = t->t.ne[0] / be;
  weir_set_err(err, errlen, "%s: tensor '%s' (%s): block %lld of row %lld has a NaN or infinite "
               "scale (weir reads finite f16 scales only)", g->path, t->name,
               weir_dtype_name(t->t.dtype), (long long)(bad % per_row), (long long)(bad / per_row));
  return WEIR_E_FORMAT;
}

int weir_llama_layer_slides(const weir_llama_hparams *hp, int l) {
  if (hp->n_swa <= 0) return 0;
  if (hp->swa_period <= 0) return 1;
  return l % hp->swa_period < hp->swa_period - 1;
}

static int check_tensor(const weir_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                        int is_vector, char *err, size_t errlen) {
  const weir_gguf_tensor *t = weir_gguf_find_tensor(g, name);
  if (!t) {
    weir_set_err(err, errlen, "%s: required tensor '%s' is missing", g->path, name);
    return WEIR_E_NOTFOUND;
  }
  int nd = is_vector ? 1 : 2;
  if (t->t.ndim != nd || t->t.ne[0] != ne0 || (!is_vector && t->t.ne[1] != ne1)) {
    char want[64], got[96];
    if (is_vector) snprintf(want, sizeof want, "{%lld}", (long long)ne0);
    else snprintf(want, sizeof want, "{%lld, %lld}", (long long)ne0, (long long)ne1);
    int n = snprintf(got, sizeof got, "{");
    for (int d = 0; d < t->t.ndim && n < (int)sizeof got; d++)
      n += snprintf(got + n, sizeof got - (size_t)n, d ? ", %lld" : "%lld",
                    (long long)t->t.ne[d]);
    if (n < (int)sizeof got) snprintf(got + n, sizeof got - (size_t)n, "}");
    weir_set_err(err, errlen, "%s: tensor '%s' has shape %s, expected %s", g->path, name, got, want);
    return WEIR_E_FORMAT;
  }
  weir_dtype d = t->t.dtype;
  int ok = d == WEIR_DTYPE_F32 || d == WEIR_DTYPE_F16 || d == WEIR_DTYPE_BF16;
  if (!is_vector) ok = ok || weir_dtype_block_elems(d) > 1;
  if (!ok) {
    weir_set_err(err, errlen, "%s: tensor '%s' has type %s, which weir cannot use there (%s)",
                 g->path, name, weir_dtype_name(d),
                 is_vector ? "vectors: f32, f16, bf16" : "matrices: " WEIR_GGUF_WEIGHT_TYPES);
    return WEIR_E_NOTSUP;
  }
  return weir_gguf_check_scales(g, t, err, errlen);
}

/* The per-layer tensors of hp's graph: suffix, shape kind, and whether it is a vector. */
typedef struct layer_part {
  const char *suffix;
  int64_t ne0, ne1; /* ne1 0: a vector */
} layer_part;

static int layer_parts(const weir_llama_hparams *hp, layer_part *p) {
  const int64_t e = hp->n_embd, kv = (int64_t)hp->n_head_kv * hp->head_dim;
  const int64_t qd = (int64_t)hp->n_head * hp->head_dim, ff = hp->n_ff;
  int n = 0;
  p[n++] = (layer_part){"attn_norm.weight", e, 0};
  if (hp->fused_qkv) {
    p[n++] = (layer_part){"attn_qkv.weight", e, qd + 2 * kv};
  } else {
    p[n++] = (layer_part){"attn_q.weight", e, qd};
    p[n++] = (layer_part){"attn_k.weight", e, kv};
    p[n++] = (layer_part){"attn_v.weight", e, kv};
  }
  if (hp->has_qkv_bias || hp->arch == WEIR_ARCH_QWEN2) {
    p[n++] = (layer_part){"attn_q.bias", qd, 0};
    p[n++] = (layer_part){"attn_k.bias", kv, 0};
    p[n++] = (layer_part){"attn_v.bias", kv, 0};
  }
  if (hp->has_qk_norm) {
    p[n++] = (layer_part){"attn_q_norm.weight", hp->head_dim, 0};
    p[n++] = (layer_part){"attn_k_norm.weight", hp->head_dim, 0};
  }
  p[n++] = (layer_part){"attn_output.weight", qd, e};
  if (hp->has_post_norms) {
    p[n++] = (layer_part){"post_attention_norm.weight", e, 0};
    p[n++] = (layer_part){"post_ffw_norm.weight", e, 0};
  }
  p[n++] = (layer_part){"ffn_norm.weight", e, 0};
  if (hp->fused_gate_up) {
    p[n++] = (layer_part){"ffn_up.weight", e, 2 * ff};
  } else {
    p[n++] = (layer_part){"ffn_gate.weight", e, ff};
    p[n++] = (layer_part){"ffn_up.weight", e, ff};
  }
  p[n++] = (layer_part){"ffn_down.weight", ff, e};
  return n;
}

int weir_gguf_llama_check(const weir_gguf *g, const weir_llama_hparams *hp, char *err,
                          size_t errlen) {
  int rc;
  char name[96];
  if (!g || !hp) return WEIR_E_INVAL;
  int64_t e = hp->n_embd;
  if ((rc = check_tensor(g, "token_embd.weight", e, hp->n_vocab, 0, err, errlen)) ||
      (rc = check_tensor(g, "output_norm.weight", e, 0, 1, err, errlen)))
    return rc;
  if (hp->has_output && (rc = check_tensor(g, "output.weight", e, hp->n_vocab, 0, err, errlen)))
    return rc;
  if (hp->has_rope_freqs &&
      (rc = check_tensor(g, "rope_freqs.weight", hp->n_rot / 2, 0, 1, err, errlen)))
    return rc;
  if (hp->has_longrope &&
      ((rc = check_tensor(g, "rope_factors_long.weight", hp->n_rot / 2, 0, 1, err, errlen)) ||
       (rc = check_tensor(g, "rope_factors_short.weight", hp->n_rot / 2, 0, 1, err, errlen))))
    return rc;
  layer_part parts[24];
  const int np = layer_parts(hp, parts);
  for (int l = 0; l < hp->n_layer; l++) {
    for (int p = 0; p < np; p++) {
      weir_gguf_blk_name(name, sizeof name, l, parts[p].suffix);
      rc = check_tensor(g, name, parts[p].ne0, parts[p].ne1, parts[p].ne1 == 0, err, errlen);
      if (rc) return rc;
    }
  }
  /* Every tensor of the file must be one the graph uses: an unknown one (a bias, a norm, an
   * expert router of another variant) would change the math if weir ignored it. */
  static const char *const globals[] = {"token_embd.weight", "output_norm.weight",
                                        "output.weight", "rope_freqs.weight",
                                        "rope_factors_long.weight", "rope_factors_short.weight"};
  for (int64_t i = 0; i < weir_gguf_tensor_count(g); i++) {
    const char *tn = weir_gguf_tensor_at(g, i)->name;
    int known = 0;
    for (size_t k = 0; k < sizeof globals / sizeof globals[0] && !known; k++)
      known = strcmp(tn, globals[k]) == 0;
    int layer = -1, off = 0;
    if (!known && sscanf(tn, "blk.%d.%n", &layer, &off) == 1 && off > 0 && layer >= 0 &&
        layer < hp->n_layer) {
      for (int p = 0; p < np && !known; p++) known = strcmp(tn + off, parts[p].suffix) == 0;
      /* Old converters stored RoPE's cached frequencies per layer; they are the plain
       * base^(-2i/n) ones the graph computes itself, so they change nothing. */
      if (!known) known = strcmp(tn + off, "attn_rot_embd") == 0;
    }
    if (!known) {
      weir_set_err(err, errlen, "%s: tensor '%s' is not part of weir's %s graph; running "
                   "without it would change the model's math", g->path, tn, hp->arch_name);
      return WEIR_E_NOTSUP;
    }
  }
  return 0;
}

void weir_gguf_drop_pages(const weir_gguf *g) {
  if (!g || !g->mapped || !g->base || g->data_offset >= g->size) return;
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t b = ((uintptr_t)g->base + g->data_offset) & ~(pg - 1);
  uintptr_t e = (uintptr_t)g->base + g->size;
  (void)madvise((void *)b, e - b, MADV_DONTNEED); /* only a hint; failure changes nothing */
}
