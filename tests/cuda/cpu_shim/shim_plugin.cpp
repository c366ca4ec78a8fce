// shim_plugin.h: the CPU reference plugins of the shim suites, loaded as the core would (the
// host's option and set_error of ABI 1.5 come from tests/common/wt_options.h).
#include "shim_plugin.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shim_test.h"
#include "wt_options.h"

namespace {

// Warnings and errors only: the suites print their own ok/FAIL lines.
void h_log(void *, weir_log_level lvl, const char *fmt, ...) {
  if (lvl < WEIR_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void *h_alloc(void *, size_t n, size_t align) {
  void *p = nullptr;
  return posix_memalign(&p, align < 64 ? 64 : align, n ? n : 1) == 0 ? p : nullptr;
}

void h_free(void *, void *p) { free(p); }

// One thread: the reference runs serially, so its float order is fixed.
void h_pfor(void *, int64_t n, int64_t, weir_parallel_fn fn, void *arg) {
  if (n > 0) fn(arg, 0, n, 0);
}

int h_threads(void *) { return 1; }

weir_host g_host;

} // namespace

bool shim_load_plugin(const char *file, const char *int_key, int64_t int_value,
                      shim_plugin *out) {
  const std::string path = shim_plugin_dir(file) + "/" + file;
  void *dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    printf("FAIL cannot load %s: %s\n", file, dlerror());
    return false;
  }
  auto entry = (weir_plugin_entry_fn)dlsym(dl, WEIR_PLUGIN_ENTRY_SYMBOL);
  const weir_plugin_desc *d = entry ? entry() : nullptr;
  if (!d) {
    printf("FAIL %s has no plugin entry\n", file);
    dlclose(dl);
    return false;
  }
  g_host.struct_size = sizeof g_host;
  g_host.abi_minor = WEIR_ABI_MINOR;
  g_host.log = h_log;
  g_host.alloc = h_alloc;
  g_host.free = h_free;
  g_host.parallel_for = h_pfor;
  g_host.num_threads = h_threads;
  wt_options_host(&g_host);
  // The values need to live through init only (wt_options_use's contract: plugins read their
  // options there).
  std::vector<weir_option_value> ov(d->num_options);
  for (int i = 0; i < d->num_options; ++i) {
    weir_option_value &v = ov[i];
    v.i = d->options[i].def_int;
    v.f = d->options[i].def_float;
    v.b = d->options[i].def_bool;
    v.s = d->options[i].def_string ? d->options[i].def_string : "";
    if (int_key && d->options[i].key && !strcmp(d->options[i].key, int_key)) v.i = int_value;
  }
  wt_options_use(d, ov.data());
  weir_plugin_args args = {sizeof args, WEIR_DEVICE_CPU, ov.data(), d->num_options};
  void *self = nullptr;
  const int rc = d->init(&g_host, &args, &self);
  wt_options_use(nullptr, nullptr); // ov ends here
  if (rc != WEIR_OK) {
    printf("FAIL init %s: %s\n", file, wt_options_error);
    return false;
  }
  out->desc = d;
  out->ops = d->ops;
  out->self = self;
  return true;
}
