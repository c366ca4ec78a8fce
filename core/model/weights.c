/* Loading a model's tensors (weights.h). */
#include "model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/numeric.h"
#include "weir/status.h"

int weir__model_upload_f32(const weir_device_ops *dev, void *dev_self, const weir_gguf *g,
                           const char *name, int64_t first, int64_t n, int exact, float **out,
                           char *err, size_t errlen) {
  const weir_gguf_tensor *t = weir_gguf_find_tensor(g, name);
  *out = NULL;
  if (!t || first < 0 || n < 0 || (exact ? t->nelements != first + n : t->nelements < first + n)) {
    snprintf(err, errlen, "%s: tensor %s is missing or has %lld elements, expected %s%lld",
             weir_gguf_path(g), name, t ? (long long)t->nelements : 0LL, exact ? "" : "at least ",
             (long long)(first + n));
    return WEIR_E_FORMAT;
  }
  if (t->t.dtype != WEIR_DTYPE_F32 && t->t.dtype != WEIR_DTYPE_F16 &&
      t->t.dtype != WEIR_DTYPE_BF16) {
    snprintf(err, errlen,
             "%s: tensor %s has dtype %s; norms, biases and token types must be "
             "f32, f16 or bf16",
             weir_gguf_path(g), name, weir_dtype_name(t->t.dtype));
    return WEIR_E_NOTSUP;
  }
  const size_t esz = t->t.dtype == WEIR_DTYPE_F32 ? 4 : 2;
  const size_t bytes = sizeof(float) * (size_t)n;
  float *host = malloc(bytes ? bytes : 1);
  if (!host) return WEIR_E_NOMEM;
  /* cannot fail for these dtypes */
  (void)weir_dequantize_row(t->t.dtype, (const uint8_t *)t->t.data + esz * (size_t)first, host, n);
  void *d = NULL;
  int rc = dev->alloc(dev_self, bytes ? bytes : 1, &d);
  if (rc == WEIR_OK) rc = dev->copy_h2d(dev_self, d, host, bytes);
  if (rc == WEIR_OK) rc = dev->synchronize(dev_self);
  free(host);
  if (rc != WEIR_OK) {
    if (d) dev->free(dev_self, d);
    snprintf(err, errlen, "uploading %s: %s", name, weir_strerror(rc));
    return rc;
  }
  *out = d;
  return WEIR_OK;
}

int weir__model_pack_rows(const weir_quant_ops *q, void *qself, const weir_gguf *g,
                          const char *name, int64_t in, int64_t row0, int64_t rows, void **out,
                          char *err, size_t errlen) {
  const weir_gguf_tensor *t = weir_gguf_find_tensor(g, name);
  *out = NULL;
  if (!t || t->t.ndim != 2 || (in > 0 && t->t.ne[0] != in) ||
      (rows >= 0 && (row0 < 0 || row0 + rows > t->t.ne[1]))) {
    if (!t)
      snprintf(err, errlen, "%s: tensor %s is missing", weir_gguf_path(g), name);
    else
      snprintf(err, errlen,
               "%s: tensor %s (%lld x %lld) is not a matrix of rows of %lld with "
               "rows %lld..%lld",
               weir_gguf_path(g), name, (long long)t->t.ne[1], (long long)t->t.ne[0],
               (long long)(in > 0 ? in : t->t.ne[0]), (long long)(rows >= 0 ? row0 : 0),
               (long long)(rows >= 0 ? row0 + rows : t->t.ne[1]));
    return t ? WEIR_E_FORMAT : WEIR_E_NOTFOUND;
  }
  weir_tensor view = t->t;
  if (rows >= 0) {
    view.data = (uint8_t *)t->t.data + t->t.nb[1] * (size_t)row0;
    view.ne[1] = rows;
    for (int d = 2; d < WEIR_MAX_DIMS; d++)
      view.nb[d] = view.nb[1] * (size_t)rows;
  }
  weir_quant_pack_args args = {.struct_size = sizeof args, .src = &view, .name = name};
  int rc = q->pack(qself, &args, out);
  if (rc != WEIR_OK) {
    snprintf(err, errlen, "%s: the quant plugin could not pack %s (%s, %lld x %lld",
             weir_gguf_path(g), name, weir_dtype_name(t->t.dtype), (long long)t->t.ne[1],
             (long long)t->t.ne[0]);
    size_t used = strlen(err);
    if (rows >= 0 && used < errlen)
      snprintf(err + used, errlen - used, ", rows %lld..%lld", (long long)row0,
               (long long)(row0 + rows));
    used = strlen(err);
    if (used < errlen) snprintf(err + used, errlen - used, "): %s", weir_strerror(rc));
    *out = NULL;
    return rc;
  }
  return WEIR_OK;
}
