/* The bench's arithmetic, compiled from tools/bench/ directly: percentiles, the summary of
 * hand-built request records, the exact Mann-Whitney p-values behind the A/B verdicts, and
 * the seeded gamma arrivals, the exponential max_tokens of the static-batching workload. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "testutil.h"

#define ASSERT_CLOSE(actual, expected, tol)                                                 \
  do {                                                                                      \
    double a_ = (actual), e_ = (expected);                                                  \
    int ok_ = fabs(a_ - e_) <= (tol);                                                       \
    if (!ok_) fprintf(stderr, "\n  %s:%d: %s = %.6f, expected %.6f\n", __FILE__, __LINE__,  \
                      #actual, a_, e_);                                                     \
    CU_ASSERT(ok_);                                                                         \
  } while (0)

static void test_percentiles(void) {
  double v[100];
  for (int i = 0; i < 100; i++) v[i] = 100 - i; /* unsorted on purpose */
  weir_bench_dist d;
  weir__bench_dist_compute(v, 100, &d);
  WT_ASSERT_INT_EQ(d.count, 100);
  ASSERT_CLOSE(d.mean, 50.5, 1e-9);
  ASSERT_CLOSE(d.median, 50.5, 1e-9);
  ASSERT_CLOSE(d.p90, 90.1, 1e-9);
  ASSERT_CLOSE(d.p95, 95.05, 1e-9);
  ASSERT_CLOSE(d.p99, 99.01, 1e-9);
  ASSERT_CLOSE(d.min, 1, 0);
  ASSERT_CLOSE(d.max, 100, 0);
  weir__bench_dist_compute(v, 0, &d);
  WT_ASSERT_INT_EQ(d.count, 0);
  ASSERT_CLOSE(d.p99, 0, 0);
}

static void add_chunks(weir_bench_record *r, const double *t, int n) {
  r->chunk_ms = malloc(sizeof(double) * (size_t)n);
  memcpy(r->chunk_ms, t, sizeof(double) * (size_t)n);
  r->num_chunks = r->cap_chunks = n;
}

static void test_summary_of_records(void) {
  weir_bench_run run;
  memset(&run, 0, sizeof run);
  run.num_recs = 3;
  run.recs = calloc(3, sizeof *run.recs);
  run.duration_s = 0.2;
  /* 1: ok, 3 tokens by usage, chunks at 50, 70, 90 ms, [DONE] at 95 ms. */
  run.recs[0] = (weir_bench_record){.start_ms = 0, .end_ms = 95, .ok = 1, .err = -1,
                                    .usage_prompt = 10, .usage_completion = 3};
  add_chunks(&run.recs[0], (double[]){50, 70, 90}, 3);
  /* 2: ok, no usage: 2 chunks count as 2 tokens; sent at 100 ms. */
  run.recs[1] = (weir_bench_record){.start_ms = 100, .end_ms = 200, .ok = 1, .err = -1,
                                    .usage_prompt = -1, .usage_completion = -1, .expected_input = 7};
  add_chunks(&run.recs[1], (double[]){130, 160}, 2);
  /* 3: truncated: counted, not measured. */
  run.recs[2] = (weir_bench_record){.start_ms = 10, .end_ms = 60, .ok = 0,
                                    .err = WEIR_BENCH_ERR_TRUNCATED, .usage_prompt = -1,
                                    .usage_completion = -1};
  add_chunks(&run.recs[2], (double[]){20}, 1);
  weir_bench_run *runs[1] = {&run};
  weir_bench_slo slo = {.ttft_ms = 40};
  weir_bench_summary s;
  WT_ASSERT_INT_EQ(weir__bench_summarize(runs, 1, &slo, &s), 0);
  WT_ASSERT_INT_EQ(s.sent, 3);
  WT_ASSERT_INT_EQ(s.completed, 2);
  WT_ASSERT_INT_EQ(s.errors[WEIR_BENCH_ERR_TRUNCATED], 1);
  WT_ASSERT_INT_EQ(s.output_tokens, 5);
  WT_ASSERT_INT_EQ(s.input_tokens, 17);
  WT_ASSERT_STR_CONTAINS(s.output_tokens_source, "mixed");
  WT_ASSERT_INT_EQ(s.ttft.count, 2);
  ASSERT_CLOSE(s.ttft.mean, 40, 1e-9);      /* (50 + 30) / 2 */
  WT_ASSERT_INT_EQ(s.itl.count, 3);         /* 20, 20, 30 */
  ASSERT_CLOSE(s.itl.median, 20, 1e-9);
  ASSERT_CLOSE(s.itl.max, 30, 1e-9);
  ASSERT_CLOSE(s.tpot.min, 22.5, 1e-9);     /* (95 - 50) / 2 */
  ASSERT_CLOSE(s.tpot.max, 70, 1e-9);       /* (200 - 130) / 1 */
  ASSERT_CLOSE(s.e2e.mean, 97.5, 1e-9);
  WT_ASSERT_INT_EQ(s.good, 1);              /* only request 2 has TTFT <= 40 ms */
  ASSERT_CLOSE(s.out_tok_per_s, 25, 1e-9);  /* 5 tokens / 0.2 s */
  /* Total throughput counts the prompt tokens too (the static-batching figure). */
  ASSERT_CLOSE(s.total_tok_per_s, 110, 1e-9); /* (5 + 17) tokens / 0.2 s */
  ASSERT_CLOSE(s.goodput_req_per_s, 5, 1e-9);
  /* Timeline: every token lands in a bucket; the integral is the output token count. */
  double total = 0;
  for (int b = 0; b < s.num_buckets; b++) total += s.timeline[b] * s.bucket_s;
  ASSERT_CLOSE(total, 5, 1e-9);
  weir__bench_summary_free(&s);
  weir__bench_run_free(&run);
}

static void test_mann_whitney_exact(void) {
  double a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  ASSERT_CLOSE(weir__bench_mann_whitney(a, 4, b, 4), 2.0 / 70.0, 1e-12);
  ASSERT_CLOSE(weir__bench_mann_whitney(b, 4, a, 4), 2.0 / 70.0, 1e-12);
  ASSERT_CLOSE(weir__bench_mann_whitney(a, 3, b, 3), 0.1, 1e-12);
  ASSERT_CLOSE(weir__bench_mann_whitney(a, 4, a, 4), 1.0, 1e-12);
  /* One overlap in 4 v 4: U = 1, P(U <= 1) = 2/70 each tail, so p = 4/70. */
  double c[] = {1, 2, 3, 5}, d[] = {4, 6, 7, 8};
  ASSERT_CLOSE(weir__bench_mann_whitney(c, 4, d, 4), 4.0 / 70.0, 1e-12);
  /* U = 2 (6 beats 4 and 5): P(U <= 2) = 4/70, p = 8/70. */
  double g[] = {1, 2, 3, 6}, h[] = {4, 5, 7, 8};
  ASSERT_CLOSE(weir__bench_mann_whitney(g, 4, h, 4), 8.0 / 70.0, 1e-12);
  /* A tie at the boundary: U = 0.5, taken as P(U <= 1) = 2/70 a tail: p = 4/70. */
  double t1[] = {1, 2, 3, 5}, t2[] = {5, 6, 7, 8};
  ASSERT_CLOSE(weir__bench_mann_whitney(t1, 4, t2, 4), 4.0 / 70.0, 1e-12);
  /* 5 v 5 fully separated: 2 / C(10,5) = 2/252. */
  double e[] = {1, 2, 3, 4, 5}, f[] = {6, 7, 8, 9, 10};
  ASSERT_CLOSE(weir__bench_mann_whitney(e, 5, f, 5), 2.0 / 252.0, 1e-12);
}

static void test_verdicts(void) {
  double p;
  double lo[] = {10, 11, 12, 13}, hi[] = {20, 21, 22, 23}, mix[] = {10.5, 12.5, 20.5, 9};
  WT_ASSERT_INT_EQ(weir__bench_decide(lo, 4, hi, 4, 1, 0.05, &p), WEIR_BENCH_A_BETTER);
  WT_ASSERT_INT_EQ(weir__bench_decide(lo, 4, hi, 4, 0, 0.05, &p), WEIR_BENCH_B_BETTER);
  WT_ASSERT_INT_EQ(weir__bench_decide(hi, 4, lo, 4, 1, 0.05, &p), WEIR_BENCH_B_BETTER);
  WT_ASSERT_INT_EQ(weir__bench_decide(lo, 4, mix, 4, 1, 0.05, &p), WEIR_BENCH_NO_DIFF);
  /* Three rounds a side can reach 0.1 at best: inconclusive at 0.05, decided at 0.1. */
  WT_ASSERT_INT_EQ(weir__bench_decide(lo, 3, hi, 3, 1, 0.05, &p), WEIR_BENCH_INCONCLUSIVE);
  WT_ASSERT_INT_EQ(weir__bench_decide(lo, 3, hi, 3, 1, 0.1, &p), WEIR_BENCH_A_BETTER);
  WT_ASSERT_INT_EQ(weir__bench_decide(lo, 1, hi, 1, 1, 0.05, &p), WEIR_BENCH_INCONCLUSIVE);
}

static void test_gamma_and_arrivals(void) {
  weir_bench_rng r;
  weir__bench_rng_seed(&r, 42);
  const int n = 200000;
  double shapes[] = {0.5, 1.0, 4.0};
  for (int k = 0; k < 3; k++) {
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) {
      double x = weir__bench_rng_gamma(&r, shapes[k], 2.0);
      sum += x;
      sq += x * x;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    ASSERT_CLOSE(mean, shapes[k] * 2.0, 0.03 * shapes[k] * 2.0);
    ASSERT_CLOSE(var, shapes[k] * 4.0, 0.06 * shapes[k] * 4.0);
  }
  double *t = malloc(sizeof *t * 20000), *u = malloc(sizeof *u * 20000);
  WT_ASSERT_INT_EQ(weir__bench_arrivals(7, 10.0, 1.0, 0, 20000, t), 20000);
  WT_ASSERT_INT_EQ(weir__bench_arrivals(7, 10.0, 1.0, 0, 20000, u), 20000);
  CU_ASSERT(memcmp(t, u, sizeof *t * 20000) == 0);
  ASSERT_CLOSE(t[19999] / 20000, 0.1, 0.003);
  /* Burstiness 4: coefficient of variation 1/2. */
  weir__bench_arrivals(7, 10.0, 4.0, 0, 20000, t);
  double sum = 0, sq = 0, prev = 0;
  for (int i = 0; i < 20000; i++) {
    double g = t[i] - prev;
    prev = t[i];
    sum += g;
    sq += g * g;
  }
  double mean = sum / 20000, cv = sqrt(sq / 20000 - mean * mean) / mean;
  ASSERT_CLOSE(cv, 0.5, 0.02);
  /* A duration bound stops the arrivals before it. */
  int64_t k = weir__bench_arrivals(7, 10.0, 1.0, 5.0, 20000, t);
  CU_ASSERT(k > 20 && k < 90 && t[k - 1] < 5.0);
  free(t);
  free(u);
}

/* --output-dist exponential: max_tokens = ceil(Exp(mean)) cut at the cap, so that
 * P(len <= k) = 1 - exp(-k / mean) below the cap and P(len = cap) = exp(-(cap - 1) / mean). */
static void test_exponential_output_lengths(void) {
  weir_bench_workload w = {.dataset = WEIR_BENCH_DS_RANDOM, .input_len = 512, .output_len = 128,
                           .prompt_tokens = 1, .vocab = 256, .vocab_lo = 10, .output_exp = 1,
                           .seed = 5};
  const int n = 200000;
  const double M = 128;
  static const int caps[] = {0, 32, 128, 512, 1536};
  weir_bench_rng r;
  for (int c = 0; c < 5; c++) {
    w.output_cap = caps[c];
    weir__bench_rng_seed(&r, 99 + (uint64_t)c);
    double sum = 0;
    int le32 = 0, le128 = 0, le512 = 0, at_cap = 0, min = 1 << 30, max = 0;
    for (int i = 0; i < n; i++) {
      const int k = weir__bench_output_len(&w, &r);
      sum += k;
      le32 += k <= 32;
      le128 += k <= 128;
      le512 += k <= 512;
      at_cap += caps[c] && k == caps[c];
      if (k < min) min = k;
      if (k > max) max = k;
    }
    /* E[min(ceil(X), C)] = sum_{k=0}^{C-1} exp(-k / M); without a cap 1 / (1 - exp(-1 / M)) */
    const double q = exp(-1.0 / M);
    const double want_mean = caps[c] ? (1 - pow(q, caps[c])) / (1 - q) : 1 / (1 - q);
    printf("\n    cap %4d: mean %.2f (expected %.2f), max %d", caps[c], sum / n, want_mean, max);
    CU_ASSERT(min >= 1);
    ASSERT_CLOSE(sum / n, want_mean, 0.012 * want_mean);
    if (caps[c]) {
      CU_ASSERT(max <= caps[c]);
      /* reached below 1536 (P(X > 511) = e^-4: thousands of 200k draws do) */
      if (caps[c] <= 512) CU_ASSERT(max == caps[c]);
      ASSERT_CLOSE((double)at_cap / n, exp(-(caps[c] - 1) / M), 0.005);
    } else {
      CU_ASSERT(max > 1000); /* uncut: P(X > 1000) = 4e-4, ~80 of 200k draws */
    }
    if (!caps[c] || caps[c] > 32) ASSERT_CLOSE((double)le32 / n, 1 - exp(-32 / M), 0.005);
    if (!caps[c] || caps[c] > 128) ASSERT_CLOSE((double)le128 / n, 1 - exp(-128 / M), 0.005);
    if (!caps[c] || caps[c] > 512) ASSERT_CLOSE((double)le512 / n, 1 - exp(-512 / M), 0.005);
  }
  /* Through the workload: prompts of exactly 512 token ids, max_tokens within the cap, the
   * same for the same seed and index, and spread over the requests. */
  w.output_cap = 32;
  int distinct = 0, prev = -1;
  for (int64_t i = 0; i < 200; i++) {
    weir_bench_prompt a, b;
    WT_ASSERT_INT_EQ(weir__bench_workload_get(&w, 0, i, &a), 0);
    WT_ASSERT_INT_EQ(weir__bench_workload_get(&w, 0, i, &b), 0);
    WT_ASSERT_INT_EQ(a.num_prompt_ids, 512);
    WT_ASSERT_INT_EQ(a.max_tokens, b.max_tokens);
    CU_ASSERT(a.max_tokens >= 1 && a.max_tokens <= 32);
    distinct += a.max_tokens != prev;
    prev = a.max_tokens;
    weir__bench_prompt_free(&a);
    weir__bench_prompt_free(&b);
  }
  CU_ASSERT(distinct > 50);
  /* uniform (the default) is unchanged: output_len exactly at range 0 */
  w.output_exp = 0;
  w.output_cap = 0;
  weir__bench_rng_seed(&r, 1);
  for (int i = 0; i < 100; i++) WT_ASSERT_INT_EQ(weir__bench_output_len(&w, &r), 128);
}


/* The SSE event scanner against cJSON: what a tree says about an event is what the scanner
 * reads from it, on the events weir streams and on every one-byte corruption of them; every
 * event cJSON refuses the scanner refuses too; cut events and hostile ones are refused. */
typedef struct {
  int ok, error, has_text;
  int64_t prompt, completion;
} sse_ref;

static sse_ref reference(const char *d) {
  sse_ref r = {0, 0, 0, -1, -1};
  const char *end = NULL;
  cJSON *o = cJSON_ParseWithOpts(d, &end, 1);
  if (!cJSON_IsObject(o)) {
    cJSON_Delete(o);
    return r;
  }
  r.ok = 1;
  cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
  r.error = e && !cJSON_IsNull(e);
  cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
  cJSON *ch = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
  if (cJSON_IsObject(ch)) {
    cJSON *txt = cJSON_GetObjectItemCaseSensitive(ch, "text");
    if (!txt) {
      cJSON *delta = cJSON_GetObjectItemCaseSensitive(ch, "delta");
      txt = cJSON_IsObject(delta) ? cJSON_GetObjectItemCaseSensitive(delta, "content") : NULL;
    }
    r.has_text = cJSON_IsString(txt) && txt->valuestring[0];
  }
  cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
  if (cJSON_IsObject(u)) {
    cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    /* a count past 9e18 is no count: absent, as the scanner reads it (and no int64_t holds
     * it: the cast would be undefined; a fuzz run of the scanner against this found it) */
    if (cJSON_IsNumber(pt) && pt->valuedouble >= 0 && pt->valuedouble < 9e18)
      r.prompt = (int64_t)pt->valuedouble;
    if (cJSON_IsNumber(ct) && ct->valuedouble >= 0 && ct->valuedouble < 9e18)
      r.completion = (int64_t)ct->valuedouble;
  }
  cJSON_Delete(o);
  return r;
}

/* 1 when the scanner agrees with the reference on d (or is stricter: refuses what cJSON's
 * lenient number and string readers take). */
static int agrees(const char *d, int *both_ok) {
  sse_ref r = reference(d);
  weir_bench_sse_facts f;
  int ok = weir__bench_sse_scan(d, strlen(d), &f) == 0;
  *both_ok = ok && r.ok;
  if (ok && !r.ok) return 0; /* the scanner took what cJSON refuses */
  if (!ok || !r.ok) return 1;
  int64_t fp = f.prompt_tokens >= 0 ? f.prompt_tokens : -1;
  int64_t fc = f.completion_tokens >= 0 ? f.completion_tokens : -1;
  return f.error == r.error && f.has_text == r.has_text && fp == r.prompt && fc == r.completion;
}

static void test_sse_scan(void) {
  static const char *const events[] = {
      /* what weir streams: chat (role, content, finish, usage), completions, tools, errors */
      "{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1764300000,"
      "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
      "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}",
      "{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1764300000,"
      "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" the \\\"Lord\\\" "
      "\\u00e9\\n\"},\"logprobs\":{\"content\":[{\"token\":\"x\",\"logprob\":-0.25e-1}]},"
      "\"finish_reason\":null}]}",
      "{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],"
      "\"usage\":null}",
      "{\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":43,\"completion_tokens\":16,"
      "\"total_tokens\":59}}",
      "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"and\","
      "\"index\":0,\"logprobs\":null,\"finish_reason\":null}]}",
      "{\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":\"length\"}]}",
      "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
      "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}",
      "{\"error\":{\"message\":\"injected error event\",\"type\":\"server_error\"}}",
      "{\"error\":null,\"choices\":[{\"delta\":{\"content\":\"x\"}},{\"delta\":{\"content\":\"\"}}]}",
      "{\"choices\":[{\"delta\":{\"content\":\"\"}},{\"delta\":{\"content\":\"y\"}}]}",
      "{\"choices\":[{\"text\":7,\"delta\":{\"content\":\"y\"}}]}",
      "{\"choices\":{\"delta\":{\"content\":\"y\"}},\"usage\":[1,2]}",
      "{\"choices\":[[{\"delta\":{\"content\":\"y\"}}]],\"usage\":{\"prompt_tokens\":\"9\"}}",
      "{\"usage\":{\"prompt_tokens\":1.5e2,\"completion_tokens\":-0,\"x\":[true,false,null]}}",
      " \t{\"a\":{\"b\":[{}, [], \"\\/\\b\\f\\r\\t\"]}}\n",
      /* repeated container keys: only the first plays its role (found by a fuzz run) */
      "{\"choices\":[{\"delta\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":1,"
      "\"usage\":{\"prompt_tokens\":3},\"choices\":[{\"text\":\"x\"}]}",
  };
  const int n = (int)(sizeof events / sizeof *events);
  int both = 0;
  for (int i = 0; i < n; i++) {
    int ok;
    CU_ASSERT(agrees(events[i], &ok));
    if (!ok) fprintf(stderr, "\n  event %d refused: %s\n", i, events[i]);
    CU_ASSERT(ok); /* each of these is a well-formed object */
  }
  weir_bench_sse_facts f;
  CU_ASSERT_EQUAL(weir__bench_sse_scan(events[1], strlen(events[1]), &f), 0);
  CU_ASSERT(f.has_text && !f.error);
  CU_ASSERT_EQUAL(weir__bench_sse_scan(events[0], strlen(events[0]), &f), 0);
  CU_ASSERT(!f.has_text); /* the role chunk is not output */
  CU_ASSERT_EQUAL(weir__bench_sse_scan(events[3], strlen(events[3]), &f), 0);
  WT_ASSERT_INT_EQ(f.prompt_tokens, 43);
  WT_ASSERT_INT_EQ(f.completion_tokens, 16);
  CU_ASSERT_EQUAL(weir__bench_sse_scan(events[7], strlen(events[7]), &f), 0);
  CU_ASSERT(f.error);

  /* Every proper prefix of an event is a cut event: refused. */
  for (int i = 0; i < n; i++) {
    size_t len = strlen(events[i]);
    while (len && (events[i][len - 1] == '\n')) len--;
    for (size_t k = 0; k < len; k++)
      if (!weir__bench_sse_scan(events[i], k, &f) && k + 1 < len) {
        fprintf(stderr, "\n  event %d: a prefix of %zu bytes was taken\n", i, k);
        CU_FAIL("a cut event was taken");
        break;
      }
  }
  /* Every one-byte corruption of every event: never taken where cJSON refuses it, and the
   * same facts where both take it. */
  static const char subst[] = "\"\\{}[],:0-.e xnu\x01\xff";
  char buf[1024];
  int disagreements = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(events[i]);
    for (size_t k = 0; k < len; k++)
      for (size_t j = 0; j < sizeof subst - 1; j++) {
        memcpy(buf, events[i], len + 1);
        buf[k] = subst[j];
        int ok;
        if (!agrees(buf, &ok)) {
          if (disagreements++ < 5) fprintf(stderr, "\n  disagrees with cJSON: %s\n", buf);
        }
        both += ok;
      }
  }
  WT_ASSERT_INT_EQ(disagreements, 0);
  CU_ASSERT(both > 1000); /* the corruptions were not all refused: facts were compared */

  static const char *const bad[] = {
      "", "[]", "\"x\"", "{this is not json", "{\"a\":1} junk", "{\"a\":01}", "{\"a\":1.}",
      "{\"a\":-}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12g4\"}", "{\"a\":\"\x01\"}", "{\"a\" 1}",
      "{\"a\":1,}", "{\"a\":[1,]}", "{\"a\":tru}", "{'a':1}", "{\"a\":1}}", "{,}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    if (!weir__bench_sse_scan(bad[i], strlen(bad[i]), &f)) {
      fprintf(stderr, "\n  malformed event taken: %s\n", bad[i]);
      CU_FAIL("malformed event taken");
    }
  /* Nesting is bounded: 10,000 levels are refused, not a stack overflow. */
  size_t deep = 10000;
  char *d = malloc(2 * deep + 8);
  size_t m = 0;
  d[m++] = '{';
  d[m++] = '"';
  d[m++] = 'a';
  d[m++] = '"';
  d[m++] = ':';
  for (size_t i = 0; i < deep; i++) d[m++] = '[';
  for (size_t i = 0; i < deep; i++) d[m++] = ']';
  d[m++] = '}';
  CU_ASSERT_NOT_EQUAL(weir__bench_sse_scan(d, m, &f), 0);
  free(d);
}

int main(void) {
  static const wt_test tests[] = {
      {"percentiles", test_percentiles},
      {"sse_scan", test_sse_scan},
      {"summary_of_records", test_summary_of_records},
      {"mann_whitney_exact", test_mann_whitney_exact},
      {"verdicts", test_verdicts},
      {"gamma_and_arrivals", test_gamma_and_arrivals},
      {"exponential_output_lengths", test_exponential_output_lengths},
      {NULL, NULL},
  };
  return wt_run_suite("bench_stats", tests);
}
