/* attend_v1.c — the attention kernel offkv used before the blocked one
 * (src/kernels/attend/blocked.c), frozen here ONLY so bench_kernels can time the
 * old and the new kernel side by side in one run on the same data. Not
 * linked into the library, not tested beyond bench_kernels' agreement check;
 * delete it once the comparison is no longer wanted.
 *
 * Old shape: tasks of (kv head, 32 query vectors) over blocks of 32 keys,
 * scores as 2-query x 4-key dot-product tiles with horizontal sums, the
 * band mask tested per element of every block, AVX2 only. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attend_v1.h"
#include "okv_kernels_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

typedef struct v1_ops {
    void (*scores)(float *S, int ldS, const float *q, int R, const void *k, okv_dtype dt, size_t ldk, int n,
                   int D, float scale);
    float (*exp_sum)(float *p, int n, float m);
    void (*accumulate)(float *acc, const float *c, const float *P, int ldP, int R, const void *v, okv_dtype dt,
                       size_t ldv, int n, int D);
} v1_ops;

static void fill_nan(const okv_attn_args *a) {
    size_t n = (size_t)a->T * a->n_heads * a->kv.head_dim;
    for (size_t i = 0; i < n; i++) a->out[i] = NAN;
}

static int runs_total(const okv_run *runs, int n_runs) {
    int n = 0;
    for (int r = 0; r < n_runs; r++) n += runs[r].n;
    return n;
}

INLINE_TGT __m256 load8(const void *p, okv_dtype dt, size_t i) {
    if (dt == OKV_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (dt == OKV_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE_TGT float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE_TGT __m128 hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

INLINE_TGT __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* ---- attention inner loops ------------------------------------------------------ */

/* Scores of rq (1 or 2) queries against 4 keys stored in dt (rows ldk
 * elements apart): each K vector is converted once per rq queries, each q
 * vector loaded once per 4 keys, and every query's 4 sums are reduced
 * together. */
INLINE_TGT void scores_tile(float *S, int ldS, const float *q, int rq, const void *k, okv_dtype dt, size_t ldk,
                            int D, float scale) {
    int D8 = D & ~7;
    const char *kr[4];
    const size_t esz = dt == OKV_F32 ? 4 : 2;
#pragma GCC unroll 4
    for (int x = 0; x < 4; x++) kr[x] = (const char *)k + x * ldk * esz;
    __m256 a[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) a[r][x] = _mm256_setzero_ps();
    for (int d = 0; d < D8; d += 8) {
        __m256 kv[4];
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) kv[x] = load8(kr[x], dt, (size_t)d);
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++) {
            if (r >= rq) continue;
            __m256 qv = _mm256_loadu_ps(q + (size_t)r * D + d);
#pragma GCC unroll 4
            for (int x = 0; x < 4; x++) a[r][x] = _mm256_fmadd_ps(qv, kv[x], a[r][x]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        if (r >= rq) continue;
        const float *qr = q + (size_t)r * D;
        float out[4];
        _mm_storeu_ps(out, hsum8x4(a[r][0], a[r][1], a[r][2], a[r][3]));
        for (int dd = D8; dd < D; dd++)
            for (int x = 0; x < 4; x++) out[x] += qr[dd] * okv_k_load(kr[x], dt, (size_t)dd);
        for (int x = 0; x < 4; x++) S[(size_t)r * ldS + x] = out[x] * scale;
    }
}

INLINE_TGT void scores_dt(float *S, int ldS, const float *q, int R, const void *k, okv_dtype dt, size_t ldk, int n,
                          int D, float scale) {
    const size_t esz = dt == OKV_F32 ? 4 : 2;
    int D8 = D & ~7, n4 = n & ~3;
    for (int i = 0; i < n4; i += 4) {
        const char *ki = (const char *)k + i * ldk * esz;
        int r = 0;
        for (; r + 2 <= R; r += 2) scores_tile(S + (size_t)r * ldS + i, ldS, q + (size_t)r * D, 2, ki, dt, ldk, D, scale);
        if (r < R) scores_tile(S + (size_t)r * ldS + i, ldS, q + (size_t)r * D, 1, ki, dt, ldk, D, scale);
    }
    for (int i = n4; i < n; i++) {
        const char *ki = (const char *)k + i * ldk * esz;
        for (int r = 0; r < R; r++) {
            const float *qr = q + (size_t)r * D;
            __m256 a0 = _mm256_setzero_ps();
            for (int d = 0; d < D8; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + d), load8(ki, dt, (size_t)d), a0);
            float sum = hsum8(a0);
            for (int d = D8; d < D; d++) sum += qr[d] * okv_k_load(ki, dt, (size_t)d);
            S[(size_t)r * ldS + i] = sum * scale;
        }
    }
}

static TGT void scores_avx2(float *S, int ldS, const float *q, int R, const void *k, okv_dtype dt, size_t ldk, int n,
                            int D, float scale) {
    switch (dt) {
    case OKV_F32: scores_dt(S, ldS, q, R, k, OKV_F32, ldk, n, D, scale); break;
    case OKV_F16: scores_dt(S, ldS, q, R, k, OKV_F16, ldk, n, D, scale); break;
    case OKV_BF16: scores_dt(S, ldS, q, R, k, OKV_BF16, ldk, n, D, scale); break;
    }
}

static TGT float exp_sum_avx2(float *p, int n, float m) {
    __m256 mv = _mm256_set1_ps(m), ninf = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(p + i);
        __m256 e = _mm256_andnot_ps(_mm256_cmp_ps(x, ninf, _CMP_EQ_OQ), exp8(_mm256_sub_ps(x, mv)));
        _mm256_storeu_ps(p + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float s = hsum8(sum);
    for (; i < n; i++) {
        p[i] = p[i] == -INFINITY ? 0.0f : expf(p[i] - m);
        s += p[i];
    }
    return s;
}

/* acc_r = acc_r*c_r + P_r @ V for rq (1 or 2) rows and channels [d, d+w),
 * w = 32 or 8: the accumulators stay in registers while the keys stream by,
 * and each V vector is converted once for both rows. */
INLINE_TGT void accumulate_tile(float *acc, int D, const float *c, const float *P, int ldP, int rq, const void *v,
                                okv_dtype dt, size_t ldv, int n, int d, int w) {
    const size_t esz = dt == OKV_F32 ? 4 : 2;
    __m256 a[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        if (r >= rq) continue;
        __m256 cv = _mm256_set1_ps(c[r]);
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
            if (x * 8 < w) a[r][x] = _mm256_mul_ps(cv, _mm256_loadu_ps(acc + (size_t)r * D + d + 8 * x));
    }
    for (int i = 0; i < n; i++) {
        const char *vi = (const char *)v + i * ldv * esz;
        __m256 vv[4];
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
            if (x * 8 < w) vv[x] = load8(vi, dt, (size_t)(d + 8 * x));
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++) {
            if (r >= rq) continue;
            __m256 pv = _mm256_broadcast_ss(P + (size_t)r * ldP + i);
#pragma GCC unroll 4
            for (int x = 0; x < 4; x++)
                if (x * 8 < w) a[r][x] = _mm256_fmadd_ps(pv, vv[x], a[r][x]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        if (r >= rq) continue;
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
            if (x * 8 < w) _mm256_storeu_ps(acc + (size_t)r * D + d + 8 * x, a[r][x]);
    }
}

INLINE_TGT void accumulate_dt(float *acc, const float *c, const float *P, int ldP, int R, const void *v, okv_dtype dt,
                              size_t ldv, int n, int D) {
    const size_t esz = dt == OKV_F32 ? 4 : 2;
    for (int r = 0; r < R; r += 2) {
        float *ar = acc + (size_t)r * D;
        const float *pr = P + (size_t)r * ldP;
        int d = 0;
        if (r + 2 <= R) {
            for (; d + 32 <= D; d += 32) accumulate_tile(ar, D, c + r, pr, ldP, 2, v, dt, ldv, n, d, 32);
            for (; d + 8 <= D; d += 8) accumulate_tile(ar, D, c + r, pr, ldP, 2, v, dt, ldv, n, d, 8);
        } else {
            for (; d + 32 <= D; d += 32) accumulate_tile(ar, D, c + r, pr, ldP, 1, v, dt, ldv, n, d, 32);
            for (; d + 8 <= D; d += 8) accumulate_tile(ar, D, c + r, pr, ldP, 1, v, dt, ldv, n, d, 8);
        }
        for (int rr = r; rr < R && rr < r + 2; rr++)
            for (int dd = d; dd < D; dd++) {
                float s = acc[(size_t)rr * D + dd] * c[rr];
                for (int i = 0; i < n; i++)
                    s += P[(size_t)rr * ldP + i] * okv_k_load((const char *)v + i * ldv * esz, dt, (size_t)dd);
                acc[(size_t)rr * D + dd] = s;
            }
    }
}

static TGT void accumulate_avx2(float *acc, const float *c, const float *P, int ldP, int R, const void *v,
                                okv_dtype dt, size_t ldv, int n, int D) {
    switch (dt) {
    case OKV_F32: accumulate_dt(acc, c, P, ldP, R, v, OKV_F32, ldv, n, D); break;
    case OKV_F16: accumulate_dt(acc, c, P, ldP, R, v, OKV_F16, ldv, n, D); break;
    case OKV_BF16: accumulate_dt(acc, c, P, ldP, R, v, OKV_BF16, ldv, n, D); break;
    }
}

static const v1_ops attn_ops_avx2 = {scores_avx2, exp_sum_avx2, accumulate_avx2};



/* ---- fast ------------------------------------------------------------------------ */

enum { KB = 32,          /* keys per block of the online softmax */
       R_TARGET = 32,    /* query vectors (rows x heads of a group) per task */
       MIN_SPLIT = 128 }; /* fewest keys worth a task of their own */

typedef struct attn_job {
    const okv_attn_args *a;
    const v1_ops *ops;
    int D, G, Hkv;
    size_t esz;
    int n_keys;
    int32_t *run_off;   /* [n_runs + 1] first logical key index of each run */
    int32_t *qlo, *qhi; /* [T] visible logical key range of each query row */
    int HG;             /* kv heads per task (1, or all of them for decode) */
    int n_hgroups, Tb, n_qblocks, n_splits, split_len, R_max;
    float *scratch;     /* per thread: scores, c, q, acc, m, l */
    size_t scratch_per_thread;
    float *part;        /* n_splits > 1: per task acc, m, l (as in scratch) */
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

/* Element offset of logical key idx, kv head kvh, in a pool. *run is a
 * cursor that only moves forward within a task. */
static size_t key_offset(const attn_job *j, int idx, int kvh, int *run) {
    while (idx >= j->run_off[*run + 1]) (*run)++;
    size_t slot = (size_t)(j->a->runs[*run].slot + (idx - j->run_off[*run]));
    return (slot * j->Hkv + kvh) * j->D;
}

/* Per-task state: for member hh of the head group and query vector r, the
 * running max m, sum l and accumulator acc (index hh*R_max + r). */
typedef struct attn_state {
    float *acc, *m, *l;
} attn_state;

static attn_state state_at(const attn_job *j, float *base) {
    attn_state st;
    size_t rows = (size_t)j->HG * j->R_max;
    st.acc = base;
    st.m = base + rows * j->D;
    st.l = st.m + rows;
    return st;
}

/* Query vector r of a row block (rows from t0) of kv head kvh: row and head. */
static int row_of(const attn_job *j, int t0, int r) { return t0 + r / j->G; }
static int head_of(const attn_job *j, int kvh, int r) { return kvh * j->G + r % j->G; }

static void attn_task(void *ctx, int task, int thread) {
    const attn_job *j = ctx;
    const okv_attn_args *a = j->a;
    const v1_ops *ops = j->ops;
    const int D = j->D, HG = j->HG;
    int split = task % j->n_splits;
    int qb = (task / j->n_splits) % j->n_qblocks;
    int h0 = task / j->n_splits / j->n_qblocks * HG;
    int t0 = qb * j->Tb, t1 = t0 + j->Tb < a->T ? t0 + j->Tb : a->T;
    int R = (t1 - t0) * j->G;

    float *S = j->scratch + j->scratch_per_thread * thread;
    float *cbuf = S + (size_t)j->R_max * KB, *qbuf = cbuf + j->R_max;
    attn_state st = state_at(j, qbuf + (size_t)HG * j->R_max * D);
    if (j->n_splits > 1) st = state_at(j, j->part + j->part_per_task * task); /* for the merge */
    for (int hh = 0; hh < HG; hh++)
        for (int r = 0; r < R; r++) {
            size_t x = (size_t)hh * j->R_max + r;
            int t = row_of(j, t0, r), h = head_of(j, h0 + hh, r);
            memcpy(qbuf + x * D, a->q + ((size_t)t * a->n_heads + h) * D, sizeof(float) * D);
            memset(st.acc + x * D, 0, sizeof(float) * D);
            st.m[x] = -INFINITY;
            st.l[x] = 0.0f;
        }

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
        size_t off = key_offset(j, kb, h0, &run);
        int nb = H - kb < KB ? H - kb : KB;
        if (nb > j->run_off[run + 1] - kb) nb = j->run_off[run + 1] - kb; /* stay inside the run */
        const char *K = (const char *)a->kv.k + off * j->esz, *V = (const char *)a->kv.v + off * j->esz;
        size_t ld = (size_t)j->Hkv * D; /* elements between consecutive keys' rows */
        if (HG == j->Hkv) {
            /* all kv heads: the next block (if in this run) is one contiguous
             * span of each pool; ask for it while this one is computed
             * (measured ~1.5x at 32k keys, where the cache is read from DRAM) */
            int32_t next = kb + nb, end = H < j->run_off[run + 1] ? H : j->run_off[run + 1];
            size_t row_bytes = ld * j->esz, bytes = (size_t)(end - next < KB ? end - next : KB) * row_bytes;
            const char *nk = K + nb * row_bytes, *nv = V + nb * row_bytes;
            for (size_t b = 0; next < end && b < bytes; b += 64) {
                __builtin_prefetch(nk + b);
                __builtin_prefetch(nv + b);
            }
        }
        for (int hh = 0; hh < HG; hh++) {
            float *m = st.m + (size_t)hh * j->R_max, *l = st.l + (size_t)hh * j->R_max;
            size_t head = (size_t)hh * D * j->esz;
            ops->scores(S, KB, qbuf + (size_t)hh * j->R_max * D, R, K + head, a->kv.k_dtype, ld, nb, D, a->scale);
            for (int r = 0; r < R; r++) {
                int t = row_of(j, t0, r);
                float *s = S + (size_t)r * KB, mx = -INFINITY;
                for (int i = 0; i < nb; i++) {
                    if (kb + i < j->qlo[t] || kb + i >= j->qhi[t]) s[i] = -INFINITY; /* the band mask */
                    if (s[i] > mx) mx = s[i];
                }
                if (mx == -INFINITY) { /* nothing visible in this block */
                    cbuf[r] = 1.0f;
                    for (int i = 0; i < nb; i++) s[i] = 0.0f;
                    continue;
                }
                /* online softmax: rescale the running sums to the new max */
                float m_new = mx > m[r] ? mx : m[r];
                cbuf[r] = expf(m[r] - m_new);
                l[r] = l[r] * cbuf[r] + ops->exp_sum(s, nb, m_new);
                m[r] = m_new;
            }
            ops->accumulate(st.acc + (size_t)hh * j->R_max * D, cbuf, S, KB, R, V + head, a->kv.v_dtype, ld, nb, D);
        }
        kb += nb;
    }
    if (j->n_splits > 1) return;
    for (int hh = 0; hh < HG; hh++)
        for (int r = 0; r < R; r++) {
            size_t x = (size_t)hh * j->R_max + r;
            int t = row_of(j, t0, r), h = head_of(j, h0 + hh, r);
            float *o = a->out + ((size_t)t * a->n_heads + h) * D;
            float inv = st.l[x] > 0.0f ? 1.0f / st.l[x] : 0.0f;
            for (int d = 0; d < D; d++) o[d] = st.acc[x * D + d] * inv;
        }
}

/* Combines the key splits' (m, l, acc) of one (head group, row block). */
static void merge_splits(const attn_job *j, int hg, int qb) {
    const okv_attn_args *a = j->a;
    const int D = j->D;
    int t0 = qb * j->Tb, t1 = t0 + j->Tb < a->T ? t0 + j->Tb : a->T;
    int base = (hg * j->n_qblocks + qb) * j->n_splits;
    for (int hh = 0; hh < j->HG; hh++)
        for (int r = 0; r < (t1 - t0) * j->G; r++) {
            size_t x = (size_t)hh * j->R_max + r;
            int t = row_of(j, t0, r), h = head_of(j, hg * j->HG + hh, r);
            float *o = a->out + ((size_t)t * a->n_heads + h) * D;
            float M = -INFINITY;
            for (int s = 0; s < j->n_splits; s++) {
                attn_state st = state_at(j, j->part + j->part_per_task * (base + s));
                if (st.m[x] > M) M = st.m[x];
            }
            for (int d = 0; d < D; d++) o[d] = 0.0f;
            if (M == -INFINITY) continue;
            float lsum = 0.0f;
            for (int s = 0; s < j->n_splits; s++) {
                attn_state st = state_at(j, j->part + j->part_per_task * (base + s));
                if (st.m[x] == -INFINITY) continue;
                float c = expf(st.m[x] - M);
                lsum += st.l[x] * c;
                for (int d = 0; d < D; d++) o[d] += st.acc[x * D + d] * c;
            }
            for (int d = 0; d < D; d++) o[d] /= lsum;
        }
}

static void attend_v1_fast(okv_threadpool *tp, const okv_attn_args *a, const v1_ops *ops) {
    if (a->T <= 0) return;
    attn_job j = {0};
    j.a = a;
    j.ops = ops;
    j.D = a->kv.head_dim;
    j.Hkv = a->kv.kv_heads;
    j.G = a->n_heads / j.Hkv;
    j.esz = okv_dtype_size(a->kv.k_dtype);
    j.n_keys = runs_total(a->runs, a->n_runs);
    int n_threads = okv_threadpool_size(tp);

    j.Tb = R_TARGET / j.G > 1 ? R_TARGET / j.G : 1;
    if (j.Tb > a->T) j.Tb = a->T;
    j.n_qblocks = (a->T + j.Tb - 1) / j.Tb;
    j.R_max = j.Tb * j.G;
    /* decode-sized steps (one row block) take every kv head per task, so the
     * cache is read in one contiguous sweep; threads then split the keys */
    j.HG = j.n_qblocks == 1 ? j.Hkv : 1;
    j.n_hgroups = j.Hkv / j.HG;
    /* split the keys when (head group, row block) tasks can't fill the threads */
    int base_tasks = j.n_hgroups * j.n_qblocks;
    j.n_splits = 1;
    if (n_threads > 1 && base_tasks < 4 * n_threads && j.n_keys >= 2 * MIN_SPLIT) {
        j.n_splits = (4 * n_threads + base_tasks - 1) / base_tasks;
        if (j.n_splits > j.n_keys / MIN_SPLIT) j.n_splits = j.n_keys / MIN_SPLIT;
    }
    j.split_len = (j.n_keys + j.n_splits - 1) / j.n_splits;
    if (j.split_len == 0) j.split_len = 1;
    int n_tasks = base_tasks * j.n_splits;

    size_t rows = (size_t)j.HG * j.R_max;
    j.part_per_task = rows * j.D + 2 * rows;
    j.scratch_per_thread = (size_t)j.R_max * KB + j.R_max + rows * j.D + j.part_per_task;
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
        for (int hg = 0; hg < j.n_hgroups; hg++)
            for (int qb = 0; qb < j.n_qblocks; qb++) merge_splits(&j, hg, qb);
done:
    free(j.run_off);
    free(j.qlo);
    free(j.qhi);
    free(j.scratch);
    free(j.part);
}

void bench_attend_v1_avx2(okv_threadpool *tp, const okv_attn_args *a) { attend_v1_fast(tp, a, &attn_ops_avx2); }
