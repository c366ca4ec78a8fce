/* core/grammar: compile errors, exact acceptance at the edges of what each construct allows,
 * the matcher's API (clone, rollback, EOS), allowed-token masks against a brute-force check of
 * every token, masks of many matchers in parallel, precomputed token classes, and the cache. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar/internal.h"
#include "testutil.h"
#include "util/threadpool.h"
#include "walk.h"
#include "weir/sampler.h"
#include "weir/status.h"

/* ---- a small vocabulary: every byte, some words, pieces of UTF-8, a special token, EOS ---- */

static const char *const k_words[] = {
    "{", "}", "\"", "\":", "\",", "\"}", "\"]", "{\"", "[\"", "name", "age", "true", "false",
    "null", " ", "  ", "\n", ", ", ": ", "12", "3.5", "-1", "[", "]", ",", "abc", "ab", "a,b",
    "\\n", "\\\"", "\\u00e9", "héllo", "é", "日本", "\xe6\x97", "\xa5", "yes", "no", "maybe",
    "2024", "-02-", "29", "T1", ":00", "Z", "0.", "00", "e5", "ñ", "x\"y", NULL};
static weir_grammar_vocab *g_small;
static int32_t g_eos, g_special, g_empty;

static weir_grammar_vocab *small_vocab(void) {
  int nw = 0;
  while (k_words[nw]) nw++;
  const int n = 256 + nw + 3;
  weir_vocab_token *t = calloc((size_t)n, sizeof *t);
  static uint8_t bytes[256];
  for (int i = 0; i < 256; i++) {
    bytes[i] = (uint8_t)i;
    t[i] = (weir_vocab_token){&bytes[i], 1, 0};
  }
  for (int i = 0; i < nw; i++)
    t[256 + i] = (weir_vocab_token){(const uint8_t *)k_words[i], (uint32_t)strlen(k_words[i]), 0};
  g_special = 256 + nw;
  t[g_special] = (weir_vocab_token){(const uint8_t *)"<|im_end|>", 10, 1};
  g_empty = 256 + nw + 1;
  t[g_empty] = (weir_vocab_token){NULL, 0, 0};
  g_eos = 256 + nw + 2;
  t[g_eos] = (weir_vocab_token){(const uint8_t *)"</s>", 4, 0}; /* EOS even with text */
  weir_grammar_vocab *v = NULL;
  CU_ASSERT_FATAL(weir_grammar_vocab_create(t, n, &g_eos, 1, &v) == 0);
  free(t);
  return v;
}

static int compile(weir_constraint_kind kind, const char *text, int strict, weir_grammar **g,
                   char *err, size_t errlen) {
  weir_constraint_spec spec = {.kind = kind, .text = text, .len = text ? strlen(text) : 0,
                               .strict = strict, .whitespace = 1};
  return weir_grammar_compile(&spec, g, err, errlen);
}

static weir_constraint *constraint(weir_constraint_kind kind, const char *text, int whitespace) {
  weir_constraint_spec spec = {.kind = kind, .text = text, .len = text ? strlen(text) : 0,
                               .strict = 1, .whitespace = whitespace};
  weir_grammar *g = NULL;
  char err[512];
  const int rc = weir_grammar_compile(&spec, &g, err, sizeof err);
  if (rc) fprintf(stderr, "\n  compile failed: %s\n  %s\n", err, text ? text : "");
  CU_ASSERT_FATAL(rc == 0);
  weir_constraint *c = NULL;
  CU_ASSERT_FATAL(weir_constraint_create(g, g_small, &c) == 0);
  weir_grammar_release(g);
  return c;
}

/* ---- compile errors ------------------------------------------------------------------------ */

typedef struct err_case {
  weir_constraint_kind kind;
  const char *text;
  int strict;
  const char *expect;
} err_case;

static void test_compile_errors(void) {
  static const err_case cases[] = {
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"enum\": []}", 1, "\"enum\" is empty: nothing can match at /"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"array\", \"uniqueItems\": true}", 1,
       "unsupported keyword \"uniqueItems\" at /"},
      {WEIR_CONSTRAINT_JSON_SCHEMA,
       "{\"properties\": {\"a\": {\"type\": \"object\", \"minProperties\": 1}}}", 1,
       "unsupported keyword \"minProperties\" at /properties/a"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"items\": {\"type\": \"number\", \"multipleOf\": 3}}", 1,
       "unsupported keyword \"multipleOf\" at /items"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"$ref\": \"#/$defs/missing\"}", 1, "does not resolve"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"$ref\": \"https://example.com/s.json\"}", 1,
       "only local refs"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 3}", 1,
       "the minimum is greater than the maximum"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"exclusiveMinimum\": 3, "
       "\"exclusiveMaximum\": 4}", 1, "no number lies within these bounds"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"format\": \"uri\"}", 1,
       "unsupported format \"uri\""},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"minLength\": 5, \"maxLength\": 2}", 1,
       "minLength is greater than maxLength"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"pattern\": \"(?<=a)b\"}", 1,
       "pattern at /: lookaround assertions are not supported"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"object\", \"properties\": {\"a\": false}, "
       "\"required\": [\"a\"]}", 1, "required property \"a\" can have no value"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"allOf\": [{\"properties\": {\"a\": {}}, "
       "\"additionalProperties\": false}, {\"properties\": {\"b\": {}}}]}", 1,
       "excludes property \"b\""},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"strnig\"}", 1, "unknown type \"strnig\""},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": []}", 1, "\"type\" is an empty list"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"object\"", 1, "the schema is not valid JSON"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"array\", \"maxItems\": 1e9}", 1,
       "\"maxItems\" of 1000000000 is over the limit of 10000"},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "false", 1, "can produce nothing"},
      {WEIR_CONSTRAINT_REGEX, "(?=a)b", 0, "regex: lookaround assertions are not supported"},
      {WEIR_CONSTRAINT_REGEX, "(ab", 0, "a missing )"},
      {WEIR_CONSTRAINT_REGEX, "ab)", 0, "an unbalanced )"},
      {WEIR_CONSTRAINT_REGEX, "(a)\\1", 0, "backreferences are not supported"},
      {WEIR_CONSTRAINT_REGEX, "a^b", 0, "anchors are only supported"},
      {WEIR_CONSTRAINT_REGEX, "a$b", 0, "anchors are only supported"},
      {WEIR_CONSTRAINT_REGEX, "\\bword", 0, "word boundaries"},
      {WEIR_CONSTRAINT_REGEX, "(?i)abc", 0, "inline flags"},
      {WEIR_CONSTRAINT_REGEX, "a{5,2}", 0, "m > n"},
      {WEIR_CONSTRAINT_REGEX, "x{20000}", 0, "a repetition bound of 20000 is over the limit"},
      {WEIR_CONSTRAINT_REGEX, "[abc", 0, "an unterminated character class"},
      {WEIR_CONSTRAINT_REGEX, "[z-a]", 0, "a range out of order"},
      {WEIR_CONSTRAINT_REGEX, "*a", 0, "a quantifier with nothing to repeat"},
      {WEIR_CONSTRAINT_REGEX, "\\q", 0, "unknown escape \\q"},
      {WEIR_CONSTRAINT_REGEX, "a\xff", 0, "invalid UTF-8"},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= foo", 0, "line 1: rule 'foo' is used but never defined"},
      {WEIR_CONSTRAINT_GRAMMAR, "start ::= \"a\"", 0, "no rule named 'root'"},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= \"a", 0, "line 1: an unterminated string literal"},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= \"a\"\nroot ::= \"b\"", 0, "line 2: rule 'root' is defined twice"},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= x\nx ::= ( \"a\" \n", 0, "a missing )"},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= root \"a\"", 0, "can produce nothing"},
      {WEIR_CONSTRAINT_GRAMMAR, "# only a comment\n", 0, "no rule named 'root'"},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= [a-", 0, "unterminated character class"},
      {WEIR_CONSTRAINT_CHOICE, "[]", 0, "guided_choice is empty: nothing can match"},
      {WEIR_CONSTRAINT_CHOICE, "[\"a\", 1]", 0, "guided_choice[1] is not a string"},
      {WEIR_CONSTRAINT_CHOICE, "{\"a\": 1}", 0, "must be a JSON array of strings"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    weir_grammar *g = (weir_grammar *)1;
    char err[512] = "";
    const int rc = compile(cases[i].kind, cases[i].text, cases[i].strict, &g, err, sizeof err);
    if (rc != WEIR_E_INVAL) fprintf(stderr, "\n  case %zu (%s): rc %d\n", i, cases[i].text, rc);
    WT_ASSERT_INT_EQ(rc, WEIR_E_INVAL);
    CU_ASSERT_PTR_NULL(g);
    WT_ASSERT_STR_CONTAINS(err, cases[i].expect);
  }
  /* Non-strict: the unsupported keyword is ignored, the rest still holds. */
  weir_grammar *g = NULL;
  char err[256];
  WT_ASSERT_INT_EQ(compile(WEIR_CONSTRAINT_JSON_SCHEMA,
                           "{\"type\": \"array\", \"uniqueItems\": true, \"maxItems\": 2}", 0, &g,
                           err, sizeof err), 0);
  weir_grammar_release(g);
}

static void test_limits(void) {
  weir_grammar_limits lim;
  weir_grammar_limits_default(&lim);
  char err[512];
  weir_grammar *g = NULL;
  /* Too deep: 100 nested arrays. */
  char *deep = malloc(4096);
  size_t n = 0;
  for (int i = 0; i < 100; i++) n += (size_t)sprintf(deep + n, "{\"type\":\"array\",\"items\":");
  n += (size_t)sprintf(deep + n, "{\"type\":\"null\"}");
  for (int i = 0; i < 100; i++) deep[n++] = '}';
  deep[n] = 0;
  weir_constraint_spec spec = {.kind = WEIR_CONSTRAINT_JSON_SCHEMA, .text = deep, .len = n, .strict = 1};
  WT_ASSERT_INT_EQ(weir_grammar_compile(&spec, &g, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "the schema is nested too deeply (over 64 levels)");
  free(deep);
  /* Too large: more subschemas than the limit. */
  lim.max_schema_nodes = 50;
  spec.limits = &lim;
  char *wide = malloc(8192);
  n = (size_t)sprintf(wide, "{\"type\":\"object\",\"properties\":{");
  for (int i = 0; i < 60; i++) n += (size_t)sprintf(wide + n, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
  n += (size_t)sprintf(wide + n, "}}");
  spec.text = wide;
  spec.len = n;
  WT_ASSERT_INT_EQ(weir_grammar_compile(&spec, &g, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "the schema is too large (over 50 subschemas)");
  free(wide);
  /* Text over the size limit. */
  lim.max_text_bytes = 8;
  spec.text = "{\"type\": \"string\"}";
  spec.len = strlen(spec.text);
  WT_ASSERT_INT_EQ(weir_grammar_compile(&spec, &g, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "the constraint is too large: 18 bytes, the limit is 8");
  /* An automaton beyond the position limit: (a|b)*a(a|b){12} needs 2^13 DFA states. */
  weir_grammar_limits_default(&lim);
  lim.max_dfa_states = 1000;
  spec = (weir_constraint_spec){.kind = WEIR_CONSTRAINT_REGEX, .text = "(a|b)*a(a|b){12}",
                                .len = 16, .limits = &lim};
  WT_ASSERT_INT_EQ(weir_grammar_compile(&spec, &g, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "the constraint is too large: over 1000 automaton states");
  CU_ASSERT_PTR_NULL(g);
  /* The same regex within the default limits compiles. */
  spec.limits = NULL;
  WT_ASSERT_INT_EQ(weir_grammar_compile(&spec, &g, err, sizeof err), 0);
  CU_ASSERT(weir_grammar_num_positions(g) > 8192);
  weir_grammar_release(g);
  /* The CPU-time budget: 30,000 choices take well over 1 ms to compile, so with a 1 ms budget
   * they are refused, naming the budget; with the default (10 s) they compile. */
  size_t cap = 30000 * 12 + 8;
  char *many = malloc(cap);
  n = 0;
  many[n++] = '[';
  for (int i = 0; i < 30000; i++) n += (size_t)snprintf(many + n, cap - n, "%s\"w%dz\"", i ? "," : "", i);
  many[n++] = ']';
  many[n] = 0;
  weir_grammar_limits_default(&lim);
  CU_ASSERT_EQUAL(lim.max_compile_ms, 10000);
  lim.max_compile_ms = 1;
  spec = (weir_constraint_spec){.kind = WEIR_CONSTRAINT_CHOICE, .text = many, .len = n,
                                .limits = &lim};
  WT_ASSERT_INT_EQ(weir_grammar_compile(&spec, &g, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "took more than 1 ms of CPU time to compile");
  CU_ASSERT_PTR_NULL(g);
  spec.limits = NULL;
  WT_ASSERT_INT_EQ(weir_grammar_compile(&spec, &g, err, sizeof err), 0);
  weir_grammar_release(g);
  free(many);
}

/* ---- exact acceptance -------------------------------------------------------------------- */

/* 1 when the whole of text is accepted and complete. */
static int matches(weir_constraint *c, const char *text) {
  weir_matcher *m;
  CU_ASSERT_FATAL(weir_matcher_create(c, &m) == 0);
  const int ok = weir_matcher_accept_bytes(m, (const uint8_t *)text, strlen(text)) == 0 &&
                 weir_matcher_is_complete(m);
  weir_matcher_free(m);
  return ok;
}

typedef struct accept_case {
  weir_constraint_kind kind;
  const char *constraint;
  const char *yes[8];
  const char *no[8];
} accept_case;

static void test_acceptance(void) {
  static const accept_case cases[] = {
      {WEIR_CONSTRAINT_REGEX, "a{2,3}b", {"aab", "aaab"}, {"ab", "aaaab", "aa", ""}},
      {WEIR_CONSTRAINT_REGEX, "x.y", {"xay", "xéy", "x\ty"}, {"x\ny", "x\ry", "xy", "x\xe2\x80\xa8y"}},
      {WEIR_CONSTRAINT_REGEX, "\\d\\w\\s", {"1a ", "9_\t"}, {"١a ", "1é ", "1a\xc2\xa0"}},
      {WEIR_CONSTRAINT_REGEX, "[^\\d]", {"a", "!"}, {"1", "é"}},
      {WEIR_CONSTRAINT_REGEX, "^(cat|dog)$|bird", {"cat", "dog", "bird"}, {"catdog", "^cat", "cat$"}},
      {WEIR_CONSTRAINT_REGEX, "[\\u00e0-\\u00e5]+", {"à", "åàá"}, {"a", "æ"}},
      {WEIR_CONSTRAINT_CHOICE, "[\"a\", \"ab\", \"\"]", {"a", "ab", ""}, {"b", "abc", "aa"}},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= list\nlist ::= list \",\" item | item\nitem ::= [a-c]+",
       {"a", "ab,c", "a,b,cc"}, {",a", "a,", "a,,b", "d"}},
      {WEIR_CONSTRAINT_GRAMMAR, "root ::= (\"(\" root \")\")* \"x\"?", {"", "x", "()x", "(())()"}, {"(", "())", "x()"}},
      {WEIR_CONSTRAINT_JSON_OBJECT, NULL, {"{}", "{\"a\":[1,{\"b\":null}]}", " { \"x\" : true } "},
       {"[]", "1", "{\"a\":}", "{'a':1}", "{\"a\":01}", "{\"a\":1,}"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120}",
       {"0", "7", "120", "99"}, {"-1", "121", "007", "1.0", "1e2", "-0"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"exclusiveMinimum\": -5, \"exclusiveMaximum\": 0}",
       {"-4", "-1"}, {"-5", "0", "-0", "-6"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 1.5}",
       {"0.1", "1", "1.5", "1.50", "0.0001", "1.499"}, {"0", "0.0", "0.000", "-0.5", "1.51", "2", "1.5001"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"number\", \"minimum\": -2.25, \"maximum\": -0.5}",
       {"-2.25", "-1", "-0.5", "-2.2499", "-0.75"}, {"-2.26", "-0.49", "0", "-3", "2"}},
      /* Beyond 2^53 the bound arrives as the nearest double (12345678901234567168): outputs
       * keep one double above it, clear of whatever the digits were. */
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"integer\", \"minimum\": 12345678901234567890}",
       {"12345678901234569216", "99999999999999999999", "123456789012345678901"},
       {"12345678901234567889", "12345678901234569215", "1"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
       {"\"ab\"", "\"日本語\"", "\"\\n\\t\\\"\"", "\"\\u00e9x\""}, {"\"a\"", "\"日本語x\"", "\"abcd\"", "\"\\ud83d\\ude00\""}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"pattern\": \"^a\\\"b\\\\\\\\c$\"}",
       {"\"a\\\"b\\\\c\""}, {"\"a\"b\\c\"", "\"a\\u0022b\\\\c\""}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"format\": \"date\"}",
       {"\"2024-02-29\"", "\"2000-02-29\"", "\"1999-12-31\"", "\"0001-01-01\""},
       {"\"2023-02-29\"", "\"1900-02-29\"", "\"2023-04-31\"", "\"0000-01-01\"", "\"2023-13-01\""}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"format\": \"date-time\"}",
       {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T23:59:59.123+05:30\""},
       {"\"2024-01-02 03:04:05Z\"", "\"2024-01-02T24:00:00Z\"", "\"2024-01-02T03:04:05\""}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"format\": \"uuid\"}",
       {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567e89b12d3a456426614174000\"", "\"xyz\""}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"enum\": [\"a \\\"q\\\"\", 1.5, null, [1, {\"k\": true}]]}",
       {"\"a \\\"q\\\"\"", "1.5", "null", "[1,{\"k\":true}]"}, {"\"a \"q\"\"", "1", "[1, {\"k\": true}]"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA,
       "{\"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"boolean\"}}, "
       "\"required\": [\"b\"], \"additionalProperties\": false}",
       {"{\"b\":true}", "{\"a\":1,\"b\":false}"}, {"{}", "{\"a\":1}", "{\"b\":true,\"a\":1}", "{\"b\":true,\"c\":1}"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA,
       "{\"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": {\"type\": \"string\"}}",
       {"{\"a\":1,\"b\":\"x\"}", "{\"b\":\"x\",\"ab\":\"y\"}", "{\"\":\"\"}"}, {"{\"a\":1,\"a\":\"x\"}", "{\"b\":1}", "{\"a\":\"x\"}"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA,
       "{\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], "
       "\"items\": {\"type\": \"boolean\"}, \"minItems\": 1, \"maxItems\": 3}",
       {"[1]", "[1,\"a\"]", "[1,\"a\",true]"}, {"[]", "[\"a\"]", "[1,2]", "[1,\"a\",true,false]"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"array\", \"items\": false, \"prefixItems\": [{\"const\": 1}]}",
       {"[]", "[1]"}, {"[1,1]", "[2]"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA,
       "{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"c\": {\"type\": \"array\", "
       "\"items\": {\"$ref\": \"#/$defs/n\"}}}, \"required\": [\"c\"], \"additionalProperties\": false}}, "
       "\"$ref\": \"#/$defs/n\"}",
       {"{\"c\":[]}", "{\"c\":[{\"c\":[{\"c\":[]}]},{\"c\":[]}]}"}, {"{}", "{\"c\":[{}]}", "{\"c\":[1]}"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"anyOf\": [{\"type\": \"string\", \"maxLength\": 1}, {\"type\": \"null\"}]}",
       {"\"a\"", "null"}, {"\"ab\"", "1"}},
      {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": [\"boolean\", \"null\"]}", {"true", "null"}, {"0", "\"true\""}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    weir_constraint *c = constraint(cases[i].kind, cases[i].constraint, 1);
    for (int k = 0; k < 8 && cases[i].yes[k]; k++)
      if (!matches(c, cases[i].yes[k])) {
        fprintf(stderr, "\n  %s should accept %s\n", cases[i].constraint, cases[i].yes[k]);
        CU_FAIL("a valid text was refused");
      }
    for (int k = 0; k < 8 && cases[i].no[k]; k++)
      if (matches(c, cases[i].no[k])) {
        fprintf(stderr, "\n  %s should refuse %s\n", cases[i].constraint, cases[i].no[k]);
        CU_FAIL("an invalid text was accepted");
      }
    weir_constraint_release(c);
  }
}

/* ---- the matcher ------------------------------------------------------------------------- */

static int32_t tok(const char *word) {
  if (strlen(word) == 1) return (unsigned char)word[0];
  for (int i = 0; k_words[i]; i++)
    if (!strcmp(k_words[i], word)) return 256 + i;
  CU_FAIL_FATAL("no such token");
  return -1;
}

static void test_matcher_api(void) {
  weir_constraint *c = constraint(WEIR_CONSTRAINT_CHOICE, "[\"yes\", \"no\", \"nope\"]", 0);
  weir_matcher *m, *k;
  CU_ASSERT_FATAL(weir_matcher_create(c, &m) == 0);
  WT_ASSERT_INT_EQ(weir_matcher_num_steps(m), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(m), 0);
  WT_ASSERT_INT_EQ(weir_matcher_can_continue(m), 1);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, g_eos), WEIR_E_INVAL); /* not complete */
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, g_special), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, g_empty), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, -1), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, g_eos + 1), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, tok("x")), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_matcher_num_steps(m), 0);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, tok("no")), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(m), 1);
  WT_ASSERT_INT_EQ(weir_matcher_can_continue(m), 1); /* "nope" */
  /* A clone goes its own way. */
  CU_ASSERT_FATAL(weir_matcher_clone(m, &k) == 0);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(k, tok("p")), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(k), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(m), 1);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(k, tok("e")), 0);
  WT_ASSERT_INT_EQ(weir_matcher_can_continue(k), 0); /* complete, nothing extends it */
  WT_ASSERT_INT_EQ(weir_matcher_num_steps(k), 3);
  /* EOS only when complete; then the matcher has ended. */
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(k, g_eos), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_ended(k), 1);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(k, tok("e")), WEIR_E_INVAL);
  uint32_t mask[WEIR_MASK_WORDS(1024)];
  WT_ASSERT_INT_EQ(weir_matcher_fill_mask(k, mask), 0);
  int any = 0;
  for (size_t w = 0; w < WEIR_MASK_WORDS(weir_grammar_vocab_size(g_small)); w++) any |= mask[w] != 0;
  WT_ASSERT_INT_EQ(any, 0);
  /* Rolling back over EOS reopens it; over tokens restores the state exactly. */
  WT_ASSERT_INT_EQ(weir_matcher_rollback(k, 1), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_ended(k), 0);
  WT_ASSERT_INT_EQ(weir_matcher_rollback(k, 2), 0);
  WT_ASSERT_INT_EQ(weir_matcher_num_steps(k), 1);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(k), 1);
  WT_ASSERT_INT_EQ(weir_matcher_rollback(k, 2), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(weir_matcher_rollback(k, 1), 0);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(k, tok("yes")), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(k), 1);
  weir_matcher_free(k);
  weir_matcher_free(m);
  /* The matcher keeps its constraint alive. */
  CU_ASSERT_FATAL(weir_matcher_create(c, &m) == 0);
  weir_constraint_release(c);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, tok("yes")), 0);
  weir_matcher_free(m);
}

/* ---- masks against brute force ------------------------------------------------------------- */

typedef struct brute_case {
  weir_constraint_kind kind;
  const char *text;
} brute_case;

static const brute_case k_brute[] = {
    {WEIR_CONSTRAINT_JSON_OBJECT, NULL},
    {WEIR_CONSTRAINT_CHOICE, "[\"a\", \"ab\", \"abc\", \"a,b\", \"yes\", \"\"]"},
    {WEIR_CONSTRAINT_REGEX, "(ab|a)*c?[0-9]{0,3}"},
    {WEIR_CONSTRAINT_REGEX, "(é|日本)+\\n?"},
    {WEIR_CONSTRAINT_GRAMMAR, "root ::= list\nlist ::= list \",\" item | item\nitem ::= [a-c]+ | \"(\" list \")\""},
    {WEIR_CONSTRAINT_GRAMMAR, "root ::= a b\na ::= \"x\"?\nb ::= c*\nc ::= \"y\" | a \"z\""},
    {WEIR_CONSTRAINT_GRAMMAR, "root ::= s\ns ::= s s | \"(\" s \")\" | \"\""},
    {WEIR_CONSTRAINT_JSON_SCHEMA,
     "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 4}, "
     "\"age\": {\"type\": \"integer\", \"minimum\": -1, \"maximum\": 12}, \"tags\": {\"type\": "
     "\"array\", \"items\": {\"enum\": [\"x\\\"y\", \"ab\", null]}, \"maxItems\": 4}}, "
     "\"required\": [\"name\"], \"additionalProperties\": {\"type\": \"boolean\"}}"},
    {WEIR_CONSTRAINT_JSON_SCHEMA,
     "{\"$defs\": {\"t\": {\"anyOf\": [{\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/t\"}, "
     "\"maxItems\": 3}, {\"type\": \"number\", \"minimum\": 0.5, \"exclusiveMaximum\": 3}]}}, "
     "\"$ref\": \"#/$defs/t\"}"},
    {WEIR_CONSTRAINT_JSON_SCHEMA, "{\"type\": \"string\", \"format\": \"date-time\"}"},
};

static void test_masks_brute_force(void) {
  gw_rng rng = {42};
  for (size_t i = 0; i < sizeof k_brute / sizeof k_brute[0]; i++) {
    weir_constraint *c = constraint(k_brute[i].kind, k_brute[i].text, 1);
    for (int w = 0; w < 6; w++) {
      gw_walk_opts o = {.max_tokens = 80, .free_tokens = 20 + w * 5, .stop_prob = 0.2,
                        .check_brute = 1};
      char out[4096];
      size_t n;
      const int rc = gw_walk(c, &rng, &o, out, sizeof out, &n);
      WT_ASSERT_INT_EQ(rc, 1);
      if (o.brute_mismatches)
        fprintf(stderr, "\n  %s: %lld mismatches on the walk to %s\n",
                k_brute[i].text ? k_brute[i].text : "json_object", (long long)o.brute_mismatches, out);
      WT_ASSERT_INT_EQ(o.brute_mismatches, 0);
      CU_ASSERT(o.mask_steps > 0);
    }
    weir_constraint_release(c);
  }
}

/* The 512-token tiny vocabulary, brute force too (SentencePiece pieces and byte tokens). */
static void test_masks_brute_force_tiny(void) {
  char *dir = wt_mkdtemp();
  char *model = wt_strf("%s/tiny.gguf", dir);
  char *argv[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--out", model, NULL};
  WT_ASSERT_INT_EQ(wt_run(argv, NULL, 60000), 0);
  weir_grammar_vocab *v;
  CU_ASSERT_FATAL(gw_vocab_from_gguf(model, NULL, &v) == 0);
  gw_rng rng = {7};
  for (size_t i = 0; i < sizeof k_brute / sizeof k_brute[0]; i += 2) {
    weir_constraint_spec spec = {.kind = k_brute[i].kind, .text = k_brute[i].text,
                                 .len = k_brute[i].text ? strlen(k_brute[i].text) : 0,
                                 .strict = 1, .whitespace = 1};
    weir_grammar *g;
    char err[256];
    CU_ASSERT_FATAL(weir_grammar_compile(&spec, &g, err, sizeof err) == 0);
    weir_constraint *c;
    CU_ASSERT_FATAL(weir_constraint_create(g, v, &c) == 0);
    weir_grammar_release(g);
    gw_walk_opts o = {.max_tokens = 60, .free_tokens = 25, .stop_prob = 0.2, .check_brute = 1};
    char out[4096];
    WT_ASSERT_INT_EQ(gw_walk(c, &rng, &o, out, sizeof out, NULL), 1);
    WT_ASSERT_INT_EQ(o.brute_mismatches, 0);
    weir_constraint_release(c);
  }
  weir_grammar_vocab_release(v);
  free(model);
  wt_rmtree(dir);
  free(dir);
}

/* A vocabulary without one byte the grammar needs: the mask says what can still be written. */
static void test_special_and_eos(void) {
  weir_constraint *c = constraint(WEIR_CONSTRAINT_REGEX, "a+", 0);
  weir_matcher *m;
  CU_ASSERT_FATAL(weir_matcher_create(c, &m) == 0);
  uint32_t mask[WEIR_MASK_WORDS(1024)];
  WT_ASSERT_INT_EQ(weir_matcher_fill_mask(m, mask), 0);
  WT_ASSERT_INT_EQ(weir_mask_test(mask, 'a'), 1);
  WT_ASSERT_INT_EQ(weir_mask_test(mask, g_eos), 0);     /* not complete yet */
  WT_ASSERT_INT_EQ(weir_mask_test(mask, g_special), 0); /* never */
  WT_ASSERT_INT_EQ(weir_mask_test(mask, g_empty), 0);   /* never */
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(m, 'a'), 0);
  WT_ASSERT_INT_EQ(weir_matcher_fill_mask(m, mask), 0);
  WT_ASSERT_INT_EQ(weir_mask_test(mask, g_eos), 1);
  WT_ASSERT_INT_EQ(weir_mask_test(mask, 'a'), 1);
  WT_ASSERT_INT_EQ(weir_mask_test(mask, 'b'), 0);
  WT_ASSERT_INT_EQ(weir_mask_test(mask, g_special), 0);
  weir_matcher_free(m);
  weir_constraint_release(c);
}

/* ---- many matchers at once, precomputation, speculative rollback ------------------------ */

static void test_parallel_and_precompute(void) {
  weir_constraint *c = constraint(WEIR_CONSTRAINT_JSON_SCHEMA, k_brute[7].text, 1);
  weir_constraint *pre = constraint(WEIR_CONSTRAINT_JSON_SCHEMA, k_brute[7].text, 1);
  WT_ASSERT_INT_EQ(weir_constraint_precompute(pre, NULL), 0);
  CU_ASSERT(weir_constraint_memory(pre) > weir_constraint_memory(c));
  weir_threadpool *pool;
  CU_ASSERT_FATAL(weir_threadpool_create(2, &pool) == 0);
  enum { N = 12 };
  const size_t words = WEIR_MASK_WORDS(weir_grammar_vocab_size(g_small));
  weir_matcher *ms[N], *mp[N];
  uint32_t *batch = calloc(N * words, sizeof *batch), *one = calloc(words, sizeof *one);
  gw_rng rng = {99};
  for (int i = 0; i < N; i++) {
    CU_ASSERT_FATAL(weir_matcher_create(c, &ms[i]) == 0);
    CU_ASSERT_FATAL(weir_matcher_create(pre, &mp[i]) == 0);
    /* advance matcher i by i allowed tokens */
    for (int s = 0; s < i * 3; s++) {
      weir_matcher_fill_mask(ms[i], one);
      int32_t cand[1024], k = 0;
      for (int32_t t = 0; t < weir_grammar_vocab_size(g_small); t++)
        if (weir_mask_test(one, t) && t != g_eos) cand[k++] = t;
      if (!k) break;
      const int32_t t = cand[gw_next(&rng) % (uint64_t)k];
      WT_ASSERT_INT_EQ(weir_matcher_accept_token(ms[i], t), 0);
      WT_ASSERT_INT_EQ(weir_matcher_accept_token(mp[i], t), 0);
    }
  }
  weir_matcher_free(ms[N - 1]);
  ms[N - 1] = NULL; /* an unconstrained row */
  WT_ASSERT_INT_EQ(weir_matchers_fill_masks(ms, N, batch, words, pool), 0);
  for (int i = 0; i < N - 1; i++) {
    WT_ASSERT_INT_EQ(weir_matcher_fill_mask(mp[i], one), 0);
    CU_ASSERT(memcmp(one, batch + (size_t)i * words, words * sizeof *one) == 0);
  }
  uint32_t all = ~0u;
  for (size_t w = 0; w < words; w++) all &= batch[(N - 1) * words + w];
  WT_ASSERT_INT_EQ(all, ~0u);
  /* Speculative decoding: accept drafts, roll back the rejected ones, accept the correction;
   * the state equals a matcher fed only what was kept. */
  weir_matcher *spec, *plain;
  CU_ASSERT_FATAL(weir_matcher_create(c, &spec) == 0);
  CU_ASSERT_FATAL(weir_matcher_create(c, &plain) == 0);
  const int32_t drafts[] = {tok("{\""), tok("name"), tok("\":"), tok("\""), tok("ab")};
  for (int i = 0; i < 5; i++) WT_ASSERT_INT_EQ(weir_matcher_accept_token(spec, drafts[i]), 0);
  WT_ASSERT_INT_EQ(weir_matcher_rollback(spec, 2), 0);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(spec, tok(" ")), 0);
  for (int i = 0; i < 3; i++) WT_ASSERT_INT_EQ(weir_matcher_accept_token(plain, drafts[i]), 0);
  WT_ASSERT_INT_EQ(weir_matcher_accept_token(plain, tok(" ")), 0);
  uint32_t *a = calloc(words, sizeof *a), *b = calloc(words, sizeof *b);
  WT_ASSERT_INT_EQ(weir_matcher_fill_mask(spec, a), 0);
  WT_ASSERT_INT_EQ(weir_matcher_fill_mask(plain, b), 0);
  CU_ASSERT(memcmp(a, b, words * sizeof *a) == 0);
  WT_ASSERT_INT_EQ(weir_mask_test(a, tok("\"")), 1);
  WT_ASSERT_INT_EQ(weir_mask_test(a, tok("{")), 0);
  free(a);
  free(b);
  weir_matcher_free(spec);
  weir_matcher_free(plain);
  for (int i = 0; i < N; i++) {
    weir_matcher_free(ms[i]);
    weir_matcher_free(mp[i]);
  }
  free(batch);
  free(one);
  weir_threadpool_destroy(pool);
  weir_constraint_release(c);
  weir_constraint_release(pre);
}

/* ---- the cache ------------------------------------------------------------------------------- */

/* Idle entries expire (issue 28: a burst of one-off constraints must not stay resident);
 * recently used ones and what requests hold stay whole. */
static void test_cache_expire(void) {
  weir_constraint_cache *cache;
  CU_ASSERT_FATAL(weir_constraint_cache_create(g_small, 8, 0, &cache) == 0);
  char err[256];
  weir_constraint *a, *b;
  weir_constraint_spec s1 = {.kind = WEIR_CONSTRAINT_REGEX, .text = "[0-9]+", .len = 6};
  weir_constraint_spec s2 = {.kind = WEIR_CONSTRAINT_REGEX, .text = "[a-z]+", .len = 6};
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s1, &a, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s2, &b, err, sizeof err), 0);
  size_t freed = 1;
  /* used just now: an hour's idle bound keeps both */
  WT_ASSERT_INT_EQ(weir_constraint_cache_expire(cache, 3600ull * 1000000000ull, &freed), 0);
  WT_ASSERT_INT_EQ(freed, 0);
  usleep(20000);
  weir_constraint *b2;
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s2, &b2, err, sizeof err), 0); /* a hit */
  CU_ASSERT(b2 == b);
  /* 10 ms: s1 (idle 20 ms) goes, s2 (used just now) stays */
  WT_ASSERT_INT_EQ(weir_constraint_cache_expire(cache, 10000000ull, &freed), 1);
  CU_ASSERT(freed >= 6); /* its key at least */
  uint64_t hits, misses;
  int32_t entries;
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(entries, 1);
  /* the expired constraint is still whole for its holder */
  weir_matcher *m;
  CU_ASSERT_FATAL(weir_matcher_create(a, &m) == 0);
  WT_ASSERT_INT_EQ(weir_matcher_accept_bytes(m, (const uint8_t *)"42", 2), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(m), 1);
  weir_matcher_free(m);
  /* and asking again compiles it again */
  weir_constraint *a2;
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s1, &a2, err, sizeof err), 0);
  CU_ASSERT(a2 != a);
  WT_ASSERT_INT_EQ(weir_constraint_cache_expire(cache, 0, NULL), 2);
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(entries, 0);
  weir_constraint_release(a);
  weir_constraint_release(a2);
  weir_constraint_release(b);
  weir_constraint_release(b2);
  weir_constraint_cache_free(cache);
}

static void test_cache(void) {
  weir_constraint_cache *cache;
  CU_ASSERT_FATAL(weir_constraint_cache_create(g_small, 2, 0, &cache) == 0);
  char err[256];
  weir_constraint *a, *b, *d, *e;
  weir_constraint_spec s1 = {.kind = WEIR_CONSTRAINT_JSON_SCHEMA, .text = "{\"type\": \"integer\"}",
                             .len = 19, .strict = 1};
  weir_constraint_spec s1b = {.kind = WEIR_CONSTRAINT_JSON_SCHEMA,
                              .text = "{ \"type\" :\n \"integer\" }", .len = 23, .strict = 1};
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s1, &a, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s1b, &b, err, sizeof err), 0);
  CU_ASSERT(a == b); /* whitespace does not matter */
  uint64_t hits, misses;
  int32_t entries;
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(hits, 1);
  WT_ASSERT_INT_EQ(misses, 1);
  WT_ASSERT_INT_EQ(entries, 1);
  /* Errors are cached too, with their message. */
  weir_constraint_spec bad = {.kind = WEIR_CONSTRAINT_JSON_SCHEMA, .text = "{\"enum\": []}", .len = 12, .strict = 1};
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &bad, &d, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "\"enum\" is empty");
  err[0] = 0;
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &bad, &d, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "\"enum\" is empty");
  CU_ASSERT_PTR_NULL(d);
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(hits, 2);
  WT_ASSERT_INT_EQ(entries, 2);
  /* A third text evicts the least recently used (the integer schema, used before the error). */
  weir_constraint_spec s2 = {.kind = WEIR_CONSTRAINT_REGEX, .text = "[0-9]+", .len = 6};
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s2, &e, err, sizeof err), 0);
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(entries, 2);
  weir_constraint *a2;
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s1, &a2, err, sizeof err), 0);
  CU_ASSERT(a2 != a); /* compiled again */
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(misses, 4);
  /* The evicted constraint is still whole for its holders. */
  weir_matcher *m;
  CU_ASSERT_FATAL(weir_matcher_create(a, &m) == 0);
  WT_ASSERT_INT_EQ(weir_matcher_accept_bytes(m, (const uint8_t *)"-12", 3), 0);
  WT_ASSERT_INT_EQ(weir_matcher_is_complete(m), 1);
  weir_matcher_free(m);
  weir_constraint_release(a);
  weir_constraint_release(b);
  weir_constraint_release(e);
  weir_constraint_release(a2);
  weir_constraint_cache_free(cache);
  /* A byte bound: two entries fit by count, but after the first one's token classes grow the
   * second insertion evicts it. */
  CU_ASSERT_FATAL(weir_constraint_cache_create(g_small, 8, 1, &cache) == 0);
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s1, &a, err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_constraint_precompute(a, NULL), 0);
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(entries, 1); /* the only entry stays, over the bound or not */
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s2, &e, err, sizeof err), 0);
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(entries, 1);
  WT_ASSERT_INT_EQ(weir_constraint_cache_get(cache, &s2, &b, err, sizeof err), 0);
  CU_ASSERT(b == e); /* the one kept is the newest */
  weir_constraint_release(a);
  weir_constraint_release(b);
  weir_constraint_release(e);
  weir_constraint_cache_free(cache);
}

/* Several threads sharing one small cache (evictions all the time) and walking what they get:
 * every lookup returns a usable constraint or the cached error, and nothing leaks (ASan). */
typedef struct cache_worker {
  weir_constraint_cache *cache;
  int id, failures;
} cache_worker;

static void *cache_worker_run(void *arg) {
  cache_worker *w = arg;
  static const char *const texts[] = {"[a-c]+", "[0-9]{2,4}", "(yes|no)", "x*y", "[^z]{1,3}", "("};
  gw_rng rng = {(uint64_t)w->id * 77 + 1};
  for (int i = 0; i < 60; i++) {
    const char *t = texts[gw_next(&rng) % 6];
    weir_constraint_spec spec = {.kind = WEIR_CONSTRAINT_REGEX, .text = t, .len = strlen(t)};
    weir_constraint *c = NULL;
    char err[256];
    const int rc = weir_constraint_cache_get(w->cache, &spec, &c, err, sizeof err);
    if (!strcmp(t, "(")) {
      w->failures += rc != WEIR_E_INVAL || !strstr(err, "a missing )");
      continue;
    }
    if (rc) {
      w->failures++;
      continue;
    }
    gw_walk_opts o = {.max_tokens = 20, .free_tokens = 5, .stop_prob = 0.3};
    char out[256];
    w->failures += gw_walk(c, &rng, &o, out, sizeof out, NULL) != 1;
    weir_constraint_release(c);
  }
  return NULL;
}

static void test_cache_threads(void) {
  weir_constraint_cache *cache;
  CU_ASSERT_FATAL(weir_constraint_cache_create(g_small, 3, 1 << 20, &cache) == 0);
  pthread_t th[4];
  cache_worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (cache_worker){cache, i, 0};
    CU_ASSERT_FATAL(pthread_create(&th[i], NULL, cache_worker_run, &w[i]) == 0);
  }
  int failures = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    failures += w[i].failures;
  }
  WT_ASSERT_INT_EQ(failures, 0);
  uint64_t hits, misses;
  int32_t entries;
  weir_constraint_cache_stats(cache, &hits, &misses, &entries);
  WT_ASSERT_INT_EQ(hits + misses, 240);
  CU_ASSERT(entries <= 3);
  weir_constraint_cache_free(cache);
}

/* Byte classes are interned: the same byte set is one class whichever way it was made (a
 * literal's byte, a one-byte range, a set), so the determinizer partitions no more than it
 * must. Bytes 0 and 255 are the table's edges. */
static void test_class_interning(void) {
  weir_grammar_limits lim;
  weir_grammar_limits_default(&lim);
  weir__gb b;
  WT_ASSERT_INT_EQ(weir__gb_init(&b, &lim), 0);
  const uint32_t a1 = weir__rx_byte(&b, 'a'), a2 = weir__rx_range(&b, 'a', 'a');
  weir__bset ab = {{0}};
  weir__bset_add(&ab, 'a');
  weir__bset_add(&ab, 'b');
  const uint32_t ab1 = weir__rx_class(&b, &ab), ab2 = weir__rx_range(&b, 'a', 'b');
  const uint32_t z1 = weir__rx_byte(&b, 0), z2 = weir__rx_range(&b, 0, 0);
  const uint32_t f1 = weir__rx_byte(&b, 255), f2 = weir__rx_range(&b, 255, 255);
  const uint32_t lit = weir__rx_lit(&b, "abba", 4);
  WT_ASSERT_INT_EQ(b.status, 0);
  CU_ASSERT_EQUAL(b.nodes[a1].a, b.nodes[a2].a);
  CU_ASSERT_EQUAL(b.nodes[ab1].a, b.nodes[ab2].a);
  CU_ASSERT_NOT_EQUAL(b.nodes[a1].a, b.nodes[ab1].a);
  CU_ASSERT_EQUAL(b.nodes[z1].a, b.nodes[z2].a);
  CU_ASSERT_EQUAL(b.nodes[f1].a, b.nodes[f2].a);
  CU_ASSERT_NOT_EQUAL(b.nodes[z1].a, b.nodes[f1].a);
  /* {a}, {a,b}, {0}, {255} and now {b}: five distinct sets, five classes. */
  WT_ASSERT_INT_EQ(b.n_classes, 5);
  CU_ASSERT_EQUAL(b.nodes[lit].kind, WEIR__RX_SEQ);
  for (uint32_t c = 0; c < b.n_classes; c++) {
    int bits = 0;
    for (int w = 0; w < 4; w++) bits += __builtin_popcountll(b.classes[c].w[w]);
    CU_ASSERT(bits == 1 || bits == 2);
  }
  weir__gb_free(&b);
}

/* Building the vocabulary asserts as it goes, so it is the first test; releasing it asserts
 * nothing, so it is the suite's cleanup, not a test. */
static void test_setup(void) { g_small = small_vocab(); }
static int suite_cleanup(void) {
  weir_grammar_vocab_release(g_small);
  return 0;
}

int main(void) {
  static const wt_test tests[] = {
      {"a small vocabulary", test_setup},
      {"byte classes are interned", test_class_interning},
      {"compile errors name the problem and where", test_compile_errors},
      {"limits: depth, subschemas, text size, automaton size", test_limits},
      {"exact acceptance at the edges of each construct", test_acceptance},
      {"matcher: clone, rollback, EOS, special tokens", test_matcher_api},
      {"masks equal a brute-force check of every token", test_masks_brute_force},
      {"masks on the tiny model's vocabulary, brute force", test_masks_brute_force_tiny},
      {"special tokens never, EOS exactly when complete", test_special_and_eos},
      {"parallel masks, precomputed classes, speculative rollback", test_parallel_and_precompute},
      {"the constraint cache", test_cache},
      {"idle cached constraints expire", test_cache_expire},
      {"the cache shared by threads", test_cache_threads},
      {NULL, NULL}};
  return wt_run_suite_ex("grammar", tests, NULL, suite_cleanup);
}
