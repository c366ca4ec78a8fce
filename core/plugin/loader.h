/* The plugin loader: finds, checks, configures and initialises plugins (docs/plugin-guide.md).
 *
 * Files are named weir_<kind>_<name>.so or, device-specific, weir_<kind>_<name>_<device>.so;
 * the device-specific file is preferred when present. Either may come in build variants,
 * weir_<kind>_<name>[_<device>].<variant>.so: the loader probes every variant found and loads
 * the one with the highest weir_plugin_score (the plain file on a tie). Directories are searched in this
 * order: the config's plugins.dirs (plus --plugin-dir), WEIR_PLUGIN_PATH (a ':'-list), then
 * <directory of the weir binary>/WEIR_PLUGIN_REL_DIR (../lib/weir/plugins), which holds the
 * shipped plugins in both the build tree and an installed tree. The same file name found in
 * two different directories is refused as a duplicate (both paths are named); an explicit
 * `path` in the selecting table skips the search.
 *
 * Each refusal names the file, what was expected, what was found, and the fix: a file that
 * does not load, no weir_plugin_entry symbol, a descriptor too small, another ABI major, a
 * newer ABI minor, a foreign build signature, another kind, a missing mandatory callback, a
 * negative weir_plugin_score ("cannot run on this machine"), a device or KV dtype it does
 * not support, a bad option (wrong type, out of range, not a choice, unknown key), a failing
 * init (with the message the plugin gave through host->set_error, when it gave one).
 *
 * Thread-safety: loading and unloading are not thread-safe (start-up and shut-down); a loaded
 * plugin's host table is thread-safe as weir_host documents. */
#ifndef WEIR_PLUGIN_LOADER_H
#define WEIR_PLUGIN_LOADER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "metrics/metrics.h"
#include "util/threadpool.h"
#include "weir/weir.h"

struct weir_toml_node;
struct weir__plugin_host;

typedef struct weir_plugin {
  /* The descriptor and the kind's vtable as the host reads them: copies at the host's sizes,
   * the fields an older plugin's struct_size does not cover being 0 / NULL (their
   * struct_size fields keep the plugin's value). */
  const weir_plugin_desc *desc;
  const void *ops;      /* cast to the kind's vtable */
  void *self;           /* the instance from init */
  char *path;           /* the file it came from (owned) */
  int score;            /* its weir_plugin_score (0 without one) */
  /* Private to the loader. */
  weir_plugin_desc desc_copy;
  void *ops_copy;
  void *dl;
  struct weir__plugin_host *host;
  weir_option_value *options; /* desc->num_options resolved values */
  char **option_strings;      /* owned copies behind options[i].s */
} weir_plugin;

typedef struct weir_plugin_set {
  weir_plugin *device, *attention, *quant, *sampler, *drafter; /* drafter may be NULL */
  /* Appended: the CPU pool behind every instance's host->parallel_for, sized by
   * device.threads. Owned by the set; the engine may use it for its own CPU work. */
  weir_threadpool *pool;
} weir_plugin_set;

/* Loads, checks and initialises every plugin the config names (device first: the others'
 * device_alloc goes through it); on failure logs exactly why and unloads what it took.
 * metrics may be NULL (then the process registry is used for plugin metrics). *out is zeroed
 * on failure. */
int weir_plugin_set_load(const weir_config *cfg, weir_metrics *metrics, weir_plugin_set *out);
/* As weir_plugin_set_load, but also writes the reason into err (one line) and does not log
 * it; `weir config check` uses it. */
int weir_plugin_set_load_ex(const weir_config *cfg, weir_metrics *metrics,
                            weir_plugin_set *out, char *err, size_t errlen);
/* Resolves, opens and checks every plugin the config names, and validates their options,
 * without calling init (no device is touched): what `weir config check` needs. The set's
 * instances have self == NULL and must only be inspected and unloaded. */
int weir_plugin_set_check(const weir_config *cfg, weir_plugin_set *out, char *err,
                          size_t errlen);
/* Finalises and closes every plugin in reverse order of loading, then the pool; zeroes *s.
 * Accepts a zeroed set. */
void weir_plugin_set_unload(weir_plugin_set *s);

/* ---- Lower-level calls -------------------------------------------------------------------- */

/* The search directories for a config, in order, without duplicates (compared by real
 * path); directories that do not exist are kept so that messages can name them. */
typedef struct weir_plugin_dirs {
  char **dirs;
  int num;
} weir_plugin_dirs;
int weir_plugin_dirs_get(const weir_config *cfg, weir_plugin_dirs *out);
void weir_plugin_dirs_free(weir_plugin_dirs *d);

/* One plugin to load. Everything is borrowed for the call. */
typedef struct weir_plugin_request {
  weir_plugin_kind kind;
  const char *name;            /* the plugin's name (resolved by file name convention) */
  const char *path;            /* explicit file, or NULL to search `dirs` */
  const weir_plugin_dirs *dirs;
  /* The TOML table that selected it, or NULL; `section` names it in messages and decides
   * which keys are the core's (weir_config_is_core_key) rather than plugin options. */
  const struct weir_toml_node *table;
  const char *section;
  const char *device_name;     /* "cpu", "cuda", "sim": the device the instance runs on, by
                                  the name of its device plugin */
  int check_dtype;             /* 1: desc->dtypes must contain `dtype` (attention KV) */
  weir_dtype dtype;
  weir_metrics *metrics;       /* NULL: the process registry */
  const weir_plugin *device_plugin; /* backs host->device_alloc; NULL for device plugins */
  weir_threadpool *pool;       /* backs host->parallel_for; NULL: run on the caller */
  int no_init;                 /* 1: check everything, resolve options, but do not init */
} weir_plugin_request;

/* Loads one plugin. On failure returns a negative status (WEIR_E_NOTFOUND, WEIR_E_ABI,
 * WEIR_E_NOTSUP, WEIR_E_INVAL, WEIR_E_RANGE, WEIR_E_EXISTS, WEIR_E_PLUGIN, WEIR_E_IO,
 * WEIR_E_NOMEM) and writes the reason into err. *out is owned by the caller: release it
 * with weir_plugin_unload. */
int weir_plugin_load(const weir_plugin_request *req, weir_plugin **out, char *err,
                     size_t errlen);
/* Calls fini (when init ran), closes the file, frees p. Accepts NULL. */
void weir_plugin_unload(weir_plugin *p);

/* The message the instance gave with host->set_error for its last failing call (ABI 1.5):
 * copies it into buf (may be NULL to just clear it), clears it, and returns 1; returns 0
 * (buf "") when none is pending. Read it right after a call returned a negative status.
 * Thread-safe. */
int weir_plugin_take_error(const weir_plugin *p, char *buf, size_t len);
/* Appends the pending message to the error string err as ": <message>" (or sets it when
 * err is empty) and clears it; returns 1 when there was one. */
int weir_plugin_append_error(const weir_plugin *p, char *err, size_t errlen);

/* Bytes currently allocated through an instance's host->alloc and host->device_alloc. */
void weir_plugin_memory(const weir_plugin *p, int64_t *host_bytes, int64_t *device_bytes);

/* Every weir_*.so in the directories, checked without init: desc is NULL and error says why
 * when the file is broken (listing is never fatal). Sorted by directory order, then name. */
typedef struct weir_plugin_found {
  char *path;
  void *dl;
  weir_plugin_desc *desc; /* host-sized copy (its pointers valid while dl is open), or NULL */
  int score;              /* its weir_plugin_score (0 without one) */
  char *error;            /* NULL when usable */
} weir_plugin_found;
int weir_plugin_scan(const weir_plugin_dirs *dirs, weir_plugin_found **out, int *count);
void weir_plugin_scan_free(weir_plugin_found *f, int count);

/* Opens and checks one file as weir_plugin_scan does (no init); on success *dl is the open
 * handle (close it with dlclose), *desc a host-sized copy of the descriptor (fields past
 * the plugin's struct_size are 0; its pointers are valid while dl is open) and *score (may be
 * NULL) the file's weir_plugin_score, 0 without one. On failure err holds the reason. */
int weir_plugin_probe(const char *path, void **dl, weir_plugin_desc *desc, int *score,
                      char *err, size_t errlen);

/* Formats the devices a plugin runs on ("cpu, cuda": its device_names since ABI 1.5, "any"
 * for "*", else its devices bits) and desc->dtypes ("f16, bf16"; "-" when none). */
void weir_plugin_devices_str(const weir_plugin_desc *d, char *buf, size_t len);
void weir_plugin_dtypes_str(uint64_t dtypes, char *buf, size_t len);
/* Prints the declared option table: key, type, default, range or choices, help. */
void weir_plugin_print_options(const weir_plugin_desc *d, FILE *f);
/* Writes the resolved options as TOML lines "key = value" ("# default" when not set). */
void weir_plugin_write_options(const weir_plugin *p, FILE *f);

#endif
