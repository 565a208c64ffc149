/* matmul/gemm_avx2.c — prefill matmul (T > 1) on 256-bit f32 FMAs with
 * both operands packed per call, for bf16 / f16 weights and for quantized
 * (q8 / q4) weights dequantized on the fly: the avx2 table's prompt path.
 *
 * Why: the dot-product tiles of matmul/dot_avx2.c (4 x rows x 3 W rows,
 * horizontal sums) load and convert each W vector for every 4 x rows and
 * spend 7 loads per 12 FMAs; the integer quantized path (vpmaddubsw +
 * vpmaddwd) needs 3 instructions per 32 products and a scale FMA per group.
 * Here each W element is converted (or dequantized) to f32 once per call
 * and each loaded W vector feeds 4 FMAs, each broadcast x value 3.
 *
 * Shapes (y[T,N] = x[T,K] W[N,K]^T + bias):
 *   1. x is packed once per call into panels of MR = 4 rows: xp[p][e][r] =
 *      x[4p + r][perm[e]] (f32, rows past T zero; perm the identity for
 *      float W, the codes' memory order for quantized W, okv_qmm_tile_perm:
 *      a row of codes is then dequantized front to back);
 *   2. a task owns NB rows of W; K is taken KC at a time: the task turns
 *      its rows' chunk into f32 micro-panels of NR = 24 rows, wp[j][e][n] =
 *      W[n0 + 24 j + n][e] (8 x 8 transposes; rows past N zero; KC * 96
 *      bytes a micro-panel, stays in L1);
 *   3. for each micro-panel, every x panel's chunk (in L2) runs the 4 x 24
 *      micro-kernel: 12 ymm accumulators, per k 3 W loads + 4 broadcasts
 *      feed 12 FMAs; the tile is added into y (+ bias on the first chunk).
 *      (BLIS's Haswell shape, 6 x 16, takes 8 loads per 12 FMAs; 4 x 24
 *      measured 1.13x it on a whole layer's seven matmuls, 2 threads,
 *      median of 5 interleaved pairs, 1.00-1.26x, and 1.02x on whole
 *      bench_prefill processes of the bf16 Llama-3.2-1B, median of 7
 *      pairs, 0.88-1.14x; 3 x 32 spills, 0.55x.)
 * Every output is the same sum (chunk by chunk in e order) whatever thread
 * or tile computes it: results depend only on (T, K, N) and the scheme.
 * Products are exact for float W (bf16 / f16 widen exactly), sums f32: the
 * plain path's precision. Quantized W is w = d (c - off) or d c + m in f32
 * as okv_dequant_row computes it, so this is okv_matmul_q_plain's math
 * (f32 x, no int8 activations) in another summation order.
 *
 * Memory: scratch per call x panels ceil(T/4)*4*K*4 bytes (T = 512, K =
 * 8192: 16.8 MB), K int32 of perm, and per thread NB*KC*4 + 8*KC*4 bytes;
 * no weight copy outlives the call.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (matmul/gemm_avx2.c). */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "simd/avx2.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Blocking (BLIS's loops, L1 32 KiB and L2 512 KiB per Zen 3 core): the
 * W micro-panel in L1, the task's W chunk, the x block and its y block in
 * L2. Other blockings measured the same within this VM's noise (whole
 * layer, 2 threads, medians of 5, 3 rounds: KC 256 / NB 128 / MC 16
 * 137-142 GFLOP/s; 512 / 64 / all 138-149; 1024 / 32 / 8 139-152; 256 /
 * 256 / 8 132-142). */
enum { MR = 4,             /* x rows per micro-kernel */
       NR = 24,            /* W rows per micro-kernel */
       NV = NR / 8,        /* its ymm vectors: MR x NV = 12 accumulators */
       KC = 256,           /* K per chunk: a micro-panel is 24 KiB of f32 */
       NB = 128 / NR * NR, /* W rows per task (120): its chunk is 120 KiB */
       MC = 96 / MR        /* x panels per block: 96 rows x KC = 96 KiB, y block 45 KiB */ };

typedef struct gemm_job {
    matmul_job mm;      /* float W (mm.W, mm.wdt), or only the shapes for quantized W */
    const okv_qview *q; /* quantized W, else NULL */
    const int32_t *perm; /* [K] x column of packed column e (NULL: identity) */
    int panels;         /* x panels: ceil(T / MR) */
    int nb;             /* W rows per task (multiple of NR) */
    float *xp;          /* [panels][K][MR] */
    float *wp;          /* per thread: [nb / NR][KC][NR] */
    float *stage;       /* per thread: [8][KC], quantized rows dequantized before the transpose */
    size_t wp_elems, stage_elems;
} gemm_job;

/* ---- x packing -------------------------------------------------------------------------- */

static void pack_x_panel(const gemm_job *g, int p) {
    const matmul_job *j = &g->mm;
    okv_gemm_pack_x_panel(g->xp + (size_t)p * j->K * MR, j->x, j->T, j->K, MR, g->perm, p);
}

static void pack_x_task(void *ctx, int task, int thread) {
    (void)thread;
    pack_x_panel(ctx, task);
}

/* ---- W packing -------------------------------------------------------------------------- */

/* r[8] (8 x 8 floats) transposed in place: r[e] becomes element e of the 8 rows. */
INLINE_TGT void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}

/* 8 elements of a bf16 / f16 row from element k as f32 (kv < 8: the rest zero). */
INLINE_TGT __m256 w8(const uint16_t *row, okv_dtype dt, int k, int kv) {
    if (kv == 8) return okv_load8_half(row + k, dt);
    uint16_t tmp[8] = {0};
    memcpy(tmp, row + k, sizeof(uint16_t) * (size_t)kv);
    return okv_load8_half(tmp, dt);
}

/* Eight transposed vectors into the micro-panel: panel[(k + e) NR] gets r[e]. */
INLINE_TGT void store_transposed(float *panel, int k, int kv, __m256 r[8]) {
    for (int e = 0; e < kv; e++) _mm256_storeu_ps(panel + (size_t)(k + e) * NR, r[e]);
}

/* Float W rows [n0, n0 + rows) (rows a multiple of NR), K [k0, k0 + kc)
 * into micro-panels: wp[(jp KC + e) NR + n] = W[n0 + NR jp + n][k0 + e]. */
static TGT void pack_w_chunk_float(const gemm_job *g, float *wp, int n0, int rows, int k0, int kc) {
    const matmul_job *j = &g->mm;
    const uint16_t *W = j->W;
    for (int i0 = 0; i0 < rows; i0 += 8) {
        float *panel = wp + (size_t)(i0 / NR) * KC * NR + i0 % NR;
        for (int k = 0; k < kc; k += 8) {
            int kv = kc - k < 8 ? kc - k : 8;
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                int n = n0 + i0 + i;
                r[i] = n < j->N ? w8(W + (size_t)n * j->K, j->wdt, k0 + k, kv) : _mm256_setzero_ps();
            }
            transpose8(r);
            store_transposed(panel, k, kv, r);
        }
    }
}

/* Columns [e0, e1) (multiples of 32) of quantized row n in the codes'
 * memory order (okv_qmm_tile_perm), as f32 into dst[e - e0]. A row's codes
 * are stored per superblock of L <= 16 groups in 4-code units interleaved
 * across the groups (okv_quant.c): byte o of a superblock belongs to group
 * o / 4 % L; 8-bit: column o is byte o; 4-bit: per 16 bytes 32 columns,
 * the 16 low nibbles then the 16 high ones. With L even, 8 bytes from a
 * multiple of 8 are 2 groups (2i, 2i + 1), so their scales are one vector
 * built once per superblock; odd L (a tail) goes element by element.
 * Also the AVX-512 packed GEMM's quantized producer. */
TGT void okv_qmm_dequant_cols_f32(const okv_qview *q, int n, int e0, int e1, float *dst) {
    if (q->block != OKV_QB_NONE) { /* GGUF blocks, natural column order */
        okv_qview_block_range(q, n, e0, e1, dst);
        return;
    }
    const int G = q->groups, gs = q->group, off = q->asym ? 0 : 1 << (q->bits - 1);
    const uint8_t *crow = q->codes + (size_t)n * q->code_stride;
    const uint16_t *drow = q->d + (size_t)n * q->scale_stride, *mrow = q->m ? q->m + (size_t)n * q->scale_stride : NULL;
    const __m256i nib = _mm256_set1_epi32(15);
    for (int g0 = e0 / (OKV_QSB_GROUPS * gs) * OKV_QSB_GROUPS; g0 < G && g0 * gs < e1; g0 += OKV_QSB_GROUPS) {
        const int L = G - g0 < OKV_QSB_GROUPS ? G - g0 : OKV_QSB_GROUPS, sb0 = g0 * gs;
        const int a = e0 > sb0 ? e0 - sb0 : 0, b = e1 < sb0 + L * gs ? e1 - sb0 : L * gs;
        const uint8_t *sb = crow + (size_t)g0 * gs * q->bits / 8;
        float *out = dst + (sb0 + a - e0);
        float d[OKV_QSB_GROUPS], m[OKV_QSB_GROUPS];
        for (int l = 0; l < L; l++) {
            d[l] = okv_k_f16(drow[g0 + l]);
            m[l] = mrow ? okv_k_f16(mrow[g0 + l]) : -(float)off * d[l]; /* d (c - off) = d c - off d exactly */
        }
        if (L % 2 == 0) {
            __m256 dv[OKV_QSB_GROUPS / 2], mv[OKV_QSB_GROUPS / 2];
            for (int i = 0; i < L / 2; i++) {
                dv[i] = _mm256_setr_m128(_mm_set1_ps(d[2 * i]), _mm_set1_ps(d[2 * i + 1]));
                mv[i] = _mm256_setr_m128(_mm_set1_ps(m[2 * i]), _mm_set1_ps(m[2 * i + 1]));
            }
            if (q->bits == 8) {
                for (int o = a; o < b; o += 8) {
                    int i = o / 8 % (L / 2);
                    __m256 c = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sb + o))));
                    _mm256_storeu_ps(out + (o - a), _mm256_fmadd_ps(dv[i], c, mv[i]));
                }
            } else {
                for (int el = a; el < b; el += 32) { /* 16 bytes: columns el + [0, 16) low, el + [16, 32) high */
                    int o = el / 2;
                    for (int h = 0; h < 2; h++) {
                        int i = (o + 8 * h) / 8 % (L / 2);
                        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sb + o + 8 * h)));
                        __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(c, nib));
                        __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(c, 4));
                        _mm256_storeu_ps(out + (el - a) + 8 * h, _mm256_fmadd_ps(dv[i], lo, mv[i]));
                        _mm256_storeu_ps(out + (el - a) + 16 + 8 * h, _mm256_fmadd_ps(dv[i], hi, mv[i]));
                    }
                }
            }
            continue;
        }
        for (int el = a; el < b; el++) {
            int o = q->bits == 8 ? el : el / 32 * 16 + el % 16, l = o / 4 % L, c;
            if (q->bits == 8) c = sb[o];
            else c = sb[o] >> (el % 32 >= 16 ? 4 : 0) & 15;
            out[el - a] = fmaf(d[l], (float)c, m[l]);
        }
    }
}

void okv_qmm_stage_rows(const okv_qview *q, int n0, int count, int N, int k0, int kc, float *stage, int ld) {
    for (int i = 0; i < count; i++) {
        if (n0 + i < N) okv_qmm_dequant_cols_f32(q, n0 + i, k0, k0 + kc, stage + (size_t)i * ld);
        else memset(stage + (size_t)i * ld, 0, sizeof(float) * (size_t)kc);
    }
}

/* Quantized W rows [n0, n0 + rows), packed columns [k0, k0 + kc) (kc a
 * multiple of 32): 8 rows dequantized into stage, then transposed. */
static TGT void pack_w_chunk_quant(const gemm_job *g, float *wp, float *stage, int n0, int rows, int k0, int kc) {
    for (int i0 = 0; i0 < rows; i0 += 8) {
        float *panel = wp + (size_t)(i0 / NR) * KC * NR + i0 % NR;
        okv_qmm_stage_rows(g->q, n0 + i0, 8, g->mm.N, k0, kc, stage, KC);
        for (int k = 0; k < kc; k += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(stage + (size_t)i * KC + k);
            transpose8(r);
            store_transposed(panel, k, 8, r);
        }
    }
}

/* ---- the micro-kernel ------------------------------------------------------------------- */

/* y rows [t0, t0 + rt) x columns [n0, n0 + nv) (+)= x panel chunk . W
 * micro-panel chunk over kc; first: y = sum + bias. */
INLINE_TGT void kernel_tile(const matmul_job *j, const float *xp, const float *wp, int kc, int t0, int rt, int n0,
                            int nv, bool first) {
    __m256 acc[MR][NV];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        __m256 w[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) w[v] = _mm256_loadu_ps(wp + (size_t)k * NR + 8 * v);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            __m256 b = _mm256_broadcast_ss(xp + (size_t)k * MR + r);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(b, w[v], acc[r][v]);
        }
    }
    if (nv == NR) { /* full tile: plain loads and stores (masked stores are slow on AMD cores) */
        __m256 bias[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bias[v] = first && j->bias ? _mm256_loadu_ps(j->bias + n0 + 8 * v) : _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) { /* constant r: acc stays in registers */
            if (r >= rt) break;
            float *out = j->y + (size_t)(t0 + r) * j->N + n0;
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                _mm256_storeu_ps(out + 8 * v, _mm256_add_ps(first ? bias[v] : _mm256_loadu_ps(out + 8 * v), acc[r][v]));
        }
        return;
    }
    float tile[MR][NR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(tile[r] + 8 * v, acc[r][v]);
    for (int r = 0; r < rt; r++) {
        float *out = j->y + (size_t)(t0 + r) * j->N + n0;
        for (int n = 0; n < nv; n++) out[n] = (first ? (j->bias ? j->bias[n0 + n] : 0.0f) : out[n]) + tile[r][n];
    }
}

/* ---- the task --------------------------------------------------------------------------- */

static TGT void gemm_task(void *ctx, int task, int thread) {
    const gemm_job *g = ctx;
    const matmul_job *j = &g->mm;
    const int K = j->K;
    int n0 = task * g->nb, rows = j->N - n0 < g->nb ? j->N - n0 : g->nb;
    rows = (rows + NR - 1) / NR * NR;
    float *wp = g->wp + (size_t)thread * g->wp_elems, *stage = g->stage + (size_t)thread * g->stage_elems;
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? K - k0 : KC;
        if (g->q) pack_w_chunk_quant(g, wp, stage, n0, rows, k0, kc);
        else pack_w_chunk_float(g, wp, n0, rows, k0, kc);
        for (int p0 = 0; p0 < g->panels; p0 += MC) { /* x block, W chunk and y block stay in L2 */
            int p1 = p0 + MC < g->panels ? p0 + MC : g->panels;
            for (int jp = 0; jp < rows / NR; jp++) {
                const float *w = wp + (size_t)jp * KC * NR;
                int nn = n0 + jp * NR, nv = j->N - nn < NR ? j->N - nn : NR;
                for (int p = p0; p < p1; p++) {
                    int t0 = p * MR, rt = j->T - t0 < MR ? j->T - t0 : MR;
                    kernel_tile(j, g->xp + ((size_t)p * K + k0) * MR, w, kc, t0, rt, nn, nv, k0 == 0);
                }
            }
        }
    }
}

/* ---- entry ------------------------------------------------------------------------------ */

static int task_rows(int N, int n_threads) { return okv_gemm_task_rows(N, n_threads, NR, NB); }

size_t okv_matmul_avx2_gemm_scratch(int T, int K, int N, int n_threads) {
    if (T <= 1 || K <= 0 || N <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    size_t xp = (size_t)((T + MR - 1) / MR) * MR * (size_t)K, wp = (size_t)task_rows(N, n_threads) * KC;
    size_t stage = (size_t)8 * KC;
    return (xp + (size_t)K + (wp + stage) * (size_t)n_threads) * sizeof(float) + 64;
}

/* Runs the packed GEMM on g (g->mm, g->q set); false: no scratch. */
static bool gemm_run(okv_threadpool *tp, gemm_job *g) {
    const matmul_job *j = &g->mm;
    int n_threads = okv_threadpool_size(tp);
    g->panels = (j->T + MR - 1) / MR;
    g->nb = task_rows(j->N, n_threads);
    g->wp_elems = (size_t)g->nb * KC;
    g->stage_elems = (size_t)8 * KC;
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, okv_matmul_avx2_gemm_scratch(j->T, j->K, j->N, n_threads));
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

void okv_mm_avx2_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                        int N, const float *bias) {
    gemm_job g = {{y, x, T, K, N, W, wdt, bias, 0, NULL}, NULL, NULL, 0, 0, NULL, NULL, NULL, 0, 0};
    if (!gemm_run(tp, &g)) okv_qmm_fail(y, T, N);
}

void okv_qmm_avx2_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                         const okv_qscheme *s, int N, const float *bias) {
    okv_qview v = okv_quant_view(s, W, N, K);
    gemm_job g = {{y, x, T, K, N, NULL, OKV_F32, bias, 0, NULL}, &v, NULL, 0, 0, NULL, NULL, NULL, 0, 0};
    if (!gemm_run(tp, &g)) okv_qmm_fail(y, T, N);
}
