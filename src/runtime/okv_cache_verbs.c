/* okv_cache_verbs.c — the public cache and sequence verbs of offkv.h over
 * the named registry: install a program's caches under a key (translating
 * okv_cache_options to the cache layer's okv_kv_options), and every verb
 * that looks a key up, runs one okv_kv_* call under the registry's
 * reference and releases it. Shaped as one with_kv() plus a small adapter
 * per verb so the lookup/release discipline is written once. */
#include <stdlib.h>

#include "offkv.h"
#include "okv_cache.h"
#include "okv_common.h"
#include "okv_runtime_internal.h"

void okv_cache_options_default(okv_cache_options *o) {
    memset(o, 0, sizeof *o);
    o->k_storage_dtype = o->v_storage_dtype = OKV_F32;
}

okv_dtype okv_kv_dtype_auto(const okv_program *p) {
    okv_program_info info;
    okv_program_get_info(p, &info);
    return info.dtype == OKV_BF16 || info.dtype == OKV_F16 ? info.dtype : OKV_F32;
}

okv_status okv_cache_install(const char *key, const okv_program *p, const okv_cache_options *o, okv_error *err) {
    okv_cache_options d;
    if (!o) { okv_cache_options_default(&d); o = &d; }
    okv_kv_options ko;
    okv_kv_options_default(&ko);
    ko.k_dtype = o->k_storage_auto ? okv_kv_dtype_auto(p) : o->k_storage_dtype;
    ko.v_dtype = o->v_storage_auto ? okv_kv_dtype_auto(p) : o->v_storage_dtype;
    ko.max_capacity = o->max_capacity;
    ko.initial_capacity = o->initial_capacity;
    ko.windows_override = o->windows;
    ko.n_windows_override = o->n_windows;
    if (o->mode != OKV_CACHE_SINGLE && o->mode != OKV_CACHE_CELLS)
        return okv_fail(err, OKV_ERR_INVALID, "cache options: unknown mode %d", (int)o->mode);
    if (o->mode == OKV_CACHE_SINGLE && (o->max_seqs || o->n_cells))
        return okv_fail(err, OKV_ERR_INVALID, "cache options: max_seqs/n_cells need mode OKV_CACHE_CELLS");
    if (o->max_seqs < 0 || o->max_seqs > OKV_MAX_SEQS)
        return okv_fail(err, OKV_ERR_INVALID, "cache options: max_seqs %d outside [0, %d]", o->max_seqs, OKV_MAX_SEQS);
    ko.cells = o->mode == OKV_CACHE_CELLS;
    ko.max_seqs = o->max_seqs;
    ko.n_cells = o->n_cells;
    ko.max_step = o->max_step;
    return okv_registry_install(key, &p->pf->layout, &ko, err);
}

okv_status okv_cache_remove(const char *key, okv_error *err) { return okv_registry_remove(key, err); }

/* Runs fn on the kv set registered under key. */
static okv_status with_kv(const char *key, okv_status (*fn)(okv_kv *, void *, okv_error *), void *arg, okv_error *err) {
    okv_kv *kv;
    okv_status st = okv_registry_acquire(key, &kv, err);
    if (st) return st;
    st = fn(kv, arg, err);
    okv_registry_release(kv);
    return st;
}

static okv_status single_only(okv_kv *kv, const char *verb, okv_error *err) {
    if (!okv_kv_is_cells(kv)) return OKV_OK;
    return okv_fail(err, OKV_ERR_STATE, "%s: this cache key holds many sequences (cell pool): use the okv_seq_* verbs", verb);
}
static okv_status do_length(okv_kv *kv, void *arg, okv_error *err) {
    if (okv_kv_is_cells(kv)) return single_only(kv, "cache length", err);
    *(int *)arg = okv_kv_length(kv);
    return OKV_OK;
}
static okv_status do_rewind(okv_kv *kv, void *arg, okv_error *err) { return okv_kv_rewind(kv, *(int *)arg, err); }
static okv_status do_clear(okv_kv *kv, void *arg, okv_error *err) {
    if (okv_kv_is_cells(kv)) return single_only(kv, "cache clear", err);
    okv_kv_clear(kv);
    return OKV_OK;
}
static okv_status do_bytes(okv_kv *kv, void *arg, okv_error *err) { *(size_t *)arg = okv_kv_bytes(kv); return OKV_OK; }

okv_status okv_cache_length(const char *key, int *length, okv_error *err) { return with_kv(key, do_length, length, err); }
okv_status okv_cache_rewind(const char *key, int new_len, okv_error *err) { return with_kv(key, do_rewind, &new_len, err); }
okv_status okv_cache_clear(const char *key, okv_error *err) { return with_kv(key, do_clear, NULL, err); }
okv_status okv_cache_bytes(const char *key, size_t *bytes, okv_error *err) { return with_kv(key, do_bytes, bytes, err); }

/* ---- sequences of a cell-pool key ------------------------------------------------ */

typedef struct seq_arg { int seq, a, b, *out; bool *ok; okv_cells_info *info; } seq_arg;

static okv_status do_seq_new(okv_kv *kv, void *arg, okv_error *err) { return okv_kv_seq_new(kv, ((seq_arg *)arg)->out, err); }
static okv_status do_seq_fork(okv_kv *kv, void *arg, okv_error *err) {
    seq_arg *x = arg;
    return okv_kv_seq_fork(kv, x->seq, x->a, x->out, err);
}
static okv_status do_seq_rm(okv_kv *kv, void *arg, okv_error *err) {
    seq_arg *x = arg;
    return okv_kv_seq_rm(kv, x->seq, x->a, x->b, err);
}
static okv_status do_seq_free(okv_kv *kv, void *arg, okv_error *err) { return okv_kv_seq_free(kv, ((seq_arg *)arg)->seq, err); }
static okv_status do_seq_len(okv_kv *kv, void *arg, okv_error *err) {
    seq_arg *x = arg;
    int32_t n = 0;
    okv_status st = okv_kv_seq_len(kv, x->seq, &n, err);
    if (!st) *x->out = n;
    return st;
}
static okv_status do_seq_can_extend(okv_kv *kv, void *arg, okv_error *err) {
    seq_arg *x = arg;
    return okv_kv_seq_can_extend(kv, x->seq, x->a, x->ok, err);
}
static okv_status do_cells(okv_kv *kv, void *arg, okv_error *err) {
    okv_kv_cells_count c;
    okv_status st = okv_kv_cells_count_get(kv, &c, err);
    if (!st) *((seq_arg *)arg)->info = (okv_cells_info){ c.max_seqs, c.n_seqs, c.max_len, c.n_cells, c.used, c.free };
    return st;
}

okv_status okv_seq_new(const char *key, int *seq, okv_error *err) {
    seq_arg x = { .out = seq };
    return with_kv(key, do_seq_new, &x, err);
}
okv_status okv_seq_fork(const char *key, int src, int upto, int *seq, okv_error *err) {
    seq_arg x = { .seq = src, .a = upto, .out = seq };
    return with_kv(key, do_seq_fork, &x, err);
}
okv_status okv_seq_rm(const char *key, int seq, int p0, int p1, okv_error *err) {
    seq_arg x = { .seq = seq, .a = p0, .b = p1 };
    return with_kv(key, do_seq_rm, &x, err);
}
okv_status okv_seq_free(const char *key, int seq, okv_error *err) {
    seq_arg x = { .seq = seq };
    return with_kv(key, do_seq_free, &x, err);
}
okv_status okv_seq_len(const char *key, int seq, int *len, okv_error *err) {
    seq_arg x = { .seq = seq, .out = len };
    return with_kv(key, do_seq_len, &x, err);
}
okv_status okv_seq_can_extend(const char *key, int seq, int T, bool *ok, okv_error *err) {
    seq_arg x = { .seq = seq, .a = T, .ok = ok };
    return with_kv(key, do_seq_can_extend, &x, err);
}
okv_status okv_cache_cells(const char *key, okv_cells_info *info, okv_error *err) {
    seq_arg x = { .info = info };
    return with_kv(key, do_cells, &x, err);
}

typedef struct describe_arg { char *buf; size_t n; } describe_arg;
static okv_status do_describe(okv_kv *kv, void *arg, okv_error *err) {
    describe_arg *a = arg;
    okv_kv_describe(kv, a->buf, a->n);
    return OKV_OK;
}
okv_status okv_cache_describe(const char *key, char *buf, size_t n, okv_error *err) {
    describe_arg a = {buf, n};
    return with_kv(key, do_describe, &a, err);
}

