/* weir_cuda_bench: end-to-end speed of the CUDA plugins on a Llama-shaped model with random
 * f16 weights, or random GGUF blocks of --wtype for the gguf scheme (TinyLlama 1.1B's shape by
 * default), driven exactly as the engine drives them:
 * embed, per layer RMSNorm / Q K V / RoPE / paged attention / O / residual / RMSNorm / gate up /
 * SwiGLU / down / residual, final norm, LM head, greedy sampling on the device. Like the engine
 * (core/model/llama.c), it takes the ABI 1.7 fused ops where the plugins have them: RoPE in
 * the attention plugin's KV write and query load (forward_rope), each residual add fused into
 * the RMSNorm after it (add_rms_norm); --unfused issues the separate launches instead (the
 * sequence the first H200 profile measured).
 *
 * Reports, for the GPU it runs on:
 *   - device-to-device copy bandwidth (bytes read + written per second): the memory ceiling;
 *   - batch-1 decode tokens/s, with and without a step graph, and its fraction of the memory
 *     roofline (weight + KV bytes per token / copy bandwidth);
 *   - decode tokens/s at larger batches (plugins only, no HTTP);
 *   - prefill tokens/s for one prompt of --prefill tokens.
 * Prints a table and, with --json FILE, writes the numbers. Exits 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"

typedef struct shape {
  int dim, layers, heads, kv_heads, ffn, vocab;
} shape;

typedef struct layer {
  float *attn_norm, *ffn_norm;
  void *wq, *wk, *wv, *wo, *wg, *wu, *wd;
} layer;

static shape S;
static int HD;
static ch_plugin P_attn, P_quant, P_samp;
#define DEV CH_DEV
#define DS ch_dev.self
#define ATT ((const weir_attention_ops *)P_attn.ops)
#define QNT ((const weir_quant_ops *)P_quant.ops)
#define SMP ((const weir_sampler_ops *)P_samp.ops)

static layer *L;
static void *tok_embd, *out_w;
static float *out_norm;
static size_t weight_bytes_per_token; /* every matmul weight, read once per decode step */
static double n_params;                /* their parameters (the LM head's once) */

/* Activations for up to max_tokens tokens. */
static float *x, *h, *q, *k, *v, *att, *g, *u, *hl, *logits;
static int32_t *d_tokens, *d_pos, *d_rows, *d_qsl, *d_ctx, *d_bt, *d_slots;
static void *kv_pool;
static weir_attn_shape ashape;
static size_t block_bytes;
static int32_t num_blocks, max_blocks_per_seq;

#define CHECK CH_CHECK

static uint16_t *rand_f16;

/* --wtype: the GGUF source type of the weights (default f16); "q4_K_M" approximates that mix
 * (Q6_K for attn_v, ffn_down and the output head, Q4_K elsewhere). Block types need a scheme
 * that takes them (gguf). */
static weir_dtype W_TYPE = WEIR_DTYPE_F16, W_TYPE_HI = WEIR_DTYPE_F16;
static unsigned char *rand_blocks; /* random blocks with finite small f16 scales */

/* Byte offsets of the f16 scale fields of one block (at most 2). */
static int half_fields(weir_dtype t, int off[2]) {
  switch (t) {
  case WEIR_DTYPE_Q4_1: case WEIR_DTYPE_Q5_1: case WEIR_DTYPE_Q4_K: case WEIR_DTYPE_Q5_K:
    off[0] = 0, off[1] = 2;
    return 2;
  case WEIR_DTYPE_Q2_K: off[0] = 80, off[1] = 82; return 2;
  case WEIR_DTYPE_Q3_K: off[0] = 108; return 1;
  case WEIR_DTYPE_Q6_K: off[0] = 208; return 1;
  default: off[0] = 0; return 1;
  }
}

static void fill_blocks(weir_dtype t, size_t bytes) {
  const size_t bb = weir_dtype_block_bytes(t);
  for (size_t i = 0; i < bytes; i++) rand_blocks[i] = (unsigned char)ch_rand_u32();
  int off[2];
  const int nf = half_fields(t, off);
  for (size_t b = 0; b + bb <= bytes; b += bb)
    for (int f = 0; f < nf; f++) {
      const uint16_t hv = ch_f32_to_f16(ch_uniform(-1e-4f, 1e-4f));
      memcpy(rand_blocks + b + off[f], &hv, 2);
    }
}

static void *pack_random_as(int64_t in, int64_t out, weir_dtype type) {
  weir_tensor t = {.data = rand_f16, .dtype = WEIR_DTYPE_F16, .ndim = 2, .ne = {in, out, 1, 1},
                   .nb = {2, (size_t)in * 2, 0, 0}};
  if (type != WEIR_DTYPE_F16) {
    t.data = rand_blocks;
    t.dtype = type;
    t.nb[0] = 0;
    t.nb[1] = weir_dtype_row_bytes(type, in);
    if (t.nb[1] == 0) {
      fprintf(stderr, "a row of %lld does not hold whole %s blocks\n", (long long)in,
              weir_dtype_name(type));
      exit(1);
    }
    fill_blocks(type, t.nb[1] * (size_t)out);
  }
  weir_quant_pack_args a = {.struct_size = sizeof a, .src = &t, .name = "bench"};
  void *w = NULL;
  CHECK(QNT->pack(P_quant.self, &a, &w));
  return w;
}

static void *pack_random(int64_t in, int64_t out) { return pack_random_as(in, out, W_TYPE); }
static void *pack_random_hi(int64_t in, int64_t out) {
  return pack_random_as(in, out, W_TYPE_HI);
}

/* The --wtype names. */
static int parse_wtype(const char *s) {
  static const weir_dtype kt[] = {WEIR_DTYPE_F16,  WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0,
                                 WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_1,
                                 WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q4_K,
                                 WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_IQ4_NL,
                                 WEIR_DTYPE_IQ4_XS};
  if (!strcmp(s, "q4_K_M")) {
    W_TYPE = WEIR_DTYPE_Q4_K;
    W_TYPE_HI = WEIR_DTYPE_Q6_K;
    return 0;
  }
  for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++)
    if (!strcmp(s, weir_dtype_name(kt[i]))) {
      W_TYPE = W_TYPE_HI = kt[i];
      return 0;
    }
  return -1;
}

static float *dev_vec(int64_t n, float lo, float hi) {
  float *hbuf = malloc((size_t)n * 4);
  ch_fill_uniform(hbuf, (size_t)n, lo, hi);
  float *d = ch_dalloc((size_t)n * 4);
  ch_h2d(d, hbuf, (size_t)n * 4);
  free(hbuf);
  return d;
}

static void build_model(int max_tokens, int max_seqs, int max_ctx) {
  const int64_t big = (int64_t)S.vocab * S.dim > (int64_t)S.ffn * S.dim
                          ? (int64_t)S.vocab * S.dim : (int64_t)S.ffn * S.dim;
  rand_f16 = malloc((size_t)big * 2);
  rand_blocks = malloc((size_t)big * 2); /* every block type is under 2 bytes per element */
  for (int64_t i = 0; i < big; i++) rand_f16[i] = ch_f32_to_f16(ch_uniform(-0.02f, 0.02f));
  const int kvd = S.kv_heads * HD;
  L = calloc((size_t)S.layers, sizeof *L);
  for (int l = 0; l < S.layers; l++) {
    L[l].attn_norm = dev_vec(S.dim, 0.9f, 1.1f);
    L[l].ffn_norm = dev_vec(S.dim, 0.9f, 1.1f);
    L[l].wq = pack_random(S.dim, S.dim);
    L[l].wk = pack_random(S.dim, kvd);
    L[l].wv = pack_random_hi(S.dim, kvd);
    L[l].wo = pack_random(S.dim, S.dim);
    L[l].wg = pack_random(S.dim, S.ffn);
    L[l].wu = pack_random(S.dim, S.ffn);
    L[l].wd = pack_random_hi(S.ffn, S.dim);
    void *ws[] = {L[l].wq, L[l].wk, L[l].wv, L[l].wo, L[l].wg, L[l].wu, L[l].wd};
    for (int i = 0; i < 7; i++) weight_bytes_per_token += QNT->weight_bytes(P_quant.self, ws[i]);
  }
  tok_embd = pack_random(S.dim, S.vocab);
  out_w = pack_random_hi(S.dim, S.vocab);
  weight_bytes_per_token += QNT->weight_bytes(P_quant.self, out_w);
  n_params = (double)S.layers * (2.0 * S.dim * S.dim + 2.0 * S.dim * kvd + 3.0 * S.dim * S.ffn) +
             (double)S.vocab * S.dim;
  out_norm = dev_vec(S.dim, 0.9f, 1.1f);
  free(rand_f16);
  free(rand_blocks);

  const size_t T = (size_t)max_tokens;
  x = ch_dalloc(T * S.dim * 4);
  h = ch_dalloc(T * S.dim * 4);
  q = ch_dalloc(T * S.dim * 4);
  k = ch_dalloc(T * kvd * 4);
  v = ch_dalloc(T * kvd * 4);
  att = ch_dalloc(T * S.dim * 4);
  g = ch_dalloc(T * S.ffn * 4);
  u = ch_dalloc(T * S.ffn * 4);
  hl = ch_dalloc((size_t)max_seqs * S.dim * 4);
  logits = ch_dalloc((size_t)max_seqs * S.vocab * 4);
  d_tokens = ch_dalloc(T * 4);
  d_pos = ch_dalloc(T * 4);
  d_slots = ch_dalloc(T * 4);
  d_rows = ch_dalloc((size_t)max_seqs * 4);
  d_qsl = ch_dalloc((size_t)(max_seqs + 1) * 4);
  d_ctx = ch_dalloc((size_t)max_seqs * 4);
  max_blocks_per_seq = (max_ctx + 15) / 16;
  d_bt = ch_dalloc((size_t)max_seqs * max_blocks_per_seq * 4);

  ashape = (weir_attn_shape){.struct_size = sizeof ashape, .n_layers = S.layers,
                             .n_heads = S.heads, .n_kv_heads = S.kv_heads, .head_dim = HD,
                             .block_size = 16, .kv_dtype = WEIR_DTYPE_F16,
                             .scale = 1.0f / sqrtf((float)HD)};
  block_bytes = ATT->block_bytes(P_attn.self, &ashape);
  num_blocks = max_seqs * max_blocks_per_seq;
  kv_pool = ch_dalloc(block_bytes * (size_t)num_blocks * S.layers);
  CHECK(DEV->memset(DS, kv_pool, 0x2A, block_bytes * (size_t)num_blocks * S.layers));
}

/* A batch: n_seqs sequences each adding q_len tokens at the end of a context of ctx. */
typedef struct batch {
  int n_seqs, q_len, ctx, n_tokens;
  int32_t *qsl, *ctxs, *bt, *slots, *pos, *tokens, *rows;
  weir_attn_batch ab;
} batch;

static void batch_make(batch *b, int n_seqs, int q_len, int ctx) {
  memset(b, 0, sizeof *b);
  b->n_seqs = n_seqs;
  b->q_len = q_len;
  b->ctx = ctx;
  b->n_tokens = n_seqs * q_len;
  b->qsl = calloc((size_t)n_seqs + 1, 4);
  b->ctxs = calloc((size_t)n_seqs, 4);
  b->bt = calloc((size_t)n_seqs * max_blocks_per_seq, 4);
  b->slots = calloc((size_t)b->n_tokens, 4);
  b->pos = calloc((size_t)b->n_tokens, 4);
  b->tokens = calloc((size_t)b->n_tokens, 4);
  b->rows = calloc((size_t)n_seqs, 4);
  for (int s = 0; s < n_seqs; s++) {
    b->qsl[s + 1] = b->qsl[s] + q_len;
    b->ctxs[s] = ctx;
    b->rows[s] = b->qsl[s + 1] - 1;
    for (int j = 0; j < max_blocks_per_seq; j++)
      b->bt[s * max_blocks_per_seq + j] = s * max_blocks_per_seq + j;
    for (int i = 0; i < q_len; i++) {
      int t = b->qsl[s] + i, p = ctx - q_len + i;
      b->pos[t] = p;
      b->slots[t] = b->bt[s * max_blocks_per_seq + p / 16] * 16 + p % 16;
      b->tokens[t] = (int32_t)(ch_rand_u32() % (uint32_t)S.vocab);
    }
  }
  CHECK(DEV->copy_h2d(DS, d_qsl, b->qsl, (size_t)(n_seqs + 1) * 4));
  CHECK(DEV->copy_h2d(DS, d_ctx, b->ctxs, (size_t)n_seqs * 4));
  CHECK(DEV->copy_h2d(DS, d_bt, b->bt, (size_t)n_seqs * max_blocks_per_seq * 4));
  CHECK(DEV->copy_h2d(DS, d_slots, b->slots, (size_t)b->n_tokens * 4));
  CHECK(DEV->copy_h2d(DS, d_pos, b->pos, (size_t)b->n_tokens * 4));
  CHECK(DEV->copy_h2d(DS, d_tokens, b->tokens, (size_t)b->n_tokens * 4));
  CHECK(DEV->copy_h2d(DS, d_rows, b->rows, (size_t)n_seqs * 4));
  CHECK(DEV->synchronize(DS));
  b->ab = (weir_attn_batch){.struct_size = sizeof b->ab, .num_seqs = n_seqs,
                            .num_tokens = b->n_tokens, .query_start_loc = d_qsl,
                            .context_lens = d_ctx, .block_tables = d_bt,
                            .max_blocks_per_seq = max_blocks_per_seq, .slot_mapping = d_slots,
                            .max_query_len = q_len, .max_context_len = ctx,
                            .query_start_loc_host = b->qsl, .context_lens_host = b->ctxs,
                            .block_tables_host = b->bt, .slot_mapping_host = b->slots};
}

static void batch_free(batch *b) {
  free(b->qsl);
  free(b->ctxs);
  free(b->bt);
  free(b->slots);
  free(b->pos);
  free(b->tokens);
  free(b->rows);
}

/* One forward pass up to the logits of each sequence's last token. */
/* --gemv-ungrouped clears it: q/k/v and gate/up as separate matmuls even when the plugin has
 * the 1.7 matmul_group. */
static int use_group = 1;

/* The weights that read one input (w2 NULL for two), as the engine runs them
 * (core/model/llama_pack.c): one 1.7 matmul_group when the plugin has it and takes the group,
 * else one matmul each. */
static void mm_group3(void *w0, void *w1, void *w2, const float *in, float *y0, float *y1,
                      float *y2, int64_t nt) {
  const void *w[3] = {w0, w1, w2};
  float *y[3] = {y0, y1, y2};
  const int n = w2 ? 3 : 2;
  if (use_group && WEIR_QUANT_HAS_OP(QNT, matmul_group)) {
    int rc = QNT->matmul_group(P_quant.self, w, n, in, y, nt);
    if (rc != WEIR_E_NOTSUP) {
      CHECK(rc);
      return;
    }
  }
  for (int i = 0; i < n; i++) CHECK(QNT->matmul(P_quant.self, w[i], in, y[i], nt));
}

/* --unfused clears it: separate rope / add launches even where the plugins have the 1.7 fused
 * ops (the A/B for what the fusion saves). */
static int use_fused = 1;

static void forward(const batch *b) {
  const int64_t nt = b->n_tokens;
  const int fused_norm =
      use_fused && WEIR_HAS_FIELD(DEV, weir_device_ops, add_rms_norm) && DEV->add_rms_norm;
  const int fused_rope = use_fused && WEIR_HAS_FIELD(ATT, weir_attention_ops, forward_rope) &&
                         ATT->forward_rope;
  const weir_attn_rope rope = {.struct_size = sizeof rope,
                               .positions = d_pos,
                               .positions_host = b->pos,
                               .rot_dim = HD,
                               .style = WEIR_ROPE_NORM,
                               .freq_base = 10000.0f,
                               .freq_scale = 1.0f};
  const weir_attn_layer_params lp = {.struct_size = sizeof lp};
  CHECK(QNT->embed(P_quant.self, tok_embd, d_tokens, x, nt));
  int attn_normed = 0;
  for (int l = 0; l < S.layers; l++) {
    weir_kv_view view = {.base = (char *)kv_pool + (size_t)l * num_blocks * block_bytes,
                         .block_bytes = block_bytes, .num_blocks = num_blocks};
    if (!attn_normed) CHECK(DEV->rms_norm(DS, h, x, L[l].attn_norm, nt, S.dim, 1e-5f));
    attn_normed = 0;
    mm_group3(L[l].wq, L[l].wk, L[l].wv, h, q, k, v, nt);
    if (fused_rope) {
      CHECK(ATT->forward_rope(P_attn.self, &ashape, &lp, &rope, &b->ab, &view, q, k, v, att));
    } else {
      CHECK(DEV->rope(DS, q, d_pos, nt, S.heads, HD, HD, 10000.0f, 1.0f, WEIR_ROPE_NORM));
      CHECK(DEV->rope(DS, k, d_pos, nt, S.kv_heads, HD, HD, 10000.0f, 1.0f, WEIR_ROPE_NORM));
      CHECK(ATT->forward(P_attn.self, &ashape, &b->ab, &view, q, k, v, att));
    }
    CHECK(QNT->matmul(P_quant.self, L[l].wo, att, h, nt));
    if (fused_norm) {
      CHECK(DEV->add_rms_norm(DS, h, x, h, L[l].ffn_norm, nt, S.dim, 1e-5f));
    } else {
      CHECK(DEV->add(DS, x, x, h, nt * S.dim));
      CHECK(DEV->rms_norm(DS, h, x, L[l].ffn_norm, nt, S.dim, 1e-5f));
    }
    mm_group3(L[l].wg, L[l].wu, NULL, h, g, u, NULL, nt);
    CHECK(DEV->swiglu(DS, g, g, u, nt * S.ffn));
    CHECK(QNT->matmul(P_quant.self, L[l].wd, g, h, nt));
    if (fused_norm && l + 1 < S.layers) { /* also the next layer's attention norm */
      CHECK(DEV->add_rms_norm(DS, h, x, h, L[l + 1].attn_norm, nt, S.dim, 1e-5f));
      attn_normed = 1;
    } else {
      CHECK(DEV->add(DS, x, x, h, nt * S.dim));
    }
  }
  CHECK(DEV->get_rows(DS, hl, x, d_rows, b->n_seqs, S.dim));
  CHECK(DEV->rms_norm(DS, hl, hl, out_norm, b->n_seqs, S.dim, 1e-5f));
  CHECK(QNT->matmul(P_quant.self, out_w, hl, logits, b->n_seqs));
}

static weir_sampling_params greedy = {.struct_size = sizeof greedy, .temperature = 0.0f,
                                      .top_p = 1.0f, .repetition_penalty = 1.0f,
                                      .num_logprobs = -1};

static void sample(const batch *b, weir_sample_result *res, weir_sampling_row *rows) {
  for (int s = 0; s < b->n_seqs; s++)
    rows[s] = (weir_sampling_row){.params = &greedy};
  CHECK(SMP->sample(P_samp.self, rows, b->n_seqs, logits, S.vocab, res));
}

/* Median seconds per decode step over `steps` steps (after 3 warm-up steps). */
static double time_decode(const batch *b, int steps, int use_graph) {
  weir_sample_result *res = calloc((size_t)b->n_seqs, sizeof *res);
  weir_sampling_row *rows = calloc((size_t)b->n_seqs, sizeof *rows);
  double *t = calloc((size_t)steps, sizeof *t);
  const uint64_t key = (uint64_t)b->n_seqs;
  for (int i = 0; i < 3; i++) {
    forward(b);
    sample(b, res, rows);
  }
  if (use_graph) {
    CHECK(DEV->graph_begin(DS, key));
    forward(b);
    CHECK(DEV->graph_end(DS, key));
  }
  for (int i = 0; i < steps; i++) {
    double t0 = ch_now();
    if (use_graph) CHECK(DEV->graph_launch(DS, key));
    else forward(b);
    sample(b, res, rows); /* ends with the token ids on the host */
    t[i] = ch_now() - t0;
  }
  qsort(t, (size_t)steps, sizeof *t, ch_cmp_double);
  double med = t[steps / 2];
  free(t);
  free(res);
  free(rows);
  return med;
}

/* Median time of a prefill of n prompts of len tokens each (after two warm-ups): ms,
 * tokens/s, and TFLOP/s counting 2 flops per weight per token plus causal attention's
 * 2 * 2 * len/2 * dim per layer per token. */
static void time_prefill(int n, int len, double *ms, double *tps, double *tflops) {
  batch pb;
  batch_make(&pb, n, len, len);
  weir_sample_result *res = calloc((size_t)n, sizeof *res);
  weir_sampling_row *rows = calloc((size_t)n, sizeof *rows);
  for (int i = 0; i < 2; i++) {
    forward(&pb);
    sample(&pb, res, rows);
  }
  double pt[10];
  for (int i = 0; i < 10; i++) {
    double s0 = ch_now();
    forward(&pb);
    sample(&pb, res, rows);
    pt[i] = ch_now() - s0;
  }
  qsort(pt, 10, sizeof pt[0], ch_cmp_double);
  const double tokens = (double)n * len;
  const double flops = 2.0 * (double)n_params * tokens +
                       4.0 * S.layers * tokens * len / 2.0 * S.dim;
  *ms = pt[5] * 1e3;
  *tps = tokens / pt[5];
  *tflops = flops / pt[5] / 1e12;
  free(res);
  free(rows);
  batch_free(&pb);
}

/* GEMV bandwidth: the seven projections of every layer (q/k/v and gate/up grouped as the
 * engine runs them, unless --gemv-ungrouped) for n tokens, nothing else, median of 7 runs of
 * 5 passes; bytes = the packed weights read once per pass. Prints GB/s and its fraction of
 * the d2d copy bandwidth (bytes moved per second), the measure the decode roofline uses. */
static double time_gemv(int64_t n, double *gbps) {
  size_t bytes = 0;
  for (int l = 0; l < S.layers; l++) {
    void *ws[] = {L[l].wq, L[l].wk, L[l].wv, L[l].wo, L[l].wg, L[l].wu, L[l].wd};
    for (int i = 0; i < 7; i++) bytes += QNT->weight_bytes(P_quant.self, ws[i]);
  }
  double t[7];
  for (int r = -1; r < 7; r++) { /* r = -1: warm-up (workspaces) */
    CHECK(DEV->synchronize(DS));
    const double t0 = ch_now();
    for (int p = 0; p < 5; p++)
      for (int l = 0; l < S.layers; l++) {
        mm_group3(L[l].wq, L[l].wk, L[l].wv, h, q, k, v, n);
        CHECK(QNT->matmul(P_quant.self, L[l].wo, att, h, n));
        mm_group3(L[l].wg, L[l].wu, NULL, h, g, u, NULL, n);
        CHECK(QNT->matmul(P_quant.self, L[l].wd, g, h, n));
      }
    CHECK(DEV->synchronize(DS));
    if (r >= 0) t[r] = (ch_now() - t0) / 5;
  }
  qsort(t, 7, sizeof t[0], ch_cmp_double);
  *gbps = (double)bytes / t[3] / 1e9;
  return t[3];
}

int main(int argc, char **argv) {
  S = (shape){.dim = 2048, .layers = 22, .heads = 32, .kv_heads = 4, .ffn = 5632, .vocab = 32000};
  int steps = 50, ctx = 256, prefill = 512, use_graph = 1, prefill_batch = 8;
  const char *quant = "fp16", *wtype = "f16";
  int batches[8] = {1, 8, 32, 64}, nb = 4;
  int gemv_batches[8] = {0}, ngemv = 0, gemv_only = 0;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--steps") && val) steps = atoi(argv[++i]);
    else if (!strcmp(a, "--ctx") && val) ctx = atoi(argv[++i]);
    else if (!strcmp(a, "--prefill") && val) prefill = atoi(argv[++i]);
    else if (!strcmp(a, "--layers") && val) S.layers = atoi(argv[++i]);
    else if (!strcmp(a, "--json") && val) json = argv[++i];
    else if (!strcmp(a, "--no-graph")) use_graph = 0;
    else if (!strcmp(a, "--unfused")) use_fused = 0;
    else if (!strcmp(a, "--quant") && val) quant = argv[++i];
    else if (!strcmp(a, "--wtype") && val && parse_wtype(argv[i + 1]) == 0) wtype = argv[++i];
    else if (!strcmp(a, "--prefill-batch") && val) prefill_batch = atoi(argv[++i]);
    else if (!strcmp(a, "--gemv") && val) {
      ngemv = 0;
      for (char *tok = strtok(argv[++i], ","); tok && ngemv < 8; tok = strtok(NULL, ","))
        gemv_batches[ngemv++] = atoi(tok);
    } else if (!strcmp(a, "--gemv-ungrouped")) use_group = 0;
    else if (!strcmp(a, "--gemv-only")) gemv_only = 1;
    else if (!strcmp(a, "--batches") && val) {
      nb = 0;
      for (char *tok = strtok(argv[++i], ","); tok && nb < 8; tok = strtok(NULL, ","))
        batches[nb++] = atoi(tok);
    } else {
      fprintf(stderr, "usage: weir_cuda_bench [--steps N] [--ctx N] [--prefill N] [--layers N]"
                      " [--batches 1,8,32,64] [--no-graph] [--unfused]"
                      " [--quant fp16|int8|awq_int4|gguf]"
                      " [--wtype f16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_K|q3_K|q4_K|q5_K|q6_K|"
                      "iq4_nl|iq4_xs|q4_K_M] [--prefill-batch N] [--json FILE]"
                      " [--gemv 1,2,4,8,16 [--gemv-ungrouped] [--gemv-only]]\n");
      return 2;
    }
  }
  if (steps < 1 || ctx < 2 || prefill < 1 || nb < 1 || prefill_batch < 1 ||
      strlen(quant) > 32)
    return 2;
  HD = S.dim / S.heads;
  char quant_file[64];
  snprintf(quant_file, sizeof quant_file, "weir_quant_%s_cuda.so", quant);
  ch_device_open_or_skip();
  ch_seed_from_env(12345);
  if (ch_plugin_open(&P_attn, "weir_attention_paged_cuda.so") != WEIR_OK ||
      ch_plugin_open(&P_quant, quant_file) != WEIR_OK ||
      ch_plugin_open(&P_samp, "weir_sampler_default_cuda.so") != WEIR_OK) {
    fprintf(stderr, "a CUDA plugin failed to load\n");
    return 1;
  }
  weir_device_info info = {.struct_size = sizeof info};
  CHECK(DEV->info(DS, &info));
  int max_b = 1;
  for (int i = 0; i < nb; i++)
    if (batches[i] > max_b) max_b = batches[i];
  for (int i = 0; i < ngemv; i++) {
    if (gemv_batches[i] < 1 || gemv_batches[i] > 4096) return 2;
    if (gemv_batches[i] > max_b) max_b = gemv_batches[i];
  }
  const int max_ctx = (ctx > prefill ? ctx : prefill) + 16;
  if (max_b < prefill_batch) max_b = prefill_batch; /* sequences of the prefill batch */
  const int max_tokens = max_b > prefill * prefill_batch ? max_b : prefill * prefill_batch;
  double t0 = ch_now();
  build_model(max_tokens, max_b, max_ctx);
  printf("model: dim %d, %d layers, %d/%d heads, ffn %d, vocab %d, %s weights from %s %.2f GB "
         "(built in %.1f s)\n",
         S.dim, S.layers, S.heads, S.kv_heads, S.ffn, S.vocab, quant, wtype,
         weight_bytes_per_token / 1e9, ch_now() - t0);

  const double bw = ch_copy_bandwidth();
  const double kv_bytes = (double)S.layers * ctx * 2.0 * S.kv_heads * HD * 2.0;
  const double bytes_tok = (double)weight_bytes_per_token + kv_bytes;
  const double roofline = bw / bytes_tok;

  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf)
    fprintf(jf, "{\n  \"device\": \"%s\",\n  \"model\": {\"dim\": %d, \"layers\": %d, "
                "\"heads\": %d, \"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d, \"quant\": "
                "\"%s\", \"wtype\": \"%s\"},\n  \"d2d_copy_GBps\": %.1f,\n  \"decode_ctx\": %d,\n"
                "  \"bytes_per_token\": %.0f,\n  \"roofline_tokens_per_s\": %.1f,\n",
            info.name, S.dim, S.layers, S.heads, S.kv_heads, S.ffn, S.vocab, quant, wtype,
            bw / 1e9, ctx,
            bytes_tok, roofline);

  if (ngemv > 0) {
    printf("\nGEMV (all layers' projections, %s): %-6s %10s %10s %10s\n",
           use_group ? "grouped" : "ungrouped", "tokens", "ms/pass", "GB/s", "of copy bw");
    if (jf) fprintf(jf, "  \"gemv_grouped\": %s,\n  \"gemv\": [", use_group ? "true" : "false");
    for (int i = 0; i < ngemv; i++) {
      double gbps;
      const double dt = time_gemv(gemv_batches[i], &gbps);
      printf("%44d %10.3f %10.1f %9.1f%%\n", gemv_batches[i], dt * 1e3, gbps,
             100.0 * gbps * 1e9 / bw);
      if (jf)
        fprintf(jf, "%s\n    {\"tokens\": %d, \"ms_per_pass\": %.4f, \"GBps\": %.1f, "
                    "\"copy_bw_fraction\": %.4f}", i ? "," : "", gemv_batches[i], dt * 1e3,
                gbps, gbps * 1e9 / bw);
    }
    if (jf) fprintf(jf, "\n  ],\n");
    if (gemv_only) {
      if (jf) {
        fprintf(jf, "  \"decode\": []\n}\n");
        fclose(jf);
      }
      return 0;
    }
  }
  if (jf) fprintf(jf, "  \"decode\": [");
  printf("device: %s\n", info.name);
  printf("d2d copy bandwidth: %.1f GB/s (read + write)\n", bw / 1e9);
  printf("decode roofline at batch 1: %.1f tokens/s (%.2f GB per token at ctx %d)\n", roofline,
         bytes_tok / 1e9, ctx);
  printf("\n%-8s %-7s %12s %12s %10s\n", "batch", "graph", "ms/step", "tokens/s", "roofline");
  for (int i = 0; i < nb; i++) {
    batch b;
    batch_make(&b, batches[i], 1, ctx);
    for (int gr = 0; gr <= use_graph; gr++) {
      double dt = time_decode(&b, steps, gr);
      double tps = batches[i] / dt;
      double frac = batches[i] == 1 ? tps / roofline : NAN;
      printf("%-8d %-7s %12.3f %12.1f %9.1f%%\n", batches[i], gr ? "yes" : "no", dt * 1e3, tps,
             batches[i] == 1 ? 100.0 * frac : NAN);
      if (jf) {
        fprintf(jf, "%s\n    {\"batch\": %d, \"graph\": %s, \"ms_per_step\": %.4f, "
                    "\"tokens_per_s\": %.2f",
                (i || gr) ? "," : "", batches[i], gr ? "true" : "false", dt * 1e3, tps);
        if (batches[i] == 1) fprintf(jf, ", \"roofline_fraction\": %.4f", frac);
        fputc('}', jf);
      }
    }
    DEV->graph_reset(DS);
    batch_free(&b);
  }

  /* Prefill: one prompt, then a batch of them, no cached prefix. */
  double ptps1, ptf1, ptpsb, ptfb, pms1, pmsb;
  time_prefill(1, prefill, &pms1, &ptps1, &ptf1);
  time_prefill(prefill_batch, prefill, &pmsb, &ptpsb, &ptfb);
  printf("\nprefill %d tokens: %.2f ms, %.0f tokens/s, %.1f TFLOP/s\n", prefill, pms1, ptps1,
         ptf1);
  printf("prefill %d x %d tokens: %.2f ms, %.0f tokens/s, %.1f TFLOP/s\n", prefill_batch,
         prefill, pmsb, ptpsb, ptfb);
  if (jf) {
    fprintf(jf, "\n  ],\n  \"prefill\": {\"tokens\": %d, \"ms\": %.3f, \"tokens_per_s\": %.1f, "
                "\"tflops\": %.2f},\n  \"prefill_batch\": {\"prompts\": %d, \"tokens\": %d, "
                "\"ms\": %.3f, \"tokens_per_s\": %.1f, \"tflops\": %.2f}\n}\n",
            prefill, pms1, ptps1, ptf1, prefill_batch, prefill, pmsb, ptpsb, ptfb);
    fclose(jf);
  }
  return 0;
}
