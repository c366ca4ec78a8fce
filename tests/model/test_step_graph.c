/* Step-graph padding (core/model/llama.c, docs/cuda.md "Step graphs") on the CPU plugins,
 * through the real loader, KV pool and model graph. The CPU device records no graphs, so the
 * model's graph emulation (weir_llama_set_graph_emulation) runs every step a graph would serve
 * padded to that graph's shape as plain launches: the padding sequences, the padding tokens
 * within sequences (speculative verification of different k per sequence, a draft model's
 * catch-up), the row mapping and the KV writes are those a replayed step does.
 *  - two copies of the same three sequences go through prefill, decode, verification of
 *    k = 3/1/0 and 4/4/4, a draft pass-0 shape (1-2 tokens, last rows only) and rows for some
 *    sequences only: one set plain, one emulated; every step's logits agree within 1e-4 and
 *    later decode steps agree too (padding wrote no KV);
 *  - the shapes and keys: which steps qualify, what they are padded to, distinct keys per
 *    shape, the fall-backs (too many tokens per sequence, padding past the block table), and
 *    the padding counters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kv/kv_cache.h"
#include "kv/kv_pool.h"
#include "format/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
#include "runtime/calib.h"
#include "testutil.h"
#include "wt_model.h"

#define MAX_ROWS 5
#define CTX 512
#define NS 3

static char *g_dir;

static void open_model(wt_model *f, const char *path) {
  memset(f, 0, sizeof *f);
  weir_config_defaults(&f->cfg);
  char err[512] = "";
  static char *dirs[1];
  dirs[0] = WT_PLUGIN_DIR;
  f->cfg.plugin_dirs = dirs;
  f->cfg.num_plugin_dirs = 1;
  f->cfg.threads = 2;
  f->block_size = 16;
  CU_ASSERT_EQUAL_FATAL(weir_plugin_set_load(&f->cfg, NULL, &f->plugins), 0);
  int rc = weir_gguf_open(path, &f->gguf, err, sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  weir_llama_hparams hp;
  CU_ASSERT_EQUAL_FATAL(weir_gguf_llama_hparams(f->gguf, &hp, err, sizeof err), 0);
  weir_attn_shape shape;
  weir_llama_attn_shape(&hp, &shape);
  weir_kv_pool_params kp = {.block_size = f->block_size,
                            .kv_dtype = WEIR_DTYPE_F32,
                            .num_blocks = 8 * (CTX / 16 + 1),
                            .max_model_len = CTX,
                            .groups = &shape,
                            .num_groups = 1};
  rc = weir_kv_pool_create(&kp, f->plugins.device, f->plugins.attention, &f->pool, err,
                           sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  f->kv = weir_kv_pool_cache(f->pool);
  weir_tokenizer *tok = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_tokenizer_from_gguf(f->gguf, &tok, err, sizeof err), 0);
  weir_llama_opts o = {.max_num_tokens = 512,
                       .max_num_seqs = 8,
                       .max_logit_rows = 512,
                       .step_graph_max_batch = 256,
                       .step_graph_max_rows = MAX_ROWS};
  rc = weir_calib_llama_create(&f->cfg, f->gguf, tok, &f->plugins, &o, f->pool, 0, &f->model,
                               err, sizeof err);
  weir_tokenizer_free(tok);
  if (rc) fprintf(stderr, "\n%s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  f->vocab = weir_llama_hparams_get(f->model)->n_vocab;
  f->cfg.plugin_dirs = NULL;
  f->cfg.num_plugin_dirs = 0;
}

enum { ROWS_ALL, ROWS_LAST, ROWS_SOME };

typedef struct step_arrays {
  int32_t ids[512], pos[512], slots[512], rows[512], qsl[NS + 1], ctx[NS];
  int32_t bt[NS * (CTX / 16)];
  weir_llama_batch b;
} step_arrays;

/* Appends counts[s] tokens of toks[s] to each sequence's KV and builds the step. */
static void build_step(wt_model *f, weir_kv_seq **kv, int32_t *len, const int32_t *counts,
                       int32_t **toks, int mode, step_arrays *a) {
  const int32_t W = CTX / 16;
  int32_t t = 0, nr = 0;
  a->qsl[0] = 0;
  memset(a->bt, 0, sizeof a->bt);
  for (int s = 0; s < NS; s++) {
    weir_kv_copy cp;
    int32_t ncp = 0;
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_append(f->kv, kv[s], counts[s], a->slots + t, &cp, &ncp), 0);
    for (int32_t i = 0; i < counts[s]; i++) {
      a->ids[t + i] = toks[s][len[s] + i];
      a->pos[t + i] = len[s] + i;
      if (mode == ROWS_ALL) a->rows[nr++] = t + i;
    }
    if (mode == ROWS_LAST || (mode == ROWS_SOME && s != 1)) a->rows[nr++] = t + counts[s] - 1;
    int32_t nb = 0;
    const int32_t *table = weir_kv_seq_block_table(kv[s], &nb);
    memcpy(a->bt + (size_t)s * W, table, sizeof(int32_t) * (size_t)nb);
    len[s] += counts[s];
    t += counts[s];
    a->qsl[s + 1] = t;
    a->ctx[s] = len[s];
  }
  a->b = (weir_llama_batch){.num_tokens = t, .tokens = a->ids, .positions = a->pos,
                            .num_seqs = NS, .query_start_loc = a->qsl, .context_lens = a->ctx,
                            .block_tables = a->bt, .max_blocks_per_seq = W,
                            .slot_mapping = a->slots, .num_logit_rows = nr,
                            .logit_rows = a->rows};
}

static double rel_err(const float *a, const float *b, size_t n) {
  double md = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
    if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
  }
  return mb > 0 ? md / mb : md;
}

static int argmax(const float *x, int32_t n) {
  int best = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = (int)i;
  return best;
}

static void test_padded_equals_plain(void) {
  char *path = wt_strf("%s/m.gguf", g_dir);
  char *cmd = wt_strf("%s mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 160 "
                      "--vocab 400 --ctx 512 --type f32 --seed 11 --out %s", WT_WEIR, path);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out = NULL;
  CU_ASSERT_EQUAL_FATAL(wt_run(argv, &out, 120000), 0);
  free(out);
  free(cmd);
  wt_model f;
  open_model(&f, path);
  const int32_t V = f.vocab;
  int32_t *toks[NS];
  unsigned seed = 7;
  for (int s = 0; s < NS; s++) {
    toks[s] = malloc(sizeof(int32_t) * CTX);
    for (int i = 0; i < CTX; i++) {
      seed = seed * 1103515245u + 12345u;
      toks[s][i] = (int32_t)((seed >> 8) % (unsigned)V);
    }
  }
  weir_kv_seq *kva[NS], *kvb[NS];
  int32_t lena[NS] = {0}, lenb[NS] = {0};
  for (int s = 0; s < NS; s++) {
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_create(f.kv, &kva[s]), 0);
    CU_ASSERT_EQUAL_FATAL(weir_kv_seq_create(f.kv, &kvb[s]), 0);
  }
  /* counts per sequence, rows mode, the shape it pads to (seqs 0: no graph) */
  static const struct {
    int32_t counts[NS];
    int mode;
    int32_t seqs, rows_per_seq, logit_rows;
  } steps[] = {
      {{20, 33, 7}, ROWS_LAST, 0, 0, 0},  /* prefill: more tokens than MAX_ROWS */
      {{1, 1, 1}, ROWS_ALL, 4, 1, 4},     /* decode */
      {{4, 2, 1}, ROWS_ALL, 4, 4, 16},    /* verification, k = 3, 1, 0 */
      {{2, 1, 2}, ROWS_LAST, 4, 2, 4},    /* a draft model's pass 0 */
      {{1, 1, 1}, ROWS_SOME, 4, 1, 4},    /* rows for some sequences only */
      {{1, 1, 1}, ROWS_ALL, 4, 1, 4},
      {{5, 5, 5}, ROWS_ALL, 4, 5, 20},    /* verification, k = 4 for all */
      {{1, 1, 1}, ROWS_ALL, 4, 1, 4},
      {{6, 1, 1}, ROWS_ALL, 0, 0, 0},     /* k + 1 beyond MAX_ROWS: plain launches */
      {{1, 3, 1}, ROWS_LAST, 4, 3, 4},
      {{1, 1, 1}, ROWS_ALL, 4, 1, 4},
      {{1, 1, 1}, ROWS_ALL, 4, 1, 4},
  };
  uint64_t want_pad_seqs = 0, want_pad_tokens = 0, key_decode = 0, key_verify4 = 0;
  float *la = malloc(sizeof(float) * 512 * (size_t)V), *lb = malloc(sizeof(float) * 512 * (size_t)V);
  step_arrays *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  const weir_device_ops *d = f.plugins.device->ops;
  void *ds = f.plugins.device->self;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    build_step(&f, kva, lena, steps[i].counts, toks, steps[i].mode, a);
    build_step(&f, kvb, lenb, steps[i].counts, toks, steps[i].mode, b);
    weir_llama_graph_shape sh;
    memset(&sh, 0, sizeof sh);
    CU_ASSERT_EQUAL_FATAL(weir_llama_set_graph_emulation(f.model, 1), 0);
    const int graphed = weir_llama_graph_shape_of(f.model, &b->b, &sh);
    CU_ASSERT_EQUAL(graphed, steps[i].seqs > 0);
    if (graphed) {
      CU_ASSERT_EQUAL(sh.seqs, steps[i].seqs);
      CU_ASSERT_EQUAL(sh.rows_per_seq, steps[i].rows_per_seq);
      CU_ASSERT_EQUAL(sh.logit_rows, steps[i].logit_rows);
      want_pad_seqs += (uint64_t)(sh.seqs - NS);
      want_pad_tokens += (uint64_t)(sh.seqs * sh.rows_per_seq - b->b.num_tokens);
      if (sh.rows_per_seq == 1) {
        if (!key_decode) key_decode = sh.key;
        CU_ASSERT_EQUAL(sh.key, key_decode); /* one graph for every decode step of 3 */
      } else {
        CU_ASSERT_NOT_EQUAL(sh.key, key_decode);
        if (sh.rows_per_seq == 4) key_verify4 = sh.key;
      }
    }
    float *lg = NULL;
    CU_ASSERT_EQUAL_FATAL(weir_llama_forward(f.model, &b->b, &lg), 0);
    CU_ASSERT_EQUAL_FATAL(d->copy_d2h(ds, lb, lg, sizeof(float) * (size_t)b->b.num_logit_rows * V), 0);
    CU_ASSERT_EQUAL_FATAL(weir_llama_set_graph_emulation(f.model, 0), 0);
    /* the CPU device records no graphs: without emulation no step is padded */
    CU_ASSERT_EQUAL(weir_llama_graph_shape_of(f.model, &a->b, &sh), 0);
    CU_ASSERT_EQUAL_FATAL(weir_llama_forward(f.model, &a->b, &lg), 0);
    CU_ASSERT_EQUAL_FATAL(d->copy_d2h(ds, la, lg, sizeof(float) * (size_t)a->b.num_logit_rows * V), 0);
    const double e = rel_err(lb, la, (size_t)a->b.num_logit_rows * (size_t)V);
    printf("\n    step %zu (%d/%d/%d tokens, %d rows): padded %dx%d, rel err %.3g", i,
           steps[i].counts[0], steps[i].counts[1], steps[i].counts[2], a->b.num_logit_rows,
           graphed ? sh.seqs : 0, graphed ? sh.rows_per_seq : 0, e);
    CU_ASSERT(e <= 1e-4);
    for (int32_t r = 0; r < a->b.num_logit_rows; r++)
      CU_ASSERT_EQUAL(argmax(lb + (size_t)r * V, V), argmax(la + (size_t)r * V, V));
  }
  CU_ASSERT_NOT_EQUAL(key_verify4, 0);
  weir_llama_graph_stats gs;
  weir_llama_graph_stats_get(f.model, &gs);
  CU_ASSERT_EQUAL(gs.padded, want_pad_seqs);
  CU_ASSERT_EQUAL(gs.padded_tokens, want_pad_tokens);
  CU_ASSERT_EQUAL(gs.replayed, 0); /* emulated: nothing ran from a graph */
  CU_ASSERT_EQUAL(gs.recorded, 0);
  CU_ASSERT(want_pad_tokens > 20);

  /* Padding that would reach past the block table (context 511 + 2 > 512): no graph. */
  b->ctx[0] = CTX - 1;
  b->qsl[1] = 1;
  b->qsl[2] = 4;
  b->qsl[3] = 5;
  b->ctx[1] = 100;
  b->ctx[2] = 100;
  b->b.num_tokens = 5;
  b->b.num_logit_rows = 5;
  for (int r = 0; r < 5; r++) b->rows[r] = r;
  weir_llama_graph_shape sh;
  CU_ASSERT_EQUAL(weir_llama_set_graph_emulation(f.model, 1), 0);
  CU_ASSERT_EQUAL(weir_llama_graph_shape_of(f.model, &b->b, &sh), 0);
  b->ctx[0] = CTX - 2; /* exactly fits */
  CU_ASSERT_EQUAL(weir_llama_graph_shape_of(f.model, &b->b, &sh), 1);
  CU_ASSERT_EQUAL(sh.rows_per_seq, 3);
  CU_ASSERT_EQUAL(sh.logit_rows, 12);
  /* A logit row out of the step's tokens: never padded (the forward refuses it elsewhere). */
  b->rows[4] = 5;
  CU_ASSERT_EQUAL(weir_llama_graph_shape_of(f.model, &b->b, &sh), 0);
  b->rows[4] = 4;
  /* One sequence pads to 1, under its own key. */
  b->b.num_seqs = 1;
  b->b.num_tokens = 1;
  b->b.num_logit_rows = 1;
  b->ctx[0] = 10;
  CU_ASSERT_EQUAL(weir_llama_graph_shape_of(f.model, &b->b, &sh), 1);
  CU_ASSERT_EQUAL(sh.seqs, 1);
  CU_ASSERT_NOT_EQUAL(sh.key, key_decode);
  /* The CPU device records no graphs: without emulation nothing is padded. */
  CU_ASSERT_EQUAL(weir_llama_set_graph_emulation(f.model, 0), 0);
  weir_llama_graph_stats gs2;
  weir_llama_graph_stats_get(f.model, &gs2);
  CU_ASSERT_EQUAL(gs2.padded_tokens, gs.padded_tokens);

  for (int s = 0; s < NS; s++) {
    weir_kv_seq_free(f.kv, kva[s]);
    weir_kv_seq_free(f.kv, kvb[s]);
    free(toks[s]);
  }
  free(a);
  free(b);
  free(la);
  free(lb);
  wt_model_close(&f);
  free(path);
}

int main(void) {
  g_dir = wt_mkdtemp();
  static const wt_test tests[] = {{"padded_equals_plain", test_padded_equals_plain},
                                  {NULL, NULL}};
  int rc = wt_run_suite("step_graph", tests);
  wt_rmtree(g_dir);
  free(g_dir);
  return rc;
}
