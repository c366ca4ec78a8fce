/* `weir convert` (tools/convert): an export directory in the format scripts/train-demo.py
 * writes, built here with seeded random tensors, becomes a GGUF that weir's reader, the
 * double-precision reference and the tokenizer accept, with every key and value as given
 * (F16 values equal to the rounding of the inputs, F32 values bit-equal). Every malformed
 * export is refused with a message naming the problem, leaving no file behind. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/quantize_row.h"
#include "format/gguf.h"
#include "model/tokenizer.h"
#include "reference.h"
#include "testutil.h"

#define DIM 16
#define HEADS 4
#define KV_HEADS 2
#define FFN 32
#define LAYERS 2
#define N_PIECES 24

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */
static const char *k_pieces[N_PIECES] = {
    SP "the", SP "and", SP "of", SP "L", "OR", "D", SP "s", "aid", SP "un", "to", SP "M", "oses",
    SP, "e", "t", "a", "o", "n", "h", "s", "d", "i", "r", ","};
static const char *k_template =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

typedef struct export_spec {
  int n_vocab;
  float *data;       /* every tensor, f32, in order */
  size_t n_floats;
} export_spec;

static uint32_t g_seed = 12345;
static float frand(void) {
  g_seed = g_seed * 1664525u + 1013904223u;
  return ((float)(g_seed >> 8) / 16777216.0f - 0.5f) * 0.5f;
}

/* Mutations of the valid export, applied by write_export. */
enum {
  MUT_NONE,
  MUT_TRUNCATE_BIN,
  MUT_NAN,
  MUT_BAD_TOKEN_TYPE,
  MUT_SHORT_SCORES,
  MUT_DROP_TENSOR,
  MUT_DUP_TENSOR,
  MUT_BAD_HEADS,
};

/* Writes DIR/model.json and DIR/tensors.bin; returns the vocabulary size. */
static int write_export(const char *dir, int mut) {
  cJSON *root = cJSON_CreateObject(), *tk = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "general.name", "convert-test");
  cJSON_AddNumberToObject(root, "context_length", 64);
  cJSON_AddNumberToObject(root, "embedding_length", DIM);
  cJSON_AddNumberToObject(root, "block_count", LAYERS);
  cJSON_AddNumberToObject(root, "feed_forward_length", FFN);
  cJSON_AddNumberToObject(root, "head_count", mut == MUT_BAD_HEADS ? 3 : HEADS);
  cJSON_AddNumberToObject(root, "head_count_kv", KV_HEADS);
  cJSON_AddNumberToObject(root, "rms_eps", 1e-5);
  cJSON_AddNumberToObject(root, "rope_freq_base", 10000);
  cJSON *toks = cJSON_AddArrayToObject(tk, "tokens"), *scores = cJSON_AddArrayToObject(tk, "scores");
  cJSON *types = cJSON_AddArrayToObject(tk, "token_type");
  const char *specials[] = {"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"};
  const int special_types[] = {2, 3, 3, 3, 3};
  int n = 0;
  for (int i = 0; i < 5; i++, n++) {
    cJSON_AddItemToArray(toks, cJSON_CreateString(specials[i]));
    cJSON_AddItemToArray(scores, cJSON_CreateNumber(0));
    cJSON_AddItemToArray(types, cJSON_CreateNumber(special_types[i]));
  }
  for (int b = 0; b < 256; b++, n++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    cJSON_AddItemToArray(toks, cJSON_CreateString(name));
    cJSON_AddItemToArray(scores, cJSON_CreateNumber(0));
    cJSON_AddItemToArray(types, cJSON_CreateNumber(mut == MUT_BAD_TOKEN_TYPE && b == 7 ? 9 : 6));
  }
  for (int i = 0; i < N_PIECES; i++, n++) {
    cJSON_AddItemToArray(toks, cJSON_CreateString(k_pieces[i]));
    if (!(mut == MUT_SHORT_SCORES && i == N_PIECES - 1))
      cJSON_AddItemToArray(scores, cJSON_CreateNumber(-i));
    cJSON_AddItemToArray(types, cJSON_CreateNumber(1));
  }
  cJSON_AddStringToObject(tk, "model", "llama");
  cJSON_AddNumberToObject(tk, "bos_token_id", 1);
  cJSON_AddNumberToObject(tk, "eos_token_id", 4);
  cJSON_AddNumberToObject(tk, "unknown_token_id", 0);
  cJSON_AddBoolToObject(tk, "add_bos_token", 1);
  cJSON_AddBoolToObject(tk, "add_eos_token", 0);
  cJSON_AddBoolToObject(tk, "add_space_prefix", 1);
  cJSON_AddStringToObject(tk, "chat_template", k_template);
  cJSON_AddItemToObject(root, "tokenizer", tk);
  cJSON *tr = cJSON_AddObjectToObject(root, "training");
  cJSON_AddNumberToObject(tr, "steps", 7);
  cJSON_AddNumberToObject(tr, "seconds", 3);
  cJSON_AddStringToObject(tr, "corpus", "test");

  /* Tensors, in the order the training script exports them. */
  cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
  char *bin_path = wt_strf("%s/tensors.bin", dir);
  FILE *bin = fopen(bin_path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(bin);
  long off = 0;
  g_seed = 12345;
#define ADD(nm, ne0, ne1)                                                                     \
  do {                                                                                       \
    cJSON *t_ = cJSON_CreateObject();                                                        \
    cJSON_AddStringToObject(t_, "name", nm);                                                 \
    cJSON *s_ = cJSON_AddArrayToObject(t_, "shape");                                         \
    cJSON_AddItemToArray(s_, cJSON_CreateNumber(ne0));                                       \
    if ((ne1) > 0) cJSON_AddItemToArray(s_, cJSON_CreateNumber(ne1));                        \
    cJSON_AddNumberToObject(t_, "offset", (double)off);                                      \
    cJSON_AddItemToArray(tensors, t_);                                                       \
    long cnt_ = (long)(ne0) * ((ne1) > 0 ? (ne1) : 1);                                       \
    for (long k_ = 0; k_ < cnt_; k_++) {                                                     \
      float v_ = (ne1) > 0 ? frand() : 1.0f + frand();                                       \
      if (mut == MUT_NAN && off == 0 && k_ == 5) v_ = NAN;                                   \
      fwrite(&v_, 4, 1, bin);                                                                \
    }                                                                                        \
    off += cnt_ * 4;                                                                         \
  } while (0)
  ADD("token_embd.weight", DIM, n);
  for (int l = 0; l < LAYERS; l++) {
    char nm[64];
#define BLK(s) (snprintf(nm, sizeof nm, "blk.%d.%s", l, s), nm)
    ADD(BLK("attn_norm.weight"), DIM, 0);
    ADD(BLK("attn_q.weight"), DIM, DIM);
    ADD(BLK("attn_k.weight"), DIM, KV_HEADS * DIM / HEADS);
    ADD(BLK("attn_v.weight"), DIM, KV_HEADS * DIM / HEADS);
    ADD(BLK("attn_output.weight"), DIM, DIM);
    ADD(BLK("ffn_norm.weight"), DIM, 0);
    ADD(BLK("ffn_gate.weight"), DIM, FFN);
    if (!(mut == MUT_DROP_TENSOR && l == 1)) ADD(BLK("ffn_up.weight"), DIM, FFN);
    ADD(BLK("ffn_down.weight"), FFN, DIM);
    if (mut == MUT_DUP_TENSOR && l == 1) ADD(BLK("ffn_down.weight"), FFN, DIM);
#undef BLK
  }
  ADD("output_norm.weight", DIM, 0);
#undef ADD
  fclose(bin);
  if (mut == MUT_TRUNCATE_BIN) CU_ASSERT_EQUAL(truncate(bin_path, off - 6), 0);
  char *json = cJSON_Print(root);
  char *json_path = wt_strf("%s/model.json", dir);
  CU_ASSERT_EQUAL(wt_write_file(json_path, json, strlen(json)), 0);
  free(json);
  free(json_path);
  free(bin_path);
  cJSON_Delete(root);
  return n;
}

/* Runs `weir convert ARGS`; returns the exit status, output in *out. */
static int run_convert(const char *args, char **out) {
  char *cmd = wt_strf("%s convert %s", WT_WEIR, args);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  int rc = wt_run(argv, out, 60000);
  free(cmd);
  return rc;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static float *read_floats(const char *dir, size_t *n) {
  char *p = wt_strf("%s/tensors.bin", dir);
  size_t len = 0;
  char *b = wt_read_file(p, &len);
  free(p);
  *n = len / 4;
  return (float *)b;
}

/* Checks every tensor of the GGUF against the export's f32 values. */
static void check_values(const weir_gguf *g, const char *dir, weir_dtype want_matrix) {
  size_t nf = 0;
  float *src = read_floats(dir, &nf);
  CU_ASSERT_PTR_NOT_NULL_FATAL(src);
  size_t pos = 0, mismatches = 0;
  const char *order[2 + 9 * LAYERS];
  char names[2 + 9 * LAYERS][64];
  int k = 0;
  snprintf(names[k], 64, "token_embd.weight"), order[k] = names[k], k++;
  const char *suf[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                       "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
  for (int l = 0; l < LAYERS; l++)
    for (int s = 0; s < 9; s++) snprintf(names[k], 64, "blk.%d.%s.weight", l, suf[s]), order[k] = names[k], k++;
  snprintf(names[k], 64, "output_norm.weight"), order[k] = names[k], k++;
  for (int i = 0; i < k; i++) {
    const weir_gguf_tensor *t = weir_gguf_find_tensor(g, order[i]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    int matrix = t->t.ne[1] > 1;
    /* Rows that are not whole Q8_0 blocks (32 values) fall back to F16. */
    weir_dtype want_dt = !matrix ? WEIR_DTYPE_F32
                         : want_matrix == WEIR_DTYPE_Q8_0 && t->t.ne[0] % 32 ? WEIR_DTYPE_F16
                                                                              : want_matrix;
    WT_ASSERT_INT_EQ(t->t.dtype, want_dt);
    float *row = malloc(sizeof(float) * (size_t)t->t.ne[0]);
    for (int64_t r = 0; r < t->t.ne[1]; r++) {
      CU_ASSERT_EQUAL(weir_dequantize_row(t->t.dtype, (const char *)t->t.data + r * t->t.nb[1],
                                          row, t->t.ne[0]), 0);
      for (int64_t c = 0; c < t->t.ne[0]; c++, pos++) {
        float want = src[pos];
        if (t->t.dtype == WEIR_DTYPE_F16) want = weir_f16_to_f32(weir_f32_to_f16(want));
        if (t->t.dtype == WEIR_DTYPE_Q8_0 ? fabsf(row[c] - want) > 0.25f / 127 * 1.01f
                                          : memcmp(&row[c], &want, 4) != 0)
          mismatches++;
      }
    }
    free(row);
  }
  WT_ASSERT_INT_EQ(pos, nf);
  WT_ASSERT_INT_EQ(mismatches, 0);
  free(src);
}

static void test_convert_f16(void) {
  char *dir = wt_mkdtemp(), *out = wt_strf("%s/m.gguf", dir), *args = wt_strf("--in %s --out %s", dir, out);
  int n_vocab = write_export(dir, MUT_NONE);
  char *msg = NULL;
  int rc = run_convert(args, &msg);
  if (rc) fprintf(stderr, "\n%s\n", msg);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(msg, "wrote");
  char *tmp = wt_strf("%s.tmp", out);
  CU_ASSERT_FALSE(exists(tmp));
  free(tmp);
  weir_gguf *g = NULL;
  char err[256];
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(out, &g, err, sizeof err), 0);
  weir_llama_hparams hp;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_llama_hparams(g, &hp, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(hp.n_embd, DIM);
  WT_ASSERT_INT_EQ(hp.n_layer, LAYERS);
  WT_ASSERT_INT_EQ(hp.n_head, HEADS);
  WT_ASSERT_INT_EQ(hp.n_head_kv, KV_HEADS);
  WT_ASSERT_INT_EQ(hp.n_ff, FFN);
  WT_ASSERT_INT_EQ(hp.n_ctx_train, 64);
  WT_ASSERT_INT_EQ(hp.n_vocab, n_vocab);
  WT_ASSERT_INT_EQ(hp.n_rot, DIM / HEADS);
  WT_ASSERT_INT_EQ(hp.has_output, 0);
  weir_gguf_str s;
  CU_ASSERT_EQUAL(weir_gguf_get_str(g, "tokenizer.chat_template", &s), 0);
  CU_ASSERT(s.len == strlen(k_template) && memcmp(s.ptr, k_template, s.len) == 0);
  CU_ASSERT_EQUAL(weir_gguf_get_str(g, "general.name", &s), 0);
  CU_ASSERT(s.len == 12 && memcmp(s.ptr, "convert-test", 12) == 0);
  uint64_t steps = 0;
  CU_ASSERT_EQUAL(weir_gguf_get_u64(g, "weir.training.steps", &steps), 0);
  WT_ASSERT_INT_EQ(steps, 7);
  weir_gguf_arr a;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_get_arr(g, "tokenizer.ggml.tokens", &a), 0);
  WT_ASSERT_INT_EQ(a.n, n_vocab);
  CU_ASSERT_EQUAL(weir_gguf_arr_str(&a, 261 + 11, &s), 0);
  CU_ASSERT(s.len == 4 && memcmp(s.ptr, "oses", 4) == 0);
  CU_ASSERT_EQUAL_FATAL(weir_gguf_get_arr(g, "tokenizer.ggml.scores", &a), 0);
  float sc = 0;
  CU_ASSERT_EQUAL(weir_gguf_arr_f32(&a, 261 + 5, &sc), 0);
  CU_ASSERT_EQUAL(sc, -5.0f);
  check_values(g, dir, WEIR_DTYPE_F16);

  /* The tokenizer from the file: pieces, byte fallback, control tokens. */
  weir_tokenizer *tok = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_tokenizer_from_gguf(g, &tok, err, sizeof err), 0);
  int32_t *ids = NULL;
  size_t nids = 0;
  const char *text = "<|im_start|>the LORD said unto Moses!<|im_end|>";
  CU_ASSERT_EQUAL(weir_tokenizer_encode(tok, text, strlen(text),
                                        WEIR_ENCODE_ADD_SPECIAL | WEIR_ENCODE_PARSE_SPECIAL,
                                        &ids, &nids), 0);
  CU_ASSERT(nids > 8 && ids[0] == 1 && ids[1] == 3 && ids[nids - 1] == 4);
  int has_piece = 0, has_byte = 0;
  for (size_t i = 0; i < nids; i++) {
    has_piece |= ids[i] == 261 + 10; /* "_M" */
    has_byte |= ids[i] == 5 + '!';
  }
  CU_ASSERT(has_piece && has_byte);
  free(ids);
  weir_tokenizer_free(tok);
  weir_gguf_close(g);

  /* The double-precision reference runs the file. */
  weir_ref_model *ref = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_ref_model_load(out, &ref), 0);
  int32_t toks[5] = {1, 270, 280, 262, 9};
  double *logits = malloc(sizeof(double) * 5 * (size_t)n_vocab);
  CU_ASSERT_EQUAL(weir_ref_forward(ref, toks, 5, logits), 0);
  int finite = 1;
  for (int i = 0; i < 5 * n_vocab; i++) finite &= isfinite(logits[i]) != 0;
  CU_ASSERT(finite);
  free(logits);
  weir_ref_model_free(ref);
  free(msg);
  free(args);
  free(out);
  wt_rmtree(dir);
  free(dir);
}

static void test_convert_types(void) {
  char *dir = wt_mkdtemp();
  write_export(dir, MUT_NONE);
  const struct {
    const char *type;
    weir_dtype dt;
  } cases[] = {{"f32", WEIR_DTYPE_F32}, {"bf16", WEIR_DTYPE_BF16}, {"q8_0", WEIR_DTYPE_Q8_0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = wt_strf("%s/m-%s.gguf", dir, cases[i].type);
    char *args = wt_strf("--in %s --out %s --type %s", dir, out, cases[i].type), *msg = NULL;
    int rc = run_convert(args, &msg);
    if (rc) fprintf(stderr, "\n%s\n", msg);
    WT_ASSERT_INT_EQ(rc, 0);
    weir_gguf *g = NULL;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(weir_gguf_open(out, &g, err, sizeof err), 0);
    if (cases[i].dt != WEIR_DTYPE_BF16) check_values(g, dir, cases[i].dt);
    else WT_ASSERT_INT_EQ(weir_gguf_find_tensor(g, "blk.0.attn_q.weight")->t.dtype, WEIR_DTYPE_BF16);
    weir_gguf_close(g);
    free(msg);
    free(args);
    free(out);
  }
  wt_rmtree(dir);
  free(dir);
}

static void test_convert_errors(void) {
  const struct {
    int mut;
    const char *want;
  } cases[] = {
      {MUT_TRUNCATE_BIN, "run past the end of tensors.bin"},
      {MUT_NAN, "is not finite"},
      {MUT_BAD_TOKEN_TYPE, "token_type[12] must be an integer 1..6"},
      {MUT_SHORT_SCORES, "tokenizer arrays must be non-empty and of one length"},
      {MUT_DROP_TENSOR, "blk.1.ffn_up.weight"},
      {MUT_DUP_TENSOR, "listed twice"},
      {MUT_BAD_HEADS, "head_count"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *dir = wt_mkdtemp(), *out = wt_strf("%s/m.gguf", dir);
    char *args = wt_strf("--in %s --out %s", dir, out), *msg = NULL;
    write_export(dir, cases[i].mut);
    int rc = run_convert(args, &msg);
    WT_ASSERT_INT_EQ(rc, 1);
    WT_ASSERT_STR_CONTAINS(msg, cases[i].want);
    char *tmp = wt_strf("%s.tmp", out);
    CU_ASSERT_FALSE(exists(out));
    CU_ASSERT_FALSE(exists(tmp));
    free(tmp);
    free(msg);
    free(args);
    free(out);
    wt_rmtree(dir);
    free(dir);
  }
  /* Malformed JSON, a missing directory. */
  char *dir = wt_mkdtemp(), *msg = NULL;
  write_export(dir, MUT_NONE);
  char *json_path = wt_strf("%s/model.json", dir);
  CU_ASSERT_EQUAL(wt_write_file(json_path, "{\"context_length\": 64,", 22), 0);
  char *args = wt_strf("--in %s --out %s/m.gguf", dir, dir);
  WT_ASSERT_INT_EQ(run_convert(args, &msg), 1);
  WT_ASSERT_STR_CONTAINS(msg, "is not a JSON object");
  free(msg);
  free(args);
  args = wt_strf("--in %s/nowhere --out %s/m.gguf", dir, dir);
  WT_ASSERT_INT_EQ(run_convert(args, &msg), 1);
  WT_ASSERT_STR_CONTAINS(msg, "cannot open");
  free(msg);
  free(args);
  free(json_path);
  wt_rmtree(dir);
  free(dir);
}

static void test_convert_usage(void) {
  const struct {
    const char *args;
    const char *want;
  } cases[] = {
      {"--out x.gguf", "--in DIR is required"},
      {"--in d", "--out FILE is required"},
      {"--in d --out x --type q4_k", "--type must be"},
      {"--in d --out x --typ f16", "unknown option '--typ'"},
      {"--i d --out x", "never abbreviated"},
      {"--in d --out x extra", "unexpected argument 'extra'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *msg = NULL;
    WT_ASSERT_INT_EQ(run_convert(cases[i].args, &msg), 2);
    WT_ASSERT_STR_CONTAINS(msg, cases[i].want);
    free(msg);
  }
  char *msg = NULL;
  WT_ASSERT_INT_EQ(run_convert("--help", &msg), 0);
  WT_ASSERT_STR_CONTAINS(msg, "usage: weir convert");
  free(msg);
}

int main(void) {
  static const wt_test tests[] = {
      {"f16 export: keys, tokenizer, values, reference runs it", test_convert_f16},
      {"f32, bf16 and q8_0 matrices", test_convert_types},
      {"malformed exports are refused, nothing left behind", test_convert_errors},
      {"usage errors", test_convert_usage},
      {NULL, NULL}};
  return wt_run_suite("convert", tests);
}
