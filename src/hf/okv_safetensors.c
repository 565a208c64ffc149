/* okv_safetensors.c — the safetensors reader behind okv_safetensors.h (the
 * writer, used only by tests and tools, is tools/mkckpt/okv_st_write.c).
 *
 * Reading is done in three passes so each check has one home:
 *   1. per file (st_file_load): map the file, bound the header, parse it as
 *      JSON, validate every entry (st_parse_entry) and that no two tensors'
 *      bytes overlap (st_check_overlaps);
 *   2. per index (okv_st_open_index): check the shard names, load each shard
 *      once, check that every tensor the index names is in its shard;
 *   3. per set (st_finish): sort tensors by name, refuse duplicates.
 * A file's tensors point into its mmap; the set owns the maps. */
#include "okv_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "okv_common.h"

typedef struct st_file {
    char *path;
    uint8_t *map;
    size_t size;
    cJSON *meta; /* detached "__metadata__" object, or NULL */
} st_file;

struct okv_st_set {
    st_file **files;
    int n_files;
    okv_st_tensor *tensors;
    int n_tensors, cap_tensors;
};

/* ---- dtypes ---------------------------------------------------------- */

typedef struct st_dtype_info {
    const char *name;
    int bits;
} st_dtype_info;

/* Every dtype the safetensors format defines, with its width in bits. */
static const st_dtype_info st_dtypes[] = {
    {"BOOL", 8}, {"U8", 8}, {"I8", 8}, {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8},
    {"I16", 16}, {"U16", 16}, {"F16", 16}, {"BF16", 16},
    {"I32", 32}, {"U32", 32}, {"F32", 32}, {"C64", 64},
    {"F64", 64}, {"I64", 64}, {"U64", 64},
    {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

static const st_dtype_info *st_dtype_lookup(const char *name) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (!strcmp(st_dtypes[i].name, name)) return &st_dtypes[i];
    return NULL;
}

int okv_st_dtype_bits(const char *name) {
    const st_dtype_info *info = name ? st_dtype_lookup(name) : NULL;
    return info ? info->bits : 0;
}

const char *okv_st_dtype_str(okv_dtype d) {
    switch (d) {
    case OKV_F32: return "F32";
    case OKV_F16: return "F16";
    case OKV_BF16: return "BF16";
    }
    return "?";
}

static bool st_supported_dtype(const char *name, okv_dtype *out) {
    if (!strcmp(name, "BF16")) { *out = OKV_BF16; return true; }
    if (!strcmp(name, "F16")) { *out = OKV_F16; return true; }
    if (!strcmp(name, "F32")) { *out = OKV_F32; return true; }
    return false;
}

/* Bytes of numel elements of `bits` each; false on overflow or when the
 * total is not a whole number of bytes (sub-byte dtypes). */
static bool st_bytes_for(uint64_t numel, int bits, uint64_t *out) {
    uint64_t total_bits;
    if (__builtin_mul_overflow(numel, (uint64_t)bits, &total_bits)) return false;
    if (total_bits % 8) return false;
    *out = total_bits / 8;
    return true;
}

/* ---- set bookkeeping ------------------------------------------------- */

static okv_st_set *st_set_new(void) { return calloc(1, sizeof(okv_st_set)); }

void okv_st_free(okv_st_set *set) {
    if (!set) return;
    for (int i = 0; i < set->n_tensors; i++) free((char *)set->tensors[i].name);
    free(set->tensors);
    for (int i = 0; i < set->n_files; i++) {
        st_file *f = set->files[i];
        if (f->map) munmap(f->map, f->size);
        cJSON_Delete(f->meta);
        free(f->path);
        free(f);
    }
    free(set->files);
    free(set);
}

static okv_st_tensor *st_add_tensor(okv_st_set *set) {
    if (set->n_tensors == set->cap_tensors) {
        int cap = set->cap_tensors ? set->cap_tensors * 2 : 64;
        okv_st_tensor *t = realloc(set->tensors, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        set->tensors = t;
        set->cap_tensors = cap;
    }
    okv_st_tensor *t = &set->tensors[set->n_tensors++];
    memset(t, 0, sizeof *t);
    return t;
}

static st_file *st_add_file(okv_st_set *set, const char *path) {
    st_file **files = realloc(set->files, (size_t)(set->n_files + 1) * sizeof *files);
    if (!files) return NULL;
    set->files = files;
    st_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->path = okv_strdup(path);
    if (!f->path) { free(f); return NULL; }
    set->files[set->n_files++] = f;
    return f;
}

/* ---- one file -------------------------------------------------------- */

/* Maps path read-only into f->map / f->size. */
static okv_status st_map_file(st_file *f, okv_error *err) {
    int fd;
    uint64_t size;
    okv_status rc = okv_open_regular(f->path, &fd, &size, err);
    if (rc) return rc;
    if (size < 8) {
        close(fd);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: file is %llu bytes, too short for the 8-byte header length",
                        f->path, (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return okv_fail(err, OKV_ERR_IO, "%s: mmap failed: %s", f->path, strerror(errno));
    f->map = map;
    f->size = (size_t)size;
    return OKV_OK;
}

/* A JSON number that is a whole number in [0, 2^53] (exactly representable). */
static bool st_json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static okv_status st_check_metadata(const cJSON *meta, const char *path, okv_error *err) {
    if (cJSON_IsNull(meta)) return OKV_OK;
    if (!cJSON_IsObject(meta))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: '__metadata__' must be an object of strings", path);
    for (const cJSON *c = meta->child; c; c = c->next)
        if (!cJSON_IsString(c))
            return okv_fail(err, OKV_ERR_FORMAT, "%s: '__metadata__' value '%s' must be a string",
                            path, c->string ? c->string : "?");
    return OKV_OK;
}

/* Validates one header entry and fills t (except name/file). data_size is
 * the byte length of the data section, data its start. */
static okv_status st_parse_entry(const cJSON *e, const char *path, const uint8_t *data,
                                 uint64_t data_size, okv_st_tensor *t, okv_error *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': entry must be an object", path, name);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!dt) return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': missing 'dtype'", path, name);
    if (!cJSON_IsString(dt))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': 'dtype' must be a string", path, name);
    const st_dtype_info *info = st_dtype_lookup(dt->valuestring);
    if (!info)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", path, name, dt->valuestring);
    t->dtype_name = info->name;
    t->supported = st_supported_dtype(info->name, &t->dtype);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!shape) return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': missing 'shape'", path, name);
    if (!cJSON_IsArray(shape))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': 'shape' must be an array", path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > OKV_ST_MAX_DIMS)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': 'shape' has %d dims (at most %d supported)",
                        path, name, ndim, OKV_ST_MAX_DIMS);
    uint64_t numel = 1;
    int d = 0;
    for (const cJSON *c = shape->child; c; c = c->next, d++) {
        uint64_t dim;
        if (!st_json_uint(c, &dim))
            return okv_fail(err, OKV_ERR_FORMAT,
                            "%s: tensor '%s': 'shape' dim %d must be a non-negative integer", path, name, d);
        if (__builtin_mul_overflow(numel, dim, &numel))
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': 'shape' element count overflows", path, name);
        t->shape[d] = (int64_t)dim;
    }
    t->ndim = ndim;
    t->numel = numel;
    uint64_t nbytes;
    if (!st_bytes_for(numel, info->bits, &nbytes))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': byte size of %s x %llu elements overflows or is fractional",
                        path, name, info->name, (unsigned long long)numel);

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!offs) return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': missing 'data_offsets'", path, name);
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_json_uint(offs->child, &begin) ||
        !st_json_uint(offs->child->next, &end))
        return okv_fail(err, OKV_ERR_FORMAT,
                        "%s: tensor '%s': 'data_offsets' must be [begin, end] of non-negative integers", path, name);
    if (begin > end)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' begin %llu > end %llu",
                        path, name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return okv_fail(err, OKV_ERR_FORMAT,
                        "%s: tensor '%s': 'data_offsets' end %llu is past the data section (%llu bytes)",
                        path, name, (unsigned long long)end, (unsigned long long)data_size);
    if (end - begin != nbytes)
        return okv_fail(err, OKV_ERR_FORMAT,
                        "%s: tensor '%s': 'data_offsets' span %llu bytes but %s x %llu elements need %llu",
                        path, name, (unsigned long long)(end - begin), info->name,
                        (unsigned long long)numel, (unsigned long long)nbytes);
    t->data = data + begin;
    t->nbytes = (size_t)nbytes;
    return OKV_OK;
}

typedef struct st_span {
    uint64_t begin, end;
    int idx;
} st_span;

static int st_span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Refuses tensors [first, set->n_tensors) whose byte ranges overlap. */
static okv_status st_check_overlaps(okv_st_set *set, int first, const uint8_t *data,
                                    const char *path, okv_error *err) {
    int n = set->n_tensors - first;
    if (n < 2) return OKV_OK;
    st_span *spans = malloc((size_t)n * sizeof *spans);
    if (!spans) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) {
        const okv_st_tensor *t = &set->tensors[first + i];
        spans[i].begin = (uint64_t)((const uint8_t *)t->data - data);
        spans[i].end = spans[i].begin + t->nbytes;
        spans[i].idx = first + i;
    }
    qsort(spans, (size_t)n, sizeof *spans, st_span_cmp);
    okv_status st = OKV_OK;
    int prev = -1; /* last non-empty span */
    for (int i = 0; i < n && !st; i++) {
        if (spans[i].begin == spans[i].end) continue;
        if (prev >= 0 && spans[i].begin < spans[prev].end)
            st = okv_fail(err, OKV_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section",
                          path, set->tensors[spans[prev].idx].name, set->tensors[spans[i].idx].name);
        prev = i;
    }
    free(spans);
    return st;
}

static bool st_only_space(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return false;
    return true;
}

/* Loads path into set: maps it, validates the header, appends its tensors. */
static okv_status st_file_load(okv_st_set *set, const char *path, okv_error *err) {
    st_file *f = st_add_file(set, path);
    if (!f) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path);
    okv_status st = st_map_file(f, err);
    if (st) return st;

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > f->size - 8)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)",
                        path, (unsigned long long)hlen, f->size);
    if (hlen > OKV_ST_MAX_HEADER)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit",
                        path, (unsigned long long)hlen, OKV_ST_MAX_HEADER);
    if (hlen < 2) return okv_fail(err, OKV_ERR_FORMAT, "%s: header length %llu is too short for a JSON object",
                                  path, (unsigned long long)hlen);

    /* parse a NUL-terminated copy: the map is not terminated */
    char *text = malloc((size_t)hlen + 1);
    if (!text) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path,
                               (unsigned long long)hlen);
    memcpy(text, f->map + 8, (size_t)hlen);
    text[hlen] = 0;
    const char *parse_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &parse_end, 0);
    if (!root) {
        size_t off = parse_end && parse_end >= text ? (size_t)(parse_end - text) : 0;
        free(text);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: header is not valid JSON (near byte %zu)", path, off);
    }
    bool trailing_ok = st_only_space(parse_end, text + hlen);
    free(text);
    if (!trailing_ok) {
        cJSON_Delete(root);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: header has bytes other than space padding after the JSON", path);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: header must be a JSON object", path);
    }

    const uint8_t *data = f->map + 8 + hlen;
    uint64_t data_size = f->size - 8 - hlen;
    int first = set->n_tensors;
    for (const cJSON *e = root->child; e && !st; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            st = st_check_metadata(e, path, err);
            continue;
        }
        okv_st_tensor *t = st_add_tensor(set);
        if (!t) { st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path); break; }
        t->name = okv_strdup(e->string);
        t->file = f->path;
        if (!t->name) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path);
        else st = st_parse_entry(e, path, data, data_size, t, err);
    }
    if (!st) st = st_check_overlaps(set, first, data, path, err);
    if (!st) {
        cJSON *meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
        if (cJSON_IsObject(meta)) f->meta = meta;
        else cJSON_Delete(meta);
    }
    cJSON_Delete(root);
    return st;
}

/* ---- the set --------------------------------------------------------- */

static int st_tensor_cmp(const void *a, const void *b) {
    return strcmp(((const okv_st_tensor *)a)->name, ((const okv_st_tensor *)b)->name);
}

/* Sorts by name and refuses duplicate names (within or across files). */
static okv_status st_finish(okv_st_set *set, okv_error *err) {
    if (set->n_tensors > 1) qsort(set->tensors, (size_t)set->n_tensors, sizeof *set->tensors, st_tensor_cmp);
    for (int i = 1; i < set->n_tensors; i++) {
        const okv_st_tensor *a = &set->tensors[i - 1], *b = &set->tensors[i];
        if (strcmp(a->name, b->name)) continue;
        if (a->file == b->file)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s' appears twice", a->file, a->name);
        return okv_fail(err, OKV_ERR_FORMAT, "duplicate tensor '%s' in %s and %s", a->name, a->file, b->file);
    }
    return OKV_OK;
}

okv_status okv_st_open_file(const char *path, okv_st_set **out, okv_error *err) {
    *out = NULL;
    okv_st_set *set = st_set_new();
    if (!set) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path);
    okv_status st = st_file_load(set, path, err);
    if (!st) st = st_finish(set, err);
    if (st) { okv_st_free(set); return st; }
    *out = set;
    return OKV_OK;
}

/* A weight_map file name must name a file directly inside the checkpoint
 * directory: no separators, no "." / "..", no control characters. */
static bool st_safe_shard_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 255 || !strcmp(s, ".") || !strcmp(s, "..")) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '/' || c == '\\' || c < 0x20) return false;
    }
    return true;
}

/* Heap copy of the directory part of path ("." if none). */
static char *st_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return okv_strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

static st_file *st_find_file(okv_st_set *set, const char *path) {
    for (int i = 0; i < set->n_files; i++)
        if (!strcmp(set->files[i]->path, path)) return set->files[i];
    return NULL;
}

/* Loads every shard named by weight_map (each once). */
static okv_status st_load_shards(okv_st_set *set, const cJSON *wm, const char *dir,
                                 const char *index_path, okv_error *err) {
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return okv_fail(err, OKV_ERR_FORMAT, "%s: weight_map entry '%s' must be a file name string",
                            index_path, e->string);
        if (!st_safe_shard_name(e->valuestring))
            return okv_fail(err, OKV_ERR_FORMAT,
                            "%s: weight_map entry '%s' names '%.300s', which is not a file inside the checkpoint directory",
                            index_path, e->string, e->valuestring);
        char *path = okv_path_join(dir, e->valuestring);
        if (!path) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", index_path);
        okv_status st = OKV_OK;
        if (!st_find_file(set, path)) {
            st = st_file_load(set, path, err);
            if (st) okv_fail_prefix(err, "%s: shard for '%s'", index_path, e->string);
        }
        free(path);
        if (st) return st;
    }
    return OKV_OK;
}

/* Every tensor the index names must live in the shard it names. */
static okv_status st_check_index_names(okv_st_set *set, const cJSON *wm, const char *dir,
                                       const char *index_path, okv_error *err) {
    for (const cJSON *e = wm->child; e; e = e->next) {
        char *path = okv_path_join(dir, e->valuestring);
        if (!path) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", index_path);
        const okv_st_tensor *t = okv_st_find(set, e->string);
        okv_status st = OKV_OK;
        if (!t || strcmp(t->file, path))
            st = okv_fail(err, OKV_ERR_FORMAT, "%s: weight_map puts tensor '%s' in %s, but that shard has no such tensor",
                          index_path, e->string, path);
        free(path);
        if (st) return st;
    }
    return OKV_OK;
}

okv_status okv_st_open_index(const char *index_path, okv_st_set **out, okv_error *err) {
    *out = NULL;
    cJSON *root = NULL;
    okv_status st = okv_json_load(index_path, &root, err);
    if (st) return st;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: missing 'weight_map' object", index_path);
    }
    if (!wm->child) {
        cJSON_Delete(root);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: 'weight_map' is empty", index_path);
    }
    char *dir = st_dirname(index_path);
    okv_st_set *set = st_set_new();
    if (!dir || !set) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", index_path);
    if (!st) st = st_load_shards(set, wm, dir, index_path, err);
    if (!st) st = st_finish(set, err);
    if (!st) st = st_check_index_names(set, wm, dir, index_path, err);
    free(dir);
    cJSON_Delete(root);
    if (st) { okv_st_free(set); return st; }
    *out = set;
    return OKV_OK;
}

okv_status okv_st_open_dir(const char *dir, okv_st_set **out, okv_error *err) {
    *out = NULL;
    char *single = okv_path_join(dir, OKV_ST_SINGLE_NAME);
    char *index = okv_path_join(dir, OKV_ST_INDEX_NAME);
    okv_status st;
    if (!single || !index) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir);
    else if (okv_file_exists(single)) st = okv_st_open_file(single, out, err); /* HF prefers it too */
    else if (okv_file_exists(index)) st = okv_st_open_index(index, out, err);
    else st = okv_fail(err, OKV_ERR_IO, "%s: no %s or %s", dir, OKV_ST_SINGLE_NAME, OKV_ST_INDEX_NAME);
    free(single);
    free(index);
    return st;
}

int okv_st_count(const okv_st_set *set) { return set->n_tensors; }
int okv_st_file_count(const okv_st_set *set) { return set->n_files; }

const okv_st_tensor *okv_st_get(const okv_st_set *set, int i) {
    return i >= 0 && i < set->n_tensors ? &set->tensors[i] : NULL;
}

const okv_st_tensor *okv_st_find(const okv_st_set *set, const char *name) {
    int lo = 0, hi = set->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(set->tensors[mid].name, name);
        if (c == 0) return &set->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

const char *okv_st_metadata(const okv_st_set *set, const char *key) {
    for (int i = 0; i < set->n_files; i++) {
        const char *v = okv_json_str(set->files[i]->meta, key);
        if (v) return v;
    }
    return NULL;
}
