/* okv_think.c — the reasoning splitter: "<think>...</think>" in a reply is
 * returned as reasoning_content, not content (Qwen3-style models). Text
 * arrives in pieces, so a tag may be split across them; the splitter holds
 * back only a suffix that is a proper prefix of the tag it is looking for
 * (at most 7 bytes), which keeps both parts free of partial tags and adds
 * no delay to ordinary text. */
#include <stdlib.h>
#include <string.h>

#include "okv_server.h"

#define OPEN_TAG "<think>"
#define CLOSE_TAG "</think>"

void srv_think_init(srv_think *t, bool enabled, bool start_inside) {
    memset(t, 0, sizeof *t);
    t->enabled = enabled;
    t->inside = enabled && start_inside;
}

static void give(srv_think *t, const char *text, size_t len, srv_part_fn fn, void *ctx) {
    if (len) fn(ctx, t->inside ? SRV_REASONING : SRV_CONTENT, text, len);
}

/* Length of the longest suffix of text[0..len) that is a proper prefix of tag. */
static size_t partial_tag(const char *text, size_t len, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < len ? tl - 1 : len; k > 0; k--)
        if (!memcmp(text + len - k, tag, k)) return k;
    return 0;
}

/* Scans buf[0..len) for the current tag; releases text around it. */
static void scan(srv_think *t, const char *buf, size_t len, srv_part_fn fn, void *ctx) {
    while (len) {
        const char *tag = t->inside ? CLOSE_TAG : OPEN_TAG;
        size_t tl = strlen(tag);
        const char *hit = memmem(buf, len, tag, tl);
        if (hit) {
            give(t, buf, (size_t)(hit - buf), fn, ctx);
            t->inside = !t->inside;
            len -= (size_t)(hit - buf) + tl;
            buf = hit + tl;
            continue;
        }
        size_t keep = partial_tag(buf, len, tag);
        give(t, buf, len - keep, fn, ctx);
        memcpy(t->held, buf + len - keep, keep);
        t->n_held = keep;
        return;
    }
}

void srv_think_push(srv_think *t, const char *text, size_t len, srv_part_fn fn, void *ctx) {
    if (!t->enabled) { give(t, text, len, fn, ctx); return; }
    if (!t->n_held) { scan(t, text, len, fn, ctx); return; }
    /* held bytes (< 8) joined with the new piece, scanned as one */
    char small[256], *buf = t->n_held + len <= sizeof small ? small : malloc(t->n_held + len);
    if (!buf) { srv_think_flush(t, fn, ctx); give(t, text, len, fn, ctx); return; }
    size_t n = t->n_held;
    memcpy(buf, t->held, n);
    memcpy(buf + n, text, len);
    t->n_held = 0;
    scan(t, buf, n + len, fn, ctx);
    if (buf != small) free(buf);
}

void srv_think_flush(srv_think *t, srv_part_fn fn, void *ctx) {
    give(t, t->held, t->n_held, fn, ctx);
    t->n_held = 0;
}
