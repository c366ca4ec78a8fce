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
