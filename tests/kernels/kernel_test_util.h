/* kernel_test_util.h — the test-local random data of the kernel tests
 * (xorshift, seeded per test program so each keeps its own data). */
#ifndef OKV_KERNEL_TEST_UTIL_H
#define OKV_KERNEL_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

static uint64_t rng_state;

static inline float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static inline void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
}

#endif
