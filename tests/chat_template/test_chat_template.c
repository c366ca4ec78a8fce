/* Chat templates: the exact text each family renders, detection from realistic Jinja
 * templates, and refusal of roles and orders a family cannot express. */
#include <stdlib.h>
#include <string.h>

#include "template/chat_template.h"
#include "testutil.h"
#include "weir/status.h"

/* system, user, assistant, user: the conversation every family renders below. */
static const weir_chat_message k_conv[4] = {
    {"system", "You are terse."},
    {"user", "Hi there"},
    {"assistant", "Hello."},
    {"user", "What is 2+2?"},
};

static void expect_render(weir_chat_template_id id, const weir_chat_message *m, int n, int gen,
                          const char *bos, const char *eos, const char *want) {
  char *out = NULL;
  char err[200] = "";
  int rc = weir_chat_render_ex(id, m, n, gen, bos, eos, &out, err, sizeof err);
  if (rc) fprintf(stderr, "\n  %s: %s\n", weir_chat_template_name(id), err);
  WT_ASSERT_INT_EQ(rc, 0);
  if (out && strcmp(out, want) != 0)
    fprintf(stderr, "\n  %s (gen=%d) rendered:\n[%s]\n  expected:\n[%s]\n",
            weir_chat_template_name(id), gen, out, want);
  CU_ASSERT(out && strcmp(out, want) == 0);
  free(out);
}

static void test_chatml(void) {
  const char *body = "<|im_start|>system\nYou are terse.<|im_end|>\n"
                     "<|im_start|>user\nHi there<|im_end|>\n"
                     "<|im_start|>assistant\nHello.<|im_end|>\n"
                     "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
  expect_render(WEIR_CHAT_CHATML, k_conv, 4, 0, "<s>", "</s>", body);
  char *with = wt_strf("%s<|im_start|>assistant\n", body);
  expect_render(WEIR_CHAT_CHATML, k_conv, 4, 1, "<s>", "</s>", with);
  free(with);
}

static void test_llama2(void) {
  const char *want = "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello. </s>"
                     "<s>[INST] What is 2+2? [/INST]";
  /* The prompt already ends the user turn: the generation prompt adds nothing. */
  expect_render(WEIR_CHAT_LLAMA2, k_conv, 4, 0, "<s>", "</s>", want);
  expect_render(WEIR_CHAT_LLAMA2, k_conv, 4, 1, "<s>", "</s>", want);
  /* Without a system prompt, and contents stripped as the reference does. */
  const weir_chat_message m[1] = {{"user", "  padded\n"}};
  expect_render(WEIR_CHAT_LLAMA2, m, 1, 1, NULL, NULL, "<s>[INST] padded [/INST]");
}

static void test_llama3(void) {
  const char *body = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>";
  expect_render(WEIR_CHAT_LLAMA3, k_conv, 4, 0, "<|begin_of_text|>", "<|eot_id|>", body);
  char *with = wt_strf("%s<|start_header_id|>assistant<|end_header_id|>\n\n", body);
  expect_render(WEIR_CHAT_LLAMA3, k_conv, 4, 1, NULL, NULL, with);
  free(with);
}

static void test_mistral(void) {
  const char *want = "<s>[INST] You are terse.\n\nHi there [/INST]Hello.</s>[INST] What is 2+2? [/INST]";
  expect_render(WEIR_CHAT_MISTRAL, k_conv, 4, 0, "<s>", "</s>", want);
  expect_render(WEIR_CHAT_MISTRAL, k_conv, 4, 1, "<s>", "</s>", want);
  expect_render(WEIR_CHAT_MISTRAL, k_conv + 1, 1, 1, "<s>", "</s>", "<s>[INST] Hi there [/INST]");
}

static void test_zephyr(void) {
  const char *body = "<|system|>\nYou are terse.</s>\n<|user|>\nHi there</s>\n"
                     "<|assistant|>\nHello.</s>\n<|user|>\nWhat is 2+2?</s>\n";
  expect_render(WEIR_CHAT_ZEPHYR, k_conv, 4, 0, "<s>", "</s>", body);
  char *with = wt_strf("%s<|assistant|>\n", body);
  expect_render(WEIR_CHAT_ZEPHYR, k_conv, 4, 1, "<s>", "</s>", with);
  free(with);
}

static void test_gemma(void) {
  const char *body = "<bos><start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n"
                     "<start_of_turn>model\nHello.<end_of_turn>\n"
                     "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n";
  expect_render(WEIR_CHAT_GEMMA, k_conv, 4, 0, "<bos>", "<eos>", body);
  char *with = wt_strf("%s<start_of_turn>model\n", body);
  expect_render(WEIR_CHAT_GEMMA, k_conv, 4, 1, "<bos>", "<eos>", with);
  free(with);
}

static void test_phi3(void) {
  const char *body = "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi there<|end|>\n"
                     "<|assistant|>\nHello.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n";
  char *closed = wt_strf("%s<|endoftext|>", body);
  expect_render(WEIR_CHAT_PHI3, k_conv, 4, 0, "<s>", "<|endoftext|>", closed);
  free(closed);
  char *with = wt_strf("%s<|assistant|>\n", body);
  expect_render(WEIR_CHAT_PHI3, k_conv, 4, 1, "<s>", "<|endoftext|>", with);
  free(with);
}

static void test_bos_eos_from_tokenizer(void) {
  /* The model's own BOS/EOS texts are used; "" means the model has none. */
  const weir_chat_message m[2] = {{"user", "a"}, {"assistant", "b"}};
  expect_render(WEIR_CHAT_MISTRAL, m, 2, 0, "", "<END>", "[INST] a [/INST]b<END>");
  expect_render(WEIR_CHAT_LLAMA2, m, 2, 0, "<B>", "<E>", "<B>[INST] a [/INST] b <E>");
}

static void expect_reject(weir_chat_template_id id, const weir_chat_message *m, int n,
                          const char *why) {
  char *out = (char *)1;
  char err[200] = "";
  WT_ASSERT_INT_EQ(weir_chat_render_ex(id, m, n, 1, NULL, NULL, &out, err, sizeof err), WEIR_E_INVAL);
  CU_ASSERT(out == NULL);
  WT_ASSERT_STR_CONTAINS(err, why);
}

static void test_rejects(void) {
  const weir_chat_message tool[2] = {{"user", "x"}, {"tool", "y"}};
  for (int id = 0; id < WEIR_CHAT_TEMPLATE_COUNT_; id++)
    expect_reject((weir_chat_template_id)id, tool, 2, "unknown role \"tool\"");
  const weir_chat_message two_users[2] = {{"user", "x"}, {"user", "y"}};
  expect_reject(WEIR_CHAT_LLAMA2, two_users, 2, "alternating");
  expect_reject(WEIR_CHAT_MISTRAL, two_users, 2, "alternating");
  expect_reject(WEIR_CHAT_GEMMA, two_users, 2, "alternating");
  const weir_chat_message assistant_first[1] = {{"assistant", "x"}};
  expect_reject(WEIR_CHAT_GEMMA, assistant_first, 1, "message 0 is assistant");
  const weir_chat_message late_system[3] = {{"user", "x"}, {"assistant", "y"}, {"system", "z"}};
  expect_reject(WEIR_CHAT_LLAMA2, late_system, 3, "message 2 is system");
  const weir_chat_message only_system[1] = {{"system", "x"}};
  expect_reject(WEIR_CHAT_MISTRAL, only_system, 1, "needs a user message");
  const weir_chat_message no_content[1] = {{"user", NULL}};
  expect_reject(WEIR_CHAT_CHATML, no_content, 1, "no content");
  expect_reject(WEIR_CHAT_CHATML, k_conv, 0, "no messages");
  /* The families with free role order accept two user turns in a row. */
  char *out = NULL;
  WT_ASSERT_INT_EQ(weir_chat_render(WEIR_CHAT_CHATML, two_users, 2, 0, NULL, NULL, &out), 0);
  free(out);
}

/* Realistic tokenizer.chat_template strings, written in each family's style. */
static const char *k_jinja[WEIR_CHAT_TEMPLATE_COUNT_] = {
    [WEIR_CHAT_CHATML] =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\\n' }}{% endif %}",
    [WEIR_CHAT_LLAMA2] =
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = "
        "messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
        "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
        "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
        "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    [WEIR_CHAT_LLAMA3] =
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
        "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
        "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
    [WEIR_CHAT_MISTRAL] =
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
    [WEIR_CHAT_ZEPHYR] =
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
        "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
        "'<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
        "'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
        "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
        "{% endfor %}",
    [WEIR_CHAT_GEMMA] =
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
        "not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
        "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
        "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
        "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{'<start_of_turn>model\\n'}}{% endif %}",
    [WEIR_CHAT_PHI3] =
        "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + "
        "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' "
        "+ message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}",
};

static void test_detect(void) {
  for (int id = 0; id < WEIR_CHAT_TEMPLATE_COUNT_; id++) {
    weir_chat_template_id got = WEIR_CHAT_TEMPLATE_COUNT_;
    WT_ASSERT_INT_EQ(weir_chat_template_detect(k_jinja[id], &got), 0);
    if ((int)got != id)
      fprintf(stderr, "\n  template %s detected as %s\n", weir_chat_template_name((weir_chat_template_id)id),
              weir_chat_template_name(got));
    WT_ASSERT_INT_EQ(got, id);
  }
  /* A Zephyr template that writes </s> literally instead of eos_token. */
  weir_chat_template_id got;
  WT_ASSERT_INT_EQ(weir_chat_template_detect("{{ '<|user|>\\n' + message['content'] + '</s>' }}", &got), 0);
  WT_ASSERT_INT_EQ(got, WEIR_CHAT_ZEPHYR);
  got = WEIR_CHAT_GEMMA;
  WT_ASSERT_INT_EQ(weir_chat_template_detect("{{ messages | tojson }}", &got), WEIR_E_NOTFOUND);
  WT_ASSERT_INT_EQ(got, WEIR_CHAT_GEMMA);
  WT_ASSERT_INT_EQ(weir_chat_template_detect(NULL, &got), WEIR_E_NOTFOUND);
}


/* ---- the Jinja2 reference renderings (tests/chat_template/gen/gen_expected.py) ---- */

#define CT_FIXTURES WT_SOURCE_DIR "/tests/chat_template/fixtures/"

/* Undoes the fixtures' escaping (\\ \t \n \r) in place. */
static void unescape(char *s) {
  char *o = s;
  for (; *s; s++) {
    if (*s != '\\' || !s[1]) {
      *o++ = *s;
      continue;
    }
    s++;
    *o++ = *s == 't' ? '\t' : *s == 'n' ? '\n' : *s == 'r' ? '\r' : *s;
  }
  *o = '\0';
}

/* Splits a line at tabs into at most max fields (in place); returns the count. */
static int split(char *line, char **f, int max) {
  int n = 0;
  while (n < max) {
    f[n++] = line;
    char *t = strchr(line, '\t');
    if (!t) break;
    *t = '\0';
    line = t + 1;
  }
  return n;
}

static void test_jinja_reference(void) {
  size_t len;
  char *data = wt_read_file(CT_FIXTURES "expected.tsv", &len);
  CU_ASSERT_FATAL(data != NULL);
  int cases = 0;
  for (char *line = data, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    if (line[0] == '#') continue;
    char *f[5 + 2 * 8] = {NULL};
    int nf = split(line, f, 5 + 2 * 8);
    CU_ASSERT_FATAL(nf >= 7 && (nf - 5) % 2 == 0);
    for (int i = 0; i < nf; i++) unescape(f[i]);
    weir_chat_template_id id;
    WT_ASSERT_INT_EQ(weir_chat_template_by_name(f[0], &id), 0);
    weir_chat_message m[8];
    int n = (nf - 5) / 2;
    for (int i = 0; i < n; i++) {
      m[i].role = f[5 + 2 * i];
      m[i].content = f[6 + 2 * i];
    }
    expect_render(id, m, n, atoi(f[1]), f[2], f[3], f[4]);
    cases++;
  }
  WT_ASSERT_INT_EQ(cases, 56);
  free(data);
}

static void test_detect_reference_templates(void) {
  size_t len;
  char *data = wt_read_file(CT_FIXTURES "templates.tsv", &len);
  CU_ASSERT_FATAL(data != NULL);
  int n = 0;
  for (char *line = data, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    if (line[0] == '#') continue;
    char *f[2] = {NULL, NULL};
    CU_ASSERT_FATAL(split(line, f, 2) == 2);
    unescape(f[1]);
    weir_chat_template_id want, got = WEIR_CHAT_TEMPLATE_COUNT_;
    WT_ASSERT_INT_EQ(weir_chat_template_by_name(f[0], &want), 0);
    WT_ASSERT_INT_EQ(weir_chat_template_detect(f[1], &got), 0);
    WT_ASSERT_INT_EQ(got, want);
    n++;
  }
  WT_ASSERT_INT_EQ(n, WEIR_CHAT_TEMPLATE_COUNT_);
  free(data);
}

static void test_names(void) {
  for (int id = 0; id < WEIR_CHAT_TEMPLATE_COUNT_; id++) {
    weir_chat_template_id got;
    const char *name = weir_chat_template_name((weir_chat_template_id)id);
    WT_ASSERT_INT_EQ(weir_chat_template_by_name(name, &got), 0);
    WT_ASSERT_INT_EQ(got, id);
  }
  weir_chat_template_id got;
  WT_ASSERT_INT_EQ(weir_chat_template_by_name("vicuna", &got), WEIR_E_NOTFOUND);
  CU_ASSERT_STRING_EQUAL(weir_chat_template_name((weir_chat_template_id)99), "?");
}

int main(void) {
  static const wt_test tests[] = {{"chatml", test_chatml},
                                  {"llama2", test_llama2},
                                  {"llama3", test_llama3},
                                  {"mistral", test_mistral},
                                  {"zephyr", test_zephyr},
                                  {"gemma", test_gemma},
                                  {"phi3", test_phi3},
                                  {"bos_eos_from_tokenizer", test_bos_eos_from_tokenizer},
                                  {"rejects", test_rejects},
                                  {"detect", test_detect},
                                  {"names", test_names},
                                  {"jinja_reference", test_jinja_reference},
                                  {"detect_reference_templates", test_detect_reference_templates},
                                  {NULL, NULL}};
  return wt_run_suite("chat_template", tests);
}
