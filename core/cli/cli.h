/* The weir command line: one binary, one function per subcommand. Each returns the process
 * exit code (0 success, 1 runtime failure, 2 usage error). argv[0] is the subcommand. */
#ifndef WEIR_CLI_H
#define WEIR_CLI_H

#include <stddef.h>

int weir__cmd_serve(int argc, char **argv);    /* core/cli/cmd_serve.c */
int weir__cmd_generate(int argc, char **argv); /* core/cli/cmd_generate.c */
int weir__cmd_plugins(int argc, char **argv);  /* core/cli/cmd_plugins.c */
int weir__cmd_config(int argc, char **argv);   /* core/cli/cmd_config.c */
int weir__cmd_quantize(int argc, char **argv); /* core/cli/cmd_quantize.c */
int weir__cmd_mkmodel(int argc, char **argv);  /* tools/mkmodel/ */
int weir__cmd_bench(int argc, char **argv);    /* tools/bench/ */
int weir__cmd_convert(int argc, char **argv);  /* tools/convert/ */
int weir__cmd_perplexity(int argc, char **argv); /* core/cli/cmd_perplexity.c */

struct option;
/* Refuses a long option that is not spelled out in full: getopt_long would take "--mod" for
 * "--model", so a typo could silently pick another option. Prints one line naming the
 * option and returns -1; 0 when every "--name" in argv (up to "--") is exact. */
int weir__check_long_options(const char *cmd, int argc, char **argv,
                             const struct option *longopts);

#endif
