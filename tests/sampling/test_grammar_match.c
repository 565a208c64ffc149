/* Tests the JSON-Schema compiler and the character-level matcher: texts
 * valid under a schema are accepted whole and at every prefix, texts that
 * break it are rejected at the first byte that cannot belong (not later),
 * a prefix is not accepting until the value is complete (required keys,
 * minItems, minLength), bounds (whitespace, digits, string length, depth)
 * hold, feeding byte by byte equals feeding at once, and schemas we cannot
 * enforce are refused with the keyword and its place named. */
#include <stdbool.h>

#include "offkv_grammar.h"
#include "okv_test.h"

static okv_grammar *compile(const char *schema) {
    okv_grammar *g = NULL;
    okv_error err = {0};
    CHECK_OK(okv_grammar_from_schema(schema, strlen(schema), &g, &err), &err);
    return g;
}

/* How many bytes of text are accepted one at a time (strlen(text) if all). */
static size_t prefix_len(const okv_grammar *g, const char *text, bool *accepting) {
    okv_grammar_match *m = NULL;
    okv_error err;
    if (okv_grammar_match_create(g, &m, &err)) return 0;
    size_t i = 0, n = strlen(text);
    while (i < n && okv_grammar_match_feed(m, text + i, 1)) i++;
    *accepting = okv_grammar_match_accepting(m);
    /* feeding the accepted prefix at once lands in the same verdict */
    okv_grammar_match_reset(m);
    bool whole = okv_grammar_match_feed(m, text, i);
    if (!whole || okv_grammar_match_accepting(m) != *accepting) *accepting = !*accepting;   /* makes the caller's CHECK fail */
    okv_grammar_match_free(m);
    return i;
}

/* text is a complete valid value. */
static void ok(const char *schema, const char *text) {
    okv_grammar *g = compile(schema);
    if (!g) return;
    bool acc = false;
    size_t n = prefix_len(g, text, &acc);
    CHECKF(n == strlen(text) && acc, "schema %s: '%s' taken up to byte %zu (accepting %d)", schema, text, n, acc);
    okv_grammar_free(g);
}

/* text's first `good` bytes are a valid prefix and byte `good` is not. */
static void bad_at(const char *schema, const char *text, size_t good) {
    okv_grammar *g = compile(schema);
    if (!g) return;
    bool acc;
    size_t n = prefix_len(g, text, &acc);
    CHECKF(n == good, "schema %s: '%s' taken up to byte %zu, expected the stop at %zu", schema, text, n, good);
    okv_grammar_free(g);
}

/* text is a valid prefix but not a complete value. */
static void incomplete(const char *schema, const char *text) {
    okv_grammar *g = compile(schema);
    if (!g) return;
    bool acc = true;
    size_t n = prefix_len(g, text, &acc);
    CHECKF(n == strlen(text) && !acc, "schema %s: '%s' taken up to %zu, accepting %d (expected a prefix only)", schema,
           text, n, acc);
    okv_grammar_free(g);
}

static void refused(const char *schema, okv_status want, const char *needle) {
    okv_grammar *g = NULL;
    okv_error err = {0};
    okv_status st = okv_grammar_from_schema(schema, strlen(schema), &g, &err);
    CHECKF(st == want && strstr(err.message, needle), "schema %s: status %d, message '%s' (want %d with '%s')", schema,
           st, err.message, want, needle);
    CHECK(g == NULL);
}

#define PERSON "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}}," \
               "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}"

static void test_objects(void) {
    ok(PERSON, "{\"name\":\"Ann\",\"age\":31}");
    ok(PERSON, "{\"age\":31,\"name\":\"Ann\"}");               /* any order */
    ok(PERSON, "{ \"name\" : \"Ann\" ,\n  \"age\": -7 }");     /* limited whitespace */
    incomplete(PERSON, "{\"name\":\"Ann\"");
    bad_at(PERSON, "{\"name\":\"Ann\"}", 13);                  /* required age missing: '}' refused */
    bad_at(PERSON, "{\"nam\":1}", 5);                          /* unknown key closes */
    bad_at(PERSON, "{\"nick\":1}", 3);                         /* no key starts "ni" */
    bad_at(PERSON, "{\"name\":\"A\",\"name\":\"B\"}", 13);       /* no key twice */
    bad_at(PERSON, "{\"name\":3}", 8);                         /* type */
    bad_at(PERSON, "{\"age\":3.5}", 8);                        /* integer: no fraction */
    bad_at(PERSON, " {}", 0);                                  /* no whitespace before the value */
    bad_at(PERSON, "{\"name\":\"A\",\"age\":1} ", 20);          /* nor after */
    bad_at(PERSON, "{\"name\":\"A\",\"age\":1,}", 19);          /* no trailing comma with nothing left */
    /* optional properties; closing before a required one */
    const char *opt = "{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"}},\"required\":[\"b\"]}";
    ok(opt, "{\"b\":null}");
    ok(opt, "{\"a\":false,\"b\":null}");
    bad_at(opt, "{\"a\":true}", 9);
    ok("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", "{}");
    /* nested objects and keys that share prefixes / need escapes */
    const char *nest = "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},"
                       "\"required\":[\"x\"]},\"abc\":{\"type\":\"string\"},\"q\\\"t\":{\"type\":\"integer\"}},"
                       "\"required\":[\"ab\",\"abc\"]}";
    ok(nest, "{\"abc\":\"z\",\"ab\":{\"x\":1e5}}");
    ok(nest, "{\"ab\":{\"x\":0},\"q\\\"t\":2,\"abc\":\"\"}");
    bad_at(nest, "{\"ab\":{}}", 7);
    /* json_object: any object, nothing else */
    okv_grammar *g = NULL;
    okv_error err;
    CHECK_OK(okv_grammar_json_object(&g, &err), &err);
    bool acc;
    const char *any = "{\"k\":[1,{\"z\":null},\"s\",true,-0.5e3],\"\":{}}";
    CHECK(prefix_len(g, any, &acc) == strlen(any) && acc);
    CHECK(prefix_len(g, "[1]", &acc) == 0);
    CHECK(prefix_len(g, "\"x\"", &acc) == 0);
    CHECK(prefix_len(g, "{\"a\" 1}", &acc) == 5);
    okv_grammar_free(g);
}

static void test_scalars(void) {
    const char *num = "{\"type\":\"number\"}";
    ok(num, "0");
    ok(num, "-0.5e3");
    ok(num, "12.25E-07");
    ok(num, "1e+9");
    incomplete(num, "-");
    incomplete(num, "1.");
    incomplete(num, "1e");
    incomplete(num, "1e+");
    bad_at(num, "01", 1);                      /* no leading zero */
    bad_at(num, "+1", 0);
    bad_at(num, ".5", 0);
    bad_at(num, "1.e5", 2);
    bad_at(num, "12345678901234567", 16);      /* 16 integer digits at most */
    bad_at(num, "1e1234", 5);                  /* 3 exponent digits */
    const char *in = "{\"type\":\"integer\"}";
    ok(in, "-42");
    bad_at(in, "4.0", 1);
    bad_at(in, "4e2", 1);
    ok("{\"type\":\"boolean\"}", "false");
    bad_at("{\"type\":\"boolean\"}", "tru ", 3);
    ok("{\"type\":\"null\"}", "null");
    bad_at("{\"type\":\"null\"}", "nul", 3), incomplete("{\"type\":\"null\"}", "nul");
    /* strings: escapes, UTF-8, control characters, lengths */
    const char *str = "{\"type\":\"string\"}";
    ok(str, "\"caf\\u00e9 \\\"q\\\" \\\\ \\/ \\b\\f\\n\\r\\t\"");
    ok(str, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    bad_at(str, "\"a\x01\"", 2);
    bad_at(str, "\"\\x\"", 2);
    bad_at(str, "\"\\u00g0\"", 5);
    bad_at(str, "\"\xc3\x28\"", 2);            /* broken continuation */
    bad_at(str, "\"\xc0\x80\"", 1);            /* overlong lead */
    bad_at(str, "\"\xed\xa0\x80\"", 2);        /* UTF-8 surrogate */
    bad_at(str, "\"\xf4\x90\x80\x80\"", 2);    /* above U+10FFFF */
    incomplete(str, "\"abc");
    const char *len = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    ok(len, "\"ab\"");
    ok(len, "\"\xc3\xa9\\n\xe2\x82\xac\"");    /* 3 characters, 7 bytes */
    bad_at(len, "\"a\"", 2);
    bad_at(len, "\"abcd\"", 4);
    /* the default bound: OKV_GRAMMAR_MAX_STRING characters */
    char big[OKV_GRAMMAR_MAX_STRING + 8];
    big[0] = '"';
    memset(big + 1, 'x', OKV_GRAMMAR_MAX_STRING + 1);
    big[OKV_GRAMMAR_MAX_STRING + 2] = 0;
    bad_at(str, big, OKV_GRAMMAR_MAX_STRING + 1);
}

static void test_enum_const_anyof(void) {
    const char *color = "{\"enum\":[\"red\",\"green\",\"reddish\",1,12,null,{\"a\":[1]}]}";
    ok(color, "\"red\"");
    ok(color, "\"reddish\"");
    ok(color, "1");
    ok(color, "12");
    ok(color, "null");
    ok(color, "{\"a\":[1]}");
    bad_at(color, "\"blue\"", 1);
    bad_at(color, "\"re\"", 3);
    bad_at(color, "13", 1);
    bad_at(color, "{\"a\": [1]}", 5);          /* literals are matched in their canonical form */
    /* enum filtered by type; const */
    ok("{\"type\":\"string\",\"enum\":[\"x\",1]}", "\"x\"");
    bad_at("{\"type\":\"string\",\"enum\":[\"x\",1]}", "1", 0);
    ok("{\"const\":\"caf\\u00e9\"}", "\"caf\xc3\xa9\"");
    /* an enum inside an object: the literal's end is found by lookahead */
    const char *o = "{\"type\":\"object\",\"properties\":{\"n\":{\"enum\":[1,12]},\"s\":{\"type\":\"string\"}},\"required\":[\"n\",\"s\"]}";
    ok(o, "{\"n\":1,\"s\":\"\"}");
    ok(o, "{\"n\":12 ,\"s\":\"\"}");
    bad_at(o, "{\"n\":123", 7);
    /* anyOf and type lists of different JSON types */
    const char *sn = "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"null\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}]}";
    ok(sn, "\"a\"");
    ok(sn, "null");
    ok(sn, "[1,2]");
    bad_at(sn, "\"ab\"", 2);
    bad_at(sn, "1", 0);
    ok("{\"type\":[\"integer\",\"number\",\"null\"]}", "2.5");
    ok("{\"type\":[\"integer\",\"number\",\"null\"]}", "null");
    /* $ref into $defs */
    const char *ref = "{\"$defs\":{\"P\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"}},\"required\":[\"v\"]}},"
                      "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/P\"}}";
    ok(ref, "[{\"v\":1},{\"v\":2}]");
    bad_at(ref, "[{\"v\":\"1\"}]", 6);
}

static void test_arrays(void) {
    const char *arr = "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2}";
    ok(arr, "[\"a\"]");
    ok(arr, "[ \"a\" , \"b\" ]");
    bad_at(arr, "[]", 1);
    bad_at(arr, "[\"a\",\"b\",\"c\"]", 8);
    bad_at(arr, "[1]", 1);
    incomplete(arr, "[\"a\",");
    ok("{\"type\":\"array\"}", "[]");
    ok("{\"type\":\"array\"}", "[[[]],{},0]");
    /* nested arrays of objects */
    const char *deep = "{\"type\":\"object\",\"properties\":{\"rows\":{\"type\":\"array\",\"items\":{\"type\":\"array\","
                       "\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"boolean\"}},\"required\":[\"k\"]}}}}},"
                       "\"required\":[\"rows\"]}";
    ok(deep, "{\"rows\":[[{\"k\":true}],[],[{\"k\":false},{\"k\":true}]]}");
    bad_at(deep, "{\"rows\":[[{\"k\":true}],[{}]]}", 24);
}

static void test_bounds(void) {
    /* whitespace: at most OKV_GRAMMAR_MAX_WS bytes in one gap */
    char text[64];
    snprintf(text, sizeof text, "[%*s1]", OKV_GRAMMAR_MAX_WS, "");
    ok("{\"type\":\"array\"}", text);
    snprintf(text, sizeof text, "[%*s1]", OKV_GRAMMAR_MAX_WS + 1, "");
    bad_at("{\"type\":\"array\"}", text, OKV_GRAMMAR_MAX_WS + 1);
    /* free values nest to a bounded depth, and never get stuck there */
    okv_grammar *g = compile("{\"type\":\"array\"}");
    okv_grammar_match *m = NULL;
    okv_error err;
    CHECK_OK(okv_grammar_match_create(g, &m, &err), &err);
    int depth = 0;
    while (depth < 100 && okv_grammar_match_feed(m, "[", 1)) depth++;
    CHECKF(depth >= 8 && depth < 100, "nesting stopped at %d", depth);
    CHECK(okv_grammar_match_feed(m, "\"x\"", 3) || okv_grammar_match_feed(m, "]", 1));
    okv_grammar_match_free(m);
    okv_grammar_free(g);
}

static void test_refusals(void) {
    refused("{\"type\":\"string\",\"pattern\":\"^a\"}", OKV_ERR_UNSUPPORTED, "'pattern' at #");
    refused("{\"properties\":{\"to\":{\"type\":\"string\",\"format\":\"email\"}}}", OKV_ERR_UNSUPPORTED,
            "'format' \"email\"");
    refused("{\"properties\":{\"to\":{\"type\":\"string\",\"format\":\"email\"}}}", OKV_ERR_UNSUPPORTED,
            "#/properties/to");
    refused("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":4}", OKV_ERR_UNSUPPORTED, "maxLength");
    refused("{\"type\":\"string\",\"format\":7}", OKV_ERR_INVALID, "'format' must be a string");
    refused("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", OKV_ERR_UNSUPPORTED, "additionalProperties");
    refused("{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{}}]}", OKV_ERR_UNSUPPORTED, "anyOf");
    refused("{\"oneOf\":[{\"type\":\"string\"}]}", OKV_ERR_UNSUPPORTED, "'oneOf'");
    refused("{\"type\":\"number\",\"minimum\":0}", OKV_ERR_UNSUPPORTED, "'minimum'");
    refused("{\"enum\":[]}", OKV_ERR_INVALID, "enum");
    refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", OKV_ERR_INVALID, "minItems");
    refused("{\"type\":\"strin\"}", OKV_ERR_INVALID, "strin");
    refused("{\"required\":[\"a\"]}", OKV_ERR_UNSUPPORTED, "'a'");
    refused("{\"$ref\":\"http://x/y\"}", OKV_ERR_UNSUPPORTED, "$ref");
    refused("{\"$defs\":{\"A\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/A\"}}},\"$ref\":\"#/$defs/A\"}",
            OKV_ERR_UNSUPPORTED, "deeper");
    refused("[1]", OKV_ERR_INVALID, "object or a boolean");
    refused("{\"type\":", OKV_ERR_FORMAT, "");
    refused("false", OKV_ERR_INVALID, "false");
    /* deep nesting in the schema text itself */
    char deep[4096] = "";
    for (int i = 0; i < 40; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 40; i++) strcat(deep, "}");
    refused(deep, OKV_ERR_UNSUPPORTED, "deeper than");
}

#define DATE "{\"type\":\"string\",\"format\":\"date\"}"
#define TIME "{\"type\":\"string\",\"format\":\"time\"}"
#define DATETIME "{\"type\":\"string\",\"format\":\"date-time\"}"
#define UUID "{\"type\":\"string\",\"format\":\"uuid\"}"

/* Formats let through valid values only, and stop at the first byte that
 * makes one impossible (RFC 3339 dates and times; expected stops counted
 * by hand: the opening quote is byte 0). */
static void test_formats(void) {
    ok(DATE, "\"2024-02-29\"");                  /* leap year */
    ok(DATE, "\"2000-02-29\"");                  /* divisible by 400 */
    ok(DATE, "\"1999-12-31\"");
    ok(DATE, "\"2023-04-30\"");
    bad_at(DATE, "\"2023-02-29\"", 10);          /* not a leap year: "2023-02-2" then 9 */
    bad_at(DATE, "\"1900-02-29\"", 10);          /* divisible by 100, not 400 */
    bad_at(DATE, "\"2023-04-31\"", 10);          /* April has 30 days */
    bad_at(DATE, "\"2023-13-01\"", 7);           /* month 13 */
    bad_at(DATE, "\"2023-00-01\"", 7);
    bad_at(DATE, "\"2023-01-00\"", 10);
    bad_at(DATE, "\"0999-01-01\"", 1);           /* years 1000-9999 */
    bad_at(DATE, "\"2023-1-01\"", 7);
    bad_at(DATE, "\"2023-01-01T\"", 11);         /* a date is only a date */
    incomplete(DATE, "\"2023-01-0");
    bad_at(DATE, "\"2023-01-0\"", 10);           /* no early closing quote */
    ok(TIME, "\"23:59:59Z\"");
    ok(TIME, "\"00:00:00.123456789+05:30\"");
    ok(TIME, "\"12:30:00-23:59\"");
    bad_at(TIME, "\"24:00:00Z\"", 2);
    bad_at(TIME, "\"23:60:00Z\"", 4);
    bad_at(TIME, "\"23:59:60Z\"", 7);
    bad_at(TIME, "\"23:59:59\"", 9);            /* RFC 3339 full-time: an offset is required */
    bad_at(TIME, "\"23:59:59.Z\"", 10);         /* a fraction has digits */
    bad_at(TIME, "\"23:59:59.1234567890Z\"", 19); /* at most 9 */
    bad_at(TIME, "\"23:59:59+24:00\"", 11);
    incomplete(TIME, "\"23:59:59+05:3");
    ok(DATETIME, "\"2026-12-07T20:45:00Z\"");
    ok(DATETIME, "\"2026-12-07T20:45:00.5+01:00\"");
    bad_at(DATETIME, "\"2026-12-07 20:45:00Z\"", 11);
    bad_at(DATETIME, "\"2026-12-07T20:45Z\"", 17);
    ok(UUID, "\"123e4567-e89b-12d3-a456-426614174000\"");
    ok(UUID, "\"123E4567-E89B-12D3-A456-426614174000\"");
    bad_at(UUID, "\"123e4567e89b-12d3-a456-426614174000\"", 9);
    bad_at(UUID, "\"123e4567-e89b-12d3-a456-42661417400g\"", 36);
    bad_at(UUID, "\"123e4567-e89b-12d3-a456-4266141740\"", 35);
    /* in an object and in an anyOf with null (pydantic's Optional[datetime]) */
    ok("{\"type\":\"object\",\"properties\":{\"when\":" DATETIME "},\"required\":[\"when\"]}",
       "{\"when\":\"2026-01-31T00:00:00Z\"}");
    ok("{\"anyOf\":[" DATE ",{\"type\":\"null\"}]}", "null");
    ok("{\"anyOf\":[" DATE ",{\"type\":\"null\"}]}", "\"2026-01-31\"");
    ok("{\"type\":[\"string\",\"null\"],\"format\":\"uuid\"}", "\"00000000-0000-0000-0000-000000000000\"");
}

int main(void) {
    test_formats();
    test_objects();
    test_scalars();
    test_enum_const_anyof();
    test_arrays();
    test_bounds();
    test_refusals();
    return okv_test_finish();
}
