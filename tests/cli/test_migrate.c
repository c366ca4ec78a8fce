/* What operators coming from vLLM and llama-server type, through the real binary and the real
 * server (docs/deployment.md, "Migrating from vLLM / llama-server"): their flags honoured or
 * refused with the weir equivalent, "did you mean" for misspelt long options, llama.cpp's
 * single-dash -np / -ngl, --served-model-name with several names listed by /v1/models, the
 * model given twice refused, --max-model-len beyond the trained context refused unless
 * allowed, --gpu-memory-utilization sizing the KV cache, --chat-template FILE rendering, and
 * the first-run messages (serve --help, a Hugging Face directory, a safetensors file, a
 * short text file). */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hclient.h"
#include "testutil.h"

static char *g_dir, *g_model, *g_empty;

/* Runs `weir ARGS...` and returns its exit status; *out holds stdout + stderr. */
static int weir(char **out, const char *a1, ...) {
  char *argv[40];
  int n = 0;
  argv[n++] = WT_WEIR;
  va_list ap;
  va_start(ap, a1);
  for (const char *a = a1; a && n < 39; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  return wt_run(argv, out, 60000);
}

/* `weir config check` with the flags: the effective configuration it prints, exit status. */
#define CHECK(out, ...) weir(out, "config", "check", g_empty, "--plugin-dir", WT_PLUGIN_DIR, \
                             __VA_ARGS__, NULL)

static void test_did_you_mean(void) {
  static const struct {
    const char *typed, *want;
  } cases[] = {
      {"--max-model-length", "did you mean --max-model-len?"},
      {"--served_model_name", "did you mean --served-model-name?"},
      {"--prot", "did you mean --port?"},
      {"--gpu-memory-utilisation", "did you mean --gpu-memory-utilization?"},
      {"--max_num_seqs", "did you mean --max-num-seqs?"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    WT_ASSERT_INT_EQ(weir(&out, "serve", cases[i].typed, "1", NULL), 2);
    WT_ASSERT_STR_CONTAINS(out, cases[i].want);
    free(out);
  }
  /* The commands that check their options before a getopt loop suggest too. */
  char *o2 = NULL;
  WT_ASSERT_INT_EQ(weir(&o2, "convert", "--inn", "d", "--out", "x.gguf", NULL), 2);
  WT_ASSERT_STR_CONTAINS(o2, "unknown option '--inn' (did you mean --in?");
  free(o2);
  /* Nothing near: no suggestion. */
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "serve", "--zzzzzzzz", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "unknown option '--zzzzzzzz' (see weir serve --help)");
  free(out);
}

/* llama-server's single-dash multi-letter options and -t. */
static void test_llama_short_options(void) {
  char *out = NULL;
  WT_ASSERT_INT_EQ(CHECK(&out, "-np", "4", "-t", "3", "-ngl", "0"), 0);
  WT_ASSERT_STR_CONTAINS(out, "max_num_seqs = 4");
  WT_ASSERT_STR_CONTAINS(out, "threads = 3");
  WT_ASSERT_STR_CONTAINS(out, "[device]\nname = \"cpu\"");
  free(out);
  WT_ASSERT_INT_EQ(CHECK(&out, "--parallel", "5"), 0);
  WT_ASSERT_STR_CONTAINS(out, "max_num_seqs = 5");
  free(out);
  /* A command without -np names the whole option, never "-n". */
  WT_ASSERT_INT_EQ(weir(&out, "bench", "-np", "4", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "unknown option '-np'");
  CU_ASSERT_PTR_NULL(strstr(out, "'-n'"));
  free(out);
  /* The value of an option is never rewritten: --api-key -np stays a key. */
  WT_ASSERT_INT_EQ(CHECK(&out, "--served-model-name", "-np"), 0);
  WT_ASSERT_STR_CONTAINS(out, "served_model_name = \"-np\"");
  free(out);
}

/* vLLM's flags: honoured, or refused naming what weir does instead. */
static void test_vllm_flags(void) {
  char *out = NULL;
  WT_ASSERT_INT_EQ(CHECK(&out, "--quantization", "int8", "--no-enable-prefix-caching",
                         "--gpu-memory-utilization", "0.5", "--kv-cache-dtype", "auto"), 0);
  WT_ASSERT_STR_CONTAINS(out, "[quant]\nname = \"int8\"");
  WT_ASSERT_STR_CONTAINS(out, "prefix_caching = false");
  WT_ASSERT_STR_CONTAINS(out, "gpu_memory_utilization = 0.5");
  WT_ASSERT_STR_CONTAINS(out, "kv_dtype = \"f16\"");
  free(out);
  WT_ASSERT_INT_EQ(CHECK(&out, "--no-enable-prefix-caching", "--enable-prefix-caching",
                         "--kv-cache-dtype", "int8", "--jinja", "--chat-template", "llama3"), 0);
  WT_ASSERT_STR_CONTAINS(out, "prefix_caching = true");
  WT_ASSERT_STR_CONTAINS(out, "kv_dtype = \"int8\"");
  WT_ASSERT_STR_CONTAINS(out, "chat_template = \"llama3\"");
  free(out);
  static const struct {
    const char *flag, *value, *want;
  } refused[] = {
      {"--quantization", "awq", "--quant awq_int4"},
      {"--quantization", "fp8", "--kv-dtype fp8"},
      {"--quantization", "gptq", "weir's are --quant fp16, int8, awq_int4 and gguf"},
      {"--tensor-parallel-size", "2", "one replica per GPU"},
      {"-tp", "2", "one replica per GPU"},
      {"--dtype", "half", "--quant fp16"},
      {"--swap-space", "4", "--gpu-memory-utilization"},
      {"--gpu-memory-utilization", "1.5", "not a fraction in (0, 1]"},
      {"--chat-template", "{{ messages }}", "write it to a file and pass --chat-template FILE"},
      {"--chat-template", "/nonexistent/t.jinja", "neither a built-in template"},
      {"-hf", "org/model", "weir downloads nothing"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    WT_ASSERT_INT_EQ(CHECK(&out, refused[i].flag, refused[i].value), 1);
    WT_ASSERT_STR_CONTAINS(out, refused[i].want);
    free(out);
  }
}

/* Starts `weir serve ARGS` on a free port; 0 when /health answered. */
static int start(hc_server *s, const char *name, const char *const *extra) {
  const char *args[40];
  int n = 0;
  char port[16];
  s->port = wt_free_port();
  snprintf(port, sizeof port, "%d", s->port);
  const char *base[] = {"--port", port, "--threads", "1", "--plugin-dir", WT_PLUGIN_DIR,
                        "--set", "cache.memory_bytes=16MiB"};
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) args[n++] = base[i];
  for (int i = 0; extra[i] && n < 39; i++) args[n++] = extra[i];
  args[n] = NULL;
  char *log = wt_strf("%s/%s.log", g_dir, name);
  int rc = hc_server_start(s, args, log, 30000);
  if (rc != 0) {
    char *text = wt_read_file(log, NULL);
    fprintf(stderr, "\n  server %s did not start; log:\n%s\n", name, text ? text : "");
    free(text);
  }
  free(log);
  return rc;
}

/* vLLM's --served-model-name a b: both names served, both listed by /v1/models. */
static void test_served_names(void) {
  hc_server s = {0};
  const char *extra[] = {g_model, "--served-model-name", "first", "org/second", NULL};
  if (start(&s, "names", extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/models", NULL, NULL, &r), 0);
  WT_ASSERT_STR_CONTAINS(r.body, "{\"id\":\"first\"");
  WT_ASSERT_STR_CONTAINS(r.body, "{\"id\":\"org/second\",\"root\":\"first\"");
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(s.port, "POST", "/v1/completions", NULL,
                              "{\"model\":\"org/second\",\"prompt\":\"a\",\"max_tokens\":1}", &r),
                   0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/models/org/second", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"id\":\"org/second\"");
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
  /* Names first, the model after them: the .gguf is the model, not a third name. */
  const char *extra2[] = {"--served-model-name", "x1", "x2", g_model, NULL};
  if (start(&s, "names2", extra2) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/models", NULL, NULL, &r), 0);
  WT_ASSERT_STR_CONTAINS(r.body, "{\"id\":\"x2\"");
  CU_ASSERT_PTR_NULL(strstr(r.body, ".gguf"));
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* The model given twice is refused, naming both; the same path twice is one model. */
static void test_model_twice(void) {
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "serve", g_model, "--model", "other.gguf", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "the model is given twice");
  WT_ASSERT_STR_CONTAINS(out, "other.gguf");
  free(out);
  WT_ASSERT_INT_EQ(weir(&out, "serve", "-m", "a.gguf", "b.gguf", NULL), 2);
  WT_ASSERT_STR_CONTAINS(out, "the model is given twice ('a.gguf' and 'b.gguf')");
  free(out);
}

/* models/kjv-target.gguf was trained on 512 tokens and declares no RoPE scaling. */
static void test_max_model_len_beyond_training(void) {
  char *out = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", wt_free_port());
  WT_ASSERT_INT_EQ(weir(&out, "serve", g_model, "--port", port, "--max-model-len", "1024",
                        "--plugin-dir", WT_PLUGIN_DIR, NULL), 1);
  WT_ASSERT_STR_CONTAINS(out, "max_model_len 1024 is beyond the 512 tokens");
  WT_ASSERT_STR_CONTAINS(out, "declares no RoPE scaling");
  WT_ASSERT_STR_CONTAINS(out, "--allow-long-max-model-len");
  free(out);
  /* Allowed explicitly: served, and /v1/models reports the longer context. */
  hc_server s = {0};
  const char *extra[] = {g_model, "--max-model-len", "1024", "--allow-long-max-model-len", NULL};
  if (start(&s, "long", extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/models", NULL, NULL, &r), 0);
  WT_ASSERT_STR_CONTAINS(r.body, "\"max_model_len\":1024");
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* The KV cache gets F x MemTotal minus the weights on the CPU device; the engine's start-up
 * line says how much it got. */
static void test_gpu_memory_utilization(void) {
  char *mi = wt_read_file("/proc/meminfo", NULL);
  const char *t = mi ? strstr(mi, "MemTotal:") : NULL;
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  double total = strtod(t + 9, NULL) * 1024.0;
  free(mi);
  struct stat st;
  CU_ASSERT_EQUAL_FATAL(stat(g_model, &st), 0);
  const double frac = 0.001;
  hc_server s = {0};
  const char *extra[] = {g_model, "--gpu-memory-utilization", "0.001", NULL};
  if (start(&s, "gmu", extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
  char *log = wt_strf("%s/gmu.log", g_dir), *text = wt_read_file(log, NULL);
  const char *k = text ? strstr(text, "KV cache ") : NULL;
  while (k && !strstr(k, "blocks of")) k = strstr(k + 1, "KV cache ");
  const char *p = k ? strstr(k, "tokens (") : NULL;
  CU_ASSERT_PTR_NOT_NULL(p);
  if (p) {
    double mib = strtod(p + 8, NULL);
    /* The weights are at most the file; the cache is rounded down to whole blocks. */
    double want = (frac * total - (double)st.st_size) / (1024.0 * 1024.0);
    fprintf(stderr, "\n  KV cache %.1f MiB, expected about %.1f MiB\n", mib, want);
    CU_ASSERT(mib > want - 1.0 && mib < want + 1.0);
  }
  free(text);
  free(log);
  /* A fraction smaller than the weights leaves nothing: refused with the numbers. */
  char *out = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", wt_free_port());
  WT_ASSERT_INT_EQ(weir(&out, "serve", g_model, "--port", port, "--gpu-memory-utilization",
                        "0.0000001", "--plugin-dir", WT_PLUGIN_DIR, NULL), 1);
  WT_ASSERT_STR_CONTAINS(out, "leaves nothing for the KV cache after");
  free(out);
}

/* vLLM's --chat-template FILE: the file's Jinja renders the chat (its raise_exception text
 * comes back verbatim); one that does not parse is refused at start. */
static void test_chat_template_file(void) {
  char *tpl = wt_strf("%s/t.jinja", g_dir);
  const char *jinja = "{% if messages[0].content == 'boom' %}"
                      "{{ raise_exception('the template from the file says no') }}{% endif %}"
                      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
  CU_ASSERT_EQUAL_FATAL(wt_write_file(tpl, jinja, strlen(jinja)), 0);
  hc_server s = {0};
  const char *extra[] = {g_model, "--chat-template", tpl, "--jinja", NULL};
  if (start(&s, "tpl", extra) == 0) {
    hc_response r;
    WT_ASSERT_INT_EQ(hc_request(s.port, "POST", "/v1/chat/completions", NULL,
                                "{\"messages\":[{\"role\":\"user\",\"content\":\"boom\"}],"
                                "\"max_tokens\":1}", &r), 0);
    WT_ASSERT_INT_EQ(r.status, 400);
    WT_ASSERT_STR_CONTAINS(r.body, "the template from the file says no");
    hc_response_free(&r);
    WT_ASSERT_INT_EQ(hc_request(s.port, "POST", "/v1/chat/completions", NULL,
                                "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                "\"max_tokens\":1}", &r), 0);
    WT_ASSERT_INT_EQ(r.status, 200);
    hc_response_free(&r);
    WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
  } else {
    CU_FAIL("server did not start");
  }
  const char *bad = "{% for m in messages %}{{ m.content }";
  CU_ASSERT_EQUAL_FATAL(wt_write_file(tpl, bad, strlen(bad)), 0);
  char *out = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", wt_free_port());
  WT_ASSERT_INT_EQ(weir(&out, "serve", g_model, "--port", port, "--chat-template", tpl,
                        "--plugin-dir", WT_PLUGIN_DIR, NULL), 1);
  WT_ASSERT_STR_CONTAINS(out, "does not parse");
  free(out);
  free(tpl);
}

/* -ngl N below the model's layers cannot be honoured (one device for the whole model). */
static void test_ngl_partial(void) {
  char *out = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", wt_free_port());
  WT_ASSERT_INT_EQ(weir(&out, "serve", g_model, "--port", port, "-ngl", "2", "--device", "cpu",
                        "--plugin-dir", WT_PLUGIN_DIR, NULL), 1);
  WT_ASSERT_STR_CONTAINS(out, "-ngl 2: weir runs all 6 layers");
  free(out);
}

/* First run: the help names the endpoints and the default address; what is not a GGUF says
 * what it is and how to get one. */
static void test_first_run(void) {
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir(&out, "serve", "--help", NULL), 0);
  WT_ASSERT_STR_CONTAINS(out, "http://127.0.0.1:8000");
  WT_ASSERT_STR_CONTAINS(out, "/v1/chat/completions");
  WT_ASSERT_STR_CONTAINS(out, "/health");
  WT_ASSERT_STR_CONTAINS(out, "/metrics");
  free(out);
  char *hf = wt_strf("%s/hf", g_dir), *cfg = wt_strf("%s/hf/config.json", g_dir);
  char *st = wt_strf("%s/hf/model.safetensors", g_dir), *txt = wt_strf("%s/notes.gguf", g_dir);
  CU_ASSERT_EQUAL_FATAL(mkdir(hf, 0700), 0);
  CU_ASSERT_EQUAL_FATAL(wt_write_file(cfg, "{}", 2), 0);
  CU_ASSERT_EQUAL_FATAL(wt_write_file(st, "\x02\0\0\0\0\0\0\0{}", 10), 0);
  CU_ASSERT_EQUAL_FATAL(wt_write_file(txt, "just some notes.\n", 18), 0);
  const struct {
    const char *path, *want;
  } cases[] = {
      {hf, "a Hugging Face model directory, not a GGUF file"},
      {st, "a safetensors file, not a GGUF file"},
      {txt, "not a GGUF file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char port[16];
    snprintf(port, sizeof port, "%d", wt_free_port());
    WT_ASSERT_INT_EQ(weir(&out, "serve", cases[i].path, "--port", port, "--plugin-dir",
                          WT_PLUGIN_DIR, NULL), 1);
    WT_ASSERT_STR_CONTAINS(out, cases[i].want);
    WT_ASSERT_STR_CONTAINS(out, "convert_hf_to_gguf.py");
    CU_ASSERT_PTR_NULL(strstr(out, "truncated"));
    free(out);
  }
  /* After --served-model-name a directory is still the model, not a further name. */
  char port[16];
  snprintf(port, sizeof port, "%d", wt_free_port());
  WT_ASSERT_INT_EQ(weir(&out, "serve", "--served-model-name", "a", hf, "--port", port,
                        "--plugin-dir", WT_PLUGIN_DIR, NULL), 1);
  WT_ASSERT_STR_CONTAINS(out, "a Hugging Face model directory, not a GGUF file");
  free(out);
  free(hf);
  free(cfg);
  free(st);
  free(txt);
}

int main(void) {
  g_dir = wt_mkdtemp();
  g_model = wt_strf("%s/models/kjv-target.gguf", WT_SOURCE_DIR);
  g_empty = wt_strf("%s/empty.toml", g_dir);
  wt_write_file(g_empty, "", 0);
  static const wt_test tests[] = {
      {"did you mean, for every long option", test_did_you_mean},
      {"llama-server's -np, -t, -ngl", test_llama_short_options},
      {"vLLM's flags honoured or refused with the weir equivalent", test_vllm_flags},
      {"--served-model-name a b: both listed and served", test_served_names},
      {"the model given twice is refused", test_model_twice},
      {"--max-model-len beyond the trained context", test_max_model_len_beyond_training},
      {"--gpu-memory-utilization sizes the KV cache", test_gpu_memory_utilization},
      {"--chat-template FILE", test_chat_template_file},
      {"-ngl below the model's layers", test_ngl_partial},
      {"first run: help, Hugging Face files, not a GGUF", test_first_run},
      {NULL, NULL}};
  int rc = wt_run_suite("cli_migrate", tests);
  wt_rmtree(g_dir);
  free(g_dir);
  free(g_model);
  free(g_empty);
  return rc;
}
