/* The GGUF block types added in SDK 1.5 (Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS), and the old
 * ones alongside: weir_dequantize_row (sdk/include/weir/numeric.h) against an independent
 * numpy reading of the same bytes (tests/kquant/kquant_ref.py, written from the format
 * description) on random blocks; hand-packed blocks whose values are worked out from the
 * layout by hand; the finite-scale check; and weir_quantize_row's round trip into every type
 * with an error bound per type. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/quantize_row.h"
#include "testutil.h"
#include "weir/numeric.h"
#include "weir/status.h"

static char *g_dir;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint16_t rnd_f16_finite(void) {
  /* Any sign and mantissa, an exponent of 0..30 (subnormals included, never inf/NaN). */
  uint16_t h = (uint16_t)wt_xorshift64(&g_rng);
  uint16_t e = (uint16_t)(wt_xorshift64(&g_rng) % 31);
  return (uint16_t)((h & 0x83ffu) | (uint16_t)(e << 10));
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Byte offsets of the f16 fields of each type's block (-1: none). */
typedef struct kinfo {
  weir_dtype t;
  int f16_at[2];
} kinfo;
static const kinfo k_types[] = {
    {WEIR_DTYPE_Q8_0, {0, -1}},   {WEIR_DTYPE_Q4_0, {0, -1}},   {WEIR_DTYPE_Q4_1, {0, 2}},
    {WEIR_DTYPE_Q5_0, {0, -1}},   {WEIR_DTYPE_Q5_1, {0, 2}},    {WEIR_DTYPE_IQ4_NL, {0, -1}},
    {WEIR_DTYPE_Q2_K, {80, 82}},  {WEIR_DTYPE_Q3_K, {108, -1}}, {WEIR_DTYPE_Q4_K, {0, 2}},
    {WEIR_DTYPE_Q5_K, {0, 2}},    {WEIR_DTYPE_Q6_K, {208, -1}}, {WEIR_DTYPE_IQ4_XS, {0, -1}},
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* Random blocks: random bytes everywhere, then finite f16 scales. */
static uint8_t *random_blocks(const kinfo *k, int64_t nblocks) {
  size_t bb = weir_dtype_block_bytes(k->t);
  uint8_t *b = malloc(bb * (size_t)nblocks);
  for (size_t i = 0; i < bb * (size_t)nblocks; i++) b[i] = (uint8_t)wt_xorshift64(&g_rng);
  for (int64_t i = 0; i < nblocks; i++)
    for (int f = 0; f < 2; f++)
      if (k->f16_at[f] >= 0) put16(b + bb * (size_t)i + k->f16_at[f], rnd_f16_finite());
  return b;
}

static void test_dequantize_matches_numpy(void) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    fprintf(stderr, "\n  (skipped: no /usr/bin/python3)\n");
    return;
  }
  const int64_t nblocks = 64;
  for (size_t k = 0; k < N_TYPES; k++) {
    weir_dtype t = k_types[k].t;
    int64_t be = weir_dtype_block_elems(t), n = be * nblocks;
    size_t bytes = weir_dtype_block_bytes(t) * (size_t)nblocks;
    uint8_t *blocks = random_blocks(&k_types[k], nblocks);
    char *in = wt_strf("%s/%s.bin", g_dir, weir_dtype_name(t));
    char *outp = wt_strf("%s/%s.f32", g_dir, weir_dtype_name(t));
    CU_ASSERT_EQUAL_FATAL(wt_write_file(in, (const char *)blocks, bytes), 0);
    char *script = wt_strf("%s/tests/kquant/kquant_ref.py", WT_SOURCE_DIR), *log = NULL;
    char *argv[] = {(char *)"/usr/bin/python3", script, (char *)weir_dtype_name(t), in, outp,
                    NULL};
    int rc = wt_run(argv, &log, 60000);
    if (rc) fprintf(stderr, "\n%s\n", log);
    WT_ASSERT_INT_EQ(rc, 0);
    size_t len = 0;
    char *ref = wt_read_file(outp, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    WT_ASSERT_INT_EQ(len, (size_t)n * 4);
    float *got = malloc((size_t)n * 4);
    WT_ASSERT_INT_EQ(weir_dequantize_row(t, blocks, got, n), WEIR_OK);
    int64_t bad = 0, nonzero = 0;
    for (int64_t b = 0; b < nblocks && len == (size_t)n * 4; b++) {
      /* Both sides compute the same f32 products in the same order, so they agree to the
       * last bit; the bound only allows for a compiler that fuses a multiply-add. */
      float amax = 0, want[256];
      memcpy(want, ref + (size_t)(b * be) * 4, (size_t)be * 4);
      for (int64_t i = 0; i < be; i++) amax = fmaxf(amax, fabsf(want[i]));
      for (int64_t i = 0; i < be; i++) {
        float g = got[b * be + i], w = want[i];
        if (w != 0) nonzero++;
        if (!(fabsf(g - w) <= 4 * FLT_EPSILON * amax)) {
          if (bad++ < 4)
            fprintf(stderr, "\n  %s block %lld element %lld: weir %.9g, numpy %.9g",
                    weir_dtype_name(t), (long long)b, (long long)i, (double)g, (double)w);
        }
      }
    }
    WT_ASSERT_INT_EQ(bad, 0);
    CU_ASSERT(nonzero > n / 2); /* random blocks are mostly non-zero: the comparison bites */
    free(got);
    free(ref);
    free(log);
    free(script);
    free(outp);
    free(in);
    free(blocks);
  }
}

/* Hand-packed blocks: each value worked out from the layout description by hand. */
static void test_hand_packed_blocks(void) {
  float y[256];
  /* Q4_K: d = 0.5, dmin = 0.25. Sub-block 1: scale 3, min 5 (bytes 1 and 5, low 6 bits).
   * Sub-block 6: scale 37 = 0b100101 (low nibble 5 in byte 10, top bits 0b10 in byte 2's top
   * two bits) and min 50 = 0b110010 (low nibble 2 in byte 10's high nibble, top bits 0b11 in
   * byte 6's top two bits). Element 32 + 7 (sub-block 1) is the high nibble of qs[7];
   * element 6 * 32 + 9 (sub-block 6) is the low nibble of qs[96 + 9]. */
  weir_block_q4_K k4;
  memset(&k4, 0, sizeof k4);
  k4.d = weir_f32_to_f16(0.5f);
  k4.dmin = weir_f32_to_f16(0.25f);
  k4.scales[1] = 3;
  k4.scales[5] = 5;
  k4.scales[10] = 5 | 2 << 4;
  k4.scales[2] |= 2 << 6;
  k4.scales[6] |= 3 << 6;
  k4.qs[7] = 0xb0; /* q = 11 for element 39 */
  k4.qs[96 + 9] = 0x0d; /* q = 13 for element 201 */
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q4_K, &k4, y, 256), WEIR_OK);
  CU_ASSERT_EQUAL(y[39], 0.5f * 3 * 11 - 0.25f * 5);
  CU_ASSERT_EQUAL(y[201], 0.5f * 37 * 13 - 0.25f * 50);
  CU_ASSERT_EQUAL(y[200], -0.25f * 50); /* q = 0 */
  CU_ASSERT_EQUAL(y[0], 0.0f);          /* sub-block 0: scale 0, min 0 */

  /* Q6_K: d = 2, scale 13 = -3 is sub-block 13 (elements 208..223: half 1, j = 2, l 16..31).
   * Element 210 = 128 + 64 + 18: low 4 bits from the high nibble of ql[64 + 18], top 2 bits
   * from bits 4-5 of qh[32 + 18]. q = 0b10 0111 = 39, x = 2 * -3 * (39 - 32). */
  weir_block_q6_K k6;
  memset(&k6, 0, sizeof k6);
  k6.d = weir_f32_to_f16(2.0f);
  k6.scales[13] = -3;
  k6.ql[64 + 18] = 0x70;
  k6.qh[32 + 18] = 2 << 4;
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q6_K, &k6, y, 256), WEIR_OK);
  CU_ASSERT_EQUAL(y[210], 2.0f * -3 * 7);
  CU_ASSERT_EQUAL(y[211], 2.0f * -3 * -32);

  /* Q3_K: d = 1; scale 9 (elements 144..159) = 45 - 32 = 13: low nibble 13 = high nibble of
   * byte 1, top bits 0b10 = bits 4-5 of byte 8 + 1. Element 150 = 128 + 22 (h 1, j 0):
   * q2 = bits 0-1 of qs[32 + 22] = 3, hmask[22] bit 4 clear -> q = 3 - 4 = -1. */
  weir_block_q3_K k3;
  memset(&k3, 0, sizeof k3);
  k3.d = weir_f32_to_f16(1.0f);
  k3.scales[1] = 13 << 4;
  k3.scales[9] = 2 << 4;
  k3.qs[32 + 22] = 3;
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q3_K, &k3, y, 256), WEIR_OK);
  CU_ASSERT_EQUAL(y[150], 13.0f * -1);
  k3.hmask[22] = 1 << 4; /* high bit set: q = 3 */
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q3_K, &k3, y, 256), WEIR_OK);
  CU_ASSERT_EQUAL(y[150], 13.0f * 3);

  /* Q5_0: element 20's fifth bit is bit 20 of qh (byte 2, bit 4); its nibble the high one of
   * qs[4]. q = 16 + 9 = 25, x = d (25 - 16). */
  uint8_t q5[22] = {0};
  put16(q5, weir_f32_to_f16(0.125f));
  q5[2 + 2] = 1 << 4;
  q5[6 + 4] = 0x90;
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q5_0, q5, y, 32), WEIR_OK);
  CU_ASSERT_EQUAL(y[20], 0.125f * 9);
  CU_ASSERT_EQUAL(y[4], 0.125f * -16);

  /* IQ4_XS: sub-block 5 scale = 0b11 0001 = 49 -> 17: low nibble the high one of
   * scales_l[2], top bits bits 10-11 of scales_h. Element 5 * 32 + 16 + 3 is the high
   * nibble of qs[80 + 3]; code 15 -> 113. */
  weir_block_iq4_xs xs;
  memset(&xs, 0, sizeof xs);
  xs.d = weir_f32_to_f16(0.5f);
  xs.scales_l[2] = 1 << 4;
  xs.scales_h = 3 << 10;
  xs.qs[80 + 3] = 0xf0;
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_IQ4_XS, &xs, y, 256), WEIR_OK);
  CU_ASSERT_EQUAL(y[179], 0.5f * 17 * 113);
  CU_ASSERT_EQUAL(y[163], 0.5f * 17 * -127); /* code 0 */
  CU_ASSERT_EQUAL(y[0], 0.5f * -32 * -127);  /* sub-block 0: scale 0 - 32 */

  /* Q2_K: sub-block 3 (elements 48..63): scale 7, min 2. Element 50 = 32 j + l with j 1,
   * l 18: bits 2-3 of qs[18]. */
  weir_block_q2_K k2;
  memset(&k2, 0, sizeof k2);
  k2.d = weir_f32_to_f16(1.0f);
  k2.dmin = weir_f32_to_f16(0.5f);
  k2.scales[3] = 7 | 2 << 4;
  k2.qs[18] = 2 << 2;
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q2_K, &k2, y, 256), WEIR_OK);
  CU_ASSERT_EQUAL(y[50], 7.0f * 2 - 0.5f * 2);
  CU_ASSERT_EQUAL(y[18], 0.0f);

  /* Refusals: a partial block, an activation-only type. */
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q4_K, &k4, y, 128), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_IQ4_NL, q5, y, 31), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_dequantize_row(WEIR_DTYPE_Q8_K, &k4, y, 256), WEIR_E_NOTSUP);
}

static void test_scales_finite(void) {
  for (size_t k = 0; k < N_TYPES; k++) {
    uint8_t *b = random_blocks(&k_types[k], 8);
    size_t bb = weir_dtype_block_bytes(k_types[k].t);
    WT_ASSERT_INT_EQ(weir_quant_scales_finite(k_types[k].t, b, 8), -1);
    for (int f = 0; f < 2; f++) {
      if (k_types[k].f16_at[f] < 0) continue;
      uint8_t *p = b + bb * 5 + k_types[k].f16_at[f];
      uint16_t keep;
      memcpy(&keep, p, 2);
      put16(p, 0x7e00); /* NaN */
      WT_ASSERT_INT_EQ(weir_quant_scales_finite(k_types[k].t, b, 8), 5);
      put16(p, 0xfc00); /* -inf */
      WT_ASSERT_INT_EQ(weir_quant_scales_finite(k_types[k].t, b, 8), 5);
      WT_ASSERT_INT_EQ(weir_quant_scales_finite(k_types[k].t, b, 5), -1);
      put16(p, keep);
    }
    free(b);
  }
  float f = 0;
  WT_ASSERT_INT_EQ(weir_quant_scales_finite(WEIR_DTYPE_F32, &f, 1), -1);
}

static float gauss(void) {
  /* Irwin-Hall of four uniforms, unit variance: close enough to normal weights. */
  double u = 0;
  for (int i = 0; i < 4; i++) u += (double)(wt_xorshift64(&g_rng) >> 11) / 9007199254740992.0;
  return (float)((u - 2.0) * 1.7320508);
}

/* Error bounds of weir_quantize_row then weir_dequantize_row on normal data: RMS error over
 * RMS value, and the largest error in standard deviations. Each about 1.2x what the searches
 * reach (measured: q5_0 .038, q5_1 .033, iq4_nl .071, q2_K .263, q3_K .139, q4_K .069,
 * q5_K .035, q6_K .017, iq4_xs .072; worst errors 0.06 to 1.1 sigma), so a broken search
 * or packing fails them; Q4_0 with its plain range scale is .082, which the 4-bit searches
 * must beat. */
static const struct {
  weir_dtype t;
  double rel_rms, max_sigma;
} k_bounds[] = {
    {WEIR_DTYPE_Q8_0, 0.007, 0.025}, {WEIR_DTYPE_Q4_0, 0.095, 0.5},
    {WEIR_DTYPE_Q4_1, 0.09, 0.3},    {WEIR_DTYPE_Q5_0, 0.045, 0.23},
    {WEIR_DTYPE_Q5_1, 0.04, 0.18},   {WEIR_DTYPE_IQ4_NL, 0.08, 0.5},
    {WEIR_DTYPE_Q2_K, 0.30, 1.5},    {WEIR_DTYPE_Q3_K, 0.16, 0.85},
    {WEIR_DTYPE_Q4_K, 0.078, 0.42},  {WEIR_DTYPE_Q5_K, 0.04, 0.23},
    {WEIR_DTYPE_Q6_K, 0.02, 0.1},    {WEIR_DTYPE_IQ4_XS, 0.08, 0.5},
};

static void test_quantize_roundtrip(void) {
  const int64_t n = 256 * 64;
  const float sigma = 0.02f;
  float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
  uint8_t *q = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) x[i] = sigma * gauss();
  for (size_t k = 0; k < sizeof k_bounds / sizeof k_bounds[0]; k++) {
    weir_dtype t = k_bounds[k].t;
    WT_ASSERT_INT_EQ(weir_quantize_row(t, x, q, n), 0);
    WT_ASSERT_INT_EQ(weir_dequantize_row(t, q, y, n), WEIR_OK);
    double se = 0, sx = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
      double e = (double)y[i] - x[i];
      se += e * e;
      sx += (double)x[i] * x[i];
      worst = fmax(worst, fabs(e));
    }
    double rel = sqrt(se / sx), ws = worst / sigma;
    if (rel > k_bounds[k].rel_rms || ws > k_bounds[k].max_sigma)
      fprintf(stderr, "\n  %s: relative RMS error %.4f (bound %.3f), worst %.3f sigma (%.2f)",
              weir_dtype_name(t), rel, k_bounds[k].rel_rms, ws, k_bounds[k].max_sigma);
    CU_ASSERT(rel <= k_bounds[k].rel_rms);
    CU_ASSERT(ws <= k_bounds[k].max_sigma);
    if (t == WEIR_DTYPE_Q4_K || t == WEIR_DTYPE_IQ4_XS || t == WEIR_DTYPE_IQ4_NL)
      CU_ASSERT(rel < 0.082); /* better than Q4_0's plain range scale at the same size */
  }
  free(x);
  free(y);
  free(q);
}

static void test_quantize_edges(void) {
  float x[256], y[256];
  uint8_t q[256 * 4];
  static const weir_dtype types[] = {WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_1, WEIR_DTYPE_IQ4_NL,
                                     WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q4_K,
                                     WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_IQ4_XS};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
    weir_dtype t = types[k];
    int64_t n = weir_dtype_block_elems(t) == 32 ? 32 : 256;
    /* All zero: exactly zero back. */
    memset(x, 0, sizeof x);
    WT_ASSERT_INT_EQ(weir_quantize_row(t, x, q, n), 0);
    WT_ASSERT_INT_EQ(weir_dequantize_row(t, q, y, n), WEIR_OK);
    for (int64_t i = 0; i < n; i++) CU_ASSERT_EQUAL(y[i], 0.0f);
    /* One sub-block of values, the rest zero, and one sign only: the zeros stay (near) zero
     * and the values keep their shape. */
    for (int64_t i = 0; i < n; i++) x[i] = i < 16 ? 0.25f + 0.01f * (float)i : 0.0f;
    WT_ASSERT_INT_EQ(weir_quantize_row(t, x, q, n), 0);
    WT_ASSERT_INT_EQ(weir_dequantize_row(t, q, y, n), WEIR_OK);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)y[i] - x[i]));
    if (worst > 0.1) fprintf(stderr, "\n  %s: worst %g on a one-sided block", weir_dtype_name(t),
                             worst);
    CU_ASSERT(worst <= 0.1);
    /* Refusals: NaN or infinite values, values whose scale overflows f16, partial blocks. */
    x[3] = NAN;
    WT_ASSERT_INT_EQ(weir_quantize_row(t, x, q, n), WEIR_E_INVAL);
    x[3] = INFINITY;
    WT_ASSERT_INT_EQ(weir_quantize_row(t, x, q, n), WEIR_E_INVAL);
    x[3] = 1e30f;
    WT_ASSERT_INT_EQ(weir_quantize_row(t, x, q, n), WEIR_E_INVAL);
    WT_ASSERT_INT_EQ(weir_quantize_row(t, x, q, n - 1), WEIR_E_INVAL);
  }
}

int main(void) {
  g_dir = wt_mkdtemp();
  static const wt_test tests[] = {
      {"dequantize_matches_numpy", test_dequantize_matches_numpy},
      {"hand_packed_blocks", test_hand_packed_blocks},
      {"scales_finite", test_scales_finite},
      {"quantize_roundtrip", test_quantize_roundtrip},
      {"quantize_edges", test_quantize_edges},
      {NULL, NULL}};
  int rc = wt_run_suite("kquant", tests);
  wt_rmtree(g_dir);
  free(g_dir);
  return rc;
}
