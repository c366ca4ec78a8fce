/* No request delays another (issue 28), against the real `weir serve`: bodies that are slow
 * to parse, template and tokenize run off the event loop, so /health and new connections
 * answer while they are prepared; expensive constraint compiles of some clients do not hold
 * back a cheap one of another; shutdown is bounded by the drain deadline and a second
 * signal even with clients that never read; the answers and edges the issue names (n beyond
 * scheduler.max_waiting, ignore_eos under a constraint, whole header lines, chunk
 * extensions, two Authorization headers, 401 before 404/405). Clients come from different
 * loopback addresses (127.0.0.X) where fairness between clients is what is tested. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "hclient.h"
#include "testutil.h"

static char *g_dir;
static char *g_model, *g_long_model;
static hc_server g_main;
static int g_ready;

/* Sanitizer builds run several times slower: time bounds widen with them. */
#if defined(__SANITIZE_ADDRESS__)
#define SLOW 4
#else
#define SLOW 1
#endif

#define NEED_SERVER()                                                                       \
  do {                                                                                      \
    if (hc_skip_without_server(g_ready)) return;                                            \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A connection to 127.0.0.1:port from the loopback address 127.0.0.`host` (one client per
 * address, as the server's fairness sees them). -1 on failure. */
static int connect_from(int port, int host, int timeout_ms) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in src = {.sin_family = AF_INET};
  src.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)host);
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  dst.sin_addr.s_addr = htonl(0x7f000001u);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
      connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* POSTs a JSON body from 127.0.0.`host`; the status (0 when none came). */
static int post_from(int port, int host, const char *path, const char *body, hc_response *out) {
  memset(out, 0, sizeof *out);
  int fd = connect_from(port, host, 120000);
  if (fd < 0) return 0;
  char *head = wt_strf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: %zu\r\n\r\n", path, strlen(body));
  int st = 0;
  if (hc_send_all(fd, head, strlen(head)) == 0 && hc_send_all(fd, body, strlen(body)) == 0 &&
      hc_read_response(fd, out) == 0)
    st = out->status;
  free(head);
  close(fd);
  return st;
}

/* GET /health on a fresh connection: its latency in ms (the connect included), or -1. */
static double health_ms(int port) {
  double t0 = now_ms();
  hc_response r;
  if (hc_request(port, "GET", "/health", NULL, NULL, &r) != 0 || r.status != 200) {
    hc_response_free(&r);
    return -1;
  }
  hc_response_free(&r);
  return now_ms() - t0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- hostile clients, on threads ---------------------------------------------------------- */

typedef struct hostile {
  int port, host, rounds;
  const char *path;
  char *body;       /* owned */
  int statuses[8];
  double ms[8];
} hostile;

static void *hostile_run(void *arg) {
  hostile *h = arg;
  for (int i = 0; i < h->rounds && i < 8; i++) {
    hc_response r;
    double t0 = now_ms();
    h->statuses[i] = post_from(h->port, h->host, h->path, h->body, &r);
    h->ms[i] = now_ms() - t0;
    hc_response_free(&r);
  }
  return NULL;
}

/* Threads of the server named `name` now (/proc). */
static int count_threads(pid_t pid, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char buf[64] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    n += strcmp(buf, name) == 0;
  }
  closedir(d);
  return n;
}

/* The heavy pools' thread count the server picks: half the CPUs it may run on (it inherits
 * this process's affinity), from 1 to 8. */
static int expected_heavy_threads(void) {
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 2;
  n /= 2;
  return n < 1 ? 1 : n > 8 ? 8 : n;
}

/* 8 clients post 0.9 MB chat bodies (each refused in the end: far past the context) while
 * /health is asked 40 times: before issue 28 its median was 1.1-1.6 s, since the template
 * and the tokenizer ran on the loop. */
static void test_health_under_big_bodies(void) {
  NEED_SERVER();
  enum { CLIENTS = 8 };
  size_t n = 900000;
  char *text = malloc(n + 1);
  for (size_t i = 0; i < n; i++) text[i] = "lorem ipsum dolor sit amet "[i % 27];
  text[n] = '\0';
  hostile h[CLIENTS];
  pthread_t t[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    h[i] = (hostile){.port = g_main.port, .host = 10 + i, .rounds = 2,
                     .path = "/v1/chat/completions"};
    h[i].body = wt_strf("{\"messages\":[{\"role\":\"user\",\"content\":\"%d %s\"}],"
                        "\"max_tokens\":2}", i, text);
    pthread_create(&t[i], NULL, hostile_run, &h[i]);
  }
  free(text);
  usleep(300 * 1000); /* the bodies are in and being prepared */
  double lat[40];
  int got = 0;
  int heavy_max = 0; /* the heavy preparation threads seen at once */
  for (int i = 0; i < 40; i++) {
    double ms = health_ms(g_main.port);
    CU_ASSERT(ms >= 0);
    if (ms >= 0) lat[got++] = ms;
    int k = count_threads(g_main.pid, "weir-prep-big");
    if (k > heavy_max) heavy_max = k;
    usleep(20 * 1000);
  }
  for (int i = 0; i < CLIENTS; i++) pthread_join(t[i], NULL);
  /* 8 clients' bodies at once, but no more heavy threads than the machine's idle gaps can
   * use: SCHED_IDLE threads beyond them cost the engine preemptions and cache (issue 28) */
  printf("\n  weir-prep-big threads at once: %d (at most %d)\n", heavy_max,
         expected_heavy_threads());
  CU_ASSERT(heavy_max >= 1);
  CU_ASSERT(heavy_max <= expected_heavy_threads());
  qsort(lat, (size_t)got, sizeof *lat, cmp_d);
  double p50 = got ? lat[got / 2] : -1, worst = got ? lat[got - 1] : -1;
  printf("\n  /health under 8 x 0.9 MB bodies: p50 %.1f ms, max %.1f ms\n", p50, worst);
  /* Generous for a shared 2-core machine; the loop-bound code took seconds. */
  CU_ASSERT(got == 40);
  CU_ASSERT(p50 < 50.0 * SLOW);
  CU_ASSERT(worst < 400.0 * SLOW);
  for (int i = 0; i < CLIENTS; i++) {
    for (int k = 0; k < h[i].rounds; k++) {
      /* every body got its answer: the context-length 400 */
      if (h[i].statuses[k] != 400) fprintf(stderr, "  client %d: %d\n", i, h[i].statuses[k]);
      CU_ASSERT(h[i].statuses[k] == 400);
    }
    free(h[i].body);
  }
  WT_ASSERT_INT_EQ(hc_alive_status(g_main.port), 200);
}

/* 6 clients compile ~1 MB constraints (70,000 choices, ~2 s each here) while a seventh asks
 * for a 3-way guided_choice: it must not wait for theirs (issue 28 measured 20.6 s). */
static void test_cheap_constraint_not_behind_expensive(void) {
  NEED_SERVER();
  enum { CLIENTS = 6, CHOICES = 60000 };
  hostile h[CLIENTS];
  pthread_t t[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    size_t cap = (size_t)CHOICES * 16 + 128, o = 0;
    char *b = malloc(cap);
    o += (size_t)snprintf(b + o, cap - o, "{\"prompt\":\"a\",\"max_tokens\":1,\"guided_choice\":[");
    for (int k = 0; k < CHOICES; k++)
      o += (size_t)snprintf(b + o, cap - o, "%s\"c%dx%d\"", k ? "," : "", i, k);
    snprintf(b + o, cap - o, "]}");
    h[i] = (hostile){.port = g_main.port, .host = 30 + i, .rounds = 2,
                     .path = "/v1/completions", .body = b};
    pthread_create(&t[i], NULL, hostile_run, &h[i]);
  }
  usleep(500 * 1000); /* theirs are compiling */
  hc_response r;
  double t0 = now_ms();
  int st = post_from(g_main.port, 29, "/v1/completions",
                     "{\"prompt\":\"a\",\"max_tokens\":1,"
                     "\"guided_choice\":[\"yes\",\"no\",\"maybe-cheap\"]}", &r);
  double cheap = now_ms() - t0;
  WT_ASSERT_INT_EQ(st, 200);
  hc_response_free(&r);
  for (int i = 0; i < CLIENTS; i++) pthread_join(t[i], NULL);
  double slowest = 0;
  for (int i = 0; i < CLIENTS; i++) {
    for (int k = 0; k < 2; k++) {
      CU_ASSERT(h[i].statuses[k] == 200);
      if (h[i].ms[k] > slowest) slowest = h[i].ms[k];
    }
    free(h[i].body);
  }
  printf("\n  cheap guided_choice beside 6 expensive compiles: %.0f ms (slowest expensive "
         "%.0f ms)\n", cheap, slowest);
  /* It ran beside them, not after them: well under one expensive round. */
  CU_ASSERT(cheap < 1500.0 * SLOW);
  CU_ASSERT(cheap < slowest);
}

/* ---- shutdown on time --------------------------------------------------------------------- */

/* A stream whose client never reads, on a server with drain_timeout_ms=2000: SIGTERM must
 * end the process within the deadline plus the 1 s grace (the stall timeout, 30 s, held it
 * before). The stream is long (16,000 tokens with logprobs, megabytes of SSE) so that it is
 * still running, paused by flow control, whatever the speed of decode: a short one can end
 * before the signal with all its output in the kernel's socket buffers. */
static int start_stream_never_read(int port) {
  int fd = hc_connect_rcvbuf(port, 30000, 4096);
  if (fd < 0) return -1;
  const char *body = "{\"prompt\":\"a\",\"max_tokens\":16000,\"ignore_eos\":true,\"stream\":true,"
                     "\"logprobs\":5}";
  char *req = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
  hc_send_all(fd, req, strlen(req));
  free(req);
  return fd;
}

static void test_shutdown_drain_deadline(void) {
  NEED_SERVER();
  hc_server s;
  const char *extra[] = {"server.drain_timeout_ms=2000", "server.stall_timeout_ms=30000",
                         "server.max_pending_output_bytes=65536", NULL};
  if (hc_start_test_server(&s, g_dir, "drain-deadline", g_long_model, extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  int fds[3];
  for (int i = 0; i < 3; i++) fds[i] = start_stream_never_read(s.port);
  usleep(1500 * 1000); /* their output backs up */
  double t0 = now_ms();
  int code = hc_server_stop(&s, SIGTERM, 20000);
  double took = now_ms() - t0;
  printf("\n  exit with 3 non-reading streams, drain_timeout_ms=2000: %.0f ms\n", took);
  WT_ASSERT_INT_EQ(code, 0);
  CU_ASSERT(took < 2000 + 1000 + 1500.0 * SLOW);
  for (int i = 0; i < 3; i++) close(fds[i]);
}

static void test_shutdown_second_signal(void) {
  NEED_SERVER();
  hc_server s;
  const char *extra[] = {"server.drain_timeout_ms=60000", "server.stall_timeout_ms=30000",
                         "server.max_pending_output_bytes=65536", NULL};
  if (hc_start_test_server(&s, g_dir, "second-signal", g_long_model, extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  int fds[2];
  for (int i = 0; i < 2; i++) fds[i] = start_stream_never_read(s.port);
  usleep(1000 * 1000);
  kill(s.pid, SIGTERM);
  usleep(300 * 1000);
  /* still draining (the deadline is a minute away) */
  int status;
  CU_ASSERT(waitpid(s.pid, &status, WNOHANG) == 0);
  double t0 = now_ms();
  int code = hc_server_stop(&s, SIGTERM, 20000);
  double took = now_ms() - t0;
  printf("\n  exit after a second SIGTERM: %.0f ms\n", took);
  WT_ASSERT_INT_EQ(code, 0);
  CU_ASSERT(took < 1000.0 * SLOW);
  for (int i = 0; i < 2; i++) close(fds[i]);
}

/* ---- answers ------------------------------------------------------------------------------ */

static void test_n_beyond_max_waiting(void) {
  NEED_SERVER();
  hc_server s;
  const char *extra[] = {"scheduler.max_waiting=2", NULL};
  if (hc_start_test_server(&s, g_dir, "max-waiting", g_model, extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  hc_response r;
  /* can never fit: 400, every time, on an idle server */
  for (int i = 0; i < 2; i++) {
    WT_ASSERT_INT_EQ(post_from(s.port, 1, "/v1/completions",
                               "{\"prompt\":\"a\",\"max_tokens\":1,\"n\":3}", &r), 400);
    WT_ASSERT_STR_CONTAINS(r.body, "max_waiting");
    WT_ASSERT_STR_CONTAINS(r.body, "\"param\":\"n\"");
    hc_response_free(&r);
  }
  WT_ASSERT_INT_EQ(post_from(s.port, 1, "/v1/completions",
                             "{\"prompt\":[\"a\",\"b\"],\"max_tokens\":1,\"n\":2}", &r), 400);
  hc_response_free(&r);
  /* fits: 200 */
  WT_ASSERT_INT_EQ(post_from(s.port, 1, "/v1/completions",
                             "{\"prompt\":\"a\",\"max_tokens\":1,\"n\":2}", &r), 200);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* ignore_eos under a constraint that can always continue: the end token is never sampled, so
 * the output runs to max_tokens even where the end token is pushed hard (logit_bias +100 on
 * every end token the tiny model has). Without ignore_eos the same request ends at once. */
static void test_ignore_eos_with_constraint(void) {
  NEED_SERVER();
  hc_response r;
  /* the tiny model's end token ids */
  WT_ASSERT_INT_EQ(post_from(g_main.port, 1, "/tokenize",
                             "{\"prompt\":\"</s><|im_end|>\",\"add_special_tokens\":true}", &r),
                   200);
  cJSON *j = cJSON_Parse(r.body);
  hc_response_free(&r);
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
  char bias[256] = "";
  size_t o = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, toks) o += (size_t)snprintf(bias + o, sizeof bias - o, "%s\"%d\":100",
                                                     o ? "," : "", x->valueint);
  cJSON_Delete(j);
  for (int ignore = 0; ignore < 2; ignore++) {
    char *body = wt_strf("{\"prompt\":\"a\",\"max_tokens\":24,\"temperature\":0,"
                         "\"guided_regex\":\"[a-z]+\",\"logit_bias\":{%s},\"ignore_eos\":%s}",
                         bias, ignore ? "true" : "false");
    WT_ASSERT_INT_EQ(post_from(g_main.port, 1, "/v1/completions", body, &r), 200);
    free(body);
    cJSON *k = cJSON_Parse(r.body);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(k, "usage");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(k, "choices"), 0);
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
    if (ignore) {
      CU_ASSERT(cJSON_IsNumber(ct) && ct->valueint == 24);
      CU_ASSERT(cJSON_IsString(fr) && !strcmp(fr->valuestring, "length"));
    } else {
      CU_ASSERT(cJSON_IsNumber(ct) && ct->valueint < 24);
      CU_ASSERT(cJSON_IsString(fr) && !strcmp(fr->valuestring, "stop"));
    }
    cJSON_Delete(k);
    hc_response_free(&r);
  }
}

/* ---- edges -------------------------------------------------------------------------------- */

static int raw_status(int port, const char *raw, size_t len, hc_response *out) {
  memset(out, 0, sizeof *out);
  int fd = hc_connect(port, 10000);
  if (fd < 0) return 0;
  hc_send_all(fd, raw, len);
  int st = hc_read_response(fd, out) == 0 ? out->status : 0;
  close(fd);
  return st;
}

static void test_header_lines_counted_whole(void) {
  NEED_SERVER();
  /* 64 KB of "A:" lines: 2 bytes of name and value each, 4 of line; the default limit is
   * 16 KiB of header section. */
  size_t cap = 70000, o = 0;
  char *raw = malloc(cap);
  o += (size_t)snprintf(raw + o, cap - o, "GET /health HTTP/1.1\r\nHost: x\r\n");
  while (o < 65536) o += (size_t)snprintf(raw + o, cap - o, "A:\r\n");
  o += (size_t)snprintf(raw + o, cap - o, "\r\n");
  hc_response r;
  WT_ASSERT_INT_EQ(raw_status(g_main.port, raw, o, &r), 431);
  hc_response_free(&r);
  /* whitespace no callback reports counts too */
  o = (size_t)snprintf(raw, cap, "GET /health HTTP/1.1\r\nHost: x\r\nA:");
  memset(raw + o, ' ', 40000);
  o += 40000;
  o += (size_t)snprintf(raw + o, cap - o, "v\r\n\r\n");
  WT_ASSERT_INT_EQ(raw_status(g_main.port, raw, o, &r), 431);
  hc_response_free(&r);
  /* 2,000 such lines (8 KB in all) fit the limit and pass */
  o = (size_t)snprintf(raw, cap, "GET /health HTTP/1.1\r\nHost: x\r\n");
  for (int i = 0; i < 2000; i++) o += (size_t)snprintf(raw + o, cap - o, "A:\r\n");
  o += (size_t)snprintf(raw + o, cap - o, "\r\n");
  WT_ASSERT_INT_EQ(raw_status(g_main.port, raw, o, &r), 200);
  hc_response_free(&r);
  free(raw);
}

static void test_chunk_extensions_limited(void) {
  NEED_SERVER();
  size_t cap = 100000, o = 0;
  char *raw = malloc(cap);
  o += (size_t)snprintf(raw + o, cap - o,
                        "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n");
  /* 20 chunks of one byte, each with a 1 KB extension: 20 KB > 16 KiB */
  const char *body = "{\"prompt\":\"abcdefghi\"}";
  for (size_t i = 0; i < strlen(body); i++) {
    o += (size_t)snprintf(raw + o, cap - o, "1;ext=");
    memset(raw + o, 'x', 1024);
    o += 1024;
    o += (size_t)snprintf(raw + o, cap - o, "\r\n%c\r\n", body[i]);
  }
  o += (size_t)snprintf(raw + o, cap - o, "0\r\n\r\n");
  hc_response r;
  WT_ASSERT_INT_EQ(raw_status(g_main.port, raw, o, &r), 400);
  WT_ASSERT_STR_CONTAINS(r.body, "chunk extensions");
  hc_response_free(&r);
  /* small extensions are fine */
  o = (size_t)snprintf(raw, cap,
                       "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n%zx;a=b\r\n%s\r\n0\r\n\r\n",
                       strlen(body), body);
  WT_ASSERT_INT_EQ(raw_status(g_main.port, raw, o, &r), 200);
  hc_response_free(&r);
  free(raw);
}

static void test_auth_edges(void) {
  NEED_SERVER();
  hc_server s;
  const char *extra[] = {"server.api_key=sekrit", NULL};
  if (hc_start_test_server(&s, g_dir, "auth", g_model, extra) != 0) {
    CU_FAIL("server did not start");
    return;
  }
  hc_response r;
  /* two Authorization headers, even both right: 400 */
  static const char two[] = "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit"
                            "\r\nAuthorization: Bearer sekrit\r\n\r\n";
  WT_ASSERT_INT_EQ(raw_status(s.port, two, sizeof two - 1, &r), 400);
  WT_ASSERT_STR_CONTAINS(r.body, "Authorization");
  hc_response_free(&r);
  static const char one[] = "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit"
                            "\r\n\r\n";
  WT_ASSERT_INT_EQ(raw_status(s.port, one, sizeof one - 1, &r), 200);
  hc_response_free(&r);
  /* unauthenticated: 401 before 404 and 405 */
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/no/such/path", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 401);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/completions", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 401);
  hc_response_free(&r);
  /* authenticated: the 404 and the 405 */
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/no/such/path", "Authorization: Bearer sekrit\r\n",
                              NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 404);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_request(s.port, "GET", "/v1/completions",
                              "Authorization: Bearer sekrit\r\n", NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 405);
  hc_response_free(&r);
  /* the open routes need no key: a wrong method there is still 405 */
  WT_ASSERT_INT_EQ(hc_request(s.port, "POST", "/health", NULL, "{}", &r), 0);
  WT_ASSERT_INT_EQ(r.status, 405);
  hc_response_free(&r);
  WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
}

/* Invalid UTF-8 in a request body is replaced by U+FFFD and served (docs/reliability.md). */
static void test_invalid_utf8_repaired(void) {
  NEED_SERVER();
  static const char body[] = "{\"prompt\":\"a\xff\xfe" "b\"}";
  hc_response a, b;
  WT_ASSERT_INT_EQ(post_from(g_main.port, 1, "/tokenize", body, &a), 200);
  WT_ASSERT_INT_EQ(post_from(g_main.port, 1, "/tokenize",
                             "{\"prompt\":\"a\xef\xbf\xbd\xef\xbf\xbd" "b\"}", &b), 200);
  /* the same tokens as the text with the replacement characters written out */
  CU_ASSERT(a.body && b.body && !strcmp(a.body, b.body));
  hc_response_free(&a);
  hc_response_free(&b);
}


/* ---- a model's chat template, hostile ---------------------------------------------------- */

/* Copies the model at src to dst with its chat template (the tiny preset's ChatML Jinja text)
 * replaced by `tpl`, padded with a Jinja comment to the same length: GGUF strings carry
 * their length, so the file stays valid. 0 on success. */
static int patch_template(const char *src, const char *dst, const char *tpl) {
  size_t n = 0;
  char *buf = wt_read_file(src, &n);
  static const char head[] = "{%- for message in messages -%}";
  char *at = buf ? memmem(buf, n, head, sizeof head - 1) : NULL;
  if (!at || at - buf < 8) {
    free(buf);
    return -1;
  }
  uint64_t len;
  memcpy(&len, at - 8, 8); /* little-endian length before the string */
  size_t tl = strlen(tpl);
  if (len < tl + 5 || (size_t)(at - buf) + len > n) {
    free(buf);
    return -1;
  }
  memcpy(at, tpl, tl);
  memcpy(at + tl, "{#", 2);
  memset(at + tl + 2, ' ', len - tl - 4);
  memcpy(at + len - 2, "#}", 2);
  FILE *f = fopen(dst, "wb");
  int rc = f && fwrite(buf, 1, n, f) == n ? 0 : -1;
  if (f) fclose(f);
  free(buf);
  return rc;
}

/* `{{ '%.999999999f' % 1.0 }}` in a model's own template took 14-18 s and 4.9 GB per chat
 * request; now the render refuses it at once with a 400 naming the precision, and the
 * INT64_MIN slice step renders (Jinja2 gives 'c'). */
static void test_hostile_template_in_model(void) {
  NEED_SERVER();
  static const char *const tpls[] = {
      "{{ '%.999999999f' % 1.0 }}", "{{ '%999999999d' % 1 }}", "{{ '%.999999999e' % 1.0 }}",
      "{{ messages[0].content[::-9223372036854775807 - 1] }}"};
  for (size_t i = 0; i < sizeof tpls / sizeof tpls[0]; i++) {
    char *path = wt_strf("%s/tpl%zu.gguf", g_dir, i);
    WT_ASSERT_INT_EQ(patch_template(g_model, path, tpls[i]), 0);
    hc_server s;
    char *name = wt_strf("tpl%zu", i);
    if (hc_start_test_server(&s, g_dir, name, path, NULL) != 0) {
      CU_FAIL("server with the patched template did not start");
      free(name);
      free(path);
      continue;
    }
    hc_response r;
    double t0 = now_ms();
    int st = post_from(s.port, 1, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"abc\"}],\"max_tokens\":1}",
                       &r);
    double took = now_ms() - t0;
    if (i < 3) {
      WT_ASSERT_INT_EQ(st, 400);
      CU_ASSERT(strstr(r.body ? r.body : "", i == 1 ? "width" : "precision") != NULL);
      CU_ASSERT(took < 2000.0 * SLOW);
    } else {
      WT_ASSERT_INT_EQ(st, 200);
    }
    hc_response_free(&r);
    WT_ASSERT_INT_EQ(hc_alive_status(s.port), 200);
    WT_ASSERT_INT_EQ(hc_server_stop(&s, SIGTERM, 20000), 0);
    free(name);
    free(path);
  }
}

/* The policy (0 SCHED_OTHER, 5 SCHED_IDLE) and nice value of the server's threads named
 * `name`, from /proc; -1 when there is none. */
static int thread_policy(pid_t pid, const char *name, int *nice) {
  char path[512];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int policy = -1;
  struct dirent *e;
  while ((e = readdir(d)) && policy < 0) {
    if (e->d_name[0] == '.') continue;
    char buf[512] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (!fgets(buf, sizeof buf, f)) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    if (strcmp(buf, name)) continue;
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (fgets(buf, sizeof buf, f)) {
      /* after the ")" that ends comm: field 3 on; nice is field 19, policy field 41 */
      const char *q = strrchr(buf, ')');
      int field = 2;
      long v[64] = {0};
      for (q = q ? q + 1 : buf; *q && field < 63;) {
        while (*q == ' ') q++;
        if (!*q) break;
        v[++field] = strtol(q, NULL, 10);
        while (*q && *q != ' ') q++;
      }
      if (field >= 41) {
        policy = (int)v[41];
        *nice = (int)v[19];
      }
    }
    fclose(f);
  }
  closedir(d);
  return policy;
}

/* weir_event_loop_lag_seconds ticks every 10 ms; light work runs on normal-priority
 * threads, a body of 64 KiB or more on SCHED_IDLE ones (issue 28). */
static void test_loop_lag_and_priorities(void) {
  NEED_SERVER();
  char *page = hc_get_metrics(g_main.port);
  CU_ASSERT_FATAL(page != NULL);
  double c0 = -1, inf = -1;
  CU_ASSERT(hc_metric(page, "weir_event_loop_lag_seconds_count", &c0) == 0);
  free(page);
  usleep(600 * 1000);
  page = hc_get_metrics(g_main.port);
  CU_ASSERT_FATAL(page != NULL);
  double c1 = -1;
  CU_ASSERT(hc_metric(page, "weir_event_loop_lag_seconds_count", &c1) == 0);
  CU_ASSERT(hc_metric(page, "weir_event_loop_lag_seconds_bucket{le=\"+Inf\"}", &inf) == 0);
  free(page);
  printf("\n  loop-lag ticks in 600 ms: %.0f\n", c1 - c0);
  CU_ASSERT(c1 - c0 >= 10.0 / SLOW); /* 60 when the loop keeps time */
  CU_ASSERT(inf == c1);
  /* a light request, then a heavy one (refused: past the context), each from its own
   * address; their pool threads stay for seconds after */
  hc_response r;
  WT_ASSERT_INT_EQ(post_from(g_main.port, 40, "/v1/completions",
                             "{\"prompt\":\"a\",\"max_tokens\":1}", &r), 200);
  hc_response_free(&r);
  size_t n = 100000;
  char *text = malloc(n + 1);
  for (size_t i = 0; i < n; i++) text[i] = "lorem ipsum "[i % 12];
  text[n] = '\0';
  char *body = wt_strf("{\"prompt\":\"%s\",\"max_tokens\":1}", text);
  WT_ASSERT_INT_EQ(post_from(g_main.port, 41, "/v1/completions", body, &r), 400);
  hc_response_free(&r);
  free(body);
  free(text);
  int nice_light = -100, nice_heavy = -100;
  WT_ASSERT_INT_EQ(thread_policy(g_main.pid, "weir-prep", &nice_light), 0);   /* SCHED_OTHER */
  WT_ASSERT_INT_EQ(thread_policy(g_main.pid, "weir-prep-big", &nice_heavy), 5); /* SCHED_IDLE */
  int nice_loop = -100;
  char comm[64];
  snprintf(comm, sizeof comm, "/proc/%d/comm", (int)g_main.pid);
  FILE *f = fopen(comm, "r");
  CU_ASSERT_FATAL(f != NULL);
  CU_ASSERT(fgets(comm, sizeof comm, f) != NULL);
  fclose(f);
  comm[strcspn(comm, "\n")] = '\0';
  WT_ASSERT_INT_EQ(thread_policy(g_main.pid, comm, &nice_loop), 0);
  WT_ASSERT_INT_EQ(nice_light, nice_loop); /* light preparation at the loop's priority */
  WT_ASSERT_INT_EQ(hc_alive_status(g_main.port), 200);
}

int main(void) {
  static const wt_test tests[] = {
      {"health_under_big_bodies", test_health_under_big_bodies},
      {"cheap_constraint_not_behind_expensive", test_cheap_constraint_not_behind_expensive},
      {"shutdown_drain_deadline", test_shutdown_drain_deadline},
      {"shutdown_second_signal", test_shutdown_second_signal},
      {"n_beyond_max_waiting", test_n_beyond_max_waiting},
      {"ignore_eos_with_constraint", test_ignore_eos_with_constraint},
      {"header_lines_counted_whole", test_header_lines_counted_whole},
      {"chunk_extensions_limited", test_chunk_extensions_limited},
      {"auth_edges", test_auth_edges},
      {"invalid_utf8_repaired", test_invalid_utf8_repaired},
      {"hostile_template_in_model", test_hostile_template_in_model},
      {"loop_lag_and_priorities", test_loop_lag_and_priorities},
      {NULL, NULL},
  };
  signal(SIGPIPE, SIG_IGN);
  g_dir = wt_mkdtemp();
  g_model = wt_strf("%s/tiny.gguf", g_dir);
  g_long_model = wt_strf("%s/long.gguf", g_dir);
  if (hc_mkmodel(g_model, 256) != 0 || hc_mkmodel(g_long_model, 16384) != 0) {
    fprintf(stderr, "SKIP: `weir mkmodel` is not available\n");
  } else {
    g_ready = hc_start_test_server(&g_main, g_dir, "main", g_model, NULL) == 0;
  }
  int rc = wt_run_suite("http_isolation", tests);
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
