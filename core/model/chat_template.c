/* Built-in chat template renderers (see chat_template.h and docs/tokenizers.md). Each one
 * writes what the family's reference Jinja template renders, without a Jinja engine. */
#include "model/chat_template.h"
#include "util/buf.h"
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/status.h"

static const char *const k_names[WEIR_CHAT_TEMPLATE_COUNT_] = {
    "chatml", "llama2", "llama3", "mistral", "zephyr", "gemma", "phi3"};

const char *weir_chat_template_name(weir_chat_template_id id) {
  return (int)id >= 0 && id < WEIR_CHAT_TEMPLATE_COUNT_ ? k_names[id] : "?";
}

int weir_chat_template_by_name(const char *name, weir_chat_template_id *out) {
  if (!name || !out) return WEIR_E_NOTFOUND;
  for (int i = 0; i < WEIR_CHAT_TEMPLATE_COUNT_; i++)
    if (strcmp(name, k_names[i]) == 0) {
      *out = (weir_chat_template_id)i;
      return 0;
    }
  return WEIR_E_NOTFOUND;
}

int weir_chat_template_detect(const char *j, weir_chat_template_id *out) {
  weir_chat_template_id id;
  if (!j || !out) return WEIR_E_NOTFOUND;
  /* Most specific markers first: a Llama-3 or ChatML template never carries the others',
   * Phi-3 shares <|user|> with Zephyr but alone ends turns with <|end|>. */
  if (strstr(j, "<|start_header_id|>")) id = WEIR_CHAT_LLAMA3;
  else if (strstr(j, "<|im_start|>")) id = WEIR_CHAT_CHATML;
  else if (strstr(j, "<start_of_turn>")) id = WEIR_CHAT_GEMMA;
  else if (strstr(j, "<|end|>") && strstr(j, "<|assistant|>")) id = WEIR_CHAT_PHI3;
  else if (strstr(j, "<|user|>") && (strstr(j, "</s>") || strstr(j, "eos_token")))
    id = WEIR_CHAT_ZEPHYR;
  else if (strstr(j, "[INST]") && strstr(j, "<<SYS>>")) id = WEIR_CHAT_LLAMA2;
  else if (strstr(j, "[INST]")) id = WEIR_CHAT_MISTRAL;
  else return WEIR_E_NOTFOUND;
  *out = id;
  return 0;
}

/* ---- output: core/util's growable buffer ---- */

typedef weir_buf sbuf;

static void put_n(sbuf *b, const char *s, size_t n) { weir_buf_append(b, s, n); }
static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

static int is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Jinja's trim / Python's strip(), for ASCII whitespace. */
static void put_trimmed(sbuf *b, const char *s) {
  size_t n = strlen(s), i = 0;
  while (i < n && is_ws(s[i])) i++;
  while (n > i && is_ws(s[n - 1])) n--;
  put_n(b, s + i, n - i);
}


enum { R_SYSTEM, R_USER, R_ASSISTANT };

/* ---- the families ---- */

static void render_chatml(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen) {
  (void)r;
  for (int i = 0; i < n; i++) {
    put(b, "<|im_start|>");
    put(b, m[i].role);
    put(b, "\n");
    put(b, m[i].content);
    put(b, "<|im_end|>\n");
  }
  if (gen) put(b, "<|im_start|>assistant\n");
}

/* Llama-2-chat: the system prompt is folded into the first [INST] inside <<SYS>>; every user
 * turn opens with BOS, every assistant reply ends with EOS; contents are stripped. */
static void render_llama2(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                          const char *bos, const char *eos) {
  (void)gen; /* the prompt already ends with [/INST]: nothing to add */
  const char *sys = NULL;
  int first = 0;
  if (n > 0 && r[0] == R_SYSTEM) {
    sys = m[0].content;
    first = 1;
  }
  for (int i = first; i < n; i++) {
    if (r[i] == R_USER) {
      put(b, bos);
      put(b, "[INST] ");
      if (i == first && sys) {
        /* The reference strips the whole "<<SYS>>\n" + system + "\n<</SYS>>\n\n" +
         * content string, which in effect trims only the end of the user content. */
        sbuf tmp = {0};
        put(&tmp, "<<SYS>>\n");
        put(&tmp, sys);
        put(&tmp, "\n<</SYS>>\n\n");
        put(&tmp, m[i].content);
        if (tmp.oom) b->oom = 1;
        else put_trimmed(b, tmp.p);
        free(tmp.p);
      } else {
        put_trimmed(b, m[i].content);
      }
      put(b, " [/INST]");
    } else {
      put(b, " ");
      put_trimmed(b, m[i].content);
      put(b, " ");
      put(b, eos);
    }
  }
}

static void render_llama3(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                          const char *bos) {
  (void)r;
  put(b, bos);
  for (int i = 0; i < n; i++) {
    put(b, "<|start_header_id|>");
    put(b, m[i].role);
    put(b, "<|end_header_id|>\n\n");
    put_trimmed(b, m[i].content);
    put(b, "<|eot_id|>");
  }
  if (gen) put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Mistral instruct: BOS once, [INST] user [/INST] then the reply and EOS. Mistral has no
 * system role: the system prompt opens the first user turn, followed by a blank line. */
static void render_mistral(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                           const char *bos, const char *eos) {
  (void)gen;
  const char *sys = NULL;
  int first = 0;
  if (n > 0 && r[0] == R_SYSTEM) {
    sys = m[0].content;
    first = 1;
  }
  put(b, bos);
  for (int i = first; i < n; i++) {
    if (r[i] == R_USER) {
      put(b, "[INST] ");
      if (i == first && sys) {
        put(b, sys);
        put(b, "\n\n");
      }
      put(b, m[i].content);
      put(b, " [/INST]");
    } else {
      put(b, m[i].content);
      put(b, eos);
    }
  }
}

static void render_zephyr(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                          const char *eos) {
  (void)r;
  for (int i = 0; i < n; i++) {
    put(b, "<|");
    put(b, m[i].role);
    put(b, "|>\n");
    put(b, m[i].content);
    put(b, eos);
    put(b, "\n");
  }
  if (gen) put(b, "<|assistant|>\n");
}

/* Gemma: roles user and model; no system role, so the system prompt opens the first user
 * turn followed by a blank line. Contents are trimmed. */
static void render_gemma(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                         const char *bos) {
  const char *sys = NULL;
  int first = 0;
  if (n > 0 && r[0] == R_SYSTEM) {
    sys = m[0].content;
    first = 1;
  }
  put(b, bos);
  for (int i = first; i < n; i++) {
    put(b, r[i] == R_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
    if (i == first && sys) {
      /* Folded first, then trimmed as one content, as the template would trim it. */
      sbuf tmp = {0};
      put(&tmp, sys);
      put(&tmp, "\n\n");
      put(&tmp, m[i].content);
      if (tmp.oom) b->oom = 1;
      else put_trimmed(b, tmp.p);
      free(tmp.p);
    } else {
      put_trimmed(b, m[i].content);
    }
    put(b, "<end_of_turn>\n");
  }
  if (gen) put(b, "<start_of_turn>model\n");
}

/* Phi-3: like Zephyr with <|end|> closing turns; without a generation prompt the
 * conversation is closed with EOS. */
static void render_phi3(sbuf *b, const weir_chat_message *m, const int *r, int n, int gen,
                        const char *eos) {
  (void)r;
  for (int i = 0; i < n; i++) {
    put(b, "<|");
    put(b, m[i].role);
    put(b, "|>\n");
    put(b, m[i].content);
    put(b, "<|end|>\n");
  }
  put(b, gen ? "<|assistant|>\n" : eos);
}

int weir_chat_render_ex(weir_chat_template_id id, const weir_chat_message *msgs, int n,
                        int add_generation_prompt, const char *bos, const char *eos,
                        char **out, char *err, size_t errlen) {
  int rc = WEIR_E_INVAL;
  int *roles = NULL;
  sbuf b = {0};
  if (!out) return WEIR_E_INVAL;
  *out = NULL;
  if ((int)id < 0 || id >= WEIR_CHAT_TEMPLATE_COUNT_) {
    weir_set_err(err, errlen, "unknown chat template %d", (int)id);
    return WEIR_E_INVAL;
  }
  if (n <= 0 || !msgs) {
    weir_set_err(err, errlen, "no messages");
    return WEIR_E_INVAL;
  }
  roles = malloc((size_t)n * sizeof *roles);
  if (!roles) return WEIR_E_NOMEM;
  for (int i = 0; i < n; i++) {
    const char *role = msgs[i].role;
    if (!role) role = "";
    if (strcmp(role, "system") == 0) roles[i] = R_SYSTEM;
    else if (strcmp(role, "user") == 0) roles[i] = R_USER;
    else if (strcmp(role, "assistant") == 0) roles[i] = R_ASSISTANT;
    else {
      weir_set_err(err, errlen, "message %d: unknown role \"%.40s\" (system, user, assistant)", i, role);
      goto done;
    }
    if (!msgs[i].content) {
      weir_set_err(err, errlen, "message %d has no content", i);
      goto done;
    }
  }
  /* Families whose format only expresses [system] user assistant user ...: check it. */
  if (id == WEIR_CHAT_LLAMA2 || id == WEIR_CHAT_MISTRAL || id == WEIR_CHAT_GEMMA) {
    int first = roles[0] == R_SYSTEM;
    if (first && n == 1) {
      weir_set_err(err, errlen, "%s: a system message needs a user message after it",
              k_names[id]);
      goto done;
    }
    for (int i = first; i < n; i++) {
      int want = (i - first) % 2 == 0 ? R_USER : R_ASSISTANT;
      if (roles[i] != want) {
        weir_set_err(err, errlen, "%s: message %d is %s but the conversation must be [system] then "
                "user and assistant alternating, starting with user", k_names[id], i,
                msgs[i].role);
        goto done;
      }
    }
  }
  switch (id) {
  case WEIR_CHAT_CHATML:
    render_chatml(&b, msgs, roles, n, add_generation_prompt);
    break;
  case WEIR_CHAT_LLAMA2:
    render_llama2(&b, msgs, roles, n, add_generation_prompt, bos ? bos : "<s>", eos ? eos : "</s>");
    break;
  case WEIR_CHAT_LLAMA3:
    render_llama3(&b, msgs, roles, n, add_generation_prompt, bos ? bos : "<|begin_of_text|>");
    break;
  case WEIR_CHAT_MISTRAL:
    render_mistral(&b, msgs, roles, n, add_generation_prompt, bos ? bos : "<s>", eos ? eos : "</s>");
    break;
  case WEIR_CHAT_ZEPHYR:
    render_zephyr(&b, msgs, roles, n, add_generation_prompt, eos ? eos : "</s>");
    break;
  case WEIR_CHAT_GEMMA:
    render_gemma(&b, msgs, roles, n, add_generation_prompt, bos ? bos : "<bos>");
    break;
  case WEIR_CHAT_PHI3:
    render_phi3(&b, msgs, roles, n, add_generation_prompt, eos ? eos : "<|endoftext|>");
    break;
  default:
    break;
  }
  if (!b.p && !b.oom) put(&b, ""); /* an empty rendering is still a string */
  if (b.oom) {
    rc = WEIR_E_NOMEM;
    weir_set_err(err, errlen, "out of memory");
    free(b.p);
    goto done;
  }
  *out = b.p;
  rc = 0;
done:
  free(roles);
  return rc;
}

int weir_chat_render(weir_chat_template_id id, const weir_chat_message *msgs, int n,
                     int add_generation_prompt, const char *bos, const char *eos, char **out) {
  return weir_chat_render_ex(id, msgs, n, add_generation_prompt, bos, eos, out, NULL, 0);
}
