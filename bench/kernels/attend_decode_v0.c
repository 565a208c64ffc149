/* attend_decode_v0.c — the decode kernel as it was before the long-context
 * streaming work (src/kernels/okv_attend_decode.c at 774cab8), kept so
 * bench_kernels attndecode can time old and new side by side. Not used by
 * the runtime. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "attend_v1.h"

enum { NK = 16,        /* keys per block */
       RMAX = 15,      /* query vectors per kv head */
       DMAX = 256,
       MIN_SPLIT = 256 /* fewest keys per split */ };

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define INLINE static inline __attribute__((always_inline)) TGT

typedef struct dec_job {
    const okv_attn_args *a;
    int D, G, Hkv, R, n_splits, split_len, n_keys;
    int32_t *qlo, *qhi;  /* [T] */
    uint16_t *qb;        /* [Hkv][R][D] bf16 queries, scale folded in */
    float *part;         /* [n_splits][Hkv][R] x (acc [D], m, l) */
    size_t part_floats;  /* per (split, kv head, vector): D + 2 */
} dec_job;

/* Lane L of a reduced score vector holds key key_of_lane[L] of the block. */
static const int8_t key_of_lane[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* v[i] (16 partial sums of key i) -> one vector, lane L = sum of v[key_of_lane[L]]. */
INLINE __m512 reduce16(__m512 v[16]) {
    __m512 w[8], y[4];
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    for (int j = 0; j < 4; j++)
        y[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0xdd));
    /* y[j] block b = 4-lane partial of key 4j + b */
    __m512 p = _mm512_add_ps(_mm512_unpacklo_ps(y[0], y[1]), _mm512_unpackhi_ps(y[0], y[1]));
    __m512 q = _mm512_add_ps(_mm512_unpacklo_ps(y[2], y[3]), _mm512_unpackhi_ps(y[2], y[3]));
    return _mm512_add_ps((__m512)_mm512_unpacklo_pd((__m512d)p, (__m512d)q),
                         (__m512)_mm512_unpackhi_pd((__m512d)p, (__m512d)q));
}

/* exp(x) for x <= 0; 0 where `live` is clear (as okv_attend_amx.c). */
INLINE __m512 dexp(__m512 x, __mmask16 live) {
    __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-126.0f)), _mm512_set1_ps(1.44269504088896341f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, p, n);
}

/* 32 elements of a K/V row as bf16. */
INLINE __m512i row32(const uint16_t *p, okv_dtype dt) {
    if (dt == OKV_BF16) return _mm512_loadu_si512(p);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 16))),
                                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)));
}

/* One kv head's state inside a task. */
typedef struct dec_head {
    float *acc;   /* [R][D] */
    float *m;     /* [R] */
    float *lv;    /* [R][16] per-lane sums */
} dec_head;

/* Scores of the block for vector r: s[L] = q . k[key_of_lane[L]] (keys >=
 * nb read as zero rows). */
INLINE __m512 block_scores(const uint16_t *q, const uint16_t *const krow[NK], okv_dtype dt, int D) {
    __m512 v[16];
    for (int i = 0; i < NK; i++) v[i] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 32) {
        __m512bh qv = (__m512bh)_mm512_loadu_si512(q + d);
#pragma GCC unroll 16
        for (int i = 0; i < NK; i++) v[i] = _mm512_dpbf16_ps(v[i], qv, (__m512bh)row32(krow[i] + d, dt));
    }
    return reduce16(v);
}

/* acc[r][.] = acc[r][.] * c[r] + sum over pairs j of (p[2j], p[2j+1]) . vi[j][.]
 * for rows [r0, r0 + nr), NC channel vectors (compile-time via the switch). */
INLINE void pv_rows(float *acc, size_t D, const float *c, const uint32_t *pp, const __m512i *vi, int r0, int nr, int nc) {
    __m512 a[4][16];
#pragma GCC unroll 4
    for (int y = 0; y < 4; y++) {
#pragma GCC unroll 16
        for (int x = 0; x < 16; x++) a[y][x] = _mm512_setzero_ps(); /* (quiets -Wmaybe-uninitialized) */
        if (y >= nr) continue;
        __m512 cv = _mm512_set1_ps(c[r0 + y]);
#pragma GCC unroll 16
        for (int x = 0; x < nc; x++) a[y][x] = _mm512_mul_ps(cv, _mm512_loadu_ps(acc + (size_t)(r0 + y) * D + 16 * x));
    }
    for (int j = 0; j < NK / 2; j++)
#pragma GCC unroll 4
        for (int y = 0; y < 4; y++) {
            if (y >= nr) continue;
            __m512bh pv = (__m512bh)_mm512_set1_epi32((int)pp[(r0 + y) * 8 + j]);
#pragma GCC unroll 16
            for (int x = 0; x < nc; x++) a[y][x] = _mm512_dpbf16_ps(a[y][x], pv, (__m512bh)vi[j * nc + x]);
        }
#pragma GCC unroll 4
    for (int y = 0; y < 4; y++) {
        if (y >= nr) continue;
#pragma GCC unroll 16
        for (int x = 0; x < nc; x++) _mm512_storeu_ps(acc + (size_t)(r0 + y) * D + 16 * x, a[y][x]);
    }
}

/* Rows of 16 * nc channels: rows per register tile so the accumulators fit
 * (4 x 4 at D = 64, 2 x 8 at 128, 1 x 16 at 256). */
INLINE void pv_block(float *acc, size_t stride, const float *c, const uint32_t *pp, const __m512i *vi, int R, int nc) {
    int rt = 16 / nc < 4 ? 16 / nc : 4;
    if (rt < 1) rt = 1;
    for (int r0 = 0; r0 < R; r0 += rt) pv_rows(acc, stride, c, pp, vi, r0, R - r0 < rt ? R - r0 : rt, nc);
}

/* acc rows `stride` floats apart. */
TGT static void pv_dispatch(float *acc, size_t stride, const float *c, const uint32_t *pp, const __m512i *vi, int R,
                            int D) {
    switch (D / 16) {
    case 2: pv_block(acc, stride, c, pp, vi, R, 2); break;
    case 4: pv_block(acc, stride, c, pp, vi, R, 4); break;
    case 6: pv_block(acc, stride, c, pp, vi, R, 6); break;
    case 8: pv_block(acc, stride, c, pp, vi, R, 8); break;
    case 10: pv_block(acc, stride, c, pp, vi, R, 10); break;
    case 12: pv_block(acc, stride, c, pp, vi, R, 12); break;
    case 14: pv_block(acc, stride, c, pp, vi, R, 14); break;
    default: pv_block(acc, stride, c, pp, vi, R, 16); break;
    }
}

/* The block's V rows in the lane order of the scores, pairs of keys
 * interleaved per channel: vi[j][x] = (v[k2j][16x + e], v[k2j+1][16x + e]). */
TGT static void interleave_v(__m512i *vi, const uint16_t *const vrow[NK], okv_dtype dt, int D) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const int nc = D / 16;
    for (int j = 0; j < NK / 2; j++)
        for (int d = 0; d < D; d += 32) {
            __m512i x = row32(vrow[key_of_lane[2 * j]] + d, dt), y = row32(vrow[key_of_lane[2 * j + 1]] + d, dt);
            vi[j * nc + d / 16] = _mm512_permutex2var_epi16(x, lo, y);
            vi[j * nc + d / 16 + 1] = _mm512_permutex2var_epi16(x, hi, y);
        }
}

static const uint16_t zero_row[DMAX] __attribute__((aligned(64)));

TGT static void dec_task(void *ctx, int split, int thread) {
    (void)thread;
    const dec_job *j = ctx;
    const okv_attn_args *a = j->a;
    const int D = j->D, R = j->R, G = j->G, Hkv = j->Hkv;
    const okv_dtype dt = a->kv.dtype;
    float *base = j->part + j->part_floats * (size_t)split * Hkv * R;
    /* per (kv head, vector): acc [D], m, l; lane sums kept apart below */
    float lv[8 * RMAX * 16]; /* per-lane sums l of up to 8 kv heads */
    for (int x = 0; x < Hkv * R; x++) {
        float *p = base + j->part_floats * x;
        memset(p, 0, sizeof(float) * D);
        p[D] = -INFINITY;
        p[D + 1] = 0.0f;
    }
    int32_t k0 = split * j->split_len, k1 = k0 + j->split_len < j->n_keys ? k0 + j->split_len : j->n_keys;
    int32_t L = INT32_MAX, H = 0, maxlo = 0, minhi = INT32_MAX;
    for (int t = 0; t < a->T; t++) {
        if (j->qlo[t] > maxlo) maxlo = j->qlo[t];
        if (j->qhi[t] < minhi) minhi = j->qhi[t];
        if (j->qlo[t] >= j->qhi[t]) continue;
        if (j->qlo[t] < L) L = j->qlo[t];
        if (j->qhi[t] > H) H = j->qhi[t];
    }
    if (L < k0) L = k0;
    if (H > k1) H = k1;
    __m512i vi[NK / 2 * DMAX / 16];
    uint32_t pp[RMAX * 8];
    float c[RMAX];
    int run = 0;
    int32_t run_start = 0;
    for (int hk = 0; hk < Hkv; hk += 8) { /* lane sums for up to 8 kv heads at a time live on the stack */
        int nh = Hkv - hk < 8 ? Hkv - hk : 8;
        memset(lv, 0, sizeof(float) * 16 * R * nh);
        run = 0;
        run_start = 0;
        for (int32_t kb = L; kb < H;) {
            while (kb >= run_start + a->runs[run].n) run_start += a->runs[run++].n;
            int32_t run_end = run_start + a->runs[run].n, slot = a->runs[run].slot + (kb - run_start);
            int nb = NK - kb % NK;
            if (nb > H - kb) nb = H - kb;
            if (nb > run_end - kb) nb = run_end - kb;
            /* invisible lanes: keys past nb and keys some vector may not see */
            bool full = !a->vis && maxlo <= kb && kb + nb <= minhi;
            /* logical key of each lane, and the lanes inside the block */
            __m512i keys = _mm512_add_epi32(_mm512_set1_epi32(kb), _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)key_of_lane)));
            __mmask16 in_block = _mm512_cmplt_epi32_mask(keys, _mm512_set1_epi32(kb + nb));
            for (int h = hk; h < hk + nh; h++) {
                const uint16_t *krow[NK], *vrow[NK];
                for (int i = 0; i < NK; i++) {
                    size_t off = ((size_t)(slot + i) * Hkv + h) * D;
                    krow[i] = i < nb ? (const uint16_t *)a->kv.k + off : zero_row;
                    vrow[i] = i < nb ? (const uint16_t *)a->kv.v + off : zero_row;
                }
                /* this head's rows of the next block (within the run), a block of
                 * all heads' work ahead */
                for (int i = 0; i < NK && kb + nb + i < run_end; i++) {
                    size_t off = (((size_t)(slot + nb + i) * Hkv) + h) * D * 2;
                    for (size_t bo = 0; bo < (size_t)D * 2; bo += 64) {
                        __builtin_prefetch((const char *)a->kv.k + off + bo);
                        __builtin_prefetch((const char *)a->kv.v + off + bo);
                    }
                }
                interleave_v(vi, vrow, dt, D);
                for (int r = 0; r < R; r++) {
                    float *st = base + j->part_floats * ((size_t)h * R + r), *m = st + D;
                    __m512 s = block_scores(j->qb + ((size_t)h * R + r) * D, krow, dt, D);
                    __mmask16 live = in_block;
                    int t = r / G;
                    if (!full && a->vis) {
                        for (int ln = 0; ln < 16; ln++)
                            if (key_of_lane[ln] < nb && !okv_attn_key_visible(a, t, slot + key_of_lane[ln]))
                                live &= (__mmask16)~(1u << ln);
                    } else if (!full) {
                        live &= _mm512_cmpge_epi32_mask(keys, _mm512_set1_epi32(j->qlo[t])) &
                                _mm512_cmplt_epi32_mask(keys, _mm512_set1_epi32(j->qhi[t]));
                    }
                    float bm = live ? _mm512_mask_reduce_max_ps(live, s) : -INFINITY;
                    float mn = bm > *m ? bm : *m;
                    if (mn == -INFINITY) { /* nothing seen yet */
                        c[r] = 1.0f;
                        for (int x = 0; x < 8; x++) pp[r * 8 + x] = 0;
                        continue;
                    }
                    /* the max rarely moves at long context: skip expf(0) */
                    c[r] = *m == -INFINITY ? 0.0f : mn == *m ? 1.0f : expf(*m - mn);
                    *m = mn;
                    __m512 p = dexp(_mm512_sub_ps(s, _mm512_set1_ps(mn)), live);
                    float *l = lv + ((size_t)(h - hk) * R + r) * 16;
                    _mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), _mm512_set1_ps(c[r]), p));
                    _mm256_storeu_si256((__m256i *)(pp + r * 8), (__m256i)_mm512_cvtneps_pbh(p));
                }
                pv_dispatch(base + j->part_floats * (size_t)h * R, j->part_floats, c, pp, vi, R, D);
            }
            kb += nb;
        }
        for (int h = hk; h < hk + nh; h++)
            for (int r = 0; r < R; r++) {
                const float *l = lv + ((size_t)(h - hk) * R + r) * 16;
                float sum = 0.0f;
                for (int x = 0; x < 16; x++) sum += l[x];
                base[j->part_floats * ((size_t)h * R + r) + D + 1] = sum;
            }
    }
}

/* ---- driver ----------------------------------------------------------------------- */

static size_t r64(size_t b) { return (b + 63) / 64 * 64; }

static int dec_splits(int n_keys, int n_threads) {
    int n = n_threads > 1 ? 2 * n_threads : 1;
    if (n_keys >= 0 && n > n_keys / MIN_SPLIT) n = n_keys / MIN_SPLIT;
    return n > 1 ? n : 1;
}

static size_t dec_scratch(int T, int R, int Hkv, int D, int n_splits) {
    return r64((size_t)2 * T * 4) + r64((size_t)Hkv * R * D * 2) + r64((size_t)n_splits * Hkv * R * (D + 2) * 4);
}

void bench_attend_decode_v0(okv_threadpool *tp, const okv_attn_args *a) {
    if (a->T <= 0) return;
    dec_job j = {0};
    j.a = a;
    j.D = a->kv.head_dim;
    j.Hkv = a->kv.kv_heads;
    j.G = a->n_heads / j.Hkv;
    j.R = a->T * j.G;
    for (int r = 0; r < a->n_runs; r++) j.n_keys += a->runs[r].n;
    j.n_splits = dec_splits(j.n_keys, okv_threadpool_size(tp));
    j.split_len = (j.n_keys + j.n_splits - 1) / j.n_splits;
    j.split_len = (j.split_len + NK - 1) / NK * NK; /* splits on block bounds */
    if (j.split_len == 0) j.split_len = NK;
    j.part_floats = (size_t)j.D + 2;
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, dec_scratch(a->T, j.R, j.Hkv, j.D, j.n_splits));
    if (!mem) {
        size_t n = (size_t)a->T * a->n_heads * j.D;
        for (size_t i = 0; i < n; i++) a->out[i] = NAN;
        return;
    }
    j.qlo = (int32_t *)mem;
    j.qhi = j.qlo + a->T;
    j.qb = (uint16_t *)(mem + r64((size_t)2 * a->T * 4));
    j.part = (float *)((char *)j.qb + r64((size_t)j.Hkv * j.R * j.D * 2));
    okv_attn_query_ranges(a, j.n_keys, j.qlo, j.qhi);
    for (int h = 0; h < j.Hkv; h++)
        for (int r = 0; r < j.R; r++) {
            const float *q = a->q + ((size_t)(r / j.G) * a->n_heads + h * j.G + r % j.G) * j.D;
            uint16_t *d = j.qb + ((size_t)h * j.R + r) * j.D;
            for (int e = 0; e < j.D; e++) d[e] = okv_f32_to_bf16(q[e] * a->scale);
        }
    okv_threadpool_run(tp, j.n_splits, dec_task, &j);
    /* merge the splits' (acc, m, l) per (kv head, vector) */
    for (int h = 0; h < j.Hkv; h++)
        for (int r = 0; r < j.R; r++) {
            float *o = a->out + ((size_t)(r / j.G) * a->n_heads + h * j.G + r % j.G) * j.D;
            float M = -INFINITY, lsum = 0.0f;
            for (int sp = 0; sp < j.n_splits; sp++) {
                const float *st = j.part + j.part_floats * (((size_t)sp * j.Hkv + h) * j.R + r);
                if (st[j.D] > M) M = st[j.D];
            }
            for (int d = 0; d < j.D; d++) o[d] = 0.0f;
            if (M == -INFINITY) continue;
            for (int sp = 0; sp < j.n_splits; sp++) {
                const float *st = j.part + j.part_floats * (((size_t)sp * j.Hkv + h) * j.R + r);
                if (st[j.D] == -INFINITY) continue;
                float cf = expf(st[j.D] - M);
                lsum += st[j.D + 1] * cf;
                for (int d = 0; d < j.D; d++) o[d] += st[d] * cf;
            }
            float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            for (int d = 0; d < j.D; d++) o[d] *= inv;
        }
    okv_kscratch_release(&ks);
}
