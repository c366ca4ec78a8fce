/* The plugin loader: every refusal with its message (file, expected, found, fix), option
 * validation and defaults, file-name resolution (device-specific first, duplicates refused),
 * the host services (accounted memory, device memory through the device plugin, the pool,
 * metrics with a plugin label), whole sets from a config, listing, and `weir plugins`.
 * Uses the test plugins of tests/plugins (build/tests/plugins). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/toml.h"
#include "plugin/host.h"
#include "plugin/loader.h"
#include "testutil.h"
#include "weir/drafter.h"

static weir_plugin_dirs g_dirs;
static char *g_dir_list[1] = {WT_BAD_PLUGIN_DIR};

static weir_toml_node *parse_table(const char *toml) {
  weir_toml_node *doc = NULL;
  char err[512];
  if (!toml) return NULL;
  if (weir_toml_parse_string(toml, "test", &doc, err, sizeof err) != 0) {
    fprintf(stderr, "bad test TOML: %s\n", err);
    return NULL;
  }
  return doc;
}

/* Loads kind/name from the test plugin dir with options from `toml` (a table body). */
static int load(weir_plugin_kind kind, const char *name, const char *toml, const char *device,
                weir_plugin **out, char *err, size_t errlen) {
  weir_toml_node *t = parse_table(toml);
  weir_plugin_request req = {.kind = kind,
                             .name = name,
                             .dirs = &g_dirs,
                             .table = t,
                             .section = weir_plugin_kind_name(kind),
                             .device_name = device ? device : "cpu"};
  err[0] = 0;
  int rc = weir_plugin_load(&req, out, err, errlen);
  weir_toml_free(t);
  return rc;
}

/* Expects a refusal with status `want` and a message holding every fragment. */
static void refused(weir_plugin_kind kind, const char *name, const char *toml, int want,
                    const char *const *frags) {
  weir_plugin *p = NULL;
  char err[2048];
  int rc = load(kind, name, toml, "cpu", &p, err, sizeof err);
  WT_ASSERT_INT_EQ(rc, want);
  CU_ASSERT_PTR_NULL(p);
  for (int i = 0; frags[i]; i++) WT_ASSERT_STR_CONTAINS(err, frags[i]);
  weir_plugin_unload(p);
}

#define FRAGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_good_sampler(void) {
  weir_plugin *p = NULL;
  char err[1024];
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "good", NULL, "cpu", &p, err, sizeof err), 0);
  if (!p) return;
  WT_ASSERT_STR_CONTAINS(p->path, "weir_sampler_good.so");
  WT_ASSERT_STR_CONTAINS(p->desc->version, "1.2.3");
  CU_ASSERT_PTR_NOT_NULL(p->self);
  /* Defaults filled, none marked as set. */
  WT_ASSERT_INT_EQ(p->options[0].i, -1);
  CU_ASSERT_DOUBLE_EQUAL(p->options[1].f, 0.0, 0);
  WT_ASSERT_STR_CONTAINS(p->options[2].s, "argmax");
  WT_ASSERT_INT_EQ(p->options[3].b, 1);
  for (int i = 0; i < 4; i++) WT_ASSERT_INT_EQ(p->options[i].is_set, 0);
  /* host->alloc is accounted to the instance: the plugin took its state plus 1000 bytes. */
  int64_t hb, db;
  weir_plugin_memory(p, &hb, &db);
  CU_ASSERT(hb >= 1000);
  WT_ASSERT_INT_EQ(db, 0);
  const weir_sampler_ops *ops = p->ops;
  float logits[8] = {1, 5, 3, 2, 0, 9, 1, 1};
  weir_sample_result r[2];
  WT_ASSERT_INT_EQ(ops->sample(p->self, NULL, 2, logits, 4, r), 0);
  WT_ASSERT_INT_EQ(r[0].token, 1);
  WT_ASSERT_INT_EQ(r[1].token, 1);
  weir_plugin_unload(p);
}

static void test_options_reach_init(void) {
  weir_plugin *p = NULL;
  char err[1024];
  /* name and path are the core's keys in [sampler]; the rest are the plugin's options. */
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "good",
                        "name = \"good\"\nbias_token = 2\nbias = 10\nmode = \"argmax\"\n", "cpu",
                        &p, err, sizeof err), 0);
  if (!p) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  WT_ASSERT_INT_EQ(p->options[0].is_set, 1);
  WT_ASSERT_INT_EQ(p->options[3].is_set, 0);
  float logits[4] = {1, 5, 3, 2};
  weir_sample_result r;
  WT_ASSERT_INT_EQ(((const weir_sampler_ops *)p->ops)->sample(p->self, NULL, 1, logits, 4, &r), 0);
  WT_ASSERT_INT_EQ(r.token, 2); /* 3 + 10 beats 5 */
  weir_plugin_unload(p);
  /* An integer is accepted for a float option; a string choice changes behaviour. */
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "good", "bias = 3\nmode = \"argmin\"\n", "cpu", &p,
                        err, sizeof err), 0);
  if (!p) return;
  CU_ASSERT_DOUBLE_EQUAL(p->options[1].f, 3.0, 0);
  float l2[4] = {1, 5, 0.5f, 2};
  WT_ASSERT_INT_EQ(((const weir_sampler_ops *)p->ops)->sample(p->self, NULL, 1, l2, 4, &r), 0);
  WT_ASSERT_INT_EQ(r.token, 2);
  weir_plugin_unload(p);
}

static void test_option_errors(void) {
  refused(WEIR_PLUGIN_SAMPLER, "good", "bias_token = \"two\"\n", WEIR_E_INVAL,
          FRAGS("sampler.bias_token: expected an integer, found a string", "'good'"));
  refused(WEIR_PLUGIN_SAMPLER, "good", "count = 1\n", WEIR_E_INVAL,
          FRAGS("sampler.count: expected true or false, found an integer"));
  refused(WEIR_PLUGIN_SAMPLER, "good", "bias = 500.5\n", WEIR_E_RANGE,
          FRAGS("sampler.bias: 500.5 is out of range [-100, 100]"));
  refused(WEIR_PLUGIN_SAMPLER, "good", "bias_token = -7\n", WEIR_E_RANGE,
          FRAGS("sampler.bias_token: -7 is out of range [-1, 1000000]"));
  refused(WEIR_PLUGIN_SAMPLER, "good", "mode = \"median\"\n", WEIR_E_INVAL,
          FRAGS("sampler.mode: \"median\" is not one of argmax, argmin"));
  refused(WEIR_PLUGIN_SAMPLER, "good", "biass = 1\n", WEIR_E_NOTFOUND,
          FRAGS("sampler.biass: unknown option of sampler plugin 'good'",
                "weir_sampler_good.so", "bias_token, bias, mode, count",
                "weir plugins --help good"));
  /* A plugin with no options refuses every non-core key. */
  refused(WEIR_PLUGIN_QUANT, "testquant", "scheme = \"testquant\"\nfoo = 1\n", WEIR_E_NOTFOUND,
          FRAGS("quant.foo: unknown option", "no options"));
}

static void test_abi_refusals(void) {
  char sig[128];
  snprintf(sig, sizeof sig, "expected \"%s\"", WEIR_BUILD_SIGNATURE);
  refused(WEIR_PLUGIN_SAMPLER, "badmajor", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_badmajor.so", "built for plugin ABI 2.0", "expected ABI 1.x",
                "fix: rebuild the plugin"));
  char newer[128];
  snprintf(newer, sizeof newer, "ABI %d.%d, newer than this weir's %d.%d", WEIR_ABI_MAJOR,
           WEIR_ABI_MINOR + 1, WEIR_ABI_MAJOR, WEIR_ABI_MINOR);
  refused(WEIR_PLUGIN_SAMPLER, "newminor", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_newminor.so", newer, "fix: upgrade weir"));
  refused(WEIR_PLUGIN_SAMPLER, "badsig", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_badsig.so", "build signature \"weir-abi1;p32;be;layout0\"", sig,
                "fix:"));
  refused(WEIR_PLUGIN_SAMPLER, "smalldesc", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_smalldesc.so", "descriptor struct_size is 16 bytes",
                "expected at least", "fix:"));
  refused(WEIR_PLUGIN_SAMPLER, "noentry", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_noentry.so", "no weir_plugin_entry symbol",
                "fix: define the descriptor with WEIR_PLUGIN_EXPORT"));
}

static void test_callback_refusals(void) {
  refused(WEIR_PLUGIN_SAMPLER, "noinit", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_noinit.so", "has no init callback, which is mandatory",
                "fix: set weir_plugin_desc.init"));
  refused(WEIR_PLUGIN_SAMPLER, "nosample", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_nosample.so", "mandatory callback weir_sampler_ops.sample is NULL",
                "fix: implement sample"));
  refused(WEIR_PLUGIN_SAMPLER, "smallops", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_smallops.so", "weir_sampler_ops.struct_size is 2, too small",
                "sample", "fix: set struct_size = sizeof(weir_sampler_ops)"));
  /* The reason the plugin gave with host->set_error is in the refusal itself. */
  refused(WEIR_PLUGIN_SAMPLER, "initfail", NULL, WEIR_E_PLUGIN,
          FRAGS("weir_sampler_initfail.so", "failed to initialise",
                "initfail: refusing on purpose (the test's reason)", "device error", "fix:"));
  refused(WEIR_PLUGIN_SAMPLER, "pathopt", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_pathopt.so", "declares an option 'path'", "[sampler]",
                "fix: rename the option"));
  refused(WEIR_PLUGIN_SAMPLER, "score", NULL, WEIR_E_NOTSUP,
          FRAGS("weir_sampler_score.so", "cannot run on this machine",
                "weir_plugin_score returned -1", "fix:"));
}

/* Devices by name (ABI 1.5): names are checked, a named device is matched by name (its 1.0
 * bits are not read), "*" runs anywhere. */
static void test_device_names(void) {
  refused(WEIR_PLUGIN_SAMPLER, "baddevnames", NULL, WEIR_E_ABI,
          FRAGS("weir_sampler_baddevnames.so", "device_names[0] is \"Bad-Name\"",
                "fix: correct weir_plugin_desc.device_names"));
  refused(WEIR_PLUGIN_SAMPLER, "onlysim", NULL, WEIR_E_NOTSUP,
          FRAGS("weir_sampler_onlysim.so", "runs on sim, expected cpu"));
  weir_plugin *p = NULL;
  char err[1024];
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "onlysim", NULL, "sim", &p, err, sizeof err), 0);
  weir_plugin_unload(p);
  p = NULL;
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "anydev", NULL, "rocm", &p, err, sizeof err), 0);
  weir_plugin_unload(p);
  p = NULL;
  /* a 1.0-style plugin (bits only, cpu and cuda) on a device known by name only */
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "good", NULL, "rocm", &p, err, sizeof err),
                   WEIR_E_NOTSUP);
  WT_ASSERT_STR_CONTAINS(err, "runs on cpu, cuda, expected rocm");
  weir_plugin_unload(p);
}

/* A plugin built against ABI 1.0 (a descriptor and an ops table that end before the 1.1
 * fields) loads; the host reads the missing fields as NULL, never the bytes past the plugin's
 * struct_size (which here hold values that would abort or show if read). */
static void test_older_plugin(void) {
  weir_plugin *p = NULL;
  char err[1024];
  int rc = load(WEIR_PLUGIN_SAMPLER, "olddesc", NULL, "cpu", &p, err, sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  WT_ASSERT_INT_EQ(p->desc->struct_size, WEIR_PLUGIN_DESC_SIZE_1_0);
  CU_ASSERT(!WEIR_HAS_FIELD(p->desc, weir_plugin_desc, variant));
  CU_ASSERT_PTR_NULL(p->desc->variant);
  const weir_sampler_ops *ops = p->ops;
  WT_ASSERT_INT_EQ(ops->struct_size, offsetof(weir_sampler_ops, probs));
  CU_ASSERT(!WEIR_HAS_FIELD(ops, weir_sampler_ops, probs));
  CU_ASSERT_PTR_NULL(ops->probs);
  float logits[4] = {1, 5, 3, 2};
  weir_sample_result r;
  WT_ASSERT_INT_EQ(ops->sample(p->self, NULL, 1, logits, 4, &r), 0);
  WT_ASSERT_INT_EQ(r.token, 1);
  weir_plugin_unload(p);
  /* A current plugin's fields are all there. */
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "good", NULL, "cpu", &p, err, sizeof err), 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT(WEIR_HAS_FIELD(p->desc, weir_plugin_desc, variant));
  CU_ASSERT(WEIR_HAS_FIELD((const weir_sampler_ops *)p->ops, weir_sampler_ops, probs));
  weir_plugin_unload(p);
}

/* The token the sampler picks from `logits` (4 of them). */
static int32_t sample4(const weir_plugin *p, const float *logits) {
  float l[4];
  memcpy(l, logits, sizeof l);
  weir_sample_result r = {.token = -1};
  WT_ASSERT_INT_EQ(((const weir_sampler_ops *)p->ops)->sample(p->self, NULL, 1, l, 4, &r), 0);
  return r.token;
}

/* ABI 1.5: plugins read their options by key. "reordered" declares the same options as
 * "good" in another order; both read them by name, so one table gives both the same values
 * (and the same behaviour), though position i holds another option in each. A key the plugin
 * does not declare, or a declared key read with another type, fails init with a message
 * naming it. */
static void test_options_by_name(void) {
  const char *toml = "bias_token = 1\nbias = -10\nmode = \"argmin\"\ncount = false\n";
  const float logits[4] = {1, 5, 3, 2};
  weir_plugin *good = NULL, *re = NULL;
  char err[2048];
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "good", toml, "cpu", &good, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "reordered", toml, "cpu", &re, err, sizeof err), 0);
  if (!good || !re) {
    fprintf(stderr, "\n%s\n", err);
    goto out;
  }
  /* The tables really differ in order: position 0 is bias_token in one, count in the other. */
  WT_ASSERT_STR_CONTAINS(good->desc->options[0].key, "bias_token");
  WT_ASSERT_STR_CONTAINS(re->desc->options[0].key, "count");
  WT_ASSERT_STR_CONTAINS(re->desc->options[3].key, "bias_token");
  /* bias -10 on token 1 makes it the smallest: argmin picks 1 in both (0 without the bias,
   * 1 under argmax). */
  WT_ASSERT_INT_EQ(sample4(good, logits), 1);
  WT_ASSERT_INT_EQ(sample4(re, logits), 1);
  weir_plugin_unload(re);
  re = NULL;
  /* Another value of each reaches "reordered" by name: argmax, +10 on token 2. */
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "reordered",
                        "bias_token = 2\nbias = 10\nmode = \"argmax\"\n", "cpu", &re, err,
                        sizeof err), 0);
  if (re) WT_ASSERT_INT_EQ(sample4(re, logits), 2);
  /* Defaults too: no bias, argmax picks 1. */
  weir_plugin_unload(re);
  re = NULL;
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "reordered", NULL, "cpu", &re, err, sizeof err), 0);
  if (re) WT_ASSERT_INT_EQ(sample4(re, logits), 1);
out:
  weir_plugin_unload(good);
  weir_plugin_unload(re);
  /* Reading a key it does not declare (a typo) fails init, naming the key and what is
   * declared. */
  refused(WEIR_PLUGIN_SAMPLER, "undeclared", NULL, WEIR_E_PLUGIN,
          FRAGS("weir_sampler_undeclared.so", "failed to initialise",
                "plugin 'undeclared' read option 'bias_tokn', which it does not declare",
                "it declares bias_token, bias, mode, count", "not found"));
  refused(WEIR_PLUGIN_SAMPLER, "wrongtype", NULL, WEIR_E_PLUGIN,
          FRAGS("weir_sampler_wrongtype.so", "failed to initialise",
                "plugin 'wrongtype' read option 'bias' as int, but declares it as float"));
}

/* The message a failing call gives with host->set_error is the host's to read once:
 * weir_plugin_take_error hands it over and clears it. */
static void test_take_error(void) {
  weir_plugin *p = NULL;
  char err[1024], why[512];
  WT_ASSERT_INT_EQ(load(WEIR_PLUGIN_SAMPLER, "good", NULL, "cpu", &p, err, sizeof err), 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  WT_ASSERT_INT_EQ(weir_plugin_take_error(p, why, sizeof why), 0);
  WT_ASSERT_INT_EQ(why[0], 0);
  const weir_host *h = &p->host->host;
  CU_ASSERT(WEIR_HAS_FIELD(h, weir_host, set_error));
  h->set_error(h->ctx, "tensor %s: %d is too wide", "blk.0.ffn_up.weight", 70000);
  WT_ASSERT_INT_EQ(weir_plugin_take_error(p, why, sizeof why), 1);
  WT_ASSERT_STR_CONTAINS(why, "tensor blk.0.ffn_up.weight: 70000 is too wide");
  WT_ASSERT_INT_EQ(weir_plugin_take_error(p, why, sizeof why), 0);
  /* Appended to an error string the host already has. */
  h->set_error(h->ctx, "the reason");
  snprintf(err, sizeof err, "packing x failed");
  WT_ASSERT_INT_EQ(weir_plugin_append_error(p, err, sizeof err), 1);
  WT_ASSERT_STR_CONTAINS(err, "packing x failed: the reason");
  /* The option lookup by key, straight through the host table. */
  weir_option_value v;
  WT_ASSERT_INT_EQ(h->option(h->ctx, "mode", WEIR_OPT_STRING, &v), WEIR_OK);
  WT_ASSERT_STR_CONTAINS(v.s, "argmax");
  WT_ASSERT_INT_EQ(h->option(h->ctx, "nosuch", WEIR_OPT_INT, &v), WEIR_E_NOTFOUND);
  WT_ASSERT_INT_EQ(weir_plugin_take_error(p, why, sizeof why), 1);
  WT_ASSERT_STR_CONTAINS(why, "read option 'nosuch', which it does not declare");
  WT_ASSERT_INT_EQ(h->option(h->ctx, "mode", WEIR_OPT_INT, &v), WEIR_E_INVAL);
  weir_plugin_unload(p);
}

/* weir_sampler_multi.so (score 1), .fast.so (score 10) and .nothere.so (cannot run here): the
 * loader takes the best variant that can run; when none can, it says so. */
static void test_variants(void) {
  weir_plugin *p = NULL;
  char err[1024];
  int rc = load(WEIR_PLUGIN_SAMPLER, "multi", NULL, "cpu", &p, err, sizeof err);
  if (rc) fprintf(stderr, "\n%s\n", err);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  WT_ASSERT_STR_CONTAINS(p->path, "weir_sampler_multi.fast.so");
  CU_ASSERT_STRING_EQUAL(p->desc->variant ? p->desc->variant : "", "fast");
  WT_ASSERT_INT_EQ(p->score, 10);
  weir_plugin_unload(p);
  refused(WEIR_PLUGIN_SAMPLER, "allbad", NULL, WEIR_E_NOTSUP,
          FRAGS("no variant of sampler plugin 'allbad' can be used here (2 found)",
                "weir_sampler_allbad.a.so", "cannot run on this machine"));
  /* The listing shows each variant with its score. */
  char *out = NULL;
  char *argv[] = {WT_WEIR, "plugins", "--plugin-dir", WT_BAD_PLUGIN_DIR, NULL};
  WT_ASSERT_INT_EQ(wt_run(argv, &out, 20000), 0);
  WT_ASSERT_STR_CONTAINS(out, "weir_sampler_multi.fast.so\n  variant: fast (score 10 on this machine)");
  WT_ASSERT_STR_CONTAINS(out, "weir_sampler_multi.so\n  variant: - (score 1 on this machine)");
  WT_ASSERT_STR_CONTAINS(out, "weir_sampler_multi.nothere.so: sampler plugin 'multi' cannot run");
  free(out);
}

static void test_kind_device_dtype(void) {
  refused(WEIR_PLUGIN_ATTENTION, "kindlie", NULL, WEIR_E_INVAL,
          FRAGS("weir_attention_kindlie.so", "declares a sampler plugin",
                "expected a attention plugin", "fix:"));
  refused(WEIR_PLUGIN_ATTENTION, "cudaonly", NULL, WEIR_E_NOTSUP,
          FRAGS("weir_attention_cudaonly.so", "runs on cuda, expected cpu",
                "device.name = \"cpu\"", "fix:"));
  /* The KV dtype must be among the attention plugin's dtypes. */
  weir_plugin *p = NULL;
  char err[1024];
  weir_plugin_request req = {.kind = WEIR_PLUGIN_ATTENTION, .name = "testattn", .dirs = &g_dirs,
                             .section = "attention", .device_name = "cpu", .check_dtype = 1,
                             .dtype = WEIR_DTYPE_BF16, .no_init = 1};
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), WEIR_E_NOTSUP);
  WT_ASSERT_STR_CONTAINS(err, "supports KV dtypes f32, f16, expected bf16");
  WT_ASSERT_STR_CONTAINS(err, "fix: set attention.kv_dtype to one of f32, f16");
  req.dtype = WEIR_DTYPE_F16;
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), 0);
  weir_plugin_unload(p);
}

static char *copy_to(const char *src, const char *dir, const char *name) {
  size_t len;
  char *data = wt_read_file(src, &len);
  char *dst = wt_strf("%s/%s", dir, name);
  if (!data || wt_write_file(dst, data, len) != 0) CU_FAIL("copy failed");
  free(data);
  return dst;
}

static void test_files(void) {
  char *good = wt_strf("%s/weir_sampler_good.so", WT_BAD_PLUGIN_DIR);
  char *a = wt_mkdtemp(), *b = wt_mkdtemp();
  char *list[2] = {a, b};
  weir_plugin_dirs two = {list, 2};
  weir_plugin_request req = {.kind = WEIR_PLUGIN_SAMPLER, .dirs = &two, .section = "sampler",
                             .device_name = "cpu", .no_init = 1};
  weir_plugin *p = NULL;
  char err[2048];

  /* Not found: names both file names and the directories. */
  req.name = "nosuch";
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), WEIR_E_NOTFOUND);
  WT_ASSERT_STR_CONTAINS(err, "weir_sampler_nosuch_cpu.so and weir_sampler_nosuch.so");
  WT_ASSERT_STR_CONTAINS(err, a);
  WT_ASSERT_STR_CONTAINS(err, "fix:");

  /* Not loadable. */
  const char junk[] = "this is not an ELF file\n";
  char *garbage = wt_strf("%s/weir_sampler_garbage.so", a);
  wt_write_file(garbage, junk, sizeof junk - 1);
  req.name = "garbage";
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), WEIR_E_IO);
  WT_ASSERT_STR_CONTAINS(err, garbage);
  WT_ASSERT_STR_CONTAINS(err, "cannot be loaded");
  WT_ASSERT_STR_CONTAINS(err, "fix:");

  /* The file name and the declared name must agree. */
  free(copy_to(good, a, "weir_sampler_other.so"));
  req.name = "other";
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "declares the name 'good', expected 'other'");

  /* Device-specific file first: the _cpu file is good, the generic one is junk. */
  free(copy_to(good, a, "weir_sampler_good_cpu.so"));
  char *generic = wt_strf("%s/weir_sampler_good.so", a);
  wt_write_file(generic, junk, sizeof junk - 1);
  req.name = "good";
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), 0);
  if (p) WT_ASSERT_STR_CONTAINS(p->path, "weir_sampler_good_cpu.so");
  weir_plugin_unload(p);
  p = NULL;
  req.device_name = "cuda"; /* no _cuda file: the generic (junk) one is taken */
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), WEIR_E_IO);
  WT_ASSERT_STR_CONTAINS(err, generic);
  req.device_name = "cpu";

  /* The same file name in two directories: a duplicate naming both. */
  free(copy_to(good, b, "weir_sampler_good_cpu.so"));
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), WEIR_E_EXISTS);
  WT_ASSERT_STR_CONTAINS(err, "provided twice");
  char *pa = wt_strf("%s/weir_sampler_good_cpu.so", a), *pb = wt_strf("%s/weir_sampler_good_cpu.so", b);
  WT_ASSERT_STR_CONTAINS(err, pa);
  WT_ASSERT_STR_CONTAINS(err, pb);
  WT_ASSERT_STR_CONTAINS(err, "sampler.path");
  /* An explicit path skips the search. */
  req.path = pb;
  WT_ASSERT_INT_EQ(weir_plugin_load(&req, &p, err, sizeof err), 0);
  if (p) WT_ASSERT_STR_CONTAINS(p->path, pb);
  weir_plugin_unload(p);

  free(pa);
  free(pb);
  free(generic);
  free(garbage);
  wt_rmtree(a);
  wt_rmtree(b);
  free(a);
  free(b);
  free(good);
}

static void base_config(weir_config *c) {
  char err[512];
  weir_config_defaults(c);
  const char *sets[][2] = {{"plugins.dirs", "[\"" WT_BAD_PLUGIN_DIR "\"]"},
                           {"attention.name", "testattn"},
                           {"quant.name", "testquant"},
                           {"sampler.name", "good"},
                           {"device.threads", "2"}};
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    if (weir_config_set(c, sets[i][0], sets[i][1], err, sizeof err) != 0) {
      fprintf(stderr, "%s\n", err);
      CU_FAIL("config set");
    }
}

static void test_set_load(void) {
  weir_config c;
  weir_metrics *m = NULL;
  weir_plugin_set s;
  base_config(&c);
  char err[1024];
  WT_ASSERT_INT_EQ(weir_config_set(&c, "sampler.bias_token", "0", err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_metrics_create(&m), 0);
  WT_ASSERT_INT_EQ(weir_plugin_set_load(&c, m, &s), 0);
  if (!s.sampler) goto out;
  CU_ASSERT_PTR_NOT_NULL(s.device);
  CU_ASSERT_PTR_NOT_NULL(s.attention);
  CU_ASSERT_PTR_NOT_NULL(s.quant);
  CU_ASSERT_PTR_NULL(s.drafter);
  /* The option from [sampler] reached the plugin. */
  WT_ASSERT_INT_EQ(s.sampler->options[0].i, 0);
  WT_ASSERT_INT_EQ(s.sampler->options[0].is_set, 1);
  /* The attention plugin took 4096 bytes of device memory through the device plugin. */
  int64_t hb, db;
  weir_plugin_memory(s.attention, &hb, &db);
  WT_ASSERT_INT_EQ(db, 4096);
  CU_ASSERT(hb > 0);
  /* The device plugin itself gets no device_alloc; the others do. */
  CU_ASSERT_PTR_NULL(s.device->host->host.device_alloc);
  CU_ASSERT_PTR_NOT_NULL(s.attention->host->host.device_alloc);
  /* device.threads sized the pool behind parallel_for. */
  const weir_host *h = &s.sampler->host->host;
  WT_ASSERT_INT_EQ(h->num_threads(h->ctx), 2);
  WT_ASSERT_INT_EQ(h->struct_size, sizeof(weir_host));
  CU_ASSERT_PTR_NULL(h->device_handle(h->ctx, "cuda.stream")); /* cpu: no native handles */
  /* Sampling records the plugin's metric, labelled with its name. */
  float logits[12] = {0, 1, 2, 9, 0, 1, 2, 9, 0, 1, 2, 9};
  weir_sample_result r[3];
  WT_ASSERT_INT_EQ(((const weir_sampler_ops *)s.sampler->ops)->sample(s.sampler->self, NULL, 3,
                                                                      logits, 4, r), 0);
  WT_ASSERT_INT_EQ(r[0].token, 3);
  char *text = NULL;
  size_t len = 0;
  WT_ASSERT_INT_EQ(weir_metrics_render(m, &text, &len), 0);
  WT_ASSERT_STR_CONTAINS(text, "weir_test_samples_total{plugin=\"good\"} 3");
  free(text);
  weir_plugin_set_unload(&s);
  CU_ASSERT_PTR_NULL(s.sampler);
  CU_ASSERT_PTR_NULL(s.pool);

  /* A refused member: nothing stays loaded, the set is zeroed, the reason is returned. */
  WT_ASSERT_INT_EQ(weir_config_set(&c, "attention.kv_dtype", "bf16", err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_plugin_set_load_ex(&c, m, &s, err, sizeof err), WEIR_E_NOTSUP);
  CU_ASSERT_PTR_NULL(s.device);
  WT_ASSERT_STR_CONTAINS(err, "weir_attention_testattn.so");
  WT_ASSERT_STR_CONTAINS(err, "expected bf16");
  /* A drafter that is named must exist. */
  WT_ASSERT_INT_EQ(weir_config_set(&c, "attention.kv_dtype", "f16", err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_config_set(&c, "drafter.name", "ngram_missing", err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_plugin_set_load_ex(&c, m, &s, err, sizeof err), WEIR_E_NOTFOUND);
  WT_ASSERT_STR_CONTAINS(err, "no drafter plugin 'ngram_missing'");
out:
  weir_metrics_destroy(m);
  weir_config_free(&c);
}

static void test_env_path(void) {
  weir_config c;
  char err[1024];
  weir_plugin_set s;
  weir_config_defaults(&c);
  weir_config_set(&c, "attention.name", "testattn", err, sizeof err);
  weir_config_set(&c, "quant.name", "testquant", err, sizeof err);
  weir_config_set(&c, "sampler.name", "good", err, sizeof err);
  setenv("WEIR_PLUGIN_PATH", "/nonexistent/dir:" WT_BAD_PLUGIN_DIR, 1);
  WT_ASSERT_INT_EQ(weir_plugin_set_check(&c, &s, err, sizeof err), 0);
  if (s.sampler) WT_ASSERT_STR_CONTAINS(s.sampler->path, WT_BAD_PLUGIN_DIR);
  weir_plugin_set_unload(&s);
  weir_plugin_dirs d;
  WT_ASSERT_INT_EQ(weir_plugin_dirs_get(&c, &d), 0);
  CU_ASSERT(d.num >= 3);
  if (d.num >= 3) {
    WT_ASSERT_STR_CONTAINS(d.dirs[0], "/nonexistent/dir");
    WT_ASSERT_STR_CONTAINS(d.dirs[d.num - 1], "lib/weir/plugins");
  }
  weir_plugin_dirs_free(&d);
  unsetenv("WEIR_PLUGIN_PATH");
  weir_config_free(&c);
}

static void test_scan(void) {
  weir_plugin_found *f = NULL;
  int n = 0;
  WT_ASSERT_INT_EQ(weir_plugin_scan(&g_dirs, &f, &n), 0);
  int good = 0, badmajor = 0, kindlie = 0;
  for (int i = 0; i < n; i++) {
    if (strstr(f[i].path, "weir_sampler_good.so")) good = f[i].desc && !f[i].error;
    if (strstr(f[i].path, "weir_sampler_badmajor.so"))
      badmajor = !f[i].desc && f[i].error && strstr(f[i].error, "ABI 2.0");
    if (strstr(f[i].path, "weir_attention_kindlie.so"))
      kindlie = f[i].error && strstr(f[i].error, "file name says otherwise");
  }
  WT_ASSERT_INT_EQ(good, 1);
  WT_ASSERT_INT_EQ(badmajor, 1);
  WT_ASSERT_INT_EQ(kindlie, 1);
  weir_plugin_scan_free(f, n);

  /* A file whose declared name differs from its file name, and the same file name in two
   * directories: both listed with the reason. */
  char *src = wt_strf("%s/weir_sampler_good.so", WT_BAD_PLUGIN_DIR);
  char *a = wt_mkdtemp(), *b = wt_mkdtemp();
  free(copy_to(src, a, "weir_sampler_good.so"));
  free(copy_to(src, b, "weir_sampler_good.so"));
  free(copy_to(src, b, "weir_sampler_renamed.so"));
  char *list[2] = {a, b};
  weir_plugin_dirs two = {list, 2};
  WT_ASSERT_INT_EQ(weir_plugin_scan(&two, &f, &n), 0);
  WT_ASSERT_INT_EQ(n, 3);
  int first_ok = 0, dup = 0, renamed = 0;
  for (int i = 0; i < n; i++) {
    if (!strncmp(f[i].path, a, strlen(a))) first_ok = !f[i].error;
    else if (strstr(f[i].path, "weir_sampler_good.so"))
      dup = f[i].error && strstr(f[i].error, "duplicate of") && strstr(f[i].error, a);
    else if (strstr(f[i].path, "weir_sampler_renamed.so"))
      renamed = f[i].error && strstr(f[i].error, "declares the name 'good'");
  }
  WT_ASSERT_INT_EQ(first_ok, 1);
  WT_ASSERT_INT_EQ(dup, 1);
  WT_ASSERT_INT_EQ(renamed, 1);
  weir_plugin_scan_free(f, n);
  wt_rmtree(a);
  wt_rmtree(b);
  free(a);
  free(b);
  free(src);
}

static void test_cli(void) {
  char *out = NULL;
  char *argv[] = {WT_WEIR, "plugins", "--plugin-dir", WT_BAD_PLUGIN_DIR, NULL};
  WT_ASSERT_INT_EQ(wt_run(argv, &out, 20000), 0);
  WT_ASSERT_STR_CONTAINS(out, "sampler good 1.2.3");
  WT_ASSERT_STR_CONTAINS(out, "devices: cpu, cuda");
  WT_ASSERT_STR_CONTAINS(out, "bias_token");
  WT_ASSERT_STR_CONTAINS(out, "attention testattn 0.0.1");
  WT_ASSERT_STR_CONTAINS(out, "dtypes:  f32, f16");
  WT_ASSERT_STR_CONTAINS(out, "not usable");
  WT_ASSERT_STR_CONTAINS(out, "weir_sampler_badmajor.so: built for plugin ABI 2.0");
  free(out);
  char *help[] = {WT_WEIR, "plugins", "--plugin-dir", WT_BAD_PLUGIN_DIR, "--help", "sampler/good", NULL};
  WT_ASSERT_INT_EQ(wt_run(help, &out, 20000), 0);
  WT_ASSERT_STR_CONTAINS(out, "argmax, argmin");
  WT_ASSERT_STR_CONTAINS(out, "[-100, 100]");
  WT_ASSERT_STR_CONTAINS(out, "added to bias_token's logit");
  free(out);
  char *missing[] = {WT_WEIR, "plugins", "--plugin-dir", WT_BAD_PLUGIN_DIR, "--help", "nosuch", NULL};
  WT_ASSERT_INT_EQ(wt_run(missing, &out, 20000), 1);
  WT_ASSERT_STR_CONTAINS(out, "no plugin named 'nosuch'");
  free(out);
}

/* The shipped CPU plugins, when this build has them: the whole default set loads, checks its
 * options and samples greedily. Skipped cleanly when they were not built. */
static void test_real_plugins(void) {
  char *path = wt_strf("%s/weir_sampler_default.so", WT_PLUGIN_DIR);
  if (access(path, R_OK) != 0) {
    fprintf(stderr, "\n  (skipped: %s not built)\n", path);
    free(path);
    return;
  }
  free(path);
  weir_config c;
  char err[1024];
  weir_plugin_set s;
  weir_config_defaults(&c);
  weir_config_set(&c, "plugins.dirs", "[\"" WT_PLUGIN_DIR "\"]", err, sizeof err);
  weir_config_set(&c, "device.threads", "2", err, sizeof err);
  int rc = weir_plugin_set_load_ex(&c, NULL, &s, err, sizeof err);
  WT_ASSERT_INT_EQ(rc, 0);
  if (rc != 0) {
    fprintf(stderr, "%s\n", err);
  } else {
    weir_sampling_params sp = {.struct_size = sizeof sp, .temperature = 0, .top_p = 1,
                               .repetition_penalty = 1, .num_logprobs = -1};
    uint64_t rng[4] = {1, 2, 3, 4};
    weir_sampling_row row = {.params = &sp, .rng_state = rng};
    float logits[6] = {0.5f, -1, 4, 3.9f, 0, 1};
    weir_sample_result r;
    WT_ASSERT_INT_EQ(((const weir_sampler_ops *)s.sampler->ops)->sample(s.sampler->self, &row, 1,
                                                                        logits, 6, &r), 0);
    WT_ASSERT_INT_EQ(r.token, 2);
  }
  weir_plugin_set_unload(&s);
  weir_config_free(&c);
}

/* Loads a shipped plugin from the build's plugin directory; WEIR_OK or the loader's status
 * with its message in err. */
static int load_shipped(weir_plugin_kind kind, const char *name, const char *toml,
                        weir_plugin **out, char *err, size_t errlen) {
  static char *dir_list[1] = {WT_PLUGIN_DIR};
  weir_plugin_dirs dirs = {.dirs = dir_list, .num = 1};
  weir_toml_node *t = parse_table(toml);
  weir_plugin_request req = {.kind = kind, .name = name, .dirs = &dirs, .table = t,
                             .section = weir_plugin_kind_name(kind), .device_name = "cpu"};
  err[0] = 0;
  int rc = weir_plugin_load(&req, out, err, errlen);
  weir_toml_free(t);
  return rc;
}

/* The shipped ngram drafter: it continues the latest earlier match, and where that match
 * runs into the history's end (the text repeats with a short period: the loop a small model
 * falls into) it keeps repeating the period for all k drafts, not only the p tokens the
 * history holds past the match (it once stopped there: 3 drafts a step in a 3-token loop
 * however long k was). It asks for 16 drafts when the configuration leaves the length to it
 * (ABI 1.8). */
static void test_ngram_drafts(void) {
  char *path = wt_strf("%s/weir_drafter_ngram.so", WT_PLUGIN_DIR);
  int have = access(path, R_OK) == 0;
  free(path);
  if (!have) {
    fprintf(stderr, "\n  (skipped: the shipped plugins were not built)\n");
    return;
  }
  weir_plugin *p = NULL;
  char err[2048];
  WT_ASSERT_INT_EQ(load_shipped(WEIR_PLUGIN_DRAFTER, "ngram", NULL, &p, err, sizeof err),
                   WEIR_OK);
  if (!p) return;
  const weir_drafter_ops *d = p->ops;
  CU_ASSERT(WEIR_HAS_FIELD(d, weir_drafter_ops, num_tokens_default));
  WT_ASSERT_INT_EQ(d->num_tokens_default, 16);
  /* A 3-token loop: "7 8 9" four times; the last 3 tokens match 3 back. */
  const int32_t loop[] = {1, 2, 7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9};
  /* A copy: the history's last 3 tokens (5 6 4) occur earlier, with 4 tokens after them. */
  const int32_t copy[] = {4, 5, 6, 4, 7, 3, 2, 5, 6, 4};
  weir_draft_seq seqs[2] = {{.seq_id = 1, .tokens = loop, .num_tokens = 14},
                            {.seq_id = 2, .tokens = copy, .num_tokens = 10}};
  int32_t drafts[2 * 8], counts[2] = {0};
  float probs[2 * 8];
  WT_ASSERT_INT_EQ(d->propose(p->self, seqs, 2, 8, drafts, counts, probs), WEIR_OK);
  WT_ASSERT_INT_EQ(counts[0], 8);
  const int32_t want0[8] = {7, 8, 9, 7, 8, 9, 7, 8};
  for (int j = 0; j < 8; j++) {
    WT_ASSERT_INT_EQ(drafts[j], want0[j]);
    CU_ASSERT(probs[j] == 1.0f);
  }
  /* The copy's continuation (7 3 2 5 6 4) then the period again from its start. */
  WT_ASSERT_INT_EQ(counts[1], 8);
  const int32_t want1[8] = {7, 3, 2, 5, 6, 4, 7, 3};
  for (int j = 0; j < 8; j++) WT_ASSERT_INT_EQ(drafts[8 + j], want1[j]);
  /* No earlier match: no drafts. */
  const int32_t fresh[] = {1, 2, 3, 4};
  seqs[0] = (weir_draft_seq){.seq_id = 3, .tokens = fresh, .num_tokens = 4};
  WT_ASSERT_INT_EQ(d->propose(p->self, seqs, 1, 8, drafts, counts, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(counts[0], 0);
  weir_plugin_unload(p);
}

/* The shipped plugins say why they fail (host->set_error), and the user reads it: in the
 * loader's refusal for a bad option combination, and after a failing pack. */
static void test_real_plugin_errors(void) {
  char *path = wt_strf("%s/weir_quant_int8.so", WT_PLUGIN_DIR);
  int have = access(path, R_OK) == 0;
  free(path);
  if (!have) {
    fprintf(stderr, "\n  (skipped: the shipped plugins were not built)\n");
    return;
  }
  weir_plugin *p = NULL;
  char err[2048], why[512];
  /* 48 is in the declared range [0, 128] but no group size the kernels run. */
  WT_ASSERT_INT_EQ(load_shipped(WEIR_PLUGIN_QUANT, "int8", "group_size = 48\n", &p, err,
                                sizeof err), WEIR_E_PLUGIN);
  CU_ASSERT_PTR_NULL(p);
  WT_ASSERT_STR_CONTAINS(err, "weir_quant_int8.so: quant plugin 'int8' failed to initialise");
  WT_ASSERT_STR_CONTAINS(err, "int8: group_size must be 0, 32, 64 or 128, not 48");
  WT_ASSERT_STR_CONTAINS(err, "invalid argument");
  WT_ASSERT_INT_EQ(load_shipped(WEIR_PLUGIN_QUANT, "awq_int4", "group_size = 96\n", &p, err,
                                sizeof err), WEIR_E_PLUGIN);
  WT_ASSERT_STR_CONTAINS(err, "awq_int4: group_size must be 32, 64 or 128, not 96");
  WT_ASSERT_INT_EQ(load_shipped(WEIR_PLUGIN_DRAFTER, "ngram", "min_ngram = 4\nmax_ngram = 2\n",
                                &p, err, sizeof err), WEIR_E_PLUGIN);
  WT_ASSERT_STR_CONTAINS(err, "min_ngram (4) is larger than max_ngram (2)");
  WT_ASSERT_INT_EQ(load_shipped(WEIR_PLUGIN_DRAFTER, "draft_model", NULL, &p, err, sizeof err),
                   WEIR_E_PLUGIN);
  WT_ASSERT_STR_CONTAINS(err, "option \"model\" is required");
  /* A pack that fails says why: a dtype the CPU fp16 scheme cannot read, a 3-D tensor. */
  WT_ASSERT_INT_EQ(load_shipped(WEIR_PLUGIN_QUANT, "fp16", NULL, &p, err, sizeof err), WEIR_OK);
  if (!p) {
    fprintf(stderr, "\n%s\n", err);
    return;
  }
  const weir_quant_ops *q = p->ops;
  uint8_t data[4096] = {0};
  weir_tensor t = {.data = data, .dtype = WEIR_DTYPE_Q5_0, .ndim = 2, .ne = {32, 4, 1, 1}};
  weir_quant_pack_args a = {.struct_size = sizeof a, .src = &t, .name = "blk.0.attn_q.weight"};
  void *w = NULL;
  WT_ASSERT_INT_EQ(q->pack(p->self, &a, &w), WEIR_E_NOTSUP);
  CU_ASSERT_PTR_NULL(w);
  WT_ASSERT_INT_EQ(weir_plugin_take_error(p, why, sizeof why), 1);
  WT_ASSERT_STR_CONTAINS(why, "fp16: tensor blk.0.attn_q.weight has unsupported dtype q5_0");
  weir_tensor t3 = {.data = data, .dtype = WEIR_DTYPE_F32, .ndim = 3, .ne = {8, 4, 2, 1}};
  a.src = &t3;
  WT_ASSERT_INT_EQ(q->pack(p->self, &a, &w), WEIR_E_NOTSUP);
  WT_ASSERT_INT_EQ(weir_plugin_take_error(p, why, sizeof why), 1);
  WT_ASSERT_STR_CONTAINS(why, "fp16: tensor blk.0.attn_q.weight is not a matrix (3 dims)");
  /* A good pack leaves no message behind. */
  weir_tensor t2 = {.data = data, .dtype = WEIR_DTYPE_F32, .ndim = 2, .ne = {8, 4, 1, 1}};
  a.src = &t2;
  WT_ASSERT_INT_EQ(q->pack(p->self, &a, &w), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_plugin_take_error(p, why, sizeof why), 0);
  if (w) q->release(p->self, w);
  weir_plugin_unload(p);
  /* What a user sees: `weir generate` with the bad combination prints the plugin's reason. */
  char *model = wt_strf("%s/models/kjv-target.gguf", WT_SOURCE_DIR);
  char *argv[] = {WT_WEIR, "generate", "-m", model, "--plugin-dir", WT_PLUGIN_DIR, "--quant",
                  "int8", "--set", "quant.group_size=48", "--prompt", "x", "-n", "1", NULL};
  char *out = NULL;
  if (access(model, R_OK) == 0) {
    CU_ASSERT(wt_run(argv, &out, 60000) != 0);
    WT_ASSERT_STR_CONTAINS(out, "quant plugin 'int8' failed to initialise: int8: group_size "
                                "must be 0, 32, 64 or 128, not 48");
    free(out);
  }
  free(model);
}

int main(void) {
  unsetenv("WEIR_PLUGIN_PATH");
  g_dirs.dirs = g_dir_list;
  g_dirs.num = 1;
  static const wt_test tests[] = {
      {"a good plugin loads, defaults filled, memory accounted", test_good_sampler},
      {"options from the table reach init", test_options_reach_init},
      {"option errors: type, range, choice, unknown key", test_option_errors},
      {"ABI refusals: major, minor, signature, size, entry", test_abi_refusals},
      {"callback refusals: init, ops, struct_size, init failure, score", test_callback_refusals},
      {"devices by name (ABI 1.5)", test_device_names},
      {"a plugin built against ABI 1.0 loads, missing fields NULL", test_older_plugin},
      {"options by name: table order does not matter, undeclared key fails",
       test_options_by_name},
      {"set_error: the host takes the message once", test_take_error},
      {"build variants: the best score that can run", test_variants},
      {"kind, device and dtype refusals", test_kind_device_dtype},
      {"files: not found, not loadable, name, device variant, duplicate, path",
       test_files},
      {"a whole set from a config: host services", test_set_load},
      {"WEIR_PLUGIN_PATH and the search order", test_env_path},
      {"scan lists good and broken files", test_scan},
      {"weir plugins and --help NAME", test_cli},
      {"the shipped CPU plugins load and sample", test_real_plugins},
      {"the shipped plugins' failures carry their message", test_real_plugin_errors},
      {"the ngram drafter repeats a period and asks for 16 drafts", test_ngram_drafts},
      {NULL, NULL}};
  return wt_run_suite("loader", tests);
}
