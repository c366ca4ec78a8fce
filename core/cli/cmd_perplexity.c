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
#include "util/buf.h"
#include "config/config.h"
#include "kv/kv_pool.h"
#include "model/calib.h"
#include "format/gguf.h"
#include "format/quant_auto.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "plugin/loader.h"
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

int weir__cmd_perplexity(int argc, char **argv) {
  enum { O_FILE = 256, O_CTX, O_STRIDE, O_CHUNKS, O_BATCH, O_JSON, O_DRAFT, O_HELP };
  static const struct option longopts[] = {
      {"file", required_argument, 0, O_FILE},     {"ctx", required_argument, 0, O_CTX},
      {"stride", required_argument, 0, O_STRIDE}, {"chunks", required_argument, 0, O_CHUNKS},
      {"batch", required_argument, 0, O_BATCH},   {"json", no_argument, 0, O_JSON},
      {"draft", required_argument, 0, O_DRAFT},   {"help", no_argument, 0, O_HELP},
      {0, 0, 0, 0}};
  weir_config cfg;
  weir_config_defaults(&cfg);
  char err[1024] = "";
  int ret = 2, json = 0;
  long ctx = 0, stride = 0, chunks = 0, batch = 0;
  const char *file = NULL, *draft_path = NULL;
  char *text = NULL;
  int32_t *ids = NULL, *tokens = NULL, *positions = NULL, *qsl = NULL, *ctx_lens = NULL,
          *tables = NULL, *slots = NULL, *rows = NULL;
  float *logits_host = NULL, *draft_logits = NULL;
  weir_gguf *g = NULL, *dg = NULL;
  weir_llama *draft = NULL;
  int32_t *top = NULL;
  weir_tokenizer *tok = NULL;
  weir_plugin_set plugins = {0};
  weir_llama *model = NULL;
  weir_kv_pool *pool = NULL;

  if (weir_config_from_args(&argc, argv, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    goto out;
  }
  if (weir__check_long_options("perplexity", argc, argv, longopts) != 0) goto out;
  optind = 0; /* glibc: full re-initialisation, the dispatcher may have used getopt */
  opterr = 1;
  int c;
  while ((c = getopt_long(argc, argv, "hf:c:", longopts, NULL)) != -1) {
    switch (c) {
    case 'f': case O_FILE: file = optarg; break;
    case 'c': case O_CTX: if ((ctx = parse_pos("--ctx", optarg, 1 << 20)) < 0) goto out; break;
    case O_STRIDE: if ((stride = parse_pos("--stride", optarg, 1 << 20)) < 0) goto out; break;
    case O_CHUNKS: if ((chunks = parse_pos("--chunks", optarg, 1L << 30)) < 0) goto out; break;
    case O_BATCH: if ((batch = parse_pos("--batch", optarg, 4096)) < 0) goto out; break;
    case O_JSON: json = 1; break;
    case O_DRAFT: draft_path = optarg; break;
    case 'h': case O_HELP: usage(stdout); ret = 0; goto out;
    default: usage(stderr); goto out;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "weir perplexity: unexpected argument '%s'\n", argv[optind]);
    goto out;
  }
  if (!file) {
    fprintf(stderr, "weir perplexity: --file FILE is required\n\n");
    usage(stderr);
    goto out;
  }
  if (ctx && ctx < 4) {
    fprintf(stderr, "weir perplexity: --ctx must be at least 4\n");
    goto out;
  }
  weir_log_configure(cfg.log_level, cfg.log_format, NULL);

  ret = 1;
  size_t text_len = 0;
  if (!(text = weir_read_file(file, &text_len))) {
    fprintf(stderr, "weir perplexity: cannot read %s\n", file);
    goto out;
  }
  if (weir_gguf_open(cfg.model_path, &g, err, sizeof err) != 0 ||
      weir_tokenizer_from_gguf(g, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    goto out;
  }
  if (!(cfg.quant.path && *cfg.quant.path) && cfg.quant.name &&
      !strcmp(cfg.quant.name, "auto")) { /* the model's weight types pick it (quant_auto.h) */
    char *q = strdup(weir_gguf_quant_auto(g));
    if (!q) goto out;
    free(cfg.quant.name);
    cfg.quant.name = q;
  }
  size_t n_ids = 0;
  int rc = weir_tokenizer_encode(tok, text, text_len, WEIR_ENCODE_ADD_SPECIAL, &ids, &n_ids);
  if (rc != 0) {
    fprintf(stderr, "weir perplexity: cannot tokenize %s: %s\n", file, weir_strerror(rc));
    goto out;
  }
  weir_llama_hparams hp;
  if (weir_gguf_llama_hparams(g, &hp, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    goto out;
  }
  const long model_ctx = cfg.max_model_len > 0 ? cfg.max_model_len : hp.n_ctx_train;
  if (!ctx) ctx = model_ctx < 512 ? model_ctx : 512;
  if (ctx > model_ctx) {
    fprintf(stderr, "weir perplexity: --ctx %ld exceeds the model's context of %ld tokens "
            "(model.max_model_len raises it)\n", ctx, model_ctx);
    ret = 2;
    goto out;
  }
  if (!stride) stride = ctx;
  if ((size_t)ctx > n_ids) {
    fprintf(stderr, "weir perplexity: %s has %zu tokens; --ctx %ld needs at least that many\n",
            file, n_ids, ctx);
    ret = 2;
    goto out;
  }
  long windows = (long)((n_ids - (size_t)ctx) / (size_t)stride) + 1;
  if (chunks && chunks < windows) windows = chunks;
  if (!batch) batch = 2048 / ctx > 0 ? 2048 / ctx : 1;
  if (batch > windows) batch = windows;
  const long first = ctx / 2, scored = ctx - 1 - first;
  const int32_t block = cfg.block_size > 0 ? cfg.block_size : 16;
  const int32_t bps = (int32_t)((ctx + block - 1) / block);

  if (weir_plugin_set_load(&cfg, NULL, &plugins) != 0) {
    fprintf(stderr, "weir perplexity: could not load the plugins the configuration names\n");
    goto out;
  }
  /* The draft reads the same token ids, so it must share the vocabulary; both models keep
   * their KV in one pool (a group each), as a drafter serving beside its target does. */
  weir_llama_hparams dhp;
  if (draft_path && (weir_gguf_open(draft_path, &dg, err, sizeof err) != 0 ||
                     weir_gguf_llama_hparams(dg, &dhp, err, sizeof err) != 0 ||
                     weir_gguf_llama_check(dg, &dhp, err, sizeof err) != 0)) {
    fprintf(stderr, "weir perplexity: --draft: %s\n", err);
    goto out;
  }
  weir_attn_shape shapes[2];
  weir_llama_attn_shape(&hp, &shapes[0]);
  if (dg) weir_llama_attn_shape(&dhp, &shapes[1]);
  weir_kv_pool_params kp = {.block_size = block,
                            .kv_dtype = cfg.kv_dtype,
                            .num_blocks = (int64_t)batch * bps,
                            .max_model_len = (int32_t)ctx,
                            .groups = shapes,
                            .num_groups = dg ? 2 : 1};
  if (weir_kv_pool_create(&kp, plugins.device, plugins.attention, &pool, err, sizeof err) != 0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    goto out;
  }
  weir_llama_opts mo = {.max_num_tokens = (int32_t)(batch * ctx),
                        .max_num_seqs = (int32_t)batch,
                        .max_logit_rows = (int32_t)(batch * scored)};
  /* (calibrated first when the quant scheme is activation-aware, as the engine does) */
  if (weir_calib_llama_create(&cfg, g, tok, &plugins, &mo, pool, 0, &model, err, sizeof err) !=
      0) {
    fprintf(stderr, "weir perplexity: %s\n", err);
    goto out;
  }
  const int32_t n_vocab = weir_llama_hparams_get(model)->n_vocab;
  if (weir_tokenizer_n_tokens(tok) > n_vocab) {
    fprintf(stderr, "weir perplexity: the tokenizer has %d tokens but the model %d rows\n",
            weir_tokenizer_n_tokens(tok), n_vocab);
    goto out;
  }
  if (dg) {
    if (weir_calib_llama_create(&cfg, dg, tok, &plugins, &mo, pool, 1, &draft, err,
                                sizeof err) != 0) {
      fprintf(stderr, "weir perplexity: --draft: %s\n", err);
      goto out;
    }
    weir_gguf_arr a, b;
    if (weir_llama_hparams_get(draft)->n_vocab != n_vocab ||
        weir_gguf_get_arr(g, "tokenizer.ggml.tokens", &a) != 0 ||
        weir_gguf_get_arr(dg, "tokenizer.ggml.tokens", &b) != 0 || a.end - a.data != b.end - b.data ||
        memcmp(a.data, b.data, (size_t)(a.end - a.data)) != 0) {
      fprintf(stderr, "weir perplexity: --draft %s does not share the model's vocabulary\n",
              draft_path);
      ret = 2;
      goto out;
    }
  }
  const size_t T = (size_t)(batch * ctx), R = (size_t)(batch * scored);
  tokens = malloc(T * 4);
  positions = malloc(T * 4);
  slots = malloc(T * 4);
  qsl = malloc((size_t)(batch + 1) * 4);
  ctx_lens = malloc((size_t)batch * 4);
  tables = malloc((size_t)batch * (size_t)bps * 4);
  rows = malloc(R * 4);
  logits_host = malloc(R * (size_t)n_vocab * sizeof(float));
  if (draft) {
    draft_logits = malloc(R * (size_t)n_vocab * sizeof(float));
    top = malloc(R * sizeof(int32_t));
  }
  if (!tokens || !positions || !slots || !qsl || !ctx_lens || !tables || !rows || !logits_host ||
      (draft && (!draft_logits || !top))) {
    fprintf(stderr, "weir perplexity: out of memory\n");
    goto out;
  }
  const weir_device_ops *dev = plugins.device->ops;
  const int32_t bos = weir_tokenizer_bos(tok);
  const int tty = isatty(STDERR_FILENO);
  ppl_acc acc = {0}, dacc = {0};
  int64_t agree = 0;
  const double t0 = now_s();
  double last_report = t0;

  weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
           "%s: %zu tokens, %ld windows of %ld (stride %ld), %ld scored per window, %ld per "
           "pass, quant %s", file, n_ids, windows, ctx, stride, scored, batch, cfg.quant.name);
  for (long w0 = 0; w0 < windows; w0 += batch) {
    const int32_t nw = (int32_t)(windows - w0 < batch ? windows - w0 : batch);
    qsl[0] = 0;
    for (int32_t s = 0; s < nw; s++) {
      const int32_t *src = ids + (size_t)(w0 + s) * (size_t)stride;
      for (int32_t b = 0; b < bps; b++) tables[(size_t)s * (size_t)bps + (size_t)b] = s * bps + b;
      for (long p = 0; p < ctx; p++) {
        size_t i = (size_t)s * (size_t)ctx + (size_t)p;
        tokens[i] = p == 0 && bos >= 0 ? bos : src[p];
        positions[i] = (int32_t)p;
        slots[i] = (s * bps + (int32_t)(p / block)) * block + (int32_t)(p % block);
      }
      for (long r = 0; r < scored; r++)
        rows[(size_t)s * (size_t)scored + (size_t)r] = (int32_t)((long)s * ctx + first + r);
      qsl[s + 1] = (int32_t)((s + 1) * ctx);
      ctx_lens[s] = (int32_t)ctx;
    }
    weir_llama_batch b = {.num_tokens = (int32_t)(nw * ctx),
                          .tokens = tokens,
                          .positions = positions,
                          .num_seqs = nw,
                          .query_start_loc = qsl,
                          .context_lens = ctx_lens,
                          .block_tables = tables,
                          .max_blocks_per_seq = bps,
                          .slot_mapping = slots,
                          .num_logit_rows = (int32_t)(nw * scored),
                          .logit_rows = rows};
    float *logits = NULL;
    rc = weir_llama_forward(model, &b, &logits);
    if (rc == WEIR_OK)
      rc = dev->copy_d2h(plugins.device->self, logits_host, logits,
                         (size_t)(nw * scored) * (size_t)n_vocab * sizeof(float));
    if (rc != WEIR_OK) {
      fprintf(stderr, "%sweir perplexity: the forward pass failed: %s\n", tty ? "\n" : "",
              weir_strerror(rc));
      goto out;
    }
    score(&acc, logits_host, ids, w0, nw, stride, first, scored, n_vocab, NULL, NULL);
    if (draft) {
      rc = weir_llama_forward(draft, &b, &logits);
      if (rc == WEIR_OK)
        rc = dev->copy_d2h(plugins.device->self, draft_logits, logits,
                           (size_t)(nw * scored) * (size_t)n_vocab * sizeof(float));
      if (rc != WEIR_OK) {
        fprintf(stderr, "%sweir perplexity: the draft's forward pass failed: %s\n",
                tty ? "\n" : "", weir_strerror(rc));
        goto out;
      }
      for (size_t r = 0; r < (size_t)(nw * scored); r++)
        top[r] = argmax(logits_host + r * (size_t)n_vocab, n_vocab);
      score(&dacc, draft_logits, ids, w0, nw, stride, first, scored, n_vocab, top, &agree);
    }
    double ppl, pe, t = now_s();
    acc_result(&acc, &ppl, &pe);
    long done = w0 + nw;
    if (tty) {
      fprintf(stderr, "\r[%ld/%ld windows] perplexity %.4f +/- %.4f, %.0f tokens/s   ", done,
              windows, ppl, pe, (double)done * (double)ctx / (t - t0));
      if (done == windows) fputc('\n', stderr);
    } else if (t - last_report >= 10 || done == windows) {
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "%ld/%ld windows: perplexity %.4f +/- %.4f", done,
               windows, ppl, pe);
      last_report = t;
    }
  }
  double ppl, pe, dppl = 0, dpe = 0, secs = now_s() - t0;
  acc_result(&acc, &ppl, &pe);
  if (draft) acc_result(&dacc, &dppl, &dpe);
  /* Agreement is a proportion: its standard error is sqrt(p (1 - p) / n). */
  const double agr = acc.n ? (double)agree / (double)acc.n : 0;
  const double agr_err = acc.n > 1 ? sqrt(agr * (1 - agr) / (double)(acc.n - 1)) : 0;
  if (json) {
    printf("{\"perplexity\": %.9g, \"stderr\": %.9g, \"tokens_scored\": %lld, \"windows\": %ld, "
           "\"ctx\": %ld, \"stride\": %ld, \"file_tokens\": %zu, \"quant\": \"%s\", "
           "\"seconds\": %.3f",
           ppl, pe, (long long)acc.n, windows, ctx, stride, n_ids, cfg.quant.name, secs);
    if (draft)
      printf(", \"draft_perplexity\": %.9g, \"draft_stderr\": %.9g, \"draft_top1_agreement\": "
             "%.9g, \"draft_top1_agreement_stderr\": %.9g", dppl, dpe, agr, agr_err);
    printf("}\n");
  } else {
    printf("perplexity: %.4f +/- %.4f (%lld tokens scored in %ld windows of %ld, stride %ld; "
           "%.1f s, %.0f tokens/s)\n",
           ppl, pe, (long long)acc.n, windows, ctx, stride, secs,
           (double)windows * (double)ctx / secs);
    if (draft)
      printf("draft perplexity: %.4f +/- %.4f; draft top-1 agreement with the model: %.4f "
             "+/- %.4f\n", dppl, dpe, agr, agr_err);
  }
  ret = 0;

out:
  weir_llama_destroy(draft);
  weir_llama_destroy(model);
  weir_kv_pool_destroy(pool);
  weir_gguf_close(dg);
  free(draft_logits);
  free(top);
  weir_plugin_set_unload(&plugins);
  weir_tokenizer_free(tok);
  weir_gguf_close(g);
  free(text);
  free(ids);
  free(tokens);
  free(positions);
  free(slots);
  free(qsl);
  free(ctx_lens);
  free(tables);
  free(rows);
  free(logits_host);
  weir_config_free(&cfg);
  return ret;
}
