/* okv_gguf_vocab_read.c — the tokenizer.* keys of an open GGUF file, read
 * into an okv_gguf_vocab and synthesised into the HF texts.
 *
 * Kept apart from okv_gguf_vocab.c so the synthesis stays plain data in,
 * text out (tests drive it from tokenizer.json fixtures without a GGUF);
 * this file is only the key lookups, each checked for its value type. */
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_gguf.h"
#include "okv_gguf_vocab.h"

static okv_gguf_span span_of(okv_gguf_str s) { return (okv_gguf_span){s.ptr, (size_t)s.len}; }

/* kv of an array of elem type `want` (NULL if absent). */
static okv_status find_array(const okv_gguf *g, const char *key, okv_gguf_vtype want, bool required,
                             const okv_gguf_kv **out, okv_error *err) {
    const okv_gguf_kv *kv = okv_gguf_find(g, key);
    *out = NULL;
    if (!kv) {
        if (required) return okv_fail(err, OKV_ERR_FORMAT, "%s: %s is missing", okv_gguf_path(g), key);
        return OKV_OK;
    }
    bool int_ok = want == OKV_GGUF_I32 && kv->type == OKV_GGUF_ARRAY &&
                  (kv->elem_type == OKV_GGUF_I32 || kv->elem_type == OKV_GGUF_U32 || kv->elem_type == OKV_GGUF_I8 ||
                   kv->elem_type == OKV_GGUF_U8 || kv->elem_type == OKV_GGUF_I16 || kv->elem_type == OKV_GGUF_U16 ||
                   kv->elem_type == OKV_GGUF_I64 || kv->elem_type == OKV_GGUF_U64);
    bool float_ok = want == OKV_GGUF_F32 && kv->type == OKV_GGUF_ARRAY &&
                    (kv->elem_type == OKV_GGUF_F32 || kv->elem_type == OKV_GGUF_F64);
    if (kv->type != OKV_GGUF_ARRAY || (!int_ok && !float_ok && kv->elem_type != want))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: %s must be an array of %s", okv_gguf_path(g), key, okv_gguf_vtype_name(want));
    *out = kv;
    return OKV_OK;
}

static okv_status opt_id(const okv_gguf *g, const char *key, int64_t *out, okv_error *err) {
    *out = -1;
    if (!okv_gguf_find(g, key)) return OKV_OK;
    return okv_gguf_get_int(g, key, out, err);
}

static okv_status opt_flag(const okv_gguf *g, const char *key, int *out, okv_error *err) {
    bool b;
    *out = -1;
    if (!okv_gguf_find(g, key)) return OKV_OK;
    okv_status st = okv_gguf_get_bool(g, key, &b, err);
    if (!st) *out = b;
    return st;
}

/* The arrays okv_gguf_vocab borrows, owned here. */
typedef struct vocab_arrays {
    okv_gguf_span *tokens, *merges;
    float *scores;
    int32_t *types;
} vocab_arrays;

static void arrays_free(vocab_arrays *a) {
    free(a->tokens);
    free(a->merges);
    free(a->scores);
    free(a->types);
}

static okv_status read_strings(const okv_gguf *g, const okv_gguf_kv *kv, okv_gguf_span **out, okv_error *err) {
    *out = malloc((kv->n_elems ? kv->n_elems : 1) * sizeof **out);
    if (!*out) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory reading %s", okv_gguf_path(g), kv->key);
    for (uint64_t i = 0; i < kv->n_elems; i++) {
        okv_gguf_str s;
        if (!okv_gguf_kv_str(kv, i, &s))
            return okv_fail(err, OKV_ERR_FORMAT, "%s: %s[%llu] cannot be read", okv_gguf_path(g), kv->key, (unsigned long long)i);
        (*out)[i] = span_of(s);
    }
    return OKV_OK;
}

static okv_status read_vocab(const okv_gguf *g, okv_gguf_vocab *v, vocab_arrays *a, okv_error *err) {
    okv_gguf_str s;
    okv_status st = okv_gguf_get_str(g, "tokenizer.ggml.model", &s, err);
    if (st) return st; /* NOT_FOUND: the file has no tokenizer */
    v->model = span_of(s);
    if (okv_gguf_find(g, "tokenizer.ggml.pre")) {
        if ((st = okv_gguf_get_str(g, "tokenizer.ggml.pre", &s, err))) return st;
        v->pre = span_of(s);
    }
    if (okv_gguf_find(g, "tokenizer.chat_template")) {
        if ((st = okv_gguf_get_str(g, "tokenizer.chat_template", &s, err))) return st;
        v->chat_template = span_of(s);
    }
    const okv_gguf_kv *tokens, *scores, *types, *merges;
    if ((st = find_array(g, "tokenizer.ggml.tokens", OKV_GGUF_STRING, true, &tokens, err))) return st;
    if ((st = find_array(g, "tokenizer.ggml.scores", OKV_GGUF_F32, false, &scores, err))) return st;
    if ((st = find_array(g, "tokenizer.ggml.token_type", OKV_GGUF_I32, false, &types, err))) return st;
    if ((st = find_array(g, "tokenizer.ggml.merges", OKV_GGUF_STRING, false, &merges, err))) return st;
    if (tokens->n_elems > (uint64_t)INT32_MAX)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: tokenizer.ggml.tokens has too many entries", okv_gguf_path(g));
    if ((st = read_strings(g, tokens, &a->tokens, err))) return st;
    v->tokens = a->tokens;
    v->n_tokens = (size_t)tokens->n_elems;
    if (merges) {
        if ((st = read_strings(g, merges, &a->merges, err))) return st;
        v->merges = a->merges;
        v->n_merges = (size_t)merges->n_elems;
    }
    if (scores) {
        if (scores->n_elems > tokens->n_elems + 1)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries but tokenizer.ggml.tokens has %llu",
                            okv_gguf_path(g), (unsigned long long)scores->n_elems, (unsigned long long)tokens->n_elems);
        if (!(a->scores = malloc((scores->n_elems ? scores->n_elems : 1) * sizeof *a->scores)))
            return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", okv_gguf_path(g));
        for (uint64_t i = 0; i < scores->n_elems; i++) {
            double d;
            if (!okv_gguf_kv_float(scores, i, &d))
                return okv_fail(err, OKV_ERR_FORMAT, "%s: tokenizer.ggml.scores[%llu] cannot be read", okv_gguf_path(g), (unsigned long long)i);
            a->scores[i] = (float)d;
        }
        v->scores = a->scores;
        v->n_scores = (size_t)scores->n_elems;
    }
    if (types) {
        if (types->n_elems > tokens->n_elems + 1)
            return okv_fail(err, OKV_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries but tokenizer.ggml.tokens has %llu",
                            okv_gguf_path(g), (unsigned long long)types->n_elems, (unsigned long long)tokens->n_elems);
        if (!(a->types = malloc((types->n_elems ? types->n_elems : 1) * sizeof *a->types)))
            return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", okv_gguf_path(g));
        for (uint64_t i = 0; i < types->n_elems; i++) {
            int64_t t;
            if (!okv_gguf_kv_int(types, i, &t))
                return okv_fail(err, OKV_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%llu] cannot be read", okv_gguf_path(g), (unsigned long long)i);
            a->types[i] = t < -1 || t > 1000 ? -1 : (int32_t)t; /* out of range: refused by the synthesis */
        }
        v->token_types = a->types;
        v->n_token_types = (size_t)types->n_elems;
    }
    if ((st = opt_id(g, "tokenizer.ggml.bos_token_id", &v->bos_id, err))) return st;
    if ((st = opt_id(g, "tokenizer.ggml.eos_token_id", &v->eos_id, err))) return st;
    if ((st = opt_id(g, "tokenizer.ggml.unknown_token_id", &v->unk_id, err))) return st;
    if ((st = opt_id(g, "tokenizer.ggml.padding_token_id", &v->pad_id, err))) return st;
    if ((st = opt_id(g, "tokenizer.ggml.eot_token_id", &v->eot_id, err))) return st;
    if ((st = opt_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err))) return st;
    if ((st = opt_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err))) return st;
    return opt_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err);
}

okv_status okv_gguf_tokenizer_texts(const okv_gguf *g, okv_gguf_vocab_texts *out, okv_error *err) {
    memset(out, 0, sizeof *out);
    okv_gguf_vocab v = okv_gguf_vocab_empty();
    vocab_arrays a = {0};
    okv_status st = read_vocab(g, &v, &a, err);
    if (!st) {
        st = okv_gguf_vocab_synthesize(&v, out, err);
        if (st) okv_fail_prefix(err, "%s", okv_gguf_path(g));
    }
    arrays_free(&a);
    return st;
}
