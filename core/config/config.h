/* The server's configuration: defaults, the TOML file (etc/server.toml documents every key),
 * and command-line overrides.
 *
 * Precedence, lowest first: built-in defaults, the TOML file, the environment (WEIR_API_KEY),
 * command-line flags (--set and the shorthands). The plugin-selecting tables ([device],
 * [attention], [quant], [sampler], [drafter]) hold the core's own keys (the selecting name,
 * `path`, and kv_dtype / threads / num_speculative_tokens) and, besides, the selected
 * plugin's options; those are kept in `table` and validated against the plugin's declared
 * option table when the plugin is loaded (core/plugin/loader.h), not here.
 *
 * Errors are written into a caller's buffer as one line: "FILE:LINE:COLUMN: message" for
 * TOML syntax, "FILE:LINE:COLUMN: key: message" for a bad value when the position is known,
 * e.g. `server.port: 70000 is out of range [1, 65535]`, `unknown key 'server.prot'`.
 *
 * Ownership: a weir_config owns every string and table it points to; weir_config_free
 * releases them. Thread-safety: none; a config nobody mutates may be read from any thread. */
#ifndef WEIR_CONFIG_CONFIG_H
#define WEIR_CONFIG_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <getopt.h>
#include <stdio.h>

#include "util/log.h"
#include "weir/tensor.h"

struct weir_toml_node;

typedef struct weir_plugin_sel {
  char *name;   /* the selecting key's value: `name` in every plugin table (device.name,
                   attention.name, ...; "" = none for drafter) */
  char *path;   /* explicit .so path or NULL */
  struct weir_toml_node *table; /* the TOML table that selected it (for plugin options);
                                   NULL when the file has no such table */
} weir_plugin_sel;

typedef struct weir_config {
  char *source_path;             /* file it came from, or NULL for defaults */
  /* [server] */
  char *host;                    /* "127.0.0.1" */
  int port;                      /* 8000 */
  char *api_key;                 /* NULL = no auth; env WEIR_API_KEY overrides */
  char *served_model_name;       /* NULL = the GGUF file's general.name or file stem */
  char **served_model_aliases;   /* further names of the model (a list in
                                    server.served_model_name, or repeated flags) */
  int num_served_model_aliases;
  int64_t max_body_bytes;        /* 1 MiB */
  int64_t max_header_bytes;      /* 16 KiB */
  int max_connections;           /* 1024 */
  int64_t header_timeout_ms;     /* 10000 */
  int64_t idle_timeout_ms;       /* 60000 (keep-alive idle) */
  int64_t drain_timeout_ms;      /* 30000 */
  int64_t request_timeout_ms;    /* 600000 */
  int32_t max_tokens_limit;      /* 0 = context length: cap on max_tokens */
  int32_t default_max_tokens;    /* 256: when the request gives none (completions: 16 per
                                    OpenAI) -- keep 16 for /v1/completions */
  int64_t max_pending_output_bytes; /* 2 MiB: unsent output per connection before its
                                       generation pauses */
  int64_t stall_timeout_ms;      /* 30000: a connection that drains nothing for this long
                                    while over the limit is closed */
  /* [log] */
  weir_log_level log_level;      /* info */
  weir_log_format log_format;    /* text */
  int log_requests;              /* 1: one JSON line per finished request */
  /* [model] */
  char *model_path;              /* "models/default.gguf" (relative to the cwd) */
  char *chat_template;           /* "auto" or chatml|llama2|llama3|mistral|zephyr|gemma|phi3 */
  int32_t max_model_len;         /* 0 = from the GGUF context_length */
  /* [device]  name = "cpu"; threads = 0 (0 = all cores) */
  weir_plugin_sel device;
  int threads;
  /* [attention]  name = "paged"; kv_dtype = "f16" */
  weir_plugin_sel attention;
  weir_dtype kv_dtype;
  /* [quant]  name = "fp16" */
  weir_plugin_sel quant;
  /* [sampler]  name = "default" */
  weir_plugin_sel sampler;
  /* [drafter]  name = "" (none); num_speculative_tokens = 0 (the drafter's default,
   * weir_drafter_ops.num_tokens_default, else 4); adaptive = true (the engine
   * measures which speculation length pays at each batch size, spec_policy.h) */
  weir_plugin_sel drafter;
  int num_speculative_tokens;
  int spec_adaptive;
  /* [drafter] head_vocab: a draft model's LM head computes head_vocab token ids only (-1,
   * the default: a quarter of the vocabulary, at least 1,024; 0: all; docs/engine.md,
   * *Draft models*) */
  int spec_head_vocab;
  /* [drafter] min_confidence: a draft model stops drafting for a sequence once the product
   * of its drafts' confidences (the draft's top probability at each) falls below this
   * (default 0.2; 0: never, the length is the policy's; docs/engine.md, *Draft models*) */
  double spec_min_confidence;
  /* [cache] */
  int block_size;                /* WEIR_KV_DEFAULT_BLOCK_SIZE (16) */
  int64_t num_blocks;            /* 0 = from memory_bytes */
  int64_t memory_bytes;          /* 512 MiB by default */
  int prefix_caching;            /* 1 */
  /* [scheduler] */
  int max_num_seqs;              /* 64 */
  int max_num_batched_tokens;    /* 2048 */
  int max_waiting;               /* 1024: beyond it submit answers 429 */
  char *policy;                  /* "fcfs" | "priority" */
  int step_graph_max_batch;      /* 256: decode steps of up to this many sequences replay a
                                    recorded step graph where the device records them
                                    (docs/cuda.md); 0 = never */
  /* [plugins] */
  char **plugin_dirs;            /* extra search dirs, then WEIR_PLUGIN_PATH (':'-list),
                                    then <exe dir>/../lib/weir/plugins */
  int num_plugin_dirs;

  /* ---- Appended by the config module ---- */
  /* The whole document (file plus --set overrides); the plugin_sel tables point into it.
   * Never NULL after weir_config_defaults succeeded. */
  struct weir_toml_node *toml;
  /* [quant] calibration_text: the text an activation-aware scheme (awq_int4) calibrates on;
   * NULL = heldout.txt beside the model file (core/runtime/calib.h). */
  char *calibration_text;
  /* [cache] name / path: the response-cache plugin (docs/response-cache.md): "off" (or "")
   * for none, "memory", "redis", or any cache plugin by name; its other keys besides the KV
   * cache's and those below are the plugin's options. */
  weir_plugin_sel response_cache;
  int64_t response_cache_ttl_s;  /* 3600: how long an answer is kept unless a request says */
  int response_cache_nondeterministic; /* 0: only temperature-0 or seeded requests are
                                          stored and served */
  int response_cache_semantic;          /* 0: the semantic layer is off (requests may opt in
                                           with cache.mode "semantic" only when it is on) */
  double response_cache_semantic_max_error; /* 0.01: the wrong-hit rate bound */
  double response_cache_semantic_explore;   /* 0.05: share of would-be hits answered live to
                                               keep checking the decision */
  /* [embedding] (issue 33): where /v1/embeddings and the response cache's semantic layer get
   * their vectors. model: NULL = the served model's pooled hidden states, else the path of a
   * dedicated `bert` / `nomic-bert` GGUF loaded beside it. pooling: "auto" (default: the
   * embedding model's own pooling_type, mean for the served model), "mean", "last" (the last
   * token) or "cls" (the first token). max_inputs: 2048, the most inputs one
   * /v1/embeddings request may carry. */
  char *embedding_model;
  char *embedding_pooling;
  int embedding_max_inputs;
  /* [cache] gpu_memory_utilization (vLLM's --gpu-memory-utilization): 0 = off, the cache is
   * cache.memory_bytes (or num_blocks); F in (0, 1]: the weights and the KV cache together
   * take F x the device's total memory, so the cache gets F x total minus the weights' GGUF
   * bytes (CPU devices: of MemTotal, /proc/meminfo). */
  double gpu_memory_utilization;
  /* [model] allow_long_max_model_len: 0 (default) refuses a max_model_len beyond the
   * context the model was trained on (<arch>.context_length); 1 serves it anyway. */
  int allow_long_max_model_len;
  /* [model] chat_template_file: a Jinja chat template file used instead of the GGUF's
   * (vLLM's --chat-template FILE); NULL = none. */
  char *chat_template_file;
  /* llama.cpp's -ngl N as given: the layers on the GPU; -1 when not given. Not a file key:
   * weir runs every layer on one device, so only 0 or all layers can be honoured. */
  int32_t n_gpu_layers;
} weir_config;

/* Fills c with the built-in defaults (the values in the comments above). Never fails for
 * lack of memory in a way the caller must handle: on allocation failure the strings are
 * NULL and weir_config_load / _set report WEIR_E_NOMEM later. c must not hold a config
 * (call weir_config_free first). */
void weir_config_defaults(weir_config *c);

/* Reads a TOML file over c, which holds a configuration (weir_config_defaults or an
 * earlier load; a zeroed struct is given the defaults first): keys the file sets replace
 * c's values. On failure returns WEIR_E_IO,
 * WEIR_E_FORMAT (syntax), WEIR_E_INVAL / WEIR_E_RANGE / WEIR_E_NOTFOUND (a bad key or
 * value) or WEIR_E_NOMEM, writes one line into err, and leaves c unchanged. */
int weir_config_load(const char *path, weir_config *c, char *err, size_t errlen);

/* As weir_config_load, from len bytes of TOML text; `source` names it in messages (NULL:
 * "<string>") and source_path is left as it was. Text holding a NUL byte is WEIR_E_FORMAT. */
int weir_config_load_string(const char *text, size_t len, const char *source, weir_config *c,
                            char *err, size_t errlen);

/* Sets one key from the command line: "server.port=9000", "attention.kv_dtype=f32",
 * "attention.query_tile=8" (a plugin option, checked when the plugin loads),
 * "plugins.dirs=[\"a\", \"b\"]". The value is read as a TOML value when it is one
 * (9000, true, 1.5, "quoted", [..]) and as a plain string otherwise (model.path=m.gguf).
 * Same errors as weir_config_load; c is unchanged on failure. */
int weir_config_set(weir_config *c, const char *dotted_key, const char *value, char *err,
                    size_t errlen);

/* Releases everything c owns and zeroes it. Accepts a zeroed config. */
void weir_config_free(weir_config *c);

/* ---- Command-line flags ------------------------------------------------------------------
 * The configuration flags every command that loads a configuration takes (serve, generate,
 * config check, plugins), named as vLLM and llama-server name them:
 *
 *   --config FILE           load FILE first (whatever its position among the flags)
 *   --set KEY=VALUE         any key, as weir_config_set; repeatable, applied in order
 *   -m, --model PATH        model.path (`weir serve` also takes it as its positional argument)
 *   --served-model-name N   server.served_model_name; repeatable: the first is the name
 *                           reported, the others aliases
 *   --max-model-len N       model.max_model_len; alias -c, --ctx-size
 *   --api-key K             server.api_key (also env WEIR_API_KEY)
 *   --host H  --port N  --device NAME  --threads N  --attention NAME  --quant NAME
 *   --sampler NAME  --kv-dtype T  --log-level L  --log-format text|json
 *   --max-num-seqs N  --max-num-batched-tokens N  --block-size N
 *   --plugin-dir DIR        appended to plugins.dirs (repeatable)
 * and, for operators coming from vLLM and llama-server (docs/deployment.md, "Migrating"):
 *   --quantization NAME (a weir quant name; vLLM's method names refused with the weir one),
 *   --gpu-memory-utilization F, --enable-prefix-caching, --no-enable-prefix-caching,
 *   --chat-template NAME|FILE, --chat-template-file FILE, --jinja (always on),
 *   --allow-long-max-model-len, --kv-cache-dtype T, --alias NAME, -t N (--threads),
 *   -np N / --parallel N (--max-num-seqs), -ngl N / --n-gpu-layers N (0: cpu, all: cuda),
 *   and a few flags refused with what weir does instead (--tensor-parallel-size, --dtype,
 *   --swap-space, -hf).
 *
 * A command puts weir_config_options (and WEIR_CONFIG_SHORTOPTS) into its own weir_opt
 * parser (util/opt.h), hands every option it does not know to weir_config_args_take, and
 * after the loop calls weir_config_args_apply. Order of application: the file, then
 * WEIR_API_KEY from the environment, then the flags in the order given. */

/* Option values are WEIR_CONFIG_FLAG_BASE + k; 'm' and 'c' are the short forms. */
#define WEIR_CONFIG_FLAG_BASE 0x7100
#define WEIR_CONFIG_FLAG_SERVED_NAME (WEIR_CONFIG_FLAG_BASE + 3)
#define WEIR_CONFIG_FLAG_MODEL (WEIR_CONFIG_FLAG_BASE + 6)
#define WEIR_CONFIG_SHORTOPTS "m:c:t:"
extern const struct option weir_config_options[]; /* ends with a zeroed entry */

typedef struct weir_config_arg {
  int id;
  const char *value; /* borrowed from argv */
} weir_config_arg;

/* The configuration flags of one command line, in order. Zero-initialise. */
typedef struct weir_config_args {
  weir_config_arg *items;
  int num, cap;
} weir_config_args;

/* Records `val` (a weir_opt result) with its value when it is a configuration flag (also 'm',
 * 'c' for --ctx-size and 't' for --threads). Returns 1 when taken, 0 when `val` is not a configuration flag,
 * WEIR_E_NOMEM. `value` is borrowed until weir_config_args_apply. */
int weir_config_args_take(weir_config_args *a, int val, const char *value);
/* Applies the recorded flags to c (which holds defaults): the --config file, WEIR_API_KEY,
 * then the flags in order. Returns 0, or a negative status with a one-line message in err
 * naming the flag (a bad file, key or value). */
int weir_config_args_apply(const weir_config_args *a, weir_config *c, char *err,
                           size_t errlen);
void weir_config_args_free(weir_config_args *a);

/* For callers that parse their own options afterwards: applies the configuration flags found
 * in argv (exact names only) to c and removes them, leaving argv[0] and every other argument
 * in order; *argc is updated and argv[*argc] set to NULL. New commands use
 * weir_config_options in their own weir_opt loop instead, which also refuses abbreviations. */
int weir_config_from_args(int *argc, char **argv, weir_config *cfg, char *err, size_t errlen);

/* Writes the effective configuration as TOML, every core key with its value (server.api_key
 * is written as "<redacted>" when set, never in clear); the plugin
 * tables also carry the options the file or the flags set (the loader adds the defaults,
 * see weir_plugin_write_options). */
void weir_config_write(const weir_config *c, FILE *f);
/* As weir_config_write, but a plugin table's options are written by `options` (called once
 * per plugin-selecting section after its core keys) instead of from the table. */
void weir_config_write_ex(const weir_config *c, FILE *f,
                          void (*options)(void *arg, const char *section, FILE *f), void *arg);

/* Applies [log] level and format to the process logger (weir_log_configure, stderr). */
void weir_config_apply_log(const weir_config *c);

/* 1 when `key` is one of the core's own keys of the plugin-selecting table `section`
 * ("device", "attention", ...): its selecting `name`, `path` and the like, or a renamed key
 * still read (attention.backend, quant.scheme); every other key in that table is an option
 * of the plugin. 0 for any key of another section. */
int weir_config_is_core_key(const char *section, const char *key);

/* Parses a KV dtype name (f32, f16, bf16, int8, fp8); WEIR_E_INVAL for another. */
int weir_config_parse_kv_dtype(const char *s, weir_dtype *out);
/* The ABI 1.0 device bit of a device name: WEIR_DEVICE_CPU for "cpu", WEIR_DEVICE_CUDA for
 * "cuda", 0 for any other device (known by name only, since ABI 1.5). */
unsigned weir_config_device_kind(const char *name);

#endif
