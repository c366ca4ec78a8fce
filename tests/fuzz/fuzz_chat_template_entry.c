/* The built-in chat templates (core/template/chat_template.c): arbitrary conversations in every
 * family. The Jinja engine has its own target; this one covers the C renderers and the
 * family detection.
 *
 * First byte: bits 0-2 the family (7 = detect it from the text of the first message), bit 3
 * add the generation prompt, bits 4-5 BOS/EOS: the family's own, empty, or odd text. The rest
 * is split at 0x1E into messages whose first byte picks the role (system, user, assistant,
 * or an unknown one). Invariants: a refusal says why; a rendering holds every message's
 * content (trimmed of ASCII white space, as the families do); with UTF-8 contents the
 * rendering is UTF-8; rendering twice gives the same text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_targets.h"
#include "template/chat_template.h"
#include "weir/status.h"

static const char *const k_roles[] = {"system", "user", "assistant", "tool"};

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                                     c == '\v' || c == '\f'; }

int weir_fuzz_chat_template(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const unsigned sel = data[0];
  /* Messages: copies of each 0x1E-separated part, NUL-terminated (a NUL inside ends that
   * content, as a C string would). */
  enum { MAX_MSGS = 64 };
  weir_chat_message msgs[MAX_MSGS];
  char *texts[MAX_MSGS];
  int n = 0;
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  while (p < end && n < MAX_MSGS) {
    const char *q = memchr(p, 0x1E, (size_t)(end - p));
    if (!q) q = end;
    size_t len = (size_t)(q - p);
    const char *role = k_roles[len ? (unsigned char)p[0] & 3 : 1];
    texts[n] = strndup(len ? p + 1 : p, len ? len - 1 : 0);
    msgs[n].role = role;
    msgs[n].content = texts[n];
    n++;
    p = q + 1;
  }
  weir_chat_template_id id;
  if ((sel & 7) == 7) {
    if (n == 0 || weir_chat_template_detect(texts[0], &id) != 0) id = WEIR_CHAT_CHATML;
  } else {
    id = (weir_chat_template_id)(sel & 7);
  }
  if (strcmp(weir_chat_template_name(id), "?") == 0) weir__fuzz_fail("family %d has no name", id);
  weir_chat_template_id back;
  if (weir_chat_template_by_name(weir_chat_template_name(id), &back) != 0 || back != id)
    weir__fuzz_fail("the name of family %d does not name it", id);
  const char *bos = NULL, *eos = NULL;
  switch ((sel >> 4) & 3) {
  case 1: bos = eos = ""; break;
  case 2: bos = "<B\xc3\xa9>", eos = "</E>"; break;
  default: break;
  }
  const int gen = (sel >> 3) & 1;
  char *out = NULL, err[256];
  err[0] = '\0';
  int rc = weir_chat_render_ex(id, msgs, n, gen, bos, eos, &out, err, sizeof err);
  if (rc == WEIR_OK) {
    size_t out_len = strlen(out);
    int all_utf8 = 1;
    for (int i = 0; i < n; i++) {
      const char *c = texts[i];
      size_t cl = strlen(c);
      if (!weir_utf8_valid(c, cl)) all_utf8 = 0;
      while (cl && is_space(*c)) c++, cl--;
      while (cl && is_space(c[cl - 1])) cl--;
      if (cl && !memmem(out, out_len, c, cl))
        weir__fuzz_fail("%s rendering lost message %d (%s)", weir_chat_template_name(id), i,
                        msgs[i].role);
    }
    if (all_utf8 && !weir_utf8_valid(out, out_len))
      weir__fuzz_fail("%s rendering of UTF-8 messages is not UTF-8", weir_chat_template_name(id));
    char *again = NULL;
    if (weir_chat_render(id, msgs, n, gen, bos, eos, &again) != WEIR_OK || strcmp(again, out))
      weir__fuzz_fail("%s rendering is not deterministic", weir_chat_template_name(id));
    free(again);
  } else if (rc != WEIR_E_NOMEM && !err[0]) {
    weir__fuzz_fail("%s refused (%s) without a reason", weir_chat_template_name(id),
                    weir_strerror(rc));
  }
  free(out);
  for (int i = 0; i < n; i++) free(texts[i]);
  return 0;
}
