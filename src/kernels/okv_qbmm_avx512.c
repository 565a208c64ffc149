/* okv_qbmm_avx512.c — the GGUF block dots and activation quantizers
 * (okv_qbmm.c's algorithm and plain model) on AVX-512 F/BW/VL + VNNI.
 *
 * vpdpbusd (u8 W codes x s8 activations, 4 products into each int32 lane)
 * replaces AVX2's vpmaddubsw + vpmaddwd pair, and the activation
 * quantizers run 16 lanes. Codes stay unsigned; a format's centring comes
 * back as offset x (the activation block's qsum / bsums), so the integers
 * are the plain model's exactly and the per-block float terms are computed
 * as plain computes them; only the order of adding blocks differs. Q2_K and
 * Q3_K have no dot here: the driver takes AVX2's.
 *
 * Zen 4, 2 threads, W streamed from DRAM (bench_kernels qbgemv, 8192x2048):
 * Q8_0 47.8 GB/s against AVX2's 26.6 (76% of the read probe); Q4_K 29.6
 * against 24.2. */
#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"

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

/* f16 -> f32 is exact: F16C gives okv_f16_to_f32's values inline. */
INLINE_TGT float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* acc + u8 c . s8 x per 32-bit lane, in place (as okv_qmatmul_avx512.c:
 * GCC 12 copies accumulators around the intrinsic). */
INLINE_TGT __m256i dpbusd256(__m256i acc, __m256i c, __m256i x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(c), "v"(x));
    return acc;
}
INLINE_TGT __m512i dpbusd512(__m512i acc, __m512i c, __m512i x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(c), "v"(x));
    return acc;
}
/* acc + a.lo16 b.lo16 + a.hi16 b.hi16 per 32-bit lane */
INLINE_TGT __m512i dpwssd512(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

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

/* ---- 32-element blocks ---------------------------------------------------------------- */

/* Bytes per block and the code offset (q_w = code - off: dot = dp - off * qsum). */
#define B32_BYTES(T) ((T) == OKV_QB_Q4_0 ? 18 : (T) == OKV_QB_Q4_1 ? 20 : (T) == OKV_QB_Q5_0 ? 22 : (T) == OKV_QB_Q5_1 ? 24 : 34)
#define B32_OFF(T) ((T) == OKV_QB_Q4_0 ? 8 : (T) == OKV_QB_Q5_0 ? 16 : (T) == OKV_QB_Q8_0 ? 128 : 0)
#define B32_ASYM(T) ((T) == OKV_QB_Q4_1 || (T) == OKV_QB_Q5_1)

/* A block's 32 codes as unsigned bytes in element order. */
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

INLINE_TGT __m256i dp32(int type, const uint8_t *w, const okv_qb_x32 *x) {
    return dpbusd256(_mm256_setzero_si256(), codes32(type, w), _mm256_loadu_si256((const __m256i *)x->q));
}

/* Block sums of 8 vectors of 8 lanes, in block order (unpack + add: this
 * Zen 4 runs vphaddd at one per 2.2 cycles, unpacks and adds 3-4 per cycle). */
INLINE_TGT __m256i hsum_pair(__m256i a, __m256i b) { /* per 128-bit lane: a0+a2 b0+b2 a1+a3 b1+b3 */
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}
INLINE_TGT __m256i hsum_quad(__m256i ab, __m256i cd) { /* per 128-bit lane: a b c d */
    return _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
}
INLINE_TGT __m256i hsum8x8(const __m256i s[8]) {
    __m256i u0 = hsum_quad(hsum_pair(s[0], s[1]), hsum_pair(s[2], s[3]));
    __m256i u1 = hsum_quad(hsum_pair(s[4], s[5]), hsum_pair(s[6], s[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* The blocks' f16 scales without gathers (8 gathered lanes take 11-13
 * cycles on Zen 4): vpermt2w picks the 8 d (and m) words out of two
 * 128-byte windows of the 8 blocks, [0, 128) and [o2, o2 + 128), o2 = the
 * group's end - 128 (at most 128: Q8_0's 272-byte group). Lane l < 8: d of
 * block l, 8 <= l < 16: m. */
#define WB(B, l) (((l) & 7) * (B) + 2 * ((l) >> 3))
#define WO2(B) (8 * (B) - 128 < 128 ? 8 * (B) - 128 : 128)
#define WUSE(B, a, l) ((l) < ((a) ? 16 : 8))
#define WI1(B, a, l) (WUSE(B, a, l) && WB(B, l) + 2 <= 128 ? WB(B, l) / 2 : 0)
#define WI2(B, a, l) (WUSE(B, a, l) && WB(B, l) + 2 > 128 ? (WB(B, l) - WO2(B)) / 2 : 0)
#define WM(B, a, l) (WUSE(B, a, l) && WB(B, l) + 2 > 128 ? 1u << (l) : 0u)
#define L16(M, B, a)                                                                                              \
    M(B, a, 0), M(B, a, 1), M(B, a, 2), M(B, a, 3), M(B, a, 4), M(B, a, 5), M(B, a, 6), M(B, a, 7), M(B, a, 8),  \
        M(B, a, 9), M(B, a, 10), M(B, a, 11), M(B, a, 12), M(B, a, 13), M(B, a, 14), M(B, a, 15)
#define MASK16(B, a)                                                                                              \
    (WM(B, a, 0) | WM(B, a, 1) | WM(B, a, 2) | WM(B, a, 3) | WM(B, a, 4) | WM(B, a, 5) | WM(B, a, 6) |           \
     WM(B, a, 7) | WM(B, a, 8) | WM(B, a, 9) | WM(B, a, 10) | WM(B, a, 11) | WM(B, a, 12) | WM(B, a, 13) |     \
     WM(B, a, 14) | WM(B, a, 15))
#define WTAB(B, a) {{L16(WI1, B, a)}, {L16(WI2, B, a)}}
static const int16_t w_idx[5][2][32] __attribute__((aligned(64))) = {WTAB(18, 0), WTAB(20, 1), WTAB(22, 0),
                                                                       WTAB(24, 1), WTAB(34, 0)};
static const uint16_t w_mask[5] = {MASK16(18, 0), MASK16(20, 1), MASK16(22, 0), MASK16(24, 1), MASK16(34, 0)};

static inline int slot32(int type) {
    return type == OKV_QB_Q4_0 ? 0 : type == OKV_QB_Q4_1 ? 1 : type == OKV_QB_Q5_0 ? 2 : type == OKV_QB_Q5_1 ? 3 : 4;
}

INLINE_TGT __m512 w_scales8(int type, const uint8_t *w, __m512i i1, __m512i i2) {
    const int B = B32_BYTES(type), o2 = WO2(B);
    const __mmask32 k = w_mask[slot32(type)];
    __m512i r = _mm512_permutex2var_epi16(_mm512_loadu_si512(w), i1, _mm512_loadu_si512(w + 64));
    if (k) r = _mm512_mask_blend_epi16(k, r, _mm512_permutex2var_epi16(_mm512_loadu_si512(w + o2), i2,
                                                                       _mm512_loadu_si512(w + o2 + 64)));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(r));
}

/* dx (lanes 0-7) and qsum (8-15, as int) of 8 activation blocks: dwords
 * 10 i, 10 i + 1 of blocks 0-3 in bytes [0, 128), of 4-7 in [160, 288). */
INLINE_TGT __m512i x_scales8(const okv_qb_x32 *x) {
    const uint8_t *p = (const uint8_t *)x;
    const __m512i idx = _mm512_setr_epi32(0, 10, 20, 30, 0, 10, 20, 30, 1, 11, 21, 31, 1, 11, 21, 31);
    __m512i r1 = _mm512_permutex2var_epi32(_mm512_loadu_si512(p), idx, _mm512_loadu_si512(p + 64));
    __m512i r2 = _mm512_permutex2var_epi32(_mm512_loadu_si512(p + 160), idx, _mm512_loadu_si512(p + 224));
    return _mm512_mask_blend_epi32(0xf0f0, r1, r2);
}

INLINE_TGT float dot32(int type, const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x32 *x = xq;
    const int B = B32_BYTES(type), off = B32_OFF(type);
    const bool asym = B32_ASYM(type);
    const __m512i i1 = _mm512_load_si512(w_idx[slot32(type)][0]), i2 = _mm512_load_si512(w_idx[slot32(type)][1]);
    __m256 acc = _mm256_setzero_ps();
    int blk = 0;
    for (; blk + 8 <= nb; blk += 8, w += 8 * B) {
        __m256i s[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) s[i] = dp32(type, w + i * B, x + blk + i);
        __m256i is = hsum8x8(s);
        __m512 wd = w_scales8(type, w, i1, i2);
        __m512i xs = x_scales8(x + blk);
        __m256 dx = _mm256_castsi256_ps(_mm512_castsi512_si256(xs));
        __m256i qs = _mm512_extracti64x4_epi64(xs, 1);
        if (off) is = _mm256_sub_epi32(is, _mm256_slli_epi32(qs, off == 8 ? 3 : off == 16 ? 4 : 7));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm512_castps512_ps256(wd), dx), _mm256_cvtepi32_ps(is)));
        if (asym) {
            __m256 m = _mm512_extractf32x8_ps(wd, 1);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(m, _mm256_mul_ps(dx, _mm256_cvtepi32_ps(qs))));
        }
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

/* Integer totals of a super-block: a = sum of A's 16 lanes, m = of M's 8. */
INLINE_TGT void hsum_am(__m512i A, __m256i M, int32_t *a, int32_t *m) {
    __m256i a8 = _mm256_add_epi32(_mm512_castsi512_si256(A), _mm512_extracti64x4_epi64(A, 1));
    __m256i h = _mm256_hadd_epi32(a8, M);       /* a01 a23 m01 m23 | a45 a67 m45 m67 */
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_hadd_epi32(s, s);                   /* a m a m */
    *a = _mm_cvtsi128_si32(s);
    *m = _mm_extract_epi32(s, 1);
}

/* Per-lane scale vectors: idx lane l -> scale (l / 8) + 2c (8 groups of 32)
 * or (l / 4) + 4 k (16 groups of 16). */
INLINE_TGT __m512i lane_idx32(int c) {
    return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), _mm512_set1_epi32(2 * c));
}
INLINE_TGT __m512i lane_idx16(int k) {
    return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), _mm512_set1_epi32(4 * k));
}

/* Q4_K / Q5_K's 8 6-bit scales and mins (llama.cpp's unpacking): bytes of sc, mn. */
static inline void k4_scales(const uint8_t *s, uint64_t *sc, uint64_t *mn) {
    uint32_t u0 = u32_at(s), u1 = u32_at(s + 4), u2 = u32_at(s + 8);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t s_lo = u0 & k1, s_hi = (u2 & k2) | (((u0 >> 6) & k3) << 4);
    uint32_t m_lo = u1 & k1, m_hi = ((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4);
    *sc = (uint64_t)s_lo | (uint64_t)s_hi << 32;
    *mn = (uint64_t)m_lo | (uint64_t)m_hi << 32;
}

INLINE_TGT float dot_q45k(bool five, const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x256 *x = xq;
    const int B = five ? 176 : 144;
    const __m512i sh = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll,
                                         0x0004000400040004ll, 0x0004000400040004ll);
    const __m512i m4 = _mm512_set1_epi8(0x0f), b5 = _mm512_set1_epi8(0x10);
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += B) {
        uint64_t sc, mn;
        k4_scales(w + 4, &sc, &mn);
        const __m512i S = _mm512_castsi256_si512(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
        const uint8_t *qs = w + (five ? 48 : 16);
        const int8_t *xq8 = x[blk].q;
        __m512i H = _mm512_setzero_si512();
        if (five) H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 16)));
        __m512i A = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * c)));
            __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, sh), m4);
            if (five) {
                const long long b1 = (long long)(0x0101010101010101ull << (2 * c)),
                                b2 = (long long)(0x0202020202020202ull << (2 * c)); /* unsigned: no signed overflow */
                const __m512i bit = _mm512_setr_epi64(b1, b1, b1, b1, b2, b2, b2, b2);
                q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(H, bit), q, b5);
            }
            __m512i p = dpbusd512(_mm512_setzero_si512(), q, _mm512_loadu_si512(xq8 + 64 * c));
            A = dpwssd512(A, p, _mm512_permutexvar_epi32(lane_idx32(c), S));
        }
        /* mins: sum_g mn_g (bsum_2g + bsum_2g+1), mn as int16 pairs */
        __m128i mb = _mm_cvtsi64_si128((long long)mn);
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));
        __m256i M = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[blk].bsums), mn16);
        int32_t a, m;
        hsum_am(A, M, &a, &m);
        sum += (f16_at(w) * x[blk].d) * (float)a;
        sum -= (f16_at(w + 2) * x[blk].d) * (float)m;
    }
    return sum;
}

static TGT float dot_q4_k(const uint8_t *w, const void *xq, int nb) { return dot_q45k(false, w, xq, nb); }
static TGT float dot_q5_k(const uint8_t *w, const void *xq, int nb) { return dot_q45k(true, w, xq, nb); }

static TGT float dot_q6_k(const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x256 *x = xq;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl = _mm512_setr_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0x0004000400040004ll,
                                          0x0004000400040004ll, 0x0002000200020002ll, 0x0002000200020002ll,
                                          0x0002000200020002ll, 0x0002000200020002ll);
    const __m512i shr = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002ll, 0x0002000200020002ll,
                                          0x0002000200020002ll, 0x0002000200020002ll);
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += 210) {
        /* 16 signed scales as int32 lanes holding (int16 sc, 0) */
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(w + 192));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m512i S = _mm512_cvtepu16_epi32(sc16);
        const int8_t *xq8 = x[blk].q;
        __m512i A = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i L = _mm512_loadu_si512(w + 64 * h);
            __m512i Hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 128 + 32 * h)));
            /* elements 128h + 0..63: low nibbles, qh bits 0-1 / 2-3; + 64..127: high nibbles, bits 4-5 / 6-7 */
            __m512i q01 = _mm512_ternarylogic_epi32(_mm512_and_si512(L, m4), _mm512_sllv_epi16(Hb, shl), m30, 0xf8);
            __m512i q23 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                                    _mm512_srlv_epi16(Hb, shr), m30, 0xf8);
            __m512i p01 = dpbusd512(_mm512_setzero_si512(), q01, _mm512_loadu_si512(xq8 + 128 * h));
            __m512i p23 = dpbusd512(_mm512_setzero_si512(), q23, _mm512_loadu_si512(xq8 + 128 * h + 64));
            A = dpwssd512(A, p01, _mm512_permutexvar_epi32(lane_idx16(2 * h), S));
            A = dpwssd512(A, p23, _mm512_permutexvar_epi32(lane_idx16(2 * h + 1), S));
        }
        /* codes are q + 32: acc = sum sc_g dp_g - 32 sum sc_g bsum_g */
        __m256i M = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[blk].bsums), sc16);
        int32_t a, m;
        hsum_am(A, M, &a, &m);
        sum += (f16_at(w + 208) * x[blk].d) * (float)(a - 32 * m);
    }
    return sum;
}

static const okv_qb_isa isa_avx512 = {
    .name = "avx512vnni",
    .quant32 = quant32_avx512,
    .quant256 = quant256_avx512,
    .dot = {[OKV_QB_Q4_0] = dot_q4_0, [OKV_QB_Q4_1] = dot_q4_1, [OKV_QB_Q5_0] = dot_q5_0, [OKV_QB_Q5_1] = dot_q5_1,
            [OKV_QB_Q8_0] = dot_q8_0, [OKV_QB_Q4_K] = dot_q4_k, [OKV_QB_Q5_K] = dot_q5_k, [OKV_QB_Q6_K] = dot_q6_k},
};

const okv_qb_isa *okv_qb_isa_avx512(void) { return okv_qmm_have_avx512vnni() ? &isa_avx512 : NULL; }
