/* matmul/tiles_amx.c — prefill matmul (T > 1) on AMX BF16 tiles, and the
 * per-process AMX permission.
 *
 * One tdpbf16ps multiplies a 16x32 bf16 tile by a 32x16 one into 16x16 f32
 * (8192 multiply-adds). We put the weights on the A side, the activations on
 * the B side, so W needs no transposition at all:
 *   C[n][t] += sum_k A[n][k] * B[k][t],  A = 16 rows of W x 32 k (64 B rows),
 *   B = x in "VNNI" pairs: row kp holds (x[t][2kp], x[t][2kp+1]) for 16 t.
 * Per call (okv_matmul_amx, "the blocked loop"):
 *   1. x [T, K] f32 is rounded to bf16 and packed once into B tiles
 *      ([T/16][K/32] tiles of 1 KiB, zero-padded to 32 rows and 32 k),
 *      shared by both threads;
 *   2. each task owns a block of up to NB2 = 256 rows of W (N split evenly
 *      over the threads first); T is taken 256 rows at a time (512 for
 *      quantized W, see the blocked loop's enum) and K 512
 *      (KC2 = 16 tiles) at a time: for each K chunk the task copies its W
 *      rows' chunk into A tiles (256 KiB; f16 converted to bf16 here, the
 *      next chunk's W bytes prefetched towards L2 during this one's tiles;
 *      bf16 W with K % 32 == 0 and a full block needs no copy: its tiles
 *      are loaded from W's own rows, row stride K * 2 bytes, see below),
 *      then for every 32-row W pair (2 x 16 KiB, stays in L1) runs over all
 *      x tile pairs of the chunk (512 KiB, stays in L2): 2x2 register
 *      blocking (C: tmm0-3, A: tmm4-5, B: tmm6-7), per 32 k two A and two B
 *      loads feed four tdpbf16ps; partial C tiles wait in a per-thread
 *      buffer (NB2 x 512 f32) between K chunks;
 *   3. finished C tiles are transposed into y[t][n] (+ bias), x tile by x
 *      tile so each of 16 y rows gets 1 KiB contiguous.
 * So x is read from L3 once per 256 W rows instead of once per 32 (the
 * previous loop, okv_matmul_amx_v1: a task of 64 rows, x's whole K chunk
 * for all T re-streamed for every 32 rows; kept for bench_kernels and as
 * okv_matmul_amx_tiles, the deterministic table's bf16 matmul for every T).
 * No weight copy outlives the call (no load-time repacking, no memory cost
 * beyond per-call scratch: x tiles T*K*2 bytes plus 256 KiB + 512 KiB per
 * thread). Every output is summed over the same tiles and chunks
 * whatever thread computes it, and block starts are multiples of 32, so
 * results depend only on (T, K, N).
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (matmul/tiles_amx.c). */
#include <errno.h>
#include <math.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "simd/avx512.h"

/* ---- permission ------------------------------------------------------------------- */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_granted;
static const char *amx_reason = "not checked";
static char amx_reason_buf[128];

static void amx_request(void) {
    const okv_cpu_caps *c = okv_cpu();
    if (!(c->amx_tile && c->amx_bf16 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512bf16)) {
        amx_reason = "not available (the CPU or OS lacks amx-tile/amx-bf16/avx512-bf16)";
        return;
    }
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        snprintf(amx_reason_buf, sizeof amx_reason_buf, "refused by the OS (arch_prctl XTILEDATA: %s)",
                 strerror(errno));
        amx_reason = amx_reason_buf;
        return;
    }
    amx_granted = true;
    amx_reason = "granted";
#else
    amx_reason = "not available (no arch_prctl on this OS)";
#endif
}

bool okv_amx_usable(const char **why) {
    pthread_once(&amx_once, amx_request);
    if (why) *why = amx_reason;
    return amx_granted;
}

/* ---- tiles ------------------------------------------------------------------------ */

/* The 64-byte LDTILECFG operand, palette 1: tiles 0-7 are 16 rows x 64
 * bytes, tiles 8-15 and every reserved byte zero. */
static const okv_amx_tilecfg tilecfg __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0}};

/* Tile instructions as inline asm (AT&T operand order), so gcc and clang 14
 * build them alike without AMX intrinsics headers. */
#define TILE_LOAD(t, p) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)64) : "memory")
#define TILE_STORE(t, p) __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)64) : "memory")
#define TILE_LOADW(t, p, stride) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"(stride) : "memory")
#define TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define TILE_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

static void tiles_configure(void) { __asm__ volatile("ldtilecfg %0" ::"m"(tilecfg)); }
static void tiles_release(void) { __asm__ volatile("tilerelease" ::); }

/* ---- the job ---------------------------------------------------------------------- */

enum { TILE_ELEMS = 512, /* bf16 per A/B tile: 16 rows x 32 */
       C_ELEMS = 256,    /* f32 per C tile: 16 x 16 */
       KCB = 16 };       /* K tiles per chunk: 2 A tiles x 16 KiB in L1 */

typedef struct amx_job {
    matmul_job mm;
    int nkb, ntb;       /* K tiles (K/32 rounded up), x tiles (T/16 rounded up to even) */
    uint16_t *xp;       /* [ntb][nkb] B tiles */
    uint16_t *wp;       /* per thread: [NB/16][nkb] A tiles */
    float *cb;          /* per thread: [NB/16][ntb] C tiles */
    size_t wp_elems, cb_elems; /* per thread */
    const int32_t *perm; /* quantized W on the blocked loop: [K] the k of each tile column e (W's code order), else NULL */
} amx_job;

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

/* x tile row tb: B tiles [kb] with element (kp, t, e) = x[16 tb + t][32 kb +
 * 2 kp + e] in bf16; rows past T are zero. */
static TGT void pack_x_tiles(const amx_job *a, int tb) {
    const matmul_job *j = &a->mm;
    uint16_t *base = a->xp + (size_t)tb * a->nkb * TILE_ELEMS;
    for (int kb = 0; kb < a->nkb; kb++) {
        __m512i r[16]; /* row t: the 16 bf16 pairs of x row 16 tb + t */
#pragma GCC unroll 16
        for (int t = 0; t < 16; t++) {
            int row = tb * 16 + t;
            if (row >= j->T) r[t] = _mm512_setzero_si512();
            else if (!a->perm) r[t] = okv_row32_bf16(j->x + (size_t)row * j->K, OKV_F32, kb * 32, j->K);
            else r[t] = okv_x32_permuted(j->x + (size_t)row * j->K, a->perm + kb * 32); /* K % 32 == 0 */
        }
        okv_transpose16x16_epi32(r); /* row kp: pair kp of the 16 x rows */
        uint16_t *tile = base + (size_t)kb * TILE_ELEMS;
#pragma GCC unroll 16
        for (int kp = 0; kp < 16; kp++) _mm512_storeu_si512(tile + kp * 32, r[kp]);
    }
}

static void pack_x_task(void *ctx, int task, int thread) {
    (void)thread;
    pack_x_tiles(ctx, task);
}

/* ---- v1: one thread's whole W block packed, then all of x against it -------------- */

/* W rows [n0, n0 + rows) into A tiles: tile (g, kb) row r = W[n0 + 16 g +
 * r][32 kb .. 32 kb + 32) in bf16, zero past N and K. (Quantized W runs on
 * the blocked loop below; its tile-column order and dequantization,
 * okv_qmm_tile_perm / okv_qmm_dequant_cols_tiles, live in qmatmul/int8_amx.c.) */
static TGT void pack_w_tiles(const amx_job *a, uint16_t *wp, int n0, int rows) {
    const matmul_job *j = &a->mm;
    size_t esz = okv_dtype_size(j->wdt);
    for (int i = 0; i < rows; i++) {
        int n = n0 + i;
        uint16_t *dst = wp + ((size_t)(i / 16) * a->nkb * 16 + (size_t)(i % 16)) * 32;
        const char *src = (const char *)j->W + (size_t)n * j->K * esz;
        for (int kb = 0; kb < a->nkb; kb++) {
            __m512i v = n < j->N ? okv_row32_bf16(src, j->wdt, kb * 32, j->K) : _mm512_setzero_si512();
            _mm512_storeu_si512(dst + (size_t)kb * TILE_ELEMS, v);
        }
    }
}

/* C tiles (g, g+1) x (tb, tb+1) += W pair chunk x x pair chunk over nk K
 * tiles; first: start from zero instead of the stored partial sums. */
static inline __attribute__((always_inline)) TGT void tile_2x2(const uint16_t *w0, const uint16_t *w1, long wrow, size_t wstep,
                                                              const uint16_t *x0, const uint16_t *x1, int nk,
                                                              float *c00, float *c01, float *c10, float *c11,
                                                              bool first) {
    if (first) {
        TILE_ZERO(0); TILE_ZERO(1); TILE_ZERO(2); TILE_ZERO(3);
    } else {
        TILE_LOAD(0, c00); TILE_LOAD(1, c01); TILE_LOAD(2, c10); TILE_LOAD(3, c11);
    }
    /* W tiles: packed (wrow 64 bytes, wstep TILE_ELEMS) or W's own rows (wrow its row bytes, wstep 32) */
    for (int kb = 0; kb < nk; kb++) {
        /* loads interleaved with the products that need them (the first
         * product starts after two loads, not four) */
        TILE_LOADW(4, w0 + (size_t)kb * wstep, wrow);
        TILE_LOAD(6, x0 + (size_t)kb * TILE_ELEMS);
        TILE_DP(0, 4, 6);
        TILE_LOAD(7, x1 + (size_t)kb * TILE_ELEMS);
        TILE_DP(1, 4, 7);
        TILE_LOADW(5, w1 + (size_t)kb * wstep, wrow);
        TILE_DP(2, 5, 6);
        TILE_DP(3, 5, 7);
    }
    TILE_STORE(0, c00); TILE_STORE(1, c01); TILE_STORE(2, c10); TILE_STORE(3, c11);
}

/* v1 (okv_matmul_amx_v1, okv_matmul_amx_tiles): C tiles for n groups
 * [g, g+2) x t tiles (all): chunks of K, 2x2 blocking. */
static TGT void block_tiles(const amx_job *a, const uint16_t *wp, float *cb, int g) {
    const int nkb = a->nkb, ntb = a->ntb;
    const uint16_t *w0 = wp + (size_t)g * nkb * TILE_ELEMS, *w1 = w0 + (size_t)nkb * TILE_ELEMS;
    for (int kc0 = 0; kc0 < nkb; kc0 += KCB) {
        int kc1 = nkb - kc0 < KCB ? nkb : kc0 + KCB;
        for (int tb = 0; tb < ntb; tb += 2) {
            float *c00 = cb + ((size_t)g * ntb + tb) * C_ELEMS, *c01 = c00 + C_ELEMS;
            float *c10 = c00 + (size_t)ntb * C_ELEMS, *c11 = c10 + C_ELEMS;
            const uint16_t *x0 = a->xp + (size_t)tb * nkb * TILE_ELEMS, *x1 = x0 + (size_t)nkb * TILE_ELEMS;
            size_t off = (size_t)kc0 * TILE_ELEMS;
            tile_2x2(w0 + off, w1 + off, 64, TILE_ELEMS, x0 + off, x1 + off, kc1 - kc0, c00, c01, c10, c11, kc0 == 0);
        }
    }
}

/* y[t][n] = C[n][t] (+ bias) for the valid part of the block: each C tile
 * is transposed in registers and written as 16 rows of 16 contiguous y
 * elements (element by element, column-wise, this cost as much as the
 * tiles). */
static TGT void write_out(const amx_job *a, const float *cb, int n0, int rows) {
    const matmul_job *j = &a->mm;
    for (int g = 0; g < (rows + 15) / 16; g++) {
        int nv = rows - 16 * g < 16 ? rows - 16 * g : 16;
        __mmask16 m = (__mmask16)((1u << nv) - 1);
        __m512 b = j->bias ? _mm512_maskz_loadu_ps(m, j->bias + n0 + 16 * g) : _mm512_setzero_ps();
        for (int tb = 0; tb * 16 < j->T; tb++) {
            const float *c = cb + ((size_t)g * a->ntb + tb) * C_ELEMS;
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(c + i * 16);
            okv_transpose16x16_epi32(r);
            int tv = j->T - 16 * tb < 16 ? j->T - 16 * tb : 16;
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                if (t < tv)
                    _mm512_mask_storeu_ps(j->y + (size_t)(16 * tb + t) * j->N + n0 + 16 * g, m,
                                          _mm512_add_ps(_mm512_castsi512_ps(r[t]), b));
        }
    }
}

static void block_task(void *ctx, int task, int thread) {
    const amx_job *a = ctx;
    const matmul_job *j = &a->mm;
    int n0 = task * j->block_rows, rows = j->N - n0 < j->block_rows ? j->N - n0 : j->block_rows;
    int groups = (rows + 31) / 32 * 2;
    uint16_t *wp = a->wp + (size_t)thread * a->wp_elems;
    float *cb = a->cb + (size_t)thread * a->cb_elems;
    pack_w_tiles(a, wp, n0, groups * 16);
    tiles_configure();
    for (int g = 0; g < groups; g += 2) block_tiles(a, wp, cb, g);
    tiles_release();
    write_out(a, cb, n0, rows);
}

/* Elements of the packed x (returned), of one thread's W block and C tiles;
 * sizes from ints: far below 2^64. */
static size_t amx_sizes(int T, int K, int N, int n_threads, size_t *wp_elems, size_t *cb_elems) {
    int nkb = (K + 31) / 32, ntb = (T + 31) / 32 * 2, block_rows = okv_matmul_block_rows(N, K, OKV_BF16, n_threads, 32);
    *wp_elems = (size_t)(block_rows / 16) * nkb * TILE_ELEMS;
    *cb_elems = (size_t)(block_rows / 16) * ntb * C_ELEMS;
    return (size_t)ntb * nkb * TILE_ELEMS;
}

static size_t amx2_scratch(int T, int K, int N, int n_threads);
size_t okv_matmul_amx_scratch(int T, int K, int N, int n_threads) {
    if (T < 1 || K <= 0 || N <= 0) return 0; /* T = 1: okv_matmul_amx_tiles (the deterministic table) */
    size_t wp, cb, xp = amx_sizes(T, K, N, n_threads, &wp, &cb);
    size_t v1 = (xp + wp * n_threads) * 2 + cb * n_threads * 4, v2 = amx2_scratch(T, K, N, n_threads);
    return v1 > v2 ? v1 : v2;
}

void okv_mm_amx_tiles(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                      int N, const float *bias) {
    int n_threads = okv_threadpool_size(tp);
    amx_job a = {{y, x, T, K, N, W, wdt, bias, 0, NULL}, (K + 31) / 32, (T + 31) / 32 * 2, NULL, NULL, NULL, 0, 0, NULL};
    a.mm.block_rows = okv_matmul_block_rows(N, K, OKV_BF16, n_threads, 32);
    size_t xp_elems = amx_sizes(T, K, N, n_threads, &a.wp_elems, &a.cb_elems);
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, okv_matmul_amx_scratch(T, K, N, n_threads));
    if (!mem) {
        okv_qmm_fail(y, T, N);
        return;
    }
    a.xp = (uint16_t *)mem;
    a.wp = a.xp + xp_elems;
    a.cb = (float *)(a.wp + a.wp_elems * n_threads);
    okv_threadpool_run(tp, a.ntb, pack_x_task, &a);
    okv_threadpool_run(tp, (N + a.mm.block_rows - 1) / a.mm.block_rows, block_task, &a);
    okv_kscratch_release(&ks);
}

/* ---- the blocked loop ----------------------------------------------------------------- */

/* Blocking of okv_matmul_amx (see the head comment): a task owns NB2 rows
 * of W; its T rows are taken TB2 at a time and K KC2 tiles at a time, so
 * the packed x chunk [TB2 x 32 KC2] (256 KiB; 512 for quantized W) stays
 * in L2 while every 32-row W pair of the block uses it, and one W pair
 * chunk (2 KC2 KiB) stays in L1 while the x tiles stream past it.
 * TB2 = 256 rows for bf16/f16 W (16 x tiles; was 512): with W's tiles
 * read in place the block's W chunk (256 rows x 1 KiB at a 4 KiB stride,
 * plus the next one prefetched) lands on a quarter of L2's sets, and the
 * smaller x chunk and C buffer (256 KiB each instead of 512) leave it
 * room, at the price of reading W once per 256 rows of T. bench_kernels
 * pp512, 2 threads, layer sum, interleaved with TB2 = 512 (host load
 * varying): 1.08-1.09x in three runs; against K chunks of 32
 * and 64 tiles with 128-256 rows of T, 16 / 256 was 1.00-1.07x. Quantized
 * W keeps 512 rows: its dequantization is per T block, and 256 measured
 * slower (bench_kernels qgemm, one run: q8 0.79x / 0.94x, q4 1.11x /
 * 0.89x on 2048x2048 / 8192x2048). */
enum { NB2 = 256, TB2_TILES = 16, TB2_TILES_Q = 32, KC2 = 16 };

typedef struct amx2_job {
    matmul_job mm;
    int nkb, ntb;         /* K tiles, x tiles (T/16 rounded up to even) */
    int nb, kcb, tbt;     /* W rows per task, K tiles per chunk, x tiles per T block */
    const uint16_t *xp;   /* [ntb][nkb] B tiles */
    uint16_t *wp;         /* per thread: [nb/16][kcb] A tiles */
    float *cb;            /* per thread: [nb/16][tbt] C tiles */
    size_t wp_elems, cb_elems;
    const okv_qview *q;   /* quantized W (dequantized into the A tiles), else NULL */
} amx2_job;

/* W rows [n0, n0 + rows) x K tiles [kb0, kb0 + nk) into A tiles: tile (g,
 * kb) at wp[(g nk + kb) TILE_ELEMS], row r = W[n0 + 16 g + r][32 (kb0 +
 * kb) ..) in bf16, zero past N and K. */
static TGT void pack_w_chunk(const amx2_job *a, uint16_t *wp, int n0, int rows, int kb0, int nk) {
    const matmul_job *j = &a->mm;
    if (a->q) {
        for (int i = 0; i < rows; i++)
            okv_qmm_dequant_cols_tiles(a->q, n0 + i < j->N ? n0 + i : -1, kb0 * 32, (kb0 + nk) * 32,
                                       wp + ((size_t)(i / 16) * nk * 16 + (size_t)(i % 16)) * 32);
        return;
    }
    size_t esz = okv_dtype_size(j->wdt);
    for (int i = 0; i < rows; i++) {
        int n = n0 + i;
        uint16_t *dst = wp + ((size_t)(i / 16) * nk * 16 + (size_t)(i % 16)) * 32;
        const char *src = (const char *)j->W + (size_t)n * j->K * esz;
        for (int kb = 0; kb < nk; kb++) {
            __m512i v = n < j->N ? okv_row32_bf16(src, j->wdt, (kb0 + kb) * 32, j->K) : _mm512_setzero_si512();
            _mm512_storeu_si512(dst + (size_t)kb * TILE_ELEMS, v);
        }
    }
}


/* y[t][n] = C[n][t] (+ bias) for rows [n0, n0 + rows) and x tiles [tb0,
 * tb0 + tbt) of the C buffer [rows/16][tbt] tiles. Per x tile all the
 * block's n tiles in turn, so 16 rows of y get rows * 4 contiguous bytes
 * each (tile by tile down a column of y, every store hit another page). */
static TGT void write_out2(const matmul_job *j, const float *cb, int tbt, int n0, int rows, int tb0) {
    for (int tb = 0; tb < tbt && (tb0 + tb) * 16 < j->T; tb++) {
        int t0 = 16 * (tb0 + tb), tv = j->T - t0 < 16 ? j->T - t0 : 16;
        for (int g = 0; g < (rows + 15) / 16; g++) {
            int nv = rows - 16 * g < 16 ? rows - 16 * g : 16;
            __mmask16 m = (__mmask16)((1u << nv) - 1);
            __m512 b = j->bias ? _mm512_maskz_loadu_ps(m, j->bias + n0 + 16 * g) : _mm512_setzero_ps();
            const float *c = cb + ((size_t)g * tbt + tb) * C_ELEMS;
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(c + i * 16);
            okv_transpose16x16_epi32(r);
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                if (t < tv)
                    _mm512_mask_storeu_ps(j->y + (size_t)(t0 + t) * j->N + n0 + 16 * g, m,
                                          _mm512_add_ps(_mm512_castsi512_ps(r[t]), b));
        }
    }
}

/* The next chunk's bytes of W rows [r0, r0 + n) (K tiles [kb0, kb0 + nk))
 * towards L2 while the tiles work on this one, so pack_w_chunk reads them
 * from cache instead of waiting on DRAM. */
static inline void prefetch_w_rows(const amx2_job *a, int n0, int r0, int n, int kb0, int nk) {
    const matmul_job *j = &a->mm;
    if (a->q) { /* the chunk's codes: a contiguous range of each row (tile columns in code order) */
        size_t lo = (size_t)kb0 * 32 * a->q->bits / 8, hi = (size_t)(kb0 + nk) * 32 * a->q->bits / 8;
        if (hi > (size_t)j->K * a->q->bits / 8) hi = (size_t)j->K * a->q->bits / 8;
        for (int i = r0; i < r0 + n && n0 + i < j->N; i++) {
            const uint8_t *p = a->q->codes + (size_t)(n0 + i) * a->q->code_stride;
            for (size_t o = lo; o < hi; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T1);
        }
        return;
    }
    size_t esz = okv_dtype_size(j->wdt), len = (size_t)nk * 32 * esz;
    if ((size_t)(kb0 + nk) * 32 > (size_t)j->K) len = ((size_t)j->K - (size_t)kb0 * 32) * esz;
    for (int i = r0; i < r0 + n && n0 + i < j->N; i++) {
        const char *p = (const char *)j->W + ((size_t)(n0 + i) * j->K + (size_t)kb0 * 32) * esz;
        for (size_t o = 0; o < len; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
    }
}

static TGT void block2_task(void *ctx, int task, int thread) {
    const amx2_job *a = ctx;
    const matmul_job *j = &a->mm;
    int n0 = task * a->nb, rows = j->N - n0 < a->nb ? j->N - n0 : a->nb;
    int groups = (rows + 31) / 32 * 2;
    uint16_t *wp = a->wp + (size_t)thread * a->wp_elems;
    float *cb = a->cb + (size_t)thread * a->cb_elems;
    /* bf16 W whose tiles can be read in place: every row of the block
     * exists and no k tile runs past a row's end */
    bool direct = !a->q && j->wdt == OKV_BF16 && j->K % 32 == 0 && n0 + groups * 16 <= j->N;
    if (direct) prefetch_w_rows(a, n0, 0, 32, 0, a->kcb);
    for (int tb0 = 0; tb0 < a->ntb; tb0 += a->tbt) {
        int tbn = a->ntb - tb0 < a->tbt ? a->ntb - tb0 : a->tbt; /* even */
        for (int kb0 = 0; kb0 < a->nkb; kb0 += a->kcb) {
            int nk = a->nkb - kb0 < a->kcb ? a->nkb - kb0 : a->kcb;
            if (!direct) pack_w_chunk(a, wp, n0, groups * 16, kb0, nk);
            tiles_configure();
            for (int g = 0; g < groups; g += 2) {
                const uint16_t *w0 = wp + (size_t)g * nk * TILE_ELEMS, *w1 = w0 + (size_t)nk * TILE_ELEMS;
                long wrow = 64;
                size_t wstep = TILE_ELEMS;
                if (direct) {
                    w0 = (const uint16_t *)j->W + (size_t)(n0 + 16 * g) * j->K + (size_t)kb0 * 32;
                    w1 = w0 + (size_t)16 * j->K;
                    wrow = (long)j->K * 2;
                    wstep = 32;
                    if (kb0 == 0 && g + 2 < groups) prefetch_w_rows(a, n0, 16 * (g + 2), 32, 0, nk);
                }
                for (int tb = 0; tb < tbn; tb += 2) {
                    if (kb0 + nk < a->nkb) { /* rows of the next chunk: spread over this chunk's tile work */
                        int per = (groups * 16 + groups / 2 * (tbn / 2) - 1) / (groups / 2 * (tbn / 2));
                        int step = g / 2 * (tbn / 2) + tb / 2;
                        prefetch_w_rows(a, n0, step * per, per, kb0 + nk, a->kcb);
                    }
                    const uint16_t *x0 = a->xp + ((size_t)(tb0 + tb) * a->nkb + kb0) * TILE_ELEMS;
                    const uint16_t *x1 = x0 + (size_t)a->nkb * TILE_ELEMS;
                    float *c00 = cb + ((size_t)g * a->tbt + tb) * C_ELEMS, *c01 = c00 + C_ELEMS;
                    float *c10 = c00 + (size_t)a->tbt * C_ELEMS, *c11 = c10 + C_ELEMS;
                    tile_2x2(w0, w1, wrow, wstep, x0, x1, nk, c00, c01, c10, c11, kb0 == 0);
                }
            }
            tiles_release();
        }
        write_out2(j, cb, a->tbt, n0, rows, tb0);
    }
}

static int amx2_rows(int N, int n_threads) {
    int per = (N + n_threads - 1) / n_threads;
    per = (per + 31) / 32 * 32;
    return per < NB2 ? per : NB2;
}

static size_t amx2_sizes(int T, int K, int N, int n_threads, size_t *wp_elems, size_t *cb_elems) {
    int nkb = (K + 31) / 32, ntb = (T + 31) / 32 * 2, nb = amx2_rows(N, n_threads);
    int tbt = ntb < TB2_TILES_Q ? ntb : TB2_TILES_Q, kcb = nkb < KC2 ? nkb : KC2; /* the larger of the two T blocks */
    *wp_elems = (size_t)(nb / 16) * kcb * TILE_ELEMS;
    *cb_elems = (size_t)(nb / 16) * tbt * C_ELEMS;
    return (size_t)ntb * nkb * TILE_ELEMS;
}

static size_t amx2_scratch(int T, int K, int N, int n_threads) {
    if (T <= 1 || K <= 0 || N <= 0) return 0;
    size_t wp, cb, xp = amx2_sizes(T, K, N, n_threads, &wp, &cb);
    return (xp + wp * n_threads) * 2 + cb * n_threads * 4;
}

/* Quantized W (q): dequantized chunk by chunk into the A tiles, x
 * gathered into the tile-column order; false: no scratch. */
static bool matmul_amx_blocked(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                               okv_dtype wdt, int N, const float *bias, const okv_qview *q) {
    int n_threads = okv_threadpool_size(tp);
    amx2_job a = {{y, x, T, K, N, W, wdt, bias, 0, NULL}, (K + 31) / 32, (T + 31) / 32 * 2, 0, 0, 0,
                  NULL, NULL, NULL, 0, 0, q};
    a.nb = amx2_rows(N, n_threads);
    a.kcb = a.nkb < KC2 ? a.nkb : KC2;
    int tb2 = q ? TB2_TILES_Q : TB2_TILES;
    a.tbt = a.ntb < tb2 ? a.ntb : tb2;
    size_t xp_elems = amx2_sizes(T, K, N, n_threads, &a.wp_elems, &a.cb_elems);
    okv_kscratch ks;
    size_t perm_bytes = q ? sizeof(int32_t) * (size_t)K + 64 : 0;
    char *mem = okv_kscratch_get(&ks, tp, amx2_scratch(T, K, N, n_threads) + perm_bytes);
    if (!mem) return false;
    uint16_t *xp = (uint16_t *)mem;
    a.xp = xp;
    a.wp = xp + xp_elems;
    a.cb = (float *)(a.wp + a.wp_elems * n_threads);
    amx_job px = {{y, x, T, K, N, W, wdt, bias, 0, NULL}, a.nkb, a.ntb, xp, NULL, NULL, 0, 0, NULL};
    if (q) {
        int32_t *perm = (int32_t *)(a.cb + a.cb_elems * n_threads);
        okv_qmm_tile_perm(q, perm);
        px.perm = perm;
    }
    okv_threadpool_run(tp, a.ntb, pack_x_task, &px);
    okv_threadpool_run(tp, (N + a.nb - 1) / a.nb, block2_task, &a);
    okv_kscratch_release(&ks);
    return true;
}

void okv_mm_amx_blocked(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                        int N, const float *bias) {
    if (!matmul_amx_blocked(tp, y, x, T, K, W, wdt, N, bias, NULL)) okv_qmm_fail(y, T, N);
}

/* ---- quantized W on the bf16 tiles -------------------------------------------------- */

size_t okv_matmul_q_amx_bf16_scratch(int T, int K, int N, int n_threads) {
    if (T <= 1 || K <= 0 || N <= 0) return 0;
    return amx2_scratch(T, K, N, n_threads) + sizeof(int32_t) * (size_t)K + 64;
}

void okv_qmm_amx_bf16(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                      const okv_qscheme *s, int N, const float *bias) {
    okv_qview q = okv_quant_view(s, W, N, K);
    if (!matmul_amx_blocked(tp, y, x, T, K, NULL, OKV_BF16, N, bias, &q)) okv_qmm_fail(y, T, N);
}
