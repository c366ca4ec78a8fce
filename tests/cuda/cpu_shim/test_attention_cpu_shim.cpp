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
// checks the plugin itself.
#define WEIR_SHIM_EXTERN_SHARED
#include "cuda_shim.h"

namespace {
alignas(16) float sm[1 << 18]; // the running block's dynamic shared memory (1 MiB)
}
// Publishes sm's address so that the optimizer cannot assume the barrier call leaves it
// untouched (other threads write it between barriers).
void *volatile shim_smem_escape = sm;

#include "attention.cu"

#include <dlfcn.h>

#include <cstdarg>
#include <cstring>
#include <string>

#include "shim_test.h"
#include "weir/attention.h"
#include "wt_options.h"

static int g_failures = 0;
static uint64_t g_rng = 0xA77E5EEDull;

static float uni(float lo, float hi) { return shim_uniform(&g_rng, lo, hi); }

static void h_log(void *, weir_log_level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}
static void *h_alloc(void *, size_t n, size_t a) {
  void *p = nullptr;
  return posix_memalign(&p, a < 64 ? 64 : a, n ? n : 1) == 0 ? p : nullptr;
}
static void h_free(void *, void *p) { free(p); }
static int h_threads(void *) { return 1; }

static const weir_attention_ops *cpu_ops;
static void *cpu_self;

static bool load_cpu_attention() {
  const char *file = "weir_attention_paged.so";
  std::string dir = shim_plugin_dir(file);
  void *dl = dlopen((dir + "/" + file).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    printf("FAIL cannot load the CPU paged attention: %s\n", dlerror());
    return false;
  }
  auto entry = (weir_plugin_entry_fn)dlsym(dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  const weir_plugin_desc *d = entry();
  static weir_host host;
  host.struct_size = sizeof host;
  host.abi_minor = WEIR_ABI_MINOR;
  host.log = h_log;
  host.alloc = h_alloc;
  host.free = h_free;
  host.num_threads = h_threads;
  wt_options_host(&host);
  static std::vector<weir_option_value> ov;
  ov.resize(d->num_options);
  for (int i = 0; i < d->num_options; ++i) {
    ov[i].i = d->options[i].def_int;
    ov[i].f = d->options[i].def_float;
    ov[i].b = d->options[i].def_bool;
    ov[i].s = d->options[i].def_string ? d->options[i].def_string : "";
  }
  wt_options_use(d, ov.data());
  weir_plugin_args args = {sizeof args, WEIR_DEVICE_CPU, ov.data(), d->num_options};
  if (d->init(&host, &args, &cpu_self) != WEIR_OK) {
    printf("FAIL init the CPU paged attention: %s\n", wt_options_error);
    return false;
  }
  cpu_ops = (const weir_attention_ops *)d->ops;
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
  if (cpu_ops->forward_layer(cpu_self, &shape, &lp, &b, &kv, q.data(), k.data(), v.data(),
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
      weir_cuda_kv_write(nullptr, &pp, pk.data(), pv.data());
    }
    std::vector<float> ws(plan.workspace_bytes / 4 + 1);
    std::vector<int> counters(plan.counter_bytes / sizeof(int) + 1, 0);
    std::vector<float> out = shim_poisoned((size_t)T * qw);
    weir_cuda_kv_write(nullptr, &p, k.data(), v.data());
    weir_cuda_attention(nullptr, &p, &plan, q.data(), out.data(), ws.data(), counters.data());
    bool zero = true;
    for (int x : counters) zero = zero && x == 0;
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
  for (const auto &c : cases) run(c);
  if (g_failures) printf("%d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
