/* weir SDK umbrella header: includes every public header. Since 1.0. */
#ifndef WEIR_WEIR_H
#define WEIR_WEIR_H
#include "weir/status.h"
#include "weir/tensor.h"
#include "weir/numeric.h"
#include "weir/plugin.h"
#include "weir/kv.h"
#include "weir/device.h"
#include "weir/attention.h"
#include "weir/quant.h"
#include "weir/sampler.h"
#include "weir/rng.h"
#include "weir/drafter.h"
#include "weir/cache.h"
#endif
