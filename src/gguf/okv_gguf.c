/* okv_gguf.c — the GGUF reader behind okv_gguf.h.
 *
 * One forward pass over the header with a bounds-checked cursor (gr_*):
 * every read first checks that the bytes exist, every count is bounded by
 * the bytes left before anything is allocated for it, and every size is
 * computed with overflow-checked 64-bit arithmetic. Then the data section
 * is placed (aligned after the tensor infos) and each tensor's extent is
 * checked against it; a sort by offset proves that no two tensors overlap.
 * Keys and tensor names are copied out NUL-terminated; values stay in the
 * map. Lookups: metadata through an open-addressing hash index over the
 * keys (built while reading, so a repeated key is refused in O(n) however
 * many keys a file claims; seeded per handle, so a file cannot be crafted
 * to collide), tensors by binary search over a name-sorted index. */
#include "okv_gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "okv_common.h"

#define GGUF_MAX_NAME 256u
/* Smallest encodings, which bound the counts a header may claim: a
 * key/value is a length (8), a 1-byte key, a type (4) and a 1-byte value;
 * a tensor info a length (8), a 1-byte name, n_dims (4), one dim (8), a
 * type (4) and an offset (8). */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_INFO_BYTES 33u

struct okv_gguf {
    char *path;
    const uint8_t *map;
    size_t size;
    bool owns_map;
    uint32_t version;
    uint64_t alignment;
    const uint8_t *data;
    uint64_t data_size;
    okv_gguf_kv *kvs;
    int n_kvs;
    int *key_slots; /* hash index over kvs: kv index or -1, key_mask + 1 slots */
    size_t key_mask;
    uint64_t key_seed; /* the index's hash seed, new for each handle */
    okv_gguf_tensor *tensors;
    int n_tensors;
    int *by_name; /* tensor indices sorted by name */
};

/* ---- cursor ---------------------------------------------------------- */

typedef struct gr {
    const uint8_t *p;
    uint64_t size, pos;
    const char *what;
    okv_error *err;
} gr;

static uint64_t gr_left(const gr *r) { return r->size - r->pos; }

static okv_status gr_need(gr *r, uint64_t n, const char *field) {
    if (n > gr_left(r))
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: truncated: %s needs %llu bytes at offset %llu, file has %llu",
                        r->what, field, (unsigned long long)n, (unsigned long long)r->pos,
                        (unsigned long long)r->size);
    return OKV_OK;
}

static uint64_t le_u(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static okv_status gr_uint(gr *r, int n, uint64_t *out, const char *field) {
    okv_status st = gr_need(r, (uint64_t)n, field);
    if (st) return st;
    *out = le_u(r->p + r->pos, n);
    r->pos += (uint64_t)n;
    return OKV_OK;
}

/* A length-prefixed string; the length must fit in what is left. */
static okv_status gr_str(gr *r, okv_gguf_str *out, const char *field) {
    uint64_t len;
    okv_status st = gr_uint(r, 8, &len, field);
    if (st) return st;
    if (len > gr_left(r))
        return okv_fail(r->err, OKV_ERR_FORMAT,
                        "%s: %s: string length %llu at offset %llu runs past the end of the file (%llu bytes left)",
                        r->what, field, (unsigned long long)len, (unsigned long long)(r->pos - 8),
                        (unsigned long long)gr_left(r));
    out->ptr = (const char *)r->p + r->pos;
    out->len = len;
    r->pos += len;
    return OKV_OK;
}

/* A NUL-free string copied to the heap (keys, tensor names). */
static okv_status gr_name(gr *r, uint64_t max, char **out, const char *field) {
    okv_gguf_str s;
    okv_status st = gr_str(r, &s, field);
    if (st) return st;
    if (s.len == 0 || s.len > max)
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: %s has length %llu (allowed 1..%llu)", r->what, field,
                        (unsigned long long)s.len, (unsigned long long)max);
    if (memchr(s.ptr, 0, s.len))
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: %s contains a NUL byte", r->what, field);
    *out = malloc(s.len + 1);
    if (!*out) return okv_fail(r->err, OKV_ERR_NOMEM, "out of memory");
    memcpy(*out, s.ptr, s.len);
    (*out)[s.len] = 0;
    return OKV_OK;
}

/* ---- key index --------------------------------------------------------- */

/* Slots for n keys at most half full, all empty (-1). */
static okv_status key_index_init(okv_gguf *g, uint64_t n, okv_error *err) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2; /* n <= INT32_MAX: no overflow */
    g->key_slots = malloc(cap * sizeof *g->key_slots);
    if (!g->key_slots) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory for %llu keys", g->path, (unsigned long long)n);
    memset(g->key_slots, 0xff, cap * sizeof *g->key_slots);
    g->key_mask = cap - 1;
    g->key_seed = okv_hash_seed();
    return OKV_OK;
}

/* The slot holding `key`, or the empty slot where it would go. */
static size_t key_slot(const okv_gguf *g, const char *key) {
    size_t i = okv_hash_bytes(g->key_seed, key, strlen(key)) & g->key_mask;
    while (g->key_slots[i] >= 0 && strcmp(g->kvs[g->key_slots[i]].key, key)) i = (i + 1) & g->key_mask;
    return i;
}

/* Indexes kvs[i]; returns the index of an earlier kv with the same key
 * (kvs[i] is then not indexed), or -1. */
static int key_index_add(okv_gguf *g, int i) {
    size_t s = key_slot(g, g->kvs[i].key);
    if (g->key_slots[s] >= 0) return g->key_slots[s];
    g->key_slots[s] = i;
    return -1;
}

/* ---- value types ----------------------------------------------------- */

static const char *const vtype_names[] = {"uint8", "int8",   "uint16", "int16", "uint32", "int32", "float32",
                                          "bool",  "string", "array",  "uint64", "int64", "float64"};

const char *okv_gguf_vtype_name(okv_gguf_vtype t) {
    return (unsigned)t < OKV_GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

/* Width in bytes of a fixed-size value type, 0 for string/array. */
static int vtype_width(okv_gguf_vtype t) {
    switch (t) {
    case OKV_GGUF_U8: case OKV_GGUF_I8: case OKV_GGUF_BOOL: return 1;
    case OKV_GGUF_U16: case OKV_GGUF_I16: return 2;
    case OKV_GGUF_U32: case OKV_GGUF_I32: case OKV_GGUF_F32: return 4;
    case OKV_GGUF_U64: case OKV_GGUF_I64: case OKV_GGUF_F64: return 8;
    default: return 0;
    }
}

static bool vtype_is_int(okv_gguf_vtype t) {
    return t == OKV_GGUF_U8 || t == OKV_GGUF_I8 || t == OKV_GGUF_U16 || t == OKV_GGUF_I16 || t == OKV_GGUF_U32 ||
           t == OKV_GGUF_I32 || t == OKV_GGUF_U64 || t == OKV_GGUF_I64;
}
static bool vtype_is_signed(okv_gguf_vtype t) {
    return t == OKV_GGUF_I8 || t == OKV_GGUF_I16 || t == OKV_GGUF_I32 || t == OKV_GGUF_I64;
}

/* Decodes one fixed-size scalar of type t at p into kv->v. */
static void decode_scalar(okv_gguf_vtype t, const uint8_t *p, okv_gguf_kv *kv) {
    int w = vtype_width(t);
    uint64_t raw = le_u(p, w);
    if (t == OKV_GGUF_F32) {
        float f;
        uint32_t b = (uint32_t)raw;
        memcpy(&f, &b, 4);
        kv->v.f = f;
    } else if (t == OKV_GGUF_F64) {
        memcpy(&kv->v.f, &raw, 8);
    } else if (vtype_is_signed(t)) {
        int bits = 8 * w;
        kv->v.i = bits == 64 ? (int64_t)raw : (int64_t)(raw << (64 - bits)) >> (64 - bits);
    } else {
        kv->v.u = raw;
    }
}

static okv_status parse_array(gr *r, okv_gguf_kv *kv) {
    uint64_t et, n;
    okv_status st = gr_uint(r, 4, &et, kv->key);
    if (!st) st = gr_uint(r, 8, &n, kv->key);
    if (st) return st;
    if (et == OKV_GGUF_ARRAY)
        return okv_fail(r->err, OKV_ERR_UNSUPPORTED, "%s: key '%s': nested arrays are not supported", r->what,
                        kv->key);
    if (et >= OKV_GGUF_VTYPE_COUNT)
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: key '%s': unknown array element type %llu", r->what, kv->key,
                        (unsigned long long)et);
    kv->elem_type = (okv_gguf_vtype)et;
    kv->n_elems = n;
    int w = vtype_width(kv->elem_type);
    if (w) {
        uint64_t bytes;
        if (__builtin_mul_overflow(n, (uint64_t)w, &bytes) || bytes > gr_left(r))
            return okv_fail(r->err, OKV_ERR_FORMAT, "%s: key '%s': array of %llu %s runs past the end of the file",
                            r->what, kv->key, (unsigned long long)n, okv_gguf_vtype_name(kv->elem_type));
        kv->elems = r->p + r->pos;
        if (kv->elem_type == OKV_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (kv->elems[i] > 1)
                    return okv_fail(r->err, OKV_ERR_FORMAT, "%s: key '%s': element %llu is bool %u (not 0/1)",
                                    r->what, kv->key, (unsigned long long)i, kv->elems[i]);
        r->pos += bytes;
        return OKV_OK;
    }
    /* strings: each at least its 8-byte length */
    if (n > gr_left(r) / 8)
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: key '%s': array of %llu strings runs past the end of the file",
                        r->what, kv->key, (unsigned long long)n);
    const uint8_t **at = malloc((size_t)(n ? n : 1) * sizeof *at);
    if (!at) return okv_fail(r->err, OKV_ERR_NOMEM, "out of memory for key '%s'", kv->key);
    kv->str_at = at;
    for (uint64_t i = 0; i < n; i++) {
        at[i] = r->p + r->pos;
        okv_gguf_str s;
        char field[96];
        snprintf(field, sizeof field, "key '%.48s' element %llu", kv->key, (unsigned long long)i);
        if ((st = gr_str(r, &s, field))) return st;
    }
    return OKV_OK;
}

static okv_status parse_kv(gr *r, okv_gguf_kv *kv, int index) {
    char field[64];
    snprintf(field, sizeof field, "key %d", index);
    okv_status st = gr_name(r, OKV_GGUF_MAX_KEY, &kv->key, field);
    if (st) return st;
    uint64_t t;
    if ((st = gr_uint(r, 4, &t, kv->key))) return st;
    if (t >= OKV_GGUF_VTYPE_COUNT)
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: key '%s': unknown value type %llu", r->what, kv->key,
                        (unsigned long long)t);
    kv->type = (okv_gguf_vtype)t;
    if (kv->type == OKV_GGUF_STRING) return gr_str(r, &kv->v.s, kv->key);
    if (kv->type == OKV_GGUF_ARRAY) return parse_array(r, kv);
    int w = vtype_width(kv->type);
    if ((st = gr_need(r, (uint64_t)w, kv->key))) return st;
    decode_scalar(kv->type, r->p + r->pos, kv);
    if (kv->type == OKV_GGUF_BOOL && kv->v.u > 1)
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: key '%s': bool value %llu (not 0/1)", r->what, kv->key,
                        (unsigned long long)kv->v.u);
    r->pos += (uint64_t)w;
    return OKV_OK;
}

/* ---- ggml types ------------------------------------------------------ */

typedef struct ggml_type_info {
    const char *name;
    int block, size; /* elements and bytes per block */
} ggml_type_info;

static const ggml_type_info ggml_types[OKV_GGML_TYPE_LIMIT] = {
    [OKV_GGML_F32] = {"F32", 1, 4},         [OKV_GGML_F16] = {"F16", 1, 2},
    [OKV_GGML_Q4_0] = {"Q4_0", 32, 18},     [OKV_GGML_Q4_1] = {"Q4_1", 32, 20},
    [OKV_GGML_Q5_0] = {"Q5_0", 32, 22},     [OKV_GGML_Q5_1] = {"Q5_1", 32, 24},
    [OKV_GGML_Q8_0] = {"Q8_0", 32, 34},     [OKV_GGML_Q8_1] = {"Q8_1", 32, 36},
    [OKV_GGML_Q2_K] = {"Q2_K", 256, 84},    [OKV_GGML_Q3_K] = {"Q3_K", 256, 110},
    [OKV_GGML_Q4_K] = {"Q4_K", 256, 144},   [OKV_GGML_Q5_K] = {"Q5_K", 256, 176},
    [OKV_GGML_Q6_K] = {"Q6_K", 256, 210},   [OKV_GGML_Q8_K] = {"Q8_K", 256, 292},
    [OKV_GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66}, [OKV_GGML_IQ2_XS] = {"IQ2_XS", 256, 74},
    [OKV_GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98}, [OKV_GGML_IQ1_S] = {"IQ1_S", 256, 50},
    [OKV_GGML_IQ4_NL] = {"IQ4_NL", 32, 18}, [OKV_GGML_IQ3_S] = {"IQ3_S", 256, 110},
    [OKV_GGML_IQ2_S] = {"IQ2_S", 256, 82},  [OKV_GGML_IQ4_XS] = {"IQ4_XS", 256, 136},
    [OKV_GGML_I8] = {"I8", 1, 1},           [OKV_GGML_I16] = {"I16", 1, 2},
    [OKV_GGML_I32] = {"I32", 1, 4},         [OKV_GGML_I64] = {"I64", 1, 8},
    [OKV_GGML_F64] = {"F64", 1, 8},         [OKV_GGML_IQ1_M] = {"IQ1_M", 256, 56},
    [OKV_GGML_BF16] = {"BF16", 1, 2},       [OKV_GGML_TQ1_0] = {"TQ1_0", 256, 54},
    [OKV_GGML_TQ2_0] = {"TQ2_0", 256, 66},  [OKV_GGML_MXFP4] = {"MXFP4", 32, 17},
    [OKV_GGML_NVFP4] = {"NVFP4", 64, 36},   [OKV_GGML_Q1_0] = {"Q1_0", 128, 18},
};

const char *okv_ggml_type_name(int type) {
    return type >= 0 && type < OKV_GGML_TYPE_LIMIT ? ggml_types[type].name : NULL;
}
int okv_ggml_block_size(int type) {
    return type >= 0 && type < OKV_GGML_TYPE_LIMIT ? ggml_types[type].block : 0;
}
int okv_ggml_type_size(int type) {
    return type >= 0 && type < OKV_GGML_TYPE_LIMIT ? ggml_types[type].size : 0;
}

/* ---- tensor infos ---------------------------------------------------- */

static okv_status parse_tensor_info(gr *r, okv_gguf_tensor *t, int index) {
    char field[64];
    snprintf(field, sizeof field, "tensor %d name", index);
    okv_status st = gr_name(r, GGUF_MAX_NAME, &t->name, field);
    if (st) return st;
    uint64_t nd, ty;
    if ((st = gr_uint(r, 4, &nd, t->name))) return st;
    if (nd < 1 || nd > OKV_GGUF_MAX_DIMS)
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: tensor '%s': %llu dimensions (allowed 1..%d)", r->what, t->name,
                        (unsigned long long)nd, OKV_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t numel = 1;
    for (int d = 0; d < OKV_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if ((st = gr_uint(r, 8, &ne, t->name))) return st;
        if (ne < 1 || ne > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, ne, &numel) ||
            numel > (uint64_t)INT64_MAX)
            return okv_fail(r->err, OKV_ERR_FORMAT, "%s: tensor '%s': dimension %d is %llu (zero or too large)",
                            r->what, t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    t->n_elems = numel;
    if ((st = gr_uint(r, 4, &ty, t->name))) return st;
    if (!okv_ggml_type_name((int)(ty < OKV_GGML_TYPE_LIMIT ? ty : OKV_GGML_TYPE_LIMIT)))
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: tensor '%s': unknown ggml type %llu", r->what, t->name,
                        (unsigned long long)ty);
    t->type = (okv_ggml_type)ty;
    uint64_t blk = (uint64_t)okv_ggml_block_size(t->type), tsz = (uint64_t)okv_ggml_type_size(t->type);
    if ((uint64_t)t->ne[0] % blk)
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: tensor '%s': row length %lld is not a multiple of %s's block of %llu",
                        r->what, t->name, (long long)t->ne[0], okv_ggml_type_name(t->type), (unsigned long long)blk);
    if (__builtin_mul_overflow(numel / blk, tsz, &t->nbytes))
        return okv_fail(r->err, OKV_ERR_FORMAT, "%s: tensor '%s': byte size overflows", r->what, t->name);
    return gr_uint(r, 8, &t->offset, t->name);
}

static int cmp_tensor_offset(const void *a, const void *b, void *ctx) {
    const okv_gguf_tensor *ts = ctx;
    const okv_gguf_tensor *x = &ts[*(const int *)a], *y = &ts[*(const int *)b];
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}
static int cmp_tensor_name(const void *a, const void *b, void *ctx) {
    const okv_gguf_tensor *ts = ctx;
    return strcmp(ts[*(const int *)a].name, ts[*(const int *)b].name);
}

/* Every tensor inside the data section, aligned, not overlapping another;
 * names unique. Builds g->by_name. */
static okv_status place_tensors(okv_gguf *g, okv_error *err) {
    const char *what = g->path;
    for (int i = 0; i < g->n_tensors; i++) {
        okv_gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        if (t->offset % g->alignment)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s': data offset %llu is not a multiple of the alignment %llu",
                            what, t->name, (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (__builtin_add_overflow(t->offset, t->nbytes, &end) || end > g->data_size)
            return okv_fail(err, OKV_ERR_FORMAT,
                            "%s: tensor '%s': bytes [%llu, +%llu) lie outside the data section (%llu bytes)", what,
                            t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                            (unsigned long long)g->data_size);
        t->data = g->data + t->offset;
    }
    int *idx = malloc((size_t)(g->n_tensors > 0 ? g->n_tensors : 1) * sizeof *idx);
    if (!idx) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_tensors; i++) idx[i] = i;
    qsort_r(idx, (size_t)g->n_tensors, sizeof *idx, cmp_tensor_offset, g->tensors);
    for (int i = 1; i < g->n_tensors; i++) {
        const okv_gguf_tensor *a = &g->tensors[idx[i - 1]], *b = &g->tensors[idx[i]];
        if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset) {
            free(idx);
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section", what,
                            a->name, b->name);
        }
    }
    qsort_r(idx, (size_t)g->n_tensors, sizeof *idx, cmp_tensor_name, g->tensors);
    for (int i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[idx[i - 1]].name, g->tensors[idx[i]].name)) {
            okv_status st = okv_fail(err, OKV_ERR_FORMAT, "%s: tensor '%s' appears twice", what,
                                     g->tensors[idx[i]].name);
            free(idx);
            return st;
        }
    g->by_name = idx;
    return OKV_OK;
}

/* general.alignment: a power-of-two uint32 when present. */
static okv_status read_alignment(okv_gguf *g, okv_error *err) {
    g->alignment = OKV_GGUF_DEFAULT_ALIGNMENT;
    const okv_gguf_kv *kv = okv_gguf_find(g, "general.alignment");
    if (!kv) return OKV_OK;
    if (kv->type != OKV_GGUF_U32)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: key 'general.alignment' has type %s (expected uint32)", g->path,
                        okv_gguf_vtype_name(kv->type));
    if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: key 'general.alignment' is %llu (must be a power of two)", g->path,
                        (unsigned long long)kv->v.u);
    g->alignment = kv->v.u;
    return OKV_OK;
}

/* A header count is refused when `count` items of at least `min_bytes`
 * each cannot fit in the `left` bytes after the header (or exceed int). */
static okv_status check_count(const okv_gguf *g, uint64_t count, uint64_t left, uint64_t min_bytes, const char *field,
                              const char *items, okv_error *err) {
    if (count <= left / min_bytes && count <= INT32_MAX) return OKV_OK;
    return okv_fail(err, OKV_ERR_FORMAT,
                    "%s: header claims %llu %s (%s), more than the file can hold (%llu bytes left, %llu at least per entry)",
                    g->path, (unsigned long long)count, items, field, (unsigned long long)left,
                    (unsigned long long)min_bytes);
}

static okv_status parse_header(okv_gguf *g, okv_error *err) {
    gr r = {.p = g->map, .size = g->size, .what = g->path, .err = err};
    if (g->size < 4 || memcmp(g->map, "GGUF", 4))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: not a GGUF file (bad magic)", g->path);
    r.pos = 4;
    uint64_t version, n_tensors, n_kv;
    okv_status st = gr_uint(&r, 4, &version, "header version");
    if (st) return st;
    if ((version & 0xffffff) == 0 && (version >> 24) >= 1 && (version >> 24) <= 3)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: big-endian GGUF is not supported", g->path);
    if (version != 2 && version != 3)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: GGUF version %llu is not supported (2 and 3 are)", g->path,
                        (unsigned long long)version);
    g->version = (uint32_t)version;
    if ((st = gr_uint(&r, 8, &n_tensors, "header tensor count"))) return st;
    if ((st = gr_uint(&r, 8, &n_kv, "header metadata count"))) return st;
    if ((st = check_count(g, n_kv, gr_left(&r), GGUF_MIN_KV_BYTES, "metadata_kv_count", "metadata keys", err)) ||
        (st = check_count(g, n_tensors, gr_left(&r), GGUF_MIN_TENSOR_INFO_BYTES, "tensor_count", "tensors", err)))
        return st;
    g->kvs = calloc((size_t)n_kv + 1, sizeof *g->kvs);
    g->tensors = calloc((size_t)n_tensors + 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    if ((st = key_index_init(g, n_kv, err))) return st;
    for (uint64_t i = 0; i < n_kv; i++) {
        okv_gguf_kv *kv = &g->kvs[i];
        g->n_kvs = (int)i + 1;
        if ((st = parse_kv(&r, kv, (int)i))) return st;
        int first = key_index_add(g, (int)i);
        if (first >= 0)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: key '%s' appears twice (keys %d and %llu)", g->path, kv->key,
                            first, (unsigned long long)i);
    }
    if ((st = read_alignment(g, err))) return st;
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors = (int)i + 1;
        if ((st = parse_tensor_info(&r, &g->tensors[i], (int)i))) return st;
    }
    uint64_t start = r.pos, pad = (g->alignment - start % g->alignment) % g->alignment;
    if (__builtin_add_overflow(start, pad, &start) || start > g->size) {
        if (n_tensors == 0) start = g->size;
        else
            return okv_fail(err, OKV_ERR_FORMAT, "%s: truncated: the data section would start at %llu, file has %llu",
                            g->path, (unsigned long long)start, (unsigned long long)g->size);
    }
    g->data = g->map + start;
    g->data_size = g->size - start;
    return place_tensors(g, err);
}

/* ---- open / close ---------------------------------------------------- */

void okv_gguf_close(okv_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_kvs; i++) {
        free(g->kvs[i].key);
        free((void *)g->kvs[i].str_at);
    }
    for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kvs);
    free(g->key_slots);
    free(g->tensors);
    free(g->by_name);
    if (g->owns_map && g->map) munmap((void *)g->map, g->size);
    free(g->path);
    free(g);
}

static okv_status finish_open(okv_gguf *g, okv_gguf **out, okv_error *err) {
    okv_status st = parse_header(g, err);
    if (st) { okv_gguf_close(g); return st; }
    *out = g;
    return OKV_OK;
}

okv_status okv_gguf_open_memory(const void *data, size_t size, const char *what, okv_gguf **out, okv_error *err) {
    *out = NULL;
    okv_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = okv_strdup(what ? what : "<memory>"))) {
        free(g);
        return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    }
    g->map = data;
    g->size = size;
    return finish_open(g, out, err);
}

okv_status okv_gguf_open(const char *path, okv_gguf **out, okv_error *err) {
    *out = NULL;
    int fd;
    uint64_t size;
    okv_status st = okv_open_regular(path, &fd, &size, err); /* refuses directories/FIFOs/devices by name */
    if (st) return st;
    if (size < 24) {
        close(fd);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: truncated: %llu bytes is shorter than a GGUF header", path,
                        (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return okv_fail(err, OKV_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    okv_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = okv_strdup(path))) {
        free(g);
        munmap(map, (size_t)size);
        return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    }
    g->map = map;
    g->size = (size_t)size;
    g->owns_map = true;
    return finish_open(g, out, err);
}

bool okv_gguf_is_gguf_file(const char *path) {
    int fd;
    uint64_t size;
    okv_error err;
    if (okv_open_regular(path, &fd, &size, &err)) return false; /* a FIFO must not block here */
    char magic[4];
    bool yes = size >= 4 && read(fd, magic, 4) == 4 && !memcmp(magic, "GGUF", 4);
    close(fd);
    return yes;
}

const char *okv_gguf_path(const okv_gguf *g) { return g->path; }
uint32_t okv_gguf_version(const okv_gguf *g) { return g->version; }
uint64_t okv_gguf_alignment(const okv_gguf *g) { return g->alignment; }
const uint8_t *okv_gguf_data(const okv_gguf *g, uint64_t *size) {
    if (size) *size = g->data_size;
    return g->data;
}

/* ---- metadata access ------------------------------------------------- */

int okv_gguf_kv_count(const okv_gguf *g) { return g->n_kvs; }
const okv_gguf_kv *okv_gguf_kv_at(const okv_gguf *g, int i) {
    return i >= 0 && i < g->n_kvs ? &g->kvs[i] : NULL;
}
const okv_gguf_kv *okv_gguf_find(const okv_gguf *g, const char *key) {
    int i = g->key_slots[key_slot(g, key)];
    return i >= 0 ? &g->kvs[i] : NULL;
}

static okv_status find_typed(const okv_gguf *g, const char *key, const okv_gguf_kv **out, okv_error *err) {
    *out = okv_gguf_find(g, key);
    if (!*out) return okv_fail(err, OKV_ERR_NOT_FOUND, "%s: no key '%s'", g->path, key);
    return OKV_OK;
}

static okv_status wrong_type(const okv_gguf *g, const okv_gguf_kv *kv, const char *want, okv_error *err) {
    return okv_fail(err, OKV_ERR_FORMAT, "%s: key '%s' has type %s (expected %s)", g->path, kv->key,
                    okv_gguf_vtype_name(kv->type), want);
}

okv_status okv_gguf_get_str(const okv_gguf *g, const char *key, okv_gguf_str *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (kv->type != OKV_GGUF_STRING) return wrong_type(g, kv, "string", err);
    *out = kv->v.s;
    return OKV_OK;
}

okv_status okv_gguf_get_strdup(const okv_gguf *g, const char *key, char **out, okv_error *err) {
    okv_gguf_str s = {0};
    okv_status st = okv_gguf_get_str(g, key, &s, err);
    if (st) return st;
    *out = malloc(s.len + 1);
    if (!*out) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    memcpy(*out, s.ptr, s.len);
    (*out)[s.len] = 0;
    return OKV_OK;
}

/* Integer value of a scalar kv as int64; false if not an integer or it
 * does not fit. */
static bool scalar_int(okv_gguf_vtype t, const okv_gguf_kv *kv, int64_t *out) {
    if (!vtype_is_int(t)) return false;
    if (vtype_is_signed(t)) { *out = kv->v.i; return true; }
    if (kv->v.u > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)kv->v.u;
    return true;
}

okv_status okv_gguf_get_int(const okv_gguf *g, const char *key, int64_t *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (!scalar_int(kv->type, kv, out)) {
        if (kv->type == OKV_GGUF_U64)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: key '%s' is %llu, too large", g->path, key,
                            (unsigned long long)kv->v.u);
        return wrong_type(g, kv, "an integer", err);
    }
    return OKV_OK;
}

okv_status okv_gguf_get_uint(const okv_gguf *g, const char *key, uint64_t *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (!vtype_is_int(kv->type)) return wrong_type(g, kv, "an integer", err);
    if (vtype_is_signed(kv->type) && kv->v.i < 0)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: key '%s' is %lld (must not be negative)", g->path, key,
                        (long long)kv->v.i);
    *out = kv->v.u;
    return OKV_OK;
}

okv_status okv_gguf_get_float(const okv_gguf *g, const char *key, double *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    int64_t i;
    if (kv->type == OKV_GGUF_F32 || kv->type == OKV_GGUF_F64) *out = kv->v.f;
    else if (kv->type == OKV_GGUF_U64) *out = (double)kv->v.u;
    else if (scalar_int(kv->type, kv, &i)) *out = (double)i;
    else return wrong_type(g, kv, "a number", err);
    return OKV_OK;
}

okv_status okv_gguf_get_bool(const okv_gguf *g, const char *key, bool *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (kv->type != OKV_GGUF_BOOL) return wrong_type(g, kv, "bool", err);
    *out = kv->v.u != 0;
    return OKV_OK;
}

okv_status okv_gguf_get_array(const okv_gguf *g, const char *key, okv_gguf_vtype *elem_type, uint64_t *n,
                              okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = find_typed(g, key, &kv, err);
    if (st) return st;
    if (kv->type != OKV_GGUF_ARRAY) return wrong_type(g, kv, "array", err);
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n_elems;
    return OKV_OK;
}

bool okv_gguf_kv_int(const okv_gguf_kv *kv, uint64_t i, int64_t *out) {
    if (kv->type != OKV_GGUF_ARRAY || i >= kv->n_elems || !vtype_is_int(kv->elem_type)) return false;
    int w = vtype_width(kv->elem_type);
    okv_gguf_kv tmp;
    decode_scalar(kv->elem_type, kv->elems + i * (uint64_t)w, &tmp);
    return scalar_int(kv->elem_type, &tmp, out);
}

bool okv_gguf_kv_float(const okv_gguf_kv *kv, uint64_t i, double *out) {
    if (kv->type != OKV_GGUF_ARRAY || i >= kv->n_elems || !kv->elems) return false;
    int w = vtype_width(kv->elem_type);
    okv_gguf_kv tmp;
    decode_scalar(kv->elem_type, kv->elems + i * (uint64_t)w, &tmp);
    int64_t iv;
    if (kv->elem_type == OKV_GGUF_F32 || kv->elem_type == OKV_GGUF_F64) *out = tmp.v.f;
    else if (kv->elem_type == OKV_GGUF_U64) *out = (double)tmp.v.u;
    else if (scalar_int(kv->elem_type, &tmp, &iv)) *out = (double)iv;
    else return false;
    return true;
}

bool okv_gguf_kv_str(const okv_gguf_kv *kv, uint64_t i, okv_gguf_str *out) {
    if (kv->type != OKV_GGUF_ARRAY || kv->elem_type != OKV_GGUF_STRING || i >= kv->n_elems) return false;
    /* lengths were validated against the map at open */
    out->len = le_u(kv->str_at[i], 8);
    out->ptr = (const char *)kv->str_at[i] + 8;
    return true;
}

static okv_status arr_elem(const okv_gguf *g, const char *key, uint64_t i, const okv_gguf_kv **kv, okv_error *err) {
    okv_status st = find_typed(g, key, kv, err);
    if (st) return st;
    if ((*kv)->type != OKV_GGUF_ARRAY) return wrong_type(g, *kv, "array", err);
    if (i >= (*kv)->n_elems)
        return okv_fail(err, OKV_ERR_NOT_FOUND, "%s: key '%s': index %llu past the array's %llu elements", g->path,
                        key, (unsigned long long)i, (unsigned long long)(*kv)->n_elems);
    return OKV_OK;
}

static okv_status elem_type_error(const okv_gguf *g, const okv_gguf_kv *kv, const char *want, okv_error *err) {
    return okv_fail(err, OKV_ERR_FORMAT, "%s: key '%s' is an array of %s (expected %s)", g->path, kv->key,
                    okv_gguf_vtype_name(kv->elem_type), want);
}

okv_status okv_gguf_arr_int(const okv_gguf *g, const char *key, uint64_t i, int64_t *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = arr_elem(g, key, i, &kv, err);
    if (st) return st;
    return okv_gguf_kv_int(kv, i, out) ? OKV_OK : elem_type_error(g, kv, "integers", err);
}
okv_status okv_gguf_arr_float(const okv_gguf *g, const char *key, uint64_t i, double *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = arr_elem(g, key, i, &kv, err);
    if (st) return st;
    return okv_gguf_kv_float(kv, i, out) ? OKV_OK : elem_type_error(g, kv, "numbers", err);
}
okv_status okv_gguf_arr_bool(const okv_gguf *g, const char *key, uint64_t i, bool *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = arr_elem(g, key, i, &kv, err);
    if (st) return st;
    if (kv->elem_type != OKV_GGUF_BOOL) return elem_type_error(g, kv, "bools", err);
    *out = kv->elems[i] != 0;
    return OKV_OK;
}
okv_status okv_gguf_arr_str(const okv_gguf *g, const char *key, uint64_t i, okv_gguf_str *out, okv_error *err) {
    const okv_gguf_kv *kv;
    okv_status st = arr_elem(g, key, i, &kv, err);
    if (st) return st;
    return okv_gguf_kv_str(kv, i, out) ? OKV_OK : elem_type_error(g, kv, "strings", err);
}

/* ---- tensor access --------------------------------------------------- */

int okv_gguf_tensor_count(const okv_gguf *g) { return g->n_tensors; }
const okv_gguf_tensor *okv_gguf_tensor_at(const okv_gguf *g, int i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}
const okv_gguf_tensor *okv_gguf_find_tensor(const okv_gguf *g, const char *name) {
    int lo = 0, hi = g->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const okv_gguf_tensor *t = &g->tensors[g->by_name[mid]];
        int c = strcmp(t->name, name);
        if (!c) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}
