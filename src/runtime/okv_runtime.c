/* okv_runtime.c — loading programs, binding them to caches by key, and
 * executing steps.
 *
 * A runner owns everything a step needs besides the weights and caches: a
 * thread pool, the kernel table chosen for this CPU, and one activation
 * arena planned once for the program's largest step (every graph value gets
 * a fixed offset; values whose lifetimes do not overlap share storage).
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
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "offkv.h"
#include "okv_cache.h"
#include "okv_common.h"
#include "okv_format.h"
#include "okv_describe.h"
#include "okv_kernels.h"
#include "okv_op_params.h"
#include "okv_quant.h"
#include "okv_runtime_internal.h"

void okv_program_options_default(okv_program_options *o) {
    memset(o, 0, sizeof *o);
    o->weights = OKV_WEIGHTS_AUTO;
}

okv_status okv_program_open(const char *path, okv_program **out, okv_error *err) {
    okv_program_options o;
    okv_program_options_default(&o);
    return okv_program_open_with(path, &o, out, err);
}

okv_status okv_program_open_with(const char *path, const okv_program_options *o, okv_program **out, okv_error *err) {
    if (o->weights != OKV_WEIGHTS_AUTO && o->weights != OKV_WEIGHTS_MAPPED && o->weights != OKV_WEIGHTS_HUGE_PAGES)
        return okv_fail(err, OKV_ERR_INVALID, "program options: weights must be AUTO, MAPPED or HUGE_PAGES (got %d)",
                        (int)o->weights);
    okv_program *p = calloc(1, sizeof *p);
    if (!p) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = okv_format_open_with(path, o->weights, &p->pf, err);
    if (st) { free(p); return st; }
    /* GGUF block matrices in the row order the default table's decode dots
     * want (x8: 8 rows interleaved, okv_qblock_x8.c). Every table runs
     * either order, so runners with other tables stay right. OKV_QB_X8=0
     * keeps the file's order (for side-by-side runs). */
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO);
    const char *x8 = getenv("OKV_QB_X8");
    if (k->matmul_qb_x8 && !(x8 && !strcmp(x8, "0"))) p->n_x8 = okv_format_pack_x8(p->pf, k->matmul_qb_x8);
    *out = p;
    return OKV_OK;
}

void okv_program_free(okv_program *p) {
    if (!p) return;
    okv_format_close(p->pf);
    free(p);
}

void okv_program_get_info(const okv_program *p, okv_program_info *info) {
    const okv_meta *m = &p->pf->meta;
    const okv_layout *l = &p->pf->layout;
    *info = (okv_program_info){m->architecture, m->dtype, m->vocab_size, m->hidden_size, m->n_layers, l->n_caches,
                               l->prefill_chunk_size, l->max_ctx_len, m->bos_id, m->eos_ids, m->n_eos,
                               p->pf->weights_memory, p->n_x8};
}

const void *okv_program_blob(const okv_program *p, const char *name, size_t *len) {
    int t = okv_format_find_tensor(p->pf, name);
    if (t < 0 || p->pf->tensors[t].dtype != OKV_T_U8) return NULL;
    if (len) *len = p->pf->tensors[t].nbytes;
    return p->pf->tensors[t].data;
}

/* ---- caches by key ----------------------------------------------------------- */

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
    if (!kv->cells) return OKV_OK;
    return okv_fail(err, OKV_ERR_STATE, "%s: this cache key holds many sequences (cell pool): use the okv_seq_* verbs", verb);
}
static okv_status do_length(okv_kv *kv, void *arg, okv_error *err) {
    if (kv->cells) return single_only(kv, "cache length", err);
    *(int *)arg = okv_kv_length(kv);
    return OKV_OK;
}
static okv_status do_rewind(okv_kv *kv, void *arg, okv_error *err) { return okv_kv_rewind(kv, *(int *)arg, err); }
static okv_status do_clear(okv_kv *kv, void *arg, okv_error *err) {
    if (kv->cells) return single_only(kv, "cache clear", err);
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

/* ---- runner: memory plan --------------------------------------------------------- */

/* profile kinds beyond the graph's ops ("step" last) */
enum { PROF_LM_HEAD = OKV_OP_COUNT, PROF_KV_WRITE, PROF_ADD_RMSNORM, PROF_STEP, PROF_KINDS };
/* floats of work below which a row-wise op runs inline (see run_rows) */
#define ROWS_PAR_MIN 32768
/* rope angle tables kept per step: one per distinct inv_freq (Gemma has 2) */
enum { ROPE_TABLES = 4 };

struct okv_runner {
    const okv_program *p;
    okv_kv *kv;
    char *key;            /* the cache key it was created for (copy) */
    okv_threadpool *tp;
    const okv_kernels *k;
    bool ref_attn;
    int max_T;            /* largest step (the program's prefill_chunk_size) */
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

void okv_runner_options_default(okv_runner_options *o) { memset(o, 0, sizeof *o); }

/* The smallest free buffer that fits, else the largest free one (it will
 * grow), else -1. */
static int pick_buffer(const size_t *size, const bool *busy, int n, size_t need) {
    int fit = -1, largest = -1;
    for (int b = 0; b < n; b++) {
        if (busy[b]) continue;
        if (size[b] >= need && (fit < 0 || size[b] < size[fit])) fit = b;
        if (largest < 0 || size[b] > size[largest]) largest = b;
    }
    return fit >= 0 ? fit : largest;
}

/* Sizes are products and sums of untrusted widths and the chunk size: every
 * one is checked (no wrap), and the arena must stay under this many bytes. */
#define ARENA_MAX_BYTES ((size_t)1 << 46)

static okv_status arena_too_large(const okv_runner *r, int v, int rows, okv_error *err) {
    const okv_value *val = &r->p->pf->graph.values[v];
    return okv_fail(err, OKV_ERR_NOMEM,
                    "activations too large: value %d is [%d rows x %d] floats (rows = %s %d), and the arena for all "
                    "values live at once would exceed %zu bytes; export with a smaller prefill chunk size",
                    v, rows, val->width, val->logit_rows ? "max logit rows" : "prefill_chunk_size", rows, ARENA_MAX_BYTES);
}

/* Bytes of kernel scratch the largest step needs: every matmul and attention
 * node at its largest row count, on this runner's pool. Planned with the
 * arena and handed to the pool as its workspace, so no kernel allocates once
 * a step is admitted (the reference attention, a debugging path, still does). */
static size_t kernel_workspace_bytes(const okv_runner *r) {
    const okv_graph *g = &r->p->pf->graph;
    int nt = okv_threadpool_size(r->tp);
    size_t most = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const okv_node *nd = &g->nodes[n];
        int rows = g->values[nd->out].logit_rows ? r->max_logit_rows : r->max_T;
        size_t b = 0;
        if (nd->op == OKV_OP_MATMUL) {
            const okv_tensor *t = &r->p->pf->tensors[nd->w[0]];
            int K = g->values[nd->in[0]].width, N = g->values[nd->out].width;
            b = t->dtype == OKV_T_Q ? okv_matmul_q_scratch_bytes(rows, K, N, &t->quant, nt)
                                    : okv_matmul_scratch_bytes(rows, K, N, (okv_dtype)t->dtype, nt);
        } else if (nd->op == OKV_OP_ATTN) {
            okv_op_attend_params ap = okv_op_attend_get(nd);
            const okv_layout *l = &r->kv->layout;
            b = okv_attend_scratch_bytes(r->max_T, ap.n_heads, l->kv_heads[ap.cache], l->head_dims[ap.cache], nt);
            size_t bd = okv_attend_det_scratch_bytes(r->max_T, ap.n_heads, l->kv_heads[ap.cache], l->head_dims[ap.cache], nt);
            if (bd > b) b = bd; /* the deterministic table's attention */
        }
        if (b > most) most = b;
    }
    return most;
}

/* Whether node nd's output may take the buffer of its input k when nd is
 * that input's last reader: GLU and RoPE over the same [rows, width], whose
 * kernels read each element before writing it, at the same place. Writing
 * in place saves the output's read for ownership and a buffer's worth of
 * cache (a pp512 GLU took 0.81x the time, ops/ops_simd.c; bench_model pp512
 * on a loaded machine, 3 + 3 alternating runs: RoPE's share of the step
 * 0.2-0.3% vs 0.5-0.8%, GLU's 1.8-2.8% vs 2.1%; decode GLU and RoPE
 * 0.8-0.9x). Add and rmsnorm are left out: runs with them in place were
 * inconclusive (decode add_rmsnorm 3x slower in 3 of 3, but the same
 * outliers showed up without it). */
static bool writes_over_input(const okv_graph *g, const okv_node *nd, int k) {
    int in = nd->in[k];
    if (in < 0) return false;
    if (nd->op != OKV_OP_GLU && nd->op != OKV_OP_ROPE) return false;
    const okv_value *a = &g->values[in], *b = &g->values[nd->out];
    return a->width == b->width && a->logit_rows == b->logit_rows;
}

/* Assigns each value a buffer; buffers are reused once every reader of the
 * value that held them has run (for writes_over_input ops: before their
 * output is placed, so it may land on that input). Sizes the arena in
 * floats, then appends the kernels' workspace. */
static okv_status plan_memory(okv_runner *r, okv_error *err) {
    const okv_graph *g = &r->p->pf->graph;
    int *last = malloc(sizeof(int) * (size_t)g->n_values);
    int *buf_of = malloc(sizeof(int) * (size_t)g->n_values);
    size_t *buf_size = calloc((size_t)g->n_values, sizeof *buf_size);
    bool *busy = calloc((size_t)g->n_values, 1);
    r->offset = calloc((size_t)g->n_values, sizeof *r->offset);
    if (!last || !buf_of || !buf_size || !busy || !r->offset) {
        free(last); free(buf_of); free(buf_size); free(busy);
        return okv_fail(err, OKV_ERR_NOMEM, "out of memory planning activations");
    }
    for (int v = 0; v < g->n_values; v++) last[v] = -1;
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < OKV_NODE_MAX_IN; k++)
            if (g->nodes[n].in[k] >= 0) last[g->nodes[n].in[k]] = n;
    last[g->output] = g->n_nodes;
    int n_bufs = 0;
    /* floats held by the buffers so far: the arena can never be smaller, so
     * stop as soon as it alone is too large */
    size_t held = 0, max_floats = ARENA_MAX_BYTES / sizeof(float);
    okv_status st = OKV_OK;
    for (int n = 0; n < g->n_nodes && !st; n++) {
        int v = g->nodes[n].out;
        int rows = g->values[v].logit_rows ? r->max_logit_rows : r->max_T;
        size_t need;
        if (__builtin_mul_overflow((size_t)g->values[v].width, (size_t)rows, &need) || need > max_floats) {
            st = arena_too_large(r, v, rows, err);
            break;
        }
        for (int k = 0; k < OKV_NODE_MAX_IN; k++)
            if (writes_over_input(g, &g->nodes[n], k) && last[g->nodes[n].in[k]] == n) busy[buf_of[g->nodes[n].in[k]]] = false;
        int best = pick_buffer(buf_size, busy, n_bufs, need);
        if (best < 0) best = n_bufs++;
        if (buf_size[best] < need) {
            held += need - buf_size[best];   /* held <= max_floats + need: cannot wrap */
            buf_size[best] = need;
            if (held > max_floats) { st = arena_too_large(r, v, rows, err); break; }
        }
        busy[best] = true;
        buf_of[v] = best;
        for (int k = 0; k < OKV_NODE_MAX_IN; k++) {
            int in = g->nodes[n].in[k];
            if (in >= 0 && last[in] == n && buf_of[in] != best) busy[buf_of[in]] = false;
        }
        if (last[v] < 0) busy[best] = false;   /* never read (should not happen) */
    }
    if (st) { free(last); free(buf_of); free(buf_size); free(busy); return st; }
    /* each buffer padded to 16 floats: total <= held + 16 * n_bufs, far from wrapping */
    size_t total = 0;
    size_t *buf_off = calloc((size_t)n_bufs + 1, sizeof *buf_off);
    for (int b = 0; buf_off && b < n_bufs; b++) { buf_off[b] = total; total += (buf_size[b] + 15) / 16 * 16; }
    for (int n = 0; buf_off && n < g->n_nodes; n++) r->offset[g->nodes[n].out] = buf_off[buf_of[g->nodes[n].out]];
    free(last); free(buf_of); free(buf_size); free(busy);
    if (!buf_off) return okv_fail(err, OKV_ERR_NOMEM, "out of memory planning activations");
    free(buf_off);
    size_t act_bytes = (total * sizeof(float) + 63) / 64 * 64 + 64, ws = kernel_workspace_bytes(r);
    if (ws > ARENA_MAX_BYTES || act_bytes + ws > ARENA_MAX_BYTES)
        return okv_fail(err, OKV_ERR_NOMEM, "kernel scratch too large (%zu bytes); export with a smaller --prefill-chunk-size", ws);
    r->arena = aligned_alloc(64, act_bytes + (ws + 63) / 64 * 64);
    if (!r->arena) return okv_fail(err, OKV_ERR_NOMEM, "out of memory for activations (%zu floats + %zu bytes of kernel scratch)", total, ws);
    okv_threadpool_set_workspace(r->tp, (char *)r->arena + act_bytes, ws);
    return OKV_OK;
}

/* Scratch for batched steps whose sequences' rows are interleaved. */
static okv_status plan_gather(okv_runner *r, okv_error *err) {
    const okv_graph *g = &r->p->pf->graph;
    size_t wq = 1, wo = 1;
    for (int n = 0; n < g->n_nodes; n++) {
        const okv_node *nd = &g->nodes[n];
        if (nd->op != OKV_OP_ATTN) continue;
        if ((size_t)g->values[nd->in[0]].width > wq) wq = (size_t)g->values[nd->in[0]].width;
        if ((size_t)g->values[nd->out].width > wo) wo = (size_t)g->values[nd->out].width;
    }
    r->gather_q = malloc(sizeof(float) * wq * (size_t)r->max_T);
    r->gather_out = malloc(sizeof(float) * wo * (size_t)r->max_T);
    r->gather_pos = malloc(sizeof(int32_t) * (size_t)r->max_T);
    r->gather_idx = malloc(sizeof(int32_t) * (size_t)r->max_T);
    if (!r->gather_q || !r->gather_out || !r->gather_pos || !r->gather_idx)
        return okv_fail(err, OKV_ERR_NOMEM, "out of memory for batched-step scratch");
    return OKV_OK;
}

/* Room for the step's rope angles: ROPE_TABLES x [max_T, widest half, 2]. */
static okv_status plan_rope_tables(okv_runner *r, okv_error *err) {
    const okv_graph *g = &r->p->pf->graph;
    for (int n = 0; n < g->n_nodes; n++)
        if (g->nodes[n].op == OKV_OP_ROPE && okv_op_rope_get(&g->nodes[n]).head_dim / 2 > r->rope_half)
            r->rope_half = okv_op_rope_get(&g->nodes[n]).head_dim / 2;
    if (!r->rope_half) return OKV_OK;
    r->rope_cs = malloc(sizeof(float) * ROPE_TABLES * (size_t)r->max_T * (size_t)r->rope_half * 2);
    return r->rope_cs ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory for rope tables");
}

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
        const okv_layout *a = &r->kv->layout, *b = &p->pf->layout;
        bool same = a->n_caches == b->n_caches;
        for (int c = 0; same && c < a->n_caches; c++)
            same = a->kv_heads[c] == b->kv_heads[c] && a->head_dims[c] == b->head_dims[c];
        if (!same || r->kv->seq.max_write < r->max_T)
            st = okv_fail(err, OKV_ERR_INVALID, "cache key '%s' was built for a different layout than this program", cache_key);
    } else r->kv = NULL;
    if (!st) {
        r->tp = okv_threadpool_create(o->n_threads);
        if (!r->tp) st = okv_fail(err, OKV_ERR_NOMEM, "cannot create thread pool");
    }
    if (!st) st = plan_memory(r, err);
    if (!st && r->kv->cells) st = plan_gather(r, err);
    if (!st) st = plan_rope_tables(r, err);
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
int okv_runner_capacity(const okv_runner *r) { return r->kv->seq.capacity; }

const char *okv_runner_kernels(const okv_runner *r) { return okv_kernels_describe(r->k); }

const char *okv_runner_kernels_ran(const okv_runner *r, char *buf, size_t n) { return okv_kernels_ran(r->tp, buf, n); }

/* ---- runner: executing a step ------------------------------------------------------- */

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

/* Rows of the batch that belong to its u-th distinct sequence: [t0, t0+n)
 * if they are adjacent (returns true), else gathered into idx. */
static bool rows_of_seq(const okv_kv *kv, int T, int u, int *t0, int *n, int32_t *idx) {
    const int32_t *row_uniq = kv->cells->row_uniq;
    int first = -1, last = -1, k = 0;
    for (int t = 0; t < T; t++)
        if (row_uniq[t] == u) {
            if (first < 0) first = t;
            last = t;
            idx[k++] = t;
        }
    *t0 = first;
    *n = k;
    return last - first + 1 == k;
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
    const okv_cache *c = &kv->caches[p->cache];
    okv_attn_kv view = {c->k, c->v, c->k, c->v, c->k_dtype, c->v_dtype, c->kv_heads, c->head_dim};
    const okv_run *w;
    int n_w;
    okv_kv_cell_writes(kv, p->cache, &w, &n_w);
    if (p->writes_cache) write_kv(s, &view, w, n_w, val(s, nd->in[1]), val(s, nd->in[2]));
    int H = p->n_heads, wq = width(s, nd->in[0]), wo = width(s, nd->out);
    const float *q = val(s, nd->in[0]);
    float *out = val(s, nd->out);
    for (int u = 0; u < kv->cells->n_uniq; u++) {
        int t0, n;
        const okv_run *runs;
        int n_runs;
        int32_t window;
        okv_kv_cell_reads(kv, p->cache, u, &runs, &n_runs, &window);
        bool adjacent = rows_of_seq(kv, s->T, u, &t0, &n, r->gather_idx);
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
    okv_kv *kv = s->r->kv;
    const okv_cache *c = &kv->caches[p.cache];
    const okv_step_plan *plan = &kv->plans[p.cache];
    okv_attn_kv view = {c->k, c->v, c->k, c->v, c->k_dtype, c->v_dtype, c->kv_heads, c->head_dim};
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
        return okv_fail(err, OKV_ERR_INVALID, "step of %d tokens: must be 1..%d (the program's prefill_chunk_size)", T, r->max_T);
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

/* ---- inspect ------------------------------------------------------------------------ */

okv_status okv_program_describe(const okv_program *p, bool json, char **out, okv_error *err) {
    cJSON *doc = okv_describe_program_doc(p->pf);
    *out = doc ? okv_describe_render(doc, json) : NULL;
    cJSON_Delete(doc);
    return *out ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory describing the program");
}
