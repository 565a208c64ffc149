/* qmatmul/int_avx2.c — the integer-dot quantized matmul (qmatmul/int_plain.c's
 * algorithm) with AVX2 + FMA + F16C, for CPUs without AVX-512 VNNI.
 *
 * A superblock's 16 lanes are two 8-lane halves here (bytes 0-31 and 32-63
 * of each 64-byte unit; a tail superblock's shorter units are read with
 * 32-bit masked loads, one lane per group). Without VNNI the u8 x s8 dot is
 * vpmaddubsw (pairs into int16, saturating) + vpmaddwd by ones (into the
 * group's 32-bit lane). Saturation cannot happen for 4-bit codes (2 * 15 *
 * 127 = 3810, two units summed 7620 < 32767); 8-bit codes are taken as s =
 * c - 128, |s| against x with s's sign (2 * 128 * 127 = 32512), the offset
 * put back from the group's sum of x where the scheme needs it (it was a
 * nibble split, c = 16 ch + cl, twice the dots; Zen 3, one core, W in
 * cache, 512 x 2048: 16.3 -> 17.3 GFLOP/s; in the Llama-3.2-1B q8 decode
 * step, which reads W from DRAM, no change beyond noise: 108 ms). The
 * integer sums stay exact and the results match the plain model bit for
 * bit. Rows are computed one at a time against each activation row; this
 * path is the portable fallback, the AVX-512 one is the tuned one. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "okv_kernels_internal.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx2,fma,f16c")))

bool okv_qmm_have_avx2(void) {
    const okv_cpu_caps *c = okv_cpu();
    return c->avx2 && c->fma && c->f16c;
}

/* ---- activations ----------------------------------------------------------- */

INLINE_TGT float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

INLINE_TGT int32_t hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* 8 int32 in [-127, 127] -> 8 int8 (2 units of 4 codes) as two int32 words. */
INLINE_TGT void pack8(__m256i v, int32_t out[2]) {
    __m128i a = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_packs_epi16(a, a);
    _mm_storel_epi64((__m128i *)out, a);
}

static TGT void quantize_avx2(const okv_qmm_job *j, const float *x, int t) {
    const int gs = j->w.group, G = j->w.groups;
    const bool one = !j->a.two;
    int8_t *q = j->a.q + (size_t)t * j->K, *q2 = j->a.q2 + (size_t)t * j->K;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), fmax = _mm256_set1_ps(3.4028234664e38f);
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    for (int g = 0; g < G; g++) {
        const float *xg = x + (size_t)g * gs;
        __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int i = 0; i < gs; i += 8) {
            __m256 a = _mm256_and_ps(_mm256_loadu_ps(xg + i), absmask);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, fmax, _CMP_NLE_UQ)); /* NaN or inf */
            amax = _mm256_max_ps(amax, a);
        }
        float am = hmax8(amax);
        size_t stride, base = okv_qact_group_base(gs, G, g, &stride);
        size_t gi = (size_t)t * G + g;
        if (_mm256_movemask_ps(bad)) {
            okv_qact_poison_group(j, t, g);
            continue;
        }
        float dxs = am / 127.0f;
        __m256 id = _mm256_set1_ps(am > 0.0f ? 127.0f / am : 0.0f), id2 = _mm256_set1_ps(am > 0.0f ? 32258.0f / am : 0.0f);
        __m256 dx = _mm256_set1_ps(dxs);
        __m256i sum = _mm256_setzero_si256(), sum2 = _mm256_setzero_si256();
        for (int i = 0; i < gs; i += 8) {
            __m256 xv = _mm256_loadu_ps(xg + i);
            __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(xv, id)), v2 = _mm256_setzero_si256();
            if (!one) {
                __m256 r = _mm256_sub_ps(xv, _mm256_mul_ps(_mm256_cvtepi32_ps(v), dx));
                v2 = _mm256_cvtps_epi32(_mm256_mul_ps(r, id2));
                v2 = _mm256_max_epi32(_mm256_min_epi32(v2, lim), nlim);
            }
            sum = _mm256_add_epi32(sum, v);
            sum2 = _mm256_add_epi32(sum2, v2);
            int32_t w[2], w2[2];
            pack8(v, w);
            pack8(v2, w2);
            int u = i / 4;
            for (int k = 0; k < 2; k++) {
                memcpy(q + base + (u + k) * stride, &w[k], 4);
                memcpy(q2 + base + (u + k) * stride, &w2[k], 4);
            }
        }
        int32_t s1 = hsum8i(sum), s2 = hsum8i(sum2);
        j->a.dx[gi] = dxs;
        j->a.dx2[gi] = one ? 0.0f : am / 32258.0f;
        j->a.qsum[gi] = s1;
        j->a.qsum2[gi] = s2;
        if (one) {
            j->a.sx[gi] = dxs * (float)s1;
        } else {
            float sx1 = dxs * (float)s1, sx2 = j->a.dx2[gi] * (float)s2;
            j->a.sx[gi] = sx1 + sx2;
        }
    }
}

/* ---- one output ------------------------------------------------------------------ */

/* 8 lanes of 4 u8 x s8 products each, summed into int32 (c <= 15). */
INLINE_TGT __m256i dot4(__m256i c, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(c, x), _mm256_set1_epi16(1));
}

/* Bytes [0, 32) of a unit at p, lanes past `lanes` (0..8) zero and unread. */
INLINE_TGT __m256i load_half(const void *p, int lanes) {
    if (lanes == 8) return _mm256_loadu_si256((const __m256i *)p);
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_epi32((const int *)p, _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), idx));
}

/* Integer sums of half h of a superblock: isum (plane q) and isum2 (q2);
 * for 8-bit codes the sums of (c - 128) x, which vpmaddubsw takes without
 * saturating (c x itself could not: 2 * 255 * 127 > 32767). Integer sums
 * are exact, so the outputs keep the plain model's bits. */
INLINE_TGT void half_sums(const uint8_t *c, const int8_t *xq, const int8_t *xq2, size_t us, int lanes, int gs,
                          int bits, bool two, __m256i *is, __m256i *is2) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    if (bits == 4) {
        for (int p = 0; p < gs / 8; p++) {
            __m256i wv = load_half(c + p * us, lanes);
            __m256i lo = _mm256_and_si256(wv, m4), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
            __m256i xa = load_half(xq + 2 * p * us, lanes), xb = load_half(xq + (2 * p + 1) * us, lanes);
            /* int16 sums of two units stay below 2 * 3810 */
            __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xa), _mm256_maddubs_epi16(hi, xb));
            a = _mm256_add_epi32(a, _mm256_madd_epi16(s, _mm256_set1_epi16(1)));
            if (!two) continue; /* one activation plane (okv_qact_two_planes): b stays 0 */
            __m256i ya = load_half(xq2 + 2 * p * us, lanes), yb = load_half(xq2 + (2 * p + 1) * us, lanes);
            __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ya), _mm256_maddubs_epi16(hi, yb));
            b = _mm256_add_epi32(b, _mm256_madd_epi16(s2, _mm256_set1_epi16(1)));
        }
    } else { /* signed codes s = c - 128: sum s x = |s| . (x signed by s), at most 2 * 128 * 127 per pair */
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        for (int u = 0; u < gs / 4; u++) {
            __m256i sv = _mm256_xor_si256(load_half(c + u * us, lanes), flip), mag = _mm256_abs_epi8(sv);
            __m256i xa = load_half(xq + u * us, lanes), ya = load_half(xq2 + u * us, lanes);
            a = _mm256_add_epi32(a, dot4(mag, _mm256_sign_epi8(xa, sv)));
            b = _mm256_add_epi32(b, dot4(mag, _mm256_sign_epi8(ya, sv)));
        }
    }
    *is = a;
    *is2 = b;
}

/* 8 f32/f16/int32 per-group values from lane 8h of a superblock with L
 * lanes (zero past L). */
INLINE_TGT __m256 grp_f32(const float *p, int lanes) {
    if (lanes == 8) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
INLINE_TGT __m256i grp_i32(const int32_t *p, int lanes) { return _mm256_castps_si256(grp_f32((const float *)p, lanes)); }
INLINE_TGT __m256 grp_f16(const uint16_t *p, int lanes) {
    uint16_t tmp[8] = {0};
    if (lanes == 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    memcpy(tmp, p, sizeof(uint16_t) * (size_t)lanes);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
}

INLINE_TGT float qdot_avx2(const okv_qmm_job *j, int n, int t, int bits, bool asym, bool two) {
    const okv_qview *w = &j->w;
    const int gs = w->group, G = w->groups;
    const uint8_t *crow = w->codes + (size_t)n * w->code_stride;
    const uint16_t *drow = w->d + (size_t)n * w->scale_stride, *mrow = asym ? w->m + (size_t)n * w->scale_stride : NULL;
    const int8_t *q = j->a.q + (size_t)t * j->K, *q2 = j->a.q2 + (size_t)t * j->K;
    const size_t a0 = (size_t)t * G;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int g0 = 0; g0 < G; g0 += OKV_QSB_GROUPS) {
        const int L = G - g0 < OKV_QSB_GROUPS ? G - g0 : OKV_QSB_GROUPS;
        const size_t us = (size_t)4 * L;
        const uint8_t *c = crow + (size_t)g0 * gs * bits / 8;
        const int8_t *xq = q + (size_t)g0 * gs, *xq2 = q2 + (size_t)g0 * gs;
        for (int h = 0; h < 2; h++) {
            int lanes = L - 8 * h > 8 ? 8 : L - 8 * h;
            if (lanes <= 0) continue; /* adds fma(0, 0, acc) = acc in the model */
            __m256i is, is2;
            half_sums(c + 32 * h, xq + 32 * h, xq2 + 32 * h, us, lanes, gs, bits, two, &is, &is2);
            int gl = g0 + 8 * h;
            __m256 dw = grp_f16(drow + gl, lanes);
            __m256 s = _mm256_mul_ps(dw, grp_f32(j->a.dx + a0 + gl, lanes));
            __m256 s2 = _mm256_mul_ps(dw, grp_f32(j->a.dx2 + a0 + gl, lanes));
            if (bits == 8) { /* is = sum (c - 128) x: the symmetric dot as is; asym adds 128 sum x back */
                if (asym) {
                    is = _mm256_add_epi32(is, _mm256_slli_epi32(grp_i32(j->a.qsum + a0 + gl, lanes), 7));
                    is2 = _mm256_add_epi32(is2, _mm256_slli_epi32(grp_i32(j->a.qsum2 + a0 + gl, lanes), 7));
                }
            }
            if (!asym) {
                __m256i qs = grp_i32(j->a.qsum + a0 + gl, lanes), qs2 = grp_i32(j->a.qsum2 + a0 + gl, lanes);
                __m256 v = _mm256_cvtepi32_ps(bits == 8 ? is : _mm256_sub_epi32(is, _mm256_slli_epi32(qs, bits - 1)));
                __m256 v2 = _mm256_cvtepi32_ps(bits == 8 ? is2 : _mm256_sub_epi32(is2, _mm256_slli_epi32(qs2, bits - 1)));
                acc[h] = _mm256_fmadd_ps(s, v, acc[h]);
                if (two) acc[h] = _mm256_fmadd_ps(s2, v2, acc[h]);
            } else {
                acc[h] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(is), acc[h]);
                if (two) acc[h] = _mm256_fmadd_ps(s2, _mm256_cvtepi32_ps(is2), acc[h]);
                acc[h] = _mm256_fmadd_ps(grp_f16(mrow + gl, lanes), grp_f32(j->a.sx + a0 + gl, lanes), acc[h]);
            }
        }
    }
    /* 16 -> 8 -> 4 -> 2 -> 1, the model's order */
    __m256 h8 = _mm256_add_ps(acc[0], acc[1]);
    __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

INLINE_TGT void qgemm_planes(const okv_qmm_job *j, int n0, int n1, int bits, bool asym, bool two) {
    for (int t = 0; t < j->T; t++)
        for (int n = n0; n < n1; n++)
            j->y[(size_t)t * j->N + n] = qdot_avx2(j, n, t, bits, asym, two) + (j->bias ? j->bias[n] : 0.0f);
}

/* Two activation planes for 8-bit W and every T > 1, one for a 4-bit GEMV
 * (okv_qact_two_planes); each a separate instance, so the loops stay fixed. */
INLINE_TGT void qgemm_avx2(const okv_qmm_job *j, int n0, int n1, int bits, bool asym) {
    if (bits == 4 && !j->a.two) qgemm_planes(j, n0, n1, 4, asym, false);
    else qgemm_planes(j, n0, n1, bits, asym, true);
}

static TGT void gemm_q4s(const okv_qmm_job *j, int n0, int n1) { qgemm_avx2(j, n0, n1, 4, false); }
static TGT void gemm_q4a(const okv_qmm_job *j, int n0, int n1) { qgemm_avx2(j, n0, n1, 4, true); }
static TGT void gemm_q8s(const okv_qmm_job *j, int n0, int n1) { qgemm_avx2(j, n0, n1, 8, false); }
static TGT void gemm_q8a(const okv_qmm_job *j, int n0, int n1) { qgemm_avx2(j, n0, n1, 8, true); }

static const okv_qmm_ops ops_avx2[4] = {
    {quantize_avx2, gemm_q4s, gemm_q4s, false},
    {quantize_avx2, gemm_q4a, gemm_q4a, false},
    {quantize_avx2, gemm_q8s, gemm_q8s, false},
    {quantize_avx2, gemm_q8a, gemm_q8a, false},
};

const okv_qmm_ops *okv_qmm_ops_avx2(int bits, bool asym) { return &ops_avx2[(bits == 8 ? 2 : 0) + (asym ? 1 : 0)]; }

void okv_matmul_q_avx2(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                       const okv_qscheme *s, int N, const float *bias) {
    okv_qmm_run(tp, okv_qmm_ops_avx2(s->bits, s->asym), y, x, T, K, W, s, N, bias, false);
}
