/* okv_qblock_quant.c — quantizing f32 rows INTO the GGUF block types
 * (okv_qblock.h has the layouts and the exact dequantization): Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0 (32-element blocks) and Q4_K, Q5_K, Q6_K (256-element
 * super-blocks).
 *
 * Objective: a block's squared error sum_i a_i (x_i - y_i)^2, y = the
 * block's dequantized values computed with the same float operations (in
 * the same order) as okv_qblock.c, a_i = imp[k] (the activations' E[x^2]
 * of input channel k) or 1 without importance. Every block starts from a
 * range rule ("round to nearest", below) and only takes a candidate that is
 * strictly better on that objective, so it is never worse than round to
 * nearest. With importance the whole search runs twice, once weighted and
 * once unweighted, and the weighted error picks: the weighted result is
 * then never worse (weighted) than the unweighted one either. A block whose
 * importance is all zero is searched unweighted.
 *
 * Round to nearest (the reference, tests/quant/test_qblock_quant.c
 * recomputes it):
 *   Q4_0/Q5_0/Q8_0: d = max|x| / (2^(b-1) - 1) rounded up to f16, q = round(x / d).
 *   Q4_1/Q5_1:      m = min x rounded down to f16, d = (max - m) / (2^b - 1)
 *                   rounded up, q = round((x - m) / d).
 *   Q4_K/Q5_K:      per sub-block of 32: lo = min(min x, 0), s = (max x - lo) / Q
 *                   (Q = 15 / 31), mn = -lo; d = max s / 63, dmin = max mn / 63
 *                   rounded up to f16; sc = round(s / d), m = round(mn / dmin)
 *                   (0 when d / dmin is 0); q = round((x + dmin m) / (d sc)).
 *   Q6_K:           per sub-block of 16: s = max|x| / 31; d = max s / 127 rounded
 *                   up to f16; sc = round(s / d); q = round(x / (d sc)).
 *   (codes clamped to their range; a zero step gives code 0 / the offset.)
 *
 * Search:
 *   32-element symmetric (Q4_0, Q5_0, Q8_0): inverse steps t = (n + s i) /
 *     x_e for the element of largest magnitude x_e, both ways round: n = nq
 *     (x_e lands on -nq, the code only the negative side has) with t < 0 and
 *     n = nq - 1 with t > 0, i = -6 .. 6, s = 0.1 (Q8_0: 0.4, i = -3 .. 3);
 *     each t's codes refitted by least squares (d = sum a q x / sum a q q),
 *     d rounded to f16, codes recomputed from it, judged; the best then gets
 *     up to two more refit-recode rounds (Lloyd steps).
 *   32-element asymmetric (Q4_1, Q5_1): steps span / (Q + s i), s = 0.1
 *     (Q5_1: 0.2), i = -4 .. 20, least-squares (d, m), f16, recompute, judge;
 *     two Lloyd rounds on the best.
 *   Q4_K / Q5_K: (1) each sub-block's continuous (s, mn >= 0) by the
 *     asymmetric search above without f16 rounding (an offset the fit puts
 *     above 0 is clamped to 0, K-quants subtract their minimum);
 *     (2) super-scales d = max s / 63, dmin = max mn / 63 (f16, rounded up),
 *     6-bit sc, m by rounding; (3) per sub-block the 9 (sc +-1, m +-1)
 *     neighbours with their nearest codes, the best kept; (4) d and dmin
 *     refitted by least squares to those integers and codes, f16, and (3)
 *     again. Starting points: the range rule's sub-block (s, mn) and the
 *     searched ones; the best complete block wins.
 *   Q6_K: the same with signed 6-bit codes (-32 .. 31) per sub-block of 16 by
 *     the symmetric search (no f16 rounding), signed 8-bit sc around d = max
 *     |s| / 127, neighbours sc +-1, a least-squares d.
 * Measured on tests/quant's bell-shaped rows: see that test's printout
 * (squared error against round to nearest, and weighted against unweighted).
 *
 * A row's blocks are quantized one after the other from that row alone, so
 * the bytes do not depend on how rows are spread over threads. */
#include <math.h>
#include <string.h>

#include "okv_common.h"
#include "okv_qblock.h"

#define QK 32
#define QKK 256

/* round(v) clamped to [lo, hi], ties to even, without a library call (the
 * clamp first, so |v| < 2^22 and the product is already rounded to f32). */
static inline float rnd(float v, float lo, float hi) {
    v = v < hi ? v : hi; /* each a single min / max instruction, so the loops vectorise */
    v = v > lo ? v : lo;
    return (v + 0x1.8p23f) - 0x1.8p23f;
}

static float h2f(uint16_t h) { return okv_f16_to_f32(h); }
static float f16r(float x) { return okv_f16_to_f32(okv_f32_to_f16(x)); }

/* The f16 nearest to x from above (x <= result); overflow gives +inf. */
static uint16_t f16_up(float x) {
    uint16_t h = okv_f32_to_f16(x);
    if (okv_f16_to_f32(h) < x) h = (h & 0x8000) ? (uint16_t)(h == 0x8000 ? 0x0001 : h - 1) : (uint16_t)(h + 1);
    return h;
}
static uint16_t f16_down(float x) { return (uint16_t)(f16_up(-x) ^ 0x8000); }
static bool fin16(uint16_t h) { return (h & 0x7c00) != 0x7c00; }

static void put16(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* ---- 32-element blocks ------------------------------------------------------------------
 * A candidate: f16 d (and m), codes recomputed from the stored values. */
typedef struct b32 {
    uint16_t d, m;
    double e;
    int8_t q[QK]; /* signed codes (symmetric) or 0..Q (asymmetric) */
} b32;

/* Error of y = q * d, q = round(x / d) in [-nq, nq - 1]; codes into q if given. */
static float sym_err(const float *x, const float *a, int n, float d, int nq, int8_t *q) {
    float id = d != 0.0f ? 1.0f / d : 0.0f, e = 0.0f;
    for (int i = 0; i < n; i++) {
        float c = rnd(x[i] * id, (float)-nq, (float)(nq - 1));
        float r = x[i] - c * d;
        e += (a ? a[i] : 1.0f) * (r * r);
        if (q) q[i] = (int8_t)c;
    }
    return e;
}

/* Least-squares d for the codes round(x t): sum a q x / sum a q q (0 if none). */
static float sym_fit(const float *x, const float *a, int n, float t, int nq) {
    double sqx = 0, sqq = 0;
    for (int i = 0; i < n; i++) {
        float c = rnd(x[i] * t, (float)-nq, (float)(nq - 1));
        double w = a ? a[i] : 1.0;
        sqx += w * c * x[i];
        sqq += w * c * c;
    }
    return sqq > 0 ? (float)(sqx / sqq) : 0.0f;
}

/* The symmetric search (head comment) on n elements: the best scale, exact
 * (no f16 rounding) when `exact`, else f16 values; starts from *d, *e. */
static void sym_search(const float *x, const float *a, int n, int nq, bool exact, float *d, float *e) {
    float xe = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(xe)) xe = x[i];
    if (xe == 0.0f || *e == 0.0f) return;
    const float step = nq >= 128 ? 0.4f : 0.1f;
    const int range = nq >= 128 ? 3 : 6;
    for (int side = 0; side < 2; side++)
        for (int i = -range; i <= range; i++) {
            float t = side ? ((float)(nq - 1) + step * (float)i) / xe : -((float)nq + step * (float)i) / xe;
            float cd = sym_fit(x, a, n, t, nq);
            if (!exact) cd = f16r(cd);
            if (!(cd != 0.0f) || !isfinite(cd)) continue;
            float ce = sym_err(x, a, n, cd, nq, NULL);
            if (ce < *e) *e = ce, *d = cd;
        }
    for (int it = 0; it < 2; it++) { /* Lloyd: recode with the best d, refit */
        float cd = sym_fit(x, a, n, 1.0f / *d, nq);
        if (!exact) cd = f16r(cd);
        if (!(cd != 0.0f) || !isfinite(cd)) break;
        float ce = sym_err(x, a, n, cd, nq, NULL);
        if (!(ce < *e)) break;
        *e = ce, *d = cd;
    }
}

/* Error of y = q * d + m, q = round((x - m) / d) in [0, Q]. */
static float asym_err(const float *x, const float *a, int n, float d, float m, int Q, int8_t *q) {
    float id = d > 0.0f ? 1.0f / d : 0.0f, e = 0.0f;
    for (int i = 0; i < n; i++) {
        float c = rnd((x[i] - m) * id, 0.0f, (float)Q);
        float r = x[i] - (c * d + m);
        e += (a ? a[i] : 1.0f) * (r * r);
        if (q) q[i] = (int8_t)c;
    }
    return e;
}

/* Least-squares (d, m) for the codes round((x - m0) / d0) in [0, Q];
 * nonpos: m <= 0 (K-quants), refitting d alone when m would be above. */
static bool asym_fit(const float *x, const float *a, int n, float d0, float m0, int Q, bool nonpos, float *d, float *m) {
    float id = d0 > 0.0f ? 1.0f / d0 : 0.0f;
    double s1 = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; i++) {
        float c = rnd((x[i] - m0) * id, 0.0f, (float)Q);
        double w = a ? a[i] : 1.0;
        s1 += w, sq += w * c, sqq += w * c * c, sx += w * x[i], sqx += w * c * x[i];
    }
    double det = s1 * sqq - sq * sq;
    if (det <= 0 || s1 <= 0) return false;
    *d = (float)((s1 * sqx - sq * sx) / det);
    *m = (float)((sx - (double)*d * sq) / s1);
    if (nonpos && *m > 0.0f) {
        *m = 0.0f;
        *d = sqq > 0 ? (float)(sqx / sqq) : 0.0f;
    }
    return *d > 0.0f && isfinite(*d) && isfinite(*m);
}

/* The asymmetric search from (*d, *m, *e): f16 values unless `exact`. */
static void asym_search(const float *x, const float *a, int n, int Q, bool exact, bool nonpos, float lo, float span,
                        float *d, float *m, float *e) {
    if (!(span > 0.0f) || *e == 0.0f) return;
    const float step = Q >= 31 ? 0.2f : 0.1f;
    for (int i = -4; i <= 20; i++) {
        float cd, cm;
        if (!asym_fit(x, a, n, span / ((float)Q + step * (float)i), lo, Q, nonpos, &cd, &cm)) continue;
        if (!exact) cd = f16r(cd), cm = f16r(cm);
        if (!(cd > 0.0f) || !isfinite(cd) || !isfinite(cm)) continue;
        float ce = asym_err(x, a, n, cd, cm, Q, NULL);
        if (ce < *e) *e = ce, *d = cd, *m = cm;
    }
    for (int it = 0; it < 2; it++) {
        float cd, cm;
        if (!asym_fit(x, a, n, *d, *m, Q, nonpos, &cd, &cm)) break;
        if (!exact) cd = f16r(cd), cm = f16r(cm);
        if (!(cd > 0.0f) || !isfinite(cd) || !isfinite(cm)) break;
        float ce = asym_err(x, a, n, cd, cm, Q, NULL);
        if (!(ce < *e)) break;
        *e = ce, *d = cd, *m = cm;
    }
}

/* One 32-element block: the range rule, then the search weighted by a (and,
 * with a, unweighted), judged on a. false when the range rule's scale is
 * beyond f16. */
static bool quant_b32(bool asym, int bits, const float *x, const float *a, b32 *out) {
    const int nq = 1 << (bits - 1), Q = (1 << bits) - 1;
    float lo = x[0], hi = x[0], amax = 0.0f;
    for (int i = 0; i < QK; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        amax = fmaxf(amax, fabsf(x[i]));
    }
    if (!asym) {
        uint16_t d16 = f16_up(amax / (float)(nq - 1));
        if (!fin16(d16)) return false;
        const float d0 = h2f(d16);
        float d = d0, e = sym_err(x, a, QK, d0, nq, NULL);
        for (int pass = 0; pass < (a ? 2 : 1); pass++) { /* weighted, then unweighted; judged weighted */
            const float *aw = pass ? NULL : a;
            float cd = d0, ce = sym_err(x, aw, QK, d0, nq, NULL);
            sym_search(x, aw, QK, nq, false, &cd, &ce);
            ce = sym_err(x, a, QK, cd, nq, NULL);
            if (ce < e) e = ce, d = cd;
        }
        out->d = okv_f32_to_f16(d);
        out->m = 0;
        out->e = sym_err(x, a, QK, h2f(out->d), nq, out->q);
        return true;
    }
    uint16_t m16 = f16_down(lo);
    uint16_t d16 = f16_up((hi - h2f(m16)) / (float)Q);
    if (!fin16(d16) || !fin16(m16)) return false;
    const float d0 = h2f(d16), m0 = h2f(m16);
    float d = d0, m = m0, e = asym_err(x, a, QK, d0, m0, Q, NULL);
    for (int pass = 0; pass < (a ? 2 : 1); pass++) {
        const float *aw = pass ? NULL : a;
        float cd = d0, cm = m0, ce = asym_err(x, aw, QK, d0, m0, Q, NULL);
        asym_search(x, aw, QK, Q, false, false, m0, hi - m0, &cd, &cm, &ce);
        ce = asym_err(x, a, QK, cd, cm, Q, NULL);
        if (ce < e) e = ce, d = cd, m = cm;
    }
    out->d = okv_f32_to_f16(d);
    out->m = okv_f32_to_f16(m);
    out->e = asym_err(x, a, QK, h2f(out->d), h2f(out->m), Q, out->q);
    return true;
}

static void pack_b32(int type, const b32 *c, uint8_t *b) {
    put16(b, c->d);
    switch (type) {
    case OKV_QB_Q8_0:
        for (int i = 0; i < QK; i++) b[2 + i] = (uint8_t)c->q[i];
        return;
    case OKV_QB_Q4_0:
    case OKV_QB_Q4_1: {
        uint8_t *qs = b + (type == OKV_QB_Q4_1 ? 4 : 2);
        int off = type == OKV_QB_Q4_0 ? 8 : 0;
        if (type == OKV_QB_Q4_1) put16(b + 2, c->m);
        for (int j = 0; j < QK / 2; j++) qs[j] = (uint8_t)((c->q[j] + off) | ((c->q[j + QK / 2] + off) << 4));
        return;
    }
    case OKV_QB_Q5_0:
    case OKV_QB_Q5_1: {
        int off = type == OKV_QB_Q5_0 ? 16 : 0, hoff = type == OKV_QB_Q5_1 ? 4 : 2;
        if (type == OKV_QB_Q5_1) put16(b + 2, c->m);
        uint32_t qh = 0;
        uint8_t *qs = b + hoff + 4;
        for (int j = 0; j < QK / 2; j++) {
            int c0 = c->q[j] + off, c1 = c->q[j + QK / 2] + off;
            qs[j] = (uint8_t)((c0 & 15) | ((c1 & 15) << 4));
            qh |= (uint32_t)((c0 >> 4) & 1) << j;
            qh |= (uint32_t)((c1 >> 4) & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b[hoff + k] = (uint8_t)(qh >> (8 * k));
        return;
    }
    default: return;
    }
}

/* ---- Q4_K / Q5_K ---------------------------------------------------------------------
 * y = (d sc_j) q - (dmin m_j) per sub-block j of 32, sc, m in 0..63. */
typedef struct bk {
    uint16_t d, dmin;
    uint8_t sc[8], m[8];
    uint8_t q[QKK];
    double e;
} bk;

/* Sub-block error under (d, dmin, sc, m) with the nearest codes. */
static float kq_sub_err(const float *x, const float *a, float d, float dmin, int sc, int m, int Q, uint8_t *q) {
    const float d1 = d * (float)sc, m1 = dmin * (float)m, id = d1 > 0.0f ? 1.0f / d1 : 0.0f;
    float e = 0.0f;
    for (int i = 0; i < 32; i++) {
        float c = rnd((x[i] + m1) * id, 0.0f, (float)Q);
        float r = x[i] - (d1 * c - m1);
        e += (a ? a[i] : 1.0f) * (r * r);
        if (q) q[i] = (uint8_t)c;
    }
    return e;
}

/* Whole-block error of c's integers with their nearest codes (written). */
static double kq_block_err(const float *x, const float *a, bk *c, int Q) {
    double e = 0;
    for (int j = 0; j < 8; j++)
        e += kq_sub_err(x + 32 * j, a ? a + 32 * j : NULL, h2f(c->d), h2f(c->dmin), c->sc[j], c->m[j], Q, c->q + 32 * j);
    return e;
}

/* The 9 neighbours of each sub-block's (sc, m), the best kept; c->e updated. */
static void kq_neighbours(const float *x, const float *a, bk *c, int Q) {
    const float d = h2f(c->d), dmin = h2f(c->dmin);
    double e = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j, *aj = a ? a + 32 * j : NULL;
        int bs = c->sc[j], bm = c->m[j];
        float be = kq_sub_err(xj, aj, d, dmin, bs, bm, Q, NULL);
        for (int ds = -1; ds <= 1; ds++)
            for (int dm = -1; dm <= 1; dm++) {
                int s = bs + ds, m = bm + dm;
                if ((!ds && !dm) || s < 0 || s > 63 || m < 0 || m > 63 || (dm && dmin == 0.0f) || (ds && d == 0.0f)) continue;
                float ce = kq_sub_err(xj, aj, d, dmin, s, m, Q, NULL);
                if (ce < be) be = ce, c->sc[j] = (uint8_t)s, c->m[j] = (uint8_t)m;
            }
        e += kq_sub_err(xj, aj, d, dmin, c->sc[j], c->m[j], Q, c->q + 32 * j);
    }
    c->e = e;
}

/* d, dmin from the integers and codes by least squares: y = d u - dmin v,
 * u = sc q, v = m. false when singular / not finite. */
static bool kq_refit_super(const float *x, const float *a, const bk *c, uint16_t *d, uint16_t *dmin) {
    double suu = 0, suv = 0, svv = 0, sxu = 0, sxv = 0;
    for (int j = 0; j < 8; j++)
        for (int i = 0; i < 32; i++) {
            int k = 32 * j + i;
            double w = a ? a[k] : 1.0, u = (double)c->sc[j] * c->q[k], v = c->m[j];
            suu += w * u * u, suv += w * u * v, svv += w * v * v, sxu += w * x[k] * u, sxv += w * x[k] * v;
        }
    double dd, dm;
    double det = suu * svv - suv * suv;
    if (svv > 0 && det > 1e-12 * suu * svv) {
        /* minimise sum w (x - dd u + dm v)^2 */
        dd = (sxu * svv - sxv * suv) / det;
        dm = (sxu * suv - sxv * suu) / det;
    } else if (suu > 0) {
        dd = sxu / suu;
        dm = h2f(c->dmin);
    } else
        return false;
    if (!(dd >= 0) || !(dm >= 0) || !isfinite(dd) || !isfinite(dm)) return false;
    *d = okv_f32_to_f16((float)dd);
    *dmin = okv_f32_to_f16((float)dm);
    return fin16(*d) && fin16(*dmin);
}

/* From continuous sub-block (s, mn): super-scales, integers, nearest codes. */
static bool kq_from_scales(const float *x, const float *a, const float *s, const float *mn, int Q, bk *c) {
    float ms = 0.0f, mm = 0.0f;
    for (int j = 0; j < 8; j++) ms = fmaxf(ms, s[j]), mm = fmaxf(mm, mn[j]);
    c->d = f16_up(ms / 63.0f);
    c->dmin = f16_up(mm / 63.0f);
    if (!fin16(c->d) || !fin16(c->dmin)) return false;
    float d = h2f(c->d), dmin = h2f(c->dmin);
    for (int j = 0; j < 8; j++) {
        c->sc[j] = (uint8_t)(d > 0.0f ? rnd(s[j] / d, 0.0f, 63.0f) : 0.0f);
        c->m[j] = (uint8_t)(dmin > 0.0f ? rnd(mn[j] / dmin, 0.0f, 63.0f) : 0.0f);
    }
    c->e = kq_block_err(x, a, c, Q);
    return true;
}

/* Improves c by neighbours, a least-squares super-scale refit, neighbours. */
static void kq_refine(const float *x, const float *a, bk *c, int Q) {
    kq_neighbours(x, a, c, Q);
    bk t = *c;
    if (kq_refit_super(x, a, c, &t.d, &t.dmin)) {
        t.e = kq_block_err(x, a, &t, Q);
        kq_neighbours(x, a, &t, Q);
        if (t.e < c->e) *c = t;
    }
}

/* One Q4_K / Q5_K block weighted by a (searched), c = the best so far on
 * the objective eval_a (c already holds the range rule). */
static void kq_search(const float *x, const float *a, const float *eval_a, int Q, bk *best) {
    float s[8], mn[8];
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j, *aj = a ? a + 32 * j : NULL;
        float lo = 0.0f, hi = xj[0];
        for (int i = 0; i < 32; i++) lo = fminf(lo, xj[i]), hi = fmaxf(hi, xj[i]);
        float d = (hi - lo) / (float)Q, m = lo, e = asym_err(xj, aj, 32, d, m, Q, NULL);
        asym_search(xj, aj, 32, Q, true, true, lo, hi - lo, &d, &m, &e);
        s[j] = d;
        mn[j] = -m;
    }
    bk c;
    if (!kq_from_scales(x, a, s, mn, Q, &c)) return;
    kq_refine(x, a, &c, Q);
    c.e = kq_block_err(x, eval_a, &c, Q);
    if (c.e < best->e) *best = c;
}

static bool quant_bk(int Q, const float *x, const float *a, bk *out) {
    float s[8], mn[8];
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float lo = 0.0f, hi = xj[0];
        for (int i = 0; i < 32; i++) lo = fminf(lo, xj[i]), hi = fmaxf(hi, xj[i]);
        s[j] = (hi - lo) / (float)Q;
        mn[j] = -lo;
    }
    if (!kq_from_scales(x, a, s, mn, Q, out)) return false; /* the range rule */
    if (out->e == 0.0) return true;
    const bk rule = *out;
    for (int pass = 0; pass < (a ? 2 : 1); pass++) { /* weighted, then unweighted; judged weighted */
        const float *aw = pass ? NULL : a;
        bk c = rule; /* the range rule's integers refined */
        if (aw != a) c.e = kq_block_err(x, aw, &c, Q);
        kq_refine(x, aw, &c, Q);
        c.e = kq_block_err(x, a, &c, Q);
        if (c.e < out->e) *out = c;
        kq_search(x, aw, a, Q, out);
    }
    out->e = kq_block_err(x, a, out, Q);
    return true;
}

static void pack_bk(int type, const bk *c, uint8_t *b) {
    put16(b, c->d);
    put16(b + 2, c->dmin);
    uint8_t *sc = b + 4;
    for (int j = 0; j < 4; j++) {
        sc[j] = (uint8_t)((c->sc[j] & 63) | ((c->sc[j + 4] >> 4) << 6));
        sc[j + 4] = (uint8_t)((c->m[j] & 63) | ((c->m[j + 4] >> 4) << 6));
        sc[j + 8] = (uint8_t)((c->sc[j + 4] & 15) | ((c->m[j + 4] & 15) << 4));
    }
    if (type == OKV_QB_Q4_K) {
        uint8_t *qs = b + 16;
        for (int ch = 0; ch < 4; ch++)
            for (int l = 0; l < 32; l++)
                qs[32 * ch + l] = (uint8_t)(c->q[64 * ch + l] | (c->q[64 * ch + 32 + l] << 4));
        return;
    }
    uint8_t *qh = b + 16, *ql = b + 48;
    memset(qh, 0, 32);
    for (int ch = 0; ch < 4; ch++)
        for (int l = 0; l < 32; l++) {
            int c0 = c->q[64 * ch + l], c1 = c->q[64 * ch + 32 + l];
            ql[32 * ch + l] = (uint8_t)((c0 & 15) | ((c1 & 15) << 4));
            qh[l] |= (uint8_t)(((c0 >> 4) & 1) << (2 * ch));
            qh[l] |= (uint8_t)(((c1 >> 4) & 1) << (2 * ch + 1));
        }
}

/* ---- Q6_K ------------------------------------------------------------------------------
 * y = (d sc_j) q per sub-block j of 16, sc in -128..127, q in -32..31. */
typedef struct b6 {
    uint16_t d;
    int8_t sc[16];
    int8_t q[QKK];
    double e;
} b6;

static float k6_sub_err(const float *x, const float *a, float d, int sc, int8_t *q) {
    const float d1 = d * (float)sc, id = d1 != 0.0f ? 1.0f / d1 : 0.0f;
    float e = 0.0f;
    for (int i = 0; i < 16; i++) {
        float c = rnd(x[i] * id, -32.0f, 31.0f);
        float r = x[i] - d1 * c;
        e += (a ? a[i] : 1.0f) * (r * r);
        if (q) q[i] = (int8_t)c;
    }
    return e;
}

static double k6_block_err(const float *x, const float *a, b6 *c) {
    double e = 0;
    for (int j = 0; j < 16; j++) e += k6_sub_err(x + 16 * j, a ? a + 16 * j : NULL, h2f(c->d), c->sc[j], c->q + 16 * j);
    return e;
}

static bool k6_from_scales(const float *x, const float *a, const float *s, b6 *c) {
    float ms = 0.0f;
    for (int j = 0; j < 16; j++) ms = fmaxf(ms, fabsf(s[j]));
    c->d = f16_up(ms / 127.0f);
    if (!fin16(c->d)) return false;
    float d = h2f(c->d);
    for (int j = 0; j < 16; j++) c->sc[j] = (int8_t)(d > 0.0f ? rnd(s[j] / d, -128.0f, 127.0f) : 0.0f);
    c->e = k6_block_err(x, a, c);
    return true;
}

static void k6_neighbours(const float *x, const float *a, b6 *c) {
    const float d = h2f(c->d);
    double e = 0;
    for (int j = 0; j < 16; j++) {
        const float *xj = x + 16 * j, *aj = a ? a + 16 * j : NULL;
        int bs = c->sc[j];
        float be = k6_sub_err(xj, aj, d, bs, NULL);
        for (int ds = -1; ds <= 1 && d != 0.0f; ds += 2) {
            int s = bs + ds;
            if (s < -128 || s > 127) continue;
            float ce = k6_sub_err(xj, aj, d, s, NULL);
            if (ce < be) be = ce, c->sc[j] = (int8_t)s;
        }
        e += k6_sub_err(xj, aj, d, c->sc[j], c->q + 16 * j);
    }
    c->e = e;
}

static void k6_refine(const float *x, const float *a, b6 *c) {
    k6_neighbours(x, a, c);
    double suu = 0, sxu = 0;
    for (int k = 0; k < QKK; k++) {
        double w = a ? a[k] : 1.0, u = (double)c->sc[k / 16] * c->q[k];
        suu += w * u * u, sxu += w * x[k] * u;
    }
    if (!(suu > 0)) return;
    b6 t = *c;
    t.d = okv_f32_to_f16((float)(sxu / suu));
    if (!fin16(t.d)) return;
    t.e = k6_block_err(x, a, &t);
    k6_neighbours(x, a, &t);
    if (t.e < c->e) *c = t;
}

static bool quant_b6(const float *x, const float *a, b6 *out) {
    float s[16];
    for (int j = 0; j < 16; j++) {
        float amax = 0.0f;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[16 * j + i]));
        s[j] = amax / 31.0f;
    }
    if (!k6_from_scales(x, a, s, out)) return false;
    if (out->e == 0.0) return true;
    const b6 rule = *out;
    for (int pass = 0; pass < (a ? 2 : 1); pass++) {
        const float *aw = pass ? NULL : a;
        b6 c = rule;
        if (aw != a) c.e = k6_block_err(x, aw, &c);
        k6_refine(x, aw, &c);
        c.e = k6_block_err(x, a, &c);
        if (c.e < out->e) *out = c;
        float s2[16];
        for (int j = 0; j < 16; j++) { /* each sub-block's exact scale by the symmetric search */
            const float *xj = x + 16 * j, *aj = aw ? aw + 16 * j : NULL;
            float d = s[j];
            if (d > 0.0f) {
                float e = sym_err(xj, aj, 16, d, 32, NULL);
                sym_search(xj, aj, 16, 32, true, &d, &e);
            }
            s2[j] = d;
        }
        if (!k6_from_scales(x, aw, s2, &c)) continue;
        k6_refine(x, aw, &c);
        c.e = k6_block_err(x, a, &c);
        if (c.e < out->e) *out = c;
    }
    out->e = k6_block_err(x, a, out);
    return true;
}

static void pack_b6(const b6 *c, uint8_t *b) {
    uint8_t *ql = b, *qh = b + 128;
    memset(b, 0, 192);
    for (int j = 0; j < 16; j++) b[192 + j] = (uint8_t)c->sc[j];
    put16(b + 208, c->d);
    for (int n = 0; n < 2; n++)
        for (int e = 0; e < 128; e++) {
            int u = c->q[128 * n + e] + 32, l = e % 32, k = e / 32;
            uint8_t *lp = ql + 64 * n + l + (k & 1) * 32;
            *lp |= (uint8_t)((u & 15) << ((k >> 1) * 4));
            qh[32 * n + l] |= (uint8_t)((u >> 4) << (2 * k));
        }
}

/* ---- rows ------------------------------------------------------------------------------- */

bool okv_qblock_quantizable(int type) {
    switch (type) {
    case OKV_QB_Q4_0: case OKV_QB_Q4_1: case OKV_QB_Q5_0: case OKV_QB_Q5_1: case OKV_QB_Q8_0:
    case OKV_QB_Q4_K: case OKV_QB_Q5_K: case OKV_QB_Q6_K: return true;
    default: return false;
    }
}

int okv_qblock_fallback(int type) {
    switch (type) {
    case OKV_QB_Q4_K: return OKV_QB_Q4_0; /* 4.5 bits per weight both */
    case OKV_QB_Q5_K: return OKV_QB_Q5_0; /* 5.5 */
    case OKV_QB_Q6_K: return OKV_QB_Q5_1; /* 6.5625 -> 6.0 */
    default: return type;
    }
}

int64_t okv_qblock_quantize_row(int type, const float *x, const float *imp, int64_t n, void *dst) {
    const okv_qblock_info *info = okv_qblock_get(type);
    uint8_t *out = dst;
    for (int64_t b = 0; b < n / info->elems; b++) {
        const float *xb = x + b * info->elems, *ab = imp ? imp + b * info->elems : NULL;
        uint8_t *ob = out + b * info->bytes;
        if (ab) { /* no weight at all: search unweighted */
            bool any = false;
            for (int i = 0; i < info->elems && !any; i++) any = ab[i] > 0.0f;
            if (!any) ab = NULL;
        }
        bool ok;
        switch (type) {
        case OKV_QB_Q4_0: case OKV_QB_Q4_1: case OKV_QB_Q5_0: case OKV_QB_Q5_1: case OKV_QB_Q8_0: {
            b32 c;
            ok = quant_b32(info->asym, type == OKV_QB_Q8_0 ? 8 : info->bits, xb, ab, &c);
            if (ok) pack_b32(type, &c, ob);
            break;
        }
        case OKV_QB_Q4_K: case OKV_QB_Q5_K: {
            bk c;
            ok = quant_bk(type == OKV_QB_Q4_K ? 15 : 31, xb, ab, &c);
            if (ok) pack_bk(type, &c, ob);
            break;
        }
        case OKV_QB_Q6_K: {
            b6 c;
            ok = quant_b6(xb, ab, &c);
            if (ok) pack_b6(&c, ob);
            break;
        }
        default: ok = false;
        }
        if (!ok) return b;
    }
    return -1;
}
