/* weir perplexity: the perplexity of a model on a text file, computed by the same model
 * graph and plugins the server runs (device, attention over the paged KV cache, quant
 * scheme), so that two configurations (fp16 against int8, a target against its draft) can be
 * compared on the same text.
 *
 * Convention (llama.cpp's `perplexity`, so figures compare): the file is tokenized once with
 * BOS; windows of --ctx tokens start every --stride tokens (default: --ctx, no overlap); the
 * first token of each window is replaced by BOS; within a window the predictions of tokens
 * ctx/2 + 1 .. ctx - 1 are scored, each seeing at least half a window of context. The
 * result is exp(mean negative log-likelihood) with the standard error of that mean carried
 * through exp (ppl * se). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "config/config.h"
#include "kv/kv_pool.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "runtime/runtime.h"
#include "util/buf.h"
#include "util/log.h"
#include "weir/device.h"

#define LOG_COMPONENT "perplexity"

static void usage(FILE *f) {
  fputs("usage: weir perplexity [--config FILE] [config overrides] --file TEXT [options]\n"
        "Perplexity of the model on a text file, through the same plugins as `weir serve`.\n"
        "\n"
        "  --file FILE     the text (UTF-8), tokenized once with BOS\n"
        "  --ctx N         window length in tokens (default 512, at most the model's context)\n"
        "  --stride N      tokens between window starts (default: --ctx, no overlap)\n"
        "  --chunks N      score only the first N windows\n"
        "  --batch N       windows per forward pass (default: as many as fit 2048 tokens)\n"
        "  --json          print the result as one JSON object\n"
        "  --draft FILE    also run FILE (same tokenizer) on the same windows: its perplexity,\n"
        "                  and how often its top token equals the model's (a drafter's\n"
        "                  acceptance rate under greedy speculative decoding)\n"
        "The second half of each window is scored (tokens ctx/2+1 .. ctx-1), the first token\n"
        "of each window is BOS: llama.cpp's convention.\n"
        "Config overrides: --model PATH, --quant NAME, --device NAME, --threads N,\n"
        "--attention NAME, --kv-dtype T, --set section.key=value (docs/configuration.md).\n",
        f);
}

static long parse_pos(const char *flag, const char *s, long hi) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 1 || v > hi) {
    fprintf(stderr, "weir perplexity: %s must be an integer in [1, %ld]\n", flag, hi);
    return -1;
  }
  return v;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Accumulated negative log-likelihoods. */
typedef struct ppl_acc {
  double sum, sum_sq;
  int64_t n;
} ppl_acc;

static void acc_result(const ppl_acc *a, double *ppl, double *err) {
  double mean = a->sum / (double)a->n;
  double var = a->sum_sq / (double)a->n - mean * mean;
  *ppl = exp(mean);
  *err = a->n > 1 && var > 0 ? *ppl * sqrt(var / (double)(a->n - 1)) : 0;
}

/* -log softmax(logits)[target], in double. */
static double nll_of(const float *logits, int32_t n_vocab, int32_t target) {
  double mx = logits[0];
  for (int32_t i = 1; i < n_vocab; i++)
    if (logits[i] > mx) mx = logits[i];
  double s = 0;
  for (int32_t i = 0; i < n_vocab; i++) s += exp((double)logits[i] - mx);
  return mx + log(s) - (double)logits[target];
}

static int32_t argmax(const float *x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* Adds the scored rows of nw windows to acc; with `top`, also counts rows whose argmax
 * equals top[row] into *agree. */
static void score(ppl_acc *acc, const float *logits, const int32_t *ids, long w0, int32_t nw,
                  long stride, long first, long scored, int32_t n_vocab, const int32_t *top,
                  int64_t *agree) {
  for (int32_t s = 0; s < nw; s++) {
    const int32_t *src = ids + (size_t)(w0 + s) * (size_t)stride;
    for (long r = 0; r < scored; r++) {
      const size_t row = (size_t)s * (size_t)scored + (size_t)r;
      const float *l = logits + row * (size_t)n_vocab;
      double v = nll_of(l, n_vocab, src[first + r + 1]);
      acc->sum += v;
      acc->sum_sq += v * v;
      acc->n++;
      if (top && argmax(l, n_vocab) == top[row]) (*agree)++;
    }
  }
}

/* What the command line asks for, and the window arithmetic that follows from the text. */
typedef struct ppl_args {
  const char *file, *draft_path;
  int json;
  long ctx, stride, chunks, batch;
  long windows, first, scored; /* windows scored; per window: first scored row, rows scored */
} ppl_args;

/* Parses the options after the configuration's. Returns 0, or the exit code (0 for --help). */
static int parse_args(int argc, char **argv, ppl_args *a, int *exit_code) {
  enum { O_FILE = 256, O_CTX, O_STRIDE, O_CHUNKS, O_BATCH, O_JSON, O_DRAFT, O_HELP };
  static const struct option longopts[] = {
      {"file", required_argument, 0, O_FILE},     {"ctx", required_argument, 0, O_CTX},
      {"stride", required_argument, 0, O_STRIDE}, {"chunks", required_argument, 0, O_CHUNKS},
      {"batch", required_argument, 0, O_BATCH},   {"json", no_argument, 0, O_JSON},
      {"draft", required_argument, 0, O_DRAFT},   {"help", no_argument, 0, O_HELP},
      {0, 0, 0, 0}};
  *exit_code = 2;
  if (weir__check_long_options("perplexity", argc, argv, longopts) != 0) return -1;
  optind = 0; /* glibc: full re-initialisation, the dispatcher may have used getopt */
  opterr = 1;
  int c;
  while ((c = getopt_long(argc, argv, "hf:c:", longopts, NULL)) != -1) {
    switch (c) {
    case 'f': case O_FILE: a->file = optarg; break;
    case 'c': case O_CTX: if ((a->ctx = parse_pos("--ctx", optarg, 1 << 20)) < 0) return -1; break;
    case O_STRIDE:
      if ((a->stride = parse_pos("--stride", optarg, 1 << 20)) < 0) return -1;
      break;
    case O_CHUNKS:
      if ((a->chunks = parse_pos("--chunks", optarg, 1L << 30)) < 0) return -1;
      break;
    case O_BATCH: if ((a->batch = parse_pos("--batch", optarg, 4096)) < 0) return -1; break;
    case O_JSON: a->json = 1; break;
    case O_DRAFT: a->draft_path = optarg; break;
    case 'h': case O_HELP: usage(stdout); *exit_code = 0; return -1;
    default: usage(stderr); return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "weir perplexity: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (!a->file) {
    fprintf(stderr, "weir perplexity: --file FILE is required\n\n");
    usage(stderr);
    return -1;
  }
  if (a->ctx && a->ctx < 4) {
    fprintf(stderr, "weir perplexity: --ctx must be at least 4\n");
    return -1;
  }
  return 0;
}

/* The windows of a text of n_ids tokens for a model of model_ctx: fills ctx (default: 512 or
 * the model's context), stride, windows, batch, first and scored. Returns 0, or 2 (usage). */
static int plan_windows(ppl_args *a, size_t n_ids, long model_ctx) {
  if (!a->ctx) a->ctx = model_ctx < 512 ? model_ctx : 512;
  if (a->ctx > model_ctx) {
    fprintf(stderr, "weir perplexity: --ctx %ld exceeds the model's context of %ld tokens "
            "(model.max_model_len raises it)\n", a->ctx, model_ctx);
    return 2;
  }
  if (!a->stride) a->stride = a->ctx;
  if ((size_t)a->ctx > n_ids) {
    fprintf(stderr, "weir perplexity: %s has %zu tokens; --ctx %ld needs at least that many\n",
            a->file, n_ids, a->ctx);
    return 2;
  }
  a->windows = (long)((n_ids - (size_t)a->ctx) / (size_t)a->stride) + 1;
  if (a->chunks && a->chunks < a->windows) a->windows = a->chunks;
  if (!a->batch) a->batch = 2048 / a->ctx > 0 ? 2048 / a->ctx : 1;
  if (a->batch > a->windows) a->batch = a->windows;
  a->first = a->ctx / 2;
  a->scored = a->ctx - 1 - a->first;
  return 0;
}

/* The runtime: plugins, the model (and the draft), a pool of exactly one pass's windows.
 * Returns 0, or the exit code. */
static int assemble(weir_runtime *rt, const weir_config *cfg, const ppl_args *a) {
  char err[1024] = "";
  if (weir_runtime_load_plugins(rt, cfg, NULL, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: could not load the plugins the configuration names: %s\n",
            err);
    return 1;
  }
  /* The draft reads the same token ids, so it must share the vocabulary; both models keep
   * their KV in one pool (a group each), as a drafter serving beside its target does. */
  if (a->draft_path && weir_runtime_open_draft(rt, a->draft_path, err, sizeof err) != 0) {
    if (rt->draft_vocab_differs) {
      fprintf(stderr, "weir perplexity: --draft %s does not share the model's vocabulary: %s\n",
              a->draft_path, err);
      return 2;
    }
    fprintf(stderr, "weir perplexity: --draft: %s\n", err);
    return 1;
  }
  const weir_runtime_pool_opts po = {.max_model_len = (int32_t)a->ctx,
                                     .full_seqs = (int32_t)a->batch};
  weir_llama_opts mo = {.max_num_tokens = (int32_t)(a->batch * a->ctx),
                        .max_num_seqs = (int32_t)a->batch,
                        .max_logit_rows = (int32_t)(a->batch * a->scored)};
  /* (calibrated first when the quant scheme is activation-aware, as the engine does) */
  if (weir_runtime_create_pool(rt, cfg, &po, err, sizeof err) != 0 ||
      weir_runtime_load_model(rt, 0, cfg, &mo, 1, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    return 1;
  }
  const int32_t n_vocab = weir_llama_hparams_get(rt->model[0])->n_vocab;
  if (weir_tokenizer_n_tokens(rt->tok) > n_vocab) {
    fprintf(stderr, "weir perplexity: the tokenizer has %d tokens but the model %d rows\n",
            weir_tokenizer_n_tokens(rt->tok), n_vocab);
    return 1;
  }
  if (rt->num_models > 1 && weir_runtime_load_model(rt, 1, cfg, &mo, 1, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: --draft: %s\n", err);
    return 1;
  }
  return 0;
}

/* One pass over windows [w0, w0 + nw): each window a KV sequence of its own (the cache
 * hands out its blocks and slots), BOS first, the second half's rows asked for. The
 * sequences are freed again before returning. */
static int build_pass(weir_runtime *rt, weir_step_batch *b, weir_kv_seq **seqs,
                      const int32_t *ids, long w0, int32_t nw, const ppl_args *a) {
  weir_kv_cache *kv = weir_kv_pool_cache(rt->pool);
  const int32_t bos = weir_tokenizer_bos(rt->tok), ctx = (int32_t)a->ctx;
  int rc = WEIR_OK;
  weir_step_batch_reset(b, 0);
  for (int32_t s = 0; s < nw && rc == WEIR_OK; s++) {
    const int32_t *src = ids + (size_t)(w0 + s) * (size_t)a->stride;
    const int32_t at = b->num_tokens;
    rc = weir_kv_seq_create(kv, &seqs[s]);
    if (rc == WEIR_OK) rc = weir_kv_seq_append(kv, seqs[s], ctx, NULL, NULL, NULL);
    if (rc == WEIR_OK) rc = weir_step_batch_add(b, kv, seqs[s], src, 0, ctx);
    if (rc == WEIR_OK && bos >= 0) b->tokens[at] = bos;
    if (rc == WEIR_OK) rc = weir_step_batch_add_rows(b, at + (int32_t)a->first,
                                                     (int32_t)a->scored);
  }
  return rc;
}

/* Runs the model (and the draft) over a pass and copies their logits rows to the host. */
static int run_pass(weir_runtime *rt, const weir_step_batch *b, float *logits_host,
                    float *draft_logits, int32_t n_vocab, int tty) {
  const weir_device_ops *dev = rt->plugins.device->ops;
  const weir_llama_batch lb = weir_step_batch_view(b);
  const size_t bytes = (size_t)b->num_rows * (size_t)n_vocab * sizeof(float);
  float *logits = NULL;
  int rc = weir_llama_forward(rt->model[0], &lb, &logits);
  if (rc == WEIR_OK) rc = dev->copy_d2h(rt->plugins.device->self, logits_host, logits, bytes);
  if (rc != WEIR_OK) {
    fprintf(stderr, "%sweir perplexity: the forward pass failed: %s\n", tty ? "\n" : "",
            weir_strerror(rc));
    return rc;
  }
  if (!draft_logits) return WEIR_OK;
  rc = weir_llama_forward(rt->model[1], &lb, &logits);
  if (rc == WEIR_OK) rc = dev->copy_d2h(rt->plugins.device->self, draft_logits, logits, bytes);
  if (rc != WEIR_OK)
    fprintf(stderr, "%sweir perplexity: the draft's forward pass failed: %s\n", tty ? "\n" : "",
            weir_strerror(rc));
  return rc;
}

static void print_result(const ppl_args *a, const ppl_acc *acc, const ppl_acc *dacc,
                         int64_t agree, int with_draft, size_t n_ids, const char *quant,
                         double secs) {
  double ppl, pe, dppl = 0, dpe = 0;
  acc_result(acc, &ppl, &pe);
  if (with_draft) acc_result(dacc, &dppl, &dpe);
  /* Agreement is a proportion: its standard error is sqrt(p (1 - p) / n). */
  const double agr = acc->n ? (double)agree / (double)acc->n : 0;
  const double agr_err = acc->n > 1 ? sqrt(agr * (1 - agr) / (double)(acc->n - 1)) : 0;
  if (a->json) {
    printf("{\"perplexity\": %.9g, \"stderr\": %.9g, \"tokens_scored\": %lld, \"windows\": %ld, "
           "\"ctx\": %ld, \"stride\": %ld, \"file_tokens\": %zu, \"quant\": \"%s\", "
           "\"seconds\": %.3f",
           ppl, pe, (long long)acc->n, a->windows, a->ctx, a->stride, n_ids, quant, secs);
    if (with_draft)
      printf(", \"draft_perplexity\": %.9g, \"draft_stderr\": %.9g, \"draft_top1_agreement\": "
             "%.9g, \"draft_top1_agreement_stderr\": %.9g", dppl, dpe, agr, agr_err);
    printf("}\n");
  } else {
    printf("perplexity: %.4f +/- %.4f (%lld tokens scored in %ld windows of %ld, stride %ld; "
           "%.1f s, %.0f tokens/s)\n",
           ppl, pe, (long long)acc->n, a->windows, a->ctx, a->stride, secs,
           (double)a->windows * (double)a->ctx / secs);
    if (with_draft)
      printf("draft perplexity: %.4f +/- %.4f; draft top-1 agreement with the model: %.4f "
             "+/- %.4f\n", dppl, dpe, agr, agr_err);
  }
}

int weir__cmd_perplexity(int argc, char **argv) {
  weir_config cfg;
  weir_config_defaults(&cfg);
  char err[1024] = "";
  int ret = 2;
  ppl_args a = {0};
  char *text = NULL;
  int32_t *ids = NULL, *top = NULL;
  float *logits_host = NULL, *draft_logits = NULL;
  weir_kv_seq **seqs = NULL;
  weir_runtime rt;
  memset(&rt, 0, sizeof rt);
  weir_step_batch batch;
  memset(&batch, 0, sizeof batch);

  if (weir_config_from_args(&argc, argv, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    goto out;
  }
  if (parse_args(argc, argv, &a, &ret) != 0) goto out;
  weir_log_configure(cfg.log_level, cfg.log_format, NULL);

  ret = 1;
  size_t text_len = 0;
  if (!(text = weir_read_file(a.file, &text_len))) {
    fprintf(stderr, "weir perplexity: cannot read %s\n", a.file);
    goto out;
  }
  if (weir_runtime_open(&rt, cfg.model_path, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    goto out;
  }
  size_t n_ids = 0;
  int rc = weir_tokenizer_encode(rt.tok, text, text_len, WEIR_ENCODE_ADD_SPECIAL, &ids, &n_ids);
  if (rc != 0) {
    fprintf(stderr, "weir perplexity: cannot tokenize %s: %s\n", a.file, weir_strerror(rc));
    goto out;
  }
  const long model_ctx = cfg.max_model_len > 0 ? cfg.max_model_len : rt.hp[0].n_ctx_train;
  if ((ret = plan_windows(&a, n_ids, model_ctx)) != 0 || (ret = assemble(&rt, &cfg, &a)) != 0)
    goto out;
  ret = 1;
  const int32_t n_vocab = rt.hp[0].n_vocab;
  const int with_draft = rt.num_models > 1;
  const size_t R = (size_t)(a.batch * a.scored);
  rc = weir_step_batch_init(&batch, (int32_t)(a.batch * a.ctx), (int32_t)a.batch, (int32_t)R,
                            weir_kv_pool_geometry(rt.pool)->max_blocks_per_seq);
  seqs = calloc((size_t)a.batch, sizeof *seqs);
  logits_host = malloc(R * (size_t)n_vocab * sizeof(float));
  if (with_draft) {
    draft_logits = malloc(R * (size_t)n_vocab * sizeof(float));
    top = malloc(R * sizeof(int32_t));
  }
  if (rc != WEIR_OK || !seqs || !logits_host || (with_draft && (!draft_logits || !top))) {
    fprintf(stderr, "weir perplexity: out of memory\n");
    goto out;
  }
  const int tty = isatty(STDERR_FILENO);
  ppl_acc acc = {0}, dacc = {0};
  int64_t agree = 0;
  const double t0 = now_s();
  double last_report = t0;

  weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
           "%s: %zu tokens, %ld windows of %ld (stride %ld), %ld scored per window, %ld per "
           "pass, quant %s", a.file, n_ids, a.windows, a.ctx, a.stride, a.scored, a.batch,
           cfg.quant.name);
  weir_kv_cache *kv = weir_kv_pool_cache(rt.pool);
  for (long w0 = 0; w0 < a.windows; w0 += a.batch) {
    const int32_t nw = (int32_t)(a.windows - w0 < a.batch ? a.windows - w0 : a.batch);
    rc = build_pass(&rt, &batch, seqs, ids, w0, nw, &a);
    if (rc == WEIR_OK) rc = run_pass(&rt, &batch, logits_host, draft_logits, n_vocab, tty);
    else fprintf(stderr, "weir perplexity: %s\n", weir_strerror(rc));
    for (int32_t s = 0; s < nw; s++) {
      weir_kv_seq_free(kv, seqs[s]);
      seqs[s] = NULL;
    }
    if (rc != WEIR_OK) goto out;
    score(&acc, logits_host, ids, w0, nw, a.stride, a.first, a.scored, n_vocab, NULL, NULL);
    if (with_draft) {
      for (size_t r = 0; r < (size_t)(nw * a.scored); r++)
        top[r] = argmax(logits_host + r * (size_t)n_vocab, n_vocab);
      score(&dacc, draft_logits, ids, w0, nw, a.stride, a.first, a.scored, n_vocab, top,
            &agree);
    }
    double ppl, pe, t = now_s();
    acc_result(&acc, &ppl, &pe);
    long done = w0 + nw;
    if (tty) {
      fprintf(stderr, "\r[%ld/%ld windows] perplexity %.4f +/- %.4f, %.0f tokens/s   ", done,
              a.windows, ppl, pe, (double)done * (double)a.ctx / (t - t0));
      if (done == a.windows) fputc('\n', stderr);
    } else if (t - last_report >= 10 || done == a.windows) {
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "%ld/%ld windows: perplexity %.4f +/- %.4f", done,
               a.windows, ppl, pe);
      last_report = t;
    }
  }
  print_result(&a, &acc, &dacc, agree, with_draft, n_ids, cfg.quant.name, now_s() - t0);
  ret = 0;

out:
  weir_step_batch_free(&batch);
  weir_runtime_close(&rt);
  free(seqs);
  free(draft_logits);
  free(top);
  free(text);
  free(ids);
  free(logits_host);
  weir_config_free(&cfg);
  return ret;
}
