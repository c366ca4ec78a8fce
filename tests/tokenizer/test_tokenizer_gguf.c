/* weir_tokenizer_from_gguf: a GGUF file written with the fixtures' vocabularies gives a
 * tokenizer that encodes exactly as the one built from the spec, and malformed or missing
 * keys are refused with a message naming the key. */
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "template/chat_template.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "model/tokenizer.h"
#include "testutil.h"
#include "weir/status.h"

typedef struct vocab_arrays {
  int32_t n;
  const char **toks;
  size_t *lens;
  float *scores;
  int32_t *types;
} vocab_arrays;

static vocab_arrays arrays_of(const weir_tokenizer *t) {
  vocab_arrays v;
  v.n = weir_tokenizer_n_tokens(t);
  v.toks = malloc((size_t)v.n * sizeof *v.toks);
  v.lens = malloc((size_t)v.n * sizeof *v.lens);
  v.scores = malloc((size_t)v.n * sizeof *v.scores);
  v.types = malloc((size_t)v.n * sizeof *v.types);
  for (int32_t i = 0; i < v.n; i++) {
    weir_tok_str s;
    weir_tokenizer_token_text(t, i, &s);
    v.toks[i] = s.ptr;
    v.lens[i] = s.len;
    v.scores[i] = weir_tokenizer_token_score(t, i);
    v.types[i] = weir_tokenizer_token_type(t, i);
  }
  return v;
}

static void arrays_free(vocab_arrays *v) {
  free(v->toks);
  free(v->lens);
  free(v->scores);
  free(v->types);
}

/* What to leave out or break when writing the file. */
enum {
  F_NONE = 0,
  F_NO_MODEL = 1 << 0,
  F_BAD_MODEL = 1 << 1,
  F_SHORT_SCORES = 1 << 2,
  F_BAD_TYPE = 1 << 3,
  F_BOS_RANGE = 1 << 4,
  F_NO_MERGES = 1 << 5,
  F_NO_SCORES = 1 << 6,
  F_BOS_STRING = 1 << 7,
  F_PRE_QWEN2 = 1 << 8,
};

static weir_gguf *write_and_open(const char *dir, const char *model, const weir_tokenizer *t,
                                 const char *merges_path, int faults) {
  vocab_arrays v = arrays_of(t);
  weir_gguf_writer *w;
  CU_ASSERT_FATAL(weir_gguf_writer_new(&w) == 0);
  if (!(faults & F_NO_MODEL))
    weir_gguf_add_str(w, "tokenizer.ggml.model", faults & F_BAD_MODEL ? "t5" : model);
  weir_gguf_add_arr_str(w, "tokenizer.ggml.tokens", v.toks, v.lens, (uint64_t)v.n);
  if (strcmp(model, "gpt2") == 0)
    weir_gguf_add_str(w, "tokenizer.ggml.pre", faults & F_PRE_QWEN2 ? "qwen2" : "gpt-2");
  if (!(faults & F_NO_SCORES))
    weir_gguf_add_arr(w, "tokenizer.ggml.scores", WEIR_GGUF_F32, v.scores,
                      (uint64_t)v.n - (faults & F_SHORT_SCORES ? 1 : 0));
  if (faults & F_BAD_TYPE) v.types[5] = 42;
  weir_gguf_add_arr(w, "tokenizer.ggml.token_type", WEIR_GGUF_I32, v.types, (uint64_t)v.n);
  if (faults & F_BOS_STRING) weir_gguf_add_str(w, "tokenizer.ggml.bos_token_id", "1");
  else weir_gguf_add_u32(w, "tokenizer.ggml.bos_token_id",
                         faults & F_BOS_RANGE ? (uint32_t)v.n : (uint32_t)weir_tokenizer_bos(t));
  weir_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)weir_tokenizer_eos(t));
  if (weir_tokenizer_unk(t) >= 0)
    weir_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)weir_tokenizer_unk(t));
  weir_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", strcmp(model, "llama") == 0);
  if (merges_path && !(faults & F_NO_MERGES)) {
    size_t len;
    char *data = wt_read_file(merges_path, &len);
    CU_ASSERT_FATAL(data != NULL);
    const char **m = malloc(len * sizeof *m);
    uint64_t n = 0;
    for (char *line = data, *next; line && *line; line = next) {
      next = strchr(line, '\n');
      if (next) *next++ = '\0';
      if (line[0] != '#') m[n++] = line;
    }
    weir_gguf_add_arr_str(w, "tokenizer.ggml.merges", m, NULL, n);
    free(m);
    free(data);
  }
  char *path = wt_strf("%s/tok.gguf", dir);
  char err[256] = "";
  int rc = weir_gguf_write_file(w, path, err, sizeof err);
  if (rc) fprintf(stderr, "\n  write: %s\n", err);
  CU_ASSERT_FATAL(rc == 0);
  weir_gguf_writer_free(w);
  weir_gguf *g = NULL;
  rc = weir_gguf_open(path, &g, err, sizeof err);
  if (rc) fprintf(stderr, "\n  open: %s\n", err);
  CU_ASSERT_FATAL(rc == 0);
  free(path);
  arrays_free(&v);
  return g;
}

static void same_encoding(const weir_tokenizer *a, const weir_tokenizer *b, const char *cases) {
  fx_case *c;
  int n = fx_cases(cases, &c);
  CU_ASSERT_FATAL(n > 0);
  for (int i = 0; i < n; i++) {
    int32_t *x, *y;
    size_t nx, ny;
    WT_ASSERT_INT_EQ(weir_tokenizer_encode(a, c[i].text, c[i].text_len, WEIR_ENCODE_ADD_SPECIAL, &x, &nx), 0);
    WT_ASSERT_INT_EQ(weir_tokenizer_encode(b, c[i].text, c[i].text_len, WEIR_ENCODE_ADD_SPECIAL, &y, &ny), 0);
    CU_ASSERT(nx == ny && (nx == 0 || memcmp(x, y, nx * sizeof *x) == 0));
    free(x);
    free(y);
  }
  fx_cases_free(c, n);
}

static void test_llama_from_gguf(void) {
  char *dir = wt_mkdtemp();
  weir_tokenizer *ref = fx_llama();
  weir_gguf *g = write_and_open(dir, "llama", ref, NULL, F_NONE);
  weir_tokenizer *t = NULL;
  char err[256] = "";
  int rc = weir_tokenizer_from_gguf(g, &t, err, sizeof err);
  if (rc) fprintf(stderr, "\n  %s\n", err);
  WT_ASSERT_INT_EQ(rc, 0);
  CU_ASSERT_FATAL(t != NULL);
  WT_ASSERT_INT_EQ(weir_tokenizer_get_type(t), WEIR_TOKENIZER_LLAMA);
  WT_ASSERT_INT_EQ(weir_tokenizer_bos(t), 1);
  WT_ASSERT_INT_EQ(weir_tokenizer_eos(t), 2);
  WT_ASSERT_INT_EQ(weir_tokenizer_unk(t), 0);
  same_encoding(ref, t, "llama");
  weir_tokenizer_free(t);
  weir_gguf_close(g);
  weir_tokenizer_free(ref);
  wt_rmtree(dir);
  free(dir);
}

static void test_gpt2_from_gguf(void) {
  char *dir = wt_mkdtemp();
  weir_tokenizer *ref = fx_gpt2();
  weir_gguf *g = write_and_open(dir, "gpt2", ref,
                                WT_SOURCE_DIR "/tests/tokenizer/fixtures/gpt2_merges.txt", F_NONE);
  weir_tokenizer *t = NULL;
  char err[256] = "";
  int rc = weir_tokenizer_from_gguf(g, &t, err, sizeof err);
  if (rc) fprintf(stderr, "\n  %s\n", err);
  WT_ASSERT_INT_EQ(rc, 0);
  CU_ASSERT_FATAL(t != NULL);
  WT_ASSERT_INT_EQ(weir_tokenizer_get_type(t), WEIR_TOKENIZER_GPT2);
  same_encoding(ref, t, "gpt2");
  weir_tokenizer_free(t);
  weir_gguf_close(g);
  weir_tokenizer_free(ref);
  wt_rmtree(dir);
  free(dir);
}

/* tokenizer.ggml.pre selects the split: Qwen2 takes digits one at a time. */
static void test_pre_from_gguf(void) {
  char *dir = wt_mkdtemp();
  weir_tokenizer *ref = fx_gpt2();
  weir_gguf *g = write_and_open(dir, "gpt2", ref,
                                WT_SOURCE_DIR "/tests/tokenizer/fixtures/gpt2_merges.txt",
                                F_PRE_QWEN2);
  weir_tokenizer *t = NULL;
  WT_ASSERT_INT_EQ(weir_tokenizer_from_gguf(g, &t, NULL, 0), 0);
  CU_ASSERT_FATAL(t != NULL);
  const char *digits = "2026-11-22 1,000,000";
  int32_t *a, *b;
  size_t na, nb;
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(ref, digits, strlen(digits), 0, &a, &na), 0);
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, digits, strlen(digits), 0, &b, &nb), 0);
  /* GPT-2 merges digit runs; Qwen2's split leaves one token per digit. */
  size_t ndigits = 0;
  for (const char *p = digits; *p; p++) ndigits += *p >= '0' && *p <= '9';
  CU_ASSERT(na < ndigits);
  CU_ASSERT(nb >= ndigits);
  free(a);
  free(b);
  weir_tokenizer_free(t);
  weir_gguf_close(g);
  weir_tokenizer_free(ref);
  wt_rmtree(dir);
  free(dir);
}

static void expect_refused(const char *model, int faults, int want_rc, const char *msg) {
  char *dir = wt_mkdtemp();
  int gpt2 = strcmp(model, "gpt2") == 0;
  weir_tokenizer *ref = gpt2 ? fx_gpt2() : fx_llama();
  weir_gguf *g = write_and_open(dir, model, ref,
                                gpt2 ? WT_SOURCE_DIR "/tests/tokenizer/fixtures/gpt2_merges.txt" : NULL,
                                faults);
  weir_tokenizer *t = (weir_tokenizer *)1;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_tokenizer_from_gguf(g, &t, err, sizeof err), want_rc);
  CU_ASSERT(t == NULL);
  WT_ASSERT_STR_CONTAINS(err, msg);
  weir_gguf_close(g);
  weir_tokenizer_free(ref);
  wt_rmtree(dir);
  free(dir);
}

static void test_refusals(void) {
  expect_refused("llama", F_NO_MODEL, WEIR_E_NOTFOUND, "tokenizer.ggml.model is missing");
  expect_refused("llama", F_BAD_MODEL, WEIR_E_NOTSUP, "\"t5\" is not supported");
  expect_refused("llama", F_SHORT_SCORES, WEIR_E_FORMAT, "tokenizer.ggml.scores");
  expect_refused("llama", F_NO_SCORES, WEIR_E_NOTFOUND, "tokenizer.ggml.scores is missing");
  expect_refused("llama", F_BAD_TYPE, WEIR_E_FORMAT, "tokenizer.ggml.token_type[5] = 42");
  expect_refused("llama", F_BOS_RANGE, WEIR_E_FORMAT, "tokenizer.ggml.bos_token_id");
  expect_refused("llama", F_BOS_STRING, WEIR_E_FORMAT, "bos_token_id must be an integer");
  expect_refused("gpt2", F_NO_MERGES, WEIR_E_NOTFOUND, "tokenizer.ggml.merges is missing");
}

/* Models written by `weir mkmodel` (every tokenizer style and chat template it offers):
 * the tokenizer loads, the template is detected as the one written, the rendered chat
 * encodes with each template marker as one control token, and text round-trips. */
static void test_mkmodel_models(void) {
  static const char *styles[2] = {"llama", "gpt2"};
  char *dir = wt_mkdtemp();
  for (int s = 0; s < 2; s++)
    for (int id = 0; id < WEIR_CHAT_TEMPLATE_COUNT_; id++) {
      const char *tpl = weir_chat_template_name((weir_chat_template_id)id);
      char *path = wt_strf("%s/%s-%s.gguf", dir, styles[s], tpl);
      char *out = NULL;
      char *argv[] = {WT_WEIR, "mkmodel", "--tokenizer", (char *)styles[s], "--chat-template",
                      (char *)tpl, "--out", path, NULL};
      int rc = wt_run(argv, &out, 30000);
      if (rc) fprintf(stderr, "\n  mkmodel %s %s: %s\n", styles[s], tpl, out);
      WT_ASSERT_INT_EQ(rc, 0);
      free(out);
      weir_gguf *g = NULL;
      char err[256] = "";
      CU_ASSERT_FATAL(weir_gguf_open(path, &g, err, sizeof err) == 0);
      weir_tokenizer *t = NULL;
      rc = weir_tokenizer_from_gguf(g, &t, err, sizeof err);
      if (rc) fprintf(stderr, "\n  %s\n", err);
      CU_ASSERT_FATAL(rc == 0);

      weir_gguf_str jinja;
      CU_ASSERT_FATAL(weir_gguf_get_str(g, "tokenizer.chat_template", &jinja) == 0);
      char *j = strndup(jinja.ptr, (size_t)jinja.len);
      weir_chat_template_id got = WEIR_CHAT_TEMPLATE_COUNT_;
      WT_ASSERT_INT_EQ(weir_chat_template_detect(j, &got), 0);
      if ((int)got != id) fprintf(stderr, "\n  %s template detected as %s\n", tpl, weir_chat_template_name(got));
      WT_ASSERT_INT_EQ(got, id);
      free(j);

      weir_tok_str bos = {"", 0}, eos = {"", 0};
      if (weir_tokenizer_bos(t) >= 0) weir_tokenizer_token_text(t, weir_tokenizer_bos(t), &bos);
      if (weir_tokenizer_eos(t) >= 0) weir_tokenizer_token_text(t, weir_tokenizer_eos(t), &eos);
      char *bos_s = strndup(bos.ptr, bos.len), *eos_s = strndup(eos.ptr, eos.len);
      const weir_chat_message conv[3] = {{"user", "Hello there"}, {"assistant", "Hi."},
                                         {"user", "How are you?"}};
      char *prompt = NULL;
      WT_ASSERT_INT_EQ(weir_chat_render((weir_chat_template_id)id, conv, 3, 1, bos_s, eos_s, &prompt), 0);
      int32_t *ids;
      size_t n;
      WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, prompt, strlen(prompt), WEIR_ENCODE_PARSE_SPECIAL, &ids, &n), 0);
      /* Every control token's text left in the decoded ids came from a control token:
       * decoding with SKIP_SPECIAL leaves none of the template's markers behind. */
      char *plain;
      WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, ids, n, WEIR_DECODE_SKIP_SPECIAL, &plain, NULL), 0);
      static const char *markers[] = {"<|im_start|>", "<|im_end|>", "<|start_header_id|>",
                                      "<|eot_id|>", "<start_of_turn>", "<end_of_turn>",
                                      "<|end|>", "<|user|>", "<|assistant|>", "</s>"};
      for (size_t k = 0; k < sizeof markers / sizeof markers[0]; k++) {
        if (!strstr(prompt, markers[k]) || weir_tokenizer_find(t, markers[k], strlen(markers[k])) < 0)
          continue;
        if (strstr(plain, markers[k]))
          fprintf(stderr, "\n  %s/%s: marker %s was not parsed as one token\n", styles[s], tpl, markers[k]);
        CU_ASSERT(strstr(plain, markers[k]) == NULL);
      }
      CU_ASSERT(strstr(plain, "How are you?") != NULL);
      free(plain);
      free(ids);
      free(prompt);
      free(bos_s);
      free(eos_s);

      const char *text = "Streaming tokens: 42 caf\xC3\xA9s, \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80!";
      WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, text, strlen(text), WEIR_ENCODE_ADD_SPECIAL, &ids, &n), 0);
      char *dec;
      WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, ids, n, WEIR_DECODE_SKIP_SPECIAL, &dec, NULL), 0);
      CU_ASSERT_STRING_EQUAL(dec, text);
      free(dec);
      free(ids);
      weir_tokenizer_free(t);
      weir_gguf_close(g);
      free(path);
    }
  wt_rmtree(dir);
  free(dir);
}

/* Each family's tokenizer as `weir mkmodel --arch` writes it, against llama.cpp's ids for the
 * same strings (fixtures/fam_*_cases.tsv, written by scripts/compare-tokenizers.py from
 * llama-server's /tokenize). The February 2025 peer cannot load gemma3 or qwen3 files, so it
 * tokenized their twins (gemma2; qwen2 with the qwen3 template): the same tokenizer keys and
 * vocabulary, as the assertion on the written keys below checks. What each case catches:
 *  - gemma: SentencePiece without the dummy space prefix (add_space_prefix false); with the
 *    prefix every case differs;
 *  - qwen3: the qwen2 pre-tokenizer (digits one at a time); GPT-2's split merges digit runs;
 *  - phi3: control tokens parsed in text, and the space prefix after each one;
 *  - llama3 (the llama3.2-1b preset's tokenizer): the llama-bpe split (digits in threes). */
static void test_families_vs_peer(void) {
  static const struct {
    const char *fixture, *args;
  } fams[] = {
      {"fam_gemma", "--arch gemma3 --head-dim 16 --tied"},
      {"fam_qwen3", "--arch qwen3"},
      {"fam_phi3", "--arch phi3 --swa 96"},
      {"fam_llama3", "--arch llama --tokenizer gpt2 --chat-template llama3"},
  };
  char *dir = wt_mkdtemp();
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
    char *path = wt_strf("%s/%s.gguf", dir, fams[f].fixture);
    char *cmd = wt_strf("%s mkmodel --dim 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 "
                        "--ctx 1024 --type f32 --seed 3 --layers 2 %s --out %s",
                        WT_WEIR, fams[f].args, path);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL;
    int rc = wt_run(argv, &out, 30000);
    if (rc) fprintf(stderr, "\n  %s: %s\n", cmd, out);
    WT_ASSERT_INT_EQ(rc, 0);
    free(out);
    free(cmd);
    weir_gguf *g = NULL;
    char err[256] = "";
    CU_ASSERT_FATAL(weir_gguf_open(path, &g, err, sizeof err) == 0);
    weir_tokenizer *t = NULL;
    rc = weir_tokenizer_from_gguf(g, &t, err, sizeof err);
    if (rc) fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    /* The keys that make the family's tokenizer what it is. */
    weir_gguf_str pre = {0};
    int asp = 1;
    if (f == 0) {
      CU_ASSERT(weir_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &asp) == 0 && !asp);
    } else if (f == 1 || f == 3) {
      const char *want = f == 1 ? "qwen2" : "llama-bpe";
      CU_ASSERT(weir_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == 0 &&
                pre.len == strlen(want) && !memcmp(pre.ptr, want, pre.len));
    }
    fx_case *c;
    int n = fx_cases(fams[f].fixture, &c);
    CU_ASSERT_FATAL(n >= 20);
    int same = 0;
    for (int i = 0; i < n; i++) {
      int32_t *ids = NULL;
      size_t k = 0;
      WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, c[i].text, c[i].text_len,
                                             WEIR_ENCODE_PARSE_SPECIAL, &ids, &k), 0);
      int eq = k == c[i].n_ids && (k == 0 || !memcmp(ids, c[i].ids, k * sizeof *ids));
      if (!eq) fprintf(stderr, "\n  %s: \"%s\" differs from llama.cpp's ids", fams[f].fixture, c[i].text);
      same += eq;
      free(ids);
    }
    printf("\n    %s: %d/%d cases as llama.cpp", fams[f].fixture, same, n);
    WT_ASSERT_INT_EQ(same, n);
    fx_cases_free(c, n);
    weir_tokenizer_free(t);
    weir_gguf_close(g);
    free(path);
  }
  wt_rmtree(dir);
  free(dir);
}

int main(void) {
  static const wt_test tests[] = {{"llama_from_gguf", test_llama_from_gguf},
                                  {"families_vs_peer", test_families_vs_peer},
                                  {"gpt2_from_gguf", test_gpt2_from_gguf},
                                  {"pre_from_gguf", test_pre_from_gguf},
                                  {"refusals", test_refusals},
                                  {"mkmodel_models", test_mkmodel_models},
                                  {NULL, NULL}};
  return wt_run_suite("tokenizer_gguf", tests);
}
