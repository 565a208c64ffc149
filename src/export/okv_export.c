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
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "offkv.h"
#include "okv_calib.h"
#include "okv_common.h"
#include "okv_describe.h"
#include "okv_format.h"
#include "okv_hf.h"
#include "okv_qblock.h"
#include "okv_quant.h"
#include "okv_safetensors.h"
#include "okv_gguf.h"
#include "okv_gguf_model.h"
#include "okv_export_quant.h"
#include "okv_gguf_vocab.h"

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

/* ---- tensor sources ---------------------------------------------------------------
 * One checkpoint tensor under its HF name, wherever it comes from: a
 * safetensors tensor (raw floats okv_convert reads) or a GGUF tensor
 * (dequantized, llama.cpp's conventions undone by okv_gguf_read_hf). Past
 * collect_*_sources the export pipeline sees only these. */
typedef struct export_src {
    const char *name;            /* HF name the graph asks for */
    const char *shown;           /* name in messages (the GGUF tensor's own) */
    const char *file;
    int ndim;
    int64_t shape[OKV_ST_MAX_DIMS];
    bool supported;
    const char *dtype_name;
    const okv_st_tensor *st;     /* safetensors tensor, or NULL */
    const okv_gguf_tensor *gg;   /* GGUF tensor, or NULL */
    okv_gguf_hf_tensor ggh;      /* its HF view */
} export_src;

typedef struct export_job {
    const okv_export_options *opt;
    okv_hf_model model;
    okv_layout layout;
    okv_hf_graph hg;
    okv_st_set *st;
    okv_gguf *gguf;
    export_src *all;             /* every checkpoint tensor, sorted by name */
    int n_all;
    const export_src **src;      /* [hg.n_tensors], NULL for computed */
    blob blobs[4];
    int n_blobs;
    const okv_calib *calib;      /* activation statistics (calibration), or NULL */
    struct okv_threadpool *pool; /* quantization's rows are spread over it (NULL = inline) */
    okv_export_progress progress; /* what produce_tensor has written so far */
    double progress_start;
} export_job;

static int cmp_src_name(const void *a, const void *b) {
    return strcmp(((const export_src *)a)->name, ((const export_src *)b)->name);
}

static const export_src *find_src(const export_job *j, const char *name) {
    export_src key = {.name = name};
    return j->n_all ? bsearch(&key, j->all, (size_t)j->n_all, sizeof key, cmp_src_name) : NULL;
}

/* j->all for n checkpoint tensors, zeroed (one spare so n = 0 allocates). */
static okv_status alloc_sources(export_job *j, int n, okv_error *err) {
    j->n_all = n;
    j->all = calloc((size_t)n + 1, sizeof *j->all);
    return j->all ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
}

static okv_status collect_st_sources(export_job *j, okv_error *err) {
    okv_status st = alloc_sources(j, okv_st_count(j->st), err);
    if (st) return st;
    for (int i = 0; i < j->n_all; i++) {
        const okv_st_tensor *t = okv_st_get(j->st, i);
        export_src *s = &j->all[i];
        *s = (export_src){.name = t->name, .shown = t->name, .file = t->file, .ndim = t->ndim,
                          .supported = t->supported, .dtype_name = t->dtype_name, .st = t};
        memcpy(s->shape, t->shape, sizeof s->shape);
    }
    qsort(j->all, (size_t)j->n_all, sizeof *j->all, cmp_src_name);
    return OKV_OK;
}

/* GGUF tensors under their HF names; ones without an HF counterpart keep
 * their own name (report_unused lists them). */
static okv_status collect_gguf_sources(export_job *j, okv_error *err) {
    okv_status st = alloc_sources(j, okv_gguf_tensor_count(j->gguf), err);
    if (st) return st;
    for (int i = 0; i < j->n_all; i++) {
        const okv_gguf_tensor *t = okv_gguf_tensor_at(j->gguf, i);
        export_src *s = &j->all[i];
        *s = (export_src){.shown = t->name, .file = okv_gguf_path(j->gguf), .gg = t,
                          .supported = okv_ggml_can_dequantize(t->type), .dtype_name = okv_ggml_type_name(t->type)};
        if (okv_gguf_hf_tensor_of(j->gguf, t, &s->ggh)) {
            s->name = s->ggh.name; /* re-pointed after the sort moves s */
            s->ndim = s->ggh.ndim;
            for (int d = 0; d < s->ndim; d++) s->shape[d] = s->ggh.shape[d];
        } else {
            s->name = t->name;
            s->ndim = t->n_dims;
            for (int d = 0; d < t->n_dims; d++) s->shape[d] = t->ne[t->n_dims - 1 - d];
        }
    }
    qsort(j->all, (size_t)j->n_all, sizeof *j->all, cmp_src_name);
    for (int i = 0; i < j->n_all; i++)
        if (j->all[i].ggh.name[0]) j->all[i].name = j->all[i].ggh.name;
    for (int i = 1; i < j->n_all; i++)
        if (!strcmp(j->all[i - 1].name, j->all[i].name))
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensors '%s' and '%s' both map to '%s'", okv_gguf_path(j->gguf),
                            j->all[i - 1].shown, j->all[i].shown, j->all[i].name);
    return OKV_OK;
}

/* Elements [first, first + n) of s as f32 plus `add`, into dst of dtype
 * dt, in row chunks (a GGUF tensor is dequantized chunk by chunk, whole
 * heads at a time when its rows are un-permuted). */
static okv_status src_read(const export_src *s, size_t first, size_t n, float add, void *dst, okv_dtype dt,
                           okv_error *err) {
    if (s->st && add == 0.0f) {
        okv_convert(dst, dt, (const char *)s->st->data + first * okv_dtype_size(s->st->dtype), s->st->dtype, n);
        return OKV_OK;
    }
    size_t row = (size_t)s->shape[s->ndim > 0 ? s->ndim - 1 : 0], rows_per = 1;
    if (s->ndim == 1 || row == 0) row = n;
    if (s->gg && s->ggh.unpermute_heads > 0) rows_per = (size_t)s->shape[0] / (size_t)s->ggh.unpermute_heads;
    else rows_per = row >= (1u << 20) ? 1 : (1u << 20) / row;
    size_t chunk = rows_per * row;
    if (first % row || n % row || (s->ggh.unpermute_heads > 0 && (first % chunk || n % chunk)))
        return okv_fail(err, OKV_ERR_INVALID, "tensor '%s': elements [%zu, +%zu) are not whole rows", s->shown, first, n);
    float *tmp = malloc((chunk < n ? chunk : n) * sizeof *tmp);
    if (!tmp) return okv_fail(err, OKV_ERR_NOMEM, "out of memory converting '%s'", s->shown);
    okv_status st = OKV_OK;
    for (size_t done = 0; done < n && !st; done += chunk) {
        size_t cnt = n - done < chunk ? n - done : chunk;
        if (s->st) okv_convert(tmp, OKV_F32, (const char *)s->st->data + (first + done) * okv_dtype_size(s->st->dtype),
                               s->st->dtype, cnt);
        else st = okv_gguf_read_hf(s->gg, &s->ggh, (int64_t)((first + done) / row), (int64_t)(cnt / row), tmp, err);
        if (st) break;
        if (add != 0.0f)
            for (size_t i = 0; i < cnt; i++) tmp[i] += add;
        okv_convert((char *)dst + done * okv_dtype_size(dt), dt, tmp, OKV_F32, cnt);
    }
    free(tmp);
    return st;
}

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
        const export_src *have = find_src(j, s->ckpt_name);
        if (!have && j->gguf) {
            char gname[160];
            okv_gguf_gguf_name(j->gguf, s->ckpt_name, gname, sizeof gname);
            return okv_fail(err, OKV_ERR_FORMAT, "%s: no tensor '%s' (needed by this %s model)", okv_gguf_path(j->gguf),
                            gname, j->model.architecture);
        }
        if (!have) return okv_fail(err, OKV_ERR_FORMAT, "checkpoint has no tensor '%s' (needed by this %s config)",
                                   s->ckpt_name, j->model.architecture);
        if (!have->supported && have->gg)
            return okv_fail(err, OKV_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has type %s, which cannot be dequantized (supported: F32, F16, BF16, "
                            "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, Q8_K)", have->file, have->shown, have->dtype_name);
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
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s' has shape [%s], the %s implies [%s]", have->file,
                            have->shown, got, j->gguf ? "metadata" : "config", exp);
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
    for (int i = 0; i < j->n_all; i++) {
        const export_src *t = &j->all[i];
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
 * range); 8w: symmetric (256 levels leave no room for an offset to help).
 * A block type name (qlinear_block / qembedding_block, checked by
 * check_quant_options) instead: that GGUF block type. */
static okv_qscheme scheme_for(const okv_export_options *o, bool emb) {
    const char *block = emb ? o->qembedding_block : o->qlinear_block;
    const okv_qblock_info *b = block ? okv_qblock_parse(block) : NULL;
    if (b) return okv_qscheme_block(b->type);
    int bits = emb ? o->qembedding : o->qlinear, group = emb ? o->qembedding_group : o->qlinear_group;
    return (okv_qscheme){bits, group > 0 ? group : OKV_QGROUP_DEFAULT, bits == 4, OKV_F16, OKV_QB_NONE, false};
}

/* Marks the tensors --qlinear / --qembedding quantize. The LM head follows
 * --qembedding in both the tied case (it is the embedding table) and the
 * untied one (the same kind of matrix: vocab rows, quantized alike); with
 * only --qlinear it keeps --dtype. Every quantized K must be a multiple of
 * its group: there is no padding. */
/* The block type a GGUF-sourced matrix keeps (OKV_QB_NONE: it does not):
 * a carried type, read as is (no offset added), K whole blocks. */
static int gguf_kept_block(const export_job *j, int t) {
    const export_src *s = j->src[t];
    const okv_tensor *ts = &j->hg.tensors[t];
    if (j->opt->gguf_dequantize || !s || !s->gg || ts->n_dims != 2) return OKV_QB_NONE;
    const okv_qblock_info *b = okv_qblock_get(s->gg->type);
    if (!b || !b->carried || j->hg.srcs[t].add != 0.0f || s->ggh.add != 0.0f || ts->shape[1] % b->elems)
        return OKV_QB_NONE;
    return b->type;
}

static okv_status plan_quant(export_job *j, okv_error *err) {
    const okv_export_options *o = j->opt;
    /* block-type fallbacks, per kind (0 linear, 1 embedding / head): count, first K, types */
    int fb_count[2] = {0, 0}, fb_total[2] = {0, 0};
    int64_t fb_k[2] = {0, 0};
    okv_qscheme fb_from[2], fb_to[2];
    for (int t = 0; t < j->hg.n_tensors; t++) {
        okv_tensor *ts = &j->hg.tensors[t];
        int uses = tensor_uses(&j->hg.graph, t);
        bool emb = uses & (USE_EMBED | USE_HEAD);
        int bits = emb ? o->qembedding : (uses & USE_LINEAR) ? o->qlinear : 0;
        int block = uses && !bits && j->hg.srcs[t].ckpt_name ? gguf_kept_block(j, t) : OKV_QB_NONE;
        if (block != OKV_QB_NONE) { /* the GGUF's own blocks, as they are */
            ts->dtype = OKV_T_Q;
            ts->quant = okv_qscheme_block(block);
            ts->nbytes = okv_quant_bytes(&ts->quant, ts->shape[0], ts->shape[1]);
            continue;
        }
        if (!bits || ts->n_dims != 2 || !j->hg.srcs[t].ckpt_name) continue;
        okv_qscheme q = scheme_for(o, emb);
        if (q.block != OKV_QB_NONE) {
            fb_total[emb]++;
            if (ts->shape[1] % q.group) { /* a K-quant's 256 does not divide K */
                okv_qscheme f = okv_qscheme_block(okv_qblock_fallback(q.block));
                if (!fb_count[emb]++) fb_k[emb] = ts->shape[1], fb_from[emb] = q, fb_to[emb] = f;
                q = f;
            }
            if (ts->shape[1] % q.group)
                return okv_fail(err, OKV_ERR_INVALID,
                                "tensor '%s': input dimension %lld is not a multiple of %s's block of %d", ts->name,
                                (long long)ts->shape[1], okv_qblock_get(q.block)->name, q.group);
        }
        if (ts->shape[1] % q.group)
            return okv_fail(err, OKV_ERR_INVALID,
                            "tensor '%s': input dimension %lld is not a multiple of the %s group size %d", ts->name,
                            (long long)ts->shape[1], emb ? "embedding" : "linear-weight", q.group);
        okv_error qerr = {0};
        if (okv_qscheme_check(&q, ts->shape[0], ts->shape[1], ts->name, &qerr))
            return okv_fail(err, OKV_ERR_INVALID, "%s", qerr.message);
        ts->dtype = OKV_T_Q;
        ts->quant = q;
        ts->nbytes = okv_quant_bytes(&q, ts->shape[0], ts->shape[1]);
    }
    for (int k = 0; k < 2; k++)
        if (fb_count[k]) {
            const okv_qblock_info *a = okv_qblock_get(fb_from[k].block), *b = okv_qblock_get(fb_to[k].block);
            notice(j, "%s: %d of %d %s matrices have an input dimension %s's %d does not divide (e.g. %lld): quantized as %s "
                      "(%.4g bits/weight, %s %.4g)", k ? "--qembedding" : "--qlinear", fb_count[k], fb_total[k],
                   k ? "embedding / LM head" : "linear", a->name, a->elems, (long long)fb_k[k], b->name,
                   8.0 * b->bytes / b->elems, a->name, 8.0 * a->bytes / a->elems);
        }
    return OKV_OK;
}

static okv_status check_quant_options(const okv_export_options *o, okv_error *err) {
    const struct { const char *what; int bits; int group; const char *block; } q[2] = {
        {"linear-weight", o->qlinear, o->qlinear_group, o->qlinear_block},
        {"embedding", o->qembedding, o->qembedding_group, o->qembedding_block}};
    for (int i = 0; i < 2; i++) {
        if (q[i].block && q[i].bits) { /* bits 0 = off, whatever the block type (the calibration pass) */
            const okv_qblock_info *b = okv_qblock_parse(q[i].block);
            if (!b || !okv_qblock_quantizable(b->type))
                return okv_fail(err, OKV_ERR_INVALID,
                                "%s quantization: block type '%s' is not one offkv quantizes into (q4_0, q4_1, q5_0, "
                                "q5_1, q8_0, q4_K, q5_K, q6_K)", q[i].what, q[i].block);
            continue;
        }
        if (q[i].bits != 0 && q[i].bits != 4 && q[i].bits != 8)
            return okv_fail(err, OKV_ERR_INVALID, "%s quantization: %d bits is not supported (4 or 8)", q[i].what, q[i].bits);
        if (q[i].group != 0 && q[i].group != 32 && q[i].group != 64 && q[i].group != 128 && q[i].group != 256)
            return okv_fail(err, OKV_ERR_INVALID, "%s group size %d is not supported (32, 64, 128 or 256)", q[i].what, q[i].group);
    }
    return OKV_OK;
}

/* ---- producing tensor bytes --------------------------------------------------- */

/* Source -> f32 [n] with the source's offset applied (heap; NULL on OOM). */
static float *source_f32(const export_job *j, int t, size_t n, okv_error *err) {
    const okv_hf_tensor_src *s = &j->hg.srcs[t];
    float *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return NULL;
    if (!s->ckpt_name) memcpy(tmp, s->computed, n * sizeof *tmp);
    else if (src_read(j->src[t], 0, n, s->add, tmp, OKV_F32, err)) { free(tmp); return NULL; }
    return tmp;
}

/* Whether GGUF blocks of `type` are exactly the scheme's groups: Q8_0 =
 * symmetric 8-bit g32, Q4_1 = asymmetric 4-bit g32, Q4_0 = either 4-bit
 * g32 (asymmetric with m = -8d: d*c - 8d = d*(c-8), both exact in f32). */
static bool gguf_blocks_fit(int type, const okv_qscheme *q) {
    if (q->group != 32 || q->scale_dtype != OKV_F16) return false;
    if (type == OKV_GGML_Q8_0) return q->bits == 8 && !q->asym;
    if (type == OKV_GGML_Q4_1) return q->bits == 4 && q->asym;
    if (type == OKV_GGML_Q4_0) return q->bits == 4;
    return false;
}

/* GGUF row holding HF row r (llama.cpp's q/k permutation inverted). */
static int64_t gguf_row_of(const okv_gguf_hf_tensor *h, int64_t rows, int64_t r) {
    if (h->unpermute_heads <= 0) return r;
    int64_t D = rows / h->unpermute_heads, half = D / 2, rr = r % D;
    return r - rr + 2 * (rr % half) + rr / half;
}

static float f16_le(const uint8_t *p) { return okv_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Carries a GGUF tensor's Q8_0/Q4_0/Q4_1 blocks into the scheme without
 * re-quantizing: the program then holds exactly the GGUF's values. */
static okv_status carry_gguf_blocks(const export_src *s, const okv_tensor *want, void *dst, okv_error *err) {
    const int64_t N = want->shape[0], K = want->shape[1], G = K / 32;
    const int type = s->gg->type, ts = okv_ggml_type_size(type);
    uint8_t *codes = malloc((size_t)(N * K));
    float *d = malloc(sizeof(float) * (size_t)(N * G)), *m = want->quant.asym ? malloc(sizeof(float) * (size_t)(N * G)) : NULL;
    if (!codes || !d || (want->quant.asym && !m)) {
        free(codes); free(d); free(m);
        return okv_fail(err, OKV_ERR_NOMEM, "out of memory carrying '%s'", want->name);
    }
    for (int64_t r = 0; r < N; r++) {
        const uint8_t *row = s->gg->data + (size_t)(gguf_row_of(&s->ggh, N, r) * G * ts);
        for (int64_t g = 0; g < G; g++) {
            const uint8_t *b = row + g * ts;
            uint8_t *c = codes + r * K + g * 32;
            float *dd = d + r * G + g;
            *dd = f16_le(b);
            if (type == OKV_GGML_Q8_0) {
                for (int k = 0; k < 32; k++) c[k] = (uint8_t)((int8_t)b[2 + k] + 128);
                continue;
            }
            const uint8_t *qs = b + (type == OKV_GGML_Q4_1 ? 4 : 2);
            for (int k = 0; k < 16; k++) { c[k] = qs[k] & 0x0f; c[k + 16] = qs[k] >> 4; }
            if (m) m[r * G + g] = type == OKV_GGML_Q4_1 ? f16_le(b + 2) : -8.0f * *dd;
        }
    }
    okv_quant_pack(&want->quant, N, K, codes, d, m, dst);
    free(codes);
    free(d);
    free(m);
    return OKV_OK;
}

/* Copies a GGUF tensor's blocks row by row (llama.cpp's q/k row order
 * undone; rows are whole blocks) into a block-typed program tensor. */
static okv_status carry_gguf_raw(const export_src *s, const okv_tensor *want, void *dst, okv_error *err) {
    const int64_t N = want->shape[0];
    const size_t row = (size_t)okv_quant_bytes(&want->quant, 1, want->shape[1]);
    if (s->gg->nbytes != (uint64_t)N * row)
        return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': %llu bytes where [%lld, %lld] in %s needs %llu", s->shown,
                        (unsigned long long)s->gg->nbytes, (long long)N, (long long)want->shape[1],
                        okv_qblock_get(want->quant.block)->name, (unsigned long long)((uint64_t)N * row));
    int heads = s->ggh.unpermute_heads;
    if (heads > 0 && (N % heads || (N / heads) % 2))
        return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': %lld rows do not split into %d heads of even size", s->shown,
                        (long long)N, heads);
    for (int64_t r = 0; r < N; r++)
        memcpy((uint8_t *)dst + (size_t)r * row, s->gg->data + (size_t)gguf_row_of(&s->ggh, N, r) * row, row);
    return OKV_OK;
}

static okv_status produce_quantized(const export_job *j, int t, void *dst, okv_error *err) {
    const okv_tensor *want = &j->hg.tensors[t];
    const export_src *s = j->src[t];
    if (want->quant.block != OKV_QB_NONE && s && s->gg && (int)s->gg->type == want->quant.block && j->hg.srcs[t].add == 0.0f &&
        s->ggh.add == 0.0f) /* kept, or already in the block type asked for */
        return carry_gguf_raw(s, want, dst, err);
    if (s && s->gg && j->hg.srcs[t].add == 0.0f && s->ggh.add == 0.0f && gguf_blocks_fit(s->gg->type, &want->quant))
        return carry_gguf_blocks(s, want, dst, err);
    err->status = OKV_OK;
    float *w = source_f32(j, t, (size_t)want->shape[0] * (size_t)want->shape[1], err);
    if (!w) return err->status ? err->status : okv_fail(err, OKV_ERR_NOMEM, "out of memory quantizing '%s'", want->name);
    float *imp = j->calib ? malloc(sizeof(float) * (size_t)want->shape[1]) : NULL;
    if (imp && !okv_calib_importance(j->calib, want->name, (int)want->shape[1], imp)) { free(imp); imp = NULL; }
    okv_status st = okv_export_quantize(j->pool, &want->quant, w, want->shape[0], want->shape[1], imp, dst, want->name, err);
    free(imp);
    free(w);
    return st;
}

static okv_status produce_one(export_job *j, int t, void *dst, okv_error *err) {
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
    return src_read(j->src[t], 0, n, s->add, dst, (okv_dtype)want->dtype, err);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The writer's callback: one tensor, then a progress report. */
static okv_status produce_tensor(void *ctx, int t, void *dst, okv_error *err) {
    export_job *j = ctx;
    okv_status st = produce_one(j, t, dst, err);
    if (st || !j->opt->progress) return st;
    const uint64_t nbytes = t >= j->hg.n_tensors ? j->blobs[t - j->hg.n_tensors].len : j->hg.tensors[t].nbytes;
    j->progress.tensors_done++;
    j->progress.bytes_done += nbytes;
    j->progress.seconds = now_seconds() - j->progress_start;
    j->opt->progress(j->opt->progress_ctx, &j->progress);
    return OKV_OK;
}

/* Multimodal checkpoints name the text decoder differently across
 * transformers versions ("language_model.model." before 4.52,
 * "model.language_model." after): use whichever the file has. */
static void pick_prefix(export_job *j) {
    static const char *const candidates[] = {"model.", "language_model.model.", "model.language_model."};
    char name[160];
    snprintf(name, sizeof name, "%sembed_tokens.weight", j->model.prefix);
    if (find_src(j, name)) return;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        snprintf(name, sizeof name, "%sembed_tokens.weight", candidates[i]);
        if (find_src(j, name)) {
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
        notice(j, "%s has no tokenizer.json: the program is exported without a tokenizer; text commands will need a tokenizer.json given separately",
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
    okv_qscheme ql = scheme_for(j->opt, false), qe = scheme_for(j->opt, true);
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
    j->progress = (okv_export_progress){.n_tensors = n};
    for (int t = 0; t < n; t++) j->progress.total_bytes += tensors[t].nbytes;
    j->progress_start = now_seconds();
    okv_status st = okv_program_validate(&pf, err);   /* the loader's rules, before anything is written */
    if (st) okv_fail_prefix(err, "export would write a program offkv cannot load");
    if (!st) st = okv_format_write(out_path, &pf, err);
    free(pf.meta.extra_json);
    free(tensors);
    return st;
}

static void job_free(export_job *j) {
    okv_hf_graph_free(&j->hg);
    okv_layout_free(&j->layout);
    okv_st_free(j->st);
    okv_gguf_close(j->gguf);
    free(j->all);
    free(j->src);
    okv_export_pool_free(j->pool);
    for (int b = 0; b < j->n_blobs; b++) { free(j->blobs[b].name); free(j->blobs[b].data); }
}

/* ---- GGUF input ----------------------------------------------------------------------- */

/* Llama-3.x GGUFs carry llama3 RoPE scaling as rope_freqs.weight ([D/2]
 * divisors of the base inverse frequencies) instead of metadata. */
static okv_status apply_rope_freqs(export_job *j, okv_error *err) {
    const okv_gguf_tensor *rf = okv_gguf_find_tensor(j->gguf, "rope_freqs.weight");
    if (!rf) return OKV_OK;
    for (int t = 0; t < j->hg.n_tensors; t++) {
        okv_hf_tensor_src *s = &j->hg.srcs[t];
        if (s->ckpt_name || strncmp(j->hg.tensors[t].name, "rope.", 5)) continue;
        int64_t n = j->hg.tensors[t].shape[0];
        if (rf->type != OKV_GGML_F32 || rf->n_dims != 1 || rf->ne[0] != n)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor 'rope_freqs.weight' must be F32 [%lld]",
                            okv_gguf_path(j->gguf), (long long)n);
        float *f = malloc((size_t)n * sizeof *f);
        if (!f) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
        okv_status st = okv_gguf_dequantize(rf, 0, (uint64_t)n, f, err);
        for (int64_t i = 0; !st && i < n; i++) {
            if (!(f[i] > 0)) st = okv_fail(err, OKV_ERR_FORMAT, "%s: rope_freqs.weight[%lld] is not positive",
                                           okv_gguf_path(j->gguf), (long long)i);
            else s->computed[i] /= f[i];
        }
        free(f);
        if (st) return st;
    }
    notice(j, "rope_freqs.weight applied to the RoPE frequencies (llama3 scaling)");
    return OKV_OK;
}

static void add_blob_text(export_job *j, const char *name, char **text, size_t len) {
    if (!*text) return;
    blob *b = &j->blobs[j->n_blobs++];
    b->name = okv_strdup(name);
    b->data = *text;
    b->len = len;
    *text = NULL;
}

/* End-of-generation ids from the synthesised generation_config.json. */
static void eos_from_generation_config(export_job *j, const char *text) {
    cJSON *g = cJSON_Parse(text);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(g, "eos_token_id"), *x;
    int n = 0, ids[16];
    if (cJSON_IsNumber(e)) ids[n++] = e->valueint;
    else cJSON_ArrayForEach(x, e) if (cJSON_IsNumber(x) && n < 16) ids[n++] = x->valueint;
    bool ok = n > 0;
    for (int i = 0; i < n; i++) ok = ok && ids[i] >= 0 && ids[i] < j->model.vocab;
    if (ok) { memcpy(j->model.eos_ids, ids, (size_t)n * sizeof *ids); j->model.n_eos = n; }
    cJSON_Delete(g);
}

/* tokenizer.ggml.* -> tokenizer.json, tokenizer_config.json and
 * generation_config.json (the gguf layer reads and checks the keys),
 * bundled exactly like an HF directory's files. A GGUF without a
 * vocabulary exports without a tokenizer, with a notice. */
static okv_status gguf_text_files(export_job *j, okv_error *err) {
    const okv_gguf *g = j->gguf;
    okv_gguf_str model;
    okv_error e = {0};
    bool none = okv_gguf_get_str(g, "tokenizer.ggml.model", &model, &e) == OKV_OK && model.len == 4 &&
                !memcmp(model.ptr, "none", 4); /* llama.cpp's "no vocabulary" (benchmark files) */
    if (!okv_gguf_find(g, "tokenizer.ggml.model") || none) {
        notice(j, "%s has no tokenizer (tokenizer.ggml.model missing or \"none\"): the program is exported without a tokenizer; text commands will "
               "need a tokenizer.json given separately", okv_gguf_path(g));
        return OKV_OK;
    }
    okv_gguf_vocab_texts t = {0};
    okv_status st = okv_gguf_tokenizer_texts(g, &t, err);
    if (!st) {
        if (t.generation_config_json) eos_from_generation_config(j, t.generation_config_json);
        add_blob_text(j, "tokenizer.json", &t.tokenizer_json, t.tokenizer_json_len);
        add_blob_text(j, "tokenizer_config.json", &t.tokenizer_config_json, t.tokenizer_config_json_len);
        add_blob_text(j, "generation_config.json", &t.generation_config_json, t.generation_config_json_len);
    }
    okv_gguf_vocab_texts_free(&t);
    return st;
}

/* Says how many quantized tensors keep the GGUF's own blocks. */
static void report_carried(const export_job *j) {
    int carried = 0, requant = 0, dequant = 0;
    for (int t = 0; t < j->hg.n_tensors; t++) {
        const export_src *s = j->src[t];
        if (!s || !s->gg || !okv_qblock_get(s->gg->type)) continue;
        const okv_tensor *ts = &j->hg.tensors[t];
        if (ts->dtype != OKV_T_Q) dequant++;
        else if (ts->quant.block != OKV_QB_NONE || gguf_blocks_fit(s->gg->type, &ts->quant)) carried++;
        else requant++;
    }
    if (carried || requant || dequant)
        notice(j,
               "%d quantized tensors keep the GGUF's own blocks exactly, %d are dequantized and quantized again, %d are "
               "dequantized to %s",
               carried, requant, dequant, okv_dtype_name(j->opt->dtype));
}

/* GGUF: metadata -> the config.json HF would have -> the same model
 * description, graph and writer as an HF directory. */
static okv_status export_gguf(const char *path, const char *out_path, const okv_export_options *o, const okv_calib *calib,
                              okv_error *err) {
    export_job j = {.opt = o, .calib = calib, .pool = o->qlinear || o->qembedding ? okv_export_pool_create(o->n_threads) : NULL};
    char *config = NULL;
    okv_status st = check_quant_options(o, err);
    if (!st) st = okv_gguf_open(path, &j.gguf, err);
    if (!st) st = okv_gguf_hf_config(j.gguf, &config, err);
    if (!st) st = okv_hf_parse_config(config, strlen(config), path, &j.model, err);
    if (!st && j.model.bos_id >= j.model.vocab) j.model.bos_id = -1;
    if (!st) st = okv_hf_build_layout(&j.model, o->prefill_chunk_size, o->max_ctx_len, &j.layout, err);
    if (!st) st = collect_gguf_sources(&j, err);
    if (!st) st = okv_hf_build_graph(&j.model, &j.layout, o->dtype, &j.hg, err);
    if (!st) st = bind_sources(&j, err);
    if (!st) st = apply_rope_freqs(&j, err);
    if (!st) st = plan_quant(&j, err);
    if (!st) report_unused(&j);
    if (!st && j.model.notes[0]) notice(&j, "%s", j.model.notes);
    if (!st) st = gguf_text_files(&j, err);
    for (int i = 0; !st && i < j.model.n_eos; i++)
        if (j.model.eos_ids[i] < 0 || j.model.eos_ids[i] >= j.model.vocab)
            st = okv_fail(err, OKV_ERR_FORMAT, "%s: eos token id %d is outside the vocabulary (%d)", path,
                          j.model.eos_ids[i], j.model.vocab);
    if (!st) st = write_program(&j, path, out_path, err);
    if (!st) report_carried(&j); /* after the write: a failed export says one line */
    free(config);
    job_free(&j);
    return st;
}

static okv_status export_hf(const char *hf_dir, const char *out_path, const okv_export_options *o, const okv_calib *calib,
                            okv_error *err) {
    export_job j = {.opt = o, .calib = calib, .pool = o->qlinear || o->qembedding ? okv_export_pool_create(o->n_threads) : NULL};
    okv_status st = check_quant_options(o, err);
    if (!st) st = okv_check_output_path(out_path, err); /* before the slow part; checked again at the end */
    if (!st) st = okv_hf_load_config(hf_dir, &j.model, err);
    if (!st) st = okv_hf_build_layout(&j.model, o->prefill_chunk_size, o->max_ctx_len, &j.layout, err);
    if (!st) st = okv_st_open_dir(hf_dir, &j.st, err);
    if (!st) st = collect_st_sources(&j, err);
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

/* ---- calibration ------------------------------------------------------------------ */

static void calib_progress(void *ctx, int64_t done, int64_t total, double seconds) {
    const okv_export_options *o = ctx;
    okv_export_progress p = {0};
    p.calib_tokens_done = done;
    p.calib_tokens = total;
    p.seconds = seconds;
    o->progress(o->progress_ctx, &p);
}

/* The calibration pass: the same checkpoint exported without quantization
 * to a temporary program next to the output (removed afterwards), run over
 * the calibration tokens (okv_calib.c). */
static okv_status calibrate(const char *src, const char *out_path, const okv_export_options *o, okv_calib *c,
                            okv_error *err) {
    if (!o->qlinear && !o->qembedding)
        return okv_fail(err, OKV_ERR_INVALID,
                        "calibration needs --qlinear or --qembedding (it only changes how weights are quantized)");
    if (o->calibration_ctx < 0 || o->calibration_ctx == 1)
        return okv_fail(err, OKV_ERR_INVALID, "calibration window of %d tokens (want >= 2, 0 = 512)", o->calibration_ctx);
    if (!o->calibration_file && o->n_calibration_ids <= 0)
        return okv_fail(err, OKV_ERR_INVALID, "calibration token stream has no tokens");
    if (o->calibration_file) { /* before the slow float export */
        FILE *f = fopen(o->calibration_file, "rb");
        if (!f) return okv_fail(err, OKV_ERR_IO, "calibration file %s: %s", o->calibration_file, strerror(errno));
        fclose(f);
    }
    okv_export_options fo = *o;
    fo.qlinear = fo.qembedding = 0;
    fo.calibration_file = NULL;
    fo.calibration_ids = NULL;
    fo.n_calibration_ids = 0;
    fo.notice = NULL;
    fo.progress = NULL;
    fo.max_ctx_len = o->calibration_ctx > 0 ? o->calibration_ctx : 512;
    fo.prefill_chunk_size = 0; /* the default for that length (the output's chunk may exceed it) */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.calib-%ld.tmp", out_path, (long)getpid()) >= (int)sizeof tmp)
        return okv_fail(err, OKV_ERR_INVALID, "output path too long: %s", out_path);
    notice(&(export_job){.opt = o}, "calibration: running the float model over %s",
           o->calibration_file ? o->calibration_file : "the calibration tokens");
    okv_status st = okv_is_gguf_file(src) ? export_gguf(src, tmp, &fo, NULL, err) : export_hf(src, tmp, &fo, NULL, err);
    if (st) okv_fail_prefix(err, "calibration (float program)");
    okv_calib_source cs = {o->calibration_file, o->calibration_ids, o->n_calibration_ids, fo.max_ctx_len, o->n_threads,
                           o->progress ? calib_progress : NULL, (void *)o};
    if (!st) st = okv_calib_collect(tmp, &cs, c, err);
    unlink(tmp);
    if (!st)
        notice(&(export_job){.opt = o}, "calibration: %lld tokens, statistics for %d weight tensors", (long long)c->tokens,
               c->n);
    return st;
}

okv_status okv_export(const char *hf_dir, const char *out_path, const okv_export_options *o, okv_error *err) {
    okv_export_options dflt;
    if (!o) { okv_export_options_default(&dflt); o = &dflt; }
    okv_calib calib = {0};
    bool calibrated = o->calibration_file || o->calibration_ids || o->n_calibration_ids;
    okv_status st = check_quant_options(o, err);
    if (!st && calibrated) st = okv_check_output_path(out_path, err);
    if (!st && calibrated) st = calibrate(hf_dir, out_path, o, &calib, err);
    if (!st) st = okv_is_gguf_file(hf_dir) ? export_gguf(hf_dir, out_path, o, calibrated ? &calib : NULL, err)
                                           : export_hf(hf_dir, out_path, o, calibrated ? &calib : NULL, err);
    okv_calib_free(&calib);
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
