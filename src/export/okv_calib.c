/* okv_calib.c — the calibration pass of activation-aware quantization
 * (okv_calib.h): runs a float program over calibration tokens with the
 * runtime's own kernels and sums, per weight tensor and input channel, the
 * squares of the rows every MATMUL multiplies it with.
 *
 * This is llama.cpp's "importance matrix" (the diagonal of X^T X per
 * linear), collected through a runner callback instead of a separate tool,
 * so the statistics come from exactly the graph the quantized program will
 * run. Only the diagonal: q/k/v (and gate/up) see the same rows and get the
 * same statistics; the full X^T X a GPTQ-style update needs is K^2 per
 * distinct input (8192^2 doubles = 512 MB for a 1B model's down_proj) and is
 * not collected here. Logit rows are not asked for (OKV_LOGITS_NONE), so the
 * LM head (a [vocab, hidden] matmul per token, the costliest one) does not
 * run and a head has no statistics: it and embedding tables are quantized
 * unweighted. Sums are in double and deterministic (one thread calls back,
 * rows in order). */
#include <stdlib.h>
#include <time.h>

#include "offkv_tok.h"
#include "okv_calib.h"
#include "okv_common.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const okv_calib_stat *okv_calib_find(const okv_calib *c, const char *name) {
    for (int i = 0; c && i < c->n; i++)
        if (!strcmp(c->stats[i].name, name)) return &c->stats[i];
    return NULL;
}

/* The statistics entry of `name` with K channels, created on first sight. */
static okv_calib_stat *stat_for(okv_calib *c, const char *name, int K) {
    if (c->hint < c->n && !strcmp(c->stats[c->hint].name, name)) return &c->stats[c->hint];
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->stats[i].name, name)) { c->hint = i; return &c->stats[i]; }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        okv_calib_stat *s = realloc(c->stats, sizeof *s * (size_t)cap);
        if (!s) return NULL;
        c->stats = s;
        c->cap = cap;
    }
    okv_calib_stat *s = &c->stats[c->n];
    *s = (okv_calib_stat){okv_strdup(name), K, calloc((size_t)K, sizeof(double)), 0};
    if (!s->name || !s->sum_x2) { free(s->name); free(s->sum_x2); return NULL; }
    c->hint = c->n++;
    return s;
}

/* The runner's matmul_input callback: x [rows, K]. */
static void observe(void *ctx, const char *weight, const float *x, int rows, int K) {
    okv_calib *c = ctx;
    if (c->st || rows <= 0) return;
    okv_calib_stat *s = stat_for(c, weight, K);
    if (!s) { c->st = okv_fail(&c->err, OKV_ERR_NOMEM, "out of memory collecting calibration statistics"); return; }
    if (s->K != K) {
        c->st = okv_fail(&c->err, OKV_ERR_INVALID, "calibration: weight '%s' is multiplied with rows of %d and of %d",
                         weight, s->K, K);
        return;
    }
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * (size_t)K;
        for (int k = 0; k < K; k++) s->sum_x2[k] += (double)xr[k] * (double)xr[k];
    }
    s->rows += rows;
}

/* The calibration text as tokens of the program's bundled tokenizer. */
static okv_status tokenize_calibration(const okv_program *p, const char *file, int32_t **ids, size_t *n, okv_error *err) {
    size_t tlen = 0, len = 0;
    const char *tj = okv_program_blob(p, "tokenizer.json", &tlen);
    okv_tok *tok = NULL;
    char *text = NULL;
    okv_status st = okv_read_file(file, &text, &len, err);
    if (st) { free(text); return okv_fail_prefix(err, "calibration"); }
    if (len == 0) st = okv_fail(err, OKV_ERR_INVALID, "calibration file %s is empty", file);
    else if (!tj)
        st = okv_fail(err, OKV_ERR_INVALID, "calibration file %s: the checkpoint has no tokenizer.json to tokenize it with",
                      file);
    if (st) { free(text); return st; }
    st = okv_tok_load_json(tj, tlen, &tok, err);
    if (!st) st = okv_tok_encode(tok, text, len, false, ids, n, err);
    if (st) okv_fail_prefix(err, "calibration file %s", file);
    okv_tok_free(tok);
    free(text);
    return st;
}

/* Windows of up to ctx tokens (BOS first when the program has one) in steps
 * of the prefill chunk. */
static okv_status run_windows(const okv_program *p, okv_runner *r, const char *key, const int32_t *ids, size_t n, int ctx,
                              okv_calib *c, const okv_calib_source *src, okv_error *err) {
    okv_program_info info;
    okv_program_get_info(p, &info);
    const int bos = info.bos_id, per = bos >= 0 ? ctx - 1 : ctx, chunk = info.prefill_chunk_size;
    int32_t *win = malloc(sizeof(int32_t) * (size_t)ctx), *pos = malloc(sizeof(int32_t) * (size_t)ctx);
    if (!win || !pos) { free(win); free(pos); return okv_fail(err, OKV_ERR_NOMEM, "out of memory"); }
    double t0 = now_s();
    int64_t total = (int64_t)n + (bos >= 0 ? (int64_t)((n + (size_t)per - 1) / (size_t)per) : 0);
    okv_status st = OKV_OK;
    for (size_t at = 0; at < n && !st; at += (size_t)per) {
        int m = 0;
        if (bos >= 0) win[m++] = bos;
        for (size_t i = at; i < n && m < ctx; i++) win[m++] = ids[i];
        for (int i = 0; i < m; i++) pos[i] = i;
        st = okv_cache_clear(key, err);
        for (int t = 0; t < m && !st; t += chunk) {
            int T = m - t < chunk ? m - t : chunk;
            st = okv_runner_step(r, win + t, pos + t, T, OKV_LOGITS_NONE, NULL, err);
            if (!st && c->st) st = okv_fail(err, c->st, "%s", c->err.message);
            c->tokens += st ? 0 : T;
            if (!st && src->progress) src->progress(src->progress_ctx, c->tokens, total, now_s() - t0);
        }
    }
    free(win);
    free(pos);
    return st;
}

okv_status okv_calib_collect(const char *program_path, const okv_calib_source *src, okv_calib *c, okv_error *err) {
    okv_program *p = NULL;
    okv_session *session = NULL;
    int32_t *owned = NULL;
    const int32_t *ids = src->ids;
    size_t n = src->file ? 0 : (size_t)(src->n_ids > 0 ? src->n_ids : 0);
    okv_status st = okv_program_open(program_path, &p, err);
    okv_program_info info;
    if (!st) okv_program_get_info(p, &info);
    if (!st && src->file) {
        st = tokenize_calibration(p, src->file, &owned, &n, err);
        ids = owned;
    }
    if (!st && n == 0)
        st = okv_fail(err, OKV_ERR_INVALID, "calibration %s%s has no tokens", src->file ? "file " : "token stream",
                      src->file ? src->file : "");
    for (size_t i = 0; !st && i < n; i++)
        if (ids[i] < 0 || ids[i] >= info.vocab_size)
            st = okv_fail(err, OKV_ERR_INVALID, "calibration token %zu is %d, outside the vocabulary [0, %d)", i, ids[i],
                          info.vocab_size);
    int ctx = src->ctx > 0 ? src->ctx : 512;
    if (!st) {
        if (ctx > info.max_ctx_len) ctx = info.max_ctx_len;
        if (ctx < 2) st = okv_fail(err, OKV_ERR_INVALID, "calibration window of %d tokens is too small", ctx);
    }
    if (!st) {
        okv_session_options so;
        okv_session_options_default(&so);
        so.cache.max_capacity = so.cache.initial_capacity = ctx;
        so.runner.n_threads = src->n_threads;
        so.runner.max_logit_rows = 1;
        so.runner.matmul_input = observe;
        so.runner.matmul_input_ctx = c;
        st = okv_session_create_for(p, &so, &session, err);
    }
    if (!st)
        st = run_windows(p, okv_session_runner(session), okv_session_cache_key(session), ids, n, ctx, c, src, err);
    okv_session_free(session);
    okv_program_free(p);
    free(owned);
    return st;
}

bool okv_calib_importance(const okv_calib *c, const char *name, int K, float *imp) {
    const okv_calib_stat *s = okv_calib_find(c, name);
    if (!s || s->K != K || s->rows <= 0) return false;
    double avg = 0;
    for (int k = 0; k < K; k++) avg += s->sum_x2[k] / (double)s->rows;
    avg /= K;
    for (int k = 0; k < K; k++) imp[k] = (float)(s->sum_x2[k] / (double)s->rows + 1e-6 * avg);
    return avg > 0;
}

void okv_calib_free(okv_calib *c) {
    for (int i = 0; i < c->n; i++) { free(c->stats[i].name); free(c->stats[i].sum_x2); }
    free(c->stats);
    *c = (okv_calib){0};
}
