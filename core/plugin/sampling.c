/* The host side of the 1.1 sampling parameters: see sampling.h. */
#include "plugin/sampling.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "weir/device.h"

uint64_t weir_sampler_caps(const weir_plugin *sampler) {
  if (!sampler || !sampler->ops) return 0;
  const weir_sampler_ops *ops = sampler->ops;
  if (ops->struct_size < offsetof(weir_sampler_ops, caps) + sizeof ops->caps) return 0;
  return ops->caps & (WEIR_SAMPLER_CAP_ALLOWED | WEIR_SAMPLER_CAP_LOGIT_BIAS);
}

void weir_sampler_call_init(weir_sampler_call *c, const weir_plugin *sampler,
                            const weir_plugin *device) {
  memset(c, 0, sizeof *c);
  c->sampler = sampler;
  c->device = device;
  c->caps = weir_sampler_caps(sampler);
}

void weir_sampler_call_free(weir_sampler_call *c) {
  free(c->rows);
  free(c->params);
  free(c->host_logits);
  memset(c, 0, sizeof *c);
}

/* The 1.1 parameters of a row that the sampler does not apply itself (caps bits). */
static uint64_t missing(const weir_sampler_call *c, const weir_sampling_row *r) {
  const weir_sampling_params *p = r->params;
  uint64_t need = 0;
  if (!p) return 0;
  if (WEIR_SAMPLING_HAS(p, allowed) && p->allowed) need |= WEIR_SAMPLER_CAP_ALLOWED;
  if (WEIR_SAMPLING_HAS(p, num_logit_bias) && p->num_logit_bias != 0)
    need |= WEIR_SAMPLER_CAP_LOGIT_BIAS;
  return need & ~c->caps;
}

static int copy_d2h(weir_sampler_call *c, void *dst, const void *src, size_t n) {
  if (!c->device) {
    memcpy(dst, src, n);
    return WEIR_OK;
  }
  const weir_device_ops *d = c->device->ops;
  return d->copy_d2h(c->device->self, dst, src, n);
}

static int copy_h2d(weir_sampler_call *c, void *dst, const void *src, size_t n) {
  if (!c->device) {
    memcpy(dst, src, n);
    return WEIR_OK;
  }
  const weir_device_ops *d = c->device->ops;
  int rc = d->copy_h2d(c->device->self, dst, src, n);
  /* The staging buffer is reused by the next row: the copy must have read it. */
  return rc == WEIR_OK ? d->synchronize(c->device->self) : rc;
}

/* The host row buffer holds at least one row of vocab floats. */
static int grow_host(weir_sampler_call *c, int32_t vocab) {
  if ((size_t)vocab <= c->host_cap) return WEIR_OK;
  float *h = realloc(c->host_logits, (size_t)vocab * sizeof *h);
  if (!h) return WEIR_E_NOMEM;
  c->host_logits = h;
  c->host_cap = (size_t)vocab;
  return WEIR_OK;
}

/* Applies what the sampler lacks to the rows that need it, and points *use_rows at rows the
 * sampler may receive (the caller's own when nothing was missing). */
static int prepare(weir_sampler_call *c, const weir_sampling_row *rows, int32_t num_rows,
                   float *logits, int32_t vocab, const weir_sampling_row **use_rows) {
  *use_rows = rows;
  if (num_rows <= 0 || !rows || !logits || vocab <= 0) return WEIR_OK; /* the sampler judges */
  int32_t first = -1;
  for (int32_t r = 0; r < num_rows && first < 0; r++)
    if (missing(c, &rows[r])) first = r;
  if (first < 0) return WEIR_OK;

  if (num_rows > c->rows_cap) {
    weir_sampling_row *nr = realloc(c->rows, (size_t)num_rows * sizeof *nr);
    if (!nr) return WEIR_E_NOMEM;
    c->rows = nr;
    weir_sampling_params *np = realloc(c->params, (size_t)num_rows * sizeof *np);
    if (!np) return WEIR_E_NOMEM;
    c->params = np;
    c->rows_cap = num_rows;
  }
  if (grow_host(c, vocab) != WEIR_OK) return WEIR_E_NOMEM;
  memcpy(c->rows, rows, (size_t)num_rows * sizeof *rows);
  for (int32_t r = first; r < num_rows; r++) {
    const uint64_t need = missing(c, &rows[r]);
    if (!need) continue;
    const weir_sampling_params *p = rows[r].params;
    if ((need & WEIR_SAMPLER_CAP_LOGIT_BIAS) &&
        (p->num_logit_bias < 0 || !p->logit_bias_tokens || !p->logit_bias_values))
      return WEIR_E_INVAL;
    float *x = c->host_logits;
    float *row_logits = logits + (size_t)r * (size_t)vocab;
    int rc = copy_d2h(c, x, row_logits, (size_t)vocab * sizeof *x);
    if (rc != WEIR_OK) return rc;
    if (need & WEIR_SAMPLER_CAP_LOGIT_BIAS)
      for (int32_t i = 0; i < p->num_logit_bias; i++) {
        const int32_t t = p->logit_bias_tokens[i];
        if (t >= 0 && t < vocab) x[t] += p->logit_bias_values[i];
      }
    if (need & WEIR_SAMPLER_CAP_ALLOWED)
      for (int32_t t = 0; t < vocab; t++)
        if (!weir_mask_test(p->allowed, t)) x[t] = -INFINITY;
    if ((rc = copy_h2d(c, row_logits, x, (size_t)vocab * sizeof *x)) != WEIR_OK) return rc;
    /* The sampler sees the row without what was applied here. */
    weir_sampling_params *q = &c->params[r];
    memset(q, 0, sizeof *q);
    memcpy(q, p, p->struct_size < sizeof *q ? p->struct_size : sizeof *q);
    q->struct_size = p->struct_size < sizeof *q ? p->struct_size : (uint32_t)sizeof *q;
    if (need & WEIR_SAMPLER_CAP_ALLOWED) q->allowed = NULL;
    if (need & WEIR_SAMPLER_CAP_LOGIT_BIAS) {
      q->logit_bias_tokens = NULL;
      q->logit_bias_values = NULL;
      q->num_logit_bias = 0;
    }
    c->rows[r].params = q;
  }
  *use_rows = c->rows;
  return WEIR_OK;
}

int weir_sampler_call_sample(weir_sampler_call *c, const weir_sampling_row *rows,
                             int32_t num_rows, float *logits, int32_t vocab,
                             weir_sample_result *out) {
  const weir_sampler_ops *ops = c->sampler->ops;
  const weir_sampling_row *use;
  int rc = prepare(c, rows, num_rows, logits, vocab, &use);
  if (rc != WEIR_OK) return rc;
  return ops->sample(c->sampler->self, use, num_rows, logits, vocab, out);
}

int weir_sampler_call_probs(weir_sampler_call *c, const weir_sampling_row *rows,
                            int32_t num_rows, float *logits, int32_t vocab, float *probs) {
  const weir_sampler_ops *ops = c->sampler->ops;
  if (!ops->probs) return WEIR_E_NOTSUP;
  const weir_sampling_row *use;
  int rc = prepare(c, rows, num_rows, logits, vocab, &use);
  if (rc != WEIR_OK) return rc;
  return ops->probs(c->sampler->self, use, num_rows, logits, vocab, probs);
}

int weir_sampler_call_score(weir_sampler_call *c, const float *logits, int32_t num_rows,
                            int32_t vocab, const int32_t *tokens, int32_t num_top,
                            weir_sample_result *out) {
  const weir_sampler_ops *ops = c->sampler->ops;
  /* The loader pads an older plugin's ops with zeros: a 1.0 or 1.1 sampler reads NULL. */
  if (ops->score)
    return ops->score(c->sampler->self, logits, num_rows, vocab, tokens, num_top, out);
  if (num_rows <= 0) return num_rows == 0 ? WEIR_OK : WEIR_E_INVAL;
  if (!logits || !tokens || !out || vocab <= 0) return WEIR_E_INVAL;
  if (grow_host(c, vocab) != WEIR_OK) return WEIR_E_NOMEM;
  for (int32_t r = 0; r < num_rows; r++) {
    int rc = copy_d2h(c, c->host_logits, logits + (size_t)r * (size_t)vocab,
                      (size_t)vocab * sizeof(float));
    if (rc == WEIR_OK)
      rc = weir_sampler_score_row(c->host_logits, vocab, tokens[r], num_top, &out[r]);
    if (rc != WEIR_OK) return rc;
  }
  return WEIR_OK;
}
