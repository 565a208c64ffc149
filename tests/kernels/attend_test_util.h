/* attend_test_util.h — what the attention tests share: the runs of a flat
 * or ring cache, the largest difference of two outputs, and the distinct
 * attention kernels this CPU runs. */
#ifndef OKV_ATTEND_TEST_UTIL_H
#define OKV_ATTEND_TEST_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "okv_kernels.h"

/* Runs covering positions [from, to) of a cache with `ring` slots (0 = flat,
 * slot = position). Returns the number of runs (1, or 2 if the ring wraps). */
static inline int make_runs(int32_t from, int32_t to, int32_t ring, okv_run *runs) {
    if (!ring) {
        runs[0] = (okv_run){from, to - from, from};
        return 1;
    }
    int32_t first = from % ring, n1 = to - from < ring - first ? to - from : ring - first;
    runs[0] = (okv_run){first, n1, from};
    if (n1 == to - from) return 1;
    runs[1] = (okv_run){0, to - from - n1, from + n1};
    return 2;
}

/* max |a - b| over n floats; a NaN on either side makes it infinite. */
static inline double max_diff_f(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* Every distinct attention of the tables this CPU can run (plain, AVX2
 * loops, AVX-512 loops, the best), and with_det their deterministic twins;
 * tables needs room for 8. */
static inline int attention_tables(const okv_kernels **tables, bool with_det) {
    static const okv_isa isas[] = {OKV_ISA_PLAIN, OKV_ISA_AVX2, OKV_ISA_AVX512, OKV_ISA_AUTO};
    enum { N_ISAS = sizeof isas / sizeof *isas };
    int n = 0;
    for (int i = 0; i < (with_det ? 2 : 1) * N_ISAS; i++) {
        const okv_kernels *k = i < N_ISAS ? okv_kernels_select(isas[i]) : okv_kernels_select_deterministic(isas[i - N_ISAS]);
        bool seen = false;
        for (int j = 0; j < n; j++) seen |= tables[j]->attend == k->attend;
        if (!seen) tables[n++] = k;
    }
    return n;
}

#endif
