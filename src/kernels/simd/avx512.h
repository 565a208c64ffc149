/* simd/avx512.h — the AVX-512 helpers the kernels share (matmul/gemm_avx512.c,
 * matmul/gemm_dpbf16.c, matmul/tiles_amx.c, attend/prefill16.c, the block
 * dots): a 16x16 transpose, rows read as bf16, the packed GEMMs' tile store,
 * and the VNNI dot steps on 256-bit vectors.
 *
 * Header-only and always inlined with the AVX-512 F target, so each caller
 * (built for a superset of it per function) gets the instructions in place;
 * nothing here is called on a CPU without them. */
#ifndef OKV_SIMD512_H
#define OKV_SIMD512_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "okv_kernels_internal.h"

#define OKV_SIMD512_INLINE static inline __attribute__((always_inline, target("avx512f")))
#define OKV_SIMD512_BF16_INLINE \
    static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,f16c")))

/* r[16] (16 x 16 32-bit elements) transposed in place: afterwards r[i]
 * holds element i of every input row. Unpacks build 4x4 blocks inside
 * 128-bit lanes, then lanes move across registers (64 shuffles). */
OKV_SIMD512_INLINE void okv_transpose16x16_epi32(__m512i r[16]) {
    __m512i t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) { /* r[i + e] lane L = column 4L + e of rows i..i+3 */
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) { /* out[4L + e] lane q = r[4q + e] lane L */
        __m512i a0 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x44), a1 = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xee);
        __m512i b0 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x44), b1 = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xee);
        t[e] = _mm512_shuffle_i32x4(a0, b0, 0x88);
        t[4 + e] = _mm512_shuffle_i32x4(a0, b0, 0xdd);
        t[8 + e] = _mm512_shuffle_i32x4(a1, b1, 0x88);
        t[12 + e] = _mm512_shuffle_i32x4(a1, b1, 0xdd);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* The store of a packed GEMM's 6 x 64 tile: y rows [t0, t0 + rt) (rt <= 6)
 * of a [T, N] output, columns [n0, n0 + nv) (nv <= 64, the rest masked),
 * += acc[r][0..4); on the first K chunk (first) y = acc + bias instead (bias
 * may be NULL). */
OKV_SIMD512_INLINE void okv_tile6x64_store(float *y, int N, const float *bias, int t0, int rt, int n0, int nv,
                                           bool first, const __m512 acc[6][4]) {
    __mmask16 m[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        int v = nv - 16 * i;
        m[i] = v >= 16 ? (__mmask16)0xffff : v > 0 ? (__mmask16)((1u << v) - 1) : 0;
    }
#pragma GCC unroll 6
    for (int r = 0; r < 6; r++) {
        if (r >= rt) break;
        float *out = y + (size_t)(t0 + r) * N + n0;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m512 prev = first ? (bias ? _mm512_maskz_loadu_ps(m[i], bias + n0 + 16 * i) : _mm512_setzero_ps())
                                : _mm512_maskz_loadu_ps(m[i], out + 16 * i);
            _mm512_mask_storeu_ps(out + 16 * i, m[i], _mm512_add_ps(prev, acc[r][i]));
        }
    }
}

/* 32 elements of a row in dt from element k (k < K), rounded to bf16, lanes
 * at or past K zero. */
OKV_SIMD512_BF16_INLINE __m512i okv_row32_bf16(const void *row, okv_dtype dt, int k, int K) {
    int left = K - k;
    if (dt == OKV_BF16) {
        __mmask32 m = left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1);
        return _mm512_maskz_loadu_epi16(m, (const uint16_t *)row + k);
    }
    __mmask16 m0 = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    __mmask16 m1 = left >= 32 ? (__mmask16)0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
    __m512 lo, hi;
    if (dt == OKV_F16) {
        lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, (const uint16_t *)row + k));
        hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, (const uint16_t *)row + k + 16));
    } else {
        lo = _mm512_maskz_loadu_ps(m0, (const float *)row + k);
        hi = _mm512_maskz_loadu_ps(m1, (const float *)row + k + 16);
    }
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); /* element i < 16 from lo */
}

/* x[perm[i]] for i < 32, rounded to bf16 (quantized W: tile columns in
 * the codes' order). perm runs in fours of consecutive k (a 4-code unit,
 * okv_qmm_tile_perm), so 8 loads of 4 floats replace a gather per element
 * (the gathers made this pack 2-3x bf16's). */
OKV_SIMD512_BF16_INLINE __m512i okv_x32_permuted(const float *row, const int32_t *perm) {
    __m512 lo = _mm512_castps128_ps512(_mm_loadu_ps(row + perm[0]));
    lo = _mm512_insertf32x4(lo, _mm_loadu_ps(row + perm[4]), 1);
    lo = _mm512_insertf32x4(lo, _mm_loadu_ps(row + perm[8]), 2);
    lo = _mm512_insertf32x4(lo, _mm_loadu_ps(row + perm[12]), 3);
    __m512 hi = _mm512_castps128_ps512(_mm_loadu_ps(row + perm[16]));
    hi = _mm512_insertf32x4(hi, _mm_loadu_ps(row + perm[20]), 1);
    hi = _mm512_insertf32x4(hi, _mm_loadu_ps(row + perm[24]), 2);
    hi = _mm512_insertf32x4(hi, _mm_loadu_ps(row + perm[28]), 3);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* ---- AVX-512 VNNI on 256-bit vectors (the block dots: qmatmul/block_avx512.c,
 * qmatmul/block_x8_avx512.c). Written as asm: GCC 12 compiles the
 * intrinsics' non-destructive forms into a register copy per accumulator
 * per step (as qmatmul/int_avx512.c notes); the asm keeps each accumulator
 * in its register. */
#define VNNI256_INLINE static inline __attribute__((always_inline, target("avx2,avx512f,avx512vl,avx512vnni")))

/* acc + u8 c . s8 x per 32-bit lane (sums of 4 products) */
VNNI256_INLINE __m256i okv_dpbusd256(__m256i acc, __m256i c, __m256i x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(c), "v"(x));
    return acc;
}
/* acc + a.lo16 b.lo16 + a.hi16 b.hi16 per 32-bit lane */
VNNI256_INLINE __m256i okv_dpwssd256(__m256i acc, __m256i a, __m256i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

#endif
