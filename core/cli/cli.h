/* The weir command line: one binary, one function per subcommand. Each returns the process
 * exit code (0 success, 1 runtime failure, 2 usage error). argv[0] is the subcommand. */
#ifndef WEIR_CLI_H
#define WEIR_CLI_H

int weir__cmd_serve(int argc, char **argv);    /* core/cli/cmd_serve.c */
int weir__cmd_generate(int argc, char **argv); /* core/cli/cmd_generate.c */
int weir__cmd_plugins(int argc, char **argv);  /* core/cli/cmd_plugins.c */
int weir__cmd_config(int argc, char **argv);   /* core/cli/cmd_config.c */
int weir__cmd_quantize(int argc, char **argv); /* core/cli/cmd_quantize.c */
int weir__cmd_mkmodel(int argc, char **argv);  /* tools/mkmodel/ */
int weir__cmd_bench(int argc, char **argv);    /* tools/bench/ */

#endif
