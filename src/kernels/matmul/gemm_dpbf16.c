/* matmul/gemm_dpbf16.c — prefill matmul (T > 1) of bf16 weights on
 * vdpbf16ps with both operands packed per call: the avx512-bf16 table's
 * bf16 prefill path when there are no AMX tiles.
 *
 * Why: on Zen 4 vdpbf16ps runs at twice the rate of the f32 FMA (one core
 * 235 vs 117 GFLOP/s, bench_kernels peak), so the f32 packed GEMM of
 * matmul/gemm_avx512.c (exact products) tops out at half the machine,
 * and the dot-product kernel of matmul/dot_avx512.c (horizontal sums, W
 * re-read from L2 for every 4 x rows) at ~40% of it. This is the packed
 * broadcast shape of the f32 GEMM with bf16 pairs as the element: each
 * 32-bit lane holds two consecutive k, and one vdpbf16ps does 16 outputs x
 * 2 k.
 *
 * Shapes (y[T,N] = x[T,K] W[N,K]^T + bias; KP2 = ceil(K / 2) k pairs):
 *   1. x is rounded to bf16 (nearest even, as okv_matmul_avx512_bf16 does)
 *      and packed once per call into panels of MR = 6 rows:
 *      xp[p][q][r] = (x[6p + r][2q], x[6p + r][2q + 1]) as one 32-bit pair
 *      (rows past T and k past K zero), shared by the threads;
 *   2. a task owns up to NB = 256 rows of W; k pairs are taken KPC = 64 at
 *      a time (128 k): the task copies its rows' chunk into micro-panels of
 *      NR = 64 rows, wp[j][q][n] = pair q of row n0 + 64 j + n (16 x 16
 *      transposes of 32-bit pairs, no conversion; rows past N zero; 16 KiB a
 *      micro-panel, stays in L1), prefetching the next chunk's W bytes;
 *   3. for each micro-panel, every x panel's chunk (1.5 KiB; the chunk's x
 *      for T = 512 is 128 KiB, in L2) runs the 6 x 64 micro-kernel: 24 zmm
 *      accumulators, per k pair 4 W loads + 6 broadcasts feed 24
 *      vdpbf16ps; the tile is added into y (+ bias on the first chunk).
 * Every output is the same sum whatever thread or tile computes it:
 * results depend only on (T, K, N). Products are exact products of bf16 x
 * and bf16 W (x rounded: up to 2^-8 relative, the table's stated
 * matmul_rounding), sums f32, but vdpbf16ps adds a pair's two products
 * before the accumulator, so sums differ from okv_matmul_avx512_bf16's in
 * the last bits.
 *
 * Memory: scratch per call, x panels ceil(T/6) * 6 * KP2 * 4 bytes (T =
 * 512, K = 8192: 8.4 MB) plus NB * KPC * 4 = 64 KiB per thread of
 * micro-panels (and for quantized W a stage of NB rows x 512 columns of
 * bf16, 256 KiB per thread, which stays in Zen 4's 1 MiB L2).
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (matmul/gemm_dpbf16.c). */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "simd/avx512.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define INLINE_TGT \
    static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

enum { MR = 6,   /* x rows per micro-kernel */
       NR = 64,  /* W rows per micro-kernel: 4 zmm */
       KPC = 64, /* k pairs per chunk: a 64-row micro-panel is 16 KiB */
       NB = 256, /* W rows per task */
       QPC = 256 /* quantized W: k pairs dequantized at once (4 chunks, 512 columns: a g32 superblock) */ };

typedef struct dp_job {
    matmul_job mm;    /* bf16 W (mm.W), or only the shapes for quantized W */
    const okv_qview *q;    /* quantized W, else NULL */
    const int32_t *perm;   /* quantized W: x's column for packed column e (okv_qmm_tile_perm) */
    int kp2;          /* k pairs: ceil(K / 2) */
    int panels;       /* x panels: ceil(T / MR) */
    int nb;           /* W rows per task (multiple of NR) */
    uint32_t *xp;     /* [panels][kp2][MR] */
    uint32_t *wp;     /* per thread: [nb / NR][KPC][NR] */
    uint16_t *stage;  /* per thread: [nb / 16][2 QPC / 32][16][32] bf16, quantized rows dequantized */
    size_t wp_elems;  /* per thread */
} dp_job;

/* ---- packing -------------------------------------------------------------------------- */

/* x panel p: xp[q][r] for every pair q < kp2, r < MR. */
static TGT void pack_x_panel(const dp_job *g, int p) {
    const matmul_job *j = &g->mm;
    uint32_t *dst = g->xp + (size_t)p * g->kp2 * MR;
    const float *row[MR];
    for (int r = 0; r < MR; r++) row[r] = MR * p + r < j->T ? j->x + (size_t)(MR * p + r) * j->K : NULL;
    for (int q0 = 0; q0 < g->kp2; q0 += 16) {
        uint32_t tmp[MR][16]; /* row r: its 16 pairs from pair q0, rounded to bf16 */
        for (int r = 0; r < MR; r++) {
            __m512i v = !row[r]   ? _mm512_setzero_si512()
                        : g->perm ? okv_x32_permuted(row[r], g->perm + 2 * q0) /* K % 32 == 0 */
                                  : okv_row32_bf16(row[r], OKV_F32, 2 * q0, j->K);
            _mm512_storeu_si512(tmp[r], v);
        }
        int qv = g->kp2 - q0 < 16 ? g->kp2 - q0 : 16;
        for (int e = 0; e < qv; e++)
            for (int r = 0; r < MR; r++) dst[(size_t)(q0 + e) * MR + r] = tmp[r][e];
    }
}

static void pack_x_task(void *ctx, int task, int thread) {
    (void)thread;
    pack_x_panel(ctx, task);
}

/* W rows [n0, n0 + rows) (rows a multiple of NR), pairs [q0, q0 + qc) into
 * micro-panels: wp[(jp KPC + q) NR + n] = pair q0 + q of row n0 + NR jp + n. */
static TGT void pack_w_chunk(const dp_job *g, uint32_t *wp, int n0, int rows, int q0, int qc) {
    const matmul_job *j = &g->mm;
    const uint16_t *W = j->W;
    for (int i0 = 0; i0 < rows; i0 += 16) {
        uint32_t *panel = wp + (size_t)(i0 / NR) * KPC * NR + i0 % NR;
        for (int q = 0; q < qc; q += 16) {
            int k = 2 * (q0 + q); /* the first bf16 element of these 16 pairs */
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                int n = n0 + i0 + i;
                r[i] = n < j->N ? okv_row32_bf16(W + (size_t)n * j->K, OKV_BF16, k, j->K) : _mm512_setzero_si512();
            }
            okv_transpose16x16_epi32(r); /* r[e]: pair q0 + q + e of the 16 rows */
            int qv = qc - q < 16 ? qc - q : 16;
            for (int e = 0; e < qv; e++) _mm512_storeu_si512(panel + (size_t)(q + e) * NR, r[e]);
        }
    }
}

/* Quantized W rows [n0, n0 + rows), packed pairs [q0, q0 + qc) (2 qc a
 * multiple of 32) dequantized straight to bf16 by the AMX producer
 * (okv_qmm_dequant_cols_tiles: 16 x 32 blocks, row i of block b at
 * [512 b + 32 i]) into stage, 16 rows at a time: stage[gi][b][i][32] for
 * row 16 gi + i. One call per row covers QPC pairs: over 64-pair calls its
 * per-call setup (a superblock's scales) made q8 cost 0.48 ns a weight
 * against 0.12 over whole rows (one thread, 8192 x 2048 from DRAM). */
static TGT void dequant_w_quant(const dp_job *g, uint16_t *stage, int n0, int rows, int q0, int qc) {
    for (int i = 0; i < rows; i++) {
        int n = n0 + i;
        uint16_t *dst = stage + (size_t)(i / 16) * 16 * 2 * QPC + 32 * (i % 16);
        okv_qmm_dequant_cols_tiles(g->q, n < g->mm.N ? n : -1, 2 * q0, 2 * (q0 + qc), dst);
    }
}

/* Pairs [q0, q0 + qc) of the rows dequant_w_quant put into stage from pair
 * qs on, into micro-panels as pack_w_chunk lays them out: each block's rows
 * are 16 pairs of 16 rows, transposed as pack_w_chunk transposes bf16 rows. */
static TGT void pack_w_chunk_quant(uint32_t *wp, const uint16_t *stage, int rows, int qs, int q0, int qc) {
    for (int i0 = 0; i0 < rows; i0 += 16) {
        uint32_t *panel = wp + (size_t)(i0 / NR) * KPC * NR + i0 % NR;
        const uint16_t *grp = stage + (size_t)(i0 / 16) * 16 * 2 * QPC;
        for (int q = 0; q < qc; q += 16) {
            const uint16_t *blk = grp + (size_t)((q0 - qs + q) / 16) * 512;
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(blk + 32 * i);
            okv_transpose16x16_epi32(r);
#pragma GCC unroll 16
            for (int e = 0; e < 16; e++) _mm512_storeu_si512(panel + (size_t)(q + e) * NR, r[e]);
        }
    }
}

/* W row n's bytes of pairs [q0, q0 + qc) towards L2: bf16 elements, or
 * for quantized W the codes of those packed columns (a superblock's
 * columns [a, b) are its bytes [a, b) bits / 8) and their groups' scales.
 * Without it the producer waits on memory for every row: the dequantizer
 * alone (one thread, 8192 x 2048, 128-column ranges) took 0.48 ns per q8
 * weight from DRAM against 0.19 with the codes in L2. */
static inline void prefetch_w_row(const dp_job *g, int n, int q0, int qc) {
    const matmul_job *j = &g->mm;
    if (n >= j->N) return;
    if (g->q) {
        const okv_qview *q = g->q;
        if (q->block != OKV_QB_NONE) { /* GGUF blocks: the bytes of columns [2 q0, 2 (q0 + qc)) */
            size_t b0 = (size_t)2 * q0 / (size_t)q->group, b1 = ((size_t)2 * (q0 + qc) + q->group - 1) / q->group;
            size_t per = q->row_bytes / (size_t)q->groups;
            if (q->x8) { /* the row's blocks lie in its group's: fetched once, for the group's first row */
                if (n % 8) return;
                per *= 8;
            }
            const char *c = (const char *)q->blocks + (size_t)n * q->row_bytes + b0 * per;
            for (size_t o = 0; o < (b1 - b0) * per; o += 64) _mm_prefetch(c + o, _MM_HINT_T1);
            return;
        }
        const char *c = (const char *)q->codes + (size_t)n * q->code_stride + (size_t)2 * q0 * q->bits / 8;
        for (int o = 0; o < 2 * qc * q->bits / 8; o += 64) _mm_prefetch(c + o, _MM_HINT_T1);
        _mm_prefetch((const char *)(q->d + (size_t)n * q->scale_stride + 2 * q0 / q->group), _MM_HINT_T1);
        if (q->m) _mm_prefetch((const char *)(q->m + (size_t)n * q->scale_stride + 2 * q0 / q->group), _MM_HINT_T1);
        return;
    }
    const char *p = (const char *)((const uint16_t *)j->W + (size_t)n * j->K + 2 * (size_t)q0);
    int bytes = 4 * qc;
    if (2 * (q0 + qc) > j->K) bytes -= 2; /* odd K: the last pair's second half is past the row */
    for (int o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}

/* ---- the micro-kernel ----------------------------------------------------------------- */

/* y rows [t0, t0 + rt) x columns [n0, n0 + nv) (+)= x panel chunk . W
 * micro-panel chunk over qc pairs; first: y = sum + bias. */
INLINE_TGT void kernel_6x64(const matmul_job *j, const uint32_t *xp, const uint32_t *wp, int qc, int t0, int rt,
                            int n0, int nv, bool first) {
    __m512 acc[MR][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) acc[r][i] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int q = 0; q < qc; q++) {
        __m512bh w[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) w[i] = (__m512bh)_mm512_loadu_si512(wp + (size_t)q * NR + 16 * i);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m512bh b = (__m512bh)_mm512_set1_epi32((int)xp[(size_t)q * MR + r]);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) acc[r][i] = _mm512_dpbf16_ps(acc[r][i], b, w[i]);
        }
    }
    okv_tile6x64_store(j->y, j->N, j->bias, t0, rt, n0, nv, first, acc);
}

/* ---- the task ------------------------------------------------------------------------- */

static TGT void gemm_task(void *ctx, int task, int thread) {
    const dp_job *g = ctx;
    const matmul_job *j = &g->mm;
    int n0 = task * g->nb, rows = j->N - n0 < g->nb ? j->N - n0 : g->nb;
    rows = (rows + NR - 1) / NR * NR;
    uint32_t *wp = g->wp + (size_t)thread * g->wp_elems;
    uint16_t *stage = g->stage + (size_t)thread * g->nb * 2 * QPC;
    int micro = rows / NR, calls = micro * g->panels;
    int per = (rows + calls - 1) / calls; /* next-chunk rows to prefetch per micro-kernel call */
    for (int q0 = 0, qs = 0; q0 < g->kp2; q0 += KPC) {
        int qc = g->kp2 - q0 < KPC ? g->kp2 - q0 : KPC;
        /* the chunk whose bytes to prefetch: the next one, or for quantized W the one QPC pairs
         * ahead (the codes of the next dequant_w_quant, a chunk at a time) */
        int q1 = q0 + (g->q ? QPC : qc), qc1 = g->kp2 - q1 < KPC ? g->kp2 - q1 : KPC;
        if (g->q && q0 % QPC == 0) {
            qs = q0;
            dequant_w_quant(g, stage, n0, rows, q0, g->kp2 - q0 < QPC ? g->kp2 - q0 : QPC);
        }
        if (g->q) pack_w_chunk_quant(wp, stage, rows, qs, q0, qc);
        else pack_w_chunk(g, wp, n0, rows, q0, qc);
        int step = 0;
        for (int jp = 0; jp < micro; jp++) {
            const uint32_t *w = wp + (size_t)jp * KPC * NR;
            int nn = n0 + jp * NR, nv = j->N - nn < NR ? j->N - nn : NR;
            for (int p = 0; p < g->panels; p++, step++) {
                if (q1 < g->kp2) /* the next chunk's rows, spread over this chunk's calls */
                    for (int i = step * per; i < (step + 1) * per && i < rows; i++) prefetch_w_row(g, n0 + i, q1, qc1);
                int t0 = p * MR, rt = j->T - t0 < MR ? j->T - t0 : MR;
                kernel_6x64(j, g->xp + ((size_t)p * g->kp2 + q0) * MR, w, qc, t0, rt, nn, nv, q0 == 0);
            }
        }
    }
}

/* ---- entry ---------------------------------------------------------------------------- */

static int task_rows(int N, int n_threads) { return okv_gemm_task_rows(N, n_threads, NR, NB); }

size_t okv_matmul_avx512_dpbf16_scratch(int T, int K, int N, int n_threads) {
    if (T <= 1 || K <= 0 || N <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    size_t kp2 = ((size_t)K + 1) / 2;
    size_t xp = (size_t)((T + MR - 1) / MR) * MR * kp2, wp = (size_t)task_rows(N, n_threads) * KPC;
    size_t stage = (size_t)task_rows(N, n_threads) * QPC, perm = (size_t)K; /* stage: nb x 2 QPC bf16 in 32-bit units */
    return (xp + perm + (wp + stage) * (size_t)n_threads) * sizeof(uint32_t) + 64;
}

bool okv_matmul_avx512_dpbf16_takes(int T, int K, int N, okv_dtype wdt) {
    return T > 1 && K > 0 && N > 0 && wdt == OKV_BF16;
}

/* Runs the packed GEMM on g (g->mm, g->q set); false: no scratch. */
static bool dp_run(okv_threadpool *tp, dp_job *g) {
    const matmul_job *j = &g->mm;
    int n_threads = okv_threadpool_size(tp);
    g->kp2 = (j->K + 1) / 2;
    g->panels = (j->T + MR - 1) / MR;
    g->nb = task_rows(j->N, n_threads);
    g->wp_elems = (size_t)g->nb * KPC;
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, okv_matmul_avx512_dpbf16_scratch(j->T, j->K, j->N, n_threads));
    if (!mem) return false;
    g->xp = (uint32_t *)mem;
    int32_t *perm = (int32_t *)(g->xp + (size_t)g->panels * MR * g->kp2);
    g->wp = (uint32_t *)(perm + j->K);
    g->stage = (uint16_t *)(g->wp + g->wp_elems * (size_t)n_threads);
    if (g->q) {
        okv_qmm_tile_perm(g->q, perm);
        g->perm = perm;
    }
    okv_threadpool_run(tp, g->panels, pack_x_task, g);
    okv_threadpool_run(tp, (j->N + g->nb - 1) / g->nb, gemm_task, g);
    okv_kscratch_release(&ks);
    return true;
}

void okv_mm_avx512_dpbf16_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                 okv_dtype wdt, int N, const float *bias) {
    dp_job g = {{y, x, T, K, N, W, wdt, bias, 0, NULL}, NULL, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
    if (!dp_run(tp, &g)) okv_qmm_fail(y, T, N);
}

void okv_qmm_avx512_dpbf16_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                  const okv_qscheme *s, int N, const float *bias) {
    okv_qview v = okv_quant_view(s, W, N, K);
    dp_job g = {{y, x, T, K, N, NULL, OKV_F32, bias, 0, NULL}, &v, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
    if (!dp_run(tp, &g)) okv_qmm_fail(y, T, N);
}
