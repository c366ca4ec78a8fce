/* Summaries of runs and the A/B decision rule.
 *
 * Per request: TTFT = first content chunk - send; every gap between consecutive content
 * chunks is one inter-token latency sample; TPOT = (end - TTFT) / (output tokens - 1);
 * E2E = end - send, where the end is data: [DONE]. Only successful requests enter the
 * latency distributions; failed ones are counted by kind. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(const double *v, int64_t n, double q) {
  if (n == 0) return 0;
  double pos = q * (double)(n - 1);
  int64_t lo = (int64_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
  double f = pos - (double)lo;
  return v[lo] + (v[hi] - v[lo]) * f;
}

void weir__bench_dist_compute(double *v, int64_t n, weir_bench_dist *out) {
  memset(out, 0, sizeof *out);
  out->count = n;
  if (n == 0) return;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += v[i];
  out->mean = sum / (double)n;
  out->min = v[0];
  out->max = v[n - 1];
  out->median = pct(v, n, 0.5);
  out->p90 = pct(v, n, 0.90);
  out->p95 = pct(v, n, 0.95);
  out->p99 = pct(v, n, 0.99);
}

static int64_t out_tokens(const weir_bench_record *r) {
  return r->usage_completion >= 0 ? r->usage_completion : r->num_chunks;
}

double *weir__bench_collect(weir_bench_run *const *runs, int num_runs, int itl, int64_t *n) {
  int64_t total = 0;
  for (int k = 0; k < num_runs; k++)
    for (int64_t i = 0; i < runs[k]->num_recs; i++) {
      const weir_bench_record *r = &runs[k]->recs[i];
      if (r->ok && r->num_chunks > 0) total += itl ? r->num_chunks - 1 : 1;
    }
  double *v = malloc(sizeof *v * (size_t)(total ? total : 1));
  *n = 0;
  if (!v) return NULL;
  for (int k = 0; k < num_runs; k++)
    for (int64_t i = 0; i < runs[k]->num_recs; i++) {
      const weir_bench_record *r = &runs[k]->recs[i];
      if (!r->ok || r->num_chunks == 0) continue;
      if (!itl) v[(*n)++] = r->chunk_ms[0] - r->start_ms;
      else
        for (int j = 1; j < r->num_chunks; j++) v[(*n)++] = r->chunk_ms[j] - r->chunk_ms[j - 1];
    }
  return v;
}

int weir__bench_summarize(weir_bench_run *const *runs, int num_runs, const weir_bench_slo *slo,
                          weir_bench_summary *out) {
  memset(out, 0, sizeof *out);
  int rc = WEIR_OK;
  int64_t nrec = 0;
  for (int k = 0; k < num_runs; k++) nrec += runs[k]->num_recs;
  double *ttft = malloc(sizeof(double) * (size_t)(nrec + 1));
  double *tpot = malloc(sizeof(double) * (size_t)(nrec + 1));
  double *e2e = malloc(sizeof(double) * (size_t)(nrec + 1));
  double *plen = malloc(sizeof(double) * (size_t)(nrec + 1));
  int64_t npl = 0;
  int64_t nitl = 0, nt = 0, np = 0, ne = 0;
  double *itl = weir__bench_collect(runs, num_runs, 1, &nitl);
  if (!ttft || !tpot || !e2e || !itl || !plen) {
    rc = WEIR_E_NOMEM;
    goto free_arrays;
  }
  int usage_out = 0, chunk_out = 0, usage_in = 0, est_in = 0;
  double lag_sum = 0, longest = 0;
  for (int k = 0; k < num_runs; k++) {
    const weir_bench_run *run = runs[k];
    out->duration_s += run->duration_s;
    if (run->duration_s > longest) longest = run->duration_s;
    if (run->interrupted) out->interrupted = 1;
    lag_sum += run->sched_lag_mean_ms * (double)run->num_recs;
    if (run->sched_lag_max_ms > out->sched_lag_max_ms) out->sched_lag_max_ms = run->sched_lag_max_ms;
    out->conns_opened += run->conns_opened;
    out->retries += run->retries;
    for (int e = 0; e < WEIR_BENCH_ERR_COUNT; e++)
      if (!out->err_example[e]) out->err_example[e] = run->err_example[e];
    for (int64_t i = 0; i < run->num_recs; i++) {
      const weir_bench_record *r = &run->recs[i];
      out->sent++;
      if (!r->ok) {
        out->failed++;
        if (r->err >= 0 && r->err < WEIR_BENCH_ERR_COUNT) out->errors[r->err]++;
        /* The distinct reasons, first seen first: what to fix is usually one of them. */
        const char *why = r->error ? r->error : "(no message)";
        int d = 0;
        while (d < out->num_distinct && strcmp(out->distinct_errors[d], why)) d++;
        if (d < out->num_distinct) {
          out->distinct_counts[d]++;
        } else if (out->num_distinct < WEIR_BENCH_MAX_DISTINCT) {
          out->distinct_errors[out->num_distinct] = why;
          out->distinct_counts[out->num_distinct++] = 1;
        } else {
          out->other_errors++;
        }
        continue;
      }
      out->completed++;
      int64_t o = out_tokens(r);
      if (r->usage_completion >= 0) usage_out = 1;
      else chunk_out = 1;
      if (r->usage_prompt >= 0) {
        usage_in = 1;
        out->input_tokens += r->usage_prompt;
        plen[npl++] = (double)r->usage_prompt;
      } else {
        est_in = 1;
        out->input_tokens += r->expected_input;
      }
      out->output_tokens += o;
      double e = r->end_ms - r->start_ms, t = -1, p = -1;
      e2e[ne++] = e;
      if (r->num_chunks > 0) {
        t = r->chunk_ms[0] - r->start_ms;
        ttft[nt++] = t;
        if (o > 1) {
          p = (r->end_ms - r->chunk_ms[0]) / (double)(o - 1);
          tpot[np++] = p;
        }
      }
      int good = 1;
      if (slo->ttft_ms > 0 && !(t >= 0 && t <= slo->ttft_ms)) good = 0;
      if (slo->tpot_ms > 0 && p > slo->tpot_ms) good = 0;
      if (slo->e2e_ms > 0 && e > slo->e2e_ms) good = 0;
      out->good += good;
    }
  }
  out->output_tokens_source = usage_out && chunk_out ? "mixed" : usage_out ? "usage" : "chunks";
  out->input_tokens_source = usage_in && est_in ? "mixed" : usage_in ? "usage" : "estimate";
  out->sched_lag_mean_ms = nrec ? lag_sum / (double)nrec : 0;
  if (out->duration_s > 0) {
    out->req_per_s = (double)out->completed / out->duration_s;
    out->out_tok_per_s = (double)out->output_tokens / out->duration_s;
    out->total_tok_per_s = (double)(out->output_tokens + out->input_tokens) / out->duration_s;
    out->goodput_req_per_s = (double)out->good / out->duration_s;
  }
  weir__bench_dist_compute(ttft, nt, &out->ttft);
  weir__bench_dist_compute(plen, npl, &out->prompt_tokens);
  weir__bench_dist_compute(itl, nitl, &out->itl);
  weir__bench_dist_compute(tpot, np, &out->tpot);
  weir__bench_dist_compute(e2e, ne, &out->e2e);

  /* Throughput over time: output tokens per second in fixed buckets from each run's first
   * send, averaged over the runs. A chunk weighs usage/chunks tokens when usage is known. */
  out->bucket_s = longest / 50.0;
  if (out->bucket_s < 0.05) out->bucket_s = 0.05;
  out->num_buckets = (int)ceil(longest / out->bucket_s) + 1;
  out->timeline = calloc((size_t)out->num_buckets, sizeof *out->timeline);
  if (!out->timeline) {
    rc = WEIR_E_NOMEM;
    goto free_arrays;
  }
  for (int k = 0; k < num_runs; k++) {
    const weir_bench_run *run = runs[k];
    double first = INFINITY;
    for (int64_t i = 0; i < run->num_recs; i++)
      if (run->recs[i].start_ms < first) first = run->recs[i].start_ms;
    for (int64_t i = 0; i < run->num_recs; i++) {
      const weir_bench_record *r = &run->recs[i];
      if (!r->ok || r->num_chunks == 0) continue;
      double wgt = (double)out_tokens(r) / (double)r->num_chunks;
      for (int j = 0; j < r->num_chunks; j++) {
        int b = (int)((r->chunk_ms[j] - first) / 1000.0 / out->bucket_s);
        if (b >= 0 && b < out->num_buckets) out->timeline[b] += wgt;
      }
    }
  }
  for (int b = 0; b < out->num_buckets; b++)
    out->timeline[b] /= out->bucket_s * (num_runs > 0 ? num_runs : 1);
free_arrays:
  free(plen);
  free(ttft);
  free(tpot);
  free(e2e);
  free(itl);
  return rc;
}

void weir__bench_summary_free(weir_bench_summary *s) {
  free(s->timeline);
  s->timeline = NULL;
}

/* Number of arrangements of n x's and m y's with U (x below y pairs) = u, by the classic
 * recurrence f(n, m, u) = f(n-1, m, u-m) + f(n, m-1, u); computed into dist[0..n*m]. */
static int mw_dist(int n, int m, double *dist) {
  int umax = n * m;
  /* table[j][u] for the current i, j = 0..m */
  double *prev = calloc((size_t)(m + 1) * (size_t)(umax + 1), sizeof *prev);
  double *cur = calloc((size_t)(m + 1) * (size_t)(umax + 1), sizeof *cur);
  if (!prev || !cur) {
    free(prev);
    free(cur);
    return WEIR_E_NOMEM;
  }
#define AT(t, j, u) (t)[(size_t)(j) * (size_t)(umax + 1) + (size_t)(u)]
  for (int j = 0; j <= m; j++) AT(prev, j, 0) = 1; /* i = 0: U = 0 one way */
  for (int i = 1; i <= n; i++) {
    memset(cur, 0, sizeof *cur * (size_t)(m + 1) * (size_t)(umax + 1));
    AT(cur, 0, 0) = 1;
    for (int j = 1; j <= m; j++)
      for (int u = 0; u <= i * j; u++)
        AT(cur, j, u) = (u >= j ? AT(prev, j, u - j) : 0) + AT(cur, j - 1, u);
    double *t = prev;
    prev = cur;
    cur = t;
  }
  for (int u = 0; u <= umax; u++) dist[u] = AT(prev, m, u);
#undef AT
  free(prev);
  free(cur);
  return WEIR_OK;
}

double weir__bench_mann_whitney(const double *x, int n, const double *y, int m) {
  if (n <= 0 || m <= 0 || n > 64 || m > 64) return 1.0;
  double u = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) u += x[i] > y[j] ? 1.0 : x[i] == y[j] ? 0.5 : 0.0;
  double *dist = malloc(sizeof *dist * (size_t)(n * m + 1));
  if (!dist || mw_dist(n, m, dist)) {
    free(dist);
    return 1.0;
  }
  /* With ties U is a half-integer; the tails are taken from the integers around it, which
   * errs towards a larger p (never calls a difference that ties would not support). */
  double total = 0, lo = 0, hi = 0, ulo = ceil(u), uhi = floor(u);
  for (int k = 0; k <= n * m; k++) {
    total += dist[k];
    if (k <= ulo) lo += dist[k];
    if (k >= uhi) hi += dist[k];
  }
  free(dist);
  double p = 2.0 * (lo < hi ? lo : hi) / total;
  return p > 1.0 ? 1.0 : p;
}

static double median_of(const double *v, int n) {
  double *t = malloc(sizeof *t * (size_t)(n ? n : 1));
  if (!t) return 0;
  memcpy(t, v, sizeof *t * (size_t)n);
  weir_bench_dist d;
  weir__bench_dist_compute(t, n, &d);
  free(t);
  return d.median;
}

weir_bench_verdict weir__bench_decide(const double *a, int n, const double *b, int m,
                                      int lower_is_better, double alpha, double *p_value) {
  *p_value = weir__bench_mann_whitney(a, n, b, m);
  /* The smallest p the test can reach is 2 / C(n+m, n): with fewer rounds than that allows,
   * no gap could ever be called, and the report says so instead of "no difference". */
  double comb = 1;
  for (int i = 1; i <= n; i++) comb = comb * (m + i) / i;
  if (n < 1 || m < 1 || 2.0 / comb > alpha) return WEIR_BENCH_INCONCLUSIVE;
  if (*p_value > alpha) return WEIR_BENCH_NO_DIFF;
  double ma = median_of(a, n), mb = median_of(b, m);
  if (ma == mb) return WEIR_BENCH_NO_DIFF;
  int a_lower = ma < mb;
  return a_lower == lower_is_better ? WEIR_BENCH_A_BETTER : WEIR_BENCH_B_BETTER;
}

typedef struct metric_def {
  const char *name, *unit;
  int lower_is_better;
  size_t dist_off;   /* offsetof the dist in the summary, or SIZE_MAX */
  int which;         /* 0 median, 1 p99, 2 mean; or for scalars: 0 out_tok/s, 1 req/s, 2 goodput */
} metric_def;

static double metric_value(const weir_bench_summary *s, const metric_def *d) {
  if (d->dist_off != (size_t)-1) {
    const weir_bench_dist *x = (const weir_bench_dist *)((const char *)s + d->dist_off);
    return d->which == 0 ? x->median : d->which == 1 ? x->p99 : x->mean;
  }
  return d->which == 0 ? s->out_tok_per_s : d->which == 1 ? s->req_per_s : s->goodput_req_per_s;
}

void weir__bench_compare(weir_bench_report *r) {
  static const metric_def defs[] = {
      {"output_tokens_per_s", "tok/s", 0, (size_t)-1, 0},
      {"requests_per_s", "req/s", 0, (size_t)-1, 1},
      {"goodput_requests_per_s", "req/s", 0, (size_t)-1, 2},
      {"ttft_median_ms", "ms", 1, offsetof(weir_bench_summary, ttft), 0},
      {"ttft_p99_ms", "ms", 1, offsetof(weir_bench_summary, ttft), 1},
      {"itl_median_ms", "ms", 1, offsetof(weir_bench_summary, itl), 0},
      {"itl_p99_ms", "ms", 1, offsetof(weir_bench_summary, itl), 1},
      {"tpot_median_ms", "ms", 1, offsetof(weir_bench_summary, tpot), 0},
      {"e2e_median_ms", "ms", 1, offsetof(weir_bench_summary, e2e), 0},
  };
  int nd = (int)(sizeof defs / sizeof defs[0]);
  r->num_cmp = 0;
  r->cmp = calloc((size_t)nd, sizeof *r->cmp);
  if (!r->cmp || r->num_sides != 2) return;
  const weir_bench_side *A = &r->sides[0], *B = &r->sides[1];
  int n = A->num_rounds, m = B->num_rounds;
  double *va = malloc(sizeof *va * (size_t)(n + 1)), *vb = malloc(sizeof *vb * (size_t)(m + 1));
  if (!va || !vb) goto free_vals;
  for (int k = 0; k < nd; k++) {
    const metric_def *d = &defs[k];
    weir_bench_cmp *c = &r->cmp[r->num_cmp++];
    c->name = d->name;
    c->unit = d->unit;
    c->lower_is_better = d->lower_is_better;
    for (int i = 0; i < n; i++) va[i] = metric_value(&A->per_round[i], d);
    for (int i = 0; i < m; i++) vb[i] = metric_value(&B->per_round[i], d);
    c->a_median = median_of(va, n);
    c->b_median = median_of(vb, m);
    c->ratio = c->a_median != 0 ? c->b_median / c->a_median : 0;
    c->a_min = c->a_max = n ? va[0] : 0;
    for (int i = 1; i < n; i++) {
      if (va[i] < c->a_min) c->a_min = va[i];
      if (va[i] > c->a_max) c->a_max = va[i];
    }
    c->b_min = c->b_max = m ? vb[0] : 0;
    for (int i = 1; i < m; i++) {
      if (vb[i] < c->b_min) c->b_min = vb[i];
      if (vb[i] > c->b_max) c->b_max = vb[i];
    }
    c->verdict = weir__bench_decide(va, n, vb, m, d->lower_is_better, r->alpha, &c->p_value);
  }
free_vals:
  free(va);
  free(vb);
}
