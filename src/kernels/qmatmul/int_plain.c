/* qmatmul/int_plain.c — y = x @ dequant(W)^T for quantized W (okv_quant.h): the
 * plain f32 reference, and the integer-dot algorithm every SIMD version
 * runs (its driver and its plain C model).
 *
 * Reference: dequantizes each W row once into f32 (okv_dequant_row, the
 * layer's own definition of the values) and reuses it for all T rows of x,
 * summing with 8 partial sums.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (qmatmul/int_plain.c). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "okv_kernels_internal.h"

typedef struct qmm_plain_job {
    float *y;
    const float *x;
    int T, K, N;
    const void *W;
    const okv_qscheme *s;
    const float *bias;
    int block_rows;
    float *rows; /* per thread: one dequantized W row [K] */
} qmm_plain_job;

static void qmm_plain_task(void *ctx, int task, int thread) {
    const qmm_plain_job *j = ctx;
    int n0 = task * j->block_rows, n1 = n0 + j->block_rows < j->N ? n0 + j->block_rows : j->N;
    float *w = j->rows + (size_t)thread * j->K;
    for (int n = n0; n < n1; n++) {
        okv_dequant_row(j->s, j->W, j->N, j->K, n, w);
        float b = j->bias ? j->bias[n] : 0.0f;
        for (int t = 0; t < j->T; t++) j->y[(size_t)t * j->N + n] = okv_k_dot8(j->x + (size_t)t * j->K, w, j->K) + b;
    }
}

/* Output filled with NaN: what a kernel without scratch memory returns. */
void okv_qmm_fail(float *y, int T, int N) {
    for (size_t i = 0; i < (size_t)T * N; i++) y[i] = NAN;
}

void okv_matmul_q_plain(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                        const okv_qscheme *s, int N, const float *bias) {
    if (T <= 0 || N <= 0) return;
    int n_threads = okv_threadpool_size(tp);
    qmm_plain_job j = {y, x, T, K, N, W, s, bias, 0, NULL};
    j.block_rows = okv_matmul_block_rows(N, K, OKV_F16, n_threads, 1);
    okv_kscratch ks;
    j.rows = okv_kscratch_get(&ks, tp, okv_matmul_q_plain_scratch(K, n_threads));
    if (!j.rows) {
        okv_qmm_fail(y, T, N);
        return;
    }
    okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, qmm_plain_task, &j);
    okv_kscratch_release(&ks);
}

size_t okv_matmul_q_plain_scratch(int K, int n_threads) { return sizeof(float) * (size_t)n_threads * (size_t)K; }

size_t okv_qact_pair_bytes(int K, int group) {
    size_t sbs = ((size_t)(K / group) + OKV_QSB_GROUPS - 1) / OKV_QSB_GROUPS;
    return sbs * (size_t)(group / 4) * 256;
}

/* The planes, the per-group values, and (T > 1) the row-pair copy. */
size_t okv_qmm_scratch(int T, int K, int groups) {
    size_t qbytes = ((size_t)T * K + 63) / 64 * 64;
    size_t pairs = T > 1 && groups > 0 ? (size_t)(T + 1) / 2 * okv_qact_pair_bytes(K, K / groups) : 0;
    return 2 * qbytes + (size_t)T * groups * 24 + (pairs ? 64 + pairs : 0);
}

void okv_qact_pack_rows(const okv_qmm_job *j, int t0, int t1) {
    const int gs = j->w.group, G = j->w.groups, ups = gs / 4;
    for (int t = t0; t < t1; t++) {
        int8_t *dst = j->a.xp + (size_t)(t / 2) * j->a.xp_pair_bytes + (size_t)(t & 1) * 64;
        const int8_t *q = j->a.q + (size_t)t * j->K, *q2 = j->a.q2 + (size_t)t * j->K;
        for (int sb = 0; sb * OKV_QSB_GROUPS < G; sb++) {
            int L = G - sb * OKV_QSB_GROUPS < OKV_QSB_GROUPS ? G - sb * OKV_QSB_GROUPS : OKV_QSB_GROUPS;
            size_t us = (size_t)4 * L, src = (size_t)sb * OKV_QSB_GROUPS * gs;
            for (int u = 0; u < ups; u++) {
                int8_t *d = dst + ((size_t)sb * ups + u) * 256;
                memcpy(d, q + src + u * us, us);
                memcpy(d + 128, q2 + src + u * us, us);
                if (us < 64) {
                    memset(d + us, 0, 64 - us);
                    memset(d + 128 + us, 0, 64 - us);
                }
            }
        }
    }
}

/* ---- the integer algorithm: driver -------------------------------------------- */

enum { QMM_CHUNK_BYTES = 128 * 1024, /* of W per GEMV claim */
       QMM_MAX_RANGES = 64,
       QMM_X_ROWS_PER_TASK = 8 };

typedef struct qmm_counter {
    _Alignas(64) atomic_int next;
} qmm_counter;

/* The decode split of matmul/dot_avx2.c's GEMV: one contiguous range of
 * rows per thread, claimed in chunks; a thread done with its own range
 * helps with the others. */
typedef struct qmm_gemv_job {
    const okv_qmm_job *j;
    const okv_qmm_ops *ops;
    int n_ranges, range_rows, chunk_rows;
    qmm_counter ranges[QMM_MAX_RANGES];
} qmm_gemv_job;

static void qmm_gemv_task(void *ctx, int task, int thread) {
    (void)thread;
    qmm_gemv_job *g = ctx;
    for (int i = 0; i < g->n_ranges; i++) {
        int r = (task + i) % g->n_ranges;
        int r0 = r * g->range_rows, r1 = r0 + g->range_rows < g->j->N ? r0 + g->range_rows : g->j->N;
        for (;;) {
            int c = atomic_fetch_add_explicit(&g->ranges[r].next, 1, memory_order_relaxed);
            int n0 = r0 + c * g->chunk_rows;
            if (n0 >= r1) break;
            g->ops->gemv(g->j, n0, n0 + g->chunk_rows < r1 ? n0 + g->chunk_rows : r1);
        }
    }
}

static int round_up(int v, int a) { return (v + a - 1) / a * a; }

static void qmm_gemv_run(okv_threadpool *tp, const okv_qmm_ops *ops, const okv_qmm_job *j) {
    qmm_gemv_job g;
    g.j = j;
    g.ops = ops;
    size_t row_bytes = j->w.code_stride + (size_t)j->w.groups * 2 * (j->w.asym ? 2 : 1);
    int chunk = (int)(QMM_CHUNK_BYTES / row_bytes);
    g.chunk_rows = round_up(chunk > 0 ? chunk : 1, 16);
    int n_ranges = okv_threadpool_size(tp);
    if (n_ranges > QMM_MAX_RANGES) n_ranges = QMM_MAX_RANGES;
    g.range_rows = round_up((j->N + n_ranges - 1) / n_ranges, 16);
    g.n_ranges = (j->N + g.range_rows - 1) / g.range_rows;
    for (int r = 0; r < g.n_ranges; r++) atomic_init(&g.ranges[r].next, 0);
    okv_threadpool_run(tp, g.n_ranges, qmm_gemv_task, &g);
}

typedef struct qmm_task_ctx {
    const okv_qmm_job *j;
    const okv_qmm_ops *ops;
    const float *x;
} qmm_task_ctx;

static void qmm_quantize_task(void *ctx, int task, int thread) {
    (void)thread;
    const qmm_task_ctx *c = ctx;
    int t0 = task * QMM_X_ROWS_PER_TASK, t1 = t0 + QMM_X_ROWS_PER_TASK < c->j->T ? t0 + QMM_X_ROWS_PER_TASK : c->j->T;
    for (int t = t0; t < t1; t++) c->ops->quantize(c->j, c->x + (size_t)t * c->j->K, t);
    if (c->j->a.xp) okv_qact_pack_rows(c->j, t0, t1); /* whole pairs: tasks start at even rows */
}

static void qmm_gemm_task(void *ctx, int task, int thread) {
    (void)thread;
    const qmm_task_ctx *c = ctx;
    int n0 = task * c->j->block_rows, n1 = n0 + c->j->block_rows < c->j->N ? n0 + c->j->block_rows : c->j->N;
    c->ops->gemm(c->j, n0, n1);
}

void okv_qmm_run(okv_threadpool *tp, const okv_qmm_ops *ops, float *y, const float *x, int T, int K, const void *W,
                 const okv_qscheme *s, int N, const float *bias, bool invariant) {
    okv_qview v = okv_quant_view(s, W, N, K);
    okv_qmm_run_view(tp, ops, y, x, T, K, &v, N, bias, invariant);
}

void okv_qmm_run_view(okv_threadpool *tp, const okv_qmm_ops *ops, float *y, const float *x, int T, int K,
                      const okv_qview *w, int N, const float *bias, bool invariant) {
    if (T <= 0 || N <= 0) return;
    okv_qmm_job j = {y, T, K, N, *w, {0}, bias, 0};
    j.a.two = invariant || okv_qact_two_planes(w->bits, T);
    int G = j.w.groups;
    size_t tk = (size_t)T * K, tg = (size_t)T * G;
    /* one block: two code planes (64-byte aligned rows when K allows), then per-group values */
    size_t qbytes = (tk + 63) / 64 * 64;
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, okv_qmm_scratch(T, K, G));
    if (!mem) {
        okv_qmm_fail(y, T, N);
        return;
    }
    j.a.q = (int8_t *)mem;
    j.a.q2 = (int8_t *)(mem + qbytes);
    j.a.dx = (float *)(mem + 2 * qbytes);
    j.a.dx2 = j.a.dx + tg;
    j.a.sx = j.a.dx2 + tg;
    j.a.qsum = (int32_t *)(j.a.sx + tg);
    j.a.qsum2 = j.a.qsum + tg;
    if (ops->pairs && T > 1 && j.a.two) {
        uintptr_t at = (uintptr_t)(mem + 2 * qbytes + tg * 24); /* 64-byte aligned in the scratch's slack */
        j.a.xp = (int8_t *)((at + 63) & ~(uintptr_t)63);
        j.a.xp_pair_bytes = okv_qact_pair_bytes(K, j.w.group);
    }
    qmm_task_ctx c = {&j, ops, x};
    if (T == 1) {
        ops->quantize(&j, x, 0);
        qmm_gemv_run(tp, ops, &j);
    } else {
        okv_threadpool_run(tp, (T + QMM_X_ROWS_PER_TASK - 1) / QMM_X_ROWS_PER_TASK, qmm_quantize_task, &c);
        size_t row_bytes = j.w.code_stride + (size_t)G * 2 * (j.w.asym ? 2 : 1);
        int n_threads = okv_threadpool_size(tp);
        int rows = (int)((192 * 1024) / row_bytes); /* the block of W stays in L2 */
        int per_thread = (N + n_threads * 4 - 1) / (n_threads * 4);
        if (rows > 128) rows = 128;
        if (rows > per_thread) rows = per_thread;
        j.block_rows = round_up(rows > 0 ? rows : 1, ops->pairs ? 12 : 4); /* pairs: 6-row tiles */
        okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, qmm_gemm_task, &c);
    }
    okv_kscratch_release(&ks);
}

/* ---- the integer algorithm: plain C model -------------------------------------- */

/* Lanes (groups) of superblock sb of a row with G groups. */
static int sb_lanes(int G, int sb) { return G - sb * OKV_QSB_GROUPS < OKV_QSB_GROUPS ? G - sb * OKV_QSB_GROUPS : OKV_QSB_GROUPS; }

/* Where element i of group g goes in a row's superblock order. */
static size_t act_pos(int gs, int G, int g, int i) {
    int sb = g / OKV_QSB_GROUPS, l = g % OKV_QSB_GROUPS, L = sb_lanes(G, sb);
    return (size_t)sb * OKV_QSB_GROUPS * gs + (size_t)(i / 4) * 4 * L + 4 * l + i % 4;
}

void okv_qact_poison_group(const okv_qmm_job *j, int t, int g) {
    const int gs = j->w.group, G = j->w.groups;
    int8_t *q = j->a.q + (size_t)t * j->K, *q2 = j->a.q2 + (size_t)t * j->K;
    for (int i = 0; i < gs; i++) q[act_pos(gs, G, g, i)] = q2[act_pos(gs, G, g, i)] = 0;
    size_t gi = (size_t)t * G + g;
    j->a.dx[gi] = j->a.dx2[gi] = j->a.sx[gi] = NAN;
    j->a.qsum[gi] = j->a.qsum2[gi] = 0;
}

static void quantize_x_plain(const okv_qmm_job *j, const float *x, int t) {
    const int gs = j->w.group, G = j->w.groups;
    const bool one = !j->a.two;
    int8_t *q = j->a.q + (size_t)t * j->K, *q2 = j->a.q2 + (size_t)t * j->K;
    for (int g = 0; g < G; g++) {
        const float *xg = x + (size_t)g * gs;
        float amax = 0.0f;
        bool bad = false;
        for (int i = 0; i < gs; i++) {
            bad |= !isfinite(xg[i]);
            amax = fabsf(xg[i]) > amax ? fabsf(xg[i]) : amax;
        }
        size_t gi = (size_t)t * G + g;
        if (bad) { /* a non-finite activation makes the outputs NaN, as in f32 */
            okv_qact_poison_group(j, t, g);
            continue;
        }
        float id = amax > 0.0f ? 127.0f / amax : 0.0f, id2 = amax > 0.0f ? 32258.0f / amax : 0.0f;
        float dx = amax / 127.0f;
        int32_t sum = 0, sum2 = 0;
        for (int i = 0; i < gs; i++) {
            float v = nearbyintf(xg[i] * id), v2 = 0.0f;
            if (!one) {
                float p = v * dx;
                float r = xg[i] - p;
                v2 = nearbyintf(r * id2);
                v2 = v2 > 127.0f ? 127.0f : v2 < -127.0f ? -127.0f : v2;
            }
            size_t e = act_pos(gs, G, g, i);
            q[e] = (int8_t)v;
            q2[e] = (int8_t)v2;
            sum += (int)v;
            sum2 += (int)v2;
        }
        j->a.dx[gi] = dx;
        j->a.dx2[gi] = one ? 0.0f : amax / 32258.0f;
        j->a.qsum[gi] = sum;
        j->a.qsum2[gi] = sum2;
        if (one) {
            j->a.sx[gi] = dx * (float)sum;
        } else {
            float sx1 = dx * (float)sum, sx2 = j->a.dx2[gi] * (float)sum2;
            j->a.sx[gi] = sx1 + sx2;
        }
    }
}

/* Sum of 16 lanes in the fixed order every version uses. */
static float reduce16(const float *a) {
    float h8[8], h4[4], h2[2];
    for (int i = 0; i < 8; i++) h8[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++) h4[i] = h8[i] + h8[i + 4];
    for (int i = 0; i < 2; i++) h2[i] = h4[i] + h4[i + 2];
    return h2[0] + h2[1];
}

/* One output: W row n . activation row t, the integer algorithm. */
static float qdot_plain(const okv_qmm_job *j, int n, int t) {
    const okv_qview *w = &j->w;
    const int gs = w->group, G = w->groups, off = w->asym ? 0 : 1 << (w->bits - 1);
    const bool one = !j->a.two;
    const uint8_t *crow = w->codes + (size_t)n * w->code_stride;
    const uint16_t *drow = w->d + (size_t)n * w->scale_stride, *mrow = w->m ? w->m + (size_t)n * w->scale_stride : NULL;
    const int8_t *q = j->a.q + (size_t)t * j->K, *q2 = j->a.q2 + (size_t)t * j->K;
    const size_t a0 = (size_t)t * G;
    float acc[OKV_QSB_GROUPS] = {0};
    for (int sb = 0; sb * OKV_QSB_GROUPS < G; sb++) {
        int L = sb_lanes(G, sb), g0 = sb * OKV_QSB_GROUPS;
        const uint8_t *csb = crow + (size_t)g0 * gs * w->bits / 8;
        const int8_t *qsb = q + (size_t)g0 * gs, *q2sb = q2 + (size_t)g0 * gs;
        int32_t isum[OKV_QSB_GROUPS] = {0}, isum2[OKV_QSB_GROUPS] = {0};
        for (int u = 0; u < gs / 4; u++)
            for (int l = 0; l < L; l++)
                for (int i = 0; i < 4; i++) {
                    int e = 4 * l + i, c;
                    if (w->bits == 8) c = csb[u * 4 * L + e];
                    else c = (csb[(u / 2) * 4 * L + e] >> ((u & 1) * 4)) & 15;
                    isum[l] += c * qsb[u * 4 * L + e];
                    if (!one) isum2[l] += c * q2sb[u * 4 * L + e];
                }
        for (int l = 0; l < OKV_QSB_GROUPS; l++) {
            bool on = l < L;
            size_t ga = a0 + g0 + l;
            float d = on ? okv_k_f16(drow[g0 + l]) : 0.0f;
            float s = d * (on ? j->a.dx[ga] : 0.0f), s2 = d * (on ? j->a.dx2[ga] : 0.0f);
            if (!mrow) {
                float v = (float)(isum[l] - off * (on ? j->a.qsum[ga] : 0));
                float v2 = (float)(isum2[l] - off * (on ? j->a.qsum2[ga] : 0));
                acc[l] = fmaf(s, v, acc[l]);
                if (!one) acc[l] = fmaf(s2, v2, acc[l]);
            } else {
                acc[l] = fmaf(s, (float)isum[l], acc[l]);
                if (!one) acc[l] = fmaf(s2, (float)isum2[l], acc[l]);
                acc[l] = fmaf(on ? okv_k_f16(mrow[g0 + l]) : 0.0f, on ? j->a.sx[ga] : 0.0f, acc[l]);
            }
        }
    }
    return reduce16(acc);
}

static void gemm_plain(const okv_qmm_job *j, int n0, int n1) {
    for (int t = 0; t < j->T; t++)
        for (int n = n0; n < n1; n++)
            j->y[(size_t)t * j->N + n] = qdot_plain(j, n, t) + (j->bias ? j->bias[n] : 0.0f);
}

const okv_qmm_ops okv_qmm_ops_plain = {quantize_x_plain, gemm_plain, gemm_plain, false};

void okv_matmul_q_int_plain(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            const okv_qscheme *s, int N, const float *bias) {
    okv_qmm_run(tp, &okv_qmm_ops_plain, y, x, T, K, W, s, N, bias, false);
}

const okv_qmm_ops *okv_qmm_ops_best(int bits, bool asym) {
    if (okv_qmm_have_avx512vnni()) return okv_qmm_ops_avx512vnni(bits, asym);
    if (okv_qmm_have_avx2()) return okv_qmm_ops_avx2(bits, asym);
    return &okv_qmm_ops_plain;
}
