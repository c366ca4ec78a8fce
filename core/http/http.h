/* The OpenAI-compatible HTTP server (docs/http-api.md).
 *
 * weir_http_serve binds cfg->host:cfg->port, answers /health with 503 while the engine loads
 * on a worker thread, serves until SIGINT or SIGTERM, then drains: new work is refused with
 * 503 (/health says "draining"), in-flight requests get cfg->drain_timeout_ms to finish, the
 * rest are aborted through weir_engine_abort. Runs the calling thread's own libuv loop. */
#ifndef WEIR_HTTP_H
#define WEIR_HTTP_H

struct weir_config;

/* Returns the process exit code: 0 after a clean drain, 1 when binding or loading the engine
 * failed (the cause is logged). cfg is borrowed for the call. */
int weir_http_serve(const struct weir_config *cfg);

#endif
