/* A small blocking HTTP/1.1 client for the integration tests: raw sends, response parsing
 * (Content-Length, chunked, or until close), an SSE splitter, and a helper that starts the
 * real `weir serve` and waits until it is ready. */
#ifndef WEIR_TEST_HCLIENT_H
#define WEIR_TEST_HCLIENT_H

#include <stddef.h>
#include <sys/types.h>

typedef struct hc_response {
  int status;         /* 0 when no response could be read */
  char *headers;      /* raw header block, lower-cased names untouched */
  char *body;         /* decoded body, NUL-terminated */
  size_t body_len;
  int closed;         /* the server closed the connection after this response */
} hc_response;

void hc_response_free(hc_response *r);
/* Value of a header (case-insensitive name), malloc'd, or NULL. */
char *hc_header(const hc_response *r, const char *name);

/* Connects to 127.0.0.1:port with a receive timeout; -1 on failure. */
int hc_connect(int port, int timeout_ms);
/* The same with a small receive buffer (SO_RCVBUF set before connecting), for clients that
 * stop reading: the server's output then backs up in the server, not in the kernel. */
int hc_connect_rcvbuf(int port, int timeout_ms, int rcvbuf);
int hc_send_all(int fd, const void *data, size_t len);
/* Reads one response from fd. Returns 0 on success. */
int hc_read_response(int fd, hc_response *out);
/* Reads the response headers only (for incremental streaming). 0 on success. */
int hc_read_head(int fd, hc_response *out, int *chunked);
/* Reads the next body chunk of a chunked response into a malloc'd buffer; returns its length,
 * 0 at the terminal chunk, -1 on error. */
long hc_read_chunk(int fd, char **data);

/* One request on a fresh connection. body may be NULL. extra_headers: CRLF-terminated lines or
 * NULL. Content-Type application/json is sent with a body unless extra_headers sets one. */
int hc_request(int port, const char *method, const char *path, const char *extra_headers,
               const char *body, hc_response *out);

/* Splits an SSE body into the payloads of its `data: ` lines. Returns the count; *events is a
 * malloc'd array of malloc'd strings. */
int hc_sse_split(const char *body, char ***events);
void hc_sse_free(char **events, int n);

/* A running server. */
typedef struct hc_server {
  pid_t pid;
  int port;
  char *log_path;
} hc_server;

/* Starts WT_WEIR serve with the given extra argv (NULL-terminated), logging into log_path,
 * and waits up to timeout_ms for GET /health to answer 200. Returns 0 when ready. */
int hc_server_start(hc_server *s, const char *const *args, const char *log_path,
                    int timeout_ms);
/* Sends sig and waits up to timeout_ms; returns the exit status (0..255), 128+signal, or -1
 * when it had to be killed. */
int hc_server_stop(hc_server *s, int sig, int timeout_ms);

/* Reads a numeric sample from a Prometheus text page: the first sample of the metric named in
 * `series` whose labels include every label `series` lists ("name" or "name{k=\"v\",...}";
 * other labels, such as model_name, may be present). Returns 0 and sets *v when found. */
int hc_metric(const char *page, const char *series, double *v);

/* ---- fixtures the integration suites share ----------------------------------------------- */

/* Writes the tiny preset with a ctx_len context (named tiny-test) to path with `weir
 * mkmodel`. 0 on success; the tool's output is printed when it fails. */
int hc_mkmodel(const char *path, int ctx_len);

/* Starts `weir serve` on a free port (s->port) with the settings every suite uses (model,
 * 127.0.0.1, one thread, a 64 MiB cache, the build's plugins) and then the `extra` --set
 * overrides (NULL-terminated, may be NULL); it logs into dir/name.log, which is printed when
 * the server does not become ready. 0 when ready. Strings stay the caller's. */
int hc_start_test_server(hc_server *s, const char *dir, const char *name, const char *model,
                         const char *const *extra);

/* The /metrics page, malloc'd (the caller frees), or NULL when it could not be read. */
char *hc_get_metrics(int port);

/* The status of a small completion that must succeed whenever the server is alive (0 when no
 * response came): suites check it after whatever might have broken the server. */
int hc_alive_status(int port);

/* For a suite's tests that need its shared server: when not ready, prints that the test is
 * skipped and returns 1 (the test returns). */
int hc_skip_without_server(int ready);

#endif
