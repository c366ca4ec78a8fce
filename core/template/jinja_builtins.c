/* The Jinja engine's builtins: the filters, tests, globals and the str/dict/list methods
 * published chat templates use, each with Jinja2 3.1's (and Python's) behaviour
 * (jinja_internal.h; the list is in docs/chat-templates.md). The sandbox is immutable, as
 * transformers' is: methods that would modify a list or dict (append, update, pop ...) fail
 * when called. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja_internal.h"
#include "util/utf8.h"
#include "weir/status.h"

static int oom(R *r) {
  if (r->ar.over)
    return jr_fail(r, WEIR_E_RANGE, "the template used more than %zu bytes of memory",
                   r->lim->max_memory);
  return jr_fail(r, WEIR_E_NOMEM, "out of memory");
}

static int mkstr(R *r, const char *p, size_t n, jv *out) {
  jstr *s = js_new(&r->ar, p, n);
  if (!s) return oom(r);
  *out = jv_strv(s);
  return 0;
}

static int buf_to_str(R *r, jbuf *b, jv *out) {
  int rc = mkstr(r, b->p ? b->p : "", b->len, out);
  free(b->p);
  b->p = NULL;
  return rc;
}

static int bput(R *r, jbuf *b, const char *p, size_t n) {
  if (jb_put(b, p, n, r->lim->max_output))
    return b->len + n > r->lim->max_output
               ? jr_fail(r, WEIR_E_RANGE, "a string would be longer than %zu bytes", r->lim->max_output)
               : oom(r);
  return 0;
}

/* soft_str: str(v), with Undefined as "" */
static int to_str(R *r, jv v, jstr **out) {
  if (v.t == JV_UNDEF) {
    *out = js_cstr(&r->ar, "");
    return *out ? 0 : oom(r);
  }
  return jv_to_str(r, v, out);
}

/* ---- argument binding ---- */

/* Finds the argument at position pos or named name; *out untouched and 0 when absent. */
static int arg(const jcall *a, int pos, const char *name, jv *out) {
  if (pos >= 0 && pos < a->n) {
    *out = a->pos[pos];
    return 1;
  }
  for (int i = a->nk - 1; i >= 0; i--) /* the last of repeated keywords wins */
    if (name && strcmp(a->kname[i], name) == 0) {
      *out = a->kval[i];
      return 1;
    }
  return 0;
}

static int arg_int(R *r, const jcall *a, int pos, const char *name, int64_t def, int64_t *out) {
  jv v;
  *out = def;
  if (!arg(a, pos, name, &v) || v.t == JV_NONE) return 0;
  if (v.t == JV_INT) *out = v.i;
  else if (v.t == JV_BOOL) *out = v.b;
  else return jr_fail(r, WEIR_E_INVAL, "'%s' must be an integer, not %s", name ? name : "argument", jv_type_name(v));
  return 0;
}

static int arg_bool(const jcall *a, int pos, const char *name, int def) {
  jv v;
  return arg(a, pos, name, &v) ? jv_truthy(v) : def;
}

static int arg_str(R *r, const jcall *a, int pos, const char *name, jstr **out) {
  jv v;
  *out = NULL;
  if (!arg(a, pos, name, &v) || v.t == JV_NONE) return 0;
  return to_str(r, v, out);
}

/* A Python str method's argument: a str or None, nothing else. */
static int arg_pystr(R *r, const jcall *a, int pos, const char *name, jstr **out) {
  jv v;
  *out = NULL;
  if (!arg(a, pos, name, &v) || v.t == JV_NONE) return 0;
  if (v.t == JV_UNDEF && v.hint) return jr_fail(r, WEIR_E_INVAL, "%s", v.hint);
  if (v.t != JV_STR)
    return jr_fail(r, WEIR_E_INVAL, "%s must be str or None, not %s", name ? name : "argument",
                   jv_type_name(v));
  *out = v.s;
  return 0;
}

/* ---- Unicode helpers: case mapping for Latin, Greek and Cyrillic ---- */

static uint32_t cp_upper(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c == 0xb5) return 0x39c;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x131) return 'I';
    if (c == 0x17f) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c : c - 1;
    if (c == 0x138 || c == 0x149 || c == 0x130 || c == 0x178) return c;
    return (c & 1) ? c - 1 : c;
  }
  if (c >= 0x3b1 && c <= 0x3c9) return c == 0x3c2 ? 0x3a3 : c - 32;
  if (c >= 0x3ac && c <= 0x3af) return c == 0x3ac ? 0x386 : c - 37;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}

static uint32_t cp_lower(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  if (c >= 0xc0 && c <= 0xde && c != 0xd7) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x130) return 'i';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c & 1) ? c + 1 : c;
    if (c == 0x138 || c == 0x149 || c == 0x131 || c == 0x17f) return c;
    return (c & 1) ? c : c + 1;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c == 0x386) return 0x3ac;
  if (c >= 0x388 && c <= 0x38a) return c + 37;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

static int cp_is_cased_upper(uint32_t c) { return cp_lower(c) != c; }
static int cp_is_cased_lower(uint32_t c) { return cp_upper(c) != c || c == 0xdf; }
static int cp_is_alpha(uint32_t c) { return weir_uni_is_letter(c); }
static int cp_is_alnum(uint32_t c) { return weir_uni_is_letter(c) || weir_uni_is_number(c); }

typedef struct cpv {
  uint32_t *c;
  size_t n;
} cpv;

static int decode(R *r, const jstr *s, cpv *out) {
  out->c = malloc((s->len + 1) * sizeof(uint32_t));
  if (!out->c) return oom(r);
  out->n = 0;
  size_t i = 0;
  while (i < s->len) {
    uint32_t cp;
    int k = weir_utf8_next((const unsigned char *)s->p + i, s->len - i, &cp, NULL);
    out->c[out->n++] = cp;
    i += (size_t)k;
  }
  return 0;
}

static int encode(R *r, const uint32_t *c, size_t n, jv *out) {
  char *b = malloc(n * 4 + 1);
  if (!b) return oom(r);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) o += (size_t)weir_utf8_put(c[i], b + o);
  int rc = mkstr(r, b, o, out);
  free(b);
  return rc;
}

enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_PYTITLE, CASE_JTITLE, CASE_SWAP };

static int is_jtitle_sep(uint32_t c) {
  return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
}

static int change_case(R *r, jv v, int mode, jv *out) {
  jstr *s;
  if (to_str(r, v, &s)) return -1;
  if (jr_steps(r, s->len / 16)) return -1;
  cpv cv = {0};
  if (decode(r, s, &cv)) return -1;
  uint32_t *o = malloc((cv.n * 2 + 1) * sizeof(uint32_t));
  if (!o) {
    free(cv.c);
    return oom(r);
  }
  size_t n = 0;
  int prev_cased = 0, at_start = 1;
  for (size_t i = 0; i < cv.n; i++) {
    uint32_t c = cv.c[i], m;
    switch (mode) {
    case CASE_UPPER: m = cp_upper(c); break;
    case CASE_LOWER: m = cp_lower(c); break;
    case CASE_CAPITALIZE: m = i == 0 ? cp_upper(c) : cp_lower(c); break;
    case CASE_SWAP: m = cp_is_cased_upper(c) ? cp_lower(c) : cp_upper(c); break;
    case CASE_PYTITLE:
      m = prev_cased ? cp_lower(c) : cp_upper(c);
      prev_cased = cp_is_cased_upper(c) || cp_is_cased_lower(c);
      break;
    default: /* Jinja's title: each word after - space ( { [ < gets its first char upper */
      if (is_jtitle_sep(c)) {
        m = c;
        at_start = 1;
      } else {
        m = at_start ? cp_upper(c) : cp_lower(c);
        at_start = 0;
      }
    }
    if (c == 0xdf && (mode == CASE_UPPER || (mode == CASE_CAPITALIZE && i == 0))) {
      o[n++] = 'S';
      m = 'S';
    }
    o[n++] = m;
  }
  int rc = encode(r, o, n, out);
  free(o);
  free(cv.c);
  return rc;
}

static int strippable(uint32_t c, const cpv *chars) {
  if (!chars) return py_isspace(c);
  for (size_t k = 0; k < chars->n; k++)
    if (chars->c[k] == c) return 1;
  return 0;
}

/* Python's str.strip family: chars NULL strips whitespace */
static int strip(R *r, jstr *s, jstr *chars, int left, int right, jv *out) {
  cpv cv = {0}, ch = {0};
  if (decode(r, s, &cv)) return -1;
  if (chars && decode(r, chars, &ch)) {
    free(cv.c);
    return -1;
  }
  const cpv *set = chars ? &ch : NULL;
  size_t a = 0, b = cv.n;
  while (left && a < b && strippable(cv.c[a], set)) a++;
  while (right && b > a && strippable(cv.c[b - 1], set)) b--;
  int rc = encode(r, cv.c + a, b - a, out);
  free(cv.c);
  free(ch.c);
  return rc;
}

/* ---- comparisons for sort, min, max, dictsort ---- */

int jb_compare(R *r, jv a, jv b, int *out) {
  if ((a.t == JV_INT || a.t == JV_BOOL || a.t == JV_FLOAT) &&
      (b.t == JV_INT || b.t == JV_BOOL || b.t == JV_FLOAT)) {
    if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
      int64_t x = a.t == JV_INT ? a.i : a.b, y = b.t == JV_INT ? b.i : b.b;
      *out = x < y ? -1 : x > y;
    } else {
      double x = a.t == JV_FLOAT ? a.f : a.t == JV_INT ? (double)a.i : a.b;
      double y = b.t == JV_FLOAT ? b.f : b.t == JV_INT ? (double)b.i : b.b;
      *out = x < y ? -1 : x > y;
    }
    return 0;
  }
  if (a.t == JV_STR && b.t == JV_STR) {
    size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
    int c = memcmp(a.s->p, b.s->p, n);
    *out = c < 0 ? -1 : c > 0 ? 1 : a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
    return 0;
  }
  if (a.t == JV_LIST && b.t == JV_LIST && a.tup == b.tup) {
    size_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
    for (size_t i = 0; i < n; i++) {
      if (jv_equal(a.l->v[i], b.l->v[i])) continue;
      return jb_compare(r, a.l->v[i], b.l->v[i], out);
    }
    *out = a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    return 0;
  }
  return jr_fail(r, WEIR_E_INVAL, "'<' not supported between instances of '%s' and '%s'",
                 jv_type_name(a), jv_type_name(b));
}

/* ---- globals ---- */

static int g_range(R *r, jv self, const jcall *a, jv *out) {
  (void)self;
  int64_t start = 0, stop, step = 1;
  for (int i = 0; i < a->n; i++)
    if (a->pos[i].t != JV_INT && a->pos[i].t != JV_BOOL)
      return jr_fail(r, WEIR_E_INVAL, "'%s' object cannot be interpreted as an integer",
                     jv_type_name(a->pos[i]));
#define IV(k) (a->pos[k].t == JV_INT ? a->pos[k].i : a->pos[k].b)
  if (a->n == 1) stop = IV(0);
  else if (a->n == 2 || a->n == 3) {
    start = IV(0);
    stop = IV(1);
    if (a->n == 3) step = IV(2);
  } else
    return jr_fail(r, WEIR_E_INVAL, "range expected 1 to 3 arguments, got %d", a->n);
#undef IV
  if (step == 0) return jr_fail(r, WEIR_E_INVAL, "range() arg 3 must not be zero");
  int64_t count = 0;
  if (step > 0 && stop > start) count = (int64_t)(((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1);
  if (step < 0 && start > stop) count = (int64_t)(((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)0 - (uint64_t)step) + 1);
  /* Jinja's sandbox refuses ranges over 100,000 items (MAX_RANGE) */
  if (count > 100000)
    return jr_fail(r, WEIR_E_RANGE, "Range too big. The sandbox blocks ranges larger than "
                   "MAX_RANGE (100000).");
  if (jr_steps(r, (uint64_t)count / 8)) return -1;
  jlist *l = jl_new(&r->ar, (size_t)count);
  if (!l) return oom(r);
  /* Every item lies between start and stop, but i * step alone may not fit in 64 bits
   * (range(5, -2**63, -2**63 // 10)): computed modulo 2^64, the sum is the exact item. */
  for (int64_t i = 0; i < count; i++)
    l->v[i] = jv_int((int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step));
  l->is_range = 1;
  l->r_start = start;
  l->r_stop = stop;
  l->r_step = step;
  *out = jv_listv(l, 0);
  return 0;
}

static int g_dict(R *r, jv self, const jcall *a, jv *out) {
  (void)self;
  jdict *d = jd_new(&r->ar);
  if (!d) return oom(r);
  if (a->n == 1 && a->pos[0].t == JV_DICT)
    for (size_t i = 0; i < a->pos[0].d->n; i++)
      if (jd_set(&r->ar, d, a->pos[0].d->k[i], a->pos[0].d->v[i])) return oom(r);
  for (int i = 0; i < a->nk; i++)
    if (jd_set_str(&r->ar, d, a->kname[i], a->kval[i])) return oom(r);
  *out = jv_dictv(d);
  return 0;
}

static int g_namespace(R *r, jv self, const jcall *a, jv *out) {
  if (g_dict(r, self, a, out)) return -1;
  out->t = JV_NS;
  return 0;
}

static int g_raise(R *r, jv self, const jcall *a, jv *out) {
  (void)self;
  (void)out;
  jstr *s;
  jv m = jv_strv(NULL);
  if (!arg(a, 0, "message", &m)) return jr_raise(r, "", 0);
  if (jv_to_str(r, m, &s)) return -1;
  return jr_raise(r, s->p, s->len);
}

static int g_strftime_now(R *r, jv self, const jcall *a, jv *out) {
  (void)self;
  jstr *fmt;
  if (arg_str(r, a, 0, "format", &fmt)) return -1;
  if (!fmt) return jr_fail(r, WEIR_E_INVAL, "strftime_now() missing the format argument");
  time_t t = r->lim->now >= 0 ? (time_t)r->lim->now : time(NULL);
  struct tm tm;
  if (r->lim->now >= 0) gmtime_r(&t, &tm);
  else localtime_r(&t, &tm);
  if (fmt->len > 256) return jr_fail(r, WEIR_E_INVAL, "strftime_now(): format too long");
  char buf[2048];
  size_t n = fmt->len ? strftime(buf, sizeof buf, fmt->p, &tm) : 0;
  return mkstr(r, buf, n, out);
}

static jfunc g_funcs[] = {
    {F_BUILTIN, NULL, NULL, NULL, g_range, {0}, "range"},
    {F_BUILTIN, NULL, NULL, NULL, g_dict, {0}, "dict"},
    {F_BUILTIN, NULL, NULL, NULL, g_namespace, {0}, "namespace"},
    {F_BUILTIN, NULL, NULL, NULL, g_raise, {0}, "raise_exception"},
    {F_BUILTIN, NULL, NULL, NULL, g_strftime_now, {0}, "strftime_now"},
};

int jb_global(const char *name, jv *out) {
  for (size_t i = 0; i < sizeof g_funcs / sizeof g_funcs[0]; i++)
    if (strcmp(name, g_funcs[i].name) == 0) {
      memset(out, 0, sizeof *out);
      out->t = JV_FUNC;
      out->fn = &g_funcs[i];
      return 1;
    }
  return 0;
}

/* ---- %-formatting and str.format ---- */

/* One %-conversion's flags, width and precision (Python's printf-style formatting). */
typedef struct fmt_spec {
  int left, plus, space, alt, zero;
  int64_t width; /* 0: none */
  int64_t prec;  /* -1: none */
} fmt_spec;

/* Parses the flags, width and precision after '%' up to the conversion character, which *pp
 * then points at. A width or precision that could not fit the output budget is refused
 * here (WEIR_E_RANGE), before anything is formatted: Python would build the string, but a
 * render cannot hold it anyway. '*' is not supported (Jinja2's sandbox allows it, no chat
 * template uses it). */
static int parse_fmt_spec(R *r, const char **pp, const char *e, fmt_spec *fs) {
  const char *p = *pp;
  memset(fs, 0, sizeof *fs);
  fs->prec = -1;
  for (; p < e && strchr("-+ #0", *p); p++) {
    if (*p == '-') fs->left = 1;
    else if (*p == '+') fs->plus = 1;
    else if (*p == ' ') fs->space = 1;
    else if (*p == '#') fs->alt = 1;
    else fs->zero = 1;
  }
  const int64_t lim = (int64_t)r->lim->max_output;
  for (; p < e && *p >= '0' && *p <= '9'; p++) {
    fs->width = fs->width * 10 + (*p - '0');
    if (fs->width > lim)
      return jr_fail(r, WEIR_E_RANGE, "format width is larger than the output limit (%zu bytes)",
                     r->lim->max_output);
  }
  if (p < e && *p == '.') {
    p++;
    fs->prec = 0;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
      fs->prec = fs->prec * 10 + (*p - '0');
      if (fs->prec > lim)
        return jr_fail(r, WEIR_E_RANGE,
                       "format precision is larger than the output limit (%zu bytes)",
                       r->lim->max_output);
    }
  }
  if (p < e && *p == '*') return jr_fail(r, WEIR_E_INVAL, "format: '*' width is not supported");
  if (p >= e) return jr_fail(r, WEIR_E_INVAL, "incomplete format");
  *pp = p;
  return 0;
}

/* Appends n copies of c, in chunks. */
static int put_fill(R *r, jbuf *b, char c, size_t n) {
  char chunk[256];
  memset(chunk, c, sizeof chunk);
  while (n) {
    size_t k = n < sizeof chunk ? n : sizeof chunk;
    if (bput(r, b, chunk, k)) return -1;
    n -= k;
  }
  return 0;
}

/* Appends body (its first `pre` bytes a sign or a 0x prefix; `ncp` code points wide in all)
 * padded to the spec's width: spaces on the left, spaces on the right with '-', or zeros
 * after the sign and prefix with '0'. `extra` zeros go on the end of the body (digits past
 * what snprintf was asked for); `ins` says they go before an exponent instead. */
static int put_padded(R *r, jbuf *b, const fmt_spec *fs, const char *body, size_t len,
                      size_t pre, size_t ncp, size_t extra) {
  size_t width = (size_t)fs->width, shown = ncp + extra;
  size_t pad = width > shown ? width - shown : 0;
  if (jr_steps(r, (shown + pad) / 64)) return -1;
  if (pad && !fs->left && !fs->zero && put_fill(r, b, ' ', pad)) return -1;
  if (bput(r, b, body, pre)) return -1;
  if (pad && !fs->left && fs->zero && put_fill(r, b, '0', pad)) return -1;
  /* extra zeros: before an exponent ('e', 'E') when there is one, else at the end */
  const char *ex = NULL;
  for (size_t i = pre; extra && i < len; i++)
    if (body[i] == 'e' || body[i] == 'E') {
      ex = body + i;
      break;
    }
  size_t head = ex ? (size_t)(ex - body) : len;
  if (bput(r, b, body + pre, head - pre) || put_fill(r, b, '0', extra) ||
      bput(r, b, body + head, len - head))
    return -1;
  if (pad && fs->left && put_fill(r, b, ' ', pad)) return -1;
  return 0;
}

/* %d %i %u %x %X %o, as Python: precision is a minimum digit count, '#' adds 0x / 0X / 0o. */
static int fmt_int(R *r, jbuf *b, const fmt_spec *fs, char conv, int64_t iv) {
  char body[96];
  size_t n = 0;
  uint64_t mag = iv < 0 ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
  if (iv < 0) body[n++] = '-';
  else if (fs->plus) body[n++] = '+';
  else if (fs->space) body[n++] = ' ';
  if (fs->alt && (conv == 'x' || conv == 'X' || conv == 'o')) {
    body[n++] = '0';
    body[n++] = conv == 'o' ? 'o' : conv;
  }
  size_t pre = n;
  unsigned base = conv == 'x' || conv == 'X' ? 16 : conv == 'o' ? 8 : 10;
  const char *dig = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
  char rev[72];
  size_t nd = 0;
  do {
    rev[nd++] = dig[mag % base];
    mag /= base;
  } while (mag);
  size_t lead = fs->prec > (int64_t)nd ? (size_t)fs->prec - nd : 0;
  /* the leading zeros of the precision: written as a fill between prefix and digits */
  if (lead) {
    size_t width = (size_t)fs->width, shown = pre + lead + nd;
    size_t pad = width > shown ? width - shown : 0;
    if (jr_steps(r, (shown + pad) / 64)) return -1;
    if (pad && !fs->left && !fs->zero && put_fill(r, b, ' ', pad)) return -1;
    if (bput(r, b, body, pre)) return -1;
    if (pad && !fs->left && fs->zero && put_fill(r, b, '0', pad)) return -1;
    if (put_fill(r, b, '0', lead)) return -1;
    while (nd) {
      char c = rev[--nd];
      if (bput(r, b, &c, 1)) return -1;
    }
    if (pad && fs->left && put_fill(r, b, ' ', pad)) return -1;
    return 0;
  }
  while (nd) body[n++] = rev[--nd];
  return put_padded(r, b, fs, body, n, pre, n, 0);
}

/* The most digits after the point a double's exact decimal value has (2^-1074), and the
 * most significant digits it has (767): past these every digit is 0, so snprintf is asked
 * for at most FMT_EXACT_DIGITS and the rest are appended as zeros. That keeps libc's work
 * small whatever the precision, and the output is still exact. */
#define FMT_EXACT_DIGITS 1100

/* %f %F %e %E %g %G, as Python. */
static int fmt_float(R *r, jbuf *b, const fmt_spec *fs, char conv, double dv) {
  int64_t prec = fs->prec < 0 ? 6 : fs->prec;
  int64_t asked = prec > FMT_EXACT_DIGITS ? FMT_EXACT_DIGITS : prec;
  size_t extra = 0;
  /* %g drops trailing zeros unless '#': past the exact digits it adds nothing */
  if (isfinite(dv) && prec > asked && (fs->alt || (conv != 'g' && conv != 'G')))
    extra = (size_t)(prec - asked);
  char spec[16];
  size_t sl = 0;
  spec[sl++] = '%';
  if (fs->plus) spec[sl++] = '+';
  else if (fs->space) spec[sl++] = ' ';
  if (fs->alt) spec[sl++] = '#';
  spec[sl++] = '.';
  spec[sl++] = '*';
  spec[sl++] = conv;
  spec[sl] = '\0';
  /* 309 integer digits + the point + FMT_EXACT_DIGITS + sign and exponent */
  char num[FMT_EXACT_DIGITS + 340];
  int n = snprintf(num, sizeof num, spec, (int)asked, dv);
  if (n < 0 || (size_t)n >= sizeof num) return jr_fail(r, WEIR_E_INTERNAL, "float format failed");
  size_t pre = (num[0] == '-' || num[0] == '+' || num[0] == ' ') ? 1 : 0;
  return put_padded(r, b, fs, num, (size_t)n, pre, (size_t)n, extra);
}


int jb_format_percent(R *r, jstr *fmt, jv args, jv *out);
int jb_format_percent(R *r, jstr *fmt, jv args, jv *out) {
  jbuf b = {0};
  size_t ai = 0;
  const jlist *tuple = args.t == JV_LIST && args.tup ? args.l : NULL;
  int used_single = 0;
  const char *p = fmt->p, *e = fmt->p + fmt->len;
  while (p < e) {
    const char *q = memchr(p, '%', (size_t)(e - p));
    if (!q) q = e;
    if (bput(r, &b, p, (size_t)(q - p))) goto fail;
    if (q == e) break;
    p = q + 1;
    if (p < e && *p == '%') {
      if (bput(r, &b, "%", 1)) goto fail;
      p++;
      continue;
    }
    jv v;
    if (p < e && *p == '(') { /* %(name)s */
      const char *c = memchr(p, ')', (size_t)(e - p));
      if (!c || args.t != JV_DICT) {
        jr_fail(r, WEIR_E_INVAL, "format requires a mapping");
        goto fail;
      }
      jstr *k = js_new(&r->ar, p + 1, (size_t)(c - p - 1));
      if (!k) {
        oom(r);
        goto fail;
      }
      jv *x = jd_get(args.d, jv_strv(k));
      if (!x) {
        jr_fail(r, WEIR_E_INVAL, "KeyError: '%s'", k->p);
        goto fail;
      }
      v = *x;
      p = c + 1;
    } else if (tuple) {
      if (ai >= tuple->n) {
        jr_fail(r, WEIR_E_INVAL, "not enough arguments for format string");
        goto fail;
      }
      v = tuple->v[ai++];
    } else {
      if (used_single) {
        jr_fail(r, WEIR_E_INVAL, "not enough arguments for format string");
        goto fail;
      }
      v = args;
      used_single = 1;
    }
    /* The conversion spec: flags, width and precision are parsed here, not handed to
     * snprintf, so that a template cannot ask libc for a billion-digit number: a width or a
     * precision that cannot fit the output budget is refused before any work, and what is
     * formatted is padded here in chunks (issue 28). */
    fmt_spec fs;
    if (parse_fmt_spec(r, &p, e, &fs)) goto fail;
    char conv = *p++;
    switch (conv) {
    case 's':
    case 'r': {
      jbuf t = {0};
      if ((conv == 's' ? jv_str(r, v, &t) : jv_repr(r, v, &t))) {
        free(t.p);
        goto fail;
      }
      /* flags, width and precision count code points, as Python's do */
      size_t ncp = 0, cut = t.len;
      for (size_t bi = 0; bi < t.len; bi++)
        if (((unsigned char)t.p[bi] & 0xC0) != 0x80) {
          if (fs.prec >= 0 && (int64_t)ncp == fs.prec) {
            cut = bi;
            break;
          }
          ncp++;
        }
      fs.zero = 0; /* Python pads %s with spaces whatever the 0 flag says */
      int rc = put_padded(r, &b, &fs, t.p ? t.p : "", cut, 0, ncp, 0);
      free(t.p);
      if (rc) goto fail;
      break;
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
      int64_t iv;
      if (v.t == JV_INT) iv = v.i;
      else if (v.t == JV_BOOL) iv = v.b;
      else if (v.t == JV_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u') && isfinite(v.f) &&
               fabs(v.f) < 9.2e18)
        iv = (int64_t)v.f; /* %d truncates a float; %x and %o refuse one */
      else {
        jr_fail(r, WEIR_E_INVAL, "%%%c format: a number is required, not %s", conv, jv_type_name(v));
        goto fail;
      }
      if (fmt_int(r, &b, &fs, conv, iv)) goto fail;
      break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      double dv;
      if (v.t == JV_FLOAT) dv = v.f;
      else if (v.t == JV_INT) dv = (double)v.i;
      else if (v.t == JV_BOOL) dv = v.b;
      else {
        jr_fail(r, WEIR_E_INVAL, "must be real number, not %s", jv_type_name(v));
        goto fail;
      }
      if (fmt_float(r, &b, &fs, conv, dv)) goto fail;
      break;
    }
    default:
      jr_fail(r, WEIR_E_INVAL, "unsupported format character '%c'", conv);
      goto fail;
    }
  }
  /* Python lets a format without specs take any argument that has __getitem__ (a dict, a
   * list, Jinja's Undefined) but not a str, a number or None */
  if ((tuple && ai < tuple->n) ||
      (!tuple && !used_single && args.t != JV_DICT && args.t != JV_LIST && args.t != JV_UNDEF)) {
    jr_fail(r, WEIR_E_INVAL, "not all arguments converted during string formatting");
    goto fail;
  }
  return buf_to_str(r, &b, out);
fail:
  free(b.p);
  return -1;
}

/* str.format with {} {0} {name} fields (no format specs) */
static int str_format(R *r, jstr *fmt, const jcall *a, jv *out) {
  jbuf b = {0};
  int auto_i = 0;
  const char *p = fmt->p, *e = fmt->p + fmt->len;
  while (p < e) {
    char c = *p;
    if (c == '{' && p + 1 < e && p[1] == '{') {
      if (bput(r, &b, "{", 1)) goto fail;
      p += 2;
      continue;
    }
    if (c == '}' && p + 1 < e && p[1] == '}') {
      if (bput(r, &b, "}", 1)) goto fail;
      p += 2;
      continue;
    }
    if (c == '}') {
      jr_fail(r, WEIR_E_INVAL, "Single '}' encountered in format string");
      goto fail;
    }
    if (c != '{') {
      if (bput(r, &b, p, 1)) goto fail;
      p++;
      continue;
    }
    const char *end = memchr(p, '}', (size_t)(e - p));
    if (!end) {
      jr_fail(r, WEIR_E_INVAL, "Single '{' encountered in format string");
      goto fail;
    }
    char field[128];
    size_t fl = (size_t)(end - p - 1);
    if (fl >= sizeof field || memchr(p + 1, ':', fl)) {
      jr_fail(r, WEIR_E_INVAL, "str.format: format specs are not supported");
      goto fail;
    }
    memcpy(field, p + 1, fl);
    field[fl] = '\0';
    int repr = 0;
    char *bang = strchr(field, '!');
    if (bang) {
      repr = bang[1] == 'r';
      *bang = '\0';
    }
    jv v;
    int found;
    if (field[0] == '\0') found = arg(a, auto_i++, NULL, &v);
    else if (field[0] >= '0' && field[0] <= '9') found = arg(a, atoi(field), NULL, &v);
    else found = arg(a, -1, field, &v);
    if (!found) {
      jr_fail(r, WEIR_E_INVAL, "str.format: no argument for {%s}", field);
      goto fail;
    }
    jbuf t = {0};
    if ((repr ? jv_repr(r, v, &t) : jv_str(r, v, &t))) {
      free(t.p);
      goto fail;
    }
    int rc = bput(r, &b, t.p ? t.p : "", t.len);
    free(t.p);
    if (rc) goto fail;
    p = end + 1;
  }
  return buf_to_str(r, &b, out);
fail:
  free(b.p);
  return -1;
}

/* ---- str methods ---- */

/* split / rsplit: sep NULL splits on whitespace runs */
static int split(R *r, jstr *s, jstr *sep, int64_t maxsplit, int right, jv *out) {
  if (sep && sep->len == 0) return jr_fail(r, WEIR_E_INVAL, "empty separator");
  if (jr_steps(r, s->len / 16)) return -1;
  size_t cap = 16, n = 0;
  jv *items = malloc(cap * sizeof(jv));
  if (!items) return oom(r);
  int rc = 0;
#define ADD(pp, nn)                                                       \
  do {                                                                    \
    if (n == cap) {                                                       \
      cap *= 2;                                                           \
      jv *ni = realloc(items, cap * sizeof(jv));                          \
      if (!ni) { rc = oom(r); goto done; }                                \
      items = ni;                                                         \
    }                                                                     \
    if (mkstr(r, (pp), (nn), &items[n])) { rc = -1; goto done; }          \
    n++;                                                                  \
  } while (0)
  if (sep) {
    if (!right) {
      const char *p = s->p, *e = s->p + s->len;
      int64_t splits = 0;
      while (maxsplit < 0 || splits < maxsplit) {
        const char *q = memmem(p, (size_t)(e - p), sep->p, sep->len);
        if (!q) break;
        ADD(p, (size_t)(q - p));
        p = q + sep->len;
        splits++;
      }
      ADD(p, (size_t)(e - p));
    } else {
      /* collect from the right, then reverse */
      const char *b = s->p;
      size_t end = s->len;
      int64_t splits = 0;
      while (maxsplit < 0 || splits < maxsplit) {
        size_t k = end;
        int found = 0;
        while (k >= sep->len) {
          if (memcmp(b + k - sep->len, sep->p, sep->len) == 0) {
            found = 1;
            break;
          }
          k--;
        }
        if (!found) break;
        ADD(b + k, end - k);
        end = k - sep->len;
        splits++;
      }
      ADD(b, end);
      for (size_t i = 0; i < n / 2; i++) {
        jv t = items[i];
        items[i] = items[n - 1 - i];
        items[n - 1 - i] = t;
      }
    }
  } else {
    cpv cv = {0};
    if (decode(r, s, &cv)) {
      rc = -1;
      goto done;
    }
    /* byte offsets of code points */
    size_t *off = malloc((cv.n + 1) * sizeof *off);
    if (!off) {
      free(cv.c);
      rc = oom(r);
      goto done;
    }
    size_t o = 0;
    for (size_t i = 0; i < cv.n; i++) {
      off[i] = o;
      char tmp[4];
      o += (size_t)weir_utf8_put(cv.c[i], tmp);
    }
    off[cv.n] = o;
    if (!right) {
      size_t i = 0;
      int64_t splits = 0;
      while (1) {
        while (i < cv.n && py_isspace(cv.c[i])) i++;
        if (i >= cv.n) break;
        if (maxsplit >= 0 && splits >= maxsplit) {
          size_t j = cv.n;
          while (j > i && py_isspace(cv.c[j - 1])) j--;
          ADD(s->p + off[i], off[j] - off[i]);
          break;
        }
        size_t j = i;
        while (j < cv.n && !py_isspace(cv.c[j])) j++;
        ADD(s->p + off[i], off[j] - off[i]);
        splits++;
        i = j;
      }
    } else {
      size_t j = cv.n;
      int64_t splits = 0;
      while (1) {
        while (j > 0 && py_isspace(cv.c[j - 1])) j--;
        if (j == 0) break;
        if (maxsplit >= 0 && splits >= maxsplit) {
          size_t i = 0;
          while (i < j && py_isspace(cv.c[i])) i++;
          ADD(s->p + off[i], off[j] - off[i]);
          break;
        }
        size_t i = j;
        while (i > 0 && !py_isspace(cv.c[i - 1])) i--;
        ADD(s->p + off[i], off[j] - off[i]);
        splits++;
        j = i;
      }
      for (size_t k = 0; k < n / 2; k++) {
        jv t = items[k];
        items[k] = items[n - 1 - k];
        items[n - 1 - k] = t;
      }
    }
    free(off);
    free(cv.c);
  }
#undef ADD
  {
    jlist *l = jl_new(&r->ar, n);
    if (!l) {
      rc = oom(r);
      goto done;
    }
    if (n) memcpy(l->v, items, n * sizeof(jv));
    *out = jv_listv(l, 0);
  }
done:
  free(items);
  return rc;
}

static int is_line_break(uint32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
         c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
}

/* str.splitlines(keepends=False) */
static int splitlines(R *r, jstr *s, int keepends, jlist **out) {
  cpv cv = {0};
  if (decode(r, s, &cv)) return -1;
  jlist *l = jl_new(&r->ar, cv.n + 1);
  if (!l) {
    free(cv.c);
    return oom(r);
  }
  l->n = 0;
  size_t start = 0, i = 0;
  while (i < cv.n) {
    if (!is_line_break(cv.c[i])) {
      i++;
      continue;
    }
    size_t eol = i + 1;
    if (cv.c[i] == '\r' && i + 1 < cv.n && cv.c[i + 1] == '\n') eol++;
    if (encode(r, cv.c + start, (keepends ? eol : i) - start, &l->v[l->n++])) {
      free(cv.c);
      return -1;
    }
    start = i = eol;
  }
  if (start < cv.n && encode(r, cv.c + start, cv.n - start, &l->v[l->n++])) {
    free(cv.c);
    return -1;
  }
  free(cv.c);
  *out = l;
  return 0;
}

static int prefix_match(R *r, jstr *s, jv pre, int suffix, int *out) {
  if (pre.t == JV_LIST && pre.tup) {
    *out = 0;
    for (size_t i = 0; i < pre.l->n && !*out; i++)
      if (prefix_match(r, s, pre.l->v[i], suffix, out)) return -1;
    return 0;
  }
  if (pre.t != JV_STR)
    return jr_fail(r, WEIR_E_INVAL, "%s first arg must be str or a tuple of str, not %s",
                   suffix ? "endswith" : "startswith", jv_type_name(pre));
  size_t n = pre.s->len;
  *out = n <= s->len && memcmp(suffix ? s->p + s->len - n : s->p, pre.s->p, n) == 0;
  return 0;
}

static int str_find(jstr *s, jstr *sub, int right, int64_t *out_cp) {
  const char *hit = NULL;
  if (!right) {
    hit = sub->len == 0 ? s->p : memmem(s->p, s->len, sub->p, sub->len);
  } else {
    for (size_t k = s->len + 1; k-- > 0;)
      if (k + sub->len <= s->len && memcmp(s->p + k, sub->p, sub->len) == 0) {
        hit = s->p + k;
        break;
      }
  }
  if (!hit) {
    *out_cp = -1;
    return 0;
  }
  int64_t cp = 0;
  for (const char *q = s->p; q < hit; q++) cp += ((unsigned char)*q & 0xC0) != 0x80;
  *out_cp = cp;
  return 0;
}

static int pad(R *r, jstr *s, int64_t width, jstr *fill, int where, jv *out) {
  /* where: 0 center, 1 ljust, 2 rjust */
  size_t n = js_ncp(s);
  if (width <= (int64_t)n) {
    *out = jv_strv(s);
    return 0;
  }
  if (width > (int64_t)r->lim->max_output) return jr_fail(r, WEIR_E_RANGE, "width too large");
  const char *f = fill ? fill->p : " ";
  size_t fl = fill ? fill->len : 1;
  if (fill && js_ncp(fill) != 1) return jr_fail(r, WEIR_E_INVAL, "The fill character must be exactly one character long");
  size_t total = (size_t)width - n, left;
  if (where == 0) left = total / 2 + (total & (size_t)width & 1);
  else left = where == 1 ? 0 : total;
  jbuf b = {0};
  for (size_t i = 0; i < left; i++)
    if (bput(r, &b, f, fl)) goto fail;
  if (bput(r, &b, s->p, s->len)) goto fail;
  for (size_t i = 0; i < total - left; i++)
    if (bput(r, &b, f, fl)) goto fail;
  return buf_to_str(r, &b, out);
fail:
  free(b.p);
  return -1;
}

static int str_replace(R *r, jstr *s, jstr *old, jstr *new_, int64_t count, jv *out) {
  jbuf b = {0};
  if (jr_steps(r, s->len / 16)) return -1;
  if (old->len == 0) {
    /* Python inserts new before every code point and at the end */
    int64_t done = 0;
    size_t i = 0;
    while (i <= s->len) {
      if (count < 0 || done < count) {
        if (bput(r, &b, new_->p, new_->len)) goto fail;
        done++;
      }
      if (i == s->len) break;
      size_t k = 1;
      while (i + k < s->len && ((unsigned char)s->p[i + k] & 0xC0) == 0x80) k++;
      if (bput(r, &b, s->p + i, k)) goto fail;
      i += k;
    }
    return buf_to_str(r, &b, out);
  }
  const char *p = s->p, *e = s->p + s->len;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const char *q = memmem(p, (size_t)(e - p), old->p, old->len);
    if (!q) break;
    if (bput(r, &b, p, (size_t)(q - p)) || bput(r, &b, new_->p, new_->len)) goto fail;
    p = q + old->len;
    done++;
  }
  if (bput(r, &b, p, (size_t)(e - p))) goto fail;
  return buf_to_str(r, &b, out);
fail:
  free(b.p);
  return -1;
}

static int str_join(R *r, jstr *sep, jv seq, jv *out);

static int m_str(R *r, jv self, const jcall *a, jv *out, const char *name) {
  jstr *s = self.s, *x = NULL, *y = NULL;
  int64_t k;
  if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
    if (arg_pystr(r, a, 0, "chars", &x)) return -1;
    return strip(r, s, x, name[0] != 'r', name[0] != 'l', out);
  }
  if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
    if (arg_pystr(r, a, 0, "sep", &x) || arg_int(r, a, 1, "maxsplit", -1, &k)) return -1;
    return split(r, s, x, k, name[0] == 'r', out);
  }
  if (!strcmp(name, "splitlines")) {
    jlist *l;
    if (splitlines(r, s, arg_bool(a, 0, "keepends", 0), &l)) return -1;
    *out = jv_listv(l, 0);
    return 0;
  }
  if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
    jv p;
    int res;
    if (!arg(a, 0, NULL, &p)) return jr_fail(r, WEIR_E_INVAL, "%s() takes at least 1 argument", name);
    if (prefix_match(r, s, p, name[0] == 'e', &res)) return -1;
    *out = jv_bool(res);
    return 0;
  }
  if (!strcmp(name, "replace")) {
    if (arg_pystr(r, a, 0, "old", &x) || arg_pystr(r, a, 1, "new", &y) ||
        arg_int(r, a, 2, "count", -1, &k))
      return -1;
    if (!x || !y) return jr_fail(r, WEIR_E_INVAL, "replace() takes at least 2 arguments");
    return str_replace(r, s, x, y, k, out);
  }
  if (!strcmp(name, "upper")) return change_case(r, self, CASE_UPPER, out);
  if (!strcmp(name, "lower") || !strcmp(name, "casefold")) return change_case(r, self, CASE_LOWER, out);
  if (!strcmp(name, "title")) return change_case(r, self, CASE_PYTITLE, out);
  if (!strcmp(name, "capitalize")) return change_case(r, self, CASE_CAPITALIZE, out);
  if (!strcmp(name, "swapcase")) return change_case(r, self, CASE_SWAP, out);
  if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") ||
      !strcmp(name, "rindex") || !strcmp(name, "count")) {
    if (arg_pystr(r, a, 0, "sub", &x)) return -1;
    if (!x) return jr_fail(r, WEIR_E_INVAL, "%s() takes at least 1 argument", name);
    if (!strcmp(name, "count")) {
      int64_t c = 0;
      if (x->len == 0) c = (int64_t)js_ncp(s) + 1;
      else
        for (const char *p = s->p; (p = memmem(p, (size_t)(s->p + s->len - p), x->p, x->len)); p += x->len) c++;
      *out = jv_int(c);
      return 0;
    }
    int64_t pos;
    str_find(s, x, name[0] == 'r', &pos);
    if (pos < 0 && strstr(name, "index")) return jr_fail(r, WEIR_E_INVAL, "substring not found");
    *out = jv_int(pos);
    return 0;
  }
  if (!strcmp(name, "join")) {
    jv seq;
    if (!arg(a, 0, NULL, &seq)) return jr_fail(r, WEIR_E_INVAL, "join() takes exactly one argument");
    return str_join(r, s, seq, out);
  }
  if (!strcmp(name, "center") || !strcmp(name, "ljust") || !strcmp(name, "rjust")) {
    if (arg_int(r, a, 0, "width", 0, &k) || arg_pystr(r, a, 1, "fillchar", &x)) return -1;
    return pad(r, s, k, x, name[0] == 'c' ? 0 : name[0] == 'l' ? 1 : 2, out);
  }
  if (!strcmp(name, "zfill")) {
    if (arg_int(r, a, 0, "width", 0, &k)) return -1;
    size_t n = js_ncp(s);
    if (k <= (int64_t)n) {
      *out = self;
      return 0;
    }
    if (k > (int64_t)r->lim->max_output) return jr_fail(r, WEIR_E_RANGE, "width too large");
    jbuf b = {0};
    size_t sign = s->len && (s->p[0] == '-' || s->p[0] == '+');
    if (bput(r, &b, s->p, sign)) goto zfail;
    for (int64_t i = 0; i < k - (int64_t)n; i++)
      if (bput(r, &b, "0", 1)) goto zfail;
    if (bput(r, &b, s->p + sign, s->len - sign)) goto zfail;
    return buf_to_str(r, &b, out);
  zfail:
    free(b.p);
    return -1;
  }
  if (!strcmp(name, "partition") || !strcmp(name, "rpartition")) {
    if (arg_pystr(r, a, 0, "sep", &x)) return -1;
    if (!x || !x->len) return jr_fail(r, WEIR_E_INVAL, "empty separator");
    jlist *l = jl_new(&r->ar, 3);
    if (!l) return oom(r);
    const char *hit = NULL;
    if (name[0] == 'p') hit = memmem(s->p, s->len, x->p, x->len);
    else
      for (size_t q = s->len + 1; q-- > 0;)
        if (q + x->len <= s->len && memcmp(s->p + q, x->p, x->len) == 0) {
          hit = s->p + q;
          break;
        }
    jv empty;
    if (mkstr(r, "", 0, &empty)) return -1;
    if (!hit) {
      l->v[0] = name[0] == 'p' ? self : empty;
      l->v[1] = empty;
      l->v[2] = name[0] == 'p' ? empty : self;
    } else {
      if (mkstr(r, s->p, (size_t)(hit - s->p), &l->v[0]) ||
          mkstr(r, hit + x->len, s->len - (size_t)(hit - s->p) - x->len, &l->v[2]))
        return -1;
      l->v[1] = jv_strv(x);
    }
    *out = jv_listv(l, 1);
    return 0;
  }
  if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
    if (arg_pystr(r, a, 0, "prefix", &x)) return -1;
    if (!x) return jr_fail(r, WEIR_E_INVAL, "%s() takes exactly one argument", name);
    int suf = name[6] == 's';
    if (x->len <= s->len && memcmp(suf ? s->p + s->len - x->len : s->p, x->p, x->len) == 0)
      return mkstr(r, suf ? s->p : s->p + x->len, s->len - x->len, out);
    *out = self;
    return 0;
  }
  if (!strcmp(name, "format")) return str_format(r, s, a, out);
  if (!strncmp(name, "is", 2)) {
    cpv cv = {0};
    if (decode(r, s, &cv)) return -1;
    int res = cv.n > 0, cased = 0;
    for (size_t i = 0; i < cv.n && res; i++) {
      uint32_t c = cv.c[i];
      if (!strcmp(name, "isdigit") || !strcmp(name, "isdecimal") || !strcmp(name, "isnumeric"))
        res = weir_uni_is_number(c);
      else if (!strcmp(name, "isalpha")) res = cp_is_alpha(c);
      else if (!strcmp(name, "isalnum")) res = cp_is_alnum(c);
      else if (!strcmp(name, "isspace")) res = py_isspace(c);
      else if (!strcmp(name, "isupper")) {
        if (cp_is_cased_lower(c)) res = 0;
        cased |= cp_is_cased_upper(c);
      } else if (!strcmp(name, "islower")) {
        if (cp_is_cased_upper(c)) res = 0;
        cased |= cp_is_cased_lower(c);
      }
    }
    if (!strcmp(name, "isupper") || !strcmp(name, "islower")) res = res && cased;
    free(cv.c);
    *out = jv_bool(res);
    return 0;
  }
  return jr_fail(r, WEIR_E_INTERNAL, "str.%s", name);
}

static const char *const k_str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "replace", "upper", "lower", "casefold", "title", "capitalize", "swapcase", "find", "rfind",
    "index", "rindex", "count", "join", "center", "ljust", "rjust", "zfill", "partition",
    "rpartition", "removeprefix", "removesuffix", "format", "isdigit", "isdecimal",
    "isnumeric", "isalpha", "isalnum", "isspace", "isupper", "islower", NULL};
static const char *const k_dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const k_dict_unsafe[] = {"update", "pop", "popitem", "setdefault", "clear", NULL};
static const char *const k_list_methods[] = {"count", "index", "copy", NULL};
static const char *const k_list_unsafe[] = {"append", "extend", "insert", "pop", "remove",
                                             "reverse", "sort", "clear", NULL};

static int in_list(const char *const *l, const char *name) {
  for (; *l; l++)
    if (!strcmp(*l, name)) return 1;
  return 0;
}

static int items_of(R *r, const jdict *d, jv *out) {
  jlist *l = jl_new(&r->ar, d->n);
  if (!l) return oom(r);
  if (jr_steps(r, d->n / 4)) return -1;
  for (size_t i = 0; i < d->n; i++) {
    jlist *pair = jl_new(&r->ar, 2);
    if (!pair) return oom(r);
    pair->v[0] = d->k[i];
    pair->v[1] = d->v[i];
    l->v[i] = jv_listv(pair, 1);
  }
  *out = jv_listv(l, 0);
  return 0;
}

static int m_dict(R *r, jv self, const jcall *a, jv *out, const char *name) {
  const jdict *d = self.d;
  if (!strcmp(name, "items")) return items_of(r, d, out);
  if (!strcmp(name, "keys") || !strcmp(name, "values")) {
    jlist *l = jl_new(&r->ar, d->n);
    if (!l) return oom(r);
    for (size_t i = 0; i < d->n; i++) l->v[i] = name[0] == 'k' ? d->k[i] : d->v[i];
    *out = jv_listv(l, 0);
    return 0;
  }
  if (!strcmp(name, "get")) {
    jv k, def = jv_none();
    if (!arg(a, 0, "key", &k)) return jr_fail(r, WEIR_E_INVAL, "get expected at least 1 argument");
    arg(a, 1, "default", &def);
    jv *v = jd_get(d, k);
    *out = v ? *v : def;
    return 0;
  }
  if (!strcmp(name, "copy")) {
    jdict *n = jd_new(&r->ar);
    if (!n) return oom(r);
    for (size_t i = 0; i < d->n; i++)
      if (jd_set(&r->ar, n, d->k[i], d->v[i])) return oom(r);
    *out = jv_dictv(n);
    return 0;
  }
  return jr_fail(r, WEIR_E_INTERNAL, "dict.%s", name);
}

static int m_list(R *r, jv self, const jcall *a, jv *out, const char *name) {
  const jlist *l = self.l;
  if (!strcmp(name, "copy")) {
    *out = self;
    return 0;
  }
  jv x;
  if (!arg(a, 0, NULL, &x)) return jr_fail(r, WEIR_E_INVAL, "%s() takes exactly one argument", name);
  int64_t c = 0;
  for (size_t i = 0; i < l->n; i++)
    if (jv_equal(l->v[i], x)) {
      if (!strcmp(name, "index")) {
        *out = jv_int((int64_t)i);
        return 0;
      }
      c++;
    }
  if (!strcmp(name, "index")) return jr_fail(r, WEIR_E_INVAL, "value is not in list");
  *out = jv_int(c);
  return 0;
}

static int m_dispatch(R *r, jv self, const jcall *a, jv *out) {
  /* self is a tuple (receiver, method name) */
  jv recv = self.l->v[0];
  const char *name = self.l->v[1].s->p;
  if (recv.t == JV_STR) return m_str(r, recv, a, out, name);
  if (recv.t == JV_DICT) return m_dict(r, recv, a, out, name);
  return m_list(r, recv, a, out, name);
}

int jb_method(R *r, jv self, const char *name, jv *out) {
  const char *const *safe = self.t == JV_STR ? k_str_methods : self.t == JV_DICT ? k_dict_methods
                            : self.t == JV_LIST ? k_list_methods : NULL;
  const char *const *unsafe = self.t == JV_DICT ? k_dict_unsafe : self.t == JV_LIST ? k_list_unsafe : NULL;
  if (!safe) return 0;
  if (unsafe && in_list(unsafe, name)) {
    char buf[160];
    snprintf(buf, sizeof buf, "access to attribute '%s' of '%s' object is unsafe.", name,
             jv_type_name(self));
    jstr *h = js_cstr(&r->ar, buf);
    if (!h) return oom(r), 1;
    *out = jv_undef(h->p);
    return 1;
  }
  if (!in_list(safe, name)) return 0;
  jfunc *f = ja_alloc(&r->ar, sizeof *f);
  jlist *pair = jl_new(&r->ar, 2);
  jstr *nm = js_cstr(&r->ar, name);
  if (!f || !pair || !nm) return oom(r), 1;
  pair->v[0] = self;
  pair->v[1] = jv_strv(nm);
  f->kind = F_METHOD;
  f->fn = m_dispatch;
  f->self = jv_listv(pair, 1);
  f->name = nm->p;
  memset(out, 0, sizeof *out);
  out->t = JV_FUNC;
  out->fn = f;
  return 1;
}

/* ---- filters ---- */

static int str_join(R *r, jstr *sep, jv seq, jv *out) {
  const jlist *l;
  if (jr_iterate(r, seq, &l)) return -1;
  jbuf b = {0};
  for (size_t i = 0; i < l->n; i++) {
    if (i && sep && bput(r, &b, sep->p, sep->len)) goto fail;
    if (l->v[i].t == JV_STR) {
      if (bput(r, &b, l->v[i].s->p, l->v[i].s->len)) goto fail;
    } else if (l->v[i].t != JV_UNDEF) {
      if (jv_str(r, l->v[i], &b)) goto fail;
    }
  }
  return buf_to_str(r, &b, out);
fail:
  free(b.p);
  return -1;
}

/* attribute paths like "a.b" or "0" as Jinja's make_attrgetter reads them */
static int get_path(R *r, jv v, jstr *path, jv *out) {
  const char *p = path->p, *e = path->p + path->len;
  while (1) {
    const char *dot = memchr(p, '.', (size_t)(e - p));
    size_t n = dot ? (size_t)(dot - p) : (size_t)(e - p);
    jv key;
    int digits = n > 0;
    for (size_t i = 0; i < n; i++) digits &= p[i] >= '0' && p[i] <= '9';
    if (digits) key = jv_int(strtoll(p, NULL, 10));
    else if (mkstr(r, p, n, &key)) return -1;
    if (jr_getitem(r, v, key, &v)) return -1;
    if (!dot) break;
    p = dot + 1;
  }
  *out = v;
  return 0;
}

static int apply_test_args(R *r, const jcall *a, int first, jcall *t) {
  t->n = a->n > first ? a->n - first : 0;
  t->pos = a->n > first ? a->pos + first : NULL;
  t->nk = a->nk;
  t->kname = a->kname;
  t->kval = a->kval;
  return 0;
}

/* select / reject / selectattr / rejectattr */
static int f_select(R *r, jv v, const jcall *a, jv *out, int want, int attr) {
  const jlist *l;
  if (jr_iterate(r, v, &l)) return -1;
  jstr *path = NULL, *test = NULL;
  int k = 0;
  if (attr) {
    if (arg_str(r, a, k++, NULL, &path)) return -1;
    if (!path) return jr_fail(r, WEIR_E_INVAL, "Missing parameter for attribute name");
  }
  if (a->n > k) {
    if (a->pos[k].t != JV_STR) return jr_fail(r, WEIR_E_INVAL, "the test name must be a string");
    test = a->pos[k].s;
    k++;
  }
  jcall targs = {0};
  apply_test_args(r, a, k, &targs);
  targs.nk = 0;
  jlist *res = jl_new(&r->ar, l->n);
  if (!res) return oom(r);
  res->n = 0;
  /* Jinja's select is lazy: an unknown test fails only once there is an item to test */
  if (test && l->n && !jb_has_test(test->p)) return jr_fail(r, WEIR_E_INVAL, "No test named '%s'.", test->p);
  for (size_t i = 0; i < l->n; i++) {
    jv item = l->v[i], x = item;
    if (path && get_path(r, item, path, &x)) return -1;
    int ok;
    if (test) {
      if (jb_test(r, test->p, x, &targs, &ok)) return -1;
    } else {
      ok = jv_truthy(x);
    }
    if (ok == want) res->v[res->n++] = item;
  }
  *out = jv_listv(res, 0);
  return 0;
}

static int f_map(R *r, jv v, const jcall *a, jv *out) {
  const jlist *l;
  if (jr_iterate(r, v, &l)) return -1;
  jlist *res = jl_new(&r->ar, l->n);
  if (!res) return oom(r);
  jv attrv, def;
  int has_def = arg(a, -1, "default", &def);
  if (arg(a, -1, "attribute", &attrv)) {
    jstr *path;
    if (to_str(r, attrv, &path)) return -1;
    for (size_t i = 0; i < l->n; i++) {
      if (get_path(r, l->v[i], path, &res->v[i])) return -1;
      if (has_def && res->v[i].t == JV_UNDEF) res->v[i] = def;
    }
  } else if (l->n) { /* lazy as Jinja's: nothing to map, nothing to check */
    if (a->n < 1 || a->pos[0].t != JV_STR) return jr_fail(r, WEIR_E_INVAL, "map requires a filter argument");
    const char *fname = a->pos[0].s->p;
    if (!jb_has_filter(fname)) return jr_fail(r, WEIR_E_INVAL, "No filter named '%s'.", fname);
    jcall fa = {a->n - 1, a->pos + 1, a->nk, a->kname, a->kval};
    for (size_t i = 0; i < l->n; i++)
      if (jb_filter(r, fname, l->v[i], &fa, &res->v[i])) return -1;
  }
  *out = jv_listv(res, 0);
  return 0;
}

typedef struct sortkey {
  jv key, item;
} sortkey;

/* stable merge sort on keys, Python's sorted(); -1 on an unorderable pair */
static int sort_items(R *r, sortkey *v, size_t n, int reverse) {
  if (n < 2) return 0;
  sortkey *tmp = malloc(n * sizeof *tmp);
  if (!tmp) return oom(r);
  int rc = 0;
  for (size_t width = 1; width < n && rc == 0; width *= 2) {
    for (size_t lo = 0; lo < n && rc == 0; lo += 2 * width) {
      size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        int c;
        if (jb_compare(r, v[j].key, v[i].key, &c)) {
          rc = -1;
          break;
        }
        if (reverse) c = -c;
        if (c < 0) tmp[k++] = v[j++];
        else tmp[k++] = v[i++];
      }
      if (rc) break;
      while (i < mid) tmp[k++] = v[i++];
      while (j < hi) tmp[k++] = v[j++];
      memcpy(v + lo, tmp + lo, (hi - lo) * sizeof *v);
    }
    if (jr_steps(r, n / 4)) rc = -1;
  }
  free(tmp);
  return rc;
}

static int sort_key(R *r, jv item, jstr *path, int case_sensitive, jv *key) {
  jv k = item;
  if (path && get_path(r, item, path, &k)) return -1;
  if (!case_sensitive && k.t == JV_STR) return change_case(r, k, CASE_LOWER, key);
  *key = k;
  return 0;
}

static int f_sort(R *r, jv v, const jcall *a, jv *out, int mode /* 0 sort, 1 min, 2 max, 3 unique */) {
  const jlist *l;
  if (jr_iterate(r, v, &l)) return -1;
  jv rv;
  if (mode == 0 && arg(a, 0, "reverse", &rv) && rv.t != JV_BOOL && rv.t != JV_INT)
    return jr_fail(r, WEIR_E_INVAL, "'%s' object cannot be interpreted as an integer", jv_type_name(rv));
  int reverse = mode == 0 ? arg_bool(a, 0, "reverse", 0) : 0;
  int cs = arg_bool(a, mode == 0 ? 1 : 0, "case_sensitive", 0);
  jstr *path = NULL;
  if (arg_str(r, a, mode == 0 ? 2 : 1, "attribute", &path)) return -1;
  sortkey *items = malloc((l->n + 1) * sizeof *items);
  if (!items) return oom(r);
  int rc = 0;
  for (size_t i = 0; i < l->n && !rc; i++) {
    items[i].item = l->v[i];
    rc = sort_key(r, l->v[i], path, cs, &items[i].key);
  }
  if (rc) goto done;
  if (mode == 3) {
    jlist *res = jl_new(&r->ar, l->n);
    if (!res) {
      rc = oom(r);
      goto done;
    }
    res->n = 0;
    if (jr_steps(r, l->n * l->n / 64)) {
      rc = -1;
      goto done;
    }
    for (size_t i = 0; i < l->n; i++) {
      int seen = 0;
      for (size_t j = 0; j < i && !seen; j++) seen = jv_equal(items[j].key, items[i].key);
      if (!seen) res->v[res->n++] = items[i].item;
    }
    *out = jv_listv(res, 0);
    goto done;
  }
  if (mode == 1 || mode == 2) {
    if (l->n == 0) {
      *out = jv_undef(mode == 1 ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
      goto done;
    }
    size_t best = 0;
    for (size_t i = 1; i < l->n; i++) {
      int c;
      if (jb_compare(r, items[i].key, items[best].key, &c)) {
        rc = -1;
        goto done;
      }
      if ((mode == 1 && c < 0) || (mode == 2 && c > 0)) best = i;
    }
    *out = items[best].item;
    goto done;
  }
  if ((rc = sort_items(r, items, l->n, reverse))) goto done;
  {
    jlist *res = jl_new(&r->ar, l->n);
    if (!res) {
      rc = oom(r);
      goto done;
    }
    for (size_t i = 0; i < l->n; i++) res->v[i] = items[i].item;
    *out = jv_listv(res, 0);
  }
done:
  free(items);
  return rc;
}

static int f_dictsort(R *r, jv v, const jcall *a, jv *out) {
  if (v.t != JV_DICT) return jr_fail(r, WEIR_E_INVAL, "dictsort: a dict is required, not %s", jv_type_name(v));
  int cs = arg_bool(a, 0, "case_sensitive", 0);
  jstr *by = NULL;
  if (arg_str(r, a, 1, "by", &by)) return -1;
  int reverse = arg_bool(a, 2, "reverse", 0);
  int pos = 0;
  if (by && !strcmp(by->p, "value")) pos = 1;
  else if (by && strcmp(by->p, "key")) return jr_fail(r, WEIR_E_INVAL, "You can only sort by either \"key\" or \"value\"");
  jv items;
  if (items_of(r, v.d, &items)) return -1;
  size_t n = items.l->n;
  sortkey *sk = malloc((n + 1) * sizeof *sk);
  if (!sk) return oom(r);
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    sk[i].item = items.l->v[i];
    rc = sort_key(r, items.l->v[i].l->v[pos], NULL, cs, &sk[i].key);
  }
  if (!rc) rc = sort_items(r, sk, n, reverse);
  if (!rc) {
    for (size_t i = 0; i < n; i++) items.l->v[i] = sk[i].item;
    *out = items;
  }
  free(sk);
  return rc;
}

static int f_indent(R *r, jv v, const jcall *a, jv *out) {
  jstr *s, *ind;
  jv w;
  if (to_str(r, v, &s)) return -1;
  if (arg(a, 0, "width", &w) && w.t == JV_STR) {
    ind = w.s;
  } else {
    int64_t width;
    if (arg_int(r, a, 0, "width", 4, &width)) return -1;
    if (width < 0) width = 0;
    if (width > 4096) return jr_fail(r, WEIR_E_RANGE, "indent width too large");
    char sp[4097];
    memset(sp, ' ', (size_t)width);
    ind = js_new(&r->ar, sp, (size_t)width);
    if (!ind) return oom(r);
  }
  int first = arg_bool(a, 1, "first", 0), blank = arg_bool(a, 2, "blank", 0);
  /* s += "\n" then splitlines: a trailing newline adds no empty last line */
  jv withnl = {0};
  {
    jbuf t = {0};
    if (bput(r, &t, s->p, s->len) || bput(r, &t, "\n", 1)) {
      free(t.p);
      return -1;
    }
    if (buf_to_str(r, &t, &withnl)) return -1;
  }
  jlist *lines;
  if (splitlines(r, withnl.s, 0, &lines)) return -1;
  jbuf b = {0};
  if (first && bput(r, &b, ind->p, ind->len)) goto fail;
  for (size_t i = 0; i < lines->n; i++) {
    jstr *ln = lines->v[i].s;
    if (i > 0) {
      if (bput(r, &b, "\n", 1)) goto fail;
      if ((blank || ln->len) && bput(r, &b, ind->p, ind->len)) goto fail;
    }
    if (bput(r, &b, ln->p, ln->len)) goto fail;
  }
  return buf_to_str(r, &b, out);
fail:
  free(b.p);
  return -1;
}

/* Python's int(str): optional sign, digits with single underscores, surrounding spaces */
static int parse_int(const char *s, size_t n, int base, int64_t *out) {
  size_t i = 0;
  while (i < n && (s[i] == ' ' || (s[i] >= 9 && s[i] <= 13))) i++;
  while (n > i && (s[n - 1] == ' ' || (s[n - 1] >= 9 && s[n - 1] <= 13))) n--;
  int neg = 0;
  if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= n) return -1;
  /* int('0x1A', 16) and int('0x1A', 0) accept the prefix of their base */
  if (n - i >= 2 && s[i] == '0') {
    char p = (char)(s[i + 1] | 0x20);
    int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb && (base == pb || base == 0)) {
      base = pb;
      i += 2;
      if (i < n && s[i] == '_') i++;
    }
  }
  if (base == 0) base = 10;
  int64_t v = 0;
  int prev_us = 1;
  for (; i < n; i++) {
    char c = s[i];
    if (c == '_') {
      if (prev_us) return -1;
      prev_us = 1;
      continue;
    }
    int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return -1;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return -1;
    prev_us = 0;
  }
  if (prev_us) return -1;
  *out = neg ? -v : v;
  return 0;
}

static int parse_float(const char *s, size_t n, double *out) {
  char buf[128];
  size_t i = 0, o = 0;
  while (i < n && (s[i] == ' ' || (s[i] >= 9 && s[i] <= 13))) i++;
  while (n > i && (s[n - 1] == ' ' || (s[n - 1] >= 9 && s[n - 1] <= 13))) n--;
  if (n - i == 0 || n - i >= sizeof buf) return -1;
  for (; i < n; i++) {
    if (s[i] == '_') continue;
    if (!strchr("0123456789+-.eEinfatyINFATY", s[i])) return -1;
    buf[o++] = s[i];
  }
  buf[o] = '\0';
  char *end;
  *out = strtod(buf, &end);
  return *end ? -1 : 0;
}

static int f_int(R *r, jv v, const jcall *a, jv *out) {
  int64_t def, base;
  if (v.t == JV_UNDEF) return jr_fail(r, WEIR_E_INVAL, "%s", v.hint ? v.hint : "value is undefined");
  if (arg_int(r, a, 0, "default", 0, &def) || arg_int(r, a, 1, "base", 10, &base)) return -1;
  int64_t iv;
  double fv;
  switch (v.t) {
  case JV_INT: *out = v; return 0;
  case JV_BOOL: *out = jv_int(v.b); return 0;
  case JV_FLOAT:
    if (isfinite(v.f) && fabs(v.f) < 9.2e18) {
      *out = jv_int((int64_t)v.f);
      return 0;
    }
    break;
  case JV_STR:
    if ((base == 0 || (base >= 2 && base <= 36)) && parse_int(v.s->p, v.s->len, (int)base, &iv) == 0) {
      *out = jv_int(iv);
      return 0;
    }
    if (parse_float(v.s->p, v.s->len, &fv) == 0 && isfinite(fv) && fabs(fv) < 9.2e18) {
      *out = jv_int((int64_t)fv);
      return 0;
    }
    break;
  default: break;
  }
  *out = jv_int(def);
  return 0;
}

static int f_float(R *r, jv v, const jcall *a, jv *out) {
  jv def = jv_float(0.0);
  if (v.t == JV_UNDEF) return jr_fail(r, WEIR_E_INVAL, "%s", v.hint ? v.hint : "value is undefined");
  arg(a, 0, "default", &def);
  double fv;
  switch (v.t) {
  case JV_INT: *out = jv_float((double)v.i); return 0;
  case JV_BOOL: *out = jv_float(v.b); return 0;
  case JV_FLOAT: *out = v; return 0;
  case JV_STR:
    if (parse_float(v.s->p, v.s->len, &fv) == 0) {
      *out = jv_float(fv);
      return 0;
    }
    break;
  default: break;
  }
  (void)r;
  *out = def;
  return 0;
}

static int f_round(R *r, jv v, const jcall *a, jv *out) {
  int64_t prec;
  jstr *method = NULL;
  if (arg_int(r, a, 0, "precision", 0, &prec) || arg_str(r, a, 1, "method", &method)) return -1;
  if (method && strcmp(method->p, "common") && strcmp(method->p, "ceil") && strcmp(method->p, "floor"))
    return jr_fail(r, WEIR_E_INVAL, "method must be common, ceil or floor");
  if (v.t == JV_INT || v.t == JV_BOOL) {
    /* round(int, n) is the int itself for n >= 0 (ceil and floor give floats) */
    int64_t iv = v.t == JV_INT ? v.i : v.b;
    if (!method || !strcmp(method->p, "common")) {
      *out = jv_int(iv);
      return 0;
    }
    *out = jv_float((double)iv);
    return 0;
  }
  if (v.t != JV_FLOAT) return jr_fail(r, WEIR_E_INVAL, "type %s doesn't define __round__ method", jv_type_name(v));
  if (prec > 300) prec = 300;
  if (prec < -300) prec = -300;
  double f = v.f;
  if (method && strcmp(method->p, "common")) {
    double m = pow(10.0, (double)prec);
    *out = jv_float((method->p[0] == 'c' ? ceil(f * m) : floor(f * m)) / m);
    return 0;
  }
  if (!isfinite(f)) {
    *out = v;
    return 0;
  }
  if (prec >= 0) {
    /* the correctly rounded decimal (ties to even on the exact binary value), as Python */
    char buf[400];
    snprintf(buf, sizeof buf, "%.*f", (int)prec, f);
    *out = jv_float(strtod(buf, NULL));
  } else {
    double m = pow(10.0, (double)-prec);
    double q = f / m, rq = nearbyint(q);
    *out = jv_float(rq * m);
  }
  return 0;
}

static int f_tojson(R *r, jv v, const jcall *a, jv *out) {
  /* transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
  int ensure_ascii = arg_bool(a, 0, "ensure_ascii", 0);
  jv ind = jv_none(), seps = jv_none();
  arg(a, 1, "indent", &ind);
  arg(a, 2, "separators", &seps);
  int sort_keys = arg_bool(a, 3, "sort_keys", 0);
  char spaces[256];
  const char *indent = NULL;
  if (ind.t == JV_INT || ind.t == JV_BOOL) {
    int64_t w = ind.t == JV_INT ? ind.i : ind.b;
    if (w < 0) w = 0;
    if (w > 255) return jr_fail(r, WEIR_E_RANGE, "tojson: indent too large");
    memset(spaces, ' ', (size_t)w);
    spaces[w] = '\0';
    indent = spaces;
  } else if (ind.t == JV_STR) {
    indent = ind.s->p;
  } else if (ind.t != JV_NONE) {
    return jr_fail(r, WEIR_E_INVAL, "tojson: indent must be an int or a string");
  }
  const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
  if (seps.t == JV_LIST) {
    if (seps.l->n != 2 || seps.l->v[0].t != JV_STR || seps.l->v[1].t != JV_STR)
      return jr_fail(r, WEIR_E_INVAL, "tojson: separators must be a pair of strings");
    item_sep = seps.l->v[0].s->p;
    key_sep = seps.l->v[1].s->p;
  }
  jbuf b = {0};
  if (jv_json(r, v, &b, ensure_ascii, indent, item_sep, key_sep, sort_keys, 0)) {
    free(b.p);
    return -1;
  }
  return buf_to_str(r, &b, out);
}

static int f_escape(R *r, jv v, jv *out) {
  if (v.t == JV_STR && v.safe) {
    *out = v;
    return 0;
  }
  jstr *s;
  if (to_str(r, v, &s)) return -1;
  jbuf b = {0};
  for (size_t i = 0; i < s->len; i++) {
    const char *e = NULL;
    switch (s->p[i]) {
    case '&': e = "&amp;"; break;
    case '<': e = "&lt;"; break;
    case '>': e = "&gt;"; break;
    case '"': e = "&#34;"; break;
    case '\'': e = "&#39;"; break;
    }
    if (e ? bput(r, &b, e, strlen(e)) : bput(r, &b, s->p + i, 1)) {
      free(b.p);
      return -1;
    }
  }
  if (buf_to_str(r, &b, out)) return -1;
  out->safe = 1;
  return 0;
}

static int f_length(R *r, jv v, jv *out) {
  switch (v.t) {
  case JV_UNDEF: *out = jv_int(0); return 0;
  case JV_STR: *out = jv_int((int64_t)js_ncp(v.s)); return 0;
  case JV_LIST: *out = jv_int((int64_t)v.l->n); return 0;
  case JV_DICT: *out = jv_int((int64_t)v.d->n); return 0;
  default: return jr_fail(r, WEIR_E_INVAL, "object of type '%s' has no len()", jv_type_name(v));
  }
}

static int f_first_last(R *r, jv v, int last, jv *out) {
  const jlist *l;
  if (v.t == JV_UNDEF) {
    *out = jv_undef(last ? "No last item, sequence was empty." : "No first item, sequence was empty.");
    return 0;
  }
  if (jr_iterate(r, v, &l)) return -1;
  if (l->n == 0) *out = jv_undef(last ? "No last item, sequence was empty." : "No first item, sequence was empty.");
  else *out = l->v[last ? l->n - 1 : 0];
  return 0;
}

static int f_sum(R *r, jv v, const jcall *a, jv *out) {
  const jlist *l;
  if (jr_iterate(r, v, &l)) return -1;
  jstr *path = NULL;
  if (arg_str(r, a, 0, "attribute", &path)) return -1;
  jv acc = jv_int(0);
  arg(a, 1, "start", &acc);
  for (size_t i = 0; i < l->n; i++) {
    jv x = l->v[i];
    if (path && get_path(r, x, path, &x)) return -1;
    int fl = acc.t == JV_FLOAT || x.t == JV_FLOAT;
    if (!(acc.t == JV_INT || acc.t == JV_BOOL || acc.t == JV_FLOAT) ||
        !(x.t == JV_INT || x.t == JV_BOOL || x.t == JV_FLOAT))
      return jr_fail(r, WEIR_E_INVAL, "unsupported operand type(s) for +: '%s' and '%s'",
                     jv_type_name(acc), jv_type_name(x));
    if (fl) {
      double av = acc.t == JV_FLOAT ? acc.f : acc.t == JV_INT ? (double)acc.i : acc.b;
      double xv = x.t == JV_FLOAT ? x.f : x.t == JV_INT ? (double)x.i : x.b;
      acc = jv_float(av + xv);
    } else {
      int64_t av = acc.t == JV_INT ? acc.i : acc.b, xv = x.t == JV_INT ? x.i : x.b, z;
      if (__builtin_add_overflow(av, xv, &z)) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
      acc = jv_int(z);
    }
  }
  *out = acc;
  return 0;
}

static int f_batch(R *r, jv v, const jcall *a, jv *out) {
  const jlist *l;
  int64_t size;
  if (jr_iterate(r, v, &l) || arg_int(r, a, 0, "linecount", 1, &size)) return -1;
  if (size <= 0) return jr_fail(r, WEIR_E_INVAL, "batch: linecount must be positive");
  jv fill;
  int has_fill = arg(a, 1, "fill_with", &fill) && fill.t != JV_NONE;
  size_t nb = (l->n + (size_t)size - 1) / (size_t)size;
  /* a fill pads the last row to linecount items: charge what is built, not what is read */
  if (jr_steps(r, (has_fill ? (uint64_t)nb * (uint64_t)size : l->n) / 8)) return -1;
  jlist *res = jl_new(&r->ar, nb);
  if (!res) return oom(r);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * (size_t)size, cnt = l->n - lo < (size_t)size ? l->n - lo : (size_t)size;
    jlist *row = jl_new(&r->ar, has_fill ? (size_t)size : cnt);
    if (!row) return oom(r);
    for (size_t i = 0; i < row->n; i++) row->v[i] = i < cnt ? l->v[lo + i] : fill;
    res->v[b] = jv_listv(row, 0);
  }
  *out = jv_listv(res, 0);
  return 0;
}

static int f_wordcount(R *r, jv v, jv *out) {
  jstr *s;
  cpv cv = {0};
  if (to_str(r, v, &s) || decode(r, s, &cv)) return -1;
  int64_t n = 0;
  int in = 0;
  for (size_t i = 0; i < cv.n; i++) {
    int w = cp_is_alnum(cv.c[i]) || cv.c[i] == '_';
    if (w && !in) n++;
    in = w;
  }
  free(cv.c);
  *out = jv_int(n);
  return 0;
}

static int f_reverse(R *r, jv v, jv *out) {
  if (v.t == JV_STR) {
    cpv cv = {0};
    if (decode(r, v.s, &cv)) return -1;
    for (size_t i = 0; i < cv.n / 2; i++) {
      uint32_t t = cv.c[i];
      cv.c[i] = cv.c[cv.n - 1 - i];
      cv.c[cv.n - 1 - i] = t;
    }
    int rc = encode(r, cv.c, cv.n, out);
    free(cv.c);
    return rc;
  }
  const jlist *l;
  if (jr_iterate(r, v, &l)) return -1;
  jlist *res = jl_new(&r->ar, l->n);
  if (!res) return oom(r);
  for (size_t i = 0; i < l->n; i++) res->v[i] = l->v[l->n - 1 - i];
  *out = jv_listv(res, 0);
  return 0;
}

static const char *const k_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "forceescape", "format", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "pprint", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
    "title", "tojson", "trim", "unique", "upper", "wordcount", NULL};

int jb_has_filter(const char *name) { return in_list(k_filters, name); }

/* Each filter's parameters after the value, as Jinja2 declares them: a trailing '!' marks a
 * required one; "*" takes anything (*args, **kwargs). Arguments that do not fit fail, as
 * Python's call does. */
static const struct {
  const char *name, *params;
} k_filter_params[] = {
    {"attr", "name!"}, {"batch", "linecount!,fill_with"}, {"center", "width"},
    {"d", "default_value,boolean"}, {"default", "default_value,boolean"},
    {"dictsort", "case_sensitive,by,reverse"}, {"float", "default"}, {"format", "*"},
    {"indent", "width,first,blank"}, {"int", "default,base"}, {"join", "d,attribute"},
    {"map", "*"}, {"max", "case_sensitive,attribute"}, {"min", "case_sensitive,attribute"},
    {"reject", "*"}, {"rejectattr", "*"}, {"replace", "old!,new!,count"},
    {"round", "precision,method"}, {"select", "*"}, {"selectattr", "*"},
    {"sort", "reverse,case_sensitive,attribute"}, {"sum", "attribute,start"},
    {"tojson", "ensure_ascii,indent,separators,sort_keys"}, {"trim", "chars"},
    {"unique", "case_sensitive,attribute"}};

static int check_filter_args(R *r, const char *f, const jcall *a) {
  const char *params = "";
  for (size_t i = 0; i < sizeof k_filter_params / sizeof k_filter_params[0]; i++)
    if (!strcmp(k_filter_params[i].name, f)) params = k_filter_params[i].params;
  if (!strcmp(params, "*")) return 0;
  const char *names[8];
  size_t lens[8];
  int req[8], np = 0;
  for (const char *p = params; *p && np < 8;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    req[np] = n && p[n - 1] == '!';
    names[np] = p;
    lens[np] = n - (size_t)req[np];
    np++;
    p += n + (e != NULL);
  }
  if (a->n > np) return jr_fail(r, WEIR_E_INVAL, "%s() takes at most %d arguments (%d given)", f, np, a->n);
  int given[8] = {0};
  for (int i = 0; i < a->n; i++) given[i] = 1;
  for (int k = 0; k < a->nk; k++) {
    int hit = -1;
    for (int i = 0; i < np; i++)
      if (strlen(a->kname[k]) == lens[i] && !strncmp(a->kname[k], names[i], lens[i])) hit = i;
    if (hit < 0) return jr_fail(r, WEIR_E_INVAL, "%s() got an unexpected keyword argument '%s'", f, a->kname[k]);
    /* a keyword repeated in a filter call: the last wins, as Jinja passes them */
    if (hit < a->n) return jr_fail(r, WEIR_E_INVAL, "%s() got multiple values for argument '%s'", f, a->kname[k]);
    given[hit] = 1;
  }
  for (int i = 0; i < np; i++)
    if (req[i] && !given[i]) return jr_fail(r, WEIR_E_INVAL, "%s() missing a required argument", f);
  return 0;
}

int jb_filter(R *r, const char *f, jv v, const jcall *a, jv *out) {
  if (jr_steps(r, 1) || check_filter_args(r, f, a)) return -1;
  jstr *s = NULL, *x = NULL, *y = NULL;
  int64_t k;
  if (!strcmp(f, "default") || !strcmp(f, "d")) {
    jv def;
    if (!arg(a, 0, "default_value", &def) && mkstr(r, "", 0, &def)) return -1;
    int boolean = arg_bool(a, 1, "boolean", 0);
    *out = v.t == JV_UNDEF || (boolean && !jv_truthy(v)) ? def : v;
    return 0;
  }
  if (!strcmp(f, "length") || !strcmp(f, "count")) return f_length(r, v, out);
  if (!strcmp(f, "list")) {
    const jlist *l;
    if (jr_iterate(r, v, &l)) return -1;
    if (l->is_range) {
      jlist *c = jl_new(&r->ar, l->n);
      if (!c) return oom(r);
      if (l->n) memcpy(c->v, l->v, l->n * sizeof(jv));
      l = c;
    }
    *out = jv_listv((jlist *)l, 0);
    return 0;
  }
  if (!strcmp(f, "string")) {
    if (v.t == JV_STR) {
      *out = v;
      return 0;
    }
    if (to_str(r, v, &s)) return -1;
    *out = jv_strv(s);
    return 0;
  }
  if (!strcmp(f, "trim")) {
    if (to_str(r, v, &s) || arg_pystr(r, a, 0, "chars", &x)) return -1;
    return strip(r, s, x, 1, 1, out);
  }
  if (!strcmp(f, "upper")) return change_case(r, v, CASE_UPPER, out);
  if (!strcmp(f, "lower")) return change_case(r, v, CASE_LOWER, out);
  if (!strcmp(f, "capitalize")) return change_case(r, v, CASE_CAPITALIZE, out);
  if (!strcmp(f, "title")) return change_case(r, v, CASE_JTITLE, out);
  if (!strcmp(f, "replace")) {
    jv ov, nv;
    if (!arg(a, 0, "old", &ov) || !arg(a, 1, "new", &nv))
      return jr_fail(r, WEIR_E_INVAL, "replace filter needs old and new");
    if (to_str(r, v, &s) || to_str(r, ov, &x) || to_str(r, nv, &y) ||
        arg_int(r, a, 2, "count", -1, &k))
      return -1;
    return str_replace(r, s, x, y, k, out);
  }
  if (!strcmp(f, "join")) {
    jstr *sep = NULL, *path = NULL;
    if (arg_str(r, a, 0, "d", &sep) || arg_str(r, a, 1, "attribute", &path)) return -1;
    if (path) {
      jv mapped;
      jcall ma = {0, NULL, 1, (const char *[]){"attribute"}, (jv[]){jv_strv(path)}};
      if (f_map(r, v, &ma, &mapped)) return -1;
      v = mapped;
    }
    return str_join(r, sep, v, out);
  }
  if (!strcmp(f, "tojson")) return f_tojson(r, v, a, out);
  if (!strcmp(f, "items")) {
    if (v.t == JV_UNDEF) {
      *out = jv_listv(jl_new(&r->ar, 0), 0);
      return out->l ? 0 : oom(r);
    }
    if (v.t != JV_DICT) return jr_fail(r, WEIR_E_INVAL, "Can only get item pairs from a mapping.");
    return items_of(r, v.d, out);
  }
  if (!strcmp(f, "first")) return f_first_last(r, v, 0, out);
  if (!strcmp(f, "last")) return f_first_last(r, v, 1, out);
  if (!strcmp(f, "map")) return f_map(r, v, a, out);
  if (!strcmp(f, "select")) return f_select(r, v, a, out, 1, 0);
  if (!strcmp(f, "reject")) return f_select(r, v, a, out, 0, 0);
  if (!strcmp(f, "selectattr")) return f_select(r, v, a, out, 1, 1);
  if (!strcmp(f, "rejectattr")) return f_select(r, v, a, out, 0, 1);
  if (!strcmp(f, "int")) return f_int(r, v, a, out);
  if (!strcmp(f, "float")) return f_float(r, v, a, out);
  if (!strcmp(f, "round")) return f_round(r, v, a, out);
  if (!strcmp(f, "abs")) {
    if (v.t == JV_INT) {
      if (v.i == INT64_MIN) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
      *out = jv_int(v.i < 0 ? -v.i : v.i);
    } else if (v.t == JV_BOOL) *out = jv_int(v.b);
    else if (v.t == JV_FLOAT) *out = jv_float(fabs(v.f));
    else return jr_fail(r, WEIR_E_INVAL, "bad operand type for abs(): '%s'", jv_type_name(v));
    return 0;
  }
  if (!strcmp(f, "indent")) return f_indent(r, v, a, out);
  if (!strcmp(f, "unique")) return f_sort(r, v, a, out, 3);
  if (!strcmp(f, "sort")) return f_sort(r, v, a, out, 0);
  if (!strcmp(f, "min")) return f_sort(r, v, a, out, 1);
  if (!strcmp(f, "max")) return f_sort(r, v, a, out, 2);
  if (!strcmp(f, "dictsort")) return f_dictsort(r, v, a, out);
  if (!strcmp(f, "safe")) {
    if (to_str(r, v, &s)) return -1;
    *out = jv_strv(s);
    out->safe = 1;
    return 0;
  }
  if (!strcmp(f, "e") || !strcmp(f, "escape") || !strcmp(f, "forceescape")) {
    if (!strcmp(f, "forceescape")) v.safe = 0;
    return f_escape(r, v, out);
  }
  if (!strcmp(f, "attr")) {
    jv nm;
    if (!arg(a, 0, "name", &nm) || nm.t != JV_STR) return jr_fail(r, WEIR_E_INVAL, "attr needs a name");
    /* Python's getattr: a dict's keys are not its attributes */
    if (v.t == JV_DICT) {
      if (!jb_method(r, v, nm.s->p, out)) *out = jv_undef("no such attribute");
      return r->status ? -1 : 0;
    }
    return jr_getattr(r, v, nm.s->p, out);
  }
  if (!strcmp(f, "center")) {
    if (to_str(r, v, &s) || arg_int(r, a, 0, "width", 80, &k)) return -1;
    return pad(r, s, k, NULL, 0, out);
  }
  if (!strcmp(f, "format")) {
    if (to_str(r, v, &s)) return -1;
    if (a->nk) {
      jdict *d = jd_new(&r->ar);
      if (!d) return oom(r);
      for (int i = 0; i < a->nk; i++)
        if (jd_set_str(&r->ar, d, a->kname[i], a->kval[i])) return oom(r);
      return jb_format_percent(r, s, jv_dictv(d), out);
    }
    jlist *t = jl_new(&r->ar, (size_t)a->n);
    if (!t) return oom(r);
    for (int i = 0; i < a->n; i++) t->v[i] = a->pos[i];
    return jb_format_percent(r, s, jv_listv(t, 1), out);
  }
  if (!strcmp(f, "sum")) return f_sum(r, v, a, out);
  if (!strcmp(f, "batch")) return f_batch(r, v, a, out);
  if (!strcmp(f, "wordcount")) return f_wordcount(r, v, out);
  if (!strcmp(f, "reverse")) return f_reverse(r, v, out);
  if (!strcmp(f, "pprint")) {
    jbuf b = {0};
    if (jv_repr(r, v, &b)) {
      free(b.p);
      return -1;
    }
    return buf_to_str(r, &b, out);
  }
  return jr_fail(r, WEIR_E_INVAL, "No filter named '%s'.", f);
}

/* ---- tests ---- */

static const char *const k_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even",
    "false", "filter", "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le",
    "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
    "string", "test", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">=", NULL};

int jb_has_test(const char *name) { return in_list(k_tests, name); }

static const char *const k_unary_tests[] = {
    "boolean", "callable", "defined", "escaped", "even", "false", "filter", "float", "integer",
    "iterable", "lower", "mapping", "none", "number", "odd", "sequence", "string", "test",
    "true", "undefined", "upper", NULL};

int jb_test(R *r, const char *t, jv v, const jcall *a, int *out) {
  jv x;
  if (jr_steps(r, 1)) return -1;
  int nargs = a->n + a->nk, want = in_list(k_unary_tests, t) ? 0 : 1;
  if (nargs != want)
    return jr_fail(r, WEIR_E_INVAL, "the %s test takes %d argument(s) (%d given)", t, want, nargs);
  int has = arg(a, 0, NULL, &x) || (a->nk && (x = a->kval[0], 1));
  if (!strcmp(t, "defined")) *out = v.t != JV_UNDEF;
  else if (!strcmp(t, "undefined")) *out = v.t == JV_UNDEF;
  else if (!strcmp(t, "none")) *out = v.t == JV_NONE;
  else if (!strcmp(t, "boolean")) *out = v.t == JV_BOOL;
  else if (!strcmp(t, "true")) *out = v.t == JV_BOOL && v.b;
  else if (!strcmp(t, "false")) *out = v.t == JV_BOOL && !v.b;
  else if (!strcmp(t, "integer")) *out = v.t == JV_INT;
  else if (!strcmp(t, "float")) *out = v.t == JV_FLOAT;
  else if (!strcmp(t, "number")) *out = v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
  else if (!strcmp(t, "string")) *out = v.t == JV_STR;
  else if (!strcmp(t, "mapping")) *out = v.t == JV_DICT;
  else if (!strcmp(t, "iterable")) *out = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
  else if (!strcmp(t, "sequence")) *out = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
  else if (!strcmp(t, "callable")) *out = v.t == JV_FUNC || v.t == JV_UNDEF; /* Undefined has __call__ */
  else if (!strcmp(t, "escaped")) *out = v.t == JV_STR && v.safe;
  else if (!strcmp(t, "filter")) *out = v.t == JV_STR && jb_has_filter(v.s->p);
  else if (!strcmp(t, "test")) *out = v.t == JV_STR && jb_has_test(v.s->p);
  else if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
    jstr *s;
    jv res;
    if (to_str(r, v, &s)) return -1;
    jcall none = {0};
    if (m_str(r, jv_strv(s), &none, &res, t[0] == 'l' ? "islower" : "isupper")) return -1;
    *out = res.b;
  } else if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
    int64_t n, d = 2;
    if (v.t == JV_INT) n = v.i;
    else if (v.t == JV_BOOL) n = v.b;
    else return jr_fail(r, WEIR_E_INVAL, "the %s test needs an integer, not %s", t, jv_type_name(v));
    if (t[0] == 'd') {
      if (!has || (x.t != JV_INT && x.t != JV_BOOL)) return jr_fail(r, WEIR_E_INVAL, "divisibleby needs an integer");
      d = x.t == JV_INT ? x.i : x.b;
      if (d == 0) return jr_fail(r, WEIR_E_INVAL, "integer division or modulo by zero");
      *out = d == -1 || n % d == 0;
    } else {
      *out = (n % 2 != 0) == (t[0] == 'o');
    }
  } else if (!strcmp(t, "sameas")) {
    if (!has) return jr_fail(r, WEIR_E_INVAL, "sameas needs an argument");
    if (v.t != x.t) *out = 0;
    else if (v.t == JV_NONE || v.t == JV_UNDEF) *out = 1;
    else if (v.t == JV_BOOL) *out = v.b == x.b;
    else if (v.t == JV_INT) *out = v.i == x.i && v.i >= -5 && v.i <= 256; /* CPython's small ints */
    else if (v.t == JV_STR) *out = v.s == x.s;
    else if (v.t == JV_LIST) *out = v.l == x.l;
    else if (v.t == JV_DICT || v.t == JV_NS) *out = v.d == x.d;
    else *out = jv_equal(v, x);
  } else if (!strcmp(t, "in")) {
    if (!has) return jr_fail(r, WEIR_E_INVAL, "the in test needs an argument");
    if (x.t == JV_STR) {
      if (v.t != JV_STR)
        return jr_fail(r, WEIR_E_INVAL, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
      *out = memmem(x.s->p, x.s->len, v.s->p, v.s->len) != NULL || v.s->len == 0;
    } else if (x.t == JV_LIST) {
      *out = 0;
      for (size_t i = 0; i < x.l->n && !*out; i++) *out = jv_equal(x.l->v[i], v);
    } else if (x.t == JV_DICT) {
      *out = jd_get(x.d, v) != NULL;
    } else if (x.t == JV_UNDEF) {
      *out = 0;
    } else {
      return jr_fail(r, WEIR_E_INVAL, "argument of type '%s' is not iterable", jv_type_name(x));
    }
  } else {
    /* comparisons */
    if (!has) return jr_fail(r, WEIR_E_INVAL, "the %s test needs an argument", t);
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==")) *out = jv_equal(v, x);
    else if (!strcmp(t, "ne") || !strcmp(t, "!=")) *out = !jv_equal(v, x);
    else {
      int c;
      if (v.t == JV_UNDEF || x.t == JV_UNDEF)
        return jr_fail(r, WEIR_E_INVAL, "%s", v.t == JV_UNDEF ? (v.hint ? v.hint : "undefined") : (x.hint ? x.hint : "undefined"));
      if (jb_compare(r, v, x, &c)) return -1;
      if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<")) *out = c < 0;
      else if (!strcmp(t, "le") || !strcmp(t, "<=")) *out = c <= 0;
      else if (!strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">")) *out = c > 0;
      else *out = c >= 0;
    }
  }
  return 0;
}
