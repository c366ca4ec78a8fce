/* Rules to automata.
 *
 * Each rule body is a regular expression over byte classes and references to rules. A
 * reference to a rule that is not recursive (not on a cycle of references) and not too large
 * is inlined, so that the regular parts of a grammar (a JSON string, a number, a property
 * name, often a whole schema without $ref recursion) become one automaton and the Earley
 * chart keeps one item where a rule-per-symbol grammar would keep dozens. The remaining rules
 * are built as Thompson NFAs whose edges are byte classes, epsilon or a rule, and
 * determinized over byte partitions and rule symbols. A position of the compiled grammar is
 * one DFA state of one rule.
 *
 * Finally the grammar is trimmed: rules that derive no string are removed with every edge
 * into them, and states from which no accepting state is reachable are cut, so that every
 * item the matcher holds can still be completed (an Earley set is non-empty exactly when the
 * text so far is a prefix of some match). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "weir/status.h"

#define EPS (-1)
#define REF_LABEL(r) (-2 - (int32_t)(r))
#define IS_REF(l) ((l) <= -2)
#define REF_RULE(l) ((uint32_t)(-2 - (l)))

void weir_grammar_limits_default(weir_grammar_limits *l) {
  l->max_text_bytes = 1u << 20;
  l->max_depth = 64;
  l->max_schema_nodes = 20000;
  l->max_repeat = 10000;
  l->max_nfa_states = 2000000;
  l->max_dfa_states = 200000;
  l->max_compile_ms = 10000;
}

/* ---- rule graph ----------------------------------------------------------------------------- */

typedef struct cctx {
  weir__gb *b;
  uint32_t *on_cycle;  /* rule -> 1 when it can reach itself */
  uint64_t *size;      /* rule -> NFA states of its body with inlinable refs expanded */
  uint8_t *size_state; /* 0 unknown, 1 in progress, 2 done */
  uint8_t *inl;        /* rule -> inline references to it */
  uint64_t inline_max;
  int inlined_here; /* the rule being built inlined another rule */
} cctx;

static void refs_of(const weir__gb *b, uint32_t node, uint32_t **out, uint32_t *n, uint32_t *cap,
                    int *nomem) {
  /* Iterative walk: nodes form a DAG (shared subtrees are fine to visit twice). */
  uint32_t stack_small[256], *stack = stack_small, sp = 0, scap = 256;
  stack[sp++] = node;
  while (sp) {
    const weir__rx *x = &b->nodes[stack[--sp]];
    uint32_t push[1];
    const uint32_t *ks = NULL;
    uint32_t nk = 0;
    switch (x->kind) {
    case WEIR__RX_SEQ:
    case WEIR__RX_ALT: ks = b->kids + x->a; nk = x->n; break;
    case WEIR__RX_REPEAT: push[0] = x->a; ks = push; nk = 1; break;
    case WEIR__RX_REF:
      if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 8;
        void *p = realloc(*out, c * sizeof **out);
        if (!p) {
          *nomem = 1;
          goto done;
        }
        *out = p;
        *cap = c;
      }
      (*out)[(*n)++] = x->a;
      break;
    default: break;
    }
    if (sp + nk > scap) {
      uint32_t c = (sp + nk) * 2;
      uint32_t *p = malloc(c * sizeof *p);
      if (!p) {
        *nomem = 1;
        goto done;
      }
      memcpy(p, stack, sp * sizeof *p);
      if (stack != stack_small) free(stack);
      stack = p;
      scap = c;
    }
    for (uint32_t i = 0; i < nk; i++) stack[sp++] = ks[i];
  }
done:
  if (stack != stack_small) free(stack);
}

/* Tarjan's strongly connected components, iteratively: on_cycle[r] for rules in a component
 * of several rules or with a reference to themselves. */
static int find_cycles(const weir__gb *b, uint32_t *on_cycle) {
  const uint32_t n = b->n_rules;
  int rc = WEIR_E_NOMEM, nomem = 0;
  uint32_t **adj = calloc(n, sizeof *adj), *deg = calloc(n, sizeof *deg);
  uint32_t *index = malloc(n * sizeof *index), *low = malloc(n * sizeof *low);
  uint32_t *stk = malloc(n * sizeof *stk), *cs_node = malloc(n * sizeof *cs_node);
  uint32_t *cs_edge = malloc(n * sizeof *cs_edge);
  uint8_t *on_stk = calloc(n, 1);
  if (!adj || !deg || !index || !low || !stk || !cs_node || !cs_edge || !on_stk) goto free_all;
  for (uint32_t r = 0; r < n; r++) {
    uint32_t cap = 0;
    if (b->rules[r].body != UINT32_MAX) refs_of(b, b->rules[r].body, &adj[r], &deg[r], &cap, &nomem);
    if (nomem) goto free_all;
    for (uint32_t i = 0; i < deg[r]; i++)
      if (adj[r][i] == r) on_cycle[r] = 1;
  }
  for (uint32_t r = 0; r < n; r++) index[r] = UINT32_MAX;
  uint32_t next_index = 0, sp = 0;
  for (uint32_t root = 0; root < n; root++) {
    if (index[root] != UINT32_MAX) continue;
    uint32_t csp = 0;
    cs_node[csp] = root;
    cs_edge[csp++] = 0;
    index[root] = low[root] = next_index++;
    stk[sp++] = root;
    on_stk[root] = 1;
    while (csp) {
      const uint32_t v = cs_node[csp - 1];
      if (cs_edge[csp - 1] < deg[v]) {
        const uint32_t w = adj[v][cs_edge[csp - 1]++];
        if (index[w] == UINT32_MAX) {
          index[w] = low[w] = next_index++;
          stk[sp++] = w;
          on_stk[w] = 1;
          cs_node[csp] = w;
          cs_edge[csp++] = 0;
        } else if (on_stk[w] && index[w] < low[v]) {
          low[v] = index[w];
        }
        continue;
      }
      csp--;
      if (csp && low[v] < low[cs_node[csp - 1]]) low[cs_node[csp - 1]] = low[v];
      if (low[v] == index[v]) {
        uint32_t count = 0, w;
        uint32_t top = sp;
        do {
          w = stk[--sp];
          on_stk[w] = 0;
          count++;
        } while (w != v);
        if (count > 1)
          for (uint32_t i = sp; i < top; i++) on_cycle[stk[i]] = 1;
      }
    }
  }
  rc = 0;
free_all:
  if (adj)
    for (uint32_t r = 0; r < n; r++) free(adj[r]);
  free(adj);
  free(deg);
  free(index);
  free(low);
  free(stk);
  free(cs_node);
  free(cs_edge);
  free(on_stk);
  return rc;
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a || a + b > (1ull << 40) ? 1ull << 40 : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) {
  if (a && b > (1ull << 40) / a) return 1ull << 40;
  return a * b;
}

static uint64_t rule_size(cctx *c, uint32_t r);

/* NFA states the Thompson construction of node makes, refs to inlinable rules expanded. */
static uint64_t node_size(cctx *c, uint32_t node) {
  const weir__rx *x = &c->b->nodes[node];
  switch (x->kind) {
  case WEIR__RX_NONE:
  case WEIR__RX_EMPTY:
  case WEIR__RX_CLASS: return 1;
  case WEIR__RX_SEQ:
  case WEIR__RX_ALT: {
    uint64_t s = 1;
    for (uint32_t i = 0; i < x->n; i++) s = sat_add(s, node_size(c, c->b->kids[x->a + i]));
    return s;
  }
  case WEIR__RX_REPEAT: {
    const uint64_t k = node_size(c, x->a);
    const uint64_t copies = x->max == WEIR__RX_INF ? (uint64_t)x->min + 1 : x->max;
    return sat_add(sat_mul(k + 2, copies), 2);
  }
  case WEIR__RX_REF: {
    const uint32_t r = x->a;
    if (c->on_cycle[r] || c->b->rules[r].body == UINT32_MAX || c->b->rules[r].noinline) return 1;
    const uint64_t s = rule_size(c, r);
    return s <= c->inline_max ? s : 1;
  }
  }
  return 1;
}

static uint64_t rule_size(cctx *c, uint32_t r) {
  if (c->size_state[r] == 2) return c->size[r];
  if (c->size_state[r] == 1) return 1u << 30; /* cannot happen: cycles are not inlined */
  c->size_state[r] = 1;
  c->size[r] = node_size(c, c->b->rules[r].body);
  c->size_state[r] = 2;
  return c->size[r];
}

/* ---- NFA ------------------------------------------------------------------------------------ */

typedef struct nfa {
  uint32_t n_states;
  uint32_t *e_from, *e_to;
  int32_t *e_label;
  uint32_t n_edges, cap_edges;
  uint32_t max_states;
  int failed; /* 1 nomem, 2 too large */
} nfa;

/* realloc that keeps the old block when it fails (the caller's pointer stays valid and
 * freeable) and then sets *failed. */
static void *grow_or_keep(void *p, size_t bytes, int *failed) {
  void *q = realloc(p, bytes);
  if (q) return q;
  *failed = 1;
  return p;
}

static uint32_t nfa_state(nfa *m) {
  if (m->n_states >= m->max_states) {
    m->failed = m->failed ? m->failed : 2;
    return 0;
  }
  return m->n_states++;
}

static void nfa_edge(nfa *m, uint32_t from, uint32_t to, int32_t label) {
  if (m->failed) return;
  if (m->n_edges == m->cap_edges) {
    uint32_t cap = m->cap_edges ? m->cap_edges * 2 : 256;
    int failed = 0;
    m->e_from = grow_or_keep(m->e_from, cap * sizeof *m->e_from, &failed);
    m->e_to = grow_or_keep(m->e_to, cap * sizeof *m->e_to, &failed);
    m->e_label = grow_or_keep(m->e_label, cap * sizeof *m->e_label, &failed);
    if (failed) {
      m->failed = 1;
      return;
    }
    m->cap_edges = cap;
  }
  m->e_from[m->n_edges] = from;
  m->e_to[m->n_edges] = to;
  m->e_label[m->n_edges++] = label;
}

static void build(cctx *c, nfa *m, uint32_t node, uint32_t from, uint32_t to) {
  if (m->failed) return;
  const weir__rx *x = &c->b->nodes[node];
  switch (x->kind) {
  case WEIR__RX_NONE: return;
  case WEIR__RX_EMPTY: nfa_edge(m, from, to, EPS); return;
  case WEIR__RX_CLASS: nfa_edge(m, from, to, (int32_t)x->a); return;
  case WEIR__RX_SEQ: {
    uint32_t cur = from;
    for (uint32_t i = 0; i < x->n; i++) {
      const uint32_t nxt = i + 1 == x->n ? to : nfa_state(m);
      build(c, m, c->b->kids[x->a + i], cur, nxt);
      cur = nxt;
    }
    return;
  }
  case WEIR__RX_ALT:
    /* Sharing from/to is sound: no construction adds an edge into its `from` or out of its
     * `to`, so alternatives cannot run into each other. */
    for (uint32_t i = 0; i < x->n; i++) build(c, m, c->b->kids[x->a + i], from, to);
    return;
  case WEIR__RX_REPEAT: {
    const uint32_t kid = x->a, min = x->min, max = x->max;
    uint32_t cur = from;
    for (uint32_t i = 0; i < min; i++) {
      const uint32_t nxt = i + 1 == min && max == min ? to : nfa_state(m);
      build(c, m, kid, cur, nxt);
      cur = nxt;
    }
    if (max == WEIR__RX_INF) {
      const uint32_t a = nfa_state(m), z = nfa_state(m);
      nfa_edge(m, cur, a, EPS);
      build(c, m, kid, a, z);
      nfa_edge(m, z, a, EPS);
      nfa_edge(m, z, to, EPS);
      nfa_edge(m, cur, to, EPS);
    } else {
      for (uint32_t i = min; i < max; i++) {
        nfa_edge(m, cur, to, EPS);
        const uint32_t nxt = i + 1 == max ? to : nfa_state(m);
        build(c, m, kid, cur, nxt);
        cur = nxt;
      }
    }
    return;
  }
  case WEIR__RX_REF: {
    const uint32_t r = x->a;
    if (c->inl[r]) {
      c->inlined_here = 1;
      build(c, m, c->b->rules[r].body, from, to);
    }
    else nfa_edge(m, from, to, REF_LABEL(r));
    return;
  }
  }
}

/* ---- DFA ------------------------------------------------------------------------------------ */

typedef struct dfa {
  uint32_t n_states;
  uint32_t n_part;
  uint8_t part[256];
  int32_t *trans;      /* [n_states][n_part] local state or -1 */
  uint8_t *accept;
  /* Ref edges as (state, rule, target) triples, in state order. */
  uint32_t *r_state, *r_rule, *r_target;
  uint32_t n_refs, cap_refs;
} dfa;

static void dfa_free(dfa *d) {
  free(d->trans);
  free(d->accept);
  free(d->r_state);
  free(d->r_rule);
  free(d->r_target);
  memset(d, 0, sizeof *d);
}

typedef struct set_table { /* NFA state sets -> DFA state, open addressing */
  uint32_t *slot; /* DFA state + 1 */
  uint32_t cap;
  uint32_t *list; /* concatenated sorted sets */
  size_t n_list, cap_list;
  uint32_t *first, *len; /* per DFA state */
  uint32_t n, cap_n_states;
} set_table;

static uint64_t hash_set(const uint32_t *s, uint32_t n) {
  uint64_t h = 1469598103934665603ull ^ n;
  for (uint32_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

/* Finds or adds a set (sorted, unique). *id gets its DFA state; returns 1 when new, 0 when
 * found, WEIR_E_NOMEM. */
static int set_lookup(set_table *t, const uint32_t *s, uint32_t n, uint32_t *id) {
  if ((t->n + 1) * 2 > t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 1024;
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return WEIR_E_NOMEM;
    for (uint32_t i = 0; i < t->cap; i++) {
      if (!t->slot[i]) continue;
      const uint32_t d = t->slot[i] - 1;
      uint64_t h = hash_set(t->list + t->first[d], t->len[d]) & (cap - 1);
      while (slot[h]) h = (h + 1) & (cap - 1);
      slot[h] = t->slot[i];
    }
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
  }
  uint64_t h = hash_set(s, n) & (t->cap - 1);
  while (t->slot[h]) {
    const uint32_t d = t->slot[h] - 1;
    if (t->len[d] == n && !memcmp(t->list + t->first[d], s, n * sizeof *s)) {
      *id = d;
      return 0;
    }
    h = (h + 1) & (t->cap - 1);
  }
  if (t->n == t->cap_n_states) {
    uint32_t cap = t->cap_n_states ? t->cap_n_states * 2 : 256;
    uint32_t *f = realloc(t->first, cap * sizeof *f);
    if (!f) return WEIR_E_NOMEM;
    t->first = f;
    uint32_t *l = realloc(t->len, cap * sizeof *l);
    if (!l) return WEIR_E_NOMEM;
    t->len = l;
    t->cap_n_states = cap;
  }
  if (t->n_list + n > t->cap_list) {
    size_t cap = t->cap_list ? t->cap_list * 2 : 4096;
    while (cap < t->n_list + n) cap *= 2;
    uint32_t *l = realloc(t->list, cap * sizeof *l);
    if (!l) return WEIR_E_NOMEM;
    t->list = l;
    t->cap_list = cap;
  }
  memcpy(t->list + t->n_list, s, n * sizeof *s);
  t->first[t->n] = (uint32_t)t->n_list;
  t->len[t->n] = n;
  t->n_list += n;
  t->slot[h] = t->n + 1;
  *id = t->n++;
  return 1;
}

static void set_table_free(set_table *t) {
  free(t->slot);
  free(t->list);
  free(t->first);
  free(t->len);
}

typedef struct pair {
  uint32_t key, to;
} pair;

static int cmp_pair(const void *a, const void *b) {
  const pair *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->to < y->to ? -1 : x->to > y->to;
}

typedef struct det {
  const nfa *m;
  uint32_t *adj_first; /* CSR of edges by source state */
  uint32_t *adj;       /* edge indexes */
  uint32_t *stamp, cur;
  uint32_t *stack, *out, *tmp;
} det;

/* Sorts a[0..n): insertion sort when short, else an LSD radix sort by bytes (closures of large
 * automata are long, and sorting them dominated determinization). */
static void sort_u32(uint32_t *a, uint32_t *tmp, uint32_t n) {
  if (n <= 32) {
    for (uint32_t i = 1; i < n; i++) {
      const uint32_t x = a[i];
      uint32_t j = i;
      while (j > 0 && a[j - 1] > x) a[j] = a[j - 1], j--;
      a[j] = x;
    }
    return;
  }
  uint32_t *src = a, *dst = tmp;
  for (int shift = 0; shift < 32; shift += 8) {
    uint32_t count[257] = {0};
    for (uint32_t i = 0; i < n; i++) count[((src[i] >> shift) & 0xFF) + 1]++;
    if (count[((src[0] >> shift) & 0xFF) + 1] == n) continue; /* all equal in this byte */
    for (int k = 0; k < 256; k++) count[k + 1] += count[k];
    for (uint32_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & 0xFF]++] = src[i];
    uint32_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != a) memcpy(a, src, n * sizeof *a);
}

/* The epsilon closure of seeds[0..n) into d->out, sorted; returns its size. */
static uint32_t closure(det *d, const uint32_t *seeds, uint32_t n) {
  uint32_t sp = 0, no = 0;
  if (++d->cur == 0) {
    memset(d->stamp, 0, d->m->n_states * sizeof *d->stamp);
    d->cur = 1;
  }
  for (uint32_t i = 0; i < n; i++)
    if (d->stamp[seeds[i]] != d->cur) {
      d->stamp[seeds[i]] = d->cur;
      d->stack[sp++] = seeds[i];
    }
  while (sp) {
    const uint32_t q = d->stack[--sp];
    d->out[no++] = q;
    for (uint32_t k = d->adj_first[q]; k < d->adj_first[q + 1]; k++) {
      const uint32_t e = d->adj[k];
      if (d->m->e_label[e] != EPS) continue;
      const uint32_t t = d->m->e_to[e];
      if (d->stamp[t] != d->cur) {
        d->stamp[t] = d->cur;
        d->stack[sp++] = t;
      }
    }
  }
  sort_u32(d->out, d->tmp, no);
  return no;
}

/* Subset construction of m (start state 0, final state 1) over byte partitions and rule
 * symbols. WEIR_E_NOMEM, or WEIR_E_RANGE when it would exceed max_states. */
static int determinize(weir__gb *b, const nfa *m, uint32_t max_states, dfa *out) {
  int rc = WEIR_E_NOMEM;
  memset(out, 0, sizeof *out);
  det d = {.m = m};
  set_table t = {0};
  pair *pairs = NULL, *sorted = NULL;
  size_t n_pairs = 0, cap_pairs = 0, cap_sorted = 0;
  uint32_t *seeds = NULL;
  uint16_t(*class_parts)[256] = NULL;
  uint16_t *class_nparts = NULL;
  int32_t *class_map = NULL;
  const uint32_t n = m->n_states;
  d.adj_first = calloc((size_t)n + 1, sizeof *d.adj_first);
  d.adj = malloc(((size_t)m->n_edges + 1) * sizeof *d.adj);
  d.stamp = calloc(n, sizeof *d.stamp);
  d.stack = malloc((size_t)n * sizeof *d.stack);
  d.out = malloc((size_t)n * sizeof *d.out);
  d.tmp = malloc((size_t)n * sizeof *d.tmp);
  seeds = malloc(((size_t)m->n_edges + 1) * sizeof *seeds);
  class_map = malloc(((size_t)b->n_classes + 1) * sizeof *class_map);
  if (!d.adj_first || !d.adj || !d.stamp || !d.stack || !d.out || !d.tmp || !seeds || !class_map)
    goto free_all;
  for (uint32_t e = 0; e < m->n_edges; e++) d.adj_first[m->e_from[e] + 1]++;
  for (uint32_t q = 0; q < n; q++) d.adj_first[q + 1] += d.adj_first[q];
  {
    uint32_t *fill = malloc((size_t)n * sizeof *fill);
    if (!fill) goto free_all;
    memcpy(fill, d.adj_first, (size_t)n * sizeof *fill);
    for (uint32_t e = 0; e < m->n_edges; e++) d.adj[fill[m->e_from[e]]++] = e;
    free(fill);
  }

  /* Byte partitions: refine {all bytes} by every class the NFA uses. */
  uint32_t n_used = 0;
  for (uint32_t c = 0; c < b->n_classes; c++) class_map[c] = -1;
  for (uint32_t e = 0; e < m->n_edges; e++) {
    const int32_t l = m->e_label[e];
    if (l >= 0 && class_map[l] < 0) class_map[l] = (int32_t)n_used++;
  }
  /* Partitions as byte sets, each split by every class into its part inside and outside. */
  weir__bset parts[256];
  uint32_t n_part = 1;
  memset(&parts[0], 0xFF, sizeof parts[0]);
  for (uint32_t c = 0; c < b->n_classes; c++) {
    if (class_map[c] < 0) continue;
    const weir__bset *cs = &b->classes[c];
    const uint32_t n_before = n_part;
    for (uint32_t p = 0; p < n_before; p++) {
      weir__bset in, out_;
      uint64_t any_in = 0, any_out = 0;
      for (int w = 0; w < 4; w++) {
        in.w[w] = parts[p].w[w] & cs->w[w];
        out_.w[w] = parts[p].w[w] & ~cs->w[w];
        any_in |= in.w[w];
        any_out |= out_.w[w];
      }
      if (!any_in || !any_out) continue;
      parts[p] = out_;
      parts[n_part++] = in;
    }
  }
  for (uint32_t p = 0; p < n_part; p++)
    for (int w = 0; w < 4; w++)
      for (uint64_t bits = parts[p].w[w]; bits; bits &= bits - 1)
        out->part[w * 64 + __builtin_ctzll(bits)] = (uint8_t)p;
  out->n_part = n_part;
  class_parts = malloc(((size_t)n_used + 1) * sizeof *class_parts);
  class_nparts = calloc((size_t)n_used + 1, sizeof *class_nparts);
  if (!class_parts || !class_nparts) goto free_all;
  for (uint32_t c = 0; c < b->n_classes; c++) {
    if (class_map[c] < 0) continue;
    const uint32_t u = (uint32_t)class_map[c];
    for (uint32_t p = 0; p < n_part; p++) /* a class covers whole partitions or none */
      if ((parts[p].w[0] & b->classes[c].w[0]) | (parts[p].w[1] & b->classes[c].w[1]) |
          (parts[p].w[2] & b->classes[c].w[2]) | (parts[p].w[3] & b->classes[c].w[3]))
        class_parts[u][class_nparts[u]++] = (uint16_t)p;
  }
  uint32_t start = 0, id;
  uint32_t cn = closure(&d, &start, 1);
  if (set_lookup(&t, d.out, cn, &id) < 0) goto free_all;
  size_t trans_cap = 0;
  for (uint32_t i = 0; i < t.n; i++) {
    if (weir__gb_over_time(b)) {
      rc = WEIR_E_TIMEOUT;
      goto free_all;
    }
    /* Grow the per-state arrays to cover every state made so far. */
    if ((size_t)t.n * n_part > trans_cap) {
      size_t cap = trans_cap ? trans_cap : 256 * (size_t)n_part;
      while (cap < (size_t)t.n * n_part) cap *= 2;
      int32_t *tr = realloc(out->trans, cap * sizeof *tr);
      if (!tr) goto free_all;
      out->trans = tr;
      uint8_t *acc = realloc(out->accept, cap / n_part + 1);
      if (!acc) goto free_all;
      out->accept = acc;
      trans_cap = cap;
    }
    for (size_t k = (size_t)i * n_part; k < (size_t)(i + 1) * n_part; k++) out->trans[k] = -1;
    const uint32_t *set = t.list + t.first[i];
    const uint32_t set_len = t.len[i];
    out->accept[i] = 0;
    n_pairs = 0;
    for (uint32_t k = 0; k < set_len; k++) {
      const uint32_t q = set[k];
      if (q == 1) out->accept[i] = 1;
      for (uint32_t a = d.adj_first[q]; a < d.adj_first[q + 1]; a++) {
        const uint32_t e = d.adj[a];
        const int32_t l = m->e_label[e];
        if (l == EPS) continue;
        const uint32_t need = l >= 0 ? class_nparts[class_map[l]] : 1;
        if (n_pairs + need > cap_pairs) {
          size_t cap = cap_pairs ? cap_pairs * 2 : 1024;
          while (cap < n_pairs + need) cap *= 2;
          pair *p = realloc(pairs, cap * sizeof *p);
          if (!p) goto free_all;
          pairs = p;
          cap_pairs = cap;
        }
        if (l >= 0) {
          const uint32_t u = (uint32_t)class_map[l];
          for (uint32_t j = 0; j < class_nparts[u]; j++)
            pairs[n_pairs++] = (pair){class_parts[u][j], m->e_to[e]};
        } else {
          pairs[n_pairs++] = (pair){256 + REF_RULE(l), m->e_to[e]};
        }
      }
    }
    /* Group by key: a counting sort on the byte partitions (at most 256), then the few rule
     * symbols sorted at the end. */
    if (n_pairs > cap_sorted) {
      pair *ns2 = realloc(sorted, cap_pairs * sizeof *ns2);
      if (!ns2) goto free_all;
      sorted = ns2;
      cap_sorted = cap_pairs;
    }
    {
      size_t at[258] = {0};
      for (size_t k = 0; k < n_pairs; k++) at[(pairs[k].key < 256 ? pairs[k].key : 256) + 1]++;
      for (int k = 0; k < 257; k++) at[k + 1] += at[k];
      const size_t n_bytes_pairs = at[256];
      for (size_t k = 0; k < n_pairs; k++) sorted[at[pairs[k].key < 256 ? pairs[k].key : 256]++] = pairs[k];
      if (n_pairs > n_bytes_pairs)
        qsort(sorted + n_bytes_pairs, n_pairs - n_bytes_pairs, sizeof *sorted, cmp_pair);
      pair *swap = pairs;
      pairs = sorted;
      sorted = swap;
      size_t tc = cap_pairs;
      cap_pairs = cap_sorted;
      cap_sorted = tc;
    }
    for (size_t a = 0; a < n_pairs;) {
      size_t z = a;
      uint32_t ns = 0;
      while (z < n_pairs && pairs[z].key == pairs[a].key) seeds[ns++] = pairs[z++].to;
      cn = closure(&d, seeds, ns);
      const int added = set_lookup(&t, d.out, cn, &id);
      if (added < 0) goto free_all;
      /* The states' NFA sets bound the time and memory of the construction as much as their
       * number: a few dozen NFA states per DFA state on average is the budget. */
      if (t.n > max_states || t.n_list > (size_t)max_states * 40 + 4096) {
        rc = WEIR_E_RANGE;
        goto free_all;
      }
      if (pairs[a].key < 256) {
        out->trans[(size_t)i * n_part + pairs[a].key] = (int32_t)id;
      } else {
        if (out->n_refs == out->cap_refs) {
          uint32_t cap = out->cap_refs ? out->cap_refs * 2 : 64;
          int failed = 0;
          out->r_state = grow_or_keep(out->r_state, cap * sizeof *out->r_state, &failed);
          out->r_rule = grow_or_keep(out->r_rule, cap * sizeof *out->r_rule, &failed);
          out->r_target = grow_or_keep(out->r_target, cap * sizeof *out->r_target, &failed);
          if (failed) goto free_all;
          out->cap_refs = cap;
        }
        out->r_state[out->n_refs] = i;
        out->r_rule[out->n_refs] = pairs[a].key - 256;
        out->r_target[out->n_refs++] = id;
      }
      a = z;
    }
  }
  out->n_states = t.n;
  rc = 0;
free_all:
  if (rc) dfa_free(out);
  free(d.adj_first);
  free(d.adj);
  free(d.stamp);
  free(d.stack);
  free(d.out);
  free(d.tmp);
  free(seeds);
  free(pairs);
  free(sorted);
  free(class_parts);
  free(class_nparts);
  free(class_map);
  set_table_free(&t);
  return rc;
}

/* ---- assembly and trimming ------------------------------------------------------------------ */

static void grammar_free(weir_grammar *g) {
  if (!g) return;
  free(g->rule_start);
  free(g->rule_nullable);
  free(g->rule_part);
  free(g->rule_npart);
  free(g->pos_rule);
  free(g->pos_trans);
  free(g->pos_flags);
  free(g->pos_ref);
  free(g->refs);
  free(g->trans);
  free(g);
}

weir_grammar *weir_grammar_retain(weir_grammar *g) {
  atomic_fetch_add(&g->refcount, 1);
  return g;
}

void weir_grammar_release(weir_grammar *g) {
  if (g && atomic_fetch_sub(&g->refcount, 1) == 1) grammar_free(g);
}

uint32_t weir_grammar_num_rules(const weir_grammar *g) { return g->n_rules; }
uint32_t weir_grammar_num_positions(const weir_grammar *g) { return g->n_pos; }

/* Marks positions from which an accepting position is reachable (through bytes and through
 * rule edges to productive rules), and returns which rules are productive. */
static int trim(weir_grammar *g) {
  int rc = WEIR_E_NOMEM;
  const uint32_t np = g->n_pos, nr = g->n_rules;
  uint8_t *prod = calloc(nr, 1), *live = calloc(np, 1);
  uint32_t *stack = malloc((size_t)np * sizeof *stack), *stamp = calloc(np, sizeof *stamp);
  uint32_t *rfirst = NULL, *radj = NULL;
  if (!prod || !live || !stack || !stamp) goto free_all;
  uint32_t cur = 0;
  /* Productive rules: a fixpoint of searches from each rule's start. */
  for (int changed = 1; changed;) {
    changed = 0;
    for (uint32_t r = 0; r < nr; r++) {
      if (prod[r]) continue;
      cur++;
      uint32_t sp = 0;
      stack[sp++] = g->rule_start[r];
      stamp[g->rule_start[r]] = cur;
      while (sp && !prod[r]) {
        const uint32_t p = stack[--sp];
        if (g->pos_flags[p] & WEIR__POS_ACCEPT) {
          prod[r] = 1;
          changed = 1;
          break;
        }
        const int32_t *row = g->trans + g->pos_trans[p];
        for (uint32_t x = 0; x < g->rule_npart[g->pos_rule[p]]; x++) {
          const int32_t t = row[x];
          if (t >= 0 && stamp[t] != cur) {
            stamp[t] = cur;
            stack[sp++] = (uint32_t)t;
          }
        }
        for (uint32_t k = g->pos_ref[p]; k < g->pos_ref[p + 1]; k++)
          if (prod[g->refs[k].rule] && stamp[g->refs[k].target] != cur) {
            stamp[g->refs[k].target] = cur;
            stack[sp++] = g->refs[k].target;
          }
      }
    }
  }
  if (!prod[0]) {
    rc = WEIR_E_INVAL;
    goto free_all;
  }
  /* Live positions: reverse search from the accepting ones. */
  rfirst = calloc((size_t)np + 1, sizeof *rfirst);
  if (!rfirst) goto free_all;
  size_t n_edges = 0;
  for (uint32_t p = 0; p < np; p++) {
    const int32_t *row = g->trans + g->pos_trans[p];
    for (uint32_t x = 0; x < g->rule_npart[g->pos_rule[p]]; x++)
      if (row[x] >= 0) rfirst[row[x] + 1]++, n_edges++;
    for (uint32_t k = g->pos_ref[p]; k < g->pos_ref[p + 1]; k++)
      if (prod[g->refs[k].rule]) rfirst[g->refs[k].target + 1]++, n_edges++;
  }
  for (uint32_t p = 0; p < np; p++) rfirst[p + 1] += rfirst[p];
  radj = malloc((n_edges + 1) * sizeof *radj);
  uint32_t *fill = malloc((size_t)np * sizeof *fill);
  if (!radj || !fill) {
    free(fill);
    goto free_all;
  }
  memcpy(fill, rfirst, (size_t)np * sizeof *fill);
  for (uint32_t p = 0; p < np; p++) {
    const int32_t *row = g->trans + g->pos_trans[p];
    for (uint32_t x = 0; x < g->rule_npart[g->pos_rule[p]]; x++)
      if (row[x] >= 0) radj[fill[row[x]]++] = p;
    for (uint32_t k = g->pos_ref[p]; k < g->pos_ref[p + 1]; k++)
      if (prod[g->refs[k].rule]) radj[fill[g->refs[k].target]++] = p;
  }
  free(fill);
  uint32_t sp = 0;
  for (uint32_t p = 0; p < np; p++)
    if (g->pos_flags[p] & WEIR__POS_ACCEPT) {
      live[p] = 1;
      stack[sp++] = p;
    }
  while (sp) {
    const uint32_t p = stack[--sp];
    for (uint32_t k = rfirst[p]; k < rfirst[p + 1]; k++)
      if (!live[radj[k]]) {
        live[radj[k]] = 1;
        stack[sp++] = radj[k];
      }
  }
  /* Cut what is dead: transitions into dead positions, rule edges to unproductive rules or
   * dead targets. */
  for (uint32_t p = 0; p < np; p++) {
    for (uint32_t k = 0; k < g->rule_npart[g->pos_rule[p]]; k++) {
      int32_t *t = &g->trans[g->pos_trans[p] + k];
      if (*t >= 0 && !live[*t]) *t = -1;
    }
  }
  uint32_t w = 0;
  for (uint32_t p = 0; p < np; p++) {
    const uint32_t a = g->pos_ref[p], z = g->pos_ref[p + 1];
    g->pos_ref[p] = w;
    for (uint32_t k = a; k < z; k++)
      if (prod[g->refs[k].rule] && live[g->refs[k].target]) g->refs[w++] = g->refs[k];
  }
  g->pos_ref[np] = w;
  for (uint32_t p = 0; p < np; p++) {
    g->pos_flags[p] &= (uint8_t)~WEIR__POS_SCAN;
    const int32_t *row = g->trans + g->pos_trans[p];
    for (uint32_t x = 0; x < g->rule_npart[g->pos_rule[p]]; x++)
      if (row[x] >= 0) {
        g->pos_flags[p] |= WEIR__POS_SCAN;
        break;
      }
  }
  /* Nullable rules: the start reaches acceptance through rule edges to nullable rules. */
  for (int changed = 1; changed;) {
    changed = 0;
    for (uint32_t r = 0; r < nr; r++) {
      if (g->rule_nullable[r] || !prod[r]) continue;
      cur++;
      sp = 0;
      stack[sp++] = g->rule_start[r];
      stamp[g->rule_start[r]] = cur;
      while (sp) {
        const uint32_t p = stack[--sp];
        if (g->pos_flags[p] & WEIR__POS_ACCEPT) {
          g->rule_nullable[r] = 1;
          changed = 1;
          break;
        }
        for (uint32_t k = g->pos_ref[p]; k < g->pos_ref[p + 1]; k++)
          if (g->rule_nullable[g->refs[k].rule] && stamp[g->refs[k].target] != cur) {
            stamp[g->refs[k].target] = cur;
            stack[sp++] = g->refs[k].target;
          }
      }
    }
  }
  rc = 0;
free_all:
  free(prod);
  free(live);
  free(stack);
  free(stamp);
  free(rfirst);
  free(radj);
  return rc;
}

/* (Re)computes the per-rule facts for the builder's current rules. */
static int analyze(cctx *c) {
  const uint32_t nr = c->b->n_rules;
  free(c->on_cycle);
  free(c->size);
  free(c->size_state);
  free(c->inl);
  c->on_cycle = calloc(nr + 1, sizeof *c->on_cycle);
  c->size = calloc(nr + 1, sizeof *c->size);
  c->size_state = calloc(nr + 1, 1);
  c->inl = calloc(nr + 1, 1);
  if (!c->on_cycle || !c->size || !c->size_state || !c->inl) return WEIR_E_NOMEM;
  return find_cycles(c->b, c->on_cycle);
}

/* A repetition with a bounded count copies its body once per repetition into the automaton
 * (an array of up to 20 objects: 20 objects' worth of states, and 20 times the token classes
 * to compute). A large body repeated at least three times goes into a rule of its own,
 * referenced by every copy. Returns the number of bodies hoisted, or WEIR_E_NOMEM. */
static int hoist_repeats(cctx *c) {
  weir__gb *b = c->b;
  const uint32_t n = b->n_nodes;
  int hoisted = 0;
  for (uint32_t i = 0; i < n; i++) {
    const weir__rx x = b->nodes[i];
    if (x.kind != WEIR__RX_REPEAT) continue;
    const uint64_t copies = x.max == WEIR__RX_INF ? (uint64_t)x.min + 1 : x.max;
    if (copies < 3) continue;
    /* In a sequence (separator, item, whitespace) only the largest part moves: a rule that
     * ended in optional whitespace would make every token starting with a space uncertain. */
    int64_t kid = -1; /* the kid of the sequence to move, or -1 for the whole body */
    if (b->nodes[x.a].kind == WEIR__RX_SEQ) {
      const weir__rx q = b->nodes[x.a];
      kid = q.a;
      for (uint32_t k = q.a; k < q.a + q.n; k++)
        if (node_size(c, b->kids[k]) > node_size(c, b->kids[kid])) kid = k;
    }
    const uint32_t body = kid >= 0 ? b->kids[kid] : x.a;
    if (b->nodes[body].kind == WEIR__RX_REF || node_size(c, body) < 256) continue;
    const uint32_t r = weir__gb_new_rule(b, "repeated");
    if (r == UINT32_MAX) return WEIR_E_NOMEM;
    weir__gb_define(b, r, body);
    b->rules[r].noinline = 1;
    const uint32_t ref = weir__rx_ref(b, r);
    if (b->status) return WEIR_E_NOMEM;
    if (kid >= 0) b->kids[kid] = ref;
    else b->nodes[i].a = ref;
    hoisted++;
  }
  return hoisted;
}

/* One attempt at compiling with a given inlining budget. WEIR_E_RANGE: too many positions
 * (the caller retries with less inlining). */
static int compile_once(weir__gb *b, uint32_t start, uint64_t inline_max, weir_grammar **out,
                        char *err, size_t errlen) {
  int rc = WEIR_E_NOMEM;
  cctx c = {.b = b, .inline_max = inline_max};
  uint32_t *keep_order = NULL;
  int32_t *new_id = NULL;
  dfa *dfas = NULL;
  nfa m = {0};
  weir_grammar *g = NULL;
  if (analyze(&c)) goto free_all;
  /* Hoisting adds rules: analyze again with them. */
  const int hoisted = hoist_repeats(&c);
  if (hoisted < 0 || (hoisted && analyze(&c))) goto free_all;
  const uint32_t nr = b->n_rules;
  keep_order = malloc((size_t)nr * sizeof *keep_order);
  new_id = malloc((size_t)nr * sizeof *new_id);
  dfas = calloc(nr, sizeof *dfas);
  if (!keep_order || !new_id || !dfas) goto free_all;
  for (uint32_t r = 0; r < nr; r++) {
    if (b->rules[r].body == UINT32_MAX) {
      snprintf(err, errlen, "rule '%s' is used but never defined", b->rules[r].name);
      rc = WEIR_E_INVAL;
      goto free_all;
    }
  }
  for (uint32_t r = 0; r < nr; r++)
    c.inl[r] = r != start && !c.on_cycle[r] && !b->rules[r].noinline &&
               rule_size(&c, r) <= inline_max;
  c.inl[start] = 0;
  for (uint32_t r = 0; r < nr; r++) new_id[r] = -1;
  uint32_t n_keep = 0;
  keep_order[n_keep++] = start;
  new_id[start] = 0;
  uint32_t total_states = 0;
  for (uint32_t k = 0; k < n_keep; k++) {
    const uint32_t r = keep_order[k];
    m.n_states = 0;
    m.n_edges = 0;
    m.failed = 0;
    m.max_states = b->limits.max_nfa_states;
    nfa_state(&m); /* 0: start */
    nfa_state(&m); /* 1: final */
    c.inlined_here = 0;
    build(&c, &m, b->rules[r].body, 0, 1);
    if (m.failed == 1) goto free_all;
    const uint32_t budget = b->limits.max_dfa_states - total_states;
    rc = m.failed == 2 ? WEIR_E_RANGE : determinize(b, &m, budget, &dfas[k]);
    if (rc == WEIR_E_TIMEOUT) {
      snprintf(err, errlen, WEIR__GB_TIME_MSG, b->limits.max_compile_ms);
      rc = WEIR_E_INVAL;
      goto free_all;
    }
    if (rc == WEIR_E_RANGE && !c.inlined_here) {
      /* Too large by itself: less inlining elsewhere would not shrink this rule. */
      snprintf(err, errlen, "the constraint is too large: over %u automaton states; simplify "
               "the schema, regex or grammar", rc == WEIR_E_RANGE && m.failed == 2
               ? b->limits.max_nfa_states : b->limits.max_dfa_states);
      rc = WEIR_E_INVAL;
    }
    if (rc) goto free_all; /* WEIR_E_RANGE: the caller retries with less inlining */
    rc = WEIR_E_NOMEM;
    total_states += dfas[k].n_states;
    for (uint32_t e = 0; e < dfas[k].n_refs; e++) {
      const uint32_t rr = dfas[k].r_rule[e];
      if (new_id[rr] < 0) {
        new_id[rr] = (int32_t)n_keep;
        keep_order[n_keep++] = rr;
      }
    }
  }

  g = calloc(1, sizeof *g);
  if (!g) goto free_all;
  atomic_init(&g->refcount, 1);
  g->n_rules = n_keep;
  g->n_pos = total_states;
  size_t n_trans = 0, n_refs = 0;
  for (uint32_t k = 0; k < n_keep; k++) {
    n_trans += (size_t)dfas[k].n_states * dfas[k].n_part;
    n_refs += dfas[k].n_refs;
  }
  g->rule_start = malloc(n_keep * sizeof *g->rule_start);
  g->rule_nullable = calloc(n_keep, 1);
  g->rule_part = malloc((size_t)n_keep * 256);
  g->rule_npart = malloc((size_t)n_keep * sizeof *g->rule_npart);
  g->pos_rule = malloc((size_t)total_states * sizeof *g->pos_rule);
  g->pos_trans = malloc((size_t)total_states * sizeof *g->pos_trans);
  g->pos_flags = calloc(total_states, 1);
  g->pos_ref = calloc((size_t)total_states + 1, sizeof *g->pos_ref);
  g->refs = malloc((n_refs + 1) * sizeof *g->refs);
  g->trans = malloc((n_trans + 1) * sizeof *g->trans);
  if (!g->rule_start || !g->rule_nullable || !g->rule_part || !g->rule_npart || !g->pos_rule || !g->pos_trans ||
      !g->pos_flags || !g->pos_ref || !g->refs || !g->trans)
    goto free_all;
  g->bytes = n_keep * (sizeof *g->rule_start + 1 + 256) +
             (size_t)total_states * (sizeof *g->pos_rule + sizeof *g->pos_trans + 1 +
                                     sizeof *g->pos_ref) +
             n_refs * sizeof *g->refs + n_trans * sizeof *g->trans;
  uint32_t base = 0;
  size_t tbase = 0, rbase = 0;
  for (uint32_t k = 0; k < n_keep; k++) {
    const dfa *d = &dfas[k];
    g->rule_start[k] = base;
    memcpy(g->rule_part + (size_t)k * 256, d->part, 256);
    g->rule_npart[k] = (uint16_t)d->n_part;
    for (uint32_t s = 0; s < d->n_states; s++) {
      const uint32_t p = base + s;
      g->pos_rule[p] = k;
      g->pos_trans[p] = (uint32_t)(tbase + (size_t)s * d->n_part);
      g->pos_flags[p] = d->accept[s] ? WEIR__POS_ACCEPT : 0;
      for (uint32_t x = 0; x < d->n_part; x++) {
        const int32_t t = d->trans[(size_t)s * d->n_part + x];
        g->trans[tbase + (size_t)s * d->n_part + x] = t < 0 ? -1 : (int32_t)(base + (uint32_t)t);
      }
    }
    /* Ref edges are in state order, so the CSR offsets fill in one pass. */
    for (uint32_t e = 0; e < d->n_refs; e++) {
      const uint32_t p = base + d->r_state[e];
      g->refs[rbase + e] = (weir__ref_edge){(uint32_t)new_id[d->r_rule[e]], base + d->r_target[e]};
      g->pos_ref[p + 1]++;
    }
    base += d->n_states;
    tbase += (size_t)d->n_states * d->n_part;
    rbase += d->n_refs;
  }
  for (uint32_t p = 0; p < total_states; p++) g->pos_ref[p + 1] += g->pos_ref[p];
  g->start_pos = g->rule_start[0];
  rc = trim(g);
  if (rc == WEIR_E_INVAL) {
    snprintf(err, errlen, "the constraint can produce nothing: no text satisfies it");
    goto free_all;
  }
  if (rc) goto free_all;
  *out = g;
  g = NULL;
free_all:
  if (g) grammar_free(g);
  for (uint32_t k = 0; dfas && k < b->n_rules; k++) dfa_free(&dfas[k]);
  free(dfas);
  free(m.e_from);
  free(m.e_to);
  free(m.e_label);
  free(c.on_cycle);
  free(c.size);
  free(c.size_state);
  free(c.inl);
  free(keep_order);
  free(new_id);
  return rc;
}

int weir__gb_finish(weir__gb *b, uint32_t start, weir_grammar **out, char *err, size_t errlen) {
  *out = NULL;
  if (b->status) {
    snprintf(err, errlen, "%s", b->err);
    return b->status;
  }
  if (start >= b->n_rules) {
    snprintf(err, errlen, "no start rule");
    return WEIR_E_INVAL;
  }
  /* Less inlining makes fewer, smaller automata: retry when the positions overflow. */
  for (uint64_t inline_max = 1u << 17;; inline_max /= 8) {
    int rc = compile_once(b, start, inline_max, out, err, errlen);
    if (rc != WEIR_E_RANGE) {
      if (rc == WEIR_E_NOMEM) snprintf(err, errlen, "out of memory compiling the constraint");
      return rc;
    }
    if (inline_max < 8) {
      snprintf(err, errlen, "the constraint is too large: over %u automaton states; simplify "
               "the schema, regex or grammar", b->limits.max_dfa_states);
      return WEIR_E_INVAL;
    }
  }
}
