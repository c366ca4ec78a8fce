/* weir SDK: the per-sequence random generator. Since 1.1.
 *
 * Every sequence owns a 256-bit xoshiro256** state (Blackman and Vigna, 2018): the host seeds
 * it from the request's seed (weir_rng_seed) and hands it to the sampler in
 * weir_sampling_row.rng_state; a sampler draws from it and nothing else, so a seeded request
 * gives the same tokens whichever other sequences share its steps. The state, the seeding and
 * the step below are part of the sampler ABI: a sampler that wants to reproduce the shipped
 * samplers' draws (or the host's speculative verification, which draws from the same state)
 * must use exactly these functions. The shipped samplers consume one weir_rng_next per sampled
 * token when the temperature is above 0 and none for greedy rows.
 *
 * Everything here is a pure inline function over caller-owned memory: no allocation, no
 * global state, thread-safe for distinct states, and usable from C and C++. */
#ifndef WEIR_RNG_H
#define WEIR_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The splitmix64 step: advances *x and returns 64 well-mixed bits. Used to expand a 64-bit
 * seed into a xoshiro state, and handy as a hash finalizer. Since 1.1. */
static inline uint64_t weir_rng_splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* Seeds a state from a 64-bit seed: four successive splitmix64 outputs (never all zero).
 * Since 1.1. */
static inline void weir_rng_seed(uint64_t state[4], uint64_t seed) {
  for (int i = 0; i < 4; i++) state[i] = weir_rng_splitmix64(&seed);
}

static inline uint64_t weir_rng_rotl_(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* One xoshiro256** step: advances the state and returns the next 64 random bits. Since 1.1. */
static inline uint64_t weir_rng_next(uint64_t state[4]) {
  const uint64_t result = weir_rng_rotl_(state[1] * 5, 7) * 9;
  const uint64_t t = state[1] << 17;
  state[2] ^= state[0];
  state[3] ^= state[1];
  state[1] ^= state[2];
  state[0] ^= state[3];
  state[2] ^= t;
  state[3] = weir_rng_rotl_(state[3], 45);
  return result;
}

/* One step as a double uniform in [0, 1) with 53 random bits (the top bits of the step).
 * Since 1.1. */
static inline double weir_rng_uniform(uint64_t state[4]) {
  return (double)(weir_rng_next(state) >> 11) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

#ifdef __cplusplus
}
#endif
#endif
