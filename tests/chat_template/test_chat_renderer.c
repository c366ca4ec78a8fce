/* The chat renderer (core/template/chat_template.h): the model's own Jinja template run on the
 * plain messages of today's callers and on OpenAI-style requests (tools, tool calls, template
 * arguments) as cJSON, byte-equal to Jinja2's rendering (tests/jinja/fixtures/chat.json);
 * the template's own error messages; named alternates such as tool_use; the built-in
 * fallback and override. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "template/chat_template.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "template/jinja.h"
#include "testutil.h"
#include "weir/status.h"

#define TEMPLATES WT_SOURCE_DIR "/tests/jinja/templates/"

static char *read_template(const char *name, size_t *len) {
  char *path = wt_strf(TEMPLATES "%s.jinja", name);
  char *s = wt_read_file(path, len);
  free(path);
  return s;
}

static weir_chat_renderer *renderer(const char *name, const char *bos, const char *eos) {
  size_t len;
  char *src = read_template(name, &len);
  CU_ASSERT_FATAL(src != NULL);
  weir_chat_renderer *r = NULL;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_chat_renderer_create(src, len, NULL, bos, eos, &r, err, sizeof err), 0);
  free(src);
  CU_ASSERT_FATAL(r != NULL);
  weir_jinja_limits lim;
  weir_jinja_limits_default(&lim);
  lim.now = 1741944413; /* the fixtures' clock */
  weir_chat_renderer_set_limits(r, &lim);
  CU_ASSERT_STRING_EQUAL(weir_chat_renderer_name(r), "jinja");
  CU_ASSERT_STRING_EQUAL(weir_chat_renderer_note(r), "");
  return r;
}

/* The Jinja2 rendering of one fixture case (tests/jinja/fixtures/chat.json). */
static char *fixture(const char *tpl, int conv, int gen, cJSON **conv_out) {
  size_t len;
  char *data = wt_read_file(WT_SOURCE_DIR "/tests/jinja/fixtures/chat.json", &len);
  CU_ASSERT_FATAL(data != NULL);
  cJSON *j = cJSON_ParseWithLength(data, len);
  free(data);
  CU_ASSERT_FATAL(j != NULL);
  char *want = NULL;
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
    if (strcmp(cJSON_GetObjectItem(c, "template")->valuestring, tpl) ||
        cJSON_GetObjectItem(c, "conversation")->valueint != conv ||
        cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")) != gen)
      continue;
    const cJSON *o = cJSON_GetObjectItem(c, "out");
    if (o) want = strdup(o->valuestring);
  }
  *conv_out = cJSON_Parse(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "conversations"), conv)->valuestring);
  cJSON_Delete(j);
  CU_ASSERT_FATAL(want != NULL && *conv_out != NULL);
  return want;
}

static void expect_request(const weir_chat_renderer *r, const weir_chat_request *req, const char *want) {
  char *out = NULL;
  char err[512] = "";
  int rc = weir_chat_renderer_render(r, req, &out, err, sizeof err);
  if (rc) fprintf(stderr, "\n  render failed (%d): %s\n", rc, err);
  WT_ASSERT_INT_EQ(rc, 0);
  if (out && strcmp(out, want)) fprintf(stderr, "\n  got  [%s]\n  want [%s]\n", out, want);
  CU_ASSERT(out && strcmp(out, want) == 0);
  free(out);
}

static void test_plain_messages(void) {
  /* conversation 2 of the fixtures: system, user, assistant, user */
  cJSON *conv;
  char *want = fixture("llama-3.1-8b-instruct", 2, 1, &conv);
  weir_chat_message m[4];
  int n = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, cJSON_GetObjectItem(conv, "messages")) {
    m[n].role = cJSON_GetObjectItem(x, "role")->valuestring;
    m[n].content = cJSON_GetObjectItem(x, "content")->valuestring;
    n++;
  }
  WT_ASSERT_INT_EQ(n, 4);
  weir_chat_renderer *r = renderer("llama-3.1-8b-instruct", "<|begin_of_text|>", "<|eot_id|>");
  weir_chat_request req = {.msgs = m, .n_msgs = n, .add_generation_prompt = 1};
  expect_request(r, &req, want);
  WT_ASSERT_STR_CONTAINS(want, "Today Date: 26 Jul 2024");
  weir_chat_renderer_free(r);
  free(want);
  cJSON_Delete(conv);
}

static void test_tools_and_tool_calls(void) {
  /* tools, assistant tool calls (arguments as a dict, or as a JSON string), tool results */
  static const struct {
    const char *tpl, *bos, *eos;
    int conv;
  } cases[] = {{"qwen2.5-7b-instruct", "", "<|im_end|>", 10},
               {"qwen2.5-7b-instruct", "", "<|im_end|>", 11},
               {"qwen3-0.6b", "", "<|im_end|>", 11},
               {"llama-3.1-8b-instruct", "<|begin_of_text|>", "<|eot_id|>", 10},
               {"llama-3.2-3b-instruct", "<|begin_of_text|>", "<|eot_id|>", 19},
               {"hermes-3-llama-3.1-8b-tool_use", "<|begin_of_text|>", "<|im_end|>", 11},
               {"mistral-nemo-instruct-2407", "<s>", "</s>", 19},
               {"deepseek-v3", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", 19}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int gen = 0; gen <= 1; gen++) {
      cJSON *conv;
      char *want = fixture(cases[i].tpl, cases[i].conv, gen, &conv);
      weir_chat_renderer *r = renderer(cases[i].tpl, cases[i].bos, cases[i].eos);
      weir_chat_request req = {.messages = cJSON_GetObjectItem(conv, "messages"),
                               .tools = cJSON_GetObjectItem(conv, "tools"),
                               .add_generation_prompt = gen};
      expect_request(r, &req, want);
      WT_ASSERT_STR_CONTAINS(want, "Paris");
      weir_chat_renderer_free(r);
      free(want);
      cJSON_Delete(conv);
    }
  }
  /* Mistral's template refuses OpenAI-style ids in its own words */
  cJSON *conv = cJSON_Parse("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
                            "\"content\": \"\", \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", "
                            "\"function\": {\"name\": \"f\", \"arguments\": {}}}]}]");
  weir_chat_renderer *r = renderer("mistral-nemo-instruct-2407", "<s>", "</s>");
  weir_chat_request req = {.messages = conv};
  char *out = NULL;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &req, &out, err, sizeof err), WEIR_E_INVAL);
  CU_ASSERT_STRING_EQUAL(err, "Tool call IDs should be alphanumeric strings with length 9!");
  weir_chat_renderer_free(r);
  cJSON_Delete(conv);
}

static void test_template_kwargs(void) {
  /* conversation 14: enable_thinking = false closes Qwen3's think block */
  cJSON *conv;
  char *want = fixture("qwen3-0.6b", 14, 1, &conv);
  weir_chat_renderer *r = renderer("qwen3-0.6b", "", "<|im_end|>");
  cJSON *kwargs = cJSON_GetObjectItem(conv, "enable_thinking");
  CU_ASSERT_FATAL(kwargs != NULL);
  cJSON *kw = cJSON_CreateObject();
  cJSON_AddBoolToObject(kw, "enable_thinking", 0);
  weir_chat_request req = {.messages = cJSON_GetObjectItem(conv, "messages"), .kwargs = kw,
                           .add_generation_prompt = 1};
  expect_request(r, &req, want);
  WT_ASSERT_STR_CONTAINS(want, "<think>\n\n</think>\n\n");
  cJSON_Delete(kw);
  weir_chat_renderer_free(r);
  free(want);
  cJSON_Delete(conv);
}

static void test_template_errors_surface(void) {
  weir_chat_renderer *r = renderer("gemma-2-2b-it", "<bos>", "<eos>");
  const weir_chat_message m[2] = {{"system", "x"}, {"user", "y"}};
  weir_chat_request req = {.msgs = m, .n_msgs = 2, .add_generation_prompt = 1};
  char *out = NULL;
  char err[256] = "";
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &req, &out, err, sizeof err), WEIR_E_INVAL);
  CU_ASSERT_PTR_NULL(out);
  CU_ASSERT_STRING_EQUAL(err, "System role not supported"); /* the template's own words */
  const weir_chat_message two_users[2] = {{"user", "x"}, {"user", "y"}};
  req.msgs = two_users;
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &req, &out, err, sizeof err), WEIR_E_INVAL);
  CU_ASSERT_STRING_EQUAL(err, "Conversation roles must alternate user/assistant/user/assistant/...");
  weir_chat_renderer_free(r);
  /* an error that is not the template's own: what and where */
  const char *src = "line one\n{{ messages[0].content + 1 }}";
  CU_ASSERT_FATAL(weir_chat_renderer_create(src, strlen(src), NULL, "", "", &r, err, sizeof err) == 0);
  req.msgs = m;
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &req, &out, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "chat template error (line 2)");
  WT_ASSERT_STR_CONTAINS(err, "unsupported operand");
  weir_chat_renderer_free(r);
  /* a hostile template ends with an error */
  src = "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}";
  CU_ASSERT_FATAL(weir_chat_renderer_create(src, strlen(src), NULL, "", "", &r, err, sizeof err) == 0);
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &req, &out, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "nests deeper");
  weir_chat_renderer_free(r);
}

static void test_tool_use_alternate(void) {
  const char *def = "default:{{ messages|length }}";
  const char *tool = "tool_use:{{ tools|length }}";
  weir_chat_renderer *r;
  char err[256];
  CU_ASSERT_FATAL(weir_chat_renderer_create(def, strlen(def), NULL, "", "", &r, err, sizeof err) == 0);
  WT_ASSERT_INT_EQ(weir_chat_renderer_add_named(r, "tool_use", tool, strlen(tool), err, sizeof err), 0);
  WT_ASSERT_INT_EQ(weir_chat_renderer_add_named(r, "bad", "{% if %}", 8, err, sizeof err), WEIR_E_FORMAT);
  WT_ASSERT_STR_CONTAINS(err, "\"bad\" does not parse");
  CU_ASSERT(weir_chat_renderer_has(r, "tool_use") && !weir_chat_renderer_has(r, "bad"));
  cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]");
  cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
  cJSON *none = cJSON_Parse("[]");
  weir_chat_request req = {.messages = msgs, .add_generation_prompt = 1};
  expect_request(r, &req, "default:1");
  req.tools = none;
  expect_request(r, &req, "default:1");
  req.tools = tools;
  expect_request(r, &req, "tool_use:1");
  req.template_name = "default";
  expect_request(r, &req, "default:1");
  req.template_name = "rag";
  char *out;
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &req, &out, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "no chat template named \"rag\"");
  weir_chat_renderer_free(r);
  cJSON_Delete(msgs);
  cJSON_Delete(tools);
  cJSON_Delete(none);
}

static void test_from_gguf(void) {
  char *dir = wt_mkdtemp();
  char *path = wt_strf("%s/t.gguf", dir);
  weir_gguf_writer *w;
  CU_ASSERT_FATAL(weir_gguf_writer_new(&w) == 0);
  weir_gguf_add_str(w, "tokenizer.chat_template", "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  weir_gguf_add_str(w, "tokenizer.chat_template.tool_use", "T{{ tools[0].function.name }}");
  char err[256];
  CU_ASSERT_FATAL(weir_gguf_write_file(w, path, err, sizeof err) == 0);
  weir_gguf_writer_free(w);
  weir_gguf *g;
  CU_ASSERT_FATAL(weir_gguf_open(path, &g, err, sizeof err) == 0);
  weir_chat_renderer *r;
  WT_ASSERT_INT_EQ(weir_chat_renderer_from_gguf(g, "auto", "<s>", "</s>", &r, err, sizeof err), 0);
  CU_ASSERT(weir_chat_renderer_has(r, "tool_use"));
  const weir_chat_message m[2] = {{"user", "a"}, {"assistant", "b"}};
  weir_chat_request req = {.msgs = m, .n_msgs = 2};
  expect_request(r, &req, "<s>user:a;assistant:b;");
  cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"lookup\"}}]");
  req.tools = tools;
  expect_request(r, &req, "Tlookup");
  cJSON_Delete(tools);
  weir_chat_renderer_free(r);
  /* an override wins over the file's template */
  WT_ASSERT_INT_EQ(weir_chat_renderer_from_gguf(g, "chatml", "<s>", "</s>", &r, err, sizeof err), 0);
  CU_ASSERT_STRING_EQUAL(weir_chat_renderer_name(r), "chatml");
  CU_ASSERT(!weir_chat_renderer_has(r, "tool_use"));
  req.tools = NULL;
  expect_request(r, &req, "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n");
  weir_chat_renderer_free(r);
  WT_ASSERT_INT_EQ(weir_chat_renderer_from_gguf(g, "vicuna", "", "", &r, err, sizeof err), WEIR_E_NOTFOUND);
  WT_ASSERT_STR_CONTAINS(err, "unknown template \"vicuna\"");
  weir_gguf_close(g);
  wt_rmtree(dir);
  free(dir);
  free(path);
}

static void test_fallbacks(void) {
  weir_chat_renderer *r;
  char err[256];
  const weir_chat_message m[2] = {{"system", "s"}, {"user", "u"}};
  weir_chat_request req = {.msgs = m, .n_msgs = 2, .add_generation_prompt = 1};
  /* no template: ChatML, with a note for the log */
  WT_ASSERT_INT_EQ(weir_chat_renderer_create(NULL, 0, NULL, "", "", &r, err, sizeof err), 0);
  CU_ASSERT_STRING_EQUAL(weir_chat_renderer_name(r), "chatml");
  WT_ASSERT_STR_CONTAINS(weir_chat_renderer_note(r), "no chat template");
  expect_request(r, &req, "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n");
  weir_chat_renderer_free(r);
  /* a template the engine cannot parse: the built-in detected from its text */
  const char *odd = "{% recursive_thing %}<|start_header_id|>";
  WT_ASSERT_INT_EQ(weir_chat_renderer_create(odd, strlen(odd), NULL, "<|begin_of_text|>", "", &r, err, sizeof err), 0);
  CU_ASSERT_STRING_EQUAL(weir_chat_renderer_name(r), "llama3");
  WT_ASSERT_STR_CONTAINS(weir_chat_renderer_note(r), "does not parse (line 1");
  WT_ASSERT_STR_CONTAINS(weir_chat_renderer_note(r), "using the built-in llama3");
  /* built-ins refuse what they cannot express */
  cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
                            "\"content\": null, \"tool_calls\": []}]");
  cJSON *tools = cJSON_Parse("[{\"type\": \"function\"}]");
  weir_chat_request jr = {.messages = msgs};
  char *out;
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &jr, &out, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "needs a role and text content");
  jr.tools = tools;
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &jr, &out, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "cannot render tools");
  weir_chat_renderer_free(r);
  cJSON_Delete(msgs);
  cJSON_Delete(tools);
  /* bad request shapes */
  const char *t = "x";
  WT_ASSERT_INT_EQ(weir_chat_renderer_create(t, 1, NULL, "", "", &r, err, sizeof err), 0);
  cJSON *obj = cJSON_Parse("{}");
  weir_chat_request bad = {.messages = obj};
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &bad, &out, err, sizeof err), WEIR_E_INVAL);
  bad.messages = NULL;
  bad.kwargs = cJSON_GetObjectItem(obj, "nope");
  bad.tools = obj;
  WT_ASSERT_INT_EQ(weir_chat_renderer_render(r, &bad, &out, err, sizeof err), WEIR_E_INVAL);
  cJSON_Delete(obj);
  weir_chat_renderer_free(r);
}

int main(void) {
  static const wt_test tests[] = {{"plain_messages", test_plain_messages},
                                  {"tools_and_tool_calls", test_tools_and_tool_calls},
                                  {"template_kwargs", test_template_kwargs},
                                  {"template_errors_surface", test_template_errors_surface},
                                  {"tool_use_alternate", test_tool_use_alternate},
                                  {"from_gguf", test_from_gguf},
                                  {"fallbacks", test_fallbacks},
                                  {NULL, NULL}};
  return wt_run_suite("chat_renderer", tests);
}
