/* okv_rng.c — xoshiro256** and splitmix64, transcribed from the reference
 * implementations at https://prng.di.unimi.it/ (see okv_rng.h for why the
 * sampler carries its own generator). */
#include "okv_rng.h"

uint64_t okv_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void okv_rng_seed(okv_rng *r, uint64_t seed) {
    uint64_t sm = seed;
    for (int i = 0; i < 4; i++) r->s[i] = okv_splitmix64(&sm);
}

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t okv_rng_next(okv_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double okv_rng_uniform(okv_rng *r) {
    return (double)(okv_rng_next(r) >> 11) * 0x1.0p-53;
}
