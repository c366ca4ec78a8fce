#include "hclient.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

void hc_response_free(hc_response *r) {
  free(r->headers);
  free(r->body);
  memset(r, 0, sizeof *r);
}

char *hc_header(const hc_response *r, const char *name) {
  if (!r->headers) return NULL;
  size_t n = strlen(name);
  for (const char *p = r->headers; p && *p;) {
    const char *eol = strstr(p, "\r\n");
    if (!eol) eol = p + strlen(p);
    if ((size_t)(eol - p) > n && !strncasecmp(p, name, n) && p[n] == ':') {
      const char *v = p + n + 1;
      while (*v == ' ') v++;
      return strndup(v, (size_t)(eol - v));
    }
    p = *eol ? eol + 2 : eol;
  }
  return NULL;
}

int hc_connect(int port, int timeout_ms) { return hc_connect_rcvbuf(port, timeout_ms, 0); }

int hc_connect_rcvbuf(int port, int timeout_ms, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int hc_send_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Byte-at-a-time buffered reading per fd would be slow; the tests read modest amounts, so a
 * tiny per-call buffer with a pushback area is enough: we read exactly what we need. */
static int read_byte(int fd, char *c) {
  for (;;) {
    ssize_t n = recv(fd, c, 1, 0);
    if (n == 1) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

static int read_exact(int fd, char *buf, size_t len) {
  while (len) {
    ssize_t n = recv(fd, buf, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

static char *read_line(int fd) {
  size_t cap = 128, len = 0;
  char *s = malloc(cap);
  for (;;) {
    char c;
    if (read_byte(fd, &c) != 0) {
      free(s);
      return NULL;
    }
    if (len + 2 > cap) s = realloc(s, cap *= 2);
    s[len++] = c;
    if (len >= 2 && s[len - 2] == '\r' && s[len - 1] == '\n') {
      s[len - 2] = '\0';
      return s;
    }
  }
}

int hc_read_head(int fd, hc_response *out, int *chunked) {
  memset(out, 0, sizeof *out);
  char *line = read_line(fd);
  if (!line) return -1;
  if (sscanf(line, "HTTP/1.%*d %d", &out->status) != 1) {
    free(line);
    return -1;
  }
  free(line);
  size_t cap = 256, len = 0;
  out->headers = calloc(1, cap);
  for (;;) {
    line = read_line(fd);
    if (!line) return -1;
    if (!*line) {
      free(line);
      break;
    }
    size_t n = strlen(line);
    while (len + n + 3 > cap) out->headers = realloc(out->headers, cap *= 2);
    memcpy(out->headers + len, line, n);
    memcpy(out->headers + len + n, "\r\n", 3);
    len += n + 2;
    free(line);
  }
  char *te = hc_header(out, "transfer-encoding");
  *chunked = te && !strcasecmp(te, "chunked");
  free(te);
  char *conn = hc_header(out, "connection");
  out->closed = conn && !strcasecmp(conn, "close");
  free(conn);
  return 0;
}

long hc_read_chunk(int fd, char **data) {
  *data = NULL;
  char *line = read_line(fd);
  if (!line) return -1;
  long n = strtol(line, NULL, 16);
  free(line);
  if (n < 0) return -1;
  char *buf = malloc((size_t)n + 1);
  if (read_exact(fd, buf, (size_t)n) != 0) {
    free(buf);
    return -1;
  }
  buf[n] = '\0';
  char crlf[2];
  if (read_exact(fd, crlf, 2) != 0) {
    free(buf);
    return -1;
  }
  if (n == 0) {
    free(buf);
    return 0;
  }
  *data = buf;
  return n;
}

int hc_read_response(int fd, hc_response *out) {
  int chunked = 0;
  if (hc_read_head(fd, out, &chunked) != 0) return -1;
  size_t cap = 1024, len = 0;
  char *body = malloc(cap);
  if (chunked) {
    for (;;) {
      char *d = NULL;
      long n = hc_read_chunk(fd, &d);
      if (n < 0) {
        free(body);
        return -1;
      }
      if (n == 0) break;
      while (len + (size_t)n + 1 > cap) body = realloc(body, cap *= 2);
      memcpy(body + len, d, (size_t)n);
      len += (size_t)n;
      free(d);
    }
  } else {
    char *cl = hc_header(out, "content-length");
    if (cl) {
      size_t n = strtoul(cl, NULL, 10);
      free(cl);
      body = realloc(body, n + 1);
      if (read_exact(fd, body, n) != 0) {
        free(body);
        return -1;
      }
      len = n;
    } else {
      for (;;) {
        if (len + 4096 + 1 > cap) body = realloc(body, cap *= 2);
        ssize_t n = recv(fd, body + len, 4096, 0);
        if (n <= 0) break;
        len += (size_t)n;
      }
      out->closed = 1;
    }
  }
  body[len] = '\0';
  out->body = body;
  out->body_len = len;
  return 0;
}

int hc_request(int port, const char *method, const char *path, const char *extra_headers,
               const char *body, hc_response *out) {
  memset(out, 0, sizeof *out);
  int fd = hc_connect(port, 60000);
  if (fd < 0) return -1;
  int has_ct = extra_headers && strcasestr(extra_headers, "content-type:");
  char *req = wt_strf("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%s\r\n", method, path,
                      body && !has_ct ? "Content-Type: application/json\r\n" : "",
                      extra_headers ? extra_headers : "",
                      body ? "" : "");
  char *full;
  if (body) {
    char *cl = wt_strf("Content-Length: %zu\r\n", strlen(body));
    /* Insert Content-Length before the blank line. */
    size_t rl = strlen(req);
    full = wt_strf("%.*s%s\r\n%s", (int)(rl - 2), req, cl, body);
    free(cl);
  } else {
    full = strdup(req);
  }
  free(req);
  int rc = hc_send_all(fd, full, strlen(full));
  free(full);
  if (rc == 0) rc = hc_read_response(fd, out);
  close(fd);
  return rc;
}

int hc_sse_split(const char *body, char ***events) {
  int n = 0, cap = 16;
  char **ev = malloc(sizeof(char *) * (size_t)cap);
  const char *p = body;
  while (p && *p) {
    const char *end = strstr(p, "\n\n");
    if (!end) end = p + strlen(p);
    if (!strncmp(p, "data: ", 6)) {
      if (n == cap) ev = realloc(ev, sizeof(char *) * (size_t)(cap *= 2));
      ev[n++] = strndup(p + 6, (size_t)(end - p - 6));
    }
    p = *end ? end + 2 : end;
  }
  *events = ev;
  return n;
}

void hc_sse_free(char **events, int n) {
  for (int i = 0; i < n; i++) free(events[i]);
  free(events);
}

int hc_server_start(hc_server *s, const char *const *args, const char *log_path,
                    int timeout_ms) {
  s->log_path = strdup(log_path);
  const char *argv[64];
  int ac = 0;
  argv[ac++] = WT_WEIR;
  argv[ac++] = "serve";
  for (int i = 0; args && args[i] && ac < 62; i++) argv[ac++] = args[i];
  argv[ac] = NULL;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(WT_WEIR, (char *const *)argv);
    _exit(127);
  }
  s->pid = pid;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      s->pid = 0;
      return -1;
    }
    hc_response r;
    if (hc_request(s->port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200) {
      hc_response_free(&r);
      return 0;
    }
    hc_response_free(&r);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
    if (ms > timeout_ms) return -1;
    usleep(20000);
  }
}

int hc_server_stop(hc_server *s, int sig, int timeout_ms) {
  int rc = -1;
  if (s->pid > 0) {
    kill(s->pid, sig);
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
      int status;
      if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        s->pid = 0;
        break;
      }
      usleep(10000);
    }
    if (s->pid > 0) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
      s->pid = 0;
    }
  }
  free(s->log_path);
  s->log_path = NULL;
  return rc;
}

/* Whether the label list `have` ("a=\"1\",b=\"2\"", no braces) contains every label of
 * `want` (same syntax). Values hold no commas in what the tests query. */
static int labels_cover(const char *have, size_t have_len, const char *want, size_t want_len) {
  while (want_len > 0) {
    size_t one = 0;
    while (one < want_len && want[one] != ',') one++;
    int found = 0;
    for (size_t i = 0; i + one <= have_len && !found; i++)
      found = (i == 0 || have[i - 1] == ',') && !memcmp(have + i, want, one) &&
              (i + one == have_len || have[i + one] == ',');
    if (!found) return 0;
    want += one;
    want_len -= one;
    if (want_len > 0) {
      want++;
      want_len--;
    }
  }
  return 1;
}

int hc_metric(const char *page, const char *series, double *v) {
  const char *brace = strchr(series, '{');
  size_t name_len = brace ? (size_t)(brace - series) : strlen(series);
  const char *want = brace ? brace + 1 : "";
  size_t want_len = brace ? strcspn(want, "}") : 0;
  for (const char *p = page; p && *p;) {
    if (!strncmp(p, series, name_len) && (p[name_len] == ' ' || p[name_len] == '{')) {
      const char *have = p[name_len] == '{' ? p + name_len + 1 : "";
      size_t have_len = p[name_len] == '{' ? strcspn(have, "}") : 0;
      const char *val = strchr(p, ' ');
      if (val && labels_cover(have, have_len, want, want_len)) {
        *v = strtod(val + 1, NULL);
        return 0;
      }
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return -1;
}

/* ---- fixtures ----------------------------------------------------------------------------- */

int hc_mkmodel(const char *path, int ctx_len) {
  char ctx[16];
  snprintf(ctx, sizeof ctx, "%d", ctx_len);
  char *const argv[] = {(char *)WT_WEIR, "mkmodel", "--preset", "tiny", "--ctx", ctx,
                        "--name", "tiny-test", "--out", (char *)path, NULL};
  char *out = NULL;
  int rc = wt_run(argv, &out, 60000);
  if (rc != 0) fprintf(stderr, "weir mkmodel failed (%d):\n%s\n", rc, out ? out : "");
  free(out);
  return rc;
}

int hc_start_test_server(hc_server *s, const char *dir, const char *name, const char *model,
                         const char *const *extra) {
  enum { MAX_ARGS = 64 };
  const char *args[MAX_ARGS];
  char *owned[3];
  int n = 0, no = 0;
  s->port = wt_free_port();
  owned[no++] = wt_strf("model.path=%s", model);
  owned[no++] = wt_strf("server.port=%d", s->port);
  owned[no++] = wt_strf("plugins.dirs=[\"%s\"]", WT_PLUGIN_DIR);
  for (int i = 0; i < no; i++) {
    args[n++] = "--set";
    args[n++] = owned[i];
  }
  static const char *const common[] = {"server.host=127.0.0.1", "device.threads=1",
                                       "cache.memory_bytes=67108864", NULL};
  for (int i = 0; common[i]; i++) {
    args[n++] = "--set";
    args[n++] = common[i];
  }
  for (int i = 0; extra && extra[i] && n < MAX_ARGS - 3; i++) {
    args[n++] = "--set";
    args[n++] = extra[i];
  }
  args[n] = NULL;
  char *log = wt_strf("%s/%s.log", dir, name);
  int rc = hc_server_start(s, args, log, 30000);
  if (rc != 0) {
    char *text = wt_read_file(log, NULL);
    fprintf(stderr, "server %s did not become ready; log:\n%s\n", name, text ? text : "");
    free(text);
  }
  free(log);
  for (int i = 0; i < no; i++) free(owned[i]);
  return rc;
}

char *hc_get_metrics(int port) {
  hc_response r;
  char *page = NULL;
  if (hc_request(port, "GET", "/metrics", NULL, NULL, &r) == 0 && r.status == 200) {
    page = r.body;
    r.body = NULL;
  }
  hc_response_free(&r);
  return page;
}

int hc_alive_status(int port) {
  hc_response r;
  int status = 0;
  if (hc_request(port, "POST", "/v1/completions", NULL,
                 "{\"prompt\":\"hello\",\"max_tokens\":2,\"ignore_eos\":true}", &r) == 0)
    status = r.status;
  hc_response_free(&r);
  return status;
}

int hc_skip_without_server(int ready) {
  if (!ready) fprintf(stderr, "\n  skipped: no server (see above)\n");
  return !ready;
}
