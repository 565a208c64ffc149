/* tok_encode.c — text to ids, in HF tokenizers' order:
 *
 *   split out added tokens (raw text, leftmost-longest)
 *   -> normalize each remaining segment (-> split out "normalized" added tokens)
 *   -> pre-tokenize each segment into pieces (Split/ByteLevel/Metaspace/Digits)
 *   -> BPE each piece -> post-process (template: BOS etc.)
 *
 * Pre-tokenizers map a list of pieces to a new list; each piece remembers
 * whether it starts the original text (Metaspace's prepend_scheme "first"). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

/* ---- normalizers -------------------------------------------------------------- */

static okv_status nomem(okv_error *err) { return okv_fail(err, OKV_ERR_NOMEM, "out of memory while encoding"); }

static okv_status normalize_chunk(int options, const char *s, size_t n, okv_buf *out, okv_error *err) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | options));
    if (m < 0) {
        free(dst);
        return okv_fail(err, OKV_ERR_INVALID, "Unicode normalization failed: %s", utf8proc_errmsg(m));
    }
    okv_buf_put(out, dst, (size_t)m);
    free(dst);
    return out->oom ? nomem(err) : OKV_OK;
}

/* NFC/NFD/NFKC/NFKD. ASCII is left unchanged by all four and is a
 * normalization boundary (a starter nothing composes with backwards), so
 * only the non-ASCII stretches, each with the ASCII char before it (which
 * may compose with a following mark), go through utf8proc. */
static okv_status unicode_normalize(int options, const char *s, size_t n, okv_buf *out, okv_error *err) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (unsigned char)s[j] < 0x80) j++;
        size_t ascii_end = j < n && j > i ? j - 1 : j;
        okv_buf_put(out, s + i, ascii_end - i);
        if (j >= n) break;
        size_t k = j;
        while (k < n && (unsigned char)s[k] >= 0x80) k++;
        okv_status st = normalize_chunk(options, s + ascii_end, k - ascii_end, out, err);
        if (st) return st;
        i = k;
    }
    return out->oom ? nomem(err) : OKV_OK;
}

static okv_status too_long(okv_error *err, const char *step, size_t limit) {
    return okv_fail(err, OKV_ERR_CAPACITY,
                    "tokenizer: the %s normalizer expands the text beyond %zu bytes (%dx the input + %d); "
                    "refusing (the tokenizer.json is broken or hostile)", step, limit, TOK_EXPAND_FACTOR,
                    TOK_EXPAND_SLACK);
}

/* Appends the normalization of s[0..n) to out, whose part written by this
 * call (from out->len on entry) must stay within limit bytes. */
static okv_status normalize_within(const tok_norm *nm, tok_scratch *sc, const char *s, size_t n, okv_buf *out,
                                   size_t limit, okv_error *err) {
    okv_status st = OKV_OK;
    size_t base = out->len;
    switch (nm->type) {
    case TOK_NORM_SEQUENCE: {
        okv_buf a = {0}, b = {0};
        okv_buf_put(&a, s, n);
        for (size_t i = 0; i < nm->n_kids && !st; i++) {
            b.len = 0;
            st = normalize_within(&nm->kids[i], sc, a.data ? a.data : "", a.len, &b, limit, err);
            okv_buf t = a; a = b; b = t;
        }
        if (!st) okv_buf_put(out, a.data, a.len);
        if (!st && (a.oom || out->oom)) st = nomem(err);
        okv_buf_free(&a);
        okv_buf_free(&b);
        return st;
    }
    /* NFx grow by a bounded factor (~11x at most), so checking after is enough */
    case TOK_NORM_NFC: st = unicode_normalize(UTF8PROC_COMPOSE, s, n, out, err); break;
    case TOK_NORM_NFKC: st = unicode_normalize(UTF8PROC_COMPOSE | UTF8PROC_COMPAT, s, n, out, err); break;
    case TOK_NORM_NFD: st = unicode_normalize(UTF8PROC_DECOMPOSE, s, n, out, err); break;
    case TOK_NORM_NFKD: st = unicode_normalize(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, s, n, out, err); break;
    case TOK_NORM_REPLACE: {
        tok_spans sp = {0};
        st = tok_pattern_scan(&nm->pat, sc, s, n, &sp, err);
        for (size_t i = 0; !st && i < sp.n; i++) {
            size_t k = sp.v[i].match ? nm->content_len : sp.v[i].end - sp.v[i].start;
            if (out->len - base + k > limit) { st = too_long(err, "Replace", limit); break; }
            if (sp.v[i].match) okv_buf_put(out, nm->content, nm->content_len);
            else okv_buf_put(out, s + sp.v[i].start, k);
        }
        free(sp.v);
        break;
    }
    case TOK_NORM_PREPEND:
        if ((n ? nm->content_len : 0) + n > limit) return too_long(err, "Prepend", limit);
        if (n) okv_buf_put(out, nm->content, nm->content_len);
        okv_buf_put(out, s, n);
        break;
    case TOK_NORM_STRIP: {
        size_t a = 0, b = n;
        uint32_t cp;
        while (nm->left && a < b) {
            size_t k = tok_utf8_next(s + a, b - a, &cp);
            if (!tok_is_whitespace(cp)) break;
            a += k;
        }
        while (nm->right && b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            tok_utf8_next(s + k, b - k, &cp);
            if (!tok_is_whitespace(cp)) break;
            b = k;
        }
        okv_buf_put(out, s + a, b - a);
        break;
    }
    }
    if (!st && out->oom) st = nomem(err);
    if (!st && out->len - base > limit) st = too_long(err, "Unicode", limit);
    return st;
}

okv_status tok_normalize(const tok_norm *nm, tok_scratch *sc, const char *s, size_t n, okv_buf *out,
                         okv_error *err) {
    return normalize_within(nm, sc, s, n, out, tok_expand_max(n), err);
}

/* ---- pieces --------------------------------------------------------------------- */

typedef struct piece {
    size_t off, len;
    bool first; /* starts at offset 0 of the original text */
} piece;

typedef struct pieces {
    okv_buf text;
    piece *v;
    size_t n, cap;
    bool oom;
} pieces;

static void pieces_add(pieces *p, const char *s, size_t n, bool first) {
    if (n == 0 || p->oom) return; /* HF drops empty splits */
    piece *v = okv_grow(p->v, &p->cap, p->n + 1, sizeof *v);
    if (!v) { p->oom = true; return; }
    p->v = v;
    p->v[p->n++] = (piece){p->text.len, n, first};
    okv_buf_put(&p->text, s, n);
    if (p->text.oom) p->oom = true;
}

static void pieces_clear(pieces *p) {
    p->n = 0;
    p->text.len = 0;
}

static void pieces_free(pieces *p) {
    okv_buf_free(&p->text);
    free(p->v);
    memset(p, 0, sizeof *p);
}

/* Applies a split behavior to scanned spans and adds the resulting pieces
 * (HF's NormalizedString::split). */
static void split_by_spans(pieces *out, const char *s, tok_spans *sp, tok_split_behavior bh, bool invert,
                           bool first) {
    for (size_t i = 0; i < sp->n; i++) sp->v[i].match ^= invert;
    /* ranges are merged in place, into sp->v[0..m) */
    size_t m = 0;
    bool prev_match = false;
    if (bh == TOK_SPLIT_NEXT) {
        /* walk backwards, merging a match into the range after it; the
         * result is built downwards at the end of the array */
        tok_span *r = sp->v;
        size_t w = sp->n;
        for (size_t k = sp->n; k-- > 0;) {
            tok_span cur = r[k];
            if (cur.match && !prev_match && w < sp->n) r[w].start = cur.start;
            else r[--w] = (tok_span){cur.start, cur.end, false};
            prev_match = cur.match;
        }
        for (size_t i = w; i < sp->n; i++)
            pieces_add(out, s + r[i].start, r[i].end - r[i].start, first && r[i].start == 0);
        return;
    }
    for (size_t i = 0; i < sp->n; i++) {
        tok_span cur = sp->v[i];
        switch (bh) {
        case TOK_SPLIT_REMOVED:
            if (!cur.match) sp->v[m++] = cur;
            break;
        case TOK_SPLIT_ISOLATED:
            sp->v[m++] = cur;
            break;
        case TOK_SPLIT_CONTIGUOUS:
            if (cur.match == prev_match && m) sp->v[m - 1].end = cur.end;
            else sp->v[m++] = cur;
            break;
        case TOK_SPLIT_PREV:
            if (cur.match && !prev_match && m) sp->v[m - 1].end = cur.end;
            else sp->v[m++] = cur;
            break;
        case TOK_SPLIT_NEXT:
            break;
        }
        prev_match = cur.match;
    }
    for (size_t i = 0; i < m; i++)
        pieces_add(out, s + sp->v[i].start, sp->v[i].end - sp->v[i].start, first && sp->v[i].start == 0);
}

/* Each character for which is_numeric holds is its own match. */
static bool digit_spans(const char *s, size_t n, tok_spans *sp) {
    size_t last = 0;
    sp->n = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = tok_utf8_next(s + i, n - i, &cp);
        if (tok_is_numeric(cp)) {
            tok_span *v = okv_grow(sp->v, &sp->cap, sp->n + 2, sizeof *v);
            if (!v) return false;
            sp->v = v;
            if (last < i) sp->v[sp->n++] = (tok_span){last, i, false};
            sp->v[sp->n++] = (tok_span){i, i + k, true};
            last = i + k;
        }
        i += k;
    }
    if (last < n) {
        tok_span *v = okv_grow(sp->v, &sp->cap, sp->n + 1, sizeof *v);
        if (!v) return false;
        sp->v = v;
        sp->v[sp->n++] = (tok_span){last, n, false};
    }
    return true;
}

typedef struct enc_ctx {
    const okv_tok *tok;
    tok_scratch sc;
    tok_spans spans;
    okv_buf tmp;
    tok_bpe_scratch bpe;
    okv_error *err;
} enc_ctx;

static okv_status pre_tokenize(enc_ctx *c, const tok_pre *p, pieces *in, pieces *out);

static okv_status pre_one(enc_ctx *c, const tok_pre *p, const char *s, size_t n, bool first, pieces *out) {
    okv_status st = OKV_OK;
    okv_buf *t = &c->tmp;
    switch (p->type) {
    case TOK_PRE_SEQUENCE: /* handled by pre_tokenize */
        break;
    case TOK_PRE_SPLIT:
        if ((st = tok_pattern_scan(&p->pat, &c->sc, s, n, &c->spans, c->err))) return st;
        split_by_spans(out, s, &c->spans, p->behavior, p->invert, first);
        break;
    case TOK_PRE_DIGITS:
        if (!digit_spans(s, n, &c->spans)) return nomem(c->err);
        split_by_spans(out, s, &c->spans, p->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS,
                       false, first);
        break;
    case TOK_PRE_BYTELEVEL: {
        t->len = 0;
        if (p->add_prefix_space && (n == 0 || s[0] != ' ')) okv_buf_putc(t, ' ');
        okv_buf_put(t, s, n);
        if (t->oom) return nomem(c->err);
        size_t tn = t->len;
        char *ts = malloc(tn + 1);
        if (!ts) return nomem(c->err);
        memcpy(ts, t->data, tn);
        tok_spans *sp = &c->spans;
        tok_pattern whole = {0}; /* an empty literal: one span, the whole piece */
        st = tok_pattern_scan(p->use_regex ? &p->pat : &whole, &c->sc, ts, tn, sp, c->err);
        for (size_t i = 0; !st && i < sp->n; i++) {
            t->len = 0;
            for (size_t k = sp->v[i].start; k < sp->v[i].end; k++)
                tok_buf_put_cp(t, c->tok->bytes.byte_to_cp[(unsigned char)ts[k]]);
            pieces_add(out, t->data, t->len, first && sp->v[i].start == 0);
        }
        free(ts);
        break;
    }
    case TOK_PRE_METASPACE: {
        t->len = 0;
        char rep[4];
        size_t rl = tok_utf8_encode(p->replacement, rep);
        /* HF replaces ' ' first, then checks for a leading replacement */
        bool starts_rep = (n && s[0] == ' ') || (n >= rl && memcmp(s, rep, rl) == 0);
        if (!starts_rep && (p->prepend == TOK_PREPEND_ALWAYS || (p->prepend == TOK_PREPEND_FIRST && first)))
            okv_buf_put(t, rep, rl);
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') okv_buf_put(t, rep, rl);
            else okv_buf_putc(t, s[i]);
        }
        if (t->oom) return nomem(c->err);
        size_t tn = t->len;
        char *ts = malloc(tn + 1);
        if (!ts) return nomem(c->err);
        memcpy(ts, t->data, tn);
        if (!p->split) pieces_add(out, ts, tn, first);
        else {
            tok_pattern pat = {rep, rl, NULL};
            st = tok_pattern_scan(&pat, &c->sc, ts, tn, &c->spans, c->err);
            if (!st) split_by_spans(out, ts, &c->spans, TOK_SPLIT_NEXT, false, first);
        }
        free(ts);
        break;
    }
    }
    if (!st && out->oom) st = nomem(c->err);
    return st;
}

static okv_status pre_tokenize(enc_ctx *c, const tok_pre *p, pieces *in, pieces *out) {
    okv_status st = OKV_OK;
    if (p->type != TOK_PRE_SEQUENCE) {
        pieces_clear(out);
        for (size_t i = 0; i < in->n && !st; i++)
            st = pre_one(c, p, in->text.data + in->v[i].off, in->v[i].len, in->v[i].first, out);
        return st;
    }
    /* Sequence: run each child on the previous child's output */
    pieces cur = {0}, nxt = {0};
    for (size_t i = 0; i < in->n; i++) pieces_add(&cur, in->text.data + in->v[i].off, in->v[i].len, in->v[i].first);
    if (cur.oom) st = nomem(c->err);
    for (size_t k = 0; k < p->n_kids && !st; k++) {
        st = pre_tokenize(c, &p->kids[k], &cur, &nxt);
        pieces x = cur; cur = nxt; nxt = x;
    }
    pieces_free(&nxt);
    pieces_free(out);
    *out = cur;
    return st;
}

/* ---- added tokens ------------------------------------------------------------------ */

typedef struct segment {
    size_t start, end;
    int32_t id; /* added token id, or -1 for text */
} segment;

typedef struct segments {
    segment *v;
    size_t n, cap;
} segments;

static bool seg_push(segments *g, size_t a, size_t b, int32_t id) {
    if (a >= b && id < 0) return true;
    segment *v = okv_grow(g->v, &g->cap, g->n + 1, sizeof *v);
    if (!v) return false;
    g->v = v;
    g->v[g->n++] = (segment){a, b, id};
    return true;
}

/* Longest added token starting at s[i], or -1; *end gets its end. */
static int32_t trie_longest(const tok_trie *t, const char *s, size_t n, size_t i, size_t *end) {
    int32_t best = -1, node = t->root[(unsigned char)s[i]];
    if (node < 0) return -1;
    if (t->nodes[node].added >= 0) { best = t->nodes[node].added; *end = i + 1; }
    for (size_t k = i + 1; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        int32_t ch = t->nodes[node].first_child;
        while (ch >= 0 && t->nodes[ch].byte != c) ch = t->nodes[ch].next_sibling;
        if (ch < 0) break;
        node = ch;
        if (t->nodes[node].added >= 0) { best = t->nodes[node].added; *end = k + 1; }
    }
    return best;
}

static bool is_word_char(uint32_t cp) { return tok_is_alnum(cp) || cp == '_'; }

static uint32_t cp_before(const char *s, size_t i) {
    size_t k = i - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    tok_utf8_next(s + k, i - k, &cp);
    return cp;
}

/* HF AddedVocabulary::split_with_indices: leftmost-longest matches, then
 * single_word / lstrip / rstrip. */
static bool split_added(const okv_tok *tok, const tok_trie *t, const char *s, size_t n, segments *out) {
    out->n = 0;
    if (!t->n) return seg_push(out, 0, n, -1);
    size_t seg = 0, i = 0;
    while (i < n) {
        size_t end = 0;
        int32_t ai = trie_longest(t, s, n, i, &end);
        if (ai < 0) { i++; continue; }
        const tok_added *a = &tok->added[ai];
        size_t start = i, stop = end;
        i = end;
        if (a->single_word) {
            uint32_t cp;
            bool ok_l = start == 0 || !is_word_char(cp_before(s, start));
            bool ok_r = stop == n || (tok_utf8_next(s + stop, n - stop, &cp), !is_word_char(cp));
            if (!ok_l || !ok_r) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0 && tok_is_whitespace(cp_before(s, ns))) {
                size_t k = ns - 1;
                while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
                ns = k;
            }
            start = ns > seg ? ns : seg;
        }
        if (a->rstrip) {
            uint32_t cp;
            while (stop < n) {
                size_t k = tok_utf8_next(s + stop, n - stop, &cp);
                if (!tok_is_whitespace(cp)) break;
                stop += k;
            }
            i = stop;
        }
        if (!seg_push(out, seg, start, -1) || !seg_push(out, start, stop, a->id)) return false;
        seg = stop;
    }
    return seg_push(out, seg, n, -1);
}

/* ---- encode ---------------------------------------------------------------------------- */

typedef struct ids_vec {
    int32_t *v;
    size_t n, cap;
} ids_vec;

static bool ids_push(ids_vec *o, int32_t id) {
    int32_t *v = okv_grow(o->v, &o->cap, o->n + 1, sizeof *v);
    if (!v) return false;
    o->v = v;
    o->v[o->n++] = id;
    return true;
}

/* Pre-tokenizes and BPE-encodes one normalized text segment. */
static okv_status encode_text(enc_ctx *c, const char *s, size_t n, bool first, ids_vec *out) {
    pieces in = {0}, pre = {0};
    okv_status st = OKV_OK;
    pieces_add(&in, s, n, first);
    if (in.oom) st = nomem(c->err);
    pieces *words = &in;
    if (!st && c->tok->pre) {
        st = pre_tokenize(c, c->tok->pre, &in, &pre);
        words = &pre;
    }
    for (size_t i = 0; !st && i < words->n; i++)
        st = tok_bpe_word(c->tok, &c->bpe, words->text.data + words->v[i].off, words->v[i].len, &out->v, &out->n, &out->cap,
                          c->err);
    pieces_free(&in);
    pieces_free(&pre);
    return st;
}

/* Normalizes a raw segment, splits out normalized added tokens, encodes. */
static okv_status encode_segment(enc_ctx *c, const char *s, size_t n, bool first, ids_vec *out) {
    const okv_tok *tok = c->tok;
    okv_buf norm = {0};
    okv_status st = OKV_OK;
    const char *t = s;
    size_t tn = n;
    if (tok->norm) {
        st = tok_normalize(tok->norm, &c->sc, s, n, &norm, c->err);
        t = norm.data ? norm.data : "";
        tn = norm.len;
    }
    segments g = {0};
    if (!st && !split_added(tok, &tok->trie_norm, t, tn, &g)) st = nomem(c->err);
    for (size_t i = 0; !st && i < g.n; i++) {
        if (g.v[i].id >= 0) {
            if (!ids_push(out, g.v[i].id)) st = nomem(c->err);
        } else st = encode_text(c, t + g.v[i].start, g.v[i].end - g.v[i].start, first && g.v[i].start == 0, out);
    }
    free(g.v);
    okv_buf_free(&norm);
    return st;
}

okv_status okv_tok_encode(const okv_tok *tok, const char *text, size_t len, bool add_special_tokens,
                          int32_t **ids, size_t *n, okv_error *err) {
    *ids = NULL;
    *n = 0;
    if (!tok || (!text && len)) return okv_fail(err, OKV_ERR_INVALID, "okv_tok_encode: NULL argument");
    if (!text) text = "";
    size_t valid = tok_utf8_valid_prefix(text, len);
    if (valid != len) return okv_fail(err, OKV_ERR_INVALID, "okv_tok_encode: text is not valid UTF-8 at byte %zu", valid);

    enc_ctx c = {.tok = tok, .err = err};
    okv_status st = tok_scratch_init(&c.sc, err);
    if (st) return st;
    ids_vec body = {0};
    segments g = {0};
    if (!split_added(tok, &tok->trie_raw, text, len, &g)) st = nomem(err);
    for (size_t i = 0; !st && i < g.n; i++) {
        if (g.v[i].id >= 0) {
            if (!ids_push(&body, g.v[i].id)) st = nomem(err);
        } else st = encode_segment(&c, text + g.v[i].start, g.v[i].end - g.v[i].start, g.v[i].start == 0, &body);
    }
    free(g.v);
    free(c.spans.v);
    okv_buf_free(&c.tmp);
    tok_bpe_scratch_free(&c.bpe);
    tok_scratch_free(&c.sc);

    ids_vec res = {0};
    if (!st && add_special_tokens && tok->tmpl) {
        for (size_t i = 0; !st && i < tok->n_tmpl; i++) {
            const tok_tmpl_item *it = &tok->tmpl[i];
            const int32_t *src = it->is_seq ? body.v : it->ids;
            size_t m = it->is_seq ? body.n : it->n_ids;
            for (size_t k = 0; k < m && !st; k++)
                if (!ids_push(&res, src[k])) st = nomem(err);
        }
        free(body.v);
    } else res = body;
    if (!st && !res.v && !(res.v = malloc(sizeof *res.v))) st = nomem(err);
    if (st) { free(res.v); return st; }
    *ids = res.v;
    *n = res.n;
    return OKV_OK;
}

/* ---- lookups ---------------------------------------------------------------------------- */

size_t okv_tok_vocab_size(const okv_tok *tok) { return tok ? tok->vocab_size : 0; }

int32_t okv_tok_token_to_id(const okv_tok *tok, const char *token) {
    if (!tok || !token) return -1;
    size_t n = strlen(token);
    int32_t id = tok_map_get(&tok->added_map, token, n);
    return id >= 0 ? id : tok_map_get(&tok->vocab, token, n);
}

const char *okv_tok_id_to_token(const okv_tok *tok, int32_t id) {
    if (!tok || id < 0 || (size_t)id >= tok->vocab_size) return NULL;
    return tok->id_str[id];
}

bool okv_tok_is_special(const okv_tok *tok, int32_t id) {
    if (!tok || id < 0 || (size_t)id >= tok->vocab_size) return false;
    return (tok->id_flags[id] & TOK_ID_SPECIAL) != 0;
}
