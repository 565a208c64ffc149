/* test_kv_sim.c — a byte-level simulation of the cache as the attention op
 * uses it. Every step writes a fresh tag per position into the K and V pools
 * along the write runs; then, for every query of the step and every key the
 * query may see (j <= p and, windowed, p - j < W), the test finds the key
 * through the read runs and checks its slot holds the tag last committed for
 * j. Steps have random sizes, some are aborted after writing, and random
 * rewinds and clears are taken. Before each rewind, the accept/refuse verdict
 * for EVERY target is compared with a brute-force look at the pools: a
 * target is servable iff every key a step there needs still sits in its slot.
 * So the rewind rule is shown to be both safe and tight. */
#include "okv_test.h"
#include "cache_test_util.h"

#define MAX_POS 256

typedef struct sim {
    okv_kv *kv;
    uint32_t expect[MAX_POS];   /* tag committed for each position < length */
    uint32_t next_tag;
    int bad_reads, bad_verdicts, steps, rewinds_ok, rewinds_refused, aborts;
} sim;

/* Fills one row with a pattern that identifies tag (per element, per pool). */
static void fill_row(uint8_t *row, const okv_cache *c, uint32_t tag, int which) {
    size_t es = okv_dtype_size(which ? c->v_dtype : c->k_dtype), n = (size_t)c->kv_heads * c->head_dim;
    for (size_t e = 0; e < n; e++) {
        uint32_t v = tag * 31u + (uint32_t)e + (which ? 0x8000u : 0u);
        if (es == 4) memcpy(row + e * 4, &v, 4);
        else { uint16_t h = (uint16_t)v; memcpy(row + e * 2, &h, 2); }
    }
}

static bool row_is(const uint8_t *row, const okv_cache *c, uint32_t tag, int which) {
    uint8_t want[1024];
    fill_row(want, c, tag, which);
    return row && memcmp(row, want, cache_row_bytes(c)) == 0;
}

/* The pool slot position j would sit in if still held (flat: j; ring: j mod S). */
static const uint8_t *slot_row(const okv_cache *c, const void *pool, int32_t j) {
    int32_t slot = c->policy.kind == OKV_POLICY_RING ? j % c->policy.slots : j;
    return (const uint8_t *)pool + (size_t)slot * cache_row_bytes(c);
}

static bool visible(int32_t p, int32_t j, int32_t W) { return j <= p && (W == 0 || p - j < W); }

/* Brute force: can every cache serve a step at n, judging by pool contents? */
static bool servable(const sim *s, int32_t n) {
    for (int c = 0; c < s->kv->n_caches; c++) {
        const okv_cache *ca = &s->kv->caches[c];
        int32_t W = ca->policy.kind == OKV_POLICY_RING ? ca->policy.window : 0;
        for (int32_t j = 0; j < n; j++) {
            if (!visible(n, j, W)) continue;   /* the step's first query at n */
            if (!row_is(slot_row(ca, ca->k, j), ca, s->expect[j], 0)) return false;
            if (!row_is(slot_row(ca, ca->v, j), ca, s->expect[j], 1)) return false;
        }
    }
    return true;
}

static void run_step(sim *s, uint64_t *rng, int max_write) {
    okv_kv *kv = s->kv;
    int32_t L = kv->seq.length;
    int T = rng_range(rng, 1, max_write);
    if (L + T > kv->seq.capacity) T = kv->seq.capacity - L;
    int32_t pos[64];
    uint32_t tags[64];
    for (int t = 0; t < T; t++) { pos[t] = L + t; tags[t] = s->next_tag++; }
    okv_error err;
    if (okv_kv_begin_step(kv, pos, T, &err) != OKV_OK) { CHECKF(0, "begin_step: %s", err.message); return; }
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        const okv_step_plan *pl = &kv->plans[c];
        size_t row = cache_row_bytes(ca);
        uint8_t ks[64 * 1024], vs[64 * 1024];
        for (int t = 0; t < T; t++) { fill_row(ks + t * row, ca, tags[t], 0); fill_row(vs + t * row, ca, tags[t], 1); }
        write_along_runs(ca, ca->k, pl, ks);
        write_along_runs(ca, ca->v, pl, vs);
        int32_t W = ca->policy.kind == OKV_POLICY_RING ? ca->policy.window : 0;
        if (pl->window != W) s->bad_reads++;
        for (int32_t p = L; p < L + T; p++)
            for (int32_t j = 0; j <= p; j++) {
                if (!visible(p, j, W)) continue;
                uint32_t want = j < L ? s->expect[j] : tags[j - L];
                if (!row_is(row_for_position(ca, ca->k, pl, j), ca, want, 0) ||
                    !row_is(row_for_position(ca, ca->v, pl, j), ca, want, 1)) {
                    if (s->bad_reads++ < 5)
                        fprintf(stderr, "cache %d: query %d misses key %d (L %d T %d)\n", c, p, j, L, T);
                }
            }
    }
    if (rng_range(rng, 0, 9) == 0) {   /* the graph failed after writing */
        okv_kv_abort_step(kv);
        s->aborts++;
        CHECK(kv->seq.length == L);
    } else {
        okv_kv_commit_step(kv);
        for (int t = 0; t < T; t++) s->expect[L + t] = tags[t];
        s->steps++;
    }
}

static void run_rewind(sim *s, uint64_t *rng) {
    okv_kv *kv = s->kv;
    int32_t L = kv->seq.length;
    okv_error err;
    int32_t oldest[16];
    for (int c = 0; c < kv->n_caches; c++) oldest[c] = kv->caches[c].oldest;
    for (int32_t n = 0; n <= L; n++) {   /* verdict of every target vs the pools */
        bool truth = servable(s, n);
        okv_status st = okv_kv_rewind(kv, n, &err);
        bool accepted = st == OKV_OK;
        if (accepted != truth && s->bad_verdicts++ < 5)
            fprintf(stderr, "rewind %d -> %d: accepted %d, pools say %d (%s)\n", L, n, accepted, truth,
                    accepted ? "" : err.message);
        if (accepted) {   /* undo the probe (test-only poke; rewind to 0 also resets oldest) */
            kv->seq.length = L;
            for (int c = 0; c < kv->n_caches; c++) kv->caches[c].oldest = oldest[c];
        }
    }
    int32_t n = rng_range(rng, 0, 3) == 0 ? rng_range(rng, 0, L) : rng_range(rng, L > 12 ? L - 12 : 0, L);
    if (okv_kv_rewind(kv, n, &err) == OKV_OK) {
        CHECK(kv->seq.length == n);
        s->rewinds_ok++;
    } else {
        CHECK(kv->seq.length == L && strstr(err.message, "refused") != NULL);
        s->rewinds_refused++;
    }
}

/* min_refused: rewinds the run must see refused (0 when every ring is capped
 * by the capacity, so none ever forgets a key). */
static void simulate(const char *name, const int *windows, int n_caches, int chunk, const int32_t *ov, int n_ov,
                     okv_dtype dt, uint64_t seed, int min_refused) {
    okv_layout l;
    make_layout(&l, n_caches, windows, 2, 3, chunk, 1000);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = dt;
    o.max_capacity = MAX_POS;
    o.initial_capacity = 8;   /* flat pools grow 8 -> 256 during the run */
    o.windows_override = ov;
    o.n_windows_override = n_ov;
    sim s;
    memset(&s, 0, sizeof s);
    s.next_tag = 1;
    okv_error err;
    CHECK_OK(okv_kv_create(&l, &o, &s.kv, &err), &err);
    if (!s.kv) { okv_layout_free(&l); return; }
    uint64_t rng = seed;
    for (int op = 0; op < 1500; op++) {
        int r = rng_range(&rng, 0, 99);
        if (s.kv->seq.length == MAX_POS || r < 8) run_rewind(&s, &rng);
        else if (r < 9) { okv_kv_clear(s.kv); CHECK(s.kv->seq.length == 0); }
        else run_step(&s, &rng, chunk);
    }
    CHECKF(s.bad_reads == 0, "%s: %d keys not found in their slot", name, s.bad_reads);
    CHECKF(s.bad_verdicts == 0, "%s: %d rewind verdicts differ from the pools", name, s.bad_verdicts);
    /* the run must have exercised what it claims to */
    CHECKF(s.steps > 500 && s.aborts > 30 && s.rewinds_ok > 20 && s.rewinds_refused >= min_refused &&
               (min_refused > 0 || s.rewinds_refused == 0),
           "%s: steps %d aborts %d rewinds ok %d refused %d", name, s.steps, s.aborts, s.rewinds_ok, s.rewinds_refused);
    printf("%s: %d steps, %d aborts, %d rewinds accepted, %d refused\n", name, s.steps, s.aborts, s.rewinds_ok,
           s.rewinds_refused);
    okv_kv_free(s.kv);
    okv_layout_free(&l);
}

int main(void) {
    int w1[5] = { 0, 8, 4, 13, 5 };
    simulate("chunk 4, windows 0/8/4/13/5, f32", w1, 5, 4, NULL, 0, OKV_F32, 1, 6);
    simulate("chunk 4, windows 0/8/4/13/5, bf16", w1, 5, 4, NULL, 0, OKV_BF16, 2, 6);
    int w2[3] = { 16, 16, 0 };
    simulate("chunk 16, windows 16/16/0, f16", w2, 3, 16, NULL, 0, OKV_F16, 3, 6);
    int w3[4] = { 0, 0, 0, 0 };
    int32_t ov[3] = { 2, 1, 0 };   /* windows smaller than the chunk */
    simulate("chunk 4, override 2/1/0, f32", w3, 4, 4, ov, 3, OKV_F32, 4, 6);
    int w4[2] = { 8, 3 };
    simulate("chunk 1 (decode only), windows 8/3", w4, 2, 1, NULL, 0, OKV_F32, 5, 6);
    int w5[3] = { 300, 250, 0 };   /* window + chunk - 1 > capacity 256: rings of 256 slots */
    simulate("chunk 16, windows 300/250/0 over capacity 256", w5, 3, 16, NULL, 0, OKV_F32, 6, 0);
    int w6[2] = { 0, 0 };
    int32_t ov6[2] = { 245, 100000 };   /* overrides: 245 + 15 > 256 and far beyond */
    simulate("chunk 16, override 245/100000 over capacity 256", w6, 2, 16, ov6, 2, OKV_BF16, 7, 0);
    return okv_test_finish();
}
