/* matmul/dot_avx512.c — prefill matmul (T > 1) with 512-bit vectors.
 *
 * y[T,N] = x[T,K] @ W[N,K]^T as dot products along K, like the AVX2 path,
 * but 16 f32 lanes (or 32 bf16 pairs) per instruction. The micro-kernel holds
 * a 4 x 6 tile of accumulators (4 rows of x, 6 rows of W: 24 + 6 W + 1 x =
 * 31 zmm) and walks a K chunk once; each W vector is loaded (and converted)
 * once for 4 rows, each x vector once for 6. K chunks keep the 4 x rows in
 * L1 (16 KiB), threads take L2-sized blocks of N rows (okv_matmul_block_rows)
 * and write disjoint outputs. Edge tiles (T % 4, N % 6) run the full tile
 * with duplicated row pointers and store only their valid part, and every
 * accumulator sums the same K sequence wherever its output sits in a tile,
 * so results depend only on (T, K, N), never on the thread count.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (matmul/dot_avx512.c). */
#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define TGT_BF __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define INLINE_BF \
    static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

enum { TR = 4,            /* x rows per tile */
       TN = 6,            /* W rows per tile */
       KC_F32 = 1024,     /* K chunk, f32 x: 4 rows x 4 KiB = 16 KiB in L1 */
       KC_BF16 = 2048 };  /* K chunk, bf16 x: 4 rows x 4 KiB */

/* 16 elements of a W row in dt from element k, as f32; lanes off the mask
 * are 0 (and not read). */
INLINE_TGT __m512 load16(const void *p, okv_dtype dt, size_t k, __mmask16 m) {
    if (dt == OKV_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + k);
    if (dt == OKV_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Reduces the 24 accumulators (constant indices, so they stay in registers
 * during the K loop) and stores the tile's valid rt x nt sums: the first
 * chunk (k0 == 0) writes sum + bias, later chunks add. */
INLINE_TGT void store_tile(const matmul_job *j, int t0, int rt, int n0, int nt, int k0, __m512 acc[TR][TN]) {
    float s[TR][TN];
#pragma GCC unroll 4
    for (int r = 0; r < TR; r++)
#pragma GCC unroll 6
        for (int n = 0; n < TN; n++) s[r][n] = _mm512_reduce_add_ps(acc[r][n]);
    for (int r = 0; r < rt; r++)
        for (int n = 0; n < nt; n++) {
            float *out = &j->y[(size_t)(t0 + r) * j->N + n0 + n];
            if (k0 == 0) *out = s[r][n] + (j->bias ? j->bias[n0 + n] : 0.0f);
            else *out += s[r][n];
        }
}

/* f32 x: y[t0.., n0..] (+)= x rows . W rows over [k0, k1). */
INLINE_TGT void tile_f32x(const matmul_job *j, int t0, int rt, int n0, int nt, int k0, int k1, okv_dtype dt) {
    const size_t K = (size_t)j->K, esz = dt == OKV_F32 ? 4 : 2;
    const float *xr[TR];
    const char *wr[TN];
    __m512 acc[TR][TN];
#pragma GCC unroll 4
    for (int r = 0; r < TR; r++) xr[r] = j->x + (size_t)(t0 + (r < rt ? r : 0)) * K;
#pragma GCC unroll 6
    for (int n = 0; n < TN; n++) wr[n] = (const char *)j->W + (size_t)(n0 + (n < nt ? n : 0)) * K * esz;
#pragma GCC unroll 4
    for (int r = 0; r < TR; r++)
#pragma GCC unroll 6
        for (int n = 0; n < TN; n++) acc[r][n] = _mm512_setzero_ps();
    for (int k = k0; k < k1; k += 16) {
        __mmask16 m = k1 - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k1 - k)) - 1);
        __m512 w[TN];
#pragma GCC unroll 6
        for (int n = 0; n < TN; n++) w[n] = load16(wr[n], dt, (size_t)k, m);
#pragma GCC unroll 4
        for (int r = 0; r < TR; r++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, xr[r] + k);
#pragma GCC unroll 6
            for (int n = 0; n < TN; n++) acc[r][n] = _mm512_fmadd_ps(xv, w[n], acc[r][n]);
        }
    }
    store_tile(j, t0, rt, n0, nt, k0, acc);
}

/* Output features [n0, n1) for all T rows, f32 x. */
INLINE_TGT void block_f32x(const matmul_job *j, int n0, int n1, okv_dtype dt) {
    for (int k0 = 0; k0 < j->K; k0 += KC_F32) {
        int k1 = j->K - k0 <= KC_F32 ? j->K : k0 + KC_F32;
        for (int t = 0; t < j->T; t += TR) {
            int rt = j->T - t < TR ? j->T - t : TR;
            for (int n = n0; n < n1; n += TN) tile_f32x(j, t, rt, n, n1 - n < TN ? n1 - n : TN, k0, k1, dt);
        }
    }
}

static TGT void block_f32(const matmul_job *j, int n0, int n1) { block_f32x(j, n0, n1, OKV_F32); }
static TGT void block_f16(const matmul_job *j, int n0, int n1) { block_f32x(j, n0, n1, OKV_F16); }
static TGT void block_bf16(const matmul_job *j, int n0, int n1) { block_f32x(j, n0, n1, OKV_BF16); }

static void task_f32x(void *ctx, int task, int thread) {
    (void)thread;
    const matmul_job *j = ctx;
    int n0 = task * j->block_rows, n1 = n0 + j->block_rows < j->N ? n0 + j->block_rows : j->N;
    switch (j->wdt) {
    case OKV_F32: block_f32(j, n0, n1); break;
    case OKV_F16: block_f16(j, n0, n1); break;
    case OKV_BF16: block_bf16(j, n0, n1); break;
    }
}

void okv_mm_avx512_dot(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                       int N, const float *bias) {
    matmul_job j = {y, x, T, K, N, W, wdt, bias, 0, NULL};
    j.block_rows = okv_matmul_block_rows(N, K, wdt, okv_threadpool_size(tp), TN);
    okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, task_f32x, &j);
}

/* ---- bf16 x bf16 with vdpbf16ps ---------------------------------------------------- */

/* x rounded to bf16 (round to nearest even), rows Kp (K rounded up to 32)
 * elements apart with a zero tail, so x loads never need a mask. */
typedef struct bf16_job {
    matmul_job mm;
    uint16_t *xb;  /* [T, Kp] */
    int Kp;
} bf16_job;

enum { PACK_ROWS = 8 }; /* x rows per packing task */

static TGT_BF void pack_rows_bf16(const bf16_job *b, int t0, int t1) {
    const int K = b->mm.K;
    for (int t = t0; t < t1; t++) {
        const float *src = b->mm.x + (size_t)t * K;
        uint16_t *dst = b->xb + (size_t)t * b->Kp;
        for (int k = 0; k < b->Kp; k += 16) {
            __mmask16 m = K - k >= 16 ? (__mmask16)0xffff : K > k ? (__mmask16)((1u << (K - k)) - 1) : 0;
            __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + k));
            _mm256_storeu_si256((__m256i *)(dst + k), (__m256i)h);
        }
    }
}

static void pack_task(void *ctx, int task, int thread) {
    (void)thread;
    const bf16_job *b = ctx;
    int t0 = task * PACK_ROWS, t1 = t0 + PACK_ROWS < b->mm.T ? t0 + PACK_ROWS : b->mm.T;
    pack_rows_bf16(b, t0, t1);
}

INLINE_BF __m512bh as_bh(__m512i v) { return (__m512bh)v; }

INLINE_BF void tile_bf16(const bf16_job *b, int t0, int rt, int n0, int nt, int k0, int k1) {
    const matmul_job *j = &b->mm;
    const size_t K = (size_t)j->K;
    const uint16_t *xr[TR], *wr[TN];
    __m512 acc[TR][TN];
#pragma GCC unroll 4
    for (int r = 0; r < TR; r++) xr[r] = b->xb + (size_t)(t0 + (r < rt ? r : 0)) * b->Kp;
#pragma GCC unroll 6
    for (int n = 0; n < TN; n++) wr[n] = (const uint16_t *)j->W + (size_t)(n0 + (n < nt ? n : 0)) * K;
#pragma GCC unroll 4
    for (int r = 0; r < TR; r++)
#pragma GCC unroll 6
        for (int n = 0; n < TN; n++) acc[r][n] = _mm512_setzero_ps();
    for (int k = k0; k < k1; k += 32) {
        __mmask32 m = k1 - k >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (k1 - k)) - 1);
        __m512i w[TN];
#pragma GCC unroll 6
        for (int n = 0; n < TN; n++) w[n] = _mm512_maskz_loadu_epi16(m, wr[n] + k);
#pragma GCC unroll 4
        for (int r = 0; r < TR; r++) {
            __m512bh xv = as_bh(_mm512_loadu_si512(xr[r] + k));
#pragma GCC unroll 6
            for (int n = 0; n < TN; n++) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], xv, as_bh(w[n]));
        }
    }
    store_tile(j, t0, rt, n0, nt, k0, acc);
}

static TGT_BF void block_bf16_dp(const bf16_job *b, int n0, int n1) {
    const matmul_job *j = &b->mm;
    for (int k0 = 0; k0 < j->K; k0 += KC_BF16) {
        int k1 = j->K - k0 <= KC_BF16 ? j->K : k0 + KC_BF16;
        for (int t = 0; t < j->T; t += TR) {
            int rt = j->T - t < TR ? j->T - t : TR;
            for (int n = n0; n < n1; n += TN) tile_bf16(b, t, rt, n, n1 - n < TN ? n1 - n : TN, k0, k1);
        }
    }
}

static void task_bf16(void *ctx, int task, int thread) {
    (void)thread;
    const bf16_job *b = ctx;
    int n0 = task * b->mm.block_rows, n1 = n0 + b->mm.block_rows < b->mm.N ? n0 + b->mm.block_rows : b->mm.N;
    block_bf16_dp(b, n0, n1);
}

/* ---- decode GEMV, bf16 weights: vdpbf16ps with software prefetch ------------------ */

/* x rounded to bf16 once ([Kp], zero tail); each pass takes GEMV_RW W rows
 * against every x vector (loaded once per pass), one 64-byte load of each
 * row per vector, and prefetches the line GEMV_PF_BYTES further along the
 * row, or in the next pass's rows once that passes the row's end. */
enum { GEMV_RW = 4, GEMV_PF_BYTES = 2048, GEMV_CHUNK_BYTES = 128 * 1024, GEMV_MAX_RANGES = 64 };

typedef struct gemv_bf16_job {
    int rows_per_pass;  /* GEMV_RW (4 row streams, prefetched) or 1 (okv_matmul_gemv_bf16x_1row) */
    float *y;
    const uint16_t *W;  /* [N][K] */
    const uint16_t *xb; /* [Kp] */
    int K, N;
    const float *bias;
    int n_ranges, range_rows, chunk_rows;
    struct {
        _Alignas(64) atomic_int next;
    } ranges[GEMV_MAX_RANGES];
} gemv_bf16_job;

/* y[n0 + r] for r < RW: whole rows of W. */
INLINE_BF void gemv_bf16_pass(const gemv_bf16_job *j, int n0, int RW) {
    const size_t rb = (size_t)j->K * 2, full = rb / 64 * 64;
    const size_t dist = full < GEMV_PF_BYTES ? full : GEMV_PF_BYTES, wrap = (size_t)(RW - 1) * rb;
    const char *w[GEMV_RW];
    __m512 acc[GEMV_RW];
#pragma GCC unroll 4
    for (int r = 0; r < GEMV_RW; r++) {
        w[r] = (const char *)(j->W + (size_t)(n0 + (r < RW ? r : 0)) * j->K);
        acc[r] = _mm512_setzero_ps();
    }
    const char *x = (const char *)j->xb;
    size_t o = 0;
    for (int part = 0; part < 2; part++) { /* prefetch within the row, then into the next pass's rows */
        const size_t end = part == 0 ? full - dist : full, ahead = part == 0 ? dist : dist + wrap;
        for (; o < end; o += 64) {
            __m512bh xv = as_bh(_mm512_loadu_si512(x + o));
#pragma GCC unroll 4
            for (int r = 0; r < GEMV_RW; r++) {
                if (r >= RW) continue;
                if (RW > 1) _mm_prefetch(w[r] + o + ahead, _MM_HINT_T0);
                acc[r] = _mm512_dpbf16_ps(acc[r], xv, as_bh(_mm512_loadu_si512(w[r] + o)));
            }
        }
    }
    if (full < rb) { /* K % 32: the last elements, masked (x's tail is zero) */
        __mmask32 m = (__mmask32)((1u << ((rb - full) / 2)) - 1);
        __m512bh xv = as_bh(_mm512_loadu_si512(x + full));
#pragma GCC unroll 4
        for (int r = 0; r < GEMV_RW; r++)
            if (r < RW) acc[r] = _mm512_dpbf16_ps(acc[r], xv, as_bh(_mm512_maskz_loadu_epi16(m, w[r] + full)));
    }
#pragma GCC unroll 4
    for (int r = 0; r < GEMV_RW; r++)
        if (r < RW) j->y[n0 + r] = _mm512_reduce_add_ps(acc[r]) + (j->bias ? j->bias[n0 + r] : 0.0f);
}

static TGT_BF void gemv_bf16_rows(const gemv_bf16_job *j, int n0, int n1) {
    int n = n0;
    if (j->rows_per_pass == GEMV_RW)
        for (; n + GEMV_RW <= n1; n += GEMV_RW) gemv_bf16_pass(j, n, GEMV_RW);
    for (; n < n1; n++) gemv_bf16_pass(j, n, 1);
}

/* One contiguous range of rows per thread, claimed in chunks; a thread done
 * with its own range helps with the others (matmul/dot_avx2.c's split).
 * Every output is one row's dot product whatever thread computes it. */
static void gemv_bf16_task(void *ctx, int task, int thread) {
    (void)thread;
    gemv_bf16_job *g = ctx;
    for (int i = 0; i < g->n_ranges; i++) {
        int r = (task + i) % g->n_ranges;
        int r0 = r * g->range_rows, r1 = r0 + g->range_rows < g->N ? r0 + g->range_rows : g->N;
        for (;;) {
            int c = atomic_fetch_add_explicit(&g->ranges[r].next, 1, memory_order_relaxed);
            int n0 = r0 + c * g->chunk_rows;
            if (n0 >= r1) break;
            gemv_bf16_rows(g, n0, n0 + g->chunk_rows < r1 ? n0 + g->chunk_rows : r1);
        }
    }
}

static int round_up(int v, int a) { return (v + a - 1) / a * a; }

static void gemv_bf16_run(okv_threadpool *tp, float *y, const uint16_t *xb, int K, const void *W, int N,
                          const float *bias, int rows_per_pass) {
    gemv_bf16_job g;
    g.rows_per_pass = rows_per_pass;
    g.y = y;
    g.W = W;
    g.xb = xb;
    g.K = K;
    g.N = N;
    g.bias = bias;
    int chunk = (int)(GEMV_CHUNK_BYTES / ((size_t)K * 2));
    g.chunk_rows = round_up(chunk > 0 ? chunk : 1, GEMV_RW);
    int n_ranges = okv_threadpool_size(tp);
    if (n_ranges > GEMV_MAX_RANGES) n_ranges = GEMV_MAX_RANGES;
    g.range_rows = round_up((N + n_ranges - 1) / n_ranges, GEMV_RW);
    g.n_ranges = (N + g.range_rows - 1) / g.range_rows;
    for (int r = 0; r < g.n_ranges; r++) atomic_init(&g.ranges[r].next, 0);
    okv_threadpool_run(tp, g.n_ranges, gemv_bf16_task, &g);
}

/* x[n] rounded to bf16 (nearest even), kept as f32. */
static TGT_BF void round_to_bf16(float *dst, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; i++) dst[i] = okv_k_bf16(okv_f32_to_bf16(x[i]));
}

static void gemv_bf16x(okv_threadpool *tp, float *y, const float *x, int K, const void *W, okv_dtype wdt, int N,
                       const float *bias, int rows_per_pass) {
    if (K <= 0 || N <= 0) {
        okv_matmul_avx2(tp, y, x, 1, K, W, wdt, N, bias);
        return;
    }
    okv_kscratch ks;
    void *mem = okv_kscratch_get(&ks, tp, okv_matmul_avx512_scratch(1, K));
    if (!mem) {
        okv_matmul_avx2(tp, y, x, 1, K, W, wdt, N, bias); /* no memory: unrounded x, still correct */
        return;
    }
    if (wdt == OKV_BF16) {
        bf16_job b = {{NULL, x, 1, K, N, W, wdt, bias, 0, NULL}, mem, (K + 31) / 32 * 32};
        pack_rows_bf16(&b, 0, 1);
        gemv_bf16_run(tp, y, b.xb, K, W, N, bias, rows_per_pass);
    } else {
        round_to_bf16(mem, x, (size_t)K);
        okv_matmul_avx2(tp, y, mem, 1, K, W, wdt, N, bias);
    }
    okv_kscratch_release(&ks);
}

void okv_matmul_gemv_bf16x(okv_threadpool *tp, float *y, const float *x, int K, const void *W, okv_dtype wdt, int N,
                           const float *bias) {
    gemv_bf16x(tp, y, x, K, W, wdt, N, bias, GEMV_RW);
}

void okv_matmul_gemv_bf16x_1row(okv_threadpool *tp, float *y, const float *x, int K, const void *W, okv_dtype wdt,
                                int N, const float *bias) {
    gemv_bf16x(tp, y, x, K, W, wdt, N, bias, 1);
}

size_t okv_matmul_avx512_scratch(int T, int K) {
    size_t gemv = sizeof(float) * (size_t)(K > 0 ? K : 0), pack = (size_t)T * (size_t)((K + 31) / 32 * 32) * 2;
    return gemv > pack ? gemv : pack;
}

void okv_mm_avx512_bf16_dot(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            okv_dtype wdt, int N, const float *bias) {
    bf16_job b = {{y, x, T, K, N, W, wdt, bias, 0, NULL}, NULL, (K + 31) / 32 * 32};
    okv_kscratch ks;
    b.xb = okv_kscratch_get(&ks, tp, (size_t)T * (size_t)b.Kp * 2); /* ints: cannot overflow 64 bits */
    if (!b.xb) {
        okv_qmm_fail(y, T, N);
        return;
    }
    okv_threadpool_run(tp, (T + PACK_ROWS - 1) / PACK_ROWS, pack_task, &b);
    b.mm.block_rows = okv_matmul_block_rows(N, K, wdt, okv_threadpool_size(tp), TN);
    okv_threadpool_run(tp, (N + b.mm.block_rows - 1) / b.mm.block_rows, task_bf16, &b);
    okv_kscratch_release(&ks);
}
