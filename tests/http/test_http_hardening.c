/* Integration tests of the server's defences (issue 9): what a hostile or broken client can
 * send, and what it must not be able to do to the process or to other clients. Each test
 * reproduces one finding against the real `weir serve` binary on 127.0.0.1. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hclient.h"
#include "testutil.h"

static char *g_dir;
static char *g_model, *g_long_model;
static hc_server g_main; /* defaults */
static int g_ready;

/* ---- fixtures --------------------------------------------------------------------------- */

/* RSS bounds are for a normal build: AddressSanitizer's allocator (redzones, quarantine)
 * makes every allocation cost more, so its bounds are three times as wide. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_SLACK 3
#else
#define RSS_SLACK 1
#endif

/* Starts a server on a free port with `extra` --set overrides (NULL-terminated). */
static int start(hc_server *s, const char *name, const char *model, const char *const *extra) {
  return hc_start_test_server(s, g_dir, name, model, extra);
}

#define NEED_SERVER()                                                                       \
  do {                                                                                      \
    if (hc_skip_without_server(g_ready)) return;                                            \
  } while (0)

/* ---- helpers ---------------------------------------------------------------------------- */

/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). */
static int utf8_ok(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    int len;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (i + (size_t)len > n) return 0;
    for (int k = 1; k < len; k++) {
      if ((p[i + (size_t)k] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (p[i + (size_t)k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    i += (size_t)len;
  }
  return 1;
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* POSTs a JSON body (raw bytes, may hold anything) and returns the response. */
static int post_raw(int port, const char *path, const char *body, size_t len, hc_response *r) {
  memset(r, 0, sizeof *r);
  int fd = hc_connect(port, 20000);
  if (fd < 0) return -1;
  char *head = wt_strf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: %zu\r\n\r\n",
                       path, len);
  int rc = hc_send_all(fd, head, strlen(head));
  if (rc == 0) rc = hc_send_all(fd, body, len);
  if (rc == 0) rc = hc_read_response(fd, r);
  free(head);
  close(fd);
  return rc;
}

/* Expects an OpenAI error object with this status, type invalid_request_error, and `param`
 * (when not NULL); the message must contain `needle` (when not NULL). */
static void expect_400(int port, const char *path, const char *body, const char *param,
                       const char *needle) {
  hc_response r;
  int rc = post_raw(port, path, body, strlen(body), &r);
  WT_ASSERT_INT_EQ(rc, 0);
  if (r.status != 400) fprintf(stderr, "\n  %s %s -> %d %s\n", path, body, r.status, r.body);
  WT_ASSERT_INT_EQ(r.status, 400);
  CU_ASSERT(utf8_ok(r.body, r.body_len));
  cJSON *j = cJSON_Parse(r.body);
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
  CU_ASSERT_PTR_NOT_NULL(err);
  if (err) {
    const char *t = jstr(err, "type");
    CU_ASSERT(t && !strcmp(t, "invalid_request_error"));
    if (param) {
      const char *p = jstr(err, "param");
      if (!p || strcmp(p, param))
        fprintf(stderr, "\n  param %s, expected %s (%s)\n", p ? p : "null", param, body);
      CU_ASSERT(p && !strcmp(p, param));
    }
    if (needle) WT_ASSERT_STR_CONTAINS(jstr(err, "message"), needle);
  }
  cJSON_Delete(j);
  hc_response_free(&r);
}

static void expect_alive(int port) { WT_ASSERT_INT_EQ(hc_alive_status(port), 200); }

static double metric(int port, const char *series) {
  char *page = hc_get_metrics(port);
  double v = -1;
  if (!page || hc_metric(page, series, &v) != 0) v = -1;
  free(page);
  return v;
}

/* Resident set size of a process, in KiB (/proc/PID/status VmRSS). */
static long rss_kib(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  char *st = wt_read_file(path, NULL);
  long kib = -1;
  const char *p = st ? strstr(st, "VmRSS:") : NULL;
  if (p) kib = strtol(p + 6, NULL, 10);
  free(st);
  return kib;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Sends raw bytes on a fresh connection and reads one response (0 when none came within
 * timeout_ms, e.g. because the server is still waiting for more bytes). */
static int raw_status(int port, const char *raw, size_t len, int timeout_ms, hc_response *out) {
  memset(out, 0, sizeof *out);
  int fd = hc_connect(port, timeout_ms);
  if (fd < 0) return 0;
  hc_send_all(fd, raw, len);
  int st = hc_read_response(fd, out) == 0 ? out->status : 0;
  close(fd);
  return st;
}

static char *completion_req(const char *body) {
  return wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 "\r\nContent-Length: %zu\r\n\r\n%s",
                 strlen(body), body);
}

/* ---- 1. duplicate keys and the arrays they fill ----------------------------------------- */

/* The remote crash: 17 string "stop" keys, or a full list followed by one more string. */
static void test_repeated_stop_key(void) {
  NEED_SERVER();
  char body[1024];
  size_t n = (size_t)snprintf(body, sizeof body, "{\"prompt\":\"a\",\"max_tokens\":2");
  for (int i = 1; i <= 17; i++) n += (size_t)snprintf(body + n, sizeof body - n, ",\"stop\":\"s%d\"", i);
  snprintf(body + n, sizeof body - n, "}");
  expect_400(g_main.port, "/v1/completions", body, "stop", "'stop'");
  expect_400(g_main.port, "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"1\",\"2\",\"3\","
             "\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\"],"
             "\"stop\":\"q\"}",
             "stop", "'stop'");
  expect_400(g_main.port, "/v1/completions",
             "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
             "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\"],\"stop\":\"q\"}",
             "stop", NULL);
  /* Sixteen is the documented limit and works; seventeen in one list is refused. */
  hc_response r;
  const char *ok = "{\"prompt\":\"a\",\"max_tokens\":2,\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\","
                   "\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\"]}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", ok, strlen(ok), &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  expect_400(g_main.port, "/v1/completions",
             "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
             "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
             "stop", "16");
  expect_alive(g_main.port);
}

/* A duplicated key anywhere in the tree is a 400 naming it, on every JSON endpoint. */
static void test_duplicate_keys(void) {
  NEED_SERVER();
  static const struct {
    const char *path, *body, *param;
  } cases[] = {
      {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1,\"max_tokens\":2}", "max_tokens"},
      {"/v1/completions", "{\"prompt\":\"a\",\"prompt\":\"b\"}", "prompt"},
      {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":null,\"temperature\":1}",
       "temperature"},
      {"/v1/completions",
       "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":true,"
       "\"include_usage\":false}}",
       "stream_options.include_usage"},
      {"/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":1,\"5\":2}}",
       "logit_bias.5"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"role\":\"system\",\"content\":\"x\"}]}",
       "messages[0].role"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"user\",\"content\":"
       "[{\"type\":\"text\",\"text\":\"a\",\"text\":\"b\"}]}]}",
       "messages[1].content[0].text"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":1,\"n\":2}", "n"},
      {"/tokenize", "{\"prompt\":\"a\",\"prompt\":\"b\"}", "prompt"},
      {"/tokenize", "{\"text\":\"a\",\"add_special_tokens\":true,\"add_special_tokens\":false}",
       "add_special_tokens"},
      {"/detokenize", "{\"tokens\":[1,2],\"tokens\":[3]}", "tokens"},
      {"/detokenize", "{\"tokens\":[1],\"model\":\"x\",\"model\":\"y\"}", "model"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect_400(g_main.port, cases[i].path, cases[i].body, cases[i].param, "uplicate");
  /* The same key in different objects is no duplicate. */
  hc_response r;
  const char *ok = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
                   "\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"}],\"max_tokens\":1}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/chat/completions", ok, strlen(ok), &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  expect_alive(g_main.port);
}

/* stop_token_ids: one limit (64) shared by the API and the engine, refused beyond it. */
static void test_stop_token_ids_limit(void) {
  NEED_SERVER();
  char body[2048];
  size_t n = (size_t)snprintf(body, sizeof body, "{\"prompt\":\"a\",\"max_tokens\":1,"
                                                  "\"stop_token_ids\":[");
  for (int i = 0; i < 64; i++) n += (size_t)snprintf(body + n, sizeof body - n, "%s%d", i ? "," : "", 10 + i);
  snprintf(body + n, sizeof body - n, "]}");
  hc_response r;
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", body, strlen(body), &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  /* 65: what the engine used to drop silently is now refused. */
  n = (size_t)snprintf(body, sizeof body, "{\"prompt\":\"a\",\"max_tokens\":1,\"stop_token_ids\":[");
  for (int i = 0; i < 65; i++) n += (size_t)snprintf(body + n, sizeof body - n, "%s%d", i ? "," : "", 10 + i);
  snprintf(body + n, sizeof body - n, "]}");
  expect_400(g_main.port, "/v1/completions", body, "stop_token_ids", "64");
  /* The 64th id really stops generation: greedy decoding's first token, put last. */
  const char *probe = "{\"prompt\":\"stop here\",\"max_tokens\":1,\"temperature\":0,"
                      "\"ignore_eos\":true,\"logprobs\":0}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", probe, strlen(probe), &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  cJSON *j = cJSON_Parse(r.body);
  hc_response_free(&r);
  const char *text = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0),
                          "text");
  CU_ASSERT_FATAL(text != NULL);
  /* The token id of that text. */
  char *tb = wt_strf("{\"text\":\"%s\",\"add_special_tokens\":false}", text);
  cJSON_Delete(j);
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/tokenize", tb, strlen(tb), &r), 0);
  free(tb);
  j = cJSON_Parse(r.body);
  hc_response_free(&r);
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
  int tok = cJSON_GetArraySize(toks) >= 1 ? (int)cJSON_GetArrayItem(toks, 0)->valuedouble : -1;
  cJSON_Delete(j);
  CU_ASSERT_FATAL(tok >= 0);
  n = (size_t)snprintf(body, sizeof body, "{\"prompt\":\"stop here\",\"max_tokens\":8,"
                                          "\"temperature\":0,\"ignore_eos\":true,"
                                          "\"stop_token_ids\":[");
  int k = 0;
  for (int id = 100; k < 63; id++)
    if (id != tok) n += (size_t)snprintf(body + n, sizeof body - n, "%d,", id), k++;
  snprintf(body + n, sizeof body - n, "%d]}", tok);
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", body, strlen(body), &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"finish_reason\":\"stop\"");
  WT_ASSERT_STR_CONTAINS(r.body, "\"completion_tokens\":1");
  hc_response_free(&r);
}

/* ---- 4. protocol gaps ------------------------------------------------------------------- */

/* \u0000 is refused with a 400 naming the field (cJSON would cut the string there); an
 * escaped backslash before "u0000" is ordinary text. */
static void test_nul_in_json_strings(void) {
  NEED_SERVER();
  expect_400(g_main.port, "/v1/completions", "{\"prompt\":\"a\\u0000b\",\"max_tokens\":1}",
             "prompt", "NUL");
  expect_400(g_main.port, "/v1/completions",
             "{\"prompt\":[\"ok\",\"a\\u0000\"],\"max_tokens\":1}", "prompt[1]", "NUL");
  expect_400(g_main.port, "/v1/completions",
             "{\"prompt\":\"a\",\"stop\":[\"x\\u0000y\"],\"max_tokens\":1}", "stop[0]", "NUL");
  expect_400(g_main.port, "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\"}]}",
             "messages[0].content", "NUL");
  expect_400(g_main.port, "/tokenize", "{\"prompt\":\"x\\u0000\"}", "prompt", "NUL");
  expect_400(g_main.port, "/v1/completions", "{\"prompt\":\"a\",\"a\\u0000b\":1}", NULL, "NUL");
  /* A raw NUL byte inside a string is refused the same way. */
  static const char raw[] = "{\"prompt\":\"a\0b\",\"max_tokens\":1}";
  hc_response r;
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", raw, sizeof raw - 1, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 400);
  hc_response_free(&r);
  /* "\\u0000" is a backslash followed by u0000: carried whole, not a NUL. */
  const char *esc = "{\"text\":\"a\\\\u0000b\",\"add_special_tokens\":false}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/tokenize", esc, strlen(esc), &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  cJSON *j = cJSON_Parse(r.body);
  hc_response_free(&r);
  char *det = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "tokens"));
  cJSON_Delete(j);
  char *db = wt_strf("{\"tokens\":%s}", det);
  free(det);
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/detokenize", db, strlen(db), &r), 0);
  free(db);
  WT_ASSERT_INT_EQ(r.status, 200);
  j = cJSON_Parse(r.body);
  const char *back = jstr(j, "prompt");
  CU_ASSERT(back && !strcmp(back, "a\\u0000b"));
  cJSON_Delete(j);
  hc_response_free(&r);
}

/* Output text holding a NUL byte (a byte-fallback token can decode to one) is carried whole as
 * \u0000, never cut there: detokenize, echoed token prompts, non-streamed and streamed. */
static void test_nul_in_output_text(void) {
  NEED_SERVER();
  hc_response r;
  /* The id of the byte token <0x00>: the one just before <0x01>, which "\u0001" encodes to. */
  const char *tb = "{\"text\":\"\\u0001\",\"add_special_tokens\":false}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/tokenize", tb, strlen(tb), &r), 0);
  cJSON *j = cJSON_Parse(r.body);
  hc_response_free(&r);
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
  int n = cJSON_GetArraySize(toks);
  int last = n > 0 ? (int)cJSON_GetArrayItem(toks, n - 1)->valuedouble : -1;
  cJSON_Delete(j);
  CU_ASSERT_FATAL(last > 0);
  int nul = last - 1;
  /* Text around it: the ids of "a" and "b". */
  int ida = -1, idb = -1;
  for (int k = 0; k < 2; k++) {
    char *q = wt_strf("{\"text\":\"%s\",\"add_special_tokens\":false}", k ? "b" : "a");
    WT_ASSERT_INT_EQ(post_raw(g_main.port, "/tokenize", q, strlen(q), &r), 0);
    free(q);
    j = cJSON_Parse(r.body);
    hc_response_free(&r);
    toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    int id = (int)cJSON_GetArrayItem(toks, cJSON_GetArraySize(toks) - 1)->valuedouble;
    if (k) idb = id;
    else ida = id;
    cJSON_Delete(j);
  }
  char *body = wt_strf("{\"tokens\":[%d,%d,%d]}", ida, nul, idb);
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/detokenize", body, strlen(body), &r), 0);
  free(body);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"prompt\":\"a\\u0000 b\"");
  hc_response_free(&r);
  for (int stream = 0; stream < 2; stream++) {
    body = wt_strf("{\"prompt\":[%d,%d,%d],\"echo\":true,\"max_tokens\":1,\"stream\":%s}", ida,
                   nul, idb, stream ? "true" : "false");
    WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", body, strlen(body), &r), 0);
    free(body);
    WT_ASSERT_INT_EQ(r.status, 200);
    WT_ASSERT_STR_CONTAINS(r.body, "\"text\":\"a\\u0000 b");
    CU_ASSERT(utf8_ok(r.body, r.body_len));
    hc_response_free(&r);
  }
}

/* Every response body, SSE event and log line is valid UTF-8: invalid bytes in a URL, a
 * prompt that is echoed, a parameter name or a file name become U+FFFD. */
static void test_utf8_everywhere(void) {
  NEED_SERVER();
  hc_response r;
  static const char url[] = "GET /v1/\xff\xfe\xc3 HTTP/1.1\r\nHost: x\r\n\r\n";
  int st = raw_status(g_main.port, url, sizeof url - 1, 5000, &r);
  CU_ASSERT(st == 404 || st == 400);
  CU_ASSERT(utf8_ok(r.body, r.body_len));
  if (st == 404) WT_ASSERT_STR_CONTAINS(r.body, "\xef\xbf\xbd");
  hc_response_free(&r);
  /* An echoed prompt with invalid bytes, whole and streamed. */
  static const char echo[] = "{\"prompt\":\"a\xff\xfe" "b\xc3\",\"echo\":true,\"max_tokens\":1}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", echo, sizeof echo - 1, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  CU_ASSERT(utf8_ok(r.body, r.body_len));
  WT_ASSERT_STR_CONTAINS(r.body, "a\xef\xbf\xbd");
  hc_response_free(&r);
  static const char echo_s[] =
      "{\"prompt\":\"a\xff\xfe" "b\xc3\",\"echo\":true,\"max_tokens\":2,\"stream\":true}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", echo_s, sizeof echo_s - 1, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  CU_ASSERT(utf8_ok(r.body, r.body_len));
  WT_ASSERT_STR_CONTAINS(r.body, "data: [DONE]");
  hc_response_free(&r);
  /* An unknown parameter named with invalid bytes, and one whose name is long enough to be
   * cut in the message: still whole characters. */
  /* A logit_bias key with invalid bytes is echoed in the 400's message (found by
   * fuzz_json_completions; its input is in the corpus, where the harness aborts on any
   * invalid byte reaching the transport). */
  static const char biaskey[] = "{\"prompt\":\"a\",\"logit_bias\":{\"1\xff\xfe\":1}}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", biaskey, sizeof biaskey - 1, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 400);
  CU_ASSERT(utf8_ok(r.body, r.body_len));
  WT_ASSERT_STR_CONTAINS(r.body, "logit_bias");
  WT_ASSERT_STR_CONTAINS(r.body, "1\xef\xbf\xbd");
  hc_response_free(&r);
  static const char badkey[] = "{\"prompt\":\"a\",\"\xc0\xafx\":1}";
  WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", badkey, sizeof badkey - 1, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 400);
  CU_ASSERT(utf8_ok(r.body, r.body_len));
  hc_response_free(&r);
  char longkey[2048];
  size_t n = (size_t)snprintf(longkey, sizeof longkey, "{\"prompt\":\"a\",\"");
  for (int i = 0; i < 400; i++) n += (size_t)snprintf(longkey + n, sizeof longkey - n, "\xc3\xa9");
  snprintf(longkey + n, sizeof longkey - n, "\":1}");
  for (int shift = 0; shift < 2; shift++) {
    /* Both parities, so that some cut falls inside a two-byte character. */
    char *b = shift ? wt_strf("{\"prompt\":\"a\",\"x%s", longkey + 15) : strdup(longkey);
    WT_ASSERT_INT_EQ(post_raw(g_main.port, "/v1/completions", b, strlen(b), &r), 0);
    WT_ASSERT_INT_EQ(r.status, 400);
    CU_ASSERT(utf8_ok(r.body, r.body_len));
    hc_response_free(&r);
    free(b);
  }
  /* A model file name with invalid bytes, in the log of a server that cannot start. */
  char *bad = wt_strf("model.path=%s/m\xff\xfe.gguf", g_dir);
  char *port = wt_strf("server.port=%d", wt_free_port());
  char *const argv[] = {(char *)WT_WEIR, "serve", "--set", bad, "--set", port, NULL};
  char *out = NULL;
  int rc = wt_run(argv, &out, 20000);
  CU_ASSERT(rc == 1);
  CU_ASSERT(out && utf8_ok(out, strlen(out)));
  WT_ASSERT_STR_CONTAINS(out, "m\xef\xbf\xbd");
  free(out);
  free(bad);
  free(port);
  /* Everything this server logged so far. */
  size_t len = 0;
  char *log = wt_read_file(g_main.log_path, &len);
  CU_ASSERT(log && utf8_ok(log, len));
  free(log);
}

/* Retry-After on every 429 and 503. */
static void test_retry_after(void) {
  NEED_SERVER();
  /* 429: one running, one waiting, the rest refused. */
  hc_server s = {0};
  const char *busy[] = {"scheduler.max_num_seqs=1", "scheduler.max_waiting=1",
                        "server.drain_timeout_ms=20000", NULL};
  if (start(&s, "retry", g_long_model, busy) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  enum { N = 5 };
  int fds[N], got429 = 0;
  char *req = completion_req("{\"prompt\":\"busy\",\"max_tokens\":1500,\"ignore_eos\":true,"
                             "\"stream\":true}");
  for (int i = 0; i < N; i++) {
    fds[i] = hc_connect(s.port, 20000);
    hc_send_all(fds[i], req, strlen(req));
  }
  free(req);
  for (int i = 0; i < N; i++) {
    hc_response r;
    int chunked = 0;
    if (hc_read_head(fds[i], &r, &chunked) == 0 && r.status == 429) {
      got429++;
      char *ra = hc_header(&r, "retry-after");
      CU_ASSERT(ra && atoi(ra) >= 1);
      free(ra);
    }
    hc_response_free(&r);
  }
  CU_ASSERT(got429 >= 1);
  /* 503 while draining: a stream is still running after SIGTERM. */
  int probe = hc_connect(s.port, 10000);
  kill(s.pid, SIGTERM);
  int saw = 0;
  for (int tries = 0; tries < 100 && !saw; tries++) {
    hc_response r;
    const char *h = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    if (hc_send_all(probe, h, strlen(h)) != 0 || hc_read_response(probe, &r) != 0) break;
    if (r.status == 503) {
      saw = 1;
      char *ra = hc_header(&r, "retry-after");
      CU_ASSERT(ra && atoi(ra) >= 1);
      free(ra);
    }
    int closed = r.closed;
    hc_response_free(&r);
    if (closed) break;
    usleep(10000);
  }
  CU_ASSERT(saw);
  close(probe);
  for (int i = 0; i < N; i++) close(fds[i]);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* Content-Length at or above 2^63 is refused at once with 413, not waited for. */
static void test_huge_content_length(void) {
  NEED_SERVER();
  static const char *lens[] = {"9223372036854775807", "9223372036854775808",
                               "18446744073709551615", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    char *raw = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        "application/json\r\nContent-Length: %s\r\n\r\n{",
                        lens[i]);
    hc_response r;
    int st = raw_status(g_main.port, raw, strlen(raw), 3000, &r);
    if (st != 413) fprintf(stderr, "\n  Content-Length %s -> %d\n", lens[i], st);
    WT_ASSERT_INT_EQ(st, 413);
    hc_response_free(&r);
    free(raw);
  }
  expect_alive(g_main.port);
}

/* HTTP/1.1 requires exactly one Host header; HTTP/1.0 does not. */
static void test_host_header(void) {
  NEED_SERVER();
  hc_response r;
  static const char none[] = "GET /health HTTP/1.1\r\n\r\n";
  WT_ASSERT_INT_EQ(raw_status(g_main.port, none, sizeof none - 1, 5000, &r), 400);
  WT_ASSERT_STR_CONTAINS(r.body, "Host");
  hc_response_free(&r);
  static const char two[] = "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
  WT_ASSERT_INT_EQ(raw_status(g_main.port, two, sizeof two - 1, 5000, &r), 400);
  hc_response_free(&r);
  static const char old[] = "GET /health HTTP/1.0\r\n\r\n";
  WT_ASSERT_INT_EQ(raw_status(g_main.port, old, sizeof old - 1, 5000, &r), 200);
  hc_response_free(&r);
  static const char one[] = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  WT_ASSERT_INT_EQ(raw_status(g_main.port, one, sizeof one - 1, 5000, &r), 200);
  hc_response_free(&r);
}

/* Request-log lines carry a timestamp. */
static void test_request_log_timestamp(void) {
  NEED_SERVER();
  expect_alive(g_main.port);
  char *log = NULL;
  const char *line = NULL;
  for (int tries = 0; tries < 100; tries++) {
    free(log);
    log = wt_read_file(g_main.log_path, NULL);
    line = log ? strstr(log, "{\"ts\":\"") : NULL;
    if (line && strstr(line, "\"event\":\"request\"")) break;
    usleep(10000);
  }
  CU_ASSERT_FATAL(line != NULL);
  /* {"ts":"2026-01-02T03:04:05.678Z","event":"request",... */
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, ms = 0;
  CU_ASSERT(sscanf(line, "{\"ts\":\"%4d-%2d-%2dT%2d:%2d:%2d.%3dZ\"", &y, &mo, &d, &h, &mi, &s, &ms) == 7);
  CU_ASSERT(y >= 2024);
  const char *eol = strchr(line, '\n');
  char *one = strndup(line, eol ? (size_t)(eol - line) : strlen(line));
  cJSON *j = cJSON_Parse(one);
  CU_ASSERT(j && jstr(j, "event") && !strcmp(jstr(j, "event"), "request"));
  cJSON_Delete(j);
  free(one);
  free(log);
}

/* ---- 3. admission ----------------------------------------------------------------------- */

/* A new connection has header_timeout_ms to send its first byte (not idle_timeout_ms); a
 * full table makes room by closing the longest-idle connection; /health answers under a
 * flood of idle sockets; only busy connections fill the table for good (503 + Retry-After). */
static void test_admission(void) {
  NEED_SERVER();
  hc_server s = {0};
  const char *extra[] = {"server.max_connections=3", "server.header_timeout_ms=400",
                         "server.idle_timeout_ms=60000", NULL};
  if (start(&s, "admission", g_long_model, extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  /* Silent connection: closed after about header_timeout_ms. */
  int fd = hc_connect(s.port, 5000);
  double t0 = now_ms();
  char c;
  ssize_t got = recv(fd, &c, 1, 0);
  double waited = now_ms() - t0;
  while (got > 0) got = recv(fd, &c, 1, 0); /* a 408 may come first */
  CU_ASSERT(got == 0); /* closed, not timed out on our side */
  CU_ASSERT(waited < 4000);
  close(fd);
  /* A flood of silent connections: the oldest is closed to admit each new one. */
  enum { FLOOD = 12 };
  int flood[FLOOD];
  for (int i = 0; i < FLOOD; i++) flood[i] = hc_connect(s.port, 3000);
  hc_response r;
  for (int i = 0; i < 3; i++) {
    WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/health", NULL, NULL, &r), 0);
    WT_ASSERT_INT_EQ(r.status, 200);
    hc_response_free(&r);
    WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/metrics", NULL, NULL, &r), 0);
    WT_ASSERT_INT_EQ(r.status, 200);
    hc_response_free(&r);
  }
  /* The first flood sockets were closed by the server (EOF, no response). */
  got = recv(flood[0], &c, 1, 0);
  WT_ASSERT_INT_EQ(got, 0);
  for (int i = 0; i < FLOOD; i++) close(flood[i]);
  /* Keep-alive connections idle after a request are evicted the same way. */
  int ka[3];
  for (int i = 0; i < 3; i++) {
    ka[i] = hc_connect(s.port, 5000);
    const char *h = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    hc_send_all(ka[i], h, strlen(h));
    hc_read_response(ka[i], &r);
    hc_response_free(&r);
  }
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/health", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(recv(ka[0], &c, 1, 0), 0);
  for (int i = 0; i < 3; i++) close(ka[i]);
  /* Three busy connections (streams being read) cannot be evicted: the fourth gets 503. */
  usleep(50000);
  int busy[3];
  char *req = completion_req("{\"prompt\":\"busy\",\"max_tokens\":1900,\"ignore_eos\":true,"
                             "\"stream\":true}");
  for (int i = 0; i < 3; i++) {
    busy[i] = hc_connect(s.port, 20000);
    hc_send_all(busy[i], req, strlen(req));
    int chunked = 0;
    WT_ASSERT_INT_EQ(hc_read_head(busy[i], &r, &chunked), 0);
    WT_ASSERT_INT_EQ(r.status, 200);
    hc_response_free(&r);
  }
  free(req);
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/health", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 503);
  WT_ASSERT_STR_CONTAINS(r.body, "max_connections");
  char *ra = hc_header(&r, "retry-after");
  CU_ASSERT(ra && atoi(ra) >= 1);
  free(ra);
  hc_response_free(&r);
  for (int i = 0; i < 3; i++) close(busy[i]);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* MAX_PIPELINED bounds the requests a connection has queued while parsing, not after each
 * read: 40 clients each pipeline 64 KiB of tiny requests behind a slow one, and the server's
 * memory barely moves; the requests are still all answered, in order. */
static void test_pipelining_bounded(void) {
  NEED_SERVER();
  hc_server s = {0};
  /* A small KV pool: pages of the pool the requests touch count in RSS too. */
  const char *extra[] = {"scheduler.max_num_seqs=1", "cache.memory_bytes=4MiB", NULL};
  if (start(&s, "pipeline", g_long_model, extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  enum { CONNS = 40, PER = 2000 };
  static const char tiny[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  size_t tl = sizeof tiny - 1;
  char *slow = completion_req("{\"prompt\":\"slow\",\"max_tokens\":300,\"ignore_eos\":true}");
  size_t sl = strlen(slow);
  char *buf = malloc(sl + PER * tl);
  memcpy(buf, slow, sl);
  for (int i = 0; i < PER; i++) memcpy(buf + sl + (size_t)i * tl, tiny, tl);
  size_t total = sl + PER * tl;
  /* One request first: the pages the first inference touches (weights, scratch) are not
   * what this test measures. */
  expect_alive(s.port);
  long rss0 = rss_kib(s.pid);
  int fds[CONNS];
  for (int i = 0; i < CONNS; i++) {
    fds[i] = hc_connect(s.port, 30000);
    hc_send_all(fds[i], buf, total);
  }
  usleep(500000); /* the server reads what it wants of it */
  long rss1 = rss_kib(s.pid);
  fprintf(stderr, "\n  RSS %ld -> %ld KiB with %d pipelining clients\n", rss0, rss1, CONNS);
  CU_ASSERT(rss0 > 0 && rss1 - rss0 < RSS_SLACK * 12 * 1024);
  /* The first client reads everything: one completion, then PER health answers. */
  hc_response r;
  WT_ASSERT_INT_EQ(hc_read_response(fds[0], &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"completion_tokens\":300");
  hc_response_free(&r);
  int ok = 0;
  for (int i = 0; i < PER; i++) {
    if (hc_read_response(fds[0], &r) != 0) break;
    if (r.status == 200 && strstr(r.body, "\"ok\"")) ok++;
    hc_response_free(&r);
  }
  WT_ASSERT_INT_EQ(ok, PER);
  for (int i = 0; i < CONNS; i++) close(fds[i]);
  free(buf);
  free(slow);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* ---- 2. bounded output per connection ---------------------------------------------------- */

/* Streams whose clients do not read: generation pauses once a connection has
 * server.max_pending_output_bytes unsent, the server's memory stays flat, other clients are
 * served, a paused stream resumes when its client reads, and one that stays stuck past
 * server.stall_timeout_ms is aborted and its KV blocks freed. */
static void test_backpressure(void) {
  NEED_SERVER();
  hc_server s = {0};
  const char *extra[] = {"server.max_pending_output_bytes=65536", "server.stall_timeout_ms=3000",
                         NULL};
  if (start(&s, "backpressure", g_long_model, extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  /* Each stream is far larger than what the kernel buffers for a socket (4 MiB by default on
   * Linux), so that output really backs up in the server. */
  enum { N = 4, CHOICES = 8 };
  double aborted0 = metric(s.port, "weir_request_success_total{finished_reason=\"abort\"}");
  expect_alive(s.port); /* what the first inference touches is not measured */
  long rss0 = rss_kib(s.pid);
  char *req = completion_req("{\"prompt\":\"flood\",\"max_tokens\":1900,\"ignore_eos\":true,"
                             "\"n\":8,\"logprobs\":20,\"stream\":true}");
  int fds[N];
  /* The three streams that will stay stuck go first; the one that will be read joins once
   * they are paused, so that its own stall clock (server.stall_timeout_ms from when it backs
   * up) cannot run out on a slow machine before the test starts reading it. */
  for (int i = 1; i < N; i++) {
    fds[i] = hc_connect_rcvbuf(s.port, 20000, 4096);
    hc_send_all(fds[i], req, strlen(req));
  }
  double paused = 0, running = -1, usage = 0, aborted = 0;
  for (int tries = 0; tries < 400; tries++) {
    char *page = hc_get_metrics(s.port);
    if (page) {
      hc_metric(page, "weir_num_requests_paused", &paused);
      hc_metric(page, "weir_num_requests_running", &running);
      hc_metric(page, "weir_kv_cache_usage_perc", &usage);
    }
    free(page);
    if (paused == (N - 1) * CHOICES) break;
    usleep(10000);
  }
  /* Every choice of every stream ends up paused, none finishes. */
  WT_ASSERT_INT_EQ((int)paused, (N - 1) * CHOICES);
  WT_ASSERT_INT_EQ((int)running, 0);
  CU_ASSERT(usage > 0); /* they keep their blocks */
  long rss1 = rss_kib(s.pid);
  fprintf(stderr, "\n  RSS %ld -> %ld KiB with %d non-reading streams\n", rss0, rss1, N - 1);
  CU_ASSERT(rss0 > 0 && rss1 - rss0 < RSS_SLACK * 16 * 1024);
  /* Other clients are served meanwhile. */
  expect_alive(s.port);
  /* The stream that will be read gets a receive buffer of at least one loopback segment
   * (64 KiB): with a window smaller than the peer's MSS, the sending kernel waits for the
   * window to open through its persist timer, whose backoff reaches tens of seconds, and the
   * stall timeout would then abort a client that is reading. */
  fds[0] = hc_connect_rcvbuf(s.port, 20000, 131072);
  hc_send_all(fds[0], req, strlen(req));
  free(req);
  /* The fourth backs up too (the first three may have been aborted by now). */
  for (int tries = 0; tries < 400; tries++) {
    char *page = hc_get_metrics(s.port);
    if (page) {
      hc_metric(page, "weir_num_requests_paused", &paused);
      hc_metric(page, "weir_num_requests_running", &running);
      hc_metric(page, "weir_request_success_total{finished_reason=\"abort\"}", &aborted);
    }
    free(page);
    if (running == 0 && paused + (aborted - aborted0) == N * CHOICES) break;
    usleep(10000);
  }
  WT_ASSERT_INT_EQ((int)(paused + (aborted - aborted0)), N * CHOICES);
  /* The first client reads: its stream resumes and completes in full. */
  size_t bytes = 0;
  int done = 0, finished = 0;
  hc_response r;
  int chunked = 0;
  WT_ASSERT_INT_EQ(hc_read_head(fds[0], &r, &chunked), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  char tail[64] = "";
  for (;;) {
    char *d = NULL;
    long n = hc_read_chunk(fds[0], &d);
    if (n <= 0) break;
    bytes += (size_t)n;
    for (const char *p = d; (p = strstr(p, "\"finish_reason\":\"length\"")); p++) finished++;
    if (strstr(d, "data: [DONE]")) done = 1;
    snprintf(tail, sizeof tail, "%s", d);
    free(d);
  }
  WT_ASSERT_INT_EQ(done, 1);
  WT_ASSERT_INT_EQ(finished, CHOICES);
  CU_ASSERT(bytes > 2 * 1024 * 1024);
  close(fds[0]);
  /* The other three stay stuck: after the stall timeout they are aborted, their connections
   * closed and every KV block freed. */
  usage = -1;
  paused = -1;
  running = -1;
  for (int tries = 0; tries < 800; tries++) {
    char *page = hc_get_metrics(s.port);
    if (page) {
      hc_metric(page, "weir_num_requests_paused", &paused);
      hc_metric(page, "weir_num_requests_running", &running);
      hc_metric(page, "weir_kv_cache_usage_perc", &usage);
      hc_metric(page, "weir_request_success_total{finished_reason=\"abort\"}", &aborted);
    }
    free(page);
    if (paused == 0 && running == 0 && usage == 0) break;
    usleep(10000);
  }
  WT_ASSERT_INT_EQ((int)paused, 0);
  WT_ASSERT_INT_EQ((int)running, 0);
  CU_ASSERT_DOUBLE_EQUAL(usage, 0.0, 1e-12);
  WT_ASSERT_INT_EQ((int)(aborted - aborted0), (N - 1) * CHOICES);
  for (int i = 1; i < N; i++) {
    /* What was sent before the stall is readable, then the connection is closed. */
    char sink[65536];
    ssize_t n;
    while ((n = recv(fds[i], sink, sizeof sink, 0)) > 0) {
    }
    CU_ASSERT(n == 0 || (n < 0 && errno == ECONNRESET));
    close(fds[i]);
  }
  expect_alive(s.port);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* ---- main ------------------------------------------------------------------------------- */

/* Connection timers are re-armed lazily (server.c, conn_set_timer): a timer already armed to
 * fire no later than a new timeout stays armed, and waits on when it fires. Both orders
 * must still time out when they should, on a kept-alive connection after a request:
 * - idle shorter than the header timeout: the idle connection closes after about
 *   idle_timeout_ms (the timer armed for the request's headers, due later, is restarted);
 * - idle longer than the header timeout: a request started on the idle connection whose
 *   headers never end gets 408 after about header_timeout_ms (not the idle timeout). */
static void test_keep_alive_timers(void) {
  NEED_SERVER();
  static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  hc_response r;
  char c;
  {
    hc_server s = {0};
    const char *extra[] = {"server.header_timeout_ms=20000", "server.idle_timeout_ms=600",
                           NULL};
    if (start(&s, "timers_idle", g_model, extra) != 0) {
      CU_FAIL("server did not start");
      return;
    }
    int fd = hc_connect(s.port, 5000);
    for (int i = 0; i < 3; i++) { /* several requests: each re-sets the timer four times */
      hc_send_all(fd, req, strlen(req));
      WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
      WT_ASSERT_INT_EQ(r.status, 200);
      hc_response_free(&r);
    }
    double t0 = now_ms();
    ssize_t got = recv(fd, &c, 1, 0);
    double waited = now_ms() - t0;
    WT_ASSERT_INT_EQ(got, 0); /* closed by the server */
    fprintf(stderr, "\n  idle close after %.0f ms (idle_timeout_ms 600)\n", waited);
    CU_ASSERT(waited > 400 && waited < 10000); /* not the 20 s header timeout */
    close(fd);
    WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
  }
  {
    hc_server s = {0};
    const char *extra[] = {"server.header_timeout_ms=500", "server.idle_timeout_ms=60000",
                           NULL};
    if (start(&s, "timers_header", g_model, extra) != 0) {
      CU_FAIL("server did not start");
      return;
    }
    int fd = hc_connect(s.port, 15000);
    hc_send_all(fd, req, strlen(req));
    WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
    WT_ASSERT_INT_EQ(r.status, 200);
    hc_response_free(&r);
    usleep(100000); /* idle: the timer is armed for the 60 s idle timeout */
    static const char partial[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
    hc_send_all(fd, partial, strlen(partial));
    double t0 = now_ms();
    WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
    double waited = now_ms() - t0;
    WT_ASSERT_INT_EQ(r.status, 408);
    fprintf(stderr, "  408 after %.0f ms (header_timeout_ms 500)\n", waited);
    CU_ASSERT(waited > 300 && waited < 10000); /* not the 60 s idle timeout */
    hc_response_free(&r);
    close(fd);
    WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
  }
}

int main(void) {
  static const wt_test tests[] = {
      {"repeated_stop_key", test_repeated_stop_key},
      {"duplicate_keys", test_duplicate_keys},
      {"stop_token_ids_limit", test_stop_token_ids_limit},
      {"nul_in_json_strings", test_nul_in_json_strings},
      {"nul_in_output_text", test_nul_in_output_text},
      {"utf8_everywhere", test_utf8_everywhere},
      {"retry_after", test_retry_after},
      {"huge_content_length", test_huge_content_length},
      {"host_header", test_host_header},
      {"request_log_timestamp", test_request_log_timestamp},
      {"admission", test_admission},
      {"keep_alive_timers", test_keep_alive_timers},
      {"pipelining_bounded", test_pipelining_bounded},
      {"backpressure", test_backpressure},
      {NULL, NULL},
  };
  signal(SIGPIPE, SIG_IGN);
  /* Under AddressSanitizer freed memory sits in a quarantine (256 MiB by default) that would
   * count in the servers' RSS: keep it small so the RSS checks measure what is held. */
  const char *asan = getenv("ASAN_OPTIONS");
  char *asan_opts = wt_strf("%s%squarantine_size_mb=4", asan ? asan : "", asan && *asan ? ":" : "");
  setenv("ASAN_OPTIONS", asan_opts, 1);
  free(asan_opts);
  g_dir = wt_mkdtemp();
  g_model = wt_strf("%s/tiny.gguf", g_dir);
  g_long_model = wt_strf("%s/long.gguf", g_dir);
  if (hc_mkmodel(g_model, 256) != 0 || hc_mkmodel(g_long_model, 2048) != 0) {
    fprintf(stderr, "SKIP: `weir mkmodel` is not available\n");
  } else {
    g_ready = start(&g_main, "main", g_model, NULL) == 0;
  }
  int rc = wt_run_suite("http_hardening", tests);
  int code = hc_server_stop(&g_main, SIGTERM, 20000);
  if (g_ready && code != 0) {
    fprintf(stderr, "the main server exited with %d (a crash is a failure)\n", code);
    rc = 1;
  }
  wt_rmtree(g_dir);
  free(g_dir);
  free(g_model);
  free(g_long_model);
  return rc;
}
