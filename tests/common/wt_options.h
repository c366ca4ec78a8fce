/* weir_host.option and weir_host.set_error (ABI 1.5) for the test harnesses that hand a plugin
 * a host table of their own (tests/common/wt_plugin.h, tests/cuda, the benches): the options of
 * the plugin being initialised are looked up by key in its declaration, exactly as the core's
 * host does (core/plugin/host.c): an undeclared key is WEIR_E_NOTFOUND and a wrong type
 * WEIR_E_INVAL, each with a message. set_error keeps the message in wt_options_error (and
 * hands it to wt_options_error_hook when set), so a suite can check what a plugin says.
 *
 * Header-only, one state per test binary: call wt_options_use(desc, values) before init; the
 * values must stay valid while the plugin may read them (its init). Not thread-safe. */
#ifndef WEIR_TESTS_WT_OPTIONS_H
#define WEIR_TESTS_WT_OPTIONS_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "weir/plugin.h"

static const weir_plugin_desc *wt_options_desc;
static const weir_option_value *wt_options_values;
/* The last message a plugin gave through set_error (or that an option lookup failed with). */
static char wt_options_error[1024];
/* Called with each set_error message when not NULL (a suite's own log buffer). */
static void (*wt_options_error_hook)(const char *msg);

static inline void wt_options_use(const weir_plugin_desc *d, const weir_option_value *v) {
  wt_options_desc = d;
  wt_options_values = v;
}

static inline void wt_options_set_error(void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void wt_options_set_error(void *ctx, const char *fmt, ...) {
  (void)ctx;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(wt_options_error, sizeof wt_options_error, fmt, ap);
  va_end(ap);
  if (wt_options_error_hook) wt_options_error_hook(wt_options_error);
}

static inline int wt_options_option(void *ctx, const char *key, weir_option_type type,
                                    weir_option_value *out) {
  const weir_plugin_desc *d = wt_options_desc;
  for (int i = 0; d && key && out && wt_options_values && i < d->num_options; i++) {
    if (!d->options[i].key || strcmp(d->options[i].key, key) != 0) continue;
    if (d->options[i].type != type) {
      wt_options_set_error(ctx, "plugin '%s' read option '%s' with another type than declared",
                           d->name, key);
      return WEIR_E_INVAL;
    }
    *out = wt_options_values[i];
    return WEIR_OK;
  }
  wt_options_set_error(ctx, "plugin '%s' read option '%s', which it does not declare",
                       d ? d->name : "?", key ? key : "(null)");
  return WEIR_E_NOTFOUND;
}

/* Sets a host table's option and set_error to the functions above. */
static inline void wt_options_host(weir_host *h) {
  h->option = wt_options_option;
  h->set_error = wt_options_set_error;
}

#endif
