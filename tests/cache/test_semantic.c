/* The semantic layer's decision (core/http/semantic.h) on vectors made here: it refuses
 * without evidence; on an embedding that separates right from wrong it learns to serve while
 * the wrong-hit rate of what it serves stays under the bound; on an uninformative embedding
 * it learns to refuse; entries get thresholds of their own (one wrong observation raises one
 * entry's, not the others'); the bucket's bytes round-trip and hostile bytes are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/semantic.h"
#include "testutil.h"

#define DIM 32

static uint64_t g_rng = 88172645463325252ull;
static double unit(void) { return (double)(wt_xorshift64(&g_rng) >> 11) / 9007199254740992.0; }
static double gauss(void) {
  double u = unit() + 1e-12, v = unit();
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static void normalise(float *v) {
  double n = 0;
  for (int i = 0; i < DIM; i++) n += (double)v[i] * v[i];
  n = sqrt(n);
  for (int i = 0; i < DIM; i++) v[i] = (float)(v[i] / n);
}
static void random_vec(float *v) {
  for (int i = 0; i < DIM; i++) v[i] = (float)gauss();
  normalise(v);
}
/* A paraphrase of `base`: noise of size eps around it. */
static void near_vec(const float *base, double eps, float *v) {
  for (int i = 0; i < DIM; i++) v[i] = (float)(base[i] + eps * gauss() / sqrt(DIM));
  normalise(v);
}

static void test_bound(void) {
  CU_ASSERT_DOUBLE_EQUAL(weir__sem_upper_bound(0, 0, 1.645), 1.0, 1e-12);
  CU_ASSERT(weir__sem_upper_bound(0, 1000, 1.645) < 0.003);
  CU_ASSERT(weir__sem_upper_bound(0, 100, 1.645) > 0.01); /* 100 clean observations: not yet */
  CU_ASSERT(weir__sem_upper_bound(50, 1000, 1.645) > 0.05);
  CU_ASSERT(weir__sem_upper_bound(10, 1000, 1.645) > 0.01);
}

static void test_refuses_without_evidence(void) {
  weir__sem_calib g;
  memset(&g, 0, sizeof g);
  weir__sem_entry e;
  memset(&e, 0, sizeof e);
  double ub = 0;
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &e, 0.9999f, 0.01, 0, 0.5, &ub), WEIR__SEM_REFUSE);
  CU_ASSERT_DOUBLE_EQUAL(ub, 1.0, 1e-12);
  /* A bound of 1 allows anything: the check is the bound, not a hidden cut-off. */
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &e, 0.1f, 1.0, 0, 0.5, &ub), WEIR__SEM_SERVE);
  /* With explore, a would-be hit is sometimes answered live. */
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &e, 0.1f, 1.0, 0.2, 0.1, &ub), WEIR__SEM_EXPLORE);
}

/* One simulated workload: `topics` distinct questions, each asked many times in varied words.
 * A query's right answer is its topic's. `informative`: paraphrases of one topic are near one
 * another (the embedding separates topics); else every vector is random (random weights).
 * The cache stores an entry per answered query the way api_cache.c does (a candidate that
 * was wrong or absent adds the live answer), and labels the nearest candidate on every live
 * answer. Returns served and wrong-served counts. */
typedef struct sim_result {
  int served, wrong, queries;
} sim_result;

static sim_result simulate(int informative, double eps, int topics, int queries,
                           double delta, double explore) {
  weir__sem_calib g;
  memset(&g, 0, sizeof g);
  weir__sem_bucket b = {.dim = DIM};
  float (*centre)[DIM] = malloc(sizeof(float) * DIM * (size_t)topics);
  for (int t = 0; t < topics; t++) random_vec(centre[t]);
  sim_result r = {0, 0, queries};
  for (int q = 0; q < queries; q++) {
    int topic = (int)(unit() * topics);
    float v[DIM];
    if (informative) near_vec(centre[topic], eps, v);
    else random_vec(v);
    char key[32];
    snprintf(key, sizeof key, "t%d", topic); /* the entry's answer is its topic's */
    float sim = 0;
    int idx = weir__sem_nearest(&b, v, &sim);
    int correct = -1;
    if (idx >= 0) {
      correct = !strcmp(b.e[idx].key, key);
      weir__sem_verdict d = weir__sem_decide(&g, &b.e[idx], sim, delta, explore, unit(), NULL);
      if (d == WEIR__SEM_SERVE) {
        r.served++;
        r.wrong += !correct;
        continue;
      }
      weir__sem_observe(&g, &b.e[idx], sim, correct);
    }
    if (correct != 1) weir__sem_bucket_add(&b, key, v);
  }
  weir__sem_bucket_free(&b);
  free(centre);
  return r;
}

static void test_learns_to_serve(void) {
  /* Well separated topics, then topics whose paraphrases often lie nearer another topic. */
  const double eps[] = {0.25, 0.8};
  for (int i = 0; i < 2; i++) {
    sim_result r = simulate(1, eps[i], 40, 20000, 0.01, 0.05);
    fprintf(stderr, "\n  informative (noise %.2f): served %d of %d, wrong %d (%.3f%% of served)",
            eps[i], r.served, r.queries, r.wrong, r.served ? 100.0 * r.wrong / r.served : 0.0);
    CU_ASSERT(r.served > r.queries / 10);  /* it learns to hit */
    CU_ASSERT(r.wrong <= 0.01 * r.served); /* under the bound */
  }
  fprintf(stderr, "\n");
}

static void test_learns_to_refuse(void) {
  sim_result r = simulate(0, 0, 40, 20000, 0.01, 0.05);
  fprintf(stderr, "\n  uninformative: served %d of %d, wrong %d\n", r.served, r.queries,
          r.wrong);
  CU_ASSERT(r.wrong <= 0.01 * r.served + 1);
  CU_ASSERT(r.served < r.queries / 100); /* it refuses rather than guesses */
}

static void test_per_entry_threshold(void) {
  weir__sem_calib g;
  memset(&g, 0, sizeof g);
  /* Pooled evidence: many right answers at similarity 0.95 and above. */
  for (int i = 0; i < 5000; i++) weir__sem_observe(&g, NULL, 0.95f + 0.0049f * (i % 10), 1);
  weir__sem_entry clean, burnt;
  memset(&clean, 0, sizeof clean);
  memset(&burnt, 0, sizeof burnt);
  weir__sem_observe(NULL, &burnt, 0.97f, 0); /* this entry was wrong at 0.97 once */
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &clean, 0.96f, 0.01, 0, 0.5, NULL), WEIR__SEM_SERVE);
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &burnt, 0.96f, 0.01, 0, 0.5, NULL), WEIR__SEM_REFUSE);
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &burnt, 0.97f, 0.01, 0, 0.5, NULL), WEIR__SEM_REFUSE);
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &burnt, 0.98f, 0.01, 0, 0.5, NULL), WEIR__SEM_SERVE);
  /* Below the evidence, nothing is known: refused for both. */
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &clean, 0.80f, 0.01, 0, 0.5, NULL), WEIR__SEM_REFUSE);
  /* Wrong observations in the pool just below raise everyone's bound there; above, they say
   * nothing about 0.96. */
  for (int i = 0; i < 200; i++) weir__sem_observe(&g, NULL, 0.999f, 0);
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &clean, 0.96f, 0.01, 0, 0.5, NULL), WEIR__SEM_SERVE);
  for (int i = 0; i < 200; i++) weir__sem_observe(&g, NULL, 0.94f, 0);
  WT_ASSERT_INT_EQ(weir__sem_decide(&g, &clean, 0.96f, 0.01, 0, 0.5, NULL), WEIR__SEM_REFUSE);
  /* An entry keeps its latest WEIR__SEM_MAX_OBS observations. */
  for (int i = 0; i < WEIR__SEM_MAX_OBS + 5; i++) weir__sem_observe(NULL, &clean, 0.5f, 1);
  WT_ASSERT_INT_EQ(clean.num_obs, WEIR__SEM_MAX_OBS);
}

static void test_bucket_bytes(void) {
  weir__sem_bucket b = {.dim = DIM}, c;
  float v[DIM];
  for (int i = 0; i < 3; i++) {
    random_vec(v);
    char key[32];
    snprintf(key, sizeof key, "weir:v1:a:b:%d", i);
    WT_ASSERT_INT_EQ(weir__sem_bucket_add(&b, key, v), 0);
  }
  weir__sem_observe(NULL, &b.e[1], 0.93f, 0);
  weir__sem_observe(NULL, &b.e[1], 0.99f, 1);
  weir_buf out = {0};
  weir__sem_bucket_write(&b, &out);
  CU_ASSERT_FATAL(!out.oom);
  WT_ASSERT_INT_EQ(weir__sem_bucket_parse(out.p, out.len, DIM, &c), 0);
  WT_ASSERT_INT_EQ(c.num, 3);
  CU_ASSERT_STRING_EQUAL(c.e[2].key, "weir:v1:a:b:2");
  CU_ASSERT(!memcmp(c.e[0].vec, b.e[0].vec, sizeof(float) * DIM));
  WT_ASSERT_INT_EQ(c.e[1].num_obs, 2);
  CU_ASSERT(c.e[1].obs_ok[0] == 0 && c.e[1].obs_ok[1] == 1 && c.e[1].obs_sim[1] == 0.99f);
  float sim;
  WT_ASSERT_INT_EQ(weir__sem_nearest(&c, b.e[2].vec, &sim), 2);
  CU_ASSERT(sim > 0.9999f);
  weir__sem_bucket_free(&c);
  /* Hostile bytes: every truncation, another dimension, a corrupted count. */
  for (size_t n = 1; n < out.len; n++) WT_ASSERT_INT_EQ(weir__sem_bucket_parse(out.p, n, DIM, &c), -1);
  WT_ASSERT_INT_EQ(weir__sem_bucket_parse(out.p, out.len, DIM + 1, &c), -1);
  out.p[8] = (char)0xff; /* entry count */
  WT_ASSERT_INT_EQ(weir__sem_bucket_parse(out.p, out.len, DIM, &c), -1);
  CU_ASSERT_PTR_NULL(c.e);
  /* The bucket keeps its latest WEIR__SEM_MAX_ENTRIES entries. */
  for (int i = 0; i < WEIR__SEM_MAX_ENTRIES + 3; i++) weir__sem_bucket_add(&b, "k", v);
  WT_ASSERT_INT_EQ(b.num, WEIR__SEM_MAX_ENTRIES);
  weir_buf_free(&out);
  weir__sem_bucket_free(&b);
}

int main(void) {
  static const wt_test tests[] = {
      {"the wrong-hit bound (Wilson)", test_bound},
      {"no evidence: refused", test_refuses_without_evidence},
      {"an informative embedding: learns to serve, under the bound", test_learns_to_serve},
      {"an uninformative embedding: learns to refuse", test_learns_to_refuse},
      {"thresholds per entry", test_per_entry_threshold},
      {"bucket bytes: round trip, hostile input", test_bucket_bytes},
      {NULL, NULL}};
  return wt_run_suite("semantic", tests);
}
