/* weir bench internals: the load generator behind `weir bench`.
 *
 * Files:
 *   cmd_bench.c       command line, single runs and A/B orchestration, starting weir servers
 *   bench_workload.c  seeded PRNG, datasets (random, shared-prefix, JSONL), arrival times
 *   bench_client.c    libuv HTTP/1.1 client, llhttp response parser, SSE parser, schedulers
 *   bench_stats.c     per-run summaries, the A/B decision rule
 *   bench_report.c    the table, the JSON result file and the SVG chart
 *
 * Everything here is single-threaded: the libuv loop of one run, and the orchestration
 * around it. Nothing is thread-safe and nothing needs to be. Only weir__cmd_bench is
 * called from outside tools/bench/. */
#ifndef WEIR_TOOLS_BENCH_H
#define WEIR_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weir/status.h"

#define WEIR_BENCH_SCHEMA_VERSION 1

/* ---------------------------------------------------------------- PRNG */

/* xoshiro256** seeded through splitmix64: fast, good enough for workloads, and identical
 * on every platform so a seed names one workload everywhere. */
typedef struct weir_bench_rng {
  uint64_t s[4];
} weir_bench_rng;

void weir__bench_rng_seed(weir_bench_rng *r, uint64_t seed);
uint64_t weir__bench_rng_u64(weir_bench_rng *r);
double weir__bench_rng_unit(weir_bench_rng *r);            /* uniform in [0, 1) */
int64_t weir__bench_rng_range(weir_bench_rng *r, int64_t lo, int64_t hi); /* [lo, hi] */
double weir__bench_rng_gamma(weir_bench_rng *r, double shape, double scale);

/* ---------------------------------------------------------------- workload */

typedef enum weir_bench_dataset_kind {
  WEIR_BENCH_DS_RANDOM = 0,
  WEIR_BENCH_DS_SHARED_PREFIX = 1,
  WEIR_BENCH_DS_JSONL = 2,
  /* Copy-heavy: each prompt carries a passage of a text file twice (a document and its
   * quoted copy, optionally edited) and then the passage's first words, so the answer
   * repeats text the prompt holds: the workload of code edits, quoting summaries and RAG,
   * where prompt-lookup drafting pays. */
  WEIR_BENCH_DS_COPY = 3,
} weir_bench_dataset_kind;

#define WEIR_BENCH_COPY_MIN_WORDS 64

typedef enum weir_bench_endpoint {
  WEIR_BENCH_EP_COMPLETIONS = 0,
  WEIR_BENCH_EP_CHAT = 1,
} weir_bench_endpoint;

/* One JSONL entry: a prompt string, or a chat conversation (a cJSON array kept as text). */
typedef struct weir_bench_jsonl_item {
  char *prompt;        /* owned; NULL when messages is set */
  char *messages_json; /* owned JSON array text; NULL when prompt is set */
  int max_tokens;      /* 0 = use --output-len */
} weir_bench_jsonl_item;

typedef struct weir_bench_workload {
  weir_bench_dataset_kind dataset;
  weir_bench_endpoint endpoint;
  uint64_t seed;
  int input_len, output_len;           /* means, in tokens */
  /* Text prompts: the target's tokens per generated word, measured through its /tokenize
   * (weir__bench_calibrate); 0 = unknown, taken as 1. A prompt of N tokens gets
   * round(N / tokens_per_word) words. */
  double tokens_per_word;
  double input_range, output_range;    /* uniform spread as a fraction: len*(1±range) */
  int prompt_tokens;                   /* 1: prompt as an array of token ids (completions) */
  int vocab;                           /* token ids are drawn from [vocab_lo, vocab) */
  int vocab_lo;
  int num_prefixes, num_suffixes;      /* shared-prefix */
  int prefix_len;                      /* shared-prefix: tokens of each shared prefix */
  int ignore_eos;
  double temperature;                  /* < 0: not sent */
  char *file;                          /* JSONL path, or copy's text (borrowed from argv) */
  weir_bench_jsonl_item *items;        /* loaded JSONL entries, owned */
  int num_items;
  /* --repeat-rate: the fraction of measured requests that repeat an earlier request of the
   * same run exactly (same prompt and max_tokens: a response-cache workload). 0: none. */
  double repeat_rate;
  /* A repeat copies a request at least repeat_gap earlier (its answer normally complete);
   * repeat_n (the run's request count, 0 = unknown) scales the later requests' probability
   * so the expected share over the run stays repeat_rate. */
  int64_t repeat_gap;
  int64_t repeat_n;
  double copy_edits;                   /* copy: fraction of the copy's words replaced */
  char *text;                          /* copy: the file's text, words NUL-separated, owned */
  int64_t *word_off;                   /* copy: each word's offset in text, owned */
  int64_t num_words;
  /* --output-dist exponential: max_tokens drawn from an exponential distribution of mean
   * output_len, rounded up and cut at output_cap (0: no cap): the static-batching workload
   * of docs/benchmarking.md. 0: uniform (output_range). */
  int output_exp;
  int output_cap;
} weir_bench_workload;

/* One generated request: exactly one of prompt_text, prompt_ids, messages_json is set. */
typedef struct weir_bench_prompt {
  char *prompt_text;     /* owned */
  int32_t *prompt_ids;   /* owned */
  char *messages_json;   /* owned copy */
  int num_prompt_ids;
  int expected_input;    /* tokens aimed at (JSONL: 0 = unknown) */
  int max_tokens;
} weir_bench_prompt;

/* Loads the JSONL file (or the copy dataset's text, at least COPY_MIN_WORDS words) named by
 * w->file. Returns 0 or a negative weir_status with a message
 * in err. */
int weir__bench_workload_load(weir_bench_workload *w, char *err, size_t errlen);
void weir__bench_workload_free(weir_bench_workload *w);
/* Request `index` of the workload: a pure function of (workload, seed, index), so a seed
 * names the same prompts in the same order on every run and for either A/B side. `phase`
 * separates the warm-up stream (1) from the measured stream (0). */
/* max_tokens of one request, drawn from r per the workload's output distribution: uniform in
 * output_len * (1 +- output_range), or exponential (see output_exp), always >= 1. */
int weir__bench_output_len(const weir_bench_workload *w, weir_bench_rng *r);
int weir__bench_workload_get(const weir_bench_workload *w, int phase, int64_t index,
                             weir_bench_prompt *out);
void weir__bench_prompt_free(weir_bench_prompt *p);
/* The request body as JSON text (malloc'd), for `model`. */
char *weir__bench_request_body(const weir_bench_workload *w, const weir_bench_prompt *p,
                               const char *model);

/* The workload seed of round `round` (0-based) of a run: the given seed for round 0, a
 * distinct seed derived from it for each later round. Both sides of an A/B use the same seed in
 * the same round, so each round pair compares identical prompts while no round replays an
 * earlier one (which a server with a prefix cache would serve from its cache). Later rounds'
 * seeds fit 53 bits: each is a valid --seed that reruns that round's workload. */
uint64_t weir__bench_round_seed(uint64_t seed, int round);
/* n seeded words of the text datasets' vocabulary (malloc'd), for calibration. */
char *weir__bench_words(uint64_t seed, int n);

/* Open-loop arrival offsets in seconds from the run start: gamma inter-arrival times with
 * shape `burstiness` (1 = Poisson) and mean 1/rate. Fills up to max_n entries that are
 * < duration_s (duration_s <= 0: no limit); returns the count. */
int64_t weir__bench_arrivals(uint64_t seed, double rate, double burstiness, double duration_s,
                             int64_t max_n, double *out);

/* ---------------------------------------------------------------- one run */

typedef enum weir_bench_err {
  WEIR_BENCH_ERR_CONNECT = 0, /* refused, unreachable, DNS, reset before any response */
  WEIR_BENCH_ERR_HTTP_4XX,
  WEIR_BENCH_ERR_HTTP_5XX,
  WEIR_BENCH_ERR_HTTP_OTHER,  /* any other non-200 status */
  WEIR_BENCH_ERR_MALFORMED,   /* unparseable HTTP or SSE (non-JSON data, bad framing) */
  WEIR_BENCH_ERR_TRUNCATED,   /* the stream ended before data: [DONE] */
  WEIR_BENCH_ERR_SERVER,      /* an error object inside the stream */
  WEIR_BENCH_ERR_TIMEOUT,     /* the per-request timeout passed */
  WEIR_BENCH_ERR_CANCELED,    /* stopped by Ctrl-C or the run's time bound */
  WEIR_BENCH_ERR_COUNT
} weir_bench_err;

extern const char *const weir__bench_err_names[WEIR_BENCH_ERR_COUNT];

/* What one request measured. Times are milliseconds from the run's start. */
typedef struct weir_bench_record {
  double scheduled_ms; /* when the scheduler wanted it sent */
  double start_ms;     /* when it was sent (connect started) */
  double end_ms;
  double *chunk_ms;    /* arrival of every content chunk, owned */
  int num_chunks, cap_chunks;
  int64_t usage_prompt, usage_completion; /* -1 when the server sent no usage */
  int expected_input;
  int ok;              /* 1: completed with [DONE] and HTTP 200 */
  int err;             /* weir_bench_err when !ok and finished */
  int http_status;
  char *error;         /* !ok: why, owned: the response body of an HTTP error, the stream's
                          error message, or what the client saw */
} weir_bench_record;

typedef struct weir_bench_load {
  int concurrency;      /* closed loop when rate <= 0; open loop: cap (0 = none) */
  double rate;          /* requests/s; > 0 selects the open loop */
  double burstiness;    /* gamma shape */
  int64_t num_requests; /* bound on requests (0 = duration only) */
  double duration_s;    /* bound on the issuing phase (0 = count only) */
  int warmup;           /* requests run before measuring, excluded */
  double request_timeout_s;
  double max_time_s;    /* hard bound on the run, in-flight requests canceled after it */
  int no_keep_alive;    /* 1: a connection per request ("Connection: close"); 0: each slot
                           keeps its connection (HTTP/1.1 keep-alive) */
} weir_bench_load;

typedef struct weir_bench_target {
  char *label;     /* "A", "B" or the URL */
  char *url;       /* base URL http://host:port (owned) */
  char *host;      /* owned */
  int port;
  char *config;    /* borrowed: config file when the bench starts the server itself */
  char *model;     /* owned */
  char *api_key;   /* borrowed */
  double tokens_per_word; /* measured by weir__bench_calibrate; 0 when not measured */
  char calibration[192];  /* how the prompt length was calibrated, for the report */
} weir_bench_target;

typedef struct weir_bench_run {
  uint64_t seed;           /* the workload seed of this round */
  weir_bench_record *recs; /* measured requests, owned */
  int64_t num_recs;
  double duration_s;       /* first send to last completion */
  int interrupted;         /* Ctrl-C or the time bound cut it short */
  double sched_lag_mean_ms, sched_lag_max_ms; /* send time minus scheduled time */
  int64_t conns_opened;    /* TCP connections opened, warm-up included */
  int64_t retries;         /* requests sent again after a kept-alive connection closed */
  char *err_example[WEIR_BENCH_ERR_COUNT]; /* first message seen per kind, owned */
} weir_bench_run;

/* Process-wide flag set by SIGINT; every loop checks it. */
extern volatile int weir__bench_interrupted;
/* Progress display: 1 when stderr is a terminal and not --quiet. */
extern int weir__bench_progress;

/* Runs the workload once against `t` (model already known). Returns 0, or a negative
 * weir_status when the run could not start; request failures are data, not errors. */
int weir__bench_run(const weir_bench_target *t, const weir_bench_workload *w,
                    const weir_bench_load *load, const char *progress_label,
                    weir_bench_run *out);
void weir__bench_run_free(weir_bench_run *r);

/* Blocking one-shot HTTP request for control traffic (GET /health, GET /v1/models, POST
 * /tokenize): `json` is the body of a POST (NULL: none). Returns 0 and the status and
 * malloc'd body, or a negative weir_status (connect failure, timeout). */
int weir__bench_http(const char *host, int port, const char *method, const char *path,
                     const char *json, const char *api_key, int timeout_ms, int *status,
                     char **body);
/* Measures the target's tokens per generated word with POST /tokenize (weir's and vLLM's
 * {"prompt": ...} form) on a sample of the text datasets' words, into t->tokens_per_word, and
 * describes the outcome in t->calibration. A server without /tokenize (or an odd answer)
 * leaves tokens_per_word 0: prompts then assume one token per word, and the report says so. */
void weir__bench_calibrate(weir_bench_target *t);
/* Splits http://host:port[/...] into host and port. https is refused (WEIR_E_NOTSUP). */
int weir__bench_parse_url(const char *url, char **host, int *port);

/* What one SSE event's data says that the measurement uses (bench_sse.c), read without
 * building a JSON tree. error: a top-level "error" member that is not null; has_text: the
 * first choice's "text", or when it has none its "delta"."content", is a non-empty string;
 * prompt_tokens / completion_tokens: "usage"'s counts, -1 when absent or not numbers. The
 * seen_* fields are the scanner's own bookkeeping (the first occurrence of a key counts). */
typedef struct {
  int error;
  int has_text;
  int64_t prompt_tokens, completion_tokens;
  int seen_error, seen_text_key, text_nonempty, seen_content, content_nonempty;
  int seen_prompt, seen_completion;
} weir_bench_sse_facts;
/* 0 when data[0..len) is exactly one well-formed JSON object (surrounding whitespace
 * allowed), with *out filled; -1 when it is not (*out then means nothing). Nesting deeper
 * than 64 levels is refused. Allocates nothing. */
int weir__bench_sse_scan(const char *data, size_t len, weir_bench_sse_facts *out);

/* ---------------------------------------------------------------- statistics */

typedef struct weir_bench_dist {
  int64_t count;
  double mean, min, median, p90, p95, p99, max;
} weir_bench_dist;

typedef struct weir_bench_slo {
  double ttft_ms, tpot_ms, e2e_ms; /* <= 0: not given */
} weir_bench_slo;

#define WEIR_BENCH_MAX_DISTINCT 5

typedef struct weir_bench_summary {
  int64_t sent, completed, failed;
  int64_t errors[WEIR_BENCH_ERR_COUNT];
  int64_t input_tokens, output_tokens;
  const char *output_tokens_source; /* "usage", "chunks" or "mixed" */
  const char *input_tokens_source;  /* "usage", "estimate" or "mixed" */
  double duration_s;
  double req_per_s, out_tok_per_s, total_tok_per_s;
  int64_t good;                     /* completed and within every SLO given */
  double goodput_req_per_s;
  weir_bench_dist ttft, itl, tpot, e2e;
  double bucket_s;                  /* timeline bucket width */
  double *timeline;                 /* output tokens/s per bucket, owned */
  int num_buckets;
  int interrupted;
  double sched_lag_mean_ms, sched_lag_max_ms;
  int64_t conns_opened, retries; /* summed over the runs */
  const char *err_example[WEIR_BENCH_ERR_COUNT]; /* borrowed from the first run having one */
  /* The first WEIR_BENCH_MAX_DISTINCT distinct error texts of the failed requests (borrowed
   * from the records), with how many requests failed so, in order of first appearance. */
  const char *distinct_errors[WEIR_BENCH_MAX_DISTINCT];
  int64_t distinct_counts[WEIR_BENCH_MAX_DISTINCT];
  int num_distinct;
  int64_t other_errors;             /* failed requests past those */
  /* Prompt tokens of the completed requests as the server counted them (usage); count 0 when
   * the server reports no usage. */
  weir_bench_dist prompt_tokens;
} weir_bench_summary;

/* Percentile with linear interpolation between closest ranks (numpy's default); sorts v. */
void weir__bench_dist_compute(double *v, int64_t n, weir_bench_dist *out);
/* Summarises runs (one or several rounds pooled). */
int weir__bench_summarize(weir_bench_run *const *runs, int num_runs, const weir_bench_slo *slo,
                          weir_bench_summary *out);
void weir__bench_summary_free(weir_bench_summary *s);
/* Gathers every TTFT (or ITL gap) of the runs into a malloc'd array; *n its length. */
double *weir__bench_collect(weir_bench_run *const *runs, int num_runs, int itl, int64_t *n);

/* The A/B verdict for one metric over per-round values. */
typedef enum weir_bench_verdict {
  WEIR_BENCH_NO_DIFF = 0,   /* the rounds' spread covers the gap */
  WEIR_BENCH_A_BETTER = 1,
  WEIR_BENCH_B_BETTER = 2,
  WEIR_BENCH_INCONCLUSIVE = 3, /* too few rounds to ever call a difference */
} weir_bench_verdict;

typedef struct weir_bench_cmp {
  const char *name, *unit;
  int lower_is_better;
  double a_median, b_median, ratio; /* ratio = b_median / a_median */
  double a_min, a_max, b_min, b_max;
  double p_value;                   /* exact two-sided Mann-Whitney U */
  weir_bench_verdict verdict;
} weir_bench_cmp;

/* Exact two-sided Mann-Whitney U p-value for samples x (n) and y (m), ties counted one
 * half; n, m <= 64. */
double weir__bench_mann_whitney(const double *x, int n, const double *y, int m);
weir_bench_verdict weir__bench_decide(const double *a, int n, const double *b, int m,
                                      int lower_is_better, double alpha, double *p_value);

/* ---------------------------------------------------------------- reporting */

typedef struct weir_bench_side {
  weir_bench_target *target;
  weir_bench_run **rounds;
  int num_rounds;
  weir_bench_summary pooled;
  weir_bench_summary *per_round; /* num_rounds entries */
} weir_bench_side;

typedef struct weir_bench_report {
  const weir_bench_workload *w;
  const weir_bench_load *load;
  const weir_bench_slo *slo;
  weir_bench_side sides[2];
  int num_sides;                /* 1: single target, 2: A/B */
  weir_bench_cmp *cmp;          /* A/B only */
  int num_cmp;
  double alpha;
  char started_at[32];
  const char *machine;          /* uname summary */
} weir_bench_report;

void weir__bench_compare(weir_bench_report *r);
void weir__bench_print_table(FILE *f, const weir_bench_report *r);
int weir__bench_write_json(const char *path, const weir_bench_report *r);
int weir__bench_write_svg(const char *path, const weir_bench_report *r);
/* One JSON line per measured request of every round (docs/bench-schema.md). */
int weir__bench_write_requests(const char *path, const weir_bench_report *r);

#endif
