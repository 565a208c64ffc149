/* qmatmul/block_x8_avx2.c — decode dots of GGUF block matrices in the x8 layout
 * (okv_qblock_x8.c) on AVX2 (Zen 2/3, Haswell on): 32-bit lane r is row
 * r, as qmatmul/block_x8_avx512.c, with vpdpbusd's 4-products spelled
 * vpmaddubsw (u8 codes x s8 x, pairs in int16) + vpmaddwd by ones.
 *
 * 4-bit codes keep their pair sums in int16 across a block's loads (a
 * pair is at most 2 * 15 * 127 = 3810, eight of them 30480 < 2^15; Q5_K's
 * 5-bit ones four at a time), so a
 * 32-byte load costs about what it does with VNNI. Q8_0's signed codes go
 * as |w| against x with w's sign (vpsignb: no offset to take back; a pair
 * at most 2 * 128 * 127, so widened at once). Q6_K stays in file order on
 * AVX2 (no x8 dot here), as on AVX-512.
 *
 * Numbers: the plain dots' integers and float steps in their order, so the
 * outputs equal qmatmul/block_plain.c's plain dots bit for bit (tests/kernels/test_qbmm.c). */
#include <immintrin.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "block_x8.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* int16 pair sums -> int32 lanes */
INLINE_TGT __m256i widen(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

/* Q4_0 (144 bytes a group block; layout in qmatmul/block_x8_avx512.c). */
TGT void okv_qb_dot8_q4_0_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]) {
    const okv_qb_x32 *x = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, wg += 144) {
        __m256i p = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i v = x8_load(wg + 16 + 32 * j);
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(_mm256_and_si256(v, m4), x8_bcast4(x[b].q + 4 * j)));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                         x8_bcast4(x[b].q + 16 + 4 * j)));
        }
        __m256i is = _mm256_sub_epi32(widen(p), _mm256_set1_epi32(8 * x[b].qsum));
        __m256 dd = _mm256_mul_ps(x8_f16(wg), _mm256_set1_ps(x[b].d));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(is)));
    }
    _mm256_storeu_ps(out, acc);
}

/* Q8_0 (272 bytes a group block). */
TGT void okv_qb_dot8_q8_0_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]) {
    const okv_qb_x32 *x = xq;
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, wg += 272) {
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 8; j += 2) {
            __m256i v = x8_load(wg + 16 + 32 * j), w = x8_load(wg + 48 + 32 * j);
            __m256i xv = x8_bcast4(x[b].q + 4 * j), xw = x8_bcast4(x[b].q + 4 * j + 4);
            s0 = _mm256_add_epi32(s0, widen(_mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(xv, v))));
            s1 = _mm256_add_epi32(s1, widen(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xw, w))));
        }
        __m256 dd = _mm256_mul_ps(x8_f16(wg), _mm256_set1_ps(x[b].d));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1))));
    }
    _mm256_storeu_ps(out, acc);
}

/* Q4_K / Q5_K (1152 / 1408 bytes a group block; layout in qmatmul/block_x8.h). */
INLINE_TGT void dot8_k45(const uint8_t *wg, const void *xq, int nb, float out[8], bool five) {
    const okv_qb_x256 *x = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, wg += five ? 1408 : 1152) {
        const okv_qb_x256 *xb = x + b;
        __m256i sc[2], mn[2];
        x8_q4k_scales(wg, sc, mn);
        __m256i isum = _mm256_setzero_si256();
        const uint8_t *qs = wg + (five ? 384 : 128), *qh = wg + 128;
#pragma GCC unroll 2
        for (int c = 0; c < 4; c++) {
            __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256(); /* sub-blocks 2c, 2c + 1 in int16 */
            __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256(); /* and in int32 */
            const int8_t *xq0 = xb->q + 64 * c;
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++) {
                __m256i v = x8_load(qs + 32 * (8 * c + u));
                __m256i vl = _mm256_and_si256(v, m4), vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (five) {
                    __m256i hv = x8_load(qh + 32 * u);
                    vl = _mm256_or_si256(vl, x8_q5k_bit(hv, 2 * c));
                    vh = _mm256_or_si256(vh, x8_q5k_bit(hv, 2 * c + 1));
                }
                p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(vl, x8_bcast4(xq0 + 4 * u)));
                p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(vh, x8_bcast4(xq0 + 32 + 4 * u)));
                if (u == 7 || (five && u == 3)) { /* 5-bit pairs reach 7874: widened every 4 loads */
                    a0 = _mm256_add_epi32(a0, widen(p0));
                    a1 = _mm256_add_epi32(a1, widen(p1));
                    p0 = p1 = _mm256_setzero_si256();
                }
            }
            __m256i sv = sc[c / 2];
            int k = (2 * c) % 4;
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(a0, x8_lane_byte(sv, k)));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(a1, x8_lane_byte(sv, k + 1)));
        }
        __m256i mp[4], xs[4];
        x8_q4k_min_pairs(mn, xb, mp, xs);
        __m256i macc = _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) macc = _mm256_add_epi32(macc, _mm256_madd_epi16(mp[i], xs[i]));
        __m256 dx = _mm256_set1_ps(xb->d), dmin = x8_f16(wg + 16);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(x8_f16(wg), dx), _mm256_cvtepi32_ps(isum)));
        /* the plain dot subtracts only when dmin != 0 or the min sum is */
        __m256 use = _mm256_or_ps(_mm256_cmp_ps(dmin, _mm256_setzero_ps(), _CMP_NEQ_UQ),
                                  _mm256_castsi256_ps(_mm256_xor_si256(_mm256_cmpeq_epi32(macc, _mm256_setzero_si256()),
                                                                       _mm256_set1_epi32(-1))));
        __m256 sub = _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(macc)));
        acc = _mm256_blendv_ps(acc, sub, use);
    }
    _mm256_storeu_ps(out, acc);
}

TGT void okv_qb_dot8_q4_k_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]) { dot8_k45(wg, xq, nb, out, false); }
TGT void okv_qb_dot8_q5_k_avx2(const uint8_t *wg, const void *xq, int nb, float out[8]) { dot8_k45(wg, xq, nb, out, true); }
