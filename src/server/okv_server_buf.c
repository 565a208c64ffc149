/* okv_server_buf.c — the server's own growable byte buffer (srv_buf) and
 * array growth (srv_grow). The server is a layer above generate that sees
 * only include/ (its include wall, src/server/CMakeLists.txt), so it does
 * not borrow src/common's okv_buf; it needs only appends, a sticky
 * out-of-memory flag checked once at the end, and handing the string over.
 * Sizes are checked against overflow before every allocation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "okv_server.h"

/* Capacity doubled from 64 until it holds need bytes; false on overflow or no memory. */
static bool buf_fit(srv_buf *b, size_t need) {
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return false;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) return false;
    b->data = p;
    b->cap = cap;
    return true;
}

void srv_buf_put(srv_buf *b, const void *p, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - b->len - 1 || !buf_fit(b, b->len + n + 1)) {
        b->oom = true;
        return;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void srv_buf_puts(srv_buf *b, const char *s) { srv_buf_put(b, s, strlen(s)); }

char *srv_buf_detach(srv_buf *b) {
    if (b->oom) {
        srv_buf_free(b);
        return NULL;
    }
    char *s = b->data ? b->data : strdup("");
    memset(b, 0, sizeof *b);
    return s;
}

void srv_buf_free(srv_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void *srv_grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (p && need <= *cap) return p;   /* never NULL on success, also for need == 0 */
    size_t n = *cap ? *cap : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2) return NULL;
        n *= 2;
    }
    if (!elem || n > SIZE_MAX / elem) return NULL;   /* n >= 8: never a zero-byte realloc */
    void *q = realloc(p, n * elem);
    if (!q) return NULL;
    *cap = n;
    return q;
}
