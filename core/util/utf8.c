/* UTF-8 decoding and repair (see utf8.h). */
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

#include "weir/status.h"

int weir_uni_is_space(uint32_t cp) {
  /* The Unicode White_Space property: a short, stable list. */
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int weir_utf8_scan(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  int need;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0; /* no overlong forms */
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else {
    return 0;
  }
  for (int i = 1; i <= need; i++) {
    if ((size_t)i >= n) return -i;
    unsigned b = s[i];
    unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return 0;
  }
  return need + 1;
}

int weir_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *valid) {
  int k = weir_utf8_scan(s, n);
  if (k <= 0) {
    *cp = 0xFFFD;
    if (valid) *valid = 0;
    return 1;
  }
  if (valid) *valid = 1;
  switch (k) {
  case 1: *cp = s[0]; break;
  case 2: *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); break;
  case 3: *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); break;
  default:
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    break;
  }
  return k;
}

int weir_utf8_put(uint32_t cp, char *out) {
  unsigned char *o = (unsigned char *)out;
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

static int reserve(char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 64;
  while (nc < need) nc *= 2;
  char *nb = realloc(*buf, nc);
  if (!nb) return WEIR_E_NOMEM;
  *buf = nb;
  *cap = nc;
  return 0;
}

int weir_utf8_sanitize(const unsigned char *s, size_t n, int final, char **buf, size_t *len,
                        size_t *cap, size_t *held) {
  /* Worst case every byte becomes a 3-byte U+FFFD; +1 for a NUL the caller may add. */
  if (reserve(buf, cap, *len + 3 * n + 1)) return WEIR_E_NOMEM;
  char *o = *buf + *len;
  size_t i = 0;
  if (held) *held = 0;
  while (i < n) {
    int k = weir_utf8_scan(s + i, n - i);
    if (k > 0) {
      memcpy(o, s + i, (size_t)k);
      o += k;
      i += (size_t)k;
    } else if (k < 0) {
      /* A correct but incomplete sequence at the very end. */
      if (!final) {
        if (held) *held = (size_t)-k;
        break;
      }
      memcpy(o, "\xEF\xBF\xBD", 3);
      o += 3;
      i += (size_t)-k;
    } else {
      /* The maximal subpart: the lead byte plus the continuation bytes that were valid
       * before the wrong one. */
      size_t sub = 1;
      unsigned c = s[i];
      if (c >= 0xC2 && c <= 0xF4) {
        for (size_t m = 1; m < 4 && i + m < n; m++) {
          int t = weir_utf8_scan(s + i, m + 1);
          if (t == 0) break;
          sub = m + 1;
        }
        /* scan over sub+1 bytes failed, so the first `sub` bytes are a valid prefix */
      }
      memcpy(o, "\xEF\xBF\xBD", 3);
      o += 3;
      i += sub;
    }
  }
  *len = (size_t)(o - *buf);
  return 0;
}

int weir_utf8_valid(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    int k = weir_utf8_scan(p + i, n - i);
    if (k <= 0) return 0;
    i += (size_t)k;
  }
  return 1;
}

void weir_utf8_trim(char *s) {
  size_t n = strlen(s);
  /* Only the last (up to 3) bytes can be a cut sequence; anything else invalid is left to
   * the output check. */
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned char c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
    if (c >= 0xC0 && weir_utf8_scan((const unsigned char *)s + n - back, back) <= 0)
      s[n - back] = '\0';
    return;
  }
}
