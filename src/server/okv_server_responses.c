/* okv_server_responses.c — POST /v1/responses, OpenAI's Responses API, as
 * a second face of the chat path rather than a second generation path.
 *
 * Parsing converts the body into the /v1/chat/completions request it
 * means (instructions -> a system message first; input items -> messages;
 * function_call / function_call_output items -> an assistant message's
 * tool_calls / role "tool" messages; flat function tools -> chat's nested
 * ones; max_output_tokens -> max_tokens; text.format -> response_format)
 * and hands that text to srv_parse_request, so sampling, constrained
 * output, tool rendering, limits and the scheduler are exactly the chat
 * path's; only errors are renamed to the Responses field. Fields that need
 * state we do not keep (previous_response_id, store, conversation,
 * background) are refused with a 400 naming them.
 *
 * Replies: the scheduler calls srv_emit_* as for chat, which hand a
 * SRV_RESPONSE request to the emitters here. The generated text is split
 * by the chat path's <think> splitter into output items: a "reasoning"
 * item for reasoning text, a "message" item with one output_text part for
 * the answer (every reply has one, possibly empty). Non-streamed, the
 * Response object is the body; streamed, typed SSE events ("event:" and
 * "data:" lines, every event with a sequence_number): response.created,
 * response.in_progress, per item output_item.added, content_part.added,
 * its text deltas, the text's done, content_part.done, output_item.done,
 * then response.completed (or response.incomplete at max_output_tokens,
 * or error + response.failed). With tools the answer text goes through
 * the chat path's tool-call split (okv_server_tools.c) first: each call
 * it finds becomes a "function_call" output item (streamed: added, one
 * function_call_arguments.delta with the whole arguments, their done,
 * item done), and a reply of calls alone has no message item. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "okv_server.h"

/* One output item: the reasoning text, the assistant's message or a function call. */
typedef struct resp_item {
    srv_part part;        /* SRV_REASONING: a "reasoning" item; SRV_CONTENT: a "message" (or call) */
    bool call;            /* a "function_call" item: call_id, name, arguments */
    char id[64];
    char call_id[32];
    char *name, *arguments;   /* owned */
    const char *status;   /* set when closed: "completed" or "incomplete" */
    srv_buf text;
} resp_item;

struct srv_resp {
    cJSON *echo;          /* request fields every Response snapshot repeats (instructions, tools, ...) */
    int64_t seq;          /* the next event's sequence_number */
    resp_item *items;
    size_t n_items, cap_items;
    bool open;            /* the last item still takes text (streamed: its "added" events are out) */
    int n_calls;          /* function_call items */
    int64_t reasoning_tokens;
};

void srv_resp_free(struct srv_resp *p) {
    if (!p) return;
    cJSON_Delete(p->echo);
    for (size_t i = 0; i < p->n_items; i++) {
        srv_buf_free(&p->items[i].text);
        free(p->items[i].name);
        free(p->items[i].arguments);
    }
    free(p->items);
    free(p);
}

/* ---- request: Responses body -> chat body ----------------------------------------- */

typedef struct conv {
    char *msg;
    size_t msg_len;
    const char **param;
} conv;

static int refuse(conv *c, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(conv *c, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->msg_len, fmt, ap);
    va_end(ap);
    *c->param = param;
    return 400;
}

static const cJSON *field(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Copies j's key (if present) into out under the same or another name. */
static void copy_field(cJSON *out, const cJSON *j, const char *key, const char *as) {
    const cJSON *v = field(j, key);
    if (v) cJSON_AddItemToObject(out, as ? as : key, cJSON_Duplicate(v, true));
}

/* A content value's text: a string, or parts of type input_text /
 * output_text / text / refusal joined; *out NULL (400 filled) otherwise. */
static int content_text(conv *c, const cJSON *content, char **out) {
    *out = NULL;
    if (cJSON_IsString(content)) { *out = strdup(content->valuestring); return *out ? 0 : 500; }
    if (!cJSON_IsArray(content)) return refuse(c, "input", "'input': a message's content must be a string or an array of text parts");
    srv_buf b = {0};
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
        const char *type = cJSON_IsString(t) ? t->valuestring : "";
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, !strcmp(type, "refusal") ? "refusal" : "text");
        bool is_text = !strcmp(type, "input_text") || !strcmp(type, "output_text") || !strcmp(type, "text") || !strcmp(type, "refusal");
        if (!is_text || !cJSON_IsString(text)) {
            srv_buf_free(&b);
            return refuse(c, "input", "'input': content parts of type '%s' are not supported (text parts only: input_text, output_text)",
                          type);
        }
        srv_buf_puts(&b, text->valuestring);
    }
    *out = srv_buf_detach(&b);
    return *out ? 0 : 500;
}

static int add_message(conv *c, cJSON *msgs, const char *role, const cJSON *content) {
    char *text = NULL;
    int st = content_text(c, content, &text);
    if (st) return st;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
    free(text);
    return 0;
}

/* A function_call item: one more tool call of the assistant message just
 * before it (a new one when the last message is not the assistant's). */
static int add_function_call(conv *c, cJSON *msgs, const cJSON *item) {
    const cJSON *id = field(item, "call_id"), *name = field(item, "name"), *args = field(item, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return refuse(c, "input", "'input': a function_call item needs string 'call_id', 'name' and 'arguments'");
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *role = last ? cJSON_GetObjectItemCaseSensitive(last, "role") : NULL;
    if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant")) {
        last = cJSON_CreateObject();
        cJSON_AddStringToObject(last, "role", "assistant");
        cJSON_AddStringToObject(last, "content", "");
        cJSON_AddItemToArray(msgs, last);
    }
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
    if (!calls) calls = cJSON_AddArrayToObject(last, "tool_calls");
    cJSON *call = cJSON_CreateObject(), *fn;
    cJSON_AddStringToObject(call, "id", id->valuestring);
    cJSON_AddStringToObject(call, "type", "function");
    fn = cJSON_AddObjectToObject(call, "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddStringToObject(fn, "arguments", args->valuestring);
    cJSON_AddItemToArray(calls, call);
    return 0;
}

static int add_function_output(conv *c, cJSON *msgs, const cJSON *item) {
    const cJSON *id = field(item, "call_id"), *out = field(item, "output");
    if (!cJSON_IsString(id) || !out)
        return refuse(c, "input", "'input': a function_call_output item needs a string 'call_id' and an 'output'");
    char *text = NULL;
    int st = content_text(c, out, &text);
    if (st) return st;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "tool");
    cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
    free(text);
    return 0;
}

/* One input item: a message (with or without "type": "message"), a
 * function call or its output; reasoning items (a reply's own, sent
 * back) add nothing. Developer messages become system messages (what
 * chat templates know). */
static int add_item(conv *c, cJSON *msgs, const cJSON *item) {
    if (!cJSON_IsObject(item)) return refuse(c, "input", "'input' items must be objects");
    const cJSON *t = field(item, "type"), *role = field(item, "role");
    const char *type = cJSON_IsString(t) ? t->valuestring : role ? "message" : "";
    if (!strcmp(type, "message")) {
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "assistant"))
            return refuse(c, "input", "'input': a message's role must be user, system, developer or assistant (got '%s')", r);
        return add_message(c, msgs, !strcmp(r, "developer") ? "system" : r, cJSON_GetObjectItemCaseSensitive(item, "content"));
    }
    if (!strcmp(type, "function_call")) return add_function_call(c, msgs, item);
    if (!strcmp(type, "function_call_output")) return add_function_output(c, msgs, item);
    if (!strcmp(type, "reasoning")) return 0;
    if (!strcmp(type, "item_reference"))
        return refuse(c, "input", "'input': item_reference needs stored responses, which offkv does not keep; send the items themselves");
    return refuse(c, "input", "'input': items of type '%s' are not supported (message, function_call, function_call_output)", type);
}

static int convert_input(conv *c, const cJSON *j, cJSON *chat) {
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *ins = field(j, "instructions"), *input = field(j, "input");
    if (ins && !cJSON_IsString(ins)) return refuse(c, "instructions", "'instructions' must be a string");
    int st = ins ? add_message(c, msgs, "system", ins) : 0;
    if (st) return st;
    if (!input) return refuse(c, "input", "'input' is required (offkv keeps no responses to continue)");
    if (cJSON_IsString(input)) return add_message(c, msgs, "user", input);
    if (!cJSON_IsArray(input) || !cJSON_GetArraySize(input)) return refuse(c, "input", "'input' must be a string or a non-empty array of items");
    const cJSON *item;
    cJSON_ArrayForEach(item, input) if ((st = add_item(c, msgs, item))) return st;
    return 0;
}

/* tools: function tools only, {"type": "function", name, description,
 * parameters, strict} -> chat's {"type": "function", "function": {...}}. */
static int convert_tools(conv *c, const cJSON *j, cJSON *chat) {
    const cJSON *tools = field(j, "tools"), *tc = field(j, "tool_choice"), *tool;
    if (tools) {
        if (!cJSON_IsArray(tools)) return refuse(c, "tools", "'tools' must be an array");
        cJSON *out = cJSON_AddArrayToObject(chat, "tools");
        cJSON_ArrayForEach(tool, tools) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(tool, "type");
            const char *type = cJSON_IsString(t) ? t->valuestring : "";
            if (strcmp(type, "function"))
                return refuse(c, "tools", "'tools': only function tools are supported (got type '%s')", type);
            if (!cJSON_IsString(field(tool, "name"))) return refuse(c, "tools", "'tools': a function tool needs a string 'name'");
            cJSON *o = cJSON_CreateObject(), *fn;
            cJSON_AddStringToObject(o, "type", "function");
            fn = cJSON_AddObjectToObject(o, "function");
            copy_field(fn, tool, "name", NULL);
            copy_field(fn, tool, "description", NULL);
            copy_field(fn, tool, "parameters", NULL);
            copy_field(fn, tool, "strict", NULL);
            cJSON_AddItemToArray(out, o);
        }
    }
    if (!tc) return 0;
    if (cJSON_IsString(tc)) { cJSON_AddStringToObject(chat, "tool_choice", tc->valuestring); return 0; }
    const cJSON *t = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "type") : NULL;
    const cJSON *name = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "name") : NULL;
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "function") || !cJSON_IsString(name))
        return refuse(c, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice"), *fn;
    cJSON_AddStringToObject(o, "type", "function");
    fn = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    return 0;
}

/* text.format -> response_format: text, json_object, or json_schema
 * ({name, schema, strict} flat here, nested under "json_schema" in chat). */
static int convert_text(conv *c, const cJSON *j, cJSON *chat) {
    const cJSON *text = field(j, "text");
    if (!text) return 0;
    if (!cJSON_IsObject(text)) return refuse(c, "text", "'text' must be an object");
    const cJSON *f = field(text, "format");
    if (!f) return 0;
    const cJSON *t = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
    if (!cJSON_IsString(t)) return refuse(c, "text.format", "'text.format' must be an object with a string 'type'");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddStringToObject(rf, "type", t->valuestring);
    if (strcmp(t->valuestring, "json_schema")) return 0;
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    copy_field(js, f, "name", NULL);
    copy_field(js, f, "description", NULL);
    copy_field(js, f, "schema", NULL);
    copy_field(js, f, "strict", NULL);
    return 0;
}

/* Fields that need responses kept between requests: a 400 naming each. */
static int refuse_stateful(conv *c, const cJSON *j) {
    const char *why = "offkv keeps no responses: send the whole conversation in 'input'";
    if (field(j, "previous_response_id")) return refuse(c, "previous_response_id", "'previous_response_id' is not supported (%s)", why);
    if (field(j, "conversation")) return refuse(c, "conversation", "'conversation' is not supported (%s)", why);
    if (field(j, "prompt")) return refuse(c, "prompt", "'prompt' (stored prompt templates) is not supported (%s)", why);
    const cJSON *v = field(j, "store");
    if (v && !cJSON_IsBool(v)) return refuse(c, "store", "'store' must be true or false");
    if (cJSON_IsTrue(v)) return refuse(c, "store", "'store': true is not supported (%s); omit it or send false", why);
    v = field(j, "background");
    if (cJSON_IsTrue(v)) return refuse(c, "background", "'background': true is not supported (replies are made while the request waits)");
    return 0;
}

/* include ["message.output_text.logprobs"] (with top_logprobs k) turns on chat's logprobs. */
static int convert_logprobs(conv *c, const cJSON *j, cJSON *chat) {
    const cJSON *inc = field(j, "include"), *e;
    bool on = false;
    if (inc && !cJSON_IsArray(inc)) return refuse(c, "include", "'include' must be an array of strings");
    cJSON_ArrayForEach(e, inc) on |= cJSON_IsString(e) && !strcmp(e->valuestring, "message.output_text.logprobs");
    if (!on) return 0;
    cJSON_AddTrueToObject(chat, "logprobs");
    copy_field(chat, j, "top_logprobs", NULL);
    return 0;
}

static cJSON *convert(conv *c, const cJSON *j, int *status) {
    cJSON *chat = cJSON_CreateObject();
    if (!(*status = refuse_stateful(c, j)) && !(*status = convert_input(c, j, chat)) && !(*status = convert_tools(c, j, chat)) &&
        !(*status = convert_text(c, j, chat)) && !(*status = convert_logprobs(c, j, chat))) {
        static const char *const same[] = {"temperature", "top_p", "stream", "user", "prompt_cache_key", "parallel_tool_calls",
                                           "seed", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
                                           "presence_penalty", "chat_template_kwargs"};
        for (size_t i = 0; i < sizeof same / sizeof *same; i++) copy_field(chat, j, same[i], NULL);
        copy_field(chat, j, "max_output_tokens", "max_tokens");
        return chat;
    }
    cJSON_Delete(chat);
    return NULL;
}

/* A chat field named by srv_parse_request, as the Responses request calls it. */
static const char *responses_name(const char *chat) {
    static const char *const map[][2] = {{"messages", "input"}, {"max_tokens", "max_output_tokens"},
                                         {"response_format", "text.format"}, {"logprobs", "include"}};
    for (size_t i = 0; chat && i < sizeof map / sizeof *map; i++)
        if (!strcmp(chat, map[i][0])) return map[i][1];
    return chat;
}

/* The error message's leading "'chat_name'" renamed too. */
static void rename_in_message(char *msg, size_t msg_len, const char *from, const char *to) {
    size_t n = strlen(from);
    if (msg[0] != '\'' || strncmp(msg + 1, from, n) || msg[n + 1] != '\'' || !strcmp(from, to)) return;
    char rest[1024];
    snprintf(rest, sizeof rest, "%s", msg + n + 2);
    snprintf(msg, msg_len, "'%s'%s", to, rest);
}

/* A float as the shortest decimal that reads back to it (0.6f, not 0.600000023841858). */
static double shortest(float f) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.9g", (double)f);
    for (int digits = 1; digits < 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

/* The fields every Response snapshot repeats, as the request set them
 * (sampling as it will run: the program's defaults where unset). */
static cJSON *echo_fields(const cJSON *j, const srv_request *r) {
    cJSON *e = cJSON_CreateObject(), *v;
    const cJSON *ins = field(j, "instructions");
    if (ins) cJSON_AddItemToObject(e, "instructions", cJSON_Duplicate(ins, true));
    else cJSON_AddNullToObject(e, "instructions");
    const cJSON *mot = field(j, "max_output_tokens");
    if (mot) cJSON_AddItemToObject(e, "max_output_tokens", cJSON_Duplicate(mot, true));
    else cJSON_AddNullToObject(e, "max_output_tokens");
    const cJSON *md = field(j, "metadata");
    cJSON_AddItemToObject(e, "metadata", cJSON_IsObject(md) ? cJSON_Duplicate(md, true) : cJSON_CreateObject());
    const cJSON *ptc = field(j, "parallel_tool_calls");
    cJSON_AddBoolToObject(e, "parallel_tool_calls", !ptc || cJSON_IsTrue(ptc));
    cJSON_AddNullToObject(e, "previous_response_id");
    v = cJSON_AddObjectToObject(e, "reasoning");
    cJSON_AddNullToObject(v, "effort");
    cJSON_AddNullToObject(v, "summary");
    cJSON_AddBoolToObject(e, "store", false);
    cJSON_AddNumberToObject(e, "temperature", r->go.sampling.do_sample ? shortest(r->go.sampling.temperature) : 0);
    const cJSON *text = field(j, "text"), *fmt = text ? field(text, "format") : NULL;
    v = cJSON_AddObjectToObject(e, "text");
    if (fmt) cJSON_AddItemToObject(v, "format", cJSON_Duplicate(fmt, true));
    else cJSON_AddStringToObject(cJSON_AddObjectToObject(v, "format"), "type", "text");
    const cJSON *tc = field(j, "tool_choice"), *tools = field(j, "tools");
    if (tc) cJSON_AddItemToObject(e, "tool_choice", cJSON_Duplicate(tc, true));
    else cJSON_AddStringToObject(e, "tool_choice", "auto");
    cJSON_AddItemToObject(e, "tools", tools ? cJSON_Duplicate(tools, true) : cJSON_CreateArray());
    cJSON_AddNumberToObject(e, "top_p", shortest(r->go.sampling.top_p));
    cJSON_AddStringToObject(e, "truncation", "disabled");
    const cJSON *user = field(j, "user"), *key = field(j, "prompt_cache_key");
    if (cJSON_IsString(user)) cJSON_AddStringToObject(e, "user", user->valuestring);
    else cJSON_AddNullToObject(e, "user");
    if (cJSON_IsString(key)) cJSON_AddStringToObject(e, "prompt_cache_key", key->valuestring);
    return e;
}

int srv_parse_responses(okv_server *s, const char *body, size_t len, srv_request *r, char *msg, size_t msg_len,
                        const char **param) {
    conv c = {msg, msg_len, param};
    *param = NULL;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) { snprintf(msg, msg_len, "the request body is not valid JSON"); return 400; }
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); snprintf(msg, msg_len, "the request body must be a JSON object"); return 400; }
    int status = 0;
    cJSON *chat = convert(&c, j, &status);
    char *text = chat ? cJSON_PrintUnformatted(chat) : NULL;
    cJSON_Delete(chat);
    if (chat && !text) { snprintf(msg, msg_len, "out of memory"); status = 500; }
    if (text) {
        status = srv_parse_request(s, SRV_CHAT, text, strlen(text), r, msg, msg_len, param);
        free(text);
        if (status && *param) {
            rename_in_message(msg, msg_len, *param, responses_name(*param));
            *param = responses_name(*param);
        }
    }
    if (!status) {
        r->kind = SRV_RESPONSE;
        r->resp = calloc(1, sizeof *r->resp);
        if (r->resp) r->resp->echo = echo_fields(j, r);
        if (!r->resp || !r->resp->echo) { snprintf(msg, msg_len, "out of memory"); status = 500; }
    }
    cJSON_Delete(j);
    return status;
}

/* ---- replies ------------------------------------------------------------------------- */

static const char *item_type(const resp_item *it) {
    return it->call ? "function_call" : it->part == SRV_REASONING ? "reasoning" : "message";
}

/* The choice's logprobs entries since the last sent (marked sent), Responses' shape: [{token, logprob, bytes, top_logprobs}]. */
static cJSON *logprobs_since_sent(const srv_request *r) {
    srv_choice *ch = &r->choices[0];
    cJSON *o = srv_logprobs_chat_json(r->tok, ch->lp + ch->lp_sent, ch->n_lp - ch->lp_sent);
    ch->lp_sent = ch->n_lp;
    cJSON *a = o ? cJSON_DetachItemFromObjectCaseSensitive(o, "content") : NULL;
    cJSON_Delete(o);
    return a && cJSON_IsArray(a) ? a : (cJSON_Delete(a), cJSON_CreateArray());
}

/* The part item `it` holds: output_text (annotations, logprobs) or reasoning_text. */
static cJSON *part_json(const srv_request *r, const resp_item *it, bool with_text, bool with_logprobs) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", it->part == SRV_REASONING ? "reasoning_text" : "output_text");
    cJSON_AddStringToObject(p, "text", with_text && it->text.data ? it->text.data : "");
    if (it->part == SRV_CONTENT) {
        cJSON_AddArrayToObject(p, "annotations");
        if (with_logprobs && r->logprobs >= 0) cJSON_AddItemToObject(p, "logprobs", logprobs_since_sent(r));
    }
    return p;
}

/* Output item `it`: {id, type, status, role, content} (a message) or
 * {id, type, summary, content} (reasoning); content empty unless complete. */
static cJSON *item_json(const srv_request *r, const resp_item *it, const char *status, bool complete) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", it->id);
    cJSON_AddStringToObject(o, "type", item_type(it));
    cJSON_AddStringToObject(o, "status", status);
    if (it->call) {   /* {id, type, status, call_id, name, arguments} */
        cJSON_AddStringToObject(o, "call_id", it->call_id);
        cJSON_AddStringToObject(o, "name", it->name);
        cJSON_AddStringToObject(o, "arguments", complete ? it->arguments : "");
        return o;
    }
    if (it->part == SRV_CONTENT) cJSON_AddStringToObject(o, "role", "assistant");
    else cJSON_AddArrayToObject(o, "summary");
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    if (complete) cJSON_AddItemToArray(content, part_json(r, it, true, !r->stream));
    return o;
}

static int64_t generated(const srv_request *r) { return r->choices[0].completion_tokens; }

static cJSON *usage_json(const srv_request *r) {
    cJSON *u = cJSON_CreateObject(), *d;
    cJSON_AddNumberToObject(u, "input_tokens", (double)r->n_prompt);
    d = cJSON_AddObjectToObject(u, "input_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)r->cached_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", (double)generated(r));
    d = cJSON_AddObjectToObject(u, "output_tokens_details");
    cJSON_AddNumberToObject(d, "reasoning_tokens", (double)r->resp->reasoning_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)r->n_prompt + (double)generated(r));
    return u;
}

/* The Response object: status "in_progress" (no output yet), "completed",
 * "incomplete" (max_output_tokens) or "failed" (error set). */
static cJSON *response_json(const srv_request *r, const char *status) {
    const struct srv_resp *p = r->resp;
    bool final = strcmp(status, "in_progress") != 0;
    cJSON *o = cJSON_CreateObject(), *v;
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)r->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddBoolToObject(o, "background", false);
    if (!strcmp(status, "failed")) {
        v = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(v, "code", "server_error");
        cJSON_AddStringToObject(v, "message", r->error);
    } else cJSON_AddNullToObject(o, "error");
    if (!strcmp(status, "incomplete")) cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", r->model ? r->model : "");
    cJSON *out = cJSON_AddArrayToObject(o, "output");
    for (size_t i = 0; final && i < p->n_items; i++) {
        const resp_item *it = &p->items[i];
        cJSON_AddItemToArray(out, item_json(r, it, it->status ? it->status : "incomplete", true));
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, p->echo) cJSON_AddItemToObject(o, e->string, cJSON_Duplicate(e, true));
    if (final) cJSON_AddItemToObject(o, "usage", usage_json(r));
    else cJSON_AddNullToObject(o, "usage");
    return o;
}

/* A new streamed event: {"type", "sequence_number", ...} (fields added by the caller, then put_event). */
static cJSON *new_event(srv_request *r, const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", (double)r->resp->seq++);
    return o;
}

/* "event: TYPE\ndata: JSON\n\n" onto r->out (o freed). */
static void put_event(srv_request *r, cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    char *text = cJSON_PrintUnformatted(o);
    if (text && cJSON_IsString(t)) {
        srv_buf_puts(&r->out, "event: ");
        srv_buf_puts(&r->out, t->valuestring);
        srv_buf_puts(&r->out, "\ndata: ");
        srv_buf_puts(&r->out, text);
        srv_buf_puts(&r->out, "\n\n");
    } else r->out.oom = true;
    free(text);
    cJSON_Delete(o);
}

static void put_response_event(srv_request *r, const char *type, const char *status) {
    cJSON *o = new_event(r, type);
    cJSON_AddItemToObject(o, "response", response_json(r, status));
    put_event(r, o);
}

/* An event about item i's part: output_index, item_id, content_index (and the caller's fields). */
static cJSON *part_event(srv_request *r, size_t i, const char *type) {
    cJSON *o = new_event(r, type);
    cJSON_AddStringToObject(o, "item_id", r->resp->items[i].id);
    cJSON_AddNumberToObject(o, "output_index", (double)i);
    cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static void put_item_event(srv_request *r, size_t i, const char *type, const char *status, bool complete) {
    cJSON *o = new_event(r, type);
    cJSON_AddNumberToObject(o, "output_index", (double)i);
    cJSON_AddItemToObject(o, "item", item_json(r, &r->resp->items[i], status, complete));
    put_event(r, o);
}

/* Opens an item for part (streamed: output_item.added, content_part.added). */
static bool open_item(srv_request *r, srv_part part) {
    struct srv_resp *p = r->resp;
    resp_item *items = srv_grow(p->items, &p->cap_items, p->n_items + 1, sizeof *items);
    if (!items) { r->out.oom = true; return false; }
    p->items = items;
    size_t i = p->n_items++;
    resp_item *it = &items[i];
    *it = (resp_item){.part = part};
    const char *tail = strchr(r->id, '_');   /* the items share the response's id digits */
    snprintf(it->id, sizeof it->id, "%s_%s_%zu", part == SRV_REASONING ? "rs" : "msg", tail ? tail + 1 : r->id, i);
    p->open = true;
    if (!r->stream) return true;
    put_item_event(r, i, "response.output_item.added", "in_progress", false);
    cJSON *o = part_event(r, i, "response.content_part.added");
    cJSON_AddItemToObject(o, "part", part_json(r, it, false, false));
    put_event(r, o);
    return true;
}

/* Closes the open item (streamed: the text's done, content_part.done, output_item.done). */
static void close_item(srv_request *r, const char *status) {
    struct srv_resp *p = r->resp;
    if (!p->open) return;
    p->open = false;
    size_t i = p->n_items - 1;
    resp_item *it = &p->items[i];
    it->status = status;
    if (!r->stream) return;
    bool msg = it->part == SRV_CONTENT;
    cJSON *o = part_event(r, i, msg ? "response.output_text.done" : "response.reasoning_text.done");
    cJSON_AddStringToObject(o, "text", it->text.data ? it->text.data : "");
    if (msg) cJSON_AddArrayToObject(o, "logprobs");
    put_event(r, o);
    o = part_event(r, i, "response.content_part.done");
    cJSON_AddItemToObject(o, "part", part_json(r, it, true, false));
    put_event(r, o);
    put_item_event(r, i, "response.output_item.done", status, true);
}

/* Text of one part into the open item of that part (a new one when the part changes). */
static void put_text(srv_request *r, srv_part part, const char *text, size_t len) {
    struct srv_resp *p = r->resp;
    if (part == SRV_REASONING) r->choices[0].lp_sent = r->choices[0].n_lp;   /* logprobs go with output_text */
    if (!p->open || p->items[p->n_items - 1].part != part) {
        close_item(r, "completed");
        if (!open_item(r, part)) return;
    }
    size_t i = p->n_items - 1;
    srv_buf_put(&p->items[i].text, text, len);
    if (!r->stream) return;
    char *t = strndup(text, len);
    cJSON *o = part_event(r, i, part == SRV_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta");
    cJSON_AddStringToObject(o, "delta", t ? t : "");
    if (part == SRV_CONTENT) cJSON_AddItemToObject(o, "logprobs", r->logprobs >= 0 ? logprobs_since_sent(r) : cJSON_CreateArray());
    free(t);
    put_event(r, o);
}

/* The tool split's text: the message's. */
static void on_tool_text(void *ctx, const char *text, size_t len) { put_text(ctx, SRV_CONTENT, text, len); }

/* The tool split's call `index`: a function_call item of its own, complete at once. */
static void on_tool_call(void *ctx, int index, const srv_tool_call *call) {
    (void)index;
    srv_request *r = ctx;
    struct srv_resp *p = r->resp;
    close_item(r, "completed");
    resp_item *items = srv_grow(p->items, &p->cap_items, p->n_items + 1, sizeof *items);
    if (!items) { r->out.oom = true; return; }
    p->items = items;
    size_t i = p->n_items;
    resp_item *it = &items[i];
    *it = (resp_item){.part = SRV_CONTENT, .call = true, .status = "completed"};
    it->name = strdup(call->name);
    it->arguments = strdup(call->arguments);
    if (!it->name || !it->arguments) { free(it->name); free(it->arguments); r->out.oom = true; return; }
    p->n_items++;
    snprintf(it->call_id, sizeof it->call_id, "%s", call->id);
    const char *tail = strchr(r->id, '_');
    snprintf(it->id, sizeof it->id, "fc_%s_%zu", tail ? tail + 1 : r->id, i);
    r->resp->n_calls++;
    if (!r->stream) return;
    put_item_event(r, i, "response.output_item.added", "in_progress", false);
    cJSON *o = new_event(r, "response.function_call_arguments.delta");
    cJSON_AddStringToObject(o, "item_id", it->id);
    cJSON_AddNumberToObject(o, "output_index", (double)i);
    cJSON_AddStringToObject(o, "delta", it->arguments);
    put_event(r, o);
    o = new_event(r, "response.function_call_arguments.done");
    cJSON_AddStringToObject(o, "item_id", it->id);
    cJSON_AddNumberToObject(o, "output_index", (double)i);
    cJSON_AddStringToObject(o, "arguments", it->arguments);
    put_event(r, o);
    put_item_event(r, i, "response.output_item.done", "completed", true);
}

/* Splitter output: answer text goes through the tool split when tools are on. */
static void on_part(void *ctx, srv_part part, const char *text, size_t len) {
    srv_request *r = ctx;
    if (part == SRV_CONTENT && r->tools_on) {
        srv_tool_sink sink = {on_tool_text, on_tool_call, r};
        srv_tool_stream_push(&r->choices[0].tool_split, text, len, &sink);
        return;
    }
    put_text(r, part, text, len);
}

void srv_resp_begin(srv_request *r) {
    char *dash = strchr(r->id, '-');
    if (dash) *dash = '_';   /* "resp_...", as OpenAI's ids read */
    if (!r->stream) return;
    put_response_event(r, "response.created", "in_progress");
    put_response_event(r, "response.in_progress", "in_progress");
}

void srv_resp_token(srv_request *r, int choice, int32_t id) {
    (void)id;
    if (!r->done && r->choices[choice].splitter.inside) r->resp->reasoning_tokens++;
}

void srv_resp_text(srv_request *r, int choice, const char *text, size_t len) {
    if (!r->done && !r->choices[choice].done) srv_think_push(&r->choices[choice].splitter, text, len, on_part, r);
}

static bool cut_by_length(const okv_gen_stats *st, bool cut_short) {
    return cut_short || (st && (st->stop == OKV_STOP_MAX_TOKENS || st->stop == OKV_STOP_CONTEXT));
}

/* The request failed: streamed, an error event and response.failed. */
static void put_failure(srv_request *r) {
    cJSON *o = new_event(r, "error");
    cJSON_AddStringToObject(o, "code", "server_error");
    cJSON_AddStringToObject(o, "message", r->error);
    cJSON_AddNullToObject(o, "param");
    put_event(r, o);
    put_response_event(r, "response.failed", "failed");
}

bool srv_resp_end(srv_request *r, int choice, const okv_gen_stats *st, const char *error, bool cut_short) {
    if (r->done) return false;
    if (error && !r->failed) {
        r->failed = true;
        snprintf(r->error, sizeof r->error, "%s", error);
    }
    for (int i = choice < 0 ? 0 : choice; i < (choice < 0 ? r->n_choices : choice + 1); i++) {
        srv_choice *c = &r->choices[i];
        if (c->done) continue;
        if (!r->failed) srv_think_flush(&c->splitter, on_part, r);
        if (!r->failed && r->tools_on) {
            srv_tool_sink sink = {on_tool_text, on_tool_call, r};
            srv_tool_stream_end(&c->tool_split, &sink);
        }
        c->finish_reason = cut_by_length(st, cut_short) ? "length" : "stop";
        c->completion_tokens = st ? st->generated_tokens : 0;
        c->done = true;
        r->n_done++;
    }
    if (r->n_done < r->n_choices) return false;
    const char *status = strcmp(r->choices[0].finish_reason ? r->choices[0].finish_reason : "stop", "length") ? "completed" : "incomplete";
    if (r->failed) {
        if (r->stream) put_failure(r);
    } else {
        struct srv_resp *p = r->resp;
        bool has_message = false;
        for (size_t i = 0; i < p->n_items; i++) has_message |= p->items[i].part == SRV_CONTENT && !p->items[i].call;
        if (!has_message && !p->n_calls) {   /* every reply has its message, or its calls */
            close_item(r, "completed");
            open_item(r, SRV_CONTENT);
        }
        close_item(r, status);
        if (r->stream) put_response_event(r, !strcmp(status, "completed") ? "response.completed" : "response.incomplete", status);
        else {
            cJSON *o = response_json(r, status);
            char *text = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            if (text) srv_buf_puts(&r->out, text);
            else r->out.oom = true;
            free(text);
        }
    }
    r->done = true;
    return true;
}
