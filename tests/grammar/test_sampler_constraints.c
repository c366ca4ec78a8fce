#include "testutil.h"
static void test_nothing(void) {}
int main(void) {
  static const wt_test tests[] = {{"placeholder", test_nothing}, {NULL, NULL}};
  return wt_run_suite("sampler_constraints", tests);
}
