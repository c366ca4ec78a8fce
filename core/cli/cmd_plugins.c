/* weir plugins: every plugin file found in the search path, with kind, name, version,
 * devices, dtypes, file and options; broken files are listed with the reason. With --help
 * NAME, the option table of one plugin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "util/opt.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: weir plugins [--config FILE] [--plugin-dir DIR]... [--set KEY=VALUE]...\n"
          "       weir plugins [same flags] --help NAME\n\n"
          "Lists every plugin file in the search path (plugins.dirs and --plugin-dir, then\n"
          "WEIR_PLUGIN_PATH, then the plugins shipped next to the binary): kind, name,\n"
          "version, devices, dtypes, file and options. Files that cannot be used are listed\n"
          "with the reason. --help NAME prints the option table of the plugin NAME (or\n"
          "KIND/NAME, e.g. attention/paged).\n");
}

/* "kind/name", "kind.name" or "name". */
static int matches(const weir_plugin_desc *d, const char *want) {
  const char *sep = strpbrk(want, "/.");
  if (!sep) return !strcmp(d->name, want);
  size_t kl = (size_t)(sep - want);
  const char *k = weir_plugin_kind_name(d->kind);
  return strlen(k) == kl && !strncmp(k, want, kl) && !strcmp(d->name, sep + 1);
}

static void print_header(const weir_plugin_found *f) {
  char dev[256], dt[256];
  weir_plugin_devices_str(f->desc, dev, sizeof dev);
  weir_plugin_dtypes_str(f->desc->dtypes, dt, sizeof dt);
  printf("%s %s %s\n", weir_plugin_kind_name(f->desc->kind), f->desc->name,
         f->desc->version ? f->desc->version : "?");
  if (f->desc->description && *f->desc->description) printf("  %s\n", f->desc->description);
  printf("  devices: %s\n  dtypes:  %s\n  file:    %s\n", dev, dt, f->path);
  if (f->desc->variant || f->score)
    printf("  variant: %s (score %d on this machine)\n",
           f->desc->variant ? f->desc->variant : "-", f->score);
}

int weir__cmd_plugins(int argc, char **argv) {
  weir_config cfg;
  weir_config_args flags = {0};
  weir_plugin_dirs dirs = {0};
  weir_plugin_found *found = NULL;
  int n = 0, ret = 2, c;
  const char *help_name = NULL;
  char err[1024];
  weir_opt o;
  const struct option *tables[] = {weir_config_options};
  weir_config_defaults(&cfg);
  if (weir_opt_init(&o, "weir plugins", argc, argv, WEIR_CONFIG_SHORTOPTS, tables, 1) != 0) {
    fprintf(stderr, "weir plugins: out of memory\n");
    goto free_cfg;
  }
  /* `--help NAME`: the option table of one plugin; --help alone: this text. */
  int want_help = 0;
  while ((c = weir_opt_next(&o)) != WEIR_OPT_END) {
    if (c == 'h') {
      want_help = 1;
    } else if (c == WEIR_OPT_VERSION) {
      weir_opt_print_version();
      ret = 0;
      goto free_opt;
    } else if (c == WEIR_OPT_POSITIONAL && want_help && !help_name) {
      help_name = o.arg;
    } else if (c == WEIR_OPT_POSITIONAL || c == WEIR_OPT_ERROR) {
      if (c == WEIR_OPT_ERROR) fprintf(stderr, "%s\n\n", o.err);
      else fprintf(stderr, "weir plugins: unknown argument '%s'\n\n", o.arg);
      usage(stderr);
      goto free_opt;
    } else if (weir_config_args_take(&flags, c, o.arg) < 0) {
      fprintf(stderr, "weir plugins: out of memory\n");
      goto free_opt;
    }
  }
  if (want_help && !help_name) {
    usage(stdout);
    ret = 0;
    goto free_opt;
  }
  if (weir_config_args_apply(&flags, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir plugins: %s\n", err);
    goto free_opt;
  }
  weir_config_apply_log(&cfg);
  ret = 1;
  if (weir_plugin_dirs_get(&cfg, &dirs) != 0 || weir_plugin_scan(&dirs, &found, &n) != 0) {
    fprintf(stderr, "weir plugins: out of memory\n");
    goto free_dirs;
  }
  if (help_name) {
    int shown = 0;
    for (int i = 0; i < n; i++) {
      if (!found[i].desc || !matches(found[i].desc, help_name)) continue;
      if (shown++) printf("\n");
      print_header(&found[i]);
      printf("  options (set them in the [%s] table):\n", weir_plugin_kind_name(found[i].desc->kind));
      weir_plugin_print_options(found[i].desc, stdout);
    }
    if (!shown) {
      fprintf(stderr, "weir plugins: no plugin named '%s' in the search path (run `weir "
              "plugins` to list them)\n", help_name);
      goto free_found;
    }
    ret = 0;
    goto free_found;
  }
  printf("search path:\n");
  for (int i = 0; i < dirs.num; i++) {
    struct stat st;
    printf("  %s%s\n", dirs.dirs[i], stat(dirs.dirs[i], &st) == 0 ? "" : "  (missing)");
  }
  int broken = 0, ok = 0;
  for (int i = 0; i < n; i++) {
    if (found[i].error) {
      broken++;
      continue;
    }
    printf("\n");
    print_header(&found[i]);
    const weir_plugin_desc *d = found[i].desc;
    if (!d->num_options || !d->options) {
      printf("  options: none\n");
    } else {
      printf("  options:\n");
      weir_plugin_print_options(d, stdout);
    }
    ok++;
  }
  if (broken) {
    printf("\nnot usable (%d):\n", broken);
    for (int i = 0; i < n; i++)
      if (found[i].error) printf("  %s\n", found[i].error);
  }
  if (!ok && !broken) printf("\nno plugins found\n");
  ret = 0;
free_found:
  weir_plugin_scan_free(found, n);
free_dirs:
  weir_plugin_dirs_free(&dirs);
free_opt:
  weir_opt_fini(&o);
free_cfg:
  weir_config_args_free(&flags);
  weir_config_free(&cfg);
  return ret;
}
