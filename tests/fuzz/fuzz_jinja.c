/* libFuzzer target for the Jinja engine (built with -DWEIR_FUZZ=ON and clang): template bytes
 * parsed, then rendered against a fixed conversation. Run:
 *   build/tests/fuzz/fuzz_jinja -dict=tests/fuzz/dict/jinja.dict CORPUS_DIR tests/fuzz/corpus/jinja
 * Seed a corpus with: build/tests/bin/test_fuzz_jinja_corpus --write-corpus CORPUS_DIR */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_jinja_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (weir_fuzz_jinja(data, size) < 0) __builtin_trap(); /* failed without a message */
  return 0;
}
