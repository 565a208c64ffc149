/* okv_export_quant.c — the slow part of a quantized export, on threads.
 *
 * The per-group error search (okv_quant.c) dominates a quantized export:
 * a Llama-3.2-1B-shaped checkpoint took 190 s (8w) and 317 s (4w) on one
 * thread. Rows are quantized independently, so they are spread over the
 * thread pool (okv_threadpool.h) in tasks of QUANT_TASK_ROWS rows; the bytes written
 * do not depend on the split (tests/e2e/test_quant.c compares 1 and 2
 * threads byte for byte). Kept apart from okv_export.c because that file
 * sees the hf layer's types, whose okv_rope collides with the kernels'. */
#include <stdint.h>
#include <stdlib.h>

#include "okv_export_quant.h"
#include "okv_common.h"
#include "okv_quant.h"
#include "okv_threadpool.h"

okv_threadpool *okv_export_pool_create(int n_threads) { return okv_threadpool_create(n_threads); }

void okv_export_pool_free(okv_threadpool *pool) { okv_threadpool_free(pool); }

/* Tasks of QUANT_TASK_ROWS rows; the error reported is the lowest failing
 * task's, so it names the same row whatever the thread count. */
enum { QUANT_TASK_ROWS = 64 };

typedef struct quant_job {
    const okv_qscheme *s;
    const float *W, *imp;
    int64_t N, K;
    void *dst;
    const char *what;
    okv_error *errs; /* [n_tasks] */
} quant_job;

static void quant_task(void *ctx, int task, int thread) {
    (void)thread;
    const quant_job *q = ctx;
    int64_t r0 = (int64_t)task * QUANT_TASK_ROWS, r1 = r0 + QUANT_TASK_ROWS < q->N ? r0 + QUANT_TASK_ROWS : q->N;
    q->errs[task].status = OKV_OK;
    okv_quantize_rows(q->s, q->W, q->N, q->K, q->imp, q->dst, r0, r1, q->what, &q->errs[task]);
}

okv_status okv_export_quantize(okv_threadpool *pool, const okv_qscheme *s, const float *W, int64_t N, int64_t K,
                                   const float *imp, void *dst, const char *what, okv_error *err) {
    okv_status st = okv_quantize_check(s, N, K, imp, what, err);
    if (st) return st;
    int64_t n_tasks = (N + QUANT_TASK_ROWS - 1) / QUANT_TASK_ROWS;
    if (okv_threadpool_size(pool) < 2 || n_tasks < 2 || n_tasks > INT32_MAX)
        return okv_quantize_rows(s, W, N, K, imp, dst, 0, N, what, err);
    okv_error *errs = malloc(sizeof *errs * (size_t)n_tasks);
    if (!errs) return okv_fail(err, OKV_ERR_NOMEM, "out of memory quantizing '%s'", what);
    quant_job q = {s, W, imp, N, K, dst, what, errs};
    okv_threadpool_run(pool, (int)n_tasks, quant_task, &q);
    for (int64_t t = 0; t < n_tasks && !st; t++)
        if (errs[t].status) { *err = errs[t]; st = errs[t].status; }
    free(errs);
    return st;
}
