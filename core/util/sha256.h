/* SHA-256 (FIPS 180-4), for keys that must not collide even when a client crafts its input:
 * the response cache's entry keys and scopes. Incremental: init, update any number of times,
 * final. No allocation; thread-safe (the state is the caller's). */
#ifndef WEIR_UTIL_SHA256_H
#define WEIR_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct weir_sha256 {
  uint32_t h[8];
  uint64_t len;      /* bytes hashed so far */
  uint8_t buf[64];
  size_t fill;
} weir_sha256;

void weir_sha256_init(weir_sha256 *c);
void weir_sha256_update(weir_sha256 *c, const void *data, size_t len);
void weir_sha256_final(weir_sha256 *c, uint8_t out[32]);
/* The digest as 64 lowercase hex digits and a NUL. */
void weir_sha256_hex(const uint8_t d[32], char out[65]);

#endif
