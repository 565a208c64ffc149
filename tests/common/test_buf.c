/* Tests okv_buf (growth, sticky oom through an allocator that fails on
 * demand, printf, embedded NUL bytes, fixed storage, detach) and okv_grow. */
#include <stdint.h>

#include "okv_buf.h"
#include "okv_test.h"

/* An allocator that lets `allow` more allocations succeed, then fails. */
typedef struct failing_alloc {
    int allow, calls, frees;
} failing_alloc;

static void *failing_realloc(void *ctx, void *p, size_t old_cap, size_t new_cap) {
    failing_alloc *fa = ctx;
    (void)old_cap;
    if (new_cap == 0) {
        fa->frees++;
        free(p);
        return NULL;
    }
    fa->calls++;
    if (fa->allow <= 0) return NULL;
    fa->allow--;
    return realloc(p, new_cap);
}

static void test_growth(void) {
    okv_buf b = {0};
    CHECK(!strcmp(okv_buf_str(&b), ""));
    int bad = 0;
    for (int i = 0; i < 10000; i++) {
        okv_buf_putc(&b, (char)('a' + i % 26));
        if (b.len != (size_t)i + 1 || b.data[b.len] != 0 || b.cap <= b.len) bad++;
    }
    CHECKF(bad == 0, "%d appends broke len/NUL/cap", bad);
    for (size_t i = 0; i < b.len; i++)
        if (b.data[i] != (char)('a' + i % 26)) bad++;
    CHECK(bad == 0);
    CHECK(!b.oom);
    okv_buf_truncate(&b, 3);
    CHECK(b.len == 3 && !strcmp(b.data, "abc"));
    okv_buf_truncate(&b, 10); /* longer than held: no-op */
    CHECK(b.len == 3);
    size_t cap = b.cap;
    okv_buf_reset(&b);
    CHECK(b.len == 0 && !strcmp(okv_buf_str(&b), "") && b.cap == cap);
    okv_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
}

static void test_embedded_nul(void) {
    okv_buf b = {0};
    okv_buf_put(&b, "a\0b", 3);
    okv_buf_put(&b, "", 0);
    okv_buf_puts(&b, "cd");
    CHECK(b.len == 5 && !memcmp(b.data, "a\0bcd", 6));
    size_t n = 0;
    char *s = okv_buf_detach(&b, &n);
    CHECK(s && n == 5 && !memcmp(s, "a\0bcd", 6));
    CHECK(b.data == NULL && b.len == 0);
    free(s);
    s = okv_buf_detach(&b, &n); /* empty: "" rather than NULL */
    CHECK(s && s[0] == 0 && n == 0);
    free(s);
}

static void test_printf(void) {
    okv_buf b = {0};
    okv_buf_printf(&b, "%d-%s-%.2f", 42, "x", 1.5);
    CHECK(!strcmp(b.data, "42-x-1.50") && b.len == 9);
    /* longer than the first allocation: needs the second vsnprintf pass */
    okv_buf_printf(&b, "|%0200d|", 7);
    CHECK(b.len == 9 + 202 && b.data[9] == '|' && b.data[209] == '7' && b.data[210] == '|' && b.data[211] == 0);
    okv_buf_putc(&b, 0);
    okv_buf_printf(&b, "%s", "z");
    CHECK(b.len == 213 && b.data[211] == 0 && b.data[212] == 'z');
    okv_buf_free(&b);
}

static void test_oom_sticky(void) {
    failing_alloc fa = {.allow = 1};
    okv_buf b;
    okv_buf_init_alloc(&b, failing_realloc, &fa);
    okv_buf_puts(&b, "0123456789");
    CHECK(!b.oom && b.len == 10 && fa.calls == 1);
    char big[300];
    memset(big, 'x', sizeof big);
    okv_buf_put(&b, big, sizeof big); /* needs a second allocation, which fails */
    CHECK(b.oom && fa.calls == 2);
    CHECK(b.len == 10 && !strcmp(b.data, "0123456789")); /* contents intact */
    okv_buf_putc(&b, 'y');                  /* would fit, but oom is sticky */
    okv_buf_printf(&b, "%d", 5);
    CHECK(b.len == 10 && !strcmp(b.data, "0123456789") && fa.calls == 2);
    CHECK(!okv_buf_reserve(&b, 1));
    okv_buf_printf(&b, "%0500d", 1); /* printf that needs to grow under oom */
    CHECK(b.len == 10 && fa.calls == 2);
    okv_buf_reset(&b); /* starts anew and may write again */
    CHECK(!b.oom && b.len == 0);
    okv_buf_puts(&b, "ok");
    CHECK(!b.oom && !strcmp(b.data, "ok"));
    /* a failing printf growth leaves the old contents terminated */
    okv_buf_printf(&b, "%0300d", 3);
    CHECK(b.oom && b.len == 2 && !strcmp(b.data, "ok"));
    okv_buf_free(&b);
    CHECK(fa.frees == 1);
}

static void test_size_overflow(void) {
    failing_alloc fa = {.allow = 100};
    okv_buf b;
    okv_buf_init_alloc(&b, failing_realloc, &fa);
    okv_buf_puts(&b, "abc");
    int calls = fa.calls;
    CHECK(!okv_buf_reserve(&b, SIZE_MAX - 1)); /* len + extra + 1 wraps */
    CHECK(b.oom && fa.calls == calls && b.len == 3);
    okv_buf_free(&b);
}

static void test_fixed(void) {
    char mem[8];
    okv_buf b;
    okv_buf_init_fixed(&b, mem, sizeof mem);
    CHECK(mem[0] == 0);
    okv_buf_puts(&b, "abc");
    CHECK(!b.oom && !strcmp(mem, "abc"));
    okv_buf_printf(&b, "%s", "defghij"); /* truncated to the 7 chars that fit */
    CHECK(b.oom && b.len == 7 && !strcmp(mem, "abcdefg"));
    okv_buf_puts(&b, "z");
    CHECK(!strcmp(mem, "abcdefg"));
    okv_buf_reset(&b);
    okv_buf_puts(&b, "0123456789");
    CHECK(b.oom && !strcmp(mem, "0123456"));
    CHECK(okv_buf_detach(&b, NULL) == NULL); /* not heap memory */
    okv_buf_free(&b); /* must not free mem */
    CHECK(b.data == NULL);
}

static void test_grow(void) {
    size_t cap = 0;
    int32_t *v = NULL;
    for (size_t i = 0; i < 1000; i++) {
        int32_t *g = okv_grow(v, &cap, i + 1, sizeof *v);
        if (!g) break;
        v = g;
        v[i] = (int32_t)i;
    }
    CHECK(v && cap >= 1000 && cap < 2048);
    CHECK(v && v[999] == 999 && v[0] == 0);
    size_t before = cap;
    CHECK(okv_grow(v, &cap, 10, sizeof *v) == v && cap == before); /* already big enough */
    CHECK(okv_grow(v, &cap, SIZE_MAX / 2, 8) == NULL && cap == before); /* bytes overflow */
    CHECK(v[999] == 999); /* still owned and intact */
    free(v);
}

int main(void) {
    test_growth();
    test_embedded_nul();
    test_printf();
    test_oom_sticky();
    test_size_overflow();
    test_fixed();
    test_grow();
    return okv_test_finish();
}
