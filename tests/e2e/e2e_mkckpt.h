/* e2e_mkckpt.h — a generated checkpoint exported and opened in one call, for
 * the end-to-end tests that need a small random model of a given shape
 * rather than a fixture (sequence state, cache dtypes). Kept apart from
 * e2e_util.h so only tests linking okv_mkckpt include it. */
#ifndef OKV_E2E_MKCKPT_H
#define OKV_E2E_MKCKPT_H

#include "e2e_util.h"
#include "mkckpt.h"

/* Writes spec s under <tmp>/<name>, exports it as an fp32 program with
 * prefill chunk `chunk` and context `max_ctx`, opens it. NULL on failure
 * (reported through CHECKF). */
static inline okv_program *e2e_generated_program(const okv_mkckpt_spec *s, const char *name, int chunk, int max_ctx) {
    char *dir = e2e_path(name), out[600];
    snprintf(out, sizeof out, "%s.okv", dir);
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = OKV_F32;
    o.prefill_chunk_size = chunk;
    o.max_ctx_len = max_ctx;
    okv_error err = {0};
    okv_program *p = NULL;
    okv_status st = okv_mkckpt_write(s, dir, &err);
    if (!st) st = okv_export(dir, out, &o, &err);
    if (!st) st = okv_program_open(out, &p, &err);
    CHECKF(st == OKV_OK, "%s: %s", name, err.message);
    free(dir);
    return p;
}

/* (Re)installs `key` over p with cache options co and returns a 2-thread
 * runner on it. */
static inline okv_runner *e2e_install_runner(okv_program *p, const char *key, const okv_cache_options *co) {
    okv_error err = {0};
    okv_runner *r = NULL;
    okv_cache_remove(key, &err);
    CHECK_OK(okv_cache_install(key, p, co, &err), &err);
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = 2;
    CHECK_OK(okv_runner_create(p, key, &ro, &r, &err), &err);
    return r;
}

/* Steps the tokens tok(t) at positions [from, to) of sequence seq (-1: a
 * single-sequence key), chunk (<= 64) at a time; the last step's last
 * logits row into out. */
static inline void e2e_step_range(okv_runner *r, int32_t (*tok)(int), int chunk, int seq, int from, int to, float *out) {
    okv_error err = {0};
    for (int t = from; t < to;) {
        int32_t ids[64], pos[64], seqs[64], row;
        int T = to - t < chunk ? to - t : chunk;
        for (int k = 0; k < T; k++) { ids[k] = tok(t + k); pos[k] = t + k; seqs[k] = seq; }
        row = T - 1;
        okv_status st = seq < 0 ? okv_runner_step(r, ids, pos, T, OKV_LOGITS_LAST, out, &err)
                                : okv_runner_step_batch(r, ids, seqs, pos, T, &row, 1, out, &err);
        CHECK_OK(st, &err);
        if (st) return;
        t += T;
    }
}

#endif
