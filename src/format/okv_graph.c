/* okv_graph.c — validation of a step graph against its tensors and cache
 * layout, and of the program metadata (okv_program_validate: the one set of
 * rules both the loader and export apply, so export never writes a program
 * the loader refuses). A program that passes can be executed without further
 * checks: every value is produced exactly once before it is read, every
 * width agrees with the tensors a node uses, every update_and_attend node
 * matches the geometry (kv_heads, head_dim) of the cache it addresses, and
 * the cache map holds: the attention nodes address the caches the layout's
 * layer_to_cache names (so the caches built from the layout are the ones the
 * nodes use), each cache has one writer, and every attend-only node runs
 * after it. Op parameters are read through okv_op_params.h like everywhere
 * else; slots an op does not name must be 0.
 *
 * Node integers come from an untrusted file: every product or sum of them
 * (heads * head_dim, offset + width) is formed in 64 bits and compared with
 * the value widths exactly, so no wrapped int can make a node look
 * consistent and then index past an activation at run time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "okv_common.h"
#include "okv_format.h"
#include "okv_op_params.h"

typedef struct graph_check {
    const okv_program_file *pf;
    const okv_node *nd;
    int idx;
    okv_error *err;
} graph_check;

static okv_status bad(graph_check *c, const char *what) {
    return okv_fail(c->err, OKV_ERR_FORMAT, "graph node %d (%s): %s", c->idx, okv_op_name(c->nd->op), what);
}

static int64_t width(graph_check *c, int v) { return c->pf->graph.values[v].width; }

/* Tensor w[k] must exist (or be -1 when optional) with the given float dtype
 * rules, dims and shape (shape entries < 0 are not checked). Quantized
 * tensors are only allowed where the caller says so (matmul weights and
 * embedding tables: the ops that have a quantized kernel). */
static okv_status check_tensor_q(graph_check *c, int k, bool optional, int n_dims, int64_t d0, int64_t d1, bool f32_only,
                                 bool allow_q) {
    int t = c->nd->w[k];
    if (t == -1 && optional) return OKV_OK;
    if (t < 0 || t >= c->pf->n_tensors) return bad(c, "tensor index out of range");
    const okv_tensor *ts = &c->pf->tensors[t];
    char msg[512];
    if (ts->dtype == OKV_T_U8 || (f32_only && ts->dtype != OKV_T_F32) || (ts->dtype == OKV_T_Q && !allow_q)) {
        snprintf(msg, sizeof msg, "tensor '%s' has dtype %s, expected %s%s", ts->name, okv_tdtype_name(ts->dtype),
                 f32_only ? "f32" : "a float type",
                 ts->dtype == OKV_T_Q ? " (only matmul weights and embedding tables may be quantized)" : "");
        return bad(c, msg);
    }
    if (ts->n_dims != n_dims || (d0 >= 0 && ts->shape[0] != d0) || (n_dims > 1 && d1 >= 0 && ts->shape[1] != d1)) {
        snprintf(msg, sizeof msg, "tensor '%s' has the wrong shape", ts->name);
        return bad(c, msg);
    }
    return OKV_OK;
}

static okv_status check_tensor(graph_check *c, int k, bool optional, int n_dims, int64_t d0, int64_t d1, bool f32_only) {
    return check_tensor_q(c, k, optional, n_dims, d0, d1, f32_only, false);
}

static okv_status check_attn(graph_check *c) {
    const okv_node *nd = c->nd;
    const okv_layout *l = &c->pf->layout;
    okv_op_attend_params p = okv_op_attend_get(nd);
    int64_t hq = p.n_heads, d = p.head_dim;
    char msg[256];
    if (p.cache < 0 || p.cache >= l->n_caches) return bad(c, "cache id out of range");
    if (hq < 1 || p.kv_heads < 1 || d < 1 || hq % p.kv_heads)
        return bad(c, "head counts must be positive, heads a multiple of kv_heads");
    if (p.writes_cache != 0 && p.writes_cache != 1) return bad(c, "writes_cache must be 0 or 1");
    if (l->kv_heads[p.cache] != p.kv_heads || l->head_dims[p.cache] != d) {
        snprintf(msg, sizeof msg, "node has kv_heads %d, head_dim %lld but cache %d has kv_heads %d, head_dim %d", p.kv_heads,
                 (long long)d, p.cache, l->kv_heads[p.cache], l->head_dims[p.cache]);
        return bad(c, msg);
    }
    if (width(c, nd->in[0]) != hq * d || width(c, nd->out) != hq * d) return bad(c, "q/out width != heads * head_dim");
    bool writes = p.writes_cache != 0;
    if (writes && (nd->in[1] < 0 || nd->in[2] < 0)) return bad(c, "a writing node needs k and v");
    if (!writes && (nd->in[1] >= 0 || nd->in[2] >= 0)) return bad(c, "an attend-only node takes no k/v");
    if (writes && (width(c, nd->in[1]) != p.kv_heads * d || width(c, nd->in[2]) != p.kv_heads * d))
        return bad(c, "k/v width != kv_heads * head_dim");
    return OKV_OK;
}

static bool same_width(graph_check *c, int a, int b) { return width(c, a) == width(c, b); }

static okv_status check_rmsnorm(graph_check *c) {
    okv_op_rmsnorm_params p = okv_op_rmsnorm_get(c->nd);
    if (!same_width(c, c->nd->in[0], c->nd->out) || p.group < 1 || width(c, c->nd->in[0]) % p.group)
        return bad(c, "group must divide the width");
    if (!(p.eps > 0)) return bad(c, "eps must be positive");
    return check_tensor(c, 0, true, 1, p.group, -1, true);
}

static okv_status check_rope(graph_check *c) {
    okv_op_rope_params p = okv_op_rope_get(c->nd);
    if (!same_width(c, c->nd->in[0], c->nd->out) || p.n_heads < 1 || p.head_dim < 2 || p.head_dim % 2 ||
        (int64_t)p.n_heads * p.head_dim != width(c, c->nd->in[0]))
        return bad(c, "width != n_heads * head_dim (even)");
    return check_tensor(c, 0, false, 1, p.head_dim / 2, -1, true);
}

static okv_status check_node_shapes(graph_check *c) {
    const okv_node *nd = c->nd;
    int in0 = nd->in[0], out = nd->out;
    switch (nd->op) {
    case OKV_OP_EMBED:
        return check_tensor_q(c, 0, false, 2, -1, width(c, out), false, true);
    case OKV_OP_RMSNORM:
        return check_rmsnorm(c);
    case OKV_OP_MATMUL: {
        okv_status st = check_tensor_q(c, 0, false, 2, width(c, out), width(c, in0), false, true);
        return st ? st : check_tensor(c, 1, true, 1, width(c, out), -1, true);
    }
    case OKV_OP_ROPE:
        return check_rope(c);
    case OKV_OP_ATTN:
        return check_attn(c);
    case OKV_OP_GLU: {
        okv_op_glu_params p = okv_op_glu_get(nd);
        if (p.act < 0 || p.act > 1) return bad(c, "unknown activation");
    }
        /* fallthrough */
    case OKV_OP_ADD:
    case OKV_OP_MUL:
        return same_width(c, in0, out) && same_width(c, nd->in[1], out) ? OKV_OK : bad(c, "operand widths differ");
    case OKV_OP_SCALE:
        if (!same_width(c, in0, out)) return bad(c, "operand widths differ");
        return check_tensor(c, 0, true, 1, 1, -1, true);
    case OKV_OP_SOFTCAP:
        if (!(okv_op_softcap_get(nd).cap > 0)) return bad(c, "softcap must be positive");
        return same_width(c, in0, out) ? OKV_OK : bad(c, "operand widths differ");
    case OKV_OP_SLICE: {
        okv_op_slice_params p = okv_op_slice_get(nd);
        return p.first >= 0 && (int64_t)p.first + width(c, out) <= width(c, in0) ? OKV_OK : bad(c, "slice out of range");
    }
    case OKV_OP_SELECT_ROWS:
        if (!same_width(c, in0, out)) return bad(c, "operand widths differ");
        return c->pf->graph.values[out].logit_rows && !c->pf->graph.values[in0].logit_rows
                   ? OKV_OK : bad(c, "must map step rows to logit rows");
    case OKV_OP_COUNT:
        break;
    }
    return bad(c, "unknown op");
}

/* nd's parameters copied through its op's get/set into a zeroed node: the
 * slots the op's struct names, nothing else. */
static okv_node named_slots(const okv_node *nd) {
    okv_node o = {.op = nd->op};
    switch (nd->op) {
    case OKV_OP_EMBED: okv_op_embed_set(&o, okv_op_embed_get(nd)); break;
    case OKV_OP_RMSNORM: okv_op_rmsnorm_set(&o, okv_op_rmsnorm_get(nd)); break;
    case OKV_OP_ROPE: okv_op_rope_set(&o, okv_op_rope_get(nd)); break;
    case OKV_OP_ATTN: okv_op_attend_set(&o, okv_op_attend_get(nd)); break;
    case OKV_OP_GLU: okv_op_glu_set(&o, okv_op_glu_get(nd)); break;
    case OKV_OP_SCALE: okv_op_scale_set(&o, okv_op_scale_get(nd)); break;
    case OKV_OP_SOFTCAP: okv_op_softcap_set(&o, okv_op_softcap_get(nd)); break;
    case OKV_OP_SLICE: okv_op_slice_set(&o, okv_op_slice_get(nd)); break;
    default: break;   /* matmul, add, mul, select_rows: no parameters */
    }
    return o;
}

/* A slot the op's parameters do not name must be 0, so nothing rides in a
 * node that builder, runtime and inspect cannot see. */
static okv_status check_unnamed_slots(graph_check *c) {
    okv_node named = named_slots(c->nd);
    char msg[96];
    for (int k = 0; k < OKV_NODE_MAX_I; k++)
        if (c->nd->i[k] != named.i[k]) {
            snprintf(msg, sizeof msg, "integer slot %d = %d is not a parameter of this op (must be 0)", k, c->nd->i[k]);
            return bad(c, msg);
        }
    for (int k = 0; k < OKV_NODE_MAX_F; k++)
        if (c->nd->f[k] != named.f[k]) {
            snprintf(msg, sizeof msg, "float slot %d = %g is not a parameter of this op (must be 0)", k, (double)c->nd->f[k]);
            return bad(c, msg);
        }
    return OKV_OK;
}

static int n_inputs(okv_op op) {
    switch (op) {
    case OKV_OP_EMBED: return 0;
    case OKV_OP_ATTN: return 3;
    case OKV_OP_GLU: case OKV_OP_ADD: case OKV_OP_MUL: return 2;
    default: return 1;
    }
}

/* Inputs must be defined earlier, unused slots -1, and all operands on the
 * same row kind as the output (except select_rows). */
static okv_status check_operands(graph_check *c, const bool *defined) {
    const okv_graph *g = &c->pf->graph;
    const okv_node *nd = c->nd;
    if (nd->out < 0 || nd->out >= g->n_values) return bad(c, "output value out of range");
    if (defined[nd->out]) return bad(c, "output value defined twice");
    int need = n_inputs(nd->op);
    for (int k = 0; k < OKV_NODE_MAX_IN; k++) {
        int v = nd->in[k];
        bool optional = nd->op == OKV_OP_ATTN && k > 0;
        if (k >= need || (optional && v == -1)) {
            if (v != -1 && k >= need) return bad(c, "unexpected input");
            continue;
        }
        if (v < 0 || v >= g->n_values || !defined[v]) return bad(c, "input value undefined or out of range");
        if (nd->op != OKV_OP_SELECT_ROWS && g->values[v].logit_rows != g->values[nd->out].logit_rows)
            return bad(c, "operands mix step rows and logit rows");
    }
    if (nd->op == OKV_OP_EMBED && g->values[nd->out].logit_rows) return bad(c, "embed produces step rows");
    return OKV_OK;
}

/* Node floats travel as JSON numbers, which cannot hold inf or NaN. */
static okv_status check_floats(graph_check *c) {
    for (int k = 0; k < OKV_NODE_MAX_F; k++)
        if (!isfinite(c->nd->f[k])) {
            char msg[64];
            snprintf(msg, sizeof msg, "f%d = %g is not a finite number", k, (double)c->nd->f[k]);
            return bad(c, msg);
        }
    return OKV_OK;
}

/* The cache map, over the attention nodes in step order. The k-th
 * update_and_attend node is layer k and must address layer_to_cache[k]: the
 * runtime runs from the node, while the caches are built from the layout
 * (and `inspect` shows it), and the layer count is the metadata's. Each
 * cache has exactly one writer node; sets writer[c] to its node index
 * (-1 = none). */
static okv_status check_layers_and_writers(const okv_program_file *pf, int *writer, okv_error *err) {
    const okv_graph *g = &pf->graph;
    const okv_layout *l = &pf->layout;
    int layer = 0;
    for (int c = 0; c < l->n_caches; c++) writer[c] = -1;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].op != OKV_OP_ATTN) continue;
        okv_op_attend_params p = okv_op_attend_get(&g->nodes[n]);
        graph_check c = {pf, &g->nodes[n], n, err};
        char msg[160];
        if (layer >= l->n_layers) {
            snprintf(msg, sizeof msg, "attention of layer %d, but the layout has %d layers (layer_to_cache)", layer, l->n_layers);
            return bad(&c, msg);
        }
        if (p.cache != l->layer_to_cache[layer]) {
            snprintf(msg, sizeof msg, "layer %d addresses cache %d but the layout's layer_to_cache[%d] = %d", layer, p.cache,
                     layer, l->layer_to_cache[layer]);
            return bad(&c, msg);
        }
        if (p.writes_cache && writer[p.cache] >= 0) {
            snprintf(msg, sizeof msg, "cache %d is already written by node %d (one writer per cache)", p.cache, writer[p.cache]);
            return bad(&c, msg);
        }
        if (p.writes_cache) writer[p.cache] = n;
        layer++;
    }
    if (layer != l->n_layers)
        return okv_fail(err, OKV_ERR_FORMAT, "graph: %d update_and_attend node(s) for the layout's %d layers (layer_to_cache)",
                        layer, l->n_layers);
    if (l->n_layers != pf->meta.n_layers)
        return okv_fail(err, OKV_ERR_FORMAT, "layout has %d layers (layer_to_cache) but the program meta says n_layers %d",
                        l->n_layers, pf->meta.n_layers);
    return OKV_OK;
}

/* An attend-only node (KV sharing) reads its donor's cache, which must be
 * written by a node that runs earlier in the same step. With every layer's
 * node on its layer_to_cache entry and every cache used by some layer
 * (okv_layout_validate), this also means no cache goes unwritten. */
static okv_status check_readers(const okv_program_file *pf, const int *writer, okv_error *err) {
    const okv_graph *g = &pf->graph;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].op != OKV_OP_ATTN) continue;
        okv_op_attend_params p = okv_op_attend_get(&g->nodes[n]);
        if (p.writes_cache || (writer[p.cache] >= 0 && writer[p.cache] < n)) continue;
        graph_check c = {pf, &g->nodes[n], n, err};
        char msg[160];
        if (writer[p.cache] < 0) snprintf(msg, sizeof msg, "attend-only node reads cache %d, which no node writes", p.cache);
        else
            snprintf(msg, sizeof msg, "attend-only node reads cache %d before its writer (node %d) has run", p.cache,
                     writer[p.cache]);
        return bad(&c, msg);
    }
    return OKV_OK;
}

static okv_status check_cache_map(const okv_program_file *pf, okv_error *err) {
    int *writer = malloc(sizeof(int) * (size_t)pf->layout.n_caches);
    if (!writer) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = check_layers_and_writers(pf, writer, err);
    if (!st) st = check_readers(pf, writer, err);
    free(writer);
    return st;
}

okv_status okv_graph_validate(const okv_program_file *pf, okv_error *err) {
    const okv_graph *g = &pf->graph;
    if (g->n_nodes < 1 || g->n_values < 1) return okv_fail(err, OKV_ERR_FORMAT, "graph is empty");
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].width < 1 || g->values[v].width > OKV_MAX_WIDTH)
            return okv_fail(err, OKV_ERR_FORMAT, "graph value %d: width %d outside [1, %d]", v, g->values[v].width,
                            OKV_MAX_WIDTH);
    bool *defined = calloc((size_t)g->n_values, 1);
    if (!defined) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = OKV_OK;
    for (int n = 0; n < g->n_nodes && !st; n++) {
        graph_check c = {pf, &g->nodes[n], n, err};
        st = check_operands(&c, defined);
        if (!st) st = check_floats(&c);
        if (!st) st = check_unnamed_slots(&c);
        if (!st) st = check_node_shapes(&c);
        if (!st) defined[g->nodes[n].out] = true;
    }
    if (!st && (g->output < 0 || g->output >= g->n_values || !defined[g->output]))
        st = okv_fail(err, OKV_ERR_FORMAT, "graph output value %d is never computed", g->output);
    if (!st && g->values[g->output].width != pf->meta.vocab_size)
        st = okv_fail(err, OKV_ERR_FORMAT, "graph output width %d != vocab_size %d", g->values[g->output].width,
                      pf->meta.vocab_size);
    free(defined);
    return st ? st : check_cache_map(pf, err);
}

/* ---- metadata and the whole program ------------------------------------------ */

okv_status okv_meta_validate(const okv_meta *m, okv_error *err) {
    const char *w = "program meta";
    if (!m->architecture || !m->architecture[0]) return okv_fail(err, OKV_ERR_FORMAT, "%s: 'architecture' is empty", w);
    if (m->dtype != OKV_F32 && m->dtype != OKV_F16 && m->dtype != OKV_BF16)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: 'dtype' %d is not f32, f16 or bf16", w, (int)m->dtype);
    if (m->vocab_size < 1 || m->vocab_size > OKV_MAX_VOCAB)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: vocab_size %d outside [1, %d]", w, m->vocab_size, OKV_MAX_VOCAB);
    if (m->hidden_size < 1 || m->hidden_size > OKV_MAX_HIDDEN)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: hidden_size %d outside [1, %d]", w, m->hidden_size, OKV_MAX_HIDDEN);
    if (m->n_layers < 1 || m->n_layers > OKV_MAX_LAYERS)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: n_layers %d outside [1, %d]", w, m->n_layers, OKV_MAX_LAYERS);
    if (m->bos_id < -1 || m->bos_id >= m->vocab_size)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: bos_id %d outside [-1, vocab_size %d) (-1 = none)", w, m->bos_id,
                        m->vocab_size);
    if (m->n_eos < 0 || m->n_eos > OKV_MAX_EOS || (m->n_eos > 0 && !m->eos_ids))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: %d eos ids, at most %d are supported", w, m->n_eos, OKV_MAX_EOS);
    for (int i = 0; i < m->n_eos; i++)
        if (m->eos_ids[i] < 0 || m->eos_ids[i] >= m->vocab_size)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: eos id %d outside [0, vocab_size %d)", w, m->eos_ids[i], m->vocab_size);
    return OKV_OK;
}

okv_status okv_program_validate(const okv_program_file *pf, okv_error *err) {
    okv_status st = okv_meta_validate(&pf->meta, err);
    if (st) return st;
    if (okv_layout_validate(&pf->layout, err))   /* a bad file, not a bad call */
        return err ? (err->status = OKV_ERR_FORMAT) : OKV_ERR_FORMAT;
    return okv_graph_validate(pf, err);
}
