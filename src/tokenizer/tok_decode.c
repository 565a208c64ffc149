/* tok_decode.c — ids to text, and the streaming detokenizer.
 *
 * Decoding follows HF tokenizers: ids -> token strings (added tokens first),
 * then the decoder chain maps a list of strings to a list of strings (some
 * decoders collapse it into one), then the list is concatenated.
 *
 * Streaming keeps a small window of ids not yet turned into text. After each
 * push the window is decoded; if its text is final — no open <0xXX> byte run
 * (ByteFallback may still turn it into U+FFFDs) and no trailing U+FFFD (an
 * incomplete UTF-8 sequence in byte-level text) — it is emitted and the
 * window restarts empty. The only decoder state that crosses the restart is
 * "are we at the very start of the text", which Metaspace (drop the leading
 * replacement of the first token) and Strip after Fuse (cut leading chars of
 * the whole text) depend on; it is passed in as at_start.
 *
 * Two documented limits: a Strip decoder after Fuse with stop > 0 (cut at
 * the very end of the text) is applied only to what flush returns, and a
 * window still held back after STREAM_MAX_WINDOW ids (e.g. an endless run
 * of byte tokens) is emitted as it decodes then. Neither occurs with the
 * Llama-3, Qwen3 or Gemma tokenizers. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define STREAM_MAX_WINDOW 1024 /* held-back ids before we give up and emit */

typedef struct strlist {
    okv_buf text;
    size_t *off, *len;
    size_t n, cap;
    bool fused; /* one string that stands for the whole window */
    bool oom;
} strlist;

static void sl_add(strlist *l, const char *s, size_t n) {
    if (l->oom) return;
    size_t cap_off = l->cap, cap_len = l->cap; /* off and len grow together */
    size_t *o = okv_grow(l->off, &cap_off, l->n + 1, sizeof *o);
    if (!o) { l->oom = true; return; }
    l->off = o;
    size_t *m = okv_grow(l->len, &cap_len, l->n + 1, sizeof *m);
    if (!m) { l->oom = true; return; }
    l->len = m;
    l->cap = cap_off;
    l->off[l->n] = l->text.len;
    l->len[l->n++] = n;
    okv_buf_put(&l->text, s, n);
    if (l->text.oom) l->oom = true;
}

static const char *sl_str(const strlist *l, size_t i) { return l->text.data + l->off[i]; }

static void sl_clear(strlist *l) {
    l->n = 0;
    l->text.len = 0;
    l->fused = false;
}

static void sl_free(strlist *l) {
    okv_buf_free(&l->text);
    free(l->off);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xXX>" -> byte, as HF's ByteFallback (u8::from_str_radix, which also
 * takes a leading '+'); -1 if s is not a byte token. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    if (s[3] == '+' && lo >= 0) return lo;
    return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

/* Appends the code point at s[*i] and advances; returns it. */
static uint32_t next_cp(const char *s, size_t n, size_t *i) {
    uint32_t cp;
    *i += tok_utf8_next(s + *i, n - *i, &cp);
    return cp;
}

static okv_status apply_dec(const okv_tok *tok, const tok_dec *d, tok_scratch *sc, strlist *in, strlist *out,
                            bool at_start, bool at_end, size_t limit, okv_error *err);

static void dec_bytelevel(const okv_tok *tok, strlist *in, strlist *out, bool raw) {
    okv_buf bytes = {0}, text = {0};
    for (size_t t = 0; t < in->n; t++) {
        const char *s = sl_str(in, t);
        size_t n = in->len[t], mark = bytes.len;
        bool all = true;
        for (size_t i = 0; i < n && all;) {
            uint32_t cp = next_cp(s, n, &i);
            int b = cp < 256 + 68 ? tok->bytes.cp_to_byte[cp] : -1;
            if (b < 0) all = false;
            else okv_buf_putc(&bytes, (char)b);
        }
        if (!all) { /* a token outside the alphabet is taken as is */
            bytes.len = mark;
            okv_buf_put(&bytes, s, n);
        }
    }
    if (raw) okv_buf_put(&text, bytes.data ? bytes.data : "", bytes.len);
    else tok_utf8_lossy(&text, bytes.data ? bytes.data : "", bytes.len);
    sl_add(out, text.data ? text.data : "", text.len);
    out->fused = true;
    if (bytes.oom || text.oom) out->oom = true;
    okv_buf_free(&bytes);
    okv_buf_free(&text);
}

static void flush_byte_run(strlist *out, okv_buf *run, size_t count, bool raw) {
    if (!count) return;
    if (raw || tok_utf8_valid_prefix(run->data, run->len) == run->len) sl_add(out, run->data, run->len);
    else
        for (size_t k = 0; k < count; k++) sl_add(out, "\xEF\xBF\xBD", 3);
    run->len = 0;
}

static void dec_bytefallback(strlist *in, strlist *out, bool raw) {
    okv_buf run = {0};
    size_t count = 0;
    for (size_t t = 0; t < in->n; t++) {
        int b = byte_token(sl_str(in, t), in->len[t]);
        if (b >= 0) {
            char c = (char)b;
            okv_buf_put(&run, &c, 1);
            count++;
            continue;
        }
        flush_byte_run(out, &run, count, raw);
        count = 0;
        sl_add(out, sl_str(in, t), in->len[t]);
    }
    flush_byte_run(out, &run, count, raw);
    if (run.oom) out->oom = true;
    okv_buf_free(&run);
}

static void dec_strip(const tok_dec *d, strlist *in, strlist *out, bool at_start, bool at_end) {
    for (size_t t = 0; t < in->n; t++) {
        const char *s = sl_str(in, t);
        size_t n = in->len[t], a = 0, b = n;
        /* on a fused list the cuts are at the ends of the whole text */
        bool cut_start = !in->fused || at_start, cut_stop = !in->fused || at_end;
        for (size_t k = 0; cut_start && k < d->start && a < n; k++) {
            size_t i = a;
            if (next_cp(s, n, &i) != d->ch) break;
            a = i;
        }
        for (size_t k = 0; cut_stop && k < d->stop && b > a; k++) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
            size_t i = j;
            if (next_cp(s, b, &i) != d->ch) break;
            b = j;
        }
        sl_add(out, s + a, b - a);
    }
    out->fused = in->fused;
}

static void dec_metaspace(const tok_dec *d, strlist *in, strlist *out, bool at_start) {
    okv_buf t = {0};
    for (size_t k = 0; k < in->n; k++) {
        const char *s = sl_str(in, k);
        size_t n = in->len[k];
        bool drop = k == 0 && at_start && d->prepend != TOK_PREPEND_NEVER;
        t.len = 0;
        for (size_t i = 0; i < n;) {
            size_t i0 = i;
            uint32_t cp = next_cp(s, n, &i);
            if (cp != d->ch) okv_buf_put(&t, s + i0, i - i0);
            else if (!drop) okv_buf_putc(&t, ' ');
        }
        sl_add(out, t.data ? t.data : "", t.len);
    }
    if (t.oom) out->oom = true;
    out->fused = in->fused;
    okv_buf_free(&t);
}

/* The only decoder that can grow the text: out stays within limit bytes
 * (tok_expand_max of the window's token bytes). */
static okv_status dec_replace(const tok_dec *d, tok_scratch *sc, strlist *in, strlist *out, size_t limit,
                              okv_error *err) {
    tok_spans sp = {0};
    okv_buf t = {0};
    okv_status st = OKV_OK;
    for (size_t k = 0; k < in->n && !st; k++) {
        const char *s = sl_str(in, k);
        t.len = 0;
        st = tok_pattern_scan(&d->pat, sc, s, in->len[k], &sp, err);
        for (size_t i = 0; !st && i < sp.n; i++) {
            size_t add = sp.v[i].match ? d->content_len : sp.v[i].end - sp.v[i].start;
            if (out->text.len + t.len + add > limit) {
                st = okv_fail(err, OKV_ERR_CAPACITY,
                              "tokenizer: the Replace decoder expands the text beyond %zu bytes (%dx the tokens + %d); "
                              "refusing (the tokenizer.json is broken or hostile)", limit, TOK_EXPAND_FACTOR,
                              TOK_EXPAND_SLACK);
                break;
            }
            if (sp.v[i].match) okv_buf_put(&t, d->content, d->content_len);
            else okv_buf_put(&t, s + sp.v[i].start, sp.v[i].end - sp.v[i].start);
        }
        if (!st) sl_add(out, t.data ? t.data : "", t.len);
    }
    if (t.oom) out->oom = true;
    out->fused = in->fused;
    free(sp.v);
    okv_buf_free(&t);
    return st;
}

static okv_status apply_dec(const okv_tok *tok, const tok_dec *d, tok_scratch *sc, strlist *in, strlist *out,
                            bool at_start, bool at_end, size_t limit, okv_error *err) {
    okv_status st = OKV_OK;
    sl_clear(out);
    switch (d->type) {
    case TOK_DEC_SEQUENCE: {
        strlist a = {0}, b = {0};
        for (size_t i = 0; i < in->n; i++) sl_add(&a, sl_str(in, i), in->len[i]);
        a.fused = in->fused;
        for (size_t k = 0; k < d->n_kids && !st; k++) {
            st = apply_dec(tok, &d->kids[k], sc, &a, &b, at_start, at_end, limit, err);
            strlist x = a; a = b; b = x;
        }
        for (size_t i = 0; i < a.n; i++) sl_add(out, sl_str(&a, i), a.len[i]);
        out->fused = a.fused;
        if (a.oom) out->oom = true;
        sl_free(&a);
        sl_free(&b);
        break;
    }
    case TOK_DEC_BYTELEVEL: dec_bytelevel(tok, in, out, sc->raw_bytes); break;
    case TOK_DEC_BYTEFALLBACK: dec_bytefallback(in, out, sc->raw_bytes); out->fused = false; break;
    case TOK_DEC_FUSE:
        sl_add(out, in->text.data ? in->text.data : "", in->text.len); /* strings are stored back to back */
        out->fused = true;
        break;
    case TOK_DEC_STRIP: dec_strip(d, in, out, at_start, at_end); break;
    case TOK_DEC_METASPACE: dec_metaspace(d, in, out, at_start); break;
    case TOK_DEC_REPLACE: st = dec_replace(d, sc, in, out, limit, err); break;
    }
    if (!st && out->oom) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory while decoding");
    return st;
}

/* Token strings of the ids that decode keeps. */
static void collect_tokens(const okv_tok *tok, const int32_t *ids, size_t n, bool skip_special, strlist *l) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= tok->vocab_size || !tok->id_str[id]) continue;
        if (skip_special && (tok->id_flags[id] & TOK_ID_SPECIAL)) continue;
        sl_add(l, tok->id_str[id], tok->id_len[id]);
    }
}

static okv_status decode_window(const okv_tok *tok, const int32_t *ids, size_t n, bool skip_special, bool at_start,
                                bool at_end, bool raw, okv_buf *out, okv_error *err) {
    strlist toks = {0}, res = {0};
    okv_status st = OKV_OK;
    collect_tokens(tok, ids, n, skip_special, &toks);
    if (toks.oom) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory while decoding");
    if (!st && !tok->dec) { /* HF joins with spaces when there is no decoder */
        for (size_t i = 0; i < toks.n; i++) {
            if (i > 0 || !at_start) okv_buf_putc(out, ' ');
            okv_buf_put(out, sl_str(&toks, i), toks.len[i]);
        }
    } else if (!st) {
        tok_scratch sc;
        st = tok_scratch_init(&sc, err);
        sc.raw_bytes = raw;
        if (!st) st = apply_dec(tok, tok->dec, &sc, &toks, &res, at_start, at_end, tok_expand_max(toks.text.len), err);
        if (!st) okv_buf_put(out, res.text.data, res.text.len);
        tok_scratch_free(&sc);
    }
    if (!st && out->oom) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory while decoding");
    sl_free(&toks);
    sl_free(&res);
    return st;
}

okv_status okv_tok_decode(const okv_tok *tok, const int32_t *ids, size_t n, bool skip_special, char **text,
                          size_t *len, okv_error *err) {
    *text = NULL;
    if (len) *len = 0;
    if (!tok || (!ids && n)) return okv_fail(err, OKV_ERR_INVALID, "okv_tok_decode: NULL argument");
    okv_buf out = {0};
    okv_status st = decode_window(tok, ids, n, skip_special, true, true, false, &out, err);
    if (!st) okv_buf_put(&out, "", 0); /* make sure there is a NUL-terminated buffer */
    if (!st && out.oom) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory while decoding");
    if (st) { okv_buf_free(&out); return st; }
    *text = out.data;
    if (len) *len = out.len;
    return OKV_OK;
}

/* One token's bytes as they appear inside a text: the decoder chain run on
 * the token alone, not at the start (no leading-space strip) nor the end,
 * with byte-level and byte-fallback runs kept raw (a token holding part of
 * a UTF-8 character gives those bytes, which constrained sampling needs). */
okv_status okv_tok_token_bytes(const okv_tok *tok, int32_t id, char **bytes, size_t *len, okv_error *err) {
    *bytes = NULL;
    *len = 0;
    if (!tok || id < 0 || (size_t)id >= tok->vocab_size)
        return okv_fail(err, OKV_ERR_INVALID, "okv_tok_token_bytes: id %d outside the vocabulary", (int)id);
    okv_buf out = {0};
    okv_status st = decode_window(tok, &id, 1, false, false, false, true, &out, err);
    if (!st) okv_buf_put(&out, "", 0);
    if (!st && out.oom) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory while decoding");
    if (st) { okv_buf_free(&out); return st; }
    *bytes = out.data;
    *len = out.len;
    return OKV_OK;
}

/* ---- streaming ---------------------------------------------------------------------- */

struct okv_tok_stream {
    const okv_tok *tok;
    bool skip_special;
    int32_t *ids; /* window: pushed, not yet emitted */
    size_t n, cap;
    bool at_start;
    okv_buf out;
};

okv_status okv_tok_stream_create(const okv_tok *tok, bool skip_special, okv_tok_stream **out, okv_error *err) {
    *out = NULL;
    if (!tok) return okv_fail(err, OKV_ERR_INVALID, "okv_tok_stream_create: NULL tokenizer");
    okv_tok_stream *s = calloc(1, sizeof *s);
    if (!s) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    s->tok = tok;
    s->skip_special = skip_special;
    s->at_start = true;
    *out = s;
    return OKV_OK;
}

void okv_tok_stream_reset(okv_tok_stream *s) {
    if (!s) return;
    s->n = 0;
    s->at_start = true;
}

void okv_tok_stream_free(okv_tok_stream *s) {
    if (!s) return;
    free(s->ids);
    okv_buf_free(&s->out);
    free(s);
}

static bool ends_with_replacement_char(const okv_buf *b) {
    return b->len >= 3 && memcmp(b->data + b->len - 3, "\xEF\xBF\xBD", 3) == 0;
}

/* Decodes the window into s->out; on success the window is emptied. */
static okv_status stream_emit(okv_tok_stream *s, bool at_end, okv_error *err) {
    s->out.len = 0;
    okv_status st = decode_window(s->tok, s->ids, s->n, s->skip_special, s->at_start, at_end, false, &s->out, err);
    if (st) return st;
    s->n = 0;
    s->at_start = false;
    return OKV_OK;
}

okv_status okv_tok_stream_push(okv_tok_stream *s, int32_t id, const char **text, size_t *len, okv_error *err) {
    *text = "";
    *len = 0;
    if (!s) return okv_fail(err, OKV_ERR_INVALID, "okv_tok_stream_push: NULL stream");
    const okv_tok *tok = s->tok;
    if (id < 0 || (size_t)id >= tok->vocab_size || !tok->id_str[id]) return OKV_OK; /* decode skips it too */
    if (s->skip_special && (tok->id_flags[id] & TOK_ID_SPECIAL)) return OKV_OK;
    int32_t *p = okv_grow(s->ids, &s->cap, s->n + 1, sizeof *p);
    if (!p) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    s->ids = p;
    s->ids[s->n++] = id;

    bool open_run = tok->has_byte_fallback_dec && byte_token(tok->id_str[id], tok->id_len[id]) >= 0;
    if (open_run && s->n < STREAM_MAX_WINDOW) return OKV_OK;
    s->out.len = 0;
    okv_status st = decode_window(tok, s->ids, s->n, s->skip_special, s->at_start, false, false, &s->out, err);
    if (st) return st;
    if (ends_with_replacement_char(&s->out) && s->n < STREAM_MAX_WINDOW) return OKV_OK; /* maybe incomplete */
    s->n = 0;
    s->at_start = false;
    okv_buf_put(&s->out, "", 0);
    if (s->out.oom) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    *text = s->out.data ? s->out.data : "";
    *len = s->out.len;
    return OKV_OK;
}

okv_status okv_tok_stream_flush(okv_tok_stream *s, const char **text, size_t *len, okv_error *err) {
    *text = "";
    *len = 0;
    if (!s) return okv_fail(err, OKV_ERR_INVALID, "okv_tok_stream_flush: NULL stream");
    if (!s->n) return OKV_OK;
    okv_status st = stream_emit(s, true, err);
    if (st) return st;
    okv_buf_put(&s->out, "", 0);
    if (s->out.oom) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    *text = s->out.data ? s->out.data : "";
    *len = s->out.len;
    return OKV_OK;
}
