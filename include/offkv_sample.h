/* offkv_sample.h — the sampling layer: turning one row of logits into the
 * next token id, cutting streamed text at stop strings, and formatting the
 * end-of-run statistics line.
 *
 * It knows nothing about models or tokenizers: the sampler sees a float row
 * of `vocab` logits and the token ids it is told about; the stopper sees
 * UTF-8 text pieces. Every object is created once and reused; none holds
 * global state, so several can run side by side (one per sequence).
 *
 * Semantics follow HuggingFace transformers' generate():
 *
 *   1. repetition penalty over the set of ids seen so far (prompt and
 *      generated, as recorded by okv_sampler_accept): a logit l of a seen id
 *      becomes l / penalty if l > 0, l * penalty otherwise;
 *   2. greedy (do_sample false or temperature 0): argmax, lowest id on ties;
 *   otherwise
 *   3. temperature: l / temperature;
 *   4. top-k: keep the tokens whose logit is >= the k-th largest (like HF,
 *      tokens tied with the k-th are kept too, so more than k can survive);
 *   5. top-p: in descending probability order (lower id first on ties) keep
 *      the smallest prefix whose cumulative probability reaches top_p (a token
 *      is kept iff the mass strictly before it is < top_p; the first is always
 *      kept, so top_p 0 keeps exactly the most likely token);
 *   6. min-p: drop tokens whose probability is < min_p * (largest probability);
 *   7. draw from the softmax of what remains with a seeded xoshiro256** RNG.
 *
 * "Off" values: top_k 0, top_p 1.0, min_p 0, repetition_penalty 1.0.
 * The random stream depends only on the seed (identical on every machine);
 * the token drawn also depends on the logits and on libm's expf. */
#ifndef OFFKV_SAMPLE_H
#define OFFKV_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- sampler */

typedef struct okv_sampler_params {
    bool do_sample;            /* false: greedy (penalty still applies) */
    float temperature;         /* > 0 divides logits; 0 means greedy */
    int32_t top_k;             /* 0 = off; clamped to the vocab size */
    float top_p;               /* in [0, 1]; 1 = off */
    float min_p;               /* in [0, 1]; 0 = off */
    float repetition_penalty;  /* > 0; 1 = off */
    uint64_t seed;
    float frequency_penalty;   /* in [-2, 2]; 0 = off (OpenAI: over generated ids) */
    float presence_penalty;    /* in [-2, 2]; 0 = off */
} okv_sampler_params;

/* HuggingFace GenerationConfig defaults: do_sample false, temperature 1.0,
 * top_k 50, top_p 1.0, min_p 0 (HF: None), repetition_penalty 1.0, and seed
 * 0. Like HF, the defaults are greedy: a caller overlays the fields present
 * in generation_config.json (most chat models set do_sample true there), and
 * a CLI that lets the user pick a temperature > 0 should set do_sample too. */
okv_sampler_params okv_sampler_params_default(void);

/* Checks ranges (temperature >= 0, top_k >= 0, 0 <= top_p <= 1,
 * 0 <= min_p <= 1, repetition_penalty > 0, all finite) and names the field
 * at fault. */
okv_status okv_sampler_params_check(const okv_sampler_params *p, okv_error *err);

typedef struct okv_sampler okv_sampler;

/* Creates a sampler for rows of `vocab` logits. Scratch buffers sized to the
 * vocabulary are allocated here, once. */
okv_status okv_sampler_create(int32_t vocab, const okv_sampler_params *params,
                              okv_sampler **out, okv_error *err);
void okv_sampler_free(okv_sampler *s);

/* Records a prompt or generated token for the repetition penalty.
 * OKV_ERR_INVALID if token is outside [0, vocab). */
okv_status okv_sampler_accept(okv_sampler *s, int32_t token, okv_error *err);

/* Records a generated token: as okv_sampler_accept, and counted for the
 * OpenAI penalties (logit - count * frequency_penalty - presence_penalty
 * for each id generated count > 0 times, applied after the repetition
 * penalty and before temperature, greedy included). */
okv_status okv_sampler_accept_generated(okv_sampler *s, int32_t token, okv_error *err);

/* Chooses the next token from logits[0..vocab). The caller's row is not
 * modified. Does not accept the token (call okv_sampler_accept with it).
 * Returns -1 if no logit is above -inf (all -inf or NaN); NaN logits are
 * never chosen. */
int32_t okv_sampler_sample(okv_sampler *s, const float *logits);

/* Forgets the recorded tokens and restarts the random stream from the seed,
 * so a reset sampler repeats its earlier draws. */
void okv_sampler_reset(okv_sampler *s);

const okv_sampler_params *okv_sampler_get_params(const okv_sampler *s);

/* ---------------------------------------------------------------- stopper */

/* Streams generated text and stops at the first stop string. Text that might
 * still turn into a stop string is held back; text released is never taken
 * back; the stop string and anything after it are never released. */
typedef struct okv_stopper okv_stopper;

/* stops: n non-empty NUL-terminated strings (copied). n may be 0. */
okv_status okv_stopper_create(const char *const *stops, int n, okv_stopper **out, okv_error *err);
void okv_stopper_free(okv_stopper *st);

/* Feeds one piece of text. *emit and *emit_len receive the text safe to print
 * now (NUL-terminated, owned by the stopper, valid until the next call on
 * it). A release never ends inside a UTF-8 sequence: an incomplete trailing
 * character is held until its remaining bytes arrive. *stopped becomes true
 * once a stop string has completed; later pushes release nothing. */
okv_status okv_stopper_push(okv_stopper *st, const char *piece, size_t len,
                            const char **emit, size_t *emit_len, bool *stopped,
                            okv_error *err);

/* End of generation (EOS, max tokens): releases whatever is held back
 * (nothing if a stop string was hit). Same ownership as push. */
void okv_stopper_flush(okv_stopper *st, const char **emit, size_t *emit_len);

/* Index of the stop string that ended the text, or -1. */
int okv_stopper_which(const okv_stopper *st);

/* Forgets held text and the stopped state, keeping the stop strings. */
void okv_stopper_reset(okv_stopper *st);

/* ------------------------------------------------------- run statistics */

typedef enum okv_stop_reason {
    OKV_STOP_NONE = 0,       /* still running / not reported */
    OKV_STOP_EOS = 1,        /* an end-of-sequence token */
    OKV_STOP_STRING = 2,     /* a stop string */
    OKV_STOP_MAX_TOKENS = 3, /* the generation limit */
    OKV_STOP_CONTEXT = 4     /* the context (cache capacity) is full */
} okv_stop_reason;

const char *okv_stop_reason_name(okv_stop_reason r);

typedef struct okv_gen_stats {
    int64_t prompt_tokens;
    double prefill_seconds;   /* time to process the prompt */
    int64_t generated_tokens;
    double decode_seconds;    /* time spent producing the generated tokens */
    okv_stop_reason stop;
} okv_gen_stats;

/* Formats the end-of-run line, e.g.
 *   "prompt 12 tok in 0.143 s (84.1 tok/s) | generated 32 tok in 1.265 s (25.3 tok/s) | stop: eos"
 * A rate is left out when its time is not > 0, the stop part when stop is
 * OKV_STOP_NONE. Writes at most cap bytes (NUL included) and returns the
 * length the full line has, like snprintf. */
size_t okv_gen_stats_format(const okv_gen_stats *st, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
