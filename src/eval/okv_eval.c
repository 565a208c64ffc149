/* okv_eval.c — perplexity, KL divergence and top-1 agreement of a program
 * over a token sequence (offkv_eval.h).
 *
 * One "side" per program: its own session (caches and a runner asked for
 * all logit rows of a chunk) over the caller's program. Both sides step through the same
 * window chunk by chunk, so only one [chunk, vocab] block of logits per side
 * is alive at a time, and each scored row is compared as soon as both sides
 * have it. Log-softmax sums run in double: a vocab of 10^5 f32 terms would
 * otherwise lose the small probabilities the KL is made of. */
#include <math.h>
#include <stdlib.h>

#include "offkv_eval.h"
#include "okv_common.h"

void okv_eval_options_default(okv_eval_options *o) {
    memset(o, 0, sizeof *o);
    o->ctx = 512;
    o->bos_id = -1;
    okv_runner_options_default(&o->runner);
    okv_cache_options_default(&o->cache);
}

typedef struct eval_side {
    const okv_program *p;
    okv_program_info info;
    okv_session *session;
    const char *key;  /* the session's cache key */
    okv_runner *r;
    float *logits;   /* [chunk, vocab] */
} eval_side;

static okv_status side_open(eval_side *s, const okv_program *p, int chunk, const okv_eval_options *o,
                            const okv_cache_options *cache, okv_error *err) {
    s->p = p;
    okv_program_get_info(p, &s->info);
    okv_session_options so;
    okv_session_options_default(&so);
    so.cache = *cache;
    so.cache.max_capacity = o->ctx > s->info.prefill_chunk_size ? o->ctx : s->info.prefill_chunk_size;
    so.cache.initial_capacity = so.cache.max_capacity;
    so.runner = o->runner;
    so.runner.max_logit_rows = chunk;
    okv_status st = okv_session_create_for(p, &so, &s->session, err);
    if (!st) {
        s->key = okv_session_cache_key(s->session);
        s->r = okv_session_runner(s->session);
    }
    if (!st && !(s->logits = malloc(sizeof(float) * (size_t)chunk * (size_t)s->info.vocab_size)))
        st = okv_fail(err, OKV_ERR_NOMEM, "out of memory for %d x %d logits", chunk, s->info.vocab_size);
    return st;
}

static void side_close(eval_side *s) {
    okv_session_free(s->session);
    free(s->logits);
}

/* log-sum-exp of x[V] and its argmax. */
static double log_sum_exp(const float *x, int V, int *argmax) {
    int b = 0;
    for (int i = 1; i < V; i++) if (x[i] > x[b]) b = i;
    double m = x[b], sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)x[i] - m);
    *argmax = b;
    return m + log(sum);
}

/* KL(base || prog) of two logit rows whose log-sum-exps are given. */
static double kl_row(const float *base, double lse_b, const float *prog, double lse_p, int V) {
    double kl = 0;
    for (int i = 0; i < V; i++) {
        double lb = (double)base[i] - lse_b, lp = (double)prog[i] - lse_p;
        kl += exp(lb) * (lb - lp);
    }
    return kl > 0 ? kl : 0;   /* rounding can leave -1e-17 for identical rows */
}

typedef struct eval_acc {
    double nll, base_nll, kl, kl_max;
    int64_t n, agree;
} eval_acc;

/* Scores row j of the window (it predicts win[j + 1]). */
static void score_row(eval_acc *a, const float *prog, const float *base, int V, int32_t target) {
    int am_p, am_b;
    double lse_p = log_sum_exp(prog, V, &am_p);
    a->nll += lse_p - (double)prog[target];
    if (base) {
        double lse_b = log_sum_exp(base, V, &am_b);
        double kl = kl_row(base, lse_b, prog, lse_p, V);
        a->base_nll += lse_b - (double)base[target];
        a->kl += kl;
        if (kl > a->kl_max) a->kl_max = kl;
        a->agree += am_p == am_b;
    }
    a->n++;
}

/* Runs one window through both sides and scores its second half. */
static okv_status eval_window(eval_side *sides, int n_sides, const int32_t *win, int ctx, int chunk, eval_acc *a,
                              okv_error *err) {
    int first = ctx / 2, V = sides[0].info.vocab_size;
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)chunk);
    if (!pos) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = OKV_OK;
    for (int k = 0; k < n_sides && !st; k++) st = okv_cache_clear(sides[k].key, err);
    for (int c = 0; c < ctx && !st; c += chunk) {
        int T = ctx - c < chunk ? ctx - c : chunk;
        bool scored = c + T > first;   /* rows first .. ctx-2 are scored */
        for (int t = 0; t < T; t++) pos[t] = c + t;
        for (int k = 0; k < n_sides && !st; k++)
            st = okv_runner_step(sides[k].r, win + c, pos, T, scored ? OKV_LOGITS_ALL : OKV_LOGITS_NONE, sides[k].logits, err);
        for (int t = 0; t < T && !st && scored; t++) {
            int j = c + t;
            if (j < first || j >= ctx - 1) continue;
            score_row(a, sides[0].logits + (size_t)t * V, n_sides > 1 ? sides[1].logits + (size_t)t * V : NULL, V, win[j + 1]);
        }
    }
    free(pos);
    return st;
}

static okv_status check_args(const okv_program_info *pi, const okv_program_info *bi, int n, const okv_eval_options *o,
                             okv_error *err) {
    if (o->ctx < 4) return okv_fail(err, OKV_ERR_INVALID, "eval: a window of %d tokens is too small (at least 4)", o->ctx);
    if (o->ctx > pi->max_ctx_len || (bi && o->ctx > bi->max_ctx_len))
        return okv_fail(err, OKV_ERR_INVALID, "eval: a window of %d tokens is above the program's max_ctx_len %d", o->ctx,
                        o->ctx > pi->max_ctx_len ? pi->max_ctx_len : bi->max_ctx_len);
    if (n < o->ctx)
        return okv_fail(err, OKV_ERR_INVALID, "eval: the text has %d tokens, fewer than one window of %d tokens", n, o->ctx);
    if (bi && bi->vocab_size != pi->vocab_size)
        return okv_fail(err, OKV_ERR_INVALID, "eval: the base program's vocabulary (%d) differs from the program's (%d)",
                        bi->vocab_size, pi->vocab_size);
    if (o->bos_id >= pi->vocab_size) return okv_fail(err, OKV_ERR_INVALID, "eval: bos id %d is outside the vocabulary", o->bos_id);
    return OKV_OK;
}

okv_status okv_eval_perplexity(const okv_program *p, const okv_program *base, const int32_t *ids, int n,
                               const okv_eval_options *o, okv_eval_result *res, okv_error *err) {
    okv_eval_options dflt;
    if (!o) { okv_eval_options_default(&dflt); o = &dflt; }
    memset(res, 0, sizeof *res);
    okv_program_info pi, bi;
    okv_program_get_info(p, &pi);
    if (base) okv_program_get_info(base, &bi);
    okv_status st = check_args(&pi, base ? &bi : NULL, n, o, err);
    if (st) return st;
    int chunk = pi.prefill_chunk_size;
    if (base && bi.prefill_chunk_size < chunk) chunk = bi.prefill_chunk_size;
    eval_side sides[2] = {0};
    int n_sides = base ? 2 : 1;
    st = side_open(&sides[0], p, chunk, o, &o->cache, err);
    if (!st && base) st = side_open(&sides[1], base, chunk, o, o->base_cache ? o->base_cache : &o->cache, err);
    int32_t *win = st ? NULL : malloc(sizeof(int32_t) * (size_t)o->ctx);
    if (!st && !win) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    eval_acc a = {0};
    int n_windows = n / o->ctx;
    for (int w = 0; w < n_windows && !st; w++) {
        memcpy(win, ids + (size_t)w * o->ctx, sizeof(int32_t) * (size_t)o->ctx);
        if (o->bos_id >= 0) win[0] = o->bos_id;
        st = eval_window(sides, n_sides, win, o->ctx, chunk, &a, err);
        if (!st && o->progress) o->progress(o->progress_ctx, w + 1, n_windows);
    }
    free(win);
    for (int k = 0; k < n_sides; k++) side_close(&sides[k]);
    if (st) return st;
    res->n_windows = n_windows;
    res->n_scored = a.n;
    res->nll = a.nll / (double)a.n;
    res->ppl = exp(res->nll);
    if (base) {
        res->base_ppl = exp(a.base_nll / (double)a.n);
        res->kl = a.kl / (double)a.n;
        res->kl_max = a.kl_max;
        res->top1 = (double)a.agree / (double)a.n;
    }
    return OKV_OK;
}
