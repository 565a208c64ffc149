/* okv_gguf_vocab.h — a GGUF file's tokenizer metadata turned into the two
 * HuggingFace files our tokenizer and chat layers already read.
 *
 * GGUF stores a tokenizer as flat arrays (tokenizer.ggml.tokens, .scores,
 * .token_type, .merges) plus a few scalars. Instead of a second tokenizer
 * implementation we synthesise an HF tokenizer.json (and a
 * tokenizer_config.json with the special-token strings and the chat
 * template) from them, so a GGUF model gets exactly the in-memory tokenizer
 * the tokenizer.json path builds, and export bundles the texts unchanged.
 *
 *   okv_gguf_vocab v = okv_gguf_vocab_empty();
 *   v.model = "gpt2"; v.pre = "smollm"; v.n_tokens = n; v.tokens = spans; ...
 *   okv_gguf_vocab_texts t;
 *   if (okv_gguf_vocab_synthesize(&v, &t, &err)) fail(err.message);
 *   ... bundle t.tokenizer_json, t.tokenizer_config_json, t.generation_config_json ...
 *   okv_gguf_vocab_texts_free(&t);
 *
 * The struct only borrows: every pointer stays owned by the caller (e.g. the
 * mmap'ed GGUF file) and must outlive the synthesize call, not longer. */
#ifndef OKV_GGUF_VOCAB_H
#define OKV_GGUF_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

/* A GGUF string: bytes, not NUL-terminated, length as stored. */
typedef struct okv_gguf_span {
    const char *ptr;
    size_t len;
} okv_gguf_span;

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    OKV_GGUF_TOKEN_UNDEFINED = 0,
    OKV_GGUF_TOKEN_NORMAL = 1,
    OKV_GGUF_TOKEN_UNKNOWN = 2,
    OKV_GGUF_TOKEN_CONTROL = 3,
    OKV_GGUF_TOKEN_USER_DEFINED = 4,
    OKV_GGUF_TOKEN_UNUSED = 5,
    OKV_GGUF_TOKEN_BYTE = 6
};

typedef struct okv_gguf_vocab {
    /* tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece).
     * Anything else is refused by name. */
    okv_gguf_span model;
    /* tokenizer.ggml.pre (gpt2 only): "smollm", "llama-bpe", "qwen2",
     * "default", ...; ptr NULL = absent (treated as "default"). */
    okv_gguf_span pre;

    size_t n_tokens;
    const okv_gguf_span *tokens;  /* [n_tokens] tokenizer.ggml.tokens */
    size_t n_scores;              /* 0 (absent) or n_tokens */
    const float *scores;          /* [n_scores] tokenizer.ggml.scores */
    size_t n_token_types;         /* 0 (absent) or n_tokens */
    const int32_t *token_types;   /* [n_token_types] tokenizer.ggml.token_type */
    size_t n_merges;              /* gpt2: required; llama: 0 (derived from scores) */
    const okv_gguf_span *merges;  /* [n_merges] "a b" (tokenizer.ggml.merges) */

    /* tokenizer.ggml.{bos,eos,unknown,padding,eot}_token_id; -1 = absent. */
    int64_t bos_id, eos_id, unk_id, pad_id, eot_id;
    /* tokenizer.ggml.add_bos_token / add_eos_token: -1 absent, 0 false, 1 true.
     * Absent means the model kind's default (llama: BOS yes, gpt2: no). */
    int add_bos, add_eos;
    /* tokenizer.ggml.add_space_prefix (llama only): -1 absent (= true, as
     * llama.cpp), 0, 1. Gemma's GGUFs say false, Llama-2 style ones true. */
    int add_space_prefix;
    /* tokenizer.chat_template; ptr NULL = absent. */
    okv_gguf_span chat_template;
} okv_gguf_vocab;

/* The texts to bundle: NUL-terminated, malloc'ed, owned by the struct. */
typedef struct okv_gguf_vocab_texts {
    char *tokenizer_json;
    size_t tokenizer_json_len;
    char *tokenizer_config_json;
    size_t tokenizer_config_json_len;
    /* {"bos_token_id", "eos_token_id": [eos, eot...]}: the end-of-generation
     * ids (eos, eot, and the control tokens llama.cpp treats as end of
     * generation by their text: <|im_end|>, <|endoftext|>, <end_of_turn>,
     * <|eot_id|>, <|eom_id|> ...), for the program's EOS list. */
    char *generation_config_json;
    size_t generation_config_json_len;
} okv_gguf_vocab_texts;

/* All counts zero, all ids -1, add_bos/add_eos/add_space_prefix -1. */
okv_gguf_vocab okv_gguf_vocab_empty(void);

/* Builds tokenizer.json, tokenizer_config.json and generation_config.json
 * from v. Errors are one line
 * naming the GGUF key at fault (unknown model or pre-tokenizer, array length
 * mismatch, an id out of range, a merge naming an unknown token, invalid
 * UTF-8). On error *out is zeroed. */
okv_status okv_gguf_vocab_synthesize(const okv_gguf_vocab *v, okv_gguf_vocab_texts *out, okv_error *err);
void okv_gguf_vocab_texts_free(okv_gguf_vocab_texts *t);

/* Reads the tokenizer.* keys of an open GGUF file and synthesises the texts
 * (okv_gguf_vocab_read.c). OKV_ERR_NOT_FOUND when the file has no
 * tokenizer.ggml.model (a model without a tokenizer); other errors name the
 * file and key. */
typedef struct okv_gguf okv_gguf;
okv_status okv_gguf_tokenizer_texts(const okv_gguf *g, okv_gguf_vocab_texts *out, okv_error *err);

#endif
