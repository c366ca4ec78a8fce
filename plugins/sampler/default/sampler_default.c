/* default: the reference sampler.
 *
 * Per row, in this order (the order sampler.h fixes):
 *   0. logit bias (ABI 1.1): logit[id] += bias for every listed pair;
 *   1. suppression and the allowed mask (ABI 1.1): listed ids and ids outside the mask get
 *      -inf;
 *   2. repetition penalty (HF style) on every distinct id of prompt + output: a positive
 *      logit is divided by the penalty, a negative one multiplied;
 *   3. presence and frequency penalties (OpenAI style) on output ids:
 *      logit -= presence + frequency * count;
 *   -> logprobs are the log-softmax of these logits (before temperature and truncation);
 *   4. temperature 0: greedy argmax, ties to the lowest id, no random number consumed;
 *   5. otherwise logits / temperature, then top-k (ties broken by lower id), top-p (the
 *      smallest most-likely-first prefix whose mass reaches top_p, renormalised after
 *      top-k, at least one token), min-p (keep p >= min_p * p_max);
 *   6. one draw from the row's xoshiro256** state, which advances by exactly one step.
 * Rows are independent and run in parallel on the host's pool, each with its own scratch,
 * so a row's result depends only on its own logits, parameters and state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.h"
#include "sample_weights.h"
#include "softmax.h"
#include "weir/rng.h"
#include "weir/sampler.h"

typedef struct cand {
  float v;     /* logit / temperature */
  int32_t id;
  float w;     /* exp(v - max v), once computed */
} cand;

/* One thread's working memory, sized for the largest vocab seen. */
typedef struct scratch {
  float *buf;
  cand *c;
  int32_t *counts;
  uint8_t *seen;
  float *w;     /* the untruncated path's weights, in id order */
  double *bsum; /* and their block sums (sample_weights.h) */
  int32_t cap;
} scratch;

typedef struct sampler {
  const weir_host *host;
  scratch *ws;
  int num_ws;
} sampler;

static int sp_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  sampler *s = calloc(1, sizeof(*s));
  if (!s) return WEIR_E_NOMEM;
  s->host = host;
  *self = s;
  return WEIR_OK;
}

/* Scratch goes through the host's allocator so it is accounted to this plugin. */
static void *xalloc(sampler *s, size_t n) {
  void *p = s->host && s->host->alloc ? s->host->alloc(s->host->ctx, n, 64) : malloc(n);
  if (p) memset(p, 0, n);
  return p;
}

static void xfree(sampler *s, void *p) {
  if (s->host && s->host->free) s->host->free(s->host->ctx, p);
  else free(p);
}

static void scratch_free(sampler *s, scratch *w) {
  xfree(s, w->buf);
  xfree(s, w->c);
  xfree(s, w->counts);
  xfree(s, w->seen);
  xfree(s, w->w);
  xfree(s, w->bsum);
  memset(w, 0, sizeof(*w));
}

static void sp_fini(void *self) {
  sampler *s = self;
  if (!s) return;
  for (int i = 0; i < s->num_ws; i++) scratch_free(s, &s->ws[i]);
  free(s->ws);
  free(s);
}

/* Makes `n` scratch slots for `vocab`; counts and seen start (and are kept) all zero. */
static int ensure_scratch(sampler *s, int n, int32_t vocab) {
  if (n > s->num_ws) {
    scratch *ws = realloc(s->ws, (size_t)n * sizeof(*ws));
    if (!ws) return WEIR_E_NOMEM;
    memset(ws + s->num_ws, 0, (size_t)(n - s->num_ws) * sizeof(*ws));
    s->ws = ws;
    s->num_ws = n;
  }
  for (int i = 0; i < n; i++) {
    scratch *w = &s->ws[i];
    if (w->cap >= vocab) continue;
    scratch_free(s, w);
    w->buf = xalloc(s, (size_t)vocab * sizeof(float));
    w->c = xalloc(s, (size_t)vocab * sizeof(cand));
    w->counts = xalloc(s, (size_t)vocab * sizeof(int32_t));
    w->seen = xalloc(s, (size_t)vocab);
    w->w = xalloc(s, (size_t)vocab * sizeof(float));
    w->bsum = xalloc(s, (size_t)weir_sample_blocks(vocab) * sizeof(double));
    if (!w->buf || !w->c || !w->counts || !w->seen || !w->w || !w->bsum) {
      scratch_free(s, w);
      return WEIR_E_NOMEM;
    }
    w->cap = vocab;
  }
  return WEIR_OK;
}

/* ---- ordering and selection ------------------------------------------------------------- */

/* a ranks before b: larger value, then lower id. A total order, so every selection and
 * sort below gives one well-defined answer. */
static inline int before(const cand *a, const cand *b) {
  return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static void swap_c(cand *a, cand *b) {
  cand t = *a;
  *a = *b;
  *b = t;
}

/* Rearranges c[0..n) so that its first k entries are the k best (in no order). Expected
 * linear time: quickselect with a median-of-three pivot. */
static void select_top(cand *c, int32_t n, int32_t k) {
  int32_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (before(&c[hi], &c[lo])) swap_c(&c[lo], &c[hi]);
    if (before(&c[mid], &c[lo])) swap_c(&c[mid], &c[lo]);
    if (before(&c[hi], &c[mid])) swap_c(&c[mid], &c[hi]);
    cand pivot = c[mid];
    int32_t i = lo, j = hi;
    while (i <= j) {
      while (before(&c[i], &pivot)) i++;
      while (before(&pivot, &c[j])) j--;
      if (i <= j) swap_c(&c[i++], &c[j--]);
    }
    if (k - 1 <= j) hi = j;
    else if (k - 1 >= i) lo = i;
    else break;
  }
}

/* ---- one row ------------------------------------------------------------------------------ */

typedef struct row_out {
  int greedy;
  int dense;         /* untruncated: the weights are w->w, every id, in id order */
  int32_t last;      /* dense: the last id that can be drawn (the walk's fallback) */
  int32_t token;     /* greedy choice */
  int32_t n_kept;    /* candidates kept, in c[0..n_kept) */
  double total;      /* sum of the kept weights */
  float zmax;        /* the largest c.v */
} row_out;

/* Step 1's mask: every id whose bit is clear gets -inf, a word of 32 ids at a time. */
static void apply_allowed(float *x, const uint32_t *allowed, int32_t vocab) {
  const int32_t words = (int32_t)WEIR_MASK_WORDS(vocab);
  for (int32_t wi = 0; wi < words; wi++) {
    uint32_t off = ~allowed[wi];
    if (wi == words - 1 && (vocab & 31)) off &= (1u << (vocab & 31)) - 1u;
    while (off) {
      x[wi * 32 + __builtin_ctz(off)] = -INFINITY;
      off &= off - 1u;
    }
  }
}

/* Whether steps 0-3 change anything for this row: if not, the row is read where it lies, not
 * copied (a copy of a 151,936-id row was a third of its sampling). */
static int changes_logits(const weir_sampling_row *row) {
  const weir_sampling_params *p = row->params;
  return (WEIR_SAMPLING_HAS(p, num_logit_bias) && p->num_logit_bias > 0) ||
         (WEIR_SAMPLING_HAS(p, allowed) && p->allowed) || row->num_suppress_tokens > 0 ||
         p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
         p->frequency_penalty != 0.0f;
}

/* Steps 0-3 on w->buf. Returns WEIR_E_INVAL for invalid parameters. */
static int apply_penalties(scratch *w, const weir_sampling_row *row, int32_t vocab) {
  const weir_sampling_params *p = row->params;
  float *x = w->buf;
  if (WEIR_SAMPLING_HAS(p, num_logit_bias))
    for (int32_t i = 0; i < p->num_logit_bias; i++) {
      int32_t t = p->logit_bias_tokens[i];
      if (t >= 0 && t < vocab) x[t] += p->logit_bias_values[i];
    }
  if (WEIR_SAMPLING_HAS(p, allowed) && p->allowed) apply_allowed(x, p->allowed, vocab);
  for (int32_t i = 0; i < row->num_suppress_tokens; i++) {
    int32_t t = row->suppress_tokens[i];
    if (t >= 0 && t < vocab) x[t] = -INFINITY;
  }
  if (p->repetition_penalty != 1.0f) {
    if (!(p->repetition_penalty > 0.0f)) return WEIR_E_INVAL;
    const float rp = p->repetition_penalty;
    for (int pass = 0; pass < 2; pass++) {
      const int32_t *toks = pass ? row->output_tokens : row->prompt_tokens;
      int32_t n = pass ? row->num_output_tokens : row->num_prompt_tokens;
      for (int32_t i = 0; i < n; i++) {
        int32_t t = toks[i];
        if (t < 0 || t >= vocab || w->seen[t]) continue;
        w->seen[t] = 1;
        x[t] = x[t] > 0.0f ? x[t] / rp : x[t] * rp;
      }
    }
    for (int pass = 0; pass < 2; pass++) {
      const int32_t *toks = pass ? row->output_tokens : row->prompt_tokens;
      int32_t n = pass ? row->num_output_tokens : row->num_prompt_tokens;
      for (int32_t i = 0; i < n; i++)
        if (toks[i] >= 0 && toks[i] < vocab) w->seen[toks[i]] = 0;
    }
  }
  if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
    for (int32_t i = 0; i < row->num_output_tokens; i++) {
      int32_t t = row->output_tokens[i];
      if (t >= 0 && t < vocab) w->counts[t]++;
    }
    for (int32_t i = 0; i < row->num_output_tokens; i++) {
      int32_t t = row->output_tokens[i];
      if (t < 0 || t >= vocab || w->counts[t] == 0) continue;
      x[t] -= p->presence_penalty + p->frequency_penalty * (float)w->counts[t];
      w->counts[t] = 0; /* applied once, and the array is left zero */
    }
  }
  return WEIR_OK;
}

/* Partitions c[0..n) so that its first K entries are the smallest most-likely-first set
 * whose weight reaches `target` (K >= 1), and returns K: the nucleus of top-p without
 * sorting. A quickselect on the order of before() that carries the weight of everything
 * already known to rank above the current range. Expected linear time. */
static int32_t select_mass(cand *c, int32_t n, double target) {
  int32_t lo = 0, hi = n;
  double above = 0.0; /* weight of c[0..lo), all ranking above c[lo..hi) */
  while (hi - lo > 1) {
    /* median-of-three pivot moved to hi - 1, then Lomuto partition of [lo, hi - 1) */
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(&c[mid], &c[lo])) swap_c(&c[mid], &c[lo]);
    if (before(&c[last], &c[lo])) swap_c(&c[last], &c[lo]);
    if (before(&c[mid], &c[last])) swap_c(&c[mid], &c[last]);
    const cand pivot = c[last];
    int32_t store = lo;
    double sum = 0.0;
    for (int32_t i = lo; i < last; i++)
      if (before(&c[i], &pivot)) {
        sum += c[i].w;
        swap_c(&c[i], &c[store++]);
      }
    swap_c(&c[store], &c[last]); /* pivot now at `store` */
    if (above + sum >= target && store > lo) {
      hi = store; /* the cut falls inside the better part */
    } else if (above + sum + pivot.w >= target) {
      return store + 1;
    } else {
      above += sum + pivot.w;
      lo = store + 1;
    }
  }
  if (lo < n && (above < target || lo == 0)) return lo + 1;
  return lo > 0 ? lo : 1;
}

/* Steps 4-5 on the row x (after steps 0-3): decides the greedy token, or the kept candidates
 * c[0..n_kept) with weights, or (o->dense) the weights of every id in w->w, in id order. */
static void truncate_row(scratch *w, const float *x, const weir_sampling_params *p,
                         int32_t vocab, row_out *o) {
  memset(o, 0, sizeof(*o));
  if (p->temperature == 0.0f) {
    /* The vector pick's rule is this loop's wherever some value is above -inf (the first of
     * the largest, NaN never wins); a row without one keeps the loop's answer. */
    int64_t best = weir_argmax_f32(x, vocab, NULL);
    if (best < 0) {
      best = 0;
      for (int32_t i = 1; i < vocab; i++)
        if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i;
    }
    o->greedy = 1;
    o->token = (int32_t)best;
    return;
  }
  const float inv_t = 1.0f / p->temperature;
  /* No truncation (the API's defaults): every id keeps its weight, in id order, so the
   * weights need no candidate list and come from one vectorised pass (sample_weights.h).
   * The walk of the draw is the same as over the candidates below. */
  if ((p->top_k <= 0 || p->top_k >= vocab) && !(p->top_p < 1.0f) && !(p->min_p > 0.0f)) {
    float zmax;
    const int64_t last = weir_sample_weights(x, vocab, inv_t, w->w, w->bsum, &zmax);
    if (last < 0) { /* everything suppressed: the rule below */
      o->greedy = 1;
      o->token = 0;
      return;
    }
    if (zmax < INFINITY) {
      double total = 0.0;
      for (int64_t b = 0; b < weir_sample_blocks(vocab); b++) total += w->bsum[b];
      o->dense = 1;
      o->last = (int32_t)last;
      o->total = total;
      o->zmax = zmax;
      return;
    } /* a logit of +inf: the candidate rule below */
  }
  cand *c = w->c;
  int32_t n = 0;
  float zmax = -INFINITY;
  for (int32_t i = 0; i < vocab; i++) {
    if (!(x[i] > -INFINITY)) continue; /* -inf and NaN can never be drawn */
    float z = x[i] * inv_t;
    c[n].v = z;
    c[n].id = i;
    n++;
    if (z > zmax) zmax = z;
  }
  if (n == 0) {
    /* Everything suppressed: nothing can be drawn; fall back to the lowest id. */
    o->greedy = 1;
    o->token = 0;
    return;
  }
  if (p->top_k > 0 && p->top_k < n) {
    select_top(c, n, p->top_k);
    n = p->top_k;
  }
  double total = 0.0;
  for (int32_t i = 0; i < n; i++) {
    c[i].w = expf(c[i].v - zmax);
    total += c[i].w;
  }
  if (p->top_p < 1.0f) {
    /* Keep a token while the mass ranked above it is below top_p (renormalised after
     * top-k): the smallest prefix whose mass reaches top_p, at least one token. */
    double target = (double)(p->top_p > 0.0f ? p->top_p : 0.0f) * total;
    n = select_mass(c, n, target);
  }
  if (p->min_p > 0.0f) {
    /* p_i >= min_p * p_max  <=>  z_i >= z_max + log(min_p); the max is always kept. */
    const float thr = zmax + logf(p->min_p);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
      if (c[i].v >= thr || c[i].v == zmax) c[m++] = c[i];
    n = m;
  }
  if (p->top_p < 1.0f || p->min_p > 0.0f) {
    total = 0.0;
    for (int32_t i = 0; i < n; i++) total += c[i].w;
  }
  o->n_kept = n;
  o->total = total;
  o->zmax = zmax;
}

typedef struct batch_ctx {
  sampler *s;
  const weir_sampling_row *rows;
  const float *logits;
  int32_t vocab;
  weir_sample_result *out; /* sample() */
  float *probs;            /* probs() */
  int failed;
} batch_ctx;

static void sample_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  batch_ctx *b = arg;
  scratch *w = &b->s->ws[thread];
  for (int64_t r = begin; r < end; r++) {
    const weir_sampling_row *row = &b->rows[r];
    const int32_t vocab = b->vocab;
    const float *x = b->logits + r * vocab;
    if (changes_logits(row)) {
      memcpy(w->buf, x, (size_t)vocab * sizeof(float));
      if (apply_penalties(w, row, vocab) != WEIR_OK) {
        __atomic_store_n(&b->failed, 1, __ATOMIC_RELAXED);
        continue;
      }
      x = w->buf;
    }
    const weir_sampling_params *p = row->params;
    double lse = 0.0;
    weir_sample_result *res = b->out ? &b->out[r] : NULL;
    if (res) {
      memset(res, 0, sizeof(*res));
      if (p->num_logprobs >= 0) {
        lse = weir_logsumexp(x, vocab);
        if (p->num_logprobs > 0)
          res->num_top = weir_sampler_top_logprobs(x, vocab, p->num_logprobs, lse,
                                                   res->top_tokens, res->top_logprobs);
      }
    }
    row_out o;
    truncate_row(w, x, p, vocab, &o);
    if (b->probs) {
      float *pr = b->probs + r * vocab;
      memset(pr, 0, (size_t)vocab * sizeof(float));
      if (o.greedy) {
        pr[o.token] = 1.0f;
      } else if (o.dense) {
        for (int32_t i = 0; i < vocab; i++) pr[i] = (float)((double)w->w[i] / o.total);
      } else {
        for (int32_t i = 0; i < o.n_kept; i++)
          pr[w->c[i].id] = (float)((double)w->c[i].w / o.total);
      }
      continue;
    }
    int32_t token = o.token;
    if (o.dense) {
      const int64_t i =
          weir_sample_pick(w->w, w->bsum, vocab, weir_rng_uniform(row->rng_state) * o.total);
      token = i >= 0 ? (int32_t)i : o.last;
    } else if (!o.greedy) {
      double target = weir_rng_uniform(row->rng_state) * o.total, cum = 0.0;
      token = w->c[o.n_kept - 1].id;
      for (int32_t i = 0; i < o.n_kept; i++) {
        cum += w->c[i].w;
        if (cum > target) {
          token = w->c[i].id;
          break;
        }
      }
    }
    res->token = token;
    res->logprob = p->num_logprobs >= 0 ? (float)((double)x[token] - lse) : 0.0f;
  }
}

static int run_batch(sampler *s, batch_ctx *b, int32_t num_rows) {
  const weir_host *h = s->host;
  if (num_rows == 0) return WEIR_OK;
  if (!b->rows || !b->logits || num_rows < 0 || b->vocab <= 0) return WEIR_E_INVAL;
  for (int32_t r = 0; r < num_rows; r++)
    if (!weir_sampling_row_valid(&b->rows[r], b->out != NULL)) return WEIR_E_INVAL;
  int threads = h && h->num_threads && h->parallel_for ? h->num_threads(h->ctx) : 1;
  if (threads < 1) threads = 1;
  /* One row of a small vocab is not worth a wake-up. */
  if ((int64_t)num_rows * b->vocab < 65536 || num_rows == 1) threads = 1;
  int rc = ensure_scratch(s, threads, b->vocab);
  if (rc != WEIR_OK) return rc;
  if (threads > 1) h->parallel_for(h->ctx, num_rows, 1, sample_chunk, b);
  else sample_chunk(b, 0, num_rows, 0);
  return b->failed ? WEIR_E_INVAL : WEIR_OK;
}

static int sp_sample(void *self, const weir_sampling_row *rows, int32_t num_rows, float *logits,
                     int32_t vocab, weir_sample_result *out) {
  if (!out && num_rows > 0) return WEIR_E_INVAL;
  batch_ctx b = {.s = self, .rows = rows, .logits = logits, .vocab = vocab, .out = out};
  return run_batch(self, &b, num_rows);
}

static int sp_probs(void *self, const weir_sampling_row *rows, int32_t num_rows, float *logits,
                    int32_t vocab, float *probs) {
  if (!probs && num_rows > 0) return WEIR_E_INVAL;
  batch_ctx b = {.s = self, .rows = rows, .logits = logits, .vocab = vocab, .probs = probs};
  return run_batch(self, &b, num_rows);
}

typedef struct score_ctx {
  const float *logits;
  int32_t vocab, num_top;
  const int32_t *tokens;
  weir_sample_result *out;
} score_ctx;

static void score_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const score_ctx *c = arg;
  for (int64_t r = begin; r < end; r++)
    (void)weir_sampler_score_row(c->logits + r * c->vocab, c->vocab, c->tokens[r], c->num_top,
                                 &c->out[r]);
}

/* Prompt rows come many at a time (a prefill chunk), so they are spread over the pool. */
static int sp_score(void *self, const float *logits, int32_t num_rows, int32_t vocab,
                    const int32_t *tokens, int32_t num_top, weir_sample_result *out) {
  const sampler *s = self;
  if (num_rows == 0) return WEIR_OK;
  if (!logits || !tokens || !out || num_rows < 0 || vocab <= 0 || num_top < 0 ||
      num_top > WEIR_MAX_LOGPROBS)
    return WEIR_E_INVAL;
  for (int32_t r = 0; r < num_rows; r++)
    if (tokens[r] < 0 || tokens[r] >= vocab) return WEIR_E_INVAL;
  score_ctx c = {logits, vocab, num_top, tokens, out};
  const weir_host *h = s->host;
  if (num_rows > 1 && h && h->parallel_for) h->parallel_for(h->ctx, num_rows, 1, score_chunk, &c);
  else score_chunk(&c, 0, num_rows, 0);
  return WEIR_OK;
}

static const weir_sampler_ops k_ops = {
    .struct_size = sizeof(weir_sampler_ops),
    .sample = sp_sample,
    .probs = sp_probs,
    .caps = WEIR_SAMPLER_CAP_ALLOWED | WEIR_SAMPLER_CAP_LOGIT_BIAS,
    .score = sp_score,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_SAMPLER,
    .name = "default",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "logit bias, allowed-token masks, penalties, greedy, temperature, top-k, "
                   "top-p, min-p; xoshiro256** draws",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = 0,
    .options = NULL,
    .num_options = 0,
    .init = sp_init,
    .fini = sp_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
