/* The one setting that decides when CPU work is split over the host's thread pool.
 *
 * The CPU device plugin declares it as its option `parallel_min` (elements of an elementwise
 * operation below which it runs on the calling thread) and hands its value to the other
 * plugins of the instance through its native handle "cpu.parallel_min" (weir_host
 * .device_handle). The CPU quant plugins read it there (kernels/cpu/quant_common.h), so one
 * key in [device] sets the threshold of every CPU plugin. Header-only; thread-safe. */
#ifndef WEIR_KERNELS_CPU_PARALLEL_H
#define WEIR_KERNELS_CPU_PARALLEL_H

#include <stdint.h>

#include "weir/plugin.h"

/* The default of device.parallel_min: splitting smaller work costs more in wake-ups than it
 * saves. */
#define WEIR_CPU_PARALLEL_MIN 32768

/* The name of the CPU device's native handle that points at its parallel_min
 * (const int64_t *, valid until the device's fini). */
#define WEIR_CPU_PARALLEL_MIN_HANDLE "cpu.parallel_min"

/* Threads the host's parallel_for uses (1 when it offers none). */
static inline int weir_cpu_host_threads(const weir_host *h) {
  if (!h || !h->num_threads || !h->parallel_for) return 1;
  int n = h->num_threads(h->ctx);
  return n < 1 ? 1 : n;
}

/* The instance's device's parallel_min, or WEIR_CPU_PARALLEL_MIN when the device offers none
 * (another device plugin, or a host without device_handle). */
static inline int64_t weir_cpu_parallel_min(const weir_host *h) {
  const int64_t *v = h && h->device_handle
                         ? (const int64_t *)h->device_handle(h->ctx, WEIR_CPU_PARALLEL_MIN_HANDLE)
                         : NULL;
  return v && *v > 0 ? *v : WEIR_CPU_PARALLEL_MIN;
}

#endif
