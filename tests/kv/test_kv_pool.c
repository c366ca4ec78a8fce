/* The KV pool (core/kv/kv_pool.h) with the real CPU device and attention plugins: geometry
 * (block size default, block count from the memory budget, table stride), two models of
 * different shapes sharing one pool (views disjoint, aligned, laid out as weir/kv.h says),
 * copy-on-write copies in every layer of every model through the plugin's copy_blocks and
 * through the device fallback, and the refusals (an unsupported KV dtype, a budget below one
 * block, bad parameters). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kv/kv_pool.h"
#include "plugin/loader.h"
#include "testutil.h"
#include "weir/attention.h"

static weir_config g_cfg;
static weir_plugin_set g_set;

static void load_plugins(void) {
  static char *dirs[1];
  weir_config_defaults(&g_cfg);
  dirs[0] = WT_PLUGIN_DIR;
  g_cfg.plugin_dirs = dirs;
  g_cfg.num_plugin_dirs = 1;
  g_cfg.threads = 1;
  g_cfg.kv_dtype = WEIR_DTYPE_F16;
  WT_ASSERT_INT_EQ(weir_plugin_set_load(&g_cfg, NULL, &g_set), WEIR_OK);
  g_cfg.plugin_dirs = NULL;
  g_cfg.num_plugin_dirs = 0;
}

static void unload_plugins(void) {
  weir_plugin_set_unload(&g_set);
  weir_config_free(&g_cfg);
}

static weir_attn_shape shape_of(int32_t layers, int32_t heads, int32_t kv_heads, int32_t hd) {
  return (weir_attn_shape){.struct_size = sizeof(weir_attn_shape),
                           .n_layers = layers,
                           .n_heads = heads,
                           .n_kv_heads = kv_heads,
                           .head_dim = hd,
                           .scale = 1.0f};
}

static size_t attn_block_bytes(const weir_plugin *attn, weir_attn_shape s, int32_t bs,
                               weir_dtype dt) {
  const weir_attention_ops *ops = attn->ops;
  s.block_size = bs;
  s.kv_dtype = dt;
  return ops->block_bytes(attn->self, &s);
}

static void test_geometry(void) {
  load_plugins();
  weir_attn_shape s = shape_of(3, 4, 2, 16);
  size_t bb = attn_block_bytes(g_set.attention, s, WEIR_KV_DEFAULT_BLOCK_SIZE, WEIR_DTYPE_F16);
  CU_ASSERT_FATAL(bb > 0);
  /* Block size 0 takes the default; 10.5 blocks' worth of budget gives 10 blocks. */
  weir_kv_pool_params p = {.kv_dtype = WEIR_DTYPE_F16,
                           .memory_bytes = (int64_t)(bb * 3 * 21 / 2),
                           .max_model_len = 100,
                           .groups = &s,
                           .num_groups = 1};
  weir_kv_pool *pool = NULL;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_OK);
  CU_ASSERT_FATAL(pool != NULL);
  const weir_kv_geometry *g = weir_kv_pool_geometry(pool);
  WT_ASSERT_INT_EQ(g->block_size, WEIR_KV_DEFAULT_BLOCK_SIZE);
  WT_ASSERT_INT_EQ(g->num_blocks, 10);
  WT_ASSERT_INT_EQ(g->max_model_len, 100);
  WT_ASSERT_INT_EQ(g->max_blocks_per_seq, (100 + WEIR_KV_DEFAULT_BLOCK_SIZE - 1) / WEIR_KV_DEFAULT_BLOCK_SIZE);
  WT_ASSERT_INT_EQ(g->bytes_per_block, bb * 3);
  CU_ASSERT(g->bytes >= bb * 3 * 10);
  /* The bookkeeping covers the same blocks. */
  weir_kv_cache *kv = weir_kv_pool_cache(pool);
  WT_ASSERT_INT_EQ(weir_kv_cache_num_blocks(kv), 10);
  WT_ASSERT_INT_EQ(weir_kv_cache_block_size(kv), WEIR_KV_DEFAULT_BLOCK_SIZE);
  const weir_attn_shape *sh = weir_kv_pool_shape(pool, 0);
  CU_ASSERT_FATAL(sh != NULL);
  WT_ASSERT_INT_EQ(sh->block_size, WEIR_KV_DEFAULT_BLOCK_SIZE);
  WT_ASSERT_INT_EQ(sh->kv_dtype, WEIR_DTYPE_F16);
  CU_ASSERT(weir_kv_pool_shape(pool, 1) == NULL);
  weir_kv_view v;
  WT_ASSERT_INT_EQ(weir_kv_pool_view(pool, 0, 3, &v), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_kv_pool_view(pool, 1, 0, &v), WEIR_E_RANGE);
  weir_kv_pool_destroy(pool);

  /* An exact count wins over the budget, and an explicit block size is kept. */
  p.num_blocks = 7;
  p.block_size = 4;
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_OK);
  WT_ASSERT_INT_EQ(weir_kv_pool_geometry(pool)->num_blocks, 7);
  WT_ASSERT_INT_EQ(weir_kv_pool_geometry(pool)->max_blocks_per_seq, 25);
  weir_kv_pool_destroy(pool);
  unload_plugins();
}

/* Two models in one pool: every view lies inside the allocation, views never overlap, each
 * model's layers follow each other at num_blocks * block_bytes, and each model starts aligned. */
static void test_two_models(void) {
  load_plugins();
  weir_attn_shape s[2] = {shape_of(4, 8, 2, 32), shape_of(2, 4, 1, 16)};
  weir_kv_pool_params p = {.block_size = 8,
                           .kv_dtype = WEIR_DTYPE_F16,
                           .num_blocks = 13,
                           .max_model_len = 64,
                           .groups = s,
                           .num_groups = 2};
  weir_kv_pool *pool = NULL;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_OK);
  CU_ASSERT_FATAL(pool != NULL);
  const weir_kv_geometry *g = weir_kv_pool_geometry(pool);
  size_t bb0 = attn_block_bytes(g_set.attention, s[0], 8, WEIR_DTYPE_F16);
  size_t bb1 = attn_block_bytes(g_set.attention, s[1], 8, WEIR_DTYPE_F16);
  WT_ASSERT_INT_EQ(g->bytes_per_block, bb0 * 4 + bb1 * 2);
  WT_ASSERT_INT_EQ(weir_kv_pool_num_groups(pool), 2);
  weir_kv_view first;
  WT_ASSERT_INT_EQ(weir_kv_pool_view(pool, 0, 0, &first), WEIR_OK);
  const char *base = first.base, *end = base + g->bytes;
  struct { const char *lo, *hi; } spans[6];
  int n = 0;
  for (int32_t grp = 0; grp < 2; grp++) {
    weir_kv_view l0;
    WT_ASSERT_INT_EQ(weir_kv_pool_view(pool, grp, 0, &l0), WEIR_OK);
    CU_ASSERT(((uintptr_t)((const char *)l0.base - base)) % WEIR_KV_POOL_ALIGN == 0);
    for (int32_t l = 0; l < s[grp].n_layers; l++) {
      weir_kv_view v;
      WT_ASSERT_INT_EQ(weir_kv_pool_view(pool, grp, l, &v), WEIR_OK);
      WT_ASSERT_INT_EQ(v.block_bytes, grp ? bb1 : bb0);
      WT_ASSERT_INT_EQ(v.num_blocks, 13);
      WT_ASSERT_INT_EQ((const char *)v.base - (const char *)l0.base,
                       (size_t)l * 13 * v.block_bytes);
      spans[n].lo = v.base;
      spans[n].hi = (const char *)v.base + 13 * v.block_bytes;
      CU_ASSERT(spans[n].lo >= base && spans[n].hi <= end);
      n++;
    }
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) CU_ASSERT(spans[i].hi <= spans[j].lo || spans[j].hi <= spans[i].lo);
  weir_kv_pool_destroy(pool);
  unload_plugins();
}

/* Fills every block of every layer of every model with a byte naming (model, layer, block),
 * runs copy orders, and checks that exactly the destinations changed, to their sources. */
static void check_copies(const weir_plugin *attention) {
  weir_attn_shape s[2] = {shape_of(3, 4, 2, 16), shape_of(2, 2, 1, 16)};
  weir_kv_pool_params p = {.block_size = 4,
                           .kv_dtype = WEIR_DTYPE_F16,
                           .num_blocks = 9,
                           .max_model_len = 32,
                           .groups = s,
                           .num_groups = 2};
  weir_kv_pool *pool = NULL;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, attention, &pool, err, sizeof err),
                   WEIR_OK);
  CU_ASSERT_FATAL(pool != NULL);
#define MARK(grp, l, b) ((unsigned char)(1 + (grp) * 64 + (l) * 16 + (b)))
  /* The CPU device's memory is host memory. */
  for (int32_t grp = 0; grp < 2; grp++)
    for (int32_t l = 0; l < s[grp].n_layers; l++) {
      weir_kv_view v;
      weir_kv_pool_view(pool, grp, l, &v);
      for (int32_t b = 0; b < 9; b++)
        memset((char *)v.base + (size_t)b * v.block_bytes, MARK(grp, l, b), v.block_bytes);
    }
  weir_kv_copy orders[2] = {{.src = 1, .dst = 5}, {.src = 2, .dst = 8}};
  WT_ASSERT_INT_EQ(weir_kv_pool_copy(pool, orders, 2), WEIR_OK);
  for (int32_t grp = 0; grp < 2; grp++)
    for (int32_t l = 0; l < s[grp].n_layers; l++) {
      weir_kv_view v;
      weir_kv_pool_view(pool, grp, l, &v);
      for (int32_t b = 0; b < 9; b++) {
        int32_t from = b == 5 ? 1 : b == 8 ? 2 : b;
        const unsigned char *blk = (const unsigned char *)v.base + (size_t)b * v.block_bytes;
        size_t bad = 0;
        for (size_t i = 0; i < v.block_bytes; i++) bad += blk[i] != MARK(grp, l, from);
        if (bad) fprintf(stderr, "\n  model %d layer %d block %d: %zu wrong bytes\n", grp, l, b, bad);
        CU_ASSERT(bad == 0);
      }
    }
  weir_kv_copy wrong = {.src = 0, .dst = 9};
  WT_ASSERT_INT_EQ(weir_kv_pool_copy(pool, &wrong, 1), WEIR_E_RANGE);
#undef MARK
  weir_kv_pool_destroy(pool);
}

static void test_copies_plugin(void) {
  load_plugins();
  CU_ASSERT_FATAL(((const weir_attention_ops *)g_set.attention->ops)->copy_blocks != NULL);
  check_copies(g_set.attention);
  unload_plugins();
}

/* tests/plugins' testattn has no copy_blocks: the pool copies with the device's copy_d2d. */
static void test_copies_device_fallback(void) {
  load_plugins();
  char *dirv[1] = {WT_BAD_PLUGIN_DIR};
  weir_plugin_dirs dirs = {.dirs = dirv, .num = 1};
  weir_plugin_request req = {.kind = WEIR_PLUGIN_ATTENTION,
                             .name = "testattn",
                             .dirs = &dirs,
                             .section = "attention",
                             .device_name = "cpu",
                             .device_plugin = g_set.device};
  weir_plugin *attn = NULL;
  char err[512] = "";
  int rc = weir_plugin_load(&req, &attn, err, sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
  CU_ASSERT_FATAL(attn != NULL);
  CU_ASSERT(((const weir_attention_ops *)attn->ops)->copy_blocks == NULL);
  check_copies(attn);
  weir_plugin_unload(attn);
  unload_plugins();
}

static void test_refusals(void) {
  load_plugins();
  weir_attn_shape s = shape_of(2, 4, 2, 16);
  weir_kv_pool_params p = {.kv_dtype = WEIR_DTYPE_BF16, /* paged keeps f32 or f16 */
                           .memory_bytes = 1 << 20,
                           .max_model_len = 64,
                           .groups = &s,
                           .num_groups = 1};
  weir_kv_pool *pool = NULL;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_E_NOTSUP);
  CU_ASSERT(pool == NULL);
  WT_ASSERT_STR_CONTAINS(err, "paged");
  WT_ASSERT_STR_CONTAINS(err, "bf16");
  p.kv_dtype = WEIR_DTYPE_F16;
  p.memory_bytes = 10;
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_E_RANGE);
  WT_ASSERT_STR_CONTAINS(err, "holds no block");
  p.memory_bytes = 1 << 20;
  p.max_model_len = 0;
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_E_INVAL);
  p.max_model_len = 64;
  p.num_groups = 0;
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_E_INVAL);
  p.num_groups = 1;
  s.head_dim = 0;
  WT_ASSERT_INT_EQ(weir_kv_pool_create(&p, g_set.device, g_set.attention, &pool, err, sizeof err),
                   WEIR_E_INVAL);
  CU_ASSERT(pool == NULL);
  unload_plugins();
}

int main(void) {
  static const wt_test tests[] = {
      {"geometry from the budget, default block size, stride", test_geometry},
      {"two models share one pool", test_two_models},
      {"copies through the plugin's copy_blocks", test_copies_plugin},
      {"copies through the device fallback", test_copies_device_fallback},
      {"refusals", test_refusals},
      {NULL, NULL}};
  return wt_run_suite("kv_pool", tests);
}
