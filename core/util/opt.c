#include "util/opt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "weir/plugin.h"

static int spell_long(weir_opt *o);

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
  if (spell_long(o) != 0) {
    weir_opt_fini(o);
    return -1;
  }
  /* glibc: 0 re-initialises getopt entirely, whatever an earlier parse left behind. */
  optind = 0;
  opterr = 0;
  return 0;
}

void weir_opt_fini(weir_opt *o) {
  if (o->own_argv) {
    for (int i = 0; i < o->argc; i++)
      if (o->own_argv[i] != o->orig_argv[i]) free(o->own_argv[i]);
    free(o->own_argv);
  }
  free(o->longopts);
  free(o->shortopts);
  o->own_argv = NULL;
  o->longopts = NULL;
  o->shortopts = NULL;
}

/* The long option named exactly name[0..len), or NULL. */
static const struct option *find_long(const weir_opt *o, const char *name, size_t len) {
  for (int i = 0; i < o->num_long; i++)
    if (strlen(o->longopts[i].name) == len && !strncmp(o->longopts[i].name, name, len))
      return &o->longopts[i];
  return NULL;
}

/* llama.cpp's tools spell some options with one dash and several letters (-np, -ngl): getopt
 * would read "-np" as -n -p. An element "-name" (or "-name=v") whose name, of two letters or
 * more, is exactly one of this parser's long options is read as "--name". Values that follow
 * an option are left alone, and so is everything after "--". Works on a copy of argv. */
static int spell_long(weir_opt *o) {
  o->orig_argv = o->argv;
  for (int i = 1; i < o->argc; i++) {
    const char *a = o->argv[i];
    if (!strcmp(a, "--")) break;
    if (a[0] != '-' || !a[1]) continue;
    if (a[1] == '-') {
      size_t len = strcspn(a + 2, "=");
      const struct option *p = find_long(o, a + 2, len);
      if (p && p->has_arg == required_argument && !a[2 + len]) i++;
      continue;
    }
    size_t len = strcspn(a + 1, "=");
    const struct option *p = len >= 2 ? find_long(o, a + 1, len) : NULL;
    if (p) {
      if (!o->own_argv) {
        o->own_argv = malloc(sizeof *o->own_argv * (size_t)(o->argc + 1));
        if (!o->own_argv) return -1;
        memcpy(o->own_argv, o->argv, sizeof *o->own_argv * (size_t)o->argc);
        o->own_argv[o->argc] = NULL;
        o->argv = o->own_argv;
      }
      size_t n = strlen(a);
      char *l = malloc(n + 2);
      if (!l) return -1;
      l[0] = '-';
      memcpy(l + 1, a, n + 1);
      o->own_argv[i] = l;
      if (p->has_arg == required_argument && !a[1 + len]) i++;
      continue;
    }
    /* A cluster of short options: the first one taking a value ends it; with nothing
     * attached, the next element is its value. */
    for (const char *c = a + 1; *c; c++) {
      const char *d = strchr(o->shortopts + 2, *c);
      if (d && d[1] == ':') {
        if (!c[1]) i++;
        break;
      }
    }
  }
  return 0;
}

/* Restricted Damerau-Levenshtein distance (insertions, deletions, substitutions, adjacent
 * transpositions) between two option names, '_' read as '-'; names are short (< 64). */
static int name_distance(const char *a, size_t la, const char *b, size_t lb) {
  if (la > 63 || lb > 63) return 99;
  int d[64][64];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      char x = a[i - 1] == '_' ? '-' : a[i - 1], y = b[j - 1] == '_' ? '-' : b[j - 1];
      int v = d[i - 1][j - 1] + (x != y);
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (i > 1 && j > 1) {
        char x2 = a[i - 2] == '_' ? '-' : a[i - 2], y2 = b[j - 2] == '_' ? '-' : b[j - 2];
        if (x == y2 && x2 == y && d[i - 2][j - 2] + 1 < v) v = d[i - 2][j - 2] + 1;
      }
      d[i][j] = v;
    }
  return d[la][lb];
}

int weir_opt_suggest(const struct option *longopts, int num_long, const char *name, size_t len,
                     char *out, size_t cap) {
  /* The nearest names by edit distance ('_' for '-' is free), within a third of the name
   * (at least 1, at most 3), or a long option the name starts with (--max-model-length for
   * --max-model-len). */
  int best = 99, nc = 0;
  size_t off = 0;
  if (cap) out[0] = 0;
  for (int pass = 0; pass < 2; pass++) {
    int limit = (int)len / 3 < 1 ? 1 : (int)len / 3 > 3 ? 3 : (int)len / 3;
    for (int i = 0; i < num_long; i++) {
      const char *cn = longopts[i].name;
      size_t cl = strlen(cn);
      int dist = name_distance(name, len, cn, cl);
      if (cl >= 4 && cl < len && !strncmp(cn, name, cl) && dist > 1) dist = 1;
      if (pass == 0 && dist < best) best = dist;
      if (pass == 1 && dist == best && best <= limit && off + 1 < cap) {
        int n = snprintf(out + off, cap - off, "%s--%s", nc++ ? ", " : "", cn);
        off = n < 0 ? cap : off + (size_t)n;
      }
    }
  }
  return nc;
}

/* Refuses "--name" (or "--name=v") unless name is exactly one of the long options. */
static int check_long(weir_opt *o, const char *a) {
  const char *name = a + 2;
  size_t len = strcspn(name, "=");
  if (find_long(o, name, len)) return 0;
  char cands[256] = "";
  size_t off = 0;
  int nc = 0;
  for (int i = 0; i < o->num_long && off < sizeof cands; i++)
    if (len > 0 && !strncmp(o->longopts[i].name, name, len)) {
      off += (size_t)snprintf(cands + off, sizeof cands - off, "%s--%s", nc++ ? ", " : "",
                              o->longopts[i].name);
    }
  if (nc) {
    weir_set_err(o->err, sizeof o->err, "%s: unknown option '--%.*s' (did you mean %s? "
                  "options are not abbreviated)", o->prog, (int)len, name, cands);
    return -1;
  }
  nc = weir_opt_suggest(o->longopts, o->num_long, name, len, cands, sizeof cands);
  if (nc)
    weir_set_err(o->err, sizeof o->err, "%s: unknown option '--%.*s' (did you mean %s? "
                  "see %s --help)", o->prog, (int)len, name, cands, o->prog);
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
    else if (a && a[0] == '-' && a[1] && a[2] && a[2] != '=')
      /* "-np" where this command has no --np: name the whole element, not its '-n'. */
      weir_set_err(o->err, sizeof o->err, "%s: unknown option '%.*s' (see %s --help)",
                    o->prog, (int)strcspn(a, "="), a, o->prog);
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
