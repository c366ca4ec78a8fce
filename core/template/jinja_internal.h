/* The Jinja engine's shared internals: arenas, the value model, the syntax tree, the render
 * state (core/template/jinja*.c only; the interface is jinja.h).
 *
 * Memory. Everything a template, a context or a render creates lives in that object's arena
 * and is freed with it at once: values are never freed one by one, so they can be shared
 * freely (a list holds the very strings of the context). A render's arena is capped by
 * weir_jinja_limits.max_memory. Values are immutable once built, except a namespace's
 * attributes (Jinja's `set ns.x = ...`). */
#ifndef WEIR_TEMPLATE_JINJA_INTERNAL_H
#define WEIR_TEMPLATE_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "template/jinja.h"
#include "util/buf.h"

/* Link names. These functions are shared by the jinja*.c files alone, so their symbols carry
 * the internal prefix (weir__, docs/architecture.md "Layers and names"); the sources keep the
 * engine's short names. */
#define ja_alloc weir__jinja_ja_alloc
#define ja_free weir__jinja_ja_free
#define jb_compare weir__jinja_jb_compare
#define jb_filter weir__jinja_jb_filter
#define jb_format_percent weir__jinja_jb_format_percent
#define jb_global weir__jinja_jb_global
#define jb_has_filter weir__jinja_jb_has_filter
#define jb_has_test weir__jinja_jb_has_test
#define jb_method weir__jinja_jb_method
#define jb_put weir__jinja_jb_put
#define jb_putc weir__jinja_jb_putc
#define jb_test weir__jinja_jb_test
#define jd_get weir__jinja_jd_get
#define jd_get_str weir__jinja_jd_get_str
#define jd_new weir__jinja_jd_new
#define jd_set weir__jinja_jd_set
#define jd_set_str weir__jinja_jd_set_str
#define jl_new weir__jinja_jl_new
#define jr_call weir__jinja_jr_call
#define jr_fail weir__jinja_jr_fail
#define jr_getattr weir__jinja_jr_getattr
#define jr_getitem weir__jinja_jr_getitem
#define jr_iterate weir__jinja_jr_iterate
#define jr_raise weir__jinja_jr_raise
#define jr_steps weir__jinja_jr_steps
#define js_cstr weir__jinja_js_cstr
#define js_ncp weir__jinja_js_ncp
#define js_new weir__jinja_js_new
#define jv_equal weir__jinja_jv_equal
#define jv_from_cjson weir__jinja_jv_from_cjson
#define jv_json weir__jinja_jv_json
#define jv_parse_json weir__jinja_jv_parse_json
#define jv_repr weir__jinja_jv_repr
#define jv_str weir__jinja_jv_str
#define jv_to_str weir__jinja_jv_to_str
#define jv_truthy weir__jinja_jv_truthy
#define jv_type_name weir__jinja_jv_type_name
#define jv_utf8_clean weir__jinja_jv_utf8_clean
#define py_float_repr weir__jinja_py_float_repr
#define py_isspace weir__jinja_py_isspace

/* ---- arenas ---- */

typedef struct jchunk {
  struct jchunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char mem[];
} jchunk;

typedef struct jarena {
  jchunk *head;
  size_t total; /* bytes taken from malloc */
  size_t cap;   /* 0: unlimited */
  int over;     /* 1 once an allocation was refused for the cap */
} jarena;

void *ja_alloc(jarena *a, size_t n); /* 16-byte aligned, zeroed; NULL when out of memory */
void ja_free(jarena *a);

/* ---- values ---- */

typedef enum jtype {
  JV_UNDEF = 0,
  JV_NONE,
  JV_BOOL,
  JV_INT,
  JV_FLOAT,
  JV_STR,
  JV_LIST, /* also tuples (flag tup) */
  JV_DICT,
  JV_NS,   /* namespace(): a mutable dict of attributes */
  JV_FUNC, /* macro, caller, global function or bound method */
  JV_LOOP, /* the `loop` of a for loop */
} jtype;

typedef struct jstr {
  size_t len;
  int ascii; /* 1 when every byte < 0x80: code point i is byte i */
  char p[];  /* NUL-terminated */
} jstr;

struct jlist;
struct jdict;
struct jfunc;
struct jloop;

typedef struct jv {
  uint8_t t;
  uint8_t tup;  /* JV_LIST: a tuple (prints as (a, b)) */
  uint8_t safe; /* JV_STR: produced by a macro call (Markup); printing is the same */
  union {
    int b;
    int64_t i;
    double f;
    jstr *s;
    struct jlist *l;
    struct jdict *d; /* JV_DICT and JV_NS */
    struct jfunc *fn;
    struct jloop *loop;
    const char *hint; /* JV_UNDEF: why it is undefined (NULL: unnamed) */
  };
} jv;

typedef struct jlist {
  size_t n;
  jv *v;
  int is_range; /* made by range(): prints as range(start, stop[, step]) */
  int64_t r_start, r_stop, r_step;
} jlist;

typedef struct jdict {
  size_t n, cap;
  jv *k, *v;
} jdict;

/* ---- the syntax tree ---- */

typedef enum jnkind {
  /* expressions */
  N_CONST,
  N_NAME,
  N_LIST,
  N_TUPLE,
  N_DICT, /* items: key, value, key, value ... */
  N_ATTR,
  N_ITEM,
  N_SLICE, /* a: object, b c d: start stop step (each may be NULL) */
  N_CALL,
  N_FILTER, /* a: operand (NULL in a filter block chain) */
  N_TEST,
  N_NEG,
  N_POS,
  N_NOT,
  N_BIN,
  N_AND,
  N_OR,
  N_CMP,  /* a: first operand; items: the others; ops: one per item */
  N_COND, /* a: condition, b: then, c: else (NULL: undefined) */
  /* statements */
  N_TEXT,
  N_OUT,
  N_BODY,
  N_IF,   /* a: condition, b: body, c: else body */
  N_FOR,  /* a: target, b: iterable, c: filter, d: body, e: else body; op: 1 when the body
           * defines a macro or call block (a closure over the iteration's scope) */
  N_SET,  /* a: target, b: value */
  N_SETBLOCK, /* a: target, b: body, c: filter chain or NULL */
  N_MACRO,    /* name; params: names; items: defaults (NULL when none); b: body; op: bit 0
               * the body reads varargs, bit 1 kwargs (extra arguments allowed) */
  N_CALLBLOCK, /* a: the call; params/items: the caller's; b: body */
  N_FILTERBLOCK, /* a: filter chain, b: body */
  N_WITH,     /* items: targets, values alternating; b: body */
  N_BREAK,
  N_CONTINUE,
} jnkind;

enum {
  OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
  OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
};

typedef struct jnode jnode;
struct jnode {
  uint8_t kind, op, neg; /* neg: N_TEST `is not` */
  int line;
  jnode *a, *b, *c, *d, *e;
  jnode **items;
  int n_items;
  uint8_t *ops;          /* N_CMP */
  const char *name;      /* N_NAME, N_ATTR, N_FILTER, N_TEST, N_MACRO */
  const char **params;   /* N_MACRO, N_CALLBLOCK parameter names */
  int n_params;
  /* calls, filters, tests: positional args in items; keyword args here */
  const char **kw_names;
  jnode **kw_vals;
  int n_kw;
  jnode *star, *dstar;   /* *args, **kwargs */
  jv val;                /* N_CONST; N_TEXT's text */
};

struct weir_jinja_template {
  jarena ar;
  jnode *root;
};

struct weir_jinja_ctx {
  jarena ar;
  jdict vars;
};

/* ---- functions, loops, scopes ---- */

typedef struct jscope {
  struct jscope *parent;
  jdict vars;
} jscope;

struct R;
typedef struct jcall {
  int n;
  jv *pos;
  int nk;
  const char **kname;
  jv *kval;
} jcall;

typedef int (*jbuiltin_fn)(struct R *r, jv self, const jcall *a, jv *out);

enum { F_MACRO, F_BUILTIN, F_METHOD };

typedef struct jfunc {
  int kind;
  const jnode *def;   /* F_MACRO: the macro or call block */
  jscope *closure;    /* F_MACRO: where it was defined */
  const jv *caller;   /* F_MACRO: the `caller` its body sees, or NULL */
  jbuiltin_fn fn;     /* F_BUILTIN, F_METHOD */
  jv self;            /* F_METHOD: the receiver */
  const char *name;
} jfunc;

typedef struct jloop {
  int64_t index0, length;
  const jlist *items;
  int depth0;
} jloop;

/* ---- the render state ---- */

/* Rendered text: the shared growable buffer (util/buf.h); jb_put adds the output limit. */
typedef weir_buf jbuf;

typedef struct R {
  jarena ar;
  const weir_jinja_limits *lim;
  const weir_jinja_ctx *ctx;
  weir_jinja_error *err;
  int status;        /* 0, or the first failure's weir_status */
  uint64_t steps;
  int depth;
  int line;          /* line of the node being evaluated */
  jbuf *out;         /* where output goes now (a capture during a macro call or set block) */
} R;

/* Records the first error: status, message, line; returns -1. */
int jr_fail(R *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int jr_raise(R *r, const char *msg, size_t len); /* raise_exception */
/* Charges n steps; -1 (and the error) when the budget runs out. */
int jr_steps(R *r, uint64_t n);

/* ---- value helpers (jinja_value.c) ---- */

static inline jv jv_undef(const char *hint) { jv v = {0}; v.t = JV_UNDEF; v.hint = hint; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(int b) { jv v = {0}; v.t = JV_BOOL; v.b = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.f = f; return v; }
static inline jv jv_strv(jstr *s) { jv v = {0}; v.t = JV_STR; v.s = s; return v; }
static inline jv jv_listv(jlist *l, int tup) { jv v = {0}; v.t = JV_LIST; v.l = l; v.tup = (uint8_t)tup; return v; }
static inline jv jv_dictv(jdict *d) { jv v = {0}; v.t = JV_DICT; v.d = d; return v; }

jstr *js_new(jarena *a, const char *p, size_t n);
jstr *js_cstr(jarena *a, const char *p);
jlist *jl_new(jarena *a, size_t n);
jdict *jd_new(jarena *a);
int jd_set(jarena *a, jdict *d, jv k, jv v);          /* 0 or -1 (out of memory) */
int jd_set_str(jarena *a, jdict *d, const char *k, jv v);
jv *jd_get(const jdict *d, jv k);                      /* NULL when absent */
jv *jd_get_str(const jdict *d, const char *k);

int jv_truthy(jv v);
int jv_equal(jv a, jv b);
const char *jv_type_name(jv v); /* Python's type names: 'str', 'int', 'dict' ... */

/* A growable buffer; jb_put returns -1 when it would pass `max` bytes or out of memory. */
int jb_put(jbuf *b, const char *p, size_t n, size_t max);
int jb_putc(jbuf *b, char c, size_t max);

/* Python's str() and repr() of a value, appended to b. -1 on failure (limits, cycles). */
int jv_str(R *r, jv v, jbuf *b);
int jv_repr(R *r, jv v, jbuf *b);
/* str(v) as an arena string (strings themselves are returned as they are). */
int jv_to_str(R *r, jv v, jstr **out);
/* json.dumps(v, ensure_ascii, indent (NULL: none; an int spaces or a string), separators
 * (item, key; NULL: the defaults), sort_keys). */
int jv_json(R *r, jv v, jbuf *b, int ensure_ascii, const char *indent, const char *item_sep,
            const char *key_sep, int sort_keys, int level);
void py_float_repr(double f, char out[48]);

/* JSON text to values, as Python's json.loads (jinja_value.c). */
int jv_parse_json(jarena *a, const char *p, size_t n, jv *out, char *err, size_t errlen);
struct cJSON;
int jv_from_cjson(jarena *a, const struct cJSON *j, jv *out, int depth);

/* Makes a NUL-terminated message valid UTF-8 (see jinja_value.c). */
void jv_utf8_clean(char *msg);

/* UTF-8 and Python string predicates. */
int py_isspace(uint32_t cp);
size_t js_ncp(const jstr *s); /* code points */

/* ---- evaluation entry points shared with the builtins (jinja_eval.c) ---- */

int jr_call(R *r, jv fn, const jcall *a, jv *out);
int jr_getattr(R *r, jv obj, const char *name, jv *out);
int jr_getitem(R *r, jv obj, jv key, jv *out);
int jr_iterate(R *r, jv v, const jlist **out); /* any iterable as a list */

/* ---- builtins (jinja_builtins.c) ---- */

int jb_filter(R *r, const char *name, jv v, const jcall *a, jv *out);
int jb_test(R *r, const char *name, jv v, const jcall *a, int *out);
int jb_has_filter(const char *name);
int jb_has_test(const char *name);
/* A global function (range, dict, namespace, raise_exception, strftime_now ...). */
int jb_global(const char *name, jv *out);
/* A method of a str, dict or list value (x.upper, d.items ...): 1 and *out a bound method. */
int jb_method(R *r, jv self, const char *name, jv *out);
int jb_compare(R *r, jv a, jv b, int *out); /* ordering: -1, 0, 1; error when unorderable */

#endif
