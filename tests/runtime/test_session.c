/* okv_session (offkv.h) on a generated checkpoint (no oracle needed: every
 * assertion compares a session with a runner built by hand, or another
 * session, or checks a refusal):
 *  - create / free: a session from a path steps like the hand-built
 *    install + runner over the same program (bit for bit), its key answers
 *    the key verbs while it lives and is gone from the registry after free;
 *  - two sessions of one program (okv_session_create_for, and two opens of
 *    one path) are independent: steps interleaved chunk by chunk give each
 *    the logits it gets alone, lengths and clears do not cross, freeing one
 *    leaves the other working;
 *  - a cell-pool session answers the okv_seq_* verbs on its key;
 *  - errors name what is at fault (the missing file, the cache option) and
 *    a failed create leaves no key and no session behind.
 * Run under ASan too (the suite's sanitizer build), which catches a leak or
 * double free in the create / free paths. */
#include "e2e/e2e_util.h"
#include "mkckpt.h"
#include "okv_cache.h" /* okv_registry_count: what a failed create leaves behind */

#define CHUNK 4
#define N_TOK 16
#define MAX_V 1024

static int V;
static int32_t ids_a[N_TOK], ids_b[N_TOK];

/* A generated llama checkpoint exported to <tmp>/name.okv (f32, chunk 4,
 * max_ctx 64); returns its path (caller frees) or NULL (reported). */
static char *make_program_file(const char *name) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.seed = 5;
    char *dir = e2e_path(name), *out = malloc(320);
    snprintf(out, 320, "%s.okv", dir);
    okv_error err = {0};
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = OKV_F32;
    o.prefill_chunk_size = CHUNK;
    o.max_ctx_len = 64;
    okv_status st = okv_mkckpt_write(&s, dir, &err);
    if (!st) st = okv_export(dir, out, &o, &err);
    CHECKF(st == OKV_OK, "%s: %s", name, err.message);
    free(dir);
    if (st) { free(out); return NULL; }
    V = s.vocab;
    return out;
}

static okv_session_options two_threads(void) {
    okv_session_options o;
    okv_session_options_default(&o);
    o.runner.n_threads = 2;
    return o;
}

/* Steps ids[from, from + T) at their positions on r, LAST row into logits. */
static okv_status step(okv_runner *r, const int32_t *ids, int from, int T, float *logits, okv_error *err) {
    int32_t pos[CHUNK];
    for (int k = 0; k < T; k++) pos[k] = from + k;
    return okv_runner_step(r, ids + from, pos, T, OKV_LOGITS_LAST, logits, err);
}

/* The last-row logits after each chunk of ids on r: out [N_TOK / CHUNK, V]. */
static void run_alone(okv_runner *r, const int32_t *ids, float *out) {
    okv_error err = {0};
    for (int c = 0; c < N_TOK / CHUNK; c++) CHECK_OK(step(r, ids, c * CHUNK, CHUNK, out + (size_t)c * V, &err), &err);
}

static bool key_exists(const char *key) {
    int len;
    okv_error err = {0};
    return okv_cache_length(key, &len, &err) == OKV_OK;
}

/* A session over a path steps exactly like install + runner by hand, and
 * its key lives exactly as long as it does. */
static void test_create_free(const char *path, const okv_program *p) {
    static float hand[N_TOK / CHUNK * MAX_V], sess[N_TOK / CHUNK * MAX_V];
    okv_cache_options co;
    okv_cache_options_default(&co);
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = 2;
    okv_runner *r = e2e_runner_open(p, "by-hand", &co, &ro);
    if (!r) return;
    run_alone(r, ids_a, hand);
    e2e_runner_close(r);

    int before = okv_registry_count();
    okv_session_options o = two_threads();
    okv_session *s = NULL;
    okv_error err = {0};
    CHECK_OK(okv_session_create(path, &o, &s, &err), &err);
    if (!s) return;
    char key[128];
    snprintf(key, sizeof key, "%s", okv_session_cache_key(s));
    CHECK(okv_registry_count() == before + 1);
    CHECK(okv_runner_program(okv_session_runner(s)) == okv_session_program(s));
    CHECK(okv_session_program(s) != p); /* its own open of the file */
    CHECKF(!strcmp(okv_runner_cache_key(okv_session_runner(s)), key), "runner key %s, session key %s",
           okv_runner_cache_key(okv_session_runner(s)), key);
    run_alone(okv_session_runner(s), ids_a, sess);
    CHECKF(!memcmp(hand, sess, sizeof(float) * (size_t)(N_TOK / CHUNK) * V),
           "session logits differ from install + runner: max diff %g",
           e2e_max_diff(hand, sess, (size_t)(N_TOK / CHUNK) * V));
    CHECK(e2e_cache_length(key) == N_TOK);
    okv_session_free(s);
    CHECKF(!key_exists(key), "key %s still installed after okv_session_free", key);
    CHECK(okv_registry_count() == before);
    okv_session_free(NULL);
}

/* Sessions a and b stepped chunk by chunk in turn (a over ids_a, b over
 * ids_b) give what each gives alone (want_a, want_b). */
static void interleave(okv_session *a, okv_session *b, const float *want_a, const float *want_b) {
    static float got_a[N_TOK / CHUNK * MAX_V], got_b[N_TOK / CHUNK * MAX_V];
    okv_error err = {0};
    for (int c = 0; c < N_TOK / CHUNK; c++) {
        CHECK_OK(step(okv_session_runner(a), ids_a, c * CHUNK, CHUNK, got_a + (size_t)c * V, &err), &err);
        CHECK_OK(step(okv_session_runner(b), ids_b, c * CHUNK, CHUNK, got_b + (size_t)c * V, &err), &err);
    }
    size_t n = (size_t)(N_TOK / CHUNK) * V;
    CHECKF(!memcmp(want_a, got_a, sizeof(float) * n), "session a interleaved with b: max diff %g",
           e2e_max_diff(want_a, got_a, n));
    CHECKF(!memcmp(want_b, got_b, sizeof(float) * n), "session b interleaved with a: max diff %g",
           e2e_max_diff(want_b, got_b, n));
}

static void test_independent(const char *path, const okv_program *p) {
    static float want_a[N_TOK / CHUNK * MAX_V], want_b[N_TOK / CHUNK * MAX_V];
    okv_session_options o = two_threads();
    okv_session *ref = NULL, *a = NULL, *b = NULL;
    okv_error err = {0};
    CHECK_OK(okv_session_create_for(p, &o, &ref, &err), &err);
    if (!ref) return;
    run_alone(okv_session_runner(ref), ids_a, want_a);
    CHECK_OK(okv_cache_clear(okv_session_cache_key(ref), &err), &err);
    run_alone(okv_session_runner(ref), ids_b, want_b);
    okv_session_free(ref);

    /* two sessions over one open program */
    CHECK_OK(okv_session_create_for(p, &o, &a, &err), &err);
    CHECK_OK(okv_session_create_for(p, &o, &b, &err), &err);
    if (a && b) {
        CHECK(okv_session_program(a) == p && okv_session_program(b) == p);
        CHECKF(strcmp(okv_session_cache_key(a), okv_session_cache_key(b)), "both sessions on key %s",
               okv_session_cache_key(a));
        interleave(a, b, want_a, want_b);
        /* a clear of b leaves a's sequence; freeing a leaves b stepping */
        CHECK_OK(okv_cache_clear(okv_session_cache_key(b), &err), &err);
        CHECK(e2e_cache_length(okv_session_cache_key(a)) == N_TOK);
        CHECK(e2e_cache_length(okv_session_cache_key(b)) == 0);
        okv_session_free(a);
        a = NULL;
        float row[MAX_V];
        CHECK_OK(step(okv_session_runner(b), ids_b, 0, CHUNK, row, &err), &err);
        CHECKF(!memcmp(row, want_b, sizeof(float) * (size_t)V), "b after a was freed: max diff %g",
               e2e_max_diff(row, want_b, (size_t)V));
    }
    okv_session_free(a);
    okv_session_free(b);

    /* two opens of one path */
    a = b = NULL;
    CHECK_OK(okv_session_create(path, &o, &a, &err), &err);
    CHECK_OK(okv_session_create(path, &o, &b, &err), &err);
    if (a && b) {
        CHECK(okv_session_program(a) != okv_session_program(b));
        interleave(a, b, want_a, want_b);
    }
    okv_session_free(a);
    okv_session_free(b);
}

/* A cell-pool session: the sequence verbs work on its key. */
static void test_cells(const okv_program *p) {
    okv_session_options o = two_threads();
    o.cache.mode = OKV_CACHE_CELLS;
    o.cache.max_seqs = 4;
    okv_session *s = NULL;
    okv_error err = {0};
    CHECK_OK(okv_session_create_for(p, &o, &s, &err), &err);
    if (!s) return;
    const char *key = okv_session_cache_key(s);
    int a = -1, b = -1, len = -1;
    CHECK_OK(okv_seq_new(key, &a, &err), &err);
    int32_t seqs[CHUNK] = {a, a, a, a}, pos[CHUNK] = {0, 1, 2, 3}, rows[1] = {CHUNK - 1};
    float row[MAX_V];
    CHECK_OK(okv_runner_step_batch(okv_session_runner(s), ids_a, seqs, pos, CHUNK, rows, 1, row, &err), &err);
    CHECK_OK(okv_seq_fork(key, a, 2, &b, &err), &err);
    CHECK_OK(okv_seq_len(key, b, &len, &err), &err);
    CHECK(len == 2);
    okv_cells_info ci;
    CHECK_OK(okv_cache_cells(key, &ci, &err), &err);
    CHECK(ci.n_seqs == 2 && ci.max_seqs == 4);
    /* a single-sequence verb is refused on it, as on any cell key */
    CHECK(okv_cache_length(key, &len, &err) == OKV_ERR_STATE);
    okv_session_free(s);
}

/* Errors name the file or option at fault; a failed create leaves nothing. */
static void test_errors(const okv_program *p) {
    int before = okv_registry_count();
    okv_session *s = (okv_session *)&s; /* must be set to NULL on failure */
    okv_error err = {0};
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no-such-program.okv", e2e_tmp());
    CHECK(okv_session_create(missing, NULL, &s, &err) != OKV_OK);
    CHECKF(strstr(err.message, "no-such-program.okv"), "missing file: '%s'", err.message);
    CHECK(s == NULL);

    s = (okv_session *)&s;
    CHECK(okv_session_create(NULL, NULL, &s, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "no program path"), "%s", err.message);
    CHECK(s == NULL);
    CHECK(okv_session_create_for(NULL, NULL, &s, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "no program given"), "%s", err.message);

    okv_session_options o = two_threads();
    o.cache.max_seqs = 8; /* needs OKV_CACHE_CELLS */
    s = (okv_session *)&s;
    CHECK(okv_session_create_for(p, &o, &s, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "max_seqs/n_cells need mode OKV_CACHE_CELLS"), "%s", err.message);
    CHECK(s == NULL);

    okv_session_options_default(&o);
    o.cache.mode = (okv_cache_mode)7;
    CHECK(okv_session_create_for(p, &o, &s, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "unknown mode 7"), "%s", err.message);

    okv_session_options_default(&o);
    o.program.weights = (okv_weights_memory)9;
    CHECK(okv_session_create(missing, &o, &s, &err) == OKV_ERR_INVALID);
    CHECKF(strstr(err.message, "weights must be AUTO, MAPPED or HUGE_PAGES"), "%s", err.message);
    CHECKF(okv_registry_count() == before, "%d keys installed after failed creates, %d before", okv_registry_count(),
           before);
}

int main(void) {
    char *path = make_program_file("llama");
    okv_program *p = NULL;
    okv_error err = {0};
    if (path) CHECK_OK(okv_program_open(path, &p, &err), &err);
    CHECK(V > 0 && V <= MAX_V);
    if (p && V > 0 && V <= MAX_V) {
        uint64_t x = 0x2545f4914f6cdd1du;   /* fixed pseudo-random ids in [0, V) */
        for (int i = 0; i < N_TOK; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            ids_a[i] = (int32_t)((x >> 33) % (uint64_t)V);
            x = x * 6364136223846793005u + 1442695040888963407u;
            ids_b[i] = (int32_t)((x >> 33) % (uint64_t)V);
        }
        test_create_free(path, p);
        test_independent(path, p);
        test_cells(p);
        test_errors(p);
    }
    okv_program_free(p);
    free(path);
    e2e_cleanup();
    return okv_test_finish();
}
