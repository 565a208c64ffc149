/* attend_amx_v0.h — the frozen previous AMX prefill attention (bench only). */
#ifndef ATTEND_AMX_V0_H
#define ATTEND_AMX_V0_H
#include "okv_kernels.h"
void bench_attend_amx_v0(okv_threadpool *tp, const okv_attn_args *a);
#endif
