// What the CPU-shim kernel tests (test_*_shim.cpp) share: their fixed-seed uniform generator,
// NaN-poisoned output buffers and the relative L2 error they judge outputs by. Header-only;
// every helper returns by value or writes only into what the caller passes and owns.
#ifndef WEIR_TESTS_SHIM_TEST_H
#define WEIR_TESTS_SHIM_TEST_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

// Uniform in [lo, hi) from xorshift64 over the caller's state: a fixed seed per suite gives the
// same inputs on every run, so a failure reproduces.
static inline float shim_uniform(uint64_t *state, float lo, float hi) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return lo + (hi - lo) * (float)((*state >> 40) * (1.0 / 16777216.0));
}

// n floats with every bit set (NaN): a kernel that skips an output cannot pass.
static inline std::vector<float> shim_poisoned(size_t n) {
  std::vector<float> v(n);
  memset(v.data(), 0xFF, n * 4);
  return v;
}

// ||out - ref|| / ||ref|| (the absolute norm when ref is all zero); *finite is cleared when
// any output is not finite.
static inline double shim_rel_err(const std::vector<float> &out, const std::vector<double> &ref,
                                  bool *finite) {
  double num = 0, den = 0;
  *finite = true;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) *finite = false;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The suite's count of failed checks (one per test binary); main returns non-zero when set.
[[maybe_unused]] static int g_failures = 0;

// One "ok"/"FAIL" line for `what`: passes when every output is finite and the relative L2
// error against ref is at most tol; a failure counts in g_failures.
[[maybe_unused]] static void shim_check(const char *what, const std::vector<float> &out,
                                        const std::vector<double> &ref, double tol) {
  bool finite;
  const double err = shim_rel_err(out, ref, &finite);
  const bool ok = finite && err <= tol;
  printf("%s %s: rel err %.3g (tol %.3g)\n", ok ? "ok  " : "FAIL", what, err, tol);
  if (!ok) ++g_failures;
}

#ifdef WEIR_SHIM_PLUGIN_DIR
// The folder the CPU plugins are loaded from: tests/bin/../../lib/weir/plugins beside this
// executable when `probe` is there (a build tree or gpu-check's bundle copied elsewhere), else
// the build tree CMake compiled in.
static inline std::string shim_plugin_dir(const char *probe) {
  std::string dir = WEIR_SHIM_PLUGIN_DIR;
  char exe[1024];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    std::string e(exe);
    std::string alt = e.substr(0, e.rfind('/')) + "/../../lib/weir/plugins";
    if (access((alt + "/" + probe).c_str(), R_OK) == 0) dir = alt;
  }
  return dir;
}
#endif

#endif
