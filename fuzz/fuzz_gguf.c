/* fuzz_gguf.c — libFuzzer target: a GGUF file parsed in memory
 * (okv_gguf_open_memory), then read the way export reads it: every key
 * through the typed getters and the first/last array elements, every tensor
 * found by name and its first blocks dequantized to f32, and the
 * tokenizer.json synthesised from its tokenizer.* keys loaded and used to
 * encode a string. A file the reader accepts must describe only
 * bytes inside the input. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "okv_gguf.h"
#include "offkv_tok.h"
#include "okv_gguf_vocab.h"

#define MAX_DEQUANT 4096 /* elements dequantized per tensor */

static void read_kv(const okv_gguf *g, const okv_gguf_kv *kv) {
    okv_fuzz_require(okv_gguf_find(g, kv->key) != NULL, "every key is found by name");
    okv_error err = {0};
    okv_gguf_str s;
    int64_t i;
    uint64_t u;
    double f;
    bool b;
    (void)okv_gguf_get_str(g, kv->key, &s, &err);
    (void)okv_gguf_get_int(g, kv->key, &i, &err);
    (void)okv_gguf_get_uint(g, kv->key, &u, &err);
    (void)okv_gguf_get_float(g, kv->key, &f, &err);
    (void)okv_gguf_get_bool(g, kv->key, &b, &err);
    char *dup = NULL;
    if (okv_gguf_get_strdup(g, kv->key, &dup, &err) == OKV_OK) free(dup);
    okv_gguf_vtype et;
    uint64_t n;
    if (okv_gguf_get_array(g, kv->key, &et, &n, &err)) return;
    uint64_t idx[3] = {0, n ? n - 1 : 0, n};
    for (int k = 0; k < 3; k++) {
        (void)okv_gguf_arr_int(g, kv->key, idx[k], &i, &err);
        (void)okv_gguf_arr_float(g, kv->key, idx[k], &f, &err);
        (void)okv_gguf_arr_bool(g, kv->key, idx[k], &b, &err);
        if (okv_gguf_arr_str(g, kv->key, idx[k], &s, &err) == OKV_OK) {
            const volatile char *p = s.ptr;
            for (uint64_t c = 0; c < s.len; c++) (void)p[c];
        }
        (void)okv_gguf_kv_int(kv, idx[k], &i);
        (void)okv_gguf_kv_float(kv, idx[k], &f);
        (void)okv_gguf_kv_str(kv, idx[k], &s);
    }
}

static void read_tensor(const okv_gguf *g, const okv_gguf_tensor *t) {
    okv_fuzz_require(okv_gguf_find_tensor(g, t->name) != NULL, "every tensor is found by name");
    const volatile uint8_t *p = t->data;
    if (t->nbytes) (void)(p[0] + p[t->nbytes - 1]);
    if (!okv_ggml_can_dequantize(t->type) || t->n_elems == 0) return;
    uint64_t block = (uint64_t)okv_ggml_block_size(t->type);
    if (block == 0) return;
    uint64_t n = t->n_elems < MAX_DEQUANT ? t->n_elems : MAX_DEQUANT;
    n -= n % block;
    if (n == 0) return;
    float *dst = malloc(n * sizeof *dst);
    okv_error err = {0};
    if (dst) (void)okv_gguf_dequantize(t, 0, n, dst, &err);
    uint64_t last = (t->n_elems / block - 1) * block;
    if (dst) (void)okv_gguf_dequantize(t, last, block, dst, &err);
    free(dst);
}

static void read_tokenizer(const okv_gguf *g) {
    okv_gguf_vocab_texts tx;
    okv_error err = {0};
    if (okv_gguf_tokenizer_texts(g, &tx, &err)) return;
    okv_tok *tok = NULL;
    okv_fuzz_require(okv_tok_load_json(tx.tokenizer_json, tx.tokenizer_json_len, &tok, &err) == OKV_OK,
                     "a synthesised tokenizer.json loads");
    int32_t *ids = NULL;
    size_t n = 0;
    if (okv_tok_encode(tok, "Hello world 123", 15, true, &ids, &n, &err) == OKV_OK) {
        char *text = NULL;
        size_t len;
        if (okv_tok_decode(tok, ids, n, false, &text, &len, &err) == OKV_OK) free(text);
    }
    free(ids);
    okv_tok_free(tok);
    okv_gguf_vocab_texts_free(&tx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    okv_gguf *g = NULL;
    okv_error err = {0};
    if (okv_gguf_open_memory(data, size, "fuzz.gguf", &g, &err)) {
        okv_fuzz_require(err.message[0] != 0, "a refusal carries a message");
        return 0;
    }
    for (int i = 0; i < okv_gguf_kv_count(g); i++) read_kv(g, okv_gguf_kv_at(g, i));
    for (int i = 0; i < okv_gguf_tensor_count(g); i++) read_tensor(g, okv_gguf_tensor_at(g, i));
    read_tokenizer(g);
    okv_gguf_close(g);
    return 0;
}
