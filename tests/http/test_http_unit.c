/* The HTTP transport in process (core/http's in-process connections: the connection code a
 * socket runs, without the socket) and its helpers: writes longer than a uv_buf_t can say,
 * UTF-8 repair, Retry-After while loading, output bounded per connection with a stall
 * timeout, and admission by closing the longest-idle connection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "http/api.h"
#include "metrics/metrics.h"
#include "testutil.h"

/* ---- helpers of the write path ---------------------------------------------------------- */

/* A write of 5 GiB + 3 bytes: every byte is in exactly one buffer, none longer than a
 * uv_buf_t length (unsigned int) can hold, in order. Before, the length was cast to unsigned
 * and 4 GiB of it silently dropped. */
static void test_split_bufs_over_4gib(void) {
  const size_t len = ((size_t)5 << 30) + 3;
  char *base = (char *)(uintptr_t)0x10000; /* never dereferenced */
  uv_buf_t bufs[16];
  size_t n = weir__http_split_bufs(base, len, bufs, 16);
  CU_ASSERT_FATAL(n >= 2);
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    CU_ASSERT(bufs[i].base == base + total);
    CU_ASSERT(bufs[i].len > 0 && bufs[i].len <= (size_t)1 << 30);
    total += bufs[i].len;
  }
  CU_ASSERT(total == len);
  /* Not enough buffers: refused, never truncated. */
  WT_ASSERT_INT_EQ(weir__http_split_bufs(base, len, bufs, 2), 0);
  WT_ASSERT_INT_EQ(weir__http_split_bufs(base, 10, bufs, 1), 1);
  WT_ASSERT_INT_EQ(bufs[0].len, 10);
}

static void test_utf8_helpers(void) {
  CU_ASSERT(weir_utf8_valid("caf\xc3\xa9 \xf0\x9f\x98\x80", 10));
  CU_ASSERT(!weir_utf8_valid("\xc0\xaf", 2));         /* overlong */
  CU_ASSERT(!weir_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
  CU_ASSERT(!weir_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
  CU_ASSERT(!weir_utf8_valid("a\xc3", 2));            /* cut */
  static const struct {
    const char *in, *out;
  } trims[] = {{"ab\xc3", "ab"}, {"a\xe2\x82", "a"}, {"\xf0\x9f\x98", ""},
               {"\xc3\xa9", "\xc3\xa9"}, {"x\xf0\x9f\x98\x80", "x\xf0\x9f\x98\x80"}, {"", ""}};
  for (size_t i = 0; i < sizeof trims / sizeof trims[0]; i++) {
    char buf[16];
    snprintf(buf, sizeof buf, "%s", trims[i].in);
    weir_utf8_trim(buf);
    CU_ASSERT_STRING_EQUAL(buf, trims[i].out);
  }
  weir_buf b = {0};
  weir_buf_append_utf8(&b, "a\xff" "b\xc3", 4);
  CU_ASSERT_STRING_EQUAL(b.p, "a\xef\xbf\xbd" "b\xef\xbf\xbd");
  weir_buf_free(&b);
}

/* ---- an in-process server ---------------------------------------------------------------- */

typedef struct out {
  char *p;
  size_t len;
} out;

static void sink(void *arg, const char *data, size_t len) {
  out *o = arg;
  o->p = realloc(o->p, o->len + len + 1);
  memcpy(o->p + o->len, data, len);
  o->len += len;
  o->p[o->len] = '\0';
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; p && (p = strstr(p, needle)); p++) n++;
  return n;
}

typedef struct srv {
  uv_loop_t loop;
  weir_config cfg;
  weir_metrics *metrics;
  weir__http_server s;
} srv;

/* A server that never gets an engine: it stays "loading", which answers everything at once. */
static void srv_start(srv *x, const char *const *sets) {
  memset(x, 0, sizeof *x);
  weir_config_defaults(&x->cfg);
  char err[256];
  for (int i = 0; sets && sets[i]; i += 2)
    WT_ASSERT_INT_EQ(weir_config_set(&x->cfg, sets[i], sets[i + 1], err, sizeof err), 0);
  WT_ASSERT_INT_EQ(uv_loop_init(&x->loop), 0);
  WT_ASSERT_INT_EQ(weir_metrics_create(&x->metrics), 0);
  WT_ASSERT_INT_EQ(weir__serve_setup(&x->s, &x->loop, &x->cfg, x->metrics), 0);
}

static void srv_stop(srv *x) {
  while (x->s.conns) weir__http_conn_peer_closed(x->s.conns);
  weir__serve_detach(&x->s);
  WT_ASSERT_INT_EQ(x->s.num_conn_structs, 0);
  uv_loop_close(&x->loop);
  weir_metrics_destroy(x->metrics);
  weir_config_free(&x->cfg);
}

static const char k_health[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

/* Every 503 says when to come back, loading included. */
static void test_retry_after_while_loading(void) {
  srv x;
  srv_start(&x, NULL);
  out o = {0};
  weir__http_conn *c = weir__http_conn_open_mem(&x.s, sink, &o);
  static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                            "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  weir__http_conn_feed(c, req, sizeof req - 1);
  weir__http_conn_drain(c);
  WT_ASSERT_INT_EQ(count(o.p, "HTTP/1.1 503 "), 2);
  WT_ASSERT_INT_EQ(count(o.p, "\r\nRetry-After: 5\r\n"), 2);
  WT_ASSERT_STR_CONTAINS(o.p, "{\"status\":\"loading\"}");
  WT_ASSERT_STR_CONTAINS(o.p, "still loading");
  free(o.p);
  srv_stop(&x);
}

/* A client that sends requests without reading the answers: once its unsent output passes
 * server.max_pending_output_bytes, nothing more is dispatched for it; when it reads, the
 * rest is answered; when it stops reading for server.stall_timeout_ms, it is closed. */
static void test_output_bound_and_stall(void) {
  const char *sets[] = {"server.max_pending_output_bytes", "4KiB", "server.stall_timeout_ms",
                        "50", NULL};
  srv x;
  srv_start(&x, sets);
  enum { N = 200 };
  char *many = malloc(N * (sizeof k_health - 1) + 1);
  for (int i = 0; i < N; i++) memcpy(many + i * (sizeof k_health - 1), k_health, sizeof k_health - 1);
  out o = {0};
  weir__http_conn *c = weir__http_conn_open_mem(&x.s, sink, &o);
  weir__http_conn_feed(c, many, N * (sizeof k_health - 1));
  int answered = count(o.p, "HTTP/1.1 503 ");
  /* About 4 KiB of answers (each ~170 bytes), not all 200. */
  CU_ASSERT(answered > 10 && answered < 40);
  CU_ASSERT(o.len > 4096 && o.len < 4096 + 400);
  /* Reading drains it: everything gets answered, in order, on the same connection. */
  for (int i = 0; i < 100 && weir__http_conn_drain(c) > 0;) i++;
  WT_ASSERT_INT_EQ(count(o.p, "HTTP/1.1 503 "), N);
  CU_ASSERT(weir__http_conn_is_open(&x.s, c));
  /* Backed up again and never read: closed after the stall timeout. */
  size_t before = o.len;
  weir__http_conn_feed(c, many, N * (sizeof k_health - 1));
  CU_ASSERT(o.len - before < 4096 + 400);
  uint64_t t0 = uv_now(&x.loop);
  while (weir__http_conn_is_open(&x.s, c) && uv_now(&x.loop) - t0 < 5000)
    uv_run(&x.loop, UV_RUN_ONCE);
  CU_ASSERT(!weir__http_conn_is_open(&x.s, c));
  CU_ASSERT(uv_now(&x.loop) - t0 >= 40);
  free(many);
  free(o.p);
  srv_stop(&x);
}

/* A full table closes the connection idle the longest to admit a new one; a connection with a
 * request still being answered (here: its answer unread) is never chosen. */
static void test_admission_evicts_longest_idle(void) {
  const char *sets[] = {"server.max_connections", "2", "server.max_pending_output_bytes",
                        "4KiB", NULL};
  srv x;
  srv_start(&x, sets);
  out oa = {0}, ob = {0}, oc = {0}, od = {0};
  weir__http_conn *a = weir__http_conn_open_mem(&x.s, sink, &oa);
  uv_run(&x.loop, UV_RUN_NOWAIT); /* a later uv_now for b */
  weir__http_conn *b = weir__http_conn_open_mem(&x.s, sink, &ob);
  weir__http_conn *c = weir__http_conn_open_mem(&x.s, sink, &oc);
  CU_ASSERT(!weir__http_conn_is_open(&x.s, a)); /* the oldest idle one made room */
  CU_ASSERT(weir__http_conn_is_open(&x.s, b) && weir__http_conn_is_open(&x.s, c));
  WT_ASSERT_INT_EQ(x.s.num_conns, 2);
  CU_ASSERT_PTR_NULL(oa.p); /* closed without a word */
  /* b and c busy: each has answers it has not read (more than the output bound). */
  char *many = malloc(60 * (sizeof k_health - 1));
  for (int i = 0; i < 60; i++) memcpy(many + i * (sizeof k_health - 1), k_health, sizeof k_health - 1);
  weir__http_conn_feed(b, many, 60 * (sizeof k_health - 1));
  weir__http_conn_feed(c, many, 60 * (sizeof k_health - 1));
  weir__http_conn *d = weir__http_conn_open_mem(&x.s, sink, &od);
  CU_ASSERT(weir__http_conn_is_open(&x.s, b) && weir__http_conn_is_open(&x.s, c));
  CU_ASSERT_PTR_NOT_NULL(od.p);
  WT_ASSERT_STR_CONTAINS(od.p, "HTTP/1.1 503 ");
  WT_ASSERT_STR_CONTAINS(od.p, "Retry-After: ");
  (void)d;
  free(many);
  free(oa.p);
  free(ob.p);
  free(oc.p);
  free(od.p);
  srv_stop(&x);
}

int main(void) {
  static const wt_test tests[] = {
      {"split_bufs_over_4gib", test_split_bufs_over_4gib},
      {"utf8_helpers", test_utf8_helpers},
      {"retry_after_while_loading", test_retry_after_while_loading},
      {"output_bound_and_stall", test_output_bound_and_stall},
      {"admission_evicts_longest_idle", test_admission_evicts_longest_idle},
      {NULL, NULL},
  };
  return wt_run_suite("http_unit", tests);
}
