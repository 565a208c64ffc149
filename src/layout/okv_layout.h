/* okv_layout.h — what a program publishes about the caches it needs: how
 * many, their K/V geometry and windows, which layer reads which cache, the
 * largest step and the context limit. hf builds it, format reads and writes
 * it, the cache layer builds caches from it; none of them needs the others
 * for that, so it is its own small layer (it depends on common only). */
#ifndef OKV_LAYOUT_H
#define OKV_LAYOUT_H

#include "offkv_base.h"

/* What a program publishes about the caches it needs. Arrays are owned by
 * whoever built the layout (okv_layout_free releases ones built with
 * okv_layout_alloc). */
typedef struct okv_layout {
    int n_caches;
    int *kv_heads;      /* [n_caches] */
    int *head_dims;     /* [n_caches] (K and V share it) */
    int *windows;       /* [n_caches], 0 = full history */
    int n_layers;
    int *layer_to_cache; /* [n_layers] */
    int prefill_chunk_size; /* largest T a step may have (max_write) */
    int max_ctx_len;
} okv_layout;

/* Bounds okv_layout_validate enforces (a layout may come from an untrusted
 * program file). */
#define OKV_LAYOUT_MAX_CACHES (1 << 16)   /* also the bound on n_layers */
#define OKV_LAYOUT_MAX_CTX (1 << 30)      /* max_ctx_len (and so prefill_chunk_size) */
#define OKV_LAYOUT_MAX_HEADS (1 << 16)
#define OKV_LAYOUT_MAX_HEAD_DIM (1 << 16)
#define OKV_LAYOUT_MAX_ROW (1 << 28)      /* kv_heads * head_dim of one cache */

okv_status okv_layout_alloc(okv_layout *l, int n_caches, int n_layers, okv_error *err);
void okv_layout_free(okv_layout *l);
/* Checks internal consistency (dims in their bounds, map in range, chunk <= ...). */
okv_status okv_layout_validate(const okv_layout *l, okv_error *err);

#endif
