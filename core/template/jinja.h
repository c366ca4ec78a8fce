/* A Jinja2 template engine for chat templates (core-internal).
 *
 * It runs the subset of Jinja2 that published chat templates use, with the semantics of
 * Jinja2 3.1 as Hugging Face transformers configures it for chat templates: a sandboxed,
 * immutable environment with trim_blocks and lstrip_blocks on, the loopcontrols extension
 * (break, continue), a tojson filter that is json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False), and the globals raise_exception(msg) and
 * strftime_now(fmt). Printed values follow Python's str() (True, None, ['a', 1], {'k': 1.0}).
 * docs/chat-templates.md lists the supported statements, expressions, filters, tests and
 * methods, and the limits.
 *
 * Safety. A template comes from a model file, so it is untrusted: parsing is bounded by the
 * nesting depth, and every render by a step budget, an output budget, a memory budget and a
 * call-depth limit (weir_jinja_limits). A template that exceeds one fails with an error in
 * bounded time; nothing it does can crash the process or run outside the render.
 *
 * Errors. Functions return 0 or a negative weir_status: WEIR_E_FORMAT for a template that
 * does not parse, WEIR_E_INVAL for an error while rendering (the template's own
 * raise_exception message, an undefined value used in arithmetic, a type error...),
 * WEIR_E_RANGE when a limit is hit, WEIR_E_NOMEM. The weir_jinja_error then says what and,
 * for parse errors and most render errors, on which template line.
 *
 * Thread-safety. A parsed template is immutable: any number of threads may render it at
 * once, each with its own context. A context may be read by several renders at once once
 * it is filled; filling it is not thread-safe. */
#ifndef WEIR_TEMPLATE_JINJA_H
#define WEIR_TEMPLATE_JINJA_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weir_jinja_template weir_jinja_template;
typedef struct weir_jinja_ctx weir_jinja_ctx;

typedef struct weir_jinja_error {
  int line;       /* 1-based template line; 0 when not known */
  int raised;     /* 1 when the template itself raised it (raise_exception) */
  char msg[512];  /* NUL-terminated; for `raised` the template's own text */
} weir_jinja_error;

typedef struct weir_jinja_limits {
  uint64_t max_steps;  /* evaluation steps (a node, or a few bytes or items of copying) */
  size_t max_output;   /* bytes of rendered text; also the longest string a value may hold */
  size_t max_memory;   /* bytes all values of one render may take together */
  int max_depth;       /* nested evaluation: macro calls, blocks, expressions */
  /* strftime_now's clock: < 0 reads the system clock (local time); >= 0 is a fixed UNIX time
   * shown in UTC (tests render reproducibly with it). */
  int64_t now;
} weir_jinja_limits;

/* The defaults: 5,000,000 steps, 8 MiB of output, 256 MiB of values, depth 200, system
 * clock. A real chat template renders a long conversation in well under 1% of them. */
void weir_jinja_limits_default(weir_jinja_limits *lim);

/* Parses src[0..len) (UTF-8; not necessarily NUL-terminated). On success *out is a template
 * the caller frees with weir_jinja_template_free. WEIR_E_FORMAT with err filled (message and
 * line) for a syntax error or a construct the engine does not support; WEIR_E_NOMEM. */
int weir_jinja_parse(const char *src, size_t len, weir_jinja_template **out,
                     weir_jinja_error *err);
void weir_jinja_template_free(weir_jinja_template *t);

/* ---- render contexts: the variables a template sees ---- */

int weir_jinja_ctx_new(weir_jinja_ctx **out); /* 0 or WEIR_E_NOMEM */
void weir_jinja_ctx_free(weir_jinja_ctx *c);

/* Each setter defines (or redefines) one variable; name and values are copied. 0,
 * WEIR_E_INVAL for a NULL name, WEIR_E_NOMEM. */
int weir_jinja_ctx_set_str(weir_jinja_ctx *c, const char *name, const char *s, size_t len);
int weir_jinja_ctx_set_bool(weir_jinja_ctx *c, const char *name, int b);
int weir_jinja_ctx_set_int(weir_jinja_ctx *c, const char *name, int64_t v);
int weir_jinja_ctx_set_none(weir_jinja_ctx *c, const char *name);
/* A cJSON value as Python's json.loads would have produced it: objects become ordered
 * dicts, arrays lists, null None. cJSON keeps numbers as doubles, so an integral number of
 * magnitude below 2^53 becomes an int (1.0 in the request text reads as 1); others floats.
 * Nesting deeper than 200 is WEIR_E_INVAL. */
int weir_jinja_ctx_set_cjson(weir_jinja_ctx *c, const char *name, const struct cJSON *v);
/* Like weir_jinja_ctx_set_cjson but from JSON text, parsed exactly as json.loads does
 * (1 is an int, 1.0 a float). WEIR_E_FORMAT with err (may be NULL) for invalid JSON. */
int weir_jinja_ctx_set_json(weir_jinja_ctx *c, const char *name, const char *json, size_t len,
                            char *err, size_t errlen);
/* Defines one variable per member of a JSON object (cJSON object or JSON object text), in
 * order: extra template keyword arguments. WEIR_E_INVAL when v is not an object. */
int weir_jinja_ctx_update_cjson(weir_jinja_ctx *c, const struct cJSON *obj);
int weir_jinja_ctx_update_json(weir_jinja_ctx *c, const char *json, size_t len, char *err,
                               size_t errlen);
/* 1 when the context defines name. */
int weir_jinja_ctx_has(const weir_jinja_ctx *c, const char *name);

/* Renders t with the variables of c (NULL: none) within lim (NULL: the defaults). On
 * success *out is a malloc'd NUL-terminated string the caller frees and *out_len (may be
 * NULL) its length. On failure *out is NULL and err (may be NULL) says why. */
int weir_jinja_render(const weir_jinja_template *t, const weir_jinja_ctx *c,
                      const weir_jinja_limits *lim, char **out, size_t *out_len,
                      weir_jinja_error *err);

#ifdef __cplusplus
}
#endif
#endif
