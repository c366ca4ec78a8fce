/* UTF-8 helpers shared by the tokenizers, chat templates, the HTTP layer and the log (core-internal).
 *
 * All functions are pure and thread-safe. */
#ifndef WEIR_UTIL_UTF8_H
#define WEIR_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

typedef struct weir_uni_range {
  uint32_t lo, hi;
} weir_uni_range;

/* Unicode general category L* / N* (tables generated from Unicode data, see
 * tests/tokenizer/gen/gen_unicode.py), and the White_Space property. */
int weir_uni_is_letter(uint32_t cp);
int weir_uni_is_number(uint32_t cp);
int weir_uni_is_space(uint32_t cp);

/* Decodes one UTF-8 sequence at s[0..n) (n > 0). Returns its length (1..4) and sets *cp;
 * a byte that does not start a valid, complete sequence gives length 1 and *cp = 0xFFFD
 * with *valid = 0 (valid may be NULL). */
int weir_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *valid);

/* Length of the longest valid UTF-8 sequence prefix starting at s[0..n): 0 when s[0] cannot
 * start a sequence or a continuation byte is wrong; or -k when the k bytes available are a
 * correct but incomplete start of a sequence (more bytes could complete it). */
int weir_utf8_scan(const unsigned char *s, size_t n);

/* Encodes cp as UTF-8 into out (4 bytes room); returns the length. */
int weir_utf8_put(uint32_t cp, char *out);

/* Replaces invalid UTF-8 in s[0..n) by U+FFFD (one per maximal invalid subpart) appending
 * to *buf (grown with realloc; *len and *cap track it). When `final` is 0 an incomplete
 * trailing sequence is not written: its length is returned in *held (the caller keeps those
 * bytes); when `final` is 1 it becomes U+FFFD. Returns 0 or WEIR_E_NOMEM. */
int weir_utf8_sanitize(const unsigned char *s, size_t n, int final, char **buf, size_t *len,
                        size_t *cap, size_t *held);

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). */
int weir_utf8_valid(const char *s, size_t n);
/* Cuts an incomplete or invalid sequence at the end of a NUL-terminated string (what
 * snprintf leaves when it truncates in the middle of a character). */
void weir_utf8_trim(char *s);

#endif
