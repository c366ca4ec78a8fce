// kernels/cuda/attention.cu executed on the CPU (cuda_shim.h) against the CPU paged attention
// plugin (weir_attention_paged.so, loaded with dlopen): the same K/V rows, queries, block tables
// and layer parameters go to both, and the CUDA kernels must give the CPU plugin's output and
// the same cache bytes. Covers the decode path the GPU spends its step on: GQA ratios 1, 4 and
// 8 (each KV head read once for its group), contexts from 1 to 4096 tokens that end on both
// sides of block and split boundaries, splits that get no blocks, f16 and int8 KV, sliding
// windows, soft-cap and score scale, batches mixing short and long contexts, and a chunked
// prefill. Every launch runs twice, once with the shim's blocks in grid order and once
// reversed, so the fused last-block-done split reduction is proven whichever split finishes
// last, and its counters must be zero after each launch. On a GPU machine cuda_attention
// checks the plugin itself. ABI 1.7's forward_rope is checked the same way: the fused kernels
// get q and k unrotated, the CPU plugin gets them rotated by elementwise.cu's rope kernels
// (shim_elementwise.cpp), and outputs and cache bytes must agree; the CPU plugin's own
// forward_rope must rotate too.
#include "shim_smem.h"

#include "attention.cu"


#include <cstring>
#include <string>

#include "shim_plugin.h"
#include "shim_test.h"
#include "weir/attention.h"

static uint64_t g_rng = 0xA77E5EEDull;

static float uni(float lo, float hi) { return shim_uniform(&g_rng, lo, hi); }

static const weir_attention_ops *cpu_ops;
static void *cpu_self;

static bool load_cpu_attention() {
  shim_plugin pl;
  if (!shim_load_plugin("weir_attention_paged.so", nullptr, 0, &pl)) return false;
  cpu_ops = (const weir_attention_ops *)pl.ops;
  cpu_self = pl.self;
  if (!WEIR_HAS_FIELD(cpu_ops, weir_attention_ops, forward_rope) || !cpu_ops->forward_rope) {
    printf("FAIL the CPU paged attention has no forward_rope (ABI 1.7)\n");
    return false;
  }
  return true;
}

struct Case {
  std::string name;
  int heads, kv_heads, hd, dt; // dt: 1 f16, 24 int8 (weir_dtype values)
  int num_sms;
  std::vector<int> ctx, qlen;
  int window = 0;
  float softcap = 0.0f, scale = 0.0f;
  int want_splits = 0; // > 0: the plan must split the KV range at least this many ways
  // ABI 1.7 forward_rope: rope_dim > 0 gives q and k unrotated to the fused kernels, and to
  // the reference rotated by elementwise.cu's rope kernels (on the shim) first.
  int rope_dim = 0, rope_style = 0;
  bool rope_freqs = false;
};

static void run(const Case &c) {
  const int bs = 16, S = (int)c.ctx.size();
  const int kvw = c.kv_heads * c.hd, qw = c.heads * c.hd;
  weir_attn_shape shape = {sizeof shape, 1, c.heads, c.kv_heads, c.hd, bs, (weir_dtype)c.dt,
                           1.0f / std::sqrt((float)c.hd)};
  const size_t bb = weir_cuda_attn_block_bytes(c.kv_heads, c.hd, bs, c.dt);
  const size_t cpu_bb = cpu_ops->block_bytes(cpu_self, &shape);
  if (bb == 0 || bb != cpu_bb) {
    printf("FAIL %s: block bytes %zu (cuda) vs %zu (cpu)\n", c.name.c_str(), bb, cpu_bb);
    ++g_failures;
    return;
  }
  std::vector<int32_t> qsl(S + 1, 0);
  int max_q = 0, max_ctx = 0, max_blocks = 0, total = 0;
  for (int s = 0; s < S; ++s) {
    qsl[s + 1] = qsl[s] + c.qlen[s];
    max_q = std::max(max_q, c.qlen[s]);
    max_ctx = std::max(max_ctx, c.ctx[s]);
    max_blocks = std::max(max_blocks, (c.ctx[s] + bs - 1) / bs);
    total += (c.ctx[s] + bs - 1) / bs;
  }
  const int T = qsl[S], pool_blocks = total + 2;
  // Physical blocks interleaved across sequences, so logical and physical order differ.
  std::vector<int32_t> bt((size_t)S * max_blocks, 0);
  {
    int next = 1;
    for (int b = 0; b < max_blocks; ++b)
      for (int s = 0; s < S; ++s)
        if (b < (c.ctx[s] + bs - 1) / bs) bt[(size_t)s * max_blocks + b] = next++;
  }
  // The cached prefix and this step's tokens both go in through each side's own KV write.
  std::vector<int32_t> pslots, slots(T);
  std::vector<float> pk, pv, k((size_t)T * kvw), v((size_t)T * kvw), q((size_t)T * qw);
  for (int s = 0; s < S; ++s) {
    const int first_new = c.ctx[s] - c.qlen[s];
    for (int t = 0; t < c.ctx[s]; ++t) {
      const int slot = bt[(size_t)s * max_blocks + t / bs] * bs + t % bs;
      if (t < first_new) {
        pslots.push_back(slot);
        for (int i = 0; i < kvw; ++i) {
          pk.push_back(uni(-1, 1));
          pv.push_back(uni(-1, 1));
        }
      } else {
        const int row = qsl[s] + t - first_new;
        slots[row] = slot;
        for (int i = 0; i < kvw; ++i) {
          k[(size_t)row * kvw + i] = uni(-1, 1);
          v[(size_t)row * kvw + i] = uni(-1, 1);
        }
      }
    }
  }
  for (auto &x : q) x = uni(-2, 2);
  // With a window, blocks wholly before a sequence's first new query's window get an id far
  // outside the pool after the prefix is written: neither side may read them.
  std::vector<int32_t> bt_step = bt;
  for (int s = 0; c.window > 0 && s < S; ++s) {
    const int lo = c.ctx[s] - c.qlen[s] - c.window + 1;
    for (int b = 0; lo > 0 && b < lo / bs; ++b) bt_step[(size_t)s * max_blocks + b] = 0x3fffffff;
  }
  std::vector<int32_t> ctxv(c.ctx.begin(), c.ctx.end());
  weir_attn_layer_params lp = {sizeof lp, c.window, c.softcap, c.scale};

  // ---- the CPU plugin -----------------------------------------------------------------------
  std::vector<unsigned char> cpu_pool((size_t)pool_blocks * bb, 0xFF);
  std::vector<float> cpu_out = shim_poisoned((size_t)T * qw);
  weir_kv_view kv = {cpu_pool.data(), bb, pool_blocks};
  if (!pslots.empty()) {
    // The prefix as a prefill step of its own (each sequence's cached tokens, in the order
    // pslots lists them) with a window of 1, so that the CPU plugin's attention over it stays
    // linear in the length: only its KV write matters here.
    std::vector<int32_t> pq(1, 0), pctx, ptab;
    int max_p = 0;
    for (int s = 0; s < S; ++s) {
      const int np = c.ctx[s] - c.qlen[s];
      if (np == 0) continue;
      pq.push_back(pq.back() + np);
      pctx.push_back(np);
      ptab.insert(ptab.end(), bt.begin() + (size_t)s * max_blocks,
                  bt.begin() + (size_t)(s + 1) * max_blocks);
      max_p = std::max(max_p, np);
    }
    const int PS = (int)pctx.size(), P = pq.back();
    std::vector<float> pqv((size_t)P * qw, 0.5f), pout((size_t)P * qw);
    weir_attn_batch pb = {sizeof pb, PS, P, pq.data(), pctx.data(), ptab.data(), max_blocks,
                          pslots.data(), max_p, max_p, pq.data(), pctx.data(), ptab.data(),
                          pslots.data()};
    weir_attn_layer_params one = {sizeof one, 1, 0.0f, 0.0f};
    if (cpu_ops->forward_layer(cpu_self, &shape, &one, &pb, &kv, pqv.data(), pk.data(),
                               pv.data(), pout.data()) != WEIR_OK) {
      printf("FAIL %s: the CPU plugin's prefix write\n", c.name.c_str());
      ++g_failures;
      return;
    }
  }
  weir_attn_batch b = {sizeof b, S, T, qsl.data(), ctxv.data(), bt_step.data(), max_blocks,
                       slots.data(), max_q, max_ctx, qsl.data(), ctxv.data(), bt_step.data(),
                       slots.data()};
  // RoPE: each new token's position, and the per-pair frequencies of the rope_freqs form
  // (made-up scaling: base 10000 with every pair's frequency divided by 1 + i / 8).
  std::vector<int32_t> positions(T);
  for (int s2 = 0; s2 < S; ++s2)
    for (int i = 0; i < c.qlen[s2]; ++i) positions[qsl[s2] + i] = c.ctx[s2] - c.qlen[s2] + i;
  std::vector<float> inv_freq(c.rope_dim / 2 + 1);
  for (int i = 0; i < c.rope_dim / 2; ++i)
    inv_freq[i] = (float)(std::pow(10000.0, -2.0 * i / c.rope_dim) / (1.0 + i / 8.0));
  const float base = 10000.0f, fscale = 0.5f, mscale = 1.25f;
  std::vector<float> qref = q, kref = k; // what the CPU plugin attends with
  if (c.rope_dim > 0) {
    if (c.rope_freqs) {
      weir_cuda_rope_freqs(nullptr, qref.data(), positions.data(), T, c.heads, c.hd, c.rope_dim,
                           inv_freq.data(), mscale, c.rope_style);
      weir_cuda_rope_freqs(nullptr, kref.data(), positions.data(), T, c.kv_heads, c.hd,
                           c.rope_dim, inv_freq.data(), mscale, c.rope_style);
    } else {
      weir_cuda_rope(nullptr, qref.data(), positions.data(), T, c.heads, c.hd, c.rope_dim, base,
                     fscale, c.rope_style);
      weir_cuda_rope(nullptr, kref.data(), positions.data(), T, c.kv_heads, c.hd, c.rope_dim,
                     base, fscale, c.rope_style);
    }
  }
  weir_attn_rope rope = {sizeof rope, positions.data(), positions.data(), c.rope_dim,
                         c.rope_style, base, fscale,
                         c.rope_freqs ? inv_freq.data() : nullptr, mscale};
  if (c.rope_dim > 0) {
    // The CPU plugin's own forward_rope, on a copy of the cache: it must rotate (the
    // unrotated inputs give a different result) and agree with the rope kernels' rotation
    // to the f32-vs-f64 angle difference.
    std::vector<unsigned char> pool2 = cpu_pool;
    weir_kv_view kv2 = {pool2.data(), bb, pool_blocks};
    std::vector<float> o2 = shim_poisoned((size_t)T * qw), o3 = shim_poisoned((size_t)T * qw);
    std::vector<unsigned char> pool3 = cpu_pool;
    weir_kv_view kv3 = {pool3.data(), bb, pool_blocks};
    std::vector<float> qr = qref, kr = kref;
    const int rc2 = cpu_ops->forward_rope(cpu_self, &shape, &lp, &rope, &b, &kv2, q.data(),
                                          k.data(), v.data(), o2.data());
    const int rc3 = cpu_ops->forward_layer(cpu_self, &shape, &lp, &b, &kv3, qr.data(), kr.data(),
                                           v.data(), o3.data());
    bool f2, f3;
    const double e2 = shim_rel_err(o2, std::vector<double>(o3.begin(), o3.end()), &f2);
    std::vector<float> o4 = shim_poisoned((size_t)T * qw);
    std::vector<unsigned char> pool4 = cpu_pool;
    weir_kv_view kv4 = {pool4.data(), bb, pool_blocks};
    cpu_ops->forward_layer(cpu_self, &shape, &lp, &b, &kv4, q.data(), k.data(), v.data(),
                           o4.data());
    const double e_unrot = shim_rel_err(o2, std::vector<double>(o4.begin(), o4.end()), &f3);
    const bool ok = rc2 == WEIR_OK && rc3 == WEIR_OK && f2 && e2 < 2e-3 && e_unrot > 1e-2;
    printf("%s %s: cpu forward_rope vs rope kernels + forward_layer rel err %.3g (unrotated "
           "%.3g)\n", ok ? "ok  " : "FAIL", c.name.c_str(), e2, e_unrot);
    if (!ok) ++g_failures;
    // Bad RoPE is refused before anything is written.
    weir_attn_rope bad = rope;
    bad.rot_dim = c.hd + 2;
    std::vector<unsigned char> pool5 = cpu_pool;
    weir_kv_view kv5 = {pool5.data(), bb, pool_blocks};
    const bool refused = cpu_ops->forward_rope(cpu_self, &shape, &lp, &bad, &b, &kv5, q.data(),
                                               k.data(), v.data(), o4.data()) == WEIR_E_INVAL &&
                         pool5 == cpu_pool;
    if (!refused) {
      printf("FAIL %s: the CPU plugin's forward_rope took rot_dim %d\n", c.name.c_str(),
             bad.rot_dim);
      ++g_failures;
    }
  }
  if (cpu_ops->forward_layer(cpu_self, &shape, &lp, &b, &kv, qref.data(), kref.data(), v.data(),
                             cpu_out.data()) != WEIR_OK) {
    printf("FAIL %s: the CPU plugin's forward\n", c.name.c_str());
    ++g_failures;
    return;
  }

  // ---- the CUDA kernels, fed as plugins/attention/paged_cuda feeds them ----------------------
  weir_cuda_attn_params p{};
  p.n_heads = c.heads;
  p.n_kv_heads = c.kv_heads;
  p.head_dim = c.hd;
  p.block_size = bs;
  p.kv_dtype = c.dt;
  p.scale = c.scale > 0.0f ? c.scale : shape.scale;
  p.num_seqs = S;
  p.num_tokens = T;
  p.max_query_len = max_q;
  p.max_context_len = max_ctx;
  p.query_start_loc = qsl.data();
  p.context_lens = ctxv.data();
  p.block_tables = bt_step.data();
  p.max_blocks_per_seq = max_blocks;
  p.slot_mapping = slots.data();
  p.block_bytes = bb;
  p.num_blocks = pool_blocks;
  p.window = c.window;
  p.softcap = c.softcap;
  if (c.rope_dim > 0) { // as plugins/attention/paged_cuda fills them from weir_attn_rope
    p.positions = positions.data();
    p.rope_dim = c.rope_dim;
    p.rope_neox = c.rope_style == 2;
    p.rope_log2_base = c.rope_freqs ? 0.0f : log2f(base);
    p.rope_freq_scale = fscale;
    p.rope_inv_freq = c.rope_freqs ? inv_freq.data() : nullptr;
    p.rope_mscale = mscale;
  }
  const std::vector<float> q_in = q, k_in = k;
  weir_cuda_attn_plan plan;
  if (weir_cuda_attn_plan_make(&p, c.num_sms, 227 * 1024, &plan) != cudaSuccess) {
    printf("FAIL %s: no plan\n", c.name.c_str());
    ++g_failures;
    return;
  }
  if (plan.num_splits < c.want_splits) {
    printf("FAIL %s: %d splits, the case wants >= %d\n", c.name.c_str(), plan.num_splits,
           c.want_splits);
    ++g_failures;
  }
  // Reversed block order only matters when a split reduction runs.
  for (int reverse = 0; reverse < (plan.num_splits > 1 ? 2 : 1); ++reverse) {
    shim_reverse_blocks = reverse != 0;
    std::vector<unsigned char> pool((size_t)pool_blocks * bb, 0xFF); // NaN bits everywhere
    p.kv_base = pool.data();
    if (!pslots.empty()) {
      weir_cuda_attn_params pp = p;
      pp.num_tokens = (int32_t)pslots.size();
      pp.slot_mapping = pslots.data();
      pp.rope_dim = 0; // the cached prefix went in unrotated on the CPU side too
      weir_cuda_kv_write(nullptr, &pp, pk.data(), pv.data());
    }
    std::vector<float> ws(plan.workspace_bytes / 4 + 1);
    std::vector<int> counters(plan.counter_bytes / sizeof(int) + 1, 0);
    std::vector<float> out = shim_poisoned((size_t)T * qw);
    weir_cuda_kv_write(nullptr, &p, k.data(), v.data());
    weir_cuda_attention(nullptr, &p, &plan, q.data(), out.data(), ws.data(), counters.data());
    bool zero = true;
    for (int x : counters) zero = zero && x == 0;
    if (q != q_in || k != k_in) {
      printf("FAIL %s: the kernels modified q or k\n", c.name.c_str());
      ++g_failures;
    }
    // The cache bytes: every slot either side wrote must hold the same bytes.
    bool same_cache = true;
    for (int s = 0; s < S; ++s)
      for (int blk = 0; blk < (c.ctx[s] + bs - 1) / bs; ++blk) {
        const size_t at = (size_t)bt[(size_t)s * max_blocks + blk] * bb;
        const int filled = std::min(bs, c.ctx[s] - blk * bs);
        // Compare row by row (a partly filled block's tail slots are untouched NaN bits on
        // both sides, but compare only the written rows to keep the check exact).
        for (int isv = 0; isv < 2; ++isv)
          for (int h = 0; h < c.kv_heads; ++h) {
            const size_t es = c.dt == 24 ? 1 : 2;
            const size_t off = at + ((size_t)(isv * c.kv_heads + h) * bs) * c.hd * es;
            if (memcmp(&pool[off], &cpu_pool[off], (size_t)filled * c.hd * es) != 0)
              same_cache = false;
            if (c.dt == 24) {
              const size_t so = at + 2 * (size_t)c.kv_heads * bs * c.hd +
                                ((size_t)(isv * c.kv_heads + h) * bs) * 4;
              if (memcmp(&pool[so], &cpu_pool[so], (size_t)filled * 4) != 0) same_cache = false;
            }
          }
      }
    std::vector<double> ref(cpu_out.begin(), cpu_out.end());
    bool finite = true;
    const double err = shim_rel_err(out, ref, &finite);
    const bool ok = finite && err < 2e-5 && zero && same_cache;
    printf("%s %s%s: rows/cta %d, splits %d, rel err vs cpu %.3g%s%s\n", ok ? "ok  " : "FAIL",
           c.name.c_str(), reverse ? " (blocks reversed)" : "", plan.rows_per_cta,
           plan.num_splits, err, zero ? "" : ", counters not reset",
           same_cache ? "" : ", cache bytes differ");
    if (!ok) ++g_failures;
  }
  shim_reverse_blocks = false;
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0); // progress lines as they come (a slow shared machine)
  if (!load_cpu_attention()) return 1;
  std::vector<Case> cases;
  // GQA ratios 1, 4 and 8 (one or two KV heads: the shim runs a host thread per CUDA thread,
  // so CTAs are dear here).
  const int groups[3][2] = {{1, 1}, {8, 2}, {8, 1}};
  const int dts[2] = {1, 24};
  for (auto &g : groups)
    for (int dt : dts) {
      const std::string tag = std::string(dt == 1 ? "f16" : "int8") + " " +
                              std::to_string(g[0]) + "/" + std::to_string(g[1]);
      // Batch 1 over the context range: 1, just past a block's edge, 129 tokens = 9 blocks in
      // 4 splits of 3 (the last gets none), 1000 tokens = 63 blocks in 31 splits of 3 (the
      // last 10 get none), and 4096 = 64 splits of 4 blocks for one ratio per dtype.
      const bool longest = (dt == 1 && g[1] == 2) || (dt == 24 && g[0] == 8 && g[1] == 1);
      for (int ctx : {1, 17, 129, 1000, 4096}) {
        if (ctx == 4096 && !longest) continue;
        Case c{"decode " + tag + " ctx " + std::to_string(ctx), g[0], g[1], 64, dt, 132,
               {ctx}, {1}};
        c.want_splits = ctx >= 129 ? 2 : 0;
        cases.push_back(c);
      }
      // A batch mixing contexts, split on a small GPU: the partition is per sequence.
      Case m{"decode batch " + tag + " ctx 1/16/300/2049", g[0], g[1], 64, dt, 8,
             {1, 16, 300, 2049}, {1, 1, 1, 1}};
      m.want_splits = 2;
      cases.push_back(m);
    }
  // Layer parameters (ABI 1.5/1.6) through the split path.
  Case w1{"window 100 decode f16 8/2 ctx 4096", 8, 2, 64, 1, 132, {4096}, {1}, 100};
  w1.want_splits = 2;
  cases.push_back(w1);
  Case w2{"window 1 decode int8 8/1 ctx 3000", 8, 1, 64, 24, 132, {3000}, {1}, 1};
  cases.push_back(w2);
  Case w3{"window 500 softcap 30 scale 0.2 int8 8/2 batch", 8, 2, 64, 24, 16, {2000, 700, 33},
          {1, 1, 1}, 500, 30.0f, 0.2f};
  w3.want_splits = 2;
  cases.push_back(w3);
  Case sc{"softcap 2 scale 0.1 f16 8/1 ctx 1500", 8, 1, 64, 1, 132, {1500}, {1}, 0, 2.0f, 0.1f};
  sc.want_splits = 2;
  cases.push_back(sc);
  cases.push_back(Case{"chunked prefill f16 8/2 d128 ctx 300+40", 8, 2, 128, 1, 132, {300, 90},
                       {40, 1}});
  cases.push_back(Case{"verify int8 8/2 ctx 200 k+1=5", 8, 2, 64, 24, 132, {200, 77}, {5, 5}});
  // ABI 1.7 forward_rope: RoPE fused into the KV write and the query load, both styles,
  // partial rotation, the rope_freqs form, f16 and int8 (K rotated before its row scale is
  // found), decode through splits and a chunked prefill.
  {
    Case r1{"rope norm fused f16 8/2 decode batch", 8, 2, 64, 1, 16, {300, 17, 1}, {1, 1, 1}};
    r1.rope_dim = 64;
    cases.push_back(r1);
    Case r2{"rope neox partial 32 fused int8 8/1 ctx 700", 8, 1, 64, 24, 132, {700}, {1}};
    r2.rope_dim = 32;
    r2.rope_style = 2;
    r2.want_splits = 2;
    cases.push_back(r2);
    Case r3{"rope_freqs fused int8 4/2 chunked prefill", 4, 2, 64, 24, 132, {90, 40}, {30, 1}};
    r3.rope_dim = 64;
    r3.rope_freqs = true;
    cases.push_back(r3);
    Case r4{"rope_freqs neox fused f16 8/1 window 50 ctx 400", 8, 1, 64, 1, 132, {400}, {1}, 50};
    r4.rope_dim = 64;
    r4.rope_style = 2;
    r4.rope_freqs = true;
    cases.push_back(r4);
  }
  // WEIR_SHIM_FILTER=substring runs only the cases whose name holds it (for kernel work).
  const char *filter = getenv("WEIR_SHIM_FILTER");
  for (const auto &c : cases)
    if (!filter || c.name.find(filter) != std::string::npos) run(c);
  if (g_failures) printf("%d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
