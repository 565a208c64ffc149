/* Tests okv_attend_write and attention: the reference against a naive double
 * implementation written here (which reads the pool through slot = f(pos),
 * not through runs), and the fast kernels of every table (1 and 2 threads)
 * against the reference on the same stored data. Scenarios: flat spans, ring
 * spans that wrap (2 runs), windows shorter than the span, GQA ratios 1..8
 * and MQA, head_dim 16..512 (and odd ones), T = 1 and T > 1, positions not
 * starting at 0, storage f32/f16/bf16, tens of thousands of keys; many
 * sequences in one pool (okv_attn_vis); the planned workspace. Tables: plain,
 * AVX2 and AVX-512 inner loops (those the CPU has), and the vdpbf16ps
 * decode kernel called directly over its odd shapes; tolerance 1e-5 absolute
 * against the reference (outputs are O(1): averages of values in [-1, 1)). */
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels.h"
#include "okv_kernels_internal.h"
#include "okv_test.h"
#include "kernel_test_util.h"
#include "attend_test_util.h"


static float stored(const void *pool, okv_dtype dt, size_t i) {
    switch (dt) {
    case OKV_F32: return ((const float *)pool)[i];
    case OKV_F16: return okv_f16_to_f32(((const uint16_t *)pool)[i]);
    case OKV_BF16: return okv_bf16_to_f32(((const uint16_t *)pool)[i]);
    }
    return NAN;
}

static int32_t slot_of(int32_t pos, int32_t ring) { return ring ? pos % ring : pos; }

/* ---- kv_write ------------------------------------------------------------------ */

static void test_kv_write(void) {
    enum { S = 11, Hkv = 2, D = 12, T = 7 };
    for (int d = 0; d < 3; d++) {
        okv_dtype dt = (okv_dtype)d;
        size_t row = Hkv * D, esz = okv_dtype_size(dt);
        unsigned char *k = malloc(S * row * esz), *v = malloc(S * row * esz);
        memset(k, 0xA5, S * row * esz);
        memset(v, 0x5A, S * row * esz);
        okv_attn_kv kv = {k, v, k, v, dt, dt, Hkv, D};
        float kin[T * Hkv * D], vin[T * Hkv * D];
        fill(kin, T * row, 3.0f);
        fill(vin, T * row, 3.0f);
        okv_run runs[2];
        int n = make_runs(8, 8 + T, S, runs); /* positions 8..14 -> slots 8,9,10,0,1,2,3 */
        CHECK(n == 2 && runs[0].slot == 8 && runs[0].n == 3 && runs[1].slot == 0 && runs[1].n == 4);
        okv_attend_write(&kv, runs, n, kin, vin);
        int bad = 0, touched = 0;
        for (int t = 0; t < T; t++) {
            size_t slot = (size_t)slot_of(8 + t, S);
            for (size_t e = 0; e < row; e++) {
                float wk = kin[t * row + e], wv = vin[t * row + e];
                if (dt == OKV_F16) { wk = okv_f16_to_f32(okv_f32_to_f16(wk)); wv = okv_f16_to_f32(okv_f32_to_f16(wv)); }
                if (dt == OKV_BF16) { wk = okv_bf16_to_f32(okv_f32_to_bf16(wk)); wv = okv_bf16_to_f32(okv_f32_to_bf16(wv)); }
                bad += stored(k, dt, slot * row + e) != wk || stored(v, dt, slot * row + e) != wv;
            }
        }
        for (size_t b = 4 * row * esz; b < 8 * row * esz; b++) touched += k[b] != 0xA5 || v[b] != 0x5A;
        CHECKF(bad == 0, "kv_write %s: %d elements wrong", okv_dtype_name(dt), bad);
        CHECKF(touched == 0, "kv_write %s wrote %d bytes outside its runs", okv_dtype_name(dt), touched);
        free(k);
        free(v);
    }
}

/* Ties round to even, checked on the stored bits (not via a converter). */
static void test_kv_write_rounding(void) {
    float k[4] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.00390625f, 1.01171875f}, v[4] = {0};
    uint16_t kh[4], vh[4];
    okv_attn_kv kv = {kh, vh, kh, vh, OKV_F16, OKV_F16, 1, 4};
    okv_run run = {0, 1, 0};
    okv_attend_write(&kv, &run, 1, k, v);
    CHECK(kh[0] == 0x3c00 && kh[1] == 0x3c02); /* 1+2^-11 -> 1; 1+3*2^-11 -> 1+2^-9 */
    kv.k_dtype = kv.v_dtype = OKV_BF16;
    okv_attend_write(&kv, &run, 1, k, v);
    CHECK(kh[2] == 0x3f80 && kh[3] == 0x3f82);
    CHECK(vh[0] == 0 && vh[3] == 0);
}

/* ---- attention ------------------------------------------------------------------ */

typedef struct scenario {
    const char *what;
    int Hq, Hkv, D;
    okv_dtype dt;
    int T;
    int32_t p0;      /* first query position */
    int32_t base;    /* first cached position read */
    int32_t window;  /* 0 = full */
    int32_t ring;    /* slots of a ring cache; 0 = flat */
    float q_scale;   /* larger = peakier softmax */
} scenario;

/* Naive double attention straight from the definition, reading the pool by
 * slot_of(position). */
static void naive_attend(const scenario *s, const float *q, const okv_attn_kv *kv, const int32_t *pos, float scale,
                         double *out) {
    int G = s->Hq / s->Hkv, end = s->p0 + s->T;
    size_t row = (size_t)s->Hkv * s->D;
    double *w = malloc(sizeof(double) * (size_t)(end - s->base));
    for (int t = 0; t < s->T; t++)
        for (int h = 0; h < s->Hq; h++) {
            const float *qh = q + ((size_t)t * s->Hq + h) * s->D;
            int kvh = h / G;
            double mx = -INFINITY, sum = 0;
            for (int32_t j = s->base; j < end; j++) {
                bool vis = j <= pos[t] && (s->window == 0 || pos[t] - j < s->window);
                double d = 0;
                size_t at = (size_t)slot_of(j, s->ring) * row + (size_t)kvh * s->D;
                for (int e = 0; e < s->D && vis; e++) d += (double)qh[e] * stored(kv->k, kv->k_dtype, at + e);
                w[j - s->base] = vis ? d * scale : -INFINITY;
                if (w[j - s->base] > mx) mx = w[j - s->base];
            }
            for (int32_t j = s->base; j < end; j++) sum += w[j - s->base] = exp(w[j - s->base] - mx);
            for (int e = 0; e < s->D; e++) {
                double acc = 0;
                for (int32_t j = s->base; j < end; j++)
                    acc += w[j - s->base] *
                           stored(kv->v, kv->v_dtype, (size_t)slot_of(j, s->ring) * row + (size_t)kvh * s->D + e);
                out[((size_t)t * s->Hq + h) * s->D + e] = acc / sum;
            }
        }
    free(w);
}


/* The tolerance of a table's attention against the reference: 1e-5, or,
 * where it rounds q, k, p, v to bf16 (AMX tiles on f16/bf16 pools), 2^-8
 * relative on each of four operands on O(1) outputs with peaky softmaxes. */
static double g_worst_bf16;
static double attend_tol(const okv_kernels *k, okv_dtype dt) {
    /* q8 pools on the AMX decode kernel: exact key codes and scales, the
     * query in two int8 planes (~15 bits): measured <= 1.6e-5 (the peaky
     * case); bf16 or one-plane queries would be ~10x that */
    if (dt == OKV_Q8 && k->attend == okv_attend_decode_amx) return 1e-4;
    return k->attend_bf16 && dt != OKV_F32 ? 1e-2 : 1e-5;
}

static void run_scenario(const scenario *s, const okv_kernels **tables, int n_tables, okv_threadpool *tp2,
                         bool with_naive) {
    int32_t end = s->p0 + s->T, n_keys = end - s->base;
    int32_t slots = s->ring ? s->ring : end;
    size_t row = (size_t)s->Hkv * s->D, rb = okv_kv_row_bytes(s->dt, row); /* q8: blocks, okv_kvq8.h */
    void *kp = calloc((size_t)slots, rb), *vp = calloc((size_t)slots, rb);
    okv_attn_kv kv = {kp, vp, kp, vp, s->dt, s->dt, s->Hkv, s->D};
    /* store random k/v for every position of the span, the way steps would */
    float *kin = malloc(sizeof(float) * n_keys * row), *vin = malloc(sizeof(float) * n_keys * row);
    fill(kin, (size_t)n_keys * row, 1.0f);
    fill(vin, (size_t)n_keys * row, 1.0f);
    okv_run runs[3];
    int n_runs = make_runs(s->base, end, s->ring, runs);
    okv_attend_write(&kv, runs, n_runs, kin, vin);

    size_t nq = (size_t)s->T * s->Hq * s->D;
    float *q = malloc(sizeof(float) * nq), *ref = malloc(sizeof(float) * nq), *fast = malloc(sizeof(float) * nq);
    int32_t *pos = malloc(sizeof(int32_t) * s->T);
    fill(q, nq, s->q_scale);
    for (int t = 0; t < s->T; t++) pos[t] = s->p0 + t;
    okv_attn_args a = {q, s->T, s->Hq, pos, kv, runs, n_runs, s->window, 1.0f / sqrtf((float)s->D), ref, NULL};
    okv_attend_reference(&a);

    if (with_naive) {
        double *want = malloc(sizeof(double) * nq), m = 0;
        naive_attend(s, q, &kv, pos, a.scale, want);
        for (size_t i = 0; i < nq; i++) {
            double d = fabs(ref[i] - want[i]);
            if (!(d <= m)) m = isnan(d) ? INFINITY : d;
        }
        CHECKF(m <= 2e-6, "%s: reference vs naive max diff %g", s->what, m);
        free(want);
    }
    for (int ti = 0; ti < n_tables; ti++)
        for (int th = 0; th < 2; th++) {
            a.out = fast;
            memset(fast, 0xff, sizeof(float) * nq); /* NaN: every output must be written */
            tables[ti]->attend(th ? tp2 : NULL, &a);
            double m = max_diff_f(fast, ref, nq), tol = attend_tol(tables[ti], s->dt);
            if (tol > 1e-5 && m > g_worst_bf16) g_worst_bf16 = m;
            CHECKF(m <= tol, "%s: %s attend (%d threads) vs reference max diff %g", s->what, tables[ti]->name,
                   th + 1, m);
        }
    free(kp);
    free(vp);
    free(kin);
    free(vin);
    free(q);
    free(ref);
    free(fast);
    free(pos);
}

/* A split key span: the reference and the fast kernel must agree when one
 * run is split into several (including an empty one). */
static void test_split_runs(const okv_kernels **tables, int n_tables) {
    enum { Hq = 4, Hkv = 2, D = 32, T = 3, N = 40 };
    size_t row = Hkv * D;
    float *k = malloc(sizeof(float) * N * row), *v = malloc(sizeof(float) * N * row);
    fill(k, N * row, 1.0f);
    fill(v, N * row, 1.0f);
    float q[T * Hq * D], one[T * Hq * D], many[T * Hq * D], fast[T * Hq * D];
    fill(q, T * Hq * D, 2.0f);
    int32_t pos[T] = {37, 38, 39};
    okv_attn_kv kv = {k, v, k, v, OKV_F32, OKV_F32, Hkv, D};
    okv_run whole[1] = {{0, N, 0}};
    okv_run parts[4] = {{0, 10, 0}, {10, 0, 10}, {10, 25, 10}, {35, 5, 35}};
    okv_attn_args a = {q, T, Hq, pos, kv, whole, 1, 0, 0.2f, one, NULL};
    okv_attend_reference(&a);
    a.runs = parts;
    a.n_runs = 4;
    a.out = many;
    okv_attend_reference(&a);
    CHECK(max_diff_f(one, many, T * Hq * D) == 0.0);
    for (int ti = 0; ti < n_tables; ti++) {
        a.out = fast;
        tables[ti]->attend(NULL, &a);
        CHECKF(max_diff_f(fast, one, T * Hq * D) <= 1e-5, "%s attend over split runs", tables[ti]->name);
    }
    free(k);
    free(v);
}

static void test_attention(void) {
    const okv_kernels *tables[4];
    int n_tables = attention_tables(tables, false);
    okv_threadpool *tp2 = okv_threadpool_create(2);
    static const scenario cases[] = {
        /* what                         Hq Hkv  D   dt        T   p0   base win ring qs */
        {"flat decode first token",      4, 4, 64, OKV_F32,  1,  0,    0,  0,  0, 1},
        {"flat decode",                  8, 2, 64, OKV_F32,  1, 57,    0,  0,  0, 1},
        {"flat prefill from 0",          8, 4, 32, OKV_F32, 17,  0,    0,  0,  0, 2},
        {"flat chunk at 37",             8, 2, 64, OKV_F16,  5, 37,    0,  0,  0, 1},
        {"flat chunk peaky",             4, 1, 64, OKV_BF16, 9, 20,    0,  0,  0, 6},
        {"flat window < span",           6, 3, 16, OKV_F32, 11, 30,    0,  5,  0, 1},
        {"flat window 1",                4, 2, 16, OKV_F32,  4,  9,    0,  1,  0, 1},
        {"ring wrap decode",             8, 4, 64, OKV_F32,  1, 100,  85, 16, 23, 1},
        {"ring wrap prefill",            8, 4, 64, OKV_F16,  8, 100,  85, 16, 23, 1},
        {"ring wrap bf16",               8, 1, 128, OKV_BF16, 8, 300, 285, 16, 23, 1},
        {"ring no wrap",                 4, 2, 32, OKV_F32,  8, 14,    0, 16, 23, 1},
        {"ring exact fill",              4, 2, 32, OKV_F16,  8, 15,    0, 16, 23, 1},
        {"gqa 1",                        4, 4, 80, OKV_F32,  3, 40,    0,  0,  0, 1},
        {"gqa 2",                        8, 4, 80, OKV_F16,  3, 40,    0,  0,  0, 1},
        {"gqa 4",                       16, 4, 48, OKV_BF16, 3, 40,    0,  0,  0, 1},
        {"gqa 8",                       16, 2, 48, OKV_F32,  3, 40,    0,  0,  0, 1},
        {"mqa",                          8, 1, 64, OKV_F16,  6, 40,    0,  0,  0, 1},
        {"head_dim 16",                  2, 1, 16, OKV_F32,  2, 10,    0,  0,  0, 1},
        {"head_dim 20 (tail)",           2, 1, 20, OKV_F16,  2, 10,    0,  0,  0, 1},
        {"head_dim 256",                 4, 2, 256, OKV_BF16, 2, 30,   0,  0,  0, 1},
        {"head_dim 512",                 4, 1, 512, OKV_F32,  2, 30,   0,  0,  0, 1},
        {"head_dim 512 ring",            8, 1, 512, OKV_BF16, 4, 600, 591, 10, 13, 1},
        {"long prefill",                 4, 2, 16, OKV_F32, 200, 50,   0,  0,  0, 1},
        {"long prefill window",          4, 1, 32, OKV_F16, 130, 0,    0, 64,  0, 1},
        {"mqa long decode (splits)",     4, 1, 64, OKV_F16,  1, 20000, 0,  0,  0, 1},
        {"mqa decode window (splits)",   4, 1, 64, OKV_BF16, 1, 9000,  0, 700, 0, 1},
        {"mqa chunk long (splits)",      8, 1, 32, OKV_F32,  3, 3000,  0,  0,  0, 2},
        {"gqa decode long (splits)",    32, 8, 64, OKV_F16,  1, 3000,  0,  0,  0, 1},
        {"gqa small chunk long",         8, 4, 64, OKV_BF16, 4, 2000,  0,  0,  0, 1},
        {"odd dims all heads",           6, 3, 20, OKV_F16,  1, 700,   0,  0,  0, 1},
        {"ring long window decode",      8, 2, 64, OKV_F16,  1, 50000, 45905, 4096, 4127, 1},
        /* AMX tiles (f16/bf16, head_dim % 32 == 0, T x G >= 16): partial key
         * blocks, partial vector tiles, blocks at run and window edges */
        {"amx prefill from 0",           8, 2, 64, OKV_BF16, 37,  0,   0,  0,  0, 1},
        {"amx chunk long",              32, 8, 64, OKV_BF16, 45, 700,  0,  0,  0, 2},
        {"amx chunk f16",               32, 8, 64, OKV_F16,  19, 333,  0,  0,  0, 1},
        {"amx head_dim 128",            16, 4, 128, OKV_BF16, 21, 130, 0,  0,  0, 1},
        {"amx head_dim 256",             8, 2, 256, OKV_F16, 9,  200,  0,  0,  0, 1},
        {"amx head_dim 32 mqa",          8, 1, 32, OKV_BF16, 6,  90,   0,  0,  0, 3},
        {"amx gqa 3",                    9, 3, 64, OKV_BF16, 23, 77,   0,  0,  0, 1},
        {"amx gqa 1",                    4, 4, 64, OKV_F16,  40, 10,   0,  0,  0, 1},
        {"amx gqa 8 peaky",             16, 2, 64, OKV_BF16, 30, 500,  0,  0,  0, 6},
        {"amx window",                   8, 2, 64, OKV_BF16, 70, 300,  0, 45,  0, 1},
        {"amx window 1",                 8, 2, 64, OKV_F16,  16, 50,   0,  1,  0, 1},
        {"amx ring wrap",                8, 2, 128, OKV_BF16, 50, 1000, 910, 100, 157, 1},
        {"amx ring wrap f16",           32, 8, 64, OKV_F16,  64, 5000, 4864, 128, 200, 1},
        {"amx one kv head split",        8, 1, 64, OKV_BF16, 4, 3000,  0,  0,  0, 1},
        {"amx mqa 32",                  32, 1, 64, OKV_BF16, 3, 2500,  0,  0,  0, 1},
        {"amx 128-key blocks",           8, 2, 64, OKV_BF16, 40, 9000, 0,  0,  0, 1},
        {"amx 128-key blocks window",    8, 2, 128, OKV_F16, 33, 9100, 0, 300, 0, 1},
        {"amx 128-key blocks gqa 3",     9, 3, 64, OKV_BF16, 13, 8200, 0,  0,  0, 2},
        /* 65 row blocks per kv head: a super-block of 64 and one of 1 */
        {"amx super-blocks of 64",      32, 8, 32, OKV_BF16, 520, 100, 0,  0,  0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        scenario s = cases[i];
        run_scenario(&s, tables, n_tables, tp2, true);
    }
    /* the grid the foundation issue names: T x GQA ratio x storage dtype,
     * continuing a sequence (p0 > 0) */
    static const int Ts[] = {1, 2, 7, 64}, ratios[] = {1, 2, 4, 8};
    for (int ti = 0; ti < 4; ti++)
        for (int ri = 0; ri < 4; ri++)
            for (int d = 0; d < 3; d++) {
                scenario s = {"grid", 2 * ratios[ri], 2, 64, (okv_dtype)d, Ts[ti], 33, 0, 0, 0, 1};
                run_scenario(&s, tables, n_tables, tp2, true);
            }
    /* every storage dtype on one shape, fast vs reference on the same data */
    for (int d = 0; d < 3; d++) {
        scenario s = {"dtype sweep", 8, 2, 128, (okv_dtype)d, 7, 70, 0, 0, 0, 1};
        run_scenario(&s, tables, n_tables, tp2, true);
    }
    /* AMX tiles over every GQA ratio 1..15 at head_dim 64/128/256: odd T,
     * key counts and chunk starts off the 64-key blocks, a window, a ring
     * that wraps inside the span */
    for (int g = 1; g <= 15; g++)
        for (int di = 0; di < 3; di++) {
            int D = 64 << di, T = 16 / g + 1 + 2 * (g % 3) + di;
            scenario s = {"amx gqa sweep", 2 * g, 2, D, di == 1 ? OKV_F16 : OKV_BF16, T, 61 + 7 * g, 0, 0, 0, 1};
            if (g % 4 == 1) s.window = 37 + g;
            if (g % 5 == 2) s.p0 += 150, s.base = (s.p0 + T) - 90, s.ring = 97, s.window = 90;
            run_scenario(&s, tables, n_tables, tp2, false);
        }
    test_split_runs(tables, n_tables);
    okv_threadpool_free(tp2);
}

/* Scores that rise steadily along the keys (by ~230 in log2 units, far
 * more than the AMX kernel's lazy offset threshold of 8, and more than
 * f32's range above it: an offset that failed to move overflows), so the
 * offset moves many times; that fall from the first block on; and that
 * peak once early, so it never moves again. The AMX tiles (bf16 KV) against
 * the reference, 1 and 2 threads, chunks of 37, 64 and 100 rows. */
static void test_rising_scores(const okv_kernels **tables, int n_tables, okv_threadpool *tp2) {
    enum { Hq = 8, Hkv = 2, D = 64, N = 700 };
    size_t row = (size_t)Hkv * D;
    for (int shape = 0; shape < 3; shape++)
        for (int d = 1; d < 3; d++) {
            okv_dtype dt = (okv_dtype)d;
            int T = shape == 2 ? 100 : shape == 1 ? 64 : 37, p0 = shape == 2 ? N - T : shape == 1 ? 300 : 600;
            int32_t end = p0 + T;
            float *kin = malloc(sizeof(float) * end * row), *vin = malloc(sizeof(float) * end * row);
            void *kp = malloc(okv_dtype_size(dt) * end * row), *vp = malloc(okv_dtype_size(dt) * end * row);
            fill(vin, (size_t)end * row, 1.0f);
            for (int32_t j = 0; j < end; j++) /* k_j[0] = g(j), an integer (exact in bf16), the rest small noise */
                for (size_t e = 0; e < row; e++) {
                    float gj = shape == 0 ? floorf(0.23f * (float)j) : shape == 1 ? 160.0f - floorf(0.23f * (float)j)
                                                                                    : (j == 3 ? 160.0f : 0.0f);
                    kin[(size_t)j * row + e] = e % D == 0 ? gj : 0.05f * frand();
                }
            okv_attn_kv kv = {kp, vp, kp, vp, dt, dt, Hkv, D};
            okv_run run = {0, end, 0};
            okv_attend_write(&kv, &run, 1, kin, vin);
            size_t nq = (size_t)T * Hq * D;
            float *q = malloc(sizeof(float) * nq), *ref = malloc(sizeof(float) * nq), *fast = malloc(sizeof(float) * nq);
            for (size_t i = 0; i < nq; i++) q[i] = i % D == 0 ? 8.0f : 0.1f * frand(); /* score ~ g(j) */
            int32_t *pos = malloc(sizeof(int32_t) * T);
            for (int t = 0; t < T; t++) pos[t] = p0 + t;
            okv_attn_args a = {q, T, Hq, pos, kv, &run, 1, 0, 1.0f / sqrtf((float)D), ref, NULL};
            okv_attend_reference(&a);
            for (int ti = 0; ti < n_tables; ti++) /* the f32 kernels' roundings of scores ~160 exceed 1e-5 */
                for (int th = 0; th < 2 && tables[ti]->attend_bf16; th++) {
                    a.out = fast;
                    memset(fast, 0xff, sizeof(float) * nq);
                    tables[ti]->attend(th ? tp2 : NULL, &a);
                    double m = max_diff_f(fast, ref, nq), tol = attend_tol(tables[ti], dt);
                    if (tol > 1e-5 && m > g_worst_bf16) g_worst_bf16 = m;
                    CHECKF(m <= tol, "rising scores shape %d %s: %s (%d threads) vs reference %g", shape,
                           okv_dtype_name(dt), tables[ti]->name, th + 1, m);
                }
            free(kin);
            free(vin);
            free(kp);
            free(vp);
            free(q);
            free(ref);
            free(fast);
            free(pos);
        }
}

/* ---- many sequences (okv_attn_vis) ------------------------------------------------ */

/* Naive double attention over the contract in okv_kernels.h, slot by slot
 * in the runs' order, written here from the rule (not from the kernels). */
static void naive_vis(const okv_attn_args *a, double *out) {
    const int D = a->kv.head_dim, Hkv = a->kv.kv_heads, G = a->n_heads / Hkv;
    size_t row = (size_t)Hkv * D;
    for (int t = 0; t < a->T; t++)
        for (int h = 0; h < a->n_heads; h++) {
            const float *qh = a->q + ((size_t)t * a->n_heads + h) * D;
            double mx = -INFINITY, sum = 0, w[600];
            int n = 0;
            for (int r = 0; r < a->n_runs; r++)
                for (int i = 0; i < a->runs[r].n; i++, n++) {
                    int32_t slot = a->runs[r].slot + i, kp = a->vis->k_pos[slot], qp = a->positions[t];
                    bool vis = ((a->vis->k_owner[slot] >> a->vis->q_seq[t]) & 1) && kp <= qp &&
                               (a->window == 0 || qp - kp < a->window);
                    double d = 0;
                    for (int e = 0; e < D && vis; e++)
                        d += (double)qh[e] * stored(a->kv.k, a->kv.k_dtype, slot * row + (size_t)(h / G) * D + e);
                    w[n] = vis ? d * a->scale : -INFINITY;
                    if (w[n] > mx) mx = w[n];
                }
            for (int j = 0; j < n; j++) sum += w[j] = mx == -INFINITY ? 0 : exp(w[j] - mx);
            for (int e = 0; e < D; e++) {
                double acc = 0;
                int j = 0;
                for (int r = 0; r < a->n_runs; r++)
                    for (int i = 0; i < a->runs[r].n; i++, j++)
                        acc += w[j] * stored(a->kv.v, a->kv.v_dtype, (a->runs[r].slot + i) * row + (size_t)(h / G) * D + e);
                out[((size_t)t * a->n_heads + h) * D + e] = sum > 0 ? acc / sum : 0;
            }
        }
}

/* A cell pool of S slots shared by 3 sequences: positions scattered over
 * the slots, some cells owned by several sequences (a forked prefix), some
 * free; queries of different sequences in one call (a batched step), one of
 * them seeing nothing. Reference vs naive, every table vs reference, 1 and
 * 2 threads, with and without a window, every storage dtype. */
static void test_visibility(const okv_kernels **tables, int n_tables, okv_threadpool *tp2) {
    enum { S = 520, Hkv = 2, DMAX = 64, MAXQ = 24 };
    static const int shapes[][3] = {{4, 1, 0}, {8, 3, 0}, {6, 24, 0}, {8, 5, 7}, {2, 1, 33}}; /* Hq, T, window */
    for (int D = 40; D <= DMAX; D += DMAX - 40) /* 64: also the AMX tiles */
    for (int d = 0; d < 3; d++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int Hq = shapes[si][0], T = shapes[si][1];
            okv_dtype dt = (okv_dtype)d;
            size_t row = Hkv * D, esz = okv_dtype_size(dt);
            void *kp = malloc(S * row * esz), *vp = malloc(S * row * esz);
            float *kin = malloc(sizeof(float) * S * row), *vin = malloc(sizeof(float) * S * row);
            fill(kin, S * row, 1.0f);
            fill(vin, S * row, 1.0f);
            okv_attn_kv kv = {kp, vp, kp, vp, dt, dt, Hkv, D};
            okv_run all = {0, S, 0};
            okv_attend_write(&kv, &all, 1, kin, vin);
            int32_t kpos[S], next[3] = {0, 0, 0};
            uint64_t owner[S];
            for (int i = 0; i < S; i++) { /* slot i: the next position of a random sequence */
                int sq = (int)((frand() + 1.0f) * 1.5f) % 3;
                kpos[i] = next[sq]++;
                owner[i] = 1ull << sq;
                if (sq == 0 && kpos[i] < 40) owner[i] |= 2ull << (kpos[i] % 2); /* shared prefix */
                if (i % 37 == 5) owner[i] = 0;                                    /* a free cell */
            }
            int32_t qseq[MAXQ], qpos[MAXQ];
            for (int t = 0; t < T; t++) {
                qseq[t] = t % 3;
                qpos[t] = next[qseq[t]] - 1 - 2 * (t / 3);
            }
            if (T > 2) qpos[2] = -1; /* sees nothing */
            okv_attn_vis vis = {qseq, kpos, owner};
            okv_run runs[2] = {{300, S - 300, 0}, {0, 300, 0}}; /* any order */
            size_t nq = (size_t)T * Hq * D;
            float q[MAXQ * 8 * DMAX], ref[MAXQ * 8 * DMAX], fast[MAXQ * 8 * DMAX];
            double want[MAXQ * 8 * DMAX];
            fill(q, nq, 2.0f);
            okv_attn_args a = {q, T, Hq, qpos, kv, runs, 2, shapes[si][2], 1.0f / sqrtf((float)D), ref, &vis};
            okv_attend_reference(&a);
            naive_vis(&a, want);
            double m = 0;
            for (size_t i = 0; i < nq; i++)
                if (!(fabs(ref[i] - want[i]) <= m)) m = isnan(ref[i]) ? INFINITY : fabs(ref[i] - want[i]);
            CHECKF(m <= 2e-6, "vis %s T=%d Hq=%d: reference vs naive %g", okv_dtype_name(dt), T, Hq, m);
            for (int ti = 0; ti < n_tables; ti++)
                for (int th = 0; th < 2; th++) {
                    a.out = fast;
                    memset(fast, 0xff, sizeof(float) * nq);
                    tables[ti]->attend(th ? tp2 : NULL, &a);
                    double f = max_diff_f(fast, ref, nq);
                    CHECKF(f <= attend_tol(tables[ti], dt), "vis %s T=%d Hq=%d w=%d: %s (%d threads) vs reference %g", okv_dtype_name(dt), T,
                           Hq, shapes[si][2], tables[ti]->name, th + 1, f);
                }
            free(kp);
            free(vp);
            free(kin);
            free(vin);
        }
}

/* The planned workspace: a pool carrying okv_attend_scratch_bytes (for the
 * largest T) gives the same results as allocating, for smaller T and any
 * key count; a workspace one byte short is not used (the kernel allocates). */
static void test_workspace(const okv_kernels **tables, int n_tables) {
    enum { Hq = 32, Hkv = 8, D = 64, TMAX = 70, N = 3000 };
    okv_threadpool *tp = okv_threadpool_create(2);
    size_t bytes = okv_attend_scratch_bytes(TMAX, Hq, Hkv, D, 2);
    CHECK(bytes > 0);
    char *ws = aligned_alloc(64, (bytes + 63) / 64 * 64);
    size_t row = Hkv * D;
    float *k = malloc(sizeof(float) * N * row), *v = malloc(sizeof(float) * N * row);
    fill(k, N * row, 1.0f);
    fill(v, N * row, 1.0f);
    float *q = malloc(sizeof(float) * TMAX * Hq * D), *o1 = malloc(sizeof(float) * TMAX * Hq * D),
          *o2 = malloc(sizeof(float) * TMAX * Hq * D);
    fill(q, TMAX * Hq * D, 1.0f);
    int32_t pos[TMAX];
    uint16_t *kb = malloc(sizeof(uint16_t) * N * row), *vb = malloc(sizeof(uint16_t) * N * row);
    okv_convert(kb, OKV_BF16, k, OKV_F32, N * row);
    okv_convert(vb, OKV_BF16, v, OKV_F32, N * row);
    static const int Ts[] = {1, 5, TMAX};
    for (int bf = 0; bf < 2; bf++) /* bf16 pools: the AMX tiles' buffers too */
    for (int ti = 0; ti < n_tables; ti++)
        for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
            int T = Ts[i];
            for (int t = 0; t < T; t++) pos[t] = N - T + t;
            okv_run run = {0, N, 0};
            okv_attn_kv kv = {bf ? (void *)kb : k, bf ? (void *)vb : v, bf ? (void *)kb : k, bf ? (void *)vb : v,
                              bf ? OKV_BF16 : OKV_F32, bf ? OKV_BF16 : OKV_F32, Hkv, D};
            okv_attn_args a = {q, T, Hq, pos, kv, &run, 1, 0, 0.125f, o1, NULL};
            CHECK(okv_attend_scratch_bytes(T, Hq, Hkv, D, 2) <= bytes);
            okv_threadpool_set_workspace(tp, NULL, 0);
            tables[ti]->attend(tp, &a);
            memset(ws, 0xff, bytes); /* NaN garbage: the kernel must not read what it did not write */
            okv_threadpool_set_workspace(tp, ws, bytes);
            CHECK(okv_threadpool_workspace(tp, bytes) == ws && okv_threadpool_workspace(tp, bytes + 1) == NULL);
            a.out = o2;
            tables[ti]->attend(tp, &a);
            CHECKF(max_diff_f(o1, o2, (size_t)T * Hq * D) == 0.0, "%s T=%d: workspace result differs", tables[ti]->name, T);
        }
    okv_threadpool_free(tp);
    free(ws);
    free(k);
    free(v);
    free(kb);
    free(vb);
    free(q);
    free(o1);
    free(o2);
}

/* The decode kernels on their own (attend/decode.c: AMX score tiles +
 * f32 P V where AMX is usable, and vdpbf16ps only, which the AVX-512 BF16
 * table takes on CPUs without AMX): every head_dim they take (32..256,
 * each accumulator tiling), every GQA ratio up to their 15 query vectors
 * (the tiles pad 3, 5..7, 9..15 to 4, 8, 16 columns), T = 1..5, key counts
 * off the 16-key blocks and across the thread splits, windows, ring wraps,
 * a peaky softmax, bf16/f16 pools and (AMX) q8; 1 and 2 threads against the
 * reference; then the AVX-512 BF16 table's attention, which routes decode
 * calls to the vdpbf16ps kernel. */
static void test_decode_kernel(okv_threadpool *tp2) {
    static const okv_kernels dpbf = {.name = "decode-dpbf16", .attend = okv_attend_decode_dpbf16, .attend_bf16 = true};
    static const okv_kernels amx = {.name = "decode-amx", .attend = okv_attend_decode_amx, .attend_bf16 = true};
    static const scenario cases[] = {
        /* what                         Hq Hkv  D   dt        T   p0   base win ring qs */
        {"dec first token",              4, 2, 64, OKV_BF16, 1,  0,    0,  0,  0, 1},
        {"dec head_dim 32",              8, 2, 32, OKV_F16,  1, 33,    0,  0,  0, 1},
        {"dec head_dim 96",              6, 2, 96, OKV_BF16, 1, 300,   0,  0,  0, 1},
        {"dec head_dim 128 T=3",        12, 4, 128, OKV_F16, 3, 517,   0,  0,  0, 1},
        {"dec head_dim 160",             5, 1, 160, OKV_BF16, 1, 1000, 0,  0,  0, 2},
        {"dec head_dim 192",             2, 2, 192, OKV_F16, 2, 95,    0,  0,  0, 1},
        {"dec head_dim 224",             3, 3, 224, OKV_BF16, 1, 270,  0,  0,  0, 1},
        {"dec head_dim 256 gqa 7",      14, 2, 256, OKV_BF16, 2, 2049, 0,  0,  0, 1},
        {"dec 15 vectors",              15, 1, 64, OKV_BF16, 1, 4111,  0,  0,  0, 1},
        {"dec 15 vectors T=5",           3, 1, 64, OKV_F16,  5, 700,   0,  0,  0, 1},
        {"dec gqa 5 splits",            40, 8, 64, OKV_BF16, 1, 5003,  0,  0,  0, 1},
        {"dec gqa 4 T=3",               32, 8, 64, OKV_BF16, 3, 1499,  0,  0,  0, 1},
        {"dec gqa 6",                   12, 2, 64, OKV_BF16, 1, 611,   0,  0,  0, 1},
        {"dec gqa 9 d96",                9, 1, 96, OKV_F16,  1, 130,   0,  0,  0, 1},
        {"dec gqa 11",                  22, 2, 32, OKV_BF16, 1, 259,   0,  0,  0, 1},
        {"dec gqa 13 d256",             13, 1, 256, OKV_BF16, 1, 800,  0,  0,  0, 1},
        {"dec gqa 2 T=7",               16, 8, 64, OKV_BF16, 7, 390,   0,  0,  0, 1},
        {"dec gqa 1 T=8",                8, 8, 128, OKV_BF16, 8, 1200, 0,  0,  0, 1},
        {"dec peaky",                    8, 2, 64, OKV_BF16, 1, 2500,  0,  0,  0, 8},
        {"dec window",                   8, 2, 64, OKV_BF16, 2, 3000,  0, 333, 0, 1},
        {"dec window 1",                 4, 1, 64, OKV_F16,  3, 70,    0,  1,  0, 1},
        {"dec ring wrap",               32, 8, 64, OKV_BF16, 1, 9000, 8001, 1000, 1031, 1},
        {"dec ring wrap T=2 d128",       8, 4, 128, OKV_F16, 2, 777,  700, 77, 93, 1},
        {"dec q8 first token",           4, 2, 64, OKV_Q8,   1,  0,    0,  0,  0, 1},
        {"dec q8 llama",                32, 8, 64, OKV_Q8,   1, 4100,  0,  0,  0, 1},
        {"dec q8 d32 gqa 3",             9, 3, 32, OKV_Q8,   1, 517,   0,  0,  0, 1},
        {"dec q8 d256 gqa 15",          15, 1, 256, OKV_Q8,  1, 333,   0,  0,  0, 1},
        {"dec q8 d96 T=3",               4, 2, 96, OKV_Q8,   3, 1029,  0,  0,  0, 2},
        {"dec q8 window",                8, 2, 64, OKV_Q8,   2, 3000,  0, 333, 0, 1},
        {"dec q8 ring wrap",            32, 8, 64, OKV_Q8,   1, 9000, 8001, 1000, 1031, 1},
        {"dec q8 peaky",                 8, 2, 128, OKV_Q8,  1, 2500,  0,  0,  0, 8},
        {"dec q8 mha (1 column)",        4, 4, 64, OKV_Q8,   1, 1100,  0,  0,  0, 1},
        {"dec q8 gqa 2 T=4 (8 columns)", 8, 4, 64, OKV_Q8,   4, 640,   0,  0,  0, 1},
        {"dec q8 gqa 3 T=5 (16 columns)", 6, 2, 32, OKV_Q8,  5, 400,   0,  0,  0, 1},
    };
    static const okv_kernels avx2 = {.name = "decode-avx2", .attend = okv_attend_decode_avx2};
    bool have_avx2 = okv_attend_decode_avx2_fits(1, 4, 2, 64, OKV_BF16, OKV_BF16);
    if (have_avx2) { /* f32 FMAs: head_dim any multiple of 8, f32 pools too */
        static const scenario avx2_cases[] = {
            /* what                         Hq Hkv  D   dt        T   p0   base win ring qs */
            {"avx2 dec head_dim 40",         8, 2, 40, OKV_BF16, 1, 611,   0,  0,  0, 1},
            {"avx2 dec head_dim 8 f32",      4, 4,  8, OKV_F32,  2, 100,   0,  0,  0, 1},
            {"avx2 dec f32 llama",          32, 8, 64, OKV_F32,  1, 2050,  0,  0,  0, 1},
            {"avx2 dec head_dim 72 ring",    6, 3, 72, OKV_F16,  2, 900,  850, 60, 70, 1},
        };
        for (size_t i = 0; i < sizeof avx2_cases / sizeof *avx2_cases; i++) {
            scenario s = avx2_cases[i];
            const okv_kernels *t[1] = {&avx2};
            CHECKF(okv_attend_decode_avx2_fits(s.T, s.Hq, s.Hkv, s.D, s.dt, s.dt), "%s: AVX2 decode kernel refuses", s.what);
            run_scenario(&s, t, 1, tp2, false);
        }
    } else printf("decode kernel on AVX2: skipped (no AVX2/FMA/F16C)\n");
    bool have_dpbf = okv_attend_decode_dpbf16_fits(1, 4, 2, 64, OKV_BF16, OKV_BF16);
    if (!have_dpbf) printf("decode kernel on vdpbf16ps: skipped (no AVX-512 BF16)\n");
    bool have_amx = okv_attend_decode_amx_fits(1, 4, 2, 64, OKV_BF16, OKV_BF16);
    if (!have_amx) printf("decode kernel on AMX tiles: skipped (AMX not usable)\n");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        scenario s = cases[i];
        const okv_kernels *tables[3];
        int n = 0;
        if (s.dt != OKV_Q8 && have_avx2) {
            CHECKF(okv_attend_decode_avx2_fits(s.T, s.Hq, s.Hkv, s.D, s.dt, s.dt), "%s: AVX2 decode kernel refuses", s.what);
            tables[n++] = &avx2;
        } else if (have_avx2) {
            CHECKF(!okv_attend_decode_avx2_fits(s.T, s.Hq, s.Hkv, s.D, s.dt, s.dt), "%s: AVX2 decode kernel takes q8", s.what);
        }
        if (!have_dpbf) {
            if (n) run_scenario(&s, tables, n, tp2, false);
            continue;
        }
        CHECKF(okv_attend_decode_dpbf16_fits(s.T, s.Hq, s.Hkv, s.D, s.dt, s.dt), "%s: vdpbf16ps kernel refuses", s.what);
        tables[n++] = &dpbf;
        if (have_amx) {
            CHECKF(okv_attend_decode_amx_fits(s.T, s.Hq, s.Hkv, s.D, s.dt, s.dt), "%s: AMX decode kernel refuses", s.what);
            tables[n++] = &amx;
        }
        if (n) run_scenario(&s, tables, n, tp2, false);
    }
    if (have_avx2) /* too many vectors per kv head, head_dim not a multiple of 8 or too large, q8 */
        CHECK(!okv_attend_decode_avx2_fits(1, 16, 1, 64, OKV_BF16, OKV_BF16) && !okv_attend_decode_avx2_fits(1, 4, 2, 84, OKV_F16, OKV_F16) &&
              !okv_attend_decode_avx2_fits(1, 4, 2, 264, OKV_BF16, OKV_BF16) && !okv_attend_decode_avx2_fits(1, 4, 2, 64, OKV_Q8, OKV_Q8));
    if (!have_dpbf) return;
    CHECK(!okv_attend_decode_fits(1, 16, 1, 64, OKV_BF16, OKV_BF16) && !okv_attend_decode_fits(1, 4, 2, 80, OKV_BF16, OKV_BF16) &&
          !okv_attend_decode_fits(1, 4, 2, 288, OKV_F16, OKV_F16) && !okv_attend_decode_fits(1, 4, 2, 64, OKV_F32, OKV_F32) &&
          !okv_attend_decode_fits(4, 16, 4, 64, OKV_Q8, OKV_Q8) && !okv_attend_decode_amx_fits(1, 65, 65, 64, OKV_BF16, OKV_BF16));
    /* the AVX-512 BF16 table (forced: this is the table a CPU with AVX-512
     * BF16 but no AMX gets): decode on the vdpbf16ps kernel (q8 too),
     * prefill chunks on the prefill kernel's vdpbf16ps products (every
     * "amx" scenario above runs through it as well: attention_tables
     * takes this table), f32 pools on the blocked AVX-512 one */
    const okv_kernels *k512 = okv_kernels_select(OKV_ISA_AVX512);
    CHECKF((!strcmp(k512->name, "avx512-bf16") || !strcmp(k512->name, "avx512-vdpbf16")) &&
               k512->attend == okv_attend_avx512_bf16 && k512->attend_bf16,
           "AVX-512 BF16 table: %s", k512->name);
    static const scenario via_table[] = {
        {"avx512-bf16 decode",          32, 8, 64, OKV_BF16, 1, 2100,  0,  0,  0, 1},
        {"avx512-bf16 decode f16 ring",  8, 2, 128, OKV_F16, 2, 900,  850, 60, 70, 1},
        {"avx512-bf16 prefill",          8, 2, 64, OKV_BF16, 40, 300,  0,  0,  0, 1},
        {"avx512-bf16 prefill q8",      16, 4, 64, OKV_Q8,   21, 9000, 0,  0,  0, 1},
        {"avx512-bf16 prefill f32",      8, 2, 64, OKV_F32,  24, 100,  0,  0,  0, 1},
        {"avx512-bf16 q8 decode",        8, 2, 64, OKV_Q8,   1, 700,   0,  0,  0, 1},
    };
    for (size_t i = 0; i < sizeof via_table / sizeof *via_table; i++) run_scenario(&via_table[i], &k512, 1, tp2, false);
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dull;
    test_kv_write();
    test_kv_write_rounding();
    test_attention();
    const okv_kernels *tables[4];
    int n_tables = attention_tables(tables, false);
    okv_threadpool *tp2 = okv_threadpool_create(2);
    test_visibility(tables, n_tables, tp2);
    test_rising_scores(tables, n_tables, tp2);
    test_workspace(tables, n_tables);
    test_decode_kernel(tp2);
    okv_threadpool_free(tp2);
    printf("largest difference of bf16 attention (AMX tiles) from the reference: %.3g\n", g_worst_bf16);
    return okv_test_finish();
}
