/* The Jinja engine's values: arenas, strings, lists, dicts, Python's str()/repr() of them,
 * json.dumps, and JSON text and cJSON values read as json.loads would (jinja_internal.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"
#include "util/utf8.h"
#include "util/err.h"
#include "weir/status.h"

/* ---- arenas ---- */

void *ja_alloc(jarena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  jchunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 64 * 1024 - sizeof(jchunk) ? n : 64 * 1024 - sizeof(jchunk);
    if (a->cap && a->total + cap + sizeof(jchunk) > a->cap) {
      a->over = 1;
      return NULL;
    }
    c = malloc(sizeof(jchunk) + cap);
    if (!c) return NULL;
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
    a->total += cap + sizeof(jchunk);
  }
  void *p = c->mem + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

void ja_free(jarena *a) {
  for (jchunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  a->head = NULL;
  a->total = 0;
}

/* ---- strings, lists, dicts ---- */

jstr *js_new(jarena *a, const char *p, size_t n) {
  if (n > (size_t)1 << 40) return NULL;
  jstr *s = ja_alloc(a, sizeof(jstr) + n + 1);
  if (!s) return NULL;
  s->len = n;
  s->ascii = 1;
  if (n) memcpy(s->p, p, n);
  s->p[n] = '\0';
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] >= 0x80) {
      s->ascii = 0;
      break;
    }
  return s;
}

jstr *js_cstr(jarena *a, const char *p) { return js_new(a, p, strlen(p)); }

size_t js_ncp(const jstr *s) {
  if (s->ascii) return s->len;
  size_t n = 0;
  for (size_t i = 0; i < s->len; i++)
    if (((unsigned char)s->p[i] & 0xC0) != 0x80) n++;
  return n;
}

jlist *jl_new(jarena *a, size_t n) {
  if (n > ((size_t)1 << 32)) return NULL;
  jlist *l = ja_alloc(a, sizeof(jlist));
  if (!l) return NULL;
  l->n = n;
  l->v = n ? ja_alloc(a, n * sizeof(jv)) : NULL;
  if (n && !l->v) return NULL;
  return l;
}

jdict *jd_new(jarena *a) { return ja_alloc(a, sizeof(jdict)); }

jv *jd_get(const jdict *d, jv k) {
  for (size_t i = 0; i < d->n; i++)
    if (jv_equal(d->k[i], k)) return &d->v[i];
  return NULL;
}

jv *jd_get_str(const jdict *d, const char *k) {
  size_t kl = strlen(k);
  for (size_t i = 0; i < d->n; i++)
    if (d->k[i].t == JV_STR && d->k[i].s->len == kl && memcmp(d->k[i].s->p, k, kl) == 0)
      return &d->v[i];
  return NULL;
}

int jd_set(jarena *a, jdict *d, jv k, jv v) {
  jv *old = jd_get(d, k);
  if (old) {
    *old = v;
    return 0;
  }
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    jv *nk = ja_alloc(a, cap * sizeof(jv)), *nv = ja_alloc(a, cap * sizeof(jv));
    if (!nk || !nv) return -1;
    if (d->n) {
      memcpy(nk, d->k, d->n * sizeof(jv));
      memcpy(nv, d->v, d->n * sizeof(jv));
    }
    d->k = nk;
    d->v = nv;
    d->cap = cap;
  }
  d->k[d->n] = k;
  d->v[d->n] = v;
  d->n++;
  return 0;
}

int jd_set_str(jarena *a, jdict *d, const char *k, jv v) {
  jv *old = jd_get_str(d, k);
  if (old) {
    *old = v;
    return 0;
  }
  jstr *ks = js_cstr(a, k);
  if (!ks) return -1;
  return jd_set(a, d, jv_strv(ks), v);
}

/* ---- truth, equality, names ---- */

int jv_truthy(jv v) {
  switch (v.t) {
  case JV_UNDEF:
  case JV_NONE: return 0;
  case JV_BOOL: return v.b;
  case JV_INT: return v.i != 0;
  case JV_FLOAT: return v.f != 0.0;
  case JV_STR: return v.s->len != 0;
  case JV_LIST: return v.l->n != 0;
  case JV_DICT: return v.d->n != 0;
  default: return 1;
  }
}

static int is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : (double)v.b; }
static int64_t num_i(jv v) { return v.t == JV_INT ? v.i : (int64_t)v.b; }

int jv_equal(jv a, jv b) {
  if (is_num(a) && is_num(b)) {
    if (a.t == JV_FLOAT || b.t == JV_FLOAT) return num_f(a) == num_f(b);
    return num_i(a) == num_i(b);
  }
  if (a.t != b.t) return 0;
  switch (a.t) {
  case JV_UNDEF:
  case JV_NONE: return 1;
  case JV_STR: return a.s->len == b.s->len && memcmp(a.s->p, b.s->p, a.s->len) == 0;
  case JV_LIST:
    if (a.tup != b.tup || a.l->n != b.l->n) return 0;
    for (size_t i = 0; i < a.l->n; i++)
      if (!jv_equal(a.l->v[i], b.l->v[i])) return 0;
    return 1;
  case JV_DICT:
    if (a.d->n != b.d->n) return 0;
    for (size_t i = 0; i < a.d->n; i++) {
      jv *o = jd_get(b.d, a.d->k[i]);
      if (!o || !jv_equal(a.d->v[i], *o)) return 0;
    }
    return 1;
  case JV_NS: return a.d == b.d;
  case JV_FUNC: return a.fn == b.fn;
  case JV_LOOP: return a.loop == b.loop;
  default: return 0;
  }
}

const char *jv_type_name(jv v) {
  switch (v.t) {
  case JV_UNDEF: return "Undefined";
  case JV_NONE: return "NoneType";
  case JV_BOOL: return "bool";
  case JV_INT: return "int";
  case JV_FLOAT: return "float";
  case JV_STR: return "str";
  case JV_LIST: return v.l->is_range ? "range" : v.tup ? "tuple" : "list";
  case JV_DICT: return "dict";
  case JV_NS: return "Namespace";
  case JV_FUNC: return v.fn->kind == F_MACRO ? "Macro" : "builtin_function_or_method";
  case JV_LOOP: return "LoopContext";
  }
  return "object";
}

/* ---- buffers ---- */

int jb_put(jbuf *b, const char *p, size_t n, size_t max) {
  if (b->len + n > max) return -1;
  weir_buf_append(b, p, n);
  return b->oom ? -1 : 0;
}

int jb_putc(jbuf *b, char c, size_t max) { return jb_put(b, &c, 1, max); }

/* ---- numbers as Python prints them ---- */

/* repr(float): the shortest digits that read back as the same double, positional when the
 * decimal exponent is in [-4, 16), else d.ddde+XX. */
void py_float_repr(double f, char out[48]) {
  if (isnan(f)) {
    strcpy(out, "nan");
    return;
  }
  if (isinf(f)) {
    strcpy(out, f < 0 ? "-inf" : "inf");
    return;
  }
  if (f == 0) {
    strcpy(out, signbit(f) ? "-0.0" : "0.0");
    return;
  }
  char tmp[48];
  int prec;
  for (prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
    if (strtod(tmp, NULL) == f) break;
  }
  /* tmp: [-]d[.ddd]e[+-]XX */
  char digits[24];
  int nd = 0, neg = 0;
  const char *p = tmp;
  if (*p == '-') {
    neg = 1;
    p++;
  }
  for (; *p && *p != 'e'; p++)
    if (*p >= '0' && *p <= '9') digits[nd++] = *p;
  int exp = atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  char *o = out;
  if (neg) *o++ = '-';
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      *o++ = '0';
      *o++ = '.';
      for (int i = 0; i < -exp - 1; i++) *o++ = '0';
      for (int i = 0; i < nd; i++) *o++ = digits[i];
    } else {
      for (int i = 0; i <= exp; i++) *o++ = i < nd ? digits[i] : '0';
      *o++ = '.';
      if (nd > exp + 1)
        for (int i = exp + 1; i < nd; i++) *o++ = digits[i];
      else
        *o++ = '0';
    }
    *o = '\0';
  } else {
    *o++ = digits[0];
    if (nd > 1) {
      *o++ = '.';
      for (int i = 1; i < nd; i++) *o++ = digits[i];
    }
    snprintf(o, 16, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  }
}

/* ---- Python's character classes ---- */

int py_isspace(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

/* str.isprintable(): false for the categories Cc, Cf, Cs, Co, Zl, Zp and Zs but the space.
 * Unassigned code points (Cn, also non-printable to Python) are treated as printable: the
 * tables would be large and such characters do not occur in real conversations. */
static int py_isprintable(uint32_t c) {
  static const weir_uni_range np[] = {
      {0x0, 0x1f}, {0x7f, 0xa0}, {0xad, 0xad}, {0x600, 0x605}, {0x61c, 0x61c},
      {0x6dd, 0x6dd}, {0x70f, 0x70f}, {0x890, 0x891}, {0x8e2, 0x8e2}, {0x1680, 0x1680},
      {0x180e, 0x180e}, {0x2000, 0x200f}, {0x2028, 0x202f}, {0x205f, 0x2064},
      {0x2066, 0x206f}, {0x3000, 0x3000}, {0xd800, 0xf8ff}, {0xfeff, 0xfeff},
      {0xfff9, 0xfffb}, {0x110bd, 0x110bd}, {0x110cd, 0x110cd}, {0x13430, 0x1343f},
      {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a}, {0xe0001, 0xe0001}, {0xe0020, 0xe007f},
      {0xf0000, 0x10ffff}};
  for (size_t i = 0; i < sizeof np / sizeof np[0]; i++)
    if (c >= np[i].lo && c <= np[i].hi) return 0;
  return 1;
}

/* ---- str() and repr() ---- */

static int put(R *r, jbuf *b, const char *p, size_t n) {
  if (jb_put(b, p, n, r->lim->max_output) != 0)
    return jr_fail(r, b->len + n > r->lim->max_output ? WEIR_E_RANGE : WEIR_E_NOMEM,
                   b->len + n > r->lim->max_output
                       ? "a value is longer than the output limit (%zu bytes)"
                       : "out of memory",
                   r->lim->max_output);
  return 0;
}
static int puts_(R *r, jbuf *b, const char *s) { return put(r, b, s, strlen(s)); }

/* Chooses how one decoded character is written: NULL keeps its bytes, anything else replaces
 * them. `byte` is the first byte (what an invalid sequence escapes as); esc is scratch room. */
typedef const char *(*escape_fn)(uint32_t cp, int valid, unsigned char byte, int quote,
                                 char esc[16]);

/* Writes s between `quote` characters, copying runs of unescaped bytes at once. */
static int put_quoted(R *r, jbuf *b, const jstr *s, char quote, escape_fn escape) {
  if (put(r, b, &quote, 1)) return -1;
  if (jr_steps(r, s->len / 64)) return -1;
  const unsigned char *p = (const unsigned char *)s->p;
  size_t i = 0, run = 0;
  while (i < s->len) {
    uint32_t cp = p[i];
    int k = 1, valid = 1;
    if (cp >= 0x80) k = weir_utf8_next(p + i, s->len - i, &cp, &valid);
    char esc[16];
    const char *e = escape(cp, valid, p[i], quote, esc);
    if (e) {
      if (run && put(r, b, (const char *)p + i - run, run)) return -1;
      run = 0;
      if (puts_(r, b, e)) return -1;
    } else {
      run += (size_t)k;
    }
    i += (size_t)k;
  }
  if (run && put(r, b, (const char *)p + i - run, run)) return -1;
  return put(r, b, &quote, 1);
}

/* Python's repr() of a str. */
static const char *repr_escape(uint32_t cp, int valid, unsigned char byte, int quote,
                               char esc[16]) {
  if (cp == '\\') return "\\\\";
  if (cp == (uint32_t)quote) return quote == '\'' ? "\\'" : "\\\"";
  if (cp == '\n') return "\\n";
  if (cp == '\r') return "\\r";
  if (cp == '\t') return "\\t";
  if (valid && py_isprintable(cp)) return NULL;
  if (!valid) cp = byte;
  if (cp < 0x100) snprintf(esc, 16, "\\x%02x", cp);
  else if (cp < 0x10000) snprintf(esc, 16, "\\u%04x", cp);
  else snprintf(esc, 16, "\\U%08x", cp);
  return esc;
}

static int repr_str(R *r, const jstr *s, jbuf *b) {
  int has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
  return put_quoted(r, b, s, has_sq && !has_dq ? '"' : '\'', repr_escape);
}

static int str_or_repr(R *r, jv v, jbuf *b, int repr) {
  char num[96];
  if (jr_steps(r, 1)) return -1;
  switch (v.t) {
  case JV_UNDEF: return repr ? puts_(r, b, "Undefined") : 0;
  case JV_NONE: return puts_(r, b, "None");
  case JV_BOOL: return puts_(r, b, v.b ? "True" : "False");
  case JV_INT:
    snprintf(num, sizeof num, "%lld", (long long)v.i);
    return puts_(r, b, num);
  case JV_FLOAT:
    py_float_repr(v.f, num);
    return puts_(r, b, num);
  case JV_STR:
    if (repr) return repr_str(r, v.s, b);
    if (jr_steps(r, v.s->len / 64)) return -1;
    return put(r, b, v.s->p, v.s->len);
  case JV_LIST:
    if (v.l->is_range) {
      if (v.l->r_step == 1)
        snprintf(num, sizeof num, "range(%lld, %lld)", (long long)v.l->r_start, (long long)v.l->r_stop);
      else
        snprintf(num, sizeof num, "range(%lld, %lld, %lld)", (long long)v.l->r_start,
                 (long long)v.l->r_stop, (long long)v.l->r_step);
      return puts_(r, b, num);
    }
    if (r->depth++ > r->lim->max_depth) return jr_fail(r, WEIR_E_RANGE, "a value is nested too deeply to print");
    if (puts_(r, b, v.tup ? "(" : "[")) return -1;
    for (size_t i = 0; i < v.l->n; i++) {
      if (i && puts_(r, b, ", ")) return -1;
      if (str_or_repr(r, v.l->v[i], b, 1)) return -1;
    }
    if (v.tup && v.l->n == 1 && puts_(r, b, ",")) return -1;
    r->depth--;
    return puts_(r, b, v.tup ? ")" : "]");
  case JV_DICT:
  case JV_NS:
    if (r->depth++ > r->lim->max_depth) return jr_fail(r, WEIR_E_RANGE, "a value is nested too deeply to print");
    if (v.t == JV_NS && puts_(r, b, "<Namespace ")) return -1;
    if (puts_(r, b, "{")) return -1;
    for (size_t i = 0; i < v.d->n; i++) {
      if (i && puts_(r, b, ", ")) return -1;
      if (str_or_repr(r, v.d->k[i], b, 1) || puts_(r, b, ": ") ||
          str_or_repr(r, v.d->v[i], b, 1))
        return -1;
    }
    r->depth--;
    return puts_(r, b, v.t == JV_NS ? "}>" : "}");
  case JV_FUNC:
    /* Jinja's Macro repr; other callables as Python would, without an address */
    if (v.fn->kind == F_MACRO) {
      char m[160];
      snprintf(m, sizeof m, "<Macro '%.120s'>", v.fn->name);
      return puts_(r, b, m);
    }
    return puts_(r, b, "<built-in function>");
  case JV_LOOP: return puts_(r, b, "<LoopContext>");
  }
  return 0;
}

int jv_str(R *r, jv v, jbuf *b) { return str_or_repr(r, v, b, 0); }
int jv_repr(R *r, jv v, jbuf *b) { return str_or_repr(r, v, b, 1); }

int jv_to_str(R *r, jv v, jstr **out) {
  if (v.t == JV_STR) {
    *out = v.s;
    return 0;
  }
  jbuf b = {0};
  int rc = jv_str(r, v, &b);
  if (rc == 0) {
    *out = js_new(&r->ar, b.p ? b.p : "", b.len);
    if (!*out) rc = jr_fail(r, WEIR_E_NOMEM, "out of memory (memory limit %zu bytes)", r->lim->max_memory);
  }
  free(b.p);
  return rc;
}

/* ---- json.dumps ---- */

/* json.dumps: the JSON escapes, control characters as \\u, and with ensure_ascii everything
 * past ASCII as \\u (a surrogate pair above the BMP). */
static const char *json_escape_common(uint32_t cp, int ensure_ascii, char esc[16]) {
  switch (cp) {
  case '"': return "\\\"";
  case '\\': return "\\\\";
  case '\n': return "\\n";
  case '\r': return "\\r";
  case '\t': return "\\t";
  case '\b': return "\\b";
  case '\f': return "\\f";
  }
  if (cp < 0x20 || (ensure_ascii && cp > 0x7f && cp < 0x10000)) {
    snprintf(esc, 16, "\\u%04x", cp);
    return esc;
  }
  if (ensure_ascii && cp >= 0x10000) {
    uint32_t v = cp - 0x10000;
    snprintf(esc, 16, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
    return esc;
  }
  return NULL; /* DEL is ASCII: json.dumps keeps it */
}

static const char *json_escape(uint32_t cp, int valid, unsigned char byte, int quote,
                               char esc[16]) {
  (void)valid, (void)byte, (void)quote;
  return json_escape_common(cp, 0, esc);
}

static const char *json_escape_ascii(uint32_t cp, int valid, unsigned char byte, int quote,
                                     char esc[16]) {
  (void)valid, (void)byte, (void)quote;
  return json_escape_common(cp, 1, esc);
}

static int json_str(R *r, const jstr *s, jbuf *b, int ensure_ascii) {
  return put_quoted(r, b, s, '"', ensure_ascii ? json_escape_ascii : json_escape);
}

static int json_indent(R *r, jbuf *b, const char *indent, int level) {
  if (put(r, b, "\n", 1)) return -1;
  for (int i = 0; i < level; i++)
    if (puts_(r, b, indent)) return -1;
  return 0;
}

typedef struct kvi {
  jv k, v;
} kvi;

static int json_key(R *r, jv k, jbuf *b, int ensure_ascii, jstr **tmp) {
  char num[48];
  switch (k.t) {
  case JV_STR: *tmp = k.s; return 0;
  case JV_INT: snprintf(num, sizeof num, "%lld", (long long)k.i); break;
  case JV_FLOAT: py_float_repr(k.f, num); break;
  case JV_BOOL: strcpy(num, k.b ? "true" : "false"); break;
  case JV_NONE: strcpy(num, "null"); break;
  default:
    return jr_fail(r, WEIR_E_INVAL, "keys must be str, int, float, bool or None, not %s",
                   jv_type_name(k));
  }
  (void)b;
  (void)ensure_ascii;
  *tmp = js_cstr(&r->ar, num);
  return *tmp ? 0 : jr_fail(r, WEIR_E_NOMEM, "out of memory");
}

int jv_json(R *r, jv v, jbuf *b, int ensure_ascii, const char *indent, const char *item_sep,
            const char *key_sep, int sort_keys, int level) {
  char num[48];
  if (jr_steps(r, 1)) return -1;
  if (level > r->lim->max_depth) return jr_fail(r, WEIR_E_RANGE, "a value is nested too deeply for tojson");
  switch (v.t) {
  case JV_NONE: return puts_(r, b, "null");
  case JV_BOOL: return puts_(r, b, v.b ? "true" : "false");
  case JV_INT:
    snprintf(num, sizeof num, "%lld", (long long)v.i);
    return puts_(r, b, num);
  case JV_FLOAT:
    if (isnan(v.f)) return puts_(r, b, "NaN");
    if (isinf(v.f)) return puts_(r, b, v.f < 0 ? "-Infinity" : "Infinity");
    py_float_repr(v.f, num);
    return puts_(r, b, num);
  case JV_STR: return json_str(r, v.s, b, ensure_ascii);
  case JV_LIST:
    if (v.l->is_range)
      return jr_fail(r, WEIR_E_INVAL, "Object of type range is not JSON serializable");
    if (v.l->n == 0) return puts_(r, b, "[]");
    if (puts_(r, b, "[")) return -1;
    for (size_t i = 0; i < v.l->n; i++) {
      if (i && puts_(r, b, item_sep)) return -1;
      if (indent && json_indent(r, b, indent, level + 1)) return -1;
      if (jv_json(r, v.l->v[i], b, ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1))
        return -1;
    }
    if (indent && json_indent(r, b, indent, level)) return -1;
    return puts_(r, b, "]");
  case JV_DICT: {
    if (v.d->n == 0) return puts_(r, b, "{}");
    size_t n = v.d->n;
    kvi *items = ja_alloc(&r->ar, n * sizeof(kvi));
    if (!items) return jr_fail(r, WEIR_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) items[i] = (kvi){v.d->k[i], v.d->v[i]};
    if (sort_keys) {
      /* Insertion sort keeps it stable and needs no comparison callback state. */
      if (jr_steps(r, n * n / 16)) return -1;
      for (size_t i = 1; i < n; i++) {
        kvi x = items[i];
        size_t j = i;
        while (j > 0) {
          int c;
          if (jb_compare(r, items[j - 1].k, x.k, &c)) return -1;
          if (c <= 0) break;
          items[j] = items[j - 1];
          j--;
        }
        items[j] = x;
      }
    }
    if (puts_(r, b, "{")) return -1;
    for (size_t i = 0; i < n; i++) {
      jstr *ks;
      if (i && puts_(r, b, item_sep)) return -1;
      if (indent && json_indent(r, b, indent, level + 1)) return -1;
      if (json_key(r, items[i].k, b, ensure_ascii, &ks) || json_str(r, ks, b, ensure_ascii) ||
          puts_(r, b, key_sep) ||
          jv_json(r, items[i].v, b, ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1))
        return -1;
    }
    if (indent && json_indent(r, b, indent, level)) return -1;
    return puts_(r, b, "}");
  }
  default:
    return jr_fail(r, WEIR_E_INVAL, "Object of type %s is not JSON serializable", jv_type_name(v));
  }
}

/* Error messages quote template text and values cut to a length, possibly inside a UTF-8
 * sequence: what reaches a client must stay valid UTF-8. Cuts an incomplete last sequence
 * and turns any other invalid byte into '?'. */
void jv_utf8_clean(char *msg) {
  size_t n = strlen(msg), i = 0;
  while (i < n) {
    int k = weir_utf8_scan((const unsigned char *)msg + i, n - i);
    if (k > 0) {
      i += (size_t)k;
    } else if (k < 0) {
      msg[i] = '\0';
      return;
    } else {
      msg[i++] = '?';
    }
  }
}

/* ---- JSON text, read as json.loads reads it ---- */

typedef struct jp {
  jarena *a;
  const char *p, *end;
  char *err;
  size_t errlen;
  int depth;
} jp;

static int jp_fail(jp *j, const char *what) {
  weir_set_err(j->err, j->errlen, "invalid JSON: %s", what);
  return WEIR_E_FORMAT;
}

static void jp_ws(jp *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

static int hex4(const char *p, uint32_t *out) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

static int jp_string(jp *j, jstr **out) {
  j->p++; /* the opening quote */
  jbuf b = {0};
  int rc = 0;
  while (1) {
    if (j->p >= j->end) {
      rc = jp_fail(j, "unterminated string");
      break;
    }
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      break;
    }
    if (c < 0x20) {
      rc = jp_fail(j, "control character in a string");
      break;
    }
    if (c != '\\') {
      const char *s = j->p;
      while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20) j->p++;
      if (jb_put(&b, s, (size_t)(j->p - s), (size_t)-1)) {
        rc = WEIR_E_NOMEM;
        break;
      }
      continue;
    }
    if (j->end - j->p < 2) {
      rc = jp_fail(j, "unterminated escape");
      break;
    }
    char e = j->p[1];
    j->p += 2;
    char ch;
    switch (e) {
    case '"': ch = '"'; break;
    case '\\': ch = '\\'; break;
    case '/': ch = '/'; break;
    case 'b': ch = '\b'; break;
    case 'f': ch = '\f'; break;
    case 'n': ch = '\n'; break;
    case 'r': ch = '\r'; break;
    case 't': ch = '\t'; break;
    case 'u': {
      uint32_t cp, lo;
      if (j->end - j->p < 4 || hex4(j->p, &cp)) {
        rc = jp_fail(j, "bad \\u escape");
        goto done;
      }
      j->p += 4;
      if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
          j->p[1] == 'u' && hex4(j->p + 2, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        j->p += 6;
      } else if (cp >= 0xd800 && cp < 0xe000) {
        cp = 0xfffd; /* a lone surrogate has no UTF-8 form */
      }
      char u[4];
      int n = weir_utf8_put(cp, u);
      if (jb_put(&b, u, (size_t)n, (size_t)-1)) rc = WEIR_E_NOMEM;
      if (rc) goto done;
      continue;
    }
    default: rc = jp_fail(j, "bad escape"); goto done;
    }
    if (jb_put(&b, &ch, 1, (size_t)-1)) {
      rc = WEIR_E_NOMEM;
      break;
    }
  }
done:
  if (rc == 0) {
    *out = js_new(j->a, b.p ? b.p : "", b.len);
    if (!*out) rc = WEIR_E_NOMEM;
  }
  free(b.p);
  return rc;
}

static int jp_value(jp *j, jv *out) {
  jp_ws(j);
  if (j->p >= j->end) return jp_fail(j, "unexpected end");
  if (++j->depth > 200) return jp_fail(j, "nested too deeply");
  int rc = 0;
  char c = *j->p;
  if (c == '{') {
    jdict *d = jd_new(j->a);
    if (!d) return WEIR_E_NOMEM;
    j->p++;
    jp_ws(j);
    if (j->p < j->end && *j->p == '}') {
      j->p++;
    } else {
      while (1) {
        jp_ws(j);
        if (j->p >= j->end || *j->p != '"') return jp_fail(j, "expected a key");
        jstr *k;
        if ((rc = jp_string(j, &k))) return rc;
        jp_ws(j);
        if (j->p >= j->end || *j->p != ':') return jp_fail(j, "expected ':'");
        j->p++;
        jv v;
        if ((rc = jp_value(j, &v))) return rc;
        if (jd_set(j->a, d, jv_strv(k), v)) return WEIR_E_NOMEM;
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') {
          j->p++;
          continue;
        }
        if (j->p < j->end && *j->p == '}') {
          j->p++;
          break;
        }
        return jp_fail(j, "expected ',' or '}'");
      }
    }
    *out = jv_dictv(d);
  } else if (c == '[') {
    j->p++;
    size_t n = 0, cap = 0;
    jv *items = NULL;
    jp_ws(j);
    if (j->p < j->end && *j->p == ']') {
      j->p++;
    } else {
      while (1) {
        jv v;
        if ((rc = jp_value(j, &v))) return rc;
        if (n == cap) {
          cap = cap ? cap * 2 : 8;
          jv *ni = ja_alloc(j->a, cap * sizeof(jv));
          if (!ni) return WEIR_E_NOMEM;
          if (n) memcpy(ni, items, n * sizeof(jv));
          items = ni;
        }
        items[n++] = v;
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') {
          j->p++;
          continue;
        }
        if (j->p < j->end && *j->p == ']') {
          j->p++;
          break;
        }
        return jp_fail(j, "expected ',' or ']'");
      }
    }
    jlist *l = ja_alloc(j->a, sizeof(jlist));
    if (!l) return WEIR_E_NOMEM;
    l->n = n;
    l->v = items;
    *out = jv_listv(l, 0);
  } else if (c == '"') {
    jstr *s;
    if ((rc = jp_string(j, &s))) return rc;
    *out = jv_strv(s);
  } else if (j->end - j->p >= 4 && memcmp(j->p, "true", 4) == 0) {
    j->p += 4;
    *out = jv_bool(1);
  } else if (j->end - j->p >= 5 && memcmp(j->p, "false", 5) == 0) {
    j->p += 5;
    *out = jv_bool(0);
  } else if (j->end - j->p >= 4 && memcmp(j->p, "null", 4) == 0) {
    j->p += 4;
    *out = jv_none();
  } else if (c == '-' || (c >= '0' && c <= '9')) {
    const char *s = j->p;
    int is_float = 0;
    if (*j->p == '-') j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jp_fail(j, "bad number");
    while (j->p < j->end && ((*j->p >= '0' && *j->p <= '9') || *j->p == '.' || *j->p == 'e' ||
                             *j->p == 'E' || *j->p == '+' || *j->p == '-')) {
      if (*j->p == '.' || *j->p == 'e' || *j->p == 'E') is_float = 1;
      j->p++;
    }
    char num[64];
    size_t n = (size_t)(j->p - s);
    if (n >= sizeof num) {
      if (!is_float) return jp_fail(j, "integer too large");
      n = sizeof num - 1;
    }
    memcpy(num, s, n);
    num[n] = '\0';
    char *endp;
    errno = 0;
    if (is_float) {
      double f = strtod(num, &endp);
      if (*endp) return jp_fail(j, "bad number");
      *out = jv_float(f);
    } else {
      long long v = strtoll(num, &endp, 10);
      if (*endp) return jp_fail(j, "bad number");
      if (errno == ERANGE) return jp_fail(j, "integer too large");
      *out = jv_int(v);
    }
  } else {
    return jp_fail(j, "unexpected character");
  }
  j->depth--;
  return 0;
}

int jv_parse_json(jarena *a, const char *p, size_t n, jv *out, char *err, size_t errlen) {
  jp j = {a, p, p + n, err, errlen, 0};
  int rc = jp_value(&j, out);
  if (rc) return rc;
  jp_ws(&j);
  if (j.p != j.end) return jp_fail(&j, "trailing characters");
  return 0;
}

int jv_from_cjson(jarena *a, const cJSON *j, jv *out, int depth) {
  if (!j) return WEIR_E_INVAL;
  if (depth > 200) return WEIR_E_INVAL;
  if (cJSON_IsNull(j)) {
    *out = jv_none();
  } else if (cJSON_IsBool(j)) {
    *out = jv_bool(cJSON_IsTrue(j));
  } else if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (d == floor(d) && fabs(d) < 9007199254740992.0) *out = jv_int((int64_t)d);
    else *out = jv_float(d);
  } else if (cJSON_IsString(j)) {
    jstr *s = js_cstr(a, j->valuestring ? j->valuestring : "");
    if (!s) return WEIR_E_NOMEM;
    *out = jv_strv(s);
  } else if (cJSON_IsArray(j)) {
    jlist *l = jl_new(a, (size_t)cJSON_GetArraySize(j));
    if (!l) return WEIR_E_NOMEM;
    size_t i = 0;
    for (const cJSON *c = j->child; c && i < l->n; c = c->next, i++) {
      int rc = jv_from_cjson(a, c, &l->v[i], depth + 1);
      if (rc) return rc;
    }
    *out = jv_listv(l, 0);
  } else if (cJSON_IsObject(j)) {
    jdict *d = jd_new(a);
    if (!d) return WEIR_E_NOMEM;
    for (const cJSON *c = j->child; c; c = c->next) {
      jv v;
      int rc = jv_from_cjson(a, c, &v, depth + 1);
      if (rc) return rc;
      if (jd_set_str(a, d, c->string ? c->string : "", v)) return WEIR_E_NOMEM;
    }
    *out = jv_dictv(d);
  } else {
    return WEIR_E_INVAL;
  }
  return 0;
}
