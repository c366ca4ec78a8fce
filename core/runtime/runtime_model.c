/* Loading a model of the runtime assembly (see runtime.h), calibrated first when asked. Its
 * own file because it is the one step that calls the calibration pass (calib.c), which is
 * itself a runtime assembly (runtime.c): this way the room has no call circle. */
#include "config/config.h"
#include "format/gguf.h"
#include "runtime/calib.h"
#include "runtime/runtime.h"
#include "util/err.h"

int weir_runtime_load_model(weir_runtime *rt, int32_t i, const weir_config *cfg,
                            const weir_llama_opts *opts, int calibrate, char *err,
                            size_t errlen) {
  if (i < 0 || i >= rt->num_models || !rt->pool || rt->model[i] || opts->samples) {
    weir_set_err(err, errlen, "internal: model %d cannot be loaded now", (int)i);
    return WEIR_E_INVAL;
  }
  /* weir_calib_llama_create runs the calibration pass first when the scheme wants one. */
  int rc = calibrate ? weir_calib_llama_create(cfg, rt->gguf[i], rt->tok, &rt->plugins, opts,
                                               rt->pool, i, &rt->model[i], err, errlen)
                     : weir_llama_create(rt->gguf[i], &rt->plugins, opts, rt->pool, i,
                                         &rt->model[i], err, errlen);
  /* The plugins hold the packed weights now: the mapped file's pages need not stay resident
   * (they are read back from the file if anything touches them again). */
  if (rc == WEIR_OK) weir_gguf_drop_pages(rt->gguf[i]);
  return rc;
}
