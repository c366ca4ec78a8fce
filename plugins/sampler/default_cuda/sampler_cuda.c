/* The default sampler on CUDA (weir_sampler_default_cuda.so): the same transformations, in
 * the same order, as plugins/sampler/default, run on the device where the logits already are.
 * Per call the host uploads one small parameter record per row, the distinct tokens that
 * logit bias, suppression and penalties touch, and the allowed-token mask of each constrained
 * row (vocab / 8 bytes), and downloads one result per row: the vocab-sized logits never cross
 * the bus. The rows' xoshiro256** states stay on the host: the host draws each
 * sampled row's uniform number from a copy of the state and commits the advance only when the
 * device reports that the row drew (a row whose every token is suppressed does not, as on the
 * CPU). Same seeds give the CPU's tokens without top-k and top-p; with them the distribution is
 * the same but the walk order differs (see docs/cuda.md). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

#include "weir/rng.h"
#include "weir/sampler.h"
#include "weir_cuda_common.h"
#include "weir_cuda_kernels.h"

typedef struct dbuf {
  void *p;
  size_t cap;
} dbuf;

typedef struct cuda_sampler {
  const weir_host *host;
  cudaStream_t stream;
  int device_id;
  int32_t *slot;      /* host: token -> penalty entry of the current row, -1 when none */
  int32_t slot_cap;
  unsigned char *up;  /* pinned: params then penalties, uploaded in one copy */
  size_t up_cap;
  weir_cuda_sample_result *down; /* pinned: results */
  size_t down_cap;
  dbuf d_up, d_res, d_off, d_ws, d_probs;
} cuda_sampler;

#define LOG(s, lvl, ...) (s)->host->log((s)->host->ctx, (lvl), __VA_ARGS__)

static int fail(cuda_sampler *s, cudaError_t e, const char *what) {
  LOG(s, WEIR_LOG_ERROR, "default (cuda): %s failed: %s", what, cudaGetErrorString(e));
  return weir_cuda_status(e);
}

static int dgrow(cuda_sampler *s, dbuf *b, size_t need) {
  if (need <= b->cap) return WEIR_OK;
  size_t want = need + need / 2;
  void *p = NULL;
  int rc = s->host->device_alloc(s->host->ctx, want, &p);
  if (rc != WEIR_OK) return rc;
  /* Safe at once: every call ends synchronized, so no earlier kernel still reads it. */
  if (b->p) s->host->device_free(s->host->ctx, b->p);
  b->p = p;
  b->cap = want;
  return WEIR_OK;
}

static int pgrow(cuda_sampler *s, void **buf, size_t *cap, size_t need) {
  if (need <= *cap) return WEIR_OK;
  size_t want = need + need / 2;
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, want, cudaHostAllocDefault);
  if (e != cudaSuccess) return fail(s, e, "cudaHostAlloc");
  if (*buf) cudaFreeHost(*buf);
  *buf = p;
  *cap = want;
  return WEIR_OK;
}

static void sp_fini(void *self) {
  cuda_sampler *s = self;
  if (!s) return;
  dbuf *bufs[] = {&s->d_up, &s->d_res, &s->d_off, &s->d_ws, &s->d_probs};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]->p) s->host->device_free(s->host->ctx, bufs[i]->p);
  if (s->up) cudaFreeHost(s->up);
  if (s->down) cudaFreeHost(s->down);
  s->host->free(s->host->ctx, s->slot);
  s->host->free(s->host->ctx, s);
}

static int sp_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  cuda_sampler *s = host->alloc(host->ctx, sizeof *s, 0);
  if (!s) return WEIR_E_NOMEM;
  memset(s, 0, sizeof *s);
  s->host = host;
  if (!host->device_alloc) {
    LOG(s, WEIR_LOG_ERROR, "default (cuda): the host offers no device allocator");
    sp_fini(s);
    return WEIR_E_NOTSUP;
  }
  if (host->device_handle) {
    s->stream = (cudaStream_t)host->device_handle(host->ctx, "cuda.stream");
    const int *dev = host->device_handle(host->ctx, "cuda.device");
    if (dev) s->device_id = *dev;
  }
  cudaError_t e = weir_cuda_use_device(s->device_id);
  if (e != cudaSuccess) {
    fail(s, e, "cudaSetDevice");
    sp_fini(s);
    return WEIR_E_DEVICE;
  }
  *self = s;
  return WEIR_OK;
}

static int32_t row_num_bias(const weir_sampling_row *r) {
  return WEIR_SAMPLING_HAS(r->params, num_logit_bias) ? r->params->num_logit_bias : 0;
}

static const uint32_t *row_allowed(const weir_sampling_row *r) {
  return WEIR_SAMPLING_HAS(r->params, allowed) ? r->params->allowed : NULL;
}

/* Adds or finds the entry of `tok` in the current row. */
static weir_cuda_penalty *entry(cuda_sampler *s, weir_cuda_penalty *pen, int32_t *n, int32_t row,
                                int32_t tok) {
  if (s->slot[tok] < 0) {
    s->slot[tok] = *n;
    pen[*n] = (weir_cuda_penalty){.row = row, .token = tok, .flags = 0, .count = 0, .bias = 0};
    (*n)++;
  }
  return &pen[s->slot[tok]];
}

/* Uploads the rows' parameters and penalties, runs the kernels, downloads the results (or the
 * distributions when probs is non-NULL). */
static int run(cuda_sampler *s, const weir_sampling_row *rows, int32_t num_rows, float *logits,
               int32_t vocab, weir_sample_result *out, float *probs) {
  if (num_rows == 0) return WEIR_OK;
  if (!rows || !logits || num_rows < 0 || vocab <= 0 || (!out && !probs)) return WEIR_E_INVAL;
  if ((int64_t)num_rows * vocab > 0x7fffffff) return WEIR_E_RANGE;
  for (int32_t r = 0; r < num_rows; r++)
    if (!weir_sampling_row_valid(&rows[r], probs == NULL)) return WEIR_E_INVAL;
  cudaError_t e = weir_cuda_use_device(s->device_id);
  if (e != cudaSuccess) return fail(s, e, "cudaSetDevice");

  if (vocab > s->slot_cap) {
    int32_t *ns = s->host->alloc(s->host->ctx, (size_t)vocab * sizeof *ns, 0);
    if (!ns) return WEIR_E_NOMEM;
    s->host->free(s->host->ctx, s->slot);
    s->slot = ns;
    s->slot_cap = vocab;
    memset(s->slot, 0xFF, (size_t)vocab * sizeof *ns); /* all -1 */
  }
  size_t max_pen = 0;
  int32_t num_masks = 0;
  for (int32_t r = 0; r < num_rows; r++) {
    max_pen += (size_t)rows[r].num_suppress_tokens + (size_t)rows[r].num_prompt_tokens +
               (size_t)rows[r].num_output_tokens + (size_t)row_num_bias(&rows[r]);
    num_masks += row_allowed(&rows[r]) != NULL;
  }
  /* Upload layout: params, then the masks (256-byte aligned), then the penalty entries. */
  const size_t mask_words = WEIR_MASK_WORDS(vocab);
  const size_t params_bytes = ((size_t)num_rows * sizeof(weir_cuda_sample_params) + 255) & ~(size_t)255;
  const size_t masks_bytes = ((size_t)num_masks * mask_words * sizeof(uint32_t) + 255) & ~(size_t)255;
  int rc = pgrow(s, (void **)&s->up, &s->up_cap,
                 params_bytes + masks_bytes + max_pen * sizeof(weir_cuda_penalty) + 16);
  if (rc != WEIR_OK) return rc;
  weir_cuda_sample_params *prm = (weir_cuda_sample_params *)s->up;
  uint32_t *masks = (uint32_t *)(s->up + params_bytes);
  weir_cuda_penalty *pen = (weir_cuda_penalty *)(s->up + params_bytes + masks_bytes);
  int32_t mask_at = 0;
  int32_t num_pen = 0, any_sorted = 0;
  uint64_t (*next_state)[4] = NULL;
  next_state = s->host->alloc(s->host->ctx, (size_t)num_rows * sizeof *next_state, 0);
  if (!next_state) return WEIR_E_NOMEM;

  for (int32_t r = 0; r < num_rows; r++) {
    const weir_sampling_row *row = &rows[r];
    const weir_sampling_params *p = row->params;
    weir_cuda_sample_params *q = &prm[r];
    memset(q, 0, sizeof *q);
    q->greedy = p->temperature == 0.0f;
    q->inv_temp = q->greedy ? 1.0f : 1.0f / p->temperature;
    q->top_k = p->top_k;
    q->top_p = p->top_p;
    q->min_p = p->min_p;
    q->repetition_penalty = p->repetition_penalty;
    q->presence_penalty = p->presence_penalty;
    q->frequency_penalty = p->frequency_penalty;
    q->num_logprobs = p->num_logprobs;
    q->sorted = !q->greedy && (p->top_p < 1.0f || (p->top_k > 0 && p->top_k < vocab));
    any_sorted |= q->sorted;
    if (!q->greedy && row->rng_state) {
      memcpy(next_state[r], row->rng_state, sizeof next_state[r]);
      q->u = weir_rng_uniform(next_state[r]);
    }
    q->mask_row = -1;
    if (row_allowed(row)) {
      memcpy(masks + (size_t)mask_at * mask_words, row_allowed(row), mask_words * sizeof(uint32_t));
      q->mask_row = mask_at++;
    }
    /* One entry per distinct token of this row. */
    const int32_t first = num_pen;
    for (int32_t i = 0; i < row_num_bias(row); i++) {
      int32_t t = p->logit_bias_tokens[i];
      if (t < 0 || t >= vocab) continue;
      weir_cuda_penalty *b = entry(s, pen, &num_pen, r, t);
      b->flags |= WEIR_CUDA_PEN_BIAS;
      b->bias += p->logit_bias_values[i];
    }
    for (int32_t i = 0; i < row->num_suppress_tokens; i++) {
      int32_t t = row->suppress_tokens[i];
      if (t >= 0 && t < vocab) entry(s, pen, &num_pen, r, t)->flags |= WEIR_CUDA_PEN_SUPPRESS;
    }
    if (p->repetition_penalty != 1.0f) {
      for (int32_t i = 0; i < row->num_prompt_tokens; i++) {
        int32_t t = row->prompt_tokens[i];
        if (t >= 0 && t < vocab) entry(s, pen, &num_pen, r, t)->flags |= WEIR_CUDA_PEN_REPEAT;
      }
      for (int32_t i = 0; i < row->num_output_tokens; i++) {
        int32_t t = row->output_tokens[i];
        if (t >= 0 && t < vocab) entry(s, pen, &num_pen, r, t)->flags |= WEIR_CUDA_PEN_REPEAT;
      }
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)
      for (int32_t i = 0; i < row->num_output_tokens; i++) {
        int32_t t = row->output_tokens[i];
        if (t >= 0 && t < vocab) entry(s, pen, &num_pen, r, t)->count++;
      }
    for (int32_t i = first; i < num_pen; i++) s->slot[pen[i].token] = -1;
  }

  const size_t up_bytes = params_bytes + masks_bytes + (size_t)num_pen * sizeof(weir_cuda_penalty);
  const size_t ws_bytes = any_sorted ? weir_cuda_sample_workspace_bytes(num_rows, vocab) : 0;
  if ((rc = dgrow(s, &s->d_up, up_bytes)) != WEIR_OK ||
      (rc = dgrow(s, &s->d_res, (size_t)num_rows * sizeof(weir_cuda_sample_result))) != WEIR_OK ||
      (rc = dgrow(s, &s->d_off, (size_t)num_rows * 2 * sizeof(int32_t))) != WEIR_OK ||
      (ws_bytes && (rc = dgrow(s, &s->d_ws, ws_bytes)) != WEIR_OK) ||
      (probs && (rc = dgrow(s, &s->d_probs, (size_t)num_rows * vocab * sizeof(float))) != WEIR_OK) ||
      (rc = pgrow(s, (void **)&s->down, &s->down_cap,
                  (size_t)num_rows * sizeof(weir_cuda_sample_result))) != WEIR_OK)
    goto free_states;
  const weir_cuda_sample_params *dprm = s->d_up.p;
  const uint32_t *dmasks = (const uint32_t *)((char *)s->d_up.p + params_bytes);
  const weir_cuda_penalty *dpen =
      (const weir_cuda_penalty *)((char *)s->d_up.p + params_bytes + masks_bytes);
  if ((e = cudaMemcpyAsync(s->d_up.p, s->up, up_bytes, cudaMemcpyHostToDevice, s->stream)) !=
          cudaSuccess ||
      (e = weir_cuda_sample_penalties(s->stream, logits, vocab, dprm, dpen, num_pen)) !=
          cudaSuccess ||
      (num_masks > 0 &&
       (e = weir_cuda_sample_mask(s->stream, logits, num_rows, vocab, dprm, dmasks)) !=
           cudaSuccess) ||
      (e = weir_cuda_sample(s->stream, logits, num_rows, vocab, dprm, any_sorted, s->d_ws.p,
                            s->d_ws.cap, s->d_off.p, s->d_res.p, probs ? s->d_probs.p : NULL)) !=
          cudaSuccess) {
    rc = fail(s, e, "sampling kernels");
    goto free_states;
  }
  if (probs) {
    e = cudaMemcpyAsync(probs, s->d_probs.p, (size_t)num_rows * vocab * sizeof(float),
                        cudaMemcpyDeviceToHost, s->stream);
  } else {
    e = cudaMemcpyAsync(s->down, s->d_res.p, (size_t)num_rows * sizeof(weir_cuda_sample_result),
                        cudaMemcpyDeviceToHost, s->stream);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
  if (e != cudaSuccess) {
    rc = fail(s, e, "sampling results");
    goto free_states;
  }
  if (!probs) {
    for (int32_t r = 0; r < num_rows; r++) {
      const weir_cuda_sample_result *d = &s->down[r];
      weir_sample_result *o = &out[r];
      memset(o, 0, sizeof *o);
      o->token = d->token;
      o->logprob = d->logprob;
      o->num_top = d->num_top < 0 ? 0 : d->num_top > WEIR_MAX_LOGPROBS ? WEIR_MAX_LOGPROBS : d->num_top;
      memcpy(o->top_tokens, d->top_tokens, (size_t)o->num_top * sizeof(int32_t));
      memcpy(o->top_logprobs, d->top_logprobs, (size_t)o->num_top * sizeof(float));
      if (d->drew && rows[r].rng_state) memcpy(rows[r].rng_state, next_state[r], sizeof next_state[r]);
    }
  }
  rc = WEIR_OK;
free_states:
  s->host->free(s->host->ctx, next_state);
  return rc;
}

static int sp_sample(void *self, const weir_sampling_row *rows, int32_t num_rows, float *logits,
                     int32_t vocab, weir_sample_result *out) {
  if (!out && num_rows > 0) return WEIR_E_INVAL;
  return run(self, rows, num_rows, logits, vocab, out, NULL);
}

/* probs() draws nothing: the rows' states do not move. */
static int sp_probs(void *self, const weir_sampling_row *rows, int32_t num_rows, float *logits,
                    int32_t vocab, float *probs) {
  if (!probs && num_rows > 0) return WEIR_E_INVAL;
  return run(self, rows, num_rows, logits, vocab, NULL, probs);
}

static const weir_sampler_ops k_ops = {
    .struct_size = sizeof(weir_sampler_ops),
    .sample = sp_sample,
    .probs = sp_probs,
    .caps = WEIR_SAMPLER_CAP_ALLOWED | WEIR_SAMPLER_CAP_LOGIT_BIAS,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_SAMPLER,
    .name = "default",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "the default sampler on NVIDIA GPUs: only token ids and logprobs leave the device",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = 0,
    .options = NULL,
    .num_options = 0,
    .init = sp_init,
    .fini = sp_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
