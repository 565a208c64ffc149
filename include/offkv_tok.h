/* offkv_tok.h — the tokenizer's public API: load a HuggingFace tokenizer.json,
 * encode text to token ids, decode ids to text, and stream-decode ids one at
 * a time into text that is always complete UTF-8.
 *
 * Supported (what Llama-3.x, Qwen3 and Gemma-3/4 use): model BPE (byte-level
 * or SentencePiece-style with byte_fallback), added/special tokens,
 * normalizers Sequence/NFC/NFKC/NFD/NFKD/Replace/Prepend/Strip,
 * pre-tokenizers Sequence/Split/ByteLevel/Metaspace/Digits, post-processors
 * TemplateProcessing/ByteLevel/Sequence, decoders ByteLevel/ByteFallback/
 * Fuse/Strip/Replace/Metaspace/Sequence. Anything else fails at load with an
 * error naming the component type.
 *
 * A loaded okv_tok is immutable: encode/decode/lookups may run concurrently
 * from several threads. A stream is single-threaded state over one tok.
 *
 *   okv_tok *tok;  okv_error err;
 *   if (okv_tok_load_file("tokenizer.json", &tok, &err)) fail(err.message);
 *   int32_t *ids; size_t n;
 *   okv_tok_encode(tok, prompt, strlen(prompt), false, &ids, &n, &err);
 *   okv_tok_stream *s;  okv_tok_stream_create(tok, true, &s, &err);
 *   for each generated id:  okv_tok_stream_push(s, id, &text, &len, &err);  print text[0..len)
 *   at the end:             okv_tok_stream_flush(s, &text, &len, &err);    print text[0..len)
 *   free(ids); okv_tok_stream_free(s); okv_tok_free(tok); */
#ifndef OFFKV_TOK_H
#define OFFKV_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct okv_tok okv_tok;
typedef struct okv_tok_stream okv_tok_stream;

/* Loads a tokenizer.json from a file / from memory (text need not be
 * NUL-terminated). `what` in error messages is the path, or "tokenizer.json". */
okv_status okv_tok_load_file(const char *path, okv_tok **out, okv_error *err);
okv_status okv_tok_load_json(const char *text, size_t len, okv_tok **out, okv_error *err);
void okv_tok_free(okv_tok *tok);

/* Encodes UTF-8 text (invalid UTF-8 is an OKV_ERR_INVALID error). Added
 * tokens written in the text are always recognised; add_special_tokens runs
 * the post-processor (e.g. BOS). *ids is malloc'ed (free() it), even when
 * *n is 0. */
okv_status okv_tok_encode(const okv_tok *tok, const char *text, size_t len,
                          bool add_special_tokens, int32_t **ids, size_t *n,
                          okv_error *err);

/* Decodes ids to text exactly as HF tokenizers' decode() (no clean-up of
 * tokenization spaces). Ids without a token are skipped. skip_special drops
 * added tokens marked special. *text is malloc'ed and NUL-terminated. */
okv_status okv_tok_decode(const okv_tok *tok, const int32_t *ids, size_t n,
                          bool skip_special, char **text, size_t *len,
                          okv_error *err);

/* One more than the largest id (model vocab and added tokens). */
size_t okv_tok_vocab_size(const okv_tok *tok);
/* Id of a token string (added tokens first, then the model vocab), -1 if none. */
int32_t okv_tok_token_to_id(const okv_tok *tok, const char *token);
/* The token string of an id (NUL-terminated, owned by tok), NULL if none. */
const char *okv_tok_id_to_token(const okv_tok *tok, int32_t id);
/* True for added tokens whose "special" flag is set. */
bool okv_tok_is_special(const okv_tok *tok, int32_t id);
/* The bytes id stands for in the middle of a text (as decode would give
 * them after other tokens, but raw: a byte-level token holding part of a
 * UTF-8 character gives those bytes, not U+FFFD). Empty for an id with no
 * token. *bytes is malloc'ed and NUL-terminated. */
okv_status okv_tok_token_bytes(const okv_tok *tok, int32_t id, char **bytes, size_t *len, okv_error *err);

/* Streaming detokenizer: push ids one at a time; each push yields the text
 * that became final (possibly empty), never a broken UTF-8 sequence. flush
 * yields what is still held back (e.g. an incomplete byte sequence, as
 * U+FFFD). The concatenation of all pieces equals okv_tok_decode of all ids.
 * Returned text points into the stream and is valid until the next call. */
okv_status okv_tok_stream_create(const okv_tok *tok, bool skip_special,
                                 okv_tok_stream **out, okv_error *err);
okv_status okv_tok_stream_push(okv_tok_stream *s, int32_t id,
                               const char **text, size_t *len, okv_error *err);
okv_status okv_tok_stream_flush(okv_tok_stream *s, const char **text,
                                size_t *len, okv_error *err);
/* Forgets all state so the stream can start a new text. */
void okv_tok_stream_reset(okv_tok_stream *s);
void okv_tok_stream_free(okv_tok_stream *s);

#ifdef __cplusplus
}
#endif
#endif
