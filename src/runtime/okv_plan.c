/* okv_plan.c — a runner's memory, planned once at creation for the
 * program's largest step (prefill_chunk_size rows, max_logit_rows on the
 * logit side): every graph value gets a fixed float offset in one arena,
 * values whose lifetimes do not overlap share a buffer, and the kernels'
 * scratch for that step is appended so no kernel allocates once a step is
 * admitted. Planned up front (not per step) because a step must not fail
 * after the cache admitted it. Sizes come from untrusted widths: every
 * product is checked and the arena is capped (ARENA_MAX_BYTES). */
#include <stdlib.h>

#include "okv_common.h"
#include "okv_op_params.h"
#include "okv_quant.h"
#include "okv_runtime_internal.h"

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
            const okv_layout *l = okv_kv_layout(r->kv);
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

okv_status okv_runner_plan(okv_runner *r, okv_error *err) {
    okv_status st = plan_memory(r, err);
    if (!st && okv_kv_is_cells(r->kv)) st = plan_gather(r, err);
    if (!st) st = plan_rope_tables(r, err);
    return st;
}
