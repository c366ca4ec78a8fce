/* Replays every fuzz target's committed corpus (tests/fuzz/corpus/<target>/: the seeds, what
 * the fuzzing runs kept, and every input that ever broke something) through the same entry
 * points the libFuzzer binaries call, on every build: no clang or libFuzzer needed. An input
 * that breaks an invariant aborts the suite with the file's name. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_targets.h"
#include "testutil.h"

typedef int (*entry_fn)(const uint8_t *, size_t);

static int json_completions(const uint8_t *d, size_t n) { return weir_fuzz_json(WEIR_FUZZ_COMPLETIONS, d, n); }
static int json_chat(const uint8_t *d, size_t n) { return weir_fuzz_json(WEIR_FUZZ_CHAT, d, n); }
static int json_tokenize(const uint8_t *d, size_t n) { return weir_fuzz_json(WEIR_FUZZ_TOKENIZE, d, n); }
static int json_detokenize(const uint8_t *d, size_t n) { return weir_fuzz_json(WEIR_FUZZ_DETOKENIZE, d, n); }

static const struct {
  const char *name;
  entry_fn fn;
  int min_files; /* the committed corpus has at least this many inputs */
} k_targets[] = {
    {"http", weir_fuzz_http, 5},
    {"json_completions", json_completions, 5},
    {"json_chat", json_chat, 5},
    {"json_tokenize", json_tokenize, 5},
    {"json_detokenize", json_detokenize, 5},
    {"toml", weir_fuzz_toml, 5},
    {"tokenizer", weir_fuzz_tokenizer, 5},
    {"chat_template", weir_fuzz_chat_template, 5},
};

/* Runs one corpus file through the entry (ctx), named for the entry's crash reports. */
static void replay_file(const char *path, const char *name, const char *data, size_t len,
                        void *ctx) {
  (void)name;
  weir_fuzz_set_input_name(path);
  (*(entry_fn *)ctx)((const uint8_t *)data, len);
}

static int replay(const char *name, entry_fn fn) {
  char *dir = wt_strf("%s/tests/fuzz/corpus/%s", WT_SOURCE_DIR, name);
  int count = wt_for_each_file(dir, replay_file, &fn);
  if (count < 0) fprintf(stderr, "\n  %s: no corpus directory\n", dir);
  free(dir);
  weir_fuzz_set_input_name(NULL);
  return count;
}

#define TARGET_TEST(idx)                                                                    \
  static void test_##idx(void) {                                                            \
    int n = replay(k_targets[idx].name, k_targets[idx].fn);                                 \
    if (n < k_targets[idx].min_files)                                                       \
      fprintf(stderr, "\n  %s: %d inputs, expected at least %d\n", k_targets[idx].name, n,  \
              k_targets[idx].min_files);                                                    \
    CU_ASSERT(n >= k_targets[idx].min_files);                                               \
  }
TARGET_TEST(0)
TARGET_TEST(1)
TARGET_TEST(2)
TARGET_TEST(3)
TARGET_TEST(4)
TARGET_TEST(5)
TARGET_TEST(6)
TARGET_TEST(7)

/* The input that crashed the server (issue 9): the "stop" key seventeen times. */
static void test_duplicate_stop_reproducer(void) {
  char *p = wt_strf("%s/tests/fuzz/corpus/json_completions/crash-duplicate-stop", WT_SOURCE_DIR);
  size_t len = 0;
  char *data = wt_read_file(p, &len);
  CU_ASSERT_FATAL(data != NULL);
  WT_ASSERT_STR_CONTAINS(data, "\"stop\":\"s17\"");
  weir_fuzz_set_input_name(p);
  weir_fuzz_json(WEIR_FUZZ_COMPLETIONS, (const uint8_t *)data, len);
  free(data);
  free(p);
}

int main(void) {
  if (weir_fuzz_setup(WT_WEIR, WT_PLUGIN_DIR, WT_SOURCE_DIR) != 0) {
    fprintf(stderr, "fuzz set-up failed\n");
    return 1;
  }
  static const wt_test tests[] = {
      {"http", test_0},
      {"json_completions", test_1},
      {"json_chat", test_2},
      {"json_tokenize", test_3},
      {"json_detokenize", test_4},
      {"toml", test_5},
      {"tokenizer", test_6},
      {"chat_template", test_7},
      {"duplicate_stop_reproducer", test_duplicate_stop_reproducer},
      {NULL, NULL},
  };
  int rc = wt_run_suite("fuzz_corpus", tests);
  weir_fuzz_teardown();
  return rc;
}
