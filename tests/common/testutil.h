/* Shared helpers for weir's CUnit suites: paths, temporary files, running the real binary. */
#ifndef WEIR_TESTUTIL_H
#define WEIR_TESTUTIL_H

#include <CUnit/Basic.h>
#include <stddef.h>
#include <stdint.h>

/* Where things are: set by CMake at build time. */
#define WT_SOURCE_DIR WEIR_TEST_SOURCE_DIR
#define WT_BUILD_DIR WEIR_TEST_BUILD_DIR
#define WT_PLUGIN_DIR WEIR_TEST_PLUGIN_DIR
#define WT_BAD_PLUGIN_DIR WEIR_TEST_BAD_PLUGIN_DIR
#define WT_WEIR WEIR_TEST_BINARY

/* Asserts with both values printed on failure. */
#define WT_ASSERT_INT_EQ(actual, expected)                                                  \
  do {                                                                                      \
    long long a_ = (long long)(actual), e_ = (long long)(expected);                         \
    if (a_ != e_) fprintf(stderr, "\n  %s:%d: %s = %lld, expected %lld\n", __FILE__,        \
                          __LINE__, #actual, a_, e_);                                       \
    CU_ASSERT_EQUAL(a_, e_);                                                                \
  } while (0)
#define WT_ASSERT_STR_CONTAINS(haystack, needle)                                            \
  do {                                                                                      \
    const char *h_ = (haystack), *n_ = (needle);                                            \
    int ok_ = h_ && strstr(h_, n_) != NULL;                                                 \
    if (!ok_) fprintf(stderr, "\n  %s:%d: expected \"%s\" in:\n%s\n", __FILE__, __LINE__,   \
                      n_, h_ ? h_ : "(null)");                                              \
    CU_ASSERT(ok_);                                                                         \
  } while (0)

typedef struct wt_test {
  const char *name;
  void (*fn)(void);
} wt_test;

/* Runs one suite of tests (NULL-terminated array) and returns the process exit code:
 * 0 when every assertion passed. Prints CUnit's summary. */
int wt_run_suite(const char *suite, const wt_test *tests);
/* As wt_run_suite, with CUnit's suite init and cleanup (either may be NULL): set-up and
 * tear-down that assert nothing belong there, not in the list of tests. A failing init or
 * cleanup (non-zero) fails the suite. */
int wt_run_suite_ex(const char *suite, const wt_test *tests, int (*init)(void),
                    int (*cleanup)(void));

/* A fresh directory under $TMPDIR (or /tmp) removed by wt_rmtree. Returns a malloc'd path. */
char *wt_mkdtemp(void);
void wt_rmtree(const char *path);
/* Writes a file; returns 0 on success. */
int wt_write_file(const char *path, const char *data, size_t len);
/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL on failure. */
char *wt_read_file(const char *path, size_t *len);
/* printf into a malloc'd string. */
char *wt_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Runs argv (argv[0] a path) with stdout and stderr captured together into *out (malloc'd),
 * killing it after timeout_ms. Returns the exit status (0..255), 128+signal when killed by a
 * signal, or -1 when it could not start. */
int wt_run(char *const argv[], char **out, int timeout_ms);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int wt_free_port(void);

/* Calls fn once for every file in dir whose name does not start with '.', with its path, its
 * name and its whole contents (NUL-terminated; all three are freed after fn returns); for
 * replaying checked-in corpora. The number of files read, or -1 when dir cannot be opened. */
typedef void (*wt_file_fn)(const char *path, const char *name, const char *data, size_t len,
                           void *ctx);
int wt_for_each_file(const char *dir, wt_file_fn fn, void *ctx);

/* xorshift64: the fixed-seed generator of the deterministic fuzz corpora (same seed, same
 * corpus on every run). state is the caller's and must not be 0. */
static inline uint64_t wt_xorshift64(uint64_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

#endif
