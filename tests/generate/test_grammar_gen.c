/* Constrained generation end to end. On the real Llama-3 and Gemma-3
 * tokenizers: token bytes (okv_tok_token_bytes) concatenate to the decoded
 * text, and the trie mask equals checking every token one by one from
 * several matcher states. On a generated Llama (random weights, so its free
 * text is garbage) with the Llama-3 tokenizer: sampling at temperature 1
 * under a schema, for several seeds, always yields text that parses and
 * validates (json_validate.h, independent of the matcher), ends as soon as
 * the value closes, and json_object yields an object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json_validate.h"
#include "gen_fixture.h"
#include "offkv_gen.h"
#include "okv_common.h"
#include "okv_test.h"

#define TOKS "../shared/fixtures/tokenizers/"

static char tmpdir[] = "/tmp/okv-grammar-gen-XXXXXX";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static okv_tok *load_tok(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, TOKS "%s/tokenizer.json", dir);
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_load_file(path, &tok, &err), &err);
    return tok;
}

/* Token bytes of an encoding, concatenated, equal its decode (mid-text
 * semantics: the texts start with a character no decoder strips). */
static void check_token_bytes(const okv_tok *tok, const char *text) {
    okv_error err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(okv_tok_encode(tok, text, strlen(text), false, &ids, &n, &err), &err);
    okv_buf cat = {0};
    for (size_t i = 0; i < n; i++) {
        char *b = NULL;
        size_t len = 0;
        CHECK_OK(okv_tok_token_bytes(tok, ids[i], &b, &len, &err), &err);
        okv_buf_put(&cat, b, len);
        free(b);
    }
    CHECKF(cat.len == strlen(text) && !memcmp(cat.data, text, cat.len), "token bytes of '%s' give '%.*s'", text,
           (int)cat.len, cat.data ? cat.data : "");
    okv_buf_free(&cat);
    free(ids);
}

/* The mask from the state after `prefix` equals feeding every token alone. */
static void check_mask(const okv_grammar *g, const okv_grammar_vocab *v, const char *prefix, int *allowed_out) {
    okv_grammar_match *m = NULL, *probe = NULL;
    okv_error err = {0};
    CHECK_OK(okv_grammar_match_create(g, &m, &err), &err);
    CHECK_OK(okv_grammar_match_create(g, &probe, &err), &err);
    CHECKF(okv_grammar_match_feed(m, prefix, strlen(prefix)), "prefix '%s'", prefix);
    int32_t n = okv_grammar_vocab_size(v);
    uint32_t *bits = calloc(((size_t)n + 31) / 32, sizeof *bits);
    double t0 = now();
    CHECK_OK(okv_grammar_mask(m, v, bits, &err), &err);
    double dt = now() - t0;
    int allowed = 0, wrong = 0;
    for (int32_t id = 0; id < n; id++) {
        okv_grammar_match_reset(probe);
        bool ok = okv_grammar_match_feed(probe, prefix, strlen(prefix)) && okv_grammar_match_feed_token(probe, v, id);
        bool bit = bits[id >> 5] >> (id & 31) & 1;
        allowed += bit;
        if (ok != bit && wrong++ < 3) {
            size_t len;
            const char *b = okv_grammar_vocab_token(v, id, &len);
            fprintf(stderr, "prefix '%s': token %d '%.*s' mask %d, alone %d\n", prefix, id, (int)len, b ? b : "", bit, ok);
        }
    }
    CHECKF(wrong == 0, "prefix '%s': %d tokens where the mask and the one-by-one check differ", prefix, wrong);
    printf("mask after %-28s %6d of %d tokens allowed, %.2f ms\n", prefix, allowed, n, dt * 1e3);
    if (allowed_out) *allowed_out = allowed;
    free(bits);
    okv_grammar_match_free(m);
    okv_grammar_match_free(probe);
}

/* One matcher walking a string token by token (its masks come from the
 * cache after the first) gives the masks a fresh matcher computes, also
 * as the string nears its maxLength (where the cache must not serve). */
static void check_cached_masks(const okv_tok *tok, const okv_grammar_vocab *v) {
    const char *schema = "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":60}}";
    okv_grammar *g = NULL;
    okv_grammar_match *walker = NULL, *fresh = NULL;
    okv_error err = {0};
    CHECK_OK(okv_grammar_from_schema(schema, strlen(schema), &g, &err), &err);
    CHECK_OK(okv_grammar_match_create(g, &walker, &err), &err);
    int32_t n = okv_grammar_vocab_size(v);
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *a = calloc(words, sizeof *a), *b = calloc(words, sizeof *b);
    const char *text = "[\"one two three four five six seven eight nine ten eleven twelve\",\"x\"]";
    int32_t *ids = NULL;
    size_t n_ids = 0;
    CHECK_OK(okv_tok_encode(tok, text, strlen(text), false, &ids, &n_ids, &err), &err);
    okv_buf fed = {0};
    int differ = 0, steps = 0;
    for (size_t i = 0; i < n_ids && g && walker; i++) {
        CHECK_OK(okv_grammar_mask(walker, v, a, &err), &err);
        CHECK_OK(okv_grammar_match_create(g, &fresh, &err), &err);
        CHECK(okv_grammar_match_feed(fresh, fed.data ? fed.data : "", fed.len));
        CHECK_OK(okv_grammar_mask(fresh, v, b, &err), &err);
        okv_grammar_match_free(fresh);
        differ += memcmp(a, b, words * sizeof *a) != 0;
        steps++;
        if (!okv_grammar_match_feed_token(walker, v, ids[i])) break;   /* the long string is cut at 60 characters */
        size_t len;
        const char *tb = okv_grammar_vocab_token(v, ids[i], &len);
        okv_buf_put(&fed, tb, len);
    }
    CHECKF(differ == 0 && steps > 10, "%d of %d cached masks differ from fresh ones", differ, steps);
    okv_buf_free(&fed);
    free(ids);
    free(a);
    free(b);
    okv_grammar_match_free(walker);
    okv_grammar_free(g);
}

#define CITY "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"capital\":{\"type\":\"string\"}," \
             "\"pop\":{\"type\":\"number\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"big\",\"old\",\"coastal\"]}}}," \
             "\"required\":[\"name\",\"capital\",\"pop\",\"tags\"],\"additionalProperties\":false}"

static void test_real_tokenizers(void) {
    const char *dirs[] = {"llama3_1", "gemma3"};
    for (int d = 0; d < 2; d++) {
        okv_tok *tok = load_tok(dirs[d]);
        if (!tok) continue;
        check_token_bytes(tok, "{\"name\": \"Caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87\", \"n\": -0.5e3}");
        check_token_bytes(tok, "x  spaced\n\tout \\u00e9");
        okv_grammar_vocab *v = NULL;
        okv_error err = {0};
        double t0 = now();
        CHECK_OK(okv_gen_grammar_vocab(tok, (int32_t)okv_tok_vocab_size(tok), &v, &err), &err);
        printf("%s: vocab of %zu tokens built in %.0f ms\n", dirs[d], okv_tok_vocab_size(tok), (now() - t0) * 1e3);
        okv_grammar *g = NULL;
        CHECK_OK(okv_grammar_from_schema(CITY, strlen(CITY), &g, &err), &err);
        if (v && g) {
            int at_start = 0, in_string = 0, in_enum = 0;
            check_mask(g, v, "", &at_start);
            check_mask(g, v, "{\"", NULL);
            check_mask(g, v, "{\"name\": \"Par", &in_string);
            check_mask(g, v, "{\"name\":\"\xc3", NULL);        /* inside a UTF-8 character */
            check_mask(g, v, "{\"name\":\"a\",\"pop\":-0.", NULL);
            check_mask(g, v, "{\"tags\":[\"co", &in_enum);
            check_mask(g, v, "{\"tags\":[],\"pop\":1", NULL);
            CHECK(at_start >= 1 && at_start < 50);           /* '{' and the few tokens starting with it that fit */
            CHECK(in_string > 1000);                          /* most text tokens fit inside a string */
            CHECK(in_enum >= 1 && in_enum < 20);             /* "astal" and its prefixes */
            check_cached_masks(tok, v);
        }
        okv_grammar_free(g);
        okv_grammar_vocab_free(v);
        okv_tok_free(tok);
    }
}

/* ---- generation on a random-weight Llama -------------------------------------------------- */

typedef struct text_buf { char data[16384]; size_t len; } text_buf;

static void collect(void *ctx, const char *text, size_t len) {
    text_buf *b = ctx;
    if (b->len + len < sizeof b->data) { memcpy(b->data + b->len, text, len); b->len += len; b->data[b->len] = 0; }
}

static char *make_program(void) { return gen_fixture_llama(tmpdir, 11); }

#define SHORT "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24}," \
              "\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":\"integer\"},\"kind\":{\"enum\":[\"a\",\"bb\",3,null]}," \
              "\"list\":{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"maxLength\":6}]}," \
              "\"maxItems\":3},\"inner\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":[\"string\",\"null\"],\"maxLength\":5}}," \
              "\"required\":[\"x\"],\"additionalProperties\":false}},\"required\":[\"name\",\"ok\",\"n\",\"kind\",\"list\",\"inner\"]," \
              "\"additionalProperties\":false}"

/* Generates under grammar g for seed; returns the text's parse (NULL if none). */
static cJSON *generate_one(okv_runner *r, const okv_tok *tok, const okv_grammar *g, const okv_grammar_vocab *v,
                           uint64_t seed, bool must_close, okv_gen_stats *st) {
    okv_error err = {0};
    okv_gen_defaults d;
    CHECK_OK(okv_gen_defaults_get(r, tok, &d, &err), &err);
    okv_gen_options o;
    okv_gen_options_init(&o, &d, 600);
    o.sampling.do_sample = true;
    o.sampling.temperature = 1.0f;
    o.sampling.top_k = 0;
    o.sampling.top_p = 1.0f;
    o.sampling.seed = seed;
    o.grammar = g;
    o.grammar_vocab = v;
    text_buf buf = {0};
    o.on_text = collect;
    o.ctx = &buf;
    int32_t *prompt;
    size_t n;
    CHECK_OK(okv_tok_encode(tok, "Describe a city as JSON:", 24, true, &prompt, &n, &err), &err);
    okv_cache_clear("gram", &err);
    CHECK_OK(okv_generate(r, tok, prompt, n, 0, &o, NULL, st, &err), &err);
    free(prompt);
    cJSON *j = cJSON_ParseWithLength(buf.data, buf.len);
    CHECKF(!must_close || (j != NULL && st->stop == OKV_STOP_EOS), "seed %llu: stop %s after %lld tokens, text '%s'",
           (unsigned long long)seed, okv_stop_reason_name(st->stop), (long long)st->generated_tokens, buf.data);
    if (seed < 3) printf("seed %llu (%lld tokens): %s\n", (unsigned long long)seed, (long long)st->generated_tokens, buf.data);
    return j;
}

static void test_generation(void) {
    char *path = make_program();
    okv_program *p = NULL;
    okv_runner *r = NULL;
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(path, &p, &err), &err);
    if (p) CHECK_OK(okv_cache_install("gram", p, NULL, &err), &err);
    if (p) CHECK_OK(okv_runner_create(p, "gram", NULL, &r, &err), &err);
    tok = load_tok("llama3_1");
    okv_grammar_vocab *v = NULL;
    okv_grammar *g = NULL, *obj = NULL;
    if (r && tok) {
        okv_program_info info;
        okv_program_get_info(p, &info);
        CHECK_OK(okv_gen_grammar_vocab(tok, info.vocab_size, &v, &err), &err);
        CHECK_OK(okv_grammar_from_schema(SHORT, strlen(SHORT), &g, &err), &err);
        CHECK_OK(okv_grammar_json_object(&obj, &err), &err);
    }
    if (v && g && obj) {
        cJSON *schema = cJSON_Parse(SHORT);
        for (uint64_t seed = 0; seed < 6; seed++) {
            okv_gen_stats st;
            cJSON *j = generate_one(r, tok, g, v, seed, true, &st);
            CHECKF(j && jv_valid(j, schema, schema), "seed %llu: the output does not validate", (unsigned long long)seed);
            cJSON_Delete(j);
        }
        for (uint64_t seed = 0; seed < 2; seed++) {
            okv_gen_stats st;
            cJSON *j = generate_one(r, tok, obj, v, 100 + seed, false, &st);   /* free objects may outrun the token limit */
            CHECK(j ? cJSON_IsObject(j) && st.stop == OKV_STOP_EOS : st.stop == OKV_STOP_MAX_TOKENS);
            cJSON_Delete(j);
        }
        cJSON_Delete(schema);
    }
    okv_grammar_free(g);
    okv_grammar_free(obj);
    okv_grammar_vocab_free(v);
    okv_tok_free(tok);
    okv_runner_free(r);
    okv_cache_remove("gram", &err);
    okv_program_free(p);
    free(path);
}

int main(void) {
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_real_tokenizers();
    test_generation();
    okv_test_rm_tree(tmpdir);
    return okv_test_finish();
}
