/* drafter/ngram: prompt-lookup speculative drafts.
 *
 * For each sequence it looks for the most recent earlier occurrence of the history's last n
 * tokens (n from max_ngram down to min_ngram) and proposes the k tokens that followed it.
 * Repetitive text — code, quoting the prompt, structured output, and the loops small models
 * fall into — gets long accepted runs for free: no second model, no device memory. The
 * drafts are deterministic, so each proposed token has drafter probability 1 and the
 * engine's rejection rule accepts it with the target's probability of that token.
 *
 * Stateless, so thread-safe; cost O(history x max_ngram) per sequence and step. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "weir/drafter.h"

typedef struct ngram_drafter {
  int32_t max_ngram, min_ngram, max_history;
} ngram_drafter;

static const weir_option_desc k_options[] = {
    {.key = "max_ngram", .type = WEIR_OPT_INT, .def_int = 3, .min = 1, .max = 16,
     .help = "longest suffix of the history to look up"},
    {.key = "min_ngram", .type = WEIR_OPT_INT, .def_int = 1, .min = 1, .max = 16,
     .help = "shortest suffix to look up before giving up"},
    {.key = "max_history", .type = WEIR_OPT_INT, .def_int = 4096, .min = 16, .max = 1 << 20,
     .help = "how many of the latest tokens are searched"},
};

static int ngram_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)args;
  int64_t mx, mn, hist;
  int rc;
  if ((rc = weir_option_int(host, "max_ngram", &mx)) != WEIR_OK ||
      (rc = weir_option_int(host, "min_ngram", &mn)) != WEIR_OK ||
      (rc = weir_option_int(host, "max_history", &hist)) != WEIR_OK)
    return rc;
  if (mn > mx) {
    host->set_error(host->ctx, "min_ngram (%lld) is larger than max_ngram (%lld); fix: set "
                    "min_ngram <= max_ngram", (long long)mn, (long long)mx);
    return WEIR_E_INVAL;
  }
  ngram_drafter *d = calloc(1, sizeof *d);
  if (!d) return WEIR_E_NOMEM;
  d->max_ngram = (int32_t)mx;
  d->min_ngram = (int32_t)mn;
  d->max_history = (int32_t)hist;
  *self = d;
  return WEIR_OK;
}

static void ngram_fini(void *self) { free(self); }

/* Proposes up to k tokens for one history; returns how many. */
static int32_t propose_one(const ngram_drafter *d, const int32_t *t, int32_t n, int32_t k,
                           int32_t *out) {
  int32_t lo = n > d->max_history ? n - d->max_history : 0;
  for (int32_t g = d->max_ngram; g >= d->min_ngram; g--) {
    if (g >= n) continue;
    const int32_t *pat = t + n - g;
    /* Most recent earlier match first: recent context predicts best. */
    for (int32_t i = n - g - 1; i >= lo; i--) {
      if (t[i] != pat[0] || memcmp(t + i, pat, sizeof(int32_t) * (size_t)g) != 0) continue;
      /* What followed the match follows the history. Where that runs into the history's
       * end (a match p = n - g - i tokens back: the text repeats with period p, the loop a
       * small model falls into), the drafts go on repeating it: draft m continues the
       * history then the drafts before it, so one step can draft all k instead of p. */
      const int32_t p = n - g - i;
      int32_t m = 0;
      for (; m < k && m < p; m++) out[m] = t[i + g + m];
      for (; m < k; m++) out[m] = out[m - p];
      if (m > 0) return m;
    }
  }
  return 0;
}

static int ngram_propose(void *self, const weir_draft_seq *seqs, int32_t num_seqs, int32_t k,
                         int32_t *draft_tokens, int32_t *num_drafted, float *draft_probs) {
  const ngram_drafter *d = self;
  if (k <= 0 || num_seqs < 0) return WEIR_E_INVAL;
  for (int32_t s = 0; s < num_seqs; s++) {
    num_drafted[s] = propose_one(d, seqs[s].tokens, seqs[s].num_tokens, k,
                                 draft_tokens + (size_t)s * (size_t)k);
    if (draft_probs)
      for (int32_t j = 0; j < num_drafted[s]; j++) draft_probs[(size_t)s * (size_t)k + j] = 1.0f;
  }
  return WEIR_OK;
}

static const weir_drafter_ops k_ops = {
    .struct_size = sizeof(weir_drafter_ops),
    .propose = ngram_propose,
    .release_seq = NULL,
    .model_path = NULL,
    /* Lookup costs nothing per draft, and where the text repeats (a copy, a loop) it is
     * right for long stretches: a 17-row verification step then yields 17 tokens for about
     * 5.5 one-row steps on the development CPU (docs/perf/speculative.md), where k = 4
     * caps a step at 5 tokens for 1.7. The adaptive policy picks shorter lengths where
     * they pay better. */
    .num_tokens_default = 16,
};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_DRAFTER,
    .name = "ngram",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "prompt-lookup drafts: continues the latest earlier occurrence of the "
                   "history's last n tokens",
    .devices = WEIR_DEVICE_CPU | WEIR_DEVICE_CUDA,
    .dtypes = 0,
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = ngram_init,
    .fini = ngram_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
