/* Helpers the subcommands share (see cli.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/opt.h"

int weir__check_long_options(const char *cmd, int argc, char **argv,
                             const struct option *longopts) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) return 0;
    if (strncmp(a, "--", 2) != 0) continue;
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct option *o = NULL;
    for (const struct option *p = longopts; p->name; p++)
      if (strlen(p->name) == len && strncmp(p->name, name, len) == 0) o = p;
    if (!o) {
      char near[256];
      int n = 0;
      while (longopts[n].name) n++;
      if (weir_opt_suggest(longopts, n, name, len, near, sizeof near) > 0)
        fprintf(stderr, "weir %s: unknown option '%.*s' (did you mean %s? options are never "
                "abbreviated; see weir %s --help)\n", cmd, (int)len + 2, a, near, cmd);
      else
        fprintf(stderr, "weir %s: unknown option '%.*s' (options are never abbreviated; "
                "see weir %s --help)\n", cmd, (int)len + 2, a, cmd);
      return -1;
    }
    /* A separate value may itself start with "--": skip it. */
    if (!eq && o->has_arg == required_argument) i++;
  }
  return 0;
}
