/* The grammar fuzzing entry point, shared by the libFuzzer target and the ctest corpus run. */
#ifndef WEIR_FUZZ_GRAMMAR_ENTRY_H
#define WEIR_FUZZ_GRAMMAR_ENTRY_H

#include <stddef.h>
#include <stdint.h>

/* data[0] picks the front end (JSON Schema, regex, EBNF grammar, choice list, json_object),
 * strictness and whitespace; the rest is the text. Compiles it under small limits; when it
 * compiles, walks it with a matcher over a vocabulary of every byte and some words: masks,
 * tokens chosen from them (by the input's bytes), clones and rollbacks, until EOS or 24 steps.
 * Returns 1 when it compiled, 0 when it was refused with a message, -1 on a broken invariant
 * (refused without a message, an empty mask before the end, an allowed token refused). */
int weir_fuzz_grammar(const uint8_t *data, size_t size);

#endif
