/* test_chat_builtins.c — the builtin tables behind the Jinja renderer are
 * sorted (their lookup is a binary search, so one misplaced name would make
 * a builtin silently unknown), every builtin the parser accepts is found at
 * both ends of each table, and failures unwind cleanly when the caller
 * passes no error sink (the setjmp guards keep their own). */
#include <string.h>

#include "chat_jinja.h"
#include "offkv_chat.h"
#include "okv_test.h"

static void test_tables(void) {
    CHECK(jinja_builtin_tables_sorted());
    static const char *const filters[] = {
        "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "first", "float", "format",
        "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
        "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
        "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount"};
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        CHECKF(jinja_filter_known(filters[i]), "filter %s", filters[i]);
    static const char *const tests[] = {
        "!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq",
        "equalto", "escaped", "even", "false", "float", "ge", "greaterthan", "gt", "in", "integer",
        "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd",
        "sameas", "sequence", "string", "true", "undefined", "upper"};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        CHECKF(jinja_test_known(tests[i]), "test %s", tests[i]);
    static const char *const unknown[] = {"", "a", "zzz", "defaults", "upperr", "!", "tojso"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECKF(!jinja_filter_known(unknown[i]), "filter '%s' should be unknown", unknown[i]);
        CHECKF(!jinja_test_known(unknown[i]), "test '%s' should be unknown", unknown[i]);
    }
}

static const char *render(const char *tpl, char **out) {
    okv_chat_template *t = NULL;
    *out = NULL;
    if (okv_chat_template_parse(tpl, &t, NULL) != OKV_OK) return "parse failed";
    okv_chat_args a;
    memset(&a, 0, sizeof a);
    a.messages_json = "[]";
    okv_status st = okv_chat_render(t, &a, out, NULL, NULL);
    okv_chat_template_free(t);
    return st == OKV_OK ? NULL : "render failed";
}

static void test_no_error_sink(void) {
    okv_chat_template *t = (okv_chat_template *)1;
    CHECK(okv_chat_template_parse("{% if %}", &t, NULL) == OKV_ERR_FORMAT && t == NULL);
    char *out = NULL;
    CHECK(render("{{ raise_exception('no') }}", &out) && out == NULL);
    CHECK(render("{{ 'a' | nosuch }}", &out) && out == NULL);
    /* one builtin of each table through the lookup, aliases included */
    CHECK(!render("{{ 'aB' | d('x') | upper }}{{ none is none }}{{ 'x y'.split() | length }}"
                  "{{ {'k': 1}.get('k') }}{{ [3, 1].index(1) }}{{ range(3) | list | last }}",
                  &out));
    CHECKF(out && !strcmp(out, "ABTrue2112"), "got %s", out ? out : "(null)");
    free(out);
}

int main(void) {
    test_tables();
    test_no_error_sink();
    return okv_test_finish();
}
