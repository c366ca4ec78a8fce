/* Set-up shared by the fuzz targets: a scratch directory with the tiny models, and the way a
 * broken invariant is reported. */
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz_targets.h"
#include "util/utf8.h"

extern char **environ;

static char g_dir[256];
static char g_plugins[1024];
static const char *g_input = "(input)";

void weir_fuzz_set_input_name(const char *name) { g_input = name ? name : "(input)"; }
const char *weir__fuzz_dir(void) { return g_dir; }
const char *weir__fuzz_plugin_dir(void) { return g_plugins; }

void weir__fuzz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "\nfuzz invariant broken on %s: ", g_input);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/* Runs `weir mkmodel` with the given arguments (NULL-terminated), quietly. */
static int mkmodel(const char *weir, const char *const *args) {
  const char *argv[32];
  int n = 0;
  argv[n++] = weir;
  argv[n++] = "mkmodel";
  for (int i = 0; args[i] && n < 30; i++) argv[n++] = args[i];
  argv[n] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, weir, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void remove_dir(void) {
  if (!g_dir[0]) return;
  DIR *d = opendir(g_dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char p[512];
      snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(g_dir);
  g_dir[0] = '\0';
}

void weir__fuzz_http_teardown(void);
void weir__fuzz_tokenizer_teardown(void);

void weir_fuzz_teardown(void) {
  weir__fuzz_http_teardown();
  weir__fuzz_tokenizer_teardown();
  remove_dir();
}

int weir_fuzz_setup(const char *weir_binary, const char *plugin_dir, const char *source_dir) {
  (void)source_dir;
  if (g_dir[0]) return 0;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/weir-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    g_dir[0] = '\0';
    return -1;
  }
  atexit(remove_dir);
  snprintf(g_plugins, sizeof g_plugins, "%s", plugin_dir);
  char serve[512], llama[512], gpt2[512];
  snprintf(serve, sizeof serve, "%s/serve.gguf", g_dir);
  snprintf(llama, sizeof llama, "%s/tok-llama.gguf", g_dir);
  snprintf(gpt2, sizeof gpt2, "%s/tok-gpt2.gguf", g_dir);
  /* The served model is as small as a model can usefully be: generation is most of what a
   * generating input costs, and the targets must run millions of inputs. */
  const char *serve_args[] = {"--preset", "tiny", "--dim", "32", "--layers", "1", "--heads", "2",
                              "--kv-heads", "1", "--ffn", "64", "--ctx", "128", "--name",
                              "fuzz", "--out", serve, NULL};
  const char *llama_args[] = {"--preset", "tiny", "--dim", "16", "--layers", "1", "--heads", "1",
                              "--kv-heads", "1", "--ffn", "16", "--vocab", "600", "--out",
                              llama, NULL};
  const char *gpt2_args[] = {"--preset", "tiny", "--dim", "16", "--layers", "1", "--heads", "1",
                             "--kv-heads", "1", "--ffn", "16", "--vocab", "600", "--tokenizer",
                             "gpt2", "--chat-template", "llama3", "--out", gpt2, NULL};
  if (mkmodel(weir_binary, serve_args) || mkmodel(weir_binary, llama_args) ||
      mkmodel(weir_binary, gpt2_args)) {
    fprintf(stderr, "fuzz set-up: `%s mkmodel` failed\n", weir_binary);
    return -1;
  }
  return 0;
}
