/* tok_util.c — the tokenizer's building blocks: UTF-8
 * decoding (strict and lossy), Unicode character classes via utf8proc, the
 * two hash maps (token string -> id, merge pair -> rank), the GPT-2 byte
 * alphabet, and patterns (literal or PCRE2 regex) scanned into spans.
 *
 * Regexes in tokenizer.json are written for Oniguruma. We compile them with
 * PCRE2 (UTF + UCP) after rewriting \s and \S into Oniguruma's exact Unicode
 * whitespace set, because PCRE2's own \s differs (e.g. on U+0085). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

/* ---- UTF-8 -------------------------------------------------------------- */

size_t tok_utf8_encode(uint32_t cp, char u[4]) {
    if (cp < 0x80) { u[0] = (char)cp; return 1; }
    if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (char)(0xF0 | (cp >> 18)); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

void tok_buf_put_cp(okv_buf *b, uint32_t cp) {
    char u[4];
    okv_buf_put(b, u, tok_utf8_encode(cp, u));
}

size_t tok_utf8_next(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || n < 2) { *cp = u[0]; return 1; }
    if (u[0] < 0xE0) { *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F); return 2; }
    if (u[0] < 0xF0 || n < 4) {
        if (n < 3) { *cp = u[0]; return 1; }
        *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
          ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    return 4;
}

/* Length of the valid UTF-8 sequence at s (0 if invalid); *partial is set to
 * the number of bytes that form a valid but truncated prefix of one. */
static size_t utf8_seq_len(const unsigned char *s, size_t n, size_t *partial) {
    *partial = 0;
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    size_t i = 1;
    for (; i < need && i < n; i++) {
        unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i) break;
    }
    if (i == need) return need;
    *partial = i;
    return 0;
}

size_t tok_utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, partial;
    while (i < n) {
        size_t k = utf8_seq_len(u + i, n - i, &partial);
        if (!k) break;
        i += k;
    }
    return i;
}

void tok_utf8_lossy(okv_buf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, partial;
    while (i < n) {
        size_t run = i;
        while (run < n) {
            size_t k = utf8_seq_len(u + run, n - run, &partial);
            if (!k) break;
            run += k;
        }
        okv_buf_put(out, s + i, run - i);
        i = run;
        if (i < n) {
            utf8_seq_len(u + i, n - i, &partial);
            okv_buf_put(out, "\xEF\xBF\xBD", 3);
            i += partial ? partial : 1;
        }
    }
}

bool tok_is_whitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

bool tok_is_numeric(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool tok_is_alnum(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || tok_is_numeric(cp);
}

/* ---- string map ----------------------------------------------------------- */

static uint64_t hash_bytes(const char *k, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static bool tok_map_grow(tok_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    tok_map nm = {0};
    nm.keys = calloc(cap, sizeof *nm.keys);
    nm.klen = calloc(cap, sizeof *nm.klen);
    nm.vals = calloc(cap, sizeof *nm.vals);
    if (!nm.keys || !nm.klen || !nm.vals) {
        free(nm.keys); free(nm.klen); free(nm.vals);
        return false;
    }
    nm.cap = cap;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = hash_bytes(m->keys[i], m->klen[i]) & (cap - 1);
        while (nm.keys[j]) j = (j + 1) & (cap - 1);
        nm.keys[j] = m->keys[i];
        nm.klen[j] = m->klen[i];
        nm.vals[j] = m->vals[i];
    }
    nm.n = m->n;
    free(m->keys); free(m->klen); free(m->vals);
    *m = nm;
    return true;
}

bool tok_map_put(tok_map *m, const char *k, size_t n, int32_t v) {
    if ((m->n + 1) * 2 > m->cap && !tok_map_grow(m)) return false;
    size_t j = hash_bytes(k, n) & (m->cap - 1);
    while (m->keys[j]) {
        if (m->klen[j] == n && memcmp(m->keys[j], k, n) == 0) { m->vals[j] = v; return true; }
        j = (j + 1) & (m->cap - 1);
    }
    char *copy = malloc(n + 1);
    if (!copy) return false;
    memcpy(copy, k, n);
    copy[n] = 0;
    m->keys[j] = copy;
    m->klen[j] = (uint32_t)n;
    m->vals[j] = v;
    m->n++;
    return true;
}

int32_t tok_map_get(const tok_map *m, const char *k, size_t n) {
    if (!m->cap) return -1;
    size_t j = hash_bytes(k, n) & (m->cap - 1);
    while (m->keys[j]) {
        if (m->klen[j] == n && memcmp(m->keys[j], k, n) == 0) return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_map_free(tok_map *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys); free(m->klen); free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- merges map --------------------------------------------------------- */

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static bool tok_merges_grow(tok_merges *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    tok_merge_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = hash_u64(m->slots[i].key) & (cap - 1);
        while (slots[j].key) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return true;
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

bool tok_merges_put(tok_merges *m, int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    if ((m->n + 1) * 2 > m->cap && !tok_merges_grow(m)) return false;
    uint64_t key = pair_key(a, b);
    size_t j = hash_u64(key) & (m->cap - 1);
    while (m->slots[j].key && m->slots[j].key != key) j = (j + 1) & (m->cap - 1);
    if (!m->slots[j].key) m->n++;
    m->slots[j] = (tok_merge_slot){key, rank, new_id};
    return true;
}

bool tok_merges_get(const tok_merges *m, int32_t a, int32_t b, int32_t *rank, int32_t *new_id) {
    if (!m->cap) return false;
    uint64_t key = pair_key(a, b);
    size_t j = hash_u64(key) & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].key == key) { *rank = m->slots[j].rank; *new_id = m->slots[j].new_id; return true; }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}

void tok_merges_free(tok_merges *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- GPT-2 byte alphabet -------------------------------------------------- */

/* Bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for themselves; the other 68
 * bytes map, in byte order, to U+0100..U+0143 (space -> U+0120 'Ġ'). */
static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

void tok_byte_alphabet_init(tok_byte_alphabet *a) {
    uint32_t next = 256;
    for (int i = 0; i < 256 + 68; i++) a->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        a->byte_to_cp[b] = byte_is_printable(b) ? (uint32_t)b : next++;
        a->cp_to_byte[a->byte_to_cp[b]] = (int16_t)b;
    }
}

/* ---- regex ------------------------------------------------------------------ */

#define ONIG_SPACE "\\t-\\r\\x{85}\\p{Z}"

/* Rewrites \s / \S (inside and outside classes) to Oniguruma's set. */
static bool rewrite_onig(const char *p, size_t n, okv_buf *out) {
    int depth = 0; /* character-class nesting */
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 's') okv_buf_put(out, depth ? ONIG_SPACE : "[" ONIG_SPACE "]",
                                      strlen(depth ? ONIG_SPACE : "[" ONIG_SPACE "]"));
            else if (e == 'S' && !depth) okv_buf_put(out, "[^" ONIG_SPACE "]", strlen("[^" ONIG_SPACE "]"));
            else okv_buf_put(out, p + i, 2);
            i++;
            continue;
        }
        if (c == '[') {
            depth++;
            okv_buf_putc(out, c);
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') { okv_buf_putc(out, '^'); i++; }
            if (i + 1 < n && p[i + 1] == ']') { okv_buf_putc(out, ']'); i++; }
            continue;
        }
        if (c == ']' && depth) depth--;
        okv_buf_putc(out, c);
    }
    return !out->oom;
}

okv_status tok_regex_compile(const char *pattern, size_t len, pcre2_code **out, const char *what,
                             okv_error *err) {
    okv_buf b = {0};
    if (!rewrite_onig(pattern, len, &b)) { okv_buf_free(&b); return okv_fail(err, OKV_ERR_NOMEM, "out of memory"); }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(b.data ? b.data : ""), b.len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    okv_buf_free(&b);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: invalid regex \"%.*s\": %s", what,
                        (int)(len > 200 ? 200 : len), pattern, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional speed-up; interpreter if it fails */
    *out = re;
    return OKV_OK;
}

okv_status tok_scratch_init(tok_scratch *s, okv_error *err) {
    (void)err;
    memset(s, 0, sizeof *s); /* regex state is created on first use */
    return OKV_OK;
}

/* Creates the match data, match context and JIT stack a regex scan needs. */
static bool scratch_ready(tok_scratch *s) {
    if (s->md) return true;
    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    if (!s->md || !s->mctx) { tok_scratch_free(s); return false; }
    s->jit = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (s->jit) pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
    return true;
}

void tok_scratch_free(tok_scratch *s) {
    if (s->md) pcre2_match_data_free(s->md);
    if (s->mctx) pcre2_match_context_free(s->mctx);
    if (s->jit) pcre2_jit_stack_free(s->jit);
    memset(s, 0, sizeof *s);
}

static bool spans_push(tok_spans *o, size_t a, size_t b, bool match) {
    tok_span *v = okv_grow(o->v, &o->cap, o->n + 1, sizeof *v);
    if (!v) return false;
    o->v = v;
    o->v[o->n++] = (tok_span){a, b, match};
    return true;
}

/* Like HF's Pattern::find_matches: matches and the gaps between them, in
 * order, covering s; an empty s gives one empty non-match. */
okv_status tok_pattern_scan(const tok_pattern *p, tok_scratch *sc, const char *s, size_t n,
                            tok_spans *out, okv_error *err) {
    out->n = 0;
    bool ok = true;
    if (n == 0) ok = spans_push(out, 0, 0, false);
    else if (!p->re) {
        size_t prev = 0;
        if (p->lit_len == 0) ok = spans_push(out, 0, n, false);
        else {
            size_t i = 0;
            while (ok && i + p->lit_len <= n) {
                const char *hit = memmem(s + i, n - i, p->lit, p->lit_len);
                if (!hit) break;
                size_t a = (size_t)(hit - s);
                if (a > prev) ok = spans_push(out, prev, a, false);
                if (ok) ok = spans_push(out, a, a + p->lit_len, true);
                prev = i = a + p->lit_len;
            }
            if (ok && prev < n) ok = spans_push(out, prev, n, false);
        }
    } else {
        size_t prev = 0, at = 0;
        if (!scratch_ready(sc)) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
        while (ok && at <= n) {
            int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, sc->md, sc->mctx);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return okv_fail(err, OKV_ERR_INVALID, "tokenizer regex match failed: %s", (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
            size_t a = ov[0], b = ov[1];
            if (a > prev) ok = spans_push(out, prev, a, false);
            if (ok) ok = spans_push(out, a, b, true);
            prev = b;
            if (b > at) at = b;
            else { /* empty match: step over one char */
                if (at >= n) break;
                uint32_t cp;
                at += tok_utf8_next(s + at, n - at, &cp);
            }
        }
        if (ok && prev < n) ok = spans_push(out, prev, n, false);
    }
    if (!ok) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    return OKV_OK;
}

void tok_pattern_free(tok_pattern *p) {
    free(p->lit);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}
