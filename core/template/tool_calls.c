/* Tool calls in generated text (see tool_calls.h). */
#include "template/tool_calls.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "weir/status.h"

static const char k_hermes_open[] = "<tool_call>", k_hermes_close[] = "</tool_call>";
static const char k_mistral[] = "[TOOL_CALLS]", k_python[] = "<|python_tag|>";
static const char *const k_markers[] = {k_hermes_open, k_mistral, k_python};
#define NUM_MARKERS (sizeof k_markers / sizeof k_markers[0])
/* What the readers below return for text that is not a call (errors are negative). */
#define NOT_CALL 1

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *skip_blank(const char *p, const char *end) {
  while (p < end && is_blank(*p)) p++;
  return p;
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* s[0..n) without blank space at either end, copied. */
static char *dup_trimmed(const char *s, size_t n) {
  const char *b = skip_blank(s, s + n), *e = s + n;
  while (e > b && is_blank(e[-1])) e--;
  return dup_n(b, (size_t)(e - b));
}

void weir_tool_output_free(weir_tool_output *o) {
  for (int i = 0; i < o->num_calls; i++) {
    free(o->calls[i].name);
    free(o->calls[i].arguments);
  }
  free(o->calls);
  free(o->content);
  memset(o, 0, sizeof *o);
}

/* Appends a call. arguments: borrowed text (copied). 0, NOT_CALL when the list is full, or
 * WEIR_E_NOMEM. */
static int add_call(weir_tool_output *o, const char *name, const char *args, size_t args_len) {
  if (o->num_calls == WEIR_MAX_TOOL_CALLS) return NOT_CALL;
  weir_tool_call *grown = realloc(o->calls, sizeof *grown * (size_t)(o->num_calls + 1));
  if (!grown) return WEIR_E_NOMEM;
  o->calls = grown;
  weir_tool_call *c = &o->calls[o->num_calls];
  c->name = strdup(name);
  c->arguments = dup_n(args, args_len);
  if (!c->name || !c->arguments) {
    free(c->name);
    free(c->arguments);
    return WEIR_E_NOMEM;
  }
  o->num_calls++;
  return 0;
}

/* One call object: a string "name" and its arguments under "arguments" or "parameters" (an
 * object printed compactly; a string taken as it is; absent: {}). 0, NOT_CALL when it is
 * not a call, WEIR_E_NOMEM. */
static int take_call(weir_tool_output *o, const cJSON *v) {
  const cJSON *name = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "name") : NULL;
  if (!cJSON_IsString(name) || !name->valuestring[0]) return NOT_CALL;
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(v, "arguments");
  if (!args) args = cJSON_GetObjectItemCaseSensitive(v, "parameters");
  if (!args || cJSON_IsNull(args)) return add_call(o, name->valuestring, "{}", 2);
  if (cJSON_IsString(args))
    return add_call(o, name->valuestring, args->valuestring, strlen(args->valuestring));
  char *printed = cJSON_PrintUnformatted(args);
  if (!printed) return WEIR_E_NOMEM;
  int rc = add_call(o, name->valuestring, printed, strlen(printed));
  free(printed);
  return rc;
}

/* Parses the JSON value at the start of [p, end) (blank space first allowed); *next gets
 * where it ends. NULL when there is none. */
static cJSON *parse_value(const char *p, const char *end, const char **next) {
  const char *stop = NULL;
  cJSON *v = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &stop, 0);
  if (v) *next = stop;
  return v;
}

/* Calls as a JSON array of call objects, or one call object. */
static int take_list_or_one(weir_tool_output *o, const cJSON *v) {
  if (!cJSON_IsArray(v)) return take_call(o, v);
  if (!v->child) return NOT_CALL;
  for (const cJSON *c = v->child; c; c = c->next) {
    int rc = take_call(o, c);
    if (rc) return rc;
  }
  return 0;
}

/* Call objects separated by ';' (Llama 3's JSON calls), up to `end` with nothing else. */
static int take_objects(weir_tool_output *o, const char *p, const char *end) {
  for (;;) {
    const char *next;
    cJSON *v = parse_value(p, end, &next);
    if (!v) return NOT_CALL;
    int rc = take_call(o, v);
    cJSON_Delete(v);
    if (rc) return rc;
    p = skip_blank(next, end);
    if (p == end) return 0;
    if (*p != ';') return NOT_CALL;
    p++;
  }
}

/* Hermes: every <tool_call> ... </tool_call> from `first` on (an unclosed last one runs to the
 * end: a reply cut by max_tokens or a stop string). */
static int take_hermes(weir_tool_output *o, const char *first, const char *end) {
  const size_t ol = sizeof k_hermes_open - 1, cl = sizeof k_hermes_close - 1;
  for (const char *at = first; at;) {
    const char *body = at + ol;
    const char *close = memmem(body, (size_t)(end - body), k_hermes_close, cl);
    const char *stop = close ? close : end, *next;
    cJSON *v = parse_value(body, stop, &next);
    int rc = v && skip_blank(next, stop) == stop ? take_call(o, v) : NOT_CALL;
    cJSON_Delete(v);
    if (rc == NOT_CALL && !close && o->num_calls > 0) {
      /* The reply was cut inside its last call: the whole ones before it are the calls. */
      o->dropped_partial = 1;
      return 0;
    }
    if (rc) return rc;
    if (!close) return 0;
    const char *after = close + cl;
    at = memmem(after, (size_t)(end - after), k_hermes_open, ol);
  }
  return 0;
}

/* The earliest marker in [text, text + len): its index in k_markers, or -1. */
static int first_marker(const char *text, size_t len, const char **at) {
  int best = -1;
  *at = NULL;
  for (size_t i = 0; i < NUM_MARKERS; i++) {
    const char *m = memmem(text, len, k_markers[i], strlen(k_markers[i]));
    if (m && (!*at || m < *at)) {
      *at = m;
      best = (int)i;
    }
  }
  return best;
}

static int parse_auto(const char *text, size_t len, weir_tool_output *o) {
  const char *end = text + len, *at;
  int which = first_marker(text, len, &at);
  int rc;
  if (which < 0) {
    /* Llama 3 may answer with the call's JSON alone. */
    const char *p = skip_blank(text, end);
    if (p == end || *p != '{') return NOT_CALL;
    rc = take_objects(o, p, end);
    at = text;
  } else if (k_markers[which] == k_hermes_open) {
    rc = take_hermes(o, at, end);
  } else if (k_markers[which] == k_mistral) {
    const char *next;
    cJSON *v = parse_value(at + sizeof k_mistral - 1, end, &next);
    rc = v && skip_blank(next, end) == end ? take_list_or_one(o, v) : NOT_CALL;
    cJSON_Delete(v);
  } else {
    rc = take_objects(o, at + sizeof k_python - 1, end);
  }
  if (rc) return rc;
  o->content = dup_trimmed(text, (size_t)(at - text));
  return o->content ? 0 : WEIR_E_NOMEM;
}

/* tool_choice "required": the forced list [{"name": ..., "parameters": {...}}, ...], read
 * call by call so that a list cut short (max_tokens, a stop string) still yields every call
 * that was written whole; the call it was cut inside is dropped. */
static int parse_forced_list(const char *text, const char *end, weir_tool_output *o) {
  const char *p = skip_blank(text, end);
  if (p == end || *p != '[') {
    o->dropped_partial = p != end;
    return 0;
  }
  p = skip_blank(p + 1, end);
  while (p < end && *p != ']') {
    const char *next;
    cJSON *v = parse_value(p, end, &next);
    if (!v || !cJSON_IsObject(v)) {
      cJSON_Delete(v);
      o->dropped_partial = 1; /* cut inside this call (or not a call: nothing to take) */
      return 0;
    }
    int rc = take_call(o, v);
    cJSON_Delete(v);
    if (rc == NOT_CALL) {
      o->dropped_partial = 1;
      return 0;
    }
    if (rc) return rc;
    p = skip_blank(next, end);
    if (p < end && *p == ',') p = skip_blank(p + 1, end);
  }
  return 0;
}

int weir_tool_parse(const char *text, size_t len, weir_tool_mode mode, const char *named,
                     weir_tool_output *out) {
  memset(out, 0, sizeof *out);
  const char *end = text + len;
  int rc = NOT_CALL;
  if (mode == WEIR_TOOLS_REQUIRED || (mode == WEIR_TOOLS_NAMED && named)) {
    /* The constraint made the whole reply calls: it is never content, whatever it holds. */
    if (mode == WEIR_TOOLS_REQUIRED) {
      rc = parse_forced_list(text, end, out);
    } else {
      /* The whole reply is the named function's arguments; a reply cut short is not a call
       * a client could run (its arguments are not JSON), so it is dropped. */
      const char *b = skip_blank(text, end), *e = end;
      while (e > b && is_blank(e[-1])) e--;
      const char *stop = NULL;
      cJSON *v = b < e ? cJSON_ParseWithLengthOpts(b, (size_t)(e - b), &stop, 0) : NULL;
      if (v && stop != e) { /* a whole value and more after it: not what was forced */
        cJSON_Delete(v);
        v = NULL;
      }
      rc = v ? add_call(out, named, b, (size_t)(e - b)) : 0;
      if (!v) out->dropped_partial = 1;
      cJSON_Delete(v);
    }
    if (rc == NOT_CALL) rc = 0; /* more than WEIR_MAX_TOOL_CALLS: the first ones */
    if (rc == 0 && !(out->content = dup_n("", 0))) rc = WEIR_E_NOMEM;
    if (rc) weir_tool_output_free(out);
    return rc;
  }
  if (mode == WEIR_TOOLS_AUTO) rc = parse_auto(text, len, out);
  if (rc == 0) return 0;
  /* Not calls after all: the whole reply is content. */
  weir_tool_output_free(out);
  if (rc == WEIR_E_NOMEM) return rc;
  out->content = dup_n(text, len);
  return out->content ? 0 : WEIR_E_NOMEM;
}

size_t weir_tool_stream_safe(const char *text, size_t len, size_t from, int *in_call) {
  *in_call = 0;
  const char *p = skip_blank(text, text + len);
  if (p == text + len || *p == '{' || from > len) return 0;
  const char *at;
  if (first_marker(text + from, len - from, &at) >= 0) {
    *in_call = 1;
    return (size_t)(at - text);
  }
  /* Hold back the longest tail that begins a marker. */
  const size_t avail = len - from;
  for (size_t k = avail < 16 ? avail : 16; k > 0; k--)
    for (size_t i = 0; i < NUM_MARKERS; i++)
      if (k < strlen(k_markers[i]) && !memcmp(text + len - k, k_markers[i], k)) return len - k;
  return len;
}
