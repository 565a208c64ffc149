/* fuzz_program.c — libFuzzer target: a program file (48-byte fixed header,
 * JSON header, 64-byte aligned tensor data) loaded with okv_program_open,
 * described (text and JSON), given caches (okv_cache_install) and run for
 * two steps (a prefill of up to 2 tokens, then one decode token).
 *
 * Before loading, the harness rewrites the header CRC-32 and the data-size
 * field to match the input, as an attacker crafting a file would: otherwise
 * nearly every mutation would stop at "checksum mismatch" and the fuzzer
 * would never reach graph validation, memory planning or the kernels. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "offkv.h"

#define FIXED 48

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Makes the checksum and the data size agree with the bytes we have. */
static void fix_header(uint8_t *buf, size_t size) {
    if (size < FIXED) return;
    uint64_t hlen = get_u64(buf + 16), data_off = get_u64(buf + 24);
    if (hlen <= size - FIXED) put_le(buf + 12, crc32_of(buf + FIXED, (size_t)hlen), 4);
    if (data_off <= size) put_le(buf + 32, size - data_off, 8);
}

static void run_steps(const okv_program *p) {
    okv_program_info info;
    okv_program_get_info(p, &info);
    if (info.vocab_size <= 0 || info.vocab_size > (1 << 22) || info.prefill_chunk_size <= 0) return;
    okv_error err = {0};
    okv_cache_options co;
    okv_cache_options_default(&co);
    if (okv_cache_install("fuzz", p, &co, &err)) return;
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = 1;
    ro.max_logit_rows = 1;
    okv_runner *r = NULL;
    float *logits = malloc(sizeof(float) * (size_t)info.vocab_size);
    if (logits && okv_runner_create(p, "fuzz", &ro, &r, &err) == OKV_OK) {
        int32_t ids[2] = {1 % info.vocab_size, info.vocab_size - 1}, pos[2] = {0, 1};
        int T = info.prefill_chunk_size < 2 ? 1 : 2;
        if (okv_runner_step(r, ids, pos, T, OKV_LOGITS_LAST, logits, &err) == OKV_OK) {
            int32_t id = 0, at = T;
            okv_runner_step(r, &id, &at, 1, OKV_LOGITS_LAST, logits, &err);
        }
        okv_runner_free(r);
    }
    free(logits);
    okv_cache_remove("fuzz", &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    fix_header(buf, size);
    char path[64];
    int fd = okv_fuzz_memfd(buf, size, path);
    free(buf);
    if (fd < 0) return 0;
    okv_program *p = NULL;
    okv_error err = {0};
    if (okv_program_open(path, &p, &err) == OKV_OK) {
        for (int json = 0; json < 2; json++) {
            char *text = NULL;
            if (okv_program_describe(p, json, &text, &err) == OKV_OK) free(text);
        }
        size_t len;
        (void)okv_program_blob(p, "tokenizer.json", &len);
        run_steps(p);
        okv_program_free(p);
    } else {
        okv_fuzz_require(err.message[0] != 0, "a refusal carries a message");
    }
    close(fd);
    return 0;
}
