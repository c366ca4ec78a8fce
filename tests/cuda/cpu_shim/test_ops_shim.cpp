// kernels/cuda/elementwise.cu and quant_f16.cu executed on the CPU (cuda_shim.h) through their
// own C launchers, against double-precision references: RMSNorm (vector and scalar paths),
// fused add + RMSNorm, RoPE (both styles, partial rotation), SwiGLU, add, add_bias, get_rows,
// f16 packing from every GGUF source type, the GEMV for 1..8 tokens (vector and scalar paths),
// the f32 -> f16 conversion and the embedding gather with its out-of-range flag. Outputs are
// NaN-poisoned first. The fused add + RMSNorm kernel is also checked against the CPU device
// plugin's ABI 1.7 add_rms_norm op (weir_device_cpu.so, dlopen), with out aliasing x as the
// engine calls it, and that op against the CPU's own add followed by rms_norm (bit-equal). The
// ABI 1.8 greedy picks (argmax_rows) against the engine's host rule (ties to the lowest index,
// -inf and NaN rows, the draft head's ids) and against the CPU device's op. On a GPU machine the cuda_ops and cuda_quant suites check the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "shim_test.h"
#include "weir/device.h"
#include "weir_cuda_kernels.h"
#ifdef WEIR_SHIM_DEVICE_CPU
#include <string>

#include "shim_plugin.h"
#endif

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static float uni(float lo, float hi) { return shim_uniform(&g_rng, lo, hi); }

static std::vector<float> poisoned(size_t n) { return shim_poisoned(n); }

static float h2f(float x) { return __half2float(__float2half_rn(x)); }

static void rms_norm(int rows, int dim) {
  std::vector<float> x((size_t)rows * dim), w(dim);
  for (auto &a : x) a = uni(-3, 3);
  for (auto &a : w) a = uni(0.5f, 1.5f);
  std::vector<double> ref(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += (double)x[(size_t)r * dim + i] * x[(size_t)r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int i = 0; i < dim; ++i) ref[(size_t)r * dim + i] = x[(size_t)r * dim + i] * inv * w[i];
  }
  auto out = poisoned(x.size());
  weir_cuda_rms_norm(nullptr, out.data(), x.data(), w.data(), rows, dim, 1e-5f);
  char name[64];
  snprintf(name, sizeof name, "rms_norm %dx%d", rows, dim);
  shim_check(name, out, ref, 1e-6);

  std::vector<float> res((size_t)rows * dim);
  for (auto &a : res) a = uni(-2, 2);
  std::vector<double> sum(x.size()), ref2(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) {
      const size_t k = (size_t)r * dim + i;
      sum[k] = (double)res[k] + x[k];
      ss += sum[k] * sum[k];
    }
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int i = 0; i < dim; ++i) ref2[(size_t)r * dim + i] = sum[(size_t)r * dim + i] * inv * w[i];
  }
  out = poisoned(x.size());
  weir_cuda_add_rms_norm(nullptr, out.data(), res.data(), x.data(), w.data(), rows, dim, 1e-5f);
  snprintf(name, sizeof name, "add_rms_norm %dx%d", rows, dim);
  shim_check(name, out, ref2, 1e-6);
  shim_check("add_rms_norm residual", res, sum, 1e-7);
}

static void rope(int style, int heads, int hd, int rot) {
  const int nt = 5;
  std::vector<float> x((size_t)nt * heads * hd);
  for (auto &a : x) a = uni(-1, 1);
  std::vector<int32_t> pos(nt);
  for (auto &p : pos) p = (int32_t)uni(0, 2000);
  std::vector<double> ref(x.begin(), x.end());
  for (int t = 0; t < nt; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rot / 2; ++i) {
        const size_t base = ((size_t)t * heads + h) * hd;
        const double th = pos[t] * 0.5 * std::pow(10000.0, -2.0 * i / rot);
        const int a = style == 2 ? i : 2 * i, b = style == 2 ? i + rot / 2 : 2 * i + 1;
        ref[base + a] = x[base + a] * std::cos(th) - x[base + b] * std::sin(th);
        ref[base + b] = x[base + a] * std::sin(th) + x[base + b] * std::cos(th);
      }
  weir_cuda_rope(nullptr, x.data(), pos.data(), nt, heads, hd, rot, 10000.0f, 0.5f, style);
  char name[64];
  snprintf(name, sizeof name, "rope style %d rot %d/%d", style, rot, hd);
  shim_check(name, x, ref, 1e-4);
}

static void small_ops() {
  const int rows = 3, dim = 300;
  const size_t n = (size_t)rows * dim;
  std::vector<float> g(n), u(n), b(dim);
  for (auto &a : g) a = uni(-6, 6);
  for (auto &a : u) a = uni(-2, 2);
  for (auto &a : b) a = uni(-1, 1);
  std::vector<double> ref(n);
  auto out = poisoned(n);
  for (size_t i = 0; i < n; ++i) ref[i] = g[i] / (1.0 + std::exp(-(double)g[i])) * u[i];
  weir_cuda_swiglu(nullptr, out.data(), g.data(), u.data(), (int64_t)n);
  shim_check("swiglu", out, ref, 1e-6);
  for (size_t i = 0; i < n; ++i) ref[i] = (double)g[i] + u[i];
  out = poisoned(n);
  weir_cuda_add(nullptr, out.data(), g.data(), u.data(), (int64_t)n);
  shim_check("add", out, ref, 1e-7);
  for (size_t i = 0; i < n; ++i) ref[i] = (double)u[i] + b[i % dim];
  weir_cuda_add_bias(nullptr, u.data(), b.data(), rows, dim);
  shim_check("add_bias", u, ref, 1e-7);
  std::vector<int32_t> ids = {2, 0, 2, 1};
  std::vector<double> rref(ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int j = 0; j < dim; ++j) rref[i * dim + j] = g[(size_t)ids[i] * dim + j];
  out = poisoned(ids.size() * dim);
  weir_cuda_get_rows(nullptr, out.data(), g.data(), ids.data(), (int64_t)ids.size(), dim);
  shim_check("get_rows", out, rref, 1e-9);
}

// ABI 1.6 encoder ops: LayerNorm (with and without bias), exact GELU, bidirectional
// attention with grouped heads (more keys than a warp's lanes, so lanes merge partials).
static void encoder_ops() {
  const int rows = 3, dim = 300;
  const size_t n = (size_t)rows * dim;
  std::vector<float> x(n), w(dim), b(dim);
  for (auto &a : x) a = uni(-3, 3);
  for (auto &a : w) a = uni(0.5, 1.5);
  for (auto &a : b) a = uni(-1, 1);
  for (int with_bias = 0; with_bias <= 1; ++with_bias) {
    std::vector<double> ref(n);
    for (int r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int i = 0; i < dim; ++i) mean += x[(size_t)r * dim + i];
      mean /= dim;
      for (int i = 0; i < dim; ++i) var += std::pow(x[(size_t)r * dim + i] - mean, 2);
      const double inv = 1 / std::sqrt(var / dim + 1e-5);
      for (int i = 0; i < dim; ++i)
        ref[(size_t)r * dim + i] = (x[(size_t)r * dim + i] - mean) * inv * w[i] + (with_bias ? b[i] : 0);
    }
    auto out = poisoned(n);
    weir_cuda_layer_norm(nullptr, out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr,
                         rows, dim, 1e-5f);
    shim_check(with_bias ? "layer_norm (bias)" : "layer_norm", out, ref, 1e-5);
  }
  {
    std::vector<double> ref(n);
    for (size_t i = 0; i < n; ++i) ref[i] = 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0)));
    auto out = poisoned(n);
    weir_cuda_gelu(nullptr, out.data(), x.data(), (int64_t)n);
    shim_check("gelu", out, ref, 1e-6);
  }
  const int nt = 41, nh = 4, nkv = 2, hd = 16;
  std::vector<float> q((size_t)nt * nh * hd), k((size_t)nt * nkv * hd), v((size_t)nt * nkv * hd);
  for (auto &a : q) a = uni(-1, 1);
  for (auto &a : k) a = uni(-1, 1);
  for (auto &a : v) a = uni(-1, 1);
  std::vector<double> ref((size_t)nt * nh * hd);
  for (int h = 0; h < nh; ++h)
    for (int i = 0; i < nt; ++i) {
      const int g = h / (nh / nkv);
      std::vector<double> sc(nt);
      double mx = -1e300, sum = 0;
      for (int j = 0; j < nt; ++j) {
        double d = 0;
        for (int e = 0; e < hd; ++e) d += (double)q[((size_t)i * nh + h) * hd + e] * k[((size_t)j * nkv + g) * hd + e];
        sc[j] = 0.25 * d;
        mx = std::max(mx, sc[j]);
      }
      for (int j = 0; j < nt; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
      for (int e = 0; e < hd; ++e) {
        double a = 0;
        for (int j = 0; j < nt; ++j) a += sc[j] / sum * v[((size_t)j * nkv + g) * hd + e];
        ref[((size_t)i * nh + h) * hd + e] = a;
      }
    }
  auto out = poisoned(ref.size());
  weir_cuda_attention_full(nullptr, out.data(), q.data(), k.data(), v.data(), nt, nh, nkv, hd, 0.25f);
  shim_check("attention_full", out, ref, 1e-5);
}

// ABI 1.5 model-family ops: RoPE by a per-pair frequency table with a magnitude factor
// (values past rot untouched), GELU-tanh gating, scale, soft-cap.
static void family_ops(int style, int heads, int hd, int rot) {
  const int nt = 6;
  std::vector<float> x((size_t)nt * heads * hd), inv(rot / 2);
  for (auto &a : x) a = uni(-1, 1);
  for (int i = 0; i < rot / 2; ++i) inv[i] = (float)(std::pow(500000.0, -2.0 * i / rot) / (1 + i % 5));
  std::vector<int32_t> pos(nt);
  for (auto &p : pos) p = (int32_t)uni(0, 3000);
  const float ms = 1.19f;
  std::vector<double> ref(x.begin(), x.end());
  for (int t = 0; t < nt; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rot / 2; ++i) {
        const size_t base = ((size_t)t * heads + h) * hd;
        const double th = (double)pos[t] * inv[i];
        const int a = style == 2 ? i : 2 * i, b = style == 2 ? i + rot / 2 : 2 * i + 1;
        ref[base + a] = (x[base + a] * std::cos(th) - x[base + b] * std::sin(th)) * ms;
        ref[base + b] = (x[base + a] * std::sin(th) + x[base + b] * std::cos(th)) * ms;
      }
  weir_cuda_rope_freqs(nullptr, x.data(), pos.data(), nt, heads, hd, rot, inv.data(), ms, style);
  char name[64];
  snprintf(name, sizeof name, "rope_freqs style %d rot %d/%d", style, rot, hd);
  shim_check(name, x, ref, 1e-4);

  const size_t n = 777;
  std::vector<float> g(n), u(n), y(n);
  for (auto &a : g) a = uni(-6, 6);
  for (auto &a : u) a = uni(-2, 2);
  std::vector<double> r(n);
  auto out = poisoned(n);
  for (size_t i = 0; i < n; ++i) {
    const double v = g[i];
    r[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v))) * u[i];
  }
  weir_cuda_geglu(nullptr, out.data(), g.data(), u.data(), (int64_t)n);
  shim_check("geglu", out, r, 1e-6);
  y = g;
  for (size_t i = 0; i < n; ++i) r[i] = (double)g[i] * 33.94;
  weir_cuda_scale(nullptr, y.data(), 33.94f, (int64_t)n);
  shim_check("scale", y, r, 1e-6);
  y = g;
  for (size_t i = 0; i < n; ++i) r[i] = 2.5 * std::tanh(g[i] / 2.5);
  weir_cuda_softcap(nullptr, y.data(), 2.5f, (int64_t)n);
  shim_check("softcap", y, r, 1e-6);
}

// GGUF encodings of w (rows of `in`), and the f16 values the packed weight must hold.
static std::vector<unsigned char> encode(const std::vector<float> &w, int in, int outr, int type,
                                         std::vector<float> &expect) {
  size_t rb = type == 0 ? in * 4 : type == 1 || type == 30 ? in * 2
            : type == 8 ? in / 32 * 34 : type == 2 ? in / 32 * 18 : in / 32 * 20;
  std::vector<unsigned char> buf(rb * outr, 0);
  expect.assign((size_t)in * outr, 0);
  for (int r = 0; r < outr; ++r) {
    unsigned char *row = &buf[rb * r];
    const float *x = &w[(size_t)r * in];
    float *e = &expect[(size_t)r * in];
    if (type == 0) {
      memcpy(row, x, in * 4);
      for (int i = 0; i < in; ++i) e[i] = h2f(x[i]);
    } else if (type == 1 || type == 30) {
      for (int i = 0; i < in; ++i) {
        float v;
        if (type == 1) {
          __half h = __float2half_rn(x[i]);
          memcpy(row + 2 * i, &h, 2);
          v = __half2float(h);
        } else {
          __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
          memcpy(row + 2 * i, &h, 2);
          v = __bfloat162float(h);
        }
        e[i] = h2f(v);
      }
    } else {
      for (int b = 0; b < in / 32; ++b) {
        const float *xb = x + b * 32;
        float lo = xb[0], hi = xb[0], amax = 0;
        for (int j = 0; j < 32; ++j) {
          lo = std::min(lo, xb[j]);
          hi = std::max(hi, xb[j]);
          amax = std::max(amax, std::fabs(xb[j]));
        }
        auto put_half = [](unsigned char *at, float v) {
          __half h = __float2half_rn(v);
          memcpy(at, &h, 2);
          return __half2float(h);
        };
        if (type == 8) {
          unsigned char *blk = row + b * 34;
          const float d = put_half(blk, amax / 127.0f);
          for (int j = 0; j < 32; ++j) {
            int q = d > 0 ? (int)std::lrint(xb[j] / d) : 0;
            q = std::max(-127, std::min(127, q));
            blk[2 + j] = (unsigned char)(signed char)q;
            e[b * 32 + j] = h2f((float)q * d);
          }
        } else if (type == 2) {
          unsigned char *blk = row + b * 18;
          const float d = put_half(blk, amax / 7.0f);
          for (int j = 0; j < 32; ++j) {
            int q = d > 0 ? (int)std::lrint(xb[j] / d) + 8 : 8;
            q = std::max(0, std::min(15, q));
            blk[2 + (j & 15)] |= (unsigned char)(j < 16 ? q : q << 4);
            e[b * 32 + j] = h2f((float)(q - 8) * d);
          }
        } else {
          unsigned char *blk = row + b * 20;
          const float d = put_half(blk, (hi - lo) / 15.0f), m = put_half(blk + 2, lo);
          for (int j = 0; j < 32; ++j) {
            int q = d > 0 ? (int)std::lrint((xb[j] - m) / d) : 0;
            q = std::max(0, std::min(15, q));
            blk[4 + (j & 15)] |= (unsigned char)(j < 16 ? q : q << 4);
            e[b * 32 + j] = h2f((float)q * d + m);
          }
        }
      }
    }
  }
  return buf;
}

static double as_double(float v) { return v; }
static double as_double(__half v) { return __half2float(v); }

/* y[t][o] = sum_i w[o][i] x[t][i] in double: the reference every GEMV here is checked against. */
template <typename W>
static std::vector<double> gemv_ref(const W *w, const std::vector<float> &x, int nt, int in,
                                    int outr) {
  std::vector<double> y((size_t)nt * outr, 0.0);
  for (int t = 0; t < nt; ++t)
    for (int o = 0; o < outr; ++o)
      for (int i = 0; i < in; ++i)
        y[(size_t)t * outr + o] += as_double(w[(size_t)o * in + i]) * x[(size_t)t * in + i];
  return y;
}

static void pack_gemv_embed() {
  const int types[] = {0, 1, 30, 8, 2, 3};
  const char *names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"};
  for (int ti = 0; ti < 6; ++ti) {
    const int in = 256, outr = 24;
    std::vector<float> w((size_t)in * outr), expect;
    for (auto &a : w) a = uni(-2, 2);
    auto src = encode(w, in, outr, types[ti], expect);
    std::vector<__half> packed((size_t)in * outr);
    memset(static_cast<void *>(packed.data()), 0xFF, packed.size() * 2);
    weir_cuda_pack_f16(nullptr, packed.data(), src.data(), types[ti], outr, in,
                       src.size() / outr);
    std::vector<float> got(packed.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = __half2float(packed[i]);
    std::vector<double> ref(expect.begin(), expect.end());
    char name[64];
    snprintf(name, sizeof name, "pack_f16 from %s", names[ti]);
    shim_check(name, got, ref, 1e-4);

    // GEMV for 1..8 tokens against the packed values.
    for (int nt = 1; nt <= 8; nt += (ti == 0 ? 1 : 7)) {
      std::vector<float> x((size_t)nt * in);
      for (auto &a : x) a = uni(-1, 1);
      const std::vector<double> yr = gemv_ref(got.data(), x, nt, in, outr);
      auto y = poisoned(yr.size());
      weir_cuda_gemv_f16(nullptr, packed.data(), x.data(), y.data(), in, outr, nt);
      snprintf(name, sizeof name, "gemv %d token(s), %s", nt, names[ti]);
      shim_check(name, y, yr, 1e-5);
    }

    // Embedding rows, one id out of range.
    std::vector<int32_t> ids = {3, 0, outr - 1, 3};
    std::vector<double> er(ids.size() * in);
    for (size_t i = 0; i < ids.size(); ++i)
      for (int j = 0; j < in; ++j) er[i * in + j] = got[(size_t)ids[i] * in + j];
    auto e = poisoned(er.size());
    int flag = 0;
    weir_cuda_embed_f16(nullptr, packed.data(), ids.data(), e.data(), (int64_t)ids.size(), outr,
                        in, &flag);
    snprintf(name, sizeof name, "embed %s", names[ti]);
    shim_check(name, e, er, 1e-9);
    if (flag != 0) {
      printf("FAIL embed raised the flag for valid ids\n");
      ++g_failures;
    }
    if (ti == 0) {
      ids = {outr};
      weir_cuda_embed_f16(nullptr, packed.data(), ids.data(), e.data(), 1, outr, in, &flag);
      bool zero = true;
      for (int j = 0; j < in; ++j) zero = zero && e[j] == 0.0f;
      printf("%s embed out-of-range id: flag %d, row zeroed %d\n", flag && zero ? "ok  " : "FAIL",
             flag, zero);
      if (!(flag && zero)) ++g_failures;
    }
  }
  // The scalar GEMV path: rows not a multiple of 8 halves.
  const int in = 100, outr = 17, nt = 3;
  std::vector<__half> w((size_t)in * outr);
  std::vector<float> x((size_t)nt * in);
  for (auto &a : w) a = __float2half_rn(uni(-1, 1));
  for (auto &a : x) a = uni(-1, 1);
  const std::vector<double> yr = gemv_ref(w.data(), x, nt, in, outr);
  auto y = poisoned(yr.size());
  weir_cuda_gemv_f16(nullptr, w.data(), x.data(), y.data(), in, outr, nt);
  shim_check("gemv scalar path (in = 100)", y, yr, 1e-5);
  // f32 -> f16 with saturation.
  std::vector<float> big = {1.0f, -70000.0f, 3.14159f, 1e9f};
  std::vector<__half> hb(4);
  weir_cuda_f32_to_f16(nullptr, hb.data(), big.data(), 4);
  const bool sat = __half2float(hb[1]) == -65504.0f && __half2float(hb[3]) == 65504.0f &&
                   __half2float(hb[2]) == h2f(3.14159f);
  printf("%s f32_to_f16 rounds and saturates\n", sat ? "ok  " : "FAIL");
  if (!sat) ++g_failures;
}

// The tiled f16 GEMV (2 rows per warp up to 4 tokens, 4 rows from 5; 8 or 4 chunks per lane
// in flight) at the shapes its predication and row clamping must get right: rows not a
// multiple of R (1, 5, 17), rows of 1 chunk, 65 chunks (the 4-row kernel's 128-chunk step
// half empty) and 257 chunks (the 2-row kernel's 256-chunk step plus a 1-chunk tail), every
// token count 1..8. x and W are sized exactly, so a read past them is an ASan error here; y is
// NaN-poisoned, so an unwritten row fails. Checked against double sums and against the
// row-per-warp kernel (weir_cuda_gemv_f16_rows) it replaces.
static void gemv_tile_shapes() {
  const int ins[] = {8, 520, 2056}, outs[] = {1, 5, 17};
  int bad_shapes = 0;
  for (int in : ins)
    for (int outr : outs) {
      std::vector<__half> w((size_t)in * outr);
      for (auto &a : w) a = __float2half_rn(uni(-1, 1));
      for (int nt = 1; nt <= 8; ++nt) {
        std::vector<float> x((size_t)nt * in);
        for (auto &a : x) a = uni(-1, 1);
        const std::vector<double> yr = gemv_ref(w.data(), x, nt, in, outr);
        auto y = poisoned(yr.size()), yb = poisoned(yr.size());
        const cudaError_t e1 = weir_cuda_gemv_f16(nullptr, w.data(), x.data(), y.data(), in, outr, nt);
        const cudaError_t e2 =
            weir_cuda_gemv_f16_rows(nullptr, w.data(), x.data(), yb.data(), in, outr, nt);
        // Errors relative to each output's sum of |w x| (f32 rounding grows with it, not
        // with the result, which may cancel to near zero).
        double worst = 0.0, worst_b = 0.0;
        for (int t = 0; t < nt; ++t)
          for (int o = 0; o < outr; ++o) {
            double mag = 1e-30;
            for (int i = 0; i < in; ++i)
              mag += std::fabs((double)__half2float(w[(size_t)o * in + i]) * x[(size_t)t * in + i]);
            const size_t k = (size_t)t * outr + o;
            const double d = std::isfinite(y[k]) ? std::fabs(y[k] - yr[k]) : INFINITY;
            const double db = std::isfinite(y[k]) && std::isfinite(yb[k])
                                  ? std::fabs((double)y[k] - yb[k]) : INFINITY;
            worst = std::max(worst, d / mag);
            worst_b = std::max(worst_b, db / mag);
          }
        if (e1 != cudaSuccess || e2 != cudaSuccess || !(worst <= 1e-5) || !(worst_b <= 1e-6)) {
          printf("FAIL gemv tile in %d out %d tokens %d: rel error %.3g vs double, %.3g vs rows "
                 "kernel (errors %d %d)\n", in, outr, nt, worst, worst_b, (int)e1, (int)e2);
          ++g_failures;
          ++bad_shapes;
        }
      }
    }
  printf("%s gemv tile: 72 shapes (in 8/520/2056 x out 1/5/17 x 1..8 tokens)\n",
         bad_shapes ? "FAIL" : "ok  ");
  // Token counts outside 1..8 are refused, y untouched.
  std::vector<__half> w(64, __float2half_rn(1.0f));
  std::vector<float> x(9 * 8, 1.0f);
  auto y = poisoned(9 * 8);
  const bool refused = weir_cuda_gemv_f16(nullptr, w.data(), x.data(), y.data(), 8, 8, 0) ==
                           cudaErrorInvalidValue &&
                       weir_cuda_gemv_f16(nullptr, w.data(), x.data(), y.data(), 8, 8, 9) ==
                           cudaErrorInvalidValue &&
                       std::isnan(y[0]);
  printf("%s gemv refuses 0 and 9 tokens\n", refused ? "ok  " : "FAIL");
  if (!refused) ++g_failures;
}

// ---- greedy picks (ABI 1.8 argmax_rows) ----------------------------------------------------

// The engine's host rule for a draft row (engine_spec.c argmax_row, then the head's id): the
// first index whose value beats every earlier one, from -inf, `fallback` when none does.
static int32_t host_argmax(const float *x, int64_t n, const int32_t *ids, int32_t fallback) {
  int64_t best = -1;
  float bv = -INFINITY;
  for (int64_t v = 0; v < n; v++)
    if (x[v] > bv) {
      bv = x[v];
      best = v;
    }
  return best < 0 ? fallback : ids ? ids[best] : (int32_t)best;
}

// 1 / sum exp(x - max) in double (0 where the host's top_prob gives 0).
static double host_top_prob(const float *x, int64_t n) {
  int64_t best = -1;
  float bv = -INFINITY;
  for (int64_t v = 0; v < n; v++)
    if (x[v] > bv) {
      bv = x[v];
      best = v;
    }
  if (best < 0) return 0;
  double sum = 0;
  for (int64_t v = 0; v < n; v++) sum += std::exp((double)x[v] - bv);
  return sum == sum && sum > 0 ? 1.0 / sum : 0;
}

// Rows that exercise the rule: random logits, ties for the largest value spread over threads
// (the same thread, neighbouring threads, far apart; the lowest index must win), a row of one
// value everywhere, rows with nothing above -inf (all -inf; NaN and -inf), NaN before and
// after the largest, the largest at the last index; n below, at and above the block size.
static std::vector<float> argmax_cases(int64_t n, int *rows) {
  const int R = 10;
  std::vector<float> x((size_t)R * n);
  for (auto &a : x) a = uni(-8, 8);
  float *r1 = x.data() + n; // ties: indices n-1, n/2, n/2 - 1 + 256, 1 hold the largest
  for (int64_t i : {n - 1, n / 2, (n / 2 + 255) % n, (int64_t)(n > 1)}) r1[i] = 9.5f;
  float *r2 = x.data() + 2 * n; // ties in one thread's share (i and i + 256) and neighbours
  for (int64_t i : {(int64_t)600 % n, (int64_t)344 % n, (int64_t)345 % n}) r2[i] = 12.0f;
  float *r3 = x.data() + 3 * n; // one value everywhere: index 0
  for (int64_t i = 0; i < n; i++) r3[i] = 0.25f;
  float *r4 = x.data() + 4 * n; // all -inf: fallback
  for (int64_t i = 0; i < n; i++) r4[i] = -INFINITY;
  float *r5 = x.data() + 5 * n; // NaN and -inf only: fallback
  for (int64_t i = 0; i < n; i++) r5[i] = i % 3 ? -INFINITY : NAN;
  float *r6 = x.data() + 6 * n; // NaN first, the largest later, NaN after it
  r6[0] = NAN;
  r6[n - 1 > 0 ? n - 1 : 0] = NAN;
  if (n > 2) r6[n / 3 + 1] = 20.0f;
  float *r7 = x.data() + 7 * n; // the largest at the last index
  r7[n - 1] = 30.0f;
  float *r8 = x.data() + 8 * n; // a sharp row: top probability near 1
  r8[n / 4] = 60.0f;
  *rows = R; // row 9: random
  return x;
}

static void argmax_rows_case(int64_t n, bool with_ids) {
  int rows = 0;
  std::vector<float> x = argmax_cases(n, &rows);
  std::vector<int32_t> ids;
  if (with_ids) { // a head of n ids out of a larger vocabulary, not in order (drafter.head_vocab)
    ids.resize((size_t)n);
    for (int64_t i = 0; i < n; i++) ids[(size_t)i] = (int32_t)((i * 7919 + 13) % (4 * n + 1));
  }
  const int32_t *idp = with_ids ? ids.data() : nullptr;
  std::vector<int32_t> out((size_t)rows, -7);
  std::vector<float> prob = poisoned((size_t)rows);
  const cudaError_t rc =
      weir_cuda_argmax_rows(nullptr, out.data(), prob.data(), x.data(), rows, n, idp, 5);
  int bad = rc == cudaSuccess ? 0 : 1;
  std::vector<double> pref((size_t)rows);
  for (int r = 0; r < rows; r++) {
    const int32_t want = host_argmax(x.data() + (size_t)r * n, n, idp, 5);
    if (out[(size_t)r] != want) {
      if (bad++ < 3) printf("     row %d: %d, host %d\n", r, out[(size_t)r], want);
    }
    pref[(size_t)r] = host_top_prob(x.data() + (size_t)r * n, n);
  }
  // Rows 4 and 5 have nothing above -inf: the fallback, probability 0.
  if (out[4] != 5 || out[5] != 5) bad++;
  char name[96];
  snprintf(name, sizeof name, "argmax_rows n=%lld%s == host argmax (ties, -inf, NaN)",
           (long long)n, with_ids ? " with head ids" : "");
  printf("%s %s\n", bad ? "FAIL" : "ok  ", name);
  if (bad) ++g_failures;
  snprintf(name, sizeof name, "argmax_rows n=%lld%s top probability", (long long)n,
           with_ids ? " with head ids" : "");
  shim_check(name, prob, pref, 1e-5);
  // Without prob: the same picks; rows = 0 writes nothing; bad shapes are refused.
  std::vector<int32_t> out2((size_t)rows, -7);
  weir_cuda_argmax_rows(nullptr, out2.data(), nullptr, x.data(), rows, n, idp, 5);
  int32_t untouched = -7;
  const bool same = out2 == out &&
                    weir_cuda_argmax_rows(nullptr, &untouched, nullptr, x.data(), 0, n, idp, 5) ==
                        cudaSuccess &&
                    untouched == -7 &&
                    weir_cuda_argmax_rows(nullptr, &untouched, nullptr, x.data(), 1, 0, idp, 5) !=
                        cudaSuccess &&
                    weir_cuda_argmax_rows(nullptr, &untouched, nullptr, x.data(), -1, n, idp, 5) !=
                        cudaSuccess &&
                    untouched == -7;
  snprintf(name, sizeof name, "argmax_rows n=%lld without prob, empty and bad shapes",
           (long long)n);
  printf("%s %s\n", same ? "ok  " : "FAIL", name);
  if (!same) ++g_failures;
}

static void argmax_rows_all() {
  for (int64_t n : {1LL, 5LL, 256LL, 1000LL, 1024LL, 4096LL}) {
    argmax_rows_case(n, false);
    argmax_rows_case(n, true);
  }
}

#ifdef WEIR_SHIM_DEVICE_CPU
// The CPU device's add_rms_norm (ABI 1.7) as the reference of the CUDA kernel, as the engine
// calls both: out == x (the sublayer output), the residual updated in place.
static void add_rms_norm_vs_cpu_device() {
  shim_plugin pl;
  if (!shim_load_plugin("weir_device_cpu.so", nullptr, 0, &pl)) {
    ++g_failures;
    return;
  }
  const weir_device_ops *ops = (const weir_device_ops *)pl.ops;
  void *self = pl.self;
  if (!WEIR_HAS_FIELD(ops, weir_device_ops, add_rms_norm) || !ops->add_rms_norm) {
    printf("FAIL the CPU device has no add_rms_norm (ABI 1.7)\n");
    ++g_failures;
    return;
  }
  const int shapes[3][2] = {{3, 2048}, {5, 770}, {1, 64}};
  for (auto &sh : shapes) {
    const int rows = sh[0], dim = sh[1];
    const size_t n = (size_t)rows * dim;
    std::vector<float> x(n), res(n), w(dim);
    for (auto &a : x) a = uni(-3, 3);
    for (auto &a : res) a = uni(-2, 2);
    for (auto &a : w) a = uni(0.5f, 1.5f);
    // CPU fused, out aliasing x.
    std::vector<float> cx = x, cres = res;
    const int rc = ops->add_rms_norm(self, cx.data(), cres.data(), cx.data(), w.data(), rows, dim,
                                     1e-5f);
    // CPU unfused: add then rms_norm.
    std::vector<float> ux = x, ures = res;
    ops->add(self, ures.data(), ures.data(), ux.data(), (int64_t)n);
    ops->rms_norm(self, ux.data(), ures.data(), w.data(), rows, dim, 1e-5f);
    const bool bit_equal = rc == WEIR_OK && memcmp(cx.data(), ux.data(), n * 4) == 0 &&
                           memcmp(cres.data(), ures.data(), n * 4) == 0;
    char name[96];
    snprintf(name, sizeof name, "cpu device add_rms_norm %dx%d == add + rms_norm", rows, dim);
    printf("%s %s\n", bit_equal ? "ok  " : "FAIL", name);
    if (!bit_equal) ++g_failures;
    // The CUDA kernel, out aliasing x likewise.
    std::vector<float> gx = x, gres = res;
    weir_cuda_add_rms_norm(nullptr, gx.data(), gres.data(), gx.data(), w.data(), rows, dim, 1e-5f);
    snprintf(name, sizeof name, "add_rms_norm kernel %dx%d vs cpu device", rows, dim);
    shim_check(name, gx, std::vector<double>(cx.begin(), cx.end()), 1e-6);
    snprintf(name, sizeof name, "add_rms_norm kernel %dx%d residual vs cpu device", rows, dim);
    shim_check(name, gres, std::vector<double>(cres.begin(), cres.end()), 1e-7);
  }
  // Bad input is refused, nothing written.
  float one = 1.0f;
  const bool refused = ops->add_rms_norm(self, &one, &one, &one, &one, -1, 1, 1e-5f) == WEIR_E_INVAL &&
                       ops->add_rms_norm(self, &one, nullptr, &one, &one, 1, 1, 1e-5f) == WEIR_E_INVAL &&
                       one == 1.0f;
  printf("%s cpu device add_rms_norm refuses negative rows and NULL\n", refused ? "ok  " : "FAIL");
  if (!refused) ++g_failures;
  pl.desc->fini(self);
}
// The CPU device's argmax_rows (ABI 1.8) against the CUDA kernel: the same picks on the same
// rows (ties, -inf, NaN, head ids), the same top probability within float rounding.
static void argmax_rows_vs_cpu_device() {
  shim_plugin pl;
  if (!shim_load_plugin("weir_device_cpu.so", nullptr, 0, &pl)) {
    ++g_failures;
    return;
  }
  const weir_device_ops *ops = (const weir_device_ops *)pl.ops;
  void *self = pl.self;
  if (!WEIR_HAS_FIELD(ops, weir_device_ops, argmax_rows) || !ops->argmax_rows) {
    printf("FAIL the CPU device has no argmax_rows (ABI 1.8)\n");
    ++g_failures;
    pl.desc->fini(self);
    return;
  }
  for (int64_t n : {7LL, 1024LL, 4096LL}) {
    int rows = 0;
    std::vector<float> x = argmax_cases(n, &rows);
    std::vector<int32_t> ids((size_t)n);
    for (int64_t i = 0; i < n; i++) ids[(size_t)i] = (int32_t)(n - 1 - i);
    for (int with_ids = 0; with_ids < 2; with_ids++) {
      const int32_t *idp = with_ids ? ids.data() : nullptr;
      std::vector<int32_t> c((size_t)rows, -1), g((size_t)rows, -2);
      std::vector<float> cp((size_t)rows), gp = poisoned((size_t)rows);
      const int rc = ops->argmax_rows(self, c.data(), cp.data(), x.data(), rows, n, idp, 0);
      weir_cuda_argmax_rows(nullptr, g.data(), gp.data(), x.data(), rows, n, idp, 0);
      char name[96];
      snprintf(name, sizeof name, "cpu device argmax_rows n=%lld%s == kernel", (long long)n,
               with_ids ? " ids" : "");
      const bool ok = rc == WEIR_OK && c == g;
      printf("%s %s\n", ok ? "ok  " : "FAIL", name);
      if (!ok) ++g_failures;
      snprintf(name, sizeof name, "cpu device argmax_rows n=%lld%s top probability",
               (long long)n, with_ids ? " ids" : "");
      shim_check(name, gp, std::vector<double>(cp.begin(), cp.end()), 1e-5);
    }
  }
  int32_t o = 3;
  float one = 1.0f;
  const bool refused = ops->argmax_rows(self, &o, nullptr, &one, -1, 1, nullptr, 0) == WEIR_E_INVAL &&
                       ops->argmax_rows(self, &o, nullptr, &one, 1, 0, nullptr, 0) == WEIR_E_INVAL &&
                       ops->argmax_rows(self, nullptr, nullptr, &one, 1, 1, nullptr, 0) == WEIR_E_INVAL &&
                       o == 3;
  printf("%s cpu device argmax_rows refuses bad shapes and NULL\n", refused ? "ok  " : "FAIL");
  if (!refused) ++g_failures;
  pl.desc->fini(self);
}
#endif

int main() {
#ifdef WEIR_SHIM_DEVICE_CPU
  add_rms_norm_vs_cpu_device();
  argmax_rows_vs_cpu_device();
#endif
  argmax_rows_all();
  rms_norm(3, 1024);
  rms_norm(2, 770);  // not a multiple of 4: scalar path
  rope(0, 2, 64, 64);
  rope(2, 3, 64, 64);
  rope(0, 1, 64, 32);
  rope(2, 2, 80, 40);
  small_ops();
  encoder_ops();
  family_ops(0, 2, 64, 64);
  family_ops(2, 3, 128, 128);
  family_ops(2, 2, 80, 40);
  pack_gemv_embed();
  gemv_tile_shapes();
  if (g_failures) printf("%d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
