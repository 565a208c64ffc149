/* okv_export_quant.h — quantization of one export tensor over threads. */
#ifndef OKV_EXPORT_QUANT_H
#define OKV_EXPORT_QUANT_H

#include "offkv_base.h"
#include "okv_quant.h"

struct okv_threadpool;
/* A pool of n_threads (0 = every online CPU) for okv_export_quantize;
 * NULL when threads cannot be started (quantization then runs inline). */
struct okv_threadpool *okv_export_pool_create(int n_threads);
void okv_export_pool_free(struct okv_threadpool *pool);
/* okv_quantize_weighted (same checks, same bytes) with W[N, K]'s rows
 * spread over pool (NULL = inline). */
okv_status okv_export_quantize(struct okv_threadpool *pool, const okv_qscheme *s, const float *W, int64_t N, int64_t K,
                               const float *imp, void *dst, const char *what, okv_error *err);

#endif
