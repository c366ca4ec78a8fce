/* JSON building blocks shared by the json_object and JSON Schema front ends. */
#ifndef WEIR_GRAMMAR_JSON_H
#define WEIR_GRAMMAR_JSON_H

#include "grammar/internal.h"

typedef struct weir__json {
  weir__gb *b;
  int whitespace;
  uint32_t ws;        /* node: the whitespace allowed between tokens */
  uint32_t chr;       /* node: one character of a JSON string, in any JSON encoding */
  uint32_t value;     /* rule: any JSON value (made on first use) */
} weir__json;

void weir__json_init(weir__json *j, weir__gb *b, int whitespace);
/* "..." with any contents. */
uint32_t weir__json_string(weir__json *j);
/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)? and its integer part alone. */
uint32_t weir__json_number(weir__json *j);
uint32_t weir__json_integer(weir__json *j);
/* A rule deriving any JSON value. */
uint32_t weir__json_value_rule(weir__json *j);
/* A rule deriving any JSON object. */
uint32_t weir__json_object_rule(weir__json *j);
/* "{" ws [ member ws ("," ws member ws)* ] "}" for a given member node; and the array form. */
uint32_t weir__json_list(weir__json *j, char open, uint32_t item, char close);
/* The canonical JSON encodings of the characters in set: '"', '\\' and control characters
 * escaped (\n, \u001f, ...), everything else as UTF-8. One encoding per character. */
uint32_t weir__json_chars(weir__gb *b, const weir__cpset *set);
/* The canonical JSON text of a string value, as a literal (quotes included). */
uint32_t weir__json_string_lit(weir__json *j, const char *s, size_t len);

#endif
