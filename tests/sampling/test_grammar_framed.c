/* Tests runs of framed values (okv_grammar_framed, the shape of forced
 * tool calls): a head picks the alternative, the value between head and
 * tail must satisfy that alternative's schema (not another's), the count
 * range holds (accepting only from min_count on, closed at max_count),
 * whitespace is allowed between values only, heads that are prefixes of
 * one another and bad schemas are refused, and a token mask over a small
 * vocabulary allows exactly the tokens that keep the text a valid prefix. */
#include <stdbool.h>

#include "offkv_grammar.h"
#include "okv_test.h"

#define QHEAD(fn) "<tool_call>\n{\"name\": \"" fn "\", \"arguments\": "
#define QTAIL "}\n</tool_call>"
#define WEATHER "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]," \
                "\"additionalProperties\":false}"
#define ADD "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}," \
            "\"required\":[\"a\",\"b\"],\"additionalProperties\":false}"

static okv_grammar *two_tools(int lo, int hi) {
    okv_grammar_frame f[2] = {{QHEAD("get_weather"), WEATHER, QTAIL}, {QHEAD("add"), ADD, QTAIL}};
    okv_grammar *g = NULL;
    okv_error err = {0};
    CHECK_OK(okv_grammar_framed(f, 2, lo, hi, &g, &err), &err);
    return g;
}

/* Bytes of text taken one at a time; *acc / *fin: the state after them. */
static size_t taken(const okv_grammar *g, const char *text, bool *acc, bool *fin) {
    okv_grammar_match *m = NULL;
    okv_error err;
    *acc = *fin = false;
    if (!g || okv_grammar_match_create(g, &m, &err)) return 0;
    size_t i = 0, n = strlen(text);
    while (i < n && okv_grammar_match_feed(m, text + i, 1)) i++;
    *acc = okv_grammar_match_accepting(m);
    *fin = okv_grammar_match_finished(m);
    okv_grammar_match_free(m);
    return i;
}

#define CALL_W QHEAD("get_weather") "{\"city\": \"Paris\"}" QTAIL
#define CALL_A QHEAD("add") "{\"a\":1,\"b\":-2}" QTAIL

static void test_one_call(void) {
    okv_grammar *g = two_tools(1, 1);
    bool acc, fin;
    CHECK(taken(g, CALL_W, &acc, &fin) == strlen(CALL_W) && acc && fin);
    CHECK(taken(g, CALL_A, &acc, &fin) == strlen(CALL_A) && acc && fin);
    /* a prefix is not accepting */
    CHECK(taken(g, QHEAD("add") "{\"a\":1,\"b\":2}", &acc, &fin) == strlen(QHEAD("add") "{\"a\":1,\"b\":2}") && !acc);
    /* add's head with get_weather's arguments: refused at the key */
    const char *cross = QHEAD("add") "{\"city\"";
    CHECK(taken(g, cross, &acc, &fin) == strlen(QHEAD("add")) + 2);
    /* an unknown function name stops at its first byte that no head has */
    CHECK(taken(g, QHEAD("sub"), &acc, &fin) == strlen("<tool_call>\n{\"name\": \""));
    /* nothing before the head, nothing after the closed run */
    CHECK(taken(g, " " CALL_W, &acc, &fin) == 0);
    CHECK(taken(g, CALL_W "\n", &acc, &fin) == strlen(CALL_W) && fin);
    /* a wrong tail byte */
    CHECK(taken(g, QHEAD("add") "{\"a\":1,\"b\":2}}\n<x", &acc, &fin) == strlen(QHEAD("add") "{\"a\":1,\"b\":2}}\n<"));
    okv_grammar_free(g);
}

static void test_runs(void) {
    okv_grammar *g = two_tools(1, 3);
    bool acc, fin;
    CHECK(taken(g, CALL_W, &acc, &fin) == strlen(CALL_W) && acc && !fin);
    const char *two = CALL_W "\n" CALL_A;
    CHECK(taken(g, two, &acc, &fin) == strlen(two) && acc && !fin);
    const char *three = CALL_W "\n" CALL_A " \n" CALL_W;
    CHECK(taken(g, three, &acc, &fin) == strlen(three) && acc && fin);
    /* a fourth is refused: the run closed at max_count */
    const char *four = CALL_W CALL_A CALL_W "\n" CALL_A;
    CHECK(taken(g, four, &acc, &fin) == strlen(CALL_W CALL_A CALL_W));
    /* whitespace between values is bounded */
    const char *wide = CALL_W "\n\n\n\n\n\n\n\n\n" CALL_A;
    CHECK(taken(g, wide, &acc, &fin) == strlen(CALL_W) + OKV_GRAMMAR_MAX_WS);
    /* text other than a head after a value: the run ends there */
    CHECK(taken(g, CALL_W "x", &acc, &fin) == strlen(CALL_W));
    okv_grammar_free(g);
    g = two_tools(2, 2);
    CHECK(taken(g, CALL_W, &acc, &fin) == strlen(CALL_W) && !acc);
    CHECK(taken(g, CALL_W CALL_A, &acc, &fin) == strlen(CALL_W CALL_A) && acc && fin);
    okv_grammar_free(g);
}

/* Llama-3.x JSON: head and tail are parts of one object. */
static void test_json_shape(void) {
    okv_grammar_frame f[1] = {{"{\"name\": \"add\", \"parameters\": ", ADD, "}"}};
    okv_grammar *g = NULL;
    okv_error err = {0};
    CHECK_OK(okv_grammar_framed(f, 1, 1, 1, &g, &err), &err);
    bool acc, fin;
    const char *t = "{\"name\": \"add\", \"parameters\": {\"b\": 3, \"a\": 40}}";
    CHECK(taken(g, t, &acc, &fin) == strlen(t) && acc && fin);
    /* an integer value right before the tail: the number ends at the tail's byte */
    okv_grammar_frame n1[1] = {{"[", "{\"type\":\"integer\"}", "]"}};
    okv_grammar *gn = NULL;
    CHECK_OK(okv_grammar_framed(n1, 1, 1, 1, &gn, &err), &err);
    CHECK(taken(gn, "[12]", &acc, &fin) == 4 && fin);
    CHECK(taken(gn, "[1.5]", &acc, &fin) == 2);
    okv_grammar_free(gn);
    okv_grammar_free(g);
}

static void test_refusals(void) {
    okv_grammar *g = NULL;
    okv_error err = {0};
    okv_grammar_frame pre[2] = {{"{\"name\": \"a", "{}", "}"}, {"{\"name\": \"ab", "{}", "}"}};
    CHECK(okv_grammar_framed(pre, 2, 1, 1, &g, &err) == OKV_ERR_INVALID && strstr(err.message, "prefix") && !g);
    okv_grammar_frame empty[1] = {{"", "{}", "}"}};
    CHECK(okv_grammar_framed(empty, 1, 1, 1, &g, &err) == OKV_ERR_INVALID && !g);
    okv_grammar_frame badschema[1] = {{"<", "{\"type\":\"string\",\"pattern\":\"x\"}", ">"}};
    CHECK(okv_grammar_framed(badschema, 1, 1, 1, &g, &err) == OKV_ERR_UNSUPPORTED && strstr(err.message, "pattern") && !g);
    okv_grammar_frame notjson[1] = {{"<", "{", ">"}};
    CHECK(okv_grammar_framed(notjson, 1, 1, 1, &g, &err) != OKV_OK && !g);
    okv_grammar_frame ok1[1] = {{"<", "{}", ">"}};
    CHECK(okv_grammar_framed(ok1, 1, 0, 1, &g, &err) == OKV_ERR_INVALID && !g);
    CHECK(okv_grammar_framed(ok1, 1, 2, 1, &g, &err) == OKV_ERR_INVALID && !g);
    CHECK(okv_grammar_framed(ok1, 0, 1, 1, &g, &err) == OKV_ERR_INVALID && !g);
}

/* The mask over a tiny vocabulary: which tokens may come next. */
static void test_mask(void) {
    static const char *const toks[] = {"<tool_call>", "\n", "{\"name\": \"", "add", "get", "_weather", "\", \"arguments\": ",
                                       "{", "\"a\"", ":", "1", "}", "</tool_call>", "hello", "<tool", ",", "\"b\""};
    enum { NT = sizeof toks / sizeof *toks };
    size_t lens[NT];
    for (int i = 0; i < NT; i++) lens[i] = strlen(toks[i]);
    okv_grammar_vocab *v = NULL;
    okv_error err = {0};
    CHECK_OK(okv_grammar_vocab_create(NT, toks, lens, &v, &err), &err);
    okv_grammar *g = two_tools(1, 1);
    okv_grammar_match *m = NULL;
    if (!v || !g || okv_grammar_match_create(g, &m, &err)) { okv_grammar_vocab_free(v); okv_grammar_free(g); CHECK(0); return; }
    uint32_t bits[1];
    CHECK_OK(okv_grammar_mask(m, v, bits, &err), &err);
    CHECK(bits[0] == ((1u << 0) | (1u << 14)));   /* "<tool_call>" or "<tool" */
    const char *pre = "<tool_call>\n{\"name\": \"";
    CHECK(okv_grammar_match_feed(m, pre, strlen(pre)));
    CHECK_OK(okv_grammar_mask(m, v, bits, &err), &err);
    CHECK(bits[0] == ((1u << 3) | (1u << 4)));    /* "add" or "get" */
    CHECK(okv_grammar_match_feed(m, "add\", \"arguments\": {\"a\":1,", strlen("add\", \"arguments\": {\"a\":1,")));
    CHECK_OK(okv_grammar_mask(m, v, bits, &err), &err);
    CHECK(bits[0] == ((1u << 16) | (1u << 1)));   /* only "b" is left (or whitespace first) */
    okv_grammar_match_free(m);
    okv_grammar_free(g);
    okv_grammar_vocab_free(v);
}

int main(void) {
    test_one_call();
    test_runs();
    test_json_shape();
    test_refusals();
    test_mask();
    return okv_test_finish();
}
