/* A small C view of a parsed TOML 1.0 document.
 *
 * The parser itself is toml++ (core/config/toml.cpp, the only C++ in core); it is converted
 * at once into this plain tree so that the rest of core, and the plugin loader validating a
 * plugin's option table, never see C++. Every node remembers where it was written (line and
 * column, 1-based) so that semantic errors can point at the file position.
 *
 * Ownership: a tree is owned by whoever parsed or created it and freed with weir_toml_free
 * on its root; every string and child belongs to the tree. Not thread-safe to mutate; a tree
 * nobody mutates may be read from any thread. */
#ifndef WEIR_CONFIG_TOML_H
#define WEIR_CONFIG_TOML_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum weir_toml_type {
  WEIR_TOML_TABLE = 1,
  WEIR_TOML_ARRAY = 2,
  WEIR_TOML_STRING = 3,
  WEIR_TOML_INT = 4,
  WEIR_TOML_FLOAT = 5,
  WEIR_TOML_BOOL = 6,
  WEIR_TOML_DATETIME = 7, /* kept as its TOML text in `s` */
} weir_toml_type;

typedef struct weir_toml_node {
  weir_toml_type type;
  char *key;                     /* the key in the parent table; NULL in arrays and the root */
  int line, column;              /* where the value was written; 0 when made by code */
  char *s;                       /* STRING and DATETIME */
  int64_t i;                     /* INT */
  double f;                      /* FLOAT */
  int b;                         /* BOOL */
  struct weir_toml_node **items; /* TABLE entries (in key order) or ARRAY elements */
  int num_items;
} weir_toml_node;

/* Parses a file. On failure returns WEIR_E_IO (cannot read) or WEIR_E_FORMAT (syntax) and
 * writes "FILE:LINE:COLUMN: what is wrong" into err. */
int weir_toml_parse_file(const char *path, weir_toml_node **out, char *err, size_t errlen);
/* Parses text; `source` names it in messages. */
int weir_toml_parse_string(const char *text, const char *source, weir_toml_node **out,
                           char *err, size_t errlen);
/* Parses one TOML value written alone ("9000", "\"x\"", "[1, 2]", "true"). Returns
 * WEIR_E_FORMAT when `text` is not a valid TOML value. *out has no key. */
int weir_toml_parse_value(const char *text, weir_toml_node **out);

/* The entry `key` of a table, or NULL (also when `table` is NULL or not a table). */
weir_toml_node *weir_toml_get(const weir_toml_node *table, const char *key);
/* Makes nodes. Return NULL when out of memory. */
weir_toml_node *weir_toml_new_table(void);
weir_toml_node *weir_toml_new_string(const char *s);
/* Puts `value` under `key` in `table`, replacing (and freeing) any entry of that key; takes
 * ownership of `value` on success only. Returns WEIR_E_INVAL when table is not a table. */
int weir_toml_put(weir_toml_node *table, const char *key, weir_toml_node *value);
/* Deep copy; NULL when out of memory. */
weir_toml_node *weir_toml_clone(const weir_toml_node *n);
void weir_toml_free(weir_toml_node *n);

/* Names a node type for messages: "a string", "an integer", ... */
const char *weir_toml_type_name(weir_toml_type t);
/* Writes a value (not a table) in TOML syntax; strings are quoted and escaped. */
void weir_toml_write_value(FILE *f, const weir_toml_node *n);
/* Writes a string as a TOML basic string, quoted and escaped. */
void weir_toml_write_string(FILE *f, const char *s);
/* A key as TOML reads it back: bare when it is non-empty and only A-Z a-z 0-9 _ -, quoted
 * otherwise (an empty key, a dot or a space would change its meaning or not parse). */
void weir_toml_write_key(FILE *f, const char *key);

#endif
