/* The skeleton the CPU quant plugins (fp16, int8, awq_int4) share: where a packed weight's
 * memory comes from, the checks of a pack's source, the pack loop with its failure handling,
 * release, embedding-id checks, the thresholds that split work over the host's threads (one
 * setting: the device's parallel_min, kernels/cpu/parallel.h), and the int8 weight path
 * both int8 and awq_int4 run (a Q8_0 source carried over exactly).
 *
 * A plugin's instance begins with a weir_cpu_quant and each of its packed weights with a
 * weir_cpu_qweight, so that the skeleton can pack, free and measure them. A packed weight
 * lives in the host's device memory when the host offers device_alloc (so the device accounts
 * for it), else in 64-byte aligned host memory. Thread-safe: nothing here keeps state beyond
 * what the caller passes. */
#ifndef WEIR_KERNELS_CPU_QUANT_COMMON_H
#define WEIR_KERNELS_CPU_QUANT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "parallel.h"
#include "weir/plugin.h"
#include "weir/quant.h"

/* What every CPU quant instance begins with. */
typedef struct weir_cpu_quant {
  const weir_host *host;
  const char *scheme;   /* "int8": the plugin's name, first word of its messages */
  int64_t parallel_min; /* the device's (weir_cpu_parallel_min), read once at init */
} weir_cpu_quant;

/* Fills q for an instance created with `host`. */
void weir_cpu_quant_init(weir_cpu_quant *q, const weir_host *host, const char *scheme);

/* Says why the call fails ("<scheme>: <message>") through host->set_error (ABI 1.5; through
 * host->log at error level in a host without it) and returns rc, so that a failure is one
 * line: return weir_cpu_quant_fail(q, WEIR_E_INVAL, "group_size ...", ...). */
int weir_cpu_quant_fail(const weir_cpu_quant *q, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What every packed weight begins with. */
typedef struct weir_cpu_qweight {
  int64_t rows, cols; /* out_features, in_features */
  void *data;         /* the packed bytes: device memory (weir_cpu_weight_alloc) */
  size_t bytes;       /* of data */
  int from_device;    /* where data came from, for the free */
} weir_cpu_qweight;

/* Weight memory of `bytes` bytes; *from_device records where it came from for the free.
 * NULL when the allocation failed. */
void *weir_cpu_weight_alloc(const weir_host *h, size_t bytes, int *from_device);
/* Frees what weir_cpu_weight_alloc returned (NULL is ignored). */
void weir_cpu_weight_free(const weir_host *h, void *data, int from_device);

/* Checks a quant plugin's source (pack args): a 1-D or 2-D tensor (higher dims of 1) of a type
 * the CPU dequantizers read (F32, F16, BF16, Q8_0, Q4_0, Q4_1) with at most 2^40 elements;
 * gives its shape and the byte stride between rows. On failure says why (weir_cpu_quant_fail,
 * naming the tensor) and returns WEIR_E_NOTSUP (type, shape) or WEIR_E_INVAL (no data, a row
 * stride shorter than a row). */
int weir_cpu_weight_source(const weir_cpu_quant *q, const weir_quant_pack_args *args,
                           int64_t *rows, int64_t *cols, size_t *stride);

/* How one plugin packs: the skeleton checks the source, allocates the weight struct and its
 * data, runs `rows_fn` over the rows (on the host's threads for large weights) and frees
 * everything on failure. */
typedef struct weir_cpu_pack_spec {
  size_t weight_size; /* sizeof the plugin's weight struct (begins with weir_cpu_qweight) */
  int64_t grain;      /* rows per parallel chunk */
  /* Sets the plugin's layout fields of w (rows and cols are set) and w->bytes. Returns a
   * status (WEIR_E_NOTSUP for a shape its kernels cannot hold). */
  int (*layout)(const weir_cpu_quant *q, weir_cpu_qweight *w, const weir_tensor *src);
  /* After data is allocated: sets pointers into it, zeroes padding. May be NULL. */
  void (*prepare)(weir_cpu_qweight *w);
  /* Packs rows [begin, end) of the source (row r at src + r * stride); returns WEIR_OK or a
   * status. Runs on any thread; must not call host services but the allocator. */
  int (*rows)(const weir_cpu_quant *q, weir_cpu_qweight *w, const uint8_t *src, size_t stride,
              weir_dtype src_dtype, int64_t begin, int64_t end);
} weir_cpu_pack_spec;

/* The pack skeleton: *weight gets the new weight on WEIR_OK. A failure returns the status
 * (WEIR_E_NOMEM for memory, whichever thread ran out) and has freed everything. */
int weir_cpu_quant_pack(const weir_cpu_quant *q, const weir_cpu_pack_spec *spec,
                        const weir_quant_pack_args *args, void **weight);
/* Frees a weight from weir_cpu_quant_pack (or any weight that begins with weir_cpu_qweight
 * and was allocated with host->alloc, its data with weir_cpu_weight_alloc). NULL is
 * ignored. */
void weir_cpu_quant_release(const weir_cpu_quant *q, void *weight);
/* w->bytes (0 for NULL). */
size_t weir_cpu_quant_weight_bytes(const void *weight);
/* The checks of an embed call: WEIR_OK when n == 0 or every id is a row of w, WEIR_E_INVAL
 * for NULL pointers or n < 0, WEIR_E_RANGE for an id out of range. */
int weir_cpu_quant_embed_check(const weir_cpu_qweight *w, const int32_t *ids, const float *out,
                               int64_t n);

/* ---- splitting work over the host's threads ----------------------------------------------
 * Thresholds in multiply-adds (or weights converted), derived from the device's parallel_min
 * (elements of an elementwise op). The factors keep the thresholds the plugins had before the
 * setting was shared: 2^16 and 2^18 at the default 32768. */
#define WEIR_CPU_QUANT_MATMUL_FACTOR 2
#define WEIR_CPU_QUANT_PACK_FACTOR 8

/* Runs fn over rows [0, rows) in chunks of `grain`: on the pool when there is more than one
 * thread and `work` reaches the pack threshold, inline otherwise (thread index 0). */
void weir_cpu_quant_for_pack(const weir_cpu_quant *q, int64_t rows, int64_t grain, int64_t work,
                             weir_parallel_fn fn, void *arg);
/* Per-token activation preparation: on the pool (one token per chunk) when there are at least
 * two tokens per thread and n_tokens * cols reaches the matmul threshold. */
void weir_cpu_quant_for_tokens(const weir_cpu_quant *q, int64_t n_tokens, int64_t cols,
                               weir_parallel_fn fn, void *arg);
/* A matmul's output split: over `units` (rows, or row groups), on the pool when there is more
 * than one thread, at least `min_units` units and `work` reaches the matmul threshold, in
 * chunks of about a quarter of a thread's share (four chunks per thread even out uneven
 * cores), rounded up to a multiple of `align` and at least `min_grain`. */
void weir_cpu_quant_for_units(const weir_cpu_quant *q, int64_t units, int64_t min_units,
                              int64_t work, int64_t align, int64_t min_grain,
                              weir_parallel_fn fn, void *arg);

/* A scratch buffer of `need` bytes for a matmul's quantized activations: `stack` (the
 * caller's, 64-byte aligned, `stack_bytes` long) when it is large enough (decode), else
 * 64-byte aligned heap memory, also stored in *heap for the caller to free() (*heap is NULL
 * when the stack buffer is used). NULL when the heap allocation failed. */
uint8_t *weir_cpu_scratch(uint8_t *stack, size_t stack_bytes, size_t need, void **heap);

/* ---- the int8 weight path (int8, and awq_int4's Q8_0 carry-over) -------------------------- */

/* An int8 weight in the kernels' layout (kernels/cpu/matmul_q8.h): q [rows][kp] (q + 128,
 * stored order), then d [rows][kp / group] f32 and WEIR_Q8_SCALE_PAD zero floats. */
typedef struct weir_cpu_q8_mat {
  const uint8_t *q;
  const float *d;
  int64_t rows, cols, kp, group;
} weir_cpu_q8_mat;

/* Bytes of q (rounded to 64) and of the whole allocation for rows x kp with `ng` scales per
 * row. */
size_t weir_cpu_q8_qbytes(int64_t rows, int64_t kp);
size_t weir_cpu_q8_bytes(int64_t rows, int64_t kp, int64_t ng);
/* One Q8_0 source row carried over exactly (its blocks are groups of 32): q copied, zero
 * padded to kp, stored order; d widened to f32 (exact), zero for the padding groups; ng =
 * kp / 32. */
void weir_cpu_q8_from_q8_0_row(const uint8_t *src, int64_t cols, int64_t kp, uint8_t *q,
                               float *d);
/* y[t][r] = sum_k w[r][k] x[t][k]: the activations quantized per token and 32-column block,
 * then the int8 kernels over the host's threads. WEIR_E_NOMEM when the activation buffer
 * cannot be had. */
int weir_cpu_q8_matmul(const weir_cpu_quant *q, const weir_cpu_q8_mat *m, const float *x,
                       float *y, int64_t n_tokens);
/* ys[i] = W_i x for n weights of the same cols and kp (else WEIR_E_NOTSUP): x quantized once,
 * then the int8 kernels per weight (the 1.7 matmul_group of the int8 plugin). */
int weir_cpu_q8_matmul_group(const weir_cpu_quant *q, const weir_cpu_q8_mat *const *m, int n,
                             const float *x, float *const *y, int64_t n_tokens);
/* Row r of m as f32 into out[cols]. */
void weir_cpu_q8_dequant_row(const weir_cpu_q8_mat *m, int64_t r, float *out);

#endif
