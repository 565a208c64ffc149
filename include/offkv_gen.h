/* offkv_gen.h — text generation: the glue between a program's runner, its
 * tokenizer, chat template and the sampler.
 *
 *   okv_gen_prompt   conversation (system + user text) -> prompt ids, through
 *                    the model's own chat template or raw (--chat none)
 *   okv_generate     prefill the prompt in chunks, then sample token by token,
 *                    streaming text (never a broken UTF-8 sequence, never a
 *                    stop string) to a callback until EOS, a stop string, the
 *                    token limit or a full context. */
#ifndef OFFKV_GEN_H
#define OFFKV_GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "offkv.h"
#include "offkv_chat.h"
#include "offkv_sample.h"
#include "offkv_tok.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum okv_chat_mode { OKV_CHAT_AUTO = 0, OKV_CHAT_NONE = 1, OKV_CHAT_TEMPLATE = 2 } okv_chat_mode;

typedef struct okv_gen_prompt_args {
    okv_chat_mode mode;          /* AUTO: template if there is one, else raw */
    const char *system;          /* may be NULL */
    const char *user;            /* the prompt text */
    const char *extra_vars_json; /* template kwargs object, e.g. {"enable_thinking": false} */
    const char *tokenizer_config_json; /* NUL-terminated, or NULL */
    const char *template_override;     /* a template source (chat_template.jinja), or NULL */
    int32_t bos_id;              /* -1 if none; guards against a double BOS */
    const char *messages_json;   /* a whole conversation (JSON array of {role, content});
                                    when set, system/user are not used for templated prompts */
} okv_gen_prompt_args;

/* Refuses a tokenizer whose ids do not all fit the program's vocabulary
 * (generation would later fail on the first such id). okv_generate and
 * okv_chat_session_create check it; callers may check at load. */
okv_status okv_gen_check_tokenizer(const okv_program *p, const okv_tok *tok, okv_error *err);

/* Builds the prompt ids (caller frees *ids). A rendered prompt is encoded
 * without adding special tokens (templates write BOS themselves); a raw one
 * with them. A leading duplicated BOS is collapsed to one. *used_template
 * tells which path was taken (may be NULL). */
okv_status okv_gen_prompt(const okv_tok *tok, const okv_gen_prompt_args *a, int32_t **ids, size_t *n,
                          bool *used_template, okv_error *err);

typedef struct okv_gen_options {
    int max_new_tokens;
    okv_sampler_params sampling;
    const char *const *stops;    /* stop strings */
    int n_stops;
    const int32_t *eos_ids;      /* generation stops on any of them (not printed) */
    int n_eos;
    int context_limit;           /* positions available (cache capacity) */
    bool drop_oldest_turns;      /* chat sessions: when the conversation outgrows the context, drop
                                    the oldest user/assistant turns (never the system message) instead
                                    of refusing the turn */
    /* receives streamed text; may be NULL */
    void (*on_text)(void *ctx, const char *text, size_t len);
    void *ctx;
} okv_gen_options;

/* Runs prompt[0..n) at positions start_pos.. through r, then generates.
 * Generated ids are stored in out_ids (capacity max_new_tokens, may be NULL). */
okv_status okv_generate(okv_runner *r, const okv_tok *tok, const int32_t *prompt, size_t n, int start_pos,
                        const okv_gen_options *o, int32_t *out_ids, okv_gen_stats *stats, okv_error *err);

/* ---- multi-turn chat over one cache ----------------------------------------
 * A session keeps the conversation and the token ids its cache holds. Each
 * turn renders the whole conversation again, rewinds the cache to the
 * longest prefix it already holds (falling back to a clear when a ring
 * cache cannot serve that point) and prefills only the rest. */
typedef struct okv_chat_session okv_chat_session;

/* base: mode, system, extra vars, tokenizer config, template, bos (its
 * user/messages fields are ignored). The session borrows r, tok and key. */
okv_status okv_chat_session_create(okv_runner *r, const char *cache_key, const okv_tok *tok,
                                   const okv_gen_prompt_args *base, okv_chat_session **out, okv_error *err);
void okv_chat_session_free(okv_chat_session *s);
/* One user turn: generates the reply (streamed through o->on_text) and
 * records it in the conversation. *reused = prompt tokens served from the
 * cache (may be NULL); stats->prompt_tokens counts only the prefilled rest.
 * out_ids as in okv_generate. */
okv_status okv_chat_session_turn(okv_chat_session *s, const char *user, const okv_gen_options *o, int32_t *out_ids,
                                 okv_gen_stats *stats, size_t *reused, okv_error *err);

#ifdef __cplusplus
}
#endif
#endif
