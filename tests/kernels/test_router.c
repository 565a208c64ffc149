/* test_router.c — the kernel router (okv_kernels.c): every table's variant
 * lists end in a variant for any shape, the picks on the avx2 table are the
 * ones its thresholds state, and what a call notes on its pool is the
 * variant okv_kernels_pick names for that shape. The numbers each variant
 * computes are checked against the plain path in test_prefill,
 * test_qmatmul, test_qbmm and test_attend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_test_util.h"
#include "okv_kernels_internal.h"

static int failures;

#define CHECK(cond, ...)                        \
    do {                                        \
        if (!(cond)) {                          \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                \
            printf("\n");                       \
            failures++;                         \
        }                                       \
    } while (0)

static okv_kshape mm_shape(int T, int K, int N, okv_dtype wdt) {
    return (okv_kshape){.T = T, .K = K, .N = N, .wdt = wdt};
}

static okv_kshape at_shape(int T, int nh, int kvh, int D, okv_dtype kdt, okv_dtype vdt) {
    return (okv_kshape){.T = T, .n_heads = nh, .kv_heads = kvh, .head_dim = D, .k_dt = kdt, .v_dt = vdt};
}

/* Every table, every op, a grid of shapes: the router always names a variant. */
static void test_lists_end(void) {
    const okv_kernels *tabs[16];
    int n = okv_kernels_all(tabs, 16);
    CHECK(n >= 9 && n <= 16, "%d tables", n);
    static const int Ts[] = {0, 1, 2, 15, 16, 47, 48, 128, 256, 512};
    static const okv_dtype dts[] = {OKV_F32, OKV_BF16, OKV_F16, OKV_Q8};
    okv_qscheme q4 = {.bits = 4, .group = 32, .scale_dtype = OKV_F16, .block = OKV_QB_NONE};
    okv_qscheme q8 = {.bits = 8, .group = 64, .asym = true, .scale_dtype = OKV_F16, .block = OKV_QB_NONE};
    okv_qscheme qb = okv_qscheme_block(OKV_QB_Q4_0);
    const okv_qscheme *schemes[] = {&q4, &q8, &qb};
    for (int t = 0; t < n; t++)
        for (unsigned i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
            for (int d = 0; d < 3; d++) {
                okv_kshape sh = mm_shape(Ts[i], 2048, 512, dts[d]);
                CHECK(okv_kernels_pick(tabs[t], OKV_KOP_MATMUL, &sh), "%s matmul T=%d", tabs[t]->name, Ts[i]);
            }
            for (int s = 0; s < 3; s++) {
                okv_kshape sh = {.T = Ts[i], .K = 2048, .N = 512, .s = schemes[s]};
                CHECK(okv_kernels_pick(tabs[t], OKV_KOP_MATMUL_Q, &sh), "%s matmul_q T=%d", tabs[t]->name, Ts[i]);
                CHECK(okv_kernels_pick(tabs[t], OKV_KOP_MATMUL_QB, &sh), "%s matmul_qb T=%d", tabs[t]->name, Ts[i]);
            }
            for (int k = 0; k < 4; k++)
                for (int v = 0; v < 4; v++) {
                    okv_kshape a = at_shape(Ts[i], 32, 8, 64, dts[k], dts[v]), b = at_shape(Ts[i], 8, 1, 72, dts[k], dts[v]);
                    CHECK(okv_kernels_pick(tabs[t], OKV_KOP_ATTEND, &a), "%s attend T=%d", tabs[t]->name, Ts[i]);
                    CHECK(okv_kernels_pick(tabs[t], OKV_KOP_ATTEND, &b), "%s attend T=%d", tabs[t]->name, Ts[i]);
                }
        }
}

static void expect(const okv_kernels *k, okv_kop op, okv_kshape sh, const char *want) {
    const char *got = okv_kernels_pick(k, op, &sh);
    CHECK(got && !strcmp(got, want), "%s %s T=%d: %s, want %s", k->name, okv_kop_name(op), sh.T, got ? got : "(none)",
          want);
}

/* The plain table has one variant per op; the avx2 table's picks follow
 * its thresholds (packed from T = 48 for bf16 / f16, 8 for q8, 32 for q4). */
static void test_picks(void) {
    const okv_kernels *p = okv_kernels_select(OKV_ISA_PLAIN);
    expect(p, OKV_KOP_MATMUL, mm_shape(512, 2048, 2048, OKV_BF16), "plain");
    expect(p, OKV_KOP_ATTEND, at_shape(1, 32, 8, 64, OKV_BF16, OKV_BF16), "plain");
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AVX2);
    if (k == p) {
        printf("no AVX2: the avx2 picks are not checked\n");
        return;
    }
    expect(k, OKV_KOP_MATMUL, mm_shape(1, 2048, 2048, OKV_BF16), "avx2-gemv");
    expect(k, OKV_KOP_MATMUL, mm_shape(47, 2048, 2048, OKV_BF16), "avx2-dot");
    expect(k, OKV_KOP_MATMUL, mm_shape(48, 2048, 2048, OKV_BF16), "avx2-packed");
    expect(k, OKV_KOP_MATMUL, mm_shape(48, 2048, 2048, OKV_F16), "avx2-packed");
    expect(k, OKV_KOP_MATMUL, mm_shape(512, 2048, 2048, OKV_F32), "avx2-dot");
    okv_qscheme q4 = {.bits = 4, .group = 32, .scale_dtype = OKV_F16, .block = OKV_QB_NONE};
    okv_qscheme q8 = {.bits = 8, .group = 32, .scale_dtype = OKV_F16, .block = OKV_QB_NONE};
    expect(k, OKV_KOP_MATMUL_Q, (okv_kshape){.T = 32, .K = 2048, .N = 64, .s = &q4}, "avx2-packed");
    expect(k, OKV_KOP_MATMUL_Q, (okv_kshape){.T = 8, .K = 2048, .N = 64, .s = &q8}, "avx2-packed");
    okv_kshape q4_small = {.T = 31, .K = 2048, .N = 64, .s = &q4};
    const char *got = okv_kernels_pick(k, OKV_KOP_MATMUL_Q, &q4_small);
    CHECK(got && strstr(got, "q-int"), "q4 T=31: %s, want an integer kernel", got ? got : "(none)");
    okv_qscheme qb = okv_qscheme_block(OKV_QB_Q4_0);
    expect(k, OKV_KOP_MATMUL_QB, (okv_kshape){.T = 16, .K = 2048, .N = 64, .s = &qb}, "avx2-packed");
    expect(k, OKV_KOP_MATMUL_QB, (okv_kshape){.T = 15, .K = 2048, .N = 64, .s = &qb}, "qb-int-avx2");
    expect(k, OKV_KOP_ATTEND, at_shape(1, 32, 8, 64, OKV_BF16, OKV_BF16), "decode-avx2");
    expect(k, OKV_KOP_ATTEND, at_shape(1, 32, 8, 64, OKV_Q8, OKV_Q8), "blocked-avx2");
    expect(k, OKV_KOP_ATTEND, at_shape(128, 32, 8, 64, OKV_BF16, OKV_BF16), "blocked-avx2");
}

/* A table call notes on its pool the variant the pick names, once per
 * distinct name, in first-run order; a fresh pool has none. */
static void test_ran(void) {
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO);
    okv_threadpool *tp = okv_threadpool_create(1);
    char buf[256];
    CHECK(!strcmp(okv_kernels_ran(tp, buf, sizeof buf), ""), "fresh pool: \"%s\"", buf);
    enum { K = 256, N = 64, TMAX = 64 };
    float *x = malloc(sizeof(float) * TMAX * K), *y = malloc(sizeof(float) * TMAX * N);
    uint16_t *w = malloc(sizeof(uint16_t) * N * K);
    fill(x, (size_t)TMAX * K, 1.0f);
    for (int i = 0; i < N * K; i++) w[i] = (uint16_t)(0x3c00 + (i % 97)); /* bf16, about 2^-7 */
    static const int Ts[] = {1, 64, 1, 2};
    char want[256] = "matmul: ";
    const char *seen[4];
    int n_seen = 0;
    for (int i = 0; i < 4; i++) {
        k->matmul(tp, y, x, Ts[i], K, w, OKV_BF16, N, NULL);
        okv_kshape sh = mm_shape(Ts[i], K, N, OKV_BF16);
        const char *name = okv_kernels_pick(k, OKV_KOP_MATMUL, &sh);
        int dup = 0;
        for (int j = 0; j < n_seen; j++) dup |= seen[j] == name;
        if (!dup) {
            if (n_seen) strcat(want, ", ");
            strcat(want, name);
            seen[n_seen++] = name;
        }
        CHECK(isfinite(y[0]) && isfinite(y[(size_t)Ts[i] * N - 1]), "T=%d output not finite", Ts[i]);
    }
    okv_kernels_ran(tp, buf, sizeof buf);
    CHECK(!strcmp(buf, want), "%s: ran \"%s\", picks \"%s\"", k->name, buf, want);
    char small[12];
    okv_kernels_ran(tp, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1 && !strncmp(small, want, sizeof small - 1), "truncated: \"%s\"", small);
    free(x);
    free(y);
    free(w);
    okv_threadpool_free(tp);
}

int main(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    test_lists_end();
    test_picks();
    test_ran();
    if (failures) {
        printf("%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
