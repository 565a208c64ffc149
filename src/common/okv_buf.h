/* okv_buf.h — the one growable byte buffer every layer builds strings in,
 * and okv_grow, the checked "double the capacity" step for arrays of structs.
 *
 * Shaped like SQLite's StrAccum: appends never report an error one by one;
 * a failed allocation (or a size that would overflow) sets a sticky `oom`
 * flag, every later append is a no-op, and the caller checks once at the
 * end. The contents are always NUL-terminated (data[len] == 0) once anything
 * was written, so data doubles as a C string; embedded NUL bytes are kept.
 *
 * Memory comes from realloc unless the buffer is given an allocator (the
 * chat layer's arena, a test's failing one) or fixed caller storage, which
 * never grows and truncates instead (oom then says "truncated"). */
#ifndef OKV_BUF_H
#define OKV_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Resizes p (old_cap bytes) to new_cap bytes and returns it, or NULL on
 * failure (p untouched). new_cap == 0 releases p. */
typedef void *(*okv_buf_realloc_fn)(void *ctx, void *p, size_t old_cap, size_t new_cap);

typedef struct okv_buf {
    char *data;   /* NULL until the first write */
    size_t len;   /* bytes held, not counting the terminating NUL */
    size_t cap;   /* bytes allocated (> len once data is set) */
    bool oom;     /* sticky: an append could not be held whole */
    bool fixed;   /* data is caller storage of cap bytes: never grown or freed */
    okv_buf_realloc_fn realloc_fn; /* NULL: the C library's realloc/free */
    void *ctx;    /* passed to realloc_fn */
} okv_buf;

/* `okv_buf b = {0};` is an empty heap buffer. These two set up the others. */
void okv_buf_init_alloc(okv_buf *b, okv_buf_realloc_fn fn, void *ctx);
/* Writes go into mem[0..cap), truncated (oom set) when they do not fit;
 * mem is NUL-terminated from the start. cap must be > 0. */
void okv_buf_init_fixed(okv_buf *b, char *mem, size_t cap);

/* Makes room for extra more bytes (plus the NUL); false (and oom) if not. */
bool okv_buf_reserve(okv_buf *b, size_t extra);
void okv_buf_put(okv_buf *b, const void *p, size_t n);
void okv_buf_puts(okv_buf *b, const char *s);
void okv_buf_putc(okv_buf *b, char c);
void okv_buf_printf(okv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void okv_buf_vprintf(okv_buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* The contents as a C string ("" while empty). */
const char *okv_buf_str(const okv_buf *b);
/* Empties the buffer and clears oom; keeps the memory for reuse. */
void okv_buf_reset(okv_buf *b);
/* Shortens the contents to len bytes (no-op if already shorter). */
void okv_buf_truncate(okv_buf *b, size_t len);
/* Hands the heap string to the caller (free() it) and leaves b empty.
 * Returns NULL, freeing the contents, if oom is set; an empty buffer gives
 * "" (never NULL on success). Only for realloc-backed buffers. */
char *okv_buf_detach(okv_buf *b, size_t *len);
/* Releases the memory (not fixed storage) and leaves b empty. */
void okv_buf_free(okv_buf *b);

/* Grows the array p of *cap elements of elem bytes so that it holds at
 * least need elements: the capacity doubles (from 8) until it does, every
 * size checked against overflow. Returns the (maybe moved) array and sets
 * *cap, or returns NULL leaving p valid and *cap untouched, so the caller
 * still owns p:  `T *v = okv_grow(a->v, &a->cap, a->n + 1, sizeof *v);
 * if (!v) fail; a->v = v;`. (It returns the pointer instead of taking a
 * void ** so no T * is ever written through a void * lvalue.) */
void *okv_grow(void *p, size_t *cap, size_t need, size_t elem);

#endif
