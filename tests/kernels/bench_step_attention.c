/* Micro-benchmark of the attention of one step of the trained target
 * (models/kjv-target.gguf: 6 layers, 8 query heads of 32 over 2 KV heads, f16 KV cache in
 * blocks of 16 tokens): one sequence whose step carries 1 to 17 new tokens (a plain decode
 * row, verification steps of 1 to 16 drafts) at contexts of 128 to 512, the 12 tasks the
 * paged plugin runs (one per layer and KV head), each layer's blocks in its own part of the
 * pool as the cache holds them. Reports the best of 300 steps in thread CPU time and each
 * step size against the one-row step at the same context: what a verification row adds in
 * attention (docs/perf/speculative.md). Not a test: build/tests/bin/bench_step_attention. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { LAYERS = 6, HEADS = 8, KV = 2, HD = 32, BS = 16, MAX_CTX = 512, MAX_Q = 17 };

typedef struct bench {
  uint8_t *pool;
  size_t block_bytes, head_bytes;
  int32_t table[LAYERS][MAX_CTX / BS];
  float *q, *out, *scratch;
} bench;

static double step(bench *b, int32_t ctx, int32_t q_len) {
  const double t0 = cpu_now();
  for (int l = 0; l < LAYERS; l++)
    for (int h = 0; h < KV; h++) {
      weir_attn_cpu_args a = {.q = b->q + h * (HEADS / KV) * HD,
                              .out = b->out + h * (HEADS / KV) * HD,
                              .q_stride = HEADS * HD, .q_len = q_len, .n_group = HEADS / KV,
                              .head_dim = HD, .first_pos = ctx - q_len,
                              .block_table = b->table[l], .block_size = BS, .kv_base = b->pool,
                              .block_bytes = b->block_bytes, .k_offset = h * b->head_bytes,
                              .v_offset = (KV + h) * b->head_bytes, .token_stride = HD * 2,
                              .kv_f16 = 1, .scale = 0.17677669f, .scratch = b->scratch};
      weir_attn_cpu_run(&a);
    }
  return cpu_now() - t0;
}

int main(void) {
  bench b;
  b.head_bytes = (size_t)BS * HD * 2;
  b.block_bytes = 2 * KV * b.head_bytes;
  const int nblocks = LAYERS * MAX_CTX / BS;
  b.pool = aligned_alloc(64, b.block_bytes * (size_t)nblocks);
  b.q = malloc(sizeof(float) * MAX_Q * HEADS * HD);
  b.out = malloc(sizeof(float) * MAX_Q * HEADS * HD);
  size_t sf = weir_attn_cpu_scratch_floats(MAX_Q, HEADS / KV, HD, BS);
  b.scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
  if (!b.pool || !b.q || !b.out || !b.scratch) return 1;
  /* Small f16 values of both signs; queries of moderate size so the softmax is not flat. */
  for (size_t i = 0; i < b.block_bytes * (size_t)nblocks / 2; i++)
    ((uint16_t *)b.pool)[i] = (uint16_t)(0x3000 + (i * 2654435761u >> 9) % 0x800 + ((i & 1) << 15));
  for (int i = 0; i < MAX_Q * HEADS * HD; i++) b.q[i] = (float)(i % 13) * 0.3f - 1.8f;
  /* Layer l's blocks interleaved with the others' (as a pool fills step by step). */
  for (int l = 0; l < LAYERS; l++)
    for (int j = 0; j < MAX_CTX / BS; j++) b.table[l][j] = j * LAYERS + l;

  static const int32_t ctxs[] = {128, 256, 432, 512};
  static const int32_t qls[] = {1, 2, 3, 5, 9, 17};
  printf("weir bench_step_attention: the trained target's attention of a step (6 layers x 2 "
         "KV heads, 4 query heads each, head_dim 32, f16 KV), best of 300 steps, thread CPU "
         "time\n");
  printf("%8s %6s %10s %10s\n", "context", "rows", "us", "x one row");
  for (size_t c = 0; c < sizeof ctxs / sizeof ctxs[0]; c++) {
    double best[sizeof qls / sizeof qls[0]];
    for (size_t k = 0; k < sizeof qls / sizeof qls[0]; k++) best[k] = 1e30;
    /* The sizes alternated step by step, so drift hits each alike. */
    for (int it = 0; it < 300; it++)
      for (size_t k = 0; k < sizeof qls / sizeof qls[0]; k++) {
        double t = step(&b, ctxs[c], qls[k]);
        if (t < best[k]) best[k] = t;
      }
    for (size_t k = 0; k < sizeof qls / sizeof qls[0]; k++)
      printf("%8d %6d %10.1f %9.2fx\n", ctxs[c], qls[k], best[k] * 1e6, best[k] / best[0]);
  }
  free(b.pool);
  free(b.q);
  free(b.out);
  free(b.scratch);
  return 0;
}
