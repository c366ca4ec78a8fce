/* quant.scheme = "auto" (see quant_auto.h). */
#include "format/quant_auto.h"

#include <string.h>

const char *weir_gguf_quant_auto(const weir_gguf *g) {
  for (int64_t i = 0; g && i < weir_gguf_tensor_count(g); i++) {
    const weir_gguf_tensor *t = weir_gguf_tensor_at(g, i);
    if (!t || t->t.ndim < 2) continue;
    weir_dtype d = t->t.dtype;
    if (d != WEIR_DTYPE_F32 && d != WEIR_DTYPE_F16 && d != WEIR_DTYPE_BF16) return "gguf";
  }
  return "fp16";
}

const char *weir_gguf_quant_resolve(const weir_gguf *g, const char *name) {
  if (name && strcmp(name, "auto") != 0) return name;
  return weir_gguf_quant_auto(g);
}
