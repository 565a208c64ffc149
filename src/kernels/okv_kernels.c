/* okv_kernels.c — the kernel tables and the run-time choice between them.
 *
 * A table is an immutable struct of function pointers per ISA; selecting one
 * only asks the CPU what it supports (no global switch, no init call), so a
 * test can hold the plain and the AVX2 table side by side and compare. */
#include "okv_kernels_internal.h"

static const okv_kernels kernels_plain = {
    OKV_ISA_PLAIN, "plain", okv_matmul_plain, okv_rmsnorm_plain, okv_glu_plain, okv_attend_plain,
    okv_matmul_q_plain,
};

static const okv_kernels kernels_avx2 = {
    OKV_ISA_AVX2, "avx2", okv_matmul_avx2, okv_rmsnorm_avx2, okv_glu_avx2, okv_attend_avx2,
    okv_matmul_q_best,
};

static bool cpu_has_avx2(void) {
    const okv_cpu_caps *c = okv_cpu();
    return c->avx2 && c->fma && c->f16c;
}

const okv_kernels *okv_kernels_select(okv_isa isa) {
    if (isa == OKV_ISA_PLAIN) return &kernels_plain;
    return cpu_has_avx2() ? &kernels_avx2 : &kernels_plain;
}
