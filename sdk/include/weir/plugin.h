/* weir SDK: the plugin descriptor and the host-services table.
 *
 * A plugin is a shared object that exports exactly one entry symbol, weir_plugin_entry,
 * returning a pointer to a constant weir_plugin_desc. The host (the weir server) loads it with
 * dlopen(RTLD_NOW | RTLD_LOCAL), checks the descriptor, validates the plugin's options from
 * the TOML table that selected it, and calls init() once per instance with a table of host
 * services. A plugin never calls a core symbol: everything it needs from the host comes through
 * weir_host.
 *
 * Versioning. WEIR_ABI_MAJOR must match the host's exactly. WEIR_ABI_MINOR grows when a field
 * is appended to a struct; every struct that can grow begins with its own struct_size, and a
 * reader checks that size (WEIR_HAS_FIELD) before touching a newer field. A NULL callback
 * means "not implemented". Each field's comment names the ABI version that added it. The host
 * loads a plugin built against an older minor: it copies the plugin's descriptor and ops
 * table into structs of its own size, the fields the plugin's struct_size does not cover
 * reading as 0 / NULL (not implemented), so host code never reads past a plugin's struct.
 * Structs without a struct_size (weir_option_desc, weir_option_value, weir_metric_desc,
 * weir_tensor; weir_option_bind since 1.5) are frozen at their first layout: they are laid
 * out in arrays or embedded, so they never grow; a need for more is met by a new struct.
 *
 * Build signature. WEIR_BUILD_SIGNATURE encodes facts an ABI number does not catch (pointer
 * size, byte order, the SDK's struct layout revision); the loader refuses a plugin whose
 * signature differs from its own. */
#ifndef WEIR_PLUGIN_H
#define WEIR_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weir/status.h"
#include "weir/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEIR_ABI_MAJOR 1
#define WEIR_ABI_MINOR 8

/* 1 when *ptr, a struct of `type` that begins with its own struct_size, is large enough to
 * hold `field`: the test a reader makes before touching a field added after the struct's
 * first version, whichever side (host or plugin) built the struct. Since 1.1. E.g.
 *   if (WEIR_HAS_FIELD(host, weir_host, some_1_2_call) && host->some_1_2_call) ...  */
#define WEIR_HAS_FIELD(ptr, type, field) \
  ((size_t)(ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

#define WEIR_STR_(x) #x
#define WEIR_STR(x) WEIR_STR_(x)
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define WEIR_SIG_ENDIAN_ "be"
#else
#define WEIR_SIG_ENDIAN_ "le"
#endif
/* "weir-abi1;p64;le;layout1": compared as a whole string at load. */
#define WEIR_BUILD_SIGNATURE                                                                  \
  "weir-abi" WEIR_STR(WEIR_ABI_MAJOR) ";p" WEIR_STR(__SIZEOF_POINTER__) "0;" WEIR_SIG_ENDIAN_ \
  ";layout1"

#if defined(_WIN32)
#define WEIR_EXPORT __declspec(dllexport)
#else
#define WEIR_EXPORT __attribute__((visibility("default")))
#endif

/* The one symbol a plugin exports, and its name for dlsym. */
#define WEIR_PLUGIN_ENTRY_SYMBOL "weir_plugin_entry"
/* Optional second symbol: scores this build variant for this machine (higher wins; a
 * negative score means "cannot run here"; no symbol scores 0). Used to choose between variants
 * of one plugin, e.g. an AVX-512 build and a generic one: variant files are named
 * weir_<kind>_<name>[_<device>].<variant>.so next to (or instead of) the plain
 * weir_<kind>_<name>[_<device>].so, and when a configuration selects the plugin by name the
 * loader loads the candidate with the highest score (the plain file on a tie, then by name).
 * A single candidate with a negative score is refused with that reason. Called once per
 * candidate, before init, from the loading thread. Signature: weir_plugin_score_fn. */
#define WEIR_PLUGIN_SCORE_SYMBOL "weir_plugin_score"

typedef enum weir_plugin_kind {
  WEIR_PLUGIN_DEVICE = 1,
  WEIR_PLUGIN_ATTENTION = 2,
  WEIR_PLUGIN_QUANT = 3,
  WEIR_PLUGIN_SAMPLER = 4,
  WEIR_PLUGIN_DRAFTER = 5,
  WEIR_PLUGIN_CACHE = 6, /* response cache (weir/cache.h). Since 1.6. */
} weir_plugin_kind;

typedef enum weir_log_level {
  WEIR_LOG_DEBUG = 0,
  WEIR_LOG_INFO = 1,
  WEIR_LOG_WARN = 2,
  WEIR_LOG_ERROR = 3,
} weir_log_level;

/* ---- Options ---------------------------------------------------------------------------
 * A plugin declares its options as a table; the host validates the TOML table that selected
 * the plugin against it (types, ranges, unknown keys) before init, fills defaults, and hands
 * init one resolved value per declared option, in declaration order. Since 1.5 a plugin reads
 * them by key (weir_host.option and the helpers after weir_host), so the table's order
 * carries no meaning. */

typedef enum weir_option_type {
  WEIR_OPT_BOOL = 1,
  WEIR_OPT_INT = 2,    /* 64-bit signed; range [min, max] inclusive when min < max */
  WEIR_OPT_FLOAT = 3,  /* double; range [min, max] inclusive when min < max */
  WEIR_OPT_STRING = 4, /* UTF-8; when `choices` is non-NULL, one of them */
} weir_option_type;

/* One declared option. Plugins lay these out in an array (weir_plugin_desc.options), so the
 * struct has no struct_size and never grows: its layout is frozen at 1.0. */
typedef struct weir_option_desc {
  const char *key;        /* TOML key: [a-z0-9_]+. 1.0 */
  weir_option_type type;  /* 1.0 */
  const char *help;       /* one line for `weir plugins --help NAME`. 1.0 */
  /* Default: the member matching `type` is used. */
  int64_t def_int;        /* 1.0 */
  double def_float;       /* 1.0 */
  const char *def_string; /* also the default of a STRING option; NULL means "". 1.0 */
  int def_bool;           /* 1.0 */
  /* Range for INT and FLOAT options; ignored when min >= max. 1.0 */
  double min, max;
  /* NULL-terminated list of allowed strings for a STRING option, or NULL for any string.
   * 1.0 */
  const char *const *choices;
} weir_option_desc;

/* A resolved option value. `s` is owned by the host and lives until the instance's fini.
 * Handed to init as an array (weir_plugin_args.options): frozen at 1.0, never grows. */
typedef struct weir_option_value {
  int64_t i;          /* 1.0 */
  double f;           /* 1.0 */
  const char *s;      /* 1.0 */
  int b;              /* 1.0 */
  int is_set;         /* 1 when the TOML table set it, 0 when the default was used. 1.0 */
} weir_option_value;

/* ---- Metrics ---------------------------------------------------------------------------
 * Plugins may register Prometheus metrics; the host exposes them at /metrics with the weir_
 * prefix and a plugin="<name>" label. */

typedef enum weir_metric_type {
  WEIR_METRIC_COUNTER = 1,
  WEIR_METRIC_GAUGE = 2,
  WEIR_METRIC_HISTOGRAM = 3,
} weir_metric_type;

typedef struct weir_metric weir_metric; /* opaque, owned by the host */

/* What metric_register takes. It has no struct_size, so its layout is frozen at 1.0; a later
 * need (say, per-metric labels) comes as a new struct and a new host call. */
typedef struct weir_metric_desc {
  const char *name;          /* without the weir_ prefix: [a-z_][a-z0-9_]*. 1.0 */
  const char *help;          /* 1.0 */
  weir_metric_type type;     /* 1.0 */
  const double *buckets;     /* histogram upper bounds, ascending; NULL for defaults. 1.0 */
  int num_buckets;           /* 1.0 */
} weir_metric_desc;

/* ---- Host services ----------------------------------------------------------------------
 * One table per plugin instance, owned by the host, valid from init until fini returns.
 * Unless a function says otherwise it is thread-safe. A field added after 1.0 must be tested
 * for NULL (and struct_size checked) before use. */

/* Body of one parallel_for chunk: process [begin, end). `thread` is in [0, num_threads). */
typedef void (*weir_parallel_fn)(void *arg, int64_t begin, int64_t end, int thread);

typedef struct weir_host {
  uint32_t struct_size;   /* sizeof(weir_host) as the host knows it. Since 1.0. */
  uint32_t abi_minor;     /* the host's WEIR_ABI_MINOR. Since 1.0. */
  void *ctx;              /* pass as the first argument of every call below. Since 1.0. */

  /* Logs one message at a level; the host adds time and the plugin's name. Since 1.0. */
  void (*log)(void *ctx, weir_log_level level, const char *fmt, ...)
      __attribute__((format(printf, 3, 4)));

  /* Host memory, accounted to this plugin. alloc returns NULL on failure; `align` is a
   * power of two (0 means 16). free accepts NULL. Since 1.0. */
  void *(*alloc)(void *ctx, size_t size, size_t align);
  void (*free)(void *ctx, void *ptr);

  /* Memory on the instance's device (the device plugin's allocator), accounted to this
   * plugin. Returns a status; *ptr is untouched on failure. NULL for device plugins
   * themselves. Since 1.0. */
  int (*device_alloc)(void *ctx, size_t size, void **ptr);
  void (*device_free)(void *ctx, void *ptr);

  /* Runs fn over [0, n) split into chunks of at least `grain` items on the host's CPU
   * thread pool, and returns when all chunks are done. Not reentrant: do not call
   * parallel_for from inside fn. Since 1.0. */
  void (*parallel_for)(void *ctx, int64_t n, int64_t grain, weir_parallel_fn fn, void *arg);
  /* Threads parallel_for uses (>= 1). Since 1.0. */
  int (*num_threads)(void *ctx);

  /* Registers a metric; *out stays valid for the life of the server. Since 1.0. */
  int (*metric_register)(void *ctx, const weir_metric_desc *desc, weir_metric **out);
  /* Counter: adds v (>= 0). Gauge: sets v. Histogram: observes v. Since 1.0. */
  void (*metric_record)(void *ctx, weir_metric *m, double v);

  /* A native handle of the instance's device by name: "cuda.stream" (cudaStream_t),
   * "cublas" (cublasHandle_t), "cublaslt" (cublasLtHandle_t), "cuda.device" (int *),
   * "cpu.parallel_min" (const int64_t *, the CPU device's threshold; since 1.5).
   * NULL when the device has no such handle. Since 1.0. */
  void *(*device_handle)(void *ctx, const char *name);

  /* ---- Since 1.5 (a 1.5 plugin loads only in a 1.5 host or newer, so these are set; the
   * SDK helpers below still test WEIR_HAS_FIELD and NULL) --------------------------------- */

  /* Reads this instance's option `key` by name: the key is looked up in the plugin's own
   * declaration (weir_plugin_desc.options), so reordering that table never swaps values,
   * and `type` must be the declared type. On success fills *out (the member matching
   * `type`, and is_set) and returns WEIR_OK; out->s belongs to the host and lives until fini.
   * Fails loudly on a programmer's error: WEIR_E_NOTFOUND when the plugin declares no option
   * `key`, WEIR_E_INVAL when it declares it with another type (or out/key is NULL); either
   * way the host logs an error naming the key and what is declared, and records it as the
   * instance's error message (set_error), so an init that returns the status is refused
   * with that message. Thread-safe; valid from init until fini. Use the typed helpers
   * weir_option_int / _float / _bool / _string or a weir_option_bind table. Since 1.5. */
  int (*option)(void *ctx, const char *key, weir_option_type type, weir_option_value *out);

  /* Gives the reason for the failure of the call the plugin is about to fail (init, pack,
   * matmul, ...), in words a user can act on ("group_size must be 32, 64 or 128, not 48").
   * The host copies the formatted message (at most 511 bytes kept) and, after that call
   * returns a negative status, puts it into the error it reports: the loader's refusal of a
   * failing init (what `weir serve` and every command that loads plugins print), the model
   * loader's error for a failed pack. The last message set wins; the host clears it once
   * read. Call it from the thread the host called (not from inside a parallel_for body),
   * only when about to return a failure; a matmul or forward failure is not yet reported
   * with it by the engine (logged at debug level, as every message is). `fmt` and its
   * arguments are borrowed for the call. Thread-safe. Since 1.5. */
  void (*set_error)(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
} weir_host;

/* ---- Options by name (since 1.5) --------------------------------------------------------
 * A plugin reads its options by key through the host, never by position in
 * weir_plugin_args.options:
 *   int64_t group;
 *   if ((rc = weir_option_int(host, "group_size", &group)) != WEIR_OK) return rc;
 * An undeclared key or a wrong type fails loudly (see weir_host.option). */

/* weir_host.option, tested for presence: WEIR_E_NOTSUP in a host without it. Since 1.5. */
static inline int weir_option_get(const weir_host *h, const char *key, weir_option_type type,
                                  weir_option_value *out) {
  if (!h || !WEIR_HAS_FIELD(h, weir_host, option) || !h->option) return WEIR_E_NOTSUP;
  return h->option(h->ctx, key, type, out);
}

/* Typed reads of one option: *out is written only on WEIR_OK. Since 1.5. */
static inline int weir_option_int(const weir_host *h, const char *key, int64_t *out) {
  weir_option_value v;
  int rc = weir_option_get(h, key, WEIR_OPT_INT, &v);
  if (rc == WEIR_OK) *out = v.i;
  return rc;
}
static inline int weir_option_float(const weir_host *h, const char *key, double *out) {
  weir_option_value v;
  int rc = weir_option_get(h, key, WEIR_OPT_FLOAT, &v);
  if (rc == WEIR_OK) *out = v.f;
  return rc;
}
static inline int weir_option_bool(const weir_host *h, const char *key, int *out) {
  weir_option_value v;
  int rc = weir_option_get(h, key, WEIR_OPT_BOOL, &v);
  if (rc == WEIR_OK) *out = v.b != 0;
  return rc;
}
/* *out belongs to the host and lives until fini. */
static inline int weir_option_string(const weir_host *h, const char *key, const char **out) {
  weir_option_value v;
  int rc = weir_option_get(h, key, WEIR_OPT_STRING, &v);
  if (rc == WEIR_OK) *out = v.s;
  return rc;
}

/* One binding of an option key to a field of the plugin's own settings struct: where
 * weir_options_read stores the key's value. Laid out in arrays, so frozen (no struct_size).
 * Build entries with the WEIR_OPTION_BIND_* macros, which check at compile time (in C) that
 * the field has the type the option needs: int64_t for INT, double for FLOAT, int for BOOL,
 * const char * for STRING. Since 1.5. */
typedef struct weir_option_bind {
  const char *key;       /* a key the plugin declares. 1.5 */
  weir_option_type type; /* its declared type. 1.5 */
  size_t offset;         /* offsetof the field in the settings struct. 1.5 */
} weir_option_bind;

#if defined(__cplusplus) || !defined(__GNUC__)
#define WEIR_OPTION_FIELD_CHECK_(st, field, T) 0
#else
#define WEIR_OPTION_FIELD_CHECK_(st, field, T) \
  (0 * sizeof(char[__builtin_types_compatible_p(__typeof__(((st *)0)->field), T) ? 1 : -1]))
#endif
#define WEIR_OPTION_BIND_(st, field, key, type, T) \
  {(key), (type), offsetof(st, field) + WEIR_OPTION_FIELD_CHECK_(st, field, T)}
#define WEIR_OPTION_BIND_INT(st, field, key) \
  WEIR_OPTION_BIND_(st, field, key, WEIR_OPT_INT, int64_t)
#define WEIR_OPTION_BIND_FLOAT(st, field, key) \
  WEIR_OPTION_BIND_(st, field, key, WEIR_OPT_FLOAT, double)
#define WEIR_OPTION_BIND_BOOL(st, field, key) \
  WEIR_OPTION_BIND_(st, field, key, WEIR_OPT_BOOL, int)
#define WEIR_OPTION_BIND_STRING(st, field, key) \
  WEIR_OPTION_BIND_(st, field, key, WEIR_OPT_STRING, const char *)

/* Reads every bound option into the struct at `settings` by key (weir_host.option each).
 * Returns WEIR_OK, or the first failure (an undeclared key, a wrong type: logged and set as
 * the instance's error by the host); fields already read stay written. Since 1.5. */
static inline int weir_options_read(const weir_host *h, const weir_option_bind *binds, int n,
                                    void *settings) {
  for (int i = 0; i < n; i++) {
    weir_option_value v;
    int rc = weir_option_get(h, binds[i].key, binds[i].type, &v);
    if (rc != WEIR_OK) return rc;
    char *f = (char *)settings + binds[i].offset;
    switch (binds[i].type) {
    case WEIR_OPT_INT: *(int64_t *)(void *)f = v.i; break;
    case WEIR_OPT_FLOAT: *(double *)(void *)f = v.f; break;
    case WEIR_OPT_BOOL: *(int *)(void *)f = v.b != 0; break;
    case WEIR_OPT_STRING: *(const char **)(void *)f = v.s; break;
    default: return WEIR_E_INVAL;
    }
  }
  return WEIR_OK;
}

/* ---- Descriptor ------------------------------------------------------------------------- */

/* What init receives besides the host table. Borrowed for the duration of init only, except
 * `options`, which lives until fini. */
typedef struct weir_plugin_args {
  uint32_t struct_size;             /* Since 1.0. */
  weir_device_kind device;          /* the device this instance runs on. Since 1.0. */
  /* One per desc->options entry, in order. Since 1.0. Read them by key instead (since 1.5,
   * weir_option_int etc. or weir_options_read): an index silently reads another option
   * when the declaration table is reordered. */
  const weir_option_value *options;
  int num_options;                  /* Since 1.0. */
  /* The name of the device this instance runs on (device.name: "cpu", "cuda", "sim", ...),
   * borrowed for init. `device` above then holds the bit of the device's memory: its own
   * bit for cpu and cuda, WEIR_DEVICE_CPU for a device whose plugin declares that plugins for
   * "cpu" run on it (host memory), else 0. Check WEIR_HAS_FIELD before reading. Since 1.5. */
  const char *device_name;
} weir_plugin_args;

typedef struct weir_plugin_desc {
  uint32_t struct_size;        /* sizeof(weir_plugin_desc) the plugin was built with. 1.0 */
  uint16_t abi_major;          /* WEIR_ABI_MAJOR the plugin was built with. 1.0 */
  uint16_t abi_minor;          /* WEIR_ABI_MINOR the plugin was built with. 1.0 */
  const char *build_signature; /* WEIR_BUILD_SIGNATURE. 1.0 */
  weir_plugin_kind kind;       /* 1.0 */
  const char *name;            /* e.g. "paged"; [a-z0-9_]+, unique per kind. 1.0 */
  const char *version;         /* the plugin's own version, e.g. "1.2.0". 1.0 */
  const char *description;     /* one line. 1.0 */
  uint32_t devices;            /* weir_device_kind bits it runs on. 1.0 */
  /* dtypes it supports: weight source dtypes for quant, KV dtypes for attention, activation
   * dtypes for device; 0 for sampler and drafter. 1.0 */
  uint64_t dtypes;
  const weir_option_desc *options; /* may be NULL when num_options is 0. 1.0 */
  int num_options;                 /* 1.0 */

  /* Creates an instance. On success stores an opaque instance pointer in *self and returns
   * WEIR_OK; on failure returns a negative status, says why (host->set_error since 1.5, which
   * the loader puts into its refusal; host->log before), and has released everything it
   * took. `host` stays valid until fini returns. Mandatory. 1.0 */
  int (*init)(const weir_host *host, const weir_plugin_args *args, void **self);
  /* Destroys an instance; never fails. Mandatory. 1.0 */
  void (*fini)(void *self);
  /* The kind's vtable: const weir_device_ops *, weir_attention_ops *, ... Mandatory. 1.0 */
  const void *ops;

  /* ---- Since 1.1 (a 1.0 plugin's struct_size ends before these; the host reads NULL) ---- */
  /* The build variant this file is, e.g. "avx512" or "generic" (see WEIR_PLUGIN_SCORE_SYMBOL);
   * shown by `weir plugins` and in the load log. NULL for none. 1.1 */
  const char *variant;

  /* ---- Since 1.5 ------------------------------------------------------------------------ */
  /* The devices it runs on, by name: a NULL-terminated list such as {"rocm", NULL}, or NULL
   * to use the `devices` bits (what every plugin before 1.5 has). When set, the host reads
   * these names and ignores `devices`; "*" means any device (a drafter that sees only token
   * ids). A device plugin lists first the device it provides, which is its own name; any
   * further names are devices whose plugins run on its memory unchanged: a simulator that
   * keeps tensors in host memory lists {"sim", "cpu", NULL}, and then the CPU attention,
   * quant and sampler plugins load on device.name = "sim". For another kind, the host looks
   * for weir_<kind>_<name>_<device>.so first, then _<each further name of the device
   * plugin>.so, then weir_<kind>_<name>.so. Names are [a-z0-9_]+. Since 1.5. */
  const char *const *device_names;
} weir_plugin_desc;

/* The fields every descriptor fills the same way, first in its initializer:
 *   static const weir_plugin_desc k_desc = {WEIR_PLUGIN_DESC_HEADER, .kind = ..., ...};
 * (this SDK's descriptor size, ABI version and build signature). Since 1.2. */
#define WEIR_PLUGIN_DESC_HEADER                                                               \
  .struct_size = sizeof(weir_plugin_desc), .abi_major = WEIR_ABI_MAJOR,                     \
  .abi_minor = WEIR_ABI_MINOR, .build_signature = WEIR_BUILD_SIGNATURE

/* The size of a 1.0 descriptor: the smallest struct_size the host accepts. Since 1.1. */
#define WEIR_PLUGIN_DESC_SIZE_1_0 (offsetof(weir_plugin_desc, ops) + sizeof(const void *))

typedef const weir_plugin_desc *(*weir_plugin_entry_fn)(void);
typedef int (*weir_plugin_score_fn)(void);

/* Declares the entry symbol. Use once per plugin:
 *   WEIR_PLUGIN_EXPORT(my_desc)
 * where my_desc is a `static const weir_plugin_desc`. */
#define WEIR_PLUGIN_EXPORT(desc)                                          \
  WEIR_EXPORT const weir_plugin_desc *weir_plugin_entry(void);            \
  WEIR_EXPORT const weir_plugin_desc *weir_plugin_entry(void) { return &(desc); }

static inline const char *weir_plugin_kind_name(weir_plugin_kind k) {
  switch (k) {
  case WEIR_PLUGIN_DEVICE: return "device";
  case WEIR_PLUGIN_ATTENTION: return "attention";
  case WEIR_PLUGIN_QUANT: return "quant";
  case WEIR_PLUGIN_SAMPLER: return "sampler";
  case WEIR_PLUGIN_DRAFTER: return "drafter";
  case WEIR_PLUGIN_CACHE: return "cache";
  default: return "?";
  }
}

#ifdef __cplusplus
}
#endif
#endif
