/* okv_runtime_internal.h — what the runtime's files share and the public
 * API hides: the program behind the opaque okv_program handle, and the
 * runner's state, which okv_runner.c creates, okv_plan.c sizes once and
 * okv_step.c uses at every step. */
#ifndef OKV_RUNTIME_INTERNAL_H
#define OKV_RUNTIME_INTERNAL_H

#include "offkv.h"
#include "okv_cache.h"
#include "okv_format.h"
#include "okv_kernels.h"

struct okv_program {
    okv_program_file *pf;
    int n_x8; /* block matrices packed x8 at open (okv_format_pack_x8) */
};

/* profile kinds beyond the graph's ops ("step" last) */
enum { PROF_LM_HEAD = OKV_OP_COUNT, PROF_KV_WRITE, PROF_ADD_RMSNORM, PROF_STEP, PROF_KINDS };
/* rope angle tables kept per step: one per distinct inv_freq (Gemma has 2) */
enum { ROPE_TABLES = 4 };

struct okv_runner {
    const okv_program *p;
    okv_kv *kv;
    char *key;            /* the cache key it was created for (copy) */
    okv_threadpool *tp;
    const okv_kernels *k;
    bool ref_attn;
    int max_T;            /* largest step: the program's prefill_chunk_size, or the caches' smaller max_step */
    int max_logit_rows;   /* largest number of logit rows a step may ask for */
    float *arena;
    size_t *offset;       /* [n_values] float offset of each value in the arena */
    /* batched steps: rows of one sequence gathered for its attention call */
    float *gather_q, *gather_out;   /* [max_T, widest attention q / output] */
    int32_t *gather_pos, *gather_idx; /* [max_T] */
    void (*matmul_input)(void *ctx, const char *weight, const float *x, int rows, int K); /* okv_runner_options */
    void *matmul_input_ctx;
    /* row-parallel ops and run-time fusions (OKV_STEP_FUSE, see run_rows) */
    int fuse;                 /* 0 off (serial, node by node), 1 on, 2 on for every step of >= 2 rows */
    float *rope_cs;           /* ROPE_TABLES x [max_T, rope_half, 2] angle tables of this step */
    int rope_half;
    int rope_tensor[ROPE_TABLES]; /* inv_freq tensor of each table, -1 = not computed this step */
    int rope_next;            /* the table replaced next */
    /* okv_runner_options.profile: per kind (ops, then PROF_*) */
    bool profile;
    int64_t prof_calls[PROF_KINDS], prof_disp[PROF_KINDS];
    double prof_sec[PROF_KINDS];
    double prof_write_sec;   /* the K/V write inside the attention node just run */
    int64_t prof_write_disp;
};

/* Plans the runner's memory for the program's largest step (okv_plan.c):
 * the activation arena with the kernels' workspace, the batched steps'
 * gather scratch (cell keys) and the rope tables. r->p, r->kv, r->tp,
 * r->max_T and r->max_logit_rows must be set. */
okv_status okv_runner_plan(okv_runner *r, okv_error *err);

#endif
