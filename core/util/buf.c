#include "util/buf.h"
#include "util/utf8.h"
#include "weir/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for `more` bytes plus the NUL; sets oom and returns 0 on failure. */
static int reserve(weir_buf *b, size_t more) {
  if (b->oom) return 0;
  if (more > (size_t)-1 / 2 - b->len) {
    b->oom = 1;
    return 0;
  }
  if (b->len + more + 1 <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + more + 1) cap *= 2;
  char *np = realloc(b->p, cap);
  if (!np) {
    b->oom = 1;
    return 0;
  }
  b->p = np;
  b->cap = cap;
  return 1;
}

void weir_buf_reserve(weir_buf *b, size_t more) {
  if (b->oom || (b->p && b->len + more + 1 <= b->cap)) return;
  if (more > (size_t)-1 / 2 - b->len) {
    b->oom = 1;
    return;
  }
  char *np = realloc(b->p, b->len + more + 1);
  if (!np) {
    b->oom = 1;
    return;
  }
  np[b->len] = '\0';
  b->p = np;
  b->cap = b->len + more + 1;
}

void weir_buf_append(weir_buf *b, const void *data, size_t len) {
  if (!reserve(b, len)) return;
  if (len) memcpy(b->p + b->len, data, len);
  b->len += len;
  b->p[b->len] = '\0';
}

void weir_buf_puts(weir_buf *b, const char *s) { weir_buf_append(b, s, strlen(s)); }

void weir_buf_putc(weir_buf *b, char c) { weir_buf_append(b, &c, 1); }

void weir_buf_vprintf(weir_buf *b, const char *fmt, va_list ap) {
  if (b->oom) return;
  va_list ap2;
  va_copy(ap2, ap);
  /* Formats straight into the spare room; a second pass only when it did not fit. */
  size_t room = b->p ? b->cap - b->len : 0;
  int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
  if (n < 0) {
    b->oom = 1;
  } else if ((size_t)n < room) {
    b->len += (size_t)n;
  } else if (reserve(b, (size_t)n)) {
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
    b->len += (size_t)n;
  }
  va_end(ap2);
}

void weir_buf_printf(weir_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weir_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

void weir_buf_free(weir_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

char *weir_buf_take(weir_buf *b, size_t *len) {
  char *p = b->oom ? NULL : b->p;
  if (len) *len = p ? b->len : 0;
  if (!p) free(b->p);
  memset(b, 0, sizeof *b);
  return p;
}

void weir_buf_append_utf8(weir_buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (weir_utf8_valid(s, n)) {
    weir_buf_append(b, s, n);
    return;
  }
  char *out = NULL;
  size_t len = 0, cap = 0;
  if (weir_utf8_sanitize((const unsigned char *)s, n, 1, &out, &len, &cap, NULL) != WEIR_OK) {
    b->oom = 1;
  } else {
    weir_buf_append(b, out, len);
  }
  free(out);
}

char *weir_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  weir_buf b = {0};
  char chunk[1 << 16];
  size_t r;
  while ((r = fread(chunk, 1, sizeof chunk, f)) > 0 && !b.oom) weir_buf_append(&b, chunk, r);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    weir_buf_free(&b);
    return NULL;
  }
  /* An empty file is an empty string, not a failure. */
  if (!b.p && !b.oom) weir_buf_append(&b, "", 0);
  size_t n = b.len;
  char *out = weir_buf_take(&b, NULL);
  if (out && len) *len = n;
  return out;
}
