/* okv_generate.c — prompt building and the generation loop (see
 * offkv_gen.h). This layer only combines public APIs: runner steps,
 * tokenizer encode/stream, chat rendering, sampler and stopper.
 *
 * Generation is a step machine (okv_gen_seq: one prefill chunk or one
 * decoded token per call) so a scheduler can interleave many sequences;
 * okv_generate is that machine run to the end. */
#include <math.h>
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
            return okv_fail(err, OKV_ERR_NOT_FOUND, "the program has no chat template (the prompt can be given without one)");
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

/* One sequence being generated: the prompt still to prefill (prompt[done..n)),
 * then one sampled token per step. The logits row always holds the
 * next-token distribution after the last token fed. */
struct okv_gen_seq {
    okv_gen_options o;           /* copy; o.stops/eos_ids still borrowed */
    okv_runner *r;
    const okv_tok *tok;          /* NULL: ids only (no text, no stop strings) */
    int32_t *prompt;
    int32_t *positions;          /* [chunk] scratch for prefill steps */
    size_t n_prompt, prefilled;
    int start_pos, pos, chunk, vocab;
    okv_tok_stream *stream;
    okv_stopper *stopper;
    okv_sampler *sampler;
    float *logits;
    okv_grammar_match *match;    /* o.grammar's state; NULL when unconstrained */
    float *masked;               /* [vocab] the row with disallowed tokens at -inf */
    uint32_t *allowed;           /* [(vocab + 31) / 32] the grammar's token mask */
    int32_t *gen;                /* generated ids (EOS not included) */
    size_t n_gen, cap_gen;
    bool done;
    bool fed;                    /* the caller runs the steps (okv_gen_seq_fed) */
    bool has_next;               /* fed mode: gen's last id is sampled but not yet fed */
    okv_gen_stats stats;
};

static void emit(const okv_gen_seq *g, const char *text, size_t len) {
    if (len && g->o.on_text) g->o.on_text(g->o.ctx, text, len);
}

static bool is_eos(const okv_gen_options *o, int32_t id) {
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos_ids[i] == id) return true;
    return false;
}

/* Feeds a token's text through the stream and stopper; *stopped when a stop string completed. */
static okv_status push_text(okv_gen_seq *g, int32_t id, bool *stopped, okv_error *err) {
    if (!g->tok) return OKV_OK;
    const char *piece, *out;
    size_t len, out_len;
    okv_status st = okv_tok_stream_push(g->stream, id, &piece, &len, err);
    if (!st) st = okv_stopper_push(g->stopper, piece, len, &out, &out_len, stopped, err);
    if (!st) emit(g, out, out_len);
    return st;
}

/* Releases held text at the end (nothing after a stop string). */
static void finish_text(okv_gen_seq *g) {
    if (!g->tok || g->stats.stop == OKV_STOP_STRING) return;
    const char *piece, *out;
    size_t len, out_len;
    okv_error err;
    if (!okv_tok_stream_flush(g->stream, &piece, &len, &err)) {
        bool s = false;
        if (!okv_stopper_push(g->stopper, piece, len, &out, &out_len, &s, &err)) emit(g, out, out_len);
        if (s) return;
    }
    okv_stopper_flush(g->stopper, &out, &out_len);
    emit(g, out, out_len);
}

static void finish(okv_gen_seq *g, okv_stop_reason why) {
    g->stats.stop = why;
    g->done = true;
    finish_text(g);
}

static okv_status record_id(okv_gen_seq *g, int32_t id, okv_error *err) {
    int32_t *p = okv_grow(g->gen, &g->cap_gen, g->n_gen + 1, sizeof *p);
    if (!p) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    g->gen = p;
    g->gen[g->n_gen++] = id;
    g->stats.generated_tokens++;
    return OKV_OK;
}

/* One prefill chunk; only the last chunk computes logits (its last row). */
static okv_status prefill_chunk(okv_gen_seq *g, okv_error *err) {
    size_t left = g->n_prompt - g->prefilled;
    int T = left < (size_t)g->chunk ? (int)left : g->chunk;
    int32_t *pos = g->positions;
    for (int k = 0; k < T; k++) pos[k] = g->pos + k;
    bool last = (size_t)T == left;
    double t0 = now_seconds();
    okv_status st = okv_runner_step(g->r, g->prompt + g->prefilled, pos, T, last ? OKV_LOGITS_LAST : OKV_LOGITS_NONE,
                                    g->logits, err);
    g->stats.prefill_seconds += now_seconds() - t0;
    if (st) return st;
    g->prefilled += (size_t)T;
    g->pos += T;
    if (last && g->o.max_new_tokens <= 0) finish(g, OKV_STOP_MAX_TOKENS);
    return OKV_OK;
}

/* The row with every token the grammar does not allow at -inf; EOS stays
 * only where the value is complete. */
static okv_status constrain_row(okv_gen_seq *g, const float *row, const float **out, okv_error *err) {
    okv_status st = okv_grammar_mask(g->match, g->o.grammar_vocab, g->allowed, err);
    if (st) return st;
    int32_t nv = okv_grammar_vocab_size(g->o.grammar_vocab);
    for (int32_t i = 0; i < g->vocab; i++)
        g->masked[i] = i < nv && (g->allowed[i >> 5] >> (i & 31) & 1) ? row[i] : -INFINITY;
    if (okv_grammar_match_accepting(g->match))
        for (int k = 0; k < g->o.n_eos; k++)
            if (g->o.eos_ids[k] >= 0 && g->o.eos_ids[k] < g->vocab) g->masked[g->o.eos_ids[k]] = row[g->o.eos_ids[k]];
    *out = g->masked;
    return OKV_OK;
}

/* Feeds a sampled (non-EOS) token to the grammar; *closed when the value is complete and nothing can follow. */
static okv_status advance_grammar(okv_gen_seq *g, int32_t id, bool *closed, okv_error *err) {
    *closed = false;
    if (!g->match) return OKV_OK;
    if (!okv_grammar_match_feed_token(g->match, g->o.grammar_vocab, id))
        return okv_fail(err, OKV_ERR_STATE, "constrained sampling chose token %d, which the grammar does not allow", (int)id);
    *closed = okv_grammar_match_finished(g->match);
    return OKV_OK;
}

/* Samples the next token from row and streams it; *feed when generation
 * goes on (the token must be fed back). */
static okv_status sample_token(okv_gen_seq *g, const float *row, bool *feed, okv_error *err) {
    okv_status st = OKV_OK;
    *feed = false;
    if (g->match && (st = constrain_row(g, row, &row, err))) return st;
    int32_t id = okv_sampler_sample(g->sampler, row);
    if (id < 0 && g->match && okv_grammar_match_accepting(g->match)) { finish(g, OKV_STOP_EOS); return OKV_OK; }   /* complete, no EOS id */
    if (id < 0 && g->match) return okv_fail(err, OKV_ERR_STATE, "the grammar allows no token here (the vocabulary cannot continue the value)");
    if (id < 0) return okv_fail(err, OKV_ERR_STATE, "the model produced no finite logit (NaN or -inf everywhere)");
    if (g->o.on_token) g->o.on_token(g->o.ctx, id);
    bool stopped = false, closed = false;
    if (is_eos(&g->o, id)) { finish(g, OKV_STOP_EOS); return OKV_OK; }
    st = advance_grammar(g, id, &closed, err);
    if (!st) st = record_id(g, id, err);
    if (!st) st = okv_sampler_accept_generated(g->sampler, id, err);
    if (!st) st = push_text(g, id, &stopped, err);
    if (st) ;
    else if (stopped) finish(g, OKV_STOP_STRING);
    else if (closed) finish(g, OKV_STOP_EOS);
    else if (g->n_gen >= (size_t)g->o.max_new_tokens) finish(g, OKV_STOP_MAX_TOKENS);
    else if (g->pos >= g->o.context_limit) finish(g, OKV_STOP_CONTEXT);
    else *feed = true;
    return st;
}

/* Samples the next token, streams it and, unless generation ends here, feeds it back. */
static okv_status decode_token(okv_gen_seq *g, okv_error *err) {
    double t0 = now_seconds();
    bool feed = false;
    okv_status st = sample_token(g, g->logits, &feed, err);
    if (!st && feed) {
        int32_t id = g->gen[g->n_gen - 1];
        st = okv_runner_step(g->r, &id, &g->pos, 1, OKV_LOGITS_LAST, g->logits, err);
        if (!st) g->pos++;
    }
    g->stats.decode_seconds += now_seconds() - t0;
    return st;
}

okv_status okv_gen_grammar_vocab(const okv_tok *tok, int32_t n_vocab, okv_grammar_vocab **out, okv_error *err) {
    *out = NULL;
    if (n_vocab < 0) return okv_fail(err, OKV_ERR_INVALID, "okv_gen_grammar_vocab: negative vocabulary size");
    size_t nt = okv_tok_vocab_size(tok), n = (size_t)n_vocab;
    char **bytes = calloc(n + 1, sizeof *bytes);
    size_t *lens = calloc(n + 1, sizeof *lens);
    okv_status st = bytes && lens ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < n && i < nt; i++)
        if (!okv_tok_is_special(tok, (int32_t)i) && okv_tok_id_to_token(tok, (int32_t)i))
            st = okv_tok_token_bytes(tok, (int32_t)i, &bytes[i], &lens[i], err);
    if (!st) st = okv_grammar_vocab_create(n_vocab, (const char *const *)bytes, lens, out, err);
    for (size_t i = 0; bytes && i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
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


/* The grammar's per-sequence state and the masked-row scratch. */
static okv_status grammar_create(okv_gen_seq *g, okv_error *err) {
    if (!g->o.grammar_vocab) return okv_fail(err, OKV_ERR_INVALID, "a grammar without its token vocabulary (grammar_vocab)");
    okv_status st = okv_grammar_match_create(g->o.grammar, &g->match, err);
    if (st) return st;
    int32_t nv = okv_grammar_vocab_size(g->o.grammar_vocab);
    g->masked = malloc(sizeof(float) * (size_t)g->vocab);
    g->allowed = malloc(sizeof(uint32_t) * (((size_t)nv + 31) / 32 + 1));
    return g->masked && g->allowed ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
}

static okv_status seq_create(const okv_program *p, okv_runner *r, const okv_tok *tok, const int32_t *prompt, size_t n,
                             int start_pos, const okv_gen_options *o, okv_gen_seq **out, okv_error *err) {
    *out = NULL;
    okv_program_info info;
    okv_program_get_info(p, &info);
    if (n == 0) return okv_fail(err, OKV_ERR_INVALID, "the prompt is empty");
    okv_status st = tok ? okv_gen_check_tokenizer(p, tok, err) : OKV_OK;
    if (st) return st;
    if (start_pos < 0 || start_pos + (int64_t)n > o->context_limit) {
        if (start_pos > 0)
            return okv_fail(err, OKV_ERR_CAPACITY,
                            "the prompt (%lld tokens: %d already cached + %zu new) does not fit the context (%d positions)",
                            (long long)start_pos + (long long)n, start_pos, n, o->context_limit);
        return okv_fail(err, OKV_ERR_CAPACITY, "the prompt (%zu tokens) does not fit the context (%d positions)", n, o->context_limit);
    }
    okv_gen_seq *g = calloc(1, sizeof *g);
    if (!g) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    g->o = *o;
    g->r = r;
    g->fed = r == NULL;
    g->tok = tok;
    g->n_prompt = n;
    g->start_pos = g->pos = start_pos;
    g->vocab = info.vocab_size;
    g->chunk = o->prefill_chunk > 0 && o->prefill_chunk < info.prefill_chunk_size ? o->prefill_chunk : info.prefill_chunk_size;
    g->stats.prompt_tokens = (int64_t)n;
    g->prompt = malloc(n * sizeof *g->prompt);
    g->positions = malloc(sizeof(int32_t) * (size_t)g->chunk);
    g->logits = malloc(sizeof(float) * (size_t)info.vocab_size);
    st = g->prompt && g->positions && g->logits ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    if (!st) memcpy(g->prompt, prompt, n * sizeof *prompt);
    if (!st && tok) st = okv_tok_stream_create(tok, false, &g->stream, err);
    if (!st && tok) st = okv_stopper_create(o->stops, o->n_stops, &g->stopper, err);
    if (!st) st = okv_sampler_create(info.vocab_size, &o->sampling, &g->sampler, err);
    if (!st && o->grammar) st = grammar_create(g, err);
    for (size_t i = 0; !st && i < n; i++) st = okv_sampler_accept(g->sampler, prompt[i], err);
    if (st) { okv_gen_seq_free(g); return st; }
    *out = g;
    return OKV_OK;
}

okv_status okv_gen_seq_create(okv_runner *r, const okv_tok *tok, const int32_t *prompt, size_t n, int start_pos,
                              const okv_gen_options *o, okv_gen_seq **out, okv_error *err) {
    return seq_create(okv_runner_program(r), r, tok, prompt, n, start_pos, o, out, err);
}

okv_status okv_gen_seq_create_fed(const okv_program *p, const okv_tok *tok, const int32_t *prompt, size_t n,
                                  int start_pos, const okv_gen_options *o, okv_gen_seq **out, okv_error *err) {
    return seq_create(p, NULL, tok, prompt, n, start_pos, o, out, err);
}

void okv_gen_seq_free(okv_gen_seq *g) {
    if (!g) return;
    okv_sampler_free(g->sampler);
    okv_grammar_match_free(g->match);
    free(g->masked);
    free(g->allowed);
    okv_stopper_free(g->stopper);
    okv_tok_stream_free(g->stream);
    free(g->logits);
    free(g->prompt);
    free(g->positions);
    free(g->gen);
    free(g);
}

okv_status okv_gen_seq_step(okv_gen_seq *g, bool *done, okv_error *err) {
    okv_status st = OKV_OK;
    if (g->fed) return okv_fail(err, OKV_ERR_STATE, "okv_gen_seq_step on a sequence the caller steps (okv_gen_seq_fed)");
    if (!g->done) st = g->prefilled < g->n_prompt ? prefill_chunk(g, err) : decode_token(g, err);
    if (st) g->done = true;
    *done = g->done;
    return st;
}

bool okv_gen_seq_prefilling(const okv_gen_seq *g) { return g->prefilled < g->n_prompt; }

size_t okv_gen_seq_pending(const okv_gen_seq *g, const int32_t **ids, int *pos) {
    *pos = g->pos;
    *ids = NULL;
    if (g->done) return 0;
    if (g->prefilled < g->n_prompt) { *ids = g->prompt + g->prefilled; return g->n_prompt - g->prefilled; }
    if (g->has_next) { *ids = g->gen + g->n_gen - 1; return 1; }
    return 0;
}

okv_status okv_gen_seq_fed(okv_gen_seq *g, size_t n, const float *logits, double seconds, bool *done, okv_error *err) {
    okv_status st = OKV_OK;
    const int32_t *ids;
    int pos;
    size_t pending = okv_gen_seq_pending(g, &ids, &pos);
    if (!g->fed) st = okv_fail(err, OKV_ERR_STATE, "okv_gen_seq_fed on a sequence that steps its own runner");
    else if (g->done) st = okv_fail(err, OKV_ERR_STATE, "okv_gen_seq_fed after the sequence ended");
    else if (n == 0 || n > pending) st = okv_fail(err, OKV_ERR_INVALID, "okv_gen_seq_fed: %zu tokens fed, %zu pending", n, pending);
    else if (n == pending && !logits) st = okv_fail(err, OKV_ERR_INVALID, "okv_gen_seq_fed: the last pending token needs its logits row");
    if (st) { *done = g->done; return st; }
    bool prompt = g->prefilled < g->n_prompt;
    g->pos += (int)n;
    if (prompt) {
        g->prefilled += n;
        g->stats.prefill_seconds += seconds;
    } else {
        g->has_next = false;
        g->stats.decode_seconds += seconds;
    }
    if (n == pending) {
        if (prompt && g->o.max_new_tokens <= 0) finish(g, OKV_STOP_MAX_TOKENS);
        else {
            bool feed = false;
            st = sample_token(g, logits, &feed, err);
            g->has_next = !st && feed;
        }
    }
    if (st) g->done = true;
    *done = g->done;
    return st;
}

const okv_gen_stats *okv_gen_seq_stats(const okv_gen_seq *g) { return &g->stats; }

const int32_t *okv_gen_seq_ids(const okv_gen_seq *g, size_t *n) {
    *n = g->n_gen;
    return g->gen;
}

okv_status okv_generate(okv_runner *r, const okv_tok *tok, const int32_t *prompt, size_t n, int start_pos,
                        const okv_gen_options *o, int32_t *out_ids, okv_gen_stats *stats, okv_error *err) {
    memset(stats, 0, sizeof *stats);
    stats->prompt_tokens = (int64_t)n;
    okv_gen_seq *g = NULL;
    okv_status st = okv_gen_seq_create(r, tok, prompt, n, start_pos, o, &g, err);
    bool done = false;
    while (!st && !done) st = okv_gen_seq_step(g, &done, err);
    if (g) {
        *stats = g->stats;
        if (out_ids && g->n_gen) memcpy(out_ids, g->gen, g->n_gen * sizeof *out_ids);
    }
    okv_gen_seq_free(g);
    return st;
}
