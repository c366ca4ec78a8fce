/* Tool calling on /v1/chat/completions, the request side: `tools`, `tool_choice` and
 * `parallel_tool_calls` checked, the messages normalized into what chat templates expect
 * (assistant tool_calls with their arguments as objects, the tool role), and the JSON Schema
 * that forces a call for tool_choice "required" or a named function. The reply side
 * (finding calls in the output) is tool_calls.c. Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
#include "util/buf.h"

/* OpenAI's rule for function names. */
static int valid_name(const char *s) {
  size_t n = strlen(s);
  return n >= 1 && n <= 64 &&
         strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* tools[i].function, checked. */
static int check_tool(const cJSON *t, int i, api_error *e) {
  char pp[64];
  snprintf(pp, sizeof pp, "tools[%d]", i);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
  const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
  if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
      !cJSON_IsObject(fn))
    return weir__api_fail(e, 400, pp, "invalid_value",
                          "'%s' must be {\"type\": \"function\", \"function\": {...}}", pp);
  for (const cJSON *k = t->child; k; k = k->next)
    if (strcmp(k->string, "type") && strcmp(k->string, "function"))
      return weir__api_fail(e, 400, pp, "unknown_parameter", "Unrecognized key '%s' in '%s'",
                            k->string, pp);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
  if (!cJSON_IsString(name) || !valid_name(name->valuestring))
    return weir__api_fail(e, 400, pp, "invalid_value",
                          "'%s.function.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ "
                          "and -", pp);
  for (const cJSON *k = fn->child; k; k = k->next) {
    if (!strcmp(k->string, "name")) continue;
    if (!strcmp(k->string, "description") && cJSON_IsString(k)) continue;
    if (!strcmp(k->string, "parameters") && cJSON_IsObject(k)) continue;
    if (!strcmp(k->string, "strict") && (cJSON_IsBool(k) || cJSON_IsNull(k))) continue;
    return weir__api_fail(e, 400, pp, "invalid_value",
                          "'%s.function.%s' is not a valid key of a function (name, "
                          "description: a string, parameters: a JSON Schema object, strict: a "
                          "boolean)", pp, k->string);
  }
  return 0;
}

static const cJSON *find_tool(const cJSON *tools, const char *name) {
  for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return fn;
  }
  return NULL;
}

int weir__api_tools_check(const params *p, api_tools *t, api_error *e) {
  memset(t, 0, sizeof *t);
  t->parallel = p->has_parallel_tool_calls ? p->parallel_tool_calls : 1;
  int n = 0;
  if (p->tools) {
    if (!cJSON_IsArray(p->tools))
      return weir__api_fail(e, 400, "tools", "invalid_type", "'tools' must be a list of tools");
    for (const cJSON *it = p->tools->child; it; it = it->next, n++) {
      if (n == WEIR_API_MAX_TOOLS)
        return weir__api_fail(e, 400, "tools", "invalid_value",
                              "'tools' allows at most %d functions", WEIR_API_MAX_TOOLS);
      if (check_tool(it, n, e)) return -1;
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(it, "function"), "name");
      if (find_tool(p->tools, name->valuestring) != cJSON_GetObjectItemCaseSensitive(it, "function"))
        return weir__api_fail(e, 400, "tools", "invalid_value",
                              "'tools' names the function '%s' twice", name->valuestring);
    }
    t->tools = n ? p->tools : NULL;
  }
  t->mode = n ? WEIR_TOOLS_AUTO : WEIR_TOOLS_OFF;
  const cJSON *c = p->tool_choice;
  if (!c) return 0;
  if (cJSON_IsString(c) && !strcmp(c->valuestring, "none")) {
    t->mode = WEIR_TOOLS_OFF;
    return 0;
  }
  if (!n)
    return weir__api_fail(e, 400, "tool_choice", "invalid_value",
                          "'tool_choice' is only allowed when 'tools' are given");
  if (cJSON_IsString(c) && !strcmp(c->valuestring, "auto")) return 0;
  if (cJSON_IsString(c) && !strcmp(c->valuestring, "required")) {
    t->mode = WEIR_TOOLS_REQUIRED;
    return 0;
  }
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
  if (!cJSON_IsObject(c) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
      !cJSON_IsString(name))
    return weir__api_fail(e, 400, "tool_choice", "invalid_value",
                          "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": "
                          "\"function\", \"function\": {\"name\": ...}}");
  if (!find_tool(p->tools, name->valuestring))
    return weir__api_fail(e, 400, "tool_choice", "invalid_value",
                          "'tool_choice' names the function '%s', which is not in 'tools'",
                          name->valuestring);
  t->mode = WEIR_TOOLS_NAMED;
  t->named = name->valuestring;
  return 0;
}

/* The function's parameters schema, or any object when it gives none. */
static cJSON *params_schema(const cJSON *fn) {
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
  if (cJSON_IsObject(ps)) return cJSON_Duplicate(ps, 1);
  cJSON *o = cJSON_CreateObject();
  if (o) cJSON_AddStringToObject(o, "type", "object");
  return o;
}

char *weir__api_tools_schema(const api_tools *t) {
  if (t->mode == WEIR_TOOLS_NAMED) {
    cJSON *s = params_schema(find_tool(t->tools, t->named));
    char *text = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    return text;
  }
  /* required: [{"name": <one of the tools>, "parameters": <its schema>}, ...] */
  cJSON *root = cJSON_CreateObject();
  cJSON *items = cJSON_CreateObject();
  cJSON *any = items ? cJSON_AddArrayToObject(items, "anyOf") : NULL;
  int ok = root && items && any;
  if (ok) {
    cJSON_AddStringToObject(root, "type", "array");
    cJSON_AddNumberToObject(root, "minItems", 1);
    cJSON_AddNumberToObject(root, "maxItems", t->parallel ? WEIR_API_MAX_FORCED_CALLS : 1);
  }
  for (const cJSON *it = t->tools ? t->tools->child : NULL; ok && it; it = it->next) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(it, "function");
    cJSON *alt = cJSON_CreateObject(), *props = NULL, *name = NULL, *req = NULL;
    if (alt) {
      cJSON_AddItemToArray(any, alt);
      cJSON_AddStringToObject(alt, "type", "object");
      props = cJSON_AddObjectToObject(alt, "properties");
      name = props ? cJSON_AddObjectToObject(props, "name") : NULL;
      req = cJSON_AddArrayToObject(alt, "required");
    }
    cJSON *ps = params_schema(fn);
    ok = alt && props && name && req && ps &&
         cJSON_AddStringToObject(name, "const",
                                 cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
    if (ok) {
      cJSON_AddItemToObject(props, "parameters", ps);
      cJSON_AddItemToArray(req, cJSON_CreateString("name"));
      cJSON_AddItemToArray(req, cJSON_CreateString("parameters"));
    } else {
      cJSON_Delete(ps);
    }
  }
  char *text = NULL;
  if (ok) {
    cJSON_AddItemToObject(root, "items", items);
    items = NULL;
    text = cJSON_PrintUnformatted(root);
  }
  cJSON_Delete(items);
  cJSON_Delete(root);
  return text;
}

/* ---- messages for the template ---------------------------------------------------------- */

/* messages[i].tool_calls, copied with each function.arguments string parsed into the object
 * templates expect (arguments that are not JSON stay a string). */
static cJSON *copy_tool_calls(const cJSON *calls, int i, api_error *e) {
  char pp[64];
  snprintf(pp, sizeof pp, "messages[%d].tool_calls", i);
  if (!cJSON_IsArray(calls)) {
    weir__api_fail(e, 400, pp, "invalid_type", "'%s' must be a list of tool calls", pp);
    return NULL;
  }
  cJSON *out = cJSON_Duplicate(calls, 1);
  if (!out) {
    weir__api_fail(e, 500, NULL, NULL, "out of memory");
    return NULL;
  }
  int j = 0;
  for (cJSON *c = out->child; c; c = c->next, j++) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    if (!cJSON_IsObject(c) || (type && !cJSON_IsString(type)) || !cJSON_IsString(name) ||
        (args && !cJSON_IsString(args) && !cJSON_IsObject(args))) {
      weir__api_fail(e, 400, pp, "invalid_value",
                     "'%s[%d]' must be {\"id\", \"type\": \"function\", \"function\": "
                     "{\"name\", \"arguments\"}}", pp, j);
      cJSON_Delete(out);
      return NULL;
    }
    if (cJSON_IsString(args)) {
      cJSON *parsed = cJSON_Parse(args->valuestring);
      if (parsed) cJSON_ReplaceItemViaPointer(fn, args, parsed);
    }
  }
  return out;
}

cJSON *weir__api_tools_message(const cJSON *m, int i, const char *role, const char *content,
                               api_error *e) {
  char pp[64];
  snprintf(pp, sizeof pp, "messages[%d]", i);
  const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
  const cJSON *call_id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
  if (calls && !cJSON_IsNull(calls) && strcmp(role, "assistant")) {
    weir__api_fail(e, 400, pp, "invalid_value", "'%s.tool_calls' is only allowed on assistant "
                   "messages", pp);
    return NULL;
  }
  if (!strcmp(role, "tool") && !cJSON_IsString(call_id)) {
    weir__api_fail(e, 400, pp, "missing_required_parameter",
                   "'%s.tool_call_id' (a string) is required on tool messages", pp);
    return NULL;
  }
  if (call_id && strcmp(role, "tool")) {
    weir__api_fail(e, 400, pp, "invalid_value",
                   "'%s.tool_call_id' is only allowed on tool messages", pp);
    return NULL;
  }
  if (name && !cJSON_IsString(name)) {
    weir__api_fail(e, 400, pp, "invalid_type", "'%s.name' must be a string", pp);
    return NULL;
  }
  cJSON *o = cJSON_CreateObject();
  if (!o) goto oom;
  cJSON_AddStringToObject(o, "role", role);
  const int has_calls = calls && !cJSON_IsNull(calls);
  /* An assistant turn that only calls tools gets "" rather than None: templates that know
   * tools test it for truth either way, and one that does not can still join it. */
  cJSON_AddStringToObject(o, "content", content);
  if (name) cJSON_AddStringToObject(o, "name", name->valuestring);
  if (call_id) cJSON_AddStringToObject(o, "tool_call_id", call_id->valuestring);
  if (has_calls) {
    cJSON *copy = copy_tool_calls(calls, i, e);
    if (!copy) {
      cJSON_Delete(o);
      return NULL;
    }
    cJSON_AddItemToObject(o, "tool_calls", copy);
  }
  return o;
oom:
  weir__api_fail(e, 500, NULL, NULL, "out of memory");
  return NULL;
}
