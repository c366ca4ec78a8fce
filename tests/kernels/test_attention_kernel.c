/* The CPU attention core (kernels/cpu/attention.h) over long contexts, on every SIMD level
 * this machine runs: contexts of up to 300 positions cross the kernel's tiles of several
 * cache blocks, with sliding windows that start mid-tile, soft-caps, f32 / f16 / int8 caches,
 * group sizes that take the 4-head and 1-head paths, and block sizes that are and are not
 * multiples of 16 (and one larger than a tile).
 *
 * Two properties:
 *  - every query row against a double-precision reference over the values the cache holds;
 *  - batch invariance: a row computed alone (a decode step) is bit-identical to the same row
 *    inside a task of 5 or 17 rows (a verification step) or a 16-row prefill tile, so greedy
 *    speculative decoding reproduces plain decoding exactly.
 * Blocks wholly before a task's first window carry a block id far outside the pool: reading
 * one would fault. The seed is printed with every failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "convert.h"
#include "cpu_isa.h"
#include "testutil.h"
#include "wt_rand.h"

#define FOR_EACH_ISA(lvl)                                                                    \
  for (int lvl = 0; lvl < WEIR_CPU_ISA_COUNT_; lvl++)                                        \
    if (weir_cpu_isa_set((weir_cpu_isa_level)lvl) == 0)

enum { N = 300, MODE_F32 = 0, MODE_F16 = 1, MODE_I8 = 2 };

typedef struct tcase {
  int mode, hd, group, bs, window;
  float softcap;
} tcase;

typedef struct cache {
  uint8_t *pool;
  size_t block_bytes, es, k_scale_off, v_scale_off;
  int32_t *table; /* the sequence's blocks, a random permutation */
  int nblocks;
  double *kval, *vval; /* what the cache holds, [N][hd], for the reference */
} cache;

static int build_cache(const tcase *c, cache *kc) {
  kc->es = c->mode == MODE_F32 ? 4 : c->mode == MODE_F16 ? 2 : 1;
  kc->nblocks = (N + c->bs - 1) / c->bs;
  size_t data = 2 * (size_t)c->bs * (size_t)c->hd * kc->es;
  data = (data + 3) & ~(size_t)3;
  kc->k_scale_off = data;
  kc->v_scale_off = data + (size_t)c->bs * 4;
  kc->block_bytes = c->mode == MODE_I8 ? data + 2 * (size_t)c->bs * 4 : data;
  kc->block_bytes = (kc->block_bytes + 63) & ~(size_t)63;
  const int pool_blocks = kc->nblocks + 3;
  kc->pool = aligned_alloc(64, kc->block_bytes * (size_t)pool_blocks);
  kc->table = malloc(sizeof(int32_t) * (size_t)kc->nblocks);
  kc->kval = malloc(sizeof(double) * N * (size_t)c->hd);
  kc->vval = malloc(sizeof(double) * N * (size_t)c->hd);
  if (!kc->pool || !kc->table || !kc->kval || !kc->vval) return -1;
  memset(kc->pool, 0xff, kc->block_bytes * (size_t)pool_blocks); /* NaN garbage elsewhere */
  int32_t *perm = malloc(sizeof(int32_t) * (size_t)pool_blocks);
  for (int i = 0; i < pool_blocks; i++) perm[i] = i;
  for (int i = pool_blocks - 1; i > 0; i--) {
    int j = (int)(wt_rnd() % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  memcpy(kc->table, perm, sizeof(int32_t) * (size_t)kc->nblocks);
  free(perm);
  float row[64];
  for (int p = 0; p < N; p++)
    for (int kv = 0; kv < 2; kv++) {
      /* keys of a wide range, so the softmax has sharp maxima and the running max moves */
      for (int d = 0; d < c->hd; d++) row[d] = kv == 0 ? wt_frand(-3, 3) : wt_frand(-1, 1);
      uint8_t *blk = kc->pool + (size_t)kc->table[p / c->bs] * kc->block_bytes;
      const int o = p % c->bs;
      uint8_t *dst = blk + ((size_t)kv * c->bs + o) * c->hd * kc->es;
      double *val = (kv == 0 ? kc->kval : kc->vval) + (size_t)p * c->hd;
      if (c->mode == MODE_F32) {
        memcpy(dst, row, (size_t)c->hd * 4);
        for (int d = 0; d < c->hd; d++) val[d] = row[d];
      } else if (c->mode == MODE_F16) {
        uint16_t h[64];
        float back[64];
        weir_f32_to_f16_row(row, h, c->hd);
        weir_f16_to_f32_row(h, back, c->hd);
        memcpy(dst, h, (size_t)c->hd * 2);
        for (int d = 0; d < c->hd; d++) val[d] = back[d];
      } else {
        float amax = 0.0f;
        for (int d = 0; d < c->hd; d++) amax = fabsf(row[d]) > amax ? fabsf(row[d]) : amax;
        float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int d = 0; d < c->hd; d++) {
          float q = row[d] * inv;
          int8_t qi = (int8_t)(q < 0 ? q - 0.5f : q + 0.5f);
          ((int8_t *)dst)[d] = qi;
          val[d] = (double)((float)qi * scale);
        }
        memcpy(blk + (kv == 0 ? kc->k_scale_off : kc->v_scale_off) + (size_t)o * 4, &scale, 4);
      }
    }
  return 0;
}

static void free_cache(cache *kc) {
  free(kc->pool);
  free(kc->table);
  free(kc->kval);
  free(kc->vval);
}

/* Runs the queries [first, first + q_len) of all group heads; out rows as q's. Blocks wholly
 * before the first query's window get a poisoned id. */
static void run_task(const tcase *c, const cache *kc, const float *q, int first, int q_len,
                     float *out, float *scratch) {
  int32_t *table = malloc(sizeof(int32_t) * (size_t)kc->nblocks);
  memcpy(table, kc->table, sizeof(int32_t) * (size_t)kc->nblocks);
  if (c->window > 0 && first - c->window + 1 > 0)
    for (int b = 0; b < (first - c->window + 1) / c->bs; b++) table[b] = 1 << 26;
  weir_attn_cpu_args a = {.q = q + (size_t)first * c->group * c->hd,
                          .out = out + (size_t)first * c->group * c->hd,
                          .q_stride = c->group * c->hd, .q_len = q_len, .n_group = c->group,
                          .head_dim = c->hd, .first_pos = first, .block_table = table,
                          .block_size = c->bs, .kv_base = kc->pool,
                          .block_bytes = kc->block_bytes, .k_offset = 0,
                          .v_offset = (size_t)c->bs * c->hd * kc->es,
                          .token_stride = (size_t)c->hd * kc->es, .kv_f16 = c->mode == MODE_F16,
                          .kv_i8 = c->mode == MODE_I8, .k_scale_offset = kc->k_scale_off,
                          .v_scale_offset = kc->v_scale_off, .scale = 0.3f,
                          .window = c->window, .softcap = c->softcap, .scratch = scratch};
  weir_attn_cpu_run(&a);
  free(table);
}

static void ref_row(const tcase *c, const cache *kc, const float *qrow, int p, double *out) {
  double s[N], m = -INFINITY, z = 0.0;
  int j0 = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
  for (int j = j0; j <= p; j++) {
    double d = 0.0;
    for (int e = 0; e < c->hd; e++) d += (double)(qrow[e] * 0.3f) * kc->kval[(size_t)j * c->hd + e];
    if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
    s[j] = d;
    m = d > m ? d : m;
  }
  for (int e = 0; e < c->hd; e++) out[e] = 0.0;
  for (int j = j0; j <= p; j++) {
    double w = exp(s[j] - m);
    z += w;
    for (int e = 0; e < c->hd; e++) out[e] += w * kc->vval[(size_t)j * c->hd + e];
  }
  for (int e = 0; e < c->hd; e++) out[e] /= z;
}

static void check_case(const tcase *c) {
  cache kc = {0};
  const size_t width = (size_t)c->group * c->hd;
  float *q = malloc(sizeof(float) * N * width), *alone = malloc(sizeof(float) * N * width);
  float *tiled = malloc(sizeof(float) * N * width);
  float *scratch = aligned_alloc(64, (weir_attn_cpu_scratch_floats(17, c->group, c->hd, c->bs) *
                                          sizeof(float) + 63) / 64 * 64);
  double ref[64];
  if (!q || !alone || !tiled || !scratch || build_cache(c, &kc) != 0) {
    CU_FAIL("allocation");
    goto out;
  }
  for (size_t i = 0; i < N * width; i++) q[i] = wt_frand(-2, 2);
  for (int p = 0; p < N; p++) run_task(c, &kc, q, p, 1, alone, scratch);
  int bad = 0;
  for (int p = 0; p < N && !bad; p++)
    for (int g = 0; g < c->group && !bad; g++) {
      ref_row(c, &kc, q + (size_t)p * width + (size_t)g * c->hd, p, ref);
      for (int e = 0; e < c->hd; e++) {
        double got = alone[(size_t)p * width + (size_t)g * c->hd + e];
        if (!(fabs(got - ref[e]) <= 2e-5 + 2e-5 * fabs(ref[e]))) {
          fprintf(stderr, "\n  [isa=%s seed=%llu mode %d hd %d group %d bs %d window %d] "
                          "position %d head %d dim %d: got %.9g want %.9g\n",
                  weir_cpu_isa_name(weir_cpu_isa()), (unsigned long long)wt_seed, c->mode, c->hd,
                  c->group, c->bs, c->window, p, g, e, got, ref[e]);
          bad = 1;
          break;
        }
      }
    }
  CU_ASSERT(!bad);
  /* Verification-like tasks of 5 and 17 rows at every offset mod the tile, and prefill
   * tiles of 16: each row bit-identical to the row alone. */
  static const int lens[] = {5, 17, 16};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    memset(tiled, 0, sizeof(float) * N * width);
    int first = (int)(wt_rnd() % 7);
    for (int p0 = first; p0 + lens[li] <= N; p0 += lens[li])
      run_task(c, &kc, q, p0, lens[li], tiled, scratch);
    int last = first + (N - first) / lens[li] * lens[li];
    int same = memcmp(tiled + (size_t)first * width, alone + (size_t)first * width,
                      sizeof(float) * (size_t)(last - first) * width) == 0;
    if (!same)
      fprintf(stderr, "\n  [isa=%s seed=%llu mode %d hd %d group %d bs %d window %d] rows in "
                      "tasks of %d differ from the rows alone\n",
              weir_cpu_isa_name(weir_cpu_isa()), (unsigned long long)wt_seed, c->mode, c->hd,
              c->group, c->bs, c->window, lens[li]);
    CU_ASSERT(same);
  }
out:
  free_cache(&kc);
  free(q);
  free(alone);
  free(tiled);
  free(scratch);
}

static void test_long_contexts(void) {
  static const tcase cases[] = {
      {MODE_F16, 32, 4, 16, 0, 0.0f},   /* the trained target's geometry */
      {MODE_F16, 64, 4, 32, 150, 0.0f}, /* a window starting mid-tile */
      {MODE_F16, 40, 3, 5, 23, 1.0f},   /* blocks of 5: tiles of one block */
      {MODE_F16, 32, 2, 20, 0, 0.0f},   /* 20 = 16 + a tail of 4, transposed in registers */
      {MODE_F32, 40, 3, 16, 0, 2.0f},   /* V read in place, tile walked block by block */
      {MODE_F32, 16, 8, 4, 37, 0.0f},   /* small blocks: a tile of 32 blocks */
      {MODE_I8, 32, 5, 20, 0, 0.0f},    /* a block size not a multiple of 16: tiles of one */
      {MODE_I8, 48, 6, 16, 100, 1.5f},
      {MODE_F16, 32, 1, 256, 0, 0.0f},  /* a block larger than a tile */
      {MODE_F16, 64, 8, 16, 129, 0.0f}, /* the window one past a tile */
  };
  FOR_EACH_ISA(lvl) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
  }
}

int main(void) {
  wt_rand_init();
  fprintf(stderr, "kernels_attention: seed %llu (rerun with WT_SEED=%llu)\n",
          (unsigned long long)wt_seed, (unsigned long long)wt_seed);
  static const wt_test tests[] = {{"long_contexts", test_long_contexts}, {NULL, NULL}};
  return wt_run_suite("kernels_attention", tests);
}
