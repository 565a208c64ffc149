/* okv_rng.h — the sampler's random numbers: xoshiro256** seeded through
 * splitmix64 (both by Blackman and Vigna, public domain).
 *
 * Written out here rather than taken from libc so that the same seed gives
 * the same stream on every machine and C library. The state is a plain
 * struct the owner keeps; nothing is global. */
#ifndef OKV_RNG_H
#define OKV_RNG_H

#include <stdint.h>

typedef struct okv_rng {
    uint64_t s[4];
} okv_rng;

/* One step of splitmix64: advances *state and returns the next output. */
uint64_t okv_splitmix64(uint64_t *state);

/* Fills the xoshiro state with four splitmix64 outputs of `seed`
 * (never all zero, whatever the seed). */
void okv_rng_seed(okv_rng *r, uint64_t seed);

/* The next 64 random bits. */
uint64_t okv_rng_next(okv_rng *r);

/* Uniform double in [0, 1) with 53 random bits. */
double okv_rng_uniform(okv_rng *r);

#endif
