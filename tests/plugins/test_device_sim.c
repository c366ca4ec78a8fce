/* The open device list (ABI 1.5): a device plugin the core has never heard of, "sim"
 * (tests/plugins/device_sim.c, built against the SDK alone), is selected with
 * device.name = "sim" and runs the model through the real binary, with no core edit for
 * that name:
 *   - `weir plugins` lists it with the devices it declares by name;
 *   - `weir generate` on a mkmodel model runs on it (its trace shows every kind of operation
 *     called) with the CPU attention, quant and sampler plugins (it declares that plugins
 *     for "cpu" run on its memory), and gives the same greedy text as device cpu;
 *   - `weir config check` accepts it, and an unknown device is refused by the loader with the
 *     devices its search path provides, sim among them;
 *   - on "simalone", a device that runs no other device's plugins, the CPU plugins are
 *     refused with what they run on and what was asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char *g_dir, *g_model;

static char *run(int *rc, char *const argv[]) {
  char *out = NULL;
  *rc = wt_run(argv, &out, 120000);
  return out ? out : calloc(1, 1);
}

static int suite_init(void) {
  g_dir = wt_mkdtemp();
  g_model = wt_strf("%s/tiny.gguf", g_dir);
  int rc;
  char *mk[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--out", g_model, NULL};
  char *out = run(&rc, mk);
  if (rc) fprintf(stderr, "mkmodel failed:\n%s\n", out);
  free(out);
  return rc;
}

static int suite_cleanup(void) {
  wt_rmtree(g_dir);
  free(g_dir);
  free(g_model);
  return 0;
}

static void test_listed(void) {
  int rc;
  char *argv[] = {WT_WEIR, "plugins", "--plugin-dir", WT_SIM_PLUGIN_DIR, NULL};
  char *out = run(&rc, argv);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "device sim 1.0.0");
  WT_ASSERT_STR_CONTAINS(out, "devices: sim, cpu");
  free(out);
}

/* The generated text of `weir generate` (stdout before the figures), on a device. */
static char *generate(const char *device, const char *trace, int *rc) {
  char *dev = wt_strf("device.name=%s", device);
  char *tr = trace ? wt_strf("device.trace_file=%s", trace) : wt_strf("log.requests=false");
  char *argv[] = {WT_WEIR, "generate", "--model", g_model, "--plugin-dir", WT_SIM_PLUGIN_DIR,
                  "--set", dev, "--set", tr, "--set", "log.level=error", "--threads", "2",
                  "--prompt", "hello there", "-n", "12", "--ignore-eos", "--set",
                  "cache.memory_bytes=16777216", NULL};
  char *out = run(rc, argv);
  free(dev);
  free(tr);
  return out;
}

static long long trace_count(const char *trace, const char *op) {
  char *t = wt_read_file(trace, NULL);
  long long n = -1;
  char *key = wt_strf("%s ", op);
  for (char *line = t; line && *line;) {
    if (!strncmp(line, key, strlen(key))) n = atoll(line + strlen(key));
    char *nl = strchr(line, '\n');
    line = nl ? nl + 1 : NULL;
  }
  free(key);
  free(t);
  return n;
}

static void test_generate_on_sim(void) {
  char *trace = wt_strf("%s/trace.txt", g_dir);
  int rc_sim, rc_cpu;
  char *sim = generate("sim", trace, &rc_sim);
  char *cpu = generate("cpu", NULL, &rc_cpu);
  WT_ASSERT_INT_EQ(rc_sim, 0);
  WT_ASSERT_INT_EQ(rc_cpu, 0);
  WT_ASSERT_STR_CONTAINS(sim, "generated: 12 tokens");
  /* every kind of operation the graph gives the device ran on the simulated device (RoPE is
   * not one since ABI 1.7: the CPU attention plugin applies it in forward_rope; the sim device
   * has no add_rms_norm, so the separate add and rms_norm run, and the text below must still
   * equal the CPU device's, which runs the fused op) */
  const char *ops[] = {"alloc", "copy", "rms_norm", "swiglu", "add", "get_rows"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    long long n = trace_count(trace, ops[i]);
    if (n <= 0) fprintf(stderr, "\n  sim trace: %s ran %lld times\n", ops[i], n);
    CU_ASSERT(n > 0);
  }
  /* the same greedy text as on the CPU device */
  char *a = strstr(sim, "prompt: "), *b = strstr(cpu, "prompt: ");
  CU_ASSERT_FATAL(a != NULL && b != NULL);
  *a = 0;
  *b = 0;
  if (strcmp(sim, cpu) != 0) fprintf(stderr, "\n  sim: [%s]\n  cpu: [%s]\n", sim, cpu);
  CU_ASSERT_STRING_EQUAL(sim, cpu);
  CU_ASSERT(strlen(sim) > 0);
  free(sim);
  free(cpu);
  free(trace);
}

/* `weir config check` on a file selecting `device`, with the sim plugin's folder. */
static char *config_check(const char *device, int *rc) {
  char *file = wt_strf("%s/%s.toml", g_dir, device);
  char *text = wt_strf("[device]\nname = \"%s\"\n", device);
  wt_write_file(file, text, strlen(text));
  char *argv[] = {WT_WEIR, "config", "check", file, "--plugin-dir", WT_SIM_PLUGIN_DIR, NULL};
  char *out = run(rc, argv);
  free(text);
  free(file);
  return out;
}

static void test_config_check(void) {
  int rc;
  char *out = config_check("sim", &rc);
  if (rc) fprintf(stderr, "\n%s\n", out);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "# plugin: sim 1.0.0");
  free(out);
  /* an unknown device: refused by the loader, naming the devices there are */
  out = config_check("rocm", &rc);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "no device 'rocm'");
  WT_ASSERT_STR_CONTAINS(out, "weir_device_rocm.so");
  WT_ASSERT_STR_CONTAINS(out, "provide: sim, simalone, cpu");
  free(out);
  /* a device that declares no other device's plugins: the CPU attention plugin is refused
   * on it, naming what it runs on and what was asked */
  out = config_check("simalone", &rc);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "attention plugin 'paged' runs on cpu, expected simalone");
  free(out);
}

int main(void) {
  static const wt_test tests[] = {{"weir plugins lists sim by name", test_listed},
                                  {"generate runs on sim, same text as cpu", test_generate_on_sim},
                                  {"config check: sim accepted, an unknown device named", test_config_check},
                                  {NULL, NULL}};
  return wt_run_suite_ex("device_sim", tests, suite_init, suite_cleanup);
}
