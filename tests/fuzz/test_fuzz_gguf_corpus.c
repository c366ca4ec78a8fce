/* Runs the GGUF fuzz entry over a deterministic corpus: valid files from the writer (every
 * metadata type, every tensor type, a complete small Llama graph), each truncated at every
 * length and mutated many times, plus the committed corpus tests/fuzz/corpus/gguf/ (the seeds
 * as `test_fuzz_gguf_corpus --write-corpus tests/fuzz/corpus/gguf` writes them, and any
 * reproducer added since); a missing or short corpus fails the suite. With --write-corpus DIR
 * it writes the seeds for libFuzzer instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_gguf_entry.h"
#include "format/gguf_write.h"
#include "testutil.h"

static char *g_dir;
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) { return wt_xorshift64(&rng); }

typedef struct seed {
  uint8_t *data;
  size_t len;
  int has_tensors; /* without tensors, a file cut inside its final padding still opens */
} seed;
static seed g_seeds[8];
static int g_n_seeds;

static void add_seed(weir_gguf_writer *w, const char *name, int has_tensors) {
  char *path = wt_strf("%s/%s", g_dir, name);
  char err[256];
  if (weir_gguf_write_file(w, path, err, sizeof err) == 0) {
    size_t len;
    uint8_t *d = (uint8_t *)wt_read_file(path, &len);
    if (d) g_seeds[g_n_seeds++] = (seed){d, len, has_tensors};
  }
  free(path);
  weir_gguf_writer_free(w);
}

static void build_seeds(void) {
  static uint8_t bytes[1 << 16];
  for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 131 + 7);
  weir_gguf_writer *w;

  /* Every metadata type, including nested arrays of strings. */
  weir_gguf_writer_new(&w);
  weir_gguf_add_u8(w, "a", 1);
  weir_gguf_add_i8(w, "b", -1);
  weir_gguf_add_u16(w, "c", 2);
  weir_gguf_add_i16(w, "d", -2);
  weir_gguf_add_u32(w, "e", 3);
  weir_gguf_add_i32(w, "f", -3);
  weir_gguf_add_u64(w, "g", 4);
  weir_gguf_add_i64(w, "h", -4);
  weir_gguf_add_f32(w, "i", 0.5f);
  weir_gguf_add_f64(w, "j", 0.25);
  weir_gguf_add_bool(w, "k", 1);
  weir_gguf_add_str(w, "l", "text");
  const char *strs[] = {"x", "yy", "zzz"};
  weir_gguf_add_arr_str(w, "m", strs, NULL, 3);
  int32_t ints[3] = {1, 2, 3};
  weir_gguf_add_arr(w, "n", WEIR_GGUF_I32, ints, 3);
  uint8_t nested[64];
  size_t nl = 0;
  uint32_t ta = WEIR_GGUF_ARRAY, ts = WEIR_GGUF_STRING;
  uint64_t one = 1, two = 2;
  memcpy(nested + nl, &ts, 4), nl += 4;
  memcpy(nested + nl, &one, 8), nl += 8;
  memcpy(nested + nl, &two, 8), nl += 8;
  memcpy(nested + nl, "ab", 2), nl += 2;
  uint8_t outer[80];
  memcpy(outer, &ta, 4);
  memcpy(outer + 4, &one, 8);
  memcpy(outer + 12, nested, nl);
  weir_gguf_add_raw(w, "o", WEIR_GGUF_ARRAY, outer, 12 + nl);
  add_seed(w, "meta.gguf", 0);

  /* Every tensor type. */
  weir_gguf_writer_new(&w);
  weir_gguf_writer_set_alignment(w, 64);
  const weir_dtype types[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16, WEIR_DTYPE_Q8_0,
                              WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1, WEIR_DTYPE_I8, WEIR_DTYPE_I32};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%zu", i);
    int64_t ne[3] = {32, 2, 1 + (int64_t)i % 2};
    weir_gguf_add_tensor(w, name, types[i], 3, ne, bytes);
  }
  add_seed(w, "tensors.gguf", 1);

  /* A complete two-layer Llama graph with a tokenizer (the paths the engine takes). */
  weir_gguf_writer_new(&w);
  weir_gguf_add_str(w, "general.architecture", "qwen2");
  weir_gguf_add_u32(w, "qwen2.context_length", 64);
  weir_gguf_add_u32(w, "qwen2.embedding_length", 32);
  weir_gguf_add_u32(w, "qwen2.block_count", 2);
  weir_gguf_add_u32(w, "qwen2.feed_forward_length", 64);
  weir_gguf_add_u32(w, "qwen2.attention.head_count", 4);
  weir_gguf_add_u32(w, "qwen2.attention.head_count_kv", 2);
  weir_gguf_add_f32(w, "qwen2.rope.freq_base", 10000.0f);
  weir_gguf_add_f32(w, "qwen2.attention.layer_norm_rms_epsilon", 1e-6f);
  const char *toks[8] = {"<unk>", "<s>", "</s>", "a", "b", "ab", "\u2581a", "c"};
  weir_gguf_add_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 8);
  int64_t e2[2], e1[1];
#define T2(n, a, b) (e2[0] = (a), e2[1] = (b), weir_gguf_add_tensor(w, n, WEIR_DTYPE_Q8_0, 2, e2, bytes))
#define T1(n, a) (e1[0] = (a), weir_gguf_add_tensor(w, n, WEIR_DTYPE_F32, 1, e1, bytes))
  T2("token_embd.weight", 32, 8);
  T1("output_norm.weight", 32);
  char nm[64];
  for (int l = 0; l < 2; l++) {
#define B(s) (snprintf(nm, sizeof nm, "blk.%d.%s", l, s), nm)
    T1(B("attn_norm.weight"), 32);
    T2(B("attn_q.weight"), 32, 32);
    T2(B("attn_k.weight"), 32, 16);
    T2(B("attn_v.weight"), 32, 16);
    T1(B("attn_q.bias"), 32);
    T1(B("attn_k.bias"), 16);
    T1(B("attn_v.bias"), 16);
    T2(B("attn_output.weight"), 32, 32);
    T1(B("ffn_norm.weight"), 32);
    T2(B("ffn_gate.weight"), 32, 64);
    T2(B("ffn_up.weight"), 32, 64);
    T2(B("ffn_down.weight"), 64, 32);
#undef B
  }
#undef T1
#undef T2
  add_seed(w, "model.gguf", 1);

  /* Every block type of SDK 1.5, four rows each (scales from the byte pattern: some NaN; the
   * last tensor ends on the alignment, so every truncation cuts data). */
  weir_gguf_writer_new(&w);
  const weir_dtype ktypes[] = {WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_1, WEIR_DTYPE_IQ4_NL,
                               WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q4_K,
                               WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_IQ4_XS};
  for (size_t i = 0; i < sizeof ktypes / sizeof ktypes[0]; i++) {
    char name[16];
    snprintf(name, sizeof name, "k%zu", i);
    int64_t ne[2] = {256, 4};
    weir_gguf_add_tensor(w, name, ktypes[i], 2, ne, bytes);
  }
  add_seed(w, "ktensors.gguf", 1);
}

static void test_seeds_open(void) {
  WT_ASSERT_INT_EQ(g_n_seeds, 4);
  for (int i = 0; i < g_n_seeds; i++)
    WT_ASSERT_INT_EQ(weir_fuzz_gguf(g_seeds[i].data, g_seeds[i].len), 1);
}

static void test_truncations(void) {
  int bad = 0;
  for (int i = 0; i < g_n_seeds; i++)
    for (size_t len = 0; len < g_seeds[i].len; len++) {
      /* An exact-size copy so that a read past the end is caught by the sanitizer build. */
      uint8_t *b = malloc(len ? len : 1);
      memcpy(b, g_seeds[i].data, len);
      int rc = weir_fuzz_gguf(b, len);
      if (rc < 0 || (rc > 0 && g_seeds[i].has_tensors)) bad++;
      free(b);
    }
  WT_ASSERT_INT_EQ(bad, 0);
}

static void test_mutations(void) {
  int refused_silently = 0, opened = 0, refused = 0;
  for (int i = 0; i < g_n_seeds; i++) {
    const seed *s = &g_seeds[i];
    for (int it = 0; it < 6000; it++) {
      size_t len = s->len;
      uint8_t *b = malloc(len);
      memcpy(b, s->data, len);
      int n = 1 + (int)(rnd() % 6);
      for (int k = 0; k < n; k++) {
        size_t pos = (size_t)(rnd() % len);
        uint64_t v = rnd();
        switch (rnd() % 5) {
        case 0: b[pos] = (uint8_t)v; break;
        case 1: b[pos] ^= (uint8_t)(1u << (v % 8)); break;
        case 2: if (pos + 8 <= len) memcpy(b + pos, &v, 8); break;
        case 3: { uint32_t small = (uint32_t)(v % 70); if (pos + 4 <= len) memcpy(b + pos, &small, 4); } break;
        default: { /* copy a slice over another place */
          size_t from = (size_t)(v % len), n2 = (size_t)(rnd() % 32);
          if (from + n2 <= len && pos + n2 <= len) memmove(b + pos, b + from, n2);
        }
        }
      }
      if (rnd() % 6 == 0) len = (size_t)(rnd() % len);
      int rc = weir_fuzz_gguf(b, len);
      if (rc < 0) refused_silently++;
      else if (rc) opened++;
      else refused++;
      free(b);
    }
  }
  WT_ASSERT_INT_EQ(refused_silently, 0);
  CU_ASSERT(opened > 0 && refused > 0); /* the mutations reach both outcomes */
}

/* A checked-in reproducer must be refused with a message or accepted, never silently. */
static void replay_gguf(const char *path, const char *name, const char *data, size_t len,
                        void *ctx) {
  (void)name;
  (void)ctx;
  int rc = weir_fuzz_gguf((const uint8_t *)data, len);
  if (rc < 0) fprintf(stderr, "\n  %s refused without a message\n", path);
  CU_ASSERT(rc >= 0);
}

static void test_committed_corpus(void) {
  char *dir = wt_strf("%s/tests/fuzz/corpus/gguf", WT_SOURCE_DIR);
  int n = wt_for_each_file(dir, replay_gguf, NULL);
  if (n < g_n_seeds)
    fprintf(stderr, "\n  %s: %d inputs, expected at least the %d seeds (write them with "
            "test_fuzz_gguf_corpus --write-corpus %s)\n", dir, n, g_n_seeds, dir);
  CU_ASSERT(n >= g_n_seeds);
  free(dir);
}

int main(int argc, char **argv) {
  g_dir = wt_mkdtemp();
  build_seeds();
  int rc = 0;
  if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) {
    mkdir(argv[2], 0755);
    for (int i = 0; i < g_n_seeds; i++) {
      char *p = wt_strf("%s/seed%d.gguf", argv[2], i);
      if (wt_write_file(p, (const char *)g_seeds[i].data, g_seeds[i].len) != 0) rc = 1;
      free(p);
    }
  } else {
    static const wt_test tests[] = {{"seeds_open", test_seeds_open},
                                    {"truncations", test_truncations},
                                    {"mutations", test_mutations},
                                    {"committed_corpus", test_committed_corpus},
                                    {NULL, NULL}};
    rc = wt_run_suite("fuzz_gguf_corpus", tests);
  }
  for (int i = 0; i < g_n_seeds; i++) free(g_seeds[i].data);
  wt_rmtree(g_dir);
  free(g_dir);
  return rc;
}
