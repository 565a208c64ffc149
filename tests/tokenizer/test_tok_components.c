/* test_tok_components.c — the tokenizer components the four fixture
 * tokenizers do not exercise, on small hand-written tokenizer.json files:
 * SentencePiece-style (Prepend/Replace normalizers, byte fallback, unk with
 * fuse_unk, Strip decoder), Metaspace pre-tokenizer/decoder, GPT-2 ByteLevel
 * with its own regex, every Split behavior and invert, Digits, added-token
 * lstrip/rstrip/single_word/normalized, continuing_subword_prefix, NFKC and
 * Strip normalizers, and "no decoder". Expected ids are worked out by hand
 * from HF tokenizers' semantics (see the comment at each case). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offkv_tok.h"
#include "okv_test.h"

#define SP "\xE2\x96\x81" /* U+2581, the metaspace */

/* JSON written with ' for " (none of these files needs a literal '). */
#include <stdarg.h>

/* fmt with ' for " (JSON written inside C strings), formatted (heap). */
static char *json_va(const char *fmt, va_list ap) {
    char *buf = malloc(1 << 16);
    vsnprintf(buf, 1 << 16, fmt, ap);
    for (char *p = buf; *p; p++)
        if (*p == '\'') *p = '"';
    return buf;
}

static okv_tok *load(const char *text) {
    okv_tok *tok = NULL;
    okv_error err = {0};
    okv_status st = okv_tok_load_json(text, strlen(text), &tok, &err);
    CHECKF(st == OKV_OK, "load failed: %s", err.message);
    return tok;
}

/* The tokenizer whose tokenizer.json is fmt, ... (see json_va). */
static okv_tok *load_tok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static okv_tok *load_tok(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *j = json_va(fmt, ap);
    va_end(ap);
    okv_tok *tok = load(j);
    free(j);
    return tok;
}

static void expect_ids(const okv_tok *tok, const char *text, bool add, const int32_t *want, size_t nwant, int line) {
    int32_t *ids = NULL;
    size_t n = 0;
    okv_error err = {0};
    okv_status st = okv_tok_encode(tok, text, strlen(text), add, &ids, &n, &err);
    int ok = st == OKV_OK && n == nwant && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    CHECKF(ok, "line %d: encode(\"%s\", add=%d)", line, text, (int)add);
    if (!ok) {
        fprintf(stderr, "  got:");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, " (%s)\n", st ? err.message : "ok");
    }
    free(ids);
}
#define EXPECT_IDS(tok, text, add, ...)                                                        \
    do {                                                                                       \
        static const int32_t w_[] = {__VA_ARGS__};                                             \
        expect_ids(tok, text, add, w_, sizeof w_ / sizeof w_[0], __LINE__);                    \
    } while (0)
#define EXPECT_NO_IDS(tok, text, add) expect_ids(tok, text, add, NULL, 0, __LINE__)

static void expect_text(const okv_tok *tok, const int32_t *ids, size_t n, bool skip, const char *want, int line) {
    char *text = NULL;
    size_t len = 0;
    okv_error err = {0};
    okv_status st = okv_tok_decode(tok, ids, n, skip, &text, &len, &err);
    CHECKF(st == OKV_OK && len == strlen(want) && memcmp(text, want, len) == 0, "line %d: decode: got \"%s\" want \"%s\"",
           line, text ? text : err.message, want);
    free(text);
}
/* check(tok, ids, n, skip, want, line) over the literal id list. */
#define WITH_ID_LIST(check, tok, skip, want, ...)                                              \
    do {                                                                                       \
        static const int32_t i_[] = {__VA_ARGS__};                                             \
        check(tok, i_, sizeof i_ / sizeof i_[0], skip, want, __LINE__);                        \
    } while (0)
#define EXPECT_TEXT(tok, skip, want, ...) WITH_ID_LIST(expect_text, tok, skip, want, __VA_ARGS__)

/* Streams ids; chunks joined by '|' (flush's chunk last) must equal want. */
static void expect_stream(const okv_tok *tok, const int32_t *ids, size_t n, bool skip, const char *want, int line) {
    okv_tok_stream *s = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_stream_create(tok, skip, &s, &err), &err);
    char got[512] = "";
    for (size_t i = 0; s && i <= n; i++) {
        const char *t;
        size_t tl;
        okv_status st = i < n ? okv_tok_stream_push(s, ids[i], &t, &tl, &err) : okv_tok_stream_flush(s, &t, &tl, &err);
        CHECK(st == OKV_OK);
        if (i) strcat(got, "|");
        strncat(got, t, tl);
    }
    CHECKF(strcmp(got, want) == 0, "line %d: stream chunks \"%s\" want \"%s\"", line, got, want);
    okv_tok_stream_free(s);
}
#define EXPECT_STREAM(tok, skip, want, ...) WITH_ID_LIST(expect_stream, tok, skip, want, __VA_ARGS__)

static const char *SPECIALS =
    "{'id':0,'content':'<unk>','special':true},{'id':1,'content':'<s>','special':true},"
    "{'id':2,'content':'</s>','special':true}";
static const char *SP_VOCAB =
    "'<unk>':0,'<s>':1,'</s>':2,'<0x41>':3,'<0xC3>':4,'<0xA9>':5,'" SP "':6,'h':7,'i':8,'" SP "h':9,'" SP "hi':10,"
    "'x':11";
static const char *SP_MERGES = "'" SP " h','" SP "h i'";
static const char *BOS_TEMPLATE =
    "{'type':'TemplateProcessing','single':[{'SpecialToken':{'id':'<s>','type_id':0}},{'Sequence':{'id':'A','type_id':0}}],"
    "'pair':[],'special_tokens':{'<s>':{'id':'<s>','ids':[1],'tokens':['<s>']}}}";

/* Llama-2 style: Prepend + Replace normalizer, byte fallback, Strip decoder. */
static void test_sentencepiece_style(void) {
    okv_tok *tok = load_tok("{'version':'1.0','truncation':null,'padding':null,'added_tokens':[%s],"
                            "'normalizer':{'type':'Sequence','normalizers':[{'type':'Prepend','prepend':'" SP "'},"
                            "{'type':'Replace','pattern':{'String':' '},'content':'" SP "'}]},"
                            "'pre_tokenizer':null,'post_processor':%s,"
                            "'decoder':{'type':'Sequence','decoders':[{'type':'Replace','pattern':{'String':'" SP "'},'content':' '},"
                            "{'type':'ByteFallback'},{'type':'Fuse'},{'type':'Strip','content':' ','start':1,'stop':0}]},"
                            "'model':{'type':'BPE','dropout':null,'unk_token':'<unk>','fuse_unk':true,'byte_fallback':true,"
                            "'vocab':{%s},'merges':[%s]}}",
                              SPECIALS, BOS_TEMPLATE, SP_VOCAB, SP_MERGES);
    if (!tok) return;
    EXPECT_IDS(tok, "hi", true, 1, 10);        /* "▁hi": (▁,h) rank 0 then (▁h,i) */
    EXPECT_IDS(tok, "hi hi", false, 10, 10);   /* one word "▁hi▁hi" */
    EXPECT_IDS(tok, "\xC3\xA9", false, 6, 4, 5); /* é not in vocab: <0xC3><0xA9> */
    EXPECT_IDS(tok, "hQ", false, 9, 0);        /* Q: no byte token 0x51 -> unk */
    EXPECT_IDS(tok, "QQ", false, 6, 0);        /* fuse_unk: one unk for QQ */
    EXPECT_IDS(tok, "", true, 1);              /* Prepend skips empty text; BOS still added */
    EXPECT_IDS(tok, "<s>hi", false, 1, 10);    /* added token split first; Prepend runs per segment */
    EXPECT_TEXT(tok, false, "<s> hi hi", 1, 10, 10); /* Strip cuts only a leading ' ' */
    EXPECT_TEXT(tok, true, "hi hi", 1, 10, 10);
    EXPECT_TEXT(tok, false, "\xC3\xA9", 6, 4, 5);
    EXPECT_TEXT(tok, false, "\xEF\xBF\xBDx", 4, 11);                  /* lone 0xC3 -> U+FFFD */
    EXPECT_TEXT(tok, false, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 3, 4, 5, 4); /* invalid run: one U+FFFD per byte */
    EXPECT_TEXT(tok, false, " hi", 6, 10); /* "  hi" minus one leading space */
    /* streaming: the leading-space strip happens once, at the very start */
    EXPECT_STREAM(tok, true, "|hi| hi|", 1, 10, 10); /* the skipped <s> yields an empty chunk */
    EXPECT_STREAM(tok, false, "| hi|", 6, 10);
    EXPECT_STREAM(tok, false, "||\xC3\xA9x|", 4, 5, 11); /* byte run held back until closed */
    EXPECT_STREAM(tok, false, "|\xEF\xBF\xBD", 4);        /* flush: incomplete run */
    CHECK(okv_tok_is_special(tok, 1));
    CHECK(!okv_tok_is_special(tok, 10));
    CHECK(okv_tok_token_to_id(tok, SP "hi") == 10);
    CHECK(okv_tok_token_to_id(tok, "nope") == -1);
    CHECK(okv_tok_id_to_token(tok, 10) && strcmp(okv_tok_id_to_token(tok, 10), SP "hi") == 0);
    CHECK(okv_tok_id_to_token(tok, 99) == NULL);
    CHECK(okv_tok_vocab_size(tok) == 12);
    okv_tok_free(tok);
}

static okv_tok *metaspace_tok(const char *scheme) {
    okv_tok *tok = load_tok("{'added_tokens':[%s],'normalizer':null,"
                            "'pre_tokenizer':{'type':'Metaspace','replacement':'" SP "','prepend_scheme':'%s','split':true},"
                            "'post_processor':null,"
                            "'decoder':{'type':'Metaspace','replacement':'" SP "','prepend_scheme':'%s','split':true},"
                            "'model':{'type':'BPE','unk_token':'<unk>','vocab':{%s},'merges':[%s]}}",
                              SPECIALS, scheme, scheme, SP_VOCAB, SP_MERGES);
    return tok;
}

static void test_metaspace(void) {
    okv_tok *tok = metaspace_tok("first");
    if (!tok) return;
    EXPECT_IDS(tok, "hi hi", false, 10, 10);  /* "▁hi▁hi" split before each ▁ */
    EXPECT_IDS(tok, " hi", false, 10);        /* already starts with ▁: no prepend */
    EXPECT_IDS(tok, "<s>hi", false, 1, 7, 8); /* "first": not at offset 0 -> no ▁ */
    EXPECT_IDS(tok, "hi  hi", false, 10, 6, 10);
    EXPECT_TEXT(tok, false, "hi hi", 10, 10); /* first token loses its ▁ */
    EXPECT_TEXT(tok, false, " hi", 6, 10);
    EXPECT_STREAM(tok, false, "hi| hi|", 10, 10);
    EXPECT_STREAM(tok, false, "| hi|", 6, 10);
    okv_tok_free(tok);
    tok = metaspace_tok("always");
    if (!tok) return;
    EXPECT_IDS(tok, "<s>hi", false, 1, 10);
    okv_tok_free(tok);
    tok = metaspace_tok("never");
    if (!tok) return;
    EXPECT_IDS(tok, "hi", false, 7, 8);
    EXPECT_TEXT(tok, false, " hi", 10); /* never: the ▁ stays a space */
    okv_tok_free(tok);
}

/* GPT-2: ByteLevel pre-tokenizer with its own regex and a prefix space. */
static void test_gpt2_bytelevel(void) {
    okv_tok *tok = load_tok("{'added_tokens':[],'normalizer':null,"
                            "'pre_tokenizer':{'type':'ByteLevel','add_prefix_space':true,'trim_offsets':true,'use_regex':true},"
                            "'post_processor':{'type':'ByteLevel','add_prefix_space':true,'trim_offsets':true,'use_regex':true},"
                            "'decoder':{'type':'ByteLevel','add_prefix_space':true,'trim_offsets':true,'use_regex':true},"
                            "'model':{'type':'BPE','vocab':{'h':0,'i':1,'\\u0120':2,'\\u0120h':3,'\\u0120hi':4,'!':5,'\\u010a':6},"
                            "'merges':['\\u0120 h','\\u0120h i']}}");
    if (!tok) return;
    EXPECT_IDS(tok, "hi!", false, 4, 5);         /* " hi!" -> " hi" | "!" */
    EXPECT_IDS(tok, "hi\nhi", false, 4, 6, 0, 1); /* " hi" | "\n" | "hi" */
    EXPECT_TEXT(tok, false, " hi!", 4, 5);
    EXPECT_STREAM(tok, false, " hi|!|", 4, 5);
    okv_tok_free(tok);
}

/* Split behaviors: vocab/merges that would merge across any boundary the
 * pre-tokenizer does not cut, so the ids show where it cut. */
static const char *SPLIT_VOCAB =
    "'a':0,'b':1,'-':2,'1':3,'2':4,'a-':5,'-b':6,'a-b':7,'12':8,'a1':9,'1a':10,'ab':11,'--':12,' ':13";
static const char *SPLIT_MERGES = "'a -','- b','a- b','1 2','a 1','1 a','a b','- -'";

static okv_tok *split_tok(const char *pre, const char *added, const char *norm) {
    okv_tok *tok = load_tok("{'added_tokens':[%s],'normalizer':%s,'pre_tokenizer':%s,'post_processor':null,'decoder':null,"
                            "'model':{'type':'BPE','vocab':{%s,'<x>':20,'ab_w':21,'a-_n':23},'merges':[%s]}}",
                            added, norm, pre, SPLIT_VOCAB, SPLIT_MERGES);
    return tok;
}

static void test_split_behaviors(void) {
    static const struct { const char *behavior; bool invert; const char *text; int32_t ids[4]; size_t n; } cases[] = {
        {"Isolated", false, "a-b", {0, 2, 1}, 3},
        {"Removed", false, "a-b", {0, 1}, 2},
        {"MergedWithPrevious", false, "a-b", {5, 1}, 2},
        {"MergedWithNext", false, "a-b", {0, 6}, 2},
        {"Contiguous", false, "a--b", {0, 12, 1}, 3}, /* "--" stays one piece, merges to '--' */
        {"Isolated", false, "a--b", {0, 2, 2, 1}, 4},
        {"Removed", true, "a-b", {2}, 1}, /* inverted: the non-'-' parts are removed */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char pre[256];
        snprintf(pre, sizeof pre, "{'type':'Split','pattern':{'String':'-'},'behavior':'%s','invert':%s}",
                 cases[i].behavior, cases[i].invert ? "true" : "false");
        okv_tok *tok = split_tok(pre, "", "null");
        if (!tok) continue;
        expect_ids(tok, cases[i].text, false, cases[i].ids, cases[i].n, __LINE__ * 1000 + (int)i);
        okv_tok_free(tok);
    }
    /* the same with a regex pattern */
    okv_tok *tok = split_tok("{'type':'Split','pattern':{'Regex':'-+'},'behavior':'Isolated','invert':false}", "", "null");
    if (tok) {
        EXPECT_IDS(tok, "a--b", false, 0, 12, 1);
        okv_tok_free(tok);
    }
    tok = split_tok("null", "", "null");
    if (tok) {
        EXPECT_IDS(tok, "a-b", false, 7); /* no pre-tokenizer: one word */
        EXPECT_IDS(tok, "a1", false, 9);
        EXPECT_TEXT(tok, false, "a - b", 0, 2, 1); /* no decoder: tokens joined by spaces */
        EXPECT_STREAM(tok, false, "a| -| b|", 0, 2, 1);
        okv_tok_free(tok);
    }
    tok = split_tok("{'type':'Sequence','pretokenizers':[{'type':'Digits','individual_digits':false}]}", "", "null");
    if (tok) {
        EXPECT_IDS(tok, "a1", false, 0, 3);
        EXPECT_IDS(tok, "12", false, 8);
        okv_tok_free(tok);
    }
    tok = split_tok("{'type':'Digits','individual_digits':true}", "", "null");
    if (tok) {
        EXPECT_IDS(tok, "12", false, 3, 4);
        okv_tok_free(tok);
    }
}

static void test_added_token_options(void) {
    okv_tok *tok = split_tok("null",
                             "{'id':20,'content':'<x>','lstrip':true,'rstrip':true,'special':true},"
                             "{'id':21,'content':'ab','single_word':true,'special':false},"
                             "{'id':23,'content':'a-','normalized':true,'special':false}",
                             "{'type':'Replace','pattern':{'String':'Z'},'content':'-'}");
    if (!tok) return;
    EXPECT_IDS(tok, "a <x> b", false, 0, 20, 1); /* the spaces around <x> are absorbed */
    EXPECT_IDS(tok, "ab", false, 21);
    EXPECT_IDS(tok, "-ab-", false, 2, 21, 2);    /* '-' is not a word char */
    EXPECT_IDS(tok, "1ab", false, 10, 1);        /* single_word rejects: '1' before */
    EXPECT_IDS(tok, "aZb", false, 23, 1);        /* normalized token matched after Z -> '-' */
    EXPECT_TEXT(tok, true, "a b", 0, 20, 1);     /* <x> is special: skipped */
    EXPECT_TEXT(tok, true, "ab", 21);            /* ab is not special: kept */
    CHECK(okv_tok_token_to_id(tok, "ab") == 21); /* added tokens win over the vocab */
    okv_tok_free(tok);
}

static void test_prefix_and_normalizers(void) {
    okv_tok *tok = load_tok("{'added_tokens':[],'normalizer':{'type':'Sequence','normalizers':[{'type':'NFKC'},"
                            "{'type':'Strip','strip_left':true,'strip_right':true}]},'pre_tokenizer':null,"
                            "'post_processor':null,'decoder':{'type':'Fuse'},"
                            "'model':{'type':'BPE','continuing_subword_prefix':'##','vocab':{'f':0,'##i':1,'fi':2,'i':3},"
                            "'merges':['f ##i']}}");
    if (!tok) return;
    EXPECT_IDS(tok, "\xEF\xAC\x81", false, 2); /* U+FB01 'fi' ligature -> NFKC "fi" -> f ##i -> fi */
    EXPECT_IDS(tok, " \t fi\n", false, 2);     /* Strip removes surrounding whitespace */
    EXPECT_IDS(tok, "i", false, 3);            /* first char: no prefix */
    EXPECT_NO_IDS(tok, "   ", false);
    okv_tok_free(tok);
}

/* A loaded tokenizer is shared read-only: threads encoding at once get the
 * same ids as one thread (regex scratch and word cache are per call). */
typedef struct thread_job {
    const okv_tok *tok;
    const char **texts;
    int n_texts;
    size_t *lens; /* expected id counts */
    int32_t **want;
    int mismatches;
} thread_job;

static void *encode_all(void *arg) {
    thread_job *j = arg;
    for (int rep = 0; rep < 50; rep++)
        for (int i = 0; i < j->n_texts; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            okv_error err = {0};
            if (okv_tok_encode(j->tok, j->texts[i], strlen(j->texts[i]), false, &ids, &n, &err) ||
                n != j->lens[i] || memcmp(ids, j->want[i], n * sizeof *ids))
                j->mismatches++;
            free(ids);
        }
    return NULL;
}

static void test_threads(void) {
    okv_tok *tok = load_tok("{'added_tokens':[],'normalizer':{'type':'NFC'},"
                            "'pre_tokenizer':{'type':'ByteLevel','add_prefix_space':false,'use_regex':true},"
                            "'decoder':{'type':'ByteLevel'},"
                            "'model':{'type':'BPE','vocab':{'h':0,'i':1,'\\u0120':2,'\\u0120h':3,'\\u0120hi':4,'!':5,'\\u010a':6,'hi':7},"
                            "'merges':['\\u0120 h','\\u0120h i','h i']}}");
    if (!tok) return;
    static const char *texts[] = {"hi hi!", "hi\nhi hi", "!!! hi", "h i h i", "hihihi hi hi"};
    enum { NT = 5, THREADS = 4 };
    size_t lens[NT];
    int32_t *want[NT];
    okv_error err = {0};
    for (int i = 0; i < NT; i++) CHECK_OK(okv_tok_encode(tok, texts[i], strlen(texts[i]), false, &want[i], &lens[i], &err), &err);
    CHECK(lens[0] == 3 && want[0][0] == 7 && want[0][1] == 4 && want[0][2] == 5); /* "hi" | " hi" | "!" */
    thread_job jobs[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (thread_job){tok, texts, NT, lens, want, 0};
        CHECK(pthread_create(&th[t], NULL, encode_all, &jobs[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECKF(jobs[t].mismatches == 0, "thread %d: %d encodes differ", t, jobs[t].mismatches);
    }
    for (int i = 0; i < NT; i++) free(want[i]);
    okv_tok_free(tok);
}

int main(void) {
    test_sentencepiece_style();
    test_metaspace();
    test_gpt2_bytelevel();
    test_split_behaviors();
    test_added_token_options();
    test_prefix_and_normalizers();
    test_threads();
    return okv_test_finish();
}
