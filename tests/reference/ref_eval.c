/* weir_ref_eval: the double-precision reference (reference.c) as a third opinion beside weir
 * and llama.cpp, for docs/perf/model-families.md. Not a test by itself; scripts call it.
 *
 *   weir_ref_eval ppl MODEL TEXT CTX
 *     The perplexity of MODEL on TEXT by the convention of `weir perplexity` and
 *     `llama-perplexity` (core/cli/cmd_perplexity.c): the text tokenized once with the file's
 *     tokenizer (BOS as the file says), windows of CTX tokens with no overlap, the first token
 *     of each replaced by BOS, the predictions of tokens CTX/2 + 1 .. CTX - 1 scored. Exact
 *     math on the file's weights as stored (K-quant blocks dequantized in double), no KV
 *     rounding. Prints one JSON object.
 *
 *   weir_ref_eval top1 MODEL N_PROMPT < IDS
 *     IDS (whitespace-separated token ids on stdin): a prompt of N_PROMPT ids followed by a
 *     continuation someone generated greedily. Runs them through the reference teacher-forced
 *     and, for each continuation token, whether it is the reference's top-1 there (ties
 *     count as agreement), and at each position where it is not, the reference's margin in
 *     nats between its own choice and the given token. Prints one JSON object.
 *
 * Tokenization is core's (the thing compared is the forward pass, not the tokenizer, which
 * docs/perf/model-families.md checks against the peer separately). Exit status 0, or 1 with a
 * message on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "model/tokenizer.h"
#include "reference.h"
#include "weir/status.h"

static int usage(void) {
  fprintf(stderr, "usage: weir_ref_eval ppl MODEL TEXT CTX\n"
                  "       weir_ref_eval top1 MODEL N_PROMPT < IDS\n");
  return 1;
}

static int argmax(const double *l, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (l[i] > l[best]) best = i;
  return best;
}

/* -log softmax(l)[t], in double. */
static double nll(const double *l, int n, int t) {
  double mx = l[argmax(l, n)], s = 0;
  for (int i = 0; i < n; i++) s += exp(l[i] - mx);
  return log(s) + mx - l[t];
}

/* Reads a whole file into a malloc'd buffer; NULL on failure. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
      if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
      } else {
        buf[n] = 0;
        *len = (size_t)n;
      }
    }
  }
  fclose(f);
  return buf;
}

static int run_ppl(weir_ref_model *m, const char *model_path, const char *text_path, long ctx) {
  int ret = 1;
  char err[256] = "";
  weir_gguf *g = NULL;
  weir_tokenizer *tok = NULL;
  int32_t *ids = NULL, *win = NULL;
  double *logits = NULL;
  size_t text_len = 0, n_ids = 0;
  char *text = slurp(text_path, &text_len);
  if (!text) {
    fprintf(stderr, "weir_ref_eval: cannot read %s\n", text_path);
    return 1;
  }
  if (weir_gguf_open(model_path, &g, err, sizeof err) != 0 ||
      weir_tokenizer_from_gguf(g, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "weir_ref_eval: %s: %s\n", model_path, err);
    goto free_text;
  }
  if (weir_tokenizer_encode(tok, text, text_len, WEIR_ENCODE_ADD_SPECIAL, &ids, &n_ids) != 0) {
    fprintf(stderr, "weir_ref_eval: cannot tokenize %s\n", text_path);
    goto free_tok;
  }
  if (ctx < 4 || n_ids < (size_t)ctx) {
    fprintf(stderr, "weir_ref_eval: %zu tokens, fewer than one window of %ld\n", n_ids, ctx);
    goto free_tok;
  }
  const int V = weir_ref_model_hparams(m)->n_vocab;
  const long windows = (long)(n_ids - (size_t)ctx) / ctx + 1, first = ctx / 2;
  const int32_t bos = weir_tokenizer_bos(tok);
  win = malloc(sizeof *win * (size_t)ctx);
  logits = malloc(sizeof *logits * (size_t)ctx * (size_t)V);
  if (!win || !logits) {
    fprintf(stderr, "weir_ref_eval: out of memory\n");
    goto free_tok;
  }
  double sum = 0;
  long scored = 0;
  for (long w = 0; w < windows; w++) {
    memcpy(win, ids + w * ctx, sizeof *win * (size_t)ctx);
    if (bos >= 0) win[0] = bos;
    int rc = weir_ref_forward(m, win, (int)ctx, logits);
    if (rc != 0) {
      fprintf(stderr, "weir_ref_eval: forward pass: %s\n", weir_strerror(rc));
      goto free_tok;
    }
    for (long r = first; r < ctx - 1; r++, scored++)
      sum += nll(logits + (size_t)r * (size_t)V, V, win[r + 1]);
  }
  printf("{\"perplexity\": %.9g, \"tokens_scored\": %ld, \"windows\": %ld, \"ctx\": %ld, "
         "\"tokens\": %zu}\n",
         exp(sum / (double)scored), scored, windows, ctx, n_ids);
  ret = 0;
free_tok:
  free(win);
  free(logits);
  free(ids);
  weir_tokenizer_free(tok);
  weir_gguf_close(g);
free_text:
  free(text);
  return ret;
}

static int run_top1(weir_ref_model *m, long n_prompt) {
  int ret = 1;
  size_t n = 0, cap = 1024;
  int32_t *ids = malloc(sizeof *ids * cap);
  double *logits = NULL;
  long v;
  while (ids && scanf("%ld", &v) == 1) {
    if (n == cap) {
      int32_t *more = realloc(ids, sizeof *ids * (cap *= 2));
      if (!more) break;
      ids = more;
    }
    ids[n++] = (int32_t)v; /* out-of-range ids are refused by weir_ref_forward */
  }
  if (!ids || n_prompt < 1 || (size_t)n_prompt >= n || n > 1000000) {
    fprintf(stderr, "weir_ref_eval: %zu ids on stdin, need more than N_PROMPT (%ld)\n", n,
            n_prompt);
    goto free_ids;
  }
  const int V = weir_ref_model_hparams(m)->n_vocab;
  logits = malloc(sizeof *logits * n * (size_t)V);
  if (!logits) {
    fprintf(stderr, "weir_ref_eval: out of memory\n");
    goto free_ids;
  }
  int rc = weir_ref_forward(m, ids, (int)n, logits);
  if (rc != 0) {
    fprintf(stderr, "weir_ref_eval: forward pass: %s\n", weir_strerror(rc));
    goto free_ids;
  }
  long agree = 0;
  printf("{\"n\": %zu, \"misses\": [", n - (size_t)n_prompt);
  const char *sep = "";
  for (size_t p = (size_t)n_prompt; p < n; p++) {
    const double *l = logits + (p - 1) * (size_t)V;
    int top = argmax(l, V);
    if (l[ids[p]] >= l[top]) {
      agree++;
      continue;
    }
    /* [continuation index, reference's token, given token, reference's margin in nats] */
    printf("%s[%zu, %d, %d, %.6f]", sep, p - (size_t)n_prompt, top, ids[p], l[top] - l[ids[p]]);
    sep = ", ";
  }
  printf("], \"agree\": %ld}\n", agree);
  ret = 0;
free_ids:
  free(logits);
  free(ids);
  return ret;
}

int main(int argc, char **argv) {
  if (argc < 4) return usage();
  int ppl = !strcmp(argv[1], "ppl");
  if (!ppl && strcmp(argv[1], "top1")) return usage();
  if (ppl && argc != 5) return usage();
  if (!ppl && argc != 4) return usage();
  weir_ref_model *m = NULL;
  if (weir_ref_model_load(argv[2], &m) != 0) return 1; /* the reason is on stderr */
  int ret = ppl ? run_ppl(m, argv[2], argv[3], strtol(argv[4], NULL, 10))
                : run_top1(m, strtol(argv[3], NULL, 10));
  weir_ref_model_free(m);
  return ret;
}
