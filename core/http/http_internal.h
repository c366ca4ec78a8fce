/* The HTTP transport (server.c): connections, parsing, limits, flow control and responses,
 * and the server state the layers above share. The layers stack as transport < API (api.h:
 * api.c, api_params.c, api_render.c) < life cycle (serve.c); the transport calls up only
 * through the weir__http_handlers table it is given, so nothing here depends on the API.
 * Everything runs on the libuv loop thread unless a comment says otherwise. Not part of any
 * public API. */
#ifndef WEIR_HTTP_INTERNAL_H
#define WEIR_HTTP_INTERNAL_H

#include <llhttp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config/config.h"
#include "engine/engine.h"
#include "engine/service.h"
#include "metrics/metrics.h"
#include "util/buf.h"
#include "util/utf8.h"
#include "util/workpool.h"

typedef struct weir__http_server weir__http_server;
typedef struct weir__http_conn weir__http_conn;
typedef struct weir__http_req weir__http_req;
typedef struct weir__api_job weir__api_job;
typedef struct weir__api_work weir__api_work;
typedef struct weir__rcache weir__rcache;

/* The work pools (util/workpool.h): threads, jobs one client may run at once, jobs waiting
 * before 429. Preparing a request is quick for a normal body; compiles can take seconds.
 * Each kind of work has two pools: light work (a body or constraint text under
 * WEIR__HEAVY_BYTES) at about the loop's priority, so that it is never starved by a busy
 * engine and never waits for a thread behind heavy work; heavy work (the 1 MB bodies and
 * grammars of issue 28) on threads of its own at SCHED_IDLE, on the CPU time nothing else
 * wants. */
#define WEIR__HEAVY_BYTES (64 * 1024)
#define WEIR__PREP_THREADS 8
#define WEIR__PREP_PER_CLIENT 4
#define WEIR__PREP_QUEUE 4096
/* The heavy pools' threads at most; serve.c starts half the CPUs this process may run on,
 * at least 1 and at most this: SCHED_IDLE work only fills CPU time nothing else wants, and
 * threads beyond the CPUs' idle gaps only add preemptions and cache traffic beside the
 * engine (measured on 2 CPUs under 8 clients posting 1 MB bodies: the light stream's ITL p99
 * 4.8-5.2 ms with 1 heavy thread against 6.7-7.2 ms with 8, for as many hostile answers). */
#define WEIR__PREP_HEAVY_THREADS 8
#define WEIR__PREP_HEAVY_PER_CLIENT 2
#define WEIR__PREP_HEAVY_QUEUE 1024
#define WEIR__COMPILE_THREADS 4
#define WEIR__COMPILE_PER_CLIENT 2
#define WEIR__COMPILE_QUEUE 1024
/* /v1/embeddings on a pool of its own: its threads wait while the engine embeds, so they never
 * hold a preparation thread; one request per client at a time, the rest queued fairly. */
#define WEIR__EMBED_THREADS 4
#define WEIR__EMBED_PER_CLIENT 1
#define WEIR__EMBED_QUEUE 1024
#define WEIR__COMPILE_HEAVY_THREADS 8
#define WEIR__COMPILE_HEAVY_PER_CLIENT 2
#define WEIR__COMPILE_HEAVY_QUEUE 1024

typedef enum weir__server_state {
  WEIR__LOADING = 0,  /* the engine is being created: /health 503 "loading" */
  WEIR__READY = 1,
  WEIR__DRAINING = 2, /* a signal arrived: no new work, in-flight requests finish */
  WEIR__STOPPING = 3, /* handles are closing; the loop is about to end */
} weir__server_state;

/* One parsed HTTP request, queued on its connection until its response is complete.
 * Requests of one connection are answered strictly in arrival order (pipelining). */
struct weir__http_req {
  weir__http_conn *conn;
  weir__http_server *srv;
  weir__http_req *next;
  int method;                 /* llhttp_method_t */
  int http_minor;             /* 1 for HTTP/1.1, 0 for HTTP/1.0 */
  int keep_alive;             /* the client allows the connection to be reused */
  int expect_continue;        /* "Expect: 100-continue" */
  weir_buf url;
  weir_buf content_type;
  weir_buf authorization;
  weir_buf body;
  uint64_t arrival_ns;        /* uv_hrtime() when the request was complete */
  /* A request the transport already knows the answer to (malformed HTTP, limits): the
   * response is this error, and the connection closes after it. */
  int error_status;
  const char *error_message;
  /* Response state. */
  int dispatched;
  int streaming;              /* headers sent, body goes out as chunks */
  int chunked;                /* streaming with Transfer-Encoding: chunked (HTTP/1.1) */
  int done;                   /* the response is complete */
  weir__api_job *job;         /* generation in flight for this request, or NULL */
  int cache_control;          /* Cache-Control directives: WEIR__CC_* bits (api_internal.h) */
  const char *cache_status;   /* static text for an "x-weir-cache" response header, or NULL */
  /* Corked (weir__http_cork): a stream's writes are gathered here and go out as one write
   * when it ends (a replayed answer: one write instead of one per chunk). */
  int corked;
  weir_buf cork;
  weir_buf *capture;          /* set: stream_end copies the corked bytes here first */
};

/* Responses. Each call makes its own uv_write with its own buffer. They do nothing when the
 * connection is already gone. `extra_headers` is NULL or CRLF-terminated header lines. */
void weir__http_respond(weir__http_req *r, int status, const char *content_type,
                        const char *body, size_t len, const char *extra_headers);
/* An OpenAI error object: {"error":{"message","type","param","code"}}. param / code may be
 * NULL (rendered as null). */
void weir__http_respond_error(weir__http_req *r, int status, const char *type,
                              const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void weir__http_stream_start(weir__http_req *r, const char *content_type);
void weir__http_stream_write(weir__http_req *r, const char *data, size_t len);
void weir__http_stream_end(weir__http_req *r);
/* Gathers the stream's head and chunks in memory until weir__http_stream_end, which sends
 * them with the terminating chunk in one write. For a stream whose chunks are all known at
 * once (a cached answer). */
void weir__http_cork(weir__http_req *r);
/* Appends bytes already framed as chunks to a corked, chunked stream and returns where they
 * landed in the cork (writable until the stream ends), or NULL (not corked, not chunked,
 * ended, out of memory) when nothing was appended. Loop only. */
char *weir__http_stream_append_framed(weir__http_req *r, const char *data, size_t len);
/* A whole chunked stream in one write, for an answer known at once (a rendered cache hit):
 * the head weir__http_stream_start would write, `body` (len bytes the caller framed as
 * chunks itself, copied), the last chunk; then the request is done (r may be freed). patch,
 * when not NULL, is called with the copy of body inside the write before it is sent (the
 * caller patches ids in place). Only for HTTP/1.1 (chunked): it does nothing for HTTP/1.0.
 * Out of memory: the connection closes. Loop only. */
void weir__http_stream_whole(weir__http_req *r, const char *content_type, const char *body,
                             size_t len, void (*patch)(void *arg, char *copy), void *arg);
/* The URL path without the query string, NUL-terminated in `out`. */
void weir__http_path(const weir__http_req *r, char *out, size_t cap);

typedef struct weir__queued_event weir__queued_event;

/* Metrics the server records itself: what a client observes. The engine records its own. */
typedef struct weir__http_metrics {
  weir_metric *ttft, *itl, *tpot, *e2e;
  weir_metric *loop_lag; /* how late the loop's lag timer fired (serve.c) */
  weir_metric *conns;    /* connections accepted (server.c); NULL before registration */
} weir__http_metrics;

/* What the transport calls in the layer above it (api.c provides them; serve.c hands them
 * to weir__http_server_init). */
typedef struct weir__http_handlers {
  /* Answers one request (called once per request, in order, when it reaches the head of its
   * connection's queue). */
  void (*dispatch)(weir__http_req *r);
  /* The connection of a job is gone: abort its generation; the job lives on until its final
   * events arrive. */
  void (*client_gone)(weir__api_job *job);
  /* Flow control: pause (or resume) a job's generation while its connection has too much
   * unsent output. */
  void (*set_paused)(weir__api_job *job, int paused);
} weir__http_handlers;

struct weir__http_server {
  const weir__http_handlers *handlers;
  /* Called by the API layer whenever a job is freed (serve.c decides whether a drain is
   * over). */
  void (*job_finished)(weir__http_server *s);
  uv_loop_t *loop;
  const weir_config *cfg;
  weir_metrics *metrics;
  weir__http_metrics m;
  weir_engine *engine;        /* NULL until loaded */
  /* The model's service handle (engine/service.h): tokenizer, chat template, constraint
   * cache; valid with engine. Used from the work pools' threads too (read-only). */
  const weir_service *svc;
  /* Request preparation (body parse, chat template, tokenizing) and constraint compiles run
   * on these pools, never on the loop (issue 28); their results come back through
   * work_stack as weir__api_work items, pushed without a lock, and work_fd (an eventfd the
   * loop polls) wakes the loop. Not a uv_async_t, nor a mutex: a pool thread runs below the
   * loop's priority, and if it were preempted inside uv_async_send (which the loop then
   * spins on, yielding) or while holding a lock the loop takes, the loop would wait for it
   * (issue 28: measured). */
  weir_workpool *prep_pool, *compile_pool;            /* light work */
  weir_workpool *prep_heavy_pool, *compile_heavy_pool; /* WEIR__HEAVY_BYTES or more */
  weir_workpool *embed_pool;                          /* /v1/embeddings */
  _Atomic(weir__api_work *) work_stack; /* newest first */
  int work_fd;
  uv_poll_t work_poll;
  weir_engine_info info;      /* valid once READY */
  char *model_name;
  char *bos_text;             /* the BOS token's text, or NULL */
  const char *api_key;        /* NULL: no authentication */
  weir__server_state state;
  int64_t started_unix;
  int exit_code;

  uv_tcp_t listener;
  int listener_open;
  weir__http_conn *conns;     /* doubly linked list of open connections */
  int num_conns;
  weir__http_conn *idle_head, *idle_tail; /* connections with nothing queued, oldest first */
  int num_conn_structs;       /* connections not yet freed (closing ones included) */
  /* In-process harnesses (fuzzing): invalid UTF-8 in a response aborts instead of being
   * repaired, so that its source is found. */
  int abort_on_invalid_utf8;
  char read_buf[65536];       /* parsing consumes each read before the next */
  /* weir_http_requests_total by status code (100..599), looked up once each: a lookup by
   * name and labels per response was a registry scan under its lock on every request. */
  weir_metric *responses_by_code[500];
  llhttp_settings_t parser_settings;

  /* Engine events: pushed by the engine thread without a lock (newest first), drained on
   * the loop when work_fd wakes it, like the pools' work: the engine thread, preempted on a
   * busy machine, must not hold the loop either. */
  _Atomic(weir__queued_event *) ev_stack;

  uv_signal_t sigint, sigterm;
  uv_timer_t drain_timer;
  /* Fires every WEIR__LOOP_LAG_MS; how late it runs is the loop's stall (any cause: a slow
   * callback, or the thread waiting for a CPU), recorded in m.loop_lag. */
  uv_timer_t lag_timer;
  uint64_t lag_due_ns;
  uint64_t lag_ticks;
  /* Housekeeping (api.c, weir__api_housekeep): cache expiry and malloc_trim, on libuv's
   * threads (normal priority), one at a time. */
  uv_work_t hk_work;
  int hk_busy, hk_trim, hk_expire;
  uint64_t hk_last_trim_s, hk_last_expire_s;
  uv_work_t load_work;
  int load_rc;
  weir_engine *loaded;        /* written by the load work, published by load_done */
  int loading;                /* the load work is still running */
  int num_jobs;               /* generation jobs not yet freed (client gone or not) */
  weir__api_job *jobs;        /* the same jobs, doubly linked (api.c) */
  weir__rcache *rcache;       /* the response cache (api_cache.c), or NULL */
  weir__api_job *leaders;     /* response cache: misses others may join (api.c; loop) */
  int aborted_all;
  int drain_grace;            /* the drain deadline passed: aborted requests finish sending */
  int force_close;            /* a second signal or the grace is over: close everything now */
};

/* server.c */
/* Splits [base, base + len) into uv_buf_t's of at most 1 GiB (a uv_buf_t length is an
 * unsigned int). Returns how many it used, or 0 when max_bufs are not enough. */
size_t weir__http_split_bufs(char *base, size_t len, uv_buf_t *bufs, size_t max_bufs);
int weir__http_server_init(weir__http_server *s, uv_loop_t *loop, const weir_config *cfg,
                           weir_metrics *metrics, const weir__http_handlers *handlers);
int weir__http_server_listen(weir__http_server *s);
/* Closes the listener and every connection: after their pending writes, or with `force`
 * at once (unsent output is dropped: the drain deadline passed, or a second signal). */
void weir__http_server_close(weir__http_server *s, int force);
/* The client a request counts against in the work pools' fairness: a hash of the peer's IP
 * address (not its port: one client, many connections). 0 for in-process connections. */
uint64_t weir__http_client_key(const weir__http_req *r);
/* Counts a response in weir_http_requests_total{code}. */
void weir__http_count_response(weir__http_server *s, int status);

/* In-process connections (fuzzing, tests): no socket; everything else is the code a socket
 * connection runs (parsing, limits, routing, the API, flow control, timers). The bytes a
 * client sends are handed to weir__http_conn_feed; every write is passed to `sink` at once
 * but completes (as if the peer had read it) only in weir__http_conn_drain, which also
 * parses input held back meanwhile. The connection is freed in a close callback on the
 * loop: after weir__http_conn_peer_closed, or once weir__http_conn_is_open says it is
 * closing, the pointer must not be used again. */
typedef void (*weir__http_sink_cb)(void *arg, const char *data, size_t len);
weir__http_conn *weir__http_conn_open_mem(weir__http_server *s, weir__http_sink_cb sink,
                                          void *arg);
void weir__http_conn_feed(weir__http_conn *c, const char *data, size_t len);
/* Completes every pending write; returns the bytes they held. */
size_t weir__http_conn_drain(weir__http_conn *c);
/* The client closed its side (EOF): the connection closes. */
void weir__http_conn_peer_closed(weir__http_conn *c);
int weir__http_conn_is_open(const weir__http_server *s, const weir__http_conn *c);
/* Nothing queued or in flight and nothing unsent: the exchange is over. */
int weir__http_conn_is_idle(const weir__http_conn *c);

#endif
