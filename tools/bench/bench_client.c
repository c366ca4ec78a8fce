/* The client side of a run: a libuv loop that sends requests over HTTP/1.1 connections,
 * parses the response with llhttp and the event stream with a small SSE parser, and
 * timestamps every content chunk as it is read. The closed-loop scheduler refills a slot
 * the moment a request ends; the open-loop scheduler sends at precomputed arrival times
 * from a timer on the loop.
 *
 * Connections are kept alive by default, as real clients and the peers' benches do: a
 * request that ended cleanly (its whole response read, the server did not say
 * "Connection: close") gives its socket back to the runner's idle list and the next
 * request takes it, so a slot pays the connect, accept and close once, not per request.
 * A request on a reused socket that the server closed before any byte of the answer came
 * (an idle connection it timed out or evicted) is sent again, once, on a fresh connection.
 * A request that failed in any way closes its socket, so a broken response never affects
 * the next request. --no-keep-alive sends "Connection: close" and opens one connection per
 * request, the connect then counted in TTFT. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <llhttp.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "bench/bench.h"

volatile int weir__bench_interrupted;
int weir__bench_progress;

const char *const weir__bench_err_names[WEIR_BENCH_ERR_COUNT] = {
    "connect", "http_4xx", "http_5xx", "http_other", "malformed",
    "truncated", "server_error", "timeout", "canceled",
};

#define MAX_LINE (1 << 20)   /* an SSE line longer than this is malformed */
#define MAX_ERRBODY 512      /* bytes of a non-200 body kept for the error message */
#define TICK_MS 50           /* interrupt and time-bound polling */

typedef struct runner runner;
typedef struct conn conn;

/* One TCP connection. It outlives the requests it carries when kept alive; `cur` is the
 * request reading from it (NULL while it waits on the idle list). Freed in its close
 * callback. */
typedef struct sock {
  uv_tcp_t tcp;
  uv_connect_t connect_req;
  runner *run;
  conn *cur;
  struct sock *idle_next;
  int idle;                 /* on the runner's idle list */
  int connected;
} sock;

/* One request: its parser and SSE state. Freed once it has finished and no write of its
 * bytes is pending (refs), on the loop iteration after (the runner's graveyard): the
 * callbacks that finish a request still read it as they return. */
struct conn {
  uv_write_t write_req;
  llhttp_t parser;
  runner *run;
  sock *s;                  /* the connection carrying it; NULL once given back */
  struct conn *prev, *next; /* the runner's list of active requests */
  int64_t rec;              /* index into run->recs, or -1 for warm-up */
  char *req;                /* the request bytes, owned until the request ends (a retry
                               sends them again) */
  size_t req_len;
  int refs;                 /* one until it finishes, plus one while a write is pending */
  double deadline_ms;       /* the per-request timeout, checked by the runner's tick */
  struct conn *grave_next;  /* on the runner's graveyard, to be freed */
  sock *ws;                 /* the connection of the pending write */
  int reused;               /* sent on a kept-alive connection */
  int retried;              /* already sent again on a fresh connection */
  int done_ok;              /* data: [DONE] seen: the answer is complete */
  double done_ms;           /* when [DONE] was read */
  char *line;               /* SSE: the current line */
  size_t line_len, line_cap;
  char *data;               /* SSE: data of the current event */
  size_t data_len, data_cap;
  int has_data;
  int status;
  int got_bytes;
  int finished;
  int msg_complete;         /* llhttp saw the end of the response */
  int num_chunks;           /* content chunks, warm-up included */
  int num_events;           /* SSE events dispatched */
  char errbody[MAX_ERRBODY + 1];
  size_t errbody_len;
};

struct runner {
  uv_loop_t loop;
  uv_timer_t arrival_timer, tick_timer;
  const weir_bench_target *t;
  const weir_bench_workload *w;
  const weir_bench_load *load;
  const char *label;
  struct sockaddr_storage addr;
  const char *path;
  uint64_t t0_ns;
  int phase;                /* 1 warm-up, 0 measured */
  int open_loop;
  int64_t issued, limit;    /* requests sent in this phase and the bound */
  double issue_until_ms;    /* duration bound (0 = none) */
  double deadline_ms;       /* hard bound: cancel everything after it (0 = none) */
  int in_flight;
  int cap;                  /* concurrency (open loop: 0 = unbounded) */
  double *arrivals;         /* open loop, seconds */
  int64_t num_arrivals, next_arrival;
  double *pending;          /* open loop: arrived, waiting for a slot (scheduled ms) */
  int64_t pending_head, pending_tail;
  int stopping;
  conn *active;
  conn *graveyard;          /* finished requests to free (check_handle, after each poll) */
  uv_check_t check_handle;
  sock *idle;               /* kept-alive connections waiting for a request */
  int keep_alive;
  int64_t conns_opened;     /* connections this run opened (warm-up included) */
  int64_t retries;          /* requests sent again after a reused connection closed */
  weir_bench_record *recs;
  int64_t num_recs, cap_recs;
  int64_t done_count, err_count;
  int64_t chunks_since_tick;
  double last_progress_ms, progress_rate;
  int ticks;
  char *err_example[WEIR_BENCH_ERR_COUNT];
  char readbuf[65536];
  int fail_rc;
};

static double now_ms(const runner *r) { return (double)(uv_hrtime() - r->t0_ns) / 1e6; }

/* Records why request c failed (its record keeps the first reason, for --requests-out and the
 * report's distinct errors) and keeps the first message of each kind as the run's example. */
static void note_error(runner *r, conn *c, int kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note_error(runner *r, conn *c, int kind, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  if (!s) return;
  if (c && c->rec >= 0 && !r->recs[c->rec].error) r->recs[c->rec].error = strdup(s);
  if (!r->err_example[kind]) r->err_example[kind] = s;
  else free(s);
}

static void issue(runner *r, double scheduled_ms);
static void schedule_more(runner *r);

static void conn_unref(conn *c) {
  if (--c->refs > 0) return;
  c->grave_next = c->run->graveyard;
  c->run->graveyard = c;
}

static void free_graveyard(runner *r) {
  while (r->graveyard) {
    conn *c = r->graveyard;
    r->graveyard = c->grave_next;
    free(c->req);
    free(c->line);
    free(c->data);
    free(c);
  }
}

/* After each poll: the requests that finished in it are freed (no callback of theirs runs
 * any more). A per-request timer did this before, at the cost of a timer start, stop and
 * close per request. */
static void check_cb(uv_check_t *h) { free_graveyard(h->data); }

static void sock_closed_cb(uv_handle_t *h) { free(h->data); }

static void idle_remove(runner *r, sock *s) {
  if (!s->idle) return;
  for (sock **pp = &r->idle; *pp; pp = &(*pp)->idle_next)
    if (*pp == s) {
      *pp = s->idle_next;
      break;
    }
  s->idle = 0;
  s->idle_next = NULL;
}

static void sock_close(sock *s) {
  idle_remove(s->run, s);
  if (s->cur) s->cur->s = NULL;
  s->cur = NULL;
  if (!uv_is_closing((uv_handle_t *)&s->tcp)) uv_close((uv_handle_t *)&s->tcp, sock_closed_cb);
}

/* Ends a request once: records the outcome, gives its connection back to the idle list (a
 * clean end on a kept-alive connection) or closes it, and refills the slot. */
static void finish(conn *c, int ok, int err) {
  if (c->finished) return;
  runner *r = c->run;
  c->finished = 1;
  if (c->rec >= 0) {
    weir_bench_record *rec = &r->recs[c->rec];
    rec->end_ms = c->done_ok ? c->done_ms : now_ms(r);
    rec->ok = ok;
    rec->err = ok ? -1 : err;
    rec->http_status = c->status;
  }
  r->done_count++;
  if (!ok) r->err_count++;
  if (c->prev) c->prev->next = c->next;
  else r->active = c->next;
  if (c->next) c->next->prev = c->prev;
  r->in_flight--;
  sock *s = c->s;
  if (s) {
    c->s = NULL;
    s->cur = NULL;
    /* Reusable only when the response ended as HTTP says (message complete), the server
     * keeps the connection, and nothing of it is left unread. */
    if (ok && r->keep_alive && c->msg_complete && llhttp_should_keep_alive(&c->parser) &&
        !r->stopping) {
      s->idle = 1;
      s->idle_next = r->idle;
      r->idle = s;
      /* An idle connection must not keep the loop running at the end of a phase. */
      uv_unref((uv_handle_t *)&s->tcp);
    } else {
      sock_close(s);
    }
  }
  conn_unref(c); /* freed after this loop iteration: the callers still read it */
  schedule_more(r);
}

static void cancel_all(runner *r) {
  r->stopping = 1;
  uv_timer_stop(&r->arrival_timer);
  while (r->active) {
    note_error(r, r->active, WEIR_BENCH_ERR_CANCELED,
               "canceled while in flight (interrupt or time bound)");
    finish(r->active, 0, WEIR_BENCH_ERR_CANCELED);
  }
}

/* ------------------------------------------------------------------ SSE */

static int buf_append(char **buf, size_t *len, size_t *cap, const char *p, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t nc = *cap ? *cap : 256;
    while (nc < *len + n + 1) nc *= 2;
    char *nb = realloc(*buf, nc);
    if (!nb) return WEIR_E_NOMEM;
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, p, n);
  *len += n;
  (*buf)[*len] = 0;
  return WEIR_OK;
}

static void add_chunk(conn *c, double t) {
  runner *r = c->run;
  c->num_chunks++;
  r->chunks_since_tick++;
  if (c->rec < 0) return;
  weir_bench_record *rec = &r->recs[c->rec];
  if (rec->num_chunks == rec->cap_chunks) {
    int nc = rec->cap_chunks ? rec->cap_chunks * 2 : 64;
    double *nb = realloc(rec->chunk_ms, sizeof *nb * (size_t)nc);
    if (!nb) return; /* the gap is lost; the count stays right through usage */
    rec->chunk_ms = nb;
    rec->cap_chunks = nc;
  }
  rec->chunk_ms[rec->num_chunks++] = t;
}

/* One complete event's data. */
static void sse_dispatch(conn *c, double t) {
  runner *r = c->run;
  const char *d = c->data ? c->data : "";
  c->num_events++;
  if (!strcmp(d, "[DONE]")) {
    /* The answer is complete; its end time is now. A kept-alive connection still has the
     * response's last chunk to read before it can carry the next request. */
    c->done_ok = 1;
    c->done_ms = t;
    if (!c->run->keep_alive) finish(c, 1, 0);
    return;
  }
  /* Read without a JSON tree (bench_sse.c): this runs for every streamed event, and at
   * high request rates it was most of the client's CPU. */
  weir_bench_sse_facts f;
  if (weir__bench_sse_scan(d, c->data ? c->data_len : 0, &f)) {
    note_error(r, c, WEIR_BENCH_ERR_MALFORMED, "SSE data is not a JSON object: %.80s", d);
    finish(c, 0, WEIR_BENCH_ERR_MALFORMED);
    return;
  }
  if (f.error) {
    /* Rare: the message is worth a full parse. */
    cJSON *o = cJSON_Parse(d);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    note_error(r, c, WEIR_BENCH_ERR_SERVER, "error in stream: %.200s",
               cJSON_IsString(m) ? m->valuestring : "(no message)");
    cJSON_Delete(o);
    finish(c, 0, WEIR_BENCH_ERR_SERVER);
    return;
  }
  /* A chunk counts as output when it carries text; role-only chat deltas and the final
   * chunk that only says finish_reason do not. */
  if (f.has_text) add_chunk(c, t);
  if (c->rec >= 0) {
    weir_bench_record *rec = &r->recs[c->rec];
    if (f.prompt_tokens >= 0) rec->usage_prompt = f.prompt_tokens;
    if (f.completion_tokens >= 0) rec->usage_completion = f.completion_tokens;
  }
}

static void sse_line(conn *c, const char *line, size_t n, double t) {
  if (n && line[n - 1] == '\r') n--;
  if (n == 0) {
    if (c->has_data) sse_dispatch(c, t);
    c->has_data = 0;
    c->data_len = 0;
    if (c->data) c->data[0] = 0;
    return;
  }
  if (line[0] == ':') return; /* a comment (keep-alive) */
  if (n >= 5 && !memcmp(line, "data:", 5)) {
    const char *v = line + 5;
    size_t vn = n - 5;
    if (vn && *v == ' ') v++, vn--;
    if (c->has_data && buf_append(&c->data, &c->data_len, &c->data_cap, "\n", 1)) goto nomem;
    if (buf_append(&c->data, &c->data_len, &c->data_cap, v, vn)) goto nomem;
    c->has_data = 1;
  }
  /* event:, id:, retry: and unknown fields are allowed and carry nothing we measure. */
  return;
nomem:
  note_error(c->run, c, WEIR_BENCH_ERR_MALFORMED, "out of memory buffering an SSE event");
  finish(c, 0, WEIR_BENCH_ERR_MALFORMED);
}

static void sse_feed(conn *c, const char *p, size_t n, double t) {
  size_t i = 0;
  while (i < n && !c->finished && !c->done_ok) {
    const char *nl = memchr(p + i, '\n', n - i);
    size_t take = nl ? (size_t)(nl - (p + i)) : n - i;
    if (nl && c->line_len == 0) {
      /* A whole line in this read: used where it lies, not copied first. */
      if (take > MAX_LINE) {
        note_error(c->run, c, WEIR_BENCH_ERR_MALFORMED, "an SSE line longer than %d bytes",
                   MAX_LINE);
        finish(c, 0, WEIR_BENCH_ERR_MALFORMED);
        return;
      }
      sse_line(c, p + i, take, t);
      i += take + 1;
      continue;
    }
    if (c->line_len + take > MAX_LINE) {
      note_error(c->run, c, WEIR_BENCH_ERR_MALFORMED, "an SSE line longer than %d bytes", MAX_LINE);
      finish(c, 0, WEIR_BENCH_ERR_MALFORMED);
      return;
    }
    if (buf_append(&c->line, &c->line_len, &c->line_cap, p + i, take)) {
      finish(c, 0, WEIR_BENCH_ERR_MALFORMED);
      return;
    }
    i += take;
    if (nl) {
      i++;
      sse_line(c, c->line, c->line_len, t);
      c->line_len = 0;
    }
  }
}

/* ------------------------------------------------------------------ HTTP */

static double g_read_time; /* the time of the read being parsed (single-threaded) */

static int on_headers_complete(llhttp_t *p) {
  conn *c = p->data;
  c->status = p->status_code;
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  conn *c = p->data;
  if (c->status != 200) {
    size_t room = MAX_ERRBODY - c->errbody_len;
    size_t k = len < room ? len : room;
    memcpy(c->errbody + c->errbody_len, at, k);
    c->errbody_len += k;
    c->errbody[c->errbody_len] = 0;
    return 0;
  }
  sse_feed(c, at, len, g_read_time);
  return c->finished ? -1 : 0;
}

static void finish_http_error(conn *c) {
  int s = c->status;
  int kind = s >= 400 && s < 500 ? WEIR_BENCH_ERR_HTTP_4XX
             : s >= 500          ? WEIR_BENCH_ERR_HTTP_5XX
                                 : WEIR_BENCH_ERR_HTTP_OTHER;
  for (size_t i = 0; i < c->errbody_len; i++)
    if (c->errbody[i] == '\n' || c->errbody[i] == '\r') c->errbody[i] = ' ';
  note_error(c->run, c, kind, "HTTP %d: %s", s, c->errbody);
  finish(c, 0, kind);
}

static int on_message_complete(llhttp_t *p) {
  conn *c = p->data;
  if (c->finished) return -1;
  c->msg_complete = 1;
  if (c->done_ok) {
    finish(c, 1, 0);
    return -1;
  }
  if (c->status != 200) {
    finish_http_error(c);
  } else {
    /* A final event without its blank line still counts when it is [DONE]. */
    if (c->line_len) {
      sse_line(c, c->line, c->line_len, g_read_time);
      c->line_len = 0;
    }
    if (!c->finished && c->has_data) sse_dispatch(c, g_read_time);
    if (!c->finished && c->done_ok) { /* that last event was [DONE] */
      finish(c, 1, 0);
      return -1;
    }
    if (!c->finished && c->num_events == 0) {
      note_error(c->run, c, WEIR_BENCH_ERR_MALFORMED, "HTTP 200 but not an event stream: %.100s",
                 c->line ? c->line : "");
      finish(c, 0, WEIR_BENCH_ERR_MALFORMED);
    }
    if (!c->finished) {
      note_error(c->run, c, WEIR_BENCH_ERR_TRUNCATED,
                 "response ended before data: [DONE] (after %d chunks)", c->num_chunks);
      finish(c, 0, WEIR_BENCH_ERR_TRUNCATED);
    }
  }
  return -1;
}

static const llhttp_settings_t *settings(void) {
  static llhttp_settings_t s;
  static int init;
  if (!init) {
    llhttp_settings_init(&s);
    s.on_headers_complete = on_headers_complete;
    s.on_body = on_body;
    s.on_message_complete = on_message_complete;
    init = 1;
  }
  return &s;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  sock *s = h->data;
  (void)suggested;
  buf->base = s->run->readbuf;
  buf->len = sizeof s->run->readbuf;
}

static void open_sock(conn *c);
static int send_req(conn *c);

/* A request sent on a kept-alive connection that the server closed before any byte of the
 * answer came (it timed the idle connection out or evicted it, a race no client can avoid)
 * is sent again, once, on a fresh connection. Returns 1 when it was. */
static int retry(conn *c) {
  runner *r = c->run;
  if (!c->reused || c->retried || c->got_bytes || c->finished || r->stopping) return 0;
  if (c->s) sock_close(c->s);
  c->retried = 1;
  c->reused = 0;
  c->status = 0;
  llhttp_init(&c->parser, HTTP_RESPONSE, settings());
  c->parser.data = c;
  r->retries++;
  open_sock(c);
  return 1;
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  sock *s = st->data;
  conn *c = s->cur;
  if (!c) {
    /* Idle: the server closed it, or sent what no request asked for; either way it can
     * carry no request. */
    if (nread != 0) sock_close(s);
    return;
  }
  if (c->finished) return;
  g_read_time = now_ms(c->run);
  if (nread > 0) {
    c->got_bytes = 1;
    llhttp_errno_t e = llhttp_execute(&c->parser, buf->base, (size_t)nread);
    if (c->finished) return;
    if (e != HPE_OK) {
      note_error(c->run, c, WEIR_BENCH_ERR_MALFORMED, "HTTP response parse error: %s",
                 llhttp_get_error_reason(&c->parser));
      finish(c, 0, WEIR_BENCH_ERR_MALFORMED);
    }
    return;
  }
  if (nread == 0) return;
  /* EOF or a read error. */
  if (!c->got_bytes) {
    if (retry(c)) return;
    note_error(c->run, c, WEIR_BENCH_ERR_CONNECT, "connection closed before any response (%s)",
               uv_strerror((int)nread));
    finish(c, 0, WEIR_BENCH_ERR_CONNECT);
    return;
  }
  if (nread == UV_EOF) {
    /* A body delimited by the connection's end completes here. */
    llhttp_errno_t e = llhttp_finish(&c->parser);
    if (c->finished) return;
    (void)e;
  }
  if (c->done_ok) { /* the answer was whole; only its framing was cut */
    finish(c, 1, 0);
    return;
  }
  if (c->status && c->status != 200) {
    finish_http_error(c);
    return;
  }
  note_error(c->run, c, WEIR_BENCH_ERR_TRUNCATED, "stream cut (%s) before data: [DONE] after %d chunks",
             nread == UV_EOF ? "connection closed" : uv_strerror((int)nread), c->num_chunks);
  finish(c, 0, WEIR_BENCH_ERR_TRUNCATED);
}

static void write_cb(uv_write_t *req, int status) {
  conn *c = req->data;
  /* A write on a connection the request has since left (a retry closed it) is stale. */
  int stale = c->ws != c->s;
  c->ws = NULL;
  if (status < 0 && !stale && !c->finished && !c->got_bytes && !retry(c)) {
    note_error(c->run, c, WEIR_BENCH_ERR_CONNECT, "sending the request failed: %s",
               uv_strerror(status));
    finish(c, 0, WEIR_BENCH_ERR_CONNECT);
  }
  conn_unref(c);
}

static int send_req(conn *c) {
  uv_buf_t b = uv_buf_init(c->req, (unsigned)c->req_len);
  c->write_req.data = c;
  int rc = uv_write(&c->write_req, (uv_stream_t *)&c->s->tcp, &b, 1, write_cb);
  if (rc == 0) {
    c->refs++;
    c->ws = c->s;
  }
  return rc;
}

static void connect_cb(uv_connect_t *req, int status) {
  sock *s = req->data;
  conn *c = s->cur;
  if (!c || c->finished) { /* the request ended (timeout, cancel) while connecting */
    sock_close(s);
    return;
  }
  if (status < 0) {
    note_error(c->run, c, WEIR_BENCH_ERR_CONNECT, "connect to %s:%d failed: %s", c->run->t->host,
               c->run->t->port, uv_strerror(status));
    finish(c, 0, WEIR_BENCH_ERR_CONNECT);
    return;
  }
  s->connected = 1;
  uv_tcp_nodelay(&s->tcp, 1);
  /* Reading stays on for the connection's life: while idle it sees the server's close. */
  int rc = uv_read_start((uv_stream_t *)&s->tcp, alloc_cb, read_cb);
  if (rc == 0) rc = send_req(c);
  if (rc < 0) {
    note_error(c->run, c, WEIR_BENCH_ERR_CONNECT, "sending the request failed: %s", uv_strerror(rc));
    finish(c, 0, WEIR_BENCH_ERR_CONNECT);
  }
}

/* Opens a fresh connection for request c; the request is sent once it connects. */
static void open_sock(conn *c) {
  runner *r = c->run;
  sock *s = calloc(1, sizeof *s);
  if (!s) {
    note_error(r, c, WEIR_BENCH_ERR_CONNECT, "out of memory opening a connection");
    finish(c, 0, WEIR_BENCH_ERR_CONNECT);
    return;
  }
  s->run = r;
  s->cur = c;
  c->s = s;
  uv_tcp_init(&r->loop, &s->tcp);
  s->tcp.data = s->connect_req.data = s;
  r->conns_opened++;
  int rc = uv_tcp_connect(&s->connect_req, &s->tcp, (const struct sockaddr *)&r->addr, connect_cb);
  if (rc < 0) {
    note_error(r, c, WEIR_BENCH_ERR_CONNECT, "connect to %s:%d failed: %s", r->t->host, r->t->port,
               uv_strerror(rc));
    finish(c, 0, WEIR_BENCH_ERR_CONNECT);
  }
}

static void request_timeout(conn *c) {
  if (c->done_ok) { /* the answer was whole; the response's framing never ended */
    finish(c, 1, 0);
    return;
  }
  note_error(c->run, c, WEIR_BENCH_ERR_TIMEOUT, "no complete answer within %.1f s",
             c->run->load->request_timeout_s);
  finish(c, 0, WEIR_BENCH_ERR_TIMEOUT);
}

static char *build_request(runner *r, const char *body, size_t *len) {
  const weir_bench_target *t = r->t;
  char auth[600] = "";
  if (t->api_key && *t->api_key) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", t->api_key);
  char *s = NULL;
  /* HTTP/1.1 keeps the connection by default; without keep-alive the client asks to close. */
  int n = asprintf(&s,
                   "POST %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: weir-bench/" WEIR_VERSION
                   "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                   "%s%sContent-Length: %zu\r\n\r\n%s",
                   r->path, t->host, t->port, r->keep_alive ? "" : "Connection: close\r\n", auth,
                   strlen(body), body);
  if (n < 0) return NULL;
  *len = (size_t)n;
  return s;
}
/* Records a request that could not even be built as failed, so counts stay honest. */
static void issue(runner *r, double scheduled_ms) {
  int64_t index = r->issued++;
  int64_t rec_i = -1;
  if (r->phase == 0) {
    if (r->num_recs == r->cap_recs) {
      int64_t nc = r->cap_recs ? r->cap_recs * 2 : 256;
      weir_bench_record *nr = realloc(r->recs, sizeof *nr * (size_t)nc);
      if (!nr) {
        r->fail_rc = WEIR_E_NOMEM;
        r->stopping = 1;
        return;
      }
      r->recs = nr;
      r->cap_recs = nc;
    }
    rec_i = r->num_recs++;
    weir_bench_record *rec = &r->recs[rec_i];
    memset(rec, 0, sizeof *rec);
    rec->scheduled_ms = scheduled_ms;
    rec->start_ms = now_ms(r);
    rec->usage_prompt = rec->usage_completion = -1;
    rec->err = -1;
  }
  conn *c = calloc(1, sizeof *c);
  weir_bench_prompt p;
  char *body = NULL;
  if (!c || weir__bench_workload_get(r->w, r->phase, index, &p) != WEIR_OK) {
    free(c);
    r->fail_rc = WEIR_E_NOMEM;
    r->stopping = 1;
    if (rec_i >= 0) r->num_recs--;
    return;
  }
  if (rec_i >= 0) r->recs[rec_i].expected_input = p.expected_input;
  body = weir__bench_request_body(r->w, &p, r->t->model);
  weir__bench_prompt_free(&p);
  if (body) c->req = build_request(r, body, &c->req_len);
  free(body);
  if (!c->req) {
    free(c);
    r->fail_rc = WEIR_E_NOMEM;
    r->stopping = 1;
    if (rec_i >= 0) r->num_recs--;
    return;
  }
  c->run = r;
  c->rec = rec_i;
  llhttp_init(&c->parser, HTTP_RESPONSE, settings());
  c->parser.data = c;
  c->refs = 1;
  c->next = r->active;
  if (r->active) r->active->prev = c;
  r->active = c;
  r->in_flight++;
  c->deadline_ms = now_ms(r) + r->load->request_timeout_s * 1000.0;
  if (!r->keep_alive || !r->idle) {
    open_sock(c);
    return;
  }
  sock *s = r->idle;
  idle_remove(r, s);
  uv_ref((uv_handle_t *)&s->tcp);
  s->cur = c;
  c->s = s;
  c->reused = 1;
  int rc = send_req(c);
  if (rc < 0 && !retry(c)) {
    note_error(r, c, WEIR_BENCH_ERR_CONNECT, "sending the request failed: %s", uv_strerror(rc));
    finish(c, 0, WEIR_BENCH_ERR_CONNECT);
  }
}

/* ------------------------------------------------------------------ scheduling */

static int may_issue(runner *r) {
  if (r->stopping || weir__bench_interrupted) return 0;
  if (r->limit > 0 && r->issued >= r->limit) return 0;
  if (r->issue_until_ms > 0 && now_ms(r) >= r->issue_until_ms) return 0;
  return 1;
}

/* Called when a slot frees: the closed loop refills it, the open loop serves its queue. */
static void schedule_more(runner *r) {
  if (!r->open_loop) {
    while (r->in_flight < r->cap && may_issue(r)) issue(r, now_ms(r));
    return;
  }
  while (r->pending_head < r->pending_tail && (r->cap <= 0 || r->in_flight < r->cap) &&
         !r->stopping && !weir__bench_interrupted)
    issue(r, r->pending[r->pending_head++]);
}

static void arrival_cb(uv_timer_t *t) {
  runner *r = t->data;
  double now = now_ms(r);
  while (r->next_arrival < r->num_arrivals && may_issue(r)) {
    double due = r->arrivals[r->next_arrival] * 1000.0;
    if (due > now) break;
    r->next_arrival++;
    if (r->cap > 0 && r->in_flight >= r->cap) r->pending[r->pending_tail++] = due;
    else issue(r, due);
  }
  if (r->next_arrival < r->num_arrivals && may_issue(r)) {
    double wait = r->arrivals[r->next_arrival] * 1000.0 - now_ms(r);
    /* libuv timers tick in whole milliseconds: round up so a request is never sent early. */
    uint64_t ms = wait <= 0 ? 0 : (uint64_t)ceil(wait);
    uv_timer_start(&r->arrival_timer, arrival_cb, ms, 0);
  }
}

static void tick_cb(uv_timer_t *t) {
  runner *r = t->data;
  double now = now_ms(r);
  if (weir__bench_interrupted || (r->deadline_ms > 0 && now >= r->deadline_ms)) {
    if (!r->stopping) cancel_all(r);
    return;
  }
  /* Per-request timeouts, to the tick (TICK_MS): a timer per request cost more than the
   * requests of a cached answer. */
  for (conn *c = r->active, *n; c; c = n) {
    n = c->next;
    if (now >= c->deadline_ms) request_timeout(c);
  }
  if (!weir__bench_progress || ++r->ticks % 5) return;
  double dt = now - r->last_progress_ms;
  if (dt > 0) r->progress_rate = r->chunks_since_tick * 1000.0 / dt;
  r->chunks_since_tick = 0;
  r->last_progress_ms = now;
  char total[32] = "";
  if (r->phase == 0 && r->limit > 0) snprintf(total, sizeof total, "/%lld", (long long)r->limit);
  fprintf(stderr, "\r\033[K%s%s done %lld%s  in flight %d  %.1f tok/s  errors %lld  %.1f s",
          r->label ? r->label : "", r->phase ? " warm-up" : "", (long long)r->done_count, total,
          r->in_flight, r->progress_rate, (long long)r->err_count, now / 1000.0);
  fflush(stderr);
}

/* Runs one phase to completion: every request sent has ended when it returns. */
static void run_phase(runner *r) {
  r->t0_ns = uv_hrtime();
  r->issued = r->done_count = r->err_count = 0;
  r->stopping = 0;
  r->last_progress_ms = 0;
  r->chunks_since_tick = 0;
  double max_time = r->load->max_time_s;
  r->deadline_ms = max_time > 0 ? max_time * 1000.0 : 0;
  uv_timer_start(&r->tick_timer, tick_cb, TICK_MS, TICK_MS);
  uv_unref((uv_handle_t *)&r->tick_timer);
  if (r->open_loop && r->phase == 0) {
    r->next_arrival = 0;
    r->pending_head = r->pending_tail = 0;
    arrival_cb(&r->arrival_timer);
  } else {
    schedule_more(r);
  }
  uv_run(&r->loop, UV_RUN_DEFAULT);
  free_graveyard(r);
  uv_timer_stop(&r->tick_timer);
  if (weir__bench_progress) fprintf(stderr, "\r\033[K");
}

static int resolve(const char *host, int port, struct sockaddr_storage *out) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) != 0 || !res) return WEIR_E_NOTFOUND;
  memcpy(out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return WEIR_OK;
}

static void walk_close(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int weir__bench_run(const weir_bench_target *t, const weir_bench_workload *w,
                    const weir_bench_load *load, const char *progress_label,
                    weir_bench_run *out) {
  memset(out, 0, sizeof *out);
  int rc = WEIR_OK;
  runner *r = calloc(1, sizeof *r);
  if (!r) return WEIR_E_NOMEM;
  r->t = t;
  r->w = w;
  r->load = load;
  r->label = progress_label;
  r->keep_alive = !load->no_keep_alive;
  r->path = w->endpoint == WEIR_BENCH_EP_CHAT ? "/v1/chat/completions" : "/v1/completions";
  if ((rc = resolve(t->host, t->port, &r->addr))) goto free_runner;
  if (uv_loop_init(&r->loop)) {
    rc = WEIR_E_INTERNAL;
    goto free_runner;
  }
  uv_timer_init(&r->loop, &r->arrival_timer);
  uv_timer_init(&r->loop, &r->tick_timer);
  r->arrival_timer.data = r->tick_timer.data = r;
  uv_check_init(&r->loop, &r->check_handle);
  r->check_handle.data = r;
  uv_check_start(&r->check_handle, check_cb);
  uv_unref((uv_handle_t *)&r->check_handle); /* it never keeps a phase running */

  /* Warm-up: a closed loop at the run's concurrency, its requests discarded. */
  if (load->warmup > 0 && !weir__bench_interrupted) {
    r->phase = 1;
    r->open_loop = 0;
    r->cap = load->concurrency > 0 ? load->concurrency : 1;
    r->limit = load->warmup;
    r->issue_until_ms = 0;
    run_phase(r);
  }

  r->phase = 0;
  r->open_loop = load->rate > 0;
  r->cap = load->concurrency;
  if (!r->open_loop && r->cap <= 0) r->cap = 1;
  r->limit = load->num_requests;
  r->issue_until_ms = load->duration_s > 0 ? load->duration_s * 1000.0 : 0;
  if (r->open_loop) {
    int64_t max_n = load->num_requests > 0 ? load->num_requests
                                           : (int64_t)(load->rate * load->duration_s * 3) + 1000;
    r->arrivals = malloc(sizeof *r->arrivals * (size_t)max_n);
    r->pending = malloc(sizeof *r->pending * (size_t)max_n);
    if (!r->arrivals || !r->pending) {
      rc = WEIR_E_NOMEM;
      goto close_loop;
    }
    r->num_arrivals = weir__bench_arrivals(w->seed, load->rate, load->burstiness,
                                           load->duration_s, max_n, r->arrivals);
  }
  if (!weir__bench_interrupted) run_phase(r);
  rc = r->fail_rc;

  out->recs = r->recs;
  out->num_recs = r->num_recs;
  r->recs = NULL;
  out->interrupted = weir__bench_interrupted || r->stopping;
  double first = INFINITY, last = 0, lag_sum = 0, lag_max = 0;
  for (int64_t i = 0; i < out->num_recs; i++) {
    weir_bench_record *rec = &out->recs[i];
    if (rec->start_ms < first) first = rec->start_ms;
    if (rec->end_ms > last) last = rec->end_ms;
    double lag = rec->start_ms - rec->scheduled_ms;
    if (lag < 0) lag = 0;
    lag_sum += lag;
    if (lag > lag_max) lag_max = lag;
  }
  out->duration_s = out->num_recs ? (last - first) / 1000.0 : 0;
  out->sched_lag_mean_ms = out->num_recs ? lag_sum / (double)out->num_recs : 0;
  out->sched_lag_max_ms = lag_max;
  out->conns_opened = r->conns_opened;
  out->retries = r->retries;
  memcpy(out->err_example, r->err_example, sizeof r->err_example);
  memset(r->err_example, 0, sizeof r->err_example);
close_loop:
  while (r->idle) sock_close(r->idle);
  uv_walk(&r->loop, walk_close, NULL);
  uv_run(&r->loop, UV_RUN_DEFAULT);
  free_graveyard(r); /* writes the close cancelled */
  uv_loop_close(&r->loop);
free_runner:
  for (int i = 0; i < WEIR_BENCH_ERR_COUNT; i++) free(r->err_example[i]);
  free(r->recs);
  free(r->arrivals);
  free(r->pending);
  free(r);
  return rc;
}

void weir__bench_run_free(weir_bench_run *r) {
  if (!r) return;
  for (int64_t i = 0; i < r->num_recs; i++) {
    free(r->recs[i].chunk_ms);
    free(r->recs[i].error);
  }
  free(r->recs);
  for (int i = 0; i < WEIR_BENCH_ERR_COUNT; i++) free(r->err_example[i]);
  memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ control requests */

void weir__bench_calibrate(weir_bench_target *t) {
  /* 400 words: enough that one odd word does not move the ratio, small for any server. */
  enum { WORDS = 400 };
  t->tokens_per_word = 0;
  char *text = weir__bench_words(0x63616c6962ULL, WORDS);
  cJSON *req = cJSON_CreateObject();
  char *json = NULL, *body = NULL;
  int status = 0;
  if (!text || !req) goto done;
  if (t->model) cJSON_AddStringToObject(req, "model", t->model);
  cJSON_AddStringToObject(req, "prompt", text);
  cJSON_AddBoolToObject(req, "add_special_tokens", 0);
  if (!(json = cJSON_PrintUnformatted(req))) goto done;
  if (weir__bench_http(t->host, t->port, "POST", "/tokenize", json, t->api_key, 10000, &status,
                       &body) != WEIR_OK) {
    snprintf(t->calibration, sizeof t->calibration,
             "POST /tokenize failed; prompts assume 1 token per word");
    goto done;
  }
  if (status != 200) {
    snprintf(t->calibration, sizeof t->calibration,
             "no /tokenize (HTTP %d); prompts assume 1 token per word", status);
    goto done;
  }
  cJSON *o = cJSON_Parse(body);
  cJSON *count = cJSON_GetObjectItem(o, "count"), *tokens = cJSON_GetObjectItem(o, "tokens");
  double n = cJSON_IsNumber(count) ? count->valuedouble
             : cJSON_IsArray(tokens) ? (double)cJSON_GetArraySize(tokens) : 0;
  cJSON_Delete(o);
  double tpw = n / WORDS;
  if (!(tpw > 0.05 && tpw < 50)) {
    snprintf(t->calibration, sizeof t->calibration,
             "/tokenize answered %.0f tokens for %d words; ignored, prompts assume 1 token per "
             "word", n, WORDS);
    goto done;
  }
  t->tokens_per_word = tpw;
  snprintf(t->calibration, sizeof t->calibration,
           "%.3f tokens per word on the server's tokenizer (POST /tokenize, %d words)", tpw, WORDS);
done:
  free(body);
  free(json);
  cJSON_Delete(req);
  free(text);
}

int weir__bench_parse_url(const char *url, char **host, int *port) {
  if (!strncmp(url, "https://", 8)) return WEIR_E_NOTSUP;
  if (strncmp(url, "http://", 7)) return WEIR_E_INVAL;
  const char *h = url + 7, *end = h + strcspn(h, "/");
  const char *colon = NULL;
  if (*h == '[') { /* [v6]:port */
    const char *rb = memchr(h, ']', (size_t)(end - h));
    if (!rb) return WEIR_E_INVAL;
    colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
    *host = strndup(h + 1, (size_t)(rb - h - 1));
  } else {
    colon = memchr(h, ':', (size_t)(end - h));
    *host = strndup(h, (size_t)((colon ? colon : end) - h));
  }
  if (!*host) return WEIR_E_NOMEM;
  *port = 80;
  if (colon) {
    char *e = NULL;
    long p = strtol(colon + 1, &e, 10);
    if (e != end || p <= 0 || p > 65535) {
      free(*host);
      *host = NULL;
      return WEIR_E_INVAL;
    }
    *port = (int)p;
  }
  if (!**host) {
    free(*host);
    *host = NULL;
    return WEIR_E_INVAL;
  }
  return WEIR_OK;
}

typedef struct get_state {
  int status;
  char *body;
  size_t len, cap;
  int complete;
} get_state;

static int get_on_headers(llhttp_t *p) {
  ((get_state *)p->data)->status = p->status_code;
  return 0;
}
static int get_on_body(llhttp_t *p, const char *at, size_t n) {
  get_state *g = p->data;
  return buf_append(&g->body, &g->len, &g->cap, at, n) ? -1 : 0;
}
static int get_on_complete(llhttp_t *p) {
  ((get_state *)p->data)->complete = 1;
  return 0;
}

static long long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int weir__bench_http(const char *host, int port, const char *method, const char *path,
                     const char *json, const char *api_key, int timeout_ms, int *status,
                     char **body) {
  struct sockaddr_storage addr;
  int rc = resolve(host, port, &addr);
  if (rc) return rc;
  long long deadline = mono_ms() + timeout_ms;
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return WEIR_E_IO;
  get_state g = {0};
  llhttp_t parser;
  llhttp_settings_t s;
  char *req = NULL;
  socklen_t alen = addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (connect(fd, (struct sockaddr *)&addr, alen) < 0 && errno != EINPROGRESS) {
    rc = WEIR_E_IO;
    goto close_fd;
  }
  struct pollfd pf = {.fd = fd, .events = POLLOUT};
  if (poll(&pf, 1, timeout_ms) <= 0) {
    rc = WEIR_E_TIMEOUT;
    goto close_fd;
  }
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
  if (soerr) {
    rc = WEIR_E_IO;
    goto close_fd;
  }
  char auth[600] = "";
  if (api_key && *api_key) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", api_key);
  int n = json ? asprintf(&req, "%s %s HTTP/1.1\r\nHost: %s:%d\r\n%sContent-Type: "
                          "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n"
                          "\r\n%s", method, path, host, port, auth, strlen(json), json)
               : asprintf(&req, "%s %s HTTP/1.1\r\nHost: %s:%d\r\n%sConnection: close\r\n\r\n",
                          method, path, host, port, auth);
  if (n < 0) {
    req = NULL;
    rc = WEIR_E_NOMEM;
    goto close_fd;
  }
  for (ssize_t off = 0; off < n;) {
    ssize_t k = write(fd, req + off, (size_t)(n - off));
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) {
      struct pollfd wp = {.fd = fd, .events = POLLOUT};
      if (mono_ms() >= deadline || poll(&wp, 1, (int)(deadline - mono_ms())) <= 0) {
        rc = WEIR_E_TIMEOUT;
        goto close_fd;
      }
      continue;
    }
    if (k <= 0) {
      rc = WEIR_E_IO;
      goto close_fd;
    }
    off += k;
  }
  llhttp_settings_init(&s);
  s.on_headers_complete = get_on_headers;
  s.on_body = get_on_body;
  s.on_message_complete = get_on_complete;
  llhttp_init(&parser, HTTP_RESPONSE, &s);
  parser.data = &g;
  char buf[8192];
  while (!g.complete) {
    long long left = deadline - mono_ms();
    if (left <= 0) {
      rc = WEIR_E_TIMEOUT;
      goto close_fd;
    }
    pf.events = POLLIN;
    int pr = poll(&pf, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      rc = WEIR_E_TIMEOUT;
      goto close_fd;
    }
    ssize_t k = read(fd, buf, sizeof buf);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) {
      llhttp_finish(&parser);
      break;
    }
    if (llhttp_execute(&parser, buf, (size_t)k) != HPE_OK && !g.complete) {
      rc = WEIR_E_FORMAT;
      goto close_fd;
    }
  }
  if (!g.status) {
    rc = WEIR_E_FORMAT;
    goto close_fd;
  }
  *status = g.status;
  *body = g.body ? g.body : strdup("");
  g.body = NULL;
close_fd:
  free(req);
  free(g.body);
  close(fd);
  return rc;
}
