/* The libFuzzer main of every target but GGUF's (built with -DWEIR_FUZZ=ON and clang): the
 * target is chosen at compile time (WEIR_FUZZ_ENTRY, WEIR_FUZZ_JSON_ENDPOINT). Run one as
 *   build-fuzz/tests/fuzz/fuzz_http -dict=tests/fuzz/dict/http.dict NEW_DIR tests/fuzz/corpus/http
 * (docs/reliability.md has the command for each). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_targets.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (weir_fuzz_setup(WEIR_FUZZ_BINARY, WEIR_FUZZ_PLUGIN_DIR, WEIR_FUZZ_SOURCE_DIR) != 0) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#ifdef WEIR_FUZZ_JSON_ENDPOINT
  return weir_fuzz_json(WEIR_FUZZ_JSON_ENDPOINT, data, size);
#else
  return WEIR_FUZZ_ENTRY(data, size);
#endif
}
