/* matmul/det.c — the batch-invariant matmuls (okv_runner_options
 * .deterministic): every output of a matmul is computed the same way
 * whatever T is, so a row's result does not depend on which other rows
 * share the step or on the step's size. Threads split N only (never K), and
 * register tiles only decide which chains run side by side, never how one
 * chain sums.
 *
 * bf16 weights, AMX-BF16 usable: the tiles for every T (okv_matmul_amx_tiles,
 * x rounded to bf16 as the default table rounds it); T = 1 gets the same
 * per-output tile sums with A tiles loaded straight from W (below).
 * f32 / f16 weights, or no AMX: y[t, n] = hsum16(acc) per K chunk of 1024
 * (the chunks' sums added in order, + bias), acc ONE 16-lane FMA chain
 * (x in f32, W converted exactly); 4 x rows by 6 W rows for T >= 4, 1 by 12
 * for the rest and decode. Without AVX-512: the same with 8 lanes and no K
 * chunks (det_tile). Without AVX2 the plain matmul (one dot per output).
 * Quantized weights: the integer model of qmatmul/int_plain.c (VNNI GEMV/GEMM,
 * AMX-INT8 tiles from T >= 16: all bit-equal), never the dequant-to-bf16
 * prefill of the default table.
 * Attention: attend/det.c.
 *
 * Cost: README "Serving" (bench_batch --deterministic both: default and
 * deterministic side by side in one process). */
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

/* ---- AVX-512: the same rule on 16 lanes ------------------------------------------ */

#define TGT5 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define INLINE5 static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

enum { KC5 = 1024 }; /* K chunk (a function of K only): 4 x rows of it stay in L1 */

/* 16 elements of a row in dt from element k as f32; lanes off m are 0. */
INLINE5 __m512 det5_load(const void *p, okv_dtype dt, size_t k, __mmask16 m) {
    if (dt == OKV_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + k);
    if (dt == OKV_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Fixed lane order: (i + 8), then det_hsum8. */
INLINE5 float det5_hsum16(__m512 v) {
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* y[t0..t0+RT, n0..n0+NT) over K chunk [k0, k1): one 16-lane FMA chain per
 * output (the last vector of K masked), reduced by det5_hsum16; the first
 * chunk writes sum + bias, later chunks add their sum. */
INLINE5 void det5_tile(const matmul_job *j, int t0, int n0, okv_dtype dt, int k0, int k1, int RT, int NT) {
    const size_t esz = dt == OKV_F32 ? 4 : 2, K = (size_t)j->K;
    __m512 acc[4][12];
#pragma GCC unroll 4
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 12
        for (int n = 0; n < NT; n++) acc[r][n] = _mm512_setzero_ps();
    for (int k = k0; k < k1; k += 16) {
        __mmask16 m = k1 - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k1 - k)) - 1);
        __m512 w[12];
#pragma GCC unroll 12
        for (int n = 0; n < NT; n++) w[n] = det5_load((const char *)j->W + (size_t)(n0 + n) * K * esz, dt, (size_t)k, m);
#pragma GCC unroll 4
        for (int r = 0; r < RT; r++) {
            __m512 x = _mm512_maskz_loadu_ps(m, j->x + (size_t)(t0 + r) * K + k);
#pragma GCC unroll 12
            for (int n = 0; n < NT; n++) acc[r][n] = _mm512_fmadd_ps(x, w[n], acc[r][n]);
        }
    }
    for (int r = 0; r < RT; r++)
        for (int n = 0; n < NT; n++) {
            float sum = det5_hsum16(acc[r][n]), *out = &j->y[(size_t)(t0 + r) * j->N + n0 + n];
            if (k0 == 0) *out = sum + (j->bias ? j->bias[n0 + n] : 0.0f);
            else *out += sum;
        }
}

/* W rows [n0, n1) for all T rows, chunk by chunk: 4 x rows by 6 W rows
 * (24 + 6 + 1 zmm) for T >= 4, 1 row by 12 W rows for the rest and decode. */
INLINE5 void det5_block(const matmul_job *j, int n0, int n1, okv_dtype dt) {
    const int T4 = j->T / 4 * 4;
    for (int k0 = 0; k0 < j->K; k0 += KC5) { /* chunk outside: 4 x rows of a chunk in L1 */
        int k1 = k0 + KC5 < j->K ? k0 + KC5 : j->K;
        for (int t = 0; t < T4; t += 4) {
            int n = n0;
            for (; n + 6 <= n1; n += 6) det5_tile(j, t, n, dt, k0, k1, 4, 6);
            for (; n < n1; n++) det5_tile(j, t, n, dt, k0, k1, 4, 1);
        }
    }
    for (int t = T4; t < j->T; t++) { /* chunks inside: each W row streamed in order */
        int n = n0;
        for (; n + 12 <= n1; n += 12)
            for (int k0 = 0; k0 < j->K; k0 += KC5) det5_tile(j, t, n, dt, k0, k0 + KC5 < j->K ? k0 + KC5 : j->K, 1, 12);
        for (; n < n1; n++)
            for (int k0 = 0; k0 < j->K; k0 += KC5) det5_tile(j, t, n, dt, k0, k0 + KC5 < j->K ? k0 + KC5 : j->K, 1, 1);
    }
}

static TGT5 void det5_block_f32(const matmul_job *j, int n0, int n1) { det5_block(j, n0, n1, OKV_F32); }
static TGT5 void det5_block_f16(const matmul_job *j, int n0, int n1) { det5_block(j, n0, n1, OKV_F16); }
static TGT5 void det5_block_bf16(const matmul_job *j, int n0, int n1) { det5_block(j, n0, n1, OKV_BF16); }

static void det5_task(void *ctx, int task, int thread) {
    (void)thread;
    const matmul_job *j = ctx;
    int n0 = task * j->block_rows, n1 = n0 + j->block_rows < j->N ? n0 + j->block_rows : j->N;
    switch (j->wdt) {
    case OKV_F32: det5_block_f32(j, n0, n1); break;
    case OKV_F16: det5_block_f16(j, n0, n1); break;
    case OKV_BF16: det5_block_bf16(j, n0, n1); break;
    }
}

/* ---- AMX-BF16 decode: the tiles' sums without the tiles' copy of W ---------------- */

/* bf16 weights take okv_matmul_amx_tiles for every T > 1. Its output
 * (n, t) is C[n][t] = tdpbf16ps over the K tiles in order (16 W rows x 32 k
 * A tiles, x rounded to bf16 in B tiles), + bias; every element of a C tile
 * depends only on its own W row and x row. So T = 1 gets the same bits from
 * A tiles loaded straight from W (stride K * 2 bytes: no per-call copy of
 * W, which made the tiles 0.62x the default GEMV at decode on
 * Llama-3.2-1B) and a B tile holding x in its column 0. Needs K % 32 == 0
 * and N >= 16 (the last group of 16 rows is shifted to end at N and only
 * its new rows written); anything else takes okv_matmul_amx_tiles. */
#define TGTA __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))
#define DTILE_LOAD(t, p, stride) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(stride)) : "memory")
#define DTILE_STORE(t, p) __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)64) : "memory")
#define DTILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define DTILE_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

static const okv_amx_tilecfg det_tilecfg __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0}};

typedef struct det_gemv_job {
    float *y;
    const uint16_t *W;   /* [N][K] bf16 */
    const uint32_t *xb;  /* [K / 32] B tiles [16 pairs][16 columns], x in column 0 */
    int K, N, rows;      /* rows: W rows per task (a multiple of 32) */
    const float *bias;
} det_gemv_job;

/* B tiles of x: pair kp of K tile kb (bf16, rounded as the tiles round it)
 * at row kp, column 0; every other column 0. */
static TGTA void det_gemv_pack_x(uint32_t *xb, const float *x, int K) {
    for (int kb = 0; kb < K / 32; kb++) {
        __m512 lo = _mm512_loadu_ps(x + kb * 32), hi = _mm512_loadu_ps(x + kb * 32 + 16);
        __m512i pairs = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        uint32_t u[16], *tile = xb + (size_t)kb * 256;
        _mm512_storeu_si512(u, pairs);
        memset(tile, 0, 1024);
        for (int kp = 0; kp < 16; kp++) tile[kp * 16] = u[kp];
    }
}

static TGTA void det_gemv_task(void *ctx, int task, int thread) {
    (void)thread;
    const det_gemv_job *j = ctx;
    const int K = j->K, nkb = K / 32;
    const long stride = (long)K * 2;
    int n0 = task * j->rows, n1 = n0 + j->rows < j->N ? n0 + j->rows : j->N;
    float c[2][256] __attribute__((aligned(64)));
    __asm__ volatile("ldtilecfg %0" ::"m"(det_tilecfg));
    for (int g = n0; g < n1; g += 32) {
        int s[2] = {g < j->N - 16 ? g : j->N - 16, g + 16 < j->N - 16 ? g + 16 : j->N - 16};
        const uint16_t *w0 = j->W + (size_t)s[0] * K, *w1 = j->W + (size_t)s[1] * K;
        DTILE_ZERO(0);
        DTILE_ZERO(1);
        for (int kb = 0; kb < nkb; kb++) {
            DTILE_LOAD(6, j->xb + (size_t)kb * 256, 64);
            DTILE_LOAD(4, w0 + (size_t)kb * 32, stride);
            DTILE_DP(0, 4, 6);
            DTILE_LOAD(5, w1 + (size_t)kb * 32, stride);
            DTILE_DP(1, 5, 6);
        }
        DTILE_STORE(0, c[0]);
        DTILE_STORE(1, c[1]);
        int end = g + 32 < n1 ? g + 32 : n1;
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 16; i++) {
                int n = s[h] + i;
                if (n >= g && n < end) j->y[n] = c[h][i * 16] + (j->bias ? j->bias[n] : 0.0f);
            }
    }
    __asm__ volatile("tilerelease" ::);
}

void okv_mm_det_amx_gemv(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                         int N, const float *bias) {
    (void)wdt;
    okv_kscratch ks; /* the planned workspace (okv_matmul_amx_scratch covers T = 1) */
    uint32_t *xb = okv_kscratch_get(&ks, tp, (size_t)K / 32 * 1024);
    if (!xb) {
        okv_qmm_fail(y, T, N);
        return;
    }
    det_gemv_pack_x(xb, x, K);
    int nt = okv_threadpool_size(tp);
    det_gemv_job j = {y, W, xb, K, N, ((N + nt - 1) / nt + 31) / 32 * 32, bias};
    okv_threadpool_run(tp, (N + j.rows - 1) / j.rows, det_gemv_task, &j);
    okv_kscratch_release(&ks);
}

void okv_mm_det_avx512(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                       int N, const float *bias) {
    if (T <= 0 || N <= 0) return;
    matmul_job j = {y, x, T, K, N, W, wdt, bias, 0, NULL};
    int nt = okv_threadpool_size(tp);
    if (T < 4) /* GEMV-like: one contiguous range of W per thread streams best (matmul/dot_avx2.c) */
        j.block_rows = ((N + nt - 1) / nt + 11) / 12 * 12;
    else
        j.block_rows = okv_matmul_block_rows(N, K, wdt, nt, 12);
    okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, det5_task, &j);
}

/* The integer-dot GEMV and GEMM of okv_matmul_q_best and the AMX-INT8
 * tiles (okv_matmul_q_amx_tiles) all compute the plain integer model of
 * qmatmul/int_plain.c bit for bit (per-row activation quantization, exact integer
 * dots, the same per-group lanes and 16 -> 1 float order), so any T may use
 * any of them: T >= 16 takes the tiles. Never the dequant-to-bf16 AMX path
 * the default table uses for prefill (bf16 products: not the GEMV's bits).
 * Both activation planes for every T (okv_qmm_run's invariant): the default
 * table's 4-bit decode GEMV has one, its prompt steps two, which would make
 * a row's bits depend on the batch; a 4-bit GEMV here is a 1-row GEMM. */
void okv_qmm_det_int(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, const okv_qscheme *s,
                     int N, const float *bias) {
    okv_qmm_run(tp, okv_qmm_ops_best(s->bits, s->asym), y, x, T, K, W, s, N, bias, true);
}
