/* test_chat_jinja.c — semantics of the Jinja engine on small templates:
 * loops and loop variables, scoping, namespace, filters, tests, slicing,
 * whitespace control (trim_blocks/lstrip_blocks, -/+ markers), macros,
 * operators, literals; plus malformed templates and render-time failures,
 * which must fail with a message naming the problem and its line:column.
 * Expected outputs follow Jinja2 3.1 semantics (derived by hand, and checked
 * against Python Jinja2 set up like HF: sandboxed, trim_blocks,
 * lstrip_blocks, loopcontrols, HF's tojson). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offkv_chat.h"
#include "okv_test.h"

typedef struct ok_case {
    const char *tpl;
    const char *vars; /* JSON object of extra variables, or NULL */
    const char *want;
} ok_case;

static const ok_case OK_CASES[] = {
    {"{% for x in [1,2,3] %}{{ loop.index }}/{{ loop.length }}{% if not loop.last %},{% endif %}{% endfor %}",
     NULL,
     "1/3,2/3,3/3"},
    {"{% for x in 'abc' %}{{ loop.index0 }}{{ x }}{{ loop.revindex }}{% if loop.first %}F{% endif %} {% endfor %}",
     NULL,
     "0a3F 1b2 2c1 "},
    {"{% for x in [] %}x{% else %}empty{% endfor %}",
     NULL,
     "empty"},
    {"{% for k, v in {'b': 1, 'A': 2, 'c': 3} | dictsort %}{{ k }}={{ v }};{% endfor %}",
     NULL,
     "A=2;b=1;c=3;"},
    {"{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": 2}}",
     "z1a2"},
    {"{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
     NULL,
     "10"},
    {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
     NULL,
     "21"},
    {"{{ [1,2,3,4][::-1] }}|{{ 'hello'[1:3] }}|{{ [1,2,3][-1] }}|{{ 'abcdef'[::2] }}|{{ [1,2,3,4,5][-2:] }}|{{ 'h\xc3""\xa9""llo'[::-1] }}",
     NULL,
     "[4, 3, 2, 1]|el|3|ace|[4, 5]|oll\xc3""\xa9""h"},
    {"a  {{- 'b' -}}  c",
     NULL,
     "abc"},
    {"x\n  {% if true %}\n  y\n  {% endif %}\nz",
     NULL,
     "x\n  y\nz"},
    {"{{ 'a' }}  {% if true %}b{% endif %}",
     NULL,
     "a  b"},
    {"  {%+ if true %}b{% endif +%}\nc",
     NULL,
     "  b\nc"},
    {"{{ '  hi  ' | trim }}|{{ 'abc' | upper }}|{{ [3,1,2] | length }}|{{ 'a-b-c' | replace('-', '+') }}|{{ undefined_var | default('d') }}|{{ none | default('d') }}|{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ ['a','b'] | join(', ') }}|{{ 'hello World' | capitalize }}",
     NULL,
     "hi|ABC|3|a+b+c|d|None|13|a, b|Hello world"},
    {"{{ {'a': [1, 2.5, true, none], '\xc3""\xa9""': 'x\"y\\n'} | tojson }}",
     NULL,
     "{\"a\": [1, 2.5, true, null], \"\xc3""\xa9""\": \"x\\\"y\\n\"}"},
    {"{{ {'a': [1], 'b': {}} | tojson(indent=2) }}",
     NULL,
     "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}"},
    {"{{ x is defined }}{{ y is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ 3 is odd }}{{ 'a' is iterable }}{{ 1 is number }}{{ x is not none }}{{ false is false }}",
     "{\"x\": 1}",
     "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"{{ '  a b  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'x</think>y'.split('</think>')[-1] }}|{{ 'abc'.startswith('ab') }}|{{ d.get('k', 'no') }}|{{ d.get('z') }}|{{ ' a  b '.split() }}|{{ 'xxaxx'.lstrip('x') }}",
     "{\"d\": {\"z\": 1}}",
     "a b|['a', 'b', '', 'c']|y|True|no|1|['a', 'b']|axx"},
    {"{{ 'y' if 1 > 2 else 'n' }}{{ 0 or 'b' }}{{ 1 and 'c' }}{{ 'x' if false }}",
     NULL,
     "nbc"},
    {"{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}",
     NULL,
     "[1B][23]"},
    {"{{ 'a' in 'cat' }}{{ 2 not in [1,2] }}{{ 'k' in {'k': 1} }}",
     NULL,
     "TrueFalseTrue"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'a' ~ 1 ~ none }} {{ 1 + 2 * 3 }} {{ 1 < 2 < 3 }}",
     NULL,
     "3 -4 1 2 3.5 1024 a1None 7 True"},
    {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     NULL,
     "013"},
    {"{{ d.missing }}|{{ d.missing is defined }}|{{ d['k'] }}",
     "{\"d\": {\"k\": \"v\"}}",
     "|False|v"},
    {"{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}",
     NULL,
     "2242"},
    {"a{# c #}b{#- c -#}  c",
     NULL,
     "abc"},
    {"{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}",
     "{\"msgs\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
     "a,c"},
    {"{{ ['a','code_interpreter','b'] | reject('equalto','code_interpreter') | join(', ') }}|{{ ['a', 'b'] | map('upper') | list }}",
     NULL,
     "a, b|['A', 'B']"},
    {"{% set s %}hi {{ 1 }}{% endset %}[{{ s }}]",
     NULL,
     "[hi 1]"},
    {"{{ {'a': \"it's\", 'b': (1, 2), 'c': none} }}",
     NULL,
     "{'a': \"it's\", 'b': (1, 2), 'c': None}"},
    {"{{ 1.0 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123.456 }}",
     NULL,
     "1.0 1e-05 0.30000000000000004 1e+16 123.456"},
    {"{{ 'a\\tb\\u00e9\\x41' }}",
     NULL,
     "a\tb\xc3""\xa9""A"},
    {"{% for i in range(3, -1, -1) %}{{ i }}{% endfor %}|{{ range(2) | list }}",
     NULL,
     "3210|[0, 1]"},
    {"{% for m in msgs[1:] %}{{ m }}{% endfor %}|{{ msgs | length - 1 }}|{{ -(msgs|length) }}",
     "{\"msgs\": [1, 2, 3]}",
     "23|2|-3"},
    {"{% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %}",
     NULL,
     "c"},
    {"{{ ['\\u2003', '\\x01', '\xc3""\xa9""', '\\U0001F999'] }}",
     NULL,
     "['\\u2003', '\\x01', '\xc3""\xa9""', '\xf0""\x9f""\xa6""\x99""']"},
    {"{{ 'a,b,c'.split(',', 1) }}|{{ '  x  '.rstrip() }}|{{ 'Hello'.lower() }}|{{ 'ab'.replace('', '-') }}|{{ 'x' * 3 }}|{{ [1] + [2] }}",
     NULL,
     "['a', 'b,c']|  x|hello|-a-b-|xxx|[1, 2]"},
    {"{% for i in range(2) %}{% for j in range(2) %}{{ loop.index0 }}{{ i }}{% endfor %}{{ loop.index }};{% endfor %}",
     NULL,
     "00101;01112;"},
    {"{{ \"it's a-b (c) x_y\" | title }}|{{ 'Helq\"x y_z 3' | wordcount }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 7 | round }}|{{ 1.5 is odd }}|{{ 3 * 'ab' }}|{{ 4.0 is divisibleby 2 }}",
     NULL,
     "It's A-B (C) X_y|4|2.0|4.0|7|False|ababab|True"},
    /* HF's AssistantTracker tag renders its body unchanged */
    {"{% for m in ['a', 'b'] %}{% generation %}{{ m }}{% endgeneration %}\n{% endfor %}",
     NULL,
     "ab"},
    /* JSON input keeps Python's int/float distinction (json.loads) */
    {"{{ x }} {{ y }} {{ z }} {{ [x, y, w] | tojson }} {{ x is float }}{{ y is integer }}",
     "{\"x\": 1.0, \"y\": -2, \"z\": 1e2, \"w\": 0.5}",
     "1.0 -2 100.0 [1.0, -2, 0.5] TrueTrue"},
    /* `-` markers and lstrip_blocks strip Unicode whitespace (NBSP, U+3000) */
    {"a\xc2\xa0{{- 'b' -}}\xe3\x80\x80""c|x\n\xc2\xa0 {% if true %}y{% endif %}",
     NULL,
     "abc|x\ny"},
    /* block set and for-else bodies are scopes of their own; a for whose
     * every body run ends in continue/break still takes its else branch */
    {"{% set x = 1 %}{% set b %}{% set x = 2 %}{{ x }}{% endset %}{{ b }}{{ x }}|"
     "{% for i in [1] %}{% continue %}{% else %}E{% endfor %}|"
     "{% for i in [] %}{% else %}{% set x = 3 %}{{ x }}{% endfor %}{{ x }}",
     NULL,
     "21|E|31"},
    /* loop.cycle; tojson's ensure_ascii / separators / sort_keys */
    {"{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}|"
     "{{ {'z': '\xc3\xa9\xf0\x9f\xa6\x99\x7f', 'a': [1, 2]} | tojson(ensure_ascii=true, separators=(',', ':'), sort_keys=true) }}",
     NULL,
     "aba|{\"a\":[1,2],\"z\":\"\\u00e9\\ud83e\\udd99\\u007f\"}"},
    /* printf-style % formatting and the format filter */
    {"{{ 'a%sb%dc' % ('x', 2.7) }}|{{ '%-4s|%05.1f|%+d|%#x|%o|%X' % ('ab', 3.14159, 5, 255, 8, -255) }}|{{ '%(k)s=%(v)r' % {'k': 'key', 'v': 'it'} }}|{{ '%s' % [1] }}|{{ '%d%%' | format(50) }}|{{ '%5.2s|%c' % ('\xc3""\xa9""\xe4""\xb8""\xad""\xc3""\xa9""', 65) }}",
     NULL,
     "axb2c|ab  |003.1|+5|0xff|10|-FF|key='it'|[1]|50%|   \xc3""\xa9""\xe4""\xb8""\xad""|A"},
    /* integer powers by squaring (a huge exponent of 1 must not loop) */
    {"{{ 1 ** 1000000000000 }}|{{ (-2) ** 3 }}|{{ 2 ** -1 }}",
     NULL,
     "1|-8|0.5"},
};

typedef struct err_case {
    const char *tpl;
    const char *vars;
    const char *want1; /* both must appear in the message */
    const char *want2;
} err_case;

/* Malformed templates: rejected by okv_chat_template_parse. */
static const err_case PARSE_ERRORS[] = {
    {"ab\n{% if x %}abc", NULL, "unclosed 'if'", "2:1"},
    {"{% for x in y %}{% if x %}{% endfor %}", NULL, "unexpected 'endfor' inside 'if'", "1:30"},
    {"{{ x ", NULL, "unclosed '{{'", "1:1"},
    {"{% if x ", NULL, "unclosed '{%'", "1:1"},
    {"x\n  {% foo %}", NULL, "unknown tag 'foo'", "2:6"},
    {"{{ x | nosuch }}", NULL, "unknown or unsupported filter 'nosuch'", "1:8"},
    {"{{ x is nosuch }}", NULL, "unknown or unsupported test 'nosuch'", "1:9"},
    {"{{ 1 + }}", NULL, "unexpected end of print statement", "1:8"},
    {"{% endfor %}", NULL, "unexpected 'endfor'", "1:4"},
    {"{% else %}", NULL, "unexpected 'else'", "1:4"},
    {"{# never closed", NULL, "unclosed comment", "1:1"},
    {"{{ 'abc }}", NULL, "unterminated string", "1:4"},
    {"{% call foo() %}{% endcall %}", NULL, "unsupported tag 'call'", "1:4"},
    {"{{ (1 }}", NULL, "unexpected '}'", "1:7"},
    {"{{ 1 ]}}", NULL, "unexpected ']'", "1:6"},
    {"{{ a $ b }}", NULL, "unexpected character '$'", "1:6"},
    {"{% break %}", NULL, "'break' outside of a loop", "1:1"},
    {"{% set = 1 %}", NULL, "expected a name", "1:8"},
    {"{% for x y %}{% endfor %}", NULL, "expected 'in'", "1:10"},
    {"{% if x %}{% endif", NULL, "unclosed '{%'", "1:11"},
};

/* Well-formed templates whose render must fail. */
static const err_case RENDER_ERRORS[] = {
    {"ab{{ raise_exception('boom ' ~ 1) }}", NULL, "boom 1", "1:6"},
    {"{{ x.y }}", NULL, "'x' is undefined", "1:6"},
    {"{{ d.missing.x }}", "{\"d\": {}}", "'dict object' has no attribute 'missing'", "1:14"},
    {"{{ 'a' + 1 }}", NULL, "unsupported operand type(s) for +: 'str' and 'int'", "1:8"},
    {"{{ -msgs|length }}", "{\"msgs\": [1]}", "bad operand type for unary -: 'list'", "1:4"},
    {"{% set n = 1 %}\n{% set n.a = 2 %}", NULL, "non-namespace", "2:1"},
    {"{{ range(1000000) | length }}", NULL, "Range too big", "1:4"},
    {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", NULL, "recursion too deep", ""},
    {"{{ 1 // 0 }}", NULL, "division", "1:6"},
    {"{{ [1][::0] }}", NULL, "slice step cannot be zero", ""},
    {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, "too many values to unpack", ""},
    {"{{ none | tojson }}{{ x | tojson }}", NULL, "not JSON serializable", ""},
    {"{{ 'abc'.zfill(5) }}", NULL, "string method 'zfill' is not supported", ""},
    {"{{ '%s %s' % ('a',) }}", NULL, "not enough arguments for format string", "1:12"},
    {"{{ 'ab' % 1 }}", NULL, "not all arguments converted", ""},
    {"{{ '%x' % 2.5 }}", NULL, "an integer is required", ""},
    {"{{ [1].append(2) }}", NULL, "method 'append'", ""},
    {"{% for x in 5 %}{% endfor %}", NULL, "'int' object is not iterable", ""},
    {"{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", NULL, "macro 'f' takes at most 1 argument", ""},
    {"{% macro f(a) %}{% endmacro %}{{ f(b=2) }}", NULL, "unexpected keyword argument 'b'", ""},
};

static char *render(const char *tpl, const char *vars, okv_error *err, okv_status *st) {
    okv_chat_template *t = NULL;
    *st = okv_chat_template_parse(tpl, &t, err);
    if (*st) return NULL;
    okv_chat_args args = {0};
    args.messages_json = "[]";
    args.extra_vars_json = vars;
    char *out = NULL;
    *st = okv_chat_render(t, &args, &out, NULL, err);
    okv_chat_template_free(t);
    return out;
}

static void test_ok_cases(void) {
    for (size_t i = 0; i < sizeof OK_CASES / sizeof *OK_CASES; i++) {
        const ok_case *c = &OK_CASES[i];
        okv_error err = {0};
        okv_status st;
        char *out = render(c->tpl, c->vars, &err, &st);
        CHECKF(st == OKV_OK, "case %zu (%s): %s", i, c->tpl, err.message);
        if (out) CHECKF(!strcmp(out, c->want), "case %zu (%s):\n got  [%s]\n want [%s]", i, c->tpl, out, c->want);
        free(out);
    }
}

static void test_parse_errors(void) {
    for (size_t i = 0; i < sizeof PARSE_ERRORS / sizeof *PARSE_ERRORS; i++) {
        const err_case *c = &PARSE_ERRORS[i];
        okv_chat_template *t = NULL;
        okv_error err = {0};
        okv_status st = okv_chat_template_parse(c->tpl, &t, &err);
        CHECKF(st == OKV_ERR_FORMAT && t == NULL, "parse error case %zu (%s): status %d", i, c->tpl, (int)st);
        CHECKF(strstr(err.message, c->want1) && strstr(err.message, c->want2),
               "parse error case %zu (%s): message [%s] lacks [%s] / [%s]", i, c->tpl, err.message, c->want1, c->want2);
        okv_chat_template_free(t);
    }
}

static void test_render_errors(void) {
    for (size_t i = 0; i < sizeof RENDER_ERRORS / sizeof *RENDER_ERRORS; i++) {
        const err_case *c = &RENDER_ERRORS[i];
        okv_error err = {0};
        okv_status st;
        char *out = render(c->tpl, c->vars, &err, &st);
        CHECKF(st != OKV_OK && out == NULL, "render error case %zu (%s): rendered [%s]", i, c->tpl, out ? out : "");
        CHECKF(strstr(err.message, c->want1) && strstr(err.message, c->want2),
               "render error case %zu (%s): message [%s] lacks [%s] / [%s]", i, c->tpl, err.message, c->want1, c->want2);
        free(out);
    }
}

/* Context as HF builds it: tools none unless given, unset special tokens
 * undefined, kwargs override, add_generation_prompt a bool. */
static void test_context(void) {
    okv_chat_template *t = NULL;
    okv_error err = {0};
    CHECK_OK(okv_chat_template_parse("{{ tools is none }}|{{ pad_token is defined }}|{{ bos_token }}|"
                                     "{{ add_generation_prompt }}|{{ messages[0].content }}|{{ documents }}|{{ x }}",
                                     &t, &err), &err);
    if (!t) return;
    okv_chat_args args = {0};
    args.messages_json = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    args.bos_token = "<s>";
    args.add_generation_prompt = true;
    args.extra_vars_json = "{\"x\": [1, \"a\"], \"bos_token\": \"<B>\"}";
    char *out = NULL;
    CHECK_OK(okv_chat_render(t, &args, &out, NULL, &err), &err);
    if (out) CHECKF(!strcmp(out, "True|False|<B>|True|hi|None|[1, 'a']"), "got [%s]", out);
    free(out);
    out = NULL;
    args.messages_json = "{\"not\": \"a list\"}";
    CHECK(okv_chat_render(t, &args, &out, NULL, &err) == OKV_ERR_INVALID && out == NULL);
    args.messages_json = "[1, 2";
    CHECK(okv_chat_render(t, &args, &out, NULL, &err) == OKV_ERR_INVALID && strstr(err.message, "messages_json"));
    args.messages_json = "[] 7";
    CHECK(okv_chat_render(t, &args, &out, NULL, &err) == OKV_ERR_INVALID && strstr(err.message, "messages_json"));
    args.messages_json = "[]";
    args.extra_vars_json = "[1]";
    CHECK(okv_chat_render(t, &args, &out, NULL, &err) == OKV_ERR_INVALID && strstr(err.message, "extra_vars_json"));
    okv_chat_template_free(t);
}

/* The step cap stops runaway loops (templates are untrusted); a render
 * within the cap is unaffected. */
static void test_step_limit(void) {
    okv_chat_template *t = NULL;
    okv_error err = {0};
    CHECK_OK(okv_chat_template_parse("{% set r = range(100) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}ok",
                                     &t, &err), &err);
    if (!t) return;
    okv_chat_args args = {0};
    args.messages_json = "[]";
    args.max_steps = 5000;
    char *out = NULL;
    CHECK(okv_chat_render(t, &args, &out, NULL, &err) == OKV_ERR_INVALID && out == NULL);
    CHECKF(strstr(err.message, "exceeded 5000 loop iterations") && strstr(err.message, "1:41"), "%s", err.message);
    args.max_steps = 10100; /* 100 outer + 10000 inner iterations */
    CHECK_OK(okv_chat_render(t, &args, &out, NULL, &err), &err);
    CHECK(out && !strcmp(out, "ok"));
    free(out);
    okv_chat_template_free(t);
}

/* strftime_now with a fixed clock: 2024-07-26 12:00:00 UTC. */
static void test_strftime_now(void) {
    okv_chat_template *t = NULL;
    okv_error err = {0};
    CHECK_OK(okv_chat_template_parse("{{ strftime_now('%d %b %Y') }}", &t, &err), &err);
    if (!t) return;
    okv_chat_args args = {0};
    args.messages_json = "[]";
    args.now_unix = 1721995200;
    char *out = NULL;
    CHECK_OK(okv_chat_render(t, &args, &out, NULL, &err), &err);
    if (out) CHECKF(!strcmp(out, "26 Jul 2024"), "got [%s]", out);
    free(out);
    okv_chat_template_free(t);
}

/* tokenizer_config.json forms: list-of-templates, AddedToken objects. */
static void test_config(void) {
    okv_chat_config cfg;
    okv_error err = {0};
    const char *list_form =
        "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": \"D{{ bos_token }}\"}],"
        " \"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\", \"pad_token\": null}";
    CHECK_OK(okv_chat_config_parse(list_form, &cfg, &err), &err);
    CHECK(cfg.chat_template && !strcmp(cfg.chat_template, "D{{ bos_token }}"));
    CHECK(cfg.bos_token && !strcmp(cfg.bos_token, "<s>"));
    CHECK(cfg.eos_token && !strcmp(cfg.eos_token, "</s>"));
    CHECK(cfg.pad_token == NULL && cfg.unk_token == NULL);
    okv_chat_config_free(&cfg);
    /* no template: the tokens still come through */
    CHECK_OK(okv_chat_config_parse("{\"bos_token\": \"<s>\"}", &cfg, &err), &err);
    CHECK(cfg.chat_template == NULL && cfg.bos_token && !strcmp(cfg.bos_token, "<s>"));
    okv_chat_config_free(&cfg);
    CHECK(okv_chat_config_parse("not json", &cfg, &err) != OKV_OK);
    CHECK(okv_chat_config_parse("{\"chat_template\": 3}", &cfg, &err) == OKV_ERR_FORMAT);
    okv_chat_template *t = NULL;
    CHECK(okv_chat_template_from_config("{\"chat_template\": [{\"name\": \"x\", \"template\": \"T\"}]}", &cfg, &t, &err) ==
          OKV_ERR_NOT_FOUND);
    CHECK(t == NULL && strstr(err.message, "chat_template") != NULL);
    CHECK(okv_chat_template_from_config("{\"chat_template\": \"{% if %}\"}", &cfg, &t, &err) == OKV_ERR_FORMAT);
    CHECK(t == NULL && strstr(err.message, "tokenizer_config.json chat_template") != NULL);
}

/* Pathological input must fail cleanly, not overflow the stack. */
static void test_deep_nesting(void) {
    size_t n = 20000;
    char *src = malloc(n * 2 + 16);
    size_t o = 0;
    o += (size_t)sprintf(src, "{{ ");
    for (size_t i = 0; i < n; i++) src[o++] = '(';
    src[o++] = '1';
    for (size_t i = 0; i < n; i++) src[o++] = ')';
    sprintf(src + o, " }}");
    okv_chat_template *t = NULL;
    okv_error err = {0};
    CHECK(okv_chat_template_parse(src, &t, &err) != OKV_OK && t == NULL);
    free(src);
    src = malloc(n * 12 + 16);
    o = 0;
    for (size_t i = 0; i < 5000; i++) o += (size_t)sprintf(src + o, "{%% if 1 %%}");
    src[o] = 0;
    CHECK(okv_chat_template_parse(src, &t, &err) != OKV_OK && t == NULL);
    free(src);
}

/* "{{ HEAD LINK LINK ... }}" with n links. */
static char *chain(const char *head, const char *link, size_t n) {
    size_t lh = strlen(head), ll = strlen(link);
    char *s = malloc(lh + ll * n + 16);
    size_t o = (size_t)sprintf(s, "{{ %s", head);
    for (size_t i = 0; i < n; i++) { memcpy(s + o, link, ll); o += ll; }
    strcpy(s + o, " }}");
    return s;
}

/* Left-associative chains are built by loops but make trees as deep as they
 * are long, which the renderer recursed over without a bound: 20000 links
 * overflowed the stack (about 2000 under ASan). Each kind must now be refused
 * at parse time with the line; a chain within the bound still renders. */
static void test_long_chains(void) {
    static const struct { const char *head, *link, *short_want; } kinds[] = {
        {"1", "+1", "151"},
        {"'a'", "|trim", "a"},
        {"x", "[0]", "0"},
        {"y", ".a", "1"},
        {"0", " or 0", "0"},
        {"1", " and 1", "1"},
        {"'a'", " ~ ''", "a"},
        {"2", " * 1", "2"},
        {"f", "()", ""},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        char *src = chain(kinds[k].head, kinds[k].link, 20000);
        okv_chat_template *t = NULL;
        okv_error err = {0};
        okv_status st = okv_chat_template_parse(src, &t, &err);
        CHECKF(st != OKV_OK && t == NULL && strstr(err.message, "1:") && strstr(err.message, "nested deeper than"),
               "chain '%s': %s", kinds[k].link, err.message);
        if (t) { /* what the old code did: parse, then overflow the stack rendering */
            okv_chat_args args = {.messages_json = "[]"};
            char *out = NULL;
            if (!okv_chat_render(t, &args, &out, NULL, &err)) free(out);
        }
        okv_chat_template_free(t);
        free(src);
        if (!*kinds[k].short_want) continue;
        /* x = [[[...0...]]] and y = {a: {a: ... 1}} 150 deep, for the short chains */
        char vars[4096];
        size_t o = (size_t)sprintf(vars, "{\"x\": ");
        for (int i = 0; i < 150; i++) vars[o++] = '[';
        vars[o++] = '0';
        for (int i = 0; i < 150; i++) vars[o++] = ']';
        o += (size_t)sprintf(vars + o, ", \"y\": ");
        for (int i = 0; i < 150; i++) o += (size_t)sprintf(vars + o, "{\"a\": ");
        vars[o++] = '1';
        for (int i = 0; i < 150; i++) vars[o++] = '}';
        strcpy(vars + o, "}");
        src = chain(kinds[k].head, kinds[k].link, 150);
        char *out = render(src, vars, &err, &st);
        CHECKF(st == OKV_OK && out && !strcmp(out, kinds[k].short_want), "chain '%s' x150: %s", kinds[k].link,
               st ? err.message : out);
        free(out);
        free(src);
    }
    /* an elif chain recursed in the parser without a bound */
    size_t n = 50000;
    char *src = malloc(n * 16 + 64);
    size_t o = (size_t)sprintf(src, "{%% if 0 %%}");
    for (size_t i = 0; i < n; i++) o += (size_t)sprintf(src + o, "{%% elif 0 %%}");
    strcpy(src + o, "{% endif %}");
    okv_chat_template *t = NULL;
    okv_error err = {0};
    CHECK(okv_chat_template_parse(src, &t, &err) != OKV_OK && t == NULL && strstr(err.message, "too deeply"));
    free(src);
}

/* Render-time bounds: macros stack their bodies' depth; values built by a
 * template can be deep or contain themselves. */
static void test_render_depth(void) {
    /* the recursive call is the deepest leaf of a 150-link chain */
    char src[8192];
    size_t o = (size_t)sprintf(src, "{%% macro f(n) %%}{{ (f(n - 1) if n > 0 else '')");
    for (int i = 0; i < 150; i++) o += (size_t)sprintf(src + o, " ~ 'a'");
    strcpy(src + o, " }}{% endmacro %}{{ f(50) }}");
    okv_error err = {0};
    okv_status st;
    char *out = render(src, NULL, &err, &st);
    CHECKF(st != OKV_OK && strstr(err.message, "render nested deeper than"), "%s", st ? err.message : out);
    free(out);
    out = render("{% set ns = namespace(x=0) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
                 NULL, &err, &st);
    CHECKF(st != OKV_OK && strstr(err.message, "nested deeper than"), "%s", st ? err.message : "rendered");
    free(out);
    out = render("{% set ns = namespace(x=0) %}{% set ns.x = ns %}{{ ns }}", NULL, &err, &st);
    CHECKF(st != OKV_OK && strstr(err.message, "containing itself"), "%s", st ? err.message : out);
    free(out);
    out = render("{% set ns = namespace(x=0) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                 "{{ ns.x == ns.x }}{{ [ns.x] < [ns.x] }}", NULL, &err, &st);
    CHECKF(st != OKV_OK && strstr(err.message, "containing themselves"), "%s", st ? err.message : out);
    free(out);
}

int main(void) {
    test_ok_cases();
    test_parse_errors();
    test_render_errors();
    test_context();
    test_strftime_now();
    test_step_limit();
    test_config();
    test_deep_nesting();
    test_long_chains();
    test_render_depth();
    return okv_test_finish();
}
