/* The Jinja engine's lexer and parser: template text to a syntax tree (jinja_internal.h).
 *
 * The lexer follows Jinja2's: newlines are normalized to \n and one trailing newline is
 * dropped; `{%-`, `-%}` and friends strip whitespace; with lstrip_blocks the spaces before a
 * block or comment tag that starts its line go, and with trim_blocks the newline right after
 * a block or comment tag goes; tag ends inside brackets do not end the tag. The parser
 * follows Jinja2's grammar and operator precedence (filters bind tighter than arithmetic,
 * `~` sits between + and *). Nesting is bounded so a hostile template cannot exhaust the
 * stack. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"
#include "util/utf8.h"
#include "weir/status.h"

#define MAX_NEST 200

enum { T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT,
       T_FLOAT, T_OP, T_EOF };

typedef struct tok {
  int type, line;
  const char *p; /* T_NAME, T_OP: the text; T_DATA, T_STRING: decoded (arena) */
  size_t n;
  int64_t i;
  double f;
} tok;

typedef struct P {
  jarena *a;
  const char *src;
  size_t len;
  tok *t;
  size_t nt, cap, pos;
  weir_jinja_error *err;
  int failed;
  int depth;
  int loop_depth;
} P;

static int pfail(P *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pfail(P *p, int line, const char *fmt, ...) {
  if (p->failed) return -1;
  p->failed = 1;
  if (p->err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
    p->err->line = line;
    p->err->raised = 0;
  }
  return -1;
}

static int push(P *p, int type, int line, const char *s, size_t n) {
  if (p->nt == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 256;
    tok *nt = realloc(p->t, cap * sizeof(tok));
    if (!nt) return pfail(p, line, "out of memory");
    p->t = nt;
    p->cap = cap;
  }
  p->t[p->nt++] = (tok){type, line, s, n, 0, 0};
  return 0;
}

/* ---- lexing ---- */

static size_t utf8_prev_len(const char *s, size_t end) {
  size_t k = 1;
  while (k < end && k < 4 && ((unsigned char)s[end - k] & 0xC0) == 0x80) k++;
  return k;
}

/* Python's str.rstrip(): the length of s without trailing whitespace. */
static size_t rstrip_len(const char *s, size_t n) {
  while (n > 0) {
    size_t k = utf8_prev_len(s, n);
    uint32_t cp;
    int valid;
    weir_utf8_next((const unsigned char *)s + n - k, k, &cp, &valid);
    if (!valid || !py_isspace(cp)) break;
    n -= k;
  }
  return n;
}

/* How many bytes of whitespace start s (Python's \s). */
static size_t ws_len(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    int valid;
    int k = weir_utf8_next((const unsigned char *)s + i, n - i, &cp, &valid);
    if (!valid || !py_isspace(cp)) break;
    i += (size_t)k;
  }
  return i;
}

static int all_ws(const char *s, size_t n) { return n > 0 && ws_len(s, n) == n; }

static int count_nl(const char *s, size_t n) {
  int c = 0;
  for (size_t i = 0; i < n; i++) c += s[i] == '\n';
  return c;
}

/* Text before a tag, after `{%-` / lstrip_blocks stripping. */
static int emit_data(P *p, const char *s, size_t n, int line, char sign, int lstrip_ok,
                     int line_starting) {
  if (sign == '-') {
    n = rstrip_len(s, n);
  } else if (sign != '+' && lstrip_ok) {
    size_t l = n;
    while (l > 0 && s[l - 1] != '\n') l--;
    if ((l > 0 || line_starting) && all_ws(s + l, n - l)) n = l;
  }
  if (n == 0) return 0;
  return push(p, T_DATA, line, s, n);
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* digits with single underscores between them: (\d+_)*\d+ ; returns the length or 0 */
static size_t digits_len(const char *s, size_t n) {
  size_t i = 0;
  if (i >= n || !is_digit(s[i])) return 0;
  while (i < n) {
    if (is_digit(s[i])) i++;
    else if (s[i] == '_' && i + 1 < n && is_digit(s[i + 1])) i++;
    else break;
  }
  return i;
}

/* Lexes one tag's insides from *pos up to its end; returns 0 and the end sign ('-', '+' or
 * 0) and where the text after the tag begins. */
static int lex_tag(P *p, size_t *pos, int *line, int is_block, char *end_sign) {
  const char *s = p->src;
  size_t n = p->len, i = *pos;
  char stack[MAX_NEST];
  int sp = 0;
  while (1) {
    if (i >= n) return pfail(p, *line, "unexpected end of template: the tag opened here is not closed");
    if (sp == 0) {
      const char *e = is_block ? "%}" : "}}";
      if ((s[i] == '-' || (is_block && s[i] == '+')) && i + 3 <= n &&
          memcmp(s + i + 1, e, 2) == 0) {
        *end_sign = s[i];
        *pos = i + 3;
        return 0;
      }
      if (i + 2 <= n && memcmp(s + i, e, 2) == 0) {
        *end_sign = 0;
        *pos = i + 2;
        return 0;
      }
    }
    char c = s[i];
    size_t w = ws_len(s + i, n - i);
    if (w) {
      *line += count_nl(s + i, w);
      i += w;
      continue;
    }
    /* float: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+) */
    if (is_digit(c)) {
      size_t d = digits_len(s + i, n - i), j = i + d, flen = 0;
      size_t frac = 0;
      if (j < n && s[j] == '.') frac = digits_len(s + j + 1, n - j - 1);
      size_t k = j + (frac ? frac + 1 : 0);
      if (k < n && (s[k] == 'e' || s[k] == 'E')) {
        size_t m = k + 1;
        if (m < n && (s[m] == '+' || s[m] == '-')) m++;
        size_t ed = digits_len(s + m, n - m);
        if (ed) flen = m + ed - i;
      }
      if (!flen && frac) flen = j + 1 + frac - i;
      if (i > 0 && s[i - 1] == '.') flen = 0; /* foo.0.1 is two subscripts */
      if (flen) {
        char buf[128];
        size_t o = 0;
        for (size_t q = i; q < i + flen && o < sizeof buf - 1; q++)
          if (s[q] != '_') buf[o++] = s[q];
        buf[o] = '\0';
        if (push(p, T_FLOAT, *line, s + i, flen)) return -1;
        p->t[p->nt - 1].f = strtod(buf, NULL);
        i += flen;
        continue;
      }
      /* integer: 0b.. 0o.. 0x.. [1-9](_?\d)* 0(_?0)* */
      int64_t v = 0;
      size_t j2 = i;
      int base = 10, overflow = 0;
      if (c == '0' && i + 1 < n && (s[i + 1] == 'b' || s[i + 1] == 'B' || s[i + 1] == 'o' ||
                                    s[i + 1] == 'O' || s[i + 1] == 'x' || s[i + 1] == 'X')) {
        char b = (char)(s[i + 1] | 0x20);
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        j2 = i + 2;
        size_t start = j2;
        while (j2 < n) {
          char ch = s[j2];
          int dv = -1;
          if (ch == '_' && j2 + 1 < n) {
            j2++;
            ch = s[j2];
          }
          if (is_digit(ch)) dv = ch - '0';
          else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') dv = (ch | 0x20) - 'a' + 10;
          if (dv < 0 || dv >= base) {
            if (s[j2 - 1] == '_') j2--;
            break;
          }
          if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, dv, &v)) overflow = 1;
          j2++;
        }
        if (j2 == start) {
          base = 10;
          j2 = i + 1;
          v = 0;
        }
      } else if (c == '0') {
        j2 = i + 1;
        while (j2 < n && (s[j2] == '0' || (s[j2] == '_' && j2 + 1 < n && s[j2 + 1] == '0'))) j2++;
      } else {
        j2 = i + digits_len(s + i, n - i);
        for (size_t q = i; q < j2; q++)
          if (s[q] != '_' &&
              (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[q] - '0', &v)))
            overflow = 1;
      }
      if (overflow) return pfail(p, *line, "integer literal too large");
      if (push(p, T_INT, *line, s + i, j2 - i)) return -1;
      p->t[p->nt - 1].i = v;
      i = j2;
      continue;
    }
    if (is_alpha(c)) {
      size_t j = i + 1;
      while (j < n && (is_alpha(s[j]) || is_digit(s[j]))) j++;
      if (push(p, T_NAME, *line, s + i, j - i)) return -1;
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      size_t j = i + 1;
      while (j < n && s[j] != c) j += s[j] == '\\' ? 2 : 1;
      if (j >= n) return pfail(p, *line, "unexpected end of string");
      /* decode Python escapes */
      char *out = ja_alloc(p->a, (j - i) * 4 + 1);
      if (!out) return pfail(p, *line, "out of memory");
      size_t o = 0;
      int sline = *line;
      for (size_t q = i + 1; q < j; q++) {
        char ch = s[q];
        if (ch == '\n') (*line)++;
        if (ch != '\\') {
          out[o++] = ch;
          continue;
        }
        char e = s[++q];
        uint32_t cp = 0;
        int nh = 0;
        switch (e) {
        case '\n': (*line)++; break; /* line continuation */
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'v': out[o++] = '\v'; break;
        case 'x': nh = 2; break;
        case 'u': nh = 4; break;
        case 'U': nh = 8; break;
        case 'N':
          return pfail(p, sline, "\\N{...} escapes are not supported in strings");
        default:
          if ((unsigned char)e >= 0x80) {
            /* Jinja reads strings through Python's backslashreplace + unicode-escape: a
             * backslash before a non-ASCII character leaves a backslash and the
             * character's own escape text (\xe9, \u0697 ...) */
            uint32_t uc;
            int k = weir_utf8_next((const unsigned char *)s + q, j - q, &uc, NULL);
            o += (size_t)snprintf(out + o, 12, uc < 0x100 ? "\\x%02x" : uc < 0x10000 ? "\\u%04x" : "\\U%08x", uc);
            q += (size_t)k - 1;
          } else if (e >= '0' && e <= '7') {
            int k = 0;
            while (k < 3 && q < j && s[q] >= '0' && s[q] <= '7') {
              cp = cp * 8 + (uint32_t)(s[q] - '0');
              q++;
              k++;
            }
            q--;
            o += (size_t)weir_utf8_put(cp, out + o);
          } else {
            out[o++] = '\\';
            out[o++] = e;
          }
        }
        if (nh) {
          if (q + (size_t)nh >= j) return pfail(p, sline, "truncated \\%c escape in a string", e);
          for (int k = 1; k <= nh; k++) {
            char h = s[q + (size_t)k];
            int dv = is_digit(h) ? h - '0' : ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') ? (h | 0x20) - 'a' + 10 : -1;
            if (dv < 0) return pfail(p, sline, "truncated \\%c escape in a string", e);
            cp = cp * 16 + (uint32_t)dv;
          }
          if (cp > 0x10ffff) return pfail(p, sline, "illegal Unicode character in a string");
          if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
          q += (size_t)nh;
          o += (size_t)weir_utf8_put(cp, out + o);
        }
      }
      out[o] = '\0';
      if (push(p, T_STRING, sline, out, o)) return -1;
      i = j + 1;
      continue;
    }
    static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<="};
    int matched = 0;
    for (int k = 0; k < 6; k++)
      if (i + 1 < n && s[i] == ops2[k][0] && s[i + 1] == ops2[k][1]) {
        if (push(p, T_OP, *line, s + i, 2)) return -1;
        i += 2;
        matched = 1;
        break;
      }
    if (matched) continue;
    if (strchr("+-/*%~[](){}><=.:|,;", c) && c) {
      if (c == '(' || c == '[' || c == '{') {
        if (sp >= MAX_NEST) return pfail(p, *line, "brackets nested too deeply");
        stack[sp++] = c == '(' ? ')' : c == '[' ? ']' : '}';
      } else if (c == ')' || c == ']' || c == '}') {
        if (sp == 0) return pfail(p, *line, "unexpected '%c'", c);
        if (stack[sp - 1] != c)
          return pfail(p, *line, "unexpected '%c', expected '%c'", c, stack[sp - 1]);
        sp--;
      }
      if (push(p, T_OP, *line, s + i, 1)) return -1;
      i++;
      continue;
    }
    return pfail(p, *line, "unexpected char '%c' at %zu", c, i);
  }
}

static int lex(P *p) {
  const char *s = p->src;
  size_t n = p->len, pos = 0;
  int line = 1, line_starting = 1;
  while (pos < n) {
    /* the next tag start */
    size_t t = pos;
    int kind = 0; /* 1 var, 2 block, 3 comment */
    while (t + 1 < n) {
      if (s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')) {
        kind = s[t + 1] == '{' ? 1 : s[t + 1] == '%' ? 2 : 3;
        break;
      }
      t++;
    }
    if (!kind) {
      if (push(p, T_DATA, line, s + pos, n - pos)) return -1;
      break;
    }
    char sign = 0;
    size_t after = t + 2;
    if (after < n && (s[after] == '-' || s[after] == '+')) sign = s[after++];
    /* {% raw %} ... {% endraw %} */
    if (kind == 2) {
      size_t q = after + ws_len(s + after, n - after);
      if (n - q >= 3 && memcmp(s + q, "raw", 3) == 0) {
        size_t r = q + 3;
        r += ws_len(s + r, n - r);
        int rsign = 0;
        size_t body = 0;
        if (n - r >= 3 && s[r] == '-' && memcmp(s + r + 1, "%}", 2) == 0) {
          rsign = '-';
          body = r + 3;
        } else if (n - r >= 2 && memcmp(s + r, "%}", 2) == 0) {
          body = r + 2;
        }
        if (body) {
          if (emit_data(p, s + pos, t - pos, line, sign, 1, line_starting)) return -1;
          line += count_nl(s + pos, body - pos);
          if (rsign) body += ws_len(s + body, n - body);
          /* find {%[-+]? endraw [-+]?%} */
          size_t e = body;
          size_t tag_at = 0, tag_end = 0;
          char esign = 0, tsign = 0;
          for (; e + 1 < n; e++) {
            if (s[e] != '{' || s[e + 1] != '%') continue;
            size_t x = e + 2;
            char sg = 0;
            if (x < n && (s[x] == '-' || s[x] == '+')) sg = s[x++];
            x += ws_len(s + x, n - x);
            if (n - x < 6 || memcmp(s + x, "endraw", 6) != 0) continue;
            x += 6;
            x += ws_len(s + x, n - x);
            char tg = 0;
            if (x < n && (s[x] == '-' || s[x] == '+')) tg = s[x++];
            if (n - x < 2 || memcmp(s + x, "%}", 2) != 0) continue;
            tag_at = e;
            tag_end = x + 2;
            esign = sg;
            tsign = tg;
            break;
          }
          if (!tag_end) return pfail(p, line, "missing end of raw directive");
          if (emit_data(p, s + body, tag_at - body, line, esign, 1, 0)) return -1;
          line += count_nl(s + body, tag_end - body);
          pos = tag_end;
          if (tsign == '-') {
            size_t w = ws_len(s + pos, n - pos);
            line += count_nl(s + pos, w);
            pos += w;
          } else if (tsign != '+' && pos < n && s[pos] == '\n') {
            pos++;
            line++;
          }
          line_starting = pos > 0 && s[pos - 1] == '\n';
          continue;
        }
      }
    }
    if (emit_data(p, s + pos, t - pos, line, sign, kind != 1, line_starting)) return -1;
    line += count_nl(s + pos, t - pos);
    char esign = 0;
    size_t end;
    if (kind == 3) {
      size_t e = after;
      while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
      if (after >= n) break; /* `{#` ending the template: Jinja's lexer stops there quietly */
      if (e + 1 >= n) return pfail(p, line, "missing end of comment tag");
      if (e > after && (s[e - 1] == '-' || s[e - 1] == '+')) esign = s[e - 1];
      line += count_nl(s + after, e - after);
      end = e + 2;
    } else {
      if (push(p, kind == 1 ? T_VAR_BEGIN : T_BLOCK_BEGIN, line, NULL, 0)) return -1;
      end = after;
      if (lex_tag(p, &end, &line, kind == 2, &esign)) return -1;
      if (push(p, kind == 1 ? T_VAR_END : T_BLOCK_END, line, NULL, 0)) return -1;
    }
    pos = end;
    if (esign == '-') {
      size_t w = ws_len(s + pos, n - pos);
      line += count_nl(s + pos, w);
      pos += w;
    } else if (kind != 1 && esign != '+' && pos < n && s[pos] == '\n') {
      pos++;
      line++;
    }
    line_starting = s[pos - 1] == '\n';
  }
  return push(p, T_EOF, line, NULL, 0);
}

/* ---- parsing ---- */

static tok *cur(P *p) { return &p->t[p->pos]; }
static tok *peek(P *p, size_t k) {
  return p->pos + k < p->nt ? &p->t[p->pos + k] : &p->t[p->nt - 1];
}
static int is_op(const tok *t, const char *op) {
  return t->type == T_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0;
}
static int is_name(const tok *t, const char *nm) {
  return t->type == T_NAME && t->n == strlen(nm) && memcmp(t->p, nm, t->n) == 0;
}
static const char *tok_desc(const tok *t, char *buf, size_t n) {
  switch (t->type) {
  case T_EOF: return "end of template";
  case T_VAR_END: return "end of print statement";
  case T_BLOCK_END: return "end of statement block";
  case T_STRING: return "string";
  case T_DATA: return "template data";
  default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p ? t->p : ""); return buf;
  }
}
static int expect_op(P *p, const char *op) {
  if (!is_op(cur(p), op)) {
    char b[64];
    return pfail(p, cur(p)->line, "expected '%s', got %s", op, tok_desc(cur(p), b, sizeof b));
  }
  p->pos++;
  return 0;
}
static int expect_end(P *p, int type) {
  if (cur(p)->type != type) {
    char b[64];
    return pfail(p, cur(p)->line, "expected %s, got %s",
                 type == T_BLOCK_END ? "end of statement block" : "end of print statement",
                 tok_desc(cur(p), b, sizeof b));
  }
  p->pos++;
  return 0;
}

static jnode *mk(P *p, int kind, int line) {
  jnode *n = ja_alloc(p->a, sizeof(jnode));
  if (!n) {
    pfail(p, line, "out of memory");
    return NULL;
  }
  n->kind = (uint8_t)kind;
  n->line = line;
  return n;
}

static const char *tok_str(P *p, const tok *t) {
  char *s = ja_alloc(p->a, t->n + 1);
  if (!s) {
    pfail(p, t->line, "out of memory");
    return NULL;
  }
  memcpy(s, t->p, t->n);
  s[t->n] = '\0';
  return s;
}

/* a growable node list */
typedef struct nlist {
  jnode **v;
  int n, cap;
} nlist;
static int nl_add(P *p, nlist *l, jnode *x) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 4;
    jnode **nv = ja_alloc(p->a, (size_t)cap * sizeof *nv);
    if (!nv) return pfail(p, 0, "out of memory");
    if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = x;
  return 0;
}

static jnode *parse_expr(P *p, int with_condexpr);
static jnode *parse_tuple(P *p, int with_condexpr, int explicit_parens, const char *extra_end);
static jnode *parse_unary(P *p, int with_filter);
static jnode *parse_primary(P *p);
static jnode *parse_postfix(P *p, jnode *n);
static jnode *parse_filter_expr(P *p, jnode *n);

static int enter(P *p) {
  if (++p->depth > MAX_NEST) return pfail(p, cur(p)->line, "template nested too deeply");
  return 0;
}

static jnode *parse_or(P *p);

static jnode *parse_condexpr(P *p) {
  jnode *e1 = parse_or(p);
  while (e1 && is_name(cur(p), "if")) {
    int line = cur(p)->line;
    p->pos++;
    jnode *c = mk(p, N_COND, line);
    if (!c) return NULL;
    c->b = e1;
    if (!(c->a = parse_or(p))) return NULL;
    if (is_name(cur(p), "else")) {
      p->pos++;
      if (!(c->c = parse_condexpr(p))) return NULL;
    }
    e1 = c;
  }
  return e1;
}

static jnode *parse_expr(P *p, int with_condexpr) {
  if (enter(p)) return NULL;
  jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
  p->depth--;
  return n;
}

static jnode *parse_not(P *p);
static jnode *parse_and(P *p) {
  jnode *l = parse_not(p);
  while (l && is_name(cur(p), "and")) {
    jnode *n = mk(p, N_AND, cur(p)->line);
    p->pos++;
    if (!n) return NULL;
    n->a = l;
    if (!(n->b = parse_not(p))) return NULL;
    l = n;
  }
  return l;
}

static jnode *parse_or(P *p) {
  jnode *l = parse_and(p);
  while (l && is_name(cur(p), "or")) {
    jnode *n = mk(p, N_OR, cur(p)->line);
    p->pos++;
    if (!n) return NULL;
    n->a = l;
    if (!(n->b = parse_and(p))) return NULL;
    l = n;
  }
  return l;
}

static jnode *parse_compare(P *p);
static jnode *parse_not(P *p) {
  if (is_name(cur(p), "not")) {
    jnode *n = mk(p, N_NOT, cur(p)->line);
    p->pos++;
    if (!n || enter(p)) return NULL;
    n->a = parse_not(p);
    p->depth--;
    return n->a ? n : NULL;
  }
  return parse_compare(p);
}

static jnode *parse_math1(P *p);
static jnode *parse_compare(P *p) {
  int line = cur(p)->line;
  jnode *e = parse_math1(p);
  if (!e) return NULL;
  nlist items = {0};
  uint8_t ops[MAX_NEST];
  while (1) {
    tok *t = cur(p);
    int op = -1;
    if (is_op(t, "==")) op = OP_EQ;
    else if (is_op(t, "!=")) op = OP_NE;
    else if (is_op(t, "<")) op = OP_LT;
    else if (is_op(t, "<=")) op = OP_LE;
    else if (is_op(t, ">")) op = OP_GT;
    else if (is_op(t, ">=")) op = OP_GE;
    else if (is_name(t, "in")) op = OP_IN;
    else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
      op = OP_NOTIN;
      p->pos++;
    }
    if (op < 0) break;
    p->pos++;
    if (items.n >= MAX_NEST) return pfail(p, t->line, "comparison chain too long"), NULL;
    jnode *r = parse_math1(p);
    if (!r || nl_add(p, &items, r)) return NULL;
    ops[items.n - 1] = (uint8_t)op;
  }
  if (!items.n) return e;
  jnode *c = mk(p, N_CMP, line);
  if (!c) return NULL;
  c->a = e;
  c->items = items.v;
  c->n_items = items.n;
  c->ops = ja_alloc(p->a, (size_t)items.n);
  if (!c->ops) return pfail(p, line, "out of memory"), NULL;
  memcpy(c->ops, ops, (size_t)items.n);
  return c;
}

static jnode *binop(P *p, int op, jnode *l, jnode *r, int line) {
  jnode *n = mk(p, N_BIN, line);
  if (!n) return NULL;
  n->op = (uint8_t)op;
  n->a = l;
  n->b = r;
  return n;
}

static jnode *parse_concat(P *p);
static jnode *parse_math1(P *p) {
  jnode *l = parse_concat(p);
  while (l && (is_op(cur(p), "+") || is_op(cur(p), "-"))) {
    int op = is_op(cur(p), "+") ? OP_ADD : OP_SUB, line = cur(p)->line;
    p->pos++;
    jnode *r = parse_concat(p);
    if (!r) return NULL;
    l = binop(p, op, l, r, line);
  }
  return l;
}

static jnode *parse_math2(P *p);
static jnode *parse_concat(P *p) {
  jnode *l = parse_math2(p);
  while (l && is_op(cur(p), "~")) {
    int line = cur(p)->line;
    p->pos++;
    jnode *r = parse_math2(p);
    if (!r) return NULL;
    l = binop(p, OP_CONCAT, l, r, line);
  }
  return l;
}

static jnode *parse_pow(P *p);
static jnode *parse_math2(P *p) {
  jnode *l = parse_pow(p);
  while (l) {
    int op = is_op(cur(p), "*") ? OP_MUL : is_op(cur(p), "/") ? OP_DIV
             : is_op(cur(p), "//") ? OP_FLOORDIV : is_op(cur(p), "%") ? OP_MOD : -1;
    if (op < 0) break;
    int line = cur(p)->line;
    p->pos++;
    jnode *r = parse_pow(p);
    if (!r) return NULL;
    l = binop(p, op, l, r, line);
  }
  return l;
}

static jnode *parse_pow(P *p) {
  jnode *l = parse_unary(p, 1);
  while (l && is_op(cur(p), "**")) {
    int line = cur(p)->line;
    p->pos++;
    jnode *r = parse_unary(p, 1);
    if (!r) return NULL;
    l = binop(p, OP_POW, l, r, line);
  }
  return l;
}

static jnode *parse_unary(P *p, int with_filter) {
  if (enter(p)) return NULL;
  jnode *n;
  int line = cur(p)->line;
  if (is_op(cur(p), "-") || is_op(cur(p), "+")) {
    int neg = is_op(cur(p), "-");
    p->pos++;
    n = mk(p, neg ? N_NEG : N_POS, line);
    if (!n || !(n->a = parse_unary(p, 0))) return NULL;
  } else {
    n = parse_primary(p);
  }
  if (n) n = parse_postfix(p, n);
  if (n && with_filter) n = parse_filter_expr(p, n);
  p->depth--;
  return n;
}

static jnode *mk_const(P *p, jv v, int line) {
  jnode *n = mk(p, N_CONST, line);
  if (n) n->val = v;
  return n;
}

static jnode *parse_primary(P *p) {
  tok *t = cur(p);
  char b[64];
  switch (t->type) {
  case T_NAME:
    p->pos++;
    if (is_name(t, "true") || is_name(t, "True")) return mk_const(p, jv_bool(1), t->line);
    if (is_name(t, "false") || is_name(t, "False")) return mk_const(p, jv_bool(0), t->line);
    if (is_name(t, "none") || is_name(t, "None")) return mk_const(p, jv_none(), t->line);
    {
      jnode *n = mk(p, N_NAME, t->line);
      if (n && !(n->name = tok_str(p, t))) return NULL;
      return n;
    }
  case T_STRING: {
    /* adjacent string literals concatenate */
    size_t total = 0, k = p->pos;
    while (k < p->nt && p->t[k].type == T_STRING) total += p->t[k++].n;
    char *buf = ja_alloc(p->a, total + 1);
    if (!buf) return pfail(p, t->line, "out of memory"), NULL;
    size_t o = 0;
    while (p->pos < k) {
      memcpy(buf + o, p->t[p->pos].p, p->t[p->pos].n);
      o += p->t[p->pos].n;
      p->pos++;
    }
    jstr *s = js_new(p->a, buf, o);
    if (!s) return pfail(p, t->line, "out of memory"), NULL;
    return mk_const(p, jv_strv(s), t->line);
  }
  case T_INT: p->pos++; return mk_const(p, jv_int(t->i), t->line);
  case T_FLOAT: p->pos++; return mk_const(p, jv_float(t->f), t->line);
  case T_OP:
    if (is_op(t, "(")) {
      p->pos++;
      jnode *n = parse_tuple(p, 1, 1, NULL);
      if (!n || expect_op(p, ")")) return NULL;
      return n;
    }
    if (is_op(t, "[")) {
      p->pos++;
      nlist items = {0};
      while (!is_op(cur(p), "]")) {
        if (items.n && expect_op(p, ",")) return NULL;
        if (is_op(cur(p), "]")) break;
        jnode *e = parse_expr(p, 1);
        if (!e || nl_add(p, &items, e)) return NULL;
      }
      p->pos++;
      jnode *n = mk(p, N_LIST, t->line);
      if (!n) return NULL;
      n->items = items.v;
      n->n_items = items.n;
      return n;
    }
    if (is_op(t, "{")) {
      p->pos++;
      nlist items = {0};
      while (!is_op(cur(p), "}")) {
        if (items.n && expect_op(p, ",")) return NULL;
        if (is_op(cur(p), "}")) break;
        jnode *k = parse_expr(p, 1);
        if (!k || expect_op(p, ":")) return NULL;
        jnode *v = parse_expr(p, 1);
        if (!v || nl_add(p, &items, k) || nl_add(p, &items, v)) return NULL;
      }
      p->pos++;
      jnode *n = mk(p, N_DICT, t->line);
      if (!n) return NULL;
      n->items = items.v;
      n->n_items = items.n;
      return n;
    }
    break;
  default: break;
  }
  return pfail(p, t->line, "unexpected %s", tok_desc(t, b, sizeof b)), NULL;
}

/* parse_tuple: comma-separated expressions; one without a comma is itself */
static jnode *parse_tuple(P *p, int with_condexpr, int explicit_parens, const char *extra_end) {
  int line = cur(p)->line;
  nlist items = {0};
  int is_tuple = 0;
  while (1) {
    if (items.n) {
      if (!is_op(cur(p), ",")) break;
      p->pos++;
      is_tuple = 1;
    }
    tok *t = cur(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || t->type == T_EOF ||
        (explicit_parens && is_op(t, ")")) || (extra_end && is_name(t, extra_end)))
      break;
    jnode *e = parse_expr(p, with_condexpr);
    if (!e || nl_add(p, &items, e)) return NULL;
  }
  if (!is_tuple) {
    if (items.n) return items.v[0];
    if (!explicit_parens) {
      char b[64];
      return pfail(p, line, "expected an expression, got %s", tok_desc(cur(p), b, sizeof b)), NULL;
    }
  }
  jnode *n = mk(p, N_TUPLE, line);
  if (!n) return NULL;
  n->items = items.v;
  n->n_items = items.n;
  return n;
}

/* ( args ) into n: positional in items, name=value in kw_*, *a and **k */
static int parse_call_args(P *p, jnode *n) {
  if (expect_op(p, "(")) return -1;
  nlist pos = {0}, kv = {0};
  nlist kn = {0};
  while (!is_op(cur(p), ")")) {
    if (pos.n + kv.n + (n->star != NULL) + (n->dstar != NULL) && expect_op(p, ",")) return -1;
    if (is_op(cur(p), ")")) break;
    if (is_op(cur(p), "*")) {
      p->pos++;
      if (!(n->star = parse_expr(p, 1))) return -1;
    } else if (is_op(cur(p), "**")) {
      p->pos++;
      if (!(n->dstar = parse_expr(p, 1))) return -1;
    } else if (cur(p)->type == T_NAME && is_op(peek(p, 1), "=")) {
      jnode *name = mk(p, N_NAME, cur(p)->line);
      if (!name || !(name->name = tok_str(p, cur(p)))) return -1;
      p->pos += 2;
      jnode *v = parse_expr(p, 1);
      if (!v || nl_add(p, &kv, v) || nl_add(p, &kn, name)) return -1;
    } else {
      if (kv.n) return pfail(p, cur(p)->line, "positional argument follows keyword argument");
      jnode *v = parse_expr(p, 1);
      if (!v || nl_add(p, &pos, v)) return -1;
    }
  }
  p->pos++;
  n->items = pos.v;
  n->n_items = pos.n;
  n->kw_vals = kv.v;
  n->n_kw = kv.n;
  if (kv.n) {
    n->kw_names = ja_alloc(p->a, (size_t)kv.n * sizeof(char *));
    if (!n->kw_names) return pfail(p, 0, "out of memory");
    for (int i = 0; i < kv.n; i++) n->kw_names[i] = kn.v[i]->name;
  }
  return 0;
}

static jnode *parse_subscript(P *p, jnode *obj) {
  tok *t = cur(p);
  if (is_op(t, ".")) {
    p->pos++;
    tok *a = cur(p);
    if (a->type == T_NAME) {
      p->pos++;
      jnode *n = mk(p, N_ATTR, t->line);
      if (!n) return NULL;
      n->a = obj;
      if (!(n->name = tok_str(p, a))) return NULL;
      return n;
    }
    if (a->type == T_INT) {
      p->pos++;
      jnode *n = mk(p, N_ITEM, t->line);
      if (!n || !(n->b = mk_const(p, jv_int(a->i), a->line))) return NULL;
      n->a = obj;
      return n;
    }
    char b[64];
    return pfail(p, a->line, "expected name or number, got %s", tok_desc(a, b, sizeof b)), NULL;
  }
  /* [ ... ] with slices and tuples */
  p->pos++;
  nlist args = {0};
  jnode *slice = NULL;
  while (!is_op(cur(p), "]")) {
    if (args.n && expect_op(p, ",")) return NULL;
    jnode *arg;
    /* parse_subscribed */
    jnode *start = NULL;
    if (!is_op(cur(p), ":")) {
      if (!(start = parse_expr(p, 1))) return NULL;
      if (!is_op(cur(p), ":")) {
        arg = start;
        goto add;
      }
    }
    p->pos++; /* the ':' */
    arg = mk(p, N_SLICE, t->line);
    if (!arg) return NULL;
    arg->b = start;
    if (!is_op(cur(p), "]") && !is_op(cur(p), ",") && !is_op(cur(p), ":"))
      if (!(arg->c = parse_expr(p, 1))) return NULL;
    if (is_op(cur(p), ":")) {
      p->pos++;
      if (!is_op(cur(p), "]") && !is_op(cur(p), ","))
        if (!(arg->d = parse_expr(p, 1))) return NULL;
    }
    slice = arg;
  add:
    if (nl_add(p, &args, arg)) return NULL;
  }
  p->pos++;
  if (args.n == 0) return pfail(p, t->line, "expected an index in []"), NULL;
  if (args.n == 1 && slice) {
    slice->a = obj;
    return slice;
  }
  if (slice) return pfail(p, t->line, "a slice cannot be part of a tuple index"), NULL;
  jnode *n = mk(p, N_ITEM, t->line);
  if (!n) return NULL;
  n->a = obj;
  if (args.n == 1) {
    n->b = args.v[0];
  } else {
    jnode *tu = mk(p, N_TUPLE, t->line);
    if (!tu) return NULL;
    tu->items = args.v;
    tu->n_items = args.n;
    n->b = tu;
  }
  return n;
}

static jnode *parse_call(P *p, jnode *callee) {
  jnode *n = mk(p, N_CALL, cur(p)->line);
  if (!n) return NULL;
  n->a = callee;
  if (parse_call_args(p, n)) return NULL;
  for (int i = 0; i < n->n_kw; i++)
    for (int k = 0; k < i; k++)
      if (strcmp(n->kw_names[i], n->kw_names[k]) == 0)
        return pfail(p, n->line, "keyword argument repeated: %s", n->kw_names[i]), NULL;
  return n;
}

static jnode *parse_postfix(P *p, jnode *n) {
  while (n) {
    if (is_op(cur(p), ".") || is_op(cur(p), "[")) n = parse_subscript(p, n);
    else if (is_op(cur(p), "(")) n = parse_call(p, n);
    else break;
  }
  return n;
}

static jnode *parse_filter(P *p, jnode *operand, int start_inline) {
  /* after '|' (or at the filter name in a filter block) */
  if (!start_inline) p->pos++;
  tok *t = cur(p);
  if (t->type != T_NAME) {
    char b[64];
    return pfail(p, t->line, "expected a filter name, got %s", tok_desc(t, b, sizeof b)), NULL;
  }
  jnode *n = mk(p, N_FILTER, t->line);
  if (!n || !(n->name = tok_str(p, t))) return NULL;
  p->pos++;
  while (is_op(cur(p), ".") && peek(p, 1)->type == T_NAME) { /* dotted filter names */
    p->pos++;
    const char *part = tok_str(p, cur(p));
    if (!part) return NULL;
    size_t l1 = strlen(n->name), l2 = strlen(part);
    char *joined = ja_alloc(p->a, l1 + l2 + 2);
    if (!joined) return pfail(p, t->line, "out of memory"), NULL;
    memcpy(joined, n->name, l1);
    joined[l1] = '.';
    memcpy(joined + l1 + 1, part, l2 + 1);
    n->name = joined;
    p->pos++;
  }
  if (!jb_has_filter(n->name)) return pfail(p, t->line, "No filter named '%s'.", n->name), NULL;
  n->a = operand;
  if (is_op(cur(p), "(") && parse_call_args(p, n)) return NULL;
  return n;
}

static jnode *parse_filter_expr(P *p, jnode *n) {
  while (n) {
    tok *t = cur(p);
    if (is_op(t, "|")) {
      n = parse_filter(p, n, 0);
    } else if (is_name(t, "is")) {
      p->pos++;
      jnode *x = mk(p, N_TEST, t->line);
      if (!x) return NULL;
      x->a = n;
      if (is_name(cur(p), "not")) {
        x->neg = 1;
        p->pos++;
      }
      tok *nm = cur(p);
      if (nm->type != T_NAME) {
        char b[64];
        return pfail(p, nm->line, "expected a test name, got %s", tok_desc(nm, b, sizeof b)), NULL;
      }
      if (!(x->name = tok_str(p, nm))) return NULL;
      p->pos++;
      while (is_op(cur(p), ".") && peek(p, 1)->type == T_NAME) p->pos += 2;
      if (!jb_has_test(x->name)) return pfail(p, nm->line, "No test named '%s'.", x->name), NULL;
      tok *a = cur(p);
      if (is_op(a, "(")) {
        if (parse_call_args(p, x)) return NULL;
      } else if ((a->type == T_NAME || a->type == T_STRING || a->type == T_INT ||
                  a->type == T_FLOAT || is_op(a, "[") || is_op(a, "{")) &&
                 !is_name(a, "else") && !is_name(a, "or") && !is_name(a, "and")) {
        if (is_name(a, "is")) return pfail(p, a->line, "You cannot chain multiple tests with is"), NULL;
        jnode *arg = parse_primary(p);
        if (arg) arg = parse_postfix(p, arg);
        if (!arg) return NULL;
        x->items = ja_alloc(p->a, sizeof(jnode *));
        if (!x->items) return pfail(p, a->line, "out of memory"), NULL;
        x->items[0] = arg;
        x->n_items = 1;
      }
      n = x;
    } else if (is_op(t, "(")) {
      n = parse_call(p, n);
    } else {
      break;
    }
  }
  return n;
}

/* assignment targets: a name, a tuple of names, or (with_ns) name.attr */
static jnode *parse_target(P *p, int with_ns, const char *extra_end) {
  int line = cur(p)->line;
  nlist names = {0};
  int tuple = 0;
  int paren = 0;
  if (is_op(cur(p), "(")) {
    paren = 1;
    p->pos++;
  }
  while (1) {
    tok *t = cur(p);
    if (t->type != T_NAME) {
      char b[64];
      return pfail(p, t->line, "can't assign to %s", tok_desc(t, b, sizeof b)), NULL;
    }
    jnode *n;
    if (with_ns && is_op(peek(p, 1), ".") && peek(p, 2)->type == T_NAME) {
      n = mk(p, N_ATTR, t->line);
      if (!n) return NULL;
      jnode *base = mk(p, N_NAME, t->line);
      if (!base || !(base->name = tok_str(p, t))) return NULL;
      n->a = base;
      if (!(n->name = tok_str(p, peek(p, 2)))) return NULL;
      p->pos += 3;
    } else {
      n = mk(p, N_NAME, t->line);
      if (!n || !(n->name = tok_str(p, t))) return NULL;
      p->pos++;
    }
    if (nl_add(p, &names, n)) return NULL;
    if (!is_op(cur(p), ",")) break;
    p->pos++;
    tuple = 1;
    if ((paren && is_op(cur(p), ")")) || (extra_end && is_name(cur(p), extra_end)) ||
        is_op(cur(p), "="))
      break;
  }
  if (paren && expect_op(p, ")")) return NULL;
  if (!tuple) return names.v[0];
  jnode *n = mk(p, N_TUPLE, line);
  if (!n) return NULL;
  n->items = names.v;
  n->n_items = names.n;
  return n;
}

static jnode *subparse(P *p, const char *const *ends, const char **ended);

/* `{% name` has been consumed up to the name; the body runs until one of ends */
static jnode *parse_body(P *p, const char *const *ends, const char **ended) {
  if (enter(p)) return NULL;
  jnode *b = subparse(p, ends, ended);
  p->depth--;
  return b;
}

static int parse_params(P *p, jnode *n) {
  /* ( a, b=1, ... ) */
  if (expect_op(p, "(")) return -1;
  nlist names = {0}, defs = {0};
  while (!is_op(cur(p), ")")) {
    if (names.n && expect_op(p, ",")) return -1;
    if (is_op(cur(p), ")")) break;
    tok *t = cur(p);
    if (t->type != T_NAME) {
      char b[64];
      return pfail(p, t->line, "expected a parameter name, got %s", tok_desc(t, b, sizeof b));
    }
    jnode *nm = mk(p, N_NAME, t->line);
    if (!nm || !(nm->name = tok_str(p, t))) return -1;
    p->pos++;
    jnode *d = NULL;
    if (is_op(cur(p), "=")) {
      p->pos++;
      if (!(d = parse_expr(p, 1))) return -1;
    } else if (defs.n && defs.v[defs.n - 1]) {
      return pfail(p, t->line, "non-default argument follows default argument");
    }
    if (nl_add(p, &names, nm) || nl_add(p, &defs, d)) return -1;
  }
  p->pos++;
  n->n_params = names.n;
  n->items = defs.v;
  n->n_items = defs.n;
  if (names.n) {
    n->params = ja_alloc(p->a, (size_t)names.n * sizeof(char *));
    if (!n->params) return pfail(p, 0, "out of memory");
    for (int i = 0; i < names.n; i++) n->params[i] = names.v[i]->name;
  }
  return 0;
}

static jnode *parse_filter_chain(P *p) {
  jnode *f = parse_filter(p, NULL, 1);
  while (f && is_op(cur(p), "|")) f = parse_filter(p, f, 0);
  return f;
}

/* 1 when the tree below n reads the variable `name` (a macro's varargs, kwargs). */
static int reads_name(const jnode *n, const char *name) {
  if (!n) return 0;
  if (n->kind == N_NAME && strcmp(n->name, name) == 0) return 1;
  const jnode *kids[] = {n->a, n->b, n->c, n->d, n->e, n->star, n->dstar};
  for (size_t i = 0; i < sizeof kids / sizeof kids[0]; i++)
    if (reads_name(kids[i], name)) return 1;
  for (int i = 0; i < n->n_items; i++)
    if (reads_name(n->items[i], name)) return 1;
  for (int i = 0; i < n->n_kw; i++)
    if (reads_name(n->kw_vals[i], name)) return 1;
  return 0;
}

/* 1 when a statement tree defines a macro or call block: the closure keeps the scope it was
 * defined in, so a for loop around it needs a fresh scope per iteration. */
static int defines_closure(const jnode *n) {
  if (!n) return 0;
  if (n->kind == N_MACRO || n->kind == N_CALLBLOCK) return 1;
  if (n->kind == N_BODY) {
    for (int i = 0; i < n->n_items; i++)
      if (defines_closure(n->items[i])) return 1;
    return 0;
  }
  if (n->kind == N_IF) return defines_closure(n->b) || defines_closure(n->c);
  if (n->kind == N_FOR) return defines_closure(n->d) || defines_closure(n->e);
  if (n->kind == N_SETBLOCK || n->kind == N_FILTERBLOCK || n->kind == N_WITH) return defines_closure(n->b);
  return 0;
}

static jnode *parse_statement(P *p) {
  tok *t = cur(p);
  int line = t->line;
  char b[64];
  if (t->type != T_NAME) return pfail(p, line, "tag name expected, got %s", tok_desc(t, b, sizeof b)), NULL;
  p->pos++;
  const char *ended;
  if (is_name(t, "if")) {
    jnode *root = mk(p, N_IF, line), *n = root;
    if (!n || !(n->a = parse_tuple(p, 0, 0, NULL)) || expect_end(p, T_BLOCK_END)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    while (1) {
      if (!(n->b = parse_body(p, ends, &ended))) return NULL;
      if (strcmp(ended, "elif") == 0) {
        jnode *e = mk(p, N_IF, cur(p)->line);
        if (!e || !(e->a = parse_tuple(p, 0, 0, NULL)) || expect_end(p, T_BLOCK_END)) return NULL;
        n->c = e;
        n = e;
        continue;
      }
      if (strcmp(ended, "else") == 0) {
        static const char *const ends2[] = {"endif", NULL};
        if (expect_end(p, T_BLOCK_END) || !(n->c = parse_body(p, ends2, &ended))) return NULL;
      }
      break;
    }
    return expect_end(p, T_BLOCK_END) ? NULL : root;
  }
  if (is_name(t, "for")) {
    jnode *n = mk(p, N_FOR, line);
    if (!n || !(n->a = parse_target(p, 0, "in"))) return NULL;
    if (!is_name(cur(p), "in")) return pfail(p, cur(p)->line, "expected 'in' in the for loop"), NULL;
    p->pos++;
    if (!(n->b = parse_tuple(p, 0, 0, "recursive"))) return NULL;
    if (is_name(cur(p), "if")) {
      p->pos++;
      if (!(n->c = parse_expr(p, 1))) return NULL;
    }
    if (is_name(cur(p), "recursive"))
      return pfail(p, cur(p)->line, "recursive for loops are not supported"), NULL;
    if (expect_end(p, T_BLOCK_END)) return NULL;
    static const char *const ends[] = {"endfor", "else", NULL};
    p->loop_depth++;
    n->d = parse_body(p, ends, &ended);
    p->loop_depth--;
    if (!n->d) return NULL;
    n->op = (uint8_t)defines_closure(n->d);
    if (strcmp(ended, "else") == 0) {
      static const char *const ends2[] = {"endfor", NULL};
      if (expect_end(p, T_BLOCK_END) || !(n->e = parse_body(p, ends2, &ended))) return NULL;
    }
    return expect_end(p, T_BLOCK_END) ? NULL : n;
  }
  if (is_name(t, "set")) {
    jnode *target = parse_target(p, 1, NULL);
    if (!target) return NULL;
    if (is_op(cur(p), "=")) {
      p->pos++;
      jnode *n = mk(p, N_SET, line);
      if (!n) return NULL;
      n->a = target;
      if (!(n->b = parse_tuple(p, 1, 0, NULL)) || expect_end(p, T_BLOCK_END)) return NULL;
      return n;
    }
    jnode *n = mk(p, N_SETBLOCK, line);
    if (!n) return NULL;
    n->a = target;
    if (is_op(cur(p), "|")) {
      p->pos++;
      if (!(n->c = parse_filter_chain(p))) return NULL;
    }
    static const char *const ends[] = {"endset", NULL};
    if (expect_end(p, T_BLOCK_END) || !(n->b = parse_body(p, ends, &ended)) ||
        expect_end(p, T_BLOCK_END))
      return NULL;
    return n;
  }
  if (is_name(t, "macro")) {
    jnode *n = mk(p, N_MACRO, line);
    if (!n) return NULL;
    if (cur(p)->type != T_NAME) return pfail(p, line, "expected a macro name"), NULL;
    if (!(n->name = tok_str(p, cur(p)))) return NULL;
    p->pos++;
    if (parse_params(p, n) || expect_end(p, T_BLOCK_END)) return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    int saved = p->loop_depth;
    p->loop_depth = 0;
    n->b = parse_body(p, ends, &ended);
    p->loop_depth = saved;
    if (!n->b || expect_end(p, T_BLOCK_END)) return NULL;
    /* Jinja lets a macro take extra arguments only when its body reads varargs / kwargs */
    n->op = (uint8_t)(reads_name(n->b, "varargs") | (reads_name(n->b, "kwargs") << 1));
    return n;
  }
  if (is_name(t, "call")) {
    jnode *n = mk(p, N_CALLBLOCK, line);
    if (!n) return NULL;
    if (is_op(cur(p), "(") && parse_params(p, n)) return NULL;
    jnode *call = parse_expr(p, 1);
    if (!call) return NULL;
    if (call->kind != N_CALL) return pfail(p, line, "expected a call in the call block"), NULL;
    n->a = call;
    static const char *const ends[] = {"endcall", NULL};
    if (expect_end(p, T_BLOCK_END) || !(n->b = parse_body(p, ends, &ended)) ||
        expect_end(p, T_BLOCK_END))
      return NULL;
    n->op = (uint8_t)(reads_name(n->b, "varargs") | (reads_name(n->b, "kwargs") << 1));
    return n;
  }
  if (is_name(t, "filter")) {
    jnode *n = mk(p, N_FILTERBLOCK, line);
    if (!n || !(n->a = parse_filter_chain(p))) return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    if (expect_end(p, T_BLOCK_END) || !(n->b = parse_body(p, ends, &ended)) ||
        expect_end(p, T_BLOCK_END))
      return NULL;
    return n;
  }
  if (is_name(t, "with")) {
    jnode *n = mk(p, N_WITH, line);
    if (!n) return NULL;
    nlist items = {0};
    while (cur(p)->type != T_BLOCK_END) {
      if (items.n && expect_op(p, ",")) return NULL;
      jnode *target = parse_target(p, 0, NULL);
      if (!target || expect_op(p, "=")) return NULL;
      jnode *v = parse_expr(p, 1);
      if (!v || nl_add(p, &items, target) || nl_add(p, &items, v)) return NULL;
    }
    n->items = items.v;
    n->n_items = items.n;
    static const char *const ends[] = {"endwith", NULL};
    if (expect_end(p, T_BLOCK_END) || !(n->b = parse_body(p, ends, &ended)) ||
        expect_end(p, T_BLOCK_END))
      return NULL;
    return n;
  }
  if (is_name(t, "generation")) {
    /* transformers' AssistantTracker: marks assistant text, renders its body as is */
    static const char *const ends[] = {"endgeneration", NULL};
    jnode *n;
    if (expect_end(p, T_BLOCK_END) || !(n = parse_body(p, ends, &ended)) ||
        expect_end(p, T_BLOCK_END))
      return NULL;
    return n;
  }
  if (is_name(t, "print")) {
    jnode *n = mk(p, N_OUT, line);
    if (!n || !(n->a = parse_tuple(p, 1, 0, NULL)) || expect_end(p, T_BLOCK_END)) return NULL;
    return n;
  }
  if (is_name(t, "break") || is_name(t, "continue")) {
    if (p->loop_depth == 0)
      return pfail(p, line, "'%s' outside of a for loop", is_name(t, "break") ? "break" : "continue"), NULL;
    jnode *n = mk(p, is_name(t, "break") ? N_BREAK : N_CONTINUE, line);
    if (!n || expect_end(p, T_BLOCK_END)) return NULL;
    return n;
  }
  return pfail(p, line, "Encountered unknown tag '%.*s'.", (int)(t->n > 40 ? 40 : t->n), t->p), NULL;
}

/* Statements and text until a block tag named in ends (NULL: the end of the template); the
 * tag's name is consumed and returned in *ended, its block end is not. */
static jnode *subparse(P *p, const char *const *ends, const char **ended) {
  nlist body = {0};
  int line = cur(p)->line;
  while (1) {
    tok *t = cur(p);
    if (t->type == T_EOF) {
      if (ends) {
        return pfail(p, t->line, "unexpected end of template: expected '%s'", ends[0]), NULL;
      }
      break;
    }
    if (t->type == T_DATA) {
      jnode *n = mk(p, N_TEXT, t->line);
      jstr *s = js_new(p->a, t->p, t->n);
      if (!n || !s) return pfail(p, t->line, "out of memory"), NULL;
      n->val = jv_strv(s);
      if (nl_add(p, &body, n)) return NULL;
      p->pos++;
    } else if (t->type == T_VAR_BEGIN) {
      p->pos++;
      jnode *n = mk(p, N_OUT, t->line);
      if (!n || !(n->a = parse_tuple(p, 1, 0, NULL)) || expect_end(p, T_VAR_END) ||
          nl_add(p, &body, n))
        return NULL;
    } else if (t->type == T_BLOCK_BEGIN) {
      p->pos++;
      tok *nm = cur(p);
      if (ends && nm->type == T_NAME) {
        int hit = 0;
        for (int i = 0; ends[i]; i++)
          if (is_name(nm, ends[i])) {
            *ended = ends[i];
            hit = 1;
          }
        if (hit) {
          p->pos++;
          break;
        }
      }
      static const char *const stray[] = {"endif", "endfor", "endmacro", "endset", "endcall",
                                          "endfilter", "endwith", "endgeneration", "else",
                                          "elif", NULL};
      for (int i = 0; stray[i]; i++)
        if (is_name(nm, stray[i]))
          return pfail(p, nm->line, "Encountered unknown tag '%s'.%s", stray[i],
                       ends ? "" : " (no block is open)"), NULL;
      jnode *n = parse_statement(p);
      if (!n || nl_add(p, &body, n)) return NULL;
    } else {
      char b[64];
      return pfail(p, t->line, "unexpected %s", tok_desc(t, b, sizeof b)), NULL;
    }
  }
  jnode *n = mk(p, N_BODY, line);
  if (!n) return NULL;
  n->items = body.v;
  n->n_items = body.n;
  return n;
}

int weir_jinja_parse(const char *src, size_t len, weir_jinja_template **out,
                     weir_jinja_error *err) {
  if (err) memset(err, 0, sizeof *err);
  if (!out || (!src && len)) return WEIR_E_INVAL;
  *out = NULL;
  weir_jinja_template *t = calloc(1, sizeof *t);
  if (!t) return WEIR_E_NOMEM;
  /* Newlines normalized to \n, one trailing newline dropped (keep_trailing_newline=False). */
  char *norm = ja_alloc(&t->ar, len + 1);
  if (!norm) {
    free(t);
    return WEIR_E_NOMEM;
  }
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\r') {
      norm[n++] = '\n';
      if (i + 1 < len && src[i + 1] == '\n') i++;
    } else {
      norm[n++] = src[i];
    }
  }
  if (n > 0 && norm[n - 1] == '\n') n--;
  norm[n] = '\0';
  P p = {.a = &t->ar, .src = norm, .len = n, .err = err};
  int rc = WEIR_E_FORMAT;
  if (lex(&p) == 0) {
    t->root = subparse(&p, NULL, NULL);
    if (t->root && !p.failed) rc = 0;
  }
  if (rc && !p.failed && err) snprintf(err->msg, sizeof err->msg, "out of memory");
  free(p.t);
  if (rc) {
    if (err) jv_utf8_clean(err->msg);
    if (err && strcmp(err->msg, "out of memory") == 0) rc = WEIR_E_NOMEM;
    weir_jinja_template_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

void weir_jinja_template_free(weir_jinja_template *t) {
  if (!t) return;
  ja_free(&t->ar);
  free(t);
}
