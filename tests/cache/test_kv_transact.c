/* test_kv_transact.c — the byte layer's transaction rules: a refused step
 * (overflow, wrong positions, bad T, growth over the memory limit, a step
 * already in flight) leaves length, allocations, pool pointers and pool
 * bytes exactly as they were; flat pools double from the initial capacity
 * up to the capacity (power of two or not) keeping their contents, for every
 * storage dtype; rewinds refuse with a message naming cache and bound. */
#include "okv_test.h"
#include "cache_test_util.h"

/* Everything a failed call must leave untouched. */
typedef struct snapshot {
    int32_t length, step_T;
    int32_t slots[8], oldest[8];
    void *k[8], *v[8];
    uint8_t *bytes[8];   /* copies of the K pools then V pools */
    size_t total;
} snapshot;

static void take(snapshot *s, const okv_kv *kv) {
    memset(s, 0, sizeof *s);
    s->length = kv->seq.length;
    s->step_T = kv->step_T;
    s->total = okv_kv_bytes(kv);
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        s->slots[c] = ca->slots_alloc;
        s->oldest[c] = ca->oldest;
        s->k[c] = ca->k;
        s->v[c] = ca->v;
        size_t n = (size_t)ca->slots_alloc * cache_row_bytes(ca);
        s->bytes[c] = malloc(2 * n);
        memcpy(s->bytes[c], ca->k, n);
        memcpy(s->bytes[c] + n, ca->v, n);
    }
}

static bool same(const snapshot *s, const okv_kv *kv) {
    bool ok = s->length == kv->seq.length && s->step_T == kv->step_T && s->total == okv_kv_bytes(kv);
    for (int c = 0; c < kv->n_caches && ok; c++) {
        const okv_cache *ca = &kv->caches[c];
        size_t n = (size_t)ca->slots_alloc * cache_row_bytes(ca);
        ok = s->slots[c] == ca->slots_alloc && s->oldest[c] == ca->oldest && s->k[c] == ca->k && s->v[c] == ca->v &&
             memcmp(s->bytes[c], ca->k, n) == 0 && memcmp(s->bytes[c] + n, ca->v, n) == 0;
    }
    return ok;
}

static void drop(snapshot *s) {
    for (int c = 0; c < 8; c++) free(s->bytes[c]);
}

/* Writes a recognisable byte pattern for positions [pos, pos+T) of every cache. */
static void write_pattern(okv_kv *kv, int32_t pos, int32_t T) {
    for (int c = 0; c < kv->n_caches; c++) {
        okv_cache *ca = &kv->caches[c];
        size_t row = cache_row_bytes(ca);
        uint8_t *src = malloc((size_t)T * row);
        for (int32_t t = 0; t < T; t++)
            for (size_t b = 0; b < row; b++) src[t * row + b] = (uint8_t)((pos + t) * 7 + b * 13 + c);
        write_along_runs(ca, ca->k, &kv->plans[c], src);
        for (size_t b = 0; b < (size_t)T * row; b++) src[b] ^= 0xff;
        write_along_runs(ca, ca->v, &kv->plans[c], src);
        free(src);
    }
}

static okv_status step(okv_kv *kv, int32_t T, okv_error *err) {
    int32_t pos[64];
    for (int t = 0; t < T; t++) pos[t] = kv->seq.length + t;
    okv_status st = okv_kv_begin_step(kv, pos, T, err);
    if (st != OKV_OK) return st;
    write_pattern(kv, kv->step_pos, T);
    okv_kv_commit_step(kv);
    return OKV_OK;
}

static void test_refused_steps_change_nothing(void) {
    int w[2] = { 0, 8 };
    okv_layout l;
    make_layout(&l, 2, w, 2, 4, 4, 64);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.initial_capacity = 8;
    o.max_capacity = 30;
    okv_error err;
    okv_kv *kv = kv_create_ok(&l, &o);
    for (int i = 0; i < 7; i++) CHECK_OK(step(kv, 4, &err), &err);   /* length 28, flat pool 30 */
    CHECK(kv->seq.length == 28 && kv->caches[0].slots_alloc == 30 && kv->caches[1].slots_alloc == 11);
    snapshot s;
    take(&s, kv);
    int32_t p[8] = { 28, 29, 30, 31 };
    CHECK(okv_kv_begin_step(kv, p, 3, &err) == OKV_ERR_CAPACITY && same(&s, kv));   /* 28 + 3 > 30 */
    CHECK(strstr(err.message, "capacity 30") != NULL);
    CHECK(okv_kv_begin_step(kv, p, 0, &err) == OKV_ERR_INVALID && same(&s, kv));
    CHECK(okv_kv_begin_step(kv, p, 5, &err) == OKV_ERR_INVALID && same(&s, kv));  /* T > max_write 4 */
    CHECK(okv_kv_begin_step(kv, p, -2, &err) == OKV_ERR_INVALID && same(&s, kv));
    CHECK(okv_kv_begin_step(kv, NULL, 1, &err) == OKV_ERR_INVALID && same(&s, kv));
    int32_t wrong1[] = { 29 }, wrong2[] = { 27, 28 }, wrong3[] = { 28, 28 };
    CHECK(okv_kv_begin_step(kv, wrong1, 1, &err) == OKV_ERR_INVALID && same(&s, kv));
    CHECK(okv_kv_begin_step(kv, wrong2, 2, &err) == OKV_ERR_INVALID && same(&s, kv));
    CHECK(okv_kv_begin_step(kv, wrong3, 2, &err) == OKV_ERR_INVALID && same(&s, kv));
    CHECK(okv_kv_rewind(kv, 29, &err) == OKV_ERR_INVALID && same(&s, kv));
    CHECK(okv_kv_rewind(kv, -1, &err) == OKV_ERR_INVALID && same(&s, kv));
    drop(&s);

    /* a step in flight owns the set: no second step, no rewind, clear ignored */
    CHECK_OK(okv_kv_begin_step(kv, p, 2, &err), &err);
    take(&s, kv);
    CHECK(okv_kv_begin_step(kv, p, 2, &err) == OKV_ERR_STATE && same(&s, kv));
    CHECK(strstr(err.message, "in flight") != NULL);
    CHECK(okv_kv_rewind(kv, 20, &err) == OKV_ERR_STATE && same(&s, kv));
    okv_kv_clear(kv);
    CHECK(same(&s, kv));
    drop(&s);
    okv_kv_abort_step(kv);
    CHECK(kv->seq.length == 28 && kv->step_T == 0);
    CHECK_OK(okv_kv_begin_step(kv, p, 2, &err), &err);   /* same positions again after abort */
    okv_kv_commit_step(kv);
    CHECK(kv->seq.length == 30);
    okv_kv_commit_step(kv);   /* nothing in flight: no effect */
    CHECK(kv->seq.length == 30);
    okv_kv_clear(kv);
    CHECK(kv->seq.length == 0 && kv->caches[0].slots_alloc == 30);
    okv_kv_free(kv);
    okv_layout_free(&l);
}

/* Growth over max_pool_bytes fails like malloc would: nothing changes. */
static void test_failed_growth_changes_nothing(void) {
    int w[3] = { 0, 0, 6 };
    okv_layout l;
    make_layout(&l, 3, w, 1, 8, 4, 100);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.initial_capacity = 4;
    size_t row = 8 * 4;
    /* start: 2 flat x 4 slots + ring 9 slots; allow growth to 8 but not 16 */
    o.max_pool_bytes = 2 * row * (2 * 8 + 9);
    okv_error err;
    okv_kv *kv = kv_create_ok(&l, &o);
    CHECK(okv_kv_bytes(kv) == 2 * row * (2 * 4 + 9));
    CHECK_OK(step(kv, 4, &err), &err);
    CHECK_OK(step(kv, 3, &err), &err);   /* grows to 8 */
    CHECK(kv->caches[0].slots_alloc == 8 && kv->caches[1].slots_alloc == 8);
    snapshot s;
    take(&s, kv);
    int32_t p[] = { 7, 8 };
    CHECK(okv_kv_begin_step(kv, p, 2, &err) == OKV_ERR_NOMEM && same(&s, kv));
    CHECK(strstr(err.message, "max_pool_bytes") != NULL);
    drop(&s);
    CHECK_OK(okv_kv_begin_step(kv, p, 1, &err), &err);   /* fits in 8: fine */
    okv_kv_commit_step(kv);
    kv->max_pool_bytes = 0;   /* lift the limit: growth proceeds, contents kept */
    take(&s, kv);
    int32_t q[] = { 8, 9 };
    CHECK_OK(okv_kv_begin_step(kv, q, 2, &err), &err);
    CHECK(kv->caches[0].slots_alloc == 16 && kv->caches[2].slots_alloc == 9);
    size_t n = 8 * row;
    CHECK(memcmp(kv->caches[0].k, s.bytes[0], n) == 0 && memcmp(kv->caches[0].v, s.bytes[0] + n, n) == 0);
    CHECK(memcmp(kv->caches[1].k, s.bytes[1], n) == 0);
    okv_kv_commit_step(kv);
    drop(&s);
    okv_kv_free(kv);
    /* a limit below the initial pools fails at create */
    o.max_pool_bytes = 100;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_NOMEM && kv == NULL);
    okv_layout_free(&l);
}

/* Doubling from the initial capacity, capped at a capacity, keeping contents. */
static void check_growth(okv_dtype dt, int32_t capacity, int32_t initial, const int32_t *want, int n_want) {
    int w[2] = { 0, 4 };
    okv_layout l;
    make_layout(&l, 2, w, 3, 5, 4, 5000);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = dt;
    o.max_capacity = capacity;
    o.initial_capacity = initial;
    okv_error err;
    okv_kv *kv = kv_create_ok(&l, &o);
    if (!kv) return;
    size_t es = dt == OKV_F32 ? 4 : 2;
    CHECK(okv_dtype_size(dt) == es);
    int seen = 0;
    bool order_ok = kv->caches[0].slots_alloc == want[0];
    int32_t last = kv->caches[0].slots_alloc;
    seen = 1;
    float *vals = malloc(15 * sizeof(float));
    while (kv->seq.length < capacity) {
        int32_t pos = kv->seq.length;
        CHECK_OK(okv_kv_begin_step(kv, &pos, 1, &err), &err);
        /* K row: value(pos, e) exactly representable in bf16 (8 significant bits) */
        for (int e = 0; e < 15; e++) vals[e] = (float)((pos % 64) * 2 + e) * 0.25f;
        okv_cache *ca = &kv->caches[0];
        okv_convert((uint8_t *)ca->k + (size_t)pos * 15 * es, dt, vals, OKV_F32, 15);
        okv_convert((uint8_t *)ca->v + (size_t)pos * 15 * es, dt, vals, OKV_F32, 15);
        okv_kv_commit_step(kv);
        if (ca->slots_alloc != last) {
            order_ok &= seen < n_want && ca->slots_alloc == want[seen];
            seen++;
            last = ca->slots_alloc;
            CHECK(okv_kv_bytes(kv) == 2 * 15 * es * ((size_t)last + 7));   /* ring: 4 + 4 - 1 slots */
        }
    }
    CHECKF(order_ok && seen == n_want, "%s capacity %d initial %d: growth sequence wrong (%d steps seen)",
           okv_dtype_name(dt), capacity, initial, seen);
    bool content_ok = true;
    float back[15];
    for (int32_t pos = 0; pos < capacity && content_ok; pos++) {
        okv_convert(back, OKV_F32, (uint8_t *)kv->caches[0].k + (size_t)pos * 15 * es, dt, 15);
        for (int e = 0; e < 15; e++) content_ok &= back[e] == (float)((pos % 64) * 2 + e) * 0.25f;
        okv_convert(back, OKV_F32, (uint8_t *)kv->caches[0].v + (size_t)pos * 15 * es, dt, 15);
        for (int e = 0; e < 15; e++) content_ok &= back[e] == (float)((pos % 64) * 2 + e) * 0.25f;
    }
    CHECKF(content_ok, "%s capacity %d: contents lost across growth", okv_dtype_name(dt), capacity);
    CHECK(okv_kv_bytes(kv) == okv_kv_bytes_full(kv));
    free(vals);
    okv_kv_free(kv);
    okv_layout_free(&l);
}

static void test_growth(void) {
    int32_t a[] = { 16, 32, 64, 128, 256, 512, 1000 };
    int32_t b[] = { 256, 512, 1024 };
    int32_t c[] = { 100 };
    int32_t d[] = { 3, 6, 12, 24, 48, 96, 192, 300 };
    okv_dtype dts[] = { OKV_F32, OKV_F16, OKV_BF16 };
    for (int i = 0; i < 3; i++) {
        check_growth(dts[i], 1000, 16, a, 7);
        check_growth(dts[i], 1024, 0, b, 3);   /* default initial: 256 */
        check_growth(dts[i], 100, 0, c, 1);    /* default initial: min(256, capacity) */
        check_growth(dts[i], 300, 3, d, 8);
    }
}

/* One big step may need several doublings at once. */
static void test_growth_in_one_step(void) {
    okv_layout l;
    make_layout(&l, 1, NULL, 1, 2, 64, 1000);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.initial_capacity = 4;
    okv_error err;
    okv_kv *kv = kv_create_ok(&l, &o);
    CHECK_OK(step(kv, 3, &err), &err);
    CHECK(kv->caches[0].slots_alloc == 4);
    CHECK_OK(step(kv, 40, &err), &err);   /* needs 43 -> 4*2*2*2*2 = 64 */
    CHECK(kv->caches[0].slots_alloc == 64);
    okv_kv_free(kv);
    okv_layout_free(&l);
}

static void test_rewind_messages(void) {
    /* W=8, max_write=2, S=9: after 20 tokens the ring holds 11..19. */
    int w[2] = { 0, 8 };
    okv_layout l;
    make_layout(&l, 2, w, 1, 4, 2, 64);
    okv_kv *kv;
    okv_error err;
    CHECK_OK(okv_kv_create(&l, NULL, &kv, &err), &err);
    for (int i = 0; i < 10; i++) CHECK_OK(step(kv, 2, &err), &err);
    CHECK(kv->seq.length == 20 && kv->caches[1].oldest == 11);
    CHECK(okv_kv_rewind(kv, 13, &err) == OKV_ERR_INVALID && kv->seq.length == 20);   /* L - W + 1 */
    CHECK(strstr(err.message, "cache 1") && strstr(err.message, "window 8") && strstr(err.message, "target is 18"));
    CHECK(okv_kv_rewind(kv, 12, &err) == OKV_ERR_INVALID);   /* L - W */
    CHECK(okv_kv_rewind(kv, 17, &err) == OKV_ERR_INVALID);
    CHECK_OK(okv_kv_rewind(kv, 18, &err), &err);
    CHECK(kv->seq.length == 18);
    /* The ring still holds only 11..17: a second rewind to 17 needs 10, gone.
     * (Judging by the new length alone, 17 - 7 = 10 >= 18 - 9 = 9, would accept.) */
    CHECK(can_rewind_by_length(&kv->caches[1].policy, 18, 17));
    CHECK(okv_kv_rewind(kv, 17, &err) == OKV_ERR_INVALID && kv->seq.length == 18);
    CHECK_OK(okv_kv_rewind(kv, 0, &err), &err);   /* empty history needs nothing */
    CHECK(kv->seq.length == 0 && kv->caches[1].oldest == 0);
    for (int i = 0; i < 3; i++) CHECK_OK(step(kv, 2, &err), &err);
    CHECK_OK(okv_kv_rewind(kv, 1, &err), &err);   /* L=6 <= S: anything goes */
    okv_kv_free(kv);
    okv_layout_free(&l);
}

int main(void) {
    test_refused_steps_change_nothing();
    test_failed_growth_changes_nothing();
    test_growth();
    test_growth_in_one_step();
    test_rewind_messages();
    return okv_test_finish();
}
