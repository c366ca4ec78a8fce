/* Runs the Jinja fuzz entry over a deterministic corpus: the seeds in
 * tests/fuzz/corpus/jinja/, every chat template of tests/jinja/templates/ and every
 * language case of tests/jinja/fixtures/lang.json, each whole, truncated at many lengths and
 * mutated many times (bytes flipped, tag delimiters spliced in). With --write-corpus DIR it
 * writes those seeds for libFuzzer instead. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_jinja_entry.h"
#include "testutil.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { return wt_xorshift64(&rng); }

typedef struct seed {
  char *data;
  size_t len;
  char name[96];
} seed;
static seed g_seeds[256];
static int g_n;

static void add(const char *name, const char *data, size_t len) {
  if (g_n >= (int)(sizeof g_seeds / sizeof g_seeds[0])) return;
  seed *s = &g_seeds[g_n++];
  s->data = malloc(len + 1);
  memcpy(s->data, data, len);
  s->data[len] = '\0';
  s->len = len;
  snprintf(s->name, sizeof s->name, "%s", name);
}

/* Adds one file as a seed named prefix + its file name (ctx: the prefix). */
static void add_file(const char *path, const char *name, const char *data, size_t len,
                     void *ctx) {
  (void)path;
  char *seed_name = wt_strf("%s%s", (const char *)ctx, name);
  add(seed_name, data, len);
  free(seed_name);
}

/* The number of files added; a missing directory fails the suite (a corpus that silently
 * went away would leave nothing replayed). */
static int add_dir(const char *dir, const char *prefix) {
  int n = wt_for_each_file(dir, add_file, (void *)prefix);
  if (n <= 0) fprintf(stderr, "\n  %s: no inputs (expected the committed ones)\n", dir);
  return n;
}

static int g_dir_counts[2];

static void build_seeds(void) {
  g_dir_counts[0] = add_dir(WT_SOURCE_DIR "/tests/fuzz/corpus/jinja", "seed-");
  g_dir_counts[1] = add_dir(WT_SOURCE_DIR "/tests/jinja/templates", "tpl-");
  size_t len;
  char *data = wt_read_file(WT_SOURCE_DIR "/tests/jinja/fixtures/lang.json", &len);
  cJSON *j = data ? cJSON_ParseWithLength(data, len) : NULL;
  free(data);
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
    const char *t = cJSON_GetObjectItem(c, "template")->valuestring;
    char *name = wt_strf("lang-%s", cJSON_GetObjectItem(c, "name")->valuestring);
    add(name, t, strlen(t));
    free(name);
  }
  cJSON_Delete(j);
}

static int g_counts[4];

static void run(const uint8_t *d, size_t n) {
  int rc = weir_fuzz_jinja(d, n);
  if (rc < 0) {
    fprintf(stderr, "\n  refused without a message: %.*s\n", (int)(n > 200 ? 200 : n), (const char *)d);
    CU_FAIL("the fuzz entry saw a failure without a message");
    return;
  }
  g_counts[rc]++;
}

static void test_corpus(void) {
  static const char *const splices[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]",
                                        "'", "\"", "|", ".", "\\", "\n", "\xff", "\xc3", "{% endfor %}",
                                        "{% for x in messages %}", "{{ loop.index }}", "*", "~"};
  CU_ASSERT(g_dir_counts[0] > 0 && g_dir_counts[1] > 0);
  CU_ASSERT_FATAL(g_n >= 100);
  for (int s = 0; s < g_n; s++) {
    const seed *sd = &g_seeds[s];
    run((const uint8_t *)sd->data, sd->len);
    size_t stride = sd->len / 40 + 1;
    for (size_t cut = 0; cut < sd->len; cut += stride) run((const uint8_t *)sd->data, cut);
    char *buf = malloc(sd->len + 64);
    for (int m = 0; m < 300; m++) {
      size_t len = sd->len;
      memcpy(buf, sd->data, len);
      int edits = 1 + (int)(rnd() % 3);
      for (int e = 0; e < edits && len > 0; e++) {
        size_t at = (size_t)(rnd() % len);
        if (rnd() % 2) {
          buf[at] = (char)rnd();
        } else {
          const char *sp = splices[rnd() % (sizeof splices / sizeof splices[0])];
          size_t sl = strlen(sp);
          if (len + sl > sd->len + 60) continue;
          memmove(buf + at + sl, buf + at, len - at);
          memcpy(buf + at, sp, sl);
          len += sl;
        }
      }
      run((const uint8_t *)buf, len);
    }
    free(buf);
  }
  /* the corpus reaches every outcome: no parse, a failed render, a render */
  CU_ASSERT(g_counts[0] > 100 && g_counts[1] > 100 && g_counts[2] > 100);
}

static int write_corpus(const char *dir) {
  for (int s = 0; s < g_n; s++) {
    char *path = wt_strf("%s/%s", dir, g_seeds[s].name);
    for (char *p = path + strlen(dir) + 1; *p; p++)
      if (*p == '/' || *p == ' ') *p = '_';
    if (wt_write_file(path, g_seeds[s].data, g_seeds[s].len)) {
      free(path);
      return 1;
    }
    free(path);
  }
  return 0;
}

int main(int argc, char **argv) {
  build_seeds();
  int rc;
  if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) {
    rc = write_corpus(argv[2]);
  } else {
    static const wt_test tests[] = {{"corpus", test_corpus}, {NULL, NULL}};
    rc = wt_run_suite("fuzz_jinja_corpus", tests);
  }
  for (int s = 0; s < g_n; s++) free(g_seeds[s].data);
  return rc;
}
