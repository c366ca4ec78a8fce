/* Loading a model's tensors from its GGUF file: the two steps every model graph
 * (llama.c, bert.c) takes for each tensor, shared so that their checks and
 * errors are one. Private to core/model. Both are pure functions of their
 * arguments plus the device or quant plugin they call; thread-safe as far as
 * those plugins' calls are. */
#ifndef WEIR_MODEL_WEIGHTS_H
#define WEIR_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "weir/device.h"
#include "weir/quant.h"

/* Uploads n values, from element `first` of tensor `name` (F32, F16 or BF16: a
 * norm, a bias, a row of a small table), as f32 in a new device buffer *out
 * (the caller frees it with the device's free). `exact`: the tensor must hold
 * exactly first + n elements, else at least that many. Fails, with err naming
 * the tensor and *out NULL, when the tensor is missing or short
 * (WEIR_E_FORMAT), of another dtype (WEIR_E_NOTSUP), or the device fails. */
int weir__model_upload_f32(const weir_device_ops *dev, void *dev_self, const weir_gguf *g,
                           const char *name, int64_t first, int64_t n, int exact, float **out,
                           char *err, size_t errlen);

/* Packs rows [row0, row0 + rows) of the 2-D tensor `name` (all of them: rows <
 * 0) through the quant plugin as a matrix of its own (GGUF rows are contiguous:
 * the slice is a view of the same bytes) into *out (the plugin's handle, freed
 * by its free). `in` > 0: the rows must be that wide. Fails with err naming the
 * tensor: WEIR_E_NOTFOUND when it is missing, WEIR_E_FORMAT when it is no such
 * matrix, or the plugin's status. */
int weir__model_pack_rows(const weir_quant_ops *q, void *qself, const weir_gguf *g,
                          const char *name, int64_t in, int64_t row0, int64_t rows, void **out,
                          char *err, size_t errlen);

#endif
