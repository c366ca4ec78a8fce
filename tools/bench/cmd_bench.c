/* `weir bench`: the command line, single runs, and A/B runs that alternate two targets in
 * rounds, starting `weir serve` itself when a target is a config file. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "util/opt.h"

static void usage(FILE *f) {
  fprintf(f,
"usage: weir bench --url http://HOST:PORT [options]\n"
"       weir bench --a URL|--a-config FILE  --b URL|--b-config FILE [options]\n"
"\n"
"Drives a streaming load against an OpenAI-compatible server (http only, no https) and\n"
"reports TTFT, inter-token latency, TPOT, end-to-end latency, throughput and goodput.\n"
"With two targets it runs the same seeded workload on both, alternating rounds (ABAB...),\n"
"and calls a difference only where it exceeds the run-to-run spread.\n"
"\n"
"target:\n"
"  --url URL               base URL of one server (http://host:port; /v1/... is appended)\n"
"  --a URL, --b URL        two servers to compare\n"
"  --a-config F, --b-config F  config files: start `weir serve --config F --port P` for\n"
"                          each round (one server at a time), stop it after the round\n"
"  --label-a S, --label-b S   names in the report (default A, B)\n"
"  --serve-arg ARG         extra argument for `weir serve` (repeatable)\n"
"  --server-timeout S      seconds to wait for GET /health = 200 (default 120)\n"
"  --server-log FILE       where started servers write (default: a file in $TMPDIR)\n"
"  --endpoint completions|chat   (default completions)\n"
"  --model NAME            model field (default: the first id from GET /v1/models)\n"
"  --api-key KEY           sent as a bearer token (default: $WEIR_API_KEY / $OPENAI_API_KEY)\n"
"load:\n"
"  --concurrency N         closed loop at N in flight (default 1); with --rate, a cap\n"
"  --rate R                open loop: R requests/s, arrival times precomputed from --seed\n"
"  --burstiness K          gamma shape of inter-arrival times (1 = Poisson, <1 burstier)\n"
"  --num-requests N        requests per run (default 100 unless --duration is given)\n"
"  --duration S            stop sending after S seconds\n"
"  --warmup N              requests sent first and excluded (default 0)\n"
"  --timeout S             per-request timeout (default 60)\n"
"  --max-time S            hard bound per run; in-flight requests are canceled (default 1800)\n"
"  --no-keep-alive         one connection per request (\"Connection: close\"); by default\n"
"                          each slot keeps its HTTP/1.1 connection, as real clients do\n"
"dataset:\n"
"  --dataset random|shared-prefix|jsonl|copy   (default random)\n"
"  --input-len N --input-range F   prompt tokens, uniform in N*(1-F)..N*(1+F) (128, 0)\n"
"  --output-len N --output-range F max_tokens likewise (default 64, 0)\n"
"  --output-dist uniform|exponential  exponential: max_tokens drawn from an exponential\n"
"                          distribution of mean --output-len, rounded up, cut at\n"
"                          --output-cap (the static-batching workload; with\n"
"                          --ignore-eos and --concurrency = --num-requests)\n"
"  --output-cap N          exponential: the largest max_tokens (default none)\n"
"  --prompt-format text|tokens     text: seeded English words, as many as make the\n"
"                          length on the server's tokenizer (tokens per word measured\n"
"                          once with POST /tokenize; 1 per word when it has none);\n"
"                          tokens: an array of token ids, exact lengths (completions only)\n"
"  --vocab N               token ids are drawn from [10, N) (default 256)\n"
"  --num-prefixes N --prefix-len L  shared-prefix: N prefixes of L tokens (4, 256);\n"
"                          request i uses prefix i mod N plus --input-len fresh tokens\n"
"  --file F                JSONL: {\"prompt\": \"...\"} or {\"messages\": [...]} per line,\n"
"                          optional \"max_tokens\"; used in order, cycled\n"
"                          copy: a plain text file; each prompt is a seeded passage of\n"
"                          it (half of --input-len), a blank line, the passage again,\n"
"                          a blank line and its first 8 words: the answer repeats it\n"
"  --copy-edits F          copy: fraction of the second copy's words replaced (0)\n"
"  --ignore-eos            ask the server to generate exactly max_tokens\n"
"  --temperature T         sent when given\n"
"  --seed N                workload seed (default 0)\n"
"  --repeat-rate R         fraction of requests that repeat an earlier one exactly (0..1; a\n"
"                          response-cache workload; use with --temperature 0). A repeat\n"
"                          copies a request at least --repeat-gap earlier, so that its\n"
"                          answer is normally complete, as a question asked again after\n"
"                          it was answered; the first requests cannot repeat, so the\n"
"                          others repeat with probability R*N/(N-gap) (N = --num-requests)\n"
"                          and the expected share over the run is R. Seeded: A and B send\n"
"                          the same requests\n"
"  --repeat-gap G          how far back a repeat reaches at least (default 2 x --concurrency:\n"
"                          in a closed loop the requests in flight are about the last\n"
"                          concurrency/(1-R) sent; 1 = any earlier request, perhaps one\n"
"                          still generating)\n"
"SLOs for goodput (a request is good when within every one given):\n"
"  --slo-ttft-ms X  --slo-tpot-ms X  --slo-e2e-ms X\n"
"A/B:\n"
"  --rounds N              rounds per side (default 4 for A/B, 1 otherwise)\n"
"  --alpha A               significance level of the per-round test (default 0.05)\n"
"output:\n"
"  --json FILE             the JSON result (docs/bench-schema.md)\n"
"  --svg FILE              the SVG chart\n"
"  --quiet                 no progress line\n"
"  --requests-out FILE     every measured request as one JSON line (times, chunks, error)\n"
"  --dump-workload FILE    write the request bodies as JSONL and exit (no network)\n"
"\n"
"Ctrl-C stops sending, cancels what is in flight and prints what was measured (exit 130).\n");
}

enum {
  O_URL = 256, O_A, O_B, O_ACFG, O_BCFG, O_LA, O_LB, O_SERVE_ARG, O_SERVER_TIMEOUT, O_SERVER_LOG,
  O_ENDPOINT, O_MODEL, O_API_KEY, O_CONC, O_RATE, O_BURST, O_NUM, O_DUR, O_WARM, O_TIMEOUT,
  O_MAXTIME, O_DATASET, O_INLEN, O_INRANGE, O_OUTLEN, O_OUTRANGE, O_PFMT, O_VOCAB, O_NPREF,
  O_PREFLEN, O_FILE, O_COPY_EDITS, O_IGNORE_EOS, O_TEMP, O_SEED, O_REPEAT, O_SLO_TTFT, O_SLO_TPOT, O_SLO_E2E,
  O_ROUNDS,
  O_ALPHA, O_JSON, O_SVG, O_QUIET, O_DUMP, O_REQS,
  O_OUTDIST, O_OUTCAP, O_NO_KEEPALIVE, O_REPEAT_GAP,
};

static const struct option k_opts[] = {
    {"url", 1, 0, O_URL}, {"a", 1, 0, O_A}, {"b", 1, 0, O_B}, {"a-config", 1, 0, O_ACFG},
    {"b-config", 1, 0, O_BCFG}, {"label-a", 1, 0, O_LA}, {"label-b", 1, 0, O_LB},
    {"serve-arg", 1, 0, O_SERVE_ARG}, {"server-timeout", 1, 0, O_SERVER_TIMEOUT},
    {"server-log", 1, 0, O_SERVER_LOG}, {"endpoint", 1, 0, O_ENDPOINT}, {"model", 1, 0, O_MODEL},
    {"api-key", 1, 0, O_API_KEY}, {"concurrency", 1, 0, O_CONC}, {"rate", 1, 0, O_RATE},
    {"burstiness", 1, 0, O_BURST}, {"num-requests", 1, 0, O_NUM}, {"duration", 1, 0, O_DUR},
    {"warmup", 1, 0, O_WARM}, {"timeout", 1, 0, O_TIMEOUT}, {"max-time", 1, 0, O_MAXTIME},
    {"dataset", 1, 0, O_DATASET}, {"input-len", 1, 0, O_INLEN}, {"input-range", 1, 0, O_INRANGE},
    {"output-len", 1, 0, O_OUTLEN}, {"output-range", 1, 0, O_OUTRANGE},
    {"prompt-format", 1, 0, O_PFMT}, {"vocab", 1, 0, O_VOCAB}, {"num-prefixes", 1, 0, O_NPREF},
    {"prefix-len", 1, 0, O_PREFLEN}, {"file", 1, 0, O_FILE}, {"copy-edits", 1, 0, O_COPY_EDITS},
    {"ignore-eos", 0, 0, O_IGNORE_EOS}, {"temperature", 1, 0, O_TEMP}, {"seed", 1, 0, O_SEED},
    {"repeat-rate", 1, 0, O_REPEAT}, {"slo-ttft-ms", 1, 0, O_SLO_TTFT},
    {"slo-tpot-ms", 1, 0, O_SLO_TPOT}, {"slo-e2e-ms", 1, 0, O_SLO_E2E}, {"rounds", 1, 0, O_ROUNDS},
    {"alpha", 1, 0, O_ALPHA}, {"json", 1, 0, O_JSON}, {"svg", 1, 0, O_SVG}, {"quiet", 0, 0, O_QUIET},
    {"dump-workload", 1, 0, O_DUMP}, {"requests-out", 1, 0, O_REQS},
    {"output-dist", 1, 0, O_OUTDIST}, {"output-cap", 1, 0, O_OUTCAP},
    {"no-keep-alive", 0, 0, O_NO_KEEPALIVE}, {"repeat-gap", 1, 0, O_REPEAT_GAP}, {0, 0, 0, 0},
};

static int parse_num(const char *opt, const char *s, double lo, double hi, double *out) {
  char *e = NULL;
  errno = 0;
  double v = strtod(s, &e);
  if (errno || e == s || *e || v < lo || v > hi) {
    fprintf(stderr, "weir bench: --%s wants a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
    return WEIR_E_INVAL;
  }
  *out = v;
  return WEIR_OK;
}

static void on_sigint(int sig) {
  (void)sig;
  weir__bench_interrupted = 1;
}

/* ------------------------------------------------------------------ servers */

typedef struct server {
  pid_t pid;
  int port;
} server;

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void stop_server(server *s) {
  if (s->pid <= 0) return;
  kill(s->pid, SIGTERM);
  int status;
  /* The server drains on SIGTERM; 30 s is its default drain timeout. */
  for (int i = 0; i < 700; i++) {
    pid_t r = waitpid(s->pid, &status, WNOHANG);
    if (r == s->pid || (r < 0 && errno == ECHILD)) goto done;
    sleep_ms(50);
  }
  fprintf(stderr, "weir bench: server %d ignored SIGTERM; killing it\n", (int)s->pid);
  kill(s->pid, SIGKILL);
  waitpid(s->pid, &status, 0);
done:
  s->pid = 0;
}

static int start_server(const char *config, char **extra, int num_extra, const char *log_path,
                        double timeout_s, server *s) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return WEIR_E_IO;
  exe[n] = 0;
  s->port = free_port();
  if (s->port <= 0) return WEIR_E_IO;
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  char **argv = calloc((size_t)num_extra + 8, sizeof *argv);
  if (!argv) return WEIR_E_NOMEM;
  int k = 0;
  argv[k++] = exe;
  argv[k++] = "serve";
  argv[k++] = "--config";
  argv[k++] = (char *)config;
  argv[k++] = "--port";
  argv[k++] = port;
  for (int i = 0; i < num_extra; i++) argv[k++] = extra[i];
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    free(argv);
    return WEIR_E_IO;
  }
  if (pid == 0) {
    /* Its own process group: Ctrl-C reaches the bench, which stops the server itself. */
    setpgid(0, 0);
    /* And it must not outlive a bench killed by a second Ctrl-C. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    signal(SIGINT, SIG_DFL);
    execv(exe, argv);
    _exit(127);
  }
  free(argv);
  s->pid = pid;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int status = 0, wst;
    char *body = NULL;
    if (weir__bench_http("127.0.0.1", s->port, "GET", "/health", NULL, NULL, 1000, &status, &body) == WEIR_OK &&
        status == 200) {
      free(body);
      return WEIR_OK;
    }
    free(body);
    if (waitpid(s->pid, &wst, WNOHANG) == s->pid) {
      fprintf(stderr, "weir bench: `weir serve --config %s` exited (%s %d) before it was healthy; see %s\n",
              config, WIFEXITED(wst) ? "status" : "signal",
              WIFEXITED(wst) ? WEXITSTATUS(wst) : WTERMSIG(wst), log_path);
      s->pid = 0;
      return WEIR_E_IO;
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
    if (el > timeout_s || weir__bench_interrupted) {
      if (!weir__bench_interrupted)
        fprintf(stderr, "weir bench: `weir serve --config %s` not healthy after %.0f s; see %s\n",
                config, timeout_s, log_path);
      stop_server(s);
      return weir__bench_interrupted ? WEIR_E_CANCELED : WEIR_E_TIMEOUT;
    }
    sleep_ms(100);
  }
}

/* Asks GET /v1/models for the first model id; NULL when the server does not say. */
static char *discover_model(const weir_bench_target *t) {
  int status = 0;
  char *body = NULL, *id = NULL;
  if (weir__bench_http(t->host, t->port, "GET", "/v1/models", NULL, t->api_key, 5000, &status, &body) != WEIR_OK)
    return NULL;
  if (status == 200) {
    cJSON *o = cJSON_Parse(body);
    cJSON *d = cJSON_GetObjectItem(o, "data");
    cJSON *m = cJSON_IsArray(d) ? cJSON_GetArrayItem(d, 0) : NULL;
    cJSON *i = m ? cJSON_GetObjectItem(m, "id") : NULL;
    if (cJSON_IsString(i)) id = strdup(i->valuestring);
    cJSON_Delete(o);
  }
  free(body);
  return id;
}

static int set_target_url(weir_bench_target *t, const char *url) {
  free(t->url);
  free(t->host);
  t->host = NULL;
  t->url = strdup(url);
  if (!t->url) return WEIR_E_NOMEM;
  int rc = weir__bench_parse_url(url, &t->host, &t->port);
  if (rc == WEIR_E_NOTSUP)
    fprintf(stderr, "weir bench: %s: https is not supported; put a TLS-terminating proxy in front or use http\n", url);
  else if (rc)
    fprintf(stderr, "weir bench: %s: want http://host:port\n", url);
  return rc;
}

/* ------------------------------------------------------------------ the command */

typedef struct opts {
  const char *url[2], *config[2], *label[2];
  char **serve_args;
  int num_serve_args;
  double server_timeout_s;
  const char *server_log;
  const char *model, *api_key;
  int rounds;
  double alpha;
  const char *json, *svg, *dump, *requests_out;
  int quiet;
} opts;

static int dump_workload(const weir_bench_workload *w, const weir_bench_load *l, const char *model,
                         const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "weir bench: cannot write %s: %s\n", path, strerror(errno));
    return 1;
  }
  int64_t n = l->num_requests > 0 ? l->num_requests : 100;
  int rc = 0;
  for (int64_t i = 0; i < n && !rc; i++) {
    weir_bench_prompt p;
    if (weir__bench_workload_get(w, 0, i, &p) != WEIR_OK) {
      rc = 1;
      break;
    }
    char *body = weir__bench_request_body(w, &p, model);
    if (body) fprintf(f, "%s\n", body);
    else rc = 1;
    free(body);
    weir__bench_prompt_free(&p);
  }
  if (l->rate > 0) {
    double *arr = malloc(sizeof *arr * (size_t)n);
    if (arr) {
      int64_t k = weir__bench_arrivals(w->seed, l->rate, l->burstiness, l->duration_s, n, arr);
      fprintf(f, "{\"arrivals_s\":[");
      for (int64_t i = 0; i < k; i++) fprintf(f, "%s%.6f", i ? "," : "", arr[i]);
      fprintf(f, "]}\n");
      free(arr);
    }
  }
  if (fclose(f) != 0) rc = 1;
  return rc;
}

int weir__cmd_bench(int argc, char **argv) {
  weir_bench_workload w = {
      .dataset = WEIR_BENCH_DS_RANDOM, .endpoint = WEIR_BENCH_EP_COMPLETIONS, .seed = 0,
      .input_len = 128, .output_len = 64, .vocab = 256, .vocab_lo = 10, .num_prefixes = 4,
      .prefix_len = 256, .temperature = -1,
  };
  weir_bench_load load = {.concurrency = 0, .burstiness = 1.0, .request_timeout_s = 60,
                          .max_time_s = 1800};
  weir_bench_slo slo = {0};
  opts o = {.label = {"A", "B"}, .server_timeout_s = 120, .alpha = 0.05};
  int exit_code = 2, c;
  double v = 0;
  weir_bench_target targets[2];
  memset(targets, 0, sizeof targets);
  weir_bench_report rep;
  memset(&rep, 0, sizeof rep);
  char logbuf[512] = "";
  server srv = {0};
  struct sigaction old_int, old_pipe;
  int signals_set = 0;

  weir_opt op;
  const struct option *tables[] = {k_opts};
  if (weir_opt_init(&op, "weir bench", argc, argv, "", tables, 1) != 0) {
    fprintf(stderr, "weir bench: out of memory\n");
    return 1;
  }
  while ((c = weir_opt_next(&op)) != WEIR_OPT_END) {
    char *arg = op.arg;
    const char *name = arg ? arg : "";
    int rc = WEIR_OK;
    switch (c) {
    case O_URL: o.url[0] = arg; break;
    case O_A: o.url[0] = arg; break;
    case O_B: o.url[1] = arg; break;
    case O_ACFG: o.config[0] = arg; break;
    case O_BCFG: o.config[1] = arg; break;
    case O_LA: o.label[0] = arg; break;
    case O_LB: o.label[1] = arg; break;
    case O_SERVE_ARG: {
      char **na = realloc(o.serve_args, sizeof *na * (size_t)(o.num_serve_args + 1));
      if (!na) goto free_all;
      o.serve_args = na;
      o.serve_args[o.num_serve_args++] = arg;
      break;
    }
    case O_SERVER_TIMEOUT: rc = parse_num("server-timeout", name, 1, 3600, &o.server_timeout_s); break;
    case O_SERVER_LOG: o.server_log = arg; break;
    case O_ENDPOINT:
      if (!strcmp(name, "completions")) w.endpoint = WEIR_BENCH_EP_COMPLETIONS;
      else if (!strcmp(name, "chat")) w.endpoint = WEIR_BENCH_EP_CHAT;
      else rc = WEIR_E_INVAL, fprintf(stderr, "weir bench: --endpoint completions|chat\n");
      break;
    case O_MODEL: o.model = arg; break;
    case O_API_KEY: o.api_key = arg; break;
    case O_CONC: rc = parse_num("concurrency", name, 1, 100000, &v); load.concurrency = (int)v; break;
    case O_RATE: rc = parse_num("rate", name, 1e-6, 1e6, &load.rate); break;
    case O_BURST: rc = parse_num("burstiness", name, 1e-3, 1e3, &load.burstiness); break;
    case O_NUM: rc = parse_num("num-requests", name, 1, 1e8, &v); load.num_requests = (int64_t)v; break;
    case O_DUR: rc = parse_num("duration", name, 0.001, 1e6, &load.duration_s); break;
    case O_WARM: rc = parse_num("warmup", name, 0, 1e6, &v); load.warmup = (int)v; break;
    case O_TIMEOUT: rc = parse_num("timeout", name, 0.001, 1e6, &load.request_timeout_s); break;
    case O_MAXTIME: rc = parse_num("max-time", name, 0.001, 1e7, &load.max_time_s); break;
    case O_DATASET:
      if (!strcmp(name, "random")) w.dataset = WEIR_BENCH_DS_RANDOM;
      else if (!strcmp(name, "shared-prefix")) w.dataset = WEIR_BENCH_DS_SHARED_PREFIX;
      else if (!strcmp(name, "jsonl")) w.dataset = WEIR_BENCH_DS_JSONL;
      else if (!strcmp(name, "copy")) w.dataset = WEIR_BENCH_DS_COPY;
      else rc = WEIR_E_INVAL, fprintf(stderr, "weir bench: --dataset random|shared-prefix|jsonl|copy\n");
      break;
    case O_INLEN: rc = parse_num("input-len", name, 1, 1e6, &v); w.input_len = (int)v; break;
    case O_INRANGE: rc = parse_num("input-range", name, 0, 1, &w.input_range); break;
    case O_OUTLEN: rc = parse_num("output-len", name, 1, 1e6, &v); w.output_len = (int)v; break;
    case O_OUTRANGE: rc = parse_num("output-range", name, 0, 1, &w.output_range); break;
    case O_OUTDIST:
      if (!strcmp(name, "uniform")) w.output_exp = 0;
      else if (!strcmp(name, "exponential") || !strcmp(name, "exp")) w.output_exp = 1;
      else rc = WEIR_E_INVAL, fprintf(stderr, "weir bench: --output-dist uniform|exponential\n");
      break;
    case O_OUTCAP: rc = parse_num("output-cap", name, 1, 1e6, &v); w.output_cap = (int)v; break;
    case O_PFMT:
      if (!strcmp(name, "text")) w.prompt_tokens = 0;
      else if (!strcmp(name, "tokens")) w.prompt_tokens = 1;
      else rc = WEIR_E_INVAL, fprintf(stderr, "weir bench: --prompt-format text|tokens\n");
      break;
    case O_VOCAB: rc = parse_num("vocab", name, 11, 1e8, &v); w.vocab = (int)v; break;
    case O_NPREF: rc = parse_num("num-prefixes", name, 1, 1e6, &v); w.num_prefixes = (int)v; break;
    case O_PREFLEN: rc = parse_num("prefix-len", name, 0, 1e6, &v); w.prefix_len = (int)v; break;
    case O_FILE:
      w.file = arg;
      if (w.dataset != WEIR_BENCH_DS_COPY) w.dataset = WEIR_BENCH_DS_JSONL;
      break;
    case O_COPY_EDITS: rc = parse_num("copy-edits", name, 0, 1, &w.copy_edits); break;
    case O_IGNORE_EOS: w.ignore_eos = 1; break;
    case O_TEMP: rc = parse_num("temperature", name, 0, 100, &w.temperature); break;
    case O_SEED: rc = parse_num("seed", name, 0, 9007199254740992.0, &v); w.seed = (uint64_t)v; break;
    case O_REPEAT: rc = parse_num("repeat-rate", name, 0, 1, &w.repeat_rate); break;
    case O_REPEAT_GAP: rc = parse_num("repeat-gap", name, 1, 1e9, &v); w.repeat_gap = (int64_t)v; break;
    case O_NO_KEEPALIVE: load.no_keep_alive = 1; break;
    case O_SLO_TTFT: rc = parse_num("slo-ttft-ms", name, 1e-3, 1e9, &slo.ttft_ms); break;
    case O_SLO_TPOT: rc = parse_num("slo-tpot-ms", name, 1e-3, 1e9, &slo.tpot_ms); break;
    case O_SLO_E2E: rc = parse_num("slo-e2e-ms", name, 1e-3, 1e9, &slo.e2e_ms); break;
    case O_ROUNDS: rc = parse_num("rounds", name, 1, 64, &v); o.rounds = (int)v; break;
    case O_ALPHA: rc = parse_num("alpha", name, 1e-6, 0.5, &o.alpha); break;
    case O_JSON: o.json = arg; break;
    case O_SVG: o.svg = arg; break;
    case O_QUIET: o.quiet = 1; break;
    case O_DUMP: o.dump = arg; break;
    case O_REQS: o.requests_out = arg; break;
    case 'h': usage(stdout); exit_code = 0; goto free_all;
    case WEIR_OPT_VERSION: weir_opt_print_version(); exit_code = 0; goto free_all;
    case WEIR_OPT_POSITIONAL:
      fprintf(stderr, "weir bench: unexpected argument '%s'\n", name);
      goto free_all;
    case WEIR_OPT_ERROR: fprintf(stderr, "%s\n", op.err); goto free_all;
    default: usage(stderr); goto free_all;
    }
    if (rc) goto free_all;
  }
  if (load.num_requests <= 0 && load.duration_s <= 0) load.num_requests = 100;
  if (load.rate <= 0 && load.concurrency <= 0) load.concurrency = 1;
  if (w.repeat_gap <= 0) w.repeat_gap = 2 * (int64_t)(load.concurrency > 0 ? load.concurrency : 1);
  w.repeat_n = load.num_requests;
  {
    /* One socket per request in flight: the static-batching workload sends 1,000 at once,
     * near the common soft limit of 1,024 descriptors. Raise it to the hard limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)load.concurrency + 64) {
      rl.rlim_cur = rl.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &rl); /* best effort: connects then fail visibly */
    }
  }
  if (w.output_cap && !w.output_exp) {
    fprintf(stderr, "weir bench: --output-cap goes with --output-dist exponential\n");
    goto free_all;
  }
  if (w.output_exp && w.output_range > 0) {
    fprintf(stderr, "weir bench: --output-range is for --output-dist uniform\n");
    goto free_all;
  }
  if (w.prompt_tokens && w.endpoint == WEIR_BENCH_EP_CHAT) {
    fprintf(stderr, "weir bench: --prompt-format tokens needs --endpoint completions\n");
    goto free_all;
  }
  if ((w.dataset == WEIR_BENCH_DS_JSONL || w.dataset == WEIR_BENCH_DS_COPY) && !w.file) {
    fprintf(stderr, "weir bench: --dataset %s needs --file\n",
            w.dataset == WEIR_BENCH_DS_COPY ? "copy" : "jsonl");
    goto free_all;
  }
  if (w.dataset == WEIR_BENCH_DS_COPY && w.prompt_tokens) {
    fprintf(stderr, "weir bench: --dataset copy sends text (not --prompt-format tokens)\n");
    goto free_all;
  }
  {
    char err[512] = "";
    if (weir__bench_workload_load(&w, err, sizeof err)) {
      fprintf(stderr, "weir bench: %s\n", err);
      goto free_all;
    }
  }
  if (o.dump) {
    exit_code = dump_workload(&w, &load, o.model, o.dump);
    goto free_all;
  }

  int sides = 0;
  if (o.url[0] && o.config[0]) {
    fprintf(stderr, "weir bench: give side A as a URL or as a config, not both\n");
    goto free_all;
  }
  if (o.url[1] && o.config[1]) {
    fprintf(stderr, "weir bench: give side B as a URL or as a config, not both\n");
    goto free_all;
  }
  int has_a = o.url[0] || o.config[0], has_b = o.url[1] || o.config[1];
  if (!has_a) {
    fprintf(stderr, "weir bench: no target: give --url URL, or --a/--a-config and --b/--b-config\n\n");
    usage(stderr);
    goto free_all;
  }
  sides = has_b ? 2 : 1;
  if (o.rounds <= 0) o.rounds = sides == 2 ? 4 : 1;
  if (!o.api_key) o.api_key = getenv("WEIR_API_KEY");
  if (!o.api_key) o.api_key = getenv("OPENAI_API_KEY");
  for (int s = 0; s < sides; s++) {
    weir_bench_target *t = &targets[s];
    t->label = strdup(o.label[s]);
    t->config = (char *)o.config[s];
    t->api_key = (char *)o.api_key;
    if (!t->label) goto free_all;
    if (o.url[s] && set_target_url(t, o.url[s])) goto free_all;
    if (o.model && !(t->model = strdup(o.model))) goto free_all;
  }
  if (o.config[0] || o.config[1]) {
    if (!o.server_log) {
      const char *tmp = getenv("TMPDIR");
      snprintf(logbuf, sizeof logbuf, "%s/weir-bench-server-%d.log", tmp && *tmp ? tmp : "/tmp", (int)getpid());
      o.server_log = logbuf;
    }
  }

  /* Ctrl-C sets a flag every loop polls; a second Ctrl-C is the default action (exit). */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe);
  signals_set = 1;
  weir__bench_interrupted = 0;
  weir__bench_progress = !o.quiet && isatty(2);

  rep.w = &w;
  rep.load = &load;
  rep.slo = &slo;
  rep.num_sides = sides;
  rep.alpha = o.alpha;
  {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(rep.started_at, sizeof rep.started_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
  }
  static char machine[256];
  struct utsname un;
  if (uname(&un) == 0)
    snprintf(machine, sizeof machine, "%s %s %s, %ld CPUs", un.sysname, un.release, un.machine,
             sysconf(_SC_NPROCESSORS_ONLN));
  rep.machine = machine;
  for (int s = 0; s < sides; s++) {
    rep.sides[s].target = &targets[s];
    rep.sides[s].rounds = calloc((size_t)o.rounds, sizeof *rep.sides[s].rounds);
    rep.sides[s].per_round = calloc((size_t)o.rounds, sizeof *rep.sides[s].per_round);
    if (!rep.sides[s].rounds || !rep.sides[s].per_round) goto free_all;
  }

  exit_code = 0;
  for (int round = 0; round < o.rounds && !weir__bench_interrupted; round++) {
    for (int s = 0; s < sides && !weir__bench_interrupted; s++) {
      weir_bench_target *t = &targets[s];
      weir_bench_side *sd = &rep.sides[s];
      if (t->config) {
        int rc = start_server(t->config, o.serve_args, o.num_serve_args, o.server_log,
                              o.server_timeout_s, &srv);
        if (rc) {
          exit_code = weir__bench_interrupted ? 130 : 1;
          goto report;
        }
        char url[64];
        snprintf(url, sizeof url, "http://127.0.0.1:%d", srv.port);
        if (set_target_url(t, url)) {
          exit_code = 1;
          goto report;
        }
      }
      if (!t->model) t->model = discover_model(t);
      /* --input-len counts tokens of the target's own tokenizer: text prompts are sized with
       * its measured tokens per word (once per target). */
      if (!w.prompt_tokens && w.dataset != WEIR_BENCH_DS_JSONL && !t->calibration[0]) {
        weir__bench_calibrate(t);
        if (!o.quiet) fprintf(stderr, "weir bench: %s: %s\n", t->label, t->calibration);
      }
      /* Every round its own seed (the same for A and B): no round replays another's prompts,
       * which a prefix cache would answer from memory. */
      weir_bench_workload wr = w;
      wr.seed = weir__bench_round_seed(w.seed, round);
      wr.tokens_per_word = t->tokens_per_word;
      char label[96];
      snprintf(label, sizeof label, "%s round %d/%d", t->label, round + 1, o.rounds);
      weir_bench_run *run = calloc(1, sizeof *run);
      int rc = run ? weir__bench_run(t, &wr, &load, label, run) : WEIR_E_NOMEM;
      if (run) run->seed = wr.seed;
      if (t->config) stop_server(&srv);
      if (rc) {
        fprintf(stderr, "weir bench: %s: the run could not start: %s\n", t->label, weir_strerror(rc));
        if (run) weir__bench_run_free(run);
        free(run);
        exit_code = 1;
        goto report;
      }
      sd->rounds[sd->num_rounds++] = run;
      if (!o.quiet)
        fprintf(stderr, "weir bench: %s: %lld requests, %.2f s%s\n", label, (long long)run->num_recs,
                run->duration_s, run->interrupted ? " (interrupted)" : "");
    }
  }

report:
  stop_server(&srv);
  if (weir__bench_interrupted && exit_code == 0) exit_code = 130;
  for (int s = 0; s < sides; s++) {
    weir_bench_side *sd = &rep.sides[s];
    for (int k = 0; k < sd->num_rounds; k++)
      weir__bench_summarize(&sd->rounds[k], 1, &slo, &sd->per_round[k]);
    weir__bench_summarize(sd->rounds, sd->num_rounds, &slo, &sd->pooled);
  }
  if (rep.sides[0].num_rounds == 0 && (sides == 1 || rep.sides[1].num_rounds == 0)) {
    if (!exit_code) exit_code = 1;
    goto free_all;
  }
  if (sides == 2) weir__bench_compare(&rep);
  weir__bench_print_table(stdout, &rep);
  fflush(stdout);
  if (o.json && weir__bench_write_json(o.json, &rep)) {
    fprintf(stderr, "weir bench: cannot write %s\n", o.json);
    if (!exit_code) exit_code = 1;
  }
  if (o.requests_out && weir__bench_write_requests(o.requests_out, &rep)) {
    fprintf(stderr, "weir bench: cannot write %s\n", o.requests_out);
    if (!exit_code) exit_code = 1;
  }
  if (o.svg && weir__bench_write_svg(o.svg, &rep)) {
    fprintf(stderr, "weir bench: cannot write %s\n", o.svg);
    if (!exit_code) exit_code = 1;
  }

free_all:
  weir_opt_fini(&op);
  if (signals_set) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
  }
  for (int s = 0; s < 2; s++) {
    weir_bench_side *sd = &rep.sides[s];
    for (int k = 0; k < sd->num_rounds; k++) {
      weir__bench_run_free(sd->rounds[k]);
      free(sd->rounds[k]);
    }
    if (sd->per_round)
      for (int k = 0; k < sd->num_rounds; k++) weir__bench_summary_free(&sd->per_round[k]);
    weir__bench_summary_free(&sd->pooled);
    free(sd->rounds);
    free(sd->per_round);
    free(targets[s].label);
    free(targets[s].url);
    free(targets[s].host);
    free(targets[s].model);
  }
  free(rep.cmp);
  free(o.serve_args);
  weir__bench_workload_free(&w);
  return exit_code;
}
