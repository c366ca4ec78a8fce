/* awq_int4 on whole models, through the real loader, the calibration pass and the weir binary:
 *  - `weir quantize` writes a standard GGUF (Q4_1 weights, F32 norms, general.file_type 3,
 *    weir.quantize.* keys, every other key and tensor as it was);
 *  - the folded export gives the logits of the in-memory calibrated model within 1e-5 of the
 *    largest logit (the norms' gains divided by s differ from multiplying by 1/s in the last
 *    bit; the v and up rows are divided by powers of two, exactly), and exactly the same
 *    logits without calibration (nothing is folded then);
 *  - bad input gives clear errors: a missing or too short calibration text, a scheme that
 *    cannot export, a bad group size, a GGUF with an unknown tensor type, missing flags. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "kv/kv_pool.h"
#include "runtime/calib.h"
#include "format/gguf.h"
#include "hclient.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
#include "testutil.h"
#include "util/log.h"

static char *g_dir;
static char *g_text;

static char *run_weir(int *rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run_weir(int *rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char args[4096];
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  char *cmd = wt_strf("%s %s 2>&1", WT_WEIR, args);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  char *out = NULL;
  *rc = wt_run(argv, &out, 120000);
  free(cmd);
  return out ? out : strdup("");
}

static char *make_model(const char *name, const char *args) {
  char *path = wt_strf("%s/%s.gguf", g_dir, name);
  int rc;
  char *out = run_weir(&rc, "mkmodel %s --out %s", args, path);
  if (rc != 0) fprintf(stderr, "\nmkmodel failed (%d): %s\n", rc, out);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  free(out);
  return path;
}

/* Logits of `n` fixed tokens through a model loaded with quant.name = scheme and the given
 * extra settings ("key=value" pairs), calibrating when the plugin asks. */
static float *logits_of(const char *path, const char *const *sets, int nsets, int32_t n,
                        int32_t *vocab_out) {
  weir_config cfg;
  weir_config_defaults(&cfg);
  char err[1024] = "";
  weir_plugin_set ps;
  memset(&ps, 0, sizeof ps);
  weir_gguf *g = NULL;
  weir_tokenizer *tok = NULL;
  weir_llama *m = NULL;
  weir_kv_pool *pool = NULL;
  float *out = NULL;
  int rc = weir_config_set(&cfg, "plugins.dirs", "[\"" WT_PLUGIN_DIR "\"]", err, sizeof err);
  rc |= weir_config_set(&cfg, "device.threads", "2", err, sizeof err);
  rc |= weir_config_set(&cfg, "model.path", path, err, sizeof err);
  for (int i = 0; i < nsets && rc == 0; i++) {
    char key[128];
    const char *eq = strchr(sets[i], '=');
    snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
    rc = weir_config_set(&cfg, key, eq + 1, err, sizeof err);
  }
  if (rc) fprintf(stderr, "\nconfig: %s\n", err);
  CU_ASSERT_EQUAL(rc, 0);
  if (rc) goto out;
  weir_llama_hparams hp;
  weir_attn_shape shape;
  if ((rc = weir_gguf_open(path, &g, err, sizeof err)) ||
      (rc = weir_gguf_llama_hparams(g, &hp, err, sizeof err)) ||
      (rc = weir_tokenizer_from_gguf(g, &tok, err, sizeof err)) ||
      (rc = weir_plugin_set_load_ex(&cfg, NULL, &ps, err, sizeof err))) {
    fprintf(stderr, "\n%s\n", err);
    CU_FAIL("load");
    goto out;
  }
  weir_llama_attn_shape(&hp, &shape);
  weir_kv_pool_params kp = {.block_size = 16, .kv_dtype = WEIR_DTYPE_F32, .num_blocks = 17,
                            .max_model_len = 256, .groups = &shape, .num_groups = 1};
  weir_llama_opts o = {.max_num_tokens = n, .max_num_seqs = 1, .max_logit_rows = n};
  /* calibrated first when the scheme is activation-aware, as the engine does */
  if ((rc = weir_kv_pool_create(&kp, ps.device, ps.attention, &pool, err, sizeof err)) ||
      (rc = weir_calib_llama_create(&cfg, g, tok, &ps, &o, pool, 0, &m, err, sizeof err))) {
    fprintf(stderr, "\n%s\n", err);
    CU_FAIL("create");
    goto out;
  }
  const int32_t vocab = weir_llama_hparams_get(m)->n_vocab;
  int32_t toks[256], pos[256], bt[17], qsl[2] = {0, n}, ctx[1] = {n};
  for (int32_t i = 0; i < n; i++) {
    toks[i] = (int32_t)((i * 7919u + 13u) % (unsigned)vocab);
    pos[i] = i;
  }
  for (int i = 0; i < 17; i++) bt[i] = i;
  weir_llama_batch b = {.num_tokens = n, .tokens = toks, .positions = pos, .num_seqs = 1,
                        .query_start_loc = qsl, .context_lens = ctx, .block_tables = bt,
                        .max_blocks_per_seq = 16, .slot_mapping = pos, .num_logit_rows = n,
                        .logit_rows = pos};
  float *lg = NULL;
  CU_ASSERT_EQUAL_FATAL(weir_llama_forward(m, &b, &lg), 0);
  out = malloc(sizeof(float) * (size_t)n * (size_t)vocab);
  const weir_device_ops *d = ps.device->ops;
  CU_ASSERT_EQUAL(d->copy_d2h(ps.device->self, out, lg, sizeof(float) * (size_t)n * vocab), 0);
  *vocab_out = vocab;
out:
  weir_llama_destroy(m);
  weir_kv_pool_destroy(pool);
  weir_plugin_set_unload(&ps);
  weir_tokenizer_free(tok);
  weir_gguf_close(g);
  weir_config_free(&cfg);
  return out;
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double md = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > md || isnan(d)) md = isnan(d) ? INFINITY : d;
    mb = fmax(mb, fabs((double)b[i]));
  }
  return mb > 0 ? md / mb : md;
}

/* The logits of src calibrated in memory (awq_int4, group 64, g_text) against those of its
 * export dst loaded as it is: returns their relative difference (INFINITY when either could
 * not run) and src's logits in *mem (the caller frees). */
static double export_vs_memory(const char *src, const char *dst, float **mem, int32_t *vocab) {
  const char *awq[] = {"quant.name=awq_int4", "quant.group_size=64", NULL};
  char *ct_set = wt_strf("quant.calibration_text=%s", g_text);
  awq[2] = ct_set;
  float *a = logits_of(src, awq, 3, 40, vocab);
  float *b = logits_of(dst, awq, 3, 40, vocab);
  double e = a && b ? rel_diff(b, a, (size_t)40 * *vocab) : INFINITY;
  free(b);
  free(ct_set);
  *mem = a;
  return e;
}

static void test_export_round_trip(void) {
  char *src = make_model("gqa", "--dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 "
                                "--vocab 384 --ctx 512 --type f16 --seed 5");
  char *dst = wt_strf("%s/gqa-awq.gguf", g_dir);
  char *dst_rtn = wt_strf("%s/gqa-rtn.gguf", g_dir);
  int rc;
  char *out = run_weir(&rc, "quantize --model %s --calibration %s --set quant.group_size=64 "
                       "--threads 2 --out %s", src, g_text, dst);
  if (rc) fprintf(stderr, "\n%s\n", out);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "alpha");
  WT_ASSERT_STR_CONTAINS(out, "(block 2 of 2)");
  WT_ASSERT_STR_CONTAINS(out, "weir quantize: wrote");
  free(out);
  out = run_weir(&rc, "quantize --model %s --set quant.calibration=false --set "
                 "quant.group_size=64 --out %s", src, dst_rtn);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "(no calibration)");
  free(out);

  /* The file: Q4_1 linears and embedding, F32 norms, the rest as it was. */
  weir_gguf *gs = NULL, *gd = NULL;
  char err[512];
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(src, &gs, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(dst, &gd, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_gguf_tensor_count(gd), weir_gguf_tensor_count(gs));
  for (int64_t i = 0; i < weir_gguf_tensor_count(gs); i++) {
    const weir_gguf_tensor *a = weir_gguf_tensor_at(gs, i);
    const weir_gguf_tensor *b = weir_gguf_find_tensor(gd, a->name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    for (int d = 0; d < 4; d++) CU_ASSERT_EQUAL(a->t.ne[d], b->t.ne[d]);
    weir_dtype want = strstr(a->name, "norm") ? WEIR_DTYPE_F32 : WEIR_DTYPE_Q4_1;
    CU_ASSERT_EQUAL(b->t.dtype, want);
  }
  uint32_t ft = 0, ct = 0;
  CU_ASSERT_EQUAL(weir_gguf_get_u32(gd, "general.file_type", &ft), 0);
  WT_ASSERT_INT_EQ(ft, 3);
  CU_ASSERT_EQUAL(weir_gguf_get_u32(gd, "weir.quantize.calibration_tokens", &ct), 0);
  CU_ASSERT(ct > 0);
  int64_t kept = 0;
  for (int64_t i = 0; i < weir_gguf_kv_count(gs); i++) {
    const weir_gguf_kv *kv = weir_gguf_kv_at(gs, i);
    if (!strcmp(kv->key, "general.file_type")) continue;
    const weir_gguf_kv *kd = weir_gguf_find_key(gd, kv->key);
    CU_ASSERT_PTR_NOT_NULL(kd);
    if (kd && kd->type == kv->type) kept++;
  }
  CU_ASSERT(kept >= weir_gguf_kv_count(gs) - 1);
  weir_gguf_close(gs);
  weir_gguf_close(gd);

  /* Logits: in-memory calibrated vs the folded export (loaded losslessly: Q4_1 runs of two
   * blocks are groups of 64 again). */
  int32_t vocab = 0;
  float *a = NULL;
  double e = export_vs_memory(src, dst, &a, &vocab);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  printf("\n    folded export vs in-memory AWQ: relative logit difference %.3g (bound 1e-5)", e);
  CU_ASSERT(e <= 1e-5);
  /* without calibration nothing is folded: the same numbers exactly */
  const char *rtn[] = {"quant.name=awq_int4", "quant.group_size=64", "quant.calibration=false"};
  float *c = logits_of(src, rtn, 3, 40, &vocab);
  float *d = logits_of(dst_rtn, rtn, 3, 40, &vocab);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  CU_ASSERT(memcmp(c, d, sizeof(float) * 40 * (size_t)vocab) == 0);
  /* and calibration changed something */
  CU_ASSERT(rel_diff(a, c, (size_t)40 * vocab) > 1e-4);
  free(a);
  free(c);
  free(d);
  free(src);
  free(dst);
  free(dst_rtn);
}

/* A tied output projection (no output.weight): with calibration it is packed a second time
 * from token_embd.weight with the final norm's samples, in memory and in the quantized file,
 * which gets its own output.weight; without calibration the file stays tied. */
static void test_tied_output(void) {
  char *src = make_model("tied", "--dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 "
                                 "--vocab 384 --ctx 512 --type f16 --seed 7 --tied");
  char *dst = wt_strf("%s/tied-awq.gguf", g_dir), *dst_rtn = wt_strf("%s/tied-rtn.gguf", g_dir);
  int rc;
  char *out = run_weir(&rc, "quantize --model %s --calibration %s --set quant.group_size=64 "
                       "--out %s", src, g_text, dst);
  if (rc) fprintf(stderr, "\n%s\n", out);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "token_embd.weight: alpha"); /* the output site's search */
  free(out);
  out = run_weir(&rc, "quantize --model %s --set quant.calibration=false --set "
                 "quant.group_size=64 --out %s", src, dst_rtn);
  WT_ASSERT_INT_EQ(rc, 0);
  free(out);
  weir_gguf *gs = NULL, *gd = NULL, *gr = NULL;
  char err[512];
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(src, &gs, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(dst, &gd, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(weir_gguf_open(dst_rtn, &gr, err, sizeof err), 0);
  CU_ASSERT_PTR_NULL(weir_gguf_find_tensor(gs, "output.weight"));
  CU_ASSERT_PTR_NULL(weir_gguf_find_tensor(gr, "output.weight"));
  WT_ASSERT_INT_EQ(weir_gguf_tensor_count(gd), weir_gguf_tensor_count(gs) + 1);
  const weir_gguf_tensor *o = weir_gguf_find_tensor(gd, "output.weight");
  const weir_gguf_tensor *e = weir_gguf_find_tensor(gd, "token_embd.weight");
  CU_ASSERT_PTR_NOT_NULL_FATAL(o);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CU_ASSERT_EQUAL(o->t.dtype, WEIR_DTYPE_Q4_1);
  for (int d = 0; d < 4; d++) CU_ASSERT_EQUAL(o->t.ne[d], e->t.ne[d]);
  /* the two copies differ: the output one was calibrated */
  CU_ASSERT(memcmp(o->t.data, e->t.data, (size_t)e->nbytes) != 0);
  weir_gguf_close(gs);
  weir_gguf_close(gd);
  weir_gguf_close(gr);

  int32_t vocab = 0;
  float *a = NULL;
  double d = export_vs_memory(src, dst, &a, &vocab);
  const char *rtn[] = {"quant.name=awq_int4", "quant.group_size=64", "quant.calibration=false"};
  float *c = logits_of(src, rtn, 3, 40, &vocab);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  printf("\n    tied model: untied export vs in-memory: relative logit difference %.3g (bound "
         "1e-5)", d);
  CU_ASSERT(d <= 1e-5);
  CU_ASSERT(rel_diff(a, c, (size_t)40 * vocab) > 1e-4);
  free(a);
  free(c);
  free(src);
  free(dst);
  free(dst_rtn);
}

/* Patches the dtype of one tensor in a GGUF header to an unknown number. */
static int patch_dtype(const char *path, const char *tensor, uint32_t type) {
  size_t len = 0;
  char *buf = wt_read_file(path, &len);
  if (!buf) return -1;
  size_t nl = strlen(tensor);
  for (size_t i = 8; i + nl + 4 < len; i++) {
    uint64_t sl;
    memcpy(&sl, buf + i - 8, 8);
    if (sl == nl && !memcmp(buf + i, tensor, nl)) {
      uint32_t nd;
      memcpy(&nd, buf + i + nl, 4);
      memcpy(buf + i + nl + 4 + 8 * (size_t)nd, &type, 4);
      int rc = wt_write_file(path, buf, len);
      free(buf);
      return rc;
    }
  }
  free(buf);
  return -1;
}

static void test_errors(void) {
  char *src = make_model("err", "--dim 64 --layers 1 --heads 2 --kv-heads 1 --ffn 128 "
                                "--vocab 384 --ctx 256 --type f16 --seed 6");
  char *dst = wt_strf("%s/err-out.gguf", g_dir);
  int rc;
  char *out = run_weir(&rc, "quantize --model %s --calibration %s/nonexistent.txt --out %s", src,
                       g_dir, dst);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "nonexistent.txt: No such file or directory");
  WT_ASSERT_STR_CONTAINS(out, "quant.calibration = false");
  free(out);
  /* with no text set and no heldout.txt beside the model, the shipped generic text:
   * quantize works out of the box and says which text it used */
  char *dst_ok = wt_strf("%s/err-out-default-text.gguf", g_dir);
  out = run_weir(&rc, "quantize --model %s --out %s", src, dst_ok);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, "/share/weir/calibration.txt, the generic text weir ships");
  free(out);
  unlink(dst_ok);
  free(dst_ok);
  char *shortt = wt_strf("%s/short.txt", g_dir);
  wt_write_file(shortt, "In the", 6);
  out = run_weir(&rc, "quantize --model %s --calibration %s --out %s", src, shortt, dst);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "at least 16 are needed");
  free(out);
  out = run_weir(&rc, "quantize --model %s --scheme int8 --out %s", src, dst);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "quant scheme int8 cannot write its weights");
  free(out);
  out = run_weir(&rc, "quantize --model %s --set quant.group_size=48 --calibration %s --out %s",
                 src, g_text, dst);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "group_size must be 32, 64 or 128");
  free(out);
  out = run_weir(&rc, "quantize --model %s", src);
  WT_ASSERT_INT_EQ(rc, 2);
  WT_ASSERT_STR_CONTAINS(out, "--model and --out are required");
  free(out);
  /* a tensor type nobody knows */
  CU_ASSERT_EQUAL(patch_dtype(src, "blk.0.ffn_up.weight", 77), 0);
  out = run_weir(&rc, "quantize --model %s --calibration %s --out %s", src, g_text, dst);
  WT_ASSERT_INT_EQ(rc, 1);
  WT_ASSERT_STR_CONTAINS(out, "blk.0.ffn_up.weight");
  WT_ASSERT_STR_CONTAINS(out, "77");
  free(out);
  /* nothing was left behind */
  char *tmp = wt_strf("%s.tmp", dst);
  FILE *f = fopen(dst, "rb"), *ft = fopen(tmp, "rb");
  CU_ASSERT_PTR_NULL(f);
  CU_ASSERT_PTR_NULL(ft);
  if (f) fclose(f);
  if (ft) fclose(ft);
  free(tmp);
  free(shortt);
  free(src);
  free(dst);
}

/* AWQ out of the box (issue 27): an f16 model in a fresh folder (no heldout.txt beside it)
 * and no quant.calibration_text: `weir generate --quant awq_int4` and `weir serve --quant
 * awq_int4` calibrate on the generic text weir ships, say so at load, and answer. */
static void test_shipped_calibration_text(void) {
  char *src = make_model("fresh", "--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 "
                                  "--vocab 384 --ctx 256 --type f16 --seed 11");
  const char *said = "/share/weir/calibration.txt, the generic text weir ships";
  int rc;
  char *out = run_weir(&rc, "generate --model %s --quant awq_int4 --set quant.group_size=64 "
                       "--threads 2 --prompt hello -n 6 --ignore-eos", src);
  if (rc) fprintf(stderr, "\n%s\n", out);
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(out, said);
  WT_ASSERT_STR_CONTAINS(out, "generated: 6 tokens");
  free(out);
  /* the real server */
  char *log = wt_strf("%s/serve-awq.log", g_dir);
  hc_server s;
  s.port = wt_free_port();
  char port[16];
  snprintf(port, sizeof port, "%d", s.port);
  const char *args[] = {"--model", src, "--quant", "awq_int4", "--set", "quant.group_size=64",
                        "--threads", "2", "--set", "cache.memory_bytes=16777216", "--port",
                        port, NULL};
  rc = hc_server_start(&s, args, log, 120000);
  char *text = wt_read_file(log, NULL);
  if (rc) fprintf(stderr, "\n  server did not start; log:\n%s\n", text ? text : "");
  WT_ASSERT_INT_EQ(rc, 0);
  WT_ASSERT_STR_CONTAINS(text, said);
  free(text);
  if (rc == 0) {
    hc_response r;
    WT_ASSERT_INT_EQ(hc_request(s.port, "POST", "/v1/completions", NULL,
                                "{\"prompt\":\"hello\",\"max_tokens\":4,\"temperature\":0}", &r),
                     0);
    WT_ASSERT_INT_EQ(r.status, 200);
    WT_ASSERT_STR_CONTAINS(r.body, "\"completion_tokens\":4");
    hc_response_free(&r);
    hc_server_stop(&s, 15, 30000);
  }
  free(log);
  free(src);
}

int main(void) {
  weir_log_configure(WEIR_LOG_WARN, WEIR_LOG_TEXT, NULL);
  g_dir = wt_mkdtemp();
  /* A calibration text: public-domain-style English, long enough for a few windows. */
  g_text = wt_strf("%s/calib.txt", g_dir);
  {
    static const char *const words[] = {"the", "light", "of", "day", "and", "night", "upon",
                                        "waters", "earth", "was", "without", "form", "void",
                                        "darkness", "face", "deep", "spirit", "moved", "said",
                                        "let", "there", "be", "good", "divided"};
    size_t cap = 60000, n = 0;
    char *t = malloc(cap);
    unsigned s = 1;
    while (n + 32 < cap) {
      s = s * 1103515245u + 12345u;
      n += (size_t)snprintf(t + n, cap - n, "%s%s", words[(s >> 8) % 24], (s >> 20) % 9 ? " " : ". ");
    }
    wt_write_file(g_text, t, n);
    free(t);
  }
  static const wt_test tests[] = {{"export_round_trip", test_export_round_trip},
                                  {"tied_output", test_tied_output},
                                  {"errors", test_errors},
                                  {"shipped calibration text", test_shipped_calibration_text},
                                  {NULL, NULL}};
  int rc = wt_run_suite("quant_awq_model", tests);
  wt_rmtree(g_dir);
  free(g_dir);
  free(g_text);
  return rc;
}
