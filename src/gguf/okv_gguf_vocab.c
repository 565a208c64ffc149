/* okv_gguf_vocab.c — GGUF tokenizer arrays -> HF tokenizer.json,
 * tokenizer_config.json and generation_config.json texts.
 *
 * Shaped as a translator, not a tokenizer: whatever we emit is loaded by
 * src/tokenizer exactly like a tokenizer.json from a checkpoint, so there is
 * one tokenizer implementation and GGUF models inherit all its tests. The
 * facts it encodes (checked against the real HF files in
 * ../shared/fixtures/tokenizers and the models' own ids):
 *
 * - gpt2: byte-level BPE over the GGUF merges. tokenizer.ggml.pre picks the
 *   splitting llama.cpp applies, written as the HF pre-tokenizer of that
 *   family: smollm = Digits(individual) + GPT-2 ByteLevel regex; llama-bpe =
 *   the Llama-3 Split regex (digits in threes) + ignore_merges; qwen2 = NFC +
 *   the same regex with single digits; default = llama.cpp's four-regex
 *   fallback as Isolated splits.
 * - llama (SentencePiece): HF's converter output. llama.cpp's converter
 *   wrote user-defined pieces with "▁" turned into spaces and gave
 *   control/user-defined pieces score -1000 where SentencePiece has 0; both
 *   are undone. The merges are derived from the scores as HF's
 *   SentencePieceExtractor does: every split of every piece into two vocab
 *   pieces, ordered by (score of the piece desc, characters of the left part
 *   desc, of the right part desc, piece id, left id, right id). On the
 *   Gemma-3 GGUF this reproduces all 514906 merges of Gemma-3's
 *   tokenizer.json in order.
 * - token types CONTROL/USER_DEFINED become added tokens (special = control).
 *
 * The big texts are written directly (a JSON string escaper is all it takes)
 * rather than built as a cJSON tree: Gemma's vocab and merges would be ~2M
 * tree nodes for a 34 MB text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_gguf_vocab.h"

#define WORD_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */

okv_gguf_vocab okv_gguf_vocab_empty(void) {
    okv_gguf_vocab v;
    memset(&v, 0, sizeof v);
    v.bos_id = v.eos_id = v.unk_id = v.pad_id = v.eot_id = -1;
    v.add_bos = v.add_eos = v.add_space_prefix = -1;
    return v;
}

void okv_gguf_vocab_texts_free(okv_gguf_vocab_texts *t) {
    if (!t) return;
    free(t->tokenizer_json);
    free(t->tokenizer_config_json);
    free(t->generation_config_json);
    memset(t, 0, sizeof *t);
}

/* ---- small helpers ---------------------------------------------------------- */

static bool span_is(okv_gguf_span s, const char *lit) {
    size_t n = strlen(lit);
    return s.ptr && s.len == n && !memcmp(s.ptr, lit, n);
}

/* Length of the valid UTF-8 prefix (shortest forms, no surrogates). */
static size_t utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return i;
        if (n - i <= k) return i;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k + 1;
    }
    return n;
}

/* Byte length of the UTF-8 character starting at s (valid text assumed). */
static size_t utf8_char_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static size_t utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; k++) i += utf8_char_len((unsigned char)s[i]);
    return k;
}

/* A JSON string literal of valid UTF-8 bytes. */
static void jb_str(okv_buf *b, const char *s, size_t n) {
    okv_buf_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        okv_buf_put(b, s + run, i - run);
        run = i + 1;
        char esc[8];
        if (c == '"') okv_buf_puts(b, "\\\"");
        else if (c == '\\') okv_buf_puts(b, "\\\\");
        else if (c == '\n') okv_buf_puts(b, "\\n");
        else if (c == '\t') okv_buf_puts(b, "\\t");
        else if (c == '\r') okv_buf_puts(b, "\\r");
        else { snprintf(esc, sizeof esc, "\\u%04x", c); okv_buf_puts(b, esc); }
    }
    okv_buf_put(b, s + run, n - run);
    okv_buf_put(b, "\"", 1);
}

static void jb_cstr(okv_buf *b, const char *s) { jb_str(b, s, strlen(s)); }

/* ---- string -> id hash map over the (fixed-up) token texts ----------------------- */

typedef struct tokmap {
    int32_t *slots; /* id or -1 */
    size_t mask;
    uint64_t seed; /* okv_hash_seed: token texts cannot be crafted to collide */
    const okv_gguf_span *text; /* [n] */
} tokmap;

static int32_t tokmap_get(const tokmap *m, const char *s, size_t n) {
    for (size_t i = okv_hash_bytes(m->seed, s, n) & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slots[i];
        if (id < 0) return -1;
        if (m->text[id].len == n && !memcmp(m->text[id].ptr, s, n)) return id;
    }
}

/* Inserts id; returns the id already holding that text, or -1. */
static int32_t tokmap_put(tokmap *m, int32_t id) {
    const okv_gguf_span t = m->text[id];
    for (size_t i = okv_hash_bytes(m->seed, t.ptr, t.len) & m->mask;; i = (i + 1) & m->mask) {
        int32_t old = m->slots[i];
        if (old < 0) { m->slots[i] = id; return -1; }
        if (m->text[old].len == t.len && !memcmp(m->text[old].ptr, t.ptr, t.len)) return old;
    }
}

/* ---- the synthesis state ----------------------------------------------------------- */

typedef enum { KIND_GPT2, KIND_SPM } vocab_kind;

typedef enum { PRE_SMOLLM, PRE_LLAMA3, PRE_QWEN2, PRE_GPT2, PRE_DEFAULT } pre_kind;

typedef struct synth {
    const okv_gguf_vocab *v;
    okv_error *err;
    vocab_kind kind;
    pre_kind pre;
    size_t n;
    okv_gguf_span *text;  /* [n] token texts as HF spells them */
    char **owned;         /* [n] texts we rewrote (NULL = borrowed) */
    int32_t *type;        /* [n] token types (NORMAL when absent) */
    tokmap map;
    int64_t bos, eos, unk, pad, eot;
    bool add_bos, add_eos, space_prefix, byte_fallback;
} synth;

static okv_status nomem(synth *S) { return okv_fail(S->err, OKV_ERR_NOMEM, "GGUF tokenizer: out of memory"); }

static bool is_added(const synth *S, size_t id) {
    return S->type[id] == OKV_GGUF_TOKEN_CONTROL || S->type[id] == OKV_GGUF_TOKEN_USER_DEFINED;
}

static okv_status pick_kind(synth *S) {
    const okv_gguf_span m = S->v->model;
    if (span_is(m, "gpt2")) S->kind = KIND_GPT2;
    else if (span_is(m, "llama")) S->kind = KIND_SPM;
    else if (!m.ptr) return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.model is missing");
    else
        return okv_fail(S->err, OKV_ERR_UNSUPPORTED,
                        "GGUF tokenizer: tokenizer.ggml.model \"%.*s\" is not supported (only \"gpt2\" and \"llama\")",
                        (int)(m.len > 64 ? 64 : m.len), utf8_valid_prefix(m.ptr, m.len) == m.len ? m.ptr : "?");
    if (S->kind == KIND_SPM) return OKV_OK; /* SentencePiece has no pre-tokenizer choice */
    static const struct { const char *name; pre_kind pre; } names[] = {
        {"smollm", PRE_SMOLLM},  {"llama-bpe", PRE_LLAMA3}, {"llama3", PRE_LLAMA3},   {"llama-v3", PRE_LLAMA3},
        {"qwen2", PRE_QWEN2},    {"qwen2.5", PRE_QWEN2},    {"qwen-2.5", PRE_QWEN2},  {"gpt-2", PRE_GPT2},
        {"default", PRE_DEFAULT},
    };
    const okv_gguf_span p = S->v->pre;
    if (!p.ptr) { S->pre = PRE_DEFAULT; return OKV_OK; }
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (span_is(p, names[i].name)) { S->pre = names[i].pre; return OKV_OK; }
    return okv_fail(S->err, OKV_ERR_UNSUPPORTED,
                    "GGUF tokenizer: tokenizer.ggml.pre \"%.*s\" is not supported (supported: smollm, llama-bpe, qwen2, gpt-2, default)",
                    (int)(p.len > 64 ? 64 : p.len), utf8_valid_prefix(p.ptr, p.len) == p.len ? p.ptr : "?");
}

/* A SentencePiece vocabulary the merges can be derived from: some score
 * finite (all NaN would leave the merge order arbitrary) and, when types are
 * given, some token NORMAL (llama.cpp decodes UNDEFINED ones to nothing). */
static okv_status check_spm_arrays(synth *S) {
    const okv_gguf_vocab *v = S->v;
    size_t finite = 0, normal = 0;
    for (size_t i = 0; i < v->n_scores; i++) finite += isfinite(v->scores[i]) != 0;
    for (size_t i = 0; i < v->n_token_types; i++) normal += v->token_types[i] == OKV_GGUF_TOKEN_NORMAL;
    if (!finite)
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: none of the %zu tokenizer.ggml.scores is a finite number",
                        v->n_scores);
    if (v->n_token_types && !normal)
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.token_type marks none of the %zu tokens NORMAL (1)",
                        v->n_token_types);
    return OKV_OK;
}

static okv_status check_arrays(synth *S) {
    const okv_gguf_vocab *v = S->v;
    if (v->n_tokens == 0 || !v->tokens) return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.tokens is missing or empty");
    if (v->n_tokens >= (size_t)INT32_MAX / 4)
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.tokens has %zu entries (too many)", v->n_tokens);
    if (v->n_scores && (v->n_scores != v->n_tokens || !v->scores))
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.scores has %zu entries but tokenizer.ggml.tokens has %zu",
                        v->n_scores, v->n_tokens);
    if (v->n_token_types && (v->n_token_types != v->n_tokens || !v->token_types))
        return okv_fail(S->err, OKV_ERR_FORMAT,
                        "GGUF tokenizer: tokenizer.ggml.token_type has %zu entries but tokenizer.ggml.tokens has %zu",
                        v->n_token_types, v->n_tokens);
    if (v->n_merges && !v->merges) return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.merges is NULL");
    if (S->kind == KIND_GPT2 && !v->n_merges)
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.model is \"gpt2\" but tokenizer.ggml.merges is missing");
    if (S->kind == KIND_SPM && !v->n_scores)
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.model is \"llama\" but tokenizer.ggml.scores is missing");
    if (S->kind == KIND_SPM) {
        okv_status st = check_spm_arrays(S);
        if (st) return st;
    }
    const struct { int64_t id; const char *key; } ids[] = {
        {v->bos_id, "bos_token_id"}, {v->eos_id, "eos_token_id"}, {v->unk_id, "unknown_token_id"},
        {v->pad_id, "padding_token_id"}, {v->eot_id, "eot_token_id"},
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        if (ids[i].id < -1 || ids[i].id >= (int64_t)v->n_tokens)
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.%s %lld is outside the %zu tokens", ids[i].key,
                            (long long)ids[i].id, v->n_tokens);
    if (v->chat_template.ptr && (utf8_valid_prefix(v->chat_template.ptr, v->chat_template.len) != v->chat_template.len ||
                                 memchr(v->chat_template.ptr, 0, v->chat_template.len)))
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.chat_template is not valid UTF-8 without NUL bytes");
    return OKV_OK;
}

/* Replaces every " " by "▁" (undoing llama.cpp's pre-normalized
 * user-defined SentencePiece pieces). */
static char *spaces_to_word_space(const char *s, size_t n, size_t *out_len) {
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    char *p = malloc(n + 2 * spaces + 1), *q = p;
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(q, WORD_SPACE, 3); q += 3; }
        else *q++ = s[i];
    }
    *q = 0;
    *out_len = (size_t)(q - p);
    return p;
}

/* Token texts as HF spells them, types, and the text -> id map. */
static okv_status build_tokens(synth *S) {
    const okv_gguf_vocab *v = S->v;
    size_t n = S->n = v->n_tokens;
    S->text = calloc(n, sizeof *S->text);
    S->owned = calloc(n, sizeof *S->owned);
    S->type = malloc(n * sizeof *S->type);
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    S->map.slots = malloc(cap * sizeof *S->map.slots);
    if (!S->text || !S->owned || !S->type || !S->map.slots) return nomem(S);
    memset(S->map.slots, 0xff, cap * sizeof *S->map.slots);
    S->map.mask = cap - 1;
    S->map.seed = okv_hash_seed();
    S->map.text = S->text;
    for (size_t i = 0; i < n; i++) {
        okv_gguf_span t = v->tokens[i];
        int32_t ty = v->n_token_types ? v->token_types[i] : OKV_GGUF_TOKEN_NORMAL;
        if (ty < OKV_GGUF_TOKEN_UNDEFINED || ty > OKV_GGUF_TOKEN_BYTE)
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.token_type[%zu] is %d (valid: 0..6)", i, (int)ty);
        S->type[i] = ty;
        if (!t.ptr && t.len) return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.tokens[%zu] is NULL", i);
        if (utf8_valid_prefix(t.ptr, t.len) != t.len)
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.tokens[%zu] is not valid UTF-8", i);
        if (t.len && memchr(t.ptr, 0, t.len)) /* JSON readers cut strings there */
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.tokens[%zu] contains a NUL byte", i);
        if (t.len == 0) { /* llama.cpp's name for an empty entry */
            char name[40];
            int k = snprintf(name, sizeof name, "[EMPTY_%zu]", i);
            if (!(S->owned[i] = okv_strdup(name))) return nomem(S);
            t = (okv_gguf_span){S->owned[i], (size_t)k};
        } else if (S->kind == KIND_SPM && ty == OKV_GGUF_TOKEN_USER_DEFINED && memchr(t.ptr, ' ', t.len)) {
            size_t len;
            if (!(S->owned[i] = spaces_to_word_space(t.ptr, t.len, &len))) return nomem(S);
            t = (okv_gguf_span){S->owned[i], len};
        }
        S->text[i] = t;
        int32_t old = tokmap_put(&S->map, (int32_t)i);
        if (old >= 0)
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.tokens[%zu] repeats tokens[%d] \"%.*s\"", i, (int)old,
                            (int)(t.len > 40 ? 40 : t.len), t.ptr);
    }
    return OKV_OK;
}

/* Special ids, BOS/EOS flags and the end-of-turn token. */
static void pick_specials(synth *S) {
    const okv_gguf_vocab *v = S->v;
    S->bos = v->bos_id;
    S->eos = v->eos_id;
    S->unk = v->unk_id;
    S->pad = v->pad_id;
    S->eot = v->eot_id;
    if (S->kind == KIND_SPM) { /* llama.cpp's SentencePiece defaults */
        if (S->bos < 0 && S->n > 1) S->bos = 1;
        if (S->eos < 0 && S->n > 2) S->eos = 2;
        if (S->unk < 0) S->unk = 0;
    }
    S->add_bos = v->add_bos < 0 ? S->kind == KIND_SPM : v->add_bos > 0;
    S->add_eos = v->add_eos > 0;
    S->space_prefix = S->kind == KIND_SPM && v->add_space_prefix != 0;
    if (S->eot < 0) { /* as llama.cpp: an end-of-turn control token found by its text */
        static const char *const names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"};
        for (size_t i = 0; i < sizeof names / sizeof *names && S->eot < 0; i++) {
            int32_t id = tokmap_get(&S->map, names[i], strlen(names[i]));
            if (id >= 0 && S->type[id] == OKV_GGUF_TOKEN_CONTROL) S->eot = id;
        }
    }
    S->byte_fallback = false;
    for (size_t i = 0; i < S->n && !S->byte_fallback; i++) S->byte_fallback = S->type[i] == OKV_GGUF_TOKEN_BYTE;
}

/* ---- merges -------------------------------------------------------------------------------- */

static okv_status put_gpt2_merges(synth *S, okv_buf *b) {
    const okv_gguf_vocab *v = S->v;
    for (size_t i = 0; i < v->n_merges; i++) {
        okv_gguf_span m = v->merges[i];
        if (!m.ptr || utf8_valid_prefix(m.ptr, m.len) != m.len || memchr(m.ptr, 0, m.len))
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.merges[%zu] is not valid UTF-8 without NUL bytes", i);
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL; /* as llama.cpp: first space after byte 0 */
        if (!sp || sp + 1 == m.ptr + m.len)
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.merges[%zu] \"%.*s\" is not two tokens separated by a space",
                            i, (int)(m.len > 40 ? 40 : m.len), m.ptr);
        size_t na = (size_t)(sp - m.ptr), nb = m.len - na - 1;
        const char *a = m.ptr, *bb = sp + 1;
        int32_t ia = tokmap_get(&S->map, a, na), ib = tokmap_get(&S->map, bb, nb);
        if (ia < 0 || ib < 0)
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.merges[%zu]: \"%.*s\" is not in tokenizer.ggml.tokens", i,
                            (int)(ia < 0 ? (na > 40 ? 40 : na) : (nb > 40 ? 40 : nb)), ia < 0 ? a : bb);
        /* the merged token must exist too (HF refuses the file otherwise) */
        char stackbuf[256];
        char *cat = na + nb <= sizeof stackbuf ? stackbuf : malloc(na + nb);
        if (!cat) return nomem(S);
        memcpy(cat, a, na);
        memcpy(cat + na, bb, nb);
        int32_t im = tokmap_get(&S->map, cat, na + nb);
        if (cat != stackbuf) free(cat);
        if (im < 0)
            return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.merges[%zu]: the merged token \"%.*s%.*s\" is not in tokenizer.ggml.tokens",
                            i, (int)(na > 40 ? 40 : na), a, (int)(nb > 40 ? 40 : nb), bb);
        if (i) okv_buf_put(b, ",", 1);
        okv_buf_put(b, "[", 1);
        jb_str(b, a, na);
        okv_buf_put(b, ",", 1);
        jb_str(b, bb, nb);
        okv_buf_put(b, "]", 1);
    }
    return OKV_OK;
}

/* One SentencePiece merge candidate: piece = left + right. */
typedef struct spm_merge {
    float score;       /* the piece's score (0 for control/user-defined) */
    uint32_t len_l, len_r; /* characters */
    int32_t piece, left, right;
} spm_merge;

static int cmp_spm_merge(const void *pa, const void *pb) {
    const spm_merge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->len_l != b->len_l) return a->len_l > b->len_l ? -1 : 1;
    if (a->len_r != b->len_r) return a->len_r > b->len_r ? -1 : 1;
    if (a->piece != b->piece) return a->piece < b->piece ? -1 : 1;
    if (a->left != b->left) return a->left < b->left ? -1 : 1;
    return (a->right > b->right) - (a->right < b->right);
}

/* The score HF's converter saw: SentencePiece gives control and
 * user-defined pieces 0, llama.cpp's converter wrote -1000. NaN sorts last. */
static float spm_score(const synth *S, size_t id) {
    if (is_added(S, id)) return 0.0f;
    float s = S->v->scores[id];
    return isnan(s) ? -INFINITY : s;
}

static okv_status put_spm_merges(synth *S, okv_buf *b) {
    size_t cap = 1024, n = 0;
    spm_merge *m = malloc(cap * sizeof *m);
    if (!m) return nomem(S);
    for (size_t p = 0; p < S->n; p++) {
        const char *s = S->text[p].ptr;
        size_t len = S->text[p].len, chars_l = 0, total = utf8_count(s, len);
        for (size_t cut = utf8_char_len((unsigned char)s[0]); cut < len; cut += utf8_char_len((unsigned char)s[cut])) {
            chars_l++;
            int32_t l = tokmap_get(&S->map, s, cut), r = l >= 0 ? tokmap_get(&S->map, s + cut, len - cut) : -1;
            if (r < 0) continue;
            spm_merge *q = okv_grow(m, &cap, n + 1, sizeof *m);
            if (!q) { free(m); return nomem(S); }
            m = q;
            m[n++] = (spm_merge){spm_score(S, p), (uint32_t)chars_l, (uint32_t)(total - chars_l), (int32_t)p, l, r};
        }
    }
    qsort(m, n, sizeof *m, cmp_spm_merge);
    for (size_t i = 0; i < n; i++) {
        if (i) okv_buf_put(b, ",", 1);
        okv_buf_put(b, "[", 1);
        jb_str(b, S->text[m[i].left].ptr, S->text[m[i].left].len);
        okv_buf_put(b, ",", 1);
        jb_str(b, S->text[m[i].right].ptr, S->text[m[i].right].len);
        okv_buf_put(b, "]", 1);
    }
    free(m);
    return OKV_OK;
}

/* ---- tokenizer.json pieces ----------------------------------------------------------------- */

/* Llama-3's Split regex; Qwen2's is the same with single digits. */
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* llama.cpp's fallback for BPE vocabularies without a known pre-tokenizer,
 * applied one after the other, matches and gaps both kept. */
static const char *const DEFAULT_REGEXES[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};

static void put_split(okv_buf *b, const char *regex) {
    okv_buf_puts(b, "{\"type\":\"Split\",\"pattern\":{\"Regex\":");
    jb_cstr(b, regex);
    okv_buf_puts(b, "},\"behavior\":\"Isolated\",\"invert\":false}");
}

static const char BYTELEVEL_NO_REGEX[] = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}";

static void put_normalizer_and_pre(const synth *S, okv_buf *b) {
    if (S->kind == KIND_SPM) {
        if (S->space_prefix)
            okv_buf_puts(b, "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" WORD_SPACE "\"},"
                      "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" WORD_SPACE "\"}]},\"pre_tokenizer\":null,");
        else /* Gemma: no dummy prefix; the Split on " " is a no-op after the Replace, kept as HF has it */
            okv_buf_puts(b, "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" WORD_SPACE "\"},"
                      "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\",\"invert\":false},");
        return;
    }
    okv_buf_puts(b, S->pre == PRE_QWEN2 ? "\"normalizer\":{\"type\":\"NFC\"}," : "\"normalizer\":null,");
    okv_buf_puts(b, "\"pre_tokenizer\":");
    switch (S->pre) {
    case PRE_SMOLLM:
        okv_buf_puts(b, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                  "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}");
        break;
    case PRE_GPT2:
        okv_buf_puts(b, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}");
        break;
    case PRE_LLAMA3:
    case PRE_QWEN2:
        okv_buf_puts(b, "{\"type\":\"Sequence\",\"pretokenizers\":[");
        put_split(b, S->pre == PRE_LLAMA3 ? LLAMA3_REGEX : QWEN2_REGEX);
        okv_buf_puts(b, ",");
        okv_buf_puts(b, BYTELEVEL_NO_REGEX);
        okv_buf_puts(b, "]}");
        break;
    case PRE_DEFAULT:
        okv_buf_puts(b, "{\"type\":\"Sequence\",\"pretokenizers\":[");
        for (size_t i = 0; i < sizeof DEFAULT_REGEXES / sizeof *DEFAULT_REGEXES; i++) {
            put_split(b, DEFAULT_REGEXES[i]);
            okv_buf_puts(b, ",");
        }
        okv_buf_puts(b, BYTELEVEL_NO_REGEX);
        okv_buf_puts(b, "]}");
        break;
    }
    okv_buf_puts(b, ",");
}

static void put_special_ref(const synth *S, okv_buf *b, int64_t id) {
    okv_buf_puts(b, "{\"SpecialToken\":{\"id\":");
    jb_str(b, S->text[id].ptr, S->text[id].len);
    okv_buf_puts(b, ",\"type_id\":0}}");
}

static void put_special_def(const synth *S, okv_buf *b, int64_t id) {
    jb_str(b, S->text[id].ptr, S->text[id].len);
    okv_buf_puts(b, ":{\"id\":");
    jb_str(b, S->text[id].ptr, S->text[id].len);
    okv_buf_printf(b, ",\"ids\":[%lld],\"tokens\":[", (long long)id);
    jb_str(b, S->text[id].ptr, S->text[id].len);
    okv_buf_puts(b, "]}");
}

static okv_status put_post_processor(const synth *S, okv_buf *b) {
    bool bos = S->add_bos && S->bos >= 0, eos = S->add_eos && S->eos >= 0;
    if (S->v->add_bos > 0 && S->bos < 0)
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id");
    if (S->add_eos && S->eos < 0)
        return okv_fail(S->err, OKV_ERR_FORMAT, "GGUF tokenizer: tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id");
    if (!bos && !eos) {
        okv_buf_puts(b, S->kind == KIND_GPT2 ? "\"post_processor\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},"
                                       : "\"post_processor\":null,");
        return OKV_OK;
    }
    okv_buf_puts(b, "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[");
    if (bos) { put_special_ref(S, b, S->bos); okv_buf_puts(b, ","); }
    okv_buf_puts(b, "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}");
    if (eos) { okv_buf_puts(b, ","); put_special_ref(S, b, S->eos); }
    okv_buf_puts(b, "],\"special_tokens\":{");
    if (bos) put_special_def(S, b, S->bos);
    if (eos && !(bos && S->bos == S->eos)) {
        if (bos) okv_buf_puts(b, ",");
        put_special_def(S, b, S->eos);
    }
    okv_buf_puts(b, "}},");
    return OKV_OK;
}

static void put_decoder(const synth *S, okv_buf *b) {
    if (S->kind == KIND_GPT2) {
        okv_buf_puts(b, "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},");
        return;
    }
    okv_buf_puts(b, "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" WORD_SPACE
              "\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}");
    if (S->space_prefix) okv_buf_puts(b, ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}");
    okv_buf_puts(b, "]},");
}

static void put_added_tokens(const synth *S, okv_buf *b) {
    okv_buf_puts(b, "\"added_tokens\":[");
    bool first = true;
    for (size_t i = 0; i < S->n; i++) {
        if (!is_added(S, i)) continue;
        if (!first) okv_buf_puts(b, ",");
        first = false;
        okv_buf_printf(b, "{\"id\":%zu,\"content\":", i);
        jb_str(b, S->text[i].ptr, S->text[i].len);
        okv_buf_puts(b, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":");
        okv_buf_puts(b, S->type[i] == OKV_GGUF_TOKEN_CONTROL ? "true}" : "false}");
    }
    okv_buf_puts(b, "],");
}

static okv_status put_model(synth *S, okv_buf *b) {
    okv_buf_puts(b, "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":");
    if (S->kind == KIND_SPM && S->unk >= 0) jb_str(b, S->text[S->unk].ptr, S->text[S->unk].len);
    else okv_buf_puts(b, "null");
    okv_buf_puts(b, ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,");
    okv_buf_puts(b, S->kind == KIND_SPM ? "\"fuse_unk\":true," : "\"fuse_unk\":false,");
    okv_buf_puts(b, S->kind == KIND_SPM && S->byte_fallback ? "\"byte_fallback\":true," : "\"byte_fallback\":false,");
    okv_buf_puts(b, S->kind == KIND_GPT2 && S->pre == PRE_LLAMA3 ? "\"ignore_merges\":true," : "\"ignore_merges\":false,");
    okv_buf_puts(b, "\"vocab\":{");
    for (size_t i = 0; i < S->n; i++) {
        if (i) okv_buf_puts(b, ",");
        jb_str(b, S->text[i].ptr, S->text[i].len);
        okv_buf_printf(b, ":%zu", i);
    }
    okv_buf_puts(b, "},\"merges\":[");
    okv_status st = S->kind == KIND_GPT2 ? put_gpt2_merges(S, b) : put_spm_merges(S, b);
    okv_buf_puts(b, "]}");
    return st;
}

static okv_status build_tokenizer_json(synth *S, okv_buf *b) {
    okv_buf_puts(b, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,");
    put_added_tokens(S, b);
    put_normalizer_and_pre(S, b);
    okv_status st = put_post_processor(S, b);
    if (st) return st;
    put_decoder(S, b);
    if ((st = put_model(S, b))) return st;
    okv_buf_puts(b, "}");
    return OKV_OK;
}

/* ---- tokenizer_config.json and generation_config.json --------------------------------------- */

static void put_token_field(const synth *S, okv_buf *b, const char *key, int64_t id) {
    okv_buf_printf(b, ",\"%s\":", key);
    if (id >= 0) jb_str(b, S->text[id].ptr, S->text[id].len);
    else okv_buf_puts(b, "null");
}

static void build_tokenizer_config(const synth *S, okv_buf *b) {
    okv_buf_printf(b, "{\"add_bos_token\":%s,\"add_eos_token\":%s", S->add_bos ? "true" : "false", S->add_eos ? "true" : "false");
    put_token_field(S, b, "bos_token", S->bos);
    put_token_field(S, b, "eos_token", S->eos);
    put_token_field(S, b, "unk_token", S->unk);
    put_token_field(S, b, "pad_token", S->pad);
    if (S->v->chat_template.ptr) {
        okv_buf_puts(b, ",\"chat_template\":");
        jb_str(b, S->v->chat_template.ptr, S->v->chat_template.len);
    }
    okv_buf_puts(b, ",\"clean_up_tokenization_spaces\":false}");
}

/* End-of-generation control tokens by text, as llama.cpp collects them
 * (HF's Qwen2.5/Llama-3.1 generation_config.json list the same ones). */
static const char *const EOG_NAMES[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                        "<|endoftext|>", "<|end_of_text|>", "<EOT>"};

static void build_generation_config(const synth *S, okv_buf *b) {
    okv_buf_puts(b, "{");
    if (S->bos >= 0) okv_buf_printf(b, "\"bos_token_id\":%lld,", (long long)S->bos);
    okv_buf_puts(b, "\"eos_token_id\":[");
    int64_t ids[2 + sizeof EOG_NAMES / sizeof *EOG_NAMES];
    size_t n = 0;
    if (S->eos >= 0) ids[n++] = S->eos;
    if (S->eot >= 0) ids[n++] = S->eot;
    for (size_t i = 0; i < sizeof EOG_NAMES / sizeof *EOG_NAMES; i++) {
        int32_t id = tokmap_get(&S->map, EOG_NAMES[i], strlen(EOG_NAMES[i]));
        if (id >= 0 && S->type[id] == OKV_GGUF_TOKEN_CONTROL) ids[n++] = id;
    }
    for (size_t i = 0, written = 0; i < n; i++) {
        bool seen = false;
        for (size_t k = 0; k < i; k++) seen |= ids[k] == ids[i];
        if (!seen) okv_buf_printf(b, "%s%lld", written++ ? "," : "", (long long)ids[i]);
    }
    okv_buf_puts(b, "]");
    if (S->pad >= 0) okv_buf_printf(b, ",\"pad_token_id\":%lld", (long long)S->pad);
    okv_buf_puts(b, "}");
}

/* ---- entry point ------------------------------------------------------------------------------- */

static void synth_free(synth *S) {
    if (S->owned)
        for (size_t i = 0; i < S->n; i++) free(S->owned[i]);
    free(S->owned);
    free(S->text);
    free(S->type);
    free(S->map.slots);
}

okv_status okv_gguf_vocab_synthesize(const okv_gguf_vocab *v, okv_gguf_vocab_texts *out, okv_error *err) {
    if (!out) return okv_fail(err, OKV_ERR_INVALID, "GGUF tokenizer: no output");
    memset(out, 0, sizeof *out);
    if (!v) return okv_fail(err, OKV_ERR_INVALID, "GGUF tokenizer: no vocabulary");
    synth S = {.v = v, .err = err};
    okv_buf tj = {0}, tc = {0}, gc = {0};
    okv_status st = pick_kind(&S);
    if (!st) st = check_arrays(&S);
    if (!st) st = build_tokens(&S);
    if (!st) {
        pick_specials(&S);
        st = build_tokenizer_json(&S, &tj);
    }
    if (!st) {
        build_tokenizer_config(&S, &tc);
        build_generation_config(&S, &gc);
        if (tj.oom || tc.oom || gc.oom) st = nomem(&S);
    }
    synth_free(&S);
    if (st) {
        okv_buf_free(&tj);
        okv_buf_free(&tc);
        okv_buf_free(&gc);
        return st;
    }
    *out = (okv_gguf_vocab_texts){tj.data, tj.len, tc.data, tc.len, gc.data, gc.len};
    return OKV_OK;
}
