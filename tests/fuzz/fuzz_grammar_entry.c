/* The grammar fuzzing entry point (fuzz_grammar_entry.h). */
#include "fuzz_grammar_entry.h"

#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "weir/sampler.h"

static const char *const k_words[] = {"{\"", "\":", "\",", "\"}", "true", "null", "12", ", ",
                                      "é", "日本", "\xe6\x97", "ab", "\\n", "[\"", "::", NULL};

static weir_grammar_vocab *vocab(int32_t *n_out, int32_t *eos_out) {
  static weir_grammar_vocab *v;
  static int32_t n, eos;
  if (!v) {
    int nw = 0;
    while (k_words[nw]) nw++;
    n = 256 + nw + 1;
    eos = n - 1;
    static uint8_t bytes[256];
    weir_vocab_token t[256 + 32];
    for (int i = 0; i < 256; i++) {
      bytes[i] = (uint8_t)i;
      t[i] = (weir_vocab_token){&bytes[i], 1, 0};
    }
    for (int i = 0; i < nw; i++)
      t[256 + i] = (weir_vocab_token){(const uint8_t *)k_words[i], (uint32_t)strlen(k_words[i]), 0};
    t[eos] = (weir_vocab_token){NULL, 0, 1};
    if (weir_grammar_vocab_create(t, n, &eos, 1, &v)) return NULL;
  }
  *n_out = n;
  *eos_out = eos;
  return v;
}

int weir_fuzz_grammar(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const weir_constraint_kind kinds[] = {
      WEIR_CONSTRAINT_JSON_SCHEMA, WEIR_CONSTRAINT_REGEX, WEIR_CONSTRAINT_GRAMMAR,
      WEIR_CONSTRAINT_CHOICE, WEIR_CONSTRAINT_JSON_SCHEMA, WEIR_CONSTRAINT_REGEX,
      WEIR_CONSTRAINT_GRAMMAR, WEIR_CONSTRAINT_JSON_OBJECT};
  weir_grammar_limits lim;
  weir_grammar_limits_default(&lim);
  /* Small limits keep one execution fast; the refusal paths are exercised as much. */
  lim.max_repeat = 64;
  lim.max_nfa_states = 20000;
  lim.max_dfa_states = 4000;
  lim.max_schema_nodes = 400;
  lim.max_depth = 24;
  weir_constraint_spec spec = {.kind = kinds[data[0] & 7], .text = (const char *)data + 1,
                               .len = size - 1, .strict = (data[0] >> 3) & 1,
                               .whitespace = (data[0] >> 4) & 1, .limits = &lim};
  weir_grammar *g = NULL;
  char err[512];
  memset(err, 0x55, sizeof err);
  const int rc = weir_grammar_compile(&spec, &g, err, sizeof err);
  if (rc) {
    /* Refused: with a message, NUL-terminated, and nothing returned. */
    if (g || !memchr(err, 0, sizeof err) || !err[0]) return -1;
    return 0;
  }
  int32_t n = 0, eos = -1;
  weir_grammar_vocab *v = vocab(&n, &eos);
  weir_constraint *c = NULL;
  weir_matcher *m = NULL;
  uint32_t *mask = v ? calloc(WEIR_MASK_WORDS(n), sizeof *mask) : NULL;
  int result = 1;
  if (!v || !mask || weir_constraint_create(g, v, &c) || weir_matcher_create(c, &m)) goto out;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
  for (int step = 0; step < 24; step++) {
    if (weir_matcher_fill_mask(m, mask)) goto out;
    int32_t count = 0;
    for (int32_t t = 0; t < n; t++) count += weir_mask_test(mask, t);
    if (count == 0) {
      result = -1; /* every live state can go on or end */
      goto out;
    }
    h = h * 1103515245u + 12345u;
    int32_t pick = (int32_t)((h >> 8) % (uint32_t)count), t = 0;
    for (;; t++)
      if (weir_mask_test(mask, t) && pick-- == 0) break;
    if (weir_matcher_accept_token(m, t)) {
      result = -1;
      goto out;
    }
    if (t == eos) break;
    if (step % 5 == 4) {
      weir_matcher *k;
      if (weir_matcher_clone(m, &k)) goto out;
      weir_matcher_free(m);
      m = k;
    }
    if (step % 7 == 6 && weir_matcher_rollback(m, 1)) {
      result = -1;
      goto out;
    }
  }
out:
  weir_matcher_free(m);
  weir_constraint_release(c);
  weir_grammar_release(g);
  free(mask);
  return result;
}
