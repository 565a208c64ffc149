/* okv_buf.c — the growable byte buffer and the checked array growth step
 * (see okv_buf.h for the contract: sticky oom, always NUL-terminated).
 *
 * Every size is computed with overflow checks, so a length taken from an
 * untrusted file can at worst set oom, never wrap into a short allocation. */
#include "okv_buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OKV_BUF_FIRST_CAP = 64, OKV_GROW_FIRST_CAP = 8 };

void okv_buf_init_alloc(okv_buf *b, okv_buf_realloc_fn fn, void *ctx) {
    memset(b, 0, sizeof *b);
    b->realloc_fn = fn;
    b->ctx = ctx;
}

void okv_buf_init_fixed(okv_buf *b, char *mem, size_t cap) {
    memset(b, 0, sizeof *b);
    b->data = mem;
    b->cap = cap;
    b->fixed = true;
    if (cap) mem[0] = 0;
    else b->oom = true;
}

/* The doubling sequence from `from` (or first) up to at least need; need
 * itself when doubling would overflow. */
static size_t doubled_capacity(size_t from, size_t first, size_t need) {
    size_t cap = from ? from : first;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return need;
        cap *= 2;
    }
    return cap;
}

bool okv_buf_reserve(okv_buf *b, size_t extra) {
    if (b->oom) return false;
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || __builtin_add_overflow(need, 1, &need)) {
        b->oom = true;
        return false;
    }
    if (b->data && need <= b->cap) return true;
    if (b->fixed) {
        b->oom = true;
        return false;
    }
    size_t cap = doubled_capacity(b->cap, OKV_BUF_FIRST_CAP, need);
    char *p = b->realloc_fn ? b->realloc_fn(b->ctx, b->data, b->cap, cap) : realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    if (!b->data) p[0] = 0;
    b->data = p;
    b->cap = cap;
    return true;
}

/* Fixed storage that ran out: keep the part of p[0..n) that fits. */
static void put_truncated(okv_buf *b, const void *p, size_t n) {
    size_t room = b->cap - 1 - b->len;
    size_t k = n < room ? n : room;
    memcpy(b->data + b->len, p, k);
    b->len += k;
    b->data[b->len] = 0;
}

void okv_buf_put(okv_buf *b, const void *p, size_t n) {
    if (b->oom) return;
    if (!okv_buf_reserve(b, n)) {
        if (b->fixed && b->cap) put_truncated(b, p, n);
        return;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void okv_buf_puts(okv_buf *b, const char *s) { okv_buf_put(b, s, strlen(s)); }

void okv_buf_putc(okv_buf *b, char c) { okv_buf_put(b, &c, 1); }

void okv_buf_vprintf(okv_buf *b, const char *fmt, va_list ap) {
    if (b->oom) return;
    size_t room = b->data ? b->cap - b->len : 0;
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap);
    if (n < 0) {
        b->oom = true; /* an encoding error: nothing sensible was written */
        if (b->data) b->data[b->len] = 0;
    } else if ((size_t)n < room) {
        b->len += (size_t)n;
    } else if (okv_buf_reserve(b, (size_t)n)) {
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, again);
        b->len += (size_t)n;
    } else if (b->fixed && room) {
        b->len = b->cap - 1; /* vsnprintf kept the prefix that fits */
    } else if (b->data) {
        b->data[b->len] = 0; /* drop the partial text the first try wrote */
    }
    va_end(again);
}

void okv_buf_printf(okv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    okv_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

const char *okv_buf_str(const okv_buf *b) { return b->data ? b->data : ""; }

void okv_buf_reset(okv_buf *b) {
    b->len = 0;
    b->oom = b->fixed && b->cap == 0;
    if (b->data) b->data[0] = 0;
}

void okv_buf_truncate(okv_buf *b, size_t len) {
    if (len >= b->len) return;
    b->len = len;
    b->data[len] = 0;
}

char *okv_buf_detach(okv_buf *b, size_t *len) {
    if (b->fixed || b->realloc_fn) return NULL;
    if (b->oom) {
        okv_buf_free(b);
        return NULL;
    }
    char *s = b->data ? b->data : calloc(1, 1);
    if (len) *len = s ? b->len : 0;
    memset(b, 0, sizeof *b);
    return s;
}

void okv_buf_free(okv_buf *b) {
    if (!b->fixed && b->data) {
        if (b->realloc_fn) b->realloc_fn(b->ctx, b->data, b->cap, 0);
        else free(b->data);
    }
    okv_buf_realloc_fn fn = b->realloc_fn;
    void *ctx = b->ctx;
    memset(b, 0, sizeof *b);
    b->realloc_fn = fn;
    b->ctx = ctx;
}

void *okv_grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (p && need <= *cap) return p;
    size_t n = doubled_capacity(*cap, OKV_GROW_FIRST_CAP, need), bytes;
    if (__builtin_mul_overflow(n, elem, &bytes)) return NULL;
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) return NULL;
    *cap = n;
    return q;
}
