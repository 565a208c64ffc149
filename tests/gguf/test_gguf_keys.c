/* test_gguf_keys — the GGUF reader on files with very many metadata keys
 * (issue 43): 100k tiny keys are all read and found, a repeated key is
 * refused however far apart the two copies are, and a header that claims
 * more keys or tensors than the bytes after it can hold is refused naming
 * the field. The reader's speed is what ctest's TIMEOUT on this test checks
 * (the former pairwise duplicate check took minutes on 100k keys); nothing
 * here measures time. */
#include <stdio.h>

#include "gguf_build.h"
#include "okv_common.h"
#include "okv_gguf.h"
#include "okv_test.h"

#define N_KEYS 100000

/* n uint8 keys "k.<i>" = i % 251; key `dup_of` is written again as the last
 * key when dup_of >= 0 (n + 1 keys then). */
static gb many_keys(int n, int dup_of) {
    gb b = {0};
    gb_header(&b, 3, 0, (uint64_t)n + (dup_of >= 0));
    char key[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "k.%d", i);
        gb_key(&b, key, 0);
        gb_u8(&b, (uint8_t)(i % 251));
    }
    if (dup_of >= 0) {
        snprintf(key, sizeof key, "k.%d", dup_of);
        gb_key(&b, key, 0);
        gb_u8(&b, 7);
    }
    return b;
}

static void test_many_keys(void) {
    gb b = many_keys(N_KEYS, -1);
    okv_error err = {0};
    okv_gguf *g = NULL;
    CHECK_OK(okv_gguf_open_memory(b.p, b.len, "many.gguf", &g, &err), &err);
    if (g) {
        CHECK(okv_gguf_kv_count(g) == N_KEYS);
        int found = 0;
        char key[32];
        for (int i = 0; i < N_KEYS; i++) {
            snprintf(key, sizeof key, "k.%d", i);
            int64_t v = -1;
            found += okv_gguf_get_int(g, key, &v, &err) == OKV_OK && v == i % 251 &&
                     okv_gguf_find(g, key) == okv_gguf_kv_at(g, i);
        }
        CHECKF(found == N_KEYS, "%d of %d keys found with their values", found, N_KEYS);
        CHECK(!okv_gguf_find(g, "k.100000") && !okv_gguf_find(g, "k.") && !okv_gguf_find(g, "k.-1"));
    }
    okv_gguf_close(g);
    free(b.p);
}

static void test_duplicate_far_apart(void) {
    gb b = many_keys(N_KEYS, 3);
    okv_error err = {0};
    okv_gguf *g = NULL;
    okv_status st = okv_gguf_open_memory(b.p, b.len, "dup.gguf", &g, &err);
    CHECK(st == OKV_ERR_FORMAT && !g);
    CHECKF(strstr(err.message, "key 'k.3' appears twice (keys 3 and 100000)"), "%s", err.message);
    okv_gguf_close(g);
    free(b.p);
}

/* Overwrites the header's 64-bit little-endian field at byte `at`. */
static void set_header_u64(gb *b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) b->p[at + i] = (uint8_t)(v >> (8 * i));
}

/* A count the bytes could hold (at the smallest encoding) is read key by
 * key and fails at the first missing one; one more is refused as a count,
 * naming the header field, before any key is read. */
static void test_count_bounds(void) {
    gb b = many_keys(3, -1); /* keys "k.0".."k.2": 8 + 3 + 4 + 1 = 16 bytes each */
    for (int i = 0; i < 20; i++) gb_u8(&b, 0); /* room for one more at 14 bytes a key */
    const size_t after_header = b.len - 24;
    okv_error err = {0};
    okv_gguf *g = NULL;
    uint64_t fits = after_header / 14; /* what the bytes could hold at 14 bytes a key */
    set_header_u64(&b, 16, fits);
    okv_status st = okv_gguf_open_memory(b.p, b.len, "fits.gguf", &g, &err);
    CHECKF(fits == 4 && st == OKV_ERR_FORMAT && strstr(err.message, "key 3") && !strstr(err.message, "_count"),
           "claim %llu: %s", (unsigned long long)fits, err.message);
    uint64_t too_many = fits + 1;
    set_header_u64(&b, 16, too_many);
    st = okv_gguf_open_memory(b.p, b.len, "many.gguf", &g, &err);
    CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, "metadata_kv_count") &&
               strstr(err.message, "more than the file can hold"),
           "claim %llu: %s", (unsigned long long)too_many, err.message);
    CHECK(!g);
    /* the same for tensor infos (33 bytes at least each) */
    set_header_u64(&b, 16, 3);
    uint64_t tensors = after_header / 33 + 1;
    set_header_u64(&b, 8, tensors);
    st = okv_gguf_open_memory(b.p, b.len, "tens.gguf", &g, &err);
    CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, "tensor_count") && strstr(err.message, "more than the file"),
           "%s", err.message);
    CHECK(!g);
    free(b.p);
}

int main(void) {
    test_many_keys();
    test_duplicate_far_apart();
    test_count_bounds();
    return okv_test_finish();
}
