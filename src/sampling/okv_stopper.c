/* okv_stopper.c — cuts streamed text at the first stop string.
 *
 * The stopper keeps one buffer, `held`: the tail of the text that has not
 * been released yet. After each piece is appended:
 *   - if some stop string occurs in held, everything before the earliest
 *     occurrence is released and the stopper is done;
 *   - otherwise the longest suffix of held that is a proper prefix of some
 *     stop string is kept back (it may still complete), plus any incomplete
 *     UTF-8 character at the cut, and the rest is released.
 * Searching only `held` is enough: a stop string starting in text that was
 * already released would have made that text a stop-string prefix, and the
 * longest such prefix is always held back.
 *
 * Released text is copied into `out`, which the caller reads until its next
 * call; held text is small (shorter than the longest stop string plus one
 * piece), so the buffers stay small. */
#include <stdlib.h>

#include "offkv_sample.h"
#include "okv_common.h"

struct okv_stopper {
    char **stops;
    size_t *stop_len;
    int n_stops;
    okv_buf held;        /* text not released yet */
    okv_buf out;         /* what the last push/flush released */
    bool stopped;
    int which;           /* index of the stop string hit, -1 before */
};

okv_status okv_stopper_create(const char *const *stops, int n, okv_stopper **out, okv_error *err) {
    *out = NULL;
    if (n < 0) return okv_fail(err, OKV_ERR_INVALID, "stopper: negative stop string count %d", n);
    okv_stopper *st = calloc(1, sizeof *st);
    if (!st) return okv_fail(err, OKV_ERR_NOMEM, "stopper: out of memory");
    st->which = -1;
    if (n > 0) {
        st->stops = calloc((size_t)n, sizeof *st->stops);
        st->stop_len = calloc((size_t)n, sizeof *st->stop_len);
        if (!st->stops || !st->stop_len) {
            okv_stopper_free(st);
            return okv_fail(err, OKV_ERR_NOMEM, "stopper: out of memory");
        }
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) {
            okv_stopper_free(st);
            return okv_fail(err, OKV_ERR_INVALID, "stopper: stop string %d is empty", i);
        }
        st->stops[i] = okv_strdup(stops[i]);
        st->n_stops = i + 1;
        if (!st->stops[i]) {
            okv_stopper_free(st);
            return okv_fail(err, OKV_ERR_NOMEM, "stopper: out of memory");
        }
        st->stop_len[i] = strlen(stops[i]);
    }
    *out = st;
    return OKV_OK;
}

void okv_stopper_free(okv_stopper *st) {
    if (!st) return;
    for (int i = 0; i < st->n_stops; i++) free(st->stops[i]);
    free(st->stops);
    free(st->stop_len);
    okv_buf_free(&st->held);
    okv_buf_free(&st->out);
    free(st);
}

void okv_stopper_reset(okv_stopper *st) {
    okv_buf_reset(&st->held);
    st->stopped = false;
    st->which = -1;
}

int okv_stopper_which(const okv_stopper *st) {
    return st->which;
}

/* Length of the UTF-8 sequence a lead byte announces (1 for ASCII and for
 * bytes that cannot start a sequence, so bad input still moves forward). */
static size_t utf8_seq_len(unsigned char b) {
    if (b >= 0xf0 && b <= 0xf7) return 4;
    if (b >= 0xe0) return b <= 0xef ? 3 : 1;
    if (b >= 0xc0) return 2;
    return 1;
}

/* The largest cut <= len that does not end text[0..cut) inside a UTF-8
 * character: if the last lead byte before len starts a sequence that runs
 * past len, cut before it. */
static size_t utf8_safe_cut(const char *text, size_t len) {
    size_t lo = len >= 4 ? len - 4 : 0;
    for (size_t j = len; j > lo; j--) {
        unsigned char b = (unsigned char)text[j - 1];
        if ((b & 0xc0) == 0x80) continue;   /* continuation byte */
        return (j - 1) + utf8_seq_len(b) > len ? j - 1 : len;
    }
    return len;   /* no lead byte nearby: not UTF-8, cut where asked */
}

/* Earliest start of any stop string in text; *which gets its index.
 * Returns len when there is none. */
static size_t find_first_stop(const okv_stopper *st, const char *text, size_t len, int *which) {
    size_t best = len;
    for (int i = 0; i < st->n_stops && len; i++) {
        const char *hit = memmem(text, len, st->stops[i], st->stop_len[i]);
        if (hit && (size_t)(hit - text) < best) {
            best = (size_t)(hit - text);
            *which = i;
        }
    }
    return best;
}

/* Length of the longest suffix of text that is a proper prefix of a stop. */
static size_t longest_stop_prefix_suffix(const okv_stopper *st, const char *text, size_t len) {
    size_t best = 0;
    for (int i = 0; i < st->n_stops; i++) {
        size_t max = st->stop_len[i] - 1;
        if (max > len) max = len;
        for (size_t k = max; k > best; k--) {
            if (memcmp(text + len - k, st->stops[i], k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

/* Moves held[0..n) into out and keeps the rest held. */
static bool release(okv_stopper *st, size_t n, const char **emit, size_t *emit_len) {
    okv_buf *h = &st->held;
    okv_buf_reset(&st->out);
    okv_buf_put(&st->out, h->data, n);
    if (st->out.oom) return false;
    if (h->len > n) memmove(h->data, h->data + n, h->len - n);
    okv_buf_truncate(h, h->len - n);
    *emit = st->out.data;
    *emit_len = n;
    return true;
}

static void emit_nothing(okv_stopper *st, const char **emit, size_t *emit_len) {
    okv_buf_reset(&st->out);
    *emit = okv_buf_str(&st->out);
    *emit_len = 0;
}

okv_status okv_stopper_push(okv_stopper *st, const char *piece, size_t len,
                            const char **emit, size_t *emit_len, bool *stopped,
                            okv_error *err) {
    *stopped = st->stopped;
    if (st->stopped) {
        emit_nothing(st, emit, emit_len);
        return OKV_OK;
    }
    okv_buf_put(&st->held, piece, len);
    if (st->held.oom) return okv_fail(err, OKV_ERR_NOMEM, "stopper: out of memory");

    int which = -1;
    size_t at = find_first_stop(st, st->held.data, st->held.len, &which);
    if (which >= 0) {
        if (!release(st, at, emit, emit_len))
            return okv_fail(err, OKV_ERR_NOMEM, "stopper: out of memory");
        okv_buf_reset(&st->held);   /* the stop string and what follows: dropped */
        st->stopped = true;
        st->which = which;
        *stopped = true;
        return OKV_OK;
    }
    size_t keep = longest_stop_prefix_suffix(st, st->held.data, st->held.len);
    size_t cut = utf8_safe_cut(st->held.data, st->held.len - keep);
    if (!release(st, cut, emit, emit_len))
        return okv_fail(err, OKV_ERR_NOMEM, "stopper: out of memory");
    return OKV_OK;
}

void okv_stopper_flush(okv_stopper *st, const char **emit, size_t *emit_len) {
    if (st->stopped || st->held.len == 0 || !release(st, st->held.len, emit, emit_len))
        emit_nothing(st, emit, emit_len);
}
