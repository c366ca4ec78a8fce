// kernels/cuda/attention.cu executed on the CPU (cuda_shim.h): the KV write, the tiled
// attention kernel (decode, GQA, prefill over a cached prefix, mixed batches, split-KV with its
// reduction fused into the same launch) and copy_blocks, through the file's own C launchers and launch planning, against a
// double-precision reference. Runs on every machine that compiles the CUDA plugins; on a GPU
// machine the cuda_attention suite checks the same kernels on the device.
#include "shim_smem.h"

#include "attention.cu"
#include "shim_test.h"

#include <cstring>
#include <string>

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static float uniform(float lo, float hi) { return shim_uniform(&g_rng, lo, hi); }

static float round_kv(float x, int dt) {
  if (dt == 1) return __half2float(__float2half_rn(x));
  if (dt == 30) return __bfloat162float(__float2bfloat16_rn(x));
  return x;
}

static void store(unsigned char *at, float x, int dt) {
  if (dt == 1) {
    __half h = __float2half_rn(x);
    memcpy(at, &h, 2);
  } else if (dt == 30) {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    memcpy(at, &h, 2);
  } else {
    memcpy(at, &x, 4);
  }
}

struct Scenario {
  const char *name;
  int heads, kv_heads, hd, dt, num_sms;
  std::vector<int> ctx, qlen;
  // ABI 1.5 layer parameters: sliding window, soft-cap, scale (0 = 1/sqrt(hd)).
  int window = 0;
  float softcap = 0.0f, scale = 0.0f;
  // Plans as step graphs do: for this context (the pool's maximum) rather than the batch's,
  // so num_splits exceeds what the real contexts use (0 = the batch's maximum). `reverse`
  // runs the blocks in reverse grid order (which CTA finishes last must not matter).
  int plan_ctx = 0;
  bool reverse = false;
};

// int8 (dt 24): what the cache holds for a row of n values, computed as the kernel and the
// CPU plugin do (symmetric, one f32 scale per row).
static void round_row_i8(float *row, int n) {
  float amax = 0.0f;
  for (int d = 0; d < n; ++d) amax = std::max(amax, std::fabs(row[d]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f, sc = amax / 127.0f;
  for (int d = 0; d < n; ++d) {
    const float q = row[d] * inv;
    row[d] = (float)(int8_t)(q < 0.0f ? q - 0.5f : q + 0.5f) * sc;
  }
}

static void run(const Scenario &sc) {
  const int bs = 16, es = sc.dt == 0 ? 4 : sc.dt == 24 ? 1 : 2, S = (int)sc.ctx.size();
  const int G = sc.heads / sc.kv_heads, kvw = sc.kv_heads * sc.hd, qw = sc.heads * sc.hd;
  const size_t bb = weir_cuda_attn_block_bytes(sc.kv_heads, sc.hd, bs, sc.dt);
  const size_t want_bb = 2 * (size_t)sc.kv_heads * bs * sc.hd * es +
                         (sc.dt == 24 ? 2 * (size_t)sc.kv_heads * bs * sizeof(float) : 0);
  if (bb != want_bb) {
    printf("FAIL %s: block_bytes %zu\n", sc.name, bb);
    ++g_failures;
    return;
  }
  std::vector<int32_t> qsl(S + 1, 0);
  int max_q = 0, max_ctx = 0, max_blocks = 0, total = 0;
  for (int s = 0; s < S; ++s) {
    qsl[s + 1] = qsl[s] + sc.qlen[s];
    max_q = std::max(max_q, sc.qlen[s]);
    max_ctx = std::max(max_ctx, sc.ctx[s]);
    max_blocks = std::max(max_blocks, (sc.ctx[s] + bs - 1) / bs);
    total += (sc.ctx[s] + bs - 1) / bs;
  }
  const int T = qsl[S], pool_blocks = total + 3;
  // Blocks handed out in reverse so that logical and physical order differ.
  std::vector<int32_t> bt((size_t)S * max_blocks, 0);
  int next = pool_blocks - 1;
  for (int s = 0; s < S; ++s)
    for (int b = 0; b < (sc.ctx[s] + bs - 1) / bs; ++b) bt[(size_t)s * max_blocks + b] = next--;
  std::vector<unsigned char> pool((size_t)pool_blocks * bb, 0xFF); // NaN bits everywhere
  std::vector<std::vector<float>> kall(S), vall(S);
  std::vector<float> k((size_t)T * kvw), v((size_t)T * kvw), q((size_t)T * qw);
  std::vector<int32_t> slots(T);
  // int8: the cached prefix goes in through the write kernel too (it computes the scales)
  std::vector<float> pk, pv;
  std::vector<int32_t> pslots;
  for (int s = 0; s < S; ++s) {
    kall[s].resize((size_t)sc.ctx[s] * kvw);
    vall[s].resize((size_t)sc.ctx[s] * kvw);
    const int first_new = sc.ctx[s] - sc.qlen[s];
    for (int t = 0; t < sc.ctx[s]; ++t) {
      const int blk = bt[(size_t)s * max_blocks + t / bs], off = t % bs;
      for (int i = 0; i < kvw; ++i) {
        float kx = uniform(-1, 1), vx = uniform(-1, 1);
        const int h = i / sc.hd, d = i % sc.hd;
        if (t < first_new && sc.dt == 24) {
          if (i == 0) pslots.push_back(blk * bs + off);
          pk.push_back(kx);
          pv.push_back(vx);
        } else if (t < first_new) {
          size_t base = (size_t)blk * bb;
          size_t kat = (((size_t)h * bs + off) * sc.hd + d) * es;
          size_t vat = (((size_t)(sc.kv_heads + h) * bs + off) * sc.hd + d) * es;
          store(&pool[base + kat], kx, sc.dt);
          store(&pool[base + vat], vx, sc.dt);
        } else {
          const int row = qsl[s] + t - first_new;
          k[(size_t)row * kvw + i] = kx;
          v[(size_t)row * kvw + i] = vx;
          slots[row] = blk * bs + off;
        }
        kall[s][(size_t)t * kvw + i] = round_kv(kx, sc.dt);
        vall[s][(size_t)t * kvw + i] = round_kv(vx, sc.dt);
      }
    }
  }
  if (sc.dt == 24)
    for (int s = 0; s < S; ++s)
      for (int t = 0; t < sc.ctx[s]; ++t)
        for (int h = 0; h < sc.kv_heads; ++h) {
          round_row_i8(&kall[s][(size_t)t * kvw + h * sc.hd], sc.hd);
          round_row_i8(&vall[s][(size_t)t * kvw + h * sc.hd], sc.hd);
        }
  for (auto &x : q) x = uniform(-1, 1);
  const float scale = sc.scale > 0.0f ? sc.scale : 1.0f / std::sqrt((float)sc.hd);
  // With a window, the blocks wholly before a sequence's first new query's window get an id
  // far outside the pool: the kernel must not read them (the host frees such blocks).
  int stale = 0;
  for (int s = 0; sc.window > 0 && s < S; ++s) {
    const int lo = sc.ctx[s] - sc.qlen[s] - sc.window + 1;
    for (int b = 0; lo > 0 && b < lo / bs; ++b, ++stale)
      bt[(size_t)s * max_blocks + b] = 0x3fffffff;
  }
  if (sc.window > 0 && stale == 0) {
    printf("FAIL %s: no block lies before the window\n", sc.name);
    ++g_failures;
  }

  std::vector<double> ref((size_t)T * qw, 0.0), w(max_ctx);
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < sc.qlen[s]; ++i) {
      const int row = qsl[s] + i, pos = sc.ctx[s] - sc.qlen[s] + i;
      for (int h = 0; h < sc.heads; ++h) {
        const int kh = h / G;
        double mx = -INFINITY, sum = 0;
        const int t0 = sc.window > 0 ? std::max(0, pos - sc.window + 1) : 0;
        for (int t = t0; t <= pos; ++t) {
          double dot = 0;
          for (int d = 0; d < sc.hd; ++d)
            dot += (double)q[(size_t)row * qw + h * sc.hd + d] *
                   kall[s][(size_t)t * kvw + kh * sc.hd + d];
          w[t] = dot * scale;
          if (sc.softcap > 0.0f) w[t] = sc.softcap * std::tanh(w[t] / sc.softcap);
          mx = std::max(mx, w[t]);
        }
        for (int t = t0; t <= pos; ++t) sum += (w[t] = std::exp(w[t] - mx));
        for (int t = t0; t <= pos; ++t)
          for (int d = 0; d < sc.hd; ++d)
            ref[(size_t)row * qw + h * sc.hd + d] +=
                w[t] / sum * vall[s][(size_t)t * kvw + kh * sc.hd + d];
      }
    }

  std::vector<int32_t> ctx(sc.ctx.begin(), sc.ctx.end());
  weir_cuda_attn_params p{};
  p.n_heads = sc.heads;
  p.n_kv_heads = sc.kv_heads;
  p.head_dim = sc.hd;
  p.block_size = bs;
  p.kv_dtype = sc.dt;
  p.scale = scale;
  p.num_seqs = S;
  p.num_tokens = T;
  p.max_query_len = max_q;
  p.max_context_len = sc.plan_ctx > 0 ? sc.plan_ctx : max_ctx;
  p.query_start_loc = qsl.data();
  p.context_lens = ctx.data();
  p.block_tables = bt.data();
  p.max_blocks_per_seq = max_blocks;
  p.slot_mapping = slots.data();
  p.kv_base = pool.data();
  p.block_bytes = bb;
  p.num_blocks = pool_blocks;
  p.window = sc.window;
  p.softcap = sc.softcap;
  weir_cuda_attn_plan plan;
  if (weir_cuda_attn_plan_make(&p, sc.num_sms, 227 * 1024, &plan) != cudaSuccess) {
    printf("FAIL %s: no plan\n", sc.name);
    ++g_failures;
    return;
  }
  std::vector<float> ws(plan.workspace_bytes / 4 + 1);
  memset(ws.data(), 0xFF, ws.size() * 4); // a NaN pattern: which partials were written
  std::vector<int> counters(plan.counter_bytes / sizeof(int) + 1, 0);
  std::vector<float> out((size_t)T * qw);
  memset(out.data(), 0xFF, out.size() * 4);
  if (!pslots.empty()) {
    weir_cuda_attn_params pp = p;
    pp.num_tokens = (int32_t)pslots.size();
    pp.slot_mapping = pslots.data();
    weir_cuda_kv_write(nullptr, &pp, pk.data(), pv.data());
  }
  weir_cuda_kv_write(nullptr, &p, k.data(), v.data());
  shim_reverse_blocks = sc.reverse;
  weir_cuda_attention(nullptr, &p, &plan, q.data(), out.data(), ws.data(), counters.data());
  shim_reverse_blocks = false;
  // The fused split reduction must leave its counters at zero (a replayed graph relies on it).
  for (int c : counters)
    if (c != 0) {
      printf("FAIL %s: a split counter is %d after the launch\n", sc.name, c);
      ++g_failures;
      break;
    }
  // Decode planned for a longer context (step graphs): only the splits the real context uses
  // (one block or more each) may write a partial; the rest must exit unread and unwritten.
  if (sc.plan_ctx > 0 && plan.num_splits > 1 && max_q == 1) {
    const size_t part = (size_t)plan.rows_per_cta * (sc.hd + 2);
    int wrote_unused = 0;
    for (int si = 0; si < S; ++si) {
      const int last_key = sc.ctx[si] - 1, nblocks = last_key / bs + 1;
      const int first_key = sc.window > 0 ? std::max(0, last_key - sc.window + 1) : 0;
      const int used = std::max(1, std::min(plan.num_splits, nblocks - first_key / bs));
      for (int h = 0; h < sc.kv_heads; ++h) {
        const size_t slot = (size_t)si * sc.kv_heads + h;
        const unsigned char *b = reinterpret_cast<const unsigned char *>(
            ws.data() + (slot * plan.num_splits + (used > 1 ? used : 0)) * part);
        const size_t n = (size_t)(plan.num_splits - (used > 1 ? used : 0)) * part * 4;
        for (size_t i = 0; i < n; ++i)
          if (b[i] != 0xFF) {
            ++wrote_unused;
            break;
          }
      }
    }
    if (wrote_unused) {
      printf("FAIL %s: %d tile(s) wrote partials of splits their context does not use\n",
             sc.name, wrote_unused);
      ++g_failures;
    }
  }
  double num = 0, den = 0;
  bool finite = true;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) finite = false;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double err = std::sqrt(num / den);
  const bool ok = finite && err < 1e-5;
  printf("%s %s: rows/cta %d, tiles %d, splits %d, rel err %.3g\n", ok ? "ok  " : "FAIL",
         sc.name, plan.rows_per_cta, plan.tiles_per_seq, plan.num_splits, err);
  if (!ok) ++g_failures;
}

static void copy_blocks_check() {
  const size_t bb = 64 * 16;
  const int nb = 6, layers = 2;
  std::vector<unsigned char> pool(bb * nb * layers), expect;
  for (auto &c : pool) c = (unsigned char)(uniform(0, 256));
  expect = pool;
  int32_t src[2] = {1, 4}, dst[2] = {5, 0};
  for (int l = 0; l < layers; ++l)
    for (int i = 0; i < 2; ++i)
      memcpy(&expect[((size_t)l * nb + dst[i]) * bb], &expect[((size_t)l * nb + src[i]) * bb], bb);
  weir_cuda_copy_blocks(nullptr, pool.data(), bb, nb, layers, src, dst, 2);
  const bool ok = pool == expect;
  printf("%s copy_blocks\n", ok ? "ok  " : "FAIL");
  if (!ok) ++g_failures;
}

int main() {
  const std::vector<Scenario> s = {
      {"decode f16 GQA 8/2 d64", 8, 2, 64, 1, 132, {1, 17, 40, 33}, {1, 1, 1, 1}},
      {"decode f32 MHA 2/2 d32", 2, 2, 32, 0, 132, {5, 16, 70}, {1, 1, 1}},
      {"decode bf16 GQA 16/2 d64", 16, 2, 64, 30, 132, {100, 3}, {1, 1}},
      {"decode int8 GQA 8/2 d64", 8, 2, 64, 24, 132, {1, 17, 40, 33}, {1, 1, 1, 1}},
      {"split-KV int8 4/1 d64 two seqs", 4, 1, 64, 24, 16, {300, 129}, {1, 1}},
      {"chunked prefill int8 8/2 d128", 8, 2, 128, 24, 132, {70, 40}, {30, 20}},
      {"split-KV f16 8/2 d64 ctx 600", 8, 2, 64, 1, 132, {600}, {1}},
      {"split-KV f16 4/1 d64 two seqs", 4, 1, 64, 1, 16, {300, 129}, {1, 1}},
      {"prefill f16 4/2 d64", 4, 2, 64, 1, 132, {77}, {77}},
      {"chunked prefill f16 8/2 d64", 8, 2, 64, 1, 132, {150, 64}, {50, 30}},
      {"mixed f32 4/1 d96", 4, 1, 96, 0, 132, {40, 200, 9}, {40, 1, 4}},
      {"verify f16 16/4 d128", 16, 4, 128, 1, 132, {90, 33}, {5, 5}},
      // ABI 1.5 layer parameters: windows shorter than the context (decode, chunked prefill
      // across block edges, split-KV over the window's blocks), soft-cap and scale.
      {"window 20 decode f16 8/2 d64", 8, 2, 64, 1, 132, {100, 37, 5}, {1, 1, 1}, 20},
      {"window 7 chunked prefill f32 4/1 d64", 4, 1, 64, 0, 132, {90, 40}, {30, 20}, 7},
      {"window 1 mixed f16 4/2 d64", 4, 2, 64, 1, 132, {50, 33}, {9, 1}, 1},
      {"window 100 split-KV f16 4/1 d64", 4, 1, 64, 1, 16, {600, 300}, {1, 1}, 100},
      {"window 40 int8 8/2 d64", 8, 2, 64, 24, 132, {130, 70}, {1, 12}, 40},
      {"softcap 1.5 scale 0.3 prefill f16 8/2 d64", 8, 2, 64, 1, 132, {60, 17}, {60, 3}, 0,
       1.5f, 0.3f},
      {"window 33 softcap 2 split-KV bf16 8/2 d128", 8, 2, 128, 30, 16, {700}, {1}, 33, 2.0f,
       0.0625f},
      // Planned for 2,048 tokens as under step graphs (64 splits on 4 KV-head CTAs), real
      // contexts of 5 (one block: no split, the direct write), 40 (3 blocks: 3 splits), 300
      // (19 blocks: 19 splits) and 1,000: the splits past what a context uses exit unread and
      // uncounted, the rest combine (issue 34: 28 us a layer on an H200 at short contexts).
      {"graph-planned decode f16 32/4 d64 ctx 5/40/300", 32, 4, 64, 1, 132, {5, 40, 300},
       {1, 1, 1}, 0, 0.0f, 0.0f, 2048},
      {"graph-planned decode f16 32/4 d64 reversed", 32, 4, 64, 1, 132, {300, 1000, 40},
       {1, 1, 1}, 0, 0.0f, 0.0f, 2048, true},
      {"graph-planned decode int8 8/2 d64 ctx 33/700", 8, 2, 64, 24, 132, {33, 700}, {1, 1}, 0,
       0.0f, 0.0f, 4096, true},
      {"graph-planned window 50 f16 4/1 d64", 4, 1, 64, 1, 16, {600, 20}, {1, 1}, 50, 0.0f,
       0.0f, 2048},
  };
  for (const auto &sc : s) run(sc);
  copy_blocks_check();
  if (g_failures) printf("%d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
