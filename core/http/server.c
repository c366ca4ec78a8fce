/* The HTTP/1.1 transport: accepting connections, parsing requests with llhttp, enforcing the
 * limits of the [server] config, ordering pipelined responses, writing full and streamed
 * (chunked) responses, bounding what a connection may have unsent, and closing connections
 * without losing a byte that was written.
 *
 * Ownership. A connection owns its queued requests; a request being answered by a generation
 * job is referenced by that job (job->r) and the job by the request (r->job). When the
 * connection goes away first, the handlers' client_gone detaches the job, which lives on until
 * the engine's final events arrive. Connection memory is freed only in the close callback of
 * its last handle. Each write owns its buffer, freed when the write completes.
 *
 * Bounds. A connection holds at most MAX_PIPELINED parsed requests: the parser pauses at that
 * count (the unparsed rest of the read is kept) and reading stops until half of them are
 * answered. Its unsent output is bounded by server.max_pending_output_bytes: past it the
 * connection stops reading and dispatching, its generation is paused in the engine, and both
 * resume once the writes have drained to half; if nothing drains for server.stall_timeout_ms
 * the connection is closed (its requests aborted, their KV blocks freed).
 *
 * Admission. A new connection has server.header_timeout_ms to send its first byte. When
 * server.max_connections are open, the connection idle for longest (no request queued or in
 * flight, nothing unsent) is closed to make room; only when none is idle is the new one
 * refused with 503. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "http/http_internal.h"
#include "util/utf8.h"
#include "util/log.h"
#include "weir/status.h"

#define MAX_PIPELINED 16
#define LINGER_MS 2000
/* One uv_buf_t holds at most this much (its length is an unsigned int). */
#define MAX_BUF_CHUNK ((size_t)1 << 30)

enum { T_NONE = 0, T_IDLE, T_HEADER, T_BODY, T_LINGER, T_STALL };

typedef struct write_req {
  uv_write_t w;
  weir__http_conn *c;
  struct write_req *next; /* in-process connections: the queue of unfinished writes */
  size_t len;
  char data[];
} write_req;

struct weir__http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  weir__http_server *srv;
  weir__http_conn *prev, *next;
  weir__http_conn *idle_prev, *idle_next; /* the server's idle list, oldest first */
  int in_idle;
  uint64_t idle_since;        /* uv_now() when it joined the idle list */
  llhttp_t parser;
  weir__http_req *parsing;    /* the request whose bytes are arriving */
  weir__http_req *head, *tail; /* complete requests, answered in this order */
  int queued;
  /* The request line and header section of the message being parsed, counted whole (names,
   * values, separators, whitespace, line ends), across reads: hdr_bytes from earlier reads
   * plus, in this read, from hdr_from on. */
  size_t hdr_bytes;
  const char *hdr_from;
  int in_headers;
  int auth_headers;           /* Authorization headers seen (more than one: 400) */
  size_t ext_bytes;           /* chunk extension bytes of this message */
  int host_headers;           /* Host headers in the request being parsed */
  weir_buf field, value;     /* the header being parsed */
  int in_value;
  int parse_error_status;     /* set by a callback that refuses the request */
  const char *parse_error_message;
  weir_buf in;               /* received bytes not parsed yet (the parser paused) */
  int parser_paused;          /* llhttp returned HPE_PAUSED: MAX_PIPELINED reached */
  int got_bytes;              /* anything received at all */
  int pending_writes;
  size_t out_bytes;           /* bytes of writes not completed yet */
  int backlogged;             /* out_bytes passed the limit; not yet drained to half */
  size_t stall_mark;          /* unsent bytes when the stall timer was (re)armed */
  int open_handles;
  int closing;                /* uv_close was called */
  int close_after_writes;     /* the last response is out: linger, then close */
  int lingering;
  int reading;
  int processing;
  int no_more_requests;       /* ignore further bytes (after an error or Connection: close) */
  int refused;                /* over max_connections: a canned 503, then close */
  int doomed;                 /* a write failed: closing on the next loop iteration */
  int timer_mode;
  /* The timer is re-armed lazily (conn_set_timer): timer_due is when the current mode's
   * timeout is due, timer_armed when the libuv timer will fire (0: not armed). */
  uint64_t timer_due, timer_armed;
  int client_key_known;       /* client_key is the peer's (read once per connection) */
  uint64_t client_key;
  /* In-process connections (no socket): see weir__http_conn_open_mem. */
  int mem;
  weir__http_sink_cb sink;
  void *sink_arg;
  write_req *mem_head, *mem_tail;
};

/* ---- buffers ---------------------------------------------------------------------------- */

size_t weir__http_split_bufs(char *base, size_t len, uv_buf_t *bufs, size_t max_bufs) {
  size_t n = 0;
  while (len > 0 && n < max_bufs) {
    size_t k = len < MAX_BUF_CHUNK ? len : MAX_BUF_CHUNK;
    bufs[n++] = uv_buf_init(base, (unsigned int)k);
    base += k;
    len -= k;
  }
  return len == 0 ? n : 0;
}

/* ---- requests --------------------------------------------------------------------------- */

static void req_free(weir__http_req *r) {
  if (!r) return;
  weir_buf_free(&r->url);
  weir_buf_free(&r->content_type);
  weir_buf_free(&r->authorization);
  weir_buf_free(&r->body);
  weir_buf_free(&r->cork);
  free(r);
}

void weir__http_path(const weir__http_req *r, char *out, size_t cap) {
  const char *u = r->url.p ? r->url.p : "";
  size_t n = strcspn(u, "?#");
  if (n >= cap) n = cap - 1;
  memcpy(out, u, n);
  out[n] = '\0';
  weir_utf8_trim(out);
}

/* ---- the idle list ---------------------------------------------------------------------- */

static void idle_remove(weir__http_conn *c) {
  if (!c->in_idle) return;
  weir__http_server *s = c->srv;
  if (c->idle_prev) c->idle_prev->idle_next = c->idle_next;
  else s->idle_head = c->idle_next;
  if (c->idle_next) c->idle_next->idle_prev = c->idle_prev;
  else s->idle_tail = c->idle_prev;
  c->idle_prev = c->idle_next = NULL;
  c->in_idle = 0;
}

/* A connection with no request queued or in flight may be closed to admit another. */
static void idle_add(weir__http_conn *c) {
  if (c->in_idle || c->closing || c->refused || c->close_after_writes || c->lingering) return;
  weir__http_server *s = c->srv;
  c->in_idle = 1;
  c->idle_since = uv_now(s->loop);
  c->idle_next = NULL;
  c->idle_prev = s->idle_tail;
  if (s->idle_tail) s->idle_tail->idle_next = c;
  else s->idle_head = c;
  s->idle_tail = c;
}

/* ---- connection life cycle -------------------------------------------------------------- */

static void conn_process(weir__http_conn *c);
static void conn_resume(weir__http_conn *c);
static void conn_pause_reading(weir__http_conn *c);
static void conn_set_timer(weir__http_conn *c, int mode);
static void on_timer(uv_timer_t *t);
static int queue_error(weir__http_conn *c, int status, const char *message);
static void write_done(write_req *wr, int status);

static void on_handle_closed(uv_handle_t *h) {
  weir__http_conn *c = h->data;
  if (--c->open_handles > 0) return;
  /* An in-process connection's unfinished writes die with it, as a socket's are canceled. */
  for (write_req *w = c->mem_head, *n; w; w = n) {
    n = w->next;
    free(w);
  }
  weir_buf_free(&c->field);
  weir_buf_free(&c->value);
  weir_buf_free(&c->in);
  c->srv->num_conn_structs--;
  free(c);
}

static void conn_close(weir__http_conn *c) {
  if (c->closing) return;
  c->closing = 1;
  weir__http_server *s = c->srv;
  idle_remove(c);
  /* Requests still queued or in flight: their generation is pointless now. */
  for (weir__http_req *r = c->head, *n; r; r = n) {
    n = r->next;
    if (r->job) r->srv->handlers->client_gone(r->job);
    req_free(r);
  }
  c->head = c->tail = NULL;
  req_free(c->parsing);
  c->parsing = NULL;
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  if (!c->refused) s->num_conns--;
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
  if (!c->mem) uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

/* Closing from inside a response call would free the request its caller still holds: the
 * connection stops writing now and closes from a zero timer on the next loop iteration. */
static void conn_close_soon(weir__http_conn *c) {
  if (c->closing || c->doomed) return;
  c->doomed = 1;
  idle_remove(c);
  conn_pause_reading(c);
  conn_set_timer(c, T_LINGER);
  c->timer_due = c->timer_armed = uv_now(c->srv->loop);
  uv_timer_start(&c->timer, on_timer, 0, 0);
}

static void on_shutdown(uv_shutdown_t *sh, int status) {
  (void)status;
  free(sh);
}

/* Everything is written: send FIN, keep reading (and discarding) for a moment so that a
 * client still sending its body does not get a reset that destroys our response. */
static void conn_linger(weir__http_conn *c) {
  if (c->closing || c->lingering || c->doomed) return;
  c->lingering = 1;
  idle_remove(c);
  if (!c->mem) {
    uv_shutdown_t *sh = malloc(sizeof *sh);
    if (!sh || uv_shutdown(sh, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
      free(sh);
      conn_close(c);
      return;
    }
  }
  conn_set_timer(c, T_LINGER);
}

/* Unsent bytes: libuv's queue for a socket (it moves as the peer reads, even inside one big
 * write), the unfinished writes for an in-process connection. */
static size_t conn_unsent(weir__http_conn *c) {
  return c->mem ? c->out_bytes : uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
}

static size_t out_limit(const weir__http_conn *c) {
  int64_t v = c->srv->cfg->max_pending_output_bytes;
  return v > 0 ? (size_t)v : SIZE_MAX;
}

/* The connection's output passed the limit: stop taking work from it and pause what it is
 * generating until the client reads. */
static void conn_backlog_start(weir__http_conn *c) {
  c->backlogged = 1;
  conn_pause_reading(c);
  if (c->head && c->head->job) c->srv->handlers->set_paused(c->head->job, 1);
  c->stall_mark = conn_unsent(c);
  conn_set_timer(c, T_STALL);
}

static void conn_backlog_end(weir__http_conn *c) {
  c->backlogged = 0;
  if (c->head && c->head->job) c->srv->handlers->set_paused(c->head->job, 0);
  if (c->timer_mode == T_STALL) conn_set_timer(c, c->parsing ? T_BODY : c->head ? T_NONE : T_IDLE);
  conn_process(c);
}

static void write_done(write_req *wr, int status) {
  weir__http_conn *c = wr->c;
  size_t len = wr->len;
  free(wr);
  c->pending_writes--;
  c->out_bytes -= len;
  if (c->closing) return;
  if (status < 0) {
    conn_close(c); /* the peer is gone */
    return;
  }
  if (c->backlogged) {
    if (c->out_bytes <= out_limit(c) / 2) {
      conn_backlog_end(c);
      if (c->closing) return;
    } else {
      /* Progress: the stall clock starts again. */
      c->stall_mark = conn_unsent(c);
      conn_set_timer(c, T_STALL);
    }
  }
  if (c->pending_writes == 0 && c->close_after_writes && !c->doomed) conn_linger(c);
}

static void on_write(uv_write_t *w, int status) { write_done((write_req *)w, status); }

/* A write of len bytes for c, to be filled by the caller and handed to conn_submit; NULL
 * (the connection is closing, or out of memory: then it closes) when nothing may be sent. */
static write_req *conn_write_new(weir__http_conn *c, size_t len) {
  if (c->closing || c->lingering || c->doomed) return NULL;
  write_req *wr = len <= SIZE_MAX - sizeof *wr ? malloc(sizeof *wr + len) : NULL;
  if (!wr) {
    weir_log(WEIR_LOG_ERROR, "http", "out of memory writing a response; closing");
    conn_close_soon(c);
    return NULL;
  }
  wr->c = c;
  wr->next = NULL;
  wr->len = len;
  return wr;
}

/* Sends a filled write (taken). */
static void conn_submit(weir__http_conn *c, write_req *wr) {
  size_t len = wr->len;
  if (c->mem) {
    c->sink(c->sink_arg, wr->data, wr->len);
    if (c->mem_tail) c->mem_tail->next = wr;
    else c->mem_head = wr;
    c->mem_tail = wr;
  } else {
    /* A uv_buf_t length is an unsigned int: larger writes go out as several buffers. */
    uv_buf_t bufs[16];
    size_t nbufs = weir__http_split_bufs(wr->data, wr->len, bufs, 16);
    int rc = nbufs ? uv_write(&wr->w, (uv_stream_t *)&c->tcp, bufs, (unsigned)nbufs, on_write)
                   : UV_E2BIG;
    if (rc != 0) {
      free(wr);
      conn_close_soon(c);
      return;
    }
  }
  c->pending_writes++;
  c->out_bytes += len;
  if (!c->backlogged && c->out_bytes > out_limit(c)) conn_backlog_start(c);
}

static void conn_write(weir__http_conn *c, const char *a, size_t alen, const char *b,
                       size_t blen) {
  if (alen > SIZE_MAX / 2 || blen > SIZE_MAX / 2 - alen) {
    conn_close_soon(c);
    return;
  }
  write_req *wr = conn_write_new(c, alen + blen);
  if (!wr) return;
  if (alen) memcpy(wr->data, a, alen);
  if (blen) memcpy(wr->data + alen, b, blen);
  conn_submit(c, wr);
}

static void on_timer(uv_timer_t *t) {
  weir__http_conn *c = t->data;
  c->timer_armed = 0;
  if (c->timer_mode == T_NONE) return;
  /* Armed for an earlier mode whose timeout was later replaced by a later one: wait on. */
  const uint64_t now = uv_now(c->srv->loop);
  if (now < c->timer_due) {
    uv_timer_start(&c->timer, on_timer, c->timer_due - now, 0);
    c->timer_armed = c->timer_due;
    return;
  }
  int mode = c->timer_mode;
  c->timer_mode = T_NONE;
  switch (mode) {
  case T_IDLE:
    if (!c->head) conn_close(c);
    break;
  case T_LINGER: conn_close(c); break;
  case T_STALL: {
    size_t unsent = conn_unsent(c);
    if (c->backlogged && unsent < c->stall_mark) {
      c->stall_mark = unsent;
      conn_set_timer(c, T_STALL);
      break;
    }
    weir_log(WEIR_LOG_WARN, "http",
             "a client has not read for %lld ms with %zu bytes unsent; closing its connection",
             (long long)c->srv->cfg->stall_timeout_ms, unsent);
    conn_close(c);
    break;
  }
  case T_HEADER:
    /* A connection that never sent a byte is closed without a word. */
    if (!c->got_bytes && !c->parsing && !c->head) {
      conn_close(c);
      break;
    }
    /* fall through */
  case T_BODY: {
    /* Slow or stalled client: answer 408 after whatever is ahead of it, then close. */
    if (queue_error(c, 408, mode == T_HEADER ? "timed out waiting for the request headers"
                                             : "timed out waiting for the request body"))
      return;
    conn_process(c);
    break;
  }
  default: break;
  }
}

static void conn_set_timer(weir__http_conn *c, int mode) {
  if (c->closing) return;
  /* While backed up, only the stall clock (or a close) runs. */
  if (c->backlogged && c->timer_mode == T_STALL && mode != T_STALL && mode != T_LINGER) return;
  const weir_config *cfg = c->srv->cfg;
  int64_t ms = 0;
  switch (mode) {
  case T_IDLE: ms = cfg->idle_timeout_ms; break;
  case T_HEADER: ms = cfg->header_timeout_ms; break;
  case T_BODY: ms = cfg->idle_timeout_ms; break;
  case T_LINGER: ms = LINGER_MS; break;
  case T_STALL: ms = cfg->stall_timeout_ms; break;
  default: break;
  }
  c->timer_mode = mode;
  /* Lazily: every request sets the timer four times (headers, body, none, idle), and
   * restarting a libuv timer each time was a heap removal and insertion per call. A timer
   * already armed to fire no later than the new timeout stays; when it fires, on_timer
   * waits on to the current due time, or does nothing when no timeout is set. */
  if (mode == T_NONE || ms <= 0) {
    c->timer_mode = T_NONE;
    c->timer_due = 0;
    return;
  }
  const uint64_t due = uv_now(c->srv->loop) + (uint64_t)ms;
  c->timer_due = due;
  if (c->timer_armed && c->timer_armed <= due) return;
  uv_timer_start(&c->timer, on_timer, (uint64_t)ms, 0);
  c->timer_armed = due;
}

/* ---- responses -------------------------------------------------------------------------- */

static const char *status_text(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 413: return "Payload Too Large";
  case 415: return "Unsupported Media Type";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "Unknown";
  }
}

uint64_t weir__http_client_key(const weir__http_req *r) {
  weir__http_conn *c = r->conn;
  if (!c || c->mem) return 0;
  /* A connection's peer never changes: one getpeername per connection, not per request. */
  if (c->client_key_known) return c->client_key;
  struct sockaddr_storage ss;
  int len = (int)sizeof ss;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0) return 0;
  uint64_t key = 0;
  if (ss.ss_family == AF_INET)
    key = weir_workpool_key(&((const struct sockaddr_in *)&ss)->sin_addr, 4);
  else if (ss.ss_family == AF_INET6)
    key = weir_workpool_key(&((const struct sockaddr_in6 *)&ss)->sin6_addr, 16);
  c->client_key = key;
  c->client_key_known = 1;
  return key;
}

void weir__http_count_response(weir__http_server *s, int status) {
  weir_metric **slot = status >= 100 && status < 600 ? &s->responses_by_code[status - 100] : NULL;
  weir_metric *m = slot ? *slot : NULL;
  if (!m) {
    char labels[32];
    snprintf(labels, sizeof labels, "code=\"%d\"", status);
    if (weir_metrics_register(s->metrics, "http_requests_total",
                              "HTTP responses sent, by status code.", WEIR_METRIC_COUNTER, NULL,
                              0, labels, &m) != WEIR_OK)
      return;
    if (slot) *slot = m;
  }
  weir_metric_record(m, 1);
}

/* Seconds a client should wait before retrying a 429 or 503: a full queue drains in about a
 * second; a server that is loading or shutting down takes longer (a load balancer sends
 * the retry elsewhere meanwhile). */
static int retry_after_s(const weir__http_server *s, int status) {
  if (status == 503 && s->state != WEIR__READY) return 5;
  return 1;
}

/* Every byte a response carries is valid UTF-8. What the API puts in a body is already
 * checked at its source; this is the last line of defence, and in-process harnesses
 * (fuzzing) ask for an abort instead so that the source gets fixed. */
static const char *utf8_checked(weir__http_server *s, const char *data, size_t *len,
                                char **owned) {
  *owned = NULL;
  if (!*len || weir_utf8_valid(data, *len)) return data;
  if (s->abort_on_invalid_utf8) abort();
  weir_log(WEIR_LOG_WARN, "http", "a response held invalid UTF-8; replaced by U+FFFD");
  size_t n = 0, cap = 0;
  if (weir_utf8_sanitize((const unsigned char *)data, *len, 1, owned, &n, &cap, NULL)) {
    free(*owned);
    *owned = NULL;
    *len = 0;
    return "";
  }
  *len = n;
  return *owned;
}

/* Whether the connection closes after this response. */
static int resp_closes(const weir__http_req *r) {
  const weir__http_conn *c = r->conn;
  return !r->keep_alive || r->error_status || c->no_more_requests ||
         c->srv->state >= WEIR__DRAINING;
}

static void req_done(weir__http_req *r) {
  weir__http_conn *c = r->conn;
  r->done = 1;
  if (c->closing) return;
  int closes = resp_closes(r);
  /* r is the head: responses go out in order. */
  c->head = r->next;
  if (!c->head) c->tail = NULL;
  c->queued--;
  req_free(r);
  if (closes) {
    c->no_more_requests = 1;
    for (weir__http_req *q = c->head, *n; q; q = n) {
      n = q->next;
      req_free(q);
    }
    c->head = c->tail = NULL;
    c->queued = 0;
    c->close_after_writes = 1;
    idle_remove(c);
    if (c->pending_writes == 0) conn_linger(c);
    return;
  }
  if (!c->head) idle_add(c);
  conn_process(c);
}

void weir__http_respond(weir__http_req *r, int status, const char *content_type,
                        const char *body, size_t len, const char *extra_headers) {
  weir__http_conn *c = r->conn;
  if (r->done || r->streaming) return;
  weir__http_count_response(c->srv, status);
  char *owned = NULL;
  body = utf8_checked(c->srv, body, &len, &owned);
  char retry[48] = "";
  if (status == 429 || status == 503)
    snprintf(retry, sizeof retry, "Retry-After: %d\r\n", retry_after_s(c->srv, status));
  weir_buf h = {0};
  weir_buf_printf(&h,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                   "Connection: %s\r\n%s%s%s%s%s\r\n",
                   status, status_text(status), content_type ? content_type : "text/plain",
                   len, resp_closes(r) ? "close" : "keep-alive", retry,
                   extra_headers ? extra_headers : "", r->cache_status ? "x-weir-cache: " : "",
                   r->cache_status ? r->cache_status : "", r->cache_status ? "\r\n" : "");
  if (h.oom) conn_close_soon(c);
  else conn_write(c, h.p, h.len, body, r->method == HTTP_HEAD ? 0 : len);
  weir_buf_free(&h);
  free(owned);
  req_done(r);
}

void weir__http_respond_error(weir__http_req *r, int status, const char *type,
                              const char *param, const char *code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  weir_utf8_trim(msg);
  char *body = NULL;
  cJSON *root = cJSON_CreateObject();
  cJSON *err = cJSON_AddObjectToObject(root, "error");
  if (err) {
    cJSON_AddStringToObject(err, "message", msg);
    cJSON_AddStringToObject(err, "type", type);
    if (param) cJSON_AddStringToObject(err, "param", param);
    else cJSON_AddNullToObject(err, "param");
    if (code) cJSON_AddStringToObject(err, "code", code);
    else cJSON_AddNullToObject(err, "code");
    body = cJSON_PrintUnformatted(root);
  }
  cJSON_Delete(root);
  const char *extra = NULL;
  if (status == 401) extra = "WWW-Authenticate: Bearer\r\n";
  if (body) {
    weir__http_respond(r, status, "application/json", body, strlen(body), extra);
    free(body);
  } else {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                              "\"server_error\",\"param\":null,\"code\":null}}";
    weir__http_respond(r, 500, "application/json", oom, sizeof oom - 1, NULL);
  }
}

void weir__http_stream_start(weir__http_req *r, const char *content_type) {
  weir__http_conn *c = r->conn;
  if (r->done || r->streaming) return;
  weir__http_count_response(c->srv, 200);
  r->streaming = 1;
  /* HTTP/1.0 has no chunked encoding: the end of the stream is the end of the connection. */
  r->chunked = r->http_minor >= 1;
  if (!r->chunked) r->keep_alive = 0;
  weir_buf h = {0};
  weir_buf_printf(&h,
                   "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n"
                   /* a buffering proxy (nginx) passes each event on at once */
                   "X-Accel-Buffering: no\r\n%sConnection: %s\r\n%s%s%s\r\n",
                   content_type, r->chunked ? "Transfer-Encoding: chunked\r\n" : "",
                   resp_closes(r) ? "close" : "keep-alive",
                   r->cache_status ? "x-weir-cache: " : "", r->cache_status ? r->cache_status : "",
                   r->cache_status ? "\r\n" : "");
  if (h.oom) conn_close_soon(c);
  else if (r->corked) weir_buf_append(&r->cork, h.p, h.len);
  else conn_write(c, h.p, h.len, NULL, 0);
  weir_buf_free(&h);
}

void weir__http_cork(weir__http_req *r) { r->corked = 1; }

/* Appends s to *p (the head being built without printf). */
static char *put(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}
#define PUT(p, lit) put((p), (lit), sizeof(lit) - 1)

void weir__http_stream_whole(weir__http_req *r, const char *content_type, const char *body,
                             size_t len, void (*patch)(void *arg, char *copy), void *arg) {
  weir__http_conn *c = r->conn;
  if (r->done || r->streaming || r->http_minor < 1) return;
  weir__http_count_response(c->srv, 200);
  r->streaming = 1;
  r->chunked = 1;
  /* The head weir__http_stream_start writes, byte for byte. */
  const size_t ctn = strlen(content_type);
  const int closes = resp_closes(r);
  const size_t csn = r->cache_status ? strlen(r->cache_status) : 0;
  const size_t head_max = 256 + ctn + csn; /* the fixed text below is 151 bytes */
  static const char end[] = "0\r\n\r\n";
  write_req *wr = len <= SIZE_MAX - head_max - sizeof end ? conn_write_new(c, head_max + len + sizeof end - 1) : NULL;
  if (!wr) {
    if (len > SIZE_MAX - head_max - sizeof end) conn_close_soon(c);
    req_done(r);
    return;
  }
  char *p = wr->data;
  p = PUT(p, "HTTP/1.1 200 OK\r\nContent-Type: ");
  p = put(p, content_type, ctn);
  p = PUT(p, "\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
             "Transfer-Encoding: chunked\r\nConnection: ");
  p = closes ? PUT(p, "close\r\n") : PUT(p, "keep-alive\r\n");
  if (r->cache_status) {
    p = PUT(p, "x-weir-cache: ");
    p = put(p, r->cache_status, csn);
    p = PUT(p, "\r\n");
  }
  p = PUT(p, "\r\n");
  char *copy = p;
  p = put(p, body, len);
  if (patch) patch(arg, copy);
  p = PUT(p, "0\r\n\r\n");
  wr->len = (size_t)(p - wr->data);
  conn_submit(c, wr);
  req_done(r);
}

char *weir__http_stream_append_framed(weir__http_req *r, const char *data, size_t len) {
  if (!r->streaming || r->done || !r->corked || !r->chunked) return NULL;
  size_t at = r->cork.len;
  weir_buf_append(&r->cork, data, len);
  return r->cork.oom ? NULL : r->cork.p + at;
}

void weir__http_stream_write(weir__http_req *r, const char *data, size_t len) {
  if (!r->streaming || r->done || len == 0) return;
  char *owned = NULL;
  data = utf8_checked(r->srv, data, &len, &owned);
  if (r->corked) {
    char size_line[24];
    int n = snprintf(size_line, sizeof size_line, "%zx\r\n", len);
    if (r->chunked) weir_buf_append(&r->cork, size_line, (size_t)n);
    weir_buf_append(&r->cork, data, len);
    if (r->chunked) weir_buf_append(&r->cork, "\r\n", 2);
    free(owned);
    return;
  }
  if (!r->chunked) {
    conn_write(r->conn, data, len, NULL, 0);
    free(owned);
    return;
  }
  /* One write per chunk: the size line, the data and the CRLF in one buffer. */
  char size_line[24];
  int n = snprintf(size_line, sizeof size_line, "%zx\r\n", len);
  weir_buf b = {0};
  weir_buf_append(&b, size_line, (size_t)n);
  weir_buf_append(&b, data, len);
  weir_buf_append(&b, "\r\n", 2);
  if (b.oom) conn_close_soon(r->conn);
  else conn_write(r->conn, b.p, b.len, NULL, 0);
  weir_buf_free(&b);
  free(owned);
}

void weir__http_stream_end(weir__http_req *r) {
  if (!r->streaming || r->done) return;
  if (r->corked) {
    /* A capture (the front index's rendered hits) takes the head and the chunks, not the
     * end of the stream: the fast path ends its stream here too. */
    if (r->capture && !r->cork.oom) weir_buf_append(r->capture, r->cork.p, r->cork.len);
    r->capture = NULL;
    if (r->chunked) weir_buf_append(&r->cork, "0\r\n\r\n", 5);
    if (r->cork.oom) conn_close_soon(r->conn);
    else if (r->cork.len) conn_write(r->conn, r->cork.p, r->cork.len, NULL, 0);
    weir_buf_free(&r->cork);
    r->corked = 0;
  } else if (r->chunked) {
    conn_write(r->conn, "0\r\n\r\n", 5, NULL, 0);
  }
  req_done(r);
}

/* ---- parsing ---------------------------------------------------------------------------- */

static weir__http_conn *pconn(llhttp_t *p) { return p->data; }

static int parse_fail(weir__http_conn *c, int status, const char *message) {
  if (!c->parse_error_status) {
    c->parse_error_status = status;
    c->parse_error_message = message;
  }
  return -1;
}

/* The header section so far, up to at + len, against server.max_header_bytes. The request
 * line and every header line count whole, so that many short lines (`A:`) cannot pass a
 * limit meant for bytes (issue 28). */
static int count_header_bytes(weir__http_conn *c, const char *at, size_t len) {
  if (!c->hdr_from) {
    /* The first piece of this message in this read: the request line began with the
     * method and a space just before the URL (on_url is the first data callback). */
    size_t ml = strlen(llhttp_method_name(llhttp_get_method(&c->parser))) + 1;
    c->hdr_from = at;
    c->hdr_bytes += ml;
  }
  if (c->hdr_bytes + (size_t)(at + len - c->hdr_from) > (uint64_t)c->srv->cfg->max_header_bytes)
    return parse_fail(c, 431, "request headers are larger than server.max_header_bytes");
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  weir__http_conn *c = pconn(p);
  req_free(c->parsing);
  c->parsing = calloc(1, sizeof *c->parsing);
  if (!c->parsing) return parse_fail(c, 500, "out of memory");
  c->parsing->conn = c;
  c->parsing->srv = c->srv;
  c->hdr_bytes = 0;
  c->hdr_from = NULL;
  c->in_headers = 1;
  c->auth_headers = 0;
  c->ext_bytes = 0;
  c->host_headers = 0;
  c->in_value = 0;
  c->field.len = c->value.len = 0;
  conn_set_timer(c, T_HEADER);
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
  weir__http_conn *c = pconn(p);
  if (count_header_bytes(c, at, len)) return -1;
  weir_buf_append(&c->parsing->url, at, len);
  return c->parsing->url.oom ? parse_fail(c, 500, "out of memory") : 0;
}

static void header_done(weir__http_conn *c) {
  if (!c->in_value) return;
  weir__http_req *r = c->parsing;
  weir_buf *dst = NULL;
  const char *name = c->field.p ? c->field.p : "";
  if (!strcasecmp(name, "content-type")) dst = &r->content_type;
  else if (!strcasecmp(name, "authorization")) {
    dst = &r->authorization;
    c->auth_headers++;
  }
  else if (!strcasecmp(name, "host")) c->host_headers++;
  else if (!strcasecmp(name, "cache-control") && c->value.p) {
    /* Directives are case-insensitive tokens in a comma-separated list (RFC 9111 5.2). */
    const char *v = c->value.p;
    while (*v) {
      while (*v == ' ' || *v == '\t' || *v == ',') v++;
      size_t n = strcspn(v, ", \t");
      if (n == 8 && !strncasecmp(v, "no-store", 8)) r->cache_control |= 1;
      else if (n == 8 && !strncasecmp(v, "no-cache", 8)) r->cache_control |= 2;
      v += n;
    }
  }
  else if (!strcasecmp(name, "expect"))
    r->expect_continue = c->value.p && !strcasecmp(c->value.p, "100-continue");
  if (dst) {
    dst->len = 0;
    /* Header values may hold any byte; what an error message may echo is made UTF-8. */
    weir_buf_append_utf8(dst, c->value.p ? c->value.p : "", c->value.len);
  }
  c->in_value = 0;
  c->field.len = c->value.len = 0;
  if (c->field.p) c->field.p[0] = '\0';
  if (c->value.p) c->value.p[0] = '\0';
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  weir__http_conn *c = pconn(p);
  if (count_header_bytes(c, at, len)) return -1;
  header_done(c);
  weir_buf_append(&c->field, at, len);
  return c->field.oom ? parse_fail(c, 500, "out of memory") : 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  weir__http_conn *c = pconn(p);
  if (count_header_bytes(c, at, len)) return -1;
  c->in_value = 1;
  weir_buf_append(&c->value, at, len);
  return c->value.oom ? parse_fail(c, 500, "out of memory") : 0;
}

static int on_headers_complete(llhttp_t *p) {
  weir__http_conn *c = pconn(p);
  header_done(c);
  c->in_headers = 0;
  weir__http_req *r = c->parsing;
  r->method = llhttp_get_method(p);
  /* Two credentials: which one is meant is ambiguous (and a proxy may have checked the
   * other one), so neither is used. */
  if (c->auth_headers > 1) return parse_fail(c, 400, "more than one Authorization header");
  r->http_minor = llhttp_get_http_major(p) > 1 ? 1 : llhttp_get_http_minor(p);
  if (llhttp_get_http_major(p) != 1) return parse_fail(c, 505, "only HTTP/1.x is supported");
  /* RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host header, 1.0 at most one. */
  if (c->host_headers > 1 || (r->http_minor >= 1 && c->host_headers == 0))
    return parse_fail(c, 400, "an HTTP/1.1 request must carry exactly one Host header");
  /* Compared unsigned: a length of 2^63 or more is still "too large", never negative. */
  if ((p->flags & F_CONTENT_LENGTH) &&
      p->content_length > (uint64_t)c->srv->cfg->max_body_bytes)
    return parse_fail(c, 413, "request body is larger than server.max_body_bytes");
  /* The body's buffer in one allocation: growing it by doubling maps and remaps large
   * blocks on the loop (each an mmap or mremap, which waits for the process's memory map
   * lock that the pool threads' allocations also take). The length was checked above. */
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0)
    weir_buf_reserve(&r->body, (size_t)p->content_length);
  if (r->body.oom) return parse_fail(c, 500, "out of memory");
  /* A client waiting for permission to send its body gets it at once when nothing is queued
   * ahead (otherwise it sends after its own short timeout). */
  if (r->expect_continue && !c->head) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    conn_write(c, cont, sizeof cont - 1, NULL, 0);
  }
  conn_set_timer(c, T_BODY);
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  weir__http_conn *c = pconn(p);
  weir__http_req *r = c->parsing;
  if (len > (uint64_t)c->srv->cfg->max_body_bytes - r->body.len)
    return parse_fail(c, 413, "request body is larger than server.max_body_bytes");
  weir_buf_append(&r->body, at, len);
  return r->body.oom ? parse_fail(c, 500, "out of memory") : 0;
}

/* Chunk extensions (`1;name=value`) are read and ignored, but their bytes count: together
 * at most server.max_header_bytes per message. */
static int on_chunk_extension(llhttp_t *p, const char *at, size_t len) {
  (void)at;
  weir__http_conn *c = pconn(p);
  c->ext_bytes += len;
  if (c->ext_bytes > (uint64_t)c->srv->cfg->max_header_bytes)
    return parse_fail(c, 400, "chunk extensions are larger than server.max_header_bytes");
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  weir__http_conn *c = pconn(p);
  weir__http_req *r = c->parsing;
  c->parsing = NULL;
  r->keep_alive = llhttp_should_keep_alive(p);
  r->arrival_ns = uv_hrtime();
  /* The path goes into messages and logs: invalid bytes become U+FFFD. */
  if (r->url.len && !weir_utf8_valid(r->url.p, r->url.len)) {
    weir_buf fixed = {0};
    weir_buf_append_utf8(&fixed, r->url.p, r->url.len);
    if (!fixed.oom) {
      weir_buf_free(&r->url);
      r->url = fixed;
    } else {
      weir_buf_free(&fixed);
    }
  }
  idle_remove(c);
  if (c->tail) c->tail->next = r;
  else c->head = r;
  c->tail = r;
  c->queued++;
  conn_set_timer(c, T_NONE);
  /* Enough queued: stop parsing here; the rest of the bytes wait in c->in. */
  return c->queued >= MAX_PIPELINED ? HPE_PAUSED : 0;
}

/* Queues a request that answers with an error and closes the connection after it. -1 when
 * out of memory: the connection is closed at once. */
static int queue_error(weir__http_conn *c, int status, const char *message) {
  weir__http_req *r = c->parsing;
  c->parsing = NULL;
  if (!r) r = calloc(1, sizeof *r);
  if (!r) {
    conn_close(c);
    return -1;
  }
  r->conn = c;
  r->srv = c->srv;
  r->error_status = status;
  r->error_message = message;
  c->no_more_requests = 1;
  idle_remove(c);
  if (c->tail) c->tail->next = r;
  else c->head = r;
  c->tail = r;
  c->queued++;
  return 0;
}

/* Parses received bytes. When the parser pauses (MAX_PIPELINED requests queued) the bytes it
 * did not look at are kept in c->in, to be parsed once the queue has drained. */
static void conn_parse(weir__http_conn *c, const char *data, size_t len) {
  if (c->closing || c->lingering || c->no_more_requests || !len) return;
  /* A header section continued from an earlier read counts from this read's start. */
  if (c->in_headers && c->hdr_from) c->hdr_from = data;
  llhttp_errno_t err = llhttp_execute(&c->parser, data, len);
  if (err == HPE_OK && c->in_headers && c->hdr_from) {
    /* The read ended inside the header section: all of the rest is header bytes, those
     * after the last name or value too (whitespace that no callback reports). */
    c->hdr_bytes += (size_t)(data + len - c->hdr_from);
    c->hdr_from = data + len; /* rebased at the next read */
    if (c->hdr_bytes > (uint64_t)c->srv->cfg->max_header_bytes) {
      c->no_more_requests = 1;
      queue_error(c, 431, "request headers are larger than server.max_header_bytes");
      return;
    }
  }
  if (err == HPE_PAUSED) {
    const char *pos = llhttp_get_error_pos(&c->parser);
    size_t used = pos && pos >= data && pos <= data + len ? (size_t)(pos - data) : len;
    c->parser_paused = 1;
    conn_pause_reading(c);
    /* data may point into c->in itself: copy through a fresh buffer. */
    weir_buf rest = {0};
    weir_buf_append(&rest, data + used, len - used);
    if (rest.oom) {
      weir_buf_free(&rest);
      conn_close_soon(c);
      return;
    }
    weir_buf_free(&c->in);
    c->in = rest;
  } else if (err == HPE_PAUSED_UPGRADE) {
    /* Protocol upgrades are not supported: answer the request, then close. */
    c->no_more_requests = 1;
    if (c->tail) c->tail->keep_alive = 0;
  } else if (err != HPE_OK) {
    if (c->parse_error_status) {
      queue_error(c, c->parse_error_status, c->parse_error_message);
    } else if (err == HPE_INVALID_CONTENT_LENGTH &&
               !strcmp(llhttp_get_error_reason(&c->parser), "Content-Length overflow")) {
      /* Too many digits for 64 bits: larger than any body limit. */
      queue_error(c, 413, "request body is larger than server.max_body_bytes");
    } else {
      weir_log(WEIR_LOG_DEBUG, "http", "malformed request: %s", llhttp_errno_name(err));
      queue_error(c, 400, "malformed HTTP request");
    }
  }
}

/* ---- request queue ---------------------------------------------------------------------- */

static void conn_process(weir__http_conn *c) {
  if (c->processing || c->closing) return;
  c->processing = 1;
  for (;;) {
    while (!c->closing && !c->backlogged && c->head && !c->head->dispatched) {
      weir__http_req *r = c->head;
      r->dispatched = 1;
      if (r->error_status) {
        const char *type = r->error_status >= 500 ? "server_error" : "invalid_request_error";
        weir__http_respond_error(r, r->error_status, type, NULL, NULL, "%s", r->error_message);
      } else {
        r->srv->handlers->dispatch(r);
      }
    }
    /* The queue has room again: parse what the paused parser left. */
    if (c->closing || c->doomed || c->backlogged || !c->parser_paused ||
        c->queued >= MAX_PIPELINED / 2)
      break;
    c->parser_paused = 0;
    llhttp_resume(&c->parser);
    weir_buf in = c->in;
    memset(&c->in, 0, sizeof c->in);
    conn_parse(c, in.p, in.len);
    weir_buf_free(&in);
  }
  c->processing = 0;
  if (c->closing) return;
  if (!c->head && !c->parsing && !c->no_more_requests && !c->lingering && !c->backlogged &&
      c->timer_mode != T_HEADER)
    conn_set_timer(c, T_IDLE);
  if (!c->reading && !c->parser_paused && !c->backlogged && c->queued < MAX_PIPELINED / 2 &&
      !c->lingering && !c->doomed)
    conn_resume(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  weir__http_conn *c = h->data;
  *buf = uv_buf_init(c->srv->read_buf, sizeof c->srv->read_buf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  weir__http_conn *c = st->data;
  if (nread < 0) {
    /* EOF or error: the client is gone (or done); nothing more can be answered. */
    conn_close(c);
    return;
  }
  if (nread == 0 || c->closing) return;
  c->got_bytes = 1;
  conn_parse(c, buf->base, (size_t)nread);
  conn_process(c);
}

static void conn_pause_reading(weir__http_conn *c) {
  if (!c->reading) return;
  if (!c->mem) uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
}

static void conn_resume(weir__http_conn *c) {
  if (c->closing || c->reading) return;
  if (c->mem) c->reading = 1;
  else if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = 1;
}

/* ---- listener --------------------------------------------------------------------------- */

static weir__http_conn *conn_new(weir__http_server *s) {
  weir__http_conn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->srv = s;
  s->num_conn_structs++;
  uv_timer_init(s->loop, &c->timer);
  c->timer.data = c;
  c->open_handles = 1;
  return c;
}

/* The table is full: close the connection idle for longest (nothing queued, nothing unsent)
 * so that a new client, a health probe say, is not turned away. */
static int evict_idle(weir__http_server *s) {
  for (weir__http_conn *c = s->idle_head; c; c = c->idle_next) {
    if (c->pending_writes || c->parsing) continue;
    weir_log(WEIR_LOG_DEBUG, "http", "connection table full: closing one idle for %llu ms",
             (unsigned long long)(uv_now(s->loop) - c->idle_since));
    conn_close(c);
    return 1;
  }
  /* Then one still sending its request head or body slowly, the oldest first. */
  for (weir__http_conn *c = s->idle_head; c; c = c->idle_next) {
    if (c->pending_writes) continue;
    conn_close(c);
    return 1;
  }
  return 0;
}

static void conn_admit(weir__http_server *s, weir__http_conn *c) {
  if (s->num_conns >= s->cfg->max_connections) evict_idle(s);
  c->refused = s->num_conns >= s->cfg->max_connections;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  if (!c->refused) s->num_conns++;
}

static void on_connection(uv_stream_t *server, int status) {
  weir__http_server *s = server->data;
  if (status < 0) {
    weir_log(WEIR_LOG_WARN, "http", "accept failed: %s", uv_strerror(status));
    return;
  }
  weir__http_conn *c = conn_new(s);
  if (!c) return;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  c->open_handles = 2;
  conn_admit(s, c);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    conn_close(c);
    return;
  }
  if (s->m.conns) weir_metric_record(s->m.conns, 1);
  uv_tcp_nodelay(&c->tcp, 1);
  if (c->refused) {
    static const char body[] = "{\"error\":{\"message\":\"too many connections "
                               "(server.max_connections)\",\"type\":\"server_error\","
                               "\"param\":null,\"code\":null}}";
    char busy[512];
    int n = snprintf(busy, sizeof busy,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Connection: close\r\nRetry-After: %d\r\nContent-Length: %zu\r\n\r\n%s",
                     retry_after_s(s, 503), sizeof body - 1, body);
    weir__http_count_response(s, 503);
    c->no_more_requests = 1;
    c->close_after_writes = 1;
    conn_write(c, busy, (size_t)n, NULL, 0);
    conn_resume(c);
    return;
  }
  llhttp_init(&c->parser, HTTP_REQUEST, &s->parser_settings);
  c->parser.data = c;
  idle_add(c);
  /* The first byte must come within the header timeout, not the keep-alive one. */
  conn_set_timer(c, T_HEADER);
  conn_resume(c);
}

int weir__http_server_init(weir__http_server *s, uv_loop_t *loop, const weir_config *cfg,
                           weir_metrics *metrics, const weir__http_handlers *handlers) {
  memset(s, 0, sizeof *s);
  s->loop = loop;
  s->cfg = cfg;
  s->metrics = metrics;
  s->handlers = handlers;
  llhttp_settings_init(&s->parser_settings);
  s->parser_settings.on_message_begin = on_message_begin;
  s->parser_settings.on_url = on_url;
  s->parser_settings.on_header_field = on_header_field;
  s->parser_settings.on_header_value = on_header_value;
  s->parser_settings.on_headers_complete = on_headers_complete;
  s->parser_settings.on_body = on_body;
  s->parser_settings.on_chunk_extension_name = on_chunk_extension;
  s->parser_settings.on_chunk_extension_value = on_chunk_extension;
  s->parser_settings.on_message_complete = on_message_complete;
  return WEIR_OK;
}

int weir__http_server_listen(weir__http_server *s) {
  struct sockaddr_storage addr;
  int rc = uv_ip4_addr(s->cfg->host, s->cfg->port, (struct sockaddr_in *)&addr);
  if (rc != 0) rc = uv_ip6_addr(s->cfg->host, s->cfg->port, (struct sockaddr_in6 *)&addr);
  if (rc != 0) {
    weir_log(WEIR_LOG_ERROR, "http", "server.host \"%s\" is not an IPv4 or IPv6 address",
             s->cfg->host);
    return WEIR_E_INVAL;
  }
  uv_tcp_init(s->loop, &s->listener);
  s->listener.data = s;
  s->listener_open = 1;
  rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
  if (rc != 0) {
    weir_log(WEIR_LOG_ERROR, "http", "cannot listen on %s:%d: %s", s->cfg->host, s->cfg->port,
             uv_strerror(rc));
    return WEIR_E_IO;
  }
  weir_log(WEIR_LOG_INFO, "http", "listening on http://%s:%d", s->cfg->host, s->cfg->port);
  return WEIR_OK;
}

void weir__http_server_close(weir__http_server *s, int force) {
  if (s->listener_open) {
    s->listener_open = 0;
    uv_close((uv_handle_t *)&s->listener, NULL);
  }
  for (weir__http_conn *c = s->conns, *n; c; c = n) {
    n = c->next;
    if (c->pending_writes > 0 && !force) {
      c->no_more_requests = 1;
      c->close_after_writes = 1;
      idle_remove(c);
    } else {
      conn_close(c);
    }
  }
}

/* ---- in-process connections ------------------------------------------------------------- */

weir__http_conn *weir__http_conn_open_mem(weir__http_server *s, weir__http_sink_cb sink,
                                          void *arg) {
  weir__http_conn *c = conn_new(s);
  if (!c) return NULL;
  c->mem = 1;
  c->sink = sink;
  c->sink_arg = arg;
  conn_admit(s, c);
  if (c->refused) {
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                               "Retry-After: 1\r\nContent-Length: 0\r\n\r\n";
    c->no_more_requests = 1;
    c->close_after_writes = 1;
    conn_write(c, busy, sizeof busy - 1, NULL, 0);
    return c;
  }
  llhttp_init(&c->parser, HTTP_REQUEST, &s->parser_settings);
  c->parser.data = c;
  idle_add(c);
  conn_set_timer(c, T_HEADER);
  conn_resume(c);
  return c;
}

/* Parses what has arrived while the connection reads: a socket that stopped reading leaves
 * bytes in the kernel; an in-process one keeps them in c->in. */
static void mem_pump(weir__http_conn *c) {
  while (!c->closing && c->reading && !c->parser_paused && c->in.len) {
    weir_buf in = c->in;
    memset(&c->in, 0, sizeof c->in);
    conn_parse(c, in.p, in.len);
    weir_buf_free(&in);
    conn_process(c);
  }
}

void weir__http_conn_feed(weir__http_conn *c, const char *data, size_t len) {
  if (c->closing || !len) return;
  c->got_bytes = 1;
  if (c->lingering || c->no_more_requests) return; /* read and discarded */
  weir_buf_append(&c->in, data, len);
  if (c->in.oom) {
    conn_close_soon(c);
    return;
  }
  mem_pump(c);
}

size_t weir__http_conn_drain(weir__http_conn *c) {
  size_t n = 0;
  while (!c->closing && c->mem_head) {
    write_req *w = c->mem_head;
    c->mem_head = w->next;
    if (!c->mem_head) c->mem_tail = NULL;
    n += w->len;
    write_done(w, 0);
  }
  if (!c->closing) mem_pump(c);
  return n;
}

void weir__http_conn_peer_closed(weir__http_conn *c) { conn_close(c); }

int weir__http_conn_is_open(const weir__http_server *s, const weir__http_conn *c) {
  for (const weir__http_conn *x = s->conns; x; x = x->next)
    if (x == c) return 1;
  return 0;
}

int weir__http_conn_is_idle(const weir__http_conn *c) {
  return !c->head && !c->mem_head && !c->doomed;
}
