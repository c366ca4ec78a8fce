/* weir config check FILE: validates a configuration file, including the plugins it selects
 * (found, ABI-checked, device and dtype supported, options checked against the plugin's own
 * option table, without initialising them), and prints the effective configuration as TOML.
 * Exit 0 when valid, 1 when not (with the reason on stderr), 2 on a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "util/opt.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: weir config check FILE [--set KEY=VALUE]... [--plugin-dir DIR]... [flags]\n\n"
          "Validates FILE and the plugins it selects, then prints the effective\n"
          "configuration (defaults, the file, WEIR_API_KEY and the flags) as TOML.\n"
          "Takes the same configuration flags as `weir serve`. Exit status: 0 valid, 1 invalid.\n");
}

static void write_plugin_options(void *arg, const char *section, FILE *f) {
  const weir_plugin_set *s = arg;
  if (!strcmp(section, "cache")) return; /* the response cache loads with `weir serve` */
  const weir_plugin *p = !strcmp(section, "device")      ? s->device
                         : !strcmp(section, "attention") ? s->attention
                         : !strcmp(section, "quant")     ? s->quant
                         : !strcmp(section, "sampler")   ? s->sampler
                                                         : s->drafter;
  if (p) {
    fprintf(f, "# plugin: %s %s from %s\n", p->desc->name, p->desc->version ? p->desc->version : "", p->path);
    weir_plugin_write_options(p, f);
  }
}

int weir__cmd_config(int argc, char **argv) {
  weir_config cfg;
  weir_config_args flags = {0};
  weir_plugin_set set = {0};
  weir_opt o;
  const struct option *tables[] = {weir_config_options};
  char err[2048];
  const char *action = NULL, *file = NULL;
  int ret = 2, c;
  weir_config_defaults(&cfg);
  if (weir_opt_init(&o, "weir config", argc, argv, WEIR_CONFIG_SHORTOPTS, tables, 1) != 0) {
    fprintf(stderr, "weir config: out of memory\n");
    goto free_cfg;
  }
  /* `check FILE` is the same as --config FILE, applied before every other flag. */
  while ((c = weir_opt_next(&o)) != WEIR_OPT_END) {
    if (c == 'h' || c == WEIR_OPT_VERSION) {
      if (c == 'h') usage(stdout);
      else weir_opt_print_version();
      ret = 0;
      goto free_opt;
    }
    if (c == WEIR_OPT_ERROR) {
      fprintf(stderr, "%s\n", o.err);
      goto free_opt;
    }
    if (c == WEIR_OPT_POSITIONAL) {
      if (!action) action = o.arg;
      else if (!file) file = o.arg;
      else {
        fprintf(stderr, "weir config check: unknown argument '%s'\n", o.arg);
        goto free_opt;
      }
      continue;
    }
    if (weir_config_args_take(&flags, c, o.arg) < 0) {
      fprintf(stderr, "weir config: out of memory\n");
      goto free_opt;
    }
  }
  if (!action || strcmp(action, "check") != 0 || !file) {
    fprintf(stderr, "weir config: expected `check FILE`\n\n");
    usage(stderr);
    goto free_opt;
  }
  if (weir_config_args_take(&flags, WEIR_CONFIG_FLAG_BASE, file) < 0 ||
      weir_config_args_apply(&flags, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir config check: %s\n", err);
    ret = 1;
    goto free_opt;
  }
  weir_config_apply_log(&cfg);
  if (weir_plugin_set_check(&cfg, &set, err, sizeof err) != 0) {
    fprintf(stderr, "weir config check: %s: invalid: %s\n", file, err);
    ret = 1;
    goto free_opt;
  }
  weir_config_write_ex(&cfg, stdout, write_plugin_options, &set);
  fprintf(stderr, "weir config check: %s: ok\n", file);
  ret = 0;
  weir_plugin_set_unload(&set);
free_opt:
  weir_opt_fini(&o);
free_cfg:
  weir_config_args_free(&flags);
  weir_config_free(&cfg);
  return ret;
}
