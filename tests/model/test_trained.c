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
#include "format/gguf.h"
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
  int gated; /* the first event waits for gate_open (g_gate), holding the engine thread */
} collect;

/* A gate a request's first event waits at, so the engine thread stays in that step until the
 * test thread has submitted the rest of a batch: the batch then really runs together, however
 * the test thread is scheduled (on a loaded machine the engine could otherwise finish the
 * first requests before the next are submitted). */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int open;
} g_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1};

static void gate_set(int open) {
  pthread_mutex_lock(&g_gate.lock);
  g_gate.open = open;
  pthread_cond_broadcast(&g_gate.cond);
  pthread_mutex_unlock(&g_gate.lock);
}

static void on_event(void *user, const weir_gen_event *ev) {
  collect *c = user;
  if (c->gated) {
    c->gated = 0; /* only the engine thread touches it after submit */
    pthread_mutex_lock(&g_gate.lock);
    while (!g_gate.open) pthread_cond_wait(&g_gate.cond, &g_gate.lock);
    pthread_mutex_unlock(&g_gate.lock);
  }
  pthread_mutex_lock(&c->lock);
  for (int32_t i = 0; i < ev->num_tokens && c->n < N_GEN; i++) c->tokens[c->n++] = ev->tokens[i];
  if (ev->finish != WEIR_FINISH_NONE) {
    c->finish = ev->finish;
    c->done = 1;
    pthread_cond_broadcast(&c->cond);
  }
  pthread_mutex_unlock(&c->lock);
}

/* Waits for c's final event. */
static void collect_wait(collect *c) {
  pthread_mutex_lock(&c->lock);
  while (!c->done) pthread_cond_wait(&c->cond, &c->lock);
  pthread_mutex_unlock(&c->lock);
}

/* Waits for c's final event, checks it gave n tokens and copies them to out. */
static void collect_take(collect *c, int32_t n, int32_t *out) {
  collect_wait(c);
  WT_ASSERT_INT_EQ(c->n, n);
  memcpy(out, c->tokens, sizeof(int32_t) * (size_t)n);
}

/* n greedy tokens (EOS ignored) after the prompt, collected into *c. */
static void greedy(weir_engine *e, const int32_t *prompt, int32_t np, int32_t n, collect *c) {
  weir_gen_request q = {.prompt = prompt, .num_prompt = np, .max_tokens = n, .ignore_eos = 1,
                        .has_seed = 1};
  q.sampling = (weir_sampling_params){.struct_size = sizeof q.sampling, .temperature = 0,
                                      .top_p = 1, .repetition_penalty = 1, .num_logprobs = -1};
  CU_ASSERT_EQUAL_FATAL(weir_engine_submit(e, &q, on_event, c, NULL), 0);
  collect_wait(c);
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

/* ---- speculative decoding with the trained draft model ---- */

#define DRAFT WT_SOURCE_DIR "/models/kjv-draft.gguf"

/* drafter.head_vocab of the engines draft_engine makes (0: the draft's whole vocabulary;
 * -1: the default). */
static int g_head_vocab = -1;
/* drafter.min_confidence of those engines, or the default when negative. */
static double g_min_conf = -1;

/* The trained target with the draft model drafting k tokens (k 0: no drafter). Every key is
 * set through weir_config_set, so the config owns it all: free it with weir_config_free. */
static weir_engine *draft_engine(weir_config *cfg, int k, int64_t num_blocks,
                                 const weir_engine_opts *opts) {
  weir_config_defaults(cfg);
  char err[256], mem[32], kk[16], hv[16], mc[32];
  snprintf(mem, sizeof mem, "%lld", (long long)num_blocks);
  snprintf(kk, sizeof kk, "%d", k);
  snprintf(hv, sizeof hv, "%d", g_head_vocab);
  snprintf(mc, sizeof mc, "%g", g_min_conf);
  const char *sets[][2] = {{"model.path", TARGET},
                           {"plugins.dirs", "[\"" WT_PLUGIN_DIR "\"]"},
                           {"cache.num_blocks", mem},
                           {"drafter.name", k > 0 ? "draft_model" : ""},
                           {"drafter.model", DRAFT},
                           {"drafter.num_speculative_tokens", k > 0 ? kk : "1"},
                           /* a fixed length: these tests check exactness, not the policy */
                           {"drafter.adaptive", "false"},
                           {"drafter.head_vocab", hv},
                           {"drafter.min_confidence", mc}};
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    if ((k > 0 || i < 3) && !(i == 7 && g_head_vocab < 0) && !(i == 8 && g_min_conf < 0)) {
      int rc = weir_config_set(cfg, sets[i][0], sets[i][1], err, sizeof err);
      if (rc) printf("\n    %s: %s", sets[i][0], err);
      CU_ASSERT_EQUAL(rc, 0);
    }
  weir_engine *e = NULL;
  CU_ASSERT_EQUAL(weir_engine_create_opts(cfg, opts, &e), 0);
  return e;
}

static const char *const k_spec_prompts[] = {
    "In the beginning",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto "
    "them, When ye be come into the land",
    "Blessed are the", "And it came to pass", "The LORD is my shepherd",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto "
    "them, When ye be come into the land"};
#define N_SPEC_PROMPTS 6

/* The prompts at once but the last, which repeats the second once the others are done (a
 * prefix-cache hit), greedy; out [N_SPEC_PROMPTS][N_GEN]. */
static void spec_run(int k, int64_t num_blocks, int32_t out[N_SPEC_PROMPTS][N_GEN],
                     weir_engine_stats *st) {
  weir_config cfg;
  weir_engine *e = draft_engine(&cfg, k, num_blocks, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  collect c[N_SPEC_PROMPTS];
  int32_t *prompts[N_SPEC_PROMPTS];
  for (int p = 0; p < N_SPEC_PROMPTS; p++) {
    int32_t np = 0;
    CU_ASSERT_EQUAL_FATAL(weir_engine_tokenize(e, k_spec_prompts[p], strlen(k_spec_prompts[p]),
                                               1, &prompts[p], &np), 0);
    /* The first request's first event holds the engine until the others are in. */
    c[p] = (collect){.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                     .gated = p == 0};
    if (p == 0) gate_set(0);
    weir_gen_request q = {.prompt = prompts[p], .num_prompt = np, .max_tokens = N_GEN,
                          .ignore_eos = 1, .has_seed = 1, .seed = 1};
    q.sampling = (weir_sampling_params){.struct_size = sizeof q.sampling, .temperature = 0,
                                        .top_p = 1, .repetition_penalty = 1, .num_logprobs = -1};
    if (p == N_SPEC_PROMPTS - 1) {
      gate_set(1);
      for (int w = 0; w < p; w++) collect_wait(&c[w]);
    }
    CU_ASSERT_EQUAL_FATAL(weir_engine_submit(e, &q, on_event, &c[p], NULL), 0);
  }
  for (int p = 0; p < N_SPEC_PROMPTS; p++) {
    collect_take(&c[p], N_GEN, out[p]);
    free(prompts[p]);
  }
  weir_engine_stats_get(e, st);
  WT_ASSERT_INT_EQ(st->kv_blocks_used, 0);
  weir_engine_destroy(e);
  weir_config_free(&cfg);
}

/* Greedy decoding with the draft model gives exactly the tokens of decoding without it, for
 * six prompts in one batch (one a prefix-cache hit), with a roomy KV pool and with one so
 * small that sequences are preempted and recomputed; drafts are really made and accepted. */
static void test_draft_model_greedy_identical(void) {
  int32_t plain[N_SPEC_PROMPTS][N_GEN], spec[N_SPEC_PROMPTS][N_GEN];
  weir_engine_stats s0, s1, s2;
  spec_run(0, 512, plain, &s0);
  spec_run(4, 512, spec, &s1);
  for (int p = 0; p < N_SPEC_PROMPTS; p++)
    CU_ASSERT_EQUAL(memcmp(plain[p], spec[p], sizeof plain[p]), 0);
  printf("\n    draft model, k 4: drafted %llu, accepted %llu, steps %llu (without: %llu)",
         (unsigned long long)s1.spec_draft_tokens, (unsigned long long)s1.spec_accepted_tokens,
         (unsigned long long)s1.num_steps, (unsigned long long)s0.num_steps);
  CU_ASSERT(s1.spec_draft_tokens > 0);
  /* 59% when written; a draft KV that missed a position (the last of a fully accepted run,
   * once) brought it to 17-33%, depending on what the stale slot held. */
  CU_ASSERT(s1.spec_accepted_tokens * 2 > s1.spec_draft_tokens);
  CU_ASSERT(s1.num_steps < s0.num_steps);
  CU_ASSERT(s1.prefix_hits_tokens > 0);
  /* 12 blocks of 16 tokens cannot hold five sequences of up to 55 tokens at once, so the
   * scheduler preempts and recomputes. */
  spec_run(4, 12, spec, &s2);
  for (int p = 0; p < N_SPEC_PROMPTS; p++)
    CU_ASSERT_EQUAL(memcmp(plain[p], spec[p], sizeof plain[p]), 0);
  printf("; small pool: %llu preemptions", (unsigned long long)s2.num_preemptions);
  CU_ASSERT(s2.num_preemptions > 0);
  /* Above, the draft's LM head by default (1,024 of the 4,096 ids); here the whole
   * vocabulary and 512 ids (its drafts come from those alone): greedy output is the
   * target's either way. */
  const int heads[] = {0, 512};
  for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
    const int saved = g_head_vocab;
    g_head_vocab = heads[h];
    spec_run(4, 512, spec, &s2);
    g_head_vocab = saved;
    for (int p = 0; p < N_SPEC_PROMPTS; p++)
      CU_ASSERT_EQUAL(memcmp(plain[p], spec[p], sizeof plain[p]), 0);
    printf("; head %d: drafted %llu, accepted %llu", heads[h],
           (unsigned long long)s2.spec_draft_tokens, (unsigned long long)s2.spec_accepted_tokens);
    CU_ASSERT(s2.spec_draft_tokens > 0);
    CU_ASSERT(s2.spec_accepted_tokens * 2 > s2.spec_draft_tokens);
  }
  /* drafter.min_confidence: off (every step drafts its 4), and at 0.9, where most steps
   * stop drafting early and their placeholders are trimmed from the batch of six sequences
   * (items shrink in the middle of the batch): greedy output is the target's either way, and
   * the trimmed run drafts fewer tokens for a higher share accepted. */
  weir_engine_stats s_off, s_hi;
  const double mcs[] = {0, 0.9};
  for (size_t m = 0; m < 2; m++) {
    g_min_conf = mcs[m];
    spec_run(4, 512, spec, m == 0 ? &s_off : &s_hi);
    g_min_conf = -1;
    for (int p = 0; p < N_SPEC_PROMPTS; p++)
      CU_ASSERT_EQUAL(memcmp(plain[p], spec[p], sizeof plain[p]), 0);
  }
  printf("; min_confidence 0: drafted %llu, accepted %llu; 0.9: drafted %llu, accepted %llu",
         (unsigned long long)s_off.spec_draft_tokens,
         (unsigned long long)s_off.spec_accepted_tokens,
         (unsigned long long)s_hi.spec_draft_tokens, (unsigned long long)s_hi.spec_accepted_tokens);
  CU_ASSERT(s_hi.spec_draft_tokens > 0);
  CU_ASSERT(s_hi.spec_draft_tokens < s_off.spec_draft_tokens);
  CU_ASSERT(s_hi.spec_accepted_tokens * s_off.spec_draft_tokens >
            s_off.spec_accepted_tokens * s_hi.spec_draft_tokens);
}

/* ---- lazy catch-up: no draft pass on a step that drafts nothing ---- */

#define LAZY_STEPS 512
#define LAZY_DRAFTS 2048

/* What the engine's test hooks saw (engine thread; read after the requests finished). */
typedef struct spec_trace {
  int32_t num_steps;
  weir_engine_spec_step steps[LAZY_STEPS];
  int32_t num_drafts; /* drafts[]: per verified sequence, its id, its count, its drafts */
  int32_t drafts[LAZY_DRAFTS];
} spec_trace;

/* The speculation length held by step number: a run of 2 drafting steps (k = 4), then 6 that
 * draft nothing, over and over. */
static int32_t lazy_force_k(void *user, uint64_t step) {
  (void)user;
  return step % 8 < 2 ? 4 : 0;
}

static void lazy_on_step(void *user, const weir_engine_spec_step *st) {
  spec_trace *t = user;
  if (t->num_steps < LAZY_STEPS) t->steps[t->num_steps] = *st;
  t->num_steps++;
}

static void lazy_on_drafts(void *user, uint64_t id, const int32_t *d, int32_t n) {
  spec_trace *t = user;
  if (t->num_drafts + 2 + n > LAZY_DRAFTS) {
    t->num_drafts = LAZY_DRAFTS + 1; /* overflow: fails the test below */
    return;
  }
  t->drafts[t->num_drafts++] = (int32_t)id;
  t->drafts[t->num_drafts++] = n;
  for (int32_t j = 0; j < n; j++) t->drafts[t->num_drafts++] = d[j];
}

/* Two prompts in turn, greedy, N_GEN tokens each, with the length held by lazy_force_k (k 0:
 * no drafter, no hooks); eager: the draft's KV caught up at every step; host: greedy drafts
 * and verification picked by the engine's host fallback (a device without argmax_rows), not
 * by the device plugin's argmax_rows (ABI 1.8, the default on every device). */
static void lazy_run(int k, int eager, int host, spec_trace *t, int32_t out[2][N_GEN],
                     weir_engine_stats *st) {
  weir_config cfg;
  memset(t, 0, sizeof *t);
  weir_engine_opts o = {.spec_force_k = lazy_force_k, .spec_on_step = lazy_on_step,
                        .spec_on_drafts = lazy_on_drafts, .spec_user = t,
                        .spec_eager_catch_up = eager, .spec_host_argmax = host};
  weir_engine *e = draft_engine(&cfg, k, 512, k > 0 ? &o : NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  collect c[2];
  int32_t *prompts[2];
  for (int p = 0; p < 2; p++) {
    int32_t np = 0;
    CU_ASSERT_EQUAL_FATAL(weir_engine_tokenize(e, k_spec_prompts[p], strlen(k_spec_prompts[p]),
                                               1, &prompts[p], &np), 0);
    c[p] = (collect){.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    weir_gen_request q = {.prompt = prompts[p], .num_prompt = np, .max_tokens = N_GEN,
                          .ignore_eos = 1, .has_seed = 1, .seed = 1};
    q.sampling = (weir_sampling_params){.struct_size = sizeof q.sampling, .temperature = 0,
                                        .top_p = 1, .repetition_penalty = 1, .num_logprobs = -1};
    CU_ASSERT_EQUAL_FATAL(weir_engine_submit(e, &q, on_event, &c[p], NULL), 0);
    /* One after the other: two requests in flight would meet the engine's steps as the
     * submitting thread happened to run, and the runs compared must step alike. */
    collect_take(&c[p], N_GEN, out[p]);
    free(prompts[p]);
  }
  weir_engine_stats_get(e, st);
  weir_engine_destroy(e);
  weir_config_free(&cfg);
}

/* With the speculation length held at 0, the draft model runs no forward pass at all: its KV
 * is left behind and caught up in the pass 0 of the next drafting step, one batch over every
 * token it missed. The drafts are then exactly those of the path that caught up at every
 * step (eager), and greedy output is the target's without a drafter. The eager run also shows
 * that the counters see a catch-up pass where there is one. */
static void test_draft_model_lazy_catch_up(void) {
  static spec_trace lazy, eager, none;
  int32_t plain[2][N_GEN], out_lazy[2][N_GEN], out_eager[2][N_GEN];
  weir_engine_stats s0, sl, se;
  lazy_run(0, 0, 0, &none, plain, &s0);
  lazy_run(4, 0, 0, &lazy, out_lazy, &sl);
  lazy_run(4, 1, 0, &eager, out_eager, &se);
  for (int p = 0; p < 2; p++) {
    CU_ASSERT_EQUAL(memcmp(plain[p], out_lazy[p], sizeof plain[p]), 0);
    CU_ASSERT_EQUAL(memcmp(plain[p], out_eager[p], sizeof plain[p]), 0);
  }
  CU_ASSERT(lazy.num_steps > 0 && lazy.num_steps <= LAZY_STEPS);
  CU_ASSERT(lazy.num_drafts > 0 && lazy.num_drafts <= LAZY_DRAFTS);
  /* The same drafts, step for step. */
  WT_ASSERT_INT_EQ(lazy.num_drafts, eager.num_drafts);
  CU_ASSERT(lazy.num_drafts == eager.num_drafts &&
            memcmp(lazy.drafts, eager.drafts, sizeof(int32_t) * (size_t)lazy.num_drafts) == 0);
  WT_ASSERT_INT_EQ(sl.spec_draft_tokens, se.spec_draft_tokens);
  WT_ASSERT_INT_EQ(sl.spec_accepted_tokens, se.spec_accepted_tokens);
  CU_ASSERT(sl.spec_accepted_tokens > 0);
  int32_t k0_steps = 0, resumed = 0, k0_run = 0, eager_k0_passes = 0;
  uint64_t passes = 0;
  const int32_t n = lazy.num_steps < LAZY_STEPS ? lazy.num_steps : LAZY_STEPS;
  for (int32_t i = 0; i < n; i++) {
    const weir_engine_spec_step *st = &lazy.steps[i];
    passes += (uint64_t)st->draft_passes;
    if (st->k == 0) {
      k0_steps++;
      k0_run++;
      WT_ASSERT_INT_EQ(st->draft_passes, 0);
      WT_ASSERT_INT_EQ(st->draft_tokens, 0);
      WT_ASSERT_INT_EQ(st->drafts, 0);
      continue;
    }
    if (k0_run >= 6 && st->drafts > 0) {
      /* Drafting resumes after six steps without: each drafting sequence's catch-up, at
       * least a token per missed step, goes into pass 0 (k passes in all at most). */
      resumed++;
      CU_ASSERT(st->draft_passes >= 1 && st->draft_passes <= st->k);
      CU_ASSERT(st->draft_tokens >= k0_run + st->draft_passes - 1);
    }
    k0_run = 0;
  }
  for (int32_t i = 0; i < eager.num_steps && i < LAZY_STEPS; i++)
    if (eager.steps[i].k == 0 && eager.steps[i].draft_passes > 0) eager_k0_passes++;
  printf("\n    %d steps, %d at k = 0 (no draft pass), %d resumed; %llu draft passes (eager: "
         "%llu, %d of them at k = 0); drafted %llu, accepted %llu",
         lazy.num_steps, k0_steps, resumed, (unsigned long long)sl.spec_draft_passes,
         (unsigned long long)se.spec_draft_passes, eager_k0_passes,
         (unsigned long long)sl.spec_draft_tokens, (unsigned long long)sl.spec_accepted_tokens);
  CU_ASSERT(k0_steps >= 12);
  CU_ASSERT(resumed >= 2);
  CU_ASSERT(eager_k0_passes >= 12);
  CU_ASSERT_EQUAL(sl.spec_draft_passes, passes);
  CU_ASSERT(sl.spec_draft_passes < se.spec_draft_passes);
  WT_ASSERT_INT_EQ(s0.spec_draft_passes, 0);
}

/* The draft's greedy drafts and greedy verification picked by the device plugin's argmax_rows
 * (ABI 1.8), as the engine does on every device with the op (the CPU device's vectorised
 * kernel here), against the engine's host fallback (spec_host_argmax: a device without the
 * op): the same drafts, step for step, through the draft's head of 1,024 ids
 * (drafter.head_vocab's default: the op maps the pick to its token id) and over the whole
 * vocabulary; greedy output is the target's. The confidences differ by float rounding only
 * (vector exp, another summation order); on these inputs no draft's stop moves. (The kernel
 * itself, ties, NaN and -inf rows included, is checked by tests/kernels at every ISA level,
 * and against the CUDA kernel on the CPU shim: tests/cuda/cpu_shim/test_ops_shim.cpp.) */
static void test_draft_model_device_argmax(void) {
  static spec_trace host, dev;
  int32_t plain[2][N_GEN], out_host[2][N_GEN], out_dev[2][N_GEN];
  weir_engine_stats s0, sh, sd;
  lazy_run(0, 0, 0, &host, plain, &s0);
  const int heads[] = {-1, 0};
  for (size_t h = 0; h < 2; h++) {
    const int saved = g_head_vocab;
    g_head_vocab = heads[h];
    lazy_run(4, 0, 1, &host, out_host, &sh);
    lazy_run(4, 0, 0, &dev, out_dev, &sd);
    g_head_vocab = saved;
    for (int p = 0; p < 2; p++) {
      CU_ASSERT_EQUAL(memcmp(plain[p], out_host[p], sizeof plain[p]), 0);
      CU_ASSERT_EQUAL(memcmp(plain[p], out_dev[p], sizeof plain[p]), 0);
    }
    CU_ASSERT(host.num_drafts > 0 && host.num_drafts <= LAZY_DRAFTS);
    WT_ASSERT_INT_EQ(dev.num_drafts, host.num_drafts);
    CU_ASSERT(dev.num_drafts == host.num_drafts &&
              memcmp(dev.drafts, host.drafts, sizeof(int32_t) * (size_t)host.num_drafts) == 0);
    WT_ASSERT_INT_EQ(sd.spec_accepted_tokens, sh.spec_accepted_tokens);
    /* The device really picked (every pass: greedy rows only), the host run never did. */
    int32_t picks_dev = 0, picks_host = 0, passes_dev = 0;
    for (int32_t i = 0; i < dev.num_steps && i < LAZY_STEPS; i++) {
      picks_dev += dev.steps[i].device_picks;
      passes_dev += dev.steps[i].draft_passes;
    }
    for (int32_t i = 0; i < host.num_steps && i < LAZY_STEPS; i++)
      picks_host += host.steps[i].device_picks;
    CU_ASSERT(passes_dev > 0);
    WT_ASSERT_INT_EQ(picks_dev, passes_dev);
    WT_ASSERT_INT_EQ(picks_host, 0);
    /* Greedy verification too: one device pick per verified sequence with drafts. */
    int32_t vpicks_dev = 0, vpicks_host = 0, verified_dev = 0;
    for (int32_t i = 0; i < dev.num_steps && i < LAZY_STEPS; i++) {
      vpicks_dev += dev.steps[i].verify_picks;
      verified_dev += dev.steps[i].drafts > 0;
    }
    for (int32_t i = 0; i < host.num_steps && i < LAZY_STEPS; i++)
      vpicks_host += host.steps[i].verify_picks;
    CU_ASSERT(vpicks_dev >= verified_dev && verified_dev > 0);
    WT_ASSERT_INT_EQ(vpicks_host, 0);
    printf("%s head %d: drafted %llu, accepted %llu (host and device picks)", h ? ";" : "\n   ",
           heads[h], (unsigned long long)sd.spec_draft_tokens,
           (unsigned long long)sd.spec_accepted_tokens);
  }
}

/* Two greedy requests and one sampled (temperature 0.8) at once, k = 4: their draft passes
 * mix greedy rows with a sampled one. On the CPU device every row of such a pass is picked by
 * the device's argmax_rows (the sampled row's pick unused), so no greedy row falls back to
 * the host's scan: every draft pass counts as picked on the device, and with the host
 * fallback (spec_host_argmax) none does. Greedy output is the no-drafter's either way, and
 * the sampled request's tokens are the same in both runs (the sampler reads the same rows,
 * the greedy rows' picks and confidences match the host's here). out[0..1] greedy, out[2]
 * sampled; *passes and *picked over every step. */
static void mixed_run(int k, int host, int32_t out[3][N_GEN], int32_t *passes, int32_t *picked) {
  static spec_trace t;
  memset(&t, 0, sizeof t);
  weir_engine_opts o = {.spec_on_step = lazy_on_step, .spec_user = &t, .spec_host_argmax = host};
  weir_config cfg;
  weir_engine *e = draft_engine(&cfg, k, 512, k > 0 ? &o : NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  static const char *const prompts_txt[3] = {"In the beginning", "Blessed are the",
                                             "And it came to pass"};
  collect c[3];
  int32_t *prompts[3];
  for (int p = 0; p < 3; p++) {
    int32_t np = 0;
    CU_ASSERT_EQUAL_FATAL(weir_engine_tokenize(e, prompts_txt[p], strlen(prompts_txt[p]), 1,
                                               &prompts[p], &np), 0);
    c[p] = (collect){.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    weir_gen_request q = {.prompt = prompts[p], .num_prompt = np, .max_tokens = N_GEN,
                          .ignore_eos = 1, .has_seed = 1, .seed = 7};
    q.sampling = (weir_sampling_params){.struct_size = sizeof q.sampling,
                                        .temperature = p == 2 ? 0.8f : 0, .top_p = 1,
                                        .repetition_penalty = 1, .num_logprobs = -1};
    CU_ASSERT_EQUAL_FATAL(weir_engine_submit(e, &q, on_event, &c[p], NULL), 0);
  }
  for (int p = 0; p < 3; p++) {
    collect_take(&c[p], N_GEN, out[p]);
    free(prompts[p]);
  }
  weir_engine_destroy(e);
  weir_config_free(&cfg);
  *passes = *picked = 0;
  for (int32_t i = 0; i < t.num_steps && i < LAZY_STEPS; i++) {
    *passes += t.steps[i].draft_passes;
    *picked += t.steps[i].device_picks;
  }
}

static void test_draft_model_mixed_pass(void) {
  int32_t plain[3][N_GEN], dev[3][N_GEN], host[3][N_GEN];
  int32_t passes0, picked0, passes_d, picked_d, passes_h, picked_h;
  mixed_run(0, 0, plain, &passes0, &picked0);
  mixed_run(4, 0, dev, &passes_d, &picked_d);
  mixed_run(4, 1, host, &passes_h, &picked_h);
  for (int p = 0; p < 2; p++) {
    CU_ASSERT_EQUAL(memcmp(plain[p], dev[p], sizeof plain[p]), 0);
    CU_ASSERT_EQUAL(memcmp(plain[p], host[p], sizeof plain[p]), 0);
  }
  CU_ASSERT_EQUAL(memcmp(dev[2], host[2], sizeof dev[2]), 0);
  printf("\n    mixed passes: %d (device picked %d), host fallback %d (picked %d)", passes_d,
         picked_d, passes_h, picked_h);
  CU_ASSERT(passes_d > 0);
  WT_ASSERT_INT_EQ(picked_d, passes_d);
  WT_ASSERT_INT_EQ(picked_h, 0);
}

/* A draft model that cannot draft for the target is refused at start, saying why (through
 * the real binary, whose exit status and message an operator sees). */
static void test_draft_model_refused(void) {
  char *dir = wt_mkdtemp();
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  struct {
    const char *what, *mkmodel, *expect;
  } cases[] = {{"missing", NULL, "missing.gguf"},
               {"vocab512", "--preset tiny --seed 1", "vocabulary of 512 tokens"},
               {"vocab4096", "--preset tiny --vocab 4096 --seed 1", "must share the target's"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *path = wt_strf("%s/%s.gguf", dir, cases[i].what);
    char *out = NULL;
    if (cases[i].mkmodel) {
      char *argv[16] = {WT_WEIR, "mkmodel"};
      int n = 2;
      char *opts = strdup(cases[i].mkmodel);
      for (char *t = strtok(opts, " "); t && n < 12; t = strtok(NULL, " ")) argv[n++] = t;
      argv[n++] = "--out";
      argv[n++] = path;
      argv[n] = NULL;
      WT_ASSERT_INT_EQ(wt_run(argv, &out, 60000), 0);
      free(out);
      free(opts);
    }
    char *draft_opt = wt_strf("drafter.model=%s", path);
    char *argv[] = {WT_WEIR, "generate", "--model", TARGET, "--set", "plugins.dirs=[\"" WT_PLUGIN_DIR "\"]",
                    "--set", "drafter.name=draft_model", "--set", draft_opt, "--prompt", "x",
                    "-n", "2", NULL};
    WT_ASSERT_INT_EQ(wt_run(argv, &out, 60000), 1);
    if (!out || !strstr(out, cases[i].expect))
      printf("\n    %s: the output does not say \"%s\": %s", cases[i].what, cases[i].expect,
             out ? out : "(none)");
    CU_ASSERT(out && strstr(out, cases[i].expect));
    free(out);
    free(draft_opt);
    free(path);
  }
  wt_rmtree(dir);
  free(dir);
}

/* Which generated token second_tokens counts (1: the second) and the requests' max_tokens. */
static int g_count_at = 1, g_max_tokens = 3;

/* The second generated token of n seeded requests (seeds 1..n) at temperature 1, max 3
 * tokens: with k >= 1 that token is always a drafted position (the first comes from the
 * prompt's step, which drafts nothing). counts [vocab]. (g_count_at and g_max_tokens pick
 * another token and length.) */
static void second_tokens(int k, int break_residual, int n, int32_t *counts, int32_t vocab) {
  weir_config cfg;
  weir_engine_opts o = {.spec_break_residual = break_residual};
  weir_engine *e = draft_engine(&cfg, k, 2048, &o);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  const char *text = "And it came to pass";
  int32_t *prompt = NULL, np = 0;
  CU_ASSERT_EQUAL_FATAL(weir_engine_tokenize(e, text, strlen(text), 1, &prompt, &np), 0);
  enum { WAVE = 200 };
  collect *c = calloc(WAVE, sizeof *c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  for (int base = 0; base < n; base += WAVE) {
    const int m = n - base < WAVE ? n - base : WAVE;
    for (int i = 0; i < m; i++) {
      c[i] = (collect){.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
      weir_gen_request q = {.prompt = prompt, .num_prompt = np, .max_tokens = g_max_tokens,
                            .ignore_eos = 1, .has_seed = 1, .seed = (uint64_t)(base + i + 1)};
      q.sampling = (weir_sampling_params){.struct_size = sizeof q.sampling, .temperature = 1,
                                          .top_p = 1, .repetition_penalty = 1,
                                          .num_logprobs = -1};
      CU_ASSERT_EQUAL_FATAL(weir_engine_submit(e, &q, on_event, &c[i], NULL), 0);
    }
    for (int i = 0; i < m; i++) {
      collect_wait(&c[i]);
      const int at = g_count_at;
      if (c[i].n > at && c[i].tokens[at] >= 0 && c[i].tokens[at] < vocab)
        counts[c[i].tokens[at]]++;
    }
  }
  weir_engine_stats st;
  weir_engine_stats_get(e, &st);
  if (k > 0) {
    printf("\n    k %d%s: drafted %llu, accepted %llu", k, break_residual ? " (broken residual)" : "",
           (unsigned long long)st.spec_draft_tokens, (unsigned long long)st.spec_accepted_tokens);
    CU_ASSERT(st.spec_draft_tokens >= (uint64_t)n);
  }
  free(c);
  free(prompt);
  weir_engine_destroy(e);
  weir_config_free(&cfg);
}

/* Pearson's chi-square test of homogeneity of two samples of token counts: tokens with 10 or
 * more draws in both together are bins of their own, the rest pooled. Returns the upper tail
 * probability (Wilson-Hilferty approximation of the chi-square distribution). */
static double homogeneity_p(const int32_t *a, const int32_t *b, int32_t vocab, int *bins) {
  double na = 0, nb = 0;
  for (int32_t v = 0; v < vocab; v++) na += a[v], nb += b[v];
  double ra = 0, rb = 0, x2 = 0;
  int nbins = 0;
  for (int32_t v = 0; v <= vocab; v++) {
    double oa, ob;
    if (v < vocab) {
      if (a[v] + b[v] < 10) {
        ra += a[v], rb += b[v];
        continue;
      }
      oa = a[v], ob = b[v];
    } else {
      if (ra + rb < 10) break;
      oa = ra, ob = rb;
    }
    const double t = oa + ob, ea = t * na / (na + nb), eb = t * nb / (na + nb);
    x2 += (oa - ea) * (oa - ea) / ea + (ob - eb) * (ob - eb) / eb;
    nbins++;
  }
  *bins = nbins;
  const double df = nbins - 1;
  if (df < 1) return 1.0;
  const double z = (pow(x2 / df, 1.0 / 3.0) - (1.0 - 2.0 / (9.0 * df))) / sqrt(2.0 / (9.0 * df));
  return 0.5 * erfc(z / sqrt(2.0));
}

/* At temperature 1 the tokens speculative decoding with the draft model gives are drawn from
 * the target's distribution: a chi-square test cannot tell 3000 seeded samples of a drafted
 * position from 3000 without drafts, and it does tell them apart when the residual
 * resampling at a rejection is broken on purpose (drawing from p instead of max(0, p - q)). */
static void test_draft_model_distribution(void) {
  enum { N = 3000, V = 4096 };
  int32_t *plain = calloc(V, 4), *spec = calloc(V, 4), *broken = calloc(V, 4);
  CU_ASSERT_FATAL(plain && spec && broken);
  second_tokens(0, 0, N, plain, V);
  second_tokens(2, 0, N, spec, V);
  second_tokens(2, 1, N, broken, V);
  int b1 = 0, b2 = 0;
  const double p_ok = homogeneity_p(plain, spec, V, &b1);
  const double p_bad = homogeneity_p(plain, broken, V, &b2);
  printf("\n    chi-square p: speculative %.3g (%d bins), broken residual %.3g (%d bins)", p_ok,
         b1, p_bad, b2);
  CU_ASSERT(b1 >= 10);
  CU_ASSERT(p_ok > 1e-3);
  CU_ASSERT(p_bad < 1e-4);
  /* Above, the draft's LM head by default (1,024 ids); here one of 512 ids only
   * (drafter.head_vocab): q is 0 for every other token, which the target then gets from the
   * residual alone; still the target's distribution, and still told apart when the residual
   * is broken. */
  const int saved = g_head_vocab;
  g_head_vocab = 512;
  memset(spec, 0, V * 4);
  memset(broken, 0, V * 4);
  second_tokens(2, 0, N, spec, V);
  second_tokens(2, 1, N, broken, V);
  g_head_vocab = saved;
  const double p_head = homogeneity_p(plain, spec, V, &b1);
  const double p_head_bad = homogeneity_p(plain, broken, V, &b2);
  printf("; head 512: speculative %.3g (%d bins), broken residual %.3g (%d bins)", p_head, b1,
         p_head_bad, b2);
  CU_ASSERT(b1 >= 10);
  CU_ASSERT(p_head > 1e-3);
  CU_ASSERT(p_head_bad < 1e-4);
  /* Drafting that stops at a low confidence (drafter.min_confidence 0.9, 3 drafts asked in
   * the first decode step of 5-token answers: most steps stop after one draft and are
   * trimmed) leaves the distribution the target's: the third token, which is a bonus token
   * of a trimmed step or a checked draft of a kept one, against no drafts. */
  g_count_at = 2;
  g_max_tokens = 5;
  memset(plain, 0, V * 4);
  memset(spec, 0, V * 4);
  second_tokens(0, 0, N, plain, V);
  g_min_conf = 0.9;
  second_tokens(4, 0, N, spec, V);
  g_min_conf = -1;
  g_count_at = 1;
  g_max_tokens = 3;
  const double p_conf = homogeneity_p(plain, spec, V, &b1);
  printf("; min_confidence 0.9, k 4, third token: speculative %.3g (%d bins)", p_conf, b1);
  CU_ASSERT(b1 >= 10);
  CU_ASSERT(p_conf > 1e-3);
  free(plain);
  free(spec);
  free(broken);
}

int main(void) {
  static const wt_test tests[] = {
      {"draft model: the distribution at temperature 1 (chi-square)", test_draft_model_distribution},
      {"draft model: greedy identical, batched, preempted, prefix hits", test_draft_model_greedy_identical},
      {"draft model: no pass at k = 0, lazy catch-up drafts as eager", test_draft_model_lazy_catch_up},
      {"draft model: greedy drafts picked on the device as on the host", test_draft_model_device_argmax},
      {"draft model: a pass of greedy and sampled rows picked on the device", test_draft_model_mixed_pass},
      {"draft model: refused when it cannot draft for the target", test_draft_model_refused},
      {"trained target: greedy tokens and logits vs the reference", test_greedy_and_logits_vs_reference},
      {"int8 KV cache", test_int8_kv_cache},
      {NULL, NULL}};
  return wt_run_suite("trained_model", tests);
}
