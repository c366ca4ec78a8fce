/* Helpers the subcommands share (see cli.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

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
      fprintf(stderr, "weir %s: unknown option '%.*s' (options are never abbreviated; "
              "see weir %s --help)\n", cmd, (int)len + 2, a, cmd);
      return -1;
    }
    /* A separate value may itself start with "--": skip it. */
    if (!eq && o->has_arg == required_argument) i++;
  }
  return 0;
}

char *weir__read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0, r;
  char *buf = malloc(cap);
  while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += r;
    if (n + 1 == cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  if (buf && ferror(f)) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0;
  if (len) *len = n;
  return buf;
}
