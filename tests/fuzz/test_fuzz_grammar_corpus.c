/* Runs the grammar fuzz entry over a deterministic corpus on every build: seed constraints of
 * every front end (valid and invalid), each truncated at every length and mutated thousands of
 * times, plus any reproducer files checked in under tests/fuzz/corpus/grammar/. With
 * --write-corpus DIR it writes the seeds for libFuzzer instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_grammar_entry.h"
#include "testutil.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { return wt_xorshift64(&rng); }

/* The first byte picks the front end (fuzz_grammar_entry.h): 0 schema, 1 regex, 2 grammar,
 * 3 choice, 7 json_object; +8 strict, +16 whitespace. */
static const struct {
  uint8_t sel;
  const char *text;
} k_seeds[] = {
    {0 + 8 + 16, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3},"
                 "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-3,"
                 "\"exclusiveMaximum\":40},\"maxItems\":3}},\"required\":[\"a\"],"
                 "\"additionalProperties\":{\"enum\":[null,true,\"x\\\"y\"]}}"},
    {0 + 8, "{\"$defs\":{\"n\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}},"
            "{\"type\":\"number\",\"minimum\":0.25,\"maximum\":7.5}]}},\"$ref\":\"#/$defs/n\"}"},
    {0 + 8, "{\"type\":\"string\",\"format\":\"date-time\"}"},
    {0, "{\"oneOf\":[{\"type\":\"string\",\"pattern\":\"^[a-c]{2}\\\\d$\"},{\"type\":\"null\"}],"
        "\"title\":\"t\",\"uniqueItems\":true}"},
    {0 + 8, "{\"allOf\":[{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},"
            "{\"properties\":{\"j\":{\"type\":\"boolean\"}}}],\"prefixItems\":[{}]}"},
    {0 + 8, "{\"enum\":[]}"},
    {1, "(\\+1 )?\\(?[0-9]{3}\\)?[ -][0-9]{3}-[0-9]{4}"},
    {1, "^(?:[a-z]+|\\d{2,4})(?P<x>é|日本)*[^\\s\\d]?$"},
    {1, "(a|ab)*c{0,3}\\u00e9\\x41.?"},
    {1, "(?=look)ahead"},
    {2, "root ::= list\nlist ::= list \",\" item | item\nitem ::= [a-z]+ | \"(\" list \")\"\n"},
    {2, "root ::= obj\nobj ::= \"{\" (pair (\",\" pair)*)? \"}\"\npair ::= str \":\" val\n"
        "str ::= \"\\\"\" [^\"]* \"\\\"\"\nval ::= str | obj | [0-9]+ # comment\n"},
    {2, "root ::= s\ns ::= s s | \"(\" s \")\" | \"\"\n"},
    {2, "root ::= undefined"},
    {3, "[\"yes\",\"no\",\"maybe\",\"\"]"},
    {7 + 16, ""},
};

static int g_n;
static uint8_t *g_data[32];
static size_t g_len[32];

static void build(void) {
  g_n = (int)(sizeof k_seeds / sizeof k_seeds[0]);
  for (int i = 0; i < g_n; i++) {
    g_len[i] = strlen(k_seeds[i].text) + 1;
    g_data[i] = malloc(g_len[i]);
    g_data[i][0] = k_seeds[i].sel;
    memcpy(g_data[i] + 1, k_seeds[i].text, g_len[i] - 1);
  }
}

static void test_seeds(void) {
  int compiled = 0, refused = 0;
  for (int i = 0; i < g_n; i++) {
    const int rc = weir_fuzz_grammar(g_data[i], g_len[i]);
    CU_ASSERT(rc >= 0);
    compiled += rc == 1;
    refused += rc == 0;
  }
  /* the valid seeds compile, the invalid ones (empty enum, lookahead, undefined rule) not */
  WT_ASSERT_INT_EQ(refused, 3);
  WT_ASSERT_INT_EQ(compiled, g_n - 3);
}

static void test_truncations(void) {
  int bad = 0;
  for (int i = 0; i < g_n; i++)
    for (size_t len = 0; len < g_len[i]; len++) {
      uint8_t *b = malloc(len ? len : 1); /* exact size: a read past the end is caught */
      memcpy(b, g_data[i], len);
      bad += weir_fuzz_grammar(b, len) < 0;
      free(b);
    }
  WT_ASSERT_INT_EQ(bad, 0);
}

static const char k_splice[] = "{}[]()\"\\|*+?.^$,:-0123456789eE{2,3}\\d\\u00e9é日::=#\n";

static void test_mutations(void) {
  int bad = 0, compiled = 0, refused = 0;
  for (int i = 0; i < g_n; i++) {
    for (int it = 0; it < 400; it++) {
      size_t len = g_len[i];
      uint8_t *b = malloc(len + 16);
      memcpy(b, g_data[i], len);
      const int n = 1 + (int)(rnd() % 4);
      for (int k = 0; k < n && len > 1; k++) {
        const size_t pos = 1 + (size_t)(rnd() % (len - 1));
        switch (rnd() % 4) {
        case 0: b[pos] = (uint8_t)rnd(); break;
        case 1: b[pos] = (uint8_t)k_splice[rnd() % (sizeof k_splice - 1)]; break;
        case 2: memmove(b + pos, b + pos + 1, len - pos - 1), len--; break;
        default:
          if (len < g_len[i] + 16) {
            memmove(b + pos + 1, b + pos, len - pos);
            b[pos] = (uint8_t)k_splice[rnd() % (sizeof k_splice - 1)];
            len++;
          }
        }
      }
      if (rnd() % 8 == 0) b[0] = (uint8_t)rnd();
      const int rc = weir_fuzz_grammar(b, len);
      bad += rc < 0;
      compiled += rc == 1;
      refused += rc == 0;
      free(b);
    }
  }
  WT_ASSERT_INT_EQ(bad, 0);
  CU_ASSERT(compiled > 0 && refused > 0); /* the mutations reach both outcomes */
}

/* Counts the reproducers the grammar entry refuses without a message (ctx: an int). */
static void replay_grammar(const char *path, const char *name, const char *data, size_t len,
                           void *ctx) {
  (void)path;
  (void)name;
  *(int *)ctx += weir_fuzz_grammar((const uint8_t *)data, len) < 0;
}

static void test_checked_in_reproducers(void) {
  char *dir = wt_strf("%s/tests/fuzz/corpus/grammar", WT_SOURCE_DIR);
  int bad = 0;
  int n = wt_for_each_file(dir, replay_grammar, &bad);
  if (n < 4) fprintf(stderr, "\n  %s: %d inputs, expected the 4 committed ones\n", dir, n);
  free(dir);
  CU_ASSERT(n >= 4);
  WT_ASSERT_INT_EQ(bad, 0);
}

int main(int argc, char **argv) {
  build();
  if (argc == 3 && !strcmp(argv[1], "--write-corpus")) {
    mkdir(argv[2], 0755);
    for (int i = 0; i < g_n; i++) {
      char *p = wt_strf("%s/seed%02d", argv[2], i);
      wt_write_file(p, (const char *)g_data[i], g_len[i]);
      free(p);
    }
    return 0;
  }
  static const wt_test tests[] = {{"seeds of every front end", test_seeds},
                                  {"every truncation", test_truncations},
                                  {"mutations", test_mutations},
                                  {"checked-in reproducers", test_checked_in_reproducers},
                                  {NULL, NULL}};
  const int rc = wt_run_suite("fuzz_grammar_corpus", tests);
  for (int i = 0; i < g_n; i++) free(g_data[i]);
  return rc;
}
