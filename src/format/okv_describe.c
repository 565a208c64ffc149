/* okv_describe.c — what `offkv inspect` shows, as one JSON document that is
 * either printed as is (--json) or rendered as text. Programs and bare
 * configs (inspect --config) share the layout part, so both print the
 * same fields the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_format.h"
#include "okv_describe.h"
#include "okv_op_params.h"

cJSON *okv_describe_layout_doc(const okv_layout *l, const char *architecture, const char *dtype) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "architecture", architecture);
    if (dtype) cJSON_AddStringToObject(doc, "dtype", dtype);
    cJSON *lj = okv_layout_to_json(l), *e;
    cJSON_ArrayForEach(e, lj) cJSON_AddItemToObject(doc, e->string, cJSON_Duplicate(e, true));
    cJSON_Delete(lj);
    return doc;
}

/* ---- text rendering ------------------------------------------------------------ */

static int num(const cJSON *doc, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : 0;
}

static int arr_at(const cJSON *doc, const char *key, int i) {
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, key), i);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : 0;
}

static void render_layout(okv_buf *b, const cJSON *doc) {
    int n = num(doc, "n_caches"), layers = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "layer_to_cache"));
    okv_buf_printf(b, "cache layout: %d caches for %d layers | prefill_chunk_size %d | max_ctx_len %d\n", n, layers,
              num(doc, "prefill_chunk_size"), num(doc, "max_ctx_len"));
    for (int c = 0; c < n; c++) {
        int w = arr_at(doc, "windows", c);
        okv_buf_printf(b, "  cache %2d: kv_heads %d, head_dim %d, %s", c, arr_at(doc, "kv_heads", c), arr_at(doc, "head_dims", c),
                  w ? "ring" : "flat");
        if (w) okv_buf_printf(b, " (window %d)", w);
        okv_buf_printf(b, " | layers");
        for (int l = 0; l < layers; l++)
            if (arr_at(doc, "layer_to_cache", l) == c) okv_buf_printf(b, " %d", l);
        okv_buf_printf(b, "\n");
    }
}

static void render_tensors(okv_buf *b, const cJSON *tensors) {
    const cJSON *t;
    okv_buf_printf(b, "tensors (%d):\n", cJSON_GetArraySize(tensors));
    cJSON_ArrayForEach(t, tensors) {
        char shape[96] = "";
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(t, "shape"))
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", shape[0] ? ", " : "", (long long)d->valuedouble);
        const char *scheme = okv_json_str(t, "scheme");
        okv_buf_printf(b, "  %-52s %-15s [%s] %.0f bytes\n", okv_json_str(t, "name"), scheme ? scheme : okv_json_str(t, "dtype"), shape,
                  cJSON_GetObjectItemCaseSensitive(t, "nbytes")->valuedouble);
    }
}

/* "bytes by scheme: q4 g32 asym f16 1234 (56.1%), f32 ... | total N" */
static void render_schemes(okv_buf *b, const cJSON *doc) {
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(doc, "bytes_by_scheme"), *e;
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(doc, "total_bytes");
    if (!cJSON_IsObject(by) || !cJSON_IsNumber(total)) return;
    okv_buf_printf(b, "bytes by scheme:");
    cJSON_ArrayForEach(e, by)
        okv_buf_printf(b, " %s %.0f (%.1f%%),", e->string, e->valuedouble, total->valuedouble > 0 ? 100.0 * e->valuedouble / total->valuedouble : 0.0);
    okv_buf_printf(b, " total %.0f bytes (%.1f MiB)\n", total->valuedouble, total->valuedouble / (1024.0 * 1024.0));
}

/* "model: NAME | 134.5M parameters | 513.0 MiB of weights" (programs only). */
static void render_model(okv_buf *b, const cJSON *doc) {
    const char *name = okv_json_str(doc, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(doc, "parameters");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(doc, "weight_bytes");
    if (!name || !cJSON_IsNumber(params) || !cJSON_IsNumber(bytes)) return;
    double p = params->valuedouble;
    okv_buf_printf(b, "model: %s | %.*f%s parameters | %.1f MiB of weights\n", name, p >= 1e9 ? 2 : 1,
              p >= 1e9 ? p / 1e9 : p >= 1e6 ? p / 1e6 : p / 1e3, p >= 1e9 ? "B" : p >= 1e6 ? "M" : "K",
              bytes->valuedouble / (1024.0 * 1024.0));
}

char *okv_describe_render(const cJSON *doc, bool json) {
    if (json) return cJSON_Print(doc);
    okv_buf b = {0};
    render_model(&b, doc);
    const char *dtype = okv_json_str(doc, "dtype");
    okv_buf_printf(&b, "architecture: %s%s%s\n", okv_json_str(doc, "architecture"), dtype ? " | dtype " : "", dtype ? dtype : "");
    const cJSON *e;
    static const char *const facts[] = {"vocab_size", "hidden_size", "n_layers", "bos_id"};
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(doc, facts[i])) okv_buf_printf(&b, "%s: %d\n", facts[i], num(doc, facts[i]));
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(doc, "eos_ids");
    if (eos) {
        okv_buf_printf(&b, "eos_ids:");
        cJSON_ArrayForEach(e, eos) okv_buf_printf(&b, " %d", (int)e->valuedouble);
        okv_buf_printf(&b, "\n");
    }
    render_layout(&b, doc);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(doc, "tokenizer");
    if (tok) {
        okv_buf_printf(&b, "tokenizer:");
        cJSON_ArrayForEach(e, tok) {
            if (cJSON_IsString(e)) okv_buf_printf(&b, " %s=%s", e->string, e->valuestring);
            else if (cJSON_IsBool(e)) okv_buf_printf(&b, " %s=%s", e->string, cJSON_IsTrue(e) ? "yes" : "no");
            else if (cJSON_IsNumber(e)) okv_buf_printf(&b, " %s=%.0f", e->string, e->valuedouble);
        }
        okv_buf_printf(&b, "\n");
    }
    const cJSON *graph = cJSON_GetObjectItemCaseSensitive(doc, "graph");
    if (graph) {
        okv_buf_printf(&b, "graph: %d nodes, %d values |", num(graph, "n_nodes"), num(graph, "n_values"));
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(graph, "ops")) okv_buf_printf(&b, " %s x%d", e->string, (int)e->valuedouble);
        okv_buf_printf(&b, "\n");
    }
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(doc, "tensors");
    if (tensors) render_tensors(&b, tensors);
    render_schemes(&b, doc);
    return okv_buf_detach(&b, NULL); /* NULL if out of memory */
}

/* ---- program documents ------------------------------------------------------------ */

static cJSON *graph_doc(const okv_graph *g) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "n_nodes", g->n_nodes);
    cJSON_AddNumberToObject(j, "n_values", g->n_values);
    int count[OKV_OP_COUNT] = {0};
    for (int n = 0; n < g->n_nodes; n++) count[g->nodes[n].op]++;
    cJSON *ops = cJSON_AddObjectToObject(j, "ops");
    for (int op = 0; op < OKV_OP_COUNT; op++)
        if (count[op]) cJSON_AddNumberToObject(ops, okv_op_name((okv_op)op), count[op]);
    cJSON *attn = cJSON_AddArrayToObject(j, "attention");
    for (int n = 0; n < g->n_nodes; n++) {
        const okv_node *nd = &g->nodes[n];
        if (nd->op != OKV_OP_ATTN) continue;
        okv_op_attend_params p = okv_op_attend_get(nd);
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "cache", p.cache);
        cJSON_AddNumberToObject(a, "heads", p.n_heads);
        cJSON_AddNumberToObject(a, "kv_heads", p.kv_heads);
        cJSON_AddNumberToObject(a, "head_dim", p.head_dim);
        cJSON_AddBoolToObject(a, "writes", p.writes_cache != 0);
        cJSON_AddNumberToObject(a, "scale", p.scale);
        cJSON_AddItemToArray(attn, a);
    }
    return j;
}


/* A token in tokenizer_config.json is a string or {"content": string}. */
static const char *token_text(const cJSON *v) {
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* What the bundled tokenizer_config.json says about chat: whether there is
 * a template and the special token strings. */
static void add_chat_facts(cJSON *tok, const okv_program_file *pf) {
    int t = okv_format_find_tensor(pf, "tokenizer_config.json");
    int jt = okv_format_find_tensor(pf, "chat_template.jinja");
    cJSON *cfg = t >= 0 ? cJSON_ParseWithLength(pf->tensors[t].data, pf->tensors[t].nbytes) : NULL;
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    cJSON_AddBoolToObject(tok, "chat_template", jt >= 0 || cJSON_IsString(tmpl) || cJSON_IsArray(tmpl));
    static const char *const names[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = token_text(cJSON_GetObjectItemCaseSensitive(cfg, names[i]));
        if (v) cJSON_AddStringToObject(tok, names[i], v);
    }
    cJSON_Delete(cfg);
}

/* Each tensor's scheme as one string ("bf16", "q4 g32 asym f16") and the
 * bytes per scheme, so a user sees what quantization bought. */
static void add_scheme_facts(cJSON *doc, cJSON *tensors, const okv_program_file *pf) {
    cJSON *by = cJSON_CreateObject();
    double total = 0;
    for (int t = 0; t < pf->n_tensors; t++) {
        char name[64];
        okv_tensor_scheme_name(&pf->tensors[t], name, sizeof name);
        cJSON_AddStringToObject(cJSON_GetArrayItem(tensors, t), "scheme", name);
        cJSON *e = cJSON_GetObjectItemCaseSensitive(by, name);
        if (e) cJSON_SetNumberValue(e, e->valuedouble + (double)pf->tensors[t].nbytes);
        else cJSON_AddNumberToObject(by, name, (double)pf->tensors[t].nbytes);
        total += (double)pf->tensors[t].nbytes;
    }
    cJSON_AddItemToObject(doc, "bytes_by_scheme", by);
    cJSON_AddNumberToObject(doc, "total_bytes", total);
}

/* The model's name: the checkpoint directory's or GGUF file's own name
 * (e.g. "Llama-3.2-1B-Instruct", "SmolLM2-135M-Instruct.Q4_1"). */
static void model_name(const char *source, char *out, size_t n) {
    size_t len = source ? strlen(source) : 0;
    while (len > 1 && source[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && source[start - 1] != '/') start--;
    size_t end = len;
    if (end - start > 5 && !strncmp(source + end - 5, ".gguf", 5)) end -= 5;
    if (end == start) { snprintf(out, n, "unnamed"); return; }
    snprintf(out, n, "%.*s", (int)(end - start), source + start);
}

/* Parameters and bytes of the weights (bundled byte blobs excluded). */
static void add_size_facts(cJSON *doc, const okv_program_file *pf) {
    double params = 0, bytes = 0;
    for (int t = 0; t < pf->n_tensors; t++) {
        const okv_tensor *x = &pf->tensors[t];
        if (x->dtype == OKV_T_U8) continue;
        double e = 1;
        for (int d = 0; d < x->n_dims; d++) e *= (double)x->shape[d];
        params += e;
        bytes += (double)x->nbytes;
    }
    cJSON_AddNumberToObject(doc, "parameters", params);
    cJSON_AddNumberToObject(doc, "weight_bytes", bytes);
}

cJSON *okv_describe_program_doc(const okv_program_file *pf) {
    const okv_meta *m = &pf->meta;
    cJSON *doc = okv_describe_layout_doc(&pf->layout, m->architecture, okv_dtype_name(m->dtype));
    char name[256];
    model_name(m->source, name, sizeof name);
    cJSON_AddStringToObject(doc, "name", name);
    add_size_facts(doc, pf);
    cJSON_AddNumberToObject(doc, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(doc, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(doc, "n_layers", m->n_layers);
    cJSON_AddNumberToObject(doc, "bos_id", m->bos_id);
    cJSON *eos = cJSON_AddArrayToObject(doc, "eos_ids");
    for (int i = 0; i < m->n_eos; i++) cJSON_AddItemToArray(eos, cJSON_CreateNumber(m->eos_ids[i]));
    cJSON_AddStringToObject(doc, "source", m->source ? m->source : "");
    cJSON *extra = m->extra_json ? cJSON_Parse(m->extra_json) : NULL;
    if (extra) cJSON_AddItemToObject(doc, "config", extra);
    cJSON *tok = cJSON_AddObjectToObject(doc, "tokenizer");
    static const char *const blobs[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"};
    for (size_t i = 0; i < sizeof blobs / sizeof blobs[0]; i++) {
        int t = okv_format_find_tensor(pf, blobs[i]);
        cJSON_AddNumberToObject(tok, blobs[i], t >= 0 ? (double)pf->tensors[t].nbytes : 0);
    }
    add_chat_facts(tok, pf);
    cJSON_AddItemToObject(doc, "graph", graph_doc(&pf->graph));
    cJSON *tensors = okv_tensors_to_json(pf, NULL);
    cJSON_AddItemToObject(doc, "tensors", tensors);
    add_scheme_facts(doc, tensors, pf);
    return doc;
}
