/* okv_hf_graph.c — the mapping of a HF decoder onto offkv's step graph, and
 * the cache layout it publishes.
 *
 * One function builds every supported family: a decoder layer is
 *   norm -> q/k/v projections (+bias) -> [q/k norm] -> RoPE -> update_and_attend
 *   -> o projection [-> post-attn norm] -> residual
 *   -> norm -> GLU MLP [-> post-ff norm] -> residual [-> per-layer input]
 *   [-> layer scalar]
 * with the family's switches from okv_hf_model choosing the bracketed parts.
 * Values are SSA (each node writes a fresh value); the runtime's memory plan
 * reuses their storage. Tensors are recorded with their checkpoint source;
 * export reads, converts and writes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "okv_common.h"
#include "okv_hf.h"
#include "okv_op_params.h"

/* ---- layer geometry and the cache layout ---------------------------------- */

bool okv_hf_layer_is_full(const okv_hf_model *m, int layer) { return m->window[layer] == 0; }

int okv_hf_layer_head_dim(const okv_hf_model *m, int layer) {
    return m->family == OKV_FAM_GEMMA4 && okv_hf_layer_is_full(m, layer) ? m->global_head_dim : m->head_dim;
}

int okv_hf_layer_kv_heads(const okv_hf_model *m, int layer) {
    return m->family == OKV_FAM_GEMMA4 && okv_hf_layer_is_full(m, layer) ? m->global_kv_heads : m->n_kv_heads;
}

static int first_shared_layer(const okv_hf_model *m) { return m->n_layers - m->kv_shared_layers; }

/* HF's donor rule: the last layer before the first shared one whose
 * attention type (full/sliding) matches. -1 if there is none. */
static int donor_layer(const okv_hf_model *m, int layer) {
    for (int j = first_shared_layer(m) - 1; j >= 0; j--)
        if (okv_hf_layer_is_full(m, j) == okv_hf_layer_is_full(m, layer)) return j;
    return -1;
}

static int smallest_window(const okv_hf_model *m) {
    int w = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->window[i] > 0 && (w == 0 || m->window[i] < w)) w = m->window[i];
    return w;
}

okv_status okv_hf_build_layout(const okv_hf_model *m, int prefill_chunk, int max_ctx, okv_layout *out, okv_error *err) {
    int first = first_shared_layer(m), n_caches = first;
    if (max_ctx <= 0) max_ctx = 2048;
    int minw = smallest_window(m), bound = minw > 0 && minw < max_ctx ? minw : max_ctx;
    if (prefill_chunk == 0) prefill_chunk = bound < 512 ? bound : 512;
    if (prefill_chunk < 1 || prefill_chunk > bound) {
        if (minw > 0 && minw < max_ctx)
            return okv_fail(err, OKV_ERR_INVALID, "prefill chunk size %d is outside [1, %d]: a step may not exceed the "
                            "smallest sliding window (%d)", prefill_chunk, bound, minw);
        return okv_fail(err, OKV_ERR_INVALID, "prefill chunk size %d is outside [1, %d] (the max context length)",
                        prefill_chunk, bound);
    }
    okv_status st = okv_layout_alloc(out, n_caches, m->n_layers, err);
    if (st) return st;
    for (int i = 0; i < m->n_layers; i++) {
        int owner = i < first ? i : donor_layer(m, i);
        if (owner < 0) {
            okv_layout_free(out);
            return okv_fail(err, OKV_ERR_UNSUPPORTED, "layer %d shares k/v but no earlier non-shared layer has its "
                            "attention type", i);
        }
        out->layer_to_cache[i] = owner;   /* cache ids = indices of non-shared layers */
    }
    for (int c = 0; c < n_caches; c++) {
        out->kv_heads[c] = okv_hf_layer_kv_heads(m, c);
        out->head_dims[c] = okv_hf_layer_head_dim(m, c);
        out->windows[c] = m->window[c];
    }
    out->prefill_chunk_size = prefill_chunk;
    out->max_ctx_len = max_ctx;
    return okv_layout_validate(out, err);
}

double okv_hf_rope_inv_freq_at(const okv_rope *r, int head_dim, int i) {
    double part = r->partial_rotary >= 0 && r->partial_rotary <= 1 ? r->partial_rotary : 1;   /* validated at parse */
    int rotate = r->kind == OKV_ROPE_PROPORTIONAL ? (int)(part * head_dim / 2.0) : head_dim / 2;
    double inv = i < rotate ? pow(r->theta, -2.0 * i / head_dim) : 0.0;
    if (r->kind == OKV_ROPE_LINEAR || r->kind == OKV_ROPE_PROPORTIONAL) inv /= r->factor;
    if (r->kind == OKV_ROPE_LLAMA3) {
        double wl = 2 * M_PI / inv;
        double low_wl = r->original_max_pos / r->low_freq_factor, high_wl = r->original_max_pos / r->high_freq_factor;
        if (wl > low_wl) inv = inv / r->factor;
        else if (wl >= high_wl) {
            double s = (r->original_max_pos / wl - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
            inv = (1 - s) * inv / r->factor + s * inv;
        }
    }
    return inv;
}

void okv_hf_rope_inv_freq(const okv_rope *r, int head_dim, float *inv_freq) {
    for (int i = 0; i < head_dim / 2; i++) {
        double inv = okv_hf_rope_inv_freq_at(r, head_dim, i);
        inv_freq[i] = okv_double_fits_float(inv) || isnan(inv) ? (float)inv : (float)INFINITY;   /* no UB cast */
    }
}

/* ---- graph builder ----------------------------------------------------------- */

typedef struct builder {
    const okv_hf_model *m;
    okv_dtype wdt;
    okv_hf_graph *g;
    int cap_values, cap_nodes, cap_tensors;
    okv_error *err;
    okv_status st;   /* first failure; later calls become no-ops */
} builder;

static void *grow(void *p, int *cap, int need, size_t elem) {
    if (need <= *cap) return p;
    int ncap = *cap ? *cap * 2 : 64;
    while (ncap < need) ncap *= 2;
    void *q = realloc(p, (size_t)ncap * elem);
    if (q) { memset((char *)q + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem); *cap = ncap; }
    return q;
}

static bool ok(builder *b) { return b->st == OKV_OK; }

static int oom(builder *b) {
    if (ok(b)) b->st = okv_fail(b->err, OKV_ERR_NOMEM, "out of memory building the graph");
    return -1;
}

static int new_value(builder *b, int width, bool logit_rows) {
    okv_graph *gr = &b->g->graph;
    void *p = grow(gr->values, &b->cap_values, gr->n_values + 1, sizeof *gr->values);
    if (!p) return oom(b);
    gr->values = p;
    gr->values[gr->n_values] = (okv_value){width, logit_rows};
    return gr->n_values++;
}

/* Adds (or finds) a program tensor. ckpt == NULL means computed f32 data. */
static int add_tensor(builder *b, const char *name, const char *ckpt, int n_dims, int64_t d0, int64_t d1, bool matrix,
                      float add, float *computed) {
    okv_hf_graph *g = b->g;
    for (int t = 0; t < g->n_tensors; t++)
        if (!strcmp(g->tensors[t].name, name)) { free(computed); return t; }
    int cap = b->cap_tensors;
    void *p = grow(g->tensors, &cap, g->n_tensors + 1, sizeof *g->tensors);
    if (!p) { free(computed); return oom(b); }
    g->tensors = p;
    p = grow(g->srcs, &b->cap_tensors, g->n_tensors + 1, sizeof *g->srcs);
    if (!p) { free(computed); return oom(b); }
    g->srcs = p;
    okv_tensor *t = &g->tensors[g->n_tensors];
    t->name = okv_strdup(name);
    t->dtype = matrix ? (okv_tdtype)b->wdt : OKV_T_F32;
    t->n_dims = n_dims;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->nbytes = (uint64_t)d0 * (uint64_t)(n_dims > 1 ? d1 : 1) * okv_tdtype_size(t->dtype);
    g->srcs[g->n_tensors] = (okv_hf_tensor_src){ckpt ? okv_strdup(ckpt) : NULL, add, computed};
    return g->n_tensors++;
}

/* A checkpoint tensor: program name = name, checkpoint name = prefix + name. */
static int ckpt_tensor(builder *b, const char *name, int n_dims, int64_t d0, int64_t d1, bool matrix, float add) {
    char full[384];
    snprintf(full, sizeof full, "%s%s", b->m->prefix, name);
    return ok(b) ? add_tensor(b, name, full, n_dims, d0, d1, matrix, add, NULL) : -1;
}

static int node(builder *b, okv_op op, int in0, int in1, int in2, int out_width, bool logit_rows, int w0, int w1) {
    if (!ok(b)) return -1;
    int out = new_value(b, out_width, logit_rows);
    okv_graph *gr = &b->g->graph;
    void *p = grow(gr->nodes, &b->cap_nodes, gr->n_nodes + 1, sizeof *gr->nodes);
    if (!p || out < 0) return oom(b);
    gr->nodes = p;
    okv_node *nd = &gr->nodes[gr->n_nodes++];
    memset(nd, 0, sizeof *nd);
    *nd = (okv_node){.op = op, .in = {in0, in1, in2}, .out = out, .w = {w0, w1}};
    return out;
}

static okv_node *last_node(builder *b) { return &b->g->graph.nodes[b->g->graph.n_nodes - 1]; }
static int width_of(builder *b, int v) { return b->g->graph.values[v].width; }
static bool rows_of(builder *b, int v) { return b->g->graph.values[v].logit_rows; }

static int op_matmul(builder *b, int x, const char *wname, int n_out, bool bias) {
    char name[256];
    snprintf(name, sizeof name, "%s.weight", wname);
    int w = ckpt_tensor(b, name, 2, n_out, ok(b) ? width_of(b, x) : 0, true, 0);
    int bt = -1;
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", wname);
        bt = ckpt_tensor(b, name, 1, n_out, 0, false, 0);
    }
    return node(b, OKV_OP_MATMUL, x, -1, -1, n_out, ok(b) && rows_of(b, x), w, bt);
}

/* RMSNorm over groups of `group` channels; wname NULL = no weight. */
static int op_rmsnorm(builder *b, int x, const char *wname, int group) {
    int w = -1;
    if (wname) {
        char name[256];
        snprintf(name, sizeof name, "%s.weight", wname);
        w = ckpt_tensor(b, name, 1, group, 0, false, b->m->norm_plus_one ? 1.0f : 0.0f);
    }
    int out = node(b, OKV_OP_RMSNORM, x, -1, -1, ok(b) ? width_of(b, x) : 0, ok(b) && rows_of(b, x), w, -1);
    if (ok(b)) okv_op_rmsnorm_set(last_node(b), (okv_op_rmsnorm_params){.group = group, .eps = (float)b->m->rms_eps});
    return out;
}

static int op_binary(builder *b, okv_op op, int x, int y) {
    return node(b, op, x, y, -1, ok(b) ? width_of(b, x) : 0, ok(b) && rows_of(b, x), -1, -1);
}

static int op_scale(builder *b, int x, float s, int scalar_tensor) {
    int out = node(b, OKV_OP_SCALE, x, -1, -1, ok(b) ? width_of(b, x) : 0, ok(b) && rows_of(b, x), scalar_tensor, -1);
    if (ok(b)) okv_op_scale_set(last_node(b), (okv_op_scale_params){.factor = s});
    return out;
}

static int rope_table(builder *b, bool full, int head_dim) {
    char name[64];
    snprintf(name, sizeof name, "rope.%s.inv_freq", full ? "full" : "sliding");
    float *inv = calloc((size_t)head_dim / 2, sizeof *inv);
    if (!inv) return oom(b);
    okv_hf_rope_inv_freq(full ? &b->m->rope_full : &b->m->rope_sliding, head_dim, inv);
    return ok(b) ? add_tensor(b, name, NULL, 1, head_dim / 2, 0, false, 0, inv) : (free(inv), -1);
}

static int op_rope(builder *b, int x, int n_heads, int head_dim, bool full) {
    int t = rope_table(b, full, head_dim);
    int out = node(b, OKV_OP_ROPE, x, -1, -1, n_heads * head_dim, false, t, -1);
    if (ok(b)) okv_op_rope_set(last_node(b), (okv_op_rope_params){.n_heads = n_heads, .head_dim = head_dim});
    return out;
}

/* ---- the decoder ------------------------------------------------------------- */

static void layer_name(char *buf, size_t n, int layer, const char *rest) { snprintf(buf, n, "layers.%d.%s", layer, rest); }

/* q, k, v projections through RoPE and update_and_attend; returns the
 * attention output before o_proj. */
static int attention_block(builder *b, int layer, int u, const okv_layout *layout) {
    const okv_hf_model *m = b->m;
    int D = okv_hf_layer_head_dim(m, layer), Hkv = okv_hf_layer_kv_heads(m, layer), Hq = m->n_heads;
    bool full = okv_hf_layer_is_full(m, layer), owns = layer < first_shared_layer(m);
    char n1[128], n2[128];
    layer_name(n1, sizeof n1, layer, "self_attn.q_proj");
    int q = op_matmul(b, u, n1, Hq * D, m->attn_bias_qkv);
    if (m->qk_norm) { layer_name(n1, sizeof n1, layer, "self_attn.q_norm"); q = op_rmsnorm(b, q, n1, D); }
    q = op_rope(b, q, Hq, D, full);
    int k = -1, v = -1;
    if (owns) {
        layer_name(n1, sizeof n1, layer, "self_attn.k_proj");
        int kraw = op_matmul(b, u, n1, Hkv * D, m->attn_bias_qkv);
        if (m->k_eq_v && full) v = kraw;
        else { layer_name(n2, sizeof n2, layer, "self_attn.v_proj"); v = op_matmul(b, u, n2, Hkv * D, m->attn_bias_qkv); }
        k = kraw;
        if (m->qk_norm) { layer_name(n1, sizeof n1, layer, "self_attn.k_norm"); k = op_rmsnorm(b, k, n1, D); }
        if (m->has_v_norm) v = op_rmsnorm(b, v, NULL, D);
        k = op_rope(b, k, Hkv, D, full);
    }
    int a = node(b, OKV_OP_ATTN, q, k, v, Hq * D, false, -1, -1);
    if (ok(b))
        okv_op_attend_set(last_node(b), (okv_op_attend_params){.cache = layout->layer_to_cache[layer], .n_heads = Hq,
                                                               .kv_heads = Hkv, .head_dim = D, .writes_cache = owns,
                                                               .scale = m->attn_scale});
    return a;
}

static int mlp_block(builder *b, int layer, int x) {
    const okv_hf_model *m = b->m;
    int inter = m->intermediate;
    if (m->double_wide_mlp && m->kv_shared_layers > 0 && layer >= first_shared_layer(m)) inter *= 2;
    char n[128];
    layer_name(n, sizeof n, layer, "mlp.gate_proj");
    int g = op_matmul(b, x, n, inter, m->mlp_bias);
    layer_name(n, sizeof n, layer, "mlp.up_proj");
    int u = op_matmul(b, x, n, inter, m->mlp_bias);
    int gu = node(b, OKV_OP_GLU, g, u, -1, inter, false, -1, -1);
    if (ok(b)) okv_op_glu_set(last_node(b), (okv_op_glu_params){.act = m->act});
    layer_name(n, sizeof n, layer, "mlp.down_proj");
    return op_matmul(b, gu, n, m->hidden, m->mlp_bias);
}

/* Gemma-4 per-layer inputs for all layers at once: [T, L*P]. */
static int per_layer_inputs(builder *b, int x0) {
    const okv_hf_model *m = b->m;
    int LP = m->n_layers * m->ple_dim;
    int tab = ckpt_tensor(b, "embed_tokens_per_layer.weight", 2, m->ple_vocab, LP, true, 0);
    int tok = node(b, OKV_OP_EMBED, -1, -1, -1, LP, false, tab, -1);
    if (ok(b)) okv_op_embed_set(last_node(b), (okv_op_embed_params){.scale = sqrtf((float)m->ple_dim)});
    int proj = op_matmul(b, x0, "per_layer_model_projection", LP, false);
    proj = op_scale(b, proj, 1.0f / sqrtf((float)m->hidden), -1);
    proj = op_rmsnorm(b, proj, "per_layer_projection_norm", m->ple_dim);
    int ple = op_binary(b, OKV_OP_ADD, proj, tok);
    return op_scale(b, ple, (float)(1.0 / sqrt(2.0)), -1);
}

static int per_layer_block(builder *b, int layer, int h, int ple) {
    const okv_hf_model *m = b->m;
    char n[128];
    int slice = node(b, OKV_OP_SLICE, ple, -1, -1, m->ple_dim, false, -1, -1);
    if (ok(b)) okv_op_slice_set(last_node(b), (okv_op_slice_params){.first = layer * m->ple_dim});
    layer_name(n, sizeof n, layer, "per_layer_input_gate");
    int gate = op_matmul(b, h, n, m->ple_dim, false);
    int gp = node(b, OKV_OP_GLU, gate, slice, -1, m->ple_dim, false, -1, -1);
    if (ok(b)) okv_op_glu_set(last_node(b), (okv_op_glu_params){.act = m->act});
    layer_name(n, sizeof n, layer, "per_layer_projection");
    int pr = op_matmul(b, gp, n, m->hidden, false);
    layer_name(n, sizeof n, layer, "post_per_layer_input_norm");
    pr = op_rmsnorm(b, pr, n, m->hidden);
    return op_binary(b, OKV_OP_ADD, h, pr);
}

static int decoder_layer(builder *b, int layer, int h, int ple, const okv_layout *layout) {
    const okv_hf_model *m = b->m;
    char n[128];
    layer_name(n, sizeof n, layer, "input_layernorm");
    int u = op_rmsnorm(b, h, n, m->hidden);
    int a = attention_block(b, layer, u, layout);
    layer_name(n, sizeof n, layer, "self_attn.o_proj");
    int o = op_matmul(b, a, n, m->hidden, m->attn_bias_o);
    if (m->sandwich_norms) { layer_name(n, sizeof n, layer, "post_attention_layernorm"); o = op_rmsnorm(b, o, n, m->hidden); }
    h = op_binary(b, OKV_OP_ADD, h, o);
    layer_name(n, sizeof n, layer, m->sandwich_norms ? "pre_feedforward_layernorm" : "post_attention_layernorm");
    int f = mlp_block(b, layer, op_rmsnorm(b, h, n, m->hidden));
    if (m->sandwich_norms) { layer_name(n, sizeof n, layer, "post_feedforward_layernorm"); f = op_rmsnorm(b, f, n, m->hidden); }
    h = op_binary(b, OKV_OP_ADD, h, f);
    if (ple >= 0) h = per_layer_block(b, layer, h, ple);
    if (m->has_layer_scalar) {
        layer_name(n, sizeof n, layer, "layer_scalar");
        h = op_scale(b, h, 1.0f, ckpt_tensor(b, n, 1, 1, 0, false, 0));
    }
    return h;
}

static void lm_head_name(const okv_hf_model *m, char *buf, size_t n) {
    const char *p = strstr(m->prefix, "model.");
    if (p == m->prefix + strlen(m->prefix) - 6) snprintf(buf, n, "%.*slm_head.weight", (int)(p - m->prefix), m->prefix);
    else snprintf(buf, n, "lm_head.weight");
}

static int output_head(builder *b, int h) {
    const okv_hf_model *m = b->m;
    int sel = node(b, OKV_OP_SELECT_ROWS, h, -1, -1, m->hidden, true, -1, -1);
    int x = op_rmsnorm(b, sel, "norm", m->hidden);
    int w;
    if (m->tied) w = ckpt_tensor(b, "embed_tokens.weight", 2, m->vocab, m->hidden, true, 0);
    else {
        char full[256];
        lm_head_name(m, full, sizeof full);
        w = ok(b) ? add_tensor(b, "lm_head.weight", full, 2, m->vocab, m->hidden, true, 0, NULL) : -1;
    }
    int logits = node(b, OKV_OP_MATMUL, x, -1, -1, m->vocab, true, w, -1);
    if (m->final_softcap > 0) {
        logits = node(b, OKV_OP_SOFTCAP, logits, -1, -1, m->vocab, true, -1, -1);
        if (ok(b)) okv_op_softcap_set(last_node(b), (okv_op_softcap_params){.cap = m->final_softcap});
    }
    return logits;
}

okv_status okv_hf_build_graph(const okv_hf_model *m, const okv_layout *layout, okv_dtype weight_dtype, okv_hf_graph *out,
                              okv_error *err) {
    memset(out, 0, sizeof *out);
    builder b = {.m = m, .wdt = weight_dtype, .g = out, .err = err};
    int emb = ckpt_tensor(&b, "embed_tokens.weight", 2, m->vocab, m->hidden, true, 0);
    int h = node(&b, OKV_OP_EMBED, -1, -1, -1, m->hidden, false, emb, -1);
    if (ok(&b)) okv_op_embed_set(last_node(&b), (okv_op_embed_params){.scale = m->embed_scale});
    int ple = m->family == OKV_FAM_GEMMA4 && m->ple_dim > 0 ? per_layer_inputs(&b, h) : -1;
    for (int l = 0; l < m->n_layers && ok(&b); l++) h = decoder_layer(&b, l, h, ple, layout);
    out->graph.output = output_head(&b, h);
    if (!ok(&b)) okv_hf_graph_free(out);
    return b.st;
}

void okv_hf_graph_free(okv_hf_graph *g) {
    for (int t = 0; t < g->n_tensors; t++) {
        free(g->tensors[t].name);
        free(g->srcs[t].ckpt_name);
        free(g->srcs[t].computed);
    }
    free(g->tensors);
    free(g->srcs);
    free(g->graph.values);
    free(g->graph.nodes);
    memset(g, 0, sizeof *g);
}
