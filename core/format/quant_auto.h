/* quant.scheme = "auto": which quant plugin runs a model's weights.
 *
 * "gguf" (the file's own block types, run in place) when any of the model's matrices (a
 * tensor of two or more dimensions) is a block type, i.e. anything but F32, F16 and BF16;
 * "fp16" otherwise. The engine and `weir perplexity` resolve "auto" with it against the model
 * they opened; the loader takes an unresolved "auto" (no model at hand: `weir config check`,
 * the calibration pass) as "fp16". Pure, thread-safe. */
#ifndef WEIR_FORMAT_QUANT_AUTO_H
#define WEIR_FORMAT_QUANT_AUTO_H

#include "format/gguf.h"

/* The scheme name for g: "gguf" or "fp16" (static strings). */
const char *weir_gguf_quant_auto(const weir_gguf *g);

/* `name` itself unless it is "auto", then weir_gguf_quant_auto(g). */
const char *weir_gguf_quant_resolve(const weir_gguf *g, const char *name);

#endif
