/* ops/ops_simd.c — AVX2 and AVX-512 versions of the row-wise table ops:
 * GLU (SiLU and tanh-GELU), RMSNorm, add + RMSNorm of the sum in one pass,
 * and RoPE's rotation with the step's angle table (NeoX / half-split: the
 * only form the graphs use; GGUF's interleaved q/k rows are permuted back at
 * export).
 *
 * These ops stream one or two activations and write one, a few flops per
 * element, so they are meant to run at the speed of memory. Each function
 * carries __attribute__((target(...))); okv_kernels_select hands them out
 * only when the CPU has the features. The file is built with
 * -ffp-contract=off (src/kernels/CMakeLists.txt): nothing here may be fused
 * into an FMA behind our back, which is what keeps RoPE bit for bit equal to
 * the plain okv_rope (x0 c - x1 s rounded as two products and a difference),
 * so the unfused reference step (OKV_STEP_FUSE=0, okv_rope) and the fused
 * one (the table's rope_apply) still agree byte for byte.
 *
 * Accuracy (tests/kernels/test_kernels.c checks them against double and
 * against the plain table over odd lengths):
 *   - exp: n = round(x log2 e), f = x - n ln2 (two-part ln2), exp(f) by
 *     Cephes' degree-6 polynomial (|rel err| ~1e-7 on |f| <= ln2/2), times
 *     2^n (vscalefps on AVX-512, exponent bits on AVX2, input clamped so 2^n
 *     stays finite). sigmoid(z) = 1 / (1 + exp(-z)) with a true division:
 *     these loops are bound by memory, the division is free.
 *   - SiLU(g) = g sigmoid(g); tanh-GELU(g) = g sigmoid(2u) with
 *     u = sqrt(2/pi) (g + 0.044715 g^3), since 0.5 (1 + tanh u) = sigmoid(2u):
 *     within 2e-6 relative of the double formula plus 1e-6 |up| (the error of
 *     u's float rounding times |2u| where exp(-2u) is large).
 *   - RMSNorm: sum of squares in f32 lanes (64 partial sums on AVX-512, 16 on
 *     AVX2), within 1e-5 relative of the double computation; add_rmsnorm is
 *     bit for bit add then the same table's rmsnorm (the sum is stored, its
 *     squares summed in the same lane order, from L1).
 *   - RoPE: bit for bit okv_rope_apply (= okv_rope).
 * Every tail runs in the vector code (AVX-512: masked loads/stores; AVX2
 * GLU: the plain tail, hence the runtime's GLU splits at multiples of 64).
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (ops/ops_simd.c). */
#include <immintrin.h>
#include <math.h>

#include "okv_kernels_internal.h"

#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define INLINE2 static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define TGT5 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define INLINE5 static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))

/* Cephes expf polynomial: exp(f) ~ 1 + f + f^2 P(f), |f| <= ln2/2. */
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO (-2.12194440e-4f)
#define GELU_2C (2.0f * 0.7978845608028654f) /* 2 sqrt(2/pi) */

/* ==== AVX2 ===================================================================== */

INLINE2 float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- rmsnorm ---- */

/* sum of x[i]^2, i < n: two 8-lane accumulators over 16-blocks, an 8-block
 * into the first, then the scalar tail (the order add_rmsnorm repeats). */
INLINE2 float sumsq_avx2(const float *x, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        s0 = _mm256_fmadd_ps(a, a, s0);
        s1 = _mm256_fmadd_ps(b, b, s1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(x + i);
        s0 = _mm256_fmadd_ps(a, a, s0);
    }
    float ss = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) ss += x[i] * x[i];
    return ss;
}

/* y[i] = x[i] * r * w[i] (w NULL: 1) */
INLINE2 void scale_avx2(float *y, const float *x, int n, float r, const float *w) {
    __m256 rv = _mm256_set1_ps(r);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), rv);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? x[i] * r * w[i] : x[i] * r;
}

static inline float rms_factor(float ss, int group, float eps) { return 1.0f / sqrtf(ss / (float)group + eps); }

TGT2 void okv_rmsnorm_avx2(float *y, const float *x, int T, int width, int group, const float *w, float eps) {
    if (group <= 0) group = width;
    for (size_t g = 0; g < (size_t)T * (size_t)(width / group); g++) {
        const float *xg = x + g * group;
        scale_avx2(y + g * group, xg, group, rms_factor(sumsq_avx2(xg, group), group, eps), w);
    }
}

TGT2 void okv_add_rmsnorm_avx2(float *y, float *sum, const float *a, const float *b, int T, int width, int group,
                               const float *w, float eps) {
    if (group <= 0) group = width;
    for (size_t g = 0; g < (size_t)T * (size_t)(width / group); g++) {
        size_t o = g * group;
        int i = 0;
        for (; i + 8 <= group; i += 8)
            _mm256_storeu_ps(sum + o + i, _mm256_add_ps(_mm256_loadu_ps(a + o + i), _mm256_loadu_ps(b + o + i)));
        for (; i < group; i++) sum[o + i] = a[o + i] + b[o + i];
        scale_avx2(y + o, sum + o, group, rms_factor(sumsq_avx2(sum + o, group), group, eps), w);
    }
}

/* ---- glu ---- */

/* exp(x) for 8 lanes (head comment); input clamped to [-87, 88] so 2^n stays
 * a normal float. */
INLINE2 __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), x);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* act(g) = g sigmoid(z), z = g (SiLU) or 2u (tanh-GELU) */
INLINE2 __m256 act8(__m256 g, okv_act act) {
    __m256 z = g;
    if (act == OKV_ACT_GELU_TANH) {
        __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
        z = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g), _mm256_set1_ps(GELU_2C));
    }
    __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), z)));
    return _mm256_div_ps(g, den);
}

TGT2 void okv_glu_avx2(float *y, const float *gate, const float *up, size_t n, okv_act act) {
    size_t i = 0;
    if (act == OKV_ACT_SILU)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(act8(_mm256_loadu_ps(gate + i), OKV_ACT_SILU), _mm256_loadu_ps(up + i)));
    else
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i,
                             _mm256_mul_ps(act8(_mm256_loadu_ps(gate + i), OKV_ACT_GELU_TANH), _mm256_loadu_ps(up + i)));
    if (i < n) okv_glu_plain(y + i, gate + i, up + i, n - i, act);
}

/* ---- rope ---- */

/* (cos, sin) pairs cs[2i], cs[2i + 1] for i in [i0, i0 + 8) as two vectors */
INLINE2 void cs_split8(const float *cs, __m256 *c, __m256 *s) {
    __m256 a = _mm256_loadu_ps(cs), b = _mm256_loadu_ps(cs + 8);
    /* per 128-bit lane: [a0 a2 b0 b2 | a4 a6 b4 b6] = [c0 c1 c4 c5 | c2 c3 c6 c7] */
    __m256 ce = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), so = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    *c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ce), _MM_SHUFFLE(3, 1, 2, 0)));
    *s = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(so), _MM_SHUFFLE(3, 1, 2, 0)));
}

TGT2 void okv_rope_apply_avx2(float *y, const float *x, int T, int n_heads, int head_dim, const float *cs) {
    int half = head_dim / 2;
    for (int t = 0; t < T; t++) {
        const float *c = cs + (size_t)t * half * 2;
        const float *xt = x + (size_t)t * n_heads * head_dim;
        float *yt = y + (size_t)t * n_heads * head_dim;
        int i = 0;
        for (; i + 8 <= half; i += 8) {
            __m256 co, si;
            cs_split8(c + 2 * i, &co, &si);
            for (int h = 0; h < n_heads; h++) {
                const float *xh = xt + (size_t)h * head_dim;
                float *yh = yt + (size_t)h * head_dim;
                __m256 x0 = _mm256_loadu_ps(xh + i), x1 = _mm256_loadu_ps(xh + i + half);
                _mm256_storeu_ps(yh + i, _mm256_sub_ps(_mm256_mul_ps(x0, co), _mm256_mul_ps(x1, si)));
                _mm256_storeu_ps(yh + i + half, _mm256_add_ps(_mm256_mul_ps(x1, co), _mm256_mul_ps(x0, si)));
            }
        }
        for (; i < half; i++) /* okv_rope_apply's scalar arithmetic */
            for (int h = 0; h < n_heads; h++) {
                const float *xh = xt + (size_t)h * head_dim;
                float *yh = yt + (size_t)h * head_dim;
                float x0 = xh[i], x1 = xh[i + half], co = c[2 * i], si = c[2 * i + 1];
                yh[i] = x0 * co - x1 * si;
                yh[i + half] = x1 * co + x0 * si;
            }
    }
}

/* ==== AVX-512 ================================================================== */

INLINE5 __mmask16 tail_mask(int n) { return (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1u); }

/* ---- rmsnorm ---- */

/* sum of x[i]^2, i < n: four 16-lane accumulators over 64-blocks, 16-blocks
 * into the first, the masked tail into the second, then the lanes. */
INLINE5 float sumsq_avx512(const float *x, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        __m512 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
        s0 = _mm512_fmadd_ps(a, a, s0);
        s1 = _mm512_fmadd_ps(b, b, s1);
        s2 = _mm512_fmadd_ps(c, c, s2);
        s3 = _mm512_fmadd_ps(d, d, s3);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_loadu_ps(x + i);
        s0 = _mm512_fmadd_ps(a, a, s0);
    }
    if (i < n) {
        __m512 a = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        s1 = _mm512_fmadd_ps(a, a, s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

INLINE5 void scale_avx512(float *y, const float *x, int n, float r, const float *w) {
    __m512 rv = _mm512_set1_ps(r);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), rv);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

TGT5 void okv_rmsnorm_avx512(float *y, const float *x, int T, int width, int group, const float *w, float eps) {
    if (group <= 0) group = width;
    for (size_t g = 0; g < (size_t)T * (size_t)(width / group); g++) {
        const float *xg = x + g * group;
        scale_avx512(y + g * group, xg, group, rms_factor(sumsq_avx512(xg, group), group, eps), w);
    }
}

TGT5 void okv_add_rmsnorm_avx512(float *y, float *sum, const float *a, const float *b, int T, int width, int group,
                                 const float *w, float eps) {
    if (group <= 0) group = width;
    for (size_t g = 0; g < (size_t)T * (size_t)(width / group); g++) {
        size_t o = g * group;
        for (int i = 0; i < group; i += 16) {
            __mmask16 m = tail_mask(group - i);
            _mm512_mask_storeu_ps(sum + o + i, m,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + o + i), _mm512_maskz_loadu_ps(m, b + o + i)));
        }
        scale_avx512(y + o, sum + o, group, rms_factor(sumsq_avx512(sum + o, group), group, eps), w);
    }
}

/* ---- glu ---- */

/* exp(x) for 16 lanes (head comment): 2^n by vscalefps, which saturates to
 * inf / 0 by itself; the clamp only keeps n small. */
INLINE5 __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), x);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

INLINE5 __m512 act16(__m512 g, okv_act act) {
    __m512 z = g;
    if (act == OKV_ACT_GELU_TANH) {
        __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
        z = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_set1_ps(0.044715f), g3, g), _mm512_set1_ps(GELU_2C));
    }
    __m512 den = _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), z)));
    return _mm512_div_ps(g, den);
}

/* Two vectors per iteration (two independent exp chains), masked tail. */
INLINE5 void glu16(float *y, const float *gate, const float *up, size_t n, okv_act act) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a0 = act16(_mm512_loadu_ps(gate + i), act), a1 = act16(_mm512_loadu_ps(gate + i + 16), act);
        _mm512_storeu_ps(y + i, _mm512_mul_ps(a0, _mm512_loadu_ps(up + i)));
        _mm512_storeu_ps(y + i + 16, _mm512_mul_ps(a1, _mm512_loadu_ps(up + i + 16)));
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask((int)(n - i < 16 ? n - i : 16));
        __m512 a = act16(_mm512_maskz_loadu_ps(m, gate + i), act);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

TGT5 void okv_glu_avx512(float *y, const float *gate, const float *up, size_t n, okv_act act) {
    if (act == OKV_ACT_SILU) glu16(y, gate, up, n, OKV_ACT_SILU);
    else glu16(y, gate, up, n, OKV_ACT_GELU_TANH);
}

/* ---- rope ---- */

TGT5 void okv_rope_apply_avx512(float *y, const float *x, int T, int n_heads, int head_dim, const float *cs) {
    int half = head_dim / 2;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int t = 0; t < T; t++) {
        const float *c = cs + (size_t)t * half * 2;
        const float *xt = x + (size_t)t * n_heads * head_dim;
        float *yt = y + (size_t)t * n_heads * head_dim;
        for (int i = 0; i < half; i += 16) {
            int k = half - i < 16 ? half - i : 16;
            __mmask16 m = tail_mask(k);
            /* 2k floats of (cos, sin) pairs, deinterleaved */
            __m512 lo = _mm512_maskz_loadu_ps(tail_mask(2 * k), c + 2 * i);
            __m512 hi = _mm512_maskz_loadu_ps(tail_mask(2 * k - 16 > 0 ? 2 * k - 16 : 0), c + 2 * i + 16);
            __m512 co = _mm512_permutex2var_ps(lo, even, hi), si = _mm512_permutex2var_ps(lo, odd, hi);
            for (int h = 0; h < n_heads; h++) {
                const float *xh = xt + (size_t)h * head_dim;
                float *yh = yt + (size_t)h * head_dim;
                __m512 x0 = _mm512_maskz_loadu_ps(m, xh + i), x1 = _mm512_maskz_loadu_ps(m, xh + i + half);
                _mm512_mask_storeu_ps(yh + i, m, _mm512_sub_ps(_mm512_mul_ps(x0, co), _mm512_mul_ps(x1, si)));
                _mm512_mask_storeu_ps(yh + i + half, m, _mm512_add_ps(_mm512_mul_ps(x1, co), _mm512_mul_ps(x0, si)));
            }
        }
    }
}
