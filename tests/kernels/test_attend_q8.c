/* Tests q8 KV storage in the kernels: the block format's round trip (every
 * element within half a step of what was written, zero / tiny / huge /
 * non-finite blocks), okv_attend_write into q8 pools along ring runs
 * (nothing outside the runs touched), every table's fast attention over q8
 * pools against the reference over the same pools (1e-5 absolute, 1 and 2
 * threads; flat, ring wrap, windows, GQA/MQA, head_dim 32..256, decode and
 * prefill, thousands of keys, many sequences via okv_attn_vis; 2e-2 for
 * tables whose kernels round q and k to bf16: the AMX decode and prefill
 * tiles), and q8 attention against f32 attention of the same data within a
 * bound computed from the actual quantization errors. */
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels.h"
#include "okv_kvq8.h"
#include "okv_test.h"
#include "kernel_test_util.h"
#include "attend_test_util.h"

/* ---- format --------------------------------------------------------------------- */

static void check_block_round_trip(const float *x, const char *what) {
    unsigned char blk[OKV_Q8_BLOCK_BYTES];
    okv_q8_quantize(blk, x, OKV_Q8_BLOCK);
    float amax = 0.0f;
    for (int i = 0; i < OKV_Q8_BLOCK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float step = amax / 127.0f;
    CHECKF(okv_q8_scale(blk) == step, "%s: scale %g, want max|x|/127 = %g", what, okv_q8_scale(blk), step);
    int bad = 0;
    for (int i = 0; i < OKV_Q8_BLOCK; i++) {
        float got = okv_q8_load(blk, (size_t)i);
        bad += !(fabsf(got - x[i]) <= 0.5f * step * (1.0f + 1e-5f) + 1e-30f);
        bad += ((const int8_t *)blk)[i] < -127;
    }
    CHECKF(bad == 0, "%s: %d elements off by more than half a step (%g)", what, bad, step);
}

static void test_format(void) {
    float x[OKV_Q8_BLOCK];
    static const float mags[] = {1.0f, 1e-3f, 1e-20f, 3e4f, 1e30f};
    for (size_t m = 0; m < sizeof mags / sizeof *mags; m++)
        for (int rep = 0; rep < 50; rep++) {
            fill(x, OKV_Q8_BLOCK, mags[m]);
            if (rep == 1) x[7] = mags[m];   /* the max exactly at +amax */
            if (rep == 2) x[3] = -mags[m];  /* ... and at -amax */
            char what[64];
            snprintf(what, sizeof what, "block of magnitude %g rep %d", mags[m], rep);
            check_block_round_trip(x, what);
        }
    /* all zeros: scale 0, codes 0, reads 0 */
    memset(x, 0, sizeof x);
    unsigned char blk[OKV_Q8_BLOCK_BYTES];
    okv_q8_quantize(blk, x, OKV_Q8_BLOCK);
    CHECK(okv_q8_scale(blk) == 0.0f && okv_q8_load(blk, 5) == 0.0f);
    /* a non-finite element poisons its block only (as f32 storage would
     * propagate it), never the next block */
    float two[2 * OKV_Q8_BLOCK];
    fill(two, 2 * OKV_Q8_BLOCK, 1.0f);
    two[4] = INFINITY;
    unsigned char b2[2 * OKV_Q8_BLOCK_BYTES];
    okv_q8_quantize(b2, two, 2 * OKV_Q8_BLOCK);
    CHECK(isnan(okv_q8_load(b2, 0)) && isnan(okv_q8_load(b2, 31)));
    CHECK(isfinite(okv_q8_load(b2, 32)) && fabsf(okv_q8_load(b2, 40) - two[40]) <= 1.0f / 254 + 1e-6f);
    /* sizes: 36 bytes per 32 elements, overflow detected */
    size_t n;
    CHECK(okv_kv_bytes_checked(OKV_Q8, 64, &n) && n == 72);
    CHECK(okv_kv_bytes_checked(OKV_BF16, 64, &n) && n == 128);
    CHECK(!okv_kv_bytes_checked(OKV_Q8, SIZE_MAX, &n));
    CHECK(!okv_kv_bytes_checked(OKV_F32, SIZE_MAX / 2, &n));
    CHECK(okv_kv_row_bytes(OKV_Q8, 3 * 256) == 3 * 288);
}

/* kv_write into a q8 ring: positions 8..14 of an 11-slot ring go to slots
 * 8, 9, 10, 0..3; each slot's bytes are exactly its row quantized, and
 * slots 4..7 keep their old bytes. */
static void test_write(void) {
    enum { S = 11, Hkv = 2, D = 64, T = 7 };
    size_t row = Hkv * D, rb = okv_kv_row_bytes(OKV_Q8, row);
    unsigned char *k = malloc(S * rb), *v = malloc(S * rb);
    memset(k, 0xA5, S * rb);
    memset(v, 0x5A, S * rb);
    okv_attn_kv kv = {k, v, k, v, OKV_Q8, OKV_Q8, Hkv, D};
    float kin[T * Hkv * D], vin[T * Hkv * D];
    fill(kin, T * row, 3.0f);
    fill(vin, T * row, 0.01f);
    okv_run runs[2] = {{8, 3, 8}, {0, 4, 11}};
    okv_attend_write(&kv, runs, 2, kin, vin);
    int bad = 0, touched = 0;
    unsigned char want[Hkv * D * 2];
    for (int t = 0; t < T; t++) {
        size_t slot = (size_t)(8 + t) % S;
        okv_q8_quantize(want, kin + t * row, row);
        bad += memcmp(k + slot * rb, want, rb) != 0;
        okv_q8_quantize(want, vin + t * row, row);
        bad += memcmp(v + slot * rb, want, rb) != 0;
    }
    for (size_t b = 4 * rb; b < 8 * rb; b++) touched += k[b] != 0xA5 || v[b] != 0x5A;
    CHECKF(bad == 0, "kv_write q8: %d rows differ from their quantized rows", bad);
    CHECKF(touched == 0, "kv_write q8 wrote %d bytes outside its runs", touched);
    free(k);
    free(v);
}

/* ---- attention ------------------------------------------------------------------ */

typedef struct scenario {
    const char *what;
    int Hq, Hkv, D, T;
    int32_t p0, base, window, ring;
    float q_scale, kv_scale;
} scenario;

/* Bound on |attn over q8 - attn over f32| for one query row x head: scores
 * move by at most delta = scale * max_j sum_d |q_d| |dk_jd|, so each
 * softmax weight by a factor within exp(+-2 delta), and the output by at
 * most (exp(2 delta) - 1) * max|v| + max|dv| (a convex combination of
 * values each within max|dv| of the f32 ones). */
static double error_bound(const scenario *s, const float *q, const float *kin, const float *vin, const float *kq,
                          const float *vq, int32_t n_keys, float scale) {
    size_t row = (size_t)s->Hkv * s->D;
    double delta = 0, vmax = 0, dv = 0;
    for (int t = 0; t < s->T; t++)
        for (int h = 0; h < s->Hq; h++) {
            const float *qh = q + ((size_t)t * s->Hq + h) * s->D;
            int kvh = h / (s->Hq / s->Hkv);
            for (int32_t j = 0; j < n_keys; j++) {
                double d = 0;
                for (int e = 0; e < s->D; e++) {
                    size_t at = (size_t)j * row + (size_t)kvh * s->D + e;
                    d += fabs(qh[e]) * fabs((double)kin[at] - kq[at]);
                }
                if (d * scale > delta) delta = d * scale;
            }
        }
    for (size_t i = 0; i < (size_t)n_keys * row; i++) {
        if (fabs(vin[i]) > vmax) vmax = fabs(vin[i]);
        if (fabs((double)vin[i] - vq[i]) > dv) dv = fabs((double)vin[i] - vq[i]);
    }
    return (exp(2 * delta) - 1) * vmax + dv + 1e-5;
}

static void run_scenario(const scenario *s, const okv_kernels **tables, int n_tables, okv_threadpool *tp2) {
    int32_t end = s->p0 + s->T, n_keys = end - s->base, slots = s->ring ? s->ring : end;
    size_t row = (size_t)s->Hkv * s->D, rb = okv_kv_row_bytes(OKV_Q8, row);
    void *kp = calloc((size_t)slots, rb), *vp = calloc((size_t)slots, rb);
    float *kf = calloc((size_t)slots * row, sizeof(float)), *vf = calloc((size_t)slots * row, sizeof(float));
    okv_attn_kv kv = {kp, vp, kp, vp, OKV_Q8, OKV_Q8, s->Hkv, s->D};
    okv_attn_kv kv32 = {kf, vf, kf, vf, OKV_F32, OKV_F32, s->Hkv, s->D};
    float *kin = malloc(sizeof(float) * n_keys * row), *vin = malloc(sizeof(float) * n_keys * row);
    float *kq = malloc(sizeof(float) * n_keys * row), *vq = malloc(sizeof(float) * n_keys * row);
    fill(kin, (size_t)n_keys * row, s->kv_scale);
    fill(vin, (size_t)n_keys * row, s->kv_scale);
    okv_run runs[2];
    int n_runs = make_runs(s->base, end, s->ring, runs);
    okv_attend_write(&kv, runs, n_runs, kin, vin);
    okv_attend_write(&kv32, runs, n_runs, kin, vin);
    for (int32_t j = 0; j < n_keys; j++) { /* what q8 holds for key j, as floats */
        size_t slot = (size_t)(s->ring ? (s->base + j) % s->ring : s->base + j);
        okv_q8_dequantize(kq + j * row, (const char *)kp + slot * rb, row);
        okv_q8_dequantize(vq + j * row, (const char *)vp + slot * rb, row);
    }
    size_t nq = (size_t)s->T * s->Hq * s->D;
    float *q = malloc(sizeof(float) * nq), *ref = malloc(sizeof(float) * nq), *fast = malloc(sizeof(float) * nq);
    float *ref32 = malloc(sizeof(float) * nq);
    int32_t *pos = malloc(sizeof(int32_t) * s->T);
    fill(q, nq, s->q_scale);
    for (int t = 0; t < s->T; t++) pos[t] = s->p0 + t;
    okv_attn_args a = {q, s->T, s->Hq, pos, kv, runs, n_runs, s->window, 1.0f / sqrtf((float)s->D), ref, NULL};
    okv_attend_reference(&a);
    okv_attn_args a32 = a;
    a32.kv = kv32;
    a32.out = ref32;
    okv_attend_reference(&a32);
    double bound = error_bound(s, q, kin, vin, kq, vq, n_keys, a.scale), d32 = max_diff_f(ref, ref32, nq);
    CHECKF(d32 <= bound, "%s: q8 vs f32 attention %g > bound %g", s->what, d32, bound);
    CHECKF(bound < 0.2 * s->kv_scale, "%s: bound %g is no bound", s->what, bound);
    for (int ti = 0; ti < n_tables; ti++)
        for (int th = 0; th < 2; th++) {
            a.out = fast;
            memset(fast, 0xff, sizeof(float) * nq);
            tables[ti]->attend(th ? tp2 : NULL, &a);
            /* tables whose kernels round q and k to bf16 (AMX decode and prefill tiles) */
            double m = max_diff_f(fast, ref, nq), tol = tables[ti]->attend_bf16 ? 2e-2 : 1e-5;
            CHECKF(m <= tol * s->kv_scale, "%s: %s q8 attend (%d threads) vs reference %g", s->what,
                   tables[ti]->name, th + 1, m);
        }
    free(kp); free(vp); free(kf); free(vf); free(kin); free(vin); free(kq); free(vq);
    free(q); free(ref); free(ref32); free(fast); free(pos);
}

static void test_attention(void) {
    const okv_kernels *tables[4];
    int n_tables = attention_tables(tables, false);
    okv_threadpool *tp2 = okv_threadpool_create(2);
    static const scenario cases[] = {
        /* what                    Hq Hkv  D    T   p0    base  win ring  qs  kvs */
        {"flat decode first",       4, 4,  64,  1,  0,    0,    0,  0,   1, 1},
        {"flat decode",             9, 3,  64,  1, 57,    0,    0,  0,   1, 1},
        {"flat prefill",            8, 4,  32, 17,  0,    0,    0,  0,   2, 1},
        {"flat chunk at 37",        8, 2,  64,  5, 37,    0,    0,  0,   1, 1},
        {"peaky mqa 256",           4, 1, 256,  9, 20,    0,    0,  0,   3, 1},
        {"window < span",           6, 3,  32, 11, 30,    0,    5,  0,   1, 1},
        {"ring wrap decode",        8, 4,  64,  1, 100,  85,   16, 23,   1, 1},
        {"ring wrap prefill",       8, 4,  64,  8, 100,  85,   16, 23,   1, 1},
        {"ring wrap 128",           8, 1, 128,  8, 300, 285,   16, 23,   1, 1},
        {"gqa 8",                  16, 2,  96,  3, 40,    0,    0,  0,   1, 1},
        {"small values",            4, 2,  64,  4, 50,    0,    0,  0,   1, 1e-3f},
        {"large values",            4, 2,  64,  4, 50,    0,    0,  0, 0.05f, 40},
        {"long decode",             9, 3,  64,  1, 3000,  0,    0,  0,   1, 1},
        {"long prefill",            8, 2,  64, 70, 2000,  0,    0,  0,   1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_scenario(&cases[i], tables, n_tables, tp2);
    okv_threadpool_free(tp2);
}

/* Many sequences in one q8 pool: two sequences' cells interleaved, a
 * shared (forked) prefix owned by both, free cells seen by nobody. */
static void test_vis(void) {
    const okv_kernels *tables[4];
    int n_tables = attention_tables(tables, false);
    enum { Hq = 6, Hkv = 2, D = 64, N = 300, T = 4 };
    size_t row = Hkv * D, rb = okv_kv_row_bytes(OKV_Q8, row);
    void *kp = malloc(N * rb), *vp = malloc(N * rb);
    float *kin = malloc(sizeof(float) * N * row), *vin = malloc(sizeof(float) * N * row);
    fill(kin, N * row, 1.0f);
    fill(vin, N * row, 1.0f);
    okv_attn_kv kv = {kp, vp, kp, vp, OKV_Q8, OKV_Q8, Hkv, D};
    okv_run all = {0, N, 0};
    okv_attend_write(&kv, &all, 1, kin, vin);
    int32_t kpos[N];
    uint64_t owner[N];
    int32_t np[2] = {0, 0};
    for (int s = 0; s < N; s++) {
        if (s < 40) { owner[s] = 3; kpos[s] = np[0]++; np[1]++; continue; } /* shared prefix */
        int who = (s * 7) % 3; /* 0, 1 or free */
        owner[s] = who == 2 ? 0 : 1u << who;
        kpos[s] = who == 2 ? 0 : np[who]++;
    }
    int32_t q_seq[T] = {0, 1, 0, 1}, pos[T] = {np[0] - 2, np[1] - 1, np[0] - 1, np[1] - 5};
    float q[T * Hq * D], ref[T * Hq * D], fast[T * Hq * D];
    fill(q, T * Hq * D, 1.0f);
    okv_attn_vis vis = {q_seq, kpos, owner};
    okv_attn_args a = {q, T, Hq, pos, kv, &all, 1, 0, 0.125f, ref, &vis};
    okv_attend_reference(&a);
    okv_threadpool *tp2 = okv_threadpool_create(2);
    for (int ti = 0; ti < n_tables; ti++)
        for (int th = 0; th < 2; th++) {
            a.out = fast;
            tables[ti]->attend(th ? tp2 : NULL, &a);
            CHECKF(max_diff_f(fast, ref, T * Hq * D) <= (tables[ti]->attend_bf16 ? 2e-2 : 1e-5),
                   "%s q8 attend with vis (%d threads): %g",
                   tables[ti]->name, th + 1, max_diff_f(fast, ref, T * Hq * D));
        }
    okv_threadpool_free(tp2);
    free(kp); free(vp); free(kin); free(vin);
}

int main(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    test_format();
    test_write();
    test_attention();
    test_vis();
    return okv_test_finish();
}
