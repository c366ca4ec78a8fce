/* The scale-out example, tested: etc/examples/nginx/nginx.conf (ports rewritten, nothing else)
 * runs the real nginx as this user with a temporary prefix in front of two real
 * `weir serve` replicas on loopback, and
 *   - a stream passes token by token: the first event reaches the client while the replica is
 *     still generating, and the events arrive spread over the generation, not in one burst;
 *   - concurrent requests spread over both replicas (least_conn);
 *   - with one replica stopped (SIGTERM: it drains, then exits), every request still succeeds,
 *     served by the other.
 * Skipped (exit 77) with a clear message when nginx is not installed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hclient.h"
#include "testutil.h"

static char *g_dir, *g_model, *g_nginx;
static hc_server g_rep[2];
static pid_t g_nginx_pid;
static int g_port; /* nginx */
static int g_ready;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *find_nginx(void) {
  static const char *const where[] = {"/usr/sbin/nginx", "/usr/bin/nginx",
                                      "/usr/local/sbin/nginx", "/usr/local/bin/nginx"};
  for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
    if (access(where[i], X_OK) == 0) return strdup(where[i]);
  return NULL;
}

/* Replaces every `from` in s (malloc'd) by `to`; returns a new string and frees s. */
static char *replace(char *s, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to), n = 0;
  for (const char *p = strstr(s, from); p; p = strstr(p + fl, from)) n++;
  char *out = malloc(strlen(s) + n * (tl + 1) + 1), *o = out;
  const char *p = s;
  for (const char *q; (q = strstr(p, from)); p = q + fl) {
    memcpy(o, p, (size_t)(q - p));
    o += q - p;
    memcpy(o, to, tl);
    o += tl;
  }
  strcpy(o, p);
  free(s);
  return out;
}

static double metric(int port, const char *series) {
  hc_response r;
  double v = -1;
  if (hc_request(port, "GET", "/metrics", NULL, NULL, &r) == 0 && r.status == 200)
    hc_metric(r.body, series, &v);
  hc_response_free(&r);
  return v;
}

static double finished(int port) {
  double v = metric(port, "weir_request_success_total{finished_reason=\"length\"}");
  return v < 0 ? 0 : v;
}

static int start_all(void) {
  char *out = NULL;
  g_model = wt_strf("%s/m.gguf", g_dir);
  /* Big enough that a stream takes a visible while (about 10 ms a token on one thread): the
   * first event reaches the client while the request still runs, even on a loaded machine. */
  char *mk[] = {WT_WEIR, "mkmodel", "--dim", "512", "--layers", "8", "--heads", "8",
                "--kv-heads", "4", "--ffn", "1536", "--vocab", "512", "--out", g_model, NULL};
  int rc = wt_run(mk, &out, 120000);
  free(out);
  if (rc != 0) return -1;
  for (int i = 0; i < 2; i++) {
    g_rep[i].port = wt_free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", g_rep[i].port);
    const char *args[] = {g_model, "--host", "127.0.0.1", "--port", port, "--threads", "1",
                          "--served-model-name", "shared-model", "--plugin-dir", WT_PLUGIN_DIR,
                          "--set", "cache.memory_bytes=32MiB", "--set", "server.drain_timeout_ms=5000",
                          NULL};
    char *log = wt_strf("%s/replica%d.log", g_dir, i);
    rc = hc_server_start(&g_rep[i], args, log, 60000);
    free(log);
    if (rc != 0) {
      fprintf(stderr, "\n  replica %d did not start\n", i);
      return -1;
    }
  }
  /* The shipped example, with only its ports rewritten. */
  char *conf_text = wt_read_file(WT_SOURCE_DIR "/etc/examples/nginx/nginx.conf", NULL);
  if (!conf_text) return -1;
  g_port = wt_free_port();
  char a[64], b[64], l[64];
  snprintf(a, sizeof a, "127.0.0.1:%d ", g_rep[0].port);
  snprintf(b, sizeof b, "127.0.0.1:%d ", g_rep[1].port);
  snprintf(l, sizeof l, "listen 127.0.0.1:%d;", g_port);
  conf_text = replace(conf_text, "127.0.0.1:8001 ", a);
  conf_text = replace(conf_text, "127.0.0.1:8002 ", b);
  conf_text = replace(conf_text, "listen 127.0.0.1:8000;", l);
  char *conf = wt_strf("%s/nginx.conf", g_dir), *logs = wt_strf("%s/logs", g_dir);
  char *tmp = wt_strf("%s/tmp", g_dir);
  wt_write_file(conf, conf_text, strlen(conf_text));
  mkdir(logs, 0755);
  mkdir(tmp, 0755);
  free(conf_text);
  g_nginx_pid = fork();
  if (g_nginx_pid == 0) {
    char *errlog = wt_strf("%s/nginx.out", g_dir);
    FILE *f = fopen(errlog, "w");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    /* In the foreground and as one process, so the test owns it: no daemon, no workers
     * switching user. */
    execl(g_nginx, g_nginx, "-p", g_dir, "-c", conf, "-g", "daemon off; master_process off;",
          (char *)NULL);
    _exit(127);
  }
  free(conf);
  free(logs);
  free(tmp);
  for (int i = 0; i < 200; i++) {
    hc_response r;
    int ok = hc_request(g_port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200;
    hc_response_free(&r);
    if (ok) return 0;
    int st;
    if (waitpid(g_nginx_pid, &st, WNOHANG) == g_nginx_pid) {
      g_nginx_pid = 0;
      char *p = wt_strf("%s/nginx.out", g_dir), *text = wt_read_file(p, NULL);
      fprintf(stderr, "\n  nginx exited:\n%s\n", text ? text : "");
      free(text);
      free(p);
      return -1;
    }
    usleep(25000);
  }
  return -1;
}

/* A streamed completion of n tokens. */
#define STREAM_BODY(n)                                                                       \
  "{\"prompt\":\"hello there\",\"max_tokens\":" #n ",\"ignore_eos\":true,"                   \
  "\"temperature\":0,\"stream\":true}"

/* Sends a streaming completion (body) through nginx on a new connection; returns the fd. */
static int send_stream(const char *k_stream) {
  int fd = hc_connect(g_port, 60000);
  if (fd < 0) return -1;
  char *req = wt_strf("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(k_stream), k_stream);
  int rc = hc_send_all(fd, req, strlen(req));
  free(req);
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void test_stream_token_by_token(void) {
  if (!g_ready) return;
  int fd = send_stream(STREAM_BODY(300));
  CU_ASSERT_FATAL(fd >= 0);
  hc_response head;
  int chunked = 0;
  WT_ASSERT_INT_EQ(hc_read_head(fd, &head, &chunked), 0);
  WT_ASSERT_INT_EQ(head.status, 200);
  char *ctype = hc_header(&head, "content-type");
  WT_ASSERT_STR_CONTAINS(ctype ? ctype : "", "text/event-stream");
  free(ctype);
  hc_response_free(&head);
  CU_ASSERT_FATAL(chunked);
  int events = 0, done = 0, running_at_first = -1;
  double t_first = 0, t_last = 0;
  char *data;
  long n;
  while (!done && (n = hc_read_chunk(fd, &data)) > 0) {
    double t = now_ms();
    for (const char *p = strstr(data, "data: "); p; p = strstr(p + 6, "data: ")) {
      if (!strncmp(p + 6, "[DONE]", 6)) {
        done = 1;
        break;
      }
      if (!strstr(p, "\"text\"")) continue;
      if (events++ == 0) t_first = t;
      /* The replicas, asked directly while events are still to come: the request is seen
       * running (or paused a moment, its reader behind) at some point. A buffering proxy
       * delivers everything after the request ended, when every read says 0. Asked again at
       * each event, because one /metrics round trip on a loaded machine can outlast a stream. */
      if (running_at_first < 1) {
        running_at_first = 0;
        for (int r = 0; r < 2; r++)
          running_at_first += (int)(metric(g_rep[r].port, "weir_num_requests_running") +
                                    metric(g_rep[r].port, "weir_num_requests_paused"));
      }
      t_last = t;
    }
    free(data);
  }
  close(fd);
  CU_ASSERT(done);
  CU_ASSERT(events >= 20);
  if (running_at_first != 1)
    fprintf(stderr, "\n  never seen running while its events arrived: %d\n", running_at_first);
  WT_ASSERT_INT_EQ(running_at_first, 1);
  /* 300 tokens take about a second on one thread (3 ms a token on an idle machine: with 60,
   * a fast machine finished before the metrics request reached it); a buffering proxy would
   * deliver them together. */
  if (!(t_last - t_first > 50)) fprintf(stderr, "\n  events spread over %.1f ms\n", t_last - t_first);
  CU_ASSERT(t_last - t_first > 50);
}

static void test_load_spread(void) {
  if (!g_ready) return;
  enum { N = 6 };
  double before[2] = {finished(g_rep[0].port), finished(g_rep[1].port)};
  int fds[N];
  for (int i = 0; i < N; i++) fds[i] = send_stream(STREAM_BODY(60));
  int ok = 0;
  for (int i = 0; i < N; i++) {
    if (fds[i] < 0) continue;
    hc_response r;
    if (hc_read_response(fds[i], &r) == 0 && r.status == 200 && strstr(r.body, "data: [DONE]"))
      ok++;
    hc_response_free(&r);
    close(fds[i]);
  }
  WT_ASSERT_INT_EQ(ok, N);
  double d0 = finished(g_rep[0].port) - before[0], d1 = finished(g_rep[1].port) - before[1];
  fprintf(stderr, "\n  replica A served %.0f, replica B %.0f of %d\n", d0, d1, N);
  WT_ASSERT_INT_EQ(d0 + d1, N);
  CU_ASSERT(d0 >= 1 && d1 >= 1);
}

static void test_failover(void) {
  if (!g_ready) return;
  /* Replica A goes away (drains, exits); nginx must send everything to B. */
  WT_ASSERT_INT_EQ(hc_server_stop(&g_rep[0], SIGTERM, 30000), 0);
  double before = finished(g_rep[1].port);
  int ok = 0;
  for (int i = 0; i < 4; i++) {
    hc_response r;
    if (hc_request(g_port, "POST", "/v1/completions", NULL,
                   "{\"prompt\":\"a\",\"max_tokens\":3,\"ignore_eos\":true}", &r) == 0 &&
        r.status == 200 && strstr(r.body, "\"choices\""))
      ok++;
    else
      fprintf(stderr, "\n  request %d through nginx: status %d %s\n", i, r.status,
              r.body ? r.body : "");
    hc_response_free(&r);
  }
  WT_ASSERT_INT_EQ(ok, 4);
  WT_ASSERT_INT_EQ(finished(g_rep[1].port) - before, 4);
  hc_response r;
  WT_ASSERT_INT_EQ(hc_request(g_port, "GET", "/health", NULL, NULL, &r), 0);
  WT_ASSERT_INT_EQ(r.status, 200);
  hc_response_free(&r);
}

/* Every replica down: nginx answers an OpenAI-shaped JSON error (its error_page), with a
 * JSON Content-Type, for a completion, a stream and /health alike. */
static void test_all_down_json(void) {
  if (!g_ready) return;
  if (g_rep[0].pid > 0) WT_ASSERT_INT_EQ(hc_server_stop(&g_rep[0], SIGTERM, 30000), 0);
  WT_ASSERT_INT_EQ(hc_server_stop(&g_rep[1], SIGTERM, 30000), 0);
  static const struct {
    const char *method, *path, *body;
  } reqs[] = {
      {"POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":3}"},
      {"POST", "/v1/chat/completions",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}"},
      {"GET", "/health", NULL},
  };
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
    hc_response r;
    WT_ASSERT_INT_EQ(hc_request(g_port, reqs[i].method, reqs[i].path, NULL, reqs[i].body, &r), 0);
    WT_ASSERT_INT_EQ(r.status, 502);
    char *ct = hc_header(&r, "Content-Type");
    CU_ASSERT_PTR_NOT_NULL(ct);
    if (ct) WT_ASSERT_STR_CONTAINS(ct, "application/json");
    free(ct);
    WT_ASSERT_STR_CONTAINS(r.body, "{\"error\":{\"message\":\"No weir replica is available");
    WT_ASSERT_STR_CONTAINS(r.body, "\"type\":\"server_error\"");
    CU_ASSERT_PTR_NULL(strstr(r.body, "<html>"));
    hc_response_free(&r);
  }
}

int main(void) {
  g_nginx = find_nginx();
  if (!g_nginx) {
    printf("nginx: skipped: nginx is not installed (scripts/setup.sh installs nginx-light)\n");
    return 77;
  }
  g_dir = wt_mkdtemp();
  g_ready = start_all() == 0;
  if (!g_ready) fprintf(stderr, "nginx: the replicas or nginx did not start (logs in %s)\n", g_dir);
  static const wt_test tests[] = {
      {"a stream passes token by token", test_stream_token_by_token},
      {"load spreads over both replicas", test_load_spread},
      {"failover when a replica stops", test_failover},
      {"every replica down: a JSON error", test_all_down_json},
      {NULL, NULL}};
  int rc = wt_run_suite("nginx", tests);
  if (!g_ready) rc = 1;
  if (g_nginx_pid > 0) {
    kill(g_nginx_pid, SIGTERM);
    waitpid(g_nginx_pid, NULL, 0);
  }
  for (int i = 0; i < 2; i++)
    if (g_rep[i].pid > 0) hc_server_stop(&g_rep[i], SIGTERM, 20000);
  if (rc == 0) wt_rmtree(g_dir);
  free(g_dir);
  free(g_model);
  free(g_nginx);
  return rc;
}
