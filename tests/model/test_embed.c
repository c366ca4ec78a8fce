/* Embeddings from the served model (issue 33, core/engine/engine_embed.c) through the real
 * engine, `weir mkmodel` files and plugins, against the double-precision reference
 * (tests/reference: weir_ref_forward_hidden, the output-normed hidden states):
 *  - mean, last-token and first-token pooling, L2-normalised, match the reference's within
 *    1e-4 (cosine > 0.99999), on an input longer than a step (so it runs in chunks over the
 *    paged cache) and on a short one;
 *  - the service's checks: empty input, ids outside the vocabulary, an input longer than the
 *    context, a too-small output;
 *  - embeddings asked from many threads while the engine generates give the same vectors
 *    as alone, the generation the same tokens, and no KV block stays used;
 *  - a dedicated embedding model ([embedding] model) of each architecture, bert and
 *    nomic-bert (`weir mkmodel --arch`), through the engine against the reference's
 *    (tests/reference/bert_ref.c) with mean, cls and last pooling; its WordPiece tokenizer
 *    ([CLS] ... [SEP], lowercasing, punctuation split, unk for what it cannot cover). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "engine/engine.h"
#include "engine/service.h"
#include "reference.h"
#include "testutil.h"
#include "weir/status.h"
#include "wt_model.h"

static char *g_dir, *g_model;

enum { DIM = 64, CTX = 512, LONG_N = 150, STEP_TOKENS = 32 };

/* A model made by the real `weir mkmodel` in this suite's directory (path malloc'd). */
static char *make_model(const char *name, const char *args) {
  return wt_mkmodel(g_dir, name, args);
}

/* The model every case uses, made by the first. */
static void need_model(void) {
  if (!g_model)
    g_model = make_model("llama", "--arch llama --layers 2 --dim 64 --heads 4 --kv-heads 2 "
                                  "--ffn 128 --vocab 512 --ctx 512 --type f32 --seed 3");
}

static weir_engine *start(weir_config *cfg, const char *pooling) {
  static char *dirs[1] = {WT_PLUGIN_DIR};
  need_model();
  weir_config_defaults(cfg);
  free(cfg->model_path);
  cfg->model_path = strdup(g_model);
  free(cfg->embedding_pooling);
  cfg->embedding_pooling = strdup(pooling);
  cfg->plugin_dirs = dirs;
  cfg->num_plugin_dirs = 1;
  cfg->kv_dtype = WEIR_DTYPE_F32;
  cfg->threads = 2;
  cfg->max_num_batched_tokens = STEP_TOKENS; /* a long input runs in chunks */
  cfg->max_num_seqs = 4;
  cfg->num_blocks = 128;
  weir_engine *e = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_engine_create(cfg, &e), 0);
  return e;
}

static void stop(weir_engine *e, weir_config *cfg) {
  weir_engine_destroy(e);
  cfg->plugin_dirs = NULL;
  cfg->num_plugin_dirs = 0;
  weir_config_free(cfg);
}

static void tokens_of(int32_t *t, int n, unsigned seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    t[i] = 3 + (int32_t)((seed >> 8) % 500u);
  }
}

/* The reference vector: the hidden states pooled as `pooling` says, normalised. */
static void ref_vector(const int32_t *t, int n, const char *pooling, double *want) {
  weir_ref_model *ref = NULL;
  need_model();
  CU_ASSERT_EQUAL_FATAL(weir_ref_model_load(g_model, &ref), 0);
  double *h = malloc(sizeof(double) * (size_t)n * DIM);
  CU_ASSERT_EQUAL_FATAL(weir_ref_forward_hidden(ref, t, n, h), 0);
  memset(want, 0, sizeof(double) * DIM);
  for (int i = 0; i < DIM; i++) {
    if (!strcmp(pooling, "mean")) {
      for (int r = 0; r < n; r++) want[i] += h[(size_t)r * DIM + i] / n;
    } else {
      want[i] = h[(size_t)(strcmp(pooling, "last") ? 0 : n - 1) * DIM + i];
    }
  }
  double ss = 0;
  for (int i = 0; i < DIM; i++) ss += want[i] * want[i];
  for (int i = 0; i < DIM; i++) want[i] /= sqrt(ss);
  free(h);
  weir_ref_model_free(ref);
}

static double max_diff(const float *a, const double *b) {
  double m = 0;
  for (int i = 0; i < DIM; i++) {
    double d = fabs(a[i] - b[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

static void pooling_case(const char *pooling) {
  weir_config cfg;
  weir_engine *e = start(&cfg, pooling);
  const weir_service *sv = weir_engine_service(e);
  WT_ASSERT_INT_EQ(sv->embed.dim, DIM);
  static const int lens[] = {LONG_N, 5, 1};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    int32_t t[LONG_N];
    tokens_of(t, lens[k], 99u + (unsigned)k);
    float got[DIM];
    double want[DIM];
    size_t dim = 0;
    char err[256] = "";
    int rc = weir_service_embed_tokens(sv, t, lens[k], got, DIM, &dim, err, sizeof err);
    if (rc) fprintf(stderr, "\n%s\n", err);
    WT_ASSERT_INT_EQ(rc, 0);
    WT_ASSERT_INT_EQ((int)dim, DIM);
    ref_vector(t, lens[k], pooling, want);
    double d = max_diff(got, want), cos = 0;
    for (int i = 0; i < DIM; i++) cos += got[i] * want[i];
    printf("\n    %s pooling, %3d tokens: max |diff| %.3g, cosine %.8f", pooling, lens[k], d,
           cos);
    CU_ASSERT(d < 1e-4);
    CU_ASSERT(cos > 0.99999);
  }
  weir_engine_stats st;
  weir_engine_stats_get(e, &st);
  WT_ASSERT_INT_EQ(st.kv_blocks_used, 0);
  stop(e, &cfg);
}

static void test_mean(void) { pooling_case("mean"); }
static void test_last(void) { pooling_case("last"); }
static void test_cls(void) { pooling_case("cls"); }

/* Pooling matters: the three vectors of one input differ (so each case above checks its own
 * pooling, not a shared one). */
static void test_poolings_differ(void) {
  int32_t t[20];
  tokens_of(t, 20, 5u);
  double a[DIM], b[DIM], c[DIM];
  ref_vector(t, 20, "mean", a);
  ref_vector(t, 20, "last", b);
  ref_vector(t, 20, "cls", c);
  double dab = 0, dac = 0;
  for (int i = 0; i < DIM; i++) {
    dab = fmax(dab, fabs(a[i] - b[i]));
    dac = fmax(dac, fabs(a[i] - c[i]));
  }
  CU_ASSERT(dab > 1e-2);
  CU_ASSERT(dac > 1e-2);
}

static void test_errors(void) {
  weir_config cfg;
  weir_engine *e = start(&cfg, "mean");
  const weir_service *sv = weir_engine_service(e);
  float out[DIM];
  size_t dim = 0;
  char err[256] = "";
  int32_t t[4] = {1, 2, 3, 4};
  WT_ASSERT_INT_EQ(weir_service_embed_tokens(sv, t, 0, out, DIM, &dim, err, sizeof err),
                   WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_service_embed(sv, "", 0, out, DIM, &dim, err, sizeof err), WEIR_E_INVAL);
  t[2] = sv->embed.vocab_size;
  WT_ASSERT_INT_EQ(weir_service_embed_tokens(sv, t, 4, out, DIM, &dim, err, sizeof err),
                   WEIR_E_RANGE);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "vocabulary"));
  t[2] = -1;
  WT_ASSERT_INT_EQ(weir_service_embed_tokens(sv, t, 4, out, DIM, &dim, err, sizeof err),
                   WEIR_E_RANGE);
  t[2] = 3;
  const int32_t over = sv->embed.context_length + 1;
  int32_t *big = calloc((size_t)over, sizeof *big);
  WT_ASSERT_INT_EQ(weir_service_embed_tokens(sv, big, over, out, DIM, &dim, err, sizeof err),
                   WEIR_E_RANGE);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "context"));
  free(big);
  WT_ASSERT_INT_EQ(weir_service_embed_tokens(sv, t, 4, out, DIM - 1, &dim, err, sizeof err),
                   WEIR_E_NOSPACE);
  WT_ASSERT_INT_EQ((int)dim, DIM);
  /* Text works, and gives a unit vector. */
  WT_ASSERT_INT_EQ(weir_service_embed(sv, "hello world", 11, out, DIM, &dim, err, sizeof err), 0);
  double ss = 0;
  for (int i = 0; i < DIM; i++) ss += (double)out[i] * out[i];
  CU_ASSERT(fabs(ss - 1.0) < 1e-5);
  stop(e, &cfg);
}

/* ---- embeddings beside generation -------------------------------------------------------- */

typedef struct gen_wait {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done, n;
  int32_t tokens[64];
} gen_wait;

static void on_event(void *user, const weir_gen_event *ev) {
  gen_wait *g = user;
  pthread_mutex_lock(&g->lock);
  for (int32_t i = 0; i < ev->num_tokens && g->n < 64; i++) g->tokens[g->n++] = ev->tokens[i];
  if (ev->finish != WEIR_FINISH_NONE) {
    g->done = 1;
    pthread_cond_broadcast(&g->cond);
  }
  pthread_mutex_unlock(&g->lock);
}

static void generate(weir_engine *e, gen_wait *g, int32_t *prompt, int n) {
  weir_gen_request q = {.prompt = prompt, .num_prompt = n, .max_tokens = 48, .ignore_eos = 1,
                        .has_seed = 1, .seed = 1};
  q.sampling = (weir_sampling_params){.struct_size = sizeof q.sampling, .temperature = 0,
                                      .top_p = 1, .repetition_penalty = 1, .num_logprobs = -1};
  CU_ASSERT_EQUAL_FATAL(weir_engine_submit(e, &q, on_event, g, NULL), 0);
}

static void wait_gen(gen_wait *g) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 120;
  pthread_mutex_lock(&g->lock);
  int rc = 0;
  while (!g->done && rc == 0) rc = pthread_cond_timedwait(&g->cond, &g->lock, &until);
  pthread_mutex_unlock(&g->lock);
  CU_ASSERT_FATAL(g->done);
}

typedef struct embed_thread {
  const weir_service *sv;
  int32_t t[LONG_N];
  int n;
  float out[DIM];
  int rc;
} embed_thread;

static void *embed_main(void *arg) {
  embed_thread *x = arg;
  char err[256];
  size_t dim;
  for (int rep = 0; rep < 3 && x->rc == 0; rep++)
    x->rc = weir_service_embed_tokens(x->sv, x->t, x->n, x->out, DIM, &dim, err, sizeof err);
  return NULL;
}

static void test_beside_generation(void) {
  weir_config cfg;
  weir_engine *e = start(&cfg, "mean");
  const weir_service *sv = weir_engine_service(e);
  enum { NT = 4 };
  embed_thread th[NT];
  float alone[NT][DIM];
  char err[256];
  size_t dim;
  for (int k = 0; k < NT; k++) {
    th[k] = (embed_thread){.sv = sv, .n = 40 + 30 * k};
    tokens_of(th[k].t, th[k].n, 300u + (unsigned)k);
    WT_ASSERT_INT_EQ(weir_service_embed_tokens(sv, th[k].t, th[k].n, alone[k], DIM, &dim, err,
                                               sizeof err), 0);
  }
  int32_t prompt[24];
  tokens_of(prompt, 24, 7u);
  gen_wait solo = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
  generate(e, &solo, prompt, 24);
  wait_gen(&solo);
  gen_wait mixed = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
  generate(e, &mixed, prompt, 24);
  pthread_t tid[NT];
  for (int k = 0; k < NT; k++) pthread_create(&tid[k], NULL, embed_main, &th[k]);
  for (int k = 0; k < NT; k++) pthread_join(tid[k], NULL);
  wait_gen(&mixed);
  for (int k = 0; k < NT; k++) {
    WT_ASSERT_INT_EQ(th[k].rc, 0);
    CU_ASSERT_EQUAL(memcmp(th[k].out, alone[k], sizeof alone[k]), 0);
  }
  WT_ASSERT_INT_EQ(mixed.n, solo.n);
  CU_ASSERT_EQUAL(memcmp(mixed.tokens, solo.tokens, sizeof(int32_t) * (size_t)solo.n), 0);
  weir_engine_stats st;
  weir_engine_stats_get(e, &st);
  WT_ASSERT_INT_EQ(st.kv_blocks_used, 0);
  stop(e, &cfg);
}

/* ---- dedicated embedding models ---------------------------------------------------------- */

static void encoder_case(const char *arch) {
  char *args = wt_strf("--arch %s --layers 2 --dim 64 --heads 4 --ffn 128 --vocab 512 --ctx 128 "
                       "--type f32 --seed 11", arch);
  char *path = make_model(arch, args);
  static const char *const poolings[] = {"mean", "cls", "last"};
  for (int p = 0; p < 3; p++) {
    weir_config cfg;
    need_model();
    static char *dirs[1] = {WT_PLUGIN_DIR};
    weir_config_defaults(&cfg);
    free(cfg.model_path);
    cfg.model_path = strdup(g_model);
    cfg.embedding_model = strdup(path);
    free(cfg.embedding_pooling);
    cfg.embedding_pooling = strdup(poolings[p]);
    cfg.plugin_dirs = dirs;
    cfg.num_plugin_dirs = 1;
    cfg.threads = 2;
    cfg.num_blocks = 64;
    weir_engine *e = NULL;
    CU_ASSERT_EQUAL_FATAL(weir_engine_create(&cfg, &e), 0);
    const weir_service *sv = weir_engine_service(e);
    WT_ASSERT_INT_EQ(sv->embed.dim, DIM);
    WT_ASSERT_INT_EQ(sv->embed.context_length, 128);
    CU_ASSERT_STRING_EQUAL(sv->embed.pooling, poolings[p]);
    static const int lens[] = {1, 9, 128};
    for (int k = 0; k < 3; k++) {
      int32_t t[128];
      tokens_of(t, lens[k], 50u + (unsigned)k);
      float got[DIM];
      double want[DIM];
      size_t dim = 0;
      char err[256] = "";
      int rc = weir_service_embed_tokens(sv, t, lens[k], got, DIM, &dim, err, sizeof err);
      if (rc) fprintf(stderr, "\n%s\n", err);
      WT_ASSERT_INT_EQ(rc, 0);
      WT_ASSERT_INT_EQ(weir_ref_bert_embed(path, t, lens[k], p, want), 0);
      double cos = 0;
      for (int i = 0; i < DIM; i++) cos += got[i] * want[i];
      const double d = max_diff(got, want);
      printf("\n    %s %s pooling, %3d tokens: max |diff| %.3g, cosine %.9f", arch, poolings[p],
             lens[k], d, cos);
      CU_ASSERT(d < 1e-3);
      CU_ASSERT(cos > 0.99999);
    }
    /* Longer than the model's context: refused, not truncated. */
    int32_t big[129] = {0};
    float out[DIM];
    size_t dim;
    char err[256];
    WT_ASSERT_INT_EQ(weir_service_embed_tokens(sv, big, 129, out, DIM, &dim, err, sizeof err),
                     WEIR_E_RANGE);
    weir_engine_destroy(e);
    cfg.plugin_dirs = NULL;
    cfg.num_plugin_dirs = 0;
    weir_config_free(&cfg);
  }
  free(path);
  free(args);
}

static void test_bert(void) { encoder_case("bert"); }
static void test_nomic_bert(void) { encoder_case("nomic-bert"); }

/* The WordPiece tokenizer of a mkmodel bert file, through the service. */
static void test_wordpiece(void) {
  char *path = make_model("wp", "--arch bert --layers 1 --dim 64 --heads 4 --ffn 128 --vocab 512 "
                                "--ctx 128 --type f32 --seed 1");
  weir_config cfg;
  need_model();
  static char *dirs[1] = {WT_PLUGIN_DIR};
  weir_config_defaults(&cfg);
  free(cfg.model_path);
  cfg.model_path = strdup(g_model);
  cfg.embedding_model = strdup(path);
  cfg.plugin_dirs = dirs;
  cfg.num_plugin_dirs = 1;
  cfg.num_blocks = 64;
  weir_engine *e = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_engine_create(&cfg, &e), 0);
  const weir_service *sv = weir_engine_service(e);
  int32_t *a = NULL, *b = NULL, *c = NULL, na = 0, nb = 0, nc = 0;
  WT_ASSERT_INT_EQ(weir_service_embed_tokenize(sv, "The river, the WEIR.", 20, &a, &na), 0);
  WT_ASSERT_INT_EQ(weir_service_embed_tokenize(sv, "the river , the weir .", 22, &b, &nb), 0);
  /* [CLS] the river , the weir . [SEP]: lowercased, punctuation its own word. */
  WT_ASSERT_INT_EQ(na, 8);
  WT_ASSERT_INT_EQ(nb, na);
  CU_ASSERT(na == nb && memcmp(a, b, sizeof(int32_t) * (size_t)na) == 0);
  WT_ASSERT_INT_EQ(a[0], 101);
  WT_ASSERT_INT_EQ(a[na - 1], 102);
  for (int32_t i = 1; i < na - 1; i++) CU_ASSERT(a[i] != 100);
  /* A character no piece covers makes its word unknown. */
  WT_ASSERT_INT_EQ(weir_service_embed_tokenize(sv, "river \xC3\xA9t\xC3\xA9", 11, &c, &nc), 0);
  WT_ASSERT_INT_EQ(nc, 4);
  if (nc == 4) WT_ASSERT_INT_EQ(c[2], 100);
  free(a);
  free(b);
  free(c);
  weir_engine_destroy(e);
  cfg.plugin_dirs = NULL;
  cfg.num_plugin_dirs = 0;
  weir_config_free(&cfg);
  free(path);
}

/* An embedding model the device cannot run, or a file that is not one, is refused at start
 * with the reason. */
static void test_refusals(void) {
  need_model();
  weir_config cfg;
  static char *dirs[1] = {WT_PLUGIN_DIR};
  weir_config_defaults(&cfg);
  free(cfg.model_path);
  cfg.model_path = strdup(g_model);
  cfg.embedding_model = strdup(g_model); /* a llama file */
  cfg.plugin_dirs = dirs;
  cfg.num_plugin_dirs = 1;
  cfg.num_blocks = 64;
  weir_engine *e = NULL;
  WT_ASSERT_INT_EQ(weir_engine_create(&cfg, &e), WEIR_E_NOTSUP);
  CU_ASSERT_PTR_NULL(e);
  cfg.plugin_dirs = NULL;
  cfg.num_plugin_dirs = 0;
  weir_config_free(&cfg);
}

int main(void) {
  g_dir = wt_mkdtemp();
  static const wt_test tests[] = {{"mean_vs_reference", test_mean},
                                  {"last_vs_reference", test_last},
                                  {"cls_vs_reference", test_cls},
                                  {"poolings_differ", test_poolings_differ},
                                  {"errors", test_errors},
                                  {"beside_generation", test_beside_generation},
                                  {"bert_vs_reference", test_bert},
                                  {"nomic_bert_vs_reference", test_nomic_bert},
                                  {"wordpiece", test_wordpiece},
                                  {"embedding_model_refusals", test_refusals},
                                  {NULL, NULL}};
  int rc = wt_run_suite("embed", tests);
  wt_rmtree(g_dir);
  free(g_dir);
  free(g_model);
  return rc;
}
