/* JSON Schema to grammar.
 *
 * Every subschema becomes a regular expression over the JSON text of the values it accepts;
 * $ref targets become rules (memoized by pointer), so recursive schemas are recursive rules.
 * What the output looks like:
 *  - objects list their properties in the schema's order; required ones always, optional ones
 *    when chosen; extra properties only when additionalProperties allows them (true or a
 *    schema), after the listed ones and with names outside them. A schema with no properties
 *    and additionalProperties absent or true accepts any object.
 *  - arrays: prefixItems in order, then items, within minItems..maxItems.
 *  - strings: characters in any JSON encoding, or with a pattern or format the canonical one.
 *  - numbers: any JSON number; with bounds, integers and plain decimals within them
 *    (numrange.c).
 *  - anyOf / oneOf: the alternatives (oneOf's exclusivity is not enforced: see
 *    docs/structured-output.md); allOf: its members merged into one schema.
 *
 * A keyword the compiler cannot honour is an error naming it and where it is when `strict`,
 * and is ignored otherwise. Annotations (title, description, default, examples, ...) are
 * always ignored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/json.h"
#include "grammar/numrange.h"
#include "weir/status.h"

typedef struct refmemo {
  char *ptr;
  uint32_t rule;
} refmemo;

typedef struct sctx {
  weir__gb *b;
  weir__json j;
  cJSON *root;
  int strict;
  int32_t nodes;
  refmemo *refs;
  uint32_t n_refs, cap_refs;
  cJSON **temps; /* merged schemas, freed at the end */
  uint32_t n_temps, cap_temps;
  char path[512];
} sctx;

static uint32_t schema(sctx *c, const cJSON *s, int depth);

static uint32_t sfail(sctx *c, const char *fmt, const char *a) {
  char msg[300];
  snprintf(msg, sizeof msg, fmt, a);
  return weir__gb_fail(c->b, WEIR_E_INVAL, "%s at %s", msg, c->path[0] ? c->path : "/");
}

static uint32_t unsupported(sctx *c, const char *key) {
  return sfail(c, "unsupported keyword \"%s\"", key);
}

/* Path bookkeeping: push returns the old length to restore. */
static size_t path_push(sctx *c, const char *seg, const char *name) {
  const size_t old = strlen(c->path);
  size_t at = old;
  at += (size_t)snprintf(c->path + at, sizeof c->path - at, "/%s", seg);
  if (name && at < sizeof c->path) {
    at += (size_t)snprintf(c->path + at, sizeof c->path - at, "/");
    for (const char *p = name; *p && at + 3 < sizeof c->path; p++) {
      if (*p == '~') c->path[at++] = '~', c->path[at++] = '0';
      else if (*p == '/') c->path[at++] = '~', c->path[at++] = '1';
      else c->path[at++] = *p;
    }
    c->path[at < sizeof c->path ? at : sizeof c->path - 1] = 0;
  }
  return old;
}

static void path_pop(sctx *c, size_t old) { c->path[old] = 0; }

static cJSON *keep_temp(sctx *c, cJSON *t) {
  if (!t) return NULL;
  if (c->n_temps == c->cap_temps) {
    uint32_t cap = c->cap_temps ? c->cap_temps * 2 : 16;
    cJSON **p = realloc(c->temps, cap * sizeof *p);
    if (!p) {
      cJSON_Delete(t);
      return NULL;
    }
    c->temps = p;
    c->cap_temps = cap;
  }
  c->temps[c->n_temps++] = t;
  return t;
}

/* ---- keywords ------------------------------------------------------------------------------ */

static const char *const k_annotations[] = {
    "title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "$anchor", "contentMediaType",
    "contentEncoding", "$dynamicAnchor", "$vocabulary", NULL};
static const char *const k_supported[] = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", NULL};

static int in_list(const char *const *list, const char *k) {
  for (int i = 0; list[i]; i++)
    if (!strcmp(list[i], k)) return 1;
  return 0;
}

static int has_constraints(const cJSON *s, const char *except1, const char *except2) {
  for (const cJSON *k = s->child; k; k = k->next)
    if (!in_list(k_annotations, k->string) && strcmp(k->string, except1) &&
        (!except2 || strcmp(k->string, except2)))
      return 1;
  return 0;
}

/* ---- $ref ------------------------------------------------------------------------------------ */

static const cJSON *resolve(sctx *c, const char *ref) {
  if (ref[0] != '#') return NULL;
  const cJSON *at = c->root;
  const char *p = ref + 1;
  while (*p) {
    if (*p != '/') return NULL;
    p++;
    char seg[256];
    size_t n = 0;
    while (*p && *p != '/' && n + 1 < sizeof seg) {
      if (p[0] == '~' && p[1] == '0') seg[n++] = '~', p += 2;
      else if (p[0] == '~' && p[1] == '1') seg[n++] = '/', p += 2;
      else seg[n++] = *p++;
    }
    seg[n] = 0;
    if (cJSON_IsArray(at)) {
      char *end;
      const long idx = strtol(seg, &end, 10);
      if (*end || idx < 0) return NULL;
      at = cJSON_GetArrayItem(at, (int)idx);
    } else if (cJSON_IsObject(at)) {
      at = cJSON_GetObjectItemCaseSensitive(at, seg);
    } else {
      return NULL;
    }
    if (!at) return NULL;
  }
  return at;
}

static uint32_t ref_node(sctx *c, const char *ref, int depth) {
  for (uint32_t i = 0; i < c->n_refs; i++)
    if (!strcmp(c->refs[i].ptr, ref)) return weir__rx_ref(c->b, c->refs[i].rule);
  const cJSON *target = resolve(c, ref);
  if (!target) return sfail(c, "$ref \"%s\" does not resolve (only local refs \"#/...\" are supported)", ref);
  if (c->n_refs == c->cap_refs) {
    uint32_t cap = c->cap_refs ? c->cap_refs * 2 : 8;
    refmemo *p = realloc(c->refs, cap * sizeof *p);
    if (!p) return weir__gb_fail(c->b, WEIR_E_NOMEM, "out of memory");
    c->refs = p;
    c->cap_refs = cap;
  }
  char *copy = strdup(ref);
  const uint32_t rule = weir__gb_new_rule(c->b, "ref");
  if (!copy || rule == UINT32_MAX) {
    free(copy);
    return weir__gb_fail(c->b, WEIR_E_NOMEM, "out of memory");
  }
  c->refs[c->n_refs++] = (refmemo){copy, rule};
  /* Messages inside the target name its own location. */
  char saved[sizeof c->path];
  memcpy(saved, c->path, sizeof saved);
  snprintf(c->path, sizeof c->path, "%s", ref + 1);
  const uint32_t body = schema(c, target, depth + 1);
  memcpy(c->path, saved, sizeof saved);
  weir__gb_define(c->b, rule, body);
  return weir__rx_ref(c->b, rule);
}

/* ---- merging (allOf, and anyOf / oneOf with sibling keywords) ------------------------------- */

/* Adds the keys of `from` to `into`: properties are merged, required lists joined, $ref
 * followed, other keywords replaced. Returns 0 or a status. */
static int merge_into(sctx *c, cJSON *into, const cJSON *from, int depth) {
  if (depth > c->b->limits.max_depth) return WEIR_E_INVAL;
  if (cJSON_IsTrue(from)) return 0;
  if (!cJSON_IsObject(from)) return WEIR_E_INVAL;
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(from, "$ref");
  if (cJSON_IsString(ref)) {
    const cJSON *t = resolve(c, ref->valuestring);
    if (!t) return WEIR_E_INVAL;
    int rc = merge_into(c, into, t, depth + 1);
    if (rc) return rc;
  }
  for (const cJSON *k = from->child; k; k = k->next) {
    if (!strcmp(k->string, "$ref") || in_list(k_annotations, k->string)) continue;
    cJSON *mine = cJSON_GetObjectItemCaseSensitive(into, k->string);
    if (!strcmp(k->string, "properties") && cJSON_IsObject(mine) && cJSON_IsObject(k)) {
      for (const cJSON *p = k->child; p; p = p->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(mine, p->string);
        cJSON *dup = cJSON_Duplicate(p, 1);
        if (!dup || !cJSON_AddItemToObject(mine, p->string, dup)) return WEIR_E_NOMEM;
      }
    } else if (!strcmp(k->string, "required") && cJSON_IsArray(mine) && cJSON_IsArray(k)) {
      for (const cJSON *r = k->child; r; r = r->next) {
        int dup = 0;
        for (const cJSON *q = mine->child; q; q = q->next)
          if (cJSON_IsString(q) && cJSON_IsString(r) && !strcmp(q->valuestring, r->valuestring)) dup = 1;
        if (!dup) {
          cJSON *d = cJSON_Duplicate(r, 1);
          if (!d || !cJSON_AddItemToArray(mine, d)) return WEIR_E_NOMEM;
        }
      }
    } else {
      cJSON *dup = cJSON_Duplicate(k, 1);
      if (!dup) return WEIR_E_NOMEM;
      if (mine) cJSON_ReplaceItemInObjectCaseSensitive(into, k->string, dup);
      else if (!cJSON_AddItemToObject(into, k->string, dup)) return WEIR_E_NOMEM;
    }
  }
  return 0;
}

/* A copy of s without the named keywords. */
static cJSON *without(sctx *c, const cJSON *s, const char *k1, const char *k2) {
  cJSON *t = keep_temp(c, cJSON_Duplicate(s, 1));
  if (!t) return NULL;
  cJSON_DeleteItemFromObjectCaseSensitive(t, k1);
  if (k2) cJSON_DeleteItemFromObjectCaseSensitive(t, k2);
  return t;
}

/* ---- values ---------------------------------------------------------------------------------- */

static uint32_t any_value(sctx *c) {
  const uint32_t r = weir__json_value_rule(&c->j);
  return r == UINT32_MAX ? 0 : weir__rx_ref(c->b, r);
}

/* The compact JSON text of a value as a literal (const, enum). */
static uint32_t value_lit(sctx *c, const cJSON *v) {
  char *t = cJSON_PrintUnformatted(v);
  if (!t) return weir__gb_fail(c->b, WEIR_E_NOMEM, "out of memory");
  const uint32_t r = weir__rx_str(c->b, t);
  cJSON_free(t);
  return r;
}

static int json_type_of(const cJSON *v, const char *type) {
  if (!strcmp(type, "null")) return cJSON_IsNull(v);
  if (!strcmp(type, "boolean")) return cJSON_IsBool(v);
  if (!strcmp(type, "string")) return cJSON_IsString(v);
  if (!strcmp(type, "object")) return cJSON_IsObject(v);
  if (!strcmp(type, "array")) return cJSON_IsArray(v);
  if (!strcmp(type, "number")) return cJSON_IsNumber(v);
  if (!strcmp(type, "integer"))
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && isfinite(v->valuedouble);
  return 0;
}

static int type_allows(const cJSON *type, const cJSON *v) {
  if (!type) return 1;
  if (cJSON_IsString(type)) return json_type_of(v, type->valuestring);
  for (const cJSON *t = type->child; t; t = t->next)
    if (cJSON_IsString(t) && json_type_of(v, t->valuestring)) return 1;
  return 0;
}

static int get_count(sctx *c, const cJSON *s, const char *key, uint32_t *out, int *present) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
  *present = 0;
  if (!v) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
    sfail(c, "\"%s\" must be a non-negative integer", key);
    return -1;
  }
  if (v->valuedouble > c->b->limits.max_repeat) {
    char msg[160];
    snprintf(msg, sizeof msg, "\"%s\" of %.0f is over the limit of %u", key, v->valuedouble,
             c->b->limits.max_repeat);
    sfail(c, "%s", msg);
    return -1;
  }
  *out = (uint32_t)v->valuedouble;
  *present = 1;
  return 0;
}

/* Regular expressions of the supported formats, for the decoded string. */
static const char *format_regex(const char *f) {
  /* date: years 0001-9999, days per month, 29 February in leap years only */
#define YEAR "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
#define LEAP "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
#define MD "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
#define DATE "(" YEAR "-" MD "|" LEAP "-02-29)"
#define TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
  if (!strcmp(f, "date")) return DATE;
  if (!strcmp(f, "time")) return TIME;
  if (!strcmp(f, "date-time")) return DATE "T" TIME;
  if (!strcmp(f, "uuid"))
    return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (!strcmp(f, "email"))
    return "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
           "@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+";
  if (!strcmp(f, "ipv4"))
    return "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  return NULL;
#undef YEAR
#undef LEAP
#undef MD
#undef DATE
#undef TIME
}

static uint32_t string_node(sctx *c, const cJSON *s) {
  weir__gb *b = c->b;
  uint32_t min = 0, max = WEIR__RX_INF;
  int has_min, has_max;
  if (get_count(c, s, "minLength", &min, &has_min) || get_count(c, s, "maxLength", &max, &has_max))
    return 0;
  if (!has_max) max = WEIR__RX_INF;
  if (has_min && has_max && min > max) return sfail(c, "%s", "minLength is greater than maxLength");
  const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(s, "pattern");
  const cJSON *format = cJSON_GetObjectItemCaseSensitive(s, "format");
  const uint32_t q = weir__rx_byte(b, '"');
  uint32_t body = 0;
  const char *re = NULL, *what = "pattern";
  if (format) {
    if (!cJSON_IsString(format)) return sfail(c, "%s", "\"format\" must be a string");
    re = format_regex(format->valuestring);
    what = "format";
    if (!re && c->strict) return sfail(c, "unsupported format \"%s\"", format->valuestring);
  }
  if (pattern) {
    if (!cJSON_IsString(pattern)) return sfail(c, "%s", "\"pattern\" must be a string");
    if (re && c->strict) return sfail(c, "%s", "\"pattern\" together with \"format\" is not supported");
    re = pattern->valuestring;
    what = "pattern";
  }
  if (re) {
    if ((has_min || has_max) && c->strict)
      return sfail(c, "\"%s\" together with minLength or maxLength is not supported", what);
    char name[600];
    snprintf(name, sizeof name, "%s at %s", what, c->path[0] ? c->path : "/");
    body = weir__regex_parse(b, re, strlen(re), 1, name);
  } else {
    body = weir__rx_repeat(b, c->j.chr, min, max);
  }
  return weir__rx_seq3(b, q, body, q);
}

static int read_bound(sctx *c, const cJSON *s, const char *key, const char *xkey, weir__bound *bd) {
  weir__bound_init(bd);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, xkey);
  if (v) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
      sfail(c, "\"%s\" must be a number", key);
      return -1;
    }
    bd->set = 1;
    bd->value = v->valuedouble;
  }
  if (x) {
    if (cJSON_IsBool(x)) { /* draft 4: a flag on minimum / maximum */
      bd->exclusive = bd->set && cJSON_IsTrue(x);
    } else if (cJSON_IsNumber(x) && isfinite(x->valuedouble)) {
      /* 2020-12: its own bound; keep the tighter of the two */
      const int lower = key[1] == 'i'; /* minimum */
      if (!bd->set || (lower ? x->valuedouble >= bd->value : x->valuedouble <= bd->value)) {
        bd->set = 1;
        bd->value = x->valuedouble;
        bd->exclusive = 1;
      }
    } else {
      sfail(c, "\"%s\" must be a number", xkey);
      return -1;
    }
  }
  return 0;
}

static uint32_t number_node(sctx *c, const cJSON *s, int integer) {
  weir__bound lo, hi;
  if (read_bound(c, s, "minimum", "exclusiveMinimum", &lo) ||
      read_bound(c, s, "maximum", "exclusiveMaximum", &hi))
    return 0;
  if (!lo.set && !hi.set) return integer ? weir__json_integer(&c->j) : weir__json_number(&c->j);
  if (lo.set && hi.set && lo.value > hi.value)
    return sfail(c, "%s", "the minimum is greater than the maximum");
  const uint32_t r = weir__number_range(c->b, &lo, &hi, integer);
  if (!r && !c->b->status) return sfail(c, "%s", "no number lies within these bounds");
  return r;
}

/* A name as code points; -1 when it is not valid UTF-8. */
typedef struct cpname {
  uint32_t *cp;
  uint32_t n;
} cpname;

static int decode_name(const char *s, cpname *out) {
  const size_t len = strlen(s);
  out->cp = malloc((len + 1) * sizeof *out->cp);
  out->n = 0;
  if (!out->cp) return -1;
  for (size_t i = 0; i < len;) {
    const unsigned char u = (unsigned char)s[i];
    uint32_t cp, n;
    if (u < 0x80) cp = u, n = 1;
    else if ((u & 0xE0) == 0xC0) cp = u & 0x1F, n = 2;
    else if ((u & 0xF0) == 0xE0) cp = u & 0x0F, n = 3;
    else if ((u & 0xF8) == 0xF0) cp = u & 0x07, n = 4;
    else return -1;
    if (i + n > len) return -1;
    for (uint32_t k = 1; k < n; k++) {
      if (((unsigned char)s[i + k] & 0xC0) != 0x80) return -1;
      cp = cp << 6 | ((unsigned char)s[i + k] & 0x3F);
    }
    out->cp[out->n++] = cp;
    i += n;
  }
  return 0;
}

/* JSON-string contents, in canonical encoding, whose value is none of the names: on the trie
 * of the names, a string ends where no name ends, leaves the trie on a character no name
 * continues with (then anything follows), or follows a name's next character. */
static uint32_t not_names(sctx *c, cpname *const *names, uint32_t n, uint32_t depth) {
  weir__gb *b = c->b;
  int ends_here = 0;
  weir__cpset seen = {0}, other = {0};
  uint32_t result = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (names[i]->n == depth) ends_here = 1;
    else if (weir__cpset_add(&seen, names[i]->cp[depth], names[i]->cp[depth])) goto nomem;
  }
  if (weir__cpset_negate(&seen, &other)) goto nomem;
  uint32_t acc = ends_here ? weir__rx_none() : weir__rx_empty();
  acc = weir__rx_alt2(b, acc, weir__rx_seq2(b, weir__json_chars(b, &other),
                                            weir__rx_star(b, c->j.chr)));
  cpname **sub = malloc((size_t)n * sizeof *sub);
  if (!sub) goto nomem;
  for (uint32_t r = 0; r < seen.n; r++)
    for (uint32_t cp = seen.r[r][0]; cp <= seen.r[r][1]; cp++) {
      uint32_t m = 0;
      for (uint32_t i = 0; i < n; i++)
        if (names[i]->n > depth && names[i]->cp[depth] == cp) sub[m++] = names[i];
      weir__cpset one = {0};
      if (weir__cpset_add(&one, cp, cp)) {
        free(sub);
        goto nomem;
      }
      acc = weir__rx_alt2(b, acc, weir__rx_seq2(b, weir__json_chars(b, &one),
                                                not_names(c, sub, m, depth + 1)));
      weir__cpset_free(&one);
    }
  free(sub);
  result = acc;
  goto out;
nomem:
  result = weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
out:
  weir__cpset_free(&seen);
  weir__cpset_free(&other);
  return result;
}

/* The quoted key of an extra property: any name but the listed ones. NONE when a listed name
 * is not valid UTF-8 (then no extra property is produced, which the schema allows). */
static uint32_t extra_key(sctx *c, const char *const *names, uint32_t n) {
  weir__gb *b = c->b;
  cpname *store = calloc(n + 1, sizeof *store);
  cpname **ptrs = calloc(n + 1, sizeof *ptrs);
  uint32_t r = 0;
  int ok = store && ptrs;
  for (uint32_t i = 0; ok && i < n; i++) {
    ok = decode_name(names[i], &store[i]) == 0;
    ptrs[i] = &store[i];
  }
  if (ok) {
    const uint32_t q = weir__rx_byte(b, '"');
    r = weir__rx_seq3(b, q, not_names(c, ptrs, n, 0), q);
  } else if (!store || !ptrs) {
    r = weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
  }
  for (uint32_t i = 0; store && i < n; i++) free(store[i].cp);
  free(store);
  free(ptrs);
  return r;
}

static uint32_t object_node(sctx *c, const cJSON *s, int depth) {
  weir__gb *b = c->b;
  weir__json *j = &c->j;
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
  const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
  const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
  if (props && !cJSON_IsObject(props)) return sfail(c, "%s", "\"properties\" must be an object");
  if (req && !cJSON_IsArray(req)) return sfail(c, "%s", "\"required\" must be an array");
  if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
    return sfail(c, "%s", "\"additionalProperties\" must be a boolean or a schema");
  /* Listed members: properties in order, then required names without a property schema. */
  uint32_t n = 0, cap = 8;
  const char **names = malloc(cap * sizeof *names);
  uint32_t *members = malloc(cap * sizeof *members);
  uint8_t *required = malloc(cap);
  uint32_t result = 0;
  if (!names || !members || !required) {
    result = weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    goto out;
  }
  for (int pass = 0; pass < 2; pass++) {
    const cJSON *list = pass == 0 ? props : req;
    for (const cJSON *p = list ? list->child : NULL; p; p = p->next) {
      const char *name = pass == 0 ? p->string : cJSON_IsString(p) ? p->valuestring : NULL;
      if (!name) {
        result = sfail(c, "%s", "\"required\" must list strings");
        goto out;
      }
      int dup = 0;
      for (uint32_t i = 0; i < n; i++)
        if (!strcmp(names[i], name)) dup = 1;
      if (dup) continue;
      if (n == cap) {
        cap *= 2;
        const char **nn = realloc(names, cap * sizeof *nn);
        if (nn) names = nn;
        uint32_t *nm = realloc(members, cap * sizeof *nm);
        if (nm) members = nm;
        uint8_t *nr = realloc(required, cap);
        if (nr) required = nr;
        if (!nn || !nm || !nr) {
          result = weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
          goto out;
        }
      }
      uint8_t is_req = 0;
      for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, name)) is_req = 1;
      const size_t old = path_push(c, pass == 0 ? "properties" : "required", name);
      const uint32_t value = pass == 0 ? schema(c, p, depth + 1) : any_value(c);
      path_pop(c, old);
      if (b->status) goto out;
      if (!value && is_req) {
        /* a required property whose schema accepts nothing: the object is impossible */
        char msg[300];
        snprintf(msg, sizeof msg, "required property \"%s\" can have no value", name);
        result = sfail(c, "%s", msg);
        goto out;
      }
      names[n] = name;
      required[n] = is_req;
      members[n] = weir__rx_seq(b, (uint32_t[]){weir__json_string_lit(j, name, strlen(name)), j->ws,
                                                weir__rx_byte(b, ':'), j->ws, value, j->ws}, 6);
      n++;
    }
  }
  /* Extra members. */
  uint32_t extra = 0;
  if (addl ? !cJSON_IsFalse(addl) : n == 0) {
    uint32_t value;
    if (!addl || cJSON_IsTrue(addl)) value = any_value(c);
    else {
      const size_t old = path_push(c, "additionalProperties", NULL);
      value = schema(c, addl, depth + 1);
      path_pop(c, old);
    }
    const uint32_t key = n ? extra_key(c, names, n) : weir__json_string(j);
    if (value && key)
      extra = weir__rx_seq(b, (uint32_t[]){key, j->ws, weir__rx_byte(b, ':'), j->ws, value, j->ws}, 6);
  }
  if (b->status) goto out;
  /* T(i): the members from i on once one has been written (each behind a comma); F(i): the
   * same before any has been written. T(i) are rules so that each F(i) refers to T(i+1)
   * instead of copying it. */
  const uint32_t comma = weir__rx_seq2(b, weir__rx_byte(b, ','), j->ws);
  const uint32_t extras_tail = extra ? weir__rx_star(b, weir__rx_seq2(b, comma, extra)) : weir__rx_empty();
  uint32_t t_next = extras_tail; /* T(n) */
  uint32_t f_next = extra ? weir__rx_opt(b, weir__rx_seq2(b, extra, extras_tail)) : weir__rx_empty();
  for (uint32_t i = n; i-- > 0;) {
    const uint32_t t_rule = weir__gb_new_rule(b, "members");
    if (t_rule == UINT32_MAX) goto out;
    weir__gb_define(b, t_rule, t_next);
    const uint32_t t_ref = weir__rx_ref(b, t_rule);
    const uint32_t with = weir__rx_seq2(b, members[i], t_ref);
    f_next = required[i] ? with : weir__rx_alt2(b, with, f_next);
    const uint32_t item = weir__rx_seq2(b, comma, members[i]);
    t_next = weir__rx_seq2(b, required[i] ? item : weir__rx_opt(b, item), t_ref);
  }
  result = weir__rx_seq(b, (uint32_t[]){weir__rx_byte(b, '{'), j->ws, f_next, weir__rx_byte(b, '}')}, 4);
out:
  free(names);
  free(members);
  free(required);
  return result;
}

static uint32_t array_node(sctx *c, const cJSON *s, int depth) {
  weir__gb *b = c->b;
  weir__json *j = &c->j;
  const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
  const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
  uint32_t min = 0, max = WEIR__RX_INF;
  int has_min, has_max;
  if (get_count(c, s, "minItems", &min, &has_min) || get_count(c, s, "maxItems", &max, &has_max))
    return 0;
  if (!has_max) max = WEIR__RX_INF;
  if (has_min && has_max && min > max) return sfail(c, "%s", "minItems is greater than maxItems");
  if (cJSON_IsArray(items) && !prefix) { /* drafts before 2020-12: items as a tuple */
    prefix = items;
    items = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
  }
  if (prefix && !cJSON_IsArray(prefix)) return sfail(c, "%s", "\"prefixItems\" must be an array");
  const uint32_t p = prefix ? (uint32_t)cJSON_GetArraySize(prefix) : 0;
  uint32_t item = 0;
  if (!items || cJSON_IsTrue(items)) item = any_value(c);
  else if (cJSON_IsFalse(items)) {
    if (max == WEIR__RX_INF || max > p) max = p;
  } else {
    const size_t old = path_push(c, "items", NULL);
    item = schema(c, items, depth + 1);
    path_pop(c, old);
  }
  if (b->status) return 0;
  if (!item && max > p) max = p; /* items that cannot exist */
  /* No array fits (minItems above what items allow): nothing, which drops an optional
   * property and is an error naming the property or the schema higher up. */
  if (min > max) return weir__rx_none();
  uint32_t *elem = malloc((p + 1) * sizeof *elem);
  if (!elem) return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
  uint32_t k = 0;
  for (const cJSON *e = prefix ? prefix->child : NULL; e; e = e->next, k++) {
    char idx[16];
    snprintf(idx, sizeof idx, "%u", k);
    const size_t old = path_push(c, "prefixItems", idx);
    elem[k] = schema(c, e, depth + 1);
    path_pop(c, old);
  }
  if (b->status) {
    free(elem);
    return 0;
  }
  const uint32_t comma = weir__rx_seq2(b, weir__rx_byte(b, ','), j->ws);
  /* G(k): the elements from index k on, k >= 1 already written. */
  uint32_t g;
  {
    const uint32_t from = p > 1 ? p : 1;
    /* beyond the prefix: repeats of (, item) */
    const uint32_t lo = min > from ? min - from : 0;
    const uint32_t hi = max == WEIR__RX_INF ? WEIR__RX_INF : max > from ? max - from : 0;
    g = hi == 0 || !item ? (lo ? 0 : weir__rx_empty())
                         : weir__rx_repeat(b, weir__rx_seq3(b, comma, item, j->ws), lo, hi);
    for (uint32_t i = from; i-- > 1;) { /* prefix elements 1..p-1, innermost first */
      if (i >= max) {
        g = weir__rx_empty();
        continue;
      }
      const uint32_t one = weir__rx_seq(b, (uint32_t[]){comma, elem[i], j->ws, g}, 4);
      g = i >= min ? weir__rx_opt(b, one) : one;
    }
  }
  uint32_t body;
  if (max == 0) body = weir__rx_empty();
  else {
    const uint32_t first = p ? elem[0] : item;
    const uint32_t one = weir__rx_seq3(b, first, j->ws, g);
    body = min == 0 ? weir__rx_opt(b, one) : one;
  }
  free(elem);
  return weir__rx_seq(b, (uint32_t[]){weir__rx_byte(b, '['), j->ws, body, weir__rx_byte(b, ']')}, 4);
}

static uint32_t typed(sctx *c, const cJSON *s, const char *type, int depth) {
  weir__gb *b = c->b;
  if (!strcmp(type, "string")) return string_node(c, s);
  if (!strcmp(type, "number")) return number_node(c, s, 0);
  if (!strcmp(type, "integer")) return number_node(c, s, 1);
  if (!strcmp(type, "boolean")) return weir__rx_alt2(b, weir__rx_str(b, "true"), weir__rx_str(b, "false"));
  if (!strcmp(type, "null")) return weir__rx_str(b, "null");
  if (!strcmp(type, "object")) return object_node(c, s, depth);
  if (!strcmp(type, "array")) return array_node(c, s, depth);
  return sfail(c, "unknown type \"%s\"", type);
}

static int has_any(const cJSON *s, const char *const *keys) {
  for (int i = 0; keys[i]; i++)
    if (cJSON_GetObjectItemCaseSensitive(s, keys[i])) return 1;
  return 0;
}

static uint32_t schema(sctx *c, const cJSON *s, int depth) {
  weir__gb *b = c->b;
  if (b->status) return 0;
  if (depth > b->limits.max_depth) {
    char msg[96];
    snprintf(msg, sizeof msg, "the schema is nested too deeply (over %d levels)", b->limits.max_depth);
    return sfail(c, "%s", msg);
  }
  if (++c->nodes > b->limits.max_schema_nodes) {
    char msg[96];
    snprintf(msg, sizeof msg, "the schema is too large (over %d subschemas)", b->limits.max_schema_nodes);
    return sfail(c, "%s", msg);
  }
  if (cJSON_IsTrue(s)) return any_value(c);
  if (cJSON_IsFalse(s)) return weir__rx_none();
  if (!cJSON_IsObject(s)) return sfail(c, "%s", "a schema must be an object or a boolean");
  for (const cJSON *k = s->child; k; k = k->next) {
    if (in_list(k_annotations, k->string) || in_list(k_supported, k->string)) continue;
    if (c->strict) return unsupported(c, k->string);
  }
  /* $ref (siblings other than annotations are merged in: 2020-12 applies both) */
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
  if (ref) {
    if (!cJSON_IsString(ref)) return sfail(c, "%s", "\"$ref\" must be a string");
    if (!has_constraints(s, "$ref", NULL)) return ref_node(c, ref->valuestring, depth);
    cJSON *sib = without(c, s, "$ref", NULL);
    cJSON *base = keep_temp(c, cJSON_CreateObject());
    cJSON *wrap = keep_temp(c, cJSON_CreateObject());
    if (!sib || !base || !wrap || !cJSON_AddStringToObject(wrap, "$ref", ref->valuestring))
      return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    /* the target's keywords first, then the siblings' */
    if (merge_into(c, base, wrap, 0) || merge_into(c, base, sib, 0))
      return sfail(c, "%s", "cannot merge \"$ref\" with its sibling keywords");
    return schema(c, base, depth + 1);
  }
  /* allOf: merged into one schema */
  const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
  if (all) {
    if (!cJSON_IsArray(all) || !cJSON_GetArraySize(all)) return sfail(c, "%s", "\"allOf\" must be a non-empty array");
    cJSON *m = without(c, s, "allOf", NULL);
    if (!m) return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    for (const cJSON *e = all->child; e; e = e->next)
      if (merge_into(c, m, e, 0)) return sfail(c, "%s", "cannot merge the members of \"allOf\"");
    /* A member's additionalProperties only knows that member's properties: merged with the
     * properties of another member it would mean something else. */
    const cJSON *merged_props = cJSON_GetObjectItemCaseSensitive(m, "properties");
    int i = 0;
    for (const cJSON *e = all->child; e; e = e->next, i++) {
      const cJSON *mem = e, *ref2 = cJSON_GetObjectItemCaseSensitive(e, "$ref");
      if (cJSON_IsString(ref2) && resolve(c, ref2->valuestring)) mem = resolve(c, ref2->valuestring);
      const cJSON *ap = cJSON_GetObjectItemCaseSensitive(mem, "additionalProperties");
      if (!ap || cJSON_IsTrue(ap)) continue;
      const cJSON *own = cJSON_GetObjectItemCaseSensitive(mem, "properties");
      for (const cJSON *p = merged_props ? merged_props->child : NULL; p; p = p->next)
        if (!own || !cJSON_GetObjectItemCaseSensitive(own, p->string)) {
          char msg[200];
          snprintf(msg, sizeof msg, "\"allOf\" member %d restricts additionalProperties, which "
                   "excludes property \"%.60s\" of another member", i, p->string);
          return sfail(c, "%s", msg);
        }
    }
    return schema(c, m, depth + 1);
  }
  /* anyOf / oneOf: alternatives, each merged with the sibling keywords */
  const char *comb = cJSON_GetObjectItemCaseSensitive(s, "anyOf") ? "anyOf"
                     : cJSON_GetObjectItemCaseSensitive(s, "oneOf") ? "oneOf" : NULL;
  if (comb) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(s, comb);
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list))
      return sfail(c, "\"%s\" must be a non-empty array", comb);
    const int siblings = has_constraints(s, "anyOf", "oneOf");
    const int n = cJSON_GetArraySize(list);
    uint32_t *alts = malloc((size_t)n * sizeof *alts);
    if (!alts) return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
      char idx[16];
      snprintf(idx, sizeof idx, "%d", i);
      const size_t old = path_push(c, comb, idx);
      if (siblings) {
        cJSON *m = without(c, s, "anyOf", "oneOf");
        if (!m || merge_into(c, m, e, 0)) {
          path_pop(c, old);
          free(alts);
          return sfail(c, "cannot merge \"%s\" with its sibling keywords", comb);
        }
        alts[i] = schema(c, m, depth + 1);
      } else {
        alts[i] = schema(c, e, depth + 1);
      }
      path_pop(c, old);
    }
    const uint32_t r = weir__rx_alt(b, alts, (uint32_t)n);
    free(alts);
    return r;
  }
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (type && !cJSON_IsString(type) && !cJSON_IsArray(type))
    return sfail(c, "%s", "\"type\" must be a string or an array of strings");
  /* const and enum: the listed values that the type allows */
  const cJSON *cnst = cJSON_GetObjectItemCaseSensitive(s, "const");
  const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
  if (cnst || en) {
    if (en && !cJSON_IsArray(en)) return sfail(c, "%s", "\"enum\" must be an array");
    uint32_t acc = weir__rx_none();
    int any = 0;
    if (cnst) {
      if (type_allows(type, cnst)) acc = value_lit(c, cnst), any = 1;
    } else {
      for (const cJSON *v = en->child; v; v = v->next)
        if (type_allows(type, v)) acc = weir__rx_alt2(b, acc, value_lit(c, v)), any = 1;
    }
    if (!any && !b->status)
      return sfail(c, "%s", en && !cJSON_GetArraySize(en) ? "\"enum\" is empty: nothing can match"
                            : "no value of \"enum\"/\"const\" has the schema's \"type\"");
    return acc;
  }
  /* types */
  if (type) {
    uint32_t acc = weir__rx_none();
    if (cJSON_IsString(type)) return typed(c, s, type->valuestring, depth);
    if (!cJSON_GetArraySize(type)) return sfail(c, "%s", "\"type\" is an empty list: nothing can match");
    for (const cJSON *t = type->child; t; t = t->next) {
      if (!cJSON_IsString(t)) return sfail(c, "%s", "\"type\" must list strings");
      acc = weir__rx_alt2(b, acc, typed(c, s, t->valuestring, depth));
    }
    return acc;
  }
  /* no type: what the keywords imply, else any value */
  static const char *const obj_keys[] = {"properties", "required", "additionalProperties", NULL};
  static const char *const arr_keys[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
  static const char *const str_keys[] = {"minLength", "maxLength", "pattern", "format", NULL};
  static const char *const num_keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
  uint32_t acc = weir__rx_none();
  int any = 0;
  if (has_any(s, obj_keys)) acc = weir__rx_alt2(b, acc, object_node(c, s, depth)), any = 1;
  if (has_any(s, arr_keys)) acc = weir__rx_alt2(b, acc, array_node(c, s, depth)), any = 1;
  if (has_any(s, str_keys)) acc = weir__rx_alt2(b, acc, string_node(c, s)), any = 1;
  if (has_any(s, num_keys)) acc = weir__rx_alt2(b, acc, number_node(c, s, 0)), any = 1;
  return any ? acc : any_value(c);
}

int weir__schema_build(weir__gb *b, const char *text, size_t len, int strict, int whitespace,
                       uint32_t *start) {
  sctx c = {.b = b, .strict = strict};
  c.root = cJSON_ParseWithLength(text, len);
  if (!c.root) {
    weir__gb_fail(b, WEIR_E_INVAL, "the schema is not valid JSON");
    return b->status;
  }
  weir__json_init(&c.j, b, whitespace);
  const uint32_t root = weir__gb_rule(b, "root", 4);
  const uint32_t body = schema(&c, c.root, 0);
  if (!b->status && !body) sfail(&c, "%s", "the schema can produce nothing");
  if (!b->status) weir__gb_define(b, root, weir__rx_seq3(b, c.j.ws, body, c.j.ws));
  *start = root;
  for (uint32_t i = 0; i < c.n_refs; i++) free(c.refs[i].ptr);
  free(c.refs);
  for (uint32_t i = 0; i < c.n_temps; i++) cJSON_Delete(c.temps[i]);
  free(c.temps);
  cJSON_Delete(c.root);
  return b->status;
}
