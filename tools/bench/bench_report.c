/* Reports: the table for people, the JSON result file (docs/bench-schema.md) and the SVG
 * chart (TTFT and inter-token latency CDFs, output throughput over time; both sides of an
 * A/B on each panel). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

static const char *verdict_name(weir_bench_verdict v) {
  switch (v) {
  case WEIR_BENCH_A_BETTER: return "a_better";
  case WEIR_BENCH_B_BETTER: return "b_better";
  case WEIR_BENCH_NO_DIFF: return "no_difference";
  default: return "inconclusive";
  }
}

static const char *dataset_name(weir_bench_dataset_kind k) {
  return k == WEIR_BENCH_DS_SHARED_PREFIX ? "shared-prefix"
         : k == WEIR_BENCH_DS_JSONL      ? "jsonl"
         : k == WEIR_BENCH_DS_COPY       ? "copy"
                                         : "random";
}

/* ------------------------------------------------------------------ table */

static void describe_load(char *buf, size_t n, const weir_bench_load *l) {
  char bound[64];
  if (l->num_requests > 0 && l->duration_s > 0)
    snprintf(bound, sizeof bound, "%lld requests or %.1f s", (long long)l->num_requests, l->duration_s);
  else if (l->num_requests > 0)
    snprintf(bound, sizeof bound, "%lld requests", (long long)l->num_requests);
  else
    snprintf(bound, sizeof bound, "%.1f s", l->duration_s);
  if (l->rate > 0)
    snprintf(buf, n, "open loop %.2f req/s (burstiness %.2f%s), %s", l->rate, l->burstiness,
             l->concurrency > 0 ? ", capped" : "", bound);
  else
    snprintf(buf, n, "closed loop, concurrency %d, %s", l->concurrency, bound);
  size_t k = strlen(buf);
  if (k < n)
    snprintf(buf + k, n - k, ", %s", l->no_keep_alive ? "a connection per request"
                                                        : "keep-alive connections");
}

static void row_dist(FILE *f, const char *name, const weir_bench_report *r, size_t off) {
  static const char *const q[] = {"mean", "median", "p90", "p95", "p99", "max"};
  for (int k = 0; k < 6; k++) {
    char label[48];
    snprintf(label, sizeof label, "%s %s (ms)", name, q[k]);
    fprintf(f, "  %-26s", label);
    double v[2] = {0, 0};
    for (int s = 0; s < r->num_sides; s++) {
      const weir_bench_dist *d = (const weir_bench_dist *)((const char *)&r->sides[s].pooled + off);
      double x = k == 0 ? d->mean : k == 1 ? d->median : k == 2 ? d->p90 : k == 3 ? d->p95 : k == 4 ? d->p99 : d->max;
      v[s] = x;
      if (d->count) fprintf(f, " %14.2f", x);
      else fprintf(f, " %14s", "-");
    }
    if (r->num_sides == 2 && v[0] > 0) fprintf(f, " %9.3f", v[1] / v[0]);
    fputc('\n', f);
  }
}

static void row_num(FILE *f, const weir_bench_report *r, const char *label, int fmt_int,
                    double a, double b) {
  fprintf(f, "  %-26s", label);
  double v[2] = {a, b};
  for (int s = 0; s < r->num_sides; s++) {
    if (fmt_int) fprintf(f, " %14.0f", v[s]);
    else fprintf(f, " %14.2f", v[s]);
  }
  if (r->num_sides == 2 && a > 0) fprintf(f, " %9.3f", b / a);
  fputc('\n', f);
}

void weir__bench_print_table(FILE *f, const weir_bench_report *r) {
  const weir_bench_workload *w = r->w;
  char load[200];
  describe_load(load, sizeof load, r->load);
  fprintf(f, "\nweir bench: %s, dataset %s", w->endpoint == WEIR_BENCH_EP_CHAT ? "chat" : "completions",
          dataset_name(w->dataset));
  if (w->dataset != WEIR_BENCH_DS_JSONL) {
    char cap[32] = "";
    if (w->output_exp && w->output_cap) snprintf(cap, sizeof cap, ", cap %d", w->output_cap);
    fprintf(f, " (input ~%d, output %s%d tokens%s%s)",
            w->input_len + (w->dataset == WEIR_BENCH_DS_SHARED_PREFIX ? w->prefix_len : 0),
            w->output_exp ? "exponential, mean " : "", w->output_len, cap,
            w->ignore_eos ? ", ignore_eos" : "");
  }
  fprintf(f, ", seed %llu\n  %s", (unsigned long long)w->seed, load);
  if (r->load->warmup) fprintf(f, ", %d warm-up requests excluded", r->load->warmup);
  fputc('\n', f);
  fprintf(f, "  connections opened:");
  for (int k = 0; k < r->num_sides; k++)
    fprintf(f, " %s%lld", r->num_sides == 2 ? (k ? "B " : "A ") : "",
            (long long)r->sides[k].pooled.conns_opened);
  for (int k = 0; k < r->num_sides; k++)
    if (r->sides[k].pooled.retries)
      fprintf(f, "; %s%lld requests resent after the server closed a kept-alive connection",
              r->num_sides == 2 ? (k ? "B " : "A ") : "", (long long)r->sides[k].pooled.retries);
  fputc('\n', f);
  int rounds = r->sides[0].num_rounds;
  if (rounds > 1)
    fprintf(f, "  %d rounds, each with its own workload seed%s (round 1: %llu): no round "
            "replays another's prompts\n", rounds,
            r->num_sides == 2 ? ", the same for A and B within a round" : "",
            (unsigned long long)r->sides[0].rounds[0]->seed);
  for (int s = 0; s < r->num_sides; s++) {
    const weir_bench_side *sd = &r->sides[s];
    fprintf(f, "  %s: %s%s%s  model %s  (%d round%s)%s\n", sd->target->label, sd->target->url ? sd->target->url : "(not started)",
            sd->target->config ? " from " : "", sd->target->config ? sd->target->config : "",
            sd->target->model ? sd->target->model : "?", sd->num_rounds,
            sd->num_rounds == 1 ? "" : "s", sd->pooled.interrupted ? "  [INTERRUPTED: partial]" : "");
  }
  fprintf(f, "\n  %-26s", "");
  for (int s = 0; s < r->num_sides; s++) fprintf(f, " %14s", r->sides[s].target->label);
  if (r->num_sides == 2) fprintf(f, " %9s", "B/A");
  fputc('\n', f);
  const weir_bench_summary *a = &r->sides[0].pooled;
  const weir_bench_summary *b = r->num_sides == 2 ? &r->sides[1].pooled : a;
  row_num(f, r, "requests sent", 1, (double)a->sent, (double)b->sent);
  row_num(f, r, "requests completed", 1, (double)a->completed, (double)b->completed);
  row_num(f, r, "requests failed", 1, (double)a->failed, (double)b->failed);
  for (int e = 0; e < WEIR_BENCH_ERR_COUNT; e++) {
    if (!a->errors[e] && !b->errors[e]) continue;
    char label[48];
    snprintf(label, sizeof label, "  errors: %s", weir__bench_err_names[e]);
    row_num(f, r, label, 1, (double)a->errors[e], (double)b->errors[e]);
  }
  row_num(f, r, "duration (s)", 0, a->duration_s, b->duration_s);
  row_num(f, r, "input tokens", 1, (double)a->input_tokens, (double)b->input_tokens);
  row_num(f, r, "output tokens", 1, (double)a->output_tokens, (double)b->output_tokens);
  row_num(f, r, "requests/s", 0, a->req_per_s, b->req_per_s);
  row_num(f, r, "output tokens/s", 0, a->out_tok_per_s, b->out_tok_per_s);
  row_num(f, r, "total tokens/s", 0, a->total_tok_per_s, b->total_tok_per_s);
  if (r->slo->ttft_ms > 0 || r->slo->tpot_ms > 0 || r->slo->e2e_ms > 0) {
    row_num(f, r, "goodput requests/s", 0, a->goodput_req_per_s, b->goodput_req_per_s);
    row_num(f, r, "requests within SLO", 1, (double)a->good, (double)b->good);
  }
  if (a->prompt_tokens.count || b->prompt_tokens.count) {
    fprintf(f, "  %-26s", "prompt tokens, measured");
    for (int s = 0; s < r->num_sides; s++) {
      const weir_bench_dist *d = &r->sides[s].pooled.prompt_tokens;
      if (d->count) fprintf(f, " %14.1f", d->mean);
      else fprintf(f, " %14s", "-");
    }
    fputc('\n', f);
  }
  row_dist(f, "TTFT", r, offsetof(weir_bench_summary, ttft));
  row_dist(f, "ITL", r, offsetof(weir_bench_summary, itl));
  row_dist(f, "TPOT", r, offsetof(weir_bench_summary, tpot));
  row_dist(f, "E2E", r, offsetof(weir_bench_summary, e2e));
  fprintf(f, "  output tokens counted from: %s\n", a->output_tokens_source);
  for (int s = 0; s < r->num_sides; s++) {
    const weir_bench_side *sd = &r->sides[s];
    const weir_bench_dist *d = &sd->pooled.prompt_tokens;
    if (w->dataset != WEIR_BENCH_DS_JSONL && !w->prompt_tokens) {
      fprintf(f, "  %s prompt length: aimed at %d tokens; %s", sd->target->label,
              w->input_len + (w->dataset == WEIR_BENCH_DS_SHARED_PREFIX ? w->prefix_len : 0),
              sd->target->calibration[0] ? sd->target->calibration : "not calibrated");
      if (d->count)
        fprintf(f, "; the server counted min %.0f, median %.0f, max %.0f", d->min, d->median,
                d->max);
      fputc('\n', f);
    }
    if (sd->pooled.num_distinct) {
      fprintf(f, "  %s failed requests, first distinct errors:\n", sd->target->label);
      for (int k = 0; k < sd->pooled.num_distinct; k++)
        fprintf(f, "    %6lld x %.300s\n", (long long)sd->pooled.distinct_counts[k],
                sd->pooled.distinct_errors[k]);
      if (sd->pooled.other_errors)
        fprintf(f, "    %6lld x (other errors; all in --requests-out)\n",
                (long long)sd->pooled.other_errors);
    }
  }
  if (r->num_sides == 2) {
    fprintf(f, "\n  A/B per-round medians, range [min, max], exact Mann-Whitney U p (alpha %.3g):\n",
            r->alpha);
    for (int k = 0; k < r->num_cmp; k++) {
      const weir_bench_cmp *c = &r->cmp[k];
      const char *say;
      char buf[96];
      if (c->verdict == WEIR_BENCH_A_BETTER || c->verdict == WEIR_BENCH_B_BETTER) {
        double factor = c->lower_is_better ? (c->verdict == WEIR_BENCH_A_BETTER ? c->ratio : 1 / c->ratio)
                                           : (c->verdict == WEIR_BENCH_A_BETTER ? 1 / c->ratio : c->ratio);
        snprintf(buf, sizeof buf, "%s better by %.3fx", c->verdict == WEIR_BENCH_A_BETTER ? "A" : "B", factor);
        say = buf;
      } else if (c->verdict == WEIR_BENCH_NO_DIFF) {
        say = "no difference beyond run-to-run spread";
      } else {
        say = "inconclusive: too few rounds to call a difference";
      }
      fprintf(f, "  %-24s A %10.2f [%.2f, %.2f]  B %10.2f [%.2f, %.2f]  B/A %.3f  p=%.3f  %s\n",
              c->name, c->a_median, c->a_min, c->a_max, c->b_median, c->b_min, c->b_max, c->ratio,
              c->p_value, say);
    }
  }
  fputc('\n', f);
}

/* ------------------------------------------------------------------ JSON */

static cJSON *dist_json(const weir_bench_dist *d) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "count", (double)d->count);
  cJSON_AddNumberToObject(o, "mean", d->mean);
  cJSON_AddNumberToObject(o, "min", d->min);
  cJSON_AddNumberToObject(o, "median", d->median);
  cJSON_AddNumberToObject(o, "p90", d->p90);
  cJSON_AddNumberToObject(o, "p95", d->p95);
  cJSON_AddNumberToObject(o, "p99", d->p99);
  cJSON_AddNumberToObject(o, "max", d->max);
  return o;
}

static cJSON *opt_num(double v) { return v > 0 ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

static cJSON *summary_json(const weir_bench_summary *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "interrupted", s->interrupted);
  cJSON_AddNumberToObject(o, "duration_s", s->duration_s);
  cJSON *rq = cJSON_AddObjectToObject(o, "requests");
  cJSON_AddNumberToObject(rq, "sent", (double)s->sent);
  cJSON_AddNumberToObject(rq, "completed", (double)s->completed);
  cJSON_AddNumberToObject(rq, "failed", (double)s->failed);
  cJSON *er = cJSON_AddObjectToObject(o, "errors");
  for (int e = 0; e < WEIR_BENCH_ERR_COUNT; e++)
    cJSON_AddNumberToObject(er, weir__bench_err_names[e], (double)s->errors[e]);
  cJSON *ex = cJSON_AddObjectToObject(o, "error_examples");
  for (int e = 0; e < WEIR_BENCH_ERR_COUNT; e++)
    if (s->err_example[e]) cJSON_AddStringToObject(ex, weir__bench_err_names[e], s->err_example[e]);
  cJSON *de = cJSON_AddArrayToObject(o, "distinct_errors");
  for (int k = 0; k < s->num_distinct; k++) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "message", s->distinct_errors[k]);
    cJSON_AddNumberToObject(d, "count", (double)s->distinct_counts[k]);
    cJSON_AddItemToArray(de, d);
  }
  cJSON *tk = cJSON_AddObjectToObject(o, "tokens");
  cJSON_AddNumberToObject(tk, "input", (double)s->input_tokens);
  cJSON_AddNumberToObject(tk, "output", (double)s->output_tokens);
  cJSON_AddStringToObject(tk, "input_source", s->input_tokens_source);
  cJSON_AddStringToObject(tk, "output_source", s->output_tokens_source);
  cJSON_AddItemToObject(tk, "prompt_measured", dist_json(&s->prompt_tokens));
  cJSON *th = cJSON_AddObjectToObject(o, "throughput");
  cJSON_AddNumberToObject(th, "requests_per_s", s->req_per_s);
  cJSON_AddNumberToObject(th, "output_tokens_per_s", s->out_tok_per_s);
  cJSON_AddNumberToObject(th, "total_tokens_per_s", s->total_tok_per_s);
  cJSON *gp = cJSON_AddObjectToObject(o, "goodput");
  cJSON_AddNumberToObject(gp, "requests", (double)s->good);
  cJSON_AddNumberToObject(gp, "requests_per_s", s->goodput_req_per_s);
  cJSON_AddNumberToObject(gp, "fraction", s->completed ? (double)s->good / (double)s->sent : 0);
  cJSON *lat = cJSON_AddObjectToObject(o, "latency_ms");
  cJSON_AddItemToObject(lat, "ttft", dist_json(&s->ttft));
  cJSON_AddItemToObject(lat, "itl", dist_json(&s->itl));
  cJSON_AddItemToObject(lat, "tpot", dist_json(&s->tpot));
  cJSON_AddItemToObject(lat, "e2e", dist_json(&s->e2e));
  cJSON *sc = cJSON_AddObjectToObject(o, "schedule_lag_ms");
  cJSON_AddNumberToObject(sc, "mean", s->sched_lag_mean_ms);
  cJSON_AddNumberToObject(sc, "max", s->sched_lag_max_ms);
  cJSON *cn = cJSON_AddObjectToObject(o, "connections");
  cJSON_AddNumberToObject(cn, "opened", (double)s->conns_opened);
  cJSON_AddNumberToObject(cn, "retries", (double)s->retries);
  cJSON *tl = cJSON_AddObjectToObject(o, "timeline");
  cJSON_AddNumberToObject(tl, "bucket_s", s->bucket_s);
  cJSON *arr = cJSON_AddArrayToObject(tl, "output_tokens_per_s");
  for (int b = 0; b < s->num_buckets; b++)
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(round(s->timeline[b] * 1000.0) / 1000.0));
  return o;
}

int weir__bench_write_json(const char *path, const weir_bench_report *r) {
  const weir_bench_workload *w = r->w;
  const weir_bench_load *l = r->load;
  cJSON *o = cJSON_CreateObject();
  if (!o) return WEIR_E_NOMEM;
  cJSON_AddNumberToObject(o, "schema_version", WEIR_BENCH_SCHEMA_VERSION);
  cJSON_AddStringToObject(o, "tool", "weir bench " WEIR_VERSION);
  cJSON_AddStringToObject(o, "started_at", r->started_at);
  cJSON_AddStringToObject(o, "machine", r->machine ? r->machine : "");
  cJSON_AddStringToObject(o, "mode", r->num_sides == 2 ? "ab" : "single");

  cJSON *wj = cJSON_AddObjectToObject(o, "workload");
  cJSON_AddStringToObject(wj, "endpoint", w->endpoint == WEIR_BENCH_EP_CHAT ? "chat" : "completions");
  cJSON_AddStringToObject(wj, "dataset", dataset_name(w->dataset));
  cJSON_AddNumberToObject(wj, "seed", (double)w->seed);
  cJSON_AddStringToObject(wj, "prompt_format", w->prompt_tokens ? "token_ids" : "text");
  cJSON_AddNumberToObject(wj, "input_len", w->input_len);
  cJSON_AddNumberToObject(wj, "input_range", w->input_range);
  cJSON_AddNumberToObject(wj, "output_len", w->output_len);
  cJSON_AddNumberToObject(wj, "output_range", w->output_range);
  cJSON_AddStringToObject(wj, "output_dist", w->output_exp ? "exponential" : "uniform");
  if (w->output_cap) cJSON_AddNumberToObject(wj, "output_cap", w->output_cap);
  if (w->dataset == WEIR_BENCH_DS_SHARED_PREFIX) {
    cJSON_AddNumberToObject(wj, "num_prefixes", w->num_prefixes);
    cJSON_AddNumberToObject(wj, "prefix_len", w->prefix_len);
  }
  if (w->prompt_tokens) cJSON_AddNumberToObject(wj, "vocab", w->vocab);
  if (w->file) cJSON_AddStringToObject(wj, "file", w->file);
  cJSON_AddBoolToObject(wj, "ignore_eos", w->ignore_eos);
  cJSON_AddItemToObject(wj, "temperature", w->temperature >= 0 ? cJSON_CreateNumber(w->temperature) : cJSON_CreateNull());

  cJSON *lj = cJSON_AddObjectToObject(o, "load");
  cJSON_AddStringToObject(lj, "type", l->rate > 0 ? "open" : "closed");
  cJSON_AddNumberToObject(lj, "concurrency", l->concurrency);
  cJSON_AddItemToObject(lj, "rate", opt_num(l->rate));
  cJSON_AddNumberToObject(lj, "burstiness", l->burstiness);
  cJSON_AddItemToObject(lj, "num_requests", l->num_requests > 0 ? cJSON_CreateNumber((double)l->num_requests) : cJSON_CreateNull());
  cJSON_AddItemToObject(lj, "duration_s", opt_num(l->duration_s));
  cJSON_AddNumberToObject(lj, "warmup", l->warmup);
  cJSON_AddNumberToObject(lj, "request_timeout_s", l->request_timeout_s);
  cJSON_AddItemToObject(lj, "max_time_s", opt_num(l->max_time_s));

  cJSON *sj = cJSON_AddObjectToObject(o, "slo");
  cJSON_AddItemToObject(sj, "ttft_ms", opt_num(r->slo->ttft_ms));
  cJSON_AddItemToObject(sj, "tpot_ms", opt_num(r->slo->tpot_ms));
  cJSON_AddItemToObject(sj, "e2e_ms", opt_num(r->slo->e2e_ms));

  cJSON *tj = cJSON_AddArrayToObject(o, "targets");
  for (int s = 0; s < r->num_sides; s++) {
    const weir_bench_side *sd = &r->sides[s];
    cJSON *t = cJSON_CreateObject();
    cJSON_AddItemToArray(tj, t);
    cJSON_AddStringToObject(t, "label", sd->target->label);
    cJSON_AddItemToObject(t, "url", sd->target->url ? cJSON_CreateString(sd->target->url) : cJSON_CreateNull());
    cJSON_AddItemToObject(t, "config", sd->target->config ? cJSON_CreateString(sd->target->config) : cJSON_CreateNull());
    cJSON_AddItemToObject(t, "model", sd->target->model ? cJSON_CreateString(sd->target->model) : cJSON_CreateNull());
    cJSON *cal = cJSON_AddObjectToObject(t, "prompt_calibration");
    cJSON_AddItemToObject(cal, "tokens_per_word", opt_num(sd->target->tokens_per_word));
    cJSON_AddStringToObject(cal, "note", sd->target->calibration);
    cJSON_AddItemToObject(t, "summary", summary_json(&sd->pooled));
    cJSON *rounds = cJSON_AddArrayToObject(t, "rounds");
    for (int k = 0; k < sd->num_rounds; k++) {
      cJSON *rj = summary_json(&sd->per_round[k]);
      cJSON_AddNumberToObject(rj, "round", k + 1);
      cJSON_AddNumberToObject(rj, "seed", (double)sd->rounds[k]->seed);
      cJSON_AddItemToArray(rounds, rj);
    }
  }
  if (r->num_sides == 2) {
    cJSON *cj = cJSON_AddObjectToObject(o, "comparison");
    cJSON_AddStringToObject(cj, "rule", "exact two-sided Mann-Whitney U over per-round values");
    cJSON_AddNumberToObject(cj, "alpha", r->alpha);
    cJSON_AddNumberToObject(cj, "rounds_a", r->sides[0].num_rounds);
    cJSON_AddNumberToObject(cj, "rounds_b", r->sides[1].num_rounds);
    cJSON *ms = cJSON_AddArrayToObject(cj, "metrics");
    for (int k = 0; k < r->num_cmp; k++) {
      const weir_bench_cmp *c = &r->cmp[k];
      cJSON *m = cJSON_CreateObject();
      cJSON_AddItemToArray(ms, m);
      cJSON_AddStringToObject(m, "name", c->name);
      cJSON_AddStringToObject(m, "unit", c->unit);
      cJSON_AddStringToObject(m, "better", c->lower_is_better ? "lower" : "higher");
      cJSON_AddNumberToObject(m, "a_median", c->a_median);
      cJSON_AddNumberToObject(m, "b_median", c->b_median);
      cJSON_AddNumberToObject(m, "ratio_b_over_a", c->ratio);
      cJSON_AddNumberToObject(m, "a_min", c->a_min);
      cJSON_AddNumberToObject(m, "a_max", c->a_max);
      cJSON_AddNumberToObject(m, "b_min", c->b_min);
      cJSON_AddNumberToObject(m, "b_max", c->b_max);
      cJSON_AddNumberToObject(m, "p_value", c->p_value);
      cJSON_AddStringToObject(m, "verdict", verdict_name(c->verdict));
    }
  }
  int rc = WEIR_OK;
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  if (!text) return WEIR_E_NOMEM;
  FILE *f = fopen(path, "w");
  if (!f) {
    rc = WEIR_E_IO;
    goto free_text;
  }
  fputs(text, f);
  fputc('\n', f);
  if (fclose(f) != 0) rc = WEIR_E_IO;
free_text:
  free(text);
  return rc;
}

int weir__bench_write_requests(const char *path, const weir_bench_report *r) {
  FILE *f = fopen(path, "w");
  if (!f) return WEIR_E_IO;
  for (int s = 0; s < r->num_sides; s++) {
    const weir_bench_side *sd = &r->sides[s];
    for (int k = 0; k < sd->num_rounds; k++) {
      const weir_bench_run *run = sd->rounds[k];
      for (int64_t i = 0; i < run->num_recs; i++) {
        const weir_bench_record *q = &run->recs[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) goto close_file;
        cJSON_AddStringToObject(o, "target", sd->target->label);
        cJSON_AddNumberToObject(o, "round", k + 1);
        cJSON_AddNumberToObject(o, "index", (double)i);
        cJSON_AddNumberToObject(o, "scheduled_ms", q->scheduled_ms);
        cJSON_AddNumberToObject(o, "start_ms", q->start_ms);
        cJSON_AddNumberToObject(o, "end_ms", q->end_ms);
        cJSON_AddBoolToObject(o, "ok", q->ok);
        cJSON_AddItemToObject(o, "error", !q->ok && q->err >= 0 && q->err < WEIR_BENCH_ERR_COUNT
                                              ? cJSON_CreateString(weir__bench_err_names[q->err])
                                              : cJSON_CreateNull());
        cJSON_AddNumberToObject(o, "http_status", q->http_status);
        cJSON_AddItemToObject(o, "error_message", !q->ok && q->error ? cJSON_CreateString(q->error)
                                                                     : cJSON_CreateNull());
        cJSON_AddNumberToObject(o, "seed", (double)run->seed);
        cJSON_AddItemToObject(o, "ttft_ms", q->num_chunks ? cJSON_CreateNumber(q->chunk_ms[0] - q->start_ms)
                                                          : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "prompt_tokens", q->usage_prompt >= 0 ? cJSON_CreateNumber((double)q->usage_prompt)
                                                                       : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "completion_tokens", q->usage_completion >= 0
                                                          ? cJSON_CreateNumber((double)q->usage_completion)
                                                          : cJSON_CreateNull());
        cJSON *c = cJSON_AddArrayToObject(o, "chunk_ms");
        for (int j = 0; j < q->num_chunks; j++)
          cJSON_AddItemToArray(c, cJSON_CreateNumber(round((q->chunk_ms[j] - q->start_ms) * 1000.0) / 1000.0));
        char *line = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!line) goto close_file;
        fprintf(f, "%s\n", line);
        free(line);
      }
    }
  }
  return fclose(f) == 0 ? WEIR_OK : WEIR_E_IO;
close_file:
  fclose(f);
  return WEIR_E_NOMEM;
}

/* ------------------------------------------------------------------ SVG */

static const char *const k_colors[2] = {"#1f77b4", "#e4572e"};

#define PW 560.0 /* panel plot width */
#define PH 300.0
#define ML 64.0  /* margins inside a panel */
#define MT 40.0
#define MB 48.0

static double nice_ceil(double v) {
  if (v <= 0) return 1;
  static const double steps[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10};
  double e = pow(10, floor(log10(v))), f = v / e;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (f <= steps[i] + 1e-9) return steps[i] * e;
  return 10 * e;
}

static void axes(FILE *f, double ox, double oy, const char *title, const char *xl, const char *yl,
                 double xmax, double ymax, int yfrac) {
  fprintf(f, "<g transform=\"translate(%.1f,%.1f)\">\n", ox, oy);
  fprintf(f, "<text x=\"%.1f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", ML, title);
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
          ML, MT, PW, PH);
  for (int i = 0; i <= 5; i++) {
    double x = ML + PW * i / 5.0, y = MT + PH - PH * i / 5.0;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x, MT, x, MT + PH);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", ML, y, ML + PW, y);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", x,
            MT + PH + 16, xmax * i / 5.0);
    if (yfrac) fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.1f</text>\n", ML - 6, y + 4, ymax * i / 5.0);
    else fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", ML - 6, y + 4, ymax * i / 5.0);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n", ML + PW / 2,
          MT + PH + 36, xl);
  fprintf(f, "<text transform=\"translate(16,%.1f) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
          MT + PH / 2, yl);
}

static void cdf_panel(FILE *f, const weir_bench_report *r, double ox, double oy, int itl, const char *title) {
  double *v[2] = {NULL, NULL};
  int64_t n[2] = {0, 0};
  double xmax = 0;
  for (int s = 0; s < r->num_sides; s++) {
    v[s] = weir__bench_collect(r->sides[s].rounds, r->sides[s].num_rounds, itl, &n[s]);
    if (!v[s]) n[s] = 0;
    weir_bench_dist d;
    weir__bench_dist_compute(v[s], n[s], &d); /* sorts */
    /* Clip the x axis at the p99.5 of the slower side so one outlier doesn't flatten it. */
    if (n[s]) {
      double q = v[s][(int64_t)floor(0.995 * (double)(n[s] - 1))];
      if (q > xmax) xmax = q;
    }
  }
  xmax = nice_ceil(xmax * 1.05);
  axes(f, ox, oy, title, "milliseconds", "fraction of samples", xmax, 1.0, 1);
  for (int s = 0; s < r->num_sides; s++) {
    if (!n[s]) {
      free(v[s]);
      continue;
    }
    fprintf(f, "<polyline class=\"series-%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
            r->sides[s].target->label, k_colors[s]);
    /* At most ~600 points: a step per sample for small sets, quantiles beyond. */
    int64_t step = n[s] > 600 ? n[s] / 600 : 1;
    double px = ML, py = MT + PH;
    fprintf(f, "%.1f,%.1f", px, py);
    for (int64_t i = 0; i < n[s]; i += step) {
      double x = ML + PW * fmin(v[s][i] / xmax, 1.0);
      double y = MT + PH - PH * (double)(i + 1) / (double)n[s];
      fprintf(f, " %.1f,%.1f %.1f,%.1f", x, py, x, y);
      py = y;
    }
    fprintf(f, " %.1f,%.1f\"/>\n", ML + PW, MT);
    free(v[s]);
  }
  fprintf(f, "</g>\n");
}

static void timeline_panel(FILE *f, const weir_bench_report *r, double ox, double oy) {
  double xmax = 0, ymax = 0;
  for (int s = 0; s < r->num_sides; s++) {
    const weir_bench_summary *p = &r->sides[s].pooled;
    double span = p->bucket_s * p->num_buckets;
    if (span > xmax) xmax = span;
    for (int b = 0; b < p->num_buckets; b++)
      if (p->timeline[b] > ymax) ymax = p->timeline[b];
  }
  xmax = nice_ceil(xmax);
  ymax = nice_ceil(ymax * 1.1);
  axes(f, ox, oy, "Output throughput over time", "seconds from the first request",
       "output tokens/s", xmax, ymax, 0);
  for (int s = 0; s < r->num_sides; s++) {
    const weir_bench_summary *p = &r->sides[s].pooled;
    fprintf(f, "<polyline class=\"series-%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
            r->sides[s].target->label, k_colors[s]);
    for (int b = 0; b < p->num_buckets; b++) {
      double x0 = ML + PW * (p->bucket_s * b) / xmax, x1 = ML + PW * (p->bucket_s * (b + 1)) / xmax;
      double y = MT + PH - PH * p->timeline[b] / ymax;
      fprintf(f, "%s%.1f,%.1f %.1f,%.1f", b ? " " : "", x0, y, x1, y);
    }
    fprintf(f, "\"/>\n");
  }
  fprintf(f, "</g>\n");
}

static void xml_text(FILE *f, const char *s) {
  for (; s && *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

int weir__bench_write_svg(const char *path, const weir_bench_report *r) {
  FILE *f = fopen(path, "w");
  if (!f) return WEIR_E_IO;
  double pw = ML + PW + 24, ph = MT + PH + MB + 10;
  double width = 2 * pw, height = 70 + 2 * ph;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n", width, height, width, height);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"20\" y=\"28\" font-size=\"18\" font-weight=\"bold\">weir bench");
  if (r->num_sides == 2) fprintf(f, ": A/B");
  fprintf(f, "</text>\n");
  /* The legend names every side with its key numbers, so the picture stands alone. */
  for (int s = 0; s < r->num_sides; s++) {
    const weir_bench_side *sd = &r->sides[s];
    double y = 48 + 18 * s;
    fprintf(f, "<rect x=\"20\" y=\"%.0f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", y - 9, k_colors[s]);
    fprintf(f, "<text x=\"40\" y=\"%.0f\" font-size=\"13\">", y);
    xml_text(f, sd->target->label);
    fputs(": ", f);
    xml_text(f, sd->target->config ? sd->target->config : sd->target->url);
    fprintf(f, "  (TTFT p50 %.1f ms, ITL p50 %.1f ms, %.1f output tok/s, %lld/%lld ok)</text>\n",
            sd->pooled.ttft.median, sd->pooled.itl.median, sd->pooled.out_tok_per_s,
            (long long)sd->pooled.completed, (long long)sd->pooled.sent);
  }
  double top = 70;
  cdf_panel(f, r, 0, top, 0, "Time to first token: CDF");
  cdf_panel(f, r, pw, top, 1, "Inter-token latency: CDF");
  timeline_panel(f, r, 0, top + ph);
  /* A/B verdicts next to the throughput chart, then each round's throughput as a dot, so
   * the run-to-run spread behind the verdicts is visible. */
  if (r->num_sides == 2) {
    fprintf(f, "<g transform=\"translate(%.1f,%.1f)\" font-size=\"12\">\n", pw + ML, top + ph + MT - 14);
    fprintf(f, "<text font-weight=\"bold\" font-size=\"14\">B/A of per-round medians (Mann-Whitney, alpha %.3g)</text>\n", r->alpha);
    for (int k = 0; k < r->num_cmp; k++) {
      const weir_bench_cmp *c = &r->cmp[k];
      fprintf(f, "<text y=\"%d\">%s: %.3f (p=%.3f) ", 22 + 18 * k, c->name, c->ratio, c->p_value);
      if (c->verdict == WEIR_BENCH_A_BETTER || c->verdict == WEIR_BENCH_B_BETTER) {
        xml_text(f, r->sides[c->verdict == WEIR_BENCH_A_BETTER ? 0 : 1].target->label);
        fputs(" better", f);
      } else {
        fputs(c->verdict == WEIR_BENCH_NO_DIFF ? "within run-to-run spread" : "too few rounds to tell", f);
      }
      fputs("</text>\n", f);
    }
    double y0 = 22 + 18 * r->num_cmp + 20, vmax = 0;
    for (int s = 0; s < 2; s++)
      for (int k = 0; k < r->sides[s].num_rounds; k++)
        if (r->sides[s].per_round[k].out_tok_per_s > vmax) vmax = r->sides[s].per_round[k].out_tok_per_s;
    vmax = nice_ceil(vmax * 1.05);
    double sw = PW - 80;
    fprintf(f, "<text y=\"%.1f\" font-weight=\"bold\">output tokens/s of each round</text>\n", y0);
    for (int s = 0; s < 2; s++) {
      double y = y0 + 20 + 18 * s;
      fprintf(f, "<text x=\"0\" y=\"%.1f\">", y + 4);
      xml_text(f, r->sides[s].target->label);
      fprintf(f, "</text>\n<line x1=\"80\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", y, 80 + sw, y);
      for (int k = 0; k < r->sides[s].num_rounds; k++)
        fprintf(f, "<circle class=\"round-%d\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" fill-opacity=\"0.7\"/>\n", s,
                80 + sw * r->sides[s].per_round[k].out_tok_per_s / vmax, y, k_colors[s]);
    }
    double ya = y0 + 20 + 36;
    for (int i = 0; i <= 4; i++)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%g</text>\n",
              80 + sw * i / 4.0, ya, vmax * i / 4.0);
    fprintf(f, "</g>\n");
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? WEIR_OK : WEIR_E_IO;
}
