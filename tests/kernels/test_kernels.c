/* Tests the dense kernels: matmul (3 weight dtypes, odd shapes, bias, 1 and 2
 * threads), rmsnorm, glu, rope, embed, softcap/add/scale. Every table (plain
 * and the CPU's best) is compared against a naive double-precision
 * computation written here, and the fast table against the plain one. */
#include <stdbool.h>
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels.h"
#include "okv_test.h"
#include "kernel_test_util.h"

/* ---- helpers ---------------------------------------------------------------- */


/* A weight matrix stored in dt plus the exact f32 value of every element. */
typedef struct weights {
    void *data;
    float *exact;
} weights;

static weights make_weights(okv_dtype dt, size_t n) {
    weights w = {malloc(n * 4 + 4), malloc(n * 4 + 4)};
    float *tmp = malloc(n * 4 + 4);
    fill(tmp, n, 1.0f);
    okv_convert(w.data, dt, tmp, OKV_F32, n);
    okv_convert(w.exact, OKV_F32, w.data, dt, n);
    free(tmp);
    return w;
}

static void free_weights(weights *w) {
    free(w->data);
    free(w->exact);
}

static const okv_kernels *tables[2];
static int n_tables;

/* ---- matmul ------------------------------------------------------------------- */

/* Checks y against the double sum for every output; the bound is the worst
 * case float error of a K-term sum (K ulps of the absolute sum), plus the
 * table's stated product rounding (bf16 x on the AVX-512 BF16 / AMX paths;
 * tests/kernels/test_prefill.c checks those paths tightly). */
static int matmul_errors(const float *y, const float *x, const float *w, const float *bias, int T, int K, int N,
                         double rounding) {
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0, abs_s = bias ? fabs(bias[n]) : 0.0;
            for (int k = 0; k < K; k++) {
                s += (double)x[(size_t)t * K + k] * w[(size_t)n * K + k];
                abs_s += fabs((double)x[(size_t)t * K + k] * w[(size_t)n * K + k]);
            }
            double tol = (K + 2) * 1.2e-7 * abs_s + 1.01 * rounding * abs_s + 1e-30;
            if (fabs(y[(size_t)t * N + n] - s) > tol) {
                if (bad < 3)
                    fprintf(stderr, "  matmul T=%d K=%d N=%d y[%d,%d]=%.9g want %.9g\n", T, K, N, t, n,
                            y[(size_t)t * N + n], s);
                bad++;
            }
        }
    return bad;
}

static void check_matmul_shape(okv_threadpool *tp1, okv_threadpool *tp2, okv_dtype dt, int T, int K, int N,
                               bool with_bias) {
    weights w = make_weights(dt, (size_t)N * K);
    float *x = malloc(sizeof(float) * (size_t)T * K + 4), *bias = malloc(sizeof(float) * (size_t)N);
    float *y[2][2];
    fill(x, (size_t)T * K, 2.0f);
    fill(bias, (size_t)N, 1.0f);
    for (int ti = 0; ti < n_tables; ti++)
        for (int th = 0; th < 2; th++) {
            y[ti][th] = malloc(sizeof(float) * (size_t)T * N);
            tables[ti]->matmul(th ? tp2 : tp1, y[ti][th], x, T, K, w.data, dt, N, with_bias ? bias : NULL);
            int bad = matmul_errors(y[ti][th], x, w.exact, with_bias ? bias : NULL, T, K, N,
                                    tables[ti]->matmul_rounding[dt]);
            CHECKF(bad == 0, "%s matmul %s T=%d K=%d N=%d bias=%d threads=%d: %d wrong", tables[ti]->name,
                   okv_dtype_name(dt), T, K, N, with_bias, th + 1, bad);
        }
    for (int ti = 0; ti < n_tables; ti++) {
        /* each output is computed by exactly one task: threads can't change bits */
        CHECKF(!memcmp(y[ti][0], y[ti][1], sizeof(float) * (size_t)T * N),
               "%s matmul differs between 1 and 2 threads", tables[ti]->name);
        free(y[ti][0]);
        free(y[ti][1]);
    }
    free(x);
    free(bias);
    free_weights(&w);
}

static void test_matmul(void) {
    okv_threadpool *tp1 = okv_threadpool_create(1), *tp2 = okv_threadpool_create(2);
    static const int Ts[] = {1, 2, 3, 4, 5, 7, 8, 13, 37};
    static const int Ks[] = {1, 7, 8, 15, 16, 17, 64, 100};
    static const int Ns[] = {1, 2, 3, 5, 12, 13, 33};
    for (int d = 0; d < 3; d++)
        for (size_t a = 0; a < sizeof Ts / sizeof *Ts; a++)
            for (size_t b = 0; b < sizeof Ks / sizeof *Ks; b++)
                for (size_t c = 0; c < sizeof Ns / sizeof *Ns; c++)
                    check_matmul_shape(tp1, tp2, (okv_dtype)d, Ts[a], Ks[b], Ns[c], (a + b + c) % 2 == 0);
    /* a few realistic-ish shapes: many blocks per thread, long K */
    for (int d = 0; d < 3; d++) {
        check_matmul_shape(tp1, tp2, (okv_dtype)d, 1, 1027, 301, false);
        check_matmul_shape(tp1, tp2, (okv_dtype)d, 37, 515, 67, true);
        check_matmul_shape(tp1, tp2, (okv_dtype)d, 9, 2048, 130, false);
        check_matmul_shape(tp1, tp2, (okv_dtype)d, 5, 4105, 7, true); /* GEMV rows past the L1-sized x */
        /* decode GEMV past the L1-sized x: 8-row tiles, a remainder, a K tail,
         * and 2-thread ranges that start mid-N */
        check_matmul_shape(tp1, tp2, (okv_dtype)d, 1, 4105, 37, true);
        check_matmul_shape(tp1, tp2, (okv_dtype)d, 1, 4104, 16, false);
    }
    okv_threadpool_free(tp1);
    okv_threadpool_free(tp2);
}

/* ---- rmsnorm ------------------------------------------------------------------- */

static void test_rmsnorm(void) {
    const int T = 3, width = 72;
    static const int groups[] = {72, 24, 8, 9, 0};
    for (int ti = 0; ti < n_tables; ti++)
        for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++)
            for (int use_w = 0; use_w < 2; use_w++)
                for (int alias = 0; alias < 2; alias++) {
                    int group = groups[gi], g = group ? group : width;
                    float x[3 * 72], y[3 * 72], w[72];
                    fill(x, (size_t)T * width, 3.0f);
                    fill(w, (size_t)g, 2.0f);
                    float x0[3 * 72];
                    memcpy(x0, x, sizeof x);
                    float *out = alias ? x : y;
                    tables[ti]->rmsnorm(out, x, T, width, group, use_w ? w : NULL, 1e-6f);
                    int bad = 0;
                    for (int row = 0; row < T * width / g; row++) {
                        double ss = 0;
                        for (int i = 0; i < g; i++) ss += (double)x0[row * g + i] * x0[row * g + i];
                        double r = 1.0 / sqrt(ss / g + 1e-6);
                        for (int i = 0; i < g; i++) {
                            double want = x0[row * g + i] * r * (use_w ? w[i] : 1.0);
                            if (fabs(out[row * g + i] - want) > 1e-5 * (fabs(want) + 1e-3)) bad++;
                        }
                    }
                    CHECKF(bad == 0, "%s rmsnorm group=%d weight=%d alias=%d: %d wrong", tables[ti]->name,
                           group, use_w, alias, bad);
                }
}

/* ---- glu ------------------------------------------------------------------------- */

static double act_ref(double g, okv_act act) {
    if (act == OKV_ACT_SILU) return g / (1.0 + exp(-g));
    return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

static void test_glu(void) {
    enum { n = 1003 };
    float gate[n], up[n], y[n];
    for (int i = 0; i < n; i++) { gate[i] = frand() * 12.0f; up[i] = frand() * 2.0f; }
    gate[0] = -100.0f; gate[1] = 100.0f; gate[2] = 0.0f; gate[3] = -30.0f; gate[4] = 1e-4f;
    for (int ti = 0; ti < n_tables; ti++)
        for (int act = 0; act < 2; act++)
            for (int alias = 0; alias < 2; alias++) {
                float g[n];
                memcpy(g, gate, sizeof g);
                float *out = alias ? g : y;
                tables[ti]->glu(out, g, up, n, (okv_act)act);
                int bad = 0;
                for (int i = 0; i < n; i++) {
                    double want = act_ref(gate[i], (okv_act)act) * up[i];
                    if (!(fabs(out[i] - want) <= 2e-6 * fabs(want) + 1e-6 * fabs(up[i]))) {
                        if (bad < 3) fprintf(stderr, "  glu act=%d g=%g: %.9g want %.9g\n", act, gate[i], out[i], want);
                        bad++;
                    }
                }
                CHECKF(bad == 0, "%s glu act=%d alias=%d: %d wrong", tables[ti]->name, act, alias, bad);
            }
}

/* ---- rope -------------------------------------------------------------------------- */

static void test_rope(void) {
    enum { T = 6, H = 3, D = 64 };
    int32_t pos[T] = {0, 1, 17, 4095, 131071, 200003};
    float inv_freq[D / 2];
    for (int i = 0; i < D / 2; i++) inv_freq[i] = (float)pow(500000.0, -2.0 * i / D);
    inv_freq[D / 2 - 1] = 0.0f; /* an unrotated pair (partial rotary) */
    float x[T * H * D], x0[T * H * D];
    fill(x, T * H * D, 1.0f);
    memcpy(x0, x, sizeof x);
    okv_rope(x, T, H, D, pos, inv_freq);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < D / 2; i++) {
                const float *a = x0 + (t * H + h) * D;
                double ang = (double)pos[t] * inv_freq[i];
                double w0 = a[i] * cos(ang) - a[i + D / 2] * sin(ang);
                double w1 = a[i + D / 2] * cos(ang) + a[i] * sin(ang);
                const float *b = x + (t * H + h) * D;
                if (fabs(b[i] - w0) > 1e-6 || fabs(b[i + D / 2] - w1) > 1e-6) bad++;
            }
    CHECKF(bad == 0, "rope: %d pairs off by more than 1e-6", bad);
    /* the identity pair must be untouched, and position 0 is the identity */
    CHECK(x[D / 2 - 1] == x0[D / 2 - 1] && x[D - 1] == x0[D - 1]);
    CHECK(!memcmp(x, x0, sizeof(float) * H * D));
}

/* okv_rope_angles + okv_rope_apply (the runtime's shared-angle path, out of
 * place and in place) are okv_rope bit for bit, on odd shapes: head_dim 2,
 * 6, 34, 128; 1, 3, 5 heads; 1 and 7 tokens at far-apart positions. */
static void test_rope_split(void) {
    static const int shapes[][3] = {{1, 1, 2}, {7, 3, 6}, {5, 5, 34}, {7, 1, 128}, {3, 2, 64}};
    int32_t pos[7] = {0, 3, 1000, 65535, 131071, 7, 200003};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int T = shapes[c][0], H = shapes[c][1], D = shapes[c][2];
        size_t n = (size_t)T * H * D;
        float *inv = malloc(sizeof(float) * D / 2), *cs = malloc(sizeof(float) * T * D);
        float *x = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
        for (int i = 0; i < D / 2; i++) inv[i] = i == D / 2 - 1 && D > 2 ? 0.0f : (float)pow(10000.0, -2.0 * i / D);
        fill(x, n, 2.0f);
        memcpy(want, x, sizeof(float) * n);
        okv_rope(want, T, H, D, pos, inv);
        okv_rope_angles(cs, T, D / 2, pos, inv);
        okv_rope_apply(got, x, T, H, D, cs);
        CHECKF(!memcmp(got, want, sizeof(float) * n), "rope_apply out of place T=%d H=%d D=%d differs from okv_rope", T, H, D);
        okv_rope_apply(x, x, T, H, D, cs);
        CHECKF(!memcmp(x, want, sizeof(float) * n), "rope_apply in place T=%d H=%d D=%d differs from okv_rope", T, H, D);
        free(inv); free(cs); free(x); free(want); free(got);
    }
}

/* ---- embed, softcap, add, scale ------------------------------------------------------ */

static void test_embed(void) {
    /* every 16-bit pattern as a one-column table: the kernel's conversion must
     * agree bit for bit with okv_common's */
    uint16_t *table = malloc(65536 * 2);
    int32_t *ids = malloc(65536 * 4);
    float *y = malloc(65536 * 4);
    for (int i = 0; i < 65536; i++) { table[i] = (uint16_t)i; ids[i] = 65535 - i; }
    for (int d = 1; d <= 2; d++) {
        okv_embed(y, ids, 65536, table, (okv_dtype)d, 1, 1.0f);
        int bad = 0;
        for (int i = 0; i < 65536; i++) {
            uint16_t h = (uint16_t)(65535 - i);
            float want = d == OKV_F16 ? okv_f16_to_f32(h) : okv_bf16_to_f32(h);
            if (isnan(want) ? !isnan(y[i]) : memcmp(&want, &y[i], 4) != 0) bad++;
        }
        CHECKF(bad == 0, "embed %s: %d of 65536 values differ from okv_common", okv_dtype_name((okv_dtype)d), bad);
    }
    free(table);
    free(ids);
    free(y);
    /* rows land in the right place, times the scale */
    enum { V = 11, W = 13 };
    float E[V * W], out[3 * W];
    fill(E, V * W, 1.0f);
    int32_t rows[3] = {10, 0, 4};
    okv_embed(out, rows, 3, E, OKV_F32, W, 2.5f);
    int bad = 0;
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < W; i++) bad += out[t * W + i] != E[rows[t] * W + i] * 2.5f;
    CHECK(bad == 0);
}

static void test_elementwise(void) {
    float a[37], b[37], y[37];
    fill(a, 37, 40.0f);
    fill(b, 37, 1.0f);
    okv_add(y, a, b, 37);
    int bad = 0;
    for (int i = 0; i < 37; i++) bad += y[i] != a[i] + b[i];
    okv_scale(y, a, 37, -0.5f);
    for (int i = 0; i < 37; i++) bad += y[i] != a[i] * -0.5f;
    memcpy(y, a, sizeof y);
    okv_softcap(y, 37, 30.0f);
    for (int i = 0; i < 37; i++) bad += fabs(y[i] - tanh(a[i] / 30.0) * 30.0) > 1e-5;
    for (int i = 0; i < 37; i++) bad += fabsf(y[i]) >= 30.0f;
    CHECK(bad == 0);
}

int main(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    tables[0] = okv_kernels_select(OKV_ISA_PLAIN);
    tables[1] = okv_kernels_select(OKV_ISA_AUTO);
    n_tables = tables[1] == tables[0] ? 1 : 2;
    printf("cpu: %s; tables: %s%s%s\n", okv_cpu_features(), tables[0]->name, n_tables > 1 ? ", " : "",
           n_tables > 1 ? tables[1]->name : "");
    CHECK(tables[0]->isa == OKV_ISA_PLAIN && !strcmp(tables[0]->name, "plain"));
    CHECK(okv_cpu_features()[0] != 0);
    /* asking for AVX2 gives AVX2 exactly when the CPU reports its features */
    const char *f = okv_cpu_features();
    bool has = strstr(f, "avx2") && strstr(f, "fma") && strstr(f, "f16c");
    const okv_kernels *avx2 = okv_kernels_select(OKV_ISA_AVX2);
    CHECKF(has ? avx2->isa == OKV_ISA_AVX2 : avx2->isa == OKV_ISA_PLAIN, "avx2 table '%s' with features '%s'",
           avx2->name, f);
    /* AUTO is AVX2 or better (AVX-512 / AMX: test_prefill checks which) */
    CHECK(!has || okv_kernels_select(OKV_ISA_AUTO)->isa >= OKV_ISA_AVX2 || getenv("OKV_KERNELS"));
    test_matmul();
    test_rmsnorm();
    test_glu();
    test_rope();
    test_rope_split();
    test_embed();
    test_elementwise();
    return okv_test_finish();
}
