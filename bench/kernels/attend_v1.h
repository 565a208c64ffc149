/* attend_v1.h — the pre-blocked attention kernel, kept for bench_kernels'
 * old-vs-new comparison only (attend_v1.c). Needs AVX2 + FMA + F16C. */
#ifndef BENCH_ATTEND_V1_H
#define BENCH_ATTEND_V1_H

#include "okv_kernels.h"

void bench_attend_v1_avx2(okv_threadpool *tp, const okv_attn_args *a);

#endif
