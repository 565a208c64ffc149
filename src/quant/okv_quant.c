/* okv_quant.c — the in-memory layout of a quantized matrix, and the
 * conversions into it (quantize, pack) and out of it (dequantize a row).
 *
 * Layout of W[N, K] (G = K / group groups per row), three planes:
 *     codes  [N][K * bits / 8]   bytes, order below
 *     d      [N][G]              f16 scales, group order
 *     m      [N][G]              f16 offsets, group order (asymmetric only)
 * Inside a row the groups are taken 16 at a time ("superblocks"; the last
 * one has the remaining L = G mod 16 groups). A superblock's codes are
 * stored in units of 4 consecutive codes per group, interleaved across its
 * groups: unit u (u < group/4) holds codes 4u..4u+3 of group 0, then of
 * group 1, ... group L-1 (4L bytes). So one 64-byte vector of a unit puts
 * group l's codes in 32-bit lane l, and vpdpbusd (4 byte products summed
 * into each 32-bit lane) accumulates every group's integer dot product in
 * its own lane, with no horizontal sums or shuffles until the superblock's
 * 16 scales are applied with one vector multiply. AVX2 reads the same
 * units as two 8-lane halves. 4-bit codes pack units in pairs: byte b of
 * pair p is unit 2p's byte b in the low nibble and unit 2p+1's in the high
 * one, so one load, an AND and a shift give two whole units.
 *
 * Planes rather than blocks interleaved with their scales: the kernels read
 * a superblock's 16 scales as one 32-byte vector, and the codes plane keeps
 * every row 64-byte aligned when K is a multiple of 128 (q4) / 64 (q8).
 * The alternative measured with the same kernel (bench_kernels qlayout:
 * rows carrying their own [codes][d][m], one stream per thread) could not
 * be told apart on this machine the day it was measured: 2 vCPUs at load
 * ~17, where the medians of 25 (planes vs per-row, us) moved with the
 * scheduler's 8 ms slices (e.g. 2048x8192 q4: 10337 vs 7891, 2048x2048 q4:
 * 17438 vs 7997) rather than with the layout; with W in L2 the two are the
 * same instructions. Planes stay (aligned rows, one scale load per
 * superblock, dequantizing a row touches one contiguous run); re-measure
 * with qlayout on a quiet machine before the format freezes.
 *
 * Quantization, per group: start from the range rule, then search for the
 * d (and m) that minimise the group's squared error. Codes are always
 * computed from the *stored* f16 values, and every candidate is judged
 * after that rounding, so the error measured is the error the kernels see.
 *   range rule, symmetric:  d = max|w| / (2^(bits-1) - 1) rounded up to
 *               f16, c = 2^(bits-1) + round(w / d): no element clips, error
 *               <= d/2 (code 0, c - 2^(bits-1) = -2^(bits-1), unused);
 *   range rule, asymmetric: m = min w rounded down to f16, d = (max - m) /
 *               (2^bits - 1) rounded up, c = round((w - m) / d); error <= d/2
 *               even when d lands in f16's subnormal range.
 *   search: steps span / (q + 0.1 i), q = 2^bits - 1 (asym, span = max - m)
 *               or 2^(bits-1) - 1 (sym, span = max|w|), i = -4 .. 20 for 4
 *               bits (0.4 i, i = -4 .. 8 for 8 bits), i.e. ~0.88-1.03x
 *               (asym) / ~0.78-1.06x (sym) the range step; each step's codes
 *               are refitted by least squares (d = cov(q, w) / var(q), m =
 *               mean(w - d q); symmetric: d = sum qw / sum qq), and the
 *               refitted pair is the candidate; symmetric codes may use
 *               -2^(bits-1) once the step shrinks. The range rule's pair is
 *               kept unless a candidate is strictly better, so a group never
 *               gets worse than round to nearest (and a Q4_1 / Q8_0 block
 *               dequantized and quantized again comes back exactly: its
 *               error is already 0). Shrunk steps clip the extremes a little
 *               (tests: at most 2 range steps per element). A wider grid
 *               (i up to 24 / 12, each step also tried without its refit)
 *               found the same errors on the tests' data at twice the cost.
 *               One pass over the group per step gives both refits' sums
 *               (step_sums), in eight float lanes with min / max clamps and
 *               a library-free rounding (round_code), so the loops vectorise:
 *               bench_quant's 4w g32 with importance went 320 -> 115 ns per
 *               weight on one Zen 4 core, the same squared error.
 * Measured (tests/quant, bell-shaped groups): squared error 0.73-0.88x the
 * range rule's at 4 bits, 0.74-0.94x at 8 bits; on Gemma-3 270M and
 * SmolLM2 see docs/quantization.md (PPL/KL before and after, export
 * time). A scale or offset beyond the f16 range is an error naming the
 * tensor, row and group. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "okv_common.h"
#include "okv_quant.h"

enum { SB_GROUPS = OKV_QSB_GROUPS };

okv_qscheme okv_qscheme_block(int type) {
    const okv_qblock_info *b = okv_qblock_get(type);
    okv_qscheme s = {0, 0, false, OKV_F16, type, false};
    if (b) {
        s.bits = b->bits;
        s.group = b->elems;
        s.asym = b->asym;
    }
    return s;
}

static okv_status block_scheme_check(const okv_qscheme *s, int64_t N, int64_t K, const char *what, okv_error *err) {
    const okv_qblock_info *b = okv_qblock_get(s->block);
    if (!b || !b->carried) return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: unknown block type %d", what, s->block);
    if (s->bits != b->bits || s->group != b->elems || s->asym != b->asym || s->scale_dtype != OKV_F16)
        return okv_fail(err, OKV_ERR_INVALID, "%s: bits/group/asym disagree with block type %s", what, b->name);
    if (N < 0 || K <= 0 || N > INT32_MAX || K > INT32_MAX)
        return okv_fail(err, OKV_ERR_INVALID, "%s: quantized shape [%lld, %lld] out of range", what, (long long)N,
                        (long long)K);
    if (K % b->elems)
        return okv_fail(err, OKV_ERR_INVALID, "%s: input dimension %lld is not a multiple of %s's block of %d", what,
                        (long long)K, b->name, b->elems);
    if (okv_quant_bytes(s, N, K) == UINT64_MAX)
        return okv_fail(err, OKV_ERR_INVALID, "%s: quantized size of [%lld, %lld] overflows", what, (long long)N,
                        (long long)K);
    return OKV_OK;
}

okv_status okv_qscheme_check(const okv_qscheme *s, int64_t N, int64_t K, const char *what, okv_error *err) {
    if (!what) what = "tensor";
    if (s->block != OKV_QB_NONE) return block_scheme_check(s, N, K, what, err);
    if (s->bits != 4 && s->bits != 8)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: quantization bits %d (want 4 or 8)", what, s->bits);
    if (s->group != 32 && s->group != 64 && s->group != 128 && s->group != 256)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: quantization group size %d (want 32, 64, 128 or 256)", what,
                        s->group);
    if (s->scale_dtype != OKV_F16)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: quantization scale dtype %s (want f16)", what,
                        okv_dtype_name(s->scale_dtype));
    if (N < 0 || K <= 0 || N > INT32_MAX || K > INT32_MAX)
        return okv_fail(err, OKV_ERR_INVALID, "%s: quantized shape [%lld, %lld] out of range", what, (long long)N,
                        (long long)K);
    if (K % s->group)
        return okv_fail(err, OKV_ERR_INVALID, "%s: input dimension %lld is not a multiple of the group size %d", what,
                        (long long)K, s->group);
    if (okv_quant_bytes(s, N, K) == UINT64_MAX)
        return okv_fail(err, OKV_ERR_INVALID, "%s: quantized size of [%lld, %lld] overflows", what, (long long)N,
                        (long long)K);
    return OKV_OK;
}

const char *okv_qscheme_name(const okv_qscheme *s, char *buf, size_t n) {
    if (s->block != OKV_QB_NONE) {
        const okv_qblock_info *b = okv_qblock_get(s->block);
        snprintf(buf, n, "%s", b ? b->name : "q?");
        return buf;
    }
    snprintf(buf, n, "q%d g%d %s %s", s->bits, s->group, s->asym ? "asym" : "sym", okv_dtype_name(s->scale_dtype));
    return buf;
}

/* UINT64_MAX when the size does not fit (or the scheme is not one we know). */
uint64_t okv_quant_bytes(const okv_qscheme *s, int64_t N, int64_t K) {
    if (s->block != OKV_QB_NONE) {
        const okv_qblock_info *b = okv_qblock_get(s->block);
        uint64_t blocks, total;
        if (!b || N < 0 || K < 0 || K % b->elems ||
            __builtin_mul_overflow((uint64_t)N, (uint64_t)(K / b->elems), &blocks) ||
            __builtin_mul_overflow(blocks, (uint64_t)b->bytes, &total))
            return UINT64_MAX;
        return total;
    }
    if (N < 0 || K < 0 || (s->bits != 4 && s->bits != 8) || s->group <= 0 || K % s->group) return UINT64_MAX;
    uint64_t codes, scales, planes = s->asym ? 2 : 1, total;
    if (__builtin_mul_overflow((uint64_t)N, (uint64_t)K, &codes)) return UINT64_MAX;
    codes = s->bits == 4 ? codes / 2 + (codes & 1) : codes;
    if (__builtin_mul_overflow((uint64_t)N, (uint64_t)(K / s->group), &scales) ||
        __builtin_mul_overflow(scales, 2 * planes, &scales) || __builtin_add_overflow(codes, scales, &total))
        return UINT64_MAX;
    return total;
}

okv_qview okv_quant_view(const okv_qscheme *s, const void *W, int64_t N, int64_t K) {
    okv_qview v;
    memset(&v, 0, sizeof v);
    if (s->block != OKV_QB_NONE) {
        const okv_qblock_info *b = okv_qblock_get(s->block);
        v.bits = s->bits;
        v.group = s->group;
        v.groups = (int)(K / s->group);
        v.asym = s->asym;
        v.block = s->block;
        v.blocks = W;
        v.row_bytes = (size_t)(K / b->elems) * (size_t)b->bytes;
        v.x8 = s->x8;
        return v;
    }
    v.bits = s->bits;
    v.group = s->group;
    v.groups = (int)(K / s->group);
    v.asym = s->asym;
    v.code_stride = (size_t)K * (size_t)s->bits / 8;
    v.scale_stride = (size_t)v.groups;
    v.codes = W;
    v.d = (const uint16_t *)((const uint8_t *)W + (size_t)N * v.code_stride);
    v.m = s->asym ? v.d + (size_t)N * v.scale_stride : NULL;
    return v;
}

/* Where natural element k of a row lives inside its codes row: byte offset,
 * and for 4 bits the nibble shift (0 or 4). */
static size_t code_pos(int bits, int group, int groups, int64_t k, int *shift) {
    int g = (int)(k / group), j = (int)(k % group);
    int sb = g / SB_GROUPS, l = g % SB_GROUPS;
    int lanes = groups - sb * SB_GROUPS < SB_GROUPS ? groups - sb * SB_GROUPS : SB_GROUPS;
    int u = j / 4, i = j % 4;
    size_t sb_start = (size_t)sb * SB_GROUPS * group; /* codes before this superblock */
    if (bits == 8) {
        *shift = 0;
        return sb_start + (size_t)u * 4 * lanes + 4 * l + i;
    }
    *shift = (u & 1) * 4;
    return sb_start / 2 + (size_t)(u / 2) * 4 * lanes + 4 * l + i;
}

static uint8_t get_code(const okv_qview *v, const uint8_t *row, int64_t k) {
    int shift;
    size_t p = code_pos(v->bits, v->group, v->groups, k, &shift);
    return v->bits == 8 ? row[p] : (uint8_t)((row[p] >> shift) & 15);
}

static void put_code(const okv_qview *v, uint8_t *row, int64_t k, uint8_t c) {
    int shift;
    size_t p = code_pos(v->bits, v->group, v->groups, k, &shift);
    if (v->bits == 8) row[p] = c;
    else row[p] = (uint8_t)((row[p] & ~(15 << shift)) | ((c & 15) << shift));
}

/* The f16 nearest to x from above (below): x <= result (x >= result).
 * Overflow gives +-inf, which the callers reject. */
static uint16_t f16_up(float x) {
    uint16_t h = okv_f32_to_f16(x);
    if (okv_f16_to_f32(h) < x) h = (h & 0x8000) ? (uint16_t)(h == 0x8000 ? 0x0001 : h - 1) : (uint16_t)(h + 1);
    return h;
}

static uint16_t f16_down(float x) { return (uint16_t)(f16_up(-x) ^ 0x8000); }

static bool f16_finite(uint16_t h) { return (h & 0x7c00) != 0x7c00; }

/* round(v) clamped to [cmin, cmax], ties to even like nearbyintf in the
 * default rounding mode, without its library call: the clamp comes first
 * (so the product is rounded to f32 before, never fused), then adding and
 * subtracting 1.5 * 2^23 rounds any |v| < 2^22 to an integer. */
static inline float round_code(float v, int cmin, int cmax) {
    float lo = (float)cmin, hi = (float)cmax;
    v = v < hi ? v : hi; /* each a single min / max instruction, so the loops vectorise */
    v = v > lo ? v : lo;
    return (v + 0x1.8p23f) - 0x1.8p23f;
}

/* Squared error of a group under stored f16 d (and m): codes rounded to
 * nearest within [cmin, cmax] (symmetric codes are signed here, c - half);
 * with codes, writes them (+ bias). iw: per-element importance (the
 * activations' E[x^2] of each input channel), NULL = all 1. Eight partial
 * sums so the loop can be vectorised. */
static double group_sse(const float *w, const float *iw, int n, float d, float m, int cmin, int cmax, uint8_t *codes,
                        int bias) {
    float id = d > 0.0f ? 1.0f / d : 0.0f, e8[8] = {0};
    if (iw)
        for (int i = 0; i < n; i += 8)
            for (int k = 0; k < 8; k++) {
                float q = round_code((w[i + k] - m) * id, cmin, cmax);
                float r = w[i + k] - (d * q + m);
                e8[k] += iw[i + k] * (r * r);
            }
    else
        for (int i = 0; i < n; i += 8)
            for (int k = 0; k < 8; k++) {
                float q = round_code((w[i + k] - m) * id, cmin, cmax);
                float r = w[i + k] - (d * q + m);
                e8[k] += r * r;
            }
    if (codes)
        for (int i = 0; i < n; i++) codes[i] = (uint8_t)(bias + (int)round_code((w[i] - m) * id, cmin, cmax));
    return (double)(((e8[0] + e8[4]) + (e8[1] + e8[5])) + ((e8[2] + e8[6]) + (e8[3] + e8[7])));
}

/* The sums a least-squares refit needs for the codes of one step (d, m):
 * q = codes rounded at that step (signed for sym), over the group
 *     sums[0..2] = sum q, sum q^2, sum q w           (every weight 1)
 *     sums[3..5] = sum a q, sum a q^2, sum a q w     (a = iw; iw NULL: zeros)
 * In eight float lanes, added up in a fixed order, so the loops vectorise
 * and every build gives the same bits. */
static void step_sums(const float *w, const float *iw, int n, float d, float m, int cmin, int cmax, double sums[6]) {
    float id = d > 0.0f ? 1.0f / d : 0.0f, l[6][8] = {{0}};
    if (iw)
        for (int i = 0; i < n; i += 8)
            for (int k = 0; k < 8; k++) {
                float q = round_code((w[i + k] - m) * id, cmin, cmax), a = iw[i + k];
                l[0][k] += q;
                l[1][k] += q * q;
                l[2][k] += q * w[i + k];
                l[3][k] += a * q;
                l[4][k] += a * (q * q);
                l[5][k] += a * (q * w[i + k]);
            }
    else
        for (int i = 0; i < n; i += 8)
            for (int k = 0; k < 8; k++) {
                float q = round_code((w[i + k] - m) * id, cmin, cmax);
                l[0][k] += q;
                l[1][k] += q * q;
                l[2][k] += q * w[i + k];
            }
    for (int j = 0; j < 6; j++)
        sums[j] = (double)(((l[j][0] + l[j][4]) + (l[j][1] + l[j][5])) + ((l[j][2] + l[j][6]) + (l[j][3] + l[j][7])));
}

/* Least-squares d (and m) for fixed codes from their sums: minimises
 * sum a (w - d q - m)^2 given s1 = sum a, sw = sum a w and sq, sqq, sqw as
 * step_sums gives them; false when the codes are all equal (or carry no
 * weight) or the fit is not a positive scale. */
static bool fit_scale(double s1, double sw, double sq, double sqq, double sqw, bool asym, float *fd, float *fm) {
    if (!asym) {
        if (sqq <= 0) return false;
        *fd = (float)(sqw / sqq);
        *fm = 0.0f;
        return *fd > 0.0f;
    }
    double det = s1 * sqq - sq * sq;
    if (det <= 0) return false;
    *fd = (float)((s1 * sqw - sq * sw) / det);
    *fm = (float)((sw - *fd * sq) / s1);
    return *fd > 0.0f;
}

/* The error-minimising search (see the head comment). Candidates: for
 * each step span / (q + 0.1 i) (q = cmax asym, qmax sym; 8 bits in 0.4
 * steps) the least-squares d (and m) of the codes it gives, refitted
 * unweighted and (with iw) weighted: one pass over the group gives both
 * fits' sums. Every candidate is judged by its weighted error after
 * rounding to f16, with codes from the stored values, and the range-based
 * d16/m16 already in place stay unless one is strictly better. */
enum { QS_BELOW = 4, QS_ABOVE4 = 20, QS_ABOVE8 = 8 }; /* the step grid, in units of 0.1 (4 bits) / 0.4 (8 bits) */

static void search_group(const okv_qscheme *s, const float *w, const float *iw, int n, float span, uint16_t *d16,
                         uint16_t *m16) {
    const int cmin = s->asym ? 0 : -(1 << (s->bits - 1)), cmax = s->asym ? (1 << s->bits) - 1 : (1 << (s->bits - 1)) - 1;
    const float m0 = s->asym ? okv_f16_to_f32(*m16) : 0.0f, stride = s->bits == 4 ? 0.1f : 0.4f;
    double best = group_sse(w, iw, n, okv_f16_to_f32(*d16), m0, cmin, cmax, NULL, 0);
    if (best == 0.0 || !(span > 0.0f)) return;
    double s1[2] = {n, 0}, sw[2] = {0, 0}; /* [unweighted, weighted]: sum a, sum a w */
    for (int k = 0; k < n; k++) {
        sw[0] += w[k];
        if (iw) s1[1] += iw[k], sw[1] += (double)iw[k] * w[k];
    }
    for (int i = -QS_BELOW; i <= (s->bits == 4 ? QS_ABOVE4 : QS_ABOVE8); i++) {
        float dc = span / ((float)cmax + stride * (float)i);
        double sums[6];
        step_sums(w, iw, n, dc, m0, cmin, cmax, sums);
        for (int weighted = iw ? 1 : 0; weighted >= 0; weighted--) {
            /* with weights, the unweighted refit is a candidate too, so the
             * weighted search sees every pair the unweighted one does and
             * is never worse on its own objective; codes all equal: the
             * step itself */
            const double *q = sums + 3 * weighted;
            float fd = dc, fm = m0;
            if (!fit_scale(s1[weighted], sw[weighted], q[0], q[1], q[2], s->asym, &fd, &fm)) fd = dc, fm = m0;
            uint16_t cd = okv_f32_to_f16(fd), cm = s->asym ? okv_f32_to_f16(fm) : 0;
            if (!f16_finite(cd) || !f16_finite(cm) || !(okv_f16_to_f32(cd) > 0.0f)) continue;
            double e = group_sse(w, iw, n, okv_f16_to_f32(cd), s->asym ? okv_f16_to_f32(cm) : 0.0f, cmin, cmax, NULL, 0);
            if (e < best) {
                best = e;
                *d16 = cd;
                *m16 = cm;
            }
        }
    }
}

/* One group of n weights -> codes (natural order) and its d (and m). */
static okv_status quantize_group(const okv_qscheme *s, const float *w, const float *iw, int n, uint8_t *codes, uint16_t *d16,
                                 uint16_t *m16, const char *what, int64_t row, int64_t col0, okv_error *err) {
    float lo = w[0], hi = w[0], amax = 0.0f;
    for (int i = 0; i < n; i++) {
        if (!isfinite(w[i]))
            return okv_fail(err, OKV_ERR_INVALID, "%s: element [%lld, %lld] is %s; cannot quantize", what,
                            (long long)row, (long long)(col0 + i), isnan(w[i]) ? "NaN" : "infinite");
        lo = w[i] < lo ? w[i] : lo;
        hi = w[i] > hi ? w[i] : hi;
        amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
    }
    if (!s->asym) {
        int half = 1 << (s->bits - 1), qmax = half - 1;
        *d16 = f16_up(amax / (float)qmax);
        if (!f16_finite(*d16))
            return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: row %lld group at column %lld: max |w| %g is beyond the f16 scale range",
                            what, (long long)row, (long long)col0, (double)amax);
        uint16_t unused = 0;
        search_group(s, w, iw, n, amax, d16, &unused);
        group_sse(w, NULL, n, okv_f16_to_f32(*d16), 0.0f, -half, qmax, codes, half);
        return OKV_OK;
    }
    int cmax = (1 << s->bits) - 1;
    *m16 = f16_down(lo);
    float m = okv_f16_to_f32(*m16);
    *d16 = f16_up((hi - m) / (float)cmax);
    if (!f16_finite(*m16) || !f16_finite(*d16))
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: row %lld group at column %lld: range [%g, %g] is beyond f16 scales",
                        what, (long long)row, (long long)col0, (double)lo, (double)hi);
    search_group(s, w, iw, n, hi - m, d16, m16);
    group_sse(w, NULL, n, okv_f16_to_f32(*d16), okv_f16_to_f32(*m16), 0, cmax, codes, 0);
    return OKV_OK;
}

okv_status okv_quantize(const okv_qscheme *s, const float *W, int64_t N, int64_t K, void *dst, const char *what,
                        okv_error *err) {
    return okv_quantize_weighted(s, W, N, K, NULL, dst, what, err);
}

okv_status okv_quantize_check(const okv_qscheme *s, int64_t N, int64_t K, const float *imp, const char *what,
                              okv_error *err) {
    if (!what) what = "tensor";
    if (s->block != OKV_QB_NONE && !okv_qblock_quantizable(s->block)) {
        const okv_qblock_info *b = okv_qblock_get(s->block);
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: quantizing into block type %s is not implemented", what,
                        b ? b->name : "?");
    }
    okv_status st = okv_qscheme_check(s, N, K, what, err);
    if (st) return st;
    for (int64_t k = 0; imp && k < K; k++)
        if (!(imp[k] >= 0.0f) || !isfinite(imp[k]))
            return okv_fail(err, OKV_ERR_INVALID, "%s: importance of input channel %lld is %g (want finite, >= 0)", what,
                            (long long)k, (double)imp[k]);
    return OKV_OK;
}

okv_status okv_quantize_rows(const okv_qscheme *s, const float *W, int64_t N, int64_t K, const float *imp, void *dst,
                             int64_t row0, int64_t row1, const char *what, okv_error *err) {
    if (!what) what = "tensor";
    okv_qview v = okv_quant_view(s, dst, N, K);
    if (v.block != OKV_QB_NONE) { /* GGUF block types: okv_qblock_quant.c */
        const okv_qblock_info *b = okv_qblock_get(v.block);
        for (int64_t r = row0; r < row1; r++) {
            const float *w = W + (size_t)r * K;
            for (int64_t k = 0; k < K; k++)
                if (!isfinite(w[k]))
                    return okv_fail(err, OKV_ERR_INVALID, "%s: element [%lld, %lld] is %s; cannot quantize", what,
                                    (long long)r, (long long)k, isnan(w[k]) ? "NaN" : "infinite");
            int64_t bad = okv_qblock_quantize_row(v.block, w, imp, K, (uint8_t *)v.blocks + (size_t)r * v.row_bytes);
            if (bad >= 0)
                return okv_fail(err, OKV_ERR_UNSUPPORTED,
                                "%s: row %lld %s block at column %lld: its scale is beyond the f16 range", what,
                                (long long)r, b->name, (long long)(bad * b->elems));
        }
        return OKV_OK;
    }
    uint8_t codes[256];
    for (int64_t r = row0; r < row1; r++) {
        uint8_t *crow = (uint8_t *)v.codes + (size_t)r * v.code_stride;
        uint16_t *drow = (uint16_t *)v.d + (size_t)r * v.scale_stride;
        uint16_t *mrow = v.m ? (uint16_t *)v.m + (size_t)r * v.scale_stride : NULL;
        memset(crow, 0, v.code_stride);
        for (int g = 0; g < v.groups; g++) {
            int64_t k0 = (int64_t)g * s->group;
            uint16_t m16 = 0;
            okv_status st = quantize_group(s, W + (size_t)r * K + k0, imp ? imp + k0 : NULL, s->group, codes, &drow[g],
                                           &m16, what, r, k0, err);
            if (st) return st;
            if (mrow) mrow[g] = m16;
            for (int i = 0; i < s->group; i++) put_code(&v, crow, k0 + i, codes[i]);
        }
    }
    return OKV_OK;
}

okv_status okv_quantize_weighted(const okv_qscheme *s, const float *W, int64_t N, int64_t K, const float *imp, void *dst,
                                 const char *what, okv_error *err) {
    okv_status st = okv_quantize_check(s, N, K, imp, what, err);
    return st ? st : okv_quantize_rows(s, W, N, K, imp, dst, 0, N, what, err);
}

void okv_quant_pack(const okv_qscheme *s, int64_t N, int64_t K, const uint8_t *codes, const float *d, const float *m,
                    void *dst) {
    okv_qview v = okv_quant_view(s, dst, N, K);
    uint8_t mask = (uint8_t)((1 << s->bits) - 1);
    for (int64_t r = 0; r < N; r++) {
        uint8_t *crow = (uint8_t *)v.codes + (size_t)r * v.code_stride;
        memset(crow, 0, v.code_stride);
        for (int64_t k = 0; k < K; k++) put_code(&v, crow, k, codes[(size_t)r * K + k] & mask);
        for (int g = 0; g < v.groups; g++) {
            size_t i = (size_t)r * v.groups + g;
            ((uint16_t *)v.d)[i] = okv_f32_to_f16(d[i]);
            if (v.m) ((uint16_t *)v.m)[i] = okv_f32_to_f16(m ? m[i] : 0.0f);
        }
    }
}

void okv_qview_block_range(const okv_qview *v, int64_t n, int64_t e0, int64_t e1, float *dst) {
    if (!v->x8) {
        okv_qblock_dequant_range(v->block, v->blocks + (size_t)n * v->row_bytes, e0, e1, dst);
        return;
    }
    const okv_qblock_info *b = okv_qblock_get(v->block);
    uint8_t blk[256]; /* one block in file order (the largest is Q6_K's 210 bytes) */
    for (int64_t c = e0 / b->elems; c * b->elems < e1; c++) {
        int64_t lo = c * b->elems, a = lo > e0 ? lo : e0, z = lo + b->elems < e1 ? lo + b->elems : e1;
        okv_qblock_x8_row(v->block, v->blocks, (int64_t)v->groups * v->group, n, c, c + 1, blk);
        okv_qblock_dequant_range(v->block, blk, a - lo, z - lo, dst + (a - e0));
    }
}

void okv_dequant_row(const okv_qscheme *s, const void *W, int64_t N, int64_t K, int64_t r, float *dst) {
    okv_qview v = okv_quant_view(s, W, N, K);
    if (v.block != OKV_QB_NONE) {
        okv_qview_block_range(&v, r, 0, K, dst);
        return;
    }
    const uint8_t *crow = v.codes + (size_t)r * v.code_stride;
    const uint16_t *drow = v.d + (size_t)r * v.scale_stride, *mrow = v.m ? v.m + (size_t)r * v.scale_stride : NULL;
    int off = s->asym ? 0 : 1 << (s->bits - 1);
    for (int g = 0; g < v.groups; g++) {
        float d = okv_f16_to_f32(drow[g]), m = mrow ? okv_f16_to_f32(mrow[g]) : 0.0f;
        for (int i = 0; i < s->group; i++) {
            int64_t k = (int64_t)g * s->group + i;
            float c = (float)((int)get_code(&v, crow, k) - off);
            dst[k] = mrow ? d * c + m : d * c;
        }
    }
}
