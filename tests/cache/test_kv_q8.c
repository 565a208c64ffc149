/* Tests the byte layer with q8 storage: pool sizes (36 bytes per 32
 * elements, checked arithmetic, head_dim % 32 required), a ring that wraps
 * and rewinds (every read run's slots hold exactly the quantized rows of
 * their positions, rewritten positions their new rows), refused steps and
 * refused rewinds leave the pools' bytes unchanged, and cell pools where a
 * fork shares its prefix cells and each sequence reads its own rows. Rows
 * are written as the update half of attention does: quantized along the
 * write runs (okv_q8_quantize; the kernels' writer is tested in
 * tests/kernels/test_attend_q8.c). */
#include <math.h>
#include <stdlib.h>

#include "cache_test_util.h"
#include "okv_kvq8.h"

enum { HKV = 2, DIM = 64, ROW = HKV * DIM };

/* The K (or V: +1000) row of position pos written by generation gen. */
static void row_of(float *x, int cache, int gen, int32_t pos, int kv) {
    for (int e = 0; e < ROW; e++)
        x[e] = sinf(0.37f * (float)pos + 0.11f * (float)e + 1.3f * (float)cache + 2.1f * (float)gen + 1000.0f * kv) *
               (1.0f + (float)(e % 7));
}

static size_t slot_bytes(void) { return okv_kv_row_bytes(OKV_Q8, ROW); }

static void write_rows(okv_cache *c, int cache, const okv_run *runs, int n_runs, const int32_t *pos, const int *gen) {
    float x[ROW];
    int t = 0;
    for (int r = 0; r < n_runs; r++)
        for (int i = 0; i < runs[r].n; i++, t++)
            for (int kv = 0; kv < 2; kv++) {
                row_of(x, cache, gen[t], pos[t], kv);
                okv_q8_quantize((char *)(kv ? c->v : c->k) + (size_t)(runs[r].slot + i) * slot_bytes(), x, ROW);
            }
}

/* Whether every key a read run lists holds the quantized row of its
 * position, generation gen_of[pos]. */
static bool reads_hold(const okv_cache *c, int cache, const okv_run *runs, int n_runs, const int *gen_of) {
    float x[ROW];
    unsigned char want[2 * ROW];
    bool ok = true;
    for (int r = 0; r < n_runs; r++)
        for (int i = 0; i < runs[r].n; i++)
            for (int kv = 0; kv < 2; kv++) {
                int32_t p = runs[r].pos + i;
                row_of(x, cache, gen_of[p], p, kv);
                okv_q8_quantize(want, x, ROW);
                ok &= memcmp((const char *)(kv ? c->v : c->k) + (size_t)(runs[r].slot + i) * slot_bytes(), want,
                             slot_bytes()) == 0;
            }
    return ok;
}

static void test_sizes(void) {
    int w[2] = {0, 8};
    okv_layout l;
    make_layout(&l, 2, w, 3, 64, 4, 1000);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = OKV_Q8;
    o.initial_capacity = 16;
    okv_kv *kv = kv_create_ok(&l, &o);
    if (kv) {
        /* flat 16 slots + ring 8 + 4 - 1 slots, K and V, 3 heads x 64 dims at 72 bytes per head */
        CHECK(okv_kv_bytes(kv) == 2 * (16 + 11) * 3 * 72);
        CHECK(okv_kv_bytes_full(kv) == 2 * (1000 + 11) * 3 * 72);
        char line[256];
        okv_kv_describe(kv, line, sizeof line);
        CHECKF(strstr(line, "kv q8") != NULL, "describe: %s", line);
        okv_kv_free(kv);
    }
    o.k_dtype = o.v_dtype = OKV_BF16;
    kv = kv_create_ok(&l, &o);
    if (kv) CHECK(okv_kv_bytes(kv) == 2 * (16 + 11) * 3 * 128);
    okv_kv_free(kv);
    okv_layout_free(&l);
    /* head_dim 48 cannot be cut into blocks of 32 */
    okv_error err;
    make_layout(&l, 2, w, 3, 48, 4, 1000);
    o.k_dtype = o.v_dtype = OKV_Q8;
    kv = NULL;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_UNSUPPORTED && kv == NULL && strstr(err.message, "head_dim 48"));
    okv_layout_free(&l);
    /* sizes that overflow are refused, not wrapped */
    make_layout(&l, 1, NULL, 1 << 20, 1 << 20, 4, 1 << 30);
    o.initial_capacity = 1;
    kv = NULL;
    okv_status st = okv_kv_create(&l, &o, &kv, &err);
    CHECKF(st == OKV_ERR_INVALID && kv == NULL, "2^40 elements per slot x 2^30 slots: status %d (%s)", (int)st,
           err.message);
    okv_layout_free(&l);
}

/* Snapshot of every pool's bytes. */
typedef struct snap {
    int n;
    unsigned char *b[8];
    void *ptr[8];
    size_t len[8];
} snap;

static void take(snap *s, const okv_kv *kv) {
    s->n = 0;
    for (int c = 0; c < kv->n_caches; c++)
        for (int kvi = 0; kvi < 2; kvi++) {
            size_t n = (size_t)kv->caches[c].slots_alloc * slot_bytes();
            void *p = kvi ? kv->caches[c].v : kv->caches[c].k;
            s->b[s->n] = malloc(n);
            memcpy(s->b[s->n], p, n);
            s->ptr[s->n] = p;
            s->len[s->n++] = n;
        }
}

static bool same(const snap *s, const okv_kv *kv) {
    bool ok = true;
    int i = 0;
    for (int c = 0; c < kv->n_caches; c++)
        for (int kvi = 0; kvi < 2; kvi++, i++) {
            void *p = kvi ? kv->caches[c].v : kv->caches[c].k;
            ok &= p == s->ptr[i] && (size_t)kv->caches[c].slots_alloc * slot_bytes() == s->len[i] &&
                  memcmp(p, s->b[i], s->len[i]) == 0;
        }
    return ok;
}

static void drop(snap *s) {
    for (int i = 0; i < s->n; i++) free(s->b[i]);
    s->n = 0;
}

/* One step of T tokens at the current length with generation gen; checks
 * every cache's reads after the write. */
static bool step(okv_kv *kv, int T, int gen, int *gen_of) {
    okv_error err;
    int32_t pos[8];
    int gens[8];
    for (int t = 0; t < T; t++) {
        pos[t] = kv->seq.length + t;
        gens[t] = gen;
        gen_of[pos[t]] = gen;
    }
    if (okv_kv_begin_step(kv, pos, T, &err) != OKV_OK) return false;
    bool ok = true;
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_step_plan *p = &kv->plans[c];
        write_rows(&kv->caches[c], c, p->write, p->n_write, pos, gens);
        ok &= reads_hold(&kv->caches[c], c, p->read, p->n_read, gen_of);
    }
    okv_kv_commit_step(kv);
    return ok;
}

static void test_ring_rewind(void) {
    int w[2] = {0, 6};
    okv_layout l;
    make_layout(&l, 2, w, HKV, DIM, 4, 200);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = OKV_Q8;
    o.initial_capacity = 4; /* the flat pool grows (doubling copies q8 bytes) */
    okv_kv *kv = kv_create_ok(&l, &o);
    if (!kv) { okv_layout_free(&l); return; }
    CHECK(kv->caches[1].policy.slots == 9);
    int gen_of[200] = {0};
    okv_error err;
    bool ok = true;
    int gen = 0;
    uint64_t rng = 7;
    while (kv->seq.length < 150 && ok) {
        int T = rng_range(&rng, 1, 4);
        if (kv->seq.length + T > 150) T = 150 - kv->seq.length;
        ok &= step(kv, T, gen, gen_of);
        if (kv->seq.length % 17 < 4 && kv->seq.length > 10) { /* rewind 1..4 and rewrite with a new generation */
            int32_t to = kv->seq.length - rng_range(&rng, 1, 4);
            const okv_cache *ring = &kv->caches[1];
            if (okv_policy_can_serve(&ring->policy, ring->oldest, to)) CHECK_OK(okv_kv_rewind(kv, to, &err), &err);
            else CHECK(okv_kv_rewind(kv, to, &err) == OKV_ERR_INVALID);
            gen++;
        }
    }
    CHECKF(ok, "q8 ring/flat reads differ from the quantized rows at length %d", kv->seq.length);
    /* a rewind the ring cannot serve is refused and changes no byte */
    snap s;
    take(&s, kv);
    int32_t len = kv->seq.length;
    CHECK(okv_kv_rewind(kv, len - 8, &err) == OKV_ERR_INVALID && kv->seq.length == len);
    CHECK(same(&s, kv));
    /* refused steps (wrong position, too long a step) change no byte */
    int32_t bad[5] = {len + 1, len + 2, len + 3, len + 4, len + 5};
    CHECK(okv_kv_begin_step(kv, bad, 1, &err) == OKV_ERR_INVALID);
    for (int t = 0; t < 5; t++) bad[t] = len + t;
    CHECK(okv_kv_begin_step(kv, bad, 5, &err) != OKV_OK);
    CHECK(same(&s, kv) && kv->seq.length == len);
    drop(&s);
    okv_kv_free(kv);
    /* growth refused by max_pool_bytes: no byte, no pointer changes */
    o.initial_capacity = 8;
    o.max_pool_bytes = 2 * (8 + 9) * slot_bytes();
    kv = kv_create_ok(&l, &o);
    if (kv) {
        int g[200] = {0};
        CHECK(step(kv, 4, 0, g) && step(kv, 4, 0, g));
        take(&s, kv);
        int32_t p9[1] = {8};
        CHECK(okv_kv_begin_step(kv, p9, 1, &err) == OKV_ERR_NOMEM);
        CHECK(same(&s, kv) && kv->seq.length == 8);
        drop(&s);
        okv_kv_free(kv);
    }
    okv_layout_free(&l);
}

/* Cell pool: s0 writes 10 positions, s1 forks its first 8 and both step in
 * one batch; s1 reads s0's cells for positions < 8 (the same slots) and
 * its own row at 8. */
static void test_cells_fork(void) {
    int w[2] = {0, 6};
    okv_layout l;
    make_layout(&l, 2, w, HKV, DIM, 4, 64);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = OKV_Q8;
    o.cells = true;
    o.max_seqs = 4;
    okv_kv *kv = kv_create_ok(&l, &o);
    if (!kv) { okv_layout_free(&l); return; }
    okv_error err;
    int s0, s1;
    CHECK_OK(okv_kv_seq_new(kv, &s0, &err), &err);
    int gen0[64] = {0}, gen1[64] = {0};
    for (int32_t p = 0; p < 10;) {
        int T = 10 - p < 4 ? 10 - p : 4;
        int32_t seqs[4], pos[4];
        int gens[4] = {0, 0, 0, 0};
        for (int t = 0; t < T; t++) { seqs[t] = s0; pos[t] = p + t; }
        CHECK_OK(okv_kv_begin_batch(kv, seqs, pos, T, &err), &err);
        for (int c = 0; c < 2; c++) {
            const okv_run *runs;
            int n;
            okv_kv_cell_writes(kv, c, &runs, &n);
            write_rows(&kv->caches[c], c, runs, n, pos, gens);
        }
        okv_kv_commit_step(kv);
        p += T;
    }
    CHECK_OK(okv_kv_seq_fork(kv, s0, 8, &s1, &err), &err);
    int32_t seqs[2] = {s0, s1}, pos[2] = {10, 8};
    int gens[2] = {0, 1};
    gen1[8] = 1;
    CHECK_OK(okv_kv_begin_batch(kv, seqs, pos, 2, &err), &err);
    for (int c = 0; c < 2; c++) {
        const okv_run *runs;
        int n;
        okv_kv_cell_writes(kv, c, &runs, &n);
        write_rows(&kv->caches[c], c, runs, n, pos, gens);
    }
    for (int c = 0; c < 2; c++) {
        const okv_run *r0 = NULL, *r1 = NULL;
        int n0 = 0, n1 = 0;
        int32_t win;
        for (int u = 0; u < kv->cells->n_uniq; u++) {
            const okv_run *runs;
            int n;
            okv_kv_cell_reads(kv, c, u, &runs, &n, &win);
            if (kv->cells->uniq[u] == s0) { r0 = runs; n0 = n; }
            else { r1 = runs; n1 = n; }
        }
        CHECKF(r0 && r1, "cache %d: reads of both sequences", c);
        if (!r0 || !r1) continue;
        CHECKF(reads_hold(&kv->caches[c], c, r0, n0, gen0), "cache %d: s0 reads", c);
        CHECKF(reads_hold(&kv->caches[c], c, r1, n1, gen1), "cache %d: s1 reads", c);
        /* positions both see below 8 live in the same slots */
        int32_t slot0[64], slot1[64];
        for (int i = 0; i < 64; i++) slot0[i] = slot1[i] = -1;
        for (int r = 0; r < n0; r++) for (int i = 0; i < r0[r].n; i++) slot0[r0[r].pos + i] = r0[r].slot + i;
        for (int r = 0; r < n1; r++) for (int i = 0; i < r1[r].n; i++) slot1[r1[r].pos + i] = r1[r].slot + i;
        int shared = 0;
        for (int p = 0; p < 8; p++) shared += slot1[p] >= 0 && slot1[p] == slot0[p];
        CHECKF(shared >= (c == 0 ? 8 : 3), "cache %d: only %d shared cells", c, shared);
        for (int p = 0; p < 8; p++) CHECKF(slot1[p] < 0 || slot0[p] < 0 || slot1[p] == slot0[p], "cache %d pos %d: fork not shared", c, p);
        CHECKF(slot1[8] >= 0 && slot1[8] != slot0[8], "cache %d: s1's own cell at 8 (%d vs %d)", c, slot1[8], slot0[8]);
    }
    okv_kv_commit_step(kv);
    okv_kv_free(kv);
    okv_layout_free(&l);
}

int main(void) {
    test_sizes();
    test_ring_rewind();
    test_cells_fork();
    return okv_test_finish();
}
