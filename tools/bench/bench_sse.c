/* What the bench needs from one SSE event's JSON, read without building a tree.
 *
 * The client used to cJSON_Parse every streamed event: at 64 requests in flight against the
 * response cache that was a third of the client's CPU per hit (an allocation per value,
 * strtod for every number, docs/perf/cache.md), and on a two-CPU machine the client's CPU
 * sets the server's measured latency too. This walks the event once, checks that it is one
 * well-formed JSON object (RFC 8259 grammar: strings, escapes, numbers, nesting), and keeps
 * only the facts the measurement uses: whether it carries an error, whether its first choice
 * carries text, and the usage counts. Nothing is allocated and nothing is copied.
 *
 * Threads: none shared (pure function of its input). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#define MAX_DEPTH 64 /* deeper nesting is refused as malformed (no event of any server nests so) */

enum { R_NONE, R_ROOT, R_CHOICES, R_CHOICE0, R_DELTA, R_USAGE };

typedef struct {
  const char *p, *end;
  weir_bench_sse_facts *f;
  unsigned seen_roles; /* 1 << R_*: the container keys already met (a repeat counts as R_NONE) */
} scan;

static void skip_ws(scan *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
    s->p++;
}

static int is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string at s->p (the opening quote); its raw bytes between the quotes in *at, *len. */
static int scan_string(scan *s, const char **at, size_t *len) {
  if (s->p >= s->end || *s->p != '"') return -1;
  const char *b = ++s->p;
  while (s->p < s->end) {
    /* Eight plain bytes a step (most of an event is string content): a word with no quote,
     * no backslash and no control byte is skipped whole. The tests are exact about whether
     * such a byte is in the word; the byte loop below then finds it. */
    while (s->end - s->p >= 8) {
      uint64_t w;
      memcpy(&w, s->p, 8);
      const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
      const uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
      if (((q - ones) & ~q & highs) | ((bs - ones) & ~bs & highs) | ((w - ones * 0x20) & ~w & highs))
        break;
      s->p += 8;
    }
    if (s->p >= s->end) break;
    unsigned char c = (unsigned char)*s->p;
    if (c == '"') {
      *at = b;
      *len = (size_t)(s->p - b);
      s->p++;
      return 0;
    }
    if (c < 0x20) return -1; /* control characters must be escaped */
    if (c == '\\') {
      if (++s->p >= s->end) return -1;
      switch (*s->p) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        s->p++;
        break;
      case 'u':
        if (s->end - s->p < 5 || !is_hex(s->p[1]) || !is_hex(s->p[2]) || !is_hex(s->p[3]) ||
            !is_hex(s->p[4]))
          return -1;
        s->p += 5;
        break;
      default: return -1;
      }
      continue;
    }
    s->p++;
  }
  return -1;
}

/* A number by the JSON grammar; its value in *v when v is not NULL. */
static int scan_number(scan *s, double *v) {
  const char *b = s->p;
  if (s->p < s->end && *s->p == '-') s->p++;
  if (s->p >= s->end) return -1;
  if (*s->p == '0') s->p++;
  else if (*s->p >= '1' && *s->p <= '9')
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
  else
    return -1;
  if (s->p < s->end && *s->p == '.') {
    s->p++;
    if (s->p >= s->end || *s->p < '0' || *s->p > '9') return -1;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
  }
  if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
    s->p++;
    if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
    if (s->p >= s->end || *s->p < '0' || *s->p > '9') return -1;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
  }
  if (v) {
    /* Only the usage counts are converted: a bounded copy, since the event is not
     * NUL-terminated where the number ends. */
    char tmp[64];
    size_t n = (size_t)(s->p - b);
    if (n >= sizeof tmp) return -1;
    memcpy(tmp, b, n);
    tmp[n] = 0;
    *v = strtod(tmp, NULL);
  }
  return 0;
}

/* k[0..n) is the literal `want` (its length known at compile time: no strlen per key). */
#define key_is(k, n, want) ((n) == sizeof(want) - 1 && !memcmp((k), (want), sizeof(want) - 1))

static int scan_value(scan *s, int role, int depth);

/* The role a member's value plays, from the object's role and the member's key. */
static int member_role(int role, const char *k, size_t n) {
  switch (role) {
  case R_ROOT:
    if (key_is(k, n, "choices")) return R_CHOICES;
    if (key_is(k, n, "usage")) return R_USAGE;
    return R_NONE;
  case R_CHOICE0: return key_is(k, n, "delta") ? R_DELTA : R_NONE;
  default: return R_NONE;
  }
}

static int scan_object(scan *s, int role, int depth) {
  weir_bench_sse_facts *f = s->f;
  s->p++; /* { */
  skip_ws(s);
  if (s->p < s->end && *s->p == '}') {
    s->p++;
    return 0;
  }
  for (;;) {
    const char *k;
    size_t kn;
    skip_ws(s);
    if (scan_string(s, &k, &kn)) return -1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return -1;
    s->p++;
    skip_ws(s);
    if (s->p >= s->end) return -1;
    /* The first occurrence of a key counts, as cJSON's lookup has it. */
    const char c = *s->p;
    if (role == R_ROOT && key_is(k, kn, "error") && !f->seen_error) {
      f->seen_error = 1;
      f->error = c != 'n'; /* anything but null */
    } else if (role == R_CHOICE0 && key_is(k, kn, "text") && !f->seen_text_key) {
      f->seen_text_key = 1;
      f->text_nonempty = 0;
      if (c == '"') {
        const char *v;
        size_t vn;
        if (scan_string(s, &v, &vn)) return -1;
        f->text_nonempty = vn > 0;
        goto next;
      }
    } else if (role == R_DELTA && key_is(k, kn, "content") && !f->seen_content) {
      f->seen_content = 1;
      if (c == '"') {
        const char *v;
        size_t vn;
        if (scan_string(s, &v, &vn)) return -1;
        f->content_nonempty = vn > 0;
        goto next;
      }
    } else if (role == R_USAGE) {
      int which = key_is(k, kn, "prompt_tokens") ? 1 : key_is(k, kn, "completion_tokens") ? 2 : 0;
      /* The first of each key counts, a number or not (then it reads as absent). */
      int first = (which == 1 && !f->seen_prompt) || (which == 2 && !f->seen_completion);
      if (which == 1) f->seen_prompt = 1;
      if (which == 2) f->seen_completion = 1;
      if (first && (c == '-' || (c >= '0' && c <= '9'))) {
        double v;
        if (scan_number(s, &v)) return -1;
        if (!(v > -9e18 && v < 9e18)) v = -1; /* not a count: reads as absent */
        if (which == 1) f->prompt_tokens = (int64_t)v;
        else f->completion_tokens = (int64_t)v;
        goto next;
      }
    }
    /* Only a container key's first occurrence plays its role, as with the scalar keys: a
     * repeated "delta" (or "choices", "usage") is read as cJSON's lookup would skip it. */
    int r = member_role(role, k, kn);
    if (r != R_NONE) {
      if (s->seen_roles & (1u << r)) r = R_NONE;
      else s->seen_roles |= 1u << r;
    }
    if (scan_value(s, r, depth + 1)) return -1;
  next:
    skip_ws(s);
    if (s->p >= s->end) return -1;
    if (*s->p == ',') {
      s->p++;
      continue;
    }
    if (*s->p == '}') {
      s->p++;
      return 0;
    }
    return -1;
  }
}

static int scan_array(scan *s, int role, int depth) {
  s->p++; /* [ */
  skip_ws(s);
  if (s->p < s->end && *s->p == ']') {
    s->p++;
    return 0;
  }
  for (int i = 0;; i++) {
    skip_ws(s);
    if (scan_value(s, role == R_CHOICES && i == 0 ? R_CHOICE0 : R_NONE, depth + 1)) return -1;
    skip_ws(s);
    if (s->p >= s->end) return -1;
    if (*s->p == ',') {
      s->p++;
      continue;
    }
    if (*s->p == ']') {
      s->p++;
      return 0;
    }
    return -1;
  }
}

static int scan_literal(scan *s, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n)) return -1;
  s->p += n;
  return 0;
}

static int scan_value(scan *s, int role, int depth) {
  if (depth > MAX_DEPTH) return -1;
  skip_ws(s);
  if (s->p >= s->end) return -1;
  const char *at;
  size_t n;
  switch (*s->p) {
  case '{':
    /* Only an object in a role's place has that role (a choice that is not an object has
     * no text, as with cJSON). */
    return scan_object(s, role == R_CHOICES ? R_NONE : role, depth);
  case '[': return scan_array(s, role, depth);
  case '"': return scan_string(s, &at, &n);
  case 't': return scan_literal(s, "true");
  case 'f': return scan_literal(s, "false");
  case 'n': return scan_literal(s, "null");
  default: return scan_number(s, NULL);
  }
}

int weir__bench_sse_scan(const char *data, size_t len, weir_bench_sse_facts *out) {
  memset(out, 0, sizeof *out);
  out->prompt_tokens = out->completion_tokens = -1;
  scan s = {data, data + len, out};
  skip_ws(&s);
  if (s.p >= s.end || *s.p != '{') return -1;
  if (scan_object(&s, R_ROOT, 1)) return -1;
  skip_ws(&s);
  if (s.p != s.end) return -1; /* one value, nothing after it */
  out->has_text = out->seen_text_key ? out->text_nonempty : out->content_nonempty;
  return 0;
}
