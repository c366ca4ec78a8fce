/* An out-of-tree plugin against the installed SDK alone: `cmake --install` into a temporary
 * prefix, copy sdk/examples/sampler_typical out of the source tree, build it once with
 * find_package(weir) and once with pkg-config, load both through the real loader and check
 * the sampler's choices against a reference computed here; finally the installed weir lists
 * it and `weir config check` accepts a config selecting it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/toml.h"
#include "plugin/loader.h"
#include "testutil.h"

static char *g_tmp, *g_prefix;

static int sh(const char *cmd, char **out) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  char *o = NULL;
  int rc = wt_run(argv, &o, 300000);
  if (rc != 0) fprintf(stderr, "\n  command failed (%d): %s\n%s\n", rc, cmd, o ? o : "");
  if (out) *out = o;
  else free(o);
  return rc;
}

/* The most typical token: smallest |-log p - H| at temperature 1 (ties to the lower id). */
static int32_t reference_typical(const float *l, int n) {
  double mx = l[0], s = 0, h = 0, p[16];
  for (int i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
  for (int i = 0; i < n; i++) s += (p[i] = exp(l[i] - mx));
  for (int i = 0; i < n; i++) {
    p[i] /= s;
    h -= p[i] * log(p[i]);
  }
  int best = 0;
  for (int i = 1; i < n; i++)
    if (fabs(-log(p[i]) - h) < fabs(-log(p[best]) - h)) best = i;
  return best;
}

static weir_plugin *load_typical(const char *path, const char *opts, char *err, size_t errlen,
                                 int *rc) {
  weir_toml_node *t = NULL;
  weir_toml_parse_string(opts, "opts", &t, err, errlen);
  weir_plugin_request req = {.kind = WEIR_PLUGIN_SAMPLER, .name = "typical", .path = path,
                             .table = t, .section = "sampler", .device_name = "cpu"};
  weir_plugin *p = NULL;
  *rc = weir_plugin_load(&req, &p, err, errlen);
  weir_toml_free(t);
  return p;
}

static void check_plugin(const char *path) {
  char err[1024];
  int rc;
  weir_plugin *p = load_typical(path, "typical_p = 0.000001\n", err, sizeof err, &rc);
  WT_ASSERT_INT_EQ(rc, 0);
  if (!p) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  CU_ASSERT_STRING_EQUAL(p->desc->name, "typical");
  const weir_sampler_ops *ops = p->ops;
  const float row[6] = {2.0f, 1.0f, 0.5f, -1.0f, 3.0f, 0.0f};
  int32_t want = reference_typical(row, 6);
  weir_sampling_params sp = {.struct_size = sizeof sp, .temperature = 1.0f, .top_p = 1,
                             .repetition_penalty = 1, .num_logprobs = -1};
  int wrong = 0;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    uint64_t rng[4] = {seed, seed * 7 + 1, seed * 13 + 5, 99}, before[4];
    memcpy(before, rng, sizeof rng);
    weir_sampling_row r = {.params = &sp, .rng_state = rng};
    float l[6];
    memcpy(l, row, sizeof l);
    weir_sample_result res;
    WT_ASSERT_INT_EQ(ops->sample(p->self, &r, 1, l, 6, &res), 0);
    if (res.token != want) wrong++;
    CU_ASSERT(memcmp(rng, before, sizeof rng) != 0); /* the state advanced */
  }
  WT_ASSERT_INT_EQ(wrong, 0);
  /* Suppressing the typical token moves the choice elsewhere. */
  uint64_t rng[4] = {1, 2, 3, 4};
  int32_t sup = want;
  weir_sampling_row r = {.params = &sp, .rng_state = rng, .suppress_tokens = &sup,
                         .num_suppress_tokens = 1};
  float l[6];
  memcpy(l, row, sizeof l);
  weir_sample_result res;
  WT_ASSERT_INT_EQ(ops->sample(p->self, &r, 1, l, 6, &res), 0);
  CU_ASSERT(res.token != want && res.token >= 0 && res.token < 6);
  /* ABI 1.1: an allowed-token mask without the typical token, and a logit bias; the example
   * declares both capabilities, so it must apply them itself. */
  WT_ASSERT_INT_EQ(ops->caps, WEIR_SAMPLER_CAP_ALLOWED | WEIR_SAMPLER_CAP_LOGIT_BIAS);
  uint32_t allowed = 0x3Fu & ~(1u << want);
  sp.allowed = &allowed;
  memcpy(l, row, sizeof l);
  r.num_suppress_tokens = 0;
  WT_ASSERT_INT_EQ(ops->sample(p->self, &r, 1, l, 6, &res), 0);
  CU_ASSERT(res.token != want && weir_mask_test(&allowed, res.token));
  sp.allowed = NULL;
  const int32_t bias_tok = 3;
  const float bias_val = 100.0f;
  sp.logit_bias_tokens = &bias_tok;
  sp.logit_bias_values = &bias_val;
  sp.num_logit_bias = 1;
  sp.temperature = 0;
  memcpy(l, row, sizeof l);
  WT_ASSERT_INT_EQ(ops->sample(p->self, &r, 1, l, 6, &res), 0);
  WT_ASSERT_INT_EQ(res.token, 3); /* +100 forces it */
  sp.num_logit_bias = 0;
  /* Temperature 0: greedy. */
  sp.temperature = 0;
  memcpy(l, row, sizeof l);
  r.num_suppress_tokens = 0;
  WT_ASSERT_INT_EQ(ops->sample(p->self, &r, 1, l, 6, &res), 0);
  WT_ASSERT_INT_EQ(res.token, 4);
  int64_t hb, db;
  weir_plugin_memory(p, &hb, &db);
  CU_ASSERT(hb > 0); /* its scratch came from the host */
  weir_plugin_unload(p);
  /* Its option table is enforced like a shipped plugin's. */
  p = load_typical(path, "typical_p = 2.0\n", err, sizeof err, &rc);
  WT_ASSERT_INT_EQ(rc, WEIR_E_RANGE);
  WT_ASSERT_STR_CONTAINS(err, "sampler.typical_p: 2 is out of range [1e-06, 1]");
  weir_plugin_unload(p);
}

static void test_install(void) {
  char *cmd = wt_strf("'%s' --install '%s' --prefix '%s'", WT_CMAKE, WT_BUILD_DIR, g_prefix);
  WT_ASSERT_INT_EQ(sh(cmd, NULL), 0);
  free(cmd);
  const char *files[] = {"bin/weir", "include/weir/plugin.h", "include/weir/sampler.h",
                         "lib/cmake/weir/weirConfig.cmake", "lib/pkgconfig/weir.pc",
                         "lib/weir/plugins"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char *p = wt_strf("%s/%s", g_prefix, files[i]);
    if (access(p, R_OK) != 0) fprintf(stderr, "\n  missing after install: %s\n", p);
    CU_ASSERT(access(p, R_OK) == 0);
    free(p);
  }
}

static void test_cmake_package(void) {
  /* Out of the source tree: only the installed prefix is visible to the build. */
  char *cmd = wt_strf("cp -r '%s/sdk/examples/sampler_typical' '%s/src' && cd '%s' && "
                      "'%s' -S src -B b1 -G '%s' -DCMAKE_PREFIX_PATH='%s' "
                      "-DCMAKE_C_COMPILER='%s' && '%s' --build b1",
                      WT_SOURCE_DIR, g_tmp, g_tmp, WT_CMAKE, WT_GENERATOR, g_prefix, WT_CC,
                      WT_CMAKE);
  WT_ASSERT_INT_EQ(sh(cmd, NULL), 0);
  free(cmd);
  char *so = wt_strf("%s/b1/weir_sampler_typical.so", g_tmp);
  check_plugin(so);
  /* Only the entry symbol is exported. */
  char *out = NULL;
  cmd = wt_strf("nm -D --defined-only '%s' | grep -c ' T '", so);
  if (sh(cmd, &out) == 0) WT_ASSERT_STR_CONTAINS(out, "1");
  free(out);
  free(cmd);
  free(so);
}

static void test_pkg_config(void) {
  char *out = NULL;
  char *cmd = wt_strf("PKG_CONFIG_PATH='%s/lib/pkgconfig' pkg-config --variable=plugindir weir",
                      g_prefix);
  WT_ASSERT_INT_EQ(sh(cmd, &out), 0);
  char *want = wt_strf("%s/lib/pkgconfig/../../lib/weir/plugins", g_prefix);
  WT_ASSERT_STR_CONTAINS(out, want);
  free(want);
  free(out);
  free(cmd);
  cmd = wt_strf("cd '%s' && mkdir -p b2 && PKG_CONFIG_PATH='%s/lib/pkgconfig' && "
                "export PKG_CONFIG_PATH && '%s' -std=gnu17 -O2 -fPIC -shared "
                "-fvisibility=hidden $(pkg-config --cflags weir) src/sampler_typical.c "
                "-o b2/weir_sampler_typical.so -lm",
                g_tmp, g_prefix, WT_CC);
  WT_ASSERT_INT_EQ(sh(cmd, NULL), 0);
  free(cmd);
  char *so = wt_strf("%s/b2/weir_sampler_typical.so", g_tmp);
  check_plugin(so);
  free(so);
}

/* The installed server sees the plugin: listed, and accepted by config check with its
 * options. */
static void test_installed_server(void) {
  char *weir = wt_strf("%s/bin/weir", g_prefix), *dir = wt_strf("%s/b1", g_tmp);
  char *out = NULL;
  char *argv[] = {weir, "plugins", "--plugin-dir", dir, NULL};
  WT_ASSERT_INT_EQ(wt_run(argv, &out, 20000), 0);
  WT_ASSERT_STR_CONTAINS(out, "sampler typical 1.1.0");
  WT_ASSERT_STR_CONTAINS(out, "sampler default"); /* the shipped ones, found next to bin/ */
  free(out);
  char *cfg = wt_strf("[sampler]\nname = \"typical\"\ntypical_p = 0.5\n[plugins]\ndirs = [\"%s\"]\n", dir);
  char *path = wt_strf("%s/typical.toml", g_tmp);
  wt_write_file(path, cfg, strlen(cfg));
  char *argv2[] = {weir, "config", "check", path, NULL};
  WT_ASSERT_INT_EQ(wt_run(argv2, &out, 20000), 0);
  WT_ASSERT_STR_CONTAINS(out, "typical_p = 0.5  # set:");
  WT_ASSERT_STR_CONTAINS(out, "min_keep = 1  # default:");
  free(out);
  free(path);
  free(cfg);
  free(dir);
  free(weir);
}

int main(void) {
  unsetenv("WEIR_PLUGIN_PATH");
  g_tmp = wt_mkdtemp();
  g_prefix = wt_strf("%s/prefix", g_tmp);
  static const wt_test tests[] = {
      {"cmake --install into a temporary prefix", test_install},
      {"the example builds with find_package(weir) and loads", test_cmake_package},
      {"the example builds with pkg-config and loads", test_pkg_config},
      {"the installed weir lists and accepts it", test_installed_server},
      {NULL, NULL}};
  int rc = wt_run_suite("sdk_example", tests);
  wt_rmtree(g_tmp);
  free(g_prefix);
  free(g_tmp);
  return rc;
}
