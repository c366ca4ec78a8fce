/* The C side of toml.h: lookup, construction, copying and writing of the tree. */
#include <stdlib.h>
#include <string.h>

#include "config/toml.h"
#include "weir/status.h"

weir_toml_node *weir_toml_get(const weir_toml_node *table, const char *key) {
  if (!table || table->type != WEIR_TOML_TABLE) return NULL;
  for (int i = 0; i < table->num_items; i++)
    if (table->items[i]->key && !strcmp(table->items[i]->key, key)) return table->items[i];
  return NULL;
}

weir_toml_node *weir_toml_new_table(void) {
  weir_toml_node *n = calloc(1, sizeof *n);
  if (n) n->type = WEIR_TOML_TABLE;
  return n;
}

weir_toml_node *weir_toml_new_string(const char *s) {
  weir_toml_node *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->type = WEIR_TOML_STRING;
  n->s = strdup(s ? s : "");
  if (!n->s) {
    free(n);
    return NULL;
  }
  return n;
}

int weir_toml_put(weir_toml_node *table, const char *key, weir_toml_node *value) {
  if (!table || table->type != WEIR_TOML_TABLE || !value) return WEIR_E_INVAL;
  char *k = strdup(key);
  if (!k) return WEIR_E_NOMEM;
  for (int i = 0; i < table->num_items; i++) {
    if (table->items[i]->key && !strcmp(table->items[i]->key, key)) {
      weir_toml_free(table->items[i]);
      free(value->key);
      value->key = k;
      table->items[i] = value;
      return WEIR_OK;
    }
  }
  weir_toml_node **items = realloc(table->items, sizeof *items * (size_t)(table->num_items + 1));
  if (!items) {
    free(k);
    return WEIR_E_NOMEM;
  }
  table->items = items;
  free(value->key);
  value->key = k;
  table->items[table->num_items++] = value;
  return WEIR_OK;
}

weir_toml_node *weir_toml_clone(const weir_toml_node *n) {
  if (!n) return NULL;
  weir_toml_node *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  *c = *n;
  c->key = NULL;
  c->s = NULL;
  c->items = NULL;
  c->num_items = 0;
  if ((n->key && !(c->key = strdup(n->key))) || (n->s && !(c->s = strdup(n->s)))) goto fail;
  if (n->num_items) {
    c->items = calloc((size_t)n->num_items, sizeof *c->items);
    if (!c->items) goto fail;
    for (int i = 0; i < n->num_items; i++) {
      if (!(c->items[i] = weir_toml_clone(n->items[i]))) goto fail;
      c->num_items = i + 1;
    }
  }
  return c;
fail:
  weir_toml_free(c);
  return NULL;
}

void weir_toml_free(weir_toml_node *n) {
  if (!n) return;
  for (int i = 0; i < n->num_items; i++) weir_toml_free(n->items[i]);
  free(n->items);
  free(n->key);
  free(n->s);
  free(n);
}

const char *weir_toml_type_name(weir_toml_type t) {
  switch (t) {
  case WEIR_TOML_TABLE: return "a table";
  case WEIR_TOML_ARRAY: return "an array";
  case WEIR_TOML_STRING: return "a string";
  case WEIR_TOML_INT: return "an integer";
  case WEIR_TOML_FLOAT: return "a float";
  case WEIR_TOML_BOOL: return "a boolean";
  case WEIR_TOML_DATETIME: return "a date/time";
  default: return "an unknown value";
  }
}

void weir_toml_write_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\t': fputs("\\t", f); break;
    case '\r': fputs("\\r", f); break;
    default:
      if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
      else fputc(*p, f);
    }
  }
  fputc('"', f);
}

void weir_toml_write_key(FILE *f, const char *key) {
  const char *k = key ? key : "";
  size_t bare = strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-");
  if (k[0] && !k[bare]) fputs(k, f);
  else weir_toml_write_string(f, k);
}

void weir_toml_write_value(FILE *f, const weir_toml_node *n) {
  switch (n->type) {
  case WEIR_TOML_STRING: weir_toml_write_string(f, n->s); break;
  case WEIR_TOML_DATETIME: fputs(n->s, f); break;
  case WEIR_TOML_INT: fprintf(f, "%lld", (long long)n->i); break;
  case WEIR_TOML_FLOAT: {
    char buf[64];
    /* The shortest form that reads back as the same double. */
    snprintf(buf, sizeof buf, "%.15g", n->f);
    if (strtod(buf, NULL) != n->f) snprintf(buf, sizeof buf, "%.17g", n->f);
    /* TOML needs a '.' or exponent to read it back as a float. */
    if (!strpbrk(buf, ".eEni")) strcat(buf, ".0");
    fputs(buf, f);
    break;
  }
  case WEIR_TOML_BOOL: fputs(n->b ? "true" : "false", f); break;
  case WEIR_TOML_ARRAY:
    fputc('[', f);
    for (int i = 0; i < n->num_items; i++) {
      if (i) fputs(", ", f);
      weir_toml_write_value(f, n->items[i]);
    }
    fputc(']', f);
    break;
  case WEIR_TOML_TABLE:
    fputc('{', f);
    for (int i = 0; i < n->num_items; i++) {
      fputs(i ? ", " : " ", f);
      weir_toml_write_key(f, n->items[i]->key);
      fputs(" = ", f);
      weir_toml_write_value(f, n->items[i]);
    }
    fputs(" }", f);
    break;
  }
}
