/* Allowed-token masks and logit bias (ABI 1.1) in the sampler path: the default CPU sampler
 * plugin applies them in sample() and probs(), checked against a reference computed here;
 * params of the 1.0 size keep them out; and a sampler built as 1.0 (the nocaps test plugin)
 * still honours them because the host applies them (core/plugin/sampling.c), through the CPU
 * device plugin's copies. All plugins are loaded with the real loader. (The CUDA sampler is
 * checked against the CPU one through the CPU shim: cuda_sampler_shim.) */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/loader.h"
#include "plugin/sampling.h"
#include "testutil.h"
#include "weir/device.h"
#include "weir/sampler.h"

#define V 300

static weir_plugin *g_default, *g_nocaps, *g_device;
static uint64_t g_seed = 12345;

static float frand(void) {
  g_seed ^= g_seed << 13;
  g_seed ^= g_seed >> 7;
  g_seed ^= g_seed << 17;
  return (float)(g_seed >> 40) / 16777216.0f;
}

static weir_plugin *load(weir_plugin_kind kind, const char *name, const char *path) {
  weir_plugin_request req = {.kind = kind, .name = name, .path = path, .section = "test",
                             .device_name = "cpu"};
  weir_plugin *p = NULL;
  char err[1024];
  const int rc = weir_plugin_load(&req, &p, err, sizeof err);
  if (rc) fprintf(stderr, "\n  %s: %s\n", path, err);
  WT_ASSERT_INT_EQ(rc, 0);
  return p;
}

static void test_load(void) {
  char *p1 = wt_strf("%s/weir_sampler_default.so", WT_PLUGIN_DIR);
  char *p2 = wt_strf("%s/weir_sampler_nocaps.so", WT_BAD_PLUGIN_DIR);
  char *p3 = wt_strf("%s/weir_device_cpu.so", WT_PLUGIN_DIR);
  g_default = load(WEIR_PLUGIN_SAMPLER, "default", p1);
  g_nocaps = load(WEIR_PLUGIN_SAMPLER, "nocaps", p2);
  g_device = load(WEIR_PLUGIN_DEVICE, "cpu", p3);
  free(p1);
  free(p2);
  free(p3);
  CU_ASSERT_FATAL(g_default && g_nocaps && g_device);
  WT_ASSERT_INT_EQ(weir_sampler_caps(g_default), WEIR_SAMPLER_CAP_ALLOWED | WEIR_SAMPLER_CAP_LOGIT_BIAS);
  WT_ASSERT_INT_EQ(weir_sampler_caps(g_nocaps), 0);
}

typedef struct setup {
  float logits[V];
  uint32_t mask[WEIR_MASK_WORDS(V)];
  int32_t bias_tok[4];
  float bias_val[4];
  weir_sampling_params p;
} setup;

/* Random logits; a mask of about a third of the tokens; a bias that lifts one allowed token by
 * 3 and buries another. */
static void make(setup *s, float temperature) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < V; i++) s->logits[i] = frand() * 8.0f - 4.0f;
  for (int i = 0; i < V; i++)
    if (frand() < 0.33f) s->mask[i >> 5] |= 1u << (i & 31);
  s->mask[7 >> 5] |= 1u << 7;
  s->mask[11 >> 5] |= 1u << 11;
  s->bias_tok[0] = 7, s->bias_val[0] = 3.0f;
  s->bias_tok[1] = 11, s->bias_val[1] = -100.0f;
  s->bias_tok[2] = -5, s->bias_val[2] = 9.0f;  /* ignored: out of range */
  s->bias_tok[3] = V, s->bias_val[3] = 9.0f;   /* ignored */
  s->p = (weir_sampling_params){.struct_size = sizeof s->p, .temperature = temperature,
                                .top_p = 1.0f, .repetition_penalty = 1.0f, .num_logprobs = 20,
                                .logit_bias_tokens = s->bias_tok, .logit_bias_values = s->bias_val,
                                .num_logit_bias = 4, .allowed = s->mask};
}

/* The reference: the constrained distribution at temperature 1 (log-probabilities). */
static void reference(const setup *s, double *lp) {
  double x[V], mx = -INFINITY, sum = 0;
  for (int i = 0; i < V; i++) {
    x[i] = s->logits[i];
    if (i == 7) x[i] += 3.0;
    if (i == 11) x[i] -= 100.0;
    if (!weir_mask_test(s->mask, i)) x[i] = -INFINITY;
    if (x[i] > mx) mx = x[i];
  }
  for (int i = 0; i < V; i++) sum += exp(x[i] - mx);
  for (int i = 0; i < V; i++) lp[i] = x[i] - mx - log(sum);
}

static int32_t ref_argmax(const double *lp) {
  int32_t best = 0;
  for (int i = 1; i < V; i++)
    if (lp[i] > lp[best]) best = i;
  return best;
}

/* sample() through `call` (the host's wrapper) or, when NULL, the plugin directly. */
static int run_sample(weir_sampler_call *call, const weir_plugin *p, setup *s, uint64_t *rng,
                      weir_sample_result *res) {
  weir_sampling_row row = {.params = &s->p, .rng_state = rng};
  float l[V];
  memcpy(l, s->logits, sizeof l);
  if (call) return weir_sampler_call_sample(call, &row, 1, l, V, res);
  const weir_sampler_ops *ops = p->ops;
  return ops->sample(p->self, &row, 1, l, V, res);
}

static void test_default_greedy_and_logprobs(void) {
  for (int round = 0; round < 20; round++) {
    setup s;
    make(&s, 0.0f);
    double lp[V];
    reference(&s, lp);
    weir_sample_result r;
    WT_ASSERT_INT_EQ(run_sample(NULL, g_default, &s, NULL, &r), 0);
    WT_ASSERT_INT_EQ(r.token, ref_argmax(lp));
    CU_ASSERT(fabs(r.logprob - lp[r.token]) < 1e-4);
    /* The top list: allowed tokens only, most likely first, with the biased logprobs. */
    CU_ASSERT(r.num_top > 0 && r.num_top <= 20);
    for (int i = 0; i < r.num_top; i++) {
      CU_ASSERT(weir_mask_test(s.mask, r.top_tokens[i]));
      CU_ASSERT(fabs(r.top_logprobs[i] - lp[r.top_tokens[i]]) < 1e-4);
      if (i) CU_ASSERT(r.top_logprobs[i] <= r.top_logprobs[i - 1]);
    }
    /* +100 forces an allowed token; -100 removes the greedy one. */
    int32_t forced = -1;
    for (int i = V - 1; i >= 0 && forced < 0; i--)
      if (weir_mask_test(s.mask, i) && i != 7 && i != 11 && i != r.token) forced = i;
    s.bias_tok[1] = forced;
    s.bias_val[1] = 100.0f;
    weir_sample_result f;
    WT_ASSERT_INT_EQ(run_sample(NULL, g_default, &s, NULL, &f), 0);
    WT_ASSERT_INT_EQ(f.token, forced);
    s.bias_tok[1] = r.token;
    s.bias_val[1] = -100.0f;
    WT_ASSERT_INT_EQ(run_sample(NULL, g_default, &s, NULL, &f), 0);
    CU_ASSERT(f.token != r.token && weir_mask_test(s.mask, f.token));
  }
  /* A mask of a single token decides greedy and sampled draws alike; few allowed tokens give
   * a shorter top list. */
  setup s;
  make(&s, 1.3f);
  memset(s.mask, 0, sizeof s.mask);
  s.mask[123 >> 5] |= 1u << (123 & 31);
  s.p.num_logit_bias = 0;
  uint64_t rng[4] = {1, 2, 3, 4};
  weir_sample_result r;
  WT_ASSERT_INT_EQ(run_sample(NULL, g_default, &s, rng, &r), 0);
  WT_ASSERT_INT_EQ(r.token, 123);
  WT_ASSERT_INT_EQ(r.num_top, 1);
  CU_ASSERT(fabs(r.logprob) < 1e-6);
}

static void test_default_probs_and_draws(void) {
  setup s;
  make(&s, 1.0f);
  double lp[V];
  reference(&s, lp);
  const weir_sampler_ops *ops = g_default->ops;
  float l[V], pr[V];
  memcpy(l, s.logits, sizeof l);
  weir_sampling_row row = {.params = &s.p};
  WT_ASSERT_INT_EQ(ops->probs(g_default->self, &row, 1, l, V, pr), 0);
  double sum = 0, worst = 0;
  for (int i = 0; i < V; i++) {
    sum += pr[i];
    if (!weir_mask_test(s.mask, i)) WT_ASSERT_INT_EQ(pr[i] == 0.0f, 1);
    const double d = fabs(pr[i] - exp(lp[i]));
    if (d > worst) worst = d;
  }
  CU_ASSERT(fabs(sum - 1.0) < 1e-4);
  CU_ASSERT(worst < 1e-5);
  /* Draws stay inside the mask and follow the biased distribution: token 7 (+3) is drawn at
   * its probability, token 11 (-100) never. */
  uint64_t rng[4] = {11, 22, 33, 44};
  int hits7 = 0, outside = 0, hits11 = 0;
  const int n = 4000;
  for (int k = 0; k < n; k++) {
    weir_sample_result r;
    WT_ASSERT_INT_EQ(run_sample(NULL, g_default, &s, rng, &r), 0);
    outside += !weir_mask_test(s.mask, r.token);
    hits7 += r.token == 7;
    hits11 += r.token == 11;
  }
  WT_ASSERT_INT_EQ(outside, 0);
  WT_ASSERT_INT_EQ(hits11, 0);
  const double p7 = exp(lp[7]), sd = sqrt(n * p7 * (1 - p7));
  CU_ASSERT(fabs(hits7 - n * p7) < 5 * sd + 1);
}

/* params of the 1.0 size: the sampler must not read the 1.1 fields behind them. */
static void test_old_params_ignored(void) {
  setup s;
  make(&s, 0.0f);
  s.p.struct_size = (uint32_t)offsetof(weir_sampling_params, logit_bias_tokens);
  weir_sample_result r;
  WT_ASSERT_INT_EQ(run_sample(NULL, g_default, &s, NULL, &r), 0);
  int32_t best = 0;
  for (int i = 1; i < V; i++)
    if (s.logits[i] > s.logits[best]) best = i;
  WT_ASSERT_INT_EQ(r.token, best);
}

/* A sampler without the capabilities, through the host's wrapper: the constraint holds. */
static void test_host_fallback(void) {
  weir_sampler_call call, direct;
  weir_sampler_call_init(&call, g_nocaps, g_device);
  weir_sampler_call_init(&direct, g_default, g_device);
  for (int round = 0; round < 20; round++) {
    setup s;
    make(&s, 0.0f);
    double lp[V];
    reference(&s, lp);
    /* Logits in the device's memory, as the engine has them. */
    const weir_device_ops *dev = g_device->ops;
    void *dl = NULL;
    CU_ASSERT_FATAL(dev->alloc(g_device->self, 2 * sizeof s.logits, &dl) == 0);
    weir_sampling_params plain = {.struct_size = sizeof plain, .top_p = 1.0f,
                                  .repetition_penalty = 1.0f, .num_logprobs = -1};
    weir_sampling_row rows[2] = {{.params = &plain}, {.params = &s.p}};
    dev->copy_h2d(g_device->self, dl, s.logits, sizeof s.logits);
    dev->copy_h2d(g_device->self, (float *)dl + V, s.logits, sizeof s.logits);
    weir_sample_result r[2];
    WT_ASSERT_INT_EQ(weir_sampler_call_sample(&call, rows, 2, dl, V, r), 0);
    int32_t best = 0;
    for (int i = 1; i < V; i++)
      if (s.logits[i] > s.logits[best]) best = i;
    WT_ASSERT_INT_EQ(r[0].token, best);            /* the unconstrained row untouched */
    WT_ASSERT_INT_EQ(r[1].token, ref_argmax(lp)); /* the constrained one constrained */
    /* probs() too. */
    float pr[2 * V];
    dev->copy_h2d(g_device->self, (float *)dl + V, s.logits, sizeof s.logits);
    WT_ASSERT_INT_EQ(weir_sampler_call_probs(&call, rows + 1, 1, (float *)dl + V, V, pr), 0);
    WT_ASSERT_INT_EQ(pr[ref_argmax(lp)] == 1.0f, 1);
    /* A sampler with the capabilities gets the row as it is, with the same answer. */
    dev->copy_h2d(g_device->self, (float *)dl + V, s.logits, sizeof s.logits);
    weir_sample_result d;
    WT_ASSERT_INT_EQ(weir_sampler_call_sample(&direct, rows + 1, 1, (float *)dl + V, V, &d), 0);
    WT_ASSERT_INT_EQ(d.token, r[1].token);
    /* +100 on an allowed token forces it; the bias is applied once (a double application
     * would not change an argmax, so check the logits the host left behind). */
    s.bias_tok[1] = 200;
    s.bias_val[1] = 100.0f;
    s.mask[200 >> 5] |= 1u << (200 & 31);
    dev->copy_h2d(g_device->self, (float *)dl + V, s.logits, sizeof s.logits);
    WT_ASSERT_INT_EQ(weir_sampler_call_sample(&call, rows + 1, 1, (float *)dl + V, V, &d), 0);
    WT_ASSERT_INT_EQ(d.token, 200);
    float back[V];
    dev->copy_d2h(g_device->self, back, (float *)dl + V, sizeof back);
    CU_ASSERT(fabsf(back[200] - (s.logits[200] + 100.0f)) < 1e-4f);
    CU_ASSERT(fabsf(back[7] - (s.logits[7] + 3.0f)) < 1e-4f);
    for (int i = 0; i < V; i++)
      if (!weir_mask_test(s.mask, i)) CU_ASSERT(isinf(back[i]) && back[i] < 0);
    dev->free(g_device->self, dl);
  }
  /* A bias without its arrays is refused, not applied from NULL. */
  setup s;
  make(&s, 0.0f);
  s.p.logit_bias_values = NULL;
  weir_sample_result r;
  WT_ASSERT_INT_EQ(run_sample(&call, NULL, &s, NULL, &r), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(run_sample(NULL, g_default, &s, NULL, &r), WEIR_E_INVAL);
  weir_sampler_call_free(&call);
  weir_sampler_call_free(&direct);
}

/* Prompt scoring (ABI 1.2): the default sampler's score() and the host's fallback for a
 * sampler without it (nocaps) give, over logits in device memory, the same logprobs and top
 * lists as a double-precision log-softmax computed here; ties list the lower id first, -inf
 * is never listed, and a token outside the vocabulary is refused. */
static void test_score(void) {
  weir_sampler_call call, direct;
  weir_sampler_call_init(&call, g_nocaps, g_device);
  weir_sampler_call_init(&direct, g_default, g_device);
  enum { R = 7, K = 5 };
  float lg[R * V];
  int32_t toks[R];
  for (int r = 0; r < R; r++) {
    for (int i = 0; i < V; i++) lg[r * V + i] = 8.0f * frand() - 4.0f;
    toks[r] = (int32_t)(frand() * V) % V;
  }
  lg[2 * V + 10] = lg[2 * V + 20] = 50.0f; /* a tie at the top */
  for (int i = 0; i < V; i += 3) lg[3 * V + i] = -INFINITY;
  toks[3] = 1;
  const weir_device_ops *dev = g_device->ops;
  void *dl = NULL;
  CU_ASSERT_FATAL(dev->alloc(g_device->self, sizeof lg, &dl) == 0);
  dev->copy_h2d(g_device->self, dl, lg, sizeof lg);
  weir_sample_result a[R], b[R];
  WT_ASSERT_INT_EQ(weir_sampler_call_score(&direct, dl, R, V, toks, K, a), 0);
  WT_ASSERT_INT_EQ(weir_sampler_call_score(&call, dl, R, V, toks, K, b), 0);
  for (int r = 0; r < R; r++) {
    const float *x = lg + r * V;
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, (double)x[i]);
    for (int i = 0; i < V; i++) sum += exp((double)x[i] - mx);
    const double lse = mx + log(sum);
    for (int k = 0; k < 2; k++) {
      const weir_sample_result *o = k ? &b[r] : &a[r];
      WT_ASSERT_INT_EQ(o->token, toks[r]);
      CU_ASSERT(fabs((double)o->logprob - ((double)x[toks[r]] - lse)) < 1e-5);
      WT_ASSERT_INT_EQ(o->num_top, K);
      for (int t = 0; t < o->num_top; t++) {
        CU_ASSERT(x[o->top_tokens[t]] > -INFINITY);
        CU_ASSERT(fabs((double)o->top_logprobs[t] - ((double)x[o->top_tokens[t]] - lse)) < 1e-5);
        if (t > 0) CU_ASSERT(o->top_logprobs[t] <= o->top_logprobs[t - 1]);
      }
      /* Fewer than K tokens beat the list's last entry: nothing better was left out. */
      int above = 0;
      for (int i = 0; i < V; i++) above += x[i] > x[o->top_tokens[K - 1]];
      CU_ASSERT(above < K);
    }
    CU_ASSERT(memcmp(a[r].top_tokens, b[r].top_tokens, sizeof(int32_t) * K) == 0);
  }
  WT_ASSERT_INT_EQ(a[2].top_tokens[0], 10);
  WT_ASSERT_INT_EQ(a[2].top_tokens[1], 20);
  CU_ASSERT(isfinite(a[3].logprob)); /* token 1 is finite; 0, 3, 6, ... are -inf */
  toks[3] = 3;
  WT_ASSERT_INT_EQ(weir_sampler_call_score(&direct, dl, R, V, toks, K, a), 0);
  CU_ASSERT(isinf(a[3].logprob) && a[3].logprob < 0);
  toks[0] = V;
  WT_ASSERT_INT_EQ(weir_sampler_call_score(&direct, dl, R, V, toks, K, a), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_sampler_call_score(&call, dl, R, V, toks, K, b), WEIR_E_INVAL);
  toks[0] = 0;
  WT_ASSERT_INT_EQ(weir_sampler_call_score(&direct, dl, R, V, toks, WEIR_MAX_LOGPROBS + 1, a),
                   WEIR_E_INVAL);
  dev->free(g_device->self, dl);
  weir_sampler_call_free(&call);
  weir_sampler_call_free(&direct);
}

/* The suite's cleanup (not a test: it asserts nothing). */
static int suite_cleanup(void) {
  weir_plugin_unload(g_default);
  weir_plugin_unload(g_nocaps);
  weir_plugin_unload(g_device);
  return 0;
}

int main(void) {
  static const wt_test tests[] = {
      {"the plugins load; caps as declared", test_load},
      {"default: greedy, logprobs and top list under mask and bias", test_default_greedy_and_logprobs},
      {"default: probs() and draws under mask and bias", test_default_probs_and_draws},
      {"default: 1.0-sized params keep the 1.1 fields out", test_old_params_ignored},
      {"host fallback for a sampler without the caps", test_host_fallback},
      {"prompt scoring: score() and the host's fallback", test_score},
      {NULL, NULL}};
  return wt_run_suite_ex("sampler_constraints", tests, NULL, suite_cleanup);
}
