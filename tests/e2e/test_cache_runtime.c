/* The cache as a user drives it through the public API: transactional steps,
 * rewind (incl. the ring bound that a smaller chunk makes tighter), clear,
 * window overrides, ring pools that cost only their window, and two
 * independent caches stepped in interleaved order. Truth is the oracle. */
#include "e2e_util.h"

typedef struct model {
    char dir[256];
    int32_t *ids;
    int n, V;
    float *ref;
} model;

static void model_load(model *m, const char *name) {
    snprintf(m->dir, sizeof m->dir, FIXTURES "%s", name);
    m->n = e2e_ref_tokens(m->dir, &m->ids);
    m->V = 512;
    m->ref = e2e_ref_logits(m->dir, (size_t)m->n * m->V);
}

static void model_free(model *m) { free(m->ids); free(m->ref); }

/* Steps ids[from..to) in chunks against key; checks each row against the oracle. */
static void step_and_check(okv_runner *r, const model *m, int from, int to, int chunk, const char *what) {
    float *logits = malloc(sizeof(float) * (size_t)chunk * m->V);
    okv_error err = {0};
    for (int t = from; t < to; t += chunk) {
        int T = to - t < chunk ? to - t : chunk;
        int32_t pos[64];
        for (int k = 0; k < T; k++) pos[k] = t + k;
        okv_status st = okv_runner_step(r, m->ids + t, pos, T, OKV_LOGITS_ALL, logits, &err);
        CHECKF(st == OKV_OK, "%s: step at %d: %s", what, t, err.message);
        if (st) break;
        double d = e2e_max_diff(logits, m->ref + (size_t)t * m->V, (size_t)T * m->V);
        CHECKF(d <= 1e-4, "%s: rows %d..%d differ from the oracle by %.3g", what, t, t + T - 1, d);
    }
    free(logits);
}

/* Bad steps return errors and change nothing; the sequence then continues
 * exactly as if they had never been tried. */
static void test_transactional(okv_program *p, const model *m) {
    okv_runner *r = e2e_runner_open(p, "tx", NULL, NULL);
    okv_error err = {0};
    step_and_check(r, m, 0, 20, 8, "tx prefix");
    float logits[512 * 8];
    int32_t pos[9] = {25, 26, 27, 28, 29, 30, 31, 32, 33};
    CHECK(okv_runner_step(r, m->ids + 20, pos, 1, OKV_LOGITS_ALL, logits, &err) != OKV_OK); /* gap */
    CHECK(strstr(err.message, "position") != NULL);
    for (int k = 0; k < 9; k++) pos[k] = 20 + k;
    CHECK(okv_runner_step(r, m->ids + 20, pos, 9, OKV_LOGITS_ALL, logits, &err) == OKV_ERR_INVALID); /* > chunk */
    int32_t bad_ids[2] = {m->ids[20], 100000};
    CHECK(okv_runner_step(r, bad_ids, pos, 2, OKV_LOGITS_ALL, logits, &err) == OKV_ERR_INVALID);
    CHECK(strstr(err.message, "100000") != NULL);
    pos[0] = 19;
    CHECK(okv_runner_step(r, m->ids + 19, pos, 1, OKV_LOGITS_ALL, logits, &err) != OKV_OK); /* replays a position */
    CHECK(e2e_cache_length("tx") == 20);
    step_and_check(r, m, 20, 40, 8, "tx after refused steps");
    e2e_runner_close(r);

    /* overflow: capacity 24, a step past it is refused before anything is written */
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.max_capacity = 24;
    r = e2e_runner_open(p, "cap", &co, NULL);
    step_and_check(r, m, 0, 24, 8, "cap");
    for (int k = 0; k < 2; k++) pos[k] = 24 + k;
    CHECK(okv_runner_step(r, m->ids + 24, pos, 2, OKV_LOGITS_ALL, logits, &err) == OKV_ERR_CAPACITY);
    CHECK(e2e_cache_length("cap") == 24);
    CHECK_OK(okv_cache_rewind("cap", 22, &err), &err);
    step_and_check(r, m, 22, 24, 2, "cap after rewind");
    e2e_runner_close(r);
}

/* A ring of S = window + chunk - 1 slots after length L keeps [L - S, L): a
 * rewind target n is served iff n - window + 1 >= L - S, i.e. n >= L - chunk. */
static void test_rewind_ring(const model *m, int chunk) {
    char name[64];
    snprintf(name, sizeof name, "gemma3.chunk%d.okv", chunk);
    char *path = e2e_export(m->dir, name, OKV_F32, chunk);
    okv_program *p;
    okv_error err = {0};
    if (!path || okv_program_open(path, &p, &err)) { free(path); CHECK(0); return; }
    okv_runner *r = e2e_runner_open(p, "ring", NULL, NULL);
    int L = 20;
    step_and_check(r, m, 0, L, chunk, "ring prefix");
    /* L - window + 1 is what a looser rule would accept: it reads overwritten slots */
    if (chunk < 7) {
        CHECK(okv_cache_rewind("ring", L - 8 + 1, &err) != OKV_OK);
        CHECKF(strstr(err.message, "cache") != NULL, "message names the cache: %s", err.message);
    }
    CHECK(okv_cache_rewind("ring", L - chunk - 1, &err) != OKV_OK);
    CHECK(e2e_cache_length("ring") == L);
    CHECK_OK(okv_cache_rewind("ring", L - chunk, &err), &err);
    CHECK(e2e_cache_length("ring") == L - chunk);
    step_and_check(r, m, L - chunk, 40, chunk, "ring after rewind");
    CHECK_OK(okv_cache_clear("ring", &err), &err);
    CHECK(e2e_cache_length("ring") == 0);
    step_and_check(r, m, 0, 40, chunk, "ring after clear");
    e2e_runner_close(r);
    okv_program_free(p);
    free(path);
}

static void test_rewind_flat(okv_program *p, const model *m) {
    okv_runner *r = e2e_runner_open(p, "flat", NULL, NULL);
    okv_error err;
    step_and_check(r, m, 0, 40, 5, "flat");
    CHECK(okv_cache_rewind("flat", 41, &err) != OKV_OK);
    CHECK_OK(okv_cache_rewind("flat", 3, &err), &err);
    step_and_check(r, m, 3, 40, 7, "flat after rewind to 3");
    e2e_runner_close(r);
}

/* Overrides change which keys a query sees: rows before the window are
 * unchanged, later rows must move. */
static void test_window_override(okv_program *p, const model *m, int32_t window, const char *what) {
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.windows = &window;
    co.n_windows = 1;
    e2e_run_opts o;
    e2e_opts_default(&o);
    o.cache = co;
    o.chunk = 4;
    float *got = e2e_run(p, m->ids, m->n, &o);
    if (!got) return;
    double early = e2e_max_diff(got, m->ref, (size_t)8 * m->V);
    double late = e2e_max_diff(got + (size_t)20 * m->V, m->ref + (size_t)20 * m->V, (size_t)20 * m->V);
    CHECKF(early <= 1e-4, "%s: rows < 8 changed by %.3g", what, early);
    CHECKF(late > 1e-2, "%s: rows >= 20 unchanged (%.3g): override ignored", what, late);
    free(got);
    int32_t neg = -1;
    co.windows = &neg;
    okv_error err = {0};
    CHECK(okv_cache_install("neg", p, &co, &err) == OKV_ERR_INVALID);
    CHECK(strstr(err.message, "-1") != NULL);
}

/* Gemma-3 fixture: 5 ring caches (window 8) + 1 flat. Ring pools hold
 * exactly window + chunk - 1 slots whatever the sequence length. */
static void test_ring_bytes(okv_program *p, const model *m) {
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.initial_capacity = 16;
    okv_runner *r = e2e_runner_open(p, "bytes", &co, NULL);
    okv_program_info info;
    okv_program_get_info(p, &info);
    size_t slot = 2 * 32 * sizeof(float) * 2; /* kv_heads * head_dim * f32, K and V */
    size_t ring = 5 * (size_t)(8 + info.prefill_chunk_size - 1) * slot;
    size_t bytes = 0;
    okv_error err;
    step_and_check(r, m, 0, 40, 8, "bytes");
    CHECK_OK(okv_cache_bytes("bytes", &bytes, &err), &err);
    CHECKF(bytes == ring + 64 * slot, "after 40 tokens: %zu bytes, want %zu", bytes, ring + 64 * slot);
    /* 400 more (random) tokens: the flat pool doubles, the rings do not grow */
    int32_t ids[8], pos[8];
    float logits[512];
    for (int t = 40; t < 440; t += 8) {
        for (int k = 0; k < 8; k++) { ids[k] = (t * 7 + k * 13) % 512; pos[k] = t + k; }
        okv_runner_step(r, ids, pos, 8, OKV_LOGITS_LAST, logits, &err);
    }
    CHECK_OK(okv_cache_bytes("bytes", &bytes, &err), &err);
    CHECKF(bytes == ring + 512 * slot, "after 440 tokens: %zu bytes, want %zu", bytes, ring + 512 * slot);
    char line[256];
    CHECK_OK(okv_cache_describe("bytes", line, sizeof line, &err), &err);
    CHECKF(strstr(line, "1 flat + 5 ring(window 8)") != NULL, "describe: %s", line);
    e2e_runner_close(r);
}

/* Two keys, two runners, interleaved steps: caches are independent. */
static void test_two_sequences(okv_program *p, const model *m) {
    okv_runner *a = e2e_runner_open(p, "seq-a", NULL, NULL), *b = e2e_runner_open(p, "seq-b", NULL, NULL);
    for (int t = 0; t < 40; t += 4) {
        step_and_check(a, m, t, t + 4, 4, "seq a");
        if (t % 8 == 0) step_and_check(b, m, t / 2, t / 2 + 4, 4, "seq b");
    }
    step_and_check(b, m, 20, 40, 3, "seq b tail");
    e2e_runner_close(a);
    e2e_runner_close(b);
}

/* A runner made for one logit row serves generation (LAST/NONE) with the
 * same logits, and refuses steps that ask for all rows. */
static void test_max_logit_rows(okv_program *p, const model *m) {
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.max_logit_rows = 1;
    okv_error err = {0};
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("rows", p, NULL, &err), &err);
    CHECK_OK(okv_runner_create(p, "rows", &ro, &r, &err), &err);
    if (!r) return;
    int32_t pos[8];
    float logits[512 * 8];
    for (int k = 0; k < 8; k++) pos[k] = k;
    CHECK(okv_runner_step(r, m->ids, pos, 8, OKV_LOGITS_ALL, logits, &err) == OKV_ERR_INVALID);
    CHECK(strstr(err.message, "max_logit_rows") != NULL);
    CHECK_OK(okv_runner_step(r, m->ids, pos, 7, OKV_LOGITS_NONE, NULL, &err), &err);
    CHECK_OK(okv_runner_step(r, m->ids + 7, pos + 7, 1, OKV_LOGITS_ALL, logits, &err), &err);
    CHECK(e2e_max_diff(logits, m->ref + (size_t)7 * m->V, (size_t)m->V) <= 1e-4);
    for (int k = 0; k < 8; k++) pos[k] = 8 + k;
    CHECK_OK(okv_runner_step(r, m->ids + 8, pos, 8, OKV_LOGITS_LAST, logits, &err), &err);
    CHECK(e2e_max_diff(logits, m->ref + (size_t)15 * m->V, (size_t)m->V) <= 1e-4);
    e2e_runner_close(r);
}

int main(void) {
    model gemma, llama;
    model_load(&gemma, "gemma3-tiny");
    model_load(&llama, "llama32-tiny");
    char *gp = e2e_export(gemma.dir, "gemma3.okv", OKV_F32, 0);
    char *lp = e2e_export(llama.dir, "llama.okv", OKV_F32, 0);
    okv_program *g = NULL, *l = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(gp, &g, &err), &err);
    CHECK_OK(okv_program_open(lp, &l, &err), &err);
    if (g && l) {
        test_transactional(g, &gemma);
        for (int chunk = 1; chunk <= 8; chunk++) test_rewind_ring(&gemma, chunk);
        test_rewind_flat(l, &llama);
        test_window_override(l, &llama, 8, "llama --kv-windows 8");
        test_window_override(g, &gemma, 0, "gemma3 --kv-windows 0");
        test_ring_bytes(g, &gemma);
        test_two_sequences(l, &llama);
        test_max_logit_rows(g, &gemma);
    }
    okv_program_free(g);
    okv_program_free(l);
    free(gp);
    free(lp);
    model_free(&gemma);
    model_free(&llama);
    e2e_cleanup();
    return okv_test_finish();
}
