/* Seeded random data for the kernel and plugin tests, and an f16 codec written from the
 * format's definition (independent of the kernels under test). Header-only: every test
 * binary has its own generator state.
 *
 * The seed comes from the time and pid, or from WT_SEED; tests print it with a failure so
 * that a failing case can be replayed with WT_SEED=<seed>. Not thread-safe. */
#ifndef WEIR_TESTS_WT_RAND_H
#define WEIR_TESTS_WT_RAND_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weir/tensor.h"

static uint64_t wt_seed, wt_rng_state;

/* Seeds the generator from WT_SEED when set, else from the time and pid. */
static inline void wt_rand_init(void) {
  wt_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  if (getenv("WT_SEED")) wt_seed = strtoull(getenv("WT_SEED"), NULL, 10);
  wt_rng_state = wt_seed * 0x9e3779b97f4a7c15ull | 1;
}

/* xorshift64 */
static inline uint64_t wt_rnd(void) {
  wt_rng_state ^= wt_rng_state << 13;
  wt_rng_state ^= wt_rng_state >> 7;
  wt_rng_state ^= wt_rng_state << 17;
  return wt_rng_state;
}
/* Uniform in [0, 1) and in [lo, hi). */
static inline double wt_urand(void) { return (double)(wt_rnd() >> 11) * 0x1.0p-53; }
static inline float wt_frand(float lo, float hi) { return (float)(lo + (hi - lo) * wt_urand()); }

static inline double wt_f16_decode(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1024.0 + m, e - 25);
  return s ? -v : v;
}

/* Round to nearest even; past the largest finite value, infinity. */
static inline uint16_t wt_f16_encode(double f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs(f);
  if (isnan(f)) return 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;
  if (a == 0) return sign;
  int ex;
  frexp(a, &ex); /* a = m 2^ex, m in [0.5, 1) */
  int e = ex - 1;
  double quantum = e < -14 ? ldexp(1, -24) : ldexp(1, e - 10);
  double r = nearbyint(a / quantum);
  if (e < -14) return (uint16_t)(sign | (uint16_t)r);
  return (uint16_t)(sign | (uint16_t)(((e + 15) << 10) + (int)r - 1024));
}

static inline double wt_round_f16(double x) { return wt_f16_decode(wt_f16_encode(x)); }

/* An f16 of magnitude in [lo, hi) and random sign. */
static inline uint16_t wt_f16_random(double lo, double hi) {
  return wt_f16_encode((lo + (hi - lo) * wt_urand()) * (wt_rnd() & 1 ? -1 : 1));
}

/* Random GGUF source data of type t (F32, F16, BF16, Q8_0, Q4_0 or Q4_1; cols a multiple of
 * 32 for the block types), [rows][cols], malloc'd (the caller frees); ref [rows][cols] gets
 * every element's exact value. Rows differ in magnitude and offset and carry the odd 8x
 * outlier, as trained weights do. */
static inline void *wt_quant_source(weir_dtype t, int64_t rows, int64_t cols, double *ref) {
  size_t rb = weir_dtype_row_bytes(t, cols);
  uint8_t *d = malloc(rb * (size_t)rows + 1);
  if (!d) return NULL;
  for (int64_t r = 0; r < rows; r++) {
    uint8_t *p = d + r * rb;
    double *rr = ref + r * cols;
    float mag = wt_frand(0.01f, 1.0f), off = wt_frand(-0.3f, 0.3f) * mag;
    if (t == WEIR_DTYPE_F32 || t == WEIR_DTYPE_F16 || t == WEIR_DTYPE_BF16) {
      for (int64_t k = 0; k < cols; k++) {
        float f = off + wt_frand(-mag, mag) * ((wt_rnd() & 63) == 0 ? 8.0f : 1.0f);
        if (t == WEIR_DTYPE_F32) {
          memcpy(p + k * 4, &f, 4);
          rr[k] = f;
        } else if (t == WEIR_DTYPE_F16) {
          uint16_t hh = wt_f16_encode(f);
          memcpy(p + k * 2, &hh, 2);
          rr[k] = wt_f16_decode(hh);
        } else {
          uint32_t bits;
          memcpy(&bits, &f, 4);
          uint16_t hh = (uint16_t)(bits >> 16);
          memcpy(p + k * 2, &hh, 2);
          uint32_t back = (uint32_t)hh << 16;
          float fb;
          memcpy(&fb, &back, 4);
          rr[k] = fb;
        }
      }
      continue;
    }
    size_t bb = weir_dtype_block_bytes(t);
    for (int64_t b = 0; b < cols / 32; b++) {
      uint8_t *q = p + b * bb;
      for (size_t i = 0; i < bb; i++) q[i] = (uint8_t)wt_rnd();
      uint16_t dd = wt_f16_random(0.001 * mag, 0.05 * mag), mm = wt_f16_random(0, 0.5 * mag);
      memcpy(q, &dd, 2);
      double dv = wt_f16_decode(dd), mv = wt_f16_decode(mm);
      double *o = rr + b * 32;
      if (t == WEIR_DTYPE_Q8_0) {
        for (int i = 0; i < 32; i++) o[i] = (int8_t)q[2 + i] * dv;
      } else if (t == WEIR_DTYPE_Q4_0) {
        for (int i = 0; i < 16; i++) {
          o[i] = ((q[2 + i] & 15) - 8) * dv;
          o[i + 16] = ((q[2 + i] >> 4) - 8) * dv;
        }
      } else {
        memcpy(q + 2, &mm, 2);
        for (int i = 0; i < 16; i++) {
          o[i] = (q[4 + i] & 15) * dv + mv;
          o[i + 16] = (q[4 + i] >> 4) * dv + mv;
        }
      }
    }
  }
  return d;
}

#endif
