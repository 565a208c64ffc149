/* tok_fixture_check.h — the checks every tokenizer fixture directory gets
 * (../shared/fixtures/tokenizers/<dir>): encode/decode of cases.jsonl and
 * llamacpp_cases.jsonl, decode and streaming of decode_cases.jsonl, encode
 * of chat_cases.jsonl, and seeded random round-trips. Each test_tok_<dir>.c
 * includes this and calls run_fixture_dir() once, so each 34 MB
 * tokenizer.json is loaded once per program. */
#ifndef TOK_FIXTURE_CHECK_H
#define TOK_FIXTURE_CHECK_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "offkv_tok.h"
#include "okv_common.h"
#include "okv_test.h"

#define FIXTURES "../shared/fixtures/tokenizers/"

/* The raw line being processed: cJSON cuts strings at an escaped \u0000,
 * so string fields are re-read from it with json_string_field(). */
static const char *g_line;
static size_t g_line_len;

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static unsigned read_hex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) v = v * 16 + (unsigned)hexval(p[i]);
    return v;
}

/* Value of the top-level string field "key" of the current line, with
 * embedded NULs kept (malloc'ed; *len set). NULL if absent. */
static char *json_string_field(const char *key, size_t *len) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = memmem(g_line, g_line_len, pat, strlen(pat));
    if (!p) return NULL;
    p += strlen(pat);
    char *out = malloc(g_line_len + 1);
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p != '\\') { out[n++] = *p++; continue; }
        p++;
        char e = *p++;
        if (e == 'u') {
            unsigned cp = read_hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = read_hex4(p + 2);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            n += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out + n);
        } else {
            out[n++] = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
        }
    }
    out[n] = 0;
    *len = n;
    return out;
}

/* Calls fn(line_json, line_no, ctx) for each line of a .jsonl file. */
static int for_each_line(const char *path, void (*fn)(const cJSON *, int, void *), void *ctx) {
    char *text;
    size_t len;
    okv_error err = {0};
    if (okv_read_file(path, &text, &len, &err) != OKV_OK) {
        CHECKF(0, "cannot read %s: %s", path, err.message);
        return 0;
    }
    int lines = 0;
    char *p = text;
    while (*p) {
        char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n) {
            cJSON *j = cJSON_ParseWithLength(p, n);
            g_line = p;
            g_line_len = n;
            CHECKF(j != NULL, "%s:%d: bad JSON line", path, lines + 1);
            if (j) fn(j, ++lines, ctx);
            cJSON_Delete(j);
        }
        p += n + (nl ? 1 : 0);
    }
    free(text);
    return lines;
}

/* ids array from JSON into a malloc'ed vector. */
static int32_t *json_ids(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) v[i++] = (int32_t)it->valuedouble;
    return v;
}

static int ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *label, const int32_t *v, size_t n) {
    fprintf(stderr, "  %s:", label);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", v[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

static int valid_utf8(const char *s, size_t n) {
    utf8proc_int32_t cp;
    size_t i = 0;
    while (i < n) {
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

typedef struct fx {
    const okv_tok *tok;
    const char *file;
    int stream_checked;
} fx;

static void check_decode(fx *f, const int32_t *ids, size_t n, bool skip, const char *want, size_t want_len, int line) {
    char *text = NULL;
    size_t len = 0;
    okv_error err = {0};
    CHECK_OK(okv_tok_decode(f->tok, ids, n, skip, &text, &len, &err), &err);
    if (!text) return;
    CHECKF(len == want_len && memcmp(text, want, len) == 0, "%s:%d decode(skip=%d): got \"%s\" want \"%s\"",
           f->file, line, (int)skip, text, want);
    free(text);
}

/* Streams ids one by one: every chunk valid UTF-8, concatenation == want. */
static void check_stream(fx *f, const int32_t *ids, size_t n, bool skip, const char *want, size_t want_len, int line) {
    okv_tok_stream *s = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_stream_create(f->tok, skip, &s, &err), &err);
    if (!s) return;
    char *acc = malloc(1);
    size_t acc_len = 0;
    int chunks_ok = 1;
    for (size_t i = 0; i <= n; i++) {
        const char *t;
        size_t tl;
        okv_status st = i < n ? okv_tok_stream_push(s, ids[i], &t, &tl, &err) : okv_tok_stream_flush(s, &t, &tl, &err);
        if (st != OKV_OK) { CHECKF(0, "%s:%d stream: %s", f->file, line, err.message); break; }
        if (!valid_utf8(t, tl)) chunks_ok = 0;
        acc = realloc(acc, acc_len + tl + 1);
        memcpy(acc + acc_len, t, tl);
        acc_len += tl;
    }
    acc[acc_len] = 0;
    CHECKF(chunks_ok, "%s:%d stream emitted invalid UTF-8", f->file, line);
    CHECKF(acc_len == want_len && memcmp(acc, want, acc_len) == 0,
           "%s:%d stream(skip=%d): got \"%s\" want \"%s\"", f->file, line, (int)skip, acc, want);
    f->stream_checked++;
    free(acc);
    okv_tok_stream_free(s);
}

/* Encodes text[0..len) and checks it gives want[0..nwant); when not, says
 * "<file>:<line> <what> differs" and prints both lists. */
static void expect_encoding(const fx *f, const char *text, size_t len, bool add_special, const int32_t *want,
                            size_t nwant, int line, const char *what) {
    int32_t *ids = NULL;
    size_t n = 0;
    okv_error err = {0};
    CHECK_OK(okv_tok_encode(f->tok, text, len, add_special, &ids, &n, &err), &err);
    int ok = ids_equal(ids, n, want, nwant);
    CHECKF(ok, "%s:%d %s differs", f->file, line, what);
    if (!ok) { print_ids("got ", ids, n); print_ids("want", want, nwant); }
    free(ids);
}

/* The line's "decoded" and "decoded_skip_special" against decoding ids (and,
 * with stream, streaming them where the text is whole UTF-8). */
static void check_line_decodes(fx *f, const int32_t *ids, size_t n, bool stream, int line) {
    size_t wl, wsl;
    char *want = json_string_field("decoded", &wl), *want_skip = json_string_field("decoded_skip_special", &wsl);
    check_decode(f, ids, n, false, want, wl, line);
    check_decode(f, ids, n, true, want_skip, wsl, line);
    if (stream && valid_utf8(want, wl)) check_stream(f, ids, n, false, want, wl, line);
    if (stream && valid_utf8(want_skip, wsl)) check_stream(f, ids, n, true, want_skip, wsl, line);
    free(want);
    free(want_skip);
}

static void case_line(const cJSON *j, int line, void *ctx) {
    fx *f = ctx;
    size_t text_len;
    char *text = json_string_field("text", &text_len);
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(j, "add_special_tokens");
    size_t nwant;
    int32_t *want = json_ids(cJSON_GetObjectItemCaseSensitive(j, "ids"), &nwant);
    char what[300];
    snprintf(what, sizeof what, "encode(add_special=%d) of \"%.200s\"", cJSON_IsTrue(add), text ? text : "");
    expect_encoding(f, text, text_len, cJSON_IsTrue(add), want, nwant, line, what);
    check_line_decodes(f, want, nwant, false, line);
    free(want);
    free(text);
}

static void decode_line(const cJSON *j, int line, void *ctx) {
    fx *f = ctx;
    size_t n;
    int32_t *ids = json_ids(cJSON_GetObjectItemCaseSensitive(j, "ids"), &n);
    check_line_decodes(f, ids, n, true, line);
    free(ids);
}

static void chat_line(const cJSON *j, int line, void *ctx) {
    fx *f = ctx;
    size_t text_len;
    char *text = json_string_field("rendered", &text_len);
    const cJSON *want_j = cJSON_GetObjectItemCaseSensitive(j, "ids");
    if (!text || !cJSON_IsArray(want_j)) { free(text); return; }
    size_t nwant;
    int32_t *want = json_ids(want_j, &nwant);
    char what[300];
    snprintf(what, sizeof what, "chat encode of %.200s", okv_json_str(j, "name") ? okv_json_str(j, "name") : "?");
    expect_encoding(f, text, text_len, false, want, nwant, line, what);
    free(text);
    free(want);
}

/* ---- random strings --------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void put_cp(char *buf, size_t *n, uint32_t cp) {
    *n += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)buf + *n);
}

/* A random string mixing ASCII, whitespace, CJK, emoji, combining marks and
 * other scripts. Returns its length in buf (cap >= 4 * 64 + 1). */
static size_t random_text(uint64_t *rng, char *buf) {
    static const uint32_t ws[] = {' ', ' ', ' ', '\n', '\t', '\r', 0xA0, 0x3000, 0x2028, 0x85};
    static const uint32_t marks[] = {0x301, 0x308, 0x327, 0x94D, 0x200D, 0xFE0F};
    size_t n = 0, len = 1 + rng_next(rng) % 48;
    for (size_t i = 0; i < len; i++) {
        uint64_t r = rng_next(rng) % 100;
        uint32_t cp;
        if (r < 40) cp = 0x20 + (uint32_t)(rng_next(rng) % 95);           /* printable ASCII */
        else if (r < 55) cp = ws[rng_next(rng) % 10];
        else if (r < 67) cp = 0x4E00 + (uint32_t)(rng_next(rng) % 0x5000); /* CJK */
        else if (r < 75) cp = 0x1F300 + (uint32_t)(rng_next(rng) % 0x300); /* emoji */
        else if (r < 82) cp = marks[rng_next(rng) % 6];
        else if (r < 87) cp = 0x400 + (uint32_t)(rng_next(rng) % 0x100);   /* Cyrillic */
        else if (r < 91) cp = 0x900 + (uint32_t)(rng_next(rng) % 0x80);    /* Devanagari */
        else if (r < 94) cp = 0xAC00 + (uint32_t)(rng_next(rng) % 0x2B00); /* Hangul */
        else if (r < 97) cp = 0x600 + (uint32_t)(rng_next(rng) % 0x100);   /* Arabic */
        else cp = '0' + (uint32_t)(rng_next(rng) % 10);
        if (!utf8proc_codepoint_valid((utf8proc_int32_t)cp)) cp = 'x';
        put_cp(buf, &n, cp);
    }
    buf[n] = 0;
    return n;
}

/* roundtrip: decode(encode(x)) == x is required (on NFC text if nfc). */
static void random_checks(const okv_tok *tok, const char *name, int count, bool roundtrip, bool nfc, bool no_metaspace) {
    uint64_t rng = 12345;
    size_t vs = okv_tok_vocab_size(tok);
    int bad_range = 0, bad_rt = 0, bad_stream = 0, bad_nfc = 0;
    for (int k = 0; k < count; k++) {
        char raw[4 * 64 + 1];
        size_t n = random_text(&rng, raw);
        char *text = raw;
        utf8proc_uint8_t *norm = NULL;
        if (nfc) {
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)raw, (utf8proc_ssize_t)n, &norm,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0) { free(norm); continue; }
            text = (char *)norm;
            n = (size_t)m;
        }
        if (no_metaspace && strstr(text, "\xE2\x96\x81")) { free(norm); continue; }
        int32_t *ids = NULL;
        size_t ni = 0;
        okv_error err = {0};
        CHECK_OK(okv_tok_encode(tok, text, n, k % 2 == 0, &ids, &ni, &err), &err);
        if (nfc) { /* the tokenizer's NFC (done piecewise) == utf8proc's NFC of the whole string */
            int32_t *raw_ids = NULL;
            size_t nr = 0;
            CHECK_OK(okv_tok_encode(tok, raw, strlen(raw), k % 2 == 0, &raw_ids, &nr, &err), &err);
            if (!ids_equal(ids, ni, raw_ids, nr) && bad_nfc++ < 3) fprintf(stderr, "%s NFC: \"%s\"\n", name, raw);
            free(raw_ids);
        }
        for (size_t i = 0; i < ni; i++) bad_range += ids[i] < 0 || (size_t)ids[i] >= vs;
        char *dec = NULL;
        size_t dl = 0;
        CHECK_OK(okv_tok_decode(tok, ids, ni, true, &dec, &dl, &err), &err);
        if (roundtrip && dec && (dl != n || memcmp(dec, text, n))) {
            if (bad_rt++ < 3) fprintf(stderr, "%s roundtrip: \"%s\" -> \"%s\"\n", name, text, dec);
        }
        /* streaming the same ids gives the same text */
        okv_tok_stream *s = NULL;
        CHECK_OK(okv_tok_stream_create(tok, true, &s, &err), &err);
        size_t off = 0;
        int same = dec != NULL;
        for (size_t i = 0; s && i <= ni; i++) {
            const char *t;
            size_t tl;
            if ((i < ni ? okv_tok_stream_push(s, ids[i], &t, &tl, &err) : okv_tok_stream_flush(s, &t, &tl, &err))) { same = 0; break; }
            if (!valid_utf8(t, tl) || off + tl > dl || memcmp(dec + off, t, tl)) same = 0;
            off += tl;
        }
        if (!same || off != dl) bad_stream++;
        okv_tok_stream_free(s);
        free(dec);
        free(ids);
        free(norm);
    }
    CHECKF(bad_range == 0, "%s: %d ids out of range", name, bad_range);
    CHECKF(bad_nfc == 0, "%s: %d of %d random strings encode differently from their NFC form", name, bad_nfc, count);
    CHECKF(bad_rt == 0, "%s: %d of %d random strings do not round-trip", name, bad_rt, count);
    CHECKF(bad_stream == 0, "%s: %d of %d random strings stream differently", name, bad_stream, count);
}

/* Random id sequences (a third of them byte tokens: ids below 512 are
 * single bytes in the byte-level vocabs and <0xXX> tokens in Gemma's, and
 * some special tokens): streaming them one by one gives exactly decode's
 * text, in chunks that are each valid UTF-8. */
static void random_id_streams(const okv_tok *tok, const char *name, int count) {
    uint64_t rng = 99;
    size_t vs = okv_tok_vocab_size(tok);
    int bad = 0;
    for (int k = 0; k < count; k++) {
        int32_t ids[24];
        size_t n = 1 + rng_next(&rng) % 24;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_next(&rng) % 12;
            ids[i] = r < 4 ? (int32_t)(rng_next(&rng) % 512) : r < 5 ? (int32_t)(vs - 1 - rng_next(&rng) % 300)
                                                         : (int32_t)(rng_next(&rng) % vs);
        }
        bool skip = k % 2;
        char *dec = NULL;
        size_t dl = 0;
        okv_error err = {0};
        if (okv_tok_decode(tok, ids, n, skip, &dec, &dl, &err)) { bad++; continue; }
        okv_tok_stream *s = NULL;
        size_t off = 0;
        int same = okv_tok_stream_create(tok, skip, &s, &err) == OKV_OK;
        for (size_t i = 0; same && i <= n; i++) {
            const char *t;
            size_t tl;
            if ((i < n ? okv_tok_stream_push(s, ids[i], &t, &tl, &err) : okv_tok_stream_flush(s, &t, &tl, &err))) { same = 0; break; }
            if (!valid_utf8(t, tl) || off + tl > dl || memcmp(dec + off, t, tl)) same = 0;
            off += tl;
        }
        if (!same || off != dl) {
            if (bad++ < 3) fprintf(stderr, "%s: stream of random ids differs from decode \"%s\"\n", name, dec);
        }
        okv_tok_stream_free(s);
        free(dec);
    }
    CHECKF(bad == 0, "%s: %d of %d random id sequences stream differently", name, bad, count);
}

/* One long text of many distinct words (more than the per-call word cache
 * holds) must encode exactly like its words encoded one call each: with
 * the Llama-3/Qwen regex, "w0 w1 w2" pre-tokenizes to "w0", " w1", " w2". */
__attribute__((unused)) static void long_text_consistency(const okv_tok *tok, const char *name, int words) {
    uint64_t rng = 5;
    size_t cap = (size_t)words * 10 + 1, len = 0;
    char *text = malloc(cap);
    size_t *starts = malloc(((size_t)words + 1) * sizeof *starts);
    for (int w = 0; w < words; w++) {
        starts[w] = len;
        if (w) text[len++] = ' ';
        int wl = 3 + (int)(rng_next(&rng) % 6);
        for (int i = 0; i < wl; i++) text[len++] = (char)('a' + rng_next(&rng) % 26);
    }
    starts[words] = len;
    text[len] = 0;
    int32_t *all = NULL, *one = NULL;
    size_t n_all = 0, n_one, pos = 0;
    okv_error err = {0};
    CHECK_OK(okv_tok_encode(tok, text, len, false, &all, &n_all, &err), &err);
    int bad = 0;
    for (int w = 0; w < words && all; w++) {
        if (okv_tok_encode(tok, text + starts[w], starts[w + 1] - starts[w], false, &one, &n_one, &err)) { bad++; break; }
        if (pos + n_one > n_all || memcmp(all + pos, one, n_one * sizeof *one)) bad++;
        pos += n_one;
        free(one);
    }
    CHECKF(bad == 0 && pos == n_all, "%s: long text of %d words: %d words differ", name, words, bad);
    free(all);
    free(text);
    free(starts);
}

/* Runs every fixture check for one tokenizer directory. */
static okv_tok *run_fixture_dir(const char *dir, bool roundtrip, bool nfc, bool no_metaspace) {
    char path[512];
    okv_tok *tok = NULL;
    okv_error err = {0};
    snprintf(path, sizeof path, FIXTURES "%s/tokenizer.json", dir);
    CHECK_OK(okv_tok_load_file(path, &tok, &err), &err);
    if (!tok) return NULL;
    fx f = {tok, NULL, 0};
    static const char *files[] = {"cases.jsonl", "llamacpp_cases.jsonl"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, FIXTURES "%s/%s", dir, files[i]);
        f.file = path;
        int lines = for_each_line(path, case_line, &f);
        CHECKF(lines >= 46, "%s: only %d lines", path, lines);
    }
    snprintf(path, sizeof path, FIXTURES "%s/decode_cases.jsonl", dir);
    f.file = path;
    int lines = for_each_line(path, decode_line, &f);
    CHECKF(lines > 100 && f.stream_checked >= lines, "%s: %d lines, %d streamed", path, lines, f.stream_checked);
    snprintf(path, sizeof path, FIXTURES "%s/chat_cases.jsonl", dir);
    f.file = path;
    lines = for_each_line(path, chat_line, &f);
    CHECKF(lines >= 20, "%s: only %d lines", path, lines);
    random_checks(tok, dir, 2000, roundtrip, nfc, no_metaspace);
    random_id_streams(tok, dir, 2000);
    return tok;
}

#endif
