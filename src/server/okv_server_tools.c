/* okv_server_tools.c — OpenAI function tools (okv_server_tools.h): the
 * request fields checked, messages with tool calls made ready for a chat
 * template, the forced-call grammar (okv_grammar_framed: the family's
 * head and tail around each function's arguments schema), and the reply
 * split into text and calls.
 *
 * The split is one small state machine fed piece by piece, used for
 * streamed and whole replies alike (a whole reply is a stream whose sink
 * collects), so both give the same calls:
 *   start  nothing but whitespace yet; a reply opening with '{', '[',
 *          <|python_tag|> or ```json may be one JSON call (held whole),
 *          anything else is text
 *   text   passes on at once, except trailing whitespace (dropped if a
 *          call follows) and a tail that may begin "<tool_call>"
 *   block  inside <tool_call>...</tool_call>: held until the close tag,
 *          then a call, or (not a valid call) its raw text
 *   json   the whole reply held; at the end a call (or array of calls)
 *          or, if not, its text unchanged */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_server_tools.h"

enum { M_START = 0, M_TEXT, M_BLOCK, M_JSON };

static const char OPEN_TAG[] = "<tool_call>", CLOSE_TAG[] = "</tool_call>";
static const char PY_TAG[] = "<|python_tag|>", FENCE[] = "```json";

/* ---- request fields ---------------------------------------------------------------- */

static int fail(srv_tools *t, char *msg, size_t msg_len, const char **param, const char *field, const char *why) {
    snprintf(t->param, sizeof t->param, "%s", field);
    snprintf(msg, msg_len, "'%s' %s", field, why);
    *param = t->param;
    srv_tools_free(t);
    return 400;
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > SRV_TOOL_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int find_tool(const srv_tools *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->fns[i].name, name)) return i;
    return -1;
}

/* tools[i]: {"type": "function", "function": {"name", "description"?, "parameters"?}}. */
static int parse_tool(srv_tools *t, const cJSON *e, int i, char *msg, size_t msg_len, const char **param) {
    char field[48];
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(e, "function");
    snprintf(field, sizeof field, "tools[%d]", i);
    if (!cJSON_IsObject(e)) return fail(t, msg, msg_len, param, field, "must be an object");
    snprintf(field, sizeof field, "tools[%d].type", i);
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function")))
        return fail(t, msg, msg_len, param, field, "must be \"function\" (the only tool type supported)");
    snprintf(field, sizeof field, "tools[%d].function", i);
    bool flat = !fn && cJSON_GetObjectItemCaseSensitive(e, "name");   /* the Responses API's {"type", "name", ...} */
    if (flat) fn = e;
    if (!cJSON_IsObject(fn)) return fail(t, msg, msg_len, param, field, "must be an object");
    if (flat) snprintf(field, sizeof field, "tools[%d]", i);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    char base[24];   /* "tools[63].function" at most */
    snprintf(base, sizeof base, "%.20s", field);
    snprintf(field, sizeof field, "%s.name", base);
    if (!cJSON_IsString(name) || !valid_name(name->valuestring))
        return fail(t, msg, msg_len, param, field, "must be a string of 1 to 64 characters a-z, A-Z, 0-9, _ or -");
    if (find_tool(t, name->valuestring) >= 0) return fail(t, msg, msg_len, param, field, "names a function given twice");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    snprintf(field, sizeof field, "%s.parameters", base);
    if (ps && !cJSON_IsNull(ps) && !cJSON_IsObject(ps)) return fail(t, msg, msg_len, param, field, "must be a JSON Schema object");
    srv_tool *f = &t->fns[t->n];
    f->name = strdup(name->valuestring);
    f->parameters = cJSON_IsObject(ps) && ps->child ? cJSON_PrintUnformatted(ps) : strdup("{\"type\":\"object\"}");
    t->n++;
    /* the template sees the chat shape {"type": "function", "function": {...}} */
    cJSON *entry = flat ? cJSON_CreateObject() : cJSON_Duplicate(e, true);
    if (entry && flat) {
        cJSON_AddStringToObject(entry, "type", "function");
        cJSON *copy = cJSON_Duplicate(fn, true);
        if (copy) cJSON_DeleteItemFromObjectCaseSensitive(copy, "type");
        cJSON_AddItemToObject(entry, "function", copy);
    }
    if (entry) cJSON_AddItemToArray(t->list, entry);
    if (!f->name || !f->parameters || !entry) return fail(t, msg, msg_len, param, "tools", "could not be stored: out of memory");
    return 0;
}

/* tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name"}}. */
static int parse_choice(srv_tools *t, const cJSON *v, char *msg, size_t msg_len, const char **param) {
    if (!v || cJSON_IsNull(v)) { t->choice = SRV_TOOLS_AUTO; return 0; }
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (!strcmp(s, "auto")) t->choice = SRV_TOOLS_AUTO;
        else if (!strcmp(s, "none")) t->choice = SRV_TOOLS_NONE;
        else if (!strcmp(s, "required")) t->choice = SRV_TOOLS_REQUIRED;
        else return fail(t, msg, msg_len, param, "tool_choice", "must be \"auto\", \"none\", \"required\" or a named function");
        if (t->choice == SRV_TOOLS_REQUIRED && !t->n)
            return fail(t, msg, msg_len, param, "tool_choice", "is \"required\" but no 'tools' are given");
        return 0;
    }
    const cJSON *fn = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "function") : NULL;
    if (!fn && cJSON_IsObject(v)) fn = v;   /* the Responses API's {"type": "function", "name"} */
    const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    const cJSON *type = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
    if (!cJSON_IsString(name) || (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function"))))
        return fail(t, msg, msg_len, param, "tool_choice", "must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    int k = find_tool(t, name->valuestring);
    if (k < 0) return fail(t, msg, msg_len, param, "tool_choice", "names a function that is not in 'tools'");
    t->choice = SRV_TOOLS_NAMED;
    t->named = k;
    return 0;
}

int srv_tools_parse(const cJSON *body, srv_tools *t, char *msg, size_t msg_len, const char **param) {
    memset(t, 0, sizeof *t);
    t->parallel = true;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    if (tools && !cJSON_IsNull(tools)) {
        int n = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : -1;
        if (n < 0 || n > SRV_MAX_TOOLS) return fail(t, msg, msg_len, param, "tools", "must be an array of at most 64 tools");
        t->fns = calloc(n ? (size_t)n : 1, sizeof *t->fns);
        t->list = cJSON_CreateArray();
        if (!t->fns || !t->list) return fail(t, msg, msg_len, param, "tools", "could not be stored: out of memory");
        int i = 0, st;
        const cJSON *e;
        cJSON_ArrayForEach(e, tools)
            if ((st = parse_tool(t, e, i++, msg, msg_len, param))) return st;
    }
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(body, "parallel_tool_calls");
    if (par && !cJSON_IsNull(par)) {
        if (!cJSON_IsBool(par)) return fail(t, msg, msg_len, param, "parallel_tool_calls", "must be true or false");
        t->parallel = cJSON_IsTrue(par);
    }
    return parse_choice(t, cJSON_GetObjectItemCaseSensitive(body, "tool_choice"), msg, msg_len, param);
}

void srv_tools_free(srv_tools *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->fns[i].name);
        free(t->fns[i].parameters);
    }
    free(t->fns);
    cJSON_Delete(t->list);
    t->fns = NULL;
    t->list = NULL;
    t->n = 0;
}

bool srv_tools_active(const srv_tools *t) { return t->n > 0 && t->choice != SRV_TOOLS_NONE; }

/* ---- templates ------------------------------------------------------------------------ */

bool srv_tools_template_renders(const char *tmpl) { return tmpl && strstr(tmpl, "tools"); }

srv_tool_syntax srv_tools_syntax(const char *tmpl) {
    if (!tmpl) return SRV_SYNTAX_GENERIC;
    if (strstr(tmpl, OPEN_TAG)) return SRV_SYNTAX_TAGGED;
    if (srv_tools_template_renders(tmpl) && (strstr(tmpl, PY_TAG) || strstr(tmpl, "\"parameters\"")))
        return SRV_SYNTAX_LLAMA;
    return SRV_SYNTAX_GENERIC;
}

/* content: a string, null, or an array of {"type": "text", "text"} parts joined; NULL if none of those. */
static char *content_text(const cJSON *content) {
    if (cJSON_IsString(content)) return strdup(content->valuestring);
    if (cJSON_IsNull(content)) return strdup("");
    if (!cJSON_IsArray(content)) return NULL;
    size_t n = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t)) return NULL;
        n += strlen(t->valuestring);
    }
    char *out = malloc(n + 1), *p = out;
    if (!out) return NULL;
    cJSON_ArrayForEach(part, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t k = strlen(t);
        memcpy(p, t, k);
        p += k;
    }
    *p = 0;
    return out;
}

/* A call of an assistant message, as templates read it: arguments decoded. */
static cJSON *template_call(const cJSON *c) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    if (!cJSON_IsString(name)) return NULL;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    cJSON *out = cJSON_CreateObject(), *f = cJSON_CreateObject();
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (cJSON_IsString(id)) cJSON_AddStringToObject(out, "id", id->valuestring);
    cJSON_AddStringToObject(out, "type", "function");
    cJSON_AddItemToObject(out, "function", f);
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON *decoded = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    if (decoded) cJSON_AddItemToObject(f, "arguments", decoded);
    else if (args) cJSON_AddItemToObject(f, "arguments", cJSON_Duplicate(args, true));
    else cJSON_AddItemToObject(f, "arguments", cJSON_CreateObject());
    return out;
}

static void copy_string(cJSON *dst, const cJSON *src, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, key);
    if (cJSON_IsString(v)) cJSON_AddStringToObject(dst, key, v->valuestring);
}

cJSON *srv_tools_message(const cJSON *m, char *why, size_t why_len) {
    const cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
    if (!cJSON_IsString(role)) { snprintf(why, why_len, "needs a string 'role'"); return NULL; }
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    bool has_calls = calls && !cJSON_IsNull(calls);
    if (has_calls && (!cJSON_IsArray(calls) || strcmp(role->valuestring, "assistant"))) {
        snprintf(why, why_len, "'tool_calls' must be an array, on an assistant message");
        return NULL;
    }
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    char *text = !content && has_calls ? strdup("") : content_text(content);
    if (!text) { snprintf(why, why_len, "needs a string (or text parts) 'content'"); return NULL; }
    bool tool = !strcmp(role->valuestring, "tool");
    if (tool && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "tool_call_id"))) {
        free(text);
        snprintf(why, why_len, "is a tool message without a string 'tool_call_id'");
        return NULL;
    }
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "role", role->valuestring);
    cJSON_AddStringToObject(e, "content", text);
    free(text);
    copy_string(e, m, "name");
    copy_string(e, m, "tool_call_id");
    copy_string(e, m, "reasoning_content");
    if (has_calls) {
        cJSON *arr = cJSON_AddArrayToObject(e, "tool_calls");
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            cJSON *tc = template_call(c);
            if (!tc) {
                cJSON_Delete(e);
                snprintf(why, why_len, "'tool_calls' entries need a 'function' object with a string 'name'");
                return NULL;
            }
            cJSON_AddItemToArray(arr, tc);
        }
    }
    return e;
}

bool srv_tools_system_note(const srv_tools *t, cJSON *messages) {
    size_t cap = 512;
    for (int i = 0; i < t->n; i++) cap += strlen(t->fns[i].name) + strlen(t->fns[i].parameters) + 64;
    const cJSON *e;
    cJSON_ArrayForEach(e, t->list) {
        char *fn = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(e, "function"));
        cap += fn ? strlen(fn) + 1 : 0;
        free(fn);
    }
    char *note = malloc(cap);
    if (!note) return false;
    size_t n = (size_t)snprintf(note, cap,
                                "You can call functions. To call one, reply with only a JSON object "
                                "{\"name\": <function name>, \"arguments\": <arguments object>} and nothing else.\n"
                                "Functions:");
    cJSON_ArrayForEach(e, t->list) {
        char *fn = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(e, "function"));
        if (fn && n < cap) n += (size_t)snprintf(note + n, cap - n, "\n%s", fn);
        free(fn);
    }
    if (n >= cap) n = cap - 1;   /* (cap counts every line; a cut note would still be a string) */
    cJSON *first = cJSON_GetArrayItem(messages, 0);
    const cJSON *role = first ? cJSON_GetObjectItemCaseSensitive(first, "role") : NULL;
    const cJSON *content = first ? cJSON_GetObjectItemCaseSensitive(first, "content") : NULL;
    bool ok;
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "system") && cJSON_IsString(content)) {
        size_t len = strlen(content->valuestring) + 2 + n + 1;
        char *merged = malloc(len);
        ok = merged != NULL;
        if (ok) {
            snprintf(merged, len, "%s\n\n%s", content->valuestring, note);
            ok = cJSON_ReplaceItemInObjectCaseSensitive(first, "content", cJSON_CreateString(merged));
        }
        free(merged);
    } else {
        cJSON *sys = cJSON_CreateObject();
        cJSON_AddStringToObject(sys, "role", "system");
        cJSON_AddStringToObject(sys, "content", note);
        ok = cJSON_InsertItemInArray(messages, 0, sys);
        if (!ok) cJSON_Delete(sys);
    }
    free(note);
    return ok;
}

/* ---- the forced call --------------------------------------------------------------------- */

okv_status srv_tools_grammar(const srv_tools *t, srv_tool_syntax syn, okv_grammar **out, okv_error *err) {
    *out = NULL;
    int lo = t->choice == SRV_TOOLS_NAMED ? t->named : 0, hi = t->choice == SRV_TOOLS_NAMED ? t->named + 1 : t->n;
    okv_grammar_frame frames[SRV_MAX_TOOLS];
    char heads[SRV_MAX_TOOLS][SRV_TOOL_NAME_MAX + 64];
    const char *key = syn == SRV_SYNTAX_LLAMA ? "parameters" : "arguments";
    const char *open = syn == SRV_SYNTAX_TAGGED ? "<tool_call>\n" : "";
    const char *tail = syn == SRV_SYNTAX_TAGGED ? "}\n</tool_call>" : "}";
    int n = 0;
    for (int i = lo; i < hi; i++, n++) {
        snprintf(heads[n], sizeof heads[n], "%s{\"name\": \"%s\", \"%s\": ", open, t->fns[i].name, key);
        frames[n] = (okv_grammar_frame){heads[n], t->fns[i].parameters, tail};
    }
    int max = t->parallel && syn == SRV_SYNTAX_TAGGED && t->choice == SRV_TOOLS_REQUIRED ? SRV_MAX_FORCED_CALLS : 1;
    okv_status st = okv_grammar_framed(frames, n, 1, max, out, err);
    if (st) {
        /* name the function whose schema failed: try each alone */
        for (int i = 0; i < n; i++) {
            okv_grammar *g = NULL;
            okv_error e2 = {0};
            if (okv_grammar_framed(&frames[i], 1, 1, 1, &g, &e2)) {
                snprintf(err->message, sizeof err->message, "function '%s' parameters: %.900s", t->fns[lo + i].name,
                         e2.message);
                break;
            }
            okv_grammar_free(g);
        }
    }
    return st;
}

/* ---- the reply --------------------------------------------------------------------------- */

void srv_tool_stream_init(srv_tool_stream *s, const srv_tools *t, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->t = t;
    s->mode = M_START;
    s->seed = seed;
}

void srv_tool_stream_free(srv_tool_stream *s) {
    free(s->held);
    s->held = NULL;
    s->n_held = s->cap_held = 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void emit_text(const srv_tool_sink *k, const char *p, size_t n) {
    if (n) k->text(k->ctx, p, n);
}

static void held_drop(srv_tool_stream *s, size_t n) {
    if (!n) return;
    memmove(s->held, s->held + n, s->n_held - n);
    s->n_held -= n;
}

/* The first occurrence of word in p[0..n) (text may hold NUL bytes), or NULL. */
static const char *find(const char *p, size_t n, const char *word) {
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++)
        if (p[i] == word[0] && !memcmp(p + i, word, w)) return p + i;
    return NULL;
}

static bool held_add(srv_tool_stream *s, const char *p, size_t n) {
    if (n > SIZE_MAX / 2 - s->n_held) return false;
    if (s->n_held + n > s->cap_held) {
        size_t cap = s->cap_held ? s->cap_held : 64;
        while (cap < s->n_held + n) cap *= 2;
        char *v = realloc(s->held, cap);
        if (!v) return false;
        s->held = v;
        s->cap_held = cap;
    }
    memcpy(s->held + s->n_held, p, n);
    s->n_held += n;
    return true;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void make_id(srv_tool_stream *s, char id[32]) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t x = mix64(s->seed ^ mix64((uint64_t)s->n_calls + 1));
    memcpy(id, "call_", 5);
    for (int i = 0; i < 24; i++) {
        if (i % 8 == 0) x = mix64(x + (uint64_t)i);
        id[5 + i] = alnum[x % 62];
        x /= 62;
    }
    id[29] = 0;
}

/* A call object {"name", "arguments" | "parameters"} naming an offered
 * function: its compact arguments text in *args (caller frees), else false. */
static bool call_of(const srv_tools *t, const cJSON *o, const char **name, char **args) {
    const cJSON *nm = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "name") : NULL;
    if (!cJSON_IsString(nm) || find_tool(t, nm->valuestring) < 0) return false;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    cJSON *decoded = cJSON_IsString(a) ? cJSON_Parse(a->valuestring) : NULL;
    const cJSON *v = decoded ? decoded : a;
    if (v && !cJSON_IsObject(v)) { cJSON_Delete(decoded); return false; }
    *args = v ? cJSON_PrintUnformatted(v) : strdup("{}");
    cJSON_Delete(decoded);
    *name = nm->valuestring;
    return *args != NULL;
}

/* Parses text[0..n) as exactly one JSON value (whitespace around it allowed). */
static cJSON *parse_exact(const char *text, size_t n) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, n, &end, false);
    if (!v) return NULL;
    for (const char *p = end; p < text + n; p++)
        if (!is_ws(*p)) { cJSON_Delete(v); return NULL; }
    return v;
}

static void emit_call(srv_tool_stream *s, const srv_tool_sink *k, const char *name, char *args) {
    if (s->n_calls > 0 && !s->t->parallel) { free(args); return; }   /* parallel_tool_calls false: the first only */
    srv_tool_call c;
    make_id(s, c.id);
    c.name = (char *)name;
    c.arguments = args;
    k->call(k->ctx, s->n_calls++, &c);
    free(args);
}

/* Every element of v (an object, or an array of objects) a valid call: passes them on, true. */
static bool emit_calls_of(srv_tool_stream *s, const srv_tool_sink *k, const cJSON *v) {
    const cJSON *e;
    const char *name;
    char *args;
    if (cJSON_IsObject(v)) {
        if (!call_of(s->t, v, &name, &args)) return false;
        emit_call(s, k, name, args);
        return true;
    }
    if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v)) return false;
    cJSON_ArrayForEach(e, v) {
        if (!call_of(s->t, e, &name, &args)) return false;
        free(args);
    }
    cJSON_ArrayForEach(e, v) {
        if (call_of(s->t, e, &name, &args)) emit_call(s, k, name, args);
    }
    return true;
}

/* A block's inside text: passed on as a call if it is one. */
static bool block_call(srv_tool_stream *s, const srv_tool_sink *k, const char *p, size_t n) {
    cJSON *v = parse_exact(p, n);
    const char *name;
    char *args;
    bool ok = v && call_of(s->t, v, &name, &args);
    if (ok) emit_call(s, k, name, args);
    cJSON_Delete(v);
    return ok;
}

/* The whole held reply as one JSON call (after whitespace, <|python_tag|>, inside ```json ... ```). */
static bool whole_call(srv_tool_stream *s, const srv_tool_sink *k) {
    const char *p = s->held, *end = s->held + s->n_held;
    while (p < end && is_ws(*p)) p++;
    if ((size_t)(end - p) >= sizeof PY_TAG - 1 && !memcmp(p, PY_TAG, sizeof PY_TAG - 1)) p += sizeof PY_TAG - 1;
    else if ((size_t)(end - p) >= sizeof FENCE - 1 && !memcmp(p, FENCE, sizeof FENCE - 1)) {
        p += sizeof FENCE - 1;
        while (end > p && is_ws(end[-1])) end--;
        if (end - p < 3 || memcmp(end - 3, "```", 3)) return false;
        end -= 3;
    }
    cJSON *v = parse_exact(p, (size_t)(end - p));
    bool ok = v && emit_calls_of(s, k, v);
    cJSON_Delete(v);
    return ok;
}

/* p[0..n) is a proper prefix of word. */
static bool proper_prefix(const char *p, size_t n, const char *word) {
    size_t w = strlen(word);
    return n < w && !memcmp(p, word, n);
}

static bool starts_with(const char *p, size_t n, const char *word) {
    size_t w = strlen(word);
    return n >= w && !memcmp(p, word, w);
}

/* Start mode: true when it decided (mode changed), false to keep holding. */
static bool step_start(srv_tool_stream *s) {
    size_t i = 0;
    while (i < s->n_held && is_ws(s->held[i])) i++;
    if (i == s->n_held) return false;
    const char *p = s->held + i;
    size_t n = s->n_held - i;
    if (*p == '{' || *p == '[' || starts_with(p, n, PY_TAG) || starts_with(p, n, FENCE)) {
        s->mode = M_JSON;
        return false;
    }
    if (proper_prefix(p, n, PY_TAG) || proper_prefix(p, n, FENCE) || proper_prefix(p, n, OPEN_TAG)) return false;
    s->mode = M_TEXT;
    return true;
}

/* The length of the longest suffix of p[0..n) that is a proper prefix of word. */
static size_t partial_suffix(const char *p, size_t n, const char *word) {
    size_t w = strlen(word);
    for (size_t k = n < w - 1 ? n : w - 1; k > 0; k--)
        if (!memcmp(p + n - k, word, k)) return k;
    return 0;
}

/* Text mode: passes on what is decided; true when it entered a block. */
static bool step_text(srv_tool_stream *s, const srv_tool_sink *k) {
    if (s->skip_ws) {
        size_t i = 0;
        while (i < s->n_held && is_ws(s->held[i])) i++;
        held_drop(s, i);
        if (!s->n_held) return false;
        s->skip_ws = false;
    }
    const char *tag = find(s->held, s->n_held, OPEN_TAG);
    size_t upto = tag ? (size_t)(tag - s->held) : s->n_held - partial_suffix(s->held, s->n_held, OPEN_TAG);
    size_t q = upto;
    while (q > 0 && is_ws(s->held[q - 1])) q--;
    emit_text(k, s->held, q);
    if (!tag) {
        held_drop(s, q);
        return false;
    }
    held_drop(s, upto + sizeof OPEN_TAG - 1);
    s->mode = M_BLOCK;
    return true;
}

/* Block mode: true when the block closed (back to text). */
static bool step_block(srv_tool_stream *s, const srv_tool_sink *k) {
    const char *close = find(s->held, s->n_held, CLOSE_TAG);
    if (!close) return false;
    size_t inner = (size_t)(close - s->held), all = inner + sizeof CLOSE_TAG - 1;
    if (block_call(s, k, s->held, inner)) s->skip_ws = true;
    else {
        emit_text(k, OPEN_TAG, sizeof OPEN_TAG - 1);
        emit_text(k, s->held, all);
    }
    held_drop(s, all);
    s->mode = M_TEXT;
    return true;
}

void srv_tool_stream_push(srv_tool_stream *s, const char *text, size_t len, const srv_tool_sink *sink) {
    if (s->oom || !held_add(s, text, len)) {
        s->oom = true;   /* no memory to hold text back: it passes on as it comes */
        emit_text(sink, text, len);
        return;
    }
    for (bool more = true; more;) {
        switch (s->mode) {
        case M_START: more = step_start(s); break;
        case M_TEXT: more = step_text(s, sink); break;
        case M_BLOCK: more = step_block(s, sink); break;
        default: more = false; break;
        }
    }
}

void srv_tool_stream_end(srv_tool_stream *s, const srv_tool_sink *sink) {
    const char *p = s->held;
    size_t n = s->n_held;
    switch (s->mode) {
    case M_JSON:
        if (whole_call(s, sink)) n = 0;
        break;
    case M_BLOCK:   /* unclosed at the end: a call if what is there is one */
        if (block_call(s, sink, p, n)) n = 0;
        else emit_text(sink, OPEN_TAG, sizeof OPEN_TAG - 1);
        break;
    default:
        if (s->n_calls) {   /* whitespace around calls is dropped */
            while (n && is_ws(*p)) { p++; n--; }
            while (n && is_ws(p[n - 1])) n--;
        }
        break;
    }
    emit_text(sink, p, n);
    s->n_held = 0;
    s->mode = M_TEXT;
}
