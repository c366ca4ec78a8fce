/* A vocabulary as the mask computation needs it: every token that can be constrained text,
 * sorted by its bytes, so that tokens sharing a prefix are neighbours and one walk in this
 * order visits the token trie depth first, each shared prefix once. */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "model/tokenizer.h"
#include "weir/status.h"

static int cmp_rank(const void *a, const void *b, void *ctx) {
  const weir_grammar_vocab *v = ctx;
  const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  const uint32_t lx = v->len[x], ly = v->len[y];
  const int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
  if (c) return c;
  if (lx != ly) return lx < ly ? -1 : 1;
  return v->sorted_id[x] < v->sorted_id[y] ? -1 : 1;
}

static void vocab_free(weir_grammar_vocab *v) {
  if (!v) return;
  free(v->sorted_id);
  free(v->rank_of);
  free(v->off);
  free(v->len);
  free(v->blob);
  free(v->eos);
  free(v->trie);
  free(v);
}

/* The trie of the sorted tokens, breadth first so that each node's children are contiguous. */
static int build_trie(weir_grammar_vocab *v) {
  uint32_t cap = 1024, n = 1;
  weir__trie_node *t = malloc(cap * sizeof *t);
  uint32_t *depth = malloc(cap * sizeof *depth);
  if (!t || !depth) goto nomem;
  t[0] = (weir__trie_node){.lo = 0, .hi = (uint32_t)v->n_sorted};
  depth[0] = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t d = depth[i], hi = t[i].hi;
    uint32_t r = t[i].lo;
    while (r < hi && v->len[r] == d) r++;
    t[i].n_exact = r - t[i].lo;
    t[i].first_child = n;
    while (r < hi) {
      const uint8_t byte = v->blob[v->off[r] + d];
      uint32_t e = r + 1;
      while (e < hi && v->blob[v->off[e] + d] == byte) e++;
      if (n == cap) {
        cap *= 2;
        weir__trie_node *nt = realloc(t, cap * sizeof *nt);
        if (nt) t = nt;
        uint32_t *nd = realloc(depth, cap * sizeof *nd);
        if (nd) depth = nd;
        if (!nt || !nd) goto nomem;
      }
      t[n] = (weir__trie_node){.lo = r, .hi = e, .byte = byte};
      depth[n++] = d + 1;
      t[i].n_children++;
      r = e;
    }
  }
  free(depth);
  v->trie = t;
  v->n_trie = n;
  return 0;
nomem:
  free(t);
  free(depth);
  return WEIR_E_NOMEM;
}

int weir_grammar_vocab_create(const weir_vocab_token *tokens, int32_t n, const int32_t *eos,
                              int32_t n_eos, weir_grammar_vocab **out) {
  *out = NULL;
  if (n <= 0 || (n > 0 && !tokens) || n_eos < 0 || (n_eos > 0 && !eos)) return WEIR_E_INVAL;
  for (int32_t i = 0; i < n_eos; i++)
    if (eos[i] < 0 || eos[i] >= n) return WEIR_E_INVAL;
  int rc = WEIR_E_NOMEM;
  weir_grammar_vocab *v = calloc(1, sizeof *v);
  uint8_t *skip = NULL;
  uint32_t *order = NULL;
  int32_t *ids = NULL;
  uint32_t *off = NULL, *len = NULL;
  if (!v) return WEIR_E_NOMEM;
  atomic_init(&v->refs, 1);
  v->n_tokens = n;
  /* EOS ids are never text, even when the vocabulary gives them bytes. */
  skip = calloc((size_t)n, 1);
  if (!skip) goto fail;
  for (int32_t i = 0; i < n; i++) skip[i] = tokens[i].special || tokens[i].len == 0;
  for (int32_t i = 0; i < n_eos; i++) skip[eos[i]] = 1;
  size_t total = 0;
  int32_t m = 0;
  for (int32_t i = 0; i < n; i++)
    if (!skip[i]) {
      if (!tokens[i].bytes || tokens[i].len > 65535) {
        rc = WEIR_E_INVAL;
        goto fail;
      }
      total += tokens[i].len;
      m++;
    }
  v->blob = malloc(total + 1);
  ids = malloc(((size_t)m + 1) * sizeof *ids);
  off = malloc(((size_t)m + 1) * sizeof *off);
  len = malloc(((size_t)m + 1) * sizeof *len);
  order = malloc(((size_t)m + 1) * sizeof *order);
  v->eos = malloc(((size_t)n_eos + 1) * sizeof *v->eos);
  if (!v->blob || !ids || !off || !len || !order || !v->eos) goto fail;
  size_t at = 0;
  int32_t k = 0;
  for (int32_t i = 0; i < n; i++) {
    if (skip[i]) continue;
    memcpy(v->blob + at, tokens[i].bytes, tokens[i].len);
    ids[k] = i;
    off[k] = (uint32_t)at;
    len[k] = tokens[i].len;
    if (tokens[i].len > v->max_len) v->max_len = tokens[i].len;
    order[k] = (uint32_t)k;
    at += tokens[i].len;
    k++;
  }
  v->sorted_id = ids;
  v->off = off;
  v->len = len;
  qsort_r(order, (size_t)m, sizeof *order, cmp_rank, v);
  /* Apply the permutation. */
  v->sorted_id = malloc(((size_t)m + 1) * sizeof *v->sorted_id);
  v->off = malloc(((size_t)m + 1) * sizeof *v->off);
  v->len = malloc(((size_t)m + 1) * sizeof *v->len);
  if (!v->sorted_id || !v->off || !v->len) goto fail;
  for (int32_t r = 0; r < m; r++) {
    v->sorted_id[r] = ids[order[r]];
    v->off[r] = off[order[r]];
    v->len[r] = len[order[r]];
  }
  v->n_sorted = m;
  v->rank_of = malloc((size_t)n * sizeof *v->rank_of);
  if (!v->rank_of) goto fail;
  for (int32_t i = 0; i < n; i++) v->rank_of[i] = -1;
  for (int32_t r = 0; r < m; r++) v->rank_of[v->sorted_id[r]] = r;
  if (build_trie(v)) goto fail;
  memcpy(v->eos, eos, (size_t)n_eos * sizeof *eos);
  v->n_eos = n_eos;
  free(ids);
  free(off);
  free(len);
  free(order);
  free(skip);
  *out = v;
  return 0;
fail:
  if (v->sorted_id == ids) v->sorted_id = NULL;
  if (v->off == off) v->off = NULL;
  if (v->len == len) v->len = NULL;
  free(ids);
  free(off);
  free(len);
  free(order);
  free(skip);
  vocab_free(v);
  return rc;
}

int weir_grammar_vocab_from_tokenizer(const weir_tokenizer *t, const int32_t *eos, int32_t n_eos,
                                      weir_grammar_vocab **out) {
  const int32_t n = weir_tokenizer_n_tokens(t);
  weir_vocab_token *toks = calloc((size_t)n + 1, sizeof *toks);
  if (!toks) return WEIR_E_NOMEM;
  for (int32_t i = 0; i < n; i++) {
    const int type = weir_tokenizer_token_type(t, i);
    weir_tok_str s = {0};
    toks[i].special = type == WEIR_TOKEN_CONTROL || type == WEIR_TOKEN_UNKNOWN ||
                      type == WEIR_TOKEN_UNUSED;
    if (!toks[i].special && weir_tokenizer_token_bytes(t, i, &s) == 0) {
      toks[i].bytes = (const uint8_t *)s.ptr;
      toks[i].len = (uint32_t)s.len;
    }
  }
  int rc = weir_grammar_vocab_create(toks, n, eos, n_eos, out);
  free(toks);
  return rc;
}

weir_grammar_vocab *weir_grammar_vocab_retain(weir_grammar_vocab *v) {
  atomic_fetch_add(&v->refs, 1);
  return v;
}

void weir_grammar_vocab_release(weir_grammar_vocab *v) {
  if (v && atomic_fetch_sub(&v->refs, 1) == 1) vocab_free(v);
}

int32_t weir_grammar_vocab_size(const weir_grammar_vocab *v) { return v->n_tokens; }
