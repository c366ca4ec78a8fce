/* A small OpenAI-shaped streaming server for testing `weir bench`: it streams tokens at a
 * known cadence (first token ttft-ms after the request arrived, then one every gap-ms, on an
 * absolute schedule) so the bench's measurements can be checked against known values, and
 * it misbehaves on demand (HTTP 500, malformed SSE, truncated streams, resets, error events,
 * stalls) so error counting can be checked per kind.
 *
 * One thread per connection, blocking sockets, "Connection: close". Not part of weir.
 *
 * usage: weir_bench_test_server --port-file F [--port P] [--ttft-ms 50] [--gap-ms 20]
 *          [--tokens N]
 *          [--fault none|500|malformed|truncated|reset|error-event|stall|garbage|badchunk]
 *          [--fault-every K] [--no-usage] [--identity] [--log FILE] [--tokens-per-word R]
 *          [--keep-alive-drop]
 * --keep-alive-drop: a streamed answer says "Connection: keep-alive", and the server then
 * reads the next request on that connection and closes it unanswered (the race of a server
 * closing an idle connection just as the client reuses it);
 * --tokens overrides max_tokens; --fault-every K makes every K-th stream request faulty
 * (default 1: all); --identity delimits the body by closing instead of chunked encoding;
 * --log appends every POST body as one line; --tokens-per-word R makes its "tokenizer" count
 * round(R x words) tokens, answers POST /tokenize with that count (without the flag /tokenize
 * is 404) and reports it as usage.prompt_tokens. SIGTERM ends it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double g_tokens_per_word = 0;
static int g_ttft_ms = 50, g_gap_ms = 20, g_tokens = 0, g_fault_every = 1, g_usage = 1;
static int g_chunked = 1;
static const char *g_fault = "none";
static int g_ka_drop;
static FILE *g_log;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_stream_count;

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* One piece of the body, framed as a chunk unless --identity. */
static int send_body(int fd, const char *p, size_t n) {
  if (!g_chunked) return send_all(fd, p, n);
  char hdr[32];
  int h = snprintf(hdr, sizeof hdr, "%zx\r\n", n);
  if (send_all(fd, hdr, (size_t)h) || send_all(fd, p, n) || send_all(fd, "\r\n", 2)) return -1;
  return 0;
}

static int send_event(int fd, const char *data) {
  char *s = NULL;
  int n = asprintf(&s, "data: %s\n\n", data);
  if (n < 0) return -1;
  int rc = send_body(fd, s, (size_t)n);
  free(s);
  return rc;
}

static void simple(int fd, int status, const char *reason, const char *ctype, const char *body) {
  char *s = NULL;
  int n = asprintf(&s, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                   status, reason, ctype, strlen(body), body);
  if (n > 0) send_all(fd, s, (size_t)n);
  free(s);
}

static void sleep_until(const struct timespec *t0, long ms) {
  struct timespec t = *t0;
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
  }
}

static int count_prompt(cJSON *body) {
  cJSON *p = cJSON_GetObjectItem(body, "prompt");
  if (cJSON_IsArray(p)) return cJSON_GetArraySize(p);
  const char *s = NULL;
  if (cJSON_IsString(p)) s = p->valuestring;
  cJSON *m = cJSON_GetObjectItem(body, "messages");
  int words = 0;
  if (cJSON_IsArray(m)) {
    cJSON *it;
    cJSON_ArrayForEach(it, m) {
      cJSON *c = cJSON_GetObjectItem(it, "content");
      if (cJSON_IsString(c))
        for (const char *q = c->valuestring; *q; q++) words += (*q != ' ' && (q == c->valuestring || q[-1] == ' '));
    }
    return words;
  }
  for (const char *q = s ? s : ""; *q; q++) words += (*q != ' ' && (q == s || q[-1] == ' '));
  return words;
}

/* Prompt tokens as this server's tokenizer counts them. */
static int count_tokens(cJSON *body) {
  int words = count_prompt(body);
  if (cJSON_IsArray(cJSON_GetObjectItem(body, "prompt")) || g_tokens_per_word <= 0) return words;
  return (int)lround(words * g_tokens_per_word);
}

static void stream(int fd, const char *path, const char *body_text, const struct timespec *t0) {
  int chat = strstr(path, "chat") != NULL;
  cJSON *body = cJSON_Parse(body_text);
  if (!cJSON_IsObject(body)) {
    simple(fd, 400, "Bad Request", "application/json", "{\"error\":{\"message\":\"body is not JSON\"}}");
    goto done;
  }
  int k = atomic_fetch_add(&g_stream_count, 1) + 1;
  const char *fault = (strcmp(g_fault, "none") && k % g_fault_every == 0) ? g_fault : "none";
  cJSON *mt = cJSON_GetObjectItem(body, "max_tokens");
  int n = g_tokens > 0 ? g_tokens : cJSON_IsNumber(mt) ? (int)mt->valuedouble : 16;
  cJSON *so = cJSON_GetObjectItem(body, "stream_options");
  int usage = g_usage && so && cJSON_IsTrue(cJSON_GetObjectItem(so, "include_usage"));
  int prompt = count_tokens(body);
  if (!strcmp(fault, "reset")) goto done;
  if (!strcmp(fault, "garbage")) {
    /* Not HTTP at all: bytes from a fixed-seed generator. */
    unsigned x = 12345;
    char junk[512];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)((x = x * 1103515245u + 12345u) >> 16);
    send_all(fd, junk, sizeof junk);
    goto done;
  }
  if (!strcmp(fault, "500")) {
    simple(fd, 500, "Internal Server Error", "application/json",
           "{\"error\":{\"message\":\"injected failure\",\"type\":\"server_error\"}}");
    goto done;
  }
  char hdr[256];
  int h = snprintf(hdr, sizeof hdr, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                    "Cache-Control: no-cache\r\n%sConnection: %s\r\n\r\n",
                   g_chunked ? "Transfer-Encoding: chunked\r\n" : "",
                   g_ka_drop && g_chunked ? "keep-alive" : "close");
  if (send_all(fd, hdr, (size_t)h)) goto done;
  if (!strcmp(fault, "badchunk")) {
    /* A chunk size that is not hexadecimal breaks the transfer encoding. */
    static const char bad[] = "zz\r\ndata: {}\r\n";
    send_all(fd, bad, sizeof bad - 1);
    goto done;
  }
  if (!strcmp(fault, "stall")) {
    sleep(3600);
    goto done;
  }
  char ev[512];
  if (chat) {
    /* The role-only delta comes at once: it must not count as the first token. */
    snprintf(ev, sizeof ev, "{\"id\":\"chatcmpl-t\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\","
                            "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}");
    if (send_event(fd, ev)) goto done;
  }
  for (int i = 0; i < n; i++) {
    sleep_until(t0, g_ttft_ms + (long)i * g_gap_ms);
    if (i == 1 && !strcmp(fault, "malformed")) {
      send_body(fd, "data: {this is not json\n\n", 25);
      goto done;
    }
    if (i == 1 && !strcmp(fault, "error-event")) {
      send_event(fd, "{\"error\":{\"message\":\"injected error event\",\"type\":\"server_error\"}}");
      goto done;
    }
    if (i == n / 2 && i > 0 && !strcmp(fault, "truncated")) goto done; /* no [DONE], no last chunk */
    if (chat)
      snprintf(ev, sizeof ev, "{\"id\":\"chatcmpl-t\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\","
                              "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok%d\"},\"finish_reason\":null}]}", i);
    else
      snprintf(ev, sizeof ev, "{\"id\":\"cmpl-t\",\"object\":\"text_completion\",\"model\":\"test-model\","
                              "\"choices\":[{\"index\":0,\"text\":\" tok%d\",\"logprobs\":null,\"finish_reason\":null}]}", i);
    if (send_event(fd, ev)) goto done;
  }
  if (chat)
    snprintf(ev, sizeof ev, "{\"id\":\"chatcmpl-t\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\","
                            "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}");
  else
    snprintf(ev, sizeof ev, "{\"id\":\"cmpl-t\",\"object\":\"text_completion\",\"model\":\"test-model\","
                            "\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}");
  if (send_event(fd, ev)) goto done;
  if (usage) {
    snprintf(ev, sizeof ev, "{\"id\":\"cmpl-t\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,"
                            "\"completion_tokens\":%d,\"total_tokens\":%d}}", prompt, n, prompt + n);
    if (send_event(fd, ev)) goto done;
  }
  if (send_event(fd, "[DONE]")) goto done;
  if (g_chunked) send_all(fd, "0\r\n\r\n", 5);
done:
  cJSON_Delete(body);
}

static void *serve_conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  char *buf = malloc(1 << 20);
  size_t n = 0, cap = 1 << 20;
  struct timespec t0;
  if (!buf) goto close_fd;
  char *hend = NULL;
  while (!hend) {
    if (n + 1 >= cap) goto free_buf;
    ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
    if (k <= 0) goto free_buf;
    n += (size_t)k;
    buf[n] = 0;
    hend = strstr(buf, "\r\n\r\n");
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  size_t hlen = (size_t)(hend - buf) + 4;
  long clen = 0;
  for (char *p = buf; p < hend; p = strstr(p, "\r\n") + 2) {
    if (!strncasecmp(p, "Content-Length:", 15)) clen = strtol(p + 15, NULL, 10);
    if (!strstr(p, "\r\n")) break;
  }
  if (clen < 0 || hlen + (size_t)clen >= cap) goto free_buf;
  while (n < hlen + (size_t)clen) {
    ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
    if (k <= 0) goto free_buf;
    n += (size_t)k;
  }
  buf[hlen + (size_t)clen] = 0;
  char method[16] = "", path[256] = "";
  sscanf(buf, "%15s %255s", method, path);
  if (!strcmp(method, "GET") && !strcmp(path, "/health")) {
    simple(fd, 200, "OK", "text/plain", "ok");
  } else if (!strcmp(method, "GET") && !strcmp(path, "/v1/models")) {
    simple(fd, 200, "OK", "application/json",
           "{\"object\":\"list\",\"data\":[{\"id\":\"test-model\",\"object\":\"model\",\"owned_by\":\"test\"}]}");
  } else if (!strcmp(method, "POST") && !strcmp(path, "/tokenize") && g_tokens_per_word > 0) {
    cJSON *body = cJSON_Parse(buf + hlen);
    char out[64];
    snprintf(out, sizeof out, "{\"count\":%d}", body ? count_tokens(body) : 0);
    cJSON_Delete(body);
    simple(fd, 200, "OK", "application/json", out);
  } else if (!strcmp(method, "POST") &&
             (!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions"))) {
    if (g_log) {
      pthread_mutex_lock(&g_log_lock);
      fprintf(g_log, "%s\n", buf + hlen);
      fflush(g_log);
      pthread_mutex_unlock(&g_log_lock);
    }
    stream(fd, path, buf + hlen, &t0);
    /* Wait for the client's next request on this connection, then close unanswered. */
    if (g_ka_drop) (void)recv(fd, buf, cap, 0);
  } else {
    simple(fd, 404, "Not Found", "application/json", "{\"error\":{\"message\":\"no such route\"}}");
  }
free_buf:
  free(buf);
close_fd:
  close(fd);
  return NULL;
}

int main(int argc, char **argv) {
  const char *port_file = NULL;
  int port = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-usage")) g_usage = 0;
    else if (!strcmp(a, "--keep-alive-drop")) g_ka_drop = 1;
    else if (!strcmp(a, "--identity")) g_chunked = 0;
    else if (!v) { fprintf(stderr, "test_server: %s needs a value\n", a); return 2; }
    else if (!strcmp(a, "--port-file")) port_file = v, i++;
    else if (!strcmp(a, "--port")) port = atoi(v), i++;
    else if (!strcmp(a, "--ttft-ms")) g_ttft_ms = atoi(v), i++;
    else if (!strcmp(a, "--gap-ms")) g_gap_ms = atoi(v), i++;
    else if (!strcmp(a, "--tokens")) g_tokens = atoi(v), i++;
    else if (!strcmp(a, "--tokens-per-word")) g_tokens_per_word = atof(v), i++;
    else if (!strcmp(a, "--fault")) g_fault = v, i++;
    else if (!strcmp(a, "--fault-every")) g_fault_every = atoi(v) > 0 ? atoi(v) : 1, i++;
    else if (!strcmp(a, "--log")) {
      g_log = fopen(v, "a");
      i++;
    } else { fprintf(stderr, "test_server: unknown option %s\n", a); return 2; }
  }
  signal(SIGPIPE, SIG_IGN);
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof addr;
  if (bind(ls, (struct sockaddr *)&addr, sizeof addr) || listen(ls, 512) ||
      getsockname(ls, (struct sockaddr *)&addr, &al)) {
    perror("test_server: listen");
    return 1;
  }
  if (port_file) {
    /* Written to a temporary name and renamed so a reader never sees half a number. */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f) return 1;
    fprintf(f, "%d\n", ntohs(addr.sin_port));
    fclose(f);
    rename(tmp, port_file);
  }
  for (;;) {
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    if (pthread_create(&t, &at, serve_conn, (void *)(intptr_t)fd) != 0) close(fd);
    pthread_attr_destroy(&at);
  }
}
