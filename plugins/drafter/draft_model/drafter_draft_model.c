/* drafter/draft_model: speculative drafts from a smaller model of the same tokenizer.
 *
 * This plugin does no drafting: the engine does. The plugin is a name for a file. Its one job
 * is model_path (ABI 1.3), which hands the host the draft model's GGUF (its `model` option);
 * the engine then checks the file (the target's vocabulary, token for token), loads it
 * through the same device, attention and quant plugins as the target, keeps its KV in the
 * shared paged pool, runs its forward passes — one batched pass per drafted position for all
 * decode sequences — and draws the drafts from the draft model's distribution under each
 * request's own sampling parameters, verifying them against it, so every temperature stays
 * exact (core/engine/engine_spec.c; docs/engine.md, "Draft models"). That is the cheaper
 * design: drafting here would need the model graph, the KV pool and the packed weights
 * behind the ABI, where the engine already has them.
 *
 * Stateless; thread-safe. A host older than 1.3 never asks for the model and calls propose,
 * which proposes nothing: the server then decodes without speculation. */
#include <stdlib.h>
#include <string.h>

#include "weir/drafter.h"

typedef struct draft_model_drafter {
  const char *model; /* the host's option string: lives until fini */
} draft_model_drafter;

static const weir_option_desc k_options[] = {
    {.key = "model", .type = WEIR_OPT_STRING,
     .help = "the draft model's GGUF file (same tokenizer as the target; required)"},
};

static int dm_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  const char *model;
  int rc = weir_option_string(host, "model", &model);
  if (rc != WEIR_OK) return rc;
  if (!model || !model[0]) {
    host->set_error(host->ctx, "option \"model\" is required: the draft model's GGUF file "
                    "([drafter] model = \"draft.gguf\")");
    return WEIR_E_INVAL;
  }
  draft_model_drafter *d = calloc(1, sizeof *d);
  if (!d) return WEIR_E_NOMEM;
  d->model = model;
  *self = d;
  return WEIR_OK;
}

static void dm_fini(void *self) { free(self); }

static const char *dm_model_path(void *self) {
  return ((const draft_model_drafter *)self)->model;
}

/* Only a host before ABI 1.3 calls this (a newer one runs the model): no drafts. */
static int dm_propose(void *self, const weir_draft_seq *seqs, int32_t num_seqs, int32_t k,
                      int32_t *draft_tokens, int32_t *num_drafted, float *draft_probs) {
  (void)self, (void)seqs, (void)draft_tokens, (void)draft_probs;
  if (k <= 0 || num_seqs < 0) return WEIR_E_INVAL;
  memset(num_drafted, 0, sizeof(int32_t) * (size_t)num_seqs);
  return WEIR_OK;
}

static const weir_drafter_ops k_ops = {
    .struct_size = sizeof(weir_drafter_ops),
    .propose = dm_propose,
    .release_seq = NULL,
    .model_path = dm_model_path,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_DRAFTER,
    .name = "draft_model",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "names a draft model (same tokenizer) that the engine runs on the shared "
                   "KV pool; the plugin itself drafts nothing",
    .devices = WEIR_DEVICE_CPU | WEIR_DEVICE_CUDA,
    .dtypes = 0,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = dm_init,
    .fini = dm_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
