/* Stop strings: never a partial match on the wire, the first match wins, text before it is
 * kept, and a flush releases what was held. */
#include <stdlib.h>
#include <string.h>

#include "engine/stop.h"
#include "testutil.h"

/* Feeds pieces one by one and returns everything emitted (malloc'd); *stopped set. */
static char *run(const char *const *stops, int ns, const char *const *pieces, int np,
                 int *stopped, int check_no_partial) {
  weir_stop_matcher m;
  CU_ASSERT_EQUAL_FATAL(weir_stop_init(&m, stops, ns), 0);
  char *out = calloc(1, 4096);
  size_t n = 0;
  *stopped = 0;
  for (int i = 0; i < np && !*stopped; i++) {
    const char *e;
    size_t el;
    int r = weir_stop_feed(&m, pieces[i], strlen(pieces[i]), &e, &el);
    CU_ASSERT(r == 0 || r == 1);
    memcpy(out + n, e, el);
    n += el;
    out[n] = 0;
    if (r == 1) *stopped = 1;
    if (check_no_partial && !*stopped)
      for (int s = 0; s < ns; s++) {
        /* No stop string may appear in what was emitted so far. */
        CU_ASSERT_PTR_NULL(strstr(out, stops[s]));
      }
  }
  if (!*stopped) {
    const char *e;
    size_t el;
    weir_stop_flush(&m, &e, &el);
    memcpy(out + n, e, el);
    n += el;
    out[n] = 0;
  }
  weir_stop_free(&m);
  return out;
}

static void test_split_across_pieces(void) {
  const char *stops[] = {"END"};
  const char *pieces[] = {"hello E", "N", "D world"};
  int stopped;
  char *out = run(stops, 1, pieces, 3, &stopped, 1);
  CU_ASSERT_EQUAL(stopped, 1);
  CU_ASSERT_STRING_EQUAL(out, "hello ");
  free(out);
}

static void test_partial_then_diverges(void) {
  const char *stops[] = {"END"};
  const char *pieces[] = {"a E", "N", "x", " b"};
  int stopped;
  weir_stop_matcher m;
  CU_ASSERT_EQUAL_FATAL(weir_stop_init(&m, stops, 1), 0);
  const char *e;
  size_t el;
  CU_ASSERT_EQUAL(weir_stop_feed(&m, pieces[0], 3, &e, &el), 0);
  WT_ASSERT_INT_EQ(el, 2); /* "a " out, "E" held */
  CU_ASSERT_EQUAL(weir_stop_feed(&m, pieces[1], 1, &e, &el), 0);
  WT_ASSERT_INT_EQ(el, 0); /* "EN" held */
  CU_ASSERT_EQUAL(weir_stop_feed(&m, pieces[2], 1, &e, &el), 0);
  WT_ASSERT_INT_EQ(el, 3); /* "ENx" released */
  CU_ASSERT_NSTRING_EQUAL(e, "ENx", 3);
  weir_stop_free(&m);
  char *out = run(stops, 1, pieces, 4, &stopped, 1);
  CU_ASSERT_EQUAL(stopped, 0);
  CU_ASSERT_STRING_EQUAL(out, "a ENx b");
  free(out);
}

static void test_earliest_of_several(void) {
  const char *stops[] = {"world", "lo w"};
  const char *pieces[] = {"hello world"};
  int stopped;
  char *out = run(stops, 2, pieces, 1, &stopped, 0);
  CU_ASSERT_EQUAL(stopped, 1);
  CU_ASSERT_STRING_EQUAL(out, "hel");
  free(out);
}

static void test_flush_releases_held_prefix(void) {
  const char *stops[] = {"</s>"};
  const char *pieces[] = {"abc </"};
  int stopped;
  char *out = run(stops, 1, pieces, 1, &stopped, 1);
  CU_ASSERT_EQUAL(stopped, 0);
  CU_ASSERT_STRING_EQUAL(out, "abc </");
  free(out);
}

static void test_no_stops_passes_through(void) {
  const char *pieces[] = {"x", "y", "z"};
  int stopped;
  char *out = run(NULL, 0, pieces, 3, &stopped, 0);
  CU_ASSERT_STRING_EQUAL(out, "xyz");
  free(out);
}

static void test_utf8_stop(void) {
  const char *stops[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
  const char *pieces[] = {"un \xc3\xa9", "t", "\xc3\xa9 chaud"};
  int stopped;
  char *out = run(stops, 1, pieces, 3, &stopped, 1);
  CU_ASSERT_EQUAL(stopped, 1);
  CU_ASSERT_STRING_EQUAL(out, "un ");
  free(out);
}

/* include_stop (vLLM's include_stop_str_in_output): the completed stop string is emitted
 * too, split across pieces or not; `which` names the one that matched. */
static void test_include_stop(void) {
  const char *stops[] = {"zzz", "END"};
  const char *pieces[] = {"hello E", "N", "D world"};
  weir_stop_matcher m;
  CU_ASSERT_EQUAL_FATAL(weir_stop_init(&m, stops, 2), 0);
  m.include_stop = 1;
  char out[64] = "";
  size_t n = 0;
  int r = 0;
  for (int i = 0; i < 3 && r == 0; i++) {
    const char *e;
    size_t el;
    r = weir_stop_feed(&m, pieces[i], strlen(pieces[i]), &e, &el);
    memcpy(out + n, e, el);
    n += el;
    out[n] = 0;
  }
  CU_ASSERT_EQUAL(r, 1);
  CU_ASSERT_STRING_EQUAL(out, "hello END");
  CU_ASSERT_EQUAL(m.which, 1);
  weir_stop_free(&m);
}

int main(void) {
  static const wt_test tests[] = {{"split_across_pieces", test_split_across_pieces},
                                  {"partial_then_diverges", test_partial_then_diverges},
                                  {"earliest_of_several", test_earliest_of_several},
                                  {"flush_releases_held_prefix", test_flush_releases_held_prefix},
                                  {"no_stops_passes_through", test_no_stops_passes_through},
                                  {"utf8_stop", test_utf8_stop},
                                  {"include_stop", test_include_stop},
                                  {NULL, NULL}};
  return wt_run_suite("engine_stop", tests);
}
