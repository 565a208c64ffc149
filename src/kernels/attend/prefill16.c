/* attend/prefill16.c — attention of prefill chunks on AMX-BF16 tiles or,
 * on CPUs with AVX-512 BF16 but no AMX (Zen 4), on vdpbf16ps, for
 * bf16, f16 and q8 K/V pools, K and V each in its own dtype (f16, and q8's
 * code x scale, rounded to bf16 as each key block is staged: a block at a time, never a converted
 * copy of the cache; q8 at 16k positions measured 0.86x bf16's time, it
 * reads 0.56x the bytes, see README "KV storage"). f32 pools
 * and decode-sized calls go to the AVX-512 blocked kernel (attend/blocked.c):
 * an f32 program keeps f32 attention; bf16 attention is only chosen by
 * storing the cache in 16 bits.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (attend/prefill16.c). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "simd/avx512.h"
#include "okv_kvq8.h"

enum { KB = 64,     /* keys per block */
       KB_MAX = 128, /* keys per block from KB_LONG_KEYS keys on (buffers are sized for it) */
       KB_LONG_KEYS = 8192,
       MV = 32,     /* query vectors per task (two tiles of 16 columns) */
       DMAX = 256,  /* largest head_dim on tiles */
       OKV_AMX_ATTN_MIN_VECS = 16, /* query vectors per kv head that go on tiles (decode: AVX-512, see above) */
       NQB = 64,    /* most row blocks sharing each K/V block (a super-block) */
       MIN_SPLIT = 512 };

/* Scores of keys a vector may not see: finite, so that s - m never makes
 * -inf - -inf; 2^(MASKV - m) underflows to 0 for every m >= M0. M0 is the
 * offset of a column that has seen nothing: below every real score, above
 * MASKV, so its first visible block always moves it (see softmax_tiles). */
#define MASKV (-1e30f)
#define M0 (-1e20f)
#define LAZY_TH 8.0f /* log2 units: p stays <= 2^8 before the offset moves */

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
    size_t thread_bytes, qb_bytes, part_floats; /* part per row block: acc^T [D][MV], m, l [MV] */
} amx_shape;

/* Per-thread buffers that do not depend on the super-block, sized for the
 * longest key block: kst (KB_MAX x D bf16), vt (KB_MAX x D bf16 as A
 * tiles), vtmp (one tile's pairs), st (2 x KB_MAX x MV f32), pw (2 x 2 x
 * KB_MAX/2 x 16 dwords). */
static size_t thread_fixed_bytes(int D) {
    return (size_t)KB_MAX * D * 2 * 2 + 1024 + 2 * KB_MAX * MV * 4 + 2 * 2 * (KB_MAX / 2) * 64;
}

/* A super-block's row-block state stays within this much of L2 (AMX CPUs
 * have 2 MiB per core). */
#define SBLOCK_BYTES ((size_t)1 << 20)

/* Row blocks per super-block at most: a power of two <= NQB whose states
 * (qb_bytes each) fit SBLOCK_BYTES. */
static int nqb_max(size_t qb_bytes) {
    int n = NQB;
    while (n > 1 && (size_t)n * qb_bytes > SBLOCK_BYTES) n /= 2;
    return n;
}

/* Per thread: the fixed buffers, and per row block of the super-block: qb
 * (D/32 x 2 B tiles), vlo, vhi [MV], own partial (acc^T, m, l).
 * Super-blocks of up to NQB row blocks share each K/V block read, fewer
 * when that leaves too few tasks for the threads. */
static amx_shape amx_shape_of(int T, int n_heads, int kv_heads, int D, int n_threads) {
    amx_shape s = {0};
    s.D = D;
    s.Hkv = kv_heads;
    s.G = n_heads / kv_heads;
    s.Tb = MV / s.G > 1 ? MV / s.G : 1;
    if (s.Tb > T) s.Tb = T;
    s.n_qblocks = (T + s.Tb - 1) / s.Tb;
    s.part_floats = (size_t)MV * D + 2 * MV;
    s.qb_bytes = (size_t)D * 64 + 2 * MV * 4 + s.part_floats * 4;
    s.nqb = nqb_max(s.qb_bytes);
    while (s.nqb > 1 && (int64_t)s.Hkv * ((s.n_qblocks + s.nqb - 1) / s.nqb) < 4 * n_threads) s.nqb /= 2;
    s.n_sblocks = (s.n_qblocks + s.nqb - 1) / s.nqb;
    s.base_tasks = s.Hkv * s.n_sblocks;
    s.thread_bytes = thread_fixed_bytes(D) + s.qb_bytes * s.nqb;
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

/* Whether a call goes on tiles: 16-bit or q8 pools, head_dim a multiple of 32 up
 * to DMAX, G <= MV, enough query vectors per kv head to fill a tile's
 * columns, and the OS granted AMX. */
static bool amx_pool_ok(okv_dtype dt) { return dt == OKV_BF16 || dt == OKV_F16 || dt == OKV_Q8; }

static bool amx_attend_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt) {
    if (!amx_pool_ok(k_dt) || !amx_pool_ok(v_dt)) return false;
    if (kv_heads <= 0 || n_heads % kv_heads || D % 32 || D > DMAX || n_heads / kv_heads > MV) return false;
    return (int64_t)T * (n_heads / kv_heads) >= OKV_AMX_ATTN_MIN_VECS;
}

size_t okv_attend_amx_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads) {
    if (T <= 0 || kv_heads <= 0 || n_heads < kv_heads || head_dim <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    if (head_dim % 32 || head_dim > DMAX || n_heads / kv_heads > MV) return 0;
    if ((int64_t)T * (n_heads / kv_heads) < OKV_AMX_ATTN_MIN_VECS) return 0; /* no call of <= T rows uses the tiles */
    /* a bound for every t <= T: the per-thread buffers are largest with
     * full super-blocks, and splits happen only below 2 n tasks, so
     * tasks x splits < 6 n */
    amx_shape s = amx_shape_of(1, n_heads, kv_heads, head_dim, 1);
    const int nqb = nqb_max(s.qb_bytes);
    size_t thread = thread_fixed_bytes(head_dim) + s.qb_bytes * (size_t)nqb;
    return r64((size_t)2 * T * 4) + r64(thread) * n_threads + r64(s.part_floats * 4 * (size_t)nqb * 6 * (size_t)n_threads);
}

/* ---- vector pieces ---------------------------------------------------------------- */

/* 32 elements of a row in dt (bf16 or f16) as bf16, lanes >= n zero. */
INLINE __m512i load32_bf16(const void *row, okv_dtype dt, int n) {
    __mmask32 m = n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1);
    if (dt == OKV_BF16) return _mm512_maskz_loadu_epi16(m, row);
    __m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)m, row));
    __m512 hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)(m >> 16), (const uint16_t *)row + 16));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* Elements [d, d + 32) of a pool row as bf16, d a multiple of 32; row is
 * the row's first byte in the pool's storage: bf16, f16 (rounded), or q8
 * (one block of 32 codes and its f32 scale, okv_kvq8.h: code x scale in
 * f32, then rounded to bf16, as the decode kernel stages q8 keys). */
INLINE __m512i pool32_bf16(const char *row, okv_dtype dt, int d) {
    if (dt != OKV_Q8) return load32_bf16((const uint16_t *)row + d, dt, 32);
    const char *blk = row + (size_t)(d / OKV_Q8_BLOCK) * OKV_Q8_BLOCK_BYTES;
    __m512 sc = _mm512_set1_ps(okv_q8_scale(blk));
    __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 16))));
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, sc), _mm512_mul_ps(lo, sc));
}


/* ---- the job ------------------------------------------------------------------------ */

typedef struct amx_job {
    const okv_attn_args *a;
    amx_shape s;
    int n_keys, n_splits, split_len;
    int kb;             /* keys per block: KB, or KB_MAX at long context */
    bool tiles;         /* products on AMX tiles; false: vdpbf16ps (no AMX) */
    int32_t *qlo, *qhi;
    char *scratch;
    float *part;
} amx_job;

typedef struct amx_qblock { /* one row block of a super-block */
    uint16_t *qb;       /* [D/32][2] B tiles: row dp = (q[v][2dp], q[v][2dp+1]) for 16 v */
    int32_t *vlo, *vhi; /* [MV] visible logical key range per vector */
    float *acc, *m, *l; /* acc^T [D][MV] (channels down, vectors across), offset m [MV], sum l [MV] */
    int t0, t1, R, nqt;
    int32_t L, H, maxlo, minhi; /* keys any / every row sees */
} amx_qblock;

typedef struct amx_task {
    uint16_t *kst;   /* [KB_MAX][D] staged keys */
    uint16_t *vt;    /* [KB_MAX/32][D/16] A tiles of V^T: row d = v[0..31][d] of 32 keys;
                      * vdpbf16ps: [KB_MAX/2][D] key pairs (v[2kp][d], v[2kp+1][d]) */
    __m512i *vtmp;   /* [16] pairs of one tile before the transpose */
    float *st[2];    /* [KB_MAX][MV] scores, keys down (two: the next row block's are computed meanwhile) */
    __m512i *pw[2];  /* [2 vec tiles][KB_MAX/2] B tiles of P^T: row kp = (p[2kp][v], p[2kp+1][v]) for 16 v */
} amx_task;

/* Buffers of a task; qbs[i] for row block i of the super-block (task: the
 * index into the split partials). */
static void task_buffers(const amx_job *j, int thread, int task, amx_task *b, amx_qblock *qbs) {
    const int D = j->s.D;
    char *p = j->scratch + j->s.thread_bytes * thread;
    b->kst = (uint16_t *)p, p += (size_t)KB_MAX * D * 2;
    b->vt = (uint16_t *)p, p += (size_t)KB_MAX * D * 2;
    b->vtmp = (__m512i *)p, p += 1024;
    for (int i = 0; i < 2; i++) b->st[i] = (float *)p, p += KB_MAX * MV * 4;
    for (int i = 0; i < 2; i++) b->pw[i] = (__m512i *)p, p += 2 * (KB_MAX / 2) * 64;
    for (int i = 0; i < j->s.nqb; i++) {
        amx_qblock *q = &qbs[i];
        q->qb = (uint16_t *)p, p += (size_t)D * 64;
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

/* V^T of keys [0, nb) of the block (rows rowb bytes apart) as A tiles
 * [ks][dt]: row d of tile (ks, dt) = v[32 ks + 0..31][16 dt + d]; keys past
 * nb are zero. Built as pairs of keys per channel (dwords), then a 16x16
 * dword transpose per tile; once per block for the whole super-block. */
TGT static void build_vt(const amx_task *b, const char *V, okv_dtype dt, size_t rowb, int nb, int nks, int D) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const int ndt = D / 16;
    for (int ks = 0; ks < nks; ks++)
        for (int d = 0; d < D; d += 32) {
            __m512i r[16], s[16];
            for (int kp = 0; kp < 16; kp++) {
                int i0 = 32 * ks + 2 * kp;
                const char *v0 = V + (size_t)i0 * rowb, *v1 = v0 + rowb;
                __m512i x = i0 < nb ? pool32_bf16(v0, dt, d) : _mm512_setzero_si512();
                __m512i y = i0 + 1 < nb ? pool32_bf16(v1, dt, d) : _mm512_setzero_si512();
                r[kp] = _mm512_permutex2var_epi16(x, lo, y);
                b->vtmp[kp] = _mm512_permutex2var_epi16(x, hi, y);
            }
            okv_transpose16x16_epi32(r);
            uint16_t *t0 = b->vt + ((size_t)ks * ndt + d / 16) * 512;
            for (int x = 0; x < 16; x++) _mm512_storeu_si512(t0 + 32 * x, r[x]);
            for (int x = 0; x < 16; x++) s[x] = b->vtmp[x];
            okv_transpose16x16_epi32(s);
            for (int x = 0; x < 16; x++) _mm512_storeu_si512(t0 + 512 + 32 * x, s[x]);
        }
}

/* The same keys of V as key pairs per channel, [32 nks / 2][D] dwords
 * (v[2kp][d], v[2kp+1][d]): what vdpbf16ps broadcasts; no transpose. */
TGT static void build_vpairs(const amx_task *b, const char *V, okv_dtype dt, size_t rowb, int nb, int nks, int D) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int kp = 0; kp < 16 * nks; kp++) {
        const char *v0 = V + (size_t)(2 * kp) * rowb, *v1 = v0 + rowb;
        uint16_t *dst = b->vt + (size_t)kp * 2 * D;
        for (int d = 0; d < D; d += 32) {
            __m512i x = 2 * kp < nb ? pool32_bf16(v0, dt, d) : _mm512_setzero_si512();
            __m512i y = 2 * kp + 1 < nb ? pool32_bf16(v1, dt, d) : _mm512_setzero_si512();
            _mm512_storeu_si512(dst + 2 * d, _mm512_permutex2var_epi16(x, lo, y));
            _mm512_storeu_si512(dst + 2 * d + 32, _mm512_permutex2var_epi16(x, hi, y));
        }
    }
}

/* Keys [0, nb) into kst as bf16 rows of D, zero rows up to 32 * nks. */
TGT static void stage_k(const amx_task *b, const char *K, okv_dtype dt, size_t rowb, int nb, int nks, int D) {
    for (int i = 0; i < 32 * nks; i++)
        for (int d = 0; d < D; d += 32) {
            __m512i x = i < nb ? pool32_bf16(K + (size_t)i * rowb, dt, d) : _mm512_setzero_si512();
            _mm512_storeu_si512(b->kst + (size_t)i * D + d, x);
        }
}

/* st[key][vec] = k . q for the block's 32 * nks keys (K: the staged rows,
 * [32 nks][D] bf16) and 16 * nqt vectors. Per 32 keys four independent C tiles (2 key halves x 2 vector tiles,
 * tmm0-3), K halves in tmm4/5, Q^T in tmm6/7: every tdpbf16ps of a step
 * depends only on the one of the previous 32 dims, so the tile unit runs
 * at its throughput rather than a chain's latency. */
TGT static void scores_tiles(float *st, const amx_qblock *q, const uint16_t *K, int nks, int nqt, int D) {
    const uint16_t *qb = q->qb;
    const size_t kstride = (size_t)D * 2;
    for (int ks = 0; ks < nks; ks++) {
        const uint16_t *k0 = K + (size_t)(32 * ks) * (kstride / 2), *k1 = k0 + (size_t)16 * (kstride / 2);
        float *s0 = st + (size_t)(32 * ks) * MV, *s1 = s0 + 16 * MV;
        TZ(0);
        TZ(2);
        if (nqt > 1) {
            TZ(1);
            TZ(3);
        }
        for (int ds = 0; ds < D / 32; ds++) {
            TL(4, k0 + ds * 32, kstride);
            TL(5, k1 + ds * 32, kstride);
            TL(6, qb + (size_t)(ds * 2) * 512, 64);
            TDP(0, 4, 6);
            TDP(2, 5, 6);
            if (nqt > 1) {
                TL(7, qb + (size_t)(ds * 2 + 1) * 512, 64);
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

/* MASKV where vector r may not see key kb + i (rows of keys >= nb too). */
TGT static void mask_scores(const amx_job *j, float *st, const amx_qblock *q, int32_t kb, int nb, int nks,
                            int32_t slot, bool full) {
    const int t0 = q->t0, R = q->R, nqt = q->nqt;
    const okv_attn_args *a = j->a;
    const __m512 ninf = _mm512_set1_ps(MASKV);
    for (int i = 0; i < 32 * nks; i++) {
        float *row = st + (size_t)i * MV;
        if (i >= nb) {
            _mm512_storeu_ps(row, ninf);
            _mm512_storeu_ps(row + 16, ninf);
            continue;
        }
        if (full) continue;
        if (a->vis) {
            for (int r = 0; r < R; r++)
                if (!okv_attn_key_visible(a, vec_row(&j->s, t0, r), slot + i)) row[r] = MASKV;
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

/* 2^x (scores are in log2 units: log2 e is folded into q's scale) for x
 * <= LAZY_TH (a column with a larger one is redone), 0 for x <= MASKV /
 * 2: f = x - floor(x) in [0, 1) by one vreduceps, a degree-3 minimax
 * polynomial for 2^f (rel. error 7.5e-5, far below p's bf16 rounding
 * 2^-9), and vscalefps applies 2^floor(x) itself (a huge negative x is an
 * integer already: f = 0 and the scale underflows to 0). One operation
 * fewer than rounding, subtracting and scaling by the rounded value. */
INLINE __m512 exp2_floor(__m512 x) {
    __m512 f = _mm512_reduce_ps(x, 0x09); /* 0 fraction bits kept, round down, no precision exception */
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(7.802452e-2f), f, _mm512_set1_ps(2.2606719e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9583351e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.9992522e-1f));
    return _mm512_scalef_ps(p, x);
}

/* p = 2^(s - m) for the n keys of one 16-column tile, as P^T B-tile rows
 * in pw; returns the per-column sums. No block maximum is taken: a column
 * whose sum passes 2^LAZY_TH (which any p > 2^LAZY_TH, or inf, makes it
 * do) is redone by the caller after a separate max pass. */
INLINE __m512 softmax_pass(const float *st, __m512i *pw, int n, __m512 m) {
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                        5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512 sum = _mm512_setzero_ps();
    for (int kp = 0; kp < n / 2; kp++) {
        __m512 s0 = _mm512_loadu_ps(st + (size_t)(2 * kp) * MV), s1 = _mm512_loadu_ps(st + (size_t)(2 * kp + 1) * MV);
        __m512 p0 = exp2_floor(_mm512_sub_ps(s0, m)), p1 = exp2_floor(_mm512_sub_ps(s1, m));
        sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
        pw[kp] = _mm512_permutexvar_epi16(il, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
    }
    return sum;
}

/* The maxima of one 16-column tile's n scores (the redo's offset). */
INLINE __m512 column_max(const float *st, int n) {
    __m512 mx = _mm512_set1_ps(MASKV);
    for (int k = 0; k < n; k++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(st + (size_t)k * MV));
    return mx;
}

/* Online softmax down the block's columns with a lazy offset (as
 * FlashAttention-3): p = 2^(s - m) with the running offset m, one pass;
 * only where a column's p sum passes 2^LAZY_TH (which every p above it
 * makes it do; a column's first visible block always does, m starting at
 * M0) is m moved to the column's maximum, acc^T and l rescaled and the
 * column's pass redone. P^T rows go to pw as B tiles. */
/* The end of one 16-column tile's online-softmax step, given the sums of
 * its pass with the current offsets: columns whose sum passed 2^LAZY_TH
 * move their offset to the block maximum (from st), rescale acc^T and l,
 * and redo the pass; l += sum. */
INLINE void softmax_finish(const float *st, __m512i *pwq, const amx_qblock *q, int n, int D, int qt, __m512 sum) {
    __m512 m = _mm512_loadu_ps(q->m + 16 * qt);
    __mmask16 moved = _mm512_cmp_ps_mask(sum, _mm512_set1_ps(1 << (int)LAZY_TH), _CMP_GT_OQ);
    __m512 l = _mm512_loadu_ps(q->l + 16 * qt);
    if (moved) {
        __m512 m1 = _mm512_mask_max_ps(m, moved, m, column_max(st + 16 * qt, n)), c = exp2_floor(_mm512_sub_ps(m, m1));
        for (int d = 0; d < D; d++) {
            float *o = q->acc + (size_t)d * MV + 16 * qt;
            _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), c));
        }
        l = _mm512_mul_ps(l, c);
        m = m1;
        sum = softmax_pass(st + 16 * qt, pwq, n, m);
        _mm512_storeu_ps(q->m + 16 * qt, m);
    }
    _mm512_storeu_ps(q->l + 16 * qt, _mm512_add_ps(l, sum));
}

TGT static void softmax_tiles(const float *st, __m512i *pw, const amx_qblock *q, int nks, int D) {
    const int n = 32 * nks;
    for (int qt = 0; qt < q->nqt; qt++) {
        __m512i *pwq = pw + (size_t)qt * (KB_MAX / 2);
        __m512 sum = softmax_pass(st + 16 * qt, pwq, n, _mm512_loadu_ps(q->m + 16 * qt));
        softmax_finish(st, pwq, q, n, D, qt, sum);
    }
}

/* acc^T += V^T P^T, 32 channels a step: four independent C tiles (2
 * channel tiles x 2 vector tiles, tmm0-3) loaded from acc^T and stored
 * back, V^T in tmm4/5, P^T in tmm6/7, one pair of each per 32 keys. */
TGT static void pv_tiles(const amx_task *b, __m512i *const pw, const amx_qblock *q, int nks, int D) {
    const int nqt = q->nqt, ndt = D / 16;
    const char *p0 = (const char *)pw, *p1 = (const char *)(pw + KB_MAX / 2);
    for (int dt = 0; dt < ndt; dt += 2) {
        float *c0 = q->acc + (size_t)(16 * dt) * MV, *c1 = c0 + 16 * MV;
        TL(0, c0, MV * 4);
        TL(2, c1, MV * 4);
        if (nqt > 1) {
            TL(1, c0 + 16, MV * 4);
            TL(3, c1 + 16, MV * 4);
        }
        for (int ks = 0; ks < nks; ks++) {
            const uint16_t *v = b->vt + ((size_t)ks * ndt + dt) * 512;
            TL(4, v, 64);
            TL(5, v + 512, 64);
            TL(6, p0 + (size_t)ks * 1024, 64);
            TDP(0, 4, 6);
            TDP(2, 5, 6);
            if (nqt > 1) {
                TL(7, p1 + (size_t)ks * 1024, 64);
                TDP(1, 4, 7);
                TDP(3, 5, 7);
            }
        }
        TS(0, c0, MV * 4);
        TS(2, c1, MV * 4);
        if (nqt > 1) {
            TS(1, c0 + 16, MV * 4);
            TS(3, c1 + 16, MV * 4);
        }
    }
}

/* ---- the same products on vdpbf16ps (CPUs with AVX-512 BF16, no AMX) ------------- */

/* Everything but the two products is shared with the tiles: Q^T B-tile
 * rows are 16 vectors' dim pairs, exactly a vdpbf16ps operand with lanes
 * along the vectors, so the scores come out keys down, vectors across, as
 * the tiles store them, and the softmax's P^T rows are the operand of the
 * P V products the same way; V goes in as key pairs per channel
 * (build_vpairs, no transpose), broadcast one dword per channel. Register
 * tiles 8 keys (8 channels) x 2 vector tiles: 16 accumulators, 2 operand
 * loads and 8 broadcasts per 16 products.
 * Measured (Zen 4, 1 core / 2 threads vdpbf16ps peak 234.9 / 469.7
 * GFLOP/s, bench_kernels attnamx, 32/8 heads x 64, bf16 KV, T = 512, the
 * blocked f32-FMA kernel in the same run): 64-key blocks always (128 at
 * long context, as the tiles take, ran at 89 GFLOP/s on one core: kst,
 * the V pairs, scores and P^T of a 128-key block overflow Zen 4's 32 KiB
 * L1); last 512 of 16k 178-186 ms per layer on two threads against the
 * blocked kernel's 367-401 (0.46-0.49x), ~370 GFLOP/s = 79% of the peak;
 * 4k 0.50x, ring (window 4096) 0.51x, pp512's own attention 0.69-0.74x.
 * Super-block state within 256 / 512 KiB of L2 instead of 1 MiB: 1.02-
 * 1.04x the time at 16k, so the same 1 MiB as the tiles. Fusing the
 * softmax into the scores' registers for fully-seen blocks (no store and
 * reload of the f32 scores before exp2), A/B interleaved in one run: 16k
 * 173.8-174.9 ms vs 180.8-186.0 unfused (0.96x, 387-389 GFLOP/s = 83% of
 * the peak); ring 46.5-49.4 vs 48.4-49.5. The products are ~85% of the
 * kernel's time under perf, so little is left outside them. */

/* A dword of bf16 pairs broadcast to 16 lanes (folds into vdpbf16ps's
 * {1to16} operand). */
INLINE __m512bh bcast_pair(const uint16_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return (__m512bh)_mm512_set1_epi32(x);
}

enum { DP_NK = 8 }; /* keys per register tile of scores */

/* One register tile of scores from scores_tiles' operands: a Q^T B-tile
 * row (dim pair dp, 16 vectors) is one vdpbf16ps operand, each key's
 * (k[2dp], k[2dp+1]) the broadcast one. acc[i][qt] = scores of key k0 + i
 * for vector tile qt (DP_NK keys x NQT vector tiles). */
INLINE void score_tile_dp(__m512 acc[DP_NK][2], const uint16_t *qb, const uint16_t *K, int k0, int D, const int NQT) {
#pragma GCC unroll 16
    for (int i = 0; i < DP_NK; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int dp = 0; dp < D / 2; dp++) {
        const uint16_t *qrow = qb + ((size_t)(dp / 16) * 2 * 16 + dp % 16) * 32; /* tile (dp/16, qt 0), row dp%16 */
        __m512bh q0 = (__m512bh)_mm512_loadu_si512(qrow), q1 = q0;
        if (NQT > 1) q1 = (__m512bh)_mm512_loadu_si512(qrow + 16 * 32);
#pragma GCC unroll 16
        for (int i = 0; i < DP_NK; i++) {
            __m512bh k = bcast_pair(K + (size_t)(k0 + i) * D + 2 * dp);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], k, q0);
            if (NQT > 1) acc[i][1] = _mm512_dpbf16_ps(acc[i][1], k, q1);
        }
    }
}

/* scores_tiles' result, a register tile at a time, stored keys down. */
INLINE void scores_dp_n(float *st, const uint16_t *qb, const uint16_t *K, int nks, int D, const int NQT) {
    enum { NK = DP_NK };
    for (int k0 = 0; k0 < 32 * nks; k0 += NK) {
        __m512 acc[NK][2];
        score_tile_dp(acc, qb, K, k0, D, NQT);
#pragma GCC unroll 16
        for (int i = 0; i < NK; i++) {
            _mm512_storeu_ps(st + (size_t)(k0 + i) * MV, acc[i][0]);
            if (NQT > 1) _mm512_storeu_ps(st + (size_t)(k0 + i) * MV + 16, acc[i][1]);
        }
    }
}

/* scores_dp_n and the softmax pass in one: each register tile of scores
 * is stored (for masks' redo path) and turned into p = 2^(s - m) and P^T
 * rows at once, so the softmax's vector work issues beside the next
 * tile's products instead of in a pass of its own; only for blocks every
 * vector fully sees (no masks). Returns the pass's sums per vector tile. */
INLINE void scores_softmax_dp_n(float *st, __m512i *pw, const amx_qblock *q, const uint16_t *K, int nks, int D,
                                __m512 *sums, const int NQT) {
    enum { NK = DP_NK };
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                        5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512 m[2], sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    m[0] = _mm512_loadu_ps(q->m);
    m[1] = NQT > 1 ? _mm512_loadu_ps(q->m + 16) : m[0];
    for (int k0 = 0; k0 < 32 * nks; k0 += NK) {
        __m512 acc[NK][2];
        score_tile_dp(acc, q->qb, K, k0, D, NQT);
#pragma GCC unroll 16
        for (int qt = 0; qt < NQT; qt++)
#pragma GCC unroll 16
            for (int i = 0; i < NK; i += 2) {
                _mm512_storeu_ps(st + (size_t)(k0 + i) * MV + 16 * qt, acc[i][qt]);
                _mm512_storeu_ps(st + (size_t)(k0 + i + 1) * MV + 16 * qt, acc[i + 1][qt]);
                __m512 p0 = exp2_floor(_mm512_sub_ps(acc[i][qt], m[qt]));
                __m512 p1 = exp2_floor(_mm512_sub_ps(acc[i + 1][qt], m[qt]));
                sum[qt] = _mm512_add_ps(sum[qt], _mm512_add_ps(p0, p1));
                pw[(size_t)qt * (KB_MAX / 2) + (k0 + i) / 2] =
                    _mm512_permutexvar_epi16(il, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
            }
    }
    sums[0] = sum[0];
    sums[1] = sum[1];
}

/* Scores and the softmax step of a fully seen block (no masks). */
TGT static void scores_softmax_dp(float *st, __m512i *pw, const amx_qblock *q, const uint16_t *K, int nks, int D) {
    __m512 sums[2];
    if (q->nqt > 1)
        scores_softmax_dp_n(st, pw, q, K, nks, D, sums, 2);
    else
        scores_softmax_dp_n(st, pw, q, K, nks, D, sums, 1);
    for (int qt = 0; qt < q->nqt; qt++)
        softmax_finish(st, pw + (size_t)qt * (KB_MAX / 2), q, 32 * nks, D, qt, sums[qt]);
}

TGT static void scores_dp(float *st, const amx_qblock *q, const uint16_t *K, int nks, int nqt, int D) {
    if (nqt > 1)
        scores_dp_n(st, q->qb, K, nks, D, 2);
    else
        scores_dp_n(st, q->qb, K, nks, D, 1);
}

/* pv_tiles' result: acc^T row d (16 vectors a register) += (v[2kp][d],
 * v[2kp+1][d]) broadcast . P^T row kp, NC channels x NQT vector tiles of
 * acc^T held in registers over the block's key pairs. */
INLINE void pv_dp_n(const amx_task *b, const __m512i *pw, const amx_qblock *q, int nks, int D, const int NQT) {
    enum { NC = 8 };
    for (int d0 = 0; d0 < D; d0 += NC) {
        __m512 acc[NC][2];
#pragma GCC unroll 16
        for (int i = 0; i < NC; i++) {
            acc[i][0] = _mm512_loadu_ps(q->acc + (size_t)(d0 + i) * MV);
            acc[i][1] = NQT > 1 ? _mm512_loadu_ps(q->acc + (size_t)(d0 + i) * MV + 16) : acc[i][0];
        }
        for (int kp = 0; kp < 16 * nks; kp++) {
            __m512bh p0 = (__m512bh)pw[kp], p1 = p0;
            if (NQT > 1) p1 = (__m512bh)pw[KB_MAX / 2 + kp];
            const uint16_t *v = b->vt + ((size_t)kp * D + d0) * 2;
#pragma GCC unroll 16
            for (int i = 0; i < NC; i++) {
                __m512bh vv = bcast_pair(v + 2 * i);
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], vv, p0);
                if (NQT > 1) acc[i][1] = _mm512_dpbf16_ps(acc[i][1], vv, p1);
            }
        }
#pragma GCC unroll 16
        for (int i = 0; i < NC; i++) {
            _mm512_storeu_ps(q->acc + (size_t)(d0 + i) * MV, acc[i][0]);
            if (NQT > 1) _mm512_storeu_ps(q->acc + (size_t)(d0 + i) * MV + 16, acc[i][1]);
        }
    }
}

TGT static void pv_dp(const amx_task *b, __m512i *const pw, const amx_qblock *q, int nks, int D) {
    if (q->nqt > 1)
        pv_dp_n(b, pw, q, nks, D, 2);
    else
        pv_dp_n(b, pw, q, nks, D, 1);
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
        q->m[r] = M0;
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

/* The head's rows (hb bytes each, rowb apart) of nb keys of K and V. */
static void prefetch_block(const char *K, size_t k_rowb, size_t k_hb, const char *V, size_t v_rowb, size_t v_hb,
                           int nb) {
    for (int i = 0; i < nb; i++) {
        for (size_t d = 0; d < k_hb; d += 64) __builtin_prefetch(K + (size_t)i * k_rowb + d);
        for (size_t d = 0; d < v_hb; d += 64) __builtin_prefetch(V + (size_t)i * v_rowb + d);
    }
}

/* One key block past the row blocks act[0..na) that see it, pipelined one
 * row block deep: the scores of the next row block are computed (tiles)
 * and the P V of the previous one issued around the softmax (vectors) of
 * this one, so no stage waits on a store it just made. */
/* block_run for the vdpbf16ps products: no pipelining (one instruction
 * stream; the out-of-order core overlaps the stages), scores and softmax
 * fused where no mask applies. */
TGT static void block_run_dp(const amx_job *j, const amx_task *b, amx_qblock *const *act, int na, int32_t kb, int nb,
                             int nks, int32_t slot) {
    const okv_attn_args *a = j->a;
    const int D = j->s.D;
    for (int n = 0; n < na; n++) {
        amx_qblock *q = act[n];
        bool full = !a->vis && q->maxlo <= kb && kb + nb <= q->minhi && q->L <= kb && kb + nb <= q->H;
        if (full && nb == 32 * nks) {
            scores_softmax_dp(b->st[0], b->pw[0], q, b->kst, nks, D);
        } else {
            scores_dp(b->st[0], q, b->kst, nks, q->nqt, D);
            mask_scores(j, b->st[0], q, kb, nb, nks, slot, full);
            softmax_tiles(b->st[0], b->pw[0], q, nks, D);
        }
        pv_dp(b, b->pw[0], q, nks, D);
    }
}

TGT static void block_run(const amx_job *j, const amx_task *b, amx_qblock *const *act, int na, int32_t kb, int nb,
                          int nks, int32_t slot) {
    const okv_attn_args *a = j->a;
    const int D = j->s.D;
    scores_tiles(b->st[0], act[0], b->kst, nks, act[0]->nqt, D);
    for (int n = 0; n < na; n++) {
        amx_qblock *q = act[n];
        if (n + 1 < na) scores_tiles(b->st[(n + 1) & 1], act[n + 1], b->kst, nks, act[n + 1]->nqt, D);
        /* keys of the block outside [q->L, q->H) are masked by the ranges */
        bool full = !a->vis && q->maxlo <= kb && kb + nb <= q->minhi && q->L <= kb && kb + nb <= q->H;
        if (!full || nb < 32 * nks) mask_scores(j, b->st[n & 1], q, kb, nb, nks, slot, full);
        softmax_tiles(b->st[n & 1], b->pw[n & 1], q, nks, D);
        if (n > 0) pv_tiles(b, b->pw[(n - 1) & 1], act[n - 1], nks, D);
    }
    pv_tiles(b, b->pw[(na - 1) & 1], act[na - 1], nks, D);
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
    amx_qblock qbs[NQB], *act[NQB];
    task_buffers(j, thread, task, &b, qbs);
    int32_t k0 = split * j->split_len, k1 = k0 + j->split_len, L = INT32_MAX, H = 0;
    for (int i = 0; i < nq; i++) {
        qblock_init(j, &qbs[i], kvh, qb0 + i, k0, k1);
        if (qbs[i].L < qbs[i].H && qbs[i].L < L) L = qbs[i].L;
        if (qbs[i].L < qbs[i].H && qbs[i].H > H) H = qbs[i].H;
    }
    if (j->tiles) __asm__ volatile("ldtilecfg %0" ::"m"(attn_tilecfg));
    const okv_dtype kdt = a->kv.k_dtype, vdt = a->kv.v_dtype;
    const size_t ld = (size_t)s->Hkv * D;
    const size_t k_rowb = okv_kv_row_bytes(kdt, ld), k_hb = okv_kv_row_bytes(kdt, (size_t)D);
    const size_t v_rowb = okv_kv_row_bytes(vdt, ld), v_hb = okv_kv_row_bytes(vdt, (size_t)D);
    run_cursor cur = {0, 0};
    for (int32_t kb = L; kb < H;) {
        /* blocks aligned to j->kb in the logical index, so the cut does not
         * depend on how row blocks were grouped */
        int32_t run_end, slot = cursor_at(a, &cur, kb, &run_end);
        int nb = j->kb - kb % j->kb;
        if (nb > H - kb) nb = H - kb;
        if (nb > run_end - kb) nb = run_end - kb;
        int nks = (nb + 31) / 32;
        size_t off = ((size_t)slot * s->Hkv + kvh) * D;
        const char *K = (const char *)a->kv.k + okv_kv_row_bytes(kdt, off);
        const char *V = (const char *)a->kv.v + okv_kv_row_bytes(vdt, off);
        int32_t next = kb + nb;
        if (next < H && next < run_end)
            prefetch_block(K + nb * k_rowb, k_rowb, k_hb, V + nb * v_rowb, v_rowb, v_hb,
                           H - next < j->kb ? H - next : j->kb);
        int na = 0;
        for (int i = 0; i < nq; i++) {
            amx_qblock *q = &qbs[i];
            if (kb + nb <= q->L || kb >= q->H) continue;
            if (a->vis && !block_seen_any(a, q->t0, q->t1, slot, nb)) continue;
            act[na++] = q;
        }
        if (na > 0) {
            if (j->tiles)
                build_vt(&b, V, vdt, v_rowb, nb, nks, D);
            else
                build_vpairs(&b, V, vdt, v_rowb, nb, nks, D);
            stage_k(&b, K, kdt, k_rowb, nb, nks, D);
            if (j->tiles)
                block_run(j, &b, act, na, kb, nb, nks, slot);
            else
                block_run_dp(j, &b, act, na, kb, nb, nks, slot);
        }
        kb += nb;
    }
    if (j->tiles) __asm__ volatile("tilerelease" ::);
    if (j->n_splits > 1) return;
    for (int i = 0; i < nq; i++) {
        const amx_qblock *q = &qbs[i];
        for (int r = 0; r < q->R; r++) {
            float *o = a->out + ((size_t)vec_row(s, q->t0, r) * a->n_heads + vec_head(s, kvh, r)) * D;
            float inv = q->l[r] > 0.0f ? 1.0f / q->l[r] : 0.0f;
            for (int d = 0; d < D; d++) o[d] = q->acc[(size_t)d * MV + r] * inv;
        }
    }
}

/* Combines the key splits' (m, l, acc^T) of one (kv head, row block). */
static void amx_merge(const amx_job *j, int kvh, int qb) {
    const okv_attn_args *a = j->a;
    const amx_shape *s = &j->s;
    const int D = s->D;
    int t0 = qb * s->Tb, t1 = t0 + s->Tb < a->T ? t0 + s->Tb : a->T;
    int sb = qb / s->nqb, i = qb % s->nqb;
    size_t base = (size_t)(kvh * s->n_sblocks + sb) * j->n_splits; /* task of split 0 */
    for (int r = 0; r < (t1 - t0) * s->G; r++) {
        float *o = a->out + ((size_t)vec_row(s, t0, r) * a->n_heads + vec_head(s, kvh, r)) * D;
        float M = M0, lsum = 0.0f;
        for (int sp = 0; sp < j->n_splits; sp++) {
            const float *m = j->part + s->part_floats * ((base + sp) * s->nqb + i) + (size_t)MV * D;
            if (m[r] > M) M = m[r];
        }
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int sp = 0; sp < j->n_splits; sp++) {
            const float *acc = j->part + s->part_floats * ((base + sp) * s->nqb + i), *m = acc + (size_t)MV * D;
            const float *l = m + MV;
            if (!(l[r] > 0.0f)) continue; /* the split saw nothing for r (task not run or all masked) */
            float cf = exp2f(m[r] - M); /* m in log2 units, offsets <= M */
            lsum += l[r] * cf;
            for (int d = 0; d < D; d++) o[d] += acc[(size_t)d * MV + r] * cf;
        }
        if (lsum > 0.0f)
            for (int d = 0; d < D; d++) o[d] /= lsum;
    }
}

static int count_keys(const okv_attn_args *a) {
    int n = 0;
    for (int r = 0; r < a->n_runs; r++) n += a->runs[r].n;
    return n;
}

/* The prefill attention with its products on tiles or on vdpbf16ps. */
static void attend_prefill16(okv_threadpool *tp, const okv_attn_args *a, bool tiles) {
    if (a->T <= 0) return;
    amx_job j = {0};
    j.a = a;
    j.tiles = tiles;
    int n_threads = okv_threadpool_size(tp);
    j.s = amx_shape_of(a->T, a->n_heads, a->kv.kv_heads, a->kv.head_dim, n_threads);
    j.n_keys = count_keys(a);
    j.kb = tiles && j.n_keys >= KB_LONG_KEYS ? KB_MAX : KB; /* vdpbf16ps: 64 always (L1) */
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

void okv_attend_amx_tiles(okv_threadpool *tp, const okv_attn_args *a) { attend_prefill16(tp, a, true); }
void okv_attend_prefill_dpbf16(okv_threadpool *tp, const okv_attn_args *a) { attend_prefill16(tp, a, false); }

bool okv_attend_prefill16_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt) {
    return amx_attend_fits(T, n_heads, kv_heads, D, k_dt, v_dt);
}
