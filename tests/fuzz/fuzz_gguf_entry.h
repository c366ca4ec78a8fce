/* The GGUF fuzzing entry point, shared by the libFuzzer target and the ctest corpus run. */
#ifndef WEIR_FUZZ_GGUF_ENTRY_H
#define WEIR_FUZZ_GGUF_ENTRY_H

#include <stddef.h>
#include <stdint.h>

/* Opens data[0..size) as a GGUF file and, when it opens, reads every view the API offers:
 * every key with every typed getter, every array element (nested too), every tensor's bytes,
 * the Llama hyperparameters and graph check. Returns 1 when the file opened, 0 when it was
 * refused with a message, -1 when it was refused without one (a bug). */
int weir_fuzz_gguf(const uint8_t *data, size_t size);

#endif
