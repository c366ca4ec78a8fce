/* The cache plugins through the real loader (docs/response-cache.md): the memory plugin's
 * bound in bytes, LRU order, TTL, replace, clear by prefix, refusal of a value larger than
 * the bound, and its consistency under threads hammering it; SHA-256 (the keys' hash)
 * against the FIPS 180-4 vectors; the redis plugin against a real redis-server started on a
 * free loopback port (when redis-server is installed: skipped with a message otherwise). */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/toml.h"
#include "plugin/loader.h"
#include "testutil.h"
#include "util/sha256.h"
#include "weir/cache.h"

static weir_plugin_dirs g_dirs;
static char *g_dir_list[1] = {WT_PLUGIN_DIR};

static weir_plugin *load(const char *name, const char *toml) {
  weir_toml_node *t = NULL;
  char err[1024] = "";
  if (toml && weir_toml_parse_string(toml, "test", &t, err, sizeof err) != 0) return NULL;
  weir_plugin_request req = {.kind = WEIR_PLUGIN_CACHE, .name = name, .dirs = &g_dirs,
                             .table = t, .section = "cache", .device_name = "cpu"};
  weir_plugin *p = NULL;
  int rc = weir_plugin_load(&req, &p, err, sizeof err);
  if (rc) fprintf(stderr, "load %s: %s\n", name, err);
  weir_toml_free(t);
  return p;
}

typedef struct got {
  char buf[4096];
  size_t len;
  int calls;
} got;

static void sink(void *arg, const void *data, size_t len) {
  got *g = arg;
  g->calls++;
  g->len = len < sizeof g->buf ? len : sizeof g->buf;
  memcpy(g->buf, data, g->len);
}

static int get(weir_plugin *p, const char *key, got *g) {
  const weir_cache_ops *o = p->ops;
  memset(g, 0, sizeof *g);
  return o->get(p->self, key, strlen(key), sink, g);
}

static int put(weir_plugin *p, const char *key, const char *val, int64_t ttl) {
  const weir_cache_ops *o = p->ops;
  return o->put(p->self, key, strlen(key), val, strlen(val), ttl);
}

static void test_sha256(void) {
  const struct {
    const char *in, *hex;
  } v[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    weir_sha256 h;
    uint8_t d[32];
    char hex[65];
    weir_sha256_init(&h);
    /* Fed one byte at a time for the longer vector: the block boundary logic. */
    for (size_t j = 0; j < strlen(v[i].in); j++) weir_sha256_update(&h, v[i].in + j, 1);
    weir_sha256_final(&h, d);
    weir_sha256_hex(d, hex);
    CU_ASSERT_STRING_EQUAL(hex, v[i].hex);
  }
  /* A million 'a's (FIPS 180-2 appendix B.3). */
  weir_sha256 h;
  uint8_t d[32];
  char hex[65], a[1000];
  memset(a, 'a', sizeof a);
  weir_sha256_init(&h);
  for (int i = 0; i < 1000; i++) weir_sha256_update(&h, a, sizeof a);
  weir_sha256_final(&h, d);
  weir_sha256_hex(d, hex);
  CU_ASSERT_STRING_EQUAL(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_memory_basics(void) {
  weir_plugin *p = load("memory", "max_bytes = 4096\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  const weir_cache_ops *o = p->ops;
  /* In-process, never blocking: the server's front index probes it on the loop (ABI 1.7). */
  CU_ASSERT_TRUE(o->struct_size >= sizeof(weir_cache_ops) && (o->flags & WEIR_CACHE_NONBLOCKING));
  got g;
  WT_ASSERT_INT_EQ(get(p, "weir:a", &g), WEIR_E_NOTFOUND);
  WT_ASSERT_INT_EQ(g.calls, 0);
  WT_ASSERT_INT_EQ(put(p, "weir:a", "alpha", 60000), WEIR_OK);
  WT_ASSERT_INT_EQ(get(p, "weir:a", &g), WEIR_OK);
  CU_ASSERT(g.calls == 1 && g.len == 5 && !memcmp(g.buf, "alpha", 5));
  /* Replace. */
  WT_ASSERT_INT_EQ(put(p, "weir:a", "beta", 60000), WEIR_OK);
  WT_ASSERT_INT_EQ(get(p, "weir:a", &g), WEIR_OK);
  CU_ASSERT(g.len == 4 && !memcmp(g.buf, "beta", 4));
  /* A value larger than the whole bound is refused, and nothing is evicted for it. */
  char big[5000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  WT_ASSERT_INT_EQ(put(p, "weir:big", big, 60000), WEIR_E_RANGE);
  WT_ASSERT_INT_EQ(get(p, "weir:a", &g), WEIR_OK);
  WT_ASSERT_INT_EQ(put(p, "weir:a", "x", 0), WEIR_E_INVAL);
  /* TTL. */
  WT_ASSERT_INT_EQ(put(p, "weir:t", "short", 50), WEIR_OK);
  WT_ASSERT_INT_EQ(get(p, "weir:t", &g), WEIR_OK);
  usleep(120000);
  WT_ASSERT_INT_EQ(get(p, "weir:t", &g), WEIR_E_NOTFOUND);
  /* Clear by prefix. */
  WT_ASSERT_INT_EQ(put(p, "weir:v1:s1:x", "1", 60000), WEIR_OK);
  WT_ASSERT_INT_EQ(put(p, "weir:v1:s1:y", "2", 60000), WEIR_OK);
  WT_ASSERT_INT_EQ(put(p, "weir:v1:s2:x", "3", 60000), WEIR_OK);
  int64_t removed = -1;
  WT_ASSERT_INT_EQ(o->clear(p->self, "weir:v1:s1:", 11, &removed), WEIR_OK);
  WT_ASSERT_INT_EQ(removed, 2);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:s1:x", &g), WEIR_E_NOTFOUND);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:s2:x", &g), WEIR_OK);
  WT_ASSERT_INT_EQ(o->clear(p->self, "", 0, &removed), WEIR_OK);
  WT_ASSERT_INT_EQ(removed, 2); /* weir:a and weir:v1:s2:x */
  WT_ASSERT_INT_EQ(get(p, "weir:a", &g), WEIR_E_NOTFOUND);
  weir_plugin_unload(p);
}

/* The bound holds and the least recently used entry goes first. */
static void test_memory_lru(void) {
  weir_plugin *p = load("memory", "max_bytes = 4096\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  char val[401], key[32];
  memset(val, 'v', 400);
  val[400] = 0;
  got g;
  /* Each entry is about 400 + key + bookkeeping bytes: eight fit, not ten. */
  for (int i = 0; i < 8; i++) {
    snprintf(key, sizeof key, "weir:k%d", i);
    WT_ASSERT_INT_EQ(put(p, key, val, 60000), WEIR_OK);
  }
  /* Touch k0, so k1 is now the least recently used. */
  WT_ASSERT_INT_EQ(get(p, "weir:k0", &g), WEIR_OK);
  for (int i = 8; i < 12; i++) {
    snprintf(key, sizeof key, "weir:k%d", i);
    WT_ASSERT_INT_EQ(put(p, key, val, 60000), WEIR_OK);
  }
  WT_ASSERT_INT_EQ(get(p, "weir:k0", &g), WEIR_OK);
  WT_ASSERT_INT_EQ(get(p, "weir:k1", &g), WEIR_E_NOTFOUND);
  WT_ASSERT_INT_EQ(get(p, "weir:k11", &g), WEIR_OK);
  int present = 0;
  for (int i = 0; i < 12; i++) {
    snprintf(key, sizeof key, "weir:k%d", i);
    present += get(p, key, &g) == WEIR_OK;
  }
  /* Bytes bound: fewer than the 12 written, at least the 4 most recent plus k0. */
  CU_ASSERT(present >= 5 && present <= 9);
  weir_plugin_unload(p);
}

typedef struct hammer {
  weir_plugin *p;
  int id, bad;
} hammer;

static void *hammer_run(void *arg) {
  hammer *h = arg;
  char key[48], val[64];
  got g;
  for (int i = 0; i < 20000; i++) {
    int k = (i * 7 + h->id) % 300;
    snprintf(key, sizeof key, "weir:h%d", k);
    snprintf(val, sizeof val, "value-of-%d", k);
    if (i % 3 == 0) {
      if (put(h->p, key, val, 60000) != WEIR_OK) h->bad++;
    } else if (get(h->p, key, &g) == WEIR_OK) {
      /* Whatever thread wrote it, the value belongs to this key. */
      if (g.len != strlen(val) || memcmp(g.buf, val, g.len)) h->bad++;
    }
  }
  return NULL;
}

static void test_memory_threads(void) {
  weir_plugin *p = load("memory", "max_bytes = 16384\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  pthread_t t[8];
  hammer h[8];
  for (int i = 0; i < 8; i++) {
    h[i] = (hammer){p, i, 0};
    pthread_create(&t[i], NULL, hammer_run, &h[i]);
  }
  int bad = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(t[i], NULL);
    bad += h[i].bad;
  }
  WT_ASSERT_INT_EQ(bad, 0);
  weir_plugin_unload(p);
}

/* ---- redis ---- */

static pid_t start_redis(int port) {
  pid_t pid = fork();
  if (pid == 0) {
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static void stop_redis(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

static void test_redis(void) {
  if (system("command -v redis-server >/dev/null 2>&1") != 0) {
    fprintf(stderr, "\n  redis-server not installed: redis plugin test skipped\n");
    return;
  }
  int port = wt_free_port();
  pid_t pid = start_redis(port);
  char toml[256];
  snprintf(toml, sizeof toml, "port = %d\nretry_ms = 100\ntimeout_ms = 500\n", port);
  weir_plugin *p = NULL;
  got g;
  for (int i = 0; i < 100; i++) { /* until redis answers */
    usleep(50000);
    if (!p) p = load("redis", toml);
    if (p && put(p, "weir:probe", "1", 60000) == WEIR_OK) break;
  }
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  const weir_cache_ops *o = p->ops;
  /* Its calls go over the network: the server must never call it on its loop (ABI 1.7). */
  CU_ASSERT_TRUE(o->struct_size >= sizeof(weir_cache_ops) && !(o->flags & WEIR_CACHE_NONBLOCKING));
  WT_ASSERT_INT_EQ(o->clear(p->self, "", 0, NULL), WEIR_OK);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:a:b", &g), WEIR_E_NOTFOUND);
  /* Binary-safe values. */
  const char bin[] = {'a', 0, 'b', '\r', '\n', (char)0xff};
  WT_ASSERT_INT_EQ(o->put(p->self, "weir:v1:a:b", 11, bin, sizeof bin, 60000), WEIR_OK);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:a:b", &g), WEIR_OK);
  CU_ASSERT(g.len == sizeof bin && !memcmp(g.buf, bin, sizeof bin));
  /* TTL. */
  WT_ASSERT_INT_EQ(put(p, "weir:v1:a:t", "x", 100), WEIR_OK);
  usleep(250000);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:a:t", &g), WEIR_E_NOTFOUND);
  /* Clear by prefix: a glob character in the prefix is matched literally. */
  WT_ASSERT_INT_EQ(put(p, "weir:v1:s*:x", "1", 60000), WEIR_OK);
  WT_ASSERT_INT_EQ(put(p, "weir:v1:sa:x", "2", 60000), WEIR_OK);
  int64_t removed = 0;
  WT_ASSERT_INT_EQ(o->clear(p->self, "weir:v1:s*:", 11, &removed), WEIR_OK);
  WT_ASSERT_INT_EQ(removed, 1);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:sa:x", &g), WEIR_OK);
  /* Down: fails fast with WEIR_E_IO, never hangs; back up: works again. */
  stop_redis(pid);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:sa:x", &g), WEIR_E_IO);
  for (int i = 0; i < 50; i++) WT_ASSERT_INT_EQ(get(p, "weir:v1:sa:x", &g), WEIR_E_IO);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* Fifty calls inside retry_ms touch no network: far below fifty timeouts. */
  CU_ASSERT((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 5000);
  WT_ASSERT_INT_EQ(put(p, "weir:v1:sa:y", "1", 1000), WEIR_E_IO);
  pid = start_redis(port);
  int ok = 0;
  for (int i = 0; i < 100 && !ok; i++) {
    usleep(50000);
    ok = put(p, "weir:v1:sa:z", "back", 60000) == WEIR_OK;
  }
  CU_ASSERT(ok);
  WT_ASSERT_INT_EQ(get(p, "weir:v1:sa:z", &g), WEIR_OK);
  weir_plugin_unload(p);
  stop_redis(pid);
}

int main(void) {
  g_dirs.dirs = g_dir_list;
  g_dirs.num = 1;
  static const wt_test tests[] = {
      {"sha256 (FIPS 180-4 vectors)", test_sha256},
      {"memory: get, put, replace, too large, ttl, clear", test_memory_basics},
      {"memory: byte bound and LRU order", test_memory_lru},
      {"memory: eight threads at once", test_memory_threads},
      {"redis: a real redis-server, down and back", test_redis},
      {NULL, NULL}};
  return wt_run_suite("cache_plugins", tests);
}
