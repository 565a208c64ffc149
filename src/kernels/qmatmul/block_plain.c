/* qmatmul/block_plain.c — y = x @ dequant(W)^T for W stored as GGUF blocks
 * (okv_qblock.h): the integer-dot driver every ISA runs, and its plain C
 * model (activation quantizers and one dot per block type).
 *
 * Algorithm (the one llama.cpp's CPU backend uses, so a GGUF file gives the
 * numbers its own runtime gives): each row of x is quantized into int8
 * activation blocks of the size W's blocks need,
 *     32-element types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): okv_qb_x32
 *         {f32 d, int32 qsum, int8 q[32]}
 *     256-element K-quants (Q2_K .. Q6_K): okv_qb_x256
 *         {f32 d, int16 bsums[16] (sums of q per 16), int8 q[256]}
 * with d = max|x| / 127 and q = round(x / d) (x * (127 / max|x|) rounded to
 * nearest even). A block's dot is then exact integer work plus one or two
 * float terms:
 *     sym 32:    (dw * dx) * sum q_w q_x             (q_w centred: q - 8, q - 16, q)
 *     asym 32:   (dw * dx) * sum q_w q_x + mw * (dx * qsum)
 *     K-quants:  (d * dx) * sum_g sc_g sum_{i in g} q_w q_x
 *                - (dmin * dx) * sum_g mn_g bsum_g   (Q2_K, Q4_K, Q5_K)
 * (g the sub-blocks: 8 of 32 for Q4_K / Q5_K, 16 of 16 for Q2_K, Q3_K,
 * Q6_K; Q3_K's and Q6_K's codes are signed, q - 4 / q - 32). The integer
 * sums are exact in int32 (largest, Q6_K: 16 * 32 * 127 * 128 * 16 < 2^31).
 * Every ISA computes the same integers and the same per-block float terms;
 * only the order in which the blocks' floats are added differs (SIMD keeps
 * partial sums in lanes), so the fast dots match the plain ones to f32
 * summation error (tests/kernels/test_qbmm.c: 1e-5 of sum |w x|).
 * Against the exact product the new error is x's rounding, |dx|/2 per
 * element of a 32- or 256-block.
 *
 * A NaN or inf in a block of x gives d = NaN and codes 0, so its row's
 * outputs are NaN, as in f32.
 *
 * W in the x8 layout (okv_qblock_x8.c: rows interleaved by 8, which the
 * runtime makes at load where the ISA has x8 dots) runs the ISA's dot8,
 * 8 rows a call, with the same arithmetic per row.
 *
 * Threads split N: each output is one task's, so the bits do not depend on
 * the thread count, nor on T (every row goes through the same dot): the
 * deterministic tables run this for every T. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"

/* ---- activation quantizers ------------------------------------------------------------ */

/* 127 / max|x| and max|x| / 127 of n floats; false (d = NaN) for a
 * non-finite block, whose codes the callers write as 0 (x * 0 is NaN for a
 * NaN or inf x, and converting NaN to int is undefined). */
static bool x_scales(const float *x, int n, float *id, float *d) {
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i])) finite = false;
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    if (!finite) {
        *id = 0.0f;
        *d = NAN;
        return false;
    }
    *d = amax / 127.0f;
    *id = amax > 0.0f ? 127.0f / amax : 0.0f;
    return true;
}

static void quant32_plain(const float *x, int K, void *xq) {
    okv_qb_x32 *b = xq;
    for (int blk = 0; blk < K / 32; blk++, x += 32) {
        float id;
        if (!x_scales(x, 32, &id, &b[blk].d)) {
            memset(b[blk].q, 0, sizeof b[blk].q);
            b[blk].qsum = 0;
            continue;
        }
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)nearbyintf(x[i] * id);
            b[blk].q[i] = (int8_t)q;
            sum += q;
        }
        b[blk].qsum = sum;
    }
}

static void quant256_plain(const float *x, int K, void *xq) {
    okv_qb_x256 *b = xq;
    for (int blk = 0; blk < K / 256; blk++, x += 256) {
        float id;
        if (!x_scales(x, 256, &id, &b[blk].d)) {
            memset(b[blk].q, 0, sizeof b[blk].q);
            memset(b[blk].bsums, 0, sizeof b[blk].bsums);
            continue;
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) {
                int q = (int)nearbyintf(x[16 * g + i] * id);
                b[blk].q[16 * g + i] = (int8_t)q;
                sum += q;
            }
            b[blk].bsums[g] = (int16_t)sum;
        }
    }
}

/* ---- block decoding for the plain dots ------------------------------------------------ */

static float f16_at(const uint8_t *p) { return okv_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

/* A 32-element block as signed codes q[32] and its scale / offset:
 * w = d * q (+ m). */
static void decode32(int type, const uint8_t *b, int q[32], float *d, float *m) {
    *m = 0.0f;
    *d = f16_at(b);
    switch (type) {
    case OKV_QB_Q4_0:
        for (int j = 0; j < 16; j++) {
            q[j] = (b[2 + j] & 15) - 8;
            q[j + 16] = (b[2 + j] >> 4) - 8;
        }
        break;
    case OKV_QB_Q4_1:
        *m = f16_at(b + 2);
        for (int j = 0; j < 16; j++) {
            q[j] = b[4 + j] & 15;
            q[j + 16] = b[4 + j] >> 4;
        }
        break;
    case OKV_QB_Q5_0:
    case OKV_QB_Q5_1: {
        bool asym = type == OKV_QB_Q5_1;
        if (asym) *m = f16_at(b + 2);
        const uint8_t *h = b + (asym ? 4 : 2), *qs = h + 4;
        uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        for (int j = 0; j < 16; j++) {
            q[j] = ((qs[j] & 15) | (int)((qh >> j) & 1) << 4) - (asym ? 0 : 16);
            q[j + 16] = ((qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - (asym ? 0 : 16);
        }
        break;
    }
    case OKV_QB_Q8_0:
        for (int j = 0; j < 32; j++) q[j] = (int8_t)b[2 + j];
        break;
    }
}

/* Q4_K / Q5_K's 6-bit scale and min of sub-block j (0..7). */
static void k4_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* A K-quant super-block as codes q[256] (signed where the format centres
 * them), `groups` sub-blocks of 256 / groups with integer scales sc[] and
 * mins mn[]: w = d * sc_g * q - dmin * mn_g. */
static void decode256(int type, const uint8_t *b, int q[256], int sc[16], int mn[16], int *groups, float *d,
                      float *dmin) {
    memset(mn, 0, 16 * sizeof(int));
    *dmin = 0.0f;
    switch (type) {
    case OKV_QB_Q2_K: {
        *groups = 16;
        *d = f16_at(b + 80);
        *dmin = f16_at(b + 82);
        for (int g = 0; g < 16; g++) {
            sc[g] = b[g] & 15;
            mn[g] = b[g] >> 4;
        }
        for (int e = 0; e < 256; e++) { /* e = 128 n + 32 j + 16 half + l */
            int n = e / 128, j = e / 32 % 4, hl = e % 32;
            q[e] = (b[16 + 32 * n + hl] >> (2 * j)) & 3;
        }
        break;
    }
    case OKV_QB_Q3_K: {
        *groups = 16;
        *d = f16_at(b + 108);
        const uint8_t *s = b + 96;
        for (int g = 0; g < 16; g++) {
            int lo = g < 8 ? (s[g] & 15) : (s[g - 8] >> 4);
            int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
            sc[g] = (lo | hi << 4) - 32;
        }
        for (int e = 0; e < 256; e++) {
            int n = e / 128, j = e / 32 % 4, hl = e % 32;
            int low = (b[32 + 32 * n + hl] >> (2 * j)) & 3;
            q[e] = low - ((b[hl] >> (4 * n + j)) & 1 ? 0 : 4);
        }
        break;
    }
    case OKV_QB_Q4_K:
    case OKV_QB_Q5_K: {
        bool five = type == OKV_QB_Q5_K;
        *groups = 8;
        *d = f16_at(b);
        *dmin = f16_at(b + 2);
        for (int g = 0; g < 8; g++) k4_scale_min(g, b + 4, &sc[g], &mn[g]);
        const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int e = 0; e < 256; e++) { /* e = 64 c + 32 hi + l */
            int c = e / 64, hi = e / 32 % 2, l = e % 32;
            int v = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
            if (five && (qh[l] >> (2 * c + hi) & 1)) v += 16;
            q[e] = v;
        }
        break;
    }
    case OKV_QB_Q6_K: {
        *groups = 16;
        *d = f16_at(b + 208);
        for (int g = 0; g < 16; g++) sc[g] = (int8_t)b[192 + g];
        for (int e = 0; e < 256; e++) { /* e = 128 h + 32 k + l */
            int h = e / 128, k = e / 32 % 4, l = e % 32;
            const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
            int low = k % 2 ? ql[l + 32] : ql[l];
            low = k >= 2 ? low >> 4 : low & 15;
            q[e] = (low | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
        }
        break;
    }
    }
}

/* ---- the plain dots ------------------------------------------------------------------- */

/* sum + one block's terms, in the plain dots' order (the x8 plain dots
 * reuse these, so they equal the row dots bit for bit). */
static float acc32_plain(int type, const uint8_t *w, const okv_qb_x32 *x, float sum) {
    int q[32];
    float d, m;
    decode32(type, w, q, &d, &m);
    int32_t isum = 0;
    for (int i = 0; i < 32; i++) isum += q[i] * x->q[i];
    sum += (d * x->d) * (float)isum;
    if (type == OKV_QB_Q4_1 || type == OKV_QB_Q5_1) sum += m * (x->d * (float)x->qsum);
    return sum;
}

static float acc256_plain(int type, const uint8_t *w, const okv_qb_x256 *x, float sum) {
    int q[256], sc[16], mn[16], groups = 16;
    float d = 0.0f, dmin;
    decode256(type, w, q, sc, mn, &groups, &d, &dmin);
    const int gs = 256 / groups;
    int32_t acc = 0, macc = 0;
    for (int g = 0; g < groups; g++) {
        int32_t isum = 0;
        for (int i = 0; i < gs; i++) isum += q[g * gs + i] * x->q[g * gs + i];
        int32_t bsum = x->bsums[g * gs / 16] + (gs == 32 ? x->bsums[g * gs / 16 + 1] : 0);
        acc += sc[g] * isum;
        macc += mn[g] * bsum;
    }
    sum += (d * x->d) * (float)acc;
    if (dmin != 0.0f || macc != 0) sum -= (dmin * x->d) * (float)macc;
    return sum;
}

static float dot32_plain(int type, const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x32 *x = xq;
    const int bytes = okv_qblock_get(type)->bytes;
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += bytes) sum = acc32_plain(type, w, x + blk, sum);
    return sum;
}

static float dot256_plain(int type, const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x256 *x = xq;
    const int bytes = okv_qblock_get(type)->bytes;
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += bytes) sum = acc256_plain(type, w, x + blk, sum);
    return sum;
}

/* The 8 rows of an x8 group (okv_qblock_x8.c) at wg: each row's blocks
 * taken back into file order one at a time, then the row dots' steps. */
static void dot8_plain(int type, const uint8_t *wg, const void *xq, int nb, float out[8]) {
    const okv_qblock_info *b = okv_qblock_get(type);
    const int64_t K = (int64_t)nb * b->elems;
    uint8_t blk[256];
    for (int r = 0; r < 8; r++) {
        float sum = 0.0f;
        for (int c = 0; c < nb; c++) {
            okv_qblock_x8_row(type, wg, K, r, c, c + 1, blk);
            sum = b->elems == 256 ? acc256_plain(type, blk, (const okv_qb_x256 *)xq + c, sum)
                                  : acc32_plain(type, blk, (const okv_qb_x32 *)xq + c, sum);
        }
        out[r] = sum;
    }
}

#define DOT32(T)                                                                                           \
    static float dot_##T##_plain(const uint8_t *w, const void *xq, int nb) { return dot32_plain(OKV_QB_##T, w, xq, nb); } \
    static void dot8_##T##_plain(const uint8_t *w, const void *xq, int nb, float out[8]) { dot8_plain(OKV_QB_##T, w, xq, nb, out); }
#define DOT256(T)                                                                                          \
    static float dot_##T##_plain(const uint8_t *w, const void *xq, int nb) { return dot256_plain(OKV_QB_##T, w, xq, nb); } \
    static void dot8_##T##_plain(const uint8_t *w, const void *xq, int nb, float out[8]) { dot8_plain(OKV_QB_##T, w, xq, nb, out); }
DOT32(Q4_0)
DOT32(Q4_1)
DOT32(Q5_0)
DOT32(Q5_1)
DOT32(Q8_0)
DOT256(Q2_K)
DOT256(Q3_K)
DOT256(Q4_K)
DOT256(Q5_K)
DOT256(Q6_K)

const okv_qb_isa okv_qb_isa_plain = {
    .name = "plain",
    .quant32 = quant32_plain,
    .quant256 = quant256_plain,
    .dot = {[OKV_QB_Q4_0] = dot_Q4_0_plain, [OKV_QB_Q4_1] = dot_Q4_1_plain, [OKV_QB_Q5_0] = dot_Q5_0_plain,
            [OKV_QB_Q5_1] = dot_Q5_1_plain, [OKV_QB_Q8_0] = dot_Q8_0_plain, [OKV_QB_Q2_K] = dot_Q2_K_plain,
            [OKV_QB_Q3_K] = dot_Q3_K_plain, [OKV_QB_Q4_K] = dot_Q4_K_plain, [OKV_QB_Q5_K] = dot_Q5_K_plain,
            [OKV_QB_Q6_K] = dot_Q6_K_plain},
    .dot8 = {[OKV_QB_Q4_0] = dot8_Q4_0_plain, [OKV_QB_Q4_1] = dot8_Q4_1_plain, [OKV_QB_Q5_0] = dot8_Q5_0_plain,
             [OKV_QB_Q5_1] = dot8_Q5_1_plain, [OKV_QB_Q8_0] = dot8_Q8_0_plain, [OKV_QB_Q2_K] = dot8_Q2_K_plain,
             [OKV_QB_Q3_K] = dot8_Q3_K_plain, [OKV_QB_Q4_K] = dot8_Q4_K_plain, [OKV_QB_Q5_K] = dot8_Q5_K_plain,
             [OKV_QB_Q6_K] = dot8_Q6_K_plain},
};

/* ---- the driver ----------------------------------------------------------------------- */

/* Bytes of one row of activation blocks for K inputs against `type`. */
static size_t act_row_bytes(int type, int K) {
    return okv_qblock_get(type)->elems == 256 ? (size_t)(K / 256) * sizeof(okv_qb_x256)
                                              : (size_t)(K / 32) * sizeof(okv_qb_x32);
}

size_t okv_qbmm_scratch(int T, int K) {
    if (T <= 0 || K <= 0) return 0;
    size_t a = (size_t)(K / 32) * sizeof(okv_qb_x32), b = (size_t)(K / 256) * sizeof(okv_qb_x256);
    return (size_t)T * (a > b ? a : b) + 64;
}

typedef struct qbmm_job {
    float *y;
    const float *x;
    int T, K, N;
    const uint8_t *W;
    size_t w_row, x_row;   /* bytes per W row, per activation row */
    int nb;                /* blocks per row */
    okv_qb_quant_fn quant;
    okv_qb_dot_fn dot;
    okv_qb_dot8_fn dot8;   /* x8 W: 8 rows a call (rows_per_task a multiple of 8) */
    const float *bias;
    uint8_t *xq;           /* [T][x_row] */
    int rows_per_task;
} qbmm_job;

static void quant_task(void *ctx, int task, int thread) {
    (void)thread;
    const qbmm_job *j = ctx;
    j->quant(j->x + (size_t)task * j->K, j->K, j->xq + (size_t)task * j->x_row);
}

static void dot_task(void *ctx, int task, int thread) {
    (void)thread;
    const qbmm_job *j = ctx;
    int n0 = task * j->rows_per_task, n1 = n0 + j->rows_per_task < j->N ? n0 + j->rows_per_task : j->N;
    if (j->dot8) {
        for (int n = n0; n < n1; n += 8) {
            const uint8_t *wg = j->W + (size_t)n * j->w_row;
            for (int t = 0; t < j->T; t++) {
                float o[8];
                j->dot8(wg, j->xq + (size_t)t * j->x_row, j->nb, o);
                for (int r = 0; r < 8; r++) j->y[(size_t)t * j->N + n + r] = o[r] + (j->bias ? j->bias[n + r] : 0.0f);
            }
        }
        return;
    }
    for (int n = n0; n < n1; n++) {
        const uint8_t *w = j->W + (size_t)n * j->w_row;
        float b = j->bias ? j->bias[n] : 0.0f;
        for (int t = 0; t < j->T; t++) j->y[(size_t)t * j->N + n] = j->dot(w, j->xq + (size_t)t * j->x_row, j->nb) + b;
    }
}

void okv_qbmm_run(okv_threadpool *tp, const okv_qb_isa *isa, float *y, const float *x, int T, int K, const void *W,
                  const okv_qscheme *s, int N, const float *bias) {
    if (T <= 0 || N <= 0) return;
    const okv_qblock_info *b = okv_qblock_get(s->block);
    qbmm_job j = {y, x, T, K, N, W, 0, 0, 0, NULL, NULL, NULL, bias, NULL, 0};
    j.nb = K / b->elems;
    j.w_row = (size_t)j.nb * (size_t)b->bytes;
    j.x_row = act_row_bytes(s->block, K);
    j.quant = b->elems == 256 ? isa->quant256 : isa->quant32;
    j.dot = isa->dot[s->block];
    if (!j.dot && isa != &okv_qb_isa_plain && okv_qb_isa_avx2()) j.dot = okv_qb_isa_avx2()->dot[s->block]; /* the next ISA down */
    if (!j.dot) j.dot = okv_qb_isa_plain.dot[s->block];
    if (s->x8) { /* the runtime packed W for this ISA; plain if it has no x8 dot */
        j.dot8 = isa->dot8[s->block] ? isa->dot8[s->block] : okv_qb_isa_plain.dot8[s->block];
        if (!j.dot8 || N % 8) {
            okv_qmm_fail(y, T, N);
            return;
        }
    }
    if (!j.quant) j.quant = b->elems == 256 ? okv_qb_isa_plain.quant256 : okv_qb_isa_plain.quant32;
    okv_kscratch ks;
    j.xq = okv_kscratch_get(&ks, tp, okv_qbmm_scratch(T, K));
    if (!j.xq) {
        okv_qmm_fail(y, T, N);
        return;
    }
    if (T == 1) j.quant(x, K, j.xq);
    else okv_threadpool_run(tp, T, quant_task, &j);
    /* Tasks of whole rows: a few per thread for balance, each reading a
     * contiguous run of W (T = 1: one stream; T > 1: the rows stay in L2
     * for all T activation rows). */
    int n_threads = okv_threadpool_size(tp);
    int tasks = n_threads * 8;
    j.rows_per_task = (N + tasks - 1) / tasks;
    if (j.rows_per_task < 4) j.rows_per_task = 4;
    if (j.dot8) j.rows_per_task = (j.rows_per_task + 7) / 8 * 8;
    okv_threadpool_run(tp, (N + j.rows_per_task - 1) / j.rows_per_task, dot_task, &j);
    okv_kscratch_release(&ks);
}

const okv_qb_isa *okv_qb_isa_best(void) {
    const okv_qb_isa *a = okv_qb_isa_avx512();
    if (a) return a;
    a = okv_qb_isa_avx2();
    return a ? a : &okv_qb_isa_plain;
}

static bool isa_has_x8(const okv_qb_isa *isa, int type) {
    return isa && type > OKV_QB_NONE && type < OKV_QB_Q8_K && isa->dot8[type] != NULL;
}
bool okv_qb_x8_avx2(int type) { return isa_has_x8(okv_qb_isa_avx2(), type); }
bool okv_qb_x8_best(int type) { return isa_has_x8(okv_qb_isa_best(), type); }

void okv_matmul_qb_int_plain(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                             const okv_qscheme *s, int N, const float *bias) {
    okv_qbmm_run(tp, &okv_qb_isa_plain, y, x, T, K, W, s, N, bias);
}

void okv_qbmm_int_avx2(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                       const okv_qscheme *s, int N, const float *bias) {
    okv_qbmm_run(tp, okv_qb_isa_avx2(), y, x, T, K, W, s, N, bias);
}

void okv_qbmm_int_avx512(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                         const okv_qscheme *s, int N, const float *bias) {
    okv_qbmm_run(tp, okv_qb_isa_avx512(), y, x, T, K, W, s, N, bias);
}
