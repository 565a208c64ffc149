/* okv_cache_internal.h — the fields of a kv set, for the cache layer's own
 * files and for tests that look inside one (they define OKV_CACHE_INTERNAL
 * before including this). Every other layer sees okv_kv as an opaque handle
 * and reads it through the accessors of okv_cache.h, so how a set stores its
 * caches, plans and cell tables can change without touching the runtime;
 * the #error below keeps it that way (okv_cache's CMakeLists defines the
 * macro for the layer's sources only). */
#ifndef OKV_CACHE_INTERNAL_H
#define OKV_CACHE_INTERNAL_H

#ifndef OKV_CACHE_INTERNAL
#error "okv_cache_internal.h is the cache layer's own header: use the okv_kv_* accessors of okv_cache.h"
#endif

#include <pthread.h>

#include "okv_cache.h"

/* ---- byte layer ------------------------------------------------------------ */

/* One cache: its policy plus K and V pools of [slots_alloc, kv_heads, head_dim]
 * elements in k_dtype / v_dtype. Flat pools grow by doubling; ring pools are allocated
 * once at exactly policy.slots. */
typedef struct okv_cache {
    okv_policy policy;
    int kv_heads, head_dim;
    okv_dtype k_dtype, v_dtype; /* each pool's storage dtype */
    int32_t slots_alloc;    /* slots currently allocated */
    void *k, *v;
    int32_t oldest;         /* ring: smallest position whose slot still holds
                             * it (keys [oldest, length) are valid); flat: 0 */
} okv_cache;

/* Window overrides change only the caches' policies (caches[i].policy,
 * plans[i].window); `layout` stays the program's declared layout.
 *
 * Concurrency: `lock` guards seq, step_pos/step_T, the caches' slots_alloc,
 * pools pointers and oldest. step_T != 0 is the "step in flight" flag (see
 * okv_kv in okv_cache.h for what it refuses meanwhile). */
struct okv_kv {
    okv_layout layout;      /* private copy */
    okv_seq seq;
    int n_caches;
    okv_cache *caches;
    okv_step_plan *plans;   /* [n_caches], filled by begin_step */
    int32_t step_pos, step_T; /* the step in flight, T = 0 if none */
    size_t max_pool_bytes;  /* from the options, 0 = no limit */
    struct okv_kv_cells *cells; /* cell mode, NULL = one sequence (seq above) */
    pthread_mutex_t lock;
};

/* Grows pools so cache c holds at least need[c] slots (doubling, capped at
 * its policy.slots); all new pools are allocated before any old one is
 * released, so on failure nothing changed. Caller holds the lock. */
okv_status okv_kv_grow_pools(okv_kv *kv, const int32_t *need, okv_error *err);

/* Bytes of one position's row in cache c's K pool (v: V pool); 0 on overflow. */
size_t okv_kv_slot_bytes(const okv_cache *c, bool v);

/* ---- cell mode (okv_cache_seqs.c; what it does: okv_cache.h, 2b) ------------ */

typedef struct okv_kv_cells {
    okv_seq_table seqs;
    int n_groups;
    okv_cells *groups;      /* [n_groups] */
    int *group_of;          /* [n_caches] */
    int32_t *step_cells;    /* [n_groups * max_write] cell of each token in flight */
    okv_run *step_runs;     /* [n_groups * max_write] those cells as write runs */
    int *n_step_runs;       /* [n_groups] */
    int32_t *step_seqs;     /* [max_write] */
    int32_t *count;         /* [max_seqs] scratch */
    /* the batch's distinct sequences, in order of first appearance */
    int n_uniq;
    int32_t *uniq;          /* [max_write] sequence ids */
    int32_t *row_uniq;      /* [max_write] index into uniq of each token */
    int32_t *need;          /* [n_caches] scratch: pool slots the batch needs */
    /* read runs of uniq u in group g: reads[read_off[g * max_write + u] ...], read_n[...] runs;
     * reads_cap is planned at creation for any batch, so a step never allocates */
    okv_run *reads;
    size_t reads_cap;
    size_t *read_off;       /* [n_groups * max_write] */
    int32_t *read_n;        /* [n_groups * max_write] */
    int32_t *slot_of;       /* [capacity + 1] scratch: cell of each position */
} okv_kv_cells;

okv_status okv_kv_cells_create(okv_kv *kv, const okv_kv_options *opt, okv_error *err);
void okv_kv_cells_free(okv_kv *kv);
/* commit/abort of a batch go through okv_kv_commit_step / okv_kv_abort_step. */
void okv_kv_cells_commit(okv_kv *kv);
void okv_kv_cells_abort(okv_kv *kv);

/* ---- state files (okv_cache_state.c) --------------------------------------- */

uint32_t okv_kv_state_crc32(uint32_t crc, const void *data, size_t n);
/* Checks and applies a file image (what = its name for errors): a single
 * set's sequence is replaced; a cell set gets a new sequence (*seq). extra
 * (may be NULL) receives a heap copy of the extra blob (NULL if empty). On
 * any error the set is unchanged. */
okv_status okv_kv_state_apply(okv_kv *kv, const okv_kv_state_id *id, const void *data, size_t len, const char *what,
                              int *seq, void **extra, size_t *extra_len, okv_error *err);

#endif
