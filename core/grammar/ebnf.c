/* EBNF grammars in the GBNF style people write for llama.cpp:
 *
 *   root   ::= greeting ", " name "!"     # a comment
 *   greeting ::= "hello" | "hi"
 *   name   ::= [A-Z] [a-z]{1,15}
 *
 * A rule is `name ::= alternatives` (`=` is accepted too); a body runs until the next line that
 * starts another rule. Terms: "literal" (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH),
 * [class] and [^class] of characters, `.` (any character), (groups), rule names, and the
 * postfix operators * + ? {m} {m,} {m,n}. Characters are Unicode scalar values, matched as
 * UTF-8. The start rule is `root`. Any context-free grammar is accepted, left recursion
 * included (the matcher is an Earley recognizer). */
#include <stdio.h>
#include <string.h>

#include "grammar/internal.h"
#include "weir/status.h"

typedef struct eparse {
  weir__gb *b;
  const char *s;
  size_t n, i;
  int depth;
} eparse;

static int line_of(const eparse *p, size_t at) {
  int line = 1;
  for (size_t k = 0; k < at && k < p->n; k++) line += p->s[k] == '\n';
  return line;
}

static uint32_t efail(eparse *p, const char *msg) {
  return weir__gb_fail(p->b, WEIR_E_INVAL, "guided_grammar: line %d: %s", line_of(p, p->i), msg);
}

static int is_name(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

static int epeek(const eparse *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

/* Skips blanks and comments; newlines too when `lines`. */
static void skip_space(eparse *p, int lines) {
  while (p->i < p->n) {
    const char c = p->s[p->i];
    if (c == ' ' || c == '\t' || c == '\r' || (lines && c == '\n')) p->i++;
    else if (c == '#') {
      while (p->i < p->n && p->s[p->i] != '\n') p->i++;
    } else break;
  }
}

/* 1 when a rule definition (`name ::=` or `name =`) starts at position at. */
static int rule_starts(const eparse *p, size_t at) {
  size_t k = at;
  while (k < p->n && is_name((unsigned char)p->s[k])) k++;
  if (k == at) return 0;
  while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t')) k++;
  if (k + 3 <= p->n && !memcmp(p->s + k, "::=", 3)) return 1;
  return k < p->n && p->s[k] == '=';
}

/* Skips space; at top level (depth 0) a newline ends the body when a rule follows. Returns 1
 * when the body goes on. */
static int body_continues(eparse *p) {
  for (;;) {
    skip_space(p, 0);
    if (epeek(p) != '\n') return p->i < p->n;
    if (p->depth == 0) {
      size_t k = p->i;
      while (k < p->n && (p->s[k] == '\n' || p->s[k] == ' ' || p->s[k] == '\t' || p->s[k] == '\r'))
        k++;
      if (k < p->n && p->s[k] == '#') { /* a comment line: skip it and look again */
        p->i = k;
        skip_space(p, 0);
        continue;
      }
      if (k >= p->n || rule_starts(p, k)) {
        p->i = k;
        return 0;
      }
    }
    p->i++;
  }
}

static int ehex(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. -1 on error. */
static int64_t read_char(eparse *p) {
  if (p->i >= p->n) return -1;
  unsigned char c = (unsigned char)p->s[p->i];
  if (c == '\\') {
    p->i++;
    if (p->i >= p->n) return -1;
    c = (unsigned char)p->s[p->i++];
    int digits = 0;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: return c; /* \\ \" \] \- \[ ... */
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
      const int h = p->i < p->n ? ehex((unsigned char)p->s[p->i]) : -1;
      if (h < 0) return -1;
      v = v * 16 + (uint32_t)h;
      p->i++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    return v;
  }
  uint32_t cp;
  size_t len;
  if (c < 0x80) cp = c, len = 1;
  else if ((c & 0xE0) == 0xC0) cp = c & 0x1F, len = 2;
  else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, len = 3;
  else if ((c & 0xF8) == 0xF0) cp = c & 0x07, len = 4;
  else return -1;
  if (p->i + len > p->n) return -1;
  for (size_t k = 1; k < len; k++) {
    const unsigned char u = (unsigned char)p->s[p->i + k];
    if ((u & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (u & 0x3F);
  }
  p->i += len;
  return cp;
}

static uint32_t parse_alts(eparse *p);

static uint32_t parse_literal(eparse *p) {
  weir__cpset one = {0};
  uint32_t items[64], n = 0, acc = weir__rx_empty();
  p->i++; /* " */
  for (;;) {
    if (p->i >= p->n || p->s[p->i] == '\n') {
      weir__cpset_free(&one);
      return efail(p, "an unterminated string literal");
    }
    if (p->s[p->i] == '"') {
      p->i++;
      break;
    }
    const int64_t c = read_char(p);
    if (c < 0) {
      weir__cpset_free(&one);
      return efail(p, "a bad escape or invalid UTF-8 in a literal");
    }
    one.n = 0;
    if (weir__cpset_add(&one, (uint32_t)c, (uint32_t)c)) {
      weir__cpset_free(&one);
      return weir__gb_fail(p->b, WEIR_E_NOMEM, "out of memory");
    }
    items[n++] = weir__rx_cpset(p->b, &one);
    if (n == 64) {
      acc = weir__rx_seq2(p->b, acc, weir__rx_seq(p->b, items, n));
      n = 0;
    }
  }
  weir__cpset_free(&one);
  return weir__rx_seq2(p->b, acc, weir__rx_seq(p->b, items, n));
}

static uint32_t parse_eclass(eparse *p) {
  weir__cpset s = {0}, neg = {0};
  int negate = 0;
  p->i++; /* [ */
  if (epeek(p) == '^') {
    negate = 1;
    p->i++;
  }
  for (;;) {
    if (p->i >= p->n || p->s[p->i] == '\n') {
      weir__cpset_free(&s);
      return efail(p, "an unterminated character class");
    }
    if (p->s[p->i] == ']') {
      p->i++;
      break;
    }
    const int64_t lo = read_char(p);
    int64_t hi = lo;
    if (lo >= 0 && epeek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
      p->i++;
      hi = read_char(p);
    }
    if (lo < 0 || hi < 0) {
      weir__cpset_free(&s);
      return efail(p, "a bad escape or invalid UTF-8 in a character class");
    }
    if (hi < lo) {
      weir__cpset_free(&s);
      return efail(p, "a character range out of order");
    }
    if (weir__cpset_add(&s, (uint32_t)lo, (uint32_t)hi)) goto nomem;
  }
  uint32_t r;
  if (negate) {
    if (weir__cpset_negate(&s, &neg)) goto nomem;
    r = weir__rx_cpset(p->b, &neg);
  } else {
    r = weir__rx_cpset(p->b, &s);
  }
  weir__cpset_free(&s);
  weir__cpset_free(&neg);
  return r;
nomem:
  weir__cpset_free(&s);
  weir__cpset_free(&neg);
  return weir__gb_fail(p->b, WEIR_E_NOMEM, "out of memory");
}

static uint32_t parse_primary(eparse *p) {
  const int c = epeek(p);
  if (c == '"') return parse_literal(p);
  if (c == '[') return parse_eclass(p);
  if (c == '.') {
    p->i++;
    return weir__rx_cprange(p->b, 0, 0x10FFFF);
  }
  if (c == '(') {
    p->i++;
    if (++p->depth > p->b->limits.max_depth) return efail(p, "groups nested too deeply");
    const uint32_t r = parse_alts(p);
    p->depth--;
    skip_space(p, 1);
    if (epeek(p) != ')') return p->b->status ? 0 : efail(p, "a missing )");
    p->i++;
    return r;
  }
  if (c >= 0 && is_name(c)) {
    const size_t a = p->i;
    while (p->i < p->n && is_name((unsigned char)p->s[p->i])) p->i++;
    const uint32_t rule = weir__gb_rule(p->b, p->s + a, p->i - a);
    if (rule == UINT32_MAX) return 0;
    if (!p->b->rules[rule].first_use_line) p->b->rules[rule].first_use_line = (uint32_t)line_of(p, a);
    return weir__rx_ref(p->b, rule);
  }
  return efail(p, "expected a literal, a [class], a rule name, '.' or '('");
}

static int read_uint(eparse *p, uint32_t *v) {
  if (!(epeek(p) >= '0' && epeek(p) <= '9')) return 0;
  uint64_t x = 0;
  while (epeek(p) >= '0' && epeek(p) <= '9') {
    x = x * 10 + (uint64_t)(epeek(p) - '0');
    if (x > 100000000) x = 100000000;
    p->i++;
  }
  *v = (uint32_t)x;
  return 1;
}

static uint32_t parse_item(eparse *p) {
  uint32_t r = parse_primary(p);
  for (;;) {
    if (p->b->status) return 0;
    const int c = epeek(p);
    if (c == '*') r = weir__rx_star(p->b, r), p->i++;
    else if (c == '+') r = weir__rx_repeat(p->b, r, 1, WEIR__RX_INF), p->i++;
    else if (c == '?') r = weir__rx_opt(p->b, r), p->i++;
    else if (c == '{') {
      p->i++;
      uint32_t lo = 0, hi = WEIR__RX_INF;
      skip_space(p, 0);
      const int has_lo = read_uint(p, &lo);
      skip_space(p, 0);
      if (epeek(p) == ',') {
        p->i++;
        skip_space(p, 0);
        if (!read_uint(p, &hi)) hi = WEIR__RX_INF;
      } else {
        if (!has_lo) return efail(p, "expected a number in {m,n}");
        hi = lo;
      }
      skip_space(p, 0);
      if (epeek(p) != '}') return efail(p, "expected } closing {m,n}");
      p->i++;
      if (hi != WEIR__RX_INF && lo > hi) return efail(p, "a repetition {m,n} with m > n");
      r = weir__rx_repeat(p->b, r, lo, hi);
    } else return r;
  }
}

static uint32_t parse_seq(eparse *p) {
  uint32_t items[64], n = 0, acc = weir__rx_empty();
  for (;;) {
    if (p->depth ? (skip_space(p, 1), 0) : !body_continues(p)) break;
    const int c = epeek(p);
    if (c < 0 || c == '|' || c == ')') break;
    items[n++] = parse_item(p);
    if (p->b->status) return 0;
    if (n == 64) {
      acc = weir__rx_seq2(p->b, acc, weir__rx_seq(p->b, items, n));
      n = 0;
    }
  }
  return weir__rx_seq2(p->b, acc, weir__rx_seq(p->b, items, n));
}

static uint32_t parse_alts(eparse *p) {
  uint32_t alts[64], n = 0, acc = weir__rx_none();
  for (;;) {
    alts[n++] = parse_seq(p);
    if (p->b->status) return 0;
    if (n == 64) {
      acc = weir__rx_alt2(p->b, acc, weir__rx_alt(p->b, alts, n));
      n = 0;
    }
    if (epeek(p) != '|') break;
    p->i++;
  }
  return weir__rx_alt2(p->b, acc, weir__rx_alt(p->b, alts, n));
}

int weir__ebnf_build(weir__gb *b, const char *text, size_t len, uint32_t *start) {
  eparse p = {.b = b, .s = text, .n = len};
  for (;;) {
    skip_space(&p, 1);
    if (p.i >= p.n) break;
    const size_t a = p.i;
    while (p.i < p.n && is_name((unsigned char)p.s[p.i])) p.i++;
    if (p.i == a) return efail(&p, "expected a rule name"), b->status;
    const size_t name_end = p.i;
    skip_space(&p, 0);
    if (p.i + 3 <= p.n && !memcmp(p.s + p.i, "::=", 3)) p.i += 3;
    else if (epeek(&p) == '=') p.i++;
    else return efail(&p, "expected ::= after the rule name"), b->status;
    const uint32_t rule = weir__gb_rule(b, text + a, name_end - a);
    if (rule == UINT32_MAX) return b->status;
    if (b->rules[rule].body != UINT32_MAX) {
      char msg[160];
      snprintf(msg, sizeof msg, "rule '%s' is defined twice", b->rules[rule].name);
      p.i = a;
      return efail(&p, msg), b->status;
    }
    const uint32_t body = parse_alts(&p);
    if (b->status) return b->status;
    if (p.i < p.n && (epeek(&p) == ')')) return efail(&p, "an unbalanced )"), b->status;
    weir__gb_define(b, rule, body);
  }
  for (uint32_t r = 0; r < b->n_rules; r++)
    if (b->rules[r].body == UINT32_MAX)
      return weir__gb_fail(b, WEIR_E_INVAL, "guided_grammar: line %u: rule '%s' is used but never defined",
                           b->rules[r].first_use_line, b->rules[r].name), b->status;
  uint32_t root = UINT32_MAX;
  for (uint32_t r = 0; r < b->n_rules; r++)
    if (!strcmp(b->rules[r].name, "root")) root = r;
  if (root == UINT32_MAX)
    return weir__gb_fail(b, WEIR_E_INVAL, "guided_grammar: no rule named 'root' (the start rule)"), b->status;
  *start = root;
  return 0;
}
