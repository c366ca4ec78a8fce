/* Micro-benchmark of the CPU matmul kernels on the linear-layer shapes of a 1.1B Llama
 * (dim 2048, 32 heads, 4 KV heads, FFN 5632, vocab 32000), f16 weights:
 *   GEMV (1 token) and a batched decode of 4 tokens: GB/s of weight streamed;
 *   GEMM (64 and 256 tokens): GFLOP/s;
 * with 1 and 2 threads, for the best SIMD level and the scalar baseline (same run), and an
 * estimate of the matmul time of one decode step (22 layers + LM head).
 * Each call reads its weights from a different place of a 512 MiB arena, as a real decode
 * step does (2 GiB of weights per step never fit in cache), so GEMV numbers are DRAM numbers.
 * Not a test: run by hand, e.g. build/tests/bin/bench_kernels [seconds_per_case]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "attention.h"
#include "convert.h"
#include "cpu_isa.h"
#include "matmul.h"
#include "wt_pool.h"

typedef struct shape {
  const char *name;
  int64_t rows, cols;
  int per_layer; /* times per layer; 0 = once per step (LM head) */
} shape;

static const shape k_shapes[] = {
    {"attn_q/o 2048x2048", 2048, 2048, 2}, {"attn_k/v 256x2048", 256, 2048, 2},
    {"ffn_gate/up 5632x2048", 5632, 2048, 2}, {"ffn_down 2048x5632", 2048, 5632, 1},
    {"lm_head 32000x2048", 32000, 2048, 0},
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define ARENA_ELEMS ((size_t)256 << 20)

static uint16_t *g_arena;
static size_t g_arena_pos;

/* Seconds per call, the best of repeated timing windows. */
static double time_matmul(wt_pool *pool, weir_matmul_args *a, double budget) {
  double best = 1e30, start = now();
  int iters = 0;
  size_t elems = (size_t)a->rows * (size_t)a->cols;
  do {
    if (g_arena_pos + elems > ARENA_ELEMS) g_arena_pos = 0;
    a->w = g_arena + g_arena_pos;
    g_arena_pos += elems;
    double t0 = now();
    if (wt_pool_threads(pool) > 1)
      wt_pool_parallel_for(pool, a->rows, 64, weir_matmul_chunk, a);
    else
      weir_matmul_rows(a, 0, a->rows);
    double dt = now() - t0;
    if (dt < best) best = dt;
    iters++;
  } while (now() - start < budget || iters < 2);
  return best;
}

/* Attention core on the 1.1B geometry (32 heads, 4 KV heads, head_dim 64, block 16, f16 KV):
 * one layer, one sequence; prefill of n tokens (causal) and one decode token at context n.
 * Reports GFLOP/s counting 4 * head_dim flops per (query head, visible key). */
static void bench_attention(double budget) {
  enum { HEADS = 32, KV = 4, HD = 64, BS = 16, N = 512 };
  const int group = HEADS / KV;
  size_t head_bytes = (size_t)BS * HD * 2, block_bytes = 2 * KV * head_bytes;
  int nblocks = N / BS;
  uint8_t *kv = malloc(block_bytes * nblocks);
  for (size_t i = 0; i < block_bytes * nblocks / 2; i++)
    ((uint16_t *)kv)[i] = (uint16_t)(0x2c00 + (i * 2654435761u >> 9) % 0x800);
  int32_t table[N / BS];
  for (int i = 0; i < nblocks; i++) table[i] = i;
  float *q = malloc(sizeof(float) * N * HEADS * HD), *out = malloc(sizeof(float) * N * HEADS * HD);
  for (size_t i = 0; i < (size_t)N * HEADS * HD; i++) q[i] = (float)(i % 13) * 0.05f - 0.3f;
  float *scratch = NULL;
  size_t sf = weir_attn_cpu_scratch_floats(16, group, HD, BS);
  if (posix_memalign((void **)&scratch, 64, sf * sizeof(float))) return;
  for (int mode = 0; mode < 2; mode++) {
    int q_len = mode == 0 ? N : 1, first = mode == 0 ? 0 : N - 1;
    double best = 1e30, start = now();
    int iters = 0;
    do {
      double t0 = now();
      for (int h = 0; h < KV; h++)
        for (int i0 = 0; i0 < q_len; i0 += 16) {
          weir_attn_cpu_args a = {.q = q + (size_t)i0 * HEADS * HD + h * group * HD,
                                  .out = out + (size_t)i0 * HEADS * HD + h * group * HD,
                                  .q_stride = HEADS * HD, .q_len = q_len - i0 < 16 ? q_len - i0 : 16,
                                  .n_group = group, .head_dim = HD, .first_pos = first + i0,
                                  .block_table = table, .block_size = BS, .kv_base = kv,
                                  .block_bytes = block_bytes, .k_offset = h * head_bytes,
                                  .v_offset = (KV + h) * head_bytes, .token_stride = HD * 2,
                                  .kv_f16 = 1, .scale = 0.125f, .scratch = scratch};
          weir_attn_cpu_run(&a);
        }
      double dt = now() - t0;
      if (dt < best) best = dt;
      iters++;
    } while (now() - start < budget || iters < 2);
    double pairs = mode == 0 ? (double)N * (N + 1) / 2 : N;
    printf("%-8s 1   attention %-14s %8.3f ms  %8.2f GFLOP/s (one layer, 1 thread)\n",
           weir_cpu_isa_name(weir_cpu_isa()), mode == 0 ? "prefill 512" : "decode @512",
           best * 1e3, pairs * HEADS * 4.0 * HD / best / 1e9);
  }
  free(kv);
  free(q);
  free(out);
  free(scratch);
}

int main(int argc, char **argv) {
  double budget = argc > 1 ? atof(argv[1]) : 0.3;
  int max_rows = 32000, max_cols = 5632, max_tok = 256;
  (void)max_rows;
  uint16_t *w = NULL;
  if (posix_memalign((void **)&w, 2 << 20, ARENA_ELEMS * 2) != 0) return 1;
  /* Huge pages as the CPU device plugin asks for big allocations (WEIR_BENCH_NO_THP=1: not). */
  if (!getenv("WEIR_BENCH_NO_THP")) madvise(w, ARENA_ELEMS * 2, MADV_HUGEPAGE);
  g_arena = w;
  float *x = malloc((size_t)max_tok * max_cols * 4);
  float *y = malloc((size_t)max_tok * max_rows * 4);
  if (!x || !y) return 1;
  /* Small f16 values of varied mantissa (exponent 2^-4 .. 2^-1, both signs). */
  for (size_t i = 0; i < ARENA_ELEMS; i++)
    w[i] = (uint16_t)(0x2c00 + ((i * 2654435761u) >> 7) % 0x1000 + ((i & 1) << 15));
  for (size_t i = 0; i < (size_t)max_tok * max_cols; i++) x[i] = (float)(i % 97) * 0.01f - 0.4f;

  weir_cpu_isa_level best = weir_cpu_isa();
  printf("weir bench_kernels: f16 weights, best ISA %s, %.2f s per case\n",
         weir_cpu_isa_name(best), budget);
  printf("%-8s %-3s %-24s %10s %10s %12s %12s\n", "isa", "thr", "shape", "GEMV GB/s",
         "x4 GB/s", "GEMM64 GF/s", "GEMM256 GF/s");
  weir_cpu_isa_level levels[2] = {best, WEIR_CPU_ISA_SCALAR};
  int n_levels = best == WEIR_CPU_ISA_SCALAR ? 1 : 2;
  for (int li = 0; li < n_levels; li++) {
    weir_cpu_isa_set(levels[li]);
    bench_attention(budget);
    for (int threads = 1; threads <= 2; threads++) {
      wt_pool *pool = wt_pool_create(threads);
      double step = 0;
      for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
        const shape *sh = &k_shapes[si];
        weir_matmul_args a = {.w = w, .w_dtype = WEIR_DTYPE_F16, .rows = sh->rows,
                              .cols = sh->cols, .x = x, .y = y, .n_tokens = 1};
        double t1 = time_matmul(pool, &a, budget);
        double gbs = (double)sh->rows * sh->cols * 2 / t1 / 1e9;
        step += t1 * (sh->per_layer ? 22.0 * sh->per_layer : 1.0);
        a.n_tokens = 4;
        double gbs4 = (double)sh->rows * sh->cols * 2 / time_matmul(pool, &a, budget) / 1e9;
        double gf[2];
        const int toks[2] = {64, 256};
        for (int k = 0; k < 2; k++) {
          /* The scalar path is slow: time it on the smaller token count only. */
          if (levels[li] == WEIR_CPU_ISA_SCALAR && k == 1) {
            gf[k] = 0;
            continue;
          }
          a.n_tokens = toks[k];
          double t = time_matmul(pool, &a, budget);
          gf[k] = 2.0 * sh->rows * sh->cols * toks[k] / t / 1e9;
        }
        printf("%-8s %-3d %-24s %10.2f %10.2f %12.2f %12.2f\n", weir_cpu_isa_name(levels[li]),
               threads, sh->name, gbs, gbs4, gf[0], gf[1]);
        fflush(stdout);
      }
      printf("%-8s %-3d decode step matmuls (22 layers + lm_head): %.1f ms/token\n",
             weir_cpu_isa_name(levels[li]), threads, step * 1e3);
      wt_pool_destroy(pool);
    }
  }
  free(w);
  free(x);
  free(y);
  return 0;
}
