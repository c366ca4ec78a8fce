// kernels/cuda/quant_gguf.cu executed on the CPU (cuda_shim.h) through its own C launchers,
// for every native GGUF type it reads (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL,
// IQ4_XS), on random blocks, against the double-precision reference in gguf_ref.h (and, for
// each type the SDK's weir_dequantize_row knows, that reference against the SDK's). Outputs
// are NaN-poisoned first.
//  - embed of every row (shuffled ids) equals the reference dequantization (1e-6), and an
//    out-of-range id zero-fills its row and raises the flag;
//  - dequant to f16 (f16 rounding: 1e-3);
//  - the activation quantization follows its rule (d = max|x| / 127, |x - q d| <= d / 2,
//    the stored sum) and a NaN in one token's input reaches that token's outputs only;
//  - the matmul for 1, 2, 3, 8, 11, 16 and 19 tokens (tiles of up to 16 tokens in registers;
//    19 runs two tiles) against the
//    reference weights times the quantized activations in double (1e-5: the kernel's integer
//    dot products are exact) and times the f32 activations (2e-2: activation rounding);
//    shapes with a row count that is not a multiple of the CTA's 8 warps, more chunks per row
//    than a warp has lanes, and a padded row stride;
//  - the launchers refuse a bad shape, a stride or address that breaks the type's block
//    alignment, or a type they do not read; every wide load checks its alignment on the shim.
// On a GPU machine cuda_quant_gguf checks the plugin on the device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gguf_ref.h"
#include "shim_test.h"
#include "weir/numeric.h"
#include "weir_cuda_gguf.h"

static uint64_t g_rng = 0x6A5EEDC0FFEEull;
static float uni(float lo, float hi) { return shim_uniform(&g_rng, lo, hi); }

static void expect(bool ok, const char *fmt, const char *name) {
  printf("%s ", ok ? "ok  " : "FAIL");
  printf(fmt, name);
  printf("\n");
  if (!ok) ++g_failures;
}

// 256-byte aligned scratch for the quantized activations (the launchers require it).
struct act_buf {
  std::vector<unsigned char> raw;
  unsigned char *p = nullptr;
  void reserve(size_t n) {
    raw.assign(n + 256, 0xAB);
    p = raw.data() + (256 - (reinterpret_cast<uintptr_t>(raw.data()) & 255)) % 256;
  }
};

// The reference for the type of row `r`, as doubles.
static std::vector<double> ref_rows(int type, const std::vector<uint8_t> &w, int64_t rows,
                                    int64_t cols, size_t row_bytes) {
  std::vector<double> out((size_t)rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    gguf_ref::dequant_row(type, w.data() + (size_t)r * row_bytes, cols, out.data() + r * cols);
  return out;
}

static void test_type(int type, int64_t rows, int64_t cols, size_t pad) {
  const char *tn = weir_dtype_name((weir_dtype)type);
  const size_t packed = weir_dtype_row_bytes((weir_dtype)type, cols);
  const size_t row_bytes = packed + pad;
  char what[160];
  std::vector<uint8_t> w = gguf_ref::random_rows(type, rows, cols, row_bytes, uni);
  const std::vector<double> ref = ref_rows(type, w, rows, cols, row_bytes);

  // The reference against the SDK's scalar dequantization, where the SDK knows the type.
  {
    std::vector<float> sdk((size_t)cols);
    std::vector<double> mine(ref.begin(), ref.begin() + cols);
    const int rc = weir_dequantize_row((weir_dtype)type, w.data(), sdk.data(), cols);
    if (rc == WEIR_OK) {
      snprintf(what, sizeof what, "%s reference == weir_dequantize_row", tn);
      shim_check(what, sdk, mine, 1e-6);
    } else {
      printf("note %s: weir_dequantize_row does not read it yet (status %d); the test uses its "
             "own reference only\n", tn, rc);
    }
  }

  // embed: every row, shuffled, then one id out of range.
  {
    std::vector<int32_t> ids((size_t)rows);
    for (int64_t i = 0; i < rows; ++i) ids[(size_t)i] = (int32_t)i;
    for (int64_t i = rows - 1; i > 0; --i)
      std::swap(ids[(size_t)i], ids[(size_t)(uni(0.0f, 1.0f) * (float)(i + 1)) % (size_t)(i + 1)]);
    std::vector<float> out = shim_poisoned((size_t)rows * cols);
    int flag = 0;
    cudaError_t e = weir_cuda_gguf_embed(0, type, w.data(), row_bytes, ids.data(), out.data(),
                                         rows, rows, cols, &flag);
    std::vector<double> want((size_t)rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      memcpy(&want[(size_t)(i * cols)], &ref[(size_t)(ids[(size_t)i] * cols)], cols * sizeof(double));
    snprintf(what, sizeof what, "%s embed %lld x %lld (stride +%zu)", tn, (long long)rows,
             (long long)cols, pad);
    if (e != cudaSuccess) out.assign(out.size(), NAN);
    shim_check(what, out, want, 1e-6);
    expect(flag == 0, "%s embed in range leaves the flag clear", tn);
    int32_t bad[2] = {0, (int32_t)rows};
    std::vector<float> o2 = shim_poisoned(2 * (size_t)cols);
    e = weir_cuda_gguf_embed(0, type, w.data(), row_bytes, bad, o2.data(), 2, rows, cols, &flag);
    bool zero = true;
    for (int64_t i = 0; i < cols; ++i) zero = zero && o2[(size_t)(cols + i)] == 0.0f;
    expect(e == cudaSuccess && flag == 1 && zero && o2[0] == (float)ref[0],
           "%s embed id == rows zero-fills its row and raises the flag", tn);
  }

  // dequant to f16.
  {
    std::vector<uint16_t> h((size_t)rows * cols, 0x7e00); // f16 NaN
    cudaError_t e = weir_cuda_gguf_dequant_f16(0, type, h.data(), w.data(), row_bytes, rows, cols);
    std::vector<float> out((size_t)rows * cols);
    for (size_t i = 0; i < out.size(); ++i) out[i] = e == cudaSuccess ? weir_f16_to_f32(h[i]) : NAN;
    snprintf(what, sizeof what, "%s dequant_f16", tn);
    shim_check(what, out, ref, 1e-3);
  }

  // matmul.
  const int64_t ns[] = {1, 2, 3, 8, 11, 16, 19};
  for (int64_t n : ns) {
    std::vector<float> x((size_t)(n * cols));
    for (auto &v : x) v = uni(-1.0f, 1.0f);
    act_buf act;
    act.reserve(weir_cuda_gguf_act_bytes(n, cols));
    cudaError_t e = weir_cuda_gguf_quantize_act(0, x.data(), act.p, n, cols);
    const signed char *xq = reinterpret_cast<const signed char *>(act.p);
    const float *xs = reinterpret_cast<const float *>(act.p + ((size_t)(n * cols) + 255) / 256 * 256);
    // The activation rule.
    bool rule = e == cudaSuccess;
    for (int64_t g = 0; rule && g < n * cols / 32; ++g) {
      float amax = 0;
      long sum = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[(size_t)(g * 32 + j)]));
      const float d = xs[2 * g];
      for (int j = 0; j < 32; ++j) {
        const int q = xq[g * 32 + j];
        sum += q;
        if (std::fabs(x[(size_t)(g * 32 + j)] - q * d) > 0.5001f * d) rule = false;
      }
      if (d != amax / 127.0f || std::fabs(xs[2 * g + 1] - d * (float)sum) > 1e-6f * std::fabs(d * sum))
        rule = false;
    }
    snprintf(what, sizeof what, "%s quantize_act %lld tokens follows d = max|x|/127, |x - qd| <= "
             "d/2, sum", tn, (long long)n);
    expect(rule, "%s", what);

    std::vector<float> y = shim_poisoned((size_t)(n * rows));
    e = weir_cuda_gguf_matmul(0, type, w.data(), row_bytes, act.p, y.data(), cols, rows, n);
    if (e != cudaSuccess) y.assign(y.size(), NAN);
    std::vector<double> exact((size_t)(n * rows)), full((size_t)(n * rows));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < rows; ++o) {
        double s = 0, f = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double wv = ref[(size_t)(o * cols + c)];
          s += wv * ((double)xq[t * cols + c] * (double)xs[2 * ((t * cols + c) / 32)]);
          f += wv * (double)x[(size_t)(t * cols + c)];
        }
        exact[(size_t)(t * rows + o)] = s;
        full[(size_t)(t * rows + o)] = f;
      }
    snprintf(what, sizeof what, "%s matmul %lld tokens x %lld x %lld vs quantized activations",
             tn, (long long)n, (long long)rows, (long long)cols);
    shim_check(what, y, exact, 1e-5);
    snprintf(what, sizeof what, "%s matmul %lld tokens vs f32 activations", tn, (long long)n);
    shim_check(what, y, full, 2e-2);
  }
}

// A NaN in token 1's input makes token 1's outputs NaN and leaves token 0's exact.
static void test_nan_activation() {
  const int type = WEIR_DTYPE_Q4_K;
  const int64_t rows = 9, cols = 512, n = 2;
  const size_t rb = weir_dtype_row_bytes((weir_dtype)type, cols);
  std::vector<uint8_t> w = gguf_ref::random_rows(type, rows, cols, rb, uni);
  std::vector<float> x((size_t)(n * cols));
  for (auto &v : x) v = uni(-1.0f, 1.0f);
  x[(size_t)(cols + 300)] = NAN;
  act_buf act;
  act.reserve(weir_cuda_gguf_act_bytes(n, cols));
  std::vector<float> y = shim_poisoned((size_t)(n * rows));
  bool ok = weir_cuda_gguf_quantize_act(0, x.data(), act.p, n, cols) == cudaSuccess &&
            weir_cuda_gguf_matmul(0, type, w.data(), rb, act.p, y.data(), cols, rows, n) ==
                cudaSuccess;
  for (int64_t o = 0; o < rows; ++o) ok = ok && std::isfinite(y[(size_t)o]) && std::isnan(y[(size_t)(rows + o)]);
  expect(ok, "%s: a NaN activation reaches its own token's outputs only", "q4_K");
}

static void test_refusals() {
  std::vector<uint8_t> w(4096, 0);
  std::vector<float> y(64);
  act_buf act;
  act.reserve(weir_cuda_gguf_act_bytes(1, 512));
  int32_t id = 0;
  const size_t rb = weir_dtype_row_bytes(WEIR_DTYPE_Q6_K, 256);
  bool ok = weir_cuda_gguf_matmul(0, WEIR_DTYPE_Q6_K, w.data(), rb, act.p, y.data(), 288, 1, 1) ==
                cudaErrorInvalidValue && // 288 is not a multiple of 256
            weir_cuda_gguf_matmul(0, WEIR_DTYPE_Q6_K, w.data(), rb - 1, act.p, y.data(), 256, 1,
                                  1) == cudaErrorInvalidValue && // odd and short stride
            weir_cuda_gguf_matmul(0, WEIR_DTYPE_F16, w.data(), 512, act.p, y.data(), 256, 1, 1) ==
                cudaErrorInvalidValue && // not a block type
            weir_cuda_gguf_matmul(0, WEIR_DTYPE_Q8_K, w.data(), 292, act.p, y.data(), 256, 1, 1) ==
                cudaErrorInvalidValue && // activations-only type
            weir_cuda_gguf_matmul(0, WEIR_DTYPE_Q4_0, w.data() + 1, 18, act.p, y.data(), 32, 1, 1) ==
                cudaErrorInvalidValue && // odd address
            weir_cuda_gguf_matmul(0, WEIR_DTYPE_Q4_K, w.data(), 148, act.p, y.data(), 256, 1,
                                  1) == cudaErrorInvalidValue && // Q4_K rows 16-byte aligned
            weir_cuda_gguf_matmul(0, WEIR_DTYPE_Q2_K, w.data() + 2, 84, act.p, y.data(), 256, 1,
                                  1) == cudaErrorInvalidValue && // Q2_K rows 4-byte aligned
            weir_cuda_gguf_quantize_act(0, y.data(), act.p, 1, 48) == cudaErrorInvalidValue &&
            weir_cuda_gguf_quantize_act(0, y.data(), act.p + 1, 1, 32) == cudaErrorInvalidValue &&
            weir_cuda_gguf_embed(0, WEIR_DTYPE_IQ4_XS, w.data(), 136, &id, y.data(), 1, 1, 100,
                                 nullptr) == cudaErrorInvalidValue;
  expect(ok, "%s: the launchers refuse bad shapes, strides, addresses and types", "all");
  ok = true;
  for (int t : gguf_ref::kTypes)
    ok = ok && weir_cuda_gguf_block_elems(t) == weir_dtype_block_elems((weir_dtype)t) &&
         weir_cuda_gguf_block_bytes(t) == weir_dtype_block_bytes((weir_dtype)t);
  ok = ok && weir_cuda_gguf_block_bytes(WEIR_DTYPE_F16) == 0 &&
       weir_cuda_gguf_block_elems(WEIR_DTYPE_Q8_K) == 0;
  expect(ok, "%s: block sizes agree with sdk/include/weir/tensor.h", "all");
}

// The load-time plane repacks (weir_cuda_gguf_repack: Q6_K into WEIR_CUDA_GGUF_Q6_K_R, Q3_K
// into WEIR_CUDA_GGUF_Q3_K_R): the planes hold each super-block's bytes where
// weir_cuda_gguf.h says, the row padding is zero, and matmul (1..16 and 19 tokens), dequant
// and embed on the repacked rows equal those on the file's rows bit for bit (the same decoded
// values; every quant load on the repacked rows is a 16-byte one, alignment-checked by the
// shim); bad repacks and misaligned planes are refused.
static void test_plane_repack(int type, int64_t rows, int64_t cols, size_t pad) {
  // The planes per super-block, as weir_cuda_gguf.h lays them out (written independently).
  const size_t q = type == WEIR_DTYPE_Q6_K ? 192 : 96, sc = type == WEIR_DTYPE_Q6_K ? 16 : 12;
  const size_t bb = q + sc + 2;
  const int rt = weir_cuda_gguf_repacked_type(type);
  const char *tn = weir_dtype_name((weir_dtype)type);
  const size_t rb = weir_dtype_row_bytes((weir_dtype)type, cols) + pad;
  const int64_t nsb = cols / 256;
  const size_t rrb = weir_cuda_gguf_repacked_row_bytes(type, cols);
  char what[160];
  std::vector<uint8_t> w = gguf_ref::random_rows(type, rows, cols, rb, uni);
  unsigned char *r = (unsigned char *)aligned_alloc(16, rrb * (size_t)rows);
  memset(r, 0xA5, rrb * (size_t)rows);
  bool ok = rt != type && weir_cuda_gguf_repacked_type(12) == 12 &&
            bb == weir_cuda_gguf_block_bytes(type) && rrb == ((size_t)nsb * bb + 15) / 16 * 16 &&
            weir_cuda_gguf_repack(type, r, rrb, w.data(), rb, rows, cols) == 0;
  for (int64_t o = 0; ok && o < rows; ++o) {
    const unsigned char *in = w.data() + (size_t)o * rb, *out = r + (size_t)o * rrb;
    for (int64_t b = 0; b < nsb; ++b)
      ok = ok && !memcmp(out + b * q, in + b * bb, q) &&
           !memcmp(out + nsb * q + b * sc, in + b * bb + q, sc) &&
           !memcmp(out + nsb * (q + sc) + b * 2, in + b * bb + q + sc, 2);
    for (size_t i = (size_t)nsb * bb; i < rrb; ++i) ok = ok && out[i] == 0;
  }
  snprintf(what, sizeof what, "%s repack %lld x %lld: planes where the layout says, padding 0",
           tn, (long long)rows, (long long)cols);
  expect(ok, "%s", what);
  for (int64_t n = 1; n <= 19; n += n == 16 ? 3 : 1) {
    std::vector<float> x((size_t)(n * cols));
    for (auto &v : x) v = uni(-1.0f, 1.0f);
    act_buf act;
    act.reserve(weir_cuda_gguf_act_bytes(n, cols));
    std::vector<float> y0 = shim_poisoned((size_t)(n * rows)), y1 = y0;
    const bool same =
        weir_cuda_gguf_quantize_act(0, x.data(), act.p, n, cols) == cudaSuccess &&
        weir_cuda_gguf_matmul(0, type, w.data(), rb, act.p, y0.data(), cols, rows, n) ==
            cudaSuccess &&
        weir_cuda_gguf_matmul(0, rt, r, rrb, act.p, y1.data(), cols, rows, n) == cudaSuccess &&
        !memcmp(y0.data(), y1.data(), y0.size() * 4);
    snprintf(what, sizeof what, "%s repacked matmul %lld tokens = the file layout's bit for bit",
             tn, (long long)n);
    expect(same, "%s", what);
  }
  std::vector<uint16_t> h0((size_t)(rows * cols), 0x7e00), h1 = h0;
  ok = weir_cuda_gguf_dequant_f16(0, type, h0.data(), w.data(), rb, rows, cols) == cudaSuccess &&
       weir_cuda_gguf_dequant_f16(0, rt, h1.data(), r, rrb, rows, cols) == cudaSuccess &&
       h0 == h1;
  expect(ok, "%s repacked dequant_f16 = the file layout's", tn);
  std::vector<int32_t> ids = {(int32_t)rows - 1, 0, (int32_t)rows};
  std::vector<float> e0 = shim_poisoned(3 * (size_t)cols), e1 = e0;
  int f0 = 0, f1 = 0;
  ok = weir_cuda_gguf_embed(0, type, w.data(), rb, ids.data(), e0.data(), 3, rows, cols, &f0) ==
           cudaSuccess &&
       weir_cuda_gguf_embed(0, rt, r, rrb, ids.data(), e1.data(), 3, rows, cols, &f1) ==
           cudaSuccess &&
       !memcmp(e0.data(), e1.data(), e0.size() * 4) && f0 == 1 && f1 == 1;
  expect(ok, "%s repacked embed = the file layout's (id == rows: zeros and the flag)", tn);
  act_buf act;
  act.reserve(weir_cuda_gguf_act_bytes(1, cols));
  std::vector<float> y((size_t)rows);
  ok = weir_cuda_gguf_repack(12, r, rrb, w.data(), rb, rows, cols) != 0 && // not repacked
       weir_cuda_gguf_repack(type, r, rrb - 8, w.data(), rb, rows, cols) != 0 && // short dst
       weir_cuda_gguf_repack(type, r, rrb, w.data(), (size_t)nsb * bb - 1, rows, cols) != 0 &&
       weir_cuda_gguf_repack(type, r, rrb, w.data(), rb, rows, cols + 32) != 0 && // not blocks
       weir_cuda_gguf_repack(type, nullptr, rrb, w.data(), rb, rows, cols) != 0 &&
       weir_cuda_gguf_matmul(0, rt, r + 2, rrb, act.p, y.data(), cols, 1, 1) ==
           cudaErrorInvalidValue && // planes must be 16-byte aligned
       weir_cuda_gguf_matmul(0, rt, r, (size_t)nsb * bb + 2, act.p, y.data(), cols, 1, 1) ==
           cudaErrorInvalidValue; // and so must the row stride
  expect(ok, "%s repacked: bad repacks and misaligned planes are refused", tn);
  free(r);
}

int main(void) {
  for (int t : gguf_ref::kTypes) {
    const int64_t be = weir_dtype_block_elems((weir_dtype)t);
    // 33 (resp. 40) chunks per row: more than a warp's 32 lanes; 13 rows: not a multiple of 8.
    test_type(t, 13, be == 32 ? 33 * 32 : 5 * 256, 0);
    // A second odd shape with a padded stride (16: keeps every type's block alignment).
    test_type(t, 5, be == 32 ? 3 * 32 : 256, 16);
  }
  // Q6_K: 5 super-blocks are 1050 bytes (a row padded to 1056); 8 are 1680 (no padding),
  // here from a padded source stride. Q3_K: 5 are 550 (padded to 560), 8 are 880.
  for (int t : {WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q3_K}) {
    test_plane_repack(t, 13, 5 * 256, 0);
    test_plane_repack(t, 6, 8 * 256, 2);
  }
  test_nan_activation();
  test_refusals();
  if (g_failures) {
    printf("%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
