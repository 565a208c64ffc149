/* okv_vnni256.h — AVX-512 VNNI's integer dot steps on 256-bit vectors, for
 * the block dots (okv_qbmm_avx512.c, okv_qbmm_x8_avx512.c). Written as
 * asm: GCC 12 compiles the intrinsics' non-destructive forms into a
 * register copy per accumulator per step (as okv_qmatmul_avx512.c notes);
 * the asm keeps each accumulator in its register. */
#ifndef OKV_VNNI256_H
#define OKV_VNNI256_H

#include <immintrin.h>

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
