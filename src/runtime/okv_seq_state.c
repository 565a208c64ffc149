/* okv_seq_state.c — sequence state on disk, public side: the program's
 * fingerprint and okv_seq_save / okv_seq_load over a cache key, to a file
 * or an in-memory image, and okv_seq_peek (the file format and every check
 * live in the cache's okv_cache_state.c).
 *
 * The fingerprint is two 64-bit FNV-1a digests:
 *   layout  — the program's published cache layout (okv_layout_to_json), so
 *             a file from a model with other caches is refused as such;
 *   program — the JSON header (metadata, layout, graph, tensor table with
 *             names, dtypes, shapes, offsets and sizes; the "source"
 *             checkpoint path blanked, so the same export made elsewhere
 *             matches) plus a sample of each tensor's bytes: its size and 16
 *             spans of 64 bytes spread evenly over it (whole tensors up to
 *             1 KiB). Hashing every weight of a 1B program (2 GB) at every
 *             load would cost about a second; the sample touches at most
 *             ~1 KiB per tensor, and any re-export with other weights (a
 *             fine-tune changes nearly every value) differs in it. What it
 *             cannot see: a change confined to bytes outside the samples
 *             of a tensor of the same shape — the runtime does not guard
 *             against a deliberately edited program. */
#include <stdlib.h>

#include "offkv.h"
#include "okv_cache.h"
#include "okv_common.h"
#include "okv_runtime_internal.h"

#define FNV_OFFSET 1469598103934665603ULL
#define FNV_PRIME 1099511628211ULL
#define SAMPLES 16
#define SPAN 64

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

static uint64_t json_digest(uint64_t h, const cJSON *j) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    if (text) h = fnv(h, text, strlen(text));
    free(text);
    return h;
}

/* Size and sampled bytes of one tensor. */
static uint64_t tensor_digest(uint64_t h, const okv_tensor *t) {
    uint64_t n = t->nbytes;
    h = fnv(h, &n, sizeof n);
    const unsigned char *d = t->data;
    if (!d || n == 0) return h;
    if (n <= SAMPLES * SPAN) return fnv(h, d, (size_t)n);
    for (uint64_t i = 0; i < SAMPLES; i++) h = fnv(h, d + (n - SPAN) * i / (SAMPLES - 1), SPAN);
    return h;
}

void okv_program_fingerprint(const okv_program *p, uint64_t *layout, uint64_t *program) {
    const okv_program_file *pf = p->pf;
    cJSON *lj = okv_layout_to_json(&pf->layout);
    *layout = json_digest(FNV_OFFSET, lj);
    cJSON_Delete(lj);
    uint64_t h = FNV_OFFSET;
    cJSON *root = pf->header_json ? cJSON_Parse(pf->header_json) : NULL;
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    if (cJSON_GetObjectItemCaseSensitive(meta, "source"))
        cJSON_ReplaceItemInObjectCaseSensitive(meta, "source", cJSON_CreateString(""));
    h = json_digest(h, root);
    cJSON_Delete(root);
    for (int t = 0; t < pf->n_tensors; t++) h = tensor_digest(h, &pf->tensors[t]);
    *program = h;
}

static okv_kv_state_id state_id(const okv_program *p) {
    okv_kv_state_id id;
    okv_program_fingerprint(p, &id.layout, &id.program);
    return id;
}

okv_status okv_seq_save(const char *key, const okv_program *p, int seq, const char *path, const void *extra,
                        size_t extra_len, okv_error *err) {
    okv_kv *kv;
    okv_status st = okv_registry_acquire(key, &kv, err);
    if (st) return st;
    okv_kv_state_id id = state_id(p);
    st = okv_kv_state_save(kv, seq, &id, extra, extra_len, path, err);
    okv_registry_release(kv);
    return st;
}

okv_status okv_seq_load(const char *key, const okv_program *p, const char *path, int *seq, void **extra,
                        size_t *extra_len, okv_error *err) {
    okv_kv *kv;
    okv_status st = okv_registry_acquire(key, &kv, err);
    if (st) return st;
    okv_kv_state_id id = state_id(p);
    st = okv_kv_state_load(kv, &id, path, seq, extra, extra_len, err);
    okv_registry_release(kv);
    return st;
}

okv_status okv_seq_save_mem(const char *key, const okv_program *p, int seq, const void *extra, size_t extra_len,
                            void **data, size_t *len, okv_error *err) {
    *data = NULL;
    *len = 0;
    okv_kv *kv;
    okv_status st = okv_registry_acquire(key, &kv, err);
    if (st) return st;
    okv_kv_state_id id = state_id(p);
    st = okv_kv_state_save_mem(kv, seq, &id, extra, extra_len, data, len, err);
    okv_registry_release(kv);
    return st;
}

okv_status okv_seq_load_mem(const char *key, const okv_program *p, const void *data, size_t len, const char *what,
                            int *seq, void **extra, size_t *extra_len, okv_error *err) {
    okv_kv *kv;
    okv_status st = okv_registry_acquire(key, &kv, err);
    if (st) return st;
    okv_kv_state_id id = state_id(p);
    st = okv_kv_state_apply(kv, &id, data, len, what ? what : "sequence state image", seq, extra, extra_len, err);
    okv_registry_release(kv);
    return st;
}

okv_status okv_seq_peek(const okv_program *p, const char *path, int *length, void **extra, size_t *extra_len,
                        okv_error *err) {
    okv_kv_state_id id = state_id(p);
    int32_t n = 0;
    okv_status st = okv_kv_state_peek(&id, path, &n, extra, extra_len, err);
    *length = n;
    return st;
}
