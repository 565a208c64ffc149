/* offkv_eval.h — measuring a program's quality on a token sequence:
 * perplexity, and how far its next-token distributions are from another
 * program's (KL divergence, top-1 agreement) — what tells whether a
 * quantized export is still the model it was exported from.
 *
 * The sequence is cut into consecutive windows of `ctx` tokens; each window
 * runs on fresh caches, its first half only conditions, and every later
 * position's prediction of the next token is scored (the scheme of
 * llama.cpp's perplexity tool, so figures are comparable). */
#ifndef OFFKV_EVAL_H
#define OFFKV_EVAL_H

#include <stdint.h>

#include "offkv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct okv_eval_options {
    int ctx;                    /* window length in tokens (default 512; >= 4, <= the programs' max_ctx_len) */
    int bos_id;                 /* >= 0: the first token of each window becomes this id; -1: tokens as given */
    okv_runner_options runner;  /* threads, kernels (max_logit_rows is set by the evaluator) */
    okv_cache_options cache;    /* storage dtype etc. (capacity is set to ctx) */
    const okv_cache_options *base_cache; /* the base side's, NULL = cache; with base = the
                                    program itself this measures a KV storage dtype */
    /* Called after each window (may be NULL). */
    void (*progress)(void *ctx, int window, int n_windows);
    void *progress_ctx;
} okv_eval_options;

typedef struct okv_eval_result {
    int n_windows;
    int64_t n_scored;       /* positions scored */
    double nll;             /* mean negative log-likelihood of the next token, nats */
    double ppl;             /* exp(nll) */
    /* with a base program (else 0) */
    double base_ppl;        /* the base program's perplexity on the same positions */
    double kl;              /* mean KL(base || program), nats */
    double kl_max;          /* largest per-position KL */
    double top1;            /* share of positions where both argmaxes agree */
} okv_eval_result;

void okv_eval_options_default(okv_eval_options *o);
/* Evaluates p (and compares with base if non-NULL; same vocabulary) over
 * ids[n]. Uses its own caches (private keys, removed before returning).
 * Needs n >= ctx: the tail shorter than a window is not scored. */
okv_status okv_eval_perplexity(const okv_program *p, const okv_program *base, const int32_t *ids, int n,
                               const okv_eval_options *o, okv_eval_result *res, okv_error *err);

#ifdef __cplusplus
}
#endif
#endif
