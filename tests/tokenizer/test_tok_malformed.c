/* test_tok_malformed.c — untrusted tokenizer.json: every broken or
 * unsupported input must fail with a message naming the problem, never
 * crash (this program is also run under ASan/UBSan and valgrind). Also
 * checks API misuse: invalid UTF-8 text, NULL arguments, out-of-range ids. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offkv_tok.h"
#include "okv_common.h"
#include "okv_test.h"

/* A small valid tokenizer.json, ' standing for ". Pieces can be swapped
 * with %s: normalizer, pre_tokenizer, post_processor, decoder, model. */
static const char *BASE =
    "{'version':'1.0','truncation':null,'padding':null,"
    "'added_tokens':[{'id':5,'content':'<s>','special':true,'lstrip':false,'rstrip':false,'normalized':false,'single_word':false}],"
    "'normalizer':%s,'pre_tokenizer':%s,'post_processor':%s,'decoder':%s,'model':%s}";
static const char *NORM = "{'type':'NFC'}";
static const char *PRE =
    "{'type':'Sequence','pretokenizers':[{'type':'Split','pattern':{'Regex':'\\\\s+|\\\\p{L}+'},'behavior':'Isolated','invert':false},"
    "{'type':'ByteLevel','add_prefix_space':false,'use_regex':false}]}";
static const char *POST =
    "{'type':'TemplateProcessing','single':[{'SpecialToken':{'id':'<s>','type_id':0}},{'Sequence':{'id':'A','type_id':0}}],"
    "'special_tokens':{'<s>':{'id':'<s>','ids':[5],'tokens':['<s>']}}}";
static const char *DEC = "{'type':'ByteLevel'}";
static const char *MODEL =
    "{'type':'BPE','vocab':{'a':0,'b':1,'ab':2,'\\u0120':3,'\\u0120a':4},'merges':['a b',['\\u0120','a']]}";

static char *build(const char *norm, const char *pre, const char *post, const char *dec, const char *model) {
    size_t n = strlen(BASE) + strlen(norm) + strlen(pre) + strlen(post) + strlen(dec) + strlen(model) + 1;
    char *s = malloc(n);
    snprintf(s, n, BASE, norm, pre, post, dec, model);
    for (char *p = s; *p; p++)
        if (*p == '\'') *p = '"';
    return s;
}

/* The tokenizer build() describes, loaded (NULL after a reported failure). */
static okv_tok *load_built(const char *norm, const char *pre, const char *post, const char *dec, const char *model) {
    char *j = build(norm, pre, post, dec, model);
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_load_json(j, strlen(j), &tok, &err), &err);
    free(j);
    return tok;
}

/* Loading must fail and the message must contain `want`. */
static void expect_fail(const char *text, size_t len, const char *want, int line) {
    okv_tok *tok = (okv_tok *)1;
    okv_error err = {0};
    okv_status st = okv_tok_load_json(text, len, &tok, &err);
    CHECKF(st != OKV_OK && tok == NULL, "line %d: load unexpectedly succeeded", line);
    CHECKF(strstr(err.message, want) != NULL, "line %d: message \"%s\" lacks \"%s\"", line, err.message, want);
    if (st == OKV_OK) okv_tok_free(tok);
}
#define FAIL_WITH(json, want)                                                                   \
    do {                                                                                        \
        char *j_ = (json);                                                                      \
        expect_fail(j_, strlen(j_), want, __LINE__);                                            \
        free(j_);                                                                               \
    } while (0)

static void test_base_is_valid(void) {
    char *j = build(NORM, PRE, POST, DEC, MODEL);
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_load_json(j, strlen(j), &tok, &err), &err);
    if (tok) {
        int32_t *ids;
        size_t n;
        CHECK_OK(okv_tok_encode(tok, "ab a", 4, true, &ids, &n, &err), &err);
        /* <s>, "ab" -> a b -> ab, " " -> Ġ, "a" */
        CHECK(n == 4 && ids[0] == 5 && ids[1] == 2 && ids[2] == 3 && ids[3] == 0);
        free(ids);
        okv_tok_free(tok);
    }
    free(j);
}

static void test_unsupported_types(void) {
    FAIL_WITH(build("{'type':'BertNormalizer'}", PRE, POST, DEC, MODEL), "unsupported normalizer type \"BertNormalizer\"");
    FAIL_WITH(build("{'type':'Sequence','normalizers':[{'type':'NFC'},{'type':'Lowercase'}]}", PRE, POST, DEC, MODEL),
              "unsupported normalizer type \"Lowercase\"");
    FAIL_WITH(build(NORM, "{'type':'Whitespace'}", POST, DEC, MODEL), "unsupported pre_tokenizer type \"Whitespace\"");
    FAIL_WITH(build(NORM, PRE, "{'type':'RobertaProcessing'}", DEC, MODEL), "unsupported post_processor type \"RobertaProcessing\"");
    FAIL_WITH(build(NORM, PRE, POST, "{'type':'WordPiece'}", MODEL), "unsupported decoder type \"WordPiece\"");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'Unigram','vocab':[]}"), "unsupported model type \"Unigram\"");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'WordPiece','vocab':{}}"), "unsupported model type \"WordPiece\"");
}

static void test_bad_fields(void) {
    FAIL_WITH(build(NORM, "{'type':'Split','pattern':{'Regex':'(abc'},'behavior':'Isolated'}", POST, DEC, MODEL),
              "invalid regex");
    FAIL_WITH(build(NORM, "{'type':'Split','pattern':{'Regex':'a'},'behavior':'Sideways'}", POST, DEC, MODEL),
              "unknown behavior \"Sideways\"");
    FAIL_WITH(build(NORM, "{'type':'Split','pattern':'a','behavior':'Isolated'}", POST, DEC, MODEL), "\"pattern\"");
    FAIL_WITH(build(NORM, "{'type':'Split','pattern':{'Regex':'a'},'behavior':'Isolated','invert':'no'}", POST, DEC, MODEL),
              "\"invert\" must be true or false");
    FAIL_WITH(build(NORM, "{'type':'Metaspace','replacement':'ab'}", POST, DEC, MODEL), "exactly one character");
    FAIL_WITH(build(NORM, "{'type':'Metaspace','replacement':'x','prepend_scheme':'sometimes'}", POST, DEC, MODEL),
              "prepend_scheme");
    FAIL_WITH(build(NORM, "{'type':'Sequence','pretokenizers':{}}", POST, DEC, MODEL), "\"pretokenizers\" must be an array");
    FAIL_WITH(build("{'type':'Replace','pattern':{'String':'a'},'content':7}", PRE, POST, DEC, MODEL), "\"content\" must be a string");
    FAIL_WITH(build("{'kind':'NFC'}", PRE, POST, DEC, MODEL), "no string \"type\"");
    FAIL_WITH(build("[]", PRE, POST, DEC, MODEL), "normalizer must be an object");
    FAIL_WITH(build(NORM, PRE, POST, "{'type':'Strip','content':' ','start':-1}", MODEL), "\"start\"");
    FAIL_WITH(build(NORM, PRE, "{'type':'TemplateProcessing','single':[{'SpecialToken':{'id':'<t>','type_id':0}}],'special_tokens':{}}", DEC, MODEL),
              "special token \"<t>\"");
    FAIL_WITH(build(NORM, PRE, "{'type':'TemplateProcessing','single':[{'SpecialToken':{'id':'<s>'}}],'special_tokens':{'<s>':{'ids':[999]}}}", DEC, MODEL),
              "out of range");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':[],'merges':[]}"), "model.vocab must be an object");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':'0'},'merges':[]}"), "model.vocab[\"a\"]");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':-1},'merges':[]}"), "model.vocab[\"a\"]");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':1e12},'merges':[]}"), "model.vocab[\"a\"]");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0.5},'merges':[]}"), "model.vocab[\"a\"]");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':{}}"), "model.merges must be an array");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':[3]}"), "model.merges[0]");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':['a']}"), "model.merges[0]");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':[['a']]}"), "model.merges[0]");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':['a c']}"), "token \"c\" is not in the vocab");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':['a a']}"), "merged token \"aa\" is not in the vocab");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':[],'unk_token':'<unk>'}"), "unk_token");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':[],'byte_fallback':1}"), "\"byte_fallback\"");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'a':0},'merges':[],'dropout':0.1}"), "dropout");
    FAIL_WITH(strdup("{\"model\":{\"vocab\":{},\"merges\":[]}}"), "vocab is empty");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "[1,2]"), "\"model\" must be an object");
    FAIL_WITH(build(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{'\xFF':0},'merges':[]}"), "not valid UTF-8");
}

static void test_bad_documents(void) {
    expect_fail("", 0, "invalid JSON", __LINE__);
    expect_fail("[]", 2, "top level must be a JSON object", __LINE__);
    expect_fail("null", 4, "top level must be a JSON object", __LINE__);
    expect_fail("{}", 2, "missing \"model\"", __LINE__);
    expect_fail("{\"model\":{}", 11, "invalid JSON", __LINE__);
    char *j = build(NORM, PRE, POST, DEC, MODEL);
    FAIL_WITH(strdup("{\"added_tokens\":7,\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}"), "\"added_tokens\" must be an array");
    FAIL_WITH(strdup("{\"added_tokens\":[{\"id\":\"1\",\"content\":\"x\"}],\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}"),
              "added_tokens[0]: id");
    FAIL_WITH(strdup("{\"added_tokens\":[{\"id\":1,\"content\":5}],\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}"),
              "added_tokens[0] field \"content\"");
    FAIL_WITH(strdup("{\"added_tokens\":[{\"id\":1,\"content\":\"x\",\"special\":\"yes\"}],\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}"),
              "\"special\" must be true or false");
    FAIL_WITH(strdup("{\"truncation\":{\"max_length\":5},\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}"), "truncation");
    /* every truncation of a valid file fails cleanly */
    size_t len = strlen(j);
    int truncated_ok = 1;
    for (size_t k = 0; k < len; k++) {
        okv_tok *tok = NULL;
        okv_error err = {0};
        if (okv_tok_load_json(j, k, &tok, &err) == OKV_OK) { truncated_ok = 0; okv_tok_free(tok); }
        else if (!err.message[0]) truncated_ok = 0;
    }
    CHECKF(truncated_ok, "a truncated tokenizer.json loaded or failed without a message");
    /* deep nesting is refused */
    char deep[4096] = "";
    for (int d = 0; d < 40; d++) strcat(deep, "{'type':'Sequence','normalizers':[");
    strcat(deep, "{'type':'NFC'}");
    for (int d = 0; d < 40; d++) strcat(deep, "]}");
    FAIL_WITH(build(deep, PRE, POST, DEC, MODEL), "too deep");
    free(j);
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Random byte mutations: load either fails with a message or succeeds, and
 * a loaded tokenizer encodes/decodes/streams without crashing. */
static void test_mutations(void) {
    char *j = build(NORM, PRE, POST, DEC, MODEL);
    size_t len = strlen(j);
    static const char alphabet[] = "{}[]\",:0123456789-.eEtrufalsn\\u aAbB\xC3\xA9\xFF";
    uint64_t rng = 7;
    int loaded = 0, failed_silently = 0;
    for (int it = 0; it < 3000; it++) {
        char *m = malloc(len + 1);
        memcpy(m, j, len + 1);
        int edits = 1 + (int)(rng_next(&rng) % 3);
        for (int e = 0; e < edits; e++) m[rng_next(&rng) % len] = alphabet[rng_next(&rng) % (sizeof alphabet - 1)];
        okv_tok *tok = NULL;
        okv_error err = {0};
        if (okv_tok_load_json(m, len, &tok, &err) == OKV_OK) {
            loaded++;
            int32_t *ids = NULL;
            size_t n = 0;
            if (okv_tok_encode(tok, "ab a\xC3\xA9 <s>b", 11, true, &ids, &n, &err) == OKV_OK) {
                char *text = NULL;
                size_t tl;
                if (okv_tok_decode(tok, ids, n, false, &text, &tl, &err) == OKV_OK) free(text);
                free(ids);
            }
        } else if (!err.message[0]) failed_silently++;
        okv_tok_free(tok);
        free(m);
    }
    CHECKF(failed_silently == 0, "%d mutated files failed without a message", failed_silently);
    CHECK(loaded > 0 && loaded < 3000); /* the mutations hit both kinds */
    free(j);
}

static void test_api_misuse(void) {
    okv_tok *tok = load_built(NORM, PRE, POST, DEC, MODEL);
    okv_error err = {0};
    if (!tok) return;
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(okv_tok_encode(tok, "a\xFF" "b", 3, false, &ids, &n, &err) == OKV_ERR_INVALID);
    CHECK(strstr(err.message, "not valid UTF-8 at byte 1") != NULL);
    CHECK(okv_tok_encode(tok, "\xED\xA0\x80", 3, false, &ids, &n, &err) == OKV_ERR_INVALID); /* surrogate */
    CHECK(okv_tok_encode(tok, NULL, 3, false, &ids, &n, &err) == OKV_ERR_INVALID);
    CHECK_OK(okv_tok_encode(tok, NULL, 0, false, &ids, &n, &err), &err);
    CHECK(n == 0 && ids != NULL);
    free(ids);
    /* ids without a token are skipped, like HF */
    static const int32_t bad[] = {-7, 0, 99999, 1, 2147483647};
    char *text = NULL;
    size_t tl = 0;
    CHECK_OK(okv_tok_decode(tok, bad, 5, false, &text, &tl, &err), &err);
    CHECK(text && strcmp(text, "ab") == 0);
    free(text);
    okv_tok_stream *s = NULL;
    CHECK_OK(okv_tok_stream_create(tok, false, &s, &err), &err);
    const char *t;
    CHECK_OK(okv_tok_stream_push(s, -1, &t, &tl, &err), &err);
    CHECK(tl == 0);
    CHECK_OK(okv_tok_stream_push(s, 4, &t, &tl, &err), &err);
    CHECK(tl == 2 && memcmp(t, " a", 2) == 0);
    okv_tok_stream_free(s);
    CHECK(okv_tok_id_to_token(tok, -1) == NULL);
    CHECK(!okv_tok_is_special(tok, 1 << 30));
    CHECK(okv_tok_token_to_id(tok, NULL) == -1);
    okv_tok_free(tok);
    okv_tok_free(NULL);
    okv_tok_stream_free(NULL);
    CHECK(okv_tok_load_file("/nonexistent/tokenizer.json", &tok, &err) == OKV_ERR_IO && tok == NULL);
    CHECK(strstr(err.message, "/nonexistent/tokenizer.json") != NULL);
}

/* Found 5: an empty BPE vocabulary (one added token) gave words with no
 * ids, and the word cache passed NULL to memcpy (UBSan). */
static void test_empty_vocab(void) {
    okv_tok *tok = load_built(NORM, PRE, POST, DEC, "{'type':'BPE','vocab':{},'merges':[]}");
    okv_error err = {0};
    if (!tok) return;
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(okv_tok_encode(tok, "ab <s> ab ab", 12, false, &ids, &n, &err), &err);
    CHECK(n == 1 && ids && ids[0] == 5); /* unknown pieces are dropped (no unk), like HF */
    free(ids);
    okv_tok_free(tok);
}

static char *repeat(char c, size_t n) {
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = 0;
    return s;
}

/* A Replace normalizer/decoder with a long content multiplied the text
 * (1000 chars: a 100 KB prompt became 2.3 GB through a Sequence). */
static void test_expansion_bounds(void) {
    char *content = repeat('c', 1000), norm[1200], dec[1200];
    snprintf(norm, sizeof norm, "{'type':'Sequence','normalizers':[{'type':'Replace','pattern':{'String':'a'},'content':'%s'},"
             "{'type':'Replace','pattern':{'String':'c'},'content':'%s'}]}", content, "cc");
    snprintf(dec, sizeof dec, "{'type':'Replace','pattern':{'String':'a'},'content':'%s'}", content);
    free(content);
    okv_tok *tok = load_built(norm, PRE, POST, dec, MODEL);
    okv_error err = {0};
    if (!tok) return;
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = repeat('a', 1000);
    okv_status st = okv_tok_encode(tok, text, 1000, false, &ids, &n, &err);
    CHECKF(st == OKV_ERR_CAPACITY && strstr(err.message, "Replace normalizer"), "%d %s", st, err.message);
    free(ids);
    ids = NULL;
    CHECK_OK(okv_tok_encode(tok, "b b", 3, false, &ids, &n, &err), &err); /* short text is fine */
    free(ids);
    free(text);
    int32_t *many = calloc(1000, sizeof *many); /* id 0 = "a" */
    char *out = NULL;
    size_t len = 0;
    st = okv_tok_decode(tok, many, 1000, false, &out, &len, &err);
    CHECKF(st == OKV_ERR_CAPACITY && strstr(err.message, "Replace decoder"), "%d %s", st, err.message);
    free(out);
    out = NULL;
    CHECK_OK(okv_tok_decode(tok, many, 1, false, &out, &len, &err), &err);
    CHECK(len == 1000);
    free(out);
    free(many);
    okv_tok_free(tok);
}

int main(void) {
    test_base_is_valid();
    test_unsupported_types();
    test_bad_fields();
    test_bad_documents();
    test_mutations();
    test_api_misuse();
    test_empty_vocab();
    test_expansion_bounds();
    return okv_test_finish();
}
