/* Integration tests of the HTTP server: the real `weir serve` on 127.0.0.1 with a tiny model
 * from `weir mkmodel`, driven by a blocking client (hclient.c). */
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hclient.h"
#include "testutil.h"

#define CTX 256
#define API_KEY "sk-test-weir"

static char *g_dir;
static char *g_model, *g_long_model;
static hc_server g_main;    /* defaults, no key */
static hc_server g_long;    /* the 2048-token model */
static hc_server g_limits;  /* small limits and an API key */
static int g_ready;
static char g_model_name[128];

/* ---- fixtures --------------------------------------------------------------------------- */

/* A short-context model for the limit tests, and a long one (2048) for requests that must
 * stay in flight long enough to be interrupted. */
static int make_model(void) {
  g_model = wt_strf("%s/tiny.gguf", g_dir);
  g_long_model = wt_strf("%s/long.gguf", g_dir);
  return hc_mkmodel(g_model, CTX) || hc_mkmodel(g_long_model, 2048);
}

/* Starts a server on a free port with `extra` --set overrides (NULL-terminated) after this
 * suite's own: room for the concurrency tests' 128 sequences. */
static int start_server_model(hc_server *s, const char *name, const char *model,
                              const char *const *extra) {
  const char *args[48] = {"scheduler.max_num_seqs=128"};
  int n = 1;
  for (int i = 0; extra && extra[i] && n < 47; i++) args[n++] = extra[i];
  args[n] = NULL;
  return hc_start_test_server(s, g_dir, name, model, args);
}

static int start_server(hc_server *s, const char *name, const char *const *extra) {
  return start_server_model(s, name, g_model, extra);
}

#define NEED_SERVER()                                                                       \
  do {                                                                                      \
    if (hc_skip_without_server(g_ready)) return;                                            \
  } while (0)

/* ---- helpers ---------------------------------------------------------------------------- */

static cJSON *post_json(int port, const char *path, const char *body, int *status) {
  hc_response r;
  cJSON *j = NULL;
  *status = 0;
  if (hc_request(port, "POST", path, NULL, body, &r) == 0) {
    *status = r.status;
    j = cJSON_Parse(r.body);
    if (!j) fprintf(stderr, "\n  not JSON (%d): %s\n", r.status, r.body);
  }
  hc_response_free(&r);
  return j;
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

/* Checks an OpenAI error object: status, type and (when given) param. */
static void expect_error(int port, const char *path, const char *body, int status,
                         const char *type, const char *param) {
  int st = 0;
  cJSON *j = post_json(port, path, body, &st);
  if (st != status) fprintf(stderr, "\n  body: %s\n", body);
  WT_ASSERT_INT_EQ(st, status);
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
  CU_ASSERT_PTR_NOT_NULL(err);
  if (err) {
    CU_ASSERT_PTR_NOT_NULL(jstr(err, "message"));
    const char *t = jstr(err, "type");
    CU_ASSERT(t && !strcmp(t, type));
    CU_ASSERT(cJSON_GetObjectItemCaseSensitive(err, "param") != NULL);
    CU_ASSERT(cJSON_GetObjectItemCaseSensitive(err, "code") != NULL);
    if (param) {
      const char *p = jstr(err, "param");
      if (!p || strcmp(p, param))
        fprintf(stderr, "\n  param %s, expected %s (%s)\n", p ? p : "null", param, body);
      CU_ASSERT(p && !strcmp(p, param));
    }
  }
  cJSON_Delete(j);
}

/* A good request still works: the server survived whatever came before. */
static void expect_alive(int port) { WT_ASSERT_INT_EQ(hc_alive_status(port), 200); }

/* Reads a streamed response from an open socket until the end; returns the SSE events. */
static int read_stream(int fd, int *status, char ***events) {
  hc_response r;
  *events = NULL;
  if (hc_read_response(fd, &r) != 0) {
    *status = 0;
    return -1;
  }
  *status = r.status;
  char *ct = hc_header(&r, "content-type");
  int is_sse = ct && strstr(ct, "text/event-stream");
  free(ct);
  int n = is_sse ? hc_sse_split(r.body, events) : -1;
  hc_response_free(&r);
  return n;
}

static int stream_request(int port, const char *path, const char *body, char ***events,
                          int *status) {
  int fd = hc_connect(port, 60000);
  if (fd < 0) return -1;
  char *req = wt_strf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n%s",
                      path, strlen(body), body);
  hc_send_all(fd, req, strlen(req));
  free(req);
  int n = read_stream(fd, status, events);
  close(fd);
  return n;
}

/* ---- tests: plumbing -------------------------------------------------------------------- */

static void test_health_version_models(void) {
  NEED_SERVER();
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", "/health", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"status\":\"ok\"");
  hc_response_free(&r);

  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", "/version", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  cJSON *j = cJSON_Parse(r.body);
  CU_ASSERT_PTR_NOT_NULL(jstr(j, "version"));
  cJSON_Delete(j);
  hc_response_free(&r);

  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", "/v1/models", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  j = cJSON_Parse(r.body);
  CU_ASSERT_STRING_EQUAL(jstr(j, "object"), "list");
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(data), 1);
  const cJSON *m = cJSON_GetArrayItem(data, 0);
  CU_ASSERT_STRING_EQUAL(jstr(m, "object"), "model");
  CU_ASSERT_STRING_EQUAL(jstr(m, "id"), g_model_name);
  CU_ASSERT_STRING_EQUAL(jstr(m, "owned_by"), "weir");
  CU_ASSERT(jnum(m, "created") > 1600000000);
  WT_ASSERT_INT_EQ((int)jnum(m, "max_model_len"), CTX);
  cJSON_Delete(j);
  hc_response_free(&r);

  char *path = wt_strf("/v1/models/%s", g_model_name);
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", path, NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  free(path);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", "/v1/models/nope", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 404);
  WT_ASSERT_STR_CONTAINS(r.body, "model_not_found");
  hc_response_free(&r);
}

/* Every served name is accepted (server.served_model_name as a list: the first reported, the
 * rest aliases) on every endpoint that takes a model; any other name is 404. */
static void test_served_name_aliases(void) {
  NEED_SERVER();
  hc_server s = {0};
  const char *extra[] = {"server.served_model_name=[\"first\", \"org/alias-b\"]", NULL};
  if (start_server(&s, "aliases", extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/models", NULL, NULL, &r), 0);
  WT_ASSERT_STR_CONTAINS(r.body, "\"id\":\"first\"");
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/models/org/alias-b", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  int st = 0;
  cJSON *j = post_json(s.port, "/v1/completions",
                       "{\"model\":\"org/alias-b\",\"prompt\":\"hi\",\"max_tokens\":2}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  CU_ASSERT_STRING_EQUAL(jstr(j, "model"), "first");
  cJSON_Delete(j);
  j = post_json(s.port, "/tokenize", "{\"model\":\"first\",\"prompt\":\"hi\"}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  cJSON_Delete(j);
  j = post_json(s.port, "/v1/chat/completions",
                "{\"model\":\"alias-b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                &st);
  WT_ASSERT_INT_EQ(st, 404);
  cJSON_Delete(j);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* logit_bias reaches the sampler: +100 on one token makes greedy decoding emit only it, on
 * both endpoints; malformed maps are refused with 400 and a message naming the problem. */
static void test_logit_bias(void) {
  NEED_SERVER();
  int st = 0;
  cJSON *j = post_json(g_main.port, "/detokenize", "{\"tokens\":[7,7,7,7,7]}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  char *want = strdup(jstr(j, "prompt") ? jstr(j, "prompt") : "?");
  cJSON_Delete(j);
  j = post_json(g_main.port, "/v1/completions",
                "{\"prompt\":\"hello\",\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true,"
                "\"logit_bias\":{\"7\":100}}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  CU_ASSERT_STRING_EQUAL(jstr(c0, "text") ? jstr(c0, "text") : "", want);
  cJSON_Delete(j);
  /* without the bias greedy decoding says something else */
  j = post_json(g_main.port, "/v1/completions",
                "{\"prompt\":\"hello\",\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true}",
                &st);
  c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  CU_ASSERT(jstr(c0, "text") && strcmp(jstr(c0, "text"), want) != 0);
  cJSON_Delete(j);
  j = post_json(g_main.port, "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5,"
                "\"temperature\":0,\"ignore_eos\":true,\"logit_bias\":{\"7\":100.0}}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  cJSON *msg = cJSON_GetObjectItem(c0, "message");
  CU_ASSERT_STRING_EQUAL(jstr(msg, "content") ? jstr(msg, "content") : "", want);
  cJSON_Delete(j);
  free(want);
  static const struct {
    const char *bias, *frag;
  } bad[] = {{"[1]", "must be an object"},
             {"{\"x\":1}", "keys must be token ids"},
             {"{\"-3\":1}", "keys must be token ids"},
             {"{\"99999999\":1}", "keys must be token ids"},
             {"{\"5\":101}", "in [-100, 100]"},
             {"{\"5\":\"1\"}", "in [-100, 100]"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *body = wt_strf("{\"prompt\":\"a\",\"max_tokens\":1,\"logit_bias\":%s}", bad[i].bias);
    hc_response r;
    WT_ASSERT_INT_EQ(hc_request(g_main.port, "POST", "/v1/completions", NULL, body, &r), 0);
    WT_ASSERT_INT_EQ(r.status, 400);
    WT_ASSERT_STR_CONTAINS(r.body, bad[i].frag);
    hc_response_free(&r);
    free(body);
  }
}

/* A stream tells buffering proxies (nginx) to pass events on at once. */
static void test_stream_unbuffered_header(void) {
  NEED_SERVER();
  int fd = hc_connect(g_main.port, 60000);
  CU_ASSERT_FATAL(fd >= 0);
  const char *body = "{\"prompt\":\"hi\",\"max_tokens\":2,\"stream\":true}";
  char *req = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
  hc_send_all(fd, req, strlen(req));
  free(req);
  hc_response r;
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  close(fd);
  char *h = hc_header(&r, "x-accel-buffering");
  CU_ASSERT_STRING_EQUAL(h ? h : "", "no");
  free(h);
  hc_response_free(&r);
}

static void test_not_found_and_method(void) {
  NEED_SERVER();
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", "/v1/nothing", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 404);
  cJSON *j = cJSON_Parse(r.body);
  CU_ASSERT_STRING_EQUAL(jstr(cJSON_GetObjectItemCaseSensitive(j, "error"), "type"),
                         "invalid_request_error");
  cJSON_Delete(j);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", "/v1/completions", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 405);
  char *allow = hc_header(&r, "allow");
  CU_ASSERT(allow && !strcmp(allow, "POST"));
  free(allow);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "POST", "/health", NULL, "{}", &r), 0);
  WT_ASSERT_INT_EQ(r.status, 405);
  hc_response_free(&r);
  expect_alive(g_main.port);
}

static void raw_exchange(int port, const char *raw, int expect_status) {
  int fd = hc_connect(port, 10000);
  CU_ASSERT_FATAL(fd >= 0);
  hc_send_all(fd, raw, strlen(raw));
  hc_response r;
  int rc = hc_read_response(fd, &r);
  WT_ASSERT_INT_EQ(rc, 0);
  if (r.status != expect_status) fprintf(stderr, "\n  raw: %.60s\n", raw);
  WT_ASSERT_INT_EQ(r.status, expect_status);
  if (expect_status >= 400 && r.body && *r.body) WT_ASSERT_STR_CONTAINS(r.body, "\"error\"");
  hc_response_free(&r);
  close(fd);
}

static void test_malformed_http(void) {
  NEED_SERVER();
  raw_exchange(g_main.port, "THIS IS NOT HTTP\r\n\r\n", 400);
  raw_exchange(g_main.port, "GET /health HTTP/1.1\r\nHost x\r\n\r\n", 400);
  raw_exchange(g_main.port,
               "POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
               400);
  raw_exchange(g_main.port,
               "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
               "Content-Type: application/json\r\n\r\nZZ\r\n",
               400);
  raw_exchange(g_main.port, "GET /health HTTP/2.0\r\n\r\n", 505);
  expect_alive(g_main.port);
}

static void test_keepalive_pipelining_chunked(void) {
  NEED_SERVER();
  int fd = hc_connect(g_main.port, 10000);
  CU_ASSERT_FATAL(fd >= 0);
  /* Three pipelined requests in one write: answered in order on one connection. */
  const char *tok = "{\"prompt\":\"abc\"}";
  char *raw = wt_strf("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n%s"
                      "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
                      strlen(tok), tok);
  hc_send_all(fd, raw, strlen(raw));
  free(raw);
  hc_response r;
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"status\"");
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"tokens\"");
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 404);
  CU_ASSERT(!r.closed);
  hc_response_free(&r);
  /* A chunked request body on the same connection. */
  const char *chunked = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n"
                        "5\r\n{\"pro\r\n"
                        "B\r\nmpt\":\"abc\"}\r\n0\r\n\r\n";
  hc_send_all(fd, chunked, strlen(chunked));
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  WT_ASSERT_STR_CONTAINS(r.body, "\"count\"");
  hc_response_free(&r);
  /* Expect: 100-continue gets its interim response before the body is sent. */
  const char *expect = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Expect: 100-continue\r\nContent-Length: 16\r\n\r\n";
  hc_send_all(fd, expect, strlen(expect));
  int chunked_resp = 0;
  WT_ASSERT_INT_EQ(hc_read_head(fd, &r, &chunked_resp), 0);
  WT_ASSERT_INT_EQ(r.status, 100);
  hc_response_free(&r);
  hc_send_all(fd, "{\"prompt\":\"abc\"}", 16);
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  /* Connection: close is honoured. */
  const char *bye = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  hc_send_all(fd, bye, strlen(bye));
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  CU_ASSERT(r.closed);
  hc_response_free(&r);
  char c;
  CU_ASSERT(recv(fd, &c, 1, 0) == 0);
  close(fd);
}

/* Mutated requests (a seeded generator, so every run sends the same bytes): whatever
 * arrives, the server answers with a well-formed status line or closes, and keeps serving. */
static void test_mutated_requests(void) {
  NEED_SERVER();
  static const char *seeds[] = {
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 44\r\n\r\n{\"prompt\":\"hi\",\"max_tokens\":2,\"n\":1,\"seed\":1}",
      "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n"
      "2b\r\n{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}\r\n0\r\n\r\n",
      "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n",
      "POST /tokenize HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 16\r\n"
      "\r\n{\"prompt\":\"abc\"}",
  };
  uint64_t rng = 0x5eed1234abcdULL;
  int answered = 0, closed = 0;
  for (int iter = 0; iter < 160; iter++) {
    const char *seed = seeds[iter % 4];
    size_t len = strlen(seed);
    char buf[512];
    memcpy(buf, seed, len);
    int edits = 1 + iter % 4;
    for (int k = 0; k < edits; k++) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      size_t pos = (size_t)(rng % len);
      switch ((rng >> 20) % 4) {
      case 0: buf[pos] = (char)(rng >> 32); break;                      /* flip a byte */
      case 1: len = pos + 1; break;                                      /* truncate */
      case 2:
        if (len + 8 < sizeof buf) {                                      /* insert junk */
          memmove(buf + pos + 8, buf + pos, len - pos);
          memcpy(buf + pos, "\r\n:\x00{[\"\xff", 8);
          len += 8;
        }
        break;
      default: buf[pos] = "0123456789{}[]\",:\r\n "[(rng >> 40) % 18]; break; /* plausible */
      }
    }
    int fd = hc_connect(g_main.port, 3000);
    CU_ASSERT_FATAL(fd >= 0);
    hc_send_all(fd, buf, len);
    shutdown(fd, SHUT_WR); /* a truncated request must not leave us waiting for more */
    char resp[16] = "";
    ssize_t n = recv(fd, resp, sizeof resp - 1, MSG_WAITALL);
    if (n > 0) {
      resp[n] = '\0';
      CU_ASSERT(!strncmp(resp, "HTTP/1.1 ", 9));
      answered++;
    } else {
      closed++;
    }
    close(fd);
  }
  CU_ASSERT(answered > 0);
  expect_alive(g_main.port);
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "GET", "/health", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
}

/* HTTP/1.0: no chunked encoding, so a stream is delimited by closing the connection. */
static void test_http10_stream(void) {
  NEED_SERVER();
  int fd = hc_connect(g_main.port, 10000);
  const char *body = "{\"prompt\":\"old\",\"max_tokens\":3,\"ignore_eos\":true,\"stream\":true}";
  char *req = wt_strf("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
  hc_send_all(fd, req, strlen(req));
  free(req);
  hc_response r;
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  char *te = hc_header(&r, "transfer-encoding");
  CU_ASSERT_PTR_NULL(te);
  free(te);
  CU_ASSERT(r.closed);
  WT_ASSERT_STR_CONTAINS(r.body, "data: [DONE]\n\n");
  hc_response_free(&r);
  close(fd);
}

static void test_content_type_and_json(void) {
  NEED_SERVER();
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "POST", "/v1/completions",
                              "Content-Type: text/plain\r\n", "{\"prompt\":\"a\"}", &r), 0);
  WT_ASSERT_INT_EQ(r.status, 415);
  WT_ASSERT_STR_CONTAINS(r.body, "\"error\"");
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_main.port, "POST", "/v1/completions",
                              "Content-Type: application/json; charset=utf-8\r\n",
                              "{\"prompt\":\"a\",\"max_tokens\":1}", &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  const char *bad[] = {"{", "[1,2]", "\"str\"", "{\"prompt\":\"a\"} x", "", "{\"prompt\":}",
                       NULL};
  for (int i = 0; bad[i]; i++)
    expect_error(g_main.port, "/v1/completions", bad[i], 400, "invalid_request_error", NULL);
  expect_error(g_main.port, "/v1/chat/completions", "nope", 400, "invalid_request_error", NULL);
  expect_alive(g_main.port);
}

static void test_parameter_validation(void) {
  NEED_SERVER();
  static const struct {
    const char *path, *body, *param;
  } cases[] = {
      {"/v1/completions", "{}", "prompt"},
      {"/v1/completions", "{\"prompt\":5}", "prompt"},
      {"/v1/completions", "{\"prompt\":[]}", "prompt"},
      {"/v1/completions", "{\"prompt\":[\"a\",1]}", "prompt"},
      {"/v1/completions", "{\"prompt\":[1,99999]}", "prompt"},
      {"/v1/completions", "{\"prompt\":[[1],[]]}", "prompt"},
      {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens"},
      {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1.5}", "max_tokens"},
      {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"3\"}", "max_tokens"},
      {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":2.5}", "temperature"},
      {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":-0.1}", "temperature"},
      {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature"},
      {"/v1/completions", "{\"prompt\":\"a\",\"top_p\":0}", "top_p"},
      {"/v1/completions", "{\"prompt\":\"a\",\"top_p\":1.01}", "top_p"},
      {"/v1/completions", "{\"prompt\":\"a\",\"top_k\":-2}", "top_k"},
      {"/v1/completions", "{\"prompt\":\"a\",\"min_p\":1.5}", "min_p"},
      {"/v1/completions", "{\"prompt\":\"a\",\"n\":0}", "n"},
      {"/v1/completions", "{\"prompt\":\"a\",\"n\":17}", "n"},
      {"/v1/completions", "{\"prompt\":\"a\",\"presence_penalty\":3}", "presence_penalty"},
      {"/v1/completions", "{\"prompt\":\"a\",\"frequency_penalty\":-3}", "frequency_penalty"},
      {"/v1/completions", "{\"prompt\":\"a\",\"repetition_penalty\":0}", "repetition_penalty"},
      {"/v1/completions", "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs"},
      {"/v1/completions", "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs"},
      {"/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"x\",3]}", "stop"},
      {"/v1/completions", "{\"prompt\":\"a\",\"stop\":\"\"}", "stop"},
      {"/v1/completions", "{\"prompt\":\"a\",\"stop_token_ids\":[-1]}", "stop_token_ids"},
      {"/v1/completions", "{\"prompt\":\"a\",\"seed\":1.5}", "seed"},
      {"/v1/completions", "{\"prompt\":\"a\",\"echo\":1}", "echo"},
      {"/v1/completions", "{\"prompt\":\"a\",\"stream\":\"yes\"}", "stream"},
      {"/v1/completions", "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}",
       "stream_options"},
      {"/v1/completions", "{\"prompt\":\"a\",\"min_tokens\":5,\"max_tokens\":2}", "min_tokens"},
      {"/v1/completions", "{\"prompt\":\"a\",\"user\":7}", "user"},
      {"/v1/completions", "{\"prompt\":\"a\",\"ignore_eos\":\"no\"}", "ignore_eos"},
      {"/v1/chat/completions", "{}", "messages"},
      {"/v1/chat/completions", "{\"messages\":[]}", "messages"},
      {"/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
       "messages[0]"},
      {"/v1/chat/completions", "{\"messages\":[{\"content\":\"x\"}]}", "messages[0]"},
      {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":5}]}",
       "messages[0].content"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
       "messages[0].content[0]"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
       "top_logprobs"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":3}", "logprobs"},
      {"/tokenize", "{\"prompt\":3}", "prompt"},
      {"/tokenize", "{}", "prompt"},
      {"/detokenize", "{\"tokens\":[\"a\"]}", "tokens"},
      {"/detokenize", "{\"tokens\":[100000]}", "tokens"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect_error(g_main.port, cases[i].path, cases[i].body, 400, "invalid_request_error",
                 cases[i].param);
  expect_alive(g_main.port);
}

static void test_unsupported_parameters(void) {
  NEED_SERVER();
  static const struct {
    const char *path, *body, *param;
  } cases[] = {
      {"/v1/completions", "{\"prompt\":\"a\",\"suffix\":\"end\"}", "suffix"},
      {"/v1/completions", "{\"prompt\":\"a\",\"best_of\":3}", "best_of"},
      {"/v1/completions", "{\"prompt\":\"a\",\"frobnicate\":true}", "frobnicate"},
      {"/v1/completions", "{\"prompt\":\"a\",\"messages\":[]}", "messages"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
       "\"function\"}]}",
       "tools[0]"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
       "tool_choice"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
       "\"yaml\"}}",
       "response_format.type"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[]}", "functions"},
      {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}",
       "echo"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"audio\":{}}]}",
       "messages[0].audio"},
      {"/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,"
       "\"stream_options\":{\"continuous\":true}}",
       "stream_options.continuous"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int st = 0;
    cJSON *j = post_json(g_main.port, cases[i].path, cases[i].body, &st);
    WT_ASSERT_INT_EQ(st, 400);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    const char *p = jstr(err, "param");
    const char *msg = jstr(err, "message");
    if (!p || strcmp(p, cases[i].param))
      fprintf(stderr, "\n  %s -> param %s\n", cases[i].body, p ? p : "null");
    CU_ASSERT(p && !strcmp(p, cases[i].param));
    /* The message names the parameter too, for humans. */
    CU_ASSERT(msg && strstr(msg, cases[i].param));
    cJSON_Delete(j);
  }
  /* Values that ask for nothing are accepted. */
  int st = 0;
  cJSON *j = post_json(g_main.port, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1,"
                       "\"response_format\":{\"type\":\"text\"},\"tools\":[],\"tool_choice\":"
                       "\"none\",\"logit_bias\":{},\"user\":\"u1\",\"seed\":null}",
                       &st);
  WT_ASSERT_INT_EQ(st, 200);
  cJSON_Delete(j);
}

static void test_model_and_context_errors(void) {
  NEED_SERVER();
  expect_error(g_main.port, "/v1/completions", "{\"model\":\"gpt-9\",\"prompt\":\"a\"}", 404,
               "invalid_request_error", "model");
  /* A prompt longer than the context: the message names both lengths. */
  cJSON *root = cJSON_CreateObject();
  cJSON *ids = cJSON_AddArrayToObject(root, "prompt");
  for (int i = 0; i < CTX + 10; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(5 + i % 50));
  char *body = cJSON_PrintUnformatted(root);
  int st = 0;
  cJSON *j = post_json(g_main.port, "/v1/completions", body, &st);
  WT_ASSERT_INT_EQ(st, 400);
  const char *msg = jstr(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
  char want[64];
  snprintf(want, sizeof want, "%d", CTX);
  WT_ASSERT_STR_CONTAINS(msg, want);
  snprintf(want, sizeof want, "%d", CTX + 10);
  WT_ASSERT_STR_CONTAINS(msg, want);
  cJSON_Delete(j);
  free(body);
  cJSON_Delete(root);
  /* Prompt + max_tokens over the context. */
  j = post_json(g_main.port, "/v1/completions", "{\"prompt\":[1,2,3,4],\"max_tokens\":253}",
                &st);
  WT_ASSERT_INT_EQ(st, 400);
  msg = jstr(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
  WT_ASSERT_STR_CONTAINS(msg, "257");
  cJSON_Delete(j);
  j = post_json(g_main.port, "/v1/completions", "{\"prompt\":[1,2,3,4],\"max_tokens\":252}",
                &st);
  WT_ASSERT_INT_EQ(st, 200);
  cJSON_Delete(j);
}

static void test_tokenize_detokenize(void) {
  NEED_SERVER();
  int st = 0;
  cJSON *j = post_json(g_main.port, "/tokenize", "{\"prompt\":\"hello world\"}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
  int n = cJSON_GetArraySize(toks);
  CU_ASSERT(n > 0);
  WT_ASSERT_INT_EQ((int)jnum(j, "count"), n);
  WT_ASSERT_INT_EQ((int)jnum(j, "max_model_len"), CTX);
  cJSON *j2 = post_json(g_main.port, "/tokenize",
                        "{\"text\":\"hello world\",\"add_special_tokens\":false}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  const cJSON *toks2 = cJSON_GetObjectItemCaseSensitive(j2, "tokens");
  /* Without special tokens: the same ids minus the BOS in front. */
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(toks2), n - 1);
  cJSON *req = cJSON_CreateObject();
  cJSON_AddItemToObject(req, "tokens", cJSON_Duplicate(toks2, 1));
  char *body = cJSON_PrintUnformatted(req);
  cJSON *j3 = post_json(g_main.port, "/detokenize", body, &st);
  WT_ASSERT_INT_EQ(st, 200);
  const char *text = jstr(j3, "prompt");
  CU_ASSERT(text && !strcmp(text, "hello world"));
  if (text && strcmp(text, "hello world")) fprintf(stderr, "\n  detokenized: '%s'\n", text);
  free(body);
  cJSON_Delete(req);
  cJSON_Delete(j);
  cJSON_Delete(j2);
  cJSON_Delete(j3);
}

/* ---- tests: generation ------------------------------------------------------------------ */

static void check_usage(const cJSON *u, int completion) {
  CU_ASSERT_PTR_NOT_NULL_FATAL(u);
  int p = (int)jnum(u, "prompt_tokens"), c = (int)jnum(u, "completion_tokens");
  CU_ASSERT(p > 0);
  if (completion >= 0) WT_ASSERT_INT_EQ(c, completion);
  WT_ASSERT_INT_EQ((int)jnum(u, "total_tokens"), p + c);
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
  CU_ASSERT(jnum(d, "cached_tokens") >= 0);
}

static void test_completion_shape(void) {
  NEED_SERVER();
  int st = 0;
  cJSON *j = post_json(g_main.port, "/v1/completions",
                       "{\"prompt\":\"Once upon a time\",\"max_tokens\":7,\"ignore_eos\":true,"
                       "\"temperature\":0}",
                       &st);
  WT_ASSERT_INT_EQ(st, 200);
  const char *id = jstr(j, "id");
  CU_ASSERT(id && !strncmp(id, "cmpl-", 5) && strlen(id) > 10);
  CU_ASSERT_STRING_EQUAL(jstr(j, "object"), "text_completion");
  CU_ASSERT_STRING_EQUAL(jstr(j, "model"), g_model_name);
  CU_ASSERT(jnum(j, "created") > 1600000000);
  const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(choices), 1);
  const cJSON *c = cJSON_GetArrayItem(choices, 0);
  WT_ASSERT_INT_EQ((int)jnum(c, "index"), 0);
  CU_ASSERT_PTR_NOT_NULL(jstr(c, "text"));
  CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c, "logprobs")));
  CU_ASSERT_STRING_EQUAL(jstr(c, "finish_reason"), "length");
  check_usage(cJSON_GetObjectItemCaseSensitive(j, "usage"), 7);
  cJSON_Delete(j);
}

static void test_completion_stream_matches(void) {
  NEED_SERVER();
  const char *base = "\"prompt\":\"The river\",\"max_tokens\":12,\"ignore_eos\":true,"
                     "\"temperature\":0";
  char *b1 = wt_strf("{%s}", base);
  int st = 0;
  cJSON *full = post_json(g_main.port, "/v1/completions", b1, &st);
  WT_ASSERT_INT_EQ(st, 200);
  const char *want =
      jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(full, "choices"), 0), "text");
  char *b2 = wt_strf("{%s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", base);
  char **ev = NULL;
  int n = stream_request(g_main.port, "/v1/completions", b2, &ev, &st);
  WT_ASSERT_INT_EQ(st, 200);
  CU_ASSERT_FATAL(n >= 3);
  CU_ASSERT_STRING_EQUAL(ev[n - 1], "[DONE]");
  char text[4096] = "";
  int finishes = 0;
  const char *id0 = NULL;
  cJSON *first = cJSON_Parse(ev[0]);
  id0 = jstr(first, "id");
  for (int i = 0; i < n - 2; i++) {
    cJSON *o = cJSON_Parse(ev[i]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(jstr(o, "object"), "text_completion");
    CU_ASSERT(id0 && jstr(o, "id") && !strcmp(jstr(o, "id"), id0));
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "usage")));
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    WT_ASSERT_INT_EQ((int)jnum(c, "index"), 0);
    strncat(text, jstr(c, "text") ? jstr(c, "text") : "", sizeof text - strlen(text) - 1);
    const char *fr = jstr(c, "finish_reason");
    if (fr) {
      finishes++;
      CU_ASSERT_STRING_EQUAL(fr, "length");
      WT_ASSERT_INT_EQ(i, n - 3); /* finish_reason only in the last choice chunk */
    }
    cJSON_Delete(o);
  }
  WT_ASSERT_INT_EQ(finishes, 1);
  CU_ASSERT(want && !strcmp(text, want));
  if (want && strcmp(text, want)) fprintf(stderr, "\n  stream '%s' vs full '%s'\n", text, want);
  cJSON *u = cJSON_Parse(ev[n - 2]);
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(u, "choices")), 0);
  check_usage(cJSON_GetObjectItemCaseSensitive(u, "usage"), 12);
  cJSON_Delete(u);
  cJSON_Delete(first);
  hc_sse_free(ev, n);
  cJSON_Delete(full);
  free(b1);
  free(b2);
}

static void test_chat_shapes(void) {
  NEED_SERVER();
  const char *msgs = "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},"
                     "{\"type\":\"text\",\"text\":\"there\"}]}],\"max_completion_tokens\":6,"
                     "\"ignore_eos\":true,\"temperature\":0";
  char *b1 = wt_strf("{%s}", msgs);
  int st = 0;
  cJSON *j = post_json(g_main.port, "/v1/chat/completions", b1, &st);
  WT_ASSERT_INT_EQ(st, 200);
  const char *id = jstr(j, "id");
  CU_ASSERT(id && !strncmp(id, "chatcmpl-", 9));
  CU_ASSERT_STRING_EQUAL(jstr(j, "object"), "chat.completion");
  const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
  const cJSON *msg = cJSON_GetObjectItemCaseSensitive(c, "message");
  CU_ASSERT_STRING_EQUAL(jstr(msg, "role"), "assistant");
  const char *want = jstr(msg, "content");
  CU_ASSERT_PTR_NOT_NULL(want);
  CU_ASSERT_STRING_EQUAL(jstr(c, "finish_reason"), "length");
  check_usage(cJSON_GetObjectItemCaseSensitive(j, "usage"), 6);

  char *b2 = wt_strf("{%s,\"stream\":true}", msgs);
  char **ev = NULL;
  int n = stream_request(g_main.port, "/v1/chat/completions", b2, &ev, &st);
  WT_ASSERT_INT_EQ(st, 200);
  CU_ASSERT_FATAL(n >= 3);
  CU_ASSERT_STRING_EQUAL(ev[n - 1], "[DONE]");
  char text[4096] = "";
  for (int i = 0; i < n - 1; i++) {
    cJSON *o = cJSON_Parse(ev[i]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(jstr(o, "object"), "chat.completion.chunk");
    CU_ASSERT(cJSON_GetObjectItemCaseSensitive(o, "usage") == NULL);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(ch, "delta");
    CU_ASSERT_PTR_NOT_NULL(delta);
    const char *role = jstr(delta, "role");
    if (i == 0) {
      CU_ASSERT(role && !strcmp(role, "assistant"));
    } else {
      CU_ASSERT_PTR_NULL(role);
    }
    const char *content = jstr(delta, "content");
    if (content) strncat(text, content, sizeof text - strlen(text) - 1);
    const char *fr = jstr(ch, "finish_reason");
    if (i == n - 2) {
      CU_ASSERT(fr && !strcmp(fr, "length"));
    } else {
      CU_ASSERT_PTR_NULL(fr);
    }
    cJSON_Delete(o);
  }
  CU_ASSERT(want && !strcmp(text, want));
  hc_sse_free(ev, n);
  cJSON_Delete(j);
  free(b1);
  free(b2);
}

static void test_multi_prompt_and_n(void) {
  NEED_SERVER();
  int st = 0;
  cJSON *j = post_json(g_main.port, "/v1/completions",
                       "{\"prompt\":[\"alpha\",\"beta gamma\"],\"n\":2,\"max_tokens\":3,"
                       "\"ignore_eos\":true,\"seed\":7}",
                       &st);
  WT_ASSERT_INT_EQ(st, 200);
  const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(choices), 4);
  for (int i = 0; i < 4; i++)
    WT_ASSERT_INT_EQ((int)jnum(cJSON_GetArrayItem(choices, i), "index"), i);
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
  check_usage(u, 12);
  cJSON_Delete(j);
  /* Token-id prompts: one list, and a list of lists. */
  j = post_json(g_main.port, "/v1/completions",
                "{\"prompt\":[[1,20,30],[1,40]],\"max_tokens\":2,\"ignore_eos\":true}", &st);
  WT_ASSERT_INT_EQ(st, 200);
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "choices")), 2);
  WT_ASSERT_INT_EQ((int)jnum(cJSON_GetObjectItemCaseSensitive(j, "usage"), "prompt_tokens"), 5);
  cJSON_Delete(j);
  /* Streamed: the choices interleave; each ends exactly once with its own finish_reason. */
  char **ev = NULL;
  int n = stream_request(g_main.port, "/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"n\":3,"
                         "\"max_tokens\":5,\"ignore_eos\":true,\"stream\":true,"
                         "\"stream_options\":{\"include_usage\":true}}",
                         &ev, &st);
  WT_ASSERT_INT_EQ(st, 200);
  int finishes[3] = {0, 0, 0}, roles[3] = {0, 0, 0};
  for (int i = 0; i + 2 < n; i++) {
    cJSON *o = cJSON_Parse(ev[i]);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    int idx = (int)jnum(c, "index");
    CU_ASSERT(idx >= 0 && idx < 3);
    if (idx >= 0 && idx < 3) {
      if (jstr(c, "finish_reason")) finishes[idx]++;
      if (jstr(cJSON_GetObjectItemCaseSensitive(c, "delta"), "role")) roles[idx]++;
    }
    cJSON_Delete(o);
  }
  for (int i = 0; i < 3; i++) {
    WT_ASSERT_INT_EQ(finishes[i], 1);
    WT_ASSERT_INT_EQ(roles[i], 1);
  }
  if (n >= 2) {
    cJSON *last = cJSON_Parse(ev[n - 2]);
    check_usage(cJSON_GetObjectItemCaseSensitive(last, "usage"), 15);
    cJSON_Delete(last);
    CU_ASSERT_STRING_EQUAL(ev[n - 1], "[DONE]");
  }
  if (n > 0) hc_sse_free(ev, n);
  j = post_json(g_main.port, "/v1/completions",
                "{\"prompt\":[1,20,30],\"max_tokens\":2,\"ignore_eos\":true,\"echo\":true}",
                &st);
  WT_ASSERT_INT_EQ(st, 200);
  WT_ASSERT_INT_EQ((int)jnum(cJSON_GetObjectItemCaseSensitive(j, "usage"), "prompt_tokens"), 3);
  cJSON_Delete(j);
}

static void test_echo_and_stop(void) {
  NEED_SERVER();
  int st = 0;
  cJSON *j = post_json(g_main.port, "/v1/completions",
                       "{\"prompt\":\"Tell me\",\"max_tokens\":3,\"ignore_eos\":true,"
                       "\"echo\":true}",
                       &st);
  WT_ASSERT_INT_EQ(st, 200);
  const char *t =
      jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "text");
  CU_ASSERT(t && !strncmp(t, "Tell me", 7));
  cJSON_Delete(j);
  /* Stop strings: take the greedy output, stop at a piece of its middle. */
  j = post_json(g_main.port, "/v1/completions",
                "{\"prompt\":\"abc\",\"max_tokens\":24,\"ignore_eos\":true,\"temperature\":0}",
                &st);
  t = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "text");
  CU_ASSERT_FATAL(t != NULL);
  size_t len = strlen(t);
  if (len >= 6) {
    /* Three bytes from the middle, widened to whole characters: stop strings are text. */
    size_t from = len / 2, to = from + 3;
    while (from > 0 && ((unsigned char)t[from] & 0xC0) == 0x80) from--;
    while (to < len && ((unsigned char)t[to] & 0xC0) == 0x80) to++;
    char stop[16];
    snprintf(stop, sizeof stop, "%.*s", (int)(to - from), t + from);
    char *pos = strstr(t, stop);
    size_t prefix = (size_t)(pos - t);
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "prompt", "abc");
    cJSON_AddNumberToObject(req, "max_tokens", 24);
    cJSON_AddBoolToObject(req, "ignore_eos", 1);
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddStringToObject(req, "stop", stop);
    char *body = cJSON_PrintUnformatted(req);
    cJSON *k = post_json(g_main.port, "/v1/completions", body, &st);
    WT_ASSERT_INT_EQ(st, 200);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(k, "choices"), 0);
    const char *got = jstr(c, "text");
    CU_ASSERT(got && strlen(got) == prefix && !strncmp(got, t, prefix));
    CU_ASSERT(jstr(c, "finish_reason") && !strcmp(jstr(c, "finish_reason"), "stop"));
    cJSON_Delete(k);
    free(body);
    cJSON_Delete(req);
  } else {
    fprintf(stderr, "\n  greedy output too short for the stop test: '%s'\n", t);
  }
  cJSON_Delete(j);
}

static void test_logprobs(void) {
  NEED_SERVER();
  int st = 0;
  cJSON *j = post_json(g_main.port, "/v1/completions",
                       "{\"prompt\":\"xyz\",\"max_tokens\":4,\"ignore_eos\":true,\"logprobs\":3}",
                       &st);
  WT_ASSERT_INT_EQ(st, 200);
  const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
  const cJSON *lp = cJSON_GetObjectItemCaseSensitive(c, "logprobs");
  CU_ASSERT_FATAL(cJSON_IsObject(lp));
  const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
  const cJSON *values = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
  const cJSON *top = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(lp, "text_offset");
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(tokens), 4);
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(values), 4);
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(top), 4);
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(off), 4);
  int prev = -1;
  for (int i = 0; i < 4; i++) {
    CU_ASSERT(cJSON_GetArrayItem(values, i)->valuedouble <= 0);
    /* The top 3 plus the sampled token, keyed by text (tokens with the same text merge). */
    const cJSON *dict = cJSON_GetArrayItem(top, i);
    int sz = cJSON_GetArraySize(dict);
    CU_ASSERT(sz >= 1 && sz <= 4);
    const cJSON *tok = cJSON_GetArrayItem(tokens, i);
    CU_ASSERT(cJSON_IsString(tok) && cJSON_GetObjectItemCaseSensitive(dict, tok->valuestring));
    int o = (int)cJSON_GetArrayItem(off, i)->valuedouble;
    CU_ASSERT(o >= prev);
    prev = o;
  }
  cJSON_Delete(j);
  j = post_json(g_main.port, "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"max_tokens\":3,"
                "\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":2}",
                &st);
  WT_ASSERT_INT_EQ(st, 200);
  c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
  const cJSON *content =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "logprobs"), "content");
  WT_ASSERT_INT_EQ(cJSON_GetArraySize(content), 3);
  for (int i = 0; i < cJSON_GetArraySize(content); i++) {
    const cJSON *e = cJSON_GetArrayItem(content, i);
    CU_ASSERT_PTR_NOT_NULL(jstr(e, "token"));
    CU_ASSERT(jnum(e, "logprob") <= 0);
    CU_ASSERT(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(e, "bytes")));
    WT_ASSERT_INT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "top_logprobs")), 2);
  }
  cJSON_Delete(j);
}

static void test_seed_reproducible(void) {
  NEED_SERVER();
  const char *body = "{\"prompt\":\"seeded\",\"max_tokens\":16,\"ignore_eos\":true,"
                     "\"temperature\":1.0,\"seed\":1234}";
  int st = 0;
  cJSON *a = post_json(g_main.port, "/v1/completions", body, &st);
  WT_ASSERT_INT_EQ(st, 200);
  cJSON *b = post_json(g_main.port, "/v1/completions", body, &st);
  WT_ASSERT_INT_EQ(st, 200);
  const char *ta =
      jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(a, "choices"), 0), "text");
  const char *tb =
      jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(b, "choices"), 0), "text");
  CU_ASSERT(ta && tb && !strcmp(ta, tb));
  cJSON_Delete(a);
  cJSON_Delete(b);
}

/* ---- tests: load ------------------------------------------------------------------------ */

typedef struct stream_job {
  int port, max_tokens;
  int status, completion_tokens, done;
} stream_job;

static void *stream_thread(void *arg) {
  stream_job *sj = arg;
  char *body = wt_strf("{\"prompt\":\"concurrent\",\"max_tokens\":%d,\"ignore_eos\":true,"
                       "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                       sj->max_tokens);
  char **ev = NULL;
  int n = stream_request(sj->port, "/v1/completions", body, &ev, &sj->status);
  if (n >= 2) {
    sj->done = !strcmp(ev[n - 1], "[DONE]");
    cJSON *u = cJSON_Parse(ev[n - 2]);
    sj->completion_tokens =
        (int)jnum(cJSON_GetObjectItemCaseSensitive(u, "usage"), "completion_tokens");
    cJSON_Delete(u);
  }
  if (n > 0) hc_sse_free(ev, n);
  free(body);
  return NULL;
}

static void test_concurrent_streams(void) {
  NEED_SERVER();
  enum { N = 64 };
  pthread_t th[N];
  stream_job jobs[N];
  for (int i = 0; i < N; i++) {
    jobs[i] = (stream_job){.port = g_main.port, .max_tokens = 8 + i % 5};
    pthread_create(&th[i], NULL, stream_thread, &jobs[i]);
  }
  int ok = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    if (jobs[i].status == 200 && jobs[i].done && jobs[i].completion_tokens == jobs[i].max_tokens)
      ok++;
    else
      fprintf(stderr, "\n  stream %d: status %d done %d tokens %d/%d\n", i, jobs[i].status,
              jobs[i].done, jobs[i].completion_tokens, jobs[i].max_tokens);
  }
  WT_ASSERT_INT_EQ(ok, N);
}

static void test_disconnects_free_everything(void) {
  NEED_SERVER();
  enum { N = 100 };
  int fds[N];
  double aborted0 = 0, length0 = 0;
  const int port = g_long.port;
  char *before = hc_get_metrics(port);
  CU_ASSERT_FATAL(before != NULL);
  hc_metric(before, "weir_request_success_total{finished_reason=\"abort\"}", &aborted0);
  hc_metric(before, "weir_request_success_total{finished_reason=\"length\"}", &length0);
  free(before);
  const char *body = "{\"prompt\":\"bye\",\"max_tokens\":2000,\"ignore_eos\":true,"
                     "\"stream\":true}";
  char *req = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
  int started = 0;
  for (int i = 0; i < N; i++) {
    fds[i] = hc_connect(port, 30000);
    if (fds[i] < 0) continue;
    hc_send_all(fds[i], req, strlen(req));
    /* Wait for the headers and the first chunk: the request is really running. Half of the
     * clients then vanish at once; the others after a second chunk. */
    hc_response r;
    int chunked = 0;
    if (hc_read_head(fds[i], &r, &chunked) == 0 && r.status == 200) {
      char *d = NULL;
      if (hc_read_chunk(fds[i], &d) > 0) started++;
      free(d);
    }
    hc_response_free(&r);
    if (i % 2 == 0) {
      close(fds[i]);
      fds[i] = -1;
    }
  }
  for (int i = 0; i < N; i++)
    if (fds[i] >= 0) close(fds[i]);
  free(req);
  WT_ASSERT_INT_EQ(started, N);
  /* Everything is released within a short while. */
  double running = -1, usage = -1, aborted = 0, length = 0;
  for (int tries = 0; tries < 200; tries++) {
    char *page = hc_get_metrics(port);
    CU_ASSERT_FATAL(page != NULL);
    hc_metric(page, "weir_num_requests_running", &running);
    hc_metric(page, "weir_kv_cache_usage_perc", &usage);
    hc_metric(page, "weir_request_success_total{finished_reason=\"abort\"}", &aborted);
    hc_metric(page, "weir_request_success_total{finished_reason=\"length\"}", &length);
    free(page);
    if (running == 0 && usage == 0 && aborted - aborted0 + length - length0 >= N) break;
    usleep(50000);
  }
  WT_ASSERT_INT_EQ((int)running, 0);
  CU_ASSERT_DOUBLE_EQUAL(usage, 0.0, 1e-12);
  /* Every request ended; the half closed right after their first chunk were aborted (the
   * others may have finished before their client left). */
  WT_ASSERT_INT_EQ((int)(aborted - aborted0 + length - length0), N);
  CU_ASSERT(aborted - aborted0 >= N / 2);
  expect_alive(port);
}

static void test_metrics_and_log(void) {
  NEED_SERVER();
  expect_alive(g_main.port);
  char *page = hc_get_metrics(g_main.port);
  CU_ASSERT_FATAL(page != NULL);
  static const char *series[] = {
      "# TYPE weir_time_to_first_token_seconds histogram",
      "# TYPE weir_inter_token_latency_seconds histogram",
      "# TYPE weir_time_per_output_token_seconds histogram",
      "# TYPE weir_e2e_request_latency_seconds histogram",
      "# TYPE weir_event_loop_lag_seconds histogram",
      "# TYPE weir_request_queue_time_seconds histogram",
      "# TYPE weir_request_prefill_time_seconds histogram",
      "# TYPE weir_request_decode_time_seconds histogram",
      "# TYPE weir_prompt_tokens_total counter",
      "# TYPE weir_generation_tokens_total counter",
      "# TYPE weir_request_success_total counter",
      "# TYPE weir_num_preemptions_total counter",
      "# TYPE weir_step_graph_replays_total counter",
      "# TYPE weir_step_graph_padding_total counter",
      "# TYPE weir_prefix_cache_queries_total counter",
      "# TYPE weir_prefix_cache_hits_total counter",
      "# TYPE weir_http_requests_total counter",
      "# TYPE weir_num_requests_running gauge",
      "# TYPE weir_num_requests_waiting gauge",
      "# TYPE weir_kv_cache_usage_perc gauge",
  };
  for (size_t i = 0; i < sizeof series / sizeof series[0]; i++)
    WT_ASSERT_STR_CONTAINS(page, series[i]);
  double v = 0;
  CU_ASSERT(hc_metric(page, "weir_time_to_first_token_seconds_bucket{le=\"0.001\"}", &v) == 0);
  CU_ASSERT(hc_metric(page, "weir_http_requests_total{code=\"200\"}", &v) == 0 && v > 0);
  CU_ASSERT(hc_metric(page, "weir_request_success_total{finished_reason=\"length\"}", &v) == 0);
  /* Every sample of the server and its plugins names the model it serves, first. */
  char *label = wt_strf("{model_name=\"%s\"", g_model_name);
  int samples = 0;
  for (const char *p = page; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
    if (*p == '#' || *p == '\n') continue;
    size_t n = strcspn(p, "{ ");
    samples++;
    if (strncmp(p + n, label, strlen(label)) != 0) {
      fprintf(stderr, "\n  sample without %s: %.*s\n", label, (int)strcspn(p, "\n"), p);
      CU_FAIL("a sample lacks the model_name label");
      break;
    }
  }
  CU_ASSERT(samples > 20);
  free(label);
  /* The process and build families. */
  CU_ASSERT(hc_metric(page, "process_resident_memory_bytes", &v) == 0 && v > 0);
  CU_ASSERT(hc_metric(page, "process_open_fds", &v) == 0 && v > 0);
  CU_ASSERT(hc_metric(page, "weir_build_info", &v) == 0 && v == 1);
  CU_ASSERT(hc_metric(page, "weir_generation_tokens_total", &v) == 0 && v > 0);
  CU_ASSERT(hc_metric(page, "weir_time_to_first_token_seconds_count", &v) == 0 && v > 0);
  CU_ASSERT(hc_metric(page, "weir_prefix_cache_queries_total", &v) == 0 && v > 0);
  free(page);
  /* The per-request JSON log line. */
  char *log = wt_read_file(g_main.log_path, NULL);
  WT_ASSERT_STR_CONTAINS(log, "\"event\":\"request\"");
  WT_ASSERT_STR_CONTAINS(log, "\"ttft_ms\":");
  WT_ASSERT_STR_CONTAINS(log, "\"itl_p95_ms\":");
  free(log);
  /* The disconnect test ran on the long server: its log records the aborted requests. */
  log = wt_read_file(g_long.log_path, NULL);
  WT_ASSERT_STR_CONTAINS(log, "\"client_disconnected\":true");
  WT_ASSERT_STR_CONTAINS(log, "\"finish_reason\":\"abort\"");
  free(log);
}

/* The dashboard and docs/metrics.md stay in step with what /metrics serves: every metric a
 * panel queries exists, and every metric the server exposes is documented. */
static void test_dashboard_and_docs_match_metrics(void) {
  NEED_SERVER();
  expect_alive(g_main.port);
  char *page = hc_get_metrics(g_main.port);
  CU_ASSERT_FATAL(page != NULL);
  char *dash_path = wt_strf("%s/docs/grafana/weir-dashboard.json", WT_SOURCE_DIR);
  char *doc_path = wt_strf("%s/docs/metrics.md", WT_SOURCE_DIR);
  char *dash_text = wt_read_file(dash_path, NULL);
  char *doc = wt_read_file(doc_path, NULL);
  CU_ASSERT_FATAL(dash_text != NULL && doc != NULL);
  cJSON *dash = cJSON_Parse(dash_text);
  CU_ASSERT_FATAL(dash != NULL);
  const cJSON *panels = cJSON_GetObjectItemCaseSensitive(dash, "panels");
  CU_ASSERT(cJSON_GetArraySize(panels) >= 8);
  int exprs = 0;
  const cJSON *panel;
  cJSON_ArrayForEach(panel, panels) {
    const cJSON *target;
    cJSON_ArrayForEach(target, cJSON_GetObjectItemCaseSensitive(panel, "targets")) {
      const char *expr = jstr(target, "expr");
      CU_ASSERT_FATAL(expr != NULL);
      exprs++;
      for (const char *p = strstr(expr, "weir_"); p; p = strstr(p + 1, "weir_")) {
        char name[128];
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_0123456789");
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        static const char *suffixes[] = {"_bucket", "_sum", "_count"};
        for (int k = 0; k < 3; k++) {
          size_t sl = strlen(suffixes[k]), nl = strlen(name);
          if (nl > sl && !strcmp(name + nl - sl, suffixes[k])) name[nl - sl] = '\0';
        }
        char *type = wt_strf("# TYPE %s ", name);
        WT_ASSERT_STR_CONTAINS(page, type);
        free(type);
      }
    }
  }
  CU_ASSERT(exprs >= 10);
  /* Core families only: a plugin's own series (labelled plugin="...") are the plugin's to
   * document. */
  for (const char *p = strstr(page, "# TYPE "); p; p = strstr(p + 1, "# TYPE ")) {
    char name[128];
    size_t n = strcspn(p + 7, " ");
    const char *sample = strchr(p, '\n');
    size_t line = sample ? strcspn(sample + 1, "\n") : 0;
    if (sample && memmem(sample + 1, line, "plugin=\"", 8)) continue;
    snprintf(name, sizeof name, "`%.*s`", (int)n, p + 7);
    WT_ASSERT_STR_CONTAINS(doc, name);
  }
  cJSON_Delete(dash);
  free(dash_text);
  free(doc);
  free(dash_path);
  free(doc_path);
  free(page);
}

/* ---- tests: limits and auth (second server) --------------------------------------------- */

static void test_auth(void) {
  NEED_SERVER();
  hc_response r;
  const char *good = "{\"prompt\":\"a\",\"max_tokens\":1}";
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "POST", "/v1/completions", NULL, good, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 401);
  cJSON *j = cJSON_Parse(r.body);
  CU_ASSERT_STRING_EQUAL(jstr(cJSON_GetObjectItemCaseSensitive(j, "error"), "type"),
                         "authentication_error");
  cJSON_Delete(j);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "POST", "/v1/completions",
                              "Authorization: Bearer wrong\r\n", good, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 401);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "GET", "/v1/models",
                              "Authorization: Bearer " API_KEY "x\r\n", NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 401);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "POST", "/v1/completions",
                              "Authorization: Bearer " API_KEY "\r\n", good, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  /* Probes and scrapes need no key. */
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "GET", "/health", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "GET", "/metrics", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  double n401 = 0;
  CU_ASSERT(hc_metric(r.body, "weir_http_requests_total{code=\"401\"}", &n401) == 0 && n401 > 0);
  hc_response_free(&r);
}

static void test_limits(void) {
  NEED_SERVER();
  const char *auth = "Authorization: Bearer " API_KEY "\r\n";
  hc_response r;
  /* Body over max_body_bytes (4096), announced by Content-Length. */
  char *big = malloc(6000);
  memset(big, ' ', 5999);
  big[0] = '{';
  big[5998] = '}';
  big[5999] = '\0';
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "POST", "/v1/completions", auth, big, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 413);
  WT_ASSERT_STR_CONTAINS(r.body, "\"error\"");
  hc_response_free(&r);
  /* The same, chunked: refused once the chunks pass the limit. */
  int fd = hc_connect(g_limits.port, 10000);
  char *head = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: "
                       "application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                       auth);
  hc_send_all(fd, head, strlen(head));
  free(head);
  for (int i = 0; i < 3; i++) {
    char *chunk = wt_strf("7d0\r\n%.*s\r\n", 2000, big);
    hc_send_all(fd, chunk, strlen(chunk));
    free(chunk);
  }
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 413);
  hc_response_free(&r);
  close(fd);
  free(big);
  /* Headers over max_header_bytes (1024). */
  char pad[2048];
  memset(pad, 'a', sizeof pad - 1);
  pad[sizeof pad - 1] = '\0';
  char *hdr = wt_strf("X-Pad: %s\r\n", pad);
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "GET", "/health", hdr, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 431);
  hc_response_free(&r);
  free(hdr);
  /* A client that never finishes its headers gets 408 after header_timeout_ms (300). */
  fd = hc_connect(g_limits.port, 5000);
  const char *partial = "GET /health HTTP/1.1\r\nHost: x\r\n";
  hc_send_all(fd, partial, strlen(partial));
  WT_ASSERT_INT_EQ(hc_read_response(fd, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 408);
  CU_ASSERT(r.closed);
  hc_response_free(&r);
  close(fd);
  /* max_connections (4): a fifth connection is admitted by closing the one idle the longest
   * (http_hardening's admission test covers the refusal when none is idle). */
  int held[4];
  for (int i = 0; i < 4; i++) {
    held[i] = hc_connect(g_limits.port, 5000);
    /* A request makes sure the server has accepted it before the next one. */
    const char *h = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    hc_send_all(held[i], h, strlen(h));
    hc_read_response(held[i], &r);
    hc_response_free(&r);
  }
  WT_ASSERT_INT_EQ(hc_request(g_limits.port, "GET", "/health", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
  char eof;
  WT_ASSERT_INT_EQ(recv(held[0], &eof, 1, 0), 0);
  for (int i = 0; i < 4; i++) close(held[i]);
  /* Served again once they are gone. */
  int ok = 0;
  for (int tries = 0; tries < 50 && !ok; tries++) {
    if (hc_request(g_limits.port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200)
      ok = 1;
    hc_response_free(&r);
    if (!ok) usleep(20000);
  }
  CU_ASSERT(ok);
}

/* The limits server runs one sequence at a time with one waiting slot: a third concurrent
 * request is refused with 429 while the first two are held. */
static void test_busy_429(void) {
  NEED_SERVER();
  enum { N = 6 };
  int fds[N], got429 = 0, ok = 0;
  const char *body = "{\"prompt\":\"busy\",\"max_tokens\":200,\"ignore_eos\":true,"
                     "\"stream\":true}";
  char *req = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                      API_KEY "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "\r\n%s",
                      strlen(body), body);
  /* All requests go out before any answer is read, so that they arrive together. */
  for (int i = 0; i < N; i++) {
    fds[i] = hc_connect(g_limits.port, 10000);
    hc_send_all(fds[i], req, strlen(req));
  }
  for (int i = 0; i < N; i++) {
    hc_response r;
    int chunked = 0;
    if (hc_read_head(fds[i], &r, &chunked) == 0) {
      if (r.status == 200) ok++;
      if (r.status == 429) {
        got429++;
        hc_response_free(&r);
        /* The body is the error object. */
        close(fds[i]);
        fds[i] = -1;
        continue;
      }
    }
    hc_response_free(&r);
  }
  free(req);
  for (int i = 0; i < N; i++)
    if (fds[i] >= 0) close(fds[i]);
  CU_ASSERT(ok >= 1);
  CU_ASSERT(got429 >= 1);
  if (!got429) fprintf(stderr, "\n  no 429 among %d requests (%d accepted)\n", N, ok);
}

/* ---- tests: drain ----------------------------------------------------------------------- */

static void test_sigterm_drains(void) {
  NEED_SERVER();
  hc_server s = {0};
  /* One sequence at a time: the stream below plus the queued requests keep the server busy
   * (about 4 x 2000 tokens) well past the moment the signal arrives. */
  /* A generous deadline: sanitizer builds generate far slower than release builds. */
  const char *extra[] = {"server.drain_timeout_ms=120000", "scheduler.max_num_seqs=1", NULL};
  if (start_server_model(&s, "drain", g_long_model, extra) != 0) {
    CU_FAIL("drain server did not start");
    return;
  }
  /* A keep-alive connection opened before the signal, to ask /health during the drain. */
  int probe = hc_connect(s.port, 10000);
  const char *body = "{\"prompt\":\"drain\",\"max_tokens\":2000,\"ignore_eos\":true,"
                     "\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
  int fd = hc_connect(s.port, 120000);
  char *req = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
  hc_send_all(fd, req, strlen(req));
  free(req);
  hc_response head;
  int chunked = 0;
  WT_ASSERT_INT_EQ(hc_read_head(fd, &head, &chunked), 0);
  WT_ASSERT_INT_EQ(head.status, 200);
  hc_response_free(&head);
  char *d = NULL;
  CU_ASSERT(hc_read_chunk(fd, &d) > 0);
  free(d);
  enum { QUEUED = 3 };
  int qfd[QUEUED];
  const char *qbody = "{\"prompt\":\"queued\",\"max_tokens\":2000,\"ignore_eos\":true}";
  char *qreq = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                       strlen(qbody), qbody);
  for (int i = 0; i < QUEUED; i++) {
    qfd[i] = hc_connect(s.port, 120000);
    hc_send_all(qfd[i], qreq, strlen(qreq));
  }
  free(qreq);
  /* Make sure they are queued: the waiting gauge shows them before the signal. */
  for (int tries = 0; tries < 200; tries++) {
    char *page = hc_get_metrics(s.port);
    double waiting = 0;
    if (page) hc_metric(page, "weir_num_requests_waiting", &waiting);
    free(page);
    if (waiting >= QUEUED) break;
    usleep(5000);
  }
  kill(s.pid, SIGTERM);
  /* The signal is handled asynchronously: ask until /health stops saying "ok". While the
   * stream runs the server is draining and answers 503 "draining". */
  const char *h = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  int saw_draining = 0;
  for (int tries = 0; tries < 200 && !saw_draining; tries++) {
    hc_response r;
    hc_send_all(probe, h, strlen(h));
    if (hc_read_response(probe, &r) != 0) break; /* closed: the drain is over */
    if (r.status == 503) {
      WT_ASSERT_STR_CONTAINS(r.body, "draining");
      saw_draining = 1;
    } else {
      WT_ASSERT_INT_EQ(r.status, 200);
    }
    int closed = r.closed;
    hc_response_free(&r);
    if (closed) break;
    usleep(10000);
  }
  CU_ASSERT(saw_draining);
  close(probe);
  /* The in-flight stream completes in full. */
  static char all[1 << 21];
  all[0] = '\0';
  size_t len = 0;
  for (;;) {
    long n = hc_read_chunk(fd, &d);
    if (n <= 0) break;
    if (len + (size_t)n < sizeof all) {
      memcpy(all + len, d, (size_t)n);
      len += (size_t)n;
      all[len] = '\0';
    }
    free(d);
  }
  close(fd);
  WT_ASSERT_STR_CONTAINS(all, "data: [DONE]");
  WT_ASSERT_STR_CONTAINS(all, "\"completion_tokens\":2000");
  /* The queued requests were in flight too: they complete in full. */
  for (int i = 0; i < QUEUED; i++) {
    hc_response r;
    int ok = hc_read_response(qfd[i], &r) == 0;
    CU_ASSERT(ok);
    if (ok) {
      WT_ASSERT_INT_EQ(r.status, 200);
      WT_ASSERT_STR_CONTAINS(r.body, "\"completion_tokens\":2000");
      CU_ASSERT(r.closed); /* responses during a drain close their connection */
    }
    hc_response_free(&r);
    close(qfd[i]);
  }
  int code = hc_server_stop(&s, 0, 120000); /* it is already on its way out: just wait */
  WT_ASSERT_INT_EQ(code, 0);
}

/* A drain that runs out of time aborts what is left: the stream ends with finish_reason
 * "abort" and [DONE], queued requests get 503, and the exit status is still 0. */
static void test_drain_timeout_aborts(void) {
  NEED_SERVER();
  hc_server s = {0};
  /* A short deadline: a tiny model writes 2000 tokens in a few hundred ms on a fast core. */
  const char *extra[] = {"server.drain_timeout_ms=10", "scheduler.max_num_seqs=1", NULL};
  if (start_server_model(&s, "drain-timeout", g_long_model, extra) != 0) {
    CU_FAIL("drain-timeout server did not start");
    return;
  }
  enum { QUEUED = 4 };
  int fds[QUEUED + 1];
  for (int i = 0; i <= QUEUED; i++) {
    const char *body = i == 0 ? "{\"prompt\":\"a\",\"max_tokens\":2000,\"ignore_eos\":true,"
                                "\"stream\":true}"
                              : "{\"prompt\":\"b\",\"max_tokens\":2000,\"ignore_eos\":true}";
    char *req = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                        strlen(body), body);
    fds[i] = hc_connect(s.port, 30000);
    hc_send_all(fds[i], req, strlen(req));
    free(req);
  }
  hc_response head;
  int chunked = 0;
  WT_ASSERT_INT_EQ(hc_read_head(fds[0], &head, &chunked), 0);
  hc_response_free(&head);
  kill(s.pid, SIGTERM);
  static char all[1 << 21];
  size_t len = 0;
  all[0] = '\0';
  for (;;) {
    char *d = NULL;
    long n = hc_read_chunk(fds[0], &d);
    if (n <= 0) break;
    if (len + (size_t)n < sizeof all) {
      memcpy(all + len, d, (size_t)n);
      len += (size_t)n;
      all[len] = '\0';
    }
    free(d);
  }
  WT_ASSERT_STR_CONTAINS(all, "\"finish_reason\":\"abort\"");
  WT_ASSERT_STR_CONTAINS(all, "data: [DONE]");
  int aborted = 0;
  for (int i = 1; i <= QUEUED; i++) {
    hc_response r;
    if (hc_read_response(fds[i], &r) == 0 && r.status == 503) {
      WT_ASSERT_STR_CONTAINS(r.body, "shutting down");
      aborted++;
    }
    hc_response_free(&r);
  }
  CU_ASSERT(aborted >= QUEUED - 1); /* at most one may have finished before the deadline */
  for (int i = 0; i <= QUEUED; i++) close(fds[i]);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, 0, 20000), 0);
}

static void test_startup_failure(void) {
  NEED_SERVER();
  char *missing = wt_strf("model.path=%s/does-not-exist.gguf", g_dir);
  char *port = wt_strf("server.port=%d", wt_free_port());
  char *const argv[] = {(char *)WT_WEIR, "serve", "--set", missing, "--set", port, NULL};
  char *out = NULL;
  int rc = wt_run(argv, &out, 20000);
  CU_ASSERT(rc != 0 && rc < 128);
  WT_ASSERT_STR_CONTAINS(out, "does-not-exist.gguf");
  free(out);
  free(missing);
  free(port);
}

/* ---- main ------------------------------------------------------------------------------- */

int main(void) {
  static const wt_test tests[] = {
      {"served_name_aliases", test_served_name_aliases},
      {"stream_unbuffered_header", test_stream_unbuffered_header},
      {"logit_bias", test_logit_bias},
      {"health_version_models", test_health_version_models},
      {"not_found_and_method", test_not_found_and_method},
      {"malformed_http", test_malformed_http},
      {"keepalive_pipelining_chunked", test_keepalive_pipelining_chunked},
      {"mutated_requests", test_mutated_requests},
      {"http10_stream", test_http10_stream},
      {"content_type_and_json", test_content_type_and_json},
      {"parameter_validation", test_parameter_validation},
      {"unsupported_parameters", test_unsupported_parameters},
      {"model_and_context_errors", test_model_and_context_errors},
      {"tokenize_detokenize", test_tokenize_detokenize},
      {"completion_shape", test_completion_shape},
      {"completion_stream_matches", test_completion_stream_matches},
      {"chat_shapes", test_chat_shapes},
      {"multi_prompt_and_n", test_multi_prompt_and_n},
      {"echo_and_stop", test_echo_and_stop},
      {"logprobs", test_logprobs},
      {"seed_reproducible", test_seed_reproducible},
      {"concurrent_streams", test_concurrent_streams},
      {"disconnects_free_everything", test_disconnects_free_everything},
      {"metrics_and_log", test_metrics_and_log},
      {"dashboard_and_docs_match_metrics", test_dashboard_and_docs_match_metrics},
      {"auth", test_auth},
      {"limits", test_limits},
      {"busy_429", test_busy_429},
      {"sigterm_drains", test_sigterm_drains},
      {"drain_timeout_aborts", test_drain_timeout_aborts},
      {"startup_failure", test_startup_failure},
      {NULL, NULL},
  };
  signal(SIGPIPE, SIG_IGN);
  g_dir = wt_mkdtemp();
  if (make_model() != 0) {
    fprintf(stderr, "SKIP: `weir mkmodel --preset tiny` is not available; HTTP integration "
                    "tests need it\n");
  } else {
    const char *limits[] = {"server.api_key=" API_KEY, "server.max_body_bytes=4096",
                            "server.max_header_bytes=1024", "server.max_connections=4",
                            "server.header_timeout_ms=300", "scheduler.max_num_seqs=1",
                            "scheduler.max_waiting=1", NULL};
    g_ready = start_server(&g_main, "main", NULL) == 0 &&
              start_server(&g_limits, "limits", limits) == 0 &&
              start_server_model(&g_long, "long", g_long_model, NULL) == 0;
    if (g_ready) {
      hc_response r;
      if (hc_request(g_main.port, "GET", "/v1/models", NULL, NULL, &r) == 0) {
        cJSON *j = cJSON_Parse(r.body);
        const char *id = jstr(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0),
                              "id");
        snprintf(g_model_name, sizeof g_model_name, "%s", id ? id : "");
        cJSON_Delete(j);
      }
      hc_response_free(&r);
    }
  }
  int rc = wt_run_suite("http", tests);
  int main_code = hc_server_stop(&g_main, SIGTERM, 20000);
  int limits_code = hc_server_stop(&g_limits, SIGTERM, 20000);
  int long_code = hc_server_stop(&g_long, SIGTERM, 20000);
  if (g_ready && (main_code != 0 || limits_code != 0 || long_code != 0)) {
    fprintf(stderr, "servers exited with %d, %d and %d\n", main_code, limits_code, long_code);
    rc = 1;
  }
  wt_rmtree(g_dir);
  free(g_dir);
  free(g_model);
  free(g_long_model);
  return rc;
}
