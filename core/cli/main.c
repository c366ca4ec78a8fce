#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "util/opt.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} command;

static const command k_commands[] = {
    {"serve", weir__cmd_serve, "run the OpenAI-compatible HTTP server"},
    {"generate", weir__cmd_generate, "generate text from a prompt on the command line"},
    {"plugins", weir__cmd_plugins, "list the plugins found, or --help NAME for one"},
    {"config", weir__cmd_config, "config check FILE: validate and print the effective config"},
    {"mkmodel", weir__cmd_mkmodel, "write a Llama-architecture GGUF model with random weights"},
    {"quantize", weir__cmd_quantize, "calibrate and quantize a model, save it as a Q4_1 GGUF"},
    {"bench", weir__cmd_bench, "load generator: measure and A/B OpenAI-compatible servers"},
    {"perplexity", weir__cmd_perplexity, "perplexity of a model on a text file"},
    {"convert", weir__cmd_convert, "write a GGUF from an export directory (trained models)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: weir <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].help);
  fprintf(f, "  %-10s %s\n", "version", "print the version");
  fprintf(f, "\n'weir <command> --help' describes a command's options; every command also\n"
             "takes --version. Long options are written out in full (no abbreviations).\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
    weir_opt_print_version();
    return 0;
  }
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "weir: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
