/* What the quant micro-benchmarks (bench_int8, bench_awq) share: clocks, the 1.1B preset's
 * linear-layer shapes, and loading a quant plugin with dlopen and its default options.
 * Header-only; benchmarks, not tests: nothing here asserts. */
#ifndef WEIR_TESTS_WT_BENCH_H
#define WEIR_TESTS_WT_BENCH_H

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "weir/weir.h"
#include "wt_options.h"

static inline double wt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of the calling thread: with one thread, the time the work really took even when
 * the machine is oversubscribed (it excludes time spent descheduled). */
static inline double wt_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct wt_shape {
  const char *what;
  int64_t rows, cols;
  int per_layer; /* times per layer in the model estimate; 0 = once (output) */
} wt_shape;

/* The 1.1B preset (22 layers): its linear layers, and the output projection. */
static const wt_shape wt_shapes_1b1[] = {
    {"attn_q/o 2048x2048", 2048, 2048, 2},
    {"attn_k/v 256x2048", 256, 2048, 2},
    {"ffn_gate/up 5632x2048", 5632, 2048, 2},
    {"ffn_down 2048x5632", 2048, 5632, 1},
    {"output 32000x2048", 32000, 2048, 0},
};
#define WT_NSHAPES (int)(sizeof wt_shapes_1b1 / sizeof wt_shapes_1b1[0])
#define WT_LAYERS_1B1 22

typedef struct wt_bench_plugin {
  void *dl;
  const weir_plugin_desc *desc;
  const weir_quant_ops *ops;
  void *self;
  weir_host host; /* the caller's, with option and set_error (wt_options.h) */
} wt_bench_plugin;

/* Loads DIR/weir_quant_NAME.so on the CPU with its default options, group_size set to
 * `group` when that is >= 0. -1 (with a message) when it cannot. */
static inline int wt_bench_load(wt_bench_plugin *p, const char *dir, const char *name,
                                int64_t group, const weir_host *host) {
  char path[1024];
  memset(p, 0, sizeof *p);
  snprintf(path, sizeof path, "%s/weir_quant_%s.so", dir, name);
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) {
    fprintf(stderr, "%s\n", dlerror());
    return -1;
  }
  weir_plugin_entry_fn entry = (weir_plugin_entry_fn)dlsym(p->dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  if (!entry) return -1;
  p->desc = entry();
  p->ops = p->desc->ops;
  weir_option_value opts[16];
  memset(opts, 0, sizeof opts);
  for (int i = 0; i < p->desc->num_options && i < 16; i++) {
    opts[i].i = p->desc->options[i].def_int;
    opts[i].f = p->desc->options[i].def_float;
    opts[i].b = p->desc->options[i].def_bool;
    opts[i].s = p->desc->options[i].def_string ? p->desc->options[i].def_string : "";
    if (!strcmp(p->desc->options[i].key, "group_size") && group >= 0) opts[i].i = group;
  }
  weir_plugin_args args = {.struct_size = sizeof args, .device = WEIR_DEVICE_CPU,
                           .options = opts, .num_options = p->desc->num_options};
  p->host = *host;
  wt_options_host(&p->host);
  wt_options_use(p->desc, opts);
  if (p->desc->init(&p->host, &args, &p->self) != WEIR_OK) {
    fprintf(stderr, "%s: init failed: %s\n", path, wt_options_error);
    return -1;
  }
  return 0;
}

static inline void wt_bench_unload(wt_bench_plugin *p) {
  if (p->self) p->desc->fini(p->self);
  if (p->dl) dlclose(p->dl);
  memset(p, 0, sizeof(*p));
}

#endif
