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
#include "offkv_grammar.h"
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
    int prefill_chunk;           /* largest prefill step (0 or above the program's = prefill_chunk_size);
                                    smaller chunks let a scheduler interleave other sequences */
    /* receives streamed text; may be NULL */
    void (*on_text)(void *ctx, const char *text, size_t len);
    /* receives every sampled id, EOS included, before its text; may be NULL */
    void (*on_token)(void *ctx, int32_t id);
    void *ctx;
    /* constrained output (structured output): when grammar is set, each step
     * samples only among the tokens grammar_vocab says keep the text a prefix
     * of a valid value (the others' logits become -inf before penalties,
     * temperature and top-k/p), EOS only where the value is complete, and
     * generation ends (stop reason eos) as soon as the value is closed. Both
     * borrowed; they must outlive the generation. A max_new_tokens or stop
     * string end can still cut the value short. */
    const okv_grammar *grammar;
    const okv_grammar_vocab *grammar_vocab;
} okv_gen_options;

/* The token bytes constrained sampling works on: ids [0, n_vocab) (the
 * program's vocabulary), each as okv_tok_token_bytes gives it; special
 * tokens and ids the tokenizer lacks get none (never allowed: EOS is
 * decided by the grammar's state). Build once per tokenizer and share. */
okv_status okv_gen_grammar_vocab(const okv_tok *tok, int32_t n_vocab, okv_grammar_vocab **out, okv_error *err);

/* ---- defaults for generating from a program ----------------------------------
 * What a caller should start from (HF generate() semantics): the sampler's
 * HF defaults overlaid with the bundled generation_config.json (do_sample,
 * temperature, top_k, top_p, min_p, repetition_penalty; each checked, an
 * out-of-range value is an error naming the field and value), the EOS set
 * (the program's EOS ids plus tokenizer_config.json's eos_token when tok is
 * given and knows it, without duplicates) and the context limit (the
 * runner's cache capacity). */
#define OKV_GEN_MAX_EOS 32

typedef struct okv_gen_defaults {
    okv_sampler_params sampling;
    int32_t eos_ids[OKV_GEN_MAX_EOS];
    int n_eos;
    int context_limit;
} okv_gen_defaults;

/* tok may be NULL (then the EOS set is the program's alone). */
okv_status okv_gen_defaults_get(const okv_runner *r, const okv_tok *tok, okv_gen_defaults *d, okv_error *err);
/* Options that generate with d (which must outlive them): its sampling, EOS
 * set and context limit, max_new_tokens = max_new_tokens, nothing else set. */
void okv_gen_options_init(okv_gen_options *o, const okv_gen_defaults *d, int max_new_tokens);

/* Runs prompt[0..n) at positions start_pos.. through r, then generates.
 * Generated ids are stored in out_ids (capacity max_new_tokens, may be NULL).
 * tok NULL generates ids only (no text; stop strings unused). */
okv_status okv_generate(okv_runner *r, const okv_tok *tok, const int32_t *prompt, size_t n, int start_pos,
                        const okv_gen_options *o, int32_t *out_ids, okv_gen_stats *stats, okv_error *err);

/* The same generation one unit of work at a time, for schedulers that
 * interleave sequences: each okv_gen_seq_step runs one prefill chunk or
 * samples one token (streaming its text) and feeds it back. The sequence
 * copies prompt and o (o's stops and eos_ids and tok must outlive it) and
 * steps r at positions start_pos..: nothing else may step r's cache key
 * meanwhile. After an error or *done the sequence does nothing more. */
typedef struct okv_gen_seq okv_gen_seq;

okv_status okv_gen_seq_create(okv_runner *r, const okv_tok *tok, const int32_t *prompt, size_t n, int start_pos,
                              const okv_gen_options *o, okv_gen_seq **out, okv_error *err);
void okv_gen_seq_free(okv_gen_seq *g);
okv_status okv_gen_seq_step(okv_gen_seq *g, bool *done, okv_error *err);
/* Caller-driven sequences, for a scheduler that batches many of them into
 * one okv_runner_step_batch: the sequence samples, stops and streams text,
 * the caller runs the model. okv_gen_seq_pending gives the tokens still to
 * run (the prompt's rest, or the one sampled token to feed back) and the
 * position of the first; the caller steps any leading part of them and
 * reports it with okv_gen_seq_fed, passing the next-token logits row
 * (vocab floats) when that part ends the pending tokens (NULL otherwise):
 * the sequence then samples from it. seconds is the step's time charged to
 * the sequence's stats. okv_gen_seq_step refuses such a sequence. */
okv_status okv_gen_seq_create_fed(const okv_program *p, const okv_tok *tok, const int32_t *prompt, size_t n,
                                  int start_pos, const okv_gen_options *o, okv_gen_seq **out, okv_error *err);
size_t okv_gen_seq_pending(const okv_gen_seq *g, const int32_t **ids, int *pos);
okv_status okv_gen_seq_fed(okv_gen_seq *g, size_t n, const float *logits, double seconds, bool *done, okv_error *err);
/* True while prompt tokens are still to be prefilled. */
bool okv_gen_seq_prefilling(const okv_gen_seq *g);
/* Counts and times so far (final once done). */
const okv_gen_stats *okv_gen_seq_stats(const okv_gen_seq *g);
/* The generated ids so far (EOS not included). */
const int32_t *okv_gen_seq_ids(const okv_gen_seq *g, size_t *n);

/* ---- multi-turn chat over one cache ----------------------------------------
 * A session keeps the conversation and the token ids its cache holds. Each
 * turn renders the whole conversation again, rewinds the cache to the
 * longest prefix it already holds (falling back to a clear when a ring
 * cache cannot serve that point) and prefills only the rest. */
typedef struct okv_chat_session okv_chat_session;

/* base: mode, system, extra vars, tokenizer config, template, bos (its
 * user/messages fields are ignored). The session borrows r and tok and
 * rewinds r's cache key (okv_runner_cache_key). */
okv_status okv_chat_session_create(okv_runner *r, const okv_tok *tok, const okv_gen_prompt_args *base,
                                   okv_chat_session **out, okv_error *err);
void okv_chat_session_free(okv_chat_session *s);
/* One user turn: generates the reply (streamed through o->on_text) and
 * records it in the conversation. *reused = prompt tokens served from the
 * cache (may be NULL); stats->prompt_tokens counts only the prefilled rest.
 * out_ids as in okv_generate. */
okv_status okv_chat_session_turn(okv_chat_session *s, const char *user, const okv_gen_options *o, int32_t *out_ids,
                                 okv_gen_stats *stats, size_t *reused, okv_error *err);
/* Saves the conversation and the cache's sequence to one state file
 * (okv_seq_save; atomic). */
okv_status okv_chat_session_save(okv_chat_session *s, const char *path, okv_error *err);
/* Restores a saved session into s (same program, same cache options): the
 * cache holds the saved tokens again, so the next turn prefills only what
 * is new. On a refused file nothing changed; on a file whose cache part
 * loaded but whose conversation is damaged the cache is cleared. */
okv_status okv_chat_session_load(okv_chat_session *s, const char *path, okv_error *err);

#ifdef __cplusplus
}
#endif
#endif
