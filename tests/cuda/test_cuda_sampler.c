/* The default sampler on CUDA against the CPU default sampler (the reference), loaded side by
 * side: the same logits, parameters and seeds must give the same tokens, the same random-state
 * advances, the same top-logprob lists and (within rounding) the same logprobs and
 * distributions. Skips (77) without a GPU. */
#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"

static ch_plugin gpu, cpu;
#define GS ((const weir_sampler_ops *)gpu.ops)
#define CS ((const weir_sampler_ops *)cpu.ops)

enum { ROWS = 6, VOCAB = 5000, PROMPT = 40, OUTPUT = 25 };

typedef struct fixture {
  weir_sampling_params params[ROWS];
  weir_sampling_row rows[ROWS];
  uint64_t state_cpu[ROWS][4], state_gpu[ROWS][4];
  int32_t prompt[ROWS][PROMPT], output[ROWS][OUTPUT], suppress[ROWS][3];
  float *logits;    /* host [ROWS][VOCAB] */
  float *d_logits;  /* device */
} fixture;

static void make(fixture *f, const weir_sampling_params *p) {
  memset(f, 0, sizeof *f);
  f->logits = malloc((size_t)ROWS * VOCAB * 4);
  /* Peaked logits so that truncation matters; a few exact ties to test tie-breaking. */
  for (int r = 0; r < ROWS; r++) {
    for (int i = 0; i < VOCAB; i++) f->logits[r * VOCAB + i] = ch_uniform(-4, 4);
    for (int k = 0; k < 20; k++) f->logits[r * VOCAB + (int)(ch_rand_u32() % VOCAB)] += 6.0f;
    f->logits[r * VOCAB + 17] = f->logits[r * VOCAB + 4000] = 11.5f;
  }
  for (int r = 0; r < ROWS; r++) {
    f->params[r] = *p;
    f->params[r].struct_size = sizeof f->params[r];
    for (int j = 0; j < 4; j++) f->state_cpu[r][j] = ((uint64_t)ch_rand_u32() << 32) | ch_rand_u32();
    memcpy(f->state_gpu[r], f->state_cpu[r], sizeof f->state_cpu[r]);
    for (int i = 0; i < PROMPT; i++) f->prompt[r][i] = (int32_t)(ch_rand_u32() % 300);
    for (int i = 0; i < OUTPUT; i++) f->output[r][i] = (int32_t)(ch_rand_u32() % 300);
    f->suppress[r][0] = 17;
    f->suppress[r][1] = (int32_t)(ch_rand_u32() % VOCAB);
    f->suppress[r][2] = -5; /* out of range: ignored */
    weir_sampling_row *w = &f->rows[r];
    w->params = &f->params[r];
    w->prompt_tokens = f->prompt[r];
    w->num_prompt_tokens = PROMPT;
    w->output_tokens = f->output[r];
    w->num_output_tokens = OUTPUT;
    w->suppress_tokens = f->suppress[r];
    w->num_suppress_tokens = r % 2 ? 3 : 0;
  }
  f->d_logits = ch_dalloc((size_t)ROWS * VOCAB * 4);
}

static void drop(fixture *f) {
  ch_dfree(f->d_logits);
  free(f->logits);
}

/* One sampling round on both; returns the number of rows whose token differs. */
static int round_both(fixture *f, weir_sample_result *rc_cpu, weir_sample_result *rc_gpu) {
  ch_h2d(f->d_logits, f->logits, (size_t)ROWS * VOCAB * 4);
  float *host = malloc((size_t)ROWS * VOCAB * 4);
  memcpy(host, f->logits, (size_t)ROWS * VOCAB * 4);
  for (int r = 0; r < ROWS; r++) f->rows[r].rng_state = f->state_cpu[r];
  CU_ASSERT_EQUAL_FATAL(CS->sample(cpu.self, f->rows, ROWS, host, VOCAB, rc_cpu), WEIR_OK);
  for (int r = 0; r < ROWS; r++) f->rows[r].rng_state = f->state_gpu[r];
  int rc = GS->sample(gpu.self, f->rows, ROWS, f->d_logits, VOCAB, rc_gpu);
  if (rc != WEIR_OK) fprintf(stderr, "\n  gpu sample: %s (%s)\n", weir_strerror(rc), ch_last_error(&gpu));
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  free(host);
  int diff = 0;
  for (int r = 0; r < ROWS; r++) diff += rc_cpu[r].token != rc_gpu[r].token;
  return diff;
}

static void compare(const weir_sampling_params *p, int rounds, int expect_same_tokens) {
  fixture f;
  make(&f, p);
  int diff = 0;
  for (int k = 0; k < rounds; k++) {
    weir_sample_result a[ROWS], b[ROWS];
    diff += round_both(&f, a, b);
    for (int r = 0; r < ROWS; r++) {
      if (p->num_logprobs >= 0) {
        CU_ASSERT(fabsf(a[r].logprob - b[r].logprob) < 1e-4f || a[r].token != b[r].token);
        CU_ASSERT_EQUAL(a[r].num_top, b[r].num_top);
        for (int i = 0; i < a[r].num_top && i < b[r].num_top; i++) {
          CU_ASSERT_EQUAL(a[r].top_tokens[i], b[r].top_tokens[i]);
          CU_ASSERT(fabsf(a[r].top_logprobs[i] - b[r].top_logprobs[i]) < 1e-4f);
        }
      }
    }
    /* The states advance identically (one step per drawn row). */
    CU_ASSERT(memcmp(f.state_cpu, f.state_gpu, sizeof f.state_cpu) == 0);
    /* Fresh logits for the next round. */
    for (int i = 0; i < ROWS * VOCAB; i++) f.logits[i] = ch_uniform(-4, 4) + (i % 97 == 0 ? 5 : 0);
  }
  if (expect_same_tokens) {
    if (diff) fprintf(stderr, "\n  %d of %d tokens differ (t=%g k=%d p=%g min_p=%g)\n", diff,
                      rounds * ROWS, p->temperature, p->top_k, p->top_p, p->min_p);
    CU_ASSERT_EQUAL(diff, 0);
  }
  drop(&f);
}

static weir_sampling_params base(void) {
  weir_sampling_params p = {.struct_size = sizeof p, .temperature = 1.0f, .top_k = 0,
                            .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f,
                            .num_logprobs = -1};
  return p;
}

static void test_greedy(void) {
  weir_sampling_params p = base();
  p.temperature = 0.0f;
  p.num_logprobs = 5;
  compare(&p, 4, 1);
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.num_logprobs = 20;
  compare(&p, 4, 1);
}

static void test_temperature(void) {
  weir_sampling_params p = base();
  p.temperature = 0.8f;
  p.num_logprobs = 0;
  compare(&p, 20, 1); /* id order on both sides: identical draws */
  p.min_p = 0.05f;
  compare(&p, 20, 1);
}

/* With top-k or top-p the CPU walks its candidates in quickselect order, the GPU in sorted
 * order, so single draws may differ; the distributions must not. */
static void check_probs(const weir_sampling_params *p, int expect_support) {
  fixture f;
  make(&f, p);
  ch_h2d(f.d_logits, f.logits, (size_t)ROWS * VOCAB * 4);
  float *host = malloc((size_t)ROWS * VOCAB * 4), *pa = malloc((size_t)ROWS * VOCAB * 4),
        *pb = malloc((size_t)ROWS * VOCAB * 4);
  memcpy(host, f.logits, (size_t)ROWS * VOCAB * 4);
  for (int r = 0; r < ROWS; r++) f.rows[r].rng_state = NULL; /* probs() draws nothing */
  CU_ASSERT_EQUAL_FATAL(CS->probs(cpu.self, f.rows, ROWS, host, VOCAB, pa), WEIR_OK);
  CU_ASSERT_EQUAL_FATAL(GS->probs(gpu.self, f.rows, ROWS, f.d_logits, VOCAB, pb), WEIR_OK);
  double maxd = 0;
  int nz = 0;
  for (int i = 0; i < ROWS * VOCAB; i++) {
    double d = fabs((double)pa[i] - pb[i]);
    if (!(d <= maxd)) maxd = d;
    nz += pb[i] > 0;
  }
  CU_ASSERT(maxd < 1e-6);
  if (expect_support > 0) CU_ASSERT_EQUAL(nz, ROWS * expect_support);
  free(host);
  free(pa);
  free(pb);
  drop(&f);
}

static void test_truncated_distributions(void) {
  weir_sampling_params p = base();
  p.temperature = 0.7f;
  p.top_k = 40;
  check_probs(&p, 40);
  p.top_k = 0;
  p.top_p = 0.85f;
  check_probs(&p, 0);
  p.top_k = 100;
  p.min_p = 0.03f;
  p.repetition_penalty = 1.2f;
  check_probs(&p, 0);
  /* Draws still advance the states exactly as on the CPU. */
  compare(&p, 5, 0);
}

static void test_invalid(void) {
  weir_sampling_params p = base();
  p.temperature = -1.0f;
  fixture f;
  make(&f, &p);
  weir_sample_result out[ROWS];
  for (int r = 0; r < ROWS; r++) f.rows[r].rng_state = f.state_gpu[r];
  CU_ASSERT_EQUAL(GS->sample(gpu.self, f.rows, ROWS, f.d_logits, VOCAB, out), WEIR_E_INVAL);
  drop(&f);
}

int main(void) {
  ch_device_open_or_skip();
  ch_seed_from_env(0x5a3b0004u);
  int rc = ch_plugin_open(&gpu, "weir_sampler_default_cuda.so");
  if (rc != WEIR_OK) {
    fprintf(stderr, "default (cuda) failed to load: %s: %s\n", weir_strerror(rc),
            ch_last_error(&gpu));
    return 1;
  }
  rc = ch_plugin_open(&cpu, "weir_sampler_default.so");
  if (rc != WEIR_OK) {
    fprintf(stderr, "the CPU default sampler failed to load: %s: %s\n", weir_strerror(rc),
            ch_last_error(&cpu));
    return 1;
  }
  static const ch_test tests[] = {
      {"greedy, penalties, top logprobs", test_greedy},
      {"temperature, min-p: same draws as the CPU", test_temperature},
      {"top-k, top-p, min-p: same distributions as the CPU", test_truncated_distributions},
      {"invalid parameters", test_invalid},
      {NULL, NULL},
  };
  rc = ch_run_suite("cuda_sampler", tests);
  ch_plugin_close(&gpu);
  ch_plugin_close(&cpu);
  ch_device_close();
  return rc;
}
