/* Workloads: a seeded PRNG, the three datasets and open-loop arrival times.
 *
 * Every request is a pure function of (seed, phase, index): the generator for request i is
 * seeded from a hash of those three numbers, so two runs, the two sides of an A/B, and a
 * run that stops early all see the same prompts in the same order. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "weir/rng.h"

void weir__bench_rng_seed(weir_bench_rng *r, uint64_t seed) { weir_rng_seed(r->s, seed); }

uint64_t weir__bench_rng_u64(weir_bench_rng *r) { return weir_rng_next(r->s); }

double weir__bench_rng_unit(weir_bench_rng *r) { return weir_rng_uniform(r->s); }

int64_t weir__bench_rng_range(weir_bench_rng *r, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  uint64_t span = (uint64_t)(hi - lo) + 1;
  return lo + (int64_t)(weir__bench_rng_u64(r) % span);
}

static double rng_normal(weir_bench_rng *r) {
  /* Box-Muller; the unused second value is dropped to keep the stream simple. */
  double u1 = weir__bench_rng_unit(r), u2 = weir__bench_rng_unit(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Marsaglia and Tsang's method; shape < 1 through the boost u^(1/shape). */
double weir__bench_rng_gamma(weir_bench_rng *r, double shape, double scale) {
  if (shape <= 0) return 0;
  if (shape < 1) {
    double u = weir__bench_rng_unit(r);
    if (u < 1e-300) u = 1e-300;
    return weir__bench_rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
  }
  double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (;;) {
    double x = rng_normal(r), v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = weir__bench_rng_unit(r);
    if (u < 1 - 0.0331 * x * x * x * x) return d * v * scale;
    if (log(u) < 0.5 * x * x + d * (1 - v + log(v))) return d * v * scale;
  }
}

int64_t weir__bench_arrivals(uint64_t seed, double rate, double burstiness, double duration_s,
                             int64_t max_n, double *out) {
  weir_bench_rng r;
  weir__bench_rng_seed(&r, seed ^ 0xa11a1a1a5eedULL);
  if (burstiness <= 0) burstiness = 1;
  double t = 0;
  int64_t n = 0;
  while (n < max_n) {
    /* Gamma(k, 1/(k*rate)) has mean 1/rate and coefficient of variation 1/sqrt(k). */
    t += weir__bench_rng_gamma(&r, burstiness, 1.0 / (burstiness * rate));
    if (duration_s > 0 && t >= duration_s) break;
    out[n++] = t;
  }
  return n;
}

/* Short common English words: in Llama- and GPT-style vocabularies each is one token with
 * its leading space, so N words make roughly N prompt tokens. */
static const char *const k_words[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "was",   "for",   "on",    "as",
    "with",  "by",    "at",    "from",  "his",   "an",    "were",  "are",   "which", "this",
    "be",    "or",    "has",   "had",   "one",   "their", "its",   "after", "new",   "who",
    "they",  "two",   "her",   "she",   "been",  "other", "when",  "time",  "during", "there",
    "into",  "school", "more", "may",   "years", "over",  "only",  "year",  "most",  "would",
    "world", "city",  "some",  "where", "between", "later", "three", "state", "such", "then",
    "national", "used", "made", "known", "under", "many", "university", "united", "while",
    "part",  "season", "team", "these", "american", "than", "film", "second", "born", "south",
    "became", "states", "war", "through", "being", "including", "both", "before", "north",
    "high",  "however", "people", "family", "early", "history", "album", "area", "them",
    "series", "against", "until", "since", "district", "county", "name", "work", "life",
    "group", "music", "following", "number", "company", "several", "four", "called", "played",
    "released", "career", "league", "game", "government", "house", "each", "based", "day",
    "same", "won", "use", "like", "around", "end", "river", "town", "club", "back", "well",
    "book", "member", "party", "water", "light", "small", "large", "road", "station", "field",
    "green", "black", "white", "red", "blue", "long", "short", "open", "east", "west", "old",
    "young", "free", "form", "line", "point", "place", "home", "power", "order", "level",
    "model", "cache", "token", "layer", "block", "batch", "value", "query", "key", "head",
};
#define NUM_WORDS ((int)(sizeof k_words / sizeof k_words[0]))

static uint64_t mix3(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL);
  weir_rng_splitmix64(&x);
  x ^= c * 0xd6e8feb86659fd93ULL;
  return weir_rng_splitmix64(&x);
}

static int append_words(weir_bench_rng *r, int n, char **buf, size_t *len, size_t *cap);

/* Words for `tokens` tokens at the measured tokens per word (1 when not measured). */
static int words_for(const weir_bench_workload *w, int tokens) {
  if (tokens <= 0) return 0;
  double tpw = w->tokens_per_word > 0 ? w->tokens_per_word : 1.0;
  long n = lround((double)tokens / tpw);
  return n < 1 ? 1 : (int)n;
}

/* Later rounds' seeds keep 53 bits, so each one is a valid --seed (and exact in JSON) that
 * reruns that round alone. */
uint64_t weir__bench_round_seed(uint64_t seed, int round) {
  if (round <= 0) return seed;
  return mix3(seed, 0x726f756e64ULL /* "round" */, (uint64_t)round) & ((UINT64_C(1) << 53) - 1);
}

char *weir__bench_words(uint64_t seed, int n) {
  weir_bench_rng r;
  weir__bench_rng_seed(&r, mix3(seed, 11, 0));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  if (append_words(&r, n, &buf, &len, &cap) != WEIR_OK) {
    free(buf);
    return NULL;
  }
  return buf;
}

static int spread_len(weir_bench_rng *r, int mean, double range) {
  if (range <= 0) return mean;
  int lo = (int)floor(mean * (1.0 - range)), hi = (int)ceil(mean * (1.0 + range));
  if (lo < 1) lo = 1;
  return (int)weir__bench_rng_range(r, lo, hi);
}

/* Appends n seeded words to a growing buffer. */
static int append_words(weir_bench_rng *r, int n, char **buf, size_t *len, size_t *cap) {
  for (int i = 0; i < n; i++) {
    const char *wd = k_words[weir__bench_rng_u64(r) % NUM_WORDS];
    size_t wl = strlen(wd);
    if (*len + wl + 2 > *cap) {
      size_t nc = (*cap ? *cap * 2 : 256) + wl + 2;
      char *nb = realloc(*buf, nc);
      if (!nb) return WEIR_E_NOMEM;
      *buf = nb;
      *cap = nc;
    }
    if (*len) (*buf)[(*len)++] = ' ';
    memcpy(*buf + *len, wd, wl);
    *len += wl;
    (*buf)[*len] = 0;
  }
  return WEIR_OK;
}

static int append_ids(const weir_bench_workload *w, weir_bench_rng *r, int n, int32_t **ids,
                      int *len) {
  int32_t *nb = realloc(*ids, sizeof **ids * (size_t)(*len + n + 1));
  if (!nb) return WEIR_E_NOMEM;
  *ids = nb;
  for (int i = 0; i < n; i++) nb[(*len)++] = (int32_t)weir__bench_rng_range(r, w->vocab_lo, w->vocab - 1);
  return WEIR_OK;
}

static int append_str(const char *s, size_t sl, char **buf, size_t *len, size_t *cap) {
  if (*len + sl + 1 > *cap) {
    size_t nc = (*cap ? *cap * 2 : 256) + sl + 1;
    char *nb = realloc(*buf, nc);
    if (!nb) return WEIR_E_NOMEM;
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, s, sl);
  *len += sl;
  (*buf)[*len] = 0;
  return WEIR_OK;
}

/* The copy dataset's prompt of about `tokens` tokens: a seeded passage of the text (half the
 * tokens), a blank line, the passage again with a fraction copy_edits of its words replaced
 * by seeded words of the text, a blank line, and the passage's first words, which the answer
 * goes on from. */
static int copy_prompt(const weir_bench_workload *w, weir_bench_rng *r, int tokens, char **buf,
                       size_t *len, size_t *cap) {
  int64_t n = words_for(w, tokens / 2);
  if (n < 8) n = 8;
  if (n > w->num_words) n = w->num_words;
  const int64_t start = weir__bench_rng_range(r, 0, w->num_words - n);
  const int64_t lead = n < 8 ? n : 8;
  int rc = WEIR_OK;
  for (int part = 0; part < 3 && rc == WEIR_OK; part++) {
    if (part > 0) rc = append_str("\n\n", 2, buf, len, cap);
    const int64_t m = part == 2 ? lead : n;
    for (int64_t i = 0; i < m && rc == WEIR_OK; i++) {
      int64_t wi = start + i;
      if (part == 1 && w->copy_edits > 0 && weir__bench_rng_unit(r) < w->copy_edits)
        wi = weir__bench_rng_range(r, 0, w->num_words - 1);
      const char *wd = w->text + w->word_off[wi];
      if (i > 0) rc = append_str(" ", 1, buf, len, cap);
      if (rc == WEIR_OK) rc = append_str(wd, strlen(wd), buf, len, cap);
    }
  }
  return rc;
}

int weir__bench_output_len(const weir_bench_workload *w, weir_bench_rng *r) {
  if (!w->output_exp) return spread_len(r, w->output_len, w->output_range);
  /* Inverse CDF: -mean * ln(1 - u), u in [0, 1); rounded up so that no request asks for 0
   * tokens (P(len <= k) = 1 - exp(-k / mean) for k below the cap), then cut at the cap. */
  const double x = -(double)w->output_len * log1p(-weir__bench_rng_unit(r));
  double n = ceil(x);
  if (n < 1) n = 1;
  if (w->output_cap > 0 && n > w->output_cap) n = w->output_cap;
  if (n > 1e9) n = 1e9;
  return (int)n;
}

int weir__bench_workload_get(const weir_bench_workload *w, int phase, int64_t index,
                             weir_bench_prompt *out) {
  memset(out, 0, sizeof *out);
  /* A repeat is request `index` replaced by a uniformly chosen one at least repeat_gap
   * earlier (itself perhaps a repeat), decided by its own seeded draw: the same requests
   * repeat on both A/B sides. The gap makes a repeat a question asked again after its answer
   * came (the original has normally finished), not a duplicate of one still generating. */
  const int64_t gap = w->repeat_gap > 0 ? w->repeat_gap : 1;
  if (w->repeat_rate > 0 && index >= gap && !phase) {
    double p = w->repeat_rate;
    if (w->repeat_n > gap) p = p * (double)w->repeat_n / (double)(w->repeat_n - gap);
    weir_bench_rng rr;
    weir__bench_rng_seed(&rr, mix3(w->seed, 11, (uint64_t)index));
    if (weir__bench_rng_unit(&rr) < p)
      return weir__bench_workload_get(w, phase, weir__bench_rng_range(&rr, 0, index - gap), out);
  }
  weir_bench_rng r;
  weir__bench_rng_seed(&r, mix3(w->seed, (uint64_t)phase, (uint64_t)index));
  size_t len = 0, cap = 0;
  int rc = WEIR_OK;
  if (w->dataset == WEIR_BENCH_DS_JSONL) {
    if (w->num_items <= 0) return WEIR_E_INVAL;
    /* Warm-up requests walk the file from its end so they don't pre-warm the first
     * measured prompts' prefix cache entries. */
    int64_t k = phase ? (w->num_items - 1 - (index % w->num_items)) : (index % w->num_items);
    const weir_bench_jsonl_item *it = &w->items[k];
    if (it->prompt && !(out->prompt_text = strdup(it->prompt))) return WEIR_E_NOMEM;
    if (it->messages_json && !(out->messages_json = strdup(it->messages_json)))
      return WEIR_E_NOMEM;
    out->max_tokens = it->max_tokens > 0 ? it->max_tokens : weir__bench_output_len(w, &r);
    return WEIR_OK;
  }
  int in_len = spread_len(&r, w->input_len, w->input_range);
  out->max_tokens = weir__bench_output_len(w, &r);
  if (w->dataset == WEIR_BENCH_DS_COPY) {
    if ((rc = copy_prompt(w, &r, in_len, &out->prompt_text, &len, &cap))) goto fail;
    out->expected_input = in_len;
    return WEIR_OK;
  }
  /* Text prompts: as many words as make the wanted tokens on the target's tokenizer. */
  const int in_words = words_for(w, in_len), prefix_words = words_for(w, w->prefix_len);
  if (w->dataset == WEIR_BENCH_DS_SHARED_PREFIX) {
    /* Prefixes interleave (request i uses prefix i mod N) so every prefix is reused while
     * its blocks are still hot; the prefix text depends only on (seed, prefix number). */
    int np = w->num_prefixes > 0 ? w->num_prefixes : 1;
    int64_t p = index % np;
    if (phase) p = np - 1 - p;
    weir_bench_rng pr;
    weir__bench_rng_seed(&pr, mix3(w->seed, 7, (uint64_t)p));
    if (w->prompt_tokens) {
      if ((rc = append_ids(w, &pr, w->prefix_len, &out->prompt_ids, &out->num_prompt_ids)))
        goto fail;
      if ((rc = append_ids(w, &r, in_len, &out->prompt_ids, &out->num_prompt_ids))) goto fail;
    } else {
      if ((rc = append_words(&pr, prefix_words, &out->prompt_text, &len, &cap))) goto fail;
      if ((rc = append_words(&r, in_words, &out->prompt_text, &len, &cap))) goto fail;
    }
    out->expected_input = w->prefix_len + in_len;
  } else {
    if (w->prompt_tokens) {
      if ((rc = append_ids(w, &r, in_len, &out->prompt_ids, &out->num_prompt_ids))) goto fail;
    } else if ((rc = append_words(&r, in_words, &out->prompt_text, &len, &cap))) {
      goto fail;
    }
    out->expected_input = in_len;
  }
  if (!out->prompt_text && !out->prompt_ids && !(out->prompt_text = strdup(""))) {
    rc = WEIR_E_NOMEM;
    goto fail;
  }
  return WEIR_OK;
fail:
  weir__bench_prompt_free(out);
  return rc;
}

void weir__bench_prompt_free(weir_bench_prompt *p) {
  free(p->prompt_text);
  free(p->prompt_ids);
  free(p->messages_json);
  memset(p, 0, sizeof *p);
}

char *weir__bench_request_body(const weir_bench_workload *w, const weir_bench_prompt *p,
                               const char *model) {
  char *text = NULL;
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  if (model) cJSON_AddStringToObject(o, "model", model);
  if (w->endpoint == WEIR_BENCH_EP_CHAT) {
    cJSON *msgs = p->messages_json ? cJSON_Parse(p->messages_json) : cJSON_CreateArray();
    if (!msgs) goto done;
    cJSON_AddItemToObject(o, "messages", msgs);
    if (!p->messages_json) {
      cJSON *m = cJSON_CreateObject();
      cJSON_AddStringToObject(m, "role", "user");
      cJSON_AddStringToObject(m, "content", p->prompt_text ? p->prompt_text : "");
      cJSON_AddItemToArray(msgs, m);
    }
  } else if (p->prompt_ids) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < p->num_prompt_ids; i++)
      cJSON_AddItemToArray(arr, cJSON_CreateNumber(p->prompt_ids[i]));
    cJSON_AddItemToObject(o, "prompt", arr);
  } else if (p->messages_json) {
    /* A conversation sent to /v1/completions: join the contents, one per line. */
    cJSON *msgs = cJSON_Parse(p->messages_json), *m;
    size_t n = 1;
    cJSON_ArrayForEach(m, msgs) {
      cJSON *c = cJSON_GetObjectItem(m, "content");
      if (cJSON_IsString(c)) n += strlen(c->valuestring) + 1;
    }
    char *joined = calloc(n, 1);
    if (joined) {
      cJSON_ArrayForEach(m, msgs) {
        cJSON *c = cJSON_GetObjectItem(m, "content");
        if (cJSON_IsString(c)) {
          if (*joined) strcat(joined, "\n");
          strcat(joined, c->valuestring);
        }
      }
      cJSON_AddStringToObject(o, "prompt", joined);
    }
    free(joined);
    cJSON_Delete(msgs);
  } else {
    cJSON_AddStringToObject(o, "prompt", p->prompt_text ? p->prompt_text : "");
  }
  cJSON_AddNumberToObject(o, "max_tokens", p->max_tokens);
  if (w->temperature >= 0) cJSON_AddNumberToObject(o, "temperature", w->temperature);
  if (w->ignore_eos) cJSON_AddBoolToObject(o, "ignore_eos", 1);
  cJSON_AddBoolToObject(o, "stream", 1);
  cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
  if (so) cJSON_AddBoolToObject(so, "include_usage", 1);
  text = cJSON_PrintUnformatted(o);
done:
  cJSON_Delete(o);
  return text;
}

/* The copy dataset's text: the whole file, split at whitespace into NUL-terminated words. */
static int load_text(weir_bench_workload *w, char *err, size_t errlen) {
  FILE *f = fopen(w->file, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open %s: %s", w->file, strerror(errno));
    return WEIR_E_IO;
  }
  int rc = WEIR_OK;
  size_t cap = 1 << 16, n = 0, got;
  char *t = malloc(cap);
  while (t && (got = fread(t + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *nt = cap < ((size_t)1 << 30) ? realloc(t, cap * 2) : NULL;
      if (!nt) {
        free(t);
        t = NULL;
        break;
      }
      t = nt;
      cap *= 2;
    }
  }
  if (!t) {
    snprintf(err, errlen, "%s: out of memory (or larger than 1 GiB)", w->file);
    fclose(f);
    return WEIR_E_NOMEM;
  }
  const int failed = ferror(f);
  fclose(f);
  if (failed) {
    snprintf(err, errlen, "cannot read %s", w->file);
    free(t);
    return WEIR_E_IO;
  }
  t[n] = 0;
  int64_t words = 0, wcap = 0;
  int64_t *off = NULL;
  for (size_t i = 0; i < n;) {
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r' || t[i] == 0))
      t[i++] = 0;
    if (i >= n) break;
    if (words == wcap) {
      int64_t nc = wcap ? wcap * 2 : 1024;
      int64_t *no = realloc(off, sizeof *no * (size_t)nc);
      if (!no) {
        rc = WEIR_E_NOMEM;
        snprintf(err, errlen, "%s: out of memory", w->file);
        goto free_words;
      }
      off = no;
      wcap = nc;
    }
    off[words++] = (int64_t)i;
    while (i < n && t[i] != ' ' && t[i] != '\n' && t[i] != '\t' && t[i] != '\r' && t[i] != 0)
      i++;
  }
  if (words < WEIR_BENCH_COPY_MIN_WORDS) {
    snprintf(err, errlen, "%s: %lld words; the copy dataset needs at least %d", w->file,
             (long long)words, WEIR_BENCH_COPY_MIN_WORDS);
    rc = WEIR_E_FORMAT;
    goto free_words;
  }
  w->text = t;
  w->word_off = off;
  w->num_words = words;
  return WEIR_OK;
free_words:
  free(off);
  free(t);
  return rc;
}

int weir__bench_workload_load(weir_bench_workload *w, char *err, size_t errlen) {
  if (w->dataset == WEIR_BENCH_DS_COPY) return load_text(w, err, errlen);
  if (w->dataset != WEIR_BENCH_DS_JSONL) return WEIR_OK;
  int rc = WEIR_OK;
  char *line = NULL;
  size_t lcap = 0;
  FILE *f = fopen(w->file, "r");
  if (!f) {
    snprintf(err, errlen, "cannot open %s: %s", w->file, strerror(errno));
    return WEIR_E_IO;
  }
  int cap = 0, lineno = 0;
  ssize_t n;
  while ((n = getline(&line, &lcap, f)) >= 0) {
    lineno++;
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
    if (n == 0) continue;
    cJSON *o = cJSON_Parse(line);
    if (!cJSON_IsObject(o)) {
      cJSON_Delete(o);
      snprintf(err, errlen, "%s:%d: not a JSON object", w->file, lineno);
      rc = WEIR_E_FORMAT;
      goto close_file;
    }
    if (w->num_items == cap) {
      int nc = cap ? cap * 2 : 64;
      weir_bench_jsonl_item *ni = realloc(w->items, sizeof *ni * (size_t)nc);
      if (!ni) {
        cJSON_Delete(o);
        rc = WEIR_E_NOMEM;
        goto close_file;
      }
      w->items = ni;
      cap = nc;
    }
    weir_bench_jsonl_item *it = &w->items[w->num_items];
    memset(it, 0, sizeof *it);
    cJSON *p = cJSON_GetObjectItem(o, "prompt"), *m = cJSON_GetObjectItem(o, "messages");
    if (!m) m = cJSON_GetObjectItem(o, "conversations");
    cJSON *mt = cJSON_GetObjectItem(o, "max_tokens");
    if (cJSON_IsString(p)) {
      it->prompt = strdup(p->valuestring);
    } else if (cJSON_IsArray(m)) {
      it->messages_json = cJSON_PrintUnformatted(m);
    } else {
      cJSON_Delete(o);
      snprintf(err, errlen, "%s:%d: needs \"prompt\" (a string) or \"messages\" (an array)",
               w->file, lineno);
      rc = WEIR_E_FORMAT;
      goto close_file;
    }
    if (cJSON_IsNumber(mt) && mt->valuedouble >= 1) it->max_tokens = (int)mt->valuedouble;
    cJSON_Delete(o);
    if (!it->prompt && !it->messages_json) {
      rc = WEIR_E_NOMEM;
      goto close_file;
    }
    w->num_items++;
  }
  if (w->num_items == 0) {
    snprintf(err, errlen, "%s: no prompts", w->file);
    rc = WEIR_E_FORMAT;
  }
close_file:
  free(line);
  fclose(f);
  return rc;
}

void weir__bench_workload_free(weir_bench_workload *w) {
  for (int i = 0; i < w->num_items; i++) {
    free(w->items[i].prompt);
    free(w->items[i].messages_json);
  }
  free(w->items);
  free(w->text);
  free(w->word_off);
  w->text = NULL;
  w->word_off = NULL;
  w->num_words = 0;
  w->items = NULL;
  w->num_items = 0;
}
