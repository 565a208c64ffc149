/* The step executor's run-time fusions and row-parallel ops (issue 12
 * part 4, okv_step.c run_rows): rmsnorm, rope with the step's shared
 * angle tables, GLU, add (+ the rmsnorm of its sum as one pass), mul,
 * scale, softcap, slice, embed over row blocks on 2 threads, K and V written
 * on two threads. OKV_STEP_FUSE=all splits every step of 2 rows or more, so
 * the tiny fixtures exercise all of it; OKV_STEP_FUSE=0 runs the planned ops
 * one by one on one thread. Their logits must be equal bit for bit (memcmp),
 * on every fixture architecture (Llama, Qwen2 biases, Qwen3 q/k norms,
 * Gemma-3 two rope tables + ring caches, Gemma-4 per-layer inputs), f32 and
 * q8 weights (a quantized embedding table), for steps of odd sizes (7, 5,
 * 1, 3: partial row blocks) and a batched cell-pool step (the cell K/V
 * write). */
#include "e2e_util.h"

#define N_IDS 16

static int32_t tok(int j) { return (int32_t)(1 + (j * 13 + (j * j) % 7) % 60); }

/* Logits of every row of steps of 7, 5, 1, 3 tokens (then a batch of two
 * sequences when cells), under OKV_STEP_FUSE=mode; [n_rows, vocab]. */
static float *run(okv_program *p, const char *mode, int vocab, int chunk, bool cells, int *n_rows) {
    setenv("OKV_STEP_FUSE", mode, 1);
    okv_error err = {0};
    okv_cache_options co;
    okv_cache_options_default(&co);
    if (cells) { co.mode = OKV_CACHE_CELLS; co.max_seqs = 4; }
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = 2;
    okv_runner *r = NULL;
    float *out = calloc((size_t)2 * N_IDS * vocab, sizeof(float));
    CHECK_OK(okv_cache_install("fuse", p, &co, &err), &err);
    CHECK_OK(okv_runner_create(p, "fuse", &ro, &r, &err), &err);
    unsetenv("OKV_STEP_FUSE");
    int32_t ids[N_IDS], pos[N_IDS];
    for (int j = 0; j < N_IDS; j++) { ids[j] = tok(j); pos[j] = j; }
    int rows = 0;
    if (r && !cells) {
        static const int steps[] = {7, 5, 1, 3};
        for (int i = 0, at = 0; i < 4; at += steps[i], i++) {
            int T = steps[i] < chunk ? steps[i] : chunk;
            CHECK_OK(okv_runner_step(r, ids + at, pos + at, T, OKV_LOGITS_ALL, out + (size_t)rows * vocab, &err), &err);
            rows += T;
        }
    } else if (r) {
        int s0, s1;
        CHECK_OK(okv_seq_new("fuse", &s0, &err), &err);
        CHECK_OK(okv_seq_new("fuse", &s1, &err), &err);
        /* two steps: 5 of s0 interleaved with 2 of s1, then 1 + 1 */
        int32_t bid[7], bseq[7], bpos[7], pick[7];
        for (int step = 0; step < 2; step++) {
            int T = 0;
            for (int t = 0; t < (step ? 2 : 7); t++, T++) {
                bool second = step ? t == 1 : t % 3 == 2;
                int k = second ? (step ? 2 : t / 3) : (step ? 5 : t - t / 3);
                bid[T] = tok(k + (second ? 9 : 0));
                bseq[T] = second ? s1 : s0;
                bpos[T] = k;
                pick[T] = T;
            }
            T = T < chunk ? T : chunk;
            CHECK_OK(okv_runner_step_batch(r, bid, bseq, bpos, T, pick, T, out + (size_t)rows * vocab, &err), &err);
            rows += T;
        }
    }
    okv_runner_free(r);
    okv_cache_remove("fuse", &err);
    *n_rows = rows;
    return out;
}

static void check(const char *fixture, const char *tag, okv_dtype dt, int ql, int chunk) {
    char dir[256], name[256];
    snprintf(dir, sizeof dir, FIXTURES "%s", fixture);
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = dt;
    o.prefill_chunk_size = chunk;
    o.qlinear = ql;
    o.qembedding = ql;
    snprintf(name, sizeof name, "%s.%s.okv", fixture, tag);
    char *path = e2e_path(name);
    okv_error err = {0};
    okv_status st = okv_export(dir, path, &o, &err);
    CHECKF(st == OKV_OK, "export %s: %s", name, err.message);
    okv_program *p = NULL;
    if (!st) CHECK_OK(okv_program_open(path, &p, &err), &err);
    if (p) {
        okv_program_info info;
        okv_program_get_info(p, &info);
        for (int cells = 0; cells < 2; cells++) {
            int n0 = 0, n1 = 0;
            float *ref = run(p, "0", info.vocab_size, chunk, cells, &n0);
            float *fused = run(p, "all", info.vocab_size, chunk, cells, &n1);
            CHECKF(n0 == n1 && n0 > 0, "%s %s: %d vs %d rows", fixture, tag, n0, n1);
            int bad = 0;
            for (int t = 0; t < n0; t++)
                bad += memcmp(ref + (size_t)t * info.vocab_size, fused + (size_t)t * info.vocab_size,
                              sizeof(float) * info.vocab_size) != 0;
            CHECKF(bad == 0, "%s %s %s: %d of %d rows differ fused vs unfused (max %.3g)", fixture, tag,
                   cells ? "cells" : "single", bad, n0, e2e_max_diff(ref, fused, (size_t)n0 * info.vocab_size));
            free(ref);
            free(fused);
        }
        okv_program_free(p);
    }
    free(path);
}

int main(void) {
    static const struct { const char *name; int chunk; bool quant; } fx[] = {
        {"llama32-tiny", 16, true}, {"qwen2-tiny", 16, false}, {"qwen3-tiny", 16, false},
        {"gemma3-tiny", 8, true},   {"gemma4-tiny", 8, false}};
    for (size_t f = 0; f < sizeof fx / sizeof *fx; f++) {
        check(fx[f].name, "f32", OKV_F32, 0, fx[f].chunk);
        if (fx[f].quant) check(fx[f].name, "q8", OKV_F32, 8, fx[f].chunk);
    }
    e2e_cleanup();
    return okv_test_finish();
}
