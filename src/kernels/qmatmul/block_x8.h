/* qmatmul/block_x8.h — what the x8 block dots of every ISA share
 * (qmatmul/block_x8_avx2.c, qmatmul/block_x8_avx512.c): the 256-bit loads and
 * broadcasts of the x8 layout (okv_qblock_x8.c) and Q4_K's scale decoding
 * for 8 rows at once. AVX2-level code, inlined into each ISA's dots. */
#ifndef OKV_QBMM_X8_H
#define OKV_QBMM_X8_H

#include <immintrin.h>
#include <string.h>

#include "okv_kernels_internal.h"

#define X8_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 4 bytes at p in every 32-bit lane */
X8_INLINE __m256i x8_bcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
X8_INLINE __m256i x8_load(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* the 8 rows' f16 scales at p -> f32 */
X8_INLINE __m256 x8_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* two int16 as every lane's (lo, hi) pair */
X8_INLINE __m256i x8_pair16(int lo, int hi) {
    return _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16));
}
/* byte k of each lane as an int32 lane */
X8_INLINE __m256i x8_lane_byte(__m256i v, int k) {
    return _mm256_and_si256(_mm256_srli_epi32(v, 8 * k), _mm256_set1_epi32(0xff));
}

/* Q4_K group block at wg (1152 bytes): d[8] at 0, dmin[8] at 16, the 12
 * scale bytes as 3 units at 32 / 64 / 96, qs as 32 units at 128 (units
 * 8c .. 8c + 7: sub-blocks 2c in the low nibbles, 2c + 1 in the high).
 * Q5_K (1408 bytes) the same with qh's 8 units at 128 (unit u: the 5th
 * bits of elements 4u .. 4u + 3 of every sub-block) and qs at 384.
 * Its 6-bit scales and mins, a byte per sub-block per lane: sc[0] / mn[0]
 * sub-blocks 0-3, sc[1] / mn[1] sub-blocks 4-7. */
X8_INLINE void x8_q4k_scales(const uint8_t *wg, __m256i sc[2], __m256i mn[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m6 = _mm256_set1_epi8(0x3f), m30 = _mm256_set1_epi8(0x30);
    __m256i A = x8_load(wg + 32), B = x8_load(wg + 64), C = x8_load(wg + 96);
    sc[0] = _mm256_and_si256(A, m6);
    mn[0] = _mm256_and_si256(B, m6);
    sc[1] = _mm256_or_si256(_mm256_and_si256(C, m4), _mm256_and_si256(_mm256_srli_epi16(A, 2), m30));
    mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(C, 4), m4), _mm256_and_si256(_mm256_srli_epi16(B, 2), m30));
}
/* Q5_K's 5th bits for the codes of a qh unit hb (bit p = 2c + hi of each
 * byte: sub-block 2c + hi), placed as 16 in each byte. */
X8_INLINE __m256i x8_q5k_bit(__m256i hb, int p) {
    __m256i v = p <= 4 ? _mm256_slli_epi16(hb, 4 - p) : _mm256_srli_epi16(hb, p - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}
/* Q4_K's mins as int16 pairs (g, g + 2) per lane, p[0..3] for the pairs
 * (0, 2) (1, 3) (4, 6) (5, 7), and x's matching 32-element sums. */
X8_INLINE void x8_q4k_min_pairs(const __m256i mn[2], const okv_qb_x256 *xb, __m256i p[4], __m256i s[4]) {
    const __m256i lo16 = _mm256_set1_epi32(0x00ff00ff);
    int bs[8];
    for (int g = 0; g < 8; g++) bs[g] = xb->bsums[2 * g] + xb->bsums[2 * g + 1];
    for (int h = 0; h < 2; h++) {
        p[2 * h] = _mm256_and_si256(mn[h], lo16);
        p[2 * h + 1] = _mm256_srli_epi16(mn[h], 8);
        s[2 * h] = x8_pair16(bs[4 * h], bs[4 * h + 2]);
        s[2 * h + 1] = x8_pair16(bs[4 * h + 1], bs[4 * h + 3]);
    }
}

#endif
