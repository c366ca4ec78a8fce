/* A small pthread pool with weir_host.parallel_for semantics, for the kernel and plugin
 * tests and the kernel benchmark (the real pool lives in core, which these do not link).
 * The calling thread takes part as thread 0. One parallel_for at a time per pool. */
#ifndef WEIR_TEST_WT_POOL_H
#define WEIR_TEST_WT_POOL_H

#include "weir/plugin.h"

typedef struct wt_pool wt_pool;

wt_pool *wt_pool_create(int num_threads);
void wt_pool_destroy(wt_pool *p);
int wt_pool_threads(const wt_pool *p);
void wt_pool_parallel_for(wt_pool *p, int64_t n, int64_t grain, weir_parallel_fn fn, void *arg);

/* A host table whose parallel_for runs on `p`, with aligned malloc-backed alloc and
 * device_alloc, and a log that prints warnings and errors to stderr. */
weir_host wt_pool_host(wt_pool *p);

#endif
