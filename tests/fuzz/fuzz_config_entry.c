/* The TOML configuration: arbitrary text loaded over the defaults. A refusal must say why; an
 * accepted configuration, written back out (`weir config check` prints exactly this), must
 * load again and print the same: the writer quotes and escapes whatever the loader took. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "fuzz_targets.h"
#include "weir/status.h"

/* The effective configuration as text, without the first line (it names the source). */
static char *print(const weir_config *c, size_t *len) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f) return NULL;
  weir_config_write(c, f);
  fclose(f);
  char *nl = buf ? strchr(buf, '\n') : NULL;
  if (nl) {
    size_t skip = (size_t)(nl + 1 - buf);
    memmove(buf, nl + 1, n - skip + 1);
    n -= skip;
  }
  *len = n;
  return buf;
}

int weir_fuzz_toml(const uint8_t *data, size_t size) {
  weir_config c;
  weir_config_defaults(&c);
  char err[1024];
  err[0] = '\0';
  int rc = weir_config_load_string((const char *)data, size, "fuzz.toml", &c, err, sizeof err);
  if (rc != WEIR_OK) {
    if (!err[0]) weir__fuzz_fail("refused (%s) without a message", weir_strerror(rc));
    weir_config_free(&c);
    return 0;
  }
  size_t len1 = 0, len2 = 0;
  char *text1 = print(&c, &len1);
  if (!text1) weir__fuzz_fail("could not print the configuration");
  weir_config again;
  weir_config_defaults(&again);
  err[0] = '\0';
  rc = weir_config_load_string(text1, len1, "printed.toml", &again, err, sizeof err);
  if (rc != WEIR_OK)
    weir__fuzz_fail("the printed configuration does not load: %s\n--- printed ---\n%s", err,
                    text1);
  char *text2 = print(&again, &len2);
  if (!text2 || len1 != len2 || memcmp(text1, text2, len1))
    weir__fuzz_fail("printing is not stable:\n--- first ---\n%s\n--- second ---\n%s", text1,
                    text2 ? text2 : "(none)");
  free(text1);
  free(text2);
  weir_config_free(&again);
  weir_config_free(&c);
  return 0;
}
