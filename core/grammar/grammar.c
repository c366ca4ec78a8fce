/* weir_grammar_compile: one front end per constraint kind, then the common compiler. */
#include <stdio.h>
#include <string.h>

#include "grammar/internal.h"
#include "weir/status.h"

int weir_grammar_compile(const weir_constraint_spec *spec, weir_grammar **out, char *err,
                         size_t errlen) {
  *out = NULL;
  if (err && errlen) err[0] = 0;
  weir_grammar_limits lim;
  if (spec->limits) lim = *spec->limits;
  else weir_grammar_limits_default(&lim);
  if (spec->kind != WEIR_CONSTRAINT_JSON_OBJECT && !spec->text) {
    snprintf(err, errlen, "the constraint has no text");
    return WEIR_E_INVAL;
  }
  if (spec->len > lim.max_text_bytes) {
    snprintf(err, errlen, "the constraint is too large: %zu bytes, the limit is %zu", spec->len,
             lim.max_text_bytes);
    return WEIR_E_INVAL;
  }
  weir__gb b;
  if (weir__gb_init(&b, &lim)) {
    snprintf(err, errlen, "out of memory");
    return WEIR_E_NOMEM;
  }
  uint32_t start = UINT32_MAX;
  int rc;
  switch (spec->kind) {
  case WEIR_CONSTRAINT_JSON_OBJECT:
    rc = weir__json_object_build(&b, spec->whitespace, &start);
    break;
  case WEIR_CONSTRAINT_JSON_SCHEMA:
    rc = weir__schema_build(&b, spec->text, spec->len, spec->strict, spec->whitespace, &start);
    break;
  case WEIR_CONSTRAINT_REGEX: {
    const uint32_t body = weir__regex_parse(&b, spec->text, spec->len, 0, "regex");
    start = weir__gb_rule(&b, "root", 4);
    weir__gb_define(&b, start, body);
    rc = b.status;
    break;
  }
  case WEIR_CONSTRAINT_CHOICE:
    rc = weir__choice_build(&b, spec->text, spec->len, &start);
    break;
  case WEIR_CONSTRAINT_GRAMMAR:
    rc = weir__ebnf_build(&b, spec->text, spec->len, &start);
    break;
  default:
    snprintf(err, errlen, "unknown constraint kind %d", (int)spec->kind);
    weir__gb_free(&b);
    return WEIR_E_INVAL;
  }
  if (rc || b.status) {
    snprintf(err, errlen, "%s", b.status ? b.err : "out of memory");
    rc = b.status ? b.status : rc;
  } else {
    rc = weir__gb_finish(&b, start, out, err, errlen);
  }
  weir__gb_free(&b);
  return rc;
}
