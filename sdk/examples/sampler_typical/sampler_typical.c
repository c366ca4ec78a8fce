/* typical: a weir sampler plugin implementing locally typical sampling (Meister et al.,
 * "Locally Typical Sampling", 2022), built out of tree against the installed weir SDK.
 *
 * Per row: the request's logit bias is added; suppressed tokens and tokens outside the row's
 * allowed-token mask (structured output, ABI 1.1) get -inf; temperature 0 is greedy (argmax, ties to the lowest
 * id); otherwise the logits are divided by the temperature and turned into probabilities p,
 * whose entropy is H = -sum p log p. Tokens are ranked by how far their surprisal -log p is
 * from H (the "typical" ones first), and the shortest prefix of that ranking whose mass
 * reaches typical_p (at least min_keep tokens) is kept, renormalised, and drawn from with the
 * row's xoshiro256** state, which advances exactly one step. The reported logprob is the
 * log-softmax of the logits before temperature (the model's own distribution).
 *
 * Options ([sampler] table): typical_p (float in [0.000001, 1], default 0.95), min_keep (int
 * in [1, 1000], default 1). The request's top_k / top_p / min_p and penalties are not
 * applied by this example. Rows are processed one after another; scratch memory comes from
 * the host (accounted to the plugin). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weir/rng.h>
#include <weir/sampler.h>

static const weir_option_desc k_options[] = {
    {.key = "typical_p", .type = WEIR_OPT_FLOAT, .help = "mass of the most typical tokens kept",
     .def_float = 0.95, .min = 0.000001, .max = 1.0},
    {.key = "min_keep", .type = WEIR_OPT_INT, .help = "tokens kept at least",
     .def_int = 1, .min = 1, .max = 1000},
};

typedef struct cand {
  float dist; /* |surprisal - entropy| */
  int32_t id;
} cand;

typedef struct typical {
  const weir_host *host;
  double typical_p;
  int32_t min_keep;
  /* Scratch, grown to the largest vocab seen. */
  double *p;
  cand *c;
  int32_t cap;
} typical;

static int ty_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  /* Options by key (ABI 1.5): the host checks each key against k_options and its type, so
   * reordering the table cannot swap the values. */
  double typical_p;
  int64_t min_keep;
  int rc;
  if ((rc = weir_option_float(host, "typical_p", &typical_p)) != WEIR_OK ||
      (rc = weir_option_int(host, "min_keep", &min_keep)) != WEIR_OK)
    return rc;
  typical *t = host->alloc(host->ctx, sizeof *t, 0);
  if (!t) {
    host->set_error(host->ctx, "typical: out of memory for the instance");
    return WEIR_E_NOMEM;
  }
  memset(t, 0, sizeof *t);
  t->host = host;
  t->typical_p = typical_p;
  t->min_keep = (int32_t)min_keep;
  *self = t;
  return WEIR_OK;
}

static void ty_fini(void *self) {
  typical *t = self;
  t->host->free(t->host->ctx, t->p);
  t->host->free(t->host->ctx, t->c);
  t->host->free(t->host->ctx, t);
}

static int reserve(typical *t, int32_t vocab) {
  if (vocab <= t->cap) return WEIR_OK;
  double *p = t->host->alloc(t->host->ctx, sizeof *p * (size_t)vocab, 64);
  cand *c = t->host->alloc(t->host->ctx, sizeof *c * (size_t)vocab, 64);
  if (!p || !c) {
    t->host->free(t->host->ctx, p);
    t->host->free(t->host->ctx, c);
    return WEIR_E_NOMEM;
  }
  t->host->free(t->host->ctx, t->p);
  t->host->free(t->host->ctx, t->c);
  t->p = p;
  t->c = c;
  t->cap = vocab;
  return WEIR_OK;
}

static int cmp_cand(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->dist != y->dist) return x->dist < y->dist ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* log-softmax of l[id] over the row. */
static float log_softmax_at(const float *l, int32_t vocab, int32_t id) {
  float mx = -INFINITY;
  for (int32_t i = 0; i < vocab; i++) mx = l[i] > mx ? l[i] : mx;
  double s = 0;
  for (int32_t i = 0; i < vocab; i++) s += exp((double)l[i] - mx);
  return (float)((double)l[id] - mx - log(s));
}

/* Logit bias and the allowed-token mask (ABI 1.1). A host older than 1.1 hands params without
 * these fields: WEIR_SAMPLING_HAS checks struct_size before reading them. Declaring
 * WEIR_SAMPLER_CAP_ALLOWED | WEIR_SAMPLER_CAP_LOGIT_BIAS in the ops below promises this;
 * without the caps the host would apply both itself before calling. */
static void apply_constraints(const weir_sampling_params *p, float *l, int32_t vocab) {
  if (!p) return;
  if (WEIR_SAMPLING_HAS(p, num_logit_bias))
    for (int32_t i = 0; i < p->num_logit_bias; i++) {
      const int32_t id = p->logit_bias_tokens[i];
      if (id >= 0 && id < vocab) l[id] += p->logit_bias_values[i];
    }
  if (WEIR_SAMPLING_HAS(p, allowed) && p->allowed)
    for (int32_t i = 0; i < vocab; i++)
      if (!weir_mask_test(p->allowed, i)) l[i] = -INFINITY;
}

static int sample_row(typical *t, const weir_sampling_row *row, float *l, int32_t vocab,
                      weir_sample_result *out) {
  if (row && row->params && WEIR_SAMPLING_HAS(row->params, num_logit_bias) &&
      row->params->num_logit_bias > 0 &&
      (!row->params->logit_bias_tokens || !row->params->logit_bias_values))
    return WEIR_E_INVAL;
  apply_constraints(row ? row->params : NULL, l, vocab);
  for (int32_t i = 0; row && i < row->num_suppress_tokens; i++) {
    int32_t id = row->suppress_tokens[i];
    if (id >= 0 && id < vocab) l[id] = -INFINITY;
  }
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; i++)
    if (l[i] > l[best]) best = i;
  float temp = row && row->params ? row->params->temperature : 1.0f;
  memset(out, 0, sizeof *out);
  if (temp <= 0 || !row || !row->rng_state) {
    out->token = best;
    out->logprob = log_softmax_at(l, vocab, best);
    return WEIR_OK;
  }
  double sum = 0, entropy = 0;
  for (int32_t i = 0; i < vocab; i++) {
    t->p[i] = exp(((double)l[i] - l[best]) / temp);
    sum += t->p[i];
  }
  for (int32_t i = 0; i < vocab; i++) {
    t->p[i] /= sum;
    if (t->p[i] > 0) entropy -= t->p[i] * log(t->p[i]);
  }
  int32_t n = 0;
  for (int32_t i = 0; i < vocab; i++) {
    if (t->p[i] <= 0) continue;
    t->c[n].dist = (float)fabs(-log(t->p[i]) - entropy);
    t->c[n].id = i;
    n++;
  }
  qsort(t->c, (size_t)n, sizeof *t->c, cmp_cand);
  double mass = 0;
  int32_t keep = 0;
  while (keep < n && (mass < t->typical_p || keep < t->min_keep)) mass += t->p[t->c[keep++].id];
  double u = weir_rng_uniform(row->rng_state) * mass;
  int32_t pick = t->c[keep - 1].id;
  for (int32_t k = 0; k < keep; k++) {
    u -= t->p[t->c[k].id];
    if (u < 0) {
      pick = t->c[k].id;
      break;
    }
  }
  out->token = pick;
  out->logprob = log_softmax_at(l, vocab, pick);
  return WEIR_OK;
}

static int ty_sample(void *self, const weir_sampling_row *rows, int32_t num_rows, float *logits,
                     int32_t vocab, weir_sample_result *out) {
  typical *t = self;
  if (vocab <= 0) return WEIR_E_INVAL;
  int rc = reserve(t, vocab);
  if (rc != WEIR_OK) return rc;
  for (int32_t r = 0; r < num_rows; r++) {
    rc = sample_row(t, rows ? &rows[r] : NULL, logits + (size_t)r * (size_t)vocab, vocab, &out[r]);
    if (rc != WEIR_OK) return rc;
  }
  return WEIR_OK;
}

static const weir_sampler_ops k_ops = {
    .struct_size = sizeof(weir_sampler_ops),
    .sample = ty_sample,
    .probs = NULL, /* optional: not implemented */
    .caps = WEIR_SAMPLER_CAP_ALLOWED | WEIR_SAMPLER_CAP_LOGIT_BIAS, /* ABI 1.1 */
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_SAMPLER,
    .name = "typical",
    .version = "1.1.0",
    .description = "locally typical sampling (example plugin built out of tree)",
    .devices = WEIR_DEVICE_CPU, /* it reads logits as host memory: cpu only */
    .dtypes = 0,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = ty_init,
    .fini = ty_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
