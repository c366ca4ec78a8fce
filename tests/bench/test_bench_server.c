/* `weir bench` against the real `weir serve` on loopback, with the tiny model written by
 * `weir mkmodel --preset tiny`: a single run on both endpoints, and an A/B of two configs
 * that differ in one plugin (B adds the ngram drafter: speculative decoding), where the
 * bench starts and stops the servers itself.
 *
 * Exits 77 (ctest SKIP) with the reason when this build cannot serve: mkmodel fails, or a
 * server never answers GET /health with 200. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static char *g_dir, *g_cfg_a, *g_cfg_b;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* GET /health with a plain socket: 1 when it answers 200. */
static int health_ok(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char buf[64] = "";
    if (write(fd, req, strlen(req)) > 0 && read(fd, buf, sizeof buf - 1) > 12)
      ok = !strncmp(buf + 9, "200", 3);
  }
  close(fd);
  return ok;
}

static pid_t start_serve(const char *cfg, int port, const char *log) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(WT_WEIR, WT_WEIR, "serve", "--config", cfg, "--port", ps, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 600; i++) {
    if (health_ok(port)) return pid;
    if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
    sleep_ms(100);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

static void stop_serve(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 300; i++) {
    if (waitpid(pid, NULL, WNOHANG) == pid) return;
    sleep_ms(100);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static cJSON *read_json(const char *p) {
  char *t = wt_read_file(p, NULL);
  cJSON *o = t ? cJSON_Parse(t) : NULL;
  free(t);
  return o;
}

static double num(cJSON *o, const char *dotted) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", dotted);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ".", &save); tok && o; tok = strtok_r(NULL, ".", &save)) {
    if (cJSON_IsArray(o)) o = cJSON_GetArrayItem(o, atoi(tok));
    else o = cJSON_GetObjectItem(o, tok);
  }
  if (!cJSON_IsNumber(o)) {
    fprintf(stderr, "\n  JSON field %s is missing or not a number\n", dotted);
    return -1;
  }
  return o->valuedouble;
}

static void run_single(const char *url, const char *endpoint, const char *format) {
  char *json = wt_strf("%s/single-%s-%s.json", g_dir, endpoint, format), *out = NULL;
  char *argv[] = {WT_WEIR, "bench", "--url", (char *)url, "--endpoint", (char *)endpoint,
                  "--prompt-format", (char *)format, "--vocab", "500", "--num-requests", "6",
                  "--concurrency", "2", "--input-len", "16", "--output-len", "8", "--ignore-eos",
                  "--warmup", "1", "--json", json, "--quiet", NULL};
  int rc = wt_run(argv, &out, 120000);
  if (rc != 0) fprintf(stderr, "\n  weir bench exited %d:\n%s\n", rc, out);
  WT_ASSERT_INT_EQ(rc, 0);
  cJSON *r = read_json(json);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  double ok = num(r, "targets.0.summary.requests.completed");
  if (ok != 6) fprintf(stderr, "\n  output:\n%s\n", out);
  WT_ASSERT_INT_EQ(ok, 6);
  double outtok = num(r, "targets.0.summary.tokens.output");
  CU_ASSERT(outtok > 0 && outtok <= 48);
  CU_ASSERT(num(r, "targets.0.summary.latency_ms.ttft.median") > 0);
  CU_ASSERT(num(r, "targets.0.summary.throughput.output_tokens_per_s") > 0);
  cJSON_Delete(r);
  free(out);
  free(json);
}

static void test_single_run(void) {
  int port = wt_free_port();
  char *log = wt_strf("%s/serve.log", g_dir), *url = wt_strf("http://127.0.0.1:%d", port);
  pid_t pid = start_serve(g_cfg_a, port, log);
  if (pid < 0) {
    CU_FAIL("weir serve stopped serving between the probe and this test");
  } else {
    run_single(url, "completions", "text");
    run_single(url, "completions", "tokens");
    run_single(url, "chat", "text");
    stop_serve(pid);
  }
  free(log);
  free(url);
}

/* The value of a metric of one series (labels ignored) from GET /metrics (one connection of its own), or -1. */
static double metric_value(int port, const char *name) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  double v = -1;
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  if (buf && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (write(fd, req, strlen(req)) > 0) {
      ssize_t k;
      while (n + 1 < cap && (k = read(fd, buf + n, cap - n - 1)) > 0) n += (size_t)k;
      buf[n] = 0;
      size_t nl = strlen(name);
      for (char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, nl) && (p[nl] == ' ' || p[nl] == '{')) {
          const char *sp = strchr(p + nl, ' '); /* after the labels, if any */
          if (sp) v = strtod(sp + 1, NULL);
          break;
        }
    }
  }
  free(buf);
  close(fd);
  return v;
}

/* Keep-alive against the real server: 24 requests at 4 in flight reuse their slots'
 * connections, so the server accepts far fewer connections than it answers requests (its
 * own counter, weir_http_connections_total); --no-keep-alive opens one per request. The
 * bench's control requests (GET /v1/models, POST /tokenize) and each /metrics read open a
 * connection of their own, hence the slack of a few. */
static void test_keep_alive_real_server(void) {
  int port = wt_free_port();
  char *log = wt_strf("%s/ka-serve.log", g_dir), *url = wt_strf("http://127.0.0.1:%d", port);
  pid_t pid = start_serve(g_cfg_a, port, log);
  if (pid < 0) {
    CU_FAIL("weir serve stopped serving between the probe and this test");
    free(log);
    free(url);
    return;
  }
  double accepted[2] = {0, 0}, opened[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    char *json = wt_strf("%s/ka-%d.json", g_dir, k), *out = NULL;
    char *argv[] = {WT_WEIR, "bench", "--url", url, "--endpoint", "chat", "--num-requests",
                    "24", "--concurrency", "4", "--input-len", "8", "--output-len", "2",
                    "--json", json, "--quiet", k ? "--no-keep-alive" : NULL, NULL};
    double before = metric_value(port, "weir_http_connections_total");
    int rc = wt_run(argv, &out, 120000);
    double after = metric_value(port, "weir_http_connections_total");
    if (rc != 0) fprintf(stderr, "\n  weir bench exited %d:\n%s\n", rc, out);
    WT_ASSERT_INT_EQ(rc, 0);
    cJSON *r = read_json(json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    WT_ASSERT_INT_EQ(num(r, "targets.0.summary.requests.completed"), 24);
    opened[k] = num(r, "targets.0.summary.connections.opened");
    /* less the /metrics read that `before` itself made */
    accepted[k] = after - before - 1;
    CU_ASSERT(before >= 1);
    cJSON_Delete(r);
    free(out);
    free(json);
  }
  fprintf(stderr, "\n  server accepted %.0f connections for 24 requests with keep-alive (bench "
          "opened %.0f), %.0f without (bench opened %.0f)\n", accepted[0], opened[0],
          accepted[1], opened[1]);
  CU_ASSERT(opened[0] >= 1 && opened[0] <= 4);
  CU_ASSERT(accepted[0] >= opened[0] && accepted[0] <= opened[0] + 3);
  CU_ASSERT(accepted[0] < 24);
  WT_ASSERT_INT_EQ(opened[1], 24);
  CU_ASSERT(accepted[1] >= 24 && accepted[1] <= 27);
  stop_serve(pid);
  free(log);
  free(url);
}

static void test_ab_two_configs(void) {
  char *json = wt_strf("%s/ab.json", g_dir), *svg = wt_strf("%s/ab.svg", g_dir), *out = NULL;
  char *log = wt_strf("%s/ab-serve.log", g_dir);
  char *argv[] = {WT_WEIR, "bench", "--a-config", g_cfg_a, "--b-config", g_cfg_b,
                  "--label-a", "no-drafter", "--label-b", "ngram", "--rounds", "2",
                  "--num-requests", "4", "--concurrency", "2", "--input-len", "16",
                  "--output-len", "8", "--ignore-eos", "--server-timeout", "60",
                  "--server-log", log, "--json", json, "--svg", svg, "--quiet", NULL};
  int rc = wt_run(argv, &out, 240000);
  if (rc != 0) {
    char *sl = wt_read_file(log, NULL);
    fprintf(stderr, "\n  weir bench exited %d:\n%s\n  server log:\n%s\n", rc, out, sl ? sl : "");
    free(sl);
  }
  WT_ASSERT_INT_EQ(rc, 0);
  cJSON *r = read_json(json);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  for (int s = 0; s < 2; s++) {
    char k[96];
    snprintf(k, sizeof k, "targets.%d.summary.requests.completed", s);
    WT_ASSERT_INT_EQ(num(r, k), 8);
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "targets"), s);
    WT_ASSERT_INT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(t, "rounds")), 2);
    CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(t, "config")));
  }
  cJSON *m, *ms = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "comparison"), "metrics");
  CU_ASSERT(cJSON_GetArraySize(ms) > 0);
  /* Two rounds a side can never reach alpha 0.05: the report must say so, not guess. */
  cJSON_ArrayForEach(m, ms) {
    WT_ASSERT_STR_CONTAINS(cJSON_GetObjectItem(m, "verdict")->valuestring, "inconclusive");
  }
  char *text = wt_read_file(svg, NULL);
  WT_ASSERT_STR_CONTAINS(text, "class=\"series-no-drafter\"");
  WT_ASSERT_STR_CONTAINS(text, "class=\"series-ngram\"");
  free(text);
  cJSON_Delete(r);
  free(out);
  free(json);
  free(svg);
  free(log);
}

static int write_config(const char *path, const char *model, const char *drafter) {
  char *t = wt_strf("[server]\nhost = \"127.0.0.1\"\n\n[model]\npath = \"%s\"\n\n"
                    "[attention]\nname = \"paged\"\n\n"
                    "[device]\nname = \"cpu\"\nthreads = 1\n\n[drafter]\nname = \"%s\"\n",
                    model, drafter);
  int rc = wt_write_file(path, t, strlen(t));
  free(t);
  return rc;
}

int main(void) {
  g_dir = wt_mkdtemp();
  if (!g_dir) return 1;
  int rc = 77;
  char *model = wt_strf("%s/tiny.gguf", g_dir), *out = NULL;
  char *mk[] = {WT_WEIR, "mkmodel", "--preset", "tiny", "--out", model, NULL};
  if (wt_run(mk, &out, 120000) != 0) {
    printf("SKIP: `weir mkmodel --preset tiny` failed in this build:\n%s\n", out ? out : "");
    goto done;
  }
  g_cfg_a = wt_strf("%s/a.toml", g_dir);
  g_cfg_b = wt_strf("%s/b.toml", g_dir);
  if (write_config(g_cfg_a, model, "") || write_config(g_cfg_b, model, "ngram")) {
    rc = 1;
    goto done;
  }
  /* Probe: can this build serve at all? */
  int port = wt_free_port();
  char *log = wt_strf("%s/probe.log", g_dir);
  pid_t pid = start_serve(g_cfg_a, port, log);
  if (pid < 0) {
    char *l = wt_read_file(log, NULL);
    printf("SKIP: `weir serve --config %s --port %d` never answered /health 200:\n%s\n", g_cfg_a,
           port, l ? l : "");
    free(l);
    free(log);
    goto done;
  }
  stop_serve(pid);
  free(log);
  static const wt_test tests[] = {
      {"single_run_real_server", test_single_run},
      {"ab_two_configs_drafter", test_ab_two_configs},
      {"keep_alive_real_server", test_keep_alive_real_server},
      {NULL, NULL},
  };
  rc = wt_run_suite("bench_server", tests);
done:
  free(out);
  free(model);
  free(g_cfg_a);
  free(g_cfg_b);
  wt_rmtree(g_dir);
  free(g_dir);
  return rc;
}
