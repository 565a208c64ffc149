/* fuzz_tokenizer.c — libFuzzer target: a tokenizer.json, optionally followed
 * by a NUL byte and a text to encode. okv_tok_load_json, then encode a few
 * fixed strings and that text (with and without special tokens), decode the
 * ids (keeping and skipping specials), stream-decode them, and decode ids
 * that have no token. Checks the documented promise that the streamed pieces
 * concatenate to okv_tok_decode's text. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "offkv_tok.h"

static const char *const TEXTS[] = {
    "Hello world",
    " h\xc3\xa9llo  w\xc3\xb6rld 123 45678\n\n\tx",
    "<|begin_of_text|><s>hi</s><|eot_id|><start_of_turn>",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 caf\xc3\xa9",
    "",
};

static void stream_matches_decode(const okv_tok *tok, const int32_t *ids, size_t n, bool skip) {
    okv_error err = {0};
    char *whole = NULL;
    size_t whole_len = 0;
    if (okv_tok_decode(tok, ids, n, skip, &whole, &whole_len, &err)) return;
    okv_tok_stream *s = NULL;
    if (okv_tok_stream_create(tok, skip, &s, &err)) { free(whole); return; }
    char *cat = malloc(whole_len + 1);
    size_t cat_len = 0;
    bool ok = cat != NULL;
    for (size_t i = 0; ok && i <= n; i++) {
        const char *piece;
        size_t len;
        okv_status st = i < n ? okv_tok_stream_push(s, ids[i], &piece, &len, &err)
                              : okv_tok_stream_flush(s, &piece, &len, &err);
        if (st) { ok = false; break; }
        okv_fuzz_require(cat_len + len <= whole_len, "stream pieces are no longer than decode");
        memcpy(cat + cat_len, piece, len);
        cat_len += len;
    }
    if (ok) okv_fuzz_require(cat_len == whole_len && !memcmp(cat, whole, cat_len), "stream == decode");
    free(cat);
    free(whole);
    okv_tok_stream_free(s);
}

static void encode_decode(const okv_tok *tok, const char *text, size_t len) {
    for (int special = 0; special < 2; special++) {
        okv_error err = {0};
        int32_t *ids = NULL;
        size_t n = 0;
        if (okv_tok_encode(tok, text, len, special, &ids, &n, &err) == OKV_OK) {
            for (size_t i = 0; i < n; i++)
                okv_fuzz_require(ids[i] >= 0 && (size_t)ids[i] < okv_tok_vocab_size(tok), "encoded ids < vocab size");
            stream_matches_decode(tok, ids, n, false);
            stream_matches_decode(tok, ids, n, true);
        }
        free(ids);
    }
}

static void lookups(const okv_tok *tok) {
    size_t v = okv_tok_vocab_size(tok);
    int32_t odd[] = {0, 1, 2, (int32_t)(v > 0 ? v - 1 : 0), (int32_t)v, -1, INT32_MAX, INT32_MIN};
    size_t n = sizeof odd / sizeof odd[0];
    for (size_t i = 0; i < n; i++) {
        const char *t = okv_tok_id_to_token(tok, odd[i]);
        if (t) okv_fuzz_require(okv_tok_token_to_id(tok, t) >= 0, "an id's token maps back to an id");
        (void)okv_tok_is_special(tok, odd[i]);
    }
    stream_matches_decode(tok, odd, n, false);
    stream_matches_decode(tok, odd, n, true);
    (void)okv_tok_token_to_id(tok, "<s>");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    okv_tok *tok = NULL;
    okv_error err = {0};
    if (okv_tok_load_json((const char *)data, json_len, &tok, &err)) {
        okv_fuzz_require(err.message[0] != 0, "a refusal carries a message");
        return 0;
    }
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) encode_decode(tok, TEXTS[i], strlen(TEXTS[i]));
    if (nul) {
        char *text = okv_fuzz_cstr(nul + 1, size - json_len - 1);
        encode_decode(tok, text, size - json_len - 1);
        free(text);
    }
    lookups(tok);
    okv_tok_free(tok);
    return 0;
}
