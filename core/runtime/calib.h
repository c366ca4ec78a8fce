/* Calibration for activation-aware quantization (awq_int4; docs/quant-awq.md).
 *
 * When the quant plugin asks for activation samples for the source type of one of the model's
 * linear weights (weir_quant_ops.calibration_samples > 0, SDK 1.1), core runs the model
 * once in full precision over a calibration text before the real load, on the CPU plugins
 * (device cpu, attention paged with an f32 KV cache, quant fp16 keeping F32 sources in
 * f32), and records through the model's tap (weir_llama_set_tap) the
 * input of every linear layer for each token: one [tokens][dim] f32 array per block and input
 * site, plus the output layer's input. weir_llama_create then hands each site's samples to the
 * plugin's pack_group together with the weights that read that input.
 *
 * The text is quant.calibration_text; when that is not set, heldout.txt next to the model
 * file (the held-out split of the trained demo model's text) when there is one, else the
 * generic text weir ships (share/weir/calibration.txt, installed with weir and found at
 * <dir of the binary>/../share/weir/); the load log says which. It is tokenized whole (BOS per window when
 * the tokenizer has one) and run in windows of min(512, context length) tokens until the
 * plugin's sample count is reached or the text ends.
 *
 * The pass assembles its own runtime (runtime.h) over the caller's GGUF and tokenizer: the
 * calibration plugins, a KV pool of one window, the model without samples; each window is a
 * KV sequence whose slots the cache maps.
 *
 * Memory: tokens x (n_layer x (3 n_embd + n_ff) + n_embd) floats, about 1 MiB per token for
 * the 1.1B shape. Not thread-safe; a weir_calib is read-only once made. */
#ifndef WEIR_RUNTIME_CALIB_H
#define WEIR_RUNTIME_CALIB_H

#include <stddef.h>
#include <stdint.h>

#include "format/gguf.h"
#include "model/llama.h"

struct weir_config;
struct weir_tokenizer;
struct weir_plugin_set;
typedef struct weir_calib weir_calib;

/* Runs the calibration pass when plugins->quant wants samples; otherwise sets *out = NULL
 * and returns WEIR_OK. On failure (no or unreadable text, a text too short, a model the
 * calibration plugins cannot load, memory) writes one line into err and returns a status. */
int weir_calib_prepare(const struct weir_config *cfg, const weir_gguf *g,
                       const struct weir_tokenizer *tok, const struct weir_plugin_set *plugins,
                       weir_calib **out, char *err, size_t errlen);

/* weir_llama_create preceded by weir_calib_prepare: what every command that builds a model
 * from a config calls, so that an activation-aware scheme is calibrated wherever it runs.
 * opts->samples must be NULL (it is set here for the duration of the call). */
int weir_calib_llama_create(const struct weir_config *cfg, const weir_gguf *g,
                            const struct weir_tokenizer *tok,
                            const struct weir_plugin_set *plugins, const weir_llama_opts *opts,
                            weir_kv_pool *kv, int32_t kv_group, weir_llama **out, char *err,
                            size_t errlen);

/* The pass itself: up to max_tokens samples per site from the text file at text_path. */
int weir_calib_run(const struct weir_config *cfg, const weir_gguf *g,
                   const struct weir_tokenizer *tok, const char *text_path, int64_t max_tokens,
                   weir_calib **out, char *err, size_t errlen);

/* The text the pass reads for this config and model: quant.calibration_text, else
 * heldout.txt beside the model when it exists, else the shipped generic text. Writes it into
 * buf; returns buf. */
const char *weir_calib_text_path(const struct weir_config *cfg, char *buf, size_t len);

/* A weir_llama_samples_fn over a weir_calib (user = the weir_calib, which may be NULL). */
const float *weir_calib_samples(void *user, int layer, weir_llama_site site, int64_t *n);
/* Tokens the pass ran, and its wall time in seconds. */
int64_t weir_calib_num_tokens(const weir_calib *c);
double weir_calib_seconds(const weir_calib *c);
void weir_calib_free(weir_calib *c);

#endif
