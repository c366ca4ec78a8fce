#include "fuzz_gguf_entry.h"

#include <string.h>

#include "format/gguf.h"

/* Folds bytes into a value the optimiser cannot drop, so every read really happens. */
static volatile uint64_t g_sink;

static void touch_str(weir_gguf_str s) {
  uint64_t h = s.len;
  if (s.len) h += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
  g_sink += h;
}

static void walk_array(const weir_gguf_arr *a, int depth) {
  /* Bounded per array: a huge valid array of scalars is legal and must not time out. */
  uint64_t n = a->n < 4096 ? a->n : 4096;
  for (uint64_t i = 0; i < n; i++) {
    int64_t iv;
    double dv;
    weir_gguf_str s;
    weir_gguf_arr sub;
    if (weir_gguf_arr_i64(a, i, &iv) == 0) g_sink += (uint64_t)iv;
    if (weir_gguf_arr_f64(a, i, &dv) == 0) g_sink += (uint64_t)(dv == dv);
    if (weir_gguf_arr_str(a, i, &s) == 0) touch_str(s);
    if (depth < 16 && weir_gguf_arr_arr(a, i, &sub) == 0) walk_array(&sub, depth + 1);
  }
  int64_t iv;
  if (weir_gguf_arr_i64(a, a->n, &iv) == 0) g_sink += 1; /* out of range: must refuse */
}

int weir_fuzz_gguf(const uint8_t *data, size_t size) {
  weir_gguf *g = NULL;
  char err[512];
  err[0] = 0;
  int rc = weir_gguf_open_buffer(data, size, "fuzz.gguf", &g, err, sizeof err);
  if (rc != 0) return err[0] ? 0 : -1;
  for (int64_t i = 0; i < weir_gguf_kv_count(g); i++) {
    const weir_gguf_kv *kv = weir_gguf_kv_at(g, i);
    if (weir_gguf_find_key(g, kv->key) != kv) g_sink += 1000; /* names are unique */
    int64_t iv;
    uint64_t uv;
    double dv;
    int b;
    weir_gguf_str s;
    uint32_t u32;
    int32_t i32;
    float f32;
    if (weir_gguf_kv_i64(kv, &iv) == 0) g_sink += (uint64_t)iv;
    if (weir_gguf_kv_u64(kv, &uv) == 0) g_sink += uv;
    if (weir_gguf_kv_f64(kv, &dv) == 0) g_sink += (uint64_t)(dv == dv);
    if (weir_gguf_kv_bool(kv, &b) == 0) g_sink += (uint64_t)b;
    if (weir_gguf_kv_str(kv, &s) == 0) touch_str(s);
    if (weir_gguf_get_u32(g, kv->key, &u32) == 0) g_sink += u32;
    if (weir_gguf_get_i32(g, kv->key, &i32) == 0) g_sink += (uint64_t)i32;
    if (weir_gguf_get_f32(g, kv->key, &f32) == 0) g_sink += (uint64_t)(f32 == f32);
    if (kv->type == WEIR_GGUF_ARRAY) walk_array(&kv->arr, 0);
  }
  for (int64_t i = 0; i < weir_gguf_tensor_count(g); i++) {
    const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
    if (weir_gguf_find_tensor(g, t->name) != t) g_sink += 1000;
    const uint8_t *p = t->t.data;
    if (t->nbytes) g_sink += p[0] + p[t->nbytes - 1]; /* both ends lie in the buffer */
    /* Reads every block's scales: stays inside the tensor for every block type. */
    g_sink += (uint64_t)(weir_gguf_check_scales(g, t, err, sizeof err) != 0);
  }
  weir_llama_hparams hp;
  if (weir_gguf_llama_hparams(g, &hp, err, sizeof err) == 0)
    g_sink += (uint64_t)weir_gguf_llama_check(g, &hp, err, sizeof err);
  weir_gguf_close(g);
  return 1;
}
