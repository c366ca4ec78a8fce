/* Constrained random walks over real vocabularies (walk.h). */
#include "walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/internal.h"
#include "format/gguf.h"
#include "weir/sampler.h"

double gw_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double gw_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t gw_next(gw_rng *r) {
  uint64_t x = r->s ? r->s : 0x9E3779B97F4A7C15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

int gw_vocab_from_gguf(const char *path, weir_tokenizer **tok_out, weir_grammar_vocab **out) {
  char err[256];
  weir_gguf *g = NULL;
  weir_tokenizer *tok = NULL;
  if (weir_gguf_open(path, &g, err, sizeof err)) {
    fprintf(stderr, "%s: %s\n", path, err);
    return -1;
  }
  int rc = weir_tokenizer_from_gguf(g, &tok, err, sizeof err);
  weir_gguf_close(g);
  if (rc) {
    fprintf(stderr, "%s: %s\n", path, err);
    return -1;
  }
  const int32_t eos = weir_tokenizer_eos(tok);
  rc = weir_grammar_vocab_from_tokenizer(tok, &eos, eos >= 0 ? 1 : 0, out);
  if (rc) fprintf(stderr, "%s: vocabulary: error %d\n", path, rc);
  if (tok_out && !rc) *tok_out = tok;
  else weir_tokenizer_free(tok);
  return rc ? -1 : 0;
}

static int is_eos(const weir_grammar_vocab *v, int32_t t) {
  for (int32_t i = 0; i < v->n_eos; i++)
    if (v->eos[i] == t) return 1;
  return 0;
}

int gw_walk(weir_constraint *c, gw_rng *rng, gw_walk_opts *o, char *out, size_t cap,
            size_t *out_len) {
  const weir_grammar_vocab *v = c->v;
  const int32_t V = v->n_tokens;
  const size_t words = WEIR_MASK_WORDS(V);
  uint32_t *mask = malloc(words * sizeof *mask);
  int32_t *allowed = malloc((size_t)V * sizeof *allowed);
  weir_matcher *m = NULL;
  int result = -1;
  size_t n = 0;
  if (!mask || !allowed || weir_matcher_create(c, &m)) {
    fprintf(stderr, "walk: out of memory\n");
    goto out;
  }
  for (int32_t step = 0; step < o->max_tokens; step++) {
    const double t0 = gw_now();
    int rc = weir_matcher_fill_mask(m, mask);
    o->mask_seconds += gw_now() - t0;
    o->mask_steps++;
    if (rc) {
      fprintf(stderr, "walk: mask error %d\n", rc);
      goto out;
    }
    int32_t k = 0, eos = -1;
    for (size_t w = 0; w < words; w++)
      for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
        const int32_t t = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(bits));
        if (is_eos(v, t)) eos = t;
        else allowed[k++] = t;
      }
    if (o->check_brute) {
      for (int32_t t = 0; t < V; t++) {
        const int ok = weir_matcher_accept_token(m, t) == 0;
        if (ok) weir_matcher_rollback(m, 1);
        if (ok != weir_mask_test(mask, t)) o->brute_mismatches++;
      }
    }
    if (k == 0 && eos < 0) {
      fprintf(stderr, "walk: empty mask after %zu bytes: %.*s\n", n, (int)n, out);
      goto out;
    }
    int32_t pick;
    const int steer = step >= o->free_tokens;
    if (eos >= 0 && (k == 0 || steer || (double)(gw_next(rng) % 1000000) / 1e6 < o->stop_prob)) {
      pick = eos;
    } else if (!steer) {
      pick = allowed[gw_next(rng) % (uint64_t)k];
    } else {
      /* Candidates: every allowed single-byte token and a sample of the others; keep those
       * that leave the fewest bytes to an end, then draw among them. */
      uint32_t best = UINT32_MAX;
      int32_t ties = 0;
      pick = allowed[0];
      for (int32_t i = 0; i < k + 48; i++) {
        const int32_t t = i < k ? allowed[i] : allowed[gw_next(rng) % (uint64_t)k];
        if (i < k && v->len[v->rank_of[t]] != 1) continue;
        if (weir_matcher_accept_token(m, t)) continue;
        const uint32_t d = weir__matcher_distance(m);
        weir_matcher_rollback(m, 1);
        if (d < best) best = d, pick = t, ties = 1;
        else if (d == best && gw_next(rng) % (uint64_t)++ties == 0) pick = t;
      }
    }
    rc = weir_matcher_accept_token(m, pick);
    if (rc) {
      fprintf(stderr, "walk: token %d was allowed but refused (%d) after: %.*s\n", pick, rc,
              (int)n, out);
      goto out;
    }
    if (pick == eos) {
      result = 1;
      goto out;
    }
    const int32_t r = v->rank_of[pick];
    for (uint32_t i = 0; i < v->len[r]; i++)
      if (n + 1 < cap) out[n++] = (char)v->blob[v->off[r] + i];
  }
  result = 0;
out:
  if (cap) out[n < cap ? n : cap - 1] = 0;
  if (out_len) *out_len = n;
  weir_matcher_free(m);
  free(mask);
  free(allowed);
  return result;
}
