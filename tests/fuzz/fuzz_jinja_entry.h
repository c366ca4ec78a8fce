/* The Jinja fuzzing entry point, shared by the libFuzzer target and the ctest corpus run. */
#ifndef WEIR_FUZZ_JINJA_ENTRY_H
#define WEIR_FUZZ_JINJA_ENTRY_H

#include <stddef.h>
#include <stdint.h>

/* Parses data[0..size) as a chat template and, when it parses, renders it against a fixed
 * conversation (system, user, assistant with a tool call, tool result; tools; kwargs) under
 * tight limits. Returns 2 when it rendered, 1 when it parsed but the render failed with a
 * message, 0 when it did not parse (with a message), -1 when a failure came without a
 * message or with an unexpected status (a bug). */
int weir_fuzz_jinja(const uint8_t *data, size_t size);

#endif
