/* bench_quant.c — how fast the export's quantizers run, one thread.
 *
 * Quantizes one bell-shaped random matrix W[N, K] (the shape of a 1B
 * model's MLP matrix by default) into each scheme an export can write and
 * prints, per scheme, the median CPU seconds over reps, ns per weight, the
 * rate in M weights/s and the total squared error, so a faster search that loses quality shows.
 * argv: N K reps [scheme substring]; OKV_BENCH_NO_IMPORTANCE=1 quantizes
 * without per-channel importance (an export without --calibration). Whole-model
 * export time is roughly weights / rate / threads (1B: 1.24e9 weights). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "okv_common.h"
#include "okv_quant.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* CPU time: steadier than wall time on a shared machine */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Bell-shaped weights (sum of 4 uniforms) with an outlier now and then. */
static void fill_weights(float *W, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int k = 0; k < 4; k++) {
            seed = seed * 1664525u + 1013904223u;
            s += (float)(seed >> 8) / 16777216.0f - 0.5f;
        }
        W[i] = 0.02f * s * ((seed & 1023) == 0 ? 8.0f : 1.0f);
    }
}

static double sq_error(const okv_qscheme *s, const float *W, const void *Q, int64_t N, int64_t K, float *row) {
    double e = 0;
    for (int64_t r = 0; r < N; r++) {
        okv_dequant_row(s, Q, N, K, r, row);
        for (int64_t k = 0; k < K; k++) {
            double d = (double)W[(size_t)r * K + k] - row[k];
            e += d * d;
        }
    }
    return e;
}

int main(int argc, char **argv) {
    int64_t N = argc > 1 ? atoll(argv[1]) : 1024, K = argc > 2 ? atoll(argv[2]) : 2048;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    const char *only = argc > 4 ? argv[4] : NULL, *no_imp = getenv("OKV_BENCH_NO_IMPORTANCE");
    if (N <= 0 || K <= 0 || K % 256 || reps <= 0 || reps > 50) {
        fprintf(stderr, "usage: bench_quant [N K reps [scheme]], K a multiple of 256\n");
        return 2;
    }
    struct { const char *name; okv_qscheme s; } schemes[] = {
        {"4w g32 asym", {4, 32, true, OKV_F16, OKV_QB_NONE, false}},
        {"8w g32 sym", {8, 32, false, OKV_F16, OKV_QB_NONE, false}},
        {"q4_0", okv_qscheme_block(OKV_QB_Q4_0)},
        {"q4_K", okv_qscheme_block(OKV_QB_Q4_K)},
        {"q6_K", okv_qscheme_block(OKV_QB_Q6_K)},
        {"q8_0", okv_qscheme_block(OKV_QB_Q8_0)},
    };
    float *W = malloc(sizeof *W * (size_t)(N * K)), *row = malloc(sizeof *row * (size_t)K);
    float *imp = malloc(sizeof *imp * (size_t)K);
    if (!W || !row || !imp) return 1;
    fill_weights(W, (size_t)(N * K), 7);
    for (int64_t k = 0; k < K; k++) imp[k] = 0.5f + (float)((k * 37) % 11) / 4.0f;
    printf("bench_quant: W[%lld, %lld], one thread, median of %d\n", (long long)N, (long long)K, reps);
    printf("%-12s %9s %9s %9s %12s\n", "scheme", "s", "ns/w", "Mw/s", "sq.err");
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        if (only && !strstr(schemes[i].name, only)) continue;
        const okv_qscheme *s = &schemes[i].s;
        uint64_t bytes = okv_quant_bytes(s, N, K);
        void *Q = bytes == UINT64_MAX ? NULL : malloc(bytes);
        if (!Q) return 1;
        double t[50];
        okv_error err = {0};
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            if (okv_quantize_weighted(s, W, N, K, no_imp ? NULL : imp, Q, schemes[i].name, &err)) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
            }
            t[r] = now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp_double);
        double med = t[reps / 2], e = sq_error(s, W, Q, N, K, row);
        printf("%-12s %9.3f %9.2f %9.1f %12.5g\n", schemes[i].name, med, 1e9 * med / (double)(N * K),
               (double)(N * K) / med / 1e6, e);
        free(Q);
    }
    free(W);
    free(row);
    free(imp);
    return 0;
}
