/* okv_step.c — executing steps (okv_runner_step, okv_runner_step_batch).
 *
 * A step is: validate ids -> okv_kv_begin_step (validates positions and
 * capacity, plans cache runs; on failure nothing changed) -> run the nodes in
 * order -> okv_kv_commit_step. Nothing after begin_step can fail, which is
 * what makes a step transactional.
 *
 * A batched step (okv_runner_step_batch, cell-pool keys) is the same
 * pipeline over T tokens of several sequences: every node but attention is
 * row-wise, so only attention looks at which sequence a row belongs to;
 * okv_kv_begin_batch is the validation point, and after it nothing fails.
 *
 * Quantized weights (okv_quant.h) need no step-time decisions: a MATMUL
 * whose weight is quantized calls the table's matmul_q (the LM head too),
 * an EMBED over a quantized table dequantizes only the rows it looks up. */
#include <stdlib.h>
#include <time.h>

#include "okv_common.h"
#include "okv_op_params.h"
#include "okv_quant.h"
#include "okv_runtime_internal.h"

/* floats of work below which a row-wise op runs inline (see run_rows) */
#define ROWS_PAR_MIN 32768

typedef struct step_ctx {
    okv_runner *r;
    const int32_t *ids, *pos;
    int T, R;             /* step rows, logit rows */
    okv_logits_rows rows;
    const int32_t *seqs;  /* batched step: [T] sequence of each row, else NULL */
    const int32_t *pick;  /* batched step: [R] rows whose logits are wanted */
} step_ctx;

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *val(step_ctx *s, int v) { return v < 0 ? NULL : s->r->arena + s->r->offset[v]; }
static const okv_tensor *tensor(step_ctx *s, int t) { return t < 0 ? NULL : &s->r->p->pf->tensors[t]; }
static const float *tensor_f32(step_ctx *s, int t) { return t < 0 ? NULL : (const float *)tensor(s, t)->data; }
static int rows_of(step_ctx *s, int v) { return s->r->p->pf->graph.values[v].logit_rows ? s->R : s->T; }
static int width(step_ctx *s, int v) { return s->r->p->pf->graph.values[v].width; }

/* Rows of the batch that belong to its u-th distinct sequence (row_seq:
 * okv_kv_batch_seqs): [t0, t0+n) if they are adjacent (returns true), else
 * gathered into idx. */
static bool rows_of_seq(const int32_t *row_seq, int T, int u, int *t0, int *n, int32_t *idx) {
    int first = -1, last = -1, k = 0;
    for (int t = 0; t < T; t++)
        if (row_seq[t] == u) {
            if (first < 0) first = t;
            last = t;
            idx[k++] = t;
        }
    *t0 = first;
    *n = k;
    return last - first + 1 == k;
}

/* Cache c's pools as the attention kernels take them (read and write
 * pointers to the same pools). */
static okv_attn_kv attn_view(const okv_kv *kv, int c) {
    okv_kv_pools pl = okv_kv_pools_of(kv, c);
    return (okv_attn_kv){.k = pl.k, .v = pl.v, .k_w = pl.k, .v_w = pl.v, .k_dtype = pl.k_dtype,
                         .v_dtype = pl.v_dtype, .kv_heads = pl.kv_heads, .head_dim = pl.head_dim};
}

/* The step's K and V rows into the cache at the write runs: on two threads
 * when the step is long (K and V are independent, each is written as
 * okv_attend_write would), else inline. */
typedef struct kv_write_job {
    const okv_attn_kv *view;
    const okv_run *runs;
    int n_runs;
    const float *k, *v;
} kv_write_job;

static void kv_write_task(void *ctx, int task, int thread) {
    (void)thread;
    kv_write_job *j = ctx;
    okv_attend_write_side(j->view, j->runs, j->n_runs, task ? j->v : j->k, task == 1);
}

static void write_kv(step_ctx *s, const okv_attn_kv *view, const okv_run *runs, int n_runs, const float *k,
                     const float *v) {
    okv_runner *r = s->r;
    double t0 = r->profile ? wall_now() : 0;
    size_t floats = (size_t)s->T * (size_t)view->kv_heads * (size_t)view->head_dim;
    if (r->fuse && (r->fuse == 2 ? s->T >= 2 : floats >= ROWS_PAR_MIN)) {
        kv_write_job j = {view, runs, n_runs, k, v};
        okv_threadpool_run(r->tp, 2, kv_write_task, &j);
    } else okv_attend_write(view, runs, n_runs, k, v);
    if (r->profile) r->prof_write_sec += wall_now() - t0;
}

/* A batched step: the step's K/V rows go to their cells, then each sequence
 * of the batch attends over its own read runs (the cache layer resolved
 * owners and positions into runs), with the single-sequence kernel. Rows of
 * a sequence that are not adjacent in the batch are gathered into scratch. */
static void run_attention_cells(step_ctx *s, const okv_node *nd, const okv_op_attend_params *p) {
    okv_runner *r = s->r;
    okv_kv *kv = r->kv;
    okv_attn_kv view = attn_view(kv, p->cache);
    const okv_run *w;
    int n_w;
    okv_kv_cell_writes(kv, p->cache, &w, &n_w);
    if (p->writes_cache) write_kv(s, &view, w, n_w, val(s, nd->in[1]), val(s, nd->in[2]));
    int H = p->n_heads, wq = width(s, nd->in[0]), wo = width(s, nd->out);
    const float *q = val(s, nd->in[0]);
    float *out = val(s, nd->out);
    int n_seqs;
    const int32_t *row_seq;
    okv_kv_batch_seqs(kv, &n_seqs, &row_seq);
    for (int u = 0; u < n_seqs; u++) {
        int t0, n;
        const okv_run *runs;
        int n_runs;
        int32_t window;
        okv_kv_cell_reads(kv, p->cache, u, &runs, &n_runs, &window);
        bool adjacent = rows_of_seq(row_seq, s->T, u, &t0, &n, r->gather_idx);
        okv_attn_args a = {q + (size_t)t0 * wq, n, H, s->pos + t0, view, runs, n_runs, window, p->scale,
                           out + (size_t)t0 * wo, NULL};
        if (!adjacent) {
            for (int i = 0; i < n; i++) {
                memcpy(r->gather_q + (size_t)i * wq, q + (size_t)r->gather_idx[i] * wq, sizeof(float) * (size_t)wq);
                r->gather_pos[i] = s->pos[r->gather_idx[i]];
            }
            a.q = r->gather_q;
            a.positions = r->gather_pos;
            a.out = r->gather_out;
        }
        if (r->ref_attn) okv_attend_reference(&a);
        else r->k->attend(r->tp, &a);
        if (!adjacent)
            for (int i = 0; i < n; i++)
                memcpy(out + (size_t)r->gather_idx[i] * wo, r->gather_out + (size_t)i * wo, sizeof(float) * (size_t)wo);
    }
}

/* Each op reads its parameters (okv_op_params.h) into named locals first. */

static void run_attention(step_ctx *s, const okv_node *nd) {
    okv_op_attend_params p = okv_op_attend_get(nd);
    if (s->seqs) { run_attention_cells(s, nd, &p); return; }
    const okv_step_plan *plan = okv_kv_plan(s->r->kv, p.cache);
    okv_attn_kv view = attn_view(s->r->kv, p.cache);
    if (p.writes_cache) write_kv(s, &view, plan->write, plan->n_write, val(s, nd->in[1]), val(s, nd->in[2]));
    okv_attn_args a = {val(s, nd->in[0]), s->T, p.n_heads, s->pos, view, plan->read, plan->n_read,
                       plan->window, p.scale, val(s, nd->out), NULL};
    if (s->r->ref_attn) okv_attend_reference(&a);
    else s->r->k->attend(s->r->tp, &a);
}

static void select_rows(step_ctx *s, const okv_node *nd) {
    int w = width(s, nd->out);
    const float *in = val(s, nd->in[0]);
    if (s->pick)
        for (int r = 0; r < s->R; r++)
            memcpy(val(s, nd->out) + (size_t)r * w, in + (size_t)s->pick[r] * w, sizeof(float) * (size_t)w);
    else if (s->rows == OKV_LOGITS_ALL) memcpy(val(s, nd->out), in, sizeof(float) * (size_t)w * (size_t)s->T);
    else if (s->rows == OKV_LOGITS_LAST) memcpy(val(s, nd->out), in + (size_t)(s->T - 1) * w, sizeof(float) * (size_t)w);
}

/* y[t] = E[ids[t]] * scale for a quantized table E [vocab, width]: only the
 * rows the step needs are dequantized. */
static void embed_quant(float *y, const int32_t *ids, int T, const okv_tensor *E, float scale) {
    for (int t = 0; t < T; t++) {
        float *yt = y + (size_t)t * (size_t)E->shape[1];
        okv_dequant_row(&E->quant, E->data, E->shape[0], E->shape[1], ids[t], yt);
        if (scale != 1.0f)
            for (int64_t i = 0; i < E->shape[1]; i++) yt[i] *= scale;
    }
}

static void run_matmul(step_ctx *s, const okv_node *nd, float *out, const float *a, int rows, int N) {
    const okv_kernels *k = s->r->k;
    const okv_tensor *t = tensor(s, nd->w[0]);
    int K = width(s, nd->in[0]);
    if (s->r->matmul_input) s->r->matmul_input(s->r->matmul_input_ctx, t->name, a, rows, K);
    if (t->dtype == OKV_T_Q)
        (t->quant.block != OKV_QB_NONE ? k->matmul_qb : k->matmul_q)(s->r->tp, out, a, rows, K, t->data, &t->quant, N,
                                                                      tensor_f32(s, nd->w[1]));
    else k->matmul(s->r->tp, out, a, rows, K, t->data, (okv_dtype)t->dtype, N, tensor_f32(s, nd->w[1]));
}

/* ---- row-wise ops on row blocks ------------------------------------------------------
 * Every op but matmul, attention and select_rows computes each row from the
 * same rows of its inputs, so a long step runs them over row blocks on the
 * pool (a pp512 step spent ~5% of its time in them on one thread while the
 * other slept), and an add followed by the rmsnorm of its sum is one pass
 * per block (the sum's rows are normed while still in cache). Each row is
 * computed by the same code whatever the blocks, so results are bit for bit
 * those of one serial call (GLU splits only at multiples of 64 elements,
 * keeping every element in the SIMD lanes or the tail it had).
 * A decode step's rows are too few to pay for a pool loop: below
 * ROWS_PAR_MIN floats the op runs inline, as before. */

typedef void (*rows_fn)(step_ctx *s, const okv_node *nd, int r0, int r1);

typedef struct rows_job {
    step_ctx *s;
    const okv_node *nd;
    rows_fn fn;
    int rows, per_task;
} rows_job;

static void rows_task(void *ctx, int task, int thread) {
    (void)thread;
    rows_job *j = ctx;
    int r0 = task * j->per_task, r1 = r0 + j->per_task < j->rows ? r0 + j->per_task : j->rows;
    j->fn(j->s, j->nd, r0, r1);
}

/* fn over rows [0, rows) of nd, split into blocks on the pool when the
 * step is long enough (floats_per_row: the work of one row in floats). */
static void run_rows(step_ctx *s, const okv_node *nd, rows_fn fn, int rows, size_t floats_per_row) {
    okv_runner *r = s->r;
    int nt = okv_threadpool_size(r->tp);
    bool split = r->fuse && nt > 1 && rows >= 2 && (r->fuse == 2 || (size_t)rows * floats_per_row >= ROWS_PAR_MIN);
    if (!split) { fn(s, nd, 0, rows); return; }
    int tasks = rows < 4 * nt ? rows : 4 * nt;
    rows_job j = {s, nd, fn, rows, (rows + tasks - 1) / tasks};
    okv_threadpool_run(r->tp, (rows + j.per_task - 1) / j.per_task, rows_task, &j);
}

#define ROW(p, v, r0) ((p) + (size_t)(r0) * (size_t)width(s, v))

static void rmsnorm_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    okv_op_rmsnorm_params p = okv_op_rmsnorm_get(nd);
    s->r->k->rmsnorm(ROW(val(s, nd->out), nd->out, r0), ROW(val(s, nd->in[0]), nd->in[0], r0), r1 - r0,
                     width(s, nd->out), p.group, tensor_f32(s, nd->w[0]), p.eps);
}

/* The add of nd, then the rmsnorm of nd + 1 over its sum, one pass per row
 * (the table's add_rmsnorm: the same bits as the two ops one after the
 * other; run_graph checked that nd + 1 reads nd's output). */
static void add_rmsnorm_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    const okv_node *nn = nd + 1;
    okv_op_rmsnorm_params p = okv_op_rmsnorm_get(nn);
    s->r->k->add_rmsnorm(ROW(val(s, nn->out), nn->out, r0), ROW(val(s, nd->out), nd->out, r0),
                         ROW(val(s, nd->in[0]), nd->in[0], r0), ROW(val(s, nd->in[1]), nd->in[1], r0), r1 - r0,
                         width(s, nn->out), p.group, tensor_f32(s, nn->w[0]), p.eps);
}

static void add_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    okv_add(ROW(val(s, nd->out), nd->out, r0), ROW(val(s, nd->in[0]), nd->in[0], r0),
            ROW(val(s, nd->in[1]), nd->in[1], r0), (size_t)(r1 - r0) * (size_t)width(s, nd->out));
}

static void mul_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    float *out = ROW(val(s, nd->out), nd->out, r0);
    const float *a = ROW(val(s, nd->in[0]), nd->in[0], r0), *b = ROW(val(s, nd->in[1]), nd->in[1], r0);
    size_t n = (size_t)(r1 - r0) * (size_t)width(s, nd->out);
    for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

static void glu_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    s->r->k->glu(ROW(val(s, nd->out), nd->out, r0), ROW(val(s, nd->in[0]), nd->in[0], r0),
                 ROW(val(s, nd->in[1]), nd->in[1], r0), (size_t)(r1 - r0) * (size_t)width(s, nd->out),
                 (okv_act)okv_op_glu_get(nd).act);
}

static void scale_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    okv_op_scale_params p = okv_op_scale_get(nd);
    okv_scale(ROW(val(s, nd->out), nd->out, r0), ROW(val(s, nd->in[0]), nd->in[0], r0),
              (size_t)(r1 - r0) * (size_t)width(s, nd->out),
              p.factor * (nd->w[0] >= 0 ? tensor_f32(s, nd->w[0])[0] : 1.0f));
}

static void softcap_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    size_t n = (size_t)(r1 - r0) * (size_t)width(s, nd->out);
    float *out = ROW(val(s, nd->out), nd->out, r0);
    memcpy(out, ROW(val(s, nd->in[0]), nd->in[0], r0), n * sizeof *out);
    okv_softcap(out, n, okv_op_softcap_get(nd).cap);
}

/* out[r] = columns [first, first + w) of in[r] */
static void slice_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    okv_op_slice_params p = okv_op_slice_get(nd);
    int w = width(s, nd->out), win = width(s, nd->in[0]);
    const float *in = val(s, nd->in[0]);
    float *out = val(s, nd->out);
    for (int r = r0; r < r1; r++) memcpy(out + (size_t)r * w, in + (size_t)r * win + p.first, sizeof(float) * (size_t)w);
}

static void embed_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    okv_op_embed_params p = okv_op_embed_get(nd);
    const okv_tensor *t = tensor(s, nd->w[0]);
    int w = width(s, nd->out);
    float *out = ROW(val(s, nd->out), nd->out, r0);
    if (t->dtype == OKV_T_Q) embed_quant(out, s->ids + r0, r1 - r0, t, p.scale);
    else okv_embed(out, s->ids + r0, r1 - r0, t->data, (okv_dtype)t->dtype, w, p.scale);
}

/* The step's angle table for nd's inv_freq tensor (computed on first use). */
static const float *rope_table(step_ctx *s, const okv_node *nd) {
    okv_runner *r = s->r;
    for (int i = 0; i < ROPE_TABLES; i++)
        if (r->rope_tensor[i] == nd->w[0]) return r->rope_cs + (size_t)i * r->max_T * r->rope_half * 2;
    return NULL;
}

static void rope_angle_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    okv_runner *r = s->r;
    int half = okv_op_rope_get(nd).head_dim / 2;
    float *cs = r->rope_cs + (size_t)r->rope_next * r->max_T * r->rope_half * 2;
    okv_rope_angles(cs + (size_t)r0 * half * 2, r1 - r0, half, s->pos + r0, tensor_f32(s, nd->w[0]));
}

static void rope_rows(step_ctx *s, const okv_node *nd, int r0, int r1) {
    okv_op_rope_params p = okv_op_rope_get(nd);
    s->r->k->rope_apply(ROW(val(s, nd->out), nd->out, r0), ROW(val(s, nd->in[0]), nd->in[0], r0), r1 - r0, p.n_heads,
                        p.head_dim, rope_table(s, nd) + (size_t)r0 * (p.head_dim / 2) * 2);
}

static void run_rope(step_ctx *s, const okv_node *nd, int rows, int w) {
    okv_runner *r = s->r;
    okv_op_rope_params p = okv_op_rope_get(nd);
    if (!r->fuse) { /* the unfused reference: copy, rotate in place */
        float *out = val(s, nd->out), *in = val(s, nd->in[0]);
        if (out != in) memcpy(out, in, (size_t)rows * (size_t)w * sizeof *out);
        okv_rope(out, rows, p.n_heads, p.head_dim, s->pos, tensor_f32(s, nd->w[0]));
        return;
    }
    if (!rope_table(s, nd)) {
        r->rope_tensor[r->rope_next] = -1;
        run_rows(s, nd, rope_angle_rows, rows, (size_t)p.head_dim * 8); /* cos + sin: ~16 floats of work each */
        r->rope_tensor[r->rope_next] = nd->w[0];
        r->rope_next = (r->rope_next + 1) % ROPE_TABLES;
    }
    run_rows(s, nd, rope_rows, rows, (size_t)w);
}

static void run_node(step_ctx *s, const okv_node *nd) {
    int rows = rows_of(s, nd->out), w = width(s, nd->out);
    if (rows == 0) return;
    switch (nd->op) {
    case OKV_OP_EMBED: run_rows(s, nd, embed_rows, rows, (size_t)w); break;
    case OKV_OP_RMSNORM: run_rows(s, nd, rmsnorm_rows, rows, (size_t)w); break;
    case OKV_OP_MATMUL: run_matmul(s, nd, val(s, nd->out), val(s, nd->in[0]), rows, w); break;
    case OKV_OP_ROPE: run_rope(s, nd, rows, w); break;
    case OKV_OP_ATTN: run_attention(s, nd); break;
    case OKV_OP_GLU:
        if (w % 64) glu_rows(s, nd, 0, rows);
        else run_rows(s, nd, glu_rows, rows, (size_t)w * 4);
        break;
    case OKV_OP_ADD: run_rows(s, nd, add_rows, rows, (size_t)w); break;
    case OKV_OP_MUL: run_rows(s, nd, mul_rows, rows, (size_t)w); break;
    case OKV_OP_SCALE: run_rows(s, nd, scale_rows, rows, (size_t)w); break;
    case OKV_OP_SOFTCAP: run_rows(s, nd, softcap_rows, rows, (size_t)w * 8); break;
    case OKV_OP_SLICE: run_rows(s, nd, slice_rows, rows, (size_t)w); break;
    case OKV_OP_SELECT_ROWS: select_rows(s, nd); break;
    case OKV_OP_COUNT: break;
    }
}

/* Whether nodes[n] (an add) and nodes[n + 1] (an rmsnorm of its sum over
 * the same rows) run as one pass. */
static bool fuses_add_rmsnorm(const okv_runner *r, int n) {
    const okv_graph *g = &r->p->pf->graph;
    if (!r->fuse || n + 1 >= g->n_nodes) return false;
    const okv_node *a = &g->nodes[n], *b = &g->nodes[n + 1];
    return a->op == OKV_OP_ADD && b->op == OKV_OP_RMSNORM && b->in[0] == a->out &&
           g->values[a->out].logit_rows == g->values[b->out].logit_rows &&
           g->values[a->out].width == g->values[b->out].width;
}

/* Node n (and n + 1 when fused), timed into the runner's profile when it
 * keeps one. Returns how many nodes it ran. */
static int run_node_profiled(step_ctx *s, int n) {
    okv_runner *r = s->r;
    const okv_node *nd = &r->p->pf->graph.nodes[n];
    bool fused = fuses_add_rmsnorm(r, n);
    int rows = rows_of(s, nd->out);
    double t0 = 0;
    uint64_t d0 = 0;
    if (r->profile) { r->prof_write_sec = 0; d0 = okv_threadpool_dispatches(r->tp); t0 = wall_now(); }
    if (fused && rows > 0) run_rows(s, nd, add_rmsnorm_rows, rows, (size_t)width(s, nd->out) * 2);
    else if (!fused) run_node(s, nd);
    if (!r->profile) return fused ? 2 : 1;
    double sec = wall_now() - t0;
    int64_t disp = (int64_t)(okv_threadpool_dispatches(r->tp) - d0);
    int kind = fused ? PROF_ADD_RMSNORM
               : nd->op == OKV_OP_MATMUL && r->p->pf->graph.values[nd->out].logit_rows ? PROF_LM_HEAD : (int)nd->op;
    if (nd->op == OKV_OP_ATTN && r->prof_write_sec > 0) {
        r->prof_calls[PROF_KV_WRITE]++;
        r->prof_sec[PROF_KV_WRITE] += r->prof_write_sec;
        sec -= r->prof_write_sec;
    }
    r->prof_calls[kind]++;
    r->prof_sec[kind] += sec;
    r->prof_disp[kind] += disp;
    return fused ? 2 : 1;
}

static void run_graph(step_ctx *s) {
    const okv_graph *g = &s->r->p->pf->graph;
    for (int i = 0; i < ROPE_TABLES; i++) s->r->rope_tensor[i] = -1; /* new positions */
    for (int n = 0; n < g->n_nodes;) n += run_node_profiled(s, n);
}

/* Adds one whole step (from t0, d0) to the profile. */
static void profile_step(okv_runner *r, double t0, uint64_t d0) {
    if (!r->profile) return;
    r->prof_calls[PROF_STEP]++;
    r->prof_sec[PROF_STEP] += wall_now() - t0;
    r->prof_disp[PROF_STEP] += (int64_t)(okv_threadpool_dispatches(r->tp) - d0);
}

/* Every id must index every embedding table the graph reads. */
static okv_status check_ids(const okv_runner *r, const int32_t *ids, int T, okv_error *err) {
    const okv_program_file *pf = r->p->pf;
    for (int n = 0; n < pf->graph.n_nodes; n++) {
        const okv_node *nd = &pf->graph.nodes[n];
        if (nd->op != OKV_OP_EMBED) continue;
        int64_t rows = pf->tensors[nd->w[0]].shape[0];
        for (int t = 0; t < T; t++)
            if (ids[t] < 0 || ids[t] >= rows)
                return okv_fail(err, OKV_ERR_INVALID, "token id %d at step index %d is outside the vocabulary [0, %lld)",
                                ids[t], t, (long long)rows);
    }
    return OKV_OK;
}

okv_status okv_runner_step(okv_runner *r, const int32_t *ids, const int32_t *positions, int T, okv_logits_rows rows,
                           float *logits, okv_error *err) {
    if (T < 1 || T > r->max_T)
        return okv_fail(err, OKV_ERR_INVALID, "step of %d tokens: must be 1..%d (the step size: prefill_chunk_size, or the caches' max_step)", T, r->max_T);
    if (rows == OKV_LOGITS_ALL && T > r->max_logit_rows)
        return okv_fail(err, OKV_ERR_INVALID, "step of %d tokens asks for all logit rows, but this runner was created for at "
                        "most %d (okv_runner_options.max_logit_rows)", T, r->max_logit_rows);
    double t0 = r->profile ? wall_now() : 0;
    uint64_t d0 = r->profile ? okv_threadpool_dispatches(r->tp) : 0;
    okv_status st = check_ids(r, ids, T, err);
    if (!st) st = okv_kv_begin_step(r->kv, positions, T, err);
    if (st) return st;
    step_ctx s = {r, ids, positions, T, rows == OKV_LOGITS_ALL ? T : rows == OKV_LOGITS_LAST ? 1 : 0, rows, NULL, NULL};
    const okv_graph *g = &r->p->pf->graph;
    run_graph(&s);
    okv_kv_commit_step(r->kv);
    profile_step(r, t0, d0);
    if (logits && s.R) memcpy(logits, val(&s, g->output), sizeof(float) * (size_t)s.R * (size_t)width(&s, g->output));
    return OKV_OK;
}

okv_status okv_runner_step_batch(okv_runner *r, const int32_t *ids, const int32_t *seqs, const int32_t *positions, int T,
                                 const int32_t *rows, int n_rows, float *logits, okv_error *err) {
    if (T < 1 || T > r->max_T)
        return okv_fail(err, OKV_ERR_INVALID, "batched step of %d tokens: must be 1..%d (the program's prefill_chunk_size)",
                        T, r->max_T);
    if (n_rows < 0 || n_rows > r->max_logit_rows || (n_rows > 0 && !rows))
        return okv_fail(err, OKV_ERR_INVALID, "batched step asks for %d logit rows: must be 0..%d "
                        "(okv_runner_options.max_logit_rows) with a rows array", n_rows, r->max_logit_rows);
    for (int i = 0; i < n_rows; i++)
        if (rows[i] < 0 || rows[i] >= T)
            return okv_fail(err, OKV_ERR_INVALID, "batched step: rows[%d] = %d is not a row of the %d-token batch", i,
                            rows[i], T);
    double t0 = r->profile ? wall_now() : 0;
    uint64_t d0 = r->profile ? okv_threadpool_dispatches(r->tp) : 0;
    okv_status st = check_ids(r, ids, T, err);
    if (!st) st = okv_kv_begin_batch(r->kv, seqs, positions, T, err);
    if (st) return st;
    step_ctx s = {r, ids, positions, T, n_rows, OKV_LOGITS_ALL, seqs, rows};
    const okv_graph *g = &r->p->pf->graph;
    run_graph(&s);
    okv_kv_commit_step(r->kv);
    profile_step(r, t0, d0);
    if (logits && s.R) memcpy(logits, val(&s, g->output), sizeof(float) * (size_t)s.R * (size_t)width(&s, g->output));
    return OKV_OK;
}
