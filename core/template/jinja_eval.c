/* The Jinja engine's evaluator: runs a syntax tree against a context within the limits of
 * weir_jinja_limits (jinja_internal.h). Semantics follow Jinja2's: scoping (a for loop body
 * and a macro are scopes, an if is not), the default Undefined (prints as nothing, fails when
 * used in arithmetic or looked into), attribute lookup falling back to items and back. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"
#include "util/utf8.h"
#include "weir/status.h"

enum { EX_OK = 0, EX_ERR = -1, EX_BREAK = 1, EX_CONTINUE = 2 };

int jr_fail(R *r, int status, const char *fmt, ...) {
  if (r->status) return -1;
  r->status = status;
  if (r->err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
    va_end(ap);
    r->err->line = r->line;
    r->err->raised = 0;
  }
  return -1;
}

int jr_raise(R *r, const char *msg, size_t len) {
  if (r->status) return -1;
  r->status = WEIR_E_INVAL;
  if (r->err) {
    if (len >= sizeof r->err->msg) len = sizeof r->err->msg - 1;
    memcpy(r->err->msg, msg, len);
    r->err->msg[len] = '\0';
    r->err->line = r->line;
    r->err->raised = 1;
  }
  return -1;
}

int jr_steps(R *r, uint64_t n) {
  /* saturating: a charge computed from a hostile size must not wrap the counter */
  r->steps = n > UINT64_MAX - r->steps ? UINT64_MAX : r->steps + n;
  if (r->steps > r->lim->max_steps)
    return jr_fail(r, WEIR_E_RANGE, "the template ran for more than %llu steps (an endless loop "
                   "or recursion?)", (unsigned long long)r->lim->max_steps);
  return 0;
}

static int oom(R *r) {
  if (r->ar.over)
    return jr_fail(r, WEIR_E_RANGE, "the template used more than %zu bytes of memory",
                   r->lim->max_memory);
  return jr_fail(r, WEIR_E_NOMEM, "out of memory");
}

static int undef_fail(R *r, jv u) {
  return jr_fail(r, WEIR_E_INVAL, "%s", u.hint ? u.hint : "value is undefined");
}

static const char *hintf(R *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *hintf(R *r, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  jstr *s = js_cstr(&r->ar, buf);
  return s ? s->p : "value is undefined";
}

/* Python's 'X object' phrase for error messages */
static const char *obj_desc(R *r, jv v) {
  if (v.t == JV_NONE) return "'None'";
  return hintf(r, "'%s object'", jv_type_name(v));
}

/* ---- scopes ---- */

static jv *scope_find(jscope *sc, const char *name) {
  for (; sc; sc = sc->parent) {
    jv *v = jd_get_str(&sc->vars, name);
    if (v) return v;
  }
  return NULL;
}

static int lookup(R *r, jscope *sc, const char *name, jv *out) {
  jv *v = scope_find(sc, name);
  if (!v && r->ctx) v = jd_get_str(&r->ctx->vars, name);
  if (v) {
    *out = *v;
    return 0;
  }
  if (jb_global(name, out)) return 0;
  *out = jv_undef(hintf(r, "'%s' is undefined", name));
  return 0;
}

static int scope_set(R *r, jscope *sc, const char *name, jv v) {
  if (jd_set_str(&r->ar, &sc->vars, name, v)) return oom(r);
  return 0;
}

static jscope *scope_new(R *r, jscope *parent) {
  jscope *s = ja_alloc(&r->ar, sizeof *s);
  if (!s) {
    oom(r);
    return NULL;
  }
  s->parent = parent;
  return s;
}

/* ---- output ---- */

static int emit(R *r, const char *p, size_t n) {
  if (jr_steps(r, n / 64)) return -1;
  if (jb_put(r->out, p, n, r->lim->max_output)) {
    if (r->out->len + n > r->lim->max_output)
      return jr_fail(r, WEIR_E_RANGE, "the rendered text is longer than %zu bytes",
                     r->lim->max_output);
    return oom(r);
  }
  return 0;
}

static int emit_value(R *r, jv v) {
  if (v.t == JV_STR) return emit(r, v.s->p, v.s->len);
  if (v.t == JV_UNDEF) return 0;
  size_t before = r->out->len;
  if (jv_str(r, v, r->out)) {
    if (r->out->len > before) r->out->len = before;
    return -1;
  }
  return 0;
}

/* ---- attribute and item access ---- */

static int loop_attr(R *r, const jloop *l, const char *name, jv *out);

int jr_getattr(R *r, jv obj, const char *name, jv *out) {
  if (jr_steps(r, 1)) return -1;
  switch (obj.t) {
  case JV_UNDEF: return undef_fail(r, obj);
  case JV_DICT: {
    if (jb_method(r, obj, name, out)) return r->status ? -1 : 0;
    jv *v = jd_get_str(obj.d, name);
    if (v) {
      *out = *v;
      return 0;
    }
    break;
  }
  case JV_NS: {
    jv *v = jd_get_str(obj.d, name);
    if (v) {
      *out = *v;
      return 0;
    }
    break;
  }
  case JV_STR:
  case JV_LIST:
    if (jb_method(r, obj, name, out)) return r->status ? -1 : 0;
    break;
  case JV_LOOP: return loop_attr(r, obj.loop, name, out);
  default: break;
  }
  *out = jv_undef(hintf(r, "%s has no attribute '%s'", obj_desc(r, obj), name));
  return 0;
}

static int64_t norm_index(int64_t i, int64_t n, int *ok) {
  if (i < 0) i += n;
  *ok = i >= 0 && i < n;
  return i;
}

/* byte offset of code point i in s */
static size_t cp_offset(const jstr *s, size_t i) {
  if (s->ascii) return i;
  size_t off = 0, k = 0;
  while (off < s->len && k < i) {
    off++;
    while (off < s->len && ((unsigned char)s->p[off] & 0xC0) == 0x80) off++;
    k++;
  }
  return off;
}

int jr_getitem(R *r, jv obj, jv key, jv *out) {
  if (jr_steps(r, 1)) return -1;
  if (obj.t == JV_UNDEF) return undef_fail(r, obj);
  if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
    int ok;
    int64_t n = obj.t == JV_LIST ? (int64_t)obj.l->n : (int64_t)js_ncp(obj.s);
    int64_t i = norm_index(key.t == JV_INT ? key.i : key.b, n, &ok);
    if (ok) {
      if (obj.t == JV_LIST) {
        *out = obj.l->v[i];
      } else {
        size_t a = cp_offset(obj.s, (size_t)i), b = cp_offset(obj.s, (size_t)i + 1);
        jstr *s = js_new(&r->ar, obj.s->p + a, b - a);
        if (!s) return oom(r);
        *out = jv_strv(s);
      }
      return 0;
    }
  } else if (obj.t == JV_DICT || obj.t == JV_NS) {
    if (jr_steps(r, obj.d->n / 16)) return -1;
    jv *v = jd_get(obj.d, key);
    if (v) {
      *out = *v;
      return 0;
    }
  }
  if (key.t == JV_STR) {
    /* obj[name] that is no item falls back to the attribute (d['items'] is d.items) */
    if (obj.t == JV_DICT || obj.t == JV_STR || obj.t == JV_LIST) {
      if (jb_method(r, obj, key.s->p, out)) return r->status ? -1 : 0;
    } else if (obj.t == JV_LOOP) {
      return loop_attr(r, obj.loop, key.s->p, out);
    }
    *out = jv_undef(hintf(r, "%s has no attribute '%.100s'", obj_desc(r, obj), key.s->p));
    return 0;
  }
  jbuf kb = {0};
  const char *kd = "?";
  if (jv_repr(r, key, &kb) == 0 && kb.p) kd = hintf(r, "%.100s", kb.p);
  free(kb.p);
  if (r->status) return -1;
  *out = jv_undef(hintf(r, "%s has no element %s", obj_desc(r, obj), kd));
  return 0;
}

/* Python slice indices for a sequence of length n */
static void slice_indices(int64_t n, const jv *start, const jv *stop, int64_t step, int64_t *lo,
                          int64_t *hi) {
  int64_t s, e;
  if (step > 0) {
    s = start ? start->i : 0;
    e = stop ? stop->i : n;
    if (s < 0) s = s + n < 0 ? 0 : s + n;
    if (s > n) s = n;
    if (e < 0) e = e + n < 0 ? 0 : e + n;
    if (e > n) e = n;
  } else {
    s = start ? start->i : n - 1;
    e = stop ? stop->i : -1 - n; /* "before the start" */
    if (s < 0) s = s + n < 0 ? -1 : s + n;
    if (s >= n) s = n - 1;
    if (stop) {
      if (e < 0) e = e + n < 0 ? -1 : e + n;
      if (e >= n) e = n - 1;
    } else {
      e = -1;
    }
  }
  *lo = s;
  *hi = e;
}

static int do_slice(R *r, jv obj, const jv *start, const jv *stop, const jv *stepv, jv *out) {
  int64_t step = stepv ? stepv->i : 1;
  if (step == 0) return jr_fail(r, WEIR_E_INVAL, "slice step cannot be zero");
  if (obj.t != JV_LIST && obj.t != JV_STR) {
    if (obj.t == JV_UNDEF) return undef_fail(r, obj);
    *out = jv_undef(hintf(r, "%s is not subscriptable", obj_desc(r, obj)));
    return 0;
  }
  int64_t n = obj.t == JV_LIST ? (int64_t)obj.l->n : (int64_t)js_ncp(obj.s);
  int64_t lo, hi;
  slice_indices(n, start, stop, step, &lo, &hi);
  /* The step's magnitude in unsigned arithmetic: -step is undefined for INT64_MIN, and
   * hi - lo + step - 1 overflows for a step near INT64_MAX. lo and hi lie in [-1, n]. */
  int64_t count = 0;
  uint64_t mag = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
  if (step > 0 && hi > lo) count = (int64_t)((uint64_t)(hi - lo - 1) / mag + 1);
  if (step < 0 && lo > hi) count = (int64_t)((uint64_t)(lo - hi - 1) / mag + 1);
  if (jr_steps(r, (uint64_t)count / 8)) return -1;
  if (obj.t == JV_LIST) {
    jlist *l = jl_new(&r->ar, (size_t)count);
    if (!l) return oom(r);
    for (int64_t k = 0; k < count; k++) l->v[k] = obj.l->v[lo + k * step];
    *out = jv_listv(l, obj.tup);
    return 0;
  }
  if (step == 1) {
    size_t a = cp_offset(obj.s, (size_t)lo), b = cp_offset(obj.s, (size_t)(lo + count));
    jstr *s = js_new(&r->ar, obj.s->p + a, b - a);
    if (!s) return oom(r);
    *out = jv_strv(s);
    return 0;
  }
  /* general step: collect code point offsets */
  size_t *offs = malloc(((size_t)n + 1) * sizeof *offs);
  if (!offs) return oom(r);
  size_t k = 0;
  for (size_t i = 0; i < obj.s->len; i++)
    if (((unsigned char)obj.s->p[i] & 0xC0) != 0x80) offs[k++] = i;
  offs[k] = obj.s->len;
  char *buf = malloc(obj.s->len + 1);
  if (!buf) {
    free(offs);
    return oom(r);
  }
  size_t o = 0;
  for (int64_t q = 0; q < count; q++) {
    int64_t idx = lo + q * step;
    size_t a = offs[idx], b = offs[idx + 1];
    memcpy(buf + o, obj.s->p + a, b - a);
    o += b - a;
  }
  jstr *s = js_new(&r->ar, buf, o);
  free(buf);
  free(offs);
  if (!s) return oom(r);
  *out = jv_strv(s);
  return 0;
}

/* ---- iteration ---- */

int jr_iterate(R *r, jv v, const jlist **out) {
  static jlist empty = {0, NULL};
  switch (v.t) {
  case JV_UNDEF: *out = &empty; return 0;
  case JV_LIST: *out = v.l; return 0;
  case JV_DICT:
  case JV_NS: {
    if (v.t == JV_NS) break;
    jlist *l = jl_new(&r->ar, v.d->n);
    if (!l) return oom(r);
    for (size_t i = 0; i < v.d->n; i++) l->v[i] = v.d->k[i];
    if (jr_steps(r, v.d->n / 8)) return -1;
    *out = l;
    return 0;
  }
  case JV_STR: {
    size_t n = js_ncp(v.s);
    jlist *l = jl_new(&r->ar, n);
    if (!l) return oom(r);
    if (jr_steps(r, n / 8)) return -1;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
      size_t k = 1;
      while (off + k < v.s->len && ((unsigned char)v.s->p[off + k] & 0xC0) == 0x80) k++;
      jstr *c = js_new(&r->ar, v.s->p + off, k);
      if (!c) return oom(r);
      l->v[i] = jv_strv(c);
      off += k;
    }
    *out = l;
    return 0;
  }
  default: break;
  }
  return jr_fail(r, WEIR_E_INVAL, "'%s' object is not iterable", jv_type_name(v));
}

/* ---- the loop object ---- */

static int loop_cycle(R *r, jv self, const jcall *a, jv *out) {
  if (a->n == 0) return jr_fail(r, WEIR_E_INVAL, "no items for cycling given");
  *out = a->pos[self.loop->index0 % a->n];
  return 0;
}

static int loop_attr(R *r, const jloop *l, const char *name, jv *out) {
  if (!strcmp(name, "index")) *out = jv_int(l->index0 + 1);
  else if (!strcmp(name, "index0")) *out = jv_int(l->index0);
  else if (!strcmp(name, "revindex")) *out = jv_int(l->length - l->index0);
  else if (!strcmp(name, "revindex0")) *out = jv_int(l->length - l->index0 - 1);
  else if (!strcmp(name, "first")) *out = jv_bool(l->index0 == 0);
  else if (!strcmp(name, "last")) *out = jv_bool(l->index0 == l->length - 1);
  else if (!strcmp(name, "length")) *out = jv_int(l->length);
  else if (!strcmp(name, "depth")) *out = jv_int(l->depth0 + 1);
  else if (!strcmp(name, "depth0")) *out = jv_int(l->depth0);
  else if (!strcmp(name, "previtem"))
    *out = l->index0 > 0 ? l->items->v[l->index0 - 1] : jv_undef("there is no previous item");
  else if (!strcmp(name, "nextitem"))
    *out = l->index0 + 1 < l->length ? l->items->v[l->index0 + 1] : jv_undef("there is no next item");
  else if (!strcmp(name, "cycle")) {
    jfunc *f = ja_alloc(&r->ar, sizeof *f);
    if (!f) return oom(r);
    f->kind = F_METHOD;
    f->fn = loop_cycle;
    f->self.t = JV_LOOP;
    f->self.loop = (jloop *)l;
    f->name = "cycle";
    out->t = JV_FUNC;
    out->fn = f;
  } else
    *out = jv_undef(hintf(r, "'LoopContext object' has no attribute '%s'", name));
  return 0;
}

/* ---- expressions ---- */

static int eval(R *r, const jnode *n, jscope *sc, jv *out);

static int eval_args(R *r, const jnode *n, jscope *sc, jcall *a, int extra_kw) {
  int np = n->n_items, nk = n->n_kw;
  const jlist *star = NULL;
  jv dstar = {0};
  if (n->star) {
    jv s;
    if (eval(r, n->star, sc, &s) || jr_iterate(r, s, &star)) return -1;
    np += (int)star->n;
  }
  if (n->dstar) {
    if (eval(r, n->dstar, sc, &dstar)) return -1;
    if (dstar.t != JV_DICT) return jr_fail(r, WEIR_E_INVAL, "argument after ** must be a mapping");
    nk += (int)dstar.d->n;
  }
  a->pos = np ? ja_alloc(&r->ar, (size_t)np * sizeof(jv)) : NULL;
  a->kname = ja_alloc(&r->ar, (size_t)(nk + extra_kw + 1) * sizeof(char *));
  a->kval = ja_alloc(&r->ar, (size_t)(nk + extra_kw + 1) * sizeof(jv));
  if ((np && !a->pos) || !a->kname || !a->kval) return oom(r);
  a->n = 0;
  for (int i = 0; i < n->n_items; i++)
    if (eval(r, n->items[i], sc, &a->pos[a->n++])) return -1;
  if (star)
    for (size_t i = 0; i < star->n; i++) a->pos[a->n++] = star->v[i];
  a->nk = 0;
  for (int i = 0; i < n->n_kw; i++) {
    a->kname[a->nk] = n->kw_names[i];
    if (eval(r, n->kw_vals[i], sc, &a->kval[a->nk++])) return -1;
  }
  if (n->dstar)
    for (size_t i = 0; i < dstar.d->n; i++) {
      if (dstar.d->k[i].t != JV_STR) return jr_fail(r, WEIR_E_INVAL, "keywords must be strings");
      a->kname[a->nk] = dstar.d->k[i].s->p;
      a->kval[a->nk++] = dstar.d->v[i];
    }
  return 0;
}

static int type_err(R *r, const char *op, jv a, jv b) {
  if (a.t == JV_UNDEF) return undef_fail(r, a);
  if (b.t == JV_UNDEF) return undef_fail(r, b);
  return jr_fail(r, WEIR_E_INVAL, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                 jv_type_name(a), jv_type_name(b));
}

static int is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int is_number(jv v) { return is_intlike(v) || v.t == JV_FLOAT; }
static int64_t ival(jv v) { return v.t == JV_INT ? v.i : v.b; }
static double fval(jv v) { return v.t == JV_FLOAT ? v.f : (double)ival(v); }

static int concat_str(R *r, const char *a, size_t an, const char *b, size_t bn, jv *out) {
  if (an + bn > r->lim->max_output)
    return jr_fail(r, WEIR_E_RANGE, "a string would be longer than %zu bytes", r->lim->max_output);
  if (jr_steps(r, (an + bn) / 64)) return -1;
  jstr *s = ja_alloc(&r->ar, sizeof(jstr) + an + bn + 1);
  if (!s) return oom(r);
  memcpy(s->p, a, an);
  memcpy(s->p + an, b, bn);
  s->len = an + bn;
  s->p[s->len] = '\0';
  s->ascii = 1;
  for (size_t i = 0; i < s->len; i++)
    if ((unsigned char)s->p[i] >= 0x80) {
      s->ascii = 0;
      break;
    }
  *out = jv_strv(s);
  return 0;
}

static int repeat(R *r, jv seq, int64_t times, jv *out) {
  if (times < 0) times = 0;
  if (seq.t == JV_STR) {
    /* '' * 2**63 is '' at once: the copy loop below would otherwise spin 2**63 times with no
     * byte to charge to the budget (fuzz_jinja found it). */
    if (seq.s->len == 0) times = 0;
    if (seq.s->len && (uint64_t)times > r->lim->max_output / seq.s->len)
      return jr_fail(r, WEIR_E_RANGE, "a string would be longer than %zu bytes", r->lim->max_output);
    size_t total = seq.s->len * (size_t)times;
    if (jr_steps(r, total / 64)) return -1;
    jstr *s = ja_alloc(&r->ar, sizeof(jstr) + total + 1);
    if (!s) return oom(r);
    for (int64_t i = 0; i < times; i++) memcpy(s->p + (size_t)i * seq.s->len, seq.s->p, seq.s->len);
    s->len = total;
    s->ascii = seq.s->ascii;
    s->p[total] = '\0';
    *out = jv_strv(s);
    return 0;
  }
  if (seq.l->n == 0 || times == 0) {
    jlist *l = jl_new(&r->ar, 0);
    if (!l) return oom(r);
    *out = jv_listv(l, seq.tup);
    return 0;
  }
  if ((uint64_t)times > (1u << 24) / seq.l->n)
    return jr_fail(r, WEIR_E_RANGE, "a list would have more than %u items", 1u << 24);
  size_t total = seq.l->n * (size_t)times;
  if (jr_steps(r, total / 8)) return -1;
  jlist *l = jl_new(&r->ar, total);
  if (!l) return oom(r);
  for (int64_t i = 0; i < times; i++)
    memcpy(l->v + (size_t)i * seq.l->n, seq.l->v, seq.l->n * sizeof(jv));
  *out = jv_listv(l, seq.tup);
  return 0;
}

int jb_format_percent(R *r, jstr *fmt, jv args, jv *out); /* jinja_builtins.c */

static int binary(R *r, int op, jv a, jv b, jv *out) {
  static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
  if (op == OP_CONCAT) {
    jstr *sa, *sb;
    if (jv_to_str(r, a.t == JV_UNDEF ? (jv){.t = JV_STR, .s = js_cstr(&r->ar, "")} : a, &sa))
      return -1;
    if (jv_to_str(r, b.t == JV_UNDEF ? (jv){.t = JV_STR, .s = js_cstr(&r->ar, "")} : b, &sb))
      return -1;
    return concat_str(r, sa->p, sa->len, sb->p, sb->len, out);
  }
  if (is_number(a) && is_number(b)) {
    int fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    int64_t x = ival(a), y = ival(b), z;
    double fx = fval(a), fy = fval(b);
    switch (op) {
    case OP_ADD:
      if (fl) *out = jv_float(fx + fy);
      else if (__builtin_add_overflow(x, y, &z)) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
      else *out = jv_int(z);
      return 0;
    case OP_SUB:
      if (fl) *out = jv_float(fx - fy);
      else if (__builtin_sub_overflow(x, y, &z)) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
      else *out = jv_int(z);
      return 0;
    case OP_MUL:
      if (fl) *out = jv_float(fx * fy);
      else if (__builtin_mul_overflow(x, y, &z)) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
      else *out = jv_int(z);
      return 0;
    case OP_DIV:
      if (fy == 0) return jr_fail(r, WEIR_E_INVAL, "division by zero");
      *out = jv_float(fx / fy);
      return 0;
    case OP_FLOORDIV:
      if (fl) {
        if (fy == 0) return jr_fail(r, WEIR_E_INVAL, "float floor division by zero");
        *out = jv_float(floor(fx / fy));
      } else {
        if (y == 0) return jr_fail(r, WEIR_E_INVAL, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
        *out = jv_int(q);
      }
      return 0;
    case OP_MOD:
      if (fl) {
        if (fy == 0) return jr_fail(r, WEIR_E_INVAL, "float modulo");
        double m = fmod(fx, fy);
        if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
        *out = jv_float(m);
      } else {
        if (y == 0) return jr_fail(r, WEIR_E_INVAL, "integer division or modulo by zero");
        if (y == -1) {
          *out = jv_int(0);
          return 0;
        }
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        *out = jv_int(m);
      }
      return 0;
    case OP_POW:
      if (!fl && y >= 0) {
        int64_t res = 1, base = x;
        int64_t e = y;
        while (e > 0) {
          if (e & 1)
            if (__builtin_mul_overflow(res, base, &res)) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
          e >>= 1;
          if (e && __builtin_mul_overflow(base, base, &base)) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
        }
        *out = jv_int(res);
      } else {
        if (fx == 0 && fy < 0) return jr_fail(r, WEIR_E_INVAL, "0.0 cannot be raised to a negative power");
        *out = jv_float(pow(fx, fy));
      }
      return 0;
    }
  }
  if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR)
    return concat_str(r, a.s->p, a.s->len, b.s->p, b.s->len, out);
  if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && a.tup == b.tup) {
    size_t n = a.l->n + b.l->n;
    if (n > (1u << 24)) return jr_fail(r, WEIR_E_RANGE, "a list would have more than %u items", 1u << 24);
    if (jr_steps(r, n / 8)) return -1;
    jlist *l = jl_new(&r->ar, n);
    if (!l) return oom(r);
    if (a.l->n) memcpy(l->v, a.l->v, a.l->n * sizeof(jv));
    if (b.l->n) memcpy(l->v + a.l->n, b.l->v, b.l->n * sizeof(jv));
    *out = jv_listv(l, a.tup);
    return 0;
  }
  if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && is_intlike(b)) return repeat(r, a, ival(b), out);
  if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && is_intlike(a)) return repeat(r, b, ival(a), out);
  if (op == OP_MOD && a.t == JV_STR) return jb_format_percent(r, a.s, b, out);
  return type_err(r, names[op], a, b);
}

static int contains(R *r, jv item, jv seq, int *out) {
  switch (seq.t) {
  case JV_UNDEF: *out = 0; return 0;
  case JV_STR:
    if (item.t != JV_STR)
      return jr_fail(r, WEIR_E_INVAL, "'in <string>' requires string as left operand, not %s",
                     jv_type_name(item));
    if (jr_steps(r, seq.s->len / 64)) return -1;
    *out = item.s->len == 0 || memmem(seq.s->p, seq.s->len, item.s->p, item.s->len) != NULL;
    return 0;
  case JV_LIST:
    if (jr_steps(r, seq.l->n / 8)) return -1;
    *out = 0;
    for (size_t i = 0; i < seq.l->n; i++)
      if (jv_equal(seq.l->v[i], item)) {
        *out = 1;
        break;
      }
    return 0;
  case JV_DICT:
    if (jr_steps(r, seq.d->n / 8)) return -1;
    *out = jd_get(seq.d, item) != NULL;
    return 0;
  default:
    return jr_fail(r, WEIR_E_INVAL, "argument of type '%s' is not iterable", jv_type_name(seq));
  }
}

static int compare_op(R *r, int op, jv a, jv b, int *res) {
  switch (op) {
  case OP_EQ: *res = jv_equal(a, b); return 0;
  case OP_NE: *res = !jv_equal(a, b); return 0;
  case OP_IN: return contains(r, a, b, res);
  case OP_NOTIN:
    if (contains(r, a, b, res)) return -1;
    *res = !*res;
    return 0;
  default: {
    if (a.t == JV_UNDEF) return undef_fail(r, a);
    if (b.t == JV_UNDEF) return undef_fail(r, b);
    int c;
    static const char *const sym[] = {[OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">="};
    if (jb_compare(r, a, b, &c)) {
      if (r->status && r->err && strstr(r->err->msg, "not supported between"))
        snprintf(r->err->msg, sizeof r->err->msg,
                 "'%s' not supported between instances of '%s' and '%s'", sym[op],
                 jv_type_name(a), jv_type_name(b));
      return -1;
    }
    *res = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
    return 0;
  }
  }
}

static int eval_inner(R *r, const jnode *n, jscope *sc, jv *out) {
  jv a, b;
  switch (n->kind) {
  case N_CONST: *out = n->val; return 0;
  case N_NAME: return lookup(r, sc, n->name, out);
  case N_LIST:
  case N_TUPLE: {
    jlist *l = jl_new(&r->ar, (size_t)n->n_items);
    if (!l) return oom(r);
    for (int i = 0; i < n->n_items; i++)
      if (eval(r, n->items[i], sc, &l->v[i])) return -1;
    *out = jv_listv(l, n->kind == N_TUPLE);
    return 0;
  }
  case N_DICT: {
    jdict *d = jd_new(&r->ar);
    if (!d) return oom(r);
    for (int i = 0; i + 1 < n->n_items; i += 2) {
      if (eval(r, n->items[i], sc, &a) || eval(r, n->items[i + 1], sc, &b)) return -1;
      if (a.t == JV_LIST && !a.tup) return jr_fail(r, WEIR_E_INVAL, "unhashable type: 'list'");
      if (a.t == JV_DICT) return jr_fail(r, WEIR_E_INVAL, "unhashable type: 'dict'");
      if (jd_set(&r->ar, d, a, b)) return oom(r);
    }
    *out = jv_dictv(d);
    return 0;
  }
  case N_ATTR:
    if (eval(r, n->a, sc, &a)) return -1;
    return jr_getattr(r, a, n->name, out);
  case N_ITEM:
    if (eval(r, n->a, sc, &a) || eval(r, n->b, sc, &b)) return -1;
    return jr_getitem(r, a, b, out);
  case N_SLICE: {
    jv s = {0}, e = {0}, st = {0};
    if (eval(r, n->a, sc, &a)) return -1;
    const jnode *parts[3] = {n->b, n->c, n->d};
    jv *vals[3] = {&s, &e, &st};
    const jv *use[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
      if (!parts[i]) continue;
      if (eval(r, parts[i], sc, vals[i])) return -1;
      if (vals[i]->t == JV_NONE) continue;
      if (vals[i]->t == JV_BOOL) *vals[i] = jv_int(vals[i]->b);
      if (vals[i]->t != JV_INT)
        return jr_fail(r, WEIR_E_INVAL, "slice indices must be integers or None, not %s",
                       jv_type_name(*vals[i]));
      use[i] = vals[i];
    }
    return do_slice(r, a, use[0], use[1], use[2], out);
  }
  case N_CALL: {
    jcall args;
    if (eval(r, n->a, sc, &a) || eval_args(r, n, sc, &args, 0)) return -1;
    return jr_call(r, a, &args, out);
  }
  case N_FILTER: {
    jcall args;
    if (eval(r, n->a, sc, &a) || eval_args(r, n, sc, &args, 0)) return -1;
    return jb_filter(r, n->name, a, &args, out);
  }
  case N_TEST: {
    jcall args;
    int res;
    if (eval(r, n->a, sc, &a) || eval_args(r, n, sc, &args, 0)) return -1;
    if (jb_test(r, n->name, a, &args, &res)) return -1;
    *out = jv_bool(n->neg ? !res : res);
    return 0;
  }
  case N_NEG:
  case N_POS:
    if (eval(r, n->a, sc, &a)) return -1;
    if (a.t == JV_UNDEF) return undef_fail(r, a);
    if (a.t == JV_FLOAT) *out = jv_float(n->kind == N_NEG ? -a.f : a.f);
    else if (is_intlike(a)) {
      if (n->kind == N_NEG && ival(a) == INT64_MIN) return jr_fail(r, WEIR_E_RANGE, "integer overflow");
      *out = jv_int(n->kind == N_NEG ? -ival(a) : ival(a));
    } else
      return jr_fail(r, WEIR_E_INVAL, "bad operand type for unary %s: '%s'",
                     n->kind == N_NEG ? "-" : "+", jv_type_name(a));
    return 0;
  case N_NOT:
    if (eval(r, n->a, sc, &a)) return -1;
    *out = jv_bool(!jv_truthy(a));
    return 0;
  case N_AND:
    if (eval(r, n->a, sc, &a)) return -1;
    if (!jv_truthy(a)) {
      *out = a;
      return 0;
    }
    return eval(r, n->b, sc, out);
  case N_OR:
    if (eval(r, n->a, sc, &a)) return -1;
    if (jv_truthy(a)) {
      *out = a;
      return 0;
    }
    return eval(r, n->b, sc, out);
  case N_BIN:
    if (eval(r, n->a, sc, &a) || eval(r, n->b, sc, &b)) return -1;
    return binary(r, n->op, a, b, out);
  case N_CMP: {
    if (eval(r, n->a, sc, &a)) return -1;
    for (int i = 0; i < n->n_items; i++) {
      int res;
      if (eval(r, n->items[i], sc, &b) || compare_op(r, n->ops[i], a, b, &res)) return -1;
      if (!res) {
        *out = jv_bool(0);
        return 0;
      }
      a = b;
    }
    *out = jv_bool(1);
    return 0;
  }
  case N_COND:
    if (eval(r, n->a, sc, &a)) return -1;
    if (jv_truthy(a)) return eval(r, n->b, sc, out);
    if (n->c) return eval(r, n->c, sc, out);
    *out = jv_undef("the inline if-expression evaluated to false and no else section was defined.");
    return 0;
  default: return jr_fail(r, WEIR_E_INTERNAL, "not an expression (node %d)", n->kind);
  }
}

/* Entering any node, expression or statement: the depth and step limits, and the node's
 * line for error messages (the caller restores *saved unless it failed, so an error keeps
 * the line where it happened). -1 when a limit is reached. */
static int enter(R *r, const jnode *n, int *saved) {
  if (++r->depth > r->lim->max_depth)
    return jr_fail(r, WEIR_E_RANGE, "the template nests deeper than %d levels (endless "
                   "recursion?)", r->lim->max_depth);
  if (jr_steps(r, 1)) return -1;
  *saved = r->line;
  r->line = n->line;
  return 0;
}

static int eval(R *r, const jnode *n, jscope *sc, jv *out) {
  int saved = 0;
  if (enter(r, n, &saved)) return -1;
  int rc = eval_inner(r, n, sc, out);
  if (rc == 0) r->line = saved;
  r->depth--;
  return rc;
}

/* ---- statements ---- */

static int exec(R *r, const jnode *n, jscope *sc);

static int assign(R *r, const jnode *target, jv v, jscope *sc) {
  if (target->kind == N_NAME) return scope_set(r, sc, target->name, v);
  if (target->kind == N_ATTR) {
    jv ns;
    if (lookup(r, sc, target->a->name, &ns)) return -1;
    if (ns.t != JV_NS) return jr_fail(r, WEIR_E_INVAL, "cannot assign attribute on non-namespace object");
    if (jd_set_str(&r->ar, ns.d, target->name, v)) return oom(r);
    return 0;
  }
  /* a tuple of targets: unpack */
  const jlist *items;
  if (v.t == JV_UNDEF) return undef_fail(r, v);
  if (jr_iterate(r, v, &items)) return -1;
  if ((int)items->n != target->n_items)
    return jr_fail(r, WEIR_E_INVAL, (int)items->n > target->n_items
                   ? "too many values to unpack (expected %d)" : "not enough values to unpack (expected %d)",
                   target->n_items);
  for (int i = 0; i < target->n_items; i++)
    if (assign(r, target->items[i], items->v[i], sc)) return -1;
  return 0;
}

static int capture(R *r, const jnode *body, jscope *sc, jv *out) {
  jbuf buf = {0}, *saved = r->out;
  r->out = &buf;
  int rc = exec(r, body, sc);
  r->out = saved;
  if (rc == EX_OK) {
    jstr *s = js_new(&r->ar, buf.p ? buf.p : "", buf.len);
    if (!s) rc = oom(r);
    else *out = jv_strv(s);
  } else if (rc > 0) {
    rc = jr_fail(r, WEIR_E_INVAL, "break or continue outside a loop");
  }
  free(buf.p);
  return rc;
}

static int apply_filters(R *r, const jnode *chain, jv in, jscope *sc, jv *out) {
  if (!chain) {
    *out = in;
    return 0;
  }
  jv base;
  if (apply_filters(r, chain->a, in, sc, &base)) return -1;
  jcall args;
  if (eval_args(r, chain, sc, &args, 0)) return -1;
  return jb_filter(r, chain->name, base, &args, out);
}

static int make_macro(R *r, const jnode *def, jscope *sc, jv *out) {
  jfunc *f = ja_alloc(&r->ar, sizeof *f);
  if (!f) return oom(r);
  f->kind = F_MACRO;
  f->def = def;
  f->closure = sc;
  f->name = def->kind == N_MACRO ? def->name : "caller";
  out->t = JV_FUNC;
  out->fn = f;
  return 0;
}

static int exec_for(R *r, const jnode *n, jscope *sc) {
  jv seqv;
  const jlist *seq;
  if (eval(r, n->b, sc, &seqv)) return -1;
  if (seqv.t == JV_NONE) return jr_fail(r, WEIR_E_INVAL, "'NoneType' object is not iterable");
  if (jr_iterate(r, seqv, &seq)) return -1;
  if (n->c) { /* for x in y if cond: filter first, so loop.* count the kept items */
    jlist *kept = jl_new(&r->ar, seq->n);
    if (!kept) return oom(r);
    kept->n = 0;
    jscope *it = scope_new(r, sc);
    if (!it) return -1;
    for (size_t i = 0; i < seq->n; i++) {
      jv c;
      it->vars.n = 0;
      if (assign(r, n->a, seq->v[i], it) || eval(r, n->c, it, &c)) return -1;
      if (jv_truthy(c)) kept->v[kept->n++] = seq->v[i];
    }
    seq = kept;
  }
  int depth0 = 0;
  jv outer;
  if (lookup(r, sc, "loop", &outer) == 0 && outer.t == JV_LOOP) depth0 = outer.loop->depth0 + 1;
  /* Each iteration starts from an empty scope. Without closures in the body one scope is
   * reused (emptied), which keeps long loops from filling the memory budget. */
  jscope *shared = n->op ? NULL : scope_new(r, sc);
  if (!n->op && !shared) return -1;
  for (size_t i = 0; i < seq->n; i++) {
    if (jr_steps(r, 1)) return -1;
    jscope *it = shared ? shared : scope_new(r, sc);
    jloop *l = ja_alloc(&r->ar, sizeof *l);
    if (!it || !l) return oom(r);
    it->vars.n = 0;
    l->index0 = (int64_t)i;
    l->length = (int64_t)seq->n;
    l->items = seq;
    l->depth0 = depth0;
    jv lv = {0};
    lv.t = JV_LOOP;
    lv.loop = l;
    if (scope_set(r, it, "loop", lv) || assign(r, n->a, seq->v[i], it)) return -1;
    int rc = exec(r, n->d, it);
    if (rc == EX_ERR) return -1;
    if (rc == EX_BREAK) break;
  }
  if (seq->n == 0 && n->e) return exec(r, n->e, sc);
  return 0;
}

static int exec_inner(R *r, const jnode *n, jscope *sc) {
  jv v;
  switch (n->kind) {
  case N_BODY:
    for (int i = 0; i < n->n_items; i++) {
      int rc = exec(r, n->items[i], sc);
      if (rc) return rc;
    }
    return 0;
  case N_TEXT: return emit(r, n->val.s->p, n->val.s->len);
  case N_OUT:
    if (eval(r, n->a, sc, &v)) return -1;
    return emit_value(r, v);
  case N_IF:
    if (eval(r, n->a, sc, &v)) return -1;
    if (jv_truthy(v)) return exec(r, n->b, sc);
    return n->c ? exec(r, n->c, sc) : 0;
  case N_FOR: return exec_for(r, n, sc);
  case N_SET:
    if (eval(r, n->b, sc, &v)) return -1;
    return assign(r, n->a, v, sc);
  case N_SETBLOCK: {
    jv f;
    if (capture(r, n->b, sc, &v) || apply_filters(r, n->c, v, sc, &f)) return -1;
    return assign(r, n->a, f, sc);
  }
  case N_FILTERBLOCK: {
    jv f;
    if (capture(r, n->b, sc, &v) || apply_filters(r, n->a, v, sc, &f)) return -1;
    return emit_value(r, f);
  }
  case N_MACRO:
    if (make_macro(r, n, sc, &v)) return -1;
    return scope_set(r, sc, n->name, v);
  case N_CALLBLOCK: {
    jv callee, caller, res;
    jcall args;
    const jnode *call = n->a;
    if (make_macro(r, n, sc, &caller) || eval(r, call->a, sc, &callee) ||
        eval_args(r, call, sc, &args, 1))
      return -1;
    args.kname[args.nk] = "caller";
    args.kval[args.nk++] = caller;
    if (jr_call(r, callee, &args, &res)) return -1;
    return emit_value(r, res);
  }
  case N_WITH: {
    jscope *inner = scope_new(r, sc);
    if (!inner) return -1;
    for (int i = 0; i + 1 < n->n_items; i += 2)
      if (eval(r, n->items[i + 1], sc, &v) || assign(r, n->items[i], v, inner)) return -1;
    return exec(r, n->b, inner);
  }
  case N_BREAK: return EX_BREAK;
  case N_CONTINUE: return EX_CONTINUE;
  default: return jr_fail(r, WEIR_E_INTERNAL, "not a statement (node %d)", n->kind);
  }
}

static int exec(R *r, const jnode *n, jscope *sc) {
  int saved = 0;
  if (enter(r, n, &saved)) return EX_ERR;
  int rc = exec_inner(r, n, sc);
  if (rc != EX_ERR) r->line = saved;
  r->depth--;
  return rc;
}

/* ---- calls ---- */

static int call_macro(R *r, const jfunc *f, const jcall *a, jv *out) {
  const jnode *d = f->def;
  jscope *sc = scope_new(r, f->closure);
  if (!sc) return -1;
  int np = d->n_params;
  if (a->n > np && !(d->op & 1))
    return jr_fail(r, WEIR_E_INVAL, "macro '%s' takes not more than %d argument(s)", f->name, np);
  for (int i = 0; i < np; i++) {
    jv v;
    int set = 0;
    if (i < a->n) {
      v = a->pos[i];
      set = 1;
    }
    for (int k = 0; k < a->nk; k++)
      if (strcmp(a->kname[k], d->params[i]) == 0) {
        if (set && i < a->n)
          return jr_fail(r, WEIR_E_INVAL, "macro '%s' got multiple values for argument '%s'",
                         f->name, d->params[i]);
        v = a->kval[k];
        set = 1;
      }
    if (!set) {
      if (i < d->n_items && d->items[i]) {
        if (eval(r, d->items[i], sc, &v)) return -1;
      } else {
        v = jv_undef(hintf(r, "parameter '%s' was not provided", d->params[i]));
      }
    }
    if (scope_set(r, sc, d->params[i], v)) return -1;
  }
  /* extra positional arguments are varargs, unknown keywords kwargs; `caller` is special */
  int nv = a->n > np ? a->n - np : 0;
  jlist *va = jl_new(&r->ar, (size_t)nv);
  jdict *kw = jd_new(&r->ar);
  if (!va || !kw) return oom(r);
  for (int i = 0; i < nv; i++) va->v[i] = a->pos[np + i];
  for (int k = 0; k < a->nk; k++) {
    int known = 0;
    for (int i = 0; i < np; i++) known |= strcmp(a->kname[k], d->params[i]) == 0;
    if (known) continue;
    if (strcmp(a->kname[k], "caller") == 0) {
      if (scope_set(r, sc, "caller", a->kval[k])) return -1;
      continue;
    }
    if (!(d->op & 2))
      return jr_fail(r, WEIR_E_INVAL, "macro '%s' takes no keyword argument '%s'", f->name, a->kname[k]);
    if (jd_set_str(&r->ar, kw, a->kname[k], a->kval[k])) return oom(r);
  }
  if (scope_set(r, sc, "varargs", jv_listv(va, 1)) || scope_set(r, sc, "kwargs", jv_dictv(kw)))
    return -1;
  /* with autoescape off (as transformers has it) a macro returns a plain str */
  return capture(r, d->b, sc, out);
}

int jr_call(R *r, jv fn, const jcall *a, jv *out) {
  if (jr_steps(r, 1)) return -1;
  if (fn.t == JV_UNDEF) return undef_fail(r, fn);
  if (fn.t != JV_FUNC) return jr_fail(r, WEIR_E_INVAL, "'%s' object is not callable", jv_type_name(fn));
  const jfunc *f = fn.fn;
  if (f->kind == F_MACRO) {
    if (++r->depth > r->lim->max_depth)
      return jr_fail(r, WEIR_E_RANGE, "the template nests deeper than %d levels (endless "
                     "recursion?)", r->lim->max_depth);
    int rc = call_macro(r, f, a, out);
    r->depth--;
    return rc;
  }
  return f->fn(r, f->self, a, out);
}

/* ---- the interface ---- */

void weir_jinja_limits_default(weir_jinja_limits *lim) {
  lim->max_steps = 5000000;
  lim->max_output = 8u << 20;
  lim->max_memory = 256u << 20;
  lim->max_depth = 200;
  lim->now = -1;
}

int weir_jinja_render(const weir_jinja_template *t, const weir_jinja_ctx *c,
                      const weir_jinja_limits *lim, char **out, size_t *out_len,
                      weir_jinja_error *err) {
  weir_jinja_limits def;
  weir_jinja_error scratch;
  if (!err) err = &scratch;
  memset(err, 0, sizeof *err);
  if (!out || !t) return WEIR_E_INVAL;
  *out = NULL;
  if (!lim) {
    weir_jinja_limits_default(&def);
    lim = &def;
  }
  jbuf buf = {0};
  R r = {.lim = lim, .ctx = c, .err = err, .out = &buf};
  r.ar.cap = lim->max_memory;
  jscope *top = scope_new(&r, NULL);
  int rc = top ? exec(&r, t->root, top) : -1;
  if (rc > 0) rc = jr_fail(&r, WEIR_E_INVAL, "break or continue outside a loop");
  if (rc == 0 && !buf.p && jb_put(&buf, "", 0, (size_t)-1)) rc = oom(&r);
  ja_free(&r.ar);
  if (rc) {
    free(buf.p);
    jv_utf8_clean(err->msg);
    return r.status ? r.status : WEIR_E_INTERNAL;
  }
  *out = buf.p;
  if (out_len) *out_len = buf.len;
  return 0;
}

/* ---- contexts ---- */

int weir_jinja_ctx_new(weir_jinja_ctx **out) {
  *out = calloc(1, sizeof **out);
  return *out ? 0 : WEIR_E_NOMEM;
}

void weir_jinja_ctx_free(weir_jinja_ctx *c) {
  if (!c) return;
  ja_free(&c->ar);
  free(c);
}

static int ctx_set(weir_jinja_ctx *c, const char *name, jv v) {
  if (!c || !name) return WEIR_E_INVAL;
  return jd_set_str(&c->ar, &c->vars, name, v) ? WEIR_E_NOMEM : 0;
}

int weir_jinja_ctx_set_str(weir_jinja_ctx *c, const char *name, const char *s, size_t len) {
  if (!c || !s) return WEIR_E_INVAL;
  jstr *js = js_new(&c->ar, s, len);
  return js ? ctx_set(c, name, jv_strv(js)) : WEIR_E_NOMEM;
}
int weir_jinja_ctx_set_bool(weir_jinja_ctx *c, const char *name, int b) { return ctx_set(c, name, jv_bool(b)); }
int weir_jinja_ctx_set_int(weir_jinja_ctx *c, const char *name, int64_t v) { return ctx_set(c, name, jv_int(v)); }
int weir_jinja_ctx_set_none(weir_jinja_ctx *c, const char *name) { return ctx_set(c, name, jv_none()); }

int weir_jinja_ctx_set_cjson(weir_jinja_ctx *c, const char *name, const cJSON *v) {
  if (!c) return WEIR_E_INVAL;
  jv x;
  int rc = jv_from_cjson(&c->ar, v, &x, 0);
  return rc ? rc : ctx_set(c, name, x);
}

int weir_jinja_ctx_set_json(weir_jinja_ctx *c, const char *name, const char *json, size_t len,
                            char *err, size_t errlen) {
  if (!c || !json) return WEIR_E_INVAL;
  jv x;
  int rc = jv_parse_json(&c->ar, json, len, &x, err, errlen);
  return rc ? rc : ctx_set(c, name, x);
}

static int ctx_update(weir_jinja_ctx *c, jv obj) {
  if (obj.t != JV_DICT) return WEIR_E_INVAL;
  for (size_t i = 0; i < obj.d->n; i++) {
    if (obj.d->k[i].t != JV_STR) return WEIR_E_INVAL;
    int rc = ctx_set(c, obj.d->k[i].s->p, obj.d->v[i]);
    if (rc) return rc;
  }
  return 0;
}

int weir_jinja_ctx_update_cjson(weir_jinja_ctx *c, const cJSON *obj) {
  if (!c || !cJSON_IsObject(obj)) return WEIR_E_INVAL;
  jv x;
  int rc = jv_from_cjson(&c->ar, obj, &x, 0);
  return rc ? rc : ctx_update(c, x);
}

int weir_jinja_ctx_update_json(weir_jinja_ctx *c, const char *json, size_t len, char *err,
                               size_t errlen) {
  if (!c || !json) return WEIR_E_INVAL;
  jv x;
  int rc = jv_parse_json(&c->ar, json, len, &x, err, errlen);
  return rc ? rc : ctx_update(c, x);
}

int weir_jinja_ctx_has(const weir_jinja_ctx *c, const char *name) {
  return c && name && jd_get_str(&c->vars, name) != NULL;
}
