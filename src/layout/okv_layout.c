/* okv_layout.c — building, releasing and checking an okv_layout, the cache
 * description a program publishes. Kept apart from the cache layer because
 * the graph builder (hf), export and the program file (format) produce and
 * read layouts without ever touching a cache; the cache layer consumes them.
 * The checks run on layouts read from untrusted program files, so every
 * count and dimension is bounded before anything sizes memory from it. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_layout.h"

okv_status okv_layout_alloc(okv_layout *l, int n_caches, int n_layers, okv_error *err) {
    memset(l, 0, sizeof *l);
    if (n_caches < 1 || n_layers < 1)
        return okv_fail(err, OKV_ERR_INVALID, "cache layout: n_caches (%d) and n_layers (%d) must be >= 1",
                        n_caches, n_layers);
    l->n_caches = n_caches;
    l->n_layers = n_layers;
    l->kv_heads = calloc((size_t)n_caches, sizeof(int));
    l->head_dims = calloc((size_t)n_caches, sizeof(int));
    l->windows = calloc((size_t)n_caches, sizeof(int));
    l->layer_to_cache = calloc((size_t)n_layers, sizeof(int));
    if (!l->kv_heads || !l->head_dims || !l->windows || !l->layer_to_cache) {
        okv_layout_free(l);
        return okv_fail(err, OKV_ERR_NOMEM, "cache layout: out of memory (%d caches, %d layers)",
                        n_caches, n_layers);
    }
    return OKV_OK;
}

void okv_layout_free(okv_layout *l) {
    if (!l) return;
    free(l->kv_heads);
    free(l->head_dims);
    free(l->windows);
    free(l->layer_to_cache);
    memset(l, 0, sizeof *l);
}

okv_status okv_layout_validate(const okv_layout *l, okv_error *err) {
    if (l->n_caches < 1 || l->n_layers < 1 || l->n_caches > OKV_LAYOUT_MAX_CACHES || l->n_layers > OKV_LAYOUT_MAX_CACHES)
        return okv_fail(err, OKV_ERR_INVALID, "cache layout: n_caches (%d) and n_layers (%d) must be in [1, %d]",
                        l->n_caches, l->n_layers, OKV_LAYOUT_MAX_CACHES);
    if (!l->kv_heads || !l->head_dims || !l->windows || !l->layer_to_cache)
        return okv_fail(err, OKV_ERR_INVALID, "cache layout: missing kv_heads/head_dims/windows/layer_to_cache array");
    if (l->max_ctx_len < 1 || l->max_ctx_len > OKV_LAYOUT_MAX_CTX)
        return okv_fail(err, OKV_ERR_INVALID, "cache layout: max_ctx_len %d must be in [1, %d]", l->max_ctx_len,
                        OKV_LAYOUT_MAX_CTX);
    if (l->prefill_chunk_size < 1 || l->prefill_chunk_size > l->max_ctx_len)
        return okv_fail(err, OKV_ERR_INVALID, "cache layout: prefill_chunk_size %d must be in [1, max_ctx_len %d]",
                        l->prefill_chunk_size, l->max_ctx_len);
    for (int c = 0; c < l->n_caches; c++) {
        if (l->kv_heads[c] < 1 || l->kv_heads[c] > OKV_LAYOUT_MAX_HEADS)
            return okv_fail(err, OKV_ERR_INVALID, "cache layout: kv_heads[%d] = %d must be in [1, %d]", c, l->kv_heads[c],
                            OKV_LAYOUT_MAX_HEADS);
        if (l->head_dims[c] < 1 || l->head_dims[c] > OKV_LAYOUT_MAX_HEAD_DIM)
            return okv_fail(err, OKV_ERR_INVALID, "cache layout: head_dims[%d] = %d must be in [1, %d]", c, l->head_dims[c],
                            OKV_LAYOUT_MAX_HEAD_DIM);
        if ((int64_t)l->kv_heads[c] * l->head_dims[c] > OKV_LAYOUT_MAX_ROW)
            return okv_fail(err, OKV_ERR_INVALID, "cache layout: kv_heads[%d] * head_dims[%d] = %lld exceeds %d", c, c,
                            (long long)l->kv_heads[c] * l->head_dims[c], OKV_LAYOUT_MAX_ROW);
        if (l->windows[c] < 0)
            return okv_fail(err, OKV_ERR_INVALID, "cache layout: windows[%d] = %d must be >= 0", c, l->windows[c]);
        if (l->windows[c] > 0 && l->prefill_chunk_size > l->windows[c])
            return okv_fail(err, OKV_ERR_INVALID,
                            "cache layout: prefill_chunk_size %d exceeds windows[%d] = %d",
                            l->prefill_chunk_size, c, l->windows[c]);
    }
    for (int i = 0; i < l->n_layers; i++) {
        int c = l->layer_to_cache[i];
        if (c < 0 || c >= l->n_caches)
            return okv_fail(err, OKV_ERR_INVALID, "cache layout: layer_to_cache[%d] = %d out of range [0, %d)",
                            i, c, l->n_caches);
    }
    for (int c = 0; c < l->n_caches; c++) {
        bool used = false;
        for (int i = 0; i < l->n_layers && !used; i++) used = l->layer_to_cache[i] == c;
        if (!used)
            return okv_fail(err, OKV_ERR_INVALID, "cache layout: cache %d is used by no layer (layer_to_cache)", c);
    }
    return OKV_OK;
}
