/* Tests the prefill matmul paths (T > 1): AVX-512 f32 FMAs (dot products,
 * and the packed broadcast kernel of matmul/gemm_avx512.c), AVX-512 BF16
 * (vdpbf16ps) and AMX BF16 tiles, each against a double-precision reference
 * and against the plain table, for T in {1, 2, 7, 16, 17, 64, 130} (and 513), K
 * not a multiple of 32, N not a multiple of any tile (and one N past the AMX
 * loop's 256-row task blocks, T = 513 past its 512-row T blocks), bias on and
 * off, 1 and 2 threads (which must give identical bits). Paths the CPU (or OS) lacks are skipped and the
 * program prints which ran.
 *
 * Tolerances: a path that uses x and W exactly must be within the float
 * error of a K-term sum, (K + 2) * 1.2e-7 * sum |x w|, of the exact sum. A
 * path that rounds x (and f16 W) to bf16 must be within that same bound of
 * the exact sum of the *rounded* operands (so a misplaced element cannot
 * hide in the rounding slack), and within rounding * sum |x w| more of the
 * unrounded one (rounding = 2^-8, half a bf16 ulp, for x only; 2^-7 when W is rounded too). */
#include <stdbool.h>
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "okv_test.h"
#include "kernel_test_util.h"

typedef void (*matmul_fn)(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                          int N, const float *bias);

typedef struct path {
    const char *name;
    matmul_fn fn;
    bool available;
    float rounding[3]; /* per weight dtype, as okv_kernels.matmul_rounding */
} path;

static float round_bf16(float v) { return okv_bf16_to_f32(okv_f32_to_bf16(v)); }

/* Worst |y - exact| over the outputs, in units of the allowed error; the
 * exact sum uses x and W rounded to bf16 when `round_x` / `round_w`. */
static double worst_error(const float *y, const float *x, const float *w, const float *bias, int T, int K, int N,
                          bool round_x, bool round_w, double extra) {
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0, abs_s = bias ? fabs(bias[n]) : 0.0;
            for (int k = 0; k < K; k++) {
                float xv = x[(size_t)t * K + k], wv = w[(size_t)n * K + k];
                if (round_x) xv = round_bf16(xv);
                if (round_w) wv = round_bf16(wv);
                s += (double)xv * wv;
                abs_s += fabs((double)xv * wv);
            }
            double tol = (K + 2) * 1.2e-7 * abs_s + extra * abs_s + 1e-30;
            double e = fabs(y[(size_t)t * N + n] - s) / tol;
            if (e > worst) worst = e;
        }
    return worst;
}

static void check_shape(const path *p, okv_threadpool *tp1, okv_threadpool *tp2, okv_dtype dt, int T, int K, int N,
                        bool with_bias) {
    size_t nw = (size_t)N * K;
    float *wf = malloc(nw * 4), *w_exact = malloc(nw * 4), *x = malloc((size_t)T * K * 4), *bias = malloc(N * 4);
    void *w = malloc(nw * 4);
    float *y1 = malloc((size_t)T * N * 4), *y2 = malloc((size_t)T * N * 4), *yp = malloc((size_t)T * N * 4);
    fill(wf, nw, 1.0f);
    okv_convert(w, dt, wf, OKV_F32, nw);
    okv_convert(w_exact, OKV_F32, w, dt, nw);
    fill(x, (size_t)T * K, 2.0f);
    fill(bias, (size_t)N, 1.0f);
    const float *b = with_bias ? bias : NULL;
    p->fn(tp1, y1, x, T, K, w, dt, N, b);
    p->fn(tp2, y2, x, T, K, w, dt, N, b);
    okv_kernels_select(OKV_ISA_PLAIN)->matmul(tp2, yp, x, T, K, w, dt, N, b);
    float r = p->rounding[dt];
    bool rx = r > 0, rw = r > 0x1p-8f && T > 1; /* T = 1: the GEMV rounds x only */
    double e_tight = worst_error(y1, x, w_exact, b, T, K, N, rx, rw, 0.0);
    double e_loose = worst_error(y1, x, w_exact, b, T, K, N, false, false, 1.01 * r);
    double e_plain = worst_error(yp, x, w_exact, b, T, K, N, false, false, 0.0);
    CHECKF(e_tight <= 1 && e_loose <= 1, "%s %s T=%d K=%d N=%d bias=%d: error %.3g / %.3g of the bound", p->name,
           okv_dtype_name(dt), T, K, N, with_bias, e_tight, e_loose);
    CHECKF(e_plain <= 1, "plain %s T=%d K=%d N=%d: error %.3g of the bound", okv_dtype_name(dt), T, K, N, e_plain);
    /* plain and this path are both within their bound of the same exact sum,
     * which bounds their difference; the bits must not depend on threads */
    CHECKF(!memcmp(y1, y2, (size_t)T * N * 4), "%s %s T=%d K=%d N=%d: 1 and 2 threads differ", p->name,
           okv_dtype_name(dt), T, K, N);
    free(wf); free(w_exact); free(x); free(bias); free(w); free(y1); free(y2); free(yp);
}

static void test_path(const path *p) {
    if (!p->available) {
        printf("skipped %s (not supported here)\n", p->name);
        return;
    }
    okv_threadpool *tp1 = okv_threadpool_create(1), *tp2 = okv_threadpool_create(2);
    static const int Ts[] = {1, 2, 7, 16, 17, 64, 130};
    static const int KNs[][2] = {{77, 37}, {200, 70}, {33, 131}, {1000, 45}, {64, 32}, {2100, 19}};
    int before = okv_t_fail;
    for (int d = 0; d < 3; d++)
        for (size_t t = 0; t < sizeof Ts / sizeof *Ts; t++)
            for (size_t s = 0; s < sizeof KNs / sizeof *KNs; s++)
                check_shape(p, tp1, tp2, (okv_dtype)d, Ts[t], KNs[s][0], KNs[s][1], (t + s) % 2 == 0);
    /* one shape past the K chunk of every path (2048 bf16 x, 16 AMX tiles) */
    check_shape(p, tp1, tp2, OKV_BF16, 9, 4131, 67, true);
    check_shape(p, tp1, tp2, OKV_F16, 33, 2600, 40, false);
    /* several AMX task blocks (256 rows) with a ragged last one, K chunks and T blocks */
    check_shape(p, tp1, tp2, OKV_BF16, 513, 600, 531, true);
    check_shape(p, tp1, tp2, OKV_F16, 513, 77, 37, false);
    check_shape(p, tp1, tp2, OKV_F16, 40, 1100, 300, false);
    /* bf16 with K % 32 == 0: full 256-row blocks read their A tiles from W in place
     * (three K chunks, the last partial), the ragged last block packed */
    check_shape(p, tp1, tp2, OKV_BF16, 513, 1088, 530, true);
    check_shape(p, tp1, tp2, OKV_BF16, 64, 2048, 512, false);
    /* the packed kernel's blocks exactly full (6-row x panels, 64-row W panels, 128-k chunks) */
    check_shape(p, tp1, tp2, OKV_BF16, 12, 256, 128, true);
    check_shape(p, tp1, tp2, OKV_F16, 18, 384, 192, false);
    printf("ran %s: %s\n", p->name, okv_t_fail == before ? "ok" : "FAILED");
    okv_threadpool_free(tp1);
    okv_threadpool_free(tp2);
}

/* One block shape of a packed kernel: weight dtype, T, K, N, bias. */
typedef struct block_shape {
    okv_dtype dt;
    int T, K, N;
    bool bias;
} block_shape;

static void check_block_shapes(const path *p, const block_shape *shapes, size_t n) {
    okv_threadpool *tp1 = okv_threadpool_create(1), *tp2 = okv_threadpool_create(2);
    for (size_t i = 0; i < n; i++)
        check_shape(p, tp1, tp2, shapes[i].dt, shapes[i].T, shapes[i].K, shapes[i].N, shapes[i].bias);
    okv_threadpool_free(tp1);
    okv_threadpool_free(tp2);
}

/* The AVX2 packed kernel's blocks (4-row x panels, 24-row W micro-panels,
 * 256-k chunks, 120-row tasks, 24-panel x blocks) exactly full, and one
 * past each. */
static void test_avx2_packed_blocks(bool available) {
    if (!available) return;
    path p = {"avx2 packed blocks", okv_matmul_avx2_packed, true, {0}};
    static const block_shape shapes[] = {
        {OKV_BF16, 12, 512, 256, true}, {OKV_F16, 13, 513, 257, false}, {OKV_BF16, 6, 256, 16, false},
        {OKV_BF16, 3, 9, 17, true},     {OKV_BF16, 8, 256, 240, false}, {OKV_F16, 97, 300, 24, true},
        {OKV_BF16, 4, 257, 25, false},
    };
    check_block_shapes(&p, shapes, sizeof shapes / sizeof *shapes);
}

/* The vdpbf16ps packed kernel's blocks (6-row x panels, 64-row W
 * micro-panels, 64-pair = 128-k chunks, 256-row tasks) exactly full and one
 * past each, and odd K (the last pair half zero in x and in W). */
static void test_dpbf16_packed_blocks(bool available) {
    if (!available) return;
    path p = {"avx512-bf16 packed blocks", okv_matmul_avx512_dpbf16, true, {[OKV_BF16] = 0x1p-8f}};
    static const block_shape shapes[] = {
        {OKV_BF16, 6, 128, 64, true},   {OKV_BF16, 7, 129, 65, false}, {OKV_BF16, 12, 255, 256, true},
        {OKV_BF16, 13, 257, 257, false}, {OKV_BF16, 2, 1, 3, true},     {OKV_BF16, 5, 3, 600, false},
        {OKV_BF16, 30, 4097, 129, true},
    };
    check_block_shapes(&p, shapes, sizeof shapes / sizeof *shapes);
}

/* The table okv_kernels_select hands out follows the CPU's features. */
static void test_selection(void) {
    const okv_cpu_caps *c = okv_cpu();
    bool avx2 = c->avx2 && c->fma && c->f16c, avx512 = avx2 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    const char *why = NULL;
    bool amx = okv_amx_usable(&why);
    CHECK(why != NULL && why[0] != 0);
    CHECK(!amx || (c->amx_tile && c->amx_bf16 && avx512));
    const okv_kernels *k512 = okv_kernels_select(OKV_ISA_AVX512), *kamx = okv_kernels_select(OKV_ISA_AMX);
    CHECKF(k512->isa == (avx512 ? OKV_ISA_AVX512 : avx2 ? OKV_ISA_AVX2 : OKV_ISA_PLAIN), "avx512 -> %s", k512->name);
    CHECKF(kamx->isa == (amx ? OKV_ISA_AMX : k512->isa), "amx -> %s", kamx->name);
    if (!getenv("OKV_KERNELS")) CHECK(okv_kernels_select(OKV_ISA_AUTO) == kamx);
    for (int d = 0; d < 3; d++) {
        CHECK(okv_kernels_select(OKV_ISA_PLAIN)->matmul_rounding[d] == 0);
        CHECK(okv_kernels_select(OKV_ISA_AVX2)->matmul_rounding[d] == 0);
    }
    CHECK(kamx->matmul_rounding[OKV_F32] == 0 && k512->matmul_rounding[OKV_F32] == 0); /* fp32 stays exact */
    printf("cpu: %s\namx: %s\navx512 table: %s, amx table: %s\n", okv_cpu_features(), why, k512->name, kamx->name);
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dull;
    const okv_cpu_caps *c = okv_cpu();
    bool avx512 = c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    test_selection();
    path paths[] = {
        {"avx2", okv_matmul_avx2, c->avx2 && c->fma && c->f16c, {0}},
        {"avx2 packed (f32 FMA, x and W packed)", okv_matmul_avx2_packed, c->avx2 && c->fma && c->f16c, {0}},
        {"avx2 table (packed from T = 48)", okv_matmul_avx2_gemm, c->avx2 && c->fma && c->f16c, {0}},
        {"avx512 (f32 FMA)", okv_matmul_avx512, avx512, {0}},
        {"avx512-bf16 (vdpbf16ps)", okv_matmul_avx512_bf16, avx512 && c->avx512bf16, {[OKV_BF16] = 0x1p-8f}},
        {"avx512 packed (f32 FMA, x and W packed)", okv_matmul_avx512_gemm, avx512, {0}},
        {"avx512-bf16 packed (vdpbf16ps, x and W packed)", okv_matmul_avx512_dpbf16, avx512 && c->avx512bf16,
         {[OKV_BF16] = 0x1p-8f}},
        {"avx512-vdpbf16 table", okv_matmul_avx512_vdp_gemm, avx512 && c->avx512bf16, {[OKV_BF16] = 0x1p-8f}},
        {"amx-bf16 (tiles)", okv_matmul_amx, avx512 && okv_amx_usable(NULL),
         {[OKV_BF16] = 0x1p-8f, [OKV_F16] = 0x1p-7f}},
    };
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) test_path(&paths[i]);
    test_avx2_packed_blocks(c->avx2 && c->fma && c->f16c);
    test_dpbf16_packed_blocks(avx512 && c->avx512bf16);
    /* the tables' stated rounding matches what their matmul does */
    const okv_kernels *kamx = okv_kernels_select(OKV_ISA_AMX);
    if (kamx->isa == OKV_ISA_AMX)
        for (int d = 0; d < 3; d++) CHECK(kamx->matmul_rounding[d] == paths[8].rounding[d]);
    return okv_test_finish();
}
