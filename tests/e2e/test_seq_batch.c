/* Many sequences in one cell-pool cache, stepped together, through the
 * public API. The truth for each sequence is the same tokens run alone on a
 * single-sequence key (one token per step): every batched row must match it
 * within 1e-5 with the same argmax. Programs: flat (Llama), sliding window
 * (Gemma-3, window 8: the sequences run through several windows, so
 * windowed cells are dropped and reused) and KV sharing (Gemma-4). Then
 * fork-and-diverge, rm at the end and in the middle, a batch refused for
 * want of cells or for a bad position (nothing changes), and reuse after
 * okv_seq_free. */
#include "e2e_util.h"

#define V 512
#define N_SEQ 4
#define LEN 44
/* Plain kernels: matmul rows do not depend on the step size, so the only
 * difference left is the attention's online-softmax blocking (a sequence's
 * cells are several runs when other sequences' cells sit between them, and
 * the kernel starts a new key block at each run): 1e-5 of the row's scale.
 * Default (SIMD) kernels: a row's matmul depends on T as it does for one
 * sequence stepped in different chunks (up to 1e-4 on Gemma-4, whose
 * attention scale is 1); same argmax, 1e-4 of the scale (measured: under
 * 1e-5 of it for all three). */
static okv_runner_options g_ro;
static double g_tol;
static double g_worst;   /* largest difference seen, relative to the row's scale */

typedef struct prog {
    okv_program *p;
    int chunk;
    const char *name;
} prog;

/* Token j of test sequence k (all < V, different per sequence). */
static int32_t tok(int k, int j) { return (int32_t)((j * 37 + k * 101 + (j * j) % 13 + 3) % V); }

static int argmax(const float *x) {
    int best = 0;
    for (int i = 1; i < V; i++) if (x[i] > x[best]) best = i;
    return best;
}

/* Logits [n, V] of ids run alone, one token per step, on a fresh single key. */
static float *run_alone(const prog *g, const int32_t *ids, int n) {
    okv_error err = {0};
    float *out = malloc(sizeof(float) * (size_t)n * V);
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("alone", g->p, NULL, &err), &err);
    CHECK_OK(okv_runner_create(g->p, "alone", &g_ro, &r, &err), &err);
    for (int t = 0; r && t < n; t++) {
        int32_t pos = t;
        CHECK_OK(okv_runner_step(r, ids + t, &pos, 1, OKV_LOGITS_LAST, out + (size_t)t * V, &err), &err);
    }
    okv_runner_free(r);
    okv_cache_remove("alone", &err);
    return out;
}

static void check_row(const prog *g, const float *got, const float *want, const char *what, int seq, int pos, int *bad) {
    double d = e2e_max_diff(got, want, V), scale = 1.0;
    for (int i = 0; i < V; i++) if (fabs(want[i]) > scale) scale = fabs(want[i]);
    if (d / scale > g_worst) g_worst = d / scale;
    bool same = argmax(got) == argmax(want);
    if (d > g_tol * scale || !same) {
        if (*bad < 5)
            fprintf(stderr, "%s %s: sequence %d position %d differs by %.3g (scale %.3g, argmax %d vs %d)\n", g->name,
                    what, seq, pos, d, scale, argmax(got), argmax(want));
        (*bad)++;
    }
}

static okv_runner *cells_runner(const prog *g, const char *key, int n_cells, int max_seqs) {
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.mode = OKV_CACHE_CELLS;
    co.max_seqs = max_seqs;
    co.n_cells = n_cells;
    co.initial_capacity = 16;   /* growth happens during the test */
    okv_error err = {0};
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install(key, g->p, &co, &err), &err);
    CHECK_OK(okv_runner_create(g->p, key, &g_ro, &r, &err), &err);
    return r;
}

static void close_cells(okv_runner *r, const char *key) {
    okv_error err;
    okv_runner_free(r);
    CHECK_OK(okv_cache_remove(key, &err), &err);
}

/* Steps N_SEQ sequences of LEN tokens together: each step takes a varying
 * number of tokens from each sequence (prefill chunks and decode tokens
 * mixed, up to the chunk), logits for every row. */
static void test_batched(const prog *g) {
    float *alone[N_SEQ];
    int32_t ids[N_SEQ][LEN];
    for (int k = 0; k < N_SEQ; k++) {
        for (int j = 0; j < LEN; j++) ids[k][j] = tok(k, j);
        alone[k] = run_alone(g, ids[k], LEN);
    }
    okv_runner *r = cells_runner(g, "batch", 0, 8);
    okv_error err = {0};
    int seq[N_SEQ], done[N_SEQ] = {0}, bad = 0, steps = 0;
    for (int k = 0; k < N_SEQ; k++) CHECK_OK(okv_seq_new("batch", &seq[k], &err), &err);
    float *logits = malloc(sizeof(float) * (size_t)g->chunk * V);
    uint64_t rng = 12345;
    while (r) {
        int32_t bid[64], bseq[64], bpos[64], rows[64], owner[64];
        int T = 0;
        for (int k = 0; k < N_SEQ && T < g->chunk; k++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            int want = 1 + (int)(rng % 5);
            for (int i = 0; i < want && done[k] + i < LEN && T < g->chunk; i++, T++) {
                bid[T] = ids[k][done[k] + i];
                bseq[T] = seq[k];
                bpos[T] = done[k] + i;
                owner[T] = k;
                rows[T] = T;
            }
        }
        if (T == 0) break;
        okv_status st = okv_runner_step_batch(r, bid, bseq, bpos, T, rows, T, logits, &err);
        CHECKF(st == OKV_OK, "%s batched step: %s", g->name, err.message);
        if (st) break;
        for (int t = 0; t < T; t++) {
            int k = owner[t];
            check_row(g, logits + (size_t)t * V, alone[k] + (size_t)bpos[t] * V, "batched", k, bpos[t], &bad);
            done[k] = bpos[t] + 1;
        }
        steps++;
    }
    CHECKF(bad == 0, "%s: %d batched rows differ from the sequences run alone", g->name, bad);
    int len = -1;
    CHECK_OK(okv_seq_len("batch", seq[2], &len, &err), &err);
    CHECK(len == LEN);
    printf("%s: %d sequences x %d tokens in %d batched steps, every row as run alone\n", g->name, N_SEQ, LEN, steps);
    free(logits);
    close_cells(r, "batch");
    for (int k = 0; k < N_SEQ; k++) free(alone[k]);
}

/* Steps one sequence's tokens[from, to) in chunks (logits of all rows), checking them against want. */
static void step_seq(const prog *g, okv_runner *r, int s, const int32_t *ids, int from, int to, const float *want,
                     const char *what, int *bad) {
    float *logits = malloc(sizeof(float) * (size_t)g->chunk * V);
    okv_error err = {0};
    for (int t = from; t < to; t += g->chunk) {
        int T = to - t < g->chunk ? to - t : g->chunk;
        int32_t seqs[64], pos[64], rows[64];
        for (int i = 0; i < T; i++) { seqs[i] = s; pos[i] = t + i; rows[i] = i; }
        okv_status st = okv_runner_step_batch(r, ids + t, seqs, pos, T, rows, T, logits, &err);
        CHECKF(st == OKV_OK, "%s %s: %s", g->name, what, err.message);
        if (st) break;
        for (int i = 0; want && i < T; i++) check_row(g, logits + (size_t)i * V, want + (size_t)(t + i) * V, what, s, t + i, bad);
    }
    free(logits);
}

static okv_cells_info cells_of(const char *key) {
    okv_cells_info ci = {0};
    okv_error err;
    CHECK_OK(okv_cache_cells(key, &ci, &err), &err);
    return ci;
}

/* Fork at P, both continue differently; truncate one and continue again. */
static void test_fork_rm(const prog *g) {
    enum { P = 12, X = 20 };
    int32_t a[P + X], b[P + X], c[P + X];
    for (int j = 0; j < P + X; j++) {
        a[j] = tok(0, j);
        b[j] = j < P ? a[j] : tok(1, j);
        c[j] = j < 6 ? a[j] : tok(2, j);
    }
    float *wa = run_alone(g, a, P + X), *wb = run_alone(g, b, P + X), *wc = run_alone(g, c, P + X);
    okv_runner *r = cells_runner(g, "fork", 0, 4);
    okv_error err = {0};
    int sa = -1, sb = -1, bad = 0;
    CHECK_OK(okv_seq_new("fork", &sa, &err), &err);
    step_seq(g, r, sa, a, 0, P, wa, "prefix", &bad);
    okv_cells_info before = cells_of("fork");
    CHECK_OK(okv_seq_fork("fork", sa, P, &sb, &err), &err);
    okv_cells_info after = cells_of("fork");
    CHECKF(after.used_cells == before.used_cells && after.n_seqs == 2,
           "%s: a fork must copy nothing (%d cells used before, %d after)", g->name, before.used_cells, after.used_cells);
    int len = -1;
    CHECK_OK(okv_seq_len("fork", sb, &len, &err), &err);
    CHECK(len == P);
    /* diverge, interleaved token by token in one batch each */
    float logits[2 * V];
    for (int t = P; t < P + X && r; t++) {
        int32_t ids[2] = { a[t], b[t] }, seqs[2] = { sa, sb }, pos[2] = { t, t }, rows[2] = { 0, 1 };
        okv_status st = okv_runner_step_batch(r, ids, seqs, pos, 2, rows, 2, logits, &err);
        CHECKF(st == OKV_OK, "%s diverge: %s", g->name, err.message);
        if (st) break;
        check_row(g, logits, wa + (size_t)t * V, "fork: source", sa, t, &bad);
        check_row(g, logits + V, wb + (size_t)t * V, "fork: forked", sb, t, &bad);
    }
    /* rm at the end: a back to 6 (a full cache keeps everything; a windowed
     * one refuses if the keys a step at 6 needs are gone), then c's tail */
    okv_status st = okv_seq_rm("fork", sa, 6, -1, &err);
    if (st == OKV_OK) {
        CHECK_OK(okv_seq_len("fork", sa, &len, &err), &err);
        CHECK(len == 6);
        step_seq(g, r, sa, c, 6, P + X, wc, "rm at the end", &bad);
    } else {
        CHECKF(strstr(err.message, "window") != NULL, "%s: truncation refused for another reason: %s", g->name, err.message);
        /* a fresh fork of the prefix does the same job */
        printf("%s: truncation to 6 refused as expected: %s\n", g->name, err.message);
    }
    CHECKF(bad == 0, "%s: %d rows differ after fork/rm", g->name, bad);
    /* rm in the middle: the positions become holes, the length stays */
    okv_cells_info c0 = cells_of("fork");
    CHECK_OK(okv_seq_rm("fork", sb, P + 2, P + 5, &err), &err);
    okv_cells_info c1 = cells_of("fork");
    CHECK_OK(okv_seq_len("fork", sb, &len, &err), &err);
    CHECK(len == P + X);
    int32_t next = tok(3, P + X), pos = P + X, row = 0;
    float with_hole[V];
    st = okv_runner_step_batch(r, &next, &sb, &pos, 1, &row, 1, with_hole, &err);
    CHECK_OK(st, &err);
    printf("%s: rm [%d, %d) of a %d-token sequence: %d -> %d cells used\n", g->name, P + 2, P + 5, P + X, c0.used_cells,
           c1.used_cells);
    okv_runner_free(r);
    okv_cache_remove("fork", &err);
    free(wa); free(wb); free(wc);
}

/* A batch that needs more cells than are free is refused and changes
 * nothing; so is one with a position that does not continue its sequence. */
static void test_admission(const prog *g) {
    int n_cells = 3 * g->chunk;
    okv_runner *r = cells_runner(g, "full", n_cells, 4);
    okv_error err = {0};
    int s0 = -1, s1 = -1, bad = 0;
    CHECK_OK(okv_seq_new("full", &s0, &err), &err);
    CHECK_OK(okv_seq_new("full", &s1, &err), &err);
    int32_t a[64], b[64];
    for (int j = 0; j < 64; j++) { a[j] = tok(0, j); b[j] = tok(1, j); }
    step_seq(g, r, s0, a, 0, 2 * g->chunk, NULL, "fill", &bad);
    okv_cells_info ci = cells_of("full");
    bool ok = true;
    CHECK_OK(okv_seq_can_extend("full", s1, g->chunk, &ok, &err), &err);
    bool windowed_only = ci.free_cells >= g->chunk;   /* windowed caches drop what left the window */
    if (!windowed_only) {
        CHECKF(ci.free_cells == n_cells - 2 * g->chunk, "%s: %d free cells, expected %d", g->name, ci.free_cells,
               n_cells - 2 * g->chunk);
    }
    /* one more chunk on s1 plus one token on s0 does not fit a full-history cache */
    int32_t ids[64], seqs[64], pos[64], rows[1] = { 0 };
    int T = 0;
    for (int i = 0; i < g->chunk - 1; i++, T++) { ids[T] = b[i]; seqs[T] = s1; pos[T] = i; }
    okv_status st = okv_runner_step_batch(r, ids, seqs, pos, T, rows, 1, NULL, &err);
    CHECK_OK(st, &err);
    ci = cells_of("full");
    T = 0;
    for (int i = 0; i < 2; i++, T++) { ids[T] = b[g->chunk - 1 + i]; seqs[T] = s1; pos[T] = g->chunk - 1 + i; }
    st = okv_runner_step_batch(r, ids, seqs, pos, T, rows, 1, NULL, &err);
    okv_cells_info c2 = cells_of("full");
    if (ci.free_cells < 2) {
        CHECKF(st == OKV_ERR_CAPACITY, "%s: a batch over the free cells must be refused (%d free)", g->name, ci.free_cells);
        CHECK(c2.used_cells == ci.used_cells);
        CHECK_OK(okv_seq_can_extend("full", s1, 2, &ok, &err), &err);
        CHECK(!ok);
        printf("%s: full pool refuses: %s\n", g->name, err.message);
    }
    /* bad position: refused, nothing changes */
    int len0 = -1, len1 = -1;
    CHECK_OK(okv_seq_len("full", s0, &len0, &err), &err);
    CHECK_OK(okv_seq_len("full", s1, &len1, &err), &err);
    int32_t bid[2] = { a[len0], b[len1] }, bseq[2] = { s0, s1 }, bpos[2] = { len0, len1 + 1 };
    st = okv_runner_step_batch(r, bid, bseq, bpos, 2, rows, 1, NULL, &err);
    CHECKF(st == OKV_ERR_INVALID && strstr(err.message, "position"), "%s: gap must be refused: %s", g->name, err.message);
    int l0 = -1, l1 = -1;
    okv_seq_len("full", s0, &l0, &err);
    okv_seq_len("full", s1, &l1, &err);
    okv_cells_info c3 = cells_of("full");
    CHECK(l0 == len0 && l1 == len1 && c3.used_cells == c2.used_cells);
    /* unknown sequence */
    bseq[1] = 3;
    bpos[1] = len1;
    st = okv_runner_step_batch(r, bid, bseq, bpos, 2, rows, 1, NULL, &err);
    CHECK(st == OKV_ERR_INVALID);
    /* freeing a sequence makes room; its id is reused */
    CHECK_OK(okv_seq_free("full", s0, &err), &err);
    okv_cells_info c4 = cells_of("full");
    CHECK(c4.n_seqs == 1 && c4.used_cells < c3.used_cells);
    int s2 = -1;
    CHECK_OK(okv_seq_new("full", &s2, &err), &err);
    CHECK(s2 == s0);
    /* single-sequence calls are refused on a cell key */
    int32_t p0 = 0;
    CHECK(okv_runner_step(r, a, &p0, 1, OKV_LOGITS_LAST, NULL, &err) == OKV_ERR_STATE);
    CHECK(okv_cache_rewind("full", 0, &err) == OKV_ERR_STATE);
    CHECK(bad == 0);
    close_cells(r, "full");
}

int main(void) {
    const char *names[] = { "llama32-tiny", "gemma3-tiny", "gemma4-tiny" };
    okv_runner_options_default(&g_ro);
    for (int i = 0; i < 3; i++) {
        char dir[256], out[64];
        snprintf(dir, sizeof dir, FIXTURES "%s", names[i]);
        snprintf(out, sizeof out, "%s.okv", names[i]);
        char *path = e2e_export(dir, out, OKV_F32, 8);
        if (!path) continue;
        prog g = { NULL, 8, names[i] };
        okv_error err = {0};
        CHECK_OK(okv_program_open(path, &g.p, &err), &err);
        free(path);
        if (!g.p) continue;
        for (int plain = 1; plain >= 0; plain--) {
            g_ro.plain_kernels = plain;
            g_tol = plain ? 1e-5 : 1e-4;
            g_worst = 0;
            test_batched(&g);
            test_fork_rm(&g);
            test_admission(&g);
            printf("%s, %s kernels: largest difference from the sequences run alone: %.3g of the row's scale\n",
                   names[i], plain ? "plain" : "default", g_worst);
        }
        okv_program_free(g.p);
    }
    e2e_cleanup();
    return okv_test_finish();
}
