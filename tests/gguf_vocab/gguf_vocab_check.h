/* gguf_vocab_check.h — what both GGUF vocab tests share: the tokenizer
 * fixture helpers (tests/tokenizer/tok_fixture_check.h) plus counting how
 * many lines of a fixture .jsonl a synthesised tokenizer reproduces. */
#ifndef GGUF_VOCAB_CHECK_H
#define GGUF_VOCAB_CHECK_H
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../tokenizer/tok_fixture_check.h"
#pragma GCC diagnostic warning "-Wunused-function"

#include "offkv_chat.h"
#include "okv_gguf_vocab.h"

static okv_tok *load_texts(const okv_gguf_vocab_texts *t) {
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_load_json(t->tokenizer_json, t->tokenizer_json_len, &tok, &err), &err);
    return tok;
}


/* Counts of fixture lines the tokenizer reproduces exactly. */
typedef struct case_counts {
    const okv_tok *tok;
    int lines, ids_ok, dec_ok, dec_skip_ok;
    bool verbose;
    int beyond_vocab; /* lines holding an id the tokenizer does not have */
} case_counts;

static bool decode_is(const okv_tok *tok, const int32_t *ids, size_t n, bool skip, const char *want, size_t want_len) {
    char *text = NULL;
    size_t len = 0;
    okv_error err = {0};
    if (okv_tok_decode(tok, ids, n, skip, &text, &len, &err)) return false;
    bool same = len == want_len && !memcmp(text, want, len);
    free(text);
    return same;
}

static void count_case(const cJSON *j, int line, void *ctx) {
    case_counts *c = ctx;
    size_t tl, dl, dsl, nwant, n = 0;
    char *text = json_string_field("text", &tl);
    char *dec = json_string_field("decoded", &dl), *dec_skip = json_string_field("decoded_skip_special", &dsl);
    int32_t *want = json_ids(cJSON_GetObjectItemCaseSensitive(j, "ids"), &nwant), *ids = NULL;
    okv_error err = {0};
    c->lines++;
    for (size_t i = 0; i < nwant; i++)
        if ((size_t)want[i] >= okv_tok_vocab_size(c->tok)) { c->beyond_vocab++; nwant = 0; break; }
    if (!nwant && !text) { free(want); free(dec); free(dec_skip); return; }
    if (text) {
        bool add = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "add_special_tokens"));
        if (!okv_tok_encode(c->tok, text, tl, add, &ids, &n, &err) && ids_equal(ids, n, want, nwant)) c->ids_ok++;
        else if (c->verbose) { fprintf(stderr, "line %d \"%.60s\" differs\n", line, text); print_ids("got ", ids, n); print_ids("want", want, nwant); }
    }
    if (dec && decode_is(c->tok, want, nwant, false, dec, dl)) c->dec_ok++;
    if (dec_skip && decode_is(c->tok, want, nwant, true, dec_skip, dsl)) c->dec_skip_ok++;
    free(ids);
    free(want);
    free(text);
    free(dec);
    free(dec_skip);
}

static case_counts run_cases(const okv_tok *tok, const char *dir, const char *file) {
    char path[256];
    snprintf(path, sizeof path, FIXTURES "%s/%s", dir, file);
    case_counts c = {tok, 0, 0, 0, 0, true, 0};
    for_each_line(path, count_case, &c);
    printf("%s/%s: %d lines, ids %d, decoded %d, decoded_skip_special %d, lines with ids beyond the vocab %d\n", dir, file,
           c.lines, c.ids_ok, c.dec_ok, c.dec_skip_ok, c.beyond_vocab);
    return c;
}

static void chat_ids_line(const cJSON *j, int line, void *ctx) {
    case_counts *c = ctx;
    size_t tl, nwant, n = 0;
    const cJSON *want_j = cJSON_GetObjectItemCaseSensitive(j, "ids");
    char *text = json_string_field("rendered", &tl);
    if (text && cJSON_IsArray(want_j)) {
        int32_t *want = json_ids(want_j, &nwant), *ids = NULL;
        okv_error err = {0};
        c->lines++;
        if (!okv_tok_encode(c->tok, text, tl, false, &ids, &n, &err) && ids_equal(ids, n, want, nwant)) c->ids_ok++;
        free(ids);
        free(want);
    }
    free(text);
}

#endif
