/* Fixture readers (format: tests/tokenizer/gen/fixture_io.py). */
#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define FX_DIR WT_SOURCE_DIR "/tests/tokenizer/fixtures/"

/* Undoes the escaping in place; returns the new length. */
static size_t unescape(char *s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '\\' || i + 1 >= n) {
      s[o++] = s[i];
      continue;
    }
    char c = s[++i];
    if (c == 't') s[o++] = '\t';
    else if (c == 'n') s[o++] = '\n';
    else if (c == 'r') s[o++] = '\r';
    else if (c == 'x' && i + 2 < n) {
      char hex[3] = {s[i + 1], s[i + 2], 0};
      s[o++] = (char)strtol(hex, NULL, 16);
      i += 2;
    } else s[o++] = c;
  }
  return o;
}

/* Splits a line into at most `max` tab-separated fields (in place). */
static int split_tabs(char *line, char **f, size_t *len, int max) {
  int n = 0;
  char *p = line;
  while (n < max) {
    char *t = strchr(p, '\t');
    f[n] = p;
    if (!t) {
      len[n] = strlen(p);
      n++;
      break;
    }
    *t = '\0';
    len[n] = (size_t)(t - p);
    n++;
    p = t + 1;
  }
  return n;
}

static char **read_lines(const char *path, int *n) {
  size_t len;
  char *data = wt_read_file(path, &len);
  if (!data) {
    fprintf(stderr, "cannot read %s\n", path);
    return NULL;
  }
  int cap = 1024, cnt = 0;
  char **lines = malloc((size_t)cap * sizeof *lines);
  char *p = data;
  while (*p) {
    char *e = strchr(p, '\n');
    if (e) *e = '\0';
    if (*p != '#') {
      if (cnt + 1 >= cap) {
        cap *= 2;
        lines = realloc(lines, (size_t)cap * sizeof *lines);
      }
      lines[cnt++] = strdup(p);
    }
    if (!e) break;
    p = e + 1;
  }
  free(data);
  *n = cnt;
  return lines;
}

static void free_lines(char **l, int n) {
  for (int i = 0; i < n; i++) free(l[i]);
  free(l);
}

weir_tokenizer *fx_llama(void) {
  int n;
  char **lines = read_lines(FX_DIR "llama_vocab.tsv", &n);
  if (!lines) return NULL;
  weir_tok_str *toks = calloc((size_t)n, sizeof *toks);
  float *scores = calloc((size_t)n, sizeof *scores);
  int32_t *types = calloc((size_t)n, sizeof *types);
  for (int i = 0; i < n; i++) {
    char *f[4];
    size_t len[4];
    if (split_tabs(lines[i], f, len, 4) != 4 || atoi(f[0]) != i) {
      fprintf(stderr, "bad llama vocab line %d\n", i);
      abort();
    }
    types[i] = atoi(f[1]);
    scores[i] = strtof(f[2], NULL);
    toks[i].ptr = f[3];
    toks[i].len = unescape(f[3], len[3]);
  }
  weir_tokenizer_spec spec;
  weir_tokenizer_spec_init(&spec, WEIR_TOKENIZER_LLAMA);
  spec.n_tokens = n;
  spec.tokens = toks;
  spec.scores = scores;
  spec.token_types = types;
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = 1;
  weir_tokenizer *t = NULL;
  char err[256] = "";
  if (weir_tokenizer_create(&spec, &t, err, sizeof err)) fprintf(stderr, "llama: %s\n", err);
  free(toks);
  free(scores);
  free(types);
  free_lines(lines, n);
  return t;
}

weir_tokenizer *fx_gpt2(void) {
  enum { N_VOCAB = 50257, EOT = 50256 };
  int n, nm;
  char **lines = read_lines(FX_DIR "gpt2_vocab.tsv", &n);
  char **mlines = read_lines(FX_DIR "gpt2_merges.txt", &nm);
  if (!lines || !mlines) return NULL;
  weir_tok_str *toks = calloc(N_VOCAB, sizeof *toks);
  int32_t *types = calloc(N_VOCAB, sizeof *types);
  char **fill = calloc(N_VOCAB, sizeof *fill);
  for (int i = 0; i < N_VOCAB; i++) types[i] = WEIR_TOKEN_UNUSED;
  for (int i = 0; i < n; i++) {
    char *f[2];
    size_t len[2];
    if (split_tabs(lines[i], f, len, 2) != 2) abort();
    int id = atoi(f[0]);
    toks[id].ptr = f[1];
    toks[id].len = unescape(f[1], len[1]);
    types[id] = id == EOT ? WEIR_TOKEN_CONTROL : WEIR_TOKEN_NORMAL;
  }
  /* Ids left out of the subset get distinct placeholder strings that no text can form. */
  for (int i = 0; i < N_VOCAB; i++)
    if (!toks[i].ptr) {
      fill[i] = wt_strf("<unused %d>", i);
      toks[i].ptr = fill[i];
      toks[i].len = strlen(fill[i]);
    }
  weir_tok_str *merges = calloc((size_t)nm, sizeof *merges);
  for (int i = 0; i < nm; i++) {
    merges[i].ptr = mlines[i];
    merges[i].len = strlen(mlines[i]);
  }
  weir_tokenizer_spec spec;
  weir_tokenizer_spec_init(&spec, WEIR_TOKENIZER_GPT2);
  spec.n_tokens = N_VOCAB;
  spec.tokens = toks;
  spec.token_types = types;
  spec.n_merges = nm;
  spec.merges = merges;
  spec.bos_id = spec.eos_id = EOT;
  weir_tokenizer *t = NULL;
  char err[256] = "";
  if (weir_tokenizer_create(&spec, &t, err, sizeof err)) fprintf(stderr, "gpt2: %s\n", err);
  for (int i = 0; i < N_VOCAB; i++) free(fill[i]);
  free(fill);
  free(toks);
  free(types);
  free(merges);
  free_lines(lines, n);
  free_lines(mlines, nm);
  return t;
}

int fx_cases(const char *name, fx_case **out) {
  char *path = wt_strf(FX_DIR "%s_cases.tsv", name);
  int n;
  char **lines = read_lines(path, &n);
  free(path);
  if (!lines) return -1;
  fx_case *c = calloc((size_t)n, sizeof *c);
  for (int i = 0; i < n; i++) {
    char *f[3];
    size_t len[3];
    int nf = split_tabs(lines[i], f, len, 3);
    if (nf < 2) abort();
    c[i].text_len = unescape(f[0], len[0]);
    c[i].text = malloc(c[i].text_len + 1);
    memcpy(c[i].text, f[0], c[i].text_len);
    c[i].text[c[i].text_len] = '\0';
    c[i].ids = malloc((len[1] + 1) * sizeof *c[i].ids);
    char *p = f[1], *e;
    for (;;) {
      long v = strtol(p, &e, 10);
      if (e == p) break;
      c[i].ids[c[i].n_ids++] = (int32_t)v;
      p = e;
    }
    if (nf == 3) {
      c[i].decoded_len = unescape(f[2], len[2]);
      c[i].decoded = malloc(c[i].decoded_len + 1);
      memcpy(c[i].decoded, f[2], c[i].decoded_len);
      c[i].decoded[c[i].decoded_len] = '\0';
    }
  }
  free_lines(lines, n);
  *out = c;
  return n;
}

void fx_cases_free(fx_case *c, int n) {
  for (int i = 0; i < n; i++) {
    free(c[i].text);
    free(c[i].ids);
    free(c[i].decoded);
  }
  free(c);
}

int fx_splits(fx_split **out) {
  int n;
  char **lines = read_lines(FX_DIR "splits.tsv", &n);
  if (!lines) return -1;
  fx_split *c = calloc((size_t)n, sizeof *c);
  for (int i = 0; i < n; i++) {
    char *f[3];
    size_t len[3];
    if (split_tabs(lines[i], f, len, 3) != 3) abort();
    c[i].pre = strcmp(f[0], "llama3") == 0 ? WEIR_PRE_LLAMA3
               : strcmp(f[0], "qwen2") == 0 ? WEIR_PRE_QWEN2 : WEIR_PRE_GPT2;
    c[i].text_len = unescape(f[1], len[1]);
    c[i].text = malloc(c[i].text_len + 1);
    memcpy(c[i].text, f[1], c[i].text_len);
    c[i].text[c[i].text_len] = '\0';
    c[i].lens = malloc((len[2] + 1) * sizeof *c[i].lens);
    char *p = f[2], *e;
    for (;;) {
      long v = strtol(p, &e, 10);
      if (e == p) break;
      c[i].lens[c[i].n++] = (size_t)v;
      p = e;
    }
  }
  free_lines(lines, n);
  *out = c;
  return n;
}

void fx_splits_free(fx_split *s, int n) {
  for (int i = 0; i < n; i++) {
    free(s[i].text);
    free(s[i].lens);
  }
  free(s);
}
