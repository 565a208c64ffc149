/* matmul/dot_avx2.c — AVX2 + FMA + F16C versions of the table kernels
 * (the row-wise ops' are in ops/ops_simd.c).
 *
 * Every function here carries __attribute__((target(...))) instead of the
 * file being built with -mavx2, so the library still runs on any x86-64 and
 * okv_kernels_select only hands these out when the CPU has the features.
 *
 * Matmul y = x @ W^T is a set of dot products along K between rows of x and
 * rows of W. The micro-kernel keeps an rt x nt tile of 8-lane accumulators
 * in registers (rt rows of x, nt rows of W) and walks K once: each W vector
 * is converted (f16/bf16 -> f32) once and used rt times, each x vector nt
 * times. Prefill uses 4x3 tiles (12 accumulators + 3 W + 1 x = 16 ymm) over
 * K chunks that keep the x tile in L1; threads split N into L2-sized blocks
 * (okv_matmul_block_rows). Decode (T = 1) is a GEMV that must simply stream
 * W at full bandwidth. Measured on Zen 4 (bench_kernels decode):
 *   - one W row at a time (a single sequential stream) is fastest while x
 *     fits in L1 with room to spare (K <= 4096 f32); beyond, re-reading x
 *     from L2 for every row costs more L1 fill bandwidth than W itself (a
 *     2048x8192 bf16 GEMV on one core: 12 GB/s vs 34 GB/s without x), so
 *     1x8 tiles load each x vector once per 8 rows (24 GB/s; 1x4: 21);
 *   - each thread streams one contiguous, equal range of rows (bytes): on
 *     2 threads that reaches the read-bandwidth probe where many interleaved
 *     L2-sized blocks stayed ~20% below it. Ranges are claimed in 128 KiB
 *     chunks and a thread that finishes early helps with the others' (see
 *     gemv_job), so an unlucky thread does not leave the other waiting.
 * Software prefetch and splitting K (x halves in L1, W read with gaps) were
 * measured and were slower. There is no AVX-512 path: Zen 4 executes 512-bit
 * FMAs as two 256-bit halves (same measured peak, see bench_kernels) and
 * the GEMV is bound by memory, not instructions. */
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "okv_kernels_internal.h"
#include "simd/avx2.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))


INLINE_TGT float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sum of the 8 lanes of a, b, c, d as 4 floats [sa, sb, sc, sd]. */
INLINE_TGT __m128 hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* ---- matmul ------------------------------------------------------------------ */

enum { MM_K_CHUNK = 1024,     /* 4 rows x 1024 f32 = 16 KiB of x: half of L1 */
       MM_ROW_MAX_K = 4096,    /* GEMV row by row while x (16 KiB) fits in L1 */
       MM_GEMV_TILE = 8 };     /* GEMV rows sharing one x load beyond that */

/* y[t0..t0+rt, n0..n0+nt) (+)= x rows . W rows over k in [k0, k1). The first
 * chunk (k0 == 0) stores sum + bias, later chunks add to it. With constant
 * dt/rt/nt after inlining, the loops unroll and acc lives in registers. */
INLINE_TGT void mm_tile(const matmul_job *j, int t0, int n0, int k0, int k1, okv_dtype dt, int rt, int nt) {
    const int K = j->K;
    const size_t esz = dt == OKV_F32 ? 4 : 2;
    const float *xr[4];
    const char *wr[4];
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) xr[r] = j->x + (size_t)(t0 + (r < rt ? r : 0)) * K;
#pragma GCC unroll 4
    for (int n = 0; n < 4; n++) wr[n] = (const char *)j->W + (size_t)(n0 + (n < nt ? n : 0)) * K * esz;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int n = 0; n < 4; n++) acc[r][n] = _mm256_setzero_ps();
    int k = k0;
    for (; k + 8 <= k1; k += 8) {
        __m256 w[4];
#pragma GCC unroll 4
        for (int n = 0; n < 4; n++)
            if (n < nt) w[n] = okv_load8_f32(wr[n], dt, (size_t)k);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= rt) continue;
            __m256 xv = _mm256_loadu_ps(xr[r] + k);
#pragma GCC unroll 4
            for (int n = 0; n < 4; n++)
                if (n < nt) acc[r][n] = _mm256_fmadd_ps(xv, w[n], acc[r][n]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r >= rt) continue;
#pragma GCC unroll 4
        for (int n = 0; n < 4; n++) {
            if (n >= nt) continue;
            float s = hsum8(acc[r][n]);
            for (int kk = k; kk < k1; kk++) s += xr[r][kk] * okv_k_load(wr[n], dt, (size_t)kk);
            float *out = &j->y[(size_t)(t0 + r) * j->N + n0 + n];
            if (k0 == 0) *out = s + (j->bias ? j->bias[n0 + n] : 0.0f);
            else *out += s;
        }
    }
}

/* One output: x row t . W row n over [k0, k1), 4 independent chains so the
 * W row streams sequentially at full speed. */
INLINE_TGT void mm_row(const matmul_job *j, int t, int n, int k0, int k1, okv_dtype dt) {
    const size_t esz = dt == OKV_F32 ? 4 : 2;
    const float *xr = j->x + (size_t)t * j->K;
    const char *wr = (const char *)j->W + (size_t)n * j->K * esz;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int k = k0;
    for (; k + 32 <= k1; k += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), okv_load8_f32(wr, dt, (size_t)k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k + 8), okv_load8_f32(wr, dt, (size_t)k + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k + 16), okv_load8_f32(wr, dt, (size_t)k + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k + 24), okv_load8_f32(wr, dt, (size_t)k + 24), a3);
    }
    for (; k + 8 <= k1; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + k), okv_load8_f32(wr, dt, (size_t)k), a0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; k < k1; k++) s += xr[k] * okv_k_load(wr, dt, (size_t)k);
    float *out = &j->y[(size_t)t * j->N + n];
    if (k0 == 0) *out = s + (j->bias ? j->bias[n] : 0.0f);
    else *out += s;
}

/* GEMV tile: y[n0..n0+8) = x . W rows n0..n0+7 (T = 1, whole K), each x
 * vector loaded once for 8 rows, one accumulator per row (8 + 1 x + 1 W =
 * 10 ymm). */
INLINE_TGT void mm_rows8(const matmul_job *j, int n0, okv_dtype dt) {
    const size_t esz = dt == OKV_F32 ? 4 : 2, K = (size_t)j->K;
    const char *w = (const char *)j->W + (size_t)n0 * K * esz;
    __m256 acc[MM_GEMV_TILE];
#pragma GCC unroll 8
    for (int r = 0; r < MM_GEMV_TILE; r++) acc[r] = _mm256_setzero_ps();
    size_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv = _mm256_loadu_ps(j->x + k);
#pragma GCC unroll 8
        for (int r = 0; r < MM_GEMV_TILE; r++) acc[r] = _mm256_fmadd_ps(xv, okv_load8_f32(w + r * K * esz, dt, k), acc[r]);
    }
    float s[MM_GEMV_TILE];
    _mm_storeu_ps(s, hsum8x4(acc[0], acc[1], acc[2], acc[3]));
    _mm_storeu_ps(s + 4, hsum8x4(acc[4], acc[5], acc[6], acc[7]));
    for (int r = 0; r < MM_GEMV_TILE; r++) {
        for (size_t kk = k; kk < K; kk++) s[r] += j->x[kk] * okv_k_load(w + r * K * esz, dt, kk);
        j->y[n0 + r] = s[r] + (j->bias ? j->bias[n0 + r] : 0.0f);
    }
}

/* Decode GEMV (T = 1) over rows [n0, n1): W streams once, in order. Tiles
 * start at multiples of 8 (n0 is one), so which rows are tiled depends only
 * on N. */
INLINE_TGT void mm_gemv(const matmul_job *j, int n0, int n1, okv_dtype dt) {
    int n = n0;
    if (j->K > MM_ROW_MAX_K)
        for (; n + MM_GEMV_TILE <= n1; n += MM_GEMV_TILE) mm_rows8(j, n, dt);
    for (; n < n1; n++) mm_row(j, 0, n, 0, j->K, dt);
}

/* Output features [n0, n1) for all T rows, in tiles. For prefill, K is cut
 * into chunks so the 4 x rows of a tile stay in L1 while the W block's
 * chunk (in L2) is swept; a decode GEMV streams whole rows. */
INLINE_TGT void mm_block(const matmul_job *j, int n0, int n1, okv_dtype dt) {
    int kc = j->T >= 4 ? MM_K_CHUNK : j->K;
    for (int k0 = 0; k0 < j->K; k0 += kc) {
        int k1 = j->K - k0 <= kc ? j->K : k0 + kc;
        int t = 0;
        for (; t + 4 <= j->T; t += 4) {
            int n = n0;
            for (; n + 3 <= n1; n += 3) mm_tile(j, t, n, k0, k1, dt, 4, 3);
            if (n1 - n == 2) mm_tile(j, t, n, k0, k1, dt, 4, 2);
            else if (n1 - n == 1) mm_tile(j, t, n, k0, k1, dt, 4, 1);
        }
        for (; t < j->T; t++) {
            if (j->K <= MM_ROW_MAX_K) { /* x row stays in L1: stream W rows one by one */
                for (int n = n0; n < n1; n++) mm_row(j, t, n, k0, k1, dt);
                continue;
            }
            int n = n0;
            for (; n + 4 <= n1; n += 4) mm_tile(j, t, n, k0, k1, dt, 1, 4);
            if (n1 - n == 3) mm_tile(j, t, n, k0, k1, dt, 1, 3);
            else if (n1 - n == 2) mm_tile(j, t, n, k0, k1, dt, 1, 2);
            else if (n1 - n == 1) mm_tile(j, t, n, k0, k1, dt, 1, 1);
        }
    }
}

static TGT void mm_block_f32(const matmul_job *j, int n0, int n1) { mm_block(j, n0, n1, OKV_F32); }
static TGT void mm_block_f16(const matmul_job *j, int n0, int n1) { mm_block(j, n0, n1, OKV_F16); }
static TGT void mm_block_bf16(const matmul_job *j, int n0, int n1) { mm_block(j, n0, n1, OKV_BF16); }
static TGT void mm_gemv_f32(const matmul_job *j, int n0, int n1) { mm_gemv(j, n0, n1, OKV_F32); }
static TGT void mm_gemv_f16(const matmul_job *j, int n0, int n1) { mm_gemv(j, n0, n1, OKV_F16); }
static TGT void mm_gemv_bf16(const matmul_job *j, int n0, int n1) { mm_gemv(j, n0, n1, OKV_BF16); }

static void matmul_avx2_task(void *ctx, int task, int thread) {
    (void)thread;
    const matmul_job *j = ctx;
    int n0 = task * j->block_rows, n1 = n0 + j->block_rows;
    if (n1 > j->N) n1 = j->N;
    switch (j->wdt) {
    case OKV_F32: mm_block_f32(j, n0, n1); break;
    case OKV_F16: mm_block_f16(j, n0, n1); break;
    case OKV_BF16: mm_block_bf16(j, n0, n1); break;
    }
}

/* ---- decode GEMV work split ----------------------------------------------------- */

enum { GEMV_MAX_RANGES = 64,          /* more threads than this: fewer, larger ranges */
       GEMV_CHUNK_BYTES = 128 * 1024 }; /* of W per claim: ~4 us at 30 GB/s */

/* A counter alone on its cache line, so two owners claiming chunks of their
 * own ranges never share a line. */
typedef struct gemv_counter {
    _Alignas(64) atomic_int next;
} gemv_counter;

/* N is cut into one contiguous range per thread; a range is taken chunk by
 * chunk from its counter. A task drains its own range first (so each thread
 * streams one sequential region), then helps drain the others: whoever
 * finishes early takes the next chunks of a slower range, so the threads
 * end within a chunk of each other (with a fixed split a sleeping or slowed
 * thread made the other wait, and wake, for up to half a GEMV). Range and
 * chunk starts are multiples of the tile height, so the tiling (and every
 * output's bits) depend only on N. */
typedef struct gemv_job {
    matmul_job mm;
    int n_ranges, range_rows, chunk_rows;
    gemv_counter ranges[GEMV_MAX_RANGES];
} gemv_job;

static void gemv_chunk(const matmul_job *j, int n0, int n1) {
    switch (j->wdt) {
    case OKV_F32: mm_gemv_f32(j, n0, n1); break;
    case OKV_F16: mm_gemv_f16(j, n0, n1); break;
    case OKV_BF16: mm_gemv_bf16(j, n0, n1); break;
    }
}

static void gemv_task(void *ctx, int task, int thread) {
    (void)thread;
    gemv_job *g = ctx;
    for (int i = 0; i < g->n_ranges; i++) {
        int r = (task + i) % g->n_ranges; /* own range first, then the others */
        int r0 = r * g->range_rows, r1 = r0 + g->range_rows < g->mm.N ? r0 + g->range_rows : g->mm.N;
        for (;;) {
            int c = atomic_fetch_add_explicit(&g->ranges[r].next, 1, memory_order_relaxed);
            int n0 = r0 + c * g->chunk_rows;
            if (n0 >= r1) break;
            gemv_chunk(&g->mm, n0, n0 + g->chunk_rows < r1 ? n0 + g->chunk_rows : r1);
        }
    }
}

/* Rows rounded up to a whole number of GEMV tiles. */
static int round_to_tile(int rows) { return (rows + MM_GEMV_TILE - 1) / MM_GEMV_TILE * MM_GEMV_TILE; }

static void gemv_run(okv_threadpool *tp, const matmul_job *j) {
    gemv_job g;
    g.mm = *j;
    size_t row_bytes = (size_t)j->K * (j->wdt == OKV_F32 ? 4 : 2);
    int chunk = (int)(GEMV_CHUNK_BYTES / (row_bytes ? row_bytes : 1));
    g.chunk_rows = round_to_tile(chunk > 0 ? chunk : 1);
    int n_ranges = okv_threadpool_size(tp);
    if (n_ranges > GEMV_MAX_RANGES) n_ranges = GEMV_MAX_RANGES;
    g.range_rows = round_to_tile((j->N + n_ranges - 1) / n_ranges);
    g.n_ranges = (j->N + g.range_rows - 1) / g.range_rows;
    for (int r = 0; r < g.n_ranges; r++) atomic_init(&g.ranges[r].next, 0);
    okv_threadpool_run(tp, g.n_ranges, gemv_task, &g);
}

void okv_matmul_avx2(okv_threadpool *tp, float *y, const float *x, int T, int K,
                     const void *W, okv_dtype wdt, int N, const float *bias) {
    if (T <= 0 || N <= 0) return;
    matmul_job j = {y, x, T, K, N, W, wdt, bias, 0, NULL};
    if (T == 1) {
        gemv_run(tp, &j);
        return;
    }
    j.block_rows = okv_matmul_block_rows(N, K, wdt, okv_threadpool_size(tp), 12);
    okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, matmul_avx2_task, &j);
}

