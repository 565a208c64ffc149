/* okv_calib.h — activation statistics for activation-aware quantization:
 * the float program runs over a calibration text (or token stream) and every
 * linear's input rows are summed per input channel (sum of x^2, the
 * "importance matrix" diagonal). okv_export weights each channel's squared
 * quantization error by the mean (okv_quantize_weighted). */
#ifndef OKV_CALIB_H
#define OKV_CALIB_H

#include <stdint.h>

#include "offkv.h"

/* One weight tensor's statistics: the inputs of every MATMUL that uses it. */
typedef struct okv_calib_stat {
    char *name;        /* the weight tensor's name in the program */
    int K;             /* input channels */
    double *sum_x2;    /* [K] sum over rows of x_k^2 */
    int64_t rows;      /* rows summed */
} okv_calib_stat;

typedef struct okv_calib {
    okv_calib_stat *stats;
    int n, cap;
    int hint;          /* where the last lookup matched (calls come in graph order) */
    int64_t tokens;    /* tokens run (incl. one BOS per window) */
    okv_status st;     /* first failure inside the runner's callback */
    okv_error err;
} okv_calib;

/* What to run: a text file tokenized with the program's bundled tokenizer,
 * or (file NULL) n_ids token ids. Windows of ctx tokens (0 = 512, capped at
 * the program's max_ctx_len), each starting with the program's BOS when it
 * has one; steps of the program's prefill chunk. */
typedef struct okv_calib_source {
    const char *file;
    const int32_t *ids;
    int n_ids;
    int ctx;
    int n_threads;
    void (*progress)(void *ctx, int64_t tokens_done, int64_t tokens, double seconds);
    void *progress_ctx;
} okv_calib_source;

/* Runs the program at program_path over the source and fills c (zeroed by
 * the caller; okv_calib_free releases it, also after a failure). */
okv_status okv_calib_collect(const char *program_path, const okv_calib_source *src, okv_calib *c, okv_error *err);
/* Mean x^2 per input channel of the named weight into imp[K] (a floor of
 * 1e-6 of the channels' average keeps unused channels from weight 0);
 * false when the weight was not seen or has another K. */
bool okv_calib_importance(const okv_calib *c, const char *name, int K, float *imp);
const okv_calib_stat *okv_calib_find(const okv_calib *c, const char *name);
void okv_calib_free(okv_calib *c);

#endif
