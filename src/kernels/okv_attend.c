/* okv_attend.c — the attend half of update_and_attend, twice: a reference
 * that is obviously right, and the fast version the tables use.
 *
 * Reference: gather every key/value of the read runs into contiguous f32,
 * build the explicit [T, n_keys] band mask (causal + window) from positions,
 * softmax in double, weighted sum. Slow and memory-hungry on purpose.
 *
 * Fast: no mask is materialised. Runs arrive in position order, so the keys
 * form one logical index space whose positions increase; each query sees one
 * contiguous index range [lo, hi) computed from its position and the window.
 * Work is split into tasks of (kv head, block of query rows[, key split]):
 * the G query heads that share a kv head are processed together, so each K/V
 * row is converted from the storage dtype once per task and reused by G*rows
 * queries (GQA without repeating K/V). Softmax is online (flash style: running
 * max m, running sum l, rescaled accumulator), over blocks of KB keys. When
 * there are too few (kv head, row block) tasks to keep the threads busy — a
 * decode step on an MQA model — the key range is split too and the partial
 * (m, l, acc) of the splits are merged at the end. f32 pools are read in
 * place; f16/bf16 blocks are converted once per task into a scratch block.
 * Only the inner loops (conversion, scores, exp, weighted sum) differ per
 * ISA; see okv_attn_ops. */
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

static int runs_total(const okv_run *runs, int n_runs) {
    int n = 0;
    for (int r = 0; r < n_runs; r++) n += runs[r].n;
    return n;
}

static bool key_visible(int32_t key_pos, int32_t q_pos, int32_t window) {
    return key_pos <= q_pos && (window == 0 || (int64_t)q_pos - key_pos < window);
}

/* ---- reference ------------------------------------------------------------------ */

void okv_attend_reference(const okv_attn_args *a) {
    const int D = a->kv.head_dim, Hkv = a->kv.kv_heads, G = a->n_heads / Hkv;
    const int n_keys = runs_total(a->runs, a->n_runs);
    const size_t row = (size_t)Hkv * D, esz = okv_dtype_size(a->kv.dtype);
    float *kf = malloc(((size_t)n_keys * row + 1) * sizeof *kf);
    float *vf = malloc(((size_t)n_keys * row + 1) * sizeof *vf);
    int32_t *kpos = malloc(((size_t)n_keys + 1) * sizeof *kpos);
    float *mask = malloc(((size_t)a->T * n_keys + 1) * sizeof *mask);
    double *p = malloc(((size_t)n_keys + 1) * sizeof *p);
    if (!kf || !vf || !kpos || !mask || !p) {
        fill_nan(a);
        goto done;
    }
    /* 1. gather the read span into contiguous f32 */
    int j = 0;
    for (int r = 0; r < a->n_runs; r++) {
        for (int i = 0; i < a->runs[r].n; i++, j++) {
            size_t slot = (size_t)(a->runs[r].slot + i);
            for (size_t e = 0; e < row; e++) {
                kf[j * row + e] = okv_k_load((const char *)a->kv.k + slot * row * esz, a->kv.dtype, e);
                vf[j * row + e] = okv_k_load((const char *)a->kv.v + slot * row * esz, a->kv.dtype, e);
            }
            kpos[j] = a->runs[r].pos + i;
        }
    }
    /* 2. the explicit band mask: 0 where visible, -inf elsewhere */
    for (int t = 0; t < a->T; t++)
        for (j = 0; j < n_keys; j++)
            mask[(size_t)t * n_keys + j] = key_visible(kpos[j], a->positions[t], a->window) ? 0.0f : -INFINITY;
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
    free(mask);
    free(p);
}

/* ---- fast ------------------------------------------------------------------------ */

enum { KB = 32,         /* keys per block of the online softmax */
       R_TARGET = 32 }; /* query vectors (rows x heads of a group) per task */

typedef struct attn_job {
    const okv_attn_args *a;
    const okv_attn_ops *ops;
    int D, G, Hkv;
    size_t esz;
    int n_keys;
    int32_t *run_off;   /* [n_runs + 1] first logical key index of each run */
    int32_t *qlo, *qhi; /* [T] visible logical key range of each query row */
    int Tb, n_qblocks, n_splits, split_len, R_max;
    float *scratch;     /* per thread: acc, m, l, kbuf, vbuf, scores, q */
    size_t scratch_per_thread;
    float *part;        /* n_splits > 1: per task acc [R_max*D], m, l [R_max] */
    size_t part_per_task;
} attn_job;

/* The logical key range [lo, hi) a query at position p may see. Positions
 * increase with the logical index, so it is one contiguous range. */
static void visible_range(const attn_job *j, int32_t p, int32_t *lo, int32_t *hi) {
    const okv_attn_args *a = j->a;
    int64_t plo = a->window > 0 ? (int64_t)p - a->window + 1 : INT64_MIN;
    *lo = *hi = 0;
    bool found = false;
    for (int r = 0; r < a->n_runs; r++) {
        int64_t first = a->runs[r].pos, last = first + a->runs[r].n - 1;
        if (a->runs[r].n <= 0 || last < plo || first > p) continue;
        int64_t from = plo > first ? plo : first, to = p < last ? p : last;
        if (!found) *lo = j->run_off[r] + (int32_t)(from - first);
        *hi = j->run_off[r] + (int32_t)(to - first) + 1;
        found = true;
    }
}

/* Where logical key idx lives: its run (cursor *run, which only moves
 * forward within a task) and the element offset of its kv head kvh. */
static size_t key_offset(const attn_job *j, int idx, int kvh, int *run) {
    while (idx >= j->run_off[*run + 1]) (*run)++;
    size_t slot = (size_t)(j->a->runs[*run].slot + (idx - j->run_off[*run]));
    return (slot * j->Hkv + kvh) * j->D;
}

/* A block of n keys starting at idx as f32 rows: straight from the pool
 * when it is f32 (rows Hkv*D apart), else converted into buf (rows D apart). */
static const float *key_block(const attn_job *j, const void *pool, size_t off, int n, float *buf, size_t *ld) {
    const okv_attn_args *a = j->a;
    size_t pool_ld = (size_t)j->Hkv * j->D;
    if (a->kv.dtype == OKV_F32) {
        *ld = pool_ld;
        return (const float *)pool + off;
    }
    *ld = j->D;
    j->ops->load_rows(buf, (const char *)pool + off * j->esz, pool_ld, a->kv.dtype, n, j->D);
    return buf;
}

static void attn_task(void *ctx, int task, int thread) {
    const attn_job *j = ctx;
    const okv_attn_args *a = j->a;
    const okv_attn_ops *ops = j->ops;
    const int D = j->D, G = j->G;
    int split = task % j->n_splits;
    int qb = (task / j->n_splits) % j->n_qblocks;
    int kvh = task / j->n_splits / j->n_qblocks;
    int t0 = qb * j->Tb, t1 = t0 + j->Tb < a->T ? t0 + j->Tb : a->T;
    int R = (t1 - t0) * G;

    float *acc = j->scratch + j->scratch_per_thread * thread;
    float *m = acc + (size_t)j->R_max * D, *l = m + j->R_max;
    float *kbuf = l + j->R_max, *vbuf = kbuf + (size_t)KB * D, *S = vbuf + (size_t)KB * D;
    float *qbuf = S + (size_t)j->R_max * KB;
    if (j->n_splits > 1) { /* partials go where the merge will find them */
        acc = j->part + j->part_per_task * task;
        m = acc + (size_t)j->R_max * D;
        l = m + j->R_max;
    }
    for (int r = 0; r < R; r++) {
        int t = t0 + r / G, h = kvh * G + r % G;
        memcpy(qbuf + (size_t)r * D, a->q + ((size_t)t * a->n_heads + h) * D, sizeof(float) * D);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)R * D);

    /* keys any row of the block may see, within this split */
    int32_t L = INT32_MAX, H = 0;
    for (int t = t0; t < t1; t++) {
        if (j->qlo[t] >= j->qhi[t]) continue;
        if (j->qlo[t] < L) L = j->qlo[t];
        if (j->qhi[t] > H) H = j->qhi[t];
    }
    int32_t k0 = split * j->split_len, k1 = k0 + j->split_len;
    if (L < k0) L = k0;
    if (H > k1) H = k1;

    int run = 0;
    for (int32_t kb = L; kb < H;) {
        size_t off = key_offset(j, kb, kvh, &run);
        int nb = H - kb < KB ? H - kb : KB;
        if (nb > j->run_off[run + 1] - kb) nb = j->run_off[run + 1] - kb; /* stay inside the run */
        size_t ldk, ldv;
        const float *K = key_block(j, a->kv.k, off, nb, kbuf, &ldk);
        const float *V = key_block(j, a->kv.v, off, nb, vbuf, &ldv);
        ops->scores(S, KB, qbuf, R, K, ldk, nb, D, a->scale);
        for (int r = 0; r < R; r++) {
            int t = t0 + r / G;
            float *s = S + (size_t)r * KB, mx = -INFINITY;
            for (int i = 0; i < nb; i++) {
                if (kb + i < j->qlo[t] || kb + i >= j->qhi[t]) s[i] = -INFINITY; /* the band mask */
                if (s[i] > mx) mx = s[i];
            }
            if (mx == -INFINITY) continue;
            /* online softmax: rescale the running sums to the new max */
            float m_new = mx > m[r] ? mx : m[r];
            float c = expf(m[r] - m_new);
            l[r] = l[r] * c + ops->exp_sum(s, nb, m_new);
            ops->accumulate(acc + (size_t)r * D, c, s, V, ldv, nb, D);
            m[r] = m_new;
        }
        kb += nb;
    }
    if (j->n_splits > 1) return;
    for (int r = 0; r < R; r++) {
        int t = t0 + r / G, h = kvh * G + r % G;
        float *o = a->out + ((size_t)t * a->n_heads + h) * D;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int d = 0; d < D; d++) o[d] = acc[(size_t)r * D + d] * inv;
    }
}

/* Combines the key splits' (m, l, acc) of one (kv head, row block). */
static void merge_splits(const attn_job *j, int kvh, int qb) {
    const okv_attn_args *a = j->a;
    const int D = j->D, G = j->G;
    int t0 = qb * j->Tb, t1 = t0 + j->Tb < a->T ? t0 + j->Tb : a->T;
    int base = (kvh * j->n_qblocks + qb) * j->n_splits;
    for (int r = 0; r < (t1 - t0) * G; r++) {
        int t = t0 + r / G, h = kvh * G + r % G;
        float *o = a->out + ((size_t)t * a->n_heads + h) * D;
        float M = -INFINITY;
        for (int s = 0; s < j->n_splits; s++) {
            const float *ms = j->part + j->part_per_task * (base + s) + (size_t)j->R_max * D;
            if (ms[r] > M) M = ms[r];
        }
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        if (M == -INFINITY) continue;
        float lsum = 0.0f;
        for (int s = 0; s < j->n_splits; s++) {
            const float *acc = j->part + j->part_per_task * (base + s);
            const float *ms = acc + (size_t)j->R_max * D, *ls = ms + j->R_max;
            if (ms[r] == -INFINITY) continue;
            float c = expf(ms[r] - M);
            lsum += ls[r] * c;
            for (int d = 0; d < D; d++) o[d] += acc[(size_t)r * D + d] * c;
        }
        for (int d = 0; d < D; d++) o[d] /= lsum;
    }
}

void okv_attend_fast(okv_threadpool *tp, const okv_attn_args *a, const okv_attn_ops *ops) {
    if (a->T <= 0) return;
    attn_job j = {0};
    j.a = a;
    j.ops = ops;
    j.D = a->kv.head_dim;
    j.Hkv = a->kv.kv_heads;
    j.G = a->n_heads / j.Hkv;
    j.esz = okv_dtype_size(a->kv.dtype);
    j.n_keys = runs_total(a->runs, a->n_runs);
    int n_threads = okv_threadpool_size(tp);

    j.Tb = R_TARGET / j.G > 1 ? R_TARGET / j.G : 1;
    if (j.Tb > a->T) j.Tb = a->T;
    j.n_qblocks = (a->T + j.Tb - 1) / j.Tb;
    j.R_max = j.Tb * j.G;
    /* split the keys when (kv head, row block) tasks can't fill the threads */
    int base_tasks = j.Hkv * j.n_qblocks;
    j.n_splits = 1;
    if (n_threads > 1 && base_tasks < 4 * n_threads && j.n_keys >= 512) {
        j.n_splits = (4 * n_threads + base_tasks - 1) / base_tasks;
        if (j.n_splits > j.n_keys / 256) j.n_splits = j.n_keys / 256;
    }
    j.split_len = (j.n_keys + j.n_splits - 1) / j.n_splits;
    if (j.split_len == 0) j.split_len = 1;
    int n_tasks = base_tasks * j.n_splits;

    j.scratch_per_thread = 2 * (size_t)j.R_max * j.D + 2 * (size_t)j.R_max + 2 * (size_t)KB * j.D + (size_t)j.R_max * KB;
    j.part_per_task = (size_t)j.R_max * j.D + 2 * (size_t)j.R_max;
    j.run_off = malloc(((size_t)a->n_runs + 1) * sizeof *j.run_off);
    j.qlo = malloc((size_t)a->T * sizeof *j.qlo);
    j.qhi = malloc((size_t)a->T * sizeof *j.qhi);
    j.scratch = malloc(j.scratch_per_thread * n_threads * sizeof *j.scratch);
    if (j.n_splits > 1) j.part = malloc(j.part_per_task * n_tasks * sizeof *j.part);
    if (!j.run_off || !j.qlo || !j.qhi || !j.scratch || (j.n_splits > 1 && !j.part)) {
        fill_nan(a);
        goto done;
    }
    j.run_off[0] = 0;
    for (int r = 0; r < a->n_runs; r++) j.run_off[r + 1] = j.run_off[r] + a->runs[r].n;
    for (int t = 0; t < a->T; t++) visible_range(&j, a->positions[t], &j.qlo[t], &j.qhi[t]);

    okv_threadpool_run(tp, n_tasks, attn_task, &j);
    if (j.n_splits > 1)
        for (int kvh = 0; kvh < j.Hkv; kvh++)
            for (int qb = 0; qb < j.n_qblocks; qb++) merge_splits(&j, kvh, qb);
done:
    free(j.run_off);
    free(j.qlo);
    free(j.qhi);
    free(j.scratch);
    free(j.part);
}
