/* The grammar builder: code point sets, regular-expression nodes over bytes and rules, and
 * the lowering of code point sets to UTF-8 byte sequences. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/internal.h"
#include "weir/status.h"

/* ---- code point sets --------------------------------------------------------------------- */

static int cpset_reserve(weir__cpset *s, uint32_t n) {
  if (n <= s->cap) return 0;
  uint32_t cap = s->cap ? s->cap * 2 : 8;
  while (cap < n) cap *= 2;
  void *r = realloc(s->r, (size_t)cap * sizeof *s->r);
  if (!r) return WEIR_E_NOMEM;
  s->r = r;
  s->cap = cap;
  return 0;
}

int weir__cpset_add(weir__cpset *s, uint32_t lo, uint32_t hi) {
  if (lo > hi) return 0;
  if (hi > 0x10FFFF) hi = 0x10FFFF;
  /* Find the first range that ends at or after lo - 1 (may merge). */
  uint32_t i = 0;
  while (i < s->n && s->r[i][1] + 1 < lo) i++;
  uint32_t j = i;
  while (j < s->n && s->r[j][0] <= hi + 1) {
    if (s->r[j][0] < lo) lo = s->r[j][0];
    if (s->r[j][1] > hi) hi = s->r[j][1];
    j++;
  }
  if (j == i) { /* insert */
    if (cpset_reserve(s, s->n + 1)) return WEIR_E_NOMEM;
    memmove(s->r + i + 1, s->r + i, (size_t)(s->n - i) * sizeof *s->r);
    s->n++;
  } else if (j > i + 1) { /* merged several: keep one */
    memmove(s->r + i + 1, s->r + j, (size_t)(s->n - j) * sizeof *s->r);
    s->n -= j - i - 1;
  }
  s->r[i][0] = lo;
  s->r[i][1] = hi;
  return 0;
}

int weir__cpset_add_set(weir__cpset *s, const weir__cpset *o) {
  for (uint32_t i = 0; i < o->n; i++)
    if (weir__cpset_add(s, o->r[i][0], o->r[i][1])) return WEIR_E_NOMEM;
  return 0;
}

int weir__cpset_negate(const weir__cpset *s, weir__cpset *out) {
  uint32_t next = 0;
  out->n = 0;
  for (uint32_t i = 0; i < s->n; i++) {
    if (s->r[i][0] > next && weir__cpset_add(out, next, s->r[i][0] - 1)) return WEIR_E_NOMEM;
    next = s->r[i][1] + 1;
  }
  if (next <= 0x10FFFF && weir__cpset_add(out, next, 0x10FFFF)) return WEIR_E_NOMEM;
  return 0;
}

void weir__cpset_free(weir__cpset *s) {
  free(s->r);
  memset(s, 0, sizeof *s);
}

int weir__cpset_has(const weir__cpset *s, uint32_t cp) {
  for (uint32_t i = 0; i < s->n; i++)
    if (cp >= s->r[i][0] && cp <= s->r[i][1]) return 1;
  return 0;
}

/* ---- builder ------------------------------------------------------------------------------ */

int weir__gb_init(weir__gb *b, const weir_grammar_limits *limits) {
  memset(b, 0, sizeof *b);
  if (limits) b->limits = *limits;
  else weir_grammar_limits_default(&b->limits);
  b->cap_nodes = 64;
  b->nodes = malloc(b->cap_nodes * sizeof *b->nodes);
  if (!b->nodes) return WEIR_E_NOMEM;
  b->nodes[0] = (weir__rx){.kind = WEIR__RX_NONE};
  b->nodes[1] = (weir__rx){.kind = WEIR__RX_EMPTY};
  b->n_nodes = 2;
  if (b->limits.max_compile_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    b->deadline_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                     (uint64_t)b->limits.max_compile_ms * 1000000ull;
  }
  return 0;
}

int weir__gb_over_time(weir__gb *b) {
  if (!b->deadline_ns || (++b->ticks & 1023)) return 0;
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  if ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec < b->deadline_ns) return 0;
  weir__gb_fail(b, WEIR_E_INVAL, WEIR__GB_TIME_MSG, b->limits.max_compile_ms);
  return 1;
}

void weir__gb_free(weir__gb *b) {
  for (uint32_t i = 0; i < b->n_rules; i++) free(b->rules[i].name);
  free(b->rules);
  free(b->nodes);
  free(b->kids);
  free(b->classes);
  memset(b, 0, sizeof *b);
}

uint32_t weir__gb_fail(weir__gb *b, int status, const char *fmt, ...) {
  if (b->status) return 0;
  b->status = status;
  if (status == WEIR_E_NOMEM && !fmt) {
    snprintf(b->err, sizeof b->err, "out of memory");
    return 0;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->err, sizeof b->err, fmt, ap);
  va_end(ap);
  return 0;
}

static uint32_t nomem(weir__gb *b) { return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory"); }

static uint32_t new_node(weir__gb *b, weir__rx n) {
  if (b->status || weir__gb_over_time(b)) return 0;
  if (b->n_nodes == b->cap_nodes) {
    if (b->n_nodes >= b->limits.max_nfa_states)
      return weir__gb_fail(b, WEIR_E_INVAL, "the constraint is too large (over %u expression "
                           "nodes); simplify it", b->limits.max_nfa_states);
    void *p = realloc(b->nodes, (size_t)b->cap_nodes * 2 * sizeof *b->nodes);
    if (!p) return nomem(b);
    b->nodes = p;
    b->cap_nodes *= 2;
  }
  b->nodes[b->n_nodes] = n;
  return b->n_nodes++;
}

uint32_t weir__rx_none(void) { return 0; }
uint32_t weir__rx_empty(void) { return 1; }

uint32_t weir__rx_class(weir__gb *b, const weir__bset *s) {
  if (b->status) return 0;
  if (!(s->w[0] | s->w[1] | s->w[2] | s->w[3])) return 0;
  /* Interned: the determinizer partitions bytes by class, so fewer classes is faster. A
   * one-byte set (every byte of a literal) is found in a table: a linear search per byte made
   * a long literal (a schema's property name) cost its length times the number of classes.
   * Other sets are searched linearly, a few hundred at most in practice. */
  const int words = (s->w[0] != 0) + (s->w[1] != 0) + (s->w[2] != 0) + (s->w[3] != 0);
  int single = -1;
  for (int i = 0; words == 1 && i < 4; i++)
    if (s->w[i] && !(s->w[i] & (s->w[i] - 1))) single = i * 64 + __builtin_ctzll(s->w[i]);
  uint32_t c = b->n_classes;
  if (single >= 0) {
    if (b->byte_class[single]) c = b->byte_class[single] - 1;
  } else {
    for (c = 0; c < b->n_classes; c++) {
      const weir__bset *k = &b->classes[c];
      if (k->w[0] == s->w[0] && k->w[1] == s->w[1] && k->w[2] == s->w[2] && k->w[3] == s->w[3])
        break;
    }
  }
  if (c == b->n_classes) {
    if (b->n_classes == b->cap_classes) {
      uint32_t cap = b->cap_classes ? b->cap_classes * 2 : 32;
      void *p = realloc(b->classes, (size_t)cap * sizeof *b->classes);
      if (!p) return nomem(b);
      b->classes = p;
      b->cap_classes = cap;
    }
    if (single >= 0) b->byte_class[single] = b->n_classes + 1;
    b->classes[b->n_classes++] = *s;
  }
  return new_node(b, (weir__rx){.kind = WEIR__RX_CLASS, .a = c});
}

uint32_t weir__rx_byte(weir__gb *b, uint8_t c) {
  weir__bset s = {{0}};
  weir__bset_add(&s, c);
  return weir__rx_class(b, &s);
}

uint32_t weir__rx_range(weir__gb *b, uint8_t lo, uint8_t hi) {
  weir__bset s = {{0}};
  for (unsigned c = lo; c <= hi; c++) weir__bset_add(&s, c);
  return weir__rx_class(b, &s);
}

static int push_kids(weir__gb *b, const uint32_t *kids, uint32_t n, uint32_t *first) {
  if (b->n_kids + n > b->cap_kids) {
    uint32_t cap = b->cap_kids ? b->cap_kids : 64;
    while (cap < b->n_kids + n) cap *= 2;
    void *p = realloc(b->kids, (size_t)cap * sizeof *b->kids);
    if (!p) return WEIR_E_NOMEM;
    b->kids = p;
    b->cap_kids = cap;
  }
  memcpy(b->kids + b->n_kids, kids, (size_t)n * sizeof *kids);
  *first = b->n_kids;
  b->n_kids += n;
  return 0;
}

/* SEQ and ALT drop the neutral element, collapse on the absorbing one and unwrap a single
 * kid. Nested nodes are kept as they are: the compiler looks at that structure (it moves a
 * repeated item, not its separator, into a rule of its own). */
static uint32_t nary(weir__gb *b, int kind, const uint32_t *kids, uint32_t n) {
  if (b->status) return 0;
  uint32_t stack[64];
  uint32_t *buf = n <= 64 ? stack : NULL;
  const uint32_t total = n;
  if (total > 64) {
    buf = malloc((size_t)total * sizeof *buf);
    if (!buf) return nomem(b);
  }
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t id = kids[i];
    const weir__rx *k = &b->nodes[id];
    if (kind == WEIR__RX_SEQ) {
      if (k->kind == WEIR__RX_NONE) {
        m = UINT32_MAX;
        break;
      }
      if (k->kind == WEIR__RX_EMPTY) continue;
    } else if (k->kind == WEIR__RX_NONE) {
      continue;
    }
    buf[m++] = id;
  }
  uint32_t r;
  if (m == UINT32_MAX) r = 0;
  else if (m == 0) r = kind == WEIR__RX_SEQ ? 1 : 0;
  else if (m == 1) r = buf[0];
  else {
    uint32_t first;
    if (push_kids(b, buf, m, &first)) r = nomem(b);
    else r = new_node(b, (weir__rx){.kind = (uint8_t)kind, .a = first, .n = m});
  }
  if (buf != stack) free(buf);
  return r;
}

uint32_t weir__rx_seq(weir__gb *b, const uint32_t *kids, uint32_t n) {
  return nary(b, WEIR__RX_SEQ, kids, n);
}
uint32_t weir__rx_alt(weir__gb *b, const uint32_t *kids, uint32_t n) {
  return nary(b, WEIR__RX_ALT, kids, n);
}
uint32_t weir__rx_seq2(weir__gb *b, uint32_t x, uint32_t y) {
  uint32_t k[2] = {x, y};
  return nary(b, WEIR__RX_SEQ, k, 2);
}
uint32_t weir__rx_seq3(weir__gb *b, uint32_t x, uint32_t y, uint32_t z) {
  uint32_t k[3] = {x, y, z};
  return nary(b, WEIR__RX_SEQ, k, 3);
}
uint32_t weir__rx_alt2(weir__gb *b, uint32_t x, uint32_t y) {
  uint32_t k[2] = {x, y};
  return nary(b, WEIR__RX_ALT, k, 2);
}

uint32_t weir__rx_lit(weir__gb *b, const char *s, size_t len) {
  if (len == 0) return 1;
  uint32_t stack[64];
  uint32_t *k = len <= 64 ? stack : malloc(len * sizeof *k);
  if (!k) return nomem(b);
  for (size_t i = 0; i < len; i++) k[i] = weir__rx_byte(b, (uint8_t)s[i]);
  uint32_t r = weir__rx_seq(b, k, (uint32_t)len);
  if (k != stack) free(k);
  return r;
}

uint32_t weir__rx_str(weir__gb *b, const char *s) { return weir__rx_lit(b, s, strlen(s)); }

uint32_t weir__rx_repeat(weir__gb *b, uint32_t x, uint32_t min, uint32_t max) {
  if (b->status) return 0;
  if (max != WEIR__RX_INF && min > max) return 0;
  if ((min != WEIR__RX_INF && min > b->limits.max_repeat) ||
      (max != WEIR__RX_INF && max > b->limits.max_repeat))
    return weir__gb_fail(b, WEIR_E_INVAL, "a repetition bound of %u is over the limit of %u",
                         max != WEIR__RX_INF && max > min ? max : min, b->limits.max_repeat);
  const weir__rx *k = &b->nodes[x];
  if (k->kind == WEIR__RX_NONE) return min == 0 ? 1 : 0;
  if (k->kind == WEIR__RX_EMPTY || max == 0) return 1;
  if (min == 1 && max == 1) return x;
  /* A repetition of a repetition that means the same as one: (x*)* (x+)* (x*)+ (x?)* (x*)?
   * (x+)? (x?)+ are x*, (x+)+ is x+, (x?)? is x?. Stacked stars would otherwise nest
   * epsilon loops that every closure of the determinizer walks. */
  if (k->kind == WEIR__RX_REPEAT && k->min <= 1 && min <= 1) {
    const int inner_open = k->max == WEIR__RX_INF, outer_open = max == WEIR__RX_INF;
    const int inner_opt = k->max == 1 || inner_open, outer_opt = max == 1 || outer_open;
    if ((inner_open || outer_open) && inner_opt && outer_opt)
      return new_node(b, (weir__rx){.kind = WEIR__RX_REPEAT, .a = k->a,
                                    .min = k->min && min ? 1 : 0, .max = WEIR__RX_INF});
    if (k->max == 1 && max == 1)
      return new_node(b, (weir__rx){.kind = WEIR__RX_REPEAT, .a = k->a, .min = 0, .max = 1});
  }
  return new_node(b, (weir__rx){.kind = WEIR__RX_REPEAT, .a = x, .min = min, .max = max});
}

uint32_t weir__rx_opt(weir__gb *b, uint32_t x) { return weir__rx_repeat(b, x, 0, 1); }
uint32_t weir__rx_star(weir__gb *b, uint32_t x) { return weir__rx_repeat(b, x, 0, WEIR__RX_INF); }

uint32_t weir__rx_ref(weir__gb *b, uint32_t rule) {
  if (rule >= b->n_rules) return 0;
  return new_node(b, (weir__rx){.kind = WEIR__RX_REF, .a = rule});
}

/* ---- UTF-8 -------------------------------------------------------------------------------- */

static int utf8_encode(uint32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (uint8_t)(0xC0 | (cp >> 6));
    out[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (uint8_t)(0xE0 | (cp >> 12));
    out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (uint8_t)(0xF0 | (cp >> 18));
  out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

typedef struct seqs {
  uint32_t *alts;
  uint32_t n, cap;
} seqs;

/* Appends the byte sequences of [lo, hi] (one encoded length, no surrogates) to out: split
 * until every byte position but the first differing one spans whole continuation ranges, so
 * each piece is one sequence of byte ranges. */
static void utf8_split(weir__gb *b, uint32_t lo, uint32_t hi, seqs *out) {
  if (b->status || lo > hi) return;
  static const uint32_t lens_max[] = {0x7F, 0x7FF, 0xFFFF};
  for (int i = 0; i < 3; i++)
    if (lo <= lens_max[i] && hi > lens_max[i]) {
      utf8_split(b, lo, lens_max[i], out);
      utf8_split(b, lens_max[i] + 1, hi, out);
      return;
    }
  if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates are not scalar values */
    if (lo < 0xD800) utf8_split(b, lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_split(b, 0xE000, hi, out);
    return;
  }
  uint8_t a[4], z[4];
  const int n = utf8_encode(lo, a);
  utf8_encode(hi, z);
  for (int i = 1; i < n; i++) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(b, lo, lo | m, out);
        utf8_split(b, (lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(b, lo, (hi & ~m) - 1, out);
        utf8_split(b, hi & ~m, hi, out);
        return;
      }
    }
  }
  uint32_t k[4];
  for (int i = 0; i < n; i++) k[i] = weir__rx_range(b, a[i], z[i]);
  uint32_t s = weir__rx_seq(b, k, (uint32_t)n);
  if (out->n == out->cap) {
    uint32_t cap = out->cap ? out->cap * 2 : 16;
    void *p = realloc(out->alts, cap * sizeof *out->alts);
    if (!p) {
      nomem(b);
      return;
    }
    out->alts = p;
    out->cap = cap;
  }
  out->alts[out->n++] = s;
}

uint32_t weir__rx_cpset(weir__gb *b, const weir__cpset *s) {
  if (b->status) return 0;
  seqs out = {0};
  /* ASCII members become one class rather than one alternative each. */
  weir__bset ascii = {{0}};
  for (uint32_t i = 0; i < s->n; i++) {
    uint32_t lo = s->r[i][0], hi = s->r[i][1];
    for (uint32_t c = lo; c <= hi && c < 0x80; c++) weir__bset_add(&ascii, c);
    if (hi >= 0x80) utf8_split(b, lo < 0x80 ? 0x80 : lo, hi, &out);
  }
  uint32_t first = weir__rx_class(b, &ascii);
  uint32_t r = first;
  if (out.n) {
    uint32_t *k = malloc((out.n + 1) * sizeof *k);
    if (!k) {
      free(out.alts);
      return nomem(b);
    }
    k[0] = first;
    memcpy(k + 1, out.alts, out.n * sizeof *k);
    r = weir__rx_alt(b, k, out.n + 1);
    free(k);
  }
  free(out.alts);
  return r;
}

uint32_t weir__rx_cprange(weir__gb *b, uint32_t lo, uint32_t hi) {
  weir__cpset s = {0};
  if (weir__cpset_add(&s, lo, hi)) return nomem(b);
  uint32_t r = weir__rx_cpset(b, &s);
  weir__cpset_free(&s);
  return r;
}

/* ---- rules -------------------------------------------------------------------------------- */

uint32_t weir__gb_rule(weir__gb *b, const char *name, size_t len) {
  if (b->status) return UINT32_MAX;
  for (uint32_t i = 0; i < b->n_rules; i++)
    if (strlen(b->rules[i].name) == len && !memcmp(b->rules[i].name, name, len)) return i;
  if (b->n_rules == b->cap_rules) {
    uint32_t cap = b->cap_rules ? b->cap_rules * 2 : 16;
    void *p = realloc(b->rules, cap * sizeof *b->rules);
    if (!p) {
      nomem(b);
      return UINT32_MAX;
    }
    b->rules = p;
    b->cap_rules = cap;
  }
  char *copy = malloc(len + 1);
  if (!copy) {
    nomem(b);
    return UINT32_MAX;
  }
  memcpy(copy, name, len);
  copy[len] = 0;
  b->rules[b->n_rules] = (weir__gb_rdef){.name = copy, .body = UINT32_MAX};
  return b->n_rules++;
}

uint32_t weir__gb_new_rule(weir__gb *b, const char *hint) {
  char name[96];
  snprintf(name, sizeof name, "%s#%u", hint, b->n_rules);
  return weir__gb_rule(b, name, strlen(name));
}

void weir__gb_define(weir__gb *b, uint32_t rule, uint32_t body) {
  if (b->status || rule >= b->n_rules) return;
  b->rules[rule].body = body;
}
