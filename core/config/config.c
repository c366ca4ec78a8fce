/* The configuration: one table of every core key drives parsing, validation, --set and
 * printing, so a key added here is documented, checked and printed the same way. */
#include "config/config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/toml.h"
#include "weir/kv.h"
#include "weir/status.h"

typedef enum key_type {
  K_STR,      /* char *, never NULL */
  K_OPT_STR,  /* char *, "" means NULL (unset) */
  K_INT,      /* int */
  K_I32,      /* int32_t */
  K_I64,      /* int64_t */
  K_BYTES,    /* int64_t; an integer or a string with a unit: "512MiB" */
  K_BOOL,     /* int 0/1 */
  K_LEVEL,    /* weir_log_level */
  K_FORMAT,   /* weir_log_format */
  K_KV_DTYPE, /* weir_dtype */
  K_DIRS,     /* plugin_dirs */
  K_SEL_NAME, /* weir_plugin_sel.name */
  K_SEL_PATH, /* weir_plugin_sel.path; "" means NULL */
  K_NAMES,    /* served_model_name + served_model_aliases: a string or an array of them */
  K_PROB,     /* double in [0, 1]: a probability (an integer 0 or 1 is taken too) */
} key_type;

typedef struct key_spec {
  const char *section;
  const char *key;
  key_type type;
  size_t off;
  int64_t min, max;            /* numeric range, inclusive */
  const char *const *choices;  /* NULL-terminated, for strings */
  int allow_empty;             /* K_SEL_NAME: "" means none (drafter) */
} key_spec;

static const char *const k_templates[] = {"auto", "chatml", "llama2", "llama3", "mistral",
                                          "zephyr", "gemma", "phi3", NULL};
static const char *const k_policies[] = {"fcfs", "priority", NULL};
static const char *const k_poolings[] = {"auto", "mean", "last", "cls", NULL};
static const char *const k_levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const k_formats[] = {"text", "json", NULL};
static const char *const k_kv_dtypes[] = {"f32", "f16", "bf16", "int8", "fp8", NULL};

#define OFF(f) offsetof(weir_config, f)
#define KIB ((int64_t)1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)
#define TIB (GIB * 1024)
#define DAY_MS ((int64_t)86400000)

static const key_spec k_keys[] = {
    {"server", "host", K_STR, OFF(host)},
    {"server", "port", K_INT, OFF(port), 1, 65535},
    {"server", "api_key", K_OPT_STR, OFF(api_key)},
    {"server", "served_model_name", K_NAMES, OFF(served_model_name)},
    {"server", "max_body_bytes", K_BYTES, OFF(max_body_bytes), 1024, GIB},
    {"server", "max_header_bytes", K_BYTES, OFF(max_header_bytes), 1024, 16 * MIB},
    {"server", "max_connections", K_INT, OFF(max_connections), 1, 1 << 20},
    {"server", "header_timeout_ms", K_I64, OFF(header_timeout_ms), 1, DAY_MS},
    {"server", "idle_timeout_ms", K_I64, OFF(idle_timeout_ms), 1, DAY_MS},
    {"server", "drain_timeout_ms", K_I64, OFF(drain_timeout_ms), 0, DAY_MS},
    {"server", "request_timeout_ms", K_I64, OFF(request_timeout_ms), 1, 7 * DAY_MS},
    {"server", "max_tokens_limit", K_I32, OFF(max_tokens_limit), 0, 1 << 24},
    {"server", "default_max_tokens", K_I32, OFF(default_max_tokens), 1, 1 << 24},
    {"server", "max_pending_output_bytes", K_BYTES, OFF(max_pending_output_bytes), 4 * KIB, GIB},
    {"server", "stall_timeout_ms", K_I64, OFF(stall_timeout_ms), 1, DAY_MS},
    {"log", "level", K_LEVEL, OFF(log_level), 0, 0, k_levels},
    {"log", "format", K_FORMAT, OFF(log_format), 0, 0, k_formats},
    {"log", "requests", K_BOOL, OFF(log_requests)},
    {"model", "path", K_STR, OFF(model_path)},
    {"model", "chat_template", K_STR, OFF(chat_template), 0, 0, k_templates},
    {"model", "max_model_len", K_I32, OFF(max_model_len), 0, 1 << 24},
    {"model", "allow_long_max_model_len", K_BOOL, OFF(allow_long_max_model_len)},
    {"model", "chat_template_file", K_OPT_STR, OFF(chat_template_file)},
    /* Any plugin name: the loader checks that a device plugin of that name exists (and lists
     * the ones it finds when none does), so a new device needs no edit here. */
    {"device", "name", K_SEL_NAME, OFF(device)},
    {"device", "path", K_SEL_PATH, OFF(device)},
    {"device", "threads", K_INT, OFF(threads), 0, 4096},
    {"attention", "name", K_SEL_NAME, OFF(attention)},
    {"attention", "path", K_SEL_PATH, OFF(attention)},
    {"attention", "kv_dtype", K_KV_DTYPE, OFF(kv_dtype), 0, 0, k_kv_dtypes},
    {"quant", "name", K_SEL_NAME, OFF(quant)},
    {"quant", "path", K_SEL_PATH, OFF(quant)},
    {"quant", "calibration_text", K_OPT_STR, OFF(calibration_text)},
    {"sampler", "name", K_SEL_NAME, OFF(sampler)},
    {"sampler", "path", K_SEL_PATH, OFF(sampler)},
    {"drafter", "name", K_SEL_NAME, OFF(drafter), 0, 0, NULL, 1},
    {"drafter", "path", K_SEL_PATH, OFF(drafter)},
    {"drafter", "num_speculative_tokens", K_INT, OFF(num_speculative_tokens), 0, 64},
    {"drafter", "adaptive", K_BOOL, OFF(spec_adaptive)},
    {"drafter", "head_vocab", K_INT, OFF(spec_head_vocab), -1, 1 << 24},
    {"drafter", "min_confidence", K_PROB, OFF(spec_min_confidence)},
    {"cache", "block_size", K_INT, OFF(block_size), 1, 1024},
    {"cache", "num_blocks", K_I64, OFF(num_blocks), 0, (int64_t)1 << 32},
    {"cache", "memory_bytes", K_BYTES, OFF(memory_bytes), MIB, 64 * TIB},
    {"cache", "prefix_caching", K_BOOL, OFF(prefix_caching)},
    {"cache", "gpu_memory_utilization", K_PROB, OFF(gpu_memory_utilization)},
    {"cache", "name", K_SEL_NAME, OFF(response_cache), 0, 0, NULL, 1},
    {"cache", "path", K_SEL_PATH, OFF(response_cache)},
    {"cache", "ttl_s", K_I64, OFF(response_cache_ttl_s), 1, 366 * 86400},
    {"cache", "nondeterministic", K_BOOL, OFF(response_cache_nondeterministic)},
    {"cache", "semantic", K_BOOL, OFF(response_cache_semantic)},
    {"cache", "semantic_max_error", K_PROB, OFF(response_cache_semantic_max_error)},
    {"cache", "semantic_explore", K_PROB, OFF(response_cache_semantic_explore)},
    {"scheduler", "max_num_seqs", K_INT, OFF(max_num_seqs), 1, 1 << 16},
    {"scheduler", "max_num_batched_tokens", K_INT, OFF(max_num_batched_tokens), 1, 1 << 24},
    {"scheduler", "max_waiting", K_INT, OFF(max_waiting), 0, 1 << 24},
    {"scheduler", "policy", K_STR, OFF(policy), 0, 0, k_policies},
    {"scheduler", "step_graph_max_batch", K_INT, OFF(step_graph_max_batch), 0, 1 << 16},
    {"plugins", "dirs", K_DIRS, OFF(plugin_dirs)},
    {"embedding", "model", K_OPT_STR, OFF(embedding_model)},
    {"embedding", "pooling", K_STR, OFF(embedding_pooling), 0, 0, k_poolings},
    {"embedding", "max_inputs", K_INT, OFF(embedding_max_inputs), 1, 1 << 20},
};
#define NUM_KEYS (sizeof k_keys / sizeof k_keys[0])

static const char *const k_sections[] = {"server", "log", "model", "device", "attention",
                                         "quant", "sampler", "drafter", "cache", "scheduler",
                                         "plugins", "embedding", NULL};

/* Keys that were renamed: still read, with a warning (once per process and key) naming the
 * new key. The selecting key is `name` in every plugin table since the plugin selectors were
 * unified; `backend` and `scheme` were their names before. */
static const struct {
  const char *section, *old_key, *new_key;
} k_renamed[] = {
    {"attention", "backend", "name"},
    {"quant", "scheme", "name"},
};
#define NUM_RENAMED (sizeof k_renamed / sizeof k_renamed[0])
static int g_renamed_warned[NUM_RENAMED];

/* The new name of a renamed key, or NULL; *idx (may be NULL) its index in k_renamed. */
static const char *renamed_to(const char *section, const char *key, size_t *idx) {
  for (size_t i = 0; i < NUM_RENAMED; i++)
    if (!strcmp(k_renamed[i].section, section) && !strcmp(k_renamed[i].old_key, key)) {
      if (idx) *idx = i;
      return k_renamed[i].new_key;
    }
  return NULL;
}

static const key_spec *find_key(const char *section, const char *key);

/* A plugin-selecting table is one whose section has a selecting key (K_SEL_NAME). */
static int is_plugin_section(const char *section) {
  const key_spec *k = section ? find_key(section, "name") : NULL;
  return k && k->type == K_SEL_NAME;
}

int weir_config_is_core_key(const char *section, const char *key) {
  if (!section || !key || !is_plugin_section(section)) return 0;
  return find_key(section, key) != NULL || renamed_to(section, key, NULL) != NULL;
}

int weir_config_parse_kv_dtype(const char *s, weir_dtype *out) {
  static const weir_dtype v[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16, WEIR_DTYPE_I8,
                                 WEIR_DTYPE_FP8_E4M3};
  for (int i = 0; k_kv_dtypes[i]; i++)
    if (s && !strcmp(s, k_kv_dtypes[i])) {
      *out = v[i];
      return WEIR_OK;
    }
  return WEIR_E_INVAL;
}

static const char *kv_dtype_name(weir_dtype t) {
  return t == WEIR_DTYPE_I8 ? "int8" : weir_dtype_name(t);
}

unsigned weir_config_device_kind(const char *name) {
  /* The two devices of ABI 1.0's bit mask; any other device is known by name only. */
  if (!name) return 0;
  if (!strcmp(name, "cpu")) return WEIR_DEVICE_CPU;
  if (!strcmp(name, "cuda")) return WEIR_DEVICE_CUDA;
  return 0;
}

/* ---- defaults and lifetime -------------------------------------------------------------- */

/* String lists (plugins.dirs, the served-name aliases): freed and copied whole. */
static void free_list(char ***v, int *n) {
  for (int i = 0; i < *n; i++) free((*v)[i]);
  free(*v);
  *v = NULL;
  *n = 0;
}

/* Copies n strings into *dst (counted in *ndst as they are made); 1 on allocation failure,
 * with what was made still counted so that it is freed with the rest. */
static int clone_list(char ***dst, int *ndst, char *const *src, int n) {
  *dst = NULL;
  *ndst = 0;
  if (!n) return 0;
  if (!(*dst = calloc((size_t)n, sizeof(char *)))) return 1;
  for (int i = 0; i < n; i++) {
    if (!((*dst)[i] = strdup(src[i]))) return 1;
    *ndst = i + 1;
  }
  return 0;
}

static void free_aliases(weir_config *c) {
  free_list(&c->served_model_aliases, &c->num_served_model_aliases);
}

static void free_dirs(weir_config *c) { free_list(&c->plugin_dirs, &c->num_plugin_dirs); }

void weir_config_free(weir_config *c) {
  if (!c) return;
  free(c->source_path);
  free(c->host);
  free(c->api_key);
  free(c->served_model_name);
  free(c->calibration_text);
  free_aliases(c);
  free(c->model_path);
  free(c->chat_template);
  free(c->chat_template_file);
  free(c->policy);
  free(c->embedding_model);
  free(c->embedding_pooling);
  weir_plugin_sel *sels[] = {&c->device, &c->attention, &c->quant, &c->sampler, &c->drafter,
                             &c->response_cache};
  for (size_t i = 0; i < sizeof sels / sizeof sels[0]; i++) {
    free(sels[i]->name);
    free(sels[i]->path);
  }
  free_dirs(c);
  weir_toml_free(c->toml);
  memset(c, 0, sizeof *c);
}

void weir_config_defaults(weir_config *c) {
  memset(c, 0, sizeof *c);
  c->host = strdup("127.0.0.1");
  c->port = 8000;
  c->max_body_bytes = 1 * MIB;
  c->max_header_bytes = 16 * KIB;
  c->max_connections = 1024;
  c->header_timeout_ms = 10000;
  c->idle_timeout_ms = 60000;
  c->drain_timeout_ms = 30000;
  c->request_timeout_ms = 600000;
  c->max_tokens_limit = 0;
  c->default_max_tokens = 256;
  c->max_pending_output_bytes = 2 * MIB;
  c->stall_timeout_ms = 30000;
  c->log_level = WEIR_LOG_INFO;
  c->log_format = WEIR_LOG_TEXT;
  c->log_requests = 1;
  c->model_path = strdup("models/default.gguf");
  c->chat_template = strdup("auto");
  c->max_model_len = 0;
  c->device.name = strdup("cpu");
  c->threads = 0;
  c->attention.name = strdup("paged");
  c->kv_dtype = WEIR_DTYPE_F16;
  c->quant.name = strdup("auto"); /* gguf for block-quantized models, else fp16 */
  c->sampler.name = strdup("default");
  c->drafter.name = strdup("");
  c->num_speculative_tokens = 0; /* the drafter's default (weir_drafter_ops), else 4 */
  c->spec_adaptive = 1;
  c->spec_head_vocab = -1;
  c->spec_min_confidence = 0.2;
  c->block_size = WEIR_KV_DEFAULT_BLOCK_SIZE;
  c->num_blocks = 0;
  c->memory_bytes = 512 * MIB;
  c->prefix_caching = 1;
  c->response_cache.name = strdup("off");
  c->response_cache_ttl_s = 3600;
  c->response_cache_semantic_max_error = 0.01;
  c->response_cache_semantic_explore = 0.05;
  c->max_num_seqs = 64;
  c->max_num_batched_tokens = 2048;
  c->max_waiting = 1024;
  c->policy = strdup("fcfs");
  c->step_graph_max_batch = 256;
  c->embedding_pooling = strdup("auto");
  c->embedding_max_inputs = 2048;
  c->n_gpu_layers = -1;
  c->toml = weir_toml_new_table();
}

/* Every string the defaults allocate; NULL means an allocation failed. */
static int config_complete(const weir_config *c) {
  return c->host && c->model_path && c->chat_template && c->device.name &&
         c->attention.name && c->quant.name && c->sampler.name && c->drafter.name &&
         c->response_cache.name && c->policy && c->embedding_pooling && c->toml;
}

/* Points each plugin selection at its table in c->toml (or NULL). */
static void resolve_tables(weir_config *c) {
  c->device.table = weir_toml_get(c->toml, "device");
  c->attention.table = weir_toml_get(c->toml, "attention");
  c->quant.table = weir_toml_get(c->toml, "quant");
  c->sampler.table = weir_toml_get(c->toml, "sampler");
  c->drafter.table = weir_toml_get(c->toml, "drafter");
  c->response_cache.table = weir_toml_get(c->toml, "cache");
}

static int dup_opt(char **dst, const char *src) {
  *dst = NULL;
  if (!src) return 0;
  *dst = strdup(src);
  return *dst ? 0 : -1;
}

/* A deep copy, so that a failed load or --set leaves the original untouched. */
static int config_clone(const weir_config *src, weir_config *dst) {
  *dst = *src;
  int bad = 0;
  bad |= dup_opt(&dst->source_path, src->source_path);
  bad |= dup_opt(&dst->host, src->host);
  bad |= dup_opt(&dst->api_key, src->api_key);
  bad |= dup_opt(&dst->served_model_name, src->served_model_name);
  bad |= dup_opt(&dst->calibration_text, src->calibration_text);
  bad |= dup_opt(&dst->model_path, src->model_path);
  bad |= dup_opt(&dst->chat_template, src->chat_template);
  bad |= dup_opt(&dst->chat_template_file, src->chat_template_file);
  bad |= dup_opt(&dst->policy, src->policy);
  bad |= dup_opt(&dst->embedding_model, src->embedding_model);
  bad |= dup_opt(&dst->embedding_pooling, src->embedding_pooling);
  const weir_plugin_sel *ss[] = {&src->device, &src->attention, &src->quant, &src->sampler,
                                 &src->drafter, &src->response_cache};
  weir_plugin_sel *ds[] = {&dst->device, &dst->attention, &dst->quant, &dst->sampler,
                           &dst->drafter, &dst->response_cache};
  for (int i = 0; i < 6; i++) {
    bad |= dup_opt(&ds[i]->name, ss[i]->name);
    bad |= dup_opt(&ds[i]->path, ss[i]->path);
  }
  bad |= clone_list(&dst->served_model_aliases, &dst->num_served_model_aliases,
                    src->served_model_aliases, src->num_served_model_aliases);
  bad |= clone_list(&dst->plugin_dirs, &dst->num_plugin_dirs, src->plugin_dirs,
                    src->num_plugin_dirs);
  dst->toml = src->toml ? weir_toml_clone(src->toml) : weir_toml_new_table();
  if (!dst->toml) bad = 1;
  resolve_tables(dst);
  if (bad) {
    weir_config_free(dst);
    return WEIR_E_NOMEM;
  }
  return WEIR_OK;
}

/* ---- applying values ---------------------------------------------------------------------- */

/* Where: "FILE:LINE:COL: " when the node has a position and the source is a file. */
static void errf(char *err, size_t errlen, const char *src, const weir_toml_node *n,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void errf(char *err, size_t errlen, const char *src, const weir_toml_node *n,
                 const char *fmt, ...) {
  if (!err || !errlen) return;
  size_t off = 0;
  if (src && n && n->line > 0)
    off = (size_t)snprintf(err, errlen, "%s:%d:%d: ", src, n->line, n->column);
  else if (src)
    off = (size_t)snprintf(err, errlen, "%s: ", src);
  if (off >= errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err + off, errlen - off, fmt, ap);
  va_end(ap);
}

static void join_choices(char *buf, size_t len, const char *const *choices) {
  size_t off = 0;
  buf[0] = 0;
  for (int i = 0; choices[i] && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", choices[i]);
}

static int in_choices(const char *s, const char *const *choices) {
  for (int i = 0; choices[i]; i++)
    if (!strcmp(s, choices[i])) return 1;
  return 0;
}

static int valid_name(const char *s) {
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return 0;
  return 1;
}

/* "512MiB", "16 KiB", "1GB", "4096" -> bytes. */
static int parse_bytes(const char *s, int64_t *out) {
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (end == s || errno || v < 0) return -1;
  while (*end == ' ') end++;
  static const struct {
    const char *unit;
    double mul;
  } units[] = {{"", 1},         {"B", 1},           {"KiB", 1024.0},      {"MiB", 1048576.0},
               {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
               {"GB", 1e9},     {"TB", 1e12}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (!strcmp(end, units[i].unit)) {
      double b = v * units[i].mul;
      if (b > 9.0e18) return -1;
      *out = (int64_t)b;
      return 0;
    }
  }
  return -1;
}

static const key_spec *find_key(const char *section, const char *key) {
  for (size_t i = 0; i < NUM_KEYS; i++)
    if (!strcmp(k_keys[i].section, section) && !strcmp(k_keys[i].key, key)) return &k_keys[i];
  return NULL;
}

static void section_keys(char *buf, size_t len, const char *section) {
  size_t off = 0;
  buf[0] = 0;
  for (size_t i = 0; i < NUM_KEYS && off < len; i++)
    if (!strcmp(k_keys[i].section, section))
      off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", k_keys[i].key);
}

static int set_string(char **dst, const char *s, int empty_is_null) {
  char *v = NULL;
  if (!(empty_is_null && !*s)) {
    v = strdup(s);
    if (!v) return WEIR_E_NOMEM;
  }
  free(*dst);
  *dst = v;
  return WEIR_OK;
}

/* Applies one value to c; validates type and range. src names the origin for messages. */
static int apply_key(weir_config *c, const key_spec *k, const weir_toml_node *v,
                     const char *src, char *err, size_t errlen) {
  char *base = (char *)c;
  char allowed[256];
  const char *sec = k->section, *key = k->key;
  int want_string = k->type == K_STR || k->type == K_OPT_STR || k->type == K_LEVEL ||
                    k->type == K_FORMAT || k->type == K_KV_DTYPE || k->type == K_SEL_NAME ||
                    k->type == K_SEL_PATH;
  if (want_string && v->type != WEIR_TOML_STRING) {
    errf(err, errlen, src, v, "%s.%s: expected a string, found %s", sec, key,
         weir_toml_type_name(v->type));
    return WEIR_E_INVAL;
  }
  if (want_string && k->choices && !in_choices(v->s, k->choices)) {
    join_choices(allowed, sizeof allowed, k->choices);
    errf(err, errlen, src, v, "%s.%s: \"%s\" is not one of %s", sec, key, v->s, allowed);
    return WEIR_E_INVAL;
  }
  switch (k->type) {
  case K_STR:
    if (!*v->s) {
      errf(err, errlen, src, v, "%s.%s: must not be empty", sec, key);
      return WEIR_E_INVAL;
    }
    return set_string((char **)(base + k->off), v->s, 0);
  case K_OPT_STR:
    return set_string((char **)(base + k->off), v->s, 1);
  case K_SEL_NAME: {
    weir_plugin_sel *sel = (weir_plugin_sel *)(base + k->off);
    if ((!*v->s && !k->allow_empty) || !valid_name(v->s)) {
      errf(err, errlen, src, v,
           "%s.%s: \"%s\" is not a plugin name (lower-case letters, digits and '_'%s)", sec,
           key, v->s, k->allow_empty ? ", or \"\" for none" : "");
      return WEIR_E_INVAL;
    }
    return set_string(&sel->name, v->s, 0);
  }
  case K_SEL_PATH: {
    weir_plugin_sel *sel = (weir_plugin_sel *)(base + k->off);
    return set_string(&sel->path, v->s, 1);
  }
  case K_LEVEL: {
    weir_log_level l;
    if (weir_log_level_parse(v->s, &l) != 0) return WEIR_E_INVAL; /* choices checked above */
    c->log_level = l;
    return WEIR_OK;
  }
  case K_FORMAT:
    c->log_format = !strcmp(v->s, "json") ? WEIR_LOG_JSON : WEIR_LOG_TEXT;
    return WEIR_OK;
  case K_KV_DTYPE:
    return weir_config_parse_kv_dtype(v->s, &c->kv_dtype);
  case K_BOOL:
    if (v->type != WEIR_TOML_BOOL) {
      errf(err, errlen, src, v, "%s.%s: expected true or false, found %s", sec, key,
           weir_toml_type_name(v->type));
      return WEIR_E_INVAL;
    }
    *(int *)(base + k->off) = v->b;
    return WEIR_OK;
  case K_INT:
  case K_I32:
  case K_I64:
  case K_BYTES: {
    int64_t x;
    if (v->type == WEIR_TOML_INT) {
      x = v->i;
    } else if (k->type == K_BYTES && v->type == WEIR_TOML_STRING) {
      if (parse_bytes(v->s, &x) != 0) {
        errf(err, errlen, src, v,
             "%s.%s: \"%s\" is not a size (an integer number of bytes, or a number with "
             "B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)",
             sec, key, v->s);
        return WEIR_E_INVAL;
      }
    } else {
      errf(err, errlen, src, v, "%s.%s: expected an integer%s, found %s", sec, key,
           k->type == K_BYTES ? " or a size string like \"512MiB\"" : "",
           weir_toml_type_name(v->type));
      return WEIR_E_INVAL;
    }
    if (x < k->min || x > k->max) {
      errf(err, errlen, src, v, "%s.%s: %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]",
           sec, key, x, k->min, k->max);
      return WEIR_E_RANGE;
    }
    if (k->type == K_INT) *(int *)(base + k->off) = (int)x;
    else if (k->type == K_I32) *(int32_t *)(base + k->off) = (int32_t)x;
    else *(int64_t *)(base + k->off) = x;
    return WEIR_OK;
  }
  case K_PROB: {
    double x;
    if (v->type == WEIR_TOML_FLOAT) x = v->f;
    else if (v->type == WEIR_TOML_INT) x = (double)v->i;
    else {
      errf(err, errlen, src, v, "%s.%s: expected a number in [0, 1], found %s", sec, key,
           weir_toml_type_name(v->type));
      return WEIR_E_INVAL;
    }
    if (!(x >= 0 && x <= 1)) {
      errf(err, errlen, src, v, "%s.%s: %g is out of range [0, 1]", sec, key, x);
      return WEIR_E_RANGE;
    }
    *(double *)(base + k->off) = x;
    return WEIR_OK;
  }
  case K_NAMES: {
    /* One name, or a list: the first is the name the server reports, the others are aliases
     * the API also accepts. "" (or []) leaves it to the model file. */
    if (v->type == WEIR_TOML_STRING) {
      free_aliases(c);
      return set_string(&c->served_model_name, v->s, 1);
    }
    if (v->type != WEIR_TOML_ARRAY) {
      errf(err, errlen, src, v, "%s.%s: expected a string or an array of strings, found %s",
           sec, key, weir_toml_type_name(v->type));
      return WEIR_E_INVAL;
    }
    for (int i = 0; i < v->num_items; i++)
      if (v->items[i]->type != WEIR_TOML_STRING || !*v->items[i]->s) {
        errf(err, errlen, src, v->items[i], "%s.%s[%d]: expected a non-empty name, found %s",
             sec, key, i, v->items[i]->type == WEIR_TOML_STRING
                              ? "\"\"" : weir_toml_type_name(v->items[i]->type));
        return WEIR_E_INVAL;
      }
    char *first = NULL, **rest = NULL;
    int nrest = v->num_items > 1 ? v->num_items - 1 : 0;
    if (v->num_items > 0 && !(first = strdup(v->items[0]->s))) return WEIR_E_NOMEM;
    if (nrest && !(rest = calloc((size_t)nrest, sizeof *rest))) {
      free(first);
      return WEIR_E_NOMEM;
    }
    for (int i = 0; i < nrest; i++)
      if (!(rest[i] = strdup(v->items[i + 1]->s))) {
        for (int j = 0; j < i; j++) free(rest[j]);
        free(rest);
        free(first);
        return WEIR_E_NOMEM;
      }
    free_aliases(c);
    free(c->served_model_name);
    c->served_model_name = first;
    c->served_model_aliases = rest;
    c->num_served_model_aliases = nrest;
    return WEIR_OK;
  }
  case K_DIRS: {
    if (v->type != WEIR_TOML_ARRAY) {
      errf(err, errlen, src, v, "%s.%s: expected an array of strings, found %s", sec, key,
           weir_toml_type_name(v->type));
      return WEIR_E_INVAL;
    }
    for (int i = 0; i < v->num_items; i++) {
      if (v->items[i]->type != WEIR_TOML_STRING || !*v->items[i]->s) {
        errf(err, errlen, src, v->items[i], "%s.%s[%d]: expected a directory name, found %s",
             sec, key, i, weir_toml_type_name(v->items[i]->type));
        return WEIR_E_INVAL;
      }
    }
    size_t nd = v->num_items > 0 ? (size_t)v->num_items : 0;
    char **dirs = nd ? calloc(nd, sizeof *dirs) : NULL;
    if (nd && !dirs) return WEIR_E_NOMEM;
    for (int i = 0; i < v->num_items; i++) {
      if (!(dirs[i] = strdup(v->items[i]->s))) {
        for (int j = 0; j < i; j++) free(dirs[j]);
        free(dirs);
        return WEIR_E_NOMEM;
      }
    }
    free_dirs(c);
    c->plugin_dirs = dirs;
    c->num_plugin_dirs = v->num_items;
    return WEIR_OK;
  }
  }
  return WEIR_E_INTERNAL;
}

/* The attention plugins were cpu_paged and cuda_paged before they became one plugin, paged,
 * with a CUDA twin the loader picks for device.name = "cuda": the old names still select it,
 * with a warning (once per process). */
static int g_attention_renamed_warned;
static int rename_attention(weir_config *c, const char *src) {
  const char *n = c->attention.name;
  if (!n || (strcmp(n, "cpu_paged") && strcmp(n, "cuda_paged"))) return WEIR_OK;
  if (!g_attention_renamed_warned) {
    g_attention_renamed_warned = 1;
    weir_log(WEIR_LOG_WARN, "config", "%s%sattention.name = \"%s\" is deprecated: write \"paged\" "
             "(one plugin on every device: the loader takes its CUDA twin for device.name = "
             "\"cuda\")", src ? src : "", src ? ": " : "", n);
  }
  char *p = strdup("paged");
  if (!p) return WEIR_E_NOMEM;
  free(c->attention.name);
  c->attention.name = p;
  return WEIR_OK;
}

/* Applies one entry of a section. Plugin options are accepted here and checked by the
 * loader against the plugin's option table. */
static int apply_entry(weir_config *c, const char *section, const weir_toml_node *v,
                       const char *src, char *err, size_t errlen) {
  const key_spec *k = find_key(section, v->key);
  size_t ri;
  const char *now = k ? NULL : renamed_to(section, v->key, &ri);
  if (now) {
    if (!g_renamed_warned[ri]) {
      g_renamed_warned[ri] = 1;
      weir_log(WEIR_LOG_WARN, "config", "%s%s%s.%s is deprecated: write %s.%s (it means the "
               "same; the old key still works for now)", src ? src : "", src ? ": " : "",
               section, v->key, section, now);
    }
    k = find_key(section, now);
  }
  key_spec as_written; /* messages name the key as the user wrote it */
  if (k && now) {
    as_written = *k;
    as_written.key = v->key;
    k = &as_written;
  }
  if (k) {
    int rc = apply_key(c, k, v, src, err, errlen);
    if (rc == WEIR_E_NOMEM) errf(err, errlen, src, v, "out of memory");
    if (rc == WEIR_OK && !strcmp(section, "attention") && !strcmp(now ? now : k->key, "name"))
      rc = rename_attention(c, src);
    return rc;
  }
  if (is_plugin_section(section)) {
    if (!valid_name(v->key) || !*v->key) {
      errf(err, errlen, src, v, "%s.%s: not a valid option name (lower-case letters, digits "
           "and '_')", section, v->key);
      return WEIR_E_INVAL;
    }
    return WEIR_OK;
  }
  char keys[512];
  section_keys(keys, sizeof keys, section);
  errf(err, errlen, src, v, "unknown key '%s.%s' (valid keys in [%s]: %s)", section, v->key,
       section, keys);
  return WEIR_E_NOTFOUND;
}

/* Validates and applies a whole document to c, then merges its tables into c->toml. */
static int apply_doc(weir_config *c, const weir_toml_node *doc, const char *src, char *err,
                     size_t errlen) {
  char secs[256];
  for (int i = 0; i < doc->num_items; i++) {
    const weir_toml_node *t = doc->items[i];
    int known = 0;
    for (int s = 0; k_sections[s]; s++)
      if (!strcmp(k_sections[s], t->key)) known = 1;
    if (!known || t->type != WEIR_TOML_TABLE) {
      join_choices(secs, sizeof secs, k_sections);
      if (!known)
        errf(err, errlen, src, t, "unknown %s '%s' (valid tables: %s)",
             t->type == WEIR_TOML_TABLE ? "table" : "key", t->key, secs);
      else
        errf(err, errlen, src, t, "'%s' must be a table ([%s]), found %s", t->key, t->key,
             weir_toml_type_name(t->type));
      return t->type == WEIR_TOML_TABLE || !known ? WEIR_E_NOTFOUND : WEIR_E_INVAL;
    }
    for (int j = 0; j < t->num_items; j++) {
      const char *now = renamed_to(t->key, t->items[j]->key, NULL);
      if (now && weir_toml_get(t, now)) {
        errf(err, errlen, src, t->items[j], "%s.%s and %s.%s are the same key (%s is its old "
             "name); expected one of them; fix: keep %s.%s", t->key, t->items[j]->key, t->key,
             now, t->items[j]->key, t->key, now);
        return WEIR_E_INVAL;
      }
      int rc = apply_entry(c, t->key, t->items[j], src, err, errlen);
      if (rc != WEIR_OK) return rc;
    }
  }
  /* Keep the document (plugin options live there); later sources replace earlier keys. */
  for (int i = 0; i < doc->num_items; i++) {
    const weir_toml_node *t = doc->items[i];
    weir_toml_node *dst = weir_toml_get(c->toml, t->key);
    if (!dst) {
      weir_toml_node *nt = weir_toml_new_table();
      if (!nt) goto nomem;
      nt->line = t->line;
      nt->column = t->column;
      if (weir_toml_put(c->toml, t->key, nt) != WEIR_OK) {
        weir_toml_free(nt);
        goto nomem;
      }
      dst = nt;
    }
    for (int j = 0; j < t->num_items; j++) {
      weir_toml_node *cl = weir_toml_clone(t->items[j]);
      if (!cl) goto nomem;
      if (weir_toml_put(dst, t->items[j]->key, cl) != WEIR_OK) {
        weir_toml_free(cl);
        goto nomem;
      }
    }
  }
  resolve_tables(c);
  return WEIR_OK;
nomem:
  errf(err, errlen, src, NULL, "out of memory");
  return WEIR_E_NOMEM;
}

/* Cross-key checks that no single key can make. */
static int check_whole(const weir_config *c, const char *src, char *err, size_t errlen) {
  if (c->max_tokens_limit > 0 && c->default_max_tokens > c->max_tokens_limit) {
    errf(err, errlen, src, NULL,
         "server.default_max_tokens: %d is larger than server.max_tokens_limit (%d)",
         (int)c->default_max_tokens, (int)c->max_tokens_limit);
    return WEIR_E_RANGE;
  }
  return WEIR_OK;
}

/* Applies a parsed document over c (on success; c is unchanged on failure). Takes doc. */
static int load_doc(weir_toml_node *doc, const char *source, const char *path, weir_config *c,
                    char *err, size_t errlen) {
  weir_config tmp;
  int rc = config_clone(c, &tmp);
  if (rc != WEIR_OK) {
    snprintf(err, errlen, "%s: out of memory", source);
    goto free_doc;
  }
  rc = apply_doc(&tmp, doc, source, err, errlen);
  if (rc == WEIR_OK) rc = check_whole(&tmp, source, err, errlen);
  if (rc == WEIR_OK && path) rc = set_string(&tmp.source_path, path, 0);
  if (rc != WEIR_OK) {
    weir_config_free(&tmp);
    goto free_doc;
  }
  weir_config_free(c);
  *c = tmp;
  resolve_tables(c);
free_doc:
  weir_toml_free(doc);
  return rc;
}

int weir_config_load(const char *path, weir_config *c, char *err, size_t errlen) {
  weir_toml_node *doc = NULL;
  /* A zeroed config (never given defaults) starts from the defaults. */
  if (c && !c->toml && !c->host) weir_config_defaults(c);
  if (!c || !config_complete(c)) {
    snprintf(err, errlen, "%s: out of memory", path ? path : "config");
    return WEIR_E_NOMEM;
  }
  int rc = weir_toml_parse_file(path, &doc, err, errlen);
  if (rc != WEIR_OK) return rc;
  return load_doc(doc, path, path, c, err, errlen);
}

int weir_config_load_string(const char *text, size_t len, const char *source, weir_config *c,
                            char *err, size_t errlen) {
  weir_toml_node *doc = NULL;
  if (!source) source = "<string>";
  if (c && !c->toml && !c->host) weir_config_defaults(c);
  if (!c || !config_complete(c)) {
    snprintf(err, errlen, "%s: out of memory", source);
    return WEIR_E_NOMEM;
  }
  /* TOML text never holds NUL, and the parser takes a C string. */
  if (memchr(text, '\0', len)) {
    snprintf(err, errlen, "%s: holds a NUL byte, which TOML does not allow", source);
    return WEIR_E_FORMAT;
  }
  char *copy = malloc(len + 1);
  if (!copy) {
    snprintf(err, errlen, "%s: out of memory", source);
    return WEIR_E_NOMEM;
  }
  memcpy(copy, text, len);
  copy[len] = '\0';
  int rc = weir_toml_parse_string(copy, source, &doc, err, errlen);
  free(copy);
  if (rc != WEIR_OK) return rc;
  return load_doc(doc, source, NULL, c, err, errlen);
}

int weir_config_set(weir_config *c, const char *dotted_key, const char *value, char *err,
                    size_t errlen) {
  int rc = WEIR_E_NOMEM;
  weir_toml_node *doc = NULL, *sec = NULL, *val = NULL;
  weir_config tmp;
  char section[64];
  const char *dot = strchr(dotted_key, '.');
  if (!dot || dot == dotted_key || !dot[1] || (size_t)(dot - dotted_key) >= sizeof section) {
    snprintf(err, errlen, "'%s' is not a key: write section.key, e.g. server.port", dotted_key);
    return WEIR_E_INVAL;
  }
  memcpy(section, dotted_key, (size_t)(dot - dotted_key));
  section[dot - dotted_key] = 0;
  if (c && !c->toml && !c->host) weir_config_defaults(c);
  if (!c || !config_complete(c)) goto nomem;
  /* A TOML value when it reads as one; otherwise the text itself, so that
   * --set model.path=m.gguf needs no quotes. */
  int prc = weir_toml_parse_value(value, &val);
  if (prc == WEIR_E_NOMEM) goto nomem;
  if (prc != WEIR_OK && !(val = weir_toml_new_string(value))) goto nomem;
  if (!(doc = weir_toml_new_table()) || !(sec = weir_toml_new_table())) goto nomem;
  if (weir_toml_put(sec, dot + 1, val) != WEIR_OK) goto nomem;
  val = NULL;
  if (weir_toml_put(doc, section, sec) != WEIR_OK) goto nomem;
  sec = NULL;
  if (config_clone(c, &tmp) != WEIR_OK) goto nomem;
  rc = apply_doc(&tmp, doc, NULL, err, errlen);
  if (rc == WEIR_OK) rc = check_whole(&tmp, NULL, err, errlen);
  if (rc != WEIR_OK) {
    weir_config_free(&tmp);
    goto out;
  }
  weir_config_free(c);
  *c = tmp;
  resolve_tables(c);
  goto out;
nomem:
  snprintf(err, errlen, "%s: out of memory", dotted_key);
  rc = WEIR_E_NOMEM;
out:
  weir_toml_free(val);
  weir_toml_free(sec);
  weir_toml_free(doc);
  return rc;
}

/* ---- command-line flags ------------------------------------------------------------------ */

/* The flags, their getopt entries and the key each sets (NULL: handled specially). Names
 * follow vLLM's and llama-server's where they have one. */
enum {
  F_CONFIG = WEIR_CONFIG_FLAG_BASE, F_SET, F_PLUGIN_DIR, F_SERVED_NAME, F_HOST, F_PORT, F_MODEL,
  F_MAX_MODEL_LEN, F_CTX_SIZE, F_API_KEY, F_DEVICE, F_THREADS, F_ATTENTION, F_QUANT, F_SAMPLER,
  F_KV_DTYPE, F_LOG_LEVEL, F_LOG_FORMAT, F_MAX_NUM_SEQS, F_MAX_BATCHED, F_BLOCK_SIZE,
  /* vLLM's and llama-server's spellings (docs/deployment.md, "Migrating"). */
  F_QUANTIZATION, F_GPU_MEM_UTIL, F_PREFIX_ON, F_PREFIX_OFF, F_CHAT_TEMPLATE,
  F_CHAT_TEMPLATE_FILE, F_JINJA, F_NGL, F_ALLOW_LONG, F_KV_CACHE_DTYPE,
  /* Flags weir refuses, each with what to do instead (k_refused, in this order). */
  F_REFUSED_TP, F_REFUSED_TP_SHORT, F_REFUSED_PP, F_REFUSED_DTYPE, F_REFUSED_SWAP,
  F_REFUSED_HF, F_REFUSED_HF_REPO, F_END_
};

_Static_assert(F_SERVED_NAME == WEIR_CONFIG_FLAG_SERVED_NAME && F_MODEL == WEIR_CONFIG_FLAG_MODEL,
               "config.h names these flags' values");

const struct option weir_config_options[] = {
    {"config", required_argument, 0, F_CONFIG},
    {"set", required_argument, 0, F_SET},
    {"plugin-dir", required_argument, 0, F_PLUGIN_DIR},
    {"served-model-name", required_argument, 0, F_SERVED_NAME},
    {"host", required_argument, 0, F_HOST},
    {"port", required_argument, 0, F_PORT},
    {"model", required_argument, 0, F_MODEL},
    {"max-model-len", required_argument, 0, F_MAX_MODEL_LEN},
    {"ctx-size", required_argument, 0, F_CTX_SIZE},
    {"api-key", required_argument, 0, F_API_KEY},
    {"device", required_argument, 0, F_DEVICE},
    {"threads", required_argument, 0, F_THREADS},
    {"attention", required_argument, 0, F_ATTENTION},
    {"quant", required_argument, 0, F_QUANT},
    {"sampler", required_argument, 0, F_SAMPLER},
    {"kv-dtype", required_argument, 0, F_KV_DTYPE},
    {"log-level", required_argument, 0, F_LOG_LEVEL},
    {"log-format", required_argument, 0, F_LOG_FORMAT},
    {"max-num-seqs", required_argument, 0, F_MAX_NUM_SEQS},
    {"max-num-batched-tokens", required_argument, 0, F_MAX_BATCHED},
    {"block-size", required_argument, 0, F_BLOCK_SIZE},
    {"quantization", required_argument, 0, F_QUANTIZATION},
    {"gpu-memory-utilization", required_argument, 0, F_GPU_MEM_UTIL},
    {"enable-prefix-caching", no_argument, 0, F_PREFIX_ON},
    {"no-enable-prefix-caching", no_argument, 0, F_PREFIX_OFF},
    {"chat-template", required_argument, 0, F_CHAT_TEMPLATE},
    {"chat-template-file", required_argument, 0, F_CHAT_TEMPLATE_FILE},
    {"jinja", no_argument, 0, F_JINJA},
    {"allow-long-max-model-len", no_argument, 0, F_ALLOW_LONG},
    {"kv-cache-dtype", required_argument, 0, F_KV_CACHE_DTYPE},
    {"alias", required_argument, 0, F_SERVED_NAME},
    /* llama-server: -np/--parallel, -ngl/--n-gpu-layers (util/opt.h reads "-np" as "--np"). */
    {"np", required_argument, 0, F_MAX_NUM_SEQS},
    {"parallel", required_argument, 0, F_MAX_NUM_SEQS},
    {"ngl", required_argument, 0, F_NGL},
    {"n-gpu-layers", required_argument, 0, F_NGL},
    {"gpu-layers", required_argument, 0, F_NGL},
    {"tensor-parallel-size", required_argument, 0, F_REFUSED_TP},
    {"tp", required_argument, 0, F_REFUSED_TP_SHORT},
    {"pipeline-parallel-size", required_argument, 0, F_REFUSED_PP},
    {"dtype", required_argument, 0, F_REFUSED_DTYPE},
    {"swap-space", required_argument, 0, F_REFUSED_SWAP},
    {"hf", required_argument, 0, F_REFUSED_HF},
    {"hf-repo", required_argument, 0, F_REFUSED_HF_REPO},
    {0, 0, 0, 0},
};

/* What weir does instead of each refused flag, by F_REFUSED_* - F_REFUSED_TP. */
static const char *const k_refused[] = {
    /* tensor-parallel-size, tp, pipeline-parallel-size */
    "weir runs a model on one device per process: run one replica per GPU behind a load "
    "balancer (docs/deployment.md)",
    "weir runs a model on one device per process: run one replica per GPU behind a load "
    "balancer (docs/deployment.md)",
    "weir runs a model on one device per process: run one replica per GPU behind a load "
    "balancer (docs/deployment.md)",
    /* dtype */
    "weir computes in the scheme of its quant plugin, not a dtype: --quant fp16 (f16 "
    "weights), --quant int8, --quant awq_int4, --quant gguf (the file's own block types); "
    "the KV cache's type is --kv-dtype",
    /* swap-space */
    "weir does not swap KV blocks to host memory (a preempted sequence is recomputed): size "
    "the cache with --gpu-memory-utilization F or --set cache.memory_bytes=SIZE",
    /* hf, hf-repo */
    "weir downloads nothing: give a local GGUF file (weir serve MODEL.gguf); see "
    "docs/models.md",
    "weir downloads nothing: give a local GGUF file (weir serve MODEL.gguf); see "
    "docs/models.md",
};

/* The quant names --quantization takes as --quant: weir's own plugins. vLLM's method names
 * name checkpoint formats weir does not read, so each gets the weir equivalent instead. */
static int quantization_flag(const char *v, weir_config *cfg, char *err, size_t errlen) {
  static const char *const ours[] = {"auto", "fp16", "int8", "awq_int4", "gguf", NULL};
  size_t n = strlen(v);
  int known = n > 5 && !strcmp(v + n - 5, "_cuda");
  for (int i = 0; ours[i] && !known; i++) known = !strcmp(v, ours[i]);
  if (known) return weir_config_set(cfg, "quant.name", v, err, errlen);
  if (!strcmp(v, "awq"))
    snprintf(err, errlen, "--quantization awq: weir does not read pre-quantized AWQ "
             "checkpoints; --quant awq_int4 calibrates AWQ int4 weights at load from an f16 or "
             "f32 GGUF (docs/quant-awq.md)");
  else if (!strcmp(v, "fp8"))
    snprintf(err, errlen, "--quantization fp8: weir has no fp8 weight scheme; --quant int8 "
             "for 8-bit weights, --kv-dtype fp8 for an fp8 KV cache");
  else
    snprintf(err, errlen, "--quantization %s: not a weir quant scheme; weir's are --quant "
             "fp16, int8, awq_int4 and gguf (a GGUF's own block types such as Q4_K, the "
             "default for such a file)", v);
  return WEIR_E_INVAL;
}

/* --chat-template V: a built-in template's name, else a Jinja file (vLLM); inline Jinja text
 * (llama-server) is refused with how to pass it. */
static int chat_template_flag(const char *v, weir_config *cfg, char *err, size_t errlen) {
  for (int i = 0; k_templates[i]; i++)
    if (!strcmp(v, k_templates[i])) return weir_config_set(cfg, "model.chat_template", v, err, errlen);
  if (strstr(v, "{%") || strstr(v, "{{")) {
    snprintf(err, errlen, "--chat-template: inline Jinja text is not taken; write it to a file "
             "and pass --chat-template FILE");
    return WEIR_E_INVAL;
  }
  if (access(v, R_OK) != 0) {
    char names[256];
    join_choices(names, sizeof names, k_templates);
    snprintf(err, errlen, "--chat-template %s: neither a built-in template (%s) nor a readable "
             "Jinja file (%s)", v, names, strerror(errno));
    return WEIR_E_INVAL;
  }
  return weir_config_set(cfg, "model.chat_template_file", v, err, errlen);
}

/* The key a flag sets, by flag (NULL: handled specially). */
static const char *flag_key(int id) {
  switch (id) {
  case F_HOST: return "server.host";
  case F_PORT: return "server.port";
  case F_MODEL: return "model.path";
  case F_MAX_MODEL_LEN: case F_CTX_SIZE: return "model.max_model_len";
  case F_API_KEY: return "server.api_key";
  case F_DEVICE: return "device.name";
  case F_THREADS: return "device.threads";
  case F_ATTENTION: return "attention.name";
  case F_QUANT: return "quant.name";
  case F_SAMPLER: return "sampler.name";
  case F_KV_DTYPE: return "attention.kv_dtype";
  case F_LOG_LEVEL: return "log.level";
  case F_LOG_FORMAT: return "log.format";
  case F_MAX_NUM_SEQS: return "scheduler.max_num_seqs";
  case F_MAX_BATCHED: return "scheduler.max_num_batched_tokens";
  case F_BLOCK_SIZE: return "cache.block_size";
  default: return NULL;
  }
}

static const char *flag_name(int id) {
  for (const struct option *o = weir_config_options; o->name; o++)
    if (o->val == id) return o->name;
  return "?";
}

int weir_config_args_take(weir_config_args *a, int val, const char *value) {
  if (val == 'm') val = F_MODEL;
  if (val == 'c') val = F_CTX_SIZE;
  if (val == 't') val = F_THREADS;
  if (val < WEIR_CONFIG_FLAG_BASE || val >= F_END_) return 0;
  if (a->num == a->cap) {
    int cap = a->cap ? a->cap * 2 : 16;
    weir_config_arg *n = realloc(a->items, sizeof *n * (size_t)cap);
    if (!n) return WEIR_E_NOMEM;
    a->items = n;
    a->cap = cap;
  }
  a->items[a->num++] = (weir_config_arg){.id = val, .value = value};
  return 1;
}

void weir_config_args_free(weir_config_args *a) {
  free(a->items);
  memset(a, 0, sizeof *a);
}

static int add_plugin_dir(weir_config *c, const char *dir) {
  char **d = realloc(c->plugin_dirs, sizeof *d * (size_t)(c->num_plugin_dirs + 1));
  if (!d) return WEIR_E_NOMEM;
  c->plugin_dirs = d;
  if (!(d[c->num_plugin_dirs] = strdup(dir))) return WEIR_E_NOMEM;
  c->num_plugin_dirs++;
  return WEIR_OK;
}

/* A TOML basic string for `s` (quotes, backslashes and control bytes escaped), into buf. */
static void toml_quote(char *buf, size_t len, const char *s) {
  size_t o = 0;
  if (o < len) buf[o++] = '"';
  for (; *s && o + 7 < len; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      buf[o++] = '\\';
      buf[o++] = (char)ch;
    } else if (ch < 0x20 || ch == 0x7f) {
      o += (size_t)snprintf(buf + o, len - o, "\\u%04x", ch);
    } else {
      buf[o++] = (char)ch;
    }
  }
  if (o + 2 <= len) {
    buf[o++] = '"';
    buf[o] = 0;
  } else if (len) {
    buf[len - 1] = 0;
  }
}

int weir_config_args_apply(const weir_config_args *a, weir_config *cfg, char *err,
                           size_t errlen) {
  int rc;
  /* The file first, wherever --config appears, so that flags override it. */
  for (int i = 0; i < a->num; i++)
    if (a->items[i].id == F_CONFIG &&
        (rc = weir_config_load(a->items[i].value, cfg, err, errlen)) != WEIR_OK)
      return rc;
  const char *env = getenv("WEIR_API_KEY");
  if (env && *env && (rc = weir_config_set(cfg, "server.api_key", env, err, errlen)) != WEIR_OK)
    return rc;
  /* --served-model-name may repeat: the names together make one list. */
  char names[4096];
  size_t nlen = 0;
  for (int i = 0; i < a->num; i++) {
    const weir_config_arg *f = &a->items[i];
    const char *v = f->value ? f->value : "";
    switch (f->id) {
    case F_CONFIG: break;
    case F_PLUGIN_DIR:
      if ((rc = add_plugin_dir(cfg, v)) != WEIR_OK) {
        snprintf(err, errlen, "--plugin-dir: out of memory");
        return rc;
      }
      break;
    case F_SET: {
      const char *eq = strchr(v, '=');
      char key[128];
      if (!eq || eq == v || (size_t)(eq - v) >= sizeof key) {
        snprintf(err, errlen, "--set %s: expected KEY=VALUE, e.g. --set server.port=9000", v);
        return WEIR_E_INVAL;
      }
      memcpy(key, v, (size_t)(eq - v));
      key[eq - v] = 0;
      if ((rc = weir_config_set(cfg, key, eq + 1, err, errlen)) != WEIR_OK) return rc;
      break;
    }
    case F_QUANTIZATION:
      if ((rc = quantization_flag(v, cfg, err, errlen)) != WEIR_OK) return rc;
      break;
    case F_GPU_MEM_UTIL: {
      char *end = NULL;
      double x = strtod(v, &end);
      if (!*v || *end || !(x > 0.0 && x <= 1.0)) {
        snprintf(err, errlen, "--gpu-memory-utilization: '%s' is not a fraction in (0, 1]", v);
        return WEIR_E_RANGE;
      }
      char num[64];
      snprintf(num, sizeof num, "%.17g%s", x, x == 1.0 ? ".0" : "");
      if ((rc = weir_config_set(cfg, "cache.gpu_memory_utilization", num, err, errlen)))
        return rc;
      break;
    }
    case F_PREFIX_ON:
    case F_PREFIX_OFF:
      if ((rc = weir_config_set(cfg, "cache.prefix_caching",
                                f->id == F_PREFIX_ON ? "true" : "false", err, errlen)))
        return rc;
      break;
    case F_CHAT_TEMPLATE:
      if ((rc = chat_template_flag(v, cfg, err, errlen)) != WEIR_OK) return rc;
      break;
    case F_CHAT_TEMPLATE_FILE:
      if (access(v, R_OK) != 0) {
        snprintf(err, errlen, "--chat-template-file %s: %s", v, strerror(errno));
        return WEIR_E_IO;
      }
      if ((rc = weir_config_set(cfg, "model.chat_template_file", v, err, errlen))) return rc;
      break;
    case F_JINJA:
      /* weir always runs the model's own Jinja template (docs/chat-templates.md). */
      break;
    case F_ALLOW_LONG:
      if ((rc = weir_config_set(cfg, "model.allow_long_max_model_len", "true", err, errlen)))
        return rc;
      break;
    case F_KV_CACHE_DTYPE:
      /* vLLM's "auto" is the model's dtype: weir's default (f16) is the nearest. */
      if (strcmp(v, "auto") != 0 &&
          (rc = weir_config_set(cfg, "attention.kv_dtype", v, err, errlen)) != WEIR_OK) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "--kv-cache-dtype: %s", tmp);
        return rc;
      }
      break;
    case F_NGL: {
      /* llama.cpp's layers on the GPU: 0 is the CPU, any other count the CUDA device; a
       * count below the model's layers is refused once the model is open (the engine). */
      char *end = NULL;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < -1 || n > 1000000) {
        snprintf(err, errlen, "-ngl/--n-gpu-layers: '%s' is not a layer count", v);
        return WEIR_E_RANGE;
      }
      cfg->n_gpu_layers = (int32_t)n;
      if ((rc = weir_config_set(cfg, "device.name", n == 0 ? "cpu" : "cuda", err, errlen)))
        return rc;
      break;
    }
    case F_SERVED_NAME: {
      char q[1024];
      if (!*v) {
        snprintf(err, errlen, "--served-model-name: the name must not be empty");
        return WEIR_E_INVAL;
      }
      toml_quote(q, sizeof q, v);
      if (nlen + strlen(q) + 4 >= sizeof names) {
        snprintf(err, errlen, "--served-model-name: too many names");
        return WEIR_E_RANGE;
      }
      nlen += (size_t)snprintf(names + nlen, sizeof names - nlen, "%s%s", nlen ? ", " : "[", q);
      break;
    }
    default: {
      if (f->id >= F_REFUSED_TP && f->id < F_END_) {
        snprintf(err, errlen, "--%s is not supported: %s", flag_name(f->id),
                 k_refused[f->id - F_REFUSED_TP]);
        return WEIR_E_NOTSUP;
      }
      /* Shorthand values are plain strings or numbers: read them as the key's type. */
      const char *key = flag_key(f->id);
      if (!key) return WEIR_E_INTERNAL;
      if ((rc = weir_config_set(cfg, key, v, err, errlen)) != WEIR_OK) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "--%s: %s", flag_name(f->id), tmp);
        return rc;
      }
    }
    }
  }
  if (nlen) {
    snprintf(names + nlen, sizeof names - nlen, "]");
    if ((rc = weir_config_set(cfg, "server.served_model_name", names, err, errlen)) != WEIR_OK)
      return rc;
  }
  return WEIR_OK;
}

/* The legacy prefilter: only exact configuration flags are taken; everything else stays. */
int weir_config_from_args(int *argc, char **argv, weir_config *cfg, char *err, size_t errlen) {
  weir_config_args a = {0};
  int n = *argc, out = 1, rc = WEIR_OK;
  for (int i = 1; i < n && rc >= 0; i++) {
    const char *arg = argv[i], *value = NULL;
    if (!strcmp(arg, "--")) {
      while (i < n) argv[out++] = argv[i++];
      break;
    }
    int id = 0, flag = 0;
    if (!strcmp(arg, "-m") || !strcmp(arg, "-c") || !strcmp(arg, "-t")) {
      id = arg[1];
    } else if (arg[0] == '-' && arg[1] == '-') {
      size_t len = strcspn(arg + 2, "=");
      for (const struct option *o = weir_config_options; o->name && !id; o++)
        if (strlen(o->name) == len && !strncmp(o->name, arg + 2, len)) {
          id = o->val;
          flag = o->has_arg == no_argument;
        }
      if (id && arg[2 + len] == '=') value = arg + 3 + len;
    }
    if (id && flag) {
      if (weir_config_args_take(&a, id, NULL) < 0) rc = WEIR_E_NOMEM;
      continue;
    }
    if (!id) {
      argv[out++] = argv[i];
      continue;
    }
    if (!value) {
      if (i + 1 >= n) {
        snprintf(err, errlen, "%s needs a value", arg);
        rc = WEIR_E_INVAL;
        break;
      }
      value = argv[++i];
    }
    if (weir_config_args_take(&a, id, value) < 0) rc = WEIR_E_NOMEM;
  }
  if (rc == WEIR_E_NOMEM) snprintf(err, errlen, "out of memory");
  if (rc == WEIR_OK) rc = weir_config_args_apply(&a, cfg, err, errlen);
  weir_config_args_free(&a);
  if (rc != WEIR_OK) return rc;
  *argc = out;
  argv[out] = NULL;
  return WEIR_OK;
}

/* ---- printing ----------------------------------------------------------------------------- */

static void write_key(const weir_config *c, const key_spec *k, FILE *f) {
  const char *base = (const char *)c;
  fprintf(f, "%s = ", k->key);
  switch (k->type) {
  case K_STR:
  case K_OPT_STR: {
    const char *s = *(char *const *)(base + k->off);
    /* The printed configuration ends up in terminals and logs: never the secret itself. */
    if (s && k->off == OFF(api_key)) {
      fputs("\"<redacted>\"  # set (hidden)\n", f);
      return;
    }
    weir_toml_write_string(f, s ? s : "");
    break;
  }
  case K_SEL_NAME:
  case K_SEL_PATH: {
    const weir_plugin_sel *sel = (const weir_plugin_sel *)(base + k->off);
    const char *s = k->type == K_SEL_NAME ? sel->name : sel->path;
    weir_toml_write_string(f, s ? s : "");
    break;
  }
  case K_INT: fprintf(f, "%d", *(const int *)(base + k->off)); break;
  case K_I32: fprintf(f, "%d", (int)*(const int32_t *)(base + k->off)); break;
  case K_I64:
  case K_BYTES: fprintf(f, "%" PRId64, *(const int64_t *)(base + k->off)); break;
  case K_BOOL: fputs(*(const int *)(base + k->off) ? "true" : "false", f); break;
  case K_PROB: {
    /* The shortest form that reads back as the same double. */
    const double x = *(const double *)(base + k->off);
    char b[32];
    snprintf(b, sizeof b, "%.15g", x);
    if (strtod(b, NULL) != x) snprintf(b, sizeof b, "%.17g", x);
    fputs(b, f);
    if (!strpbrk(b, ".eEn")) fputs(".0", f); /* a TOML float, not an integer */
    break;
  }
  case K_LEVEL: fprintf(f, "\"%s\"", k_levels[c->log_level <= WEIR_LOG_ERROR ? c->log_level : 1]); break;
  case K_FORMAT: fprintf(f, "\"%s\"", c->log_format == WEIR_LOG_JSON ? "json" : "text"); break;
  case K_KV_DTYPE: fprintf(f, "\"%s\"", kv_dtype_name(c->kv_dtype)); break;
  case K_NAMES:
    if (!c->num_served_model_aliases) {
      weir_toml_write_string(f, c->served_model_name ? c->served_model_name : "");
      break;
    }
    fputc('[', f);
    weir_toml_write_string(f, c->served_model_name);
    for (int i = 0; i < c->num_served_model_aliases; i++) {
      fputs(", ", f);
      weir_toml_write_string(f, c->served_model_aliases[i]);
    }
    fputc(']', f);
    break;
  case K_DIRS:
    fputc('[', f);
    for (int i = 0; i < c->num_plugin_dirs; i++) {
      if (i) fputs(", ", f);
      weir_toml_write_string(f, c->plugin_dirs[i]);
    }
    fputc(']', f);
    break;
  }
  if ((k->type == K_OPT_STR || k->type == K_NAMES) && !*(char *const *)(base + k->off))
    fputs(k->type == K_NAMES ? "  # unset: the model file's general.name, else its file name"
                             : "  # unset", f);
  if (k->type == K_SEL_PATH && !((const weir_plugin_sel *)(base + k->off))->path)
    fputs("  # found by name in the plugin directories", f);
  fputc('\n', f);
}

void weir_config_apply_log(const weir_config *c) {
  weir_log_configure(c->log_level, c->log_format, NULL);
}

void weir_config_write(const weir_config *c, FILE *f) { weir_config_write_ex(c, f, NULL, NULL); }

void weir_config_write_ex(const weir_config *c, FILE *f,
                          void (*options)(void *arg, const char *section, FILE *f), void *arg) {
  if (c->source_path) fprintf(f, "# effective configuration (from %s)\n", c->source_path);
  else fprintf(f, "# effective configuration (built-in defaults)\n");
  for (int s = 0; k_sections[s]; s++) {
    const char *sec = k_sections[s];
    fprintf(f, "\n[%s]\n", sec);
    for (size_t i = 0; i < NUM_KEYS; i++)
      if (!strcmp(k_keys[i].section, sec)) write_key(c, &k_keys[i], f);
    if (!is_plugin_section(sec)) continue;
    if (options) {
      options(arg, sec, f);
      continue;
    }
    const weir_toml_node *t = weir_toml_get(c->toml, sec);
    for (int i = 0; t && i < t->num_items; i++) {
      if (weir_config_is_core_key(sec, t->items[i]->key)) continue;
      weir_toml_write_key(f, t->items[i]->key);
      fputs(" = ", f);
      weir_toml_write_value(f, t->items[i]);
      fputs("  # plugin option\n", f);
    }
  }
}
