/* qmatmul/block_avx2.c — the GGUF block dots and activation quantizers
 * (qmatmul/block_plain.c's algorithm and plain model) on AVX2 + FMA + F16C, no
 * AVX-512, so Zen 3 and older run them as fast as Zen 4.
 *
 * The integer work is vpmaddubsw (u8 W codes x s8 activations, pairs into
 * int16) + vpmaddwd (pairs into int32, by ones or by the sub-block scale),
 * as llama.cpp's ggml-cpu x86 dots do. Codes stay unsigned: a format's
 * centring (Q4_0 q - 8, Q5_0 q - 16, Q3_K q - 4, Q6_K q - 32) comes back
 * as offset x sum of x from the activation block's qsum / bsums, so no
 * vpsign is needed; only Q8_0's signed codes take the sign trick
 * (|w| x sign(x, w)). No int16 step can saturate (largest, Q6_K: 2 * 63 *
 * 127; Q8_0: 2 * 128 * 127 < 32767) and the int32 sums are the plain
 * model's integers exactly.
 *
 * Float terms are the plain dots' per block: 32-element types take 8
 * blocks at a time, their 8 lane vectors summed into one vector of 8 block
 * sums (vphaddd tree), then (dw * dx) * isum [+ m * (dx * qsum)] in 8
 * lanes, so only the order in which blocks are added differs from plain
 * (the 8 lanes, then the tail). K-quants do one super-block per step and
 * add its one or two scalar terms in block order, as plain does (same
 * bits).
 *
 * Zen 4, 2 threads, W streamed from DRAM (bench_kernels qbgemv, 8192x2048):
 * Q8_0 26.6 GB/s, Q4_K 24.2, Q6_K 34.5 (the read probe: 63); compute-bound
 * on this core, where the AVX-512 VNNI dots run instead. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "okv_kernels_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* ---- helpers --------------------------------------------------------------------------- */

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
static inline int64_t i64_at(const void *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

INLINE_TGT float f16_at(const uint8_t *p) { return _cvtsh_ss(u16_at(p)); }

INLINE_TGT float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

INLINE_TGT float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INLINE_TGT int32_t hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* Lane i = the sum of p_i's 8 lanes. */
INLINE_TGT __m256i reduce8(__m256i p0, __m256i p1, __m256i p2, __m256i p3, __m256i p4, __m256i p5, __m256i p6,
                           __m256i p7) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p4, p5), _mm256_hadd_epi32(p6, p7));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* The two sums (a, b) of an 8-lane and a 4-lane int32 vector. */
INLINE_TGT void hsum_pair(__m256i a8, __m128i b4, int32_t *a, int32_t *b) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a8), _mm256_extracti128_si256(a8, 1));
    s = _mm_hadd_epi32(s, b4);
    s = _mm_hadd_epi32(s, s);
    *a = _mm_cvtsi128_si32(s);
    *b = _mm_extract_epi32(s, 1);
}

/* 8 u8 x s8 pairs summed into int32 per lane (vpmaddubsw + vpmaddwd by 1). */
INLINE_TGT __m256i dot_u8(__m256i u, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

/* 32 bits -> 32 bytes, 0xff where the bit is set (byte i <- bit i). */
INLINE_TGT __m256i bits_to_bytes(uint32_t bits) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* Bit b (0..7) of every byte moved to bit `to` (mask afterwards: bits
 * shifted in from the neighbour byte land outside `to`). */
INLINE_TGT __m256i bit_to(__m256i v, int b, int to) {
    if (b < to) return _mm256_slli_epi16(v, to - b);
    if (b > to) return _mm256_srli_epi16(v, b - to);
    return v;
}

/* ---- activation quantizers ------------------------------------------------------------- */

/* 32 floats: abs max and whether any is NaN / inf. */
INLINE_TGT void load32(const float *x, __m256 v[4], float *amax, bool *bad) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 fmax = _mm256_set1_ps(3.4028234664e38f);
    __m256 m = _mm256_setzero_ps(), nf = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        __m256 a = _mm256_and_ps(v[i], absmask);
        nf = _mm256_or_ps(nf, _mm256_cmp_ps(a, fmax, _CMP_NLE_UQ));
        m = _mm256_max_ps(m, a);
    }
    *amax = hmax8(m);
    *bad = _mm256_movemask_ps(nf) != 0;
}

/* round(v * id) as int32 (nearest even, as nearbyintf), and as 32 int8 in order. */
INLINE_TGT __m256i round_pack(const __m256 v[4], __m256 id, __m256i q[4]) {
    for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The plain x_scales: d = max|x| / 127, id = 127 / max|x| (0 for an
 * all-zero block). False where id overflows (max|x| < 127 / FLT_MAX): the
 * plain quantizer's codes are then 0 and its sums wrap to 0, so are ours. */
INLINE_TGT bool scales_of(float amax, float *d, __m256 *id) {
    float i = amax > 0.0f ? 127.0f / amax : 0.0f;
    *d = amax / 127.0f;
    *id = _mm256_set1_ps(i);
    return i <= 3.4028234664e38f;
}

static TGT void quant32_avx2(const float *x, int K, void *xq) {
    okv_qb_x32 *b = xq;
    for (int blk = 0; blk < K / 32; blk++, x += 32) {
        __m256 v[4];
        float amax;
        bool bad;
        load32(x, v, &amax, &bad);
        __m256 id;
        if (bad) b[blk].d = NAN; /* NaN scale, codes and sum 0 */
        if (bad || !scales_of(amax, &b[blk].d, &id)) {
            b[blk].qsum = 0;
            memset(b[blk].q, 0, 32);
            continue;
        }
        __m256i q[4];
        _mm256_storeu_si256((__m256i *)b[blk].q, round_pack(v, id, q));
        b[blk].qsum = hsum8i(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    }
}

static TGT void quant256_avx2(const float *x, int K, void *xq) {
    okv_qb_x256 *b = xq;
    for (int blk = 0; blk < K / 256; blk++, x += 256) {
        __m256 v[4];
        float amax = 0.0f;
        bool bad = false;
        for (int c = 0; c < 8; c++) {
            float a;
            bool nf;
            load32(x + 32 * c, v, &a, &nf);
            if (a > amax) amax = a;
            bad |= nf;
        }
        __m256 id;
        if (bad) b[blk].d = NAN;
        if (bad || !scales_of(amax, &b[blk].d, &id)) {
            memset(b[blk].bsums, 0, sizeof b[blk].bsums);
            memset(b[blk].q, 0, 256);
            continue;
        }
        __m256i g[16]; /* per 16 elements: 8 lanes whose sum is the group's */
        for (int c = 0; c < 8; c++) {
            __m256i q[4];
            for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(x + 32 * c + 8 * i);
            _mm256_storeu_si256((__m256i *)(b[blk].q + 32 * c), round_pack(v, id, q));
            g[2 * c] = _mm256_add_epi32(q[0], q[1]);
            g[2 * c + 1] = _mm256_add_epi32(q[2], q[3]);
        }
        __m256i s0 = reduce8(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
        __m256i s1 = reduce8(g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
        __m256i s = _mm256_permute4x64_epi64(_mm256_packs_epi32(s0, s1), 0xd8); /* |sum| <= 2032 */
        _mm256_storeu_si256((__m256i *)b[blk].bsums, s);
    }
}

/* ---- 32-element blocks ----------------------------------------------------------------- */

/* Bytes per block, offset of the codes, of the 5th bits, whether it has a
 * min m, and the code offset (q = u - off). */
#define Q32_BYTES(t) ((t) == OKV_QB_Q4_0 ? 18 : (t) == OKV_QB_Q4_1 ? 20 : (t) == OKV_QB_Q5_0 ? 22 : (t) == OKV_QB_Q5_1 ? 24 : 34)
#define Q32_ASYM(t) ((t) == OKV_QB_Q4_1 || (t) == OKV_QB_Q5_1)
#define Q32_OFF(t) ((t) == OKV_QB_Q4_0 ? 8 : (t) == OKV_QB_Q5_0 ? 16 : 0)

/* One block's 8 int32 lanes whose sum is sum u x (Q8_0: sum q x). */
INLINE_TGT __m256i block32(int type, const uint8_t *w, const int8_t *xq) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    if (type == OKV_QB_Q8_0) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(w + 2));
        return dot_u8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
    }
    const int qs_at = type == OKV_QB_Q4_0 ? 2 : type == OKV_QB_Q4_1 ? 4 : type == OKV_QB_Q5_0 ? 6 : 8;
    __m128i qs = _mm_loadu_si128((const __m128i *)(w + qs_at));
    __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f));
    if (type == OKV_QB_Q5_0 || type == OKV_QB_Q5_1) {
        __m256i h = bits_to_bytes(u32_at(w + (type == OKV_QB_Q5_0 ? 2 : 4)));
        u = _mm256_or_si256(u, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
    }
    return dot_u8(u, x);
}

/* W's f16 scale (and min) of 8 blocks as f32 lanes. */
INLINE_TGT __m256 w_d8(const uint8_t *w, int bytes) {
    __m128i h = _mm_setr_epi16((short)u16_at(w), (short)u16_at(w + bytes), (short)u16_at(w + 2 * bytes),
                               (short)u16_at(w + 3 * bytes), (short)u16_at(w + 4 * bytes), (short)u16_at(w + 5 * bytes),
                               (short)u16_at(w + 6 * bytes), (short)u16_at(w + 7 * bytes));
    return _mm256_cvtph_ps(h);
}
INLINE_TGT void w_dm8(const uint8_t *w, int bytes, __m256 *d, __m256 *m) {
    __m256i v = _mm256_setr_epi32((int)u32_at(w), (int)u32_at(w + bytes), (int)u32_at(w + 2 * bytes),
                                  (int)u32_at(w + 3 * bytes), (int)u32_at(w + 4 * bytes), (int)u32_at(w + 5 * bytes),
                                  (int)u32_at(w + 6 * bytes), (int)u32_at(w + 7 * bytes));
    /* per 128-bit lane: the 4 d halves, then the 4 m halves */
    v = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9,
                                                12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    v = _mm256_permute4x64_epi64(v, 0xd8);
    *d = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
    *m = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
}

/* dx and qsum of 8 activation blocks ({f32 d, i32 qsum} at the head of each). */
INLINE_TGT void x_dq8(const okv_qb_x32 *x, __m256 *dx, __m256i *qsum) {
    __m256 a = _mm256_castsi256_ps(_mm256_set_epi64x(i64_at(&x[5]), i64_at(&x[4]), i64_at(&x[1]), i64_at(&x[0])));
    __m256 b = _mm256_castsi256_ps(_mm256_set_epi64x(i64_at(&x[7]), i64_at(&x[6]), i64_at(&x[3]), i64_at(&x[2])));
    *dx = _mm256_shuffle_ps(a, b, 0x88);
    *qsum = _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xdd));
}

INLINE_TGT float dot32_avx2(int type, const uint8_t *w, const okv_qb_x32 *x, int nb) {
    const int bytes = Q32_BYTES(type), off = Q32_OFF(type);
    const bool asym = Q32_ASYM(type);
    __m256 acc = _mm256_setzero_ps();
    int blk = 0;
    for (; blk + 8 <= nb; blk += 8, w += 8 * bytes, x += 8) {
        __m256i is = reduce8(block32(type, w, x[0].q), block32(type, w + bytes, x[1].q),
                             block32(type, w + 2 * bytes, x[2].q), block32(type, w + 3 * bytes, x[3].q),
                             block32(type, w + 4 * bytes, x[4].q), block32(type, w + 5 * bytes, x[5].q),
                             block32(type, w + 6 * bytes, x[6].q), block32(type, w + 7 * bytes, x[7].q));
        __m256 dx, dw, mw;
        __m256i qs;
        x_dq8(x, &dx, &qs);
        if (asym) w_dm8(w, bytes, &dw, &mw);
        else dw = w_d8(w, bytes);
        if (off) is = _mm256_sub_epi32(is, _mm256_slli_epi32(qs, off == 8 ? 3 : 4));
        /* the plain terms: (dw * dx) * isum [+ mw * (dx * qsum)], no FMA */
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(is)));
        if (asym) acc = _mm256_add_ps(acc, _mm256_mul_ps(mw, _mm256_mul_ps(dx, _mm256_cvtepi32_ps(qs))));
    }
    float sum = hsum8(acc);
    for (; blk < nb; blk++, w += bytes, x++) {
        int32_t isum = hsum8i(block32(type, w, x->q)) - off * x->qsum;
        sum += (f16_at(w) * x->d) * (float)isum;
        if (asym) sum += f16_at(w + 2) * (x->d * (float)x->qsum);
    }
    return sum;
}

static TGT float dot_q4_0(const uint8_t *w, const void *xq, int nb) { return dot32_avx2(OKV_QB_Q4_0, w, xq, nb); }
static TGT float dot_q4_1(const uint8_t *w, const void *xq, int nb) { return dot32_avx2(OKV_QB_Q4_1, w, xq, nb); }
static TGT float dot_q5_0(const uint8_t *w, const void *xq, int nb) { return dot32_avx2(OKV_QB_Q5_0, w, xq, nb); }
static TGT float dot_q5_1(const uint8_t *w, const void *xq, int nb) { return dot32_avx2(OKV_QB_Q5_1, w, xq, nb); }
static TGT float dot_q8_0(const uint8_t *w, const void *xq, int nb) { return dot32_avx2(OKV_QB_Q8_0, w, xq, nb); }

/* ---- K-quants -------------------------------------------------------------------------- */

/* Each adds the super-block's terms to sum in block order, as plain:
 * sum += (d * dx) * acc; sum -= (dmin * dx) * macc (types with mins). */

/* int16 lanes 0..7 = s[g], 8..15 = s[g + 1] of 16 int8 scales s. */
INLINE_TGT __m256i pair_scales(__m128i s, int g) {
    __m128i sel = _mm_set_epi64x(0x0101010101010101ll * (g + 1), 0x0101010101010101ll * g);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s, sel));
}

/* pshufb selector broadcasting int16 lane j (bytes 2j, 2j + 1) */
#define SEL16(j) _mm256_set1_epi16((short)(0x0202 * (j) + 0x0100))

/* Q4_K / Q5_K's 8 scales then 8 mins as 16 bytes (llama.cpp's utmp shuffle). */
INLINE_TGT __m128i k4_scales_mins(const uint8_t *s) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t u0 = u32_at(s), u1 = u32_at(s + 4), u2 = u32_at(s + 8);
    uint32_t sc_lo = u0 & k1, sc_hi = (u2 & k2) | (((u0 >> 6) & k3) << 4);
    uint32_t mn_lo = u1 & k1, mn_hi = ((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4);
    return _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)mn_lo, (int)mn_hi);
}

INLINE_TGT float dot_k45(bool five, const uint8_t *w, const okv_qb_x256 *x, int nb) {
    const int bytes = five ? 176 : 144;
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += bytes, x++) {
        const float d = f16_at(w), dmin = f16_at(w + 2);
        __m256i sm = _mm256_cvtepu8_epi16(k4_scales_mins(w + 4)); /* int16: sc 0..7, mn 0..7 */
        __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)x->bsums),
                                    _mm_loadu_si128((const __m128i *)(x->bsums + 8))); /* per 32 */
        __m128i mprod = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), bs);
        __m256i sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        const uint8_t *qs = w + (five ? 48 : 16);
        __m256i hb = five ? _mm256_loadu_si256((const __m256i *)(w + 16)) : _mm256_setzero_si256();
        __m256i acc = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(bit_to(hb, 2 * c, 4), b4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(bit_to(hb, 2 * c + 1, 4), b4));
            }
            __m256i s_lo = _mm256_shuffle_epi8(sc, SEL16(2 * c)), s_hi = _mm256_shuffle_epi8(sc, SEL16(2 * c + 1));
            __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(x->q + 64 * c)));
            __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x->q + 64 * c + 32)));
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(s_lo, p_lo), _mm256_madd_epi16(s_hi, p_hi)));
        }
        int32_t ia, im;
        hsum_pair(acc, mprod, &ia, &im);
        sum += (d * x->d) * (float)ia;
        sum -= (dmin * x->d) * (float)im;
    }
    return sum;
}

static TGT float dot_q4_k(const uint8_t *w, const void *xq, int nb) { return dot_k45(false, w, xq, nb); }
static TGT float dot_q5_k(const uint8_t *w, const void *xq, int nb) { return dot_k45(true, w, xq, nb); }

/* Q6_K: u = q + 32 in 0..63; acc = sum_g sc_g (sum u x - 32 bsum_g). */
static TGT float dot_q6_k(const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x256 *x = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += 210, x++) {
        const float d = f16_at(w + 208);
        __m128i sc8 = _mm_loadu_si128((const __m128i *)(w + 192));
        __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)x->bsums));
        __m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        #pragma GCC unroll 4
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qh = w + 128 + 32 * h;
            const int8_t *xh = x->q + 128 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hv = _mm256_loadu_si256((const __m256i *)qh);
            __m256i u[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hv, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30)),
            };
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i p = _mm256_maddubs_epi16(u[k], _mm256_loadu_si256((const __m256i *)(xh + 32 * k)));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_scales(sc8, 8 * h + 2 * k), p));
            }
        }
        sum += (d * x->d) * (float)hsum8i(acc);
    }
    return sum;
}

/* Q3_K: u = q + 4 in 0..7 (2 low bits, hmask bit as 4); 6-bit signed scales. */
static TGT float dot_q3_k(const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x256 *x = xq;
    const __m256i m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f;
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += 110, x++) {
        const float d = f16_at(w + 108);
        const uint8_t *s = w + 96;
        uint32_t a0 = u32_at(s), a1 = u32_at(s + 4), a2 = u32_at(s + 8);
        __m128i sc8 = _mm_setr_epi32((int)((a0 & k2) | ((a2 & k1) << 4)), (int)((a1 & k2) | (((a2 >> 2) & k1) << 4)),
                                     (int)(((a0 >> 4) & k2) | (((a2 >> 4) & k1) << 4)),
                                     (int)(((a1 >> 4) & k2) | (((a2 >> 6) & k1) << 4)));
        sc8 = _mm_sub_epi8(sc8, _mm_set1_epi8(32));
        __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)x->bsums));
        __m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 2));
        __m256i hm = _mm256_loadu_si256((const __m256i *)w);
        #pragma GCC unroll 4
        for (int n = 0; n < 2; n++) {
            __m256i qv = _mm256_loadu_si256((const __m256i *)(w + 32 + 32 * n));
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256i u = _mm256_and_si256(j ? _mm256_srli_epi16(qv, 2 * j) : qv, m3);
                u = _mm256_or_si256(u, _mm256_and_si256(bit_to(hm, 4 * n + j, 2), b2));
                __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(x->q + 128 * n + 32 * j)));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_scales(sc8, 8 * n + 2 * j), p));
            }
        }
        sum += (d * x->d) * (float)hsum8i(acc);
    }
    return sum;
}

/* Q2_K: u in 0..3, 4-bit scales and mins per 16. */
static TGT float dot_q2_k(const uint8_t *w, const void *xq, int nb) {
    const okv_qb_x256 *x = xq;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sum = 0.0f;
    for (int blk = 0; blk < nb; blk++, w += 84, x++) {
        const float d = f16_at(w + 80), dmin = f16_at(w + 82);
        __m128i s = _mm_loadu_si128((const __m128i *)w);
        __m128i sc8 = _mm_and_si128(s, _mm_set1_epi8(0x0f)), mn8 = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f));
        __m256i mprod = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mn8), _mm256_loadu_si256((const __m256i *)x->bsums));
        __m256i acc = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int n = 0; n < 2; n++) {
            __m256i qv = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * n));
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256i u = _mm256_and_si256(j ? _mm256_srli_epi16(qv, 2 * j) : qv, m3);
                __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(x->q + 128 * n + 32 * j)));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pair_scales(sc8, 8 * n + 2 * j), p));
            }
        }
        int32_t ia, im;
        hsum_pair(acc, _mm_add_epi32(_mm256_castsi256_si128(mprod), _mm256_extracti128_si256(mprod, 1)), &ia, &im);
        sum += (d * x->d) * (float)ia;
        sum -= (dmin * x->d) * (float)im;
    }
    return sum;
}

/* ---- the ISA --------------------------------------------------------------------------- */

static const okv_qb_isa isa_avx2 = {
    .name = "avx2",
    .quant32 = quant32_avx2,
    .quant256 = quant256_avx2,
    .dot = {[OKV_QB_Q4_0] = dot_q4_0, [OKV_QB_Q4_1] = dot_q4_1, [OKV_QB_Q5_0] = dot_q5_0, [OKV_QB_Q5_1] = dot_q5_1,
            [OKV_QB_Q8_0] = dot_q8_0, [OKV_QB_Q2_K] = dot_q2_k, [OKV_QB_Q3_K] = dot_q3_k, [OKV_QB_Q4_K] = dot_q4_k,
            [OKV_QB_Q5_K] = dot_q5_k, [OKV_QB_Q6_K] = dot_q6_k},
    .dot8 = {[OKV_QB_Q4_0] = okv_qb_dot8_q4_0_avx2, [OKV_QB_Q8_0] = okv_qb_dot8_q8_0_avx2,
             [OKV_QB_Q4_K] = okv_qb_dot8_q4_k_avx2, [OKV_QB_Q5_K] = okv_qb_dot8_q5_k_avx2},
};

const okv_qb_isa *okv_qb_isa_avx2(void) { return okv_qmm_have_avx2() ? &isa_avx2 : NULL; }
