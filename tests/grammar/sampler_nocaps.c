/* A test sampler that declares no ABI 1.1 capability: greedy argmax (ties to the lowest id)
 * and its one-hot distribution, reading only the 1.0 fields of its rows, as a sampler built
 * before structured output would. The host must apply masks and logit bias for it. */
#include <math.h>

#include "weir/sampler.h"

static int nc_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  (void)host;
  (void)args;
  static int instance;
  *self = &instance;
  return WEIR_OK;
}

static void nc_fini(void *self) { (void)self; }

static int32_t argmax(const float *x, int32_t vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

static int nc_sample(void *self, const weir_sampling_row *rows, int32_t n, float *logits,
                     int32_t vocab, weir_sample_result *out) {
  (void)self;
  (void)rows;
  for (int32_t r = 0; r < n; r++) {
    const float *x = logits + (size_t)r * (size_t)vocab;
    out[r] = (weir_sample_result){.token = argmax(x, vocab)};
    double mx = x[out[r].token], s = 0;
    for (int32_t i = 0; i < vocab; i++) s += exp((double)x[i] - mx);
    out[r].logprob = (float)(-log(s));
  }
  return WEIR_OK;
}

static int nc_probs(void *self, const weir_sampling_row *rows, int32_t n, float *logits,
                    int32_t vocab, float *probs) {
  (void)self;
  (void)rows;
  for (int32_t r = 0; r < n; r++) {
    const int32_t best = argmax(logits + (size_t)r * (size_t)vocab, vocab);
    for (int32_t i = 0; i < vocab; i++) probs[(size_t)r * (size_t)vocab + i] = i == best;
  }
  return WEIR_OK;
}

/* The 1.0 layout of the ops: struct_size stops before `caps`. */
static const weir_sampler_ops k_ops = {
    .struct_size = (uint32_t)offsetof(weir_sampler_ops, caps),
    .sample = nc_sample,
    .probs = nc_probs,
};

static const weir_plugin_desc k_desc = {
    .struct_size = sizeof(weir_plugin_desc),
    .abi_major = WEIR_ABI_MAJOR,
    .abi_minor = 0,
    .build_signature = WEIR_BUILD_SIGNATURE,
    .kind = WEIR_PLUGIN_SAMPLER,
    .name = "nocaps",
    .version = "1.0.0",
    .description = "greedy, built as a 1.0 sampler (tests the host's constraint fallback)",
    .devices = WEIR_DEVICE_CPU,
    .init = nc_init,
    .fini = nc_fini,
    .ops = &k_ops,
};

WEIR_PLUGIN_EXPORT(k_desc)
