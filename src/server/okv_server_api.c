/* okv_server_api.c — the OpenAI shapes: request bodies of
 * /v1/chat/completions and /v1/completions checked field by field into a
 * srv_request (a bad field is a 400 that names it), and the replies built
 * from the generated text: one JSON object, or SSE "data:" events
 * (chat.completion.chunk / text_completion) ending with "data: [DONE]".
 * A request has n choices (srv_choice), each with its own text, reasoning
 * split, finish and logprobs; streamed chunks name their choice's index,
 * and a chat choice opens with a chunk holding the role alone. The request
 * is done when its last choice ends; the first error fails it (one error
 * event, the other choices cancelled). /v1/responses requests
 * (okv_server_responses.c) are parsed here as the chat requests they are
 * converted to, and srv_emit_* hand them to that file's emitters.
 *
 * Chat requests with tools (okv_server_tools.h) send each choice's content
 * through a tool split: calls the model writes become message.tool_calls
 * (streamed as delta.tool_calls chunks) with finish_reason "tool_calls".
 *
 * Sampling starts from the program's defaults (okv_gen_defaults_get: its
 * generation_config.json), and the request's fields override them, as
 * `offkv run` flags do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_server.h"

char *srv_error_json_code(const char *message, const char *type, const char *param, const char *code) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

char *srv_error_json(const char *message, const char *type, const char *param) {
    return srv_error_json_code(message, type, param, NULL);
}

uint64_t srv_affinity_hash(const char *key) {
    if (!key || !*key) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h ? h : 1;
}

char *srv_models_json(const okv_server *s) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "offkv");
    cJSON_AddNumberToObject(m, "context_length", s->o.ctx_per_seq);
    cJSON_AddItemToArray(data, m);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

/* ---- request parsing ---------------------------------------------------------- */

typedef struct parse_ctx {
    char *msg;
    size_t msg_len;
    const char **param;
} parse_ctx;

static int bad(parse_ctx *c, const char *param, const char *fmt, const char *detail) {
    snprintf(c->msg, c->msg_len, fmt, param, detail ? detail : "");
    *c->param = param;
    return 400;
}

/* An optional number field in [lo, hi]; absent/null leaves *out. */
static bool opt_number(parse_ctx *c, const cJSON *j, const char *key, double lo, double hi, double *out, int *status) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return false;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        char range[96];
        snprintf(range, sizeof range, "a number in [%g, %g]", lo, hi);
        *status = bad(c, key, "'%s' must be %s", range);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

static bool opt_int(parse_ctx *c, const cJSON *j, const char *key, double lo, double hi, long long *out, int *status) {
    double d;
    if (!opt_number(c, j, key, lo, hi, &d, status)) return false;
    if (d != floor(d)) { *status = bad(c, key, "'%s' must be an integer%s", NULL); return false; }
    *out = (long long)d;
    return true;
}

/* stop: a string or an array of at most 16 non-empty strings. */
static int parse_stops(parse_ctx *c, const cJSON *j, srv_request *r) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "stop");
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!*v->valuestring) return 0;
        r->stops[r->n_stops++] = strdup(v->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > SRV_MAX_STOPS)
        return bad(c, "stop", "'%s' must be a string or an array of at most 16 strings%s", NULL);
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e)) return bad(c, "stop", "'%s' must hold strings only%s", NULL);
        if (*e->valuestring) r->stops[r->n_stops++] = strdup(e->valuestring);
    }
    return 0;
}

/* A field that may be absent or null, else must be a string (accepted, not used). */
static int opt_string(parse_ctx *c, const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsString(v)) return 0;
    return bad(c, key, "'%s' must be a string%s", NULL);
}

/* The prefix-cache affinity: prompt_cache_key, else what the caller set
 * (the X-Prompt-Cache-Key header), else user. */
static void parse_affinity(const cJSON *j, srv_request *r) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "prompt_cache_key");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "user");
    if (cJSON_IsString(k) && *k->valuestring) r->affinity = srv_affinity_hash(k->valuestring);
    else if (!r->affinity && cJSON_IsString(u)) r->affinity = srv_affinity_hash(u->valuestring);
}

/* Chat: logprobs true/false with top_logprobs 0..20 (which needs logprobs
 * true); completions: logprobs 0..20, the top entries per token. */
static int parse_logprobs(parse_ctx *c, const cJSON *j, srv_request *r) {
    int status = 0;
    long long k = 0;
    r->logprobs = -1;
    if (r->kind == SRV_COMPLETION) {
        if (opt_int(c, j, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &k, &status)) r->logprobs = (int)k;
        return status ? bad(c, "logprobs", "'%s' must be an integer in [0, 20] (top entries per token)%s", NULL) : 0;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "logprobs");
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) return bad(c, "logprobs", "'%s' must be true or false%s", NULL);
    bool on = v && cJSON_IsTrue(v);
    bool has_top = opt_int(c, j, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &k, &status);
    if (status) return bad(c, "top_logprobs", "'%s' must be an integer in [0, 20]%s", NULL);
    if (has_top && !on) return bad(c, "top_logprobs", "'%s' needs 'logprobs': true%s", NULL);
    if (on) r->logprobs = (int)k;
    return 0;
}

/* Fields OpenAI defines that would change the output but that we do not
 * implement: a 400 naming the field rather than a reply that silently
 * differs from what was asked. (Fields that cannot change the output --
 * store, metadata, service_tier, prediction, ... -- are ignored; the list
 * is in docs/serving.md.) */
static int refuse_unsupported(parse_ctx *c, const cJSON *j) {
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "logit_bias")) && !cJSON_IsNull(v) &&
        !(cJSON_IsObject(v) && !v->child))
        return bad(c, "logit_bias", "'%s' is not supported%s", NULL);
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "echo")) && cJSON_IsTrue(v))
        return bad(c, "echo", "'%s': true is not supported (the reply never repeats the prompt)%s", NULL);
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "best_of")) && !cJSON_IsNull(v) &&
        !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return bad(c, "best_of", "'%s' is not supported (use n for several choices)%s", NULL);
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "suffix")) && !cJSON_IsNull(v) &&
        !(cJSON_IsString(v) && !v->valuestring[0]))
        return bad(c, "suffix", "'%s' (insertion) is not supported%s", NULL);
    static const char *const refused[] = {"functions", "function_call", "audio", "web_search_options"};
    static const char *const why[] = {"use tools", "use tool_choice", "text output only", "no search tool"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if ((v = cJSON_GetObjectItemCaseSensitive(j, refused[i])) && !cJSON_IsNull(v))
            return bad(c, refused[i], "'%s' is not supported (%s)", why[i]);
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "modalities")) && cJSON_IsArray(v)) {
        const cJSON *m;
        cJSON_ArrayForEach(m, v)
            if (!cJSON_IsString(m) || strcmp(m->valuestring, "text"))
                return bad(c, "modalities", "'%s': only \"text\" is supported%s", NULL);
    }
    return 0;
}

/* The fields both endpoints share: sampling, limits, stop, stream, n, logprobs. */
static int parse_common(okv_server *s, parse_ctx *c, const cJSON *j, srv_request *r) {
    int status = refuse_unsupported(c, j);
    if (status) return status;
    okv_sampler_params sp = s->defaults.sampling;
    double d;
    long long ll;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "stream")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v)) return bad(c, "stream", "'%s' must be true or false%s", NULL);
        r->stream = cJSON_IsTrue(v);
    }
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return bad(c, "stream_options", "'%s' must be an object%s", NULL);
        v = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
        r->include_usage = v && cJSON_IsTrue(v);
    }
    r->n_choices = 1;
    if (opt_int(c, j, "n", 1, s->max_running, &ll, &status)) r->n_choices = (int)ll;
    if (status) return bad(c, "n", "'%s' must be an integer in [1, --parallel] (choices run as parallel sequences)%s", NULL);
    if ((status = parse_logprobs(c, j, r))) return status;
    if ((status = opt_string(c, j, "user")) || (status = opt_string(c, j, "prompt_cache_key"))) return status;
    parse_affinity(j, r);
    long long max_new = s->o.max_tokens_default > 0 ? s->o.max_tokens_default : s->o.ctx_per_seq;
    if (opt_int(c, j, "max_tokens", 1, 1 << 30, &ll, &status)) max_new = ll;
    if (status) return status;
    if (opt_int(c, j, "max_completion_tokens", 1, 1 << 30, &ll, &status)) max_new = ll;
    if (status) return status;
    if (opt_number(c, j, "temperature", 0, 1e6, &d, &status)) { sp.temperature = (float)d; sp.do_sample = d > 0; }
    if (status) return status;
    if (opt_number(c, j, "top_p", 0, 1, &d, &status)) sp.top_p = (float)d;
    if (status) return status;
    if (opt_int(c, j, "top_k", -1, 1 << 30, &ll, &status)) sp.top_k = ll < 0 ? 0 : (int32_t)ll;
    if (status) return status;
    if (opt_number(c, j, "min_p", 0, 1, &d, &status)) sp.min_p = (float)d;
    if (status) return status;
    if (opt_number(c, j, "repetition_penalty", 1e-6, 1e6, &d, &status)) sp.repetition_penalty = (float)d;
    if (status) return status;
    if (opt_int(c, j, "seed", -9.2e18, 9.2e18, &ll, &status)) sp.seed = (uint64_t)ll;
    if (status) return status;
    if (opt_number(c, j, "frequency_penalty", -2, 2, &d, &status)) sp.frequency_penalty = (float)d;
    if (status) return status;
    if (opt_number(c, j, "presence_penalty", -2, 2, &d, &status)) sp.presence_penalty = (float)d;
    if (status) return status;
    if ((status = parse_stops(c, j, r))) return status;
    okv_error err;
    if (okv_sampler_params_check(&sp, &err)) return bad(c, "temperature", "sampling parameters: %s", err.message);
    okv_gen_options_init(&r->go, &s->defaults, (int)max_new);
    r->go.sampling = sp;
    r->go.stops = (const char *const *)r->stops;
    r->go.n_stops = r->n_stops;
    return 0;
}

/* messages -> a clean array for the template: role, content, and the tool
 * fields (tool_calls, tool_call_id, name) as srv_tools_message keeps them. */
static int parse_messages(parse_ctx *c, const cJSON *j, cJSON **out) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages"), *m;
    if (!msgs) return bad(c, "messages", "'%s' is required%s", NULL);
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs)) return bad(c, "messages", "'%s' must be a non-empty array%s", NULL);
    cJSON *clean = cJSON_CreateArray();
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        char why[160], detail[192];
        cJSON *e = srv_tools_message(m, why, sizeof why);
        if (!e) {
            cJSON_Delete(clean);
            snprintf(detail, sizeof detail, "[%d] %s", i, why);
            return bad(c, "messages", "'%s'%s", detail);
        }
        cJSON_AddItemToArray(clean, e);
        i++;
    }
    *out = clean;
    return 0;
}

/* True when the prompt's text ends inside an opened <think> block (the
 * template opened it for the model). */
static bool prompt_opens_think(okv_server *s, const int32_t *ids, size_t n) {
    size_t k = n < 8 ? n : 8;
    char *text = NULL;
    size_t len = 0;
    okv_error err;
    bool open = false;
    if (!okv_tok_decode(s->tok, ids + n - k, k, false, &text, &len, &err)) {
        const char *o = NULL, *p = text;
        while ((p = strstr(p, "<think>"))) o = p++;
        open = o && !strstr(o, "</think>");
    }
    free(text);
    return open;
}

/* The token bytes constrained sampling needs, built by the first request that needs them. */
static okv_status ensure_grammar_vocab(okv_server *s, okv_error *err) {
    okv_status st = OKV_OK;
    pthread_mutex_lock(&s->tok_lock);
    if (!s->grammar_vocab) st = okv_gen_grammar_vocab(s->tok, s->info.vocab_size, &s->grammar_vocab, err);
    pthread_mutex_unlock(&s->tok_lock);
    return st;
}

/* tools / tool_choice / parallel_tool_calls (okv_server_tools.h): a forced
 * call (required, a named function) constrains the output with the
 * template family's call syntax. Runs after parse_response_format. */
static int parse_tools(okv_server *s, parse_ctx *c, const cJSON *j, srv_request *r) {
    int status = srv_tools_parse(j, &r->tools, c->msg, c->msg_len, c->param);
    if (status) return status;
    bool forced = r->tools.choice == SRV_TOOLS_REQUIRED || r->tools.choice == SRV_TOOLS_NAMED;
    if (forced && r->grammar)
        return bad(c, "tool_choice", "'%s' forcing a call cannot be combined with a response_format schema%s", NULL);
    r->tools_on = srv_tools_active(&r->tools) && !r->grammar;
    if (!forced) return 0;
    okv_error err = {0};
    okv_status st = srv_tools_grammar(&r->tools, s->tool_syntax, &r->grammar, &err);
    if (!st) st = ensure_grammar_vocab(s, &err);
    if (st) {
        char detail[sizeof err.message + 4];
        snprintf(detail, sizeof detail, ": %s", err.message);
        return bad(c, "tools", "'%s'%s", detail);
    }
    r->go.grammar = r->grammar;
    r->go.grammar_vocab = s->grammar_vocab;
    return 0;
}

/* The template's extra variables: chat_template_kwargs, and `tools` when
 * the template renders them (HF's apply_chat_template puts both in the
 * context the same way). NULL with *status set on a bad field. */
static char *template_vars(okv_server *s, parse_ctx *c, const cJSON *j, const srv_request *r, int *status) {
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(j, "chat_template_kwargs");
    bool tools = srv_tools_active(&r->tools) && s->template_tools;
    *status = 0;
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw)) { *status = bad(c, "chat_template_kwargs", "'%s' must be an object%s", NULL); return NULL; }
    if (!tools && (!kw || cJSON_IsNull(kw))) return NULL;
    cJSON *vars = kw && cJSON_IsObject(kw) ? cJSON_Duplicate(kw, true) : cJSON_CreateObject();
    if (vars && tools) {
        cJSON_DeleteItemFromObjectCaseSensitive(vars, "tools");
        cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(r->tools.list, true));
    }
    char *text = vars ? cJSON_PrintUnformatted(vars) : NULL;
    cJSON_Delete(vars);
    if (!text) *status = bad(c, "messages", "'%s': out of memory%s", NULL);
    return text;
}

static int parse_chat(okv_server *s, parse_ctx *c, const cJSON *j, srv_request *r) {
    char *msgs = NULL, *vars = NULL;
    cJSON *clean = NULL;
    int status = parse_messages(c, j, &clean);
    if (!status) status = parse_tools(s, c, j, r);
    if (!status && srv_tools_active(&r->tools) && !s->template_tools && !srv_tools_system_note(&r->tools, clean))
        status = bad(c, "tools", "'%s': out of memory%s", NULL);
    if (!status) vars = template_vars(s, c, j, r, &status);
    if (!status && !(msgs = cJSON_PrintUnformatted(clean))) status = bad(c, "messages", "'%s': out of memory%s", NULL);
    cJSON_Delete(clean);
    if (status) { free(vars); return status; }
    okv_gen_prompt_args pa = {OKV_CHAT_TEMPLATE, NULL, NULL, vars, s->tok_config, s->chat_template, s->info.bos_id, msgs};
    okv_error err = {0};
    pthread_mutex_lock(&s->tok_lock);
    okv_status st = okv_gen_prompt(s->tok, &pa, &r->prompt, &r->n_prompt, NULL, &err);
    pthread_mutex_unlock(&s->tok_lock);
    free(msgs);
    free(vars);
    if (st) return bad(c, "messages", "'%s' could not be rendered with the model's chat template: %s", err.message);
    r->think = s->think_template;
    bool forced = r->tools.choice == SRV_TOOLS_REQUIRED || r->tools.choice == SRV_TOOLS_NAMED;
    /* a forced call begins at once: no reasoning comes first, even in an opened <think> */
    r->think_inside = r->think && !forced && r->n_prompt && prompt_opens_think(s, r->prompt, r->n_prompt);
    return 0;
}

/* prompt: a string, an array of token ids, or an array holding one string. */
static int parse_completion(okv_server *s, parse_ctx *c, const cJSON *j, srv_request *r) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (!p) return bad(c, "prompt", "'%s' is required%s", NULL);
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0))) p = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(p)) {
        okv_error err = {0};
        pthread_mutex_lock(&s->tok_lock);
        okv_status st = okv_tok_encode(s->tok, p->valuestring, strlen(p->valuestring), true, &r->prompt, &r->n_prompt, &err);
        pthread_mutex_unlock(&s->tok_lock);
        if (st) return bad(c, "prompt", "'%s' could not be tokenized: %s", err.message);
        return 0;
    }
    int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : -1;
    if (n <= 0) return bad(c, "prompt", "'%s' must be a string or a non-empty array of token ids%s", NULL);
    r->prompt = malloc(sizeof(int32_t) * (size_t)n);
    if (!r->prompt) return bad(c, "prompt", "'%s': out of memory%s", NULL);
    const cJSON *e;
    cJSON_ArrayForEach(e, p) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= s->info.vocab_size || e->valuedouble != floor(e->valuedouble))
            return bad(c, "prompt", "'%s' token ids must be integers in [0, vocab_size)%s", NULL);
        r->prompt[r->n_prompt++] = (int32_t)e->valuedouble;
    }
    return 0;
}

/* response_format: "text" (free), "json_object" (any object) or "json_schema"
 * ({"name", "schema", "strict"}: the schema enforced whether strict or not).
 * The constraint goes to r->go.grammar; a schema we cannot enforce is a 400
 * naming the keyword. Must run after parse_common (which sets r->go). */
static int parse_response_format(okv_server *s, parse_ctx *c, const cJSON *j, srv_request *r) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(j, "response_format");
    if (!rf || cJSON_IsNull(rf)) return 0;
    const cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    const char *type = cJSON_IsString(t) ? t->valuestring : NULL;
    if (!type) return bad(c, "response_format", "'%s' must be an object with a string 'type'%s", NULL);
    if (!strcmp(type, "text")) return 0;
    okv_error err = {0};
    okv_status st;
    if (!strcmp(type, "json_object")) {
        st = okv_grammar_json_object(&r->grammar, &err);
    } else if (!strcmp(type, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        const cJSON *schema = cJSON_IsObject(js) ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
        if (!cJSON_IsObject(js) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(js, "name")))
            return bad(c, "response_format", "'%s' of type json_schema needs a 'json_schema' object with a string 'name'%s", NULL);
        if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
            return bad(c, "response_format", "'%s': json_schema.schema must be an object%s", NULL);
        char *text = schema ? cJSON_PrintUnformatted(schema) : strdup("true");
        st = text ? okv_grammar_from_schema(text, strlen(text), &r->grammar, &err)
                  : (snprintf(err.message, sizeof err.message, "out of memory"), OKV_ERR_NOMEM);
        free(text);
    } else {
        return bad(c, "response_format", "'%s' type must be \"text\", \"json_object\" or \"json_schema\"%s", NULL);
    }
    if (!st) st = ensure_grammar_vocab(s, &err);
    if (st) {
        char detail[sizeof err.message + 4];
        snprintf(detail, sizeof detail, ": %s", err.message);
        return bad(c, "response_format", "'%s'%s", detail);
    }
    r->go.grammar = r->grammar;
    r->go.grammar_vocab = s->grammar_vocab;
    return 0;
}

int srv_parse_request(okv_server *s, srv_kind kind, const char *body, size_t len, srv_request *r, char *msg,
                      size_t msg_len, const char **param) {
    parse_ctx c = {msg, msg_len, param};
    *param = NULL;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) { snprintf(msg, msg_len, "the request body is not valid JSON"); return 400; }
    int status = 0;
    if (!cJSON_IsObject(j)) { snprintf(msg, msg_len, "the request body must be a JSON object"); status = 400; }
    r->kind = kind;
    if (!status) status = parse_common(s, &c, j, r);
    if (!status) status = parse_response_format(s, &c, j, r);
    if (!status) status = kind == SRV_CHAT ? parse_chat(s, &c, j, r) : parse_completion(s, &c, j, r);
    cJSON_Delete(j);
    if (!status && !srv_request_choices(r, r->n_choices)) { snprintf(msg, msg_len, "out of memory"); status = 500; }
    if (!status && r->n_prompt == 0) status = bad(&c, kind == SRV_CHAT ? "messages" : "prompt", "'%s' gives an empty prompt%s", NULL);
    if (!status && r->n_prompt > (size_t)s->o.ctx_per_seq) {   /* (a prompt filling it still samples one token) */
        char detail[128];
        snprintf(detail, sizeof detail, " (%zu tokens; the context holds %d)", r->n_prompt, s->o.ctx_per_seq);
        status = bad(&c, kind == SRV_CHAT ? "messages" : "prompt", "'%s' is longer than the context%s", detail);
        r->err_code = "context_length_exceeded";
    }
    uint64_t seed = (uint64_t)(srv_now() * 1e9) ^ ((uint64_t)(uintptr_t)r << 16);   /* tool call ids */
    for (int i = 0; !status && i < r->n_choices; i++) {
        srv_think_init(&r->choices[i].splitter, r->think, r->think_inside);
        srv_tool_stream_init(&r->choices[i].tool_split, &r->tools, seed + (uint64_t)i * 0x9E3779B97F4A7C15ull);
    }
    r->fingerprint = s->fingerprint;
    r->tok = s->tok;
    r->n_vocab = s->info.vocab_size;
    return status;
}

/* ---- replies ------------------------------------------------------------------- */

void srv_fingerprint(const okv_program *p, char out[24]) {
    uint64_t layout = 0, program = 0;
    okv_program_fingerprint(p, &layout, &program);
    snprintf(out, 24, "fp_%016llx", (unsigned long long)(program ^ (layout * 0x9E3779B97F4A7C15ull)));
}

static int64_t completion_tokens(const srv_request *r) {
    int64_t n = 0;
    for (int i = 0; i < r->n_choices; i++) n += r->choices[i].completion_tokens;
    return n;
}

/* usage: the prompt once (its cells are shared by every choice), completion tokens of all choices. */
static cJSON *usage_json(const srv_request *r) {
    cJSON *u = cJSON_CreateObject();
    int64_t gen = completion_tokens(r);
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)r->n_prompt + (double)gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)r->cached_tokens);
    return u;
}

static cJSON *envelope(const srv_request *r, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", r->kind == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddStringToObject(o, "system_fingerprint", r->fingerprint ? r->fingerprint : "");
    return o;
}

static void put_event(srv_request *r, cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) { r->out.oom = true; return; }
    srv_buf_puts(&r->out, "data: ");
    srv_buf_puts(&r->out, text);
    srv_buf_puts(&r->out, "\n\n");
    free(text);
}

/* The choice's logprobs entries from lp_sent on (marked sent), in the
 * request's shape; JSON null when logprobs are off or (streaming) none are new. */
static cJSON *logprobs_since_sent(const srv_request *r, srv_choice *ch) {
    size_t n = ch->n_lp - ch->lp_sent;
    if (r->logprobs < 0 || (r->stream && !n)) return cJSON_CreateNull();
    const srv_logprob *lp = ch->lp + ch->lp_sent;
    ch->lp_sent = ch->n_lp;
    if (r->kind == SRV_CHAT) return srv_logprobs_chat_json(r->tok, lp, n);
    return srv_logprobs_legacy_json(r->tok, lp, n, &ch->text_offset);
}

/* One streamed chunk of choice i: delta text of one part, the role alone
 * (role true: chat's first chunk of a choice), or (text NULL) the finish. */
static void put_chunk(srv_request *r, int i, srv_part part, const char *text, size_t len, bool role, const char *finish) {
    srv_choice *c = &r->choices[i];
    cJSON *o = envelope(r, true), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", i);
    char *t = text ? strndup(text, len) : NULL;
    if (r->kind == SRV_CHAT) {
        cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
        if (role) {
            cJSON_AddStringToObject(delta, "role", "assistant");
            cJSON_AddStringToObject(delta, "content", "");
        } else if (t) cJSON_AddStringToObject(delta, part == SRV_REASONING ? "reasoning_content" : "content", t);
    } else cJSON_AddStringToObject(ch, "text", t ? t : "");
    cJSON_AddItemToObject(ch, "logprobs", role ? cJSON_CreateNull() : logprobs_since_sent(r, c));
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    free(t);
    put_event(r, o);
}

/* Chat streams open each choice with a chunk carrying the role alone, as OpenAI does. */
static void put_role_once(srv_request *r, int i) {
    if (r->kind != SRV_CHAT || r->choices[i].role_sent) return;
    r->choices[i].role_sent = true;
    put_chunk(r, i, SRV_CONTENT, NULL, 0, true, NULL);
}

typedef struct part_ctx {
    srv_request *r;
    int choice;
} part_ctx;

static void put_part(part_ctx *pc, srv_part part, const char *text, size_t len) {
    srv_request *r = pc->r;
    srv_choice *c = &r->choices[pc->choice];
    if (!r->stream) { srv_buf_put(part == SRV_REASONING ? &c->reasoning : &c->content, text, len); return; }
    put_role_once(r, pc->choice);
    put_chunk(r, pc->choice, part, text, len, false, NULL);
}

static void on_tool_text(void *ctx, const char *text, size_t len) { put_part(ctx, SRV_CONTENT, text, len); }

/* A tool call of the reply: kept for the body, or streamed as two
 * delta.tool_calls chunks (id, type and name; then the arguments). */
static void on_tool_call(void *ctx, int index, const srv_tool_call *call) {
    part_ctx *pc = ctx;
    srv_request *r = pc->r;
    srv_choice *c = &r->choices[pc->choice];
    if (!r->stream) {
        srv_tool_call *v = srv_grow(c->calls, &c->cap_calls, (size_t)c->n_calls + 1, sizeof *v);
        char *name = strdup(call->name), *args = strdup(call->arguments);
        if (!v || !name || !args) { free(name); free(args); r->out.oom = true; return; }
        c->calls = v;
        c->calls[c->n_calls] = *call;
        c->calls[c->n_calls].name = name;
        c->calls[c->n_calls++].arguments = args;
        return;
    }
    put_role_once(r, pc->choice);
    c->n_calls++;
    for (int piece = 0; piece < 2; piece++) {
        cJSON *o = envelope(r, true), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", pc->choice);
        cJSON *tc = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(cJSON_AddObjectToObject(ch, "delta"), "tool_calls"), tc);
        cJSON_AddNumberToObject(tc, "index", index);
        if (piece == 0) {
            cJSON_AddStringToObject(tc, "id", call->id);
            cJSON_AddStringToObject(tc, "type", "function");
            cJSON_AddStringToObject(fn, "name", call->name);
        }
        cJSON_AddStringToObject(fn, "arguments", piece == 0 ? "" : call->arguments);
        cJSON_AddItemToObject(tc, "function", fn);
        cJSON_AddItemToObject(ch, "logprobs", piece == 0 ? logprobs_since_sent(r, c) : cJSON_CreateNull());
        cJSON_AddNullToObject(ch, "finish_reason");
        cJSON_AddItemToArray(choices, ch);
        put_event(r, o);
    }
}

static void on_part(void *ctx, srv_part part, const char *text, size_t len) {
    part_ctx *pc = ctx;
    srv_request *r = pc->r;
    if (part == SRV_CONTENT && r->tools_on) {
        srv_tool_sink sink = {on_tool_text, on_tool_call, pc};
        srv_tool_stream_push(&r->choices[pc->choice].tool_split, text, len, &sink);
        return;
    }
    put_part(pc, part, text, len);
}

void srv_emit_token(srv_request *r, int choice, const float *row, int32_t id) {
    if (r->kind == SRV_RESPONSE) srv_resp_token(r, choice, id);
    srv_choice *c = &r->choices[choice];
    if (r->done || c->done || r->logprobs < 0 || !row) return;
    srv_logprob *p = srv_grow(c->lp, &c->cap_lp, c->n_lp + 1, sizeof *p);
    if (!p) { r->out.oom = true; return; }
    c->lp = p;
    srv_logprob_of(row, r->n_vocab, id, r->logprobs, &c->lp[c->n_lp++]);
}

void srv_emit_text(srv_request *r, int choice, const char *text, size_t len) {
    if (r->kind == SRV_RESPONSE) { srv_resp_text(r, choice, text, len); return; }
    part_ctx pc = {r, choice};
    if (!r->done && !r->choices[choice].done) srv_think_push(&r->choices[choice].splitter, text, len, on_part, &pc);
}

static const char *finish_reason(const okv_gen_stats *st) {
    if (!st) return "stop";
    return st->stop == OKV_STOP_MAX_TOKENS || st->stop == OKV_STOP_CONTEXT ? "length" : "stop";
}

/* message.tool_calls: [{id, type, function: {name, arguments}}]. */
static cJSON *tool_calls_json(const srv_choice *c) {
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < c->n_calls; k++) {
        cJSON *tc = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(tc, "id", c->calls[k].id);
        cJSON_AddStringToObject(tc, "type", "function");
        cJSON_AddStringToObject(fn, "name", c->calls[k].name);
        cJSON_AddStringToObject(fn, "arguments", c->calls[k].arguments);
        cJSON_AddItemToObject(tc, "function", fn);
        cJSON_AddItemToArray(a, tc);
    }
    return a;
}

/* The whole non-streamed reply, every choice by index. */
static void put_body(srv_request *r) {
    cJSON *o = envelope(r, false), *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < r->n_choices; i++) {
        srv_choice *c = &r->choices[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        if (r->kind == SRV_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (c->n_calls && !c->content.len) cJSON_AddNullToObject(m, "content");   /* as OpenAI: calls alone */
            else cJSON_AddStringToObject(m, "content", c->content.data ? c->content.data : "");
            if (c->reasoning.len) cJSON_AddStringToObject(m, "reasoning_content", c->reasoning.data);
            if (c->n_calls) cJSON_AddItemToObject(m, "tool_calls", tool_calls_json(c));
        } else cJSON_AddStringToObject(ch, "text", c->content.data ? c->content.data : "");
        cJSON_AddItemToObject(ch, "logprobs", logprobs_since_sent(r, c));
        cJSON_AddStringToObject(ch, "finish_reason", c->finish_reason);
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON_AddItemToObject(o, "usage", usage_json(r));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (text) srv_buf_puts(&r->out, text);
    else r->out.oom = true;
    free(text);
}

/* Ends choice i: held text flushed, its finish chunk streamed (unless the
 * request failed); cut_short: "length", as srv_emit_end says. */
static void end_choice(srv_request *r, int i, const okv_gen_stats *st, bool cut_short) {
    srv_choice *c = &r->choices[i];
    part_ctx pc = {r, i};
    if (!r->failed) srv_think_flush(&c->splitter, on_part, &pc);
    if (!r->failed && r->tools_on) {
        srv_tool_sink sink = {on_tool_text, on_tool_call, &pc};
        srv_tool_stream_end(&c->tool_split, &sink);
    }
    c->finish_reason = cut_short ? "length" : finish_reason(st);
    if (c->n_calls && !strcmp(c->finish_reason, "stop")) c->finish_reason = "tool_calls";
    c->completion_tokens = st ? st->generated_tokens : 0;
    c->done = true;
    r->n_done++;
    if (r->stream && !r->failed) {
        put_role_once(r, i);
        put_chunk(r, i, SRV_CONTENT, NULL, 0, false, c->finish_reason);
    }
}

/* The first error fails the request: streamed, one error event (no finish chunks follow). */
static void fail_request(srv_request *r, const char *error) {
    if (r->failed) return;
    r->failed = true;
    snprintf(r->error, sizeof r->error, "%s", error);
    if (!r->stream) return;
    char *e = srv_error_json(error, "server_error", NULL);
    srv_buf_puts(&r->out, "data: ");
    srv_buf_puts(&r->out, e ? e : "{}");
    srv_buf_puts(&r->out, "\n\n");
    free(e);
}

bool srv_emit_end(srv_request *r, int choice, const okv_gen_stats *st, const char *error, bool cut_short) {
    if (r->kind == SRV_RESPONSE) return srv_resp_end(r, choice, st, error, cut_short);
    if (r->done) return false;
    if (error) fail_request(r, error);
    for (int i = choice < 0 ? 0 : choice; i < (choice < 0 ? r->n_choices : choice + 1); i++)
        if (!r->choices[i].done) end_choice(r, i, st, cut_short);
    if (r->n_done < r->n_choices) return false;
    if (r->stream) {
        if (r->include_usage) {
            cJSON *o = envelope(r, true);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(r));
            put_event(r, o);
        }
        srv_buf_puts(&r->out, "data: [DONE]\n\n");
    } else if (!r->failed) put_body(r);
    r->done = true;
    return true;
}
