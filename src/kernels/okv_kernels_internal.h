/* okv_kernels_internal.h — what the kernel files share but nobody else
 * should call: the per-ISA entry points the tables are built from, and the
 * row operations the fast attention is written against (so the attention
 * algorithm exists once and only its inner loops differ per ISA). */
#ifndef OKV_KERNELS_INTERNAL_H
#define OKV_KERNELS_INTERNAL_H

#include <stdlib.h>
#include <string.h>

#include "okv_kernels.h"
#include "okv_kvq8.h"

/* Scalar bf16 -> f32 (exact) for inner loops; f16 goes through okv_common. */
static inline float okv_k_bf16(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Scalar f16 -> f32 (exact), branch-light: move exponent and mantissa into
 * f32 position and rebias; inf/nan get the f32 max exponent, zero and
 * subnormals are fixed up with one float subtraction (2^-14 * (1 + m/1024)
 * - 2^-14 = m * 2^-24). */
static inline float okv_k_f16(uint16_t h) {
    uint32_t o = (uint32_t)(h & 0x7fff) << 13, e = o & 0x0f800000u;
    float f;
    o += (uint32_t)(127 - 15) << 23;
    if (e == 0x0f800000u) {
        o += (uint32_t)(128 - 16) << 23; /* inf / nan */
    } else if (e == 0) {
        o += 1u << 23;
        memcpy(&f, &o, 4);
        f -= 6.103515625e-05f;
        memcpy(&o, &f, 4);
    }
    o |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &o, 4);
    return f;
}

/* sum a[k]*b[k] with 8 independent partial sums (a compiler can keep them in
 * one vector register; shorter dependency chains anyway): the plain dense
 * and quantized matmuls' dot, so both sum in one order. */
static inline float okv_k_dot8(const float *a, const float *b, int K) {
    float acc[8] = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8)
        for (int i = 0; i < 8; i++) acc[i] += a[k + i] * b[k + i];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < K; k++) s += a[k] * b[k];
    return s;
}

/* Element i of a row stored in dt, as f32 (q8: src at a block boundary). */
static inline float okv_k_load(const void *src, okv_dtype dt, size_t i) {
    if (dt == OKV_Q8) return okv_q8_load(src, i);
    switch (dt) {
    case OKV_F32: return ((const float *)src)[i];
    case OKV_F16: return okv_k_f16(((const uint16_t *)src)[i]);
    case OKV_BF16: return okv_k_bf16(((const uint16_t *)src)[i]);
    }
    return 0.0f;
}

/* dst[0..n) = src[0..n) in dt as f32, one loop per dtype so each can be
 * vectorised. */
static inline void okv_k_load_row(float *dst, const void *src, okv_dtype dt, size_t n) {
    if (dt == OKV_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else if (dt == OKV_BF16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = okv_k_bf16(s[i]);
    } else if (dt == OKV_Q8) {
        okv_q8_dequantize(dst, src, n);
    } else {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = okv_k_f16(s[i]);
    }
}

/* The inner loops of the blocked attention, per ISA (attend/blocked.c). A task
 * holds Rp query vectors (a multiple of 16; padding vectors are zeros) and
 * works on blocks of n <= OKV_ATTN_KB keys. Layouts are chosen so every loop
 * runs along contiguous floats: the queries transposed, QT[d * Rp + r]
 * (scale folded in), the block's scores and probabilities key-major,
 * S[i * Rp + r], and the accumulators row-major, acc[r * D + d]. K and V
 * are read straight from the pools in their storage dtype dt, rows `ld`
 * elements apart. */
enum { OKV_ATTN_KB = 32 };
typedef struct okv_attn_ops {
    /* S[i*Rp + r] = k_i . QT[., r] for i < n, r < Rp; stage is room for
     * n x D floats (a block of f16/bf16 keys converted once for all
     * queries; f32 keys are read in place) */
    void (*scores)(float *S, const float *QT, int Rp, const void *k, okv_dtype dt, size_t ldk, int n, int D,
                   float *stage);
    /* Online softmax step over a masked block S[n][Rp] (-inf = invisible):
     * m_new = max(m, max_i S), c = exp(m - m_new), S = exp(S - m_new),
     * l = l*c + sum_i S, m = m_new; a vector that has seen nothing yet
     * (m_new = -inf) gets c = 1 and zeros. */
    void (*softmax)(float *S, int n, int Rp, float *m, float *l, float *c);
    /* acc[r*D + d] = acc[r*D + d] * c[r] + sum_i P[i*Rp + r] * v_i[d], r < R */
    void (*accumulate)(float *acc, const float *c, const float *P, int Rp, int R, const void *v, okv_dtype dt,
                       size_t ldv, int n, int D);
} okv_attn_ops;

/* The inner loops for q8 K/V (attend/blocked_q8.c) that go with the f32/f16/bf16
 * ones `base` (okv_attn_ops_plain/_avx2/_avx512; anything else gets the
 * plain q8 loops): okv_attend_fast switches to them when the pools are q8. */
const okv_attn_ops *okv_attn_ops_q8_for(const okv_attn_ops *base);
/* The loops for pools stored as k_dt / v_dt: scores (and softmax) from
 * base, or its q8 table when K is q8; accumulate likewise by V's dtype. K
 * and V in one dtype get exactly base or its q8 table. */
okv_attn_ops okv_attn_ops_for_pools(const okv_attn_ops *base, okv_dtype k_dt, okv_dtype v_dt);
extern const okv_attn_ops okv_attn_ops_q8_plain;
extern const okv_attn_ops okv_attn_ops_q8_avx2;
extern const okv_attn_ops okv_attn_ops_q8_avx512;

/* The blocked attention algorithm (attend/blocked.c) with the given inner loops. */
void okv_attend_fast(okv_threadpool *tp, const okv_attn_args *a, const okv_attn_ops *ops);
/* One sequence: [qlo[t], qhi[t]) ([T] each) is the logical key range query
 * t may see; many sequences (a->vis set): all n_keys slots, and
 * okv_attn_key_visible says whether query t sees pool slot `slot`. */
void okv_attn_query_ranges(const okv_attn_args *a, int n_keys, int32_t *qlo, int32_t *qhi);
bool okv_attn_key_visible(const okv_attn_args *a, int t, int32_t slot);
/* Attention of prefill chunks on AMX-BF16 tiles (attend/prefill16.c) for
 * K and V pools each bf16, f16 or q8, head_dim a multiple of 32 (<= 256)
 * and at least 16 query vectors per kv head; every other call (an f32
 * pool, decode) goes to okv_attend_decode or okv_attend_avx512. _tiles skips the checks (callers that made them). */
void okv_attend_amx(okv_threadpool *tp, const okv_attn_args *a);
void okv_attend_amx_tiles(okv_threadpool *tp, const okv_attn_args *a);
size_t okv_attend_amx_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads);
/* The same kernel with its products on vdpbf16ps (any AVX-512 BF16 CPU;
 * same layouts, same scratch); _fits: the calls either kernel takes. */
void okv_attend_prefill_dpbf16(okv_threadpool *tp, const okv_attn_args *a);
bool okv_attend_prefill16_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt);
/* Decode-sized calls (T x heads per kv head <= 15) with head_dim % 32 == 0
 * (<= 256) on one of the two kernels below (attend/decode.c); _fits
 * says whether a call with these K and V pool dtypes qualifies. */
bool okv_attend_decode_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt);
void okv_attend_decode(okv_threadpool *tp, const okv_attn_args *a);
/* Its two kernels: AMX score tiles + f32 FMA P V (K bf16/f16 on BF16
 * tiles or q8 on INT8 tiles, V bf16/f16/q8, kv_heads <= 64, AMX usable),
 * and vdpbf16ps only (K and V bf16/f16/q8; any AVX-512 BF16 CPU).
 * okv_attend_decode takes the first that fits. */
bool okv_attend_decode_amx_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt);
bool okv_attend_decode_dpbf16_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt);
void okv_attend_decode_amx(okv_threadpool *tp, const okv_attn_args *a);
void okv_attend_decode_dpbf16(okv_threadpool *tp, const okv_attn_args *a);
/* The same key-split decode on AVX2 f32 FMAs (K and V f32/bf16/f16, exact
 * products like the blocked kernel; head_dim a multiple of 8), and the avx2
 * table's attention: it for decode-sized calls, else okv_attend_avx2. */
bool okv_attend_decode_avx2_fits(int T, int n_heads, int kv_heads, int D, okv_dtype k_dt, okv_dtype v_dt);
void okv_attend_decode_avx2(okv_threadpool *tp, const okv_attn_args *a);
void okv_attend_avx2_dec(okv_threadpool *tp, const okv_attn_args *a);
/* The AVX-512 BF16 tables' attend: decode calls on okv_attend_decode_dpbf16,
 * prefill chunks that fit on okv_attend_prefill_dpbf16, the rest okv_attend_avx512. */
void okv_attend_avx512_bf16(okv_threadpool *tp, const okv_attn_args *a);
size_t okv_attend_decode_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads);
/* The inner loops per ISA: plain C (the model the others are tested
 * against), AVX2 + FMA + F16C, AVX-512 F/BW/VL (attend/blocked_simd.c). */
extern const okv_attn_ops okv_attn_ops_plain;
extern const okv_attn_ops okv_attn_ops_avx2;
extern const okv_attn_ops okv_attn_ops_avx512;
void okv_attend_avx512(okv_threadpool *tp, const okv_attn_args *a);

/* A kernel's scratch: the pool's workspace when it is large enough, else
 * its own allocation (callers that planned none). */
typedef struct okv_kscratch {
    void *own;
} okv_kscratch;
static inline void *okv_kscratch_get(okv_kscratch *s, okv_threadpool *tp, size_t bytes) {
    void *p = okv_threadpool_workspace(tp, bytes);
    s->own = NULL;
    if (p) return p;
    s->own = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    return s->own;
}
static inline void okv_kscratch_release(okv_kscratch *s) {
    free(s->own);
    s->own = NULL;
}

/* Plain C entry points (matmul/matmul_plain.c). */
extern const okv_attn_ops okv_attn_ops_plain;
void okv_matmul_plain(okv_threadpool *tp, float *y, const float *x, int T, int K,
                      const void *W, okv_dtype wdt, int N, const float *bias);
void okv_rmsnorm_plain(float *y, const float *x, int T, int width, int group, const float *w, float eps);
void okv_glu_plain(float *y, const float *gate, const float *up, size_t n, okv_act act);
void okv_add_rmsnorm_plain(float *y, float *sum, const float *a, const float *b, int T, int width, int group,
                           const float *w, float eps);
void okv_attend_plain(okv_threadpool *tp, const okv_attn_args *a);

/* AVX2+FMA+F16C entry points (matmul/dot_avx2.c); only called when the CPU
 * has those features. */
void okv_matmul_avx2(okv_threadpool *tp, float *y, const float *x, int T, int K,
                     const void *W, okv_dtype wdt, int N, const float *bias);
void okv_attend_avx2(okv_threadpool *tp, const okv_attn_args *a);

/* The row-wise ops' AVX2 and AVX-512 (F/BW/VL/DQ) versions (ops/ops_simd.c). */
void okv_rmsnorm_avx2(float *y, const float *x, int T, int width, int group, const float *w, float eps);
void okv_glu_avx2(float *y, const float *gate, const float *up, size_t n, okv_act act);
void okv_add_rmsnorm_avx2(float *y, float *sum, const float *a, const float *b, int T, int width, int group,
                          const float *w, float eps);
void okv_rope_apply_avx2(float *y, const float *x, int T, int n_heads, int head_dim, const float *cs);
void okv_rmsnorm_avx512(float *y, const float *x, int T, int width, int group, const float *w, float eps);
void okv_glu_avx512(float *y, const float *gate, const float *up, size_t n, okv_act act);
void okv_add_rmsnorm_avx512(float *y, float *sum, const float *a, const float *b, int T, int width, int group,
                            const float *w, float eps);
void okv_rope_apply_avx512(float *y, const float *x, int T, int n_heads, int head_dim, const float *cs);

/* Quantized matmul (qmatmul/int_*.c): the f32 reference (dequantizes each W
 * row once for all rows of x), and per ISA the integer-dot versions. */
void okv_matmul_q_plain(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                        const okv_qscheme *s, int N, const float *bias);
/* y[T, N] = NaN: what a quantized matmul without scratch memory returns. */
void okv_qmm_fail(float *y, int T, int N);

/* The integer-dot algorithm (qmatmul/int_plain.c's head comment) is one driver
 * with per-ISA inner loops. Activations are quantized once per call: row t
 * of x[T, K] becomes int8 planes in W's superblock order (unpacked, one
 * byte per element), x ~= dx * q + dx2 * q2 per group, with their sums.
 * 8-bit W gets both planes, and so does every prompt step (T > 1); a
 * 4-bit decode GEMV (T = 1) one (okv_qact_two_planes: q2, dx2 and qsum2
 * are written as zeros, so a loop that does run the second plane adds
 * fma(0, 0, acc) = acc and keeps the one-plane bits). */
typedef struct okv_qact {
    int8_t *q, *q2;          /* [T][K]: codes and residual codes */
    float *dx, *dx2;         /* [T][G]: dx = max|x| / 127, dx2 = max|x| / 32258 (0: one plane) */
    int32_t *qsum, *qsum2;   /* [T][G]: sums of the group's q, q2 (symmetric offset) */
    float *sx;               /* [T][G]: dx * qsum + dx2 * qsum2 (asymmetric offset) */
    bool two;                /* two planes (okv_qact_two_planes): fixed per call, whatever row is quantized */
    int8_t *xp;              /* prefill copy in row pairs (okv_qact_pack_rows), NULL unless ops->pairs */
    size_t xp_pair_bytes;    /* bytes per row pair in xp */
} okv_qact;

/* Two activation planes for 8-bit W and for every T > 1; one for a 4-bit
 * GEMV (T = 1), where the second plane's dots were what bounded it and its
 * error measured small (qmatmul/int_plain.c). A prompt step is compute-bound,
 * and one plane there flipped SmolLM2 4w's first answer token (a 0.08
 * logit near-tie) where HF and the bf16 tiles keep it. */
static inline bool okv_qact_two_planes(int bits, int T) { return bits == 8 || T > 1; }

typedef struct okv_qmm_job {
    float *y;               /* [T, N] */
    int T, K, N;
    okv_qview w;
    okv_qact a;
    const float *bias;
    int block_rows;         /* prefill: W rows per task */
} okv_qmm_job;

/* Where group g's codes start in a row of the activation planes (superblock
 * order), and the distance between its 4-code units (4 x the lanes of its
 * superblock): shared by every ISA's quantizer. */
static inline size_t okv_qact_group_base(int gs, int G, int g, size_t *unit_stride) {
    int sb = g / OKV_QSB_GROUPS, l = g % OKV_QSB_GROUPS;
    int L = G - sb * OKV_QSB_GROUPS < OKV_QSB_GROUPS ? G - sb * OKV_QSB_GROUPS : OKV_QSB_GROUPS;
    *unit_stride = (size_t)4 * L;
    return (size_t)sb * OKV_QSB_GROUPS * gs + 4 * (size_t)l;
}
/* Group g of row t held a NaN or inf: zero codes and NaN scales, so that
 * row's outputs become NaN as they would in f32 (qmatmul/int_plain.c). */
void okv_qact_poison_group(const okv_qmm_job *j, int t, int g);

typedef struct okv_qmm_ops {
    /* row t of x[K] -> a's row t (codes, dx, qsum, sx) */
    void (*quantize)(const okv_qmm_job *j, const float *x, int t);
    /* T = 1: y[n] for n in [n0, n1) */
    void (*gemv)(const okv_qmm_job *j, int n0, int n1);
    /* all T rows for W rows [n0, n1) */
    void (*gemm)(const okv_qmm_job *j, int n0, int n1);
    /* the gemm reads a.xp, both planes of x in row pairs (T > 1 with two
     * planes; okv_qmm_run packs it as it quantizes) */
    bool pairs;
} okv_qmm_ops;

/* The row-pair copy of the activation planes: for rows 2P and 2P + 1,
 * superblock sb and x unit u (4 codes of each of the superblock's lanes),
 * 256 bytes at xp + P * pair_bytes + (sb * group / 4 + u) * 256:
 * [q of row 2P][q of row 2P + 1][q2 of row 2P][q2 of row 2P + 1], each a
 * 64-byte vector, lanes past a tail superblock's zero (an odd T's last
 * pair has only its first row). One sequential stream of x vectors per
 * tile: a 6 x 2 VNNI tile read from it ran at 1.2-1.5x the same tile on
 * the row planes (qmatmul/int_avx512.c). */
size_t okv_qact_pair_bytes(int K, int group);
void okv_qact_pack_rows(const okv_qmm_job *j, int t0, int t1);

/* Quantizes x with ops, then runs the GEMV (T = 1: per-thread ranges of W
 * rows claimed in chunks, like the bf16 GEMV) or the GEMM (T > 1: blocks of
 * W rows that stay in L2). invariant: two activation planes whatever T
 * (the deterministic table: a row's bits must not depend on the batch),
 * else okv_qact_two_planes(bits, T). */
void okv_qmm_run(okv_threadpool *tp, const okv_qmm_ops *ops, float *y, const float *x, int T, int K, const void *W,
                 const okv_qscheme *s, int N, const float *bias, bool invariant);
/* The same on planes described by a view (a layout experiment can point
 * the kernels at other strides; bench_kernels qlayout). */
void okv_qmm_run_view(okv_threadpool *tp, const okv_qmm_ops *ops, float *y, const float *x, int T, int K,
                      const okv_qview *w, int N, const float *bias, bool invariant);
/* The integer ops okv_matmul_q_best runs on this CPU (VNNI, AVX2, plain). */
const okv_qmm_ops *okv_qmm_ops_best(int bits, bool asym);
const okv_qmm_ops *okv_qmm_ops_avx2(int bits, bool asym);
/* The AVX-512 VNNI ops for a scheme's bits / asym. */
const okv_qmm_ops *okv_qmm_ops_avx512vnni(int bits, bool asym);
/* The integer algorithm in plain C: the model the SIMD versions must match
 * bit for bit (qmatmul/int_plain.c). */
extern const okv_qmm_ops okv_qmm_ops_plain;
void okv_matmul_q_int_plain(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            const okv_qscheme *s, int N, const float *bias);
/* AVX-512 F/BW/VL + VNNI (qmatmul/int_avx512.c): vpdpbusd on 512-bit vectors. */
void okv_matmul_q_avx512vnni(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                             const okv_qscheme *s, int N, const float *bias);
/* The same with the decode GEMV reading one W row per pass (one sequential
 * stream per thread, no software prefetch): the avx512-vdpbf16 table's. */
void okv_matmul_q_avx512vnni_1row(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                  const okv_qscheme *s, int N, const float *bias);
bool okv_qmm_have_avx512vnni(void);
/* The same CPU, dequantizing W to f32 in registers (f32 x, FMA per element):
 * the measured alternative to integer dots, not used by the tables. */
void okv_matmul_q_avx512_f32(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                             const okv_qscheme *s, int N, const float *bias);
/* AVX2 + FMA + F16C (qmatmul/int_avx2.c): vpmaddubsw + vpmaddwd, exact. */
void okv_matmul_q_avx2(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                       const okv_qscheme *s, int N, const float *bias);
bool okv_qmm_have_avx2(void);
/* AMX-INT8 (qmatmul/int8_amx.c): T >= 16 on tdpbsud tiles, bit for bit the
 * plain integer model; fewer rows (or no AMX-INT8 permission)
 * okv_matmul_q_best. _tiles uses the tiles for every T > 1 (tests). */
void okv_matmul_q_amx(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                      const okv_qscheme *s, int N, const float *bias);
void okv_matmul_q_amx_tiles(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            const okv_qscheme *s, int N, const float *bias);
bool okv_qmm_have_amx_int8(void);
/* Quantized W dequantized per call into the bf16 AMX tiles (matmul/tiles_amx.c):
 * x and the dequantized weights rounded to bf16 (products within 2^-8
 * relative of the f32 reference), sums f32. T > 1 with AMX-BF16 (else
 * okv_matmul_q_best). */
void okv_matmul_q_amx_bf16(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                           const okv_qscheme *s, int N, const float *bias);
size_t okv_matmul_q_amx_bf16_scratch(int T, int K, int N, int n_threads);
/* Its producer (qmatmul/int8_amx.c): perm[e] = the k of bf16 tile column e
 * ([K], the codes' memory order), K % 32 == 0; and tile columns [e0, e1)
 * (multiples of 32: a K chunk of the blocked loop) of row n of W (n < 0:
 * zeros) dequantized to bf16 in that order, column e at
 * dst[((e - e0) / 32) 512 + e % 32] (16 x 32 bf16 A tiles). */
void okv_qmm_tile_perm(const okv_qview *q, int32_t *perm);
void okv_qmm_dequant_cols_tiles(const okv_qview *q, int n, int e0, int e1, uint16_t *dst);
/* The fastest of the above this CPU supports. */
void okv_matmul_q_best(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                       const okv_qscheme *s, int N, const float *bias);

/* ---- W as GGUF blocks (qmatmul/block_*.c; okv_qblock.h) --------------------------------------- */

/* Activation blocks: x quantized per 32 (for the 32-element block types)
 * or per 256 (K-quants), d = max|x| / 127, q = round(x / d). */
typedef struct okv_qb_x32 {
    float d;
    int32_t qsum;     /* sum of q */
    int8_t q[32];
} okv_qb_x32;
typedef struct okv_qb_x256 {
    float d;
    int16_t bsums[16]; /* sums of q[16 g .. 16 g + 15] */
    int8_t q[256];
} okv_qb_x256;
/* x[K] -> K / 32 okv_qb_x32 or K / 256 okv_qb_x256 at xq (every ISA's
 * quantizer writes the same bytes as the plain one) */
typedef void (*okv_qb_quant_fn)(const float *x, int K, void *xq);
/* One W row of nb blocks (w) . one activation row (xq) */
typedef float (*okv_qb_dot_fn)(const uint8_t *w, const void *xq, int nb);
/* out[r] = row r's dot for the 8 rows of an x8 group at wg (okv_qblock_x8.c) */
typedef void (*okv_qb_dot8_fn)(const uint8_t *wg, const void *xq, int nb, float out[8]);
/* One ISA's quantizers and dots (a NULL dot: the plain one runs). */
typedef struct okv_qb_isa {
    const char *name;
    okv_qb_quant_fn quant32, quant256;
    okv_qb_dot_fn dot[OKV_QB_Q8_K];
    okv_qb_dot8_fn dot8[OKV_QB_Q8_K]; /* x8 layout; the runtime packs a type only where an ISA has one */
} okv_qb_isa;
extern const okv_qb_isa okv_qb_isa_plain;
/* x8 dots on AVX-512 VNNI (qmatmul/block_x8_avx512.c) */
void okv_qb_dot8_q4_0_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]);
void okv_qb_dot8_q8_0_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]);
void okv_qb_dot8_q4_k_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]);
void okv_qb_dot8_q5_k_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]);
/* x8 dots on AVX2 (qmatmul/block_x8_avx2.c) */
void okv_qb_dot8_q4_0_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]);
void okv_qb_dot8_q8_0_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]);
void okv_qb_dot8_q4_k_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]);
void okv_qb_dot8_q5_k_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]);
/* Whether the AVX2 / best integer driver has an x8 dot for a block type
 * (the tables' matmul_qb_x8). */
bool okv_qb_x8_avx2(int type);
bool okv_qb_x8_best(int type);
/* NULL when this CPU lacks the ISA (AVX2+FMA+F16C; AVX-512 F/BW/VL + VNNI). */
const okv_qb_isa *okv_qb_isa_avx2(void);
const okv_qb_isa *okv_qb_isa_avx512(void);
const okv_qb_isa *okv_qb_isa_best(void);
/* The integer driver (qmatmul/block_plain.c) on an ISA's quantizers and dots; scratch
 * okv_qbmm_scratch(T, K) bytes. */
void okv_qbmm_run(okv_threadpool *tp, const okv_qb_isa *isa, float *y, const float *x, int T, int K, const void *W,
                  const okv_qscheme *s, int N, const float *bias);
size_t okv_qbmm_scratch(int T, int K);
void okv_matmul_qb_int_plain(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                             const okv_qscheme *s, int N, const float *bias);
void okv_matmul_qb_int_best(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            const okv_qscheme *s, int N, const float *bias);
/* The tables' block matmuls (okv_kernels.c's matmul_qb): prompts from
 * QB_PACK_MIN_T rows on the ISA's packed GEMM with W dequantized exactly
 * per call, fewer rows (decode) on the integer driver. */
void okv_matmul_qb_avx2(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                        const okv_qscheme *s, int N, const float *bias);
void okv_matmul_qb_avx512(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                          const okv_qscheme *s, int N, const float *bias);
void okv_matmul_qb_avx512_vdp(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                              const okv_qscheme *s, int N, const float *bias);

/* AVX-512 F/BW/VL (+FMA, F16C) matmul (matmul/dot_avx512.c): T > 1 with
 * 512-bit FMAs on f32 activations for every weight dtype, T = 1 the AVX2
 * GEMV. The _bf16 variant (needs AVX512-BF16) rounds x to bf16 once per call
 * and uses vdpbf16ps for bf16 weights; f32/f16 weights as okv_matmul_avx512. */
void okv_matmul_avx512(okv_threadpool *tp, float *y, const float *x, int T, int K,
                       const void *W, okv_dtype wdt, int N, const float *bias);
void okv_matmul_avx512_bf16(okv_threadpool *tp, float *y, const float *x, int T, int K,
                            const void *W, okv_dtype wdt, int N, const float *bias);
/* bf16 / f16 weights at T > 1 on f32 FMAs with x and W packed per call
 * (matmul/gemm_avx512.c); products exact. Other cases as
 * okv_matmul_avx512. _takes: whether it packs (T > 1, bf16 / f16 W). */
void okv_matmul_avx512_gemm(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            okv_dtype wdt, int N, const float *bias);
bool okv_matmul_avx512_gemm_takes(int T, int K, int N, okv_dtype wdt);
size_t okv_matmul_avx512_gemm_scratch(int T, int K, int N, int n_threads);
/* Quantized W on the same packed kernel: W dequantized to f32 per call
 * (okv_qmm_dequant_cols_f32), x packed in the codes' order, products and
 * sums as okv_matmul_q_plain's f32 math. _gemm is the AVX-512 tables'
 * quantized matmul: packed from the T where it beats the VNNI integer
 * path (measured, in the file), else okv_matmul_q_best. */
void okv_matmul_q_avx512_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                const okv_qscheme *s, int N, const float *bias);
void okv_matmul_q_avx512_gemm(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                              const okv_qscheme *s, int N, const float *bias);
/* The packed GEMMs' task height: N shared by the threads, rounded up to
 * whole micro-panels of nr rows, at most nb (a multiple of nr). */
static inline int okv_gemm_task_rows(int N, int n_threads, int nr, int nb) {
    int per = (N + n_threads - 1) / n_threads;
    per = (per + nr - 1) / nr * nr;
    return per < nb ? per : nb;
}
/* Whether the packed GEMMs take quantized W (T > 1, whole groups, K % 32 == 0). */
static inline bool okv_gemm_quant_packs(int T, int K, int N, const okv_qscheme *s) {
    return T > 1 && K > 0 && N > 0 && s && s->group > 0 && K % s->group == 0 && K % 32 == 0;
}
/* The packed GEMMs' x panel p: dst[e][r] = x[mr p + r][perm ? perm[e] : e]
 * for e < K, r < mr (<= 8), rows past T zero. */
static inline void okv_gemm_pack_x_panel(float *dst, const float *x, int T, int K, int mr, const int32_t *perm,
                                         int p) {
    const float *row[8];
    for (int r = 0; r < mr; r++) row[r] = mr * p + r < T ? x + (size_t)(mr * p + r) * K : NULL;
    for (int k = 0; k < K; k++) {
        int src = perm ? perm[k] : k;
        for (int r = 0; r < mr; r++) dst[(size_t)k * mr + r] = row[r] ? row[r][src] : 0.0f;
    }
}
/* The same packed shape on 256-bit FMAs (matmul/gemm_avx2.c). _packed
 * packs every T > 1 (bf16 / f16 W; else okv_matmul_avx2), and for quantized
 * W dequantizes it to f32 per call (x stays f32: the math of
 * okv_matmul_q_plain; T = 1 or K not a multiple of 32: okv_matmul_q_best).
 * _gemm is the avx2 table's entry: packed from the T where packing pays
 * (measured, in the file), else the unpacked kernels. */
void okv_matmul_avx2_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            okv_dtype wdt, int N, const float *bias);
void okv_matmul_avx2_gemm(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                          int N, const float *bias);
void okv_matmul_q_avx2_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                              const okv_qscheme *s, int N, const float *bias);
void okv_matmul_q_avx2_gemm(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            const okv_qscheme *s, int N, const float *bias);
size_t okv_matmul_avx2_gemm_scratch(int T, int K, int N, int n_threads);
/* Columns [e0, e1) (multiples of 32) of quantized row n, in the codes'
 * memory order (okv_qmm_tile_perm), dequantized to f32 into dst[e - e0]
 * exactly as okv_dequant_row computes them (AVX2 + FMA). */
void okv_qmm_dequant_cols_f32(const okv_qview *q, int n, int e0, int e1, float *dst);
/* Rows [n0, n0 + count) of it, columns [k0, k0 + kc), into stage rows ld
 * floats apart (rows at or past N zero): the packed GEMMs' producers. */
void okv_qmm_stage_rows(const okv_qview *q, int n0, int count, int N, int k0, int kc, float *stage, int ld);
/* bf16 weights at T > 1 on vdpbf16ps with x (rounded to bf16) and W packed
 * per call (matmul/gemm_dpbf16.c). _try: false (nothing written) when
 * it does not take the case (_takes: T > 1, bf16 W) or has no scratch; the
 * plain entry then falls back to okv_matmul_avx512_bf16. Needs AVX512-BF16. */
void okv_matmul_avx512_dpbf16(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                              okv_dtype wdt, int N, const float *bias);
bool okv_matmul_avx512_dpbf16_takes(int T, int K, int N, okv_dtype wdt);
/* Quantized W on the same kernel: each task's rows dequantized to f32
 * (okv_qmm_stage_rows) and rounded to bf16 pairs per call, x packed in the
 * codes' column order; products of bf16 x and bf16-rounded W as the AMX
 * table's okv_matmul_q_amx_bf16. Where it does not pack (T = 1, K not a
 * multiple of 32): okv_matmul_q_best. */
void okv_matmul_q_avx512_dpbf16(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                const okv_qscheme *s, int N, const float *bias);
size_t okv_matmul_avx512_dpbf16_scratch(int T, int K, int N, int n_threads);
/* The avx512-vdpbf16 table's matmuls (Zen 4): bf16 W at T > 1 on vdpbf16ps,
 * f16 W on okv_matmul_avx512_gemm (exact products), T = 1 as
 * okv_matmul_avx512_bf16; quantized W on okv_matmul_q_avx512_dpbf16 from
 * the T where it beats the VNNI path (measured, in the file), else
 * okv_matmul_q_best. */
void okv_matmul_avx512_vdp_gemm(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                okv_dtype wdt, int N, const float *bias);
void okv_matmul_q_avx512_vdp_gemm(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                  const okv_qscheme *s, int N, const float *bias);
/* The avx512-bf16 table's matmul (AVX-512 BF16 at half the FMA rate):
 * okv_matmul_avx512_gemm where it packs, else okv_matmul_avx512_bf16 (its
 * bf16 GEMV at T = 1). */
void okv_matmul_avx512_bf16_gemm(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                 okv_dtype wdt, int N, const float *bias);
/* T = 1 with x rounded to bf16 first (then the AVX2 GEMV), so decode uses the
 * operands the bf16 prefill paths use. Needs AVX512-BF16. */
void okv_matmul_gemv_bf16x(okv_threadpool *tp, float *y, const float *x, int K, const void *W, okv_dtype wdt, int N,
                           const float *bias);
/* The same one W row per pass, without software prefetch (the
 * avx512-vdpbf16 table's decode GEMV; matmul/dot_avx512.c). */
void okv_matmul_gemv_bf16x_1row(okv_threadpool *tp, float *y, const float *x, int K, const void *W, okv_dtype wdt,
                                int N, const float *bias);

/* AMX-BF16 matmul (matmul/tiles_amx.c): T > 1 with bf16/f16 weights on tiles
 * (x and f16 W rounded to bf16), f32 weights and T = 1 as
 * okv_matmul_avx512_bf16. Only called once okv_amx_usable() said yes. */
void okv_matmul_amx(okv_threadpool *tp, float *y, const float *x, int T, int K,
                    const void *W, okv_dtype wdt, int N, const float *bias);
/* The tiles for every T >= 1 (no GEMV at T = 1): each output's sums do not
 * depend on T (the deterministic table's bf16 path). */
void okv_matmul_amx_tiles(okv_threadpool *tp, float *y, const float *x, int T, int K,
                          const void *W, okv_dtype wdt, int N, const float *bias);
/* The previous tile loop (x re-read from L3 for every 32 W rows), kept so
 * bench_kernels pp512 can compare the two side by side. */
void okv_matmul_amx_v1(okv_threadpool *tp, float *y, const float *x, int T, int K,
                       const void *W, okv_dtype wdt, int N, const float *bias);

/* The batch-invariant matmuls (matmul/det.c; AVX2 + FMA + F16C):
 * every output computed the same way for every T. */
void okv_matmul_det(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt, int N,
                    const float *bias);
/* The AVX-512 rule on 16 lanes (any W dtype), and for bf16 W with AMX the
 * tiles' sums at every T: T = 1 on a one-row tile GEMV (K % 32 == 0, N >=
 * 16), larger T on okv_mm_amx_tiles (the router's det lists). */
void okv_mm_det_avx512(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                       int N, const float *bias);
void okv_mm_det_amx_gemv(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                         int N, const float *bias);
/* The integer model with both activation planes at every T (T >= 16 may
 * take the AMX-INT8 tiles instead: the same bits). */
void okv_qmm_det_int(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, const okv_qscheme *s,
                     int N, const float *bias);

/* The batch-invariant attention (attend/det.c) on the plain / AVX2 / AVX-512
 * inner loops, and its workspace for up to T rows. */
void okv_attend_det_plain(okv_threadpool *tp, const okv_attn_args *a);
void okv_attend_det_avx2(okv_threadpool *tp, const okv_attn_args *a);
void okv_attend_det_avx512(okv_threadpool *tp, const okv_attn_args *a);

/* Scratch bytes of each matmul path for up to T rows (the paths take them
 * from the pool's workspace; okv_matmul_scratch_bytes is their maximum). */
size_t okv_matmul_plain_scratch(int K, okv_dtype wdt, int n_threads);
size_t okv_matmul_avx512_scratch(int T, int K);
size_t okv_matmul_amx_scratch(int T, int K, int N, int n_threads);
size_t okv_matmul_q_plain_scratch(int K, int n_threads);
size_t okv_qmm_scratch(int T, int K, int groups);
size_t okv_matmul_q_amx_scratch(int T, int K, int N, const okv_qscheme *s, int n_threads);

/* Splitting N output features into blocks of whole rows for the pool:
 * blocks of `rows` rows (a multiple of `align`) sized so one block of W
 * stays in L2 and there are enough blocks to balance the threads. */
int okv_matmul_block_rows(int N, int K, okv_dtype wdt, int n_threads, int align);

/* One y[T,N] = x[T,K] @ W[N,K]^T (+bias) call as the pool tasks see it. */
typedef struct matmul_job {
    float *y;
    const float *x;
    int T, K, N;
    const void *W;
    okv_dtype wdt;
    const float *bias;
    int block_rows;
    float *rows; /* plain path, per thread: one W row converted to f32 [K] (NULL: convert per use) */
} matmul_job;

/* The 64-byte LDTILECFG operand of AMX palette 1 (matmul/tiles_amx.c,
 * qmatmul/int8_amx.c). Build it as a zero-initialised static: a config on the
 * stack with garbage in a reserved byte faults at ldtilecfg. */
typedef struct okv_amx_tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile i */
    uint8_t rows[16];   /* rows of tile i */
} okv_amx_tilecfg;
_Static_assert(sizeof(okv_amx_tilecfg) == 64, "tile config is 64 bytes");

/* ---- the router (okv_kernels.c) -------------------------------------------------- */

/* What the router's fits() may ask of the CPU (read once). */
typedef struct okv_kcaps {
    bool avx2;       /* AVX2 + FMA + F16C */
    bool avx512;     /* that + AVX-512 F/BW/VL/DQ */
    bool avx512bf16; /* that + AVX512-BF16 */
    bool vnni512;    /* AVX-512 + VNNI (okv_qmm_have_avx512vnni) */
    bool amx;        /* AMX-BF16 granted by the OS (okv_amx_usable) */
    bool amx_int8;   /* AMX-INT8 too (okv_qmm_have_amx_int8) */
} okv_kcaps;

typedef void (*okv_matmul_fn)(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                              okv_dtype wdt, int N, const float *bias);
typedef void (*okv_matmul_q_fn)(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                const okv_qscheme *s, int N, const float *bias);
typedef void (*okv_attend_fn)(okv_threadpool *tp, const okv_attn_args *a);

/* One way to run an op. A list is an array of variants ended by an entry
 * with name NULL whose `then` continues into another list (or is NULL: the
 * list's last variant must then fit everything). fits NULL: always. run
 * holds the op's signature (matmul_q for matmul_q and matmul_qb). */
struct okv_kvariant {
    const char *name;
    bool (*fits)(const okv_kshape *sh, const okv_kcaps *caps);
    union {
        okv_matmul_fn matmul;
        okv_matmul_q_fn matmul_q;
        okv_attend_fn attend;
    } run;
    const okv_kvariant *then;
};
/* The first variant of list that fits sh on this CPU: the one pick every
 * table call makes (never NULL for the tables' lists). */
const okv_kvariant *okv_kernels_route(const okv_kvariant *list, const okv_kshape *sh);
const okv_kcaps *okv_kcaps_get(void);
/* Every table okv_kernels_select(_deterministic) can return: copies up to
 * max into out, returns how many there are. */
int okv_kernels_all(const okv_kernels **out, int max);

/* ---- leaves: one op on one ISA, no routing inside -------------------------------------- */
/* Each assumes its variant's fits() held; out of scratch memory it fills y
 * with NaN (okv_qmm_fail). */
/* dense W, T > 1, bf16 / f16 (matmul/gemm_avx2.c, matmul/gemm_avx512.c) */
void okv_mm_avx2_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                        int N, const float *bias);
void okv_mm_avx512_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                          int N, const float *bias);
/* bf16 W, T > 1, on vdpbf16ps with x and W packed (matmul/gemm_dpbf16.c) */
void okv_mm_avx512_dpbf16_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                 okv_dtype wdt, int N, const float *bias);
/* T > 1, K, N > 0: 512-bit f32 FMA tiles, any W dtype; bf16 W on vdpbf16ps
 * tiles with x rounded to bf16 (matmul/dot_avx512.c) */
void okv_mm_avx512_dot(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                       int N, const float *bias);
void okv_mm_avx512_bf16_dot(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                            okv_dtype wdt, int N, const float *bias);
/* bf16 / f16 W on AMX tiles, AMX usable: the blocked loop (T > 1) and the
 * previous one (T >= 1) (matmul/tiles_amx.c) */
void okv_mm_amx_blocked(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                        int N, const float *bias);
void okv_mm_amx_tiles(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                      int N, const float *bias);
/* quantized W, okv_gemm_quant_packs: dequantized per call into the packed
 * GEMMs (f32 on AVX2 / AVX-512, bf16 on vdpbf16ps and AMX tiles) */
void okv_qmm_avx2_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                         const okv_qscheme *s, int N, const float *bias);
void okv_qmm_avx512_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                           const okv_qscheme *s, int N, const float *bias);
void okv_qmm_avx512_dpbf16_packed(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                  const okv_qscheme *s, int N, const float *bias);
void okv_qmm_amx_bf16(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                      const okv_qscheme *s, int N, const float *bias);
/* offkv planes on AMX-INT8 tiles, T >= 2 (qmatmul/int8_amx.c) */
void okv_qmm_amx_int8(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                      const okv_qscheme *s, int N, const float *bias);
/* GGUF blocks on the integer driver with the AVX2 / AVX-512 VNNI dots (qmatmul/block_plain.c) */
void okv_qbmm_int_avx2(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                       const okv_qscheme *s, int N, const float *bias);
void okv_qbmm_int_avx512(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                         const okv_qscheme *s, int N, const float *bias);

#endif
