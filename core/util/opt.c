#include "util/opt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "weir/plugin.h"

static const struct option k_common[] = {
    {"help", no_argument, 0, 'h'},
    {"version", no_argument, 0, WEIR_OPT_VERSION},
    {0, 0, 0, 0},
};

int weir_opt_init(weir_opt *o, const char *prog, int argc, char **argv, const char *shortopts,
                  const struct option *const *tables, int num_tables) {
  memset(o, 0, sizeof *o);
  o->prog = prog;
  o->argc = argc;
  o->argv = argv;
  int n = 0;
  for (int t = 0; t < num_tables; t++)
    for (const struct option *p = tables[t]; p->name; p++) n++;
  n += (int)(sizeof k_common / sizeof k_common[0]) - 1;
  o->longopts = calloc((size_t)n + 1, sizeof *o->longopts);
  /* "-": in order, positionals as 1; ":": a missing value returns ':'; "h": -h. */
  size_t sl = strlen(shortopts ? shortopts : "");
  o->shortopts = malloc(sl + 4);
  if (!o->longopts || !o->shortopts) {
    weir_opt_fini(o);
    return -1;
  }
  for (int t = 0; t < num_tables; t++)
    for (const struct option *p = tables[t]; p->name; p++) o->longopts[o->num_long++] = *p;
  for (const struct option *p = k_common; p->name; p++) o->longopts[o->num_long++] = *p;
  snprintf(o->shortopts, sl + 4, "-:h%s", shortopts ? shortopts : "");
  /* glibc: 0 re-initialises getopt entirely, whatever an earlier parse left behind. */
  optind = 0;
  opterr = 0;
  return 0;
}

void weir_opt_fini(weir_opt *o) {
  free(o->longopts);
  free(o->shortopts);
  o->longopts = NULL;
  o->shortopts = NULL;
}

/* Refuses "--name" (or "--name=v") unless name is exactly one of the long options. */
static int check_long(weir_opt *o, const char *a) {
  const char *name = a + 2;
  size_t len = strcspn(name, "=");
  for (int i = 0; i < o->num_long; i++)
    if (strlen(o->longopts[i].name) == len && !strncmp(o->longopts[i].name, name, len))
      return 0;
  char cands[256] = "";
  size_t off = 0;
  int nc = 0;
  for (int i = 0; i < o->num_long && off < sizeof cands; i++)
    if (len > 0 && !strncmp(o->longopts[i].name, name, len)) {
      off += (size_t)snprintf(cands + off, sizeof cands - off, "%s--%s", nc++ ? ", " : "",
                              o->longopts[i].name);
    }
  if (nc)
    weir_set_err(o->err, sizeof o->err, "%s: unknown option '--%.*s' (did you mean %s? "
                  "options are not abbreviated)", o->prog, (int)len, name, cands);
  else
    weir_set_err(o->err, sizeof o->err, "%s: unknown option '--%.*s' (see %s --help)",
                  o->prog, (int)len, name, o->prog);
  return -1;
}

int weir_opt_next(weir_opt *o) {
  o->arg = NULL;
  o->name = NULL;
  if (o->rest) {
    if (o->rest >= o->argc) return WEIR_OPT_END;
    o->arg = o->argv[o->rest++];
    return WEIR_OPT_POSITIONAL;
  }
  /* The element getopt reads next (mid-way through "-abc" it still points at it). */
  int at = optind ? optind : 1;
  const char *a = at < o->argc ? o->argv[at] : NULL;
  if (a && a[0] == '-' && a[1] == '-' && a[2] && check_long(o, a) != 0) return WEIR_OPT_ERROR;
  int idx = -1;
  int c = getopt_long(o->argc, o->argv, o->shortopts, o->longopts, &idx);
  if (c == -1) {
    /* "--" ends the options: everything after it is positional. */
    o->rest = optind;
    return weir_opt_next(o);
  }
  char shortname[3] = {'-', (char)optopt, 0};
  if (c != WEIR_OPT_POSITIONAL && c != '?' && c != ':') {
    if (idx >= 0) snprintf(o->namebuf, sizeof o->namebuf, "--%s", o->longopts[idx].name);
    else snprintf(o->namebuf, sizeof o->namebuf, "-%c", (char)c);
    o->name = o->namebuf;
  }
  switch (c) {
  case WEIR_OPT_POSITIONAL:
    o->arg = optarg;
    return c;
  case ':':
    weir_set_err(o->err, sizeof o->err, "%s: %s needs a value", o->prog,
                  a && a[0] == '-' && a[1] == '-' ? a : shortname);
    return WEIR_OPT_ERROR;
  case '?':
    if (a && a[0] == '-' && a[1] == '-')
      weir_set_err(o->err, sizeof o->err, "%s: option '%.*s' takes no value", o->prog,
                    (int)strcspn(a, "="), a);
    else
      weir_set_err(o->err, sizeof o->err, "%s: unknown option '%s' (see %s --help)", o->prog,
                    shortname, o->prog);
    return WEIR_OPT_ERROR;
  default:
    o->arg = optarg;
    return c;
  }
}

int weir_opt_int(weir_opt *o, int64_t lo, int64_t hi, int64_t *out) {
  const char *s = o->arg ? o->arg : "";
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi) {
    weir_set_err(o->err, sizeof o->err, "%s: %s: '%s' is not an integer in [%lld, %lld]",
                  o->prog, o->name ? o->name : "option", s, (long long)lo, (long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

int weir_opt_double(weir_opt *o, double lo, double hi, double *out) {
  const char *s = o->arg ? o->arg : "";
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
    weir_set_err(o->err, sizeof o->err, "%s: %s: '%s' is not a number in [%g, %g]", o->prog,
                  o->name ? o->name : "option", s, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

void weir_opt_print_version(void) {
  printf("weir %s (plugin ABI %d.%d)\n", WEIR_VERSION, WEIR_ABI_MAJOR, WEIR_ABI_MINOR);
}
