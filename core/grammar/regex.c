/* Regular expressions: the subset shared by ECMAScript and Python's re, matched in full.
 *
 * Supported: literals (UTF-8), '.', classes [...] and [^...] with ranges and escapes, the
 * escapes \d \w \s \D \W \S \t \n \r \f \v \0 \xHH \uHHHH \u{H...} \UHHHHHHHH and escaped
 * punctuation, groups ( ), (?: ), (?P<name> ), (?<name> ), alternation, the quantifiers * + ?
 * {m} {m,} {m,n} {,n} (lazy and possessive forms are the same language), and the anchors ^ \A
 * at the start and $ \Z \z at the end of the pattern or of a top-level alternative. Refused
 * with a message naming the construct: lookaround, backreferences, word boundaries, inline
 * flags, anchors elsewhere.
 *
 * Where the two dialects disagree the constraint keeps to what both accept, so every output
 * matches under either: '.' excludes \n, \r, U+2028 and U+2029; \d \w \s are their ASCII
 * forms; \D \W \S and negated classes containing them are restricted to ASCII (Python's are
 * Unicode-aware).
 *
 * In JSON-string mode (a schema's pattern) the expression describes the decoded string; each
 * character is produced in its canonical JSON encoding (", \ and control characters escaped,
 * everything else literal). */
#include <stdio.h>
#include <string.h>

#include "grammar/json.h"
#include "weir/status.h"

typedef struct rparse {
  weir__gb *b;
  const char *s;
  size_t n, i;
  int json; /* JSON-string mode */
  int depth;
  const char *what;
} rparse;

static uint32_t fail(rparse *p, const char *fmt, const char *arg) {
  char msg[160];
  snprintf(msg, sizeof msg, fmt, arg);
  return weir__gb_fail(p->b, WEIR_E_INVAL, "%s: %s at offset %zu", p->what, msg, p->i);
}

static int at_end(const rparse *p) { return p->i >= p->n; }
static int peek(const rparse *p) { return at_end(p) ? -1 : (unsigned char)p->s[p->i]; }

/* Decodes one UTF-8 code point; -1 on invalid input. */
static int32_t next_cp(rparse *p) {
  const unsigned char *u = (const unsigned char *)p->s + p->i;
  const size_t left = p->n - p->i;
  uint32_t cp;
  size_t len;
  if (u[0] < 0x80) cp = u[0], len = 1;
  else if ((u[0] & 0xE0) == 0xC0) cp = u[0] & 0x1F, len = 2;
  else if ((u[0] & 0xF0) == 0xE0) cp = u[0] & 0x0F, len = 3;
  else if ((u[0] & 0xF8) == 0xF0) cp = u[0] & 0x07, len = 4;
  else return -1;
  if (len > left) return -1;
  for (size_t k = 1; k < len; k++) {
    if ((u[k] & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (u[k] & 0x3F);
  }
  static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  p->i += len;
  return (int32_t)cp;
}

/* A code point set as the language of one character: UTF-8, or in JSON-string mode the
 * canonical JSON encoding of each character. */
static uint32_t set_node(rparse *p, const weir__cpset *set) {
  return p->json ? weir__json_chars(p->b, set) : weir__rx_cpset(p->b, set);
}

static uint32_t cp_node(rparse *p, uint32_t cp) {
  weir__cpset s = {0};
  if (weir__cpset_add(&s, cp, cp)) return weir__gb_fail(p->b, WEIR_E_NOMEM, "out of memory");
  const uint32_t r = set_node(p, &s);
  weir__cpset_free(&s);
  return r;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int32_t read_hex(rparse *p, int digits) {
  uint32_t v = 0;
  for (int k = 0; k < digits; k++) {
    const int h = hexval(peek(p));
    if (h < 0) return -1;
    v = v * 16 + (uint32_t)h;
    p->i++;
  }
  return (int32_t)v;
}

enum { CLS_NONE, CLS_D, CLS_W, CLS_S, CLS_ND, CLS_NW, CLS_NS };

/* Adds a shorthand class to s. Negated ones are complements within ASCII. */
static int add_shorthand(weir__cpset *s, int cls) {
  weir__cpset pos = {0}, neg = {0};
  int rc = 0;
  const int base = cls >= CLS_ND ? cls - 3 : cls;
  if (base == CLS_D) rc |= weir__cpset_add(&pos, '0', '9');
  if (base == CLS_W)
    rc |= weir__cpset_add(&pos, '0', '9') | weir__cpset_add(&pos, 'A', 'Z') |
          weir__cpset_add(&pos, 'a', 'z') | weir__cpset_add(&pos, '_', '_');
  if (base == CLS_S) rc |= weir__cpset_add(&pos, '\t', '\r') | weir__cpset_add(&pos, ' ', ' ');
  if (cls >= CLS_ND) {
    /* ASCII minus the class; for \S also minus \x1c-\x1f, which Python counts as spaces. */
    if (base == CLS_S) rc |= weir__cpset_add(&pos, 0x1c, 0x1f);
    rc |= weir__cpset_negate(&pos, &neg);
    for (uint32_t i = 0; i < neg.n && !rc; i++)
      if (neg.r[i][0] < 0x80)
        rc |= weir__cpset_add(s, neg.r[i][0], neg.r[i][1] < 0x7F ? neg.r[i][1] : 0x7F);
  } else {
    rc |= weir__cpset_add_set(s, &pos);
  }
  weir__cpset_free(&pos);
  weir__cpset_free(&neg);
  return rc ? WEIR_E_NOMEM : 0;
}

/* An escape after '\' (p->i at the letter). Sets *cls for a shorthand class, else *cp. Returns
 * 0, or fails. */
static int parse_escape(rparse *p, int in_class, int *cls, uint32_t *cp) {
  *cls = CLS_NONE;
  if (at_end(p)) {
    fail(p, "%s", "a trailing backslash");
    return -1;
  }
  const int c = peek(p);
  p->i++;
  int32_t v;
  switch (c) {
  case 'd': *cls = CLS_D; return 0;
  case 'w': *cls = CLS_W; return 0;
  case 's': *cls = CLS_S; return 0;
  case 'D': *cls = CLS_ND; return 0;
  case 'W': *cls = CLS_NW; return 0;
  case 'S': *cls = CLS_NS; return 0;
  case 't': *cp = '\t'; return 0;
  case 'n': *cp = '\n'; return 0;
  case 'r': *cp = '\r'; return 0;
  case 'f': *cp = '\f'; return 0;
  case 'v': *cp = '\v'; return 0;
  case '0':
    if (hexval(peek(p)) >= 0 && peek(p) <= '7') {
      fail(p, "%s", "octal escapes are not supported");
      return -1;
    }
    *cp = 0;
    return 0;
  case 'x':
    if ((v = read_hex(p, 2)) < 0) {
      fail(p, "%s", "\\x needs two hex digits");
      return -1;
    }
    *cp = (uint32_t)v;
    return 0;
  case 'u':
    if (peek(p) == '{') {
      p->i++;
      uint32_t x = 0;
      int digits = 0;
      while (hexval(peek(p)) >= 0 && digits < 7) x = x * 16 + (uint32_t)hexval(peek(p)), p->i++, digits++;
      if (peek(p) != '}' || !digits || x > 0x10FFFF) {
        fail(p, "%s", "\\u{...} needs 1 to 6 hex digits of a code point");
        return -1;
      }
      p->i++;
      *cp = x;
    } else {
      if ((v = read_hex(p, 4)) < 0) {
        fail(p, "%s", "\\u needs four hex digits");
        return -1;
      }
      *cp = (uint32_t)v;
    }
    break;
  case 'U':
    if ((v = read_hex(p, 8)) < 0 || v > 0x10FFFF) {
      fail(p, "%s", "\\U needs eight hex digits of a code point");
      return -1;
    }
    *cp = (uint32_t)v;
    break;
  case 'b':
    if (in_class) { *cp = '\b'; return 0; }
    fail(p, "%s", "word boundaries (\\b) are not supported");
    return -1;
  case 'B':
    fail(p, "%s", "word boundaries (\\B) are not supported");
    return -1;
  case 'A': case 'Z': case 'z':
    fail(p, "%s", "anchors are only supported at the start (^, \\A) and end ($, \\Z) of the pattern");
    return -1;
  default:
    if (c >= '1' && c <= '9') {
      fail(p, "%s", "backreferences are not supported");
      return -1;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      char esc[4] = {'\\', (char)c, 0};
      fail(p, "unknown escape %s", esc);
      return -1;
    }
    if (c >= 0x80) {
      p->i--;
      const int32_t u = next_cp(p);
      if (u < 0) {
        fail(p, "%s", "invalid UTF-8");
        return -1;
      }
      *cp = (uint32_t)u;
      return 0;
    }
    *cp = (uint32_t)c; /* escaped punctuation */
    return 0;
  }
  if (*cp >= 0xD800 && *cp <= 0xDFFF) {
    fail(p, "%s", "surrogate code points are not characters");
    return -1;
  }
  return 0;
}

/* One member of a bracket class: an escape (which may be a shorthand class, set in *cls) or
 * a literal code point. Nonzero after fail(). */
static int class_atom(rparse *p, int *cls, uint32_t *cp) {
  if (peek(p) == '\\') {
    p->i++;
    return parse_escape(p, 1, cls, cp);
  }
  const int32_t u = next_cp(p);
  if (u < 0) {
    fail(p, "%s", "invalid UTF-8");
    return -1;
  }
  *cp = (uint32_t)u;
  return 0;
}

static uint32_t parse_class(rparse *p) {
  weir__cpset s = {0}, out = {0};
  int negate = 0, first = 1, shorthand = 0;
  if (peek(p) == '^') {
    negate = 1;
    p->i++;
  }
  for (;;) {
    if (at_end(p)) {
      weir__cpset_free(&s);
      return fail(p, "%s", "an unterminated character class");
    }
    int c = peek(p);
    if (c == ']' && !first) {
      p->i++;
      break;
    }
    first = 0;
    uint32_t lo;
    int cls = CLS_NONE;
    if (c == '[' && p->i + 1 < p->n && p->s[p->i + 1] == ':') {
      fail(p, "%s", "POSIX classes ([:alpha:]) are not supported");
      goto err;
    }
    if (class_atom(p, &cls, &lo)) goto err;
    if (cls != CLS_NONE) {
      shorthand = 1;
      if (add_shorthand(&s, cls)) goto nomem;
      continue;
    }
    uint32_t hi = lo;
    if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
      p->i++;
      if (class_atom(p, &cls, &hi)) goto err;
      if (cls != CLS_NONE) {
        fail(p, "%s", "a class shorthand cannot end a range");
        goto err;
      }
      if (hi < lo) {
        fail(p, "%s", "a range out of order");
        goto err;
      }
    }
    if (weir__cpset_add(&s, lo, hi)) goto nomem;
  }
  uint32_t r;
  if (negate) {
    if (weir__cpset_negate(&s, &out)) goto nomem;
    if (shorthand) { /* Python's shorthands are Unicode-aware: stay within ASCII */
      weir__cpset ascii = {0};
      for (uint32_t i = 0; i < out.n; i++)
        if (out.r[i][0] < 0x80 &&
            weir__cpset_add(&ascii, out.r[i][0], out.r[i][1] < 0x7F ? out.r[i][1] : 0x7F)) {
          weir__cpset_free(&ascii);
          goto nomem;
        }
      weir__cpset_free(&out);
      out = ascii;
    }
    r = set_node(p, &out);
  } else {
    r = set_node(p, &s);
  }
  weir__cpset_free(&s);
  weir__cpset_free(&out);
  return r;
nomem:
  weir__gb_fail(p->b, WEIR_E_NOMEM, "out of memory");
err:
  weir__cpset_free(&s);
  weir__cpset_free(&out);
  return 0;
}

static uint32_t parse_alt(rparse *p, int top);

/* A decimal number for a quantifier; -1 when there is none. */
static int64_t read_num(rparse *p) {
  int64_t v = -1;
  while (peek(p) >= '0' && peek(p) <= '9') {
    v = (v < 0 ? 0 : v) * 10 + (peek(p) - '0');
    if (v > 100000000) v = 100000000;
    p->i++;
  }
  return v;
}

/* Tries to read {m}, {m,}, {m,n}, {,n} at p->i ('{'); on anything else leaves p->i and
 * returns 0 (the brace is then a literal, as both dialects treat it). */
static int read_braces(rparse *p, uint32_t *min, uint32_t *max) {
  const size_t save = p->i;
  p->i++;
  int64_t lo = read_num(p), hi;
  if (peek(p) == '}') {
    if (lo < 0) goto literal;
    hi = lo;
  } else if (peek(p) == ',') {
    p->i++;
    hi = read_num(p);
    if (peek(p) != '}' || (lo < 0 && hi < 0)) goto literal;
    if (lo < 0) lo = 0;
  } else {
    goto literal;
  }
  p->i++;
  *min = (uint32_t)lo;
  *max = hi < 0 ? WEIR__RX_INF : (uint32_t)hi;
  return 1;
literal:
  p->i = save;
  return 0;
}

static uint32_t parse_atom(rparse *p) {
  weir__gb *b = p->b;
  const int c = peek(p);
  if (c == '(') {
    p->i++;
    if (peek(p) == '?') {
      p->i++;
      const int k = peek(p);
      if (k == ':') {
        p->i++;
      } else if (k == 'P' && p->i + 1 < p->n && p->s[p->i + 1] == '<') {
        while (!at_end(p) && peek(p) != '>') p->i++;
        if (at_end(p)) return fail(p, "%s", "an unterminated group name");
        p->i++;
      } else if (k == '<' && p->i + 1 < p->n && p->s[p->i + 1] != '=' && p->s[p->i + 1] != '!') {
        while (!at_end(p) && peek(p) != '>') p->i++;
        if (at_end(p)) return fail(p, "%s", "an unterminated group name");
        p->i++;
      } else if (k == '=' || k == '!' || k == '<') {
        return fail(p, "%s", "lookaround assertions are not supported");
      } else if (k == 'P' && p->i + 1 < p->n && p->s[p->i + 1] == '=') {
        return fail(p, "%s", "backreferences are not supported");
      } else {
        return fail(p, "%s", "inline flags and other (?...) groups are not supported");
      }
    }
    if (++p->depth > p->b->limits.max_depth)
      return fail(p, "%s", "groups nested too deeply");
    const uint32_t r = parse_alt(p, 0);
    p->depth--;
    if (peek(p) != ')') return b->status ? 0 : fail(p, "%s", "a missing )");
    p->i++;
    return r;
  }
  if (c == '[') {
    p->i++;
    return parse_class(p);
  }
  if (c == '.') {
    p->i++;
    weir__cpset s = {0}, any = {0};
    if (weir__cpset_add(&s, '\n', '\n') || weir__cpset_add(&s, '\r', '\r') ||
        weir__cpset_add(&s, 0x2028, 0x2029) || weir__cpset_negate(&s, &any)) {
      weir__cpset_free(&s);
      weir__cpset_free(&any);
      return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    }
    const uint32_t r = set_node(p, &any);
    weir__cpset_free(&s);
    weir__cpset_free(&any);
    return r;
  }
  if (c == '\\') {
    p->i++;
    int cls;
    uint32_t cp;
    if (parse_escape(p, 0, &cls, &cp)) return 0;
    if (cls == CLS_NONE) return cp_node(p, cp);
    weir__cpset s = {0};
    if (add_shorthand(&s, cls)) {
      weir__cpset_free(&s);
      return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    }
    const uint32_t r = set_node(p, &s);
    weir__cpset_free(&s);
    return r;
  }
  if (c == '^' || c == '$')
    return fail(p, "%s", "anchors are only supported at the start (^, \\A) and end ($, \\Z) of the pattern");
  if (c == '*' || c == '+' || c == '?') return fail(p, "%s", "a quantifier with nothing to repeat");
  if (c == ')') return fail(p, "%s", "an unbalanced )");
  const int32_t u = next_cp(p);
  if (u < 0) return fail(p, "%s", "invalid UTF-8");
  return cp_node(p, (uint32_t)u);
}

static uint32_t parse_repeat(rparse *p) {
  uint32_t atom = parse_atom(p);
  for (;;) {
    if (p->b->status) return 0;
    const int c = peek(p);
    uint32_t min, max;
    if (c == '*') min = 0, max = WEIR__RX_INF, p->i++;
    else if (c == '+') min = 1, max = WEIR__RX_INF, p->i++;
    else if (c == '?') min = 0, max = 1, p->i++;
    else if (c == '{' && read_braces(p, &min, &max)) {
      if (max != WEIR__RX_INF && min > max) return fail(p, "%s", "a repetition {m,n} with m > n");
    } else {
      return atom;
    }
    if (peek(p) == '?' || peek(p) == '+') p->i++; /* lazy / possessive: the same language */
    atom = weir__rx_repeat(p->b, atom, min, max);
  }
}

/* Skips a start anchor (^, \A) at the start of a top-level alternative. */
static void skip_start_anchor(rparse *p) {
  if (peek(p) == '^') p->i++;
  else if (peek(p) == '\\' && p->i + 1 < p->n && p->s[p->i + 1] == 'A') p->i += 2;
}

/* An end anchor ($, \Z, \z) here ends a top-level alternative: 1 when one was skipped. */
static int skip_end_anchor(rparse *p) {
  size_t len = 0;
  if (peek(p) == '$') len = 1;
  else if (peek(p) == '\\' && p->i + 1 < p->n && (p->s[p->i + 1] == 'Z' || p->s[p->i + 1] == 'z'))
    len = 2;
  if (!len) return 0;
  const size_t after = p->i + len;
  if (after == p->n || p->s[after] == '|') {
    p->i = after;
    return 1;
  }
  return 0;
}

static uint32_t parse_concat(rparse *p, int top) {
  uint32_t items[64], n = 0, acc = weir__rx_empty();
  if (top) skip_start_anchor(p);
  while (!at_end(p) && peek(p) != '|' && peek(p) != ')') {
    if (top && skip_end_anchor(p)) break;
    const uint32_t r = parse_repeat(p);
    if (p->b->status) return 0;
    items[n++] = r;
    if (n == 64) {
      items[0] = weir__rx_seq2(p->b, acc, weir__rx_seq(p->b, items, n));
      acc = items[0];
      n = 0;
    }
  }
  return weir__rx_seq2(p->b, acc, weir__rx_seq(p->b, items, n));
}

static uint32_t parse_alt(rparse *p, int top) {
  uint32_t alts[64], n = 0, acc = weir__rx_none();
  for (;;) {
    const uint32_t r = parse_concat(p, top);
    if (p->b->status) return 0;
    alts[n++] = r;
    if (n == 64) {
      acc = weir__rx_alt2(p->b, acc, weir__rx_alt(p->b, alts, n));
      n = 0;
    }
    if (peek(p) != '|') break;
    p->i++;
  }
  return weir__rx_alt2(p->b, acc, weir__rx_alt(p->b, alts, n));
}

uint32_t weir__regex_parse(weir__gb *b, const char *re, size_t len, int json_string,
                           const char *what) {
  rparse p = {.b = b, .s = re, .n = len, .json = json_string, .what = what};
  if (b->status) return 0;
  const uint32_t r = parse_alt(&p, 1);
  if (b->status) return 0;
  if (!at_end(&p)) return fail(&p, "%s", peek(&p) == ')' ? "an unbalanced )" : "unexpected input");
  return r;
}
