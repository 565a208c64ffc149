/* test_kv_options.c — run-time choices when building a kv set: window
 * overrides (repeating over the caches, 0 = flat, negative = error), the
 * declared geometry staying untouched, capacity/initial/dtype validation,
 * and the one-line description. Expected byte counts are computed by hand
 * in the comments. */
#include "okv_test.h"
#include "cache_test_util.h"

static void test_override_all_flat(void) {
    okv_layout l;
    make_gemma3_1b(&l, 32768);
    okv_kv_options o;
    okv_kv_options_default(&o);
    int32_t ov[] = { 0 };
    o.windows_override = ov;
    o.n_windows_override = 1;
    o.max_capacity = 4096;
    o.k_dtype = o.v_dtype = OKV_BF16;
    okv_error err;
    okv_kv *kv = kv_create_ok(&l, &o);
    if (!kv) return;
    bool all_flat = true;
    for (int c = 0; c < 26; c++)
        all_flat &= kv->caches[c].policy.kind == OKV_POLICY_FLAT && kv->caches[c].slots_alloc == 256 &&
                    kv->caches[c].policy.slots == 4096;
    CHECK(all_flat);
    CHECK(kv->layout.windows[0] == 512 && kv->layout.windows[5] == 0);   /* declared layout kept */
    int32_t pos = 0;
    CHECK_OK(okv_kv_begin_step(kv, &pos, 1, &err), &err);
    CHECK(kv->plans[0].window == 0 && kv->plans[0].read_base == 0);
    okv_kv_commit_step(kv);
    /* 26 caches x 2 pools x 256 slots x 256 dims x 2 bytes = 6.5 MiB */
    char buf[256];
    okv_kv_describe(kv, buf, sizeof buf);
    CHECKF(strcmp(buf, "26 caches: 26 flat | capacity 4096 | kv bf16 | 6.5 MiB") == 0, "got \"%s\"", buf);
    /* full: 26 x 2 x 4096 x 512 bytes = 104 MiB */
    CHECK(okv_kv_bytes_full(kv) == (size_t)104 << 20);
    okv_kv_free(kv);
    okv_layout_free(&l);
}

static void test_gemma_describe(void) {
    okv_layout l;
    make_gemma3_1b(&l, 32768);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.max_capacity = 4096;
    o.k_dtype = o.v_dtype = OKV_BF16;
    okv_kv *kv = kv_create_ok(&l, &o);
    if (!kv) return;
    CHECK(kv->caches[0].policy.kind == OKV_POLICY_RING && kv->caches[0].slots_alloc == 1023);
    CHECK(kv->caches[5].policy.kind == OKV_POLICY_FLAT && kv->caches[5].slots_alloc == 256);
    /* flat: 4 x 2 x 256 x 512 B = 1 MiB; rings: 22 x 2 x 1023 x 512 B = 21.98 MiB; 22.98 */
    char buf[256];
    okv_kv_describe(kv, buf, sizeof buf);
    CHECKF(strcmp(buf, "26 caches: 4 flat + 22 ring(window 512) | capacity 4096 | kv bf16 | 23.0 MiB") == 0,
           "got \"%s\"", buf);
    /* full: flat 4 x 2 x 4096 x 512 B = 16 MiB, + 23046144 B of rings */
    CHECK(okv_kv_bytes_full(kv) == ((size_t)16 << 20) + 23046144);
    char tiny[12];
    okv_kv_describe(kv, tiny, sizeof tiny);   /* truncates, stays terminated */
    CHECK(strcmp(tiny, "26 caches: ") == 0);
    okv_kv_free(kv);
    okv_layout_free(&l);
}

static void test_override_alternating(void) {
    int w[6] = { 0, 0, 0, 0, 0, 0 };
    okv_layout l;
    make_layout(&l, 6, w, 4, 32, 128, 8192);
    l.kv_heads[3] = 2;
    okv_kv_options o;
    okv_kv_options_default(&o);
    int32_t ov[] = { 512, 256 };
    o.windows_override = ov;
    o.n_windows_override = 2;
    okv_error err;
    okv_kv *kv = kv_create_ok(&l, &o);
    if (!kv) return;
    bool ok = true;
    for (int c = 0; c < 6; c++) {
        int W = c % 2 ? 256 : 512;
        ok &= kv->caches[c].policy.kind == OKV_POLICY_RING && kv->caches[c].policy.window == W &&
              kv->caches[c].slots_alloc == W + 127 && kv->caches[c].head_dim == 32 &&
              kv->caches[c].kv_heads == (c == 3 ? 2 : 4);
    }
    CHECK(ok);
    CHECK(kv->layout.windows[1] == 0);
    char buf[256];
    okv_kv_describe(kv, buf, sizeof buf);
    /* a slot of one pool: 4 heads x 32 dims x 4 B = 512 B, so 1024 B for K+V
     * (cache 3, 2 heads: 512 B). Slots 639+383+639+383+639+383 = 3066:
     * 3066 x 1024 - 383 x 512 = 2943488 B = 2.8 MiB */
    CHECKF(strcmp(buf, "6 caches: 3 ring(window 512) + 3 ring(window 256) | capacity 8192 | kv f32 | 2.8 MiB") == 0,
           "got \"%s\"", buf);
    CHECK(okv_kv_bytes(kv) == 2943488);
    okv_kv_free(kv);

    int32_t ov3[] = { 512, 256, 0 };
    o.windows_override = ov3;
    o.n_windows_override = 3;
    CHECK_OK(okv_kv_create(&l, &o, &kv, &err), &err);
    if (kv) {
        okv_kv_describe(kv, buf, sizeof buf);
        CHECKF(strncmp(buf, "6 caches: 2 flat + 2 ring(window 512) + 2 ring(window 256) | capacity 8192 |", 75) == 0,
               "got \"%s\"", buf);
        CHECK(kv->caches[2].policy.kind == OKV_POLICY_FLAT && kv->caches[5].policy.kind == OKV_POLICY_FLAT);
        okv_kv_free(kv);
    }
    okv_layout_free(&l);
}

static void test_option_errors(void) {
    okv_layout l;
    make_gemma3_1b(&l, 4096);
    okv_kv_options o;
    okv_kv *kv = (okv_kv *)&l;   /* must be reset to NULL on error */
    okv_error err;
    okv_kv_options_default(&o);
    int32_t neg[] = { 512, -1 };
    o.windows_override = neg;
    o.n_windows_override = 2;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_INVALID && kv == NULL);
    CHECK(strstr(err.message, "windows_override[1] = -1") != NULL);
    o.windows_override = NULL;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_INVALID);
    okv_kv_options_default(&o);
    o.max_capacity = 4097;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_INVALID && strstr(err.message, "max_ctx_len 4096"));
    o.max_capacity = -5;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_INVALID);
    okv_kv_options_default(&o);
    o.initial_capacity = -1;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_INVALID);
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = (okv_dtype)7;
    CHECK(okv_kv_create(&l, &o, &kv, &err) == OKV_ERR_INVALID && strstr(err.message, "dtype"));
    okv_kv_options_default(&o);
    o.initial_capacity = 100000;   /* clamped to the capacity */
    o.max_capacity = 300;
    CHECK_OK(okv_kv_create(&l, &o, &kv, &err), &err);
    if (kv) {
        CHECK(kv->caches[5].slots_alloc == 300 && kv->seq.capacity == 300 && kv->seq.max_write == 512);
        okv_kv_free(kv);
    }
    l.layer_to_cache[5] = 4;   /* cache 5 unused: the layout is refused at create */
    CHECK(okv_kv_create(&l, NULL, &kv, &err) == OKV_ERR_INVALID && strstr(err.message, "cache 5"));
    okv_layout_free(&l);
}

/* A ring never holds more slots than the capacity has positions (issue 8: a
 * window of 100000 under a capacity of 64 allocated 244 MiB). */
static void test_ring_capped_by_capacity(void) {
    okv_layout l;
    int w[2] = { 100000, 0 };
    make_layout(&l, 2, w, 4, 64, 16, 1 << 20);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.max_capacity = 64;
    okv_error err;
    okv_kv *kv = kv_create_ok(&l, &o);
    if (!kv) { okv_layout_free(&l); return; }
    CHECK(kv->caches[0].policy.kind == OKV_POLICY_RING && kv->caches[0].policy.slots == 64 &&
          kv->caches[0].policy.window == 100000);
    /* ring: 2 pools x 64 slots x (4 x 64) x 4 B = 128 KiB; flat: initial min(256, 64) = 64 slots, the same */
    CHECKF(okv_kv_bytes(kv) == (size_t)256 << 10, "%zu bytes", okv_kv_bytes(kv));
    CHECK(okv_kv_bytes_full(kv) == (size_t)256 << 10);
    /* fill to capacity in chunks: every key stays visible (no wrap), rewinds anywhere are accepted */
    for (int32_t pos = 0; pos < 64; pos += 16) {
        int32_t p[16];
        for (int t = 0; t < 16; t++) p[t] = pos + t;
        CHECK_OK(okv_kv_begin_step(kv, p, 16, &err), &err);
        CHECK(kv->plans[0].n_write == 1 && kv->plans[0].write[0].slot == pos && kv->plans[0].read_base == 0 &&
              kv->plans[0].n_read == 1 && kv->plans[0].read[0].n == pos + 16);
        okv_kv_commit_step(kv);
    }
    CHECK(kv->caches[0].oldest == 0);
    CHECK_OK(okv_kv_rewind(kv, 1, &err), &err);
    /* a window override larger than the capacity is capped the same way */
    okv_kv_free(kv);
    int32_t big[] = { 1 << 30 };
    o.windows_override = big;
    o.n_windows_override = 1;
    CHECK_OK(okv_kv_create(&l, &o, &kv, &err), &err);
    if (kv) {
        CHECK(kv->caches[1].policy.kind == OKV_POLICY_RING && kv->caches[1].policy.slots == 64);
        CHECK(okv_kv_bytes(kv) == (size_t)256 << 10);
        okv_kv_free(kv);
    }
    okv_layout_free(&l);
}

int main(void) {
    test_ring_capped_by_capacity();
    test_override_all_flat();
    test_gemma_describe();
    test_override_alternating();
    test_option_errors();
    return okv_test_finish();
}
