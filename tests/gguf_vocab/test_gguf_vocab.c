/* test_gguf_vocab.c — tokenizers synthesised from GGUF vocab arrays give the
 * ids HF gives.
 *
 * 1. Without any GGUF: the arrays a GGUF would hold are rebuilt from the real
 *    Llama-3 and Qwen3 tokenizer.json fixtures (tokens by id, merges as
 *    "a b", added tokens as CONTROL/USER_DEFINED) and the synthesised
 *    tokenizer must reproduce those fixtures' cases (pre-tokenizers
 *    llama-bpe and qwen2).
 * 2. A small SentencePiece vocab whose merge order is worked out by hand
 *    from HF's converter rule, and every synthesis error class.
 * 3. okv_gguf_tokenizer_texts on tiny GGUF images written here: the keys are
 *    read with their types checked, errors name the key.
 * The real GGUFs are checked in test_gguf_vocab_real.c. */
#include <math.h>
#include "gguf_vocab_check.h"
#include "okv_gguf.h"

/* ---- 1. vocab arrays rebuilt from a tokenizer.json fixture ------------------------------- */

typedef struct fixture_vocab {
    cJSON *root;
    okv_gguf_vocab v;
    okv_gguf_span *tokens, *merges;
    int32_t *types;
    char **merge_text;
} fixture_vocab;

static void fixture_vocab_free(fixture_vocab *f) {
    for (size_t i = 0; i < f->v.n_merges; i++) free(f->merge_text[i]);
    free(f->merge_text);
    free(f->tokens);
    free(f->merges);
    free(f->types);
    cJSON_Delete(f->root);
}

static bool fixture_vocab_load(const char *dir, fixture_vocab *f) {
    char path[256];
    okv_error err = {0};
    memset(f, 0, sizeof *f);
    snprintf(path, sizeof path, FIXTURES "%s/tokenizer.json", dir);
    CHECK_OK(okv_json_load(path, &f->root, &err), &err);
    if (!f->root) return false;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(f->root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(f->root, "added_tokens"), *it;
    size_t n = 0;
    cJSON_ArrayForEach(it, vocab) if ((size_t)it->valuedouble + 1 > n) n = (size_t)it->valuedouble + 1;
    cJSON_ArrayForEach(it, added) {
        size_t id = (size_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        if (id + 1 > n) n = id + 1;
    }
    f->tokens = calloc(n, sizeof *f->tokens);
    f->types = calloc(n, sizeof *f->types);
    cJSON_ArrayForEach(it, vocab) {
        f->tokens[(size_t)it->valuedouble] = (okv_gguf_span){it->string, strlen(it->string)};
        f->types[(size_t)it->valuedouble] = OKV_GGUF_TOKEN_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {
        size_t id = (size_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *c = okv_json_str(it, "content");
        f->tokens[id] = (okv_gguf_span){c, strlen(c)};
        f->types[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) ? OKV_GGUF_TOKEN_CONTROL
                                                                                     : OKV_GGUF_TOKEN_USER_DEFINED;
    }
    size_t nm = (size_t)cJSON_GetArraySize(merges), k = 0;
    f->merges = calloc(nm, sizeof *f->merges);
    f->merge_text = calloc(nm, sizeof *f->merge_text);
    cJSON_ArrayForEach(it, merges) { /* GGUF spells every merge "a b" */
        const char *a, *b;
        if (cJSON_IsString(it)) { f->merge_text[k] = okv_strdup(it->valuestring); }
        else {
            a = it->child->valuestring;
            b = it->child->next->valuestring;
            f->merge_text[k] = malloc(strlen(a) + strlen(b) + 2);
            sprintf(f->merge_text[k], "%s %s", a, b);
        }
        f->merges[k] = (okv_gguf_span){f->merge_text[k], strlen(f->merge_text[k])};
        k++;
    }
    f->v = okv_gguf_vocab_empty();
    f->v.model = (okv_gguf_span){"gpt2", 4};
    f->v.n_tokens = n;
    f->v.tokens = f->tokens;
    f->v.n_token_types = n;
    f->v.token_types = f->types;
    f->v.n_merges = nm;
    f->v.merges = f->merges;
    return true;
}

static void check_fixture_as_gguf(const char *dir, const char *pre, int64_t bos) {
    fixture_vocab f;
    if (!fixture_vocab_load(dir, &f)) return;
    f.v.pre = (okv_gguf_span){pre, strlen(pre)};
    if (bos >= 0) { f.v.bos_id = bos; f.v.add_bos = 1; }
    okv_gguf_vocab_texts t;
    okv_error err = {0};
    CHECK_OK(okv_gguf_vocab_synthesize(&f.v, &t, &err), &err);
    okv_tok *tok = t.tokenizer_json ? load_texts(&t) : NULL;
    if (tok) {
        static const char *files[] = {"cases.jsonl", "llamacpp_cases.jsonl"};
        for (int i = 0; i < 2; i++) {
            case_counts c = run_cases(tok, dir, files[i]);
            CHECKF(c.lines >= 46 && c.ids_ok == c.lines && c.dec_ok == c.lines && c.dec_skip_ok == c.lines,
                   "%s %s as GGUF pre %s: %d/%d/%d of %d", dir, files[i], pre, c.ids_ok, c.dec_ok, c.dec_skip_ok, c.lines);
        }
        char path[256];
        snprintf(path, sizeof path, FIXTURES "%s/chat_cases.jsonl", dir);
        case_counts c = {tok, 0, 0, 0, 0, false, 0};
        for_each_line(path, chat_ids_line, &c);
        printf("%s/chat_cases.jsonl: %d rendered prompts, ids %d\n", dir, c.lines, c.ids_ok);
        CHECKF(c.lines >= 20 && c.ids_ok == c.lines, "%s chat ids %d of %d", dir, c.ids_ok, c.lines);
    }
    okv_tok_free(tok);
    okv_gguf_vocab_texts_free(&t);
    fixture_vocab_free(&f);
}

/* ---- 2. a hand-checked SentencePiece vocab and the error classes ----------------------- */

#define SPAN(s) ((okv_gguf_span){(s), sizeof(s) - 1})

/* A vocab small enough to order its merges by hand with HF's rule: score of
 * the merged piece desc, then characters of the left part desc. */
static void check_small_spm(void) {
    static const okv_gguf_span tokens[] = {
        SPAN("<unk>"), SPAN("<s>"), SPAN("</s>"), SPAN("\xe2\x96\x81"), SPAN("a"), SPAN("b"),
        SPAN("ab"), SPAN("\xe2\x96\x81" "a"), SPAN("\xe2\x96\x81" "ab"), SPAN("<0x41>"), SPAN("  "),
    };
    static const float scores[] = {0, 0, 0, -5, -6, -7, -2, -1, -3, 0, -1000};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 4};
    okv_gguf_vocab v = okv_gguf_vocab_empty();
    v.model = SPAN("llama");
    v.n_tokens = v.n_scores = v.n_token_types = sizeof tokens / sizeof *tokens;
    v.tokens = tokens;
    v.scores = scores;
    v.token_types = types;
    v.unk_id = 0;
    v.bos_id = 1;
    v.eos_id = 2;
    v.add_space_prefix = 0;
    okv_gguf_vocab_texts t;
    okv_error err = {0};
    CHECK_OK(okv_gguf_vocab_synthesize(&v, &t, &err), &err);
    if (!t.tokenizer_json) return;
    /* Candidates: "ab"=a+b (piece score -2), "▁a"=▁+a (-1), "▁ab"=▁a+b and ▁+ab
     * (-3; the longer left part first), "▁▁" (user-defined, written back as
     * two U+2581, score 0 -> first) = ▁+▁. */
    const char *want = "\"merges\":[[\"\xe2\x96\x81\",\"\xe2\x96\x81\"],[\"\xe2\x96\x81\",\"a\"],[\"a\",\"b\"],"
                       "[\"\xe2\x96\x81" "a\",\"b\"],[\"\xe2\x96\x81\",\"ab\"]]";
    CHECKF(strstr(t.tokenizer_json, want) != NULL, "small SentencePiece merges: %s", strstr(t.tokenizer_json, "\"merges\""));
    okv_tok *tok = load_texts(&t);
    if (tok) {
        int32_t *ids = NULL;
        size_t n = 0;
        /* " ab" -> ▁ab; "A" is not in the vocab as a piece -> its byte token;
         * BOS is added (add_bos absent = SentencePiece default) */
        CHECK_OK(okv_tok_encode(tok, " abA", 4, true, &ids, &n, &err), &err);
        const int32_t want_ids[] = {1, 8, 9};
        CHECKF(ids_equal(ids, n, want_ids, 3), "small spm encode");
        if (n != 3) print_ids("got", ids, n);
        free(ids);
        CHECK(okv_tok_is_special(tok, 1) && !okv_tok_is_special(tok, 10));
        okv_tok_free(tok);
    }
    CHECK(t.tokenizer_config_json && strstr(t.tokenizer_config_json, "\"bos_token\":\"<s>\"") &&
          strstr(t.tokenizer_config_json, "\"add_bos_token\":true"));
    CHECK(t.generation_config_json && strstr(t.generation_config_json, "\"eos_token_id\":[2]"));
    okv_gguf_vocab_texts_free(&t);

    /* Llama-2 style (add_space_prefix): "ab" is read as " ab" -> ▁ab, and
     * decoding strips that one leading space again */
    v.add_space_prefix = 1;
    v.add_bos = 0;
    CHECK_OK(okv_gguf_vocab_synthesize(&v, &t, &err), &err);
    tok = t.tokenizer_json ? load_texts(&t) : NULL;
    if (tok) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *text = NULL;
        CHECK_OK(okv_tok_encode(tok, "ab", 2, true, &ids, &n, &err), &err);
        CHECKF(n == 1 && ids[0] == 8, "add_space_prefix encode: n=%zu", n);
        CHECK_OK(okv_tok_decode(tok, ids, n, false, &text, &n, &err), &err);
        CHECKF(text && !strcmp(text, "ab"), "add_space_prefix decode \"%s\"", text ? text : "");
        free(ids);
        free(text);
        okv_tok_free(tok);
    }
    CHECK(t.tokenizer_config_json && strstr(t.tokenizer_config_json, "\"add_bos_token\":false"));
    okv_gguf_vocab_texts_free(&t);
}

static void expect_error(const okv_gguf_vocab *v, const char *needle, const char *what) {
    okv_gguf_vocab_texts t;
    okv_error err = {0};
    okv_status st = okv_gguf_vocab_synthesize(v, &t, &err);
    CHECKF(st != OKV_OK && strstr(err.message, needle) && !strchr(err.message, '\n') && !t.tokenizer_json,
           "%s: status %d, message \"%s\" (want \"%s\")", what, (int)st, err.message, needle);
    if (!st) okv_gguf_vocab_texts_free(&t);
}

static void check_errors(void) {
    static const okv_gguf_span tokens[] = {SPAN("a"), SPAN("b"), SPAN("ab"), SPAN("<s>")};
    static const okv_gguf_span merges[] = {SPAN("a b")};
    static const okv_gguf_span bad_merge[] = {SPAN("a b"), SPAN("a c")};
    static const okv_gguf_span bad_result[] = {SPAN("b a")};
    static const okv_gguf_span no_space[] = {SPAN("ab")};
    static const okv_gguf_span dup[] = {SPAN("a"), SPAN("b"), SPAN("a")};
    static const okv_gguf_span bad_utf8[] = {SPAN("a"), SPAN("\xff")};
    static const okv_gguf_span with_nul[] = {SPAN("a"), SPAN("b\0c")};
    static const float scores3[] = {0, 0, 0};
    static const int32_t types[] = {1, 1, 1, 3}, bad_types[] = {1, 1, 9, 3};
    okv_gguf_vocab base = okv_gguf_vocab_empty();
    base.model = SPAN("gpt2");
    base.pre = SPAN("smollm");
    base.n_tokens = 4;
    base.tokens = tokens;
    base.n_merges = 1;
    base.merges = merges;
    base.n_token_types = 4;
    base.token_types = types;
    okv_gguf_vocab_texts t;
    okv_error err = {0};
    CHECK_OK(okv_gguf_vocab_synthesize(&base, &t, &err), &err);
    okv_gguf_vocab_texts_free(&t);

    /* each case: the valid base with a few fields changed */
#define EXPECT_EDITED(edits, needle, what) \
    do { okv_gguf_vocab v = base; edits; expect_error(&v, needle, what); } while (0)
    EXPECT_EDITED({ v.model = SPAN("bert"); }, "tokenizer.ggml.model \"bert\" is not supported", "unknown model");
    EXPECT_EDITED({ v.model.ptr = NULL; v.model.len = 0; }, "tokenizer.ggml.model is missing", "missing model");
    EXPECT_EDITED({ v.pre = SPAN("falcon"); },
                  "tokenizer.ggml.pre \"falcon\" is not supported", "unknown pre-tokenizer");
    EXPECT_EDITED({ v.n_token_types = 3; },
                  "tokenizer.ggml.token_type has 3 entries but tokenizer.ggml.tokens has 4", "types count");
    EXPECT_EDITED({ v.n_scores = 3; v.scores = scores3; },
                  "tokenizer.ggml.scores has 3 entries but tokenizer.ggml.tokens has 4", "scores count");
    EXPECT_EDITED({ v.token_types = bad_types; }, "tokenizer.ggml.token_type[2] is 9", "bad token type");
    EXPECT_EDITED({ v.n_merges = 2; v.merges = bad_merge; },
                  "tokenizer.ggml.merges[1]: \"c\" is not in tokenizer.ggml.tokens", "merge of unknown token");
    EXPECT_EDITED({ v.merges = bad_result; },
                  "tokenizer.ggml.merges[0]: the merged token \"ba\" is not in tokenizer.ggml.tokens",
                  "merge result unknown");
    EXPECT_EDITED({ v.merges = no_space; }, "tokenizer.ggml.merges[0] \"ab\" is not two tokens", "merge without space");
    EXPECT_EDITED({ v.n_merges = 0; }, "tokenizer.ggml.merges is missing", "gpt2 without merges");
    EXPECT_EDITED({ v.n_tokens = v.n_token_types = 3; v.tokens = dup; },
                  "tokenizer.ggml.tokens[2] repeats tokens[0]", "duplicate token");
    EXPECT_EDITED({ v.n_tokens = 2; v.n_token_types = 0; v.n_merges = 1; v.tokens = bad_utf8; },
                  "tokenizer.ggml.tokens[1] is not valid UTF-8", "invalid UTF-8 token");
    EXPECT_EDITED({ v.n_tokens = 2; v.n_token_types = 0; v.n_merges = 1; v.tokens = with_nul; },
                  "tokenizer.ggml.tokens[1] contains a NUL byte", "token with NUL");
    EXPECT_EDITED({ v.eos_id = 4; }, "tokenizer.ggml.eos_token_id 4 is outside the 4 tokens", "eos out of range");
    EXPECT_EDITED({ v.add_bos = 1; },
                  "add_bos_token is true but there is no tokenizer.ggml.bos_token_id", "add_bos without bos");
    EXPECT_EDITED({ v.model = SPAN("llama"); v.n_merges = 0; },
                  "tokenizer.ggml.scores is missing", "llama without scores");
    EXPECT_EDITED({ v.chat_template = SPAN("{{ \xc3 }}"); },
                  "tokenizer.chat_template is not valid UTF-8", "template not UTF-8");
    EXPECT_EDITED({ v.chat_template = SPAN("{{ x }}\0"); },
                  "tokenizer.chat_template is not valid UTF-8 without NUL", "template with NUL");
    EXPECT_EDITED({ v.n_tokens = 0; }, "tokenizer.ggml.tokens is missing or empty", "no tokens");
    /* SentencePiece: the merges come from the scores and the types say which
     * pieces are text; a vocabulary where none is usable is refused */
    static const float scores4[] = {-1, -2, -3, 0}, nan4[] = {NAN, NAN, NAN, NAN}, inf4[] = {-INFINITY, NAN, INFINITY, NAN};
    static const int32_t undefined4[] = {0, 0, 0, 0}, control4[] = {3, 5, 0, 3};
#define SPM(edits) EXPECT_EDITED({ v.model = SPAN("llama"); v.n_merges = 0; v.n_scores = 4; v.scores = scores4; edits; }
    {   /* the SentencePiece base itself is accepted */
        okv_gguf_vocab v = base;
        v.model = SPAN("llama");
        v.n_merges = 0;
        v.n_scores = 4;
        v.scores = scores4;
        CHECK_OK(okv_gguf_vocab_synthesize(&v, &t, &err), &err);
        okv_gguf_vocab_texts_free(&t);
        v.scores = (const float[]){NAN, -2, NAN, NAN}; /* one finite score is enough */
        CHECK_OK(okv_gguf_vocab_synthesize(&v, &t, &err), &err);
        okv_gguf_vocab_texts_free(&t);
    }
    SPM(v.scores = nan4), "none of the 4 tokenizer.ggml.scores is a finite number", "llama, all scores NaN");
    SPM(v.scores = inf4), "none of the 4 tokenizer.ggml.scores is a finite number", "llama, no finite score");
    SPM(v.token_types = undefined4), "tokenizer.ggml.token_type marks none of the 4 tokens NORMAL (1)",
        "llama, all types UNDEFINED");
    SPM(v.token_types = control4), "marks none of the 4 tokens NORMAL", "llama, no NORMAL type");
#undef SPM
#undef EXPECT_EDITED
}

/* ---- 3. tiny GGUF images ------------------------------------------------------------------------ */

typedef struct img { uint8_t b[4096]; size_t n; } img;

static void put_bytes(img *m, const void *p, size_t n) { memcpy(m->b + m->n, p, n); m->n += n; }
static void put_u32(img *m, uint32_t v) { put_bytes(m, &v, 4); }
static void put_u64(img *m, uint64_t v) { put_bytes(m, &v, 8); }
static void put_gstr(img *m, const char *s) { put_u64(m, strlen(s)); put_bytes(m, s, strlen(s)); }
static void put_key(img *m, const char *k, uint32_t type) { put_gstr(m, k); put_u32(m, type); }

static void put_str_array(img *m, const char *key, const char *const *v, size_t n) {
    put_key(m, key, OKV_GGUF_ARRAY);
    put_u32(m, OKV_GGUF_STRING);
    put_u64(m, n);
    for (size_t i = 0; i < n; i++) put_gstr(m, v[i]);
}

/* A GGUF v3 image with no tensors and the tokenizer keys of a 3-token gpt2
 * vocab; `variant` breaks one thing. */
static void tiny_gguf(img *m, int variant) {
    static const char *const tokens[] = {"a", "b", "ab"};
    static const char *const merges[] = {"a b"};
    m->n = 0;
    put_bytes(m, "GGUF", 4);
    put_u32(m, 3);
    put_u64(m, 0);
    put_u64(m, variant == 2 ? 3 : 4);
    if (variant != 2) { put_key(m, "tokenizer.ggml.model", OKV_GGUF_STRING); put_gstr(m, "gpt2"); }
    put_key(m, "tokenizer.ggml.pre", OKV_GGUF_STRING);
    put_gstr(m, "smollm");
    if (variant == 1) { /* tokens stored as integers */
        put_key(m, "tokenizer.ggml.tokens", OKV_GGUF_ARRAY);
        put_u32(m, OKV_GGUF_I32);
        put_u64(m, 3);
        for (uint32_t i = 0; i < 3; i++) put_u32(m, i);
    } else put_str_array(m, "tokenizer.ggml.tokens", tokens, 3);
    put_str_array(m, "tokenizer.ggml.merges", merges, 1);
}

static void check_tiny_gguf(void) {
    for (int variant = 0; variant < 3; variant++) {
        img m;
        tiny_gguf(&m, variant);
        okv_gguf *g = NULL;
        okv_error err = {0};
        CHECK_OK(okv_gguf_open_memory(m.b, m.n, "tiny.gguf", &g, &err), &err);
        if (!g) continue;
        okv_gguf_vocab_texts t;
        okv_status st = okv_gguf_tokenizer_texts(g, &t, &err);
        if (variant == 0) {
            CHECK_OK(st, &err);
            okv_tok *tok = st ? NULL : load_texts(&t);
            int32_t *ids = NULL;
            size_t n = 0;
            if (tok) CHECK_OK(okv_tok_encode(tok, "ab", 2, true, &ids, &n, &err), &err);
            CHECK(n == 1 && ids && ids[0] == 2);
            free(ids);
            okv_tok_free(tok);
            okv_gguf_vocab_texts_free(&t);
        } else if (variant == 1) {
            CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, "tiny.gguf") && strstr(err.message, "tokenizer.ggml.tokens must be an array of"),
                   "%s", err.message);
        } else {
            CHECKF(st == OKV_ERR_NOT_FOUND && strstr(err.message, "tokenizer.ggml.model"), "%s", err.message);
        }
        okv_gguf_close(g);
    }
}

int main(void) {
    check_tiny_gguf();
    check_errors();
    check_small_spm();
    check_fixture_as_gguf("llama3_1", "llama-bpe", 128000);
    check_fixture_as_gguf("qwen3", "qwen2", -1);
    return okv_test_finish();
}
