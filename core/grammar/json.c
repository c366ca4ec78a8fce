/* JSON as grammar pieces, json_object, and choice lists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/json.h"
#include "weir/status.h"

void weir__json_init(weir__json *j, weir__gb *b, int whitespace) {
  memset(j, 0, sizeof *j);
  j->b = b;
  j->whitespace = whitespace;
  j->value = UINT32_MAX;
  if (whitespace) {
    /* One space, or one or two newlines and an indentation of up to 20 spaces or tabs:
     * enough for compact and pretty-printed JSON, bounded so that a model cannot loop on
     * whitespace forever. */
    weir__bset ind = {{0}};
    weir__bset_add(&ind, ' ');
    weir__bset_add(&ind, '\t');
    const uint32_t nl = weir__rx_repeat(b, weir__rx_byte(b, '\n'), 1, 2);
    const uint32_t indent = weir__rx_repeat(b, weir__rx_class(b, &ind), 0, 20);
    j->ws = weir__rx_opt(b, weir__rx_alt2(b, weir__rx_byte(b, ' '), weir__rx_seq2(b, nl, indent)));
  } else {
    j->ws = weir__rx_empty();
  }
  /* A character: any scalar value from U+0020 but '"' and '\' literally, or an escape. \u
   * escapes exclude surrogates, so that every character is one code point (minLength and
   * maxLength count code points). */
  weir__cpset lit = {0};
  if (weir__cpset_add(&lit, 0x20, 0x21) || weir__cpset_add(&lit, 0x23, 0x5B) ||
      weir__cpset_add(&lit, 0x5D, 0x10FFFF)) {
    weir__cpset_free(&lit);
    weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    return;
  }
  const uint32_t plain = weir__rx_cpset(b, &lit);
  weir__cpset_free(&lit);
  weir__bset esc1 = {{0}}, hex = {{0}}, hex_lo = {{0}}, d_hi = {{0}};
  for (const char *p = "\"\\/bfnrt"; *p; p++) weir__bset_add(&esc1, (uint8_t)*p);
  for (const char *p = "0123456789abcdefABCDEF"; *p; p++) weir__bset_add(&hex, (uint8_t)*p);
  for (const char *p = "0123456789abceABCE"; *p; p++) weir__bset_add(&hex_lo, (uint8_t)*p);
  for (const char *p = "fF"; *p; p++) weir__bset_add(&hex_lo, (uint8_t)*p);
  for (const char *p = "dD"; *p; p++) weir__bset_add(&d_hi, (uint8_t)*p);
  const uint32_t h = weir__rx_class(b, &hex);
  const uint32_t u4 = weir__rx_alt2(
      b, weir__rx_seq(b, (uint32_t[]){weir__rx_class(b, &hex_lo), h, h, h}, 4),
      weir__rx_seq(b, (uint32_t[]){weir__rx_class(b, &d_hi), weir__rx_range(b, '0', '7'), h, h}, 4));
  const uint32_t esc = weir__rx_seq2(
      b, weir__rx_byte(b, '\\'),
      weir__rx_alt2(b, weir__rx_class(b, &esc1), weir__rx_seq2(b, weir__rx_byte(b, 'u'), u4)));
  j->chr = weir__rx_alt2(b, plain, esc);
}

uint32_t weir__json_string(weir__json *j) {
  weir__gb *b = j->b;
  const uint32_t q = weir__rx_byte(b, '"');
  return weir__rx_seq3(b, q, weir__rx_star(b, j->chr), q);
}

uint32_t weir__json_integer(weir__json *j) {
  weir__gb *b = j->b;
  const uint32_t digits = weir__rx_seq2(b, weir__rx_range(b, '1', '9'),
                                        weir__rx_star(b, weir__rx_range(b, '0', '9')));
  return weir__rx_seq2(b, weir__rx_opt(b, weir__rx_byte(b, '-')),
                       weir__rx_alt2(b, weir__rx_byte(b, '0'), digits));
}

uint32_t weir__json_number(weir__json *j) {
  weir__gb *b = j->b;
  const uint32_t d = weir__rx_range(b, '0', '9');
  const uint32_t frac = weir__rx_opt(b, weir__rx_seq2(b, weir__rx_byte(b, '.'), weir__rx_repeat(b, d, 1, WEIR__RX_INF)));
  weir__bset e = {{0}}, sign = {{0}};
  weir__bset_add(&e, 'e');
  weir__bset_add(&e, 'E');
  weir__bset_add(&sign, '+');
  weir__bset_add(&sign, '-');
  const uint32_t exp = weir__rx_opt(b, weir__rx_seq3(b, weir__rx_class(b, &e),
                                                    weir__rx_opt(b, weir__rx_class(b, &sign)),
                                                    weir__rx_repeat(b, d, 1, WEIR__RX_INF)));
  return weir__rx_seq3(b, weir__json_integer(j), frac, exp);
}

uint32_t weir__json_list(weir__json *j, char open, uint32_t item, char close) {
  weir__gb *b = j->b;
  const uint32_t more = weir__rx_star(
      b, weir__rx_seq(b, (uint32_t[]){weir__rx_byte(b, ','), j->ws, item, j->ws}, 4));
  const uint32_t items = weir__rx_opt(b, weir__rx_seq3(b, item, j->ws, more));
  return weir__rx_seq(b, (uint32_t[]){weir__rx_byte(b, (uint8_t)open), j->ws, items,
                                      weir__rx_byte(b, (uint8_t)close)}, 4);
}

static void make_value(weir__json *j) {
  weir__gb *b = j->b;
  const uint32_t value = weir__gb_new_rule(b, "value");
  const uint32_t object = weir__gb_new_rule(b, "object");
  const uint32_t array = weir__gb_new_rule(b, "array");
  if (value == UINT32_MAX || object == UINT32_MAX || array == UINT32_MAX) return;
  const uint32_t member = weir__rx_seq(b, (uint32_t[]){weir__json_string(j), j->ws,
                                                       weir__rx_byte(b, ':'), j->ws,
                                                       weir__rx_ref(b, value)}, 5);
  weir__gb_define(b, object, weir__json_list(j, '{', member, '}'));
  weir__gb_define(b, array, weir__json_list(j, '[', weir__rx_ref(b, value), ']'));
  const uint32_t alts[] = {weir__rx_ref(b, object), weir__rx_ref(b, array), weir__json_string(j),
                           weir__json_number(j), weir__rx_str(b, "true"),
                           weir__rx_str(b, "false"), weir__rx_str(b, "null")};
  weir__gb_define(b, value, weir__rx_alt(b, alts, 7));
  j->value = value;
}

uint32_t weir__json_value_rule(weir__json *j) {
  if (j->value == UINT32_MAX) make_value(j);
  return j->value;
}

uint32_t weir__json_object_rule(weir__json *j) {
  weir__json_value_rule(j);
  /* make_value creates value, object, array in this order. */
  return j->value == UINT32_MAX ? UINT32_MAX : j->value + 1;
}

uint32_t weir__json_chars(weir__gb *b, const weir__cpset *set) {
  static const char *const short_esc[0x20] = {[8] = "\\b", [9] = "\\t", [10] = "\\n",
                                              [12] = "\\f", [13] = "\\r"};
  weir__cpset plain = {0};
  uint32_t alts[40], n = 0;
  for (uint32_t i = 0; i < set->n; i++) {
    const uint32_t lo = set->r[i][0], hi = set->r[i][1];
    for (uint32_t c = lo; c <= hi && c < 0x20; c++) {
      char buf[8];
      if (short_esc[c]) snprintf(buf, sizeof buf, "%s", short_esc[c]);
      else snprintf(buf, sizeof buf, "\\u%04x", c);
      alts[n++] = weir__rx_str(b, buf);
    }
    /* '"' and '\' escaped; the rest of the range literal. */
    for (uint32_t a = lo < 0x20 ? 0x20 : lo; a <= hi;) {
      uint32_t z = hi;
      if (a <= '"' && z >= '"') z = a == '"' ? '"' : '"' - 1;
      if (a <= '\\' && z >= '\\') z = a == '\\' ? '\\' : '\\' - 1;
      if (a == '"' && z == '"') alts[n++] = weir__rx_str(b, "\\\"");
      else if (a == '\\' && z == '\\') alts[n++] = weir__rx_str(b, "\\\\");
      else if (weir__cpset_add(&plain, a, z)) {
        weir__cpset_free(&plain);
        return weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
      }
      if (z >= hi) break;
      a = z + 1;
    }
  }
  alts[n++] = weir__rx_cpset(b, &plain);
  weir__cpset_free(&plain);
  return weir__rx_alt(b, alts, n);
}

uint32_t weir__json_string_lit(weir__json *j, const char *s, size_t len) {
  char *out = malloc(len * 6 + 3);
  if (!out) return weir__gb_fail(j->b, WEIR_E_NOMEM, "out of memory");
  size_t n = 0;
  out[n++] = '"';
  for (size_t i = 0; i < len; i++) {
    const unsigned char c = (unsigned char)s[i];
    switch (c) {
    case '"': out[n++] = '\\', out[n++] = '"'; break;
    case '\\': out[n++] = '\\', out[n++] = '\\'; break;
    case '\n': out[n++] = '\\', out[n++] = 'n'; break;
    case '\r': out[n++] = '\\', out[n++] = 'r'; break;
    case '\t': out[n++] = '\\', out[n++] = 't'; break;
    case '\b': out[n++] = '\\', out[n++] = 'b'; break;
    case '\f': out[n++] = '\\', out[n++] = 'f'; break;
    default:
      if (c < 0x20) n += (size_t)snprintf(out + n, 7, "\\u%04x", c);
      else out[n++] = (char)c;
    }
  }
  out[n++] = '"';
  const uint32_t r = weir__rx_lit(j->b, out, n);
  free(out);
  return r;
}

int weir__json_object_build(weir__gb *b, int whitespace, uint32_t *start) {
  weir__json j;
  weir__json_init(&j, b, whitespace);
  const uint32_t object = weir__json_object_rule(&j);
  const uint32_t root = weir__gb_rule(b, "root", 4);
  if (object == UINT32_MAX || root == UINT32_MAX) return b->status ? b->status : WEIR_E_NOMEM;
  weir__gb_define(b, root, weir__rx_seq3(b, j.ws, weir__rx_ref(b, object), j.ws));
  *start = root;
  return b->status;
}

int weir__choice_build(weir__gb *b, const char *text, size_t len, uint32_t *start) {
  cJSON *arr = cJSON_ParseWithLength(text, len);
  int rc = 0;
  if (!arr || !cJSON_IsArray(arr)) {
    weir__gb_fail(b, WEIR_E_INVAL, "guided_choice must be a JSON array of strings");
    rc = WEIR_E_INVAL;
    goto out;
  }
  const int n = cJSON_GetArraySize(arr);
  if (n == 0) {
    weir__gb_fail(b, WEIR_E_INVAL, "guided_choice is empty: nothing can match");
    rc = WEIR_E_INVAL;
    goto out;
  }
  uint32_t *alts = malloc((size_t)n * sizeof *alts);
  if (!alts) {
    weir__gb_fail(b, WEIR_E_NOMEM, "out of memory");
    rc = WEIR_E_NOMEM;
    goto out;
  }
  int i = 0;
  for (cJSON *e = arr->child; e; e = e->next, i++) {
    if (!cJSON_IsString(e)) {
      weir__gb_fail(b, WEIR_E_INVAL, "guided_choice[%d] is not a string", i);
      break;
    }
    alts[i] = weir__rx_str(b, e->valuestring);
  }
  const uint32_t root = weir__gb_rule(b, "root", 4);
  if (!b->status) weir__gb_define(b, root, weir__rx_alt(b, alts, (uint32_t)n));
  free(alts);
  *start = root;
  rc = b->status;
out:
  cJSON_Delete(arr);
  return rc;
}
