/* test_cells_sim.c — a byte-level simulation of the cell pool against a
 * brute-force model of what each sequence should hold.
 *
 * The model keeps, per sequence, the tag written at each position it still
 * holds (held[] minus holes punched by okv_seq_rm) and, per windowed cache,
 * the floor below which the sequence keeps nothing (length - (W + C - 1)
 * after each step, as the header promises). Random operations: new, fork
 * at a random point, rm in the middle / at the end, free, batched steps of
 * random sequences and sizes (some aborted after writing, some made invalid
 * on purpose: wrong position, dead sequence, too many tokens for the free
 * cells). After every operation, for every cache:
 *   - each live sequence owns exactly one cell per position the model says
 *     it holds there, the cell's K/V rows carry that position's tag, and it
 *     owns nothing else (dead sequences own nothing);
 *   - used cells = distinct tags held (a fork's prefix is stored once; no
 *     cell leaks), free cells have no owner, hwm/hint bound the used cells;
 *   - windowed caches never use more than max_seqs * (W + C - 1) + C cells;
 *   - a refused operation leaves the tables byte-identical.
 * During each step (after the K/V rows were written along the write runs,
 * before commit), every query (seq, p) is checked to see, through its
 * sequence's read runs and the kernel's causal + window rule, exactly the
 * cells of its own sequence at positions j <= p (and p - j < W), in
 * position order, with the right tags. Truncation verdicts on windowed caches are compared with a brute
 * force look (are all keys a step at the target needs still in the table?)
 * for sequences without holes. Sequences run through hundreds of windows. */
#include "okv_test.h"
#include "cache_test_util.h"

#define MAXP 1200
#define MAXS 140

typedef struct mseq {
    bool alive, holes;
    int32_t len;
    bool held[MAXP];
    uint32_t tag[MAXP];
    int32_t floor_[8];   /* per cache: windowed keep floor */
} mseq;

typedef struct sim {
    okv_kv *kv;
    int max_seqs, mw;
    mseq *m;             /* [max_seqs] */
    uint32_t next_tag;
    int n_steps, n_refused, n_aborts, n_forks, n_rm, n_full, n_trunc_refused;
} sim;

static int32_t cache_window(const sim *s, int c) { return s->kv->caches[c].policy.window; }
static const okv_cells *group(const sim *s, int c) { return &s->kv->cells->groups[s->kv->cells->group_of[c]]; }

static void fill_row(uint8_t *row, size_t n, uint32_t tag, int which) {
    for (size_t e = 0; e < n / 4; e++) {
        uint32_t v = tag * 131u + (uint32_t)e + (which ? 0x80000u : 0u);
        memcpy(row + e * 4, &v, 4);
    }
}

static bool row_is(const okv_cache *c, const void *pool, int32_t cell, uint32_t tag, int which) {
    uint8_t want[256];
    size_t n = cache_row_bytes(c);
    fill_row(want, n, tag, which);
    return cell < c->slots_alloc && memcmp((const uint8_t *)pool + (size_t)cell * n, want, n) == 0;
}

/* Whether the model says seq s holds position j in cache c. */
static bool model_has(const sim *s, int c, int seq, int32_t j) {
    const mseq *q = &s->m[seq];
    if (!q->alive || j >= q->len || !q->held[j]) return false;
    return cache_window(s, c) == 0 || j >= q->floor_[c];
}

/* Full check of the tables and pools against the model. */
static int check_state(sim *s) {
    int bad = 0;
    okv_kv *kv = s->kv;
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cells *g = group(s, c);
        const okv_cache *ca = &kv->caches[c];
        int32_t used = 0;
        for (int32_t i = 0; i < g->n_cells; i++) {
            bool any = false;
            for (int w = 0; w < g->words; w++) any |= g->owners[(size_t)i * g->words + w] != 0;
            if ((g->pos[i] >= 0) != any) { bad++; fprintf(stderr, "cache %d cell %d: free flag and owner set disagree\n", c, i); }
            if (g->pos[i] >= 0) { used++; if (i >= g->hwm) bad++; }
            else if (i < g->hint) bad++;
        }
        if (used != g->n_used) { bad++; fprintf(stderr, "cache %d: n_used %d, counted %d\n", c, g->n_used, used); }
        /* every (seq, position) the model holds: exactly one owned cell, right tag */
        uint8_t *tag_seen = calloc((size_t)s->next_tag + 1, 1);
        static uint8_t pos_seen[MAXP];
        int32_t n_tags = 0;
        for (int q = 0; q < s->max_seqs; q++) {
            const mseq *m = &s->m[q];
            int32_t owned = 0, want = 0;
            memset(pos_seen, 0, sizeof pos_seen);
            for (int32_t i = 0; i < g->hwm; i++) {
                if (g->pos[i] < 0 || !okv_cells_owns(g, i, q)) continue;
                int32_t j = g->pos[i];
                if (j >= MAXP || !model_has(s, c, q, j) || pos_seen[j]) { bad++; fprintf(stderr, "seq %d cache %d: cell %d (position %d) not in the model: len %d held %d floor %d seen %d alive %d\n", q, c, i, j, m->len, m->held[j], m->floor_[c], pos_seen[j], m->alive); continue; }
                pos_seen[j] = 1;
                owned++;
                if (!row_is(ca, ca->k, i, m->tag[j], 0) || !row_is(ca, ca->v, i, m->tag[j], 1)) bad++;
                if (!tag_seen[m->tag[j]]) { tag_seen[m->tag[j]] = 1; n_tags++; }
            }
            int32_t from = g->window && m->floor_[c] > 0 ? m->floor_[c] : 0;
            for (int32_t j = from; m->alive && j < m->len; j++) want += model_has(s, c, q, j);
            if (owned != want) { bad++; fprintf(stderr, "seq %d cache %d: owns %d cells, the model wants %d (length %d, floor %d)\n", q, c, owned, want, m->len, m->floor_[c]); }
        }
        if (n_tags != g->n_used) { bad++; fprintf(stderr, "cache %d: %d distinct tags held, n_used %d\n", c, n_tags, g->n_used); }   /* shared cells counted once, nothing leaked */
        free(tag_seen);
        if (g->window) {
            int64_t bound = (int64_t)s->max_seqs * (g->window + s->mw - 1) + s->mw;
            if (g->n_used > bound || ca->slots_alloc > g->n_cells) bad++;
        }
    }
    return bad;
}

/* Snapshot of every table (for "a refused operation changes nothing"). */
static size_t snapshot(const sim *s, uint8_t **out) {
    size_t n = 0;
    const okv_kv_cells *kc = s->kv->cells;
    for (int g = 0; g < kc->n_groups; g++)
        n += (size_t)kc->groups[g].n_cells * (4 + 8 * kc->groups[g].words) + 4 * (size_t)s->max_seqs + 16;
    n += (size_t)s->max_seqs * 5;
    uint8_t *b = malloc(n), *p = b;
    for (int g = 0; g < kc->n_groups; g++) {
        const okv_cells *c = &kc->groups[g];
        memcpy(p, c->pos, 4 * (size_t)c->n_cells); p += 4 * (size_t)c->n_cells;
        memcpy(p, c->owners, 8 * (size_t)c->n_cells * c->words); p += 8 * (size_t)c->n_cells * c->words;
        memcpy(p, c->oldest, 4 * (size_t)s->max_seqs); p += 4 * (size_t)s->max_seqs;
        int32_t x[4] = { c->n_used, c->hint, c->hwm, 0 };
        memcpy(p, x, 16); p += 16;
    }
    memcpy(p, kc->seqs.length, 4 * (size_t)s->max_seqs); p += 4 * (size_t)s->max_seqs;
    for (int q = 0; q < s->max_seqs; q++) *p++ = kc->seqs.alive[q];
    *out = b;
    return n;
}

static bool unchanged(const sim *s, const uint8_t *before, size_t n) {
    uint8_t *now;
    size_t m = snapshot(s, &now);
    bool same = m == n && memcmp(now, before, n) == 0;
    free(now);
    return same;
}

static int pick_alive(const sim *s, uint64_t *rng) {
    int n = 0, ids[MAXS];
    for (int q = 0; q < s->max_seqs; q++) if (s->m[q].alive) ids[n++] = q;
    return n ? ids[rng_range(rng, 0, n - 1)] : -1;
}

/* During a step: does every query see exactly its own keys through the
 * read runs of its sequence (with the kernel's causal + window rule)? */
static int check_queries(sim *s, const int32_t *seqs, const int32_t *pos, int T, const uint32_t *tags) {
    int bad = 0;
    okv_kv *kv = s->kv;
    const okv_kv_cells *kc = kv->cells;
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        for (int t = 0; t < T; t++) {
            int q = seqs[t], u = kc->row_uniq[t];
            int32_t p = pos[t], W;
            if (kc->uniq[u] != q) { bad++; continue; }
            const okv_run *runs;
            int n_runs;
            okv_kv_cell_reads(kv, c, u, &runs, &n_runs, &W);
            if (W != cache_window(s, c)) bad++;
            int n_seen = 0, n_want = 0;
            int32_t last = -1;
            for (int r = 0; r < n_runs; r++)
                for (int i = 0; i < runs[r].n; i++) {
                    int32_t j = runs[r].pos + i, cell = runs[r].slot + i;
                    if (j <= last) bad++;   /* position order */
                    last = j;
                    if (j > p || (W && p - j >= W)) continue;
                    n_seen++;
                    uint32_t tag = 0;
                    bool ok = false;
                    for (int v = 0; v < T; v++) if (seqs[v] == q && pos[v] == j) { ok = true; tag = tags[v]; }
                    if (!ok && model_has(s, c, q, j)) { ok = true; tag = s->m[q].tag[j]; }
                    if (!ok || !okv_cells_owns(group(s, c), cell, q) || !row_is(ca, ca->k, cell, tag, 0) ||
                        !row_is(ca, ca->v, cell, tag, 1)) bad++;
                }
            for (int32_t j = W && p - W + 1 > 0 ? p - W + 1 : 0; j <= p; j++) {
                bool in_step = false;
                for (int v = 0; v < T; v++) in_step |= seqs[v] == q && pos[v] == j;
                n_want += in_step || model_has(s, c, q, j);
            }
            if (n_seen != n_want) bad++;
        }
    }
    return bad;
}

static void do_step(sim *s, uint64_t *rng, int *bad) {
    okv_kv *kv = s->kv;
    int T = rng_range(rng, 1, s->mw);
    int32_t seqs[16], pos[16], next[MAXS];
    uint32_t tags[16];
    for (int q = 0; q < s->max_seqs; q++) next[q] = s->m[q].len;
    int n = 0;
    for (int t = 0; t < T; t++) {
        int q = pick_alive(s, rng);
        if (q < 0) return;
        if (next[q] >= MAXP - 1 || next[q] >= kv->cells->seqs.capacity) continue;
        seqs[n] = q;
        pos[n] = next[q]++;
        tags[n] = s->next_tag++;
        n++;
    }
    if (n == 0) return;
    int sabotage = rng_range(rng, 0, 9);   /* 0: wrong position, 1: dead sequence */
    if (sabotage == 0) pos[rng_range(rng, 0, n - 1)] += rng_range(rng, 1, 3) * (rng_range(rng, 0, 1) ? 1 : -1);
    int dead = -1;
    for (int q = 0; q < s->max_seqs && dead < 0; q++) if (!s->m[q].alive) dead = q;
    if (sabotage == 1 && dead >= 0) seqs[rng_range(rng, 0, n - 1)] = dead;
    /* would it fit? the smallest free count over the tables */
    int32_t min_free = INT32_MAX;
    for (int g = 0; g < kv->cells->n_groups; g++) {
        const okv_cells *c = &kv->cells->groups[g];
        if (c->n_cells - c->n_used < min_free) min_free = c->n_cells - c->n_used;
    }
    uint8_t *snap;
    size_t sn = snapshot(s, &snap);
    okv_error err;
    okv_status st = okv_kv_begin_batch(kv, seqs, pos, n, &err);
    bool should_fail = (sabotage == 0 || (sabotage == 1 && dead >= 0)) || n > min_free;
    /* a sabotaged position may by chance still be right (-k then +k): recheck honestly */
    if (st == OKV_OK && should_fail && n <= min_free) {
        int32_t ln[MAXS];
        for (int q = 0; q < s->max_seqs; q++) ln[q] = s->m[q].len;
        bool valid = true;
        for (int t = 0; t < n; t++) {
            if (!s->m[seqs[t]].alive || pos[t] != ln[seqs[t]]) valid = false;
            ln[seqs[t]]++;
        }
        should_fail = !valid;
    }
    if (st != OKV_OK) {
        if (!should_fail) { (*bad)++; fprintf(stderr, "step refused: %s\n", err.message); }
        if (!unchanged(s, snap, sn)) (*bad)++;
        if (st == OKV_ERR_CAPACITY) s->n_full++;
        s->n_refused++;
        free(snap);
        return;
    }
    if (should_fail) (*bad)++;
    /* write each token's rows along every cache's write runs */
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_run *w;
        int n_w;
        okv_kv_cell_writes(kv, c, &w, &n_w);
        const okv_cache *ca = &kv->caches[c];
        size_t row = cache_row_bytes(ca);
        int t = 0;
        for (int r = 0; r < n_w; r++)
            for (int i = 0; i < w[r].n; i++, t++) {
                if (t < n && w[r].slot + i >= ca->slots_alloc) (*bad)++;
                if (t >= n || w[r].slot + i >= ca->slots_alloc) continue;
                fill_row((uint8_t *)ca->k + (size_t)(w[r].slot + i) * row, row, tags[t], 0);
                fill_row((uint8_t *)ca->v + (size_t)(w[r].slot + i) * row, row, tags[t], 1);
            }
        if (t != n) (*bad)++;
    }
    *bad += check_queries(s, seqs, pos, n, tags);
    if (rng_range(rng, 0, 7) == 0) {
        okv_kv_abort_step(kv);
        if (!unchanged(s, snap, sn)) (*bad)++;
        s->n_aborts++;
        free(snap);
        return;
    }
    free(snap);
    okv_kv_commit_step(kv);
    for (int t = 0; t < n; t++) {
        mseq *m = &s->m[seqs[t]];
        m->held[pos[t]] = true;
        m->tag[pos[t]] = tags[t];
        m->len = pos[t] + 1;
    }
    for (int t = 0; t < n; t++) {
        mseq *m = &s->m[seqs[t]];
        for (int c = 0; c < kv->n_caches; c++) {
            int32_t W = cache_window(s, c), keep = m->len - (W + s->mw - 1);
            if (W && keep > m->floor_[c]) m->floor_[c] = keep;
        }
    }
    s->n_steps++;
}

/* Brute force: are all keys a step of seq at n needs still in the tables? */
static bool servable(const sim *s, int q, int32_t n) {
    for (int c = 0; c < s->kv->n_caches; c++) {
        int32_t W = cache_window(s, c);
        if (!W || n == 0) continue;
        const okv_cells *g = group(s, c);
        for (int32_t j = n - W + 1 > 0 ? n - W + 1 : 0; j < n; j++) {
            bool found = false;
            for (int32_t i = 0; i < g->hwm && !found; i++) found = g->pos[i] == j && okv_cells_owns(g, i, q);
            if (!found) return false;
        }
    }
    return true;
}

/* long_runs: mostly steps, rm near the end only, so sequences get long. */
static void do_seq_op(sim *s, uint64_t *rng, int *bad, bool long_runs) {
    okv_kv *kv = s->kv;
    okv_error err;
    int op = rng_range(rng, 0, long_runs ? 60 : 9);
    int q = pick_alive(s, rng);
    uint8_t *snap;
    size_t sn = snapshot(s, &snap);
    if ((long_runs ? op == 0 : op <= 1) || q < 0) {            /* new */
        int id = -1;
        okv_status st = okv_kv_seq_new(kv, &id, &err);
        int n_alive = 0;
        for (int i = 0; i < s->max_seqs; i++) n_alive += s->m[i].alive;
        if ((st == OKV_OK) != (n_alive < s->max_seqs)) (*bad)++;
        if (st == OKV_OK) {
            if (id < 0 || id >= s->max_seqs || s->m[id].alive) (*bad)++;
            else { memset(&s->m[id], 0, sizeof s->m[id]); s->m[id].alive = true; }
        } else if (!unchanged(s, snap, sn)) (*bad)++;
    } else if (op <= 3) {              /* fork at a random point */
        mseq *src = &s->m[q];
        int32_t upto = rng_range(rng, 0, src->len + 1);   /* len + 1: must be refused */
        int id = -1;
        okv_status st = okv_kv_seq_fork(kv, q, upto, &id, &err);
        bool ok = upto <= src->len && servable(s, q, upto);
        int n_alive = 0;
        for (int i = 0; i < s->max_seqs; i++) n_alive += s->m[i].alive;
        if (n_alive == s->max_seqs) ok = false;
        if (!src->holes && upto <= src->len && n_alive < s->max_seqs && (st == OKV_OK) != ok) (*bad)++;
        if ((upto > src->len || n_alive == s->max_seqs) && st == OKV_OK) (*bad)++;
        if (st == OKV_OK) {
            mseq *d = &s->m[id];
            *d = *src;
            d->len = upto;
            for (int32_t j = upto; j < MAXP; j++) d->held[j] = false;
            if (upto == 0) memset(d->floor_, 0, sizeof d->floor_), d->holes = false;
            s->n_forks++;
        } else if (!unchanged(s, snap, sn)) (*bad)++;
    } else if (op <= 5) {              /* rm: middle or to the end */
        mseq *m = &s->m[q];
        int32_t p0 = rng_range(rng, long_runs && m->len > 8 ? m->len - 8 : 0, m->len), p1 = rng_range(rng, 0, 2) ? -1 : rng_range(rng, p0, m->len + 2);
        bool to_end = p1 < 0 || p1 >= m->len;
        okv_status st = okv_kv_seq_rm(kv, q, p0, p1, &err);
        if (to_end && !m->holes && (st == OKV_OK) != servable(s, q, p0)) (*bad)++;
        if (st == OKV_OK) {
            int32_t end = to_end ? m->len : p1;
            for (int32_t j = p0; j < end; j++) m->held[j] = false;
            if (to_end) {
                m->len = p0;
                if (p0 == 0) { memset(m->floor_, 0, sizeof m->floor_); m->holes = false; }
            } else if (end > p0) m->holes = true;
            s->n_rm++;
        } else {
            if (!unchanged(s, snap, sn)) (*bad)++;
            s->n_trunc_refused++;
        }
    } else if (op == 6) {              /* free */
        if (okv_kv_seq_free(kv, q, &err) != OKV_OK) (*bad)++;
        s->m[q].alive = false;
    } else {
        free(snap);
        do_step(s, rng, bad);
        return;
    }
    free(snap);
}

static void run_sim(const int *windows, int n_caches, int mw, int max_seqs, int32_t n_cells, int capacity, int ops,
                    uint64_t seed, bool long_runs) {
    okv_layout l;
    make_layout(&l, n_caches, windows, 1, 4, mw, capacity);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.cells = true;
    o.max_seqs = max_seqs;
    o.n_cells = n_cells;
    o.initial_capacity = 4;   /* pools grow during the run */
    sim s = {0};
    s.max_seqs = max_seqs;
    s.mw = mw;
    s.m = calloc((size_t)max_seqs, sizeof *s.m);
    okv_error err;
    CHECK_OK(okv_kv_create(&l, &o, &s.kv, &err), &err);
    if (!s.kv) return;
    uint64_t rng = seed;
    int bad = 0, max_len = 0;
    for (int i = 0; i < ops; i++) {
        do_seq_op(&s, &rng, &bad, long_runs);
        bad += check_state(&s);
        for (int q = 0; q < max_seqs; q++) if (s.m[q].alive && s.m[q].len > max_len) max_len = s.m[q].len;
        if (bad) { fprintf(stderr, "seed %llu: first failure at op %d\n", (unsigned long long)seed, i); break; }
    }
    CHECKF(bad == 0, "%d mismatches (windows[0] %d, %d seqs, %d cells)", bad, windows[0], max_seqs, n_cells);
    CHECKF(s.n_steps > ops / 10 && s.n_refused > 0 && s.n_aborts > 0 && s.n_forks > 0 && s.n_rm > 0,
           "coverage: %d steps, %d refused, %d aborted, %d forks, %d rm", s.n_steps, s.n_refused, s.n_aborts, s.n_forks,
           s.n_rm);
    printf("seed %llu: %d ops, %d steps (%d refused, %d for want of cells, %d aborted), %d forks, %d rm "
           "(%d refused), longest sequence %d\n", (unsigned long long)seed, ops, s.n_steps, s.n_refused, s.n_full,
           s.n_aborts, s.n_forks, s.n_rm, s.n_trunc_refused, max_len);
    okv_kv_free(s.kv);
    okv_layout_free(&l);
    free(s.m);
}

int main(void) {
    /* flat + two windows, few cells: admission runs out often */
    int mixed[4] = { 0, 3, 0, 5 };
    for (uint64_t seed = 1; seed <= 6; seed++) run_sim(mixed, 4, 3, 6, 40, 200, 1500, seed * 7919, false);
    /* windowed only, long sequences: hundreds of windows, bounded cells */
    int win[2] = { 3, 6 };
    for (uint64_t seed = 1; seed <= 3; seed++) run_sim(win, 2, 3, 4, 0, 1100, 4000, seed * 104729, true);
    /* more than 64 sequences: owner sets of several words */
    int one[2] = { 0, 4 };
    run_sim(one, 2, 4, 130, 300, 100, 1500, 99991, false);
    return okv_test_finish();
}
