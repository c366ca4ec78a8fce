/* The HTTP request path in process: one server (the real transport, router and API, with a
 * tiny model in a real engine) receives each input on a fresh in-process connection; the
 * loop runs until every answer is out and every engine request has ended, then the client
 * closes. Invariants: every byte written to the client and every log line is valid UTF-8
 * (the transport aborts on invalid output in this mode), a connection and every job are
 * freed after each input, and the server keeps running. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "engine/engine.h"
#include "fuzz_targets.h"
#include "http/api.h"
#include "metrics/metrics.h"
#include "util/log.h"

static struct {
  int ready;
  uv_loop_t loop;
  weir_config cfg;
  weir_metrics *metrics;
  weir__http_server srv;
  FILE *log;
  char line[8192];
  size_t line_len;
  size_t out_bytes;
  int verbose; /* WEIR_FUZZ_VERBOSE=1: every byte the server writes goes to stderr too */
} H;

/* The log sink: each complete line must be valid UTF-8. */
static ssize_t log_write(void *cookie, const char *buf, size_t n) {
  (void)cookie;
  for (size_t i = 0; i < n; i++) {
    if (buf[i] == '\n' || H.line_len == sizeof H.line) {
      if (!weir_utf8_valid(H.line, H.line_len))
        weir__fuzz_fail("a log line is not valid UTF-8: %.*s", (int)H.line_len, H.line);
      H.line_len = 0;
      if (buf[i] == '\n') continue;
    }
    H.line[H.line_len++] = buf[i];
  }
  return (ssize_t)n;
}

static void sink(void *arg, const char *data, size_t len) {
  (void)arg;
  /* Every write is a response head, a whole body, or a whole chunk: ASCII and UTF-8. */
  if (!weir_utf8_valid(data, len))
    weir__fuzz_fail("the server wrote invalid UTF-8: %.*s", (int)(len < 200 ? len : 200), data);
  H.out_bytes += len;
  if (H.verbose) fwrite(data, 1, len, stderr);
}

static int set(const char *key, const char *value) {
  char err[512];
  if (weir_config_set(&H.cfg, key, value, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz set-up: %s\n", err);
    return -1;
  }
  return 0;
}

static int http_init(void) {
  if (H.ready) return 0;
  if (!weir__fuzz_dir()[0]) return -1;
  weir_config_defaults(&H.cfg);
  char model[512], dirs[1200];
  snprintf(model, sizeof model, "%s/serve.gguf", weir__fuzz_dir());
  snprintf(dirs, sizeof dirs, "[\"%s\"]", weir__fuzz_plugin_dir());
  /* Small limits make the paths past them reachable: a tiny output bound (flow control), a
   * short queue (429), few tokens per request (cheap generations). */
  if (set("model.path", model) || set("plugins.dirs", dirs) || set("device.threads", "1") ||
      set("cache.memory_bytes", "2MiB") || set("scheduler.max_num_seqs", "8") ||
      set("scheduler.max_waiting", "24") || set("server.default_max_tokens", "3") ||
      set("server.max_tokens_limit", "3") || set("server.max_pending_output_bytes", "4KiB") ||
      set("server.max_body_bytes", "64KiB") || set("server.max_header_bytes", "4KiB") ||
      set("server.max_connections", "4") || set("log.level", "warn"))
    return -1;
  static cookie_io_functions_t io = {.write = log_write};
  H.log = fopencookie(NULL, "w", io);
  if (!H.log) return -1;
  setvbuf(H.log, NULL, _IONBF, 0);
  if (uv_loop_init(&H.loop) != 0 || weir_metrics_create(&H.metrics) != 0) return -1;
  if (weir__serve_setup(&H.srv, &H.loop, &H.cfg, H.metrics) != 0) return -1;
  H.srv.abort_on_invalid_utf8 = 1;
  H.verbose = getenv("WEIR_FUZZ_VERBOSE") != NULL;
  weir_engine *e = NULL;
  if (weir_engine_create_ex(&H.cfg, H.metrics, &e) != 0) return -1;
  if (weir__serve_attach_engine(&H.srv, e) != 0) return -1;
  /* From here on, everything the server logs goes through the UTF-8 check. */
  weir_log_configure(WEIR_LOG_WARN, WEIR_LOG_TEXT, H.log);
  H.ready = 1;
  return 0;
}

/* Runs the loop until the exchange on c is over: nothing unsent, nothing queued, no engine
 * request left. Returns with c still open, or closed (then c must not be used). */
static void settle(weir__http_conn *c) {
  int quiet = 0;
  for (int iter = 0; iter < 1000000; iter++) {
    if (!weir__http_conn_is_open(&H.srv, c)) return;
    weir__http_conn_drain(c);
    if (!weir__http_conn_is_open(&H.srv, c)) return;
    if (H.srv.num_jobs > 0) {
      quiet = 0;
      uv_run(&H.loop, UV_RUN_ONCE); /* an engine event will wake it */
      continue;
    }
    if (weir__http_conn_is_idle(c) && ++quiet > 2) return;
    uv_run(&H.loop, UV_RUN_NOWAIT);
  }
  weir__fuzz_fail("the exchange did not settle");
}

static void finish(void) {
  for (int iter = 0; H.srv.num_jobs > 0 || H.srv.num_conn_structs > 0; iter++) {
    if (iter > 1000000) weir__fuzz_fail("a connection or a job was never freed");
    uv_run(&H.loop, H.srv.num_jobs > 0 ? UV_RUN_ONCE : UV_RUN_NOWAIT);
  }
  if (H.srv.num_conns != 0 || H.srv.idle_head || H.srv.conns)
    weir__fuzz_fail("the server still counts a closed connection");
}

static void run_exchange(const char *head, size_t head_len, const uint8_t *data, size_t size) {
  if (http_init() != 0) weir__fuzz_fail("could not start the in-process server");
  weir__http_conn *c = weir__http_conn_open_mem(&H.srv, sink, NULL);
  if (!c) weir__fuzz_fail("out of memory opening a connection");
  if (head_len) weir__http_conn_feed(c, head, head_len);
  if (weir__http_conn_is_open(&H.srv, c)) weir__http_conn_feed(c, (const char *)data, size);
  settle(c);
  if (weir__http_conn_is_open(&H.srv, c)) weir__http_conn_peer_closed(c);
  finish();
}

int weir_fuzz_http(const uint8_t *data, size_t size) {
  run_exchange(NULL, 0, data, size);
  return 0;
}

int weir_fuzz_json(int endpoint, const uint8_t *data, size_t size) {
  static const char *paths[] = {"/v1/completions", "/v1/chat/completions", "/tokenize",
                                "/detokenize"};
  char head[256];
  int n = snprintf(head, sizeof head,
                   "POST %s HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n\r\n",
                   paths[endpoint & 3], size);
  run_exchange(head, (size_t)n, data, size);
  return 0;
}

void weir__fuzz_http_teardown(void) {
  if (!H.ready) return;
  weir_log_configure(WEIR_LOG_WARN, WEIR_LOG_TEXT, NULL);
  weir__serve_detach(&H.srv);
  uv_loop_close(&H.loop);
  weir_metrics_destroy(H.metrics);
  weir_config_free(&H.cfg);
  fclose(H.log);
  H.ready = 0;
}
