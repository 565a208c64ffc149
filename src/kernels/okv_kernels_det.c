/* okv_kernels_det.c — the batch-invariant table (okv_runner_options
 * .deterministic): every output of a matmul is computed the same way
 * whatever T is, so a row's result does not depend on which other rows
 * share the step or on the step's size.
 *
 * f32/f16/bf16 weights: y[t, n] = hsum8(acc) + the K % 8 tail (fmaf, in
 * order) + bias, where acc is ONE 8-lane FMA chain along K (x in f32, W
 * converted exactly to f32). Register tiles (4 x rows by 3 W rows, or 1 x
 * row by 8 W rows for the rows left over and for decode) only decide which
 * chains run side by side, never how one chain sums; threads split N only
 * (never K). Quantized weights: okv_matmul_q_best (VNNI/AVX2 integer
 * dots, GEMV and GEMM bit-equal per output), never the AMX-INT8 tiles.
 * Attention: the runtime takes the reference kernel (one row at a time)
 * when deterministic. Without AVX2 the plain matmul (one dot per output)
 * is already invariant.
 *
 * Cost: measured in README "Serving" (bench_model / bench_batch with and
 * without --deterministic). */
#include <immintrin.h>
#include <math.h>

#include "okv_kernels_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

INLINE_TGT __m256 det_load8(const void *p, okv_dtype dt, size_t i) {
    if (dt == OKV_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (dt == OKV_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Fixed lane order: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two. */
INLINE_TGT float det_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* y[t0..t0+RT, n0..n0+NT): one FMA chain per output. */
INLINE_TGT void det_tile(const matmul_job *j, int t0, int n0, okv_dtype dt, int RT, int NT) {
    const int K = j->K, K8 = K / 8 * 8;
    const size_t esz = dt == OKV_F32 ? 4 : 2;
    __m256 acc[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 8
        for (int n = 0; n < NT; n++) acc[r][n] = _mm256_setzero_ps();
    for (int k = 0; k < K8; k += 8) {
        __m256 w[8];
#pragma GCC unroll 8
        for (int n = 0; n < NT; n++) w[n] = det_load8((const char *)j->W + (size_t)(n0 + n) * K * esz, dt, (size_t)k);
#pragma GCC unroll 4
        for (int r = 0; r < RT; r++) {
            __m256 x = _mm256_loadu_ps(j->x + (size_t)(t0 + r) * K + k);
#pragma GCC unroll 8
            for (int n = 0; n < NT; n++) acc[r][n] = _mm256_fmadd_ps(x, w[n], acc[r][n]);
        }
    }
    for (int r = 0; r < RT; r++)
        for (int n = 0; n < NT; n++) {
            float s = det_hsum8(acc[r][n]);
            const void *wr = (const char *)j->W + (size_t)(n0 + n) * K * esz;
            const float *xr = j->x + (size_t)(t0 + r) * K;
            for (int k = K8; k < K; k++) s = fmaf(xr[k], okv_k_load(wr, dt, (size_t)k), s);
            if (j->bias) s += j->bias[n0 + n];
            j->y[(size_t)(t0 + r) * j->N + n0 + n] = s;
        }
}

INLINE_TGT void det_block(const matmul_job *j, int n0, int n1, okv_dtype dt) {
    int t = 0;
    for (; t + 4 <= j->T; t += 4) {
        int n = n0;
        for (; n + 3 <= n1; n += 3) det_tile(j, t, n, dt, 4, 3);
        for (; n < n1; n++) det_tile(j, t, n, dt, 4, 1);
    }
    for (; t < j->T; t++) {
        int n = n0;
        for (; n + 8 <= n1; n += 8) det_tile(j, t, n, dt, 1, 8);
        for (; n < n1; n++) det_tile(j, t, n, dt, 1, 1);
    }
}

static TGT void det_block_f32(const matmul_job *j, int n0, int n1) { det_block(j, n0, n1, OKV_F32); }
static TGT void det_block_f16(const matmul_job *j, int n0, int n1) { det_block(j, n0, n1, OKV_F16); }
static TGT void det_block_bf16(const matmul_job *j, int n0, int n1) { det_block(j, n0, n1, OKV_BF16); }

static void det_task(void *ctx, int task, int thread) {
    (void)thread;
    const matmul_job *j = ctx;
    int n0 = task * j->block_rows, n1 = n0 + j->block_rows < j->N ? n0 + j->block_rows : j->N;
    switch (j->wdt) {
    case OKV_F32: det_block_f32(j, n0, n1); break;
    case OKV_F16: det_block_f16(j, n0, n1); break;
    case OKV_BF16: det_block_bf16(j, n0, n1); break;
    }
}

void okv_matmul_det(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt, int N,
                    const float *bias) {
    if (T <= 0 || N <= 0) return;
    matmul_job j = {y, x, T, K, N, W, wdt, bias, 0, NULL};
    j.block_rows = okv_matmul_block_rows(N, K, wdt, okv_threadpool_size(tp), 24);
    okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, det_task, &j);
}

/* The integer-dot GEMV and GEMM of okv_matmul_q_best give each output the
 * same bits (per-row activation quantization, exact integer dots, the same
 * per-group float order: test_deterministic checks it); only the AMX-INT8
 * path (T >= 16) is left out. */
void okv_matmul_q_det(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, const okv_qscheme *s,
                      int N, const float *bias) {
    okv_matmul_q_best(tp, y, x, T, K, W, s, N, bias);
}
