/* okv_format.c — writing and reading (mmap or a huge-page copy, + validation) of program files.
 * See okv_format.h for the on-disk layout. The JSON header is built and
 * parsed with cJSON; every field read from a file is range-checked here
 * (and the tensor table proved free of overlapping data and repeated names)
 * so the runtime can trust an okv_program_file it got from okv_format_open. */
#include "okv_format.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "okv_common.h"

static const char OKV_MAGIC[8] = {'O', 'K', 'V', 'P', 'R', 'O', 'G', 0};
#define FIXED_HEADER_SIZE 48

static const char *const OP_NAMES[OKV_OP_COUNT] = {
    "embed", "rmsnorm", "matmul", "rope", "update_and_attend", "glu",
    "add", "mul", "scale", "softcap", "slice", "select_rows"};

const char *okv_op_name(okv_op op) { return op < OKV_OP_COUNT ? OP_NAMES[op] : "?"; }

int okv_op_parse(const char *name) {
    for (int i = 0; i < OKV_OP_COUNT; i++)
        if (name && !strcmp(name, OP_NAMES[i])) return i;
    return -1;
}

size_t okv_tdtype_size(okv_tdtype t) {
    return t == OKV_T_U8 ? 1 : t == OKV_T_Q ? 0 : okv_dtype_size((okv_dtype)t);
}

const char *okv_tdtype_name(okv_tdtype t) {
    return t == OKV_T_U8 ? "u8" : t == OKV_T_Q ? "q" : okv_dtype_name((okv_dtype)t);
}

static int tdtype_parse(const char *s, okv_tdtype *out) {
    if (s && !strcmp(s, "u8")) { *out = OKV_T_U8; return 0; }
    if (s && !strcmp(s, "q")) { *out = OKV_T_Q; return 0; }
    okv_dtype d;
    if (okv_dtype_parse(s, &d)) return -1;
    *out = (okv_tdtype)d;
    return 0;
}

uint64_t okv_tensor_nbytes(const okv_tensor *t) {
    if (t->dtype == OKV_T_Q) {
        if (t->n_dims != 2 || okv_qscheme_check(&t->quant, t->shape[0], t->shape[1], t->name, NULL)) return 0;
        return okv_quant_bytes(&t->quant, t->shape[0], t->shape[1]);
    }
    uint64_t count = okv_tdtype_size(t->dtype);
    for (int d = 0; d < t->n_dims; d++) {
        if (t->shape[d] < 0 || (t->shape[d] && count > UINT64_MAX / (uint64_t)t->shape[d])) return 0;
        count *= (uint64_t)t->shape[d];
    }
    return count;
}

const char *okv_tensor_scheme_name(const okv_tensor *t, char *buf, size_t n) {
    if (t->dtype == OKV_T_Q) return okv_qscheme_name(&t->quant, buf, n);
    snprintf(buf, n, "%s", okv_tdtype_name(t->dtype));
    return buf;
}

static uint32_t crc32_bytes(const void *data, size_t n) {
    static const uint32_t poly = 0xEDB88320u;
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (poly & (0u - (c & 1u)));
    }
    return ~c;
}

static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get_u32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | p[i]; return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | p[i]; return v; }
static uint64_t align_up(uint64_t x) { return (x + OKV_ALIGN - 1) / OKV_ALIGN * OKV_ALIGN; }

/* ---- JSON header: building ------------------------------------------------ */

static cJSON *int_array(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *meta_to_json(const okv_meta *m) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "architecture", m->architecture ? m->architecture : "");
    cJSON_AddStringToObject(j, "dtype", okv_dtype_name(m->dtype));
    cJSON_AddNumberToObject(j, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(j, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(j, "n_layers", m->n_layers);
    cJSON_AddNumberToObject(j, "bos_id", m->bos_id);
    cJSON_AddItemToObject(j, "eos_ids", int_array(m->eos_ids, m->n_eos));
    cJSON_AddStringToObject(j, "source", m->source ? m->source : "");
    cJSON *extra = m->extra_json ? cJSON_Parse(m->extra_json) : NULL;
    cJSON_AddItemToObject(j, "extra", extra ? extra : cJSON_CreateObject());
    return j;
}

cJSON *okv_layout_to_json(const okv_layout *l) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "n_caches", l->n_caches);
    cJSON_AddItemToObject(j, "kv_heads", int_array(l->kv_heads, l->n_caches));
    cJSON_AddItemToObject(j, "head_dims", int_array(l->head_dims, l->n_caches));
    cJSON_AddItemToObject(j, "windows", int_array(l->windows, l->n_caches));
    cJSON_AddItemToObject(j, "layer_to_cache", int_array(l->layer_to_cache, l->n_layers));
    cJSON_AddNumberToObject(j, "prefill_chunk_size", l->prefill_chunk_size);
    cJSON_AddNumberToObject(j, "max_ctx_len", l->max_ctx_len);
    return j;
}

static cJSON *graph_to_json(const okv_graph *g) {
    cJSON *j = cJSON_CreateObject();
    cJSON *vals = cJSON_AddArrayToObject(j, "values");
    for (int v = 0; v < g->n_values; v++) {
        int pair[2] = {g->values[v].width, g->values[v].logit_rows};
        cJSON_AddItemToArray(vals, int_array(pair, 2));
    }
    cJSON *nodes = cJSON_AddArrayToObject(j, "nodes");
    for (int n = 0; n < g->n_nodes; n++) {
        const okv_node *nd = &g->nodes[n];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", okv_op_name(nd->op));
        cJSON_AddItemToObject(o, "in", int_array(nd->in, OKV_NODE_MAX_IN));
        cJSON_AddNumberToObject(o, "out", nd->out);
        cJSON_AddItemToObject(o, "w", int_array(nd->w, 2));
        cJSON_AddItemToObject(o, "i", int_array(nd->i, OKV_NODE_MAX_I));
        cJSON *fa = cJSON_AddArrayToObject(o, "f");
        for (int k = 0; k < OKV_NODE_MAX_F; k++) cJSON_AddItemToArray(fa, cJSON_CreateNumber(nd->f[k]));
        cJSON_AddItemToArray(nodes, o);
    }
    cJSON_AddNumberToObject(j, "output", g->output);
    return j;
}

cJSON *okv_tensors_to_json(const okv_program_file *pf, const uint64_t *offsets) {
    cJSON *arr = cJSON_CreateArray();
    for (int t = 0; t < pf->n_tensors; t++) {
        const okv_tensor *ts = &pf->tensors[t];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", ts->name);
        cJSON_AddStringToObject(o, "dtype", okv_tdtype_name(ts->dtype));
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < ts->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts->shape[d]));
        cJSON_AddNumberToObject(o, "offset", (double)(offsets ? offsets[t] : ts->offset));
        cJSON_AddNumberToObject(o, "nbytes", (double)ts->nbytes);
        if (ts->dtype == OKV_T_Q) {
            cJSON *q = cJSON_AddObjectToObject(o, "quant");
            cJSON_AddNumberToObject(q, "bits", ts->quant.bits);
            cJSON_AddNumberToObject(q, "group", ts->quant.group);
            cJSON_AddBoolToObject(q, "asym", ts->quant.asym);
            cJSON_AddStringToObject(q, "scale_dtype", okv_dtype_name(ts->quant.scale_dtype));
            if (ts->quant.block != OKV_QB_NONE) {
                const okv_qblock_info *b = okv_qblock_get(ts->quant.block);
                cJSON_AddStringToObject(q, "block", b ? b->name : "?");
            }
        }
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* ---- writing -------------------------------------------------------------- */

static okv_status write_all(FILE *f, const void *p, size_t n, const char *path, okv_error *err) {
    if (n && fwrite(p, 1, n, f) != n) return okv_fail(err, OKV_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return OKV_OK;
}

static okv_status write_zeros(FILE *f, uint64_t n, const char *path, okv_error *err) {
    static const uint8_t zeros[OKV_ALIGN];
    while (n) {
        size_t k = n > OKV_ALIGN ? OKV_ALIGN : (size_t)n;
        okv_status st = write_all(f, zeros, k, path, err);
        if (st) return st;
        n -= k;
    }
    return OKV_OK;
}

static okv_status write_tensor_data(FILE *f, const okv_program_file *pf, int t, const char *path, okv_error *err) {
    const okv_tensor *ts = &pf->tensors[t];
    if (ts->data || !ts->nbytes) return write_all(f, ts->data, ts->nbytes, path, err);
    if (!pf->produce) return okv_fail(err, OKV_ERR_INVALID, "tensor '%s' has no data", ts->name);
    void *buf = malloc(ts->nbytes);
    if (!buf) return okv_fail(err, OKV_ERR_NOMEM, "out of memory for tensor '%s' (%llu bytes)", ts->name,
                              (unsigned long long)ts->nbytes);
    okv_status st = pf->produce(pf->produce_ctx, t, buf, err);
    if (!st) st = write_all(f, buf, ts->nbytes, path, err);
    free(buf);
    return st;
}

static okv_status write_body(FILE *f, const okv_program_file *pf, const char *path, okv_error *err) {
    uint64_t *offsets = calloc((size_t)pf->n_tensors + 1, sizeof *offsets);
    if (!offsets) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path);
    uint64_t data_size = 0;
    uint32_t version = OKV_FORMAT_VERSION_MIN;   /* the oldest version that can hold these tensors */
    for (int t = 0; t < pf->n_tensors; t++) {
        offsets[t] = data_size;
        data_size = align_up(data_size + pf->tensors[t].nbytes);
        if (pf->tensors[t].dtype == OKV_T_Q && version < 2) version = 2;
        if (pf->tensors[t].dtype == OKV_T_Q && pf->tensors[t].quant.block != OKV_QB_NONE) version = 3;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "offkv");
    cJSON_AddNumberToObject(root, "version", version);
    cJSON_AddItemToObject(root, "meta", meta_to_json(&pf->meta));
    cJSON_AddItemToObject(root, "layout", okv_layout_to_json(&pf->layout));
    cJSON_AddItemToObject(root, "graph", graph_to_json(&pf->graph));
    cJSON_AddItemToObject(root, "tensors", okv_tensors_to_json(pf, offsets));
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) { free(offsets); return okv_fail(err, OKV_ERR_NOMEM, "%s: cannot build header", path); }

    uint64_t hlen = strlen(json);
    uint64_t data_off = align_up(FIXED_HEADER_SIZE + hlen);
    uint8_t fixed[FIXED_HEADER_SIZE] = {0};
    memcpy(fixed, OKV_MAGIC, 8);
    put_u32(fixed + 8, version);
    put_u32(fixed + 12, crc32_bytes(json, hlen));
    put_u64(fixed + 16, hlen);
    put_u64(fixed + 24, data_off);
    put_u64(fixed + 32, data_size);
    okv_status st = write_all(f, fixed, sizeof fixed, path, err);
    if (!st) st = write_all(f, json, hlen, path, err);
    if (!st) st = write_zeros(f, data_off - FIXED_HEADER_SIZE - hlen, path, err);
    for (int t = 0; !st && t < pf->n_tensors; t++) {
        const okv_tensor *ts = &pf->tensors[t];
        st = write_tensor_data(f, pf, t, path, err);
        if (!st) st = write_zeros(f, align_up(ts->nbytes) - ts->nbytes, path, err);
    }
    free(json);
    free(offsets);
    return st;
}

/* Written through okv_out_file: an unnamed file put in place at the end, so a
 * failed or killed export leaves neither a partial program nor a temporary,
 * and an -o that is not a regular file (device, symlink) is refused. */
okv_status okv_format_write(const char *path, const okv_program_file *pf, okv_error *err) {
    okv_out_file o;
    okv_status st = okv_out_file_create(path, &o, err);
    if (st) return st;
    int fd = dup(o.fd);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        st = okv_fail(err, OKV_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        okv_out_file_abort(&o);
        return st;
    }
    st = write_body(f, pf, path, err);
    if (fclose(f) != 0 && !st) st = okv_fail(err, OKV_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (!st) st = okv_out_file_commit(&o, err);
    else okv_out_file_abort(&o);
    return st;
}

/* ---- reading: JSON -> structs, with validation ----------------------------- */

/* Reads an int array of exactly n entries (n < 0: any length, stored in *len). */
static okv_status read_int_array(const cJSON *obj, const char *key, int **out, int n, int *len,
                                 const char *what, okv_error *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsArray(a)) return okv_fail(err, OKV_ERR_FORMAT, "%s: '%s' must be an array", what, key);
    int cnt = cJSON_GetArraySize(a);
    if (n >= 0 && cnt != n)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: '%s' has %d entries, expected %d", what, key, cnt, n);
    int *v = calloc((size_t)cnt + 1, sizeof *v);
    if (!v) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        int64_t x;
        if (!okv_json_item_int(e, INT_MIN, INT_MAX, &x)) {
            free(v);
            return okv_fail(err, OKV_ERR_FORMAT, "%s: '%s'[%d] must be an integer in the int range", what, key, i);
        }
        v[i++] = (int)x;
    }
    *out = v;
    if (len) *len = cnt;
    return OKV_OK;
}

static okv_status read_int(const cJSON *obj, const char *key, int *out, int lo, int hi, const char *what, okv_error *err) {
    int64_t v;
    okv_status st = okv_json_req_int(obj, key, &v, what, err);
    if (st) return st;
    if (v < lo || v > hi)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: '%s' = %lld out of range [%d, %d]", what, key, (long long)v, lo, hi);
    *out = (int)v;
    return OKV_OK;
}

static okv_status parse_meta(const cJSON *j, okv_meta *m, okv_error *err) {
    const char *w = "program meta";
    if (!cJSON_IsObject(j)) return okv_fail(err, OKV_ERR_FORMAT, "program header: 'meta' missing");
    const char *arch = okv_json_str(j, "architecture"), *dt = okv_json_str(j, "dtype");
    if (!arch || !dt || okv_dtype_parse(dt, &m->dtype))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: 'architecture'/'dtype' missing or invalid", w);
    m->architecture = okv_strdup(arch);
    m->source = okv_strdup(okv_json_str(j, "source") ? okv_json_str(j, "source") : "");
    /* ranges are okv_meta_validate's job (shared with export) */
    okv_status st = read_int(j, "vocab_size", &m->vocab_size, INT_MIN, INT_MAX, w, err);
    if (!st) st = read_int(j, "hidden_size", &m->hidden_size, INT_MIN, INT_MAX, w, err);
    if (!st) st = read_int(j, "n_layers", &m->n_layers, INT_MIN, INT_MAX, w, err);
    if (!st) st = read_int(j, "bos_id", &m->bos_id, INT_MIN, INT_MAX, w, err);
    if (!st) st = read_int_array(j, "eos_ids", &m->eos_ids, -1, &m->n_eos, w, err);
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(j, "extra");
    if (!st && extra) m->extra_json = cJSON_PrintUnformatted(extra);
    return st;
}

static okv_status parse_layout(const cJSON *j, okv_layout *l, okv_error *err) {
    const char *w = "program layout";
    if (!cJSON_IsObject(j)) return okv_fail(err, OKV_ERR_FORMAT, "program header: 'layout' missing");
    /* ranges are okv_layout_validate's job (via okv_program_validate) */
    okv_status st = read_int(j, "n_caches", &l->n_caches, 1, INT_MAX, w, err);
    if (!st) st = read_int_array(j, "kv_heads", &l->kv_heads, l->n_caches, NULL, w, err);
    if (!st) st = read_int_array(j, "head_dims", &l->head_dims, l->n_caches, NULL, w, err);
    if (!st) st = read_int_array(j, "windows", &l->windows, l->n_caches, NULL, w, err);
    if (!st) st = read_int_array(j, "layer_to_cache", &l->layer_to_cache, -1, &l->n_layers, w, err);
    if (!st) st = read_int(j, "prefill_chunk_size", &l->prefill_chunk_size, INT_MIN, INT_MAX, w, err);
    if (!st) st = read_int(j, "max_ctx_len", &l->max_ctx_len, INT_MIN, INT_MAX, w, err);
    return st;
}

static okv_status parse_node(const cJSON *o, okv_node *nd, int idx, okv_error *err) {
    char w[64];
    snprintf(w, sizeof w, "graph node %d", idx);
    if (!cJSON_IsObject(o)) return okv_fail(err, OKV_ERR_FORMAT, "%s: not an object", w);
    int op = okv_op_parse(okv_json_str(o, "op"));
    if (op < 0) return okv_fail(err, OKV_ERR_FORMAT, "%s: unknown op '%s'", w, okv_json_str(o, "op") ? okv_json_str(o, "op") : "(none)");
    nd->op = (okv_op)op;
    int *in = NULL, *wt = NULL, *ia = NULL, nf = 0;
    okv_status st = read_int_array(o, "in", &in, OKV_NODE_MAX_IN, NULL, w, err);
    if (!st) st = read_int_array(o, "w", &wt, 2, NULL, w, err);
    if (!st) st = read_int_array(o, "i", &ia, OKV_NODE_MAX_I, NULL, w, err);
    if (!st) st = read_int(o, "out", &nd->out, 0, 1 << 30, w, err);
    if (!st) {
        memcpy(nd->in, in, sizeof nd->in);
        memcpy(nd->w, wt, sizeof nd->w);
        memcpy(nd->i, ia, sizeof nd->i);
        const cJSON *fa = cJSON_GetObjectItemCaseSensitive(o, "f"), *e;
        if (!cJSON_IsArray(fa) || cJSON_GetArraySize(fa) != OKV_NODE_MAX_F)
            st = okv_fail(err, OKV_ERR_FORMAT, "%s: 'f' must have %d numbers", w, OKV_NODE_MAX_F);
        else cJSON_ArrayForEach(e, fa) {
            if (!cJSON_IsNumber(e) || !okv_double_fits_float(e->valuedouble)) {
                st = okv_fail(err, OKV_ERR_FORMAT, "%s: 'f' must be numbers within float range", w);
                break;
            }
            nd->f[nf++] = (float)e->valuedouble;
        }
    }
    free(in); free(wt); free(ia);
    return st;
}

static okv_status parse_graph(const cJSON *j, okv_graph *g, okv_error *err) {
    if (!cJSON_IsObject(j)) return okv_fail(err, OKV_ERR_FORMAT, "program header: 'graph' missing");
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(j, "values");
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(j, "nodes");
    if (!cJSON_IsArray(vals) || !cJSON_IsArray(nodes))
        return okv_fail(err, OKV_ERR_FORMAT, "program graph: 'values'/'nodes' must be arrays");
    g->n_values = cJSON_GetArraySize(vals);
    g->n_nodes = cJSON_GetArraySize(nodes);
    g->values = calloc((size_t)g->n_values + 1, sizeof *g->values);
    g->nodes = calloc((size_t)g->n_nodes + 1, sizeof *g->nodes);
    if (!g->values || !g->nodes) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vals) {
        const cJSON *w0 = cJSON_GetArrayItem(e, 0), *r0 = cJSON_GetArrayItem(e, 1);
        int64_t width, rows_flag;
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !okv_json_item_int(w0, 1, OKV_MAX_WIDTH, &width) ||
            !okv_json_item_int(r0, 0, 1, &rows_flag))
            return okv_fail(err, OKV_ERR_FORMAT, "program graph: value %d must be [width in [1, %d], rows flag 0 or 1]", k,
                            OKV_MAX_WIDTH);
        g->values[k].width = (int)width;
        g->values[k].logit_rows = rows_flag != 0;
        k++;
    }
    k = 0;
    cJSON_ArrayForEach(e, nodes) {
        okv_status st = parse_node(e, &g->nodes[k], k, err);
        if (st) return st;
        k++;
    }
    return read_int(j, "output", &g->output, 0, g->n_values - 1, "program graph", err);
}

/* The "quant" object of a quantized tensor: a scheme this build implements,
 * for a 2-D [N, K] whose K the group divides. */
static okv_status parse_quant(const cJSON *o, okv_tensor *t, uint32_t version, okv_error *err) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(o, "quant");
    if (!cJSON_IsObject(q)) return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': dtype q without a 'quant' object", t->name);
    if (t->n_dims != 2) return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': a quantized tensor must be 2-D, not %d-D", t->name, t->n_dims);
    char what[320];
    snprintf(what, sizeof what, "tensor '%s' quant", t->name);
    int bits, group;
    const cJSON *asym = cJSON_GetObjectItemCaseSensitive(q, "asym");
    const char *sd = okv_json_str(q, "scale_dtype");
    okv_status st = read_int(q, "bits", &bits, 1, 64, what, err);
    if (!st) st = read_int(q, "group", &group, 1, 1 << 20, what, err);
    if (st) return st;
    if (!cJSON_IsBool(asym)) return okv_fail(err, OKV_ERR_FORMAT, "%s: 'asym' must be true or false", what);
    if (!sd || okv_dtype_parse(sd, &t->quant.scale_dtype))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: 'scale_dtype' missing or not a float dtype", what);
    t->quant.bits = bits;
    t->quant.group = group;
    t->quant.asym = cJSON_IsTrue(asym);
    t->quant.block = OKV_QB_NONE;
    const cJSON *blk = cJSON_GetObjectItemCaseSensitive(q, "block");
    if (blk) {
        const okv_qblock_info *b = cJSON_IsString(blk) ? okv_qblock_parse(blk->valuestring) : NULL;
        if (!b)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: 'block' %s%.40s%s is not a block type this build runs", what,
                            cJSON_IsString(blk) ? "'" : "", cJSON_IsString(blk) ? blk->valuestring : "(not a string)",
                            cJSON_IsString(blk) ? "'" : "");
        if (version < 3)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: block types need format version 3, the file says %u", what, version);
        t->quant.block = b->type;
    }
    char name[300];
    snprintf(name, sizeof name, "tensor '%s'", t->name);
    okv_error qerr = {0};
    if (okv_qscheme_check(&t->quant, t->shape[0], t->shape[1], name, &qerr))
        return okv_fail(err, OKV_ERR_FORMAT, "%s", qerr.message);   /* a bad file, whatever status the check uses */
    return OKV_OK;
}

static okv_status parse_tensor(const cJSON *o, okv_tensor *t, int idx, uint64_t data_size, uint32_t version, okv_error *err) {
    const char *name = okv_json_str(o, "name"), *dt = okv_json_str(o, "dtype");
    if (!name || !dt || tdtype_parse(dt, &t->dtype))
        return okv_fail(err, OKV_ERR_FORMAT, "program tensor %d: 'name'/'dtype' missing or invalid", idx);
    t->name = okv_strdup(name);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape"), *e;
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 4)
        return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': 'shape' must be an array of at most 4 dims", name);
    uint64_t count = 1;
    cJSON_ArrayForEach(e, sh) {
        int64_t dim;
        if (!okv_json_item_int(e, 0, (int64_t)9e15, &dim))
            return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': invalid shape entry", name);
        t->shape[t->n_dims++] = dim;
        if (t->shape[t->n_dims - 1] && count > UINT64_MAX / 4 / (uint64_t)t->shape[t->n_dims - 1])
            return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': shape overflows", name);
        count *= (uint64_t)t->shape[t->n_dims - 1];
    }
    /* offsets and sizes travel as JSON numbers: exact up to 2^53 bytes */
    int64_t off, nb;
    if (!okv_json_item_int(cJSON_GetObjectItemCaseSensitive(o, "offset"), 0, OKV_MAX_JSON_INT, &off) ||
        !okv_json_item_int(cJSON_GetObjectItemCaseSensitive(o, "nbytes"), 0, OKV_MAX_JSON_INT, &nb))
        return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': offset/nbytes missing, negative or not an integer", name);
    t->offset = (uint64_t)off;
    t->nbytes = (uint64_t)nb;
    okv_status st;
    if (t->dtype == OKV_T_Q) {
        if (version < 2) return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': quantized tensors need format version 2, the file says %u", name, version);
        st = parse_quant(o, t, version, err);
        if (st) return st;
        uint64_t want = okv_quant_bytes(&t->quant, t->shape[0], t->shape[1]);
        if (t->nbytes != want) {
            char sch[64];
            return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': nbytes %llu does not match [%lld, %lld] in %s (%llu bytes)", name,
                            (unsigned long long)t->nbytes, (long long)t->shape[0], (long long)t->shape[1],
                            okv_qscheme_name(&t->quant, sch, sizeof sch), (unsigned long long)want);
        }
    } else if (t->nbytes != count * okv_tdtype_size(t->dtype))
        return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': nbytes %llu does not match shape and dtype", name,
                        (unsigned long long)t->nbytes);
    if (t->offset % OKV_ALIGN)
        return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': offset %llu is not %d-byte aligned", name,
                        (unsigned long long)t->offset, OKV_ALIGN);
    if (t->offset > data_size || t->nbytes > data_size - t->offset)
        return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': data [%llu, +%llu) lies outside the data section (%llu bytes)",
                        name, (unsigned long long)t->offset, (unsigned long long)t->nbytes, (unsigned long long)data_size);
    return OKV_OK;
}

static int cmp_tensor_offset(const void *a, const void *b, void *ctx) {
    const okv_tensor *ts = ctx, *x = &ts[*(const int *)a], *y = &ts[*(const int *)b];
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}
static int cmp_tensor_name(const void *a, const void *b, void *ctx) {
    const okv_tensor *ts = ctx;
    return strcmp(ts[*(const int *)a].name, ts[*(const int *)b].name);
}

/* No two tensors share bytes of the data section (zero-byte ones share
 * none) and no name appears twice: the writer lays tensors out one after
 * the other, so anything else is a crafted or damaged file (and aliased
 * weights would make one tensor's bytes read as another's). idx is scratch
 * of n_tensors ints; both checks sort it, O(n log n). */
static okv_status check_tensor_table(const okv_program_file *pf, int *idx, okv_error *err) {
    const okv_tensor *ts = pf->tensors;
    int n = pf->n_tensors;
    for (int i = 0; i < n; i++) idx[i] = i;
    qsort_r(idx, (size_t)n, sizeof *idx, cmp_tensor_offset, (void *)ts);
    int reach = -1; /* the tensor whose bytes end furthest so far */
    for (int k = 0; k < n; k++) {
        const okv_tensor *t = &ts[idx[k]];
        if (!t->nbytes) continue;
        if (reach >= 0 && t->offset < ts[reach].offset + ts[reach].nbytes) /* offsets + sizes checked <= data size */
            return okv_fail(err, OKV_ERR_FORMAT, "tensors '%s' [%llu, +%llu) and '%s' [%llu, +%llu) overlap in the data section",
                            ts[reach].name, (unsigned long long)ts[reach].offset, (unsigned long long)ts[reach].nbytes,
                            t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        reach = idx[k];
    }
    qsort_r(idx, (size_t)n, sizeof *idx, cmp_tensor_name, (void *)ts);
    for (int k = 1; k < n; k++)
        if (!strcmp(ts[idx[k - 1]].name, ts[idx[k]].name)) {
            int a = idx[k - 1] < idx[k] ? idx[k - 1] : idx[k], b = idx[k - 1] ^ idx[k] ^ a;
            return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s' appears twice (tensors %d and %d)", ts[a].name, a, b);
        }
    return OKV_OK;
}

static okv_status parse_tensors(const cJSON *arr, okv_program_file *pf, const uint8_t *data, uint64_t data_size,
                                uint32_t version, okv_error *err) {
    if (!cJSON_IsArray(arr)) return okv_fail(err, OKV_ERR_FORMAT, "program header: 'tensors' must be an array");
    pf->n_tensors = cJSON_GetArraySize(arr);
    pf->tensors = calloc((size_t)pf->n_tensors + 1, sizeof *pf->tensors);
    if (!pf->tensors) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        okv_status st = parse_tensor(e, &pf->tensors[k], k, data_size, version, err);
        if (st) return st;
        pf->tensors[k].data = data + pf->tensors[k].offset;
        k++;
    }
    int *idx = malloc((size_t)(pf->n_tensors > 0 ? pf->n_tensors : 1) * sizeof *idx);
    if (!idx) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = check_tensor_table(pf, idx, err);
    free(idx);
    return st;
}

static okv_status parse_header(const char *json, size_t len, okv_program_file *pf, const uint8_t *data,
                               uint64_t data_size, uint32_t version, okv_error *err) {
    cJSON *root;
    okv_status st = okv_json_parse(json, len, &root, "program header", err);
    if (st) return st;
    if (!cJSON_IsObject(root) || !okv_json_str(root, "format") || strcmp(okv_json_str(root, "format"), "offkv"))
        st = okv_fail(err, OKV_ERR_FORMAT, "program header: not an offkv header");
    if (!st) st = parse_meta(cJSON_GetObjectItemCaseSensitive(root, "meta"), &pf->meta, err);
    if (!st) st = parse_layout(cJSON_GetObjectItemCaseSensitive(root, "layout"), &pf->layout, err);
    if (!st) st = parse_graph(cJSON_GetObjectItemCaseSensitive(root, "graph"), &pf->graph, err);
    if (!st) st = parse_tensors(cJSON_GetObjectItemCaseSensitive(root, "tensors"), pf, data, data_size, version, err);
    cJSON_Delete(root);
    return st;
}

/* Whether the kernel hands out transparent huge pages to a region that asks
 * (MADV_HUGEPAGE): "always" or "madvise" in the sysfs switch, not "never". */
static bool thp_on_request(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = {0};
    bool on = fgets(line, sizeof line, f) && (strstr(line, "[always]") || strstr(line, "[madvise]"));
    fclose(f);
    return on;
}

#define HUGE_PAGE ((size_t)2 << 20)

/* The file's bytes copied into anonymous memory that asked for huge pages:
 * the region is 2 MiB-aligned (the slack before it unmapped) and made
 * read-only once filled. *m = NULL when the memory cannot be had (the
 * caller maps the file instead); an error only for a failed read. */
static okv_status copy_to_huge_pages(const char *path, int fd, uint64_t size, void **m, size_t *len, okv_error *err) {
    *m = NULL;
    if (size > SIZE_MAX - 2 * HUGE_PAGE) return OKV_OK;
    size_t n = ((size_t)size + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    char *raw = mmap(NULL, n + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return OKV_OK;
    char *a = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > raw) munmap(raw, (size_t)(a - raw));
    if (a + n < raw + n + HUGE_PAGE) munmap(a + n, (size_t)(raw + n + HUGE_PAGE - (a + n)));
    if (madvise(a, n, MADV_HUGEPAGE) != 0) { munmap(a, n); return OKV_OK; }
    for (uint64_t got = 0; got < size;) {
        size_t want = size - got > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)(size - got);
        ssize_t k = pread(fd, a + got, want, (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : 0;
            munmap(a, n);
            return okv_fail(err, OKV_ERR_IO, "%s: short read at byte %llu of %llu%s%s", path, (unsigned long long)got,
                            (unsigned long long)size, e ? ": " : " (file shrank while loading)", e ? strerror(e) : "");
        }
        got += (uint64_t)k;
    }
    mprotect(a, n, PROT_READ);
    *m = a;
    *len = n;
    return OKV_OK;
}

static okv_status map_file(const char *path, okv_weights_memory want, okv_program_file *pf, okv_error *err) {
    int fd;
    uint64_t size;
    okv_status rc = okv_open_regular(path, &fd, &size, err);
    if (rc) return rc;
    if (size < FIXED_HEADER_SIZE) {
        close(fd);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: truncated (%llu bytes, smaller than the %d-byte header)", path,
                        (unsigned long long)size, FIXED_HEADER_SIZE);
    }
    void *m = NULL;
    size_t len = (size_t)size;
    if (want != OKV_WEIGHTS_MAPPED && thp_on_request()) { /* asked for HUGE_PAGES = AUTO: no copy that gets none */
        rc = copy_to_huge_pages(path, fd, size, &m, &len, err);
        if (rc) { close(fd); return rc; }
    }
    pf->weights_memory = m ? OKV_WEIGHTS_HUGE_PAGES : OKV_WEIGHTS_MAPPED;
    if (!m) {
        m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        len = (size_t)size;
    }
    close(fd);
    if (m == MAP_FAILED) return okv_fail(err, OKV_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    pf->map = m;
    pf->map_size = (size_t)size;
    pf->map_len = len;
    return OKV_OK;
}

okv_status okv_format_open(const char *path, okv_program_file **out, okv_error *err) {
    return okv_format_open_with(path, OKV_WEIGHTS_MAPPED, out, err);
}

okv_status okv_format_open_with(const char *path, okv_weights_memory weights, okv_program_file **out, okv_error *err) {
    okv_program_file *pf = calloc(1, sizeof *pf);
    if (!pf) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = map_file(path, weights, pf, err);
    const uint8_t *p = pf->map;
    if (!st && memcmp(p, OKV_MAGIC, 8) != 0) st = okv_fail(err, OKV_ERR_FORMAT, "%s: not an offkv program (bad magic)", path);
    uint32_t version = st ? 0 : get_u32(p + 8);
    if (!st && (version < OKV_FORMAT_VERSION_MIN || version > OKV_FORMAT_VERSION))
        st = okv_fail(err, OKV_ERR_FORMAT, "%s: unsupported format version %u (this build reads %d to %d)", path, version,
                      OKV_FORMAT_VERSION_MIN, OKV_FORMAT_VERSION);
    uint64_t hlen = st ? 0 : get_u64(p + 16), data_off = st ? 0 : get_u64(p + 24), data_size = st ? 0 : get_u64(p + 32);
    if (!st && (hlen > pf->map_size - FIXED_HEADER_SIZE || data_off < FIXED_HEADER_SIZE + hlen || data_off % OKV_ALIGN ||
                data_off > pf->map_size))
        st = okv_fail(err, OKV_ERR_FORMAT, "%s: header length/data offset out of range (truncated or corrupted file)", path);
    if (!st && data_size != pf->map_size - data_off)
        st = okv_fail(err, OKV_ERR_FORMAT, "%s: data section is %llu bytes, header says %llu (truncated or corrupted file)",
                      path, (unsigned long long)(pf->map_size - data_off), (unsigned long long)data_size);
    if (!st && crc32_bytes(p + FIXED_HEADER_SIZE, hlen) != get_u32(p + 12))
        st = okv_fail(err, OKV_ERR_FORMAT, "%s: header checksum mismatch (corrupted file)", path);
    if (!st) {
        pf->header_json = malloc(hlen + 1);
        if (!pf->header_json) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory");
        else { memcpy(pf->header_json, p + FIXED_HEADER_SIZE, hlen); pf->header_json[hlen] = 0; }
    }
    if (!st) st = parse_header(pf->header_json, hlen, pf, p + data_off, data_size, version, err);
    if (!st) st = okv_program_validate(pf, err);
    if (st) {
        if (err && !strstr(err->message, path)) okv_fail_prefix(err, "%s", path);
        okv_format_close(pf);
        return st;
    }
    *out = pf;
    return OKV_OK;
}

void okv_program_file_clear(okv_program_file *pf) {
    for (int t = 0; t < pf->n_tensors; t++) free(pf->tensors[t].name);
    free(pf->tensors);
    free(pf->graph.values);
    free(pf->graph.nodes);
    okv_layout_free(&pf->layout);
    free(pf->meta.architecture);
    free(pf->meta.eos_ids);
    free(pf->meta.source);
    free(pf->meta.extra_json);
    free(pf->header_json);
    memset(pf, 0, sizeof *pf);
}

void okv_format_close(okv_program_file *pf) {
    if (!pf) return;
    if (pf->map) munmap(pf->map, pf->map_len);
    okv_program_file_clear(pf);
    free(pf);
}

int okv_format_pack_x8(okv_program_file *pf, bool (*want)(int type)) {
    if (pf->weights_memory != OKV_WEIGHTS_HUGE_PAGES || !pf->map) return 0;
    if (mprotect(pf->map, pf->map_len, PROT_READ | PROT_WRITE) != 0) return 0;
    int packed = 0;
    for (int i = 0; i < pf->n_tensors; i++) {
        okv_tensor *t = &pf->tensors[i];
        if (t->dtype != OKV_T_Q || t->quant.block == OKV_QB_NONE || t->quant.x8 || !want(t->quant.block)) continue;
        if (okv_qblock_x8_pack(t->quant.block, (void *)t->data, t->shape[0], t->shape[1])) {
            t->quant.x8 = true;
            packed++;
        }
    }
    mprotect(pf->map, pf->map_len, PROT_READ);
    return packed;
}

int okv_format_find_tensor(const okv_program_file *pf, const char *name) {
    for (int t = 0; t < pf->n_tensors; t++)
        if (!strcmp(pf->tensors[t].name, name)) return t;
    return -1;
}
