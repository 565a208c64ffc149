/* okv_cache_seqs.c — cell mode of a kv set: many sequences over one set of
 * caches, the sequence verbs, and the batched step transaction.
 *
 * Caches are grouped by window; each group has one okv_cells table (so a
 * token's K/V row sits at the same cell index in every cache of its group)
 * and its caches' pools are [cells, kv_heads, head_dim], growing by
 * doubling up to the group's n_cells as cells are taken. Full-history groups
 * get n_cells (default: the capacity of one sequence); a windowed group
 * never needs more than max_seqs * (W + C - 1) + C cells (each sequence keeps
 * W + C - 1 positions after a step, plus one step of C in flight), so it gets
 * the smaller of the two.
 *
 * Begin of a batch: check the batch against the sequence table, then per
 * group pick the T lowest free cells (none taken yet), grow every pool to
 * cover them (all or nothing), and only then take them. Nothing before the
 * take can leave a trace, so a refused batch changes nothing; an aborted one
 * (the graph ran, but the caller gave up) frees its fresh cells again, which
 * leaves exactly the state before begin. Commit advances the lengths and
 * lets windowed groups drop what fell out of each sequence's window. */
#include <stdlib.h>

#include "okv_cache_internal.h"
#include "okv_common.h"

static void lock_kv(okv_kv *kv) { pthread_mutex_lock(&kv->lock); }
static void unlock_kv(okv_kv *kv) { pthread_mutex_unlock(&kv->lock); }

/* Group index of `window` among the first n groups, or -1. */
static int find_group(const okv_kv_cells *kc, int n, int32_t window) {
    for (int g = 0; g < n; g++)
        if (kc->groups[g].window == window) return g;
    return -1;
}

static int32_t group_cells(int32_t window, int32_t max_write, int max_seqs, int32_t n_cells) {
    if (window == 0) return n_cells;
    int64_t bound = (int64_t)max_seqs * ((int64_t)window + max_write - 1) + max_write;
    return bound < n_cells ? (int32_t)bound : n_cells;
}

/* Read runs of one sequence in group c: at most one per position it reads
 * (`span` of them) and one per cell. */
static size_t runs_cap(const okv_cells *c, int64_t span) {
    return (size_t)(span < c->n_cells ? span : c->n_cells);
}

/* Read runs any batch can need, so begin_batch never allocates: per group,
 * min(max_seqs, max_write) distinct sequences, each reading at most its
 * capacity (a windowed group: window - 1 old positions + its step). Every
 * position can be a run of its own (sequences decoded together interleave
 * their cells), so this is also what a busy pool uses. */
static size_t reads_capacity(const okv_kv_cells *kc, int32_t capacity) {
    int32_t mw = kc->seqs.max_write;
    size_t seqs = (size_t)(kc->seqs.max_seqs < mw ? kc->seqs.max_seqs : mw), n = 0;
    for (int g = 0; g < kc->n_groups; g++) {
        const okv_cells *c = &kc->groups[g];
        n += seqs * runs_cap(c, c->window ? (int64_t)c->window + mw - 1 : capacity);
    }
    return n;
}

okv_status okv_kv_cells_create(okv_kv *kv, const okv_kv_options *opt, okv_error *err) {
    int max_seqs = opt->max_seqs ? opt->max_seqs : 64;
    if (opt->n_cells < 0)
        return okv_fail(err, OKV_ERR_INVALID, "kv options: n_cells %d is negative", opt->n_cells);
    int32_t n_cells = opt->n_cells ? opt->n_cells : kv->seq.capacity;
    int32_t mw = kv->seq.max_write;
    if (n_cells < mw)
        return okv_fail(err, OKV_ERR_INVALID, "kv options: n_cells %d is smaller than one step (max_step, else prefill_chunk_size: %d)",
                        n_cells, mw);
    okv_kv_cells *kc = calloc(1, sizeof *kc);
    if (!kc) return okv_fail(err, OKV_ERR_NOMEM, "cell pool: out of memory");
    kv->cells = kc;
    okv_status st = okv_seq_table_init(&kc->seqs, max_seqs, kv->seq.capacity, mw, err);
    if (st) return st;
    kc->groups = calloc((size_t)kv->n_caches, sizeof *kc->groups);
    kc->group_of = calloc((size_t)kv->n_caches, sizeof *kc->group_of);
    kc->step_seqs = calloc((size_t)mw, sizeof *kc->step_seqs);
    kc->count = calloc((size_t)max_seqs, sizeof *kc->count);
    if (!kc->groups || !kc->group_of || !kc->step_seqs || !kc->count)
        return okv_fail(err, OKV_ERR_NOMEM, "cell pool: out of memory for %d caches", kv->n_caches);
    for (int c = 0; c < kv->n_caches; c++) {
        okv_cache *ca = &kv->caches[c];
        int32_t window = ca->policy.kind == OKV_POLICY_RING ? ca->policy.window : 0;
        int g = find_group(kc, kc->n_groups, window);
        if (g < 0) {
            g = kc->n_groups;
            st = okv_cells_init(&kc->groups[g], window, mw, group_cells(window, mw, max_seqs, n_cells), max_seqs, err);
            if (st) return st;
            kc->n_groups++;
        }
        kc->group_of[c] = g;
        int32_t cells = kc->groups[g].n_cells;
        int32_t initial = ca->policy.kind == OKV_POLICY_FLAT ? ca->slots_alloc : 256;
        ca->policy = (okv_policy){ OKV_POLICY_CELLS, window, mw, cells };
        ca->slots_alloc = initial < cells ? initial : cells;
    }
    kc->uniq = calloc((size_t)mw, sizeof *kc->uniq);
    kc->row_uniq = calloc((size_t)mw, sizeof *kc->row_uniq);
    kc->read_off = calloc((size_t)kc->n_groups * mw, sizeof *kc->read_off);
    kc->read_n = calloc((size_t)kc->n_groups * mw, sizeof *kc->read_n);
    kc->slot_of = calloc((size_t)kv->seq.capacity + 1, sizeof *kc->slot_of);
    if (!kc->uniq || !kc->row_uniq || !kc->read_off || !kc->read_n || !kc->slot_of)
        return okv_fail(err, OKV_ERR_NOMEM, "cell pool: out of memory for step plans");
    kc->step_cells = calloc((size_t)kc->n_groups * mw, sizeof *kc->step_cells);
    kc->step_runs = calloc((size_t)kc->n_groups * mw, sizeof *kc->step_runs);
    kc->n_step_runs = calloc((size_t)kc->n_groups, sizeof *kc->n_step_runs);
    kc->need = calloc((size_t)kv->n_caches, sizeof *kc->need);
    kc->reads_cap = reads_capacity(kc, kv->seq.capacity);
    kc->reads = malloc(kc->reads_cap * sizeof *kc->reads);
    if (!kc->step_cells || !kc->step_runs || !kc->n_step_runs || !kc->need || !kc->reads)
        return okv_fail(err, OKV_ERR_NOMEM, "cell pool: out of memory for step plans (%zu read runs)", kc->reads_cap);
    return OKV_OK;
}

void okv_kv_cells_free(okv_kv *kv) {
    okv_kv_cells *kc = kv->cells;
    if (!kc) return;
    for (int g = 0; g < kc->n_groups; g++) okv_cells_free(&kc->groups[g]);
    okv_seq_table_free(&kc->seqs);
    free(kc->groups);
    free(kc->group_of);
    free(kc->step_cells);
    free(kc->step_runs);
    free(kc->n_step_runs);
    free(kc->step_seqs);
    free(kc->count);
    free(kc->uniq);
    free(kc->row_uniq);
    free(kc->reads);
    free(kc->need);
    free(kc->read_off);
    free(kc->read_n);
    free(kc->slot_of);
    free(kc);
    kv->cells = NULL;
}

/* ---- batched step -------------------------------------------------------------- */

/* Picks the T lowest free cells of group g into out (without taking them);
 * false if the group has fewer. */
static bool pick_cells(const okv_cells *c, int32_t T, int32_t *out) {
    int32_t at = 0;
    for (int32_t t = 0; t < T; t++) {
        int32_t cell = okv_cells_find_free(c, at);
        if (cell < 0) return false;
        out[t] = cell;
        at = cell + 1;
    }
    return true;
}

/* The step's cells of one group as write runs (consecutive cells merged). */
static int cells_to_runs(const int32_t *cells, const int32_t *positions, int32_t T, okv_run *runs) {
    int n = 0;
    for (int32_t t = 0; t < T; t++) {
        if (n > 0 && runs[n - 1].slot + runs[n - 1].n == cells[t]) { runs[n - 1].n++; continue; }
        runs[n++] = (okv_run){ cells[t], 1, positions[t] };
    }
    return n;
}

static okv_status cells_not_free(const okv_kv *kv, int g, int32_t T, okv_error *err) {
    const okv_cells *c = &kv->cells->groups[g];
    return okv_fail(err, OKV_ERR_CAPACITY,
                    "batched step: %d tokens need %d free cells, but the %s cells have only %d of %d free "
                    "(free sequences or drop positions with okv_seq_rm)",
                    T, T, c->window ? "windowed" : "full-history", c->n_cells - c->n_used, c->n_cells);
}

/* The batch's distinct sequences (first appearance order) and each row's index among them. */
static void find_uniq(okv_kv_cells *kc, const int32_t *seqs, int32_t T) {
    kc->n_uniq = 0;
    for (int32_t t = 0; t < T; t++) {
        int u = 0;
        while (u < kc->n_uniq && kc->uniq[u] != seqs[t]) u++;
        if (u == kc->n_uniq) kc->uniq[kc->n_uniq++] = seqs[t];
        kc->row_uniq[t] = u;
    }
}

/* First position sequence s (length len before the batch) may read in group g. */
static int32_t read_base(const okv_cells *g, int32_t len) {
    int64_t b = g->window ? (int64_t)len - g->window + 1 : 0;
    return b > 0 ? (int32_t)b : 0;
}

/* Runs this batch's reads can need at most (<= reads_capacity). */
static size_t reads_bound(const okv_kv_cells *kc) {
    size_t n = 0;
    for (int g = 0; g < kc->n_groups; g++)
        for (int u = 0; u < kc->n_uniq; u++) {
            int s = kc->uniq[u];
            int32_t len = kc->seqs.length[s];
            n += runs_cap(&kc->groups[g], (int64_t)len + kc->count[s] - read_base(&kc->groups[g], len));
        }
    return n;
}

/* Plans uniq u's read runs in group g into kc->reads[at...]; returns how many. */
static int32_t plan_reads(okv_kv_cells *kc, int g, int u, size_t at) {
    const okv_cells *c = &kc->groups[g];
    int s = kc->uniq[u];
    int32_t len = kc->seqs.length[s], base = read_base(c, len), end = len + kc->count[s];
    int32_t *slot_of = kc->slot_of;
    for (int32_t p = base; p < end; p++) slot_of[p - base] = -1;
    for (int32_t i = 0; i < c->hwm; i++)
        if (c->pos[i] >= base && c->pos[i] < end && okv_cells_owns(c, i, s)) slot_of[c->pos[i] - base] = i;
    okv_run *runs = kc->reads + at;
    int32_t n = 0;
    for (int32_t p = base; p < end; p++) {
        int32_t cell = slot_of[p - base];
        if (cell < 0) continue;   /* a hole */
        if (n > 0 && runs[n - 1].pos + runs[n - 1].n == p && runs[n - 1].slot + runs[n - 1].n == cell) runs[n - 1].n++;
        else runs[n++] = (okv_run){ cell, 1, p };
    }
    return n;
}

okv_status okv_kv_begin_batch(okv_kv *kv, const int32_t *seqs, const int32_t *positions, int32_t T, okv_error *err) {
    lock_kv(kv);
    okv_kv_cells *kc = kv->cells;
    okv_status st = OKV_OK;
    if (!kc) {
        st = okv_fail(err, OKV_ERR_STATE, "batched step: this cache key holds one sequence (install it with "
                      "OKV_CACHE_CELLS to step many)");
        goto out;
    }
    if (kv->step_T != 0) {
        st = okv_fail(err, OKV_ERR_STATE, "batched step: another step is in flight on this cache set");
        goto out;
    }
    st = okv_seq_table_check_batch(&kc->seqs, seqs, positions, T, kc->count, err);
    if (st) goto out;
    int32_t mw = kc->seqs.max_write;
    for (int g = 0; g < kc->n_groups && !st; g++)
        if (!pick_cells(&kc->groups[g], T, kc->step_cells + (size_t)g * mw)) st = cells_not_free(kv, g, T, err);
    if (st) goto out;
    int32_t *need = kc->need;
    for (int c = 0; c < kv->n_caches; c++) {
        const int32_t *cells = kc->step_cells + (size_t)kc->group_of[c] * mw;
        need[c] = cells[T - 1] + 1;   /* picked in increasing order */
    }
    find_uniq(kc, seqs, T);
    size_t bound = reads_bound(kc);
    if (bound > kc->reads_cap) { /* reads_capacity covers every batch the table admits */
        st = okv_fail(err, OKV_ERR_STATE, "batched step: %zu read runs exceed the planned %zu", bound, kc->reads_cap);
        goto out;
    }
    st = okv_kv_grow_pools(kv, need, err);
    if (st) goto out;
    /* nothing can fail from here */
    for (int g = 0; g < kc->n_groups; g++) {
        int32_t *cells = kc->step_cells + (size_t)g * mw;
        for (int32_t t = 0; t < T; t++) okv_cells_take(&kc->groups[g], cells[t], seqs[t], positions[t]);
        kc->n_step_runs[g] = cells_to_runs(cells, positions, T, kc->step_runs + (size_t)g * mw);
    }
    memcpy(kc->step_seqs, seqs, (size_t)T * sizeof *seqs);
    size_t at = 0;
    for (int g = 0; g < kc->n_groups; g++)
        for (int u = 0; u < kc->n_uniq; u++) {
            kc->read_off[(size_t)g * mw + u] = at;
            kc->read_n[(size_t)g * mw + u] = plan_reads(kc, g, u, at);
            at += (size_t)kc->read_n[(size_t)g * mw + u];
        }
    kv->step_pos = 0;
    kv->step_T = T;
out:
    unlock_kv(kv);
    return st;
}

void okv_kv_batch_seqs(const okv_kv *kv, int *n_seqs, const int32_t **row_seq) {
    *n_seqs = kv->cells->n_uniq;
    *row_seq = kv->cells->row_uniq;
}

void okv_kv_cell_writes(const okv_kv *kv, int cache, const okv_run **runs, int *n_runs) {
    const okv_kv_cells *kc = kv->cells;
    int g = kc->group_of[cache];
    *runs = kc->step_runs + (size_t)g * kc->seqs.max_write;
    *n_runs = kc->n_step_runs[g];
}

void okv_kv_cell_reads(const okv_kv *kv, int cache, int u, const okv_run **runs, int *n_runs, int32_t *window) {
    const okv_kv_cells *kc = kv->cells;
    int g = kc->group_of[cache];
    size_t k = (size_t)g * kc->seqs.max_write + (size_t)u;
    *runs = kc->reads + kc->read_off[k];
    *n_runs = kc->read_n[k];
    *window = kc->groups[g].window;
}

/* Called with the lock held and a batch in flight. */
void okv_kv_cells_commit(okv_kv *kv) {
    okv_kv_cells *kc = kv->cells;
    int32_t T = kv->step_T;
    for (int32_t t = 0; t < T; t++) kc->seqs.length[kc->step_seqs[t]]++;
    for (int32_t t = 0; t < T; t++) {
        int s = kc->step_seqs[t];
        if (t > 0 && kc->step_seqs[t - 1] == s) continue;   /* runs of one sequence: once is enough */
        for (int g = 0; g < kc->n_groups; g++) okv_cells_after_step(&kc->groups[g], s, kc->seqs.length[s]);
    }
}

void okv_kv_cells_abort(okv_kv *kv) {
    okv_kv_cells *kc = kv->cells;
    int32_t T = kv->step_T, mw = kc->seqs.max_write;
    for (int g = 0; g < kc->n_groups; g++) {
        okv_cells *c = &kc->groups[g];
        const int32_t *cells = kc->step_cells + (size_t)g * mw;
        for (int32_t t = 0; t < T; t++) okv_cells_drop(c, kc->step_seqs[t], c->pos[cells[t]], c->pos[cells[t]] + 1);
    }
}

/* ---- sequence verbs ------------------------------------------------------------- */

/* Locks kv and checks that it is a cell pool with no step in flight and (if
 * seq >= 0) that seq exists. On error the lock is released. */
static okv_status enter(okv_kv *kv, int seq, const char *verb, okv_error *err) {
    lock_kv(kv);
    okv_status st = OKV_OK;
    if (!kv->cells)
        st = okv_fail(err, OKV_ERR_STATE, "%s: this cache key holds one sequence (install it with OKV_CACHE_CELLS)", verb);
    else if (kv->step_T != 0)
        st = okv_fail(err, OKV_ERR_STATE, "%s: a step is in flight on this cache key", verb);
    else if (seq >= 0 && (seq >= kv->cells->seqs.max_seqs || !kv->cells->seqs.alive[seq]))
        st = okv_fail(err, OKV_ERR_INVALID, "%s: sequence %d does not exist", verb, seq);
    else if (seq < -1)
        st = okv_fail(err, OKV_ERR_INVALID, "%s: sequence %d does not exist", verb, seq);
    if (st) unlock_kv(kv);
    return st;
}

static int free_id(const okv_kv_cells *kc) {
    for (int s = 0; s < kc->seqs.max_seqs; s++)
        if (!kc->seqs.alive[s]) return s;
    return -1;
}

/* Takes a free id with length len (lock held); -1 if none. */
static int new_id(okv_kv_cells *kc, int32_t len) {
    int s = free_id(kc);
    if (s < 0) return -1;
    kc->seqs.alive[s] = true;
    kc->seqs.length[s] = len;
    for (int g = 0; g < kc->n_groups; g++) kc->groups[g].oldest[s] = 0;
    return s;
}

static okv_status no_id(const okv_kv_cells *kc, const char *verb, okv_error *err) {
    return okv_fail(err, OKV_ERR_CAPACITY, "%s: all %d sequences of this cache key are in use (okv_seq_free one)", verb,
                    kc->seqs.max_seqs);
}

okv_status okv_kv_seq_new(okv_kv *kv, int *seq, okv_error *err) {
    okv_status st = enter(kv, -1, "seq_new", err);
    if (st) return st;
    int s = new_id(kv->cells, 0);
    if (s < 0) st = no_id(kv->cells, "seq_new", err);
    else *seq = s;
    unlock_kv(kv);
    return st;
}

/* The first group that cannot serve a next step of seq at new_len, or -1. */
static int unservable_group(const okv_kv_cells *kc, int seq, int32_t new_len) {
    for (int g = 0; g < kc->n_groups; g++)
        if (!okv_cells_can_serve(&kc->groups[g], seq, new_len)) return g;
    return -1;
}

static okv_status window_refusal(const okv_kv_cells *kc, int g, int seq, int32_t at, const char *verb, okv_error *err) {
    const okv_cells *c = &kc->groups[g];
    int32_t need = at - c->window + 1 > 0 ? at - c->window + 1 : 0;
    return okv_fail(err, OKV_ERR_INVALID,
                    "%s at position %d refused: sequence %d's windowed cells (window %d) no longer hold positions below "
                    "%d, but a step at %d needs keys from %d; smallest accepted point is %d (or 0)",
                    verb, at, seq, c->window, c->oldest[seq], at, need, c->oldest[seq] + c->window - 1);
}

okv_status okv_kv_seq_fork(okv_kv *kv, int src, int32_t upto, int *seq, okv_error *err) {
    okv_status st = enter(kv, src, "seq_fork", err);
    if (st) return st;
    okv_kv_cells *kc = kv->cells;
    int g;
    if (upto < 0 || upto > kc->seqs.length[src])
        st = okv_fail(err, OKV_ERR_INVALID, "seq_fork: upto %d outside [0, length %d] of sequence %d", upto,
                      kc->seqs.length[src], src);
    else if ((g = unservable_group(kc, src, upto)) >= 0)
        st = window_refusal(kc, g, src, upto, "seq_fork", err);
    else if (free_id(kc) < 0)
        st = no_id(kc, "seq_fork", err);
    if (!st) {
        int s = new_id(kc, upto);
        for (g = 0; g < kc->n_groups; g++) okv_cells_share(&kc->groups[g], src, s, upto);
        if (upto == 0)
            for (g = 0; g < kc->n_groups; g++) kc->groups[g].oldest[s] = 0;
        *seq = s;
    }
    unlock_kv(kv);
    return st;
}

okv_status okv_kv_seq_rm(okv_kv *kv, int seq, int32_t p0, int32_t p1, okv_error *err) {
    okv_status st = enter(kv, seq, "seq_rm", err);
    if (st) return st;
    okv_kv_cells *kc = kv->cells;
    int32_t len = kc->seqs.length[seq];
    bool to_end = p1 < 0 || p1 >= len;
    int g;
    if (p0 < 0 || p0 > len || (!to_end && p1 < p0))
        st = okv_fail(err, OKV_ERR_INVALID, "seq_rm: range [%d, %d) outside [0, length %d] of sequence %d", p0, p1, len, seq);
    else if (to_end && (g = unservable_group(kc, seq, p0)) >= 0)
        st = window_refusal(kc, g, seq, p0, "seq_rm (truncation)", err);
    if (!st) {
        int32_t end = to_end ? len : p1;
        for (g = 0; g < kc->n_groups; g++) okv_cells_drop(&kc->groups[g], seq, p0, end);
        if (to_end) {
            kc->seqs.length[seq] = p0;
            if (p0 == 0)
                for (g = 0; g < kc->n_groups; g++) kc->groups[g].oldest[seq] = 0;
        }
    }
    unlock_kv(kv);
    return st;
}

okv_status okv_kv_seq_free(okv_kv *kv, int seq, okv_error *err) {
    okv_status st = enter(kv, seq, "seq_free", err);
    if (st) return st;
    okv_kv_cells *kc = kv->cells;
    for (int g = 0; g < kc->n_groups; g++) okv_cells_drop(&kc->groups[g], seq, 0, INT32_MAX);
    kc->seqs.alive[seq] = false;
    kc->seqs.length[seq] = 0;
    unlock_kv(kv);
    return OKV_OK;
}

okv_status okv_kv_seq_len(okv_kv *kv, int seq, int32_t *len, okv_error *err) {
    okv_status st = enter(kv, seq, "seq_len", err);
    if (st) return st;
    *len = kv->cells->seqs.length[seq];
    unlock_kv(kv);
    return OKV_OK;
}

okv_status okv_kv_seq_can_extend(okv_kv *kv, int seq, int32_t T, bool *ok, okv_error *err) {
    okv_status st = enter(kv, seq, "seq_can_extend", err);
    if (st) return st;
    const okv_kv_cells *kc = kv->cells;
    bool yes = T >= 1 && T <= kc->seqs.max_write && (int64_t)kc->seqs.length[seq] + T <= kc->seqs.capacity;
    for (int g = 0; g < kc->n_groups && yes; g++) yes = kc->groups[g].n_cells - kc->groups[g].n_used >= T;
    *ok = yes;
    unlock_kv(kv);
    return OKV_OK;
}

okv_status okv_kv_cells_count_get(okv_kv *kv, okv_kv_cells_count *out, okv_error *err) {
    okv_status st = enter(kv, -1, "cache cells", err);
    if (st) return st;
    const okv_kv_cells *kc = kv->cells;
    int tight = 0;
    for (int g = 1; g < kc->n_groups; g++) {
        const okv_cells *a = &kc->groups[g], *b = &kc->groups[tight];
        if (a->n_cells - a->n_used < b->n_cells - b->n_used) tight = g;
    }
    const okv_cells *c = &kc->groups[tight];
    int n = 0;
    for (int s = 0; s < kc->seqs.max_seqs; s++) n += kc->seqs.alive[s];
    *out = (okv_kv_cells_count){ kc->seqs.max_seqs, n, kc->seqs.capacity, c->n_cells, c->n_used, c->n_cells - c->n_used };
    unlock_kv(kv);
    return OKV_OK;
}
