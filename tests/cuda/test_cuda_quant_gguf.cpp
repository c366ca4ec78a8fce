/* The gguf quant plugin on CUDA (weir_quant_gguf_cuda.so) on a real GPU, for every native
 * GGUF type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS) on random blocks, against
 * the double-precision reference of tests/cuda/cpu_shim/gguf_ref.h:
 *  - embed of every row equals the reference (the device holds the file's blocks exactly);
 *  - the kernels' matmul (1, 3, 8, 11, 16, 19 tokens) against the reference weights times the
 *    quantized activations the kernel made (1e-5), and the plugin's matmul against the f32
 *    activations (2e-2, activation rounding), including a padded source row stride;
 *  - the plugin's cuBLAS path (77 tokens, past gemm_min_tokens) against f16-rounded operands;
 *  - matmul_group (ABI 1.7) over Q4_K/Q4_K/Q6_K equals separate matmuls bit for bit, and is
 *    NOTSUP for a cuBLAS-sized batch or an f16-held weight;
 *  - an F16 source held exactly; errors: an unsupported type, a row that is not whole blocks,
 *    a non-finite block scale (refused at pack, naming the tensor), an id out of range.
 * Skips (77) without a GPU; tests/cuda/cpu_shim's cuda_quant_gguf_shim runs the same kernels on
 * the CPU everywhere. */
#include <CUnit/Basic.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "cuda_host.h"
}
#include "cpu_shim/gguf_ref.h"
#include "weir_cuda_gguf.h"

static ch_plugin g_gpu;
#define GQ ((const weir_quant_ops *)g_gpu.ops)

static float uni(float lo, float hi) { return ch_uniform(lo, hi); }

// Packs rows x cols of `type` at `data` (row stride rb; 0 = packed) through the plugin as
// weight `name`; returns pack's status, the weight in *out.
static int pack_tensor(int type, const void *data, int64_t rows, int64_t cols, size_t rb,
                       const char *name, void **out) {
  weir_tensor t = {};
  t.data = const_cast<void *>(data);
  t.dtype = (weir_dtype)type;
  t.ndim = 2;
  t.ne[0] = cols;
  t.ne[1] = rows;
  t.nb[1] = rb;
  weir_quant_pack_args a = {};
  a.struct_size = sizeof a;
  a.src = &t;
  a.name = name;
  a.layer = -1;
  return GQ->pack(g_gpu.self, &a, out);
}

static void *dcopy(const void *h, size_t n) {
  void *d = ch_dalloc(n);
  ch_h2d(d, h, n);
  return d;
}

static void one_type(int type, int64_t rows, int64_t cols, size_t pad) {
  const size_t packed = weir_dtype_row_bytes((weir_dtype)type, cols), rb = packed + pad;
  std::vector<uint8_t> w = gguf_ref::random_rows(type, rows, cols, rb, uni);
  std::vector<double> ref((size_t)(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    gguf_ref::dequant_row(type, w.data() + (size_t)r * rb, cols, ref.data() + r * cols);
  void *wg = nullptr;
  int rc = pack_tensor(type, w.data(), rows, cols, rb, "w", &wg);
  if (rc != WEIR_OK) fprintf(stderr, "\n  pack: %s (%s)\n", weir_strerror(rc), ch_last_error(&g_gpu));
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  // Q3_K and Q6_K are repacked at load into aligned planes: the same bytes, each row padded
  // to 16.
  const size_t rrb = weir_cuda_gguf_repacked_row_bytes(type, cols);
  CU_ASSERT_EQUAL(GQ->weight_bytes(g_gpu.self, wg), (rrb ? rrb : packed) * (size_t)rows);

  // embed: every row
  std::vector<int32_t> ids((size_t)rows);
  for (int64_t i = 0; i < rows; ++i) ids[(size_t)i] = (int32_t)(rows - 1 - i);
  int32_t *dids = (int32_t *)dcopy(ids.data(), ids.size() * 4);
  float *dout = (float *)ch_dalloc((size_t)(rows * cols) * 4);
  ch_poison(dout, (size_t)(rows * cols) * 4);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, wg, dids, dout, rows), WEIR_OK);
  std::vector<float> got((size_t)(rows * cols));
  ch_d2h(got.data(), dout, got.size() * 4);
  std::vector<double> want((size_t)(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    memcpy(&want[(size_t)(i * cols)], &ref[(size_t)(ids[(size_t)i] * cols)], (size_t)cols * 8);
  double e = ch_rel_err(got.data(), want.data(), got.size());
  printf("\n  %s %lldx%lld (stride +%zu): embed rel err %.3g", weir_dtype_name((weir_dtype)type),
         (long long)rows, (long long)cols, pad, e);
  CU_ASSERT(e < 1e-6);

  // matmul: the kernels with their own quantized activations (exact integer dots), and the
  // plugin against f32 activations; 77 tokens take the plugin's cuBLAS path.
  const int64_t ns[] = {1, 3, 8, 11, 16, 19, 77};
  const int64_t nmax = 77;
  std::vector<float> x((size_t)(nmax * cols)), y((size_t)(nmax * rows));
  ch_fill_uniform(x.data(), x.size(), -1, 1);
  float *dx = (float *)dcopy(x.data(), x.size() * 4);
  float *dy = (float *)ch_dalloc(y.size() * 4);
  void *dw = dcopy(w.data(), w.size()); // the raw rows, for the kernel-level check
  for (int64_t n : ns) {
    std::vector<double> full((size_t)(n * rows)), half((size_t)(n * rows));
    for (int64_t tk = 0; tk < n; ++tk)
      for (int64_t o = 0; o < rows; ++o) {
        double f = 0, h = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double wv = ref[(size_t)(o * cols + c)];
          const float xv = x[(size_t)(tk * cols + c)];
          f += wv * xv;
          h += (double)ch_f16_to_f32(ch_f32_to_f16((float)wv)) *
               (double)ch_f16_to_f32(ch_f32_to_f16(xv));
        }
        full[(size_t)(tk * rows + o)] = f;
        half[(size_t)(tk * rows + o)] = h;
      }
    ch_poison(dy, (size_t)(n * rows) * 4);
    CU_ASSERT_EQUAL(GQ->matmul(g_gpu.self, wg, dx, dy, n), WEIR_OK);
    ch_d2h(y.data(), dy, (size_t)(n * rows) * 4);
    const bool gemm = n >= 64;
    e = ch_rel_err(y.data(), gemm ? half.data() : full.data(), (size_t)(n * rows));
    printf("\n    plugin matmul %lld tokens (%s): rel err %.3g", (long long)n,
           gemm ? "cuBLAS" : "dp4a", e);
    CU_ASSERT(e < (gemm ? 1e-3 : 2e-2));
    if (gemm) continue;
    // kernel level: exact against the activations the kernel quantized
    const size_t ab = weir_cuda_gguf_act_bytes(n, cols);
    void *act = ch_dalloc(ab);
    CU_ASSERT_EQUAL(weir_cuda_gguf_quantize_act(nullptr, dx, act, n, cols), cudaSuccess);
    ch_poison(dy, (size_t)(n * rows) * 4);
    CU_ASSERT_EQUAL(weir_cuda_gguf_matmul(nullptr, type, dw, rb, act, dy, cols, rows, n),
                    cudaSuccess);
    std::vector<unsigned char> ha(ab);
    ch_d2h(ha.data(), act, ab);
    ch_d2h(y.data(), dy, (size_t)(n * rows) * 4);
    const signed char *xq = (const signed char *)ha.data();
    const float *xs = (const float *)(ha.data() + ((size_t)(n * cols) + 255) / 256 * 256);
    std::vector<double> exact((size_t)(n * rows));
    for (int64_t tk = 0; tk < n; ++tk)
      for (int64_t o = 0; o < rows; ++o) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c)
          s += ref[(size_t)(o * cols + c)] * (double)xq[tk * cols + c] *
               (double)xs[2 * ((tk * cols + c) / 32)];
        exact[(size_t)(tk * rows + o)] = s;
      }
    e = ch_rel_err(y.data(), exact.data(), (size_t)(n * rows));
    printf("\n    kernel matmul %lld tokens vs its quantized activations: rel err %.3g",
           (long long)n, e);
    CU_ASSERT(e < 1e-5);
    ch_dfree(act);
  }
  GQ->release(g_gpu.self, wg);
  ch_dfree(dw);
  ch_dfree(dx);
  ch_dfree(dy);
  ch_dfree(dids);
  ch_dfree(dout);
}

static void test_types(void) {
  for (int t : gguf_ref::kTypes) {
    const int64_t be = weir_dtype_block_elems((weir_dtype)t);
    one_type(t, 72, be == 32 ? 33 * 32 : 8 * 256, 0);
    one_type(t, 13, be == 32 ? 5 * 32 : 3 * 256, 16); // 16: the kernel check reads it as is
  }
}

static void *pack_rows(int type, int64_t rows, int64_t cols, std::vector<uint8_t> *keep) {
  const size_t rb = weir_dtype_row_bytes((weir_dtype)type, cols);
  *keep = gguf_ref::random_rows(type, rows, cols, rb, uni);
  void *w = nullptr;
  CU_ASSERT_EQUAL(pack_tensor(type, keep->data(), rows, cols, rb, "g", &w), WEIR_OK);
  return w;
}

// ABI 1.7 matmul_group: a Q4_K_M-like q/k/v (Q4_K, Q4_K, Q6_K of 256, 64, 64 rows) on one
// input gives exactly what three matmul calls give (the same quantized activations, the same
// kernels) at 1, 8 and 16 tokens; an f16-held weight in the group and a batch for cuBLAS are
// NOTSUP (the host then runs separate matmuls).
static void test_group(void) {
  if (!WEIR_QUANT_HAS_OP(GQ, matmul_group)) {
    CU_FAIL("weir_quant_gguf_cuda.so has no matmul_group");
    return;
  }
  const int64_t cols = 1024, rows[3] = {256, 64, 64};
  const int types[3] = {WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q6_K};
  std::vector<uint8_t> keep[3];
  void *w[3];
  float *dy[3], *dz[3];
  for (int i = 0; i < 3; ++i) {
    w[i] = pack_rows(types[i], rows[i], cols, &keep[i]);
    dy[i] = (float *)ch_dalloc((size_t)(64 * rows[i]) * 4);
    dz[i] = (float *)ch_dalloc((size_t)(64 * rows[i]) * 4);
  }
  std::vector<float> x((size_t)(64 * cols));
  ch_fill_uniform(x.data(), x.size(), -1, 1);
  float *dx = (float *)dcopy(x.data(), x.size() * 4);
  for (int64_t n : {1, 8, 16}) {
    for (int i = 0; i < 3; ++i) {
      ch_poison(dy[i], (size_t)(n * rows[i]) * 4);
      CU_ASSERT_EQUAL(GQ->matmul(g_gpu.self, w[i], dx, dz[i], n), WEIR_OK);
    }
    CU_ASSERT_EQUAL(GQ->matmul_group(g_gpu.self, w, 3, dx, dy, n), WEIR_OK);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> a((size_t)(n * rows[i])), b(a.size());
      ch_d2h(a.data(), dy[i], a.size() * 4);
      ch_d2h(b.data(), dz[i], b.size() * 4);
      const bool same = memcmp(a.data(), b.data(), a.size() * 4) == 0;
      printf("\n    matmul_group weight %d (%s), %lld tokens: %s", i,
             weir_dtype_name((weir_dtype)types[i]), (long long)n,
             same ? "= matmul, bit for bit" : "DIFFERS from matmul");
      CU_ASSERT(same);
    }
  }
  CU_ASSERT_EQUAL(GQ->matmul_group(g_gpu.self, w, 3, dx, dy, 64), WEIR_E_NOTSUP);
  std::vector<uint8_t> kf;
  void *wf = pack_rows(WEIR_DTYPE_F16, 32, cols, &kf);
  void *mixed[2] = {w[0], wf};
  CU_ASSERT_EQUAL(GQ->matmul_group(g_gpu.self, mixed, 2, dx, dy, 1), WEIR_E_NOTSUP);
  GQ->release(g_gpu.self, wf);
  for (int i = 0; i < 3; ++i) {
    GQ->release(g_gpu.self, w[i]);
    ch_dfree(dy[i]);
    ch_dfree(dz[i]);
  }
  ch_dfree(dx);
}

static void test_f16_source(void) {
  const int64_t rows = 24, cols = 96;
  std::vector<uint16_t> h((size_t)(rows * cols));
  std::vector<double> ref(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    h[i] = ch_f32_to_f16(ch_uniform(-2, 2));
    ref[i] = ch_f16_to_f32(h[i]);
  }
  void *wg = nullptr;
  CU_ASSERT_EQUAL_FATAL(pack_tensor(WEIR_DTYPE_F16, h.data(), rows, cols, 0, "f16", &wg),
                        WEIR_OK);
  std::vector<int32_t> ids((size_t)rows);
  for (int64_t i = 0; i < rows; ++i) ids[(size_t)i] = (int32_t)i;
  int32_t *dids = (int32_t *)dcopy(ids.data(), ids.size() * 4);
  float *dout = (float *)ch_dalloc(h.size() * 4);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, wg, dids, dout, rows), WEIR_OK);
  std::vector<float> got(h.size());
  ch_d2h(got.data(), dout, got.size() * 4);
  CU_ASSERT(ch_rel_err(got.data(), ref.data(), got.size()) == 0.0);
  GQ->release(g_gpu.self, wg);
  ch_dfree(dids);
  ch_dfree(dout);
}

static void test_errors(void) {
  void *w = nullptr;
  weir_quant_pack_args a = {};
  a.struct_size = sizeof a;
  a.layer = -1;
  weir_tensor t = {};
  t.ndim = 2;
  // a type the plugin does not run
  std::vector<uint8_t> buf(64 * 292, 0);
  t.data = buf.data();
  t.dtype = WEIR_DTYPE_Q8_K;
  t.ne[0] = 256;
  t.ne[1] = 2;
  a.src = &t;
  a.name = "blk.0.attn_q.weight";
  CU_ASSERT_EQUAL(GQ->pack(g_gpu.self, &a, &w), WEIR_E_NOTSUP);
  CU_ASSERT(strstr(ch_last_error(&g_gpu), "blk.0.attn_q.weight") != nullptr);
  // a row that is not whole blocks
  t.dtype = WEIR_DTYPE_Q4_K;
  t.ne[0] = 300;
  CU_ASSERT_EQUAL(GQ->pack(g_gpu.self, &a, &w), WEIR_E_NOTSUP);
  CU_ASSERT(strstr(ch_last_error(&g_gpu), "q4_K") != nullptr);
  // a non-finite scale (f16 Inf in block 1's d)
  std::vector<uint8_t> q6 = gguf_ref::random_rows(WEIR_DTYPE_Q6_K, 2, 256, 210, uni);
  q6[210 + 208] = 0x00;
  q6[210 + 209] = 0x7c;
  t.data = q6.data();
  t.dtype = WEIR_DTYPE_Q6_K;
  t.ne[0] = 256;
  a.name = "output.weight";
  CU_ASSERT_EQUAL(GQ->pack(g_gpu.self, &a, &w), WEIR_E_INVAL);
  CU_ASSERT(strstr(ch_last_error(&g_gpu), "output.weight") != nullptr);
  CU_ASSERT(strstr(ch_last_error(&g_gpu), "non-finite") != nullptr);
  // an id out of range: zero-filled, reported by the next embed
  q6[210 + 209] = 0x10;
  CU_ASSERT_EQUAL_FATAL(GQ->pack(g_gpu.self, &a, &w), WEIR_OK);
  int32_t ids[2] = {1, 2};
  int32_t *dids = (int32_t *)dcopy(ids, sizeof ids);
  float *dout = (float *)ch_dalloc(2 * 256 * 4);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, w, dids, dout, 2), WEIR_OK);
  CU_ASSERT_EQUAL(CH_DEV->synchronize(ch_dev.self), WEIR_OK);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, w, dids, dout, 1), WEIR_E_RANGE);
  CU_ASSERT_EQUAL(GQ->embed(g_gpu.self, w, dids, dout, 1), WEIR_OK);
  GQ->release(g_gpu.self, w);
  ch_dfree(dids);
  ch_dfree(dout);
}

int main(void) {
  ch_device_open_or_skip();
  ch_seed_from_env(0x66756673u);
  int rc = ch_plugin_open(&g_gpu, "weir_quant_gguf_cuda.so");
  if (rc != WEIR_OK) {
    fprintf(stderr, "weir_quant_gguf_cuda.so: %s (%s)\n", weir_strerror(rc), ch_last_error(&g_gpu));
    ch_device_close();
    return 1;
  }
  static const ch_test tests[] = {
      {"every native type: values, dp4a matmul, cuBLAS matmul", test_types},
      {"an F16 source is held exactly", test_f16_source},
      {"matmul_group (ABI 1.7) = separate matmuls", test_group},
      {"bad tensors and ids", test_errors},
      {nullptr, nullptr},
  };
  rc = ch_run_suite("cuda_quant_gguf", tests);
  ch_plugin_close(&g_gpu);
  ch_device_close();
  return rc;
}
