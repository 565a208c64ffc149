/* okv_cache_cells.c — the tensor-free half of the cell pool: cell tables
 * (which cell holds which position for which sequences) and the sequence
 * table (which sequences exist, how long each is, what a batch must look
 * like). No bytes here either, so tests/cache/test_cells_sim.c can check
 * every rule against a brute-force model over all small cases.
 *
 * A cell is free iff pos < 0, and then its owner set is empty. Cells are
 * taken lowest index first (okv_cells_find_free from `hint`), which keeps
 * the used cells packed at the bottom: the attention op reads [0, hwm).
 * Owner sets are `words` uint64 per cell; a fork sets one more bit on each
 * shared cell (zero copy), a drop clears it and frees the cell when no bit
 * is left. */
#include <stdlib.h>

#include "okv_cache.h"
#include "okv_common.h"

okv_status okv_cells_init(okv_cells *c, int32_t window, int32_t max_write, int32_t n_cells, int max_seqs, okv_error *err) {
    memset(c, 0, sizeof *c);
    if (n_cells < 1 || max_seqs < 1 || max_seqs > OKV_CELLS_MAX_SEQS || window < 0 || max_write < 1)
        return okv_fail(err, OKV_ERR_INVALID, "cell table: n_cells %d, max_seqs %d (1..%d), window %d, max_write %d out of range",
                        n_cells, max_seqs, OKV_CELLS_MAX_SEQS, window, max_write);
    c->window = window;
    c->max_write = max_write;
    c->n_cells = n_cells;
    c->max_seqs = max_seqs;
    c->words = (max_seqs + 63) / 64;
    c->pos = malloc((size_t)n_cells * sizeof *c->pos);
    c->owners = calloc((size_t)n_cells * (size_t)c->words, sizeof *c->owners);
    c->oldest = calloc((size_t)max_seqs, sizeof *c->oldest);
    if (!c->pos || !c->owners || !c->oldest) {
        okv_cells_free(c);
        return okv_fail(err, OKV_ERR_NOMEM, "cell table: out of memory for %d cells", n_cells);
    }
    for (int32_t i = 0; i < n_cells; i++) c->pos[i] = -1;
    return OKV_OK;
}

void okv_cells_free(okv_cells *c) {
    free(c->pos);
    free(c->owners);
    free(c->oldest);
    memset(c, 0, sizeof *c);
}

static uint64_t *owner_set(const okv_cells *c, int32_t cell) { return c->owners + (size_t)cell * c->words; }

bool okv_cells_owns(const okv_cells *c, int32_t cell, int seq) {
    return (owner_set(c, cell)[seq >> 6] >> (seq & 63)) & 1u;
}

static bool set_empty(const okv_cells *c, int32_t cell) {
    const uint64_t *o = owner_set(c, cell);
    for (int w = 0; w < c->words; w++)
        if (o[w]) return false;
    return true;
}

int32_t okv_cells_find_free(const okv_cells *c, int32_t from) {
    for (int32_t i = from > c->hint ? from : c->hint; i < c->n_cells; i++)
        if (c->pos[i] < 0) return i;
    return -1;
}

void okv_cells_take(okv_cells *c, int32_t cell, int seq, int32_t pos) {
    c->pos[cell] = pos;
    owner_set(c, cell)[seq >> 6] |= (uint64_t)1 << (seq & 63);
    c->n_used++;
    if (cell == c->hint) c->hint = cell + 1;   /* below hint all used: advance past the packed ones */
    while (c->hint < c->n_cells && c->pos[c->hint] >= 0) c->hint++;
    if (cell >= c->hwm) c->hwm = cell + 1;
}

static void free_cell(okv_cells *c, int32_t cell) {
    c->pos[cell] = -1;
    c->n_used--;
    if (cell < c->hint) c->hint = cell;
    while (c->hwm > 0 && c->pos[c->hwm - 1] < 0) c->hwm--;
}

void okv_cells_drop(okv_cells *c, int seq, int32_t p0, int32_t p1) {
    uint64_t bit = (uint64_t)1 << (seq & 63);
    for (int32_t i = 0; i < c->hwm; i++) {
        int32_t p = c->pos[i];
        uint64_t *o = owner_set(c, i);
        if (p < p0 || p >= p1 || !(o[seq >> 6] & bit)) continue;
        o[seq >> 6] &= ~bit;
        if (set_empty(c, i)) free_cell(c, i);
    }
}

void okv_cells_share(okv_cells *c, int src, int dst, int32_t upto) {
    uint64_t bit = (uint64_t)1 << (dst & 63);
    for (int32_t i = 0; i < c->hwm; i++)
        if (c->pos[i] >= 0 && c->pos[i] < upto && okv_cells_owns(c, i, src)) owner_set(c, i)[dst >> 6] |= bit;
    c->oldest[dst] = c->oldest[src];
}

bool okv_cells_can_serve(const okv_cells *c, int seq, int32_t new_len) {
    if (c->window == 0 || new_len == 0) return true;
    int32_t need = new_len - c->window + 1;
    if (need < 0) need = 0;
    return need >= c->oldest[seq];
}

void okv_cells_after_step(okv_cells *c, int seq, int32_t length) {
    if (c->window == 0) return;
    int64_t keep = (int64_t)length - ((int64_t)c->window + c->max_write - 1);
    if (keep <= c->oldest[seq]) return;
    okv_cells_drop(c, seq, c->oldest[seq], (int32_t)keep);
    c->oldest[seq] = (int32_t)keep;
}

bool okv_cells_visible(const okv_cells *c, int32_t cell, int seq, int32_t p) {
    int32_t j = c->pos[cell];
    return j >= 0 && j <= p && okv_cells_owns(c, cell, seq) && (c->window == 0 || (int64_t)p - j < c->window);
}

/* ---- sequence table ---------------------------------------------------------- */

okv_status okv_seq_table_init(okv_seq_table *t, int max_seqs, int32_t capacity, int32_t max_write, okv_error *err) {
    memset(t, 0, sizeof *t);
    if (max_seqs < 1 || max_seqs > OKV_CELLS_MAX_SEQS)
        return okv_fail(err, OKV_ERR_INVALID, "cache options: max_seqs %d outside [1, %d]", max_seqs, OKV_CELLS_MAX_SEQS);
    t->max_seqs = max_seqs;
    t->capacity = capacity;
    t->max_write = max_write;
    t->alive = calloc((size_t)max_seqs, sizeof *t->alive);
    t->length = calloc((size_t)max_seqs, sizeof *t->length);
    if (!t->alive || !t->length) {
        okv_seq_table_free(t);
        return okv_fail(err, OKV_ERR_NOMEM, "sequence table: out of memory");
    }
    return OKV_OK;
}

void okv_seq_table_free(okv_seq_table *t) {
    free(t->alive);
    free(t->length);
    memset(t, 0, sizeof *t);
}

okv_status okv_seq_table_check_batch(const okv_seq_table *t, const int32_t *seqs, const int32_t *positions, int32_t T,
                                     int32_t *count, okv_error *err) {
    if (T < 1 || T > t->max_write)
        return okv_fail(err, OKV_ERR_INVALID, "batched step: %d tokens, must be in [1, %d] (the step size: max_step, else prefill_chunk_size)", T,
                        t->max_write);
    if (!seqs || !positions) return okv_fail(err, OKV_ERR_INVALID, "batched step: seqs or positions missing");
    for (int32_t i = 0; i < T; i++)
        if (seqs[i] >= 0 && seqs[i] < t->max_seqs) count[seqs[i]] = 0;
    okv_status st = OKV_OK;
    for (int32_t i = 0; i < T && !st; i++) {
        int s = seqs[i];
        if (s < 0 || s >= t->max_seqs || !t->alive[s]) {
            st = okv_fail(err, OKV_ERR_INVALID, "batched step: token %d names sequence %d, which does not exist", i, s);
            break;
        }
        int64_t want = (int64_t)t->length[s] + count[s];
        if (positions[i] != want)
            st = okv_fail(err, OKV_ERR_INVALID,
                          "batched step: token %d of sequence %d is at position %d, expected %lld (sequence length %d, "
                          "positions must continue it)", i, s, positions[i], (long long)want, t->length[s]);
        else if (want >= t->capacity)
            st = okv_fail(err, OKV_ERR_CAPACITY, "batched step: sequence %d at position %lld overflows its capacity %d",
                          s, (long long)want, t->capacity);
        count[s]++;
    }
    return st;
}
