/* qmatmul/int8_amx.c — quantized prefill (T > 1) on AMX-INT8 tiles: the
 * integer-dot algorithm of qmatmul/int_plain.c, bit for bit, with the per-group
 * integer dot products computed by tdpbsud instead of vpdpbusd.
 *
 * One tdpbsud multiplies a 16 x kc int8 tile (activations, signed) by a
 * kc x 16 uint8 one (codes, unsigned, in "VNNI" rows of 4 k x 16 n) into
 * 16 x 16 int32, kc = 32 (group 32) or 64 bytes of K. Scales change every
 * group, so each tile product covers exactly one group of K (one or, for
 * groups of 128/256, several products into the same int32 tile), and the
 * group's 16 x 16 integer sums are scaled into f32 right after it:
 *     C[t][n] = sum over the group of q[t][k] * c[n][k]     (C2 with q2)
 *     acc[l][t][n] = fma(d[n] dx[t], float(C - off qsum[t]), acc)  (and C2)
 *     asym: fma(s, float(C)), fma(s2, float(C2)), fma(m[n], sx[t], acc)
 * where l = group mod 16 is the lane the plain model sums that group in:
 * every (t, n) keeps the model's 16 lane accumulators, and the final
 * 16 -> 8 -> 4 -> 2 -> 1 reduction is the model's order, so outputs equal
 * okv_matmul_q_int_plain's exactly (tests/kernels/test_qmatmul.c).
 *
 * Per call:
 *   1. x [T, K] is quantized by the AVX-512 VNNI quantizer (the same codes,
 *      scales and sums), then its two int8 planes are laid out per tile:
 *      [Tp / 16][G][16][gs] (Tp = T rounded up to 16, zero rows past T),
 *      so 16 rows of a group are one contiguous tile load;
 *   2. each task owns a block of up to 128 W rows (a multiple of 32): its
 *      codes are unpacked to one byte each and laid out as B tiles
 *      ([pair of 16-row tiles][group][tile][gs/4 rows of 64 bytes]), its
 *      f16 scales and offsets converted to f32 per group (0 past N);
 *   3. for every 16 rows of x (t tile) and every pair of W tiles: per group,
 *      tdpbsud for both activation planes and both W tiles (C: tmm0-3, A:
 *      tmm4-5, B: tmm6-7), the four int32 tiles stored, scaled into the
 *      lane accumulators (16 lanes x 16 t x 32 n f32 = 32 KiB, in L1);
 *      then reduced and written to y (+ bias).
 * No weight copy outlives the call; scratch per call: the natural-order
 * planes 2 Tp K bytes (plus the quantizer's 2 T K), per thread block K
 * bytes of unpacked codes (<= 1 MiB for K = 8192), the lane accumulators.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (qmatmul/int8_amx.c). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")))

enum { QA_LANES = OKV_QSB_GROUPS, /* the model's lane accumulators */
       QA_PAIR = 32,              /* W rows per pair of tiles */
       QA_MAX_BLOCK = 128,        /* W rows per task */
       QA_X_ROWS_PER_TASK = 8 };

bool okv_qmm_have_amx_int8(void) {
    const okv_cpu_caps *c = okv_cpu();
    return c->amx_tile && c->amx_int8 && okv_qmm_have_avx512vnni() && okv_amx_usable(NULL);
}

/* ---- tiles ------------------------------------------------------------------------ */

/* LDTILECFG operand, palette 1: tmm0-3 C (16 x 64 B), tmm4-5 A (16 x kc
 * B), tmm6-7 B (kc/4 x 64 B); every other byte zero (a stack-built config
 * with garbage in reserved bytes faults, matmul/tiles_amx.c). */
static const okv_amx_tilecfg cfg_k32 __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 32, 32, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {16, 16, 16, 16, 16, 16, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0}};
static const okv_amx_tilecfg cfg_k64 __attribute__((aligned(64))) = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0},
    {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0}};

#define QT_LOAD(t, p, stride) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((long)(stride)) : "memory")
#define QT_STORE(t, p) __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((long)64) : "memory")
#define QT_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
/* C += A (signed bytes) . B (unsigned bytes) */
#define QT_DP(c, a, b) __asm__ volatile("tdpbsud %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

/* ---- the job ---------------------------------------------------------------------- */

typedef struct qa_job {
    okv_qmm_job j;             /* y, shapes, W view, activation scales/sums [Tp][G] */
    const okv_qmm_ops *ops;    /* the VNNI quantizer */
    const float *x;
    int Tp, kc;                /* rows rounded up to 16; K bytes per tile product */
    int8_t *qn, *qn2;          /* [Tp / 16][G][16][gs] activation planes */
    int8_t *qsb;               /* per quantize task: two superblock-order rows [2][K] */
    uint8_t *wp;               /* per thread: B tiles of one block (block_rows x K bytes) */
    float *dv, *mv;            /* per thread: [block_rows / 32][G][32] f32 scales, offsets */
    float *acc;                /* per thread: [QA_LANES][16][32] */
    int32_t *ct;               /* per thread: two sets of 4 C tiles [2][4][256] */
    size_t wp_bytes, dv_elems, acc_elems;
} qa_job;

/* Row t of x: the VNNI quantizer into superblock-order scratch (its
 * scales and sums straight into the job's planes), then the two code
 * planes copied into natural order: group g's unit u (4 codes) sits at
 * sb * 16 gs + u * 4L + 4l there and at g gs + 4u here. */
static void quantize_row(const qa_job *a, int8_t *scratch, int t) {
    const okv_qmm_job *j = &a->j;
    const int K = j->K, G = j->w.groups, gs = j->w.group;
    okv_qmm_job one = *j;
    one.T = 1;
    one.a.q = scratch;
    one.a.q2 = scratch + K;
    size_t g0 = (size_t)t * G;
    one.a.dx = j->a.dx + g0;
    one.a.dx2 = j->a.dx2 + g0;
    one.a.sx = j->a.sx + g0;
    one.a.qsum = j->a.qsum + g0;
    one.a.qsum2 = j->a.qsum2 + g0;
    a->ops->quantize(&one, a->x + (size_t)t * K, 0);
    /* tile-blocked: [t / 16][g][t % 16][gs], so a group's A tile is 16 gs contiguous bytes */
    size_t row0 = ((size_t)(t / 16) * G * 16 + (size_t)(t % 16)) * gs;
    int8_t *dst = a->qn + row0, *dst2 = a->qn2 + row0;
    for (int g = 0; g < G; g++) {
        size_t stride, base = okv_qact_group_base(gs, G, g, &stride), o = (size_t)g * 16 * gs;
        for (int u = 0; u < gs / 4; u++) {
            memcpy(dst + o + 4 * u, one.a.q + base + u * stride, 4);
            memcpy(dst2 + o + 4 * u, one.a.q2 + base + u * stride, 4);
        }
    }
}

static void quantize_task(void *ctx, int task, int thread) {
    (void)thread;
    const qa_job *a = ctx;
    int t0 = task * QA_X_ROWS_PER_TASK, t1 = t0 + QA_X_ROWS_PER_TASK < a->j.T ? t0 + QA_X_ROWS_PER_TASK : a->j.T;
    int8_t *scratch = a->qsb + (size_t)task * 2 * a->j.K;
    for (int t = t0; t < t1; t++) quantize_row(a, scratch, t);
}

/* W rows [n0, n0 + rows) -> B tiles and f32 scales. Pair p, group g, tile
 * h: gs/4 rows of 64 bytes, row u = unit u (codes 4u..4u+3 of the group)
 * of the 16 W rows 32 p + 16 h + 0..15, 4 bytes each; zero past N. */
static void pack_block(const qa_job *a, uint8_t *wp, float *dv, float *mv, int n0, int rows) {
    const okv_qview *w = &a->j.w;
    const int G = w->groups, gs = w->group, pairs = (rows + QA_PAIR - 1) / QA_PAIR;
    for (int p = 0; p < pairs; p++)
        for (int i = 0; i < QA_PAIR; i++) {
            int n = n0 + p * QA_PAIR + i, h = i / 16, r = i % 16;
            bool on = n < a->j.N;
            const uint8_t *crow = on ? w->codes + (size_t)n * w->code_stride : NULL;
            for (int g = 0; g < G; g++) {
                uint8_t *tile = wp + (((size_t)p * G + g) * 2 + h) * (size_t)gs * 16;
                size_t sd = ((size_t)p * G + g) * QA_PAIR + i;
                dv[sd] = on ? okv_k_f16(w->d[(size_t)n * w->scale_stride + g]) : 0.0f;
                mv[sd] = on && w->m ? okv_k_f16(w->m[(size_t)n * w->scale_stride + g]) : 0.0f;
                int sb = g / QA_LANES, l = g % QA_LANES;
                int L = G - sb * QA_LANES < QA_LANES ? G - sb * QA_LANES : QA_LANES;
                for (int u = 0; u < gs / 4; u++) {
                    uint32_t v = 0;
                    if (on && w->bits == 8) {
                        memcpy(&v, crow + (size_t)sb * QA_LANES * gs + (size_t)u * 4 * L + 4 * l, 4);
                    } else if (on) {
                        memcpy(&v, crow + (size_t)sb * QA_LANES * gs / 2 + (size_t)(u / 2) * 4 * L + 4 * l, 4);
                        v = (u & 1 ? v >> 4 : v) & 0x0f0f0f0fu;
                    }
                    memcpy(tile + (size_t)u * 64 + 4 * r, &v, 4);
                }
            }
        }
}

/* Group g's stored int32 sums (ct: C tiles q.W0, q2.W0, q.W1, q2.W1) scaled
 * into its lane accumulator: the model's two (asym: three) FMAs. The
 * activation scales of the 16 rows are G apart (dx[t][g]). */
static inline __attribute__((always_inline)) TGT void scale_group(const qa_job *a, const int32_t *restrict ct,
                                                                  const float *dv, const float *mv,
                                                                  float *restrict acc, int t0, int g, int off) {
    const okv_qmm_job *j = &a->j;
    const size_t G = (size_t)j->w.groups, a0 = (size_t)t0 * G + g;
    const float *restrict dx = j->a.dx + a0, *restrict dx2 = j->a.dx2 + a0, *restrict sx = j->a.sx + a0;
    const int32_t *restrict qs = j->a.qsum + a0, *restrict qs2 = j->a.qsum2 + a0;
    float *restrict al = acc + (size_t)(g % QA_LANES) * 16 * QA_PAIR;
    const float *dg = dv + (size_t)g * QA_PAIR, *mg = mv + (size_t)g * QA_PAIR;
    const __m512 d0 = _mm512_loadu_ps(dg), d1 = _mm512_loadu_ps(dg + 16);
    if (!off) { /* asymmetric */
        const __m512 m0 = _mm512_loadu_ps(mg), m1 = _mm512_loadu_ps(mg + 16);
#pragma GCC unroll 4
        for (int t = 0; t < 16; t++) {
            __m512 bx = _mm512_set1_ps(dx[t * G]), bx2 = _mm512_set1_ps(dx2[t * G]), bs = _mm512_set1_ps(sx[t * G]);
            float *ap = al + t * QA_PAIR;
            __m512 v0 = _mm512_loadu_ps(ap), v1 = _mm512_loadu_ps(ap + 16);
            v0 = _mm512_fmadd_ps(_mm512_mul_ps(d0, bx), _mm512_cvtepi32_ps(_mm512_loadu_si512(ct + 16 * t)), v0);
            v1 = _mm512_fmadd_ps(_mm512_mul_ps(d1, bx), _mm512_cvtepi32_ps(_mm512_loadu_si512(ct + 512 + 16 * t)), v1);
            v0 = _mm512_fmadd_ps(_mm512_mul_ps(d0, bx2), _mm512_cvtepi32_ps(_mm512_loadu_si512(ct + 256 + 16 * t)), v0);
            v1 = _mm512_fmadd_ps(_mm512_mul_ps(d1, bx2), _mm512_cvtepi32_ps(_mm512_loadu_si512(ct + 768 + 16 * t)), v1);
            v0 = _mm512_fmadd_ps(m0, bs, v0);
            v1 = _mm512_fmadd_ps(m1, bs, v1);
            _mm512_storeu_ps(ap, v0);
            _mm512_storeu_ps(ap + 16, v1);
        }
        return;
    }
#pragma GCC unroll 4
    for (int t = 0; t < 16; t++) {
        __m512 bx = _mm512_set1_ps(dx[t * G]), bx2 = _mm512_set1_ps(dx2[t * G]);
        __m512i o1 = _mm512_set1_epi32(off * qs[t * G]), o2 = _mm512_set1_epi32(off * qs2[t * G]);
        float *ap = al + t * QA_PAIR;
        __m512 v0 = _mm512_loadu_ps(ap), v1 = _mm512_loadu_ps(ap + 16);
        __m512i i;
        i = _mm512_sub_epi32(_mm512_loadu_si512(ct + 16 * t), o1);
        v0 = _mm512_fmadd_ps(_mm512_mul_ps(d0, bx), _mm512_cvtepi32_ps(i), v0);
        i = _mm512_sub_epi32(_mm512_loadu_si512(ct + 512 + 16 * t), o1);
        v1 = _mm512_fmadd_ps(_mm512_mul_ps(d1, bx), _mm512_cvtepi32_ps(i), v1);
        i = _mm512_sub_epi32(_mm512_loadu_si512(ct + 256 + 16 * t), o2);
        v0 = _mm512_fmadd_ps(_mm512_mul_ps(d0, bx2), _mm512_cvtepi32_ps(i), v0);
        i = _mm512_sub_epi32(_mm512_loadu_si512(ct + 768 + 16 * t), o2);
        v1 = _mm512_fmadd_ps(_mm512_mul_ps(d1, bx2), _mm512_cvtepi32_ps(i), v1);
        _mm512_storeu_ps(ap, v0);
        _mm512_storeu_ps(ap + 16, v1);
    }
}

/* One t tile x one pair of W tiles over all groups, into acc (16 lanes x
 * 16 t x 32 n), then y. */
static TGT void pair_tile(const qa_job *a, const uint8_t *wp, const float *dv, const float *mv, float *acc,
                          int32_t *ct, int tb, int n0) {
    const okv_qmm_job *j = &a->j;
    const int G = j->w.groups, gs = j->w.group, K = j->K, kc = a->kc, chunks = gs / kc;
    const int off = j->w.asym ? 0 : 1 << (j->w.bits - 1), lanes = G < QA_LANES ? G : QA_LANES;
    const int t0 = tb * 16;
    memset(acc, 0, sizeof(float) * (size_t)lanes * 16 * QA_PAIR);
    const int8_t *xq = a->qn + (size_t)t0 * K, *xq2 = a->qn2 + (size_t)t0 * K; /* tile row tb's block */
    /* software pipeline: group g's products run on the tiles and are stored
     * to one half of ct while group g - 1's stored sums (the other half,
     * stores long committed) are scaled; the vector loads never wait on
     * tile stores in flight */
    for (int g = 0; g <= G; g++) {
        if (g < G) {
            int32_t *cg = ct + (g & 1) * 1024;
            const uint8_t *b0 = wp + (size_t)g * 2 * gs * 16, *b1 = b0 + (size_t)gs * 16;
            QT_ZERO(0); QT_ZERO(1); QT_ZERO(2); QT_ZERO(3);
            for (int c = 0; c < chunks; c++) {
                size_t k0 = (size_t)g * 16 * gs + (size_t)c * kc;
                QT_LOAD(4, xq + k0, gs);
                QT_LOAD(6, b0 + (size_t)c * kc * 16, 64);
                QT_DP(0, 4, 6);
                QT_LOAD(5, xq2 + k0, gs);
                QT_DP(1, 5, 6);
                QT_LOAD(7, b1 + (size_t)c * kc * 16, 64);
                QT_DP(2, 4, 7);
                QT_DP(3, 5, 7);
            }
            QT_STORE(0, cg); QT_STORE(1, cg + 256); QT_STORE(2, cg + 512); QT_STORE(3, cg + 768);
        }
        if (g > 0) scale_group(a, ct + ((g - 1) & 1) * 1024, dv, mv, acc, t0, g - 1, off);
    }
    /* y[t][n] = lanes summed 16 -> 8 -> 4 -> 2 -> 1, + bias (the model's order) */
    int tv = j->T - t0 < 16 ? j->T - t0 : 16;
    for (int h = 0; h < 2; h++) {
        int nb = n0 + 16 * h, nv = j->N - nb < 16 ? j->N - nb : 16;
        if (nv <= 0) break;
        __mmask16 mk = (__mmask16)((1u << nv) - 1);
        __m512 b = j->bias ? _mm512_maskz_loadu_ps(mk, j->bias + nb) : _mm512_setzero_ps();
        for (int t = 0; t < tv; t++) {
            __m512 v[QA_LANES];
            for (int l = 0; l < QA_LANES; l++)
                v[l] = l < lanes ? _mm512_loadu_ps(acc + ((size_t)l * 16 + t) * QA_PAIR + 16 * h) : _mm512_setzero_ps();
            for (int w = 8; w >= 1; w /= 2)
                for (int i = 0; i < w; i++) v[i] = _mm512_add_ps(v[i], v[i + w]);
            _mm512_mask_storeu_ps(j->y + (size_t)(t0 + t) * j->N + nb, mk, _mm512_add_ps(v[0], b));
        }
    }
}

static TGT void block_task(void *ctx, int task, int thread) {
    const qa_job *a = ctx;
    const okv_qmm_job *j = &a->j;
    int n0 = task * j->block_rows, rows = j->N - n0 < j->block_rows ? j->N - n0 : j->block_rows;
    int pairs = (rows + QA_PAIR - 1) / QA_PAIR, G = j->w.groups;
    uint8_t *wp = a->wp + (size_t)thread * a->wp_bytes;
    float *dv = a->dv + (size_t)thread * a->dv_elems, *mv = a->mv + (size_t)thread * a->dv_elems;
    float *acc = a->acc + (size_t)thread * a->acc_elems;
    int32_t *ct = a->ct + (size_t)thread * 2048;
    pack_block(a, wp, dv, mv, n0, rows);
    __asm__ volatile("ldtilecfg %0" ::"m"(*(a->kc == 32 ? &cfg_k32 : &cfg_k64)));
    for (int tb = 0; tb < a->Tp / 16; tb++)
        for (int p = 0; p < pairs; p++)
            pair_tile(a, wp + (size_t)p * G * 2 * j->w.group * 16, dv + (size_t)p * G * QA_PAIR,
                      mv + (size_t)p * G * QA_PAIR, acc, ct, tb, n0 + p * QA_PAIR);
    __asm__ volatile("tilerelease" ::);
}

static int qa_block_rows(int N, int n_threads) {
    int per_thread = (N + n_threads * 2 - 1) / (n_threads * 2); /* >= 2 blocks per thread */
    int rows = per_thread < QA_MAX_BLOCK ? per_thread : QA_MAX_BLOCK;
    rows = (rows + QA_PAIR - 1) / QA_PAIR * QA_PAIR;
    return rows < QA_PAIR ? QA_PAIR : rows;
}


/* Scratch bytes of one call: the activation planes, per-group values and
 * each thread's W block (sizes from ints (K, T, N < 2^31, a T x K
 * activation already exists as f32): far below 2^64), + each plane's
 * alignment. */
static size_t qa_bytes(int T, int K, int N, int groups, int n_threads) {
    size_t Tp = (size_t)(T + 15) / 16 * 16, planes = Tp * K, per_group = Tp * groups;
    size_t qtasks = (size_t)(T + QA_X_ROWS_PER_TASK - 1) / QA_X_ROWS_PER_TASK;
    size_t wp_bytes = (size_t)qa_block_rows(N, n_threads) * K, dv_elems = (size_t)qa_block_rows(N, n_threads) * groups;
    size_t bytes = 2 * planes + qtasks * 2 * K + per_group * 20 +
                   (size_t)n_threads * (wp_bytes + dv_elems * 8 + (size_t)QA_LANES * 16 * QA_PAIR * 4 + 8192);
    return (bytes + 64 * 16 + 63) / 64 * 64;
}

size_t okv_matmul_q_amx_scratch(int T, int K, int N, const okv_qscheme *s, int n_threads) {
    if (T < 2 || N <= 0 || K <= 0) return 0;
    size_t i8 = qa_bytes(T, K, N, K / s->group, n_threads), b16 = okv_matmul_q_amx_bf16_scratch(T, K, N, n_threads);
    return i8 > b16 ? i8 : b16;
}

void okv_qmm_amx_int8(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                      const okv_qscheme *s, int N, const float *bias) {
    int n_threads = okv_threadpool_size(tp);
    qa_job a;
    memset(&a, 0, sizeof a);
    a.j.y = y;
    a.j.T = T;
    a.j.K = K;
    a.j.N = N;
    a.j.w = okv_quant_view(s, W, N, K);
    a.j.a.two = okv_qact_two_planes(s->bits, T);
    a.j.bias = bias;
    a.j.block_rows = qa_block_rows(N, n_threads);
    a.ops = okv_qmm_ops_avx512vnni(s->bits, s->asym);
    a.x = x;
    a.Tp = (T + 15) / 16 * 16;
    a.kc = s->group < 64 ? s->group : 64;
    const int G = a.j.w.groups, qtasks = (T + QA_X_ROWS_PER_TASK - 1) / QA_X_ROWS_PER_TASK;
    size_t planes = (size_t)a.Tp * K, per_group = (size_t)a.Tp * G;
    a.wp_bytes = (size_t)a.j.block_rows * K;
    a.dv_elems = (size_t)a.j.block_rows * G;
    a.acc_elems = (size_t)QA_LANES * 16 * QA_PAIR;
    okv_kscratch ks; /* the pool's workspace (planned by the runtime), else allocated */
    char *mem = okv_kscratch_get(&ks, tp, qa_bytes(T, K, N, G, n_threads));
    if (!mem) {
        okv_qmm_fail(y, T, N);
        return;
    }
    char *p = mem;
#define QA_TAKE(ptr, type, n) (ptr = (type *)p, p += ((n) * sizeof(type) + 63) / 64 * 64)
    QA_TAKE(a.qn, int8_t, planes);
    QA_TAKE(a.qn2, int8_t, planes);
    QA_TAKE(a.qsb, int8_t, (size_t)qtasks * 2 * K);
    QA_TAKE(a.j.a.dx, float, per_group);
    QA_TAKE(a.j.a.dx2, float, per_group);
    QA_TAKE(a.j.a.sx, float, per_group);
    QA_TAKE(a.j.a.qsum, int32_t, per_group);
    QA_TAKE(a.j.a.qsum2, int32_t, per_group);
    QA_TAKE(a.wp, uint8_t, (size_t)n_threads * a.wp_bytes);
    QA_TAKE(a.dv, float, (size_t)n_threads * a.dv_elems);
    QA_TAKE(a.mv, float, (size_t)n_threads * a.dv_elems);
    QA_TAKE(a.acc, float, (size_t)n_threads * a.acc_elems);
    QA_TAKE(a.ct, int32_t, (size_t)n_threads * 2048);
#undef QA_TAKE
    /* rows past T: zero codes and scales (their outputs are not written) */
    size_t pad = (size_t)(a.Tp - T);
    if (pad) { /* the last tile row block holds the padding rows, interleaved */
        memset(a.qn + (size_t)(a.Tp - 16) * K, 0, (size_t)16 * K);
        memset(a.qn2 + (size_t)(a.Tp - 16) * K, 0, (size_t)16 * K);
    }
    size_t gpad = (size_t)T * G;
    memset(a.j.a.dx + gpad, 0, pad * G * sizeof(float));
    memset(a.j.a.dx2 + gpad, 0, pad * G * sizeof(float));
    memset(a.j.a.sx + gpad, 0, pad * G * sizeof(float));
    memset(a.j.a.qsum + gpad, 0, pad * G * sizeof(int32_t));
    memset(a.j.a.qsum2 + gpad, 0, pad * G * sizeof(int32_t));
    okv_threadpool_run(tp, qtasks, quantize_task, &a);
    okv_threadpool_run(tp, (N + a.j.block_rows - 1) / a.j.block_rows, block_task, &a);
    okv_kscratch_release(&ks);
}

/* ---- quantized W for the bf16 AMX tiles: column order and dequantization ---------------- */

/* The bf16 tiles (matmul/tiles_amx.c, okv_matmul_q_amx_bf16) do not care in
 * which order K is summed as long as x is gathered the same way, so tile
 * column e follows the codes' memory order: perm[e] = k. A row's codes are
 * stored per superblock of L <= 16 groups in 4-code units interleaved
 * across the groups (okv_quant.c); superblock byte o holds
 *   8-bit: code 4u + b of group l, u = o / 4L, l = o / 4 % L, b = o % 4,
 *          column o (byte order);
 *   4-bit: low nibble code 8v + b, high nibble code 8v + 4 + b of group l,
 *          v = o / 4L, l = o % 4L / 4, b = o % 4; per 16 bytes (chunk
 *          o / 16) 32 columns: the 16 low nibbles, then the 16 high ones.
 * So 16 bytes (32 4-bit or 16 8-bit columns) always belong to the same 4
 * groups when 4L is a multiple of 16 (every full superblock): their
 * codes are widened, converted and scaled in two registers with one
 * permute of the superblock's scales per 4 groups, instead of a byte at a
 * time. The 4-bit layout (both nibbles of a byte in one tile row) halves
 * the instructions per column against low nibbles and high nibbles in
 * separate rows (the first version: 16 columns per convert-scale-round).
 * Measured: Llama-3.2-1B q4 prefill of 512 tokens on 2 threads (perf
 * samples, load ~15): the first version's producer took 892 samples
 * against 2917 in the tiles (bf16's plain copy of its W: 316 against
 * 2602), this one 286 against 1889 (bf16 323 against 1783); alone, one
 * thread, 2048-wide rows: 0.26 (q4) and 0.28 (q8) ns per weight, against
 * ~2.9 ns of tile products per weight at T = 512. */
static inline int q_tile_col(const okv_qview *q, int L, int el, int *l) {
    int o, code;
    if (q->bits == 8) {
        o = el;
        code = 4 * (o / (4 * L)) + o % 4;
    } else {
        o = el / 32 * 16 + el % 16;
        code = 8 * (o / (4 * L)) + (el % 32 >= 16 ? 4 : 0) + o % 4;
    }
    *l = o % (4 * L) / 4;
    return code;
}

void okv_qmm_tile_perm(const okv_qview *q, int32_t *perm) {
    const int G = q->groups, gs = q->group;
    if (q->block != OKV_QB_NONE) { /* GGUF blocks: columns in natural order */
        for (int e = 0; e < G * gs; e++) perm[e] = e;
        return;
    }
    for (int g0 = 0; g0 < G; g0 += OKV_QSB_GROUPS) {
        int L = G - g0 < OKV_QSB_GROUPS ? G - g0 : OKV_QSB_GROUPS, base = g0 * gs;
        for (int el = 0; el < L * gs; el++) {
            int l, code = q_tile_col(q, L, el, &l);
            perm[base + el] = base + l * gs + code;
        }
    }
}

#define TGT_BF16 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* 16 codes (bytes, or their nibbles: shift 0 / 4) to f32 lanes, w = d c + m. */
static inline __attribute__((always_inline)) TGT_BF16 __m512 q_scale16(__m512i c, __m512 d, __m512 m) {
    return _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(c), m);
}

/* dequant_sb_fast for 16 groups (P = 4) and [a, b) on 128-column
 * boundaries (every full superblock of the blocked loop's 512-column
 * chunks): chunk c's scales dv[c % 4] are then fixed per unrolled
 * position, with no index arithmetic (and no idiv) in the loop. A
 * standalone loop over one chunk (256 rows x 512 columns, codes in cache,
 * one run): q8 0.199 -> 0.136 ns per weight, q4 0.189 ->
 * 0.112. perf put the general loop at ~8% of a q8 pp512 step, so this is
 * worth ~2-3% there: below the host's noise in bench_prefill (q8 vs q8
 * interleaved, one with the old loop: 0.96x wall, 1.00x CPU). */
static inline __attribute__((always_inline)) TGT_BF16 void dequant_sb16(const uint8_t *sb, int bits, const __m512 dv[4],
                                                                         const __m512 mv[4], uint16_t *dst, int a, int b) {
    if (bits == 4) { /* 16 bytes per tile row: low nibbles columns 0-15, high 16-31 */
        const __m512i nib = _mm512_set1_epi32(15);
        for (int o = a / 2; o < b / 2; o += 64) {
            uint16_t *out = dst + (size_t)((2 * o - a) / 32) * 512;
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o + 16 * p)));
                __m512 lo = q_scale16(_mm512_and_si512(c, nib), dv[p], mv[p]);
                __m512 hi = q_scale16(_mm512_srli_epi32(c, 4), dv[p], mv[p]);
                _mm512_storeu_si512(out + (size_t)p * 512, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            }
        }
        return;
    }
    for (int o = a; o < b; o += 64) { /* two tile rows of 32 bytes, chunks p = 0..3 */
        uint16_t *out = dst + (size_t)((o - a) / 32) * 512;
        __m512 w0 = q_scale16(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o))), dv[0], mv[0]);
        __m512 w1 = q_scale16(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o + 16))), dv[1], mv[1]);
        __m512 w2 = q_scale16(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o + 32))), dv[2], mv[2]);
        __m512 w3 = q_scale16(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o + 48))), dv[3], mv[3]);
        _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
        _mm512_storeu_si512(out + 512, (__m512i)_mm512_cvtne2ps_pbh(w3, w2));
    }
}

/* Columns [a, b) (superblock-local, multiples of 32) of one full
 * superblock (L % 4 == 0) of row codes sb: ds, ms the f32 scales and
 * offsets of its L groups (sym: ms = -2^(bits-1) ds, so d c + m is d (c -
 * off) exactly: off is a power of two and d an f16); column e at
 * dst[((e - a) / 32) 512 + e % 32]. */
static TGT_BF16 void dequant_sb_fast(const uint8_t *sb, int L, int bits, __m512 ds, __m512 ms, uint16_t *dst, int a,
                                     int b) {
    const __m512i quad = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), nib = _mm512_set1_epi32(15);
    __m512 dv[4], mv[4];
    const int P = L / 4; /* 16-byte chunk c covers groups 4p..4p+3, p = c % P */
    for (int p = 0; p < P; p++) {
        __m512i idx = _mm512_add_epi32(quad, _mm512_set1_epi32(4 * p));
        dv[p] = _mm512_permutexvar_ps(idx, ds);
        mv[p] = _mm512_permutexvar_ps(idx, ms);
    }
    if (P == 4 && a % 128 == 0 && b % 128 == 0) { /* full superblocks: the scale pattern repeats every 4 chunks */
        dequant_sb16(sb, bits, dv, mv, dst, a, b);
        return;
    }
    if (bits == 4) { /* byte o: columns 2o (low nibble) and 2o + 16 (high), per 16 bytes */
        for (int o = a / 2, p = o / 16 % P; o < b / 2; o += 16) {
            __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o)));
            __m512 lo = q_scale16(_mm512_and_si512(c, nib), dv[p], mv[p]);
            __m512 hi = q_scale16(_mm512_srli_epi32(c, 4), dv[p], mv[p]);
            _mm512_storeu_si512(dst + (size_t)((2 * o - a) / 32) * 512, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            p = p + 1 == P ? 0 : p + 1;
        }
        return;
    }
    for (int o = a, p = o / 16 % P; o < b; o += 32) { /* 2 chunks per tile row; P may be odd */
        int p1 = p + 1 == P ? 0 : p + 1;
        __m512 w0 = q_scale16(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o))), dv[p], mv[p]);
        __m512 w1 = q_scale16(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sb + o + 16))), dv[p1], mv[p1]);
        _mm512_storeu_si512(dst + (size_t)((o - a) / 32) * 512, (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
        p = p1 + 1 == P ? 0 : p1 + 1;
    }
}

/* Tile columns [e0, e1) (multiples of 32, e1 <= K) of row n of q (n < 0:
 * zeros) in bf16, column e at dst[((e - e0) / 32) 512 + e % 32] (16 x 32
 * bf16 A tiles, the row's offset within its tile already in dst). Value w
 * = d (c - 2^(bits-1)) or d c + m in f32 (as okv_dequant_row), then
 * rounded to bf16; superblocks with L % 4 != 0 (a tail) element by
 * element. */
/* GGUF block rows: dequantized exactly (okv_qblock_dequant_range) 256
 * columns at a time, then rounded to bf16 into the tile layout. */
static TGT_BF16 void dequant_block_cols_tiles(const okv_qview *q, int n, int e0, int e1, uint16_t *dst) {
    float f[256];
    for (int c0 = e0; c0 < e1; c0 += 256) {
        int c1 = e1 - c0 < 256 ? e1 : c0 + 256;
        okv_qview_block_range(q, n, c0, c1, f);
        for (int e = c0; e < c1; e += 32) {
            __m512 lo = _mm512_loadu_ps(f + (e - c0)), hi = _mm512_loadu_ps(f + (e - c0) + 16);
            _mm512_storeu_si512(dst + (size_t)((e - e0) / 32) * 512, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

TGT_BF16 void okv_qmm_dequant_cols_tiles(const okv_qview *q, int n, int e0, int e1, uint16_t *dst) {
    if (n < 0) {
        for (int e = e0; e < e1; e += 32) memset(dst + (size_t)((e - e0) / 32) * 512, 0, 64);
        return;
    }
    if (q->block != OKV_QB_NONE) {
        dequant_block_cols_tiles(q, n, e0, e1, dst);
        return;
    }
    const int G = q->groups, gs = q->group, off = q->asym ? 0 : 1 << (q->bits - 1);
    const uint8_t *crow = q->codes + (size_t)n * q->code_stride;
    const uint16_t *drow = q->d + (size_t)n * q->scale_stride, *mrow = q->m ? q->m + (size_t)n * q->scale_stride : NULL;
    for (int g0 = e0 / (OKV_QSB_GROUPS * gs) * OKV_QSB_GROUPS; g0 < G && g0 * gs < e1; g0 += OKV_QSB_GROUPS) {
        const int L = G - g0 < OKV_QSB_GROUPS ? G - g0 : OKV_QSB_GROUPS, sb0 = g0 * gs;
        const int a = e0 > sb0 ? e0 - sb0 : 0, b = e1 < sb0 + L * gs ? e1 - sb0 : L * gs;
        const uint8_t *sb = crow + (size_t)g0 * gs * q->bits / 8;
        uint16_t *out = dst + (size_t)((sb0 + a - e0) / 32) * 512;
        if (L % 4 == 0) {
            __mmask16 lm = (__mmask16)((1u << L) - 1);
            __m512 ds = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm, drow + g0));
            __m512 ms = mrow ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm, mrow + g0))
                             : _mm512_mul_ps(ds, _mm512_set1_ps(-(float)off));
            dequant_sb_fast(sb, L, q->bits, ds, ms, out, a, b);
            continue;
        }
        for (int el = a; el < b; el++) {
            int l, c;
            q_tile_col(q, L, el, &l);
            if (q->bits == 8) c = sb[el];
            else c = sb[el / 32 * 16 + el % 16] >> (el % 32 >= 16 ? 4 : 0) & 15;
            float d = okv_k_f16(drow[g0 + l]);
            float w = mrow ? fmaf(d, (float)c, okv_k_f16(mrow[g0 + l])) : d * (float)(c - off);
            out[(size_t)((el - a) / 32) * 512 + el % 32] = okv_f32_to_bf16(w);
        }
    }
}

