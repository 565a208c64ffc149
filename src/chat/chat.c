/* chat.c — the chat layer's public API (offkv_chat.h): parse a template once,
 * render it per conversation, and pull the template and special tokens out
 * of tokenizer_config.json. The render context is built the way HF's
 * apply_chat_template builds it: messages, tools (none unless given),
 * documents (none), add_generation_prompt, the special tokens that are set,
 * then the caller's extra kwargs (which win on a name clash). */
#include "offkv_chat.h"

#include <stdlib.h>
#include <string.h>

#include "chat_jinja.h"
#include "okv_common.h"

struct okv_chat_template {
    jarena arena;
    jnodes body;
};

enum {
    PARSE_ARENA_LIMIT = 64 << 20,
    RENDER_ARENA_LIMIT = 256 << 20,
    DEFAULT_MAX_STEPS = 20 * 1000 * 1000 /* a 1000-message Gemma-4 chat takes ~0.5M */
};

/* The state a guarded parse or render changes. It lives in the caller's
 * frame, never in the frame that calls setjmp: C11 7.13.2.1 leaves a local
 * of the setjmp caller that changes before the longjmp indeterminate, so
 * the guarded functions below keep no local that changes after setjmp. */
typedef struct jguard {
    jfail f;
    okv_error local; /* the error sink when the caller passed none */
} jguard;

static void guard_init(jguard *g, okv_error *err) { g->f.err = err ? err : &g->local; }

/* Parses into t->body; false (error filled) on failure. */
static bool parse_guarded(jguard *g, okv_chat_template *t, const char *src) {
    if (setjmp(g->f.jb)) return false;
    t->body = jinja_parse(&t->arena, &g->f, src);
    return true;
}

okv_status okv_chat_template_parse(const char *src, okv_chat_template **out, okv_error *err) {
    *out = NULL;
    if (!src) return okv_fail(err, OKV_ERR_INVALID, "chat template: source is NULL");
    okv_chat_template *t = calloc(1, sizeof *t);
    if (!t) return okv_fail(err, OKV_ERR_NOMEM, "chat template: out of memory");
    ja_init(&t->arena, PARSE_ARENA_LIMIT);
    jguard g;
    guard_init(&g, err);
    if (!parse_guarded(&g, t, src)) {
        ja_free(&t->arena);
        free(t);
        return g.f.err->status;
    }
    *out = t;
    return OKV_OK;
}

void okv_chat_template_free(okv_chat_template *tmpl) {
    if (!tmpl) return;
    ja_free(&tmpl->arena);
    free(tmpl);
}

static void set_var(jarena *a, jfail *f, jdict *ctx, const char *name, jv v) {
    jdict_set(a, f, ctx, jv_cstr(a, f, name), v);
}

static jv parse_json_arg(jarena *a, jfail *f, const char *text, const char *what) {
    jv v;
    const char *why = NULL;
    if (!jv_from_json_text(a, f, text, &v, &why))
        jfail_at(f, OKV_ERR_INVALID, 0, 0, "%s: %s", what, why);
    return v;
}

/* The template's variables (HF's apply_chat_template context) in arena a. */
static jdict *render_context(jarena *a, jfail *f, const okv_chat_args *args) {
    jdict *ctx = jdict_new(a, f);
    jv messages = parse_json_arg(a, f, args->messages_json, "messages_json");
    if (messages.t != JV_LIST) jfail_at(f, OKV_ERR_INVALID, 0, 0, "messages_json must be a JSON array");
    set_var(a, f, ctx, "messages", messages);
    jv tools = jv_none();
    if (args->tools_json) {
        tools = parse_json_arg(a, f, args->tools_json, "tools_json");
        if (tools.t != JV_LIST && tools.t != JV_NONE) jfail_at(f, OKV_ERR_INVALID, 0, 0, "tools_json must be a JSON array or null");
    }
    set_var(a, f, ctx, "tools", tools);
    set_var(a, f, ctx, "documents", jv_none());
    set_var(a, f, ctx, "add_generation_prompt", jv_bool(args->add_generation_prompt));
    const char *names[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const char *vals[4] = {args->bos_token, args->eos_token, args->unk_token, args->pad_token};
    for (int i = 0; i < 4; i++) /* HF's special_tokens_map holds only the set ones */
        if (vals[i]) set_var(a, f, ctx, names[i], jv_cstr(a, f, vals[i]));
    if (args->extra_vars_json) {
        jv extra = parse_json_arg(a, f, args->extra_vars_json, "extra_vars_json");
        if (extra.t != JV_DICT) jfail_at(f, OKV_ERR_INVALID, 0, 0, "extra_vars_json must be a JSON object");
        for (size_t i = 0; i < extra.u.d->n; i++) jdict_set(a, f, ctx, extra.u.d->k[i], extra.u.d->v[i]);
    }
    return ctx;
}

typedef struct render_job {
    jguard g;
    jarena arena;
    const char *text; /* the rendered prompt, in arena */
    size_t len;
} render_job;

/* Renders into job (text in job->arena); false (error filled) on failure. */
static bool render_guarded(render_job *job, const okv_chat_template *tmpl, const okv_chat_args *args) {
    if (setjmp(job->g.f.jb)) return false;
    jdict *ctx = render_context(&job->arena, &job->g.f, args);
    int64_t max_steps = args->max_steps > 0 ? (int64_t)args->max_steps : DEFAULT_MAX_STEPS;
    job->text = jinja_render(&job->arena, &job->g.f, &tmpl->body, ctx, (int64_t)args->now_unix, max_steps, &job->len);
    return true;
}

okv_status okv_chat_render(const okv_chat_template *tmpl, const okv_chat_args *args,
                           char **out, size_t *len, okv_error *err) {
    *out = NULL;
    if (len) *len = 0;
    if (!tmpl || !args || !args->messages_json)
        return okv_fail(err, OKV_ERR_INVALID, "chat render: template, args and messages_json are required");
    render_job job;
    memset(&job, 0, sizeof job);
    guard_init(&job.g, err);
    ja_init(&job.arena, RENDER_ARENA_LIMIT);
    if (!render_guarded(&job, tmpl, args)) {
        ja_free(&job.arena);
        return job.g.f.err->status;
    }
    char *res = malloc(job.len + 1);
    if (!res) {
        ja_free(&job.arena);
        return okv_fail(err, OKV_ERR_NOMEM, "chat render: out of memory");
    }
    memcpy(res, job.text, job.len);
    res[job.len] = 0;
    ja_free(&job.arena);
    *out = res;
    if (len) *len = job.len;
    return OKV_OK;
}

/* A special token is a string or an AddedToken-like {"content": "..."}. */
static char *token_string(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return okv_strdup(v->valuestring);
    if (cJSON_IsObject(v)) {
        const char *s = okv_json_str(v, "content");
        if (s) return okv_strdup(s);
    }
    return NULL;
}

okv_status okv_chat_config_parse(const char *tokenizer_config_json, okv_chat_config *out, okv_error *err) {
    memset(out, 0, sizeof *out);
    if (!tokenizer_config_json) return okv_fail(err, OKV_ERR_INVALID, "tokenizer_config.json: text is NULL");
    cJSON *cfg;
    okv_status st = okv_json_parse(tokenizer_config_json, strlen(tokenizer_config_json), &cfg,
                                   "tokenizer_config.json", err);
    if (st) return st;
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return okv_fail(err, OKV_ERR_FORMAT, "tokenizer_config.json: top level is not an object");
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        out->chat_template = okv_strdup(ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const char *name = okv_json_str(e, "name"), *tpl = okv_json_str(e, "template");
            if (name && tpl && !strcmp(name, "default")) {
                out->chat_template = okv_strdup(tpl);
                break;
            }
        }
    } else if (ct && !cJSON_IsNull(ct)) {
        cJSON_Delete(cfg);
        return okv_fail(err, OKV_ERR_FORMAT, "tokenizer_config.json: field 'chat_template' must be a string or a list");
    }
    out->bos_token = token_string(cfg, "bos_token");
    out->eos_token = token_string(cfg, "eos_token");
    out->unk_token = token_string(cfg, "unk_token");
    out->pad_token = token_string(cfg, "pad_token");
    cJSON_Delete(cfg);
    return OKV_OK;
}

void okv_chat_config_free(okv_chat_config *cfg) {
    if (!cfg) return;
    char *owned[] = {cfg->chat_template, cfg->bos_token, cfg->eos_token, cfg->unk_token, cfg->pad_token};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
    memset(cfg, 0, sizeof *cfg);
}

okv_status okv_chat_template_from_config(const char *tokenizer_config_json, okv_chat_config *cfg,
                                         okv_chat_template **tmpl, okv_error *err) {
    *tmpl = NULL;
    okv_status st = okv_chat_config_parse(tokenizer_config_json, cfg, err);
    if (st) return st;
    if (!cfg->chat_template) {
        okv_chat_config_free(cfg);
        return okv_fail(err, OKV_ERR_NOT_FOUND,
                        "tokenizer_config.json: no usable 'chat_template' (missing, or a list with no entry named \"default\")");
    }
    st = okv_chat_template_parse(cfg->chat_template, tmpl, err);
    if (st) {
        okv_fail_prefix(err, "tokenizer_config.json chat_template");
        okv_chat_config_free(cfg);
    }
    return st;
}
