/* Command-line parsing for every weir subcommand: getopt_long, with two rules added.
 *
 * 1. No abbreviations. getopt_long takes any unambiguous prefix of a long option, so
 *    `weir bench --requests 24` would silently mean --requests-out 24. Here a long option must
 *    be written out in full; a prefix is refused with the options it could have meant.
 * 2. Arguments are read in the order given, options and positionals mixed (getopt's "-"
 *    mode): a positional comes back as WEIR_OPT_POSITIONAL, so `weir serve MODEL.gguf
 *    --port 9000` and `weir serve --port 9000 MODEL.gguf` are the same. After "--" every
 *    argument is positional.
 * 3. llama.cpp's single-dash long options: "-np 4" is "--np 4" when "np" is one of the long
 *    options (never "-n -p"); a misspelt long option gets the nearest names ("--prot": did
 *    you mean --port?).
 * Every parser also knows -h/--help (returns 'h') and --version (WEIR_OPT_VERSION), so each
 * subcommand answers both. Option values are the caller's strings (argv), borrowed.
 *
 * Not thread-safe (getopt's globals): parse on the main thread, one parser at a time. */
#ifndef WEIR_UTIL_OPT_H
#define WEIR_UTIL_OPT_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

#define WEIR_OPT_POSITIONAL 1
#define WEIR_OPT_VERSION 0x7f00
#define WEIR_OPT_END (-1)
#define WEIR_OPT_ERROR '?'

typedef struct weir_opt {
  char *arg;        /* the option's value, or the positional argument; NULL for a flag */
  const char *name; /* the option as written ("--port", "-n"), for messages */
  char err[512];    /* after WEIR_OPT_ERROR: "weir bench: unknown option ..." */
  /* Private. */
  int argc;
  char **argv;
  const char *prog;
  char *shortopts;
  struct option *longopts;
  int num_long;
  int rest; /* after "--" or the end of options: index of the next positional */
  char namebuf[80];
  char **orig_argv; /* the caller's argv */
  char **own_argv;  /* a copy with "-np" spelled "--np" (see weir_opt_init), or NULL */
} weir_opt;

/* Prepares a parser over argv[1..argc) (argv[0] is the command name) for the options of
 * `tables` (each an array ending with a zeroed entry) and the short options `shortopts`
 * (getopt syntax without the leading mode characters). `prog` names the command in messages
 * ("weir serve"). Returns 0, or WEIR_E_NOMEM. */
int weir_opt_init(weir_opt *o, const char *prog, int argc, char **argv, const char *shortopts,
                  const struct option *const *tables, int num_tables);
/* The next option's `val` (o->arg holds its value), WEIR_OPT_POSITIONAL (o->arg holds the
 * argument), 'h' for -h/--help, WEIR_OPT_VERSION, WEIR_OPT_END, or WEIR_OPT_ERROR with the
 * reason in o->err: an unknown option, an abbreviated one, a missing value, a value given to
 * a flag. */
int weir_opt_next(weir_opt *o);
void weir_opt_fini(weir_opt *o);

/* "Did you mean": writes into out (cap bytes) the long options of longopts[0..num_long)
 * nearest to the unknown name[0..len) ("--port" for "prot", "--served-model-name" for
 * "served_model_name", "--max-model-len" for "max-model-length"), comma-separated; returns
 * how many, 0 when none is near. */
int weir_opt_suggest(const struct option *longopts, int num_long, const char *name, size_t len,
                     char *out, size_t cap);

/* Value parsers for option arguments: the whole string must be a number within [lo, hi];
 * otherwise they return -1 and write "weir X: --flag: 'v' is not ..." into o->err. */
int weir_opt_int(weir_opt *o, int64_t lo, int64_t hi, int64_t *out);
int weir_opt_double(weir_opt *o, double lo, double hi, double *out);

/* Prints "weir <version> (plugin ABI <major>.<minor>)" to stdout: what --version shows. */
void weir_opt_print_version(void);

#endif
