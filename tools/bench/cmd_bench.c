#include <stdio.h>

#include "cli/cli.h"

/* Placeholder until its issue lands; replaced by the real command. */
int weir__cmd_bench(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "weir %s: not available in this build yet\n", argv[0]);
  return 1;
}
