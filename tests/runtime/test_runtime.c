/* The runtime assembly (core/runtime/runtime.h) and what it builds on: the KV cache's slot
 * mapping (weir_kv_seq_slots, the one formula), the step batch built from KV sequences (block
 * tables zero-padded to the stride, slots the cache's, every refusal leaving the batch as it
 * was), and the assembly itself with the real plugins and the trained pair: the steps in order,
 * the pool sized from the config's block size for a fixed number of windows, a draft model in
 * group 1 run over the same batch, a draft of another vocabulary refused (draft_vocab_differs),
 * and a missing draft refused for what it is. The engine, calibration and `weir perplexity`
 * suites run the same assembly end to end. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kv/kv_cache.h"
#include "runtime/runtime.h"
#include "testutil.h"
#include "weir/device.h"

#define TARGET WT_SOURCE_DIR "/models/kjv-target.gguf"
#define DRAFT WT_SOURCE_DIR "/models/kjv-draft.gguf"

static weir_kv_cache *cache_of(int32_t blocks, int32_t block_size) {
  weir_kv_cache_params p = {.num_blocks = blocks, .block_size = block_size};
  weir_kv_cache *kv = NULL;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&p, &kv), WEIR_OK);
  return kv;
}

static void test_slots_from_the_cache(void) {
  weir_kv_cache *kv = cache_of(8, 4);
  if (!kv) return;
  weir_kv_seq *a = NULL, *b = NULL;
  int32_t sa[10], sb[3], got[10];
  WT_ASSERT_INT_EQ(weir_kv_seq_create(kv, &a), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_create(kv, &b), WEIR_OK);
  /* Interleaved appends, so that neither sequence's blocks are consecutive. */
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, a, 3, sa, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, b, 3, sb, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, a, 7, sa + 3, NULL, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, a, 0, 10, got), WEIR_OK);
  for (int32_t p = 0; p < 10; p++) {
    WT_ASSERT_INT_EQ(got[p], sa[p]);
    WT_ASSERT_INT_EQ(got[p], weir_kv_seq_slot(kv, a, p));
  }
  /* A slot is block * block_size + offset: position 5 is offset 1 of the table's second. */
  int32_t nb = 0;
  const int32_t *table = weir_kv_seq_block_table(a, &nb);
  WT_ASSERT_INT_EQ(nb, 3);
  WT_ASSERT_INT_EQ(got[5], table[1] * 4 + 1);
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, a, 4, 3, got), WEIR_OK);
  WT_ASSERT_INT_EQ(got[0], sa[4]);
  WT_ASSERT_INT_EQ(got[2], sa[6]);
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, b, 0, 3, got), WEIR_OK);
  WT_ASSERT_INT_EQ(got[2], sb[2]);
  /* Past the sequence's length, or nonsense. */
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, a, 5, 6, got), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, b, 0, 4, got), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, a, -1, 2, got), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, a, 0, 2, NULL), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_kv_seq_slots(kv, a, 10, 0, NULL), WEIR_OK);
  weir_kv_cache_destroy(kv);
}

static void test_step_batch(void) {
  weir_kv_cache *kv = cache_of(8, 4);
  if (!kv) return;
  weir_kv_seq *a = NULL, *b = NULL;
  WT_ASSERT_INT_EQ(weir_kv_seq_create(kv, &a), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_create(kv, &b), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, b, 9, NULL, NULL, NULL), WEIR_OK); /* 3 blocks */
  WT_ASSERT_INT_EQ(weir_kv_seq_append(kv, a, 6, NULL, NULL, NULL), WEIR_OK); /* 2 blocks */
  const int32_t toks[9] = {10, 11, 12, 13, 14, 15, 16, 17, 18};
  weir_step_batch sb;
  WT_ASSERT_INT_EQ(weir_step_batch_init(&sb, 0, 2, 4, 3), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_step_batch_init(&sb, 12, 2, 3, 3), WEIR_OK);
  WT_ASSERT_INT_EQ(sb.num_tokens + sb.num_seqs + sb.num_rows, 0);
  WT_ASSERT_INT_EQ(sb.stride, 3);
  /* Sequence a whole, then the last four positions of b (as a decode with drafts would). */
  WT_ASSERT_INT_EQ(weir_step_batch_add(&sb, kv, a, toks, 0, 6), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_step_batch_add(&sb, kv, b, toks + 5, 5, 4), WEIR_OK);
  WT_ASSERT_INT_EQ(sb.num_tokens, 10);
  WT_ASSERT_INT_EQ(sb.num_seqs, 2);
  WT_ASSERT_INT_EQ(sb.query_start_loc[0], 0);
  WT_ASSERT_INT_EQ(sb.query_start_loc[1], 6);
  WT_ASSERT_INT_EQ(sb.query_start_loc[2], 10);
  WT_ASSERT_INT_EQ(sb.context_lens[0], 6);
  WT_ASSERT_INT_EQ(sb.context_lens[1], 9);
  for (int32_t i = 0; i < 6; i++) {
    WT_ASSERT_INT_EQ(sb.tokens[i], 10 + i);
    WT_ASSERT_INT_EQ(sb.positions[i], i);
    WT_ASSERT_INT_EQ(sb.slots[i], weir_kv_seq_slot(kv, a, i));
  }
  for (int32_t i = 0; i < 4; i++) {
    WT_ASSERT_INT_EQ(sb.tokens[6 + i], 15 + i);
    WT_ASSERT_INT_EQ(sb.positions[6 + i], 5 + i);
    WT_ASSERT_INT_EQ(sb.slots[6 + i], weir_kv_seq_slot(kv, b, 5 + i));
  }
  int32_t na = 0, nbk = 0;
  const int32_t *ta = weir_kv_seq_block_table(a, &na), *tb = weir_kv_seq_block_table(b, &nbk);
  WT_ASSERT_INT_EQ(na, 2);
  WT_ASSERT_INT_EQ(sb.block_tables[0], ta[0]);
  WT_ASSERT_INT_EQ(sb.block_tables[1], ta[1]);
  WT_ASSERT_INT_EQ(sb.block_tables[2], 0); /* padded to the stride */
  for (int32_t k = 0; k < 3; k++) WT_ASSERT_INT_EQ(sb.block_tables[3 + k], tb[k]);
  /* Logit rows: the last token of each. */
  WT_ASSERT_INT_EQ(weir_step_batch_add_rows(&sb, 5, 1), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_step_batch_add_rows(&sb, 8, 2), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_step_batch_add_rows(&sb, 9, 1), WEIR_E_RANGE); /* rows full */
  WT_ASSERT_INT_EQ(sb.num_rows, 3);
  weir_llama_batch v = weir_step_batch_view(&sb);
  WT_ASSERT_INT_EQ(v.num_tokens, 10);
  WT_ASSERT_INT_EQ(v.num_seqs, 2);
  WT_ASSERT_INT_EQ(v.max_blocks_per_seq, 3);
  WT_ASSERT_INT_EQ(v.num_logit_rows, 3);
  WT_ASSERT_INT_EQ(v.logit_rows[0], 5);
  WT_ASSERT_INT_EQ(v.logit_rows[2], 9);
  CU_ASSERT_PTR_EQUAL(v.slot_mapping, sb.slots);
  /* Refusals change nothing: no room for a third sequence, positions past a sequence, a
   * table longer than the stride, more tokens than the batch holds, rows outside it. */
  WT_ASSERT_INT_EQ(weir_step_batch_add(&sb, kv, a, toks, 0, 1), WEIR_E_RANGE);
  weir_step_batch_reset(&sb, 1);
  WT_ASSERT_INT_EQ(sb.stride, 1);
  WT_ASSERT_INT_EQ(weir_step_batch_add(&sb, kv, b, toks, 0, 2), WEIR_E_RANGE);
  weir_step_batch_reset(&sb, 0);
  WT_ASSERT_INT_EQ(sb.stride, 3);
  WT_ASSERT_INT_EQ(weir_step_batch_add(&sb, kv, a, toks, 4, 3), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_step_batch_add(&sb, kv, b, toks, 0, 9), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_step_batch_add(&sb, kv, a, toks, 0, 4), WEIR_E_RANGE); /* 13 > 12 */
  WT_ASSERT_INT_EQ(weir_step_batch_add_rows(&sb, 8, 2), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(sb.num_tokens, 9);
  WT_ASSERT_INT_EQ(sb.num_seqs, 1);
  WT_ASSERT_INT_EQ(sb.num_rows, 0);
  WT_ASSERT_INT_EQ(sb.query_start_loc[1], 9);
  weir_step_batch_free(&sb);
  weir_step_batch_free(&sb); /* freeing twice is harmless */
  weir_kv_cache_destroy(kv);
}

static void config_for(weir_config *cfg, int32_t block_size) {
  static char *dirs[1];
  weir_config_defaults(cfg);
  dirs[0] = WT_PLUGIN_DIR;
  cfg->plugin_dirs = dirs;
  cfg->num_plugin_dirs = 1;
  cfg->threads = 1;
  if (block_size > 0) cfg->block_size = block_size;
}

static void config_free(weir_config *cfg) {
  cfg->plugin_dirs = NULL;
  cfg->num_plugin_dirs = 0;
  weir_config_free(cfg);
}

/* Runs both models of rt over one window of n tokens (a KV sequence of its own) and returns
 * the target's logits rows of the last token into out[vocab]. */
static int run_window(weir_runtime *rt, int32_t n, float *out) {
  weir_kv_cache *kv = weir_kv_pool_cache(rt->pool);
  weir_kv_seq *seq = NULL;
  weir_step_batch b;
  int32_t toks[64];
  for (int32_t i = 0; i < n; i++) toks[i] = 300 + 7 * i;
  int rc = weir_step_batch_init(&b, n, 1, 1, weir_kv_pool_geometry(rt->pool)->max_blocks_per_seq);
  if (rc == WEIR_OK) rc = weir_kv_seq_create(kv, &seq);
  if (rc == WEIR_OK) rc = weir_kv_seq_append(kv, seq, n, NULL, NULL, NULL);
  if (rc == WEIR_OK) rc = weir_step_batch_add(&b, kv, seq, toks, 0, n);
  if (rc == WEIR_OK) rc = weir_step_batch_add_rows(&b, n - 1, 1);
  float *logits = NULL;
  const weir_llama_batch v = weir_step_batch_view(&b);
  for (int32_t m = rt->num_models - 1; rc == WEIR_OK && m >= 0; m--)
    rc = weir_llama_forward(rt->model[m], &v, &logits);
  const weir_device_ops *dev = rt->plugins.device->ops;
  if (rc == WEIR_OK)
    rc = dev->copy_d2h(rt->plugins.device->self, out, logits,
                       sizeof(float) * (size_t)rt->hp[0].n_vocab);
  weir_kv_seq_free(kv, seq);
  weir_step_batch_free(&b);
  return rc;
}

/* Assembles the target (and the draft) with the given block size (0: the default) and checks
 * the pool's geometry; returns the target's last-token logits of one window in out. */
static void assemble_and_run(int32_t block_size, int with_draft, float *out) {
  weir_config cfg;
  config_for(&cfg, block_size);
  weir_runtime rt;
  char err[1024] = "";
  int rc = weir_runtime_open(&rt, TARGET, err, sizeof err);
  if (rc) fprintf(stderr, "\n  %s\n", err);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
  CU_ASSERT_PTR_NOT_NULL(rt.tok);
  CU_ASSERT(rt.hp[0].n_vocab > 0);
  WT_ASSERT_INT_EQ(rt.num_models, 1);
  /* In order: no pool before the plugins, no model before the pool. */
  const weir_runtime_pool_opts po = {.max_model_len = 40, .full_seqs = 3};
  weir_llama_opts mo = {.max_num_tokens = 40, .max_num_seqs = 1, .max_logit_rows = 1};
  WT_ASSERT_INT_EQ(weir_runtime_create_pool(&rt, &cfg, &po, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_runtime_load_model(&rt, 0, &cfg, &mo, 1, err, sizeof err),
                   WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_runtime_load_plugins(&rt, &cfg, NULL, err, sizeof err), WEIR_OK);
  if (with_draft) {
    rc = weir_runtime_open_draft(&rt, DRAFT, err, sizeof err);
    if (rc) fprintf(stderr, "\n  %s\n", err);
    WT_ASSERT_INT_EQ(rc, WEIR_OK);
    WT_ASSERT_INT_EQ(rt.num_models, 2);
    WT_ASSERT_INT_EQ(rt.hp[1].n_vocab, rt.hp[0].n_vocab);
    CU_ASSERT(rt.hp[1].n_layer != rt.hp[0].n_layer || rt.hp[1].n_embd != rt.hp[0].n_embd);
  }
  rc = weir_runtime_create_pool(&rt, &cfg, &po, err, sizeof err);
  if (rc) fprintf(stderr, "\n  %s\n", err);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
  if (rc) goto out;
  const weir_kv_geometry *geo = weir_kv_pool_geometry(rt.pool);
  const int32_t bs = block_size > 0 ? block_size : WEIR_KV_DEFAULT_BLOCK_SIZE;
  WT_ASSERT_INT_EQ(geo->block_size, bs);
  WT_ASSERT_INT_EQ(geo->num_blocks, 3 * ((40 + bs - 1) / bs)); /* exactly three windows */
  WT_ASSERT_INT_EQ(geo->max_model_len, 40);
  WT_ASSERT_INT_EQ(weir_kv_pool_num_groups(rt.pool), with_draft ? 2 : 1);
  WT_ASSERT_INT_EQ(weir_runtime_create_pool(&rt, &cfg, &po, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_runtime_load_model(&rt, 2, &cfg, &mo, 1, err, sizeof err),
                   WEIR_E_INVAL);
  for (int32_t m = 0; m < rt.num_models; m++) {
    rc = weir_runtime_load_model(&rt, m, &cfg, &mo, 1, err, sizeof err);
    if (rc) fprintf(stderr, "\n  %s\n", err);
    WT_ASSERT_INT_EQ(rc, WEIR_OK);
  }
  WT_ASSERT_INT_EQ(weir_runtime_load_model(&rt, 0, &cfg, &mo, 1, err, sizeof err),
                   WEIR_E_INVAL); /* loaded already */
  if (rc == WEIR_OK) WT_ASSERT_INT_EQ(run_window(&rt, 33, out), WEIR_OK);
out:
  weir_runtime_close(&rt);
  WT_ASSERT_INT_EQ(rt.num_models, 0);
  weir_runtime_close(&rt); /* a closed runtime is zeroed: closing again is harmless */
  config_free(&cfg);
}

static void test_assembly(void) {
  weir_runtime probe;
  char err[256] = "";
  if (weir_runtime_open(&probe, TARGET, err, sizeof err) != WEIR_OK) {
    fprintf(stderr, "\n  %s\n", err);
    CU_FAIL("the trained target model is missing");
    return;
  }
  const int32_t vocab = probe.hp[0].n_vocab;
  weir_runtime_close(&probe);
  float *a = calloc((size_t)vocab, sizeof(float)), *b = calloc((size_t)vocab, sizeof(float));
  float *c = calloc((size_t)vocab, sizeof(float));
  if (!a || !b || !c) goto out;
  assemble_and_run(0, 0, a);
  assemble_and_run(8, 1, b);
  assemble_and_run(32, 0, c);
  /* The block size and a draft beside it change where KV lives, not what the model computes
   * (the window spans several blocks of 8 and one of 32). */
  double d_ab = 0, d_ac = 0, norm = 0;
  for (int32_t v = 0; v < vocab; v++) {
    d_ab = fmax(d_ab, fabs((double)a[v] - b[v]));
    d_ac = fmax(d_ac, fabs((double)a[v] - c[v]));
    norm = fmax(norm, fabs((double)a[v]));
  }
  CU_ASSERT(norm > 0);
  CU_ASSERT(d_ab <= 1e-4 * (1 + norm));
  CU_ASSERT(d_ac <= 1e-4 * (1 + norm));
out:
  free(a);
  free(b);
  free(c);
}

static void test_draft_refusals(void) {
  weir_config cfg;
  config_for(&cfg, 0);
  weir_runtime rt;
  char err[1024] = "";
  char *dir = wt_mkdtemp(), *tiny = wt_strf("%s/tiny.gguf", dir), *out = NULL;
  char *argv[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--out", tiny, NULL};
  WT_ASSERT_INT_EQ(wt_run(argv, &out, 60000), 0);
  free(out);
  WT_ASSERT_INT_EQ(weir_runtime_open(&rt, DRAFT, err, sizeof err), WEIR_OK);
  /* Another vocabulary: refused, and said so. */
  WT_ASSERT_INT_EQ(weir_runtime_open_draft(&rt, tiny, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(rt.draft_vocab_differs, 1);
  WT_ASSERT_STR_CONTAINS(err, "must share the target's tokenizer");
  WT_ASSERT_INT_EQ(rt.num_models, 1);
  /* No file: refused for that, not for its vocabulary. */
  rt.draft_vocab_differs = 0;
  CU_ASSERT(weir_runtime_open_draft(&rt, "/nonexistent/draft.gguf", err, sizeof err) !=
            WEIR_OK);
  WT_ASSERT_INT_EQ(rt.draft_vocab_differs, 0);
  WT_ASSERT_STR_CONTAINS(err, "/nonexistent/draft.gguf");
  WT_ASSERT_INT_EQ(rt.num_models, 1);
  /* The same file as its own draft is accepted, once. */
  WT_ASSERT_INT_EQ(weir_runtime_open_draft(&rt, DRAFT, err, sizeof err), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_runtime_open_draft(&rt, DRAFT, err, sizeof err), WEIR_E_INVAL);
  weir_runtime_close(&rt);
  /* A missing target is the reader's error, with the path. */
  CU_ASSERT(weir_runtime_open(&rt, "/nonexistent/target.gguf", err, sizeof err) != WEIR_OK);
  WT_ASSERT_STR_CONTAINS(err, "/nonexistent/target.gguf");
  weir_runtime_close(&rt);
  wt_rmtree(dir);
  free(tiny);
  free(dir);
  config_free(&cfg);
}

int main(void) {
  static const wt_test tests[] = {
      {"the KV cache maps positions to slots", test_slots_from_the_cache},
      {"step batches from KV sequences; refusals change nothing", test_step_batch},
      {"assembly in order: pool from the config's block size, a draft in group 1",
       test_assembly},
      {"a draft of another vocabulary, or none, is refused", test_draft_refusals},
      {NULL, NULL}};
  return wt_run_suite("runtime", tests);
}
