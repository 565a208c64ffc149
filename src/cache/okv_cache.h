/* okv_cache.h — the runtime-owned KV cache (the "off-graph" half of offkv).
 *
 * Three levels, each usable alone:
 *   1. Tensor-free core: the sequence controller (one logical length shared
 *      by every cache of a program), layout policies (flat: slot = position;
 *      ring: slot = position mod S with S = min(window + max_write - 1,
 *      capacity)) and the
 *      step planner that turns (position, T) into write runs, read runs and a
 *      read base position. No bytes are touched here.
 *   2. Byte layer: one K pool and one V pool per cache, storage dtype chosen at
 *      run time, flat pools start small and double up to the capacity.
 *   3. Registry: a thread-safe process-wide table mapping a cache key (string)
 *      to a kv set, so programs can be bound to caches by name.
 *
 * A step is transactional: okv_kv_begin_step validates everything (positions
 * continue the sequence, no overflow, pools grown) before anything is
 * written; after the graph ran, okv_kv_commit_step advances the length. If
 * begin fails, every cache is exactly as before.
 *
 * A kv set (okv_kv) is opaque here: its fields live in okv_cache_internal.h,
 * the layer's own, and the runtime reads what a step needs through the
 * accessors of 2a. */
#ifndef OKV_CACHE_H
#define OKV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "offkv_base.h"
#include "okv_layout.h" /* what a program publishes about its caches */
#include "okv_run.h"    /* the spans the planner hands the kernels */

/* What one cache does in one step of T tokens at positions pos..pos+T-1. */
typedef struct okv_step_plan {
    okv_run write[2];   /* where this step's T k/v rows go (2 runs if a ring wraps) */
    int n_write;
    okv_run read[2];    /* positions [read_base, pos+T) in position order */
    int n_read;
    int32_t read_base;  /* first position any query of the step may see */
    int32_t window;     /* 0 = full; the kernel masks p - j < window */
} okv_step_plan;

/* ---- 1. tensor-free core ------------------------------------------------ */

/* CELLS: a cache of a cell-pool kv set (slots are cells, see okv_cells);
 * slots = the cell table's n_cells, window = its window. */
typedef enum okv_policy_kind { OKV_POLICY_FLAT = 0, OKV_POLICY_RING = 1, OKV_POLICY_CELLS = 2 } okv_policy_kind;

/* Layout policy of one cache: how positions map to slots. A cache with a
 * window (> 0) is always a ring; flat caches see their full history. */
typedef struct okv_policy {
    okv_policy_kind kind;
    int32_t window;     /* ring only */
    int32_t max_write;  /* largest step (program's prefill_chunk_size) */
    int32_t slots;      /* ring: min(window + max_write - 1, capacity); flat: capacity */
} okv_policy;

okv_policy okv_policy_flat(int32_t capacity);
/* The ring a cache of `capacity` positions gets: min(window + max_write - 1,
 * capacity) slots. A ring never needs more slots than the sequence can have
 * positions (with S = capacity no slot is ever overwritten), so a window of
 * 100000 under a capacity of 64 costs 64 slots, not 100063. */
okv_policy okv_policy_ring_capped(int32_t window, int32_t max_write, int32_t capacity);
/* Plans a step of T tokens starting at pos (callers validated pos/T). */
void okv_policy_plan(const okv_policy *p, int32_t pos, int32_t T, okv_step_plan *out);
/* The exact rule behind rewinds: a ring whose slots still hold positions
 * [oldest_held, length) can serve a next step at new_len iff the keys that
 * step needs from before it, [max(0, new_len - window + 1), new_len), are all
 * at or after oldest_held (or there are none). Flat: always. okv_kv tracks
 * oldest_held per cache (okv_cache.oldest) because after a rewind it is no
 * longer length - slots: rewinding 20 -> 18 on a 9-slot ring keeps 11 as the
 * oldest position, so a second rewind to 17 must still be judged against 11. */
bool okv_policy_can_serve(const okv_policy *p, int32_t oldest_held, int32_t new_len);
/* Oldest position a ring still holds after a step wrote [pos, pos+T):
 * max(oldest_held, pos + T - slots). Flat: unchanged (0). */
int32_t okv_policy_oldest_after_write(const okv_policy *p, int32_t oldest_held, int32_t pos, int32_t T);

/* Sequence controller: the logical length shared by all caches of a set. */
typedef struct okv_seq {
    int32_t length;
    int32_t capacity;   /* max positions (max_ctx_len or the user's override) */
    int32_t max_write;  /* largest T per step */
} okv_seq;

/* OK iff positions are exactly length..length+T-1, 1 <= T <= max_write and
 * length + T <= capacity; the error says which rule failed. */
okv_status okv_seq_check_step(const okv_seq *s, const int32_t *positions, int32_t T, okv_error *err);

/* ---- 1b. cell tables and the sequence table (tensor-free) ----------------
 *
 * In cell mode every cache's slots are cells. A cell holds one position of
 * one or more sequences: pos[cell] (-1 = free) and the owner set
 * owners[cell * words ...] (bit s = sequence s). All caches with the same
 * window share one table: a token takes the same cell index in each of them.
 * A windowed table (W > 0) keeps, per sequence, positions >= keep_from(len)
 * = len - (W + max_write - 1), exactly what a ring of W + max_write - 1
 * slots holds, so the rewind rule (okv_policy_can_serve against the
 * sequence's oldest held position) carries over unchanged. */
#define OKV_CELLS_MAX_SEQS 256

typedef struct okv_cells {
    int32_t window;      /* 0 = full history */
    int32_t max_write;   /* largest step */
    int32_t n_cells;     /* cells the table may use */
    int max_seqs, words; /* words = uint64 per owner set */
    int32_t *pos;        /* [n_cells], -1 = free */
    uint64_t *owners;    /* [n_cells * words] */
    int32_t *oldest;     /* [max_seqs] smallest position the sequence may still hold */
    int32_t n_used;      /* cells with at least one owner */
    int32_t hint;        /* every cell below it is used */
    int32_t hwm;         /* every cell at or above it is free */
} okv_cells;

okv_status okv_cells_init(okv_cells *c, int32_t window, int32_t max_write, int32_t n_cells, int max_seqs, okv_error *err);
void okv_cells_free(okv_cells *c);
bool okv_cells_owns(const okv_cells *c, int32_t cell, int seq);
/* Lowest free cell >= from, or -1. */
int32_t okv_cells_find_free(const okv_cells *c, int32_t from);
/* Gives free cell `cell` position pos, owned by seq alone. */
void okv_cells_take(okv_cells *c, int32_t cell, int seq, int32_t pos);
/* seq stops owning its cells of positions [p0, p1); unowned cells are freed. */
void okv_cells_drop(okv_cells *c, int seq, int32_t p0, int32_t p1);
/* dst (owning nothing) becomes an owner of src's cells of positions [0, upto). */
void okv_cells_share(okv_cells *c, int src, int dst, int32_t upto);
/* Whether a next step of seq at new_len finds every key it needs. */
bool okv_cells_can_serve(const okv_cells *c, int seq, int32_t new_len);
/* After seq reached `length` by a step: windowed tables drop its positions
 * below length - (window + max_write - 1). */
void okv_cells_after_step(okv_cells *c, int seq, int32_t length);
/* Whether query (seq, p) sees cell `cell`: owned by seq, pos <= p and, windowed, p - pos < window. */
bool okv_cells_visible(const okv_cells *c, int32_t cell, int seq, int32_t p);

/* Which sequences exist and how long each is. */
typedef struct okv_seq_table {
    int max_seqs;
    int32_t capacity;    /* most positions one sequence may get */
    int32_t max_write;   /* largest step (all sequences together) */
    bool *alive;         /* [max_seqs] */
    int32_t *length;     /* [max_seqs] */
} okv_seq_table;

okv_status okv_seq_table_init(okv_seq_table *t, int max_seqs, int32_t capacity, int32_t max_write, okv_error *err);
void okv_seq_table_free(okv_seq_table *t);
/* OK iff 1 <= T <= max_write, every seqs[t] is alive and each sequence's
 * tokens, in batch order, are at positions length, length+1, ... within
 * capacity. count[max_seqs] is scratch: on return count[s] = tokens of s. */
okv_status okv_seq_table_check_batch(const okv_seq_table *t, const int32_t *seqs, const int32_t *positions, int32_t T,
                                     int32_t *count, okv_error *err);

/* ---- 2. byte layer -------------------------------------------------------- */

/* Run-time choices for building caches from a layout. */
typedef struct okv_kv_options {
    okv_dtype k_dtype, v_dtype; /* storage of the K and V pools; default OKV_F32 */
    int32_t max_capacity;      /* 0 = layout's max_ctx_len */
    int32_t initial_capacity;  /* 0 = min(256, capacity) */
    const int32_t *windows_override; /* NULL = layout's windows; else repeats */
    int n_windows_override;          /* over caches ({512, 256} alternates);
                                      * 0 entry = flat, W > 0 = ring of
                                      * min(W + chunk - 1, capacity) slots
                                      * (W < chunk is fine),
                                      * negative = error */
    size_t max_pool_bytes;     /* 0 = no limit; creating or growing pools past
                                * it fails with OKV_ERR_NOMEM, like malloc */
    bool cells;                /* cell pool for many sequences (okv_kv_cells) */
    int max_seqs;              /* cells: 1..OKV_CELLS_MAX_SEQS, 0 = 64 */
    int32_t n_cells;           /* cells: full-history tables' cells, 0 = capacity */
    int32_t max_step;          /* most tokens per step, 1..prefill_chunk_size; 0 = prefill_chunk_size */
} okv_kv_options;

void okv_kv_options_default(okv_kv_options *o);

/* A set of caches built from one layout, sharing one sequence controller
 * (or, in cell mode, one sequence table). Its fields are the cache layer's
 * own (okv_cache_internal.h): other layers read it through the accessors
 * below.
 *
 * Concurrency: a runner whose okv_kv_begin_step / okv_kv_begin_batch
 * succeeded owns the set until okv_kv_commit_step or okv_kv_abort_step;
 * meanwhile any other begin, rewind or sequence verb fails (OKV_ERR_STATE)
 * and clear does nothing. So two runners never step one set at once, and the
 * pools do not move (no growth) while kernels write into them. */
typedef struct okv_kv okv_kv;

okv_status okv_kv_create(const okv_layout *layout, const okv_kv_options *opt, okv_kv **out, okv_error *err);
void okv_kv_free(okv_kv *kv);
/* Validates the step, grows pools if needed and plans it (okv_kv_plan). On error
 * nothing changed. */
okv_status okv_kv_begin_step(okv_kv *kv, const int32_t *positions, int32_t T, okv_error *err);
/* Makes the step's writes part of the sequence (length += T). */
void okv_kv_commit_step(okv_kv *kv);
/* Abandons a begun step: length unchanged. The step's slots may already
 * have been written, so rings count them as overwritten (cache.oldest). */
void okv_kv_abort_step(okv_kv *kv);
/* Shortens the sequence to new_len. Accepted iff no step is in flight,
 * 0 <= new_len <= length and every cache can serve a next step at new_len
 * (okv_policy_can_serve against the cache's oldest held position); else an
 * error naming the cache and the bound, and nothing changes. */
okv_status okv_kv_rewind(okv_kv *kv, int32_t new_len, okv_error *err);
/* Length back to 0 (pools are kept). Does nothing while a step is in flight. */
void okv_kv_clear(okv_kv *kv);
/* Bytes currently allocated by all pools. */
size_t okv_kv_bytes(const okv_kv *kv);
/* Bytes all pools will hold once the sequence reaches capacity (flat pools
 * fully grown, rings as they are): what to budget for. */
size_t okv_kv_bytes_full(const okv_kv *kv);
/* The sequence length, read under the set's lock. */
int32_t okv_kv_length(const okv_kv *kv);
/* One line like "26 caches: 4 flat + 22 ring(window 512) | capacity 4096 | kv bf16 | 52.0 MiB". */
void okv_kv_describe(const okv_kv *kv, char *buf, size_t n);

/* ---- 2a. what a runner reads of a set ---------------------------------------
 * Fixed at creation (no lock needed): the layout, mode, capacity and largest
 * step. Valid only between a successful begin and its commit / abort, while
 * the caller owns the set: the pools of a cache and the step's plans. */

/* The program's declared layout (window overrides change only the caches'
 * policies and plans, never this). */
const okv_layout *okv_kv_layout(const okv_kv *kv);
/* Whether the set is a cell pool for many sequences (okv_kv_options.cells). */
bool okv_kv_is_cells(const okv_kv *kv);
/* Most positions one sequence may hold, and the largest step (T) it takes. */
int32_t okv_kv_capacity(const okv_kv *kv);
int32_t okv_kv_max_write(const okv_kv *kv);

/* Cache c's pools as the attention kernels address them: [slots, kv_heads,
 * head_dim] elements of k_dtype / v_dtype. */
typedef struct okv_kv_pools {
    void *k, *v;
    okv_dtype k_dtype, v_dtype;
    int kv_heads, head_dim;
} okv_kv_pools;
okv_kv_pools okv_kv_pools_of(const okv_kv *kv, int cache);
/* What cache c does in the single-sequence step in flight (okv_kv_begin_step). */
const okv_step_plan *okv_kv_plan(const okv_kv *kv, int cache);
/* The batch in flight (okv_kv_begin_batch): its distinct sequences, in order
 * of first appearance (*n_seqs of them), and row_seq[t] = the index among
 * them of the sequence token t belongs to. */
void okv_kv_batch_seqs(const okv_kv *kv, int *n_seqs, const int32_t **row_seq);

/* ---- 2b. cell mode (okv_cache_seqs.c) --------------------------------------
 *
 * The caches of a cell-mode set, grouped by window, one okv_cells per group.
 * Steps: okv_kv_begin_batch validates (okv_seq_table_check_batch), finds T
 * free cells in every group, grows pools, and only then takes the cells
 * (owner + position set, so the step's own queries see its keys); commit
 * advances the lengths and lets windowed tables drop what fell out; abort
 * frees the step's cells (they were fresh), leaving everything as before.
 *
 * Masking by owner is resolved here, not in the kernel: for each distinct
 * sequence of the batch, begin plans that sequence's read runs in each
 * group (its cells with positions [read_base, length + its tokens), cut
 * into runs of consecutive slots holding consecutive positions, in position
 * order; holes punched by okv_seq_rm simply end a run). The attention op
 * then runs once per sequence over its own runs with the ordinary causal +
 * window mask, exactly as for a single sequence: no [T, cells] mask, and no
 * query ever scores another sequence's keys. */
okv_status okv_kv_begin_batch(okv_kv *kv, const int32_t *seqs, const int32_t *positions, int32_t T, okv_error *err);
/* Where the batch in flight writes cache c's K/V rows (runs of cells, the
 * batch's rows in order). */
void okv_kv_cell_writes(const okv_kv *kv, int cache, const okv_run **runs, int *n_runs);
/* The keys the u-th distinct sequence of the batch (okv_kv_batch_seqs)
 * reads in cache c (read runs in position order, as the single-sequence
 * planner's) and the window. */
void okv_kv_cell_reads(const okv_kv *kv, int cache, int u, const okv_run **runs, int *n_runs, int32_t *window);
okv_status okv_kv_seq_new(okv_kv *kv, int *seq, okv_error *err);
okv_status okv_kv_seq_fork(okv_kv *kv, int src, int32_t upto, int *seq, okv_error *err);
okv_status okv_kv_seq_rm(okv_kv *kv, int seq, int32_t p0, int32_t p1, okv_error *err);
okv_status okv_kv_seq_free(okv_kv *kv, int seq, okv_error *err);
okv_status okv_kv_seq_len(okv_kv *kv, int seq, int32_t *len, okv_error *err);
okv_status okv_kv_seq_can_extend(okv_kv *kv, int seq, int32_t T, bool *ok, okv_error *err);
/* Counts of the tightest group (fewest free cells). */
typedef struct okv_kv_cells_count {
    int max_seqs, n_seqs;
    int32_t max_len, n_cells, used, free;
} okv_kv_cells_count;
okv_status okv_kv_cells_count_get(okv_kv *kv, okv_kv_cells_count *out, okv_error *err);

/* ---- 2c. sequence state files (okv_cache_state.c) ---------------------------
 *
 * One sequence (a single-sequence set's, or sequence `seq` of a cell set)
 * saved to a file and loaded back: per cache its held positions, the K and
 * V rows (okv_kv_slot_bytes each, raw storage bytes) and its oldest held
 * position, plus the caller's fingerprint and an opaque extra blob. The
 * format and the checks are described in okv_cache_state.c. */
#define OKV_STATE_VERSION 2
#define OKV_STATE_MAX_EXTRA (64 << 20)

/* What the file must match besides the caches' geometry: digests of the
 * program's cache layout and of the rest of the program (okv_seq_state.c). */
typedef struct okv_kv_state_id {
    uint64_t layout, program;
} okv_kv_state_id;

/* seq = -1 for a single-sequence set. Atomic: on failure no file is left
 * and an existing one is untouched. */
okv_status okv_kv_state_save(okv_kv *kv, int seq, const okv_kv_state_id *id, const void *extra, size_t extra_len,
                             const char *path, okv_error *err);
/* The same image into a heap buffer (*data, free() it; *len bytes): what a
 * file of it would hold, byte for byte. */
okv_status okv_kv_state_save_mem(okv_kv *kv, int seq, const okv_kv_state_id *id, const void *extra, size_t extra_len,
                                 void **data, size_t *len, okv_error *err);
/* A file's length and extra blob from its header alone (no rows read, no
 * CRC: a load checks those): OKV_ERR_FORMAT when it is not an intact-looking
 * state file, OKV_ERR_INVALID when its fingerprint is not id. */
okv_status okv_kv_state_peek(const okv_kv_state_id *id, const char *path, int32_t *length, void **extra,
                             size_t *extra_len, okv_error *err);
/* Checks and applies a file image (what = its name for errors): a single
 * set's sequence is replaced; a cell set gets a new sequence (*seq). extra
 * (may be NULL) receives a heap copy of the extra blob (NULL if empty). On
 * any error the set is unchanged. */
okv_status okv_kv_state_apply(okv_kv *kv, const okv_kv_state_id *id, const void *data, size_t len, const char *what,
                              int *seq, void **extra, size_t *extra_len, okv_error *err);
/* Reads path (refusing one larger than the set could hold) and applies it. */
okv_status okv_kv_state_load(okv_kv *kv, const okv_kv_state_id *id, const char *path, int *seq, void **extra,
                             size_t *extra_len, okv_error *err);

/* ---- 3. registry ---------------------------------------------------------- */

/* Installs a kv set under key (fails if the key exists). The registry owns it. */
okv_status okv_registry_install(const char *key, const okv_layout *layout, const okv_kv_options *opt, okv_error *err);
/* Looks a key up and takes a reference (release with okv_registry_release). */
okv_status okv_registry_acquire(const char *key, okv_kv **out, okv_error *err);
void okv_registry_release(okv_kv *kv);
/* Removes the key; the kv set is freed when its last reference goes. */
okv_status okv_registry_remove(const char *key, okv_error *err);
int okv_registry_count(void);

#endif
