/* okv_simd512.h — 512-bit helpers shared by the AVX-512 and AMX kernels
 * (okv_kernels_avx512_gemm.c, okv_kernels_avx512_dpbf16.c,
 * okv_kernels_amx.c, okv_attend_amx.c).
 *
 * Header-only and always inlined with the AVX-512 F target, so each caller
 * (built for a superset of it per function) gets the instructions in place;
 * nothing here is called on a CPU without them. */
#ifndef OKV_SIMD512_H
#define OKV_SIMD512_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

#define OKV_SIMD512_INLINE static inline __attribute__((always_inline, target("avx512f")))

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

#endif
