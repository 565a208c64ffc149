/* okv_runner.c — a runner's life: options, creation (the cache key looked
 * up and checked against the program's layout, the kernel table chosen for
 * this CPU, a thread pool, then okv_plan.c's memory), free, the getters and
 * the profile counters okv_step.c fills. A runner owns everything a step
 * needs besides the weights (the program's) and the caches (the key's). */
#include <stdlib.h>

#include "okv_common.h"
#include "okv_runtime_internal.h"

void okv_runner_options_default(okv_runner_options *o) { memset(o, 0, sizeof *o); }

okv_status okv_runner_create(const okv_program *p, const char *cache_key, const okv_runner_options *o, okv_runner **out,
                             okv_error *err) {
    okv_runner_options d;
    if (!o) { okv_runner_options_default(&d); o = &d; }
    okv_runner *r = calloc(1, sizeof *r);
    if (!r) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    r->p = p;
    r->max_T = p->pf->layout.prefill_chunk_size;
    r->max_logit_rows = o->max_logit_rows > 0 && o->max_logit_rows < r->max_T ? o->max_logit_rows : r->max_T;
    r->ref_attn = o->reference_attention;
    r->matmul_input = o->matmul_input;
    r->matmul_input_ctx = o->matmul_input_ctx;
    r->profile = o->profile;
    /* OKV_STEP_FUSE=0 runs the planned ops one by one on one thread (the
     * reference the fused path is compared with), =all fuses and splits
     * every step of 2 rows or more (tests on tiny models); default on. */
    const char *fz = getenv("OKV_STEP_FUSE");
    r->fuse = fz && !strcmp(fz, "0") ? 0 : fz && !strcmp(fz, "all") ? 2 : 1;
    r->k = o->deterministic ? okv_kernels_select_deterministic(o->plain_kernels ? OKV_ISA_PLAIN : OKV_ISA_AUTO)
                            : okv_kernels_select(o->plain_kernels ? OKV_ISA_PLAIN : OKV_ISA_AUTO);
    r->key = okv_strdup(cache_key);
    okv_status st = r->key ? okv_registry_acquire(cache_key, &r->kv, err) : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    if (!st) {
        const okv_layout *a = okv_kv_layout(r->kv), *b = &p->pf->layout;
        bool same = a->n_caches == b->n_caches;
        for (int c = 0; same && c < a->n_caches; c++)
            same = a->kv_heads[c] == b->kv_heads[c] && a->head_dims[c] == b->head_dims[c];
        if (!same)
            st = okv_fail(err, OKV_ERR_INVALID, "cache key '%s' was built for a different layout than this program", cache_key);
        if (okv_kv_max_write(r->kv) < r->max_T) {   /* the caches take smaller steps (okv_cache_options.max_step) */
            r->max_T = okv_kv_max_write(r->kv);
            if (r->max_logit_rows > r->max_T) r->max_logit_rows = r->max_T;
        }
    } else r->kv = NULL;
    if (!st) {
        r->tp = okv_threadpool_create(o->n_threads);
        if (!r->tp) st = okv_fail(err, OKV_ERR_NOMEM, "cannot create thread pool");
    }
    if (!st) st = okv_runner_plan(r, err);
    if (st) { okv_runner_free(r); return st; }
    *out = r;
    return OKV_OK;
}

void okv_runner_free(okv_runner *r) {
    if (!r) return;
    if (r->kv) okv_registry_release(r->kv);
    okv_threadpool_free(r->tp);
    free(r->arena);
    free(r->offset);
    free(r->key);
    free(r->gather_q);
    free(r->gather_out);
    free(r->gather_pos);
    free(r->gather_idx);
    free(r->rope_cs);
    free(r);
}

const okv_program *okv_runner_program(const okv_runner *r) { return r->p; }

const char *okv_runner_cache_key(const okv_runner *r) { return r->key; }

/* Fixed when the key was installed, so no lock is needed. */
int okv_runner_capacity(const okv_runner *r) { return okv_kv_capacity(r->kv); }

const char *okv_runner_kernels(const okv_runner *r) { return okv_kernels_describe(r->k); }

const char *okv_runner_kernels_ran(const okv_runner *r, char *buf, size_t n) { return okv_kernels_ran(r->tp, buf, n); }

int okv_runner_profile(const okv_runner *r, okv_op_profile *out, int max) {
    for (int k = 0; k < PROF_KINDS && k < max; k++) {
        const char *name = k < OKV_OP_COUNT ? okv_op_name((okv_op)k)
                           : k == PROF_LM_HEAD ? "lm_head" : k == PROF_KV_WRITE ? "kv_write"
                           : k == PROF_ADD_RMSNORM ? "add_rmsnorm" : "step";
        out[k] = (okv_op_profile){name, r->prof_calls[k], r->prof_sec[k], r->prof_disp[k]};
    }
    return PROF_KINDS;
}

void okv_runner_profile_reset(okv_runner *r) {
    memset(r->prof_calls, 0, sizeof r->prof_calls);
    memset(r->prof_disp, 0, sizeof r->prof_disp);
    memset(r->prof_sec, 0, sizeof r->prof_sec);
}

