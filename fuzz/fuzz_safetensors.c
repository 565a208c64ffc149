/* fuzz_safetensors.c — libFuzzer target: one .safetensors file (8-byte
 * header length, JSON header, data) opened by okv_st_open_file, then used
 * the way export uses it: every tensor's bytes read, every supported tensor
 * converted to f32 with okv_convert, names and metadata looked up. A file
 * the reader accepts must describe only bytes inside the file. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "okv_common.h"
#include "okv_safetensors.h"

#define MAX_CONVERT (1u << 20) /* elements converted per tensor */

static void use_tensor(const okv_st_set *set, const okv_st_tensor *t) {
    okv_fuzz_require(okv_st_find(set, t->name) != NULL, "every listed tensor is found by name");
    const volatile uint8_t *p = t->data;
    uint8_t acc = 0;
    for (size_t i = 0; i < t->nbytes; i++) acc ^= p[i];   /* SEGVs if outside the mapping */
    (void)acc;
    if (!t->supported || t->numel == 0) return;
    size_t n = t->numel < MAX_CONVERT ? (size_t)t->numel : MAX_CONVERT;
    okv_fuzz_require(n * okv_dtype_size(t->dtype) <= t->nbytes, "numel fits nbytes");
    float *f32 = malloc(n * sizeof *f32);
    if (!f32) return;
    okv_convert(f32, OKV_F32, t->data, t->dtype, n);
    free(f32);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = okv_fuzz_memfd(data, size, path);
    if (fd < 0) return 0;
    okv_st_set *set = NULL;
    okv_error err = {0};
    if (okv_st_open_file(path, &set, &err) == OKV_OK) {
        int n = okv_st_count(set);
        for (int i = 0; i < n; i++) use_tensor(set, okv_st_get(set, i));
        (void)okv_st_metadata(set, "format");
        (void)okv_st_find(set, "model.embed_tokens.weight");
        okv_st_free(set);
    } else {
        okv_fuzz_require(err.message[0] != 0, "a refusal carries a message");
    }
    close(fd);
    return 0;
}
