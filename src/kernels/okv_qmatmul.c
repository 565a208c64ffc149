/* okv_qmatmul.c — y = x @ dequant(W)^T for quantized W (okv_quant.h): the
 * plain f32 reference every fast path is measured against.
 *
 * The reference dequantizes each W row once into f32 (okv_dequant_row, the
 * layer's own definition of the values) and reuses it for all T rows of x,
 * summing with 8 partial sums. Threads split N in blocks of whole rows, so
 * every output is computed by one task and the bits do not depend on the
 * thread count. */
#include <math.h>
#include <stdlib.h>

#include "okv_kernels_internal.h"

typedef struct qmm_plain_job {
    float *y;
    const float *x;
    int T, K, N;
    const void *W;
    const okv_qscheme *s;
    const float *bias;
    int block_rows;
    float *rows; /* per thread: one dequantized W row [K] */
} qmm_plain_job;

static float dot8(const float *a, const float *b, int K) {
    float acc[8] = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8)
        for (int i = 0; i < 8; i++) acc[i] += a[k + i] * b[k + i];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < K; k++) s += a[k] * b[k];
    return s;
}

static void qmm_plain_task(void *ctx, int task, int thread) {
    const qmm_plain_job *j = ctx;
    int n0 = task * j->block_rows, n1 = n0 + j->block_rows < j->N ? n0 + j->block_rows : j->N;
    float *w = j->rows + (size_t)thread * j->K;
    for (int n = n0; n < n1; n++) {
        okv_dequant_row(j->s, j->W, j->N, j->K, n, w);
        float b = j->bias ? j->bias[n] : 0.0f;
        for (int t = 0; t < j->T; t++) j->y[(size_t)t * j->N + n] = dot8(j->x + (size_t)t * j->K, w, j->K) + b;
    }
}

/* Output filled with NaN: what a kernel without scratch memory returns. */
void okv_qmm_fail(float *y, int T, int N) {
    for (size_t i = 0; i < (size_t)T * N; i++) y[i] = NAN;
}

void okv_matmul_q_plain(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                        const okv_qscheme *s, int N, const float *bias) {
    if (T <= 0 || N <= 0) return;
    int n_threads = okv_threadpool_size(tp);
    qmm_plain_job j = {y, x, T, K, N, W, s, bias, 0, NULL};
    j.block_rows = okv_matmul_block_rows(N, K, OKV_F16, n_threads, 1);
    j.rows = malloc(sizeof(float) * (size_t)n_threads * (size_t)K);
    if (!j.rows) {
        okv_qmm_fail(y, T, N);
        return;
    }
    okv_threadpool_run(tp, (N + j.block_rows - 1) / j.block_rows, qmm_plain_task, &j);
    free(j.rows);
}
