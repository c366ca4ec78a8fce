#include "testutil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int wt_run_suite_ex(const char *suite, const wt_test *tests, int (*init)(void),
                    int (*cleanup)(void)) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite(suite, init, cleanup);
  if (!s) return 2;
  for (const wt_test *t = tests; t->name; t++)
    if (!CU_add_test(s, t->name, t->fn)) return 2;
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
                    CU_get_number_of_suites_failed();
  CU_cleanup_registry();
  return failed ? 1 : 0;
}

int wt_run_suite(const char *suite, const wt_test *tests) {
  return wt_run_suite_ex(suite, tests, NULL, NULL);
}

char *wt_mkdtemp(void) {
  const char *base = getenv("TMPDIR");
  char *p = wt_strf("%s/weir-test-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(p)) {
    free(p);
    return NULL;
  }
  return p;
}

void wt_rmtree(const char *path) {
  DIR *d = opendir(path);
  if (!d) {
    unlink(path);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *sub = wt_strf("%s/%s", path, e->d_name);
    struct stat st;
    if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) wt_rmtree(sub);
    else unlink(sub);
    free(sub);
  }
  closedir(d);
  rmdir(path);
}

int wt_write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t n = fwrite(data, 1, len, f);
  return (fclose(f) == 0 && n == len) ? 0 : -1;
}

char *wt_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += r;
    if (cap - n - 1 == 0) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) { free(buf); buf = NULL; break; }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) return NULL;
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}

char *wt_strf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0) s = NULL;
  va_end(ap);
  return s;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int wt_run(char *const argv[], char **out, int timeout_ms) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t cap = 8192, n = 0;
  char *buf = malloc(cap);
  long long deadline = now_ms() + timeout_ms;
  int killed = 0;
  for (;;) {
    long long left = deadline - now_ms();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = 1;
      break;
    }
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int r = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    if (n + 4096 + 1 > cap) {
      cap *= 2;
      buf = realloc(buf, cap);
    }
    ssize_t k = read(fds[0], buf + n, cap - n - 1);
    if (k <= 0) break;
    n += (size_t)k;
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  buf[n] = 0;
  if (out) *out = buf;
  else free(buf);
  if (killed) return 128 + SIGKILL;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int wt_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int wt_for_each_file(const char *dir, wt_file_fn fn, void *ctx) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *path = wt_strf("%s/%s", dir, e->d_name);
    size_t len = 0;
    char *data = wt_read_file(path, &len);
    if (data) {
      fn(path, e->d_name, data, len, ctx);
      count++;
    }
    free(data);
    free(path);
  }
  closedir(d);
  return count;
}
