/* Tests the function-tool module (okv_server_tools.h): request fields
 * checked with the failing field named; replies split into text and calls
 * for each family's syntax (Qwen/Hermes <tool_call> blocks, several of
 * them = parallel calls; Llama-3.x {"name", "parameters"} after an optional
 * <|python_tag|>; the generic {"name", "arguments"}), malformed, unknown or
 * partial calls staying text unchanged; the same split whatever the piece
 * boundaries (every split point of every case, and byte by byte); messages
 * with tool calls made ready for templates; the forced-call grammar
 * accepting the family's call and refusing arguments its schema forbids. */
#include <stdbool.h>

#include "okv_server_tools.h"
#include "okv_test.h"

#define WEATHER_TOOL "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\"," \
                     "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}," \
                     "\"required\":[\"city\"],\"additionalProperties\":false}}}"
#define ADD_TOOL "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\"," \
                 "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}}"

static int parse_body(const char *body, srv_tools *t, const char **param, char *msg) {
    cJSON *j = cJSON_Parse(body);
    CHECKF(j != NULL, "test body does not parse: %s", body);
    int st = j ? srv_tools_parse(j, t, msg, 256, param) : -1;
    cJSON_Delete(j);
    return st;
}

static void tools_of(srv_tools *t, const char *extra) {
    char body[2048];
    snprintf(body, sizeof body, "{\"tools\":[" WEATHER_TOOL "," ADD_TOOL "]%s}", extra);
    const char *param = NULL;
    char msg[256];
    int st = parse_body(body, t, &param, msg);
    CHECKF(st == 0, "tools body refused: %s", msg);
}

static void refused(const char *body, const char *want_param) {
    srv_tools t;
    const char *param = NULL;
    char msg[256] = "";
    int st = parse_body(body, &t, &param, msg);
    CHECKF(st == 400 && param && !strcmp(param, want_param), "%s: status %d param %s (want 400 %s) %s", body, st,
           param ? param : "(null)", want_param, msg);
    CHECKF(st != 400 || strstr(msg, want_param), "message '%s' does not name %s", msg, want_param);
    CHECK(t.fns == NULL && t.list == NULL);
}

static void test_fields(void) {
    srv_tools t;
    tools_of(&t, "");
    CHECK(t.n == 2 && t.choice == SRV_TOOLS_AUTO && t.parallel && srv_tools_active(&t));
    CHECK(!strcmp(t.fns[0].name, "get_weather") && strstr(t.fns[0].parameters, "\"city\""));
    srv_tools_free(&t);
    tools_of(&t, ",\"tool_choice\":\"none\",\"parallel_tool_calls\":false");
    CHECK(t.choice == SRV_TOOLS_NONE && !t.parallel && !srv_tools_active(&t));
    srv_tools_free(&t);
    tools_of(&t, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}");
    CHECK(t.choice == SRV_TOOLS_NAMED && t.named == 1);
    srv_tools_free(&t);
    tools_of(&t, ",\"tool_choice\":\"required\"");
    CHECK(t.choice == SRV_TOOLS_REQUIRED);
    srv_tools_free(&t);
    /* no tools at all: nothing active, auto by default */
    const char *param;
    char msg[256];
    CHECK(parse_body("{}", &t, &param, msg) == 0 && t.n == 0 && !srv_tools_active(&t));
    srv_tools_free(&t);
    /* a function without parameters gets the any-object schema */
    CHECK(parse_body("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]}", &t, &param, msg) == 0 &&
          t.n == 1 && !strcmp(t.fns[0].parameters, "{\"type\":\"object\"}"));
    srv_tools_free(&t);

    /* the Responses API's flat shape: listed for the template in the chat shape */
    CHECK(parse_body("{\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}],"
                     "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}}", &t, &param, msg) == 0);
    char *listed = t.list ? cJSON_PrintUnformatted(t.list) : NULL;
    CHECKF(t.n == 1 && t.choice == SRV_TOOLS_NAMED && listed &&
           !strcmp(listed, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]"),
           "flat tools listed as %s", listed ? listed : "(null)");
    free(listed);
    srv_tools_free(&t);
    refused("{\"tools\":[{\"type\":\"function\",\"name\":\"\"}]}", "tools[0].name");
    refused("{\"tools\":{}}", "tools");
    refused("{\"tools\":[" WEATHER_TOOL ",{\"type\":\"function\",\"function\":{\"description\":\"x\"}}]}", "tools[1].function.name");
    refused("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"has space\"}}]}", "tools[0].function.name");
    refused("{\"tools\":[" WEATHER_TOOL "," WEATHER_TOOL "]}", "tools[1].function.name");
    refused("{\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0].type");
    refused("{\"tools\":[{\"type\":\"function\"}]}", "tools[0].function");
    refused("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]}", "tools[0].function.parameters");
    refused("{\"tools\":[" WEATHER_TOOL "],\"tool_choice\":\"sometimes\"}", "tool_choice");
    refused("{\"tools\":[" WEATHER_TOOL "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}", "tool_choice");
    refused("{\"tool_choice\":\"required\"}", "tool_choice");
    refused("{\"tools\":[" WEATHER_TOOL "],\"parallel_tool_calls\":1}", "parallel_tool_calls");
}

/* ---- the split ---------------------------------------------------------------- */

typedef struct collected {
    char text[4096];
    size_t n_text;
    int n_calls;
    char names[8][64];
    char args[8][512];
    char ids[8][32];
    int bad_index;       /* a call whose index was not the next one */
} collected;

static void got_text(void *ctx, const char *text, size_t len) {
    collected *c = ctx;
    if (c->n_text + len < sizeof c->text) {
        memcpy(c->text + c->n_text, text, len);
        c->n_text += len;
        c->text[c->n_text] = 0;
    }
}

static void got_call(void *ctx, int index, const srv_tool_call *call) {
    collected *c = ctx;
    if (index != c->n_calls) c->bad_index++;
    if (c->n_calls < 8) {
        snprintf(c->names[c->n_calls], 64, "%s", call->name);
        snprintf(c->args[c->n_calls], 512, "%s", call->arguments);
        snprintf(c->ids[c->n_calls], 32, "%s", call->id);
    }
    c->n_calls++;
}

/* Splits text fed in pieces cut at the given points (sorted, in (0, len)). */
static void split(const srv_tools *t, const char *text, const size_t *cuts, int n_cuts, collected *out) {
    memset(out, 0, sizeof *out);
    srv_tool_stream s;
    srv_tool_sink sink = {got_text, got_call, out};
    srv_tool_stream_init(&s, t, 7);
    size_t at = 0, len = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        srv_tool_stream_push(&s, text + at, to - at, &sink);
        at = to;
    }
    srv_tool_stream_end(&s, &sink);
    srv_tool_stream_free(&s);
}

static bool same(const collected *a, const collected *b) {
    if (a->n_text != b->n_text || memcmp(a->text, b->text, a->n_text) || a->n_calls != b->n_calls) return false;
    for (int i = 0; i < a->n_calls && i < 8; i++)
        if (strcmp(a->names[i], b->names[i]) || strcmp(a->args[i], b->args[i]) || strcmp(a->ids[i], b->ids[i])) return false;
    return true;
}

/* The split of text: expected content, and calls as "name args" strings.
 * Also every two-piece cut and the byte-by-byte feed give the same. */
static void expect(const srv_tools *t, const char *text, const char *content, int n_calls, const char *const *calls) {
    collected whole, cut;
    split(t, text, NULL, 0, &whole);
    CHECKF(!strcmp(whole.text, content), "'%s': content '%s', want '%s'", text, whole.text, content);
    CHECKF(whole.n_calls == n_calls && !whole.bad_index, "'%s': %d calls, want %d", text, whole.n_calls, n_calls);
    for (int i = 0; i < n_calls && i < whole.n_calls; i++) {
        char got[600];
        snprintf(got, sizeof got, "%s %s", whole.names[i], whole.args[i]);
        CHECKF(!strcmp(got, calls[i]), "'%s': call %d is '%s', want '%s'", text, i, got, calls[i]);
        CHECKF(!strncmp(whole.ids[i], "call_", 5) && strlen(whole.ids[i]) == 29, "id '%s'", whole.ids[i]);
        for (int k = 0; k < i; k++) CHECKF(strcmp(whole.ids[i], whole.ids[k]), "ids %d and %d equal", i, k);
    }
    size_t len = strlen(text);
    bool all_same = true;
    for (size_t at = 1; at < len; at++) {
        split(t, text, &at, 1, &cut);
        if (!same(&whole, &cut)) {
            CHECKF(0, "'%s' cut at %zu: content '%s' calls %d", text, at, cut.text, cut.n_calls);
            all_same = false;
            break;
        }
    }
    size_t *bytes = malloc(len * sizeof *bytes);
    for (size_t i = 0; i + 1 < len; i++) bytes[i] = i + 1;
    if (len > 1) {
        split(t, text, bytes, (int)len - 1, &cut);
        CHECKF(same(&whole, &cut), "'%s' byte by byte: content '%s' calls %d", text, cut.text, cut.n_calls);
    }
    free(bytes);
    CHECK(all_same);
}

#define QCALL(args) "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " args "}\n</tool_call>"

static void test_tagged(void) {
    srv_tools t;
    tools_of(&t, "");
    const char *one[] = {"get_weather {\"city\":\"Paris\"}"};
    expect(&t, QCALL("{\"city\": \"Paris\"}"), "", 1, one);
    expect(&t, "\n" QCALL("{\"city\":\"Paris\"}") "\n", "", 1, one);
    expect(&t, "Let me check.\n\n" QCALL("{\"city\": \"Paris\"}"), "Let me check.", 1, one);
    /* arguments given as a JSON string are decoded */
    expect(&t, "<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}</tool_call>", "", 1, one);
    const char *two[] = {"get_weather {\"city\":\"Paris\"}", "add {\"a\":1,\"b\":2}"};
    expect(&t, QCALL("{\"city\": \"Paris\"}") "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
           "", 2, two);
    /* not calls: stay text, byte for byte */
    const char *bad1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
    expect(&t, bad1, bad1, 0, NULL);
    const char *unknown = "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call>";
    expect(&t, unknown, unknown, 0, NULL);
    const char *args_not_object = "<tool_call>{\"name\": \"add\", \"arguments\": [1, 2]}</tool_call>";
    expect(&t, args_not_object, args_not_object, 0, NULL);
    expect(&t, "I use <tool_ a lot", "I use <tool_ a lot", 0, NULL);
    expect(&t, "ends with <tool_c", "ends with <tool_c", 0, NULL);
    /* an unclosed block at the end: a call when complete, else its text */
    expect(&t, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "", 1, one);
    expect(&t, "<tool_call>\n{\"name\": \"get_weather\", \"argu", "<tool_call>\n{\"name\": \"get_weather\", \"argu", 0, NULL);
    /* text after the calls stays content, whitespace around calls does not */
    expect(&t, QCALL("{\"city\": \"Paris\"}") "\n\nDone.", "Done.", 1, one);
    expect(&t, "plain  text\n", "plain  text\n", 0, NULL);
    expect(&t, "  \n", "  \n", 0, NULL);
    srv_tools_free(&t);
    /* parallel_tool_calls false: the first call only */
    tools_of(&t, ",\"parallel_tool_calls\":false");
    expect(&t, QCALL("{\"city\": \"Paris\"}") QCALL("{\"city\": \"Rome\"}"), "", 1, one);
    srv_tools_free(&t);
}

static void test_json(void) {
    srv_tools t;
    tools_of(&t, "");
    const char *add[] = {"add {\"a\":3,\"b\":4}"};
    expect(&t, "{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": 4}}", "", 1, add);          /* Llama-3.x */
    expect(&t, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": 4}}", "", 1, add);
    expect(&t, " {\"name\":\"add\",\"arguments\":{\"a\":3,\"b\":4}} \n", "", 1, add);              /* generic */
    expect(&t, "```json\n{\"name\":\"add\",\"arguments\":{\"a\":3,\"b\":4}}\n```", "", 1, add);
    const char *two[] = {"add {\"a\":3,\"b\":4}", "get_weather {\"city\":\"Oslo\"}"};
    expect(&t, "[{\"name\":\"add\",\"arguments\":{\"a\":3,\"b\":4}},{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}]",
           "", 2, two);
    /* JSON that is not a call stays text unchanged */
    const char *data[] = {"{\"answer\": 42}", "{\"name\": \"add\", \"parameters\": {\"a\": 3}", "[1, 2]",
                          "{\"name\": \"sub\", \"arguments\": {}}", "{\"name\": \"add\"} and more",
                          "[{\"name\":\"add\",\"arguments\":{}},{\"name\":\"nope\"}]", "<|python_tag|>print(1)",
                          "```json\n{\"a\": 1}\n```", "```python\nx = 1\n```"};
    for (size_t i = 0; i < sizeof data / sizeof *data; i++) expect(&t, data[i], data[i], 0, NULL);
    /* a call object not at the start is text */
    const char *late = "Sure: {\"name\": \"add\", \"arguments\": {\"a\": 3, \"b\": 4}}";
    expect(&t, late, late, 0, NULL);
    srv_tools_free(&t);
}

/* ---- templates' inputs and the forced call ---------------------------------------- */

static void test_messages(void) {
    char why[160];
    cJSON *m = cJSON_Parse("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
                           "\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\": 1, \\\"b\\\": 2}\"}}]}");
    cJSON *e = srv_tools_message(m, why, sizeof why);
    char *text = e ? cJSON_PrintUnformatted(e) : NULL;
    CHECKF(text && !strcmp(text, "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
                                 "\"function\":{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}}]}"),
           "assistant with calls: %s", text ? text : why);
    free(text);
    cJSON_Delete(e);
    cJSON_Delete(m);
    m = cJSON_Parse("{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"name\":\"add\",\"content\":[{\"type\":\"text\",\"text\":\"3\"}]}");
    e = srv_tools_message(m, why, sizeof why);
    text = e ? cJSON_PrintUnformatted(e) : NULL;
    CHECKF(text && !strcmp(text, "{\"role\":\"tool\",\"content\":\"3\",\"name\":\"add\",\"tool_call_id\":\"call_1\"}"), "tool: %s",
           text ? text : why);
    free(text);
    cJSON_Delete(e);
    cJSON_Delete(m);
    const char *bad[] = {"{\"role\":\"tool\",\"content\":\"3\"}", "{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}",
                         "{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}", "{\"content\":\"x\"}",
                         "{\"role\":\"user\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        m = cJSON_Parse(bad[i]);
        e = srv_tools_message(m, why, sizeof why);
        CHECKF(e == NULL && why[0], "%s accepted", bad[i]);
        cJSON_Delete(e);
        cJSON_Delete(m);
    }
    /* the system note for templates without tools: merged into a leading system message */
    srv_tools t;
    tools_of(&t, "");
    cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi\"}]");
    CHECK(srv_tools_system_note(&t, msgs));
    const char *sys = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring;
    CHECK(cJSON_GetArraySize(msgs) == 2 && !strncmp(sys, "Be brief.\n\n", 11) && strstr(sys, "\"name\":\"get_weather\"") &&
          strstr(sys, "\"name\":\"add\""));
    cJSON_Delete(msgs);
    msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"}]");
    CHECK(srv_tools_system_note(&t, msgs) && cJSON_GetArraySize(msgs) == 2 &&
          !strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "role")->valuestring, "system"));
    cJSON_Delete(msgs);
    srv_tools_free(&t);
}

static bool grammar_takes(const okv_grammar *g, const char *text) {
    okv_grammar_match *m = NULL;
    okv_error err;
    if (okv_grammar_match_create(g, &m, &err)) return false;
    bool ok = okv_grammar_match_feed(m, text, strlen(text)) && okv_grammar_match_accepting(m);
    okv_grammar_match_free(m);
    return ok;
}

static void test_grammar(void) {
    srv_tools t;
    okv_error err = {0};
    okv_grammar *g = NULL;
    tools_of(&t, ",\"tool_choice\":\"required\"");
    CHECK_OK(srv_tools_grammar(&t, SRV_SYNTAX_TAGGED, &g, &err), &err);
    const char *two = QCALL("{\"city\": \"Paris\"}") "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
    CHECK(g && grammar_takes(g, QCALL("{\"city\": \"Paris\"}")) && grammar_takes(g, two));
    CHECK(g && !grammar_takes(g, QCALL("{\"town\": \"Paris\"}")) && !grammar_takes(g, "Sure."));
    okv_grammar_free(g);
    CHECK_OK(srv_tools_grammar(&t, SRV_SYNTAX_LLAMA, &g, &err), &err);
    CHECK(g && grammar_takes(g, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}"));
    CHECK(g && !grammar_takes(g, "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"));
    okv_grammar_free(g);
    srv_tools_free(&t);
    /* named: that function only; parallel false: one call */
    tools_of(&t, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}");
    CHECK_OK(srv_tools_grammar(&t, SRV_SYNTAX_GENERIC, &g, &err), &err);
    CHECK(g && grammar_takes(g, "{\"name\": \"add\", \"arguments\": {\"b\": 2, \"a\": 1}}"));
    CHECK(g && !grammar_takes(g, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}"));
    okv_grammar_free(g);
    srv_tools_free(&t);
    /* a parameters schema the grammar cannot enforce names the function */
    const char *param;
    char msg[256];
    CHECK(parse_body("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"zip\",\"parameters\":{\"type\":\"object\","
                     "\"properties\":{\"z\":{\"type\":\"string\",\"pattern\":\"[0-9]+\"}}}}}],\"tool_choice\":\"required\"}",
                     &t, &param, msg) == 0);
    CHECK(srv_tools_grammar(&t, SRV_SYNTAX_TAGGED, &g, &err) != OKV_OK && strstr(err.message, "'zip'") &&
          strstr(err.message, "pattern") && !g);
    srv_tools_free(&t);
}

static void test_syntax(void) {
    CHECK(srv_tools_syntax(NULL) == SRV_SYNTAX_GENERIC);
    CHECK(srv_tools_syntax("{% if tools %}<tool_call>{% endif %}") == SRV_SYNTAX_TAGGED);
    CHECK(srv_tools_syntax("{% for t in tools %}{\"name\": ..., \"parameters\": ...}{% endfor %}") == SRV_SYNTAX_LLAMA);
    CHECK(srv_tools_syntax("{{ messages[0].content }}") == SRV_SYNTAX_GENERIC);
    CHECK(srv_tools_template_renders("{{ tools | tojson }}") && !srv_tools_template_renders("{{ x }}"));
    /* the fixture templates */
    const char *files[] = {"../shared/fixtures/chat_templates/llama3.1-8b-instruct/template.jinja",
                           "../shared/fixtures/chat_templates/llama3.2-3b-instruct/template.jinja"};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(files[i], "rb");
        CHECKF(f != NULL, "%s missing", files[i]);
        if (!f) continue;
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        CHECKF(srv_tools_syntax(buf) == SRV_SYNTAX_LLAMA, "%s", files[i]);
    }
}

int main(void) {
    test_fields();
    test_tagged();
    test_json();
    test_messages();
    test_grammar();
    test_syntax();
    return okv_test_finish();
}
