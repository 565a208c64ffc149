/* okv_st_write.c — the safetensors writer behind okv_st_write.h.
 *
 * Validation is the caller's contract (tests build the tensors), but a bad
 * name, dtype or shape still fails with a message rather than writing a file
 * the reader would refuse. The header is built with cJSON so names are
 * escaped; the index is printed the way HF prints it (indent 2, sorted keys)
 * so tests compare against what transformers writes. */
#include "okv_st_write.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "okv_common.h"

static const char *st_write_dtype_name(const okv_st_write_tensor *t) {
    return t->dtype_name ? t->dtype_name : okv_st_dtype_str(t->dtype);
}

/* Byte size of a write tensor; false if its dtype, rank or shape is bad. */
static bool st_write_bytes(const okv_st_write_tensor *t, uint64_t *bytes) {
    int bits = okv_st_dtype_bits(st_write_dtype_name(t));
    if (!bits || t->ndim < 0 || t->ndim > OKV_ST_MAX_DIMS) return false;
    uint64_t numel = 1, total_bits;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel)) return false;
    if (__builtin_mul_overflow(numel, (uint64_t)bits, &total_bits) || total_bits % 8) return false;
    *bytes = total_bits / 8;
    return *bytes <= SIZE_MAX;
}

size_t okv_st_write_tensor_bytes(const okv_st_write_tensor *t) {
    uint64_t bytes;
    return st_write_bytes(t, &bytes) ? (size_t)bytes : 0;
}

/* Builds the JSON header text for tensors packed in order (heap string). */
static char *st_build_header(const okv_st_write_tensor *tensors, int n, const char *path, okv_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const okv_st_write_tensor *t = &tensors[i];
        uint64_t nbytes;
        if (!t->name || !st_write_bytes(t, &nbytes) || (nbytes && !t->data)) {
            cJSON_Delete(root);
            okv_fail(err, OKV_ERR_INVALID, "%s: tensor %d ('%s'): bad name, dtype or shape", path, i,
                     t->name ? t->name : "(null)");
            return NULL;
        }
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", st_write_dtype_name(t));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + nbytes)));
        off += nbytes;
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory building the header", path);
    return text;
}

okv_status okv_st_write(const char *path, const okv_st_write_tensor *tensors, int n, okv_error *err) {
    char *header = st_build_header(tensors, n, path, err);
    if (!header) return err ? err->status : OKV_ERR_INVALID;
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) / 8 * 8; /* HF pads with spaces so data starts 8-aligned */
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(header);
        return okv_fail(err, OKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; ok && i < n; i++) {
        size_t nb = okv_st_write_tensor_bytes(&tensors[i]);
        if (nb) ok = fwrite(tensors[i].data, 1, nb, f) == nb;
    }
    free(header);
    if (fclose(f) != 0) ok = false;
    if (!ok) return okv_fail(err, OKV_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return OKV_OK;
}

static int st_name_idx_cmp(const void *a, const void *b) {
    const okv_st_write_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Shard of each tensor: cumulative-bytes split into n_shards runs, never
 * skipping a shard and leaving at least one tensor for each later shard. */
static void st_assign_shards(const okv_st_write_tensor *tensors, int n, int n_shards, int *shard) {
    uint64_t total = 0, cum = 0;
    for (int i = 0; i < n; i++) total += okv_st_write_tensor_bytes(&tensors[i]);
    int prev = 0;
    for (int i = 0; i < n; i++) {
        int s = total ? (int)(cum * (uint64_t)n_shards / total) : 0;
        if (s > n_shards - 1) s = n_shards - 1;
        if (s < prev) s = prev;
        if (s > prev + 1) s = prev + 1;
        if (n - i == n_shards - 1 - prev) s = prev + 1; /* every remaining shard needs one */
        if (i == 0) s = 0;
        shard[i] = prev = s;
        cum += okv_st_write_tensor_bytes(&tensors[i]);
    }
}

/* Writes a JSON string literal (escaped by cJSON). */
static bool st_put_json_string(FILE *f, const char *str) {
    cJSON *node = cJSON_CreateString(str);
    char *text = node ? cJSON_PrintUnformatted(node) : NULL;
    bool ok = text && fputs(text, f) >= 0;
    free(text);
    cJSON_Delete(node);
    return ok;
}

/* The index as HF writes it (json.dumps(indent=2, sort_keys=True)):
 * {"metadata": {"total_size": N}, "weight_map": {name: shard, ...}}. */
static okv_status st_write_index(const char *dir, const okv_st_write_tensor *tensors, int n,
                                 const int *shard, int n_shards, okv_error *err) {
    char *path = okv_path_join(dir, OKV_ST_INDEX_NAME);
    const okv_st_write_tensor **order = malloc((size_t)n * sizeof *order);
    if (!path || !order) { free(path); free(order); return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir); }
    uint64_t total = 0;
    for (int i = 0; i < n; i++) { order[i] = &tensors[i]; total += okv_st_write_tensor_bytes(&tensors[i]); }
    qsort(order, (size_t)n, sizeof *order, st_name_idx_cmp);
    okv_status st = OKV_OK;
    FILE *f = fopen(path, "wb");
    if (!f) st = okv_fail(err, OKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    else {
        bool ok = fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
                          (unsigned long long)total) >= 0;
        for (int i = 0; i < n && ok; i++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard[order[i] - tensors] + 1, n_shards);
            ok = fputs(i ? ",\n    " : "\n    ", f) >= 0 && st_put_json_string(f, order[i]->name) &&
                 fputs(": ", f) >= 0 && st_put_json_string(f, name);
        }
        ok = ok && fputs("\n  }\n}\n", f) >= 0;
        if (fclose(f) != 0 || !ok) st = okv_fail(err, OKV_ERR_IO, "%s: write failed", path);
    }
    free(order);
    free(path);
    return st;
}

okv_status okv_st_write_sharded(const char *dir, const okv_st_write_tensor *tensors, int n,
                                int n_shards, okv_error *err) {
    if (n_shards < 1 || n_shards > 99999 || n_shards > n)
        return okv_fail(err, OKV_ERR_INVALID, "%s: cannot split %d tensors into %d shards", dir, n, n_shards);
    int *shard = malloc((size_t)n * sizeof *shard);
    if (!shard) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir);
    st_assign_shards(tensors, n, n_shards, shard);
    okv_status st = OKV_OK;
    for (int s = 0, i = 0; s < n_shards && !st; s++) {
        int j = i;
        while (j < n && shard[j] == s) j++;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        char *path = okv_path_join(dir, name);
        if (!path) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir);
        else st = okv_st_write(path, tensors + i, j - i, err);
        free(path);
        i = j;
    }
    if (!st) st = st_write_index(dir, tensors, n, shard, n_shards, err);
    free(shard);
    return st;
}
