/* matmul/gemm_avx512.c — prefill matmul (T > 1) for bf16 / f16 weights
 * on 512-bit f32 FMAs with both operands packed per call: the AVX-512
 * tables' bf16 / f16 prefill path when there are no AMX tiles.
 *
 * Why: on a CPU whose vdpbf16ps runs at half the f32 FMA rate (this Xeon
 * without AMX: one core 84 GFLOP/s vdpbf16ps vs 173 f32 FMA, bench_kernels
 * peak), the dot-product kernels of matmul/dot_avx512.c (4 x rows x 6 W
 * rows, horizontal sums) reach ~64 GFLOP/s on 2 threads, bound by loading
 * and converting W from L2 for every 4 x rows. Here each W element is
 * converted to f32 once per call and each loaded W vector feeds 6 FMAs.
 *
 * Shapes (y[T,N] = x[T,K] W[N,K]^T + bias):
 *   1. x is packed once per call into panels of MR = 6 rows: xp[p][k][r] =
 *      x[6p + r][k] (f32, rows past T zero), shared by the threads;
 *   2. a task owns NB = 256 rows of W; K is taken KC = 128 at a time: the
 *      task converts its rows' chunk into f32 micro-panels of NR = 64
 *      rows, wp[j][k][n] = W[n0 + 64 j + n][k0 + k] (16 x 16 transposes;
 *      rows past N zero; 32 KiB a micro-panel, stays in L1), prefetching
 *      the next chunk's W bytes while the FMAs run;
 *   3. for each micro-panel, every x panel's chunk (3 KiB, the chunk's x is
 *      256 KiB in L2) runs the 6 x 64 micro-kernel: 24 zmm accumulators,
 *      per k 4 W loads + 6 broadcasts feed 24 FMAs; the tile is added into
 *      y (+ bias on the first chunk), rows past T and columns past N not
 *      stored.
 * Every output is the same sum (chunk by chunk in K order, within a chunk
 * k in order) whatever thread or tile computes it: results depend only on
 * (T, K, N). Products are exact (x f32, W bf16/f16 widened exactly), sums
 * f32, so it keeps the plain path's precision (no bf16 rounding of x).
 *
 * Memory: scratch per call x panels ceil(T/6)*6*K*4 bytes (T = 512, K =
 * 8192: 16.9 MB) plus NB*KC*4 = 128 KiB per thread; no weight copy
 * outlives the call.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (matmul/gemm_avx512.c). */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "simd/avx512.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

enum { MR = 6,   /* x rows per micro-kernel */
       NR = 64,  /* W rows per micro-kernel: 4 zmm */
       KC = 128, /* K per chunk: a 64-row micro-panel is 32 KiB of f32 */
       NB = 256 /* W rows per task */ };

typedef struct gemm_job {
    matmul_job mm;        /* float W (mm.W, mm.wdt), or only the shapes for quantized W */
    const okv_qview *q;   /* quantized W, else NULL */
    const int32_t *perm;  /* quantized W: x's column for packed column e (okv_qmm_tile_perm) */
    int panels;           /* x panels: ceil(T / MR) */
    int nb;               /* W rows per task (multiple of NR) */
    float *xp;            /* [panels][K][MR] */
    float *wp;            /* per thread: [nb / NR][KC][NR] */
    float *stage;         /* per thread: [16][KC], quantized rows dequantized before the transpose */
    size_t wp_elems, stage_elems; /* per thread */
} gemm_job;

/* ---- packing -------------------------------------------------------------------------- */

static void pack_x_panel(const gemm_job *g, int p) {
    const matmul_job *j = &g->mm;
    okv_gemm_pack_x_panel(g->xp + (size_t)p * j->K * MR, j->x, j->T, j->K, MR, g->perm, p);
}

static void pack_x_task(void *ctx, int task, int thread) {
    (void)thread;
    pack_x_panel(ctx, task);
}


/* 16 elements of a bf16 / f16 row from element k as f32; lanes off m zero. */
INLINE_TGT __m512i w16(const uint16_t *row, okv_dtype dt, int k, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, row + k);
    if (dt == OKV_F16) return _mm512_castps_si512(_mm512_cvtph_ps(h));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

/* W rows [n0, n0 + rows) (rows a multiple of NR), K [k0, k0 + kc) into
 * micro-panels: wp[(jp KC + k) NR + n] = W[n0 + NR jp + n][k0 + k]. */
static TGT void pack_w_chunk(const gemm_job *g, float *wp, int n0, int rows, int k0, int kc) {
    const matmul_job *j = &g->mm;
    const uint16_t *W = j->W;
    for (int i0 = 0; i0 < rows; i0 += 16) {
        float *panel = wp + (size_t)(i0 / NR) * KC * NR + i0 % NR;
        for (int k = 0; k < kc; k += 16) {
            int kv = kc - k < 16 ? kc - k : 16;
            __mmask16 m = (__mmask16)((1u << kv) - 1);
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                int n = n0 + i0 + i;
                r[i] = n < j->N ? w16(W + (size_t)n * j->K, j->wdt, k0 + k, m) : _mm512_setzero_si512();
            }
            okv_transpose16x16_epi32(r); /* r[e]: element k + e of the 16 rows */
            for (int e = 0; e < kv; e++) _mm512_storeu_si512(panel + (size_t)(k + e) * NR, r[e]);
        }
    }
}

/* Quantized W rows [n0, n0 + rows), packed columns [k0, k0 + kc) (kc a
 * multiple of 32): 16 rows dequantized into stage, then transposed as
 * pack_w_chunk transposes float rows. */
static TGT void pack_w_chunk_quant(const gemm_job *g, float *wp, float *stage, int n0, int rows, int k0, int kc) {
    for (int i0 = 0; i0 < rows; i0 += 16) {
        float *panel = wp + (size_t)(i0 / NR) * KC * NR + i0 % NR;
        okv_qmm_stage_rows(g->q, n0 + i0, 16, g->mm.N, k0, kc, stage, KC);
        for (int k = 0; k < kc; k += 16) {
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(stage + (size_t)i * KC + k);
            okv_transpose16x16_epi32(r);
#pragma GCC unroll 16
            for (int e = 0; e < 16; e++) _mm512_storeu_si512(panel + (size_t)(k + e) * NR, r[e]);
        }
    }
}

/* W row (n0 + i)'s bytes of chunk [k0, k0 + kc) towards L2. */
static inline void prefetch_w_row(const matmul_job *j, int n, int k0, int kc) {
    if (n >= j->N || !j->W) return; /* quantized W: its producer reads the codes front to back */
    const char *p = (const char *)((const uint16_t *)j->W + (size_t)n * j->K + k0);
    for (int o = 0; o < kc * 2; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}

/* ---- the micro-kernel ----------------------------------------------------------------- */

/* y rows [t0, t0 + rt) x columns [n0, n0 + nv) (+)= x panel chunk . W
 * micro-panel chunk over kc; first: y = sum + bias. */
INLINE_TGT void kernel_6x64(const matmul_job *j, const float *xp, const float *wp, int kc, int t0, int rt, int n0,
                            int nv, bool first) {
    __m512 acc[MR][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) acc[r][i] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int k = 0; k < kc; k++) {
        __m512 w[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) w[i] = _mm512_loadu_ps(wp + (size_t)k * NR + 16 * i);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m512 b = _mm512_set1_ps(xp[(size_t)k * MR + r]);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) acc[r][i] = _mm512_fmadd_ps(b, w[i], acc[r][i]);
        }
    }
    okv_tile6x64_store(j->y, j->N, j->bias, t0, rt, n0, nv, first, acc);
}

/* ---- the task ------------------------------------------------------------------------- */

static TGT void gemm_task(void *ctx, int task, int thread) {
    const gemm_job *g = ctx;
    const matmul_job *j = &g->mm;
    const int K = j->K;
    int n0 = task * g->nb, rows = j->N - n0 < g->nb ? j->N - n0 : g->nb;
    rows = (rows + NR - 1) / NR * NR;
    float *wp = g->wp + (size_t)thread * g->wp_elems, *stage = g->stage + (size_t)thread * g->stage_elems;
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? K - k0 : KC, k1 = k0 + kc, kc1 = K - k1 < KC ? K - k1 : KC;
        if (g->q) pack_w_chunk_quant(g, wp, stage, n0, rows, k0, kc);
        else pack_w_chunk(g, wp, n0, rows, k0, kc);
        int step = 0, per = (rows + (rows / NR) * g->panels - 1) / ((rows / NR) * g->panels); /* rows per call */
        for (int jp = 0; jp < rows / NR; jp++) {
            const float *w = wp + (size_t)jp * KC * NR;
            int nn = n0 + jp * NR, nv = j->N - nn < NR ? j->N - nn : NR;
            for (int p = 0; p < g->panels; p++, step++) {
                if (k1 < K) /* the next chunk's rows, spread over this chunk's calls */
                    for (int i = step * per; i < (step + 1) * per && i < rows; i++) prefetch_w_row(j, n0 + i, k1, kc1);
                int t0 = p * MR, rt = j->T - t0 < MR ? j->T - t0 : MR;
                kernel_6x64(j, g->xp + ((size_t)p * K + k0) * MR, w, kc, t0, rt, nn, nv, k0 == 0);
            }
        }
    }
}

/* ---- entry ---------------------------------------------------------------------------- */

static int task_rows(int N, int n_threads) { return okv_gemm_task_rows(N, n_threads, NR, NB); }

size_t okv_matmul_avx512_gemm_scratch(int T, int K, int N, int n_threads) {
    if (T <= 1 || K <= 0 || N <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    size_t xp = (size_t)((T + MR - 1) / MR) * MR * (size_t)K, wp = (size_t)task_rows(N, n_threads) * KC;
    size_t stage = (size_t)16 * KC;
    return (xp + (size_t)K + (wp + stage) * (size_t)n_threads) * sizeof(float) + 64;
}

bool okv_matmul_avx512_gemm_takes(int T, int K, int N, okv_dtype wdt) {
    return T > 1 && K > 0 && N > 0 && (wdt == OKV_BF16 || wdt == OKV_F16);
}

/* Runs the packed GEMM on g (g->mm, g->q set); false: no scratch. */
static bool gemm_run(okv_threadpool *tp, gemm_job *g) {
    const matmul_job *j = &g->mm;
    int n_threads = okv_threadpool_size(tp);
    g->panels = (j->T + MR - 1) / MR;
    g->nb = task_rows(j->N, n_threads);
    g->wp_elems = (size_t)g->nb * KC;
    g->stage_elems = (size_t)16 * KC;
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, okv_matmul_avx512_gemm_scratch(j->T, j->K, j->N, n_threads));
    if (!mem) return false;
    g->xp = (float *)mem;
    int32_t *perm = (int32_t *)(g->xp + (size_t)g->panels * MR * j->K);
    g->wp = (float *)(perm + j->K);
    g->stage = g->wp + g->wp_elems * (size_t)n_threads;
    if (g->q) {
        okv_qmm_tile_perm(g->q, perm);
        g->perm = perm;
    }
    okv_threadpool_run(tp, g->panels, pack_x_task, g);
    okv_threadpool_run(tp, (j->N + g->nb - 1) / g->nb, gemm_task, g);
    okv_kscratch_release(&ks);
    return true;
}

void okv_mm_avx512_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                          int N, const float *bias) {
    gemm_job g = {{y, x, T, K, N, W, wdt, bias, 0, NULL}, NULL, NULL, 0, 0, NULL, NULL, NULL, 0, 0};
    if (!gemm_run(tp, &g)) okv_qmm_fail(y, T, N);
}

void okv_qmm_avx512_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                           const okv_qscheme *s, int N, const float *bias) {
    okv_qview v = okv_quant_view(s, W, N, K);
    gemm_job g = {{y, x, T, K, N, NULL, OKV_F32, bias, 0, NULL}, &v, NULL, 0, 0, NULL, NULL, NULL, 0, 0};
    if (!gemm_run(tp, &g)) okv_qmm_fail(y, T, N);
}
