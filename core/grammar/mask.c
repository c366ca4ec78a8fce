/* Constraints, matchers and the allowed-token mask.
 *
 * The naive mask walks every token of the vocabulary through the matcher at every step. Here
 * most of that work is done once per grammar position and shared by every step, sequence and
 * request that reaches the position:
 *
 *  - Token classes. For a position p (a DFA state of rule R), walk the whole token trie from
 *    a chart holding p alone. A token that stays inside R (its bytes are a prefix of what R
 *    can still produce from p, the rules R calls included) is allowed whatever called R: it
 *    goes into p's `accept` set. A token that needs R to end after one or more of its bytes
 *    goes into `uncertain`: only the rules below R on the stack can say. Everything else is
 *    rejected. A token that would end R before its first byte is not p's business: the chart
 *    already holds the items that R's completion advanced, and their own classes cover it.
 *    Classes are computed on first use and published with one compare-and-swap, so
 *    concurrent masks may compute one twice but never see half of one.
 *
 *  - The mask of a matcher is then the union of the accept sets of the kernel items of its
 *    last Earley set (those that did not start in it: the start-of-rule items predicted there
 *    are covered by the classes of the items that predicted them), plus the uncertain tokens
 *    that survive a walk on the matcher's real chart. Those are few (tokens that close a
 *    string and go on, say), sorted, and walked in trie order so each shared prefix is read
 *    once. EOS is allowed when the chart is complete.
 *
 * The cost of a step is a few OR-ed bitsets plus a walk over a few hundred trie nodes at most;
 * the cost of a class is one trie walk, paid once per position. */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "weir/sampler.h"
#include "weir/status.h"

/* ---- token classes --------------------------------------------------------------------------- */

typedef struct u32vec {
  uint32_t *a;
  uint32_t n, cap;
} u32vec;

static int vpush(u32vec *v, uint32_t x) {
  if (v->n == v->cap) {
    uint32_t cap = v->cap ? v->cap * 2 : 256;
    uint32_t *p = realloc(v->a, (size_t)cap * sizeof *p);
    if (!p) return WEIR_E_NOMEM;
    v->a = p;
    v->cap = cap;
  }
  v->a[v->n++] = x;
  return 0;
}

static void ci_free(weir__ci *ci) {
  if (!ci) return;
  free(ci->accept_ids);
  free(ci->accept_bits);
  free(ci->uncertain);
  free(ci);
}

/* Length of the common prefix of two ranks' bytes. */
static inline uint32_t lcp(const weir_grammar_vocab *v, uint32_t a, uint32_t b) {
  const uint8_t *x = v->blob + v->off[a], *y = v->blob + v->off[b];
  const uint32_t n = v->len[a] < v->len[b] ? v->len[a] : v->len[b];
  uint32_t i = 0;
  while (i < n && x[i] == y[i]) i++;
  return i;
}

/* Walks the ranks (ascending) on the matcher's chart from its last set, in trie order:
 * consecutive tokens share the sets of their common prefix, and a prefix that cannot be read
 * rejects every following token that shares it. Calls fn(arg, rank) for each token read in
 * full. The chart is restored before returning. */
static int walk(const weir_grammar *g, const weir_grammar_vocab *v, weir__chart *ch,
                const uint32_t *ranks, uint32_t n, int (*fn)(void *, uint32_t), void *arg) {
  const uint32_t base = ch->n_sets;
  uint32_t depth = 0;
  int64_t dead = -1;
  int rc = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t r = ranks[i];
    const uint8_t *b = v->blob + v->off[r];
    const uint32_t L = v->len[r];
    const uint32_t l = i ? lcp(v, ranks[i - 1], r) : 0;
    if (dead >= 0 && (int64_t)l > dead) continue; /* shares the prefix that could not be read */
    dead = -1;
    if (depth > l) {
      weir__chart_truncate(ch, base + l);
      depth = l;
    }
    while (depth < L) {
      const int ok = weir__chart_push(ch, g, b[depth]);
      if (ok < 0) {
        rc = ok;
        goto out;
      }
      if (!ok) {
        dead = depth;
        break;
      }
      depth++;
    }
    if (dead < 0 && (rc = fn(arg, r))) goto out;
  }
out:
  weir__chart_truncate(ch, base);
  return rc;
}

typedef struct ci_build {
  u32vec acc, unc;
} ci_build;

static int push_range(u32vec *v, uint32_t lo, uint32_t hi) {
  for (uint32_t r = lo; r < hi; r++)
    if (vpush(v, r)) return WEIR_E_NOMEM;
  return 0;
}

typedef struct ci_frame {
  uint32_t node, child, state;
  uint8_t done;  /* the seed was complete after one or more bytes on this path */
  uint8_t chart; /* 1: the state is the chart's last set; 0: the DFA position `state` */
} ci_frame;

static inline int has_refs(const weir_grammar *g, uint32_t pos) {
  return g->pos_ref[pos] < g->pos_ref[pos + 1];
}

/* The token classes of one position: a depth-first walk of the token trie from the position
 * alone, cut wherever a prefix cannot be read. While the path stays on positions without rule
 * edges, the chart would hold one item (the seed's, origin 0) and nothing would be predicted,
 * so the walk follows the DFA; at the first position with rule edges it starts a chart there
 * (origins before it can never be looked up again: the only older items are the seed's, of
 * origin 0) and pushes and pops sets below it. The seed is complete where its state accepts
 * (in the chart: where an item of origin 0 accepts). A token whose prefix cannot be read is
 * uncertain when the seed was complete somewhere before, after at least one byte. */
static int ci_walk(const weir_grammar *g, const weir_grammar_vocab *v, uint32_t pos,
                   weir__chart *ch, ci_build *out) {
  ci_frame stack_frames[128];
  ci_frame *st = v->max_len + 2 <= 128 ? stack_frames : malloc((v->max_len + 2) * sizeof *st);
  if (!st) return WEIR_E_NOMEM;
  int rc = 0;
  uint32_t sp = 0;
  const uint8_t root_chart = has_refs(g, pos);
  if (root_chart && (rc = weir__chart_start(ch, g, pos))) goto out;
  st[sp++] = (ci_frame){.node = 0, .state = pos, .chart = root_chart};
  while (sp) {
    ci_frame *f = &st[sp - 1];
    const weir__trie_node *node = &v->trie[f->node];
    if (f->child == node->n_children) {
      if (f->chart && sp > 1 && st[sp - 2].chart) weir__chart_truncate(ch, ch->n_sets - 1);
      sp--;
      continue;
    }
    const uint32_t ci = node->first_child + f->child++;
    const weir__trie_node *c = &v->trie[ci];
    uint32_t state = 0;
    uint8_t chart = f->chart, done;
    if (!f->chart) {
      const int32_t t = weir__scan(g, f->state, c->byte);
      if (t < 0) {
        if (f->done && (rc = push_range(&out->unc, c->lo, c->hi))) break;
        continue;
      }
      state = (uint32_t)t;
      done = f->done || (g->pos_flags[t] & WEIR__POS_ACCEPT);
      if (has_refs(g, state)) {
        if ((rc = weir__chart_start(ch, g, state))) break;
        chart = 1;
      }
    } else {
      const int ok = weir__chart_push(ch, g, c->byte);
      if (ok < 0) {
        rc = ok;
        break;
      }
      if (!ok) {
        if (f->done && (rc = push_range(&out->unc, c->lo, c->hi))) break;
        continue;
      }
      done = f->done || weir__chart_complete(ch, g);
    }
    if ((rc = push_range(&out->acc, c->lo, c->lo + c->n_exact))) break;
    st[sp++] = (ci_frame){.node = ci, .state = state, .done = done, .chart = chart};
  }
out:
  if (st != stack_frames) free(st);
  return rc;
}

static int cmp_i32(const void *a, const void *b) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

static weir__ci *compute_ci(weir_constraint *c, uint32_t pos) {
  const weir_grammar *g = c->g;
  const weir_grammar_vocab *v = c->v;
  weir__ci *ci = calloc(1, sizeof *ci);
  ci_build b = {0};
  weir__chart ch = {0};
  if (!ci) return NULL;
  if (((g->pos_flags[pos] & WEIR__POS_SCAN) || has_refs(g, pos)) && ci_walk(g, v, pos, &ch, &b))
    goto fail;
  ci->n_accept = b.acc.n;
  const size_t words = WEIR_MASK_WORDS(v->n_tokens);
  if ((size_t)b.acc.n * 32 > (size_t)v->n_tokens) {
    ci->accept_bits = calloc(words, sizeof *ci->accept_bits);
    if (!ci->accept_bits) goto fail;
    for (uint32_t i = 0; i < b.acc.n; i++) {
      const int32_t id = v->sorted_id[b.acc.a[i]];
      ci->accept_bits[id >> 5] |= 1u << (id & 31);
    }
    ci->bytes = words * sizeof *ci->accept_bits;
  } else if (b.acc.n) {
    ci->accept_ids = malloc((size_t)b.acc.n * sizeof *ci->accept_ids);
    if (!ci->accept_ids) goto fail;
    for (uint32_t i = 0; i < b.acc.n; i++) ci->accept_ids[i] = v->sorted_id[b.acc.a[i]];
    qsort(ci->accept_ids, b.acc.n, sizeof *ci->accept_ids, cmp_i32);
    ci->bytes = (size_t)b.acc.n * sizeof *ci->accept_ids;
  }
  ci->n_uncertain = b.unc.n;
  ci->uncertain = b.unc.a; /* ranks, ascending: the walk visits them in order */
  b.unc.a = NULL;
  ci->bytes += sizeof *ci + (size_t)ci->n_uncertain * sizeof *ci->uncertain;
  free(b.acc.a);
  weir__chart_free(&ch);
  return ci;
fail:
  free(b.acc.a);
  free(b.unc.a);
  weir__chart_free(&ch);
  ci_free(ci);
  return NULL;
}

const weir__ci *weir__constraint_ci(weir_constraint *c, uint32_t pos) {
  weir__ci *ci = atomic_load_explicit(&c->ci[pos], memory_order_acquire);
  if (ci) return ci;
  weir__ci *mine = compute_ci(c, pos);
  if (!mine) return NULL;
  weir__ci *expected = NULL;
  if (atomic_compare_exchange_strong_explicit(&c->ci[pos], &expected, mine, memory_order_acq_rel,
                                              memory_order_acquire)) {
    atomic_fetch_add(&c->ci_bytes, mine->bytes);
    return mine;
  }
  ci_free(mine); /* another thread published first */
  return expected;
}

/* ---- constraints ----------------------------------------------------------------------------- */

int weir_constraint_create(weir_grammar *g, weir_grammar_vocab *v, weir_constraint **out) {
  *out = NULL;
  weir_constraint *c = calloc(1, sizeof *c);
  if (!c) return WEIR_E_NOMEM;
  c->ci = calloc(g->n_pos, sizeof *c->ci);
  if (!c->ci) {
    free(c);
    return WEIR_E_NOMEM;
  }
  atomic_init(&c->refs, 1);
  atomic_init(&c->ci_bytes, 0);
  atomic_init(&c->dist, NULL);
  for (uint32_t p = 0; p < g->n_pos; p++) atomic_init(&c->ci[p], NULL);
  c->g = weir_grammar_retain(g);
  c->v = weir_grammar_vocab_retain(v);
  *out = c;
  return 0;
}

weir_constraint *weir_constraint_retain(weir_constraint *c) {
  atomic_fetch_add(&c->refs, 1);
  return c;
}

void weir_constraint_release(weir_constraint *c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  for (uint32_t p = 0; p < c->g->n_pos; p++) ci_free(atomic_load(&c->ci[p]));
  free(c->ci);
  free(atomic_load(&c->dist));
  weir_grammar_release(c->g);
  weir_grammar_vocab_release(c->v);
  free(c);
}

size_t weir_constraint_memory(const weir_constraint *c) {
  return atomic_load(&c->ci_bytes) + c->g->bytes + (size_t)c->g->n_pos * sizeof *c->ci;
}

typedef struct pre_ctx {
  weir_constraint *c;
  _Atomic int failed;
} pre_ctx;

static void pre_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  pre_ctx *p = arg;
  for (int64_t i = begin; i < end; i++)
    if (!weir__constraint_ci(p->c, (uint32_t)i)) atomic_store(&p->failed, 1);
}

int weir_constraint_precompute(weir_constraint *c, weir_threadpool *pool) {
  pre_ctx p = {.c = c};
  atomic_init(&p.failed, 0);
  weir_threadpool_parallel_for(pool, c->g->n_pos, 1, pre_chunk, &p);
  return atomic_load(&p.failed) ? WEIR_E_NOMEM : 0;
}

/* ---- matchers -------------------------------------------------------------------------------- */

static int record_step(weir_matcher *m) {
  if (m->n_steps + 1 >= m->cap_steps) {
    int32_t cap = m->cap_steps ? m->cap_steps * 2 : 64;
    uint32_t *p = realloc(m->step_sets, (size_t)cap * sizeof *p);
    if (!p) return WEIR_E_NOMEM;
    m->step_sets = p;
    m->cap_steps = cap;
  }
  m->step_sets[++m->n_steps] = m->chart.n_sets;
  return 0;
}

int weir_matcher_create(weir_constraint *c, weir_matcher **out) {
  *out = NULL;
  weir_matcher *m = calloc(1, sizeof *m);
  if (!m) return WEIR_E_NOMEM;
  m->c = weir_constraint_retain(c);
  m->ended = -1;
  m->n_steps = -1;
  if (weir__chart_start(&m->chart, c->g, c->g->start_pos) || record_step(m)) {
    weir_matcher_free(m);
    return WEIR_E_NOMEM;
  }
  *out = m;
  return 0;
}

int weir_matcher_clone(const weir_matcher *m, weir_matcher **out) {
  *out = NULL;
  weir_matcher *n = calloc(1, sizeof *n);
  if (!n) return WEIR_E_NOMEM;
  n->c = weir_constraint_retain(m->c);
  n->ended = m->ended;
  n->n_steps = m->n_steps;
  n->cap_steps = m->n_steps + 2;
  n->step_sets = malloc((size_t)n->cap_steps * sizeof *n->step_sets);
  if (!n->step_sets || weir__chart_copy(&n->chart, &m->chart)) {
    weir_matcher_free(n);
    return WEIR_E_NOMEM;
  }
  memcpy(n->step_sets, m->step_sets, ((size_t)m->n_steps + 1) * sizeof *n->step_sets);
  *out = n;
  return 0;
}

void weir_matcher_free(weir_matcher *m) {
  if (!m) return;
  weir__chart_free(&m->chart);
  free(m->step_sets);
  free(m->unc);
  free(m->pos_seen);
  weir_constraint_release(m->c);
  free(m);
}

static int is_eos(const weir_grammar_vocab *v, int32_t t) {
  for (int32_t i = 0; i < v->n_eos; i++)
    if (v->eos[i] == t) return 1;
  return 0;
}

int weir_matcher_accept_bytes(weir_matcher *m, const uint8_t *bytes, size_t len) {
  if (m->ended >= 0) return WEIR_E_INVAL;
  const uint32_t saved = m->chart.n_sets;
  for (size_t i = 0; i < len; i++) {
    const int ok = weir__chart_push(&m->chart, m->c->g, bytes[i]);
    if (ok <= 0) {
      weir__chart_truncate(&m->chart, saved);
      return ok < 0 ? ok : WEIR_E_INVAL;
    }
  }
  if (record_step(m)) {
    weir__chart_truncate(&m->chart, saved);
    return WEIR_E_NOMEM;
  }
  return 0;
}

int weir_matcher_accept_token(weir_matcher *m, int32_t token) {
  const weir_grammar_vocab *v = m->c->v;
  if (token < 0 || token >= v->n_tokens) return WEIR_E_RANGE;
  if (m->ended >= 0) return WEIR_E_INVAL;
  if (is_eos(v, token)) { /* only when the text is complete, and then nothing more */
    if (!weir__chart_complete(&m->chart, m->c->g)) return WEIR_E_INVAL;
    if (record_step(m)) return WEIR_E_NOMEM;
    m->ended = m->n_steps;
    return 0;
  }
  const int32_t rank = v->rank_of[token];
  if (rank < 0) return WEIR_E_INVAL; /* special tokens are never constrained text */
  return weir_matcher_accept_bytes(m, v->blob + v->off[rank], v->len[rank]);
}

int weir_matcher_rollback(weir_matcher *m, int32_t n) {
  if (n < 0 || n > m->n_steps) return WEIR_E_RANGE;
  m->n_steps -= n;
  weir__chart_truncate(&m->chart, m->step_sets[m->n_steps]);
  if (m->ended > m->n_steps) m->ended = -1;
  return 0;
}

int32_t weir_matcher_num_steps(const weir_matcher *m) { return m->n_steps; }

int weir_matcher_is_complete(const weir_matcher *m) {
  return weir__chart_complete(&m->chart, m->c->g);
}

int weir_matcher_can_continue(const weir_matcher *m) {
  if (m->ended >= 0) return 0;
  const weir__chart *ch = &m->chart;
  const uint32_t k = ch->n_sets - 1;
  for (uint32_t i = ch->set_start[k]; i < ch->set_start[k + 1]; i++)
    if (m->c->g->pos_flags[ch->items[i].pos] & WEIR__POS_SCAN) return 1;
  return 0;
}

int weir_matcher_is_ended(const weir_matcher *m) { return m->ended >= 0; }

typedef struct mask_walk {
  const weir_grammar_vocab *v;
  uint32_t *mask;
} mask_walk;

static int mask_set(void *arg, uint32_t rank) {
  mask_walk *w = arg;
  const int32_t id = w->v->sorted_id[rank];
  w->mask[id >> 5] |= 1u << (id & 31);
  return 0;
}

static int cmp_u32(const void *a, const void *b) {
  const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

int weir_matcher_fill_mask(weir_matcher *m, uint32_t *mask) {
  const weir_grammar *g = m->c->g;
  const weir_grammar_vocab *v = m->c->v;
  const size_t words = WEIR_MASK_WORDS(v->n_tokens);
  memset(mask, 0, words * sizeof *mask);
  if (m->ended >= 0) return 0;
  weir__chart *ch = &m->chart;
  const uint32_t k = ch->n_sets - 1;
  const uint32_t a = ch->set_start[k], z = ch->set_start[k + 1];
  /* Kernel positions, each once. */
  uint32_t n_pos = 0;
  if (z - a > m->pos_seen_cap) {
    uint32_t *p = realloc(m->pos_seen, (size_t)(z - a) * sizeof *p);
    if (!p) return WEIR_E_NOMEM;
    m->pos_seen = p;
    m->pos_seen_cap = z - a;
  }
  for (uint32_t i = a; i < z; i++) {
    const weir__item it = ch->items[i];
    if (it.origin >= k) continue;
    if (!(g->pos_flags[it.pos] & WEIR__POS_SCAN) && g->pos_ref[it.pos] == g->pos_ref[it.pos + 1])
      continue;
    uint32_t j = 0;
    while (j < n_pos && m->pos_seen[j] != it.pos) j++;
    if (j == n_pos) m->pos_seen[n_pos++] = it.pos;
  }
  uint32_t n_unc = 0, lists = 0;
  for (uint32_t j = 0; j < n_pos; j++) {
    const weir__ci *ci = weir__constraint_ci(m->c, m->pos_seen[j]);
    if (!ci) return WEIR_E_NOMEM;
    if (ci->accept_bits) {
      for (size_t w = 0; w < words; w++) mask[w] |= ci->accept_bits[w];
    } else {
      for (uint32_t i = 0; i < ci->n_accept; i++)
        mask[ci->accept_ids[i] >> 5] |= 1u << (ci->accept_ids[i] & 31);
    }
    if (!ci->n_uncertain) continue;
    if (n_unc + ci->n_uncertain > m->unc_cap) {
      uint32_t cap = m->unc_cap ? m->unc_cap : 256;
      while (cap < n_unc + ci->n_uncertain) cap *= 2;
      uint32_t *p = realloc(m->unc, (size_t)cap * sizeof *p);
      if (!p) return WEIR_E_NOMEM;
      m->unc = p;
      m->unc_cap = cap;
    }
    memcpy(m->unc + n_unc, ci->uncertain, (size_t)ci->n_uncertain * sizeof *m->unc);
    n_unc += ci->n_uncertain;
    lists++;
  }
  if (lists > 1) { /* several sorted lists: one sorted list without duplicates */
    qsort(m->unc, n_unc, sizeof *m->unc, cmp_u32);
    uint32_t w = 0;
    for (uint32_t i = 0; i < n_unc; i++)
      if (!w || m->unc[w - 1] != m->unc[i]) m->unc[w++] = m->unc[i];
    n_unc = w;
  }
  /* Those already allowed need no walk. */
  uint32_t w = 0;
  for (uint32_t i = 0; i < n_unc; i++) {
    const int32_t id = v->sorted_id[m->unc[i]];
    if (!weir_mask_test(mask, id)) m->unc[w++] = m->unc[i];
  }
  n_unc = w;
  if (n_unc) {
    mask_walk mw = {v, mask};
    int rc = walk(g, v, ch, m->unc, n_unc, mask_set, &mw);
    if (rc) return rc;
  }
  if (weir__chart_complete(ch, g))
    for (int32_t i = 0; i < v->n_eos; i++) mask[v->eos[i] >> 5] |= 1u << (v->eos[i] & 31);
  return 0;
}

typedef struct batch {
  weir_matcher *const *ms;
  uint32_t *masks;
  size_t stride;
  size_t words;
  _Atomic int rc;
} batch;

static void batch_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  batch *b = arg;
  for (int64_t i = begin; i < end; i++) {
    uint32_t *mask = b->masks + (size_t)i * b->stride;
    if (!b->ms[i]) {
      memset(mask, 0xFF, b->words * sizeof *mask);
      continue;
    }
    const int rc = weir_matcher_fill_mask(b->ms[i], mask);
    if (rc) {
      int expected = 0;
      atomic_compare_exchange_strong(&b->rc, &expected, rc);
    }
  }
}

int weir_matchers_fill_masks(weir_matcher *const *ms, int32_t n, uint32_t *masks,
                             size_t stride_words, weir_threadpool *pool) {
  if (n <= 0) return 0;
  size_t words = 0;
  for (int32_t i = 0; i < n && !words; i++)
    if (ms[i]) words = WEIR_MASK_WORDS(ms[i]->c->v->n_tokens);
  if (!words) words = stride_words;
  if (stride_words < words) return WEIR_E_INVAL;
  batch b = {.ms = ms, .masks = masks, .stride = stride_words, .words = words};
  atomic_init(&b.rc, 0);
  weir_threadpool_parallel_for(pool, n, 1, batch_chunk, &b);
  return atomic_load(&b.rc);
}

/* ---- distance to completion (tests) ---------------------------------------------------------- */

/* Per position, the fewest bytes that take its rule from there to an accepting state, rule
 * calls counted at their rules' own fewest bytes: a fixpoint of relaxations. */
static uint32_t *compute_dist(const weir_grammar *g) {
  uint32_t *d = malloc((size_t)g->n_pos * sizeof *d);
  if (!d) return NULL;
  for (uint32_t p = 0; p < g->n_pos; p++) d[p] = (g->pos_flags[p] & WEIR__POS_ACCEPT) ? 0 : UINT32_MAX;
  for (int changed = 1; changed;) {
    changed = 0;
    for (uint32_t p = 0; p < g->n_pos; p++) {
      uint32_t best = d[p];
      const int32_t *row = g->trans + g->pos_trans[p];
      for (uint32_t x = 0; x < g->rule_npart[g->pos_rule[p]]; x++)
        if (row[x] >= 0 && d[row[x]] != UINT32_MAX && d[row[x]] + 1 < best) best = d[row[x]] + 1;
      for (uint32_t e = g->pos_ref[p]; e < g->pos_ref[p + 1]; e++) {
        const uint32_t in = d[g->rule_start[g->refs[e].rule]], after = d[g->refs[e].target];
        if (in != UINT32_MAX && after != UINT32_MAX && in + after < best) best = in + after;
      }
      if (best < d[p]) {
        d[p] = best;
        changed = 1;
      }
    }
  }
  return d;
}

typedef struct dist_ctx {
  const weir_grammar *g;
  const weir__chart *ch;
  const uint32_t *d;
  uint32_t *memo; /* [rule][set]: UINT32_MAX - 1 unknown, UINT32_MAX - 2 in progress */
} dist_ctx;

/* Fewest bytes to finish everything above a rule that began in set `origin`. */
static uint32_t up_cost(dist_ctx *x, uint32_t rule, uint32_t origin) {
  if (origin == 0) return 0;
  uint32_t *memo = &x->memo[(size_t)rule * x->ch->n_sets + origin];
  if (*memo == UINT32_MAX - 2) return UINT32_MAX; /* a cycle adds nothing shorter */
  if (*memo != UINT32_MAX - 1) return *memo;
  *memo = UINT32_MAX - 2;
  uint32_t best = UINT32_MAX;
  for (uint32_t i = x->ch->set_start[origin]; i < x->ch->set_start[origin + 1]; i++) {
    const weir__item w = x->ch->items[i];
    for (uint32_t e = x->g->pos_ref[w.pos]; e < x->g->pos_ref[w.pos + 1]; e++) {
      if (x->g->refs[e].rule != rule) continue;
      const uint32_t here = x->d[x->g->refs[e].target];
      const uint32_t above = up_cost(x, x->g->pos_rule[w.pos], w.origin);
      if (here != UINT32_MAX && above != UINT32_MAX && here + above < best) best = here + above;
    }
  }
  *memo = best;
  return best;
}

uint32_t weir__matcher_distance(const weir_matcher *m) {
  weir_constraint *c = m->c;
  uint32_t *d = atomic_load(&c->dist);
  if (!d) {
    uint32_t *mine = compute_dist(c->g), *expected = NULL;
    if (!mine) return UINT32_MAX;
    if (atomic_compare_exchange_strong(&c->dist, &expected, mine)) d = mine;
    else {
      free(mine);
      d = expected;
    }
  }
  const weir__chart *ch = &m->chart;
  dist_ctx x = {c->g, ch, d, NULL};
  x.memo = malloc((size_t)c->g->n_rules * ch->n_sets * sizeof *x.memo);
  if (!x.memo) return UINT32_MAX;
  for (size_t i = 0; i < (size_t)c->g->n_rules * ch->n_sets; i++) x.memo[i] = UINT32_MAX - 1;
  const uint32_t k = ch->n_sets - 1;
  uint32_t best = UINT32_MAX;
  for (uint32_t i = ch->set_start[k]; i < ch->set_start[k + 1]; i++) {
    const weir__item it = ch->items[i];
    const uint32_t here = d[it.pos];
    const uint32_t above = it.origin == k ? UINT32_MAX : up_cost(&x, c->g->pos_rule[it.pos], it.origin);
    if (here != UINT32_MAX && above != UINT32_MAX && here + above < best) best = here + above;
  }
  free(x.memo);
  return best;
}
