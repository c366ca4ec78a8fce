/* libFuzzer target for the GGUF reader (built with -DWEIR_FUZZ=ON and clang). Run:
 *   build/tests/fuzz/fuzz_gguf -max_total_time=120 CORPUS_DIR
 * Seed a corpus with: build/tests/bin/test_fuzz_gguf_corpus --write-corpus CORPUS_DIR */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_gguf_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (weir_fuzz_gguf(data, size) < 0) __builtin_trap(); /* refused without a message */
  return 0;
}
