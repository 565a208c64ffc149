/* okv_kernels.c — the kernel tables and the run-time choice between them.
 *
 * A table is an immutable struct of function pointers per ISA; selecting one
 * only asks the CPU what it supports (no global switch, no init call), so a
 * test can hold the plain and the AVX2 table side by side and compare. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "okv_kernels_internal.h"

static const okv_kernels kernels_plain = {
    OKV_ISA_PLAIN, "plain", okv_matmul_plain, okv_rmsnorm_plain, okv_glu_plain, okv_attend_plain,
};

static const okv_kernels kernels_avx2 = {
    OKV_ISA_AVX2, "avx2", okv_matmul_avx2, okv_rmsnorm_avx2, okv_glu_avx2, okv_attend_avx2,
};

static bool cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

const okv_kernels *okv_kernels_select(okv_isa isa) {
    if (isa == OKV_ISA_PLAIN) return &kernels_plain;
    return cpu_has_avx2() ? &kernels_avx2 : &kernels_plain;
}

/* The feature string is computed once; it never changes while we run. */
static char features[128];
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void add_feature(const char *name, bool have) {
    if (!have) return;
    if (features[0]) strcat(features, " ");
    strcat(features, name);
}

static void detect_features(void) {
    features[0] = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    add_feature("sse4.2", __builtin_cpu_supports("sse4.2"));
    add_feature("avx", __builtin_cpu_supports("avx"));
    add_feature("avx2", __builtin_cpu_supports("avx2"));
    add_feature("fma", __builtin_cpu_supports("fma"));
    add_feature("f16c", __builtin_cpu_supports("f16c"));
    add_feature("avx512f", __builtin_cpu_supports("avx512f"));
    add_feature("avx512bw", __builtin_cpu_supports("avx512bw"));
    add_feature("avx512vl", __builtin_cpu_supports("avx512vl"));
    add_feature("avx512bf16", __builtin_cpu_supports("avx512bf16"));
#endif
    if (!features[0]) strcpy(features, "none");
}

const char *okv_cpu_features(void) {
    pthread_once(&features_once, detect_features);
    return features;
}
