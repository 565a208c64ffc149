/* Tests the quantization layer: scheme checks and sizes, quantize ->
 * dequantize round trips (per group, no more squared error than the
 * range-based rounding computed here, not read back from the code under
 * test, and the search gaining on bell-shaped data), edge
 * groups (all zero, one huge outlier, scales in f16's subnormal range),
 * non-finite weights as errors naming tensor and element, pack reproducing
 * given codes and scales exactly, and the documented byte layout. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "okv_common.h"
#include "okv_quant.h"
#include "okv_test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static const int BITS[] = {4, 8}, GROUPS[] = {32, 64, 128, 256};

static okv_qscheme scheme(int bits, int group, bool asym) {
    okv_qscheme s = {bits, group, asym, OKV_F16, OKV_QB_NONE, false};
    return s;
}

/* The f16 nearest to x from above (the documented rounding of d). */
static float f16_above(float x) {
    uint16_t h = okv_f32_to_f16(x);
    if (okv_f16_to_f32(h) < x) h = (h & 0x8000) ? (uint16_t)(h == 0x8000 ? 0x0001 : h - 1) : (uint16_t)(h + 1);
    return okv_f16_to_f32(h);
}

/* The range-based rounding the search starts from (okv_quant.c head
 * comment), computed here: its step d and its squared error on the group. */
static double range_rule(const okv_qscheme *s, const float *w, int n, double *step) {
    float lo = w[0], hi = w[0], amax = 0;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, w[i]);
        hi = fmaxf(hi, w[i]);
        amax = fmaxf(amax, fabsf(w[i]));
    }
    float d, m = 0.0f;
    int cmin, cmax;
    if (!s->asym) {
        cmax = (1 << (s->bits - 1)) - 1;
        cmin = -cmax;
        d = f16_above(amax / (float)cmax);
    } else {
        cmax = (1 << s->bits) - 1;
        cmin = 0;
        m = -f16_above(-lo);
        d = f16_above((hi - m) / (float)cmax);
    }
    double e = 0;
    for (int i = 0; i < n; i++) {
        float q = d > 0 ? nearbyintf((w[i] - m) / d) : 0.0f;
        q = fminf(fmaxf(q, (float)cmin), (float)cmax);
        double r = (double)w[i] - ((double)d * q + m);
        e += r * r;
    }
    *step = d;
    return e;
}

/* Quantizes W, dequantizes every row and checks each group: its squared
 * error is at most the range rule's (the search only takes strict
 * improvements), and no element is off by more than two of that rule's
 * steps (a shrunk step clips the extremes a little, never a lot). Sums of
 * squared errors over all groups go to *sse / *sse_rule. */
static int round_trip_errors(const okv_qscheme *s, const float *W, int N, int K, double *sse, double *sse_rule) {
    uint64_t bytes = okv_quant_bytes(s, N, K);
    void *q = malloc(bytes);
    float *row = malloc(sizeof(float) * K);
    okv_error err = {0};
    int bad = 0;
    CHECK_OK(okv_quantize(s, W, N, K, q, "w", &err), &err);
    *sse = *sse_rule = 0;
    for (int r = 0; r < N; r++) {
        okv_dequant_row(s, q, N, K, r, row);
        for (int g = 0; g < K / s->group; g++) {
            const float *wg = W + (size_t)r * K + (size_t)g * s->group;
            double step, rule = range_rule(s, wg, s->group, &step), got = 0;
            for (int i = 0; i < s->group; i++) {
                double e = fabs(row[g * s->group + i] - wg[i]);
                got += e * e;
                if (e > 2 * step * (1 + 1e-6) + 1e-30) {
                    if (bad < 3)
                        fprintf(stderr, "  q%d g%d %s [%d,%d]: %.9g vs %.9g (step %.3g)\n", s->bits, s->group,
                                s->asym ? "asym" : "sym", r, g * s->group + i, row[g * s->group + i], wg[i], step);
                    bad++;
                }
            }
            if (got > rule * (1 + 1e-6) + 1e-36) {
                if (bad < 3)
                    fprintf(stderr, "  q%d g%d %s row %d group %d: squared error %.6g > the range rule's %.6g\n",
                            s->bits, s->group, s->asym ? "asym" : "sym", r, g, got, rule);
                bad++;
            }
            *sse += got;
            *sse_rule += rule;
        }
    }
    free(q);
    free(row);
    return bad;
}

static void test_round_trips(void) {
    for (int b = 0; b < 2; b++)
        for (int gi = 0; gi < 4; gi++)
            for (int a = 0; a < 2; a++) {
                okv_qscheme s = scheme(BITS[b], GROUPS[gi], a);
                /* one group, several groups, a superblock plus a tail of 3 */
                int Ks[3] = {s.group, 5 * s.group, 19 * s.group};
                double sse_all = 0, rule_all = 0;
                for (int ki = 0; ki < 3; ki++) {
                    int N = 3, K = Ks[ki];
                    float *W = malloc(sizeof(float) * N * K);
                    /* bell-shaped like trained weights: a sum of three uniforms */
                    for (int i = 0; i < N * K; i++)
                        W[i] = (frand() + frand() + frand()) * (i / K + 1) * 0.1f + (a ? 0.05f : 0.0f);
                    double sse, rule;
                    int bad = round_trip_errors(&s, W, N, K, &sse, &rule);
                    CHECKF(bad == 0, "q%d g%d asym=%d K=%d: %d elements or groups beyond the bounds", s.bits, s.group,
                           a, K, bad);
                    sse_all += sse;
                    rule_all += rule;
                    free(W);
                }
                /* the search finds real improvements on bell-shaped groups
                 * (measured: see the printed ratios) */
                printf("q%d g%d %s: squared error %.4f of the range rule's\n", s.bits, s.group, a ? "asym" : "sym",
                       sse_all / rule_all);
                CHECKF(sse_all < (s.bits == 4 ? 0.95 : 0.995) * rule_all, "q%d g%d asym=%d: search gained only %.4f",
                       s.bits, s.group, a, sse_all / rule_all);
            }
}

/* Rows with special groups: all zero, one huge outlier, tiny (subnormal
 * f16 scales) and tinier (below the smallest f16 step) values, constants. */
static void test_edge_groups(void) {
    for (int b = 0; b < 2; b++)
        for (int a = 0; a < 2; a++) {
            okv_qscheme s = scheme(BITS[b], 32, a);
            int N = 1, K = 6 * 32;
            float W[6 * 32];
            for (int i = 0; i < K; i++) W[i] = frand();
            for (int i = 0; i < 32; i++) W[i] = 0.0f;                   /* group 0: zeros */
            W[32 + 7] = 1000.0f;                                        /* group 1: outlier */
            for (int i = 64; i < 96; i++) W[i] = frand() * 3e-6f;       /* group 2: subnormal d */
            for (int i = 96; i < 128; i++) W[i] = frand() * 1e-9f;      /* group 3: below f16 steps */
            for (int i = 128; i < 160; i++) W[i] = -0.3f;               /* group 4: constant */
            double sse, rule;
            int bad = round_trip_errors(&s, W, N, K, &sse, &rule);
            CHECKF(bad == 0, "edge groups q%d asym=%d: %d elements or groups beyond the bounds", s.bits, a, bad);
            void *q = malloc(okv_quant_bytes(&s, N, K));
            float row[6 * 32];
            okv_error err = {0};
            CHECK_OK(okv_quantize(&s, W, N, K, q, "edge", &err), &err);
            okv_dequant_row(&s, q, N, K, 0, row);
            int nonzero = 0;
            for (int i = 0; i < 32; i++) nonzero += row[i] != 0.0f;
            CHECKF(nonzero == 0, "q%d asym=%d: all-zero group dequantizes to %d nonzero values", s.bits, a, nonzero);
            CHECKF(fabsf(row[39] - 1000.0f) <= 1000.0f / 7 / 2, "outlier %g", row[39]);
            /* the outlier only costs its own group: group 5 keeps a fine step */
            double e5 = 0;
            for (int i = 160; i < 192; i++) e5 = fmax(e5, fabs(row[i] - W[i]));
            CHECKF(e5 < 0.2, "group after the outlier has error %g", e5);
            free(q);
        }
}

static void test_non_finite(void) {
    float vals[3] = {NAN, INFINITY, -INFINITY};
    for (int v = 0; v < 3; v++)
        for (int a = 0; a < 2; a++) {
            okv_qscheme s = scheme(4, 32, a);
            float W[2 * 64];
            for (int i = 0; i < 128; i++) W[i] = frand();
            W[64 + 45] = vals[v];
            void *q = malloc(okv_quant_bytes(&s, 2, 64));
            okv_error err = {0};
            okv_status st = okv_quantize(&s, W, 2, 64, q, "model.layers.3.mlp.up_proj.weight", &err);
            CHECK(st != OKV_OK);
            CHECKF(strstr(err.message, "model.layers.3.mlp.up_proj.weight") && strstr(err.message, "[1, 45]"),
                   "message: %s", err.message);
            CHECK(!strchr(err.message, '\n'));
            free(q);
        }
    /* a scale beyond f16 is an error too, not an infinite weight */
    okv_qscheme s = scheme(8, 32, false);
    float W[32];
    for (int i = 0; i < 32; i++) W[i] = 1e9f;
    uint8_t q[64];
    okv_error err = {0};
    CHECK(okv_quantize(&s, W, 1, 32, q, "big", &err) != OKV_OK);
    CHECKF(strstr(err.message, "big") != NULL, "message: %s", err.message);
}

/* Given codes and exactly representable scales come back exactly. */
static void test_pack_exact(void) {
    for (int b = 0; b < 2; b++)
        for (int gi = 0; gi < 4; gi++)
            for (int a = 0; a < 2; a++) {
                okv_qscheme s = scheme(BITS[b], GROUPS[gi], a);
                int N = 3, K = 18 * s.group, G = K / s.group;
                uint8_t *codes = malloc((size_t)N * K);
                float *d = malloc(sizeof(float) * N * G), *m = malloc(sizeof(float) * N * G);
                for (int i = 0; i < N * K; i++) codes[i] = (uint8_t)((rng_state = rng_state * 6364136223846793005ull + 1) >> 56) & ((1 << s.bits) - 1);
                for (int i = 0; i < N * G; i++) {
                    d[i] = ldexpf((float)(1 + i % 5), -(i % 9));  /* few mantissa bits: f16-exact */
                    m[i] = ldexpf((float)(i % 7) - 3.0f, -(i % 4));
                }
                void *q = malloc(okv_quant_bytes(&s, N, K));
                okv_quant_pack(&s, N, K, codes, d, a ? m : NULL, q);
                float *row = malloc(sizeof(float) * K);
                int bad = 0, off = a ? 0 : 1 << (s.bits - 1);
                for (int r = 0; r < N; r++) {
                    okv_dequant_row(&s, q, N, K, r, row);
                    for (int k = 0; k < K; k++) {
                        int gidx = r * G + k / s.group;
                        double want = (double)d[gidx] * (codes[r * K + k] - off) + (a ? m[gidx] : 0.0);
                        bad += row[k] != (float)want;
                    }
                }
                CHECKF(bad == 0, "pack q%d g%d asym=%d: %d values differ", s.bits, s.group, a, bad);
                free(codes);
                free(d);
                free(m);
                free(q);
                free(row);
            }
}

/* The layout the kernels rely on (okv_quant.c head comment), checked from
 * the outside: 18 groups of 32 = a superblock of 16 and a tail of 2. */
static void test_layout(void) {
    int K = 18 * 32, G = 18;
    uint8_t codes[18 * 32];
    float d[18];
    for (int k = 0; k < K; k++) codes[k] = (uint8_t)(k % 251);
    for (int g = 0; g < G; g++) d[g] = (float)(g + 1);
    okv_qscheme s8 = scheme(8, 32, false);
    uint8_t q[18 * 32 + 36];
    CHECK(okv_quant_bytes(&s8, 1, K) == sizeof q);
    okv_quant_pack(&s8, 1, K, codes, d, NULL, q);
    /* unit u of superblock 0 = codes 4u..4u+3 of groups 0..15 */
    CHECK(q[0] == codes[0] && q[3] == codes[3] && q[4] == codes[32] && q[63] == codes[15 * 32 + 3]);
    CHECK(q[64] == codes[4] && q[64 + 4 * 5 + 2] == codes[5 * 32 + 6]);
    /* tail superblock: 2 lanes, 8-byte units */
    CHECK(q[512] == codes[512] && q[516] == codes[544] && q[520] == codes[516]);
    uint16_t d16;
    memcpy(&d16, q + K + 2 * 17, 2);
    CHECK(okv_f16_to_f32(d16) == 18.0f);
    okv_qscheme s4 = scheme(4, 32, true);
    uint8_t p[9 * 32 + 72];
    for (int k = 0; k < K; k++) codes[k] = (uint8_t)(k % 13);
    okv_quant_pack(&s4, 1, K, codes, d, d, p);
    /* pair 0: low nibbles unit 0, high nibbles unit 1 */
    CHECK(p[0] == (codes[0] | codes[4] << 4) && p[5] == (codes[33] | codes[37] << 4));
}

static void test_checks(void) {
    okv_error err = {0};
    okv_qscheme s = scheme(4, 32, true);
    CHECK(okv_qscheme_check(&s, 2048, 2048, "w", &err) == OKV_OK);
    CHECK(okv_qscheme_check(&s, 10, 100, "blk.0.ffn_up", &err) != OKV_OK);
    CHECKF(strstr(err.message, "blk.0.ffn_up") && strstr(err.message, "100") && strstr(err.message, "32"),
           "message: %s", err.message);
    okv_qscheme bad_bits = scheme(3, 32, false), bad_group = scheme(4, 48, false), bad_dt = s;
    bad_dt.scale_dtype = OKV_BF16;
    CHECK(okv_qscheme_check(&bad_bits, 1, 32, "w", &err) != OKV_OK && strstr(err.message, "3"));
    CHECK(okv_qscheme_check(&bad_group, 1, 96, "w", &err) != OKV_OK && strstr(err.message, "48"));
    CHECK(okv_qscheme_check(&bad_dt, 1, 32, "w", &err) != OKV_OK);
    CHECK(okv_qscheme_check(&s, (int64_t)1 << 40, 64, "w", &err) != OKV_OK);
    char buf[32];
    CHECK(!strcmp(okv_qscheme_name(&s, buf, sizeof buf), "q4 g32 asym f16"));
    okv_qscheme q8 = scheme(8, 128, false);
    CHECK(!strcmp(okv_qscheme_name(&q8, buf, sizeof buf), "q8 g128 sym f16"));
    /* sizes: codes + f16 scales (+ offsets) */
    CHECK(okv_quant_bytes(&s, 2, 64) == 64 + 2 * 2 * 2 * 2);
    CHECK(okv_quant_bytes(&q8, 3, 256) == 768 + 3 * 2 * 2);
    CHECK(okv_quant_bytes(&s, 128256, 2048) == 128256ull * 1024 + 128256ull * 64 * 4);
    CHECK(okv_quant_bytes(&s, INT64_MAX / 2, 64) == UINT64_MAX);
    CHECK(okv_quant_bytes(&s, 1, 33) == UINT64_MAX);
}

/* Weighted squared error sum_k imp[k] (w - q)^2 of each group of W against
 * its dequantized rows, computed here in double. */
static void weighted_group_errors(const okv_qscheme *s, const float *W, int N, int K, const float *imp, const void *q,
                                  double *per_group) {
    float *row = malloc(sizeof(float) * K);
    for (int r = 0; r < N; r++) {
        okv_dequant_row(s, q, N, K, r, row);
        for (int g = 0; g < K / s->group; g++) {
            double e = 0;
            for (int i = 0; i < s->group; i++) {
                int k = g * s->group + i;
                double d = (double)row[k] - W[(size_t)r * K + k];
                e += imp[k] * d * d;
            }
            per_group[(size_t)r * (K / s->group) + g] = e;
        }
    }
    free(row);
}

/* okv_quantize_weighted: per group never worse than okv_quantize on the
 * weighted objective (both judged here from the dequantized rows), clearly
 * better in total when the importances are skewed (log-uniform over 1e-3 ..
 * 1e3, like the activations' E[x^2] of a real model's channels), the same
 * bytes as okv_quantize when every weight is 1, and a negative or NaN
 * importance an error naming the tensor and channel. */
static void test_weighted(void) {
    const int N = 24, K = 256;
    float *W = malloc(sizeof(float) * N * K), *imp = malloc(sizeof(float) * K), *ones = malloc(sizeof(float) * K);
    for (int i = 0; i < N * K; i++) W[i] = (frand() + frand() + frand()) * 0.02f;
    for (int k = 0; k < K; k++) { imp[k] = powf(10.0f, 3.0f * frand()); ones[k] = 1.0f; }
    static const okv_qscheme schemes[] = {{4, 32, true, OKV_F16, OKV_QB_NONE, false}, {8, 32, false, OKV_F16, OKV_QB_NONE, false}, {4, 128, true, OKV_F16, OKV_QB_NONE, false},
                                          {4, 32, false, OKV_F16, OKV_QB_NONE, false}};
    for (size_t c = 0; c < sizeof schemes / sizeof *schemes; c++) {
        const okv_qscheme *s = &schemes[c];
        uint64_t bytes = okv_quant_bytes(s, N, K);
        void *qu = malloc(bytes), *qw = malloc(bytes), *q1 = malloc(bytes);
        okv_error err = {0};
        CHECK_OK(okv_quantize(s, W, N, K, qu, "w", &err), &err);
        CHECK_OK(okv_quantize_weighted(s, W, N, K, imp, qw, "w", &err), &err);
        CHECK_OK(okv_quantize_weighted(s, W, N, K, ones, q1, "w", &err), &err);
        CHECKF(!memcmp(qu, q1, bytes), "q%d g%d: all-ones importance differs from unweighted", s->bits, s->group);
        int G = N * (K / s->group), worse = 0;
        double *eu = malloc(sizeof(double) * G), *ew = malloc(sizeof(double) * G), tu = 0, tw = 0;
        weighted_group_errors(s, W, N, K, imp, qu, eu);
        weighted_group_errors(s, W, N, K, imp, qw, ew);
        for (int g = 0; g < G; g++) {
            worse += ew[g] > eu[g] * (1 + 1e-5) + 1e-30;
            tu += eu[g];
            tw += ew[g];
        }
        printf("q%d g%d %s: weighted error %.4g -> %.4g (x%.3f), %d/%d groups worse\n", s->bits, s->group,
               s->asym ? "asym" : "sym", tu, tw, tw / tu, worse, G);
        CHECKF(worse == 0, "q%d g%d: %d groups worse on the weighted objective", s->bits, s->group, worse);
        CHECKF(tw < 0.9 * tu, "q%d g%d: weighting gained only x%.3f", s->bits, s->group, tw / tu);
        free(eu); free(ew); free(qu); free(qw); free(q1);
    }
    okv_qscheme s4 = {4, 32, true, OKV_F16, OKV_QB_NONE, false};
    void *q = malloc(okv_quant_bytes(&s4, N, K));
    okv_error err = {0};
    imp[77] = -1.0f;
    okv_status st = okv_quantize_weighted(&s4, W, N, K, imp, q, "blk.3.w", &err);
    CHECKF(st == OKV_ERR_INVALID && strstr(err.message, "blk.3.w") && strstr(err.message, "77") && !strchr(err.message, '\n'),
           "status %d: %s", st, err.message);
    imp[77] = NAN;
    st = okv_quantize_weighted(&s4, W, N, K, imp, q, "blk.3.w", &err);
    CHECKF(st == OKV_ERR_INVALID && strstr(err.message, "77"), "status %d: %s", st, err.message);
    free(q); free(W); free(imp); free(ones);
}

int main(void) {
    test_weighted();
    test_checks();
    test_round_trips();
    test_edge_groups();
    test_non_finite();
    test_pack_exact();
    test_layout();
    return okv_test_finish();
}
