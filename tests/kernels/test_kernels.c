/* The CPU kernels against plain double-precision references written here, on fresh random
 * inputs, for every SIMD level this machine runs (scalar, AVX2, AVX-512), with sizes that
 * are not multiples of the vector widths. The seed is printed with every failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "add.h"
#include "argmax.h"
#include "sample_weights.h"
#include "convert.h"
#include "cpu_isa.h"
#include "dequant.h"
#include "families.h"
#include "get_rows.h"
#include "matmul.h"
#include "rms_norm.h"
#include "rope.h"
#include "softmax.h"
#include "swiglu.h"
#include "testutil.h"
#include "vec_exp.h"
#include "wt_rand.h"
#include "wt_pool.h"


static void fill(float *x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; i++) x[i] = wt_frand(lo, hi);
}

/* Reports a mismatch with the seed and the ISA, once per check. */
#define CHECK_CLOSE(got, want, tol, what)                                                    \
  do {                                                                                       \
    double g_ = (got), w_ = (want), t_ = (tol);                                              \
    int ok_ = fabs(g_ - w_) <= t_ || (isnan(g_) && isnan(w_)) || (g_ == w_);                 \
    if (!ok_)                                                                                \
      fprintf(stderr, "\n  %s:%d [%s isa=%s seed=%llu] got %.9g want %.9g (tol %.3g)\n",      \
              __FILE__, __LINE__, what, weir_cpu_isa_name(weir_cpu_isa()),                   \
              (unsigned long long)wt_seed, g_, w_, t_);                                       \
    CU_ASSERT(ok_);                                                                          \
    if (!ok_) goto fail;                                                                     \
  } while (0)

/* Runs body once for every ISA level the CPU supports. */
#define FOR_EACH_ISA(lvl)                                                                    \
  for (int lvl = 0; lvl < WEIR_CPU_ISA_COUNT_; lvl++)                                        \
    if (weir_cpu_isa_set((weir_cpu_isa_level)lvl) == 0)

/* ---- references ---------------------------------------------------------------------- */

static double ref_bf16_decode(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static uint16_t ref_bf16_encode(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  uint16_t t = (uint16_t)(b >> 16);
  double a = fabs((double)f);
  double lo = fabs(ref_bf16_decode(t)), hi = fabs(ref_bf16_decode((uint16_t)(t + 1)));
  if (hi - a < a - lo || (hi - a == a - lo && ((t + 1) & 1) == 0)) return (uint16_t)(t + 1);
  return t;
}

/* ---- conversions --------------------------------------------------------------------- */

static float special_or_random(int i) {
  static const float sp[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65519.0f, 65520.0f, 1e9f,
                             6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.98023259e-08f,
                             3e-8f, 1e-10f, INFINITY, -INFINITY, 0.333333f, 1.00048828125f};
  if (i < (int)(sizeof sp / sizeof sp[0])) return sp[i];
  /* log-uniform magnitudes from 2^-30 to 2^17: subnormals, normals and overflow */
  float m = (float)ldexp(1.0 + wt_urand(), (int)(wt_rnd() % 48) - 30);
  return (wt_rnd() & 1) ? -m : m;
}

static void test_f16_convert(void) {
  enum { N = 4099 };
  float *src = malloc(N * 4), *back = malloc(N * 4);
  uint16_t *h = malloc(N * 2);
  for (int i = 0; i < N; i++) src[i] = special_or_random(i);
  FOR_EACH_ISA(lvl) {
    static const int lens[] = {1, 7, 8, 15, 17, 33, N};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
      int n = lens[li];
      int off = (int)(wt_rnd() % 3); /* unaligned starts */
      if (off + n > N) off = 0;
      weir_f32_to_f16_row(src + off, h, n);
      for (int i = 0; i < n; i++) CHECK_CLOSE(h[i], wt_f16_encode(src[off + i]), 0, "f32->f16");
      weir_f16_to_f32_row(h, back, n);
      for (int i = 0; i < n; i++) CHECK_CLOSE(back[i], wt_f16_decode(h[i]), 0, "f16->f32");
    }
    /* every f16 code decodes exactly */
    for (int c = 0; c < 65536; c += 1024) {
      uint16_t codes[1024];
      float out[1024];
      for (int i = 0; i < 1024; i++) codes[i] = (uint16_t)(c + i);
      weir_f16_to_f32_row(codes, out, 1024);
      for (int i = 0; i < 1024; i++) CHECK_CLOSE(out[i], wt_f16_decode(codes[i]), 0, "f16 code");
    }
  }
  {
    uint16_t nanh = weir_f32_to_f16(NAN);
    CU_ASSERT((nanh & 0x7c00) == 0x7c00 && (nanh & 0x3ff) != 0);
  }
fail:
  free(src);
  free(back);
  free(h);
}

static void test_bf16_convert(void) {
  enum { N = 1001 };
  float src[N], back[N];
  uint16_t h[N];
  for (int i = 0; i < N; i++) src[i] = wt_frand(-1000, 1000) * (float)ldexp(1.0, (int)(wt_rnd() % 40) - 20);
  src[0] = 0.0f;
  src[1] = -0.0f;
  src[2] = INFINITY;
  FOR_EACH_ISA(lvl) {
    weir_f32_to_bf16_row(src, h, N);
    for (int i = 0; i < N; i++) CHECK_CLOSE(h[i], ref_bf16_encode(src[i]), 0, "f32->bf16");
    weir_bf16_to_f32_row(h, back, N);
    for (int i = 0; i < N; i++) CHECK_CLOSE(back[i], ref_bf16_decode(h[i]), 0, "bf16->f32");
  }
  CU_ASSERT(isnan(weir_bf16_to_f32(weir_f32_to_bf16(NAN))));
fail:;
}

/* ---- dequantization ------------------------------------------------------------------ */

/* Random blocks with finite, moderate scales; returns the reference values in ref. */
static void make_blocks(weir_dtype t, uint8_t *dst, double *ref, int64_t n) {
  size_t bb = weir_dtype_block_bytes(t);
  for (int64_t b = 0; b < n / 32; b++) {
    uint8_t *p = dst + b * bb;
    for (size_t i = 0; i < bb; i++) p[i] = (uint8_t)wt_rnd();
    uint16_t d = wt_f16_encode(wt_frand(-0.1f, 0.1f)), m = wt_f16_encode(wt_frand(-1, 1));
    p[0] = (uint8_t)d;
    p[1] = (uint8_t)(d >> 8);
    double dd = wt_f16_decode(d), mm = wt_f16_decode(m);
    double *r = ref + b * 32;
    if (t == WEIR_DTYPE_Q8_0) {
      for (int i = 0; i < 32; i++) r[i] = (double)(int8_t)p[2 + i] * dd;
    } else if (t == WEIR_DTYPE_Q4_0) {
      for (int i = 0; i < 16; i++) {
        r[i] = ((p[2 + i] & 15) - 8) * dd;
        r[i + 16] = ((p[2 + i] >> 4) - 8) * dd;
      }
    } else {
      p[2] = (uint8_t)m;
      p[3] = (uint8_t)(m >> 8);
      for (int i = 0; i < 16; i++) {
        r[i] = (p[4 + i] & 15) * dd + mm;
        r[i + 16] = (p[4 + i] >> 4) * dd + mm;
      }
    }
  }
}

static void test_dequant(void) {
  static const weir_dtype types[] = {WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1};
  enum { N = 32 * 37 };
  uint8_t src[N * 2];
  double ref[N];
  float out[N];
  uint16_t out16[N];
  FOR_EACH_ISA(lvl) {
    for (int ti = 0; ti < 3; ti++) {
      make_blocks(types[ti], src, ref, N);
      CU_ASSERT_EQUAL(weir_dequant_row_f32(types[ti], src, out, N), 0);
      for (int i = 0; i < N; i++) CHECK_CLOSE(out[i], ref[i], 1e-6 * fabs(ref[i]) + 1e-7, "dequant f32");
      CU_ASSERT_EQUAL(weir_dequant_row_f16(types[ti], src, out16, N), 0);
      for (int i = 0; i < N; i++) {
        uint16_t want = wt_f16_encode(ref[i]);
        /* f32 then f16 may round twice: allow one f16 step */
        CHECK_CLOSE(wt_f16_decode(out16[i]), wt_f16_decode(want),
                    fabs(wt_f16_decode(want)) * 0x1.0p-10 + 1e-7, "dequant f16");
      }
      CU_ASSERT_EQUAL(weir_dequant_row_f32(types[ti], src, out, 33), -1); /* not a block multiple */
    }
    CU_ASSERT_EQUAL(weir_dequant_row_f32(WEIR_DTYPE_I32, src, out, 32), -1);
  }
fail:;
}

/* ---- matmul --------------------------------------------------------------------------- */

static void check_matmul(int64_t rows, int64_t cols, int64_t nt, int f16, wt_pool *pool) {
  float *w32 = malloc((size_t)(rows * cols) * 4), *x = malloc((size_t)(nt * cols) * 4);
  float *y = malloc((size_t)(nt * rows) * 4);
  uint16_t *w16 = malloc((size_t)(rows * cols) * 2);
  fill(w32, rows * cols, -1, 1);
  fill(x, nt * cols, -1, 1);
  for (int64_t i = 0; i < rows * cols; i++) w16[i] = wt_f16_encode(w32[i]);
  for (int64_t i = 0; i < nt * rows; i++) y[i] = NAN;
  weir_matmul_args a = {.w = f16 ? (void *)w16 : (void *)w32,
                        .w_dtype = f16 ? WEIR_DTYPE_F16 : WEIR_DTYPE_F32,
                        .rows = rows, .cols = cols, .x = x, .y = y, .n_tokens = nt};
  if (pool) wt_pool_parallel_for(pool, rows, 5, weir_matmul_chunk, &a);
  else weir_matmul_rows(&a, 0, rows);
  char what[96];
  snprintf(what, sizeof what, "matmul %s %lldx%lld t=%lld%s", f16 ? "f16" : "f32",
           (long long)rows, (long long)cols, (long long)nt, pool ? " threaded" : "");
  for (int64_t t = 0; t < nt; t++)
    for (int64_t r = 0; r < rows; r++) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < cols; k++) {
        double wv = f16 ? wt_f16_decode(w16[r * cols + k]) : w32[r * cols + k];
        s += wv * x[t * cols + k];
        mag += fabs(wv * x[t * cols + k]);
      }
      CHECK_CLOSE(y[t * rows + r], s, 2e-6 * mag + 1e-6, what);
    }
fail:
  free(w32);
  free(x);
  free(y);
  free(w16);
}

static void test_matmul(void) {
  static const int64_t shapes[][3] = {{1, 1, 1},    {3, 5, 1},    {4, 16, 1},  {7, 33, 2},
                                      {13, 100, 3}, {37, 45, 7},  {64, 64, 6}, {9, 257, 13},
                                      {130, 71, 1}, {66, 129, 19}, {5, 2050, 4},
                                      {23, 77, 5}, {17, 1500, 11}};
  wt_pool *pool = wt_pool_create(3);
  FOR_EACH_ISA(lvl) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (int f16 = 0; f16 < 2; f16++) check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], f16, NULL);
    check_matmul(203, 96, 1, 1, pool);
    check_matmul(203, 96, 11, 1, pool);
    check_matmul(101, 40, 9, 0, pool);
  }
  wt_pool_destroy(pool);
}

/* ---- elementwise ---------------------------------------------------------------------- */

static void test_rms_norm(void) {
  static const int64_t dims[] = {1, 7, 64, 1000, 2053};
  FOR_EACH_ISA(lvl) {
    for (size_t di = 0; di < 5; di++) {
      int64_t dim = dims[di], rows = 3;
      float *x = malloc((size_t)(rows * dim) * 4), *w = malloc((size_t)dim * 4),
            *o = malloc((size_t)(rows * dim) * 4);
      fill(x, rows * dim, -3, 3);
      fill(w, dim, 0.5f, 1.5f);
      weir_rms_norm_rows(o, x, w, 0, rows, dim, 1e-5f);
      for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t k = 0; k < dim; k++) ss += (double)x[r * dim + k] * x[r * dim + k];
        double inv = 1.0 / sqrt(ss / dim + 1e-5);
        for (int64_t k = 0; k < dim; k++) {
          double want = x[r * dim + k] * inv * w[k];
          if (fabs(o[r * dim + k] - want) > 1e-5 * fabs(want) + 1e-6) {
            fprintf(stderr, "\n  rms_norm dim=%lld seed=%llu: %g vs %g\n", (long long)dim,
                    (unsigned long long)wt_seed, o[r * dim + k], want);
            CU_FAIL("rms_norm");
            r = rows;
            break;
          }
        }
      }
      /* in place */
      memcpy(o, x, (size_t)(rows * dim) * 4);
      float *o2 = malloc((size_t)(rows * dim) * 4);
      weir_rms_norm_rows(o2, x, w, 0, rows, dim, 1e-5f);
      weir_rms_norm_rows(o, o, w, 0, rows, dim, 1e-5f);
      CU_ASSERT(memcmp(o, o2, (size_t)(rows * dim) * 4) == 0);
      free(o2);
      free(x);
      free(w);
      free(o);
    }
  }
}

static void test_rope(void) {
  static const int cfg[][4] = {/* n_heads, head_dim, rot_dim, style */
                               {4, 64, 64, WEIR_KROPE_NORM}, {3, 64, 64, WEIR_KROPE_NEOX},
                               {2, 10, 6, WEIR_KROPE_NORM},  {2, 12, 8, WEIR_KROPE_NEOX},
                               {1, 2, 2, WEIR_KROPE_NEOX}};
  FOR_EACH_ISA(lvl) {
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
      int nh = cfg[ci][0], hd = cfg[ci][1], rd = cfg[ci][2], st = cfg[ci][3];
      int nt = 5;
      int32_t pos[5] = {0, 1, 17, 4095, 30000};
      float base = 10000.0f, fs = (ci & 1) ? 0.25f : 1.0f;
      float *x = malloc((size_t)(nt * nh * hd) * 4), *x0 = malloc((size_t)(nt * nh * hd) * 4);
      fill(x0, nt * nh * hd, -2, 2);
      memcpy(x, x0, (size_t)(nt * nh * hd) * 4);
      weir_rope_rows(x, pos, 0, nt, nh, hd, rd, base, fs, st);
      for (int t = 0; t < nt; t++)
        for (int h = 0; h < nh; h++) {
          const float *in = x0 + (t * nh + h) * hd;
          const float *got = x + (t * nh + h) * hd;
          for (int i = 0; i < rd / 2; i++) {
            double th = pos[t] * (double)fs * pow(base, -2.0 * i / rd);
            int a = st == WEIR_KROPE_NEOX ? i : 2 * i, b = st == WEIR_KROPE_NEOX ? i + rd / 2 : 2 * i + 1;
            double wa = in[a] * cos(th) - in[b] * sin(th), wb = in[a] * sin(th) + in[b] * cos(th);
            CHECK_CLOSE(got[a], wa, 2e-6 * 4, "rope a");
            CHECK_CLOSE(got[b], wb, 2e-6 * 4, "rope b");
          }
          for (int d = rd; d < hd; d++) CHECK_CLOSE(got[d], in[d], 0, "rope pass-through");
        }
    fail:
      free(x);
      free(x0);
    }
  }
}

static void test_swiglu_add_rows(void) {
  enum { N = 1037, DIM = 19 };
  float g[N], u[N], o[N], b[DIM], x[N];
  fill(g, N, -20, 20);
  fill(u, N, -2, 2);
  g[0] = -100.0f;
  g[1] = 100.0f;
  FOR_EACH_ISA(lvl) {
    weir_swiglu(o, g, u, N);
    for (int i = 0; i < N; i++) {
      double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
      CHECK_CLOSE(o[i], want, 1e-6 * fabs(want) + 1e-7, "swiglu");
    }
    memcpy(o, g, sizeof g);
    weir_swiglu(o, o, u, N); /* out == gate */
    for (int i = 0; i < N; i++) {
      double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
      CHECK_CLOSE(o[i], want, 1e-6 * fabs(want) + 1e-7, "swiglu in place");
    }
    weir_add(o, g, u, N);
    for (int i = 0; i < N; i++) CHECK_CLOSE(o[i], (double)g[i] + u[i], 1e-6 * (fabs(g[i]) + fabs(u[i])), "add");
    fill(b, DIM, -1, 1);
    memcpy(x, g, sizeof g);
    weir_add_bias_rows(x, b, 1, N / DIM, DIM);
    for (int i = 0; i < N; i++) {
      int r = i / DIM;
      double want = (r >= 1 && r < N / DIM) ? (double)g[i] + b[i % DIM] : g[i];
      CHECK_CLOSE(x[i], want, 1e-6 * (fabs(g[i]) + 1.0), "add_bias");
    }
    int32_t idx[4] = {3, 0, 3, 7};
    float rows_out[4 * DIM];
    CU_ASSERT_EQUAL(weir_get_rows(rows_out, g, idx, 0, 4, DIM, N / DIM), 0);
    for (int i = 0; i < 4; i++)
      CU_ASSERT(memcmp(rows_out + i * DIM, g + idx[i] * DIM, DIM * 4) == 0);
    idx[2] = N / DIM;
    CU_ASSERT_EQUAL(weir_get_rows(rows_out, g, idx, 0, 4, DIM, N / DIM), -1);
    idx[2] = -1;
    CU_ASSERT_EQUAL(weir_get_rows(rows_out, g, idx, 0, 4, DIM, INT64_MAX), -1);
  }
fail:;
}

/* ---- the shared vector exp (vec_exp.h) ---------------------------------------------------- */

/* exp over an array with the kernel of one ISA level (the header's functions inline into
 * these, compiled for that level). */
static void exp_portable_arr(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = weir__exp_portable(x[i]);
}
#if WEIR_X86
WEIR_TARGET_AVX2 static void exp_avx2_arr(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, weir__exp_avx2(_mm256_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = weir__exp_portable(x[i]);
}
WEIR_TARGET_AVX512 static void exp_avx512_arr(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, weir__exp_avx512(_mm512_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = weir__exp_portable(x[i]);
}
WEIR_TARGET_AVX2 static void exp_nonpos_avx2_arr(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, weir__exp_nonpos_avx2(_mm256_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = weir__exp_portable(x[i]);
}
WEIR_TARGET_AVX512 static void exp_nonpos_avx512_arr(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, weir__exp_nonpos_avx512(_mm512_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = weir__exp_portable(x[i]);
}
#endif

/* The exp kernel of ISA level lvl, or NULL where this CPU lacks it. */
static void (*exp_kernel(int lvl))(const float *, float *, int64_t) {
  if (!weir_cpu_isa_supported((weir_cpu_isa_level)lvl)) return NULL;
#if WEIR_X86
  if (lvl == WEIR_CPU_ISA_AVX512) return exp_avx512_arr;
  if (lvl == WEIR_CPU_ISA_AVX2) return exp_avx2_arr;
#endif
  return lvl == WEIR_CPU_ISA_SCALAR ? exp_portable_arr : NULL;
}

/* |got - want| in units of the float ulp at want (want the correctly rounded float of the
 * double exp; subnormal results in units of the smallest subnormal). Infinite when one
 * overflowed and the other did not. */
static double ulp_err(float got, double want_d) {
  float want = (float)want_d;
  if (got == want) return 0;
  if (isinf(got) || isinf(want)) return INFINITY;
  double ulp = nextafterf(fabsf(want), INFINITY) - fabsf(want);
  return fabs((double)got - want_d) / ulp;
}

static void test_vec_exp(void) {
  enum { N = 1 << 16 };
  float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
  for (int lvl = 0; lvl < WEIR_CPU_ISA_COUNT_; lvl++) {
    void (*k)(const float *, float *, int64_t) = exp_kernel(lvl);
    if (!k) continue;
    double worst = 0;
    float worst_x = 0;
    /* A dense sweep of the float bit patterns over [-105, 89] (every 61st float: about 36M
     * inputs from subnormal results to overflow) and a uniform one over [-1, 1]. */
    uint32_t lo_neg, hi_pos, b = 0;
    float f = -105.0f;
    memcpy(&lo_neg, &f, 4);
    f = 89.0f;
    memcpy(&hi_pos, &f, 4);
    for (int part = 0; part < 3; part++) {
      /* part 0: negative floats from -105 up to -0; 1: +0 up to 89; 2: [-1, 1] uniform */
      uint32_t cur = part == 0 ? lo_neg : 0, end = part == 0 ? 0x80000000u : hi_pos;
      int64_t left = part == 2 ? 4 * N : INT64_MAX;
      while (left > 0 && (part == 2 || (part == 0 ? cur > end : cur < end))) {
        int64_t n = 0;
        for (; n < N && left > 0; n++, left--) {
          if (part == 2) {
            x[n] = (float)(2 * wt_urand() - 1);
            continue;
          }
          memcpy(&x[n], &cur, 4);
          if (part == 0 ? cur - 61 <= end : cur + 61 >= end) {
            left = 0;
            n++;
            break;
          }
          cur = part == 0 ? cur - 61 : cur + 61;
        }
        k(x, y, n);
        for (int64_t i = 0; i < n; i++) {
          double e = ulp_err(y[i], exp((double)x[i]));
          if (e > worst) worst = e, worst_x = x[i];
        }
      }
    }
    (void)b;
    fprintf(stderr, "  (exp, isa %s: max error %.3f ulp at x = %.9g)\n",
            weir_cpu_isa_name((weir_cpu_isa_level)lvl), worst, worst_x);
    if (!(worst <= 2.0))
      fprintf(stderr, "\n  exp isa %d: %.3f ulp at %.9g (exp %.9g, bound 2)\n", lvl, worst,
              worst_x, exp((double)worst_x));
    CU_ASSERT(worst <= 2.0);

    /* Special values and the edges of the range. */
    static const float sx[] = {0.0f,   -0.0f,        INFINITY,    -INFINITY, NAN,
                               88.72f, 88.7228394f,  88.73f,      89.0f,     100.0f,
                               1e30f,  -87.0f,       -87.5f,      -100.0f,   -103.9f,
                               -104.0f, -105.0f,     -110.0f,     -1e30f,    1e-30f};
    enum { NS = sizeof sx / sizeof sx[0] };
    float sy[NS];
    k(sx, sy, NS);
    for (int i = 0; i < NS; i++) {
      float want = (float)exp((double)sx[i]);
      int ok = isnan(sx[i]) ? isnan(sy[i]) : (sy[i] == want || ulp_err(sy[i], exp((double)sx[i])) <= 2.0);
      if (!ok)
        fprintf(stderr, "\n  exp isa %d special x = %.9g: got %.9g want %.9g\n", lvl, sx[i],
                sy[i], want);
      CU_ASSERT(ok);
    }
    CU_ASSERT(sy[0] == 1.0f && sy[1] == 1.0f);          /* exp(0) is exactly 1 */
    CU_ASSERT(isinf(sy[2]) && sy[2] > 0);               /* +inf */
    CU_ASSERT(sy[3] == 0.0f && !signbit(sy[3]));        /* -inf gives +0 */
    CU_ASSERT(isnan(sy[4]));                            /* NaN stays NaN */
    CU_ASSERT(isinf(sy[7]));
    { /* overflow exactly where the correctly rounded exp overflows */
      float edge = 88.0f, after, ye[2];
      while (isfinite((float)exp((double)nextafterf(edge, INFINITY))))
        edge = nextafterf(edge, INFINITY);
      after = nextafterf(edge, INFINITY);
      float xe[2] = {edge, after};
      k(xe, ye, 2);
      CU_ASSERT(isfinite(ye[0]) && isinf(ye[1]));
    }
    CU_ASSERT(sy[16] == 0.0f && sy[17] == 0.0f && sy[18] == 0.0f);
    CU_ASSERT(sy[12] > 0.0f && sy[12] < 1.2e-38f);      /* a subnormal, not flushed */
  }
#if WEIR_X86
  /* attention's variant for x <= 0 (one clamp fewer): the same values as the full one on
   * every non-positive float it is given (every 97th bit pattern from -0 to -inf), NaN kept */
  for (int lvl = WEIR_CPU_ISA_AVX2; lvl <= WEIR_CPU_ISA_AVX512; lvl++) {
    if (!weir_cpu_isa_supported((weir_cpu_isa_level)lvl)) continue;
    void (*full)(const float *, float *, int64_t) = exp_kernel(lvl);
    void (*nonpos)(const float *, float *, int64_t) =
        lvl == WEIR_CPU_ISA_AVX2 ? exp_nonpos_avx2_arr : exp_nonpos_avx512_arr;
    float *y2 = malloc(sizeof(float) * N);
    int same = 1;
    for (uint64_t cur = 0x80000000u; cur <= 0xff800000u && same;) {
      int64_t n = 0;
      for (; n < N && cur <= 0xff800000u; n++, cur += 97) {
        uint32_t b32 = (uint32_t)cur;
        memcpy(&x[n], &b32, 4);
      }
      if (cur > 0xff800000u && n < N) x[n++] = -INFINITY;
      if (n < N) x[n++] = NAN;
      full(x, y, n);
      nonpos(x, y2, n);
      for (int64_t i = 0; i < n && same; i++)
        if (memcmp(&y[i], &y2[i], 4) != 0 && !(isnan(y[i]) && isnan(y2[i]))) {
          fprintf(stderr, "\n  exp_nonpos isa %d x = %.9g: %.9g vs %.9g\n", lvl, x[i], y2[i],
                  y[i]);
          same = 0;
        }
    }
    CU_ASSERT(same);
    free(y2);
  }
#endif
  free(x);
  free(y);
}

/* SwiGLU and GeGLU at every level against the same formulas in double, with the saturating
 * ends: no finite gate may give NaN, and out may alias gate or up. Sizes 1..40 cover every
 * vector tail. */
static void test_glu(void) {
  enum { N = 1037 };
  float g[N], u[N], o[N], o2[N];
  fill(g, N, -20, 20);
  fill(u, N, -2, 2);
  static const float big[] = {-1e30f, 1e30f, -1000.0f, 1000.0f, -100.0f, 100.0f, -89.0f,
                              89.0f,  -88.0f, 88.0f,   -1e13f,  1e13f,   -1e38f, 1e38f};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) g[i] = big[i];
  const double k2 = 2.0 * 0.7978845608028654;
  FOR_EACH_ISA(lvl) {
    for (int gelu = 0; gelu < 2; gelu++) {
      void (*fn)(float *, const float *, const float *, int64_t) = gelu ? weir_geglu : weir_swiglu;
      fn(o, g, u, N);
      for (int i = 0; i < N; i++) {
        double gd = g[i];
        double y = gelu ? k2 * (gd + 0.044715 * gd * gd * gd) : gd;
        double want = gd / (1.0 + exp(-y)) * u[i];
        CU_ASSERT(!isnan(o[i]));
        CHECK_CLOSE(o[i], want, 1e-6 * fabs(want) + 1e-7, gelu ? "geglu" : "swiglu");
      }
      for (int n = 1; n <= 40; n++) { /* tails: the same values as the long run */
        fn(o2, g, u, n);
        for (int i = 0; i < n; i++)
          CHECK_CLOSE(o2[i], o[i], 4e-7 * fabs(o[i]), gelu ? "geglu tail" : "swiglu tail");
      }
      memcpy(o2, g, sizeof g);
      fn(o2, o2, u, N); /* out == gate */
      CU_ASSERT(memcmp(o2, o, sizeof o) == 0);
      memcpy(o2, u, sizeof u);
      fn(o2, g, o2, N); /* out == up */
      CU_ASSERT(memcmp(o2, o, sizeof o) == 0);
    }
    /* NaN in, NaN out; +-inf gates as libm's formula gives them (inf * up, or NaN for -inf). */
    float gs[3] = {NAN, INFINITY, 5.0f}, us[3] = {1.0f, 2.0f, NAN}, os[3];
    weir_swiglu(os, gs, us, 3);
    CU_ASSERT(isnan(os[0]) && isinf(os[1]) && os[1] > 0 && isnan(os[2]));
  }
fail:;
}

/* ---- RoPE: the step's table against the direct kernels and the old per-token kernel ---- */

/* The kernel as it was before the table (a pow per pair and token): the results must not
 * change by a bit. */
static void rope_old(float *x, const int32_t *positions, int64_t nt, int32_t n_heads,
                     int32_t head_dim, int32_t rot_dim, float freq_base, float freq_scale,
                     int style) {
  const int32_t half = rot_dim / 2;
  for (int64_t t = 0; t < nt; t++) {
    float *row = x + t * (int64_t)n_heads * head_dim;
    double p = (double)positions[t] * (double)freq_scale;
    for (int32_t i = 0; i < half; i++) {
      double theta = p * pow((double)freq_base, -2.0 * i / (double)rot_dim);
      float c = (float)cos(theta), s = (float)sin(theta);
      for (int32_t h = 0; h < n_heads; h++) {
        float *v = row + (int64_t)h * head_dim;
        int32_t a = style == WEIR_KROPE_NEOX ? i : 2 * i;
        int32_t b = style == WEIR_KROPE_NEOX ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

/* Rotates x through the cache as the plugins do (fill in two token ranges, as parallel_for
 * would split it); returns the slot's fill flag, or -1 when the cache gave no table. */
static int rope_via_cache(weir_rope_cache *c, float *x, const int32_t *pos, int64_t nt,
                          int32_t nh, int32_t hd, const weir_rope_params *p, int style,
                          weir_rope_slot **slot_out) {
  int fill = 0;
  weir_rope_slot *s = weir_rope_cache_get(c, pos, nt, p, &fill);
  if (slot_out) *slot_out = s;
  if (!s) return -1;
  int64_t mid = nt / 2;
  if (fill) weir_rope_slot_fill(s, mid, nt);
  weir_rope_apply(x, s, mid, nt, nh, hd, style);
  if (fill) weir_rope_slot_fill(s, 0, mid);
  weir_rope_apply(x, s, 0, mid, nh, hd, style);
  if (fill) weir_rope_slot_done(s);
  return fill;
}

static void test_rope_table(void) {
  static const int cfg[][4] = {/* n_heads, head_dim, rot_dim, style */
                               {8, 32, 32, WEIR_KROPE_NORM}, {2, 32, 32, WEIR_KROPE_NEOX},
                               {3, 64, 24, WEIR_KROPE_NORM}, {2, 12, 8, WEIR_KROPE_NEOX},
                               {1, 512, 512, WEIR_KROPE_NEOX}, {1, 2, 2, WEIR_KROPE_NORM}};
  enum { NT = 17 };
  int32_t pos[NT];
  for (int t = 0; t < NT; t++) pos[t] = t < 12 ? 230 + t : 100000 + 7919 * t;
  weir_rope_cache c = {0};
  for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
    int nh = cfg[ci][0], hd = cfg[ci][1], rd = cfg[ci][2], st = cfg[ci][3];
    size_t sz = (size_t)NT * nh * hd;
    float *x0 = malloc(sz * 4), *a = malloc(sz * 4), *b = malloc(sz * 4), *inv = malloc(rd * 2);
    fill(x0, (int64_t)sz, -2, 2);
    for (int i = 0; i < rd / 2; i++) inv[i] = (float)(0.9 * pow(500000.0, -2.0 * i / rd));
    for (int form = 0; form < 2; form++) {
      const float base = 10000.0f, fs = ci & 1 ? 0.25f : 1.0f, ms = 1.0f + 0.1f * (float)ci;
      const weir_rope_params p = {.rot_dim = rd, .freq_base = base, .freq_scale = fs,
                                  .inv_freq = form ? inv : NULL, .mscale = ms};
      /* the reference: the old kernel (base form) or the direct frequency kernel */
      memcpy(a, x0, sz * 4);
      if (form) weir_rope_rows_freqs(a, pos, 0, NT, nh, hd, rd, inv, ms, st);
      else rope_old(a, pos, NT, nh, hd, rd, base, fs, st);
      if (!form) { /* the direct kernel is the old one, bit for bit */
        memcpy(b, x0, sz * 4);
        weir_rope_rows(b, pos, 0, NT, nh, hd, rd, base, fs, st);
        CU_ASSERT(memcmp(a, b, sz * 4) == 0);
      }
      /* first use fills the table, the next (k after q, later layers) reads it */
      for (int rep = 0; rep < 3; rep++) {
        memcpy(b, x0, sz * 4);
        int fill = rope_via_cache(&c, b, pos, NT, nh, hd, &p, st, NULL);
        CU_ASSERT_EQUAL(fill, rep == 0);
        CU_ASSERT(memcmp(a, b, sz * 4) == 0);
      }
    }
    free(x0), free(a), free(b), free(inv);
  }
  weir_rope_cache_free(&c);

  /* Keys: positions by value (the same buffer rewritten), the frequency array by value,
   * alternating parameter sets kept side by side, eviction past the slot count, an
   * abandoned fill redone, a too-large step refused. */
  {
    enum { NH = 2, HD = 16, RD = 16 };
    float x0[NT * NH * HD], a[NT * NH * HD], b[NT * NH * HD], inv[RD / 2];
    fill(x0, NT * NH * HD, -1, 1);
    for (int i = 0; i < RD / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / RD);
    weir_rope_params ps[6];
    for (int k = 0; k < 6; k++)
      ps[k] = (weir_rope_params){.rot_dim = RD, .freq_base = 10000.0f * (float)(k + 1),
                                 .freq_scale = 1.0f};
    weir_rope_slot *s1 = NULL, *s2 = NULL;
    CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos, NT, NH, HD, &ps[0], WEIR_KROPE_NORM, &s1), 1);
    CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos, NT, NH, HD, &ps[1], WEIR_KROPE_NORM, &s2), 1);
    CU_ASSERT(s1 != s2);
    for (int rep = 0; rep < 2; rep++) { /* two sets alternate: both stay */
      CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos, NT, NH, HD, &ps[0], WEIR_KROPE_NORM, NULL), 0);
      CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos, NT, NH, HD, &ps[1], WEIR_KROPE_NORM, NULL), 0);
    }
    int32_t pos2[NT];
    memcpy(pos2, pos, sizeof pos);
    pos2[NT - 1] += 1; /* the next step: one position differs */
    memcpy(b, x0, sizeof x0);
    CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos2, NT, NH, HD, &ps[0], WEIR_KROPE_NORM, NULL), 1);
    memcpy(a, x0, sizeof x0);
    rope_old(a, pos2, NT, NH, HD, RD, ps[0].freq_base, 1.0f, WEIR_KROPE_NORM);
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    /* fewer tokens with the same first positions: a different key */
    CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos2, NT - 1, NH, HD, &ps[0], WEIR_KROPE_NORM, NULL), 1);
    /* six sets through four slots, twice: every answer still right */
    for (int rep = 0; rep < 2; rep++)
      for (int k = 0; k < 6; k++) {
        memcpy(b, x0, sizeof x0);
        int f = rope_via_cache(&c, b, pos, NT, NH, HD, &ps[k], WEIR_KROPE_NEOX, NULL);
        /* (the first round may hit what the lines above left; in the second, LRU over four
         * slots has evicted each set before it comes back) */
        CU_ASSERT(rep == 0 ? f >= 0 : f == 1);
        memcpy(a, x0, sizeof x0);
        rope_old(a, pos, NT, NH, HD, RD, ps[k].freq_base, 1.0f, WEIR_KROPE_NEOX);
        CU_ASSERT(memcmp(a, b, sizeof a) == 0);
      }
    /* the frequency form: the same array rewritten in place is a new key */
    weir_rope_params pf = {.rot_dim = RD, .inv_freq = inv, .mscale = 1.0f};
    CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos, NT, NH, HD, &pf, WEIR_KROPE_NORM, NULL), 1);
    CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos, NT, NH, HD, &pf, WEIR_KROPE_NORM, NULL), 0);
    inv[3] *= 0.5f;
    memcpy(b, x0, sizeof x0);
    CU_ASSERT_EQUAL(rope_via_cache(&c, b, pos, NT, NH, HD, &pf, WEIR_KROPE_NORM, NULL), 1);
    memcpy(a, x0, sizeof x0);
    weir_rope_rows_freqs(a, pos, 0, NT, NH, HD, RD, inv, 1.0f, WEIR_KROPE_NORM);
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    /* a get whose fill never completed is not a hit */
    int fill = -1;
    weir_rope_slot *s = weir_rope_cache_get(&c, pos2, NT, &ps[5], &fill);
    CU_ASSERT(s != NULL && fill == 1);
    s = weir_rope_cache_get(&c, pos2, NT, &ps[5], &fill);
    CU_ASSERT(s != NULL && fill == 1);
    /* too large for a table, or not a valid rot_dim: NULL (the direct kernels then) */
    static int32_t many[(WEIR_ROPE_TABLE_MAX_PAIRS / (RD / 2)) + 1];
    s = weir_rope_cache_get(&c, many, (int64_t)(sizeof many / sizeof many[0]), &ps[0], &fill);
    CU_ASSERT(s == NULL && fill == 0);
    s = weir_rope_cache_get(&c, many, (int64_t)(sizeof many / sizeof many[0]) - 1, &ps[0], &fill);
    CU_ASSERT(s != NULL && fill == 1);
    weir_rope_params odd = {.rot_dim = 3, .freq_base = 10000.0f, .freq_scale = 1.0f};
    CU_ASSERT(weir_rope_cache_get(&c, pos, NT, &odd, &fill) == NULL);
    weir_rope_cache_free(&c);
    weir_rope_cache_free(&c); /* freeing twice is harmless */
  }
}

static void test_softmax(void) {
  enum { N = 333 };
  float x[N], p[N];
  fill(x, N, -30, 30);
  x[5] = -INFINITY;
  double m = -INFINITY, s = 0;
  for (int i = 0; i < N; i++) m = x[i] > m ? x[i] : m;
  for (int i = 0; i < N; i++) s += exp((double)x[i] - m);
  double lse = m + log(s);
  CHECK_CLOSE(weir_logsumexp(x, N), lse, 1e-6 * fabs(lse), "logsumexp");
  memcpy(p, x, sizeof x);
  CHECK_CLOSE(weir_softmax(p, N), lse, 1e-6 * fabs(lse), "softmax lse");
  for (int i = 0; i < N; i++) CHECK_CLOSE(p[i], exp((double)x[i] - lse), 1e-6 * exp(x[i] - lse) + 1e-12, "softmax");
  CU_ASSERT_EQUAL(p[5], 0.0f);
  for (int i = 0; i < N; i++) p[i] = -INFINITY;
  CU_ASSERT(weir_softmax(p, N) == -INFINITY);
  CU_ASSERT_EQUAL(p[0], 0.0f);
fail:;
}

/* ---- greedy pick (argmax.h) ----------------------------------------------------------- */

/* The engine's greedy rule, written here: a strict > scan (the first of equal largest values;
 * NaN and -inf never win), and the top probability in double with libm's exp. *prob_ok 0:
 * the rule's probability is 0 (no pick, or a NaN sum: a NaN in the row, or +inf the largest). */
static int64_t ref_argmax(const float *x, int64_t n, double *prob) {
  float bv = -INFINITY;
  int64_t bi = -1;
  for (int64_t i = 0; i < n; i++)
    if (x[i] > bv) {
      bv = x[i];
      bi = i;
    }
  double sum = 0;
  if (bi >= 0)
    for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - (double)bv);
  *prob = bi >= 0 && sum > 0 ? 1.0 / sum : 0.0;
  return bi;
}

/* A row of n logits of kind k: 0 uniform, 1 a tie of the largest at 2..4 places, 2 NaNs
 * scattered (one before the largest when there is room), 3 -inf scattered, 4 every value
 * -inf, 5 every value NaN, 6 NaN and -inf only, 7 +0 and -0 tied largest, 8 every value the
 * same, 9 +inf among them, 10 the largest in the last element (a vector tail). */
static void argmax_row_of(float *x, int64_t n, int k) {
  fill(x, n, -8.0f, 8.0f);
  switch (k) {
  case 1: {
    const float top = 9.0f + (float)(wt_rnd() % 4);
    const int ties = 2 + (int)(wt_rnd() % 3);
    for (int t = 0; t < ties; t++) x[wt_rnd() % (uint64_t)n] = top;
    break;
  }
  case 2:
    for (int64_t i = 0; i < n; i += 1 + (int64_t)(wt_rnd() % 7)) x[i] = NAN;
    x[0] = NAN;
    break;
  case 3:
    for (int64_t i = 0; i < n; i += 1 + (int64_t)(wt_rnd() % 5)) x[i] = -INFINITY;
    break;
  case 4:
    for (int64_t i = 0; i < n; i++) x[i] = -INFINITY;
    break;
  case 5:
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
    break;
  case 6:
    for (int64_t i = 0; i < n; i++) x[i] = wt_rnd() & 1 ? NAN : -INFINITY;
    break;
  case 7:
    for (int64_t i = 0; i < n; i++) x[i] = -fabsf(x[i]) - 1.0f;
    x[wt_rnd() % (uint64_t)n] = -0.0f;
    x[wt_rnd() % (uint64_t)n] = 0.0f;
    break;
  case 8:
    for (int64_t i = 0; i < n; i++) x[i] = 1.5f;
    break;
  case 9:
    x[wt_rnd() % (uint64_t)n] = INFINITY;
    break;
  case 10:
    x[n - 1] = 20.0f;
    break;
  default:
    break;
  }
}

static void test_argmax(void) {
  enum { KINDS = 11, MAXN = 4097 + 1 };
  float *buf = malloc(sizeof(float) * MAXN);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  int64_t sizes[80];
  int ns = 0;
  for (int64_t n = 1; n <= 70; n++) sizes[ns++] = n;
  sizes[ns++] = 1024;
  sizes[ns++] = 4095;
  sizes[ns++] = 4096;
  sizes[ns++] = 4097;
  int levels = 0;
  FOR_EACH_ISA(lvl) {
    levels++;
    for (int si = 0; si < ns; si++) {
      const int64_t n = sizes[si];
      for (int k = 0; k < KINDS; k++)
        for (int rep = 0; rep < (n <= 70 ? 6 : 2); rep++) {
          float *x = buf + (rep & 1); /* aligned and not */
          argmax_row_of(x, n, k);
          double want_p;
          const int64_t want = ref_argmax(x, n, &want_p);
          float got_p = -1.0f;
          const int64_t got = weir_argmax_f32(x, n, &got_p);
          if (got != want)
            fprintf(stderr, "\n  argmax [isa=%s seed=%llu] n %lld kind %d: got %lld want %lld\n",
                    weir_cpu_isa_name(weir_cpu_isa()), (unsigned long long)wt_seed,
                    (long long)n, k, (long long)got, (long long)want);
          CU_ASSERT_EQUAL_FATAL(got, want);
          CU_ASSERT_EQUAL_FATAL(weir_argmax_f32(x, n, NULL), want); /* without prob */
          /* float sums of up to 4,097 terms, each exp within 2 ulp */
          CHECK_CLOSE(got_p, want_p, 5e-5 * want_p, "argmax prob");
          if (want_p == 0) CU_ASSERT(got_p == 0.0f && !signbit(got_p));
          if (k == 8) CU_ASSERT(got_p == 1.0f / (float)n); /* n exact ones: no term lost */
          if (k == 4 || k == 5 || k == 6) CU_ASSERT_EQUAL(got, -1);
          if (k == 10) CU_ASSERT_EQUAL(got, n - 1);
        }
    }
    /* The row's largest far above the rest: a sum of exactly 1 (prob 1), and an n of 0. */
    for (int64_t i = 0; i < 4096; i++) buf[i] = -200.0f;
    buf[1234] = 0.0f;
    float p = -1;
    CU_ASSERT_EQUAL(weir_argmax_f32(buf, 4096, &p), 1234);
    CU_ASSERT_EQUAL(p, 1.0f);
    p = -1;
    CU_ASSERT_EQUAL(weir_argmax_f32(buf, 0, &p), -1);
    CU_ASSERT_EQUAL(p, 0.0f);
  }
  fprintf(stderr, "  (argmax: %d ISA levels, lengths 1..70, 1024, 4095..4097)\n", levels);
fail:
  free(buf);
}

/* ---- temperature weights (sample_weights.h) ------------------------------------------- */

/* Against double precision on the argmax rows' kinds: the largest z, the last drawable index,
 * every weight within the vector exp's bound of exp(z - zmax) (z and the difference rounded
 * to float as the rule says), 0 exactly for -inf and NaN, the block sums, and the draw: the
 * first index whose running sum exceeds the target. */
static void test_sample_weights(void) {
  enum { KINDS = 11, MAXN = 4097 + 1 };
  float *buf = malloc(sizeof(float) * MAXN), *w = malloc(sizeof(float) * MAXN);
  double *bsum = malloc(sizeof(double) * (size_t)weir_sample_blocks(MAXN));
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf && w && bsum);
  static const float temps[] = {0.8f, 1.0f, 1.7f, 0.1f};
  int64_t sizes[80];
  int ns = 0;
  for (int64_t n = 1; n <= 40; n++) sizes[ns++] = n;
  const int64_t big[] = {255, 256, 257, 513, 1024, 4095, 4097};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) sizes[ns++] = big[i];
  int levels = 0;
  long draws = 0;
  FOR_EACH_ISA(lvl) {
    levels++;
    for (int si = 0; si < ns; si++) {
      const int64_t n = sizes[si], nb = weir_sample_blocks(n);
      for (int k = 0; k < KINDS; k++)
        for (int ti = 0; ti < 4; ti++) {
          float *x = buf + (ti & 1); /* aligned and not */
          argmax_row_of(x, n, k);
          const float inv_t = 1.0f / temps[ti];
          float zref = -INFINITY;
          int64_t lref = -1;
          for (int64_t i = 0; i < n; i++) {
            const float z = x[i] * inv_t;
            if (z > zref) zref = z;
            if (x[i] > -INFINITY) lref = i;
          }
          float zmax = 0;
          const int64_t last = weir_sample_weights(x, n, inv_t, w, bsum, &zmax);
          WT_ASSERT_INT_EQ(last, lref);
          CU_ASSERT(zmax == zref || (zmax != zmax && zref != zref));
          if (!(zref < INFINITY)) continue; /* +inf: the caller's other rule */
          int bad = 0;
          for (int64_t i = 0; i < n && !bad; i++) {
            double want = 0;
            if (x[i] > -INFINITY) {
              const float d = x[i] * inv_t - zref;
              want = exp((double)d);
            }
            if (!(fabs((double)w[i] - want) <= 3e-7 * want + 1e-44)) {
              fprintf(stderr, "\n  sample weights [isa=%s seed=%llu] n %lld kind %d t %g: w[%lld] "
                      "= %.9g, want %.9g\n", weir_cpu_isa_name(weir_cpu_isa()),
                      (unsigned long long)wt_seed, (long long)n, k, temps[ti], (long long)i,
                      w[i], want);
              bad = 1;
            }
            if (!(x[i] > -INFINITY)) CU_ASSERT(w[i] == 0.0f);
          }
          CU_ASSERT_FATAL(!bad);
          double total = 0;
          for (int64_t b = 0; b < nb; b++) {
            double s = 0;
            for (int64_t i = b * WEIR_SAMPLE_BLOCK; i < n && i < (b + 1) * WEIR_SAMPLE_BLOCK; i++)
              s += w[i];
            CHECK_CLOSE(bsum[b], s, 1e-12 * s, "block sum");
            total += bsum[b];
          }
          if (lref < 0) {
            CU_ASSERT(total == 0);
            continue;
          }
          /* the draw at the ends and at random targets */
          for (int d = 0; d < 6; d++) {
            const double u = d == 0 ? 0.0 : d == 1 ? 1 - 1e-9 : (double)(wt_rnd() % 1000000) / 1e6;
            const double target = u * total;
            const int64_t got = weir_sample_pick(w, bsum, n, target);
            draws++;
            CU_ASSERT_FATAL(got >= 0 && got < n);
            CU_ASSERT(w[got] > 0);
            double before = 0;
            for (int64_t i = 0; i < got; i++) before += w[i];
            CU_ASSERT(before <= target + 1e-12 * total);
            CU_ASSERT(before + w[got] >= target - 1e-12 * total);
          }
        }
    }
  }
  /* past every block's sum: no pick (the caller's fallback) */
  for (int64_t i = 0; i < 300; i++) buf[i] = 0.0f;
  float zmax;
  CU_ASSERT_EQUAL(weir_sample_weights(buf, 300, 1.0f, w, bsum, &zmax), 299);
  CU_ASSERT_EQUAL(zmax, 0.0f);
  CU_ASSERT_EQUAL(weir_sample_pick(w, bsum, 300, 300.0), -1);
  CU_ASSERT_EQUAL(weir_sample_pick(w, bsum, 300, 299.5), 299);
  fprintf(stderr, "  (sample weights: %d ISA levels, lengths 1..40, 255..4097, %ld draws)\n",
          levels, draws);
fail:
  free(buf);
  free(w);
  free(bsum);
}

static void test_isa_select(void) {
  CU_ASSERT(weir_cpu_isa_supported(WEIR_CPU_ISA_SCALAR));
  CU_ASSERT_EQUAL(weir_cpu_isa_set(WEIR_CPU_ISA_SCALAR), 0);
  CU_ASSERT_EQUAL(weir_cpu_isa(), WEIR_CPU_ISA_SCALAR);
  CU_ASSERT_EQUAL(weir_cpu_isa_set((weir_cpu_isa_level)7), -1);
  CU_ASSERT_EQUAL(weir_cpu_isa(), WEIR_CPU_ISA_SCALAR);
  int n = 0;
  FOR_EACH_ISA(lvl) {
    CU_ASSERT_EQUAL((int)weir_cpu_isa(), lvl);
    n++;
  }
  fprintf(stderr, "  (ISA levels tested on this CPU: %d)\n", n);
}

int main(void) {
  wt_rand_init();
  fprintf(stderr, "kernels: seed %llu (rerun with WT_SEED=%llu)\n", (unsigned long long)wt_seed,
          (unsigned long long)wt_seed);
  static const wt_test tests[] = {{"isa_select", test_isa_select},
                                  {"f16_convert", test_f16_convert},
                                  {"bf16_convert", test_bf16_convert},
                                  {"dequant", test_dequant},
                                  {"matmul", test_matmul},
                                  {"rms_norm", test_rms_norm},
                                  {"rope", test_rope},
                                  {"swiglu_add_rows", test_swiglu_add_rows},
                                  {"vec_exp", test_vec_exp},
                                  {"glu", test_glu},
                                  {"rope_table", test_rope_table},
                                  {"softmax", test_softmax},
                                  {"argmax", test_argmax},
                                  {"sample weights", test_sample_weights},
                                  {NULL, NULL}};
  return wt_run_suite("kernels", tests);
}
