/* okv_chat_session.c — multi-turn chat over one runtime-owned cache.
 *
 * This is where an off-graph cache pays off: the session remembers which
 * token ids its cache holds; each turn re-renders the whole conversation
 * with the model's template, rewinds the cache to the longest common prefix
 * (templates may re-tokenize the previous reply differently, so the prefix
 * is computed, not assumed) and prefills only the new tail. A ring cache
 * that cannot serve the rewind point is cleared and the prompt re-prefilled.
 *
 * Save/load: the cache's sequence goes to a state file (okv_seq_save) with
 * the session's own state as the file's extra blob, a JSON object
 * {"offkv_chat_session": 1, "messages": [...], "cached": [ids]}; a load
 * restores both, so the next turn's re-render finds its longest cached
 * prefix exactly as in the session that saved it and prefills only the
 * new tail. */
#include <stdlib.h>
#include <string.h>

#include "offkv_gen.h"
#include "okv_common.h"

struct okv_chat_session {
    okv_runner *runner;
    char *key;
    const okv_tok *tok;
    okv_gen_prompt_args base;
    cJSON *messages;
    int32_t *cached;      /* ids the cache holds, in position order */
    size_t n_cached, cap_cached;
    okv_buf reply;        /* the reply text streamed in the current turn */
    const okv_gen_options *user_opts;
};

okv_status okv_chat_session_create(okv_runner *r, const okv_tok *tok, const okv_gen_prompt_args *base,
                                   okv_chat_session **out, okv_error *err) {
    *out = NULL;
    okv_status cst = okv_gen_check_tokenizer(okv_runner_program(r), tok, err);
    if (cst) return cst;
    okv_chat_session *s = calloc(1, sizeof *s);
    if (!s) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    s->runner = r;
    s->key = okv_strdup(okv_runner_cache_key(r));
    s->tok = tok;
    s->base = *base;
    s->messages = cJSON_CreateArray();
    if (!s->key || !s->messages) { okv_chat_session_free(s); return okv_fail(err, OKV_ERR_NOMEM, "out of memory"); }
    if (base->system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", base->system);
        cJSON_AddItemToArray(s->messages, m);
    }
    *out = s;
    return OKV_OK;
}

void okv_chat_session_free(okv_chat_session *s) {
    if (!s) return;
    cJSON_Delete(s->messages);
    free(s->key);
    free(s->cached);
    okv_buf_free(&s->reply);
    free(s);
}

static void add_message(okv_chat_session *s, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(s->messages, m);
}

/* Streams text to the caller and keeps a copy as the reply. */
static void capture_text(void *ctx, const char *text, size_t len) {
    okv_chat_session *s = ctx;
    okv_buf_put(&s->reply, text, len);
    if (s->user_opts->on_text) s->user_opts->on_text(s->user_opts->ctx, text, len);
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* Rewinds the cache to the longest prefix of ids it holds (leaving at least
 * one token to prefill, which yields the next-token logits). */
static size_t reuse_prefix(okv_chat_session *s, const int32_t *ids, size_t n) {
    size_t keep = common_prefix(s->cached, s->n_cached, ids, n);
    if (keep >= n) keep = n - 1;
    okv_error err;
    if (okv_cache_rewind(s->key, (int)keep, &err) != OKV_OK) {
        okv_cache_clear(s->key, &err);
        keep = 0;
    }
    return keep;
}

/* What the cache holds after the turn: the prompt, then the generated ids
 * that were fed back (all but the last sampled one, as a rule). */
static okv_status remember_cached(okv_chat_session *s, const int32_t *prompt, size_t n, const int32_t *gen, size_t n_gen,
                                  okv_error *err) {
    int len = 0;
    okv_status st = okv_cache_length(s->key, &len, err);
    if (st) return st;
    size_t want = (size_t)len;
    int32_t *p = okv_grow(s->cached, &s->cap_cached, want, sizeof *p);
    if (!p) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    s->cached = p;
    for (size_t i = 0; i < want; i++) s->cached[i] = i < n ? prompt[i] : (i - n < n_gen ? gen[i - n] : -1);
    s->n_cached = want;
    return OKV_OK;
}

/* Renders the conversation so far into prompt ids (*ids NULL on failure). */
static okv_status render_ids(okv_chat_session *s, const char *user, int32_t **ids, size_t *n, okv_error *err) {
    char *msgs = cJSON_PrintUnformatted(s->messages);
    okv_gen_prompt_args a = s->base;
    a.mode = OKV_CHAT_TEMPLATE;
    a.messages_json = msgs;
    a.user = user;
    *ids = NULL;
    *n = 0;
    okv_status st = msgs ? okv_gen_prompt(s->tok, &a, ids, n, NULL, err) : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    free(msgs);
    if (!st && *n == 0) st = okv_fail(err, OKV_ERR_INVALID, "the rendered prompt is empty");
    if (st) { free(*ids); *ids = NULL; }
    return st;
}

static bool is_user(const cJSON *m) {
    const char *role = okv_json_str(m, "role");
    return role && !strcmp(role, "user");
}

/* Index of the oldest message that is not the system prompt, or -1 when only
 * the system prompt and the current user message are left. */
static int oldest_turn(const okv_chat_session *s) {
    int first = s->base.system ? 1 : 0;
    return cJSON_GetArraySize(s->messages) - first > 1 ? first : -1;
}

/* Renders the conversation and makes it fit the context: drops the oldest
 * turns when asked to, else refuses with the real numbers. The cache is not
 * touched here, so a refused turn leaves the session as it was. */
static okv_status fitting_prompt(okv_chat_session *s, const char *user, const okv_gen_options *o, int32_t **ids,
                                 size_t *n, okv_error *err) {
    for (;;) {
        okv_status st = render_ids(s, user, ids, n, err);
        if (st) return st;
        if (*n <= (size_t)o->context_limit) return OKV_OK;
        int drop = o->drop_oldest_turns ? oldest_turn(s) : -1;
        if (drop < 0) break;
        free(*ids);
        *ids = NULL;
        /* a whole turn: the user message and what follows it up to the next user message */
        do cJSON_DeleteItemFromArray(s->messages, drop);
        while (cJSON_GetArraySize(s->messages) - drop > 1 && !is_user(cJSON_GetArrayItem(s->messages, drop)));
    }
    size_t earlier = common_prefix(s->cached, s->n_cached, *ids, *n);
    okv_fail(err, OKV_ERR_CAPACITY,
             "the conversation (%zu tokens: %zu of earlier turns + %zu for this one) does not fit the context "
             "(%d positions); turn refused (/reset starts over%s)", *n, earlier, *n - earlier, o->context_limit,
             o->drop_oldest_turns ? "" : ", or let the session drop the oldest turns automatically");
    free(*ids);
    *ids = NULL;
    return OKV_ERR_CAPACITY;
}

okv_status okv_chat_session_turn(okv_chat_session *s, const char *user, const okv_gen_options *o, int32_t *out_ids,
                                 okv_gen_stats *stats, size_t *reused, okv_error *err) {
    memset(stats, 0, sizeof *stats);
    if (reused) *reused = 0;
    add_message(s, "user", user);
    int32_t *ids = NULL, *gen = NULL;
    size_t n = 0;
    okv_status st = fitting_prompt(s, user, o, &ids, &n, err);
    if (!st) {
        gen = out_ids ? out_ids : malloc(sizeof(int32_t) * (size_t)(o->max_new_tokens > 0 ? o->max_new_tokens : 1));
        if (!gen) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    }
    if (st) {   /* the turn did not happen: forget the user message */
        cJSON_DeleteItemFromArray(s->messages, cJSON_GetArraySize(s->messages) - 1);
        free(ids);
        return st;
    }
    size_t keep = reuse_prefix(s, ids, n);
    if (reused) *reused = keep;
    okv_gen_options go = *o;
    go.on_text = capture_text;
    go.ctx = s;
    s->user_opts = o;
    okv_buf_reset(&s->reply);
    st = okv_generate(s->runner, s->tok, ids + keep, n - keep, (int)keep, &go, gen, stats, err);
    if (!st) st = remember_cached(s, ids, n, gen, (size_t)stats->generated_tokens, err);
    if (!st && s->reply.oom) st = okv_fail(err, OKV_ERR_NOMEM, "chat session: out of memory keeping the reply");
    if (!st) add_message(s, "assistant", okv_buf_str(&s->reply));
    else {   /* unknown cache state and no reply: start the next turn from scratch, without this one */
        s->n_cached = 0;
        okv_error e2;
        okv_cache_clear(s->key, &e2);
        cJSON_DeleteItemFromArray(s->messages, cJSON_GetArraySize(s->messages) - 1);
    }
    if (gen != out_ids) free(gen);
    free(ids);
    return st;
}

/* ---- state on disk ------------------------------------------------------------ */

okv_status okv_chat_session_save(okv_chat_session *s, const char *path, okv_error *err) {
    cJSON *root = cJSON_CreateObject(), *ids = cJSON_CreateArray();
    cJSON *msgs = cJSON_Duplicate(s->messages, true);
    if (!root || !ids || !msgs) {
        cJSON_Delete(root);
        cJSON_Delete(ids);
        cJSON_Delete(msgs);
        return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    }
    cJSON_AddNumberToObject(root, "offkv_chat_session", 1);
    cJSON_AddItemToObject(root, "messages", msgs);
    for (size_t i = 0; i < s->n_cached; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(s->cached[i]));
    cJSON_AddItemToObject(root, "cached", ids);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = okv_seq_save(s->key, okv_runner_program(s->runner), -1, path, text, strlen(text), err);
    free(text);
    return st;
}

/* The session part of a state file: messages and the cached ids (each a
 * vocabulary id or -1), as many as the cache holds. */
static okv_status parse_session(const char *text, size_t len, int32_t length, int vocab, cJSON **msgs_out,
                                int32_t **ids_out, const char *path, okv_error *err) {
    cJSON *root = NULL;
    okv_status st = okv_json_parse(text, len, &root, path, err);
    if (st) return st;
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "cached");
    int64_t tag = 0;
    if (okv_json_req_int(root, "offkv_chat_session", &tag, path, err) || tag != 1 || !cJSON_IsArray(msgs) ||
        !cJSON_IsArray(ids))
        st = okv_fail(err, OKV_ERR_FORMAT, "%s: not a chat session state (offkv_chat_session 1, messages, cached)", path);
    int n = st ? 0 : cJSON_GetArraySize(ids);
    if (!st && n != length)
        st = okv_fail(err, OKV_ERR_FORMAT, "%s: cached lists %d ids, the cache holds %d positions", path, n, length);
    const cJSON *m;
    int k = 0;
    const cJSON *walk = st ? NULL : msgs;
    cJSON_ArrayForEach(m, walk) {
        const char *role = okv_json_str(m, "role"), *content = okv_json_str(m, "content");
        if (!role || !content) {
            st = okv_fail(err, OKV_ERR_FORMAT, "%s: messages[%d] needs string role and content", path, k);
            break;
        }
        k++;
    }
    int32_t *out = st ? NULL : malloc(((size_t)n + 1) * sizeof *out);
    if (!st && !out) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !st; i++) {
        int64_t v;
        if (!okv_json_item_int(cJSON_GetArrayItem(ids, i), -1, vocab - 1, &v))
            st = okv_fail(err, OKV_ERR_FORMAT, "%s: cached[%d] is not a token id in [-1, %d)", path, i, vocab);
        else out[i] = (int32_t)v;
    }
    if (!st) {
        *msgs_out = cJSON_DetachItemViaPointer(root, msgs);
        *ids_out = out;
        out = NULL;
    }
    free(out);
    cJSON_Delete(root);
    return st;
}

okv_status okv_chat_session_load(okv_chat_session *s, const char *path, okv_error *err) {
    void *extra = NULL;
    size_t extra_len = 0;
    const okv_program *p = okv_runner_program(s->runner);
    okv_status st = okv_seq_load(s->key, p, path, NULL, &extra, &extra_len, err);
    if (st) return st;
    okv_program_info info;
    okv_program_get_info(p, &info);
    int len = 0;
    cJSON *msgs = NULL;
    int32_t *ids = NULL;
    st = okv_cache_length(s->key, &len, err);
    if (!st && !extra) st = okv_fail(err, OKV_ERR_FORMAT, "%s: holds a cache but no chat session", path);
    if (!st) st = parse_session(extra, extra_len, len, info.vocab_size, &msgs, &ids, path, err);
    free(extra);
    if (st) {   /* the cache was replaced but the conversation is unusable: start over */
        okv_error e2;
        okv_cache_clear(s->key, &e2);
        s->n_cached = 0;
        return st;
    }
    cJSON_Delete(s->messages);
    s->messages = msgs;
    free(s->cached);
    s->cached = ids;
    s->n_cached = s->cap_cached = (size_t)len;
    return OKV_OK;
}
