/* qmatmul/block_x8_avx512.c — decode dots of GGUF block matrices in the x8
 * layout (okv_qblock_x8.c: 8 rows interleaved 4 bytes at a time) on
 * AVX-512 VL + VNNI, 256-bit vectors: 32-bit lane r is row r.
 *
 * Per 32-byte load: 4 codes of each row (8 for nibble types); x's matching
 * 4 bytes are broadcast and vpdpbusd adds the 8 rows' 4-products into
 * their lanes. No horizontal sums, and the 8 rows' f16 scales are one
 * load, so a Q4_0 block of 8 rows costs ~40 vector ops where the row
 * layout (qmatmul/block_avx512.c) spent ~100: one Zen 4 core consumes 41 GB/s
 * of Q4_0 from L2 against 21 (bench_kernels qbroof), so two cores no
 * longer hold decode below the memory wall. Q4_0, Q8_0, Q4_K and Q5_K
 * have x8 dots; Q6_K stays in file order (an x8 Q6_K dot streamed from DRAM was
 * no faster: docs/perf).
 *
 * Numbers: each lane does what qmatmul/block_plain.c's plain dot does for its row,
 * the same integers (exact in int32) and the same float operations in the
 * same block order, without FMA (C11 mode: no contraction), so the outputs
 * equal the plain dots bit for bit (tests/kernels/test_qbmm.c). Codes are
 * offset to unsigned for vpdpbusd (Q4_0: c = q + 8, Q8_0: q + 128) and the
 * offset taken back with x's sums. */
#include <immintrin.h>
#include <string.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"
#include "block_x8.h"
#include "simd/avx512.h"

#define TGT_S "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
#define INLINE_TGT static inline __attribute__((always_inline, target(TGT_S)))
#define TGT __attribute__((target(TGT_S)))

/* ---- 32-element types: group block = d[8] (16 bytes), then the codes ---- */

/* Q4_0 (144 bytes a group block): unit j of each row = qs[4j..4j+3],
 * low nibbles elements 4j.., high nibbles 16 + 4j.. */
TGT void okv_qb_dot8_q4_0_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]) {
    const okv_qb_x32 *x = xq;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, wg += 144) {
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i v = x8_load(wg + 16 + 32 * j);
            s0 = okv_dpbusd256(s0, _mm256_and_si256(v, m4), x8_bcast4(x[b].q + 4 * j));
            s1 = okv_dpbusd256(s1, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), x8_bcast4(x[b].q + 16 + 4 * j));
        }
        __m256i is = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), _mm256_set1_epi32(8 * x[b].qsum));
        __m256 dd = _mm256_mul_ps(x8_f16(wg), _mm256_set1_ps(x[b].d));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(is)));
    }
    _mm256_storeu_ps(out, acc);
}

/* Q8_0 (272 bytes a group block): unit j = qs[4j..4j+3], as u8 q + 128. */
TGT void okv_qb_dot8_q8_0_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]) {
    const okv_qb_x32 *x = xq;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, wg += 272) {
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 8; j += 2) {
            s0 = okv_dpbusd256(s0, _mm256_xor_si256(x8_load(wg + 16 + 32 * j), flip), x8_bcast4(x[b].q + 4 * j));
            s1 = okv_dpbusd256(s1, _mm256_xor_si256(x8_load(wg + 48 + 32 * j), flip), x8_bcast4(x[b].q + 4 * j + 4));
        }
        __m256i is = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), _mm256_set1_epi32(128 * x[b].qsum));
        __m256 dd = _mm256_mul_ps(x8_f16(wg), _mm256_set1_ps(x[b].d));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(is)));
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- Q4_K / Q5_K (1152 / 1408 bytes a group block; layout in qmatmul/block_x8.h) ---- */

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
            /* 4 accumulators (u even / odd): 4 chained vpdpbusd each, not 8 */
            __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
            __m256i b0 = _mm256_setzero_si256(), b1 = _mm256_setzero_si256();
            const int8_t *xq0 = xb->q + 64 * c;
#pragma GCC unroll 4
            for (int u = 0; u < 8; u += 2) {
                __m256i v = x8_load(qs + 32 * (8 * c + u)), w = x8_load(qs + 32 * (8 * c + u + 1));
                __m256i vl = _mm256_and_si256(v, m4), vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                __m256i wl = _mm256_and_si256(w, m4), wh = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
                if (five) {
                    __m256i hv = x8_load(qh + 32 * u), hw = x8_load(qh + 32 * (u + 1));
                    vl = _mm256_or_si256(vl, x8_q5k_bit(hv, 2 * c));
                    vh = _mm256_or_si256(vh, x8_q5k_bit(hv, 2 * c + 1));
                    wl = _mm256_or_si256(wl, x8_q5k_bit(hw, 2 * c));
                    wh = _mm256_or_si256(wh, x8_q5k_bit(hw, 2 * c + 1));
                }
                a0 = okv_dpbusd256(a0, vl, x8_bcast4(xq0 + 4 * u));
                a1 = okv_dpbusd256(a1, vh, x8_bcast4(xq0 + 32 + 4 * u));
                b0 = okv_dpbusd256(b0, wl, x8_bcast4(xq0 + 4 * u + 4));
                b1 = okv_dpbusd256(b1, wh, x8_bcast4(xq0 + 36 + 4 * u));
            }
            a0 = _mm256_add_epi32(a0, b0);
            a1 = _mm256_add_epi32(a1, b1);
            __m256i sv = sc[c / 2];
            int k = (2 * c) % 4;
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(a0, x8_lane_byte(sv, k)));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(a1, x8_lane_byte(sv, k + 1)));
        }
        /* sum_g mn_g bsum_g */
        __m256i mp[4], xs[4];
        x8_q4k_min_pairs(mn, xb, mp, xs);
        __m256i macc = _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) macc = okv_dpwssd256(macc, mp[i], xs[i]);
        __m256 dx = _mm256_set1_ps(xb->d), dmin = x8_f16(wg + 16);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(x8_f16(wg), dx), _mm256_cvtepi32_ps(isum)));
        /* the plain dot subtracts only when dmin != 0 or the min sum is */
        __mmask8 use = _mm256_cmp_ps_mask(dmin, _mm256_setzero_ps(), _CMP_NEQ_UQ) |
                       _mm256_cmpneq_epi32_mask(macc, _mm256_setzero_si256());
        acc = _mm256_mask_sub_ps(acc, use, acc, _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(macc)));
    }
    _mm256_storeu_ps(out, acc);
}

TGT void okv_qb_dot8_q4_k_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]) { dot8_k45(wg, xq, nb, out, false); }
TGT void okv_qb_dot8_q5_k_avx512(const uint8_t *wg, const void *xq, int nb, float out[8]) { dot8_k45(wg, xq, nb, out, true); }
