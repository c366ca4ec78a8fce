// kernels/cuda/sampler.cu executed on the CPU (cuda_shim.h) against the CPU default sampler
// plugin (weir_sampler_default.so, loaded with dlopen): the same logits, parameters and seeds
// must give the same tokens, logprobs, top-logprob lists and random-state advances. The
// per-row parameter records and penalty entries are built here the way
// plugins/sampler/default_cuda builds them. On a GPU machine cuda_sampler checks the plugin.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "weir/rng.h"
#include "weir/sampler.h"
#include "shim_plugin.h"
#include "shim_test.h"
#include "weir_cuda_kernels.h"

static uint64_t g_rng = 0x51ED5EEDull;

static float uni(float lo, float hi) { return shim_uniform(&g_rng, lo, hi); }


// ---- the CPU reference plugin --------------------------------------------------------------
static const weir_sampler_ops *cpu_ops;
static void *cpu_self;

static bool load_cpu_sampler() {
  shim_plugin pl;
  if (!shim_load_plugin("weir_sampler_default.so", nullptr, 0, &pl)) return false;
  cpu_ops = (const weir_sampler_ops *)pl.ops;
  cpu_self = pl.self;
  return true;
}

// ---- the kernels, fed as the CUDA plugin feeds them ----------------------------------------
static void gpu_sample(const std::vector<weir_sampling_row> &rows, std::vector<float> logits,
                       int vocab, std::vector<weir_sample_result> &out,
                       std::vector<float> *probs = nullptr) {
  const int R = (int)rows.size();
  std::vector<weir_cuda_sample_params> prm(R);
  std::vector<weir_cuda_penalty> pen;
  std::vector<uint32_t> masks;
  const size_t words = WEIR_MASK_WORDS(vocab);
  std::vector<std::vector<uint64_t>> next(R, std::vector<uint64_t>(4));
  int any_sorted = 0;
  for (int r = 0; r < R; ++r) {
    const weir_sampling_params *p = rows[r].params;
    weir_cuda_sample_params &q = prm[r];
    memset(&q, 0, sizeof q);
    q.greedy = p->temperature == 0.0f;
    q.inv_temp = q.greedy ? 1.0f : 1.0f / p->temperature;
    q.top_k = p->top_k;
    q.top_p = p->top_p;
    q.min_p = p->min_p;
    q.repetition_penalty = p->repetition_penalty;
    q.presence_penalty = p->presence_penalty;
    q.frequency_penalty = p->frequency_penalty;
    q.num_logprobs = p->num_logprobs;
    q.sorted = !q.greedy && (p->top_p < 1.0f || (p->top_k > 0 && p->top_k < vocab));
    any_sorted |= q.sorted;
    if (!q.greedy && !probs) {
      memcpy(next[r].data(), rows[r].rng_state, 32);
      q.u = weir_rng_uniform(next[r].data());
    }
    q.mask_row = -1;
    if (p->allowed) {
      q.mask_row = (int32_t)(masks.size() / words);
      masks.insert(masks.end(), p->allowed, p->allowed + words);
    }
    std::map<int, weir_cuda_penalty> m;
    auto ent = [&](int t) -> weir_cuda_penalty & {
      auto it = m.find(t);
      if (it == m.end()) it = m.emplace(t, weir_cuda_penalty{r, t, 0, 0, 0.0f}).first;
      return it->second;
    };
    for (int i = 0; i < p->num_logit_bias; ++i) {
      int t = p->logit_bias_tokens[i];
      if (t < 0 || t >= vocab) continue;
      ent(t).flags |= WEIR_CUDA_PEN_BIAS;
      ent(t).bias += p->logit_bias_values[i];
    }
    for (int i = 0; i < rows[r].num_suppress_tokens; ++i) {
      int t = rows[r].suppress_tokens[i];
      if (t >= 0 && t < vocab) ent(t).flags |= WEIR_CUDA_PEN_SUPPRESS;
    }
    if (p->repetition_penalty != 1.0f) {
      for (int i = 0; i < rows[r].num_prompt_tokens; ++i) ent(rows[r].prompt_tokens[i]).flags |= WEIR_CUDA_PEN_REPEAT;
      for (int i = 0; i < rows[r].num_output_tokens; ++i) ent(rows[r].output_tokens[i]).flags |= WEIR_CUDA_PEN_REPEAT;
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)
      for (int i = 0; i < rows[r].num_output_tokens; ++i) ent(rows[r].output_tokens[i]).count++;
    for (auto &kv : m) pen.push_back(kv.second);
  }
  weir_cuda_sample_penalties(nullptr, logits.data(), vocab, prm.data(), pen.data(), (int)pen.size());
  if (!masks.empty())
    weir_cuda_sample_mask(nullptr, logits.data(), R, vocab, prm.data(), masks.data());
  std::vector<char> ws(weir_cuda_sample_workspace_bytes(R, vocab));
  std::vector<int32_t> off(2 * R);
  std::vector<weir_cuda_sample_result> res(R);
  if (probs) probs->assign((size_t)R * vocab, NAN);
  weir_cuda_sample(nullptr, logits.data(), R, vocab, prm.data(), any_sorted, ws.data(), ws.size(),
                   off.data(), res.data(), probs ? probs->data() : nullptr);
  out.assign(R, weir_sample_result{});
  if (probs) return;
  for (int r = 0; r < R; ++r) {
    out[r].token = res[r].token;
    out[r].logprob = res[r].logprob;
    out[r].num_top = res[r].num_top;
    memcpy(out[r].top_tokens, res[r].top_tokens, sizeof out[r].top_tokens);
    memcpy(out[r].top_logprobs, res[r].top_logprobs, sizeof out[r].top_logprobs);
    if (res[r].drew) memcpy(rows[r].rng_state, next[r].data(), 32);
  }
}

// Per-row constraints for compare(): rows 1 and 3 get an allowed-token mask (row 1 a sparse
// one of 40 tokens, row 3 every token but a band of 2000), rows 2 and 3 a logit bias that
// lifts a few tokens above the rest and bans others.
struct Constraints {
  std::vector<std::vector<uint32_t>> masks;
  std::vector<int32_t> bias_tokens;
  std::vector<float> bias_values;
  void apply(std::vector<weir_sampling_params> &params, int V) {
    const size_t words = WEIR_MASK_WORDS(V);
    masks.assign(params.size(), std::vector<uint32_t>(words, 0));
    for (int i = 0; i < 40; ++i) {
      int t = (int)uni(0, V);
      masks[1][t >> 5] |= 1u << (t & 31);
    }
    masks[1][17 >> 5] |= 1u << (17 & 31); // keeps the exact tie among the allowed
    masks[1][2000 >> 5] |= 1u << (2000 & 31);
    for (int t = 0; t < V; ++t)
      if (t < 500 || t >= 2500) masks[3][t >> 5] |= 1u << (t & 31);
    bias_tokens = {5, 2600, 17, 2999, 40, -1, 1 << 30};
    bias_values = {9.0f, 7.5f, -100.0f, 3.0f, 100.0f, 50.0f, 50.0f};
    params[1].allowed = masks[1].data();
    params[3].allowed = masks[3].data();
    for (int r : {2, 3}) {
      params[r].logit_bias_tokens = bias_tokens.data();
      params[r].logit_bias_values = bias_values.data();
      params[r].num_logit_bias = (int32_t)bias_tokens.size();
    }
  }
};

// same_tokens: without top-k/top-p both walk candidates in id order, so equal seeds must give
// equal tokens; with them the CPU walks its quickselect order, so the distributions (probs())
// must agree instead, and every drawn token must lie in the CPU's support. constrained: rows
// carry masks and logit bias (Constraints); every token drawn must then be allowed.
static void compare(const char *name, weir_sampling_params p, int rounds, bool same_tokens,
                    bool constrained = false) {
  const int R = 4, V = 3000;
  std::vector<weir_sampling_params> params(R, p);
  Constraints cons;
  if (constrained) cons.apply(params, V);
  std::vector<std::vector<int32_t>> prompt(R), output(R);
  std::vector<int32_t> suppress = {17, 2999, -3};
  uint64_t sc[R][4], sg[R][4];
  std::vector<weir_sampling_row> rc(R), rg(R);
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < 30; ++i) prompt[r].push_back((int)uni(0, 200));
    for (int i = 0; i < 20; ++i) output[r].push_back((int)uni(0, 200));
    for (int j = 0; j < 4; ++j) sc[r][j] = sg[r][j] = ((uint64_t)(uni(0, 1) * 4e9) << 32) ^ (uint64_t)(uni(0, 1) * 4e9);
    weir_sampling_row w{};
    w.params = &params[r];
    w.prompt_tokens = prompt[r].data();
    w.num_prompt_tokens = (int)prompt[r].size();
    w.output_tokens = output[r].data();
    w.num_output_tokens = (int)output[r].size();
    w.suppress_tokens = suppress.data();
    w.num_suppress_tokens = r % 2 ? 3 : 0;
    rc[r] = w;
    rg[r] = w;
    rc[r].rng_state = sc[r];
    rg[r].rng_state = sg[r];
  }
  int diff = 0, lp_bad = 0;
  for (int k = 0; k < rounds; ++k) {
    std::vector<float> logits((size_t)R * V);
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < V; ++i) logits[(size_t)r * V + i] = uni(-4, 4);
      for (int j = 0; j < 15; ++j) logits[(size_t)r * V + (int)uni(0, V)] += 6.0f;
      logits[(size_t)r * V + 17] = logits[(size_t)r * V + 2000] = 11.5f; // an exact tie
    }
    std::vector<float> host = logits;
    std::vector<weir_sample_result> a(R), b;
    if (cpu_ops->sample(cpu_self, rc.data(), R, host.data(), V, a.data()) != WEIR_OK) {
      printf("FAIL %s: the CPU sampler refused\n", name);
      ++g_failures;
      return;
    }
    gpu_sample(rg, logits, V, b);
    std::vector<float> pc((size_t)R * V), pg;
    if (!same_tokens) {
      std::vector<float> h2 = logits;
      cpu_ops->probs(cpu_self, rc.data(), R, h2.data(), V, pc.data());
      std::vector<weir_sample_result> unused;
      gpu_sample(rg, logits, V, unused, &pg);
      for (size_t i = 0; i < pc.size(); ++i)
        if (!(std::fabs(pc[i] - pg[i]) <= 1e-6f)) ++lp_bad;
    }
    for (int r = 0; r < R; ++r) {
      if (params[r].allowed && (!weir_mask_test(params[r].allowed, a[r].token) ||
                                !weir_mask_test(params[r].allowed, b[r].token)))
        ++diff; // a disallowed token was drawn
      if (params[r].allowed)
        for (int i = 0; i < b[r].num_top; ++i)
          if (!weir_mask_test(params[r].allowed, b[r].top_tokens[i])) ++lp_bad;
      if (same_tokens) diff += a[r].token != b[r].token;
      else diff += !(pc[(size_t)r * V + b[r].token] > 0.0f);
      if (p.num_logprobs >= 0 && std::fabs(a[r].logprob - b[r].logprob) > 1e-4f) ++lp_bad;
      if (a[r].num_top != b[r].num_top) ++lp_bad;
      for (int i = 0; i < a[r].num_top && i < b[r].num_top; ++i)
        if (a[r].top_tokens[i] != b[r].top_tokens[i] ||
            std::fabs(a[r].top_logprobs[i] - b[r].top_logprobs[i]) > 1e-4f)
          ++lp_bad;
    }
  }
  const bool same_state = memcmp(sc, sg, sizeof sc) == 0;
  const bool ok = diff == 0 && lp_bad == 0 && same_state;
  printf("%s %s: %d/%d tokens %s, %d logprob/probability mismatches, states %s\n",
         ok ? "ok  " : "FAIL", name, diff, rounds * R,
         same_tokens ? "differ" : "outside the CPU's support", lp_bad,
         same_state ? "equal" : "DIFFER");
  if (!ok) ++g_failures;
}

int main() {
  if (!load_cpu_sampler()) return 1;
  weir_sampling_params base{};
  base.struct_size = sizeof base;
  base.temperature = 1.0f;
  base.top_p = 1.0f;
  base.repetition_penalty = 1.0f;
  base.num_logprobs = -1;

  weir_sampling_params p = base;
  p.temperature = 0.0f;
  p.num_logprobs = 5;
  compare("greedy + 5 logprobs", p, 2, true);
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.num_logprobs = 20;
  compare("greedy + penalties + 20 logprobs", p, 2, true);
  p = base;
  p.temperature = 0.8f;
  p.num_logprobs = 0;
  compare("temperature 0.8", p, 6, true);
  p.min_p = 0.05f;
  compare("temperature + min-p", p, 6, true);
  p = base;
  p.temperature = 1.2f;
  p.top_p = 0.9f;
  compare("top-p 0.9", p, 3, false);
  p.top_k = 50;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.1f;
  compare("top-p + top-k + min-p + penalty", p, 3, false);
  p = base;
  p.temperature = 0.7f;
  p.top_k = 40;
  compare("top-k 40", p, 3, false);

  // Allowed-token masks and logit bias (ABI 1.1), through every path.
  p = base;
  p.temperature = 0.0f;
  p.num_logprobs = 20;
  compare("greedy + masks + bias + 20 logprobs", p, 1, true, true);
  p = base;
  p.temperature = 0.9f;
  p.num_logprobs = 5;
  p.repetition_penalty = 1.2f;
  compare("temperature + masks + bias + penalty", p, 1, true, true);
  p.top_p = 0.8f;
  p.top_k = 30;
  compare("top-p + top-k + masks + bias", p, 1, false, true);
  if (g_failures) printf("%d failure(s)\n", g_failures);
  return g_failures ? 1 : 0;
}
