/* A growable byte buffer, NUL-terminated, for building text (responses, /metrics pages,
 * rendered templates).
 *
 * On an allocation failure `oom` is set and every later append does nothing, so a caller
 * appends freely and checks once at the end. A zeroed weir_buf is empty and valid.
 * Ownership: the buffer owns `p` until weir_buf_free or weir_buf_take. Not thread-safe: one
 * owner at a time. */
#ifndef WEIR_UTIL_BUF_H
#define WEIR_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct weir_buf {
  char *p;    /* NULL until the first append; then NUL-terminated */
  size_t len; /* bytes before the terminating NUL */
  size_t cap;
  int oom;    /* an append failed: the content is incomplete */
} weir_buf;

void weir_buf_append(weir_buf *b, const void *data, size_t len);
/* Makes room for `more` bytes beyond len at once (one allocation instead of a doubling
 * series when the final size is known); sets oom on failure. */
void weir_buf_reserve(weir_buf *b, size_t more);
void weir_buf_puts(weir_buf *b, const char *s);
void weir_buf_putc(weir_buf *b, char c);
void weir_buf_printf(weir_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void weir_buf_vprintf(weir_buf *b, const char *fmt, va_list ap);
/* Releases the memory and empties the buffer (oom cleared). */
void weir_buf_free(weir_buf *b);
/* Hands the string to the caller (who frees it) and empties the buffer; NULL after an
 * allocation failure (the memory is freed) or when nothing was appended. */
char *weir_buf_take(weir_buf *b, size_t *len);
/* Appends s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD (text that reaches a
 * client or a log must be valid UTF-8). */
void weir_buf_append_utf8(weir_buf *b, const char *s, size_t n);

/* Reads a whole file into a malloc'd buffer with a NUL after its bytes (the caller frees);
 * *len (may be NULL) gets the byte count. NULL when it cannot be opened or read (errno set)
 * or memory runs out. */
char *weir_read_file(const char *path, size_t *len);

#endif
