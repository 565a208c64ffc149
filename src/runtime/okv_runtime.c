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

#include "offkv.h"
#include "okv_cache.h"
#include "okv_common.h"
#include "okv_format.h"
#include "okv_describe.h"
#include "okv_kernels.h"
#include "okv_op_params.h"
#include "okv_quant.h"
#include "okv_runtime_internal.h"

okv_status okv_program_open(const char *path, okv_program **out, okv_error *err) {
    okv_program *p = calloc(1, sizeof *p);
    if (!p) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = okv_format_open(path, &p->pf, err);
    if (st) { free(p); return st; }
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
                               l->prefill_chunk_size, l->max_ctx_len, m->bos_id, m->eos_ids, m->n_eos};
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
    o->storage_dtype = OKV_F32;
}

okv_status okv_cache_install(const char *key, const okv_program *p, const okv_cache_options *o, okv_error *err) {
    okv_cache_options d;
    if (!o) { okv_cache_options_default(&d); o = &d; }
    okv_kv_options ko;
    okv_kv_options_default(&ko);
    ko.storage_dtype = o->storage_dtype;
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

/* Assigns each value a buffer; buffers are reused once every reader of the
 * value that held them has run. Sizes the arena in floats, then appends the
 * kernels' workspace. */
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
            if (in >= 0 && last[in] == n) busy[buf_of[in]] = false;
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
    free(r);
}

const okv_program *okv_runner_program(const okv_runner *r) { return r->p; }

const char *okv_runner_cache_key(const okv_runner *r) { return r->key; }

/* Fixed when the key was installed, so no lock is needed. */
int okv_runner_capacity(const okv_runner *r) { return r->kv->seq.capacity; }

const char *okv_runner_kernels(const okv_runner *r) { return okv_kernels_describe(r->k); }

/* ---- runner: executing a step ------------------------------------------------------- */

typedef struct step_ctx {
    okv_runner *r;
    const int32_t *ids, *pos;
    int T, R;             /* step rows, logit rows */
    okv_logits_rows rows;
    const int32_t *seqs;  /* batched step: [T] sequence of each row, else NULL */
    const int32_t *pick;  /* batched step: [R] rows whose logits are wanted */
} step_ctx;

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

/* A batched step: the step's K/V rows go to their cells, then each sequence
 * of the batch attends over its own read runs (the cache layer resolved
 * owners and positions into runs), with the single-sequence kernel. Rows of
 * a sequence that are not adjacent in the batch are gathered into scratch. */
static void run_attention_cells(step_ctx *s, const okv_node *nd, const okv_op_attend_params *p) {
    okv_runner *r = s->r;
    okv_kv *kv = r->kv;
    const okv_cache *c = &kv->caches[p->cache];
    okv_attn_kv view = {c->k, c->v, c->k, c->v, c->dtype, c->kv_heads, c->head_dim};
    const okv_run *w;
    int n_w;
    okv_kv_cell_writes(kv, p->cache, &w, &n_w);
    if (p->writes_cache) okv_attend_write(&view, w, n_w, val(s, nd->in[1]), val(s, nd->in[2]));
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
    okv_attn_kv view = {c->k, c->v, c->k, c->v, c->dtype, c->kv_heads, c->head_dim};
    if (p.writes_cache) okv_attend_write(&view, plan->write, plan->n_write, val(s, nd->in[1]), val(s, nd->in[2]));
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

static void run_embed(step_ctx *s, const okv_node *nd, float *out, int w) {
    okv_op_embed_params p = okv_op_embed_get(nd);
    const okv_tensor *t = tensor(s, nd->w[0]);
    if (t->dtype == OKV_T_Q) embed_quant(out, s->ids, s->T, t, p.scale);
    else okv_embed(out, s->ids, s->T, t->data, (okv_dtype)t->dtype, w, p.scale);
}

/* out[r] = columns [first, first + w) of in[r] (in is win wide) */
static void run_slice(const okv_node *nd, float *out, const float *in, int rows, int w, int win) {
    okv_op_slice_params p = okv_op_slice_get(nd);
    for (int r = 0; r < rows; r++) memcpy(out + (size_t)r * w, in + (size_t)r * win + p.first, sizeof(float) * (size_t)w);
}

static void run_matmul(step_ctx *s, const okv_node *nd, float *out, const float *a, int rows, int N) {
    const okv_kernels *k = s->r->k;
    const okv_tensor *t = tensor(s, nd->w[0]);
    int K = width(s, nd->in[0]);
    if (s->r->matmul_input) s->r->matmul_input(s->r->matmul_input_ctx, t->name, a, rows, K);
    if (t->dtype == OKV_T_Q) k->matmul_q(s->r->tp, out, a, rows, K, t->data, &t->quant, N, tensor_f32(s, nd->w[1]));
    else k->matmul(s->r->tp, out, a, rows, K, t->data, (okv_dtype)t->dtype, N, tensor_f32(s, nd->w[1]));
}

static void run_node(step_ctx *s, const okv_node *nd) {
    const okv_kernels *k = s->r->k;
    float *out = val(s, nd->out);
    const float *a = val(s, nd->in[0]), *b = val(s, nd->in[1]);
    int rows = rows_of(s, nd->out), w = width(s, nd->out);
    size_t n = (size_t)rows * (size_t)w;
    if (rows == 0) return;
    switch (nd->op) {
    case OKV_OP_EMBED: run_embed(s, nd, out, w); break;
    case OKV_OP_RMSNORM: {
        okv_op_rmsnorm_params p = okv_op_rmsnorm_get(nd);
        k->rmsnorm(out, a, rows, w, p.group, tensor_f32(s, nd->w[0]), p.eps);
        break;
    }
    case OKV_OP_MATMUL: run_matmul(s, nd, out, a, rows, w); break;
    case OKV_OP_ROPE: {
        okv_op_rope_params p = okv_op_rope_get(nd);
        memcpy(out, a, n * sizeof *out);
        okv_rope(out, rows, p.n_heads, p.head_dim, s->pos, tensor_f32(s, nd->w[0]));
        break;
    }
    case OKV_OP_ATTN: run_attention(s, nd); break;
    case OKV_OP_GLU: k->glu(out, a, b, n, (okv_act)okv_op_glu_get(nd).act); break;
    case OKV_OP_ADD: okv_add(out, a, b, n); break;
    case OKV_OP_MUL: for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i]; break;
    case OKV_OP_SCALE: {
        okv_op_scale_params p = okv_op_scale_get(nd);
        okv_scale(out, a, n, p.factor * (nd->w[0] >= 0 ? tensor_f32(s, nd->w[0])[0] : 1.0f));
        break;
    }
    case OKV_OP_SOFTCAP: memcpy(out, a, n * sizeof *out); okv_softcap(out, n, okv_op_softcap_get(nd).cap); break;
    case OKV_OP_SLICE: run_slice(nd, out, a, rows, w, width(s, nd->in[0])); break;
    case OKV_OP_SELECT_ROWS: select_rows(s, nd); break;
    case OKV_OP_COUNT: break;
    }
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
    okv_status st = check_ids(r, ids, T, err);
    if (!st) st = okv_kv_begin_step(r->kv, positions, T, err);
    if (st) return st;
    step_ctx s = {r, ids, positions, T, rows == OKV_LOGITS_ALL ? T : rows == OKV_LOGITS_LAST ? 1 : 0, rows, NULL, NULL};
    const okv_graph *g = &r->p->pf->graph;
    for (int n = 0; n < g->n_nodes; n++) run_node(&s, &g->nodes[n]);
    okv_kv_commit_step(r->kv);
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
    okv_status st = check_ids(r, ids, T, err);
    if (!st) st = okv_kv_begin_batch(r->kv, seqs, positions, T, err);
    if (st) return st;
    step_ctx s = {r, ids, positions, T, n_rows, OKV_LOGITS_ALL, seqs, rows};
    const okv_graph *g = &r->p->pf->graph;
    for (int n = 0; n < g->n_nodes; n++) run_node(&s, &g->nodes[n]);
    okv_kv_commit_step(r->kv);
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
