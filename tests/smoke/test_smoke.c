/* The binary starts, prints its version and usage, and refuses an unknown command. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void test_version(void) {
  char *out = NULL;
  char *argv[] = {WT_WEIR, "version", NULL};
  WT_ASSERT_INT_EQ(wt_run(argv, &out, 10000), 0);
  WT_ASSERT_STR_CONTAINS(out, "weir " WEIR_VERSION);
  free(out);
}

static void test_unknown_command(void) {
  char *out = NULL;
  char *argv[] = {WT_WEIR, "frobnicate", NULL};
  WT_ASSERT_INT_EQ(wt_run(argv, &out, 10000), 2);
  WT_ASSERT_STR_CONTAINS(out, "unknown command 'frobnicate'");
  free(out);
}

int main(void) {
  static const wt_test tests[] = {
      {"version", test_version}, {"unknown_command", test_unknown_command}, {NULL, NULL}};
  return wt_run_suite("smoke", tests);
}
