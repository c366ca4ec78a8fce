// What the CPU-shim suites that compare a kernel with a CPU plugin share: loading that plugin
// (weir_*.so, dlopen) with a minimal host table, every option at its declared default except
// one integer the caller may set, and initialising it on the CPU device.
//
// Memory: the plugin and its host table live until the process exits (the suites never unload
// them); the option values live through init only. Not thread-safe: load from the suite's
// main thread only.
#ifndef WEIR_TESTS_SHIM_PLUGIN_H
#define WEIR_TESTS_SHIM_PLUGIN_H

#include <cstdint>

#include "weir/plugin.h"

struct shim_plugin {
  const weir_plugin_desc *desc = nullptr;
  const void *ops = nullptr; // the plugin's ops table (cast to the kind's struct)
  void *self = nullptr;      // its instance, from init
};

// Loads `file` from shim_plugin_dir (the build tree, or the bundle beside the executable) and
// initialises it. When int_key is not NULL, the integer option of that key is set to
// int_value (other options keep their defaults). On failure prints one "FAIL ..." line naming
// the file and the plugin's message (dlopen error, missing entry, init's set_error text) and
// returns false; *out is then untouched.
bool shim_load_plugin(const char *file, const char *int_key, int64_t int_value,
                      shim_plugin *out);

#endif
