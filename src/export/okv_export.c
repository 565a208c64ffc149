/* okv_export.c — HF checkpoint directory -> program file.
 *
 * Export is a pipeline of checks and one streaming write:
 *   config.json -> okv_hf_model (refuses what we cannot honour)
 *   -> cache layout + step graph (hf layer) -> every graph tensor is found in
 *   the safetensors set with the expected shape and a float dtype
 *   -> the tensors --qlinear/--qembedding quantize are marked (plan_quant:
 *   by their use in the graph, not by name) -> tokenizer files bundled as
 *   byte blobs -> okv_format_write, which asks produce_tensor() for each
 *   tensor's bytes (converted to the target dtype, or quantized) one at a
 *   time. The writer renames a temporary file into place only on
 *   success, so a failed export leaves no output file. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "offkv.h"
#include "okv_common.h"
#include "okv_describe.h"
#include "okv_format.h"
#include "okv_hf.h"
#include "okv_quant.h"
#include "okv_safetensors.h"

void okv_export_options_default(okv_export_options *o) {
    memset(o, 0, sizeof *o);
    o->dtype = OKV_BF16;
    o->max_ctx_len = 2048;
}

typedef struct blob {
    char *name;
    char *data;
    size_t len;
} blob;

typedef struct export_job {
    const okv_export_options *opt;
    okv_hf_model model;
    okv_layout layout;
    okv_hf_graph hg;
    okv_st_set *st;
    const okv_st_tensor **src;   /* [hg.n_tensors], NULL for computed */
    blob blobs[4];
    int n_blobs;
} export_job;

static void notice(const export_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notice(const export_job *j, const char *fmt, ...) {
    if (!j->opt->notice) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    j->opt->notice(j->opt->notice_ctx, msg);
}

/* Every graph tensor must exist with exactly the expected shape. */
static okv_status bind_sources(export_job *j, okv_error *err) {
    j->src = calloc((size_t)j->hg.n_tensors + 1, sizeof *j->src);
    if (!j->src) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    for (int t = 0; t < j->hg.n_tensors; t++) {
        const okv_hf_tensor_src *s = &j->hg.srcs[t];
        const okv_tensor *want = &j->hg.tensors[t];
        if (!s->ckpt_name) continue;
        const okv_st_tensor *have = okv_st_find(j->st, s->ckpt_name);
        if (!have) return okv_fail(err, OKV_ERR_FORMAT, "checkpoint has no tensor '%s' (needed by this %s config)",
                                   s->ckpt_name, j->model.architecture);
        if (!have->supported)
            return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (supported: BF16, F16, F32)",
                            have->file, have->name, have->dtype_name);
        bool shape_ok = have->ndim == want->n_dims;
        for (int d = 0; shape_ok && d < want->n_dims; d++) shape_ok = have->shape[d] == want->shape[d];
        if (!shape_ok) {
            char got[96] = "", exp[96] = "";
            for (int d = 0; d < have->ndim && d < 4; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)have->shape[d]);
            for (int d = 0; d < want->n_dims; d++)
                snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", d ? "," : "", (long long)want->shape[d]);
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s' has shape [%s], the config implies [%s]", have->file,
                            have->name, got, exp);
        }
        j->src[t] = have;
    }
    return OKV_OK;
}

/* Group key of an unused tensor: decoder tensors by name with the layer
 * number replaced by N ("layers.N.self_attn.k_proj.weight"), others by
 * their first path component ("vision_tower.*"). */
static void unused_group(const char *name, const char *prefix, char *key, size_t n) {
    size_t pl = strlen(prefix);
    if (!strncmp(name, prefix, pl) && !strncmp(name + pl, "layers.", 7)) {
        const char *rest = name + pl + 7;
        while (*rest >= '0' && *rest <= '9') rest++;
        snprintf(key, n, "layers.N%s", rest);
    } else {
        const char *dot = strchr(name, '.');
        snprintf(key, n, "%.*s.*", dot ? (int)(dot - name) : (int)strlen(name), name);
    }
}

/* Checkpoint tensors the graph does not use (vision towers, k/v of shared
 * layers) are skipped; say which, grouped. */
static void report_unused(const export_job *j) {
    char keys[8][160], line[900] = "";
    int counts[8] = {0}, n_keys = 0, unused = 0;
    for (int i = 0; i < okv_st_count(j->st); i++) {
        const okv_st_tensor *t = okv_st_get(j->st, i);
        bool used = false;
        for (int k = 0; k < j->hg.n_tensors && !used; k++) used = j->src[k] == t;
        if (used) continue;
        unused++;
        char key[160];
        unused_group(t->name, j->model.prefix, key, sizeof key);
        int g = 0;
        while (g < n_keys && strcmp(keys[g], key)) g++;
        if (g == n_keys && n_keys < 8) memcpy(keys[n_keys++], key, sizeof key);
        if (g < 8) counts[g]++;
    }
    for (int g = 0; g < n_keys; g++)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s (%d)", g ? ", " : "", keys[g], counts[g]);
    if (unused) notice(j, "skipped %d checkpoint tensors the text decoder does not use: %s", unused, line);
}

/* ---- quantization plan ------------------------------------------------------ */

/* What a tensor is used for in the graph: a decoder linear (MATMUL on step
 * rows), the LM head (MATMUL on logit rows) or an embedding table. A tied
 * table is both an embedding and the head. */
enum { USE_LINEAR = 1, USE_HEAD = 2, USE_EMBED = 4 };

static int tensor_uses(const okv_graph *g, int t) {
    int uses = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const okv_node *nd = &g->nodes[n];
        if (nd->w[0] != t) continue;
        if (nd->op == OKV_OP_EMBED) uses |= USE_EMBED;
        else if (nd->op == OKV_OP_MATMUL) uses |= g->values[nd->out].logit_rows ? USE_HEAD : USE_LINEAR;
    }
    return uses;
}

/* 4w: asymmetric (an offset per group keeps skewed groups' 16 levels in
 * range); 8w: symmetric (256 levels leave no room for an offset to help). */
static okv_qscheme scheme_for(int bits, int group) {
    return (okv_qscheme){bits, group > 0 ? group : OKV_QGROUP_DEFAULT, bits == 4, OKV_F16};
}

/* Marks the tensors --qlinear / --qembedding quantize. The LM head follows
 * --qembedding in both the tied case (it is the embedding table) and the
 * untied one (the same kind of matrix: vocab rows, quantized alike); with
 * only --qlinear it keeps --dtype. Every quantized K must be a multiple of
 * its group: there is no padding. */
static okv_status plan_quant(export_job *j, okv_error *err) {
    const okv_export_options *o = j->opt;
    if (!o->qlinear && !o->qembedding) return OKV_OK;
    for (int t = 0; t < j->hg.n_tensors; t++) {
        okv_tensor *ts = &j->hg.tensors[t];
        int uses = tensor_uses(&j->hg.graph, t);
        bool emb = uses & (USE_EMBED | USE_HEAD);
        int bits = emb ? o->qembedding : (uses & USE_LINEAR) ? o->qlinear : 0;
        if (!bits || ts->n_dims != 2 || !j->hg.srcs[t].ckpt_name) continue;
        okv_qscheme q = scheme_for(bits, emb ? o->qembedding_group : o->qlinear_group);
        if (ts->shape[1] % q.group)
            return okv_fail(err, OKV_ERR_INVALID,
                            "tensor '%s': input dimension %lld is not a multiple of the %s group size %d", ts->name,
                            (long long)ts->shape[1], emb ? "--qembedding" : "--qlinear", q.group);
        okv_error qerr = {0};
        if (okv_qscheme_check(&q, ts->shape[0], ts->shape[1], ts->name, &qerr))
            return okv_fail(err, OKV_ERR_INVALID, "%s", qerr.message);
        ts->dtype = OKV_T_Q;
        ts->quant = q;
        ts->nbytes = okv_quant_bytes(&q, ts->shape[0], ts->shape[1]);
    }
    return OKV_OK;
}

static okv_status check_quant_options(const okv_export_options *o, okv_error *err) {
    const struct { const char *flag; int bits; int group; } q[2] = {
        {"--qlinear", o->qlinear, o->qlinear_group}, {"--qembedding", o->qembedding, o->qembedding_group}};
    for (int i = 0; i < 2; i++) {
        if (q[i].bits != 0 && q[i].bits != 4 && q[i].bits != 8)
            return okv_fail(err, OKV_ERR_INVALID, "%s: %d bits is not supported (4 or 8)", q[i].flag, q[i].bits);
        if (q[i].group != 0 && q[i].group != 32 && q[i].group != 64 && q[i].group != 128 && q[i].group != 256)
            return okv_fail(err, OKV_ERR_INVALID, "%s group size %d is not supported (32, 64, 128 or 256)", q[i].flag, q[i].group);
    }
    return OKV_OK;
}

/* ---- producing tensor bytes --------------------------------------------------- */

/* Source -> f32 [n] with the source's offset applied (heap; NULL on OOM). */
static float *source_f32(const export_job *j, int t, size_t n) {
    const okv_hf_tensor_src *s = &j->hg.srcs[t];
    float *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return NULL;
    if (!s->ckpt_name) memcpy(tmp, s->computed, n * sizeof *tmp);
    else okv_convert(tmp, OKV_F32, j->src[t]->data, j->src[t]->dtype, n);
    if (s->add != 0.0f)
        for (size_t i = 0; i < n; i++) tmp[i] += s->add;
    return tmp;
}

static okv_status produce_quantized(const export_job *j, int t, void *dst, okv_error *err) {
    const okv_tensor *want = &j->hg.tensors[t];
    float *w = source_f32(j, t, (size_t)want->shape[0] * (size_t)want->shape[1]);
    if (!w) return okv_fail(err, OKV_ERR_NOMEM, "out of memory quantizing '%s'", want->name);
    okv_status st = okv_quantize(&want->quant, w, want->shape[0], want->shape[1], dst, want->name, err);
    free(w);
    return st;
}

static okv_status produce_tensor(void *ctx, int t, void *dst, okv_error *err) {
    export_job *j = ctx;
    if (t >= j->hg.n_tensors) { /* bundled blob */
        const blob *b = &j->blobs[t - j->hg.n_tensors];
        memcpy(dst, b->data, b->len);
        return OKV_OK;
    }
    const okv_tensor *want = &j->hg.tensors[t];
    const okv_hf_tensor_src *s = &j->hg.srcs[t];
    if (want->dtype == OKV_T_Q) return produce_quantized(j, t, dst, err);
    size_t n = want->nbytes / okv_tdtype_size(want->dtype);
    if (!s->ckpt_name) { okv_convert(dst, (okv_dtype)want->dtype, s->computed, OKV_F32, n); return OKV_OK; }
    const okv_st_tensor *src = j->src[t];
    if (s->add == 0.0f) {
        okv_convert(dst, (okv_dtype)want->dtype, src->data, src->dtype, n);
        return OKV_OK;
    }
    float *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return okv_fail(err, OKV_ERR_NOMEM, "out of memory converting '%s'", want->name);
    okv_convert(tmp, OKV_F32, src->data, src->dtype, n);
    for (size_t i = 0; i < n; i++) tmp[i] += s->add;
    okv_convert(dst, (okv_dtype)want->dtype, tmp, OKV_F32, n);
    free(tmp);
    return OKV_OK;
}

/* Multimodal checkpoints name the text decoder differently across
 * transformers versions ("language_model.model." before 4.52,
 * "model.language_model." after): use whichever the file has. */
static void pick_prefix(export_job *j) {
    static const char *const candidates[] = {"model.", "language_model.model.", "model.language_model."};
    char name[160];
    snprintf(name, sizeof name, "%sembed_tokens.weight", j->model.prefix);
    if (okv_st_find(j->st, name)) return;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", candidates[i]);
        if (okv_st_find(j->st, name)) {
            notice(j, "decoder tensors are under '%s' (config suggests '%s')", candidates[i], j->model.prefix);
            snprintf(j->model.prefix, sizeof j->model.prefix, "%s", candidates[i]);
            return;
        }
    }
}

static okv_status add_blob_file(export_job *j, const char *dir, const char *file, okv_error *err) {
    char *path = okv_path_join(dir, file);
    if (!path) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = OKV_OK;
    if (okv_file_exists(path)) {
        blob *b = &j->blobs[j->n_blobs];
        st = okv_read_file(path, &b->data, &b->len, err);
        if (!st) { b->name = okv_strdup(file); j->n_blobs++; }
    }
    free(path);
    return st;
}

/* Bundles the text side of the checkpoint: tokenizer, chat template (in
 * tokenizer_config.json or the newer chat_template.jinja) and the sampling
 * defaults of generation_config.json. */
static okv_status collect_text_files(export_job *j, const char *dir, okv_error *err) {
    okv_status st = add_blob_file(j, dir, "tokenizer.json", err);
    bool have_tokenizer = j->n_blobs > 0;
    if (!st) st = add_blob_file(j, dir, "tokenizer_config.json", err);
    if (!st) st = add_blob_file(j, dir, "chat_template.jinja", err);
    if (!st) st = add_blob_file(j, dir, "generation_config.json", err);
    if (!st && !have_tokenizer)
        notice(j, "%s has no tokenizer.json: the program is exported without a tokenizer; text commands will need --tokenizer",
               dir);
    return st;
}

static char *meta_extra(const export_job *j) {
    cJSON *x = cJSON_CreateObject();
    const okv_hf_model *m = &j->model;
    cJSON_AddNumberToObject(x, "n_heads", m->n_heads);
    cJSON_AddNumberToObject(x, "n_kv_heads", m->n_kv_heads);
    cJSON_AddNumberToObject(x, "head_dim", m->head_dim);
    cJSON_AddNumberToObject(x, "intermediate_size", m->intermediate);
    cJSON_AddNumberToObject(x, "rms_norm_eps", m->rms_eps);
    cJSON_AddNumberToObject(x, "rope_theta", m->rope_full.theta);
    cJSON_AddBoolToObject(x, "tie_word_embeddings", m->tied);
    cJSON_AddNumberToObject(x, "final_logit_softcapping", m->final_softcap);
    cJSON_AddNumberToObject(x, "kv_shared_layers", m->kv_shared_layers);
    char q[64];
    okv_qscheme ql = scheme_for(j->opt->qlinear, j->opt->qlinear_group), qe = scheme_for(j->opt->qembedding, j->opt->qembedding_group);
    cJSON_AddStringToObject(x, "qlinear", j->opt->qlinear ? okv_qscheme_name(&ql, q, sizeof q) : "none");
    cJSON_AddStringToObject(x, "qembedding", j->opt->qembedding ? okv_qscheme_name(&qe, q, sizeof q) : "none");
    char *s = cJSON_PrintUnformatted(x);
    cJSON_Delete(x);
    return s;
}

static okv_status write_program(export_job *j, const char *hf_dir, const char *out_path, okv_error *err) {
    int n = j->hg.n_tensors + j->n_blobs;
    okv_tensor *tensors = calloc((size_t)n, sizeof *tensors);
    if (!tensors) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    memcpy(tensors, j->hg.tensors, (size_t)j->hg.n_tensors * sizeof *tensors);
    for (int b = 0; b < j->n_blobs; b++) {
        okv_tensor *t = &tensors[j->hg.n_tensors + b];
        t->name = j->blobs[b].name;
        t->dtype = OKV_T_U8;
        t->n_dims = 1;
        t->shape[0] = (int64_t)j->blobs[b].len;
        t->nbytes = j->blobs[b].len;
    }
    okv_program_file pf = {0};
    pf.meta.architecture = j->model.architecture;
    pf.meta.dtype = j->opt->dtype;
    pf.meta.vocab_size = j->model.vocab;
    pf.meta.hidden_size = j->model.hidden;
    pf.meta.n_layers = j->model.n_layers;
    pf.meta.bos_id = j->model.bos_id;
    pf.meta.eos_ids = j->model.eos_ids;
    pf.meta.n_eos = j->model.n_eos;
    pf.meta.source = (char *)hf_dir;
    pf.meta.extra_json = meta_extra(j);
    pf.layout = j->layout;
    pf.graph = j->hg.graph;
    pf.n_tensors = n;
    pf.tensors = tensors;
    pf.produce = produce_tensor;
    pf.produce_ctx = j;
    okv_status st = okv_graph_validate(&pf, err);
    if (!st) st = okv_format_write(out_path, &pf, err);
    free(pf.meta.extra_json);
    free(tensors);
    return st;
}

static void job_free(export_job *j) {
    okv_hf_graph_free(&j->hg);
    okv_layout_free(&j->layout);
    okv_st_free(j->st);
    free(j->src);
    for (int b = 0; b < j->n_blobs; b++) { free(j->blobs[b].name); free(j->blobs[b].data); }
}

okv_status okv_export(const char *hf_dir, const char *out_path, const okv_export_options *o, okv_error *err) {
    okv_export_options dflt;
    if (!o) { okv_export_options_default(&dflt); o = &dflt; }
    export_job j = {.opt = o};
    okv_status st = check_quant_options(o, err);
    if (!st) st = okv_hf_load_config(hf_dir, &j.model, err);
    if (!st) st = okv_hf_build_layout(&j.model, o->prefill_chunk_size, o->max_ctx_len, &j.layout, err);
    if (!st) st = okv_st_open_dir(hf_dir, &j.st, err);
    if (!st) pick_prefix(&j);
    if (!st) st = okv_hf_build_graph(&j.model, &j.layout, o->dtype, &j.hg, err);
    if (!st) st = bind_sources(&j, err);
    if (!st) st = plan_quant(&j, err);
    if (!st) report_unused(&j);
    if (!st && j.model.notes[0]) notice(&j, "%s", j.model.notes);
    if (!st) st = collect_text_files(&j, hf_dir, err);
    if (!st) st = write_program(&j, hf_dir, out_path, err);
    job_free(&j);
    return st;
}

okv_status okv_config_describe(const char *path, bool json, const okv_export_options *o, char **out, okv_error *err) {
    okv_export_options dflt;
    if (!o) { okv_export_options_default(&dflt); o = &dflt; }
    okv_hf_model m;
    okv_layout l = {0};
    okv_status st = okv_hf_load_config(path, &m, err);
    if (!st) st = okv_hf_build_layout(&m, o->prefill_chunk_size, o->max_ctx_len, &l, err);
    if (st) return st;
    cJSON *doc = okv_describe_layout_doc(&l, m.architecture, NULL);
    cJSON_AddNumberToObject(doc, "vocab_size", m.vocab);
    cJSON_AddNumberToObject(doc, "hidden_size", m.hidden);
    cJSON_AddNumberToObject(doc, "n_layers", m.n_layers);
    *out = okv_describe_render(doc, json);
    cJSON_Delete(doc);
    okv_layout_free(&l);
    return *out ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
}
