/* Internals of core/grammar shared between its files (and its tests). */
#ifndef WEIR_GRAMMAR_INTERNAL_H
#define WEIR_GRAMMAR_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* ---- byte sets and code point sets ------------------------------------------------------ */

typedef struct weir__bset {
  uint64_t w[4];
} weir__bset;

static inline void weir__bset_add(weir__bset *s, unsigned b) { s->w[b >> 6] |= 1ull << (b & 63); }
static inline int weir__bset_has(const weir__bset *s, unsigned b) {
  return (int)((s->w[b >> 6] >> (b & 63)) & 1u);
}

/* A set of Unicode scalar values as sorted, disjoint, non-adjacent ranges [lo, hi]. */
typedef struct weir__cpset {
  uint32_t (*r)[2];
  uint32_t n, cap;
} weir__cpset;

int weir__cpset_add(weir__cpset *s, uint32_t lo, uint32_t hi); /* 0 or WEIR_E_NOMEM */
int weir__cpset_add_set(weir__cpset *s, const weir__cpset *o);
/* Every scalar value (U+0000..U+10FFFF, surrogates excluded) not in s, into out. */
int weir__cpset_negate(const weir__cpset *s, weir__cpset *out);
void weir__cpset_free(weir__cpset *s);
int weir__cpset_has(const weir__cpset *s, uint32_t cp);

/* ---- the builder: rules whose bodies are regular expressions over bytes and rules ---------
 * Node 0 is the empty language (NONE) and node 1 the empty string (EMPTY). Builders never
 * fail visibly: on an error they record it (first one wins) and return NONE, so callers
 * check weir__gb_failed() once at the end. */

enum { WEIR__RX_NONE, WEIR__RX_EMPTY, WEIR__RX_CLASS, WEIR__RX_SEQ, WEIR__RX_ALT,
       WEIR__RX_REPEAT, WEIR__RX_REF };

#define WEIR__RX_INF UINT32_MAX

typedef struct weir__rx {
  uint8_t kind;
  uint32_t a;        /* CLASS: class index; SEQ/ALT: first kid; REPEAT: child; REF: rule */
  uint32_t n;        /* SEQ/ALT: number of kids */
  uint32_t min, max; /* REPEAT; max WEIR__RX_INF for unbounded */
} weir__rx;

typedef struct weir__gb_rdef {
  char *name;
  uint32_t body; /* node, or UINT32_MAX while only referenced */
  uint32_t first_use_line; /* grammar text: where it was first referenced (messages) */
  uint8_t noinline;        /* keep as a rule of its own (set by the compiler) */
} weir__gb_rdef;

typedef struct weir__gb {
  weir__rx *nodes;
  uint32_t n_nodes, cap_nodes;
  uint32_t *kids;
  uint32_t n_kids, cap_kids;
  weir__bset *classes;
  uint32_t n_classes, cap_classes;
  uint32_t byte_class[256]; /* 1 + the index of the class {c}, 0 until it is interned */
  weir__gb_rdef *rules;
  uint32_t n_rules, cap_rules;
  weir_grammar_limits limits;
  uint64_t deadline_ns; /* CLOCK_THREAD_CPUTIME_ID; 0: none (limits.max_compile_ms) */
  uint32_t ticks;       /* work since the clock was last read */
  int status;      /* first error (0: none) */
  char err[256];   /* its message */
} weir__gb;

int weir__gb_init(weir__gb *b, const weir_grammar_limits *limits);
void weir__gb_free(weir__gb *b);
/* Records an error (the first one wins) and returns NONE (0). */
uint32_t weir__gb_fail(weir__gb *b, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int weir__gb_failed(const weir__gb *b) { return b->status != 0; }
/* 1 once the compile has used its CPU time (the clock is read every 1,024 calls). Records
 * the error in b when it can. A builder is used by the thread that created it. */
int weir__gb_over_time(weir__gb *b);
/* The message for a compile over its time budget. */
#define WEIR__GB_TIME_MSG "the constraint took more than %u ms of CPU time to compile; simplify it"


uint32_t weir__rx_none(void);
uint32_t weir__rx_empty(void);
uint32_t weir__rx_class(weir__gb *b, const weir__bset *s);
uint32_t weir__rx_byte(weir__gb *b, uint8_t c);
uint32_t weir__rx_range(weir__gb *b, uint8_t lo, uint8_t hi);
uint32_t weir__rx_lit(weir__gb *b, const char *s, size_t len);
uint32_t weir__rx_str(weir__gb *b, const char *s); /* NUL-terminated literal */
uint32_t weir__rx_seq(weir__gb *b, const uint32_t *kids, uint32_t n);
uint32_t weir__rx_alt(weir__gb *b, const uint32_t *kids, uint32_t n);
uint32_t weir__rx_seq2(weir__gb *b, uint32_t x, uint32_t y);
uint32_t weir__rx_seq3(weir__gb *b, uint32_t x, uint32_t y, uint32_t z);
uint32_t weir__rx_alt2(weir__gb *b, uint32_t x, uint32_t y);
uint32_t weir__rx_repeat(weir__gb *b, uint32_t x, uint32_t min, uint32_t max);
uint32_t weir__rx_opt(weir__gb *b, uint32_t x);
uint32_t weir__rx_star(weir__gb *b, uint32_t x);
uint32_t weir__rx_ref(weir__gb *b, uint32_t rule);
/* The UTF-8 encodings of every code point in s. */
uint32_t weir__rx_cpset(weir__gb *b, const weir__cpset *s);
uint32_t weir__rx_cprange(weir__gb *b, uint32_t lo, uint32_t hi);

/* A rule by name (created on first use; names are copied). UINT32_MAX on failure. */
uint32_t weir__gb_rule(weir__gb *b, const char *name, size_t len);
/* A fresh rule with a unique generated name derived from `hint`. */
uint32_t weir__gb_new_rule(weir__gb *b, const char *hint);
void weir__gb_define(weir__gb *b, uint32_t rule, uint32_t body);

/* Compiles the builder's rules into a grammar whose start symbol is `start`. Refuses a
 * grammar whose start can derive nothing (err names it). */
int weir__gb_finish(weir__gb *b, uint32_t start, weir_grammar **out, char *err, size_t errlen);

/* ---- front ends -------------------------------------------------------------------------- */

/* Regular expression -> node. json_string: the language of JSON string *contents* whose
 * decoded value matches (each character in its canonical JSON encoding). `what` names the
 * source in messages ("regex", "pattern at /properties/x"). */
uint32_t weir__regex_parse(weir__gb *b, const char *re, size_t len, int json_string,
                           const char *what);
int weir__schema_build(weir__gb *b, const char *text, size_t len, int strict, int whitespace,
                       uint32_t *start);
int weir__json_object_build(weir__gb *b, int whitespace, uint32_t *start);
int weir__choice_build(weir__gb *b, const char *text, size_t len, uint32_t *start);
int weir__ebnf_build(weir__gb *b, const char *text, size_t len, uint32_t *start);

/* ---- the compiled grammar ---------------------------------------------------------------- */

typedef struct weir__ref_edge {
  uint32_t rule;
  uint32_t target; /* position */
} weir__ref_edge;

struct weir_grammar {
  _Atomic int refcount;
  uint32_t n_rules, n_pos;
  uint32_t start_pos;      /* the start rule's initial position */
  uint32_t *rule_start;    /* rule -> its initial position */
  uint8_t *rule_nullable;
  uint8_t *rule_part;      /* rule -> 256-byte map from byte to the rule's byte partition */
  uint16_t *rule_npart;    /* rule -> number of partitions (entries of a transition row) */
  uint32_t *pos_rule;
  uint32_t *pos_trans;     /* pos -> index in trans of its row (one entry per partition) */
  uint8_t *pos_flags;      /* WEIR__POS_* */
  uint32_t *pos_ref;       /* pos -> first edge in refs; pos_ref[pos + 1] ends it */
  weir__ref_edge *refs;
  int32_t *trans;          /* target position, -1 for none */
  size_t bytes;            /* memory held */
};

enum {
  WEIR__POS_ACCEPT = 1, /* the rule may end here */
  WEIR__POS_SCAN = 2,   /* at least one byte transition */
};

static inline int32_t weir__scan(const weir_grammar *g, uint32_t pos, uint8_t byte) {
  return g->trans[g->pos_trans[pos] + g->rule_part[(size_t)g->pos_rule[pos] * 256 + byte]];
}

/* ---- the Earley chart ------------------------------------------------------------------- */

typedef struct weir__item {
  uint32_t pos, origin;
} weir__item;

typedef struct weir__chart {
  weir__item *items;
  uint32_t n_items, cap_items;
  uint32_t *set_start; /* n_sets + 1 entries: set k is items[set_start[k], set_start[k+1]) */
  uint32_t n_sets, cap_sets;
  /* Dedup table for the set being built: slots hold item index + 1; stamp per slot. */
  uint32_t *slot, *stamp;
  uint32_t n_slots, cur_stamp;
} weir__chart;

void weir__chart_free(weir__chart *c);
/* Resets to set 0 (empty: the context) and set 1 = the closure of (pos, origin 0). */
int weir__chart_start(weir__chart *c, const weir_grammar *g, uint32_t pos);
/* Builds the next set from `byte`. 1: kept (non-empty); 0: the byte is not allowed (nothing
 * changed); WEIR_E_NOMEM. */
int weir__chart_push(weir__chart *c, const weir_grammar *g, uint8_t byte);
/* Drops sets down to n_sets = n. */
void weir__chart_truncate(weir__chart *c, uint32_t n_sets);
/* 1 when the last set holds an item of origin 0 at an accepting position (the start item,
 * or the seed of a token-class walk, is complete). */
int weir__chart_complete(const weir__chart *c, const weir_grammar *g);
int weir__chart_copy(weir__chart *dst, const weir__chart *src);

/* ---- vocabularies and token classes ------------------------------------------------------ */

/* A node of the token trie: the tokens whose bytes start with the node's prefix are the ranks
 * [lo, hi); the first n_exact of them are the prefix itself. Children are contiguous, in byte
 * order, from first_child. */
typedef struct weir__trie_node {
  uint32_t lo, hi;
  uint32_t n_exact;
  uint32_t first_child;
  uint16_t n_children;
  uint8_t byte; /* the last byte of the prefix */
} weir__trie_node;

struct weir_grammar_vocab {
  _Atomic int refs;
  int32_t n_tokens;   /* vocabulary size (ids) */
  int32_t n_sorted;   /* non-special, non-empty tokens, sorted by bytes */
  int32_t *sorted_id; /* rank -> id */
  int32_t *rank_of;   /* id -> rank, -1 for a special or empty token */
  uint32_t *off;      /* rank -> bytes at blob + off */
  uint32_t *len;
  uint8_t *blob;
  int32_t *eos;
  int32_t n_eos;
  uint32_t max_len;
  weir__trie_node *trie; /* node 0 is the root (the empty prefix) */
  uint32_t n_trie;
};

/* The tokens of one position, found walking the token trie from it alone: `accept` can follow
 * whatever surrounds the position; `uncertain` (sorted ranks) leave the position's rule after
 * at least one byte, so whether they are allowed depends on the rules below it. */
typedef struct weir__ci {
  uint32_t n_accept;
  int32_t *accept_ids; /* sparse form, or NULL */
  uint32_t *accept_bits; /* dense form (mask words), or NULL */
  uint32_t n_uncertain;
  uint32_t *uncertain;
  size_t bytes;
} weir__ci;

struct weir_constraint {
  _Atomic int refs;
  weir_grammar *g;
  weir_grammar_vocab *v;
  _Atomic(weir__ci *) *ci; /* per position, filled on first use */
  _Atomic size_t ci_bytes;
  _Atomic(uint32_t *) dist; /* per position: fewest bytes to the rule's end (tests) */
};

/* The classes of position pos, computing and publishing them on first use. NULL on NOMEM. */
const weir__ci *weir__constraint_ci(weir_constraint *c, uint32_t pos);

struct weir_matcher {
  weir_constraint *c;
  weir__chart chart;
  uint32_t *step_sets; /* n_sets after each accepted step; [0] is the start */
  int32_t n_steps, cap_steps;
  int ended;
  /* Scratch for masks. */
  uint32_t *unc;
  uint32_t unc_cap;
  uint32_t *pos_seen;
  uint32_t pos_seen_cap;
};

/* Fewest bytes that complete the match from the matcher's state (0 when complete), or
 * UINT32_MAX when none can (for tests that steer a random walk to an end). */
uint32_t weir__matcher_distance(const weir_matcher *m);

#endif
