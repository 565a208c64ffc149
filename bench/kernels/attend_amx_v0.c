/* attend_amx_v0.c — the AMX prefill attention as it was before the
 * single-pass softmax / O^T-on-tiles rewrite of src/kernels/okv_attend_amx.c,
 * frozen here ONLY so bench_kernels (attnamx) can time the old and the new
 * kernel side by side in one run on the same data. Not linked into the
 * library; delete it once the comparison is no longer wanted. Callers must
 * only pass calls the tiles take (bf16/f16 pools, head_dim % 32 == 0, G <=
 * 32, T x G >= 16) on a CPU where okv_amx_usable() is true. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "attend_amx_v0.h"

enum { KB = 64,     /* keys per block */
       MV = 32,     /* query vectors per task (two tiles of 16 columns) */
       DMAX = 256,  /* largest head_dim on tiles */
       OKV_AMX_ATTN_MIN_VECS = 16, /* query vectors per kv head that go on tiles (decode: AVX-512, see above) */
       NQB = 16,    /* row blocks sharing each K/V block (L2: 16 x 13 KiB at D = 64) */
       MIN_SPLIT = 512 };

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))
#define INLINE static inline __attribute__((always_inline)) TGT

/* Palette 1, tiles 0-7 16 rows x 64 bytes, every other byte zero (a static:
 * see okv_amx_tilecfg). */
static const okv_amx_tilecfg attn_tilecfg __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0}};

#define TL(t, p, stride) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(stride)) : "memory")
#define TS(t, p, stride) __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)(stride)) : "memory")
#define TZ(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define TDP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

/* ---- shape and scratch ------------------------------------------------------------ */

typedef struct amx_shape {
    int D, G, Hkv, Tb, n_qblocks, nqb, n_sblocks, base_tasks; /* nqb row blocks per task (a super-block) */
    size_t thread_bytes, qb_bytes, part_floats; /* part per row block: acc [MV][D], m, l [MV] */
} amx_shape;

/* Per thread: kst (KB x D bf16), vp (2 x D/16 B tiles), st (KB x MV f32),
 * pw (KB/2 x 16 dwords), pt (2 x 2 A tiles), ct (MV x 32 f32), and per row
 * block of the super-block: qb (D/32 x 2 B tiles), c, vlo, vhi [MV], own
 * partial (acc, m, l). Super-blocks of up to NQB row blocks share each K/V
 * block read, fewer when that leaves too few tasks for the threads. */
static amx_shape amx_shape_of(int T, int n_heads, int kv_heads, int D, int n_threads) {
    amx_shape s = {0};
    s.D = D;
    s.Hkv = kv_heads;
    s.G = n_heads / kv_heads;
    s.Tb = MV / s.G > 1 ? MV / s.G : 1;
    if (s.Tb > T) s.Tb = T;
    s.n_qblocks = (T + s.Tb - 1) / s.Tb;
    s.nqb = NQB;
    while (s.nqb > 1 && (int64_t)s.Hkv * ((s.n_qblocks + s.nqb - 1) / s.nqb) < 4 * n_threads) s.nqb /= 2;
    s.n_sblocks = (s.n_qblocks + s.nqb - 1) / s.nqb;
    s.base_tasks = s.Hkv * s.n_sblocks;
    s.part_floats = (size_t)MV * D + 2 * MV;
    s.qb_bytes = (size_t)D * 64 + 3 * MV * 4 + s.part_floats * 4;
    s.thread_bytes = (size_t)KB * D * 2 + (size_t)D * 128 + KB * MV * 4 + KB / 2 * 64 + 4 * 1024 + MV * 32 * 4 +
                     s.qb_bytes * s.nqb;
    s.thread_bytes = (s.thread_bytes + 63) / 64 * 64;
    return s;
}

static int amx_splits(const amx_shape *s, int n_keys, int n_threads) {
    if (n_threads <= 1 || s->base_tasks >= 2 * n_threads) return 1;
    int n = (4 * n_threads + s->base_tasks - 1) / s->base_tasks;
    if (n_keys >= 0 && n > n_keys / MIN_SPLIT) n = n_keys / MIN_SPLIT;
    return n > 1 ? n : 1;
}

static size_t r64(size_t b) { return (b + 63) / 64 * 64; }

static size_t amx_scratch(const amx_shape *s, int T, int n_threads, int n_splits) {
    size_t b = r64((size_t)2 * T * 4) + s->thread_bytes * n_threads;
    if (n_splits > 1) b += r64(s->part_floats * 4 * s->nqb * s->base_tasks * n_splits);
    return b;
}

/* ---- vector pieces ---------------------------------------------------------------- */

/* 2^x for x <= 0 (scores are in log2 units: log2 e is folded into q's
 * scale), 0 where x is -inf or NaN (-inf - -inf): the clamp at -160 takes
 * NaN too (max returns its second operand), and 2^-160 underflows to 0, so
 * no mask is needed. 2^n * 2^f, |f| <= 1/2, degree-3 minimax polynomial
 * (rel. error 7.5e-5, far below p's bf16 rounding 2^-9). */
INLINE __m512 exp2_neg(__m512 x) {
    __m512 t = _mm512_max_ps(x, _mm512_set1_ps(-160.0f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(5.517160858369809e-2f), f, _mm512_set1_ps(2.4261111757278725e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.932609966238258e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.999280741082714e-1f));
    return _mm512_scalef_ps(p, n);
}

/* 32 elements of a row in dt (bf16 or f16) as bf16, lanes >= n zero. */
INLINE __m512i load32_bf16(const void *row, okv_dtype dt, int n) {
    __mmask32 m = n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1);
    if (dt == OKV_BF16) return _mm512_maskz_loadu_epi16(m, row);
    __m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)m, row));
    __m512 hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)(m >> 16), (const uint16_t *)row + 16));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* r[i] (16 dwords each) := column i of the 16x16 dword matrix r. */
INLINE void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4a + b] now holds, in 128-bit lane L, element b of rows 4L'.. : finish
     * with two rounds of 128-bit lane shuffles */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* ---- the job ------------------------------------------------------------------------ */

typedef struct amx_job {
    const okv_attn_args *a;
    amx_shape s;
    int n_keys, n_splits, split_len;
    int32_t *qlo, *qhi;
    char *scratch;
    float *part;
} amx_job;

typedef struct amx_qblock { /* one row block of a super-block */
    uint16_t *qb;       /* [D/32][2] B tiles: row dp = (q[v][2dp], q[v][2dp+1]) for 16 v */
    float *c;           /* [MV] rescale factors of the key block */
    int32_t *vlo, *vhi; /* [MV] visible logical key range per vector */
    float *acc, *m, *l; /* [MV][D], [MV], [MV] */
    int t0, t1, R, nqt;
    int32_t L, H, maxlo, minhi; /* keys any / every row sees */
} amx_qblock;

typedef struct amx_task {
    uint16_t *kst; /* [KB][D] staged keys */
    uint16_t *vp;  /* [2][D/16] B tiles: row kp = (v[2kp][d], v[2kp+1][d]) for 16 d */
    float *st;     /* [KB][MV] scores, keys down */
    __m512i *pw;   /* [KB/2] interleaved probability pairs of one column tile */
    uint16_t *pt;  /* [2 vec tiles][2 key halves] A tiles of P */
    float *ct;     /* [MV][32] one pass of P V */
} amx_task;

/* Buffers of a task; qbs[i] for row block i of the super-block (task: the
 * index into the split partials). */
static void task_buffers(const amx_job *j, int thread, int task, amx_task *b, amx_qblock *qbs) {
    const int D = j->s.D;
    char *p = j->scratch + j->s.thread_bytes * thread;
    b->kst = (uint16_t *)p, p += (size_t)KB * D * 2;
    b->vp = (uint16_t *)p, p += (size_t)D * 128;
    b->st = (float *)p, p += KB * MV * 4;
    b->pw = (__m512i *)p, p += KB / 2 * 64;
    b->pt = (uint16_t *)p, p += 4 * 1024;
    b->ct = (float *)p, p += MV * 32 * 4;
    for (int i = 0; i < j->s.nqb; i++) {
        amx_qblock *q = &qbs[i];
        q->qb = (uint16_t *)p, p += (size_t)D * 64;
        q->c = (float *)p, p += MV * 4;
        q->vlo = (int32_t *)p, p += MV * 4;
        q->vhi = (int32_t *)p, p += MV * 4;
        float *own = (float *)p;
        p += j->s.part_floats * 4;
        q->acc = j->n_splits > 1 ? j->part + j->s.part_floats * ((size_t)task * j->s.nqb + i) : own;
        q->m = q->acc + (size_t)MV * D;
        q->l = q->m + MV;
    }
}

static int vec_row(const amx_shape *s, int t0, int r) { return t0 + r / s->G; }
static int vec_head(const amx_shape *s, int kvh, int r) { return kvh * s->G + r % s->G; }

/* Q^T of the task's vectors as B tiles, scale folded in, padding zero. */
TGT static void build_qb(const amx_job *j, const amx_qblock *b, int kvh, int t0, int R) {
    const okv_attn_args *a = j->a;
    const int D = j->s.D;
    const float qscale = a->scale * 1.44269504088896341f; /* scores in log2 units */
    memset(b->qb, 0, (size_t)D * 64);
    for (int r = 0; r < R; r++) {
        const float *q = a->q + ((size_t)vec_row(&j->s, t0, r) * a->n_heads + vec_head(&j->s, kvh, r)) * D;
        int qt = r / 16, col = r % 16;
        for (int d = 0; d < D; d += 2) {
            uint16_t *dst = b->qb + (((size_t)(d / 32) * 2 + qt) * 16 + (d % 32) / 2) * 32 + 2 * col;
            dst[0] = okv_f32_to_bf16(q[d] * qscale);
            dst[1] = okv_f32_to_bf16(q[d + 1] * qscale);
        }
    }
}

/* V of keys [0, nb) of the block (rows ld elements apart) as B tiles in
 * pairs of keys; keys past nb are zero. */
TGT static void build_vp(const amx_task *b, const char *V, okv_dtype dt, size_t ld, int nb, int nks, int D) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const int ndt = D / 16;
    for (int kp = 0; kp < 16 * nks; kp++) {
        int i0 = 2 * kp, ks = kp / 16, row = kp % 16;
        const char *v0 = V + (size_t)i0 * ld * 2, *v1 = v0 + ld * 2;
        for (int d = 0; d < D; d += 32) {
            __m512i x = i0 < nb ? load32_bf16((const uint16_t *)v0 + d, dt, 32) : _mm512_setzero_si512();
            __m512i y = i0 + 1 < nb ? load32_bf16((const uint16_t *)v1 + d, dt, 32) : _mm512_setzero_si512();
            uint16_t *t0 = b->vp + (((size_t)ks * ndt + d / 16) * 16 + row) * 32;
            _mm512_storeu_si512(t0, _mm512_permutex2var_epi16(x, lo, y));
            _mm512_storeu_si512(t0 + 16 * 32, _mm512_permutex2var_epi16(x, hi, y));
        }
    }
}

/* Keys [0, nb) into kst as bf16 rows of D, zero rows up to 32 * nks. */
TGT static void stage_k(const amx_task *b, const char *K, okv_dtype dt, size_t ld, int nb, int nks, int D) {
    for (int i = 0; i < 32 * nks; i++)
        for (int d = 0; d < D; d += 32) {
            __m512i x = i < nb ? load32_bf16((const uint16_t *)(K + (size_t)i * ld * 2) + d, dt, 32) : _mm512_setzero_si512();
            _mm512_storeu_si512(b->kst + (size_t)i * D + d, x);
        }
}

/* st[key][vec] = k . q for the block's 32 * nks keys and 16 * nqt vectors. */
TGT static void scores_tiles(const amx_task *b, const amx_qblock *q, const uint16_t *K, size_t kstride, int nks, int nqt,
                              int D) {
    for (int h = 0; h < nks; h++) {
        const uint16_t *k0 = K + (size_t)(32 * h) * (kstride / 2), *k1 = k0 + (size_t)16 * (kstride / 2);
        float *s0 = b->st + (size_t)(32 * h) * MV, *s1 = s0 + 16 * MV;
        TZ(0);
        TZ(1);
        TZ(2);
        TZ(3);
        for (int ds = 0; ds < D / 32; ds++) {
            TL(4, k0 + ds * 32, kstride);
            TL(5, k1 + ds * 32, kstride);
            TL(6, q->qb + (size_t)(ds * 2) * 512, 64);
            TDP(0, 4, 6);
            TDP(2, 5, 6);
            if (nqt > 1) {
                TL(7, q->qb + (size_t)(ds * 2 + 1) * 512, 64);
                TDP(1, 4, 7);
                TDP(3, 5, 7);
            }
        }
        TS(0, s0, MV * 4);
        TS(2, s1, MV * 4);
        if (nqt > 1) {
            TS(1, s0 + 16, MV * 4);
            TS(3, s1 + 16, MV * 4);
        }
    }
}

/* -inf where vector r may not see key kb + i (rows of keys >= nb too). */
TGT static void mask_scores(const amx_job *j, const amx_task *b, const amx_qblock *q, int32_t kb, int nb, int nks,
                            int32_t slot, bool full) {
    const int t0 = q->t0, R = q->R, nqt = q->nqt;
    const okv_attn_args *a = j->a;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < 32 * nks; i++) {
        float *row = b->st + (size_t)i * MV;
        if (i >= nb) {
            _mm512_storeu_ps(row, ninf);
            _mm512_storeu_ps(row + 16, ninf);
            continue;
        }
        if (full) continue;
        if (a->vis) {
            for (int r = 0; r < R; r++)
                if (!okv_attn_key_visible(a, vec_row(&j->s, t0, r), slot + i)) row[r] = -INFINITY;
            continue;
        }
        __m512i k = _mm512_set1_epi32(kb + i);
        for (int qt = 0; qt < nqt; qt++) {
            __mmask16 vis = _mm512_cmple_epi32_mask(_mm512_loadu_si512(q->vlo + 16 * qt), k) &
                            _mm512_cmplt_epi32_mask(k, _mm512_loadu_si512(q->vhi + 16 * qt));
            _mm512_storeu_ps(row + 16 * qt, _mm512_mask_mov_ps(ninf, vis, _mm512_loadu_ps(row + 16 * qt)));
        }
    }
}

/* Online softmax down the block's columns; P as A tiles (bf16). */
TGT static void softmax_tiles(const amx_task *b, const amx_qblock *q, int nks) {
    const int nqt = q->nqt;
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                        5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const int n = 32 * nks;
    for (int qt = 0; qt < nqt; qt++) {
        __m512 m_old = _mm512_loadu_ps(q->m + 16 * qt), mx = m_old;
        for (int i = 0; i < n; i++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(b->st + (size_t)i * MV + 16 * qt));
        __mmask16 seen = _mm512_cmp_ps_mask(mx, ninf, _CMP_NEQ_OQ);
        /* c = 2^(m_old - mx), 1 where nothing was seen yet (mx = -inf) */
        __m512 c = _mm512_mask_blend_ps(seen, _mm512_set1_ps(1.0f), exp2_neg(_mm512_sub_ps(m_old, mx)));
        __m512 sum = _mm512_setzero_ps();
        for (int kp = 0; kp < n / 2; kp++) {
            __m512 s0 = _mm512_loadu_ps(b->st + (size_t)(2 * kp) * MV + 16 * qt);
            __m512 s1 = _mm512_loadu_ps(b->st + (size_t)(2 * kp + 1) * MV + 16 * qt);
            __m512 p0 = exp2_neg(_mm512_sub_ps(s0, mx)), p1 = exp2_neg(_mm512_sub_ps(s1, mx));
            sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
            b->pw[kp] = _mm512_permutexvar_epi16(il, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
        }
        for (int ks = 0; ks < nks; ks++) {
            __m512i r[16];
            for (int x = 0; x < 16; x++) r[x] = b->pw[16 * ks + x];
            transpose16(r);
            uint16_t *tile = b->pt + (size_t)(qt * 2 + ks) * 512;
            for (int x = 0; x < 16; x++) _mm512_storeu_si512(tile + 32 * x, r[x]);
        }
        _mm512_storeu_ps(q->c + 16 * qt, c);
        _mm512_storeu_ps(q->l + 16 * qt, _mm512_fmadd_ps(_mm512_loadu_ps(q->l + 16 * qt), c, sum));
        _mm512_storeu_ps(q->m + 16 * qt, mx);
    }
}

/* acc[r] = acc[r] * c[r] + (P V)[r] for r < R, 32 channels a pass. */
TGT static void pv_tiles(const amx_task *b, const amx_qblock *q, int nks, int D) {
    const int nqt = q->nqt, R = q->R;
    const int ndt = D / 16;
    for (int d = 0; d < D; d += 32) {
        TZ(0);
        TZ(1);
        TZ(2);
        TZ(3);
        for (int ks = 0; ks < nks; ks++) {
            const uint16_t *v0 = b->vp + ((size_t)ks * ndt + d / 16) * 512;
            TL(4, b->pt + (size_t)ks * 512, 64);
            TL(6, v0, 64);
            TL(7, v0 + 512, 64);
            TDP(0, 4, 6);
            TDP(1, 4, 7);
            if (nqt > 1) {
                TL(5, b->pt + (size_t)(2 + ks) * 512, 64);
                TDP(2, 5, 6);
                TDP(3, 5, 7);
            }
        }
        TS(0, b->ct, 128);
        TS(1, b->ct + 16, 128);
        if (nqt > 1) {
            TS(2, b->ct + 16 * 32, 128);
            TS(3, b->ct + 16 * 32 + 16, 128);
        }
        for (int r = 0; r < R; r++) {
            float *o = q->acc + (size_t)r * D + d;
            __m512 c = _mm512_set1_ps(q->c[r]);
            _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_loadu_ps(o), c, _mm512_loadu_ps(b->ct + r * 32)));
            _mm512_storeu_ps(o + 16, _mm512_fmadd_ps(_mm512_loadu_ps(o + 16), c, _mm512_loadu_ps(b->ct + r * 32 + 16)));
        }
    }
}

/* Forward-only cursor over the runs: pool slot of logical key idx. */
typedef struct run_cursor {
    int run;
    int32_t start;
} run_cursor;

static int32_t cursor_at(const okv_attn_args *a, run_cursor *c, int32_t idx, int32_t *run_end) {
    while (idx >= c->start + a->runs[c->run].n) c->start += a->runs[c->run++].n;
    *run_end = c->start + a->runs[c->run].n;
    return a->runs[c->run].slot + (idx - c->start);
}

static bool block_seen_any(const okv_attn_args *a, int t0, int t1, int32_t slot0, int nb) {
    for (int i = 0; i < nb; i++)
        for (int t = t0; t < t1; t++)
            if (okv_attn_key_visible(a, t, slot0 + i)) return true;
    return false;
}

/* Row block i of a task's super-block: rows, vectors, Q tiles, state. */
static void qblock_init(const amx_job *j, amx_qblock *q, int kvh, int qb, int32_t k0, int32_t k1) {
    const amx_shape *s = &j->s;
    q->t0 = qb * s->Tb;
    q->t1 = q->t0 + s->Tb < j->a->T ? q->t0 + s->Tb : j->a->T;
    q->R = (q->t1 - q->t0) * s->G;
    q->nqt = (q->R + 15) / 16;
    build_qb(j, q, kvh, q->t0, q->R);
    for (int r = 0; r < MV; r++) {
        q->m[r] = -INFINITY;
        q->l[r] = 0.0f;
        q->vlo[r] = r < q->R ? j->qlo[vec_row(s, q->t0, r)] : 0;
        q->vhi[r] = r < q->R ? j->qhi[vec_row(s, q->t0, r)] : INT32_MAX;
    }
    memset(q->acc, 0, sizeof(float) * (size_t)MV * s->D);
    q->L = INT32_MAX, q->H = 0, q->maxlo = 0, q->minhi = INT32_MAX;
    for (int t = q->t0; t < q->t1; t++) {
        if (j->qlo[t] > q->maxlo) q->maxlo = j->qlo[t];
        if (j->qhi[t] < q->minhi) q->minhi = j->qhi[t];
        if (j->qlo[t] >= j->qhi[t]) continue;
        if (j->qlo[t] < q->L) q->L = j->qlo[t];
        if (j->qhi[t] > q->H) q->H = j->qhi[t];
    }
    if (q->L < k0) q->L = k0;
    if (q->H > k1) q->H = k1;
}

static void prefetch_block(const char *K, const char *V, size_t ld, int nb, int D) {
    for (int i = 0; i < nb; i++)
        for (int d = 0; d < D * 2; d += 64) {
            __builtin_prefetch(K + (size_t)i * ld * 2 + d);
            __builtin_prefetch(V + (size_t)i * ld * 2 + d);
        }
}

TGT static void amx_task_run(void *ctx, int task, int thread) {
    const amx_job *j = ctx;
    const okv_attn_args *a = j->a;
    const amx_shape *s = &j->s;
    const int D = s->D;
    int split = task % j->n_splits, sb = (task / j->n_splits) % s->n_sblocks;
    int kvh = task / j->n_splits / s->n_sblocks;
    int qb0 = sb * s->nqb, nq = s->n_qblocks - qb0 < s->nqb ? s->n_qblocks - qb0 : s->nqb;
    amx_task b;
    amx_qblock qbs[NQB];
    task_buffers(j, thread, task, &b, qbs);
    int32_t k0 = split * j->split_len, k1 = k0 + j->split_len, L = INT32_MAX, H = 0;
    for (int i = 0; i < nq; i++) {
        qblock_init(j, &qbs[i], kvh, qb0 + i, k0, k1);
        if (qbs[i].L < qbs[i].H && qbs[i].L < L) L = qbs[i].L;
        if (qbs[i].L < qbs[i].H && qbs[i].H > H) H = qbs[i].H;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(attn_tilecfg));
    const size_t ld = (size_t)s->Hkv * D;
    const okv_dtype dt = a->kv.dtype;
    run_cursor cur = {0, 0};
    for (int32_t kb = L; kb < H;) {
        /* blocks aligned to KB in the logical index, so the cut does not
         * depend on how row blocks were grouped */
        int32_t run_end, slot = cursor_at(a, &cur, kb, &run_end);
        int nb = KB - kb % KB;
        if (nb > H - kb) nb = H - kb;
        if (nb > run_end - kb) nb = run_end - kb;
        int nks = (nb + 31) / 32;
        size_t off = ((size_t)slot * s->Hkv + kvh) * D;
        const char *K = (const char *)a->kv.k + off * 2, *V = (const char *)a->kv.v + off * 2;
        int32_t next = kb + nb;
        if (next < H && next < run_end) prefetch_block(K + nb * ld * 2, V + nb * ld * 2, ld, H - next < KB ? H - next : KB, D);
        bool built = false, direct = dt == OKV_BF16 && nb % 32 == 0;
        for (int i = 0; i < nq; i++) {
            amx_qblock *q = &qbs[i];
            if (kb + nb <= q->L || kb >= q->H) continue;
            if (a->vis && !block_seen_any(a, q->t0, q->t1, slot, nb)) continue;
            if (!built) {
                build_vp(&b, V, dt, ld, nb, nks, D);
                if (!direct) stage_k(&b, K, dt, ld, nb, nks, D);
                built = true;
            }
            if (direct) scores_tiles(&b, q, (const uint16_t *)K, ld * 2, nks, q->nqt, D);
            else scores_tiles(&b, q, b.kst, (size_t)D * 2, nks, q->nqt, D);
            /* keys of the block outside [q->L, q->H) are masked by the ranges */
            bool full = !a->vis && q->maxlo <= kb && kb + nb <= q->minhi && q->L <= kb && kb + nb <= q->H;
            mask_scores(j, &b, q, kb, nb, nks, slot, full);
            softmax_tiles(&b, q, nks);
            pv_tiles(&b, q, nks, D);
        }
        kb += nb;
    }
    __asm__ volatile("tilerelease" ::);
    if (j->n_splits > 1) return;
    for (int i = 0; i < nq; i++) {
        const amx_qblock *q = &qbs[i];
        for (int r = 0; r < q->R; r++) {
            float *o = a->out + ((size_t)vec_row(s, q->t0, r) * a->n_heads + vec_head(s, kvh, r)) * D;
            float inv = q->l[r] > 0.0f ? 1.0f / q->l[r] : 0.0f;
            for (int d = 0; d < D; d++) o[d] = q->acc[(size_t)r * D + d] * inv;
        }
    }
}

/* Combines the key splits' (m, l, acc) of one (kv head, row block). */
static void amx_merge(const amx_job *j, int kvh, int qb) {
    const okv_attn_args *a = j->a;
    const amx_shape *s = &j->s;
    const int D = s->D;
    int t0 = qb * s->Tb, t1 = t0 + s->Tb < a->T ? t0 + s->Tb : a->T;
    int sb = qb / s->nqb, i = qb % s->nqb;
    size_t base = (size_t)(kvh * s->n_sblocks + sb) * j->n_splits; /* task of split 0 */
    for (int r = 0; r < (t1 - t0) * s->G; r++) {
        float *o = a->out + ((size_t)vec_row(s, t0, r) * a->n_heads + vec_head(s, kvh, r)) * D;
        float M = -INFINITY, lsum = 0.0f;
        for (int sp = 0; sp < j->n_splits; sp++) {
            const float *m = j->part + s->part_floats * ((base + sp) * s->nqb + i) + (size_t)MV * D;
            if (m[r] > M) M = m[r];
        }
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        if (M == -INFINITY) continue;
        for (int sp = 0; sp < j->n_splits; sp++) {
            const float *acc = j->part + s->part_floats * ((base + sp) * s->nqb + i), *m = acc + (size_t)MV * D;
            const float *l = m + MV;
            if (m[r] == -INFINITY) continue;
            float cf = exp2f(m[r] - M); /* m in log2 units */
            lsum += l[r] * cf;
            for (int d = 0; d < D; d++) o[d] += acc[(size_t)r * D + d] * cf;
        }
        for (int d = 0; d < D; d++) o[d] /= lsum;
    }
}

static int count_keys(const okv_attn_args *a) {
    int n = 0;
    for (int r = 0; r < a->n_runs; r++) n += a->runs[r].n;
    return n;
}

void bench_attend_amx_v0(okv_threadpool *tp, const okv_attn_args *a) {
    if (a->T <= 0) return;
    amx_job j = {0};
    j.a = a;
    int n_threads = okv_threadpool_size(tp);
    j.s = amx_shape_of(a->T, a->n_heads, a->kv.kv_heads, a->kv.head_dim, n_threads);
    j.n_keys = count_keys(a);
    j.n_splits = amx_splits(&j.s, j.n_keys, n_threads);
    j.split_len = (j.n_keys + j.n_splits - 1) / j.n_splits;
    if (j.split_len == 0) j.split_len = 1;
    okv_kscratch ks;
    char *mem = okv_kscratch_get(&ks, tp, amx_scratch(&j.s, a->T, n_threads, j.n_splits));
    if (!mem) {
        size_t n = (size_t)a->T * a->n_heads * a->kv.head_dim;
        for (size_t i = 0; i < n; i++) a->out[i] = NAN;
        return;
    }
    j.qlo = (int32_t *)mem;
    j.qhi = j.qlo + a->T;
    j.scratch = mem + r64((size_t)2 * a->T * 4);
    j.part = (float *)(j.scratch + j.s.thread_bytes * n_threads);
    okv_attn_query_ranges(a, j.n_keys, j.qlo, j.qhi);
    okv_threadpool_run(tp, j.s.base_tasks * j.n_splits, amx_task_run, &j);
    if (j.n_splits > 1)
        for (int h = 0; h < j.s.Hkv; h++)
            for (int qb = 0; qb < j.s.n_qblocks; qb++) amx_merge(&j, h, qb);
    okv_kscratch_release(&ks);
}

