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

static void usage(FILE *f) {
  fprintf(f,
          "usage: weir config check FILE [--set KEY=VALUE]... [--plugin-dir DIR]... [flags]\n\n"
          "Validates FILE and the plugins it selects, then prints the effective\n"
          "configuration (defaults, the file, WEIR_API_KEY and the flags) as TOML.\n"
          "Takes the same configuration flags as `weir serve`. Exit status: 0 valid, 1 invalid.\n");
}

static void write_plugin_options(void *arg, const char *section, FILE *f) {
  const weir_plugin_set *s = arg;
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
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "check") != 0 || argc < 3 || argv[2][0] == '-') {
    fprintf(stderr, "weir config: expected `check FILE`\n\n");
    usage(stderr);
    return 2;
  }
  /* Re-shape into "config --config FILE rest..." so that the shared flag parser applies the
   * file first and every override after it. */
  int n = argc + 1, ret = 2;
  char **args = calloc((size_t)n + 1, sizeof *args);
  weir_config cfg;
  weir_plugin_set set = {0};
  char err[2048];
  weir_config_defaults(&cfg);
  if (!args) {
    fprintf(stderr, "weir config: out of memory\n");
    goto free_cfg;
  }
  args[0] = argv[0];
  args[1] = "--config";
  args[2] = argv[2];
  for (int i = 3; i < argc; i++) args[i] = argv[i];
  n = argc;
  if (weir_config_from_args(&n, args, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir config check: %s\n", err);
    ret = 1;
    goto free_args;
  }
  if (n > 1) {
    fprintf(stderr, "weir config check: unknown argument '%s'\n", args[1]);
    goto free_args;
  }
  weir_config_apply_log(&cfg);
  if (weir_plugin_set_check(&cfg, &set, err, sizeof err) != 0) {
    fprintf(stderr, "weir config check: %s: invalid: %s\n", argv[2], err);
    ret = 1;
    goto free_args;
  }
  weir_config_write_ex(&cfg, stdout, write_plugin_options, &set);
  fprintf(stderr, "weir config check: %s: ok\n", argv[2]);
  ret = 0;
  weir_plugin_set_unload(&set);
free_args:
  free(args);
free_cfg:
  weir_config_free(&cfg);
  return ret;
}
