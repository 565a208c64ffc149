/* attend/blocked.c — the attend half of update_and_attend, twice: a reference
 * that is obviously right, and the blocked (flash-style) kernel the tables
 * use.
 *
 * Reference: gather every key/value of the read runs into contiguous f32,
 * build the explicit [T, n_keys] mask from the visibility rule, softmax in
 * double, weighted sum. Slow and memory-hungry on purpose; it allocates per
 * call (a debugging path: `--reference-attention`, tests).
 *
 * Blocked: no mask is materialised and nothing is allocated (scratch comes
 * from the pool's workspace, sized by okv_attend_scratch_bytes for any key
 * count). A task is (kv head, block of query rows[, key split]): its Rp query
 * vectors are the rows x the G heads sharing that kv head (GQA without
 * repeating K/V), transposed once so the score loop runs along queries.
 * Keys stream by in blocks of OKV_ATTN_KB: each block of K is read once for
 * all Rp vectors (f16/bf16 converted once into an L1 stage), each V row once
 * per register tile of accumulators; softmax is online (running max m, sum l,
 * rescaled accumulator). One sequence: each query sees one contiguous range
 * of the logical key index (positions increase along the runs), so only the
 * blocks at a range's edges are masked and blocks nobody sees are skipped.
 * Many sequences (okv_attn_vis): every block is masked per (key, query) from
 * owner bits and positions. A decode-sized step (one row block) takes all kv
 * heads per task, so the pool ([slot, kv head, dim]) is swept contiguously,
 * and splits the keys over the threads; the splits' partial (m, l, acc) are
 * merged at the end. Only the inner loops differ per ISA (okv_attn_ops).
 *
 * Measured (bench_kernels attn, Llama-3.2-1B geometry 32/8 x 64, 2 threads,
 * loaded shared machine): see README "Numbers" and bench/kernels. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "okv_kernels_internal.h"

/* Fills the output with NaN: the only way a void kernel can show that it
 * could not get memory, and impossible to mistake for a result. */
static void fill_nan(const okv_attn_args *a) {
    size_t n = (size_t)a->T * a->n_heads * a->kv.head_dim;
    for (size_t i = 0; i < n; i++) a->out[i] = NAN;
}

static bool pos_visible(int32_t key_pos, int32_t q_pos, int32_t window) {
    return key_pos <= q_pos && (window == 0 || (int64_t)q_pos - key_pos < window);
}

/* Whether query t may see logical key j (slot `slot`, position kpos if
 * there is no vis) under the contract in okv_kernels.h. */
static bool key_visible(const okv_attn_args *a, int t, int32_t slot, int32_t kpos) {
    const okv_attn_vis *v = a->vis;
    if (!v) return pos_visible(kpos, a->positions[t], a->window);
    int s = v->q_seq[t];
    if (s < 0 || s >= OKV_ATTN_MAX_SEQS || !((v->k_owner[slot] >> s) & 1u)) return false;
    return pos_visible(v->k_pos[slot], a->positions[t], a->window);
}

static int runs_total(const okv_run *runs, int n_runs) {
    int n = 0;
    for (int r = 0; r < n_runs; r++) n += runs[r].n;
    return n;
}

/* ---- reference ------------------------------------------------------------------ */

void okv_attend_reference(const okv_attn_args *a) {
    const int D = a->kv.head_dim, Hkv = a->kv.kv_heads, G = a->n_heads / Hkv;
    const int n_keys = runs_total(a->runs, a->n_runs);
    const size_t row = (size_t)Hkv * D;
    float *kf = malloc(((size_t)n_keys * row + 1) * sizeof *kf);
    float *vf = malloc(((size_t)n_keys * row + 1) * sizeof *vf);
    int32_t *kpos = malloc(((size_t)n_keys + 1) * sizeof *kpos), *kslot = malloc(((size_t)n_keys + 1) * sizeof *kslot);
    float *mask = malloc(((size_t)a->T * n_keys + 1) * sizeof *mask);
    double *p = malloc(((size_t)n_keys + 1) * sizeof *p);
    if (!kf || !vf || !kpos || !kslot || !mask || !p) {
        fill_nan(a);
        goto done;
    }
    /* 1. gather the read span into contiguous f32 */
    int j = 0;
    for (int r = 0; r < a->n_runs; r++) {
        for (int i = 0; i < a->runs[r].n; i++, j++) {
            size_t slot = (size_t)(a->runs[r].slot + i);
            for (size_t e = 0; e < row; e++) {
                size_t kat = okv_kv_row_bytes(a->kv.k_dtype, slot * row), vat = okv_kv_row_bytes(a->kv.v_dtype, slot * row);
                kf[j * row + e] = okv_k_load((const char *)a->kv.k + kat, a->kv.k_dtype, e);
                vf[j * row + e] = okv_k_load((const char *)a->kv.v + vat, a->kv.v_dtype, e);
            }
            kpos[j] = a->runs[r].pos + i;
            kslot[j] = a->runs[r].slot + i;
        }
    }
    /* 2. the explicit mask: 0 where visible, -inf elsewhere */
    for (int t = 0; t < a->T; t++)
        for (j = 0; j < n_keys; j++)
            mask[(size_t)t * n_keys + j] = key_visible(a, t, kslot[j], kpos[j]) ? 0.0f : -INFINITY;
    /* 3. softmax(q.k * scale + mask) @ v per query row and head */
    for (int t = 0; t < a->T; t++) {
        for (int h = 0; h < a->n_heads; h++) {
            const float *q = a->q + ((size_t)t * a->n_heads + h) * D;
            float *o = a->out + ((size_t)t * a->n_heads + h) * D;
            int kvh = h / G;
            double mx = -INFINITY;
            for (j = 0; j < n_keys; j++) {
                const float *k = kf + j * row + (size_t)kvh * D;
                double s = 0.0;
                for (int d = 0; d < D; d++) s += (double)q[d] * k[d];
                p[j] = s * a->scale + mask[(size_t)t * n_keys + j];
                if (p[j] > mx) mx = p[j];
            }
            double sum = 0.0;
            for (j = 0; j < n_keys; j++) {
                p[j] = mx == -INFINITY ? 0.0 : exp(p[j] - mx);
                sum += p[j];
            }
            for (int d = 0; d < D; d++) {
                double acc = 0.0;
                for (j = 0; j < n_keys; j++) acc += p[j] * vf[j * row + (size_t)kvh * D + d];
                o[d] = sum > 0.0 ? (float)(acc / sum) : 0.0f;
            }
        }
    }
done:
    free(kf);
    free(vf);
    free(kpos);
    free(kslot);
    free(mask);
    free(p);
}

/* ---- blocked -------------------------------------------------------------------- */

enum { KB = OKV_ATTN_KB,
       R_TARGET = 64,     /* query vectors (rows x heads of a group) per prefill task */
       MIN_SPLIT = 128,   /* fewest keys worth a task of their own */
       VEC = 16 };        /* Rp, the padded vector count, is a multiple of this */

/* How one call's work is cut: a function of (T, heads, head_dim) only, so
 * the scratch can be planned before the keys are known. */
typedef struct attn_shape {
    int D, G, Hkv;
    int HG;            /* kv heads per task: 1, or all of them (one row block: decode) */
    int n_hgroups, Tb, n_qblocks, R_max, Rp, base_tasks;
    size_t part_floats; /* per task: acc [HG][Rp][D], m, l [HG][Rp] */
    size_t thread_floats; /* per thread: QT, S, stage, own (acc, m, l), c, lo/hi */
} attn_shape;

static attn_shape shape_of(int T, int n_heads, int kv_heads, int D) {
    attn_shape s = {0};
    s.D = D;
    s.Hkv = kv_heads;
    s.G = n_heads / kv_heads;
    s.Tb = R_TARGET / s.G > 1 ? R_TARGET / s.G : 1;
    if (s.Tb > T) s.Tb = T;
    s.n_qblocks = (T + s.Tb - 1) / s.Tb;
    s.R_max = s.Tb * s.G;
    s.Rp = (s.R_max + VEC - 1) / VEC * VEC;
    s.HG = s.n_qblocks == 1 ? s.Hkv : 1;
    s.n_hgroups = s.Hkv / s.HG;
    s.base_tasks = s.n_hgroups * s.n_qblocks;
    size_t hv = (size_t)s.HG * s.Rp;
    s.part_floats = hv * D + 2 * hv;
    s.thread_floats = hv * D + (size_t)KB * s.Rp + (size_t)KB * D + s.part_floats + hv + 2 * (size_t)s.Rp;
    return s;
}

/* Key splits for a decode-sized call: when (head group, row block) tasks
 * cannot keep the threads busy, the keys are split too. */
static int splits_for(const attn_shape *s, int n_keys, int n_threads) {
    if (n_threads <= 1 || s->base_tasks >= 4 * n_threads) return 1;
    int n = (4 * n_threads + s->base_tasks - 1) / s->base_tasks;
    if (n_keys >= 0 && n > n_keys / MIN_SPLIT) n = n_keys / MIN_SPLIT; /* n_keys < 0: the most possible */
    return n > 1 ? n : 1;
}

static size_t round64(size_t b) { return (b + 63) / 64 * 64; }

/* Scratch bytes: qlo/qhi [T], the threads' buffers, the splits' partials. */
static size_t scratch_bytes(const attn_shape *s, int T, int n_threads, int n_splits) {
    size_t b = round64((size_t)2 * T * sizeof(int32_t)) + round64(s->thread_floats * n_threads * sizeof(float));
    if (n_splits > 1) b += round64(s->part_floats * s->base_tasks * n_splits * sizeof(float));
    return b;
}

size_t okv_attend_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads) {
    if (T <= 0 || kv_heads <= 0 || n_heads < kv_heads || head_dim <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    size_t most = 0;
    /* not monotonic in T: a call with one row block (T <= R_TARGET / G)
     * takes all kv heads per task and splits keys; those are few, so exact */
    for (int t = 1; t <= T && t <= R_TARGET; t++) {
        attn_shape s = shape_of(t, n_heads, kv_heads, head_dim);
        size_t b = scratch_bytes(&s, t, n_threads, splits_for(&s, -1, n_threads));
        if (b > most) most = b;
    }
    if (T > R_TARGET) { /* every larger t has the same per-thread buffers and
                         * base_tasks(t) * splits <= 4 n_threads + base_tasks(T) tasks */
        attn_shape s = shape_of(T, n_heads, kv_heads, head_dim);
        size_t b = round64((size_t)2 * T * sizeof(int32_t)) + round64(s.thread_floats * n_threads * sizeof(float));
        if (s.base_tasks < 4 * n_threads)
            b += round64(s.part_floats * ((size_t)4 * n_threads + s.base_tasks) * sizeof(float));
        if (b > most) most = b;
    }
    size_t amx = okv_attend_amx_scratch_bytes(T, n_heads, kv_heads, head_dim, n_threads);
    size_t dec = okv_attend_decode_scratch_bytes(T, n_heads, kv_heads, head_dim, n_threads);
    if (dec > amx) amx = dec;
    return amx > most ? amx : most;
}

typedef struct attn_job {
    const okv_attn_args *a;
    const okv_attn_ops *ops; /* = &pool_ops */
    okv_attn_ops pool_ops;   /* the caller's loops with each pool's reads */
    attn_shape s;
    int n_keys, n_splits, split_len;
    int32_t *qlo, *qhi; /* [T] visible logical key range of each query row */
    float *scratch;     /* [threads][thread_floats] */
    float *part;        /* n_splits > 1: [tasks][part_floats] */
} attn_job;

/* One sequence: the logical key range [lo, hi) a query at position p may
 * see. Positions increase along the runs, so it is one range. */
static void visible_range(const okv_attn_args *a, int32_t p, int32_t *lo, int32_t *hi) {
    int64_t plo = a->window > 0 ? (int64_t)p - a->window + 1 : INT64_MIN;
    int32_t off = 0;
    bool found = false;
    *lo = *hi = 0;
    for (int r = 0; r < a->n_runs; off += a->runs[r].n, r++) {
        int64_t first = a->runs[r].pos, last = first + a->runs[r].n - 1;
        if (a->runs[r].n <= 0 || last < plo || first > p) continue;
        int64_t from = plo > first ? plo : first, to = p < last ? p : last;
        if (!found) *lo = off + (int32_t)(from - first);
        *hi = off + (int32_t)(to - first) + 1;
        found = true;
    }
}

/* A cursor over the runs that only moves forward: the pool slot of logical
 * key idx and where its run ends (logical index). */
typedef struct key_cursor {
    int run;
    int32_t start; /* logical index of the run's first key */
} key_cursor;

static int32_t cursor_slot(const okv_attn_args *a, key_cursor *c, int32_t idx, int32_t *run_end) {
    while (idx >= c->start + a->runs[c->run].n) c->start += a->runs[c->run++].n;
    *run_end = c->start + a->runs[c->run].n;
    return a->runs[c->run].slot + (idx - c->start);
}

/* Many sequences: whether any row of [t0, t1) sees any of the block's keys. */
static bool block_seen(const okv_attn_args *a, int t0, int t1, int32_t slot0, int nb) {
    for (int i = 0; i < nb; i++)
        for (int t = t0; t < t1; t++)
            if (key_visible(a, t, slot0 + i, 0)) return true;
    return false;
}

/* Sets the invisible scores of a block S[nb][Rp] (keys kb.., slots slot0..)
 * to -inf for the R vectors of rows from t0. */
static void mask_block(const attn_job *j, float *S, int32_t kb, int nb, int32_t slot0, int R, const int32_t *vlo,
                       const int32_t *vhi, int t0) {
    const okv_attn_args *a = j->a;
    const int Rp = j->s.Rp, G = j->s.G;
    if (!a->vis) {
        for (int r = 0; r < R; r++) {
            int64_t lo = (int64_t)vlo[r] - kb, hi = (int64_t)vhi[r] - kb;
            if (lo <= 0 && hi >= nb) continue;
            for (int i = 0; i < nb; i++)
                if (i < lo || i >= hi) S[(size_t)i * Rp + r] = -INFINITY;
        }
        return;
    }
    for (int i = 0; i < nb; i++)
        for (int r = 0; r < R; r++)
            if (!key_visible(a, t0 + r / G, slot0 + i, 0)) S[(size_t)i * Rp + r] = -INFINITY;
}

/* Query vector r of a row block (rows from t0) of kv head kvh: row and head. */
static int row_of(const attn_shape *s, int t0, int r) { return t0 + r / s->G; }
static int head_of(const attn_shape *s, int kvh, int r) { return kvh * s->G + r % s->G; }

static void attn_task(void *ctx, int task, int thread) {
    const attn_job *j = ctx;
    const okv_attn_args *a = j->a;
    const attn_shape *s = &j->s;
    const int D = s->D, HG = s->HG, Rp = s->Rp;
    int split = task % j->n_splits;
    int qb = (task / j->n_splits) % s->n_qblocks;
    int h0 = task / j->n_splits / s->n_qblocks * HG;
    int t0 = qb * s->Tb, t1 = t0 + s->Tb < a->T ? t0 + s->Tb : a->T;
    int R = (t1 - t0) * s->G;

    float *QT = j->scratch + s->thread_floats * thread;   /* [HG][D][Rp] */
    float *S = QT + (size_t)HG * D * Rp;                   /* [KB][Rp] */
    float *stage = S + (size_t)KB * Rp;                    /* [KB][D] */
    float *own = stage + (size_t)KB * D;                   /* acc, m, l when not split */
    float *c = own + s->part_floats;                       /* [HG][Rp] */
    int32_t *vlo = (int32_t *)(c + (size_t)HG * Rp), *vhi = vlo + Rp;
    float *acc = j->n_splits > 1 ? j->part + s->part_floats * task : own; /* [HG][Rp][D] */
    float *m = acc + (size_t)HG * Rp * D, *l = m + (size_t)HG * Rp;

    for (int hh = 0; hh < HG; hh++) {
        float *qt = QT + (size_t)hh * D * Rp;
        for (int r = 0; r < Rp; r++) {
            const float *q = r < R ? a->q + ((size_t)row_of(s, t0, r) * a->n_heads + head_of(s, h0 + hh, r)) * D : NULL;
            for (int d = 0; d < D; d++) qt[(size_t)d * Rp + r] = q ? q[d] * a->scale : 0.0f;
            m[hh * Rp + r] = -INFINITY;
            l[hh * Rp + r] = 0.0f;
        }
        memset(acc + (size_t)hh * Rp * D, 0, sizeof(float) * (size_t)R * D);
    }
    /* keys any row of the block may see, within this split */
    int32_t L = INT32_MAX, H = 0, maxlo = 0, minhi = INT32_MAX;
    for (int t = t0; t < t1; t++) {
        if (j->qlo[t] > maxlo) maxlo = j->qlo[t];
        if (j->qhi[t] < minhi) minhi = j->qhi[t];
        if (j->qlo[t] >= j->qhi[t]) continue;
        if (j->qlo[t] < L) L = j->qlo[t];
        if (j->qhi[t] > H) H = j->qhi[t];
    }
    for (int r = 0; r < Rp; r++) {
        vlo[r] = r < R ? j->qlo[row_of(s, t0, r)] : 0;
        vhi[r] = r < R ? j->qhi[row_of(s, t0, r)] : INT32_MAX;
    }
    int32_t k0 = split * j->split_len, k1 = k0 + j->split_len;
    if (L < k0) L = k0;
    if (H > k1) H = k1;

    const size_t ld = (size_t)s->Hkv * D; /* elements between consecutive keys' rows */
    const okv_dtype kdt = a->kv.k_dtype, vdt = a->kv.v_dtype;
    key_cursor cur = {0, 0};
    for (int32_t kb = L; kb < H;) {
        int32_t run_end, slot = cursor_slot(a, &cur, kb, &run_end);
        int nb = H - kb < KB ? H - kb : KB;
        if (nb > run_end - kb) nb = run_end - kb; /* stay inside the run */
        if (a->vis && !block_seen(a, t0, t1, slot, nb)) {
            kb += nb;
            continue;
        }
        size_t off = ((size_t)slot * s->Hkv + h0) * D;
        const char *K = (const char *)a->kv.k + okv_kv_row_bytes(kdt, off);
        const char *V = (const char *)a->kv.v + okv_kv_row_bytes(vdt, off);
        if (HG == s->Hkv) {
            /* all kv heads: the next block (if in this run) is one contiguous
             * span of each pool; ask for it while this one is computed
             * (measured ~1.5x at 32k keys, where the cache is read from DRAM) */
            int32_t next = kb + nb, end = H < run_end ? H : run_end;
            size_t krow = okv_kv_row_bytes(kdt, ld), vrow = okv_kv_row_bytes(vdt, ld);
            size_t keys = (size_t)(end - next < KB ? end - next : KB);
            const char *nk = K + nb * krow, *nv = V + nb * vrow;
            for (size_t b = 0; next < end && b < keys * krow; b += 64) __builtin_prefetch(nk + b);
            for (size_t b = 0; next < end && b < keys * vrow; b += 64) __builtin_prefetch(nv + b);
        }
        bool full = !a->vis && maxlo <= kb && kb + nb <= minhi;
        for (int hh = 0; hh < HG; hh++) {
            size_t khead = okv_kv_row_bytes(kdt, (size_t)hh * D), vhead = okv_kv_row_bytes(vdt, (size_t)hh * D);
            j->ops->scores(S, QT + (size_t)hh * D * Rp, Rp, K + khead, kdt, ld, nb, D, stage);
            if (!full) mask_block(j, S, kb, nb, slot, R, vlo, vhi, t0);
            j->ops->softmax(S, nb, Rp, m + hh * Rp, l + hh * Rp, c + hh * Rp);
            j->ops->accumulate(acc + (size_t)hh * Rp * D, c + hh * Rp, S, Rp, R, V + vhead, vdt, ld, nb, D);
        }
        kb += nb;
    }
    if (j->n_splits > 1) return;
    for (int hh = 0; hh < HG; hh++)
        for (int r = 0; r < R; r++) {
            size_t x = (size_t)hh * Rp + r;
            float *o = a->out + ((size_t)row_of(s, t0, r) * a->n_heads + head_of(s, h0 + hh, r)) * D;
            float inv = l[x] > 0.0f ? 1.0f / l[x] : 0.0f;
            for (int d = 0; d < D; d++) o[d] = acc[x * D + d] * inv;
        }
}

/* Combines the key splits' (m, l, acc) of one (head group, row block). */
static void merge_splits(const attn_job *j, int hg, int qb) {
    const okv_attn_args *a = j->a;
    const attn_shape *s = &j->s;
    const int D = s->D, Rp = s->Rp;
    int t0 = qb * s->Tb, t1 = t0 + s->Tb < a->T ? t0 + s->Tb : a->T;
    int base = (hg * s->n_qblocks + qb) * j->n_splits;
    for (int hh = 0; hh < s->HG; hh++)
        for (int r = 0; r < (t1 - t0) * s->G; r++) {
            size_t x = (size_t)hh * Rp + r;
            float *o = a->out + ((size_t)row_of(s, t0, r) * a->n_heads + head_of(s, hg * s->HG + hh, r)) * D;
            float M = -INFINITY;
            for (int sp = 0; sp < j->n_splits; sp++) {
                const float *acc = j->part + s->part_floats * (base + sp), *m = acc + (size_t)s->HG * Rp * D;
                if (m[x] > M) M = m[x];
            }
            for (int d = 0; d < D; d++) o[d] = 0.0f;
            if (M == -INFINITY) continue;
            float lsum = 0.0f;
            for (int sp = 0; sp < j->n_splits; sp++) {
                const float *acc = j->part + s->part_floats * (base + sp), *m = acc + (size_t)s->HG * Rp * D;
                const float *l = m + (size_t)s->HG * Rp;
                if (m[x] == -INFINITY) continue;
                float cf = expf(m[x] - M);
                lsum += l[x] * cf;
                for (int d = 0; d < D; d++) o[d] += acc[x * D + d] * cf;
            }
            for (int d = 0; d < D; d++) o[d] /= lsum;
        }
}

void okv_attend_fast(okv_threadpool *tp, const okv_attn_args *a, const okv_attn_ops *ops) {
    if (a->T <= 0) return;
    attn_job j = {0};
    j.a = a;
    j.pool_ops = okv_attn_ops_for_pools(ops, a->kv.k_dtype, a->kv.v_dtype); /* q8 pools: attend/blocked_q8.c */
    j.ops = &j.pool_ops;
    j.s = shape_of(a->T, a->n_heads, a->kv.kv_heads, a->kv.head_dim);
    j.n_keys = runs_total(a->runs, a->n_runs);
    int n_threads = okv_threadpool_size(tp);
    j.n_splits = splits_for(&j.s, j.n_keys, n_threads);
    j.split_len = (j.n_keys + j.n_splits - 1) / j.n_splits;
    if (j.split_len == 0) j.split_len = 1;

    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, scratch_bytes(&j.s, a->T, n_threads, j.n_splits));
    if (!mem) {
        fill_nan(a);
        return;
    }
    j.qlo = (int32_t *)mem;
    j.qhi = j.qlo + a->T;
    j.scratch = (float *)(mem + round64((size_t)2 * a->T * sizeof(int32_t)));
    j.part = j.scratch + round64(j.s.thread_floats * n_threads * sizeof(float)) / sizeof(float);
    okv_attn_query_ranges(a, j.n_keys, j.qlo, j.qhi);
    okv_threadpool_run(tp, j.s.base_tasks * j.n_splits, attn_task, &j);
    if (j.n_splits > 1)
        for (int hg = 0; hg < j.s.n_hgroups; hg++)
            for (int qb = 0; qb < j.s.n_qblocks; qb++) merge_splits(&j, hg, qb);
    okv_kscratch_release(&ks);
}

void okv_attn_query_ranges(const okv_attn_args *a, int n_keys, int32_t *qlo, int32_t *qhi) {
    for (int t = 0; t < a->T; t++) {
        if (a->vis) { /* many sequences: every slot is a candidate, okv_attn_key_visible decides */
            qlo[t] = 0;
            qhi[t] = n_keys;
        } else {
            visible_range(a, a->positions[t], &qlo[t], &qhi[t]);
        }
    }
}
bool okv_attn_key_visible(const okv_attn_args *a, int t, int32_t slot) { return key_visible(a, t, slot, 0); }
