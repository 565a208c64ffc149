/* okv_run.h — the span of cache slots a kernel reads or writes. The cache
 * layer's planner produces runs and the kernels consume them; the kernels own
 * the type because it is their input format (they know nothing about the
 * policies that chose the slots), and the cache layer includes this header
 * alone rather than the kernels' API. */
#ifndef OKV_RUN_H
#define OKV_RUN_H

#include <stdint.h>

/* A contiguous span of pool slots holding consecutive positions:
 * slots [slot, slot+n) hold positions [pos, pos+n). */
typedef struct okv_run {
    int32_t slot, n, pos;
} okv_run;

#endif
