/* attend/blocked_q8.c — the blocked attention's inner loops (okv_attn_ops) for
 * q8 K/V pools (format in okv_kvq8.h): plain C, the model the others are
 * tested against, and AVX2 / AVX-512 F/BW from okv_attend_q8.inc with
 * per-function target attributes. okv_attend_fast (attend/blocked.c) swaps
 * these in when a cache is q8, so the algorithm (blocks, splits, masks,
 * online softmax) is the one every dtype uses; only the reads differ.
 *
 * How q8 is consumed, without a dequantized copy of the cache:
 * - scores: each block of <= 32 keys is dequantized (codes widened in
 *   registers, times their block scale) into the per-thread L1 stage the
 *   f16/bf16 paths use, then the same 4-key x 2-vector register-tile GEMM
 *   runs over all Rp query vectors. The stage is KB x D floats (8 KiB at
 *   D 64), re-filled per block, so K is read from memory once at 1.125
 *   bytes per element. (An int8 dot with q quantized per block would save
 *   the widening but add a second rounding of q; at decode the scores are
 *   memory-bound, so the widening is free.)
 * - accumulate: each V row's vectors are widened and scaled in registers
 *   once per key, then FMA'd into the register tile of accumulators (rows x
 *   4 vectors) as in the f32 loop.
 * - softmax does not see the storage dtype: the base table's loop is used.
 *
 * Measured: see README "KV storage" (bench_kernels attnlong, q8 vs bf16 at
 * 16k positions). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "okv_kernels_internal.h"

/* ---- plain ---------------------------------------------------------------------- */

static void scores_q8_plain(float *S, const float *QT, int Rp, const void *k, okv_dtype dt, size_t ldk, int n, int D,
                            float *stage) {
    (void)dt;
    size_t kstride = okv_kv_row_bytes(OKV_Q8, ldk);
    for (int i = 0; i < n; i++) {
        float *kf = stage + (size_t)i * D;
        okv_q8_dequantize(kf, (const char *)k + i * kstride, (size_t)D);
        float *s = S + (size_t)i * Rp;
        for (int r = 0; r < Rp; r++) s[r] = 0.0f;
        for (int d = 0; d < D; d++)
            for (int r = 0; r < Rp; r++) s[r] += kf[d] * QT[(size_t)d * Rp + r];
    }
}

static void softmax_q8_plain(float *S, int n, int Rp, float *m, float *l, float *c) {
    okv_attn_ops_plain.softmax(S, n, Rp, m, l, c);
}

static void accumulate_q8_plain(float *acc, const float *c, const float *P, int Rp, int R, const void *v,
                                okv_dtype dt, size_t ldv, int n, int D) {
    (void)dt;
    size_t vstride = okv_kv_row_bytes(OKV_Q8, ldv);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) acc[(size_t)r * D + d] *= c[r];
    for (int i = 0; i < n; i++) {
        const char *vi = (const char *)v + i * vstride;
        for (int r = 0; r < R; r++) {
            float p = P[(size_t)i * Rp + r];
            for (int d = 0; d < D; d++) acc[(size_t)r * D + d] += p * okv_q8_load(vi, (size_t)d);
        }
    }
}

const okv_attn_ops okv_attn_ops_q8_plain = {scores_q8_plain, softmax_q8_plain, accumulate_q8_plain};

/* ---- AVX2 ----------------------------------------------------------------------- */

#define TGT __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#define NAME(x) x##_avx2
#define V __m256
#define VL 8
#define NA_ROWS 3
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_LOAD_Q8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p))))
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#include "blocked_q8.inc"
#undef TGT
#undef INLINE
#undef NAME
#undef V
#undef VL
#undef NA_ROWS
#undef V_ZERO
#undef V_SET1
#undef V_LOAD
#undef V_STORE
#undef V_LOAD_Q8
#undef V_FMA
#undef V_MUL

static void softmax_q8_avx2(float *S, int n, int Rp, float *m, float *l, float *c) {
    okv_attn_ops_avx2.softmax(S, n, Rp, m, l, c);
}

const okv_attn_ops okv_attn_ops_q8_avx2 = {scores_q8_avx2, softmax_q8_avx2, accumulate_q8_avx2};

/* ---- AVX-512 -------------------------------------------------------------------- */

#define TGT __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline, target("avx2,fma,avx512f,avx512bw,avx512vl")))
#define NAME(x) x##_avx512
#define V __m512
#define VL 16
#define NA_ROWS 6
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_LOAD_Q8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#include "blocked_q8.inc"

static void softmax_q8_avx512(float *S, int n, int Rp, float *m, float *l, float *c) {
    okv_attn_ops_avx512.softmax(S, n, Rp, m, l, c);
}

const okv_attn_ops okv_attn_ops_q8_avx512 = {scores_q8_avx512, softmax_q8_avx512, accumulate_q8_avx512};

/* ---- choice --------------------------------------------------------------------- */

/* Plain stays plain (it is what the others are tested against); any other
 * table gets the best q8 loops the CPU runs, so a new f32/bf16 table (AMX,
 * ...) needs no entry here. */
const okv_attn_ops *okv_attn_ops_q8_for(const okv_attn_ops *base) {
    const okv_cpu_caps *cpu = okv_cpu();
    if (base == &okv_attn_ops_plain || base == &okv_attn_ops_q8_plain) return &okv_attn_ops_q8_plain;
    if (base == &okv_attn_ops_q8_avx2) return base;
    if (cpu->avx512f && cpu->avx512bw && cpu->avx512vl && base != &okv_attn_ops_avx2) return &okv_attn_ops_q8_avx512;
    if (cpu->avx2 && cpu->fma) return &okv_attn_ops_q8_avx2;
    return &okv_attn_ops_q8_plain;
}

okv_attn_ops okv_attn_ops_for_pools(const okv_attn_ops *base, okv_dtype k_dt, okv_dtype v_dt) {
    const okv_attn_ops *k_ops = k_dt == OKV_Q8 ? okv_attn_ops_q8_for(base) : base;
    const okv_attn_ops *v_ops = v_dt == OKV_Q8 ? okv_attn_ops_q8_for(base) : base;
    okv_attn_ops ops = {k_ops->scores, k_ops->softmax, v_ops->accumulate};
    return ops;
}
