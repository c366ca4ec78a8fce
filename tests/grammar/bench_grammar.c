/* The structured-output microbenchmark (not a test): compile time per constraint, and the
 * time to compute the allowed-token mask per decode step, on a real tokenizer's vocabulary.
 *
 *   weir_grammar_bench --model M.gguf [--schema FILE]... [--regex RE]... [--json-object]
 *                      [--walks N] [--tokens N] [--batch N --threads T] [--seed S]
 *
 * With no constraint given it runs tests/grammar/fixtures/{order,tree}.schema.json, json_object
 * and a regex. For each: the median of 5 compiles; then `walks` constrained random walks of up
 * to `tokens` tokens on one matcher at a time, timing weir_matcher_fill_mask at every step.
 * The first walk starts from a fresh constraint ("cold": token classes computed as positions
 * are first reached, as the first request with a schema sees); the others reuse it ("warm":
 * every later request with the same schema, from the constraint cache). --batch N also times
 * weir_matchers_fill_masks over N matchers at once on a pool of T threads (wall clock).
 * Single-stream figures are given twice: the calling thread's CPU time (other processes on a
 * shared machine do not inflate it) and wall clock; compile times are wall clock. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "util/threadpool.h"
#include "walk.h"
#include "weir/sampler.h"

typedef struct job {
  const char *name;
  weir_constraint_spec spec;
  char *owned;
} job;

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) b[n] = 0;
  *len = (size_t)n;
  return b;
}

/* One walk as gw_walk does it (uniform draws for the first half, then steering to an end),
 * recording the time of every weir_matcher_fill_mask into `times` (seconds). */
static int timed_walk(weir_constraint *c, gw_rng *rng, int max_tokens, double *times,
                      double *walls, int *n, size_t *bytes) {
  static char out[1 << 16];
  const weir_grammar_vocab *v = c->v;
  const size_t words = WEIR_MASK_WORDS(v->n_tokens);
  uint32_t *mask = malloc(words * sizeof *mask);
  int32_t *allowed = malloc((size_t)v->n_tokens * sizeof *allowed);
  weir_matcher *m = NULL;
  if (!mask || !allowed || weir_matcher_create(c, &m)) return -1;
  *n = 0;
  size_t nb = 0;
  for (int step = 0; step < max_tokens; step++) {
    const double t0 = gw_cpu(), w0 = gw_now();
    if (weir_matcher_fill_mask(m, mask)) return -1;
    walls[*n] = gw_now() - w0;
    times[(*n)++] = gw_cpu() - t0;
    int32_t k = 0, eos = -1;
    for (int32_t t = 0; t < v->n_tokens; t++) {
      if (!weir_mask_test(mask, t)) continue;
      if (v->rank_of[t] < 0) eos = t;
      else allowed[k++] = t;
    }
    int32_t pick;
    if (eos >= 0 && (k == 0 || step >= max_tokens / 2 || gw_next(rng) % 5 == 0)) break;
    if (k == 0) break;
    if (step < max_tokens / 2) {
      pick = allowed[gw_next(rng) % (uint64_t)k];
    } else { /* steer to an end, as gw_walk does */
      uint32_t best = UINT32_MAX;
      pick = allowed[0];
      for (int32_t i = 0; i < k; i++) {
        const int32_t t = allowed[i];
        if (v->len[v->rank_of[t]] != 1 || weir_matcher_accept_token(m, t)) continue;
        const uint32_t d = weir__matcher_distance(m);
        weir_matcher_rollback(m, 1);
        if (d < best) best = d, pick = t;
      }
    }
    if (weir_matcher_accept_token(m, pick)) return -1;
    const int32_t r = v->rank_of[pick];
    for (uint32_t i = 0; i < v->len[r] && nb + 1 < sizeof out; i++) out[nb++] = (char)v->blob[v->off[r] + i];
  }
  *bytes = nb;
  weir_matcher_free(m);
  free(mask);
  free(allowed);
  return 0;
}

static void report(const char *what, const char *clock, double *t, int n) {
  if (n == 0) {
    printf("  %-5s %-4s no steps\n", what, clock);
    return;
  }
  double sum = 0;
  for (int i = 0; i < n; i++) sum += t[i];
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  printf("  %-5s %-4s %5d steps  mean %8.1f us  median %8.1f us  p99 %8.1f us  max %9.1f us\n",
         what, clock, n, sum / n * 1e6, t[n / 2] * 1e6, t[(int)(n * 0.99)] * 1e6, t[n - 1] * 1e6);
}

int main(int argc, char **argv) {
  const char *model = NULL;
  int walks = 5, tokens = 300, batch = 0, threads = 1;
  uint64_t seed = 1;
  job jobs[32];
  int n_jobs = 0;
  static struct option opts[] = {{"model", 1, 0, 'm'},  {"schema", 1, 0, 's'},
                                 {"regex", 1, 0, 'r'},  {"json-object", 0, 0, 'j'},
                                 {"walks", 1, 0, 'w'},  {"tokens", 1, 0, 't'},
                                 {"batch", 1, 0, 'b'},  {"threads", 1, 0, 'T'},
                                 {"seed", 1, 0, 'S'},   {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (n_jobs == 32) break;
    switch (ch) {
    case 'm': model = optarg; break;
    case 's': {
      size_t len;
      char *t = slurp(optarg, &len);
      if (!t) {
        fprintf(stderr, "cannot read %s\n", optarg);
        return 2;
      }
      jobs[n_jobs++] = (job){optarg, {WEIR_CONSTRAINT_JSON_SCHEMA, t, len, 1, 1, NULL}, t};
      break;
    }
    case 'r': jobs[n_jobs++] = (job){optarg, {WEIR_CONSTRAINT_REGEX, optarg, strlen(optarg), 0, 0, NULL}, NULL}; break;
    case 'j': jobs[n_jobs++] = (job){"json_object", {WEIR_CONSTRAINT_JSON_OBJECT, NULL, 0, 0, 1, NULL}, NULL}; break;
    case 'w': walks = atoi(optarg); break;
    case 't': tokens = atoi(optarg); break;
    case 'b': batch = atoi(optarg); break;
    case 'T': threads = atoi(optarg); break;
    case 'S': seed = strtoull(optarg, NULL, 10); break;
    default:
      fprintf(stderr, "usage: %s --model M.gguf [--schema FILE]... [--regex RE]... "
              "[--json-object] [--walks N] [--tokens N] [--batch N --threads T] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  if (!model || walks < 1 || tokens < 1) {
    fprintf(stderr, "--model is required (walks, tokens >= 1)\n");
    return 2;
  }
  if (n_jobs == 0) {
    static const char *files[] = {"order.schema.json", "tree.schema.json"};
    for (int i = 0; i < 2; i++) {
      char path[1024];
      snprintf(path, sizeof path, "%s/tests/grammar/fixtures/%s", WEIR_TEST_SOURCE_DIR, files[i]);
      size_t len;
      char *t = slurp(path, &len);
      if (!t) {
        fprintf(stderr, "cannot read %s\n", path);
        return 2;
      }
      jobs[n_jobs++] = (job){files[i], {WEIR_CONSTRAINT_JSON_SCHEMA, t, len, 1, 1, NULL}, t};
    }
    jobs[n_jobs++] = (job){"json_object", {WEIR_CONSTRAINT_JSON_OBJECT, NULL, 0, 0, 1, NULL}, NULL};
    static const char re[] = "(\\+1 )?\\(?[0-9]{3}\\)?[ -][0-9]{3}-[0-9]{4}";
    jobs[n_jobs++] = (job){"regex (phone)", {WEIR_CONSTRAINT_REGEX, re, sizeof re - 1, 0, 0, NULL}, NULL};
  }
  weir_grammar_vocab *v;
  if (gw_vocab_from_gguf(model, NULL, &v)) return 1;
  printf("vocabulary: %s, %d tokens (%d text tokens, longest %u bytes)\n", model, v->n_tokens,
         v->n_sorted, v->max_len);
  weir_threadpool *pool = NULL;
  if (batch > 0 && weir_threadpool_create(threads, &pool)) return 1;
  double *times = malloc(sizeof(double) * (size_t)tokens * (size_t)walks);
  double *walls = malloc(sizeof(double) * (size_t)tokens * (size_t)walks);
  for (int j = 0; j < n_jobs; j++) {
    double ct[5];
    weir_grammar *g = NULL;
    char err[512];
    for (int k = 0; k < 5; k++) {
      weir_grammar *gg;
      const double t0 = gw_now();
      if (weir_grammar_compile(&jobs[j].spec, &gg, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", jobs[j].name, err);
        return 1;
      }
      ct[k] = gw_now() - t0;
      if (g) weir_grammar_release(gg);
      else g = gg;
    }
    qsort(ct, 5, sizeof *ct, cmp_double);
    printf("%s: compile %.2f ms (median of 5), %u rules, %u positions\n", jobs[j].name,
           ct[2] * 1e3, weir_grammar_num_rules(g), weir_grammar_num_positions(g));
    weir_constraint *c;
    if (weir_constraint_create(g, v, &c)) return 1;
    gw_rng rng = {seed * 7919 + (uint64_t)j};
    int n = 0, total = 0;
    size_t bytes;
    if (timed_walk(c, &rng, tokens, times, walls, &n, &bytes)) return 1;
    report("cold", "cpu", times, n);
    report("cold", "wall", walls, n);
    for (int w = 1; w < walks; w++) {
      if (timed_walk(c, &rng, tokens, times + total, walls + total, &n, &bytes)) return 1;
      total += n;
    }
    report("warm", "cpu", times, total);
    report("warm", "wall", walls, total);
    printf("  token classes: %.1f KiB for the positions reached\n",
           (double)weir_constraint_memory(c) / 1024.0);
    if (pool) {
      /* The matchers are at different points of their own random walks (warm classes). */
      weir_matcher **ms = calloc((size_t)batch, sizeof *ms);
      const size_t words = WEIR_MASK_WORDS(v->n_tokens);
      uint32_t *masks = malloc(words * sizeof(uint32_t) * (size_t)batch);
      for (int i = 0; i < batch; i++) {
        weir_matcher_create(c, &ms[i]);
        for (int step = 0; step < 5 + (i * 7) % 40; step++) {
          weir_matcher_fill_mask(ms[i], masks);
          int32_t cand[1024], k = 0;
          for (int32_t t = 0; t < v->n_tokens && k < 1024; t++)
            if (weir_mask_test(masks, t) && v->rank_of[t] >= 0) cand[k++] = t;
          if (!k) break;
          weir_matcher_accept_token(ms[i], cand[gw_next(&rng) % (uint64_t)k]);
        }
      }
      double bt[64];
      for (int r = 0; r < 64; r++) {
        const double t0 = gw_now();
        weir_matchers_fill_masks(ms, batch, masks, words, pool);
        bt[r] = gw_now() - t0;
      }
      qsort(bt, 64, sizeof *bt, cmp_double);
      printf("  batch of %d on %d threads: median %.1f us per step\n", batch, threads, bt[32] * 1e6);
      for (int i = 0; i < batch; i++) weir_matcher_free(ms[i]);
      free(ms);
      free(masks);
    }
    weir_constraint_release(c);
    weir_grammar_release(g);
    free(jobs[j].owned);
  }
  free(times);
  free(walls);
  weir_threadpool_destroy(pool);
  weir_grammar_vocab_release(v);
  return 0;
}
