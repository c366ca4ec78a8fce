/* Packed-weight memory and row-parallel dispatch shared by the CPU quant plugins.
 *
 * A packed weight lives in the host's device memory when the host offers device_alloc (so the
 * device accounts for it), else in 64-byte aligned host memory. Thread-safe: nothing here
 * keeps state. */
#ifndef WEIR_KERNELS_CPU_WEIGHT_MEM_H
#define WEIR_KERNELS_CPU_WEIGHT_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "weir/plugin.h"
#include "weir/quant.h"

/* Weight memory of `bytes` bytes; *from_device records where it came from for the free.
 * NULL when the allocation failed. */
void *weir_cpu_weight_alloc(const weir_host *h, size_t bytes, int *from_device);
/* Frees what weir_cpu_weight_alloc returned (NULL is ignored). */
void weir_cpu_weight_free(const weir_host *h, void *data, int from_device);

/* Checks a quant plugin's source (pack args): a 1-D or 2-D tensor (higher dims of 1) of a type
 * the CPU dequantizers read (F32, F16, BF16, Q8_0, Q4_0, Q4_1) with at most 2^40 elements;
 * gives its shape and the byte stride between rows. Logs through the host, naming `scheme`
 * and the tensor, and returns WEIR_E_NOTSUP (type, shape) or WEIR_E_INVAL (no data, a row
 * stride shorter than a row). */
int weir_cpu_weight_source(const weir_host *h, const char *scheme,
                           const weir_quant_pack_args *args, int64_t *rows, int64_t *cols,
                           size_t *stride);

/* Threads the host's parallel_for uses (1 when it offers none). */
int weir_cpu_host_threads(const weir_host *h);

/* Runs fn over rows [0, rows) in chunks of `grain` on the host's pool when there is more than
 * one thread and `work` (the caller's measure of the job's size) reaches `min_work`; inline
 * otherwise (thread index 0). */
void weir_cpu_for_rows(const weir_host *h, int64_t rows, int64_t grain, int64_t work,
                       int64_t min_work, weir_parallel_fn fn, void *arg);

#endif
