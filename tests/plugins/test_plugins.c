/* Plugins for the loader tests, one source compiled many times: each build defines one
 * VARIANT_* and NAME (its file name's last part) and becomes one .so under
 * build/tests/plugins (see CMakeLists.txt). The good ones
 * (a device "cpu", an attention "testattn", a quant "testquant", a sampler "good") let the
 * tests load a whole set through the real loader; the bad ones each break exactly one rule
 * the loader enforces. */
#include <stdlib.h>
#include <string.h>

#include "weir/weir.h"

/* ---- a device plugin backed by malloc ------------------------------------------------------- */
#if defined(VARIANT_DEVICE)
static int d_init(const weir_host *h, const weir_plugin_args *a, void **self) {
  (void)h; (void)a;
  *self = (void *)1;
  return WEIR_OK;
}
static void d_fini(void *self) { (void)self; }
static int d_info(void *s, weir_device_info *o) {
  (void)s;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  strcpy(o->name, "test device");
  return WEIR_OK;
}
static int d_alloc(void *s, size_t n, void **p) {
  (void)s;
  *p = malloc(n ? n : 1);
  return *p ? WEIR_OK : WEIR_E_NOMEM;
}
static void d_free(void *s, void *p) { (void)s; free(p); }
static int d_copy(void *s, void *d, const void *src, size_t n) { (void)s; memcpy(d, src, n); return WEIR_OK; }
static int d_memset(void *s, void *d, int v, size_t n) { (void)s; memset(d, v, n); return WEIR_OK; }
static int d_sync(void *s) { (void)s; return WEIR_OK; }
static int d_norm(void *s, float *o, const float *x, const float *w, int64_t r, int64_t d, float e) { (void)s; (void)o; (void)x; (void)w; (void)r; (void)d; (void)e; return WEIR_E_NOTSUP; }
static int d_rope(void *s, float *x, const int32_t *p, int64_t n, int32_t h, int32_t hd, int32_t rd, float b, float fs, weir_rope_style st) { (void)s; (void)x; (void)p; (void)n; (void)h; (void)hd; (void)rd; (void)b; (void)fs; (void)st; return WEIR_E_NOTSUP; }
static int d_swiglu(void *s, float *o, const float *g, const float *u, int64_t n) { (void)s; (void)o; (void)g; (void)u; (void)n; return WEIR_E_NOTSUP; }
static int d_add(void *s, float *o, const float *a, const float *b, int64_t n) { (void)s; (void)o; (void)a; (void)b; (void)n; return WEIR_E_NOTSUP; }
static int d_bias(void *s, float *x, const float *b, int64_t r, int64_t d) { (void)s; (void)x; (void)b; (void)r; (void)d; return WEIR_E_NOTSUP; }
static int d_rows(void *s, float *o, const float *x, const int32_t *r, int64_t n, int64_t d) { (void)s; (void)o; (void)x; (void)r; (void)n; (void)d; return WEIR_E_NOTSUP; }
static const weir_device_ops k_ops = {sizeof k_ops, d_info, d_alloc, d_free, d_copy, d_copy,
                                      d_copy, d_memset, d_sync, d_norm, d_rope, d_swiglu,
                                      d_add, d_bias, d_rows};
static const weir_plugin_desc k_desc = {sizeof k_desc, WEIR_ABI_MAJOR, WEIR_ABI_MINOR,
    WEIR_BUILD_SIGNATURE, WEIR_PLUGIN_DEVICE, NAME, "0.0.1", "loader-test device",
    WEIR_DEVICE_CPU, WEIR_DTYPE_BIT(WEIR_DTYPE_F32), NULL, 0, d_init, d_fini, &k_ops};
WEIR_PLUGIN_EXPORT(k_desc)

/* ---- attention: takes device memory through the host at init ------------------------------ */
#elif defined(VARIANT_ATTENTION) || defined(VARIANT_ATTN_CUDA_ONLY) || defined(VARIANT_KIND_LIE)
typedef struct attn {
  const weir_host *h;
  void *dev;
} attn;
static int a_init(const weir_host *h, const weir_plugin_args *a, void **self) {
  (void)a;
  attn *t = h->alloc(h->ctx, sizeof *t, 0);
  if (!t) return WEIR_E_NOMEM;
  t->h = h;
  t->dev = NULL;
  if (h->device_alloc) {
    int rc = h->device_alloc(h->ctx, 4096, &t->dev);
    if (rc != WEIR_OK) {
      h->free(h->ctx, t);
      return rc;
    }
  }
  *self = t;
  return WEIR_OK;
}
static void a_fini(void *self) {
  attn *t = self;
  if (t->dev) t->h->device_free(t->h->ctx, t->dev);
  t->h->free(t->h->ctx, t);
}
static size_t a_bytes(void *s, const weir_attn_shape *sh) { (void)s; (void)sh; return 64; }
static int a_fwd(void *s, const weir_attn_shape *sh, const weir_attn_batch *b, const weir_kv_view *kv, const float *q, const float *k, const float *v, float *o) { (void)s; (void)sh; (void)b; (void)kv; (void)q; (void)k; (void)v; (void)o; return WEIR_E_NOTSUP; }
static const weir_attention_ops k_ops = {sizeof k_ops, a_bytes, a_fwd, NULL};
#if defined(VARIANT_KIND_LIE)
#define KIND WEIR_PLUGIN_SAMPLER /* file says attention */
#else
#define KIND WEIR_PLUGIN_ATTENTION
#endif
#if defined(VARIANT_ATTN_CUDA_ONLY)
#define DEVS WEIR_DEVICE_CUDA
#else
#define DEVS WEIR_DEVICE_CPU
#endif
static const weir_plugin_desc k_desc = {sizeof k_desc, WEIR_ABI_MAJOR, WEIR_ABI_MINOR,
    WEIR_BUILD_SIGNATURE, KIND, NAME, "0.0.1", "loader-test attention", DEVS,
    WEIR_DTYPE_BIT(WEIR_DTYPE_F32) | WEIR_DTYPE_BIT(WEIR_DTYPE_F16), NULL, 0, a_init, a_fini,
    &k_ops};
WEIR_PLUGIN_EXPORT(k_desc)

/* ---- quant: no behaviour needed, only a complete vtable ----------------------------------- */
#elif defined(VARIANT_QUANT)
static int q_init(const weir_host *h, const weir_plugin_args *a, void **self) { (void)h; (void)a; *self = (void *)2; return WEIR_OK; }
static void q_fini(void *self) { (void)self; }
static int q_pack(void *s, const weir_quant_pack_args *a, void **w) { (void)s; (void)a; (void)w; return WEIR_E_NOTSUP; }
static void q_rel(void *s, void *w) { (void)s; (void)w; }
static size_t q_bytes(void *s, const void *w) { (void)s; (void)w; return 0; }
static int q_mm(void *s, const void *w, const float *x, float *y, int64_t n) { (void)s; (void)w; (void)x; (void)y; (void)n; return WEIR_E_NOTSUP; }
static int q_embed(void *s, const void *w, const int32_t *ids, float *o, int64_t n) { (void)s; (void)w; (void)ids; (void)o; (void)n; return WEIR_E_NOTSUP; }
static const weir_quant_ops k_ops = {sizeof k_ops, q_pack, q_rel, q_bytes, q_mm, q_embed};
static const weir_plugin_desc k_desc = {sizeof k_desc, WEIR_ABI_MAJOR, WEIR_ABI_MINOR,
    WEIR_BUILD_SIGNATURE, WEIR_PLUGIN_QUANT, NAME, "0.0.1", "loader-test quant",
    WEIR_DEVICE_CPU, WEIR_DTYPE_BIT(WEIR_DTYPE_F32), NULL, 0, q_init, q_fini, &k_ops};
WEIR_PLUGIN_EXPORT(k_desc)

/* ---- samplers: "good" and its broken variants ---------------------------------------------- */
#else
/* Options of every type, so the tests can exercise each validation rule. */
static const char *const k_modes[] = {"argmax", "argmin", NULL};
#if defined(VARIANT_CORE_KEY_OPT)
#define OPT_BIAS_TOKEN {.key = "path", .type = WEIR_OPT_INT, /* the core's sampler.path */ \
                        .help = "token whose logit gets `bias`", .def_int = -1, .min = -1, \
                        .max = 1000000}
#else
#define OPT_BIAS_TOKEN {.key = "bias_token", .type = WEIR_OPT_INT, \
                        .help = "token whose logit gets `bias`", .def_int = -1, .min = -1, \
                        .max = 1000000}
#endif
#define OPT_BIAS {.key = "bias", .type = WEIR_OPT_FLOAT, .help = "added to bias_token's logit", \
                  .def_float = 0.0, .min = -100, .max = 100}
#define OPT_MODE {.key = "mode", .type = WEIR_OPT_STRING, .help = "argmax or argmin", \
                  .def_string = "argmax", .choices = k_modes}
#define OPT_COUNT {.key = "count", .type = WEIR_OPT_BOOL, .help = "count samples in a metric", \
                   .def_bool = 1}
static const weir_option_desc k_options[] = {
#if defined(VARIANT_REORDERED)
    /* The same options in another order: a plugin reading by key must not notice. */
    OPT_COUNT, OPT_MODE, OPT_BIAS, OPT_BIAS_TOKEN,
#else
    OPT_BIAS_TOKEN, OPT_BIAS, OPT_MODE, OPT_COUNT,
#endif
};

typedef struct good {
  const weir_host *h;
  int64_t bias_token;
  double bias;
  int argmin;
  weir_metric *samples;
  void *scratch;
} good;

__attribute__((unused)) static int g_init(const weir_host *h, const weir_plugin_args *a, void **self) {
#if defined(VARIANT_INIT_FAIL)
  /* The reason reaches the loader's refusal through set_error (ABI 1.5). */
  h->set_error(h->ctx, "initfail: refusing on purpose (%s)", "the test's reason");
  (void)a; (void)self;
  return WEIR_E_DEVICE;
#else
  int64_t bias_token;
  double bias;
  const char *mode;
  int count;
#if defined(VARIANT_OLD_DESC)
  /* As a plugin built before ABI 1.5 reads them: by position, which still works. */
  if (a->num_options != 4) return WEIR_E_INVAL;
  bias_token = a->options[0].i;
  bias = a->options[1].f;
  mode = a->options[2].s;
  count = a->options[3].b;
#else
  (void)a;
  int rc;
#if defined(VARIANT_UNDECLARED)
  if ((rc = weir_option_int(h, "bias_tokn", &bias_token)) != WEIR_OK) return rc; /* a typo */
#else
  if ((rc = weir_option_int(h, "bias_token", &bias_token)) != WEIR_OK) return rc;
#endif
#if defined(VARIANT_WRONG_TYPE)
  int64_t bias_int; /* "bias" is declared a float */
  if ((rc = weir_option_int(h, "bias", &bias_int)) != WEIR_OK) return rc;
  bias = (double)bias_int;
#else
  if ((rc = weir_option_float(h, "bias", &bias)) != WEIR_OK) return rc;
#endif
  if ((rc = weir_option_string(h, "mode", &mode)) != WEIR_OK ||
      (rc = weir_option_bool(h, "count", &count)) != WEIR_OK)
    return rc;
#endif
  good *g = h->alloc(h->ctx, sizeof *g, 64);
  if (!g) return WEIR_E_NOMEM;
  memset(g, 0, sizeof *g);
  g->h = h;
  g->bias_token = bias_token;
  g->bias = bias;
  g->argmin = !strcmp(mode, "argmin");
  if (count) {
    weir_metric_desc md = {"test_samples_total", "rows sampled by the test sampler",
                           WEIR_METRIC_COUNTER, NULL, 0};
    if (h->metric_register(h->ctx, &md, &g->samples) != WEIR_OK) g->samples = NULL;
  }
  g->scratch = h->alloc(h->ctx, 1000, 0); /* accounted: the tests read it back */
  *self = g;
  return WEIR_OK;
#endif
}

static void g_fini(void *self) {
  good *g = self;
  if (!g) return;
  g->h->free(g->h->ctx, g->scratch);
  g->h->free(g->h->ctx, g);
}

typedef struct row_job {
  good *g;
  float *logits;
  int32_t vocab;
  weir_sample_result *out;
} row_job;

static void one_row(void *arg, int64_t b, int64_t e, int thread) {
  (void)thread;
  row_job *j = arg;
  for (int64_t r = b; r < e; r++) {
    float *l = j->logits + r * j->vocab;
    if (j->g->bias_token >= 0 && j->g->bias_token < j->vocab) l[j->g->bias_token] += (float)j->g->bias;
    int32_t best = 0;
    for (int32_t t = 1; t < j->vocab; t++)
      if (j->g->argmin ? l[t] < l[best] : l[t] > l[best]) best = t;
    j->out[r].token = best;
    j->out[r].logprob = 0;
    j->out[r].num_top = 0;
  }
}

__attribute__((unused)) static int g_sample(void *self, const weir_sampling_row *rows, int32_t n, float *logits,
                    int32_t vocab, weir_sample_result *out) {
  (void)rows;
  good *g = self;
  row_job j = {g, logits, vocab, out};
  g->h->parallel_for(g->h->ctx, n, 1, one_row, &j);
  if (g->samples) g->h->metric_record(g->h->ctx, g->samples, (double)n);
  return WEIR_OK;
}

#if defined(VARIANT_OLD_DESC)
/* Built "against ABI 1.0": struct sizes that end before the newer fields, which hold values
 * the host must never read (it sees NULL). */
static int g_probs_poison(void *self, const weir_sampling_row *rows, int32_t n, float *logits,
                          int32_t vocab, float *probs) {
  (void)self; (void)rows; (void)n; (void)logits; (void)vocab; (void)probs;
  abort();
}
static const weir_sampler_ops k_ops = {offsetof(weir_sampler_ops, probs), g_sample,
                                       g_probs_poison};
#elif defined(VARIANT_NO_SAMPLE)
static const weir_sampler_ops k_ops = {sizeof k_ops, NULL, NULL};
#elif defined(VARIANT_SMALL_OPS)
static const weir_sampler_ops k_ops = {2, g_sample, NULL};
#else
static const weir_sampler_ops k_ops = {sizeof k_ops, g_sample, NULL};
#endif

#if defined(VARIANT_BAD_DEVNAMES)
static const char *const k_devnames[] = {"Bad-Name", NULL};
#elif defined(VARIANT_ONLY_SIM)
static const char *const k_devnames[] = {"sim", NULL};
#elif defined(VARIANT_ANY_DEV)
static const char *const k_devnames[] = {"*", NULL};
#endif
static const weir_plugin_desc k_desc = {
#if defined(VARIANT_SMALL_DESC)
    16,
#elif defined(VARIANT_OLD_DESC)
    WEIR_PLUGIN_DESC_SIZE_1_0,
#else
    sizeof k_desc,
#endif
#if defined(VARIANT_BAD_MAJOR)
    WEIR_ABI_MAJOR + 1, 0,
#elif defined(VARIANT_NEW_MINOR)
    WEIR_ABI_MAJOR, WEIR_ABI_MINOR + 1,
#else
    WEIR_ABI_MAJOR, WEIR_ABI_MINOR,
#endif
#if defined(VARIANT_BAD_SIG)
    "weir-abi1;p32;be;layout0",
#else
    WEIR_BUILD_SIGNATURE,
#endif
    WEIR_PLUGIN_SAMPLER, NAME, "1.2.3", "loader-test sampler: greedy with a bias",
    WEIR_DEVICE_CPU | WEIR_DEVICE_CUDA, 0, k_options, 4,
#if defined(VARIANT_NO_INIT)
    NULL,
#else
    g_init,
#endif
    g_fini, &k_ops,
#if defined(VARIANT_OLD_DESC)
    "POISON: past struct_size",
#elif defined(VARIANT_MULTI_FAST)
    "fast",
#elif defined(VARIANT_MULTI_NOT_HERE)
    "nothere",
#elif defined(VARIANT_ALL_BAD)
    "bad",
#else
    NULL,
#endif
    /* device_names (1.5): a bad name, one device by name only, any device */
#if defined(VARIANT_BAD_DEVNAMES)
    k_devnames,
#elif defined(VARIANT_ONLY_SIM)
    k_devnames,
#elif defined(VARIANT_ANY_DEV)
    k_devnames,
#endif
};

#if defined(VARIANT_NO_ENTRY)
/* Exports something, but not weir_plugin_entry. */
WEIR_EXPORT const weir_plugin_desc *weir_plugin_entry_typo(void);
WEIR_EXPORT const weir_plugin_desc *weir_plugin_entry_typo(void) { return &k_desc; }
#else
WEIR_PLUGIN_EXPORT(k_desc)
#endif

/* Build variants: "fast" outscores the plain file, "nothere" cannot run on this machine (a
 * negative score), nor can any variant of "allbad". */
#if defined(VARIANT_SCORE_NEG) || defined(VARIANT_MULTI_NOT_HERE) || defined(VARIANT_ALL_BAD)
#define SCORE -1
#elif defined(VARIANT_MULTI_PLAIN)
#define SCORE 1
#elif defined(VARIANT_MULTI_FAST)
#define SCORE 10
#endif
#ifdef SCORE
WEIR_EXPORT int weir_plugin_score(void);
WEIR_EXPORT int weir_plugin_score(void) { return SCORE; }
#endif
#endif
