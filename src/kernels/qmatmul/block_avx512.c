/* qmatmul/block_avx512.c — the GGUF block dots and activation quantizers
 * (qmatmul/block_plain.c's algorithm and plain model) on AVX-512 F/BW/VL + VNNI, for
 * every carried block type. The quantizers run 16 lanes and write the
 * plain ones' bytes (a non-finite block: d = NaN, codes and sums 0). The
 * dots compute the plain model's integers and per-block float terms, no
 * FMA; only the order in which blocks are added differs.
 *
 * 256-bit vectors throughout: Zen 4 splits 512-bit ops in two (zmm forms
 * measured no faster here) and a 32-element block is one ymm. What
 * AVX-512 brings over qmatmul/block_avx2.c: vpdpbusd for Q8_0 (q ^ 0x80 as u8,
 * 128 qsum taken back: one op per block for |q| . sign(x, q) + vpmaddubsw
 * + vpmaddwd), masked byte adds placing Q5_0/Q5_1, Q5_K and Q3_K's high
 * bits straight from the qh words, vpdpwssd (scale product + accumulate),
 * vpermw for scale orders, vpternlog for Q6_K's code assembly. The 4-6-bit
 * codes stay on vpmaddubsw (pairs exact in int16), which measured faster
 * than vpdpbusd + a scale step: for 32-element blocks the first two levels
 * of the per-block lane transposition run in int16; for K-quants the
 * scaled pair sums go into 4 independent accumulators (one accumulator
 * chained a super-block's products and left the loop latency-bound, 30%
 * slower). Both dots take 8 blocks / super-blocks per pass, lane i = block
 * i, so the float terms run 8 wide; per-block scales are assembled in GPRs
 * (8-lane gathers cost 11-13 cycles on Zen 4, vpermt2w from 128-byte
 * windows was slower too). Software prefetch 2 KiB ahead: no change.
 *
 * Zen 4, 2 threads, W streamed from DRAM (bench_kernels qbgemv, 8192x2048):
 * Q4_K 34.5 GB/s with the VM's read probe at 36 (95-100% of it for Q4_0,
 * Q4_K, Q5_K, Q6_K, Q8_0; Q2_K / Q3_K 75%). */
#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "simd/avx512.h"

#define TGT_S "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
#define TGT __attribute__((target(TGT_S)))
#define INLINE_TGT static inline __attribute__((always_inline, target(TGT_S)))

/* ---- activation quantizers (the plain ones' operations, 16 lanes) --------------------- */

/* Block of n = 16 * nv floats at x: |x| vectors a[], whether any is NaN / inf,
 * their max. */
INLINE_TGT bool x_absmax(const float *x, int nv, __m512 *v, float *amax) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), fmax = _mm512_set1_ps(FLT_MAX);
    __m512 m = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int i = 0; i < nv; i++) {
        v[i] = _mm512_loadu_ps(x + 16 * i);
        __m512 a = _mm512_and_ps(v[i], absmask);
        bad |= _mm512_cmp_ps_mask(a, fmax, _CMP_NLE_UQ);
        m = _mm512_max_ps(m, a);
    }
    *amax = _mm512_reduce_max_ps(m);
    return bad == 0;
}

static TGT void quant32_avx512(const float *x, int K, void *xq) {
    okv_qb_x32 *b = xq;
    for (int blk = 0; blk < K / 32; blk++, x += 32) {
        __m512 v[2];
        float am;
        if (!x_absmax(x, 2, v, &am)) {
            b[blk].d = NAN;
            b[blk].qsum = 0;
            memset(b[blk].q, 0, 32);
            continue;
        }
        b[blk].d = am / 127.0f;
        const __m512 id = _mm512_set1_ps(am > 0.0f ? 127.0f / am : 0.0f);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v[0], id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v[1], id));
        _mm_storeu_si128((__m128i *)b[blk].q, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(b[blk].q + 16), _mm512_cvtepi32_epi8(q1));
        b[blk].qsum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}

static TGT void quant256_avx512(const float *x, int K, void *xq) {
    okv_qb_x256 *b = xq;
    for (int blk = 0; blk < K / 256; blk++, x += 256) {
        __m512 v[16];
        float am;
        if (!x_absmax(x, 16, v, &am)) {
            b[blk].d = NAN;
            memset(b[blk].bsums, 0, sizeof b[blk].bsums);
            memset(b[blk].q, 0, 256);
            continue;
        }
        b[blk].d = am / 127.0f;
        const __m512 id = _mm512_set1_ps(am > 0.0f ? 127.0f / am : 0.0f);
        for (int g = 0; g < 16; g++) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[g], id));
            _mm_storeu_si128((__m128i *)(b[blk].q + 16 * g), _mm512_cvtepi32_epi8(q));
            b[blk].bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
        }
    }
}

/* ---- shared pieces --------------------------------------------------------------------- */

static inline uint16_t u16_at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
/* f16 -> f32 is exact: F16C gives okv_f16_to_f32's values, inline. */
INLINE_TGT float f16_at(const uint8_t *p) { return _cvtsh_ss(u16_at(p)); }


INLINE_TGT int32_t hsum256_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

INLINE_TGT float hsum256_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Lane sums by transposition (vpunpck + add: vphaddd runs at one per 2.2
 * cycles on Zen 4, unpacks and adds at 3-4 per cycle). */
INLINE_TGT __m256i hsum_pair(__m256i a, __m256i b) { /* per 128-bit lane: a0+a2 b0+b2 a1+a3 b1+b3 */
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
INLINE_TGT __m256i hsum_quad(__m256i ab, __m256i cd) { /* per 128-bit lane: a b c d */
    return _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
}
INLINE_TGT __m256i lanes_add(__m256i a, __m256i b) { /* [a lo + a hi, b lo + b hi] */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* ---- 32-element blocks ---------------------------------------------------------------- */

/* Bytes per block and the code offset (q_w = code - off: dot = dp - off * qsum). */
#define B32_BYTES(T) ((T) == OKV_QB_Q4_0 ? 18 : (T) == OKV_QB_Q4_1 ? 20 : (T) == OKV_QB_Q5_0 ? 22 : (T) == OKV_QB_Q5_1 ? 24 : 34)
#define B32_OFF(T) ((T) == OKV_QB_Q4_0 ? 8 : (T) == OKV_QB_Q5_0 ? 16 : (T) == OKV_QB_Q8_0 ? 128 : 0)
#define B32_ASYM(T) ((T) == OKV_QB_Q4_1 || (T) == OKV_QB_Q5_1)

/* A block's 32 codes as unsigned bytes in element order: nibbles broadcast
 * to both 128-bit lanes, the high lane shifted by 4; Q5's 5th bits by a
 * masked add straight from the qh word; Q8_0's q + 128 (q ^ 0x80). */
INLINE_TGT __m256i codes32(int type, const uint8_t *b) {
    const __m256i sh = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    switch (type) {
    case OKV_QB_Q8_0:
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + 2)), _mm256_set1_epi8((char)0x80));
    case OKV_QB_Q4_0:
    case OKV_QB_Q4_1: {
        __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + (type == OKV_QB_Q4_0 ? 2 : 4))));
        return _mm256_and_si256(_mm256_srlv_epi16(v, sh), m4);
    }
    default: { /* Q5_0, Q5_1 */
        const int ho = type == OKV_QB_Q5_0 ? 2 : 4;
        __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + ho + 4)));
        __m256i c = _mm256_and_si256(_mm256_srlv_epi16(v, sh), m4);
        return _mm256_mask_add_epi8(c, (__mmask32)u32_at(b + ho), c, _mm256_set1_epi8(0x10));
    }
    }
}

/* Q8_0: vpdpbusd, 8 int32 lanes summing to the block's sum (q + 128) x. */
INLINE_TGT __m256i dp32(int type, const uint8_t *w, const okv_qb_x32 *x) {
    return okv_dpbusd256(_mm256_setzero_si256(), codes32(type, w), _mm256_loadu_si256((const __m256i *)x->q));
}
/* Q4 / Q5: vpmaddubsw, 16 int16 lanes (each at most 2 * 31 * 127), reduced
 * two levels in int16 (4 lanes: at most 31496) before vpmaddwd by ones:
 * measured faster here than vpdpbusd and an all-int32 transposition. */
INLINE_TGT __m256i mb32(int type, const uint8_t *w, const okv_qb_x32 *x) {
    return _mm256_maddubs_epi16(codes32(type, w), _mm256_loadu_si256((const __m256i *)x->q));
}
INLINE_TGT __m256i pair_add16(__m256i a, __m256i b) {
    return _mm256_add_epi16(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
INLINE_TGT __m256i quad_add16(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b)),
                             _mm256_set1_epi16(1));
}

/* Per-block scales of 8 blocks, assembled in GPRs and moved as 64-bit
 * words (as qmatmul/block_avx2.c; 8-lane gathers take 11-13 cycles on Zen 4,
 * vpermt2w over 128-byte windows measured slower too). */
INLINE_TGT uint64_t u16x4(const uint8_t *w, int bytes) {
    return (uint64_t)u16_at(w) | (uint64_t)u16_at(w + bytes) << 16 | (uint64_t)u16_at(w + 2 * bytes) << 32 |
           (uint64_t)u16_at(w + 3 * bytes) << 48;
}
INLINE_TGT uint64_t u32x2(const uint8_t *a, const uint8_t *b) { return (uint64_t)u32_at(a) | (uint64_t)u32_at(b) << 32; }
INLINE_TGT __m128i u64x2(uint64_t a, uint64_t b) {
    return _mm_unpacklo_epi64(_mm_cvtsi64_si128((long long)a), _mm_cvtsi64_si128((long long)b));
}
/* d of 8 blocks; with m (asym types: the f16 pair at each block's head). */
INLINE_TGT __m256 w_d8(const uint8_t *w, int bytes) {
    return _mm256_cvtph_ps(u64x2(u16x4(w, bytes), u16x4(w + 4 * bytes, bytes)));
}
INLINE_TGT void w_dm8(const uint8_t *w, int bytes, __m256 *d, __m256 *m) {
    __m128i lo = u64x2(u32x2(w, w + bytes), u32x2(w + 2 * bytes, w + 3 * bytes));
    __m128i hi = u64x2(u32x2(w + 4 * bytes, w + 5 * bytes), u32x2(w + 6 * bytes, w + 7 * bytes));
    __m256i v = _mm256_permutexvar_epi16(_mm256_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15),
                                         _mm256_set_m128i(hi, lo));
    *d = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
    *m = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
}
/* dx and qsum of 8 activation blocks (the 8-byte head of each). */
INLINE_TGT __m128i two_heads(const void *a, const void *b) {
    __m128 v = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)a));
    return _mm_castps_si128(_mm_loadh_pi(v, (const __m64 *)b));
}
INLINE_TGT void x_dq8(const okv_qb_x32 *x, __m256 *dx, __m256i *qsum) {
    __m256 a = _mm256_castsi256_ps(_mm256_set_m128i(two_heads(&x[4], &x[5]), two_heads(&x[0], &x[1])));
    __m256 b = _mm256_castsi256_ps(_mm256_set_m128i(two_heads(&x[6], &x[7]), two_heads(&x[2], &x[3])));
    *dx = _mm256_shuffle_ps(a, b, 0x88);
    *qsum = _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xdd));
}

/* 8 blocks per pass, lane i = block i: the plain terms (d dx) isum
 * [+ m (dx qsum)], no FMA; the nb % 8 rest block by block. */
INLINE_TGT float dot32(int type, const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x32 *x = xq;
    const int B = B32_BYTES(type), off = B32_OFF(type);
    const bool asym = B32_ASYM(type);
    __m256 acc = _mm256_setzero_ps();
    int blk = 0;
    for (; blk + 8 <= nb; blk += 8, w += 8 * B) {
        __m256i is;
        if (type == OKV_QB_Q8_0) {
            __m256i s[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) s[i] = dp32(type, w + i * B, x + blk + i);
            is = lanes_add(hsum_quad(hsum_pair(s[0], s[1]), hsum_pair(s[2], s[3])),
                           hsum_quad(hsum_pair(s[4], s[5]), hsum_pair(s[6], s[7])));
        } else {
            __m256i m[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) m[i] = mb32(type, w + i * B, x + blk + i);
            is = lanes_add(quad_add16(pair_add16(m[0], m[1]), pair_add16(m[2], m[3])),
                           quad_add16(pair_add16(m[4], m[5]), pair_add16(m[6], m[7])));
        }
        __m256 dw, mw = _mm256_setzero_ps(), dx;
        __m256i qs;
        if (asym) w_dm8(w, B, &dw, &mw);
        else dw = w_d8(w, B);
        x_dq8(x + blk, &dx, &qs);
        if (off) is = _mm256_sub_epi32(is, _mm256_slli_epi32(qs, off == 8 ? 3 : off == 16 ? 4 : 7));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(is)));
        if (asym) acc = _mm256_add_ps(acc, _mm256_mul_ps(mw, _mm256_mul_ps(dx, _mm256_cvtepi32_ps(qs))));
    }
    float sum = hsum256_ps(acc);
    for (; blk < nb; blk++, w += B) {
        int32_t is = hsum256_epi32(dp32(type, w, x + blk)) - off * x[blk].qsum;
        sum += (f16_at(w) * x[blk].d) * (float)is;
        if (asym) sum += f16_at(w + 2) * (x[blk].d * (float)x[blk].qsum);
    }
    return sum;
}

static TGT float dot_q4_0(const uint8_t *w, const void *xq, int nb) { return dot32(OKV_QB_Q4_0, w, xq, nb); }
static TGT float dot_q4_1(const uint8_t *w, const void *xq, int nb) { return dot32(OKV_QB_Q4_1, w, xq, nb); }
static TGT float dot_q5_0(const uint8_t *w, const void *xq, int nb) { return dot32(OKV_QB_Q5_0, w, xq, nb); }
static TGT float dot_q5_1(const uint8_t *w, const void *xq, int nb) { return dot32(OKV_QB_Q5_1, w, xq, nb); }
static TGT float dot_q8_0(const uint8_t *w, const void *xq, int nb) { return dot32(OKV_QB_Q8_0, w, xq, nb); }

/* ---- K-quants ------------------------------------------------------------------------- */

/* 8 vectors' lane sums: lane i = v[i]'s. */
INLINE_TGT __m256i reduce8(const __m256i v[8]) {
    return lanes_add(hsum_quad(hsum_pair(v[0], v[1]), hsum_pair(v[2], v[3])),
                     hsum_quad(hsum_pair(v[4], v[5]), hsum_pair(v[6], v[7])));
}

/* The scale of group g as the int16 pair (sc, sc) in every dword, from 8
 * int16 scales repeated in both 128-bit lanes. */
INLINE_TGT __m256i bcast_w(__m256i s16, int g) { return _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0100 + 0x0202 * g))); }

/* Q4_K / Q5_K's 8 6-bit scales and mins (llama.cpp's unpacking): bytes of sc, mn. */
static inline void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t u0 = u32_at(s), u1 = u32_at(s + 4), u2 = u32_at(s + 8);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t s_lo = u0 & k1, s_hi = (u2 & k2) | (((u0 >> 6) & k3) << 4);
    uint32_t m_lo = u1 & k1, m_hi = ((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4);
    *sc = (uint64_t)s_lo | (uint64_t)s_hi << 32;
    *mn = (uint64_t)m_lo | (uint64_t)m_hi << 32;
}

/* Q3_K's 16 6-bit scales (llama.cpp's unpacking) as bytes sc + 32. */
static inline void k3_scales(const uint8_t *s, uint32_t a[4]) {
    uint32_t u0 = u32_at(s), u1 = u32_at(s + 4), u2 = u32_at(s + 8);
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f;
    a[0] = (u0 & k2) | ((u2 & k1) << 4);
    a[1] = (u1 & k2) | (((u2 >> 2) & k1) << 4);
    a[2] = ((u0 >> 4) & k2) | (((u2 >> 4) & k1) << 4);
    a[3] = ((u1 >> 4) & k2) | (((u2 >> 6) & k1) << 4);
}

#define KQ_BYTES(T)                                                                                               \
    ((T) == OKV_QB_Q2_K ? 84 : (T) == OKV_QB_Q3_K ? 110 : (T) == OKV_QB_Q4_K ? 144 : (T) == OKV_QB_Q5_K ? 176 : 210)
#define KQ_D(T) ((T) == OKV_QB_Q2_K ? 80 : (T) == OKV_QB_Q3_K ? 108 : (T) == OKV_QB_Q6_K ? 208 : 0) /* f16 d at */
#define KQ_MINS(T) ((T) == OKV_QB_Q2_K || (T) == OKV_QB_Q4_K || (T) == OKV_QB_Q5_K)            /* dmin right after */

/* One super-block's integer sums as 8 lanes each: the returned ones sum
 * to acc = sum_g sc_g sum q x, *M's to macc = sum_g mn_g bsum_g (0 for
 * the types without mins).
 *
 * Q4_K / Q5_K: 8 groups of 32. Chunk c's 32 code bytes hold group 2c (low
 * nibbles) and 2c + 1 (high); Q5_K's 5th bits are bits 2c, 2c + 1 of qh[l].
 * Q2_K, Q3_K, Q6_K: 16 groups of 16, codes in 8 vectors of 32 (vector j:
 * elements 32 j ..) holding groups 2j (low 128-bit lane) and 2j + 1 (high),
 * so each vector's scales are sc_2j in its low lane, sc_2j+1 in the high
 * one: one vpshufb of the scales ordered even | odd. Signed codes go in
 * biased (Q3_K q + 4, Q6_K q + 32) and the bias comes back as bias x
 * sum_g sc_g bsum_g.
 * Products: vpmaddubsw (u8 codes x s8 x, pairs exact in int16: at most
 * 2 * 63 * 127), then vpmaddwd / vpdpwssd by the group's scale into 4
 * independent int32 accumulators (one accumulator chained the super-block's
 * products: the loop was latency-bound). */
INLINE_TGT __m256i sb_ints(int type, const uint8_t *w, const okv_qb_x256 *x, __m256i *M) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3), m30 = _mm256_set1_epi8(0x30);
    const __m256i b5 = _mm256_set1_epi8(0x10);
    const int8_t *xq8 = x->q;
    const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
    __m256i Ac[4];
    if (type == OKV_QB_Q4_K || type == OKV_QB_Q5_K) {
        const bool five = type == OKV_QB_Q5_K;
        uint64_t sc, mn;
        k4_scales(w + 4, &sc, &mn);
        const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        const uint8_t *qs = w + (five ? 48 : 16);
        __m256i H = _mm256_setzero_si256();
        if (five) H = _mm256_loadu_si256((const __m256i *)(w + 16));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (five) {
                lo = _mm256_mask_add_epi8(lo, _mm256_test_epi8_mask(H, _mm256_set1_epi8((char)(1 << (2 * c)))), lo, b5);
                hi = _mm256_mask_add_epi8(hi, _mm256_test_epi8_mask(H, _mm256_set1_epi8((char)(2 << (2 * c)))), hi, b5);
            }
            __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(xq8 + 64 * c)));
            __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq8 + 64 * c + 32)));
            Ac[c] = okv_dpwssd256(_mm256_madd_epi16(p0, bcast_w(s16, 2 * c)), p1, bcast_w(s16, 2 * c + 1));
        }
        /* mins: sum_g mn_g (bsum_2g + bsum_2g+1), mn as int16 pairs */
        __m128i mb = _mm_cvtsi64_si128((long long)mn);
        *M = _mm256_madd_epi16(bs, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb)));
    } else {
        __m256i sc16, mn16 = _mm256_setzero_si256();
        if (type == OKV_QB_Q2_K) {
            __m256i b16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)w));
            sc16 = _mm256_and_si256(b16, _mm256_set1_epi16(15));
            mn16 = _mm256_srli_epi16(b16, 4);
        } else if (type == OKV_QB_Q3_K) {
            uint32_t a[4];
            k3_scales(w + 96, a);
            sc16 = _mm256_cvtepi8_epi16(
                _mm_sub_epi8(_mm_setr_epi32((int)a[0], (int)a[1], (int)a[2], (int)a[3]), _mm_set1_epi8(32)));
        } else {
            sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 192)));
        }
        const __m256i so = _mm256_permutexvar_epi16(
            _mm256_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15), sc16); /* even | odd */
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m256i q;
            if (type == OKV_QB_Q2_K) { /* j = 4 n + jj: (qs[32 n + l] >> 2 jj) & 3 */
                __m256i v = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * (j / 4)));
                q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * (j % 4)), m3);
            } else if (type == OKV_QB_Q3_K) { /* the same low bits, + 4 where hmask[l] bit j is set */
                __m256i v = _mm256_loadu_si256((const __m256i *)(w + 32 + 32 * (j / 4)));
                q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * (j % 4)), m3);
                __mmask32 k = _mm256_test_epi8_mask(_mm256_loadu_si256((const __m256i *)w), _mm256_set1_epi8((char)(1 << j)));
                q = _mm256_mask_add_epi8(q, k, q, _mm256_set1_epi8(4));
            } else { /* Q6_K, j = 4 h + k: nibbles of ql[64 h + 32 (k & 1) + l], bits 2k of qh[32 h + l] */
                const int h = j / 4, k = j % 4;
                __m256i v = _mm256_loadu_si256((const __m256i *)(w + 64 * h + 32 * (k & 1)));
                __m256i hb = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * h));
                __m256i lo = k < 2 ? _mm256_and_si256(v, m4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                hb = k == 0 ? _mm256_slli_epi16(hb, 4) : k == 1 ? _mm256_slli_epi16(hb, 2) : k == 2 ? hb : _mm256_srli_epi16(hb, 2);
                q = _mm256_ternarylogic_epi32(lo, hb, m30, 0xf8); /* lo | (hb & 0x30) */
            }
            __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(xq8 + 32 * j)));
            __m256i S = bcast_w(so, j);
            Ac[j % 4] = j < 4 ? _mm256_madd_epi16(p, S) : okv_dpwssd256(Ac[j % 4], p, S);
        }
        *M = _mm256_madd_epi16(bs, type == OKV_QB_Q2_K ? mn16 : sc16);
    }
    __m256i A = _mm256_add_epi32(_mm256_add_epi32(Ac[0], Ac[1]), _mm256_add_epi32(Ac[2], Ac[3]));
    if (type == OKV_QB_Q3_K || type == OKV_QB_Q6_K) { /* sum sc_g (dp_g - bias bsum_g) */
        A = _mm256_sub_epi32(A, _mm256_slli_epi32(*M, type == OKV_QB_Q3_K ? 2 : 5));
        *M = _mm256_setzero_si256();
    }
    return A;
}

/* 8 super-blocks per pass, lane i = super-block i (their lane sums by
 * one transposition, then the float terms 8 at a time: per super-block
 * the horizontal sums and scalar tail were a serial chain that kept few
 * super-blocks in flight): (d dx) acc and - (dmin dx) macc, as plain. */
INLINE_TGT float dotk(int type, const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x256 *x = xq;
    const int B = KQ_BYTES(type), od = KQ_D(type);
    const bool mins = KQ_MINS(type);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    int blk = 0;
    for (; blk + 8 <= nb; blk += 8, w += 8 * B) {
        __m256i A[8], M[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) A[i] = sb_ints(type, w + i * B, x + blk + i, &M[i]);
        const okv_qb_x256 *xb = x + blk;
        __m256 dx = _mm256_castsi256_ps(_mm256_set_m128i(
            u64x2(u32x2((const uint8_t *)&xb[4].d, (const uint8_t *)&xb[5].d), u32x2((const uint8_t *)&xb[6].d, (const uint8_t *)&xb[7].d)),
            u64x2(u32x2((const uint8_t *)&xb[0].d, (const uint8_t *)&xb[1].d), u32x2((const uint8_t *)&xb[2].d, (const uint8_t *)&xb[3].d))));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(w_d8(w + od, B), dx), _mm256_cvtepi32_ps(reduce8(A))));
        if (mins)
            accm = _mm256_add_ps(accm, _mm256_mul_ps(_mm256_mul_ps(w_d8(w + od + 2, B), dx), _mm256_cvtepi32_ps(reduce8(M))));
    }
    float sum = hsum256_ps(acc) - hsum256_ps(accm);
    for (; blk < nb; blk++, w += B) {
        __m256i M;
        int32_t a = hsum256_epi32(sb_ints(type, w, x + blk, &M));
        sum += (f16_at(w + od) * x[blk].d) * (float)a;
        if (mins) sum -= (f16_at(w + od + 2) * x[blk].d) * (float)hsum256_epi32(M);
    }
    return sum;
}

static TGT float dot_q2_k(const uint8_t *w, const void *xq, int nb) { return dotk(OKV_QB_Q2_K, w, xq, nb); }
static TGT float dot_q3_k(const uint8_t *w, const void *xq, int nb) { return dotk(OKV_QB_Q3_K, w, xq, nb); }
static TGT float dot_q4_k(const uint8_t *w, const void *xq, int nb) { return dotk(OKV_QB_Q4_K, w, xq, nb); }
static TGT float dot_q5_k(const uint8_t *w, const void *xq, int nb) { return dotk(OKV_QB_Q5_K, w, xq, nb); }
static TGT float dot_q6_k(const uint8_t *w, const void *xq, int nb) { return dotk(OKV_QB_Q6_K, w, xq, nb); }

static const okv_qb_isa isa_avx512 = {
    .name = "avx512vnni",
    .quant32 = quant32_avx512,
    .quant256 = quant256_avx512,
    .dot = {[OKV_QB_Q4_0] = dot_q4_0, [OKV_QB_Q4_1] = dot_q4_1, [OKV_QB_Q5_0] = dot_q5_0, [OKV_QB_Q5_1] = dot_q5_1,
            [OKV_QB_Q8_0] = dot_q8_0, [OKV_QB_Q2_K] = dot_q2_k, [OKV_QB_Q3_K] = dot_q3_k, [OKV_QB_Q4_K] = dot_q4_k,
            [OKV_QB_Q5_K] = dot_q5_k, [OKV_QB_Q6_K] = dot_q6_k},
    .dot8 = {[OKV_QB_Q4_0] = okv_qb_dot8_q4_0_avx512, [OKV_QB_Q8_0] = okv_qb_dot8_q8_0_avx512,
             [OKV_QB_Q4_K] = okv_qb_dot8_q4_k_avx512, [OKV_QB_Q5_K] = okv_qb_dot8_q5_k_avx512},
};

const okv_qb_isa *okv_qb_isa_avx512(void) { return okv_qmm_have_avx512vnni() ? &isa_avx512 : NULL; }
