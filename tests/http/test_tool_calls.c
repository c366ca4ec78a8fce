/* core/template/tool_calls.c: reading tool calls out of a reply in each format (Hermes/Qwen,
 * Mistral, Llama 3 with and without <|python_tag|>, the forced shapes), what stays content,
 * malformed calls left as text, and how much of a stream may go out before a call begins. */
#include <stdlib.h>
#include <string.h>

#include "template/tool_calls.h"
#include "testutil.h"

typedef struct call_case {
  const char *text;
  weir_tool_mode mode;
  const char *named;
  const char *content;     /* expected content */
  int num_calls;
  const char *names[3];    /* expected names and arguments, in order */
  const char *arguments[3];
  int dropped;             /* expected dropped_partial */
} call_case;

static const call_case k_cases[] = {
    /* Hermes / Qwen: content before the first call, trimmed; two calls; arguments printed
     * compactly whatever the model's spacing. */
    {"Let me look.\n<tool_call>\n{\"name\": \"get_verse\", \"arguments\": {\"book\": "
     "\"Genesis\", \"chapter\": 1}}\n</tool_call>\n<tool_call>{\"name\":\"count\",\"arguments\":"
     "{\"n\":3}}</tool_call>",
     WEIR_TOOLS_AUTO, NULL, "Let me look.", 2, {"get_verse", "count"},
     {"{\"book\":\"Genesis\",\"chapter\":1}", "{\"n\":3}"}},
    /* An unclosed last call (cut by a stop string) is still read. */
    {"<tool_call>{\"name\":\"count\",\"arguments\":{\"n\":1}}", WEIR_TOOLS_AUTO, NULL, "", 1,
     {"count"}, {"{\"n\":1}"}},
    /* Cut inside a second call (max_tokens): the whole first one is the call. */
    {"Hm. <tool_call>{\"name\":\"count\",\"arguments\":{\"n\":1}}</tool_call>\n<tool_call>"
     "{\"name\":\"cou", WEIR_TOOLS_AUTO, NULL, "Hm.", 1, {"count"}, {"{\"n\":1}"}, 1},
    /* Cut inside the only call: the model's text stays content, as written. */
    {"<tool_call>{\"name\":\"cou", WEIR_TOOLS_AUTO, NULL, "<tool_call>{\"name\":\"cou", 0,
     {NULL}, {NULL}, 0},
    /* Arguments given as a string stay that string; absent ones are {}. */
    {"<tool_call>{\"name\":\"a\",\"arguments\":\"{\\\"x\\\":1}\"}</tool_call><tool_call>"
     "{\"name\":\"b\"}</tool_call>",
     WEIR_TOOLS_AUTO, NULL, "", 2, {"a", "b"}, {"{\"x\":1}", "{}"}},
    /* Mistral: a JSON list after [TOOL_CALLS]. */
    {"[TOOL_CALLS][{\"name\": \"count\", \"arguments\": {\"n\": 2}}, {\"name\": \"get_verse\", "
     "\"arguments\": {}}]",
     WEIR_TOOLS_AUTO, NULL, "", 2, {"count", "get_verse"}, {"{\"n\":2}", "{}"}},
    /* Llama 3: <|python_tag|> with calls separated by ';', "parameters" for the arguments. */
    {"<|python_tag|>{\"name\": \"count\", \"parameters\": {\"n\": 5}}; {\"name\": \"x\", "
     "\"parameters\": {}}",
     WEIR_TOOLS_AUTO, NULL, "", 2, {"count", "x"}, {"{\"n\":5}", "{}"}},
    /* Llama 3: the call's JSON as the whole reply. */
    {"  {\"name\": \"count\", \"parameters\": {\"n\": 7}}\n", WEIR_TOOLS_AUTO, NULL, "", 1,
     {"count"}, {"{\"n\":7}"}},
    /* Not calls: plain text, JSON that is not a call, a malformed call: all content, as
     * written (untrimmed). */
    {" Just text. ", WEIR_TOOLS_AUTO, NULL, " Just text. ", 0, {NULL}, {NULL}},
    {"{\"answer\": 42}", WEIR_TOOLS_AUTO, NULL, "{\"answer\": 42}", 0, {NULL}, {NULL}},
    {"x <tool_call>{\"name\": \"count\", \"arguments\": {</tool_call>", WEIR_TOOLS_AUTO, NULL,
     "x <tool_call>{\"name\": \"count\", \"arguments\": {</tool_call>", 0, {NULL}, {NULL}},
    {"<tool_call>{\"arguments\": {}}</tool_call>", WEIR_TOOLS_AUTO, NULL,
     "<tool_call>{\"arguments\": {}}</tool_call>", 0, {NULL}, {NULL}},
    {"[TOOL_CALLS][] trailing", WEIR_TOOLS_AUTO, NULL, "[TOOL_CALLS][] trailing", 0, {NULL},
     {NULL}},
    /* Forced shapes. */
    {"[{\"name\":\"count\",\"parameters\":{\"n\":1}},{\"name\":\"a\",\"parameters\":{}}]",
     WEIR_TOOLS_REQUIRED, NULL, "", 2, {"count", "a"}, {"{\"n\":1}", "{}"}},
    /* A forced list cut inside its first call (max_tokens): no call, and the list is not
     * content either. */
    {"[{\"name\":\"count\",\"parameters\":{\"n\":", WEIR_TOOLS_REQUIRED, NULL, "", 0,
     {NULL}, {NULL}, 1},
    /* Cut inside its second call: the first, whole, is kept; the partial one dropped. */
    {"[{\"name\":\"count\",\"parameters\":{\"n\":1}}, {\"name\":\"a\",\"parame",
     WEIR_TOOLS_REQUIRED, NULL, "", 1, {"count"}, {"{\"n\":1}"}, 1},
    /* Cut right after a whole call (the list not closed): that call, nothing dropped. */
    {"[{\"name\":\"count\",\"parameters\":{\"n\":2}},", WEIR_TOOLS_REQUIRED, NULL, "", 1,
     {"count"}, {"{\"n\":2}"}, 0},
    /* Not a list at all (cannot come out of the constraint): no call, no content. */
    {"hello", WEIR_TOOLS_REQUIRED, NULL, "", 0, {NULL}, {NULL}, 1},
    {" {\"n\": 4} ", WEIR_TOOLS_NAMED, "count", "", 1, {"count"}, {"{\"n\": 4}"}},
    /* Named arguments cut short: not a call a client could run. */
    {"{\"n\": ", WEIR_TOOLS_NAMED, "count", "", 0, {NULL}, {NULL}, 1},
    {"{\"n\": 4} {", WEIR_TOOLS_NAMED, "count", "", 0, {NULL}, {NULL}, 1},
    /* tools off: everything is content, even a perfect call. */
    {"<tool_call>{\"name\":\"count\"}</tool_call>", WEIR_TOOLS_OFF, NULL,
     "<tool_call>{\"name\":\"count\"}</tool_call>", 0, {NULL}, {NULL}},
};

static void test_parse(void) {
  for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
    const call_case *c = &k_cases[i];
    weir_tool_output o;
    WT_ASSERT_INT_EQ(weir_tool_parse(c->text, strlen(c->text), c->mode, c->named, &o), 0);
    int ok = o.content && !strcmp(o.content, c->content) && o.num_calls == c->num_calls &&
             o.dropped_partial == c->dropped;
    for (int k = 0; ok && k < c->num_calls; k++)
      ok = !strcmp(o.calls[k].name, c->names[k]) && !strcmp(o.calls[k].arguments, c->arguments[k]);
    if (!ok) {
      fprintf(stderr, "\n  case %zu: content [%s], %d calls", i, o.content ? o.content : "(null)",
              o.num_calls);
      for (int k = 0; k < o.num_calls; k++)
        fprintf(stderr, " %s(%s)", o.calls[k].name, o.calls[k].arguments);
      fputc('\n', stderr);
    }
    CU_ASSERT(ok);
    weir_tool_output_free(&o);
  }
}

/* More calls than WEIR_MAX_TOOL_CALLS: the reply is content, not a truncated list. */
static void test_too_many_calls(void) {
  char *text = malloc(64 * (WEIR_MAX_TOOL_CALLS + 2));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  size_t len = 0;
  for (int i = 0; i <= WEIR_MAX_TOOL_CALLS; i++)
    len += (size_t)sprintf(text + len, "<tool_call>{\"name\":\"f\"}</tool_call>");
  weir_tool_output o;
  WT_ASSERT_INT_EQ(weir_tool_parse(text, len, WEIR_TOOLS_AUTO, NULL, &o), 0);
  WT_ASSERT_INT_EQ(o.num_calls, 0);
  CU_ASSERT(o.content && strlen(o.content) == len);
  weir_tool_output_free(&o);
  free(text);
}

/* A forced list longer than WEIR_MAX_TOOL_CALLS: the first ones are the calls (the server's
 * grammar bounds the list far below this; the parser does not rely on it). */
static void test_forced_many(void) {
  char *text = malloc(64 * (WEIR_MAX_TOOL_CALLS + 2));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  size_t len = (size_t)sprintf(text, "[");
  for (int i = 0; i <= WEIR_MAX_TOOL_CALLS; i++)
    len += (size_t)sprintf(text + len, "%s{\"name\":\"f\",\"parameters\":{}}", i ? "," : "");
  len += (size_t)sprintf(text + len, "]");
  weir_tool_output o;
  WT_ASSERT_INT_EQ(weir_tool_parse(text, len, WEIR_TOOLS_REQUIRED, NULL, &o), 0);
  WT_ASSERT_INT_EQ(o.num_calls, WEIR_MAX_TOOL_CALLS);
  CU_ASSERT(o.content && !o.content[0]);
  weir_tool_output_free(&o);
  free(text);
}

/* What a stream may send before a call can begin. */
static void test_stream_safe(void) {
  static const struct {
    const char *text;
    size_t from, want;
    int in_call;
  } cases[] = {
      {"Hello there", 0, 11, 0},
      {"Hello <tool", 0, 6, 0},          /* "<tool" may begin <tool_call> */
      {"Hello [TOOL_C", 0, 6, 0},
      {"Hello <|python", 0, 6, 0},
      {"Hello <b>", 0, 9, 0},            /* not a marker's start */
      {"Hi <tool_call>{\"na", 0, 3, 1},  /* nothing from the marker on */
      {"Hi there <tool_call>", 9, 9, 1}, /* searched from what was already sent */
      {"  {\"name\"", 0, 0, 0},          /* may be a Llama 3 JSON call: held */
      {"   ", 0, 0, 0},                  /* blank so far: held */
      {"a", 0, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int in_call = -1;
    size_t got = weir_tool_stream_safe(cases[i].text, strlen(cases[i].text), cases[i].from,
                                        &in_call);
    if (got != cases[i].want || in_call != cases[i].in_call)
      fprintf(stderr, "\n  [%s] from %zu: %zu (in_call %d), want %zu (%d)\n", cases[i].text,
              cases[i].from, got, in_call, cases[i].want, cases[i].in_call);
    CU_ASSERT(got == cases[i].want && in_call == cases[i].in_call);
  }
}

int main(void) {
  static const wt_test tests[] = {
      {"parse", test_parse},
      {"too_many_calls", test_too_many_calls},
      {"forced_many", test_forced_many},
      {"stream_safe", test_stream_safe},
      {NULL, NULL},
  };
  return wt_run_suite("tool_calls", tests);
}
