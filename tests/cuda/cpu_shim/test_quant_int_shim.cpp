// kernels/cuda/quant_int8.cu and quant_int4.cu executed on the CPU (cuda_shim.h) through their
// own C launchers, against the CPU plugins (dlopen'ed from the build tree) and double-precision
// references. Outputs are NaN-poisoned first.
//  - int8: weir_cuda_pack_q8 from every GGUF source type gives exactly the values the CPU int8
//    plugin (group 32) holds (compared through its embed); the GEMV (1..8 tokens) against the
//    packed values in double (1e-5) and against the CPU plugin's matmul (which rounds the
//    activations to int8 per 32 columns: relative L2 3e-2 for these small cases); dequant to
//    f16; embed with an out-of-range id.
//  - int8 dp4a: activations quantized byte-exactly by the CPU int8 rule; one launch over a
//    group of 1-3 weights of different heights (and odd widths: cols 100, 1536) at 1, 3, 8,
//    16 and 21 (two tiles) tokens against double block sums (1e-6) and the CPU plugin's
//    matmul (1e-5); a NaN activation reaches only its own token; refusals.
//  - int4 dp4a: x times the inverse AWQ scale quantized byte-exactly by the CPU rule, the dp4a
//    GEMV at 1, 3, 8, 16, 19 (two tiles) tokens against double block sums (1e-6) and the CPU
//    awq_int4 plugin's matmul (1e-5), for groups of 32, 64, 128 and a symmetric weight; three
//    weights in one launch (the set launcher) equal their single launches bit for bit.
//  - int4: the CPU awq_int4 plugin packs F16 weights with calibration samples (AWQ scales) and
//    exports Q4_1 + the scales; the GPU layout is built from those bytes (as the CUDA plugin
//    builds it from a Q4_1 source) for groups of 32, 64 and 128, plus a symmetric (Q4_0-style)
//    weight; GEMV, dequant and embed against double references of W (x / s), and the GEMV
//    against the CPU plugin's matmul.
// On a GPU machine cuda_quant_int checks the plugins on the device.
#include <cuda_fp16.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "weir/quant.h"
#include "shim_plugin.h"
#include "shim_test.h"
#include "weir_cuda_kernels.h"

static uint64_t g_rng = 0xA11CE5EEDull;

static float uni(float lo, float hi) { return shim_uniform(&g_rng, lo, hi); }

static std::vector<float> poisoned(size_t n) { return shim_poisoned(n); }

static uint16_t f2h(float x) { return __half_as_ushort(__float2half_rn(x)); }
static float h2f(uint16_t u) { return __half2float(__ushort_as_half(u)); }

// ---- the CPU plugins -------------------------------------------------------------------------
struct cpu_plugin {
  const weir_quant_ops *ops = nullptr;
  void *self = nullptr;
};

static bool load_cpu(const char *file, cpu_plugin *out, int64_t group) {
  shim_plugin pl;
  if (!shim_load_plugin(file, "group_size", group, &pl)) {
    ++g_failures;
    return false;
  }
  out->ops = (const weir_quant_ops *)pl.ops;
  out->self = pl.self;
  return true;
}

// ---- int8 ------------------------------------------------------------------------------------

// A GGUF source of type `type`, [rows][cols], random values of mixed magnitude.
static std::vector<unsigned char> source(int type, int rows, int cols) {
  const size_t rb = weir_dtype_row_bytes((weir_dtype)type, cols);
  std::vector<unsigned char> buf(rb * rows);
  for (int r = 0; r < rows; ++r) {
    unsigned char *row = buf.data() + rb * r;
    for (int c = 0; c < cols; ++c) {
      const float v = uni(-1, 1) * (c % 29 == 0 ? 6.0f : 1.0f);
      if (type == 0) memcpy(row + 4 * c, &v, 4);
      if (type == 1) {
        uint16_t h = f2h(v);
        memcpy(row + 2 * c, &h, 2);
      }
      if (type == 30) {
        uint32_t b;
        memcpy(&b, &v, 4);
        uint16_t h = (uint16_t)(b >> 16);
        memcpy(row + 2 * c, &h, 2);
      }
    }
    if (type == 8 || type == 2 || type == 3) {
      const size_t bb = weir_dtype_block_bytes((weir_dtype)type);
      for (int b = 0; b < cols / 32; ++b) {
        unsigned char *blk = row + bb * b;
        for (size_t i = 0; i < bb; ++i) blk[i] = (unsigned char)(g_rng = g_rng * 6364136223846793005ull + 1, g_rng >> 56);
        uint16_t d = f2h(uni(0.002f, 0.05f)), m = f2h(uni(-0.4f, 0.1f));
        memcpy(blk, &d, 2);
        if (type == 3) memcpy(blk + 2, &m, 2);
      }
    }
  }
  return buf;
}

static void int8_case(int type, const char *tname, int rows, int cols) {
  cpu_plugin cpu;
  if (!load_cpu("weir_quant_int8.so", &cpu, 32)) return;
  auto src = source(type, rows, cols);
  const int64_t kp = (cols + 31) / 32 * 32;
  std::vector<signed char> q((size_t)rows * kp);
  std::vector<float> d((size_t)rows * (kp / 32));
  memset(q.data(), 0x55, q.size());
  weir_cuda_pack_q8(nullptr, q.data(), d.data(), src.data(), type, rows, cols, kp,
                    src.size() / rows);
  // The CPU plugin's values for the same source.
  weir_tensor t = {src.data(), (weir_dtype)type, 2, {cols, rows, 1, 1},
                   {0, src.size() / rows, 0, 0}};
  weir_quant_pack_args pa = {sizeof pa, &t, "w", nullptr, 0};
  void *w = nullptr;
  cpu.ops->pack(cpu.self, &pa, &w);
  std::vector<int32_t> ids(rows);
  for (int r = 0; r < rows; ++r) ids[r] = r;
  std::vector<float> cpu_w((size_t)rows * cols);
  cpu.ops->embed(cpu.self, w, ids.data(), cpu_w.data(), rows);
  std::vector<float> gpu_w((size_t)rows * cols);
  std::vector<double> ref_w(gpu_w.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      gpu_w[(size_t)r * cols + c] = (float)q[(size_t)r * kp + c] * d[(size_t)r * (kp / 32) + c / 32];
      ref_w[(size_t)r * cols + c] = cpu_w[(size_t)r * cols + c];
    }
  char name[96];
  snprintf(name, sizeof name, "pack_q8 from %s = the CPU int8 plugin's values", tname);
  shim_check(name, gpu_w, ref_w, 0);
  for (int nt = 1; nt <= 8; nt += 7) {
    std::vector<float> x((size_t)nt * cols);
    for (auto &a : x) a = uni(-1, 1);
    std::vector<double> yr((size_t)nt * rows, 0.0), yc((size_t)nt * rows);
    for (int tk = 0; tk < nt; ++tk)
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
          yr[(size_t)tk * rows + r] += (double)gpu_w[(size_t)r * cols + c] * x[(size_t)tk * cols + c];
    auto y = poisoned(yr.size());
    weir_cuda_gemv_q8(nullptr, q.data(), d.data(), x.data(), y.data(), cols, kp, rows, nt);
    snprintf(name, sizeof name, "gemv_q8 %d token(s), %s", nt, tname);
    shim_check(name, y, yr, 1e-5);
    std::vector<float> ycpu(yr.size());
    cpu.ops->matmul(cpu.self, w, x.data(), ycpu.data(), nt);
    for (size_t i = 0; i < yc.size(); ++i) yc[i] = ycpu[i];
    snprintf(name, sizeof name, "gemv_q8 %d token(s) vs the CPU plugin's matmul, %s", nt, tname);
    shim_check(name, y, yc, 3e-2);
  }
  std::vector<__half> f16((size_t)rows * cols);
  weir_cuda_dequant_q8_f16(nullptr, f16.data(), q.data(), d.data(), rows, cols, kp);
  std::vector<float> got(f16.size());
  std::vector<double> want(f16.size());
  for (size_t i = 0; i < got.size(); ++i) {
    got[i] = __half2float(f16[i]);
    want[i] = h2f(f2h(gpu_w[i]));
  }
  snprintf(name, sizeof name, "dequant_q8_f16, %s", tname);
  shim_check(name, got, want, 0);
  std::vector<int32_t> eid = {rows - 1, 0, rows};
  auto e = poisoned((size_t)3 * cols);
  int flag = 0;
  weir_cuda_embed_q8(nullptr, q.data(), d.data(), eid.data(), e.data(), 3, rows, cols, kp, &flag);
  std::vector<double> er((size_t)3 * cols, 0.0);
  for (int c = 0; c < cols; ++c) {
    er[c] = gpu_w[(size_t)(rows - 1) * cols + c];
    er[cols + c] = gpu_w[c];
  }
  snprintf(name, sizeof name, "embed_q8 (third id out of range: zeros), %s", tname);
  shim_check(name, e, er, 0);
  if (!flag) {
    printf("FAIL embed_q8 did not raise the flag for an id out of range\n");
    ++g_failures;
  }
  cpu.ops->release(cpu.self, w);
}

// ---- int8 dp4a GEMV (quantized activations, up to 4 weights per launch) ----------------------

// The CPU int8 plugin's activation rule (kernels/cpu/matmul_q8.c), written out here so that the
// kernel's quantized activations are checked byte for byte.
static void ref_quantize_act(const float *x, int64_t cols, int64_t kp, signed char *q, float *d) {
  for (int64_t g0 = 0; g0 < kp; g0 += 32) {
    float amax = 0.0f;
    bool finite = true;
    for (int64_t k = g0; k < g0 + 32 && k < cols; ++k) {
      const float a = fabsf(x[k]);
      if (!(a <= 3.4e38f)) finite = false;
      else amax = a > amax ? a : amax;
    }
    float dd = amax / 127.0f, inv = dd > 0.0f ? 1.0f / dd : 0.0f;
    if (!(inv <= 3.4e38f)) inv = 0.0f, dd = 0.0f;
    for (int64_t k = g0; k < g0 + 32; ++k) {
      float v = k < cols && finite ? nearbyintf(x[k] * inv) : 0.0f;
      v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
      q[k] = (signed char)v;
    }
    d[g0 / 32] = finite ? dd : NAN;
  }
}

struct packed_q8 {
  int64_t rows, cols, kp;
  std::vector<signed char> q;
  std::vector<float> d;
  void *cpu_w = nullptr; // the CPU int8 plugin's weight from the same source
};

static packed_q8 pack_both(const cpu_plugin &cpu, int type, int rows, int cols) {
  packed_q8 p;
  p.rows = rows;
  p.cols = cols;
  p.kp = (cols + 31) / 32 * 32;
  auto src = source(type, rows, cols);
  p.q.assign((size_t)rows * p.kp, 0x55);
  p.d.assign((size_t)rows * (p.kp / 32), 0.0f);
  weir_cuda_pack_q8(nullptr, p.q.data(), p.d.data(), src.data(), type, rows, cols, p.kp,
                    src.size() / rows);
  weir_tensor t = {src.data(), (weir_dtype)type, 2, {cols, rows, 1, 1},
                   {0, src.size() / rows, 0, 0}};
  weir_quant_pack_args pa = {sizeof pa, &t, "w", nullptr, 0};
  cpu.ops->pack(cpu.self, &pa, &p.cpu_w);
  return p;
}

// One launch over the weights `ws` for nt tokens: the activations quantized byte-exactly by
// the CPU rule; each output against (a) a double sum of d_w d_x sum(q_w q_x) per block (1e-6),
// (b) the CPU int8 plugin's matmul on the same f32 activations (it quantizes them by the same
// rule: 1e-5, the order of float sums only). A NaN planted in the last token reaches only it.
static void dp4a_case(const cpu_plugin &cpu, const std::vector<packed_q8 *> &ws, int nt,
                      const char *what, bool plant_nan) {
  const int64_t cols = ws[0]->cols, kp = ws[0]->kp;
  std::vector<float> x((size_t)nt * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = uni(-1, 1) * (i % 13 == 0 ? 8.0f : 1.0f);
  if (plant_nan) x[(size_t)(nt - 1) * cols + cols / 2] = NAN;
  const size_t ab = weir_cuda_q8_act_bytes(nt, kp);
  void *act = aligned_alloc(256, (ab + 255) / 256 * 256);
  memset(act, 0x7f, ab);
  char name[160];
  if (weir_cuda_q8_quantize_act(nullptr, x.data(), nullptr, act, nt, cols, kp) != cudaSuccess) {
    printf("FAIL q8_quantize_act refused %s\n", what);
    ++g_failures;
    free(act);
    return;
  }
  const signed char *xq = (const signed char *)act;
  const float *xd = (const float *)(xq + ((size_t)nt * kp + 255) / 256 * 256);
  std::vector<signed char> rq((size_t)nt * kp);
  std::vector<float> rd((size_t)nt * (kp / 32));
  for (int t = 0; t < nt; ++t)
    ref_quantize_act(x.data() + (size_t)t * cols, cols, kp, rq.data() + (size_t)t * kp,
                     rd.data() + (size_t)t * (kp / 32));
  bool same = memcmp(rq.data(), xq, rq.size()) == 0;
  for (size_t i = 0; i < rd.size(); ++i)
    same = same && (rd[i] == xd[i] || (std::isnan(rd[i]) && std::isnan(xd[i])));
  printf("%s q8_quantize_act = the CPU int8 rule byte for byte, %s\n", same ? "ok  " : "FAIL",
         what);
  if (!same) ++g_failures;
  const int n = (int)ws.size();
  std::vector<std::vector<float>> ys(n);
  const void *qp[4];
  const float *dp[4];
  int64_t rows[4];
  float *yp[4];
  for (int i = 0; i < n; ++i) {
    ys[i] = poisoned((size_t)nt * ws[i]->rows);
    qp[i] = ws[i]->q.data();
    dp[i] = ws[i]->d.data();
    rows[i] = ws[i]->rows;
    yp[i] = ys[i].data();
  }
  if (weir_cuda_gemv_q8_dp4a(nullptr, n, qp, dp, rows, yp, act, kp, nt) != cudaSuccess) {
    printf("FAIL gemv_q8_dp4a refused %s\n", what);
    ++g_failures;
    free(act);
    return;
  }
  for (int i = 0; i < n; ++i) {
    const packed_q8 &w = *ws[i];
    const int live = plant_nan ? nt - 1 : nt; // tokens compared by value
    std::vector<double> ref((size_t)live * w.rows);
    std::vector<float> got(ref.size());
    for (int t = 0; t < live; ++t)
      for (int64_t r = 0; r < w.rows; ++r) {
        double acc = 0.0;
        for (int64_t g = 0; g < kp / 32; ++g) {
          long s = 0;
          for (int64_t k = g * 32; k < g * 32 + 32; ++k)
            s += (long)w.q[(size_t)r * kp + k] * (long)xq[(size_t)t * kp + k];
          acc += (double)w.d[(size_t)r * (kp / 32) + g] * (double)xd[(size_t)t * (kp / 32) + g] *
                 (double)s;
        }
        ref[(size_t)t * w.rows + r] = acc;
        got[(size_t)t * w.rows + r] = ys[i][(size_t)t * w.rows + r];
      }
    snprintf(name, sizeof name, "gemv_q8_dp4a weight %d of %d (%lld rows), %d token(s), %s", i + 1,
             n, (long long)w.rows, nt, what);
    shim_check(name, got, ref, 1e-6);
    std::vector<float> yc((size_t)nt * w.rows);
    cpu.ops->matmul(cpu.self, w.cpu_w, x.data(), yc.data(), nt);
    std::vector<double> ycd(ref.size());
    for (size_t k = 0; k < ycd.size(); ++k) ycd[k] = yc[k];
    snprintf(name, sizeof name, "gemv_q8_dp4a weight %d of %d vs the CPU int8 matmul, %d token(s), %s",
             i + 1, n, nt, what);
    shim_check(name, got, ycd, 1e-5);
    if (plant_nan) {
      bool all_nan = true;
      for (int64_t r = 0; r < w.rows; ++r)
        all_nan = all_nan && std::isnan(ys[i][(size_t)(nt - 1) * w.rows + r]);
      printf("%s gemv_q8_dp4a: a NaN activation turns its own token's outputs NaN, %s\n",
             all_nan ? "ok  " : "FAIL", what);
      if (!all_nan) ++g_failures;
    }
  }
  free(act);
}

static void dp4a_suite() {
  cpu_plugin cpu;
  if (!load_cpu("weir_quant_int8.so", &cpu, 32)) return;
  // q/k/v-like: three weights of different heights on one input (GQA: k and v are shorter).
  packed_q8 wq = pack_both(cpu, 8, 40, 160), wk = pack_both(cpu, 0, 9, 160),
            wv = pack_both(cpu, 1, 13, 160);
  // A row whose 16-byte pieces outnumber a warp's lanes twice over (n16 = 96 > 64).
  packed_q8 wide = pack_both(cpu, 30, 11, 1536);
  // cols 100: a partial 32-column block at the end (kp 128).
  packed_q8 odd = pack_both(cpu, 1, 7, 100), odd2 = pack_both(cpu, 0, 5, 100);
  const int batches[] = {1, 3, 8, 16, 21};
  for (int nt : batches) {
    dp4a_case(cpu, {&wq, &wk, &wv}, nt, "q/k/v-like group of 3 (40, 9, 13 rows x 160)", false);
    dp4a_case(cpu, {&wide}, nt, "one weight, 11 x 1536", false);
    dp4a_case(cpu, {&odd, &odd2}, nt, "group of 2, cols 100 (partial block)", false);
  }
  dp4a_case(cpu, {&wk, &wq, &wv, &wk}, 8, "group of 4 (the most one launch takes)", false);
  dp4a_case(cpu, {&wq, &wk}, 5, "NaN in the last of 5 tokens", true);
  // Refusals: no weights, more than WEIR_CUDA_Q8_MAX_SET, misaligned weights or activations.
  std::vector<float> x(160, 0.5f), y(64);
  void *act = aligned_alloc(256, 4096);
  weir_cuda_q8_quantize_act(nullptr, x.data(), nullptr, act, 1, 160, 160);
  const void *qp[5] = {wq.q.data(), wq.q.data(), wq.q.data(), wq.q.data(), wq.q.data()};
  const float *dp[5] = {wq.d.data(), wq.d.data(), wq.d.data(), wq.d.data(), wq.d.data()};
  int64_t rows[5] = {40, 40, 40, 40, 40};
  float *yp[5] = {y.data(), y.data(), y.data(), y.data(), y.data()};
  const bool refused =
      weir_cuda_gemv_q8_dp4a(nullptr, 0, qp, dp, rows, yp, act, 160, 1) != cudaSuccess &&
      weir_cuda_gemv_q8_dp4a(nullptr, 5, qp, dp, rows, yp, act, 160, 1) != cudaSuccess &&
      weir_cuda_gemv_q8_dp4a(nullptr, 1, qp, dp, rows, yp, (char *)act + 16, 160, 1) !=
          cudaSuccess &&
      weir_cuda_q8_quantize_act(nullptr, x.data(), nullptr, act, 1, 160, 150) != cudaSuccess &&
      weir_cuda_q8_quantize_act(nullptr, x.data(), nullptr, (char *)act + 32, 1, 160, 160) != cudaSuccess;
  const void *mis[1] = {wq.q.data() + 8};
  const bool refused2 = weir_cuda_gemv_q8_dp4a(nullptr, 1, mis, dp, rows, yp, act, 160, 1) !=
                        cudaSuccess;
  printf("%s gemv_q8_dp4a/quantize_act refuse 0 or 5 weights, misaligned act or weights, kp < "
         "cols\n", refused && refused2 ? "ok  " : "FAIL");
  if (!(refused && refused2)) ++g_failures;
  free(act);
  for (packed_q8 *p : {&wq, &wk, &wv, &wide, &odd, &odd2}) cpu.ops->release(cpu.self, p->cpu_w);
}

// ---- int4 ------------------------------------------------------------------------------------

struct gpu_q4 {
  int64_t rows, cols, kp, group, ng;
  std::vector<unsigned char> nib;
  std::vector<uint16_t> d, m;
  std::vector<float> inv_s;
  bool sym;
};

// The GPU layout from Q4_1 bytes (blocks of 32; a group's first block gives its d and m).
static gpu_q4 from_q4_1(const unsigned char *q41, int64_t rows, int64_t cols, int64_t group,
                        const float *s) {
  gpu_q4 g;
  g.rows = rows;
  g.cols = cols;
  g.kp = (cols + 31) / 32 * 32;
  g.group = group;
  g.ng = (g.kp + group - 1) / group;
  g.sym = false;
  g.nib.assign((size_t)rows * g.kp / 2, 0);
  g.d.assign((size_t)rows * g.ng, 0);
  g.m.assign((size_t)rows * g.ng, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      const unsigned char *blk = q41 + (r * (cols / 32) + b) * 20;
      memcpy(&g.nib[(size_t)(r * g.kp / 2 + b * 16)], blk + 4, 16);
      if (b % (group / 32) == 0) {
        memcpy(&g.d[(size_t)(r * g.ng + b * 32 / group)], blk, 2);
        memcpy(&g.m[(size_t)(r * g.ng + b * 32 / group)], blk + 2, 2);
      }
    }
  if (s) {
    g.inv_s.resize(cols);
    for (int64_t k = 0; k < cols; ++k) g.inv_s[k] = 1.0f / s[k];
  }
  return g;
}

static double q4_value(const gpu_q4 &g, int64_t r, int64_t c) {
  const unsigned char *blk = &g.nib[(size_t)(r * g.kp / 2 + (c / 32) * 16)];
  const int j = (int)(c % 32);
  const int qv = j < 16 ? (blk[j] & 15) : (blk[j - 16] >> 4);
  const double d = h2f(g.d[(size_t)(r * g.ng + c / g.group)]);
  const double m = g.sym ? -8 * d : h2f(g.m[(size_t)(r * g.ng + c / g.group)]);
  return (d * qv + m) * (g.inv_s.empty() ? 1.0 : (double)g.inv_s[c]);
}

// The tiled layout (weir_cuda_q4t_repack, what the CUDA awq_int4 plugin uploads): the repack
// puts each row's blocks and scales where the layout says and zeroes the padding rows; for
// every batch of 1..16 tokens (and 19: two tiles of 16) the tiled dp4a GEMV equals the row
// layout's dp4a GEMV bit for bit (same sums, same order), and the CPU awq_int4 plugin's matmul
// (1e-5), writes no row past `rows` (guard values after each output survive); one launch over
// three tiled weights equals their single launches; dequant and embed read the tiled layout
// as the row one (bit-equal); bad shapes and misaligned buffers are refused.
static void q4_tiled(const gpu_q4 &g, const char *what, const cpu_plugin *cpu, void *cpu_w) {
  char name[160];
  const void *mptr = g.sym ? nullptr : g.m.data();
  const float *inv = g.inv_s.empty() ? nullptr : g.inv_s.data();
  size_t tb = 0, sb = 0;
  if (weir_cuda_q4t_bytes(g.rows, g.kp, (int32_t)g.group, &tb, &sb) != 0) {
    printf("FAIL weir_cuda_q4t_bytes refused %lld x %lld group %lld\n", (long long)g.rows,
           (long long)g.kp, (long long)g.group);
    ++g_failures;
    return;
  }
  const int64_t ntiles = (g.rows + 3) / 4, nb = g.kp / 32;
  // 16-byte aligned buffers (the kernels' wide loads), filled with a pattern the repack must
  // overwrite everywhere (padding included).
  unsigned char *tiles = (unsigned char *)aligned_alloc(16, (tb + 15) / 16 * 16);
  uint16_t *sc = (uint16_t *)aligned_alloc(16, (sb + 15) / 16 * 16);
  memset(tiles, 0xA5, tb);
  memset(sc, 0xA5, sb);
  bool layout = tb == (size_t)ntiles * nb * 64 && sb == (size_t)ntiles * g.ng * 16 &&
                weir_cuda_q4t_repack(tiles, sc, g.nib.data(), g.d.data(), mptr, g.rows, g.kp,
                                     (int32_t)g.group) == 0;
  for (int64_t r = 0; layout && r < ntiles * 4; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const unsigned char *got = tiles + (((r / 4) * nb + b) * 4 + r % 4) * 16;
      static const unsigned char zero[16] = {};
      const unsigned char *want = r < g.rows ? &g.nib[(size_t)(r * g.kp / 2 + b * 16)] : zero;
      layout = layout && !memcmp(got, want, 16);
    }
    for (int64_t q = 0; q < g.ng; ++q) {
      const uint16_t *rec = sc + ((r / 4) * g.ng + q) * 8;
      const uint16_t wd = r < g.rows ? g.d[(size_t)(r * g.ng + q)] : 0;
      const uint16_t wm = r < g.rows && !g.sym ? g.m[(size_t)(r * g.ng + q)] : 0;
      layout = layout && rec[r % 4] == wd && rec[4 + r % 4] == wm;
    }
  }
  printf("%s q4t_repack: blocks and scales where the tiled layout puts them, padding zero, %s\n",
         layout ? "ok  " : "FAIL", what);
  if (!layout) ++g_failures;
  const int sym = g.sym ? 1 : 0;
  const float guard = 12345.0f;
  for (int nt = 1; nt <= 19; nt += nt == 16 ? 3 : 1) {
    std::vector<float> x((size_t)nt * g.cols);
    for (auto &a : x) a = uni(-1, 1);
    const size_t ab = weir_cuda_q8_act_bytes(nt, g.kp);
    void *act = aligned_alloc(256, (ab + 255) / 256 * 256);
    weir_cuda_q8_quantize_act(nullptr, x.data(), inv, act, nt, g.cols, g.kp);
    const size_t ny = (size_t)nt * g.rows;
    auto yrow = poisoned(ny);
    const cudaError_t e0 = weir_cuda_gemv_q4_dp4a(nullptr, g.nib.data(), g.d.data(), mptr, act,
                                                  yrow.data(), g.cols, g.kp, g.rows,
                                                  (int32_t)g.group, nt);
    // Three outputs, each followed by 64 guard values.
    std::vector<float> yt[3];
    for (auto &v : yt) {
      v = poisoned(ny + 64);
      for (size_t i = ny; i < v.size(); ++i) v[i] = guard;
    }
    const void *tp[3] = {tiles, tiles, tiles};
    const void *sp[3] = {sc, sc, sc};
    const int syms[3] = {sym, sym, sym};
    const int64_t rws[3] = {g.rows, g.rows, g.rows};
    float *ys[3] = {yt[0].data(), yt[1].data(), yt[2].data()};
    const cudaError_t e1 = weir_cuda_gemv_q4t_dp4a_set(nullptr, 1, tp, sp, syms, rws, ys, act,
                                                       g.cols, g.kp, (int32_t)g.group, nt);
    std::vector<float> y1(yt[0].begin(), yt[0].begin() + (long)ny);
    bool guards = true;
    for (size_t i = ny; i < yt[0].size(); ++i) guards = guards && yt[0][i] == guard;
    const bool same = e0 == cudaSuccess && e1 == cudaSuccess &&
                      !memcmp(y1.data(), yrow.data(), ny * 4);
    printf("%s gemv_q4t_dp4a %d token(s) = gemv_q4_dp4a bit for bit, nothing written past the "
           "rows, %s\n", same && guards ? "ok  " : "FAIL", nt, what);
    if (!(same && guards)) ++g_failures;
    // The set: three tiled weights in one launch, each equal to the single launch.
    ys[0] = yt[1].data();
    ys[1] = yt[2].data();
    yt[0].assign(ny + 64, guard);
    ys[2] = yt[0].data();
    const cudaError_t e2 = weir_cuda_gemv_q4t_dp4a_set(nullptr, 3, tp, sp, syms, rws, ys, act,
                                                       g.cols, g.kp, (int32_t)g.group, nt);
    bool set_ok = e2 == cudaSuccess;
    for (auto &v : yt) {
      set_ok = set_ok && !memcmp(v.data(), y1.data(), ny * 4);
      for (size_t i = ny; i < v.size(); ++i) set_ok = set_ok && v[i] == guard;
    }
    printf("%s gemv_q4t_dp4a_set: 3 tiled weights in one launch = the single launch, %d "
           "token(s), %s\n", set_ok ? "ok  " : "FAIL", nt, what);
    if (!set_ok) ++g_failures;
    if (cpu) {
      std::vector<float> ycpu(ny);
      std::vector<double> yc(ny);
      cpu->ops->matmul(cpu->self, cpu_w, x.data(), ycpu.data(), nt);
      for (size_t i = 0; i < ny; ++i) yc[i] = ycpu[i];
      snprintf(name, sizeof name, "gemv_q4t_dp4a %d token(s) vs the CPU awq_int4 matmul, %s", nt,
               what);
      shim_check(name, y1, yc, 1e-5);
    }
    free(act);
  }
  // dequant and embed through the tiled layout = through the row layout.
  std::vector<__half> fr((size_t)(g.rows * g.cols)), ft(fr.size());
  const bool dq = weir_cuda_dequant_q4_f16(nullptr, fr.data(), g.nib.data(), g.d.data(), mptr,
                                           inv, g.rows, g.cols, g.kp,
                                           (int32_t)g.group) == cudaSuccess &&
                  weir_cuda_dequant_q4t_f16(nullptr, ft.data(), tiles, sc, sym, inv, g.rows,
                                            g.cols, g.kp, (int32_t)g.group) == cudaSuccess &&
                  !memcmp(fr.data(), ft.data(), fr.size() * 2);
  printf("%s dequant_q4t_f16 = dequant_q4_f16, %s\n", dq ? "ok  " : "FAIL", what);
  if (!dq) ++g_failures;
  std::vector<int32_t> eid = {(int32_t)g.rows - 1, 0, (int32_t)g.rows};
  auto er = poisoned((size_t)3 * g.cols), et = poisoned((size_t)3 * g.cols);
  int fr_flag = 0, ft_flag = 0;
  weir_cuda_embed_q4(nullptr, g.nib.data(), g.d.data(), mptr, inv, eid.data(), er.data(), 3,
                     g.rows, g.cols, g.kp, (int32_t)g.group, &fr_flag);
  const bool em = weir_cuda_embed_q4t(nullptr, tiles, sc, sym, inv, eid.data(), et.data(), 3,
                                      g.rows, g.cols, g.kp, (int32_t)g.group,
                                      &ft_flag) == cudaSuccess &&
                  !memcmp(er.data(), et.data(), er.size() * 4) && fr_flag && ft_flag;
  printf("%s embed_q4t = embed_q4 (an id = rows: zeros and the flag), %s\n", em ? "ok  " : "FAIL",
         what);
  if (!em) ++g_failures;
  // Refusals: a bad group, kp not whole blocks, misaligned tiles, NULL buffers.
  std::vector<float> ybuf((size_t)g.rows);
  float *yb = ybuf.data();
  const void *mis[1] = {tiles + 4};
  const bool refused =
      weir_cuda_q4t_bytes(g.rows, g.kp, 48, &tb, &sb) != 0 &&
      weir_cuda_q4t_bytes(g.rows, g.kp + 8, (int32_t)g.group, &tb, &sb) != 0 &&
      weir_cuda_q4t_bytes(0, g.kp, (int32_t)g.group, &tb, &sb) != 0 &&
      weir_cuda_q4t_repack(nullptr, sc, g.nib.data(), g.d.data(), mptr, g.rows, g.kp,
                           (int32_t)g.group) != 0 &&
      weir_cuda_gemv_q4t_dp4a_set(nullptr, 1, mis, (const void *const *)&sc, &sym, &g.rows, &yb,
                                  nullptr, g.cols, g.kp, (int32_t)g.group, 1) ==
          cudaErrorInvalidValue &&
      weir_cuda_gemv_q4t_dp4a_set(nullptr, 5, mis, (const void *const *)&sc, &sym, &g.rows, &yb,
                                  nullptr, g.cols, g.kp, (int32_t)g.group, 1) ==
          cudaErrorInvalidValue &&
      weir_cuda_dequant_q4t_f16(nullptr, ft.data(), tiles, nullptr, sym, inv, g.rows, g.cols,
                                g.kp, (int32_t)g.group) == cudaErrorInvalidValue;
  printf("%s q4t refuses bad groups, shapes, misaligned and NULL buffers, %s\n",
         refused ? "ok  " : "FAIL", what);
  if (!refused) ++g_failures;
  free(tiles);
  free(sc);
}

static void q4_kernels(const gpu_q4 &g, const char *what, const cpu_plugin *cpu, void *cpu_w) {
  char name[128];
  const void *mptr = g.sym ? nullptr : g.m.data();
  const float *inv = g.inv_s.empty() ? nullptr : g.inv_s.data();
  for (int nt = 1; nt <= 8; nt += 7) {
    std::vector<float> x((size_t)nt * g.cols);
    for (auto &a : x) a = uni(-1, 1);
    std::vector<double> yr((size_t)nt * g.rows, 0.0);
    for (int tk = 0; tk < nt; ++tk)
      for (int64_t r = 0; r < g.rows; ++r)
        for (int64_t c = 0; c < g.cols; ++c)
          yr[(size_t)(tk * g.rows + r)] += q4_value(g, r, c) * x[(size_t)(tk * g.cols + c)];
    auto y = poisoned(yr.size());
    weir_cuda_gemv_q4(nullptr, g.nib.data(), g.d.data(), mptr, inv, x.data(), y.data(), g.cols,
                      g.kp, g.rows, (int32_t)g.group, nt);
    snprintf(name, sizeof name, "gemv_q4 %d token(s), %s", nt, what);
    shim_check(name, y, yr, 1e-5);
    if (cpu) {
      std::vector<float> ycpu(yr.size());
      std::vector<double> yc(yr.size());
      cpu->ops->matmul(cpu->self, cpu_w, x.data(), ycpu.data(), nt);
      for (size_t i = 0; i < yc.size(); ++i) yc[i] = ycpu[i];
      snprintf(name, sizeof name, "gemv_q4 %d token(s) vs the CPU awq_int4 matmul, %s", nt, what);
      shim_check(name, y, yc, 3e-2);
    }
  }
  // The dp4a GEMV: x (times inv_s) quantized by the int8 rule (byte-exact with the CPU rule
  // as checked above), against double block sums xd (d sum(q xq) + m sum(xq)) (1e-6) and the
  // CPU awq_int4 plugin's matmul, which quantizes the same way (1e-5).
  for (int nt : {1, 3, 8, 16, 19}) {
    std::vector<float> x((size_t)nt * g.cols);
    for (auto &a : x) a = uni(-1, 1);
    const size_t ab = weir_cuda_q8_act_bytes(nt, g.kp);
    void *act = aligned_alloc(256, (ab + 255) / 256 * 256);
    weir_cuda_q8_quantize_act(nullptr, x.data(), inv, act, nt, g.cols, g.kp);
    const signed char *xq = (const signed char *)act;
    const float *xd = (const float *)(xq + ((size_t)nt * g.kp + 255) / 256 * 256);
    std::vector<signed char> rq((size_t)g.kp);
    std::vector<float> rd((size_t)g.kp / 32), xs((size_t)g.cols);
    bool same = true;
    for (int tk = 0; tk < nt; ++tk) {
      for (int64_t c = 0; c < g.cols; ++c)
        xs[c] = inv ? x[(size_t)(tk * g.cols + c)] * inv[c] : x[(size_t)(tk * g.cols + c)];
      ref_quantize_act(xs.data(), g.cols, g.kp, rq.data(), rd.data());
      same = same && !memcmp(rq.data(), xq + (size_t)tk * g.kp, rq.size()) &&
             !memcmp(rd.data(), xd + (size_t)tk * (g.kp / 32), rd.size() * 4);
    }
    printf("%s q8_quantize_act with inv_s = the CPU awq_int4 activation rule, %d token(s), %s\n",
           same ? "ok  " : "FAIL", nt, what);
    if (!same) ++g_failures;
    std::vector<double> yr((size_t)nt * g.rows, 0.0);
    for (int tk = 0; tk < nt; ++tk)
      for (int64_t r = 0; r < g.rows; ++r)
        for (int64_t b = 0; b < g.kp / 32; ++b) {
          const unsigned char *blk = &g.nib[(size_t)(r * g.kp / 2 + b * 16)];
          const double d = h2f(g.d[(size_t)(r * g.ng + b * 32 / g.group)]);
          const double m = g.sym ? -8 * d : h2f(g.m[(size_t)(r * g.ng + b * 32 / g.group)]);
          long sq = 0, sx = 0;
          for (int j = 0; j < 32; ++j) {
            const int qv = j < 16 ? (blk[j] & 15) : (blk[j - 16] >> 4);
            const int xv = xq[(size_t)(tk * g.kp + b * 32 + j)];
            sq += (long)qv * xv;
            sx += xv;
          }
          yr[(size_t)(tk * g.rows + r)] +=
              (double)xd[(size_t)(tk * (g.kp / 32) + b)] * (d * (double)sq + m * (double)sx);
        }
    auto y = poisoned(yr.size());
    const cudaError_t e = weir_cuda_gemv_q4_dp4a(nullptr, g.nib.data(), g.d.data(), mptr, act,
                                                 y.data(), g.cols, g.kp, g.rows,
                                                 (int32_t)g.group, nt);
    snprintf(name, sizeof name, "gemv_q4_dp4a %d token(s), %s", nt, what);
    shim_check(name, e == cudaSuccess ? y : poisoned(y.size()), yr, 1e-6);
    {
      // One launch over three weights (this one, its symmetric reading with m NULL, and this
      // one again, as a pack group's q/k/v): each output equals its single launch bit for bit.
      auto ys = poisoned(yr.size());
      weir_cuda_gemv_q4_dp4a(nullptr, g.nib.data(), g.d.data(), nullptr, act, ys.data(), g.cols,
                             g.kp, g.rows, (int32_t)g.group, nt);
      std::vector<float> y0 = poisoned(yr.size()), y1 = poisoned(yr.size()),
                         y2 = poisoned(yr.size());
      const void *nibs[3] = {g.nib.data(), g.nib.data(), g.nib.data()};
      const void *ds[3] = {g.d.data(), g.d.data(), g.d.data()};
      const void *ms[3] = {mptr, nullptr, mptr};
      const int64_t rws[3] = {g.rows, g.rows, g.rows};
      float *yp[3] = {y0.data(), y1.data(), y2.data()};
      const bool ok = weir_cuda_gemv_q4_dp4a_set(nullptr, 3, nibs, ds, ms, rws, yp, act, g.cols,
                                                 g.kp, (int32_t)g.group, nt) == cudaSuccess &&
                      !memcmp(y0.data(), y.data(), y.size() * 4) &&
                      !memcmp(y1.data(), ys.data(), y.size() * 4) &&
                      !memcmp(y2.data(), y.data(), y.size() * 4);
      printf("%s gemv_q4_dp4a_set: 3 weights in one launch = their single launches, %d "
             "token(s), %s\n", ok ? "ok  " : "FAIL", nt, what);
      if (!ok) ++g_failures;
    }
    if (cpu) {
      std::vector<float> ycpu(yr.size());
      std::vector<double> yc(yr.size());
      cpu->ops->matmul(cpu->self, cpu_w, x.data(), ycpu.data(), nt);
      for (size_t i = 0; i < yc.size(); ++i) yc[i] = ycpu[i];
      snprintf(name, sizeof name, "gemv_q4_dp4a %d token(s) vs the CPU awq_int4 matmul, %s", nt,
               what);
      shim_check(name, y, yc, 1e-5);
    }
    free(act);
  }
  q4_tiled(g, what, cpu, cpu_w);
  std::vector<__half> f16((size_t)(g.rows * g.cols));
  weir_cuda_dequant_q4_f16(nullptr, f16.data(), g.nib.data(), g.d.data(), mptr, inv, g.rows,
                           g.cols, g.kp, (int32_t)g.group);
  std::vector<float> got(f16.size());
  std::vector<double> want(f16.size());
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c) {
      got[(size_t)(r * g.cols + c)] = __half2float(f16[(size_t)(r * g.cols + c)]);
      want[(size_t)(r * g.cols + c)] = q4_value(g, r, c);
    }
  snprintf(name, sizeof name, "dequant_q4_f16, %s", what);
  shim_check(name, got, want, 1e-3);
  std::vector<int32_t> eid = {(int32_t)g.rows - 1, 1, -1};
  auto e = poisoned((size_t)3 * g.cols);
  int flag = 0;
  weir_cuda_embed_q4(nullptr, g.nib.data(), g.d.data(), mptr, inv, eid.data(), e.data(), 3,
                     g.rows, g.cols, g.kp, (int32_t)g.group, &flag);
  std::vector<double> er((size_t)3 * g.cols, 0.0);
  for (int64_t c = 0; c < g.cols; ++c) {
    er[(size_t)c] = q4_value(g, g.rows - 1, c);
    er[(size_t)(g.cols + c)] = q4_value(g, 1, c);
  }
  snprintf(name, sizeof name, "embed_q4 (third id out of range: zeros), %s", what);
  shim_check(name, e, er, 1e-6);
  if (!flag) {
    printf("FAIL embed_q4 did not raise the flag for an id out of range\n");
    ++g_failures;
  }
}

static void int4_case(int64_t group, int rows, int cols) {
  cpu_plugin cpu;
  if (!load_cpu("weir_quant_awq_int4.so", &cpu, group)) return;
  auto src = source(1, rows, cols);
  const int ns = 24;
  std::vector<float> samples((size_t)ns * cols);
  for (int t = 0; t < ns; ++t)
    for (int c = 0; c < cols; ++c) samples[(size_t)t * cols + c] = uni(-1, 1) * (c % 17 == 5 ? 30.0f : 1.0f);
  weir_tensor t = {src.data(), WEIR_DTYPE_F16, 2, {cols, rows, 1, 1}, {2, (size_t)cols * 2, 0, 0}};
  weir_quant_pack_args pa = {};
  pa.struct_size = sizeof pa;
  pa.src = &t;
  pa.name = "shim.weight";
  pa.act_samples = samples.data();
  pa.num_samples = ns;
  pa.layer = -1;
  void *w = nullptr;
  if (cpu.ops->pack(cpu.self, &pa, &w) != WEIR_OK) {
    printf("FAIL the CPU awq_int4 plugin did not pack\n");
    ++g_failures;
    return;
  }
  std::vector<unsigned char> q41((size_t)rows * (cols / 32) * 20);
  std::vector<float> s(cols);
  weir_quant_export ex = {sizeof ex, WEIR_DTYPE_Q4_1, q41.data(), q41.size(), s.data()};
  cpu.ops->export_weight(cpu.self, w, &ex);
  gpu_q4 g = from_q4_1(q41.data(), rows, cols, group, s.data());
  char what[64];
  snprintf(what, sizeof what, "group %lld, AWQ-scaled", (long long)group);
  q4_kernels(g, what, &cpu, w);
  cpu.ops->release(cpu.self, w);
  if (group == 32) { /* symmetric: m = -8 d, not stored; no scale */
    gpu_q4 sg = from_q4_1(q41.data(), rows, cols, group, nullptr);
    sg.sym = true;
    q4_kernels(sg, "group 32, symmetric", nullptr, nullptr);
  }
}

int main() {
  const int types[] = {0, 1, 30, 8, 2, 3};
  const char *names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"};
  for (int i = 0; i < 6; ++i) int8_case(types[i], names[i], 19, 96);
  int8_case(1, "f16 (cols 100: a partial group)", 7, 100);
  dp4a_suite();
  int4_case(32, 13, 256);
  int4_case(64, 9, 192);
  int4_case(128, 6, 384);
  if (g_failures) printf("%d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
