/* sampler_test_util.h — helpers shared by the sampler tests: a sampler
 * with given knobs, and a test-local LCG for making logits (not the RNG
 * under test). */
#ifndef OKV_SAMPLER_TEST_UTIL_H
#define OKV_SAMPLER_TEST_UTIL_H

#include "offkv_sample.h"
#include "okv_test.h"

/* A sampler with the given knobs (everything else off). */
static inline okv_sampler *make(int32_t vocab, bool do_sample, float temperature, int32_t top_k,
                                float top_p, float min_p, float penalty, uint64_t seed) {
    okv_sampler_params p = okv_sampler_params_default();
    p.do_sample = do_sample;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repetition_penalty = penalty;
    p.seed = seed;
    okv_sampler *s = NULL;
    okv_error err;
    CHECK_OK(okv_sampler_create(vocab, &p, &s, &err), &err);
    return s;
}

static inline uint32_t lcg(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

#endif
