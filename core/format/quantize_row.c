/* Quantization from f32 into GGUF's half and block formats, written from the format
 * definitions (sdk/include/weir/tensor.h, numeric.h): Q8_0 stores d = max|x|/127 and
 * q = round(x/d); Q4_0 stores d = max/-8 where max is the value of largest magnitude (sign
 * kept) and q = clamp(round(x/d) + 8, 0, 15); Q4_1 stores d = (max-min)/15, m = min and
 * q = round((x-m)/d).
 *
 * The types of SDK 1.5 search instead of taking the range as it is, because at 2-5 bits the
 * range is a poor scale: one outlier would leave most values on a few levels.
 *   - A symmetric group (Q5_0, the Q3_K / Q6_K sub-blocks) tries scales that map the value of
 *     largest magnitude to a few levels near the end of the range, rounds, refits the scale by
 *     least squares for those levels, and keeps the scale with the smallest squared error.
 *   - An affine group (Q5_1, the Q2_K / Q4_K / Q5_K sub-blocks: x = s q + mn) tries ranges a
 *     little narrower and wider than [min, max], rounds, refits s and mn jointly by least
 *     squares, and keeps the best; K-quant mins are stored as -dmin * m with m >= 0, so there
 *     mn is kept <= 0.
 *   - IQ4 groups try scales that map the largest magnitude onto several codebook entries,
 *     take the nearest codebook entry for each value, refit, and keep the best.
 * A K-quant then quantizes its sub-block scales (and mins) against one f16 super-block scale,
 * and rounds every value again with the scale and min the file will really hold, so that the
 * stored integers are the best for the stored scales. The searches are sound but not
 * llama.cpp's (no importance weights, fewer candidates). */
#include "format/quantize_row.h"

#include <math.h>
#include <string.h>

#include "weir/status.h"

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* ---- Searches over one group of values ---- */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Symmetric: x ~ s * l with l in [-nmax, nmax - 1]. Writes l and returns s. */
static float fit_sym(const float *x, int n, int nmax, int *l) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(x[i]) > amax) {
      amax = fabsf(x[i]);
      max = x[i];
    }
  if (amax == 0) {
    for (int i = 0; i < n; i++) l[i] = 0;
    return 0;
  }
  float best_err = INFINITY, best_s = 0;
  int tmp[32];
  for (int step = -8; step <= 8; step++) {
    /* Map max onto -nmax (the end with one more level), a little inside or outside. */
    float iscale = -((float)nmax + 0.1f * (float)step) / max;
    double sxl = 0, sll = 0;
    for (int i = 0; i < n; i++) {
      tmp[i] = clampi((int)lrintf(iscale * x[i]), -nmax, nmax - 1);
      sxl += (double)x[i] * tmp[i];
      sll += (double)tmp[i] * tmp[i];
    }
    if (sll == 0) continue;
    float s = (float)(sxl / sll);
    double err = 0;
    for (int i = 0; i < n; i++) err += ((double)x[i] - s * tmp[i]) * ((double)x[i] - s * tmp[i]);
    if (err < best_err) {
      best_err = (float)err;
      best_s = s;
      memcpy(l, tmp, (size_t)n * sizeof *l);
    }
  }
  return best_s;
}

/* Affine: x ~ s * l + mn with l in [0, nmax]; mn <= 0 when nonpos_min. Writes l, *mn and
 * returns s (>= 0). */
static float fit_affine(const float *x, int n, int nmax, int nonpos_min, int *l, float *mn) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; i++) {
    lo = fminf(lo, x[i]);
    hi = fmaxf(hi, x[i]);
  }
  if (nonpos_min && lo > 0) lo = 0;
  if (hi <= lo) {
    for (int i = 0; i < n; i++) l[i] = 0;
    *mn = lo;
    return 0;
  }
  float best_err = INFINITY, best_s = (hi - lo) / (float)nmax, best_m = lo;
  for (int i = 0; i < n; i++) l[i] = clampi((int)lrintf((x[i] - lo) / best_s), 0, nmax);
  int tmp[32];
  for (int step = -6; step <= 8; step++) {
    float iscale = ((float)nmax + 0.1f * (float)step) / (hi - lo);
    double sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
      tmp[i] = clampi((int)lrintf(iscale * (x[i] - lo)), 0, nmax);
      sl += tmp[i];
      sll += (double)tmp[i] * tmp[i];
      sx += x[i];
      sxl += (double)x[i] * tmp[i];
    }
    /* Least squares for s and mn given the levels. */
    double det = n * sll - sl * sl, s, m;
    if (det <= 0) continue;
    s = (n * sxl - sl * sx) / det;
    m = (sll * sx - sl * sxl) / det;
    if (nonpos_min && m > 0) {
      m = 0;
      s = sll > 0 ? sxl / sll : 0;
    }
    if (s <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; i++) {
      double e = x[i] - (s * tmp[i] + m);
      err += e * e;
    }
    if (err < best_err) {
      best_err = (float)err;
      best_s = (float)s;
      best_m = (float)m;
      memcpy(l, tmp, (size_t)n * sizeof *l);
    }
  }
  *mn = best_m;
  return best_s;
}

/* The codebook entry nearest to v (codebook ascending). */
static int iq4_nearest(float v) {
  int best = 0;
  float bd = fabsf(v - (float)weir_iq4_kvalues[0]);
  for (int k = 1; k < 16; k++) {
    float dd = fabsf(v - (float)weir_iq4_kvalues[k]);
    if (dd < bd) {
      bd = dd;
      best = k;
    }
  }
  return best;
}

/* IQ4: x ~ s * kvalues[l]. Writes l and returns s. */
static float fit_iq4(const float *x, int n, int *l) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(x[i]) > amax) {
      amax = fabsf(x[i]);
      max = x[i];
    }
  if (amax == 0) {
    for (int i = 0; i < n; i++) l[i] = iq4_nearest(0);
    return 0;
  }
  float best_err = INFINITY, best_s = 0;
  int tmp[32];
  for (int step = -10; step <= 10; step++) {
    /* Candidates map max onto the far negative end (-127) or the positive end (113), each a
     * little inside or outside. */
    for (int end = 0; end < 2; end++) {
      float target = end ? 113.0f + 2.0f * (float)step : -127.0f + 2.0f * (float)step;
      float s0 = max / target;
      double sxk = 0, skk = 0;
      for (int i = 0; i < n; i++) {
        tmp[i] = iq4_nearest(x[i] / s0);
        sxk += (double)x[i] * weir_iq4_kvalues[tmp[i]];
        skk += (double)weir_iq4_kvalues[tmp[i]] * weir_iq4_kvalues[tmp[i]];
      }
      float s = (float)(sxk / skk);
      double err = 0;
      for (int i = 0; i < n; i++) {
        double e = x[i] - (double)s * weir_iq4_kvalues[tmp[i]];
        err += e * e;
      }
      if (err < best_err) {
        best_err = (float)err;
        best_s = s;
        memcpy(l, tmp, (size_t)n * sizeof *l);
      }
    }
  }
  return best_s;
}

/* Quantizes scale values v[n] (any sign when lo < 0) to integers in [lo, hi] against one f16
 * super-scale chosen so the largest magnitude lands on the end of the range. Writes q and
 * returns the f16 bits of the super-scale. */
static uint16_t quant_scales(const float *v, int n, int lo, int hi, int *q) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(v[i]) > amax) {
      amax = fabsf(v[i]);
      max = v[i];
    }
  float d = 0;
  if (amax > 0) d = lo < 0 && max < 0 ? max / (float)lo : amax / (float)hi;
  uint16_t dh = weir_f32_to_f16(d);
  float df = weir_f16_to_f32(dh);
  for (int i = 0; i < n; i++) q[i] = df > 0 ? clampi((int)lrintf(v[i] / df), lo, hi) : 0;
  return dh;
}

/* Levels for x given the stored scale and offset: l = clamp(round((x - mn) / s), lo, hi). */
static void relevel(const float *x, int n, float s, float mn, int lo, int hi, int *l) {
  float is = s != 0 ? 1.0f / s : 0;
  for (int i = 0; i < n; i++) l[i] = clampi((int)lrintf((x[i] - mn) * is), lo, hi);
}

static void relevel_iq4(const float *x, int n, float s, int *l) {
  for (int i = 0; i < n; i++) l[i] = iq4_nearest(s != 0 ? x[i] / s : 0);
}

/* Packs the 6-bit scales and mins of Q4_K / Q5_K into their 12 bytes (see weir_k4_scale_min). */
static void pack_k4_scales(const int *sc, const int *m, uint8_t *s) {
  memset(s, 0, 12);
  for (int j = 0; j < 8; j++) {
    if (j < 4) {
      s[j] |= (uint8_t)(sc[j] & 63);
      s[j + 4] |= (uint8_t)(m[j] & 63);
    } else {
      s[j + 4] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
      s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
      s[j] |= (uint8_t)((m[j] >> 4) << 6);
    }
  }
}

static void quant_q4_5_K(const float *x, uint8_t *o, int five) {
  int nmax = five ? 31 : 15, l[256], sc[8], m[8];
  float s[8], mn[8], negm[8];
  for (int j = 0; j < 8; j++) {
    s[j] = fit_affine(x + 32 * j, 32, nmax, 1, l + 32 * j, &mn[j]);
    negm[j] = -mn[j];
  }
  uint16_t dh = quant_scales(s, 8, 0, 63, sc), mh = quant_scales(negm, 8, 0, 63, m);
  float d = weir_f16_to_f32(dh), dmin = weir_f16_to_f32(mh);
  put16(o, dh);
  put16(o + 2, mh);
  pack_k4_scales(sc, m, o + 4);
  for (int j = 0; j < 8; j++)
    relevel(x + 32 * j, 32, d * (float)sc[j], -dmin * (float)m[j], 0, nmax, l + 32 * j);
  uint8_t *qh = o + 16, *qs = o + (five ? 48 : 16);
  if (five) memset(qh, 0, 32);
  memset(qs, 0, 128);
  for (int j = 0; j < 8; j++)
    for (int i = 0; i < 32; i++) {
      int q = l[32 * j + i];
      qs[32 * (j >> 1) + i] |= (uint8_t)((q & 15) << (4 * (j & 1)));
      if (five) qh[i] |= (uint8_t)((q >> 4) << j);
    }
}

static void quant_q2_K(const float *x, uint8_t *o) {
  int l[256], sc[16], m[16];
  float s[16], mn[16], negm[16];
  for (int j = 0; j < 16; j++) {
    s[j] = fit_affine(x + 16 * j, 16, 3, 1, l + 16 * j, &mn[j]);
    negm[j] = -mn[j];
  }
  uint16_t dh = quant_scales(s, 16, 0, 15, sc), mh = quant_scales(negm, 16, 0, 15, m);
  float d = weir_f16_to_f32(dh), dmin = weir_f16_to_f32(mh);
  for (int j = 0; j < 16; j++) {
    o[j] = (uint8_t)(sc[j] | m[j] << 4);
    relevel(x + 16 * j, 16, d * (float)sc[j], -dmin * (float)m[j], 0, 3, l + 16 * j);
  }
  uint8_t *qs = o + 16;
  memset(qs, 0, 64);
  for (int e = 0; e < 256; e++)
    qs[32 * (e >> 7) + (e & 31)] |= (uint8_t)(l[e] << (2 * ((e >> 5) & 3)));
  put16(o + 80, dh);
  put16(o + 82, mh);
}

static void quant_q3_K(const float *x, uint8_t *o) {
  int l[256], sc[16];
  float s[16];
  for (int j = 0; j < 16; j++) s[j] = fit_sym(x + 16 * j, 16, 4, l + 16 * j);
  uint16_t dh = quant_scales(s, 16, -32, 31, sc);
  float d = weir_f16_to_f32(dh);
  uint8_t *hm = o, *qs = o + 32, *scales = o + 96;
  memset(o, 0, 108);
  for (int j = 0; j < 16; j++) {
    relevel(x + 16 * j, 16, d * (float)sc[j], 0, -4, 3, l + 16 * j);
    int ls = sc[j] + 32;
    if (j < 8) scales[j] |= (uint8_t)(ls & 15);
    else scales[j - 8] |= (uint8_t)((ls & 15) << 4);
    scales[8 + (j & 3)] |= (uint8_t)((ls >> 4) << (2 * (j >> 2)));
  }
  for (int e = 0; e < 256; e++) {
    int q = l[e] + 4, h = e >> 7, j = (e >> 5) & 3, i = e & 31;
    qs[32 * h + i] |= (uint8_t)((q & 3) << (2 * j));
    if (q & 4) hm[i] |= (uint8_t)(1u << (4 * h + j));
  }
  put16(o + 108, dh);
}

static void quant_q6_K(const float *x, uint8_t *o) {
  int l[256], sc[16];
  float s[16];
  for (int j = 0; j < 16; j++) s[j] = fit_sym(x + 16 * j, 16, 32, l + 16 * j);
  uint16_t dh = quant_scales(s, 16, -128, 127, sc);
  float d = weir_f16_to_f32(dh);
  uint8_t *ql = o, *qh = o + 128;
  memset(o, 0, 192);
  for (int j = 0; j < 16; j++) {
    relevel(x + 16 * j, 16, d * (float)sc[j], 0, -32, 31, l + 16 * j);
    o[192 + j] = (uint8_t)(int8_t)sc[j];
  }
  for (int e = 0; e < 256; e++) {
    int q = l[e] + 32, h = e >> 7, j = (e >> 5) & 3, i = e & 31;
    ql[64 * h + 32 * (j & 1) + i] |= (uint8_t)((q & 15) << (4 * (j >> 1)));
    qh[32 * h + i] |= (uint8_t)((q >> 4) << (2 * j));
  }
  put16(o + 208, dh);
}

static void quant_iq4_xs(const float *x, uint8_t *o) {
  int l[256], sc[8];
  float s[8];
  for (int j = 0; j < 8; j++) s[j] = fit_iq4(x + 32 * j, 32, l + 32 * j);
  uint16_t dh = quant_scales(s, 8, -32, 31, sc);
  float d = weir_f16_to_f32(dh);
  uint16_t sh = 0;
  put16(o, dh);
  memset(o + 4, 0, 132);
  for (int j = 0; j < 8; j++) {
    relevel_iq4(x + 32 * j, 32, d * (float)sc[j], l + 32 * j);
    int ls = sc[j] + 32;
    o[4 + (j >> 1)] |= (uint8_t)((ls & 15) << (4 * (j & 1)));
    sh |= (uint16_t)((ls >> 4) << (2 * j));
    for (int i = 0; i < 16; i++)
      o[8 + 16 * j + i] = (uint8_t)(l[32 * j + i] | l[32 * j + 16 + i] << 4);
  }
  put16(o + 2, sh);
}

/* Q5_0 / Q5_1 / IQ4_NL: one f16 scale (and m) per 32, nibbles as Q4_0 (+ fifth bits). */
static void quant_q5(const float *x, uint8_t *o, int has_m) {
  int l[32];
  float mn = 0, s;
  if (has_m) s = fit_affine(x, 32, 31, 0, l, &mn);
  else s = fit_sym(x, 32, 16, l);
  uint16_t dh = weir_f32_to_f16(s), mh = weir_f32_to_f16(mn);
  float d = weir_f16_to_f32(dh), m = weir_f16_to_f32(mh);
  if (has_m) relevel(x, 32, d, m, 0, 31, l);
  else relevel(x, 32, d, 0, -16, 15, l);
  put16(o, dh);
  if (has_m) put16(o + 2, mh);
  uint8_t *qh = o + (has_m ? 4 : 2), *qs = qh + 4;
  uint32_t bits = 0;
  for (int i = 0; i < 32; i++) {
    int q = has_m ? l[i] : l[i] + 16;
    if (q & 16) bits |= 1u << i;
    l[i] = q & 15;
  }
  for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(bits >> (8 * i));
  for (int i = 0; i < 16; i++) qs[i] = (uint8_t)(l[i] | l[i + 16] << 4);
}

static void quant_iq4_nl(const float *x, uint8_t *o) {
  int l[32];
  uint16_t dh = weir_f32_to_f16(fit_iq4(x, 32, l));
  relevel_iq4(x, 32, weir_f16_to_f32(dh), l);
  put16(o, dh);
  for (int i = 0; i < 16; i++) o[2 + i] = (uint8_t)(l[i] | l[i + 16] << 4);
}

int weir_quantize_row(weir_dtype dtype, const float *src, void *dst, int64_t n) {
  uint8_t *o = dst;
  if (n < 0 || n % weir_dtype_block_elems(dtype) != 0) return WEIR_E_INVAL;
  switch (dtype) {
  case WEIR_DTYPE_F32:
    memcpy(dst, src, (size_t)n * 4);
    return 0;
  case WEIR_DTYPE_F16:
    for (int64_t i = 0; i < n; i++) put16(o + 2 * i, weir_f32_to_f16(src[i]));
    return 0;
  case WEIR_DTYPE_BF16:
    for (int64_t i = 0; i < n; i++) put16(o + 2 * i, weir_f32_to_bf16(src[i]));
    return 0;
  case WEIR_DTYPE_Q8_0:
    for (int64_t b = 0; b < n / 32; b++, src += 32, o += 34) {
      float amax = 0;
      for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(src[i]));
      float d = amax / 127.0f, id = d ? 1.0f / d : 0;
      put16(o, weir_f32_to_f16(d));
      for (int i = 0; i < 32; i++) o[2 + i] = (uint8_t)(int8_t)lrintf(src[i] * id);
    }
    return 0;
  case WEIR_DTYPE_Q4_0:
    for (int64_t b = 0; b < n / 32; b++, src += 32, o += 18) {
      float amax = 0, max = 0;
      for (int i = 0; i < 32; i++)
        if (fabsf(src[i]) > amax) {
          amax = fabsf(src[i]);
          max = src[i];
        }
      float d = max / -8.0f, id = d ? 1.0f / d : 0;
      put16(o, weir_f32_to_f16(d));
      for (int i = 0; i < 16; i++) {
        int q0 = (int)lrintf(src[i] * id) + 8, q1 = (int)lrintf(src[i + 16] * id) + 8;
        q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
        q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
        o[2 + i] = (uint8_t)(q0 | q1 << 4);
      }
    }
    return 0;
  case WEIR_DTYPE_Q4_1:
    for (int64_t b = 0; b < n / 32; b++, src += 32, o += 20) {
      float mn = src[0], mx = src[0];
      for (int i = 1; i < 32; i++) {
        mn = fminf(mn, src[i]);
        mx = fmaxf(mx, src[i]);
      }
      float d = (mx - mn) / 15.0f, id = d ? 1.0f / d : 0;
      put16(o, weir_f32_to_f16(d));
      put16(o + 2, weir_f32_to_f16(mn));
      for (int i = 0; i < 16; i++) {
        int q0 = (int)lrintf((src[i] - mn) * id), q1 = (int)lrintf((src[i + 16] - mn) * id);
        q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
        q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
        o[4 + i] = (uint8_t)(q0 | q1 << 4);
      }
    }
    return 0;
  case WEIR_DTYPE_Q5_0:
  case WEIR_DTYPE_Q5_1:
  case WEIR_DTYPE_IQ4_NL:
  case WEIR_DTYPE_Q2_K:
  case WEIR_DTYPE_Q3_K:
  case WEIR_DTYPE_Q4_K:
  case WEIR_DTYPE_Q5_K:
  case WEIR_DTYPE_Q6_K:
  case WEIR_DTYPE_IQ4_XS: {
    const int64_t be = weir_dtype_block_elems(dtype);
    const size_t bb = weir_dtype_block_bytes(dtype);
    for (int64_t b = 0; b < n / be; b++, src += be, o += bb) {
      for (int64_t i = 0; i < be; i++)
        if (!isfinite(src[i])) return WEIR_E_INVAL;
      switch (dtype) {
      case WEIR_DTYPE_Q5_0: quant_q5(src, o, 0); break;
      case WEIR_DTYPE_Q5_1: quant_q5(src, o, 1); break;
      case WEIR_DTYPE_IQ4_NL: quant_iq4_nl(src, o); break;
      case WEIR_DTYPE_Q2_K: quant_q2_K(src, o); break;
      case WEIR_DTYPE_Q3_K: quant_q3_K(src, o); break;
      case WEIR_DTYPE_Q4_K: quant_q4_5_K(src, o, 0); break;
      case WEIR_DTYPE_Q5_K: quant_q4_5_K(src, o, 1); break;
      case WEIR_DTYPE_Q6_K: quant_q6_K(src, o); break;
      default: quant_iq4_xs(src, o); break;
      }
      /* A scale beyond f16's range (values near 1e5 and up) would be written as infinity,
       * which the reader refuses: say so here instead. */
      if (weir_quant_scales_finite(dtype, o, 1) >= 0) return WEIR_E_INVAL;
    }
    return 0;
  }
  default:
    return WEIR_E_NOTSUP;
  }
}
