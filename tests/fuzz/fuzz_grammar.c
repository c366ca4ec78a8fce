/* libFuzzer target for the constraint compilers and the matcher (-DWEIR_FUZZ=ON, clang). Run:
 *   build/tests/fuzz/fuzz_grammar -dict=tests/fuzz/dict/grammar.dict CORPUS_DIR
 * Seed a corpus with: build/tests/bin/test_fuzz_grammar_corpus --write-corpus CORPUS_DIR */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_grammar_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (weir_fuzz_grammar(data, size) < 0) __builtin_trap();
  return 0;
}
