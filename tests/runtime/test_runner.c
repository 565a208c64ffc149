/* The runner's own rules, checked directly on generated checkpoints (no
 * oracle needed: every assertion compares the runtime with itself under a
 * different path, or checks a refusal):
 *  - positions: a step continues the sequence exactly; T in [1, chunk];
 *  - transactional steps: every refused step (bad position, id outside the
 *    vocabulary, too many tokens, too many logit rows, past the capacity)
 *    leaves the cache as it was, so the rest of the sequence produces the
 *    same bits as a sequence that never saw the refusal — on a ring cache,
 *    where a stray write would clobber history the next steps read;
 *  - logit rows: ALL's last row and LAST agree to rounding (ROW_TOL), the
 *    step after NONE steps bit for bit; max_logit_rows bounds only ALL;
 *  - chunking: whole chunks and one token at a time agree closely;
 *  - binding: a runner refuses a cache key built for another layout or a
 *    smaller step. */
#include "e2e/e2e_util.h"
#include "mkckpt.h"

#define CHUNK 4
#define N_TOK 24
#define MAX_V 1024
/* LAST computes the head over one row, ALL over T: the matmul kernel may
 * sum in another order for a different row count, so those two agree to
 * rounding, not bit for bit (everything else here is compared bitwise). */
#define ROW_TOL 1e-5

static int V;                      /* smallest vocabulary of the generated models */
static int32_t ids[N_TOK];
/* logits of two runs that must agree, [N_TOK, V] each, and a step's rows */
static float want[N_TOK * MAX_V], got[N_TOK * MAX_V], step_rows[CHUNK * MAX_V];

/* Writes a generated checkpoint of arch into the test's temporary directory
 * and exports it (f32, chunk, max_ctx 64); returns the opened program or NULL (reported). */
static okv_program *make_program(okv_mkckpt_arch arch, const char *name, int chunk) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, arch);
    s.seed = 11;
    if (arch == OKV_MK_GEMMA3) { s.window = 6; s.sliding_pattern = 3; }
    char *dir = e2e_path(name), out[300];
    snprintf(out, sizeof out, "%s.okv", dir);
    okv_error err = {0};
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = OKV_F32;
    o.prefill_chunk_size = chunk;
    o.max_ctx_len = 64;
    okv_program *p = NULL;
    okv_status st = okv_mkckpt_write(&s, dir, &err);
    if (!st) st = okv_export(dir, out, &o, &err);
    if (!st) st = okv_program_open(out, &p, &err);
    CHECKF(st == OKV_OK, "%s: %s", name, err.message);
    free(dir);
    if (p && (V == 0 || s.vocab < V)) V = s.vocab;
    return p;
}

/* Installs key for p (capacity 0 = the program's) and opens a runner on it. */
static okv_runner *open_runner(okv_program *p, const char *key, int capacity, int max_logit_rows) {
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.max_capacity = capacity;
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = 2;
    ro.max_logit_rows = max_logit_rows;
    return e2e_runner_open(p, key, &co, &ro);
}

/* Steps ids[from, from+T) at their own positions. */
static okv_status step_at(okv_runner *r, int from, int T, okv_logits_rows rows, float *logits, okv_error *err) {
    int32_t pos[CHUNK * 2];
    for (int k = 0; k < T; k++) pos[k] = from + k;
    return okv_runner_step(r, ids + from, pos, T, rows, logits, err);
}

/* Runs ids[from, to) in chunks of `chunk` with LAST rows; the logits after
 * each step go to out[step end - 1] ([N_TOK, V]). */
static void run_last(okv_runner *r, int from, int to, int chunk, float *out) {
    okv_error err = {0};
    for (int t = from; t < to; t += chunk) {
        int T = to - t < chunk ? to - t : chunk;
        CHECK_OK(step_at(r, t, T, OKV_LOGITS_LAST, out + (size_t)(t + T - 1) * V, &err), &err);
    }
}

static void test_positions(okv_program *p) {
    okv_runner *r = open_runner(p, "pos", 0, 0);
    if (!r) return;
    okv_error err = {0};
    float logits[MAX_V * CHUNK];
    int32_t pos[CHUNK + 1] = {1, 2, 3, 4, 5};
    CHECK(okv_runner_step(r, ids, pos, 1, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "positions[0] = 1, expected 0"), "%s", err.message);
    CHECK(okv_runner_step(r, ids, pos, 0, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "step of 0 tokens: must be 1..4"), "%s", err.message);
    CHECK(okv_runner_step(r, ids, pos, CHUNK + 1, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECK(okv_runner_step(r, ids, NULL, 1, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECK_OK(step_at(r, 0, 3, OKV_LOGITS_LAST, logits, &err), &err);
    int32_t replay[1] = {2}, gap[1] = {4}, unordered[2] = {4, 3}, dup[2] = {3, 3};
    CHECK(okv_runner_step(r, ids, replay, 1, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECK(okv_runner_step(r, ids, gap, 1, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "positions[0] = 4, expected 3"), "%s", err.message);
    CHECK(okv_runner_step(r, ids, unordered, 2, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECK(okv_runner_step(r, ids, dup, 2, OKV_LOGITS_LAST, logits, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "positions[1] = 3, expected 4"), "%s", err.message);
    CHECK(e2e_cache_length("pos") == 3);
    CHECK_OK(step_at(r, 3, 2, OKV_LOGITS_LAST, logits, &err), &err);
    CHECK(e2e_cache_length("pos") == 5);
    e2e_runner_close(r);
}

/* Refused steps in the middle of a sequence on a ring cache (window 6, 9
 * slots) change nothing: the logits after them equal, bit for bit, those of
 * a sequence that never tried them. */
static void transactional_run(okv_runner *clean, okv_runner *r) {
    float *scratch = step_rows;
    run_last(clean, 0, N_TOK, CHUNK, want);
    okv_error err = {0};
    for (int t = 0; t < N_TOK; t += CHUNK) {
        /* before each real step, every kind of refusal */
        int32_t pos[CHUNK], bad[CHUNK];
        for (int k = 0; k < CHUNK; k++) { pos[k] = t + k; bad[k] = ids[t + k]; }
        bad[CHUNK - 1] = V;   /* the last id is outside the vocabulary */
        CHECK(okv_runner_step(r, bad, pos, CHUNK, OKV_LOGITS_LAST, scratch, &err) == OKV_ERR_INVALID);
        CHECKF(strstr(err.message, "outside the vocabulary"), "%s", err.message);
        pos[0] = t + 1;
        CHECK(okv_runner_step(r, ids + t, pos, CHUNK, OKV_LOGITS_LAST, scratch, &err) == OKV_ERR_INVALID);
        pos[0] = t;
        CHECK(okv_runner_step(r, ids + t, pos, CHUNK, OKV_LOGITS_ALL, scratch, &err) == OKV_ERR_INVALID);
        CHECKF(strstr(err.message, "max_logit_rows"), "%s", err.message);
        if (t > 0) CHECK(step_at(r, t - 1, 1, OKV_LOGITS_LAST, scratch, &err) == OKV_ERR_INVALID);
        CHECK(e2e_cache_length("tx") == t);
        CHECK_OK(step_at(r, t, CHUNK, OKV_LOGITS_LAST, got + (size_t)(t + CHUNK - 1) * V, &err), &err);
    }
    CHECK(memcmp(want, got, sizeof(float) * (size_t)N_TOK * V) == 0);
    size_t b1 = 0, b2 = 0;
    CHECK_OK(okv_cache_bytes("clean", &b1, &err), &err);
    CHECK_OK(okv_cache_bytes("tx", &b2, &err), &err);
    CHECK(b1 == b2);
}

static void test_transactional(okv_program *p) {
    okv_runner *clean = open_runner(p, "clean", 0, 0), *r = open_runner(p, "tx", 0, 1);
    if (clean && r) transactional_run(clean, r);
    e2e_runner_close(clean);
    e2e_runner_close(r);
}


/* A step past the capacity is refused before anything is written; a rewind
 * and the same tokens then reproduce the first run's logits. */
static void test_capacity(okv_program *p) {
    okv_runner *r = open_runner(p, "cap", 10, 0);
    if (!r) return;
    float a[MAX_V], b[MAX_V], scratch[MAX_V * CHUNK];
    okv_error err = {0};
    CHECK_OK(step_at(r, 0, 4, OKV_LOGITS_LAST, scratch, &err), &err);
    CHECK_OK(step_at(r, 4, 4, OKV_LOGITS_LAST, scratch, &err), &err);
    CHECK_OK(step_at(r, 8, 2, OKV_LOGITS_LAST, a, &err), &err);
    CHECK(step_at(r, 10, 1, OKV_LOGITS_LAST, scratch, &err) == OKV_ERR_CAPACITY && e2e_cache_length("cap") == 10);
    CHECK_OK(okv_cache_rewind("cap", 8, &err), &err);
    CHECK(step_at(r, 8, 3, OKV_LOGITS_LAST, scratch, &err) == OKV_ERR_CAPACITY && e2e_cache_length("cap") == 8);
    CHECK_OK(step_at(r, 8, 2, OKV_LOGITS_LAST, b, &err), &err);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)V) == 0);
    e2e_runner_close(r);
}

/* ALL, LAST and NONE are three views of one computation. */
static void rows_agree_run(okv_runner *all, okv_runner *last, okv_runner *none) {
    float *one = want, *after = got;
    okv_error err = {0};
    for (int t = 0; t + CHUNK < N_TOK; t += CHUNK) {
        CHECK_OK(step_at(all, t, CHUNK, OKV_LOGITS_ALL, step_rows, &err), &err);
        CHECK_OK(step_at(last, t, CHUNK, OKV_LOGITS_LAST, one, &err), &err);
        double d = e2e_max_diff(step_rows + (size_t)(CHUNK - 1) * V, one, (size_t)V);
        CHECKF(d <= ROW_TOL, "step at %d: ALL's last row and LAST differ by %.3g", t, d);
        CHECK_OK(step_at(none, t, CHUNK, OKV_LOGITS_NONE, NULL, &err), &err);
    }
    /* the cache NONE filled serves the next token exactly as the others do */
    int t = N_TOK - CHUNK;
    CHECK_OK(step_at(none, t, 1, OKV_LOGITS_LAST, after, &err), &err);
    CHECK_OK(step_at(all, t, 1, OKV_LOGITS_ALL, one, &err), &err);
    CHECK(memcmp(after, one, sizeof(float) * (size_t)V) == 0);
    CHECK(e2e_cache_length("all") == t + 1 && e2e_cache_length("none") == t + 1);
}

static void test_rows_agree(okv_program *p) {
    okv_runner *all = open_runner(p, "all", 0, 0), *last = open_runner(p, "last", 0, 0);
    okv_runner *none = open_runner(p, "none", 0, 0);
    if (all && last && none) rows_agree_run(all, last, none);
    e2e_runner_close(all);
    e2e_runner_close(last);
    e2e_runner_close(none);
}


/* max_logit_rows = 2 bounds ALL steps only; within it, rows equal an
 * unbounded runner's. */
static void test_max_logit_rows(okv_program *p) {
    okv_runner *small = open_runner(p, "small", 0, 2), *big = open_runner(p, "big", 0, 0);
    float *a = want, *b = got;
    okv_error err = {0};
    if (!small || !big) goto out;
    CHECK(step_at(small, 0, 3, OKV_LOGITS_ALL, a, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "step of 3 tokens asks for all logit rows, but this runner was created for at most 2"),
           "%s", err.message);
    CHECK(e2e_cache_length("small") == 0);
    CHECK_OK(step_at(small, 0, 2, OKV_LOGITS_ALL, a, &err), &err);
    CHECK_OK(step_at(big, 0, 2, OKV_LOGITS_ALL, b, &err), &err);
    CHECK(memcmp(a, b, sizeof(float) * 2 * (size_t)V) == 0);
    CHECK_OK(step_at(small, 2, CHUNK, OKV_LOGITS_LAST, a, &err), &err);
    CHECK_OK(step_at(big, 2, CHUNK, OKV_LOGITS_ALL, b, &err), &err);
    double d = e2e_max_diff(a, b + (size_t)(CHUNK - 1) * V, (size_t)V);
    CHECKF(d <= ROW_TOL, "LAST vs ALL's last row: %.3g", d);
out:
    e2e_runner_close(small);
    e2e_runner_close(big);
}

/* One token at a time and whole chunks differ only by float summation order. */
static void test_chunking(okv_program *p) {
    okv_runner *r1 = open_runner(p, "c1", 0, 0), *r4 = open_runner(p, "c4", 0, 0);
    if (r1 && r4) {
        run_last(r1, 0, N_TOK, 1, want);
        run_last(r4, 0, N_TOK, CHUNK, got);
        double d = 0;
        for (int t = CHUNK - 1; t < N_TOK; t += CHUNK)
            d = fmax(d, e2e_max_diff(want + (size_t)t * V, got + (size_t)t * V, (size_t)V));
        CHECKF(d <= 1e-4, "chunk 1 vs %d: max abs diff %.3g", CHUNK, d);
    }
    e2e_runner_close(r1);
    e2e_runner_close(r4);
}

/* A runner binds only to caches built for its layout; caches with a
 * smaller step than the program's chunk cap the runner's steps at theirs. */
static void test_binding(okv_program *gemma, okv_program *llama, okv_program *gemma_big_chunk) {
    okv_error err = {0};
    okv_runner *r = NULL;
    CHECK(okv_runner_create(gemma, "no-such-key", NULL, &r, &err) != OKV_OK && !r);
    CHECKF(strstr(err.message, "no-such-key"), "%s", err.message);
    CHECK_OK(okv_cache_install("g", gemma, NULL, &err), &err);
    CHECK(okv_runner_create(llama, "g", NULL, &r, &err) == OKV_ERR_INVALID && !r);
    CHECKF(strstr(err.message, "cache key 'g' was built for a different layout than this program"), "%s", err.message);
    CHECK_OK(okv_runner_create(gemma_big_chunk, "g", NULL, &r, &err), &err);
    int32_t ids[CHUNK + 1] = {0}, pos[CHUNK + 1];
    for (int t = 0; t <= CHUNK; t++) pos[t] = t;
    CHECK(okv_runner_step(r, ids, pos, CHUNK + 1, OKV_LOGITS_NONE, NULL, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "max_step"), "%s", err.message);
    CHECK_OK(okv_runner_step(r, ids, pos, CHUNK, OKV_LOGITS_NONE, NULL, &err), &err);
    okv_runner_free(r);
    r = NULL;
    CHECK_OK(okv_cache_remove("g", &err), &err);
}

int main(void) {
    okv_program *gemma = make_program(OKV_MK_GEMMA3, "gemma3", CHUNK);
    okv_program *llama = make_program(OKV_MK_LLAMA, "llama", CHUNK);
    okv_program *gemma6 = make_program(OKV_MK_GEMMA3, "gemma3-chunk6", 6);
    CHECK(V > 0 && V <= MAX_V);
    if (gemma && llama && gemma6 && V > 0 && V <= MAX_V) {
        uint64_t x = 0x9e3779b97f4a7c15u;   /* fixed pseudo-random ids in [0, V) */
        for (int i = 0; i < N_TOK; i++) { x = x * 6364136223846793005u + 1442695040888963407u; ids[i] = (int32_t)((x >> 33) % (uint64_t)V); }
        test_positions(gemma);
        test_transactional(gemma);
        test_capacity(llama);
        test_rows_agree(gemma);
        test_max_logit_rows(llama);
        test_chunking(gemma);
        test_chunking(llama);
        test_binding(gemma, llama, gemma6);
    }
    okv_program_free(gemma);
    okv_program_free(llama);
    okv_program_free(gemma6);
    e2e_cleanup();
    return okv_test_finish();
}
