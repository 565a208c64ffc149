/* okv_server_api.c — the OpenAI shapes: request bodies of
 * /v1/chat/completions and /v1/completions checked field by field into a
 * srv_request (a bad field is a 400 that names it), and the replies built
 * from the generated text: one JSON object, or SSE "data:" events
 * (chat.completion.chunk / text_completion) ending with "data: [DONE]".
 *
 * Sampling starts from the program's defaults (okv_gen_defaults_get: its
 * generation_config.json), and the request's fields override them, as
 * `offkv run` flags do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_server.h"

char *srv_error_json(const char *message, const char *type, const char *param) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
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

/* The fields both endpoints share: sampling, limits, stop, stream. */
static int parse_common(okv_server *s, parse_ctx *c, const cJSON *j, srv_request *r) {
    int status = 0;
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
    if (opt_int(c, j, "n", 1, 1, &ll, &status), status) return bad(c, "n", "'%s' must be 1 (one choice per request)%s", NULL);
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

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts joined. */
static char *content_text(const cJSON *content) {
    if (cJSON_IsString(content)) return strdup(content->valuestring);
    if (cJSON_IsNull(content)) return strdup("");
    if (!cJSON_IsArray(content)) return NULL;
    srv_buf o = {0};
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t)) { srv_buf_free(&o); return NULL; }
        srv_buf_puts(&o, t->valuestring);
    }
    return srv_buf_detach(&o);
}

/* messages -> a clean [{role, content}] array for the template. */
static int parse_messages(parse_ctx *c, const cJSON *j, char **out) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages"), *m;
    if (!msgs) return bad(c, "messages", "'%s' is required%s", NULL);
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs)) return bad(c, "messages", "'%s' must be a non-empty array%s", NULL);
    cJSON *clean = cJSON_CreateArray();
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        char *text = cJSON_IsObject(m) ? content_text(cJSON_GetObjectItemCaseSensitive(m, "content")) : NULL;
        if (!cJSON_IsString(role) || !text) {
            free(text);
            cJSON_Delete(clean);
            return bad(c, "messages", "'%s': each message needs a string 'role' and a string (or text parts) 'content'%s", NULL);
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "role", role->valuestring);
        cJSON_AddStringToObject(e, "content", text);
        cJSON_AddItemToArray(clean, e);
        free(text);
    }
    *out = cJSON_PrintUnformatted(clean);
    cJSON_Delete(clean);
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

static int parse_chat(okv_server *s, parse_ctx *c, const cJSON *j, srv_request *r) {
    char *msgs = NULL, *vars = NULL;
    int status = parse_messages(c, j, &msgs);
    if (status) return status;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(j, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) { free(msgs); return bad(c, "chat_template_kwargs", "'%s' must be an object%s", NULL); }
        vars = cJSON_PrintUnformatted(kw);
    }
    okv_gen_prompt_args pa = {OKV_CHAT_TEMPLATE, NULL, NULL, vars, s->tok_config, s->chat_template, s->info.bos_id, msgs};
    okv_error err = {0};
    pthread_mutex_lock(&s->tok_lock);
    okv_status st = okv_gen_prompt(s->tok, &pa, &r->prompt, &r->n_prompt, NULL, &err);
    pthread_mutex_unlock(&s->tok_lock);
    free(msgs);
    free(vars);
    if (st) return bad(c, "messages", "'%s' could not be rendered with the model's chat template: %s", err.message);
    r->think = s->think_template;
    r->think_inside = r->think && r->n_prompt && prompt_opens_think(s, r->prompt, r->n_prompt);
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
    if (!st) {
        pthread_mutex_lock(&s->tok_lock);
        if (!s->grammar_vocab) st = okv_gen_grammar_vocab(s->tok, s->info.vocab_size, &s->grammar_vocab, &err);
        pthread_mutex_unlock(&s->tok_lock);
    }
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
    if (!status && r->n_prompt == 0) status = bad(&c, kind == SRV_CHAT ? "messages" : "prompt", "'%s' gives an empty prompt%s", NULL);
    if (!status && r->n_prompt > (size_t)s->o.ctx_per_seq) {
        char detail[128];
        snprintf(detail, sizeof detail, " (%zu tokens; the context holds %d)", r->n_prompt, s->o.ctx_per_seq);
        status = bad(&c, kind == SRV_CHAT ? "messages" : "prompt", "'%s' is longer than the context%s", detail);
    }
    srv_think_init(&r->splitter, r->think, r->think_inside);
    return status;
}

/* ---- replies ------------------------------------------------------------------- */

static cJSON *usage_json(const srv_request *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)r->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)r->n_prompt + (double)r->completion_tokens);
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

/* One streamed chunk: delta text of one part, or (text NULL) the finish. */
static void put_chunk(srv_request *r, srv_part part, const char *text, size_t len, const char *finish) {
    cJSON *o = envelope(r, true), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    char *t = text ? strndup(text, len) : NULL;
    if (r->kind == SRV_CHAT) {
        cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
        if (!r->role_sent) { cJSON_AddStringToObject(delta, "role", "assistant"); r->role_sent = true; }
        if (t) cJSON_AddStringToObject(delta, part == SRV_REASONING ? "reasoning_content" : "content", t);
    } else {
        cJSON_AddStringToObject(ch, "text", t ? t : "");
        cJSON_AddNullToObject(ch, "logprobs");
    }
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    free(t);
    put_event(r, o);
}

static void on_part(void *ctx, srv_part part, const char *text, size_t len) {
    srv_request *r = ctx;
    if (r->stream) put_chunk(r, part, text, len, NULL);
    else srv_buf_put(part == SRV_REASONING ? &r->reasoning : &r->content, text, len);
}

void srv_emit_text(srv_request *r, const char *text, size_t len) {
    if (!r->done) srv_think_push(&r->splitter, text, len, on_part, r);
}

static const char *finish_reason(const okv_gen_stats *st) {
    if (!st) return "stop";
    return st->stop == OKV_STOP_MAX_TOKENS || st->stop == OKV_STOP_CONTEXT ? "length" : "stop";
}

/* The whole non-streamed reply. */
static void put_body(srv_request *r) {
    cJSON *o = envelope(r, false), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", 0);
    if (r->kind == SRV_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", r->content.data ? r->content.data : "");
        if (r->reasoning.len) cJSON_AddStringToObject(m, "reasoning_content", r->reasoning.data);
    } else {
        cJSON_AddStringToObject(ch, "text", r->content.data ? r->content.data : "");
        cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", r->finish_reason);
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddItemToObject(o, "usage", usage_json(r));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (text) srv_buf_puts(&r->out, text);
    else r->out.oom = true;
    free(text);
}

void srv_emit_end(srv_request *r, const okv_gen_stats *st, const char *error) {
    if (r->done) return;
    srv_think_flush(&r->splitter, on_part, r);
    r->finish_reason = finish_reason(st);
    r->completion_tokens = st ? st->generated_tokens : 0;
    if (error) snprintf(r->error, sizeof r->error, "%s", error);
    if (r->stream) {
        if (error) {
            char *e = srv_error_json(error, "server_error", NULL);
            srv_buf_puts(&r->out, "data: ");
            srv_buf_puts(&r->out, e ? e : "{}");
            srv_buf_puts(&r->out, "\n\n");
            free(e);
        } else put_chunk(r, SRV_CONTENT, NULL, 0, r->finish_reason);
        if (r->include_usage) {
            cJSON *o = envelope(r, true);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(r));
            put_event(r, o);
        }
        srv_buf_puts(&r->out, "data: [DONE]\n\n");
    } else if (!error) put_body(r);
    r->done = true;
}
