/* okv_kernels_plain.c — the portable C versions of the table kernels
 * (matmul, rmsnorm, glu, the fast attention's inner loops).
 *
 * These are the definition of what the SIMD versions must compute, and the
 * path every CPU can run. They are written for clarity first, with only the
 * structure that matters on any machine: matmul is parallel over output
 * features, converts each f16/bf16 weight row once for all rows of x, and
 * sums with 8 partial sums (short dependency chains, vectorisable). */
#include <math.h>
#include <stdlib.h>

#include "okv_kernels_internal.h"

/* ---- matmul ------------------------------------------------------------------ */

int okv_matmul_block_rows(int N, int K, okv_dtype wdt, int n_threads, int align) {
    size_t row_bytes = (size_t)K * okv_dtype_size(wdt);
    size_t budget = 256 * 1024; /* one block of W stays in L2 */
    int rows = row_bytes ? (int)(budget / row_bytes) : 64;
    if (rows > 64) rows = 64;
    /* at least 4 blocks per thread so dynamic scheduling can balance */
    int per_thread = (N + n_threads * 4 - 1) / (n_threads * 4);
    if (rows > per_thread) rows = per_thread;
    rows = (rows + align - 1) / align * align;
    return rows < align ? align : rows;
}

/* sum a[k]*b[k] with 8 independent partial sums: a compiler can keep them in
 * one vector register, and they are shorter dependency chains anyway. */
static float dot8(const float *a, const float *b, int K) {
    float acc[8] = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8)
        for (int i = 0; i < 8; i++) acc[i] += a[k + i] * b[k + i];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < K; k++) s += a[k] * b[k];
    return s;
}

static void matmul_plain_task(void *ctx, int task, int thread) {
    const matmul_job *j = ctx;
    int n0 = task * j->block_rows, n1 = n0 + j->block_rows;
    if (n1 > j->N) n1 = j->N;
    size_t esz = okv_dtype_size(j->wdt);
    for (int n = n0; n < n1; n++) {
        const void *wrow = (const char *)j->W + (size_t)n * j->K * esz;
        float b = j->bias ? j->bias[n] : 0.0f;
        const float *w = j->wdt == OKV_F32 ? wrow : NULL;
        if (!w && j->rows) { /* convert the row once for all T rows of x */
            float *buf = j->rows + (size_t)thread * j->K;
            okv_k_load_row(buf, wrow, j->wdt, (size_t)j->K);
            w = buf;
        }
        for (int t = 0; t < j->T; t++) {
            const float *xr = j->x + (size_t)t * j->K;
            float acc;
            if (w) {
                acc = dot8(xr, w, j->K);
            } else { /* no scratch memory: convert as we go */
                acc = 0.0f;
                for (int k = 0; k < j->K; k++) acc += xr[k] * okv_k_load(wrow, j->wdt, (size_t)k);
            }
            j->y[(size_t)t * j->N + n] = acc + b;
        }
    }
}

void okv_matmul_plain(okv_threadpool *tp, float *y, const float *x, int T, int K,
                      const void *W, okv_dtype wdt, int N, const float *bias) {
    if (T <= 0 || N <= 0) return;
    matmul_job j = {y, x, T, K, N, W, wdt, bias, 0, NULL};
    int n_threads = okv_threadpool_size(tp);
    j.block_rows = okv_matmul_block_rows(N, K, wdt, n_threads, 1);
    okv_kscratch ks = {NULL};
    if (wdt != OKV_F32) j.rows = okv_kscratch_get(&ks, tp, okv_matmul_plain_scratch(K, wdt, n_threads));
    okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, matmul_plain_task, &j); /* rows NULL: per use */
    okv_kscratch_release(&ks);
}

size_t okv_matmul_plain_scratch(int K, okv_dtype wdt, int n_threads) {
    return wdt == OKV_F32 ? 0 : sizeof(float) * (size_t)n_threads * (size_t)(K > 0 ? K : 1);
}

/* ---- rmsnorm / glu ----------------------------------------------------------- */

void okv_rmsnorm_plain(float *y, const float *x, int T, int width, int group, const float *w, float eps) {
    if (group <= 0) group = width;
    for (size_t g = 0; g < (size_t)T * (size_t)(width / group); g++) {
        const float *xg = x + g * group;
        float *yg = y + g * group;
        double ss = 0.0;
        for (int i = 0; i < group; i++) ss += (double)xg[i] * xg[i];
        float r = (float)(1.0 / sqrt(ss / group + eps));
        for (int i = 0; i < group; i++) yg[i] = xg[i] * r * (w ? w[i] : 1.0f);
    }
}

static float gelu_tanh(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

void okv_glu_plain(float *y, const float *gate, const float *up, size_t n, okv_act act) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float a = act == OKV_ACT_SILU ? g / (1.0f + expf(-g)) : gelu_tanh(g);
        y[i] = a * up[i];
    }
}

/* ---- attention inner loops ----------------------------------------------------- */

/* The model the SIMD loops (okv_attend_simd.c) are tested against: the
 * same layouts and the same order of sums per output element. */
static void scores_plain(float *S, const float *QT, int Rp, const void *k, okv_dtype dt, size_t ldk, int n, int D,
                         float *stage) {
    size_t esz = okv_dtype_size(dt);
    for (int i = 0; i < n; i++) {
        const char *ki = (const char *)k + i * ldk * esz;
        float *kf = stage + (size_t)i * D;
        okv_k_load_row(kf, ki, dt, (size_t)D);
        float *s = S + (size_t)i * Rp;
        for (int r = 0; r < Rp; r++) s[r] = 0.0f;
        for (int d = 0; d < D; d++)
            for (int r = 0; r < Rp; r++) s[r] += kf[d] * QT[(size_t)d * Rp + r];
    }
}

static void softmax_plain(float *S, int n, int Rp, float *m, float *l, float *c) {
    for (int r = 0; r < Rp; r++) {
        float mx = m[r];
        for (int i = 0; i < n; i++)
            if (S[(size_t)i * Rp + r] > mx) mx = S[(size_t)i * Rp + r];
        if (mx == -INFINITY) { /* nothing seen yet */
            c[r] = 1.0f;
            for (int i = 0; i < n; i++) S[(size_t)i * Rp + r] = 0.0f;
            continue;
        }
        c[r] = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            float *p = S + (size_t)i * Rp + r;
            *p = *p == -INFINITY ? 0.0f : expf(*p - mx);
            sum += *p;
        }
        l[r] = l[r] * c[r] + sum;
        m[r] = mx;
    }
}

static void accumulate_plain(float *acc, const float *c, const float *P, int Rp, int R, const void *v, okv_dtype dt,
                             size_t ldv, int n, int D) {
    size_t esz = okv_dtype_size(dt);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) acc[(size_t)r * D + d] *= c[r];
    for (int i = 0; i < n; i++) {
        const char *vi = (const char *)v + i * ldv * esz;
        for (int r = 0; r < R; r++) {
            float p = P[(size_t)i * Rp + r];
            for (int d = 0; d < D; d++) acc[(size_t)r * D + d] += p * okv_k_load(vi, dt, (size_t)d);
        }
    }
}

const okv_attn_ops okv_attn_ops_plain = {scores_plain, softmax_plain, accumulate_plain};

void okv_attend_plain(okv_threadpool *tp, const okv_attn_args *a) {
    okv_attend_fast(tp, a, &okv_attn_ops_plain);
}
