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
#include "convert.h"
#include "cpu_isa.h"
#include "dequant.h"
#include "get_rows.h"
#include "matmul.h"
#include "rms_norm.h"
#include "rope.h"
#include "softmax.h"
#include "swiglu.h"
#include "testutil.h"
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
                                  {"softmax", test_softmax},
                                  {NULL, NULL}};
  return wt_run_suite("kernels", tests);
}
