/* GGUF reader and writer: round trips of every metadata and tensor type, alignment, the
 * Llama hyperparameters and graph check, and one specific error for every malformed case
 * (built by mutating the bytes of a valid file) without a crash. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/quantize_row.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "testutil.h"
#include "weir/status.h"

static char *g_dir;

static uint64_t rng_state = 12345;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static float rndf(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1); }

/* Writes w to a fresh file and returns its bytes (malloc'd) and path. */
static uint8_t *write_and_load(weir_gguf_writer *w, const char *fname, size_t *len,
                               char **path_out) {
  char *path = wt_strf("%s/%s", g_dir, fname);
  char err[512];
  int rc = weir_gguf_write_file(w, path, err, sizeof err);
  if (rc) fprintf(stderr, "write failed: %s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  uint8_t *buf = (uint8_t *)wt_read_file(path, len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  if (path_out) *path_out = path;
  else free(path);
  return buf;
}

/* ---- round trips ---- */

static void test_metadata_roundtrip(void) {
  weir_gguf_writer *w;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_u8(w, "t.u8", 200), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_i8(w, "t.i8", -100), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_u16(w, "t.u16", 60000), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_i16(w, "t.i16", -30000), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_u32(w, "t.u32", 4000000000u), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_i32(w, "t.i32", -2000000000), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_u64(w, "t.u64", 18000000000000000000ull), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_i64(w, "t.i64", -9000000000000000000ll), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_f32(w, "t.f32", 3.25f), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_f64(w, "t.f64", -1e300), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_bool(w, "t.bool", 1), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_str(w, "t.str", "h\xc3\xa9llo"), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_strn(w, "t.empty", "", 0), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_u8(w, "t.u8", 1), WEIR_E_EXISTS); /* duplicate refused */
  int32_t ia[5] = {1, -2, 3, -4, 5};
  float fa[3] = {0.5f, -1.5f, 1e-3f};
  uint8_t ba[4] = {1, 0, 1, 1};
  int64_t la[2] = {INT64_MIN, INT64_MAX};
  double da[2] = {1.0 / 3, -2.5};
  uint16_t ua[3] = {0, 1, 65535};
  WT_ASSERT_INT_EQ(weir_gguf_add_arr(w, "a.i32", WEIR_GGUF_I32, ia, 5), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_arr(w, "a.f32", WEIR_GGUF_F32, fa, 3), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_arr(w, "a.bool", WEIR_GGUF_BOOL, ba, 4), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_arr(w, "a.i64", WEIR_GGUF_I64, la, 2), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_arr(w, "a.f64", WEIR_GGUF_F64, da, 2), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_arr(w, "a.u16", WEIR_GGUF_U16, ua, 3), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_arr(w, "a.empty", WEIR_GGUF_U8, NULL, 0), 0);
  const char *strs[] = {"alpha", "", "\xe2\x96\x81the", "gamma"};
  WT_ASSERT_INT_EQ(weir_gguf_add_arr_str(w, "a.str", strs, NULL, 4), 0);
  /* An array of two arrays of strings, encoded by hand: [["x","yz"], ["w"]]. */
  uint8_t nested[256];
  size_t nl = 0;
#define PUT(v, n) (memcpy(nested + nl, (v), (n)), nl += (n))
  uint32_t t_arr = WEIR_GGUF_ARRAY, t_str = WEIR_GGUF_STRING;
  uint64_t two = 2, one = 1, l1 = 1, l2 = 2;
  PUT(&t_arr, 4); PUT(&two, 8);
  PUT(&t_str, 4); PUT(&two, 8); PUT(&l1, 8); PUT("x", 1); PUT(&l2, 8); PUT("yz", 2);
  PUT(&t_str, 4); PUT(&one, 8); PUT(&l1, 8); PUT("w", 1);
#undef PUT
  WT_ASSERT_INT_EQ(weir_gguf_add_raw(w, "a.nested", WEIR_GGUF_ARRAY, nested, nl), 0);

  char *path;
  size_t len;
  uint8_t *buf = write_and_load(w, "meta.gguf", &len, &path);
  weir_gguf_writer_free(w);
  weir_gguf *g;
  char err[512] = "";
  int rc = weir_gguf_open(path, &g, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  WT_ASSERT_INT_EQ(weir_gguf_version(g), 3);
  WT_ASSERT_INT_EQ(weir_gguf_kv_count(g), 22);
  WT_ASSERT_INT_EQ(weir_gguf_tensor_count(g), 0);
  WT_ASSERT_INT_EQ(weir_gguf_alignment(g), 32);
  CU_ASSERT_STRING_EQUAL(weir_gguf_kv_at(g, 0)->key, "t.u8");

  uint32_t u32;
  int32_t i32;
  uint64_t u64;
  int64_t i64;
  float f32;
  double f64;
  int b;
  weir_gguf_str s;
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "t.u8", &u32), 0);
  WT_ASSERT_INT_EQ(u32, 200);
  WT_ASSERT_INT_EQ(weir_gguf_get_i32(g, "t.i8", &i32), 0);
  WT_ASSERT_INT_EQ(i32, -100);
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "t.i8", &u32), WEIR_E_RANGE); /* negative */
  WT_ASSERT_INT_EQ(weir_gguf_get_i32(g, "t.u16", &i32), 0);
  WT_ASSERT_INT_EQ(i32, 60000);
  WT_ASSERT_INT_EQ(weir_gguf_get_i32(g, "t.i16", &i32), 0);
  WT_ASSERT_INT_EQ(i32, -30000);
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "t.u32", &u32), 0);
  CU_ASSERT_EQUAL(u32, 4000000000u);
  WT_ASSERT_INT_EQ(weir_gguf_get_i32(g, "t.u32", &i32), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_gguf_get_i32(g, "t.i32", &i32), 0);
  WT_ASSERT_INT_EQ(i32, -2000000000);
  WT_ASSERT_INT_EQ(weir_gguf_get_u64(g, "t.u64", &u64), 0);
  CU_ASSERT_EQUAL(u64, 18000000000000000000ull);
  WT_ASSERT_INT_EQ(weir_gguf_get_i64(g, "t.u64", &i64), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_gguf_get_i64(g, "t.i64", &i64), 0);
  CU_ASSERT_EQUAL(i64, -9000000000000000000ll);
  WT_ASSERT_INT_EQ(weir_gguf_get_f32(g, "t.f32", &f32), 0);
  CU_ASSERT_EQUAL(f32, 3.25f);
  WT_ASSERT_INT_EQ(weir_gguf_get_f64(g, "t.f64", &f64), 0);
  CU_ASSERT_EQUAL(f64, -1e300);
  WT_ASSERT_INT_EQ(weir_gguf_get_f64(g, "t.i32", &f64), 0); /* integers widen to double */
  CU_ASSERT_EQUAL(f64, -2000000000.0);
  WT_ASSERT_INT_EQ(weir_gguf_get_bool(g, "t.bool", &b), 0);
  WT_ASSERT_INT_EQ(b, 1);
  WT_ASSERT_INT_EQ(weir_gguf_get_i32(g, "t.bool", &i32), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_gguf_get_str(g, "t.str", &s), 0);
  WT_ASSERT_INT_EQ(s.len, 6);
  CU_ASSERT(memcmp(s.ptr, "h\xc3\xa9llo", 6) == 0);
  WT_ASSERT_INT_EQ(weir_gguf_get_str(g, "t.empty", &s), 0);
  WT_ASSERT_INT_EQ(s.len, 0);
  WT_ASSERT_INT_EQ(weir_gguf_get_str(g, "t.u8", &s), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "t.str", &u32), WEIR_E_INVAL);
  i32 = 77;
  WT_ASSERT_INT_EQ(weir_gguf_get_i32(g, "no.such.key", &i32), WEIR_E_NOTFOUND);
  WT_ASSERT_INT_EQ(i32, 77); /* untouched: callers preset defaults */
  CU_ASSERT_PTR_NULL(weir_gguf_find_key(g, "no.such.key"));

  weir_gguf_arr a;
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.i32", &a), 0);
  WT_ASSERT_INT_EQ(a.n, 5);
  WT_ASSERT_INT_EQ(a.elem_type, WEIR_GGUF_I32);
  for (int i = 0; i < 5; i++) {
    WT_ASSERT_INT_EQ(weir_gguf_arr_i64(&a, (uint64_t)i, &i64), 0);
    WT_ASSERT_INT_EQ(i64, ia[i]);
  }
  WT_ASSERT_INT_EQ(weir_gguf_arr_i64(&a, 5, &i64), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_gguf_arr_str(&a, 0, &s), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.f32", &a), 0);
  for (int i = 0; i < 3; i++) {
    WT_ASSERT_INT_EQ(weir_gguf_arr_f32(&a, (uint64_t)i, &f32), 0);
    CU_ASSERT_EQUAL(f32, fa[i]);
  }
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.bool", &a), 0);
  for (int i = 0; i < 4; i++) {
    WT_ASSERT_INT_EQ(weir_gguf_arr_i64(&a, (uint64_t)i, &i64), 0);
    WT_ASSERT_INT_EQ(i64, ba[i]);
  }
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.i64", &a), 0);
  WT_ASSERT_INT_EQ(weir_gguf_arr_i64(&a, 0, &i64), 0);
  CU_ASSERT_EQUAL(i64, INT64_MIN);
  WT_ASSERT_INT_EQ(weir_gguf_arr_i64(&a, 1, &i64), 0);
  CU_ASSERT_EQUAL(i64, INT64_MAX);
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.f64", &a), 0);
  WT_ASSERT_INT_EQ(weir_gguf_arr_f64(&a, 0, &f64), 0);
  CU_ASSERT_EQUAL(f64, 1.0 / 3);
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.u16", &a), 0);
  WT_ASSERT_INT_EQ(weir_gguf_arr_i64(&a, 2, &i64), 0);
  WT_ASSERT_INT_EQ(i64, 65535);
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.empty", &a), 0);
  WT_ASSERT_INT_EQ(a.n, 0);
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.str", &a), 0);
  WT_ASSERT_INT_EQ(a.n, 4);
  for (int i = 3; i >= 0; i--) { /* random access, in any order */
    WT_ASSERT_INT_EQ(weir_gguf_arr_str(&a, (uint64_t)i, &s), 0);
    WT_ASSERT_INT_EQ(s.len, strlen(strs[i]));
    CU_ASSERT(memcmp(s.ptr, strs[i], s.len) == 0);
  }
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "a.nested", &a), 0);
  WT_ASSERT_INT_EQ(a.elem_type, WEIR_GGUF_ARRAY);
  WT_ASSERT_INT_EQ(a.n, 2);
  weir_gguf_arr sub;
  WT_ASSERT_INT_EQ(weir_gguf_arr_arr(&a, 1, &sub), 0);
  WT_ASSERT_INT_EQ(sub.n, 1);
  WT_ASSERT_INT_EQ(weir_gguf_arr_str(&sub, 0, &s), 0);
  CU_ASSERT(s.len == 1 && s.ptr[0] == 'w');
  WT_ASSERT_INT_EQ(weir_gguf_arr_arr(&a, 0, &sub), 0);
  WT_ASSERT_INT_EQ(weir_gguf_arr_str(&sub, 1, &s), 0);
  CU_ASSERT(s.len == 2 && memcmp(s.ptr, "yz", 2) == 0);
  weir_gguf_close(g);

  /* The buffer form reads the same bytes the same way. */
  WT_ASSERT_INT_EQ(weir_gguf_open_buffer(buf, len, "mem", &g, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_gguf_kv_count(g), 22);
  weir_gguf_close(g);
  free(buf);
  free(path);
}

static const weir_dtype all_dtypes[] = {
    WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16, WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0,
    WEIR_DTYPE_Q4_1, WEIR_DTYPE_I8, WEIR_DTYPE_I16, WEIR_DTYPE_I32, WEIR_DTYPE_I64,
    WEIR_DTYPE_F64};
#define N_DTYPES (sizeof all_dtypes / sizeof all_dtypes[0])

static void tensor_roundtrip(uint32_t alignment) {
  weir_gguf_writer *w;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  if (alignment != 32) WT_ASSERT_INT_EQ(weir_gguf_writer_set_alignment(w, alignment), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_str(w, "general.architecture", "test"), 0);
  uint8_t *data[N_DTYPES + 1];
  int64_t shapes[N_DTYPES + 1][4];
  uint64_t sizes[N_DTYPES + 1];
  for (size_t i = 0; i < N_DTYPES; i++) {
    int64_t ne[3] = {64, 3 + (int64_t)i, 2};
    memcpy(shapes[i], ne, sizeof ne);
    sizes[i] = weir_gguf_tensor_bytes(all_dtypes[i], 3, ne);
    CU_ASSERT_FATAL(sizes[i] > 0);
    data[i] = malloc(sizes[i]);
    for (uint64_t k = 0; k < sizes[i]; k++) data[i][k] = (uint8_t)rnd();
    char name[32];
    snprintf(name, sizeof name, "t.%s", weir_dtype_name(all_dtypes[i]));
    WT_ASSERT_INT_EQ(weir_gguf_add_tensor(w, name, all_dtypes[i], 3, ne, data[i]), (int)i);
  }
  /* A 4-D and a 1-D tensor of odd sizes, so padding between tensors is exercised. */
  int64_t ne4[4] = {3, 5, 7, 2};
  sizes[N_DTYPES] = weir_gguf_tensor_bytes(WEIR_DTYPE_F16, 4, ne4);
  data[N_DTYPES] = malloc(sizes[N_DTYPES]);
  for (uint64_t k = 0; k < sizes[N_DTYPES]; k++) data[N_DTYPES][k] = (uint8_t)rnd();
  WT_ASSERT_INT_EQ(weir_gguf_add_tensor(w, "t.4d", WEIR_DTYPE_F16, 4, ne4, data[N_DTYPES]),
                   (int)N_DTYPES);
  int64_t bad_ne[2] = {33, 2};
  WT_ASSERT_INT_EQ(weir_gguf_add_tensor(w, "bad", WEIR_DTYPE_Q8_0, 2, bad_ne, NULL),
                   WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_gguf_add_tensor(w, "t.f32", WEIR_DTYPE_F32, 2, bad_ne, NULL),
                   WEIR_E_EXISTS);
  char fname[32];
  snprintf(fname, sizeof fname, "tensors%u.gguf", alignment);
  char *path;
  size_t len;
  uint8_t *buf = write_and_load(w, fname, &len, &path);
  weir_gguf_writer_free(w);
  weir_gguf *g;
  char err[512] = "";
  int rc = weir_gguf_open(path, &g, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  WT_ASSERT_INT_EQ(weir_gguf_alignment(g), alignment);
  WT_ASSERT_INT_EQ(weir_gguf_data_offset(g) % alignment, 0);
  WT_ASSERT_INT_EQ(weir_gguf_tensor_count(g), N_DTYPES + 1);
  for (size_t i = 0; i < N_DTYPES; i++) {
    const weir_gguf_tensor *t = weir_gguf_tensor_at(g, (int64_t)i);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_PTR_EQUAL(weir_gguf_find_tensor(g, t->name), t);
    WT_ASSERT_INT_EQ(t->t.dtype, all_dtypes[i]);
    WT_ASSERT_INT_EQ(t->t.ndim, 3);
    for (int d = 0; d < 3; d++) WT_ASSERT_INT_EQ(t->t.ne[d], shapes[i][d]);
    WT_ASSERT_INT_EQ(t->t.ne[3], 1);
    WT_ASSERT_INT_EQ(t->t.nb[0], weir_dtype_block_bytes(all_dtypes[i]));
    WT_ASSERT_INT_EQ(t->t.nb[1], weir_dtype_row_bytes(all_dtypes[i], 64));
    WT_ASSERT_INT_EQ(t->t.nb[2], t->t.nb[1] * (size_t)shapes[i][1]);
    WT_ASSERT_INT_EQ(t->nbytes, sizes[i]);
    WT_ASSERT_INT_EQ(t->nelements, 64 * shapes[i][1] * 2);
    WT_ASSERT_INT_EQ(t->offset % alignment, 0);
    WT_ASSERT_INT_EQ(((uintptr_t)t->t.data - (uintptr_t)weir_gguf_base(g)) % alignment, 0);
    CU_ASSERT(memcmp(t->t.data, data[i], sizes[i]) == 0);
  }
  const weir_gguf_tensor *t4 = weir_gguf_find_tensor(g, "t.4d");
  CU_ASSERT_PTR_NOT_NULL_FATAL(t4);
  WT_ASSERT_INT_EQ(t4->t.ndim, 4);
  WT_ASSERT_INT_EQ(t4->t.nb[3], 2 * 3 * 5 * 7);
  CU_ASSERT(memcmp(t4->t.data, data[N_DTYPES], sizes[N_DTYPES]) == 0);
  CU_ASSERT_PTR_NULL(weir_gguf_find_tensor(g, "t.none"));
  weir_gguf_close(g);
  for (size_t i = 0; i <= N_DTYPES; i++) free(data[i]);
  free(buf);
  free(path);
}

static void test_tensor_roundtrip_align32(void) { tensor_roundtrip(32); }
static void test_tensor_roundtrip_align64(void) { tensor_roundtrip(64); }
static void test_tensor_roundtrip_align8(void) { tensor_roundtrip(8); }

static void test_streamed_writer(void) {
  weir_gguf_writer *w;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  int64_t ne[2] = {32, 3};
  WT_ASSERT_INT_EQ(weir_gguf_add_tensor(w, "a", WEIR_DTYPE_Q8_0, 2, ne, NULL), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_tensor(w, "b", WEIR_DTYPE_F32, 1, ne, NULL), 1);
  char *path = wt_strf("%s/streamed.gguf", g_dir);
  char err[512] = "";
  WT_ASSERT_INT_EQ(weir_gguf_writer_begin(w, path, err, sizeof err), 0);
  uint8_t bytes[34 * 3 + 128];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)i;
  /* Odd-sized chunks crossing the tensor boundary. */
  WT_ASSERT_INT_EQ(weir_gguf_writer_put(w, bytes, 7), 0);
  WT_ASSERT_INT_EQ(weir_gguf_writer_put(w, bytes + 7, 100), 0);
  WT_ASSERT_INT_EQ(weir_gguf_writer_put(w, bytes + 107, sizeof bytes - 107), 0);
  WT_ASSERT_INT_EQ(weir_gguf_writer_put(w, bytes, 1), WEIR_E_INVAL); /* one byte too many */
  WT_ASSERT_INT_EQ(weir_gguf_writer_end(w, err, sizeof err), 0);
  weir_gguf_writer_free(w);
  weir_gguf *g;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(path, &g, err, sizeof err), 0);
  const weir_gguf_tensor *b = weir_gguf_find_tensor(g, "b");
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT(memcmp(b->t.data, bytes + 102, 128) == 0);
  CU_ASSERT(memcmp(weir_gguf_find_tensor(g, "a")->t.data, bytes, 102) == 0);
  weir_gguf_close(g);
  /* Too few bytes is an error at end. */
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  WT_ASSERT_INT_EQ(weir_gguf_add_tensor(w, "a", WEIR_DTYPE_Q8_0, 2, ne, NULL), 0);
  WT_ASSERT_INT_EQ(weir_gguf_writer_begin(w, path, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_gguf_writer_put(w, bytes, 10), 0);
  WT_ASSERT_INT_EQ(weir_gguf_writer_end(w, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "0 of 1 tensors");
  weir_gguf_writer_free(w);
  free(path);
}

static void test_quantize_roundtrip(void) {
  float src[256], dst[256];
  uint8_t q[256 * 4];
  for (int i = 0; i < 256; i++) src[i] = rndf() * 3.0f;
  src[5] = 0;
  const weir_dtype types[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16,
                              WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1};
  /* Worst error relative to the block's largest magnitude (3.0). */
  const double tol[] = {0, 3.0 / 2048, 3.0 / 128, 3.0 / 127 * 0.51 + 3.0 / 2048,
                        3.0 / 8 + 0.01, 6.0 / 15 * 0.51 + 0.01};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    WT_ASSERT_INT_EQ(weir_quantize_row(types[t], src, q, 256), 0);
    WT_ASSERT_INT_EQ(weir_dequantize_row(types[t], q, dst, 256), 0);
    double worst = 0;
    for (int i = 0; i < 256; i++) worst = fmax(worst, fabs((double)dst[i] - src[i]));
    if (worst > tol[t])
      fprintf(stderr, "\n  %s: worst error %g > %g\n", weir_dtype_name(types[t]), worst, tol[t]);
    CU_ASSERT(worst <= tol[t]);
  }
  WT_ASSERT_INT_EQ(weir_quantize_row(WEIR_DTYPE_Q8_0, src, q, 33), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_quantize_row(WEIR_DTYPE_I64, src, q, 32), WEIR_E_NOTSUP);
  /* Half-float edge cases: exact values, rounding to even, subnormals, overflow. */
  CU_ASSERT_EQUAL(weir_f32_to_f16(1.0f), 0x3c00);
  CU_ASSERT_EQUAL(weir_f32_to_f16(-2.0f), 0xc000);
  CU_ASSERT_EQUAL(weir_f32_to_f16(65504.0f), 0x7bff);
  CU_ASSERT_EQUAL(weir_f32_to_f16(1e6f), 0x7c00);
  CU_ASSERT_EQUAL(weir_f32_to_f16(5.9604645e-8f), 0x0001);
  CU_ASSERT_EQUAL(weir_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
  CU_ASSERT_EQUAL(weir_f16_to_f32(0x0001), 5.9604645e-8f);
  CU_ASSERT_EQUAL(weir_f16_to_f32(0x3555), 0.333251953125f);
  for (uint32_t h = 0; h < 0x7c00; h++) /* every finite positive half survives both ways */
    if (weir_f32_to_f16(weir_f16_to_f32((uint16_t)h)) != h) {
      fprintf(stderr, "\n  half 0x%04x does not round-trip\n", h);
      CU_FAIL("half round trip");
      break;
    }
  CU_ASSERT_EQUAL(weir_f32_to_bf16(1.0f), 0x3f80);
  CU_ASSERT_EQUAL(weir_bf16_to_f32(0xc040), -3.0f);
}

/* ---- a small valid Llama model, written by the writer ---- */

typedef struct tiny_cfg {
  const char *arch;
  int layers, dim, heads, kv_heads, ff, vocab;
  int tied, bias, drop; /* drop: leave out blk.<layers-1>.ffn_down.weight */
  int wrong_shape;      /* write blk.0.attn_k.weight with n_embd rows */
} tiny_cfg;

static char *write_tiny(const tiny_cfg *c, const char *fname) {
  weir_gguf_writer *w;
  char key[128], name[64];
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  weir_gguf_add_str(w, "general.architecture", c->arch);
#define K(s) (snprintf(key, sizeof key, "%s.%s", c->arch, s), key)
  weir_gguf_add_u32(w, K("context_length"), 256);
  weir_gguf_add_u32(w, K("embedding_length"), (uint32_t)c->dim);
  weir_gguf_add_u32(w, K("block_count"), (uint32_t)c->layers);
  weir_gguf_add_u32(w, K("feed_forward_length"), (uint32_t)c->ff);
  weir_gguf_add_u32(w, K("attention.head_count"), (uint32_t)c->heads);
  weir_gguf_add_u32(w, K("attention.head_count_kv"), (uint32_t)c->kv_heads);
  weir_gguf_add_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f);
  weir_gguf_add_f32(w, K("rope.scaling.factor"), 2.0f);
#undef K
  const char **toks = calloc((size_t)c->vocab, sizeof *toks);
  char **owned = calloc((size_t)c->vocab, sizeof *owned);
  for (int i = 0; i < c->vocab; i++) toks[i] = owned[i] = wt_strf("tok%d", i);
  weir_gguf_add_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, (uint64_t)c->vocab);
  float *zero = calloc((size_t)(c->dim * (c->dim > c->ff ? c->dim : c->ff) * 4 + c->vocab * c->dim), 4);
  int64_t kv = (int64_t)c->kv_heads * (c->dim / c->heads);
  int64_t ne[2];
#define T2(n, a, b) (ne[0] = (a), ne[1] = (b), weir_gguf_add_tensor(w, n, WEIR_DTYPE_F32, 2, ne, zero))
#define T1(n, a) (ne[0] = (a), weir_gguf_add_tensor(w, n, WEIR_DTYPE_F32, 1, ne, zero))
#define B(s) (snprintf(name, sizeof name, "blk.%d.%s", l, s), name)
  T2("token_embd.weight", c->dim, c->vocab);
  T1("output_norm.weight", c->dim);
  if (!c->tied) T2("output.weight", c->dim, c->vocab);
  for (int l = 0; l < c->layers; l++) {
    T1(B("attn_norm.weight"), c->dim);
    T2(B("attn_q.weight"), c->dim, c->dim);
    T2(B("attn_k.weight"), c->dim, (c->wrong_shape && l == 0) ? c->dim : kv);
    T2(B("attn_v.weight"), c->dim, kv);
    if (c->bias) {
      T1(B("attn_q.bias"), c->dim);
      T1(B("attn_k.bias"), kv);
      T1(B("attn_v.bias"), kv);
    }
    T2(B("attn_output.weight"), c->dim, c->dim);
    T1(B("ffn_norm.weight"), c->dim);
    T2(B("ffn_gate.weight"), c->dim, c->ff);
    T2(B("ffn_up.weight"), c->dim, c->ff);
    if (!(c->drop && l == c->layers - 1)) T2(B("ffn_down.weight"), c->ff, c->dim);
  }
#undef T1
#undef T2
#undef B
  char *path = wt_strf("%s/%s", g_dir, fname);
  char err[512];
  int rc = weir_gguf_write_file(w, path, err, sizeof err);
  CU_ASSERT_EQUAL(rc, 0);
  weir_gguf_writer_free(w);
  for (int i = 0; i < c->vocab; i++) free(owned[i]);
  free(owned);
  free(toks);
  free(zero);
  return path;
}


/* A file whose hyperparameters weir_gguf_llama_hparams must refuse. embd 0: no llama keys at
 * all; heads 0: no head_count; rope_scaling NULL: none. */
typedef struct bad_hparams {
  const char *file, *arch;
  uint32_t embd, heads;
  const char *rope_scaling;
  int want_rc;
  const char *want_err;
} bad_hparams;

static const bad_hparams k_bad_hparams[] = {
    {"nohead.gguf", "llama", 30, 0, NULL, WEIR_E_NOTFOUND,
     "required key 'llama.attention.head_count' is missing"},
    {"gpt2.gguf", "gpt2", 0, 0, NULL, WEIR_E_NOTSUP, "architecture 'gpt2' is not supported"},
    {"badheads.gguf", "llama", 30, 4, NULL, WEIR_E_FORMAT,
     "embedding_length 30 is not a multiple of head_count 4"},
    {"longrope.gguf", "llama", 32, 4, "longrope", WEIR_E_NOTSUP,
     "llama.rope.scaling.type 'longrope' is not supported"},
};

/* Writes c's metadata (one block, 16 context, 8 ffn; a scaling factor of 4 with a rope
 * scaling type), opens it, and checks hparams' status and message. */
static void check_hparams_refused(const bad_hparams *c) {
  char err[512];
  weir_gguf *g;
  weir_llama_hparams hp;
  weir_gguf_writer *w;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  weir_gguf_add_str(w, "general.architecture", c->arch);
  if (c->embd) {
    weir_gguf_add_u32(w, "llama.context_length", 16);
    weir_gguf_add_u32(w, "llama.embedding_length", c->embd);
    weir_gguf_add_u32(w, "llama.block_count", 1);
    weir_gguf_add_u32(w, "llama.feed_forward_length", 8);
  }
  if (c->heads) weir_gguf_add_u32(w, "llama.attention.head_count", c->heads);
  if (c->rope_scaling) {
    weir_gguf_add_str(w, "llama.rope.scaling.type", c->rope_scaling);
    weir_gguf_add_f32(w, "llama.rope.scaling.factor", 4.0f);
  }
  char *path = wt_strf("%s/%s", g_dir, c->file);
  WT_ASSERT_INT_EQ(weir_gguf_write_file(w, path, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(path, &g, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_gguf_llama_hparams(g, &hp, err, sizeof err), c->want_rc);
  WT_ASSERT_STR_CONTAINS(err, c->want_err);
  weir_gguf_close(g);
  weir_gguf_writer_free(w);
  free(path);
}

static void test_llama_hparams_and_check(void) {
  tiny_cfg c = {"qwen2", 2, 32, 4, 2, 48, 40, 1, 1, 0, 0};
  char *path = write_tiny(&c, "qwen.gguf");
  weir_gguf *g;
  char err[512] = "";
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(path, &g, err, sizeof err), 0);
  weir_llama_hparams hp;
  WT_ASSERT_INT_EQ(weir_gguf_llama_hparams(g, &hp, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(hp.arch, WEIR_ARCH_QWEN2);
  CU_ASSERT_STRING_EQUAL(hp.arch_name, "qwen2");
  WT_ASSERT_INT_EQ(hp.n_ctx_train, 256);
  WT_ASSERT_INT_EQ(hp.n_embd, 32);
  WT_ASSERT_INT_EQ(hp.n_layer, 2);
  WT_ASSERT_INT_EQ(hp.n_ff, 48);
  WT_ASSERT_INT_EQ(hp.n_head, 4);
  WT_ASSERT_INT_EQ(hp.n_head_kv, 2);
  WT_ASSERT_INT_EQ(hp.head_dim, 8);
  WT_ASSERT_INT_EQ(hp.n_rot, 8); /* default: the head size */
  WT_ASSERT_INT_EQ(hp.n_vocab, 40);
  CU_ASSERT_EQUAL(hp.rope_freq_base, 10000.0f); /* default */
  CU_ASSERT_EQUAL(hp.rope_scale, 2.0f);
  CU_ASSERT_EQUAL(hp.rms_eps, 1e-6f);
  WT_ASSERT_INT_EQ(hp.rope_style, WEIR_ROPE_NEOX);
  WT_ASSERT_INT_EQ(hp.has_output, 0);
  WT_ASSERT_INT_EQ(hp.has_qkv_bias, 1);
  int rc = weir_gguf_llama_check(g, &hp, err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  WT_ASSERT_INT_EQ(rc, 0);
  weir_gguf_close(g);
  free(path);

  tiny_cfg c2 = {"llama", 2, 32, 4, 4, 48, 40, 0, 0, 1, 0};
  path = write_tiny(&c2, "dropped.gguf");
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(path, &g, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_gguf_llama_hparams(g, &hp, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(hp.rope_style, WEIR_ROPE_NORM);
  WT_ASSERT_INT_EQ(hp.has_output, 1);
  WT_ASSERT_INT_EQ(hp.has_qkv_bias, 0);
  WT_ASSERT_INT_EQ(weir_gguf_llama_check(g, &hp, err, sizeof err), WEIR_E_NOTFOUND);
  WT_ASSERT_STR_CONTAINS(err, "dropped.gguf");
  WT_ASSERT_STR_CONTAINS(err, "'blk.1.ffn_down.weight' is missing");
  weir_gguf_close(g);
  free(path);

  tiny_cfg c3 = {"mistral", 1, 32, 4, 2, 48, 40, 0, 0, 0, 1};
  path = write_tiny(&c3, "shape.gguf");
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(path, &g, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_gguf_llama_hparams(g, &hp, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(hp.arch, WEIR_ARCH_MISTRAL);
  WT_ASSERT_INT_EQ(weir_gguf_llama_check(g, &hp, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "'blk.0.attn_k.weight' has shape {32, 32}, expected {32, 16}");
  weir_gguf_close(g);
  free(path);

  /* Missing and bad hyperparameters. */
  for (size_t i = 0; i < sizeof k_bad_hparams / sizeof k_bad_hparams[0]; i++)
    check_hparams_refused(&k_bad_hparams[i]);
}

/* ---- malformed files ---- */

static uint8_t *g_base;
static size_t g_base_len;

/* A valid file with metadata of several kinds and three tensors; the malformed cases below
 * mutate copies of its bytes. */
static void build_base(void) {
  weir_gguf_writer *w;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  weir_gguf_add_str(w, "general.architecture", "llama");
  weir_gguf_add_u32(w, "key.aaa", 7);
  weir_gguf_add_u32(w, "key.aab", 8);
  weir_gguf_add_bool(w, "key.flag", 1);
  const char *strs[] = {"one", "two", "three"};
  weir_gguf_add_arr_str(w, "key.strs", strs, NULL, 3);
  int32_t ints[4] = {1, 2, 3, 4};
  weir_gguf_add_arr(w, "key.ints", WEIR_GGUF_I32, ints, 4);
  static float data[4096];
  for (int i = 0; i < 4096; i++) data[i] = (float)i;
  int64_t ne_a[2] = {64, 4}, ne_b[2] = {64, 2}, ne_c[1] = {32};
  weir_gguf_add_tensor(w, "tensor.aaa", WEIR_DTYPE_F32, 2, ne_a, data);
  weir_gguf_add_tensor(w, "tensor.aab", WEIR_DTYPE_Q8_0, 2, ne_b, data);
  weir_gguf_add_tensor(w, "tensor.ccc", WEIR_DTYPE_F16, 1, ne_c, data);
  g_base = write_and_load(w, "base.gguf", &g_base_len, NULL);
  weir_gguf_writer_free(w);
}

/* Opens a mutated copy; returns the status and leaves the message in err. */
static int open_mutated(const uint8_t *buf, size_t len, char *err, size_t errlen) {
  weir_gguf *g = NULL;
  err[0] = 0;
  int rc = weir_gguf_open_buffer(buf, len, "mutant.gguf", &g, err, errlen);
  if (rc == 0) {
    /* A file that opens must be fully usable: touch every view. */
    for (int64_t i = 0; i < weir_gguf_tensor_count(g); i++) {
      const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
      volatile uint8_t sink = 0;
      for (uint64_t k = 0; k < t->nbytes; k += 64) sink ^= ((const uint8_t *)t->t.data)[k];
      (void)sink;
    }
    weir_gguf_close(g);
  } else {
    CU_ASSERT_PTR_NULL(g);
  }
  return rc;
}

static size_t find(const uint8_t *buf, size_t len, const char *s) {
  size_t n = strlen(s);
  for (size_t i = 0; i + n <= len; i++)
    if (memcmp(buf + i, s, n) == 0) return i;
  CU_FAIL_FATAL("marker not found in the base file");
  return 0;
}

static uint8_t *copy_base(void) {
  uint8_t *b = malloc(g_base_len);
  memcpy(b, g_base, g_base_len);
  return b;
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Applies one mutation and checks the status and a phrase of the message. */
#define EXPECT_MUTANT(mutation, want_rc, phrase)                                  \
  do {                                                                           \
    uint8_t *b = copy_base();                                                    \
    char err[512];                                                               \
    mutation;                                                                    \
    WT_ASSERT_INT_EQ(open_mutated(b, g_base_len, err, sizeof err), (want_rc));   \
    WT_ASSERT_STR_CONTAINS(err, "mutant.gguf");                                  \
    WT_ASSERT_STR_CONTAINS(err, (phrase));                                       \
    free(b);                                                                     \
  } while (0)

static void test_base_is_valid(void) {
  char err[512];
  WT_ASSERT_INT_EQ(open_mutated(g_base, g_base_len, err, sizeof err), 0);
}

static void test_truncation_everywhere(void) {
  /* Every proper prefix of the file fails cleanly with a format error naming the file;
   * prefixes that end inside the header, metadata or tensor table say where. */
  char err[512];
  int bad = 0;
  size_t data_start = g_base_len - 1;
  {
    weir_gguf *g;
    CU_ASSERT_EQUAL_FATAL(weir_gguf_open_buffer(g_base, g_base_len, "x", &g, err, sizeof err), 0);
    data_start = weir_gguf_data_offset(g);
    weir_gguf_close(g);
  }
  for (size_t len = 0; len < g_base_len; len++) {
    uint8_t *b = malloc(len ? len : 1);
    memcpy(b, g_base, len);
    int rc = open_mutated(b, len, err, sizeof err);
    if (rc != WEIR_E_FORMAT || !strstr(err, "mutant.gguf")) bad++;
    if (len >= 24 && len >= data_start && !strstr(err, "beyond the end of the file")) bad++;
    if (len < 24 && !strstr(err, "truncated")) bad++;
    free(b);
  }
  WT_ASSERT_INT_EQ(bad, 0);
}

static void test_truncated_file_on_disk(void) {
  char *path = wt_strf("%s/trunc.gguf", g_dir);
  CU_ASSERT_EQUAL_FATAL(wt_write_file(path, (const char *)g_base, g_base_len - 100), 0);
  weir_gguf *g = NULL;
  char err[512];
  WT_ASSERT_INT_EQ(weir_gguf_open(path, &g, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, path);
  WT_ASSERT_STR_CONTAINS(err, "truncated");
  CU_ASSERT_PTR_NULL(g);
  CU_ASSERT_EQUAL_FATAL(wt_write_file(path, "GGUF", 4), 0);
  WT_ASSERT_INT_EQ(weir_gguf_open(path, &g, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "too short");
  free(path);
  path = wt_strf("%s/does-not-exist.gguf", g_dir);
  WT_ASSERT_INT_EQ(weir_gguf_open(path, &g, err, sizeof err), WEIR_E_NOTFOUND);
  WT_ASSERT_STR_CONTAINS(err, "does-not-exist.gguf: cannot open");
  free(path);
  WT_ASSERT_INT_EQ(weir_gguf_open("/dev/null", &g, err, sizeof err), WEIR_E_IO);
  WT_ASSERT_STR_CONTAINS(err, "not a regular file");
  /* A directory is not a GGUF; one holding a Hugging Face model is named as such, with how
   * to convert it. */
  WT_ASSERT_INT_EQ(weir_gguf_open(g_dir, &g, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "a directory, not a GGUF file");
  char *hf = wt_strf("%s/hf-model", g_dir), *cfgjson = wt_strf("%s/hf-model/config.json", g_dir);
  CU_ASSERT_EQUAL_FATAL(mkdir(hf, 0700), 0);
  CU_ASSERT_EQUAL_FATAL(wt_write_file(cfgjson, "{\"architectures\": []}", 21), 0);
  WT_ASSERT_INT_EQ(weir_gguf_open(hf, &g, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "a Hugging Face model directory, not a GGUF file");
  WT_ASSERT_STR_CONTAINS(err, "convert_hf_to_gguf.py");
  CU_ASSERT_PTR_NULL(g);
  /* The magic is checked before the size: 18 bytes of text are not a GGUF, not "truncated". */
  path = wt_strf("%s/notes.gguf", g_dir);
  CU_ASSERT_EQUAL_FATAL(wt_write_file(path, "just some notes.\n", 18), 0);
  WT_ASSERT_INT_EQ(weir_gguf_open(path, &g, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "not a GGUF file");
  CU_ASSERT_PTR_NULL(strstr(err, "truncated"));
  free(path);
  /* A safetensors file: an 8-byte header length, then its JSON header. */
  path = wt_strf("%s/model.safetensors", g_dir);
  static const char st[] = "\x08\0\0\0\0\0\0\0{\"a\":{}}";
  CU_ASSERT_EQUAL_FATAL(wt_write_file(path, st, sizeof st - 1), 0);
  WT_ASSERT_INT_EQ(weir_gguf_open(path, &g, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "a safetensors file, not a GGUF file");
  WT_ASSERT_STR_CONTAINS(err, "convert_hf_to_gguf.py");
  remove(path);
  remove(cfgjson);
  rmdir(hf);
  free(path);
  free(hf);
  free(cfgjson);
}

static void test_header_errors(void) {
  EXPECT_MUTANT(b[0] = 'X', WEIR_E_FORMAT, "bad magic");
  EXPECT_MUTANT(put_u32(b + 4, 4), WEIR_E_FORMAT, "unsupported GGUF version 4");
  EXPECT_MUTANT(put_u32(b + 4, 1), WEIR_E_NOTSUP, "unsupported GGUF version 1");
  EXPECT_MUTANT(put_u64(b + 8, 1ull << 60), WEIR_E_FORMAT, "tensor count");
  EXPECT_MUTANT(put_u64(b + 16, 1ull << 60), WEIR_E_FORMAT, "metadata count");
  EXPECT_MUTANT(put_u64(b + 16, 1000), WEIR_E_FORMAT, "");
  /* Version 2 has the same layout and is accepted. */
  uint8_t *b = copy_base();
  char err[512];
  put_u32(b + 4, 2);
  WT_ASSERT_INT_EQ(open_mutated(b, g_base_len, err, sizeof err), 0);
  free(b);
}

static void test_metadata_errors(void) {
  size_t k = find(g_base, g_base_len, "key.aaa");
  size_t f = find(g_base, g_base_len, "key.flag");
  size_t s = find(g_base, g_base_len, "key.strs");
  size_t in = find(g_base, g_base_len, "key.ints");
  /* The key's length prefix, then its type after the name. */
  EXPECT_MUTANT(put_u64(b + k - 8, 1ull << 62), WEIR_E_FORMAT, "string length");
  EXPECT_MUTANT(put_u64(b + k - 8, 0), WEIR_E_FORMAT, "");
  EXPECT_MUTANT(put_u32(b + k + 7, 99), WEIR_E_FORMAT, "unknown value type 99");
  EXPECT_MUTANT(b[k + 3] = 0, WEIR_E_FORMAT, "NUL byte");
  EXPECT_MUTANT(b[k + 6] = 'b', WEIR_E_FORMAT, "duplicate metadata key 'key.aab'");
  EXPECT_MUTANT(b[f + 8 + 4] = 7, WEIR_E_FORMAT, "bool value 7 is neither 0 nor 1");
  /* key.strs: type(4) elem type(4) count(8) then strings. */
  EXPECT_MUTANT(put_u64(b + s + 8 + 8, 1ull << 61), WEIR_E_FORMAT,
                "array of 2305843009213693952 strings does not fit");
  EXPECT_MUTANT(put_u64(b + s + 8 + 16, 1ull << 40), WEIR_E_FORMAT, "string length");
  EXPECT_MUTANT(put_u32(b + s + 8 + 4, 77), WEIR_E_FORMAT, "unknown array element type 77");
  EXPECT_MUTANT(put_u64(b + in + 8 + 8, 1ull << 62), WEIR_E_FORMAT,
                "array of 4611686018427387904 i32 elements does not fit");
}

static void test_alignment_errors(void) {
  weir_gguf_writer *w;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  WT_ASSERT_INT_EQ(weir_gguf_writer_set_alignment(w, 3), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_gguf_add_u32(w, "general.alignment", 48), 0); /* by hand */
  size_t len;
  uint8_t *buf = write_and_load(w, "align48.gguf", &len, NULL);
  char err[512];
  WT_ASSERT_INT_EQ(open_mutated(buf, len, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "general.alignment must be a power of two");
  weir_gguf_writer_free(w);
  free(buf);
  /* Nested arrays deeper than the limit. */
  CU_ASSERT_EQUAL_FATAL(weir_gguf_writer_new(&w), 0);
  uint8_t deep[12 * 20];
  for (int i = 0; i < 20; i++) {
    put_u32(deep + 12 * i, i == 19 ? WEIR_GGUF_U8 : WEIR_GGUF_ARRAY);
    put_u64(deep + 12 * i + 4, i == 19 ? 0 : 1);
  }
  WT_ASSERT_INT_EQ(weir_gguf_add_raw(w, "deep", WEIR_GGUF_ARRAY, deep, sizeof deep), 0);
  buf = write_and_load(w, "deep.gguf", &len, NULL);
  WT_ASSERT_INT_EQ(open_mutated(buf, len, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "nested deeper");
  weir_gguf_writer_free(w);
  free(buf);
}

static void test_tensor_errors(void) {
  size_t a = find(g_base, g_base_len, "tensor.aaa") + 10; /* n_dims of tensor.aaa */
  size_t q = find(g_base, g_base_len, "tensor.aab") + 10;
  size_t c = find(g_base, g_base_len, "tensor.ccc") + 10;
  /* Layout after the name: n_dims u32, ne u64 x n_dims, type u32, offset u64. */
  EXPECT_MUTANT(put_u32(b + a, 5), WEIR_E_FORMAT, "has 5 dimensions");
  EXPECT_MUTANT(put_u32(b + a, 0), WEIR_E_FORMAT, "has 0 dimensions");
  EXPECT_MUTANT(put_u64(b + a + 4, 0), WEIR_E_FORMAT, "dimension 0 is 0");
  EXPECT_MUTANT(put_u64(b + a + 4, 1ull << 63), WEIR_E_FORMAT, "dimension 0 is");
  EXPECT_MUTANT((put_u64(b + a + 4, 1ull << 40), put_u64(b + a + 12, 1ull << 40)),
                WEIR_E_FORMAT, "element count overflows");
  EXPECT_MUTANT(put_u64(b + a + 12, 1ull << 56), WEIR_E_FORMAT, "byte size overflows");
  EXPECT_MUTANT(put_u64(b + a + 12, 1ull << 30), WEIR_E_FORMAT, "beyond the end of the file");
  EXPECT_MUTANT(put_u32(b + a + 20, 16), WEIR_E_FORMAT,
                "type 16 (iq2_xxs), which weir does not read (weights: f32, f16, bf16, q8_0, "
                "q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)");
  /* tensor.aaa is {64, 4}: as q4_K its row of 64 is not a whole super-block. */
  EXPECT_MUTANT(put_u32(b + a + 20, 12), WEIR_E_FORMAT,
                "row of 64 elements is not a multiple of the q4_K block of 256");
  EXPECT_MUTANT(put_u32(b + a + 20, 1000), WEIR_E_FORMAT, "type 1000 (unknown)");
  EXPECT_MUTANT(put_u64(b + a + 24, 1ull << 40), WEIR_E_FORMAT, "beyond the end of the file");
  EXPECT_MUTANT(put_u64(b + a + 24, 16), WEIR_E_FORMAT,
                "offset 16 is not a multiple of the alignment 32");
  EXPECT_MUTANT(put_u64(b + q + 4, 48), WEIR_E_FORMAT,
                "row of 48 elements is not a multiple of the q8_0 block of 32");
  EXPECT_MUTANT(put_u64(b + c + 4 + 8 + 4, 0), WEIR_E_FORMAT,
                "tensors 'tensor.aaa' and 'tensor.ccc' overlap");
  EXPECT_MUTANT(b[q - 1] = 'a', WEIR_E_FORMAT, "duplicate tensor name 'tensor.aaa'");
  EXPECT_MUTANT(b[q - 3] = 0, WEIR_E_FORMAT, "tensor name contains a NUL byte");
  EXPECT_MUTANT(put_u64(b + q - 18, 1ull << 62), WEIR_E_FORMAT, "string length");
}

static void test_random_mutations(void) {
  /* Random byte flips and splices over the header and tables: each open either succeeds
   * (and every view is readable) or fails with a message; never a crash or a leak. */
  char err[512];
  size_t table_end = 0;
  {
    weir_gguf *g;
    CU_ASSERT_EQUAL_FATAL(weir_gguf_open_buffer(g_base, g_base_len, "x", &g, err, sizeof err), 0);
    table_end = weir_gguf_data_offset(g);
    weir_gguf_close(g);
  }
  int failed_without_message = 0;
  for (int it = 0; it < 20000; it++) {
    uint8_t *b = copy_base();
    int n = 1 + (int)(rnd() % 4);
    for (int k = 0; k < n; k++) {
      size_t pos = (size_t)(rnd() % table_end);
      switch (rnd() % 4) {
      case 0: b[pos] = (uint8_t)rnd(); break;
      case 1: b[pos] ^= (uint8_t)(1u << (rnd() % 8)); break;
      case 2: if (pos + 8 <= g_base_len) put_u64(b + pos, rnd() >> (rnd() % 64)); break;
      default: if (pos + 4 <= g_base_len) put_u32(b + pos, (uint32_t)rnd() % 40); break;
      }
    }
    size_t len = rnd() % 8 == 0 ? (size_t)(rnd() % g_base_len) : g_base_len;
    int rc = open_mutated(b, len, err, sizeof err);
    if (rc != 0 && err[0] == 0) failed_without_message++;
    free(b);
  }
  WT_ASSERT_INT_EQ(failed_without_message, 0);
}

/* ---- mkmodel, through the real binary ---- */

static int run_mkmodel(const char *const *args, char **out) {
  char *argv[40];
  int n = 0;
  argv[n++] = (char *)WT_WEIR;
  argv[n++] = (char *)"mkmodel";
  for (; *args && n < 39; args++) argv[n++] = (char *)*args;
  argv[n] = NULL;
  return wt_run(argv, out, 60000);
}

static weir_gguf *open_ok(const char *path) {
  weir_gguf *g = NULL;
  char err[512] = "";
  int rc = weir_gguf_open(path, &g, err, sizeof err);
  if (rc) fprintf(stderr, "\n  open %s: %s\n", path, err);
  return g;
}

static void check_str_key(weir_gguf *g, const char *key, const char *want) {
  weir_gguf_str s;
  int rc = weir_gguf_get_str(g, key, &s);
  WT_ASSERT_INT_EQ(rc, 0);
  if (rc == 0) {
    WT_ASSERT_INT_EQ(s.len, strlen(want));
    CU_ASSERT(s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0);
  }
}

static void test_mkmodel_tiny(void) {
  char *path = wt_strf("%s/tiny.gguf", g_dir), *out = NULL;
  const char *args[] = {"--preset", "tiny", "--out", path, NULL};
  int rc = run_mkmodel(args, &out);
  if (rc) fprintf(stderr, "\n%s\n", out);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  free(out);
  weir_gguf *g = open_ok(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  weir_llama_hparams hp;
  char err[512];
  WT_ASSERT_INT_EQ(weir_gguf_llama_hparams(g, &hp, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(hp.arch, WEIR_ARCH_LLAMA);
  WT_ASSERT_INT_EQ(hp.n_embd, 64);
  WT_ASSERT_INT_EQ(hp.n_layer, 2);
  WT_ASSERT_INT_EQ(hp.n_head, 4);
  WT_ASSERT_INT_EQ(hp.n_head_kv, 2);
  WT_ASSERT_INT_EQ(hp.n_ff, 192);
  WT_ASSERT_INT_EQ(hp.n_vocab, 512);
  WT_ASSERT_INT_EQ(hp.n_ctx_train, 2048);
  WT_ASSERT_INT_EQ(hp.has_output, 1);
  CU_ASSERT_EQUAL(hp.rope_freq_base, 10000.0f);
  rc = weir_gguf_llama_check(g, &hp, err, sizeof err);
  if (rc) fprintf(stderr, "\n  %s\n", err);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_INT_EQ(weir_gguf_find_tensor(g, "blk.0.attn_q.weight")->t.dtype, WEIR_DTYPE_F16);
  WT_ASSERT_INT_EQ(weir_gguf_find_tensor(g, "blk.0.attn_norm.weight")->t.dtype, WEIR_DTYPE_F32);

  /* The tokenizer: SentencePiece layout with byte fallback and the chatml control tokens. */
  check_str_key(g, "tokenizer.ggml.model", "llama");
  weir_gguf_arr toks, scores, types;
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "tokenizer.ggml.scores", &scores), 0);
  WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "tokenizer.ggml.token_type", &types), 0);
  WT_ASSERT_INT_EQ(toks.n, 512);
  WT_ASSERT_INT_EQ(scores.n, 512);
  WT_ASSERT_INT_EQ(types.n, 512);
  weir_gguf_str s;
  int64_t ty;
  weir_gguf_arr_str(&toks, 0, &s);
  CU_ASSERT(s.len == 5 && memcmp(s.ptr, "<unk>", 5) == 0);
  weir_gguf_arr_str(&toks, 1, &s);
  CU_ASSERT(s.len == 3 && memcmp(s.ptr, "<s>", 3) == 0);
  weir_gguf_arr_str(&toks, 3 + 0x41, &s);
  CU_ASSERT(s.len == 6 && memcmp(s.ptr, "<0x41>", 6) == 0);
  weir_gguf_arr_i64(&types, 0, &ty);
  WT_ASSERT_INT_EQ(ty, 2);
  weir_gguf_arr_i64(&types, 1, &ty);
  WT_ASSERT_INT_EQ(ty, 3);
  weir_gguf_arr_i64(&types, 100, &ty);
  WT_ASSERT_INT_EQ(ty, 6);
  int found_space_piece = 0, found_im_end = -1;
  float prev = 1;
  int scores_descend = 1;
  for (uint64_t i = 0; i < toks.n; i++) {
    weir_gguf_arr_str(&toks, i, &s);
    weir_gguf_arr_i64(&types, i, &ty);
    if (ty == 1 && s.len > 3 && memcmp(s.ptr, "\xe2\x96\x81", 3) == 0) found_space_piece++;
    if (s.len == 10 && memcmp(s.ptr, "<|im_end|>", 10) == 0) {
      found_im_end = (int)i;
      WT_ASSERT_INT_EQ(ty, 3);
    }
    float sc;
    weir_gguf_arr_f32(&scores, i, &sc);
    if (ty == 1) {
      if (sc >= prev) scores_descend = 0;
      prev = sc;
    }
  }
  CU_ASSERT(found_space_piece > 20);
  CU_ASSERT(scores_descend);
  CU_ASSERT(found_im_end > 0);
  uint32_t u;
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u), 0);
  WT_ASSERT_INT_EQ(u, 1);
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u), 0);
  WT_ASSERT_INT_EQ(u, found_im_end);
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &u), 0);
  WT_ASSERT_INT_EQ(u, 0);
  WT_ASSERT_INT_EQ(weir_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u), 0);
  int bos;
  WT_ASSERT_INT_EQ(weir_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bos), 0);
  WT_ASSERT_INT_EQ(bos, 1);
  WT_ASSERT_INT_EQ(weir_gguf_get_str(g, "tokenizer.chat_template", &s), 0);
  char *tpl = strndup(s.ptr, s.len);
  WT_ASSERT_STR_CONTAINS(tpl, "<|im_start|>");
  WT_ASSERT_STR_CONTAINS(tpl, "add_generation_prompt");
  free(tpl);

  /* Weights are well-conditioned: f16 values finite, spread but not huge. */
  const weir_gguf_tensor *q = weir_gguf_find_tensor(g, "blk.1.ffn_up.weight");
  float row[64];
  double ss = 0;
  for (int r = 0; r < 16; r++) {
    weir_dequantize_row(WEIR_DTYPE_F16, (const uint8_t *)q->t.data + q->t.nb[1] * (size_t)r,
                        row, 64);
    for (int i = 0; i < 64; i++) ss += (double)row[i] * row[i];
  }
  double std = sqrt(ss / (16 * 64));
  CU_ASSERT(std > 0.5 / 8 && std < 2.0 / 8); /* ~ 1/sqrt(64) */
  const weir_gguf_tensor *n = weir_gguf_find_tensor(g, "output_norm.weight");
  const float *nw = n->t.data;
  for (int i = 0; i < 64; i++) CU_ASSERT(nw[i] > 0.5f && nw[i] < 1.5f);
  weir_gguf_close(g);

  /* Same seed: the same bytes; another seed: different weights. */
  char *path2 = wt_strf("%s/tiny2.gguf", g_dir), *path3 = wt_strf("%s/tiny3.gguf", g_dir);
  const char *args2[] = {"--preset", "tiny", "--out", path2, NULL};
  const char *args3[] = {"--out", path3, "--seed", "2", NULL};
  CU_ASSERT_EQUAL(run_mkmodel(args2, &out), 0);
  free(out);
  CU_ASSERT_EQUAL(run_mkmodel(args3, &out), 0);
  free(out);
  size_t l1, l2, l3;
  char *b1 = wt_read_file(path, &l1), *b2 = wt_read_file(path2, &l2), *b3 = wt_read_file(path3, &l3);
  CU_ASSERT_FATAL(b1 && b2 && b3);
  WT_ASSERT_INT_EQ(l1, l2);
  CU_ASSERT(l1 == l2 && memcmp(b1, b2, l1) == 0);
  WT_ASSERT_INT_EQ(l1, l3);
  CU_ASSERT(l1 == l3 && memcmp(b1, b3, l1) != 0);
  free(b1);
  free(b2);
  free(b3);
  free(path);
  free(path2);
  free(path3);
}

static void test_mkmodel_variants(void) {
  static const struct {
    const char *arch, *type, *tok, *tpl, *tied, *marker;
  } cases[] = {
      {"qwen2", "q8_0", "gpt2", "chatml", "", "<|im_start|>"},
      {"mistral", "q4_0", "llama", "mistral", "--tied", "[INST]"},
      {"llama", "bf16", "gpt2", "llama3", "", "<|start_header_id|>"},
      {"llama", "f32", "llama", "llama2", "--tied", "<<SYS>>"},
      {"llama", "f16", "gpt2", "zephyr", "", "<|user|>"},
      {"qwen2", "f16", "llama", "gemma", "", "<start_of_turn>"},
      {"llama", "q8_0", "llama", "phi3", "", "<|end|>"},
      {"llama", "f16", "llama", "none", "", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *path = wt_strf("%s/var%zu.gguf", g_dir, i), *out = NULL;
    const char *args[] = {"--arch", cases[i].arch, "--type", cases[i].type, "--tokenizer",
                          cases[i].tok, "--chat-template", cases[i].tpl, "--dim", "96",
                          "--heads", "6", "--kv-heads", "2", "--ffn", "160", "--vocab", "700",
                          "--layers", "3", "--ctx", "4096", "--rope-base", "50000",
                          "--name", "variant", "--out", path,
                          cases[i].tied[0] ? cases[i].tied : NULL, NULL};
    int rc = run_mkmodel(args, &out);
    if (rc) fprintf(stderr, "\n  case %zu: %s\n", i, out);
    WT_ASSERT_INT_EQ(rc, 0);
    free(out);
    weir_gguf *g = open_ok(path);
    CU_ASSERT_PTR_NOT_NULL(g);
    if (!g) {
      free(path);
      continue;
    }
    weir_llama_hparams hp;
    char err[512];
    WT_ASSERT_INT_EQ(weir_gguf_llama_hparams(g, &hp, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(hp.arch_name, cases[i].arch);
    WT_ASSERT_INT_EQ(hp.n_embd, 96);
    WT_ASSERT_INT_EQ(hp.n_layer, 3);
    WT_ASSERT_INT_EQ(hp.n_head, 6);
    WT_ASSERT_INT_EQ(hp.n_head_kv, 2);
    WT_ASSERT_INT_EQ(hp.head_dim, 16);
    WT_ASSERT_INT_EQ(hp.n_ff, 160);
    WT_ASSERT_INT_EQ(hp.n_vocab, 700);
    WT_ASSERT_INT_EQ(hp.n_ctx_train, 4096);
    CU_ASSERT_EQUAL(hp.rope_freq_base, 50000.0f);
    WT_ASSERT_INT_EQ(hp.has_output, cases[i].tied[0] ? 0 : 1);
    WT_ASSERT_INT_EQ(hp.has_qkv_bias, strcmp(cases[i].arch, "qwen2") == 0);
    rc = weir_gguf_llama_check(g, &hp, err, sizeof err);
    if (rc) fprintf(stderr, "\n  case %zu: %s\n", i, err);
    WT_ASSERT_INT_EQ(rc, 0);
    weir_dtype want;
    if (!strcmp(cases[i].type, "q8_0")) want = WEIR_DTYPE_Q8_0;
    else if (!strcmp(cases[i].type, "q4_0")) want = WEIR_DTYPE_Q4_0;
    else if (!strcmp(cases[i].type, "bf16")) want = WEIR_DTYPE_BF16;
    else if (!strcmp(cases[i].type, "f32")) want = WEIR_DTYPE_F32;
    else want = WEIR_DTYPE_F16;
    WT_ASSERT_INT_EQ(weir_gguf_find_tensor(g, "blk.2.ffn_down.weight")->t.dtype, want);
    check_str_key(g, "general.name", "variant");
    check_str_key(g, "tokenizer.ggml.model", cases[i].tok);
    weir_gguf_str s;
    if (cases[i].marker) {
      WT_ASSERT_INT_EQ(weir_gguf_get_str(g, "tokenizer.chat_template", &s), 0);
      char *tpl = strndup(s.ptr, s.len);
      WT_ASSERT_STR_CONTAINS(tpl, cases[i].marker);
      free(tpl);
    } else {
      CU_ASSERT_PTR_NULL(weir_gguf_find_key(g, "tokenizer.chat_template"));
    }
    weir_gguf_arr toks, merges;
    WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
    if (!strcmp(cases[i].tok, "gpt2")) {
      /* Byte-level BPE: merges of two existing tokens, whose concatenation is a token. */
      WT_ASSERT_INT_EQ(weir_gguf_get_arr(g, "tokenizer.ggml.merges", &merges), 0);
      CU_ASSERT(merges.n > 300);
      CU_ASSERT_PTR_NULL(weir_gguf_find_key(g, "tokenizer.ggml.scores"));
      weir_gguf_arr_str(&merges, 0, &s);
      CU_ASSERT(memchr(s.ptr, ' ', s.len) != NULL);
      weir_gguf_arr_str(&toks, 'A', &s);
      CU_ASSERT(s.len == 1 && s.ptr[0] == 'A');
      weir_gguf_arr_str(&toks, ' ', &s);
      CU_ASSERT(s.len == 2 && memcmp(s.ptr, "\xc4\xa0", 2) == 0);
      uint32_t bos, eos;
      weir_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos);
      weir_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos);
      weir_gguf_arr_str(&toks, bos, &s);
      CU_ASSERT(!strcmp(cases[i].tpl, "llama3") ||
                (s.len == 13 && memcmp(s.ptr, "<|endoftext|>", 13) == 0));
      (void)eos;
    }
    weir_gguf_close(g);
    free(path);
  }
}

/* `--arch` for each family: its tensors pass the graph check, its own tokenizer style and
 * template by default, its keys; and the family presets (one layer, a small vocabulary). */
static void test_mkmodel_families(void) {
  static const struct {
    const char *args, *arch, *tok, *marker;
    int head_dim, n_swa, qk_norm, post_norms, fused, rope_freqs, longrope, yarn;
  } cases[] = {
      {"--arch qwen3 --head-dim 32", "qwen3", "gpt2", "<|im_start|>", 32, 0, 1, 0, 0, 0, 0, 0},
      {"--arch gemma2 --head-dim 24", "gemma2", "llama", "<start_of_turn>", 24, 4096, 0, 1, 0,
       0, 0, 0},
      {"--arch gemma3 --swa 64", "gemma3", "llama", "<start_of_turn>", 16, 64, 1, 1, 0, 0, 0, 0},
      {"--arch phi3 --longrope --orig-ctx 512", "phi3", "llama", "<|end|>", 16, 0, 0, 0, 1, 0,
       1, 0},
      {"--rope-freqs --tokenizer gpt2 --chat-template llama3", "llama", "gpt2",
       "<|start_header_id|>", 16, 0, 0, 0, 0, 1, 0, 0},
      {"--arch mistral --yarn 4 --swa 128", "mistral", "llama", "<|im_start|>", 16, 128, 0, 0, 0,
       0, 0, 1},
      {"--preset gemma3-1b --layers 1 --vocab 700 --type q8_0", "gemma3", "llama",
       "<start_of_turn>", 256, 512, 1, 1, 0, 0, 0, 0},
      {"--preset qwen3-0.6b --layers 1 --vocab 700 --type q8_0", "qwen3", "gpt2", "<|im_start|>",
       128, 0, 1, 0, 0, 0, 0, 0},
      {"--preset llama3.2-1b --layers 1 --vocab 700 --type q8_0", "llama", "gpt2",
       "<|start_header_id|>", 64, 0, 0, 0, 0, 1, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *path = wt_strf("%s/fam%zu.gguf", g_dir, i), *out = NULL;
    const int preset = strncmp(cases[i].args, "--preset", 8) == 0;
    char *cmd = preset ? wt_strf("%s mkmodel %s --out %s", WT_WEIR, cases[i].args, path)
                       : wt_strf("%s mkmodel %s --dim 64 --heads 4 --kv-heads 2 --ffn 96 "
                                 "--vocab 700 --layers 2 --ctx 4096 --type f32 --out %s",
                                 WT_WEIR, cases[i].args, path);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    int rc = wt_run(argv, &out, 120000);
    if (rc) fprintf(stderr, "\n  %s: %s\n", cmd, out);
    WT_ASSERT_INT_EQ(rc, 0);
    free(out);
    free(cmd);
    weir_gguf *g = open_ok(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    weir_llama_hparams hp;
    char err[512];
    rc = weir_gguf_llama_hparams(g, &hp, err, sizeof err);
    if (rc) fprintf(stderr, "\n  %s\n", err);
    WT_ASSERT_INT_EQ(rc, 0);
    CU_ASSERT_STRING_EQUAL(hp.arch_name, cases[i].arch);
    WT_ASSERT_INT_EQ(hp.head_dim, cases[i].head_dim);
    WT_ASSERT_INT_EQ(hp.n_swa, cases[i].n_swa);
    WT_ASSERT_INT_EQ(hp.has_qk_norm, cases[i].qk_norm);
    WT_ASSERT_INT_EQ(hp.has_post_norms, cases[i].post_norms);
    WT_ASSERT_INT_EQ(hp.fused_qkv, cases[i].fused);
    WT_ASSERT_INT_EQ(hp.fused_gate_up, cases[i].fused);
    WT_ASSERT_INT_EQ(hp.has_rope_freqs, cases[i].rope_freqs);
    WT_ASSERT_INT_EQ(hp.has_longrope, cases[i].longrope);
    WT_ASSERT_INT_EQ(hp.rope_yarn, cases[i].yarn);
    rc = weir_gguf_llama_check(g, &hp, err, sizeof err);
    if (rc) fprintf(stderr, "\n  %s\n", err);
    WT_ASSERT_INT_EQ(rc, 0);
    check_str_key(g, "tokenizer.ggml.model", cases[i].tok);
    weir_gguf_str s;
    WT_ASSERT_INT_EQ(weir_gguf_get_str(g, "tokenizer.chat_template", &s), 0);
    char *tpl = strndup(s.ptr, s.len);
    WT_ASSERT_STR_CONTAINS(tpl, cases[i].marker);
    free(tpl);
    if (cases[i].rope_freqs) {
      /* llama3 factors: 1 for the fastest pair, 32 for the slowest */
      const weir_gguf_tensor *t = weir_gguf_find_tensor(g, "rope_freqs.weight");
      const float *f = t->t.data;
      CU_ASSERT_EQUAL(f[0], 1.0f);
      CU_ASSERT_EQUAL(f[hp.n_rot / 2 - 1], 32.0f);
    }
    weir_gguf_close(g);
    free(path);
  }
  /* usage errors of the family flags */
  char *path = wt_strf("%s/bad.gguf", g_dir), *out = NULL;
  const char *b1[] = {"--arch", "gemma4", "--out", path, NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(b1, &out), 2);
  free(out);
  const char *b2[] = {"--longrope", "--out", path, NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(b2, &out), 2);
  free(out);
  const char *b3[] = {"--rope-freqs", "--yarn", "4", "--out", path, NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(b3, &out), 2);
  free(out);
  free(path);
}

/* A second, independent reader (tests/gguf/gguf_check.py, written from the format
 * description) reads mkmodel's files the way weir does: same keys, same tensors at the same
 * offsets, and a tokenizer whose merges and pieces are consistent. */
static void test_independent_reader(void) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    fprintf(stderr, "\n  (skipped: no /usr/bin/python3)\n");
    return;
  }
  static const char *const variants[][6] = {
      {"--tokenizer", "gpt2", "--type", "q8_0", "--arch", "qwen2"},
      {"--tokenizer", "llama", "--type", "q4_0", "--vocab", "3000"},
  };
  for (size_t v = 0; v < 2; v++) {
    char *path = wt_strf("%s/indep%zu.gguf", g_dir, v), *out = NULL;
    const char *args[] = {variants[v][0], variants[v][1], variants[v][2], variants[v][3],
                          variants[v][4], variants[v][5], "--out", path, NULL};
    CU_ASSERT_EQUAL_FATAL(run_mkmodel(args, &out), 0);
    free(out);
    char *script = wt_strf("%s/tests/gguf/gguf_check.py", WT_SOURCE_DIR);
    char *argv[] = {(char *)"/usr/bin/python3", script, path, NULL};
    int rc = wt_run(argv, &out, 60000);
    if (rc) fprintf(stderr, "\n%s\n", out);
    WT_ASSERT_INT_EQ(rc, 0);
    WT_ASSERT_STR_CONTAINS(out, "\nOK\n");
    weir_gguf *g = open_ok(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    char line[512];
    snprintf(line, sizeof line, "version %u\n", weir_gguf_version(g));
    WT_ASSERT_STR_CONTAINS(out, line);
    snprintf(line, sizeof line, "data_offset %llu\n",
             (unsigned long long)weir_gguf_data_offset(g));
    WT_ASSERT_STR_CONTAINS(out, line);
    for (int64_t i = 0; i < weir_gguf_kv_count(g); i++) {
      const weir_gguf_kv *kv = weir_gguf_kv_at(g, i);
      snprintf(line, sizeof line, "kv %s %s\n", kv->key, weir_gguf_type_name(kv->type));
      WT_ASSERT_STR_CONTAINS(out, line);
    }
    for (int64_t i = 0; i < weir_gguf_tensor_count(g); i++) {
      const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
      int n = snprintf(line, sizeof line, "tensor %s %d %lld", t->name, (int)t->t.dtype,
                       (long long)t->t.ne[0]);
      for (int d = 1; d < t->t.ndim; d++)
        n += snprintf(line + n, sizeof line - (size_t)n, ",%lld", (long long)t->t.ne[d]);
      snprintf(line + n, sizeof line - (size_t)n, " %llu\n", (unsigned long long)t->offset);
      WT_ASSERT_STR_CONTAINS(out, line);
    }
    weir_gguf_close(g);
    free(out);
    free(script);
    free(path);
  }
}

/* Every --type of mkmodel (the 1.5 block types and the K-quant mixes) written, read back by
 * the reader with the type the mix puts on each tensor, passing the graph check, and each
 * matrix dequantized close to the same seed's f32 weights (relative RMS error under the
 * type's bound). The second reader checks one K-quant file's layout; a NaN scale patched into
 * a file is refused by the graph check with one line naming tensor, type, block and row. */
static double rel_bound(weir_dtype t) {
  /* RMS error over RMS value on normal weights, about 1.2x what weir_quantize_row reaches
   * (tests/kquant has the same table on its own data). */
  switch (t) {
  case WEIR_DTYPE_Q5_0: return 0.045;
  case WEIR_DTYPE_Q5_1: return 0.04;
  case WEIR_DTYPE_Q4_1: return 0.09;
  case WEIR_DTYPE_IQ4_NL: case WEIR_DTYPE_IQ4_XS: return 0.08;
  case WEIR_DTYPE_Q2_K: return 0.30;
  case WEIR_DTYPE_Q3_K: return 0.16;
  case WEIR_DTYPE_Q4_K: return 0.078;
  case WEIR_DTYPE_Q5_K: return 0.04;
  case WEIR_DTYPE_Q6_K: return 0.02;
  default: return 0;
  }
}

static void test_mkmodel_kquant_types(void) {
  static const struct {
    const char *type;
    weir_dtype base, out, more; /* more: attn_v / ffn_down of even layers */
  } cases[] = {
      {"q5_0", WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_0},
      {"q5_1", WEIR_DTYPE_Q5_1, WEIR_DTYPE_Q5_1, WEIR_DTYPE_Q5_1},
      {"q4_1", WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q4_1},
      {"iq4_nl", WEIR_DTYPE_IQ4_NL, WEIR_DTYPE_IQ4_NL, WEIR_DTYPE_IQ4_NL},
      {"q2_k", WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q2_K},
      {"q3_k", WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q3_K},
      {"q4_k", WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q4_K},
      {"q5_k", WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q5_K},
      {"q6_k", WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K},
      {"iq4_xs", WEIR_DTYPE_IQ4_XS, WEIR_DTYPE_IQ4_XS, WEIR_DTYPE_IQ4_XS},
      {"q3_k_m", WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q4_K},
      {"Q4_K_M", WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K},
      {"q5_k_m", WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K},
  };
  const char *shape[] = {"--dim", "256", "--ffn", "512", "--layers", "2", "--heads", "4",
                         "--kv-heads", "2", "--vocab", "512", "--seed", "3"};
  char *ref_path = wt_strf("%s/kq_f32.gguf", g_dir), *out = NULL;
  const char *ra[20] = {0};
  memcpy(ra, shape, sizeof shape);
  ra[14] = "--type", ra[15] = "f32", ra[16] = "--out", ra[17] = ref_path;
  CU_ASSERT_EQUAL_FATAL(run_mkmodel(ra, &out), 0);
  free(out);
  weir_gguf *ref = open_ok(ref_path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
  float *want = malloc(512 * 512 * 4), *got = malloc(512 * 512 * 4);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char *path = wt_strf("%s/kq_%s.gguf", g_dir, cases[c].type);
    const char *a[20] = {0};
    memcpy(a, shape, sizeof shape);
    a[14] = "--type", a[15] = cases[c].type, a[16] = "--out", a[17] = path;
    int rc = run_mkmodel(a, &out);
    if (rc) fprintf(stderr, "\n%s\n", out);
    WT_ASSERT_INT_EQ(rc, 0);
    free(out);
    weir_gguf *g = open_ok(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    weir_llama_hparams hp;
    char err[512] = "";
    rc = weir_gguf_llama_hparams(g, &hp, err, sizeof err);
    if (rc == 0) rc = weir_gguf_llama_check(g, &hp, err, sizeof err);
    if (rc) fprintf(stderr, "\n  %s: %s\n", cases[c].type, err);
    WT_ASSERT_INT_EQ(rc, 0);
    for (int64_t i = 0; i < weir_gguf_tensor_count(g); i++) {
      const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
      const weir_gguf_tensor *r = weir_gguf_find_tensor(ref, t->name);
      CU_ASSERT_PTR_NOT_NULL_FATAL(r);
      if (t->t.ndim == 1) {
        WT_ASSERT_INT_EQ(t->t.dtype, WEIR_DTYPE_F32); /* norms stay f32 */
        continue;
      }
      weir_dtype expect = cases[c].base;
      if (!strcmp(t->name, "output.weight")) expect = cases[c].out;
      else if (!strcmp(t->name, "blk.0.attn_v.weight") || !strcmp(t->name, "blk.0.ffn_down.weight"))
        expect = cases[c].more;
      if ((int)t->t.dtype != (int)expect)
        fprintf(stderr, "\n  %s: %s is %s, expected %s", cases[c].type, t->name,
                weir_dtype_name(t->t.dtype), weir_dtype_name(expect));
      WT_ASSERT_INT_EQ(t->t.dtype, expect);
      int64_t n = t->nelements;
      CU_ASSERT_FATAL(n <= 512 * 512);
      WT_ASSERT_INT_EQ(weir_dequantize_row(t->t.dtype, t->t.data, got, n), WEIR_OK);
      memcpy(want, r->t.data, (size_t)n * 4);
      double se = 0, sx = 0;
      for (int64_t k = 0; k < n; k++) {
        se += ((double)got[k] - want[k]) * ((double)got[k] - want[k]);
        sx += (double)want[k] * want[k];
      }
      double rel = sqrt(se / sx), bound = rel_bound(t->t.dtype);
      if (rel > bound)
        fprintf(stderr, "\n  %s: %s relative RMS error %.4f > %.3f", cases[c].type, t->name,
                rel, bound);
      CU_ASSERT(rel <= bound);
    }
    if (!strcmp(cases[c].type, "Q4_K_M")) {
      /* The second reader agrees on the layout of a mixed K-quant file. */
      if (access("/usr/bin/python3", X_OK) == 0) {
        char *script = wt_strf("%s/tests/gguf/gguf_check.py", WT_SOURCE_DIR);
        char *argv[] = {(char *)"/usr/bin/python3", script, path, NULL};
        rc = wt_run(argv, &out, 60000);
        if (rc) fprintf(stderr, "\n%s\n", out);
        WT_ASSERT_INT_EQ(rc, 0);
        WT_ASSERT_STR_CONTAINS(out, "\nOK\n");
        free(out);
        free(script);
      }
      /* A NaN d in block 1 of row 2 of blk.1.ffn_down.weight (q4_K, rows of 512 = 2 blocks). */
      const weir_gguf_tensor *t = weir_gguf_find_tensor(g, "blk.1.ffn_down.weight");
      CU_ASSERT_PTR_NOT_NULL_FATAL(t);
      WT_ASSERT_INT_EQ(t->t.dtype, WEIR_DTYPE_Q4_K);
      uint64_t at = weir_gguf_data_offset(g) + t->offset + 2 * t->t.nb[1] + sizeof(weir_block_q4_K);
      size_t len = 0;
      uint8_t *bytes = (uint8_t *)wt_read_file(path, &len);
      CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
      bytes[at] = 0x00, bytes[at + 1] = 0x7e; /* f16 NaN, little-endian */
      weir_gguf *bad = NULL;
      rc = weir_gguf_open_buffer(bytes, len, "nan.gguf", &bad, err, sizeof err);
      WT_ASSERT_INT_EQ(rc, 0); /* the reader itself does not read tensor data */
      if (bad) {
        rc = weir_gguf_llama_check(bad, &hp, err, sizeof err);
        WT_ASSERT_INT_EQ(rc, WEIR_E_FORMAT);
        WT_ASSERT_STR_CONTAINS(err, "tensor 'blk.1.ffn_down.weight' (q4_K): block 1 of row 2 "
                                    "has a NaN or infinite scale");
        weir_gguf_close(bad);
      }
      free(bytes);
    }
    weir_gguf_close(g);
    free(path);
  }
  /* Shapes the 256-element types cannot take are refused before anything is written. */
  char *path = wt_strf("%s/kq_bad.gguf", g_dir);
  const char *bad_args[] = {"--type", "q4_k", "--out", path, NULL}; /* tiny: dim 64 */
  WT_ASSERT_INT_EQ(run_mkmodel(bad_args, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "--dim, --ffn and heads x head size must be multiples of 256");
  free(out);
  const char *bad_type[] = {"--type", "iq2_xxs", "--out", path, NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(bad_type, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "--type must be");
  free(out);
  CU_ASSERT(access(path, F_OK) != 0);
  free(path);
  free(want);
  free(got);
  weir_gguf_close(ref);
  free(ref_path);
}

static void test_mkmodel_usage_errors(void) {
  char *path = wt_strf("%s/never.gguf", g_dir), *out = NULL;
  const char *a1[] = {"--preset", "tiny", NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(a1, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "--out FILE is required");
  free(out);
  const char *a2[] = {"--out", path, "--type", "iq2_xxs", NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(a2, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "--type must be");
  free(out);
  const char *a3[] = {"--out", path, "--dim", "64", "--heads", "5", NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(a3, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "multiple of --heads");
  free(out);
  const char *a4[] = {"--out", path, "--vocab", "100", NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(a4, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "too small");
  free(out);
  const char *a5[] = {"--out", path, "--preset", "huge", NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(a5, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "unknown preset");
  free(out);
  const char *a6[] = {"--out", path, "--type", "q4_0", "--dim", "48", "--heads", "4", NULL};
  WT_ASSERT_INT_EQ(run_mkmodel(a6, &out), 2);
  WT_ASSERT_STR_CONTAINS(out, "multiples of 32");
  free(out);
  size_t len;
  char *none = wt_read_file(path, &len);
  CU_ASSERT_PTR_NULL(none); /* nothing written on a usage error */
  free(none);
  free(path);
}

int main(void) {
  g_dir = wt_mkdtemp();
  static const wt_test tests[] = {
      {"metadata_roundtrip", test_metadata_roundtrip},
      {"tensor_roundtrip_align32", test_tensor_roundtrip_align32},
      {"tensor_roundtrip_align64", test_tensor_roundtrip_align64},
      {"tensor_roundtrip_align8", test_tensor_roundtrip_align8},
      {"streamed_writer", test_streamed_writer},
      {"quantize_roundtrip", test_quantize_roundtrip},
      {"llama_hparams_and_check", test_llama_hparams_and_check},
      {"build_base", build_base},
      {"base_is_valid", test_base_is_valid},
      {"truncation_everywhere", test_truncation_everywhere},
      {"truncated_file_on_disk", test_truncated_file_on_disk},
      {"header_errors", test_header_errors},
      {"metadata_errors", test_metadata_errors},
      {"alignment_errors", test_alignment_errors},
      {"tensor_errors", test_tensor_errors},
      {"random_mutations", test_random_mutations},
      {"mkmodel_tiny", test_mkmodel_tiny},
      {"mkmodel_variants", test_mkmodel_variants},
      {"mkmodel_families", test_mkmodel_families},
      {"mkmodel_usage_errors", test_mkmodel_usage_errors},
      {"mkmodel_kquant_types", test_mkmodel_kquant_types},
      {"independent_reader", test_independent_reader},
      {NULL, NULL}};
  int rc = wt_run_suite("gguf", tests);
  free(g_base);
  wt_rmtree(g_dir);
  free(g_dir);
  return rc;
}
