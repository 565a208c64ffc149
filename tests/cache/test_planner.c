/* test_planner.c — the tensor-free core: layout validation, the step planner
 * against a brute-force model of flat and ring slot maps, the sequence
 * controller's step rules, the rewind rule, and the ring's fixed size over a
 * long sequence. */
#include "okv_test.h"
#include "cache_test_util.h"

/* Checks runs[0..n) against the model: they hold positions [first, first+count)
 * in order, contiguous, each position p at slot p mod S (S = 0: slot p),
 * at most 2 runs, split only where a ring wraps. Returns false on the first
 * violation (with a message). */
static bool runs_match_model(const okv_run *runs, int n, int32_t first, int32_t count, int32_t S, const char *what,
                             int32_t pos, int32_t T) {
    bool ok = n >= 1 && n <= 2;
    int32_t next = first, total = 0;
    for (int r = 0; r < n && ok; r++) {
        const okv_run *run = &runs[r];
        ok = run->n >= 1 && run->pos == next;
        for (int32_t i = 0; i < run->n && ok; i++) {
            int32_t p = run->pos + i;
            int32_t want = S ? p % S : p;
            ok = run->slot + i == want;
        }
        if (ok && S) ok = run->slot + run->n <= S;
        next += run->n;
        total += run->n;
    }
    if (ok) ok = total == count;
    if (ok && n == 2) ok = runs[0].slot + runs[0].n == S && runs[1].slot == 0;   /* split only at the wrap */
    CHECKF(ok, "%s runs wrong at pos %d T %d S %d (n=%d, first %d, count %d)", what, pos, T, S, n, first, count);
    return ok;
}

/* Every (pos, T) of a policy against the model; returns failures. */
static int check_policy(const okv_policy *p, int32_t W, int32_t pos, int32_t T) {
    okv_step_plan plan;
    memset(&plan, 0x5a, sizeof plan);
    okv_policy_plan(p, pos, T, &plan);
    int32_t S = p->kind == OKV_POLICY_RING ? p->slots : 0;
    int32_t base = W > 0 ? (pos - W + 1 > 0 ? pos - W + 1 : 0) : 0;
    int bad = 0;
    bad += !runs_match_model(plan.write, plan.n_write, pos, T, S, "write", pos, T);
    bad += !runs_match_model(plan.read, plan.n_read, base, pos + T - base, S, "read", pos, T);
    if (plan.read_base != base || plan.window != W) {
        CHECKF(0, "read_base %d (want %d) window %d (want %d) at pos %d T %d", plan.read_base, base, plan.window, W, pos, T);
        bad++;
    }
    /* no slot of the read span is used twice (the span fits the ring) */
    if (S) {
        int32_t span = pos + T - base;
        if (span > S) { CHECKF(0, "read span %d exceeds %d slots", span, S); bad++; }
    }
    return bad;
}

static void test_ring_plans_exhaustive(void) {
    int bad = 0, cases = 0;
    for (int W = 1; W <= 16; W++) {
        for (int mw = 1; mw <= 9; mw++) {
            okv_policy p = ring_policy(W, mw);
            CHECK(p.slots == W + mw - 1);
            for (int pos = 0; pos <= 3 * p.slots + 2; pos++)
                for (int T = 1; T <= mw; T++) { bad += check_policy(&p, W, pos, T); cases++; }
        }
    }
    CHECKF(bad == 0, "%d bad of %d ring plans", bad, cases);
}

static void test_ring_plans_large(void) {
    int sizes[][2] = { {512, 512}, {512, 1}, {512, 128}, {1024, 512}, {4096, 2048}, {7, 3} };
    uint64_t rng = 12345;
    int bad = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int W = sizes[k][0], mw = sizes[k][1];
        okv_policy p = ring_policy(W, mw);
        int32_t S = p.slots;
        int32_t poss[] = { 0, 1, W - 1, W, S - 1, S, S + 1, 2 * S - 1, 2 * S, 5 * S - mw / 2, 40 * S + 17 };
        for (size_t i = 0; i < sizeof poss / sizeof poss[0]; i++) {
            int Ts[] = { 1, mw / 2 > 0 ? mw / 2 : 1, mw };
            for (int t = 0; t < 3; t++) bad += check_policy(&p, W, poss[i], Ts[t]);
        }
        for (int r = 0; r < 200; r++) bad += check_policy(&p, W, rng_range(&rng, 0, 50 * S), rng_range(&rng, 1, mw));
    }
    CHECK(bad == 0);
}

static void test_flat_plans(void) {
    okv_policy p = okv_policy_flat(300);
    CHECK(p.kind == OKV_POLICY_FLAT && p.slots == 300);
    int bad = 0;
    for (int pos = 0; pos < 290; pos += 7)
        for (int T = 1; T <= 10; T++) bad += check_policy(&p, 0, pos, T);
    CHECK(bad == 0);
    okv_step_plan plan;
    okv_policy_plan(&p, 40, 5, &plan);   /* the concrete shape, spelled out */
    CHECK(plan.n_write == 1 && plan.write[0].slot == 40 && plan.write[0].n == 5 && plan.write[0].pos == 40);
    CHECK(plan.n_read == 1 && plan.read[0].slot == 0 && plan.read[0].n == 45 && plan.read_base == 0);
}

static void test_ring_plan_spelled_out(void) {
    /* W=8, mw=4: S=11. Step at pos 20, T=4 writes positions 20..23 = slots 9,10,0,1;
     * reads positions 13..23 = slots 2..10 then 0..1. */
    okv_policy p = ring_policy(8, 4);
    okv_step_plan plan;
    okv_policy_plan(&p, 20, 4, &plan);
    CHECK(plan.n_write == 2);
    CHECK(plan.write[0].slot == 9 && plan.write[0].n == 2 && plan.write[0].pos == 20);
    CHECK(plan.write[1].slot == 0 && plan.write[1].n == 2 && plan.write[1].pos == 22);
    CHECK(plan.read_base == 13 && plan.n_read == 2);
    CHECK(plan.read[0].slot == 2 && plan.read[0].n == 9 && plan.read[0].pos == 13);
    CHECK(plan.read[1].slot == 0 && plan.read[1].n == 2 && plan.read[1].pos == 22);
    /* early in the sequence nothing wraps and read_base clamps at 0 */
    okv_policy_plan(&p, 2, 3, &plan);
    CHECK(plan.read_base == 0 && plan.n_read == 1 && plan.read[0].n == 5 && plan.n_write == 1 && plan.write[0].slot == 2);
}

static void test_can_rewind(void) {
    /* W=8, max_write=2, S=9, L=20: the ring holds positions 11..19. A step at
     * n needs keys from n-7: n=18 needs 11 (held), n=17 needs 10 (overwritten
     * by position 19). Accepting down to L - W + 1 = 13 (or L - W) would read
     * overwritten slots. */
    okv_policy p = ring_policy(8, 2);
    CHECK(p.slots == 9);
    CHECK(!can_rewind_by_length(&p, 20, 13));
    CHECK(!can_rewind_by_length(&p, 20, 12));
    CHECK(!can_rewind_by_length(&p, 20, 17));
    CHECK(can_rewind_by_length(&p, 20, 18));
    CHECK(can_rewind_by_length(&p, 20, 19));
    CHECK(can_rewind_by_length(&p, 20, 20));
    CHECK(can_rewind_by_length(&p, 20, 0));     /* nothing needed */
    CHECK(can_rewind_by_length(&p, 9, 1));      /* L <= S: everything held */
    CHECK(can_rewind_by_length(&p, 10, 8));     /* holds 1..9, step at 8 needs 1.. */
    CHECK(!can_rewind_by_length(&p, 10, 7));    /* needs 0 */
    /* the general rule: for L > S the smallest accepted target >= 1 is L - max_write */
    for (int W = 1; W <= 12; W++)
        for (int mw = 1; mw <= W; mw++) {
            okv_policy q = ring_policy(W, mw);
            int L = q.slots + 5;
            int smallest = -1;
            for (int n = 1; n <= L && smallest < 0; n++)
                if (can_rewind_by_length(&q, L, n)) smallest = n;
            CHECKF(smallest == L - mw, "W %d mw %d L %d: smallest %d", W, mw, L, smallest);
        }
    okv_policy f = okv_policy_flat(100);
    CHECK(can_rewind_by_length(&f, 90, 1) && okv_policy_can_serve(&f, 0, 1));
    CHECK(okv_policy_can_serve(&p, 11, 18) && !okv_policy_can_serve(&p, 11, 17));
    CHECK(okv_policy_oldest_after_write(&p, 0, 18, 2) == 11);
    CHECK(okv_policy_oldest_after_write(&p, 11, 18, 1) == 11);   /* 19 - 9 = 10 < 11 */
    CHECK(okv_policy_oldest_after_write(&p, 0, 3, 2) == 0);
}

static void test_seq(void) {
    okv_seq s = { 10, 16, 4 };
    okv_error err;
    int32_t pos[8] = { 10, 11, 12, 13, 14 };
    CHECK_OK(okv_seq_check_step(&s, pos, 4, &err), &err);
    CHECK(okv_seq_check_step(&s, pos, 5, &err) == OKV_ERR_INVALID && strstr(err.message, "[1, 4]"));
    CHECK(okv_seq_check_step(&s, pos, 0, &err) == OKV_ERR_INVALID);
    CHECK(okv_seq_check_step(&s, pos, -1, &err) == OKV_ERR_INVALID);
    CHECK(okv_seq_check_step(&s, NULL, 1, &err) == OKV_ERR_INVALID);
    int32_t skip[] = { 10, 12 };
    CHECK(okv_seq_check_step(&s, skip, 2, &err) == OKV_ERR_INVALID && strstr(err.message, "positions[1] = 12"));
    int32_t late[] = { 11 };
    CHECK(okv_seq_check_step(&s, late, 1, &err) == OKV_ERR_INVALID);
    int32_t early[] = { 9, 10 };
    CHECK(okv_seq_check_step(&s, early, 2, &err) == OKV_ERR_INVALID);
    s.length = 14;
    int32_t over[] = { 14, 15, 16 };
    CHECK(okv_seq_check_step(&s, over, 3, &err) == OKV_ERR_CAPACITY && strstr(err.message, "capacity 16"));
    CHECK_OK(okv_seq_check_step(&s, over, 2, &err), &err);
}

static void test_layout_validate(void) {
    okv_layout l;
    okv_error err;
    int w[3] = { 0, 8, 4 };
    make_layout(&l, 3, w, 2, 16, 4, 64);
    CHECK_OK(okv_layout_validate(&l, &err), &err);
    l.kv_heads[1] = 0;
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID && strstr(err.message, "kv_heads[1]"));
    l.kv_heads[1] = 2; l.head_dims[2] = -1;
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID && strstr(err.message, "head_dims[2]"));
    l.head_dims[2] = 16; l.windows[0] = -3;
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID && strstr(err.message, "windows[0]"));
    l.windows[0] = 0; l.layer_to_cache[2] = 3;
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID && strstr(err.message, "layer_to_cache[2]"));
    l.layer_to_cache[2] = 1;   /* now cache 2 is used by no layer */
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID && strstr(err.message, "cache 2"));
    l.layer_to_cache[2] = 2; l.prefill_chunk_size = 5;   /* > window 4 */
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID && strstr(err.message, "windows[2]"));
    l.prefill_chunk_size = 0;
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID && strstr(err.message, "prefill_chunk_size"));
    l.windows[1] = l.windows[2] = 0; l.prefill_chunk_size = 65;   /* > max_ctx_len */
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID);
    l.prefill_chunk_size = 64;
    CHECK_OK(okv_layout_validate(&l, &err), &err);
    l.max_ctx_len = 0;
    CHECK(okv_layout_validate(&l, &err) == OKV_ERR_INVALID);
    okv_layout_free(&l);
    CHECK(l.kv_heads == NULL && l.n_caches == 0);
    CHECK(okv_layout_alloc(&l, 0, 3, &err) == OKV_ERR_INVALID);
}

/* A ring's pool is allocated once at window + chunk - 1 slots however long
 * the sequence runs; a flat pool doubles up to the capacity. */
static void test_ring_fixed_over_long_sequence(void) {
    int w[3] = { 8, 64, 0 };
    okv_layout l;
    make_layout(&l, 3, w, 2, 4, 8, 10000);
    okv_kv *kv;
    okv_error err;
    okv_kv_options o;
    okv_kv_options_default(&o);
    CHECK_OK(okv_kv_create(&l, &o, &kv, &err), &err);
    if (!kv) return;
    size_t row = 2 * 4 * 4;
    uint64_t rng = 99;
    int32_t pos[8];
    bool ring_ok = true, bytes_ok = true;
    int32_t last_flat = kv->caches[2].slots_alloc;
    bool flat_ok = last_flat == 256;
    while (kv->seq.length < 10000) {
        int T = rng_range(&rng, 1, 8);
        if (kv->seq.length + T > 10000) T = 10000 - kv->seq.length;
        for (int t = 0; t < T; t++) pos[t] = kv->seq.length + t;
        if (okv_kv_begin_step(kv, pos, T, &err) != OKV_OK) { CHECKF(0, "%s", err.message); break; }
        okv_kv_commit_step(kv);
        ring_ok &= kv->caches[0].slots_alloc == 15 && kv->caches[1].slots_alloc == 71;
        int32_t f = kv->caches[2].slots_alloc;
        flat_ok &= f == last_flat || f == 2 * last_flat || (f == 10000 && last_flat == 8192);
        flat_ok &= f >= kv->seq.length;
        last_flat = f;
        bytes_ok &= okv_kv_bytes(kv) == 2 * row * (15 + 71 + (size_t)f);
    }
    CHECK(kv->seq.length == 10000);
    CHECK(ring_ok);
    CHECK(flat_ok && last_flat == 10000);
    CHECK(bytes_ok);
    CHECK(okv_kv_bytes(kv) == 2 * row * (15 + 71 + 10000));
    CHECK(okv_kv_bytes_full(kv) == 2 * row * (15 + 71 + 10000));
    okv_kv_free(kv);
    okv_layout_free(&l);
}

int main(void) {
    test_ring_plans_exhaustive();
    test_ring_plans_large();
    test_flat_plans();
    test_ring_plan_spelled_out();
    test_can_rewind();
    test_seq();
    test_layout_validate();
    test_ring_fixed_over_long_sequence();
    return okv_test_finish();
}
