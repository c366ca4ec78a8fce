/* The OpenAI API layer (api.c: routing, jobs, engine events; api_params.c: request bodies
 * into engine requests; api_render.c: engine output as JSON and SSE) and the server's life
 * cycle (serve.c) that composes it with the transport. Loop thread unless a comment says
 * otherwise. Not part of any public API. */
#ifndef WEIR_HTTP_API_H
#define WEIR_HTTP_API_H

#include "http/http_internal.h"

/* An event copied off the engine thread. */
struct weir__queued_event {
  struct weir__queued_event *next;
  void *user;
  uint64_t time_ns;           /* uv_hrtime() when the engine delivered it */
  weir_gen_event ev;          /* pointers point into the same allocation */
};

/* What api.c passes as the engine callback's `user`: the first member of every per-choice
 * struct. `spare` is a preallocated event used when copying a final event fails for lack of
 * memory, so that the exactly-one-final-event guarantee survives OOM. */
typedef struct weir__engine_user {
  weir__http_server *srv;
  weir__queued_event *spare;
} weir__engine_user;

/* serve.c: the server's set-up without a listener or signals, for in-process harnesses:
 * init, metrics, the engine-event queue. weir__serve_attach_engine makes it READY with an
 * engine created by the caller; weir__serve_detach closes the event queue and runs the loop
 * until it is closed, then destroys the engine (every job must be gone). */
int weir__serve_setup(weir__http_server *s, uv_loop_t *loop, const weir_config *cfg,
                      weir_metrics *metrics);
int weir__serve_attach_engine(weir__http_server *s, weir_engine *engine);
void weir__serve_detach(weir__http_server *s);

/* api_cache.c: loads the response-cache plugin [cache] names (nothing for "off"): 0, or a
 * status with err filled; close unloads it (after the work pools are gone). */
int weir__rcache_open(weir__http_server *s, char *err, size_t errlen);
void weir__rcache_close(weir__http_server *s);

/* api.c */
int weir__api_metrics_register(weir__http_server *s);
/* The transport's handlers (dispatch, client gone, flow control). */
extern const weir__http_handlers weir__api_handlers;
/* On the loop, when work_fd is readable: handles (and frees) every finished piece of work
 * the pools posted (api.c, work_post), then every engine event queued since the last call
 * (the engine thread queues them through the callback api.c gives weir_engine_submit). */
void weir__api_on_work(weir__http_server *s);
/* Aborts every in-flight engine request (drain timeout, second signal). */
void weir__api_abort_all(weir__http_server *s);
/* Called on the loop about once a second (now_s: any monotonic count of seconds): expires
 * idle cached constraints and gives freed memory back to the system, on a libuv work
 * thread, when there is something to do. Never blocks the loop. */
void weir__api_housekeep(weir__http_server *s, uint64_t now_s);

#endif
