/* --deterministic (okv_runner_options.deterministic): a row's logits are
 * bit for bit the same whatever else shares its step and whatever the
 * step's size. For every weight dtype (f32, bf16, f16, q8, q4) on a flat
 * (Llama) and a sliding-window (Gemma-3) program, the truth is the tokens
 * run one per step on a single-sequence key; compared with memcmp:
 *   - the same 7 tokens in one T = 7 step (all rows);
 *   - three sequences in one cell-pool key, batched steps mixing a prompt
 *     chunk of one with single tokens of the others, every row returned.
 * The default kernels are run too and their largest difference printed (a
 * row there may legitimately differ with T: AMX/GEMV switch, split K). */
#include "e2e_util.h"

#define N_TOK 7
#define N_SEQ 3

static int g_vocab;

static int32_t tok(int k, int j) { return (int32_t)(1 + (j * 7 + k * 23 + (j * j) % 5) % 60); }

/* [n, vocab] logits of ids run alone, one token per step. */
static float *run_alone(okv_program *p, const okv_runner_options *ro, const int32_t *ids, int n) {
    okv_error err = {0};
    float *out = calloc((size_t)n * g_vocab, sizeof(float));
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("det-alone", p, NULL, &err), &err);
    CHECK_OK(okv_runner_create(p, "det-alone", ro, &r, &err), &err);
    for (int t = 0; r && t < n; t++) {
        int32_t pos = t;
        CHECK_OK(okv_runner_step(r, ids + t, &pos, 1, OKV_LOGITS_LAST, out + (size_t)t * g_vocab, &err), &err);
    }
    okv_runner_free(r);
    okv_cache_remove("det-alone", &err);
    return out;
}

/* The same ids in one step of T = n, all rows. */
static float *run_one_step(okv_program *p, const okv_runner_options *ro, const int32_t *ids, int n) {
    okv_error err = {0};
    float *out = calloc((size_t)n * g_vocab, sizeof(float));
    int32_t pos[N_TOK];
    for (int t = 0; t < n; t++) pos[t] = t;
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("det-step", p, NULL, &err), &err);
    CHECK_OK(okv_runner_create(p, "det-step", ro, &r, &err), &err);
    if (r) CHECK_OK(okv_runner_step(r, ids, pos, n, OKV_LOGITS_ALL, out, &err), &err);
    okv_runner_free(r);
    okv_cache_remove("det-step", &err);
    return out;
}

/* Three sequences stepped together: step 1 = 5 tokens of sequence 0, 1 of
 * 1, 2 of 2; then steps of one token each (sequence 0 stops at N_TOK).
 * got[k] receives sequence k's rows in position order. */
static void run_batched(okv_program *p, const okv_runner_options *ro, int32_t ids[N_SEQ][N_TOK], float *got[N_SEQ]) {
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.mode = OKV_CACHE_CELLS;
    co.max_seqs = 8;
    okv_error err = {0};
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("det-cells", p, &co, &err), &err);
    CHECK_OK(okv_runner_create(p, "det-cells", ro, &r, &err), &err);
    int seq[N_SEQ], done[N_SEQ] = {0};
    for (int k = 0; k < N_SEQ; k++) CHECK_OK(okv_seq_new("det-cells", &seq[k], &err), &err);
    static const int first[N_SEQ] = {5, 1, 2};   /* 8 tokens: the smallest chunk */
    float *logits = malloc(sizeof(float) * 16 * (size_t)g_vocab);
    for (int step = 0; r && step < N_TOK; step++) {
        int32_t bid[16], bseq[16], bpos[16], rows[16], owner[16];
        int T = 0;
        for (int k = N_SEQ - 1; k >= 0; k--) {   /* reversed: the batch order is not the sequence order */
            int want = step == 0 ? first[k] : 1;
            for (int i = 0; i < want && done[k] + i < N_TOK; i++, T++) {
                bid[T] = ids[k][done[k] + i];
                bseq[T] = seq[k];
                bpos[T] = done[k] + i;
                owner[T] = k;
                rows[T] = T;
            }
        }
        if (!T) break;
        okv_status st = okv_runner_step_batch(r, bid, bseq, bpos, T, rows, T, logits, &err);
        CHECK_OK(st, &err);
        if (st) break;
        for (int t = 0; t < T; t++)
            memcpy(got[owner[t]] + (size_t)bpos[t] * g_vocab, logits + (size_t)t * g_vocab, sizeof(float) * g_vocab);
        for (int t = 0; t < T; t++) done[owner[t]]++;
    }
    free(logits);
    okv_runner_free(r);
    okv_cache_remove("det-cells", &err);
}

static int rows_differing(const float *a, const float *b, int n) {
    int bad = 0;
    for (int t = 0; t < n; t++) bad += memcmp(a + (size_t)t * g_vocab, b + (size_t)t * g_vocab, sizeof(float) * g_vocab) != 0;
    return bad;
}

static void check_program(const char *path, const char *what) {
    okv_program *p = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(path, &p, &err), &err);
    if (!p) return;
    okv_program_info info;
    okv_program_get_info(p, &info);
    g_vocab = info.vocab_size;
    for (int det = 1; det >= 0; det--) {
        okv_runner_options ro;
        okv_runner_options_default(&ro);
        ro.n_threads = 2;
        ro.deterministic = det;
        int32_t ids[N_SEQ][N_TOK];
        float *alone[N_SEQ], *got[N_SEQ];
        for (int k = 0; k < N_SEQ; k++) {
            for (int j = 0; j < N_TOK; j++) ids[k][j] = tok(k, j);
            alone[k] = run_alone(p, &ro, ids[k], N_TOK);
            got[k] = calloc((size_t)N_TOK * g_vocab, sizeof(float));
        }
        float *one = run_one_step(p, &ro, ids[0], N_TOK);
        run_batched(p, &ro, ids, got);
        int bad_step = rows_differing(one, alone[0], N_TOK), bad_batch = 0;
        double worst = e2e_max_diff(one, alone[0], (size_t)N_TOK * g_vocab);
        for (int k = 0; k < N_SEQ; k++) {
            bad_batch += rows_differing(got[k], alone[k], N_TOK);
            double d = e2e_max_diff(got[k], alone[k], (size_t)N_TOK * g_vocab);
            if (d > worst) worst = d;
        }
        if (det) {
            CHECKF(bad_step == 0, "%s deterministic: %d of %d rows of the T=7 step differ from T=1 (max %.3g)", what,
                   bad_step, N_TOK, worst);
            CHECKF(bad_batch == 0, "%s deterministic: %d batched rows differ from each sequence alone (max %.3g)", what,
                   bad_batch, worst);
        } else {
            fprintf(stderr, "%s default kernels: %d + %d rows not bit-equal (max diff %.3g)\n", what, bad_step, bad_batch,
                    worst);
        }
        for (int k = 0; k < N_SEQ; k++) { free(alone[k]); free(got[k]); }
        free(one);
    }
    okv_program_free(p);
}

int main(void) {
    static const char *fixtures[] = {"llama32-tiny", "gemma3-tiny"};
    static const int chunks[] = {16, 8};
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        char dir[256], name[256], what[256];
        snprintf(dir, sizeof dir, FIXTURES "%s", fixtures[f]);
        static const struct { const char *tag; okv_dtype dt; int ql; } kinds[] = {
            {"f32", OKV_F32, 0}, {"bf16", OKV_BF16, 0}, {"f16", OKV_F16, 0}, {"q8", OKV_F32, 8}, {"q4", OKV_F32, 4}};
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            okv_export_options o;
            okv_export_options_default(&o);
            o.dtype = kinds[k].dt;
            o.prefill_chunk_size = chunks[f];
            o.qlinear = kinds[k].ql;
            o.qembedding = kinds[k].ql;
            snprintf(name, sizeof name, "%s.%s.okv", fixtures[f], kinds[k].tag);
            char *out = e2e_path(name);
            okv_error err = {0};
            okv_status st = okv_export(dir, out, &o, &err);
            CHECKF(st == OKV_OK, "export %s: %s", name, err.message);
            snprintf(what, sizeof what, "%s %s", fixtures[f], kinds[k].tag);
            if (!st) check_program(out, what);
            free(out);
        }
    }
    e2e_cleanup();
    return okv_test_finish();
}
