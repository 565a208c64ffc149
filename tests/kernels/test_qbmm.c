/* Tests the matmul over GGUF block weights (qmatmul/block_*.c) for every carried
 * block type: random blocks (random codes, scale bytes set to finite f16),
 * odd shapes (N not a multiple of any tile, one block, several blocks; T in
 * {1, 2, 5, 15} on the integer dots and {16, 37, 64} on the packed GEMMs),
 * with and without bias, on 1 and 2 threads.
 *   - every table's matmul_qb against a double sum over the exactly
 *     dequantized W (okv_qblock_dequant, itself compared with gguf-py in
 *     tests/gguf), within the bound of its arithmetic: f32 rounding, plus
 *     x's int8 rounding (|dx| / 2 per element) on the integer dots, plus
 *     2^-7 per product where x and W are rounded to bf16;
 *   - each ISA's quantizers write the plain quantizer's bytes, and its dots
 *     equal the plain dots to 1e-5 of sum |w x| (same integers, same
 *     per-block float terms, another order of the blocks' sums);
 *   - the deterministic tables: a row's outputs do not depend on T. */
#include <stdbool.h>
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "okv_test.h"
#include "kernel_test_util.h"

static const int types[] = {OKV_QB_Q4_0, OKV_QB_Q4_1, OKV_QB_Q5_0, OKV_QB_Q5_1, OKV_QB_Q8_0,
                            OKV_QB_Q2_K, OKV_QB_Q3_K, OKV_QB_Q4_K, OKV_QB_Q5_K, OKV_QB_Q6_K};

/* Byte offsets of each type's f16 scales (d, and dmin / m where it has one). */
static void scale_fields(int type, int *d, int *m) {
    *m = -1;
    switch (type) {
    case OKV_QB_Q4_1: case OKV_QB_Q5_1: *d = 0; *m = 2; break;
    case OKV_QB_Q2_K: *d = 80; *m = 82; break;
    case OKV_QB_Q3_K: *d = 108; break;
    case OKV_QB_Q4_K: case OKV_QB_Q5_K: *d = 0; *m = 2; break;
    case OKV_QB_Q6_K: *d = 208; break;
    default: *d = 0; break;
    }
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = okv_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* W[N, K] of random blocks: random code bytes, finite f16 scales of a size
 * that keeps |w| near 1 / 8. */
static uint8_t *make_blocks(int type, int N, int K) {
    const okv_qblock_info *b = okv_qblock_get(type);
    size_t nb = (size_t)N * (K / b->elems);
    uint8_t *w = malloc(nb * (size_t)b->bytes);
    int fd, fm;
    scale_fields(type, &fd, &fm);
    float dscale = b->elems == 256 ? 0.004f : (b->bits == 8 ? 0.001f : 0.02f);
    for (size_t i = 0; i < nb; i++) {
        uint8_t *blk = w + i * (size_t)b->bytes;
        for (int j = 0; j < b->bytes; j++) blk[j] = (uint8_t)((frand() + 1.0f) * 128.0f);
        put_f16(blk + fd, (frand() + 1.5f) * dscale);
        if (fm >= 0) put_f16(blk + fm, (type == OKV_QB_Q4_1 || type == OKV_QB_Q5_1 ? frand() * 0.1f : (frand() + 1.0f) * dscale));
    }
    return w;
}

/* Bound on |y - exact| for one output: f32 summation (K + blocks ulps of
 * sum |w x|), the int8 rounding of x on the integer dots (|dx| / 2 per
 * element: sum over blocks of max|x_blk| / 254 * sum |w| in it), 2^-7 per
 * product where both operands are rounded to bf16. */
static double bound(const float *wr, const float *xr, int K, int elems, bool int_act, bool bf16) {
    double abs_s = 0, xq = 0;
    for (int b0 = 0; b0 < K; b0 += elems) {
        double amax = 0, wsum = 0;
        for (int k = b0; k < b0 + elems; k++) {
            abs_s += fabs((double)wr[k] * xr[k]);
            if (fabs(xr[k]) > amax) amax = fabs(xr[k]);
            wsum += fabs(wr[k]);
        }
        xq += amax / 254.0 * wsum * 1.0001;
    }
    return abs_s * (2.0 * K + 16) * 0x1p-24 + (int_act ? xq : 0) + (bf16 ? abs_s * 0x1p-7 : 0) + 1e-30;
}

typedef struct table_case {
    const okv_kernels *k;
    bool bf16_prompts; /* its packed prompt path rounds x and W to bf16 */
} table_case;

static void check_table(const table_case *tc, okv_threadpool *tp, int type, int N, int K, int T, bool with_bias) {
    const okv_qblock_info *b = okv_qblock_get(type);
    okv_qscheme s = okv_qscheme_block(type);
    uint8_t *W = make_blocks(type, N, K);
    float *wf = malloc(sizeof(float) * (size_t)N * K), *x = malloc(sizeof(float) * (size_t)T * K);
    float *y = malloc(sizeof(float) * (size_t)T * N), *bias = malloc(sizeof(float) * N);
    for (int n = 0; n < N; n++) okv_dequant_row(&s, W, N, K, n, wf + (size_t)n * K);
    fill(x, (size_t)T * K, 1.0f);
    fill(bias, N, 0.5f);
    tc->k->matmul_qb(tp, y, x, T, K, W, &s, N, with_bias ? bias : NULL);
    bool reference = tc->k->matmul_qb == okv_matmul_q_plain;
    bool packed = T >= 16 && !reference && strncmp(tc->k->name, "deterministic", 13);
    int bad = 0;
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            const float *wr = wf + (size_t)n * K, *xr = x + (size_t)t * K;
            double exact = with_bias ? bias[n] : 0.0;
            for (int k = 0; k < K; k++) exact += (double)wr[k] * xr[k];
            double tol = bound(wr, xr, K, b->elems, !reference && !packed, packed && tc->bf16_prompts);
            double e = fabs(y[(size_t)t * N + n] - exact);
            if (!(e <= tol)) bad++;
            if (e / tol > worst) worst = e / tol;
        }
    CHECKF(bad == 0, "%s %s N=%d K=%d T=%d bias=%d threads=%d: %d outputs off (worst %.2f of the bound)", tc->k->name,
           b->name, N, K, T, with_bias, okv_threadpool_size(tp), bad, worst);
    free(W);
    free(wf);
    free(x);
    free(y);
    free(bias);
}

/* An ISA's quantizers and dots against the plain ones; `poison`: one block
 * of x holds a NaN and another an inf (the quantizers must still agree:
 * d = NaN, codes and sums 0). */
static void check_isa(const okv_qb_isa *isa, int type, int K, bool poison) {
    const okv_qblock_info *b = okv_qblock_get(type);
    int nb = K / b->elems;
    size_t xb = b->elems == 256 ? (size_t)nb * sizeof(okv_qb_x256) : (size_t)nb * sizeof(okv_qb_x32);
    uint8_t *W = make_blocks(type, 1, K), *xp = calloc(1, xb), *xi = calloc(1, xb);
    float *x = malloc(sizeof(float) * K), *wf = malloc(sizeof(float) * K);
    fill(x, K, 2.0f);
    x[K / 3] = 0.0f;
    if (poison) {
        x[1] = NAN;
        x[K - 2] = INFINITY;
    }
    okv_qblock_dequant(type, W, wf, (uint64_t)K);
    okv_qb_quant_fn qp = b->elems == 256 ? okv_qb_isa_plain.quant256 : okv_qb_isa_plain.quant32;
    okv_qb_quant_fn qi = b->elems == 256 ? isa->quant256 : isa->quant32;
    qp(x, K, xp);
    if (qi) {
        qi(x, K, xi);
        CHECKF(!memcmp(xp, xi, xb), "%s quantizer for %s blocks differs from the plain one (K=%d)", isa->name, b->name, K);
    }
    if (poison) {
        const okv_qb_x32 *b32 = (const okv_qb_x32 *)xp;
        const okv_qb_x256 *b256 = (const okv_qb_x256 *)xp;
        bool zero = b->elems == 256 ? isnan(b256[0].d) && !b256[0].q[1] && !b256[0].bsums[0]
                                    : isnan(b32[0].d) && !b32[0].q[1] && !b32[0].qsum;
        CHECKF(zero, "plain quantizer: a non-finite %s activation block is not d = NaN with zero codes", b->name);
    } else if (isa->dot[type]) {
        double abs_s = 0;
        for (int k = 0; k < K; k++) abs_s += fabs((double)wf[k] * x[k]);
        float a = okv_qb_isa_plain.dot[type](W, xp, nb), c = isa->dot[type](W, xp, nb);
        CHECKF(fabs((double)a - c) <= 1e-5 * abs_s + 1e-30, "%s dot %s K=%d: %.9g vs plain %.9g", isa->name, b->name, K,
               (double)c, (double)a);
    }
    free(W);
    free(xp);
    free(xi);
    free(x);
    free(wf);
}

/* The deterministic tables: row 0's outputs are the same bits at T = 1 and T = 20. */
static void check_invariant(const okv_kernels *k, okv_threadpool *tp, int type) {
    const int N = 19, K = 512, T = 20;
    okv_qscheme s = okv_qscheme_block(type);
    uint8_t *W = make_blocks(type, N, K);
    float *x = malloc(sizeof(float) * T * K), *y1 = malloc(sizeof(float) * N), *yT = malloc(sizeof(float) * T * N);
    fill(x, (size_t)T * K, 1.0f);
    k->matmul_qb(tp, y1, x, 1, K, W, &s, N, NULL);
    k->matmul_qb(tp, yT, x, T, K, W, &s, N, NULL);
    CHECKF(!memcmp(y1, yT, sizeof(float) * N), "%s %s: row 0 differs between T = 1 and T = %d", k->name,
           okv_qblock_get(type)->name, T);
    free(W);
    free(x);
    free(y1);
    free(yT);
}

/* The x8 layout (okv_qblock_x8.c): packing gives every row back exactly,
 * row ranges dequantize as the file's rows do, each ISA's x8 dots equal
 * the plain row dots bit for bit, and a table that asks for x8 gives the
 * plain integer driver's bits at decode sizes and its own unpacked bits on
 * the packed-GEMM path. */
static void check_x8(const okv_kernels *const *tabs, int n_tabs, okv_threadpool *tp, int type, bool extreme) {
    const okv_qblock_info *b = okv_qblock_get(type);
    const int N = 24, K = b->elems == 256 ? 3 * 256 : 13 * 32, nb = K / b->elems, T = 20;
    const size_t row = (size_t)nb * (size_t)b->bytes;
    uint8_t *W = make_blocks(type, N, K), *P = malloc((size_t)N * row), *got = malloc(row);
    if (extreme) { /* every code and sub-block scale at its largest, x all equal: the integer sums' worst case */
        int fd, fm;
        scale_fields(type, &fd, &fm);
        memset(W, 0xff, (size_t)N * row);
        for (size_t i = 0; i < (size_t)N * (size_t)nb; i++) {
            put_f16(W + i * (size_t)b->bytes + fd, 0.01f);
            if (fm >= 0) put_f16(W + i * (size_t)b->bytes + fm, 0.01f);
        }
    }
    memcpy(P, W, (size_t)N * row);
    CHECKF(!okv_qblock_x8_pack(type, P, 20, K) && !memcmp(P, W, 20 * row), "%s: x8 pack of 20 rows not refused", b->name);
    CHECKF(okv_qblock_x8_pack(type, P, N, K), "%s: x8 pack failed", b->name);
    bool same = true;
    for (int n = 0; n < N; n++) {
        okv_qblock_x8_row(type, P, K, n, 0, nb, got);
        same &= !memcmp(got, W + (size_t)n * row, row);
    }
    CHECKF(same, "%s: x8 rows do not come back exactly", b->name);
    okv_qscheme s = okv_qscheme_block(type), s8 = s;
    s8.x8 = true;
    okv_qview v = okv_quant_view(&s8, P, N, K);
    float *f0 = malloc(sizeof(float) * K), *f1 = malloc(sizeof(float) * K);
    const int e0 = 5, e1 = K - 7;
    okv_qblock_dequant_range(type, W + 13 * row, e0, e1, f0);
    okv_qview_block_range(&v, 13, e0, e1, f1);
    CHECKF(!memcmp(f0, f1, sizeof(float) * (size_t)(e1 - e0)), "%s: x8 range dequant differs", b->name);
    okv_dequant_row(&s8, P, N, K, 21, f1);
    okv_qblock_dequant(type, W + 21 * row, f0, (uint64_t)K);
    CHECKF(!memcmp(f0, f1, sizeof(float) * K), "%s: x8 okv_dequant_row differs", b->name);

    float *x = malloc(sizeof(float) * T * K), *yp = malloc(sizeof(float) * T * N), *y8 = malloc(sizeof(float) * T * N);
    fill(x, (size_t)T * K, 1.5f);
    if (extreme)
        for (size_t i = 0; i < (size_t)T * K; i++) x[i] = 1.0f;
    uint8_t *xq = malloc(okv_qbmm_scratch(1, K));
    (b->elems == 256 ? okv_qb_isa_plain.quant256 : okv_qb_isa_plain.quant32)(x, K, xq);
    const okv_qb_isa *isas[3] = {&okv_qb_isa_plain, okv_qb_isa_avx2(), okv_qb_isa_avx512()};
    for (int i = 0; i < 3; i++) {
        if (!isas[i] || !isas[i]->dot8[type]) continue;
        bool eq = true;
        for (int g = 0; g < N / 8; g++) {
            float o[8];
            isas[i]->dot8[type](P + (size_t)g * 8 * row, xq, nb, o);
            for (int r = 0; r < 8; r++) {
                float ref = okv_qb_isa_plain.dot[type](W + (size_t)(8 * g + r) * row, xq, nb);
                eq &= !memcmp(&ref, &o[r], sizeof ref);
            }
        }
        CHECKF(eq, "%s x8 dot %s differs from the plain row dots", isas[i]->name, b->name);
    }
    static const int Ts[] = {1, 3, 20};
    for (int c = 0; c < n_tabs; c++) {
        if (!tabs[c]->matmul_qb_x8 || !tabs[c]->matmul_qb_x8(type)) continue;
        for (int t = 0; t < 3; t++) {
            if (Ts[t] < 16 || tabs[c]->matmul_qb == okv_matmul_qb_int_best) okv_matmul_qb_int_plain(tp, yp, x, Ts[t], K, W, &s, N, NULL);
            else tabs[c]->matmul_qb(tp, yp, x, Ts[t], K, W, &s, N, NULL);
            tabs[c]->matmul_qb(tp, y8, x, Ts[t], K, P, &s8, N, NULL);
            CHECKF(!memcmp(yp, y8, sizeof(float) * (size_t)Ts[t] * N), "%s %s x8 T=%d differs from %s", tabs[c]->name,
                   b->name, Ts[t], Ts[t] < 16 ? "the plain integer dots" : "the unpacked W");
        }
    }
    free(W);
    free(P);
    free(got);
    free(f0);
    free(f1);
    free(x);
    free(yp);
    free(y8);
    free(xq);
}

int main(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    const okv_qb_isa *isas[2] = {okv_qb_isa_avx2(), okv_qb_isa_avx512()};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int i = 0; i < 2; i++)
            if (isas[i])
                for (int K = 256; K <= 2304; K += 1024) check_isa(isas[i], types[ti], K, false);
    /* block counts that are not a multiple of 8 (the SIMD dots take 8 blocks a pass), and non-finite x */
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int i = 0; i < 2; i++)
            if (isas[i]) {
                int K = okv_qblock_get(types[ti])->elems == 256 ? 17 * 256 : 13 * 32;
                check_isa(isas[i], types[ti], K, false);
                check_isa(isas[i], types[ti], K, true);
            }

    table_case tables[8];
    int n_tables = 0;
    const okv_isa isa_list[] = {OKV_ISA_PLAIN, OKV_ISA_AVX2, OKV_ISA_AVX512, OKV_ISA_AMX};
    for (int i = 0; i < 4; i++) {
        const okv_kernels *k = okv_kernels_select(isa_list[i]);
        bool seen = false;
        for (int j = 0; j < n_tables; j++) seen |= tables[j].k == k;
        if (seen) continue;
        tables[n_tables++] = (table_case){k, k->matmul_qb == okv_matmul_qb_avx512_vdp};
    }
    const okv_kernels *det[2] = {okv_kernels_select_deterministic(OKV_ISA_AVX2),
                                 okv_kernels_select_deterministic(OKV_ISA_AUTO)};
    for (int i = 0; i < 2; i++)
        if (det[i] != tables[0].k) tables[n_tables++] = (table_case){det[i], false};

    okv_threadpool *tps[2] = {okv_threadpool_create(1), okv_threadpool_create(2)};
    static const int Ts[] = {1, 2, 5, 15, 16, 37, 64};
    for (int c = 0; c < n_tables; c++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            int type = types[ti], elems = okv_qblock_get(type)->elems;
            const int Ks[2] = {elems == 256 ? 256 : 32, elems == 256 ? 768 : 96 + 32 * 5};
            for (int ki = 0; ki < 2; ki++)
                for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++)
                    check_table(&tables[c], tps[t % 2], type, t % 3 ? 37 : 5, Ks[ki], Ts[t], t % 2 == 0);
        }
    for (int i = 0; i < 2; i++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) check_invariant(det[i], tps[1], types[ti]);
    const okv_kernels *all[10];
    int n_all = 0;
    for (int c = 0; c < n_tables; c++) all[n_all++] = tables[c].k;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        check_x8(all, n_all, tps[1], types[ti], false);
        check_x8(all, n_all, tps[1], types[ti], true);
    }
    okv_threadpool_free(tps[0]);
    okv_threadpool_free(tps[1]);
    printf("%d passed, %d failed\n", okv_t_pass, okv_t_fail);
    return okv_t_fail ? 1 : 0;
}
