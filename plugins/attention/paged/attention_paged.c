/* paged: paged attention on the CPU (its CUDA twin is plugins/attention/paged_cuda).
 *
 * Block layout (one block of one layer; E = 4 bytes for f32, 2 for f16, 1 for int8):
 *     K[n_kv_heads][block_size][head_dim]   then   V[n_kv_heads][block_size][head_dim]
 * and for int8 then one f32 scale per row, Ks[n_kv_heads][block_size] then
 * Vs[n_kv_heads][block_size] (the data part padded to 4 bytes first); the whole block padded
 * to a multiple of 64 bytes. int8 rows are symmetric (value = q * scale, scale = max|x| / 127,
 * round to nearest): a scale per token and head, written with the row, so appending a token to
 * a partly filled block never rescales the rows already there. Keeping a KV head's rows of a block contiguous lets one
 * task, which owns one (sequence, KV head), read 2 * block_size * head_dim * E contiguous
 * bytes per block.
 *
 * forward first stores the step's new K/V rows at their slots, then runs one kernel task per
 * (sequence, KV head, tile of query_tile new tokens) on the host's parallel_for: each task
 * walks the sequence's block table once for all the query heads of its group.
 *
 * forward_layer (ABI 1.5) adds a layer's sliding window, soft-cap and scale (kernels/cpu/
 * attention.h); with a window the blocks wholly before it are neither read nor checked. */
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "convert.h"
#include "families.h"
#include "rope.h"
#include "weir/attention.h"

#define DEFAULT_QUERY_TILE 16

typedef struct attn_cpu {
  const weir_host *host;
  int32_t query_tile;
  /* forward_rope's cos/sin of the step's positions (kernels/cpu/rope.h), computed by the
   * first layer of a step and read by every later one (the instance is driven by one thread
   * at a time, as the SDK says). */
  weir_rope_cache rope_cache;
} attn_cpu;

static const weir_option_desc k_options[] = {
    {.key = "query_tile",
     .type = WEIR_OPT_INT,
     .help = "new tokens of one sequence per attention task (prefill work split)",
     .def_int = DEFAULT_QUERY_TILE,
     .min = 1,
     .max = 4096},
};

static int ap_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  int64_t tile;
  int rc = weir_option_int(host, "query_tile", &tile);
  if (rc != WEIR_OK) return rc;
  attn_cpu *a = calloc(1, sizeof(*a));
  if (!a) return WEIR_E_NOMEM;
  a->host = host;
  a->query_tile = (int32_t)tile; /* the declared range [1, 4096] holds */
  *self = a;
  return WEIR_OK;
}

static void ap_fini(void *self) {
  attn_cpu *a = self;
  if (!a) return;
  weir_rope_cache_free(&a->rope_cache);
  free(a);
}

static size_t elem_size(weir_dtype t) {
  return t == WEIR_DTYPE_F32 ? 4 : t == WEIR_DTYPE_F16 ? 2 : t == WEIR_DTYPE_I8 ? 1 : 0;
}

/* Bytes of the K and V rows of one block (before the int8 scales), a multiple of 4. */
static size_t data_bytes(const weir_attn_shape *s) {
  size_t b = 2 * (size_t)s->block_size * (size_t)s->n_kv_heads * (size_t)s->head_dim *
             elem_size(s->kv_dtype);
  return (b + 3) & ~(size_t)3;
}

/* Byte offset in a block of KV head h's K (v = 0) or V (v = 1) row scales (int8 only). */
static size_t scale_offset(const weir_attn_shape *s, int v, int32_t h) {
  return data_bytes(s) + ((size_t)v * (size_t)s->n_kv_heads + (size_t)h) *
                             (size_t)s->block_size * sizeof(float);
}

static size_t ap_block_bytes(void *self, const weir_attn_shape *s) {
  (void)self;
  size_t es = elem_size(s->kv_dtype);
  if (!es || s->head_dim <= 0 || s->n_kv_heads <= 0 || s->block_size <= 0) return 0;
  size_t b = s->kv_dtype == WEIR_DTYPE_I8 ? scale_offset(s, 2, 0) : data_bytes(s);
  return (b + 63) & ~(size_t)63;
}

/* Symmetric int8 of n values: dst[d] = round(x[d] / scale); returns the scale. */
static float quantize_row_i8(const float *x, int8_t *dst, int32_t n) {
  float amax = 0.0f;
  for (int32_t d = 0; d < n; d++) {
    float a = x[d] < 0 ? -x[d] : x[d];
    if (a > amax) amax = a;
  }
  const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int32_t d = 0; d < n; d++) {
    float q = x[d] * inv;
    dst[d] = (int8_t)(q < 0 ? q - 0.5f : q + 0.5f);
  }
  return scale;
}

/* One unit of work: a tile of a sequence's new tokens against one KV head. */
typedef struct attn_task {
  int32_t seq, kv_head, q_begin, q_len; /* q_begin: flattened token index */
} attn_task;

typedef struct fwd_ctx {
  attn_cpu *self;
  const weir_attn_shape *shape;
  const weir_kv_view *kv;
  const int32_t *qsl, *ctx_lens, *tables;
  int32_t max_blocks;
  const float *q;
  float *out;
  int32_t window;
  float softcap, scale;
  const attn_task *tasks;
  size_t scratch_floats;
  int failed;
} fwd_ctx;

static void fwd_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  fwd_ctx *c = arg;
  const weir_attn_shape *s = c->shape;
  const weir_host *h = c->self->host;
  float *scratch = h->alloc(h->ctx, c->scratch_floats * sizeof(float), 64);
  if (!scratch) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  const size_t es = elem_size(s->kv_dtype);
  const int32_t group = s->n_heads / s->n_kv_heads;
  const size_t head_bytes = (size_t)s->block_size * (size_t)s->head_dim * es;
  for (int64_t ti = begin; ti < end; ti++) {
    const attn_task *t = &c->tasks[ti];
    const int32_t q_len_seq = c->qsl[t->seq + 1] - c->qsl[t->seq];
    const int32_t first_pos_seq = c->ctx_lens[t->seq] - q_len_seq;
    const int64_t q_stride = (int64_t)s->n_heads * s->head_dim;
    const int64_t head_off = (int64_t)t->kv_head * group * s->head_dim;
    weir_attn_cpu_args ka = {
        .q = c->q + t->q_begin * q_stride + head_off,
        .out = c->out + t->q_begin * q_stride + head_off,
        .q_stride = q_stride,
        .q_len = t->q_len,
        .n_group = group,
        .head_dim = s->head_dim,
        .first_pos = first_pos_seq + (t->q_begin - c->qsl[t->seq]),
        .block_table = c->tables + (size_t)t->seq * (size_t)c->max_blocks,
        .block_size = s->block_size,
        .kv_base = c->kv->base,
        .block_bytes = c->kv->block_bytes,
        .k_offset = (size_t)t->kv_head * head_bytes,
        .v_offset = (size_t)s->n_kv_heads * head_bytes + (size_t)t->kv_head * head_bytes,
        .token_stride = (size_t)s->head_dim * es,
        .kv_f16 = s->kv_dtype == WEIR_DTYPE_F16,
        .kv_i8 = s->kv_dtype == WEIR_DTYPE_I8,
        .k_scale_offset = s->kv_dtype == WEIR_DTYPE_I8 ? scale_offset(s, 0, t->kv_head) : 0,
        .v_scale_offset = s->kv_dtype == WEIR_DTYPE_I8 ? scale_offset(s, 1, t->kv_head) : 0,
        .scale = c->scale,
        .window = c->window,
        .softcap = c->softcap,
        .scratch = scratch,
    };
    weir_attn_cpu_run(&ka);
  }
  h->free(h->ctx, scratch);
}

/* Stores token i's K and V rows (all KV heads) at its slot. */
static void store_kv(const weir_attn_shape *s, const weir_kv_view *kv, int32_t slot,
                     const float *k, const float *v) {
  const size_t es = elem_size(s->kv_dtype);
  const size_t head_bytes = (size_t)s->block_size * (size_t)s->head_dim * es;
  uint8_t *blk = (uint8_t *)kv->base + (size_t)(slot / s->block_size) * kv->block_bytes;
  const size_t off = (size_t)(slot % s->block_size) * (size_t)s->head_dim * es;
  for (int32_t h = 0; h < s->n_kv_heads; h++) {
    uint8_t *kd = blk + (size_t)h * head_bytes + off;
    uint8_t *vd = blk + (size_t)(s->n_kv_heads + h) * head_bytes + off;
    const float *ks = k + (int64_t)h * s->head_dim, *vs = v + (int64_t)h * s->head_dim;
    if (s->kv_dtype == WEIR_DTYPE_I8) {
      const int32_t o = slot % s->block_size;
      float sk = quantize_row_i8(ks, (int8_t *)kd, s->head_dim);
      float sv = quantize_row_i8(vs, (int8_t *)vd, s->head_dim);
      memcpy(blk + scale_offset(s, 0, h) + (size_t)o * sizeof(float), &sk, sizeof sk);
      memcpy(blk + scale_offset(s, 1, h) + (size_t)o * sizeof(float), &sv, sizeof sv);
    } else if (s->kv_dtype == WEIR_DTYPE_F16) {
      weir_f32_to_f16_row(ks, (uint16_t *)kd, s->head_dim);
      weir_f32_to_f16_row(vs, (uint16_t *)vd, s->head_dim);
    } else {
      memcpy(kd, ks, (size_t)s->head_dim * es);
      memcpy(vd, vs, (size_t)s->head_dim * es);
    }
  }
}

/* The first block of a sequence of context ctx with ql new tokens that a layer with this
 * window reads: blocks before it lie wholly outside every new query's window. */
static int64_t first_block(int32_t ctx, int32_t ql, int32_t window, int32_t block_size) {
  int64_t lo = window > 0 ? (int64_t)ctx - ql - window + 1 : 0;
  return lo > 0 ? lo / block_size : 0;
}

static int forward_impl(void *self, const weir_attn_shape *s, const weir_attn_layer_params *lp,
                        const weir_attn_batch *b, const weir_kv_view *kv, const float *q,
                        const float *k, const float *v, float *out) {
  attn_cpu *a = self;
  const weir_host *h = a->host;
  int rc = WEIR_OK;
  attn_task *tasks = NULL;
  if (!s || !b || !kv || !q || !k || !v || !out) return WEIR_E_INVAL;
  if (s->n_kv_heads <= 0 || s->n_heads <= 0 || s->n_heads % s->n_kv_heads != 0 ||
      s->head_dim <= 0 || s->block_size <= 0)
    return WEIR_E_INVAL;
  if (!elem_size(s->kv_dtype)) return WEIR_E_NOTSUP;
  if (kv->block_bytes < ap_block_bytes(self, s)) return WEIR_E_INVAL;
  if (b->num_tokens == 0 || b->num_seqs == 0) return WEIR_OK;
  if (b->num_tokens < 0 || b->num_seqs < 0) return WEIR_E_INVAL;

  /* On the CPU device memory is host memory: the *_host copies and the device arrays are
   * interchangeable; prefer the host copies when given. */
  const int32_t *qsl = b->query_start_loc_host ? b->query_start_loc_host : b->query_start_loc;
  const int32_t *ctx = b->context_lens_host ? b->context_lens_host : b->context_lens;
  const int32_t *tables = b->block_tables_host ? b->block_tables_host : b->block_tables;
  const int32_t *slots = b->slot_mapping_host ? b->slot_mapping_host : b->slot_mapping;
  if (!qsl || !ctx || !tables || !slots) return WEIR_E_INVAL;

  /* Validate everything before touching the cache, and count the tasks. */
  if (qsl[0] != 0 || qsl[b->num_seqs] != b->num_tokens) return WEIR_E_INVAL;
  int64_t n_tasks = 0;
  for (int32_t i = 0; i < b->num_seqs; i++) {
    int32_t ql = qsl[i + 1] - qsl[i];
    if (ql < 1 || ctx[i] < ql) return WEIR_E_INVAL;
    int64_t nb = ((int64_t)ctx[i] + s->block_size - 1) / s->block_size;
    if (nb > b->max_blocks_per_seq) return WEIR_E_RANGE;
    for (int64_t j = first_block(ctx[i], ql, lp->window, s->block_size); j < nb; j++) {
      int32_t blk = tables[(size_t)i * (size_t)b->max_blocks_per_seq + (size_t)j];
      if (blk < 0 || blk >= kv->num_blocks) return WEIR_E_RANGE;
    }
    n_tasks += (int64_t)s->n_kv_heads * ((ql + a->query_tile - 1) / a->query_tile);
  }
  for (int32_t i = 0; i < b->num_tokens; i++)
    if (slots[i] >= 0 && slots[i] / s->block_size >= kv->num_blocks) return WEIR_E_RANGE;

  /* New K/V first: the new tokens attend to each other through the cache. A negative slot
   * is padding and is not stored. */
  const int64_t kv_dim = (int64_t)s->n_kv_heads * s->head_dim;
  for (int32_t i = 0; i < b->num_tokens; i++)
    if (slots[i] >= 0) store_kv(s, kv, slots[i], k + i * kv_dim, v + i * kv_dim);

  tasks = h->alloc(h->ctx, (size_t)n_tasks * sizeof(*tasks), 0);
  if (!tasks) {
    rc = WEIR_E_NOMEM;
    goto out_done;
  }
  /* Ordered by KV head within a sequence, tiles innermost, so neighbouring tasks in one
   * chunk share the same cache blocks. */
  int64_t ti = 0;
  for (int32_t i = 0; i < b->num_seqs; i++)
    for (int32_t hk = 0; hk < s->n_kv_heads; hk++)
      for (int32_t t0 = qsl[i]; t0 < qsl[i + 1]; t0 += a->query_tile) {
        int32_t len = qsl[i + 1] - t0 < a->query_tile ? qsl[i + 1] - t0 : a->query_tile;
        tasks[ti++] = (attn_task){.seq = i, .kv_head = hk, .q_begin = t0, .q_len = len};
      }

  /* Scratch for the longest tile; computed from the offsets, not from the advisory
   * max_query_len, so a wrong hint cannot overflow it. */
  int32_t max_tile = 1;
  for (int32_t i = 0; i < b->num_seqs; i++)
    if (qsl[i + 1] - qsl[i] > max_tile) max_tile = qsl[i + 1] - qsl[i];
  if (max_tile > a->query_tile) max_tile = a->query_tile;

  fwd_ctx c = {.self = a,
               .shape = s,
               .kv = kv,
               .qsl = qsl,
               .ctx_lens = ctx,
               .tables = tables,
               .max_blocks = b->max_blocks_per_seq,
               .q = q,
               .out = out,
               .window = lp->window,
               .softcap = lp->softcap,
               .scale = lp->scale > 0.0f ? lp->scale : s->scale,
               .tasks = tasks,
               .scratch_floats = weir_attn_cpu_scratch_floats(
                   max_tile, s->n_heads / s->n_kv_heads, s->head_dim, s->block_size)};
  int threads = h->num_threads ? h->num_threads(h->ctx) : 1;
  if (threads > 1 && n_tasks > 1 && h->parallel_for)
    h->parallel_for(h->ctx, n_tasks, 1, fwd_chunk, &c);
  else
    fwd_chunk(&c, 0, n_tasks, 0);
  if (c.failed) rc = WEIR_E_NOMEM;

  h->free(h->ctx, tasks);
out_done:
  return rc;
}

static int ap_forward(void *self, const weir_attn_shape *s, const weir_attn_batch *b,
                      const weir_kv_view *kv, const float *q, const float *k, const float *v,
                      float *out) {
  const weir_attn_layer_params plain = {.struct_size = sizeof plain};
  return forward_impl(self, s, &plain, b, kv, q, k, v, out);
}

/* Fields beyond the host's struct_size count as zero (a host built against a later SDK may
 * pass a larger struct; an earlier one cannot call this at all). */
static int ap_forward_layer(void *self, const weir_attn_shape *s, const weir_attn_layer_params *lp,
                            const weir_attn_batch *b, const weir_kv_view *kv, const float *q,
                            const float *k, const float *v, float *out) {
  if (!lp) return WEIR_E_INVAL;
  weir_attn_layer_params p = {.struct_size = sizeof p};
  memcpy(&p, lp, lp->struct_size < sizeof p ? lp->struct_size : sizeof p);
  if (p.window < 0 || !(p.softcap >= 0.0f) || !(p.scale >= 0.0f)) return WEIR_E_INVAL;
  return forward_impl(self, s, &p, b, kv, q, k, v, out);
}

typedef struct rope_ctx {
  float *q, *k;
  const int32_t *pos;
  const weir_attn_shape *shape;
  const weir_attn_rope *rope;
  weir_rope_slot *slot; /* the step's table, or NULL: the direct kernels */
  int fill;             /* the table's rows are computed here first */
} rope_ctx;

/* Rotates tokens [t0, t1) of the q and k copies (parallel_for over tokens). */
static void rope_chunk(void *arg, int64_t t0, int64_t t1, int t) {
  (void)t;
  const rope_ctx *c = arg;
  const weir_attn_shape *s = c->shape;
  const weir_attn_rope *r = c->rope;
  if (c->slot) {
    if (c->fill) weir_rope_slot_fill(c->slot, t0, t1);
    weir_rope_apply(c->q, c->slot, t0, t1, s->n_heads, s->head_dim, r->style);
    weir_rope_apply(c->k, c->slot, t0, t1, s->n_kv_heads, s->head_dim, r->style);
  } else if (r->inv_freq) {
    weir_rope_rows_freqs(c->q, c->pos, t0, t1, s->n_heads, s->head_dim, r->rot_dim, r->inv_freq,
                         r->mscale, r->style);
    weir_rope_rows_freqs(c->k, c->pos, t0, t1, s->n_kv_heads, s->head_dim, r->rot_dim,
                         r->inv_freq, r->mscale, r->style);
  } else {
    weir_rope_rows(c->q, c->pos, t0, t1, s->n_heads, s->head_dim, r->rot_dim, r->freq_base,
                   r->freq_scale, r->style);
    weir_rope_rows(c->k, c->pos, t0, t1, s->n_kv_heads, s->head_dim, r->rot_dim, r->freq_base,
                   r->freq_scale, r->style);
  }
}

/* ABI 1.7: RoPE applied here rather than by the host's device ops. On the CPU there is no
 * launch to save: q and k are rotated into one scratch copy with the CPU device's own RoPE
 * kernels (so the result is bit-equal to the device's rope / rope_freqs followed by
 * forward_layer), which serves as the reference of the fused CUDA path. The cos/sin come
 * from the instance's table of the step (rope.h), filled by the step's first layer. */
static int ap_forward_rope(void *self, const weir_attn_shape *s, const weir_attn_layer_params *lp,
                           const weir_attn_rope *rope, const weir_attn_batch *b,
                           const weir_kv_view *kv, const float *q, const float *k, const float *v,
                           float *out) {
  attn_cpu *a = self;
  if (!lp || !rope || !s || !b || !q || !k) return WEIR_E_INVAL;
  weir_attn_layer_params p = {.struct_size = sizeof p};
  memcpy(&p, lp, lp->struct_size < sizeof p ? lp->struct_size : sizeof p);
  if (p.window < 0 || !(p.softcap >= 0.0f) || !(p.scale >= 0.0f)) return WEIR_E_INVAL;
  weir_attn_rope r = {.struct_size = sizeof r};
  memcpy(&r, rope, rope->struct_size < sizeof r ? rope->struct_size : sizeof r);
  const int32_t *pos = r.positions_host ? r.positions_host : r.positions;
  if (r.rot_dim <= 0 || r.rot_dim % 2 != 0 || r.rot_dim > s->head_dim || !pos ||
      (r.style != WEIR_KROPE_NORM && r.style != WEIR_KROPE_NEOX) ||
      (!r.inv_freq && !(r.freq_base > 0.0f)) || s->n_heads <= 0 || s->n_kv_heads <= 0 ||
      b->num_tokens < 0)
    return WEIR_E_INVAL;
  if (b->num_tokens == 0) return WEIR_OK;
  const int64_t T = b->num_tokens, qd = (int64_t)s->n_heads * s->head_dim,
                kd = (int64_t)s->n_kv_heads * s->head_dim;
  float *qk = a->host->alloc(a->host->ctx, (size_t)(T * (qd + kd)) * sizeof(float), 64);
  if (!qk) return WEIR_E_NOMEM;
  float *qr = qk, *kr = qk + T * qd;
  memcpy(qr, q, (size_t)(T * qd) * sizeof(float));
  memcpy(kr, k, (size_t)(T * kd) * sizeof(float));
  rope_ctx rc_ = {.q = qr, .k = kr, .pos = pos, .shape = s, .rope = &r};
  /* The step's cos/sin once for every layer: the same floats the direct kernels compute. */
  const weir_rope_params rp = {.rot_dim = r.rot_dim, .freq_base = r.freq_base,
                               .freq_scale = r.freq_scale, .inv_freq = r.inv_freq,
                               .mscale = r.mscale};
  rc_.slot = weir_rope_cache_get(&a->rope_cache, pos, T, &rp, &rc_.fill);
  const weir_host *h = a->host;
  int threads = h->num_threads ? h->num_threads(h->ctx) : 1;
  if (threads > 1 && T > 1 && h->parallel_for) h->parallel_for(h->ctx, T, 1, rope_chunk, &rc_);
  else rope_chunk(&rc_, 0, T, 0);
  if (rc_.slot && rc_.fill) weir_rope_slot_done(rc_.slot);
  int rc = forward_impl(self, s, &p, b, kv, qr, kr, v, out);
  a->host->free(a->host->ctx, qk);
  return rc;
}

static int ap_copy_blocks(void *self, const weir_attn_shape *s, const weir_kv_view *layer0,
                          const int32_t *src, const int32_t *dst, int32_t n) {
  (void)self;
  if (!s || !layer0 || (n > 0 && (!src || !dst)) || n < 0) return WEIR_E_INVAL;
  for (int32_t i = 0; i < n; i++)
    if (src[i] < 0 || src[i] >= layer0->num_blocks || dst[i] < 0 ||
        dst[i] >= layer0->num_blocks)
      return WEIR_E_RANGE;
  for (int32_t l = 0; l < s->n_layers; l++) {
    uint8_t *base = (uint8_t *)layer0->base + (size_t)l * layer0->num_blocks * layer0->block_bytes;
    for (int32_t i = 0; i < n; i++)
      if (src[i] != dst[i])
        memcpy(base + (size_t)dst[i] * layer0->block_bytes,
               base + (size_t)src[i] * layer0->block_bytes, layer0->block_bytes);
  }
  return WEIR_OK;
}

static const weir_attention_ops k_ops = {
    .struct_size = sizeof(weir_attention_ops),
    .block_bytes = ap_block_bytes,
    .forward = ap_forward,
    .copy_blocks = ap_copy_blocks,
    .forward_layer = ap_forward_layer,
    .forward_rope = ap_forward_rope,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_ATTENTION,
    .name = "paged",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "paged causal GQA attention on the CPU, online softmax, f32/f16/int8 KV",
    .devices = WEIR_DEVICE_CPU,
    .dtypes = WEIR_DTYPE_BIT(WEIR_DTYPE_F32) | WEIR_DTYPE_BIT(WEIR_DTYPE_F16) |
              WEIR_DTYPE_BIT(WEIR_DTYPE_I8),
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = ap_init,
    .fini = ap_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
