/* attend/decode.c — decode-sized attention (fewer than 16 query vectors
 * per kv head, T x G < 16) for bf16/f16 pools (and q8 on AMX): the
 * long-context decode step, which must stream K/V at memory speed. f32
 * pools and prefill chunks go elsewhere (attend/prefill16.c, attend/blocked.c).
 * K and V may be stored in different dtypes (e.g. K bf16, V q8): scores
 * read K by its dtype, P V reads V by its own, each pool with its own row
 * size and prefetch form.
 *
 * A task is a range of keys (split over the threads, partial softmax states
 * merged at the end) for ALL kv heads, so the pool ([slot][kv head][dim]) is
 * swept contiguously, block of 16 keys by block; per block and kv head one
 * of three product kernels on the same driver (dec_run): AMX score tiles +
 * f32 FMA P V, vdpbf16ps only, or AVX2 f32 FMAs (the router's decode-amx,
 * decode-dpbf16 and decode-avx2 variants; their layouts are described in
 * docs/perf/kernel-history.md).
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (attend/decode.c). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "simd/avx2.h"

enum { NK = 16,        /* keys per block */
       RMAX = 15,      /* query vectors per kv head */
       DMAX = 256,
       MIN_SPLIT = 256, /* fewest keys per split */
       PF_STEPS = 2 /* AMX kernel: prefetch the (block, kv head) step this far ahead */ };

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define INLINE static inline __attribute__((always_inline)) TGT

typedef struct dec_job {
    const okv_attn_args *a;
    int D, G, Hkv, R, Rp, Rp_log2, n_splits, split_len, n_keys;
    int32_t *qlo, *qhi;  /* [T] */
    uint16_t *qb;        /* [Hkv][R][D] bf16 queries, scale folded in */
    uint16_t *qt;        /* AMX: [Hkv][D / 32][16 dim pairs][Rp][2], the B tiles (same memory as qb) */
    int8_t *qt8;         /* AMX, q8 pools: [Hkv][D / 32][8 dim quads][2 planes][Rp][4] int8 B tiles */
    bool q8_joint;       /* ... both planes in one tile product (Rp <= 8) */
    float *qs16;         /* ... and their scales, [Hkv][D / 32][16] (lane e: vector e % Rp) */
    float *qf;           /* AVX2: [Hkv][R][D] f32 queries, scale folded in (same memory as qb) */
    float *part;         /* [n_splits][Hkv][R] x (acc [D], m, l) */
    size_t part_floats;  /* per (split, kv head, vector): D + 2 */
} dec_job;

/* The keys split `split` must visit: [lo, hi) = the union of the queries'
 * visible ranges clipped to the split; every query sees [maxlo, minhi). */
typedef struct split_range { int32_t lo, hi, maxlo, minhi; } split_range;

static split_range dec_split_range(const dec_job *j, int split) {
    int32_t k0 = split * j->split_len, k1 = k0 + j->split_len < j->n_keys ? k0 + j->split_len : j->n_keys;
    split_range r = {INT32_MAX, 0, 0, INT32_MAX};
    for (int t = 0; t < j->a->T; t++) {
        if (j->qlo[t] > r.maxlo) r.maxlo = j->qlo[t];
        if (j->qhi[t] < r.minhi) r.minhi = j->qhi[t];
        if (j->qlo[t] >= j->qhi[t]) continue;
        if (j->qlo[t] < r.lo) r.lo = j->qlo[t];
        if (j->qhi[t] > r.hi) r.hi = j->qhi[t];
    }
    if (r.lo < k0) r.lo = k0;
    if (r.hi > k1) r.hi = k1;
    return r;
}


/* Lane L of a reduced score vector holds key key_of_lane[L] of the block. */
static const int8_t key_of_lane[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* v[i] (16 partial sums of key i) -> one vector, lane L = sum of v[key_of_lane[L]]. */
INLINE __m512 reduce16(__m512 v[16]) {
    __m512 w[8], y[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        y[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * j], w[2 * j + 1], 0xdd));
    /* y[j] block b = 4-lane partial of key 4j + b */
    __m512 p = _mm512_add_ps(_mm512_unpacklo_ps(y[0], y[1]), _mm512_unpackhi_ps(y[0], y[1]));
    __m512 q = _mm512_add_ps(_mm512_unpacklo_ps(y[2], y[3]), _mm512_unpackhi_ps(y[2], y[3]));
    return _mm512_add_ps((__m512)_mm512_unpacklo_pd((__m512d)p, (__m512d)q),
                         (__m512)_mm512_unpackhi_pd((__m512d)p, (__m512d)q));
}

/* exp(x) for x <= 0; 0 where `live` is clear (as attend/prefill16.c). */
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

/* Elements [d, d + 32) of a pool row (its first byte; d a multiple of 32)
 * as bf16: bf16/f16 as row32, q8 one block's codes x scale in f32 rounded
 * to bf16 (as the AMX prefill stages q8 rows). */
INLINE __m512i pool_row32(const char *row, okv_dtype dt, int d) {
    if (dt != OKV_Q8) return row32((const uint16_t *)row + d, dt);
    const char *blk = row + (size_t)(d / OKV_Q8_BLOCK) * OKV_Q8_BLOCK_BYTES;
    __m512 sc = _mm512_set1_ps(okv_q8_scale(blk));
    __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 16))));
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, sc), _mm512_mul_ps(lo, sc));
}

/* One kv head's state inside a task. */
typedef struct dec_head {
    float *acc;   /* [R][D] */
    float *m;     /* [R] */
    float *lv;    /* [R][16] per-lane sums */
} dec_head;

/* Scores of the block for vector r: s[L] = q . k[key_of_lane[L]] (keys >=
 * nb read as zero rows). */
INLINE __m512 block_scores(const uint16_t *q, const char *const krow[NK], okv_dtype dt, int D) {
    __m512 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < NK; i++) v[i] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int d = 0; d < D; d += 32) {
        __m512bh qv = (__m512bh)_mm512_loadu_si512(q + d);
#pragma GCC unroll 16
        for (int i = 0; i < NK; i++) v[i] = _mm512_dpbf16_ps(v[i], qv, (__m512bh)pool_row32(krow[i], dt, d));
    }
    return reduce16(v);
}

/* block_scores with D a compile-time constant per case, so the 16 partial
 * vectors stay in registers: with D known only at run time GCC kept them in
 * memory (a rep stos to zero them, every add of the reduction through the
 * stack), and the decode kernel ran at 1470 cycles per (block, kv head) on
 * Zen 4 (bench_kernels attndecode 1t hot). */
INLINE __m512 block_scores_d(const uint16_t *q, const char *const krow[NK], int D) {
    switch (D) {
    case 32: return block_scores(q, krow, OKV_BF16, 32);
    case 64: return block_scores(q, krow, OKV_BF16, 64);
    case 128: return block_scores(q, krow, OKV_BF16, 128);
    case 256: return block_scores(q, krow, OKV_BF16, 256);
    default: return block_scores(q, krow, OKV_BF16, D);
    }
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
TGT static void interleave_v(__m512i *vi, const char *const vrow[NK], okv_dtype dt, int D) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const int nc = D / 16;
    for (int j = 0; j < NK / 2; j++)
        for (int d = 0; d < D; d += 32) {
            __m512i x = pool_row32(vrow[key_of_lane[2 * j]], dt, d), y = pool_row32(vrow[key_of_lane[2 * j + 1]], dt, d);
            vi[j * nc + d / 16] = _mm512_permutex2var_epi16(x, lo, y);
            vi[j * nc + d / 16 + 1] = _mm512_permutex2var_epi16(x, hi, y);
        }
}

static const uint16_t zero_row[DMAX] __attribute__((aligned(64)));

/* f16/q8 K: the block's rows as bf16 into kst [NK][D], and krow pointed
 * at them (measured for q8 K, hot 2k, one thread: converting in
 * block_scores for every query vector took 11.2 ms, 1.45x bf16 K's). */
TGT static void stage_k_bf16(uint16_t *kst, const char *krow[NK], okv_dtype dt, int D) {
    for (int i = 0; i < NK; i++) {
        for (int d = 0; d < D; d += 32) _mm512_storeu_si512(kst + (size_t)i * D + d, pool_row32(krow[i], dt, d));
        krow[i] = (const char *)(kst + (size_t)i * D);
    }
}

TGT static void dec_task(void *ctx, int split, int thread) {
    (void)thread;
    const dec_job *j = ctx;
    const okv_attn_args *a = j->a;
    const int D = j->D, R = j->R, G = j->G, Hkv = j->Hkv;
    const okv_dtype kdt = a->kv.k_dtype, vdt = a->kv.v_dtype; /* bf16, f16 or q8 each */
    const size_t khb = okv_kv_row_bytes(kdt, (size_t)D), vhb = okv_kv_row_bytes(vdt, (size_t)D); /* one head's row */
    const char *kpool = a->kv.k, *vpool = a->kv.v;
    float *base = j->part + j->part_floats * (size_t)split * Hkv * R;
    /* per (kv head, vector): acc [D], m, l; lane sums kept apart below */
    float lv[8 * RMAX * 16]; /* per-lane sums l of up to 8 kv heads */
    for (int x = 0; x < Hkv * R; x++) {
        float *p = base + j->part_floats * x;
        memset(p, 0, sizeof(float) * D);
        p[D] = -INFINITY;
        p[D + 1] = 0.0f;
    }
    split_range sr = dec_split_range(j, split);
    int32_t L = sr.lo, H = sr.hi, maxlo = sr.maxlo, minhi = sr.minhi;
    __m512i vi[NK / 2 * DMAX / 16];
    uint16_t kst[NK * DMAX] __attribute__((aligned(64))); /* f16/q8 K: the block's rows as bf16 */
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
                const char *krow[NK], *vrow[NK];
                for (int i = 0; i < NK; i++) {
                    size_t at = (size_t)(slot + i) * Hkv + h; /* (slot, head) rows of khb / vhb bytes */
                    krow[i] = i < nb ? kpool + at * khb : (const char *)zero_row;
                    vrow[i] = i < nb ? vpool + at * vhb : (const char *)zero_row;
                }
                if (Hkv <= 8) {
                    /* one group sweeps every head: head step h prefetches the
                     * h-th 1/Hkv of the next block's K and V bytes (in address
                     * order, into L2), if the block is whole within the run */
                    if (kb + nb + NK <= run_end) {
                        size_t kper = (size_t)NK * khb, koff = (size_t)(slot + nb) * Hkv * khb + kper * h;
                        size_t vper = (size_t)NK * vhb, voff = (size_t)(slot + nb) * Hkv * vhb + vper * h;
                        for (size_t bo = 0; bo < kper; bo += 64) __builtin_prefetch(kpool + koff + bo, 0, 2);
                        for (size_t bo = 0; bo < vper; bo += 64) __builtin_prefetch(vpool + voff + bo, 0, 2);
                    }
                } else {
                    /* this head's rows of the next block (within the run), a
                     * block of the group's work ahead */
                    for (int i = 0; i < NK && kb + nb + i < run_end; i++) {
                        size_t at = (size_t)(slot + nb + i) * Hkv + h;
                        for (size_t bo = 0; bo < khb; bo += 64) __builtin_prefetch(kpool + at * khb + bo);
                        for (size_t bo = 0; bo < vhb; bo += 64) __builtin_prefetch(vpool + at * vhb + bo);
                    }
                }
                interleave_v(vi, vrow, vdt, D);
                if (kdt != OKV_BF16) stage_k_bf16(kst, krow, kdt, D); /* converted once, not once per vector */
                __m512 sv[RMAX]; /* every vector's scores first: independent work for the core to overlap */
                for (int r = 0; r < R; r++) sv[r] = block_scores_d(j->qb + ((size_t)h * R + r) * D, krow, D);
                for (int r = 0; r < R; r++) {
                    float *st = base + j->part_floats * ((size_t)h * R + r), *m = st + D;
                    __m512 s = sv[r];
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

/* ---- AMX scores, f32 FMA P V ------------------------------------------------------ */

#define TGTA __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))
#define INLA static inline __attribute__((always_inline)) TGTA

/* Tiles per padded vector count Rp (1, 2, 4, 8, 16): tmm0 the scores C
 * [16 keys][Rp] f32; tmm1/tmm3 K as A [16 keys][32 dims] bf16; tmm2/tmm4 Q
 * as B [16 dim pairs][Rp][2] bf16. Zero-initialised statics (see
 * okv_amx_tilecfg); tmm3-5 the same for odd kv heads. */
#define DEC_CFG(rp)                                                                                                 \
    {1, 0, {0}, {4 * (rp), 64, 4 * (rp), 64, 4 * (rp), 4 * (rp), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                    \
     {16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}
static const okv_amx_tilecfg dec_cfg[5] __attribute__((aligned(64))) = {DEC_CFG(1), DEC_CFG(2), DEC_CFG(4),
                                                                         DEC_CFG(8), DEC_CFG(16)};

#define TL(t, p, stride) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(stride)) : "memory")
#define TS(t, p, stride) __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)(stride)) : "memory")
#define TZ(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define TDP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define TDPI(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

/* q8 pools: int8 products over one 32-dim block, the queries' two code
 * planes side by side as the B columns ([8 dim quads][2 planes][Rp][4]),
 * so C is [16 keys][2 planes][Rp] int32. Rp <= 8 (dec_cfg_q8j): one
 * tdpbssd per block, C tmm0/tmm5, A (key codes, [16 keys][32 bytes])
 * tmm1/tmm3, B (both planes) tmm2/tmm4. Rp = 16 (dec_cfg_q8, C would be
 * 128 bytes wide): a product per plane, C tmm0+tmm6 / tmm5+tmm7, B one
 * plane at a time (rows 8 Rp bytes apart). */
#define DEC_CFG_Q8(rp)                                                                                              \
    {1, 0, {0}, {4 * (rp), 32, 4 * (rp), 32, 4 * (rp), 4 * (rp), 4 * (rp), 4 * (rp), 0, 0, 0, 0, 0, 0, 0, 0},      \
     {16, 16, 8, 16, 8, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0}}
#define DEC_CFG_Q8J(rp)                                                                                             \
    {1, 0, {0}, {8 * (rp), 32, 8 * (rp), 32, 8 * (rp), 8 * (rp), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                    \
     {16, 16, 8, 16, 8, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}
static const okv_amx_tilecfg dec_cfg_q8[5] __attribute__((aligned(64))) = {DEC_CFG_Q8(1), DEC_CFG_Q8(2), DEC_CFG_Q8(4),
                                                                            DEC_CFG_Q8(8), DEC_CFG_Q8(16)};
static const okv_amx_tilecfg dec_cfg_q8j[4] __attribute__((aligned(64))) = {DEC_CFG_Q8J(1), DEC_CFG_Q8J(2),
                                                                             DEC_CFG_Q8J(4), DEC_CFG_Q8J(8)};

/* Where channel e of an accumulator row of the AMX kernel really is: bf16
 * rows are widened as even/odd halves of each 32-channel chunk (a shift and
 * a mask), f16/q8 rows in order. */
static inline int amx_channel(int e, okv_dtype dt) {
    if (dt != OKV_BF16) return e;
    return e / 32 * 32 + (e % 16) * 2 + (e % 32) / 16;
}

/* Channels [32u, 32u + 32) of a V row as two f32 vectors (amx_channel's order). */
INLA void v_chunk32(__m512 *o, const void *row, okv_dtype dt, int u) {
    if (dt == OKV_BF16) {
        __m512i x = _mm512_loadu_si512((const uint16_t *)row + 32 * u);
        o[0] = (__m512)_mm512_slli_epi32(x, 16);
        o[1] = (__m512)_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u));
    } else if (dt == OKV_F16) {
        const uint16_t *p = (const uint16_t *)row + 32 * u;
        o[0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        o[1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 16)));
    } else {
        const char *blk = (const char *)row + (size_t)u * OKV_Q8_BLOCK_BYTES;
        __m512 sc = _mm512_set1_ps(okv_q8_scale(blk));
        o[0] = _mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk))));
        o[1] = _mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 16)))));
    }
}

/* acc[r0 + y][64c .. 64c + 16 NC) (rows `stride` floats apart) = acc * cf + sum_i
 * P[i][r0 + y] v_i, for y < nr <= 4 rows, NC = 2 or 4 vectors of channels. */
INLA void amx_pv_tile(float *acc, size_t stride, const float *cf, const float *P, int Rp, const void *const vrow[NK],
                      int nk, okv_dtype dt, int c, int NC, int r0, int nr, bool rescale) {
    __m512 a[4][4], v[4];
#pragma GCC unroll 4
    for (int y = 0; y < 4; y++)
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++) {
            a[y][x] = _mm512_setzero_ps();
            if (y < nr && x < NC) {
                a[y][x] = _mm512_loadu_ps(acc + (size_t)(r0 + y) * stride + 64 * c + 16 * x);
                if (rescale) a[y][x] = _mm512_mul_ps(a[y][x], _mm512_set1_ps(cf[r0 + y]));
            }
        }
    for (int i = 0; i < nk; i++) {
        v_chunk32(v, vrow[i], dt, 2 * c);
        if (NC == 4) v_chunk32(v + 2, vrow[i], dt, 2 * c + 1);
        const float *pi = P + (size_t)i * Rp + r0;
#pragma GCC unroll 4
        for (int y = 0; y < 4; y++) {
            if (y >= nr) continue;
            __m512 pb = _mm512_set1_ps(pi[y]);
#pragma GCC unroll 4
            for (int x = 0; x < 4; x++)
                if (x < NC) a[y][x] = _mm512_fmadd_ps(pb, v[x], a[y][x]);
        }
    }
#pragma GCC unroll 4
    for (int y = 0; y < 4; y++)
#pragma GCC unroll 4
        for (int x = 0; x < 4; x++)
            if (y < nr && x < NC) _mm512_storeu_ps(acc + (size_t)(r0 + y) * stride + 64 * c + 16 * x, a[y][x]);
}

TGTA static void amx_pv(float *acc, size_t stride, const float *cf, const float *P, int Rp, int R,
                        const void *const vrow[NK], int nk, okv_dtype dt, int D, bool rescale) {
    for (int c = 0; c < D / 64; c++)
        for (int r0 = 0; r0 < R; r0 += 4)
            amx_pv_tile(acc, stride, cf, P, Rp, vrow, nk, dt, c, 4, r0, R - r0 < 4 ? R - r0 : 4, rescale);
    if (D % 64)
        for (int r0 = 0; r0 < R; r0 += 4)
            amx_pv_tile(acc, stride, cf, P, Rp, vrow, nk, dt, D / 64, 2, r0, R - r0 < 4 ? R - r0 : 4, rescale);
}

/* A K row as bf16 into dst[D] (f16 and q8 pools: the staged A operand). */
TGTA static void k_stage_row(uint16_t *dst, const void *row, okv_dtype dt, int D) {
    for (int u = 0; u < D / 32; u++) {
        __m512i x;
        if (dt == OKV_Q8) {
            const char *blk = (const char *)row + (size_t)u * OKV_Q8_BLOCK_BYTES;
            __m512 sc = _mm512_set1_ps(okv_q8_scale(blk));
            __m512 lo = _mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk))));
            __m512 hi = _mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 16)))));
            x = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        } else {
            x = row32((const uint16_t *)row + 32 * u, dt);
        }
        _mm512_storeu_si512(dst + 32 * u, x);
    }
}

/* Lanes e ^ sh: the butterfly that gathers each vector's lanes (e % Rp). */
INLA __m512 lane_max_groups(__m512 z, int Rp) {
    for (int sh = 8; sh >= Rp; sh >>= 1) {
        __m512i idx = _mm512_xor_si512(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                       _mm512_set1_epi32(sh));
        z = _mm512_max_ps(z, _mm512_permutexvar_ps(idx, z));
    }
    return z;
}

/* S[i][r] = k_i . q_r (i < NK, r < Rp) for kv head h of the block at pool
 * slot `slot` (nb keys; bf16 full blocks read in place, else staged as
 * bf16 with zero rows past nb). Heads alternate between two tile sets so
 * head h + 1's tiles run while head h's results are used. */
TGTA static void amx_scores(const dec_job *j, int32_t slot, int h, int nb, uint16_t *stage, float *S) {
    const okv_attn_args *a = j->a;
    const int D = j->D, Rp = j->Rp;
    const okv_dtype dt = a->kv.k_dtype;
    const size_t ldk = okv_kv_row_bytes(dt, (size_t)j->Hkv * D), hrow = okv_kv_row_bytes(dt, (size_t)D);
    const char *kh = (const char *)a->kv.k + ldk * (size_t)slot + hrow * h, *ka = kh;
    size_t kstride = ldk;
    if (dt != OKV_BF16 || nb < NK) {
        for (int i = 0; i < NK; i++) {
            if (i < nb) k_stage_row(stage + (size_t)i * D, kh + ldk * (size_t)i, dt, D);
            else memset(stage + (size_t)i * D, 0, sizeof(uint16_t) * D);
        }
        ka = (const char *)stage;
        kstride = (size_t)D * 2;
    }
    const uint16_t *qt = j->qt + (size_t)h * (D / 32) * 16 * Rp * 2;
    if (h & 1) {
        TZ(5);
        for (int u = 0; u < D / 32; u++) {
            TL(3, ka + 64 * u, kstride);
            TL(4, qt + (size_t)u * 16 * Rp * 2, Rp * 4);
            TDP(5, 3, 4);
        }
        TS(5, S, Rp * 4);
    } else {
        TZ(0);
        for (int u = 0; u < D / 32; u++) {
            TL(1, ka + 64 * u, kstride);
            TL(2, qt + (size_t)u * 16 * Rp * 2, Rp * 4);
            TDP(0, 1, 2);
        }
        TS(0, S, Rp * 4);
    }
}

/* q8 pools: per 32-dim block u two tdpbssd of the block's key codes (A,
 * 16 rows of 32 bytes read in place from the pool, a pool row apart;
 * partial blocks copied with zero rows past nb) by the head's two int8
 * query code planes (B), the int32 sums stored to C[u][plane] ([16
 * keys][Rp] each), and the keys' block scales gathered into ks[u][16];
 * q8_scores_f32 scales them later. Heads alternate tile sets as in
 * amx_scores. */
TGTA static void amx_scores_q8(const dec_job *j, int32_t slot, int h, int nb, uint16_t *stage, int32_t *C, float *ks) {
    const okv_attn_args *a = j->a;
    const int D = j->D, Rp = j->Rp;
    const size_t ldk = okv_kv_row_bytes(OKV_Q8, (size_t)j->Hkv * D), hrow = okv_kv_row_bytes(OKV_Q8, (size_t)D);
    const char *ka = (const char *)a->kv.k + ldk * (size_t)slot + hrow * h;
    size_t kstride = ldk;
    if (nb < NK) {
        char *st = (char *)stage;
        for (int i = 0; i < NK; i++) {
            if (i < nb) memcpy(st + hrow * i, ka + ldk * (size_t)i, hrow);
            else memset(st + hrow * i, 0, hrow);
        }
        ka = st;
        kstride = hrow;
    }
    const int8_t *qt = j->qt8 + (size_t)h * (D / 32) * 64 * Rp;
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)kstride));
    for (int u = 0; u < D / 32; u++) {
        const char *blk = ka + (size_t)u * OKV_Q8_BLOCK_BYTES;
        const int8_t *b = qt + (size_t)u * 64 * Rp;
        int32_t *c = C + (size_t)u * 32 * Rp;
/* C1, C2 = A . (B's plane 1, plane 2), stored to c and c + Rp (rows 2 Rp apart) */
#define Q8_PLANES(C1, C2, A, B)                                                                                         \
    do {                                                                                                                \
        TZ(C1);                                                                                                         \
        TZ(C2);                                                                                                         \
        TL(A, blk, kstride);                                                                                            \
        TL(B, b, Rp * 8);                                                                                               \
        TDPI(C1, A, B);                                                                                                 \
        TL(B, b + 4 * Rp, Rp * 8);                                                                                      \
        TDPI(C2, A, B);                                                                                                 \
        TS(C1, c, Rp * 8);                                                                                              \
        TS(C2, c + Rp, Rp * 8);                                                                                         \
    } while (0)
/* C = A . B, both planes at once */
#define Q8_JOINT(C, A, B)                                                                                               \
    do {                                                                                                                \
        TZ(C);                                                                                                          \
        TL(A, blk, kstride);                                                                                            \
        TL(B, b, Rp * 8);                                                                                               \
        TDPI(C, A, B);                                                                                                  \
        TS(C, c, Rp * 8);                                                                                               \
    } while (0)
        if (j->q8_joint) {
            if (h & 1) Q8_JOINT(5, 3, 4);
            else Q8_JOINT(0, 1, 2);
        } else {
            if (h & 1) Q8_PLANES(5, 7, 3, 4);
            else Q8_PLANES(0, 6, 1, 2);
        }
#undef Q8_PLANES
#undef Q8_JOINT
        _mm512_storeu_ps(ks + 16 * u, _mm512_i32gather_ps(rows, blk + OKV_Q8_BLOCK, 1));
    }
}

/* S [16 keys][Rp] f32 = sum over blocks u of ks[u][key] qs[h][u][r]
 * (C[u][key][0][r] + C[u][key][1][r] / 254): vector x of S holds keys
 * (16 x + e) / Rp, vectors e % Rp, whose sums are C[u]'s 32 ints from 32 x
 * on (keys interleaved with planes: two permutes take them apart). */
INLA void q8_scores_f32(const dec_job *j, int h, const int32_t *C, const float *ks, float *S) {
    const int D = j->D, Rp = j->Rp, lg = j->Rp_log2;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* lane e of plane 1: key e / Rp's row (2 Rp ints) + vector e % Rp; plane 2 Rp further */
    const __m512i p1 = _mm512_add_epi32(_mm512_and_si512(iota, _mm512_set1_epi32(Rp - 1)),
                                        _mm512_slli_epi32(_mm512_srli_epi32(iota, lg), lg + 1));
    const __m512i p2 = _mm512_add_epi32(p1, _mm512_set1_epi32(Rp));
    const float *qs = j->qs16 + (size_t)h * (D / 32) * 16;
    for (int x = 0; x < Rp; x++) {
        __m512i key = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_set1_epi32(16 * x), iota), _mm512_set1_epi32(lg));
        __m512 acc = _mm512_setzero_ps();
        for (int u = 0; u < D / 32; u++) {
            __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(key, _mm512_loadu_ps(ks + 16 * u)),
                                      _mm512_loadu_ps(qs + 16 * u));
            const int32_t *c = C + (size_t)u * 32 * Rp + 32 * x;
            __m512i lo = _mm512_loadu_si512(c), hi = _mm512_loadu_si512(c + 16);
            __m512 c1 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(lo, p1, hi));
            __m512 c2 = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(lo, p2, hi));
            acc = _mm512_fmadd_ps(_mm512_fmadd_ps(c2, _mm512_set1_ps(1.0f / 254), c1), sc, acc);
        }
        _mm512_storeu_ps(S + 16 * x, acc);
    }
}

/* One pool as the AMX kernel walks it: its bytes, a slot's row (ld) and
 * one kv head's part of that row (hrow), in the pool's own dtype (K and V
 * may differ). */
typedef struct pool_rows {
    const char *base;
    size_t ld, hrow;
    bool q8;
} pool_rows;

/* Bytes [o, o + n) of a pool towards L1, a line at a time. */
static inline void prefetch_bytes(const char *pool, size_t o, size_t n) {
    for (size_t bo = 0; bo < n; bo += 64) __builtin_prefetch(pool + o + bo);
}

/* bf16/f16 pools, at head step h of the block at slot `slot` (pool
 * position kb, nb keys): the rows of the (block, head) step PF_STEPS
 * ahead, within the run. */
static inline void prefetch_head_rows(const pool_rows *p, int Hkv, int h, int32_t kb, int nb, int32_t slot,
                                      int32_t run_end) {
    int hh = h + PF_STEPS, bl = hh / Hkv;
    int32_t t0 = bl ? kb + nb + (bl - 1) * NK : kb, t1 = bl ? t0 + NK : kb + nb;
    if (t1 > run_end) t1 = run_end;
    const size_t o = p->ld * (size_t)(slot + (t0 - kb)) + p->hrow * (hh % Hkv);
    for (int32_t i = 0; i < t1 - t0; i++) prefetch_bytes(p->base, o + p->ld * (size_t)i, p->hrow);
}

/* At head step h: the h-th 1/Hkv of the next block's slot rows (from
 * slot next, at most `left` of them in the run) towards L2, in address
 * order (a q8 head's 72-byte rows share lines with its neighbours'). */
static inline void prefetch_slot_share(const pool_rows *p, int Hkv, int h, int32_t next, int32_t left) {
    int32_t n1 = left < NK ? left : NK;
    if (n1 <= 0) return;
    size_t per = ((size_t)n1 * p->ld + Hkv - 1) / Hkv, o = p->ld * (size_t)next + per * h;
    for (size_t bo = 0; bo < per; bo += 64) __builtin_prefetch(p->base + o + bo, 0, 2);
}

/* Head step h's prefetches for one pool: the next block into L2 in address
 * order, and for bf16/f16 pools also the rows of the step PF_STEPS ahead
 * into L1 (measured: docs/perf/kernel-history.md, attend/decode.c). */
static inline void prefetch_pool(const pool_rows *p, int Hkv, int h, int32_t kb, int nb, int32_t slot,
                                 int32_t run_end) {
    prefetch_slot_share(p, Hkv, h, slot + nb, run_end - (kb + nb));
    if (!p->q8) prefetch_head_rows(p, Hkv, h, kb, nb, slot, run_end);
}

typedef struct amx_state {
    float m[16], l[16]; /* per lane, pattern e -> vector e % Rp */
} amx_state;

TGTA static void amx_task(void *ctx, int split, int thread) {
    (void)thread;
    const dec_job *j = ctx;
    const okv_attn_args *a = j->a;
    const int D = j->D, R = j->R, G = j->G, Hkv = j->Hkv, Rp = j->Rp;
    const okv_dtype kdt = a->kv.k_dtype, vdt = a->kv.v_dtype;
    const size_t ld_el = (size_t)Hkv * D;
    const pool_rows kp = {a->kv.k, okv_kv_row_bytes(kdt, ld_el), okv_kv_row_bytes(kdt, (size_t)D), kdt == OKV_Q8};
    const pool_rows vp = {a->kv.v, okv_kv_row_bytes(vdt, ld_el), okv_kv_row_bytes(vdt, (size_t)D), vdt == OKV_Q8};
    float *base = j->part + j->part_floats * (size_t)split * Hkv * R;
    for (int x = 0; x < Hkv * R; x++) {
        float *p = base + j->part_floats * x;
        memset(p, 0, sizeof(float) * D);
    }
    split_range sr = dec_split_range(j, split);
    int32_t L = sr.lo, H = sr.hi, maxlo = sr.maxlo, minhi = sr.minhi;
    amx_state st[64];
    for (int h = 0; h < Hkv; h++)
        for (int e = 0; e < 16; e++) st[h].m[e] = -INFINITY, st[h].l[e] = 0.0f;
    const bool q8 = kdt == OKV_Q8; /* scores on int8 tiles */
    if (q8 && j->q8_joint) __asm__ volatile("ldtilecfg %0" ::"m"(dec_cfg_q8j[j->Rp_log2]));
    else if (q8) __asm__ volatile("ldtilecfg %0" ::"m"(dec_cfg_q8[j->Rp_log2]));
    else __asm__ volatile("ldtilecfg %0" ::"m"(dec_cfg[j->Rp_log2]));
    uint16_t stage[NK * DMAX] __attribute__((aligned(64)));
    int32_t Cq[2][DMAX / 32 * 2 * NK * 16] __attribute__((aligned(64))); /* q8: per head parity, block, plane */
    float ksc[2][DMAX / 32 * NK] __attribute__((aligned(64)));
    float Sbuf[2][NK * 16] __attribute__((aligned(64)));
    float cf[16] __attribute__((aligned(64)));
    int run = 0;
    int32_t run_start = 0;
    for (int32_t kb = L; kb < H;) {
        while (kb >= run_start + a->runs[run].n) run_start += a->runs[run++].n;
        int32_t run_end = run_start + a->runs[run].n, slot = a->runs[run].slot + (kb - run_start);
        int nb = NK - kb % NK;
        if (nb > H - kb) nb = H - kb;
        if (nb > run_end - kb) nb = run_end - kb;
        bool full = !a->vis && maxlo <= kb && kb + nb <= minhi && nb == NK;
        for (int h = 0; h < Hkv; h++) { /* scores of head h + 1 on the tiles while h's softmax and P V run */
            const char *vh = vp.base + vp.ld * (size_t)slot + vp.hrow * h;
            const void *vrow[NK];
            for (int i = 0; i < NK; i++) vrow[i] = vh + vp.ld * (size_t)(i < nb ? i : 0);
            prefetch_pool(&kp, Hkv, h, kb, nb, slot, run_end);
            prefetch_pool(&vp, Hkv, h, kb, nb, slot, run_end);
            float *S = Sbuf[h & 1];
            if (q8) {
                if (h == 0) amx_scores_q8(j, slot, 0, nb, stage, Cq[0], ksc[0]);
                if (h + 1 < Hkv) amx_scores_q8(j, slot, h + 1, nb, stage, Cq[(h + 1) & 1], ksc[(h + 1) & 1]);
                q8_scores_f32(j, h, Cq[h & 1], ksc[h & 1], S);
            } else {
                if (h == 0) amx_scores(j, slot, 0, nb, stage, S);
                if (h + 1 < Hkv) amx_scores(j, slot, h + 1, nb, stage, Sbuf[(h + 1) & 1]);
            }
            if (!full)
                for (int i = 0; i < NK; i++)
                    for (int r = 0; r < Rp; r++) {
                        bool vis = i < nb && r < R;
                        if (vis) {
                            int t = r / G;
                            vis = a->vis ? okv_attn_key_visible(a, t, slot + i)
                                         : kb + i >= j->qlo[t] && kb + i < j->qhi[t];
                        }
                        if (!vis) S[i * Rp + r] = -INFINITY;
                    }
            /* online softmax down the keys, lanes e of every vector = query e % Rp */
            __m512 z = _mm512_loadu_ps(S);
            for (int x = 1; x < Rp; x++) z = _mm512_max_ps(z, _mm512_loadu_ps(S + 16 * x));
            z = lane_max_groups(z, Rp);
            __m512 mo = _mm512_loadu_ps(st[h].m), mn = _mm512_max_ps(mo, z);
            __mmask16 moved = _mm512_cmp_ps_mask(mn, mo, _CMP_NEQ_UQ);
            __mmask16 seen = _mm512_cmp_ps_mask(mn, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
            __m512 lsum = _mm512_setzero_ps();
            for (int x = 0; x < Rp; x++) {
                __m512 s = _mm512_loadu_ps(S + 16 * x);
                __mmask16 live = seen & _mm512_cmp_ps_mask(s, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
                __m512 p = dexp(_mm512_sub_ps(s, mn), live);
                lsum = _mm512_add_ps(lsum, p);
                _mm512_storeu_ps(S + 16 * x, p);
            }
            __m512 l = _mm512_loadu_ps(st[h].l);
            bool rescale = moved != 0;
            if (rescale) {
                __mmask16 had = _mm512_cmp_ps_mask(mo, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
                __m512 c = _mm512_mask_blend_ps(moved, _mm512_set1_ps(1.0f), dexp(_mm512_sub_ps(mo, mn), had));
                _mm512_storeu_ps(cf, c);
                l = _mm512_mul_ps(l, c);
            }
            _mm512_storeu_ps(st[h].l, _mm512_add_ps(l, lsum));
            _mm512_storeu_ps(st[h].m, mn);
            amx_pv(base + j->part_floats * (size_t)h * R, j->part_floats, cf, S, Rp, R, vrow, nb, vdt, D, rescale);
        }
        kb += nb;
    }
    for (int h = 0; h < Hkv; h++)
        for (int r = 0; r < R; r++) {
            float *p = base + j->part_floats * ((size_t)h * R + r), sum = 0.0f;
            for (int e = r; e < 16; e += Rp) sum += st[h].l[e];
            p[D] = st[h].m[r];
            p[D + 1] = sum;
        }
}

/* ---- AVX2 + FMA kernel (avx2_task; f32/bf16/f16 pools; CPUs without AVX-512) ------- */

#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define INL2 static inline __attribute__((always_inline)) TGT2

enum { NK2 = 16 }; /* keys per block: two vectors of 8, one lane a key */

/* 8 elements of a pool row from element d as f32 (exact widening). */
INL2 __m256 row8(const char *row, okv_dtype dt, int d) { return okv_load8_f32(row, dt, (size_t)d); }

/* v[i] (8 partial-sum vectors, one per key) -> one vector, lane i = the sum of v[i]. */
INL2 __m256 reduce8(const __m256 v[8]) {
    __m256 a = _mm256_hadd_ps(v[0], v[1]), b = _mm256_hadd_ps(v[2], v[3]);
    __m256 c = _mm256_hadd_ps(v[4], v[5]), d = _mm256_hadd_ps(v[6], v[7]);
    __m256 e = _mm256_hadd_ps(a, b), f = _mm256_hadd_ps(c, d);
    return _mm256_add_ps(_mm256_permute2f128_ps(e, f, 0x20), _mm256_permute2f128_ps(e, f, 0x31));
}

INL2 float hmax8f(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

INL2 float hsum8f(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* exp(x) for x <= 0 (the polynomial of dexp; 2^n put into the exponent,
 * x below -87 gives ~2^-126, which no softmax sum can tell from 0). */
INL2 __m256 exp8(__m256 x) {
    __m256 t = _mm256_mul_ps(_mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_setzero_ps()),
                             _mm256_set1_ps(1.44269504088896341f));
    __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(t, n);
    __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}

/* Scores of 8 staged keys for one query vector: lane i = q . k[i]. */
INL2 __m256 scores8(const float *q, const float *kst, int D) {
    __m256 v[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) v[i] = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) v[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kst + i * D + d), v[i]);
    }
    return reduce8(v);
}

/* acc[r][d .. d + 16) = acc * c[r] + sum_i p[r][i] v[i][d ..] for rows [r0, r0 + nr) (nr <= 4),
 * V rows read from the pool and widened in registers (once per tile: the tile has every row). */
INL2 void pv_tile8(float *acc, size_t stride, const float *c, const float *p, const char *const vrow[NK2],
                   okv_dtype dt, int r0, int nr, int d) {
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int y = 0; y < 4; y++) {
        a[y][0] = a[y][1] = _mm256_setzero_ps();
        if (y >= nr) continue;
        __m256 cv = _mm256_set1_ps(c[r0 + y]);
        a[y][0] = _mm256_mul_ps(cv, _mm256_loadu_ps(acc + (size_t)(r0 + y) * stride + d));
        a[y][1] = _mm256_mul_ps(cv, _mm256_loadu_ps(acc + (size_t)(r0 + y) * stride + d + 8));
    }
#pragma GCC unroll 8
    for (int i = 0; i < NK2; i++) {
        __m256 v0 = row8(vrow[i], dt, d), v1 = row8(vrow[i], dt, d + 8);
#pragma GCC unroll 4
        for (int y = 0; y < 4; y++) {
            if (y >= nr) continue;
            __m256 pv = _mm256_broadcast_ss(p + (r0 + y) * NK2 + i);
            a[y][0] = _mm256_fmadd_ps(pv, v0, a[y][0]);
            a[y][1] = _mm256_fmadd_ps(pv, v1, a[y][1]);
        }
    }
#pragma GCC unroll 4
    for (int y = 0; y < 4; y++) {
        if (y >= nr) continue;
        _mm256_storeu_ps(acc + (size_t)(r0 + y) * stride + d, a[y][0]);
        _mm256_storeu_ps(acc + (size_t)(r0 + y) * stride + d + 8, a[y][1]);
    }
}

/* The same for one 8-channel vector (D % 16 == 8: the last one). */
INL2 void pv_tail8(float *acc, size_t stride, const float *c, const float *p, const char *const vrow[NK2],
                   okv_dtype dt, int R, int d) {
    for (int r = 0; r < R; r++) {
        __m256 a = _mm256_mul_ps(_mm256_set1_ps(c[r]), _mm256_loadu_ps(acc + (size_t)r * stride + d));
        for (int i = 0; i < NK2; i++) a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * NK2 + i), row8(vrow[i], dt, d), a);
        _mm256_storeu_ps(acc + (size_t)r * stride + d, a);
    }
}

/* P V of the block for all R vectors of a kv head. */
INL2 void pv_block8(float *acc, size_t stride, const float *c, const float *p, const char *const vrow[NK2],
                    okv_dtype dt, int R, int D) {
    int d = 0;
    for (; d + 16 <= D; d += 16)
        for (int r0 = 0; r0 < R; r0 += 4) pv_tile8(acc, stride, c, p, vrow, dt, r0, R - r0 < 4 ? R - r0 : 4, d);
    if (d < D) pv_tail8(acc, stride, c, p, vrow, dt, R, d);
}

/* The block's K rows widened to f32 into st[NK2][D]. */
INL2 void stage_rows(float *st, const char *const krow[NK2], okv_dtype dt, int D) {
#pragma GCC unroll 8
    for (int i = 0; i < NK2; i++)
        for (int d = 0; d < D; d += 8) _mm256_storeu_ps(st + i * D + d, row8(krow[i], dt, d));
}

/* One copy per pool dtype, so the loads are not branches. */
TGT2 static void stage_k(float *st, const char *const krow[NK2], okv_dtype dt, int D) {
    switch (dt) {
    case OKV_F32: stage_rows(st, krow, OKV_F32, D); break;
    case OKV_F16: stage_rows(st, krow, OKV_F16, D); break;
    default: stage_rows(st, krow, OKV_BF16, D); break;
    }
}

TGT2 static void pv_v(float *acc, size_t stride, const float *c, const float *p, const char *const vrow[NK2],
                      okv_dtype dt, int R, int D) {
    switch (dt) {
    case OKV_F32: pv_block8(acc, stride, c, p, vrow, OKV_F32, R, D); break;
    case OKV_F16: pv_block8(acc, stride, c, p, vrow, OKV_F16, R, D); break;
    default: pv_block8(acc, stride, c, p, vrow, OKV_BF16, R, D); break;
    }
}

static const float zero_row_f32[DMAX] __attribute__((aligned(64)));

TGT2 static void avx2_task(void *ctx, int split, int thread) {
    (void)thread;
    const dec_job *j = ctx;
    const okv_attn_args *a = j->a;
    const int D = j->D, R = j->R, G = j->G, Hkv = j->Hkv;
    const okv_dtype kdt = a->kv.k_dtype, vdt = a->kv.v_dtype;
    const size_t kesz = kdt == OKV_F32 ? 4 : 2, vesz = vdt == OKV_F32 ? 4 : 2;
    const size_t kslot_bytes = (size_t)Hkv * D * kesz, vslot_bytes = (size_t)Hkv * D * vesz; /* one slot of each pool */
    float *base = j->part + j->part_floats * (size_t)split * Hkv * R;
    for (int x = 0; x < Hkv * R; x++) {
        float *p = base + j->part_floats * x;
        memset(p, 0, sizeof(float) * D);
        p[D] = -INFINITY;
        p[D + 1] = 0.0f;
    }
    split_range sr = dec_split_range(j, split);
    float kst[NK2 * DMAX], pbuf[RMAX * NK2], c[RMAX];
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int run = 0;
    int32_t run_start = 0;
    for (int32_t kb = sr.lo; kb < sr.hi;) {
        while (kb >= run_start + a->runs[run].n) run_start += a->runs[run++].n;
        int32_t run_end = run_start + a->runs[run].n, slot = a->runs[run].slot + (kb - run_start);
        int nb = NK2 - kb % NK2;
        if (nb > sr.hi - kb) nb = sr.hi - kb;
        if (nb > run_end - kb) nb = run_end - kb;
        bool full = !a->vis && sr.maxlo <= kb && kb + nb <= sr.minhi;
        __m256i keys[2], in_block[2];
        for (int x = 0; x < 2; x++) {
            keys[x] = _mm256_add_epi32(_mm256_set1_epi32(kb + 8 * x), lane);
            in_block[x] = _mm256_cmpgt_epi32(_mm256_set1_epi32(kb + nb), keys[x]);
        }
        const char *kblock = (const char *)a->kv.k + (size_t)slot * kslot_bytes;
        const char *vblock = (const char *)a->kv.v + (size_t)slot * vslot_bytes;
        for (int h = 0; h < Hkv; h++) {
            /* head step h asks for the h-th 1/Hkv of the next block's K and V
             * bytes (address order, into L2) when that block is in this run */
            if (kb + nb + NK2 <= run_end) {
                size_t kper = (NK2 * kslot_bytes + Hkv - 1) / Hkv, koff = nb * kslot_bytes + kper * h;
                size_t vper = (NK2 * vslot_bytes + Hkv - 1) / Hkv, voff = nb * vslot_bytes + vper * h;
                for (size_t bo = 0; bo < kper; bo += 64) __builtin_prefetch(kblock + koff + bo, 0, 2);
                for (size_t bo = 0; bo < vper; bo += 64) __builtin_prefetch(vblock + voff + bo, 0, 2);
            }
            const char *krow[NK2], *vrow[NK2];
            for (int i = 0; i < NK2; i++) { /* rows past nb read as zeros */
                size_t koff = (size_t)i * kslot_bytes + (size_t)h * D * kesz;
                size_t voff = (size_t)i * vslot_bytes + (size_t)h * D * vesz;
                krow[i] = i < nb ? kblock + koff : (const char *)zero_row_f32;
                vrow[i] = i < nb ? vblock + voff : (const char *)zero_row_f32;
            }
            stage_k(kst, krow, kdt, D);
            float *st0 = base + j->part_floats * (size_t)h * R;
            for (int r = 0; r < R; r++) {
                float *st = st0 + j->part_floats * r, *m = st + D, *l = st + D + 1;
                int t = r / G;
                const float *q = j->qf + ((size_t)h * R + r) * D;
                __m256 sc[2] = {scores8(q, kst, D), scores8(q, kst + 8 * D, D)};
                __m256 livef[2], bmv = _mm256_set1_ps(-INFINITY);
                for (int x = 0; x < 2; x++) {
                    __m256i live = in_block[x];
                    if (!full && a->vis) {
                        int32_t bits[8];
                        for (int i = 0; i < 8; i++)
                            bits[i] = 8 * x + i < nb && okv_attn_key_visible(a, t, slot + 8 * x + i) ? -1 : 0;
                        live = _mm256_loadu_si256((const __m256i *)bits);
                    } else if (!full) {
                        live = _mm256_and_si256(live, _mm256_cmpgt_epi32(keys[x], _mm256_set1_epi32(j->qlo[t] - 1)));
                        live = _mm256_and_si256(live, _mm256_cmpgt_epi32(_mm256_set1_epi32(j->qhi[t]), keys[x]));
                    }
                    livef[x] = _mm256_castsi256_ps(live);
                    bmv = _mm256_max_ps(bmv, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sc[x], livef[x]));
                }
                float bm = hmax8f(bmv);
                float mn = bm > *m ? bm : *m;
                if (mn == -INFINITY) { /* nothing seen yet */
                    c[r] = 1.0f;
                    _mm256_storeu_ps(pbuf + r * NK2, _mm256_setzero_ps());
                    _mm256_storeu_ps(pbuf + r * NK2 + 8, _mm256_setzero_ps());
                    continue;
                }
                c[r] = *m == -INFINITY ? 0.0f : mn == *m ? 1.0f : expf(*m - mn);
                *m = mn;
                __m256 mv = _mm256_set1_ps(mn);
                __m256 p0 = _mm256_and_ps(exp8(_mm256_sub_ps(sc[0], mv)), livef[0]);
                __m256 p1 = _mm256_and_ps(exp8(_mm256_sub_ps(sc[1], mv)), livef[1]);
                *l = *l * c[r] + hsum8f(_mm256_add_ps(p0, p1));
                _mm256_storeu_ps(pbuf + r * NK2, p0);
                _mm256_storeu_ps(pbuf + r * NK2 + 8, p1);
            }
            pv_v(st0, j->part_floats, c, pbuf, vrow, vdt, R, D);
        }
        kb += nb;
    }
}

/* ---- driver ----------------------------------------------------------------------- */

static size_t r64(size_t b) { return (b + 63) / 64 * 64; }

static int dec_splits(int n_keys, int n_threads) {
    int n = n_threads > 1 ? 2 * n_threads : 1;
    if (n_keys >= 0 && n > n_keys / MIN_SPLIT) n = n_keys / MIN_SPLIT;
    return n > 1 ? n : 1;
}

/* Query vectors padded to a power of two (the score tile's columns). */
static int pad_vectors(int R) {
    int p = 1;
    while (p < R) p *= 2;
    return p;
}

/* qlo/qhi, the queries (bf16 tiles, or f32 for the AVX2 kernel), the splits' states. */
static size_t dec_scratch(int T, int R, int Hkv, int D, int n_splits) {
    return r64((size_t)2 * T * 4) + r64((size_t)Hkv * pad_vectors(R) * D * 4) + r64((size_t)Hkv * D * 2) +
           r64((size_t)n_splits * Hkv * R * (D + 2) * 4);
}

static bool dec_shape_ok(int T, int n_heads, int kv_heads, int D) {
    if (kv_heads <= 0 || n_heads % kv_heads || D % 32 || D > DMAX) return false;
    return (int64_t)T * (n_heads / kv_heads) <= RMAX && okv_cpu()->avx512bf16 && okv_cpu()->avx512bw;
}

static bool is16(okv_dtype dt) { return dt == OKV_BF16 || dt == OKV_F16; }

bool okv_attend_decode_dpbf16_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt) {
    return (is16(k_dt) || k_dt == OKV_Q8) && (is16(v_dt) || v_dt == OKV_Q8) && dec_shape_ok(T, n_heads, kv_heads, D);
}

/* K: 16-bit (bf16 tiles) or q8 (int8 tiles); V: 16-bit or q8 (f32 FMAs). */
bool okv_attend_decode_amx_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt) {
    return (is16(k_dt) || (k_dt == OKV_Q8 && okv_cpu()->amx_int8)) && (is16(v_dt) || v_dt == OKV_Q8) &&
           kv_heads <= 64 && dec_shape_ok(T, n_heads, kv_heads, D) && okv_amx_usable(NULL);
}

bool okv_attend_decode_avx2_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt) {
    const okv_cpu_caps *c = okv_cpu();
    if (kv_heads <= 0 || n_heads % kv_heads || D <= 0 || D % 8 || D > DMAX) return false;
    return (k_dt == OKV_F32 || is16(k_dt)) && (v_dt == OKV_F32 || is16(v_dt)) &&
           (int64_t)T * (n_heads / kv_heads) <= RMAX && c->avx2 && c->fma && c->f16c;
}

bool okv_attend_decode_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt) {
    return okv_attend_decode_amx_fits(T, n_heads, kv_heads, D, k_dt, v_dt) ||
           okv_attend_decode_dpbf16_fits(T, n_heads, kv_heads, D, k_dt, v_dt);
}

size_t okv_attend_decode_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads) {
    if (T <= 0 || kv_heads <= 0 || n_heads < kv_heads || head_dim <= 0 || head_dim % 8 || head_dim > DMAX) return 0;
    int G = n_heads / kv_heads, t = T * G <= RMAX ? T : RMAX / G;
    if (t < 1) return 0;
    return dec_scratch(t, t * G, kv_heads, head_dim, dec_splits(-1, n_threads < 1 ? 1 : n_threads));
}

/* q8 pools on AMX: each query vector (scale folded in) quantized per 32-dim
 * block in two int8 planes, x ~ s (c1 + c2 / 254) with s = max|x| / 127,
 * c1 = round(x / s) (as the pool's rows) and c2 = round(254 (x / s - c1)),
 * both in [-127, 127]: ~15 bits of each query element, so the scores lose
 * nothing to the query's rounding (one plane, 8 bits, measured KL 1.5x
 * the bf16-staged kernel's on SmolLM2; see the file head). Into the int8
 * B tiles qt8 and their scales qs16; padded vectors r >= R are zero. */
static void dec_quantize_queries(dec_job *j) {
    const okv_attn_args *a = j->a;
    const int D = j->D, Rp = j->Rp, U = D / 32;
    for (int h = 0; h < j->Hkv; h++)
        for (int r = 0; r < Rp; r++) {
            const float *q = r < j->R ? a->q + ((size_t)(r / j->G) * a->n_heads + h * j->G + r % j->G) * D : NULL;
            for (int u = 0; u < U; u++) {
                float x[32], amax = 0.0f;
                for (int d = 0; d < 32; d++) {
                    x[d] = q ? q[32 * u + d] * a->scale : 0.0f;
                    amax = fabsf(x[d]) > amax ? fabsf(x[d]) : amax;
                }
                float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                int8_t *b = j->qt8 + ((size_t)h * U + u) * 64 * Rp;
                for (int d = 0; d < 32; d++) { /* B row d / 4 = dim quad, column (plane, r), byte d % 4 */
                    float c1 = rintf(x[d] * inv);
                    b[((d / 4) * 2 * Rp + r) * 4 + d % 4] = (int8_t)c1;
                    b[((d / 4) * 2 * Rp + Rp + r) * 4 + d % 4] = (int8_t)lrintf((x[d] * inv - c1) * 254.0f);
                }
                for (int e = r; e < 16; e += Rp) j->qs16[((size_t)h * U + u) * 16 + e] = amax / 127.0f;
            }
        }
}

typedef enum dec_kernel { DEC_DPBF16, DEC_AMX, DEC_AVX2 } dec_kernel;

/* The queries, scale folded in, as each kernel reads them: f32 rows (AVX2),
 * bf16 rows (vdpbf16ps), bf16 B tiles with Rp columns (AMX). */
static void dec_pack_queries(dec_job *j, dec_kernel kernel) {
    const okv_attn_args *a = j->a;
    const bool amx = kernel == DEC_AMX;
    const int D = j->D;
    for (int h = 0; h < j->Hkv; h++)
        for (int r = 0; r < (amx ? j->Rp : j->R); r++) {
            const float *q = r < j->R ? a->q + ((size_t)(r / j->G) * a->n_heads + h * j->G + r % j->G) * D : NULL;
            if (kernel == DEC_AVX2) {
                for (int e = 0; e < D; e++) j->qf[((size_t)h * j->R + r) * D + e] = q[e] * a->scale;
                continue;
            }
            for (int e = 0; e < D; e++) {
                uint16_t b = q ? okv_f32_to_bf16(q[e] * a->scale) : 0;
                if (amx) /* B tile u: row (e % 32) / 2 = dim pair, column r, element e % 2 */
                    j->qt[((((size_t)h * (D / 32) + e / 32) * 16 + (e % 32) / 2) * j->Rp + r) * 2 + e % 2] = b;
                else
                    j->qb[((size_t)h * j->R + r) * D + e] = b;
            }
        }
}

static void dec_run(okv_threadpool *tp, const okv_attn_args *a, dec_kernel kernel) {
    const bool amx = kernel == DEC_AMX;
    if (a->T <= 0) return;
    dec_job j = {0};
    j.a = a;
    j.D = a->kv.head_dim;
    j.Hkv = a->kv.kv_heads;
    j.G = a->n_heads / j.Hkv;
    j.R = a->T * j.G;
    j.Rp = pad_vectors(j.R);
    while (1 << j.Rp_log2 < j.Rp) j.Rp_log2++;
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
    j.qb = j.qt = (uint16_t *)(mem + r64((size_t)2 * a->T * 4));
    j.qf = (float *)j.qb;
    j.part = (float *)((char *)j.qb + r64((size_t)j.Hkv * j.Rp * j.D * 4) + r64((size_t)j.Hkv * j.D * 2));
    okv_attn_query_ranges(a, j.n_keys, j.qlo, j.qhi);
    if (amx && a->kv.k_dtype == OKV_Q8) {
        j.qt8 = (int8_t *)j.qt;
        j.qs16 = (float *)((char *)j.qt + r64((size_t)j.Hkv * j.Rp * j.D * 2));
        j.q8_joint = j.Rp <= 8;
        dec_quantize_queries(&j);
    } else {
        dec_pack_queries(&j, kernel);
    }
    okv_threadpool_run(tp, j.n_splits, amx ? amx_task : kernel == DEC_AVX2 ? avx2_task : dec_task, &j);
    /* merge the splits' (acc, m, l) per (kv head, vector) */
    okv_dtype perm = amx ? a->kv.v_dtype : OKV_F32; /* amx_channel's order, or as is */
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
                for (int d = 0; d < j.D; d++) o[amx_channel(d, perm)] += st[d] * cf;
            }
            float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            for (int d = 0; d < j.D; d++) o[d] *= inv;
        }
    okv_kscratch_release(&ks);
}

void okv_attend_decode_dpbf16(okv_threadpool *tp, const okv_attn_args *a) { dec_run(tp, a, DEC_DPBF16); }

void okv_attend_decode_amx(okv_threadpool *tp, const okv_attn_args *a) { dec_run(tp, a, DEC_AMX); }

void okv_attend_decode_avx2(okv_threadpool *tp, const okv_attn_args *a) { dec_run(tp, a, DEC_AVX2); }
