/* The command line of every subcommand through the real binary: abbreviated long options are
 * refused with the options they could mean (`weir bench --requests 24` used to be taken as
 * --requests-out), every subcommand answers --version, values are checked, the configuration
 * flags named as vLLM and llama-server name them (-m/--model, --served-model-name repeated,
 * --max-model-len and its alias --ctx-size, --api-key) reach the configuration, and
 * `weir serve MODEL.gguf` serves the positional model under its served names. The
 * weir_opt parser itself is exercised in-process for the ordering rules. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "hclient.h"
#include "testutil.h"
#include "util/opt.h"

static char *g_dir;

/* Runs `weir ARGS...` and returns its exit status; *out holds stdout + stderr. */
static int weir(char **out, const char *a1, ...) {
  char *argv[32];
  int n = 0;
  argv[n++] = WT_WEIR;
  va_list ap;
  va_start(ap, a1);
  for (const char *a = a1; a && n < 31; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  return wt_run(argv, out, 60000);
}

static void test_no_abbreviations(void) {
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "bench", "--requests", "24", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "weir bench: unknown option '--requests'");
  WT_ASSERT_STR_CONTAINS(out, "did you mean --requests-out?");
  WT_ASSERT_STR_CONTAINS(out, "options are not abbreviated");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "serve", "--mod", "x.gguf", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "unknown option '--mod' (did you mean --model?");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "generate", "--temp", "0.5", "--prompt", "x", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "'--temp' (did you mean --temperature?");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", "--lay", "2", "--out", "/dev/null", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "did you mean --layers?");
  free(out);
  /* --port=9 with the = form is as exact as the two-argument form; a prefix with = is not. */
  WT_ASSERT_INT_EQ(weir(&out, "plugins", "--plugin-d=/nonexistent", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "unknown option '--plugin-d'");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "serve", "--nonsense", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "unknown option '--nonsense' (see weir serve --help)");
  free(out);
}

static void test_version_everywhere(void) {
  static const char *cmds[] = {"serve", "generate", "plugins", "config", "mkmodel", "bench"};
  char want[64];
  snprintf(want, sizeof want, "weir %s (plugin ABI %d.%d)", WEIR_VERSION, WEIR_ABI_MAJOR,
           WEIR_ABI_MINOR);
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char *out = NULL;
    WT_ASSERT_INT_EQ(weir(&out, cmds[i], "--version", NULL), 0);
    WT_ASSERT_STR_CONTAINS(out, want);
    free(out);
  }
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "--version", NULL), 0);
  WT_ASSERT_STR_CONTAINS(out, want);
  free(out);
}

static void test_values_checked(void) {
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "generate", "--prompt", "x", "--max-tokens", "ten", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "--max-tokens: 'ten' is not an integer");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "generate", "--prompt", "x", "--temperature", "0.5x", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "--temperature: '0.5x' is not a number");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "generate", "--prompt", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "--prompt needs a value");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "generate", "--chat=yes", "--prompt", "x", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "option '--chat' takes no value");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "serve", "a.gguf", "b.gguf", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "unexpected argument 'b.gguf'");
  free(out);
}

/* The configuration flags as `weir config check` prints their effect. */
static void test_config_flags(void) {
  char *file = wt_strf("%s/c.toml", g_dir);
  const char *toml = "[model]\npath = \"from-file.gguf\"\n";
  wt_write_file(file, toml, strlen(toml));
  char *out = NULL;
  int rc = weir(&out, "config", "check", file, "-m", "flag.gguf", "--served-model-name", "first",
                "--served-model-name", "org/second", "--ctx-size", "777", "--api-key", "k1",
                "--plugin-dir", WT_PLUGIN_DIR, NULL);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "path = \"flag.gguf\"");
  WT_ASSERT_STR_CONTAINS(out, "served_model_name = [\"first\", \"org/second\"]");
  WT_ASSERT_STR_CONTAINS(out, "max_model_len = 777");
  WT_ASSERT_STR_CONTAINS(out, "api_key = \"<redacted>\"");
  free(out);
  /* --max-model-len is the same key; the last flag wins, in order. */
  rc = weir(&out, "config", "check", file, "--ctx-size", "10", "--max-model-len=20",
            "--plugin-dir", WT_PLUGIN_DIR, NULL);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "max_model_len = 20");
  WT_ASSERT_STR_CONTAINS(out, "path = \"from-file.gguf\"");
  free(out);
  rc = weir(&out, "config", "check", file, "--max-model-len", "-5", NULL);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "--max-model-len: model.max_model_len: -5 is out of range");
  free(out);
  free(file);
}

/* In-process: arguments in order, options and positionals mixed, "--" ends the options,
 * short options clustered, = values. */
static void test_parser_order(void) {
  static const struct option k[] = {{"alpha", required_argument, 0, 'a'},
                                    {"beta", no_argument, 0, 'b'},
                                    {"alphabet", no_argument, 0, 'z'},
                                    {0, 0, 0, 0}};
  const struct option *tables[] = {k};
  char *argv[] = {"t", "p1", "--alpha", "1", "-b", "p2", "--alpha=2", "-ba3", "--alphabet",
                  "--", "--beta", "-x", NULL};
  weir_opt o;
  WT_ASSERT_INT_EQ(weir_opt_init(&o, "t", 12, argv, "a:b", tables, 1), 0);
  char seen[256] = "";
  int c;
  while ((c = weir_opt_next(&o)) != WEIR_OPT_END) {
    char one[64];
    if (c == WEIR_OPT_ERROR) snprintf(one, sizeof one, "E ");
    else if (c == WEIR_OPT_POSITIONAL) snprintf(one, sizeof one, "P:%s ", o.arg);
    else snprintf(one, sizeof one, "%c%s%s ", c, o.arg ? "=" : "", o.arg ? o.arg : "");
    strcat(seen, one);
  }
  weir_opt_fini(&o);
  CU_ASSERT_STRING_EQUAL(seen, "P:p1 a=1 b P:p2 a=2 b a=3 z P:--beta P:-x ");
  if (strcmp(seen, "P:p1 a=1 b P:p2 a=2 b a=3 z P:--beta P:-x "))
    fprintf(stderr, "\n  got: %s\n", seen);
  /* A second parser in the same process starts afresh. */
  char *argv2[] = {"t", "--alph", NULL};
  WT_ASSERT_INT_EQ(weir_opt_init(&o, "t", 2, argv2, "a:b", tables, 1), 0);
  WT_ASSERT_INT_EQ(weir_opt_next(&o), WEIR_OPT_ERROR);
  WT_ASSERT_STR_CONTAINS(o.err, "did you mean --alpha, --alphabet?");
  weir_opt_fini(&o);
}

/* `weir serve MODEL.gguf` with two served names: the first is reported and labels the
 * metrics, the engine keeps both. */
static void test_serve_positional(void) {
  char *model = wt_strf("%s/pos.gguf", g_dir);
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", "--preset", "tiny", "--out", model, NULL), 0);
  free(out);
  hc_server s = {0};
  s.port = wt_free_port();
  char port[16];
  snprintf(port, sizeof port, "%d", s.port);
  const char *args[] = {model, "--port", port, "--host", "127.0.0.1", "--threads", "1",
                        "--served-model-name", "pos-first", "--served-model-name", "pos-alias",
                        "--plugin-dir", WT_PLUGIN_DIR, "--set", "cache.memory_bytes=16MiB",
                        NULL};
  char *log = wt_strf("%s/serve.log", g_dir);
  int rc = hc_server_start(&s, args, log, 30000);
  if (rc != 0) {
    char *text = wt_read_file(log, NULL);
    fprintf(stderr, "\n  server did not start; log:\n%s\n", text ? text : "");
    free(text);
  }
  WT_ASSERT_INT_EQ(rc, 0);
  if (rc == 0) {
    hc_response r;
    WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/models", NULL, NULL, &r), 0);
    WT_ASSERT_STR_CONTAINS(r.body, "\"id\":\"pos-first\"");
    hc_response_free(&r);
    WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/metrics", NULL, NULL, &r), 0);
    WT_ASSERT_STR_CONTAINS(r.body, "model_name=\"pos-first\"");
    hc_response_free(&r);
    WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
  }
  free(log);
  free(model);
}

/* WEIR_STEP_TRACE (docs/engine.md): `weir generate` writes the header and one line per step,
 * fifteen fields each (the last four: the step's CPU time by phase); the prompt chunks' tokens add up to the prompt, the tokens delivered to
 * what was generated, and no step's CPU time exceeds its wall time. A path that cannot be
 * opened is a warning, not a failure. */
static void test_step_trace(void) {
  char *model = wt_strf("%s/trace.gguf", g_dir), *trace = wt_strf("%s/steps.txt", g_dir);
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", "--preset", "tiny", "--out", model, NULL), 0);
  free(out);
  setenv("WEIR_STEP_TRACE", trace, 1);
  int rc = weir(&out, "generate", "-m", model, "--plugin-dir", WT_PLUGIN_DIR, "--threads", "1",
                "--random-prompt", "40", "-n", "9", "--ignore-eos", "--set",
                "cache.memory_bytes=16MiB", NULL);
  WT_ASSERT_INT_EQ(rc, 0);
  free(out);
  char *text = wt_read_file(trace, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT(strncmp(text, "# start_s wall_us cpu_us seqs tokens prefill_tokens", 51) == 0);
  /* one step with the whole prompt and the first token, then eight one-token decode steps */
  long steps = 0, delivered = 0;
  double last = 0;
  for (char *line = strchr(text, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
    double t, wall, cpu, ph[4];
    int seqs, tokens, pre, k, pree, ctx;
    long long drafts, outn;
    int n = sscanf(line + 1, "%lf %lf %lf %d %d %d %d %lld %lld %d %d %lf %lf %lf %lf", &t, &wall,
                   &cpu, &seqs, &tokens, &pre, &k, &drafts, &outn, &pree, &ctx, &ph[0], &ph[1],
                   &ph[2], &ph[3]);
    WT_ASSERT_INT_EQ(n, 15);
    if (n != 15) break;
    /* the phases are the step's CPU time, split */
    CU_ASSERT(ph[0] >= 0 && ph[1] >= 0 && ph[2] > 0 && ph[3] >= 0);
    CU_ASSERT(fabs(ph[0] + ph[1] + ph[2] + ph[3] - cpu) <= 0.5);
    const int first = steps == 0;
    WT_ASSERT_INT_EQ(tokens, first ? 40 : 1);
    WT_ASSERT_INT_EQ(pre, first ? 40 : 0);
    WT_ASSERT_INT_EQ(ctx, 40 + (int)steps);
    CU_ASSERT(seqs == 1 && k == 0 && drafts == 0 && outn == 1 && pree == 0);
    CU_ASSERT(t > last && wall > 0 && cpu >= 0 && cpu <= wall * 1.01 + 50);
    last = t;
    steps++;
    delivered += outn;
  }
  WT_ASSERT_INT_EQ(steps, 9);
  WT_ASSERT_INT_EQ(delivered, 9);
  free(text);
  setenv("WEIR_STEP_TRACE", "/nonexistent-dir/steps.txt", 1);
  rc = weir(&out, "generate", "-m", model, "--plugin-dir", WT_PLUGIN_DIR, "--threads", "1",
            "--random-prompt", "8", "-n", "2", NULL);
  unsetenv("WEIR_STEP_TRACE");
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "WEIR_STEP_TRACE: cannot open /nonexistent-dir/steps.txt");
  free(out);
  free(trace);
  free(model);
}

/* `weir mkmodel --weights-from`: the values come from the source file, not the seed. With the
 * source's own flags but another seed the f32 file is the source byte for byte, and a q6_k
 * file is the one the source's seed gives (weir's quantizer on the same values); a source
 * made with other flags, or not f32, is refused by name. */
static void test_mkmodel_weights_from(void) {
  char *a = wt_strf("%s/wf-a.gguf", g_dir), *b = wt_strf("%s/wf-b.gguf", g_dir);
  char *c = wt_strf("%s/wf-c.gguf", g_dir), *d = wt_strf("%s/wf-d.gguf", g_dir);
  char *out = NULL;
#define WF_SHAPE "--arch", "qwen3", "--tokenizer", "llama", "--dim", "256", "--heads", "4", \
                 "--kv-heads", "2", "--head-dim", "64", "--ffn", "512", "--vocab", "512"
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "2", "--seed", "7", "--type",
                        "f32", "--out", a, NULL), 0);
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "2", "--seed", "8", "--type",
                        "f32", "--weights-from", a, "--out", b, NULL), 0);
  free(out);
  size_t na = 0, nb = 0;
  char *da = wt_read_file(a, &na), *db = wt_read_file(b, &nb);
  CU_ASSERT(da && db && na == nb && na > 1000000 && memcmp(da, db, na) == 0);
  free(db);
  /* (and seed 8 alone gives other values: the equality above is the flag's doing) */
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "2", "--seed", "8", "--type",
                        "f32", "--out", b, NULL), 0);
  free(out);
  db = wt_read_file(b, &nb);
  CU_ASSERT(db && nb == na && memcmp(da, db, na) != 0);
  free(db);
  free(da);
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "2", "--seed", "8", "--type",
                        "q6_k", "--weights-from", a, "--out", c, NULL), 0);
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "2", "--seed", "7", "--type",
                        "q6_k", "--out", d, NULL), 0);
  free(out);
  size_t nc = 0, nd = 0;
  char *dc = wt_read_file(c, &nc), *dd = wt_read_file(d, &nd);
  CU_ASSERT(dc && dd && nc == nd && nc < na && memcmp(dc, dd, nc) == 0);
  free(dc);
  free(dd);
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "3", "--type", "f32",
                        "--weights-from", a, "--out", b, NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "has 25 tensors; these flags make 36");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "2", "--type", "f32",
                        "--weights-from", c, "--out", b, NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "tensor token_embd.weight is not f32");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "mkmodel", WF_SHAPE, "--layers", "2", "--type", "f32",
                        "--weights-from", "/nonexistent.gguf", "--out", b, NULL), 1);
  WT_ASSERT_STR_CONTAINS(out, "/nonexistent.gguf");
  free(out);
#undef WF_SHAPE
  free(a);
  free(b);
  free(c);
  free(d);
}

int main(void) {
  g_dir = wt_mkdtemp();
  static const wt_test tests[] = {
      {"abbreviated long options are refused", test_no_abbreviations},
      {"--version on every subcommand", test_version_everywhere},
      {"mkmodel --weights-from", test_mkmodel_weights_from},
      {"option values are checked", test_values_checked},
      {"configuration flags: -m, --served-model-name, --ctx-size, --api-key", test_config_flags},
      {"the parser: order, positionals, --, clusters", test_parser_order},
      {"weir serve MODEL.gguf", test_serve_positional},
      {"WEIR_STEP_TRACE: one line per step", test_step_trace},
      {NULL, NULL}};
  int rc = wt_run_suite("cli", tests);
  wt_rmtree(g_dir);
  free(g_dir);
  return rc;
}
