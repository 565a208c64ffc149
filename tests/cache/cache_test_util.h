/* cache_test_util.h — helpers shared by the cache tests: layouts built from
 * literal arrays, the Gemma-3-1B geometry, a seeded RNG, and the per-run row
 * copy a kernel would do (the real kernels live in another layer). */
#ifndef CACHE_TEST_UTIL_H
#define CACHE_TEST_UTIL_H
#include <stdint.h>
#include <string.h>

#define OKV_CACHE_INTERNAL /* the tests look inside kv sets */
#include "okv_cache_internal.h"
#include "okv_common.h"
#include "okv_test.h"

/* An uncapped ring policy: window + max_write - 1 slots. */
static inline okv_policy ring_policy(int32_t window, int32_t max_write) {
    return okv_policy_ring_capped(window, max_write, INT32_MAX);
}

/* The rewind rule judged by lengths alone: whether, after a sequence of
 * length cur_len written straight through (no earlier rewind), cache policy p
 * can still serve a next step at new_len (<= cur_len). Flat: always. Ring:
 * iff new_len == 0 or max(0, new_len - window + 1) >= max(0, cur_len - slots).
 * The library tracks the oldest held position instead (okv_cache.oldest),
 * which differs after a rewind; the tests use this model to show both the
 * rule's boundaries and where length alone would be wrong. */
static inline bool can_rewind_by_length(const okv_policy *p, int32_t cur_len, int32_t new_len) {
    int32_t oldest = cur_len - p->slots;
    return okv_policy_can_serve(p, oldest > 0 ? oldest : 0, new_len);
}

/* okv_kv_create that must succeed (NULL after a reported failure). */
static inline okv_kv *kv_create_ok(const okv_layout *l, const okv_kv_options *o) {
    okv_kv *kv = NULL;
    okv_error err = {0};
    CHECK_OK(okv_kv_create(l, o, &kv, &err), &err);
    return kv;
}

/* A layout with one layer per cache (layer i -> cache i). */
static inline void make_layout(okv_layout *l, int n, const int *windows, int heads, int dim, int chunk, int max_ctx) {
    okv_error err;
    if (okv_layout_alloc(l, n, n, &err) != OKV_OK) abort();
    for (int c = 0; c < n; c++) {
        l->kv_heads[c] = heads;
        l->head_dims[c] = dim;
        l->windows[c] = windows ? windows[c] : 0;
        l->layer_to_cache[c] = c;
    }
    l->prefill_chunk_size = chunk;
    l->max_ctx_len = max_ctx;
}

/* Gemma-3-1B: 26 layers/caches, 1 KV head, head_dim 256, layers 5, 11, 17, 23
 * full attention, the other 22 sliding with window 512; chunk 512. */
static inline void make_gemma3_1b(okv_layout *l, int max_ctx) {
    int w[26];
    for (int i = 0; i < 26; i++) w[i] = (i % 6 == 5) ? 0 : 512;
    make_layout(l, 26, w, 1, 256, 512, max_ctx);
}

static inline uint32_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}
/* Uniform in [lo, hi]. */
static inline int rng_range(uint64_t *s, int lo, int hi) { return lo + (int)(rng_next(s) % (uint32_t)(hi - lo + 1)); }

static inline size_t cache_row_bytes(const okv_cache *c) {
    return (size_t)c->kv_heads * c->head_dim * okv_dtype_size(c->k_dtype) /* K and V alike in these tests */;
}

/* Copies the step's rows src[0..T) into a pool along the write runs, as the
 * update half of update_and_attend does. */
static inline void write_along_runs(const okv_cache *c, void *pool, const okv_step_plan *p, const uint8_t *src) {
    size_t row = cache_row_bytes(c);
    size_t done = 0;
    for (int r = 0; r < p->n_write; r++) {
        memcpy((uint8_t *)pool + (size_t)p->write[r].slot * row, src + done * row, (size_t)p->write[r].n * row);
        done += (size_t)p->write[r].n;
    }
}

/* Pool row holding position j according to the read runs, or NULL if no run
 * covers j. */
static inline const uint8_t *row_for_position(const okv_cache *c, const void *pool, const okv_step_plan *p, int32_t j) {
    for (int r = 0; r < p->n_read; r++) {
        const okv_run *run = &p->read[r];
        if (j >= run->pos && j < run->pos + run->n)
            return (const uint8_t *)pool + (size_t)(run->slot + (j - run->pos)) * cache_row_bytes(c);
    }
    return NULL;
}
#endif
