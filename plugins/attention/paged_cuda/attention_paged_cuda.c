/* The paged attention plugin on CUDA (weir_attention_paged_cuda.so): paged KV cache in f16,
 * bf16 or f32 on an NVIDIA GPU.
 * Block layout, kernels and launch planning are in kernels/cuda/attention.cu; this file binds
 * them to the SDK. See docs/cuda.md. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

#include "weir/attention.h"
#include "weir/device.h" /* weir_rope_style */
#include "weir_cuda_common.h"
#include "weir_cuda_kernels.h"

typedef struct cuda_attn {
  const weir_host *host;
  cudaStream_t stream; /* the device plugin's stream (or the legacy default stream) */
  int device_id;
  int num_sms;
  size_t max_smem;
  weir_cuda_scratch ws; /* split-KV workspace (kept while a step graph may replay it) */
  weir_cuda_scratch cnt; /* split-KV counters: zeroed when allocated, zero after each launch */
  int32_t *pairs;      /* device copy of copy_blocks' src and dst lists */
  int32_t pairs_cap;
} cuda_attn;

#define LOG(a, lvl, ...) (a)->host->log((a)->host->ctx, (lvl), __VA_ARGS__)

static int fail(cuda_attn *a, cudaError_t e, const char *what) {
  LOG(a, WEIR_LOG_ERROR, "paged (cuda): %s failed: %s", what, cudaGetErrorString(e));
  return weir_cuda_status(e);
}

static void attn_fini(void *self) {
  cuda_attn *a = self;
  if (!a) return;
  weir_cuda_scratch_free(a->host, &a->ws);
  weir_cuda_scratch_free(a->host, &a->cnt);
  if (a->pairs) a->host->device_free(a->host->ctx, a->pairs);
  a->host->free(a->host->ctx, a);
}

static int attn_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  int rc = WEIR_E_NOMEM;
  cuda_attn *a = host->alloc(host->ctx, sizeof *a, 0);
  if (!a) goto fail;
  memset(a, 0, sizeof *a);
  a->host = host;
  if (!host->device_alloc) {
    LOG(a, WEIR_LOG_ERROR, "paged (cuda): the host offers no device allocator");
    rc = WEIR_E_NOTSUP;
    goto free_attn;
  }
  /* Share the device plugin's stream so that every operation of a step is ordered. */
  if (host->device_handle) {
    a->stream = (cudaStream_t)host->device_handle(host->ctx, "cuda.stream");
    const int *dev = host->device_handle(host->ctx, "cuda.device");
    if (dev) a->device_id = *dev;
  }
  if (!a->stream)
    LOG(a, WEIR_LOG_WARN, "paged (cuda): no shared CUDA stream from the host; using the legacy "
                          "default stream");
  cudaError_t e;
  int v = 0;
  if ((e = weir_cuda_use_device(a->device_id)) != cudaSuccess ||
      (e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, a->device_id)) !=
          cudaSuccess) {
    rc = fail(a, e, "querying the device");
    rc = rc == WEIR_E_NOMEM ? rc : WEIR_E_DEVICE;
    goto free_attn;
  }
  a->num_sms = v;
  if ((e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, a->device_id)) !=
      cudaSuccess) {
    rc = fail(a, e, "querying shared memory");
    goto free_attn;
  }
  a->max_smem = (size_t)v;
  *self = a;
  return WEIR_OK;
free_attn:
  attn_fini(a);
fail:
  return rc;
}

static size_t attn_block_bytes(void *self, const weir_attn_shape *shape) {
  (void)self;
  if (shape->n_kv_heads <= 0 || shape->n_heads % shape->n_kv_heads != 0) return 0;
  return weir_cuda_attn_block_bytes(shape->n_kv_heads, shape->head_dim, shape->block_size,
                                    (int32_t)shape->kv_dtype);
}

static int forward_impl(void *self, const weir_attn_shape *shape,
                        const weir_attn_layer_params *lp, const weir_attn_rope *rope,
                        const weir_attn_batch *batch, const weir_kv_view *kv, const float *q,
                        const float *k, const float *v, float *out) {
  cuda_attn *a = self;
  if (batch->num_tokens <= 0 || batch->num_seqs <= 0) return WEIR_OK;
  const size_t bb = attn_block_bytes(self, shape);
  if (bb == 0) return WEIR_E_NOTSUP;
  if (kv->block_bytes < bb) return WEIR_E_INVAL;
  weir_cuda_attn_params p = {
      .n_heads = shape->n_heads,
      .n_kv_heads = shape->n_kv_heads,
      .head_dim = shape->head_dim,
      .block_size = shape->block_size,
      .kv_dtype = (int32_t)shape->kv_dtype,
      .scale = lp->scale > 0.0f ? lp->scale : shape->scale,
      .num_seqs = batch->num_seqs,
      .num_tokens = batch->num_tokens,
      .max_query_len = batch->max_query_len,
      .max_context_len = batch->max_context_len,
      .query_start_loc = batch->query_start_loc,
      .context_lens = batch->context_lens,
      .block_tables = batch->block_tables,
      .max_blocks_per_seq = batch->max_blocks_per_seq,
      .slot_mapping = batch->slot_mapping,
      .kv_base = kv->base,
      .block_bytes = kv->block_bytes,
      .num_blocks = kv->num_blocks,
      .window = lp->window,
      .softcap = lp->softcap,
  };
  if (rope) { /* ABI 1.7: K rotated in the KV write, Q as the attention kernel loads it */
    p.positions = rope->positions;
    p.rope_dim = rope->rot_dim;
    p.rope_neox = rope->style == WEIR_ROPE_NEOX;
    p.rope_log2_base = rope->inv_freq ? 0.0f : log2f(rope->freq_base);
    p.rope_freq_scale = rope->freq_scale;
    p.rope_inv_freq = rope->inv_freq;
    p.rope_mscale = rope->mscale;
  }
  weir_cuda_attn_plan plan;
  cudaError_t e = weir_cuda_use_device(a->device_id);
  if (e != cudaSuccess) return fail(a, e, "cudaSetDevice");
  if (weir_cuda_attn_plan_make(&p, a->num_sms, a->max_smem, &plan) != cudaSuccess) {
    LOG(a, WEIR_LOG_ERROR, "paged (cuda): cannot serve %d heads / %d KV heads of dim %d",
        shape->n_heads, shape->n_kv_heads, shape->head_dim);
    return WEIR_E_NOTSUP;
  }
  int rc = weir_cuda_scratch_reserve(a->host, &a->ws, plan.workspace_bytes);
  if (rc != WEIR_OK) return rc;
  /* A new counter buffer starts at zero (the kernel keeps it so). It only grows in an
   * un-recorded step: the engine sizes scratch before it records a graph. */
  void *old_cnt = a->cnt.p;
  if ((rc = weir_cuda_scratch_reserve(a->host, &a->cnt, plan.counter_bytes)) != WEIR_OK) return rc;
  if (a->cnt.p != old_cnt &&
      (e = cudaMemsetAsync(a->cnt.p, 0, a->cnt.size, a->stream)) != cudaSuccess)
    return fail(a, e, "zeroing the split counters");
  if ((e = weir_cuda_kv_write(a->stream, &p, k, v)) != cudaSuccess) return fail(a, e, "kv_write");
  if ((e = weir_cuda_attention(a->stream, &p, &plan, q, out, a->ws.p, a->cnt.p)) != cudaSuccess)
    return fail(a, e, "attention");
  return WEIR_OK;
}

static int attn_forward(void *self, const weir_attn_shape *shape, const weir_attn_batch *batch,
                        const weir_kv_view *kv, const float *q, const float *k, const float *v,
                        float *out) {
  const weir_attn_layer_params plain = {.struct_size = sizeof plain};
  return forward_impl(self, shape, &plain, NULL, batch, kv, q, k, v, out);
}

/* ABI 1.5: a layer's window, soft-cap and scale (kernels/cuda/attention.cu). Fields beyond
 * the host's struct_size count as zero. */
static int attn_forward_layer(void *self, const weir_attn_shape *shape,
                              const weir_attn_layer_params *lp, const weir_attn_batch *batch,
                              const weir_kv_view *kv, const float *q, const float *k,
                              const float *v, float *out) {
  if (!lp) return WEIR_E_INVAL;
  weir_attn_layer_params p = {.struct_size = sizeof p};
  memcpy(&p, lp, lp->struct_size < sizeof p ? lp->struct_size : sizeof p);
  if (p.window < 0 || !(p.softcap >= 0.0f) || !(p.scale >= 0.0f)) return WEIR_E_INVAL;
  return forward_impl(self, shape, &p, NULL, batch, kv, q, k, v, out);
}

/* ABI 1.7: forward_layer with RoPE fused into the KV write and the query load. */
static int attn_forward_rope(void *self, const weir_attn_shape *shape,
                             const weir_attn_layer_params *lp, const weir_attn_rope *rope,
                             const weir_attn_batch *batch, const weir_kv_view *kv, const float *q,
                             const float *k, const float *v, float *out) {
  if (!lp || !rope) return WEIR_E_INVAL;
  weir_attn_layer_params p = {.struct_size = sizeof p};
  memcpy(&p, lp, lp->struct_size < sizeof p ? lp->struct_size : sizeof p);
  if (p.window < 0 || !(p.softcap >= 0.0f) || !(p.scale >= 0.0f)) return WEIR_E_INVAL;
  weir_attn_rope r = {.struct_size = sizeof r};
  memcpy(&r, rope, rope->struct_size < sizeof r ? rope->struct_size : sizeof r);
  if (r.rot_dim <= 0 || r.rot_dim % 2 != 0 || r.rot_dim > shape->head_dim || !r.positions ||
      (r.style != WEIR_ROPE_NORM && r.style != WEIR_ROPE_NEOX) ||
      (!r.inv_freq && !(r.freq_base > 0.0f)))
    return WEIR_E_INVAL;
  return forward_impl(self, shape, &p, &r, batch, kv, q, k, v, out);
}

/* src and dst may be host or device arrays: device pointers are used as they are, host
 * arrays are uploaded first (copy-on-write is rare, so the upload's cost does not matter). */
static int attn_copy_blocks(void *self, const weir_attn_shape *shape, const weir_kv_view *layer0,
                            const int32_t *src, const int32_t *dst, int32_t n) {
  cuda_attn *a = self;
  if (n <= 0) return WEIR_OK;
  cudaError_t e = weir_cuda_use_device(a->device_id);
  if (e != cudaSuccess) return fail(a, e, "cudaSetDevice");
  struct cudaPointerAttributes at;
  int on_device = cudaPointerGetAttributes(&at, src) == cudaSuccess &&
                  (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged);
  (void)cudaGetLastError();
  const int32_t *dsrc = src, *ddst = dst;
  if (!on_device) {
    for (int32_t i = 0; i < n; i++)
      if (src[i] < 0 || src[i] >= layer0->num_blocks || dst[i] < 0 ||
          dst[i] >= layer0->num_blocks)
        return WEIR_E_RANGE;
    if (n > a->pairs_cap) {
      void *np = NULL;
      int rc = a->host->device_alloc(a->host->ctx, (size_t)n * 2 * sizeof(int32_t), &np);
      if (rc != WEIR_OK) return rc;
      if (a->pairs) a->host->device_free(a->host->ctx, a->pairs);
      a->pairs = np;
      a->pairs_cap = n;
    }
    /* From pageable memory the copy returns once the bytes are staged, so the caller may
     * reuse src and dst as soon as we return. */
    if ((e = cudaMemcpyAsync(a->pairs, src, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice,
                             a->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(a->pairs + n, dst, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, a->stream)) != cudaSuccess)
      return fail(a, e, "copy_blocks upload");
    dsrc = a->pairs;
    ddst = a->pairs + n;
  }
  e = weir_cuda_copy_blocks(a->stream, layer0->base, layer0->block_bytes, layer0->num_blocks,
                            shape->n_layers, dsrc, ddst, n);
  return e == cudaSuccess ? WEIR_OK : fail(a, e, "copy_blocks");
}

static const weir_attention_ops k_ops = {
    .struct_size = sizeof(weir_attention_ops),
    .block_bytes = attn_block_bytes,
    .forward = attn_forward,
    .copy_blocks = attn_copy_blocks,
    .forward_layer = attn_forward_layer,
    .forward_rope = attn_forward_rope,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_ATTENTION,
    .name = "paged",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "paged attention on NVIDIA GPUs: GQA-aware tiles, split-KV decode; "
                   "f32/f16/bf16/int8 KV",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = WEIR_DTYPE_BIT(WEIR_DTYPE_F16) | WEIR_DTYPE_BIT(WEIR_DTYPE_BF16) |
              WEIR_DTYPE_BIT(WEIR_DTYPE_F32) | WEIR_DTYPE_BIT(WEIR_DTYPE_I8),
    .options = NULL,
    .num_options = 0,
    .init = attn_init,
    .fini = attn_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
