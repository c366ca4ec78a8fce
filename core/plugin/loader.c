/* The plugin loader. See loader.h for the contract and docs/plugin-guide.md for the rules a
 * plugin author follows. Every refusal is one line: the file, what is wrong (expected versus
 * found), and "fix: ..." telling the operator or author what to do. */
#include "plugin/loader.h"
#include "util/err.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/toml.h"
#include "plugin/host.h"
#include "util/log.h"

#ifndef WEIR_PLUGIN_REL_DIR
#define WEIR_PLUGIN_REL_DIR "../lib/weir/plugins"
#endif


static int is_core_key(const char *section, const char *key);

/* ---- directories -------------------------------------------------------------------------- */

static int dirs_add(weir_plugin_dirs *d, const char *dir) {
  char a[PATH_MAX], b[PATH_MAX];
  const char *ra = realpath(dir, a) ? a : dir;
  for (int i = 0; i < d->num; i++) {
    const char *rb = realpath(d->dirs[i], b) ? b : d->dirs[i];
    if (!strcmp(ra, rb)) return WEIR_OK;
  }
  char **n = realloc(d->dirs, sizeof *n * (size_t)(d->num + 1));
  if (!n) return WEIR_E_NOMEM;
  d->dirs = n;
  if (!(d->dirs[d->num] = strdup(dir))) return WEIR_E_NOMEM;
  d->num++;
  return WEIR_OK;
}

int weir_plugin_dirs_get(const weir_config *cfg, weir_plugin_dirs *out) {
  memset(out, 0, sizeof *out);
  int rc = WEIR_OK;
  for (int i = 0; cfg && i < cfg->num_plugin_dirs && rc == WEIR_OK; i++)
    rc = dirs_add(out, cfg->plugin_dirs[i]);
  const char *env = getenv("WEIR_PLUGIN_PATH");
  if (env && rc == WEIR_OK) {
    char *copy = strdup(env), *save = NULL;
    if (!copy) rc = WEIR_E_NOMEM;
    for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t && rc == WEIR_OK;
         t = strtok_r(NULL, ":", &save))
      if (*t) rc = dirs_add(out, t);
    free(copy);
  }
  if (rc == WEIR_OK) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
      exe[n] = 0;
      char *slash = strrchr(exe, '/');
      if (slash) {
        *slash = 0;
        char dir[PATH_MAX + sizeof WEIR_PLUGIN_REL_DIR + 2];
        snprintf(dir, sizeof dir, "%s/%s", exe, WEIR_PLUGIN_REL_DIR);
        char real[PATH_MAX];
        rc = dirs_add(out, realpath(dir, real) ? real : dir); /* no "bin/.." in messages */
      }
    }
  }
  if (rc != WEIR_OK) weir_plugin_dirs_free(out);
  return rc;
}

void weir_plugin_dirs_free(weir_plugin_dirs *d) {
  if (!d) return;
  for (int i = 0; i < d->num; i++) free(d->dirs[i]);
  free(d->dirs);
  d->dirs = NULL;
  d->num = 0;
}

static void dirs_str(const weir_plugin_dirs *d, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = 0;
  for (int i = 0; d && i < d->num && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", d->dirs[i]);
  if (!d || !d->num) snprintf(buf, len, "(no directories)");
}

/* ---- descriptor checks -------------------------------------------------------------------- */

typedef struct op_field {
  const char *name;
  size_t off;
} op_field;

#define OPF(type, f) {#f, offsetof(type, f)}
static const op_field k_device_ops[] = {
    OPF(weir_device_ops, info),     OPF(weir_device_ops, alloc),
    OPF(weir_device_ops, free),     OPF(weir_device_ops, copy_h2d),
    OPF(weir_device_ops, copy_d2h), OPF(weir_device_ops, copy_d2d),
    OPF(weir_device_ops, memset),   OPF(weir_device_ops, synchronize),
    OPF(weir_device_ops, rms_norm), OPF(weir_device_ops, rope),
    OPF(weir_device_ops, swiglu),   OPF(weir_device_ops, add),
    OPF(weir_device_ops, add_bias), OPF(weir_device_ops, get_rows),
    {NULL, 0}};
static const op_field k_attention_ops[] = {OPF(weir_attention_ops, block_bytes),
                                           OPF(weir_attention_ops, forward), {NULL, 0}};
static const op_field k_quant_ops[] = {OPF(weir_quant_ops, pack), OPF(weir_quant_ops, release),
                                       OPF(weir_quant_ops, weight_bytes),
                                       OPF(weir_quant_ops, matmul), OPF(weir_quant_ops, embed),
                                       {NULL, 0}};
static const op_field k_sampler_ops[] = {OPF(weir_sampler_ops, sample), {NULL, 0}};
static const op_field k_drafter_ops[] = {OPF(weir_drafter_ops, propose), {NULL, 0}};
static const op_field k_cache_ops[] = {OPF(weir_cache_ops, get), OPF(weir_cache_ops, put),
                                      OPF(weir_cache_ops, clear), {NULL, 0}};

static const op_field *mandatory_ops(weir_plugin_kind k, const char **type) {
  switch (k) {
  case WEIR_PLUGIN_DEVICE: *type = "weir_device_ops"; return k_device_ops;
  case WEIR_PLUGIN_ATTENTION: *type = "weir_attention_ops"; return k_attention_ops;
  case WEIR_PLUGIN_QUANT: *type = "weir_quant_ops"; return k_quant_ops;
  case WEIR_PLUGIN_SAMPLER: *type = "weir_sampler_ops"; return k_sampler_ops;
  case WEIR_PLUGIN_DRAFTER: *type = "weir_drafter_ops"; return k_drafter_ops;
  case WEIR_PLUGIN_CACHE: *type = "weir_cache_ops"; return k_cache_ops;
  default: *type = "?"; return NULL;
  }
}

static int valid_kind(int k) { return k >= WEIR_PLUGIN_DEVICE && k <= WEIR_PLUGIN_CACHE; }

/* The host's size of a kind's vtable. */
static size_t ops_size(weir_plugin_kind k) {
  switch (k) {
  case WEIR_PLUGIN_DEVICE: return sizeof(weir_device_ops);
  case WEIR_PLUGIN_ATTENTION: return sizeof(weir_attention_ops);
  case WEIR_PLUGIN_QUANT: return sizeof(weir_quant_ops);
  case WEIR_PLUGIN_SAMPLER: return sizeof(weir_sampler_ops);
  case WEIR_PLUGIN_DRAFTER: return sizeof(weir_drafter_ops);
  case WEIR_PLUGIN_CACHE: return sizeof(weir_cache_ops);
  default: return 0;
  }
}

static const char *k_rebuild = "fix: rebuild the plugin against this weir's SDK (include/weir, "
                               "find_package(weir) or pkg-config weir)";

/* The checks that need no configuration: loadable, entry symbol, descriptor, ABI,
 * signature, mandatory callbacks, machine score. */
/* The host-sized copy of a vtable: the plugin's struct_size bytes, the rest 0 (NULL: not
 * implemented). Every ops struct begins with its struct_size. NULL when out of memory. */
static void *copy_ops(weir_plugin_kind kind, const void *ops) {
  size_t full = ops_size(kind);
  uint32_t have = *(const uint32_t *)ops;
  void *c = calloc(1, full);
  if (c) memcpy(c, ops, have < full ? have : full);
  return c;
}

int weir_plugin_probe(const char *path, void **dl_out, weir_plugin_desc *desc_out, int *score_out,
                      char *err, size_t errlen) {
  int rc;
  dlerror();
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror();
    struct stat st;
    if (stat(path, &st) != 0) {
      weir_set_err(err, errlen, "%s: no such file; fix: check the path (or the name and the plugin "
             "directories)", path);
      return WEIR_E_NOTFOUND;
    }
    weir_set_err(err, errlen, "%s: cannot be loaded: %s; expected a shared object for this machine "
           "with its libraries installed; fix: rebuild it, or install what `ldd %s` says is "
           "missing", path, e ? e : "unknown dlopen error", path);
    return WEIR_E_IO;
  }
  weir_plugin_entry_fn entry;
  *(void **)&entry = dlsym(dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  if (!entry) {
    weir_set_err(err, errlen, "%s: no %s symbol: expected a weir plugin exporting it, found none; "
           "fix: define the descriptor with WEIR_PLUGIN_EXPORT(desc) (and build with the "
           "weir SDK)", path, WEIR_PLUGIN_ENTRY_SYMBOL);
    rc = WEIR_E_ABI;
    goto close;
  }
  const weir_plugin_desc *d = entry();
  if (!d) {
    weir_set_err(err, errlen, "%s: %s returned NULL, expected a descriptor; fix: return the "
           "address of a static const weir_plugin_desc", path, WEIR_PLUGIN_ENTRY_SYMBOL);
    rc = WEIR_E_ABI;
    goto close;
  }
  /* Everything up to and including `ops` is the 1.0 descriptor; read nothing before
   * knowing the plugin's struct holds it. A plugin built against an older minor has a
   * smaller descriptor: it is read through a host-sized copy whose newer fields are 0. */
  if (!WEIR_HAS_FIELD(d, weir_plugin_desc, ops)) {
    weir_set_err(err, errlen, "%s: descriptor struct_size is %u bytes, expected at least %zu (ABI "
           "%d.0); %s", path, (unsigned)d->struct_size, (size_t)WEIR_PLUGIN_DESC_SIZE_1_0,
           WEIR_ABI_MAJOR, k_rebuild);
    rc = WEIR_E_ABI;
    goto close;
  }
  weir_plugin_desc copy;
  memset(&copy, 0, sizeof copy);
  memcpy(&copy, d, d->struct_size < sizeof copy ? d->struct_size : sizeof copy);
  copy.struct_size = d->struct_size;
  d = &copy;
  if (d->abi_major != WEIR_ABI_MAJOR) {
    weir_set_err(err, errlen, "%s: built for plugin ABI %u.%u, expected ABI %d.x (the major "
           "version must match); %s", path, (unsigned)d->abi_major, (unsigned)d->abi_minor,
           WEIR_ABI_MAJOR, k_rebuild);
    rc = WEIR_E_ABI;
    goto close;
  }
  if (d->abi_minor > WEIR_ABI_MINOR) {
    weir_set_err(err, errlen, "%s: built for plugin ABI %u.%u, newer than this weir's %d.%d; "
           "fix: upgrade weir, or rebuild the plugin against this weir's SDK",
           path, (unsigned)d->abi_major, (unsigned)d->abi_minor, WEIR_ABI_MAJOR,
           WEIR_ABI_MINOR);
    rc = WEIR_E_ABI;
    goto close;
  }
  if (!d->build_signature || strcmp(d->build_signature, WEIR_BUILD_SIGNATURE) != 0) {
    weir_set_err(err, errlen, "%s: build signature \"%s\", expected \"%s\" (pointer size, byte "
           "order or SDK layout differ); %s with the same toolchain", path,
           d->build_signature ? d->build_signature : "(none)", WEIR_BUILD_SIGNATURE,
           k_rebuild);
    rc = WEIR_E_ABI;
    goto close;
  }
  if (!valid_kind((int)d->kind)) {
    weir_set_err(err, errlen, "%s: unknown plugin kind %d, expected 1..5 (device, attention, "
           "quant, sampler, drafter, cache); %s", path, (int)d->kind, k_rebuild);
    rc = WEIR_E_ABI;
    goto close;
  }
  if (!d->name || !*d->name) {
    weir_set_err(err, errlen, "%s: the descriptor has no name, expected one like \"my_sampler\"; "
           "fix: set weir_plugin_desc.name", path);
    rc = WEIR_E_ABI;
    goto close;
  }
  /* Device names (1.5): at most 16, each [a-z0-9_]+ or "*", NULL-terminated. */
  for (int i = 0; d->device_names; i++) {
    const char *nm = i < 16 ? d->device_names[i] : "";
    if (!nm) break;
    int ok = *nm && (!strcmp(nm, "*") || strspn(nm, "abcdefghijklmnopqrstuvwxyz0123456789_") ==
                                              strlen(nm));
    if (!ok || (d->kind == WEIR_PLUGIN_DEVICE && i == 0 && strcmp(nm, d->name) != 0)) {
      weir_set_err(err, errlen, "%s: %s plugin '%s': device_names[%d] is %s%s%s, expected %s; "
                    "fix: correct weir_plugin_desc.device_names", path,
                    weir_plugin_kind_name(d->kind), d->name, i, i < 16 ? "\"" : "",
                    i < 16 ? nm : "past 16 entries without the NULL end", i < 16 ? "\"" : "",
                    !ok ? "a device name ([a-z0-9_]+, or \"*\") and at most 16 of them"
                        : "the device plugin's own name first");
      rc = WEIR_E_ABI;
      goto close;
    }
  }
  const char *missing = !d->init ? "init" : !d->fini ? "fini" : !d->ops ? "ops" : NULL;
  if (missing) {
    weir_set_err(err, errlen, "%s: %s plugin '%s' has no %s callback, which is mandatory; fix: set "
           "weir_plugin_desc.%s", path, weir_plugin_kind_name(d->kind), d->name, missing,
           missing);
    rc = WEIR_E_ABI;
    goto close;
  }
  const char *ops_type;
  const op_field *ops = mandatory_ops(d->kind, &ops_type);
  uint32_t ops_size = *(const uint32_t *)d->ops;
  for (int i = 0; ops && ops[i].name; i++) {
    void *fn = NULL;
    if (ops_size >= ops[i].off + sizeof(void *))
      memcpy(&fn, (const char *)d->ops + ops[i].off, sizeof fn);
    if (!fn) {
      if (ops_size < ops[i].off + sizeof(void *))
        weir_set_err(err, errlen, "%s: %s plugin '%s': %s.struct_size is %u, too small to hold the "
               "mandatory callback %s; fix: set struct_size = sizeof(%s)", path,
               weir_plugin_kind_name(d->kind), d->name, ops_type, (unsigned)ops_size,
               ops[i].name, ops_type);
      else
        weir_set_err(err, errlen, "%s: %s plugin '%s': mandatory callback %s.%s is NULL, expected "
               "a function; fix: implement %s", path, weir_plugin_kind_name(d->kind), d->name,
               ops_type, ops[i].name, ops[i].name);
      rc = WEIR_E_ABI;
      goto close;
    }
  }
  weir_plugin_score_fn score;
  *(void **)&score = dlsym(dl, WEIR_PLUGIN_SCORE_SYMBOL);
  int s = 0;
  if (score) {
    s = score();
    if (s < 0) {
      weir_set_err(err, errlen, "%s: %s plugin '%s' cannot run on this machine (%s returned %d, "
             "expected >= 0); fix: use a build of it for this machine (e.g. without the CPU "
             "features it needs)", path, weir_plugin_kind_name(d->kind), d->name,
             WEIR_PLUGIN_SCORE_SYMBOL, s);
      rc = WEIR_E_NOTSUP;
      goto close;
    }
  }
  *dl_out = dl;
  *desc_out = copy;
  if (score_out) *score_out = s;
  return WEIR_OK;
close:
  dlclose(dl);
  return rc;
}

/* ---- formatting --------------------------------------------------------------------------- */

void weir_plugin_devices_str(const weir_plugin_desc *d, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = 0;
  if (d->device_names) {
    for (int i = 0; d->device_names[i] && off < len; i++)
      off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "",
                              !strcmp(d->device_names[i], "*") ? "any" : d->device_names[i]);
  } else {
    snprintf(buf, len, "%s%s%s", d->devices & WEIR_DEVICE_CPU ? "cpu" : "",
             (d->devices & WEIR_DEVICE_CPU) && (d->devices & WEIR_DEVICE_CUDA) ? ", " : "",
             d->devices & WEIR_DEVICE_CUDA ? "cuda" : "");
  }
  if (!buf[0]) snprintf(buf, len, "-");
}

/* ---- devices by name (ABI 1.5) ------------------------------------------------------------ */

/* 1 when the plugin runs on the device called `name`: by its declared names (1.5), else by
 * the 1.0 bit of the name (cpu, cuda). */
static int runs_on(const weir_plugin_desc *d, const char *name) {
  if (!name || !*name) return 0;
  if (d->device_names) {
    for (int i = 0; d->device_names[i]; i++)
      if (!strcmp(d->device_names[i], name) || !strcmp(d->device_names[i], "*")) return 1;
    return 0;
  }
  return (d->devices & weir_config_device_kind(name)) != 0;
}

/* The further names of the device plugin: devices whose plugins run on its memory (up to
 * `max`; the device_names after the first). */
static int device_compat(const weir_plugin *device, const char **out, int max) {
  int n = 0;
  const char *const *v = device && device->desc ? device->desc->device_names : NULL;
  for (int i = 1; v && v[0] && v[i] && n < max; i++)
    if (strcmp(v[i], "*") != 0) out[n++] = v[i];
  return n;
}

/* "cpu, cuda, sim": the devices the device plugins in the search path provide. */
static void devices_found(const weir_plugin_dirs *dirs, char *buf, size_t len) {
  weir_plugin_found *f = NULL;
  int n = 0;
  size_t off = 0;
  buf[0] = 0;
  if (weir_plugin_scan(dirs, &f, &n) == WEIR_OK)
    for (int i = 0; i < n && off < len; i++) {
      if (!f[i].desc || f[i].error || f[i].desc->kind != WEIR_PLUGIN_DEVICE) continue;
      int seen = 0; /* the same device in two directories is named once */
      for (int j = 0; j < i && !seen; j++)
        seen = f[j].desc && !f[j].error && f[j].desc->kind == WEIR_PLUGIN_DEVICE &&
               !strcmp(f[j].desc->name, f[i].desc->name);
      if (!seen)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", f[i].desc->name);
    }
  weir_plugin_scan_free(f, n);
  if (!buf[0]) snprintf(buf, len, "none");
}

static const char *dtype_label(int t) {
  return t == WEIR_DTYPE_I8 ? "int8" : weir_dtype_name((weir_dtype)t);
}

void weir_plugin_dtypes_str(uint64_t dtypes, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = 0;
  for (int t = 0; t < 64 && off < len; t++) {
    int real = t == 63 ? WEIR_DTYPE_FP8_E4M3 : t;
    if (!(dtypes & ((uint64_t)1 << t)) || !strcmp(dtype_label(real), "?")) continue;
    off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", dtype_label(real));
  }
  if (!buf[0]) snprintf(buf, len, "-");
}

static const char *opt_type_name(weir_option_type t) {
  switch (t) {
  case WEIR_OPT_BOOL: return "bool";
  case WEIR_OPT_INT: return "int";
  case WEIR_OPT_FLOAT: return "float";
  case WEIR_OPT_STRING: return "string";
  default: return "?";
  }
}

static void fmt_num(char *buf, size_t len, double v, weir_option_type t) {
  if (t == WEIR_OPT_INT) snprintf(buf, len, "%" PRId64, (int64_t)v);
  else snprintf(buf, len, "%g", v);
}

static void choices_str(const char *const *c, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = 0;
  for (int i = 0; c && c[i] && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", c[i]);
}

static void opt_default_str(const weir_option_desc *o, char *buf, size_t len) {
  switch (o->type) {
  case WEIR_OPT_BOOL: snprintf(buf, len, "%s", o->def_bool ? "true" : "false"); break;
  case WEIR_OPT_INT: snprintf(buf, len, "%" PRId64, o->def_int); break;
  case WEIR_OPT_FLOAT: snprintf(buf, len, "%g", o->def_float); break;
  case WEIR_OPT_STRING: snprintf(buf, len, "\"%s\"", o->def_string ? o->def_string : ""); break;
  default: snprintf(buf, len, "?");
  }
}

static void opt_range_str(const weir_option_desc *o, char *buf, size_t len) {
  char a[32], b[32];
  buf[0] = 0;
  if ((o->type == WEIR_OPT_INT || o->type == WEIR_OPT_FLOAT) && o->min < o->max) {
    fmt_num(a, sizeof a, o->min, o->type);
    fmt_num(b, sizeof b, o->max, o->type);
    snprintf(buf, len, "[%s, %s]", a, b);
  } else if (o->type == WEIR_OPT_STRING && o->choices) {
    choices_str(o->choices, buf, len);
  } else {
    snprintf(buf, len, "-");
  }
}

void weir_plugin_print_options(const weir_plugin_desc *d, FILE *f) {
  if (!d->num_options || !d->options) {
    fprintf(f, "  (no options)\n");
    return;
  }
  fprintf(f, "  %-20s %-7s %-12s %-22s %s\n", "key", "type", "default", "range/choices", "help");
  for (int i = 0; i < d->num_options; i++) {
    const weir_option_desc *o = &d->options[i];
    char def[64], range[256];
    opt_default_str(o, def, sizeof def);
    opt_range_str(o, range, sizeof range);
    fprintf(f, "  %-20s %-7s %-12s %-22s %s\n", o->key ? o->key : "?", opt_type_name(o->type),
            def, range, o->help ? o->help : "");
  }
}

void weir_plugin_write_options(const weir_plugin *p, FILE *f) {
  const weir_plugin_desc *d = p->desc;
  for (int i = 0; p->options && i < d->num_options; i++) {
    const weir_option_desc *o = &d->options[i];
    const weir_option_value *v = &p->options[i];
    fprintf(f, "%s = ", o->key);
    switch (o->type) {
    case WEIR_OPT_BOOL: fputs(v->b ? "true" : "false", f); break;
    case WEIR_OPT_INT: fprintf(f, "%" PRId64, v->i); break;
    case WEIR_OPT_FLOAT: {
      char buf[64];
      snprintf(buf, sizeof buf, "%.15g", v->f);
      if (!strpbrk(buf, ".eEni")) strcat(buf, ".0");
      fputs(buf, f);
      break;
    }
    case WEIR_OPT_STRING: weir_toml_write_string(f, v->s); break;
    }
    fprintf(f, "  # %s option of %s%s\n", v->is_set ? "set:" : "default:", d->name,
            v->is_set ? "" : " (not set)");
  }
}

/* ---- options ------------------------------------------------------------------------------ */

static int is_core_key(const char *section, const char *key) {
  return weir_config_is_core_key(section, key);
}

/* Validates `table` against the plugin's option table and resolves one value per declared
 * option (defaults filled). Strings are copied into *strs (owned by the caller). */
static int resolve_options(const weir_plugin_desc *d, const char *path, const char *section,
                           const weir_toml_node *table, weir_option_value **out_vals,
                           char ***out_strs, char *err, size_t errlen) {
  int n = d->options ? d->num_options : 0, rc = WEIR_OK;
  const char *sec = section ? section : weir_plugin_kind_name(d->kind);
  weir_option_value *vals = NULL;
  char **strs = NULL;
  if (n < 0) n = 0;
  if (n) {
    vals = calloc((size_t)n, sizeof *vals);
    strs = calloc((size_t)n, sizeof *strs);
    if (!vals || !strs) {
      rc = WEIR_E_NOMEM;
      weir_set_err(err, errlen, "%s: out of memory", path);
      goto fail;
    }
  }
  for (int i = 0; i < n; i++) {
    const weir_option_desc *o = &d->options[i];
    vals[i].i = o->def_int;
    vals[i].f = o->def_float;
    vals[i].b = o->def_bool ? 1 : 0;
    if (o->type == WEIR_OPT_STRING || o->def_string) {
      if (!(strs[i] = strdup(o->def_string ? o->def_string : ""))) {
        rc = WEIR_E_NOMEM;
        weir_set_err(err, errlen, "%s: out of memory", path);
        goto fail;
      }
      vals[i].s = strs[i];
    }
  }
  for (int t = 0; table && table->type == WEIR_TOML_TABLE && t < table->num_items; t++) {
    const weir_toml_node *v = table->items[t];
    if (is_core_key(section, v->key)) continue;
    int idx = -1;
    for (int i = 0; i < n; i++)
      if (d->options[i].key && !strcmp(d->options[i].key, v->key)) idx = i;
    if (idx < 0) {
      char keys[512];
      size_t off = 0;
      keys[0] = 0;
      for (int i = 0; i < n && off < sizeof keys; i++)
        off += (size_t)snprintf(keys + off, sizeof keys - off, "%s%s", i ? ", " : "",
                                d->options[i].key);
      weir_set_err(err, errlen, "%s.%s: unknown option of %s plugin '%s' (%s); it declares %s%s; "
             "fix: remove the key or correct its spelling (weir plugins --help %s)",
             sec, v->key, weir_plugin_kind_name(d->kind), d->name, path,
             n ? "these options: " : "no options", n ? keys : "", d->name);
      rc = WEIR_E_NOTFOUND;
      goto fail;
    }
    const weir_option_desc *o = &d->options[idx];
    weir_option_value *r = &vals[idx];
    char lo[32], hi[32], range[256];
    switch (o->type) {
    case WEIR_OPT_BOOL:
      if (v->type != WEIR_TOML_BOOL) goto wrong_type;
      r->b = v->b;
      break;
    case WEIR_OPT_INT:
      if (v->type != WEIR_TOML_INT) goto wrong_type;
      if (o->min < o->max && ((double)v->i < o->min || (double)v->i > o->max)) {
        fmt_num(lo, sizeof lo, o->min, o->type);
        fmt_num(hi, sizeof hi, o->max, o->type);
        weir_set_err(err, errlen, "%s.%s: %" PRId64 " is out of range [%s, %s] (option of %s "
               "plugin '%s')", sec, v->key, v->i, lo, hi, weir_plugin_kind_name(d->kind),
               d->name);
        rc = WEIR_E_RANGE;
        goto fail;
      }
      r->i = v->i;
      r->f = (double)v->i;
      break;
    case WEIR_OPT_FLOAT: {
      double x;
      if (v->type == WEIR_TOML_FLOAT) x = v->f;
      else if (v->type == WEIR_TOML_INT) x = (double)v->i;
      else goto wrong_type;
      if (o->min < o->max && (x < o->min || x > o->max || x != x)) {
        fmt_num(lo, sizeof lo, o->min, o->type);
        fmt_num(hi, sizeof hi, o->max, o->type);
        weir_set_err(err, errlen, "%s.%s: %g is out of range [%s, %s] (option of %s plugin '%s')",
               sec, v->key, x, lo, hi, weir_plugin_kind_name(d->kind), d->name);
        rc = WEIR_E_RANGE;
        goto fail;
      }
      r->f = x;
      break;
    }
    case WEIR_OPT_STRING: {
      if (v->type != WEIR_TOML_STRING) goto wrong_type;
      int ok = !o->choices;
      for (int c = 0; o->choices && o->choices[c]; c++)
        if (!strcmp(o->choices[c], v->s)) ok = 1;
      if (!ok) {
        choices_str(o->choices, range, sizeof range);
        weir_set_err(err, errlen, "%s.%s: \"%s\" is not one of %s (option of %s plugin '%s')", sec,
               v->key, v->s, range, weir_plugin_kind_name(d->kind), d->name);
        rc = WEIR_E_INVAL;
        goto fail;
      }
      char *s = strdup(v->s);
      if (!s) {
        rc = WEIR_E_NOMEM;
        weir_set_err(err, errlen, "%s: out of memory", path);
        goto fail;
      }
      free(strs[idx]);
      strs[idx] = s;
      r->s = s;
      break;
    }
    default:
      weir_set_err(err, errlen, "%s: option '%s' of plugin '%s' declares unknown type %d; %s", path,
             o->key, d->name, (int)o->type, k_rebuild);
      rc = WEIR_E_ABI;
      goto fail;
    }
    r->is_set = 1;
    continue;
  wrong_type:
    weir_set_err(err, errlen, "%s.%s: expected %s, found %s (option of %s plugin '%s')", sec, v->key,
           o->type == WEIR_OPT_BOOL    ? "true or false"
           : o->type == WEIR_OPT_INT   ? "an integer"
           : o->type == WEIR_OPT_FLOAT ? "a number"
                                       : "a string",
           weir_toml_type_name(v->type), weir_plugin_kind_name(d->kind), d->name);
    rc = WEIR_E_INVAL;
    goto fail;
  }
  *out_vals = vals;
  *out_strs = strs;
  return WEIR_OK;
fail:
  for (int i = 0; strs && i < n; i++) free(strs[i]);
  free(strs);
  free(vals);
  return rc;
}

/* ---- resolving a name to a file ----------------------------------------------------------- */

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A build variant of `base` ("weir_quant_int8"): base.so itself, or base.<variant>.so with a
 * variant of [a-z0-9_]+. */
static int is_variant_of(const char *file, const char *base) {
  size_t bl = strlen(base), fl = strlen(file);
  if (strncmp(file, base, bl) != 0) return 0;
  if (!strcmp(file + bl, ".so")) return 1;
  if (file[bl] != '.' || fl < bl + 5 || strcmp(file + fl - 3, ".so") != 0) return 0;
  for (size_t i = bl + 1; i < fl - 3; i++)
    if (!((file[i] >= 'a' && file[i] <= 'z') || (file[i] >= '0' && file[i] <= '9') ||
          file[i] == '_'))
      return 0;
  return 1;
}

typedef struct candidate {
  char *path;
  char *file; /* points into path */
  char real[PATH_MAX];
} candidate;

static int cmp_candidate(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  size_t lx = strlen(x->file), ly = strlen(y->file);
  /* The plain file (the shortest name) first, then by name. */
  if (lx != ly && (lx < ly ? !strncmp(x->file, y->file, lx - 3) : !strncmp(y->file, x->file, ly - 3)))
    return lx < ly ? -1 : 1;
  return strcmp(x->file, y->file);
}

/* Every variant of `base` in the search path. The same file name in two directories (not the
 * same file) is an error; otherwise *out gets the candidates, sorted. */
static int find_candidates(const weir_plugin_request *req, const char *base, candidate **out,
                           int *count, char *err, size_t errlen) {
  candidate *c = NULL;
  int n = 0, rc = WEIR_OK;
  for (int i = 0; req->dirs && i < req->dirs->num && rc == WEIR_OK; i++) {
    DIR *dir = opendir(req->dirs->dirs[i]);
    if (!dir) continue;
    struct dirent *e;
    while (rc == WEIR_OK && (e = readdir(dir))) {
      if (!is_variant_of(e->d_name, base)) continue;
      char path[PATH_MAX];
      snprintf(path, sizeof path, "%s/%s", req->dirs->dirs[i], e->d_name);
      if (!is_file(path)) continue;
      char real[PATH_MAX];
      if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
      int dup = -1;
      for (int k = 0; k < n; k++)
        if (!strcmp(c[k].file, e->d_name)) dup = k;
      if (dup >= 0) {
        if (strcmp(c[dup].real, real) != 0) {
          weir_set_err(err, errlen, "%s plugin '%s' is provided twice: %s and %s (both named %s "
                        "in the search path); expected exactly one; fix: remove one of them, or "
                        "choose one with %s.path", weir_plugin_kind_name(req->kind), req->name,
                        c[dup].path, path, e->d_name,
                        req->section ? req->section : weir_plugin_kind_name(req->kind));
          rc = WEIR_E_EXISTS;
        }
        continue;
      }
      candidate *nc = realloc(c, sizeof *c * (size_t)(n + 1));
      if (!nc || !(nc[n].path = strdup(path))) {
        c = nc ? nc : c;
        weir_set_err(err, errlen, "out of memory");
        rc = WEIR_E_NOMEM;
        break;
      }
      c = nc;
      c[n].file = strrchr(c[n].path, '/') + 1;
      snprintf(c[n].real, sizeof c[n].real, "%s", real);
      n++;
    }
    closedir(dir);
  }
  if (rc != WEIR_OK) {
    for (int k = 0; k < n; k++) free(c[k].path);
    free(c);
    return rc;
  }
  if (n > 1) qsort(c, (size_t)n, sizeof *c, cmp_candidate);
  *out = c;
  *count = n;
  return WEIR_OK;
}

/* Among several variants, the one with the highest weir_plugin_score that passes every check
 * (the first of equals: the plain file, then by name). */
static int pick_variant(const weir_plugin_request *req, candidate *c, int n, char **out,
                        char *err, size_t errlen) {
  int best = -1, best_score = 0, rc = WEIR_OK;
  char first_err[1024] = "";
  for (int k = 0; k < n; k++) {
    void *dl = NULL;
    weir_plugin_desc d;
    int score = 0;
    char why[1024];
    int prc = weir_plugin_probe(c[k].path, &dl, &d, &score, why, sizeof why);
    if (prc != WEIR_OK) {
      weir_log(WEIR_LOG_DEBUG, "loader", "variant %s not used: %s", c[k].path, why);
      if (!first_err[0]) {
        snprintf(first_err, sizeof first_err, "%s", why);
        rc = prc;
      }
      continue;
    }
    dlclose(dl);
    if (best < 0 || score > best_score) {
      best = k;
      best_score = score;
    }
  }
  if (best < 0) {
    weir_set_err(err, errlen, "no variant of %s plugin '%s' can be used here (%d found); the "
                  "first: %s", weir_plugin_kind_name(req->kind), req->name, n, first_err);
    return rc;
  }
  *out = c[best].path;
  c[best].path = NULL;
  return WEIR_OK;
}

static int find_file(const weir_plugin_request *req, char **out, char *err, size_t errlen) {
  const char *kind = weir_plugin_kind_name(req->kind);
  char names[6][256];
  int num_names = 0;
  /* A device plugin's name already is the device: no _<device> variant for it. Otherwise
   * the device's own build, then one for a device whose plugins run on it (ABI 1.5), then
   * the plain file. */
  if (req->device_name && *req->device_name && req->kind != WEIR_PLUGIN_DEVICE) {
    const char *compat[4];
    int nc = device_compat(req->device_plugin, compat, 4);
    snprintf(names[num_names++], sizeof names[0], "weir_%s_%s_%s", kind, req->name,
             req->device_name);
    for (int i = 0; i < nc; i++)
      snprintf(names[num_names++], sizeof names[0], "weir_%s_%s_%s", kind, req->name,
               compat[i]);
  }
  snprintf(names[num_names++], sizeof names[0], "weir_%s_%s", kind, req->name);
  for (int k = 0; k < num_names; k++) {
    candidate *c = NULL;
    int n = 0;
    int rc = find_candidates(req, names[k], &c, &n, err, errlen);
    if (rc != WEIR_OK) return rc;
    if (n == 1) { /* the usual case: its own checks, with their own messages, at load */
      *out = c[0].path;
      c[0].path = NULL;
    } else if (n > 1) {
      rc = pick_variant(req, c, n, out, err, errlen);
    }
    for (int i = 0; i < n; i++) free(c[i].path);
    free(c);
    if (n > 0) return rc;
  }
  char dirs[1024], looked[1024];
  dirs_str(req->dirs, dirs, sizeof dirs);
  size_t off = 0;
  looked[0] = 0;
  for (int k = 0; k < num_names && off < sizeof looked; k++)
    off += (size_t)snprintf(looked + off, sizeof looked - off, "%s%s.so",
                            k == 0 ? "" : k + 1 < num_names ? ", " : " and ", names[k]);
  if (req->kind == WEIR_PLUGIN_DEVICE) {
    /* The devices are whatever device plugins are installed: name the ones there are. */
    char found[512];
    devices_found(req->dirs, found, sizeof found);
    weir_set_err(err, errlen, "no device '%s': looked for %s in %s; the device plugins found "
                  "provide: %s; fix: set device.name to one of them, or add the directory of "
                  "the device's plugin with plugins.dirs, --plugin-dir or WEIR_PLUGIN_PATH",
                  req->name, looked, dirs, found);
    return WEIR_E_NOTFOUND;
  }
  weir_set_err(err, errlen, "no %s plugin '%s': looked for %s in %s; fix: check the "
         "name (`weir plugins` lists what is installed), or add its directory with "
         "plugins.dirs, --plugin-dir or WEIR_PLUGIN_PATH", kind, req->name, looked, dirs);
  return WEIR_E_NOTFOUND;
}

/* ---- loading one plugin ------------------------------------------------------------------- */

int weir_plugin_load(const weir_plugin_request *req, weir_plugin **out, char *err,
                     size_t errlen) {
  int rc;
  char *path = NULL;
  weir_plugin *p = NULL;
  const char *kind = weir_plugin_kind_name(req->kind);
  const char *sec = req->section ? req->section : kind;
  *out = NULL;
  if (req->path && *req->path) {
    if (!(path = strdup(req->path))) {
      weir_set_err(err, errlen, "out of memory");
      return WEIR_E_NOMEM;
    }
  } else if ((rc = find_file(req, &path, err, errlen)) != WEIR_OK) {
    return rc;
  }
  if (!(p = calloc(1, sizeof *p))) {
    rc = WEIR_E_NOMEM;
    weir_set_err(err, errlen, "out of memory");
    goto free_path;
  }
  p->path = path;
  path = NULL;
  rc = weir_plugin_probe(p->path, &p->dl, &p->desc_copy, &p->score, err, errlen);
  if (rc != WEIR_OK) goto free_plugin;
  p->desc = &p->desc_copy;
  const weir_plugin_desc *d = p->desc;
  if (d->kind != req->kind) {
    weir_set_err(err, errlen, "%s: declares a %s plugin ('%s'), expected a %s plugin for %s; fix: "
           "select it in [%s] instead, or point %s.path at a %s plugin", p->path,
           weir_plugin_kind_name(d->kind), d->name, kind, sec,
           weir_plugin_kind_name(d->kind), sec, kind);
    rc = WEIR_E_INVAL;
    goto close;
  }
  if (!(req->path && *req->path) && req->name && strcmp(d->name, req->name) != 0) {
    weir_set_err(err, errlen, "%s: declares the name '%s', expected '%s' (its file name); fix: "
           "rename the file weir_%s_%s.so or the plugin", p->path, d->name, req->name, kind,
           d->name);
    rc = WEIR_E_INVAL;
    goto close;
  }
  /* An option named like one of the core's keys of its table could never be set. */
  for (int i = 0; d->options && i < d->num_options; i++) {
    if (d->options[i].key && is_core_key(kind, d->options[i].key)) {
      weir_set_err(err, errlen, "%s: %s plugin '%s' declares an option '%s', which is a key weir "
             "itself reads in [%s]; expected option keys other than the core's; fix: rename "
             "the option", p->path, kind, d->name, d->options[i].key, kind);
      rc = WEIR_E_ABI;
      goto close;
    }
  }
  /* The device by name (ABI 1.5): the plugin runs on it, or on a device whose plugins the
   * device plugin declares it runs (a simulator in host memory runs the cpu plugins). */
  const char *compat[4];
  int ncompat = req->kind == WEIR_PLUGIN_DEVICE ? 0 : device_compat(req->device_plugin, compat, 4);
  unsigned dev = weir_config_device_kind(req->device_name);
  for (int i = 0; i < ncompat && !dev; i++) dev = weir_config_device_kind(compat[i]);
  if (!req->device_name || !*req->device_name) dev = WEIR_DEVICE_CPU; /* none asked: the host */
  int fits = !req->device_name || !*req->device_name || runs_on(d, req->device_name) ||
             (req->kind == WEIR_PLUGIN_DEVICE && !strcmp(d->name, req->device_name));
  for (int i = 0; i < ncompat && !fits; i++) fits = runs_on(d, compat[i]);
  if (!fits) {
    char have[256];
    weir_plugin_devices_str(d, have, sizeof have);
    weir_set_err(err, errlen, "%s: %s plugin '%s' runs on %s, expected %s (device.name = \"%s\"); "
           "fix: choose a %s plugin built for %s, or set device.name to a device it supports",
           p->path, kind, d->name, have, req->device_name, req->device_name, kind,
           req->device_name);
    rc = WEIR_E_NOTSUP;
    goto close;
  }
  if (req->check_dtype && !(d->dtypes & WEIR_DTYPE_BIT(req->dtype))) {
    char have[256];
    weir_plugin_dtypes_str(d->dtypes, have, sizeof have);
    weir_set_err(err, errlen, "%s: %s plugin '%s' supports KV dtypes %s, expected %s (%s.kv_dtype); "
           "fix: set %s.kv_dtype to one of %s, or choose another backend", p->path, kind,
           d->name, have, dtype_label(req->dtype), sec, sec, have);
    rc = WEIR_E_NOTSUP;
    goto close;
  }
  rc = resolve_options(d, p->path, req->section, req->table, &p->options, &p->option_strings,
                       err, errlen);
  if (rc != WEIR_OK) goto close;
  if (!(p->ops_copy = copy_ops(d->kind, d->ops))) {
    rc = WEIR_E_NOMEM;
    weir_set_err(err, errlen, "%s: out of memory", p->path);
    goto close;
  }
  p->ops = p->ops_copy;
  if (req->no_init) {
    *out = p;
    return WEIR_OK;
  }
  p->host = weir__plugin_host_create(d->name, d->kind, req->metrics, req->device_plugin,
                                     req->pool);
  if (!p->host) {
    rc = WEIR_E_NOMEM;
    weir_set_err(err, errlen, "%s: out of memory", p->path);
    goto close;
  }
  weir__plugin_host_set_options(p->host, d->options, p->options, d->num_options);
  weir_plugin_args args = {.struct_size = sizeof args,
                           .device = (weir_device_kind)dev, /* 0: a device of its own */
                           .options = p->options,
                           .num_options = p->options ? d->num_options : 0,
                           .device_name = req->device_name};
  void *self = NULL;
  rc = d->init(&p->host->host, &args, &self);
  if (rc != WEIR_OK) {
    char why[512];
    if (weir__plugin_host_take_error(p->host, why, sizeof why))
      weir_set_err(err, errlen, "%s: %s plugin '%s' failed to initialise: %s (init returned %d, "
                   "%s); fix: correct [%s] as the message says (weir plugins --help %s)",
                   p->path, kind, d->name, why, rc, weir_strerror(rc), sec, d->name);
    else
      weir_set_err(err, errlen, "%s: %s plugin '%s' failed to initialise: init returned %d (%s); "
                   "expected 0; fix: see the plugin's own log line above for the cause", p->path,
                   kind, d->name, rc, weir_strerror(rc));
    rc = WEIR_E_PLUGIN;
    goto free_host;
  }
  p->self = self;
  *out = p;
  return WEIR_OK;
free_host:
  weir__plugin_host_destroy(p->host);
  p->host = NULL;
close:
  weir_plugin_unload(p);
  return rc;
free_plugin:
  free(p->path);
  free(p);
free_path:
  free(path);
  return rc;
}

void weir_plugin_unload(weir_plugin *p) {
  if (!p) return;
  if (p->host) {
    p->desc->fini(p->self);
    int64_t hb = atomic_load(&p->host->host_bytes), db = atomic_load(&p->host->device_bytes);
    if (hb || db)
      weir_log(WEIR_LOG_WARN, "loader",
               "plugin '%s' (%s) left %" PRId64 " bytes of host memory and %" PRId64
               " bytes of device memory allocated after fini",
               p->desc->name, p->path, hb, db);
    weir__plugin_host_destroy(p->host);
  }
  for (int i = 0; p->option_strings && i < p->desc->num_options; i++) free(p->option_strings[i]);
  free(p->option_strings);
  free(p->options);
  free(p->ops_copy);
  if (p->dl) dlclose(p->dl);
  free(p->path);
  free(p);
}

int weir_plugin_take_error(const weir_plugin *p, char *buf, size_t len) {
  if (buf && len) buf[0] = 0;
  return p && p->host ? weir__plugin_host_take_error(p->host, buf, len) : 0;
}

int weir_plugin_append_error(const weir_plugin *p, char *err, size_t errlen) {
  char why[512];
  if (!err || !errlen || !weir_plugin_take_error(p, why, sizeof why)) return 0;
  size_t used = strlen(err);
  if (used + 1 < errlen)
    snprintf(err + used, errlen - used, "%s%s", used ? ": " : "", why);
  return 1;
}

void weir_plugin_memory(const weir_plugin *p, int64_t *host_bytes, int64_t *device_bytes) {
  *host_bytes = p && p->host ? atomic_load(&p->host->host_bytes) : 0;
  *device_bytes = p && p->host ? atomic_load(&p->host->device_bytes) : 0;
}

/* ---- the configured set ------------------------------------------------------------------- */

/* [cache] is the KV cache's table and also selects the response-cache plugin, which the HTTP
 * layer loads itself (docs/response-cache.md). Here its keys are checked all the same: with
 * no plugin selected, a key that is not the core's is a mistake (a misspelt KV-cache key)
 * and refused; with one selected and `check` (weir config check), the plugin is opened and
 * its options validated without init. */
static int check_response_cache(const weir_config *cfg, const weir_plugin_dirs *dirs, int check,
                                char *err, size_t errlen) {
  const weir_plugin_sel *sel = &cfg->response_cache;
  const int off = (!sel->name || !*sel->name || !strcmp(sel->name, "off")) &&
                  !(sel->path && *sel->path);
  if (off) {
    for (int i = 0; sel->table && i < sel->table->num_items; i++) {
      const char *key = sel->table->items[i]->key;
      if (weir_config_is_core_key("cache", key)) continue;
      weir_set_err(err, errlen, "unknown key 'cache.%s': not a KV-cache key, and no response "
                   "cache is selected to take it as an option (cache.name is \"off\"); fix: "
                   "correct the key, or set cache.name", key);
      return WEIR_E_NOTFOUND;
    }
    return WEIR_OK;
  }
  if (!check) return WEIR_OK;
  weir_plugin_request req = {.kind = WEIR_PLUGIN_CACHE, .name = sel->name, .path = sel->path,
                             .dirs = dirs, .table = sel->table, .section = "cache",
                             .device_name = "cpu", .no_init = 1};
  weir_plugin *p = NULL;
  int rc = weir_plugin_load(&req, &p, err, errlen);
  weir_plugin_unload(p);
  return rc;
}

static int set_load(const weir_config *cfg, weir_metrics *metrics, weir_plugin_set *out,
                    int no_init, char *err, size_t errlen) {
  int rc;
  weir_plugin_dirs dirs;
  weir_plugin_set s;
  memset(&s, 0, sizeof s);
  memset(out, 0, sizeof *out);
  if ((rc = weir_plugin_dirs_get(cfg, &dirs)) != WEIR_OK) {
    weir_set_err(err, errlen, "out of memory");
    return rc;
  }
  if ((rc = check_response_cache(cfg, &dirs, no_init, err, errlen)) != WEIR_OK) goto free_dirs;
  if ((rc = weir_threadpool_create(cfg->threads, &s.pool)) != WEIR_OK) {
    weir_set_err(err, errlen, "cannot start the CPU thread pool (device.threads = %d): %s",
           cfg->threads, weir_strerror(rc));
    goto free_dirs;
  }
  struct {
    weir_plugin_kind kind;
    const char *section;
    const weir_plugin_sel *sel;
    weir_plugin **slot;
  } order[] = {
      {WEIR_PLUGIN_DEVICE, "device", &cfg->device, &s.device},
      {WEIR_PLUGIN_ATTENTION, "attention", &cfg->attention, &s.attention},
      {WEIR_PLUGIN_QUANT, "quant", &cfg->quant, &s.quant},
      {WEIR_PLUGIN_SAMPLER, "sampler", &cfg->sampler, &s.sampler},
      {WEIR_PLUGIN_DRAFTER, "drafter", &cfg->drafter, &s.drafter},
  };
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const weir_plugin_sel *sel = order[i].sel;
    int has_path = sel->path && *sel->path;
    if (order[i].kind == WEIR_PLUGIN_DRAFTER && !has_path && (!sel->name || !*sel->name))
      continue; /* no drafter configured */
    /* quant.scheme "auto" is resolved against the model by those who open it (engine,
     * perplexity: format/quant_auto.h); without a model it means fp16. */
    const char *name = sel->name;
    if (order[i].kind == WEIR_PLUGIN_QUANT && !has_path && name && !strcmp(name, "auto"))
      name = "fp16";
    weir_plugin_request req = {
        .kind = order[i].kind,
        .name = name,
        .path = sel->path,
        .dirs = &dirs,
        .table = sel->table,
        .section = order[i].section,
        .device_name = cfg->device.name,
        .check_dtype = order[i].kind == WEIR_PLUGIN_ATTENTION,
        .dtype = cfg->kv_dtype,
        .metrics = metrics,
        .device_plugin = s.device,
        .pool = s.pool,
        .no_init = no_init,
    };
    rc = weir_plugin_load(&req, order[i].slot, err, errlen);
    if (rc != WEIR_OK) goto unload;
    const weir_plugin *lp = *order[i].slot;
    weir_log(WEIR_LOG_DEBUG, "loader", "loaded %s plugin '%s' %s%s%s from %s (score %d)",
             order[i].section, lp->desc->name, lp->desc->version ? lp->desc->version : "",
             lp->desc->variant ? ", variant " : "", lp->desc->variant ? lp->desc->variant : "",
             lp->path, lp->score);
  }
  *out = s;
  weir_plugin_dirs_free(&dirs);
  return WEIR_OK;
unload:
  weir_plugin_set_unload(&s);
free_dirs:
  weir_plugin_dirs_free(&dirs);
  return rc;
}

int weir_plugin_set_load_ex(const weir_config *cfg, weir_metrics *metrics,
                            weir_plugin_set *out, char *err, size_t errlen) {
  return set_load(cfg, metrics, out, 0, err, errlen);
}

int weir_plugin_set_check(const weir_config *cfg, weir_plugin_set *out, char *err,
                          size_t errlen) {
  return set_load(cfg, NULL, out, 1, err, errlen);
}

int weir_plugin_set_load(const weir_config *cfg, weir_metrics *metrics, weir_plugin_set *out) {
  char err[2048];
  int rc = weir_plugin_set_load_ex(cfg, metrics, out, err, sizeof err);
  if (rc != WEIR_OK) weir_log(WEIR_LOG_ERROR, "loader", "%s", err);
  return rc;
}

void weir_plugin_set_unload(weir_plugin_set *s) {
  if (!s) return;
  weir_plugin_unload(s->drafter);
  weir_plugin_unload(s->sampler);
  weir_plugin_unload(s->quant);
  weir_plugin_unload(s->attention);
  weir_plugin_unload(s->device);
  weir_threadpool_destroy(s->pool);
  memset(s, 0, sizeof *s);
}

/* ---- listing ------------------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int weir_plugin_scan(const weir_plugin_dirs *dirs, weir_plugin_found **out, int *count) {
  weir_plugin_found *v = NULL;
  int n = 0, rc = WEIR_OK;
  for (int i = 0; dirs && i < dirs->num; i++) {
    DIR *dir = opendir(dirs->dirs[i]);
    if (!dir) continue;
    char **names = NULL;
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
      size_t l = strlen(e->d_name);
      if (strncmp(e->d_name, "weir_", 5) != 0 || l < 4 || strcmp(e->d_name + l - 3, ".so"))
        continue;
      char **nn2 = realloc(names, sizeof *names * (size_t)(nn + 1));
      if (!nn2 || !(nn2[nn] = strdup(e->d_name))) {
        names = nn2 ? nn2 : names;
        rc = WEIR_E_NOMEM;
        break;
      }
      names = nn2;
      nn++;
    }
    closedir(dir);
    if (nn) qsort(names, (size_t)nn, sizeof *names, cmp_str);
    for (int k = 0; k < nn && rc == WEIR_OK; k++) {
      weir_plugin_found *nv = realloc(v, sizeof *v * (size_t)(n + 1));
      if (!nv) {
        rc = WEIR_E_NOMEM;
        break;
      }
      v = nv;
      weir_plugin_found *f = &v[n];
      memset(f, 0, sizeof *f);
      size_t len = strlen(dirs->dirs[i]) + strlen(names[k]) + 2;
      if (!(f->path = malloc(len))) {
        rc = WEIR_E_NOMEM;
        break;
      }
      n++;
      snprintf(f->path, len, "%s/%s", dirs->dirs[i], names[k]);
      char err[1024];
      weir_plugin_desc copy;
      if (weir_plugin_probe(f->path, &f->dl, &copy, &f->score, err, sizeof err) != WEIR_OK) {
        f->desc = NULL;
        f->dl = NULL;
        f->error = strdup(err);
        if (!f->error) rc = WEIR_E_NOMEM;
      } else if (!(f->desc = malloc(sizeof copy))) {
        rc = WEIR_E_NOMEM;
      } else {
        *f->desc = copy;
        /* The file name promises a kind; a descriptor that says otherwise cannot be
         * selected by name. */
        const char *kname = weir_plugin_kind_name(f->desc->kind);
        size_t kl = strlen(kname), nl = strlen(f->desc->name);
        const char *rest = names[k] + 5 + kl + 1; /* after "weir_<kind>_" */
        err[0] = 0;
        if (strncmp(names[k] + 5, kname, kl) != 0 || names[k][5 + kl] != '_') {
          snprintf(err, sizeof err, "%s: declares a %s plugin, but the file name says "
                   "otherwise (expected weir_%s_%s.so); fix: rename the file", f->path,
                   kname, kname, f->desc->name);
        } else if (strncmp(rest, f->desc->name, nl) != 0 ||
                   (rest[nl] != '.' && rest[nl] != '_')) {
          snprintf(err, sizeof err, "%s: declares the name '%s', but the file name says "
                   "otherwise (expected weir_%s_%s.so); fix: rename the file", f->path,
                   f->desc->name, kname, f->desc->name);
        } else {
          /* The same file name in an earlier directory: selecting it by name is refused. */
          for (int j = 0; j < n - 1; j++) {
            const char *b1 = strrchr(v[j].path, '/'), *b2 = strrchr(f->path, '/');
            char r1[PATH_MAX], r2[PATH_MAX];
            if (!v[j].desc || strcmp(b1 ? b1 : v[j].path, b2 ? b2 : f->path) != 0) continue;
            if (realpath(v[j].path, r1) && realpath(f->path, r2) && !strcmp(r1, r2)) continue;
            snprintf(err, sizeof err, "%s: duplicate of %s (same file name earlier in the "
                     "search path); selecting %s '%s' by name is refused; fix: remove one, or "
                     "select one with %s.path", f->path, v[j].path, kname, f->desc->name,
                     kname);
            break;
          }
        }
        if (err[0] && !(f->error = strdup(err))) rc = WEIR_E_NOMEM;
      }
    }
    for (int k = 0; k < nn; k++) free(names[k]);
    free(names);
    if (rc != WEIR_OK) break;
  }
  if (rc != WEIR_OK) {
    weir_plugin_scan_free(v, n);
    return rc;
  }
  *out = v;
  *count = n;
  return WEIR_OK;
}

void weir_plugin_scan_free(weir_plugin_found *f, int count) {
  for (int i = 0; f && i < count; i++) {
    if (f[i].dl) dlclose(f[i].dl);
    free(f[i].desc);
    free(f[i].path);
    free(f[i].error);
  }
  free(f);
}
