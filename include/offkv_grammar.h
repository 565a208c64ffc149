/* offkv_grammar.h — constrained sampling for structured output: a JSON
 * Schema (or "any JSON object") compiled into a character-level matcher,
 * and the token mask that keeps a model's output inside it.
 *
 *   okv_grammar        the compiled schema: immutable, shared by every
 *                      sequence that uses it (thread-safe to read)
 *   okv_grammar_match  one sequence's position in the grammar: a pushdown
 *                      automaton over bytes (a stack of frames, one per open
 *                      object/array/string/number)
 *   okv_grammar_vocab  the bytes each token id stands for, in a trie, built
 *                      once per tokenizer and shared
 *   okv_grammar_mask   which tokens can be consumed whole from the match's
 *                      current state: the sampler sets the others to -inf
 *
 * Like the rest of the sampling layer it knows nothing of tokenizers: the
 * caller hands it each token's bytes (okv_gen_grammar_vocab in offkv_gen.h
 * does that from an okv_tok).
 *
 * The output is the compact form a strict OpenAI client expects, with a
 * little freedom for the model: no whitespace before or after the top-level
 * value, at most OKV_GRAMMAR_MAX_WS whitespace bytes in each gap inside
 * (after '{', ':', ',', ...), strings of at most maxLength characters
 * (OKV_GRAMMAR_MAX_STRING when the schema gives none), numbers of at most
 * 16 integer and 16 fraction digits and a 3-digit exponent. These bounds
 * make every value finish in a bounded number of bytes (except arrays and
 * json_object's free objects, which the token limit ends).
 *
 * Supported schema keywords (anything else is refused with OKV_ERR_UNSUPPORTED
 * and a message naming the keyword and where it is, e.g.
 * "unsupported JSON Schema keyword 'pattern' at #/properties/zip"):
 *   type (a name or a list of names), properties, required,
 *   additionalProperties (false, true or absent: only the listed properties
 *   are generated), items, minItems, maxItems, minLength, maxLength, enum,
 *   const, anyOf (alternatives that start with different characters, e.g.
 *   a string or null), $ref to "#/$defs/NAME" or "#/definitions/NAME"
 *   (non-recursive), and the annotations title, description, default,
 *   examples, $schema, $id, $comment; on strings "format" date, time,
 *   date-time or uuid (RFC 3339 forms, valid values only: months 1-12, days
 *   within the month, offsets required on times; okv_grammar_format.c),
 *   other formats refused. Properties may come in any order; the
 *   object closes only once every required one is present. */
#ifndef OFFKV_GRAMMAR_H
#define OFFKV_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OKV_GRAMMAR_MAX_WS 8           /* whitespace bytes per gap */
#define OKV_GRAMMAR_MAX_STRING 512     /* characters, when the schema sets no maxLength */
#define OKV_GRAMMAR_MAX_DEPTH 32       /* nesting of the schema and of generated values */
#define OKV_GRAMMAR_MAX_SCHEMA (1 << 20) /* bytes of schema text */

typedef struct okv_grammar okv_grammar;

/* Compiles a JSON Schema given as JSON text (need not be NUL-terminated).
 * The schema is untrusted: size, depth, node and property counts are
 * bounded, and a schema no value can satisfy (empty enum, minItems >
 * maxItems, ...) is refused (OKV_ERR_INVALID) as is any keyword we cannot
 * enforce (OKV_ERR_UNSUPPORTED). */
okv_status okv_grammar_from_schema(const char *schema, size_t len, okv_grammar **out, okv_error *err);
/* Any JSON object (OpenAI's response_format {"type": "json_object"}). */
okv_status okv_grammar_json_object(okv_grammar **out, okv_error *err);

/* One alternative of a run of framed values: the literal head (which picks
 * the alternative), a JSON value valid under the schema, the literal tail.
 * All three NUL-terminated; head and tail non-empty. */
typedef struct okv_grammar_frame {
    const char *head;
    const char *schema;   /* JSON Schema text, as okv_grammar_from_schema takes it */
    const char *tail;
} okv_grammar_frame;

/* min_count..max_count framed values, each one of the n (1..64)
 * alternatives, with up to OKV_GRAMMAR_MAX_WS whitespace bytes between two
 * values (none before the first or inside head and tail): the shape of a
 * model's tool calls, e.g. head "<tool_call>\n{\"name\": \"f\", \"arguments\": "
 * and tail "}\n</tool_call>". No head may be a prefix of another
 * (OKV_ERR_INVALID); a schema is refused as okv_grammar_from_schema refuses it. */
okv_status okv_grammar_framed(const okv_grammar_frame *alts, int n, int min_count, int max_count, okv_grammar **out,
                              okv_error *err);
void okv_grammar_free(okv_grammar *g);

typedef struct okv_grammar_match okv_grammar_match;

/* A matcher at the start of g's value. g must outlive it. */
okv_status okv_grammar_match_create(const okv_grammar *g, okv_grammar_match **out, okv_error *err);
void okv_grammar_match_free(okv_grammar_match *m);
void okv_grammar_match_reset(okv_grammar_match *m);
/* Consumes bytes[0..n) if all of them keep the text a prefix of a valid
 * value, and returns true; otherwise returns false and the state is
 * unchanged. */
bool okv_grammar_match_feed(okv_grammar_match *m, const char *bytes, size_t n);
/* The bytes consumed so far are a complete valid value (the end of
 * generation may come here). */
bool okv_grammar_match_accepting(const okv_grammar_match *m);
/* Accepting, and no further byte can be consumed (the value is closed). */
bool okv_grammar_match_finished(const okv_grammar_match *m);

typedef struct okv_grammar_vocab okv_grammar_vocab;

/* n token ids; token i stands for bytes[i][0..lens[i]) (copied). A token
 * with no bytes (NULL or length 0: special tokens, EOS, unused ids) is
 * never allowed by a mask; the caller decides about EOS. */
okv_status okv_grammar_vocab_create(int32_t n, const char *const *bytes, const size_t *lens, okv_grammar_vocab **out,
                                    okv_error *err);
void okv_grammar_vocab_free(okv_grammar_vocab *v);
int32_t okv_grammar_vocab_size(const okv_grammar_vocab *v);
/* Token id's bytes (NULL, *len 0 for none or an id out of range). */
const char *okv_grammar_vocab_token(const okv_grammar_vocab *v, int32_t id, size_t *len);

/* bits[(vocab + 31) / 32]: bit id set iff token id's bytes can all be
 * consumed from m's state. m's state is not changed (m holds the scratch
 * the walk uses, allocated on first use: the only possible error is
 * OKV_ERR_NOMEM). */
okv_status okv_grammar_mask(okv_grammar_match *m, const okv_grammar_vocab *v, uint32_t *bits, okv_error *err);
/* Feeds token id's bytes (false, state unchanged, if not allowed or it has none). */
bool okv_grammar_match_feed_token(okv_grammar_match *m, const okv_grammar_vocab *v, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
