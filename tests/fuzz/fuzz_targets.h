/* The fuzz targets' entry points, shared by the libFuzzer binaries (fuzz_main.c, built with
 * -DWEIR_FUZZ=ON and clang) and the corpus replay suites that ctest runs on every build
 * (test_fuzz_replay.c). Each entry takes arbitrary bytes and returns normally; a broken
 * invariant prints what was wrong and aborts, which libFuzzer reports as a crash and ctest as
 * a failed suite.
 *
 * weir_fuzz_setup must be called once first: it writes the tiny models the targets serve or
 * tokenize with (`weir mkmodel`) into a fresh directory. Not thread-safe. */
#ifndef WEIR_FUZZ_TARGETS_H
#define WEIR_FUZZ_TARGETS_H

#include "util/utf8.h" /* weir_utf8_valid: every output checked */

#include <stddef.h>
#include <stdint.h>

enum {
  WEIR_FUZZ_COMPLETIONS = 0,
  WEIR_FUZZ_CHAT = 1,
  WEIR_FUZZ_TOKENIZE = 2,
  WEIR_FUZZ_DETOKENIZE = 3,
};

/* Paths compiled in by CMake: the weir binary (for mkmodel) and the plugin directory. */
int weir_fuzz_setup(const char *weir_binary, const char *plugin_dir, const char *source_dir);
/* Releases what setup and the targets built (the replay suites call it; libFuzzer exits). */
void weir_fuzz_teardown(void);
/* Names the input being run, for the message of a broken invariant. */
void weir_fuzz_set_input_name(const char *name);

/* Raw bytes into the real connection handler and router, as one client connection to a
 * server with a tiny model loaded (no socket: core/http's in-process connections). */
int weir_fuzz_http(const uint8_t *data, size_t size);
/* The bytes as the JSON body of one POST to an endpoint (WEIR_FUZZ_*), same server. */
int weir_fuzz_json(int endpoint, const uint8_t *data, size_t size);
/* The bytes as a TOML configuration: loaded over the defaults; when it loads, written back
 * out, which must load again to the same configuration. */
int weir_fuzz_toml(const uint8_t *data, size_t size);
/* First byte: tokenizer and flags; the rest is text: encoded, decoded (valid UTF-8, equal to
 * the text with invalid bytes replaced), and detokenized incrementally (equal to decode). */
int weir_fuzz_tokenizer(const uint8_t *data, size_t size);
/* First byte: template family and options; the rest: messages separated by 0x1E, each
 * starting with a role byte. Renders, and checks every (trimmed) content is in the output. */
int weir_fuzz_chat_template(const uint8_t *data, size_t size);

/* Internal to the fuzz sources. */
void weir__fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
const char *weir__fuzz_dir(void);
const char *weir__fuzz_plugin_dir(void);

#endif
