/* The double-precision reference (tests/reference) on the trained default target
 * (models/kjv-target.gguf, F16 weights) rather than random weights:
 *  - greedy decoding through the real engine (plugins, paged KV cache, scheduler) produces,
 *    for several prompts including a chat-rendered one, 32 tokens each of which is the
 *    reference's argmax given the tokens before it (the reference's own greedy sequence);
 *  - the model's logits over prompt + generation are within 1e-4 of the reference's
 *    (relative to the largest logit), the bound the model suite sets for F16 sources;
 *  - the file's chat template is detected as ChatML and renders as Jinja2 renders it. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "engine/engine.h"
#include "kv/kv_pool.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
#include "reference.h"
#include "testutil.h"

#define TARGET WT_SOURCE_DIR "/models/kjv-target.gguf"
#define N_GEN 32

typedef struct collect {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;
  int32_t tokens[N_GEN];
  int32_t n;
  weir_finish_reason finish;
} collect;

static void on_event(void *user, const weir_gen_event *ev) {
  collect *c = user;
  pthread_mutex_lock(&c->lock);
  for (int32_t i = 0; i < ev->num_tokens && c->n < N_GEN; i++) c->tokens[c->n++] = ev->tokens[i];
  if (ev->finish != WEIR_FINISH_NONE) {
    c->finish = ev->finish;
    c->done = 1;
    pthread_cond_broadcast(&c->cond);
  }
  pthread_mutex_unlock(&c->lock);
}

/* n greedy tokens (EOS ignored) after the prompt, collected into *c. */
static void greedy(weir_engine *e, const int32_t *prompt, int32_t np, int32_t n, collect *c) {
  weir_gen_request q = {.prompt = prompt, .num_prompt = np, .max_tokens = n, .ignore_eos = 1,
                        .has_seed = 1};
  q.sampling = (weir_sampling_params){.struct_size = sizeof q.sampling, .temperature = 0,
                                      .top_p = 1, .repetition_penalty = 1, .num_logprobs = -1};
  CU_ASSERT_EQUAL_FATAL(weir_engine_submit(e, &q, on_event, c, NULL), 0);
  pthread_mutex_lock(&c->lock);
  while (!c->done) pthread_cond_wait(&c->cond, &c->lock);
  pthread_mutex_unlock(&c->lock);
  WT_ASSERT_INT_EQ(c->n, n);
}

static void config_for(weir_config *cfg) {
  weir_config_defaults(cfg);
  free(cfg->model_path);
  cfg->model_path = strdup(TARGET);
  cfg->memory_bytes = 16 << 20;
  cfg->kv_dtype = WEIR_DTYPE_F32;
  static char *dirs[1] = {WT_PLUGIN_DIR};
  cfg->plugin_dirs = dirs;
  cfg->num_plugin_dirs = 1;
}

/* The plugin directory list is ours, not the config's to free. */
static void config_free(weir_config *cfg) {
  cfg->plugin_dirs = NULL;
  cfg->num_plugin_dirs = 0;
  weir_config_free(cfg);
}

/* Engine logits for one sequence (every row) through the plugins: out [n][vocab]. */
static void model_logits(const int32_t *toks, int32_t n, float *out) {
  weir_config cfg;
  config_for(&cfg);
  weir_plugin_set ps = {0};
  weir_gguf *g = NULL;
  weir_llama *m = NULL;
  char err[512] = "";
  CU_ASSERT_EQUAL_FATAL(weir_plugin_set_load(&cfg, NULL, &ps), 0);
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(TARGET, &g, err, sizeof err), 0);
  const int32_t block = 16, nb = (n + block - 1) / block;
  weir_llama_hparams hp;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_llama_hparams(g, &hp, err, sizeof err), 0);
  weir_attn_shape shape;
  weir_llama_attn_shape(&hp, &shape);
  weir_kv_pool_params kp = {.block_size = block, .kv_dtype = WEIR_DTYPE_F32, .num_blocks = nb,
                            .max_model_len = nb * block, .groups = &shape, .num_groups = 1};
  weir_kv_pool *pool = NULL;
  int rc = weir_kv_pool_create(&kp, ps.device, ps.attention, &pool, err, sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  weir_llama_opts o = {.max_num_tokens = n, .max_num_seqs = 1, .max_logit_rows = n};
  rc = weir_llama_create(g, &ps, &o, pool, 0, &m, err, sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *rows = malloc(sizeof(int32_t) * (size_t)n);
  int32_t *table = malloc(sizeof(int32_t) * (size_t)nb);
  for (int32_t i = 0; i < n; i++) pos[i] = rows[i] = i;
  for (int32_t b = 0; b < nb; b++) table[b] = nb - 1 - b; /* any order: the table decides */
  int32_t *slots = malloc(sizeof(int32_t) * (size_t)n);
  for (int32_t i = 0; i < n; i++) slots[i] = table[i / block] * block + i % block;
  int32_t qsl[2] = {0, n}, ctx = n;
  weir_llama_batch b = {.num_tokens = n, .tokens = toks, .positions = pos, .num_seqs = 1,
                        .query_start_loc = qsl, .context_lens = &ctx, .block_tables = table,
                        .max_blocks_per_seq = nb, .slot_mapping = slots, .num_logit_rows = n,
                        .logit_rows = rows};
  float *logits = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_llama_forward(m, &b, &logits), 0);
  const weir_device_ops *d = ps.device->ops;
  const int32_t vocab = weir_llama_hparams_get(m)->n_vocab;
  CU_ASSERT_EQUAL(d->copy_d2h(ps.device->self, out, logits, sizeof(float) * (size_t)n * (size_t)vocab), 0);
  free(pos);
  free(rows);
  free(table);
  free(slots);
  weir_llama_destroy(m);
  weir_kv_pool_destroy(pool);
  weir_plugin_set_unload(&ps);
  weir_gguf_close(g);
  config_free(&cfg);
}

static void test_greedy_and_logits_vs_reference(void) {
  const struct {
    const char *text;
    int chat;
  } prompts[] = {{"In the beginning", 0},
                 {"And the LORD spake unto Moses, saying,", 0},
                 {"Blessed are the", 0},
                 {"Who was Moses?", 1}};
  weir_config cfg;
  config_for(&cfg);
  weir_engine *e = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_engine_create(&cfg, &e), 0);
  /* The file's own Jinja2 template is run (not a builtin stand-in) and renders as Jinja2
   * renders it (the expected text is Jinja2's output for this conversation). */
  weir_engine_info info;
  weir_engine_info_get(e, &info);
  CU_ASSERT_STRING_EQUAL(info.chat_template_name, "jinja");
  weir_chat_message conv[2] = {{"system", "Be brief."}, {"user", "Who was Moses?"}};
  char *r = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_engine_render_chat(e, conv, 2, 1, &r), 0);
  CU_ASSERT_STRING_EQUAL(r, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho "
                            "was Moses?<|im_end|>\n<|im_start|>assistant\n");
  free(r);
  weir_ref_model *ref = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_ref_model_load(TARGET, &ref), 0);
  const int vocab = weir_ref_model_hparams(ref)->n_vocab;
  for (size_t p = 0; p < sizeof prompts / sizeof prompts[0]; p++) {
    char *rendered = NULL;
    const char *text = prompts[p].text;
    if (prompts[p].chat) {
      weir_chat_message msg = {"user", text};
      CU_ASSERT_EQUAL_FATAL(weir_engine_render_chat(e, &msg, 1, 1, &rendered), 0);
      text = rendered;
    }
    int32_t *prompt = NULL, np = 0;
    CU_ASSERT_EQUAL_FATAL(weir_engine_tokenize(e, text, strlen(text), 1, &prompt, &np), 0);
    collect c = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    greedy(e, prompt, np, N_GEN, &c);

    /* Teacher-forced reference over the prompt and the first N_GEN - 1 generated tokens:
     * row np - 1 + i must have its maximum at generated token i. */
    const int32_t n = np + N_GEN - 1;
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)n);
    memcpy(seq, prompt, sizeof(int32_t) * (size_t)np);
    memcpy(seq + np, c.tokens, sizeof(int32_t) * (N_GEN - 1));
    double *want = malloc(sizeof(double) * (size_t)n * (size_t)vocab);
    CU_ASSERT_EQUAL_FATAL(weir_ref_forward(ref, seq, n, want), 0);
    int agree = 0;
    double min_gap = INFINITY;
    for (int i = 0; i < N_GEN; i++) {
      const double *row = want + (size_t)(np - 1 + i) * (size_t)vocab;
      int best = 0;
      for (int v = 1; v < vocab; v++) best = row[v] > row[best] ? v : best;
      double second = -INFINITY;
      for (int v = 0; v < vocab; v++) second = v != best && row[v] > second ? row[v] : second;
      min_gap = fmin(min_gap, row[best] - second);
      if (best != c.tokens[i]) break;
      agree++;
    }
    /* Logits of the same sequence through the plugins, every row. */
    float *got = malloc(sizeof(float) * (size_t)n * (size_t)vocab);
    model_logits(seq, n, got);
    double md = 0, mb = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)vocab; i++) {
      md = fmax(md, fabs((double)got[i] - want[i]));
      mb = fmax(mb, fabs(want[i]));
    }
    char *gen_text = NULL;
    size_t gen_len = 0;
    weir_engine_detokenize(e, c.tokens, N_GEN, &gen_text, &gen_len);
    printf("\n    \"%s\": %d/%d greedy tokens equal, smallest top-2 gap %.3g, logits error %.3g"
           "\n      -> %.*s", prompts[p].text, agree, N_GEN, min_gap, md / mb, (int)gen_len,
           gen_text ? gen_text : "");
    WT_ASSERT_INT_EQ(agree, N_GEN);
    CU_ASSERT(md / mb <= 1e-4);
    free(gen_text);
    free(got);
    free(want);
    free(seq);
    free(prompt);
    free(rendered);
  }
  weir_ref_model_free(ref);
  weir_engine_destroy(e);
  config_free(&cfg);
}

/* Greedy tokens of the engine with a given KV cache type, [n]. */
static void greedy_with_kv(weir_dtype kv, const char *text, int32_t n, int32_t *out) {
  weir_config cfg;
  config_for(&cfg);
  cfg.kv_dtype = kv;
  weir_engine *e = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_engine_create(&cfg, &e), 0);
  int32_t *prompt = NULL, np = 0;
  CU_ASSERT_EQUAL_FATAL(weir_engine_tokenize(e, text, strlen(text), 1, &prompt, &np), 0);
  collect c = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
  greedy(e, prompt, np, n, &c);
  memcpy(out, c.tokens, sizeof(int32_t) * (size_t)n);
  free(prompt);
  weir_engine_destroy(e);
  config_free(&cfg);
}

/* The int8 KV cache (one scale per row) on the trained model: greedy generation follows the
 * f16 cache's for N_GEN tokens on every prompt (measured: identical; the perplexity moves by
 * 0.002, docs/perf/quant.md). A KV type the attention plugin does not take is refused. */
static void test_int8_kv_cache(void) {
  static const char *prompts[] = {"In the beginning", "And the LORD spake unto Moses, saying,",
                                  "Blessed are the"};
  enum { N = N_GEN };
  for (size_t p = 0; p < sizeof prompts / sizeof prompts[0]; p++) {
    int32_t a[N], b[N];
    greedy_with_kv(WEIR_DTYPE_F16, prompts[p], N, a);
    greedy_with_kv(WEIR_DTYPE_I8, prompts[p], N, b);
    int same = 0;
    while (same < N && a[same] == b[same]) same++;
    printf("\n    int8 KV, \"%s\": %d/%d greedy tokens as with f16 KV", prompts[p], same, N);
    WT_ASSERT_INT_EQ(same, N);
  }
  weir_config cfg;
  config_for(&cfg);
  cfg.kv_dtype = WEIR_DTYPE_FP8_E4M3;
  weir_engine *e = NULL;
  CU_ASSERT_NOT_EQUAL(weir_engine_create(&cfg, &e), 0);
  CU_ASSERT_PTR_NULL(e);
  config_free(&cfg);
}

int main(void) {
  static const wt_test tests[] = {
      {"trained target: greedy tokens and logits vs the reference", test_greedy_and_logits_vs_reference},
      {"int8 KV cache", test_int8_kv_cache},
      {NULL, NULL}};
  return wt_run_suite("trained_model", tests);
}
