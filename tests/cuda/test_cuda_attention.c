/* The paged attention plugin against a double-precision CPU reference: decode batches
 * (GQA), long contexts that take the split-KV path (reduction fused into the launch),
 * prefill over a cached prefix (chunked prefill), a mixed batch, every KV dtype, and
 * copy_blocks; and, per scenario, ABI 1.7 forward_rope against the device's rope + forward. Block tables are random
 * permutations of the pool, outputs are NaN-poisoned first. Skips (77) without a GPU. */
#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"

static ch_plugin attn;
#define A ((const weir_attention_ops *)attn.ops)

/* A scenario: per sequence, the context length after this step and the new tokens in it. */
typedef struct scenario {
  const char *name;
  int32_t n_heads, n_kv_heads, head_dim;
  weir_dtype kv_dtype;
  int32_t num_seqs;
  int32_t ctx[8], qlen[8];
} scenario;

/* int8: symmetric with one f32 scale per row, in f32 as the kernels compute it. */
static float i8_scale(const float *row, int n, float *inv) {
  float amax = 0.0f;
  for (int d = 0; d < n; d++) amax = fabsf(row[d]) > amax ? fabsf(row[d]) : amax;
  *inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  return amax / 127.0f;
}

static int8_t i8_of(float x, float inv) {
  float q = x * inv;
  return (int8_t)(q < 0.0f ? q - 0.5f : q + 0.5f);
}

/* A K or V row of n values as the cache holds it. */
static void round_row(float *row, int n, weir_dtype t) {
  float inv, sc = t == WEIR_DTYPE_I8 ? i8_scale(row, n, &inv) : 0.0f;
  for (int d = 0; d < n; d++) {
    switch (t) {
    case WEIR_DTYPE_F16: row[d] = ch_f16_to_f32(ch_f32_to_f16(row[d])); break;
    case WEIR_DTYPE_BF16: row[d] = weir_bf16_to_f32(weir_f32_to_bf16(row[d])); break;
    case WEIR_DTYPE_I8: row[d] = (float)i8_of(row[d], inv) * sc; break;
    default: break;
    }
  }
}

/* Writes one token's K or V row for head h into host block memory as the plugin lays it out
 * (K: [kv_heads][block][head_dim], then V likewise; for int8 then the f32 row scales, K
 * [kv_heads][block] then V). Used to pre-fill the cached prefix. */
static void put_kv(unsigned char *blk, const weir_attn_shape *sh, int is_v, int h, int off,
                   const float *row) {
  size_t es = weir_dtype_block_bytes(sh->kv_dtype);
  size_t rowi = (size_t)is_v * sh->n_kv_heads * sh->block_size + (size_t)h * sh->block_size +
                (size_t)off;
  size_t base = rowi * (size_t)sh->head_dim;
  float inv = 0.0f;
  if (sh->kv_dtype == WEIR_DTYPE_I8) {
    float sc = i8_scale(row, sh->head_dim, &inv);
    size_t data = 2 * (size_t)sh->n_kv_heads * sh->block_size * (size_t)sh->head_dim;
    memcpy(blk + data + rowi * 4, &sc, 4);
  }
  for (int d = 0; d < sh->head_dim; d++) {
    unsigned char *at = blk + (base + (size_t)d) * es;
    if (sh->kv_dtype == WEIR_DTYPE_F32) {
      memcpy(at, &row[d], 4);
    } else if (sh->kv_dtype == WEIR_DTYPE_I8) {
      int8_t q = i8_of(row[d], inv);
      memcpy(at, &q, 1);
    } else {
      uint16_t u = sh->kv_dtype == WEIR_DTYPE_F16 ? ch_f32_to_f16(row[d]) : weir_f32_to_bf16(row[d]);
      memcpy(at, &u, 2);
    }
  }
}

static void run_scenario(const scenario *sc) {
  const int bs = 16;
  weir_attn_shape sh = {.struct_size = sizeof sh, .n_layers = 1, .n_heads = sc->n_heads,
                        .n_kv_heads = sc->n_kv_heads, .head_dim = sc->head_dim, .block_size = bs,
                        .kv_dtype = sc->kv_dtype,
                        .scale = 1.0f / sqrtf((float)sc->head_dim)};
  const size_t bb = A->block_bytes(attn.self, &sh);
  CU_ASSERT_FATAL(bb == 2 * (size_t)sc->n_kv_heads * bs * sc->head_dim *
                               weir_dtype_block_bytes(sc->kv_dtype) +
                           (sc->kv_dtype == WEIR_DTYPE_I8 ? 2 * (size_t)sc->n_kv_heads * bs * 4 : 0));
  const int G = sc->n_heads / sc->n_kv_heads, hd = sc->head_dim;
  const int kvw = sc->n_kv_heads * hd, qw = sc->n_heads * hd;

  /* Geometry: blocks per sequence, a pool with spare blocks, a random block assignment. */
  int32_t qsl[9] = {0}, max_q = 0, max_ctx = 0, max_blocks = 0, total_blocks = 0;
  for (int s = 0; s < sc->num_seqs; s++) {
    qsl[s + 1] = qsl[s] + sc->qlen[s];
    if (sc->qlen[s] > max_q) max_q = sc->qlen[s];
    if (sc->ctx[s] > max_ctx) max_ctx = sc->ctx[s];
    int nb = (sc->ctx[s] + bs - 1) / bs;
    if (nb > max_blocks) max_blocks = nb;
    total_blocks += nb;
  }
  const int num_tokens = qsl[sc->num_seqs];
  const int pool_blocks = total_blocks + 5;
  int32_t *perm = malloc((size_t)pool_blocks * 4);
  for (int i = 0; i < pool_blocks; i++) perm[i] = i;
  for (int i = pool_blocks - 1; i > 0; i--) {
    int j = (int)(ch_rand_u32() % (uint32_t)(i + 1));
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int32_t *btab = calloc((size_t)sc->num_seqs * max_blocks, 4);
  int next = 0;
  for (int s = 0; s < sc->num_seqs; s++)
    for (int b = 0; b < (sc->ctx[s] + bs - 1) / bs; b++) btab[s * max_blocks + b] = perm[next++];

  /* Every token's K and V (the full context), rounded as the cache will store them. */
  float **kall = calloc((size_t)sc->num_seqs, sizeof *kall);
  float **vall = calloc((size_t)sc->num_seqs, sizeof *vall);
  unsigned char *pool = calloc((size_t)pool_blocks, bb);
  for (int b = 0; b < pool_blocks * (int)bb; b++) pool[b] = 0xFF; /* NaN garbage elsewhere */
  float *k = malloc((size_t)num_tokens * kvw * 4), *v = malloc((size_t)num_tokens * kvw * 4);
  int32_t *slots = malloc((size_t)num_tokens * 4);
  for (int s = 0; s < sc->num_seqs; s++) {
    kall[s] = malloc((size_t)sc->ctx[s] * kvw * 4);
    vall[s] = malloc((size_t)sc->ctx[s] * kvw * 4);
    ch_fill_uniform(kall[s], (size_t)sc->ctx[s] * kvw, -1, 1);
    ch_fill_uniform(vall[s], (size_t)sc->ctx[s] * kvw, -1, 1);
    const int first_new = sc->ctx[s] - sc->qlen[s];
    for (int t = 0; t < sc->ctx[s]; t++) {
      const int blk = btab[s * max_blocks + t / bs], off = t % bs;
      if (t < first_new) { /* cached prefix: already in the pool */
        for (int h = 0; h < sc->n_kv_heads; h++) {
          put_kv(pool + (size_t)blk * bb, &sh, 0, h, off, kall[s] + (size_t)t * kvw + h * hd);
          put_kv(pool + (size_t)blk * bb, &sh, 1, h, off, vall[s] + (size_t)t * kvw + h * hd);
        }
      } else { /* new this step: the plugin stores it */
        const int row = qsl[s] + t - first_new;
        memcpy(k + (size_t)row * kvw, kall[s] + (size_t)t * kvw, (size_t)kvw * 4);
        memcpy(v + (size_t)row * kvw, vall[s] + (size_t)t * kvw, (size_t)kvw * 4);
        slots[row] = blk * bs + off;
      }
      for (int h = 0; h < sc->n_kv_heads; h++) {
        round_row(kall[s] + (size_t)t * kvw + h * hd, hd, sc->kv_dtype);
        round_row(vall[s] + (size_t)t * kvw + h * hd, hd, sc->kv_dtype);
      }
    }
  }
  float *q = malloc((size_t)num_tokens * qw * 4);
  ch_fill_uniform(q, (size_t)num_tokens * qw, -1, 1);

  /* Reference. */
  double *ref = calloc((size_t)num_tokens * qw, sizeof *ref);
  double *sc_buf = malloc((size_t)max_ctx * sizeof *sc_buf);
  for (int s = 0; s < sc->num_seqs; s++)
    for (int i = 0; i < sc->qlen[s]; i++) {
      const int row = qsl[s] + i, pos = sc->ctx[s] - sc->qlen[s] + i;
      for (int h = 0; h < sc->n_heads; h++) {
        const int kh = h / G;
        const float *qr = q + (size_t)row * qw + h * hd;
        double mx = -INFINITY;
        for (int t = 0; t <= pos; t++) {
          double dot = 0;
          for (int d = 0; d < hd; d++) dot += (double)qr[d] * kall[s][(size_t)t * kvw + kh * hd + d];
          sc_buf[t] = dot * sh.scale;
          if (sc_buf[t] > mx) mx = sc_buf[t];
        }
        double sum = 0;
        for (int t = 0; t <= pos; t++) sum += (sc_buf[t] = exp(sc_buf[t] - mx));
        double *o = ref + (size_t)row * qw + h * hd;
        for (int t = 0; t <= pos; t++)
          for (int d = 0; d < hd; d++) o[d] += sc_buf[t] / sum * vall[s][(size_t)t * kvw + kh * hd + d];
      }
    }

  /* Device side. */
  void *dpool = ch_dalloc((size_t)pool_blocks * bb);
  ch_h2d(dpool, pool, (size_t)pool_blocks * bb);
  float *dq = ch_dalloc((size_t)num_tokens * qw * 4), *dk = ch_dalloc((size_t)num_tokens * kvw * 4),
        *dv = ch_dalloc((size_t)num_tokens * kvw * 4), *dout = ch_dalloc((size_t)num_tokens * qw * 4);
  ch_h2d(dq, q, (size_t)num_tokens * qw * 4);
  ch_h2d(dk, k, (size_t)num_tokens * kvw * 4);
  ch_h2d(dv, v, (size_t)num_tokens * kvw * 4);
  ch_poison(dout, (size_t)num_tokens * qw * 4);
  int32_t *dqsl = ch_dalloc(sizeof qsl), *dctx = ch_dalloc(sizeof sc->ctx),
          *dbt = ch_dalloc((size_t)sc->num_seqs * max_blocks * 4),
          *dslots = ch_dalloc((size_t)num_tokens * 4);
  ch_h2d(dqsl, qsl, sizeof qsl);
  ch_h2d(dctx, sc->ctx, sizeof sc->ctx);
  ch_h2d(dbt, btab, (size_t)sc->num_seqs * max_blocks * 4);
  ch_h2d(dslots, slots, (size_t)num_tokens * 4);
  weir_attn_batch batch = {.struct_size = sizeof batch, .num_seqs = sc->num_seqs,
                           .num_tokens = num_tokens, .query_start_loc = dqsl,
                           .context_lens = dctx, .block_tables = dbt,
                           .max_blocks_per_seq = max_blocks, .slot_mapping = dslots,
                           .max_query_len = max_q, .max_context_len = max_ctx,
                           .query_start_loc_host = qsl, .context_lens_host = sc->ctx,
                           .block_tables_host = btab, .slot_mapping_host = slots};
  weir_kv_view view = {.base = dpool, .block_bytes = bb, .num_blocks = pool_blocks};
  int rc = A->forward(attn.self, &sh, &batch, &view, dq, dk, dv, dout);
  if (rc != WEIR_OK) fprintf(stderr, "\n  forward: %s (%s)\n", weir_strerror(rc), ch_last_error(&attn));
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  float *out = malloc((size_t)num_tokens * qw * 4);
  ch_d2h(out, dout, (size_t)num_tokens * qw * 4);
  double err = ch_rel_err(out, ref, (size_t)num_tokens * qw);
  printf("\n  %s: rel err %.3g", sc->name, err);
  CU_ASSERT(err < 1e-4);

  /* The step's K and V landed in their slots, bit-exact after rounding. */
  unsigned char *pool_back = malloc((size_t)pool_blocks * bb);
  ch_d2h(pool_back, dpool, (size_t)pool_blocks * bb);
  unsigned char *expect = calloc(1, bb);
  int kv_ok = 1;
  for (int row = 0; row < num_tokens && kv_ok; row++) {
    const int blk = slots[row] / bs, off = slots[row] % bs;
    memcpy(expect, pool_back + (size_t)blk * bb, bb);
    for (int h = 0; h < sc->n_kv_heads; h++) {
      put_kv(expect, &sh, 0, h, off, k + (size_t)row * kvw + h * hd);
      put_kv(expect, &sh, 1, h, off, v + (size_t)row * kvw + h * hd);
    }
    if (memcmp(expect, pool_back + (size_t)blk * bb, bb) != 0) kv_ok = 0;
  }
  CU_ASSERT(kv_ok);

  /* ABI 1.7 forward_rope: the same step with q and k unrotated must give what the device's
   * rope (both on q and k) followed by forward gives, and store the same K bytes. Both from
   * the scenario's initial pool; neox style with partial rotation on odd scenarios. */
  if (WEIR_HAS_FIELD(A, weir_attention_ops, forward_rope) && A->forward_rope) {
    const int32_t rot = sc->num_seqs % 2 ? hd / 2 : hd;
    const weir_rope_style style = sc->num_seqs % 2 ? WEIR_ROPE_NEOX : WEIR_ROPE_NORM;
    int32_t *pos = malloc((size_t)num_tokens * 4);
    for (int s = 0; s < sc->num_seqs; s++)
      for (int i = 0; i < sc->qlen[s]; i++) pos[qsl[s] + i] = sc->ctx[s] - sc->qlen[s] + i;
    int32_t *dpos = ch_dalloc((size_t)num_tokens * 4);
    ch_h2d(dpos, pos, (size_t)num_tokens * 4);
    float *dq2 = ch_dalloc((size_t)num_tokens * qw * 4), *dk2 = ch_dalloc((size_t)num_tokens * kvw * 4);
    ch_h2d(dq2, q, (size_t)num_tokens * qw * 4);
    ch_h2d(dk2, k, (size_t)num_tokens * kvw * 4);
    CU_ASSERT_EQUAL(CH_DEV->rope(ch_dev.self, dq2, dpos, num_tokens, sc->n_heads, hd, rot,
                                 10000.0f, 1.0f, style), WEIR_OK);
    CU_ASSERT_EQUAL(CH_DEV->rope(ch_dev.self, dk2, dpos, num_tokens, sc->n_kv_heads, hd, rot,
                                 10000.0f, 1.0f, style), WEIR_OK);
    void *dpool2 = ch_dalloc((size_t)pool_blocks * bb);
    ch_h2d(dpool, pool, (size_t)pool_blocks * bb);
    ch_h2d(dpool2, pool, (size_t)pool_blocks * bb);
    float *dout2 = ch_dalloc((size_t)num_tokens * qw * 4);
    ch_poison(dout, (size_t)num_tokens * qw * 4);
    ch_poison(dout2, (size_t)num_tokens * qw * 4);
    weir_kv_view view2 = {.base = dpool2, .block_bytes = bb, .num_blocks = pool_blocks};
    const weir_attn_layer_params lp = {.struct_size = sizeof lp};
    const weir_attn_rope rope = {.struct_size = sizeof rope, .positions = dpos,
                                 .positions_host = pos, .rot_dim = rot, .style = (int32_t)style,
                                 .freq_base = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f};
    CU_ASSERT_EQUAL(A->forward(attn.self, &sh, &batch, &view, dq2, dk2, dv, dout), WEIR_OK);
    CU_ASSERT_EQUAL(A->forward_rope(attn.self, &sh, &lp, &rope, &batch, &view2, dq, dk, dv, dout2),
                    WEIR_OK);
    float *o1 = malloc((size_t)num_tokens * qw * 4);
    double *o2 = malloc((size_t)num_tokens * qw * sizeof(double));
    ch_d2h(o1, dout2, (size_t)num_tokens * qw * 4);
    ch_d2h(out, dout, (size_t)num_tokens * qw * 4);
    for (size_t i = 0; i < (size_t)num_tokens * qw; i++) o2[i] = out[i];
    const double rerr = ch_rel_err(o1, o2, (size_t)num_tokens * qw);
    /* The same formula in both kernels; nvcc may still contract a product differently in
     * the two, so a stored value may differ in its last bit (an int8 row by one step):
     * allow 8 bytes plus one in a thousand of the step's K bytes. */
    unsigned char *p2 = malloc((size_t)pool_blocks * bb);
    ch_d2h(pool_back, dpool, (size_t)pool_blocks * bb);
    ch_d2h(p2, dpool2, (size_t)pool_blocks * bb);
    size_t ndiff = 0;
    for (size_t i = 0; i < (size_t)pool_blocks * bb; i++) ndiff += pool_back[i] != p2[i];
    printf("\n  %s, forward_rope vs rope + forward: rel err %.3g, %zu cache bytes differ",
           sc->name, rerr, ndiff);
    CU_ASSERT(rerr < (sc->kv_dtype == WEIR_DTYPE_I8 ? 1e-4 : 1e-5));
    CU_ASSERT(ndiff <= 8 + (size_t)num_tokens * kvw * 4 / 1000);
    free(p2);
    free(o1);
    free(o2);
    free(pos);
    ch_dfree(dpos);
    ch_dfree(dq2);
    ch_dfree(dk2);
    ch_dfree(dpool2);
    ch_dfree(dout2);
  }

  ch_dfree(dpool);
  ch_dfree(dq);
  ch_dfree(dk);
  ch_dfree(dv);
  ch_dfree(dout);
  ch_dfree(dqsl);
  ch_dfree(dctx);
  ch_dfree(dbt);
  ch_dfree(dslots);
  for (int s = 0; s < sc->num_seqs; s++) {
    free(kall[s]);
    free(vall[s]);
  }
  free(kall);
  free(vall);
  free(pool);
  free(pool_back);
  free(expect);
  free(k);
  free(v);
  free(q);
  free(slots);
  free(ref);
  free(sc_buf);
  free(perm);
  free(btab);
  free(out);
}

static void test_decode(void) {
  static const scenario s[] = {
      {"decode f16 GQA 8/2 d64", 8, 2, 64, WEIR_DTYPE_F16, 4, {1, 17, 40, 33}, {1, 1, 1, 1}},
      {"decode f32 MHA 4/4 d128", 4, 4, 128, WEIR_DTYPE_F32, 3, {5, 16, 70}, {1, 1, 1}},
      {"decode bf16 GQA 32/4 d64", 32, 4, 64, WEIR_DTYPE_BF16, 2, {100, 3}, {1, 1}},
      {"decode int8 GQA 8/2 d64", 8, 2, 64, WEIR_DTYPE_I8, 4, {1, 17, 40, 33}, {1, 1, 1, 1}},
      {"chunked prefill int8 8/2 d128", 8, 2, 128, WEIR_DTYPE_I8, 2, {150, 64}, {50, 30}},
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) run_scenario(&s[i]);
}

static void test_split_kv(void) {
  /* One sequence, long context: the grid is tiny, so the plan splits the KV range. */
  static const scenario s[] = {
      {"split-kv f16 32/8 d128 ctx 3000", 32, 8, 128, WEIR_DTYPE_F16, 1, {3000}, {1}},
      {"split-kv f16 8/1 d64 ctx 1234 x2", 8, 1, 64, WEIR_DTYPE_F16, 2, {1234, 700}, {1, 1}},
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) run_scenario(&s[i]);
}

static void test_prefill(void) {
  static const scenario s[] = {
      {"prefill f16 8/2 d64 (no prefix)", 8, 2, 64, WEIR_DTYPE_F16, 1, {77}, {77}},
      {"chunked prefill f16 8/2 d64", 8, 2, 64, WEIR_DTYPE_F16, 2, {150, 64}, {50, 30}},
      {"mixed prefill+decode f32 4/1 d96", 4, 1, 96, WEIR_DTYPE_F32, 3, {40, 200, 9}, {40, 1, 4}},
      {"speculative verify f16 16/4 d128", 16, 4, 128, WEIR_DTYPE_F16, 2, {90, 33}, {5, 5}},
  };
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) run_scenario(&s[i]);
}

static void test_unsupported(void) {
  /* int8 KV: K and V rows of one byte per element, then an f32 scale per row of each. */
  weir_attn_shape sh = {.struct_size = sizeof sh, .n_layers = 1, .n_heads = 8, .n_kv_heads = 2,
                        .head_dim = 64, .block_size = 16, .kv_dtype = WEIR_DTYPE_I8};
  CU_ASSERT_EQUAL(A->block_bytes(attn.self, &sh), 2 * 2 * 16 * 64 + 8 * 2 * 16);
  sh.head_dim = 40; /* int8 rows are read 16 bytes at a time */
  CU_ASSERT_EQUAL(A->block_bytes(attn.self, &sh), 0);
  sh.kv_dtype = WEIR_DTYPE_F16;
  sh.head_dim = 60; /* not a multiple of 8 halves */
  CU_ASSERT_EQUAL(A->block_bytes(attn.self, &sh), 0);
  sh.head_dim = 64;
  sh.n_heads = 7; /* not a multiple of the KV heads */
  CU_ASSERT_EQUAL(A->block_bytes(attn.self, &sh), 0);
}

static void test_copy_blocks(void) {
  weir_attn_shape sh = {.struct_size = sizeof sh, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                        .head_dim = 64, .block_size = 16, .kv_dtype = WEIR_DTYPE_F16};
  const size_t bb = A->block_bytes(attn.self, &sh);
  const int nb = 10;
  const size_t total = bb * nb * 3;
  unsigned char *h = malloc(total), *back = malloc(total);
  for (size_t i = 0; i < total; i++) h[i] = (unsigned char)ch_rand_u32();
  void *d = ch_dalloc(total);
  ch_h2d(d, h, total);
  int32_t src[3] = {1, 7, 2}, dst[3] = {4, 0, 9};
  weir_kv_view v = {.base = d, .block_bytes = bb, .num_blocks = nb};
  CU_ASSERT_EQUAL(A->copy_blocks(attn.self, &sh, &v, src, dst, 3), WEIR_OK);
  ch_d2h(back, d, total);
  for (int l = 0; l < 3; l++)
    for (int i = 0; i < 3; i++)
      memcpy(h + ((size_t)l * nb + dst[i]) * bb, h + ((size_t)l * nb + src[i]) * bb, bb);
  CU_ASSERT(memcmp(h, back, total) == 0);
  int32_t bad[1] = {nb};
  CU_ASSERT_EQUAL(A->copy_blocks(attn.self, &sh, &v, bad, dst, 1), WEIR_E_RANGE);
  ch_dfree(d);
  free(h);
  free(back);
}

int main(void) {
  ch_device_open_or_skip();
  ch_seed_from_env(0xa77e0002u);
  int rc = ch_plugin_open(&attn, "weir_attention_paged_cuda.so");
  if (rc != WEIR_OK) {
    fprintf(stderr, "paged failed to load: %s: %s\n", weir_strerror(rc), ch_last_error(&attn));
    return 1;
  }
  static const ch_test tests[] = {
      {"decode", test_decode},
      {"split-KV decode", test_split_kv},
      {"prefill, chunked prefill, mixed", test_prefill},
      {"unsupported shapes", test_unsupported},
      {"copy_blocks", test_copy_blocks},
      {NULL, NULL},
  };
  rc = ch_run_suite("cuda_attention", tests);
  ch_plugin_close(&attn);
  ch_device_close();
  return rc;
}
