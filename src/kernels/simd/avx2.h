/* simd/avx2.h — the AVX2 helpers the kernels share (matmul/dot_avx2.c,
 * matmul/gemm_avx2.c, attend/decode.c).
 *
 * Header-only and always inlined with the AVX2/FMA/F16C target, so each
 * caller (built for that target per function) gets the instructions in
 * place; nothing here is called on a CPU without them. */
#ifndef OKV_SIMD256_H
#define OKV_SIMD256_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "okv_kernels_internal.h"

#define OKV_SIMD256_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 8 f16 (dt == OKV_F16) or bf16 values at p as f32 (exact widening). */
OKV_SIMD256_INLINE __m256 okv_load8_half(const uint16_t *p, okv_dtype dt) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (dt == OKV_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 elements of a row stored in dt (f32, f16 or bf16), from element i, as f32. */
OKV_SIMD256_INLINE __m256 okv_load8_f32(const void *p, okv_dtype dt, size_t i) {
    if (dt == OKV_F32) return _mm256_loadu_ps((const float *)p + i);
    return okv_load8_half((const uint16_t *)p + i, dt);
}

#endif
