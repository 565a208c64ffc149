/* attend/blocked_simd.c — the blocked attention's inner loops for AVX2 + FMA +
 * F16C (8 floats a vector) and AVX-512 F/BW/VL (16), from one source,
 * okv_attend_simd.inc, included once per ISA with per-function target
 * attributes (so the file builds with gcc and clang 14 without -m flags;
 * only called when okv_cpu() reports the features).
 *
 * The loops are shaped as small GEMMs: scores broadcast one key element
 * against a vector of queries (QT is query-major), so a 4-key x 2-vector
 * register tile needs no horizontal sums; the weighted sum broadcasts one
 * probability against a vector of V channels, with rows x 4 vectors of
 * accumulators held in registers across the block (NA_ROWS = 3 on AVX2's
 * 16 registers, 6 on AVX-512's 32). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "okv_kernels_internal.h"

/* ---- AVX2 ----------------------------------------------------------------------- */

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define NAME(x) x##_avx2
#define V __m256
#define VL 8
#define NA_ROWS 3
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_LOAD_BF16(p) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_MIN(a, b) _mm256_min_ps(a, b)
#define V_ROUND(a) _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_POW2I(n) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define V_SEL_LT(a, b, yes, no) _mm256_blendv_ps(no, yes, _mm256_cmp_ps(a, b, _CMP_LT_OQ))
#define V_SEL_EQ(a, b, yes, no) _mm256_blendv_ps(no, yes, _mm256_cmp_ps(a, b, _CMP_EQ_OQ))
#include "blocked_simd.inc"
#undef TGT
#undef INLINE
#undef NAME
#undef V
#undef VL
#undef NA_ROWS
#undef V_ZERO
#undef V_SET1
#undef V_LOAD
#undef V_STORE
#undef V_LOAD_F16
#undef V_LOAD_BF16
#undef V_FMA
#undef V_MUL
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_MIN
#undef V_ROUND
#undef V_POW2I
#undef V_SEL_LT
#undef V_SEL_EQ

/* ---- AVX-512 -------------------------------------------------------------------- */

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define NAME(x) x##_avx512
#define V __m512
#define VL 16
#define NA_ROWS 6
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_LOAD_BF16(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_MIN(a, b) _mm512_min_ps(a, b)
#define V_ROUND(a) _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_POW2I(n) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define V_SEL_LT(a, b, yes, no) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), no, yes)
#define V_SEL_EQ(a, b, yes, no) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), no, yes)
#include "blocked_simd.inc"

const okv_attn_ops okv_attn_ops_avx2 = {scores_avx2, softmax_avx2, accumulate_avx2};
const okv_attn_ops okv_attn_ops_avx512 = {scores_avx512, softmax_avx512, accumulate_avx512};

void okv_attend_avx2(okv_threadpool *tp, const okv_attn_args *a) { okv_attend_fast(tp, a, &okv_attn_ops_avx2); }
void okv_attend_avx512(okv_threadpool *tp, const okv_attn_args *a) { okv_attend_fast(tp, a, &okv_attn_ops_avx512); }
