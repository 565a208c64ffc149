/* The deterministic table's attention (attend/det.c):
 *   - close to okv_attend_reference (double softmax over an explicit mask)
 *     for f32/f16/bf16/q8 pools, GQA ratios, windows, head_dim tails;
 *   - batch-invariant: a query row's output is bit for bit the same when it
 *     is the only row of its call, one of T rows, computed on 1 or 2
 *     threads, and with its keys stored contiguously or scattered over runs
 *     of random lengths at random slots (the cell cache's layouts);
 *   - with the pool's workspace sized by okv_attend_det_scratch_bytes the
 *     result equals the self-allocated one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_test_util.h"
#include "okv_kernels.h"
#include "okv_kvq8.h"
#include "okv_test.h"

enum { MAX_RUNS = 512 };

typedef struct kv_store {
    void *k, *v;
    okv_run runs[MAX_RUNS];
    int n_runs;
    okv_attn_kv kv;
} kv_store;

/* N positions of k/v [N][Hkv][D] f32 into a pool in dt: contiguous from
 * slot 0, or scattered (runs of 1..40 positions at shuffled places in a
 * pool of 2N + 64 slots). */
static void store_kv(kv_store *s, const float *k, const float *v, int N, int Hkv, int D, okv_dtype dt, bool scatter) {
    int lens[MAX_RUNS], order[MAX_RUNS], n = 0;
    if (!scatter) lens[n++] = N;
    for (int p = 0; scatter && p < N && n < MAX_RUNS - 1;) {
        int len = 1 + (int)((frand() + 1.0f) * 19.5f); /* 1..40 */
        if (len > N - p) len = N - p;
        lens[n++] = len;
        p += len;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; scatter && i > 0; i--) { /* runs at shuffled 41-slot places */
        int j = (int)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    size_t slots = scatter ? (size_t)41 * n : (size_t)N, row = okv_kv_row_bytes(dt, (size_t)Hkv * D);
    s->k = calloc(slots, row);
    s->v = calloc(slots, row);
    s->kv = (okv_attn_kv){s->k, s->v, s->k, s->v, dt, dt, Hkv, D};
    s->n_runs = n;
    for (int i = 0, p = 0; i < n; p += lens[i], i++) s->runs[i] = (okv_run){order[i] * 41 + (scatter ? i % 2 : 0), lens[i], p};
    okv_attend_write(&s->kv, s->runs, s->n_runs, k, v);
}

static void free_kv(kv_store *s) {
    free(s->k);
    free(s->v);
}

static double max_rel(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= w)) w = d;
    }
    return w;
}

typedef struct shape {
    int Hq, Hkv, D;
    okv_dtype dt;
    int N, T, window;
} shape;

static void check_shape(const okv_kernels *det, const shape *sh, okv_threadpool *tp1, okv_threadpool *tp2) {
    const int Hq = sh->Hq, Hkv = sh->Hkv, D = sh->D, N = sh->N, T = sh->T;
    size_t row = (size_t)Hkv * D, qrow = (size_t)Hq * D;
    float *k = malloc(sizeof(float) * N * row), *v = malloc(sizeof(float) * N * row);
    float *q = malloc(sizeof(float) * T * qrow);
    fill(k, (size_t)N * row, 1.0f);
    fill(v, (size_t)N * row, 1.0f);
    fill(q, (size_t)T * qrow, 2.0f);
    int32_t pos[64];
    for (int t = 0; t < T; t++) pos[t] = N - T + t;
    kv_store flat, scat;
    store_kv(&flat, k, v, N, Hkv, D, sh->dt, false);
    store_kv(&scat, k, v, N, Hkv, D, sh->dt, true);
    float *ref = malloc(sizeof(float) * T * qrow), *all = malloc(sizeof(float) * T * qrow),
          *one = malloc(sizeof(float) * qrow), *other = malloc(sizeof(float) * T * qrow);
    float scale = 1.0f / sqrtf((float)D);
    okv_attn_args a = {q, T, Hq, pos, flat.kv, flat.runs, flat.n_runs, sh->window, scale, ref, NULL};
    okv_attend_reference(&a);
    a.out = all;
    det->attend(tp2, &a);
    double tol = sh->dt == OKV_F32 ? 2e-5 : 1e-4; /* the pools hold the same rounded values for both */
    double d = max_rel(all, ref, (size_t)T * qrow);
    CHECKF(d <= tol, "%s Hq %d Hkv %d D %d dt %d N %d T %d window %d: %.3g from the reference", det->name, Hq, Hkv, D,
           (int)sh->dt, N, T, sh->window, d);
    int bad = 0;
    for (int t = 0; t < T; t++) { /* each row alone, 1 thread, scattered keys */
        okv_attn_args b = {q + t * qrow, 1, Hq, pos + t, scat.kv, scat.runs, scat.n_runs, sh->window, scale, one, NULL};
        det->attend(tp1, &b);
        bad += memcmp(one, all + t * qrow, sizeof(float) * qrow) != 0;
    }
    CHECKF(bad == 0, "%s Hq %d Hkv %d D %d dt %d N %d T %d: %d rows alone on scattered keys differ from the T-row call",
           det->name, Hq, Hkv, D, (int)sh->dt, N, T, bad);
    if (T > 3) { /* the last T - 3 rows as one call, scattered keys, 2 threads */
        okv_attn_args b = {q + 3 * qrow, T - 3, Hq, pos + 3, scat.kv, scat.runs, scat.n_runs, sh->window, scale, other, NULL};
        det->attend(tp2, &b);
        CHECKF(!memcmp(other, all + 3 * qrow, sizeof(float) * (T - 3) * qrow),
               "%s Hq %d D %d dt %d: rows 3.. of a T=%d call differ from the same rows in a call of %d", det->name, Hq, D,
               (int)sh->dt, T, T - 3);
    }
    free_kv(&flat);
    free_kv(&scat);
    free(k);
    free(v);
    free(q);
    free(ref);
    free(all);
    free(one);
    free(other);
}

/* With the pool's workspace sized for the largest T, smaller calls use it
 * and give the self-allocated bits. */
static void check_workspace(const okv_kernels *det, okv_threadpool *tp2) {
    enum { Hq = 8, Hkv = 2, D = 64, N = 300, TMAX = 40 };
    size_t bytes = okv_attend_det_scratch_bytes(TMAX, Hq, Hkv, D, 2), row = (size_t)Hkv * D, qrow = (size_t)Hq * D;
    CHECK(bytes > 0);
    char *ws = aligned_alloc(64, (bytes + 63) / 64 * 64);
    float *k = malloc(sizeof(float) * N * row), *v = malloc(sizeof(float) * N * row), *q = malloc(sizeof(float) * TMAX * qrow);
    float *o1 = malloc(sizeof(float) * TMAX * qrow), *o2 = malloc(sizeof(float) * TMAX * qrow);
    fill(k, (size_t)N * row, 1.0f);
    fill(v, (size_t)N * row, 1.0f);
    fill(q, (size_t)TMAX * qrow, 1.0f);
    kv_store s;
    store_kv(&s, k, v, N, Hkv, D, OKV_BF16, true);
    static const int Ts[] = {1, 5, 17, TMAX};
    for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
        int T = Ts[i];
        int32_t pos[TMAX];
        for (int t = 0; t < T; t++) pos[t] = N - T + t;
        CHECK(okv_attend_det_scratch_bytes(T, Hq, Hkv, D, 2) <= bytes);
        okv_attn_args a = {q, T, Hq, pos, s.kv, s.runs, s.n_runs, 0, 0.125f, o1, NULL};
        okv_threadpool_set_workspace(tp2, NULL, 0);
        det->attend(tp2, &a);
        memset(ws, 0xff, bytes); /* NaN garbage: the kernel must not read what it did not write */
        okv_threadpool_set_workspace(tp2, ws, bytes);
        a.out = o2;
        det->attend(tp2, &a);
        CHECKF(!memcmp(o1, o2, sizeof(float) * T * qrow), "%s T=%d: workspace result differs", det->name, T);
    }
    okv_threadpool_set_workspace(tp2, NULL, 0);
    free_kv(&s);
    free(ws);
    free(k);
    free(v);
    free(q);
    free(o1);
    free(o2);
}

int main(void) {
    rng_state = 0x9e3779b97f4a7c15ull;
    okv_threadpool *tp1 = okv_threadpool_create(1), *tp2 = okv_threadpool_create(2);
    const okv_kernels *tables[3];
    int n_tables = 0;
    static const okv_isa isas[] = {OKV_ISA_AUTO, OKV_ISA_AVX2, OKV_ISA_PLAIN};
    for (int i = 0; i < 3; i++) {
        const okv_kernels *k = okv_kernels_select_deterministic(isas[i]);
        bool seen = false;
        for (int j = 0; j < n_tables; j++) seen |= tables[j] == k;
        if (!seen) tables[n_tables++] = k;
    }
    static const shape shapes[] = {
        /* Hq Hkv  D   dt        N    T  window */
        {4, 2, 16, OKV_F32, 45, 7, 0},
        {8, 2, 64, OKV_F32, 130, 20, 0},
        {8, 2, 64, OKV_BF16, 200, 33, 0},
        {8, 4, 64, OKV_F16, 97, 9, 0},
        {8, 2, 64, OKV_Q8, 160, 12, 0},
        {32, 8, 64, OKV_BF16, 300, 4, 0},  /* Llama-3.2-1B heads */
        {4, 1, 20, OKV_F32, 70, 6, 0},     /* head_dim tail */
        {6, 3, 32, OKV_BF16, 150, 40, 50}, /* window crossing key blocks */
        {8, 2, 64, OKV_Q8, 140, 16, 20},
        {4, 4, 32, OKV_F32, 75, 64, 8},    /* T > one row block */
        {16, 1, 128, OKV_F16, 90, 3, 0},   /* MQA */
    };
    for (int i = 0; i < n_tables; i++) {
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) check_shape(tables[i], &shapes[s], tp1, tp2);
        check_workspace(tables[i], tp2);
    }
    okv_threadpool_free(tp1);
    okv_threadpool_free(tp2);
    return okv_test_finish();
}
