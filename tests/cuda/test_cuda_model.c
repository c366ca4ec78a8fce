/* The model graph (core/model/llama.c) driven through the CUDA plugins, on one GGUF:
 *  - CUDA against CPU: a 32-token prompt, then 64 greedy steps with the CUDA run's token fed
 *    to both (so one near-tie cannot derail the rest): every step's greedy token is the same,
 *    and every logit is within LOGIT_BOUND of the largest |logit| (docs/cuda.md).
 *  - step graphs against plain launches: 13 sequences decoding in changing subsets (13, 8, 3,
 *    1, 5, 12 at a time: exact and padded sizes), with the device's graphs dropped midway as
 *    a draft model's destroy would: the same tokens, logits within GRAPH_BOUND, and the graph
 *    run really replayed steps (and recorded again after the drop).
 *  - the model families (gemma2, gemma3, qwen3, phi3 with LongRoPE, llama3 rope_freqs, YaRN)
 *    CUDA against CPU the same way, with windows shorter than the run.
 * The model is $WEIR_TEST_CUDA_MODEL (gpu-check passes the 1.1B shape with f16 weights), else
 * a small one made here with the real `weir mkmodel`. Plugins: $WEIR_CUDA_PLUGIN_DIR, else the
 * build tree. Exits 77 (skipped) when the CUDA device plugin finds no GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "format/gguf.h"
#include "model/llama.h"
#include "plugin/loader.h"
#include "testutil.h"
#include "wt_model.h"
#include "weir/device.h"

/* f16 weights and KV on both sides; the CUDA GEMM rounds activations to f16 on the way in
 * (prefill), the CPU plugin does not: a few 1e-3 of the largest logit is the expected gap. */
#define LOGIT_BOUND 1e-2
/* The same kernels with and without a graph; only the split of the KV range and cuBLAS's
 * choice for a padded row count differ, both f32 summation order. */
/* A graph runs each step padded to its shape's size and plans attention for the longest
 * context: other GEMM tiles (cuBLAS picks by the padded row count) and other KV splits, so
 * sums run in another order. On an H200 (1.1B f16) that moved logits by up to 1.2e-3 of the
 * largest, as much as CUDA against the CPU; a missing or stale operation moves them by O(1). */
#define GRAPH_BOUND 5e-3
#define MAX_SEQS 16
#define MAX_LEN 512
#define SPEC_K 4 /* verification steps of up to SPEC_K + 1 tokens per sequence */

static char *g_model;
static char *g_dir;

typedef wt_model fixture;

static const char *plugin_dir(void) {
  const char *e = getenv("WEIR_CUDA_PLUGIN_DIR");
  return e && *e ? e : WT_PLUGIN_DIR;
}

/* Opens the model on `device` ("cuda" or "cpu"); 0, or -1 with the reason in err. */
static int fixture_open(fixture *f, const char *device, int32_t graph_max, char *err,
                        size_t errlen) {
  memset(f, 0, sizeof *f);
  weir_config_defaults(&f->cfg);
  const int cuda = !strcmp(device, "cuda");
  if (weir_config_set(&f->cfg, "device.name", device, err, errlen) ||
      weir_config_set(&f->cfg, "attention.name", cuda ? "paged" : "paged", err,
                      errlen))
    return -1;
  static char *dirs[1];
  dirs[0] = (char *)plugin_dir();
  f->cfg.plugin_dirs = dirs;
  f->cfg.num_plugin_dirs = 1;
  f->cfg.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  int rc = weir_plugin_set_load(&f->cfg, NULL, &f->plugins);
  f->cfg.plugin_dirs = NULL;
  f->cfg.num_plugin_dirs = 0;
  if (rc) {
    snprintf(err, errlen, "loading the %s plugins: %s", device, weir_strerror(rc));
    return -1;
  }
  if (weir_gguf_open(g_model, &f->gguf, err, errlen)) return -1;
  weir_llama_hparams hp;
  if (weir_gguf_llama_hparams(f->gguf, &hp, err, errlen)) return -1;
  weir_attn_shape shape;
  weir_llama_attn_shape(&hp, &shape);
  weir_kv_pool_params kp = {.block_size = 16,
                            .kv_dtype = WEIR_DTYPE_F16,
                            .num_blocks = MAX_SEQS * (MAX_LEN / 16) + 8,
                            .max_model_len = MAX_LEN,
                            .prefix_caching = 0,
                            .groups = &shape,
                            .num_groups = 1};
  if (weir_kv_pool_create(&kp, f->plugins.device, f->plugins.attention, &f->pool, err, errlen))
    return -1;
  f->kv = weir_kv_pool_cache(f->pool);
  weir_llama_opts o = {.max_num_tokens = MAX_LEN,
                       .max_num_seqs = MAX_SEQS,
                       .max_logit_rows = MAX_LEN,
                       .step_graph_max_batch = graph_max,
                       .step_graph_max_rows = SPEC_K + 1};
  if (weir_llama_create(f->gguf, &f->plugins, &o, f->pool, 0, &f->model, err, errlen))
    return -1;
  f->vocab = hp.n_vocab;
  return 0;
}

static void fixture_close(fixture *f) { wt_model_close(f); }

static void open_or_fail(fixture *f, const char *device, int32_t graph_max) {
  char err[512] = "";
  int rc = fixture_open(f, device, graph_max, err, sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
}

typedef struct seq {
  weir_kv_seq *kv;
  int32_t tokens[MAX_LEN];
  int32_t len;      /* tokens in `tokens` */
  int32_t computed; /* tokens whose K/V are in the cache */
} seq;

/* One forward over seqs[0..n), each computing its tokens [computed, len); the last token's
 * logits of each go to out[s][vocab] (host). */
static void step(fixture *f, seq *seqs, int n, float *out) {
  int32_t T = 0;
  for (int s = 0; s < n; s++) T += seqs[s].len - seqs[s].computed;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)T), *pos = malloc(sizeof(int32_t) * (size_t)T);
  int32_t *slots = malloc(sizeof(int32_t) * (size_t)T);
  int32_t qsl[MAX_SEQS + 1], ctx[MAX_SEQS], rows[MAX_SEQS];
  const int32_t stride = MAX_LEN / 16;
  int32_t *bt = calloc((size_t)n * stride, sizeof(int32_t));
  int32_t t = 0;
  qsl[0] = 0;
  for (int s = 0; s < n; s++) {
    seq *q = &seqs[s];
    const int32_t n_new = q->len - q->computed;
    weir_kv_copy cp;
    int32_t ncp = 0;
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_append(f->kv, q->kv, n_new, slots + t, &cp, &ncp), 0);
    for (int32_t i = 0; i < n_new; i++) {
      ids[t + i] = q->tokens[q->computed + i];
      pos[t + i] = q->computed + i;
    }
    int32_t nb = 0;
    const int32_t *table = weir_kv_seq_block_table(q->kv, &nb);
    memcpy(bt + (size_t)s * stride, table, sizeof(int32_t) * (size_t)nb);
    t += n_new;
    qsl[s + 1] = t;
    ctx[s] = q->len;
    rows[s] = t - 1;
    q->computed = q->len;
  }
  weir_llama_batch b = {.num_tokens = T, .tokens = ids, .positions = pos, .num_seqs = n,
                        .query_start_loc = qsl, .context_lens = ctx, .block_tables = bt,
                        .max_blocks_per_seq = stride, .slot_mapping = slots,
                        .num_logit_rows = n, .logit_rows = rows};
  float *logits = NULL;
  const int rc = weir_llama_forward(f->model, &b, &logits);
  if (rc) fprintf(stderr, "\n  forward of %d sequences, %d tokens: %s\n", n, T, weir_strerror(rc));
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  const weir_device_ops *d = f->plugins.device->ops;
  CU_ASSERT_EQUAL_FATAL(d->copy_d2h(f->plugins.device->self, out, logits,
                                    sizeof(float) * (size_t)n * (size_t)f->vocab), 0);
  free(ids);
  free(pos);
  free(slots);
  free(bt);
}

static int32_t argmax(const float *x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* max |a - b| over max |b|; NaN anywhere counts as infinite. */
static double rel_err(const float *a, const float *b, size_t n) {
  double md = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (isnan(d)) return INFINITY;
    if (d > md) md = d;
    if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
  }
  return mb > 0 ? md / mb : md;
}

/* The weir binary that writes the test models: WEIR_TEST_WEIR when set (scripts/gpu-check runs
 * this test from a carried bundle, where the build folder's binary does not exist). */
static const char *weir_bin(void) {
  const char *w = getenv("WEIR_TEST_WEIR");
  return w && *w ? w : WT_WEIR;
}

/* 1 when a and b pick different tokens and b's margin between the two exceeds twice the
 * largest difference of the rows: a flip that rounding noise of that size cannot explain. */
static int clear_flip(const float *a, const float *b, int32_t n) {
  const int32_t ta = argmax(a, n), tb = argmax(b, n);
  if (ta == tb) return 0;
  double md = 0;
  for (int32_t i = 0; i < n; i++) {
    const double d = fabs((double)a[i] - (double)b[i]);
    if (isnan(d)) return 1;
    if (d > md) md = d;
  }
  return (double)b[tb] - (double)b[ta] > 2 * md;
}

static void random_prompt(seq *q, int32_t n, int32_t vocab, unsigned seed) {
  for (int32_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    q->tokens[i] = (int32_t)((seed >> 8) % (unsigned)vocab);
  }
  q->len = n;
  q->computed = 0;
}

static void cuda_vs_cpu(void) {
  fixture g, c;
  open_or_fail(&g, "cuda", 0);
  open_or_fail(&c, "cpu", 0);
  const int32_t V = g.vocab;
  seq *sg = calloc(1, sizeof *sg), *sc = calloc(1, sizeof *sc);
  CU_ASSERT_EQUAL_FATAL(weir_kv_seq_create(g.kv, &sg->kv), 0);
  CU_ASSERT_EQUAL_FATAL(weir_kv_seq_create(c.kv, &sc->kv), 0);
  random_prompt(sg, 32, V, 7);
  random_prompt(sc, 32, V, 7);
  float *lg = malloc(sizeof(float) * (size_t)V), *lc = malloc(sizeof(float) * (size_t)V);
  double worst = 0;
  int mismatches = 0;
  for (int i = 0; i <= 64; i++) {
    step(&g, sg, 1, lg);
    step(&c, sc, 1, lc);
    const double e = rel_err(lg, lc, (size_t)V);
    if (e > worst) worst = e;
    const int32_t tg = argmax(lg, V), tc = argmax(lc, V);
    if (tg != tc) { /* a near-tie rounding may flip is printed; a clear flip fails */
      const int clear = clear_flip(lg, lc, V);
      mismatches += clear;
      fprintf(stderr, "\n  step %d: cuda picks %d (%.5f), cpu %d (%.5f)%s\n", i, tg, lc[tg], tc,
              lc[tc], clear ? "" : ": a near-tie within the rows' difference");
    }
    sg->tokens[sg->len++] = tg;
    sc->tokens[sc->len++] = tg;
  }
  printf("\n  cuda vs cpu (teacher-forced): 65 greedy tokens, %d clearly differ; worst logit "
         "error %.3g of the largest (bound %.0e)\n", mismatches, worst, LOGIT_BOUND);
  CU_ASSERT_EQUAL(mismatches, 0);
  CU_ASSERT(worst <= LOGIT_BOUND);
  weir_kv_seq_free(g.kv, sg->kv);
  weir_kv_seq_free(c.kv, sc->kv);
  free(sg);
  free(sc);
  free(lg);
  free(lc);
  fixture_close(&c);
  fixture_close(&g);
}

static void test_cuda_vs_cpu(void) { cuda_vs_cpu(); }

/* The model families (docs/models.md) the same way: their ABI 1.5 parts (sliding windows
 * shorter than the 97-token run, soft-caps, GELU, Q/K norms, RoPE tables) through
 * paged's forward_layer and the CUDA device's family operations, against the CPU. */
static void test_families_cuda_vs_cpu(void) {
  static const char *const fams[][2] = {
      {"gemma2", "--arch gemma2 --head-dim 64 --swa 24 --tied"},
      {"gemma3", "--arch gemma3 --head-dim 64 --swa 24 --tied --layers 6"},
      {"qwen3", "--arch qwen3 --head-dim 64"},
      {"phi3", "--arch phi3 --longrope --orig-ctx 32 --swa 40"},
      {"llama3", "--rope-freqs --orig-ctx 32 --rope-base 500000"},
      {"yarn", "--yarn 4 --orig-ctx 32"},
  };
  char *saved = g_model;
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
    g_model = wt_strf("%s/%s.gguf", g_dir, fams[i][0]);
    char *cmd = wt_strf("%s mkmodel --dim 256 --layers 4 --heads 8 --kv-heads 2 --ffn 704 "
                        "--vocab 2048 --type f16 %s --out %s",
                        weir_bin(), fams[i][1], g_model);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL;
    int rc = wt_run(argv, &out, 120000);
    if (rc) fprintf(stderr, "mkmodel failed (%d): %s\n%s\n", rc, cmd, out ? out : "");
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    free(out);
    free(cmd);
    printf("\n  %s:", fams[i][0]);
    cuda_vs_cpu();
    free(g_model);
  }
  g_model = saved;
}

enum { NS = 13, CYCLES = 6 };
static const int k_subsets[] = {13, 8, 3, 1, 5, 12};
#define NSTEPS (CYCLES * (int)(sizeof k_subsets / sizeof k_subsets[0]))

/* The decode workload: NS prompts of different lengths, then NSTEPS steps over the first
 * k_subsets[i] sequences; every step's logits go to out[step][NS][V]. With drop_at >= 0
 * the device's graphs are dropped before that step. Teacher-forced: with force, each next
 * token is taken from toks ([NSTEPS + 1][NS]), else its greedy token is stored there. A
 * near-tie that rounding flips would otherwise feed the two runs different tokens, and every
 * later logit of that sequence would differ. */
static void decode_run(fixture *f, float *out, int drop_at, int32_t *toks, int force) {
  const int32_t V = f->vocab;
  seq *s = calloc(NS, sizeof *s);
  float *l = malloc(sizeof(float) * NS * (size_t)V);
  for (int i = 0; i < NS; i++) {
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_create(f->kv, &s[i].kv), 0);
    random_prompt(&s[i], 5 + 3 * i, V, 100u + (unsigned)i); /* 299 tokens in all */
  }
  step(f, s, NS, l); /* prefill, all at once */
  for (int i = 0; i < NS; i++) {
    if (!force) toks[i] = argmax(l + (size_t)i * V, V);
    s[i].tokens[s[i].len++] = toks[i];
  }
  for (int k = 0; k < NSTEPS; k++) {
    if (k == drop_at) {
      const weir_device_ops *d = f->plugins.device->ops;
      d->graph_reset(f->plugins.device->self);
    }
    const int n = k_subsets[k % (int)(sizeof k_subsets / sizeof k_subsets[0])];
    float *o = out + (size_t)k * NS * V;
    step(f, s, n, o);
    for (int i = 0; i < n; i++) {
      int32_t *t = toks + (size_t)(k + 1) * NS + i;
      if (!force) *t = argmax(o + (size_t)i * V, V);
      s[i].tokens[s[i].len++] = *t;
    }
  }
  for (int i = 0; i < NS; i++) weir_kv_seq_free(f->kv, s[i].kv);
  free(s);
  free(l);
}

static void test_graphs_vs_none(void) {
  fixture f;
  open_or_fail(&f, "cuda", 0);
  const int32_t V = f.vocab;
  const size_t n = (size_t)NSTEPS * NS * V;
  float *plain = calloc(n, sizeof(float)), *graphed = calloc(n, sizeof(float));
  int32_t *toks = calloc((size_t)(NSTEPS + 1) * NS, sizeof(int32_t));
  decode_run(&f, plain, -1, toks, 0);
  weir_llama_graph_stats st;
  weir_llama_graph_stats_get(f.model, &st);
  CU_ASSERT_EQUAL(st.replayed, 0);
  fixture_close(&f);

  open_or_fail(&f, "cuda", MAX_SEQS);
  decode_run(&f, graphed, NSTEPS / 2, toks, 1);
  weir_llama_graph_stats_get(f.model, &st);
  fixture_close(&f);

  double worst = 0;
  int differ = 0;
  for (int k = 0; k < NSTEPS; k++) {
    const int m = k_subsets[k % (int)(sizeof k_subsets / sizeof k_subsets[0])];
    for (int i = 0; i < m; i++) {
      const float *a = graphed + ((size_t)k * NS + i) * V, *b = plain + ((size_t)k * NS + i) * V;
      const double e = rel_err(a, b, (size_t)V);
      if (e > worst) worst = e;
      differ += clear_flip(a, b, V);
    }
  }
  free(toks);
  printf("\n  graphs vs plain launches (teacher-forced): %d steps, %d tokens clearly differ, "
         "worst logit error %.3g of the largest "
         "(bound %.0e); %llu graphs recorded, %llu steps replayed, %llu padding rows\n",
         NSTEPS, differ, worst, GRAPH_BOUND, (unsigned long long)st.recorded,
         (unsigned long long)st.replayed, (unsigned long long)st.padded);
  CU_ASSERT_EQUAL(differ, 0);
  CU_ASSERT(worst <= GRAPH_BOUND);
  /* Sizes 16 (13), 8 (8 and 5), 4 (3), 1, 12: five graphs, each replayed from its second
   * step on; after the drop each is recorded again. */
  CU_ASSERT(st.recorded >= 10);
  CU_ASSERT(st.replayed >= (uint64_t)NSTEPS - 2 * 5 - 5);
  CU_ASSERT(st.padded > 0);
  free(plain);
  free(graphed);
}

/* Speculative verification: NV sequences, each step a subset of them with k + 1 tokens each
 * (k = 0..SPEC_K drafts, different per sequence and step: padded within the step), logits
 * for every token, all drafts kept (the next step starts from the last row's greedy token).
 * Every step's logits go to out[step][NV * (SPEC_K + 1)][V]. */
enum { NV = 6, VSTEPS = 24 };
static void verify_run(fixture *f, float *out, int drop_at, int32_t *toks, int force) {
  const int32_t V = f->vocab, RMAX = NV * (SPEC_K + 1);
  seq *s = calloc(NV, sizeof *s);
  float *l = malloc(sizeof(float) * (size_t)RMAX * (size_t)V);
  int32_t *ids = malloc(sizeof(int32_t) * MAX_LEN), *pos = malloc(sizeof(int32_t) * MAX_LEN);
  int32_t *slots = malloc(sizeof(int32_t) * MAX_LEN), *rows = malloc(sizeof(int32_t) * MAX_LEN);
  const int32_t stride = MAX_LEN / 16;
  int32_t *bt = calloc((size_t)NV * stride, sizeof(int32_t));
  int32_t qsl[NV + 1], ctx[NV];
  for (int i = 0; i < NV; i++) {
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_create(f->kv, &s[i].kv), 0);
    random_prompt(&s[i], 9 + 5 * i, V, 300u + (unsigned)i);
  }
  step(f, s, NV, l);
  for (int i = 0; i < NV; i++) { /* teacher-forced as decode_run */
    if (!force) toks[i] = argmax(l + (size_t)i * V, V);
    s[i].tokens[s[i].len++] = toks[i];
  }
  unsigned seed = 99;
  for (int k = 0; k < VSTEPS; k++) {
    const weir_device_ops *d = f->plugins.device->ops;
    if (k == drop_at) d->graph_reset(f->plugins.device->self);
    const int n = 1 + k % NV;
    int32_t t = 0;
    qsl[0] = 0;
    for (int i = 0; i < n; i++) {
      seq *q = &s[i];
      const int32_t nd = (k + i) % (SPEC_K + 1); /* drafts: pseudo-random tokens */
      for (int32_t j = 0; j < nd; j++) {
        seed = seed * 1103515245u + 12345u;
        q->tokens[q->len++] = (int32_t)((seed >> 8) % (unsigned)V);
      }
      const int32_t n_new = q->len - q->computed;
      weir_kv_copy cp;
      int32_t ncp = 0;
      CU_ASSERT_EQUAL_FATAL(weir_kv_seq_append(f->kv, q->kv, n_new, slots + t, &cp, &ncp), 0);
      for (int32_t j = 0; j < n_new; j++) {
        ids[t + j] = q->tokens[q->computed + j];
        pos[t + j] = q->computed + j;
        rows[t + j] = t + j;
      }
      int32_t nb = 0;
      const int32_t *table = weir_kv_seq_block_table(q->kv, &nb);
      memcpy(bt + (size_t)i * stride, table, sizeof(int32_t) * (size_t)nb);
      t += n_new;
      qsl[i + 1] = t;
      ctx[i] = q->len;
      q->computed = q->len;
    }
    weir_llama_batch b = {.num_tokens = t, .tokens = ids, .positions = pos, .num_seqs = n,
                          .query_start_loc = qsl, .context_lens = ctx, .block_tables = bt,
                          .max_blocks_per_seq = stride, .slot_mapping = slots,
                          .num_logit_rows = t, .logit_rows = rows};
    float *logits = NULL;
    CU_ASSERT_EQUAL_FATAL(weir_llama_forward(f->model, &b, &logits), 0);
    float *o = out + (size_t)k * RMAX * V;
    CU_ASSERT_EQUAL_FATAL(d->copy_d2h(f->plugins.device->self, o, logits,
                                      sizeof(float) * (size_t)t * V), 0);
    for (int i = 0; i < n; i++) { /* the greedy token after the last one of each */
      int32_t *tk = toks + (size_t)(k + 1) * NV + i;
      if (!force) *tk = argmax(o + (size_t)(qsl[i + 1] - 1) * V, V);
      s[i].tokens[s[i].len++] = *tk;
    }
  }
  for (int i = 0; i < NV; i++) weir_kv_seq_free(f->kv, s[i].kv);
  free(s);
  free(l);
  free(ids);
  free(pos);
  free(slots);
  free(rows);
  free(bt);
}

static void test_verify_graphs_vs_none(void) {
  fixture f;
  const int32_t RMAX = NV * (SPEC_K + 1);
  open_or_fail(&f, "cuda", 0);
  const int32_t V = f.vocab;
  const size_t n = (size_t)VSTEPS * RMAX * V;
  float *plain = calloc(n, sizeof(float)), *graphed = calloc(n, sizeof(float));
  int32_t *toks = calloc((size_t)(VSTEPS + 1) * NV, sizeof(int32_t));
  verify_run(&f, plain, -1, toks, 0);
  fixture_close(&f);
  open_or_fail(&f, "cuda", MAX_SEQS);
  verify_run(&f, graphed, VSTEPS / 2, toks, 1);
  weir_llama_graph_stats st;
  weir_llama_graph_stats_get(f.model, &st);
  fixture_close(&f);
  double worst = 0;
  int differ = 0;
  for (size_t r = 0; r < (size_t)VSTEPS * RMAX; r++) {
    const float *a = graphed + r * V, *b = plain + r * V;
    const double e = rel_err(a, b, (size_t)V);
    if (e > worst) worst = e;
    differ += clear_flip(a, b, V);
  }
  free(toks);
  printf("\n  verification graphs vs plain launches (teacher-forced): %d steps, %d tokens "
         "clearly differ, worst logit error %.3g of the largest (bound %.0e); %llu graphs recorded, %llu steps replayed (%llu of several "
         "tokens per sequence), %llu padding tokens\n",
         VSTEPS, differ, worst, GRAPH_BOUND, (unsigned long long)st.recorded,
         (unsigned long long)st.replayed, (unsigned long long)st.multi_row,
         (unsigned long long)st.padded_tokens);
  CU_ASSERT_EQUAL(differ, 0);
  CU_ASSERT(worst <= GRAPH_BOUND);
  CU_ASSERT(st.multi_row > 0);
  CU_ASSERT(st.padded_tokens > 0);
  free(plain);
  free(graphed);
}

int main(void) {
  const char *m = getenv("WEIR_TEST_CUDA_MODEL");
  g_dir = wt_mkdtemp();
  if (m && *m) g_model = strdup(m);
  else {
    g_model = wt_strf("%s/small.gguf", g_dir);
    char *cmd = wt_strf("%s mkmodel --dim 256 --layers 4 --heads 8 --kv-heads 2 --ffn 704 "
                        "--vocab 2048 --type f16 --out %s",
                        weir_bin(), g_model);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL;
    int rc = wt_run(argv, &out, 120000);
    if (rc) {
      fprintf(stderr, "mkmodel failed (%d): %s\n%s\n", rc, cmd, out ? out : "");
      return 1;
    }
    free(out);
    free(cmd);
  }
  /* No GPU: the device plugin's init fails; say so and skip. */
  fixture probe;
  char err[512] = "";
  memset(&probe, 0, sizeof probe);
  weir_config_defaults(&probe.cfg);
  weir_config_set(&probe.cfg, "device.name", "cuda", err, sizeof err);
  weir_config_set(&probe.cfg, "attention.name", "paged", err, sizeof err);
  static char *dirs[1];
  dirs[0] = (char *)plugin_dir();
  probe.cfg.plugin_dirs = dirs;
  probe.cfg.num_plugin_dirs = 1;
  int rc = weir_plugin_set_load(&probe.cfg, NULL, &probe.plugins);
  probe.cfg.plugin_dirs = NULL;
  probe.cfg.num_plugin_dirs = 0;
  weir_config_free(&probe.cfg);
  if (rc) {
    printf("SKIP: no usable CUDA device (the cuda device plugin: %s)\n", weir_strerror(rc));
    wt_rmtree(g_dir);
    return 77;
  }
  weir_plugin_set_unload(&probe.plugins);
  printf("model: %s\n", g_model);
  static const wt_test tests[] = {{"cuda vs cpu, 64 greedy steps", test_cuda_vs_cpu},
                                  {"step graphs vs plain launches", test_graphs_vs_none},
                                  {"verification step graphs vs plain launches",
                                   test_verify_graphs_vs_none},
                                  {"model families cuda vs cpu", test_families_cuda_vs_cpu},
                                  {NULL, NULL}};
  rc = wt_run_suite("cuda_model", tests);
  wt_rmtree(g_dir);
  free(g_model);
  return rc;
}
