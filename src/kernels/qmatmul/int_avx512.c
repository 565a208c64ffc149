/* qmatmul/int_avx512.c — the integer-dot quantized matmul (qmatmul/int_plain.c's
 * algorithm) with AVX-512 F/BW/VL and VNNI: vpdpbusd on 512-bit vectors.
 *
 * The W layout (okv_quant.c) is made for this loop: one 64-byte load of a
 * superblock unit holds 4 codes of each of 16 groups, and vpdpbusd (u8
 * codes x s8 activations, 4 products summed per 32-bit lane) accumulates
 * each group's exact integer dot product in its own lane. 4-bit codes come
 * two units per load (AND, shift+AND). Only at the end of a superblock are
 * the 16 lanes converted to f32 and scaled, with one vector of d * dx.
 *
 * Measurements and what was tried: docs/perf/kernel-history.md (qmatmul/int_avx512.c). */
#include <immintrin.h>
#include <math.h>
#include <float.h>
#include <stdlib.h>

#include "okv_kernels_internal.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLINE_TGT static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

bool okv_qmm_have_avx512vnni(void) {
    const okv_cpu_caps *c = okv_cpu();
    return c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx512vnni && c->fma && c->f16c;
}

/* ---- activations ------------------------------------------------------------- */

/* Row t of x -> two int8 planes in superblock order, dx, dx2, sums (exactly
 * the plain model's operations: max, f32 multiplies, round to nearest even). */
static TGT void quantize_avx512(const okv_qmm_job *j, const float *x, int t) {
    const int gs = j->w.group, G = j->w.groups;
    const bool one = !j->a.two;
    int8_t *q = j->a.q + (size_t)t * j->K, *q2 = j->a.q2 + (size_t)t * j->K;
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), fmax = _mm512_set1_ps(FLT_MAX);
    const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
    for (int g = 0; g < G; g++) {
        const float *xg = x + (size_t)g * gs;
        __m512 amax = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int i = 0; i < gs; i += 16) {
            __m512 a = _mm512_and_ps(_mm512_loadu_ps(xg + i), absmask);
            bad |= _mm512_cmp_ps_mask(a, fmax, _CMP_NLE_UQ); /* NaN or inf */
            amax = _mm512_max_ps(amax, a);
        }
        float am = _mm512_reduce_max_ps(amax);
        size_t stride, base = okv_qact_group_base(gs, G, g, &stride);
        size_t gi = (size_t)t * G + g;
        if (bad) {
            okv_qact_poison_group(j, t, g);
            continue;
        }
        float dxs = am / 127.0f;
        __m512 id = _mm512_set1_ps(am > 0.0f ? 127.0f / am : 0.0f), id2 = _mm512_set1_ps(am > 0.0f ? 32258.0f / am : 0.0f);
        __m512 dx = _mm512_set1_ps(dxs);
        __m512i sum = _mm512_setzero_si512(), sum2 = _mm512_setzero_si512();
        for (int i = 0; i < gs; i += 16) {
            __m512 xv = _mm512_loadu_ps(xg + i);
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(xv, id)), v2 = _mm512_setzero_si512();
            if (!one) {
                __m512 r = _mm512_sub_ps(xv, _mm512_mul_ps(_mm512_cvtepi32_ps(v), dx));
                v2 = _mm512_cvtps_epi32(_mm512_mul_ps(r, id2));
                v2 = _mm512_max_epi32(_mm512_min_epi32(v2, lim), nlim);
            }
            sum = _mm512_add_epi32(sum, v);
            sum2 = _mm512_add_epi32(sum2, v2);
            int32_t w[4], w2[4]; /* 4 units of 4 codes each */
            _mm_storeu_si128((__m128i *)w, _mm512_cvtsepi32_epi8(v));
            _mm_storeu_si128((__m128i *)w2, _mm512_cvtsepi32_epi8(v2));
            int u = i / 4;
            for (int k = 0; k < 4; k++) {
                memcpy(q + base + (u + k) * stride, &w[k], 4);
                memcpy(q2 + base + (u + k) * stride, &w2[k], 4);
            }
        }
        int32_t s1 = _mm512_reduce_add_epi32(sum), s2 = _mm512_reduce_add_epi32(sum2);
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

/* ---- the tile --------------------------------------------------------------------- */

/* acc += u8 c x s8 x per 32-bit lane, in place. GCC 12 compiles the
 * intrinsic's non-destructive form into a register copy per accumulator per
 * unit (16 vmovdqa64 per 8 vpdpbusd in the 4-row GEMV loop, measured with
 * perf annotate); the asm keeps each accumulator in its register. */
INLINE_TGT __m512i dpbusd(__m512i acc, __m512i c, __m512i x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(c), "v"(x));
    return acc;
}

/* Sum of 16 lanes, 16 -> 8 -> 4 -> 2 -> 1 (the plain model's order). */
INLINE_TGT float reduce16(__m512 a) {
    __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

/* A unit's bytes at p: a whole 64-byte vector (foldable into vpdpbusd as a
 * memory operand) in full superblocks, a masked load in the tail. */
INLINE_TGT __m512i ld_unit(const void *p, bool full, __mmask64 km) {
    return full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(km, p);
}

/* The model's per-group scales of one output's superblock: s = d dx and
 * s2 = d dx2 for activation row values at arow (lanes past lm: 0). */
INLINE_TGT void group_scales(const okv_qact *a, size_t arow, __mmask16 lm, __m512 dw, __m512 *s, __m512 *s2) {
    *s = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(lm, a->dx + arow));
    *s2 = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(lm, a->dx2 + arow));
}

/* Integer sums of one superblock: is / is2 [r][i] = W row r's codes . x row
 * i's planes q / q2, per group lane. */
INLINE_TGT void sb_sums(const uint8_t *const *c, const int8_t *const *xq, const int8_t *const *xq2, size_t us,
                        __mmask64 km, bool full, int gs, int RW, int RT, int bits, bool two, __m512i is[4][4],
                        __m512i is2[4][4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i xa[4], xb[4];
    if (bits == 4) {
        for (int p = 0; p < gs / 8; p++) {
            __m512i lo[4], hi[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                if (r >= RW) continue;
                __m512i wv = ld_unit(c[r] + p * us, full, km);
                lo[r] = _mm512_and_si512(wv, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) { /* the low nibbles' unit, then the high ones' */
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    if (i >= RT) continue;
                    xa[i] = ld_unit(xq[i] + (2 * p + h) * us, full, km);
                    if (two) xb[i] = ld_unit(xq2[i] + (2 * p + h) * us, full, km);
                }
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    if (r >= RW) continue;
                    __m512i wv = h ? hi[r] : lo[r];
#pragma GCC unroll 4
                    for (int i = 0; i < 4; i++) {
                        if (i >= RT) continue;
                        is[r][i] = dpbusd(is[r][i], wv, xa[i]);
                        if (two) is2[r][i] = dpbusd(is2[r][i], wv, xb[i]); /* else is2 stays 0, as q2 is */
                    }
                }
            }
        }
    } else {
        for (int u = 0; u < gs / 4; u++) {
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                if (i >= RT) continue;
                xa[i] = ld_unit(xq[i] + u * us, full, km);
                xb[i] = ld_unit(xq2[i] + u * us, full, km);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                if (r >= RW) continue;
                __m512i wv = ld_unit(c[r] + u * us, full, km);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    if (i >= RT) continue;
                    is[r][i] = dpbusd(is[r][i], wv, xa[i]);
                    is2[r][i] = dpbusd(is2[r][i], wv, xb[i]);
                }
            }
        }
    }
}

/* y[t0 + i, n0 + r] for r < RW, i < RT (both <= 4): W rows n0.. times
 * activation rows t0.. over all of K. RW, RT, bits, asym are constants
 * after inlining; 2 x RW x RT int32 accumulators. */
INLINE_TGT void qtile_sbs(const okv_qmm_job *j, int n0, int t0, int RW, int RT, int bits, bool asym, bool two,
                          int gstart, __m512 acc[4][4]) {
    const okv_qview *w = &j->w;
    const int gs = w->group, G = w->groups, K = j->K;
    for (int g0 = gstart; g0 < G; g0 += OKV_QSB_GROUPS) {
        const int L = G - g0 < OKV_QSB_GROUPS ? G - g0 : OKV_QSB_GROUPS;
        const size_t us = (size_t)4 * L; /* bytes per unit */
        const __mmask64 km = L == OKV_QSB_GROUPS ? ~(__mmask64)0 : ((__mmask64)1 << us) - 1;
        const __mmask16 lm = (__mmask16)((1u << L) - 1);
        const uint8_t *c[4];
        const int8_t *xq[4], *xq2[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            c[r] = w->codes + (size_t)(n0 + (r < RW ? r : 0)) * w->code_stride + (size_t)g0 * gs * bits / 8;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            size_t o = (size_t)(t0 + (i < RT ? i : 0)) * K + (size_t)g0 * gs;
            xq[i] = j->a.q + o;
            xq2[i] = j->a.q2 + o;
        }
        __m512i is[4][4], is2[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) is[r][i] = is2[r][i] = _mm512_setzero_si512();
        if (L == OKV_QSB_GROUPS) sb_sums(c, xq, xq2, us, km, true, gs, RW, RT, bits, two, is, is2);
        else sb_sums(c, xq, xq2, us, km, false, gs, RW, RT, bits, two, is, is2);
        /* scales: lane l of everything below is group g0 + l (0 past L) */
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= RW) continue;
            size_t srow = (size_t)(n0 + r) * w->scale_stride + g0;
            __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm, w->d + srow));
            __m512 mw = asym ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm, w->m + srow)) : _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                if (i >= RT) continue;
                size_t arow = (size_t)(t0 + i) * G + g0;
                __m512 s, s2;
                group_scales(&j->a, arow, lm, dw, &s, &s2);
                if (!asym) {
                    __m512i qs = _mm512_maskz_loadu_epi32(lm, j->a.qsum + arow);
                    __m512i qs2 = _mm512_maskz_loadu_epi32(lm, j->a.qsum2 + arow);
                    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(is[r][i], _mm512_slli_epi32(qs, bits - 1)));
                    __m512 v2 = _mm512_cvtepi32_ps(_mm512_sub_epi32(is2[r][i], _mm512_slli_epi32(qs2, bits - 1)));
                    acc[r][i] = _mm512_fmadd_ps(s, v, acc[r][i]);
                    if (two) acc[r][i] = _mm512_fmadd_ps(s2, v2, acc[r][i]);
                } else {
                    acc[r][i] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(is[r][i]), acc[r][i]);
                    if (two) acc[r][i] = _mm512_fmadd_ps(s2, _mm512_cvtepi32_ps(is2[r][i]), acc[r][i]);
                    acc[r][i] = _mm512_fmadd_ps(mw, _mm512_maskz_loadu_ps(lm, j->a.sx + arow), acc[r][i]);
                }
            }
        }
    }
}

INLINE_TGT void qtile(const okv_qmm_job *j, int n0, int t0, int RW, int RT, int bits, bool asym, bool two) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) acc[r][i] = _mm512_setzero_ps();
    qtile_sbs(j, n0, t0, RW, RT, bits, asym, two, 0, acc);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r >= RW) continue;
        float b = j->bias ? j->bias[n0 + r] : 0.0f;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            if (i < RT) j->y[(size_t)(t0 + i) * j->N + n0 + r] = reduce16(acc[r][i]) + b;
    }
}

/* Software prefetch distance of the decode GEMV along each W row stream. */
enum { GEMV_PF_BYTES = 2048 };

/* Decode, one superblock of RW W rows against the single x row (full
 * superblocks only: 16 lanes, 64-byte units). Each x unit is loaded once
 * for the RW rows. 4-bit: lo = c & 0x0f and hi16 = c & 0xf0 (= 16 hi, no
 * shift) go to two accumulators, isum = ilo + (ihi16 >> 4), exact; the
 * symmetric offset is the accumulators' start value -2^(bits-1) qsum, so
 * isum - off qsum comes out of the dots as in the model. */
INLINE_TGT void gemv_sb(const okv_qmm_job *j, int n0, int g0, int RW, int bits, bool asym, __m512 *acc) {
    const okv_qview *w = &j->w;
    const int gs = w->group;
    const size_t us = 64, sb_bytes = (size_t)OKV_QSB_GROUPS * gs * bits / 8, o0 = (size_t)g0 * gs * bits / 8;
    const uint8_t *c[4], *pf[4];
    /* prefetch: the superblock GEMV_PF_BYTES further along each row, or as
     * far into the row RW rows below once that passes the row's end (the
     * next pass's rows); whole superblocks, so the choice is per superblock */
    size_t dist = GEMV_PF_BYTES / sb_bytes * sb_bytes;
    dist = dist < sb_bytes ? sb_bytes : dist > w->code_stride ? w->code_stride : dist;
    const size_t pf_off = dist + (o0 + dist >= w->code_stride ? (size_t)(RW - 1) * w->code_stride : 0);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        if (r < RW) {
            c[r] = w->codes + (size_t)(n0 + r) * w->code_stride + o0;
            pf[r] = c[r] + pf_off;
        }
    const int8_t *xq = j->a.q + (size_t)g0 * gs, *xq2 = j->a.q2 + (size_t)g0 * gs;
    __m512i start = _mm512_setzero_si512(), start2 = _mm512_setzero_si512();
    if (!asym) {
        start = _mm512_sub_epi32(start, _mm512_slli_epi32(_mm512_loadu_si512(j->a.qsum + g0), bits - 1));
        if (bits == 8) start2 = _mm512_sub_epi32(start2, _mm512_slli_epi32(_mm512_loadu_si512(j->a.qsum2 + g0), bits - 1));
    }
    /* [r]: plane q, plane q2; 4-bit also the high-nibble halves ih, ih2 */
    __m512i ia[4], ia2[4], ih[4], ih2[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        ia[r] = start;
        ia2[r] = start2;
        ih[r] = ih2[r] = _mm512_setzero_si512();
    }
    if (bits == 4) { /* T = 1: one activation plane (okv_qact_two_planes) */
        const __m512i m4 = _mm512_set1_epi8(0x0f), m4h = _mm512_set1_epi8((char)0xf0);
        for (int p = 0; p < gs / 8; p++) {
            __m512i xa = _mm512_loadu_si512(xq + 2 * p * us), xb = _mm512_loadu_si512(xq + (2 * p + 1) * us);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                if (r >= RW) continue;
                if (RW > 1) _mm_prefetch((const char *)pf[r] + p * us, _MM_HINT_T0);
                __m512i wv = _mm512_loadu_si512(c[r] + p * us);
                ia[r] = dpbusd(ia[r], _mm512_and_si512(wv, m4), xa);
                ih[r] = dpbusd(ih[r], _mm512_and_si512(wv, m4h), xb);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) ia[r] = _mm512_add_epi32(ia[r], _mm512_srai_epi32(ih[r], 4));
    } else {
        for (int u = 0; u < gs / 4; u++) {
            __m512i xa = _mm512_loadu_si512(xq + u * us), ya = _mm512_loadu_si512(xq2 + u * us);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                if (r >= RW) continue;
                if (RW > 1) _mm_prefetch((const char *)pf[r] + u * us, _MM_HINT_T0);
                __m512i wv = _mm512_loadu_si512(c[r] + u * us);
                ia[r] = dpbusd(ia[r], wv, xa);
                ia2[r] = dpbusd(ia2[r], wv, ya);
            }
        }
    }
    __m512 dx = _mm512_loadu_ps(j->a.dx + g0), dx2 = _mm512_loadu_ps(j->a.dx2 + g0);
    __m512 sx = asym ? _mm512_loadu_ps(j->a.sx + g0) : dx;
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r >= RW) continue;
        size_t srow = (size_t)(n0 + r) * w->scale_stride + g0;
        if (RW > 1) { /* the scale planes of the next pass */
            _mm_prefetch((const char *)(w->d + srow + (size_t)RW * w->scale_stride), _MM_HINT_T0);
            if (asym) _mm_prefetch((const char *)(w->m + srow + (size_t)RW * w->scale_stride), _MM_HINT_T0);
        }
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w->d + srow)));
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(ia[r]), acc[r]);
        if (bits == 8) acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx2), _mm512_cvtepi32_ps(ia2[r]), acc[r]);
        if (asym)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w->m + srow))), sx, acc[r]);
    }
}

/* Row n's superblocks from g0 on (the tail) added to acc, reduced. */
INLINE_TGT float gemv_tail(const okv_qmm_job *j, int n, int g0, int bits, bool asym, __m512 acc) {
    __m512 a[4][4];
    a[0][0] = acc;
    qtile_sbs(j, n, 0, 1, 1, bits, asym, bits == 8, g0, a); /* T = 1: two planes for 8-bit W only */
    return reduce16(a[0][0]);
}

/* y[n0 + r] for r < RW (<= 4): the full superblocks here, a tail
 * superblock (fewer than 16 groups) through qtile's masked code, which
 * does the model's operations in the same order. */
INLINE_TGT void gemv_rows(const okv_qmm_job *j, int n0, int RW, int bits, bool asym) {
    const int G = j->w.groups;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    int g0 = 0;
    for (; g0 + OKV_QSB_GROUPS <= G; g0 += OKV_QSB_GROUPS) gemv_sb(j, n0, g0, RW, bits, asym, acc);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        if (r >= RW) continue;
        float v = g0 < G ? gemv_tail(j, n0 + r, g0, bits, asym, acc[r]) : reduce16(acc[r]);
        j->y[n0 + r] = v + (j->bias ? j->bias[n0 + r] : 0.0f);
    }
}

/* Decode: rows [n0, n1) in tiles of GEMV_RW rows, then single rows. */
enum { GEMV_RW = 4 };

INLINE_TGT void qgemv(const okv_qmm_job *j, int n0, int n1, int bits, bool asym) {
    int n = n0;
    for (; n + GEMV_RW <= n1; n += GEMV_RW) gemv_rows(j, n, GEMV_RW, bits, asym);
    for (; n < n1; n++) gemv_rows(j, n, 1, bits, asym);
}

/* Prefill: GEMM_RW W rows x GEMM_RT x rows per tile; each W unit is
 * unpacked once for GEMM_RT rows of x. */
enum { GEMM_RW = 2, GEMM_RT = 4 };

INLINE_TGT void qgemm_rows(const okv_qmm_job *j, int n0, int n1, int t0, int RT, int bits, bool asym, bool two) {
    int n = n0;
    for (; n + GEMM_RW <= n1; n += GEMM_RW) qtile(j, n, t0, GEMM_RW, RT, bits, asym, two);
    for (; n < n1; n++) qtile(j, n, t0, 1, RT, bits, asym, two);
}

/* Prefill has both activation planes (okv_qact_two_planes: T > 1); the
 * one-plane instance serves a 4-bit T = 1 call routed here. */
/* x rows [t0, t1): tiles of GEMM_RT rows, then single rows. */
INLINE_TGT void qgemm_span(const okv_qmm_job *j, int n0, int n1, int t0, int t1, int bits, bool asym, bool two) {
    int t = t0;
    for (; t + GEMM_RT <= t1; t += GEMM_RT) qgemm_rows(j, n0, n1, t, GEMM_RT, bits, asym, two);
    for (; t < t1; t++) qgemm_rows(j, n0, n1, t, 1, bits, asym, two);
}

INLINE_TGT void qgemm_planes(const okv_qmm_job *j, int n0, int n1, int bits, bool asym, bool two) {
    qgemm_span(j, n0, n1, 0, j->T, bits, asym, two);
}

INLINE_TGT void qgemm(const okv_qmm_job *j, int n0, int n1, int bits, bool asym) {
    if (bits == 4 && !j->a.two) qgemm_planes(j, n0, n1, 4, asym, false);
    else qgemm_planes(j, n0, n1, bits, asym, true);
}

/* ---- prefill on row pairs (okv_qact_pack_rows) ---------------------------- */

/* Tiles of 6 W rows x 2 x rows (RW x RT). Per x unit the RT rows' two
 * planes (RT x 2 vectors) are loaded once, in sequence, and each W row's
 * unit once: RW + 2 RT loads per 2 RW RT vpdpbusd, with 2 RW RT int32
 * accumulators (24) + 4 x + W, and for 4-bit W the nibble mask and the
 * unpacked unit: 31 of 32 zmm. The f32 accumulators live in memory between
 * superblocks. Symmetric W starts each integer sum at -2^(bits-1) qsum
 * (the model's offset, applied before the dots instead of after: the same
 * int32). Why (bench/kernels, one core, data in L1/L2, CPU time): the
 * 2 x 4 tile on the row planes issued 10 loads from 8 streams per 16
 * dots and ran at 60% of the probe's vpdpbusd rate when fed from L1 (in
 * the kernel, with its epilogue, ~30%); from one sequential stream 6 x 2
 * ran at 85% (L1) and 72-75% with W streamed from L2 (standalone loops). */
enum { PAIR_RW = 6 };

/* One x unit of a pair tile: is / is2 [r][i] += W row r's codes (the unit
 * at c[r] + woff; nib 1 / 2: its low / high nibbles) . x row i's planes
 * q / q2 (the 256-byte block at xu), per group lane. */
INLINE_TGT void psum_unit(const uint8_t *const *c, const int8_t *xu, size_t woff, __mmask64 km,
                          bool full, int RW, int RT, int nib, __m512i is[][2], __m512i is2[][2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i xa[2], xb[2];
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        if (i >= RT) continue;
        xa[i] = _mm512_load_si512(xu + i * 64);
        xb[i] = _mm512_load_si512(xu + 128 + i * 64);
    }
#pragma GCC unroll 6
    for (int r = 0; r < PAIR_RW; r++) {
        if (r >= RW) continue;
        __m512i wv = ld_unit(c[r] + woff, full, km);
        if (nib == 1) wv = _mm512_and_si512(wv, m4);
        if (nib == 2) wv = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            if (i >= RT) continue;
            is[r][i] = dpbusd(is[r][i], wv, xa[i]);
            is2[r][i] = dpbusd(is2[r][i], wv, xb[i]);
        }
    }
}

/* One superblock of a pair tile (ups x units of us bytes of each W row). */
INLINE_TGT void psums(const uint8_t *const *c, const int8_t *xs, size_t us, __mmask64 km, bool full, int ups,
                      int RW, int RT, int bits, __m512i is[][2], __m512i is2[][2]) {
    if (bits == 8) {
        for (int u = 0; u < ups; u++) psum_unit(c, xs + (size_t)u * 256, u * us, km, full, RW, RT, 0, is, is2);
    } else { /* W unit p: its low nibbles meet x unit 2p, its high ones x unit 2p + 1 */
        for (int p = 0; p < ups / 2; p++) {
            psum_unit(c, xs + (size_t)(2 * p) * 256, p * us, km, full, RW, RT, 1, is, is2);
            psum_unit(c, xs + (size_t)(2 * p + 1) * 256, p * us, km, full, RW, RT, 2, is, is2);
        }
    }
}

INLINE_TGT void ptile(const okv_qmm_job *j, int n0, int t0, int RW, int RT, int bits, bool asym) {
    const okv_qview *w = &j->w;
    const int gs = w->group, G = w->groups, ups = gs / 4;
    const int8_t *xpair = j->a.xp + (size_t)(t0 / 2) * j->a.xp_pair_bytes;
    __m512 acc[PAIR_RW][2];
#pragma GCC unroll 6
    for (int r = 0; r < PAIR_RW; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int g0 = 0; g0 < G; g0 += OKV_QSB_GROUPS) {
        const int L = G - g0 < OKV_QSB_GROUPS ? G - g0 : OKV_QSB_GROUPS;
        const size_t us = (size_t)4 * L;
        const bool full = L == OKV_QSB_GROUPS;
        const __mmask64 km = full ? ~(__mmask64)0 : ((__mmask64)1 << us) - 1;
        const __mmask16 lm = (__mmask16)((1u << L) - 1);
        const uint8_t *c[PAIR_RW];
#pragma GCC unroll 6
        for (int r = 0; r < PAIR_RW; r++)
            c[r] = w->codes + (size_t)(n0 + (r < RW ? r : 0)) * w->code_stride + (size_t)g0 * gs * bits / 8;
        __m512i is[PAIR_RW][2], is2[PAIR_RW][2];
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            if (i >= RT) continue;
            __m512i st = _mm512_setzero_si512(), st2 = _mm512_setzero_si512();
            if (!asym) {
                size_t arow = (size_t)(t0 + i) * G + g0;
                st = _mm512_sub_epi32(st, _mm512_slli_epi32(_mm512_maskz_loadu_epi32(lm, j->a.qsum + arow), bits - 1));
                st2 = _mm512_sub_epi32(st2, _mm512_slli_epi32(_mm512_maskz_loadu_epi32(lm, j->a.qsum2 + arow), bits - 1));
            }
#pragma GCC unroll 6
            for (int r = 0; r < PAIR_RW; r++) {
                is[r][i] = st;
                is2[r][i] = st2;
            }
        }
        const int8_t *xs = xpair + (size_t)(g0 / OKV_QSB_GROUPS) * ups * 256;
        if (full) psums(c, xs, us, km, true, ups, RW, RT, bits, is, is2);
        else psums(c, xs, us, km, false, ups, RW, RT, bits, is, is2);
        /* the model's epilogue: lane l is group g0 + l (0 past L) */
#pragma GCC unroll 6
        for (int r = 0; r < PAIR_RW; r++) {
            if (r >= RW) continue;
            size_t srow = (size_t)(n0 + r) * w->scale_stride + g0;
            __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm, w->d + srow));
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                if (i >= RT) continue;
                size_t arow = (size_t)(t0 + i) * G + g0;
                __m512 s, s2;
                group_scales(&j->a, arow, lm, dw, &s, &s2);
                acc[r][i] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(is[r][i]), acc[r][i]);
                acc[r][i] = _mm512_fmadd_ps(s2, _mm512_cvtepi32_ps(is2[r][i]), acc[r][i]);
                if (asym) {
                    __m512 mw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm, w->m + srow));
                    acc[r][i] = _mm512_fmadd_ps(mw, _mm512_maskz_loadu_ps(lm, j->a.sx + arow), acc[r][i]);
                }
            }
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < PAIR_RW; r++) {
        if (r >= RW) continue;
        float b = j->bias ? j->bias[n0 + r] : 0.0f;
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++)
            if (i < RT) j->y[(size_t)(t0 + i) * j->N + n0 + r] = reduce16(acc[r][i]) + b;
    }
}

/* The row-plane tiles with both planes over x rows [t0, t1), one copy per
 * scheme (pgemm's leftovers and the calls without row pairs share it). */
typedef void (*span_fn)(const okv_qmm_job *j, int n0, int n1, int t0, int t1);
#define SPAN_FN(name, bits, asym)                                                              \
    static TGT __attribute__((noinline)) void name(const okv_qmm_job *j, int n0, int n1, int t0, int t1) { \
        qgemm_span(j, n0, n1, t0, t1, bits, asym, true);                                        \
    }
SPAN_FN(span_q4s, 4, false)
SPAN_FN(span_q4a, 4, true)
SPAN_FN(span_q8s, 8, false)
SPAN_FN(span_q8a, 8, true)

/* Each pair of x rows stays in L1 while the task's block of W rows (in L2)
 * streams past it, 6 rows a tile (okv_qmm_run makes the blocks multiples
 * of 12). The rest runs the row-plane tiles (span): an odd T's last row,
 * and a block's last N % 6 W rows for all T. One tile shape keeps the code
 * small: every instance of the unrolled loops is a copy, and clang with
 * the fuzz build's sanitizers already needed ~6 minutes and ~4 GiB for
 * this file before these tiles (a version with the leftovers inlined took
 * ~10 minutes and 6 GiB). */
INLINE_TGT void pgemm(const okv_qmm_job *j, int n0, int n1, int bits, bool asym, span_fn span) {
    const int n6 = n0 + (n1 - n0) / PAIR_RW * PAIR_RW;
    int t = 0;
    for (; t + 2 <= j->T; t += 2)
        for (int n = n0; n < n6; n += PAIR_RW) ptile(j, n, t, PAIR_RW, 2, bits, asym);
    if (t < j->T && n0 < n6) span(j, n0, n6, t, j->T);
    if (n6 < n1) span(j, n6, n1, 0, j->T);
}

/* A 4-bit GEMV with two activation planes (the deterministic table's, whose
 * bits must not depend on T) runs as a 1-row GEMM: gemv_sb has one plane. */
static TGT void gemv_q4s(const okv_qmm_job *j, int n0, int n1) {
    if (j->a.two) qgemm(j, n0, n1, 4, false);
    else qgemv(j, n0, n1, 4, false);
}
static TGT void gemv_q4a(const okv_qmm_job *j, int n0, int n1) {
    if (j->a.two) qgemm(j, n0, n1, 4, true);
    else qgemv(j, n0, n1, 4, true);
}
static TGT void gemv_q8s(const okv_qmm_job *j, int n0, int n1) { qgemv(j, n0, n1, 8, false); }
static TGT void gemv_q8a(const okv_qmm_job *j, int n0, int n1) { qgemv(j, n0, n1, 8, true); }
/* The same GEMVs one W row per pass: one sequential stream per thread and
 * no software prefetch (gemv_sb prefetches only for RW > 1), which is what
 * Zen 4's prefetchers want (see okv_matmul_q_avx512vnni_1row). */
INLINE_TGT void qgemv_1row(const okv_qmm_job *j, int n0, int n1, int bits, bool asym) {
    for (int n = n0; n < n1; n++) gemv_rows(j, n, 1, bits, asym);
}
static TGT void gemv1_q4s(const okv_qmm_job *j, int n0, int n1) {
    if (j->a.two) qgemm(j, n0, n1, 4, false);
    else qgemv_1row(j, n0, n1, 4, false);
}
static TGT void gemv1_q4a(const okv_qmm_job *j, int n0, int n1) {
    if (j->a.two) qgemm(j, n0, n1, 4, true);
    else qgemv_1row(j, n0, n1, 4, true);
}
static TGT void gemv1_q8s(const okv_qmm_job *j, int n0, int n1) { qgemv_1row(j, n0, n1, 8, false); }
static TGT void gemv1_q8a(const okv_qmm_job *j, int n0, int n1) { qgemv_1row(j, n0, n1, 8, true); }
/* Prefill reads the row pairs when okv_qmm_run made them (T > 1, two
 * planes); without them (a one-row call) the row-plane tiles run. */
#define GEMM_FN(name, span, bits, asym)                                  \
    static TGT void name(const okv_qmm_job *j, int n0, int n1) {        \
        if (j->a.xp) pgemm(j, n0, n1, bits, asym, span);                \
        else span(j, n0, n1, 0, j->T);                                  \
    }
GEMM_FN(gemm_q4s, span_q4s, 4, false)
GEMM_FN(gemm_q4a, span_q4a, 4, true)
GEMM_FN(gemm_q8s, span_q8s, 8, false)
GEMM_FN(gemm_q8a, span_q8a, 8, true)

static const okv_qmm_ops ops_avx512[4] = {
    {quantize_avx512, gemv_q4s, gemm_q4s, true},
    {quantize_avx512, gemv_q4a, gemm_q4a, true},
    {quantize_avx512, gemv_q8s, gemm_q8s, true},
    {quantize_avx512, gemv_q8a, gemm_q8a, true},
};

static const okv_qmm_ops ops_avx512_1row[4] = {
    {quantize_avx512, gemv1_q4s, gemm_q4s, true},
    {quantize_avx512, gemv1_q4a, gemm_q4a, true},
    {quantize_avx512, gemv1_q8s, gemm_q8s, true},
    {quantize_avx512, gemv1_q8a, gemm_q8a, true},
};

const okv_qmm_ops *okv_qmm_ops_avx512vnni(int bits, bool asym) {
    return &ops_avx512[(bits == 8 ? 2 : 0) + (asym ? 1 : 0)];
}

void okv_matmul_q_avx512vnni(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                             const okv_qscheme *s, int N, const float *bias) {
    const okv_qmm_ops *ops = &ops_avx512[(s->bits == 8 ? 2 : 0) + (s->asym ? 1 : 0)];
    okv_qmm_run(tp, ops, y, x, T, K, W, s, N, bias, false);
}

void okv_matmul_q_avx512vnni_1row(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                  const okv_qscheme *s, int N, const float *bias) {
    const okv_qmm_ops *ops = &ops_avx512_1row[(s->bits == 8 ? 2 : 0) + (s->asym ? 1 : 0)];
    okv_qmm_run(tp, ops, y, x, T, K, W, s, N, bias, false);
}

/* ---- the f32 alternative (measured, not dispatched) ------------------------------ */

/* Dequantizing to f32 in registers instead: codes -> f32 and one FMA with
 * f32 x per element. Kept to measure against the integer path (bench_kernels
 * qgemv) and tested against the reference. x is permuted into superblock
 * order once per row; each 64-code unit becomes 4 vectors (groups 4k..4k+3,
 * 4 codes each), summed per group at the end of the superblock. Tail
 * superblocks (fewer than 16 groups) run in scalar code. */
typedef struct qf32_job {
    float *y;
    const float *xp, *xs; /* [K] permuted x, [G] per-group sums of x */
    int K, N, t, T;
    okv_qview w;
    const float *bias;
    int parts;
} qf32_job;

INLINE_TGT __m512 group_sums(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 c[4] = {a0, a1, a2, a3};
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        c[k] = _mm512_add_ps(c[k], _mm512_permute_ps(c[k], _MM_SHUFFLE(2, 3, 0, 1)));
        c[k] = _mm512_add_ps(c[k], _mm512_permute_ps(c[k], _MM_SHUFFLE(1, 0, 3, 2)));
    }
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    __m512 p01 = _mm512_permutex2var_ps(c[0], idx, c[1]), p23 = _mm512_permutex2var_ps(c[2], idx, c[3]);
    return _mm512_shuffle_f32x4(p01, p23, _MM_SHUFFLE(1, 0, 1, 0));
}

INLINE_TGT __m512 unit_fma(__m512i codes, const float *x, __m512 *A) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m128i b = k == 0 ? _mm512_castsi512_si128(codes) : k == 1 ? _mm512_extracti32x4_epi32(codes, 1)
                  : k == 2 ? _mm512_extracti32x4_epi32(codes, 2) : _mm512_extracti32x4_epi32(codes, 3);
        A[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)), _mm512_loadu_ps(x + 16 * k), A[k]);
    }
    return A[0];
}

INLINE_TGT float qf32_row(const qf32_job *j, int n, int bits) {
    const okv_qview *w = &j->w;
    const int gs = w->group, G = w->groups;
    const uint8_t *crow = w->codes + (size_t)n * w->code_stride;
    const uint16_t *drow = w->d + (size_t)n * w->scale_stride, *mrow = w->m ? w->m + (size_t)n * w->scale_stride : NULL;
    const float off = w->asym ? 0.0f : (float)(1 << (bits - 1));
    __m512 acc = _mm512_setzero_ps();
    float tail = 0.0f;
    int g0 = 0;
    for (; g0 + OKV_QSB_GROUPS <= G; g0 += OKV_QSB_GROUPS) {
        const uint8_t *c = crow + (size_t)g0 * gs * bits / 8;
        const float *xp = j->xp + (size_t)g0 * gs;
        __m512 A[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        if (bits == 4) {
            const __m512i m4 = _mm512_set1_epi8(0x0f);
            for (int p = 0; p < gs / 8; p++) {
                __m512i wv = _mm512_loadu_si512(c + 64 * p);
                unit_fma(_mm512_and_si512(wv, m4), xp + 128 * p, A);
                unit_fma(_mm512_and_si512(_mm512_srli_epi16(wv, 4), m4), xp + 128 * p + 64, A);
            }
        } else {
            for (int u = 0; u < gs / 4; u++) unit_fma(_mm512_loadu_si512(c + 64 * u), xp + 64 * u, A);
        }
        __m512 S = group_sums(A[0], A[1], A[2], A[3]), xs = _mm512_loadu_ps(j->xs + g0);
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(drow + g0)));
        if (mrow) {
            acc = _mm512_fmadd_ps(dw, S, acc);
            acc = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mrow + g0))), xs, acc);
        } else {
            acc = _mm512_fmadd_ps(dw, _mm512_fnmadd_ps(_mm512_set1_ps(off), xs, S), acc);
        }
    }
    if (g0 < G) { /* tail superblock: L lanes, scalar */
        int L = G - g0;
        const uint8_t *c = crow + (size_t)g0 * gs * bits / 8;
        const float *xp = j->xp + (size_t)g0 * gs;
        for (int l = 0; l < L; l++) {
            float sc = 0.0f;
            for (int u = 0; u < gs / 4; u++)
                for (int i = 0; i < 4; i++) {
                    int e = 4 * l + i;
                    int code = bits == 8 ? c[u * 4 * L + e] : (c[(u / 2) * 4 * L + e] >> ((u & 1) * 4)) & 15;
                    sc += (float)code * xp[u * 4 * L + e];
                }
            float d = okv_k_f16(drow[g0 + l]), xs = j->xs[g0 + l];
            tail += mrow ? d * sc + okv_k_f16(mrow[g0 + l]) * xs : d * (sc - off * xs);
        }
    }
    return reduce16(acc) + tail;
}

static TGT void qf32_task(void *ctx, int task, int thread) {
    (void)thread;
    const qf32_job *j = ctx;
    int per = (j->N + j->parts - 1) / j->parts, n0 = task * per, n1 = n0 + per < j->N ? n0 + per : j->N;
    for (int n = n0; n < n1; n++) {
        float v = j->w.bits == 4 ? qf32_row(j, n, 4) : qf32_row(j, n, 8);
        j->y[(size_t)j->t * j->N + n] = v + (j->bias ? j->bias[n] : 0.0f);
    }
}

void okv_matmul_q_avx512_f32(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                             const okv_qscheme *s, int N, const float *bias) {
    if (T <= 0 || N <= 0) return;
    qf32_job j = {y, NULL, NULL, K, N, 0, T, okv_quant_view(s, W, N, K), bias, okv_threadpool_size(tp)};
    const int gs = s->group, G = j.w.groups;
    okv_kscratch ks;
    float *xp = okv_kscratch_get(&ks, tp, sizeof(float) * ((size_t)K + G));
    if (!xp) {
        okv_qmm_fail(y, T, N);
        return;
    }
    float *xs = xp + K;
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * K;
        for (int g = 0; g < G; g++) {
            int sb = g / OKV_QSB_GROUPS, l = g % OKV_QSB_GROUPS;
            int L = G - sb * OKV_QSB_GROUPS < OKV_QSB_GROUPS ? G - sb * OKV_QSB_GROUPS : OKV_QSB_GROUPS;
            float sum = 0.0f;
            for (int i = 0; i < gs; i++) {
                xp[(size_t)sb * OKV_QSB_GROUPS * gs + (i / 4) * 4 * L + 4 * l + i % 4] = xr[(size_t)g * gs + i];
                sum += xr[(size_t)g * gs + i];
            }
            xs[g] = sum;
        }
        j.xp = xp;
        j.xs = xs;
        j.t = t;
        okv_threadpool_run(tp, j.parts, qf32_task, &j);
    }
    okv_kscratch_release(&ks);
}
