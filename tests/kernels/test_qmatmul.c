/* Tests the quantized matmul (y = x @ dequant(W)^T): every implementation
 * against a double-precision sum computed here from the codes and scales
 * that were packed (not from the code under test), over both schemes, both
 * bit widths, every group size and odd shapes (N not a multiple of any
 * tile, K = one group, several groups, a superblock plus a tail; T in
 * {1, 2, 7, 64}, and 17-37 past the AMX tiles' 16 rows), with and without
 * bias, on 1 and 2 threads. */
#include <stdbool.h>
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "okv_test.h"
#include "kernel_test_util.h"

typedef void (*qmm_fn)(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                       const okv_qscheme *s, int N, const float *bias);

typedef struct impl {
    const char *name;
    qmm_fn fn;
    bool int_act; /* quantizes x to int8 per group: bounded by the x rounding */
    bool bf16;    /* x and the dequantized W rounded to bf16 (2^-8 each): 2^-7 of each |product| */
    int int_below; /* fewer rows than this: the integer path (int_act's bound, not its bits) */
} impl;

static impl impls[16];
static int n_impls;

/* A quantized W with its generating codes and f16-exact scales. */
typedef struct qweights {
    okv_qscheme s;
    int N, K;
    uint8_t *codes;
    float *d, *m;
    void *q;
} qweights;

static qweights make_qweights(int bits, int group, bool asym, int N, int K) {
    qweights w = {{bits, group, asym, OKV_F16, OKV_QB_NONE, false}, N, K, NULL, NULL, NULL, NULL};
    int G = K / group;
    w.codes = malloc((size_t)N * K);
    w.d = malloc(sizeof(float) * N * G);
    w.m = malloc(sizeof(float) * N * G);
    for (size_t i = 0; i < (size_t)N * K; i++) w.codes[i] = (uint8_t)((frand() + 1.0f) * 0.5f * (1 << bits)) & ((1 << bits) - 1);
    for (int i = 0; i < N * G; i++) {
        w.d[i] = okv_f16_to_f32(okv_f32_to_f16((frand() + 1.5f) * (bits == 4 ? 0.02f : 0.002f)));
        w.m[i] = asym ? okv_f16_to_f32(okv_f32_to_f16(frand() * 0.1f)) : 0.0f;
    }
    w.q = malloc(okv_quant_bytes(&w.s, N, K));
    okv_quant_pack(&w.s, N, K, w.codes, w.d, asym ? w.m : NULL, w.q);
    return w;
}

static void free_qweights(qweights *w) {
    free(w->codes);
    free(w->d);
    free(w->m);
    free(w->q);
}

static double w_at(const qweights *w, int n, int k) {
    int g = n * (w->K / w->s.group) + k / w->s.group, off = w->s.asym ? 0 : 1 << (w->s.bits - 1);
    return (double)w->d[g] * (w->codes[(size_t)n * w->K + k] - off) + w->m[g];
}

/* Wrong outputs of y against the double sum. f32 paths: K ulps of the
 * absolute sum. Integer-activation paths additionally: x in two int8
 * planes (8-bit W) is within max|x_group| / 64516 (plus f32 rounding of the
 * residual) of x, in one plane (4-bit W) within max|x_group| / 254, times
 * |w| per product. The bf16 paths fall back to the integer one below 16
 * rows. */
static int qmm_errors(const impl *im, const float *y, const float *x, const qweights *w, const float *bias, int T) {
    int bad = 0, K = w->K, N = w->N, gs = w->s.group;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)t * K;
            double s = bias ? bias[n] : 0.0, abs_s = bias ? fabs(bias[n]) : 0.0, xq = 0;
            for (int g = 0; g < K / gs; g++) {
                double amax = 0, wsum = 0;
                for (int k = g * gs; k < (g + 1) * gs; k++) {
                    double wk = w_at(w, n, k);
                    s += xr[k] * wk;
                    abs_s += fabs(xr[k] * wk);
                    amax = fmax(amax, fabs(xr[k]));
                    wsum += fabs(wk);
                }
                xq += ((w->s.bits == 4 ? 0.5 / 127 : 0.5 / 32258) + 3e-7) * amax * wsum;
            }
            bool int_act = im->int_act || T < im->int_below;
            double tol = (K + 8) * 1.2e-7 * abs_s + (int_act ? xq : 0) + (im->bf16 ? 0x1.01p-7 * abs_s : 0) + 1e-30;
            double e = fabs(y[(size_t)t * N + n] - s);
            if (!(e <= tol)) {
                if (bad < 3)
                    fprintf(stderr, "  %s q%d g%d %s T=%d K=%d N=%d y[%d,%d]=%.9g want %.9g (tol %.3g)\n", im->name,
                            w->s.bits, w->s.group, w->s.asym ? "asym" : "sym", T, K, N, t, n, y[(size_t)t * N + n], s,
                            tol);
                bad++;
            }
        }
    return bad;
}

static void check_shape(okv_threadpool *tp1, okv_threadpool *tp2, int bits, int group, bool asym, int T, int K, int N,
                        bool with_bias) {
    qweights w = make_qweights(bits, group, asym, N, K);
    float *x = malloc(sizeof(float) * (size_t)T * K), *bias = malloc(sizeof(float) * N);
    fill(x, (size_t)T * K, 2.0f);
    for (int i = 0; i < T * K; i += 37) x[i] *= 20.0f; /* activation outliers */
    fill(bias, (size_t)N, 1.0f);
    float *y1 = malloc(sizeof(float) * (size_t)T * N), *y2 = malloc(sizeof(float) * (size_t)T * N);
    float *ymodel = malloc(sizeof(float) * (size_t)T * N);
    okv_matmul_q_int_plain(tp1, ymodel, x, T, K, w.q, &w.s, N, with_bias ? bias : NULL);
    for (int i = 0; i < n_impls; i++) {
        impls[i].fn(tp1, y1, x, T, K, w.q, &w.s, N, with_bias ? bias : NULL);
        impls[i].fn(tp2, y2, x, T, K, w.q, &w.s, N, with_bias ? bias : NULL);
        int bad = qmm_errors(&impls[i], y1, x, &w, with_bias ? bias : NULL, T);
        CHECKF(bad == 0, "%s q%d g%d asym=%d T=%d K=%d N=%d: %d wrong", impls[i].name, bits, group, asym, T, K, N,
               bad);
        CHECKF(!memcmp(y1, y2, sizeof(float) * (size_t)T * N), "%s q%d g%d asym=%d T=%d K=%d N=%d: 1 vs 2 threads",
               impls[i].name, bits, group, asym, T, K, N);
        /* integer paths: the same algorithm as the plain model, bit for bit */
        if (impls[i].int_act)
            CHECKF(!memcmp(y1, ymodel, sizeof(float) * (size_t)T * N),
                   "%s q%d g%d asym=%d T=%d K=%d N=%d: differs from the plain integer model", impls[i].name, bits,
                   group, asym, T, K, N);
    }
    free(ymodel);
    free(x);
    free(bias);
    free(y1);
    free(y2);
    free_qweights(&w);
}

static void test_shapes(void) {
    okv_threadpool *tp1 = okv_threadpool_create(1), *tp2 = okv_threadpool_create(2);
    static const int Ts[] = {1, 2, 7, 64};
    static const int Ns[] = {5, 67};
    static const int groups[] = {32, 64, 128, 256};
    for (int b = 4; b <= 8; b += 4)
        for (int gi = 0; gi < 4; gi++)
            for (int a = 0; a < 2; a++) {
                int g = groups[gi];
                int Ks[] = {g, 3 * g, 18 * g};
                for (int ki = 0; ki < 3; ki++) {
                    for (int ti = 0; ti < 4; ti++)
                        for (int ni = 0; ni < 2; ni++) {
                            if (Ts[ti] == 64 && Ks[ki] * Ns[ni] > 40000) continue; /* the slow reference */
                            check_shape(tp1, tp2, b, g, a, Ts[ti], Ks[ki], Ns[ni], (ti + ni + ki) % 2 == 0);
                        }
                }
            }
    /* realistic: many GEMV chunks and ranges, prefill blocks past one tile */
    check_shape(tp1, tp2, 4, 32, true, 1, 2048, 515, true);
    check_shape(tp1, tp2, 8, 32, false, 1, 2048, 515, false);
    check_shape(tp1, tp2, 4, 64, false, 13, 576, 301, true);
    check_shape(tp1, tp2, 8, 128, true, 9, 1024, 130, false);
    /* tiles: T past one and several 16-row tiles with a tail, N past 32-row pairs and blocks */
    check_shape(tp1, tp2, 8, 32, false, 37, 96, 67, true);
    check_shape(tp1, tp2, 4, 32, true, 33, 608, 161, false);
    check_shape(tp1, tp2, 4, 64, false, 23, 192, 45, true);
    check_shape(tp1, tp2, 8, 128, true, 17, 384, 33, false);
    check_shape(tp1, tp2, 4, 256, false, 19, 512, 300, true);
    /* bf16-tile producer: superblocks of 4 and 12 groups (its 16-byte fast path with 1 and 3
     * scale patterns), and 16 + 8 (a full superblock, then a short one still on the fast path) */
    check_shape(tp1, tp2, 8, 32, false, 18, 128, 40, false);
    check_shape(tp1, tp2, 4, 32, true, 18, 384, 40, true);
    check_shape(tp1, tp2, 8, 32, true, 20, 768, 33, false);
    check_shape(tp1, tp2, 4, 32, false, 20, 768, 33, true);
    /* packed f32 path: 256-k chunks across superblocks, odd tails (16 + 9 and 16 + 1 groups), 128-row tasks */
    check_shape(tp1, tp2, 4, 32, true, 40, 800, 130, true);
    check_shape(tp1, tp2, 8, 32, false, 14, 544, 17, false);
    check_shape(tp1, tp2, 4, 64, false, 7, 1088, 257, false);
    /* the avx512-vdpbf16 table's switch to bf16 dequantization (4-bit from T = 128, 8-bit from 256) */
    check_shape(tp1, tp2, 4, 32, true, 130, 256, 67, true);
    check_shape(tp1, tp2, 8, 32, false, 130, 256, 67, false);
    check_shape(tp1, tp2, 8, 32, false, 260, 544, 70, true);
    check_shape(tp1, tp2, 4, 32, false, 260, 544, 70, false);
    okv_threadpool_free(tp1);
    okv_threadpool_free(tp2);
}

/* A non-finite activation poisons its own row's outputs (as in f32), not
 * the other rows'. */
static void test_non_finite_x(void) {
    const int T = 3, K = 64, N = 9;
    qweights w = make_qweights(4, 32, true, N, K);
    float x[3 * 64], y[3 * 9];
    fill(x, (size_t)T * K, 1.0f);
    x[1 * K + 40] = NAN;
    x[2 * K + 3] = INFINITY;
    for (int i = 0; i < n_impls; i++) {
        impls[i].fn(NULL, y, x, T, K, w.q, &w.s, N, NULL);
        int finite0 = 0, nan12 = 0;
        for (int n = 0; n < N; n++) {
            finite0 += isfinite(y[n]) != 0;
            nan12 += !isfinite(y[N + n]) + !isfinite(y[2 * N + n]);
        }
        CHECKF(finite0 == N && nan12 == 2 * N, "%s: non-finite x: %d/%d finite in row 0, %d/%d non-finite after",
               impls[i].name, finite0, N, nan12, 2 * N);
    }
    free_qweights(&w);
}

/* The bf16-tile path's column order (okv_qmm_tile_perm) is a permutation
 * of K made of runs of 4 consecutive k: the x pack loads 4 floats per run. */
static void test_tile_perm(void) {
    static const int Ks[] = {32, 96, 128, 384, 512, 768, 2048, 2080};
    for (int b = 4; b <= 8; b += 4)
        for (int gs = 32; gs <= 256; gs *= 2)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
                int K = Ks[ki];
                if (K % gs) continue;
                okv_qscheme s = {b, gs, false, OKV_F16, OKV_QB_NONE, false};
                uint8_t dummy[64] = {0};
                okv_qview v = okv_quant_view(&s, dummy, 1, K);
                int32_t *perm = malloc(sizeof(int32_t) * (size_t)K);
                char *seen = calloc((size_t)K, 1);
                okv_qmm_tile_perm(&v, perm);
                int bad = 0;
                for (int e = 0; e < K; e++) {
                    if (perm[e] < 0 || perm[e] >= K || seen[perm[e]]++) bad++;
                    if (e % 4 && perm[e] != perm[e - e % 4] + e % 4) bad++;
                }
                CHECKF(bad == 0, "tile perm q%d g%d K=%d: %d bad columns", b, gs, K, bad);
                free(perm);
                free(seen);
            }
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dull;
    test_tile_perm();
    impls[n_impls++] = (impl){"plain", okv_matmul_q_plain, false, false, 0};
    impls[n_impls++] = (impl){"int-plain", okv_matmul_q_int_plain, true, false, 0};
    if (okv_qmm_have_avx512vnni()) {
        impls[n_impls++] = (impl){"avx512vnni", okv_matmul_q_avx512vnni, true, false, 0};
        impls[n_impls++] = (impl){"avx512-f32", okv_matmul_q_avx512_f32, false, false, 0};
        /* the AVX-512 tables' prompt path: W dequantized into packed f32 panels (T = 1: the integer GEMV) */
        impls[n_impls++] = (impl){"avx512-packed-f32", okv_matmul_q_avx512_packed, false, false, 2};
        /* the AVX-512 tables' dispatch: packed for 8-bit W from T = 512, else the integer path */
        impls[n_impls++] = (impl){"avx512-table", okv_matmul_q_avx512_gemm, false, false, 512};
    } else {
        fprintf(stderr, "no AVX-512 VNNI here: that path is not tested\n");
    }
    if (okv_qmm_have_avx512vnni() && okv_cpu()->avx512bf16) { /* W dequantized to bf16 pairs for vdpbf16ps */
        impls[n_impls++] = (impl){"avx512-bf16-dequant", okv_matmul_q_avx512_dpbf16, false, true, 2};
        /* the avx512-vdpbf16 table's dispatch */
        impls[n_impls++] = (impl){"avx512-vdp-table", okv_matmul_q_avx512_vdp_gemm, false, true, 256};
    }
    if (okv_qmm_have_avx2()) impls[n_impls++] = (impl){"avx2", okv_matmul_q_avx2, true, false, 0};
    /* the avx2 table's prompt path: W dequantized into packed f32 panels (T = 1: the integer GEMV) */
    if (okv_qmm_have_avx2()) impls[n_impls++] = (impl){"avx2-packed-f32", okv_matmul_q_avx2_packed, false, false, 2};
    /* the avx2 table's dispatch: packed from T = 8 (q8) / 32 (q4), integer below */
    if (okv_qmm_have_avx2()) impls[n_impls++] = (impl){"avx2-table", okv_matmul_q_avx2_gemm, false, false, 32};
    else fprintf(stderr, "no AVX2 here: that path is not tested\n");
    if (okv_qmm_have_amx_int8()) {
        impls[n_impls++] = (impl){"amx-int8-tiles", okv_matmul_q_amx_tiles, true, false, 0}; /* also T < 16 */
    }
    if (okv_amx_usable(NULL)) { /* every T > 1; the amx table's dispatcher takes it from T >= 16 */
        impls[n_impls++] = (impl){"amx-bf16-dequant", okv_matmul_q_amx_bf16, false, true, 16};
        impls[n_impls++] = (impl){"amx-dispatch", okv_matmul_q_amx, false, true, 16};
    }
    else fprintf(stderr, "no AMX-INT8 here (or no permission): that path is not tested\n");
    const okv_kernels *best = okv_kernels_select(OKV_ISA_AUTO);
    if (best->matmul_q != okv_matmul_q_best && best->matmul_q != okv_matmul_q_amx &&
        best->matmul_q != okv_matmul_q_avx2_gemm && best->matmul_q != okv_matmul_q_avx512_gemm &&
        best->matmul_q != okv_matmul_q_avx512_vdp_gemm)
        impls[n_impls++] = (impl){best->name, best->matmul_q, best->matmul_q != okv_matmul_q_plain, false, 0};
    test_shapes();
    test_non_finite_x();
    return okv_test_finish();
}
