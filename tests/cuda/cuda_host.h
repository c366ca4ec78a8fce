/* A minimal weir host for the CUDA suites and benchmarks: loads plugins from the build tree
 * with dlopen, hands them a weir_host whose device_alloc and device_handle go to the loaded
 * device plugin (as core's loader does), and keeps the last error message each plugin logged.
 * Not thread-safe; one process, one device. */
#ifndef WEIR_TEST_CUDA_HOST_H
#define WEIR_TEST_CUDA_HOST_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

#include "weir/attention.h"
#include "weir/device.h"
#include "weir/numeric.h"
#include "weir/quant.h"
#include "weir/sampler.h"

typedef struct ch_plugin {
  void *dl;
  const weir_plugin_desc *desc;
  const void *ops;
  void *self;
  weir_host host;
  struct ch_ctx *ctx;
} ch_plugin;

/* The exit code ctest reads as "skipped" (SKIP_RETURN_CODE in tests/cuda/CMakeLists.txt). */
#define CH_SKIP 77

/* Loads and initialises the CUDA device plugin. Returns WEIR_OK, or the init status with the
 * plugin's last error line in `why` (e.g. "no CUDA device: cudaGetDeviceCount failed: ..."). */
int ch_device_open(char *why, size_t why_len);
/* The loaded device (valid after ch_device_open succeeded). */
extern ch_plugin ch_dev;
#define CH_DEV ((const weir_device_ops *)ch_dev.ops)

/* Loads plugin file `file` (e.g. "weir_attention_paged_cuda.so") from the build tree and
 * initialises it with default options. */
/* The folder the plugins are loaded from: $WEIR_CUDA_PLUGIN_DIR, else tests/bin/../../lib/weir/
 * plugins beside this executable (a build tree or gpu-check's bundle copied elsewhere), else
 * the build tree CMake compiled in. A static buffer: not thread-safe. */
const char *ch_plugin_dir(void);
int ch_plugin_open(ch_plugin *p, const char *file);
void ch_plugin_close(ch_plugin *p);
void ch_device_close(void);
/* The last line plugin p logged at WARN or above. */
const char *ch_last_error(const ch_plugin *p);

/* Device buffers through the device plugin; abort the test process on failure (tests only). */
void *ch_dalloc(size_t bytes);
void ch_dfree(void *p);
void ch_h2d(void *dst, const void *src, size_t n);
void ch_d2h(void *dst, const void *src, size_t n);
/* Fills n bytes of device memory with 0xFF: every f32 becomes a NaN, so an element a kernel
 * forgot to write cannot pass a comparison. */
void ch_poison(void *dst, size_t n);

/* Deterministic random numbers (xorshift), uniform in [lo, hi). */
void ch_seed(uint64_t s);
/* Seeds from $WEIR_TEST_SEED when set (gpu-check sets a fresh one), else from `def`. */
void ch_seed_from_env(uint64_t def);
float ch_uniform(float lo, float hi);
uint32_t ch_rand_u32(void);
void ch_fill_uniform(float *x, size_t n, float lo, float hi);

/* f16 rounding on the host through the compiler's _Float16 (round to nearest even), an oracle
 * independent of the SDK's weir_f32_to_f16; bf16 is the SDK's (weir/numeric.h). */
uint16_t ch_f32_to_f16(float x);
float ch_f16_to_f32(uint16_t h);

/* ||a - b|| / ||b|| over n values; returns +inf when a holds a NaN or inf. */
double ch_rel_err(const float *a, const double *ref, size_t n);

/* End-to-end logits check for model code: compares `rows` rows of `vocab` logits from the
 * CUDA path (a) with the CPU path (b). Fills the relative L2 error over all rows, the largest
 * absolute difference and the fraction of rows whose argmax agrees. Returns 1 when a holds a
 * NaN or inf. See docs/cuda.md for the bounds to expect. */
typedef struct ch_logits_report {
  double rel_l2, max_abs, top1_agree;
} ch_logits_report;
int ch_compare_logits(const float *a, const float *b, int64_t rows, int64_t vocab,
                      ch_logits_report *out);

/* Wall clock in seconds (monotonic). */
double ch_now(void);

/* ---- benchmark helpers ---------------------------------------------------------------------*/
/* Exits 1 with file:line, the call's text and its status when a weir call does not return
 * WEIR_OK (benchmarks only: they have nothing to clean up). */
#define CH_CHECK(call)                                                                   \
  do {                                                                                   \
    int rc_ = (call);                                                                    \
    if (rc_ != WEIR_OK) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, weir_strerror(rc_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)
/* qsort's comparison of doubles, ascending (the benches' medians). */
int ch_cmp_double(const void *a, const void *b);
/* The device's copy bandwidth in bytes/s (read + write), best of 5 timings of ten 1 GiB
 * device-to-device copies: the roofline the benchmarks report against. Needs 2 GiB free;
 * exits on a device error. */
double ch_copy_bandwidth(void);



/* ---- suite driver --------------------------------------------------------------------------*/
typedef struct ch_test {
  const char *name;
  void (*fn)(void);
} ch_test;

/* Opens the device plugin, or exits with CH_SKIP after printing "no CUDA device: ..." when
 * this machine has no usable GPU; any other failure exits with 1. */
void ch_device_open_or_skip(void);
/* Runs a NULL-terminated list of CUnit tests; returns the process exit code. */
int ch_run_suite(const char *suite, const ch_test *tests);
#endif
