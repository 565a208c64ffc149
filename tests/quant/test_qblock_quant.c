/* Tests quantizing INTO the GGUF block types (okv_qblock_quant.c through
 * okv_quantize_weighted / okv_quantize_rows): random and bell-shaped rows,
 * an odd number of rows, K several blocks; every block dequantized with
 * okv_qblock_dequant and its squared error checked against round to
 * nearest, recomputed here from the documented range rules (never worse),
 * with the search's gain printed and bounded; with per-channel importance
 * the weighted error per block never worse than the unweighted
 * quantization's and clearly lower in total; all-ones importance = none;
 * the bytes independent of the row split; special blocks (zeros, outlier,
 * constants, tiny values); data already on a block grid found exactly
 * (Q8_0); non-finite weights and a K the block does not divide as errors
 * naming tensor and element. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "okv_common.h"
#include "okv_qblock.h"
#include "okv_quant.h"
#include "okv_test.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static const int TYPES[] = {OKV_QB_Q4_0, OKV_QB_Q4_1, OKV_QB_Q5_0, OKV_QB_Q5_1, OKV_QB_Q8_0,
                            OKV_QB_Q4_K, OKV_QB_Q5_K, OKV_QB_Q6_K};
enum { NTYPES = sizeof TYPES / sizeof TYPES[0] };

static float f16v(float x) { return okv_f16_to_f32(okv_f32_to_f16(x)); }
static float f16_above(float x) {
    uint16_t h = okv_f32_to_f16(x);
    if (okv_f16_to_f32(h) < x) h = (h & 0x8000) ? (uint16_t)(h == 0x8000 ? 0x0001 : h - 1) : (uint16_t)(h + 1);
    return okv_f16_to_f32(h);
}
static float f16_below(float x) { return -f16_above(-x); }
static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Round to nearest of one block (okv_qblock_quant.c head comment), its
 * values into y. */
static void rtn_block(int type, const float *x, float *y) {
    const okv_qblock_info *b = okv_qblock_get(type);
    if (b->elems == 32 && !b->asym) {
        int nq = type == OKV_QB_Q8_0 ? 128 : 1 << (b->bits - 1);
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
        float d = f16_above(amax / (float)(nq - 1));
        for (int i = 0; i < 32; i++) y[i] = d > 0 ? clampf(nearbyintf(x[i] / d), -nq, nq - 1) * d : 0.0f;
    } else if (b->elems == 32) {
        int Q = (1 << b->bits) - 1;
        float lo = x[0], hi = x[0];
        for (int i = 0; i < 32; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
        float m = f16_below(lo), d = f16_above((hi - m) / (float)Q);
        for (int i = 0; i < 32; i++) y[i] = (d > 0 ? clampf(nearbyintf((x[i] - m) / d), 0, Q) : 0.0f) * d + m;
    } else if (type == OKV_QB_Q6_K) {
        float s[16], ms = 0;
        for (int j = 0; j < 16; j++) {
            float amax = 0;
            for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[16 * j + i]));
            s[j] = amax / 31.0f;
            ms = fmaxf(ms, s[j]);
        }
        float d = f16_above(ms / 127.0f);
        for (int j = 0; j < 16; j++) {
            float sc = d > 0 ? clampf(nearbyintf(s[j] / d), -128, 127) : 0.0f, d1 = d * sc;
            for (int i = 0; i < 16; i++) {
                float q = d1 != 0 ? clampf(nearbyintf(x[16 * j + i] / d1), -32, 31) : 0.0f;
                y[16 * j + i] = d1 * q;
            }
        }
    } else { /* Q4_K, Q5_K */
        int Q = type == OKV_QB_Q4_K ? 15 : 31;
        float s[8], mn[8], ms = 0, mm = 0;
        for (int j = 0; j < 8; j++) {
            float lo = 0, hi = x[32 * j];
            for (int i = 0; i < 32; i++) lo = fminf(lo, x[32 * j + i]), hi = fmaxf(hi, x[32 * j + i]);
            s[j] = (hi - lo) / (float)Q;
            mn[j] = -lo;
            ms = fmaxf(ms, s[j]);
            mm = fmaxf(mm, mn[j]);
        }
        float d = f16_above(ms / 63.0f), dmin = f16_above(mm / 63.0f);
        for (int j = 0; j < 8; j++) {
            float sc = d > 0 ? clampf(nearbyintf(s[j] / d), 0, 63) : 0.0f;
            float m = dmin > 0 ? clampf(nearbyintf(mn[j] / dmin), 0, 63) : 0.0f;
            float d1 = d * sc, m1 = dmin * m;
            for (int i = 0; i < 32; i++) {
                float q = d1 > 0 ? clampf(nearbyintf((x[32 * j + i] + m1) / d1), 0, Q) : 0.0f;
                y[32 * j + i] = d1 * q - m1;
            }
        }
    }
}

static double werr(const float *x, const float *y, const float *a, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        double r = (double)x[i] - y[i];
        e += (a ? a[i] : 1.0) * r * r;
    }
    return e;
}

/* Quantizes W[N, K] (imp or NULL) into type; dequantizes with
 * okv_qblock_dequant into Y[N, K]. */
static okv_status quantize(int type, const float *W, int N, int K, const float *imp, void **q, float *Y, okv_error *err) {
    okv_qscheme s = okv_qscheme_block(type);
    uint64_t bytes = okv_quant_bytes(&s, N, K);
    *q = malloc(bytes);
    okv_status st = okv_quantize_weighted(&s, W, N, K, imp, *q, "w", err);
    if (st) return st;
    size_t row = (size_t)(bytes / (uint64_t)N);
    for (int r = 0; r < N; r++) okv_qblock_dequant(type, (uint8_t *)*q + (size_t)r * row, Y + (size_t)r * K, (uint64_t)K);
    return OKV_OK;
}

/* Blocks no worse than round to nearest (weighted by imp when given); the
 * error sums of quantized and rtn into *e, *e_rtn; returns the blocks worse. */
static int vs_rtn(int type, const float *W, const float *Y, int N, int K, const float *imp, double *e, double *e_rtn) {
    const int n = okv_qblock_get(type)->elems;
    float y[256];
    int worse = 0;
    for (int r = 0; r < N; r++)
        for (int b = 0; b < K / n; b++) {
            const float *x = W + (size_t)r * K + b * n, *a = imp ? imp + b * n : NULL;
            rtn_block(type, x, y);
            double er = werr(x, y, a, n), eq = werr(x, Y + (size_t)r * K + b * n, a, n);
            if (eq > er * (1 + 1e-5) + 1e-30) {
                if (worse < 3)
                    fprintf(stderr, "  %s row %d block %d: error %.6g > round to nearest's %.6g\n",
                            okv_qblock_get(type)->name, r, b, eq, er);
                worse++;
            }
            *e += eq;
            *e_rtn += er;
        }
    return worse;
}

static void fill(float *W, int N, int K, bool bell, float offset) {
    for (int i = 0; i < N * K; i++) {
        float v = bell ? (frand() + frand() + frand()) / 3.0f : frand();
        W[i] = v * 0.05f * (float)(1 + (i / K) % 4) + offset;
    }
}

static void test_round_trips(void) {
    const int N = 7, K = 3 * 256;
    float *W = malloc(sizeof(float) * N * K), *Y = malloc(sizeof(float) * N * K);
    for (int t = 0; t < NTYPES; t++) {
        const okv_qblock_info *b = okv_qblock_get(TYPES[t]);
        for (int bell = 0; bell < 2; bell++) {
            double e = 0, er = 0;
            int worse = 0;
            for (int off = 0; off < 2; off++) {
                fill(W, N, K, bell, off ? 0.02f : 0.0f);
                void *q;
                okv_error err = {0};
                CHECK_OK(quantize(TYPES[t], W, N, K, NULL, &q, Y, &err), &err);
                worse += vs_rtn(TYPES[t], W, Y, N, K, NULL, &e, &er);
                /* okv_dequant_row reads the same blocks */
                okv_qscheme s = okv_qscheme_block(TYPES[t]);
                float row[3 * 256];
                okv_dequant_row(&s, q, N, K, N - 1, row);
                CHECK(!memcmp(row, Y + (size_t)(N - 1) * K, sizeof row));
                free(q);
            }
            printf("%s %s: squared error %.4f of round to nearest's\n", b->name, bell ? "bell" : "uniform", e / er);
            CHECKF(worse == 0, "%s %s: %d blocks worse than round to nearest", b->name, bell ? "bell" : "uniform", worse);
            /* the search gains on every type (8-bit codes least) */
            CHECKF(e < (b->bits >= 8 ? 0.995 : 0.97) * er, "%s %s: search gained only %.4f", b->name,
                   bell ? "bell" : "uniform", e / er);
        }
    }
    free(W);
    free(Y);
}

/* Importance log-uniform over 1e-3 .. 1e3 (like activations' E[x^2]). */
static void test_weighted(void) {
    const int N = 9, K = 2 * 256;
    float *W = malloc(sizeof(float) * N * K), *Yu = malloc(sizeof(float) * N * K), *Yw = malloc(sizeof(float) * N * K),
          *imp = malloc(sizeof(float) * K), *ones = malloc(sizeof(float) * K);
    fill(W, N, K, true, 0.005f);
    for (int k = 0; k < K; k++) imp[k] = powf(10.0f, 3.0f * frand()), ones[k] = 1.0f;
    for (int t = 0; t < NTYPES; t++) {
        const okv_qblock_info *b = okv_qblock_get(TYPES[t]);
        void *qu, *qw, *q1;
        okv_error err = {0};
        CHECK_OK(quantize(TYPES[t], W, N, K, NULL, &qu, Yu, &err), &err);
        CHECK_OK(quantize(TYPES[t], W, N, K, imp, &qw, Yw, &err), &err);
        CHECK_OK(quantize(TYPES[t], W, N, K, ones, &q1, Yu, &err), &err);
        okv_qscheme s = okv_qscheme_block(TYPES[t]);
        CHECKF(!memcmp(qu, q1, okv_quant_bytes(&s, N, K)), "%s: all-ones importance differs from none", b->name);
        free(q1);
        CHECK_OK(quantize(TYPES[t], W, N, K, NULL, &q1, Yu, &err), &err); /* Yu = unweighted again */
        int worse = 0;
        double tu = 0, tw = 0;
        for (int r = 0; r < N; r++)
            for (int k0 = 0; k0 < K; k0 += b->elems) {
                size_t o = (size_t)r * K + k0;
                double eu = werr(W + o, Yu + o, imp + k0, b->elems), ew = werr(W + o, Yw + o, imp + k0, b->elems);
                worse += ew > eu * (1 + 1e-5) + 1e-30;
                tu += eu;
                tw += ew;
            }
        double e = 0, er = 0;
        int worse_rtn = vs_rtn(TYPES[t], W, Yw, N, K, imp, &e, &er);
        printf("%s: weighted error x%.3f of the unweighted quantization's (x%.3f of round to nearest's)\n", b->name,
               tw / tu, e / er);
        CHECKF(worse == 0, "%s: %d blocks worse weighted than unweighted", b->name, worse);
        CHECKF(worse_rtn == 0, "%s: %d blocks worse weighted than round to nearest", b->name, worse_rtn);
        CHECKF(tw < 0.9 * tu, "%s: weighting gained only x%.3f", b->name, tw / tu);
        free(qu);
        free(qw);
        free(q1);
    }
    okv_qscheme s = okv_qscheme_block(OKV_QB_Q4_K);
    void *q = malloc(okv_quant_bytes(&s, N, K));
    okv_error err = {0};
    imp[300] = -2.0f;
    okv_status st = okv_quantize_weighted(&s, W, N, K, imp, q, "blk.1.w", &err);
    CHECKF(st == OKV_ERR_INVALID && strstr(err.message, "blk.1.w") && strstr(err.message, "300"), "%d: %s", st,
           err.message);
    free(q);
    free(W);
    free(Yu);
    free(Yw);
    free(imp);
    free(ones);
}

/* Rows split any way give the same bytes (threads quantize row ranges). */
static void test_split(void) {
    const int N = 5, K = 256 * 2;
    float *W = malloc(sizeof(float) * N * K), *imp = malloc(sizeof(float) * K);
    fill(W, N, K, true, 0.0f);
    for (int k = 0; k < K; k++) imp[k] = 0.5f + fabsf(frand() * frand());
    for (int t = 0; t < NTYPES; t++) {
        okv_qscheme s = okv_qscheme_block(TYPES[t]);
        uint64_t bytes = okv_quant_bytes(&s, N, K);
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        memset(b, 0xa5, bytes);
        okv_error err = {0};
        CHECK_OK(okv_quantize_weighted(&s, W, N, K, imp, a, "w", &err), &err);
        CHECK_OK(okv_quantize_check(&s, N, K, imp, "w", &err), &err);
        CHECK_OK(okv_quantize_rows(&s, W, N, K, imp, b, 3, 5, "w", &err), &err);
        CHECK_OK(okv_quantize_rows(&s, W, N, K, imp, b, 0, 1, "w", &err), &err);
        CHECK_OK(okv_quantize_rows(&s, W, N, K, imp, b, 1, 3, "w", &err), &err);
        CHECKF(!memcmp(a, b, bytes), "%s: row split changes the bytes", okv_qblock_get(TYPES[t])->name);
        free(a);
        free(b);
    }
    free(W);
    free(imp);
}

/* Special blocks: zeros, an outlier, constants, tiny values; the block
 * after the outlier keeps a fine step; data on the Q8_0 grid comes back. */
static void test_edges(void) {
    const int K = 4 * 256;
    float W[4 * 256], Y[4 * 256];
    for (int t = 0; t < NTYPES; t++) {
        const okv_qblock_info *b = okv_qblock_get(TYPES[t]);
        for (int i = 0; i < K; i++) W[i] = frand() * 0.1f;
        for (int i = 0; i < 256; i++) W[i] = 0.0f;                    /* block(s) of zeros */
        W[256 + 5] = 50.0f;                                            /* an outlier */
        for (int i = 512; i < 640; i++) W[i] = -0.3f;                  /* constants */
        for (int i = 640; i < 768; i++) W[i] = frand() * 2e-7f;        /* below f16 steps */
        void *q;
        okv_error err = {0};
        CHECK_OK(quantize(TYPES[t], W, 1, K, NULL, &q, Y, &err), &err);
        double e = 0, er = 0;
        CHECKF(vs_rtn(TYPES[t], W, Y, 1, K, NULL, &e, &er) == 0, "%s: edge blocks worse than round to nearest", b->name);
        int nonzero = 0;
        for (int i = 0; i < 256; i++) nonzero += Y[i] != 0.0f;
        CHECKF(nonzero == 0, "%s: zero block dequantizes to %d nonzero values", b->name, nonzero);
        CHECKF(fabsf(Y[261] - 50.0f) < 50.0f * 0.1f, "%s: outlier %g", b->name, Y[261]);
        double emax = 0;
        for (int i = 768; i < K; i++) emax = fmax(emax, fabs(Y[i] - W[i]));
        CHECKF(emax < 0.1 / 3, "%s: a plain block has error %g", b->name, emax);
        double ec = 0;
        for (int i = 512; i < 640; i++) ec = fmax(ec, fabs(Y[i] - W[i]));
        CHECKF(ec < 0.3 * 0.01, "%s: constant -0.3 comes back with error %g", b->name, ec);
        free(q);
    }
    /* values on a Q8_0 grid: d * c with c in -127..127 using +-127 */
    for (int i = 0; i < 64; i++) W[i] = f16v(0.0123f) * (float)((int)(frand() * 127.0f));
    W[3] = f16v(0.0123f) * 127.0f;
    W[40] = -f16v(0.0123f) * 127.0f;
    void *q;
    okv_error err = {0};
    CHECK_OK(quantize(OKV_QB_Q8_0, W, 1, 64, NULL, &q, Y, &err), &err);
    CHECK(werr(W, Y, NULL, 64) == 0.0);
    free(q);
}

static void test_errors(void) {
    float vals[3] = {NAN, INFINITY, -INFINITY};
    const int K = 512;
    float *W = malloc(sizeof(float) * 3 * K);
    for (int t = 0; t < NTYPES; t++)
        for (int v = 0; v < 3; v++) {
            for (int i = 0; i < 3 * K; i++) W[i] = frand();
            W[2 * K + 301] = vals[v];
            okv_qscheme s = okv_qscheme_block(TYPES[t]);
            void *q = malloc(okv_quant_bytes(&s, 3, K));
            okv_error err = {0};
            okv_status st = okv_quantize(&s, W, 3, K, q, "model.layers.2.self_attn.q_proj.weight", &err);
            CHECKF(st == OKV_ERR_INVALID && strstr(err.message, "model.layers.2.self_attn.q_proj.weight") &&
                       strstr(err.message, "[2, 301]") && !strchr(err.message, '\n'),
                   "%s: %d: %s", okv_qblock_get(TYPES[t])->name, st, err.message);
            free(q);
        }
    /* K not whole blocks: the check names tensor, K and the block */
    okv_qscheme s = okv_qscheme_block(OKV_QB_Q4_K);
    okv_error err = {0};
    CHECK(okv_quantize_check(&s, 4, 640, NULL, "blk.0.ffn_up", &err) != OKV_OK);
    CHECKF(strstr(err.message, "blk.0.ffn_up") && strstr(err.message, "640") && strstr(err.message, "256"), "%s",
           err.message);
    s = okv_qscheme_block(OKV_QB_Q2_K); /* carried, not a quantization target */
    CHECK(okv_quantize_check(&s, 4, 256, NULL, "w", &err) == OKV_ERR_UNSUPPORTED && strstr(err.message, "q2_K"));
    /* a scale beyond f16 */
    for (int i = 0; i < 256; i++) W[i] = 1e9f * (i % 2 ? 1 : -1);
    s = okv_qscheme_block(OKV_QB_Q8_0);
    uint8_t q[8 * 34];
    CHECK(okv_quantize(&s, W, 1, 256, q, "big", &err) != OKV_OK && strstr(err.message, "big"));
    CHECK(okv_qblock_fallback(OKV_QB_Q4_K) == OKV_QB_Q4_0 && okv_qblock_fallback(OKV_QB_Q5_K) == OKV_QB_Q5_0 &&
          okv_qblock_fallback(OKV_QB_Q6_K) == OKV_QB_Q5_1 && okv_qblock_fallback(OKV_QB_Q8_0) == OKV_QB_Q8_0);
    free(W);
}

int main(void) {
    test_round_trips();
    test_weighted();
    test_split();
    test_edges();
    test_errors();
    return okv_test_finish();
}
