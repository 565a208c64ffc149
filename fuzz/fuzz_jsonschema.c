/* fuzz_jsonschema.c — libFuzzer target: a JSON Schema as response_format
 * would bring it, then text run through its matcher. The input is the
 * schema up to the first NUL byte, and after it the bytes to feed. Checks:
 * a refusal carries a message; byte-by-byte feeding and feeding the taken
 * prefix at once agree; finished implies accepting; the token mask over a
 * small vocabulary (every single byte plus multi-byte JSON pieces) equals
 * feeding each token alone, at every step. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "offkv_grammar.h"

static const char *const pieces[] = {"{\"", "\":", "\",\"", "\"}", "true", "false", "null", "12", "-0.5e3", "\\u00e9",
                                     "\xc3\xa9", "\xe2\x82", "  ", "\n  ", "[]", "{}", "\"a\"", ",", "]}", "0", ".5"};
#define N_PIECES (sizeof pieces / sizeof *pieces)
#define N_TOKENS (256 + N_PIECES)

static okv_grammar_vocab *small_vocab(void) {
    const char *bytes[N_TOKENS];
    size_t lens[N_TOKENS];
    static char single[256];
    for (int i = 0; i < 256; i++) {
        single[i] = (char)i;
        bytes[i] = &single[i];
        lens[i] = 1;
    }
    for (size_t k = 0; k < N_PIECES; k++) {
        bytes[256 + k] = pieces[k];
        lens[256 + k] = strlen(pieces[k]);
    }
    okv_grammar_vocab *v = NULL;
    okv_error err = {0};
    okv_grammar_vocab_create((int32_t)N_TOKENS, bytes, lens, &v, &err);
    return v;
}

/* The mask from m's state equals trying every token on a fresh copy of the text so far. */
static void check_mask(const okv_grammar *g, okv_grammar_match *m, const okv_grammar_vocab *v, const uint8_t *text, size_t n) {
    uint32_t bits[(N_TOKENS + 31) / 32];
    okv_error err = {0};
    if (okv_grammar_mask(m, v, bits, &err)) return;
    okv_grammar_match *probe = NULL;
    if (okv_grammar_match_create(g, &probe, &err)) return;
    for (int32_t id = 0; id < (int32_t)N_TOKENS; id++) {
        okv_grammar_match_reset(probe);
        okv_fuzz_require(okv_grammar_match_feed(probe, (const char *)text, n), "the text so far feeds again");
        bool alone = okv_grammar_match_feed_token(probe, v, id);
        okv_fuzz_require(alone == ((bits[id >> 5] >> (id & 31)) & 1), "mask == token fed alone");
    }
    okv_grammar_match_free(probe);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t schema_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : data + size;
    size_t text_len = nul ? size - schema_len - 1 : 0;
    okv_grammar *g = NULL;
    okv_error err = {0};
    if (okv_grammar_from_schema((const char *)data, schema_len, &g, &err)) {
        okv_fuzz_require(err.message[0] != 0 && g == NULL, "a refusal carries a message");
        return 0;
    }
    okv_grammar_vocab *v = small_vocab();
    okv_grammar_match *m = NULL, *whole = NULL;
    if (v && !okv_grammar_match_create(g, &m, &err) && !okv_grammar_match_create(g, &whole, &err)) {
        size_t taken = 0;
        while (taken < text_len && taken < 4096) {
            if (taken % 7 == 0) check_mask(g, m, v, text, taken);
            if (!okv_grammar_match_feed(m, (const char *)text + taken, 1)) break;
            taken++;
        }
        okv_fuzz_require(okv_grammar_match_feed(whole, (const char *)text, taken), "the taken prefix feeds at once");
        okv_fuzz_require(okv_grammar_match_accepting(whole) == okv_grammar_match_accepting(m), "same verdict at once");
        okv_fuzz_require(!okv_grammar_match_finished(m) || okv_grammar_match_accepting(m), "finished implies accepting");
    }
    okv_grammar_match_free(m);
    okv_grammar_match_free(whole);
    okv_grammar_vocab_free(v);
    okv_grammar_free(g);
    return 0;
}
