/* attend/blocked_plain.c — the blocked attention's inner loops in plain C
 * (okv_attn_ops_plain) and the plain table's attend on them. */
#include <math.h>
#include <stdlib.h>

#include "okv_kernels_internal.h"

/* The model the SIMD loops (attend/blocked_simd.c) are tested against: the
 * same layouts and the same order of sums per output element. */
static void scores_plain(float *S, const float *QT, int Rp, const void *k, okv_dtype dt, size_t ldk, int n, int D,
                         float *stage) {
    size_t esz = okv_dtype_size(dt);
    for (int i = 0; i < n; i++) {
        const char *ki = (const char *)k + i * ldk * esz;
        float *kf = stage + (size_t)i * D;
        okv_k_load_row(kf, ki, dt, (size_t)D);
        float *s = S + (size_t)i * Rp;
        for (int r = 0; r < Rp; r++) s[r] = 0.0f;
        for (int d = 0; d < D; d++)
            for (int r = 0; r < Rp; r++) s[r] += kf[d] * QT[(size_t)d * Rp + r];
    }
}

static void softmax_plain(float *S, int n, int Rp, float *m, float *l, float *c) {
    for (int r = 0; r < Rp; r++) {
        float mx = m[r];
        for (int i = 0; i < n; i++)
            if (S[(size_t)i * Rp + r] > mx) mx = S[(size_t)i * Rp + r];
        if (mx == -INFINITY) { /* nothing seen yet */
            c[r] = 1.0f;
            for (int i = 0; i < n; i++) S[(size_t)i * Rp + r] = 0.0f;
            continue;
        }
        c[r] = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            float *p = S + (size_t)i * Rp + r;
            *p = *p == -INFINITY ? 0.0f : expf(*p - mx);
            sum += *p;
        }
        l[r] = l[r] * c[r] + sum;
        m[r] = mx;
    }
}

static void accumulate_plain(float *acc, const float *c, const float *P, int Rp, int R, const void *v, okv_dtype dt,
                             size_t ldv, int n, int D) {
    size_t esz = okv_dtype_size(dt);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) acc[(size_t)r * D + d] *= c[r];
    for (int i = 0; i < n; i++) {
        const char *vi = (const char *)v + i * ldv * esz;
        for (int r = 0; r < R; r++) {
            float p = P[(size_t)i * Rp + r];
            for (int d = 0; d < D; d++) acc[(size_t)r * D + d] += p * okv_k_load(vi, dt, (size_t)d);
        }
    }
}

const okv_attn_ops okv_attn_ops_plain = {scores_plain, softmax_plain, accumulate_plain};

void okv_attend_plain(okv_threadpool *tp, const okv_attn_args *a) {
    okv_attend_fast(tp, a, &okv_attn_ops_plain);
}
