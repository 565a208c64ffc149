/* fuzz_seqstate.c — libFuzzer target: a sequence state file (okv_seq_load's
 * input) applied to running kv sets of one fixed small layout (3 caches:
 * flat, ring of window 5, flat; 2 kv heads x 4 dims, chunk 3, 64 positions;
 * K in bf16, V in f32, so K and V rows differ in size), once into a single-sequence set and once into a cell set. Each
 * input is applied as is (the CRC refuses nearly all) and again with its
 * file size and CRC repaired, so the fuzzer reaches the field checks. An
 * accepted state must leave a set that steps on: the single set rewinds to
 * its own length and takes a step, the cell sequence reports its length and
 * is freed.
 *
 * Built with -DOKV_SEQSTATE_SEEDS this file is instead the seed tool
 * okv-fuzz-seqstate-seeds DIR: it writes real state files (flat + wrapped
 * ring, a cell sequence with a hole, one with an extra blob) into DIR. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#define OKV_CACHE_INTERNAL /* builds sequences and state images from inside the kv set */
#include "okv_cache_internal.h"
#include "okv_common.h"

static const okv_kv_state_id ID = { 0x5eed1, 0x5eed2 };

static okv_kv *make_set(bool cells) {
    okv_layout l;
    okv_error err = {0};
    if (okv_layout_alloc(&l, 3, 3, &err)) abort();
    int w[3] = { 0, 5, 0 };
    for (int c = 0; c < 3; c++) {
        l.kv_heads[c] = 2;
        l.head_dims[c] = 4;
        l.windows[c] = w[c];
        l.layer_to_cache[c] = c;
    }
    l.prefill_chunk_size = 3;
    l.max_ctx_len = 64;
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = OKV_BF16;
    o.v_dtype = OKV_F32;
    o.initial_capacity = 4;
    o.cells = cells;
    o.max_seqs = cells ? 4 : 0;
    okv_kv *kv = NULL;
    if (okv_kv_create(&l, &o, &kv, &err)) abort();
    okv_layout_free(&l);
    return kv;
}

/* One step of one token on a single set at its length, rows left as they are. */
static okv_status step_single(okv_kv *kv, okv_error *err) {
    int32_t p = kv->seq.length;
    okv_status st = okv_kv_begin_step(kv, &p, 1, err);
    if (!st) okv_kv_commit_step(kv);
    return st;
}

static __attribute__((unused)) void apply_both(const uint8_t *d, size_t n) {
    okv_error err = {0};
    okv_kv *one = make_set(false), *many = make_set(true);
    okv_status st = okv_kv_state_apply(one, &ID, d, n, "fuzz", NULL, NULL, NULL, &err);
    okv_fuzz_require(st || one->seq.length <= one->seq.capacity, "an accepted length fits the capacity");
    okv_fuzz_require(!st || err.message[0], "a refusal carries a message");
    if (!st) {
        okv_status r = okv_kv_rewind(one, one->seq.length, &err);
        okv_fuzz_require(r == OKV_OK, "a loaded set can be rewound to its own length");
        if (one->seq.length < one->seq.capacity) (void)step_single(one, &err);
    }
    int seq = -1;
    void *extra = NULL;
    size_t extra_len = 0;
    st = okv_kv_state_apply(many, &ID, d, n, "fuzz", &seq, &extra, &extra_len, &err);
    if (!st) {
        int32_t len = -1;
        okv_fuzz_require(okv_kv_seq_len(many, seq, &len, &err) == OKV_OK && len >= 0, "the loaded sequence exists");
        okv_fuzz_require(okv_kv_seq_free(many, seq, &err) == OKV_OK, "the loaded sequence can be freed");
        okv_fuzz_require(many->cells->groups[0].n_used == 0, "freeing it frees its cells");
    }
    free(extra);
    okv_kv_free(one);
    okv_kv_free(many);
}

#ifndef OKV_SEQSTATE_SEEDS
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    apply_both(data, size);
    if (size < 104 || size > (1u << 24)) return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    for (int i = 0; i < 8; i++) fixed[56 + i] = (uint8_t)((uint64_t)size >> (8 * i));   /* file_bytes */
    memcpy(fixed + size - 4, "OKVE", 4);
    uint32_t crc = okv_kv_state_crc32(0, fixed, size - 8);
    for (int i = 0; i < 4; i++) fixed[size - 8 + i] = (uint8_t)(crc >> (8 * i));
    apply_both(fixed, size);
    free(fixed);
    return 0;
}
#else
static void fill_single(okv_kv *kv, int32_t len) {
    okv_error err = {0};
    while (kv->seq.length < len) {
        if (step_single(kv, &err)) abort();
        int32_t p = kv->seq.length - 1;
        for (int c = 0; c < kv->n_caches; c++) {
            okv_cache *ca = &kv->caches[c];
            size_t krow = okv_kv_slot_bytes(ca, false), vrow = okv_kv_slot_bytes(ca, true);
            size_t slot = (size_t)(ca->policy.kind == OKV_POLICY_RING ? p % ca->policy.slots : p);
            memset((uint8_t *)ca->k + slot * krow, p + 1, krow);
            memset((uint8_t *)ca->v + slot * vrow, p + 101, vrow);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: okv-fuzz-seqstate-seeds DIR\n"); return 2; }
    okv_error err = {0};
    char *path;
    okv_kv *a = make_set(false);
    fill_single(a, 4);
    path = okv_path_join(argv[1], "flat-ring-4.okvseq");
    if (okv_kv_state_save(a, -1, &ID, NULL, 0, path, &err)) goto fail;
    free(path);
    fill_single(a, 11);   /* the ring (7 slots) wrapped */
    path = okv_path_join(argv[1], "ring-wrapped-11-extra.okvseq");
    if (okv_kv_state_save(a, -1, &ID, "{\"k\":[1,2]}", 11, path, &err)) goto fail;
    free(path);
    okv_kv *b = make_set(true);
    int s0, s1;
    if (okv_kv_seq_new(b, &s0, &err)) goto fail;
    for (int32_t p = 0; p < 9; p++)
        if (okv_kv_begin_batch(b, &s0, &p, 1, &err)) goto fail;
        else okv_kv_commit_step(b);
    if (okv_kv_seq_fork(b, s0, 8, &s1, &err) || okv_kv_seq_rm(b, s1, 1, 3, &err)) goto fail;
    path = okv_path_join(argv[1], "cells-hole-8.okvseq");
    if (okv_kv_state_save(b, s1, &ID, NULL, 0, path, &err)) goto fail;
    free(path);
    okv_kv_free(a);
    okv_kv_free(b);
    return 0;
fail:
    fprintf(stderr, "%s\n", err.message);
    return 1;
}
#endif
