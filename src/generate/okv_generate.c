/* okv_generate.c — prompt building and the generation loop (see
 * offkv_gen.h). This layer only combines public APIs: runner steps,
 * tokenizer encode/stream, chat rendering, sampler and stopper. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "offkv_gen.h"
#include "okv_common.h"

/* ---- prompt -------------------------------------------------------------------- */

static char *messages_json(const char *system, const char *user) {
    cJSON *arr = cJSON_CreateArray();
    if (system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", system);
        cJSON_AddItemToArray(arr, m);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", user ? user : "");
    cJSON_AddItemToArray(arr, m);
    char *s = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    return s;
}

/* Renders the conversation with the model's template; *out NULL when there
 * is no template (and mode allows falling back). */
static okv_status render_chat(const okv_gen_prompt_args *a, char **out, okv_error *err) {
    *out = NULL;
    okv_chat_config cfg = {0};
    if (a->tokenizer_config_json) {
        okv_status st = okv_chat_config_parse(a->tokenizer_config_json, &cfg, err);
        if (st) return okv_fail_prefix(err, "tokenizer_config.json");
    }
    const char *src = a->template_override ? a->template_override : cfg.chat_template;
    if (!src) {
        okv_chat_config_free(&cfg);
        if (a->mode == OKV_CHAT_TEMPLATE)
            return okv_fail(err, OKV_ERR_NOT_FOUND, "the program has no chat template (use --chat none)");
        return OKV_OK;
    }
    okv_chat_template *tmpl = NULL;
    okv_status st = okv_chat_template_parse(src, &tmpl, err);
    char *msgs = a->messages_json ? okv_strdup(a->messages_json) : messages_json(a->system, a->user);
    if (!st) {
        okv_chat_args args = {.messages_json = msgs, .add_generation_prompt = true, .extra_vars_json = a->extra_vars_json,
                              .bos_token = cfg.bos_token, .eos_token = cfg.eos_token, .unk_token = cfg.unk_token,
                              .pad_token = cfg.pad_token};
        st = okv_chat_render(tmpl, &args, out, NULL, err);
    }
    if (st) okv_fail_prefix(err, "%s", a->template_override ? "chat_template.jinja" : "tokenizer_config.json");
    free(msgs);
    okv_chat_template_free(tmpl);
    okv_chat_config_free(&cfg);
    return st;
}

okv_status okv_gen_prompt(const okv_tok *tok, const okv_gen_prompt_args *a, int32_t **ids, size_t *n,
                          bool *used_template, okv_error *err) {
    char *rendered = NULL;
    if (a->mode != OKV_CHAT_NONE) {
        okv_status st = render_chat(a, &rendered, err);
        if (st) return st;
    }
    okv_status st;
    if (rendered) {
        st = okv_tok_encode(tok, rendered, strlen(rendered), false, ids, n, err);
    } else {
        char *text = NULL;
        if (a->system) {   /* raw mode: the system text simply precedes the prompt */
            size_t ls = strlen(a->system), lu = strlen(a->user ? a->user : "");
            text = malloc(ls + lu + 2);
            if (!text) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
            snprintf(text, ls + lu + 2, "%s\n%s", a->system, a->user ? a->user : "");
        }
        const char *src = text ? text : (a->user ? a->user : "");
        st = okv_tok_encode(tok, src, strlen(src), true, ids, n, err);
        free(text);
    }
    if (used_template) *used_template = rendered != NULL;
    free(rendered);
    if (!st && a->bos_id >= 0 && *n >= 2 && (*ids)[0] == a->bos_id && (*ids)[1] == a->bos_id) {
        memmove(*ids, *ids + 1, (*n - 1) * sizeof **ids);
        (*n)--;
    }
    return st;
}

/* ---- generation ------------------------------------------------------------------ */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct gen_state {
    const okv_gen_options *o;
    okv_tok_stream *stream;
    okv_stopper *stopper;
    okv_sampler *sampler;
    float *logits;
} gen_state;

static void emit(const gen_state *g, const char *text, size_t len) {
    if (len && g->o->on_text) g->o->on_text(g->o->ctx, text, len);
}

static bool is_eos(const okv_gen_options *o, int32_t id) {
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos_ids[i] == id) return true;
    return false;
}

/* Prefill in chunks; only the last chunk computes logits (its last row). */
static okv_status prefill(okv_runner *r, const int32_t *prompt, size_t n, int start, int chunk, float *logits, okv_error *err) {
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)chunk);
    if (!pos) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = OKV_OK;
    for (size_t t = 0; t < n && !st; t += (size_t)chunk) {
        int T = n - t < (size_t)chunk ? (int)(n - t) : chunk;
        for (int k = 0; k < T; k++) pos[k] = start + (int)t + k;
        bool last = t + (size_t)T == n;
        st = okv_runner_step(r, prompt + t, pos, T, last ? OKV_LOGITS_LAST : OKV_LOGITS_NONE, logits, err);
    }
    free(pos);
    return st;
}

/* Feeds a token's text through the stream and stopper; true if a stop string completed. */
static okv_status push_text(gen_state *g, int32_t id, bool *stopped, okv_error *err) {
    const char *piece, *out;
    size_t len, out_len;
    okv_status st = okv_tok_stream_push(g->stream, id, &piece, &len, err);
    if (!st) st = okv_stopper_push(g->stopper, piece, len, &out, &out_len, stopped, err);
    if (!st) emit(g, out, out_len);
    return st;
}

static void finish_text(gen_state *g, bool stopped) {
    const char *piece, *out;
    size_t len, out_len;
    okv_error err;
    if (!stopped && !okv_tok_stream_flush(g->stream, &piece, &len, &err)) {
        bool s = false;
        if (!okv_stopper_push(g->stopper, piece, len, &out, &out_len, &s, &err)) emit(g, out, out_len);
        if (s) return;
    }
    if (!stopped) {
        okv_stopper_flush(g->stopper, &out, &out_len);
        emit(g, out, out_len);
    }
}

static okv_status decode_loop(gen_state *g, okv_runner *r, int pos, int32_t *out_ids, okv_gen_stats *stats, okv_error *err) {
    const okv_gen_options *o = g->o;
    okv_status st = OKV_OK;
    bool stopped = false;
    stats->stop = OKV_STOP_MAX_TOKENS;
    for (int k = 0; k < o->max_new_tokens && !st; k++) {
        int32_t id = okv_sampler_sample(g->sampler, g->logits);
        if (id < 0) return okv_fail(err, OKV_ERR_STATE, "the model produced no finite logit (NaN or -inf everywhere)");
        if (is_eos(o, id)) { stats->stop = OKV_STOP_EOS; break; }
        if (out_ids) out_ids[k] = id;
        stats->generated_tokens++;
        st = okv_sampler_accept(g->sampler, id, err);
        if (!st) st = push_text(g, id, &stopped, err);
        if (st || stopped) { if (stopped) stats->stop = OKV_STOP_STRING; break; }
        if (k + 1 == o->max_new_tokens) break;
        if (pos >= o->context_limit) { stats->stop = OKV_STOP_CONTEXT; break; }
        st = okv_runner_step(r, &id, &pos, 1, OKV_LOGITS_LAST, g->logits, err);
        pos++;
    }
    if (!st) finish_text(g, stopped);
    return st;
}

okv_status okv_gen_check_tokenizer(const okv_program *p, const okv_tok *tok, okv_error *err) {
    okv_program_info info;
    okv_program_get_info(p, &info);
    size_t tv = okv_tok_vocab_size(tok);
    if (tv > (size_t)info.vocab_size)
        return okv_fail(err, OKV_ERR_INVALID,
                        "the tokenizer has ids up to %zu but the program's vocabulary has %d entries "
                        "(a tokenizer.json of another model?)", tv - 1, info.vocab_size);
    return OKV_OK;
}

okv_status okv_generate(okv_runner *r, const okv_tok *tok, const int32_t *prompt, size_t n, int start_pos,
                        const okv_gen_options *o, int32_t *out_ids, okv_gen_stats *stats, okv_error *err) {
    okv_program_info info;
    okv_program_get_info(okv_runner_program(r), &info);
    memset(stats, 0, sizeof *stats);
    stats->prompt_tokens = (int64_t)n;
    if (n == 0) return okv_fail(err, OKV_ERR_INVALID, "the prompt is empty");
    okv_status cst = okv_gen_check_tokenizer(okv_runner_program(r), tok, err);
    if (cst) return cst;
    if (start_pos + (int64_t)n > o->context_limit) {
        if (start_pos > 0)
            return okv_fail(err, OKV_ERR_CAPACITY,
                            "the prompt (%lld tokens: %d already cached + %zu new) does not fit the context (%d positions)",
                            (long long)start_pos + (long long)n, start_pos, n, o->context_limit);
        return okv_fail(err, OKV_ERR_CAPACITY, "the prompt (%zu tokens) does not fit the context (%d positions)", n, o->context_limit);
    }
    gen_state g = {.o = o};
    g.logits = malloc(sizeof(float) * (size_t)info.vocab_size);
    okv_status st = g.logits ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    if (!st) st = okv_tok_stream_create(tok, false, &g.stream, err);
    if (!st) st = okv_stopper_create(o->stops, o->n_stops, &g.stopper, err);
    if (!st) st = okv_sampler_create(info.vocab_size, &o->sampling, &g.sampler, err);
    for (size_t i = 0; !st && i < n; i++) st = okv_sampler_accept(g.sampler, prompt[i], err);
    double t0 = now_seconds();
    if (!st) st = prefill(r, prompt, n, start_pos, info.prefill_chunk_size, g.logits, err);
    double t1 = now_seconds();
    if (!st) st = decode_loop(&g, r, start_pos + (int)n, out_ids, stats, err);
    stats->prefill_seconds = t1 - t0;
    stats->decode_seconds = now_seconds() - t1;
    okv_sampler_free(g.sampler);
    okv_stopper_free(g.stopper);
    okv_tok_stream_free(g.stream);
    free(g.logits);
    return st;
}
