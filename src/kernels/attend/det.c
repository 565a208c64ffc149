/* attend/det.c — the batch-invariant attention of the deterministic
 * table (okv_kernels_select_deterministic): each query row's output is a
 * function of its own query and the keys it sees, never of which other rows
 * share its call, of how many there are, or of where the cache put its keys.
 *
 * It is the blocked online-softmax of attend/blocked.c on the same inner loops
 * (okv_attn_ops: okv_attend_simd.inc / okv_attend_q8.inc), with the three
 * things that made a row's sums depend on the batch replaced:
 *   - key blocks are fixed by POSITION: block b holds the keys at positions
 *     [b * KB, (b + 1) * KB), visited in increasing b. The fast kernel
 *     starts its blocks at the first key any row of the task sees and cuts
 *     them at run ends, so a prompt chunked differently, or a cell cache
 *     that scattered a sequence over other runs, regrouped the online
 *     softmax. A block that spans runs is scored piece by piece into one S
 *     (scores are per key) and accumulated piece by piece with c = 1 after
 *     the first (acc * 1 is exact, the FMA chain per output is unchanged),
 *     so one softmax step covers the whole block wherever its keys live;
 *   - no key splits: a task is (kv head, block of query rows), so decode
 *     has kv_heads tasks; the fast kernel's split count depends on T and
 *     the key count and its merge reorders the sums;
 *   - never AMX (bf16 rounding of q, k, p, v from T x G >= 16 on).
 * Keys a row does not see are masked to -inf: exp gives exactly 0, adding 0
 * to the softmax sum and fma(0, v, acc) to the accumulators change nothing,
 * so the blocks' other keys (later positions, other rows' ranges) are exact
 * no-ops. Inner loops are lane-wise (one query vector per lane, one FMA
 * chain per output channel), so a row's neighbours in the task never enter
 * its arithmetic.
 *
 * Scope: one sequence per call (okv_attn_args.vis == NULL; the runner's
 * batched steps call attention once per sequence with that sequence's read
 * runs in position order). Calls with vis go to the fast kernel, which is
 * not batch-invariant.
 *
 * Scratch comes from the pool's workspace (okv_attend_det_scratch_bytes,
 * planned with the arena); nothing is allocated in a step. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "okv_kernels_internal.h"

enum { KB = OKV_ATTN_KB,
       R_TARGET = 64,   /* query vectors (rows x heads of a group) per task */
       VEC = 16 };      /* Rp, the padded vector count, is a multiple of this */

/* How one call is cut: a function of (T, heads, head_dim) only. */
typedef struct det_shape {
    int D, G, Hkv, Tb, n_qblocks, Rp;
    size_t thread_floats; /* QT [D][Rp], S [KB][Rp], stage [KB][D], acc [Rp][D], m, l, c, ones [Rp] */
} det_shape;

static det_shape det_shape_of(int T, int n_heads, int kv_heads, int D) {
    det_shape s = {0};
    s.D = D;
    s.Hkv = kv_heads;
    s.G = n_heads / kv_heads;
    s.Tb = R_TARGET / s.G > 1 ? R_TARGET / s.G : 1;
    if (s.Tb > T) s.Tb = T;
    s.n_qblocks = (T + s.Tb - 1) / s.Tb;
    s.Rp = (s.Tb * s.G + VEC - 1) / VEC * VEC;
    s.thread_floats = 2 * (size_t)s.Rp * D + (size_t)KB * s.Rp + (size_t)KB * D + 4 * (size_t)s.Rp;
    return s;
}

static size_t round64(size_t b) { return (b + 63) / 64 * 64; }

static size_t det_bytes(const det_shape *s, int T, int n_threads) {
    return round64((size_t)2 * T * sizeof(int32_t)) + round64(s->thread_floats * n_threads * sizeof(float));
}

size_t okv_attend_det_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads) {
    if (T <= 0 || kv_heads <= 0 || n_heads < kv_heads || head_dim <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    size_t most = 0; /* Rp grows with t up to one full row block, then stays */
    for (int t = 1; t <= T && t <= R_TARGET; t++) {
        det_shape s = det_shape_of(t, n_heads, kv_heads, head_dim);
        size_t b = det_bytes(&s, T, n_threads);
        if (b > most) most = b;
    }
    det_shape s = det_shape_of(T, n_heads, kv_heads, head_dim);
    size_t b = det_bytes(&s, T, n_threads);
    return b > most ? b : most;
}

typedef struct det_job {
    const okv_attn_args *a;
    const okv_attn_ops *ops; /* = &pool_ops */
    okv_attn_ops pool_ops;   /* the caller's loops with each pool's reads */
    det_shape s;
    int32_t *qlo, *qhi; /* [T] visible logical key range of each row */
    float *scratch;     /* [threads][thread_floats] */
} det_job;

/* A forward-only cursor over the runs: run of logical key idx. */
typedef struct det_cursor {
    int run;
    int32_t start; /* logical index of the run's first key */
} det_cursor;

static const okv_run *cursor_run(const okv_attn_args *a, det_cursor *c, int32_t idx) {
    while (idx >= c->start + a->runs[c->run].n) c->start += a->runs[c->run++].n;
    return &a->runs[c->run];
}

/* Keys of one position block that lie in one run: slot of the first, how
 * many, and where they start in the block. */
typedef struct det_piece {
    int32_t slot;
    int n, at;
} det_piece;

/* From logical key kb (< H), the pieces of kb's position block up to H;
 * returns the block's key count. */
static int block_pieces(const okv_attn_args *a, det_cursor *cur, int32_t kb, int32_t H, det_piece *pc, int *n_pc) {
    const okv_run *r = cursor_run(a, cur, kb);
    int64_t p = (int64_t)r->pos + (kb - cur->start);
    int64_t end_pos = (p / KB + 1) * KB; /* positions are >= 0 */
    int nb = 0;
    *n_pc = 0;
    while (kb + nb < H) {
        int32_t idx = kb + nb;
        r = cursor_run(a, cur, idx);
        int64_t q = (int64_t)r->pos + (idx - cur->start);
        if (q >= end_pos) break;
        int64_t n = cur->start + r->n - idx;
        if (n > end_pos - q) n = end_pos - q;
        if (n > H - idx) n = H - idx;
        pc[(*n_pc)++] = (det_piece){r->slot + (idx - cur->start), (int)n, nb};
        nb += (int)n;
    }
    return nb;
}

static void det_task(void *ctx, int task, int thread) {
    const det_job *j = ctx;
    const okv_attn_args *a = j->a;
    const det_shape *s = &j->s;
    const int D = s->D, Rp = s->Rp, G = s->G;
    int qb = task % s->n_qblocks, kvh = task / s->n_qblocks;
    int t0 = qb * s->Tb, t1 = t0 + s->Tb < a->T ? t0 + s->Tb : a->T;
    int R = (t1 - t0) * G;

    float *QT = j->scratch + s->thread_floats * thread; /* [D][Rp] */
    float *S = QT + (size_t)D * Rp;                      /* [KB][Rp] */
    float *stage = S + (size_t)KB * Rp;                  /* [KB][D] */
    float *acc = stage + (size_t)KB * D;                 /* [Rp][D] */
    float *m = acc + (size_t)Rp * D, *l = m + Rp, *c = l + Rp, *ones = c + Rp;

    for (int r = 0; r < Rp; r++) {
        const float *q = r < R ? a->q + ((size_t)(t0 + r / G) * a->n_heads + kvh * G + r % G) * D : NULL;
        for (int d = 0; d < D; d++) QT[(size_t)d * Rp + r] = q ? q[d] * a->scale : 0.0f;
        m[r] = -INFINITY;
        l[r] = 0.0f;
        ones[r] = 1.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)R * D);
    int32_t L = INT32_MAX, H = 0, maxlo = 0, minhi = INT32_MAX;
    for (int t = t0; t < t1; t++) {
        if (j->qlo[t] > maxlo) maxlo = j->qlo[t];
        if (j->qhi[t] < minhi) minhi = j->qhi[t];
        if (j->qlo[t] >= j->qhi[t]) continue;
        if (j->qlo[t] < L) L = j->qlo[t];
        if (j->qhi[t] > H) H = j->qhi[t];
    }
    const size_t ld = (size_t)s->Hkv * D; /* elements between consecutive keys' rows */
    const okv_dtype kdt = a->kv.k_dtype, vdt = a->kv.v_dtype;
    const size_t khead = okv_kv_row_bytes(kdt, (size_t)kvh * D), vhead = okv_kv_row_bytes(vdt, (size_t)kvh * D);
    det_cursor cur = {0, 0};
    det_piece pc[KB];
    for (int32_t kb = L; kb < H;) {
        int n_pc, nb = block_pieces(a, &cur, kb, H, pc, &n_pc);
        for (int i = 0; i < n_pc; i++) {
            const char *K = (const char *)a->kv.k + okv_kv_row_bytes(kdt, (size_t)pc[i].slot * ld) + khead;
            j->ops->scores(S + (size_t)pc[i].at * Rp, QT, Rp, K, kdt, ld, pc[i].n, D, stage);
        }
        if (!(maxlo <= kb && kb + nb <= minhi))
            for (int r = 0; r < R; r++) {
                int64_t lo = (int64_t)j->qlo[t0 + r / G] - kb, hi = (int64_t)j->qhi[t0 + r / G] - kb;
                if (lo <= 0 && hi >= nb) continue;
                for (int i = 0; i < nb; i++)
                    if (i < lo || i >= hi) S[(size_t)i * Rp + r] = -INFINITY;
            }
        j->ops->softmax(S, nb, Rp, m, l, c);
        for (int i = 0; i < n_pc; i++) {
            const char *V = (const char *)a->kv.v + okv_kv_row_bytes(vdt, (size_t)pc[i].slot * ld) + vhead;
            j->ops->accumulate(acc, i ? ones : c, S + (size_t)pc[i].at * Rp, Rp, R, V, vdt, ld, pc[i].n, D);
        }
        kb += nb;
    }
    for (int r = 0; r < R; r++) {
        float *o = a->out + ((size_t)(t0 + r / G) * a->n_heads + kvh * G + r % G) * D;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int d = 0; d < D; d++) o[d] = acc[(size_t)r * D + d] * inv;
    }
}

static void det_attend(okv_threadpool *tp, const okv_attn_args *a, const okv_attn_ops *base) {
    if (a->T <= 0) return;
    if (a->vis) { /* several sequences in one call: outside this kernel's contract */
        okv_attend_fast(tp, a, base);
        return;
    }
    det_job j = {0};
    j.a = a;
    j.pool_ops = okv_attn_ops_for_pools(base, a->kv.k_dtype, a->kv.v_dtype);
    j.ops = &j.pool_ops;
    j.s = det_shape_of(a->T, a->n_heads, a->kv.kv_heads, a->kv.head_dim);
    int n_threads = okv_threadpool_size(tp);
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, det_bytes(&j.s, a->T, n_threads));
    if (!mem) {
        size_t n = (size_t)a->T * a->n_heads * a->kv.head_dim;
        for (size_t i = 0; i < n; i++) a->out[i] = NAN;
        return;
    }
    j.qlo = (int32_t *)mem;
    j.qhi = j.qlo + a->T;
    j.scratch = (float *)(mem + round64((size_t)2 * a->T * sizeof(int32_t)));
    okv_attn_query_ranges(a, 0, j.qlo, j.qhi); /* vis is NULL here: n_keys unused */
    okv_threadpool_run(tp, j.s.Hkv * j.s.n_qblocks, det_task, &j);
    okv_kscratch_release(&ks);
}

void okv_attend_det_plain(okv_threadpool *tp, const okv_attn_args *a) { det_attend(tp, a, &okv_attn_ops_plain); }
void okv_attend_det_avx2(okv_threadpool *tp, const okv_attn_args *a) { det_attend(tp, a, &okv_attn_ops_avx2); }
void okv_attend_det_avx512(okv_threadpool *tp, const okv_attn_args *a) { det_attend(tp, a, &okv_attn_ops_avx512); }
