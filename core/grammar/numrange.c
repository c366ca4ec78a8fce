/* JSON numbers within bounds, as regular expressions over decimal digits.
 *
 * A bound is a double (the JSON Schema value as every JSON parser reads it). Outputs are
 * integers ("-"? digits) and, for type number, decimals with a fraction ("-"? digits "."
 * digits); never exponents, so the comparison is a comparison of digit strings:
 *
 *  - An integer output is read back as an integer by Python and compared with the bound
 *    exactly, so integer ranges use the bound's exact value (ceil of the lower bound, floor of
 *    the upper; an exclusive bound that is an integer moves by one). An integral bound beyond
 *    2^53 moves one double inwards first (see inward()).
 *  - A decimal output is read back as a double; rounding is monotonic, so d >= s where s is
 *    the shortest decimal that reads back as the bound gives double(d) >= bound. Exclusive
 *    bounds use the next double towards the inside.
 *
 * Digit-string languages: for integers of one length the classic split on the first digit
 * where the bounds differ; for fractions the languages {d : 0.d >= 0.g}, {d : 0.d <= 0.h}
 * and their intersection, built digit by digit. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/numrange.h"
#include "weir/status.h"

#define MAXD 420 /* digits of any double, integer part or shortest fraction */

/* A nonnegative decimal: integer digits without leading zeros ("0" for zero), fraction
 * digits without trailing zeros. */
typedef struct dec {
  char ip[MAXD];
  char fp[MAXD];
} dec;

/* Splits printf's %e output ("d.ddde[+-]XX") or plain output into a dec of |x|. */
static void dec_from_text(const char *t, dec *out) {
  char digits[2 * MAXD];
  size_t nd = 0;
  long point = -1, exp10 = 0;
  if (*t == '-') t++;
  for (; *t && *t != 'e' && *t != 'E'; t++) {
    if (*t == '.') point = (long)nd;
    else if (nd < sizeof digits - 1) digits[nd++] = *t;
  }
  if (*t == 'e' || *t == 'E') exp10 = strtol(t + 1, NULL, 10);
  if (point < 0) point = (long)nd;
  point += exp10; /* digits[0..point) is the integer part */
  size_t i = 0, f = 0;
  for (long k = 0; k < point; k++) {
    const char c = k < (long)nd ? digits[k] : '0';
    if (i == 0 && c == '0') continue;
    if (i < MAXD - 1) out->ip[i++] = c;
  }
  if (i == 0) out->ip[i++] = '0';
  out->ip[i] = 0;
  for (long k = point; k < (long)nd; k++) {
    const char c = k < 0 ? '0' : digits[k];
    if (f < MAXD - 1) out->fp[f++] = c;
  }
  while (f > 0 && out->fp[f - 1] == '0') f--;
  out->fp[f] = 0;
}

/* The shortest decimal that reads back as x (|x|). */
static void dec_shortest(double x, dec *out) {
  char buf[64];
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, sizeof buf, "%.*e", p - 1, x);
    if (strtod(buf, NULL) == x) break;
  }
  dec_from_text(buf, out);
}

/* The exact integer x (already integral), |x|. glibc prints doubles exactly. */
static void dec_exact_int(double x, dec *out) {
  char buf[MAXD + 8];
  snprintf(buf, sizeof buf, "%.0f", fabs(x));
  dec_from_text(buf, out);
}

static int cmp_int(const char *a, const char *b) {
  const size_t la = strlen(a), lb = strlen(b);
  if (la != lb) return la < lb ? -1 : 1;
  return strcmp(a, b);
}

/* s += 1 / s -= 1 on a nonnegative integer string (s > 0 for the decrement). */
static void int_inc(char *s) {
  size_t n = strlen(s);
  for (size_t k = n; k-- > 0;) {
    if (s[k] != '9') {
      s[k]++;
      return;
    }
    s[k] = '0';
  }
  if (n + 1 < MAXD) {
    memmove(s + 1, s, n + 1);
    s[0] = '1';
  }
}

static void int_dec(char *s) {
  size_t n = strlen(s);
  for (size_t k = n; k-- > 0;) {
    if (s[k] != '0') {
      s[k]--;
      break;
    }
    s[k] = '9';
  }
  if (n > 1 && s[0] == '0') memmove(s, s + 1, n);
}

/* ---- digit strings ----------------------------------------------------------------------- */

static uint32_t digit(weir__gb *b, int lo, int hi) {
  if (lo > hi) return weir__rx_none();
  return weir__rx_range(b, (uint8_t)('0' + lo), (uint8_t)('0' + hi));
}

static uint32_t any_digits(weir__gb *b, uint32_t n) {
  return weir__rx_repeat(b, digit(b, 0, 9), n, n);
}

/* Strings of length strlen(s) that are >= s (resp. <= s). */
static uint32_t fixed_ge(weir__gb *b, const char *s) {
  const size_t n = strlen(s);
  if (n == 0) return weir__rx_empty();
  const int d = s[0] - '0';
  return weir__rx_alt2(b, weir__rx_seq2(b, digit(b, d, d), fixed_ge(b, s + 1)),
                       weir__rx_seq2(b, digit(b, d + 1, 9), any_digits(b, (uint32_t)n - 1)));
}

static uint32_t fixed_le(weir__gb *b, const char *s) {
  const size_t n = strlen(s);
  if (n == 0) return weir__rx_empty();
  const int d = s[0] - '0';
  return weir__rx_alt2(b, weir__rx_seq2(b, digit(b, d, d), fixed_le(b, s + 1)),
                       weir__rx_seq2(b, digit(b, 0, d - 1), any_digits(b, (uint32_t)n - 1)));
}

/* Same-length strings in [a, b]. */
static uint32_t fixed_range(weir__gb *b, const char *a, const char *z) {
  if (!*a) return weir__rx_empty();
  const int x = a[0] - '0', y = z[0] - '0';
  if (x == y) return weir__rx_seq2(b, digit(b, x, x), fixed_range(b, a + 1, z + 1));
  const uint32_t n = (uint32_t)strlen(a) - 1;
  const uint32_t alts[3] = {weir__rx_seq2(b, digit(b, x, x), fixed_ge(b, a + 1)),
                            weir__rx_seq2(b, digit(b, x + 1, y - 1), any_digits(b, n)),
                            weir__rx_seq2(b, digit(b, y, y), fixed_le(b, z + 1))};
  return weir__rx_alt(b, alts, 3);
}

/* Canonical nonnegative integers in [lo, hi]; hi NULL for no upper bound. */
static uint32_t int_range(weir__gb *b, const char *lo, const char *hi) {
  if (hi && cmp_int(lo, hi) > 0) return weir__rx_none();
  const size_t llo = strlen(lo), lhi = hi ? strlen(hi) : 0;
  uint32_t acc = weir__rx_none();
  char a[MAXD], z[MAXD];
  const size_t last = hi ? lhi : llo;
  for (size_t L = llo; L <= last; L++) {
    /* [max(lo, smallest of length L), min(hi, largest of length L)] */
    if (L == llo) snprintf(a, sizeof a, "%s", lo);
    else {
      memset(a, '0', L);
      a[0] = '1';
      a[L] = 0;
    }
    if (hi && L == lhi) snprintf(z, sizeof z, "%s", hi);
    else {
      memset(z, '9', L);
      z[L] = 0;
    }
    acc = weir__rx_alt2(b, acc, fixed_range(b, a, z));
  }
  if (!hi) /* every longer integer */
    acc = weir__rx_alt2(b, acc, weir__rx_seq2(b, digit(b, 1, 9),
                                              weir__rx_repeat(b, digit(b, 0, 9), (uint32_t)llo,
                                                              WEIR__RX_INF)));
  return acc;
}

/* Compares 0.a and 0.b (digit strings). */
static int frac_cmp(const char *a, const char *b) {
  for (;; a += *a != 0, b += *b != 0) {
    const char x = *a ? *a : '0', y = *b ? *b : '0';
    if (x != y) return x < y ? -1 : 1;
    if (!*a && !*b) return 0;
  }
}

/* Nonempty digit strings d with 0.d >= 0.g (g without trailing zeros). */
static uint32_t frac_ge(weir__gb *b, const char *g) {
  const uint32_t star = weir__rx_star(b, digit(b, 0, 9));
  if (!*g) return weir__rx_seq2(b, digit(b, 0, 9), star);
  const int d = g[0] - '0';
  const uint32_t rest = g[1] ? frac_ge(b, g + 1) : star;
  return weir__rx_alt2(b, weir__rx_seq2(b, digit(b, d + 1, 9), star),
                       weir__rx_seq2(b, digit(b, d, d), rest));
}

/* Nonempty digit strings d with 0.d <= 0.h. */
static uint32_t frac_le(weir__gb *b, const char *h) {
  if (!*h) return weir__rx_repeat(b, digit(b, 0, 0), 1, WEIR__RX_INF);
  const int d = h[0] - '0';
  const uint32_t star = weir__rx_star(b, digit(b, 0, 9));
  return weir__rx_alt2(b, weir__rx_seq2(b, digit(b, 0, d - 1), star),
                       weir__rx_seq2(b, digit(b, d, d), weir__rx_opt(b, frac_le(b, h + 1))));
}

/* Nonempty digit strings d with 0.g <= 0.d <= 0.h (0.g <= 0.h). */
static uint32_t frac_between(weir__gb *b, const char *g, const char *h) {
  if (!*g) return frac_le(b, h);
  const int x = g[0] - '0', y = h[0] - '0'; /* h nonempty since 0.h >= 0.g > 0 */
  if (x == y) {
    const uint32_t rest = g[1] ? frac_between(b, g + 1, h + 1) : weir__rx_opt(b, frac_le(b, h + 1));
    return weir__rx_seq2(b, digit(b, x, x), rest);
  }
  const uint32_t star = weir__rx_star(b, digit(b, 0, 9));
  const uint32_t alts[3] = {
      weir__rx_seq2(b, digit(b, x + 1, y - 1), star),
      weir__rx_seq2(b, digit(b, x, x), g[1] ? frac_ge(b, g + 1) : star),
      weir__rx_seq2(b, digit(b, y, y), weir__rx_opt(b, frac_le(b, h + 1)))};
  return weir__rx_alt(b, alts, 3);
}

/* "I.F" with lo <= I.F <= hi, lo and hi nonnegative (hi NULL: unbounded). */
static uint32_t dec_range(weir__gb *b, const dec *lo, const dec *hi) {
  const uint32_t dot = weir__rx_byte(b, '.');
  const uint32_t any_frac = weir__rx_repeat(b, digit(b, 0, 9), 1, WEIR__RX_INF);
  char a1[MAXD], b1[MAXD];
  if (hi) {
    const int c = cmp_int(lo->ip, hi->ip);
    if (c > 0) return weir__rx_none();
    if (c == 0) {
      if (frac_cmp(lo->fp, hi->fp) > 0) return weir__rx_none();
      return weir__rx_seq3(b, weir__rx_str(b, lo->ip), dot, frac_between(b, lo->fp, hi->fp));
    }
  }
  uint32_t alts[3], n = 0;
  alts[n++] = weir__rx_seq3(b, weir__rx_str(b, lo->ip), dot, frac_ge(b, lo->fp));
  snprintf(a1, sizeof a1, "%s", lo->ip);
  int_inc(a1);
  if (hi) {
    snprintf(b1, sizeof b1, "%s", hi->ip);
    if (strcmp(b1, "0")) {
      int_dec(b1);
      alts[n++] = weir__rx_seq3(b, int_range(b, a1, b1), dot, any_frac);
    }
    alts[n++] = weir__rx_seq3(b, weir__rx_str(b, hi->ip), dot, frac_le(b, hi->fp));
  } else {
    alts[n++] = weir__rx_seq3(b, int_range(b, a1, NULL), dot, any_frac);
  }
  return weir__rx_alt(b, alts, n);
}

/* ---- the public builders ------------------------------------------------------------------ */

void weir__bound_init(weir__bound *bd) { memset(bd, 0, sizeof *bd); }

/* Integers in [lo, hi] given as exact integer decimals with signs. */
static uint32_t signed_int_range(weir__gb *b, int has_lo, int lo_neg, const char *lo, int has_hi,
                                 int hi_neg, const char *hi) {
  uint32_t pos = weir__rx_none(), neg = weir__rx_none();
  /* nonnegative part: [max(lo, 0), hi] */
  if (!(has_hi && hi_neg)) {
    const char *from = has_lo && !lo_neg ? lo : "0";
    pos = int_range(b, from, has_hi ? hi : NULL);
  }
  /* negative part: magnitudes [max(1, -hi), -lo] */
  if (!(has_lo && !lo_neg)) {
    char from[MAXD];
    snprintf(from, sizeof from, "%s", has_hi && hi_neg ? hi : "1");
    if (!strcmp(from, "0")) snprintf(from, sizeof from, "1");
    neg = weir__rx_seq2(b, weir__rx_byte(b, '-'), int_range(b, from, has_lo ? lo : NULL));
  }
  return weir__rx_alt2(b, pos, neg);
}

/* A JSON parser that keeps integers exact (Python's) reads a bound written as a long integer
 * as that integer, while the schema reached us as the nearest double: beyond 2^53 the two can
 * differ by half an ulp either way. Moving such a bound one double inwards keeps every output
 * within the bound whatever the written digits were. */
static weir__bound inward(const weir__bound *bd, int lower) {
  weir__bound r = *bd;
  if (bd->set && fabs(bd->value) >= 9007199254740992.0 && bd->value == floor(bd->value))
    r.value = nextafter(bd->value, lower ? INFINITY : -INFINITY);
  return r;
}

uint32_t weir__number_range(weir__gb *b, const weir__bound *lo_in, const weir__bound *hi_in,
                            int integer) {
  const weir__bound lo_b = inward(lo_in, 1), hi_b = inward(hi_in, 0);
  const weir__bound *lo = &lo_b, *hi = &hi_b;
  /* Integer outputs: exact bounds. */
  dec ilo, ihi;
  int has_lo = lo->set, has_hi = hi->set, lo_neg = 0, hi_neg = 0;
  if (has_lo) {
    double c = ceil(lo->value);
    dec_exact_int(c, &ilo);
    lo_neg = c < 0;
    if (lo->exclusive && c == lo->value) {
      /* next integer up: towards +inf */
      if (lo_neg) {
        int_dec(ilo.ip);
        if (!strcmp(ilo.ip, "0")) lo_neg = 0;
      } else {
        int_inc(ilo.ip);
      }
    }
  }
  if (has_hi) {
    double f = floor(hi->value);
    dec_exact_int(f, &ihi);
    hi_neg = f < 0;
    if (hi->exclusive && f == hi->value) {
      if (hi_neg || !strcmp(ihi.ip, "0")) {
        if (!hi_neg) hi_neg = 1, snprintf(ihi.ip, sizeof ihi.ip, "1");
        else int_inc(ihi.ip);
      } else {
        int_dec(ihi.ip);
      }
    }
  }
  if (has_lo && !strcmp(ilo.ip, "0")) lo_neg = 0;
  if (has_hi && !strcmp(ihi.ip, "0")) hi_neg = 0;
  const uint32_t ints = signed_int_range(b, has_lo, lo_neg, ilo.ip, has_hi, hi_neg, ihi.ip);
  if (integer) return ints;

  /* Decimal outputs: shortest decimals of the bounds moved inside for exclusive ones. */
  double l = lo->value, h = hi->value;
  if (has_lo && lo->exclusive) l = nextafter(l, INFINITY);
  if (has_hi && hi->exclusive) h = nextafter(h, -INFINITY);
  if (has_lo && has_hi && l > h) return ints;
  dec dl, dh;
  uint32_t pos = weir__rx_none(), neg = weir__rx_none();
  if (has_lo) dec_shortest(l, &dl);
  if (has_hi) dec_shortest(h, &dh);
  dec zero;
  snprintf(zero.ip, sizeof zero.ip, "0");
  zero.fp[0] = 0;
  /* Nonnegative decimals in [max(l, 0), h]. */
  if (!(has_hi && h < 0)) pos = dec_range(b, has_lo && l > 0 ? &dl : &zero, has_hi ? &dh : NULL);
  /* Negative decimals: magnitudes in [max(-h, 0), -l]. */
  if (!(has_lo && l >= 0))
    neg = weir__rx_seq2(b, weir__rx_byte(b, '-'),
                        dec_range(b, has_hi && h < 0 ? &dh : &zero, has_lo ? &dl : NULL));
  return weir__rx_alt2(b, ints, weir__rx_alt2(b, pos, neg));
}
