#include "weight_mem.h"

#include <stdlib.h>

void *weir_cpu_weight_alloc(const weir_host *h, size_t bytes, int *from_device) {
  void *data = NULL;
  if (h->device_alloc) {
    *from_device = 1;
    if (h->device_alloc(h->ctx, bytes, &data) != WEIR_OK) data = NULL;
    return data;
  }
  *from_device = 0;
  size_t sz = (bytes + 63) & ~(size_t)63;
  if (posix_memalign(&data, 64, sz ? sz : 64) != 0) data = NULL;
  return data;
}

void weir_cpu_weight_free(const weir_host *h, void *data, int from_device) {
  if (!data) return;
  if (from_device) h->device_free(h->ctx, data);
  else free(data);
}

int weir_cpu_weight_source(const weir_host *h, const char *scheme,
                           const weir_quant_pack_args *args, int64_t *rows, int64_t *cols,
                           size_t *stride) {
  const weir_tensor *t = args ? args->src : NULL;
  const char *name = args && args->name ? args->name : "?";
  if (!t || !t->data) return WEIR_E_INVAL;
  switch (t->dtype) {
  case WEIR_DTYPE_F32: case WEIR_DTYPE_F16: case WEIR_DTYPE_BF16: case WEIR_DTYPE_Q8_0:
  case WEIR_DTYPE_Q4_0: case WEIR_DTYPE_Q4_1: break;
  default:
    if (h->log)
      h->log(h->ctx, WEIR_LOG_ERROR, "%s: tensor %s has unsupported dtype %s", scheme, name,
             weir_dtype_name(t->dtype));
    return WEIR_E_NOTSUP;
  }
  if (t->ndim < 1 || t->ndim > WEIR_MAX_DIMS) return WEIR_E_INVAL;
  for (int d = 2; d < t->ndim; d++)
    if (t->ne[d] != 1) {
      if (h->log) h->log(h->ctx, WEIR_LOG_ERROR, "%s: tensor %s is not a matrix", scheme, name);
      return WEIR_E_NOTSUP;
    }
  *cols = t->ne[0];
  *rows = t->ndim >= 2 ? t->ne[1] : 1;
  const size_t rb = weir_dtype_row_bytes(t->dtype, *cols);
  if (*cols <= 0 || *rows <= 0 || rb == 0 || *cols > ((int64_t)1 << 40) / *rows) {
    if (h->log)
      h->log(h->ctx, WEIR_LOG_ERROR, "%s: tensor %s has a bad shape for %s (%lld x %lld)",
             scheme, name, weir_dtype_name(t->dtype), (long long)*rows, (long long)*cols);
    return WEIR_E_NOTSUP;
  }
  *stride = t->ndim >= 2 && t->nb[1] ? t->nb[1] : rb;
  return *stride < rb ? WEIR_E_INVAL : WEIR_OK;
}

int weir_cpu_host_threads(const weir_host *h) {
  if (!h->num_threads || !h->parallel_for) return 1;
  int n = h->num_threads(h->ctx);
  return n < 1 ? 1 : n;
}

void weir_cpu_for_rows(const weir_host *h, int64_t rows, int64_t grain, int64_t work,
                       int64_t min_work, weir_parallel_fn fn, void *arg) {
  if (weir_cpu_host_threads(h) > 1 && work >= min_work)
    h->parallel_for(h->ctx, rows, grain, fn, arg);
  else
    fn(arg, 0, rows, 0);
}
