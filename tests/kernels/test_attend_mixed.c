/* Tests K and V pools stored in different dtypes (okv_attn_kv.k_dtype /
 * v_dtype: --kv-k-dtype / --kv-v-dtype): okv_attend_write puts each side in
 * its own dtype (K bytes exactly the K conversion, V bytes exactly the V
 * one, rows of different sizes); the reference attention over mixed pools
 * matches a float64 attention over what each pool holds (1e-5); every
 * table's attention (plain, AVX2, AVX-512, the best one, and the
 * deterministic tables), on 1 and 2 threads, matches the reference over the
 * same pools (1e-5; 2e-2 for tables whose kernels round q and k to bf16:
 * the AMX tiles) for decode and prefill shapes, GQA, flat and ring; and the
 * decode kernels' fits say which mixes each kernel takes. */
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels.h"
#include "okv_kernels_internal.h"
#include "okv_kvq8.h"
#include "okv_test.h"
#include "kernel_test_util.h"
#include "attend_test_util.h"

typedef struct mix {
    okv_dtype k, v;
} mix;

static const mix MIXES[] = {
    {OKV_BF16, OKV_Q8}, {OKV_Q8, OKV_BF16}, {OKV_F16, OKV_Q8}, {OKV_Q8, OKV_F16}, {OKV_F32, OKV_Q8},
    {OKV_Q8, OKV_F32},  {OKV_BF16, OKV_F16}, {OKV_F16, OKV_BF16}, {OKV_F32, OKV_BF16}, {OKV_BF16, OKV_F32},
};
enum { N_MIXES = sizeof MIXES / sizeof MIXES[0] };

typedef struct scenario {
    const char *what;
    int Hq, Hkv, D, T;
    int32_t p0, base, window, ring; /* keys [base, p0 + T); ring = slots (0 = flat) */
} scenario;

/* Element e of key/value row `slot` of a pool in dt, as double. */
static double held(const void *pool, okv_dtype dt, size_t row, size_t slot, size_t e) {
    return okv_k_load((const char *)pool + okv_kv_row_bytes(dt, slot * row), dt, e);
}

/* float64 attention over what the pools hold (causal, window). */
static void attend_f64(const scenario *s, const okv_attn_kv *kv, const float *q, float scale, float *out) {
    size_t row = (size_t)s->Hkv * s->D;
    int32_t end = s->p0 + s->T, G = s->Hq / s->Hkv;
    double *w = malloc(sizeof(double) * (size_t)(end - s->base));
    for (int t = 0; t < s->T; t++)
        for (int h = 0; h < s->Hq; h++) {
            const float *qh = q + ((size_t)t * s->Hq + h) * s->D;
            int32_t p = s->p0 + t;
            double mx = -INFINITY, sum = 0;
            for (int32_t j = s->base; j < end; j++) {
                bool vis = j <= p && (s->window == 0 || p - j < s->window);
                size_t slot = (size_t)(s->ring ? j % s->ring : j);
                double d = 0;
                for (int e = 0; e < s->D && vis; e++)
                    d += (double)qh[e] * held(kv->k, kv->k_dtype, row, slot, (size_t)(h / G) * s->D + e);
                w[j - s->base] = vis ? d * scale : -INFINITY;
                if (w[j - s->base] > mx) mx = w[j - s->base];
            }
            for (int32_t j = s->base; j < end; j++) sum += w[j - s->base] = exp(w[j - s->base] - mx);
            for (int e = 0; e < s->D; e++) {
                double acc = 0;
                for (int32_t j = s->base; j < end; j++) {
                    size_t slot = (size_t)(s->ring ? j % s->ring : j);
                    acc += w[j - s->base] * held(kv->v, kv->v_dtype, row, slot, (size_t)(h / G) * s->D + e);
                }
                out[((size_t)t * s->Hq + h) * s->D + e] = (float)(acc / sum);
            }
        }
    free(w);
}

/* okv_attend_write of a mixed pair: each pool's bytes are exactly its own
 * conversion of the rows, at its own row size. */
static void test_write(void) {
    enum { S = 6, Hkv = 2, D = 64 };
    size_t row = Hkv * D;
    float k[S * Hkv * D], v[S * Hkv * D];
    fill(k, S * row, 1.0f);
    fill(v, S * row, 1.0f);
    for (int m = 0; m < N_MIXES; m++) {
        size_t kb = okv_kv_row_bytes(MIXES[m].k, row), vb = okv_kv_row_bytes(MIXES[m].v, row);
        unsigned char *kp = malloc(S * kb), *vp = malloc(S * vb), *want = malloc(S * (kb > vb ? kb : vb));
        okv_attn_kv kv = {kp, vp, kp, vp, MIXES[m].k, MIXES[m].v, Hkv, D};
        okv_run run = {0, S, 0};
        okv_attend_write(&kv, &run, 1, k, v);
        if (MIXES[m].k == OKV_Q8) okv_q8_quantize(want, k, S * row);
        else okv_convert(want, MIXES[m].k, k, OKV_F32, S * row);
        CHECKF(memcmp(want, kp, S * kb) == 0, "write K %s / V %s: K bytes differ", okv_dtype_name(MIXES[m].k),
               okv_dtype_name(MIXES[m].v));
        if (MIXES[m].v == OKV_Q8) okv_q8_quantize(want, v, S * row);
        else okv_convert(want, MIXES[m].v, v, OKV_F32, S * row);
        CHECKF(memcmp(want, vp, S * vb) == 0, "write K %s / V %s: V bytes differ", okv_dtype_name(MIXES[m].k),
               okv_dtype_name(MIXES[m].v));
        free(kp);
        free(vp);
        free(want);
    }
}

static void run_scenario(const scenario *s, const mix *mx, const okv_kernels **tables, int n_tables,
                         okv_threadpool *tp2) {
    int32_t end = s->p0 + s->T, n_keys = end - s->base, slots = s->ring ? s->ring : end;
    size_t row = (size_t)s->Hkv * s->D;
    void *kp = calloc((size_t)slots, okv_kv_row_bytes(mx->k, row));
    void *vp = calloc((size_t)slots, okv_kv_row_bytes(mx->v, row));
    okv_attn_kv kv = {kp, vp, kp, vp, mx->k, mx->v, s->Hkv, s->D};
    float *kin = malloc(sizeof(float) * n_keys * row), *vin = malloc(sizeof(float) * n_keys * row);
    fill(kin, (size_t)n_keys * row, 1.0f);
    fill(vin, (size_t)n_keys * row, 1.0f);
    okv_run runs[2];
    int n_runs = make_runs(s->base, end, s->ring, runs);
    okv_attend_write(&kv, runs, n_runs, kin, vin);
    size_t nq = (size_t)s->T * s->Hq * s->D;
    float *q = malloc(sizeof(float) * nq), *ref = malloc(sizeof(float) * nq), *fast = malloc(sizeof(float) * nq);
    float *f64 = malloc(sizeof(float) * nq);
    int32_t *pos = malloc(sizeof(int32_t) * s->T);
    fill(q, nq, 1.0f);
    for (int t = 0; t < s->T; t++) pos[t] = s->p0 + t;
    okv_attn_args a = {q, s->T, s->Hq, pos, kv, runs, n_runs, s->window, 1.0f / sqrtf((float)s->D), ref, NULL};
    okv_attend_reference(&a);
    attend_f64(s, &kv, q, a.scale, f64);
    char what[160];
    snprintf(what, sizeof what, "%s, K %s / V %s", s->what, okv_dtype_name(mx->k), okv_dtype_name(mx->v));
    CHECKF(max_diff_f(ref, f64, nq) <= 1e-5, "%s: reference vs float64 %g", what, max_diff_f(ref, f64, nq));
    for (int ti = 0; ti < n_tables; ti++)
        for (int th = 0; th < 2; th++) {
            a.out = fast;
            memset(fast, 0xff, sizeof(float) * nq);
            tables[ti]->attend(th ? tp2 : NULL, &a);
            double m = max_diff_f(fast, ref, nq), tol = tables[ti]->attend_bf16 ? 2e-2 : 1e-5;
            CHECKF(m <= tol, "%s: %s attend (%d threads) vs reference %g", what, tables[ti]->name, th + 1, m);
        }
    free(kp); free(vp); free(kin); free(vin); free(q); free(ref); free(fast); free(f64); free(pos);
}

static void test_attention(void) {
    const okv_kernels *tables[8];
    int n_tables = attention_tables(tables, true);
    okv_threadpool *tp2 = okv_threadpool_create(2);
    static const scenario cases[] = {
        /* what                  Hq Hkv  D    T   p0   base win ring */
        {"decode",                8, 2,  64,  1,  90,   0,   0,  0},
        {"decode gqa 3",          9, 3,  64,  1, 300,   0,   0,  0},
        {"decode 128 ring wrap",  8, 4, 128,  1, 100,  85,  16, 23},
        {"two rows",              8, 2,  64,  2,  40,   0,   0,  0},
        {"prefill",               8, 4,  32, 17,   0,   0,   0,  0},
        {"prefill gqa 4 at 600", 16, 4,  64, 40, 600,   0,   0,  0},
        {"prefill window",        6, 3,  32, 11,  30,   0,   5,  0},
        {"prefill ring wrap",     8, 4,  64,  8, 100,  85,  16, 23},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int m = 0; m < N_MIXES; m++) run_scenario(&cases[i], &MIXES[m], tables, n_tables, tp2);
    okv_threadpool_free(tp2);
}

/* Which decode kernel takes which mix: the vdpbf16ps kernel 16-bit and q8
 * pools (no f32), the AVX2 one no q8, the AMX one q8 on either side (K on int8
 * tiles needs AMX-INT8). */
static void test_fits(void) {
    bool amx = okv_attend_decode_amx_fits(1, 8, 2, 64, OKV_BF16, OKV_BF16);
    bool dpbf = okv_attend_decode_dpbf16_fits(1, 8, 2, 64, OKV_BF16, OKV_BF16);
    bool avx2 = okv_attend_decode_avx2_fits(1, 8, 2, 64, OKV_BF16, OKV_BF16);
    CHECK(dpbf == okv_attend_decode_dpbf16_fits(1, 8, 2, 64, OKV_BF16, OKV_Q8));
    CHECK(dpbf == okv_attend_decode_dpbf16_fits(1, 8, 2, 64, OKV_Q8, OKV_F16));
    CHECK(!okv_attend_decode_dpbf16_fits(1, 8, 2, 64, OKV_F32, OKV_BF16));
    CHECK(!okv_attend_decode_dpbf16_fits(1, 8, 2, 64, OKV_Q8, OKV_F32));
    CHECK(dpbf == okv_attend_decode_dpbf16_fits(1, 8, 2, 64, OKV_F16, OKV_BF16));
    CHECK(!okv_attend_decode_avx2_fits(1, 8, 2, 64, OKV_BF16, OKV_Q8));
    CHECK(!okv_attend_decode_avx2_fits(1, 8, 2, 64, OKV_Q8, OKV_F32));
    CHECK(avx2 == okv_attend_decode_avx2_fits(1, 8, 2, 64, OKV_F32, OKV_BF16));
    CHECK(amx == okv_attend_decode_amx_fits(1, 8, 2, 64, OKV_BF16, OKV_Q8));
    CHECK(!okv_attend_decode_amx_fits(1, 8, 2, 64, OKV_F32, OKV_Q8));
    CHECK(!okv_attend_decode_amx_fits(1, 8, 2, 64, OKV_BF16, OKV_F32));
    printf("decode kernels here: amx %d (K q8 on int8 tiles %d), vdpbf16ps %d, avx2 %d\n", amx,
           okv_attend_decode_amx_fits(1, 8, 2, 64, OKV_Q8, OKV_BF16), dpbf, avx2);
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dull;
    test_write();
    test_fits();
    test_attention();
    return okv_test_finish();
}
