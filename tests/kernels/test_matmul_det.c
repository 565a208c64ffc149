/* The deterministic table's matmuls (matmul/det.c): every row of
 * y = x W^T is bit for bit the same whether x has 1 row or T rows (T
 * around the GEMV/GEMM and AMX thresholds: 1, 3, 4, 16, 33), on 1 or 2
 * threads, for f32/f16/bf16 weights (shapes with N and K tails: the AMX
 * decode path's shifted last group, K % 32 != 0, K past one K chunk) and
 * for q8/q4 schemes; and each is close to the plain table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_test_util.h"
#include "okv_common.h"
#include "okv_kernels.h"
#include "okv_test.h"

enum { TMAX = 33 };
static const int Ts[] = {1, 3, 4, 16, TMAX};

static double max_rel(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= w)) w = d;
    }
    return w;
}

/* y for T rows of x on pool tp, with a workspace sized for TMAX rows. */
typedef void (*mm_fn)(const okv_kernels *k, okv_threadpool *tp, float *y, const float *x, int T, const void *ctx);

typedef struct dense_ctx {
    const void *W;
    okv_dtype dt;
    int K, N;
    const float *bias;
} dense_ctx;

static void run_dense(const okv_kernels *k, okv_threadpool *tp, float *y, const float *x, int T, const void *ctx) {
    const dense_ctx *c = ctx;
    k->matmul(tp, y, x, T, c->K, c->W, c->dt, c->N, c->bias);
}

typedef struct quant_ctx {
    const void *W;
    okv_qscheme s;
    int K, N;
    const float *bias;
} quant_ctx;

static void run_quant(const okv_kernels *k, okv_threadpool *tp, float *y, const float *x, int T, const void *ctx) {
    const quant_ctx *c = ctx;
    k->matmul_q(tp, y, x, T, c->K, c->W, &c->s, c->N, c->bias);
}

/* Rows of every T (and 1 vs 2 threads) equal the T = 1 rows; T = TMAX
 * within tol of the plain table. */
static void check_invariant(const okv_kernels *det, mm_fn fn, const void *ctx, int K, int N, size_t ws_bytes, double tol,
                            const char *what) {
    okv_threadpool *tp[2] = {okv_threadpool_create(1), okv_threadpool_create(2)};
    char *ws[2];
    for (int i = 0; i < 2; i++) {
        ws[i] = aligned_alloc(64, (ws_bytes + 63) / 64 * 64 + 64);
        okv_threadpool_set_workspace(tp[i], ws[i], ws_bytes);
    }
    float *x = malloc(sizeof(float) * TMAX * K), *one = malloc(sizeof(float) * TMAX * N),
          *y = malloc(sizeof(float) * TMAX * N), *ref = malloc(sizeof(float) * TMAX * N);
    fill(x, (size_t)TMAX * K, 1.0f);
    for (int t = 0; t < TMAX; t++) fn(det, tp[t % 2], one + (size_t)t * N, x + (size_t)t * K, 1, ctx);
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
        for (int th = 0; th < 2; th++) {
            int T = Ts[i];
            int off = TMAX - T; /* the last T rows */
            fn(det, tp[th], y, x + (size_t)off * K, T, ctx);
            int bad = 0;
            for (int t = 0; t < T; t++) bad += memcmp(y + (size_t)t * N, one + (size_t)(off + t) * N, sizeof(float) * N) != 0;
            CHECKF(bad == 0, "%s %s K %d N %d T %d (%d threads): %d rows differ from the same rows at T = 1", det->name,
                   what, K, N, T, th + 1, bad);
        }
    fn(okv_kernels_select(OKV_ISA_PLAIN), tp[1], ref, x, TMAX, ctx);
    double d = max_rel(one, ref, (size_t)TMAX * N);
    CHECKF(d <= tol, "%s %s K %d N %d: %.3g from the plain table", det->name, what, K, N, d);
    for (int i = 0; i < 2; i++) {
        okv_threadpool_set_workspace(tp[i], NULL, 0);
        okv_threadpool_free(tp[i]);
        free(ws[i]);
    }
    free(x);
    free(one);
    free(y);
    free(ref);
}

int main(void) {
    rng_state = 0xdeadbeefcafef00dull;
    const okv_kernels *tables[3];
    int n_tables = 0;
    static const okv_isa isas[] = {OKV_ISA_AUTO, OKV_ISA_AVX2, OKV_ISA_PLAIN};
    for (int i = 0; i < 3; i++) {
        const okv_kernels *k = okv_kernels_select_deterministic(isas[i]);
        bool seen = false;
        for (int j = 0; j < n_tables; j++) seen |= tables[j] == k;
        if (!seen) tables[n_tables++] = k;
    }
    static const struct { int K, N; } shapes[] = {{64, 64}, {256, 100}, {96, 17}, {2080, 40}, {72, 33}, {64, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int K = shapes[s].K, N = shapes[s].N;
        float *w = malloc(sizeof(float) * (size_t)N * K), *bias = malloc(sizeof(float) * N);
        fill(w, (size_t)N * K, 0.5f);
        fill(bias, (size_t)N, 1.0f);
        uint16_t *wh = malloc(2 * (size_t)N * K);
        for (int d = 0; d < 3; d++) {
            okv_dtype dt = (okv_dtype)d;
            const void *W = w;
            if (dt != OKV_F32) {
                okv_convert(wh, dt, w, OKV_F32, (size_t)N * K);
                W = wh;
            }
            dense_ctx c = {W, dt, K, N, s % 2 ? bias : NULL};
            size_t ws = okv_matmul_scratch_bytes(TMAX, K, N, dt, 2);
            for (int i = 0; i < n_tables; i++)
                check_invariant(tables[i], run_dense, &c, K, N, ws, dt == OKV_F32 ? 1e-5 : 3e-3 * sqrt((double)K), /* x in bf16 (AMX) */
                                dt == OKV_F32 ? "f32" : dt == OKV_F16 ? "f16" : "bf16");
        }
        static const okv_qscheme qs[] = {{8, 32, false, OKV_F16, OKV_QB_NONE, false}, {4, 32, true, OKV_F16, OKV_QB_NONE, false}, {4, 64, true, OKV_F16, OKV_QB_NONE, false}};
        for (size_t q = 0; q < sizeof qs / sizeof *qs; q++) {
            if (K % qs[q].group) continue;
            void *Wq = malloc(okv_quant_bytes(&qs[q], N, K));
            okv_error err = {0};
            CHECK_OK(okv_quantize(&qs[q], w, N, K, Wq, "w", &err), &err);
            quant_ctx c = {Wq, qs[q], K, N, s % 2 ? bias : NULL};
            size_t ws = okv_matmul_q_scratch_bytes(TMAX, K, N, &qs[q], 2);
            char name[32];
            for (int i = 0; i < n_tables; i++)
                check_invariant(tables[i], run_quant, &c, K, N, ws, qs[q].bits == 4 ? 3e-3 * sqrt((double)K) : 2e-3, /* 4-bit: one x plane */
                                okv_qscheme_name(&qs[q], name, sizeof name));
            free(Wq);
        }
        free(w);
        free(bias);
        free(wh);
    }
    return okv_test_finish();
}
