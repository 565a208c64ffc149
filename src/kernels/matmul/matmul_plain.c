/* matmul/matmul_plain.c — the portable C matmul: the definition of what the
 * SIMD versions must compute, and the path every CPU can run. Written for
 * clarity first, with only the structure that matters on any machine:
 * parallel over output features, each f16/bf16 weight row converted once
 * for all rows of x, sums with 8 partial sums (short dependency chains,
 * vectorisable). Also the row blocking every matmul uses
 * (okv_matmul_block_rows). */
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
                acc = okv_k_dot8(xr, w, j->K);
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
